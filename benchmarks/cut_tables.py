"""Time the partition step's cut and the tables it is fed, in process, CPU seconds.

Runs ``placeviz partition GRAPH --ps-tasks N -o DIR`` (``placeviz.cli.main``) in a fresh process
per repetition with ``_GraphPartition.split``, ``_split_originals`` and ``_cut_tables`` wrapped to
add up their process CPU seconds over the command's levels (``_cut_tables`` is inside
``_split_originals``, which is inside ``split``). ``--tree DIR`` runs the same in another source
tree (its C kernels built), alternating with this one, so that a before/after comparison sees the
same load on the machine (``benchmarks/README.md``, "The partition step's tables").

Example:
  python benchmarks/cut_tables.py /work/graphs/g200k.unplaced.pb --reps 4 --tree /tmp/cw/before2
  python benchmarks/cut_tables.py /work/graphs/g1m.unplaced.pb --reps 1 --steps split,_across_partitions

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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STEPS = ("split", "_split_originals", "_cut_tables")

_CHILD = r"""
import contextlib, io, json, os, sys, time
from placeviz.partition import graph_partition as gp
spent = dict.fromkeys(json.loads(sys.argv[3]), 0.0)

def timed(name):
    f = getattr(gp._GraphPartition, name, None)
    if f is None:  # not in this tree
        spent[name] = None
        return
    def run(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            spent[name] += time.process_time() - t
            # the command may leave by os._exit: write the sums as they change
            with open(sys.argv[4], "w") as out:
                json.dump(spent, out)
    setattr(gp._GraphPartition, name, run)

for name in spent:
    timed(name)
from placeviz.cli import main
with contextlib.redirect_stderr(io.StringIO()):
    main(["partition", sys.argv[1], "--ps-tasks", sys.argv[2], "-o", sys.argv[5]])
"""


def run_once(tree: Path, graph: Path, ps_tasks: int, tmp: Path,
             steps: tuple[str, ...] = STEPS) -> dict[str, float | None]:
    """One command in ``tree``: the CPU seconds of each of ``steps`` (methods of ``_GraphPartition``)."""
    out = tmp / "sums.json"
    out.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, "-c", _CHILD, str(graph), str(ps_tasks), json.dumps(steps), str(out),
                    str(tmp / "parts")], env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graph", type=Path)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--ps-tasks", type=int, default=4)
    ap.add_argument("--tree", type=Path, help="another source tree to time alternately (before/after)")
    ap.add_argument("--steps", default=",".join(STEPS),
                    help="the _GraphPartition methods to time, comma-separated (default: %(default)s)")
    args = ap.parse_args(argv)
    steps = tuple(args.steps.split(","))
    trees = [REPO] + ([args.tree.resolve()] if args.tree else [])
    samples: dict[Path, list[dict[str, float | None]]] = {t: [] for t in trees}
    with tempfile.TemporaryDirectory(prefix="placeviz-cut-") as tmp:
        for _ in range(args.reps):
            for tree in trees:
                samples[tree].append(run_once(tree, args.graph.resolve(), args.ps_tasks, Path(tmp), steps))
    print(f"| step (CPU s, median of {args.reps}) | " + " | ".join(str(t) for t in trees) + " |")
    print("|---|" + "---:|" * len(trees))
    for step in steps:
        cells = []
        for t in trees:
            got = [s[step] for s in samples[t]]
            values = [v for v in got if v is not None]
            cells.append(f"{statistics.median(values):.3f}" if len(values) == len(got) else "-")
        print(f"| {step} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
