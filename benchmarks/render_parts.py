#!/usr/bin/env python3
"""Where ``placeviz render`` spends its CPU: the pipeline, the view builds, the DOT text, ``dot``.

Runs ``placeviz render ARGS`` in this process as the program runs it (``placeviz.cli.main`` after
``hold_until_exit``, so results are held to the end as ``placeviz.cli.run`` holds them), with
the pipeline's stages, the view builds, the DOT text and the Graphviz runs wrapped in
``time.process_time`` counters, and prints one line of CPU seconds per part on stderr. ``dot``'s
own CPU is the ``os.times`` children's (render's target is "N x the parse floor + dot"), and
``main after run`` is what the command costs after its last line (frees, the collector's pass).
Compare trees by running it alternately, e.g.::

    for t in BEFORE AFTER BEFORE AFTER; do (cd $t && PYTHONPATH=$t python /PATH/TO/benchmarks/render_parts.py \\
        /work/graphs/g200k.unplaced.pb --ps-tasks 4 --view devices -o /tmp/x.svg); done

Never imports TensorFlow; never used by tests.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import time

PARTS = [("placeviz.pipeline", "run_pipeline"), ("placeviz.pipeline", "load"), ("placeviz.pipeline", "analyze"),
         ("placeviz.pipeline", "_place"), ("placeviz.pipeline", "_describe_sync"),
         ("placeviz.pipeline", "_partition_step"), ("placeviz.render", "build_view"),
         ("placeviz.render.fit", "to_dot"), ("placeviz.render.layout", "run_graphviz")]
"""(module, function) pairs timed; each is looked up where its callers find it at call time."""


def _wrap(cpu: dict[str, float], module: str, name: str) -> None:
    m = importlib.import_module(module)
    f = getattr(m, name)

    @functools.wraps(f)
    def timed(*args, **kwargs):
        started = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            cpu[name] = cpu.get(name, 0.0) + time.process_time() - started

    setattr(m, name, timed)


def main(args: list[str]) -> None:
    started = time.process_time()
    from placeviz import cli
    from placeviz.commands import render
    from placeviz.gcpause import hold_until_exit

    hold_until_exit()
    cpu: dict[str, float] = {}
    for module, name in PARTS:
        _wrap(cpu, module, name)
    render.run_pipeline = sys.modules["placeviz.pipeline"].run_pipeline  # imported by name there
    command = render.run
    ended: list[float] = []

    def run(*a, **k):
        try:
            return command(*a, **k)
        finally:
            ended.append(time.process_time())

    render.run = run
    imports = time.process_time() - started
    started = time.process_time()
    try:
        cli.main(["render", *args])
    except SystemExit:
        pass
    done = time.process_time()
    children = os.times()
    lines = [f"imports {imports:.3f}", f"main {done - started:.3f}",
             f"dot (children) {children.children_user + children.children_system:.3f}"]
    lines += [f"{name} {seconds:.3f}" for name, seconds in cpu.items()]
    lines.append(f"render's own (main - run_pipeline) {done - started - cpu['run_pipeline']:.3f}")
    if ended:
        lines.append(f"main after run {done - ended[0]:.3f}")
    print("; ".join(lines), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
