"""Reach (the sync detection's, proof's and verify's closure) is a view of the one reverse walk the
partitioner's pruning runs (placeviz.closure): the same nodes as prune_mask, with feeds, and the
breadth-first order and parents of a plain first-in-first-out walk, whichever way the walk goes
(numpy levels, then Python on long chains). prune_mask itself is checked against TF's pruning in
tests/test_partition.py and tests/test_partition_fidelity.py."""

from __future__ import annotations

import random
from collections import deque

import pytest

from placeviz import closure
from placeviz.graph import Graph
from placeviz.partition import RunSignature, prune_mask
from placeviz.protos import GraphDef
from placeviz.sync.reach import Reach


def _random_graph(rng: random.Random, n: int, chain: bool) -> Graph:
    gd = GraphDef()
    for k in range(n):
        nd = gd.node.add(name=f"n{k}", op=rng.choice(["NoOp", "Placeholder", "Identity"]))
        for m in range(rng.randrange(1 if chain else 0, 4) if k else 0):
            # chain: always the previous node first (long narrow levels: the walk's Python part)
            src = k - 1 if chain and m == 0 else rng.randrange(k)
            slot = rng.choice([0, 0, 1])
            nd.input.append(f"n{src}" if rng.random() < 0.4 else (f"n{src}:{slot}" if rng.random() < 0.7
                                                                  else f"^n{src}"))
    return Graph(gd)


def _plain_bfs(g: Graph, targets: list[int], feeds: list[tuple[int, int]]):
    """The walk Reach did before it became a view: first in, first out, over the uncut input edges."""
    fed = set(feeds)
    fed_nodes = {i for i, _ in feeds}
    parent = {}
    order = []
    for t in targets:
        if t not in parent:
            parent[t] = -1
            order.append(t)
    queue = deque(order)
    while queue:
        u = queue.popleft()
        for s, slot in g.inputs_of(u):
            if (s, slot) in fed or (slot == -1 and s in fed_nodes and g.ops[s] in ("Placeholder", "PlaceholderV2")):
                continue
            if s not in parent:
                parent[s] = u
                order.append(s)
                queue.append(s)
    return order, parent


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("numpy_levels", [True, False])
def test_reach_is_the_plain_walk_and_prune_masks_set(monkeypatch, seed, kernels, numpy_levels):
    rng = random.Random(seed)
    chain = seed % 2 == 1
    n = rng.choice([1, 40, 700, 3000])
    g = _random_graph(rng, n, chain)
    if not kernels:
        monkeypatch.setattr(closure, "_kernels", None)
    # these graphs are small: walked in Python alone unless the numpy levels are asked for
    monkeypatch.setattr(closure, "_SMALL_GRAPH", 0 if numpy_levels else closure._SMALL_GRAPH)
    targets = [rng.randrange(n) for _ in range(rng.randint(1, 4))]
    targets += targets[:1]  # a duplicate target is walked once
    feeds = list(dict.fromkeys((rng.randrange(n), rng.choice([0, 1])) for _ in range(rng.randint(0, 6))))
    for fed in ([], feeds):
        r = Reach(g, targets, fed)
        order, parent = _plain_bfs(g, targets, fed)
        assert r.order == order
        assert {i: p for i, p in enumerate(r.parent) if p != closure.UNSEEN} == parent
        assert [i in r for i in range(n)] == [i in parent for i in range(n)]
        mask = prune_mask(g, RunSignature(targets=tuple(dict.fromkeys(targets)), feeds=tuple(fed)))
        assert [i for i, k in enumerate(mask) if k] == sorted(order)
        u = order[-1]
        path = r.path(g.names, u)
        assert path[-1] == g.names[u] and g.index[path[0]] in targets
        assert all(g.index[a] in [s for s, _ in g.inputs_of(g.index[b])] for b, a in zip(path, path[1:], strict=False))


def test_reach_without_targets_is_empty_unlike_a_run_without_fetches():
    g = _random_graph(random.Random(0), 50, False)
    r = Reach(g, [])
    assert r.order == [] and not any(i in r for i in range(50))
    assert all(prune_mask(g, RunSignature()))  # a run without fetches or targets runs the whole graph
