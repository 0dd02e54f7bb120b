"""While-loop frames of a graph: TF's ``BuildControlFlowInfo``, written once.

``tensorflow/core/graph/control_flow.cc`` ``BuildControlFlowInfo`` walks the graph breadth-first
from the source node (whose out-edges reach every node without inputs) and gives each node the
frame of the first visitor that reaches it:

* an ``Enter``'s consumers are in the frame named by its ``frame_name`` attr, whose parent is
  the ``Enter``'s own frame (an ``Enter`` without one is TF's error "The Enter ... must have a
  frame name.");
* an ``Exit``'s consumers are in the parent of the ``Exit``'s frame;
* any other node's consumers are in its own frame.

A node reached again from another frame is TF's error "... has inputs from different frames".
The walk needs no topological order: the back edge ``NextIteration -> Merge`` reaches a ``Merge``
that its ``Enter`` input already reached, so graphs with cycles get frames too; nodes no walk
reaches (TF's ``unreachable_nodes``) stay in the root frame.

The sync proof, the traffic report, lint rule PV401 and the partitioner (``AddControlFlow`` in
``tensorflow/core/graph/graph_partition.cc``) all read :attr:`placeviz.graph.Graph.control_flow`,
computed by :func:`build_control_flow_info` once per graph.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import compress
from typing import TYPE_CHECKING, Any

from placeviz.op_kinds import ENTER_OPS, EXIT_OPS

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from placeviz.graph import Graph, NodeDefs

    IntArray = Sequence[int] | NDArray[Any]

ROOT = 0
"""The frame id of the root frame (outside every while loop)."""

DEFAULT_PARALLEL_ITERATIONS = 10
"""``parallel_iterations`` of an ``Enter`` without the attr (``control_flow_ops.cc``'s default)."""


@dataclass(frozen=True, eq=True)
class ControlFlowInfo:
    """Frames of a graph's nodes (module docstring).

    ``frame[i]`` is node ``i``'s frame id; frame ``f`` is named ``names[f]`` (the root, id
    :data:`ROOT`, is named ``""``), its parent frame is ``parent[f]`` and its ``Enter`` nodes'
    ``parallel_iterations`` is ``parallel[f]`` (the first ``Enter`` reached sets both). ``error``
    is the first error TF's ``BuildControlFlowInfo`` would return for the graph, else None.
    """

    frame: list[int]
    names: list[str]
    parent: list[int]
    parallel: list[int]
    error: str | None = None

    @property
    def has_loops(self) -> bool:
        return len(self.names) > 1

    @cached_property
    def node_frame_names(self) -> list[str | None]:
        """Node ``i``'s frame name, None at the root (what ``sync.proof.loop_frames`` shows)."""
        names = self.names
        return [None if f == ROOT else names[f] for f in self.frame]

    def frame_name(self, i: int) -> str:
        """The name of node ``i``'s frame, ``""`` at the root."""
        return self.names[self.frame[i]]


def build_control_flow_info(g: Graph) -> ControlFlowInfo:
    """The frames of every node of ``g``, as ``BuildControlFlowInfo`` (control_flow.cc) finds them
    (what :attr:`placeviz.graph.Graph.control_flow` keeps). The graph's consumer lists are made
    (and kept) only when some ``Enter`` needs the walk: the report's traffic view asks every graph
    for its frames, and most training graphs have no while loop."""
    loops = g.computed("consumers") or not ENTER_OPS.isdisjoint(g.ops)
    return frames_of(g.ops, g.names, g.attr_nodes, g.in_start, g.in_src, out_edges=g.consumers[:2] if loops else None)


def frames_of(ops: Sequence[str], names: Sequence[str], nodes: NodeDefs, in_start: IntArray,
              in_src: IntArray, *, keep: Sequence[bool] | NDArray[Any] | None = None,
              out_edges: tuple[Sequence[int], Sequence[int]] | None = None) -> ControlFlowInfo:
    """``BuildControlFlowInfo`` over a graph given as arrays (:class:`placeviz.graph.Graph`'s).

    The inputs of node ``i`` are ``in_src[in_start[i]:in_start[i+1]]``; a source id outside
    ``0..n-1`` is a node without inputs that is not in the arrays (the partitioner's ``_Recv`` of
    a fed tensor), at the root. ``keep``: the nodes of the graph TF runs it on (the run's pruned
    graph; every input of a kept node is kept or such an outside node); the others stay at the
    root, unvisited. ``out_edges``: ``(out_start, out_dst)`` of the same edges, if known.

    One breadth-first pass, only when an ``Enter`` node is kept (a set test in C otherwise:
    every node is at the root).
    """
    n = len(ops)
    frame = [ROOT] * n
    names_f, parent, parallel = [""], [ROOT], [DEFAULT_PARALLEL_ITERATIONS]
    if ENTER_OPS.isdisjoint(ops if keep is None else compress(ops, keep)):
        return ControlFlowInfo(frame, names_f, parent, parallel)
    import numpy as np

    starts = np.frombuffer(in_start, dtype=np.int32) if isinstance(in_start, array) else np.asarray(in_start)
    srcs = np.frombuffer(in_src, dtype=np.int32) if isinstance(in_src, array) else np.asarray(in_src)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(starts))
    outside = (srcs < 0) | (srcs >= n)
    kept: list[bool] = [True] * n if keep is None else np.asarray(keep, dtype=bool).tolist()
    is_enter = list(map(ENTER_OPS.__contains__, ops))
    is_exit = list(map(EXIT_OPS.__contains__, ops))
    if out_edges is None or outside.any():
        inside = ~outside
        order = np.argsort(srcs[inside], kind="stable")
        out_dst = dst[inside][order].tolist()
        out_start = np.searchsorted(srcs[inside][order], np.arange(n + 1)).tolist()
    else:
        out_start, out_dst = out_edges
    # The outside sources' consumers: one virtual node at the root, after the nodes without inputs.
    outside_dst = dst[outside].tolist()
    no_inputs = np.nonzero(np.diff(starts) == 0)[0]
    if keep is not None:
        outside_dst = [d for d in outside_dst if kept[d]]
        no_inputs = no_inputs[np.asarray(keep, dtype=bool)[no_inputs]]
    visited = bytearray(n)
    first_visitor = [-1] * n
    ready: deque[int] = deque(no_inputs.tolist())
    for i in ready:
        visited[i] = 1
    ready.append(-1)
    error: str | None = None
    by_name: dict[str, int] = {}
    while ready:
        cur = ready.popleft()
        if cur < 0:
            f, consumers = ROOT, outside_dst
        else:
            f = frame[cur]
            if is_exit[cur]:
                f = parent[f]
            consumers = out_dst[out_start[cur]:out_start[cur + 1]]
        for out in consumers:
            if visited[out]:
                got = parent[frame[out]] if is_enter[out] else frame[out]
                if got != f and error is None:
                    by = names[first_visitor[out]] if first_visitor[out] >= 0 else "(a fed tensor)"
                    here = names[cur] if cur >= 0 else "(a fed tensor)"
                    error = (f"{names[out]} has inputs from different frames. The input {here} is in frame "
                             f"'{names_f[f]}'. The input {by} is in frame '{names_f[got]}'.")
                continue
            if not kept[out]:
                continue
            visited[out] = 1
            first_visitor[out] = cur
            ready.append(out)
            if is_enter[out]:
                attr = nodes[out].attr
                av = attr.get("frame_name")
                fname = av.s.decode("utf-8", "replace") if av is not None else ""
                if not fname and error is None:
                    error = f"The Enter node {names[out]} must have a frame name."
                child = by_name.get(fname)
                if child is None:
                    child = by_name[fname] = len(names_f)
                    names_f.append(fname)
                    parent.append(f)
                    pav = attr.get("parallel_iterations")
                    parallel.append(pav.i if pav is not None else DEFAULT_PARALLEL_ITERATIONS)
                frame[out] = child
            else:
                frame[out] = f
    return ControlFlowInfo(frame, names_f, parent, parallel, error)
