"""The render views' array passes give what the per-op and per-edge loops they replace gave.

``quotient_edges`` (box-to-box bundles) and ``ViewContext.cross_device_edges`` read the graph's
CSR arrays at once; :class:`~placeviz.render.collapse.CollapseMemo` lets the fit's builds at
several budgets share one collapse's work. Each is compared here, order included (the bundles'
order decides which equal-weight edges a crowded view keeps), with a straightforward loop or a
collapse from scratch. No TensorFlow: the graphs are random GraphDefs.
"""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import pytest

from placeviz.graph import CONTROL, Graph
from placeviz.protos import GraphDef
from placeviz.render.collapse import CollapseMemo, collapse, quotient_edges
from placeviz.render.context import ViewContext


def _random_graph(seed: int, n: int = 300) -> Graph:
    """Scoped names (``s0/layer_3/op12``), repeated inputs, control edges, isolated nodes."""
    rng = random.Random(seed)
    gd = GraphDef()
    names = []
    for i in range(n):
        scope = "/".join(rng.choice(["s0", "s1", f"layer_{rng.randrange(12)}", "grad"])
                         for _ in range(rng.randrange(1, 4)))
        names.append(f"{scope}/op{i}")
        inputs = []
        for _ in range(rng.randrange(5) if i else 0):
            j = rng.randrange(i)
            inputs.append(rng.choice([names[j], f"{names[j]}:1", f"^{names[j]}"]))
        data = [x for x in inputs if not x.startswith("^")]
        gd.node.add(name=names[i], op="Op", device=f"/job:{rng.choice(['ps', 'worker'])}/task:{rng.randrange(2)}",
                    input=data + [x for x in inputs if x.startswith("^")])
    return Graph(gd)


def _bundles_by_loop(graph: Graph, nodes, box_of: list[int], control: bool = True) -> dict:
    """The per-edge walk ``quotient_edges`` replaced."""
    out: dict[tuple[int, int], list[int]] = {}
    for i in nodes:
        b = box_of[i]
        if b < 0:
            continue
        for k in range(graph.in_start[i], graph.in_start[i + 1]):
            a = box_of[graph.in_src[k]]
            if a < 0 or a == b:
                continue
            is_control = graph.in_slot[k] == CONTROL
            if is_control and not control:
                continue
            out.setdefault((a, b), [0, 0])[is_control] += 1
    return out


@pytest.mark.parametrize("seed", range(6))
def test_quotient_edges_equal_the_edge_by_edge_walk(seed):
    g = _random_graph(seed)
    rng = random.Random(100 + seed)
    n = len(g)
    box_of = [rng.choice([-1, *range(7)]) for _ in range(n)]
    subset = rng.sample(range(n), n // 2)  # any order, as deps and expand pass them
    for nodes in (range(n), subset, sorted(subset), []):
        for control in (True, False):
            got = quotient_edges(g, nodes, box_of, control)
            want = _bundles_by_loop(g, nodes, box_of, control)
            assert list(got.items()) == list(want.items())
            assert all(type(x) is int for key, row in got.items() for x in (*key, *row))
    assert quotient_edges(g, range(n), [-1] * n) == {}


@pytest.mark.parametrize("seed", range(3))
def test_cross_device_edges_equal_the_edge_by_edge_count(seed):
    g = _random_graph(seed)
    ctx = ViewContext(SimpleNamespace(graph=g, devices=list(g.devices)))
    want: Counter = Counter()
    for i in range(len(g)):
        for src, _slot in g.inputs_of(i):
            if ctx.devices[src] != ctx.devices[i]:
                want[(ctx.devices[src], ctx.devices[i])] += 1
    assert list(ctx.cross_device_edges.items()) == list(want.items())


def _shape(c) -> list:
    return [(g.owner, g.path, g.members, g.others is not None) for g in c.groups], c.box_of, c.refused


@pytest.mark.parametrize("seed", range(4))
def test_a_collapse_memo_changes_no_result(seed):
    """The fit's sequence of budgets (falling, then halving back up), with and without a memo;
    a memo handed other ops, owners or pinned ops starts afresh."""
    g = _random_graph(seed, 400)
    owners = list(g.devices)
    memo = CollapseMemo()
    for budget in (60, 20, 13, 16, 14, 200, 3):
        assert _shape(collapse(g.names, range(len(g)), owners, budget, memo=memo)) == \
            _shape(collapse(g.names, range(len(g)), owners, budget))
    subset = list(range(0, len(g), 3))
    for pinned in ((), (3, 6)):
        for budget in (30, 10):
            assert _shape(collapse(g.names, subset, owners, budget, pinned=pinned, memo=memo)) == \
                _shape(collapse(g.names, subset, owners, budget, pinned=pinned))
    other_owners = ["x" if i % 2 else "y" for i in range(len(g))]
    assert _shape(collapse(g.names, range(len(g)), other_owners, 25, memo=memo)) == \
        _shape(collapse(g.names, range(len(g)), other_owners, 25))
