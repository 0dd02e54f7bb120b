"""Reverse reachability: what runs when a session runs some targets.

TF prunes a graph to the reverse closure of the fetched ops over data and control edges, fed
tensors cutting the walk; the sync detection (which enqueue depends on a TakeGradient, which writes
come before the sync op), the single-update proof (what each side runs) and verify (its plan, the
host ops its runs execute) see that closure through :class:`Reach`, a view of the one walk
:func:`placeviz.closure.reverse_closure` that the partitioner's pruning also runs.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator

from placeviz.closure import UNSEEN, edges_kept, reverse_closure
from placeviz.graph import CONTROL, Graph


class Reach:
    """Reverse closure of ``targets`` over data and control edges (the targets included), with the
    breadth-first tree to print paths; ``feeds`` (``(node id, output index)``) cut the walk as a
    run's feeds do (:func:`placeviz.closure.fed_edge_cut`).

    ``order`` lists the nodes in breadth-first order (the targets first, duplicates dropped);
    ``i in reach`` tells whether ``i`` runs; ``parent`` is the node through whose input each node
    was first met (:data:`placeviz.closure.ROOT` for a target, :data:`placeviz.closure.UNSEEN`
    outside); :meth:`path` gives the chain of inputs from a target down to a node. Without
    targets nothing runs (unlike a run without fetches, which runs the whole graph).
    """

    __slots__ = ("parent", "order")

    def __init__(self, g: Graph, targets: Iterable[int], feeds: Iterable[tuple[int, int]] = ()) -> None:
        found = reverse_closure(g, targets, edges_kept(g, feeds), tree=True)
        assert found.order is not None and found.parent is not None  # tree=True
        self.parent = found.parent
        self.order = found.order

    def __contains__(self, i: int) -> bool:
        return self.parent[i] != UNSEEN

    def path(self, names: list[str], i: int) -> list[str]:
        """Node names from the run target down to ``i``."""
        out = []
        parent = self.parent
        while i >= 0:
            out.append(names[i])
            i = parent[i]
        out.reverse()
        return out


def forward_through(g: Graph, start: int, through: Container[str]) -> Iterator[tuple[int, int, bool]]:
    """Data consumers of ``start``, looking through the ops in ``through`` (Identity-like forwarders).

    Yields ``(consumer, via, forwards)`` once per consumer, depth first: ``via`` is the node whose
    output it reads and ``forwards`` tells whether its op is in ``through`` (its own consumers follow).
    The sync detection (handle users, where a value is written) and the lint rules (who reads a
    variable) each keep what they need from this one walk.
    """
    seen = {start}
    stack = [start]
    while stack:
        u = stack.pop()
        for c, slot in g.consumers_of(u):
            if slot == CONTROL or c in seen:
                continue
            seen.add(c)
            forwards = g.ops[c] in through
            if forwards:
                stack.append(c)
            yield c, u, forwards
