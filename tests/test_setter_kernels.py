"""The setter's C replay (``placeviz.placement._setter_kernels.setter``) against the Python one.

``run_setter`` must give exactly the same result with the kernel as without it (``setter._kernels
= None`` runs the specification, ``setter.setter_replay``): the devices, rules, references (in
order), strategy calls, explanations, the result graph's arrays, colocation and GraphDef, and the
same error when there is one. The reference run also settles every ``group`` root in the split's
general loop (``_one_device`` answering nothing), so the short way for the usual root is compared
with that loop too. Compared on TF-built graphs (the setter fixture, every sample
unplaced, with and without SyncReplicas and resource variables), on a hand-made graph with every
case the replay knows (and randomly mutated copies of it), under several ``SetterConfig``s, with
and without the op-fact attr keys cached (``place_graph`` caches them before the setter runs).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placeviz.devices import ClusterSpec
from placeviz.errors import PlacevizError
from placeviz.graph import Graph
from placeviz.io import model_from_proto
from placeviz.ops import load_op_table
from placeviz.placement import PlacementOptions, place_graph, scopes, setter
from placeviz.placement.placer import read_fact_attrs
from placeviz.placement.setter import SetterConfig, run_setter
from placeviz.protos import GraphDef, MetaGraphDef

OP_TABLE = load_op_table()
KERNELS = setter._kernels
CLUSTER = ClusterSpec.from_dict({"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222"]})
CONFIGS = {
    "ps1": SetterConfig(ps_tasks=1),
    "ps2": SetterConfig(ps_tasks=2, worker_device="/job:worker/task:0"),
    "ps3": SetterConfig(ps_tasks=3, worker_device="/job:worker/task:1/device:CPU:0"),
    "greedy3": SetterConfig(ps_tasks=3, strategy="greedy"),
    "greedy2-tf1": SetterConfig(ps_tasks=2, strategy="greedy", tf_major="1"),
    "no-merge": SetterConfig(ps_tasks=2, merge_devices=False),
    "cluster": SetterConfig(cluster=CLUSTER, worker_device="/job:worker/task:0"),
    "global-graph": SetterConfig(ps_tasks=2, graph_as_default=False),
    "global-graph-ps3": SetterConfig(ps_tasks=3, graph_as_default=False, merge_devices=False),
    "ps-device-no-job": SetterConfig(ps_tasks=2, ps_device="/task:1"),
    "no-ps-device": SetterConfig(ps_tasks=2, ps_device=""),
    "ps-ops-set": SetterConfig(ps_tasks=2, ps_ops=frozenset({"VariableV2", "Const", "NoOp"})),
    "ps-ops-tuple": SetterConfig(ps_tasks=2, ps_ops=("VariableV2", "VarHandleOp")),
    "no-worker-device": SetterConfig(ps_tasks=2, worker_device=""),
    "no-setter": SetterConfig(ps_tasks=0),
}


def test_the_extension_is_built():
    assert KERNELS is not None, "placeviz.placement._setter_kernels was not built: is a C compiler installed?"


def _snapshot(result, graph_def: bool) -> tuple:
    g = result.graph
    out = (list(g.names), list(g.ops), list(g.devices), g.in_start.tolist(), g.in_src.tolist(), g.in_slot.tolist(),
           list(g.index.items()), list(g.colocation.items()), list(g.colocated_names.items()),
           list(result.rule), list(result.reference.items()), list(result.strategy_calls), result.ps_tasks,
           [result.explain(i) for i in range(len(g))], [type(x) for x in result.rule])
    if graph_def:
        out += (g.graph_def.SerializeToString(deterministic=True),)
    return out


def assert_lookups_like_a_fresh_graph(result, source: Graph) -> None:
    """The result graph answers name lookups and colocation as a graph read from its own GraphDef does.

    Checked before its name index is made (the result graph builds it on first use and answers
    ``ids_of`` and ``colocated_name_ids`` from the source graph's ids until then), then after.
    """
    g = result.graph
    fresh = Graph(g.graph_def)
    assert list(g.colocation.items()) == list(fresh.colocation.items())  # made on first use
    assert list(g.colocated_names.items()) == list(fresh.colocated_names.items())
    if "index" in g.__dict__:
        return  # the setter reused the source's index (nothing renumbered)
    probe = set(source.names) | set(fresh.names) | {"no/such/node", ""}
    assert g.located_names == fresh.located_names
    assert g.colocated_name_ids == fresh.colocated_name_ids
    assert g.ids_of(probe) == fresh.ids_of(probe)
    assert g.ids_of(set(source.names[::2])) == fresh.ids_of(set(source.names[::2]))
    assert "index" not in g.__dict__
    assert g.index == fresh.index
    assert g.ids_of(probe) == fresh.ids_of(probe)


def _run(graph: Graph, config: SetterConfig, graph_def: bool, attr_keys=None):
    try:
        result = run_setter(graph, config, OP_TABLE, attr_keys=attr_keys)
        if graph_def:
            assert_lookups_like_a_fresh_graph(result, graph)
        return _snapshot(result, graph_def)
    except (PlacevizError, ValueError, KeyError, IndexError, TypeError) as e:
        return ("error", type(e).__name__, str(e))


NATIVE: list[bool] = []  # per native_replay call of assert_same: whether it answered (False: declined)


def _spied_native_replay(*args, **kwargs):
    out = REAL_NATIVE_REPLAY(*args, **kwargs)
    NATIVE.append(out is not None)
    return out


REAL_NATIVE_REPLAY = setter.native_replay


def _no_root_settled(members, devices, assign_nodes) -> None:
    return None  # every group root goes through _split_groups' general loop


def assert_same(graph: Graph, configs=CONFIGS, graph_def: bool = True) -> list[str]:
    """Run every config with and without the kernels, first without the attr keys handed to the
    setter, then with them; returns the outcomes (``ok`` or the error both raised). ``NATIVE``
    records, per call of the native replay, whether it answered or declined."""
    outcomes = []
    for cached in (False, True):
        keys = None
        if cached:
            try:
                keys = read_fact_attrs(graph, OP_TABLE)
            except PlacevizError:
                continue
        for name, config in configs.items():
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(setter, "native_replay", _spied_native_replay)
                with_kernels = _run(graph, config, graph_def, keys)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(setter, "_kernels", None)
                mp.setattr(setter, "_one_device", _no_root_settled)
                reference = _run(graph, config, graph_def, keys)
            assert with_kernels == reference, (name, cached)
            outcomes.append("ok" if with_kernels[0] != "error" else with_kernels[2])
    return outcomes


# ----------------------------------------------------------------------------- a hand-made graph
def setter_graph() -> GraphDef:
    """An unplaced training-like graph with every case the replay handles: variables and their
    ``get_variable`` initializers, optimizer slots colocated with them, resource variables (scope
    hints, reads under device(None)), a cond Switch colocated with its input, inner device scopes
    (one naming another job), multi- and single-device ``group`` NoOps, a TensorArray."""
    g = GraphDef()

    def add(name, op, inputs=(), device="", cls=None, dtype=1, shape=(8, 4)):
        n = g.node.add(name=name, op=op, input=list(inputs), device=device)
        n.attr["dtype"].type = dtype
        if shape is not None:
            n.attr["shape"].shape.SetInParent()  # a scalar too
            for d in shape:
                n.attr["shape"].shape.dim.add(size=d)
        if cls:
            n.attr["_class"].list.s.extend(c.encode() for c in cls)
        return n

    add("global_step", "VariableV2", dtype=9, shape=(), cls=["loc:@global_step"])
    add("global_step/Initializer/zeros", "Const", cls=["loc:@global_step"], dtype=9, shape=())
    add("global_step/Assign", "Assign", ["global_step", "global_step/Initializer/zeros"], cls=["loc:@global_step"])
    for k in range(3):
        device = ["", "/device:CPU:0", "/job:other/task:1"][k]
        add(f"w{k}", "VariableV2", device=device, cls=[f"loc:@w{k}"])
        add(f"w{k}/Initializer/zeros", "Const", cls=[f"loc:@w{k}"])
        add(f"w{k}/Assign", "Assign", [f"w{k}", f"w{k}/Initializer/zeros"], cls=[f"loc:@w{k}"])
        add(f"w{k}/read", "Identity", [f"w{k}"], cls=[f"loc:@w{k}"])
    add("v", "VarHandleOp", dtype=1, shape=(4,))
    add("v/Initializer/ones", "Const", cls=["loc:@v"], shape=(4,))
    add("v/Assign", "AssignVariableOp", ["v", "v/Initializer/ones"])
    add("v/Read/ReadVariableOp", "ReadVariableOp", ["v"])
    add("v/value", "ReadVariableOp", ["v"])
    add("x", "Placeholder", device="/device:GPU:0")
    add("h0", "MatMul", ["x", "w0/read"])
    add("h1", "MatMul", ["h0", "w1/read"], device="/job:worker/task:2")
    add("h2", "MatMul", ["h1:0", "w2/read", "^w0/Assign"])
    add("pred", "Placeholder", dtype=10, shape=())
    add("cond/Switch", "Switch", ["h2", "pred"], cls=["loc:@h2"])
    add("cond/Identity", "Identity", ["cond/Switch:1"])
    add("ta", "TensorArrayV3", ["pred"])
    for k in range(3):
        add(f"w{k}/Adam", "VariableV2", cls=[f"loc:@w{k}"])
        add(f"w{k}/Adam/Initializer/zeros", "Const", cls=[f"loc:@w{k}"])
        add(f"w{k}/Adam/Assign", "Assign", [f"w{k}/Adam", f"w{k}/Adam/Initializer/zeros"], cls=[f"loc:@w{k}"])
        add(f"update_w{k}", "ApplyAdam", [f"w{k}", f"w{k}/Adam", "h2"], cls=[f"loc:@w{k}"])
    add("later", "Identity", ["late_var"], cls=["loc:@late_var"])  # colocated with a later node
    add("late_var", "VariableV2")
    add("update/NoOp", "NoOp", ["^update_w0", "^update_w1"])
    add("update/NoOp_1", "NoOp", ["^update_w2", "^v/Assign"])
    add("update", "NoOp", ["^update/NoOp", "^update/NoOp_1"])
    add("init", "NoOp", ["^w0/Assign", "^w1/Assign", "^w2/Assign", "^v/Assign", "^global_step/Assign"])
    add("init_local", "NoOp", ["^w0/Adam/Assign", "^w1/Adam/Assign"], cls=["loc:@w0"])
    add("w0/group_deps", "NoOp", ["^w0/Assign", "^w0/Adam/Assign"])  # a group on one device
    add("train", "NoOp", ["^update", "^h2"])
    return g


def _graph(graph_def: GraphDef) -> Graph | None:
    try:
        return Graph(graph_def)
    except PlacevizError:
        return None


def test_the_hand_made_graph():
    outcomes = assert_same(_graph(setter_graph()))
    assert outcomes.count("ok") >= len(CONFIGS)


def test_group_children_are_named_as_unique_name_names_them():
    # ``group``'s per-device NoOps are ``<root>/NoOp``, ``<root>/NoOp_<k>`` (ops.py unique_name);
    # a NoOp named otherwise is a grouped op of the root, not a child.
    base = setter_graph()
    for child_name, child in (("update/NoOp_2", True), ("update/NoOp_01", True), ("update/NoOp_", False),
                              ("update/NoOp_1a", False), ("update/NoOpX", False), ("update/NoO", False)):
        g = GraphDef()
        g.CopyFrom(base)
        for n in g.node:
            if n.name == "update/NoOp_1":
                n.name = child_name
            n.input[:] = ["^" + child_name if x == "^update/NoOp_1" else x for x in n.input]
        graph = _graph(g)
        roots = scopes.group_roots(graph)
        update, first, second = graph.index["update"], graph.index["update/NoOp"], graph.index[child_name]
        assert roots[update][0] == ([first, second] if child else [first]), child_name
        assert (second in roots) != child, child_name  # not a child: a root of its own
        assert_same(graph, {k: CONFIGS[k] for k in ("ps2", "greedy3", "no-merge")})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_graphs(data):
    nodes = list(setter_graph().node)
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    names = [n.name for n in nodes]
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["shuffle", "swap", "drop", "device", "class", "op", "input", "name",
                                          "attr"]))
        n = nodes[rng.randrange(len(nodes))]
        if kind == "shuffle":
            rng.shuffle(nodes)
        elif kind == "swap":
            a, b = rng.randrange(len(nodes)), rng.randrange(len(nodes))
            nodes[a], nodes[b] = nodes[b], nodes[a]
        elif kind == "drop" and len(nodes) > 1:
            nodes.remove(n)
        elif kind == "device":
            n.device = data.draw(st.sampled_from(["", "/job:ps", "/job:ps/task:1", "/job:other", "/device:GPU:1",
                                                  "/job:worker/task:0", "/task:3", "/cpu:0", "bad device", "/job:"]))
        elif kind == "class":
            n.attr["_class"].list.s[:] = [f"loc:@{x}".encode() for x in data.draw(st.lists(
                st.sampled_from(names + ["nope", n.name]), max_size=3))]
        elif kind == "op":
            n.op = data.draw(st.sampled_from(["VariableV2", "VarHandleOp", "Const", "NoOp", "Identity", "Switch",
                                              "AssignVariableOp", "ReadVariableOp", "NoSuchOp", "MutableHashTable",
                                              "ConditionalAccumulator", "TensorArrayV3"]))
        elif kind == "input":
            src = data.draw(st.sampled_from(names))
            if data.draw(st.booleans()):
                n.input.append("^" + src)
            else:
                n.input.insert(0, src)
        elif kind == "name":
            old = n.name
            n.name = data.draw(st.sampled_from(["update/NoOp_2", "update/NoOp_", "w0/Initializer/x", "fresh",
                                                "w1/Adam_1", "init/NoOp", "init/NoOp_1"]))
            for m in nodes:
                m.input[:] = [x.replace(old, n.name) if x.lstrip("^").split(":")[0] == old else x for x in m.input]
        else:
            name = data.draw(st.sampled_from(["dtype", "shape", "_output_shapes"]))
            choice = data.draw(st.integers(0, 3))
            if choice == 0:
                n.attr[name].type = data.draw(st.sampled_from([1, 7, 9, 20, 101, 0]))
            elif choice == 1:
                n.attr[name].shape.unknown_rank = True
            elif choice == 2:
                n.attr[name].shape.dim.add(size=-1)
            elif name in n.attr:
                del n.attr[name]
    out = GraphDef()
    for n in nodes:
        out.node.add().CopyFrom(n)
    graph = _graph(out)
    if graph is not None:
        assert_same(graph)


# ----------------------------------------------------------------------------- TF-built graphs
@pytest.mark.tf
def test_tf_fixture_graphs(tf_models):
    graph_def = GraphDef()
    graph_def.ParseFromString((tf_models / "setter.pb").read_bytes())
    meta = MetaGraphDef()
    meta.ParseFromString((tf_models / "setter.meta").read_bytes())
    for g in (graph_def, meta.graph_def):
        unplaced = GraphDef()
        unplaced.CopyFrom(g)
        for n in unplaced.node:
            n.device = ""
        for source in (g, unplaced):
            assert "ok" in assert_same(Graph(source))


SAMPLE_BUILDS = [
    ("mlp", {}), ("mlp", {"sync_replicas": True, "total_replicas": 3}),
    ("mlp", {"resource_variables": True, "sync_replicas": True}),
    ("inception", {}), ("inception", {"sync_replicas": True, "resource_variables": True}),
    ("wide_deep", {}), ("wide_deep", {"resource_variables": True}),
    ("lstm", {"sync_replicas": True}), ("hashtable", {}), ("hashtable", {"resource_variables": True}),
    ("misconfigured", {}), ("transformer", {"resource_variables": True}),
]


@pytest.mark.tf
@pytest.mark.parametrize("sample,options", SAMPLE_BUILDS,
                         ids=[f"{s}-{'-'.join(sorted(o)) or 'plain'}" for s, o in SAMPLE_BUILDS])
def test_tf_built_samples(sample, options):
    tf = pytest.importorskip("tensorflow")
    from placeviz.sample_graphs import BuildOptions, build_graph

    graph = build_graph(sample, BuildOptions(ps_tasks=0, **options))  # unplaced: no setter
    with graph.as_default():
        meta = tf.compat.v1.train.export_meta_graph(graph=graph)
    model = model_from_proto(f"sample:{sample}", "sample", meta)
    configs = CONFIGS if sample != "transformer" else {k: CONFIGS[k] for k in ("ps2", "greedy3", "global-graph")}
    assert "ok" in assert_same(model.graph, configs, graph_def=sample != "transformer")
    # The whole pipeline, as `placeviz place` runs it.
    results = []
    for kernels in (KERNELS, None):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(setter, "_kernels", kernels)
            try:
                placed = place_graph(model_from_proto(f"sample:{sample}", "sample", meta).graph,
                                     PlacementOptions(setter=SetterConfig(ps_tasks=2)), OP_TABLE)
                results.append((placed.graph.names, placed.placement.devices, placed.setter.rule))
            except PlacevizError as e:  # the misconfigured sample's colocation conflict
                results.append(("error", type(e).__name__, str(e)))
    assert results[0] == results[1]


# ----------------------------------------------------------------------------- odd inputs
@pytest.mark.parametrize("device", ["bad device", "/job:ps/task:x", "/job:", "/job:ps", "/job:other/task:2", "/task:3"])
def test_odd_own_devices_give_the_same_result_or_error(device):
    # On a ps op, a plain op, a slot variable (colocated, calls the strategy) and a hinted op.
    for name in ("w1", "h0", "w0/Adam", "v/Assign", "global_step"):
        g = setter_graph()
        for n in g.node:
            if n.name == name:
                n.device = device
        outcomes = assert_same(_graph(g))
        if device in ("bad device", "/job:ps/task:x"):
            assert any(o != "ok" for o in outcomes)


def test_greedy_errors_are_the_same():
    for broken in ("w1/Adam", "w0"):  # a slot with an unknown dimension; a variable of unknown rank
        g = setter_graph()
        for n in g.node:
            if n.name == broken == "w1/Adam":
                n.attr["shape"].shape.dim.add(size=-1)
            elif n.name == broken:
                n.attr["shape"].shape.unknown_rank = True
        outcomes = assert_same(_graph(g), {k: CONFIGS[k] for k in ("greedy3", "greedy2-tf1", "ps-ops-set", "ps2")})
        assert any("greedy strategy" in o for o in outcomes), broken


def test_nodes_with_ops_and_its_name_filter():
    g = GraphDef()
    for name, op in (("a/Read/Identity", "Identity"), ("b", "Const"), ("c", "Identity"), ("d", "ReadVariableOp"),
                     ("Read/Identity", "Identity")):
        g.node.add(name=name, op=op)
    graph = Graph(g)
    wanted = frozenset({"Identity", "ReadVariableOp", "NoSuchOp"})
    assert scopes._nodes_with_ops(graph, wanted) == [0, 2, 3, 4]
    assert scopes._nodes_with_ops(graph, wanted, None, {"Identity": "/Read/Identity"}) == [0, 3]
    assert scopes._nodes_with_ops(graph, frozenset({"Const"}), None, {"Identity": "/Read/Identity"}) == [1]
    assert scopes._nodes_with_ops(graph, frozenset({"NoSuchOp"})) == []


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_renumbered_is_a_renumbering(data):
    """``_renumbered`` against the plain definition: each key (and value) mapped through the new
    ids, entries naming a dropped node (-1) left out, order kept, ints out. The ids below
    ``first`` keep their number (the group split rewrites nothing before its first root)."""
    import numpy as np

    n = data.draw(st.integers(1, 40))
    first = data.draw(st.integers(0, n))
    # A renumbering: ids below ``first`` unchanged, then distinct new ids, -1 for dropped nodes.
    kept = data.draw(st.lists(st.integers(first, 60), unique=True, min_size=n - first, max_size=n - first))
    dropped = data.draw(st.lists(st.booleans(), min_size=n - first, max_size=n - first))
    old_to_new = list(range(first)) + [-1 if drop else new for new, drop in zip(kept, dropped, strict=True)]
    keys = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    values = data.draw(st.lists(st.integers(0, n - 1), min_size=len(keys), max_size=len(keys)))
    mapping = dict(zip(keys, values, strict=True))
    new_id = np.asarray(old_to_new, dtype=np.int32)
    for keys_only in (False, True):
        expected = [(old_to_new[k], v if keys_only else old_to_new[v]) for k, v in mapping.items()]
        expected = [(k, v) for k, v in expected if k >= 0 and (keys_only or v >= 0)]
        got = setter._renumbered(mapping, new_id, first, keys_only)
        assert list(got.items()) == expected
        assert all(type(k) is int and (keys_only or type(v) is int) for k, v in got.items())


# ----------------------------------------------------------------------------- the native replay alone
# setter.native_replay (the C entry point) against setter.setter_replay (the specification), at
# their boundary: the whole result, field by field, or a decline.
REPLAY_CONFIGS = {name: config for name, config in CONFIGS.items() if name not in ("greedy3", "greedy2-tf1", "no-setter")}
REPLAY_CONFIGS["scope-end"] = SetterConfig(ps_tasks=2, scope_end="h2")
REPLAY_CONFIGS["scope-end-hinted"] = SetterConfig(ps_tasks=3, scope_end="v/Assign")  # a hinted node outside
REPLAY_CONFIGS["ps4"] = SetterConfig(ps_tasks=4, worker_device="/job:worker/task:0")


def plain_setter_graph() -> GraphDef:
    """:func:`setter_graph` without its resource variable (whose initializer is built under a
    device scope TF's library opens: a device-scope hint)."""
    g = GraphDef()
    for node in setter_graph().node:
        if node.name == "v" or node.name.startswith("v/"):
            continue
        out = g.node.add()
        out.CopyFrom(node)
        out.input[:] = [x for x in node.input if not x.lstrip("^").startswith("v/")]
    return g


def both_replays(graph: Graph, config: SetterConfig, attr_keys=None):
    """``(native, spec)``: the two replays with the arguments ``_run_setter`` gives them."""
    from placeviz.devices import PyDeviceSpec

    ps_tasks = setter.num_ps_tasks(config)
    ps_ops = config.ps_ops if config.ps_ops is not None else OP_TABLE.ps_ops()
    ps_spec = PyDeviceSpec.parse(config.ps_device) if config.ps_device else None
    worker_spec = PyDeviceSpec.parse(config.worker_device or "")
    inside = graph.index[config.scope_end] if config.scope_end else len(graph)
    hints, device_none = scopes.device_scope_hints(graph), scopes.device_none_nodes(graph)
    native = setter.native_replay(graph, config, OP_TABLE, ps_tasks, ps_ops, ps_spec, worker_spec, inside, hints,
                                  device_none, attr_keys)
    try:
        spec = setter.setter_replay(graph, config, OP_TABLE, setter.RoundRobin(ps_tasks), ps_ops, ps_spec,
                                    worker_spec, inside, hints, device_none, attr_keys)
    except (PlacevizError, ValueError, KeyError, IndexError, TypeError) as e:
        spec = e
    return native, spec


def assert_native_is_the_spec(graph: Graph, config: SetterConfig, attr_keys=None) -> None:
    native, spec = both_replays(graph, config, attr_keys)
    assert native is not None, "the native replay declined"
    devices, rule, reference, calls = native
    assert devices == spec[0]
    assert all(type(d) is str for d in devices)
    assert rule == spec[1] and all(type(r) is int for r in rule)
    assert list(reference.items()) == list(spec[2].items())  # the same order: explanations read it
    assert calls == spec[3]


@pytest.mark.parametrize("hinted", [False, True], ids=["no-hints", "hints"])
@pytest.mark.parametrize("name", sorted(REPLAY_CONFIGS))
def test_native_replay_is_the_python_replay(name, hinted):
    graph = _graph(setter_graph() if hinted else plain_setter_graph())
    if REPLAY_CONFIGS[name].scope_end not in (None, *graph.names):
        pytest.skip("no such node in this graph")
    assert bool(scopes.device_scope_hints(graph)) == hinted
    assert_native_is_the_spec(graph, REPLAY_CONFIGS[name])
    keys = read_fact_attrs(graph, OP_TABLE)  # the resource test answered by op and attr key
    assert_native_is_the_spec(graph, REPLAY_CONFIGS[name], keys)
    NATIVE.clear()
    assert_same(graph, {name: REPLAY_CONFIGS[name]})
    assert NATIVE and all(NATIVE)  # run_setter took the native answer


def test_the_native_replay_is_not_asked_with_the_greedy_strategy():
    NATIVE.clear()
    assert_same(_graph(setter_graph()), {k: CONFIGS[k] for k in ("greedy3", "greedy2-tf1", "no-setter")})
    assert NATIVE == []


def _with_node(graph_def: GraphDef, name: str, change) -> Graph:
    g = GraphDef()
    g.CopyFrom(graph_def)
    change(next(n for n in g.node if n.name == name))
    return _graph(g)


@pytest.mark.parametrize("case", ["bad-device", "ps-ops-not-strings", "table-too-big", "resource-test-raises",
                                  "colocation-key-not-a-node"])
def test_native_replay_declines(monkeypatch, case):
    """What it cannot settle up front it leaves to the Python replay, which answers or raises."""
    base = plain_setter_graph()
    config = CONFIGS["ps2"]
    graph = _graph(base)
    if case == "bad-device":
        graph = _with_node(base, "h0", lambda n: setattr(n, "device", "bad device"))
    elif case == "ps-ops-not-strings":
        config = SetterConfig(ps_tasks=2, ps_ops=("VariableV2", 7))  # type: ignore[arg-type]
    elif case == "table-too-big":
        monkeypatch.setattr(setter, "_MAX_DEVICE_TABLE", 3)
    elif case == "resource-test-raises":  # a slot variable without its dtype: io types cannot be computed
        graph = _with_node(base, "w1/Adam", lambda n: n.attr.pop("dtype"))
    else:
        graph.colocation[len(graph)] = ("loc:@w0",)
    native, spec = both_replays(graph, config)
    assert native is None
    if case == "resource-test-raises":
        assert isinstance(spec, PlacevizError)
    if case != "colocation-key-not-a-node":
        NATIVE.clear()
        outcomes = assert_same(graph, {case: config})
        assert NATIVE and not any(NATIVE)
        assert (outcomes[0] == "ok") == (case not in ("bad-device", "resource-test-raises"))


@pytest.mark.tf
def test_native_replay_on_the_10k_benchmark_graph():
    """g10k of benchmarks/gen_graphs.py, unplaced as the benchmarks run it."""
    from benchmarks.gen_graphs import build_with_tf

    _, unplaced, _ = build_with_tf(10_000, False)
    graph_def = GraphDef()
    graph_def.ParseFromString(unplaced)
    graph = Graph(graph_def)
    for name in ("ps4", "ps3", "no-merge", "global-graph"):
        assert_native_is_the_spec(graph, REPLAY_CONFIGS[name])
    keys = read_fact_attrs(graph, OP_TABLE)
    assert_native_is_the_spec(graph, REPLAY_CONFIGS["ps4"], keys)
    NATIVE.clear()
    assert assert_same(graph, {"ps4": REPLAY_CONFIGS["ps4"]}, graph_def=False) == ["ok", "ok"]
    assert NATIVE == [True, True]


def test_a_switch_shares_a_group_that_names_no_op():
    """A ``_class`` entry that is no ``loc:@`` name still puts a Switch with its data input
    (``colocation_groups`` are compared, not the names they locate)."""
    g = GraphDef()
    g.CopyFrom(plain_setter_graph())
    for node in g.node:
        if node.name in ("h2", "cond/Switch"):
            node.attr["_class"].list.s[:] = [b"group:shared"]
    graph = _graph(g)
    assert graph.index["cond/Switch"] not in graph.colocated_names
    for name in ("ps2", "scope-end"):
        assert_native_is_the_spec(graph, REPLAY_CONFIGS[name])
    native, _ = both_replays(graph, REPLAY_CONFIGS["ps2"])
    assert native[2][graph.index["cond/Switch"]] == graph.index["h2"]  # colocated with its data input


def test_group_noop_names_do_not_depend_on_a_newline_in_a_name():
    """The NoOp names are searched in the names joined one a line; a name holding a newline (not
    TF's, but a GraphDef may carry one) puts lines and nodes out of step, and the search then goes
    name by name: same names either way. (The names themselves are checked against TF in
    ``tests/test_setter_options.py::test_group_noops_are_named_by_unique_name_in_creation_order``.)"""
    out = []
    for other in ("bad\nname", "ok"):
        g = GraphDef()
        for var in ("a", "b"):
            g.node.add(name=var, op="VariableV2").attr["dtype"].type = 1
        for name in (other, "INIT/NoOp", "init/NoOp_1/c"):
            g.node.add(name=name, op="NoOp")
        g.node.add(name="init", op="NoOp", input=["^a", "^b"])
        result = run_setter(Graph(g), SetterConfig(ps_tasks=2), OP_TABLE)
        out.append([n for n in result.graph.names if n != other])
    assert out[0] == out[1]
    assert [n for n in out[0] if n.startswith("init/NoOp_")][-2:] == ["init/NoOp_2", "init/NoOp_3"]
