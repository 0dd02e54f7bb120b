"""The ``partition`` section of ``analyze``'s report (``placeviz.traffic.traffic_summary``) on graphs
TensorFlow built: variable reads inside a TF1 while loop, and the order of the largest transfers
and of the variable reads (the summary adds up per device pair and sorts without per-item key
functions, ``benchmarks/README.md``, "Analyze's report at pipeline speed")."""

from __future__ import annotations

from test_lint_rules_fixtures import sample
from test_lint_rules_traffic import _graph, _loop

from placeviz.partition import partition
from placeviz.placement import PlacementOptions, place_graph
from placeviz.traffic import traffic_summary


def _step(model):
    """One step of the model's train op, as ``analyze`` partitions it (task level), and its summary:
    the graph is placed by TF's replica_device_setter already, so the placer alone runs."""
    placed = place_graph(model.graph, PlacementOptions())
    targets = list(model.collections.train_ops)
    assert targets
    parts = partition(placed.graph, placed.placement.devices, targets=targets, level="task")
    run = {"fetches": [], "targets": targets, "feeds": [], "what": "one step of the train op"}
    return parts, traffic_summary(placed.graph, parts, run)


def _frames(model) -> set[str]:
    """The frame names of the graph's ``Enter`` nodes, as TF wrote them."""
    return {n.attr["frame_name"].s.decode() for n in model.graph_def.node if n.op in ("Enter", "RefEnter")}


def test_a_read_inside_a_while_loop_is_counted_per_iteration_of_tfs_frame():
    inside = _graph("loop-read-inside", _loop(True))
    frames = _frames(inside)
    assert len(frames) == 1
    section = _step(inside)[1]
    reads = {r["variable"]: r for r in section["variable_reads"]}
    assert reads["w"]["per_iteration_of"] == sorted(frames)
    assert any("once per iteration" in note for note in section["notes"])

    once = _graph("loop-read-once", _loop(False))  # w read once, before the loop
    assert _frames(once) == frames
    section = _step(once)[1]
    reads = {r["variable"]: r for r in section["variable_reads"]}
    assert reads["w"]["per_iteration_of"] is None
    assert not any("once per iteration" in note for note in section["notes"])


def test_largest_transfers_and_variable_reads_are_in_the_documented_order():
    """``top_transfers``: the largest task-level transfers of a tensor, equal sizes in the
    partitioner's order; ``variable_reads``: most bytes first, then by name."""
    parts, section = _step(sample("inception"))
    data = [t for t in parts.transfers if t["level"] == "task" and t["slot"] != "control"]
    assert len(data) > 10
    largest = sorted(data, key=lambda t: -(t["bytes"] or 0))[:10]
    keys = ("src", "slot", "src_device", "dst_device", "dtype", "shape", "bytes")
    assert section["top_transfers"] == [{k: t[k] for k in keys} for t in largest]
    reads = section["variable_reads"]
    assert len(reads) > 1
    assert reads == sorted(reads, key=lambda r: (-r["bytes_per_step"], r["variable"]))
    assert len({r["bytes_per_step"] for r in reads}) < len(reads)  # ties, ordered by name
    assert sum(r["reads_per_step"] for r in reads) <= len(data)
