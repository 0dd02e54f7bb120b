"""Time ``placeviz partition -o DIR``'s write side, stage by stage, on one partitioned graph.

Load, place and partition run once (untimed); then, per repetition and in the order given, each
stage of the write side is timed on its own (user + system CPU of this process, and wall time):

* ``graphdefs``: every partition's bytes (``PartitionResult.iter_serialized(pieces=True)``), made
  and dropped, nothing written;
* ``index``: ``index.json``'s text in pieces (``to_json_pieces``), compact (``index-pretty``:
  indented, ``--pretty``);
* ``write``: the whole ``write_directory`` as the command calls it (bytes, index, files, fsyncs);
* ``write-nofsync``: the same with ``os.fsync`` made a no-op, to show what the fsyncs cost (never
  what placeviz does: see ``placeviz/io.py``, "writing").

The stages alternate inside each repetition, so a host whose load moves affects them alike.

Example:
  python benchmarks/write_profile.py /work/graphs/g200k.unplaced.pb --reps 5 --out /tmp/parts
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

STAGES = ("graphdefs", "index", "index-pretty", "write", "write-nofsync")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graph", type=Path, help="an unplaced .pb (placed with --ps-tasks)")
    ap.add_argument("--ps-tasks", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {', '.join(STAGES)}")
    ap.add_argument("--out", type=Path, required=True, help="the output directory (replaced every repetition)")
    args = ap.parse_args(argv)
    stages = args.stages.split(",")
    unknown = set(stages) - set(STAGES)
    if unknown:
        ap.error(f"unknown stages: {', '.join(sorted(unknown))}")

    from placeviz.commands import partition as command
    from placeviz.commands.output import to_json_pieces
    from placeviz.io import load, write_directory
    from placeviz.partition import partition
    from placeviz.placement import PlacementOptions, place_graph
    from placeviz.placement.setter import SetterConfig

    model = load(str(args.graph), keep_bytes=True)
    options = PlacementOptions(setter=SetterConfig(ps_tasks=args.ps_tasks, worker_device="/job:worker/task:0"))
    result = place_graph(model.graph, options)
    parts = partition(result.graph, result.placement.devices, level="device",
                      client_device=options.placer.client_device, attr_keys=result.placement.attr_keys)
    del result
    names = command.partition_file_names(parts.keys)

    def index(pretty: bool):
        doc = parts.to_json(columns=True)  # as the command makes it (its transfers as columns)
        for entry in doc["partitions"]:
            entry["file"] = names[entry["device"]]
        return to_json_pieces(doc, pretty=pretty)

    def files():
        for device, pieces in parts.iter_serialized(pieces=True):
            yield names[device], pieces
        yield command.INDEX, index(False)

    def write() -> None:
        write_directory(args.out, files(), replaceable=command.is_partition_output, kind=command.KIND)

    def write_nofsync() -> None:
        real = os.fsync
        os.fsync = lambda fd: None
        try:
            write()
        finally:
            os.fsync = real

    def consume(pieces) -> int:
        return sum(len(p) for p in pieces)

    run = {"graphdefs": lambda: sum(consume(p) for _, p in parts.iter_serialized(pieces=True)),
           "index": lambda: consume(index(False)), "index-pretty": lambda: consume(index(True)),
           "write": write, "write-nofsync": write_nofsync}
    times: dict[str, list[tuple[float, float]]] = {s: [] for s in stages}
    print(f"{args.graph.name}: {parts.node_count:,} nodes in {len(names)} partitions; {args.reps} repetitions")
    for _ in range(args.reps):
        for s in stages:
            c0, w0 = _cpu(), time.perf_counter()
            run[s]()
            times[s].append((_cpu() - c0, time.perf_counter() - w0))
    print(f"{'stage':<15} {'CPU s median':>12} {'wall s median':>13}   CPU s each")
    for s in stages:
        cpu = [c for c, _ in times[s]]
        wall = [w for _, w in times[s]]
        print(f"{s:<15} {statistics.median(cpu):>12.3f} {statistics.median(wall):>13.3f}   "
              + " ".join(f"{c:.3f}" for c in cpu))
    size = sum(p.stat().st_size for p in args.out.iterdir()) if args.out.is_dir() else 0
    print(f"written: {size:,} bytes in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
