"""The render views' array passes give what the per-op and per-edge loops they replace gave.

``quotient_edges`` (box-to-box bundles) and ``ViewContext.cross_device_edges`` read the graph's
CSR arrays at once; :class:`~placeviz.render.collapse.CollapseMemo` lets the fit's builds at
several budgets share one collapse's work; ``ViewContext.role_counts``/``top_ops`` (each box's
roles and op types) and ``ViewContext.transfers_per_pair`` (one step's transfers per pair of
boxes) are array passes over op codes and transfer columns. Each is compared here, order included (the bundles'
order decides which equal-weight edges a crowded view keeps), with a straightforward loop or a
collapse from scratch. No TensorFlow: the graphs are random GraphDefs.
"""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from placeviz.graph import CONTROL, Graph
from placeviz.protos import GraphDef
from placeviz.render import collapse as collapse_module
from placeviz.render.collapse import (
    CollapseMemo,
    bucket_by_component,
    collapse,
    pairs_in_first_order,
    quotient_edges,
)
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


@pytest.mark.parametrize("seed", range(4))
def test_pairs_in_first_order_by_table_and_by_sort(seed, monkeypatch):
    """The table of first positions (few codes) and the sort (many) give the distinct codes in the
    order they are first met and each item's place in it, as a walk over the items does."""
    rng = np.random.default_rng(seed)
    n_codes = int(rng.integers(1, 50))
    codes = rng.integers(0, n_codes, size=int(rng.integers(0, 400)))
    order = list(dict.fromkeys(codes.tolist()))
    for dense in (1 << 16, 0):  # 0: every call sorts
        monkeypatch.setattr(collapse_module, "DENSE_CODES", dense)
        values, which = pairs_in_first_order(codes, n_codes * (1 if dense else 10_000))
        assert values.tolist() == order
        assert [order[k] for k in which.tolist()] == codes.tolist()


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


def _buckets_by_split(names: list[str], members: list[int], depth: int) -> tuple[list, dict]:
    """The loop ``bucket_by_component`` stands for, over whole split names."""
    own: list[int] = []
    buckets: dict[str, list[int]] = {}
    for i in members:
        parts = names[i].split("/")
        if len(parts) <= depth:
            own.append(i)
        else:
            buckets.setdefault(parts[depth], []).append(i)
    return own, buckets


ODD_NAMES = ["", "/", "//", "a/", "/a", "a//b", "a", "a/b", "a/b/c", "a/bc", "ab/c", "é/b", "a/é", "a/€/x",
             "a/\U0001f600", "\U0001f600/b/c", "a/b\u00e9", "a/b\u20ac", "a/b\U0001f600", "layer_1/x", "layer_1/y"]


@pytest.mark.parametrize("seed", range(4))
def test_bucket_by_component_equals_the_split_loop(seed, kernel_mode):
    """Components met in order, members in order, empty components and names without the depth,
    names of every str width (ASCII, Latin-1, BMP, astral), against the split of whole names; with
    the C kernel and with the Python loop (``kernel_mode``)."""
    rng = random.Random(seed)
    names = ODD_NAMES + [n for n in _random_graph(seed, 200).names]
    members = [rng.randrange(len(names)) for _ in range(600)]  # repeats, any order
    for depth in range(5):
        got = bucket_by_component(names, members, depth)
        want = _buckets_by_split(names, members, depth)
        assert got[0] == want[0]
        assert list(got[1].items()) == list(want[1].items())
    assert bucket_by_component(names, [], 0) == ([], {})


def test_bucket_by_component_declines_what_is_not_a_list_of_ids():
    """The C kernel returns None (the Python loop then runs) for members that are not ints
    indexing the names, or names that are not str."""
    c = pytest.importorskip("placeviz._partition_kernels")
    assert c.bucket_by_component(["a/b"], [0], 1) == ([], {"b": [0]})
    for names, members in ((["a"], [1]), (["a"], [-1]), (["a"], ["0"]), ([b"a"], [0]), (["a"], [True])):
        assert c.bucket_by_component(names, members, 0) is None
    assert c.bucket_by_component(["a"], [0], -1) is None


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


@pytest.mark.parametrize("seed", range(4))
def test_box_of_equals_the_loop_over_the_groups_members(seed):
    """``Collapse.box_of`` (and ``box_array``, handed to the bundling as it is) is one array
    assignment per group; the loop over every member of every group gave the same list."""
    g = _random_graph(seed, 400)
    owners = list(g.devices)
    memo = CollapseMemo()
    for nodes, pinned in ((range(len(g)), ()), (list(range(0, len(g), 3)), (3, 6))):
        for budget in (60, 13, 3):
            c = collapse(g.names, nodes, owners, budget, pinned=pinned, memo=memo)
            expected = [-1] * len(g)
            for b, group in enumerate(c.groups):
                for i in group.members:
                    expected[i] = b
            assert c.box_of == expected
            assert c.box_array is not None and c.box_array.tolist() == expected
            assert quotient_edges(g, nodes, c.box_array) == quotient_edges(g, nodes, c.box_of)


OP_TYPES = ("VariableV2", "Identity", "MatMul", "ApplyGradientDescent", "Const", "Assign", "NoOp", "AddN")


def _typed_graph(seed: int, n: int = 400) -> Graph:
    """:func:`_random_graph` with a mix of op types, so that boxes hold several roles in ties."""
    g = _random_graph(seed, n)
    rng = random.Random(seed)
    gd = GraphDef()
    for i in range(n):
        node = gd.node.add(name=g.names[i], op=rng.choice(OP_TYPES), device=g.devices[i])
        node.input.extend(str(x) for x in g.node(i).inputs)
    return Graph(gd)


@pytest.mark.parametrize("seed", range(4))
def test_per_box_counts_equal_the_counters_of_a_pass_over_the_members(seed):
    """Keys in first-met order too: ``most_common`` breaks ties by it, and labels show the top ones."""
    g = _typed_graph(seed)
    ctx = ViewContext(SimpleNamespace(graph=g, devices=list(g.devices)))
    for budget in (40, 9, 3):
        for grp in collapse(g.names, range(len(g)), ctx.devices, budget, memo=ctx.collapse_memo("devices")).groups:
            want = Counter(ctx.roles[g.ops[i]] for i in grp.members)
            assert list(ctx.role_counts(grp).items()) == list(want.items())
            assert ctx.role_counts(grp).most_common(3) == want.most_common(3)
            ops_want = Counter(g.ops[i] for i in grp.members)
            for n in (1, 5, 6):
                assert ctx.top_ops(grp, n) == ops_want.most_common(n)
    assert all(type(c) is int for grp in ctx._per_group.values() if isinstance(grp[1], Counter)
               for c in grp[1].values())


def _traffic_by_loop(g: Graph, transfers: list[dict], box_of: list[int]) -> dict:
    """The per-transfer walk ``ViewContext.transfers_per_pair`` replaced."""
    out: dict[tuple[int, int], list[int]] = {}
    for t in transfers:
        s, d = g.index.get(t["src"]), g.index.get(t.get("dst") or "")
        if s is None or d is None or box_of[s] < 0 or box_of[d] < 0:
            continue
        row = out.setdefault((box_of[s], box_of[d]), [0, 0, 0, 0])
        row[0] += 1
        row[1] += t["bytes"] or 0
        row[2] += t["slot"] != "control" and t["bytes"] is None
        row[3] += t["slot"] == "control"
    return out


@pytest.mark.parametrize("seed", range(4))
def test_transfers_per_pair_equal_the_walk_over_the_transfers(seed):
    """Byte sums stay exact integers beyond 2**53 (no float weights), unknown ops are skipped."""
    g = _random_graph(seed)
    rng = random.Random(200 + seed)
    names = [*g.names, "not/in/the/graph"]
    transfers = []
    for _ in range(500):
        slot = rng.choice(["control", "0", "1"])
        size = None if slot == "control" or rng.random() < 0.2 else rng.choice([4, 2**40, 2**53 + 1, 0])
        t = {"src": rng.choice(names), "dst": rng.choice([*names, None]), "slot": slot, "bytes": size}
        transfers.append(t)
    pipe = SimpleNamespace(graph=g, devices=list(g.devices), partitions=SimpleNamespace(transfers=transfers,
                                                                                           level="task"))
    ctx = ViewContext(pipe)
    for boxes in (1, 7, 40):
        box_of = [rng.choice([-1, *range(boxes)]) for _ in range(len(g))]
        got = ctx.transfers_per_pair(box_of)
        want = _traffic_by_loop(g, transfers, box_of)
        assert list(got.items()) == list(want.items())
        assert all(type(x) is int for key, row in got.items() for x in (*key, *row))
    empty = ViewContext(SimpleNamespace(graph=g, devices=list(g.devices), partitions=None))
    assert empty.transfers_per_pair([0] * len(g)) == {}
