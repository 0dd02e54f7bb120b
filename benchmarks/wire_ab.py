"""The C reader's load passes of two trees, alternated in one process: is a ``_wire.c`` change faster?

Usage: ``python benchmarks/wire_ab.py BEFORE_TREE GRAPH.pb [REPS]``, run with ``PYTHONPATH`` set to
the "after" tree. BEFORE_TREE's compiled ``placeviz/_wire*.so`` is loaded next to this tree's (an
extension module's init function is named by the last part of its module name, so both load in one
process) and the three passes ``io.load`` runs on a binary GraphDef are timed alternately on the
same bytes: ``parses`` (the check that lets the load skip ``ParseFromString``), ``scan_graph``
(names, ops, devices, the name index, inputs) and ``read_attrs`` (op-fact attr keys, ``_class``),
with upb's parse (the floor) in the same rounds. CPU medians (min-max), the collector off while a
pass runs; then whether both trees' results are equal. Never used by tests.
"""

from __future__ import annotations

import gc
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import placeviz.io as io
from placeviz import graph as graph_module
from placeviz.protos import GraphDef


def cpu(fn) -> float:
    gc.collect()
    gc.disable()
    t = time.process_time()
    result = fn()
    elapsed = time.process_time() - t
    del result
    gc.enable()
    return elapsed


def other_wire(tree: Path):
    so = next((tree / "placeviz").glob("_wire*.so"), None)
    if so is None:
        raise SystemExit(f"{tree}: no compiled placeviz/_wire*.so (build it there first)")
    spec = importlib.util.spec_from_file_location("before_tree._wire", so)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def comparable(result):
    """A pass's result, with ``scan_graph``'s name index as a dict of every name: a tree's C reader
    hands a dict, or its own ``NameIndex`` (no dict of every name), which answer ``get`` alike."""
    if isinstance(result, tuple) and len(result) == 10:
        names, index = result[0], result[3]
        return (*result[:3], {name: index.get(name) for name in names}, len(index), *result[4:])
    return result


def main(before: Path, path: str, reps: int) -> str:
    if io._wire is None:
        raise SystemExit("this tree's C kernels are not built (or PLACEVIZ_NO_KERNELS is set)")
    trees = {"before": other_wire(before), "after": io._wire}
    data = Path(path).read_bytes()
    schema = io._wire_schema(GraphDef.DESCRIPTOR)
    scanned = io._wire.scan_graph(data)
    if scanned is None:
        raise SystemExit(f"{path}: the C reader declines this graph")
    spans, op_ids, distinct_ops = scanned[7], scanned[8], scanned[9]
    key_attrs = io._default_fact_key_attrs(set(distinct_ops))
    plans = [tuple(a.encode() for a in key_attrs[op]) if op in key_attrs else None for op in distinct_ops]
    canon, decode_class = graph_module._attr_value_key_of_bytes, graph_module._decode_class
    passes = {
        "parses": lambda w: w.parses(data, schema),
        "scan_graph": lambda w: w.scan_graph(data),
        "read_attrs": lambda w: w.read_attrs(data, spans, op_ids, plans, canon, decode_class),
    }
    times: dict[str, list[float]] = {"floor": []}
    for _ in range(reps):
        for tree, wire in trees.items():
            total = 0.0
            for name, run in passes.items():
                elapsed = cpu(lambda run=run, wire=wire: run(wire))
                times.setdefault(f"{name} {tree}", []).append(elapsed)
                total += elapsed
            times.setdefault(f"the three {tree}", []).append(total)
        times["floor"].append(cpu(lambda: GraphDef.FromString(data)))
    lines = [f"{path}: {reps} alternating rounds, CPU s, median (min-max)"]
    for name, values in times.items():
        lines.append(f"  {name:20s} {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})")
    same = all(comparable(run(trees["before"])) == comparable(run(trees["after"])) for run in passes.values())
    lines.append(f"  results equal: {same}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    print(main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 7))
