"""Per-device partitions with ``_Send``/``_Recv``: TF's graph partitioning, on a placed graph.

:func:`partition` takes a :class:`~placeviz.graph.Graph` and the full runtime device of every node
(what :func:`placeviz.placement.place_graph` returns) and does, for one run signature (fetches,
targets, feeds), what a distributed TF session does before executing it (``docs/tf-behaviours.md``, "Pruning and
partitioning"):

1. **Prune** (:mod:`placeviz.prune`): keep what the fetches and targets reach; fed tensors are read
   from client ``_Recv`` nodes ``_recv_<node>_<slot>`` and fetches are sent by client ``_Send``
   nodes ``_send_<node>_<slot>``, both on the client device (the master task's CPU:0) with
   ``client_terminated=True`` (``subgraph.cc``).
2. **Replicate small constants** (``replicate_constants_pass.cc``, TF >= 2.13, on by default): a
   CPU ``Const`` of at most 16 elements, with more than one out-edge and no control out-edge, whose
   consumers sit on more than one target CPU (the consumer's CPU, else CPU:0 of its task), is
   replaced by one copy ``<const>/replicate/_<n>`` per target CPU (in device-name order).
3. **Control flow** (``graph_partition.cc`` ``AddControlFlow``): ``Switch`` moves to the device of
   its data input, ``Exit`` to its input's, non-ref ``Enter`` and ``NextIteration`` to their first
   data consumer's. A while-loop frame with a cross-device edge gets, on the destination device, a
   control loop ``_cloop*`` (``Enter``/``Merge``/``Switch``/``NextIteration`` fed by the frame's
   ``LoopCond``) whose ``Merge`` gates the receives of that frame, exactly as TF builds it; nested
   frames stack their control loops.
4. **Partition** (``graph_partition.cc`` ``Partition``), the way the distributed runtime does it, in
   two levels: the master splits the graph by **task** (added nodes named ``<src>_S<n>``), then
   every worker splits its task graph by **device** (``<src>_G<n>``, one counter per task). A
   cross-partition data edge ``src:k -> dst`` becomes ``_Send`` on src's device and ``_Recv`` on
   dst's device (``_HostSend``/``_HostRecv`` when the source output / destination input lives in
   host memory, from the kernels' ``HostMemory`` args and host-only dtypes). Receives are shared
   per (source node, output, destination partition, destination-input-on-host), so a tensor
   crosses the network once per destination task and is then relayed inside the task; ref-typed
   edges are never shared, and their receives wait for the destination's other inputs. A
   cross-partition control edge becomes a dummy ``Const <src>/ctrl`` (input ``^src``) and
   ``_Send`` on the source side, ``_Recv`` and ``Identity`` on the destination side, one per
   (source, destination partition).

``level="task"`` stops after the first level (one GraphDef per task). ``session="direct"``
partitions once by device with DirectSession's ``<prefix>/_<n>`` names (graph_partition_test.cc's
setting). Names of added nodes are deterministic: the counters start at 0 for each call (TF's keep
growing across runs of a session), and ``tensor_name`` is ``edge_<k>_<src>`` with placeviz's own
edge numbering (TF's edge ids are not stable either); treat both as opaque.

GraphDefs (:attr:`PartitionResult.partitions`) import into ``tf.compat.v1.import_graph_def``:
TF's internal names with a leading ``_`` (``_recv_x_0``, ``_cloop...``), which the importer
reserves for the runtime, become ``._recv_x_0``, and ``_class`` entries naming nodes of other
partitions are dropped. :meth:`PartitionResult.graph_defs` with ``importable=False`` gives TF's
names and attrs unchanged.

Fidelity (tests/test_partition_fidelity.py): with Grappler off and the classic optimizer at L0, the
runtime's ``RunMetadata.partition_graphs`` hold exactly the same original nodes per device and the
same transfers, as multisets of (source node, slot or control, source and destination device,
send/recv op), for every sample model, while loops spanning three devices and moved control-flow
nodes included. Where TF's own choice is arbitrary (hash-set order of out-edges) placeviz takes the
first in graph order: the device of an ``Enter``/``NextIteration`` whose consumers sit on several
devices, the processing order inside a worker (only names and ``_dst`` depend on it).

Not modelled: functional control flow and function calls (``While``, ``If``,
``StatefulPartitionedCall``...), which TF lowers or inlines into their bodies' nodes before placing
(:attr:`PartitionResult.notes` says when a run has them); recv scheduling (``_start_time``,
off by default); bfloat16 send/recv casts (``enable_bfloat16_sendrecv``, off by default); the
per-partition classic optimizer at L1, TF's default (constant folding and CSE remove nodes, and a
send may then read a merged twin). Memory types on GPU come from the op table, which the CPU wheel fills for CPU kernels
only: on other device types int32 counts as host memory (TF's rule for kernels it cannot find).

Speed: everything runs on the Graph's int arrays (vectorised with numpy where it pays); per-edge
work happens only for edges that cross partitions. That loop (:meth:`_Partitioner._split_originals`
through :meth:`_Partitioner._cut_dst`, the specification) runs as one whole C function when
``placeviz._partition_kernels`` is built: it returns the level's whole result or declines before
doing anything, and the Python runs from the start (``_kernels = None`` runs the Python code,
``docs/architecture.md`` section 3). NodeDefs are built only when :attr:`PartitionResult.partitions` is read (or
``materialize=True``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, repeat
from operator import attrgetter
from typing import Any

from placeviz import nodewire
from placeviz.devices import parse_full_name
from placeviz.errors import PlacevizError
from placeviz.graph import BACK_EDGE_SOURCE_OPS, CONTROL, Graph
from placeviz.limits import MAX_TENSOR_BYTES
from placeviz.native import kernels
from placeviz.nodewire import encode_field, encode_varint, splice_nodes
from placeviz.op_kinds import PLACEHOLDER_OPS
from placeviz.protos import GraphDef, NodeDef, dtype_name, dtype_size
from placeviz.prune import PruneError, RunSignature, parse_run, prune_mask

_kernels = kernels("_partition_kernels")  # the cut-edge loop as one C function (see placeviz.native)

SCHEMA = "placeviz.partition/1"

DT_FLOAT, DT_INT32, DT_STRING, DT_BOOL, DT_RESOURCE = 1, 3, 7, 10, 20
REF_OFFSET = 100
_ALWAYS_ON_HOST = frozenset({DT_STRING, DT_STRING + REF_OFFSET, DT_RESOURCE})
_FUNCTION_CALL_OPS = frozenset({"SymbolicGradient", "PartitionedCall", "StatefulPartitionedCall",
                                "While", "StatelessWhile", "If", "StatelessIf", "Case"})
CONST_OPS = frozenset({"Const", "HostConst"})
SWITCH_OPS = frozenset({"Switch", "RefSwitch", "_SwitchN"})
MERGE_OPS = frozenset({"Merge", "RefMerge", "_XlaMerge"})
ENTER_OPS = frozenset({"Enter", "RefEnter"})
EXIT_OPS = frozenset({"Exit", "RefExit"})
NEXT_OPS = frozenset(BACK_EDGE_SOURCE_OPS)
LOOP_COND_OPS = frozenset({"LoopCond"})
_MOVED_CF_OPS = SWITCH_OPS | EXIT_OPS | ENTER_OPS | NEXT_OPS
# Ops TF's runtime rewrites before placement (LowerFunctionalOpsPass, function inlining): the
# partition graphs then hold their bodies' nodes, which a static partition of the GraphDef cannot.
LOWERED_OPS = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase",
                         "PartitionedCall", "StatefulPartitionedCall", "SymbolicGradient"})
REPLICATE_MAX_ELEMENTS = 16
_DTYPE_NAMES: dict[int, str] = {}  # ReplicateConstantsPass kMaxSize

LEVELS = ("device", "task")
# Added nodes that always sit on the device of their inputs (never cut by a later level).
_SAME_DEVICE_KINDS = frozenset({"send", "recv", "ctrl_const", "ctrl_identity", "feed_recv"})
SESSIONS = ("master", "direct")
KIND_SEND, KIND_RECV = "send", "recv"


class PartitionError(PlacevizError):
    """The placed graph cannot be partitioned as TF would (TF's own error, one line)."""


# --------------------------------------------------------------------------------------- devices
class _Devices:
    """Device names interned as ints, with their task, type and the CPU:0 of their task."""

    def __init__(self):
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
        if parsed is None or None in (parsed.job, parsed.replica, parsed.task, parsed.type, parsed.id):
            return -1
        task = f"/job:{parsed.job}/replica:{parsed.replica}/task:{parsed.task}"
        t = self.task_index.get(task)
        if t is None:
            t = self.task_index[task] = len(self.task_names)
            self.task_names.append(task)
        k = self.index[name] = len(self.names)
        self.names.append(name)
        self.task.append(t)
        self.type.append(parsed.type)  # type: ignore[arg-type]  # not None: checked above
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

    def __init__(self, name, op, dev, inputs, kind, origin, oslot, dtype, major, minor, meta=None):
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


def _codes(items: list, mapping: dict):
    """int32 array of ``mapping[x]`` for each ``x`` of ``items`` (writable), by the C kernel when
    it is built and takes them."""
    import numpy as np

    buf = _kernels.index_codes(items, mapping) if _kernels is not None else None
    if buf is not None:
        return np.frombuffer(buf, dtype=np.int32)
    return np.fromiter(map(mapping.__getitem__, items), dtype=np.int32, count=len(items))


def _host_positions(args, facts, nd, hms: set[str], total: int) -> list[bool]:
    """Per expanded position of ``args``: whether its arg is one of the kernel's HostMemory args."""
    out: list[bool] = []
    attr = nd.attr
    for a in args:
        if a.type_list_attr:
            av = attr.get(a.type_list_attr)
            if av is not None:
                count = len(av.list.type)
            else:
                spec = facts.attrs.get(a.type_list_attr)
                count = len(spec.default or ()) if spec is not None else 0
        elif a.number_attr:
            av = attr.get(a.number_attr)
            if av is not None:
                count = av.i
            else:
                spec = facts.attrs.get(a.number_attr)
                count = int(spec.default) if spec is not None and spec.default is not None else 1
        else:
            count = 1
        out.extend([a.name in hms] * count)
    if len(out) < total:
        out.extend([False] * (total - len(out)))
    return out[:total]


def _known_first(shape, fallback):
    """``shape`` when it is known (a scalar's ``[]`` included), else ``fallback``."""
    return shape if shape is not None else fallback


def _shape_list(shape_proto) -> list[int | None] | None:
    if shape_proto.unknown_rank:
        return None
    return [d.size if d.size >= 0 else None for d in shape_proto.dim]


def _attr_key(av) -> object:
    if av is None:
        return None
    return av.type or av.i or av.SerializeToString()


_PASS_THROUGH_OPS = frozenset({
    "Identity", "RefIdentity", "Snapshot", "StopGradient", "PreventGradient", "Enter", "RefEnter",
    "Exit", "RefExit", "NextIteration", "RefNextIteration", "Switch", "RefSwitch", "Cast",
    "Assign", "AssignAdd", "AssignSub", "ScatterAdd", "ScatterSub", "ScatterUpdate", "CheckNumerics",
    "EnsureShape", "Neg", "Relu", "Sigmoid", "Tanh", "Square", "Sqrt", "Abs", "ZerosLike", "OnesLike",
})
_SHAPE_ATTR_OPS = frozenset({"VariableV2", "Variable", "TemporaryVariable", "Placeholder", "PlaceholderV2",
                             "PlaceholderWithDefault"})


class _OpSpec:
    """What memory types of one op on one device type depend on (precomputed once)."""

    __slots__ = ("attrs", "facts", "host_in", "host_out", "kernel_known", "io_only")

    def __init__(self, table, op: str, device_type: str):
        facts = table.get(op)
        self.facts = facts
        names: set[str] = set()
        for arg in facts.inputs + facts.outputs:
            names.update(a for a in (arg.type_attr, arg.number_attr, arg.type_list_attr) if a)
        kernels = facts.kernels.get(device_type) or facts.kernels.get("DEFAULT") or ()
        self.kernel_known = bool(kernels) and op not in _FUNCTION_CALL_OPS
        host: set[str] = set()
        for kernels_of in (facts.kernels.get(device_type, ()), facts.kernels.get("DEFAULT", ())):
            for k in kernels_of:
                host.update(k.host_memory)
                names.update(k.constraints)
                if k.label:
                    names.add("_kernel")
        self.host_in = bool(host & {a.name for a in facts.inputs})
        self.host_out = bool(host & {a.name for a in facts.outputs})
        self.attrs = tuple(sorted(names))
        # When kernels are chosen by the args' type attrs only, the io types decide memory types.
        type_attrs = {a.type_attr for a in facts.inputs + facts.outputs if a.type_attr} | \
            {a.type_list_attr for a in facts.inputs + facts.outputs if a.type_list_attr}
        self.io_only = all(a in type_attrs for a in names)


# ----------------------------------------------------------------------------------------- result
class PartitionResult:
    """The partitions of one run: node lists, transfers and (lazily) GraphDefs.

    * ``transfers``: one dict per ``_Send``/``_Recv`` pair (see :func:`partition`);
    * ``nodes``: partition key (full device, or task for ``level="task"``) -> names of its nodes,
      original and added, in GraphDef order; ``original_nodes``: the same, the graph's own nodes
      only (both built on first access);
    * ``partitions``: partition key -> GraphDef (built on first access, or at once with
      ``materialize=True``);
    * ``replicated``: Const -> devices of its ``/replicate/`` copies; ``moved``: control-flow
      nodes TF moves before partitioning -> ``{"from", "to"}``; ``control_loops``: the ``_cloop``
      loops added for frames that span devices;
    * ``node_count``: original nodes the run executes; ``fetches``/``targets``/``feeds``: the run;
    * ``notes``: what this partition cannot show (functional control flow and function calls,
      which TF's runtime lowers or inlines into their bodies' nodes before placement).
    """

    def __init__(self, level: str, session: str, client_device: str | None, transfers: list[dict],
                 replicated: dict, moved: dict, control_loops: list[dict], node_count: int,
                 fetches: list[str], targets: list[str], feeds: list[str], builder):
        self.level = level
        self.session = session
        self.client_device = client_device
        self.transfers = transfers
        self.replicated = replicated
        self.moved = moved
        self.control_loops = control_loops
        self.node_count = node_count
        self.fetches = fetches
        self.targets = targets
        self.feeds = feeds
        self.notes: list[str] = []
        self._builder = builder
        self._lists: dict[str, list[int]] | None = None
        self._nodes: dict[str, list[str]] | None = None
        self._originals: dict[str, list[str]] | None = None
        self._partitions: dict[str, GraphDef] | None = None
        self._device_of: dict[str, str] | None = None

    def _node_lists(self) -> dict[str, list[int]]:
        if self._lists is None:
            self._lists = self._builder.node_lists()
        return self._lists

    @property
    def keys(self) -> list[str]:
        """Partition keys, sorted."""
        return list(self._node_lists())

    @property
    def nodes(self) -> dict[str, list[str]]:
        if self._nodes is None:
            self._nodes = {k: self._builder.names_of(ids) for k, ids in self._node_lists().items()}
        return self._nodes

    @property
    def original_nodes(self) -> dict[str, list[str]]:
        if self._originals is None:
            names, n = self._builder.names, self._builder.n
            self._originals = {k: [names[i] for i in ids if i < n] for k, ids in self._node_lists().items()}
        return self._originals

    @property
    def partitions(self) -> dict[str, GraphDef]:
        """Partition key -> GraphDef that ``tf.compat.v1.import_graph_def`` accepts (see
        :meth:`graph_defs`); built on first access."""
        if self._partitions is None:
            self._partitions = self._builder.materialize(self._node_lists())
        return self._partitions

    def graph_defs(self, importable: bool = True) -> dict[str, GraphDef]:
        """The GraphDefs; ``importable=False`` keeps TF's own internal names (a leading ``_``,
        which ``import_graph_def`` refuses, becomes ``._`` otherwise) and every ``_class`` entry."""
        if importable:
            return self.partitions
        return self._builder.materialize(self._node_lists(), importable=False)

    def serialized(self) -> dict[str, bytes]:
        """Partition key -> the serialized GraphDef of :attr:`partitions` (the same message once
        parsed): :meth:`iter_serialized` as a dict."""
        return dict(self.iter_serialized())

    def iter_serialized(self, pieces: bool = False) -> Iterator[tuple[str, Any]]:
        """(partition key, serialized GraphDef of :attr:`partitions`), in key order, one at a
        time: written from the input's bytes where a node only changes device (see
        :mod:`placeviz.nodewire`), what ``placeviz partition`` writes. Deterministic: the bytes
        depend only on the input's bytes and the run. ``pieces``: each GraphDef as an iterator of
        bytes whose concatenation it is (so that a writer never holds a whole partition)."""
        out = self._builder.serialize(self._node_lists()) if self._partitions is None else None
        if out is None:
            out = ((k, iter([gd.SerializeToString(deterministic=True)])) for k, gd in self.partitions.items())
        return out if pieces else ((k, b"".join(chunks)) for k, chunks in out)

    def device_of(self, name: str) -> str | None:
        """The partition a node (original or added) is in, or None if the run does not execute it."""
        if self._device_of is None:
            self._device_of = {n: key for key, names in self.nodes.items() for n in names}
        return self._device_of.get(name)

    def transfers_at(self, level: str) -> list[dict]:
        return [t for t in self.transfers if t["level"] == level]

    def traffic(self) -> list[dict]:
        """Per (src_device, dst_device): transfers, control transfers and bytes per step."""
        out: dict[tuple[str, str], dict] = {}
        for t in self.transfers:
            row = out.get((t["src_device"], t["dst_device"]))
            if row is None:
                row = out[(t["src_device"], t["dst_device"])] = {
                    "src_device": t["src_device"], "dst_device": t["dst_device"], "level": t["level"],
                    "transfers": 0, "control": 0, "bytes": 0, "unknown_bytes": 0}
            row["transfers"] += 1
            if t["slot"] == "control":
                row["control"] += 1
            if t["bytes"] is None:
                row["unknown_bytes"] += 1
            else:
                row["bytes"] += t["bytes"]
        return [out[k] for k in sorted(out)]

    def to_json(self) -> dict:
        """``placeviz.partition/1`` without file names (the CLI writes those)."""
        return {
            "schema": SCHEMA, "level": self.level, "session": self.session,
            "client_device": self.client_device, "fetches": self.fetches, "targets": self.targets,
            "feeds": self.feeds, "node_count": self.node_count,
            "partitions": [{"device": k, "nodes": len(ids), "original_nodes": self._builder.original_count(ids)}
                           for k, ids in self._node_lists().items()],
            "transfers": self.transfers, "replicated": self.replicated, "moved": self.moved,
            "control_loops": self.control_loops, "notes": self.notes,
        }

    def __repr__(self) -> str:
        return (f"<PartitionResult level={self.level} nodes={self.node_count} "
                f"transfers={len(self.transfers)}>")


# ------------------------------------------------------------------------------------ partitioner
def partition(graph: Graph, devices: list[str], *, fetches: Iterable[str] = (), targets: Iterable[str] = (),
              feeds: Iterable[str] = (), level: str = "device", session: str = "master",
              replicate_constants: bool = True, client_device: str | None = None, op_table=None,
              incarnation: Callable[[str], int] | None = None, materialize: bool = False) -> PartitionResult:
    """Partition one run of a placed graph as TF's distributed runtime does (module docstring).

    ``devices``: the full runtime device of every node of ``graph`` (``PlacementResult.placement.
    devices`` for ``PlacementResult.graph``). ``fetches``/``feeds``: tensor names; ``targets``: op
    names; none of the three: the whole graph, without client nodes. ``level``: ``"device"`` (one
    partition per device, after the task split and the per-task device split) or ``"task"``.
    ``session``: ``"master"`` (distributed runtime, two levels, ``_S``/``_G`` names) or
    ``"direct"`` (one split by device, ``/_n`` names, as DirectSession and graph_partition_test).
    ``client_device``: where client feeds/fetches live (default: CPU:0 of ``/job:worker/task:0``,
    else of ``/job:localhost/task:0``, else of the first task). ``incarnation(device)``: the
    ``send_device_incarnation`` attr (default 1, DirectSession's; TF's distributed runtime uses a
    random number per device). ``materialize``: build the GraphDefs now (else on first access of
    :attr:`PartitionResult.partitions`).

    Each transfer dict: ``src`` (original node), ``slot`` (int, or ``"control"``), ``src_device``,
    ``dst_device``, ``dtype`` (e.g. ``float32``), ``shape`` (list, None for unknown dims, or None),
    ``bytes`` per step (None when the shape or dtype size is unknown; 0 for control), ``level``
    (``task``: across tasks, ``device``: inside a task), ``send``/``recv`` (node names),
    ``send_op``/``recv_op``, ``tensor_name``, ``dst`` (the first consumer).

    Raises :class:`~placeviz.prune.PruneError` for unknown names, :class:`PartitionError` for a
    node without a complete device, a node missing inputs, or a cross-device loop without a
    ``LoopCond``.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if session not in SESSIONS:
        raise ValueError(f"session must be one of {SESSIONS}, got {session!r}")
    if session == "direct" and level != "device":
        raise ValueError("session='direct' partitions by device only")
    if len(devices) != len(graph):
        raise ValueError(f"{len(devices)} devices for {len(graph)} nodes")
    if op_table is None:
        from placeviz.ops import load_op_table

        op_table = load_op_table()
    run = parse_run(graph, fetches, targets, feeds)
    was_enabled = gc.isenabled()
    gc.disable()  # many small objects, no cycles: collector passes only cost time
    try:
        p = _Partitioner(graph, devices, op_table, session, incarnation or (lambda _d: 1))
        p.prepare(run, client_device)
        if replicate_constants:
            p.replicate_constants()
        p.control_flow()
        p.check_complete()
        if session == "direct":
            p.split(2)
            final = 2
        else:
            p.split(0)
            if level == "device":
                p.split(1)
            final = 1 if level == "device" else 0
        result = p.result(final, level)
        if materialize:
            _ = result.partitions
    finally:
        if was_enabled:
            gc.enable()
    return result


class _Partitioner:
    def __init__(self, graph: Graph, devices: list[str], table, session: str, incarnation):
        import numpy as np

        self.np: Any = np  # the module (mypyc: an attribute needs a declared type)
        self.graph = graph
        self.table = table
        self.session = session
        self.incarnation = incarnation
        self.n = len(graph)
        self.names = graph.names
        self.ops = graph.ops
        # NodeDefs to read attrs from (name, op and attrs are current; a derived graph's device and
        # inputs may be stale). Not ``graph.graph_def``: for the setter's result that would build
        # a copy of the whole GraphDef (0.3 s and 1 GB at 1M nodes) only to read attrs.
        self.nodes_pb = graph.attr_nodes
        # XLA/TPU rewrites pin args to host memory with these attrs; user GraphDefs lack them.
        self.hostmem_attrs = any("_input_hostmem" in self.nodes_pb[i].attr or "_output_hostmem" in
                                 self.nodes_pb[i].attr for i in range(min(16, self.n)))
        # Graphs exported with shapes carry ``_output_shapes`` on every node; probe a few.
        self.output_shapes = any("_output_shapes" in self.nodes_pb[i].attr for i in range(min(16, self.n)))
        self.in_devices = devices
        self.devs = _Devices()
        self.added: list[_New] = []
        self.transfers: list[dict] = []
        self.replicated: dict[str, list[str]] = {}
        self.moved: dict[str, dict] = {}
        self.control_loops: list[dict] = []
        self.cloop_ctrl: dict[int, list] = {}  # dst -> [merge id, remaining count]
        self._types: dict[int, Any] = {}
        self._specs: dict[tuple[str, str], _OpSpec | None] = {}
        self._mem: dict[tuple, tuple] = {}
        self._node_mem: dict[int, tuple] = {}
        self._shapes: dict[tuple[int, int], Any] = {}
        self._inc: dict[int, int] = {}
        self._seq = 0
        self._counter_s = 0
        self._counter_g: dict[int, int] = {}
        self.recheck: list[int] = []  # added nodes whose inputs may cross partitions
        self.level = 0
        self.part: list[int] = []
        self.dup: dict[tuple, int] = {}

    # ---------------------------------------------------------------------------- node access
    def name(self, i: int) -> str:
        return self.names[i] if i < self.n else self.added[i - self.n].name

    def op(self, i: int) -> str:
        return self.ops[i] if i < self.n else self.added[i - self.n].op

    def dev(self, i: int) -> int:
        return self.dev_l[i] if i < self.n else self.added[i - self.n].dev

    def major(self, i: int) -> int:
        return int(self.rank[i]) if i < self.n else self.added[i - self.n].major

    def types(self, i: int):
        """(input types, output types) of an original node, None if the op is unknown."""
        res = self._types.get(i, False)
        if res is False:
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

    def spec(self, op: str, device_type: str) -> _OpSpec | None:
        key = (op, device_type)
        sp = self._specs.get(key, False)
        if sp is False:
            sp = self._specs[key] = _OpSpec(self.table, op, device_type) if op in self.table else None
        return sp  # type: ignore[return-value]  # False is replaced above

    def _node_mem_types(self, i: int) -> tuple:
        """(input on host?, output on host?) per position of an original node (MemoryTypesForNode)."""
        res = self._node_mem.get(i)
        if res is not None:
            return res
        device_type = self.devs.type[self.dev_l[i]]
        sp = self.spec(self.ops[i], device_type)
        io = self.types(i)
        if sp is None or io is None:
            res = ((), ())
        else:
            in_t, out_t = io
            key: tuple[Any, ...]
            # The NodeDef's attrs only when needed (reading them is most of the cost here).
            if sp.io_only:
                key = (self.ops[i], device_type, in_t, out_t)
            else:
                attr = self.nodes_pb[i].attr
                key = (self.ops[i], device_type, in_t, out_t, *[_attr_key(attr.get(a)) for a in sp.attrs])
            res = self._mem.get(key)
            if res is None:
                res = self._mem[key] = self._compute_mem(self.nodes_pb[i], sp, device_type, in_t, out_t)
            if self.hostmem_attrs and ("_input_hostmem" in (attr := self.nodes_pb[i].attr)
                                       or "_output_hostmem" in attr):
                ins, outs = list(res[0]), list(res[1])
                for name, vec in (("_input_hostmem", ins), ("_output_hostmem", outs)):
                    if name in attr:
                        for k in attr[name].list.i:
                            if 0 <= k < len(vec):
                                vec[k] = True
                res = (tuple(ins), tuple(outs))
        self._node_mem[i] = res
        return res

    def _compute_mem(self, nd, sp: _OpSpec, device_type: str, in_t, out_t) -> tuple:
        hm = None
        if sp.kernel_known:
            try:
                hm = self.table.host_memory_args(nd, device_type)
            except PlacevizError:
                hm = None
        if hm is None:  # no kernel (functions, unknown device kernels): int32 and host types
            return (tuple(t == DT_INT32 or t in _ALWAYS_ON_HOST for t in in_t),
                    tuple(t == DT_INT32 or t in _ALWAYS_ON_HOST for t in out_t))
        hms = set(hm)
        ins = _host_positions(sp.facts.inputs, sp.facts, nd, hms, len(in_t))
        outs = _host_positions(sp.facts.outputs, sp.facts, nd, hms, len(out_t))
        return (tuple(h or t in _ALWAYS_ON_HOST for h, t in zip(ins, in_t, strict=True)),
                tuple(h or t in _ALWAYS_ON_HOST for h, t in zip(outs, out_t, strict=True)))

    def out_host(self, i: int, slot: int) -> bool:
        if i >= self.n:
            a = self.added[i - self.n]
            if a.kind == "replicate":
                return self.out_host(a.copy_of, slot)
            if not self.devs.is_cpu[a.dev] and a.op == "_HostRecv":
                return True
            return a.dtype in _ALWAYS_ON_HOST
        sp = self.spec(self.ops[i], self.devs.type[self.dev_l[i]])
        if sp is not None and not sp.host_out and sp.kernel_known:
            return self.out_type(i, slot) in _ALWAYS_ON_HOST
        outs = self._node_mem_types(i)[1]
        if slot < len(outs):
            return outs[slot]
        return self.out_type(i, slot) in _ALWAYS_ON_HOST

    def in_host(self, i: int, idx: int, dtype: int) -> bool:
        """Whether input ``idx`` of ``i`` is in host memory; ``dtype`` is the edge's type."""
        if i >= self.n:
            a = self.added[i - self.n]
            if a.op in SWITCH_OPS:
                return idx == 1 or dtype in _ALWAYS_ON_HOST
            if not self.devs.is_cpu[a.dev] and a.op == "_HostSend":
                return True
            return dtype in _ALWAYS_ON_HOST
        sp = self.spec(self.ops[i], self.devs.type[self.dev_l[i]])
        if sp is not None and not sp.host_in and sp.kernel_known:
            return dtype in _ALWAYS_ON_HOST
        ins = self._node_mem_types(i)[0]
        return ins[idx] if idx < len(ins) else dtype in _ALWAYS_ON_HOST

    # ---------------------------------------------------------------------------- new nodes
    def _add(self, name: str, op: str, dev: int, inputs: list, kind: str, origin: int, oslot: int,
             dtype: int, major: int, meta=None) -> int:
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

    # ---------------------------------------------------------------------------- prepare
    def prepare(self, run: RunSignature, client_device: str | None) -> None:
        np = self.np
        graph, n = self.graph, self.n
        self.run = run
        keep = prune_mask(graph, run)
        self.keep_np = np.frombuffer(keep, dtype=np.uint8).astype(bool)
        in_start = np.frombuffer(graph.in_start, dtype=np.int32)
        src = np.frombuffer(graph.in_src, dtype=np.int32)
        self.in_start_np = in_start
        self.in_start = graph.in_start
        self.e_src = src.copy()
        self.e_slot = np.frombuffer(graph.in_slot, dtype=np.int32).copy()
        self.e_dst = np.repeat(np.arange(n, dtype=np.int32), np.diff(in_start))
        self.num_edges = len(src)

        # Op types as small ints, for vectorised "which nodes are X" questions.
        op_index = {op: k for k, op in enumerate(sorted(set(graph.ops)))}
        self.op_index = op_index
        self.op_codes = _codes(graph.ops, op_index)

        # Client order (node ids of TF's client graph): GraphDef order if it is topological,
        # else the graph's topological order (what TF's graph constructor gives).
        back = np.nonzero(src >= self.e_dst)[0]
        ops = self.ops
        identity = all(ops[int(src[k])] in BACK_EDGE_SOURCE_OPS for k in back.tolist())
        if identity:
            self.rank = np.arange(n, dtype=np.int64)
        else:
            rank = np.empty(n, dtype=np.int64)
            rank[np.asarray(graph.topological_order, dtype=np.int64)] = np.arange(n, dtype=np.int64)
            self.rank = rank
        self.identity_order = identity

        # Devices of the nodes the run keeps.
        devs = self.devs
        mapping = {d: devs.intern(d) for d in set(self.in_devices)}
        dev_np = _codes(self.in_devices, mapping)
        bad = np.nonzero((dev_np < 0) & self.keep_np)[0]
        if len(bad):
            i = int(bad[0])
            d = self.in_devices[i]
            why = "has no assigned device" if not d else f"has device {d!r}, not a full runtime device name"
            raise PartitionError(f"node {self.names[i]} {why}; place the graph first (placeviz place)")
        self.dev_np = dev_np
        self.dev_l = dev_np.tolist()
        self.kept_edge = self.keep_np[self.e_dst]

        if client_device is None:
            client_device = self._default_client_device()
        self.client_device = client_device
        self.client_dev = -1
        if run.fetches or run.feeds:
            self.client_dev = devs.intern(client_device)
            if self.client_dev < 0:
                raise PartitionError(f"client device {client_device!r} is not a full device name")
        self._client_nodes()

    def codes_of(self, ops: Iterable[str]):
        return self.np.asarray([self.op_index[op] for op in ops if op in self.op_index], dtype=self.np.int32)

    def nodes_with_op(self, ops: Iterable[str], kept_only: bool = True) -> list[int]:
        """Node ids whose op is one of ``ops``, in client order."""
        np = self.np
        codes = self.codes_of(ops)
        if not len(codes):
            return []
        mask = np.isin(self.op_codes, codes)
        if kept_only:
            mask &= self.keep_np
        ids = np.nonzero(mask)[0]
        if not self.identity_order:
            ids = ids[np.argsort(self.rank[ids], kind="stable")]
        return ids.tolist()

    def _default_client_device(self) -> str:
        tasks = self.devs.task_names
        for want in ("/job:worker/replica:0/task:0", "/job:localhost/replica:0/task:0"):
            if want in self.devs.task_index:
                return want + "/device:CPU:0"
        if tasks:
            return sorted(tasks)[0] + "/device:CPU:0"
        return "/job:localhost/replica:0/task:0/device:CPU:0"

    def _check_slot(self, i: int, slot: int, what: str) -> int:
        name = self.names[i]
        try:
            outs = self.table.output_types(self.nodes_pb[i])
        except PlacevizError:
            outs = None
        if outs is None:
            return 0
        if what == "fetch" and not outs:
            raise PruneError(f"fetch {name}:{slot}: {name} produces no output; run it as a target instead")
        if slot >= len(outs):
            raise PruneError(f"{what} {name}:{slot}: {name} has only {len(outs)} output(s)")
        t = outs[slot]
        return t - REF_OFFSET if t > REF_OFFSET else t

    def _client_nodes(self) -> None:
        np = self.np
        run = self.run
        total_major = self.n
        for x, k in run.feeds:
            dtype = self._check_slot(x, k, "feed") or DT_FLOAT
            hit = (self.e_src == x) & self.kept_edge
            if self.ops[x] in PLACEHOLDER_OPS:
                hit &= (self.e_slot == k) | (self.e_slot == CONTROL)
            else:
                hit &= self.e_slot == k
            pos = np.nonzero(hit)[0]
            if not len(pos):
                continue  # nothing the run needs reads it: the feed node is pruned
            tname = f"{self.names[x]}:{k}"
            meta = (tname, self.client_dev, self.client_dev, None, None, True)
            r = self._add(f"_recv_{self.names[x]}_{k}", "_Recv", self.client_dev, [], "feed_recv", x, k, dtype,
                          total_major, meta)
            data = self.e_slot[pos] != CONTROL
            self.e_src[pos] = r
            self.e_slot[pos[data]] = 0
        for x, k in run.fetches:
            dtype = self._check_slot(x, k, "fetch") or DT_FLOAT
            tname = f"{self.names[x]}:{k}"
            meta = (tname, self.client_dev, self.client_dev, None, None, True)
            self._add(f"_send_{self.names[x]}_{k}", "_Send", self.client_dev, [[x, k]], "fetch_send", x, k, dtype,
                      total_major, meta)

    def _dev_all(self):
        np = self.np
        if not self.added:
            return self.dev_np
        added_devs = _kernels.attr_ints(self.added, "dev") if _kernels is not None else None
        if added_devs is not None:
            return np.concatenate([self.dev_np, np.frombuffer(added_devs, dtype=np.int32)])
        return np.concatenate([self.dev_np, np.fromiter((a.dev for a in self.added), dtype=np.int32,
                                                         count=len(self.added))])

    # ---------------------------------------------------------------------------- constants
    def replicate_constants(self) -> None:
        """TF's ReplicateConstantsPass (module docstring, step 2)."""
        np = self.np
        ops, n = self.ops, self.n
        devs = self.devs
        const_ids = self.nodes_with_op(CONST_OPS)
        if not const_ids:
            return
        is_cpu_dev = np.array(devs.is_cpu + [False], dtype=bool)
        size = n + len(self.added) + 1
        is_const = np.zeros(size, dtype=bool)
        is_const[np.asarray(const_ids, dtype=np.int64)] = True
        is_const[:n] &= is_cpu_dev[self.dev_np]
        edges = np.nonzero(is_const[self.e_src] & self.kept_edge)[0]
        extra = [(k, a) for k, a in enumerate(self.added)
                 if a.kind == "fetch_send" and a.inputs[0][0] < n and is_const[a.inputs[0][0]]]
        if not len(edges) and not extra:
            return
        c = self.e_src[edges]
        ndev = len(devs.names)
        tgt_of_dev = np.array([devs.target_cpu(k) for k in range(ndev)] + [-1], dtype=np.int64)
        t = tgt_of_dev[self.dev_np[self.e_dst[edges]]]
        cnt = np.bincount(c, minlength=size)
        ctrl = np.bincount(c[self.e_slot[edges] == CONTROL], minlength=size)
        tmin = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
        tmax = np.full(size, -1, dtype=np.int64)
        np.minimum.at(tmin, c, t)
        np.maximum.at(tmax, c, t)
        for _k, a in extra:  # fetches of a constant
            ci = a.inputs[0][0]
            cnt[ci] += 1
            tt = int(tgt_of_dev[a.dev])
            tmin[ci] = min(tmin[ci], tt)
            tmax[ci] = max(tmax[ci], tt)
        cand = np.nonzero((cnt > 1) & (ctrl == 0) & (tmin != tmax) & (tmax >= 0))[0]
        if not len(cand):
            return
        by_const = np.argsort(c, kind="stable")
        c_sorted = c[by_const]
        counter = 0
        for ci in sorted(cand.tolist(), key=lambda i: int(self.rank[i])):
            value = self.nodes_pb[ci].attr.get("value")
            if value is None:
                continue
            shape = value.tensor.tensor_shape
            if shape.unknown_rank:
                continue
            elements = 1
            for d in shape.dim:
                elements *= max(d.size, 0)
            if elements > REPLICATE_MAX_ELEMENTS:
                continue
            pos = edges[by_const[np.searchsorted(c_sorted, ci):np.searchsorted(c_sorted, ci, side="right")]]
            tgts = tgt_of_dev[self.dev_np[self.e_dst[pos]]]  # target CPU of each out-edge
            groups = {tt: pos[tgts == tt] for tt in np.unique(tgts).tolist()}
            fetch_users: dict[int, list[int]] = {}
            for k, a in extra:
                if a.inputs[0][0] == ci:
                    fetch_users.setdefault(int(tgt_of_dev[a.dev]), []).append(k)
            for tt in fetch_users:
                groups.setdefault(tt, pos[:0])
            lo, hi = self.in_start[ci], self.in_start[ci + 1]
            ctrl_in = [int(s) for s in self.e_src[lo:hi].tolist()]
            dtype = self.out_type(ci, 0)
            placed = []
            for tt in sorted(groups, key=lambda d: devs.names[d]):
                name = f"{self.names[ci]}/replicate/_{counter}"
                counter += 1
                copy = self._add(name, ops[ci], tt, [[s, CONTROL] for s in ctrl_in], "replicate", ci, 0, dtype,
                                 int(self.rank[ci]))
                self.added[-1].copy_of = ci
                if len(groups[tt]):
                    self.e_src[groups[tt]] = copy
                for k in fetch_users.get(tt, ()):
                    self.added[k].inputs[0][0] = copy
                placed.append(devs.names[tt])
            self.keep_np[ci] = False
            self.kept_edge[lo:hi] = False
            self.replicated[self.names[ci]] = sorted(placed)

    # ---------------------------------------------------------------------------- control flow
    def control_flow(self) -> None:
        """OptimizeControlFlowColocation, then control loops for frames that span devices."""
        np = self.np
        ops = self.ops
        self.dev_l = self.dev_np.tolist()
        cf_nodes = self.nodes_with_op(_MOVED_CF_OPS)
        if not cf_nodes:
            return
        # First data consumer of Enter / NextIteration nodes (in client order).
        wanted = [i for i in cf_nodes if ops[i] in ENTER_OPS or ops[i] in NEXT_OPS]
        first_consumer: dict[int, int] = {}
        if wanted:
            pos = np.nonzero(np.isin(self.e_src, np.asarray(wanted, dtype=np.int32)) & self.kept_edge
                             & (self.e_slot != CONTROL))[0]
            best: dict[int, tuple] = {}
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

    def _frames(self):
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
                if merge and self.op(s) in BACK_EDGE_SOURCE_OPS:
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

    def _cross_device_edges(self) -> list[tuple[int, int]]:
        """(dst, src) of every edge between two devices, in processing order."""
        np = self.np
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
        frame_of, output_frame, input_frame, parent, parallel = self._frames()
        relevant = []
        for dst, src in self._cross_device_edges():
            sf = output_frame(src)
            if sf and sf == input_frame(dst):
                relevant.append((dst, sf))
        if not relevant:
            return
        cond: dict[str, int] = {}
        for i in self.nodes_with_op(LOOP_COND_OPS):
            cond[frame_of(i)] = i
        level = 0 if self.session == "master" else 2
        loops: dict[tuple[str, int], dict] = {}
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
                    a.meta["T"] = ("type", DT_FLOAT)
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
        np = self.np
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
            want = int(exp[i]) if exp[i] >= 0 else len(self.types(i)[0])
            have = int(counts[i])
            if have < want:
                raise PartitionError(f"Incomplete graph, missing {want - have} inputs for {self.names[i]}")
            raise PartitionError(f"node {self.names[i]} ({self.ops[i]}) has {have} data inputs, but its op "
                                 f"takes {want}")

    # ---------------------------------------------------------------------------- splitting
    def split(self, level: int) -> None:
        """One partitioning pass: 0 by task (master, ``_S``), 1 by device inside tasks (``_G``),
        2 by device in one pass (DirectSession, ``/_n``)."""
        np = self.np
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
        writes_pos: list[int] = []
        writes_src: list[int] = []
        writes_slot: list[int] = []
        self._split_originals(pos, (writes_pos, writes_src, writes_slot))
        if writes_pos:
            wp = np.asarray(writes_pos, dtype=np.int64)
            self.e_src[wp] = np.asarray(writes_src, dtype=np.int32)
            self.e_slot[wp] = np.asarray(writes_slot, dtype=np.int32)
        # Added nodes whose inputs may cross: client nodes, copies, cloop nodes, receives with read
        # controls (sends, control Consts and Identities sit on their input's device).
        for dst in list(dict.fromkeys(self.recheck)):
            a = self.added[dst - self.n]
            dpart = part[a.dev]
            items = []
            for j, (s, sl) in enumerate(a.inputs):
                sdev = self.dev(s)
                if part[sdev] != dpart or (non_cpu and sl != CONTROL and sdev == a.dev and not devs.is_cpu[a.dev]
                                           and self.out_host(s, sl) != self.in_host(dst, j, self.out_type(s, sl))):
                    items.append((j, s, sl, j))
            if items:
                self._cut_dst(dst, items, lambda ref, s, sl, _a=a: _a.inputs.__setitem__(ref, [s, sl]))

    def _split_originals(self, pos, writes: tuple[list, list, list]) -> None:
        """The cut edges into original nodes, grouped by destination in processing order, each
        group through :meth:`_cut_dst` (TF's loop over one node's in-edges): the specification of
        the C kernel, which does the whole loop or declines (:meth:`_split_originals_c`)."""
        pos_l = pos.tolist()
        src_l = self.e_src[pos].tolist()
        slot_l = self.e_slot[pos].tolist()
        dst_l = self.e_dst[pos].tolist()
        # Their io types are read from their NodeDefs: parsed together when the graph's bytes were not.
        n = self.n
        self.graph.prefetch_node_defs({i for i in chain(src_l, dst_l) if i < n})
        w_pos, w_src, w_slot = writes

        def write(ref, s, sl):
            w_pos.append(ref)
            w_src.append(s)
            w_slot.append(sl)

        if _kernels is not None and pos_l and self._split_originals_c(pos_l, src_l, slot_l, dst_l, writes):
            return
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

    def _split_originals_c(self, pos_l: list[int], src_l: list[int], slot_l: list[int], dst_l: list[int],
                           writes: tuple[list, list, list]) -> bool:
        """The whole Python loop of :meth:`_split_originals` in C
        (``placeviz._partition_kernels.split_originals``): the same groups through the same steps
        as :meth:`_cut_dst`, asking the same methods for io types, op specs, memory types and
        shapes (each answer kept in the call's own memo). It returns everything it made and
        changes nothing given; False when it declines (an argument of another kind, a destination
        gated by a control loop), before doing anything."""
        devs = self.devs
        res = _kernels.split_originals(  # type: ignore[union-attr]
            pos=pos_l, src=src_l, slot=slot_l, dst=dst_l, n=self.n, level=self.level, part=self.part,
            is_cpu=devs.is_cpu, dev_task=devs.task, dev_names=devs.names, dev_type=devs.type, dev=self.dev_l,
            names=self.names, ops=self.ops, added=self.added, cloops=self.cloop_ctrl, types=self.types,
            in_type=self.in_type, spec=self.spec, mem_types=self._node_mem_types, shape=self.shape,
            out_host=self.out_host, in_host=self.in_host, dtype_size=dtype_size, dtype_name=dtype_name,
            new_type=_New, new_args=_NEW_ARGS, new_constants=_NEW_CONSTANTS,
            suffix="/_" if self.level == 2 else ("_S" if self.level == 0 else "_G"),
            pass_ops=_PASS_THROUGH_OPS, const_ops=CONST_OPS, shape_attr_ops=_SHAPE_ATTR_OPS, rank=self.rank,
            in_start=self.in_start, e_src=self.e_src, e_slot=self.e_slot, graph_in_src=self.graph.in_src,
            graph_in_slot=self.graph.in_slot, output_shapes=bool(self.output_shapes), counters=self._counter_g,
            seq=self._seq, counter_s=self._counter_s, edge_id=self.edge_id)
        if res is None:
            return False
        self.added.extend(res["added"])
        self.transfers.extend(res["transfers"])
        for mine, theirs in zip(writes, (res["w_pos"], res["w_src"], res["w_slot"]), strict=True):
            mine.extend(theirs)
        self.dup.update(res["dup"])
        self._counter_g = res["counters"]
        self._seq, self._counter_s, self.edge_id = res["seq"], res["counter_s"], res["edge_id"]
        self.recheck.extend(res["recheck"])
        return True

    def _need_same_device(self, p: int) -> bool:
        s, d = int(self.e_src[p]), int(self.e_dst[p])
        slot = int(self.e_slot[p])
        return self.out_host(s, slot) != self.in_host(d, p - self.in_start[d], self.out_type(s, slot))

    def _all_inputs(self, dst: int) -> list[tuple[int, int, int]]:
        if dst < self.n:
            lo, hi = self.in_start[dst], self.in_start[dst + 1]
            return list(zip(range(lo, hi), self.e_src[lo:hi].tolist(), self.e_slot[lo:hi].tolist(), strict=True))
        return [(j, s, sl) for j, (s, sl) in enumerate(self.added[dst - self.n].inputs)]

    def _cut_dst(self, dst: int, items: list, write) -> None:
        """TF's loop over the incoming edges of ``dst`` that cross partitions (or memory types)."""
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
        transfers = self.transfers
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
            transfers.append(self._transfer(origin, oslot, src_dev, dst_dev, dtype, send_name, recv_name,
                                            send_op, recv_op, tname, dst_name))
        for recv in ref_recvs:
            added[recv - n].inputs.extend([x, CONTROL] for x in ref_ctrl)
            self.recheck.append(recv)

    def _transfer(self, origin: int, oslot: int, src_dev: int, dst_dev: int, dtype: int, send: str,
                  recv: str, send_op: str, recv_op: str, tname: str, dst_name: str) -> dict:
        control = oslot == CONTROL
        if control:
            shape: list | None = [0]
            nbytes: int | None = 0
        else:
            shape = self.shape(origin, oslot)
            size = dtype_size(dtype)
            nbytes = None
            if shape is not None and size is not None and None not in shape:
                nbytes = size
                for d in shape:
                    nbytes *= d
                if nbytes > MAX_TENSOR_BYTES:  # type: ignore[operator]
                    nbytes = None  # an overflow: counted as unknown (placeviz.limits)
        devs = self.devs
        dname = _DTYPE_NAMES.get(dtype)
        if dname is None:
            dname = _DTYPE_NAMES[dtype] = dtype_name(dtype)
        return {
            "src": self.names[origin] if origin < self.n else self.added[origin - self.n].name,
            "slot": "control" if control else oslot,
            "src_device": devs.names[src_dev], "dst_device": devs.names[dst_dev],
            "dtype": dname, "shape": shape, "bytes": nbytes,
            "level": "device" if devs.task[src_dev] == devs.task[dst_dev] else "task",
            "send": send, "recv": recv, "send_op": send_op, "recv_op": recv_op,
            "tensor_name": tname, "dst": dst_name,
        }

    # ---------------------------------------------------------------------------- shapes
    def shape(self, i: int, slot: int, depth: int = 0):
        """Static shape of output ``slot`` of node ``i`` (list, None for unknown dims) or None."""
        if i >= self.n:
            a = self.added[i - self.n]
            return self.shape(a.origin, a.oslot, depth) if a.origin >= 0 else None
        key = (i, slot)
        result = self._shapes.get(key, False)
        if result is not False:
            return result
        result = None
        op = self.ops[i]
        # The NodeDef's attrs are read only for the ops that need them (most of the cost).
        if self.output_shapes:
            av = self.nodes_pb[i].attr.get("_output_shapes")
            if av is not None and slot < len(av.list.shape):
                result = _shape_list(av.list.shape[slot])
        if (result is None or None in result) and depth < 32:
            if op in CONST_OPS:
                value = self.nodes_pb[i].attr.get("value")
                if value is not None:
                    result = _shape_list(value.tensor.tensor_shape)
            elif op in _SHAPE_ATTR_OPS:
                attr = self.nodes_pb[i].attr
                sav = attr.get("shape")
                if sav is not None:
                    result = _shape_list(sav.shape)
                if op == "PlaceholderWithDefault" and (result is None or None in result):
                    result = _known_first(self._input_shape(i, depth), result)
            elif op in _PASS_THROUGH_OPS or op == "ReadVariableOp" or (op.startswith("Apply") and slot == 0):
                result = _known_first(self._input_shape(i, depth), result)
        self._shapes[key] = result
        return result

    def _input_shape(self, i: int, depth: int):
        lo = self.in_start[i]
        if lo >= self.in_start[i + 1] or self.graph.in_slot[lo] == CONTROL:
            return None
        src = self.graph.in_src[lo]
        if self.ops[src] == "VarHandleOp":
            sav = self.nodes_pb[src].attr.get("shape")
            return _shape_list(sav.shape) if sav is not None else None
        return self.shape(src, self.graph.in_slot[lo], depth + 1)

    # ---------------------------------------------------------------------------- result
    def result(self, final_level: int, level: str) -> PartitionResult:
        self.final_level = final_level
        run = self.run
        names = self.names
        result = PartitionResult(
            level=level, session=self.session,
            client_device=self.client_device if (run.fetches or run.feeds) else None,
            transfers=self.transfers, replicated=self.replicated, moved=self.moved,
            control_loops=self.control_loops, node_count=int(self.keep_np.sum()),
            fetches=[f"{names[i]}:{k}" for i, k in run.fetches], targets=[names[i] for i in run.targets],
            feeds=[f"{names[i]}:{k}" for i, k in run.feeds], builder=self,
        )
        functions = {f.signature.name for f in self.graph.library.function}
        lowered = sorted(op for op in self.op_index if op in LOWERED_OPS or op in functions)
        if lowered:
            kept = [op for op in lowered if self.nodes_with_op([op])]
            if kept:
                result.notes.append(
                    f"ops {', '.join(kept)} are partitioned as single nodes; TF's runtime first lowers or "
                    "inlines them into their bodies' nodes, so its partitions hold more nodes and transfers")
        return result

    def node_lists(self) -> dict[str, list[int]]:
        """Partition key -> node ids (original and added) in GraphDef order."""
        np = self.np
        devs = self.devs
        n = self.n
        kept = np.nonzero(self.keep_np)[0].astype(np.int64)
        by_task = self.final_level == 0
        keys_of_dev = np.asarray((devs.task if by_task else list(range(len(devs.names)))) + [-1], dtype=np.int64)
        key_names = devs.task_names if by_task else devs.names
        ids, parts = kept, keys_of_dev[self.dev_np[kept]]
        majors, minors = self.rank[kept], np.zeros(len(kept), dtype=np.int64)
        if self.added:
            m = len(self.added)
            ids = np.concatenate([ids, np.arange(n, n + m, dtype=np.int64)])
            parts = np.concatenate([parts, keys_of_dev[np.fromiter((a.dev for a in self.added), dtype=np.int64,
                                                                   count=m)]])
            majors = np.concatenate([majors, np.fromiter((a.major for a in self.added), dtype=np.int64, count=m)])
            minors = np.concatenate([minors, np.fromiter((a.minor for a in self.added), dtype=np.int64, count=m)])
        order = np.lexsort((minors, majors, parts))
        ids, parts = ids[order], parts[order]
        bounds = (np.nonzero(np.diff(parts))[0] + 1).tolist()
        out: dict[str, list[int]] = {}
        for lo, hi in zip([0] + bounds, bounds + [len(ids)], strict=True):
            if hi > lo:
                out[key_names[int(parts[lo])]] = ids[lo:hi].tolist()
        return {k: out[k] for k in sorted(out)}

    def original_count(self, ids: list[int]) -> int:
        """How many of ``ids`` (in GraphDef order: originals and added nodes mixed) are original."""
        return int((self.np.asarray(ids, dtype=self.np.int64) < self.n).sum())

    def names_of(self, ids: list[int]) -> list[str]:
        names, added, n = self.names, self.added, self.n
        return [names[i] if i < n else added[i - n].name for i in ids]

    # ---------------------------------------------------------------------------- NodeDefs
    def _input_strings(self, i: int, fix) -> list[str]:
        name = self.name
        out = []
        pairs: Iterable[Any]  # (source, slot) tuples or lists
        if i < self.n:
            lo, hi = self.in_start[i], self.in_start[i + 1]
            pairs = zip(self.e_src[lo:hi].tolist(), self.e_slot[lo:hi].tolist(), strict=True)
        else:
            pairs = self.added[i - self.n].inputs
        for s, sl in pairs:
            if sl == CONTROL:
                out.append("^" + fix(name(s)))
            elif sl == 0:
                out.append(fix(name(s)))
            else:
                out.append(f"{fix(name(s))}:{sl}")
        cl = self.cloop_ctrl.get(i)
        if cl is not None and cl[1] > 0:
            out.extend(["^" + fix(name(cl[0]))] * cl[1])
        return out

    def _fill_new(self, nd: NodeDef, a: _New, i: int, fix) -> None:
        if a.copy_of >= 0:
            nd.CopyFrom(self.nodes_pb[a.copy_of])
            del nd.input[:]
        nd.name = a.name
        nd.op = a.op
        nd.device = self.devs.names[a.dev]
        attr = nd.attr
        if a.op in ("_Send", "_HostSend", "_Recv", "_HostRecv"):
            tname, sdev, rdev, src, dst, client = a.meta
            attr["tensor_name"].s = tname.encode()
            attr["send_device"].s = self.devs.names[sdev].encode()
            attr["send_device_incarnation"].i = self.incarnation_of(sdev)
            attr["recv_device"].s = self.devs.names[rdev].encode()
            attr["client_terminated"].b = client
            if src is not None:
                attr["_src"].s = src.encode()
                attr["_dst"].s = dst.encode()
            attr["T" if a.op in ("_Send", "_HostSend") else "tensor_type"].type = a.dtype
        elif a.kind in ("ctrl_const", "cloop_const"):
            attr["dtype"].type = DT_FLOAT
            tensor = attr["value"].tensor
            tensor.dtype = DT_FLOAT
            tensor.tensor_shape.dim.add().size = 0
        elif a.kind == "ctrl_identity":
            attr["T"].type = DT_FLOAT
        elif a.meta:
            for key, (kind, value) in a.meta.items():
                av = attr[key]
                if kind == "s":
                    av.s = value.encode("utf-8")
                elif kind == "i":
                    av.i = value
                elif kind == "b":
                    av.b = value
                elif kind == "type":
                    av.type = value
        nd.name = fix(a.name)
        nd.input.extend(self._input_strings(i, fix))

    def serialize(self, node_lists: dict[str, list[int]]) -> Iterator[tuple[str, Iterator[bytes]]] | None:
        """:meth:`materialize` (importable), serialized, one partition at a time and each in pieces
        of at most ``_CHUNK_NODES`` nodes (whose concatenation is the GraphDef: its ``node`` fields,
        then its other fields), so that a writer holds one piece, not whole partitions. The nodes
        that only change device are not built: their bytes are the input's (``Graph.node_wire``)
        with the new ``device``. ``_Send``/``_Recv`` and the control transfers' ``Const``/
        ``Identity`` are written straight to protobuf's deterministic bytes
        (:func:`placeviz.nodewire.encode_added` in C, :meth:`_node_bytes` in Python); the other
        nodes (rewired inputs, renamed nodes, trimmed ``_class``) are built as :meth:`materialize`
        builds them and serialized deterministically. None when the graph has no bytes or a
        function library (whose reachable functions :meth:`materialize` finds from the
        NodeDefs). A piece holding a node of odd wire form (a group field, which no serializer
        writes) has all its nodes built: the same message, written by protobuf."""
        wire = self.graph.node_wire
        if wire is None or self.graph.library.function:
            return None
        return self._serialize(node_lists, wire)

    def _serialize(self, node_lists: dict[str, list[int]], wire) -> Iterator[tuple[str, Iterator[bytes]]]:
        np = self.np
        n = self.n
        # Nodes whose inputs differ from their bytes' (moved by control flow, control loops, the
        # setter's rewired roots) or whose name changes are built; so are nodes without bytes.
        moved_inputs = (self.e_src != np.frombuffer(self.graph.in_src, dtype=np.int32)) | \
            (self.e_slot != np.frombuffer(self.graph.in_slot, dtype=np.int32))
        rewrite = np.zeros(n, dtype=bool)
        rewrite[np.unique(self.e_dst[moved_inputs])] = True
        rewrite[[i for i in self.cloop_ctrl if i < n]] = True  # added nodes are built anyway
        rewrite[np.fromiter(wire.stale, dtype=np.int64, count=len(wire.stale))] = True
        fix_names = _any_leading_underscore(self.names)
        if fix_names:
            rewrite[:] = True  # original names to fix everywhere
        all_offsets = np.frombuffer(wire.offsets, dtype=np.int64)
        build = rewrite | (all_offsets < 0)
        part_of = np.full(n, -1, dtype=np.int64)  # partition number of each original node it holds
        for code, ids in enumerate(node_lists.values()):
            ids_np = np.asarray(ids, dtype=np.int64)
            part_of[ids_np[ids_np < n]] = code
        elsewhere = self._located_elsewhere(part_of, list(node_lists.values()))
        build |= elsewhere  # their _class is trimmed
        all_lengths = np.frombuffer(wire.lengths, dtype=np.int64)
        device_fields = [d.encode("utf-8") for d in self.devs.names]
        incarnations = [self.incarnation_of(d) for d in range(len(device_fields))]
        versions = self.graph.versions
        tail = b"" if versions is None else encode_field(4, versions.SerializeToString(deterministic=True))
        transfer_attrs: dict[tuple, tuple[bytes, ...]] = {}  # see _encode_transfer
        # Originals rebuilt from their bytes (_rebuilt_originals): those with bytes, outside control loops.
        from_bytes = all_offsets >= 0
        from_bytes[[i for i in self.cloop_ctrl if i < n]] = False
        arrays = (all_offsets, all_lengths, rewrite.view(np.uint8), fix_names, np.ascontiguousarray(self.in_start_np,
                  dtype=np.int32), np.ascontiguousarray(self.e_src, dtype=np.int32),
                  np.ascontiguousarray(self.e_slot, dtype=np.int32), self.names, self.added, device_fields,
                  np.ascontiguousarray(self.dev_np, dtype=np.int32))

        def chunks(code: int, ids: list[int]) -> Iterator[bytes]:
            here = _NamesIn(self, ids, part_of, code)

            def node_bytes(i: int) -> bytes:
                return self._node_bytes(i, rewrite, here, transfer_attrs)

            def nodes_bytes(slow_ids) -> list[bytes]:
                originals = slow_ids[slow_ids < n]
                rebuilt = self._rebuilt_originals(wire, originals[from_bytes[originals]].tolist(), arrays, here,
                                                  elsewhere)
                if rebuilt:
                    def fallback(i: int) -> bytes:
                        return rebuilt.pop(i, b"") or node_bytes(i)  # a NodeDef's bytes are never empty
                else:
                    fallback = node_bytes
                return self._nodes_bytes(slow_ids.tolist(), fallback, device_fields, incarnations)

            for lo in range(0, max(len(ids), 1), _CHUNK_NODES):
                ids_np = np.asarray(ids[lo:lo + _CHUNK_NODES], dtype=np.int64)
                end = tail if lo + _CHUNK_NODES >= len(ids) else b""
                original = ids_np < n
                slow = ~original
                slow[original] = build[ids_np[original]]
                fast_ids = np.where(slow, 0, ids_np)
                offsets = np.where(slow, -1, all_offsets[fast_ids])
                lengths = np.where(slow, 0, all_lengths[fast_ids])
                devices = np.where(slow, 0, self.dev_np[fast_ids]).astype(np.int32)
                data = splice_nodes(wire.data, offsets, lengths, devices, device_fields, nodes_bytes(ids_np[slow]), end)
                if data is None:  # a node of odd wire form (a group field): build every node
                    data = splice_nodes(b"", np.full(len(ids_np), -1, dtype=np.int64), np.zeros_like(ids_np),
                                        np.zeros(len(ids_np), dtype=np.int32), device_fields,
                                        self._nodes_bytes(ids_np.tolist(), node_bytes, device_fields, incarnations),
                                        end)
                    assert data is not None  # every node built here: no wire form is left to refuse
                yield data
                del data  # before the next chunk's

        for code, (key, ids) in enumerate(node_lists.items()):
            yield key, chunks(code, ids)

    def _rebuilt_originals(self, wire, ids: list[int], arrays: tuple, here, elsewhere) -> dict[int, bytes]:
        """Node id -> serialized NodeDef, for original nodes (``ids``) that :meth:`_node_bytes`
        would build from a copy of their NodeDef: the C kernel (``nodewire.rebuild_nodes``) writes
        each from its bytes with its new device and, when rewired, its new inputs (and fixed
        name); protobuf parses them all at once and serializes each deterministically, after the
        ``_class`` trim, so the bytes are those of :meth:`_node_bytes`. The trim runs only on the
        nodes ``elsewhere`` marks (:meth:`_located_elsewhere`: a ``_class`` entry naming a node
        outside the partition); on the others it keeps every entry, and asking costs a Python
        loop per node (20k rewired nodes with ``_class`` at 200k). Empty without the kernel (or
        without such nodes): then :meth:`_node_bytes` builds them."""
        if not ids:
            return {}
        blob = nodewire.rebuild_nodes(wire.data, arrays[0], arrays[1], ids, *arrays[2:])
        if blob is None:
            return {}
        trim = elsewhere[ids].tolist()
        out = {}
        for i, nd, trimmed in zip(ids, GraphDef.FromString(blob).node, trim, strict=True):
            if trimmed and "_class" in nd.attr:
                _keep_local_colocation(nd, here)
            out[i] = nd.SerializeToString(deterministic=True)
        return out

    def _nodes_bytes(self, ids: list[int], node_bytes, device_fields: list[bytes], incarnations: list[int]) -> list[bytes]:
        """The serialized NodeDefs of ``ids``: added transfers in C when ``placeviz._wire`` is built,
        the rest (or all) by ``node_bytes``."""
        out = nodewire.encode_added(ids, self.n, self.added, self.names, device_fields, incarnations,
                                    self.cloop_ctrl, node_bytes, _CTRL_CONST_ATTRS, _CTRL_IDENTITY_ATTRS)
        return out if out is not None else [node_bytes(i) for i in ids]

    def _located_elsewhere(self, part_of, lists: list[list[int]]):
        """Nodes whose ``_class`` names a node outside their partition (``part_of``: partition
        number per original node, -1 for none; ``lists``: the partitions' node ids):
        :meth:`materialize` trims those entries (:func:`_keep_local_colocation`), so their bytes
        cannot be the input's. The same test as
        ``names <= set(names of the partition's nodes)``, as array operations over the
        (node, named node) pairs; added nodes whose name a ``_class`` names are looked up by name."""
        np = self.np
        n = self.n
        out = np.zeros(n, dtype=bool)
        located = self.graph.colocated_names
        if not located:
            return out
        groups = dict.fromkeys(located.values())  # distinct tuples of names
        code = {t: k for k, t in enumerate(groups)}
        nodes = np.fromiter(located.keys(), dtype=np.int64, count=len(located))
        group_of = np.fromiter(map(code.__getitem__, located.values()), dtype=np.int64, count=len(located))
        flat_names = [x for t in groups for x in t]
        index_get = self.graph.colocated_name_ids.get  # not the whole name index: a dict of every node
        flat = np.fromiter(map(index_get, flat_names, repeat(-1, len(flat_names))), dtype=np.int64,
                           count=len(flat_names))
        sizes = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
        starts = np.zeros(len(groups), dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        counts = sizes[group_of]
        pair_node = np.repeat(nodes, counts)
        first = np.zeros(len(nodes), dtype=np.int64)
        np.cumsum(counts[:-1], out=first[1:])
        pair_name = np.arange(len(pair_node), dtype=np.int64) + np.repeat(starts[group_of] - first, counts)
        target = flat[pair_name]
        bad = (target < 0) | (part_of[np.maximum(target, 0)] != part_of[pair_node])
        colliding = set(flat_names).intersection(map(_NAME, self.added))
        if colliding:  # an added node's name is named: is it in the same partition?
            here: dict[int, _NamesIn] = {}
            for k in np.flatnonzero(bad).tolist():
                i, name = int(pair_node[k]), flat_names[int(pair_name[k])]
                p = int(part_of[i])
                if name in colliding and p >= 0:
                    if p not in here:
                        here[p] = _NamesIn(self, lists[p], part_of, p)
                    if name in here[p]:
                        bad[k] = False
        out[pair_node[bad]] = True
        return out

    def _node_bytes(self, i: int, rewrite, here, transfer_attrs: dict) -> bytes:
        """The serialized NodeDef of node ``i`` in a partition whose names ``here`` holds, as
        :meth:`materialize` builds it (the Python reference of :func:`placeviz.nodewire.encode_added`)."""
        n = self.n
        fix = _importable_name
        if i >= n:
            a = self.added[i - n]
            if a.op in _TRANSFER_OPS and a.copy_of < 0:
                return self._encode_transfer(a, i, fix, transfer_attrs)
        nd = NodeDef()
        if i < n:
            nd.CopyFrom(self.nodes_pb[i])
            nd.device = self.devs.names[self.dev_l[i]]
            if rewrite[i]:
                nd.name = fix(nd.name)
                del nd.input[:]
                nd.input.extend(self._input_strings(i, fix))
        else:
            self._fill_new(nd, self.added[i - n], i, fix)
        if "_class" in nd.attr:
            _keep_local_colocation(nd, here)
        return nd.SerializeToString(deterministic=True)

    def _encode_transfer(self, a: _New, i: int, fix, cache: dict) -> bytes:
        """The deterministic serialization of the ``_Send``/``_Recv`` NodeDef :meth:`_fill_new`
        builds, written directly: tens of thousands of them per graph, and making each as a
        message costs 20 us. Fields in number order, attrs in the key order of protobuf's
        (upb's) deterministic serialization (``tests/test_partition_kernels.py`` compares the bytes
        with ``SerializeToString(deterministic=True)`` of the built NodeDef). The attrs that
        depend only on (op, devices, client, dtype) are encoded once per such key, in ``cache``.
        """
        tname, sdev, rdev, src, dst, client = a.meta
        key = (a.op, a.dev, sdev, rdev, client, a.dtype)
        parts = cache.get(key)
        if parts is None:
            names = self.devs.names
            is_send = a.op in ("_Send", "_HostSend")
            typed = _attr_entry(b"T" if is_send else b"tensor_type", _varint_value(6, a.dtype))  # AttrValue.type
            middle = (_attr_entry(b"client_terminated", _varint_value(5, int(client)))  # AttrValue.b
                      + _attr_entry(b"recv_device", encode_field(2, names[rdev].encode()))  # AttrValue.s
                      # upb sorts a longer key before its prefix (upb/message/internal/map_sorter.c)
                      + _attr_entry(b"send_device_incarnation", _varint_value(3, self.incarnation_of(sdev)))
                      + _attr_entry(b"send_device", encode_field(2, names[sdev].encode())))
            head = encode_field(2, a.op.encode())
            device = encode_field(4, names[a.dev].encode())
            # "T" sorts before "_dst", "tensor_type" after "tensor_name" (keys compare as bytes)
            parts = cache[key] = (head, device, typed if is_send else b"", middle, b"" if is_send else typed)
        head, device, first, middle, last = parts
        out = [encode_field(1, fix(a.name).encode("utf-8")), head]
        out.extend(encode_field(3, x.encode("utf-8")) for x in self._input_strings(i, fix))
        out.append(device)
        out.append(first)
        if src is not None:
            out.append(_string_attr(_KEY_DST, dst.encode("utf-8")))
            out.append(_string_attr(_KEY_SRC, src.encode("utf-8")))
        out.append(middle)
        out.append(_string_attr(_KEY_TENSOR_NAME, tname.encode("utf-8")))
        out.append(last)
        return b"".join(out)

    def materialize(self, node_lists: dict[str, list[int]], importable: bool = True) -> dict[str, GraphDef]:
        """One GraphDef per partition. ``importable``: rename TF's internal names (``_recv_x_0``,
        ``_cloop...``: a leading ``_`` is reserved for the runtime, so ``import_graph_def`` refuses
        it) to ``._recv_x_0``, and drop ``_class`` colocation entries naming nodes of other
        partitions (the devices are final). Otherwise names and attrs are exactly TF's."""
        graph_def = self.graph.graph_def
        full_nodes = graph_def.node  # current devices and inputs, unlike ``nodes_pb``
        out: dict[str, GraphDef] = {}
        n = self.n
        dev_names = self.devs.names
        fix = _importable_name if importable else _same
        np = self.np
        moved_inputs = (self.e_src != np.frombuffer(self.graph.in_src, dtype=np.int32)) | \
            (self.e_slot != np.frombuffer(self.graph.in_slot, dtype=np.int32))
        rewrite: set[int] | range = set(np.unique(self.e_dst[moved_inputs]).tolist()) | set(self.cloop_ctrl)
        if importable and any(name[:1] == "_" for name in self.names):
            rewrite = range(n)  # original names to fix everywhere
        for key, ids in node_lists.items():
            gd = GraphDef()
            if graph_def.HasField("versions"):
                gd.versions.CopyFrom(graph_def.versions)
            nodes = gd.node
            here = {self.name(i) for i in ids} if importable else None
            for i in ids:
                nd = nodes.add()
                if i < n:
                    nd.CopyFrom(full_nodes[i])
                    nd.device = dev_names[self.dev_l[i]]
                    if i in rewrite:
                        nd.name = fix(nd.name)
                        del nd.input[:]
                        nd.input.extend(self._input_strings(i, fix))
                else:
                    self._fill_new(nd, self.added[i - n], i, fix)
                if importable and "_class" in nd.attr:
                    _keep_local_colocation(nd, here)  # type: ignore[arg-type]  # a set when importable
            _add_library(gd, graph_def)
            out[key] = gd
        return out


_TRANSFER_OPS = frozenset({"_Send", "_HostSend", "_Recv", "_HostRecv"})
_CHUNK_NODES = 1 << 16
_NAME = attrgetter("name")
"""Nodes per piece of a written partition (:meth:`_Partitioner.serialize`): tens of MB at most."""


class _NamesIn:
    """``name in`` the names of one partition's nodes (``ids``, partition number ``code``), as the
    set of them answers it, for the names ``_class`` entries name (``Graph.located_names``),
    without making that set: an original node by ``Graph.colocated_name_ids`` and ``part_of``,
    added nodes by a set of their names made on first need."""

    __slots__ = ("builder", "ids", "part_of", "code", "added")

    def __init__(self, builder: _Partitioner, ids: list[int], part_of, code: int):
        self.builder, self.ids, self.part_of, self.code = builder, ids, part_of, code
        self.added: set[str] | None = None

    def __contains__(self, name: str) -> bool:
        b = self.builder
        j = b.graph.colocated_name_ids.get(name)  # the names a _class can name
        if j is not None and self.part_of[j] == self.code:
            return True
        if self.added is None:
            n, added = b.n, b.added
            self.added = {added[i - n].name for i in self.ids if i >= n}
        return name in self.added


def _ctrl_attrs(kind: str) -> bytes:
    """The encoded ``attr`` fields of a control transfer's ``Const`` or ``Identity``, as
    :meth:`_Partitioner._fill_new` sets them, serialized by protobuf (deterministic)."""
    nd = NodeDef()
    if kind == "ctrl_const":
        nd.attr["dtype"].type = DT_FLOAT
        tensor = nd.attr["value"].tensor
        tensor.dtype = DT_FLOAT
        tensor.tensor_shape.dim.add().size = 0
    else:
        nd.attr["T"].type = DT_FLOAT
    return nd.SerializeToString(deterministic=True)


_CTRL_CONST_ATTRS, _CTRL_IDENTITY_ATTRS = _ctrl_attrs("ctrl_const"), _ctrl_attrs("ctrl_identity")


def _attr_entry(key: bytes, value: bytes) -> bytes:
    """One ``NodeDef.attr`` map entry on the wire (field 5: key field 1, AttrValue field 2)."""
    return encode_field(5, encode_field(1, key) + encode_field(2, value))


_KEY_DST, _KEY_SRC, _KEY_TENSOR_NAME = (encode_field(1, k) for k in (b"_dst", b"_src", b"tensor_name"))


def _string_attr(key_field: bytes, value: bytes) -> bytes:
    """:func:`_attr_entry` of an AttrValue ``s``, with its key already encoded (the hot case)."""
    av = b"\x12" + encode_varint(len(value)) + value  # AttrValue.s
    entry = key_field + b"\x12" + encode_varint(len(av)) + av
    return b"\x2a" + encode_varint(len(entry)) + entry


def _varint_value(number: int, value: int) -> bytes:
    """An AttrValue holding one varint field (``b``, ``i`` or ``type``), as protobuf writes an
    int64 (negative: ten bytes, two's complement)."""
    return encode_varint(number << 3) + encode_varint(value & 0xFFFFFFFFFFFFFFFF)


def _any_leading_underscore(names: list[str]) -> bool:
    """Whether a name starts with ``_``: a C-level substring search over the names joined by NULs,
    a slice at a time (joining a million names at once holds some 50 MB for nothing)."""
    step = _CHUNK_NODES
    return any("\0_" in "\0" + "\0".join(names[lo:lo + step]) for lo in range(0, len(names), step))


def _same(name: str) -> str:
    return name


def _importable_name(name: str) -> str:
    return "." + name if name.startswith("_") else name


def _keep_local_colocation(nd: NodeDef, here: set[str]) -> None:
    groups = nd.attr["_class"].list.s
    keep = [g for g in groups if not g.startswith(b"loc:@") or g[5:].decode("utf-8", "replace") in here]
    if len(keep) == len(groups):
        return
    if keep:
        del groups[:]
        groups.extend(keep)
    else:
        del nd.attr["_class"]


def _add_library(gd: GraphDef, source: GraphDef) -> None:
    """Copy the functions the partition's nodes reach (directly, through attrs, or nested), as TF's
    ``ReachableDefinitions`` does, with their gradients."""
    lib = source.library
    if not lib.function:
        return
    by_name = {f.signature.name: f for f in lib.function}
    wanted: list[str] = []
    seen: set[str] = set()

    def want(fname: str) -> None:
        if fname in by_name and fname not in seen:
            seen.add(fname)
            wanted.append(fname)

    def visit_attrs(attrs) -> None:
        for av in attrs.values():
            kind = av.WhichOneof("value")
            if kind == "func":
                want(av.func.name)
            elif kind == "list":
                for f in av.list.func:
                    want(f.name)

    def visit_node(nd) -> None:
        want(nd.op)
        visit_attrs(nd.attr)

    for nd in gd.node:
        visit_node(nd)
    k = 0
    while k < len(wanted):
        f = by_name[wanted[k]]
        k += 1
        for nd in f.node_def:
            visit_node(nd)
        visit_attrs(f.attr)
    for fname in wanted:
        gd.library.function.add().CopyFrom(by_name[fname])
    for grad in lib.gradient:
        if grad.function_name in seen:
            gd.library.gradient.add().CopyFrom(grad)
