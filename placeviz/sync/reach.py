"""Reverse reachability: what runs when a session runs some targets.

TF prunes a graph to the reverse closure of the fetched ops over data and control edges; the sync
detection (which enqueue depends on a TakeGradient, which writes come before the sync op) and the
single-update proof (what each side runs) both walk that closure with this one breadth-first search.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator

from placeviz.graph import CONTROL, Graph

_UNSEEN = -2
_ROOT = -1


class Reach:
    """Reverse closure of ``targets`` over data and control edges (the targets included), with the
    breadth-first tree to print paths.

    ``order`` lists the nodes in breadth-first order (the targets first, duplicates dropped);
    ``i in reach`` tells whether ``i`` runs; :meth:`path` gives the chain of inputs from a target
    down to a node.
    """

    __slots__ = ("parent", "order")

    def __init__(self, g: Graph, targets: Iterable[int]) -> None:
        parent = [_UNSEEN] * len(g.names)
        order = []
        for t in targets:
            if parent[t] == _UNSEEN:
                parent[t] = _ROOT
                order.append(t)
        in_start, in_src = g.in_start, g.in_src
        k = 0
        while k < len(order):
            u = order[k]
            k += 1
            for p in range(in_start[u], in_start[u + 1]):
                v = in_src[p]
                if parent[v] == _UNSEEN:
                    parent[v] = u
                    order.append(v)
        self.parent = parent
        self.order = order

    def __contains__(self, i: int) -> bool:
        return self.parent[i] != _UNSEEN

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
