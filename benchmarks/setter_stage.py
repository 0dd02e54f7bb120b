"""The setter stage as a command runs it, cold, in two trees alternately: is a setter change faster?

Each run is a fresh process (``PYTHONPATH`` = the tree) that loads the graph, then times, in CPU
seconds with the collector paused as the commands pause it: ``Graph.colocated_name_ids`` (the
located names' ids, which the C replay and then the placer read; computed once per graph) and
``placement.setter_stage`` (``read_fact_attrs``, the replay, the ``group`` split, the notes),
``--ps-tasks`` 4, round robin. ``benchmarks/group_split.py`` repeats the stage on one loaded graph
instead (warm: the ids are then computed already). Prints the medians per tree and each run.

Usage: ``python benchmarks/setter_stage.py BEFORE_TREE AFTER_TREE GRAPH.unplaced.pb [ROUNDS]``.
Never used by tests.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import gc, json, sys, time
gc.disable()
import numpy  # noqa: F401 - every command imports it before the stage: not counted here
from placeviz.io import load
from placeviz.ops import load_op_table
from placeviz.placement import PlacementOptions, setter_stage
from placeviz.placement.setter import SetterConfig

graph = load(sys.argv[1]).graph
op_table = load_op_table()
options = PlacementOptions(setter=SetterConfig(ps_tasks=4, worker_device="/job:worker/task:0"))
t = time.process_time()
graph.colocated_name_ids
ids = time.process_time() - t
t = time.process_time()
setter_stage(graph, options, op_table)
print(json.dumps({"colocated_name_ids": ids, "setter_stage": time.process_time() - t}))
"""


def run(tree: Path, graph: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(graph)], env=env, cwd=tree, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    trees = [Path(argv[0]).resolve(), Path(argv[1]).resolve()]
    graph, rounds = Path(argv[2]).resolve(), int(argv[3]) if len(argv) > 3 else 5
    runs: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    for _ in range(rounds):
        for tree in trees:
            runs[tree].append(run(tree, graph))
    print(f"{graph.name}: CPU s, median of {rounds} alternating cold runs (each)")
    for tree, results in runs.items():
        cells = []
        for step in ("colocated_name_ids", "setter_stage"):
            values = [r[step] for r in results]
            cells.append(f"{step} {statistics.median(values):.3f} ({' / '.join(f'{v:.3f}' for v in values)})")
        total = statistics.median(r["colocated_name_ids"] + r["setter_stage"] for r in results)
        print(f"  {tree}: " + "; ".join(cells) + f"; both {total:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
