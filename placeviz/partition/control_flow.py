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
"""

from __future__ import annotations

from collections.abc import Callable

from placeviz.control_flow import frames_of
from placeviz.op_kinds import ENTER_OPS, EXIT_OPS
from placeviz.partition.base import PartitionError, _PartitionerBase

# What ``_frames`` returns: frame_of(node), output_frame(node), input_frame(node), each frame's
# parent frame, each frame's parallel_iterations.
Frames = tuple[Callable[[int], str], Callable[[int], str], Callable[[int], str], dict[str, str], dict[str, int]]


class _ControlFlowInfo(_PartitionerBase):
    """Frames of original and added nodes (module docstring)."""

    def _frames(self) -> Frames:
        """Frame functions over the run's graph and the added nodes (module docstring)."""
        info = frames_of(self.ops, self.names, self.nodes_pb, self.in_start, self.e_src, keep=self.keep_np)
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
