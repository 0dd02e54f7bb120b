"""While-loop frames of the run's graph and of the nodes the partitioner adds.

The frames of the client graph's nodes are TF's ``BuildControlFlowInfo``
(``tensorflow/core/graph/control_flow.cc``), written once in :mod:`placeviz.control_flow` and run
here over the run's graph: the pruned nodes, with a fed tensor's consumers reading the feed's
``_Recv`` (at the root). Its errors (an ``Enter`` without a ``frame_name``, a node with inputs
from different frames) are the partitioner's, as in TF's ``AddControlFlow``
(``tensorflow/core/graph/graph_partition.cc``). The partitioner asks only when a kept ``Enter``
exists (:mod:`placeviz.partition.graph_partition`, ``AddControlFlow``); this module adds the
frames of the nodes it added: a control-loop node is in its loop's frame, any other added node
in its first input's (the parent frame after an ``Exit``).

**The graph's frames, when they are the run's.** When :attr:`placeviz.graph.Graph.control_flow`
is already known (the sync proof and the traffic report read it), a run without feeds reuses it
instead of walking its pruned graph again. Pruning without feeds only drops nodes, and the kept
ones are closed under inputs (every input of a kept node is kept), so ``BuildControlFlowInfo``
meets each kept node from the same inputs, in the same frames; in a graph without its errors a
node's frame does not depend on which input reaches it first. What the first ``Enter`` reached
decides, a frame's parent and ``parallel_iterations``, is the same when every kept ``Enter`` of a
frame agrees with it, which is checked. A replicated ``Const`` (``/replicate/`` copies are read
from outside the graph's arrays, hence at the root) must itself be at the root. Otherwise, and
with feeds (a fed tensor's consumers read the feed's ``_Recv`` at the root), the run's graph is
walked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from placeviz.control_flow import DEFAULT_PARALLEL_ITERATIONS, ROOT, ControlFlowInfo, frames_of
from placeviz.op_kinds import ENTER_OPS, EXIT_OPS
from placeviz.partition.base import PartitionError, _PartitionerBase

if TYPE_CHECKING:
    from placeviz.partition.base import BoolArray, I32Array, I64Array

# What ``_frames`` returns: frame_of(node), output_frame(node), input_frame(node), each frame's
# parent frame, each frame's parallel_iterations.
Frames = tuple[Callable[[int], str], Callable[[int], str], Callable[[int], str], dict[str, str], dict[str, int]]


class _ControlFlowInfo(_PartitionerBase):
    """Frames of original and added nodes (module docstring)."""

    def _frames(self) -> Frames:
        """Frame functions over the run's graph and the added nodes (module docstring)."""
        info = self._graph_frames()
        if info is None:
            src, keep = self._copies_as_originals()
            info = frames_of(self.ops, self.names, self.nodes_pb, self.in_start, src, keep=keep)
        if info.error is not None:
            raise PartitionError(info.error)
        names = info.names
        parent = {names[f]: names[p] for f, p in enumerate(info.parent) if f}
        parallel = {names[f]: k for f, k in enumerate(info.parallel) if f}
        frame, n = info.frame, self.n

        def frame_of(i: int) -> str:
            if i < n:
                return names[frame[i]]
            a = self.added[i - n]
            if a.kind == "cloop":
                return a.frame
            if a.copy_of >= 0:  # a replicated Const: its original's inputs, hence its frame
                return names[frame[a.copy_of]]
            if not a.inputs:
                return ""
            s = a.inputs[0][0]
            f = frame_of(s)
            return parent.get(f, "") if self.op(s) in EXIT_OPS else f

        def output_frame(i: int) -> str:
            f = frame_of(i)
            return parent.get(f, "") if self.op(i) in EXIT_OPS else f

        def input_frame(i: int) -> str:
            f = frame_of(i)
            return parent.get(f, "") if self.op(i) in ENTER_OPS else f

        return frame_of, output_frame, input_frame, parent, parallel

    def _copies_as_originals(self) -> tuple[I32Array | I64Array, BoolArray]:
        """The run's edge sources and kept nodes as ``BuildControlFlowInfo`` meets them, with each
        replicated ``Const``'s copies read as their original.

        ``ReplicateConstantsPass`` gives every copy the original's (control) inputs
        (``tensorflow/core/common_runtime/replicate_constants_pass.cc``), so TF finds a copy in its
        original's frame: a small ``Const`` in a TF1 loop body carries a control input from the
        loop's pivot, and its copies stay in the loop. The partitioner dropped the original and
        points its consumers at the copies (outside the arrays, which ``frames_of`` puts at the
        root); walking the original, kept, in their place gives the frames TF gives.
        """
        copy_of = [a.copy_of for a in self.added]
        if not any(c >= 0 for c in copy_of):
            return self.e_src, self.keep_np
        import numpy as np

        originals = np.asarray(copy_of, dtype=np.int64)
        src = np.asarray(self.e_src, dtype=np.int64)
        keep = np.array(self.keep_np, dtype=bool)
        keep[originals[originals >= 0]] = True
        added = np.flatnonzero(src >= self.n)
        was = originals[src[added] - self.n]
        src[added[was >= 0]] = was[was >= 0]
        return src, keep

    def _graph_frames(self) -> ControlFlowInfo | None:
        """The graph's own frames (:attr:`placeviz.graph.Graph.control_flow`) when they are known and
        are the run's (module docstring), else None."""
        if not self.graph.computed("control_flow"):
            return None
        info = self.graph.control_flow
        # a fed tensor read by the run: its consumers read the feed's _Recv (outside the arrays)
        if info.error is not None or any(a.kind == "feed_recv" for a in self.added):
            return None
        frame, parent, parallel = info.frame, info.parent, info.parallel
        if any(a.copy_of >= 0 and frame[a.copy_of] != ROOT for a in self.added):
            return None
        in_start, src, ops, nodes = self.in_start, self.e_src, self.ops, self.nodes_pb
        for e in self.nodes_with_op(ENTER_OPS):
            f = frame[e]
            if f == ROOT:  # an Enter without inputs stays at the root: let the walk say so
                return None
            pav = nodes[e].attr.get("parallel_iterations")
            if (pav.i if pav is not None else DEFAULT_PARALLEL_ITERATIONS) != parallel[f]:
                return None
            s = int(src[in_start[e]])
            if s >= self.n:  # a replicated Const, at the root (checked above)
                outer = ROOT
            else:
                outer = parent[frame[s]] if ops[s] in EXIT_OPS else frame[s]
            if outer != parent[f]:
                return None
        return info
