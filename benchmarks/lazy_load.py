"""``io.load`` of a binary GraphDef with and without parsing it (``placeviz.io._load_unparsed``).

Usage: ``python benchmarks/lazy_load.py GRAPH.pb [REPS]``. In one process, alternated: the eager
load (``io.LAZY_PARSE = False``), the lazy one, upb's ``ParseFromString`` alone (the parse floor,
warm: lower than a fresh process's) and ``_wire.parses`` alone; CPU medians. Never used by tests.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time

import placeviz.io as io
from placeviz.protos import GraphDef


def cpu(fn) -> float:
    gc.collect()
    t = time.process_time()
    result = fn()
    elapsed = time.process_time() - t
    del result
    return elapsed


def main(path: str, reps: int) -> str:
    data = open(path, "rb").read()
    schema = io._wire_schema(GraphDef.DESCRIPTOR)
    if io._wire is None:
        raise SystemExit("the C kernels are not built (or PLACEVIZ_NO_KERNELS is set): nothing to compare")
    times: dict[str, list[float]] = {"eager": [], "lazy": [], "floor": [], "parses": []}

    def load(lazy: bool):
        io.LAZY_PARSE = lazy
        return io.load(path)

    for _ in range(reps):
        times["eager"].append(cpu(lambda: load(False)))
        times["lazy"].append(cpu(lambda: load(True)))
        times["floor"].append(cpu(lambda: GraphDef.FromString(data)))
        times["parses"].append(cpu(lambda: io._wire.parses(data, schema)))
    med = {k: statistics.median(v) for k, v in times.items()}
    floor = med["floor"]
    return (f"{path}: parse floor {floor:.3f} s, _wire.parses {med['parses']:.3f} s; io.load eager "
            f"{med['eager']:.3f} s ({med['eager'] / floor:.2f}x), lazy {med['lazy']:.3f} s "
            f"({med['lazy'] / floor:.2f}x); {reps} repetitions, CPU medians")


if __name__ == "__main__":
    print(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5))
