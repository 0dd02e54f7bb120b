"""The partitioner's shared state: interned devices, added nodes, node access, op-type sets.

No TF file of its own: what every step of the partitioner (:mod:`placeviz.partition`) reads and
writes. TF keeps the same facts on its ``Graph`` and ``Node`` objects (``tensorflow/core/graph/
graph.h``: a node's assigned device, its op, its in-edges); placeviz keeps them as int arrays over
:class:`~placeviz.graph.Graph`'s node ids, with the nodes the partitioner adds (sends, receives,
control Consts and Identities, client nodes, replicated Consts, control loops) as :class:`_New`
records numbered after the graph's own nodes (id ``n + k`` for the ``k``-th added node).

Each step is a mixin of :class:`_PartitionerBase`, in the module named after the TF file it
mirrors; imports go one way, from :mod:`placeviz.partition.session` down to this module.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from placeviz.devices import address_space, parse_full_name
from placeviz.errors import PlacevizError
from placeviz.graph import Graph, NodeDefs
from placeviz.native import kernels
from placeviz.op_kinds import SWITCH_OPS
from placeviz.partition.transfers import TransferTable

if TYPE_CHECKING:  # numpy is imported on first use (not at start-up): its types for the checker only
    import numpy as np
    import numpy.typing as npt

    from placeviz.ops import OpTable

    I32Array = npt.NDArray[np.int32]
    I64Array = npt.NDArray[np.int64]
    BoolArray = npt.NDArray[np.bool_]

# A transfer's ``_New.meta``: (tensor_name, send device, recv device, _src, _dst, client_terminated).
TransferMeta = tuple[str, int, int, str | None, str | None, bool]
# Any other added node's ``_New.meta``: attr name -> (AttrValue field, value), e.g. ("i", 2).
AttrMeta = dict[str, tuple[str, str | int | bool]]
IoTypes = tuple[tuple[int, ...], tuple[int, ...]]  # (input dtypes, output dtypes) of a node
Shape = list[int | None] | None  # a static shape (None: unknown dim), None: unknown rank
# A JSON object of the result (a transfer, a moved node, a control loop: ``index.json``): values
# of several types, each read by its key where it is known.
JsonDict = dict[str, Any]  # Any: one value type per key (see the keys at each writer)

_kernels = kernels("_partition_kernels")  # index codes and int attrs in C (see placeviz.native)

DT_FLOAT, DT_INT32, DT_STRING, DT_BOOL = 1, 3, 7, 10
CONST_OPS = frozenset({"Const", "HostConst"})
# Added nodes that always sit on the device of their inputs (never cut by a later level).
_SAME_DEVICE_KINDS = frozenset({"send", "recv", "ctrl_const", "ctrl_identity", "feed_recv"})


class PartitionError(PlacevizError):
    """The placed graph cannot be partitioned as TF would (TF's own error, one line)."""


# --------------------------------------------------------------------------------------- devices
class _Devices:
    """Device names interned as ints, with their task, type and the CPU:0 of their task."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.task: list[int] = []
        self.is_cpu: list[bool] = []
        self.type: list[str] = []
        self.task_names: list[str] = []
        self.task_index: dict[str, int] = {}
        self._target_cpu: dict[int, int] = {}

    def intern(self, name: str) -> int:
        """Index of a full device name; -1 if it is not a complete device (job..type:id)."""
        k = self.index.get(name)
        if k is not None:
            return k
        parsed = parse_full_name(name) if name else None
        if parsed is None or parsed.type is None or None in (parsed.job, parsed.replica, parsed.task, parsed.id):
            return -1
        task = address_space(parsed).to_string()  # /job:J/replica:R/task:T, as task_of(replica=True)
        t = self.task_index.get(task)
        if t is None:
            t = self.task_index[task] = len(self.task_names)
            self.task_names.append(task)
        k = self.index[name] = len(self.names)
        self.names.append(name)
        self.task.append(t)
        self.type.append(parsed.type)
        self.is_cpu.append(parsed.type == "CPU")
        return k

    def target_cpu(self, k: int) -> int:
        """ReplicateConstantsPass's target for a consumer on device ``k`` (aggressive mode)."""
        t = self._target_cpu.get(k)
        if t is None:
            if self.is_cpu[k]:
                t = k
            else:
                t = self.intern(self.task_names[self.task[k]] + "/device:CPU:0")
            self._target_cpu[k] = t
        return t


# ----------------------------------------------------------------------------------- added nodes
class _New:
    """A node the partitioner adds (send, recv, control Const/Identity, client node, copy, cloop)."""

    __slots__ = ("name", "op", "dev", "inputs", "kind", "origin", "oslot", "dtype", "major", "minor", "meta",
                 "frame", "copy_of")

    def __init__(self, name: str, op: str, dev: int, inputs: list[list[int]], kind: str, origin: int, oslot: int,
                 dtype: int, major: int, minor: int, meta: TransferMeta | AttrMeta | None = None) -> None:
        self.name = name
        self.op = op
        self.dev = dev
        self.inputs = inputs  # [[src id, slot]], slot CONTROL for ^src
        self.kind = kind
        self.origin = origin  # the original node this one stands for (-1: none)
        self.oslot = oslot  # its output (CONTROL for a control transfer)
        self.dtype = dtype  # output dtype (0 if none)
        self.major = major  # position in GraphDef order: (major, minor)
        self.minor = minor
        self.meta = meta  # send/recv: (tensor_name, send dev, recv dev, _src, _dst, client); else attrs
        self.frame = ""  # while-loop frame (cloop nodes)
        self.copy_of = -1  # replicated Const: the original


# What ``_New.__init__`` stores: its arguments in order, then the slots it sets to constants. The
# C kernel makes ``_New`` objects by setting these slots directly (keep in step with __init__; the
# kernel tests compare every field of every added node with the Python path's).
_NEW_ARGS = ("name", "op", "dev", "inputs", "kind", "origin", "oslot", "dtype", "major", "minor", "meta")
_NEW_CONSTANTS = (("frame", ""), ("copy_of", -1))


def _codes(items: Sequence[str], mapping: dict[str, int]) -> I32Array:
    """int32 array of ``mapping[x]`` for each ``x`` of ``items`` (writable), by the C kernel when
    it is built and takes them."""
    import numpy as np

    buf = _kernels.index_codes(items, mapping) if _kernels is not None else None
    if buf is not None:
        return np.frombuffer(buf, dtype=np.int32)
    return np.fromiter(map(mapping.__getitem__, items), dtype=np.int32, count=len(items))


# ------------------------------------------------------------------------------------ the state
class _PartitionerBase:
    """The state of one partition run and its node access; each step is a mixin of this class
    (:class:`placeviz.partition.session._Partitioner` puts them together)."""

    # Set by prepare (placeviz.partition.subgraph), read by every later step.
    keep_np: BoolArray  # the nodes the run executes
    in_start_np: I32Array
    in_start: array[int]  # Graph.in_start: node i's inputs are edges in_start[i]:in_start[i + 1]
    e_src: I32Array  # per edge (the graph's in-edges, then rewired): source node, its slot, destination
    e_slot: I32Array
    e_dst: I32Array
    num_edges: int
    op_index: dict[str, int]
    op_codes: I32Array
    rank: I64Array  # client order of each original node
    identity_order: bool
    dev_np: I32Array  # device of each original node (interned: _Devices)
    dev_l: list[int]
    kept_edge: BoolArray
    client_device: str
    client_dev: int
    edge_id: int  # set by each split (placeviz.partition.graph_partition)

    def __init__(self, graph: Graph, devices: list[str], table: OpTable, session: str,
                 incarnation: Callable[[str], int]) -> None:
        self.graph = graph
        self.table = table
        self.session = session
        self.incarnation = incarnation
        self.n = len(graph)
        self.names: list[str] = graph.names
        self.ops: list[str] = graph.ops
        # NodeDefs to read attrs from (name, op and attrs are current; a derived graph's device and
        # inputs may be stale). Not ``graph.graph_def``: for the setter's result that would build
        # a copy of the whole GraphDef (0.3 s and 1 GB at 1M nodes) only to read attrs.
        self.nodes_pb: NodeDefs = graph.attr_nodes
        # XLA/TPU rewrites pin args to host memory with these attrs; user GraphDefs lack them.
        self.hostmem_attrs = any("_input_hostmem" in self.nodes_pb[i].attr or "_output_hostmem" in
                                 self.nodes_pb[i].attr for i in range(min(16, self.n)))
        # Graphs exported with shapes carry ``_output_shapes`` on every node; probe a few.
        self.output_shapes = any("_output_shapes" in self.nodes_pb[i].attr for i in range(min(16, self.n)))
        self.in_devices = devices
        self.devs = _Devices()
        self.added: list[_New] = []
        self.transfers = TransferTable(self.devs.names, self.devs.task)
        self.replicated: dict[str, list[str]] = {}
        self.moved: dict[str, dict[str, str]] = {}
        self.control_loops: list[JsonDict] = []
        self.cloop_ctrl: dict[int, list[int]] = {}  # dst -> [merge id, remaining count]
        self._types: dict[int, IoTypes | None] = {}
        self._shapes: dict[tuple[int, int], Shape] = {}
        self._inc: dict[int, int] = {}
        self._seq = 0
        self._counter_s = 0
        self._counter_g: dict[int, int] = {}
        self.recheck: list[int] = []  # added nodes whose inputs may cross partitions
        self.level = 0
        self.part: list[int] = []
        self.dup: dict[tuple[int, int, int, bool], int] = {}  # TF's DupRecvKey -> the shared receive

    # ---------------------------------------------------------------------------- node access
    def name(self, i: int) -> str:
        return self.names[i] if i < self.n else self.added[i - self.n].name

    def op(self, i: int) -> str:
        return self.ops[i] if i < self.n else self.added[i - self.n].op

    def dev(self, i: int) -> int:
        return self.dev_l[i] if i < self.n else self.added[i - self.n].dev

    def major(self, i: int) -> int:
        return int(self.rank[i]) if i < self.n else self.added[i - self.n].major

    def types(self, i: int) -> IoTypes | None:
        """(input types, output types) of an original node, None if the op is unknown."""
        if i in self._types:
            return self._types[i]
        try:
            res = self.table.io_types(self.nodes_pb[i])
        except PlacevizError:
            res = None
        self._types[i] = res
        return res

    def out_type(self, i: int, slot: int) -> int:
        if i >= self.n:
            return self.added[i - self.n].dtype
        io = self.types(i)
        if io is None or slot >= len(io[1]):
            return 0
        return io[1][slot]

    def in_type(self, i: int, idx: int) -> int:
        if i >= self.n:
            a = self.added[i - self.n]
            if a.op in SWITCH_OPS and idx == 1:
                return DT_BOOL
            return a.dtype
        io = self.types(i)
        if io is None or idx >= len(io[0]):
            return 0
        return io[0][idx]

    # ---------------------------------------------------------------------------- new nodes
    def _add(self, name: str, op: str, dev: int, inputs: list[list[int]], kind: str, origin: int, oslot: int,
             dtype: int, major: int, meta: TransferMeta | AttrMeta | None = None) -> int:
        self._seq += 1
        self.added.append(_New(name, op, dev, inputs, kind, origin, oslot, dtype, major, self._seq, meta))
        i = self.n + len(self.added) - 1
        if kind not in _SAME_DEVICE_KINDS:
            self.recheck.append(i)
        return i

    def new_name(self, level: int, prefix: str, task: int = 0) -> str:
        if level == 1:
            c = self._counter_g.get(task, 0)
            self._counter_g[task] = c + 1
            return f"{prefix}_G{c}"
        c = self._counter_s
        self._counter_s = c + 1
        return f"{prefix}/_{c}" if level == 2 else f"{prefix}_S{c}"

    def incarnation_of(self, dev: int) -> int:
        inc = self._inc.get(dev)
        if inc is None:
            inc = self._inc[dev] = int(self.incarnation(self.devs.names[dev]))
        return inc

    def codes_of(self, ops: Iterable[str]) -> I32Array:
        import numpy as np

        return np.asarray([self.op_index[op] for op in ops if op in self.op_index], dtype=np.int32)

    def nodes_with_op(self, ops: Iterable[str], kept_only: bool = True) -> list[int]:
        """Node ids whose op is one of ``ops``, in client order."""
        import numpy as np

        codes = self.codes_of(ops)
        if not len(codes):
            return []
        mask = np.isin(self.op_codes, codes)
        if kept_only:
            mask &= self.keep_np
        ids = np.nonzero(mask)[0]
        if not self.identity_order:
            ids = ids[np.argsort(self.rank[ids], kind="stable")]
        out: list[int] = ids.tolist()
        return out

    def _dev_all(self) -> I32Array:
        """The device of every node, original and added."""
        import numpy as np

        if not self.added:
            return self.dev_np
        added_devs = _kernels.attr_ints(self.added, "dev") if _kernels is not None else None
        if added_devs is not None:
            return np.concatenate([self.dev_np, np.frombuffer(added_devs, dtype=np.int32)])
        return np.concatenate([self.dev_np, np.fromiter((a.dev for a in self.added), dtype=np.int32,
                                                         count=len(self.added))])
