"""The placer's native core (``_placer_kernels.place``) against its Python specification.

``placer.place`` runs the native core when it is built and the Python ``_Placer.run`` when it is
not (``placer._kernels = None``, as ``PLACEVIZ_NO_KERNELS=1`` gives) or when the core declines.
Every test here places the same graph both ways, each on a fresh ``Graph`` so that no cache is
shared, and compares the whole result field by field: devices, reasons, group roots, candidates
in order, explanations, or the error (type and message). It also counts how often the core
declined, since a comparison the core declined compares the Python code with itself: the core
must decline only where the Python code raises (an error to word) or on input it does not take.

The TF differential tests (test_placement_fidelity, test_tf_scenarios, tests/realworld) run the
default (native) build against TensorFlow itself.
"""

from __future__ import annotations

import os
import random
from array import array
from pathlib import Path
from typing import Any

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

REPO = Path(__file__).resolve().parents[1]


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
    PlacementOptions(placer=PlacerConfig(python_import=False)),
]


def test_the_extension_is_built():
    assert placer._kernels is not None, "placeviz.placement._placer_kernels was not built"


def outcome(graph: Graph, options: PlacementOptions):
    """Everything ``place_graph``'s placement holds, or the error it raised."""
    try:
        result = place_graph(graph, options)
    except Exception as e:  # noqa: BLE001 - the error is part of the result
        return ("error", type(e).__name__, str(e))
    p = result.placement
    n = len(p.group_root)
    explained = [p.explain(i) for i in range(0, n, max(1, n // 50))]
    return {"devices": p.devices, "reason": p.reason, "group_root": p.group_root,
            "candidates": list(p.candidates.items()), "explain": explained, "conflicts": p.conflicts,
            "ref_edges": p.ref_edges}


class Declines:
    """Counts the native runs and those that declined (``_Placer.run_native`` returned None)."""

    def __init__(self, monkeypatch):
        self.runs = self.declined = 0
        run_native = placer._Placer.run_native

        def counted(placer_run):
            self.runs += 1
            result = run_native(placer_run)
            self.declined += result is None
            return result

        monkeypatch.setattr(placer._Placer, "run_native", counted)


def both_ways(graph_def: GraphDef, monkeypatch, options: PlacementOptions):
    """(native, Python, whether the native core declined)."""
    with monkeypatch.context() as m:
        declines = Declines(m)
        native = outcome(Graph(graph_def), options)
    assert declines.runs <= 1
    with monkeypatch.context() as m:
        m.setattr(placer, "_kernels", None)
        python = outcome(Graph(graph_def), options)
    return native, python, bool(declines.declined)


def check(graph_def: GraphDef, monkeypatch, options: PlacementOptions) -> bool:
    """Both ways equal field by field; a decline only where the Python code raises or records a
    ``_class`` conflict (soft placement: the Python step words each one). Returns whether the
    native core ran to the end."""
    native, python, declined = both_ways(graph_def, monkeypatch, options)
    if isinstance(python, dict):
        assert isinstance(native, dict), native
        for key in python:
            assert native[key] == python[key], key
        assert not declined or python["conflicts"], "the native core declined a graph the Python code places"
    else:
        assert native == python
    return not declined and isinstance(python, dict)


# ---------------------------------------------------------------- graphs built by TF itself
def test_tf_built_graphs(tf_models, monkeypatch):
    placed = 0
    for name in ("setter.pb", "setter.meta"):
        graph_def = load(tf_models / name).graph_def
        for options in CONFIGS:
            placed += check(graph_def, monkeypatch, options)
    assert placed >= len(CONFIGS)


SAMPLE_CONFIGS: dict[str, dict[str, Any]] = {"ps2": dict(ps_tasks=2), "resource": dict(ps_tasks=2, resource_variables=True),
                  "sync": dict(ps_tasks=2, sync_replicas=True)}


@pytest.fixture(scope="module")
def sample_graph_defs() -> dict[tuple[str, str], bytes]:
    """Every bundled sample (``placeviz.sample_graphs``), built with TF's real API."""
    pytest.importorskip("tensorflow")
    from placeviz import sample_graphs
    from placeviz.sample_graphs.options import BuildOptions

    return {(name, config): sample_graphs.build_meta_graph(name, BuildOptions(**kwargs)).graph_def
            .SerializeToString()
            for name in sample_graphs.SAMPLES for config, kwargs in SAMPLE_CONFIGS.items()}


@pytest.mark.tf
def test_bundled_samples(sample_graph_defs, monkeypatch):
    """Each sample as built (placed by TF's device setter) and re-placed by ours, strict and soft."""
    ran = []
    for data in sample_graph_defs.values():
        graph_def = GraphDef.FromString(data)
        for options in (PlacementOptions(), PlacementOptions(placer=PlacerConfig(allow_soft_placement=True)),
                        PlacementOptions(setter=SetterConfig(ps_tasks=3), cpus_per_task=2)):
            ran.append(check(graph_def, monkeypatch, options))
    # The misconfigured sample's colocation conflict (strict: an error; soft: recorded) and its
    # /gpu:0 pin (an error without soft placement): the Python code words them; everything else
    # is placed natively.
    assert sum(ran) >= len(ran) - 3 * len(SAMPLE_CONFIGS)


def benchmark_graph(name: str) -> Path:
    """A graph of benchmarks/gen_graphs.py: from ``PLACEVIZ_GRAPH_DIR`` or ``benchmarks/graphs``."""
    directory = Path(os.environ.get("PLACEVIZ_GRAPH_DIR", REPO / "benchmarks" / "graphs"))
    path = directory / name
    if not path.exists():
        pytest.skip(f"{path} not generated (python benchmarks/gen_graphs.py --sizes 10k)")
    return path


@pytest.mark.parametrize("options", [
    PlacementOptions(setter=SetterConfig(ps_tasks=4)),
    PlacementOptions(setter=SetterConfig(ps_tasks=2), placer=PlacerConfig(allow_soft_placement=True)),
])
def test_g10k(options, monkeypatch):
    graph_def = load(benchmark_graph("g10k.unplaced.pb")).graph_def
    assert check(graph_def, monkeypatch, options)


# ---------------------------------------------------------------- hostile and edge graphs
@pytest.mark.parametrize("options", CONFIGS)
def test_realistic_graph(options, monkeypatch):
    assert check(realistic_graph(), monkeypatch, options)


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
        check(out, monkeypatch, options)


OPS = ["Identity", "Identity", "Shape", "Size", "Rank", "NextIteration", "Const", "AddN", "NoOp", "VariableV2",
       "Assign"]


def random_graph(rng: random.Random, n: int) -> GraphDef:
    """Ops the placer singles out (pass-through Identity, metadata ops, generators, loops, ref
    edges), random data and control inputs (cycles too), requests and ``_class`` lists (naming
    nodes, missing ones and the node itself)."""
    g = GraphDef()
    for i in range(n):
        node = g.node.add(name=f"n{i}", op=rng.choice(OPS), device=rng.choice(DEVICES))
        node.attr["T"].type = 1
        node.attr["dtype"].type = 1
        node.attr["out_type"].type = 3
        node.attr["N"].i = 2
        for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
            src = f"n{rng.randrange(n)}"
            node.input.append(src if rng.random() < 0.7 else "^" + src)
        if rng.random() < 0.3:
            names = [rng.choice([f"n{rng.randrange(n)}", node.name, "missing"]) for _ in range(rng.randint(1, 3))]
            node.attr["_class"].list.s[:] = [f"loc:@{t}".encode() for t in names]
    return g


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), soft=st.booleans())
def test_random_graphs(monkeypatch, seed, n, soft):
    """Whatever the Python code does with them (place, or raise), the native core does too."""
    options = PlacementOptions(placer=PlacerConfig(allow_soft_placement=soft), cpus_per_task=2)
    check(random_graph(random.Random(seed), n), monkeypatch, options)


# ---------------------------------------------------------------- the boundary itself
def native_arguments(graph_def: GraphDef) -> dict:
    """The keyword arguments ``run_native`` passes to ``_kernels.place`` for this graph."""
    captured = {}
    real = placer._kernels
    assert real is not None
    imported = real.imported_colocation

    class Capture:
        imported_colocation = imported

        def place(self, **kwargs):
            captured.update(kwargs)
            return real.place(**kwargs)

    saved, placer._kernels = placer._kernels, Capture()  # type: ignore[assignment]
    try:
        place_graph(Graph(graph_def), PlacementOptions())
    finally:
        placer._kernels = saved
    return captured


def test_the_core_returns_the_whole_result():
    kwargs = native_arguments(realistic_graph())
    devices, reason, group_root, first_names = placer._kernels.place(**kwargs)
    n = len(kwargs["ops"])
    assert len(devices) == len(reason) == len(group_root) == n
    assert all(devices) and set(first_names) <= set(group_root)


class StrSub(str):
    pass


def replaced(items, k, value):
    items = list(items)
    items[k] = value
    return items


@pytest.mark.parametrize("changes", [
    dict(requested=lambda r: replaced(r, 3, StrSub(""))),  # a str subclass: its == is its own
    dict(ops=lambda o: replaced(o, 1, StrSub(o[1]))),
    dict(is_generator=lambda g: replaced(g, 2, 1)),  # not a bool
    dict(in_start=lambda s: array("l", s)),  # not int32
    dict(in_src=lambda s: array("q", s)),
    dict(in_src=lambda s: array("f", s)),  # 4 bytes, not ints
    dict(in_slot=lambda s: array("q", s)),
    dict(in_src=lambda s: array("i", replaced(s, 0, len(s) + 99))),  # no such node
    dict(in_src=lambda s: array("i", replaced(s, 0, -1))),
    dict(in_start=lambda s: array("i", replaced(s, 0, 1))),  # not starting at 0
    dict(in_start=lambda s: array("i", list(s)[:-1])),  # one node short
    dict(order=lambda o: replaced(o, 0, len(o))),
    dict(order=lambda o: replaced(o, 0, -1)),
    dict(state=lambda s: replaced(s, 0, -1)),
    dict(state=lambda s: s[:-1]),
    dict(ref_inputs=lambda r: [(0, [0])]),  # ports not a tuple
    dict(ref_inputs=lambda r: [(10**6, (0,))]),
    dict(colocated_names=lambda c: {0: ["a"]}),  # not a tuple
    dict(colocated_names=lambda c: {-1: ("a",)}),
    dict(colocated_name_ids=lambda c: {"a": 10**6}),
    dict(candidates=lambda c: lambda st: [0]),  # not a tuple
    dict(candidates=lambda c: lambda st: (10**6,)),  # no such device
    dict(candidates=lambda c: lambda st: ()),  # no candidates: an error to word
    dict(device_names=lambda d: [], device_name_id=lambda d: []),  # no devices
])
def test_the_core_declines(changes):
    """Input it does not take: None (the Python code then runs, and raises where it must)."""
    kwargs = native_arguments(realistic_graph())
    assert placer._kernels.place(**kwargs) is not None
    for key, change in changes.items():
        kwargs[key] = change(kwargs[key])
    assert placer._kernels.place(**kwargs) is None


def test_a_table_that_raises_is_a_decline():
    kwargs = native_arguments(realistic_graph())

    def failing(st):
        raise ValueError("not this one")

    kwargs["candidates"] = failing
    assert placer._kernels.place(**kwargs) is None


def test_every_argument_by_keyword():
    kwargs = native_arguments(realistic_graph())
    with pytest.raises(TypeError):
        placer._kernels.place(*kwargs.values())
    del kwargs["order"]
    with pytest.raises(TypeError):
        placer._kernels.place(**kwargs)


def test_a_decline_runs_the_python_placer_from_its_start(monkeypatch):
    """The core declines a colocation conflict without soft placement; the error is Python's."""
    graph_def = realistic_graph()
    nodes = [n for n in graph_def.node if n.op == "VariableV2"][:2]
    nodes[0].device, nodes[1].device = "/job:ps/task:0", "/job:ps/task:1"
    nodes[1].attr["_class"].list.s[:] = [f"loc:@{nodes[0].name}".encode()]
    native, python, declined = both_ways(graph_def, monkeypatch, PlacementOptions(
        setter=SetterConfig(ps_tasks=2), placer=PlacerConfig(python_import=False)))
    assert declined and native == python and native[0] == "error"
    assert "Cannot colocate" in native[2]


# ---------------------------------------------------------------- the import rewrite
def imported_both_ways(graph_def: GraphDef, monkeypatch):
    native = placer.imported_devices(Graph(graph_def))
    with monkeypatch.context() as m:
        m.setattr(placer, "_kernels", None)
        python = placer.imported_devices(Graph(graph_def))
    return native, python


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40))
def test_imported_devices_on_random_graphs(monkeypatch, seed, n):
    """``_class`` lists naming other nodes, missing ones, the node itself, colocated nodes in
    either order; devices in forms DeviceSpec rewrites (``/cpu:0``, ``/device:CPU:1``)."""
    rng = random.Random(seed)
    graph_def = random_graph(rng, n)
    for node in graph_def.node:
        node.device = rng.choice(DEVICES + ["/device:cpu:1", "/job:ps/task:0/device:CPU:0", "/CPU:0"])
    native, python = imported_both_ways(graph_def, monkeypatch)
    assert native == python
    assert all(type(d) is str for d in native)


def test_imported_devices_natively(monkeypatch):
    graph_def = realistic_graph()
    for k, node in enumerate(graph_def.node):
        node.device = ["/cpu:0", "/job:ps/task:1", ""][k % 3]
    calls = []
    real = placer._kernels

    class Spy:
        def imported_colocation(self, **kwargs):
            calls.append(result := real.imported_colocation(**kwargs))
            return result

    monkeypatch.setattr(placer, "_kernels", Spy())
    native = placer.imported_devices(Graph(graph_def))
    monkeypatch.setattr(placer, "_kernels", None)
    assert native == placer.imported_devices(Graph(graph_def))
    assert calls and calls[0] is not None  # not declined
    assert "/job:ps/task:1" in native and "/device:CPU:0" in native


def test_imported_devices_malformed_is_python_error(monkeypatch):
    graph_def = realistic_graph()
    node = next(n for n in graph_def.node if "_class" not in n.attr)
    node.device = "/job:ps/task:x"
    with pytest.raises(placer.PlacementError) as native:
        placer.imported_devices(Graph(graph_def))
    monkeypatch.setattr(placer, "_kernels", None)
    with pytest.raises(placer.PlacementError) as python:
        placer.imported_devices(Graph(graph_def))
    assert str(native.value) == str(python.value)


def imported_arguments() -> dict:
    graph = Graph(realistic_graph())
    return dict(colocated_names=graph.colocated_names, names=list(graph.names), index=graph.colocated_name_ids,
                devices=["/job:ps/task:0"] * len(graph), recanonical=placer._Cache(placer.canonical_device))


def raising(device):
    raise ValueError(device)


@pytest.mark.parametrize("changes", [
    dict(devices=lambda d: replaced(d, 0, StrSub(d[0]))),
    dict(devices=lambda d: d[:-1]),
    dict(names=lambda d: replaced(d, 0, StrSub(d[0]))),
    dict(colocated_names=lambda c: {**c, 10**6: ("a",)}),
    dict(colocated_names=lambda c: {k: list(v) for k, v in c.items()}),  # not tuples
    dict(recanonical=lambda r: placer._Cache(raising)),  # a table that raises
    dict(recanonical=lambda r: placer._Cache(lambda d: None)),  # not a str
])
def test_imported_colocation_declines(changes):
    kwargs = imported_arguments()
    assert placer._kernels.imported_colocation(**kwargs) is not None
    for key, change in changes.items():
        kwargs[key] = change(kwargs[key])
    assert placer._kernels.imported_colocation(**kwargs) is None
