"""Time the setter stage and, inside it, the ``group`` split (``setter._split_groups`` with its
result graph), in process, CPU seconds, median of the repetitions.

The split is the part of the setter that ``placeviz/group.py`` (TF's ``group`` rule) serves; the
rest of the stage (the replay, in C) does not depend on it. Run it in two trees alternately, in one
window, to compare them (``benchmarks/README.md``, "TF's `group` split written once").

Example:
  PYTHONPATH=. python benchmarks/group_split.py /work/graphs/g200k.unplaced.pb --reps 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graph", type=Path, help="an unplaced GraphDef (a generated NAME.unplaced.pb)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--ps-tasks", type=int, default=4)
    args = ap.parse_args(argv)

    from placeviz.io import load
    from placeviz.ops import load_op_table
    from placeviz.placement import setter

    graph = load(args.graph).graph
    op_table = load_op_table()
    config = setter.SetterConfig(ps_tasks=args.ps_tasks, worker_device="/job:worker/task:0")
    split = setter._split_groups
    spent: list[float] = []

    def timed(*a, **k):  # noqa: ANN002, ANN003, ANN202 - a pass-through
        start = time.process_time()
        try:
            return split(*a, **k)
        finally:
            spent.append(time.process_time() - start)

    setter._split_groups = timed
    setter.run_setter(graph, config, op_table)  # warm: op facts, caches a command would have
    stage: list[float] = []
    spent.clear()
    for _ in range(args.reps):
        start = time.process_time()
        setter.run_setter(graph, config, op_table)
        stage.append(time.process_time() - start)
    print(f"{args.graph.name}: setter stage {statistics.median(stage):.3f} s, group split "
          f"{statistics.median(spent):.3f} s (CPU, median of {args.reps})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
