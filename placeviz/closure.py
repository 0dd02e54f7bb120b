"""What a ``Session.run`` executes: the reverse closure of its fetches and targets, written once.

TF prunes the graph of a run to the nodes its fetches and targets reach backwards over data and
control edges, with every fed tensor cutting the walk (``subgraph::PruneForTargets``, whose
``ReverseDFS`` starts from the fetch and target nodes after ``FeedInputs`` made the edges reading a
fed tensor read a feed node instead: ``tensorflow/core/graph/subgraph.cc``). A fed ``x:k`` cuts
every data edge reading ``x:k``; when ``x`` is a ``Placeholder``/``PlaceholderV2``, its outgoing
control edges move to the feed node too, so they are cut as well (:func:`fed_edge_cut`).

:func:`reverse_closure` is that walk, the only one in placeviz. Its callers:

* the partitioner's pruning (:func:`placeviz.partition.subgraph.prune_mask`), which only asks
  which nodes run;
* :class:`placeviz.sync.reach.Reach` (the sync detection and proof, verify's plan and its
  host-op check), which also asks in which order a breadth-first walk meets them and through
  which input each is first met (``tree=True``), to print a path from a run target down to an op.

The walk is the C kernel ``reach`` of ``placeviz._partition_kernels`` (depth first) when only the
set is asked and the kernel is built. Otherwise it is breadth first, one numpy step per level:
each level's new nodes are kept in the order a plain first-in-first-out walk would meet them
(first occurrence along the previous level, each node's inputs in order), so ``order`` and
``parent`` are exactly the plain breadth-first walk's. After many narrow levels in a row (a long
chain, which would cost one numpy step per node) the same breadth-first walk goes on in Python; a small graph (a sample, a test's) is walked in
Python from the start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from placeviz.graph import CONTROL, Graph
from placeviz.native import kernels
from placeviz.op_kinds import PLACEHOLDER_OPS

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

_kernels = kernels("_partition_kernels")  # the C walk (see placeviz.native)

UNSEEN = -2
"""``parent`` of a node the walk does not reach."""
ROOT = -1
"""``parent`` of a start node."""

_SMALL_FRONTIER = 64  # below this, a numpy step costs more than walking the frontier in Python
_SMALL_LEVELS = 32  # this many small levels in a row: a long chain, finish in Python
_SMALL_GRAPH = 16384  # fewer nodes: the Python walk alone (numpy's per-level cost would dominate)


def fed_edge_cut(graph: Graph, feeds: Iterable[tuple[int, int]]) -> Callable[[int, int], bool] | None:
    """A predicate ``cut(src, slot)``: whether the edge reading ``src:slot`` now reads a feed node.

    Data edges reading a fed tensor are cut; control edges out of a fed placeholder as well.
    Returns None when nothing is fed.
    """
    fed_slots: dict[int, set[int]] = {}
    for i, slot in feeds:
        fed_slots.setdefault(i, set()).add(slot)
    if not fed_slots:
        return None
    ops = graph.ops

    def cut(src: int, slot: int) -> bool:
        slots = fed_slots.get(src)
        if slots is None:
            return False
        if slot == CONTROL:
            return ops[src] in PLACEHOLDER_OPS
        return slot in slots

    return cut


def edges_kept(graph: Graph, feeds: Iterable[tuple[int, int]]) -> npt.NDArray[np.bool_] | None:
    """One bool per input edge of ``graph`` (its ``in_src`` order): False for the edges the feeds
    ``(node id, output index)`` cut (:func:`fed_edge_cut`). None when nothing is fed."""
    feeds = list(feeds)
    cut = fed_edge_cut(graph, feeds)
    if cut is None:
        return None
    import numpy as np

    in_src = np.frombuffer(graph.in_src, dtype=np.int32)
    in_slot = np.frombuffer(graph.in_slot, dtype=np.int32)
    edge_ok = np.ones(len(in_src), dtype=bool)
    for pos in np.nonzero(np.isin(in_src, np.asarray([i for i, _ in feeds], dtype=np.int32)))[0].tolist():
        if cut(int(in_src[pos]), int(in_slot[pos])):
            edge_ok[pos] = False
    return edge_ok


@dataclass(frozen=True)
class Closure:
    """What :func:`reverse_closure` found: ``mask`` (one byte per node, 1 if reached); with
    ``tree=True`` also ``order`` (the nodes in breadth-first order, the starts first, duplicates
    dropped) and ``parent`` (per node: the node whose input edge the walk first met it through,
    :data:`ROOT` for a start, :data:`UNSEEN` for a node not reached)."""

    mask: bytearray
    order: list[int] | None = None
    parent: list[int] | None = None


def reverse_closure(graph: Graph, starts: Iterable[int], edge_ok: npt.NDArray[np.bool_] | None = None, *,
                    tree: bool = False) -> Closure:
    """Every node ``starts`` reach backwards over the input edges of ``graph`` (data and control),
    the starts included, through the edges ``edge_ok`` keeps (None: all; see :func:`edges_kept`).
    See the module docstring; ``tree`` asks for the breadth-first order and parents too."""
    import numpy as np

    n = len(graph)
    first = list(dict.fromkeys(starts))
    if _kernels is not None and not tree:
        mask = bytearray(n)
        ok_bytes = None if edge_ok is None else edge_ok.view(np.uint8)
        if _kernels.reach(graph.in_start, graph.in_src, first, mask, ok_bytes):
            return Closure(mask)
    in_src = np.frombuffer(graph.in_src, dtype=np.int32)
    in_start = np.frombuffer(graph.in_start, dtype=np.int32).astype(np.int64)
    keep = np.zeros(n, dtype=bool)
    frontier: npt.NDArray[np.int32 | np.int64] = np.asarray(first, dtype=np.int64)
    keep[frontier] = True
    levels = [frontier]
    parent_np = None
    if tree:
        parent_np = np.full(n, UNSEEN, dtype=np.int64)
        parent_np[frontier] = ROOT
    small = 0 if n >= _SMALL_GRAPH else _SMALL_LEVELS
    while len(frontier) and small < _SMALL_LEVELS:
        small = small + 1 if len(frontier) < _SMALL_FRONTIER else 0
        lo = in_start[frontier]
        counts = in_start[frontier + 1] - lo
        total = int(counts.sum())
        if not total:
            frontier = frontier[:0]
            break
        offsets = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(total)
        dst = np.repeat(frontier, counts) if parent_np is not None else None
        if edge_ok is not None:
            ok = edge_ok[offsets]
            offsets = offsets[ok]
            dst = dst[ok] if dst is not None else None
        srcs = in_src[offsets]
        new = ~keep[srcs]
        srcs = srcs[new]
        if parent_np is not None and dst is not None:
            # the plain walk's order: each node where it first occurs along this level
            _, at = np.unique(srcs, return_index=True)
            at.sort()
            srcs = srcs[at]
            parent_np[srcs] = dst[new][at]
            levels.append(srcs)
        keep[srcs] = True  # without a tree, duplicates may stay in the frontier: cheaper than np.unique
        frontier = srcs  # in_src's int32 ids from here on
    mask = bytearray(keep.view(np.uint8).tobytes())
    queue = frontier.tolist()
    parent = parent_np.tolist() if parent_np is not None else None
    if queue:  # the same breadth-first walk, in Python
        starts_a, src_a = graph.in_start, graph.in_src
        ok_a = edge_ok.view(np.uint8).tobytes() if edge_ok is not None else None
        push = queue.append
        k = 0
        while k < len(queue):
            u = queue[k]
            k += 1
            for pos in range(starts_a[u], starts_a[u + 1]):
                s = src_a[pos]
                if not mask[s] and (ok_a is None or ok_a[pos]):
                    mask[s] = 1
                    push(s)
                    if parent is not None:
                        parent[s] = u
    if parent is None:
        return Closure(mask)
    order = np.concatenate(levels).tolist() if len(levels) > 1 else levels[0].tolist()
    order += queue[len(frontier):]
    return Closure(mask, order, parent)
