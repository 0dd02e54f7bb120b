"""Our copy of TensorFlow's placer (``placer.cc`` + ``colocation_graph.cc``, TF 2.x).

Given a graph whose ``device`` fields are requests (what the setter or the user wrote), a device
set and the op facts, it assigns every node a full runtime device name, the way a session does
once per graph version before pruning (so a node's device never depends on what is fetched):

1. **Members.** Each node gets its supported device types (kernels matching its attrs, with
   priorities) and its requested device. On a *generator of a ref or resource* (``VariableV2``,
   ``VarHandleOp``: no inputs, one ref/resource output) the request is a *resource device* that
   later merges may not override.
2. **Ref and resource edges.** Every data edge into a ref or resource input colocates producer and
   consumer (except into ``IdentityN``/function-call ops). Incompatible assigned or resource devices
   are an error even with soft placement; incompatible *requests* silently give the consumer the
   producer's request.
3. **``_class`` groups.** Nodes are walked in id order; each ``loc:@X`` joins group X (the first
   node with a key is its root) and every node joins the group of its own name. A conflict is an
   error, or with soft placement the node just stays out of that group. Every failed join is
   recorded (:class:`ColocationConflict`, in :attr:`Placement.conflicts` or
   :attr:`PlacementError.conflicts`): the step goes on past a conflict and then raises the first,
   so the error is TF's and PV104 reads all of them from here.
4. **Assignment.** Pass 1 visits nodes in id order, skipping generators (no inputs, one non-ref
   output); the first node of a group placed decides for the whole group. ``Shape``/``Size``/
   ``Rank`` and pass-through ``Identity`` nodes follow their input's device when it is a candidate.
   Pass 2 places generators on the device of their consumers when all are on one device.
   Candidates are ordered as :func:`placeviz.devices.sort_devices` does (kernel priority, device
   type, local to the master task first, then the name as a string).

Node ids follow TF's graph construction: a topological order, ties broken by GraphDef position
(:attr:`placeviz.graph.Graph.topological_order`).

Before that, by default, devices are rewritten the way ``tf.compat.v1.import_graph_def`` rewrites
them (:func:`imported_devices`), since that is how a GraphDef file reaches a session from Python:
every device is canonicalised by Python's ``DeviceSpec`` (``/device:cpu:1`` becomes CPU:1), and an
op with ``_class`` colocation drops its own device for the first device among the ops it names.
For a graph built in Python this changes nothing; it matters for hand-edited or foreign
GraphDefs. ``PlacerConfig(python_import=False)`` reads the devices as TF's C++ does
(``ParseFullName``: case-sensitive types, no ``CPU:2`` local form).

Speed (TF's own placer takes about 14 us per node at 200k nodes). In the Python code, per-node work is kept to list lookups, numpy does the passes that are the same for every
node, and everything that depends on a few distinct values is computed once per value:

* op facts (input/output types, supported device types) once per distinct (op type, values of the
  attrs those facts depend on), see :func:`placeviz.ops.key_attrs_of_facts`; the values come from
  :meth:`placeviz.graph.Graph.attr_keys`, one pass over the protos shared with the ``_class`` read
  (the largest single cost left);
* nodes of groups that need no per-node decision placed in bulk (:meth:`_Placer.run`);
* a colocation group's constraints (assigned, resource and requested device, supported types) as
  one interned int (:class:`_Constraints`), so merging two groups, placing a group and finding its
  candidates are dict lookups on ints instead of ``ParsedName`` arithmetic;
* union-find in flat lists, with TF's union order and rank rule, so group roots are the same;
* candidates as tuples of device indices, cached per group state.

This Python code is the executable specification. When built, a native core
(``_placer_kernels.place``, see :meth:`_Placer.run_native`) does the whole of :meth:`_Placer.run`
after the members are made: the ref/resource and ``_class`` unions, the group roots and the
assignment, over the IR arrays, reading the TF device-name rules through this module's constraint
tables (:class:`_Constraints`, :meth:`_Placer._compute_candidates`) so that those rules are written
once. It returns the whole result or declines (an error to word, an input it does not take), and
then :meth:`_Placer.run` runs from its start on a new ``_Placer``. ``tests/test_placer_native.py``
compares the two field by field.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from itertools import compress, repeat
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from placeviz.devices import (
    DeviceMergeError,
    DeviceSet,
    DeviceSpecError,
    ParsedName,
    are_compatible,
    canonical_device,
    merge_dev_names,
    merge_override_dev_names,
    merge_unset_dev_names,
    parse_full_name,
    sort_devices,
)
from placeviz.errors import PlacevizError
from placeviz.gcpause import gc_paused
from placeviz.graph import CONTROL, AttrKeys, Graph
from placeviz.native import kernels
from placeviz.op_kinds import NEXT_ITERATION_OPS
from placeviz.ops import DT_RESOURCE, REF_OFFSET, fact_key_attrs

if TYPE_CHECKING:
    import numpy
    from numpy.typing import NDArray

    from placeviz.devices import Device
    from placeviz.ops import OpTable
    from placeviz.protos import NodeDef

    IdArray = NDArray[numpy.int64]
    Mask = NDArray[numpy.bool_]

TypeSet = tuple[tuple[str, int], ...]
"""Supported device types with their kernel priorities, in the op's order: ((type, priority), ...)."""
Facts = tuple[int, tuple[int, ...], int | None]
"""An op's facts for the placer: (type set id, ref/resource data-input ports, type of the only output or None)."""

_kernels = kernels("placement._placer_kernels")  # the native core (see placeviz.native)

EMPTY = ParsedName()
METADATA_OPS = frozenset({"Shape", "Size", "Rank"})
PASS_THROUGH_OP = "Identity"  # follows its input when it passes a tensor between equal requests
# InputColocationExemptionRegistry: ops that forward resource inputs instead of dereferencing them.
EXEMPT_FROM_RESOURCE_COLOCATION = frozenset({
    "IdentityN", "PartitionedCall", "StatefulPartitionedCall",
    "FlatMapDataset", "InterleaveDataset", "ParallelInterleaveDataset", "ParallelInterleaveDatasetV2",
    "ParallelInterleaveDatasetV3", "ParallelInterleaveDatasetV4", "MapAndBatchDataset",
    "MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2", "GroupByWindowDataset",
    "ScanDataset", "FilterDataset", "ReduceDataset", "TakeWhileDataset",
})

# Why a node got its device (``Placement.reason``).
WHY_GROUP = 0  # placed with its colocation group (not reported at present: such nodes get WHY_DEFAULT)
WHY_METADATA = 1  # Shape/Size/Rank follows its input
WHY_IDENTITY = 2  # pass-through Identity follows its input
WHY_GENERATOR = 3  # generator follows its consumers
WHY_DEFAULT = 4  # first candidate in TF's device order
WHY_NAMES = {
    WHY_GROUP: "placed with its colocation group", WHY_METADATA: "metadata op follows its input",
    WHY_IDENTITY: "pass-through Identity follows its input",
    WHY_GENERATOR: "generator follows its consumers", WHY_DEFAULT: "first candidate in TF's device order",
}


class PlacementError(PlacevizError):
    """The graph cannot be placed; the message follows TF's, naming the nodes and devices.

    ``conflicts``: when the ``_class`` step rejected the graph, every join that failed in it
    (:class:`ColocationConflict`; the message is the first one's), else empty.
    """

    def __init__(self, message: str, conflicts: tuple[ColocationConflict, ...] = ()):
        super().__init__(message)
        self.conflicts = conflicts


@dataclass(frozen=True)
class ColocationConflict:
    """One ``_class`` join that failed (``ColocationGraph::ColocateAllNodes`` in
    ``tensorflow/core/common_runtime/colocation_graph.cc``): ``node`` could not join the group of
    the ``loc:@key`` it names. Names, not ids: a rejected graph may be the setter's, not the caller's.

    TF stops at the first one (or, with soft placement, leaves the node out of that group and goes
    on); the placer goes on in both cases, so that each is recorded once, here, for the lint rule
    that reports them (PV104) to read instead of merging the groups a second time.
    """

    node: str
    key: str  # the loc:@ name whose group the node failed to join
    other: str  # the group's first node with that key, which TF's message names
    request: str  # the node's requested device (after the import rewrite), "" for none
    group_request: str  # the requested device of the key's group when the join failed
    detail: str | None  # DeviceMergeError's text; None when no device type supports both groups
    message: str  # the placer's (TF's) error message
    culprits: tuple[str, ...] = ()  # members of the key's group that request another device (up to 3)


@dataclass(frozen=True)
class PlacerConfig:
    allow_soft_placement: bool = False
    master_task: str | None = "/job:worker/replica:0/task:0"  # None: every device is local (DirectSession)
    python_import: bool = True  # rewrite devices as tf.compat.v1.import_graph_def does first

    @property
    def master(self) -> ParsedName | None:
        """``master_task`` parsed (None: no master, or a name DeviceNameUtils cannot parse)."""
        return parse_full_name(self.master_task) if self.master_task else None

    @property
    def client_device(self) -> str | None:
        """CPU:0 of the session's task: where a client's feeds come from and fetches go to
        (subgraph.cc's ``_Recv``/``_Send`` feed and fetch nodes sit on the client device)."""
        m = self.master
        if m is None or m.job is None:
            return None
        return f"/job:{m.job}/replica:{m.replica or 0}/task:{m.task or 0}/device:CPU:0"


def imported_devices(graph: Graph) -> list[str]:
    """The devices ``tf.compat.v1.import_graph_def`` gives the nodes (``importer._ProcessNewOps``).

    Ops without ``_class`` get their device canonicalised by Python's DeviceSpec. Ops colocated by
    ``_class`` (names other than their own) first lose their device; then, in node order, each
    takes the device of the first op it names that has one (names of missing ops are skipped).
    """
    names, index = graph.names, graph.colocated_name_ids  # only names some _class names are looked up
    # Canonicalise once per distinct device string; a malformed one is an error only on a node
    # that keeps its device (the first such node in id order is reported).
    canonical: dict[str, str | DeviceSpecError] = {"": ""}
    device: str | DeviceSpecError  # a graph's device below, then a canonical one or its error
    for device in set(graph.devices):
        if device:
            try:
                canonical[device] = canonical_device(device)
            except DeviceSpecError as e:
                canonical[device] = e
    devices = list(map(canonical.__getitem__, graph.devices))
    if _kernels is not None and not any(isinstance(c, DeviceSpecError) for c in canonical.values()):
        # The rest, natively, as one function (None: declined, done below); it reads DeviceSpec's
        # rule from a table of its own.
        done = _kernels.imported_colocation(colocated_names=graph.colocated_names, names=names, index=index,
                                            devices=devices, recanonical=_Cache(canonical_device))
        if done is not None:
            native: list[str] = done
            return native
    # (node, names of the other ops it is colocated with), node-id order; loc:@<own name> does not count
    colocated: list[tuple[int, tuple[str, ...]]] = []
    for i, located in graph.colocated_names.items():
        if names[i] in located:
            located = tuple(name for name in located if name != names[i])
        if located:
            colocated.append((i, located))
    colocated_ids: Any = list(map(operator.itemgetter(0), colocated))  # a set from below
    deque(map(devices.__setitem__, colocated_ids, repeat("")), maxlen=0)  # C-level: each loses its device
    if any(isinstance(c, DeviceSpecError) for c in canonical.values()):
        for i, device in enumerate(devices):
            if isinstance(device, DeviceSpecError):
                raise PlacementError(f"node {names[i]}: {device}") from None
    recanonical: dict[str, str] = {}

    def first_device(ids: list[int | None]) -> str | None:
        for j in ids:
            if j is not None and devices[j]:
                device = devices[j]
                canon = recanonical.get(device)  # type: ignore[arg-type]  # errors were raised above
                if canon is None:
                    canon = recanonical[device] = canonical_device(device)  # type: ignore[index,arg-type]
                return canon
        return None

    # Many ops name the same others (a variable's readers, assigns, slots). When none of those is
    # colocated itself, their devices are final already and the answer is the same for all of them:
    # it is computed once per tuple. Otherwise it depends on what earlier nodes took, in order.
    colocated_ids = set(colocated_ids)
    static: dict[tuple[str, ...], str | None] = {}

    def take_device(i: int, others: tuple[str, ...]) -> None:
        device = static.get(others, static)  # the dict itself: not known yet
        if device is static:
            ids = list(map(index.get, others))
            device = first_device(ids)
            if colocated_ids.isdisjoint(ids):
                static[others] = device
        if device is not None:
            devices[i] = device  # type: ignore[assignment]

    for i, others in colocated:
        take_device(i, others)
    return devices  # type: ignore[return-value]


@dataclass
class Placement:
    """The placer's result: one full device name per node, and why."""

    graph: Graph
    devices: list[str]
    reason: list[int]
    group_root: list[int]  # colocation group representative per node
    # group root -> its first candidates (up to 8, TF's order) when the group was first visited,
    # in the order groups were first visited; made on first use by this function (a dict entry
    # per group costs a quarter of a second at 1M nodes, and only ``explain`` reads it)
    make_candidates: Callable[[], dict[int, list[str]]] = field(default=dict, repr=False, compare=False)
    # the ``_class`` joins that failed (soft placement only: without it the placer raises them)
    conflicts: tuple[ColocationConflict, ...] = ()
    # (producer, consumer) of every ref/resource edge the placer joined (step 2), consumers in
    # node-id order; made on first use by this function
    make_ref_edges: Callable[[], list[tuple[int, int]]] = field(default=list, repr=False, compare=False)
    # the device each node requests as the placer read it (after the import rewrite,
    # :func:`imported_devices`): with ``group_root``, which groups request a device at all
    requested: list[str] = field(default_factory=list, repr=False, compare=False)
    # the op-fact attr keys of the graph's nodes the placer read (:func:`read_fact_attrs`), handed
    # on to the partitioner (``partition(..., attr_keys=)``: its memory types are op facts too)
    attr_keys: AttrKeys | None = field(default=None, repr=False, compare=False)

    @cached_property
    def candidates(self) -> dict[int, list[str]]:
        return self.make_candidates()

    @cached_property
    def ref_edges(self) -> list[tuple[int, int]]:
        """The ref and resource edges whose ends the placer put in one group (placer.cc colocates
        the producer of a ref or resource input with its consumer, except into the ops of
        :data:`EXEMPT_FROM_RESOURCE_COLOCATION`): the answer to "does a ref/resource edge decide
        this node's device", for the rules that ask it (PV106)."""
        return self.make_ref_edges()

    @cached_property
    def group_requested(self) -> Mask:
        """Per node (numpy bool array): whether some member of its colocation group requests a
        device, i.e. whether the group's merged request (``ColocationGraph::Member``'s
        ``requested_device_name_``, ``tensorflow/core/common_runtime/colocation_graph.cc``) names
        something, so that the request, not the session, decides where the whole group runs. The
        groups are the placer's (``_class`` entries, ref and resource edges, a join soft placement
        skipped), so a rule asking "is this node bound to a placed one" (PV106) reads them here
        instead of reading ``_class`` again. Built on first use, once (a byte per node: a set of
        the roots would hold an int per group)."""
        import numpy as np

        n = len(self.group_root)
        named = {d for d in set(self.requested) if d and (p := parse_full_name(d)) is not None and p.has_some_details}
        root = np.asarray(self.group_root, dtype=np.int32)  # node ids fit (placeviz.limits)
        by_root = np.zeros(n, dtype=np.bool_)
        if named:
            by_root[root[np.frombuffer(bytes(map(named.__contains__, self.requested)), dtype=np.bool_)]] = True
        out: Mask = by_root[root]
        return out

    def explain(self, i: int) -> dict[str, str | list[str]]:
        root = self.group_root[i]
        members = [self.graph.names[j] for j in range(len(self.graph)) if self.group_root[j] == root]
        return {
            "device": self.devices[i],
            "reason": WHY_NAMES[self.reason[i]],
            "requested": self.graph.devices[i],
            "colocation_group": members[:20] + ([f"... {len(members) - 20} more"] if len(members) > 20 else []),
            "candidates": self.candidates.get(root, [])[:8],
        }


def place(graph: Graph, device_set: DeviceSet, config: PlacerConfig = PlacerConfig(),
          op_table: OpTable | None = None) -> Placement:
    """Assign every node of ``graph`` a device of ``device_set``; see the module docstring."""
    if op_table is None:
        from placeviz.ops import load_op_table

        op_table = load_op_table()
    with gc_paused():
        attr_keys = read_fact_attrs(graph, op_table)
        if _kernels is not None:
            placement = _Placer(graph, device_set, config, op_table, attr_keys).run_native()
            if placement is not None:
                return placement
        return _Placer(graph, device_set, config, op_table, attr_keys).run()


def read_fact_attrs(graph: Graph, op_table: OpTable) -> AttrKeys:
    """Read what the placer needs from every node's attrs, in one pass: the op facts' attr keys
    (returned with the attrs asked for), and ``_class`` if not read yet.

    Both are facts of the graph's own nodes that :class:`Graph` keeps (``attr_keys`` and
    ``colocation`` in :attr:`Graph.CACHES`), computed by :meth:`Graph.attr_keys`; nothing is
    written into the graph from here. Call it on the setter's input before the setter runs and
    hand the value to the setter (``run_setter(..., attr_keys=...)``, its resource test then asks
    the op table once per op and attr key); the setter's result takes the values from its source
    instead of reading the NodeDefs again (``placeviz.placement.setter_stage`` does both).
    """
    key_attrs = fact_key_attrs(op_table, set(graph.ops))
    return key_attrs, graph.attr_keys(key_attrs)


_K = TypeVar("_K")
_V = TypeVar("_V")


class _Cache(dict[_K, _V], Generic[_K, _V]):
    """A dict that fills a missing entry with ``compute(key)``; if that raises, nothing is stored.

    A lookup that hits costs one C-level dict access, which is what the per-node loops need.
    """

    __slots__ = ("compute",)

    def __init__(self, compute: Callable[[_K], _V]):
        super().__init__()
        self.compute = compute

    def __missing__(self, key: _K) -> _V:
        value = self[key] = self.compute(key)
        return value


class _Constraints:
    """The constraints of colocation groups (``ColocationGraph::Member``), interned as ints.

    A group's constraints are its assigned, resource and requested device (``ParsedName``, each
    interned as a *name id*) and its supported device types (a *type set id*); a graph has few
    distinct combinations, so each is interned as a *state*. Merging two groups and placing a group
    on a device are then computed once per pair of states and looked up afterwards. A merge that
    raises :class:`DeviceMergeError` is not cached (it raises again, with the same message).
    """

    merge_error = DeviceMergeError  # what ``merged`` raises for devices that cannot merge

    def __init__(self, soft: bool):
        self.soft = soft
        self.names: list[ParsedName] = [EMPTY]
        self._name_ids: dict[ParsedName, int] = {EMPTY: 0}
        self.type_sets: list[tuple[tuple[str, int], ...]] = []  # ((device type, kernel priority), ...)
        self._type_set_ids: dict[TypeSet, int] = {}
        self.states: list[tuple[int, int, int, int]] = []  # (assigned, resource, requested, type set)
        self._state_ids: dict[tuple[int, int, int, int], int] = {}
        # (state of the surviving root, state of the other) -> merged state, or None when no device
        # type supports both (ColocateNodes' error).
        self.merged = _Cache(self._merge)
        self.placed = _Cache(self._place)  # (state, name id of a device) -> state once placed there
        self.compatible = _Cache(self._compatible)  # (name id, name id) -> AreCompatibleDevNames
        self.unset = _Cache(self._unset)  # (name id, name id) -> MergeUnsetDevNames
        self._merged_types = _Cache(self._merge_types)

    def name_id(self, name: ParsedName) -> int:
        k = self._name_ids.get(name)
        if k is None:
            k = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return k

    def type_set_id(self, types: TypeSet) -> int:
        k = self._type_set_ids.get(types)
        if k is None:
            k = self._type_set_ids[types] = len(self.type_sets)
            self.type_sets.append(types)
        return k

    def state(self, assigned: int, resource: int, requested: int, types: int) -> int:
        key = (assigned, resource, requested, types)
        k = self._state_ids.get(key)
        if k is None:
            k = self._state_ids[key] = len(self.states)
            self.states.append(key)
        return k

    def _merge(self, key: tuple[int, int]) -> int | None:
        (a1, r1, q1, t1), (a2, r2, q2, t2) = self.states[key[0]], self.states[key[1]]
        names = self.names
        assigned = merge_dev_names(names[a1], names[a2])
        resource = merge_dev_names(names[r1], names[r2])
        requested = merge_dev_names(names[q1], names[q2], self.soft)
        requested = merge_unset_dev_names(resource, merge_unset_dev_names(assigned, requested))
        types = self._merged_types[t1, t2]
        if not self.type_sets[types]:
            return None
        return self.state(self.name_id(assigned), self.name_id(resource), self.name_id(requested), types)

    def _place(self, key: tuple[int, int]) -> int:
        state, device = key
        assigned, resource, requested, types = self.states[state]
        if assigned == device:
            return state
        names = self.names
        return self.state(self.name_id(merge_dev_names(names[assigned], names[device])),
                          self.name_id(merge_override_dev_names(names[resource], names[device])),
                          self.name_id(merge_override_dev_names(names[requested], names[device])), types)

    def _merge_types(self, key: tuple[int, int]) -> int:
        return self.type_set_id(_merge_supported(self.type_sets[key[0]], self.type_sets[key[1]]))

    def _unset(self, key: tuple[int, int]) -> int:
        return self.name_id(merge_unset_dev_names(self.names[key[0]], self.names[key[1]]))

    def _compatible(self, key: tuple[int, int]) -> bool:
        return are_compatible(self.names[key[0]], self.names[key[1]])


class _Placer:
    """One placement run. Union-find over node ids in flat lists; ``state[root]`` is the group's
    :class:`_Constraints` state (meaningful at group roots only)."""

    def __init__(self, graph: Graph, device_set: DeviceSet, config: PlacerConfig, op_table: OpTable,
                 attr_keys: AttrKeys | None = None):
        """``attr_keys``: the op-fact attr keys of ``graph``'s nodes (:func:`read_fact_attrs`), when
        the caller read them; else they are read here."""
        if not len(device_set):
            raise PlacementError("No devices are registered")
        self.graph = graph
        self.device_set = device_set
        self.config = config
        self.soft = config.allow_soft_placement
        self.op_table = op_table
        self.attr_keys = attr_keys if attr_keys is not None else read_fact_attrs(graph, op_table)
        self.device_types = tuple(device_set.device_types())
        n = len(graph)
        self.parent = [-1] * n  # union-find: parent id, or -1 for a group root
        self.rank = [0] * n
        self.order = graph.topological_order
        self._order_np: IdArray | None = None  # see _order_array
        self.requested = imported_devices(graph) if config.python_import else graph.devices
        self.constraints = _Constraints(self.soft)
        self.state: list[int] = []  # filled by _init_members
        self.is_generator = [False] * n
        self.ref_inputs: list[tuple[int, tuple[int, ...]]] = []  # (node, ref/resource data ports), id order
        # Devices by index; equal names count as one device (the first), as FindDeviceByName does.
        devices = device_set.devices
        self.device_names = [d.name for d in devices]
        self.device_index: dict[str, int] = {}
        for k, d in enumerate(devices):
            self.device_index.setdefault(d.name, k)
        self.device_name_id = [self.constraints.name_id(d.parsed) for d in devices]
        self.candidates_of: dict[int, tuple[int, ...]] = {}  # state -> candidate device indices
        self.conflicts: list[ColocationConflict] = []  # the _class joins that failed, in visit order

    def _order_array(self, np: ModuleType) -> IdArray:
        """The visit order as a numpy array (made once: three passes use it)."""
        order = self._order_np
        if order is None:
            order = self._order_np = np.asarray(self.order, dtype=np.int64)
        return order

    # ------------------------------------------------------------------ union-find
    def find(self, i: int) -> int:
        parent = self.parent
        root = i
        while parent[root] >= 0:
            root = parent[root]
        while i != root:  # path compression
            parent[i], i = root, parent[i]
        return root

    # ------------------------------------------------------------------ members
    def _init_members(self) -> None:
        """Supported types, requested and resource device of every node, as its initial state.

        Errors come from the first node (in id order) that has one, as in TF: its op facts, then
        its requested device.
        """
        graph, table, constraints = self.graph, self.op_table, self.constraints
        op_types = set(graph.ops)
        missing = sorted(op for op in op_types if op not in table)
        if missing:
            from placeviz.ops import UnknownOpError

            raise UnknownOpError(missing, table.tf_version)
        requested_ids: dict[str, int | None] = {"": 0}
        for device in set(self.requested):
            if device:
                parsed = parse_full_name(device)
                requested_ids[device] = None if parsed is None else constraints.name_id(parsed)
        malformed = None in requested_ids.values()

        # Op facts: ask the table for the first node (in visit order) of every distinct key, in
        # the order those first nodes are visited, so that the first failing node (facts first,
        # then its requested device, as TF checks a node) raises.
        import numpy as np

        n = len(graph)
        key_of_node, num_keys = self._fact_keys(np)
        order = self._order_array(np)
        key_in_order = key_of_node[order]
        first_pos = np.full(num_keys, n, dtype=np.int64)
        np.minimum.at(first_pos, key_in_order, np.arange(n, dtype=np.int64))
        nodes, requested = graph.attr_nodes, self.requested
        malformed_at = n  # position in visit order of the first node with a malformed device
        if malformed:
            req = list(map(requested_ids.__getitem__, requested))
            bad = np.nonzero(np.frombuffer(bytes(map(operator.is_, req, repeat(None))), dtype=np.bool_)[order])[0]
            malformed_at = int(bad[0])

        def raise_malformed() -> None:
            i = int(order[malformed_at])
            raise PlacementError(f"Malformed device specification '{requested[i]}' in node {graph.names[i]}")

        facts: list[Facts] = [(0, (), None)] * num_keys  # every entry is set below
        for k in np.argsort(first_pos, kind="stable").tolist():
            position = int(first_pos[k])
            if malformed_at < position:
                raise_malformed()
            facts[k] = self._facts(nodes[int(order[position])])
        if malformed:
            raise_malformed()

        # Nodes with ref or resource data inputs, in visit order.
        has_ref = np.asarray([bool(f[1]) for f in facts], dtype=np.bool_)
        with_ref = order[has_ref[key_in_order]].tolist()
        ports = [f[1] for f in facts]
        self.ref_inputs.extend(zip(with_ref, map(ports.__getitem__, key_of_node[with_ref].tolist()), strict=True))

        # Initial states: (requested, type set) interned in node-id order of first use.
        key_types = np.asarray([f[0] for f in facts], dtype=np.int64)
        node_types = key_types[key_of_node]
        # ``pair``: a number per distinct (request id, type set), so grouping by it (here and for the
        # resource generators below) is grouping by the pair.
        # None ids (malformed) were raised above.
        pair, firsts = _request_pairs(np, requested, requested_ids, node_types, len(constraints.type_sets))  # type: ignore[arg-type]
        pair_state = np.asarray([constraints.state(0, 0, requested_ids[requested[i]], int(node_types[i]))  # type: ignore[arg-type]
                                 for i in firsts], dtype=np.int64)
        state = pair_state[pair]

        # Generators: no data inputs and one output. Of a ref or resource, the request is also a
        # resource device; their states are interned after the others, in node-id order of first use.
        single_output = np.asarray([-1 if f[2] is None else f[2] for f in facts], dtype=np.int64)[key_of_node]
        no_data = _without_data_inputs_mask(np, graph)
        generator = no_data & (single_output >= 0) & (single_output < REF_OFFSET)
        self.is_generator = generator.tolist()
        resource_generator = np.nonzero(no_data & ((single_output > REF_OFFSET) | (single_output == DT_RESOURCE)))[0]
        if len(resource_generator):
            numbers, firsts = _numbered_by_first_use(np, pair[resource_generator])
            firsts = resource_generator[firsts].tolist()
            pair_state = np.asarray([constraints.state(0, requested_ids[requested[i]], requested_ids[requested[i]],  # type: ignore[arg-type]
                                                       int(node_types[i])) for i in firsts], dtype=np.int64)
            state[resource_generator] = pair_state[numbers]
        self.state = state.tolist()

    def _fact_keys(self, np: ModuleType) -> tuple[IdArray, int]:
        """Number every distinct (op, values of its key attrs); return each node's number (numpy
        int64 array) and the count.

        The values are the run's :attr:`attr_keys` (:func:`read_fact_attrs`: one pass over the
        NodeDefs, shared with the ``_class`` read and with the setter's source graph when
        :func:`placeviz.placement.place_graph` asked for them there). Numbers are dense, in order
        of first occurrence.
        """
        graph = self.graph
        # One pass through a dict that gives a new key the next number: dense, with no sort of a
        # million numbers afterwards.
        numbering: _Cache[tuple[str, object], int] = _Cache(lambda _: len(numbering))
        keys = zip(graph.ops, self.attr_keys[1], strict=True)
        numbers: IdArray = np.asarray(list(map(numbering.__getitem__, keys)), dtype=np.int64)
        return numbers, len(numbering)

    def _facts(self, node: NodeDef) -> Facts:
        """(supported type set id, ref/resource data-input ports, type of the only output or None)."""
        types = self.op_table.io_types(node)
        assert types is not None  # None only for an unknown op, which _init_members refused first
        in_types, out_types = types
        supported = self.op_table.supported_device_types(node, self.device_types)
        if not supported:
            raise PlacementError(
                f"No OpKernel was registered to support Op '{node.op}' used by node {node.name}; "
                f"registered devices: [{', '.join(sorted(set(self.device_types)))}]")
        if node.op in EXEMPT_FROM_RESOURCE_COLOCATION:
            ref_ports: tuple[int, ...] = ()
        else:
            ref_ports = tuple(p for p, t in enumerate(in_types) if t > REF_OFFSET or t == DT_RESOURCE)
        single_output = out_types[0] if len(out_types) == 1 else None
        return self.constraints.type_set_id(tuple(supported)), ref_ports, single_output

    # ------------------------------------------------------------------ colocation
    def _colocate(self, x: int, y: int) -> str | None:
        """ColocateNodes: merge the groups of x and y; an error message, or None on success."""
        failure = self._join(x, y)
        return None if failure is None else failure[0]

    def _join(self, x: int, y: int) -> tuple[str, str | None] | None:
        """:meth:`_colocate`, failing with (TF's message, the DeviceMergeError's text or None
        when no device type supports both groups)."""
        parent = self.parent
        xr = x if parent[x] < 0 else self.find(x)
        yr = y if parent[y] < 0 else self.find(y)
        if xr == yr:
            return None
        rank, state = self.rank, self.state
        if rank[xr] < rank[yr]:
            new, old = yr, xr
        else:
            new, old = xr, yr
        try:
            merged = self.constraints.merged[state[new], state[old]]
        except DeviceMergeError as e:
            return f"Cannot colocate nodes {self.graph.names[x]} and {self.graph.names[y]}: {e}", str(e)
        if merged is None:
            a, b = (self.constraints.type_sets[self.constraints.states[state[r]][3]] for r in (new, old))
            return (f"Cannot colocate nodes {self.graph.names[x]} and {self.graph.names[y]} because no "
                    "device type supports both of those nodes and the other nodes colocated with them "
                    f"({', '.join(t for t, _ in a)} vs {', '.join(t for t, _ in b)})"), None
        state[new] = merged
        parent[old] = new
        if rank[xr] == rank[yr]:
            rank[new] += 1
        return None

    def _colocate_resource_edges(self) -> None:
        """Join each node with the producers of its ref/resource data inputs, in node-id order."""
        for src, dst in _ref_edges(self.graph, self.ref_inputs):
            self._colocate_ref_edge(src, dst)

    def _colocate_ref_edge(self, src: int, dst: int) -> None:
        """One ref/resource edge src -> dst: check the groups' devices, then join them."""
        g, constraints, state = self.graph, self.constraints, self.state
        names, states, compatible = constraints.names, constraints.states, constraints.compatible
        parent, rank, find = self.parent, self.rank, self.find
        sr = src if parent[src] < 0 else find(src)
        dr = dst if parent[dst] < 0 else find(dst)
        s, d = states[state[sr]], states[state[dr]]  # (assigned, resource, requested, types)
        if not (compatible[s[0], d[0]] and compatible[s[1], d[1]]):
            kind = "assigned" if not compatible[s[0], d[0]] else "resource"
            position = 0 if kind == "assigned" else 1
            raise PlacementError(
                f"Cannot place the graph because a reference or resource edge connects "
                f"colocation groups with incompatible {kind} devices: "
                f"{names[s[position]].to_string()} vs {names[d[position]].to_string()}. "
                f"The edge src node is {g.names[src]} , and the dst node is {g.names[dst]}")
        if not compatible[s[2], d[2]]:
            # TF silently drops the consumer's request in favour of the producer's.
            assigned, resource, _, types = d
            requested = constraints.unset[resource, constraints.unset[assigned, s[2]]]
            state[dr] = constraints.state(assigned, resource, requested, types)
        # The union is :meth:`_colocate` inlined when the merged state is cached (see
        # _colocate_class_groups); otherwise it computes the merge or the error.
        if sr == dr:
            return
        new, old = (dr, sr) if rank[sr] < rank[dr] else (sr, dr)
        merged = constraints.merged.get((state[new], state[old]))
        if merged is not None:
            state[new] = merged
            parent[old] = new
            if rank[sr] == rank[dr]:
                rank[new] += 1
            return
        error = self._colocate(src, dst)
        if error:
            raise PlacementError(
                "Nodes were connected by a reference connection (requiring them to be on the same "
                f"device), but the two nodes were assigned two different devices: {error}")

    def _colocate_class_groups(self) -> None:
        """Join ``loc:@X`` groups in node-id order; the first node with a key is the group's root.

        Every node also joins the group of its own name, but only a name some ``loc:@`` names can
        ever be looked up again, so the others are skipped.
        """
        roots: dict[str, int] = {}
        keys_of, visit = self._class_keys()
        # The union is :meth:`_colocate` inlined (100k+ calls): when the merged state of the two
        # groups is already cached and valid, do what it does; otherwise call it, which computes
        # the merge or returns the error message.
        parent, rank, state, find = self.parent, self.rank, self.state, self.find
        merged_states = self.constraints.merged
        for i in visit:
            for key in keys_of[i]:
                root = roots.get(key)
                if root is None:
                    roots[key] = i
                    continue
                xr = i if parent[i] < 0 else find(i)
                yr = parent[root]  # the key's first node: a root, or (compressed) one step below one
                if yr < 0:
                    yr = root
                elif parent[yr] >= 0:
                    yr = find(root)
                if xr == yr:
                    continue
                new, old = (yr, xr) if rank[xr] < rank[yr] else (xr, yr)
                merged = merged_states.get((state[new], state[old]))
                if merged is None:
                    group_state = state[yr]  # the key's group before the join (for the record)
                    failure = self._join(i, root)
                    if failure is not None:
                        self._record_conflict(i, key, root, group_state, *failure)
                    continue
                state[new] = merged
                parent[old] = new
                if rank[xr] == rank[yr]:
                    rank[new] += 1
        if self.conflicts:
            self._name_culprits()
            if not self.soft:
                raise PlacementError(self.conflicts[0].message, tuple(self.conflicts))

    def _record_conflict(self, i: int, key: str, root: int, group_state: int, message: str,
                         detail: str | None) -> None:
        """Keep a failed ``_class`` join (:class:`ColocationConflict`). TF stops at the first
        without soft placement; the step goes on, the node left out of that group as with soft
        placement, and raises the first once every join was tried (see :meth:`_name_culprits`)."""
        names, constraints = self.graph.names, self.constraints
        group_request = constraints.names[constraints.states[group_state][2]].to_string()
        self.conflicts.append(ColocationConflict(node=names[i], key=key, other=names[root], request=self.requested[i],
                                                 group_request=group_request, detail=detail, message=message))

    def _name_culprits(self) -> None:
        """Fill each conflict's ``culprits``: up to 3 members (id order) of the key's group, as the
        ``_class`` step left it, that request a device other than the node's. One pass over the
        groups for all conflicts (there are few; a graph has 1M nodes)."""
        import numpy as np

        index, requested = self.graph.ids_of(c.other for c in self.conflicts), self.requested
        root = _roots(np, self.parent)
        wanted = {int(root[index[c.other]]) for c in self.conflicts}
        members: dict[int, list[int]] = {r: [] for r in wanted}
        in_wanted = np.isin(root, np.fromiter(wanted, dtype=np.int64, count=len(wanted)))
        for j in np.flatnonzero(in_wanted).tolist():
            if requested[j]:
                members[int(root[j])].append(j)
        names = self.graph.names
        for k, c in enumerate(self.conflicts):
            group = members[int(root[index[c.other]])]
            culprits = tuple(names[j] for j in group if requested[j] != c.request)[:3]
            self.conflicts[k] = replace(c, culprits=culprits)

    def _class_keys(self) -> tuple[list[tuple[str, ...]], list[int]]:
        """(keys_of, visit) for :meth:`_colocate_class_groups`.

        ``keys_of``: the keys each node joins, in a list by node id (walked in order, it beats a
        dict lookup per node at 1M nodes): its loc:@ names, then its own name if some loc:@ names
        it. ``visit``: only the nodes with keys, in visit order.
        """
        g = self.graph
        import numpy as np

        keys_of: list[tuple[str, ...]] = [()] * len(g)
        colocated_names = g.colocated_names
        deque(map(keys_of.__setitem__, colocated_names.keys(), colocated_names.values()), maxlen=0)  # C-level fill
        for name, i in g.colocated_name_ids.items():
            keys_of[i] += (name,)
        order = self._order_array(np)
        with_keys = np.frombuffer(bytes(map(bool, keys_of)), dtype=np.bool_)
        return keys_of, order[with_keys[order]].tolist()

    # ------------------------------------------------------------------ candidates
    def _filtered(self, devices: Sequence[Device], types: TypeSet) -> list[Device]:
        priority = dict(types)
        kept = [d for d in devices if d.device_type in priority]
        return sort_devices(kept, priority, self.config.master_task) if kept else []

    def _candidates(self, i: int, root: int) -> tuple[int, ...]:
        """The candidate devices (indices, TF's order) of node ``i``'s group; raises if there are none."""
        st = self.state[root]
        devices = self.candidates_of.get(st)
        if devices is None:
            devices = self.candidates_of[st] = self._compute_candidates(st)
        if not devices:
            requested = self.constraints.names[self.constraints.states[st][2]]
            if requested.has_some_details:
                raise PlacementError(self._no_device_message(i, root))
            raise PlacementError(
                f"Cannot assign a device for operation {self.graph.names[i]}: no OpKernel registered "
                f"to support this operation ({self.graph.ops[i]}) on any device of the cluster")
        return devices

    def _compute_candidates(self, st: int) -> tuple[int, ...]:
        names = self.constraints.names
        requested: Any  # an id, then its ParsedName
        assigned, resource, requested, types = self.constraints.states[st]
        requested, type_set = names[requested], self.constraints.type_sets[types]
        if requested.has_some_details:
            devices = self.device_set.matching(requested)
            if devices:
                devices = self._filtered(devices, type_set)
            if not devices and self.soft:
                devices = self._soft_candidates(requested, type_set, names[assigned], names[resource])
        else:
            devices = self._filtered(self.device_set.devices, type_set)
        return tuple(self.device_index[d.name] for d in devices)

    def _soft_candidates(self, r: ParsedName, types: TypeSet, assigned: ParsedName,
                         resource: ParsedName) -> list[Device]:
        def without_type(keep_type: bool, keep_id: bool) -> ParsedName:
            return ParsedName(r.job, r.replica, r.task, r.type if keep_type else None, r.id if keep_id else None)

        preferred = without_type(assigned.type is not None or resource.type is not None,
                                 assigned.id is not None or resource.id is not None)
        devices = self._filtered(self.device_set.matching(preferred), types)
        if devices:
            return devices
        soft = without_type(assigned.type is not None, assigned.id is not None)
        return self._filtered(self.device_set.matching(soft), types)

    def _no_device_message(self, i: int, root: int) -> str:
        name = self.graph.names[i]
        requested = self.requested[i]
        group_requested: Any  # an id, then its ParsedName
        types: Any  # an id, then its type set
        _, _, group_requested, types = self.constraints.states[self.state[root]]
        group_requested = self.constraints.names[group_requested]
        types = self.constraints.type_sets[types]
        prefix = f"Cannot assign a device for operation {name}: "
        specified = parse_full_name(requested) if requested else None
        if specified is not None and specified == group_requested:
            if not self.device_set.matching(specified):
                available = ", ".join(sorted(self.device_set.names))
                gpu = (" The requested device appears to be a GPU, but CUDA is not enabled."
                       if (specified.type or "").lower() == "gpu" else "")
                return (f"{prefix}{name} was explicitly assigned to {requested} but available devices are "
                        f"[ {available} ]. Make sure the device specification refers to a valid device.{gpu}")
            if specified.type is not None:
                return (f"{prefix}Could not satisfy explicit device specification '{requested}' because no "
                        f"supported kernel for {specified.type} devices is available "
                        f"(op {self.graph.ops[i]} has kernels for {', '.join(t for t, _ in types)})")
            return f"{prefix}Could not satisfy explicit device specification '{requested}'"
        members = [self.graph.names[j] for j in range(len(self.graph)) if self.find(j) == root]
        return (f"{prefix}Could not satisfy explicit device specification '{requested}' because the node "
                f"{name} was colocated with a group of nodes that required incompatible device "
                f"'{group_requested.to_string()}' (group: {', '.join(members[:6])}"
                f"{' ...' if len(members) > 6 else ''}). All available devices "
                f"[{', '.join(self.device_set.names)}].")

    def _follow_input(self, consumers: dict[int, list[int]], identity_candidates: list[int]) -> list[int]:
        """Per node: the reason code if it follows its input's device when it can, else -1.

        ``Shape``/``Size``/``Rank`` always try; an Identity tries when it passes a tensor between
        two nodes that request the same device (TF's MatchIdentityOperation). ``consumers`` has
        the consumers of every candidate Identity (:meth:`_identity_candidates`).
        """
        g = self.graph
        follow = [-1] * len(g)
        requested = self.requested
        in_start, in_src = g.in_start, g.in_src
        for i in compress(range(len(g)), map(METADATA_OPS.__contains__, g.ops)):
            follow[i] = WHY_METADATA
        for i in identity_candidates:
            users = consumers[i]
            if len(users) > 1:
                continue
            # A node without consumers has one edge to the graph's sink, whose request is empty.
            dst_request = requested[users[0]] if users else ""
            if requested[in_src[in_start[i]]] == dst_request:
                follow[i] = WHY_IDENTITY
        return follow

    def _identity_candidates(self, np: ModuleType) -> list[int]:
        """Identity nodes with no requested device and exactly one input (data or control)."""
        g = self.graph
        identity = np.frombuffer(bytes(map(PASS_THROUGH_OP.__eq__, g.ops)), dtype=np.bool_)
        unrequested = np.frombuffer(bytes(map(operator.not_, self.requested)), dtype=np.bool_)
        one_input = np.diff(np.frombuffer(g.in_start, dtype=np.int32)) == 1
        ids: list[int] = np.nonzero(identity & unrequested & one_input)[0].tolist()
        return ids

    def _follow_and_consumers(self, np: ModuleType) -> tuple[list[int], dict[int, list[int]], Mask]:
        """What the assignment needs besides the groups: per node its :meth:`_follow_input` code,
        the consumers of generators and candidate Identity nodes (:func:`_consumers_of`), and
        the *plain* nodes (numpy bool array: no generator, no follower, no back-edge source; see
        :meth:`run`)."""
        g = self.graph
        identity_candidates = self._identity_candidates(np)
        consumers = _consumers_of(g, list(compress(range(len(g)), self.is_generator)) + identity_candidates)
        follow = self._follow_input(consumers, identity_candidates)
        plain: Mask = ~np.frombuffer(bytes(self.is_generator), dtype=np.bool_) & (np.asarray(follow, dtype=np.int8) < 0)
        plain &= ~np.frombuffer(bytes(map(NEXT_ITERATION_OPS.__contains__, g.ops)), dtype=np.bool_)
        return follow, consumers, plain

    # ------------------------------------------------------------------ run
    def run_native(self) -> Placement | None:
        """:meth:`run` by the native core (``_placer_kernels.place``), or None when it declines.

        The members are made here as :meth:`run` makes them (op facts and requests, with their
        errors); the native code then does the unions, the roots and the assignment over the IR
        arrays, reading the TF device-name rules through this run's constraint tables
        (:class:`_Constraints`' caches and :meth:`_compute_candidates`, filled on a miss). It
        declines at any error to word and at any input it does not handle; the caller then runs
        :meth:`run` on a new ``_Placer``, so nothing of this run is reused.
        """
        import numpy as np

        assert _kernels is not None
        g = self.graph
        self._init_members()
        done = _kernels.place(
            in_start=g.in_start, in_src=g.in_src, in_slot=g.in_slot, ops=g.ops, requested=self.requested,
            order=self.order, is_generator=self.is_generator, state=self.state, ref_inputs=self.ref_inputs,
            colocated_names=g.colocated_names, colocated_name_ids=g.colocated_name_ids,
            constraints=self.constraints, candidates=self._compute_candidates, device_names=self.device_names,
            device_name_id=self.device_name_id, metadata_ops=METADATA_OPS, identity_op=PASS_THROUGH_OP,
            why_metadata=WHY_METADATA, why_identity=WHY_IDENTITY, why_generator=WHY_GENERATOR,
            why_default=WHY_DEFAULT)
        if done is None:
            return None
        devices, reason, group_root, first_names = done
        order, is_generator = self._order_array(np), self.is_generator

        def candidates() -> dict[int, list[str]]:  # only ``explain`` reads them: made on first use
            return _candidates_table(np, np.asarray(group_root, dtype=np.int64), order,
                                     np.frombuffer(bytes(is_generator), dtype=np.bool_), first_names, None)

        return Placement(g, devices, reason, group_root, candidates, (),
                         partial(_ref_edge_list, g, self.ref_inputs), self.requested,
                         self.attr_keys)

    def run(self) -> Placement:
        import numpy as np

        g = self.graph
        self._init_members()
        self._colocate_resource_edges()
        self._colocate_class_groups()
        n = len(g)
        group_root_np = _roots(np, self.parent)  # groups are final now
        group_root = group_root_np.tolist()
        reason = [WHY_DEFAULT] * n
        assigned = [-1] * n  # device index per node, -1 until placed
        state, candidates_of, placed = self.state, self.candidates_of, self.constraints.placed
        device_names, device_name_id = self.device_names, self.device_name_id
        follow, consumers, plain = self._follow_and_consumers(np)
        in_start, in_src = g.in_start, g.in_src
        # Per group root, the names of its first 8 candidates when the group is first visited;
        # per candidate tuple, those names (shared).
        first_names: dict[int, tuple[str, ...]] = {}
        bulk_names = None  # see the bulk placement below
        candidate_names: dict[tuple[int, ...], tuple[str, ...]] = {}

        def names_of(devices: tuple[int, ...]) -> tuple[str, ...]:
            names = candidate_names.get(devices)
            if names is None:
                names = candidate_names[devices] = tuple(device_names[d] for d in devices[:8])
            return names

        order = self._order_array(np)
        generator_np = np.frombuffer(bytes(self.is_generator), dtype=np.bool_)
        visits = [order[~generator_np[order]], order[generator_np[order]]]  # pass 1, pass 2

        # Most nodes are in groups whose members are all "plain": not generators, not followers of
        # their input, not a NextIteration (whose consumers may be visited before it). Each member
        # of such a group takes the first candidate of the group's state, and placing the group
        # there leaves a state whose first candidate is the same device: checked per distinct
        # initial state (``settled``); groups whose state does not settle so go through the loop.
        # Their members are placed here in bulk, before the loop, which reads their devices only
        # through ``assigned``: with the same values it would have had, since pass 1 placed them
        # before any later node in the order, and the only inputs visited after their consumer
        # are NextIterations. A state without candidates leaves its groups to the loop, which
        # raises TF's error for the first node in visit order.
        not_plain_members = np.bincount(group_root_np[~plain], minlength=n)
        bulk = plain & (not_plain_members[group_root_np] == 0)
        root_states = np.asarray(state, dtype=np.int64)[group_root_np]
        # The distinct states, ascending, as np.unique gives them (state ids are >= 0); np.unique of
        # a plain array asks np.ma.is_masked and so imports numpy.ma, 10-20 ms of a small graph's run.
        distinct_states = np.flatnonzero(np.bincount(root_states[bulk])).tolist()
        settled: dict[int, tuple[int, int]] = {}  # initial state -> (device, state once placed)
        after: Any  # candidates, then a state id
        for st in distinct_states:
            devices = candidates_of.get(st) or self._compute_candidates(st)
            if not devices:
                continue
            candidates_of[st] = devices
            placed_state = placed[st, device_name_id[devices[0]]]
            after = candidates_of.get(placed_state) or self._compute_candidates(placed_state)
            if after:
                candidates_of[placed_state] = after
                if after[0] == devices[0] and placed[placed_state, device_name_id[devices[0]]] == placed_state:
                    settled[st] = (devices[0], placed_state)
        # Per state id: the device its bulk groups take, and their state once placed (-1: not settled).
        device_of_state = np.full(len(self.constraints.states), -1, dtype=np.int64)
        state_after = np.full(len(self.constraints.states), -1, dtype=np.int64)
        for st, (device, after) in settled.items():
            device_of_state[st], state_after[st] = device, after
        if len(settled) < len(distinct_states):
            bulk &= device_of_state[root_states] >= 0
        if bulk.any():
            assigned_np = np.full(n, -1, dtype=np.int64)
            assigned_np[bulk] = device_of_state[root_states[bulk]]
            assigned = assigned_np.tolist()
            # Each bulk group root: its first candidates' names, then its state once placed.
            names_by_state = {st: names_of(candidates_of[st]) for st in settled}
            is_bulk_root = np.zeros(n, dtype=np.bool_)
            is_bulk_root[group_root_np[bulk]] = True
            bulk_roots = np.flatnonzero(is_bulk_root)
            root_states_before = root_states[bulk_roots]  # a root's own state
            # The loop never visits a bulk group, so their names are left out of ``first_names``
            # (the candidates table takes them from here).
            bulk_names = (bulk_roots, root_states_before, names_by_state)
            deque(map(state.__setitem__, bulk_roots.tolist(), state_after[root_states_before].tolist()), maxlen=0)
            visits = [v[~bulk[v]] for v in visits]

        def assign(i: int, generators: bool) -> None:
            root = group_root[i]
            st = state[root]
            devices = candidates_of.get(st) or self._candidates(i, root)
            if root not in first_names:
                first_names[root] = names_of(devices)
            chosen = devices[0]
            if not generators:
                why = follow[i]
                if why >= 0:  # Shape/Size/Rank, pass-through Identity: their input's device
                    lo = in_start[i]
                    if in_start[i + 1] > lo:
                        src_device = assigned[in_src[lo]]
                        if src_device >= 0 and src_device in devices:
                            chosen = src_device
                            reason[i] = why
            else:  # a generator: the device of all its consumers, if they share one
                users = consumers[i]
                if users:
                    first = assigned[users[0]]
                    if first >= 0 and first in devices and (
                            len(users) == 1 or len(set(map(assigned.__getitem__, users))) == 1):
                        chosen = first
                        reason[i] = WHY_GENERATOR
            assigned[i] = chosen
            state[root] = placed[st, device_name_id[chosen]]

        # Pass 1 visits non-generators in node order; pass 2 the generators, after their consumers.
        for generators, visit in zip((False, True), visits, strict=True):
            for i in visit.tolist():
                assign(i, generators)
        device_or_empty = [*device_names, ""]  # index -1 (not placed): ""
        return Placement(g, list(map(device_or_empty.__getitem__, assigned)), reason, group_root,
                         partial(_candidates_table, np, group_root_np, order, generator_np, first_names, bulk_names),
                         tuple(self.conflicts), partial(_ref_edge_list, g, self.ref_inputs), self.requested,
                         self.attr_keys)


def _ref_edges(graph: Graph, ref_inputs: list[tuple[int, tuple[int, ...]]]) -> Iterator[tuple[int, int]]:
    """(producer, consumer) of each data edge into a ref or resource input port, consumers in the
    order of ``ref_inputs`` (:attr:`_Placer.ref_inputs`: node-id order), as step 2 joins them.
    Ports count data inputs only (control inputs come last in a NodeDef, and are skipped)."""
    in_start, in_src, in_slot = graph.in_start, graph.in_src, graph.in_slot
    for dst, ref_ports in ref_inputs:
        port = -1
        for k in range(in_start[dst], in_start[dst + 1]):
            if in_slot[k] == CONTROL:
                continue
            port += 1
            if port in ref_ports:
                yield in_src[k], dst


def _ref_edge_list(graph: Graph, ref_inputs: list[tuple[int, tuple[int, ...]]]) -> list[tuple[int, int]]:
    """:attr:`Placement.ref_edges`: :func:`_ref_edges` as a list."""
    return list(_ref_edges(graph, ref_inputs))


def _candidates_table(np: ModuleType, group_root: IdArray, order: IdArray, generator: Mask,
                      first_names: dict[int, tuple[str, ...]],
                      bulk_names: tuple[IdArray, IdArray, dict[int, tuple[str, ...]]] | None) -> dict[int, list[str]]:
    """``Placement.candidates``: in the order groups were first visited (pass 1, then pass 2), as
    the loop over every node would have filled it; each root gets its own list.

    ``first_names``: the names the loop recorded per root; ``bulk_names``: (roots, their states,
    names per state) of the groups placed in bulk, or None.
    """
    names = dict(first_names)
    if bulk_names is not None:
        roots, states, names_by_state = bulk_names
        names.update(zip(roots.tolist(), map(names_by_state.__getitem__, states.tolist()), strict=True))
    roots_visited = group_root[np.concatenate([order[~generator[order]], order[generator[order]]])]
    _, first_visit = np.unique(roots_visited, return_index=True)
    roots_in_order = roots_visited[np.sort(first_visit)].tolist()
    return dict(zip(roots_in_order, map(list, map(names.__getitem__, roots_in_order)), strict=True))


def _roots(np: ModuleType, parent: list[int]) -> IdArray:
    """Union-find roots of every node (numpy array) from the parent list (-1 at roots).

    Pointer jumping: each round replaces every node's pointer by its pointer's pointer, so the
    rounds are logarithmic in the longest parent chain.
    """
    p = np.asarray(parent, dtype=np.int64)
    root: IdArray = np.where(p < 0, np.arange(len(p), dtype=np.int64), p)
    while True:
        jumped = root[root]
        if np.array_equal(jumped, root):
            return root
        root = jumped


def _consumers_of(graph: Graph, nodes: list[int]) -> dict[int, list[int]]:
    """node -> the nodes that consume it (one entry per edge, in edge order), for the given nodes.

    From ``graph.consumers`` when that is already computed; otherwise one C-level filtered pass
    over the edges, which costs a fraction of building the whole out-edge index.
    """
    if graph.computed("consumers"):
        out_start, out_dst, _ = graph.consumers
        return {i: list(out_dst[out_start[i]:out_start[i + 1]]) for i in nodes}
    # The edges out of the given nodes, grouped by source with a stable sort (so each group stays
    # in edge order), then cut into one list per node.
    import numpy as np

    n = len(graph)
    wanted = np.zeros(n, dtype=np.bool_)
    wanted[np.asarray(nodes, dtype=np.int64)] = True
    src = np.frombuffer(graph.in_src, dtype=np.int32)
    dst = np.repeat(np.arange(n, dtype=np.int32), np.diff(np.frombuffer(graph.in_start, dtype=np.int32)))  # type: ignore[arg-type]
    picked = wanted[src]
    src, dst = src[picked], dst[picked]
    by_src = np.argsort(src, kind="stable")
    src, dst = src[by_src], dst[by_src]
    bounds = np.searchsorted(src, np.asarray(nodes, dtype=np.int32)).tolist()
    ends = np.searchsorted(src, np.asarray(nodes, dtype=np.int32), side="right").tolist()
    dst_list = dst.tolist()
    return {i: dst_list[a:b] for i, a, b in zip(nodes, bounds, ends, strict=True)}


def _request_pairs(np: ModuleType, requested: list[str], requested_ids: dict[str, int], node_types: IdArray,
                   num_types: int) -> tuple[IdArray, list[int]]:
    """Number each node's (request id, type set id) pair, distinct pairs in order of first
    occurrence: the numbers (numpy int64 array) and the first node of each pair.

    ``node_types``: numpy int64 array of type set ids, each below ``num_types``.
    """
    pair = np.asarray(list(map(requested_ids.__getitem__, requested)), dtype=np.int64) * (num_types + 1) + node_types
    return _numbered_by_first_use(np, pair)


def _numbered_by_first_use(np: ModuleType, values: IdArray) -> tuple[IdArray, list[int]]:
    """Number the distinct ``values`` (a numpy int array) in order of first occurrence: each
    value's number (numpy int64 array) and the position of each number's first occurrence (list)."""
    _, first_use, inverse = np.unique(values, return_index=True, return_inverse=True)
    by_first_use = np.argsort(first_use)
    number = np.empty(len(first_use), dtype=np.int64)
    number[by_first_use] = np.arange(len(first_use), dtype=np.int64)
    return number[inverse.reshape(-1)], first_use[by_first_use].tolist()


def _without_data_inputs_mask(np: ModuleType, graph: Graph) -> Mask:
    """Per node (numpy bool array): whether it has no data inputs (none at all, or only control)."""
    n = len(graph)
    in_start = np.frombuffer(graph.in_start, dtype=np.int32)
    data_edge = np.frombuffer(graph.in_slot, dtype=np.int32) != CONTROL
    consumer = np.repeat(np.arange(n, dtype=np.int64), np.diff(in_start))
    mask: Mask = np.bincount(consumer[data_edge], minlength=n) == 0
    return mask


def _merge_supported(a: TypeSet, b: TypeSet) -> TypeSet:
    """Member::MergeSupportedDevices: the intersection, keeping whichever side's priorities count."""
    b_types = {t: p for t, p in b}
    target = [(t, p) for t, p in a if t in b_types]
    other = [(t, b_types[t]) for t, _ in a if t in b_types]
    target_prio = any(p for _, p in target)
    other_prio = any(p for _, p in other)
    if not target_prio and not other_prio:
        result = target
    elif target_prio and not other_prio:
        result = target
    elif other_prio and not target_prio:
        result = sorted(other, key=lambda tp: -tp[1])
    elif [t for t, _ in sorted(target, key=lambda tp: -tp[1])] == [t for t, _ in sorted(other, key=lambda tp: -tp[1])]:
        result = sorted(target, key=lambda tp: -tp[1])
    else:
        result = [(t, 0) for t, _ in target]
    return tuple(result)
