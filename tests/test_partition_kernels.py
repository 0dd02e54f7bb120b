"""The C kernels of the partitioner (``placeviz._partition_kernels``) against the Python code they
transliterate: every partition is made twice, with the kernels and with ``_kernels = None`` in
:mod:`placeviz.partition` (the reference), and everything must be equal:
the JSON form (transfers with all their attributes, partitions, replicated Consts, moved nodes,
control loops), the node lists, every added node's fields, the rewritten edges, the GraphDefs (both
forms, byte for byte) and the errors. Graphs: TF-built sample models (built by TensorFlow in a
subprocess, placed by placeviz), the fidelity test's hand-built TF graphs (nested while loops over
three devices, host memory, feeds, moved control flow), the same graphs with devices randomly
reassigned (GPUs, ref edges and host memory everywhere), and random graphs. No timing here.
"""

from __future__ import annotations

import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest

from placeviz import closure as prune_mod
from placeviz import nodewire
from placeviz.errors import PlacevizError
from placeviz.graph import Graph
from placeviz.partition import RunSignature, partition, prune_mask
from placeviz.partition import base as base_mod
from placeviz.partition import graph_partition as split_mod
from placeviz.protos import GraphDef, NodeDef

kernels = pytest.importorskip("placeviz._partition_kernels")

ROOT = Path(__file__).resolve().parent.parent
PS0, PS1 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"
W0, W1, WG = ("/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:1",
              "/job:worker/replica:0/task:0/device:GPU:0")
DEVICES = [PS0, PS1, W0, W1, WG]
DT_FLOAT, DT_INT32, DT_STRING = 1, 3, 7


# ------------------------------------------------------------------------------------ comparing
class _Spy:
    """Stands in for the kernel module and counts the calls that did the work (not declined)."""

    def __init__(self):
        self.done: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def __getattr__(self, name):
        func = getattr(kernels, name)

        def call(*args, **kw):
            res = func(*args, **kw)
            self.calls[name] = self.calls.get(name, 0) + 1
            if res is not None and res is not False:
                self.done[name] = self.done.get(name, 0) + 1
            return res

        return call


def _snapshot(result) -> dict:
    b = result._builder
    # What ``placeviz partition`` writes, before ``partitions`` is built: from the input's bytes
    # when the graph has them. It must parse to exactly the GraphDefs ``partitions`` builds.
    serialized = result.serialized()
    assert {k: GraphDef.FromString(v) for k, v in serialized.items()} == result.partitions
    for key, data in serialized.items():  # _Send/_Recv are written directly: protobuf's exact bytes
        for (offset, length), nd in zip(nodewire.field_spans(data, 1), result.partitions[key].node, strict=True):
            if nd.op in ("_Send", "_Recv", "_HostSend", "_HostRecv"):
                assert data[offset:offset + length] == nd.SerializeToString(deterministic=True), nd.name
    return {
        "serialized": serialized,
        "json": result.to_json(),
        "nodes": result.nodes,
        "original_nodes": result.original_nodes,
        "added": [(a.name, a.op, a.dev, a.inputs, a.kind, a.origin, a.oslot, a.dtype, a.major, a.minor, a.meta,
                   a.frame, a.copy_of) for a in b.added],
        "edges": (b.e_src.tolist(), b.e_slot.tolist(), b.dev_np.tolist(), b.keep_np.tolist()),
        "counters": (b._seq, b._counter_s, b._counter_g, b.edge_id, sorted(b.dup.items())),
        "graph_defs": {k: gd.SerializeToString(deterministic=True) for k, gd in result.partitions.items()},
        "raw_graph_defs": {k: gd.SerializeToString(deterministic=True)
                           for k, gd in result.graph_defs(importable=False).items()},
    }


def _outcome(monkeypatch, fast: bool, graph: Graph, devices: list[str], kw: dict):
    spy = _Spy()
    with monkeypatch.context() as m:
        for module in (base_mod, prune_mod, split_mod):  # every caller of the partition kernels
            m.setattr(module, "_kernels", spy if fast else None)
        if not fast:
            m.setattr(nodewire, "_wire", None)
        try:
            return ("ok", _snapshot(partition(graph, devices, **kw))), spy
        except PlacevizError as e:
            return ("error", type(e).__name__, str(e)), spy


def assert_same(monkeypatch, graph: Graph, devices: list[str], what: str = "", **kw) -> tuple:
    """Partition with and without the kernels; equal outcomes. Returns (outcome, the kernel calls
    that did the work); ``calls_made`` (a dict, when given) gets every kernel call, declined or not."""
    calls_made = kw.pop("calls_made", None)
    fast, spy = _outcome(monkeypatch, True, graph, devices, kw)
    ref, ref_spy = _outcome(monkeypatch, False, graph, devices, kw)
    assert not ref_spy.calls
    if calls_made is not None:
        calls_made.update(spy.calls)
    done = spy.done
    if fast != ref:  # say where, not just that
        assert fast[0] == ref[0], (what, kw, fast[:3], ref[:3])
        if fast[0] == "error":
            assert fast == ref, (what, kw)
        for key in fast[1]:
            assert fast[1][key] == ref[1][key], (what, kw, key)
    return fast, done


# -------------------------------------------------------------------------------- TF-built graphs
_BUILD = r"""
import os, pickle, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path[:0] = [sys.argv[2], os.path.join(sys.argv[2], "tests")]
import tensorflow as tf
import test_partition_fidelity as fid

cases = {}
for name in ["mlp", "inception", "wide_deep", "lstm", "hashtable", "transformer", "misconfigured"]:
    for config in (["ps2", "sync", "resource"] if name in ("mlp", "lstm", "transformer") else ["ps2"]):
        cases[f"{name} {config}"] = fid._build_sample(name, config)
tf.compat.v1.disable_control_flow_v2()
cases["loops"] = fid._build_loops()
cases["moves"] = fid._build_moves()
out = {k: {key: (list(v) if key == "feeds" else v) for key, v in c.items() if key != "meta"} for k, c in cases.items()}
with open(sys.argv[1], "wb") as f:
    pickle.dump(out, f)
"""


@pytest.fixture(scope="module")
def tf_cases(tmp_path_factory) -> dict:
    """TF-built graphs (sample models in three configs, the fidelity test's hand-built ones), built
    in a subprocess: this process never imports TensorFlow."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    path = tmp_path_factory.mktemp("kernel_cases") / "cases.pkl"
    proc = subprocess.run([sys.executable, "-c", _BUILD, str(path), str(ROOT)], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(path, "rb") as f:
        return pickle.load(f)


def _placed(case: dict) -> tuple[Graph, list[str]]:
    from placeviz.devices import ClusterSpec
    from placeviz.io import model_from_bytes
    from placeviz.placement import PlacementOptions, place_graph
    from placeviz.placement.placer import PlacerConfig

    model = model_from_bytes("case", case["graph_def"])  # keeps the bytes: partitions are written from them
    options = PlacementOptions(cluster=ClusterSpec.from_ps_tasks(2), cpus_per_task=case["cpus"],
                               placer=PlacerConfig(allow_soft_placement=case["soft"]))
    result = place_graph(model.graph, options)
    return result.graph, list(result.placement.devices)


def _runs(case: dict, graph: Graph) -> list[dict]:
    """The case's init and train runs, a run of everything, and one with a fetch and a feed."""
    feeds = [f"{k}:0" if ":" not in k else k for k in case["feeds"]]
    runs = [dict(targets=case["init"]), dict(targets=case["targets"], fetches=case["fetches"], feeds=feeds), {}]
    names = graph.names
    rng = random.Random(len(names))
    picks = [names[rng.randrange(len(names))] for _ in range(3)]
    runs.append(dict(fetches=[picks[0]], targets=case["targets"], feeds=[f"{picks[1]}:0"]))
    return runs


def _reassigned(graph: Graph, devices: list[str], seed: int, share: float) -> list[str]:
    """``devices`` with a random share of nodes moved to random devices (a GPU included)."""
    rng = random.Random(seed)
    pool = sorted(set(devices)) + [WG, W1]
    return [rng.choice(pool) if rng.random() < share else d for d in devices]


def test_tf_graphs_partition_identically(monkeypatch, tf_cases):
    done_total: dict[str, int] = {}
    results = 0
    for label, case in tf_cases.items():
        graph, devices = _placed(case)
        # The partitions are written from the input's bytes (not rebuilt): the setter's result
        # maps its nodes to the file's NodeDefs.
        assert graph.node_wire is not None and len(graph.node_wire.offsets) == len(graph), label
        if not graph.library.function:
            result = partition(graph, devices)
            assert result._builder.serialize(result._node_arrays()) is not None, label
        for run in _runs(case, graph):
            for kw in (dict(level="device"), dict(level="task"), dict(session="direct"),
                       dict(level="device", replicate_constants=False)):
                outcome, done = assert_same(monkeypatch, graph, devices, label, **run, **kw)
                results += 1
                for k, v in done.items():
                    done_total[k] = done_total.get(k, 0) + v
    assert results == len(tf_cases) * 16
    assert done_total.get("split_originals", 0) > len(tf_cases)  # the kernels did the work
    assert done_total.get("reach", 0) and done_total.get("index_codes", 0) and done_total.get("attr_ints", 0)


@pytest.mark.parametrize("share", [0.05, 0.3])
def test_tf_graphs_with_moved_devices_partition_identically(monkeypatch, tf_cases, share):
    """Devices shuffled: GPU destinations, ref edges and host memory in every pass (GPU destinations
    make the kernel decline the whole level), control loops over more devices, and errors."""
    outcomes = {"ok": 0, "error": 0}
    for k, (label, case) in enumerate(sorted(tf_cases.items())):
        graph, devices = _placed(case)
        for seed in range(2):
            moved = _reassigned(graph, devices, seed * 100 + k, share)
            for run in _runs(case, graph)[1:3]:
                for kw in (dict(level="device"), dict(session="direct", replicate_constants=False)):
                    outcome, _done = assert_same(monkeypatch, graph, moved, f"{label} {seed}", **run, **kw)
                    outcomes[outcome[0]] += 1
    assert outcomes["ok"] > 10


# -------------------------------------------------------------------------------- random graphs
def _node(name: str, op: str, inputs: list[str], device: str, **attrs) -> NodeDef:
    nd = NodeDef(name=name, op=op, input=inputs, device=device)
    for key, value in attrs.items():
        if key in ("T", "dtype", "out_type"):
            nd.attr[key].type = value
        elif key == "shape":
            for d in value:
                nd.attr[key].shape.dim.add().size = d
        else:
            nd.attr[key].i = value
    return nd


def random_graph(seed: int) -> tuple[Graph, list[str], dict]:
    """A random DAG of Consts (small, large, int32, string), ref variables with Assign/Identity,
    adds, Shape (int32: host memory on the GPU), NoOps and control edges, on random devices."""
    rng = random.Random(seed)
    nodes: list[NodeDef] = []
    floats: list[str] = []
    refs: list[str] = []
    ints: list[str] = []
    strings: list[str] = []
    ops: list[str] = []
    n = rng.randrange(8, 60)
    devices = DEVICES if rng.random() < 0.7 else DEVICES[:2] + [W0]
    for k in range(n):
        name = f"n{k}" if rng.random() < 0.9 else f"_n{k}"
        dev = rng.choice(devices)
        kind = rng.choice(["const", "const", "var", "identity", "add", "add", "assign", "shape", "noop",
                           "string", "placeholder"])
        if kind in ("identity", "add", "shape") and not (floats or refs):
            kind = "const"
        if kind == "assign" and not (refs and floats):
            kind = "var"
        if kind == "const":
            nd = _node(name, "Const", [], dev, dtype=rng.choice([DT_FLOAT, DT_FLOAT, DT_INT32]))
            tensor = nd.attr["value"].tensor
            tensor.dtype = nd.attr["dtype"].type
            for d in rng.choice([(), (2,), (4, 4), (3, 7)]):
                tensor.tensor_shape.dim.add().size = d
            (ints if tensor.dtype == DT_INT32 else floats).append(name)
        elif kind == "string":
            nd = _node(name, "Const", [], dev, dtype=DT_STRING)
            nd.attr["value"].tensor.dtype = DT_STRING
            strings.append(name)
        elif kind == "placeholder":
            nd = _node(name, "Placeholder", [], dev, dtype=DT_FLOAT, shape=[rng.choice([1, 2, 3])])
            floats.append(name)
        elif kind == "var":
            nd = _node(name, "VariableV2", [], dev, dtype=DT_FLOAT, shape=[2])
            refs.append(name)
        elif kind == "identity":
            nd = _node(name, "Identity", [rng.choice(floats + refs)], dev, T=DT_FLOAT)
            floats.append(name)
        elif kind == "add":
            pick = floats + refs
            nd = _node(name, "AddV2", [rng.choice(pick), rng.choice(pick)], dev, T=DT_FLOAT)
            floats.append(name)
        elif kind == "assign":
            nd = _node(name, "Assign", [rng.choice(refs), rng.choice(floats)], dev, T=DT_FLOAT)
            refs.append(name)
        elif kind == "shape":
            nd = _node(name, "Shape", [rng.choice(floats + refs)], dev, T=DT_FLOAT, out_type=DT_INT32)
            ints.append(name)
        else:
            nd = _node(name, "NoOp", [], dev)
        if nodes and rng.random() < 0.3:
            nd.input.extend(f"^{nodes[rng.randrange(len(nodes))].name}" for _ in range(rng.randrange(1, 3)))
        nodes.append(nd)
        ops.append(kind)
    gd = GraphDef()
    gd.node.extend(nodes)
    graph = Graph(gd)
    names = [nd.name for nd in nodes]
    run: dict = {}
    if rng.random() < 0.8:
        run["targets"] = rng.sample(names, rng.randrange(1, 4))
    if rng.random() < 0.5 and floats:
        run["fetches"] = rng.sample(floats, min(len(floats), rng.randrange(1, 3)))
    if rng.random() < 0.4 and floats:
        fed = rng.sample(floats, min(len(floats), rng.randrange(1, 3)))
        run["feeds"] = [f for f in fed if f not in run.get("fetches", ())][:2]
    return graph, [nd.device for nd in nodes], run


@pytest.mark.parametrize("seed", range(60))
def test_random_graphs_partition_identically(monkeypatch, seed):
    graph, devices, run = random_graph(seed)
    for kw in (dict(level="device"), dict(level="task"), dict(session="direct"),
               dict(level="device", replicate_constants=False)):
        assert_same(monkeypatch, graph, devices, f"seed {seed}", **run, **kw)


def test_random_graphs_use_the_kernel_whole(monkeypatch):
    """Across the random graphs (GPU destinations, ref edges, host memory; no while loops) the
    whole-level kernel did every level itself, ref-typed and GPU groups included, and changed
    nothing it was given."""
    calls = declined = with_refs = on_gpu = 0
    real = kernels.split_originals

    def counting(**kw):
        nonlocal calls, declined, with_refs, on_gpu
        before = (len(kw["added"]), dict(kw["counters"]), list(kw["pos"]))
        res = real(**kw)
        calls += 1
        assert (len(kw["added"]), kw["counters"], kw["pos"]) == before  # nothing given is changed
        if res is None:
            declined += 1
            return res
        with_refs += bool(res["recheck"])  # receives of ref-typed sources, made by the kernel
        on_gpu += any(not kw["is_cpu"][kw["dev"][d]] for d in kw["dst"])
        return res

    class Counting:
        def __getattr__(self, name):
            return counting if name == "split_originals" else getattr(kernels, name)

    monkeypatch.setattr(split_mod, "_kernels", Counting())
    for seed in range(60):
        graph, devices, run = random_graph(seed)
        try:
            partition(graph, devices, **run)
        except PlacevizError:
            pass
    assert calls > 30 and declined == 0 and with_refs > 0 and on_gpu > 10


# ------------------------------------------------------------------------------------ prune
@pytest.mark.parametrize("seed", range(20))
def test_prune_walk_matches_numpy_walk(monkeypatch, seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 3000)
    gd = GraphDef()
    for k in range(n):
        nd = gd.node.add(name=f"n{k}", op="NoOp")
        for _ in range(rng.randrange(0, 4) if k else 0):
            src = rng.randrange(k) if rng.random() < 0.9 else max(0, k - 1)
            nd.input.append(f"n{src}" if rng.random() < 0.7 else f"^n{src}")
    graph = Graph(gd)
    starts = tuple(sorted(rng.sample(range(n), min(n, rng.randrange(1, 5)))))
    feeds = tuple((i, 0) for i in rng.sample(range(n), min(n, rng.randrange(0, 4))))
    for run in (RunSignature(targets=starts), RunSignature(targets=starts, feeds=feeds), RunSignature()):
        fast = prune_mask(graph, run)
        monkeypatch.setattr(prune_mod, "_kernels", None)
        ref = prune_mask(graph, run)
        monkeypatch.undo()
        assert fast == ref


# ------------------------------------------------------------------------ the kernels' edge cases
def test_small_kernels_decline_what_they_do_not_handle():
    import numpy as np

    assert kernels.index_codes(["a", "b"], {"a": 1, "b": -1}) == np.asarray([1, -1], np.int32).tobytes()
    assert kernels.index_codes(("a",), {"a": 7}) == np.asarray([7], np.int32).tobytes()
    assert kernels.index_codes(["a", "c"], {"a": 1}) is None  # missing: the Python path raises
    assert kernels.index_codes(["a"], {"a": 2**40}) is None
    assert kernels.index_codes(["a"], {"a": "x"}) is None
    assert kernels.index_codes(iter(["a"]), {"a": 1}) is None
    assert kernels.index_codes([], {}) == b""

    class Obj:
        def __init__(self, dev):
            self.dev = dev

    assert kernels.attr_ints([Obj(3), Obj(-1)], "dev") == np.asarray([3, -1], np.int32).tobytes()
    assert kernels.attr_ints([Obj(None)], "dev") is None
    with pytest.raises(AttributeError):
        kernels.attr_ints([object()], "dev")

    class Node:
        def __init__(self, inputs):
            self.inputs = inputs

    def py_sources(nodes):  # the Python twin, graph_partition._input_sources without the kernel
        with pytest.MonkeyPatch.context() as m:
            m.setattr(split_mod, "_kernels", None)
            return split_mod._input_sources(nodes)

    for nodes in ([Node([[5, 0], [7, -1]]), Node([]), Node([(2**31 - 1, 1)])], []):
        counts, srcs = split_mod._input_sources(nodes)
        want = py_sources(nodes)
        assert counts.tolist() == want[0].tolist() and srcs.tolist() == want[1].tolist()
        assert kernels.input_sources(nodes) is not None
    assert split_mod._input_sources([Node([[5, 0]])])[1].tolist() == [5]
    for odd in ([[5]], [[2**40, 0]], [["a", 0]], ((5, 0),), [[5, 0, 1]]):
        assert kernels.input_sources([Node(odd)]) is None, odd
    with pytest.raises(AttributeError):
        kernels.input_sources([object()])
    from array import array

    starts, srcs = array("i", [0, 1, 2]), array("i", [1, 0])
    mask = bytearray(2)
    assert kernels.reach(starts, srcs, [0], mask, None) and mask == bytearray([1, 1])
    mask = bytearray(2)
    assert kernels.reach(starts, srcs, [0], mask, bytes([0, 1])) and mask == bytearray([1, 0])
    assert not kernels.reach(starts, srcs, [5], bytearray(2), None)  # out of range
    assert not kernels.reach(starts, array("i", [9, 0]), [0], bytearray(2), None)
    assert not kernels.reach(array("q", [0, 1, 2]), srcs, [0], bytearray(2), None)  # not int32
    assert not kernels.reach(starts, srcs, [0], b"\0\0", None)  # read-only mask
    assert not kernels.reach(starts, srcs, [0], bytearray(2), bytes(1))  # edge_ok of the wrong size
    with pytest.raises(TypeError):  # a caller's mistake is not an input to decline
        kernels.split_originals(pos=[])
    with pytest.raises(TypeError):
        kernels.split_originals([])


def test_new_node_declaration_matches_its_init():
    """The kernel sets ``_New``'s slots from ``_NEW_ARGS``/``_NEW_CONSTANTS`` instead of calling
    ``__init__``: the declaration must say what ``__init__`` does, for every slot."""
    New = base_mod._New
    args = [object() for _ in base_mod._NEW_ARGS]
    node = New(*args)
    for name, value in zip(base_mod._NEW_ARGS, args, strict=True):
        assert getattr(node, name) is value
    for name, value in base_mod._NEW_CONSTANTS:
        assert getattr(node, name) == value
    assert New(*args[:10]).meta is None
    declared = list(base_mod._NEW_ARGS) + [k for k, _ in base_mod._NEW_CONSTANTS]
    assert sorted(New.__slots__) == sorted(declared)


def test_kernel_builds_new_nodes_from_the_declaration(monkeypatch):
    """The fast path is the one taken (a changed constant shows in the kernel's nodes only)."""
    graph, devices, run = random_graph(7)  # a graph whose levels the kernel does (no GPU destination)
    monkeypatch.setattr(split_mod, "_NEW_CONSTANTS", (("frame", "from-the-kernel"), ("copy_of", -1)))
    result = partition(graph, devices, **run)
    frames = {a.frame for a in result._builder.added if a.kind in ("send", "recv")}
    assert "from-the-kernel" in frames


def _captured_arguments(monkeypatch) -> dict:
    """The keyword arguments of one call the kernel accepted (random graph 7, by device)."""
    seen: list[dict] = []
    real = kernels.split_originals

    class Capturing:
        def __getattr__(self, name):
            if name != "split_originals":
                return getattr(kernels, name)

            def call(**kw):
                res = real(**kw)
                if res is not None and kw["pos"]:
                    seen.append(kw)
                return res

            return call

    graph, devices, run = random_graph(7)
    with monkeypatch.context() as m:
        m.setattr(split_mod, "_kernels", Capturing())
        partition(graph, devices, **run)
    assert seen
    return seen[0]


def test_split_originals_declines_arguments_of_other_kinds(monkeypatch):
    from array import array

    import numpy as np

    kw = _captured_arguments(monkeypatch)
    assert kernels.split_originals(**kw) is not None
    for key, odd in (("pos", tuple(kw["pos"])), ("rank", array("i", [0] * (kw["n"] + 1))), ("level", 1.0),
                     ("rows", tuple(kw["rows"])), ("row_of", kw["row_of"][:-1]), ("row_of", list(kw["row_of"])),
                     ("shape_keys", list(kw["shape_keys"])), ("shape_keys", kw["shape_keys"].astype(np.int32)),
                     ("shape_values", tuple(kw["shape_values"])), ("shape_values", kw["shape_values"] + [None]),
                     ("counters", list(kw["counters"].items())),
                     ("e_src", list(kw["e_src"]))):
        assert kernels.split_originals(**dict(kw, **{key: odd})) is None, key
    with pytest.raises(TypeError):
        kernels.split_originals(**dict(kw, unknown=1))
    # a destination that a control loop gates: declined before anything is made
    assert kernels.split_originals(**dict(kw, cloops={kw["dst"][-1]: [kw["n"], 1]})) is None


def test_split_originals_reads_tables_and_calls_nothing_back(monkeypatch):
    """The facts come as tables (no function among the arguments: no call back into Python per
    edge); a node missing from them is the caller's mistake and raises, never a guess."""
    import numpy as np

    kw = _captured_arguments(monkeypatch)
    assert not [key for key, value in kw.items() if callable(value) and value is not base_mod._New]
    with pytest.raises(ValueError, match="no fact row"):
        kernels.split_originals(**dict(kw, row_of=np.full(kw["n"], -1, dtype=np.int32)))
    with pytest.raises(TypeError, match="fact row"):
        kernels.split_originals(**dict(kw, rows=[("not", "rows")] * len(kw["rows"])))
    if any(slot >= 0 for slot in kw["slot"]):
        with pytest.raises(KeyError):
            kernels.split_originals(**dict(kw, shape_keys=np.zeros(0, dtype=np.int64), shape_values=[]))


def _all_fact_answers(b, i: int) -> tuple:
    """What the specification's methods say of original node ``i`` (per input, the memory type for
    a plain, a string and a resource edge; per output; one position past each end)."""
    io = b.types(i)
    in_t, out_t = io if io is not None else ((), ())
    ins = tuple(b.in_host(i, k, t) for k in range(len(in_t) + 1) for t in (DT_FLOAT, DT_STRING, 20))
    outs = tuple(b.out_host(i, k) for k in range(len(out_t) + 1))
    return (in_t, out_t), ins, outs, tuple(b.in_type(i, k) for k in range(len(in_t) + 1))


def _row_answers(row, dtype_decides) -> tuple:
    in_t, out_t, in_mem, out_mem = row
    ins = tuple(dtype_decides(t) if (in_mem[k] if k < len(in_mem) else 2) == 2 else bool(in_mem[k])
                for k in range(len(in_t) + 1) for t in (DT_FLOAT, DT_STRING, 20))
    outs = tuple(bool(out_mem[k]) if k < len(out_mem) else False for k in range(len(out_t) + 1))
    return (in_t, out_t), ins, outs, tuple(in_t[k] if k < len(in_t) else 0 for k in range(len(in_t) + 1))


def test_fact_table_rows_are_every_nodes_own_answers(tf_cases):
    """Nodes share a row of the C cut's table by (op, op-fact attr key, device type): each node's
    row, read as the kernel reads it, says what the Python methods say of that node itself, on
    TF-built graphs with devices shuffled (GPUs: kernels' HostMemory args, int32 and string host
    memory, ref types), handed the attr keys the placer read (``partition(attr_keys=)``), and
    without them (a row per node)."""
    from placeviz.ops import load_op_table
    from placeviz.partition.memory_types import _ALWAYS_ON_HOST
    from placeviz.placement.placer import read_fact_attrs

    def dtype_decides(t):
        return t in _ALWAYS_ON_HOST

    shared = 0
    for k, (label, case) in enumerate(sorted(tf_cases.items())):
        graph, devices = _placed(case)
        keys = read_fact_attrs(graph, load_op_table())
        for moved in (devices, _reassigned(graph, devices, k, 0.3)):
            try:
                b = partition(graph, moved, attr_keys=keys)._builder
            except PlacevizError:
                continue
            nodes = list(range(b.n))
            row_of, rows = b.fact_table(nodes)
            shared += len(nodes) - len(rows)
            for i in nodes:
                assert _row_answers(rows[row_of[i]], dtype_decides) == _all_fact_answers(b, i), (label, b.names[i])
    assert shared > 1000  # rows are shared, not one per node
    graph, devices, _run = random_graph(3)  # no attr keys handed: a row per node
    b = partition(graph, devices)._builder
    row_of, rows = b.fact_table(list(range(b.n)))
    assert len(rows) == b.n
    for i in range(b.n):
        assert _row_answers(rows[row_of[i]], dtype_decides) == _all_fact_answers(b, i)


def test_unknown_dtypes_are_named_and_sized_as_python_does(monkeypatch):
    """A dtype outside TF's enum (and its ref) crosses devices: the kernel's names and sizes (its
    tables, ``dtype_<n>`` beyond them) equal :func:`placeviz.protos.dtype_name`/``dtype_size``."""
    gd = GraphDef()
    for k, dtype in enumerate((77, 250, DT_FLOAT, DT_INT32)):  # 250: a ref of 150 (its transfer: 150)
        gd.node.extend([_node(f"c{k}", "Placeholder", [], PS0, dtype=dtype, shape=[3]),
                        _node(f"i{k}", "Identity", [f"c{k}"], W0, T=dtype)])
    graph = Graph(gd)
    devices = [nd.device for nd in gd.node]
    calls: dict[str, int] = {}
    outcome, done = assert_same(monkeypatch, graph, devices, "dtypes", calls_made=calls)
    assert done.get("split_originals") == calls["split_originals"]
    names = {t["dtype"] for t in outcome[1]["json"]["transfers"]}
    assert {"dtype_77", "dtype_150", "float32", "int32"} <= names


# ------------------------------------------------------------------------------ benchmark graph
_BENCH = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import gen_graphs
placed, unplaced, meta = gen_graphs.build_with_tf(10000, False)
Path(sys.argv[1]).write_bytes(unplaced)
"""


@pytest.mark.tf
@pytest.mark.slow
def test_benchmark_graph_partitions_identically_and_is_never_declined(monkeypatch, tmp_path):
    """g10k (benchmarks/gen_graphs.py, built by TF in a subprocess), placed by replica_device_setter
    with 4 PS tasks: both implementations give the same whole result, and the kernel does every
    level itself (declining is for rare inputs; a benchmark graph is the common case)."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    path = tmp_path / "g10k.unplaced.pb"
    proc = subprocess.run([sys.executable, "-c", _BENCH, str(path), str(ROOT / "benchmarks")], capture_output=True,
                          text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from placeviz.io import model_from_bytes
    from placeviz.placement import PlacementOptions, place_graph
    from placeviz.placement.setter import SetterConfig

    model = model_from_bytes("g10k", path.read_bytes())
    setter = SetterConfig(ps_tasks=4, worker_device="/job:worker/task:0")  # as benchmarks/run.py places it
    placed = place_graph(model.graph, PlacementOptions(setter=setter))
    graph, devices = placed.graph, list(placed.placement.devices)
    for kw in (dict(level="device"), dict(level="task"), dict(level="device", replicate_constants=False)):
        calls: dict[str, int] = {}
        outcome, done = assert_same(monkeypatch, graph, devices, "g10k", calls_made=calls, **kw)
        assert outcome[0] == "ok" and outcome[1]["json"]["transfers"]
        assert done.get("split_originals", 0) == calls["split_originals"] >= 1


@pytest.mark.parametrize("seed", range(6))
def test_cut_shapes_table_is_shape_of_each_output(seed):
    """The C cut's shapes table (``_shapes_of``: without ``_output_shapes`` it skips the outputs the
    rule reads nothing for, ``_shape_beyond_output_shapes``) says what ``shape()`` says of each
    output, asked alone on a fresh partitioner, for every output of every node (and one past)."""
    graph, devices, run = random_graph(seed)
    table, fresh = (partition(graph, devices, **run)._builder for _ in range(2))
    assert not table.output_shapes  # the random graphs have none: the skipping path
    pairs = [(i, s) for i in range(table.n)
             for s in range(len((table.types(i) or ((), ()))[1]) + 1)]
    got = dict(zip(pairs, table._shapes_of([i for i, _s in pairs], [s for _i, s in pairs]), strict=True))
    assert got == {(i, s): fresh.shape(i, s) for i, s in pairs}


def test_cut_shapes_table_by_kind_is_shape_of_each_output():
    """The batch of ``_shapes_of`` (``_shapes_by_kind``) on every kind of output the rule knows: a
    variable with and without a ``shape`` attr, its reads one and two Identities deep, a
    ``VarHandleOp`` read by ``ReadVariableOp``, ``PlaceholderWithDefault`` with a partly known and
    no declared shape, an ``Apply*``'s outputs, a read of an op the rule reads nothing for, a
    Const: each says what ``shape()`` says asked alone on a fresh partitioner."""
    nodes = [
        _node("v", "VariableV2", [], PS0, dtype=DT_FLOAT, shape=[3, 4]),
        _node("u", "VariableV2", [], PS0, dtype=DT_FLOAT),
        _node("v/read", "Identity", ["v"], W0, T=DT_FLOAT),
        _node("v/read2", "Identity", ["v/read"], W0, T=DT_FLOAT),
        _node("u/read", "Identity", ["u"], W0, T=DT_FLOAT),
        _node("h", "VarHandleOp", [], PS1, dtype=DT_FLOAT, shape=[5]),
        _node("h/read", "ReadVariableOp", ["h"], W0, dtype=DT_FLOAT),
        _node("c", "Const", [], PS1, dtype=DT_FLOAT),
        _node("p", "PlaceholderWithDefault", ["c"], W0, dtype=DT_FLOAT, shape=[2]),
        _node("q", "PlaceholderWithDefault", ["v/read"], W0, dtype=DT_FLOAT),
        _node("c/read", "Identity", ["c"], W0, T=DT_FLOAT),
        _node("apply", "ApplyGradientDescent", ["v", "c", "v/read"], PS0, T=DT_FLOAT),
        _node("sum", "AddV2", ["v/read", "h/read"], W1, T=DT_FLOAT),
        _node("sum/read", "Identity", ["sum"], W0, T=DT_FLOAT),
    ]
    nodes[7].attr["value"].tensor.dtype = DT_FLOAT
    nodes[7].attr["value"].tensor.tensor_shape.dim.add().size = 7
    nodes[8].attr["shape"].shape.dim[0].size = -1
    gd = GraphDef()
    gd.node.extend(nodes)
    graph = Graph(gd)
    devices = [nd.device for nd in nodes]
    table, fresh = (partition(graph, devices, targets=[nd.name for nd in nodes])._builder for _ in range(2))
    assert not table.output_shapes
    pairs = [(i, s) for i in range(table.n) for s in range(3)]
    got = dict(zip(pairs, table._shapes_of([i for i, _s in pairs], [s for _i, s in pairs]), strict=True))
    assert got == {(i, s): fresh.shape(i, s) for i, s in pairs}
    assert got[(2, 0)] == got[(3, 0)] == [3, 4] and got[(6, 0)] == [5] and got[(4, 0)] is None
