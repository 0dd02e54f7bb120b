#!/usr/bin/env python3
"""Where ``placeviz analyze`` spends its time: the load, each pipeline stage, and each part of the report.

Runs the command itself (``placeviz.cli.main``, the GC paused as the command pauses it) in a
fresh process per repetition, with the stage functions wrapped to add up their process CPU
seconds: the load, the graph's own facts (``analysis.analyze``), the placement (setter, placer
and attaching the placed devices to the variables), the sync detection and proof, partitioning
one step, then the report's views (placement, sync, partition/traffic), the rest of
``Analysis.to_json``, the JSON text and the write (or, with ``--format text``, the text report).
A step a stage shares with another one (numpy's import, the graph's topological order) is paid by
the first that asks for it. ``--tree DIR`` times the same steps in another source tree (its C
kernels built), alternating with this one, so that a before/after comparison per step sees the
same load on the machine; ``--cprofile FILE`` writes one run's cProfile instead.

    python benchmarks/analyze_profile.py /work/graphs/g200k.unplaced.pb --ps-tasks 4 --reps 5
    python benchmarks/analyze_profile.py /work/graphs/g200k.unplaced.pb --ps-tasks 4 --reps 5 --tree BEFORE
    python benchmarks/analyze_profile.py /work/graphs/g200k.pb --format text --reps 3

Never imports TensorFlow; never used by tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (module, attribute, step name): the functions ``analyze`` runs through, as ``run_pipeline`` and
# ``commands/analyze.py`` call them. A step that calls another wrapped one includes its time.
STEPS = [
    ("placeviz.io", "load", "load"),
    ("placeviz.pipeline", "analyze", "graph facts (analysis.analyze)"),
    ("placeviz.pipeline", "_place", "place (setter + placer + attach_placement)"),
    ("placeviz.pipeline", "_describe_sync", "sync detect + prove"),
    ("placeviz.pipeline", "_partition_step", "partition one step"),
    ("placeviz.analysis.PlacementStage", "to_json", "view: placement"),
    ("placeviz.analysis.SyncStage", "to_json", "view: sync"),
    ("placeviz.analysis.TrafficStage", "to_json", "view: partition (traffic summary)"),
    ("placeviz.analysis.Analysis", "to_json", "Analysis.to_json (with the views)"),
    ("placeviz.commands.analyze", "format_text", "text report (with the views)"),
    ("placeviz.commands.analyze", "to_json", "JSON text"),
    ("placeviz.commands.analyze", "emit", "write"),
]


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for name in parts[k:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def profile_once(argv: list[str], cprofile: str | None = None) -> dict[str, float]:
    """CPU seconds per step of one ``placeviz analyze ARGV`` in this process."""
    times: dict[str, float] = {}
    t = time.process_time()
    import numpy  # noqa: F401 - every run imports it (the graph's edge arrays): counted here, not in a step

    from placeviz.cli import main
    from placeviz.gcpause import hold_until_exit

    # As the ``placeviz`` program does (placeviz.cli.run): the command's results are held to the
    # end, not freed when it returns (else that teardown shows as the tottime of cli.analyze).
    hold_until_exit()

    for dotted, attr, step in STEPS:
        owner = _resolve(dotted)
        fn = getattr(owner, attr)

        def timed(*args, _fn=fn, _step=step, **kwargs):
            t0 = time.process_time()
            try:
                return _fn(*args, **kwargs)
            finally:
                times[_step] = times.get(_step, 0.0) + time.process_time() - t0

        setattr(owner, attr, timed)
    times["imports"] = time.process_time() - t
    prof = None
    if cprofile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t = time.process_time()
    try:
        main(["analyze", *argv])
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    times["whole command (main)"] = time.process_time() - t
    if prof is not None:
        prof.disable()
        prof.dump_stats(cprofile)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--ps-tasks", type=int, help="as placeviz analyze --ps-tasks N")
    ap.add_argument("--format", dest="fmt", choices=["json", "text"], default="json")
    ap.add_argument("--tree", type=Path, help="another source tree to time alternately (before/after)")
    ap.add_argument("--cprofile", metavar="FILE", help="write one run's cProfile stats to FILE")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        sys.path.insert(0, os.getcwd())  # the tree this child runs in (cwd and PYTHONPATH)
        res = profile_once(args.child, args.cprofile)
        print(json.dumps(res))
        return 0
    trees = [REPO] + ([args.tree.resolve()] if args.tree else [])
    runs: dict[Path, list[dict]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory(prefix="placeviz-analyze-") as tmp:
        command = [str(Path(args.model).resolve()), "--format", args.fmt, "-o", str(Path(tmp) / "out")]
        if args.ps_tasks is not None:
            command += ["--ps-tasks", str(args.ps_tasks)]
        for _ in range(1 if args.cprofile else args.reps):
            for tree in trees:
                extra = ["--cprofile", args.cprofile] if args.cprofile else []
                proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), args.model, *extra,
                                       "--child", *command], capture_output=True, text=True, cwd=tree,
                                      env=dict(os.environ, PYTHONPATH=str(tree)))
                if proc.returncode != 0:
                    raise SystemExit(f"{tree}: {proc.stderr.strip()}")
                runs[tree].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    if args.cprofile:
        print(f"cProfile written to {args.cprofile}")
        return 0
    steps = [step for _, _, step in STEPS] + ["imports", "whole command (main)"]
    print(f"| step (CPU s, median of {args.reps}) | " + " | ".join(str(t) for t in trees) + " |")
    print("|---|" + "---:|" * len(trees))
    for step in steps:
        values = [statistics.median(r.get(step, 0.0) for r in runs[tree]) for tree in trees]
        if max(values) >= 0.001:
            print(f"| {step} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
