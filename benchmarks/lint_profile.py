#!/usr/bin/env python3
"""Where ``placeviz lint`` spends its time: the load, the pipeline, and every built-in rule alone.

Runs what ``placeviz lint MODEL`` runs (``placeviz.lint.runner.lint_model``), with each step and
each rule timed in process CPU seconds. Rules run in the registry's order, as the command runs
them, so the first rule that asks for a shared index (the consumers, the raw graph's tables) pays
for building it: the table says which. ``--cprofile RULE`` shows where one rule's time goes.
``--reps N`` repeats the whole run in fresh processes and reports medians.

    python benchmarks/lint_profile.py benchmarks/graphs/g200k.pb
    python benchmarks/lint_profile.py benchmarks/graphs/g200k.pb --reps 3
    python benchmarks/lint_profile.py benchmarks/graphs/g200k.pb --cprofile PV104
    python benchmarks/lint_profile.py benchmarks/graphs/g200k.unplaced.pb --ps-tasks 4

The placement options are the command's own (``--ps-tasks N`` passed through, the other PLACE
options at their defaults), so the pipeline places the graph as ``placeviz lint`` does; the garbage
collector is paused, as the command pauses it (``placeviz.gcpause``).

Never imports TensorFlow; never used by tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cli_placement_options(ps_tasks: int | None):
    """The PLACE options ``placeviz lint MODEL [--ps-tasks N]`` builds (the click defaults)."""
    import click

    from placeviz.commands.place_options import build_placement_options, place_options

    captured: dict = {}

    @click.command()
    @place_options
    def cmd(place):
        captured.update(place)

    cmd.main(["--ps-tasks", str(ps_tasks)] if ps_tasks is not None else [], standalone_mode=False)
    return build_placement_options(captured)


def profile_once(spec: str, cprofile: str | None = None, ps_tasks: int | None = None) -> dict[str, float]:
    """CPU seconds of each step of ``lint_model`` (load, raw graph, pipeline, context, each rule)."""
    sys.path.insert(0, str(REPO))
    t = time.process_time()
    from placeviz.io import load
    from placeviz.lint.discovery import load_rules
    from placeviz.lint.raw import RawGraph
    from placeviz.lint.runner import (
        LintOptions,
        ModelResult,
        _context,
        _run_rule,
        display_path,
        model_pipeline,
    )
    from placeviz.pipeline import Options

    out = {"imports": time.process_time() - t}

    def step(name, fn):
        t0 = time.process_time()
        value = fn()
        out[name] = out.get(name, 0.0) + time.process_time() - t0
        return value

    rules = step("load rules", load_rules)
    placement_options = cli_placement_options(ps_tasks)
    options = LintOptions(pipeline=Options(placement=placement_options))
    model = step("load model", lambda: load(spec))
    # As lint_model makes it: without the GraphDef, which a binary file's load did not parse (a
    # rule that reads the whole GraphDef pays for the parse; passing model.graph_def here would
    # time that parse as this step's and give every rule parsed NodeDefs the command has not).
    raw = step("raw graph", lambda: RawGraph.from_graph(model.graph))
    step("topological order", lambda: model.graph.topological_order)
    pipe = step("pipeline", lambda: model_pipeline(model, rules, options))
    ctx = step("context", lambda: _context(display_path(spec), pipe, raw, options))
    result = ModelResult()
    for r in rules:
        if r.rule.category == "meta" or ctx.missing(r.rule):
            continue
        if cprofile and r.id == cprofile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            _run_rule(r, ctx, result)
            prof.disable()
            pstats.Stats(prof, stream=sys.stderr).sort_stats("cumtime").print_stats(25)
        else:
            step(f"{r.id} {r.name}", lambda r=r: _run_rule(r, ctx, result))
    out["findings"] = len(result.findings)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--cprofile", metavar="RULE", help="a rule ID: its cProfile on stderr")
    ap.add_argument("--ps-tasks", type=int, help="as placeviz lint --ps-tasks N (place an unplaced graph)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child or args.cprofile:
        sys.path.insert(0, str(REPO))
        from placeviz.gcpause import gc_paused

        with gc_paused():
            res = profile_once(args.model, args.cprofile, args.ps_tasks)
        print(json.dumps(res))
        return 0
    runs = []
    for _ in range(args.reps):
        extra = ["--ps-tasks", str(args.ps_tasks)] if args.ps_tasks is not None else []
        proc = subprocess.run([sys.executable, __file__, args.model, "--child", *extra], capture_output=True,
                              text=True, check=True)
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    keys = list(runs[0])
    total = statistics.median(sum(v for k, v in r.items() if k != "findings") for r in runs)
    rules_total = statistics.median(sum(v for k, v in r.items() if k[:2] == "PV") for r in runs)
    print(f"| step (CPU s, median of {args.reps}) | s | share |")
    print("|---|---:|---:|")
    rows = [(k, statistics.median(r[k] for r in runs)) for k in keys if k != "findings"]
    for k, v in sorted(rows, key=lambda kv: -kv[1]):
        if v >= 0.001:
            print(f"| {k} | {v:.3f} | {100 * v / total:.0f}% |")
    print(f"| **all rules** | **{rules_total:.3f}** | {100 * rules_total / total:.0f}% |")
    print(f"| **total** | **{total:.3f}** | |")
    print(f"findings: {runs[0]['findings']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
