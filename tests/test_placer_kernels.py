"""The placer's C loops (``placeviz.placement._placer_kernels``) against its Python loops.

Every test places the same graph twice, with the kernels and with ``placer._kernels = None``
(the reference Python path), and compares everything the placer returns: devices, reasons,
group roots, candidates in order, or the error message. The TF-fidelity tests
(test_placement_fidelity, test_tf_scenarios) run the kernel path against TensorFlow itself.
"""

from __future__ import annotations

import random

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
    assert placer._kernels.number_keys(ops, values) == (want, len(first))
