"""The placer's C loops (``placeviz.placement._placer_kernels``) against its Python loops.

Every test places the same graph twice, with the kernels and with ``placer._kernels = None``
(the reference Python path), and compares everything the placer returns: devices, reasons,
group roots, candidates in order, or the error message. The TF-fidelity tests
(test_placement_fidelity, test_tf_scenarios) run the kernel path against TensorFlow itself.
"""

from __future__ import annotations

import random
from array import array

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placeviz.graph import Graph
from placeviz.io import load
from placeviz.placement import PlacementOptions, place_graph, placer
from placeviz.placement.placer import PlacerConfig
from placeviz.placement.setter import SetterConfig
from placeviz.protos import GraphDef
from tests.test_fuzz_load import realistic_graph as _realistic_graph


def realistic_graph() -> GraphDef:
    """test_fuzz_load's training-like graph, with the ``T`` attrs the placer's op facts need."""
    g = _realistic_graph()
    for n in g.node:
        if n.op not in ("VariableV2", "Const", "Placeholder", "NoOp"):
            n.attr["T"].type = 1
        if n.op == "Merge":
            n.attr["N"].i = 2
        if n.op == "Enter":
            n.attr["frame_name"].s = b"loop"
    return g

CONFIGS = [
    PlacementOptions(setter=SetterConfig(ps_tasks=2, worker_device="/job:worker/task:0")),
    PlacementOptions(setter=SetterConfig(ps_tasks=3), cpus_per_task=2,
                     placer=PlacerConfig(allow_soft_placement=True)),
    PlacementOptions(setter=SetterConfig(ps_tasks=1), gpus_per_worker=1, replace_devices=True),
    PlacementOptions(placer=PlacerConfig(master_task=None)),
]


def test_the_extension_is_built():
    assert placer._kernels is not None, "placeviz.placement._placer_kernels was not built"


def outcome(graph: Graph, options: PlacementOptions):
    try:
        result = place_graph(graph, options)
    except Exception as e:  # noqa: BLE001 - the error is part of the result
        return ("error", type(e).__name__, str(e))
    p = result.placement
    return p.devices, p.reason, p.group_root, list(p.candidates.items())


def both_ways(graph_def: GraphDef, monkeypatch, options: PlacementOptions):
    """(with kernels, without); each on a fresh Graph, so no cache is shared."""
    with_kernels = outcome(Graph(graph_def), options)
    with monkeypatch.context() as m:
        m.setattr(placer, "_kernels", None)
        without = outcome(Graph(graph_def), options)
    return with_kernels, without


def test_tf_built_graphs(tf_models, monkeypatch):
    for name in ("setter.pb", "setter.meta"):
        graph_def = load(tf_models / name).graph_def
        for options in CONFIGS:
            got, want = both_ways(graph_def, monkeypatch, options)
            assert got == want, (name, options)
            assert got[0] != "error" or options.placer.allow_soft_placement is False


@pytest.mark.parametrize("options", CONFIGS)
def test_realistic_graph(options, monkeypatch):
    got, want = both_ways(realistic_graph(), monkeypatch, options)
    assert got == want
    assert got[0] != "error"


DEVICES = ["", "/job:ps/task:0", "/job:ps/task:1", "/job:worker/task:0/device:GPU:0", "/device:CPU:1",
           "/job:worker/task:0", "/job:ps/task:7", "/cpu:0", "/job:worker"]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_graphs(monkeypatch, data):
    """Conflicting devices, colocations and ref edges: merges that fail, requests TF drops."""
    base = realistic_graph()
    nodes = list(base.node)
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    for _ in range(data.draw(st.integers(1, 8))):
        n = nodes[rng.randrange(len(nodes))]
        kind = data.draw(st.sampled_from(["device", "class", "ref", "generator", "identity"]))
        if kind == "device":
            n.device = data.draw(st.sampled_from(DEVICES))
        elif kind == "class":
            targets = [x.name for x in rng.sample(nodes, 2)]
            n.attr["_class"].list.s[:] = [f"loc:@{t}".encode() for t in targets[:data.draw(st.integers(1, 2))]]
        elif kind == "ref":  # an Assign reading another variable: a ref edge
            var = rng.choice([x for x in nodes if x.op == "VariableV2"])
            n_new = base.node.add(name=f"extra_assign_{len(nodes)}", op="Assign", input=[var.name, n.name])
            n_new.attr["T"].type = 1
            n_new.device = data.draw(st.sampled_from(DEVICES))
            nodes.append(n_new)
        elif kind == "generator":
            c = base.node.add(name=f"extra_const_{len(nodes)}", op="Const", device=data.draw(st.sampled_from(DEVICES)))
            c.attr["dtype"].type = 1
            n.input.append("^" + c.name) if rng.random() < 0.5 else None
            nodes.append(c)
        else:
            src = rng.choice(nodes)
            i = base.node.add(name=f"extra_identity_{len(nodes)}", op="Identity", input=[src.name])
            i.attr["T"].type = 1
            nodes.append(i)
    out = GraphDef()
    for n in nodes:
        out.node.add().CopyFrom(n)
    for options in CONFIGS[:2]:
        got, want = both_ways(out, monkeypatch, options)
        assert got == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Const", "Identity", "AddN"]),
                          st.one_of(st.none(), st.integers(-2, 3), st.booleans(), st.binary(max_size=2),
                                    st.tuples(st.integers(0, 1), st.none()))), max_size=40))
def test_fact_key_numbers(pairs):
    """number_keys numbers (op, key) pairs in order of first occurrence, as _fact_keys' Python path."""
    ops, values = [op for op, _ in pairs], [v for _, v in pairs]
    first: dict = {}
    want = [first.setdefault(pair, len(first)) for pair in zip(ops, values, strict=True)]
    numbers, num_keys = placer._kernels.number_keys(ops, values)
    assert (np.frombuffer(numbers, dtype=np.int64).tolist(), num_keys) == (want, len(first))


# ---------------------------------------------------------------- the glue kernels, one by one
# Each runs the kernel path and the Python path of one placer step on the same input and
# compares everything, types and orders included (``exactly``); the decline tests hand the
# kernel what only the Python path handles.


def exactly(value):
    """``value`` with every item's type spelled out, so that 1 != True and list != tuple."""
    if isinstance(value, np.ndarray):
        return ("ndarray", str(value.dtype), exactly(value.tolist()))
    if isinstance(value, dict):
        return ("dict", [(exactly(k), exactly(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [exactly(v) for v in value])
    return (type(value).__name__, value)


class KernelSpy:
    """Stands in for ``placer._kernels``: calls the real kernels and records which new ones
    declined (returned None)."""

    GLUE = ("follow_inputs", "class_keys", "request_pairs")

    def __init__(self, kernels):
        self.kernels, self.called, self.declined = kernels, [], []

    def __getattr__(self, name):
        f = getattr(self.kernels, name)

        def call(*args):
            result = f(*args)
            if name in self.GLUE:
                self.called.append(name)
                if result is None:
                    self.declined.append(name)
            return result

        return call


def glue_both_ways(graph_def: GraphDef, options: PlacementOptions, monkeypatch) -> list:
    """Place the graph with the kernels; at each glue step, also run the Python path on the same
    state. Returns (step, with kernels, Python) triples; checks that no new kernel declined."""
    spy = KernelSpy(placer._kernels)
    steps = []

    def both(name, f):
        def wrapper(*args):
            got = f(*args)
            with monkeypatch.context() as m:
                m.setattr(placer, "_kernels", None)
                want = f(*args)
            steps.append((name, exactly(got), exactly(want)))
            return got
        return wrapper

    with monkeypatch.context() as m:
        m.setattr(placer, "_kernels", spy)
        for name in ("_follow_and_consumers", "_class_keys", "_fact_keys"):
            m.setattr(placer._Placer, name, both(name, getattr(placer._Placer, name)))
        m.setattr(placer, "_request_pairs", both("_request_pairs", placer._request_pairs))
        outcome(Graph(graph_def), options)
    assert spy.declined == []
    return steps, spy.called


def check_glue(graph_def: GraphDef, options: PlacementOptions, monkeypatch, complete: bool = True):
    steps, called = glue_both_ways(graph_def, options, monkeypatch)
    for name, got, want in steps:
        assert got == want, name
    if complete:  # the placer got as far as the assignment
        assert sorted(called) == sorted(KernelSpy.GLUE)
        assert sorted(name for name, _, _ in steps) == sorted(
            ["_follow_and_consumers", "_class_keys", "_fact_keys", "_request_pairs"])


def test_glue_kernels_on_tf_built_graphs(tf_models, monkeypatch):
    for name in ("setter.pb", "setter.meta"):
        graph_def = load(tf_models / name).graph_def
        for options in CONFIGS:
            check_glue(graph_def, options, monkeypatch, complete=False)


@pytest.mark.parametrize("options", CONFIGS)
def test_glue_kernels_on_realistic_graph(options, monkeypatch):
    check_glue(realistic_graph(), options, monkeypatch)


OPS = ["Identity", "Identity", "Shape", "Size", "Rank", "NextIteration", "Const", "AddN", "NoOp", "VariableV2"]


def random_graph(rng: random.Random, n: int) -> GraphDef:
    """Ops the glue steps single out, random data and control inputs (cycles too), requests and
    ``_class`` lists (naming nodes, missing ones and the node itself)."""
    g = GraphDef()
    for i in range(n):
        node = g.node.add(name=f"n{i}", op=rng.choice(OPS), device=rng.choice(DEVICES[:4]))
        for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
            src = f"n{rng.randrange(n)}"
            node.input.append(src if rng.random() < 0.7 else "^" + src)
        if rng.random() < 0.3:
            names = [rng.choice([f"n{rng.randrange(n)}", node.name, "missing"]) for _ in range(rng.randint(1, 3))]
            node.attr["_class"].list.s[:] = [f"loc:@{t}".encode() for t in names]
    return g


def bare_placer(graph: Graph, requested: list, is_generator: list, order: list) -> placer._Placer:
    """A _Placer with only what the glue steps read (no device set, no op table)."""
    p = object.__new__(placer._Placer)
    p.graph, p.requested, p.is_generator, p.order, p._order_np = graph, requested, is_generator, order, None
    return p


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40))
def test_follow_inputs_on_random_graphs(monkeypatch, seed, n):
    """follow, consumers (both branches of _consumers_of) and plain, as the Python path has them."""
    rng = random.Random(seed)
    graph_def = random_graph(rng, n)
    requested = [rng.choice(DEVICES[:4]) for _ in range(n)]
    is_generator = [rng.random() < 0.3 for _ in range(n)]
    graph = Graph(graph_def)
    got = placer._Placer._follow_and_consumers(bare_placer(graph, requested, is_generator, []), np)
    assert placer._kernels.follow_inputs(graph.ops, requested, graph.in_start, graph.in_src, is_generator,
                                         placer.METADATA_OPS, placer.BACK_EDGE_SOURCE_OPS, placer.PASS_THROUGH_OP,
                                         placer.WHY_METADATA, placer.WHY_IDENTITY) is not None  # not declined
    with monkeypatch.context() as m:
        m.setattr(placer, "_kernels", None)
        want = placer._Placer._follow_and_consumers(bare_placer(Graph(graph_def), requested, is_generator, []), np)
        cached = Graph(graph_def)
        cached.consumers  # noqa: B018 - _consumers_of's other branch reads it
        want_cached = placer._Placer._follow_and_consumers(bare_placer(cached, requested, is_generator, []), np)
    assert exactly(got) == exactly(want) == exactly(want_cached)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40))
def test_class_keys_on_random_graphs(seed, n):
    rng = random.Random(seed)
    graph = Graph(random_graph(rng, n))
    order = list(range(n))
    rng.shuffle(order)
    got = placer._kernels.class_keys(graph.colocated_names, graph.colocated_name_ids, order, n)
    kernels, placer._kernels = placer._kernels, None
    try:
        want = bare_placer(graph, [], [], order)._class_keys()
    finally:
        placer._kernels = kernels
    assert exactly(got) == exactly(want)


def python_request_pairs(*args):
    kernels, placer._kernels = placer._kernels, None
    try:
        return placer._request_pairs(np, *args)
    finally:
        placer._kernels = kernels


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(DEVICES), st.integers(0, 5)), max_size=60), st.integers(0, 3))
def test_request_pairs(nodes, aliases):
    """Distinct (request id, type) numbered by first occurrence; distinct requests may share an id."""
    requested = [device for device, _ in nodes]
    ids = {device: k % (aliases + 1) if aliases else k for k, device in enumerate(DEVICES)}
    node_types = np.asarray([t for _, t in nodes], dtype=np.int64)
    got = placer._request_pairs(np, requested, ids, node_types, 6)
    assert placer._kernels.request_pairs(requested, ids, node_types) is not None
    assert exactly(got) == exactly(python_request_pairs(requested, ids, node_types, 6))


def test_fact_keys_both_ways():
    from placeviz.ops import load_op_table

    graph = Graph(realistic_graph())
    key_attrs = placer.fact_key_attrs(load_op_table(), set(graph.ops))
    p = bare_placer(graph, [], [], [])
    got = p._fact_keys(np, key_attrs)
    kernels, placer._kernels = placer._kernels, None
    try:
        want = p._fact_keys(np, key_attrs)
    finally:
        placer._kernels = kernels
    assert exactly(got) == exactly(want)
    assert got[1] > 1


class StrSub(str):
    pass


def follow_args(**changes):
    graph = Graph(realistic_graph())
    n = len(graph)
    args = dict(ops=list(graph.ops), requested=[""] * n, in_start=graph.in_start, in_src=graph.in_src,
                is_generator=[False] * n, metadata_ops=placer.METADATA_OPS,
                back_edge_ops=placer.BACK_EDGE_SOURCE_OPS, identity_op=placer.PASS_THROUGH_OP,
                why_metadata=placer.WHY_METADATA, why_identity=placer.WHY_IDENTITY)
    for key, change in changes.items():
        args[key] = change(args[key])
    return list(args.values())


def test_follow_inputs_takes_the_plain_case():
    assert placer._kernels.follow_inputs(*follow_args()) is not None


def replaced(items, k, value):
    items = list(items)
    items[k] = value
    return items


@pytest.mark.parametrize("changes", [
    dict(requested=lambda r: replaced(r, 3, StrSub(""))),  # a str subclass: its == is its own
    dict(requested=lambda r: replaced(r, 0, None)),
    dict(ops=lambda o: replaced(o, 1, StrSub(o[1]))),
    dict(is_generator=lambda g: replaced(g, 2, 1)),  # not a bool
    dict(in_start=lambda s: array("l", s)),  # not int32
    dict(in_src=lambda s: array("q", s)),
    dict(in_src=lambda s: array("f", s)),  # 4 bytes, not ints
    dict(in_start=lambda s: array("I", s)),
    dict(in_src=lambda s: array("i", replaced(s, 0, len(s) + 99))),  # no such node
    dict(in_src=lambda s: array("i", replaced(s, 0, -1))),
    dict(in_start=lambda s: array("i", replaced(s, 0, 1))),  # not starting at 0
    dict(in_start=lambda s: array("i", list(s)[:-1])),  # one node short
    dict(requested=lambda r: r[:-1]),
])
def test_follow_inputs_declines(changes):
    assert placer._kernels.follow_inputs(*follow_args(**changes)) is None


def test_follow_inputs_declines_inputs_not_from_0():
    """Consistent but for the first node's start: the Python path fails its own way."""
    args = [["Const", "Identity"], ["", ""], array("i", [0, 0, 2]), array("i", [0, 0]), [True, False],
            placer.METADATA_OPS, placer.BACK_EDGE_SOURCE_OPS, placer.PASS_THROUGH_OP, 1, 2]
    assert placer._kernels.follow_inputs(*args) is not None
    args[2] = array("i", [1, 1, 2])
    assert placer._kernels.follow_inputs(*args) is None


def test_follow_and_consumers_after_a_decline(monkeypatch):
    """A request of a str subclass sends the step to Python: same result as with no kernels."""
    graph = Graph(realistic_graph())
    requested = [StrSub("")] * len(graph)
    is_generator = [False] * len(graph)
    got = placer._Placer._follow_and_consumers(bare_placer(graph, requested, is_generator, []), np)
    monkeypatch.setattr(placer, "_kernels", None)
    want = placer._Placer._follow_and_consumers(bare_placer(graph, requested, is_generator, []), np)
    assert exactly(got) == exactly(want)
    assert any(v == placer.WHY_IDENTITY for v in got[0])


def test_class_keys_takes_the_plain_case():
    graph = Graph(realistic_graph())
    keys_of, visit = placer._kernels.class_keys(graph.colocated_names, graph.colocated_name_ids,
                                               list(range(len(graph))), len(graph))
    assert visit and all(keys_of[i] for i in visit)


@pytest.mark.parametrize("names, name_ids, order, n", [
    ({0: ["a"]}, {}, [0], 1),  # not a tuple
    ({0: ("a",), 3: ("b",)}, {}, [0], 2),  # no such node
    ({-1: ("a",)}, {}, [0], 2),
    ({True: ("a",)}, {}, [0], 2),  # not an int
    ({0: ("a",)}, {"a": 5}, [0], 2),
    ({0: ("a",)}, {"a": -1}, [0], 2),
    ({0: ("a",)}, {"a": 2**70}, [0], 2),
    ({0: ("a",)}, {}, [0, 2], 2),
    ({0: ("a",)}, {}, [0, -1], 2),
    ({0: ("a",)}, {}, [0, 1.0], 2),
])
def test_class_keys_declines(names, name_ids, order, n):
    assert placer._kernels.class_keys(names, name_ids, order, n) is None


@pytest.mark.parametrize("requested, ids, types", [
    (["a", "b"], {"a": 0, "b": None}, [0, 0]),  # a malformed request
    (["a", "b"], {"a": 0, "b": 2**40}, [0, 0]),
    (["a", "b"], {"a": 0, "b": -1}, [0, 0]),
    (["a", "b"], {"a": 0, "b": True}, [0, 0]),
    (["a", "c"], {"a": 0, "b": 1}, [0, 0]),  # no id: Python raises the KeyError
    (["a", StrSub("b")], {"a": 0, "b": 1}, [0, 0]),
    (["a", "b"], {"a": 0, "b": 1}, [0, -1]),
    (["a", "b"], {"a": 0, "b": 1}, [0, 2**40]),
    (["a", "b"], {"a": 0, "b": 1}, np.asarray([0, 0], dtype=np.int32)),
    (["a", "b"], {"a": 0, "b": 1}, np.asarray([0, 0], dtype=np.float64)),
    (["a", "b"], {"a": 0, "b": 1}, np.asarray([0, 0], dtype=np.uint64)),
    (["a", "b"], {"a": 0, "b": 1}, [0]),
])
def test_request_pairs_declines(requested, ids, types):
    types = types if isinstance(types, np.ndarray) else np.asarray(types, dtype=np.int64)
    assert placer._kernels.request_pairs(requested, ids, types) is None
