"""What a partition's transfer readers cost in process, in the tree on ``PYTHONPATH``.

Usage: ``PYTHONPATH=TREE python benchmarks/transfer_readers.py GRAPH.pb [REPS]``, run from TREE;
alternate two trees by running it in each in turn (the loop in ``benchmarks/README.md``, "Issue
18: the transfers as columns"). One ``placeviz partition GRAPH --ps-tasks 4 -o TMP`` runs in this
process, its result held as the program holds it (``placeviz.gcpause``); then, REPS times each,
alternating, the collector off: ``index.json``'s compact text as that tree's CLI makes it (from
the transfer table's columns when the tree has ``PartitionResult.table``, else from the dicts),
the CLI's totals line, and the traffic summary (``analyze``'s partition view, here over the
device-level step's transfers). Prints the CPU seconds (min, median) per reader as JSON. Never
imports TensorFlow; never used by tests.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import tempfile
import time


def main(graph_path: str, reps: int) -> dict[str, list[float]]:
    from placeviz import gcpause
    from placeviz.cli import main as cli_main
    from placeviz.commands.output import to_json_pieces
    from placeviz.traffic import traffic_summary

    gcpause.hold_until_exit()
    try:
        cli_main(["--quiet", "partition", graph_path, "--ps-tasks", "4", "-o", tempfile.mkdtemp() + "/parts"])
    except SystemExit:
        pass
    held = [o for objects in gcpause._kept or [] for o in objects]
    parts = next(o for o in held if type(o).__name__ == "PartitionResult")
    columns = hasattr(parts, "table")
    graph = parts._builder.graph

    def index() -> int:
        document = parts.to_json(columns=True) if columns else parts.to_json()
        return sum(len(piece) for piece in to_json_pieces(document))

    def totals() -> tuple[int, ...]:
        if columns:
            return parts.table.totals()
        t = parts.transfers
        return (len(t), sum(x["bytes"] or 0 for x in t),
                sum(1 for x in t if x["slot"] != "control" and x["bytes"] is None),
                sum(1 for x in t if x["slot"] == "control"))

    readers = {"index.json text": index, "CLI totals": totals,
               "traffic summary": lambda: traffic_summary(graph, parts, {})}
    times: dict[str, list[float]] = {k: [] for k in readers}
    gc.disable()
    for _ in range(reps):
        for name, reader in readers.items():
            t = time.process_time()
            reader()
            times[name].append(time.process_time() - t)
    return {k: [round(min(v), 4), round(statistics.median(v), 4)] for k, v in times.items()}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5)))
