"""Pruning and partitioning on hand-built graphs: TF's graph_partition_test.cc scenarios and more.

Devices follow graph_partition_test.cc: a node's device comes from the first letter of its name
(``A`` -> CPU:0, ``B`` -> CPU:1, ``C`` -> CPU:2, ``G`` -> GPU:0 of ``/job:a/replica:0/task:0``).
``session="direct"`` partitions once by device with DirectSession's ``<prefix>/_<n>`` names, so
the expected node names are the ones TF's own test (and docs/tf-behaviours.md) lists. The two-level
distributed form (``_S``/``_G``) has its own tests below. Only the last test needs TensorFlow.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import run_cli

from placeviz.graph import Graph
from placeviz.partition import PartitionError, PruneError, parse_run, partition, prune, prune_mask
from placeviz.protos import GraphDef, NodeDef

TASK = "/job:a/replica:0/task:0"
DEV = {"A": f"{TASK}/device:CPU:0", "B": f"{TASK}/device:CPU:1", "C": f"{TASK}/device:CPU:2",
       "G": f"{TASK}/device:GPU:0"}
DT_FLOAT, DT_INT32, DT_STRING, DT_BOOL = 1, 3, 7, 10


# ------------------------------------------------------------------------------------ helpers
def node(name: str, op: str, *inputs: str, device: str | None = None, **attrs) -> NodeDef:
    nd = NodeDef(name=name, op=op, input=list(inputs))
    nd.device = device if device is not None else DEV.get(name[0], "")
    for key, value in attrs.items():
        av = nd.attr[key]
        if key in ("T", "dtype", "out_type", "Tshape", "index_type", "DstT", "SrcT", "out_idx"):
            av.type = value
        elif isinstance(value, bool):
            av.b = value
        elif isinstance(value, int):
            av.i = value
        elif isinstance(value, str):
            av.s = value.encode()
        elif isinstance(value, list):
            av.shape.CopyFrom(_shape(value))
        else:
            raise TypeError(key)
    return nd


def _shape(dims):
    from placeviz.protos import TensorShapeProto

    s = TensorShapeProto()
    for d in dims:
        s.dim.add().size = d
    return s


def const(name: str, shape=(), dtype=DT_FLOAT, device: str | None = None, *control: str) -> NodeDef:
    nd = node(name, "Const", *[f"^{c}" for c in control], device=device, dtype=dtype)
    tensor = nd.attr["value"].tensor
    tensor.dtype = dtype
    for d in shape:
        tensor.tensor_shape.dim.add().size = d
    return nd


def add(name: str, x: str, y: str, *control: str) -> NodeDef:
    return node(name, "AddV2", x, y, *[f"^{c}" for c in control], T=DT_FLOAT)


def noop(name: str, *control: str, device: str | None = None) -> NodeDef:
    return node(name, "NoOp", *[f"^{c}" for c in control], device=device)


def graph_of(*nodes: NodeDef) -> Graph:
    gd = GraphDef()
    gd.node.extend(nodes)
    return Graph(gd)


def run(graph: Graph, **kw):
    kw.setdefault("session", "direct")
    kw.setdefault("incarnation", lambda _d: 82)  # graph_partition_test: '/' - 'A' + 100
    return partition(graph, list(graph.devices), **kw)


def by_name(result, key: str) -> dict[str, NodeDef]:
    return {n.name: n for n in result.graph_defs(importable=False)[key].node}


def names(result, key: str) -> list[str]:
    return [n.name for n in result.graph_defs(importable=False)[key].node]


def attr(nd: NodeDef, key: str):
    av = nd.attr[key]
    return getattr(av, av.WhichOneof("value"))


# ------------------------------------------------------------------------ graph_partition_test
def test_single_device():
    g = graph_of(const("A1"), add("A2", "A1", "A1"))
    r = run(g)
    assert r.keys == [DEV["A"]]
    assert names(r, DEV["A"]) == ["A1", "A2"]
    assert list(by_name(r, DEV["A"])["A2"].input) == ["A1", "A1"]
    assert r.transfers == []


def test_cross_device_data():
    g = graph_of(const("A1"), const("B1"), add("B2", "A1", "B1"))
    r = run(g)
    assert r.keys == [DEV["A"], DEV["B"]]
    assert names(r, DEV["A"]) == ["A1", "A1/_0"]
    assert names(r, DEV["B"]) == ["B1", "B2", "A1/_1"]
    a, b = by_name(r, DEV["A"]), by_name(r, DEV["B"])
    send, recv = a["A1/_0"], b["A1/_1"]
    assert (send.op, list(send.input), send.device) == ("_Send", ["A1"], DEV["A"])
    assert (recv.op, list(recv.input), recv.device) == ("_Recv", [], DEV["B"])
    for nd in (send, recv):
        assert attr(nd, "tensor_name") == attr(send, "tensor_name")
        assert attr(nd, "tensor_name").endswith(b"_A1") and attr(nd, "tensor_name").startswith(b"edge_")
        assert attr(nd, "send_device") == DEV["A"].encode()
        assert attr(nd, "recv_device") == DEV["B"].encode()
        assert nd.attr["send_device_incarnation"].i == 82
        assert nd.attr["client_terminated"].b is False
        assert attr(nd, "_src") == b"A1" and attr(nd, "_dst") == b"B2"
    assert send.attr["T"].type == DT_FLOAT and recv.attr["tensor_type"].type == DT_FLOAT
    assert list(b["B2"].input) == ["A1/_1", "B1"]
    (t,) = r.transfers
    assert (t["src"], t["slot"], t["src_device"], t["dst_device"], t["dtype"]) == ("A1", 0, DEV["A"], DEV["B"],
                                                                                 "float32")
    assert (t["shape"], t["bytes"], t["send"], t["recv"], t["level"]) == ([], 4, "A1/_0", "A1/_1", "device")


def test_cross_device_control():
    g = graph_of(const("A1"), const("B1"), add("B2", "B1", "B1", "A1"))
    r = run(g)
    assert names(r, DEV["A"]) == ["A1", "A1/ctrl/_0", "A1/_1"]
    assert names(r, DEV["B"]) == ["B1", "B2", "A1/_2", "A1/_3"]
    a, b = by_name(r, DEV["A"]), by_name(r, DEV["B"])
    dummy = a["A1/ctrl/_0"]
    assert (dummy.op, list(dummy.input), dummy.attr["dtype"].type) == ("Const", ["^A1"], DT_FLOAT)
    assert [d.size for d in dummy.attr["value"].tensor.tensor_shape.dim] == [0]
    assert list(a["A1/_1"].input) == ["A1/ctrl/_0"]
    assert b["A1/_2"].op == "_Recv" and b["A1/_3"].op == "Identity"
    assert list(b["A1/_3"].input) == ["A1/_2"]
    assert list(b["B2"].input) == ["B1", "B1", "^A1/_3"]
    (t,) = r.transfers
    assert (t["src"], t["slot"], t["bytes"]) == ("A1", "control", 0)


def test_cross_device_data_multi_use():
    g = graph_of(const("A1"), const("B1"), add("B2", "A1", "B1"), add("B3", "A1", "A1"))
    r = run(g)
    assert names(r, DEV["A"]) == ["A1", "A1/_0"]
    assert names(r, DEV["B"]) == ["B1", "B2", "A1/_1", "B3"]
    b = by_name(r, DEV["B"])
    assert list(b["B2"].input) == ["A1/_1", "B1"]
    assert list(b["B3"].input) == ["A1/_1", "A1/_1"]
    assert len(r.transfers) == 1


def test_cross_device_control_multi_use():
    g = graph_of(const("A1"), const("B1"), add("B2", "B1", "B1", "A1"), noop("B3", "A1"))
    r = run(g)
    assert names(r, DEV["A"]) == ["A1", "A1/ctrl/_0", "A1/_1"]
    assert names(r, DEV["B"]) == ["B1", "B2", "A1/_2", "A1/_3", "B3"]
    b = by_name(r, DEV["B"])
    assert list(b["B2"].input) == ["B1", "B1", "^A1/_3"]
    assert list(b["B3"].input) == ["^A1/_3"]
    assert len(r.transfers) == 1


def test_cross_device_data_and_control_are_separate_pairs():
    g = graph_of(const("A1"), const("B1"), add("B2", "A1", "B1"), noop("B3", "A1"))
    r = run(g)
    assert names(r, DEV["A"]) == ["A1", "A1/_0", "A1/ctrl/_2", "A1/_3"]
    assert names(r, DEV["B"]) == ["B1", "B2", "A1/_1", "B3", "A1/_4", "A1/_5"]
    b = by_name(r, DEV["B"])
    assert list(b["B2"].input) == ["A1/_1", "B1"]
    assert list(b["B3"].input) == ["^A1/_5"]
    assert [(t["src"], t["slot"], t["send"], t["recv"]) for t in r.transfers] == [
        ("A1", 0, "A1/_0", "A1/_1"), ("A1", "control", "A1/_3", "A1/_4")]


def test_partition_incomplete_graph_is_a_clean_error():
    g = graph_of(const("A1"), node("B2", "AddV2", "A1", T=DT_FLOAT))
    with pytest.raises(PartitionError, match="Incomplete graph, missing 1 inputs for B2"):
        run(g)


def _cross_device_loop(with_loop_cond: bool = True) -> Graph:
    """graph_partition_test CrossDeviceLoop: A1 -> Enter A2 -> Merge A3 <- NextIteration A5 <- B1."""
    nodes = [
        const("A1", dtype=DT_BOOL),
        node("A2", "Enter", "A1", T=DT_BOOL, frame_name="foo"),
        node("A3", "Merge", "A2", "A5", T=DT_BOOL, N=2),
        node("B1", "Identity", "A3", T=DT_BOOL),
        node("A5", "NextIteration", "B1", T=DT_BOOL),
    ]
    if with_loop_cond:
        nodes.insert(3, node("A4", "LoopCond", "A3"))
    return graph_of(*nodes)


def test_cross_device_loop_gets_control_loops_on_every_device():
    r = run(_cross_device_loop())
    assert len(r.keys) == 2
    for key, gd in r.graph_defs(importable=False).items():
        cloop = {n.op for n in gd.node if n.name.startswith("_cloop")}
        assert cloop == {"Enter", "Merge", "Switch", "NextIteration"}, key
        for n in gd.node:
            if n.op == "_Recv":
                assert any(i.startswith("^") for i in n.input), n
    assert sorted(lp["device"] for lp in r.control_loops) == [DEV["A"], DEV["B"]]
    assert all(lp["frame"] == "foo" and lp["loop_cond"] == "A4" for lp in r.control_loops)
    # the control loop's Switch reads the LoopCond on the other device
    assert any(t["src"] == "A4" and t["dst_device"] == DEV["B"] for t in r.transfers)


def test_cross_device_loop_without_loop_cond_is_refused():
    with pytest.raises(PartitionError, match="A cross-device loop must have a pivot predicate: foo"):
        run(_cross_device_loop(with_loop_cond=False))


def test_loop_on_one_device_needs_no_control_loop():
    g = graph_of(
        const("A1", dtype=DT_BOOL),
        node("A2", "Enter", "A1", T=DT_BOOL, frame_name="foo"),
        node("A3", "Merge", "A2", "A5", T=DT_BOOL, N=2),
        node("A4", "LoopCond", "A3"),
        node("A6", "Identity", "A3", T=DT_BOOL),
        node("A5", "NextIteration", "A6", T=DT_BOOL),
    )
    r = run(g)
    assert r.control_loops == [] and r.transfers == []


def test_switch_exit_enter_next_iteration_move_like_tf():
    """OptimizeControlFlowColocation: Switch -> its data input's device, Enter -> first consumer's."""
    g = graph_of(
        const("A1"), const("A0", dtype=DT_BOOL),
        node("B1", "Switch", "A1", "A0", T=DT_FLOAT),
        node("B2", "Identity", "B1:1", T=DT_FLOAT),
        const("B3", dtype=DT_BOOL),
        node("B4", "Enter", "A1", T=DT_FLOAT, frame_name="f"),
        node("A5", "Identity", "B4", T=DT_FLOAT),
    )
    r = run(g, targets=["B2", "A5"])
    assert r.moved == {"B1": {"from": DEV["B"], "to": DEV["A"]}, "B4": {"from": DEV["B"], "to": DEV["A"]}}
    assert "B1" in r.original_nodes[DEV["A"]] and "B4" in r.original_nodes[DEV["A"]]
    assert [(t["src"], t["slot"]) for t in r.transfers] == [("B1", 1)]


# ------------------------------------------------------------------------------- pruning
def _feed_graph() -> Graph:
    return graph_of(
        node("x", "Placeholder", dtype=DT_FLOAT, shape=[2]),
        node("y", "Identity", "x", T=DT_FLOAT),
        const("c", (2,)),
        noop("side", "x"),
        add("z", "y", "c", "side"),
        add("dead", "z", "z"),
        node("two", "Unique", "c", T=DT_FLOAT, out_idx=DT_INT32),
        node("w", "Identity", "two:1", T=DT_INT32),
    )


def test_prune_keeps_what_fetches_and_targets_reach():
    g = _feed_graph()
    ids = prune(g, fetches=["z"])
    assert {g.names[i] for i in ids} == {"x", "y", "c", "side", "z"}
    assert {g.names[i] for i in prune(g, targets=["side"])} == {"x", "side"}
    assert prune(g) == set(range(len(g)))  # nothing named: the whole graph


def test_prune_fed_tensor_cuts_its_upstream():
    g = _feed_graph()
    names_ = {g.names[i] for i in prune(g, fetches=["z"], feeds=["y"])}
    assert names_ == {"c", "side", "x", "z"}  # x stays: side's control input
    # feeding a placeholder moves its control edges to the feed node: x is gone
    assert {g.names[i] for i in prune(g, fetches=["z"], feeds=["x"])} == {"y", "c", "side", "z"}
    # a node whose other output is still needed stays: feeding two:0 keeps two for two:1
    assert "two" in {g.names[i] for i in prune(g, fetches=["w"], feeds=["two:0"])}
    assert "two" not in {g.names[i] for i in prune(g, fetches=["w"], feeds=["two:1"])}


def test_prune_errors_name_the_node():
    g = _feed_graph()
    with pytest.raises(PruneError, match="fetch 'nope'"):
        prune(g, fetches=["nope:0"])
    with pytest.raises(PruneError, match="feed 'ghost'"):
        prune(g, fetches=["z"], feeds=["ghost"])
    with pytest.raises(PruneError, match="target 'missing'"):
        prune(g, targets=["^missing"])
    with pytest.raises(PruneError, match="malformed"):
        prune(g, fetches=["z:x"])
    with pytest.raises(PruneError, match="more than once"):
        prune(g, fetches=["z"], feeds=["y", "y:0"])
    with pytest.raises(PruneError, match="has only 2 output"):
        partition(g, [DEV["A"]] * len(g), fetches=["two:2"])


def test_errors_are_one_line_placeviz_errors():
    from placeviz.errors import PlacevizError

    g = _feed_graph()
    for kw in ({"fetches": ["nope"]}, {"targets": ["x"], "feeds": ["x:7"]}):
        with pytest.raises(PlacevizError) as info:
            partition(g, [DEV["A"]] * len(g), **kw)
        assert "\n" not in str(info.value) and ("nope" in str(info.value) or "x:7" in str(info.value))


def test_partitioning_does_not_import_tensorflow():
    import subprocess
    import sys

    code = ("import sys\n"
            "from placeviz.graph import Graph\n"
            "from placeviz.protos import GraphDef, NodeDef\n"
            "from placeviz.partition import partition\n"
            "gd = GraphDef()\n"
            "gd.node.add(name='a', op='NoOp', device='/job:ps/replica:0/task:0/device:CPU:0')\n"
            "gd.node.add(name='b', op='NoOp', input=['^a'], device='/job:worker/replica:0/task:0/device:CPU:0')\n"
            "g = Graph(gd)\n"
            "r = partition(g, list(g.devices), targets=['b'], materialize=True)\n"
            "assert len(r.transfers) == 1\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'tensorflow']\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_fetching_a_fed_tensor_is_answered_by_the_client():
    g = _feed_graph()
    sig = parse_run(g, fetches=["y", "z"], feeds=["y"])
    assert [g.names[i] for i, _ in sig.fetches] == ["z"]
    assert [g.names[i] for i, _ in sig.fetched_fed] == ["y"]


def _reference_prune(graph: Graph, fetches, targets, feeds) -> set[int]:
    fed = {(graph.index[n.split(":")[0]], int(n.split(":")[1]) if ":" in n else 0) for n in feeds}
    fed_nodes = {i for i, _ in fed}
    stack = [graph.index[f.split(":")[0]] for f in fetches if (graph.index[f.split(":")[0]], 0) not in fed]
    stack += [graph.index[t] for t in targets]
    seen = set(stack)
    while stack:
        i = stack.pop()
        for s, slot in graph.inputs_of(i):
            if (s, slot) in fed or (slot == -1 and s in fed_nodes and graph.ops[s] == "Placeholder"):
                continue
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return seen


@pytest.mark.parametrize("seed", range(8))
def test_prune_matches_a_plain_reverse_walk_on_random_graphs(seed):
    rng = random.Random(seed)
    size = rng.choice([30, 200, 3000])
    nodes = [node("n0", "Placeholder", dtype=DT_FLOAT)]
    for i in range(1, size):
        k = rng.randint(0, min(3, i))
        inputs = [f"n{rng.randrange(i)}" for _ in range(k)]
        ctrl = [f"^n{rng.randrange(i)}" for _ in range(rng.randint(0, 1))]
        op = rng.choice(["Placeholder", "NoOp", "Identity"]) if not inputs else "AddN"
        nd = node(f"n{i}", op, *inputs, *ctrl, N=len(inputs), T=DT_FLOAT) if inputs else \
            node(f"n{i}", op, *ctrl, dtype=DT_FLOAT)
        nodes.append(nd)
    g = graph_of(*nodes)
    fetches = [f"n{rng.randrange(size)}" for _ in range(rng.randint(1, 4))]
    feeds = list(dict.fromkeys(f"n{rng.randrange(size)}:0" for _ in range(rng.randint(0, 5))))
    sig = parse_run(g, fetches=fetches, feeds=feeds)
    got = {i for i, k in enumerate(prune_mask(g, sig)) if k}
    fetch_names = [g.names[i] for i, _ in sig.fetches]
    assert got == _reference_prune(g, fetch_names, [], feeds)


# ------------------------------------------------------------------------ memory, constants, refs
def test_host_memory_sends_and_receives():
    g = graph_of(
        const("A1", (2, 3)),
        node("A2", "Shape", "A1", T=DT_FLOAT, out_type=DT_INT32),
        const("A3", (), DT_STRING),
        node("B1", "Fill", "A2", "A1:0", T=DT_FLOAT, index_type=DT_INT32),
        node("B2", "StringLength", "A3", unit="BYTE"),
    )
    # (B1's value input should be a scalar for TF to run it; memory types only look at the args)
    r = run(g, replicate_constants=False)
    ops = {(t["src"], t["send_op"], t["recv_op"], t["dtype"]) for t in r.transfers}
    assert ops == {("A2", "_HostSend", "_HostRecv", "int32"), ("A1", "_Send", "_Recv", "float32"),
                   ("A3", "_HostSend", "_HostRecv", "string")}
    shapes = {t["src"]: (t["shape"], t["bytes"]) for t in r.transfers}
    assert shapes["A1"] == ([2, 3], 24)
    assert shapes["A3"] == ([], None)  # strings have no fixed size


def test_small_cpu_constants_are_replicated_to_each_consumer_cpu():
    g = graph_of(const("A1", (2,)), const("A9", (17,)), add("B1", "A1", "A9"), add("C1", "A1", "A9"))
    r = run(g)
    assert r.replicated == {"A1": [DEV["B"], DEV["C"]]}
    assert "A1" not in r.original_nodes.get(DEV["A"], [])
    assert r.device_of("A1/replicate/_0") == DEV["B"] and r.device_of("A1/replicate/_1") == DEV["C"]
    assert sorted(t["src"] for t in r.transfers) == ["A9", "A9"]  # 17 elements: too big to copy
    plain = run(g, replicate_constants=False)
    assert plain.replicated == {} and sorted(t["src"] for t in plain.transfers) == ["A1", "A1", "A9", "A9"]


def test_constant_replication_rules():
    # a control out-edge blocks replication; one consumer device does not need it
    g = graph_of(const("A1", (2,)), add("B1", "A1", "A1"), add("C1", "A1", "A1"), noop("C2", "A1"))
    assert run(g).replicated == {}
    g = graph_of(const("A1", (2,)), add("B1", "A1", "A1"), add("B2", "A1", "A1"))
    assert run(g).replicated == {}
    # a GPU consumer's target is CPU:0 of its task (the Const's own device here)
    g = graph_of(const("A1", (2,)), add("G1", "A1", "A1"), add("B1", "A1", "A1"))
    r = run(g)
    assert r.replicated == {"A1": [DEV["A"], DEV["B"]]}
    assert [(t["src"], t["src_device"], t["dst_device"]) for t in r.transfers] == \
        [("A1", DEV["A"], DEV["G"])]


def test_ref_edges_are_never_deduplicated_and_wait_for_other_inputs():
    g = graph_of(
        node("A1", "VariableV2", dtype=DT_FLOAT, shape=[3]),
        const("B1", (3,)),
        add("B2", "A1", "B1"),
        add("B3", "A1", "B1"),
    )
    r = run(g, replicate_constants=False)
    assert [(t["src"], t["dst"]) for t in r.transfers] == [("A1", "B2"), ("A1", "B3")]
    b = by_name(r, DEV["B"])
    recvs = [n for n in b.values() if n.op == "_Recv"]
    assert len(recvs) == 2 and all(list(n.input) == ["^B1"] for n in recvs)
    assert {t["bytes"] for t in r.transfers} == {12}  # the variable's shape attr


# ------------------------------------------------------------------------------- two levels
PS0 = "/job:ps/replica:0/task:0/device:CPU:0"
W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:0/device:CPU:1"


def _two_level_graph() -> Graph:
    return graph_of(
        node("v", "VariableV2", dtype=DT_FLOAT, shape=[4], device=PS0),
        node("v/read", "Identity", "v", T=DT_FLOAT, device=PS0),
        noop("ps_op", device=PS0),
        node("a", "Square", "v/read", "^ps_op", T=DT_FLOAT, device=W0),
        node("b", "Square", "v/read", "^ps_op", T=DT_FLOAT, device=W1),
        add("c", "a", "b"),
    )


def _with_devices(g: Graph) -> list[str]:
    return [d or W0 for d in g.devices]


def test_two_levels_cross_the_network_once_per_task():
    g = _two_level_graph()
    r = partition(g, _with_devices(g), fetches=["c"])
    got = [(t["src"], t["slot"], t["src_device"], t["dst_device"], t["level"], t["send"], t["recv"])
           for t in r.transfers]
    assert got == [
        # master: one network transfer per (tensor, task), into the first consumer's device
        ("v/read", 0, PS0, W0, "task", "v/read_S0", "v/read_S1"),
        ("ps_op", "control", PS0, W0, "task", "ps_op_S3", "ps_op_S4"),  # ps_op/ctrl_S2, Identity ps_op_S5
        # worker: relays of the received tensor / control (the prefix is the immediate source)
        ("v/read", 0, W0, W1, "device", "v/read_S1_G0", "v/read_S1_G1"),
        ("ps_op", "control", W0, W1, "device", "ps_op_S5_G3", "ps_op_S5_G4"),
        ("b", 0, W1, W0, "device", "b_G6", "b_G7"),
    ]
    assert r.nodes[PS0] == ["v", "v/read", "ps_op", "v/read_S0", "ps_op/ctrl_S2", "ps_op_S3"]
    assert r.nodes[W1] == ["b", "v/read_S1_G1", "ps_op_S5_G4", "ps_op_S5_G5", "b_G6"]
    # the client fetch lives on the master's CPU:0
    assert r.device_of("_send_c_0") == W0 and r.client_device == W0
    task = partition(g, _with_devices(g), fetches=["c"], level="task")
    assert task.keys == ["/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"]
    assert [(t["src"], t["level"]) for t in task.transfers] == [("v/read", "task"), ("ps_op", "task")]


def test_client_feed_and_fetch_nodes():
    g = graph_of(
        node("p", "Placeholder", dtype=DT_FLOAT, shape=[2], device=W0),
        node("q", "Square", "p", T=DT_FLOAT, device=PS0),
    )
    r = partition(g, list(g.devices), fetches=["q"], feeds=["p"])
    gds = r.graph_defs(importable=False)
    recv = next(n for n in gds[W0].node if n.name == "_recv_p_0")
    assert (recv.op, attr(recv, "tensor_name"), recv.attr["client_terminated"].b) == ("_Recv", b"p:0", True)
    assert attr(recv, "send_device") == attr(recv, "recv_device") == W0.encode()
    send = next(n for n in gds[W0].node if n.name == "_send_q_0")
    # p's feed goes to ps (_recv_p_0_S0/_S1), then q comes back to the client (q_S2 -> q_S3)
    assert (send.op, list(send.input), attr(send, "tensor_name")) == ("_Send", ["q_S3"], b"q:0")
    assert "p" not in r.original_nodes.get(W0, [])  # the fed placeholder does not run
    assert sorted((t["src"], t["src_device"], t["dst_device"]) for t in r.transfers) == [
        ("p", W0, PS0), ("q", PS0, W0)]
    # importable GraphDefs rename TF's internal names (a leading '_' is refused by import_graph_def)
    assert any(n.name == "._recv_p_0" for n in r.partitions[W0].node)


def test_node_without_device_is_an_error():
    g = graph_of(const("x", device=""), node("y", "Square", "x", T=DT_FLOAT, device=W0))
    with pytest.raises(PartitionError, match="node x has no assigned device"):
        partition(g, list(g.devices))


def test_traffic_summary():
    g = _two_level_graph()
    r = partition(g, _with_devices(g), fetches=["c"])
    rows = {(row["src_device"], row["dst_device"]): row for row in r.traffic()}
    assert rows[(PS0, W0)]["bytes"] == 16 and rows[(PS0, W0)]["control"] == 1
    assert rows[(W1, W0)]["bytes"] == 16  # b = Square(v/read): elementwise, the variable's shape
    doc = r.to_json()
    assert doc["schema"] == "placeviz.partition/1" and len(doc["transfers"]) == len(r.transfers)


@pytest.mark.tf
def test_partitions_import_into_tensorflow():
    tf = pytest.importorskip("tensorflow")
    graphs = [
        (_two_level_graph(), {"fetches": ["c"]}),
        (_two_level_graph(), {"fetches": ["c"], "level": "task"}),
        (_cross_device_loop(), {"session": "direct"}),
        (_feed_graph(), {}),
    ]
    for g, kw in graphs:
        devices = [d or W0 for d in g.devices]
        r = partition(g, devices, materialize=True, **kw)
        for gd in r.partitions.values():
            with tf.Graph().as_default():
                tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(gd.SerializeToString()), name="")


def test_receives_are_shared_per_destination_host_memory_kind():
    """The dedup key holds whether the destination input is in host memory: a tensor read by a
    GPU op and by a CPU op of the same remote task crosses the network twice."""
    gpu = "/job:worker/replica:0/task:0/device:GPU:0"
    g = graph_of(
        node("v", "VariableV2", dtype=DT_FLOAT, shape=[4], device=PS0),
        node("v/read", "Identity", "v", T=DT_FLOAT, device=PS0),
        node("g1", "Square", "v/read", T=DT_FLOAT, device=gpu),
        node("g2", "Square", "v/read", T=DT_FLOAT, device=gpu),
        node("c1", "Square", "v/read", T=DT_FLOAT, device=W0),
        node("c2", "Square", "v/read", T=DT_FLOAT, device=W1),
    )
    r = partition(g, list(g.devices), level="task")
    assert [(t["src"], t["dst_device"], t["dst"]) for t in r.transfers] == [
        ("v/read", gpu, "g1"), ("v/read", W0, "c1")]
    r = partition(g, list(g.devices))
    assert sorted((t["src_device"], t["dst_device"], t["level"]) for t in r.transfers) == sorted([
        (PS0, gpu, "task"), (PS0, W0, "task"), (W0, W1, "device")])


def test_functional_ops_are_noted_and_direct_session_is_one_level():
    g = graph_of(const("A1"), node("A2", "StatefulPartitionedCall", "A1"))
    r = run(g)
    assert r.notes and "StatefulPartitionedCall" in r.notes[0]
    with pytest.raises(ValueError, match="by device only"):
        run(g, level="task")


@pytest.mark.parametrize("kernels", [True, False])
def test_a_scalar_through_an_identity_keeps_its_shape(kernels, monkeypatch):
    """The shape of a pass-through op is its input's: a scalar's [] is a known shape (4 bytes), not
    unknown (an `or` once turned it into None)."""
    from placeviz.partition import graph_partition

    if not kernels:
        monkeypatch.setattr(graph_partition, "_kernels", None)
    g = graph_of(const("A1", shape=(2, 3)), const("A2"), node("A3", "Identity", "A2", T=DT_FLOAT),
                 add("B1", "A3", "A3"), node("A4", "Identity", "A1", T=DT_FLOAT), add("B2", "A4", "A4"))
    r = run(g)
    shapes = {t["src"]: (t["shape"], t["bytes"]) for t in r.transfers}
    assert shapes == {"A3": ([], 4), "A4": ([2, 3], 24)}


# ------------------------------------------------------------------- written from the input's bytes
def _colocated(nd: NodeDef, *names: str) -> NodeDef:
    nd.attr["_class"].list.s.extend(f"loc:@{n}".encode() for n in names)
    return nd


def _written(graph):
    """Every partition written as bytes, checked to parse to the GraphDefs built node by node."""
    result = run(graph)
    out = dict(result.iter_serialized())
    assert {k: GraphDef.FromString(v) for k, v in out.items()} == result.partitions
    return out, result


@pytest.mark.parametrize("c_wire", [True, False])
def test_written_partitions_trim_colocation_like_the_built_ones(c_wire, monkeypatch):
    """``placeviz partition`` writes partitions from the input's bytes (``iter_serialized``),
    trimming a ``_class`` entry exactly when it names no node of the partition: an original node
    elsewhere, a name nothing has, and an added node's name (``A1/_1`` is the receive on CPU:1),
    which counts only in the receive's partition. The written bytes parse to the GraphDefs built
    node by node, with the C writer (``placeviz._wire``) and without it, and in pieces of any
    size, byte for byte the same."""
    from placeviz import nodewire
    from placeviz.io import model_from_bytes
    from placeviz.partition import graphdefs

    gd = GraphDef()
    gd.node.extend([const("A1"), node("B1", "Identity", "A1", T=DT_FLOAT),
                    _colocated(noop("B2"), "A1/_1"), _colocated(noop("A2"), "A1/_1"),
                    _colocated(noop("A3"), "A1"), _colocated(noop("B3"), "A1", "B1"),
                    _colocated(noop("B4"), "nowhere", "B1")])
    graph = model_from_bytes("g", gd.SerializeToString()).graph
    assert graph.node_wire is not None

    if not c_wire:
        monkeypatch.setattr(nodewire, "_wire", None)
    out, result = _written(graph)
    nodes = {n.name: n for gd in result.partitions.values() for n in gd.node}
    assert "A1/_1" in nodes and nodes["A1/_1"].device == DEV["B"]
    kept = {name: list(nodes[name].attr["_class"].list.s) if "_class" in nodes[name].attr else None
            for name in ("B2", "A2", "A3", "B3", "B4")}
    assert kept == {"B2": [b"loc:@A1/_1"], "A2": None, "A3": [b"loc:@A1"], "B3": [b"loc:@B1"], "B4": [b"loc:@B1"]}
    monkeypatch.setattr(nodewire, "_wire", None)
    assert _written(graph)[0] == out  # the Python writer gives the same bytes
    monkeypatch.setattr(graphdefs, "_CHUNK_NODES", 2)  # written in pieces of two nodes: the same bytes
    assert [len(list(pieces)) for _, pieces in run(graph).iter_serialized(pieces=True)] == [2, 3]
    assert _written(graph)[0] == out


def test_written_partitions_fix_leading_underscore_names(monkeypatch):
    """A graph with a name starting with ``_`` (reserved by ``import_graph_def``) has every
    original written renamed (``._a``) with its inputs renamed too; the C writer
    (``_wire.rebuild_nodes``, ``encode_added``) and the Python one give the same bytes, which
    parse to the GraphDefs built node by node."""
    from placeviz import nodewire

    gd = GraphDef()
    gd.node.extend([const("_a", (5, 5), DT_FLOAT, DEV["A"]), node("B1", "Identity", "_a", T=DT_FLOAT),
                    _colocated(node("A2", "Identity", "_a", "^B1", T=DT_FLOAT), "_a", "B1")])
    graph = Graph(gd, wire=gd.SerializeToString())  # io.load refuses such a name; a caller may not
    assert graph.node_wire is not None

    out, result = _written(graph)
    nodes = {n.name: n for gd in result.partitions.values() for n in gd.node}
    assert "._a" in nodes and "_a" not in nodes and nodes["A2"].input[0] == "._a"
    assert list(nodes["A2"].attr["_class"].list.s) == [b"loc:@_a"]
    monkeypatch.setattr(nodewire, "_wire", None)
    assert _written(graph)[0] == out


def test_added_nodes_are_written_alike_whatever_object_holds_them(monkeypatch):
    """``_wire.encode_added`` reads the added nodes' slots straight from ``_New`` instances (their
    ``__slots__`` offsets); nodes held by any other object (no such slots, or a different type
    after the first) are read through ``getattr``, with the same bytes."""
    from types import SimpleNamespace

    from placeviz import nodewire

    wire = pytest.importorskip("placeviz._wire")
    gd = GraphDef()
    gd.node.extend([const("A1"), node("B1", "Identity", "A1", T=DT_FLOAT), node("A2", "Identity", "B1", T=DT_FLOAT),
                    noop("B2"), _colocated(noop("A3"), "B2")])
    graph = model_from_bytes_graph(gd)
    calls = []
    real = nodewire.encode_added
    monkeypatch.setattr(nodewire, "encode_added", lambda *args: calls.append(args) or real(*args))
    _written(graph)
    assert calls and any(args[2] for args in calls)
    slots = ("name", "op", "dev", "inputs", "kind", "origin", "oslot", "dtype", "major", "minor", "meta", "frame",
             "copy_of")
    for ids, n, added, *rest in calls:
        want = wire.encode_added(ids, n, added, *rest)
        plain = [SimpleNamespace(**{k: getattr(a, k) for k in slots}) for a in added]
        assert wire.encode_added(ids, n, plain, *rest) == want
        if added:
            assert wire.encode_added(ids, n, [added[0], *plain[1:]], *rest) == want
            assert wire.encode_added(ids, n, [plain[0], *added[1:]], *rest) == want


def model_from_bytes_graph(gd: GraphDef) -> Graph:
    from placeviz.io import model_from_bytes

    graph = model_from_bytes("g", gd.SerializeToString()).graph
    assert graph.node_wire is not None
    return graph


# ---------------------------------------------------------------- the command, through the pipeline
PLAIN_MLP = Path(__file__).parent / "golden" / "render" / "mlp_plain.pbtxt"
"""``sample:mlp`` as TensorFlow built it, without a device setter or SyncReplicas (tests/golden/render)."""


def _index_of_analyzed_run(tmp_path, capsys, extra: list[str], name: str) -> tuple[dict, dict]:
    """``analyze --format json`` with ``extra``, then ``partition`` of the run it reports, same options."""
    code, out, err = run_cli(["analyze", PLAIN_MLP, "--format", "json", *extra], capsys)
    assert code == 0, err
    traffic = json.loads(out)["partition"]
    run = [arg for t in traffic["run"]["targets"] for arg in ("--target", t)]
    code, _out, err = run_cli(["partition", PLAIN_MLP, "-o", tmp_path / name, "--level", "task", *run, *extra], capsys)
    assert code == 0, err
    return traffic, json.loads((tmp_path / name / "index.json").read_text())


def test_partition_takes_the_sync_options_as_analyze_does(tmp_path, capsys):
    """``--sync-replicas`` rewrites the graph before placement for ``partition`` as for ``analyze``:
    the partitions of the run ``analyze`` reports carry the same transfers, and the option changes both
    (the sync pass itself is checked against TF's SyncReplicasOptimizer in tests/test_sync_rewrite.py)."""
    place = ["--ps-tasks", "2"]
    sync = ["--sync-replicas", "--replicas-to-aggregate", "2", "--sync-name", "my_sync"]
    seen = {}
    for name, extra in (("plain", place), ("sync", [*place, *sync])):
        traffic, index = _index_of_analyzed_run(tmp_path, capsys, extra, name)
        across = [t for t in index["transfers"] if t["level"] == "task"]  # what analyze counts: the network
        assert len(across) == traffic["transfers"] > 0
        assert sum(t["slot"] == "control" for t in across) == traffic["control_transfers"]
        assert sum(t["bytes"] or 0 for t in across) == traffic["bytes_per_step"]
        nodes = set()
        for entry in index["partitions"]:
            graph = GraphDef.FromString((tmp_path / name / entry["file"]).read_bytes())
            nodes |= {n.name for n in graph.node}
        seen[name] = (traffic["run"]["targets"], traffic["bytes_per_step"], nodes)
    assert seen["plain"][0] == [] and seen["sync"][0] == ["train_op"]  # the worker's train op, found in the rewrite
    assert seen["plain"][1] != seen["sync"][1]
    assert not any(n.startswith("my_sync/") for n in seen["plain"][2])
    assert any(n.startswith("my_sync/") for n in seen["sync"][2]) and "sync_token_q" in seen["sync"][2]


def test_place_takes_the_sync_options(tmp_path, capsys):
    """``place --sync-replicas`` writes the rewritten graph, placed; without a plain graph's SYNC options it
    is refused as analyze refuses them (one line, exit 2)."""
    code, _out, err = run_cli(["place", PLAIN_MLP, "-o", tmp_path / "p.pb", "--ps-tasks", "2", "--sync-replicas",
                               "--replicas-to-aggregate", "2"], capsys)
    assert code == 0, err
    placed = {n.name: n.device for n in GraphDef.FromString((tmp_path / "p.pb").read_bytes()).node}
    assert placed["sync_token_q"].startswith("/job:ps/replica:0/task:")
    code, _out, err = run_cli(["place", PLAIN_MLP, "-o", tmp_path / "q.pb", "--replicas-to-aggregate", "2"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "need --sync-replicas" in err
    assert not (tmp_path / "q.pb").exists()


# ------------------------------------------------------------------------------ the package's layout
# placeviz/partition/: one module per TF source, imports one way (docs/architecture.md, section 1).
_PARTITION_LAYERS = ("transfers", "base", "shapes", "subgraph", "const_replication", "control_flow", "memory_types",
                     "graph_partition", "graphdefs", "session")


def test_partition_modules_import_one_way_and_name_their_tf_source():
    """Each module of ``placeviz.partition`` imports only modules listed before it (``base`` none of
    them), so the steps cannot grow a cycle; each step's docstring names the TF file it mirrors."""
    import ast

    pkg = Path(__file__).resolve().parent.parent / "placeviz" / "partition"
    assert {p.stem for p in pkg.glob("*.py")} == {*_PARTITION_LAYERS, "__init__"}
    for k, name in enumerate(_PARTITION_LAYERS):
        tree = ast.parse((pkg / f"{name}.py").read_text())
        imported = {node.module.rsplit(".", 1)[-1] for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("placeviz.partition.")}
        imported |= {alias.name.rsplit(".", 1)[-1] for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names if alias.name.startswith("placeviz.partition.")}
        assert imported <= set(_PARTITION_LAYERS[:k]), (name, imported - set(_PARTITION_LAYERS[:k]))
        doc = ast.get_docstring(tree) or ""
        assert name == "base" or "tensorflow/core/" in doc, name
