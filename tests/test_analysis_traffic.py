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


def _reference_summary(graph, parts) -> dict:
    """The summary's sums, added up from the transfer dicts one by one (what it was before the
    transfers were columns): per task pair, per variable, and the counts."""
    from collections import defaultdict

    from placeviz.devices import task_of
    from placeviz.traffic import variable_behind

    pairs: dict = defaultdict(lambda: [0, 0, 0, 0])
    reads: dict = defaultdict(lambda: [0, 0, 0, set()])
    task = [t for t in parts.transfers if t["level"] == "task"]
    for t in task:
        row = pairs[(task_of(t["src_device"], replica=True), task_of(t["dst_device"], replica=True))]
        row[0] += 1
        row[1] += t["slot"] == "control"
        row[2] += t["bytes"] or 0
        row[3] += t["slot"] != "control" and t["bytes"] is None
        var = variable_behind(graph, t["src"]) if t["slot"] != "control" else None
        if var is not None:
            r = reads[var]
            r[0] += 1
            r[1] += t["bytes"] or 0
            r[2] += t["bytes"] is None
            r[3].add(task_of(t["dst_device"], replica=True))
    return {"transfers": len(task), "control": sum(t["slot"] == "control" for t in task),
            "pairs": {k: v for k, v in sorted(pairs.items())},
            "reads": {v: [r[0], r[1], r[2], sorted(r[3])] for v, r in reads.items()}}


def test_the_summary_from_the_columns_adds_up_the_transfers(kernel_mode):
    """``traffic_summary`` reads the transfers' columns (numpy group-bys per device pair and per
    variable): the same sums as adding up the transfer dicts one by one, with the C cut and with
    the Python one."""
    model = sample("inception")
    parts, section = _step(model)
    placed_graph = parts._builder.graph
    ref = _reference_summary(placed_graph, parts)
    assert section["transfers"] == ref["transfers"] and section["control_transfers"] == ref["control"]
    assert {(p["src_task"], p["dst_task"]): [p["transfers"], p["control"], p["bytes"], p["unknown_bytes"]]
            for p in section["task_pairs"]} == ref["pairs"]
    assert {r["variable"]: [r["reads_per_step"], r["bytes_per_step"], r["unknown_size_reads"], sorted(r["to_tasks"])]
            for r in section["variable_reads"]} == ref["reads"]
    assert section["unknown_size_transfers"] == sum(p[3] for p in ref["pairs"].values())


def test_the_table_its_records_and_index_json_agree(kernel_mode):
    """The transfers kept as columns (``PartitionResult.table``) and as dicts (``transfers``, made
    from them) are the same transfers: the CLI's totals, the levels, and ``index.json``, which the
    CLI writes from the columns (compact) and from the dicts (``--pretty``), byte for byte; sized
    with ``--batch-size`` (``assume_batch``), the rows carry ``assumed_batch`` and the JSON the key."""
    from placeviz.commands.output import to_json_pieces
    from placeviz.partition.transfers import COLUMNS
    from placeviz.traffic import assume_batch

    model = sample("inception")
    placed = place_graph(model.graph, PlacementOptions())
    parts = partition(placed.graph, placed.placement.devices, targets=list(model.collections.train_ops))
    table, records = parts.table, parts.transfers
    assert len(records) == len(table) > 0
    assert [r["level"] for r in records] == table.levels()
    assert table.totals() == (len(records), sum(r["bytes"] or 0 for r in records),
                              sum(r["slot"] != "control" and r["bytes"] is None for r in records),
                              sum(r["slot"] == "control" for r in records))
    for pretty in (False, True):
        assert b"".join(to_json_pieces(parts.to_json(columns=True), pretty=pretty)) == \
            b"".join(to_json_pieces(parts.to_json(), pretty=pretty))
    # A step fed a batch of unknown size: one row [None, 3] float32 among the partition's rows.
    row = [table.columns[k][0] for k in range(len(table.columns))]
    row[COLUMNS.index("slot")], row[COLUMNS.index("dtype")], row[COLUMNS.index("shape")] = 0, "float32", [None, 3]
    row[COLUMNS.index("bytes")] = None
    table.append(*row)
    parts.table = assume_batch(table, 32)
    sized = [r for r in parts.transfers if "assumed_batch" in r]
    assert len(sized) == 1 and sized[0]["bytes"] == 32 * 3 * 4 and list(sized[0])[-1] == "assumed_batch"
    assert b"".join(to_json_pieces(parts.to_json(columns=True))) == b"".join(to_json_pieces(parts.to_json()))
    assert table.records()[-1]["bytes"] is None  # the partition's own table is not changed


def _behind_one_by_one(graph, i: int) -> int:
    """The variable node ``i`` reads, walked node by node as the rule says (``variable_behind``):
    a variable is itself; a read (Identity, ReadVariableOp, Enter, Switch...) is what its first
    data input reads; anything else, or more than 8 steps, reads none (-1)."""
    from placeviz.graph import CONTROL
    from placeviz.op_kinds import VARIABLE_OPS
    from placeviz.traffic import _READ_OPS

    for _ in range(8):
        if i < 0 or i >= len(graph):
            return -1
        if graph.ops[i] in VARIABLE_OPS:
            return i
        if graph.ops[i] not in _READ_OPS:
            return -1
        data = [graph.in_src[k] for k in range(graph.in_start[i], graph.in_start[i + 1]) if graph.in_slot[k] != CONTROL]
        i = data[0] if data else -1
    return -1


def _chains_graph():
    """Reads behind control inputs, a read with no data input, and chains of 7 and 8 reads."""
    from placeviz.graph import Graph
    from placeviz.protos import GraphDef

    gd = GraphDef()
    for name, op, inputs in [("v", "VariableV2", []), ("c", "NoOp", []), ("r", "Identity", ["^c", "v"]),
                             ("lonely", "Identity", ["^v"]), ("s", "Switch", ["r", "c"]), ("other", "Add", ["r", "v"])]:
        node = gd.node.add(name=name, op=op)
        node.input.extend(inputs)
    for depth in (7, 8):
        previous = "v"
        for k in range(depth):
            node = gd.node.add(name=f"chain{depth}_{k}", op="Identity")
            node.input.append(previous)
            previous = node.name
    return Graph.from_graph_def(gd)


def test_the_variables_behind_many_nodes_at_once_are_each_ones_walk():
    """``variables_behind`` walks every origin a step at a time with numpy: the same variable as
    the walk of each node alone, on graphs TF built (a while loop's Enter/Switch included) and on
    reads behind control inputs and chains at the 8-step bound; ids beyond the graph read none."""
    import numpy as np

    from placeviz.traffic import variable_behind, variables_behind

    loop = _graph("loop-read-inside", _loop(True))
    for graph in (sample("inception").graph, loop.graph, _chains_graph()):
        ids = np.arange(len(graph) + 2, dtype=np.int64)
        expected = [_behind_one_by_one(graph, i) for i in ids.tolist()]
        assert variables_behind(graph, ids).tolist() == expected
        assert variables_behind(graph, ids[::-1].copy()).tolist() == expected[::-1]
        assert [variable_behind(graph, name) for name in graph.names] == [
            graph.names[v] if v >= 0 else None for v in expected[:len(graph)]]
    chains = _chains_graph()
    behind = dict(zip(chains.names, variables_behind(chains, np.arange(len(chains), dtype=np.int64)).tolist(),
                      strict=True))
    v = chains.index["v"]
    assert (behind["r"], behind["s"], behind["lonely"], behind["other"]) == (v, v, -1, -1)
    assert (behind["chain7_6"], behind["chain8_7"]) == (v, -1)
