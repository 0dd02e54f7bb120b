"""While-loop frames of the client graph: TF's ``BuildControlFlowInfo``.

``tensorflow/core/graph/control_flow.cc`` ``BuildControlFlowInfo`` gives every node its frame
(the while loop it runs in) and every frame its parent: a node's frame is its first input's (TF
walks from the source and requires all inputs to agree), an ``Exit``'s consumers are in the
``Exit``'s parent frame, an ``Enter`` opens the frame its ``frame_name`` names (an ``Enter``
without one is TF's error "The Enter node ... must have a frame name."). The partitioner asks it
only when a cross-device edge may sit inside a frame (:mod:`placeviz.partition.graph_partition`,
``AddControlFlow``), so the frames are computed lazily, per node asked.
"""

from __future__ import annotations

from collections.abc import Callable

from placeviz.op_kinds import ENTER_OPS, EXIT_OPS, MERGE_OPS, NEXT_ITERATION_OPS
from placeviz.partition.base import PartitionError, _PartitionerBase

# What ``_frames`` returns: frame_of(node), output_frame(node), input_frame(node), each frame's
# parent frame, each frame's parallel_iterations.
Frames = tuple[Callable[[int], str], Callable[[int], str], Callable[[int], str], dict[str, str], dict[str, int]]


class _ControlFlowInfo(_PartitionerBase):
    """Frames of original and added nodes (module docstring)."""

    def _frames(self) -> Frames:
        """Frame functions over the client graph (BuildControlFlowInfo, computed lazily).

        A node's frame is its first input's (TF walks from the source and requires all inputs to
        agree), an Exit's consumers are in the Exit's parent frame, an Enter opens its frame.
        """
        ops, names = self.ops, self.names
        frame: dict[int, str] = {}
        parent: dict[str, str] = {}
        parallel: dict[str, int] = {}
        in_start, e_src = self.in_start, self.e_src
        n = self.n

        def first_input(i: int) -> int:
            if i >= n:
                a = self.added[i - n]
                return a.inputs[0][0] if a.inputs else -1
            merge = ops[i] in MERGE_OPS
            for p in range(in_start[i], in_start[i + 1]):
                s = int(e_src[p])
                if merge and self.op(s) in NEXT_ITERATION_OPS:
                    continue
                return s
            return -1

        def known(i: int) -> str | None:
            if i >= n and self.added[i - n].kind == "cloop":
                return self.added[i - n].frame
            return frame.get(i)

        def frame_of(i: int) -> str:
            got = known(i)
            if got is not None:
                return got
            chain = []
            cur = i
            result = ""
            while True:
                f = known(cur)
                if f is not None:
                    result = f
                    break
                chain.append(cur)
                s = first_input(cur)
                if s < 0:
                    result = ""
                    break
                cur = s
            for node in reversed(chain):
                s = first_input(node)
                inner = result if s >= 0 else ""
                if s >= 0 and self.op(s) in EXIT_OPS:
                    inner = parent.get(inner, "")
                if node < n and ops[node] in ENTER_OPS:
                    attr = self.nodes_pb[node].attr
                    av = attr.get("frame_name")
                    fname = av.s.decode("utf-8", "replace") if av is not None else ""
                    if not fname:
                        raise PartitionError(f"The Enter node {names[node]} must have a frame name.")
                    parent.setdefault(fname, inner)
                    pav = attr.get("parallel_iterations")
                    parallel.setdefault(fname, pav.i if pav is not None else 10)
                    inner = fname
                frame[node] = inner
                result = inner
            return frame[i]

        def output_frame(i: int) -> str:
            f = frame_of(i)
            return parent.get(f, "") if self.op(i) in EXIT_OPS else f

        def input_frame(i: int) -> str:
            f = frame_of(i)
            return parent.get(f, "") if self.op(i) in ENTER_OPS else f

        return frame_of, output_frame, input_frame, parent, parallel
