"""Cut edges between partitions into ``_Send``/``_Recv`` pairs: TF's ``Partition``.

``tensorflow/core/graph/graph_partition.cc``, on the pruned graph with constants replicated
(:mod:`~placeviz.partition.subgraph`, :mod:`~placeviz.partition.const_replication`):

1. **Control flow** (``OptimizeControlFlowColocation``, ``AddControlFlow``): ``Switch`` moves to
   the device of its data input, ``Exit`` to its input's, non-ref ``Enter`` and ``NextIteration`` to
   their first data consumer's. A while-loop frame (:mod:`~placeviz.partition.control_flow`) with
   a cross-device edge gets, on the destination device, a control loop ``_cloop*``
   (``Enter``/``Merge``/``Switch``/``NextIteration`` fed by the frame's ``LoopCond``) whose
   ``Merge`` gates the receives of that frame, exactly as TF builds it; nested frames stack their
   control loops.
2. **Partition** (``Partition``, ``AddSend``, ``AddRecv``, ``AddDummyConst``): a cross-partition
   data edge ``src:k -> dst`` becomes ``_Send`` on src's device and ``_Recv`` on dst's device
   (``_HostSend``/``_HostRecv`` when the source output / destination input lives in host memory:
   :mod:`~placeviz.partition.memory_types`). Receives are shared per
   (source node, output, destination partition, destination-input-on-host), TF's ``DupRecvKey``,
   so a tensor crosses the network once per destination task and is then relayed inside the task;
   ref-typed edges are never shared, and their receives wait for the destination's other inputs. A
   cross-partition control edge becomes a dummy ``Const <src>/ctrl`` (input ``^src``) and
   ``_Send`` on the source side, ``_Recv`` and ``Identity`` on the destination side, one per
   (source, destination partition). One :meth:`_GraphPartition.split` is one call of TF's
   ``Partition``: by task (``_S<n>`` names, the master), by device inside a task (``_G<n>``, each
   worker), or by device at once (``/_<n>``, DirectSession); :mod:`~placeviz.partition.session`
   chains them.

Speed: per-edge work happens only for edges that cross partitions. That loop
(:meth:`_GraphPartition._split_originals` through :meth:`_GraphPartition._cut_dst`, the
specification) runs as one whole C function when ``placeviz._partition_kernels`` is built: it
returns the level's whole result or declines before doing anything, and the Python runs from the
start (``_kernels = None`` in this module runs the Python code, ``docs/architecture.md`` section 3).
It calls nothing back: the facts of the edges' ends (io types, memory types, shapes) are tables
the methods below make first (:meth:`_GraphPartition._cut_tables`), nodes with the same op, op-fact
attrs and device type sharing one row (``memory_types._MemoryTypes.fact_table``).

Each transfer also carries its static shape and bytes per step (:meth:`_GraphPartition.shape`:
``_output_shapes``, a Const's value, a variable's or placeholder's ``shape`` attr, through
pass-through ops), placeviz's own estimate: TF's partitioner does not need one. The rule is that
method's text alone; the attrs it reads come from :mod:`~placeviz.partition.shapes` (read from the
file's bytes, the cut's transfers' sources in one batch: :meth:`_GraphPartition._cut_tables`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache, cached_property
from itertools import chain
from typing import TYPE_CHECKING, Any, cast

from placeviz.graph import CONTROL
from placeviz.limits import MAX_TENSOR_BYTES
from placeviz.native import kernels
from placeviz.op_kinds import ENTER_OPS, EXIT_OPS, LOOP_COND_OPS, NEXT_ITERATION_OPS, SWITCH_OPS
from placeviz.ops import REF_OFFSET
from placeviz.partition.base import (
    _NEW_ARGS,
    _NEW_CONSTANTS,
    CONST_OPS,
    DT_FLOAT,
    PartitionError,
    Shape,
    _New,
)
from placeviz.partition.control_flow import _ControlFlowInfo
from placeviz.partition.memory_types import FactRow, _MemoryTypes
from placeviz.partition.shapes import ABSENT, ShapeAttrReader
from placeviz.partition.transfers import CONTROL_SLOT
from placeviz.protos import DTYPE_SIZE, DataType, dtype_name, dtype_size

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from placeviz.partition.base import I32Array

Write = Callable[[int, int, int], None]  # rewire input `ref` to (source, slot)
# The rewired inputs of original nodes: their edge positions, new sources and slots.
Writes = tuple["npt.NDArray[np.int64]", "I32Array", "I32Array"]

_kernels = kernels("_partition_kernels")  # the cut-edge loop as one C function (see placeviz.native)

_MOVED_CF_OPS = SWITCH_OPS | EXIT_OPS | ENTER_OPS | NEXT_ITERATION_OPS
KIND_SEND, KIND_RECV = "send", "recv"
_DTYPE_NAMES: dict[int, str] = {}  # dtype -> dtype_name, as transfers name them


@cache
def _dtype_names() -> dict[int, str]:
    """:func:`dtype_name` of every DataType value and of its ref type: the C cut's table (it names
    any other value ``dtype_<n>``, as :func:`dtype_name` does)."""
    return {d: dtype_name(d) for t in DataType.values() for d in (t, t + REF_OFFSET)}


def unique_sorted(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``np.unique`` of a 1-d integer array, sorted, without its import of ``numpy.ma`` (it asks
    ``np.ma.is_masked``: 10-20 ms of a small graph's cold ``lint``, ``tests/test_coldstart.py``)."""
    import numpy as np

    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


def _known_first(shape: Shape, fallback: Shape) -> Shape:
    """``shape`` when it is known (a scalar's ``[]`` included), else ``fallback``."""
    return shape if shape is not None else fallback


_PASS_THROUGH_OPS = frozenset({
    "Identity", "RefIdentity", "Snapshot", "StopGradient", "PreventGradient", "Enter", "RefEnter",
    "Exit", "RefExit", "NextIteration", "RefNextIteration", "Switch", "RefSwitch", "Cast",
    "Assign", "AssignAdd", "AssignSub", "ScatterAdd", "ScatterSub", "ScatterUpdate", "CheckNumerics",
    "EnsureShape", "Neg", "Relu", "Sigmoid", "Tanh", "Square", "Sqrt", "Abs", "ZerosLike", "OnesLike",
})
_SHAPE_ATTR_OPS = frozenset({"VariableV2", "Variable", "TemporaryVariable", "Placeholder", "PlaceholderV2",
                             "PlaceholderWithDefault"})

_ATTR_SHAPE_OPS = CONST_OPS | _SHAPE_ATTR_OPS | {"VarHandleOp"}  # the ops whose own attrs shape() reads

# What :meth:`_GraphPartition.shape` reads beyond ``_output_shapes`` for an output (_shape_kind).
_NOTHING, _VALUE, _DECLARED, _DECLARED_OR_INPUT, _INPUT = range(5)


@cache
def _shape_kind(op: str, first_output: bool) -> int:
    """What :meth:`_GraphPartition.shape` reads beyond ``_output_shapes`` for an output of ``op``
    (``first_output``: slot 0): a Const's value (``_VALUE``), a declared ``shape`` attr
    (``_DECLARED``; ``PlaceholderWithDefault``: its input's shape when that is unknown,
    ``_DECLARED_OR_INPUT``), its first input's shape through a pass-through op (``_INPUT``), or
    nothing (``_NOTHING``). The rule's op sets in one place, read by the rule itself and by the
    batch in :meth:`_GraphPartition._shapes_of` (a ``RestoreV2`` has one output per variable it
    restores, answered None without asking)."""
    if op in CONST_OPS:
        return _VALUE
    if op in _SHAPE_ATTR_OPS:
        return _DECLARED_OR_INPUT if op == "PlaceholderWithDefault" else _DECLARED
    if op in _PASS_THROUGH_OPS or op == "ReadVariableOp" or (op.startswith("Apply") and first_output):
        return _INPUT
    return _NOTHING


def _input_sources(nodes: list[_New]) -> tuple[I32Array, I32Array]:
    """The number of inputs of each of the added ``nodes``, and the source of every input of
    theirs in order (``placeviz._partition_kernels.input_sources`` when built: 235k inputs at 1M
    nodes; this loop when not, or when it declines)."""
    import numpy as np

    got = _kernels.input_sources(nodes) if _kernels is not None else None
    if got is not None:
        return np.frombuffer(got[0], dtype=np.int32), np.frombuffer(got[1], dtype=np.int32)
    counts = np.fromiter(map(len, (a.inputs for a in nodes)), dtype=np.int32, count=len(nodes))
    srcs = np.fromiter((s for a in nodes for s, _sl in a.inputs), dtype=np.int32, count=int(counts.sum()))
    return counts, srcs


def _input_writer(a: _New) -> Write:
    """``write`` for :meth:`_GraphPartition._cut_dst` into an added node: rewires its input ``ref``."""

    def write(ref: int, s: int, sl: int) -> None:
        a.inputs[ref] = [s, sl]

    return write


class _GraphPartition(_MemoryTypes, _ControlFlowInfo):
    """Control-flow colocation, control loops and the split of one level (module docstring)."""

    # ---------------------------------------------------------------------------- control flow
    def control_flow(self) -> None:
        """OptimizeControlFlowColocation, then control loops for frames that span devices."""
        import numpy as np

        ops = self.ops
        self.dev_l = self.dev_np.tolist()
        cf_nodes = self.nodes_with_op(_MOVED_CF_OPS)
        if not cf_nodes:
            return
        # First data consumer of Enter / NextIteration nodes (in client order).
        wanted = [i for i in cf_nodes if ops[i] in ENTER_OPS or ops[i] in NEXT_ITERATION_OPS]
        first_consumer: dict[int, int] = {}
        if wanted:
            pos = np.nonzero(np.isin(self.e_src, np.asarray(wanted, dtype=np.int32)) & self.kept_edge
                             & (self.e_slot != CONTROL))[0]
            best: dict[int, tuple[int, int]] = {}
            for p, s, d in zip(pos.tolist(), self.e_src[pos].tolist(), self.e_dst[pos].tolist(), strict=True):
                key = (int(self.rank[d]), p)
                if s not in best or key < best[s]:
                    best[s] = key
                    first_consumer[s] = d
            for k, a in enumerate(self.added):
                for s, slot in a.inputs:
                    if slot != CONTROL and s in best and s not in first_consumer:
                        first_consumer[s] = self.n + k
        for i in cf_nodes:
            op = ops[i]
            new = None
            if op in SWITCH_OPS or op in EXIT_OPS:
                for p in range(self.in_start[i], self.in_start[i + 1]):
                    if self.e_slot[p] != CONTROL:
                        new = self.dev(int(self.e_src[p]))
                        break
            else:
                if op in ENTER_OPS and self.in_type(i, 0) > REF_OFFSET:
                    continue
                d = first_consumer.get(i)
                if d is not None:
                    new = self.dev(d)
            old = self.dev_l[i]
            if new is not None and new != old:
                self.dev_np[i] = new
                self.dev_l[i] = new
                self.moved[self.names[i]] = {"from": self.devs.names[old], "to": self.devs.names[new]}
        if any(ops[i] in ENTER_OPS for i in cf_nodes):
            self._add_control_loops()

    def _cross_device_edges(self) -> list[tuple[int, int]]:
        """(dst, src) of every edge between two devices, in processing order."""
        import numpy as np

        dev_all = self._dev_all()
        pos = np.nonzero(self.kept_edge & (dev_all[self.e_src] != dev_all[self.e_dst]))[0]
        if not self.identity_order:
            pos = pos[np.argsort(self.rank[self.e_dst[pos]], kind="stable")]
        out = list(zip(self.e_dst[pos].tolist(), self.e_src[pos].tolist(), strict=True))
        for k, a in enumerate(self.added):
            for s, _sl in a.inputs:
                if self.dev(s) != a.dev:
                    out.append((self.n + k, s))
        return out

    def _add_control_loops(self) -> None:
        """graph_partition.cc AddControlFlow: a control loop per (frame, device) reached by a
        cross-device edge inside that frame, stacked for nested frames."""
        cross = self._cross_device_edges()
        if not cross:  # no edge can need a control loop: the frames are not walked
            return
        frame_of, output_frame, input_frame, parent, parallel = self._frames()
        relevant = []
        for dst, src in cross:
            sf = output_frame(src)
            if sf and sf == input_frame(dst):
                relevant.append((dst, sf))
        if not relevant:
            return
        cond: dict[str, int] = {}
        for i in self.nodes_with_op(LOOP_COND_OPS):
            cond[frame_of(i)] = i
        level = 0 if self.session == "master" else 2
        loops: dict[tuple[str, int], dict[str, int]] = {}
        for dst, sf in relevant:
            dst_dev = self.dev(dst)
            dname = self.name(dst)
            major = self.n + 1
            child: dict[str, int] | None = None
            cur = sf
            while True:
                if not cur:
                    if child is not None:
                        const = self._add(self.new_name(level, dname), "Const", dst_dev, [], "cloop_const", -1, 0,
                                          DT_FLOAT, major)
                        self.added[child["enter"] - self.n].inputs.append([const, 0])
                    break
                have = loops.get((cur, dst_dev))
                if have is not None:
                    if child is not None:
                        self.added[child["enter"] - self.n].inputs.append([have["merge"], 0])
                    break
                lc = cond.get(cur)
                if lc is None:
                    raise PartitionError(f"A cross-device loop must have a pivot predicate: {cur}")
                names = ["_cloop" + self.new_name(level, dname) for _ in range(4)]
                enter = self._add(names[0], "Enter", dst_dev, [], "cloop", -1, 0, DT_FLOAT, major,
                                  {"frame_name": ("s", cur), "parallel_iterations": ("i", parallel.get(cur, 10)),
                                   "is_constant": ("b", False)})
                merge = self._add(names[1], "Merge", dst_dev, [], "cloop", -1, 0, DT_FLOAT, major, {"N": ("i", 2)})
                switch = self._add(names[2], "Switch", dst_dev, [[merge, 0], [lc, 0]], "cloop", -1, 0, DT_FLOAT,
                                   major, {})
                nxt = self._add(names[3], "NextIteration", dst_dev, [[switch, 1]], "cloop", -1, 0, DT_FLOAT, major,
                                {})
                self.added[merge - self.n].inputs = [[enter, 0], [nxt, 0]]
                for k in (enter, merge, switch, nxt):
                    a = self.added[k - self.n]
                    a.frame = cur
                    attrs = a.meta
                    assert isinstance(attrs, dict)  # a control loop node's attrs, made above
                    attrs["T"] = ("type", DT_FLOAT)
                loop = {"enter": enter, "merge": merge}
                loops[(cur, dst_dev)] = loop
                self.control_loops.append({"frame": cur, "device": self.devs.names[dst_dev],
                                           "nodes": [self.name(k) for k in (enter, merge, switch, nxt)],
                                           "loop_cond": self.names[lc]})
                if child is not None:
                    self.added[child["enter"] - self.n].inputs.append([merge, 0])
                child = loop
                cur = parent.get(cur, "")
        # Every cross-device edge inside a frame: the frame's control loop on dst's device gates it.
        for dst, src in self._cross_device_edges():
            sf = output_frame(src)
            if sf and sf == input_frame(dst):
                loop = loops[(sf, self.dev(dst))]
                entry = self.cloop_ctrl.setdefault(dst, [loop["merge"], 0])
                entry[1] += 1

    # ---------------------------------------------------------------------------- checks
    def check_complete(self) -> None:
        """TF's "Incomplete graph": a node with fewer data inputs than its op takes."""
        import numpy as np

        table = self.table
        keep = self.keep_np
        counts = np.bincount(self.e_dst[self.e_slot != CONTROL], minlength=self.n)
        expected = np.full(len(self.op_index), -1, dtype=np.int64)
        for op, code in self.op_index.items():
            facts = table.get(op)
            if facts is None:
                continue
            if any(a.number_attr or a.type_list_attr for a in facts.inputs):
                expected[code] = -2
            else:
                expected[code] = len(facts.inputs)
        exp = expected[self.op_codes]
        bad = np.nonzero(keep & (exp >= 0) & (counts != exp))[0].tolist()
        for i in np.nonzero(keep & (exp == -2))[0].tolist():
            io = self.types(i)
            if io is not None and len(io[0]) != counts[i]:
                bad.append(i)
        if bad:
            i = min(bad, key=lambda k: int(self.rank[k]))
            if exp[i] >= 0:
                want = int(exp[i])
            else:
                io = self.types(i)
                assert io is not None  # a node of a variadic op is in `bad` when its io types are known
                want = len(io[0])
            have = int(counts[i])
            if have < want:
                raise PartitionError(f"Incomplete graph, missing {want - have} inputs for {self.names[i]}")
            raise PartitionError(f"node {self.names[i]} ({self.ops[i]}) has {have} data inputs, but its op "
                                 f"takes {want}")

    # ---------------------------------------------------------------------------- splitting
    def split(self, level: int) -> None:
        """One partitioning pass: 0 by task (master, ``_S``), 1 by device inside tasks (``_G``),
        2 by device in one pass (DirectSession, ``/_n``)."""
        import numpy as np

        devs = self.devs
        ndev = len(devs.names)
        part = devs.task if level == 0 else list(range(ndev))
        part_np = np.asarray(part + [-1], dtype=np.int32)
        dev_all = self._dev_all()
        pd = part_np[dev_all]
        self.level = level
        self.part = part
        self.dup = {}
        self.edge_id = self.num_edges
        mask = self.kept_edge & (pd[self.e_src] != pd[self.e_dst])
        pos = np.nonzero(mask)[0]
        non_cpu = [k for k in range(ndev) if not devs.is_cpu[k]]
        if non_cpu:
            same = self.kept_edge & (dev_all[self.e_src] == dev_all[self.e_dst]) & (self.e_slot != CONTROL)
            same &= np.isin(dev_all[self.e_dst], np.asarray(non_cpu, dtype=np.int32))
            extra = [p for p in np.nonzero(same)[0].tolist() if self._need_same_device(p)]
            if extra:
                pos = np.union1d(pos, np.asarray(extra, dtype=pos.dtype))
        if not self.identity_order and len(pos):
            pos = pos[np.argsort(self.rank[self.e_dst[pos]], kind="stable")]
        w_pos, w_src, w_slot = self._split_originals(pos)
        if len(w_pos):
            self.e_src[w_pos] = w_src
            self.e_slot[w_pos] = w_slot
        # Added nodes whose inputs may cross: client nodes, copies, cloop nodes, receives with read
        # controls (sends, control Consts and Identities sit on their input's device).
        recheck = list(dict.fromkeys(self.recheck))
        if not non_cpu and recheck:  # then only an input on another partition is cut
            recheck = self._across_partitions(recheck, part)
        for dst in recheck:
            a = self.added[dst - self.n]
            dpart = part[a.dev]
            items = []
            for j, (s, sl) in enumerate(a.inputs):
                sdev = self.dev(s)
                if part[sdev] != dpart or (non_cpu and sl != CONTROL and sdev == a.dev and not devs.is_cpu[a.dev]
                                           and self.out_host(s, sl) != self.in_host(dst, j, self.out_type(s, sl))):
                    items.append((j, s, sl, j))
            if items:
                self._cut_dst(dst, items, _input_writer(a))

    def _across_partitions(self, ids: list[int], part: list[int]) -> list[int]:
        """The added nodes ``ids`` with an input on another partition than theirs (``part`` of each
        device), in order, over arrays: on CPUs only, the loop of :meth:`split` over added nodes
        cuts nothing else, so the others need not go through it (16k receives at 200k nodes, 47k
        inputs, none of them cut at the device level)."""
        import numpy as np

        n, added = self.n, self.added
        counts, srcs = _input_sources([added[i - n] for i in ids])
        part_of = np.asarray(part, dtype=np.int64)[self._dev_all()]  # as part[dev(i)] (a list wraps -1 alike)
        ids_np = np.asarray(ids, dtype=np.int64)
        cross = part_of[srcs] != np.repeat(part_of[ids_np], counts)
        hit = np.bincount(np.repeat(np.arange(len(ids)), counts)[cross], minlength=len(ids)) > 0
        out: list[int] = ids_np[hit].tolist()
        return out

    def _split_originals(self, pos: npt.NDArray[np.intp]) -> Writes:
        """The cut edges into original nodes, grouped by destination in processing order, each
        group through :meth:`_cut_dst` (TF's loop over one node's in-edges): the specification of
        the C kernel, which does the whole loop or declines (:meth:`_split_originals_c`). Returns
        the inputs it rewired: their edge positions, new sources and slots."""
        import numpy as np

        pos_l = pos.tolist()
        src_l = self.e_src[pos].tolist()
        slot_l = self.e_slot[pos].tolist()
        dst_l = self.e_dst[pos].tolist()
        if _kernels is not None and pos_l:
            writes = self._split_originals_c(pos, pos_l, src_l, slot_l, dst_l)
            if writes is not None:
                return writes
        w_pos: list[int] = []
        w_src: list[int] = []
        w_slot: list[int] = []

        def write(ref: int, s: int, sl: int) -> None:
            w_pos.append(ref)
            w_src.append(s)
            w_slot.append(sl)

        # Their io types are read from their NodeDefs: parsed together when the graph's bytes were not.
        n = self.n
        self.graph.prefetch_node_defs({i for i in chain(src_l, dst_l) if i < n})
        in_start = self.in_start
        k, total = 0, len(pos_l)
        while k < total:
            dst = dst_l[k]
            j = k + 1
            while j < total and dst_l[j] == dst:
                j += 1
            base = in_start[dst]
            self._cut_dst(dst, [(pos_l[q], src_l[q], slot_l[q], pos_l[q] - base) for q in range(k, j)], write)
            k = j
        return (np.asarray(w_pos, dtype=np.int64), np.asarray(w_src, dtype=np.int32),
                np.asarray(w_slot, dtype=np.int32))

    def _split_originals_c(self, pos: npt.NDArray[np.intp], pos_l: list[int], src_l: list[int], slot_l: list[int],
                           dst_l: list[int]) -> Writes | None:
        """The whole Python loop of :meth:`_split_originals` in C
        (``placeviz._partition_kernels.split_originals``): the same groups through the same steps
        as :meth:`_cut_dst`. What those steps ask of the methods here (io types, memory types,
        shapes, dtype sizes and names) it reads from tables made first by the same methods
        (:meth:`_cut_tables`), never calling back into Python. It returns everything it made and
        changes nothing given (the rewired inputs come back as arrays); None when it declines (an
        argument of another kind, a destination gated by a control loop), before doing anything."""
        import numpy as np

        devs = self.devs
        assert _kernels is not None  # the caller checks
        row_of, rows, (shape_keys, shape_values) = self._cut_tables(pos)
        res = _kernels.split_originals(
            pos=pos_l, src=src_l, slot=slot_l, dst=dst_l, n=self.n, level=self.level, part=self.part,
            is_cpu=devs.is_cpu, dev_task=devs.task, dev_names=devs.names, dev_type=devs.type, dev=self.dev_l,
            names=self.names, ops=self.ops, added=self.added, cloops=self.cloop_ctrl, row_of=row_of, rows=rows,
            shape_keys=shape_keys, shape_values=shape_values, dtype_sizes=DTYPE_SIZE, dtype_names=_dtype_names(),
            new_type=_New, new_args=_NEW_ARGS, new_constants=_NEW_CONSTANTS,
            suffix="/_" if self.level == 2 else ("_S" if self.level == 0 else "_G"),
            rank=self.rank, in_start=self.in_start, e_src=self.e_src, e_slot=self.e_slot, counters=self._counter_g,
            seq=self._seq, counter_s=self._counter_s, edge_id=self.edge_id)
        if res is None:
            return None
        self.added.extend(res["added"])
        self.transfers.extend(res["transfers"])  # a tuple of the TransferTable's columns
        if self.dup:
            self.dup.update(res["dup"])
        else:  # the level's first receives (45k at 200k nodes): the kernel's dict itself, not a copy
            self.dup = res["dup"]
        self._counter_g = res["counters"]
        self._seq, self._counter_s, self.edge_id = res["seq"], res["counter_s"], res["edge_id"]
        self.recheck.extend(res["recheck"])
        return (np.frombuffer(res["w_pos"], dtype=np.int64), np.frombuffer(res["w_src"], dtype=np.int32),
                np.frombuffer(res["w_slot"], dtype=np.int32))

    def _cut_tables(self, pos: npt.NDArray[np.intp]) -> tuple[I32Array, list[FactRow],
                                                              tuple[npt.NDArray[np.int64], list[Shape]]]:
        """What the C cut reads of the cut edges ``pos`` (edge positions into original nodes): the
        fact rows (:meth:`fact_table`) of every original node whose facts it may ask for (both
        ends of each data edge, the other data inputs of a destination that a ref-typed source's
        group reads, the original of a replicated Const), and :meth:`shape` of every (origin,
        slot) a data transfer can name (an added source stands for its origin, as in
        :meth:`_cut_dst`), as sorted keys ``origin << 32 | slot`` and the shape of each (the C cut
        searches the keys: no tuple and dict entry per pair)."""
        import numpy as np

        n = self.n
        data = self.e_slot[pos] != CONTROL  # control edges ask for no facts
        src, slot, dst = self.e_src[pos][data], self.e_slot[pos][data], self.e_dst[pos][data]
        from_added = unique_sorted(src[src >= n])
        stands = [self.added[s - n] for s in from_added.tolist()]
        copies = np.asarray([a.copy_of for a in stands if a.copy_of >= 0], dtype=np.int32)
        nodes = unique_sorted(np.concatenate([src[src < n], dst, copies]))
        row_of, rows = self.fact_table(nodes.tolist())
        # A group with a ref-typed source reads the types of all of its destination's inputs.
        ref_row = np.asarray([max(row[1], default=0) > REF_OFFSET for row in rows] + [False])
        ref_edge = ref_row[row_of[np.minimum(src, n - 1)]] & (src < n)
        if stands:
            ref_added = from_added[np.asarray([a.dtype > REF_OFFSET for a in stands])]
            is_ref_added = np.zeros(n + len(self.added), dtype=bool)
            is_ref_added[ref_added] = True
            ref_edge |= is_ref_added[src]
        if ref_edge.any():
            ref_dst = unique_sorted(dst[ref_edge])
            lo, hi = self.in_start_np[ref_dst].astype(np.int64), self.in_start_np[ref_dst + 1].astype(np.int64)
            counts = hi - lo
            inputs = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()), dtype=np.int64)
            in_src = self.e_src[inputs][self.e_slot[inputs] != CONTROL]
            wanted = np.zeros(n, dtype=bool)
            wanted[in_src[in_src < n]] = True
            wanted[nodes] = False
            more = np.flatnonzero(wanted)
            if len(more):  # their rows after the others (a row may repeat one: no answer changes)
                more_row_of, more_rows = self.fact_table(more.tolist())
                row_of[more] = more_row_of[more] + len(rows)
                rows += more_rows
        origin, oslot = src.astype(np.int64), slot.astype(np.int64)
        if stands:  # an added source with an origin stands for it (_cut_dst)
            at = np.flatnonzero(origin >= n)
            k = np.searchsorted(from_added, origin[at])
            a_origin = np.asarray([a.origin for a in stands], dtype=np.int64)[k]
            a_oslot = np.asarray([a.oslot for a in stands], dtype=np.int64)[k]
            has = a_origin >= 0
            origin[at[has]] = a_origin[has]
            oslot[at[has]] = a_oslot[has]
        named = oslot != CONTROL
        pairs = unique_sorted((origin[named] << 32) | oslot[named])
        return row_of, rows, (pairs, self._shapes_of(pairs >> 32, pairs & 0xFFFFFFFF))

    def _shapes_of(self, origins: Sequence[int] | npt.NDArray[np.int64],
                   slots: Sequence[int] | npt.NDArray[np.int64]) -> list[Shape]:
        """:meth:`shape` of each (origin, slot), the C cut's table. With ``_output_shapes`` in the
        graph the rule is asked of each; without, what it reads of an original node's output
        depends on the node's op (:func:`_shape_kind`), and :meth:`_shapes_by_kind` answers the
        batch by kind."""
        import numpy as np

        o_arr, s_arr = np.asarray(origins, dtype=np.int64), np.asarray(slots, dtype=np.int64)
        if not self.output_shapes:
            return self._shapes_by_kind(o_arr, s_arr)
        self._prefetch_shape_attrs(unique_sorted(o_arr))
        shape = self.shape
        return [shape(o, s) for o, s in zip(o_arr.tolist(), s_arr.tolist(), strict=True)]

    @cached_property
    def _shape_kinds(self) -> npt.NDArray[np.int8]:
        """:func:`_shape_kind` of each op code (row): of a later output (column 0) and of slot 0 (1)."""
        import numpy as np

        kinds = np.zeros((max(len(self.op_index), 1), 2), dtype=np.int8)
        for op, code in self.op_index.items():
            kinds[code] = (_shape_kind(op, False), _shape_kind(op, True))
        return kinds

    def _shapes_by_kind(self, origins: npt.NDArray[np.int64], slots: npt.NDArray[np.int64]) -> list[Shape]:
        """:meth:`shape` of each (origin, slot) of a graph without ``_output_shapes``, in bulk. The
        answer then depends on the output's kind (:func:`_shape_kind`, the rule's own op sets): None
        for ``_NOTHING``, the node's declared ``shape`` attr for ``_DECLARED`` (variables and
        placeholders: ``tensorflow/core/ops/state_ops.cc``, ``array_ops.cc``), and for
        ``_INPUT`` (a variable's ``read`` Identity) one step of :meth:`_input_shape` over arrays:
        None without a first data input or when that input's output is ``_NOTHING``, the input's
        declared shape when it is a ``VarHandleOp`` or ``_DECLARED``. Every other output (a Const's
        value, ``PlaceholderWithDefault``, a longer chain, an added node) is asked of :meth:`shape`
        itself. ``tests/test_partition_kernels.py`` pins it to :meth:`shape` output by output."""
        import numpy as np

        n, codes, table = self.n, self.op_codes, self._shape_kinds
        ask = -1
        original = origins < n
        kinds = np.full(len(origins), ask, dtype=np.int8)
        kinds[original] = table[codes[origins[original]], (slots[original] == 0).astype(np.intp)]
        through = np.flatnonzero(kinds == _INPUT)
        src, sslot = self._first_inputs(origins[through])
        has = src >= 0
        src_code = codes[np.where(has, src, 0)]
        src_kind = np.where(has, table[src_code, (sslot == 0).astype(np.intp)], _NOTHING)
        handle = self.op_index.get("VarHandleOp", -1)
        declared_in = has & ((src_code == handle) | (src_kind == _DECLARED))
        kinds[through[has & ~declared_in & (src_kind != _NOTHING)]] = ask
        kinds[through[~has | (src_kind == _NOTHING)]] = _NOTHING
        own = np.flatnonzero(kinds == _DECLARED)
        reads = [(own, origins[own]), (through[declared_in], src[declared_in])]
        asked = np.flatnonzero((kinds == ask) | (kinds == _VALUE) | (kinds == _DECLARED_OR_INPUT))
        # One batch of attrs: the declared ones read here, and the nodes the asked outputs read.
        attr_ops = self._shape_attr_codes
        first = src[np.isin(src_code, attr_ops) & has]
        asked_own = origins[asked][origins[asked] < n]
        self._shape_attrs.prefetch(np.concatenate([origins[own], src[declared_in], asked_own, first]).tolist())
        out: list[Shape] = [None] * len(origins)
        for at, nodes in reads:
            for k, declared in zip(at.tolist(), self._shape_attrs.declared(nodes.tolist()), strict=True):
                out[k] = declared
        shape = self.shape
        for k, o, s in zip(asked.tolist(), origins[asked].tolist(), slots[asked].tolist(), strict=True):
            out[k] = shape(o, s)
        return out

    @cached_property
    def _shape_attr_codes(self) -> I32Array:
        """The op codes of :data:`_ATTR_SHAPE_OPS` (the ops whose own attrs :meth:`shape` reads)."""
        return self.codes_of(_ATTR_SHAPE_OPS)

    def _first_inputs(self, nodes: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The first data input that :meth:`_input_shape` reads of each of the original ``nodes``,
        over arrays: its source and slot in the graph's own edges, (-1, -1) where the node has no
        input or its first is a control input."""
        import numpy as np

        in_src = np.frombuffer(self.graph.in_src, dtype=np.int32)
        in_slot = np.frombuffer(self.graph.in_slot, dtype=np.int32)
        lo = self.in_start_np[nodes].astype(np.int64)
        has = lo < self.in_start_np[nodes + 1]
        at = np.where(has, lo, 0)
        slot = np.where(has, in_slot[at] if len(in_slot) else -1, CONTROL).astype(np.int64)
        has &= slot != CONTROL
        src = np.where(has, in_src[at] if len(in_src) else -1, -1).astype(np.int64)
        return src, np.where(has, slot, -1)

    def _need_same_device(self, p: int) -> bool:
        s, d = int(self.e_src[p]), int(self.e_dst[p])
        slot = int(self.e_slot[p])
        return self.out_host(s, slot) != self.in_host(d, p - self.in_start[d], self.out_type(s, slot))

    def _all_inputs(self, dst: int) -> list[tuple[int, int, int]]:
        if dst < self.n:
            lo, hi = self.in_start[dst], self.in_start[dst + 1]
            return list(zip(range(lo, hi), self.e_src[lo:hi].tolist(), self.e_slot[lo:hi].tolist(), strict=True))
        return [(j, s, sl) for j, (s, sl) in enumerate(self.added[dst - self.n].inputs)]

    def _cut_dst(self, dst: int, items: list[tuple[int, int, int, int]], write: Write) -> None:
        """TF's loop over the incoming edges of ``dst`` that cross partitions (or memory types).

        ``items``: (ref, source, slot, input index) of each cut edge; ``write(ref, source, slot)``
        rewires the input ``ref`` (an edge position, or an added node's input index).
        """
        level = self.level
        part = self.part
        devs = self.devs
        n = self.n
        dst_dev = self.dev(dst)
        dpart = part[dst_dev]
        dst_name = self.name(dst)
        dst_is_cpu = devs.is_cpu[dst_dev]
        out_type = self.out_type
        types = [out_type(s, sl) if sl != CONTROL else 0 for _r, s, sl, _i in items]
        if max(types) > REF_OFFSET:  # a ref edge: TF looks at all inputs of dst
            cut = {it[0]: t for it, t in zip(items, types, strict=True)}
            base = self.in_start[dst] if dst < n else 0
            entries = []
            for r, s, sl in self._all_inputs(dst):
                t = cut.get(r)
                if t is None:
                    entries.append((r, s, sl, r - base, False, out_type(s, sl) if sl != CONTROL else 0))
                else:
                    entries.append((r, s, sl, r - base, True, t))
        else:
            entries = [(r, s, sl, idx, True, t) for (r, s, sl, idx), t in zip(items, types, strict=True)]
        ref_recvs: list[int] = []
        ref_ctrl: list[int] = []
        cloop = self.cloop_ctrl.get(dst)
        # placeviz's edge numbering (``tensor_name``, opaque: module docstring). A transfer into an
        # original node outside level 1 is named by its edge's position ``r``; the counter moves for
        # the others, and for every transfer of a group that is not plain (a non-CPU destination, a
        # control loop gating it, a ref-typed source), as it always has: a plain group into an
        # original node at level 0 or 2 leaves it alone (the names stay byte-identical).
        by_position = dst < n and level != 1
        plain = by_position and dst_is_cpu and cloop is None and max(types) <= REF_OFFSET
        task = devs.task[dst_dev]
        major = self.major(dst)
        dup = self.dup
        add = self._add
        new_name = self.new_name
        added = self.added
        for r, src, slot, idx, is_cut, src_type in entries:
            data = slot != CONTROL
            if not is_cut:
                if src_type <= REF_OFFSET:
                    ref_ctrl.append(src)
                continue
            if data:
                dtype = src_type - REF_OFFSET if src_type > REF_OFFSET else src_type
                if not dtype:
                    dtype = self.in_type(dst, idx) or DT_FLOAT
                host_recv = self.in_host(dst, idx, dtype)
                key = (src, slot, dpart, dst_is_cpu or host_recv)
            else:
                key = (src, slot, dpart, dst_is_cpu)
            hit = dup.get(key)
            if hit is not None:
                write(r, hit, slot if not data else 0)
                ref_ctrl.append(hit)
                continue
            src_dev = self.dev(src)
            src_name = self.name(src)
            if src < n:
                origin, oslot = src, slot
            else:
                a = added[src - n]
                origin, oslot = (src, slot) if a.origin < 0 else (a.origin, CONTROL if not data else a.oslot)
            if not plain:
                self.edge_id += 1
            tname = f"edge_{r if by_position else self.edge_id}_{src_name}"
            if data:
                send_from = [src, slot]
                host_send = self.out_host(src, slot)
            else:
                dtype = DT_FLOAT
                const = add(new_name(level, src_name + "/ctrl", task), "Const", src_dev, [[src, CONTROL]],
                            "ctrl_const", origin, CONTROL, DT_FLOAT, major)
                send_from = [const, 0]
                host_send = host_recv = False
            meta = (tname, src_dev, dst_dev, src_name, dst_name, False)
            send_op = "_HostSend" if host_send else "_Send"
            send_name = new_name(level, src_name, task)
            send = add(send_name, send_op, src_dev, [send_from], KIND_SEND, origin, oslot, dtype, major, meta)
            recv_op = "_HostRecv" if host_recv else "_Recv"
            recv_name = new_name(level, src_name, task)
            recv = add(recv_name, recv_op, dst_dev, [], KIND_RECV, origin, oslot, dtype, major, meta)
            rnode = added[-1]
            out = recv
            if not data:
                out = add(new_name(level, src_name, task), "Identity", dst_dev, [[recv, 0]], "ctrl_identity",
                          origin, CONTROL, DT_FLOAT, major)
            if part[src_dev] == dpart:
                rnode.inputs.append([send, CONTROL])
            elif cloop is not None and cloop[1] > 0:
                cloop[1] -= 1
                rnode.inputs.append([cloop[0], CONTROL])
            if src_type > REF_OFFSET:
                ref_recvs.append(recv)
            else:
                dup[key] = out
                ref_ctrl.append(out)
            write(r, out, slot if not data else 0)
            self._transfer(origin, oslot, src_dev, dst_dev, dtype, send_name, recv_name, send_op, recv_op, tname,
                           dst_name)
        for recv in ref_recvs:
            added[recv - n].inputs.extend([x, CONTROL] for x in ref_ctrl)
            self.recheck.append(recv)

    def _transfer(self, origin: int, oslot: int, src_dev: int, dst_dev: int, dtype: int, send: str,
                  recv: str, send_op: str, recv_op: str, tname: str, dst_name: str) -> None:
        """Append the transfer's row to :attr:`transfers` (:class:`~placeviz.partition.transfers.
        TransferTable`): its shape and bytes per step, named as the records name them."""
        control = oslot == CONTROL
        if control:
            shape: Shape = [0]
            nbytes: int | None = 0
        else:
            shape = self.shape(origin, oslot)
            size = dtype_size(dtype)
            nbytes = None
            if shape is not None and size is not None and None not in shape:
                nbytes = size
                for d in cast("list[int]", shape):  # no None: tested above
                    nbytes *= d
                if nbytes > MAX_TENSOR_BYTES:
                    nbytes = None  # an overflow: counted as unknown (placeviz.limits)
        dname = _DTYPE_NAMES.get(dtype)
        if dname is None:
            dname = _DTYPE_NAMES[dtype] = dtype_name(dtype)
        self.transfers.append(origin, self.names[origin] if origin < self.n else self.added[origin - self.n].name,
                              CONTROL_SLOT if control else oslot, src_dev, dst_dev, dname, shape, nbytes, send, recv,
                              send_op, recv_op, tname, dst_name)

    # ---------------------------------------------------------------------------- shapes
    @cached_property
    def _shape_attrs(self) -> ShapeAttrReader:
        """The attrs :meth:`shape` reads, per original node, read once (:mod:`~placeviz.partition.shapes`)."""
        return ShapeAttrReader(self.graph)

    def _prefetch_shape_attrs(self, nodes: npt.NDArray[np.int64]) -> None:
        """Read in one batch the attrs :meth:`shape` may read for outputs of the original ``nodes`` in
        a graph with ``_output_shapes``: theirs and those of each one's first input's source (where
        it looks through a pass-through op, :meth:`_input_shape`), so that the rule asks for few
        nodes one by one. A hint: it changes no answer, and the rule alone decides which attrs
        count."""
        import numpy as np

        nodes = nodes[nodes < self.n]
        src, _slot = self._first_inputs(nodes)
        self._shape_attrs.prefetch(np.concatenate([nodes, src[src >= 0]]).tolist())

    def shape(self, i: int, slot: int, depth: int = 0) -> Shape:
        """Static shape of output ``slot`` of node ``i`` (list, None for unknown dims) or None."""
        if i >= self.n:
            a = self.added[i - self.n]
            return self.shape(a.origin, a.oslot, depth) if a.origin >= 0 else None
        key = (i, slot)
        if key in self._shapes:
            return self._shapes[key]
        result: Shape = None
        op = self.ops[i]
        # The attrs are read only for the ops that need them (a node's first read costs the most).
        attrs = self._shape_attrs
        if self.output_shapes:
            outs = attrs[i].output_shapes
            if outs is not None and slot < len(outs):
                result = outs[slot]
        kind = _shape_kind(op, slot == 0)
        if (result is None or None in result) and depth < 32 and kind != _NOTHING:
            if kind == _VALUE:
                value = attrs[i].value
                if value is not ABSENT:
                    result = value
            elif kind == _INPUT:  # a pass-through op (ReadVariableOp and an Apply*'s first output among them)
                result = _known_first(self._input_shape(i, depth), result)
            else:
                declared = attrs[i].shape
                if declared is not ABSENT:
                    result = declared
                if kind == _DECLARED_OR_INPUT and (result is None or None in result):
                    result = _known_first(self._input_shape(i, depth), result)
        self._shapes[key] = result
        return result

    def _input_shape(self, i: int, depth: int) -> Shape:
        lo = self.in_start[i]
        if lo >= self.in_start[i + 1] or self.graph.in_slot[lo] == CONTROL:
            return None
        src = self.graph.in_src[lo]
        if self.ops[src] == "VarHandleOp":
            return self._shape_attrs.declared([src])[0]
        return self.shape(src, self.graph.in_slot[lo], depth + 1)
