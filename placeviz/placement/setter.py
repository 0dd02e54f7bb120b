"""Our ``replica_device_setter``: replay TF's device-function decisions over an unplaced GraphDef.

TF's setter (``tf.compat.v1.train.replica_device_setter``) is a device function that runs once per
op, at op creation time, in creation order (= GraphDef node order). Given a graph built *without*
it, placeviz reconstructs what it would have written into every ``NodeDef.device``:

* Plain ops: ``worker_device`` merged under the op's own device (from inner ``tf.device`` scopes,
  which is what an unplaced GraphDef holds).
* ps ops (``STANDARD_PS_OPS`` or ``ps_ops``): ``ps_device`` with the task the strategy returns
  (round-robin, or greedy by byte size), merged under the op's own device. The strategy is only
  called when the op's job is unset or equals the ps job (TF's rule), so only those calls move
  the counter.
* Ops created under ``colocate_with`` (recognisable by a ``_class`` attr that does not name the op
  itself): the device stack is empty for them, so they take the device of their colocation target.
  Variables created there (optimizer slots, the SyncReplicas local step) still call the strategy in
  TF 2.21 (see ``SetterConfig.graph_as_default`` for the one exception).
* Initializers of ``get_variable`` (``<var>/Initializer/...`` with ``_class`` ``loc:@<var>``) are
  built under ``device(None)``: they keep an empty device.
* ``device(x.device)`` scopes that TF library code opens around its own ops (SyncReplicasOptimizer
  builds accumulators under each variable's device and the token queue and wrapped optimizer under
  the global step's device) leave no trace in an unplaced GraphDef; :mod:`placeviz.placement.scopes`
  recognises those ops and tells the replay which node's device each one was built under.
* ``control_flow_ops.group`` (an optimizer's ``update``, ``init``, ``group_deps``) makes one NoOp
  per device of its inputs when they are on several devices. An unplaced build has a single NoOp
  there, so the replay adds the per-device NoOps TF would have built (in sorted device order, named
  as ``Graph.unique_name("<group>/NoOp")`` names them over the names made before the group:
  ``<group>/NoOp``, ``<group>/NoOp_1``, ... unless some are taken) and rewires the group onto
  them. TF's rule is :func:`placeviz.group.group_plan`, shared with the SyncReplicas rewrite.

What an unplaced GraphDef cannot show is taken from options, or assumed and said in
``SetterResult.notes``:

* where the program's ``with tf.device(replica_device_setter(...))`` block ended
  (``SetterConfig.scope_end``, ``--setter-scope-end``): ops built after it keep their own devices,
  with colocation and library scopes still applied (a Saver, Supervisor or Scaffold often comes
  after);
* ``group`` or ``no_op`` under ``control_dependencies`` (both one NoOp with control inputs):
  TF's library names decide (:data:`PLAIN_NOOP_NAMES`, :data:`_LIBRARY_GROUP`), ``--plain-noop``
  for a program's own; a group inside an outer ``control_dependencies`` keeps that control input on
  every per-device NoOp;
* a sharded Saver's per-device shards are not rebuilt (a note names it).

A graph that went through ``import_graph_def`` (an export/import round trip) shows it: its
initializers carry their variable's device, and keep it.

The result is a new Graph; the input is never modified. See
``docs/realworld.md``.

The replay (:func:`setter_replay`, the specification) has one C twin behind a whole-function
boundary: :func:`native_replay` gives ``_setter_kernels.setter`` the IR arrays and complete
tables made here, and takes the whole result or a decline, after which :func:`setter_replay`
runs from its start (``tests/test_setter_kernels.py`` compares the two field by field). The
``group`` split that follows (:func:`_split_groups`, control_flow_ops.py ``group``) has no C
twin: it is written once, in Python with numpy array passes over the IR (``_kernels = None``
switches off the native replay only). Tables of the result that only explanations and later
commands read (its name index, ``colocation``, the setter's ``reference``) are made on first use.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import compress, islice, repeat
from operator import eq
from typing import TYPE_CHECKING, TypeAlias, TypeVar, cast

from google.protobuf import unknown_fields

from placeviz.devices import ClusterSpec, PyDeviceSpec
from placeviz.errors import PlacevizError
from placeviz.gcpause import gc_paused
from placeviz.graph import CONTROL, AttrKeys, Graph, RemappedNodeDefs, _located_names
from placeviz.group import Kid, NoopNamer, by_device, group_plan
from placeviz.limits import MAX_TENSOR_BYTES
from placeviz.native import kernels
from placeviz.op_kinds import ASSIGN_VARIABLE_OPS
from placeviz.ops import DT_RESOURCE, REF_OFFSET
from placeviz.placement import scopes
from placeviz.protos import GraphDef, NodeDef, dtype_size

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from placeviz.nodewire import NodeWire
    from placeviz.ops import OpTable

_kernels = kernels("placement._setter_kernels")  # the replay in C, one whole function (see placeviz.native)

Replayed: TypeAlias = tuple[list[str], list[int], dict[int, int], list[int]]
"""What a replay gives: device per node, rule per node, node -> node whose device it took, the
nodes that called the strategy (in order)."""
_DeviceTables: TypeAlias = tuple[dict[str, str], dict[str, bool], dict[str, tuple[str, ...]], dict[tuple[str, str], str]]
_ResourceFacts: TypeAlias = tuple[dict[tuple[str, Hashable], bool], list[Hashable] | None, dict[int, bool]]
"""By (op, attr key), the attr key per node (the :data:`~placeviz.graph.AttrKeys` handed to the
setter), by node."""
_Groups: TypeAlias = dict[int, tuple[list[int], list[int]]]  # root -> (per-device NoOps, grouped ops)
_Split: TypeAlias = tuple[Graph, list[int], Callable[[], dict[int, int]], list[int]]
"""What the group split gives: the result graph, its rules, its references (made on first use) and
strategy calls, renumbered."""
_V = TypeVar("_V")

# Why a node got its setter-stage device (``SetterResult.rule``).
RULE_WORKER = 0  # worker_device merged under the node's own device
RULE_PS = 1  # ps op: ps_device with the strategy's task
RULE_PS_PINNED = 2  # ps op whose own device names another job, or ps_device without a job: no strategy call
RULE_COLOCATED = 3  # built under colocate_with: the colocation target's device
RULE_DEVICE_NONE = 4  # built under device(None) (variable initializers): no device
RULE_KEPT = 5  # merge_devices=False and the node already had a device
RULE_GROUP = 6  # a per-device NoOp of control_flow_ops.group, added by the replay
RULE_NO_SETTER = 7  # the setter returned None (no ps tasks): device(None) for every op
RULE_OUTSIDE = 8  # built after the `with tf.device(setter)` block (SetterConfig.scope_end): own device
RULE_NAMES = {
    RULE_WORKER: "worker device", RULE_PS: "ps op placed by the strategy",
    RULE_PS_PINNED: "ps op kept on its own job (no strategy call)", RULE_COLOCATED: "colocated",
    RULE_DEVICE_NONE: "initializer under device(None)", RULE_KEPT: "own device kept (merge_devices=False)",
    RULE_GROUP: "per-device NoOp of a group", RULE_NO_SETTER: "setter returned None",
    RULE_OUTSIDE: "built after the setter's scope (--setter-scope-end): own device",
}

# TF 2.x DType.size: string, resource and variant have size 0 (TF 1.x: string 8, resource/variant 1).
_TF1_SIZES = {7: 8, 20: 1, 21: 1}


class SetterError(PlacevizError):
    """The setter cannot run on this graph (e.g. the greedy load function fails, as TF's would)."""


@dataclass(frozen=True)
class SetterConfig:
    """The arguments of ``replica_device_setter`` plus the switches a GraphDef cannot tell."""

    ps_tasks: int = 0
    ps_device: str = "/job:ps"
    worker_device: str = "/job:worker"
    merge_devices: bool = True
    cluster: ClusterSpec | None = None
    ps_ops: frozenset[str] | None = None  # None: the TF version's STANDARD_PS_OPS
    strategy: str = "round-robin"  # or "greedy" (GreedyLoadBalancingStrategy + byte_size_load_fn)
    # Was the graph built inside ``with tf.Graph().as_default():`` (True) or in the implicit
    # global default graph? In TF 2.21 a variable built inside colocate_with calls the strategy
    # (moving the round-robin counter) through init_scope in the first case; in the second only
    # those built under an outer init_scope do (optimizer slots, Adam's beta powers, EMA shadows:
    # all colocated with a variable), not SyncReplicas' local step (colocated with a NoOp).
    graph_as_default: bool = True
    # Which TF's DType sizes the greedy strategy uses: "2" (resource = 0 bytes) or "1".
    tf_major: str = "2"
    # The first node the program built after leaving ``with tf.device(replica_device_setter(...))``
    # (None: the whole graph was built inside). An unplaced GraphDef cannot show where that block
    # ended; programs often build their Saver, Supervisor or MonitoredTrainingSession's Scaffold
    # after it, and TF gives those ops their own devices only (no job).
    scope_end: str | None = None

    @property
    def ps_spec(self) -> PyDeviceSpec | None:
        """``ps_device`` parsed: the one place it is read (None when empty: ps ops keep their devices)."""
        return PyDeviceSpec.parse(self.ps_device) if self.ps_device else None

    @property
    def worker_spec(self) -> PyDeviceSpec:
        """``worker_device`` parsed: the one place it is read."""
        return PyDeviceSpec.parse(self.worker_device or "")

    @property
    def ps_job(self) -> str:
        """The job of ``ps_device`` (``ps`` when it names none): where the ps tasks are counted."""
        spec = self.ps_spec
        return (spec.job if spec is not None else None) or "ps"

    @property
    def worker_job(self) -> str:
        """The job of ``worker_device`` (``worker`` when it names none)."""
        return self.worker_spec.job or "worker"

    # NoOps the program built with ``tf.no_op`` under ``control_dependencies`` rather than with
    # ``tf.group``: names, or last name components (see PLAIN_NOOP_NAMES).
    plain_noops: frozenset[str] = frozenset()


@dataclass
class SetterResult:
    graph: Graph  # the graph with the setter's devices (and added group NoOps)
    rule: list[int]  # RULE_* per node of ``graph``
    # node -> node whose device it took, made on first use by this function (renumbering half a
    # million entries is not worth it when only ``explain`` reads them)
    make_reference: Callable[[], dict[int, int]] = field(default=dict, repr=False, compare=False)
    strategy_calls: list[int] = field(default_factory=list)  # nodes that called the strategy, in order
    ps_tasks: int = 0
    notes: list[str] = field(default_factory=list)  # assumptions the graph could not settle

    @cached_property
    def reference(self) -> dict[int, int]:
        return self.make_reference()

    def explain(self, i: int) -> str:
        rule = self.rule[i]
        text = RULE_NAMES[rule]
        if i in self.reference:
            text += f" (device of {self.graph.names[self.reference[i]]})"
        if rule == RULE_PS and i in self._call_index:  # short: analyze prints it for every variable
            text = f"ps op, strategy call #{self._call_index[i] + 1}"
        return text

    @cached_property
    def _call_index(self) -> dict[int, int]:
        return {node: k for k, node in enumerate(self.strategy_calls)}


class RoundRobin:
    """TF's default ps strategy: tasks 0, 1, ..., n-1, 0, ... one per call."""

    def __init__(self, num_tasks: int):
        self.num_tasks = num_tasks
        self.next_task = 0

    def __call__(self, node: int) -> int:
        task = self.next_task
        self.next_task = (self.next_task + 1) % self.num_tasks
        return task


class GreedyByteSize:
    """TF1 contrib's GreedyLoadBalancingStrategy with byte_size_load_fn: the least loaded task."""

    def __init__(self, num_tasks: int, load_fn: Callable[[int], float]):
        self.loads = [0.0] * num_tasks
        self.load_fn = load_fn

    def __call__(self, node: int) -> int:
        task = min(range(len(self.loads)), key=self.loads.__getitem__)  # ties: lowest index
        self.loads[task] += self.load_fn(node)
        return task


def byte_size_load_fn(graph: Graph, op_table: OpTable, tf_major: str = "2") -> Callable[[int], float]:
    """Bytes of an op's single output, as TF1 contrib's ``byte_size_load_fn`` computes them."""

    def load(i: int) -> float:
        node = graph.attr_nodes[i]
        out_types = op_table.output_types(node)
        if out_types is None:
            raise SetterError(f"greedy strategy: op type {node.op} of {node.name} is unknown, its size cannot "
                              "be computed")
        if len(out_types) != 1:
            raise SetterError(f"greedy strategy: {node.name} ({node.op}) has {len(out_types)} outputs; "
                              "byte_size_load_fn needs exactly one")
        dtype = out_types[0]
        base = dtype - REF_OFFSET if dtype > REF_OFFSET else dtype
        size = _TF1_SIZES.get(base) if tf_major == "1" and base in _TF1_SIZES else (dtype_size(dtype) or 0)
        shape = _static_output_shape(node)
        if shape is None or any(d < 0 for d in shape):
            raise SetterError(f"greedy strategy: the shape of {node.name} is not fully defined, "
                              "byte_size_load_fn cannot size it")
        elements = 1
        for d in shape:
            elements *= d
        if size * elements > MAX_TENSOR_BYTES:  # type: ignore[operator]  # TF1 sizes are all known
            # TF1's np.prod would wrap to a negative load; a float() of it may not even exist.
            raise SetterError(f"greedy strategy: the size of {node.name} ({size} bytes x its {len(shape)} dims) "
                              "overflows int64 (more than 2**63 - 1 bytes): byte_size_load_fn cannot size it")
        return float(size * elements)  # type: ignore[operator]

    return load


def _static_output_shape(node: NodeDef) -> list[int] | None:
    """The output shape TF knows at creation: ``_output_shapes``, a resource scalar, or the ``shape`` attr."""
    attr = node.attr
    if "_output_shapes" in attr and attr["_output_shapes"].list.shape:
        shape = attr["_output_shapes"].list.shape[0]
        if not shape.unknown_rank:
            return [d.size for d in shape.dim]
    if node.op in ("VarHandleOp", "ResourceConditionalAccumulator", "MutableHashTableV2",
                   "MutableHashTableOfTensorsV2", "MutableDenseHashTableV2"):
        return []  # a scalar resource handle
    if node.op in ("MutableHashTable", "MutableHashTableOfTensors", "MutableDenseHashTable"):
        return [2]  # a ref string handle
    if "shape" in attr and not attr["shape"].shape.unknown_rank:
        return [d.size for d in attr["shape"].shape.dim]
    if node.op == "Const" and "value" in attr:
        return [d.size for d in attr["value"].tensor.tensor_shape.dim]
    return None


def num_ps_tasks(config: SetterConfig) -> int:
    """``ps_tasks`` as TF computes it: from the cluster's ps job when a cluster is given."""
    if config.cluster is None:
        return config.ps_tasks
    job = config.ps_spec.job if config.ps_spec is not None else None
    if not job or job not in config.cluster.jobs:
        return 0  # TF returns None from replica_device_setter
    return config.cluster.num_tasks(job)


def run_setter(graph: Graph, config: SetterConfig, op_table: OpTable | None = None,
               attr_keys: AttrKeys | None = None) -> SetterResult:
    """Replay ``replica_device_setter(config)`` over ``graph`` (an unplaced build); see module doc.

    ``attr_keys``: the op-fact attr keys of ``graph``'s nodes, as
    :func:`placeviz.placement.placer.read_fact_attrs` returns them, when the caller read them (the
    resource test then asks ``op_table`` once per op and attr key instead of once per node); the
    same answers without them."""
    if op_table is None:
        from placeviz.ops import load_op_table

        op_table = load_op_table()
    with gc_paused():
        return _run_setter(graph, config, op_table, attr_keys)


def _run_setter(graph: Graph, config: SetterConfig, op_table: OpTable, attr_keys: AttrKeys | None) -> SetterResult:
    n = len(graph)
    ps_tasks = num_ps_tasks(config)
    if ps_tasks <= 0:
        # replica_device_setter returned None: `with device(None)` hides every device scope.
        return SetterResult(graph.with_devices([""] * n), [RULE_NO_SETTER] * n, dict, [], 0)

    ps_ops = config.ps_ops if config.ps_ops is not None else op_table.ps_ops()
    strategy: GreedyByteSize | RoundRobin
    if config.strategy == "greedy":
        strategy = GreedyByteSize(ps_tasks, byte_size_load_fn(graph, op_table, config.tf_major))
    elif config.strategy == "round-robin":
        strategy = RoundRobin(ps_tasks)
    else:
        raise SetterError(f"unknown ps strategy {config.strategy!r} (round-robin or greedy)")

    ps_spec, worker_spec = config.ps_spec, config.worker_spec
    inside = n  # nodes [0, inside) were built under the setter
    if config.scope_end is not None:
        scope_end = graph.id_of(config.scope_end)
        if scope_end is None:
            raise SetterError(f"--setter-scope-end: the graph has no node named {config.scope_end!r}")
        inside = scope_end
    op_index = scopes.OpIndex.of(graph)
    hints = scopes.device_scope_hints(graph, op_index)
    device_none = scopes.device_none_nodes(graph, op_index)
    replayed = None
    if _kernels is not None and isinstance(strategy, RoundRobin):
        replayed = native_replay(graph, config, op_table, ps_tasks, ps_ops, ps_spec, worker_spec, inside, hints,
                                 device_none, attr_keys)
    if replayed is None:  # declined (or no kernels): the specification itself
        replayed = setter_replay(graph, config, op_table, strategy, ps_ops, ps_spec, worker_spec, inside, hints,
                                 device_none, attr_keys)
    result_devices, rule, reference, strategy_calls = replayed

    plain_device = _PlainDevice(worker_spec, config.merge_devices, inside if inside < n else None)
    plain_noops = PLAIN_NOOP_NAMES | config.plain_noops
    assumed: list[str] = []  # NoOps with no library name taken for a group and split per device
    clashes: list[str] = []  # names TF gives a group's NoOp that a node made later holds
    new_graph, new_rules, new_refs, calls = _split_groups(graph, result_devices, rule, reference,
                                                          strategy_calls, plain_device, op_index, plain_noops,
                                                          assumed, clashes)
    notes = _scope_notes(graph, config, op_index)
    if assumed:
        shown = ", ".join(assumed[:5]) + (f" and {len(assumed) - 5} more" if len(assumed) > 5 else "")
        notes.append(f"took the NoOp(s) {shown} for tf.group and split them per device, as group does; a NoOp "
                     f"built with tf.no_op under control_dependencies is not split: pass --plain-noop NAME")
    if clashes:
        shown = ", ".join(clashes[:5]) + (f" and {len(clashes) - 5} more" if len(clashes) > 5 else "")
        notes.append(f"TF names a per-device NoOp of tf.group {shown} and renames the node made later under that "
                     "name; that node keeps its name here and the NoOp takes the next free one")
    return SetterResult(new_graph, new_rules, new_refs, calls, ps_tasks, notes)


def setter_replay(graph: Graph, config: SetterConfig, op_table: OpTable, strategy: Callable[[int], int],
                  ps_ops: Collection[str], ps_spec: PyDeviceSpec | None, worker_spec: PyDeviceSpec, inside: int,
                  hints: dict[int, int], device_none: set[int], attr_keys: AttrKeys | None = None) -> Replayed:
    """TF's device function run once per op in creation order: ``(devices, rule, reference,
    strategy_calls)`` before the group split (device_setter.py ``_ReplicaDeviceChooser.device_function``,
    ops.py ``_apply_device_functions``, ``colocate_with``, ``init_scope``).

    The specification of the replay: :func:`native_replay` gives the same result in C or declines.
    Nodes ``[inside, n)`` were built after the setter's block (:func:`_outside`).
    """
    n = len(graph)
    ops = graph.ops
    resource_handles = {h for h in set(hints.values()) if ops[h] == "VarHandleOp"}
    targets = _colocation_targets(graph)
    is_resource_generator = _resource_generator_test(graph, op_table, attr_keys)
    rule = [RULE_WORKER] * n
    reference: dict[int, int] = {}
    devices: list[str | None] = [None] * n
    colocated: list[tuple[int, int]] = []  # (node, target) resolved after the pass
    calls: bool  # whether a ps op calls the strategy
    strategy_calls: list[int] = []
    worker_cache: dict[str, str] = {}  # own device -> worker_device merged under it
    ps_cache: dict[tuple[int | None, str], str] = {}  # (task, own device) -> a ps op's device
    own_devices, in_start, in_slot = graph.devices, graph.in_start, graph.in_slot
    merge_devices = config.merge_devices
    calls_for_own: dict[str, bool] = {}  # own device -> whether a ps op there calls the strategy
    for i in range(n):
        if i >= inside:
            _outside(i, graph, targets, device_none, hints, devices, rule, reference, colocated)
            continue
        own = own_devices[i]
        target = targets[i]
        if target == scopes.DEVICE_NONE or i in device_none:
            devices[i] = ""
            rule[i] = RULE_DEVICE_NONE
            continue
        if target is not None:
            # Built under colocate_with: the setter's result (if any) is overwritten by the target's device.
            # Only constructors of stateful resources (variables, tables) run in init_scope, which
            # restores the setter; anything else built under colocate_with never reaches it.
            lo = in_start[i]
            has_data_input = in_start[i + 1] > lo and in_slot[lo] != CONTROL  # cheap common case
            in_init_scope = not has_data_input and is_resource_generator(i)
            advances = in_init_scope and (config.graph_as_default or ops[target] in ps_ops)
            if ops[i] in ps_ops and advances and ps_spec is not None:
                calls = calls_for_own[own] = _calls_strategy(ps_spec, PyDeviceSpec.parse(own))
                if calls:
                    strategy(i)
                    strategy_calls.append(i)
            target_device = devices[target]
            if target_device is not None:  # the usual case: the target was created first
                devices[i] = target_device or own
            else:
                colocated.append((i, target))
            rule[i] = RULE_COLOCATED
            reference[i] = target
            continue
        hint = hints.get(i)
        if hint is not None:
            # Built under device(<device of node `hint`>): that device is the op's own device here.
            scope = devices[hint] or ""
            if scope:
                own = _scoped_device(scope, own)
            reference[i] = hint
            if hint in resource_handles and graph.names[i] == graph.names[hint] + "/Assign":
                # ResourceVariable's initializer: colocate_with(None, ignore_existing=True) empties the
                # device-function stack, then device(handle.device): exactly the handle's device
                # (resource_variable_ops.py _init_from_args).
                devices[i], rule[i] = own, RULE_COLOCATED
                continue
        if not merge_devices and own:
            devices[i] = own
            rule[i] = RULE_KEPT
            continue
        if ps_spec is not None and ops[i] in ps_ops:
            current = PyDeviceSpec.parse(own)
            task = None
            calls = calls_for_own[own] = _calls_strategy(ps_spec, current)
            if calls:
                task = int(strategy(i))
                strategy_calls.append(i)
                rule[i] = RULE_PS
            else:
                rule[i] = RULE_PS_PINNED
            device = ps_cache.get((task, own))
            if device is None:  # ps_device with the strategy's task (or as it is), merged under own
                device = ps_cache[task, own] = _ps_device(ps_spec, task, current)
            devices[i] = device
            continue
        cached = worker_cache.get(own)
        if cached is None:
            cached = worker_cache[own] = _worker_device(worker_spec, PyDeviceSpec.parse(own))
        devices[i] = cached

    colocated_targets = dict(colocated)
    for i, target in colocated:
        devices[i] = _resolve_colocated(i, target, devices, graph, colocated_targets)
    # usually none is None: the list itself (a cast, not a copy of a million items)
    result_devices = cast("list[str]", devices) if None not in devices else [d or "" for d in devices]

    return result_devices, rule, reference, strategy_calls


def _calls_strategy(ps_spec: PyDeviceSpec, current: PyDeviceSpec) -> bool:
    """Whether a ps op whose own device is ``current`` calls the strategy: ``ps_device`` names a job
    and the op's job is unset or is that job (device_setter.py ``device_function``)."""
    return bool(ps_spec.job and (current.job is None or current.job == ps_spec.job))


def _worker_device(worker_spec: PyDeviceSpec, current: PyDeviceSpec) -> str:
    """A plain op's device: ``worker_device`` merged under its own (``device_function``)."""
    return worker_spec.merged_with(current).to_string()


def _ps_device(ps_spec: PyDeviceSpec, task: int | None, current: PyDeviceSpec) -> str:
    """A ps op's device: ``ps_device`` with the strategy's task (None: no call), merged under its own."""
    spec = ps_spec if task is None else ps_spec.replace(task=task)
    return spec.merged_with(current).to_string()


def _scoped_device(scope: str, own: str) -> str:
    """The device of an op built under ``device(scope)`` whose own device is ``own``."""
    return PyDeviceSpec.parse(scope).merged_with(PyDeviceSpec.parse(own)).to_string()


# At most this many device strings are merged up front for the native replay (distinct own devices
# times the ps tasks plus two); a graph needing more runs the Python replay, which merges lazily.
_MAX_DEVICE_TABLE = 50_000


def native_replay(graph: Graph, config: SetterConfig, op_table: OpTable, ps_tasks: int, ps_ops: Collection[str],
                  ps_spec: PyDeviceSpec | None, worker_spec: PyDeviceSpec, inside: int, hints: dict[int, int],
                  device_none: set[int], attr_keys: AttrKeys | None = None) -> Replayed | None:
    """:func:`setter_replay` with the round-robin strategy, in C (``_setter_kernels.setter``), or
    None when it declines; then the caller runs the Python.

    The C function parses no device string and asks no op table: this function gives it complete
    tables, made here with the same helpers the Python replay uses (:class:`PyDeviceSpec`,
    :func:`_constructs_a_resource`). Anything it cannot settle up front (a device string that does
    not parse, a resource test that raises, a table that would be too big) makes it decline, and
    the Python replay raises or answers as the specification does.
    """
    if _kernels is None:
        return None
    if not isinstance(ps_ops, frozenset):
        if not isinstance(ps_ops, (set, tuple, list)) or not all(type(op) is str for op in ps_ops):
            return None
        ps_ops = frozenset(ps_ops)  # `in` on strings: the same answers
    n, names, ops = len(graph), graph.names, graph.ops
    flags = bytearray(n)  # 1: built under device(None); 2: a ResourceVariable's initializer (see setter_replay)
    hint_of = array("i", [-1]) * n
    for i in device_none:
        if not 0 <= i < n:
            return None
        flags[i] = 1
    for i, hint in hints.items():
        if not (0 <= i < n and 0 <= hint < n):
            return None
        hint_of[i] = hint
        if ops[hint] == "VarHandleOp" and names[i] == names[hint] + "/Assign":
            flags[i] |= 2
    tables = _device_tables(graph.devices, {graph.devices[i] for i in hints}, ps_spec, worker_spec, ps_tasks)
    facts = _resource_facts(graph, op_table, attr_keys)
    if tables is None or facts is None:
        return None
    worker_of, ps_calls, ps_device_of, scoped = tables
    generator_keys, generator_values, generator_nodes = facts
    replayed = _kernels.setter(
        names=names, ops=ops, own_devices=graph.devices, in_start=graph.in_start, in_src=graph.in_src,
        in_slot=graph.in_slot, colocation=graph.colocation, colocated_names=graph.colocated_names,
        located_ids=graph.colocated_name_ids, id_of=graph.id_lookup(), device_none=bytes(flags), inside=inside,
        ps_ops=ps_ops, ps_tasks=ps_tasks, graph_as_default=config.graph_as_default,
        merge_devices=config.merge_devices, ps_present=ps_spec is not None, worker_of=worker_of, ps_calls=ps_calls,
        ps_device_of=ps_device_of, generator_keys=generator_keys, generator_values=generator_values,
        generator_nodes=generator_nodes, hint_of=hint_of, scoped=scoped)
    return cast("Replayed | None", replayed)  # a C function: what its doc string promises


def _device_tables(own_devices: list[str], hinted_owns: set[str], ps_spec: PyDeviceSpec | None,
                   worker_spec: PyDeviceSpec, ps_tasks: int) -> _DeviceTables | None:
    """Every device-string answer the replay can need, as :func:`setter_replay` computes them:
    per own device, ``worker_device`` merged under it, whether a ps op there calls the strategy
    (TF's ps-job test in ``device_function``) and the ps op's device (task None, then each task);
    and per (scope, own) of a hinted node (``hinted_owns``), the scope merged over own, for every
    device the replay can give a node (those merged owns get the per-own answers too, until
    nothing new appears). None if a string does not parse or the tables would be too big."""
    worker_of: dict[str, str] = {}
    ps_calls: dict[str, bool] = {}
    ps_device_of: dict[str, tuple[str, ...]] = {}
    scoped: dict[tuple[str, str], str] = {}
    budget = _MAX_DEVICE_TABLE

    def answers(owns: Iterable[str]) -> set[str]:
        """Fill the per-own tables for ``owns``; the devices they can give a node."""
        nonlocal budget
        out: set[str] = set()
        for own in owns:
            budget -= ps_tasks + 2
            if budget < 0:
                raise OverflowError
            current = PyDeviceSpec.parse(own)
            worker_of[own] = _worker_device(worker_spec, current)
            out.update((own, worker_of[own]))
            if ps_spec is None:
                continue
            calls = ps_calls[own] = _calls_strategy(ps_spec, current)
            tasks = (None, *range(ps_tasks)) if calls else (None,)
            ps_device_of[own] = tuple(_ps_device(ps_spec, task, current) for task in tasks)
            out.update(ps_device_of[own])
        return out

    try:
        seen = answers(set(own_devices)) | {""}
        new = set(seen) if hinted_owns else set()
        while new:  # a hinted node's device may be the scope of another (SyncReplicas' queues)
            merged = set()
            for scope in filter(None, new):
                for own in hinted_owns:
                    budget -= 1
                    if budget < 0:
                        raise OverflowError
                    m = scoped[scope, own] = _scoped_device(scope, own)
                    merged.add(m)
            merged -= worker_of.keys()
            new = (merged | answers(merged)) - seen
            seen |= new
    except Exception:  # noqa: BLE001 - the Python replay meets the same string and words the error
        return None
    return worker_of, ps_calls, ps_device_of, scoped


def _resource_facts(graph: Graph, op_table: OpTable, attr_keys: AttrKeys | None) -> _ResourceFacts | None:
    """The resource-constructor test (:func:`_is_resource_generator`) of every node the replay may
    ask: the colocated ones with no data input. ``(by (op, attr key), attr keys, by node)``: by
    op and attr key when the caller hands the graph's op-fact ``attr_keys`` (as
    :func:`_resource_generator_test` uses them), else by node. An answer that raises is left out (the C replay then declines and the
    Python replay raises it). None if a colocation key is not a node id."""
    import numpy as np

    n = len(graph)
    keys = np.fromiter(graph.colocation, dtype=np.int64, count=len(graph.colocation))
    if len(keys) and (keys.min() < 0 or keys.max() >= n):
        return None
    starts = np.frombuffer(graph.in_start, dtype=np.int32)
    slots = np.frombuffer(graph.in_slot, dtype=np.int32)
    lo, hi = starts[keys], starts[keys + 1]
    first_slot = slots[np.minimum(lo, max(len(slots) - 1, 0))] if len(slots) else np.full(len(keys), CONTROL)
    candidates = keys[~((hi > lo) & (first_slot != CONTROL))].tolist()
    by_key: dict[tuple[str, Hashable], bool] = {}
    by_node: dict[int, bool] = {}
    nodes, ops = graph.attr_nodes, graph.ops
    if attr_keys is None:
        test = partial(_is_resource_generator, graph, op_table=op_table)
        for i in candidates:
            try:
                by_node[i] = test(i)
            except Exception:  # noqa: BLE001,S112 - the Python replay raises it
                continue
        return by_key, None, by_node
    from placeviz.ops import key_attrs_of_facts

    key_attrs, values = attr_keys
    if len(values) != n:
        return None
    candidate_ops = list(map(ops.__getitem__, candidates))
    usable: dict[str, bool | None] = {}  # op -> keyed by attr key (True), unknown op (None), by node (False)
    for op in set(candidate_ops):
        facts = op_table.get(op)
        usable[op] = None if facts is None else key_attrs.get(op) == key_attrs_of_facts(facts)
    pairs = list(zip(candidate_ops, map(values.__getitem__, candidates), strict=True))
    first = dict(zip(reversed(pairs), reversed(candidates), strict=True))  # each (op, key)'s first node
    for (op, value), i in first.items():
        if usable[op] is None:
            by_key[op, value] = False  # an unknown op has no output types
        elif usable[op]:
            try:
                by_key[op, value] = _constructs_a_resource(op_table.output_types(nodes[i]))
            except Exception:  # noqa: BLE001,S112 - the Python replay raises it
                continue
    for i, op in zip(candidates, candidate_ops, strict=True):
        if usable[op] is False:
            try:
                by_node[i] = _is_resource_generator(graph, i, op_table)
            except Exception:  # noqa: BLE001,S112 - the Python replay raises it
                continue
    return by_key, values, by_node


# The first nodes of the session set-up that programs often build after the setter's block: a
# Saver (saver.py names its filename Const ``save/filename/input`` or ``save/Const``) and the
# ready op of a Supervisor or a MonitoredTrainingSession's Scaffold (variables.py
# ``report_uninitialized_variables``).
_SETUP_FIRST_NODES = ("save/filename/input", "save/Const", "report_uninitialized_variables/IsVariableInitialized",
                      "report_uninitialized_variables/VarIsInitializedOp")


def _scope_notes(graph: Graph, config: SetterConfig, op_index: scopes.OpIndex | None = None) -> list[str]:
    """Say what the replay had to assume, and what it does not rebuild."""
    notes = []
    found = [i for i in map(graph.id_of, _SETUP_FIRST_NODES) if i is not None]
    if config.scope_end is None and found:
        first = graph.names[min(found)]
        notes.append(f"the setter replay assumed every node was built inside `with tf.device(replica_device_setter("
                     f"...))`; if the program builds its Saver/Supervisor/Scaffold after that block "
                     f"(MonitoredTrainingSession does), TF leaves those ops off the setter's devices: pass "
                     f"--setter-scope-end {first}")
    sharded = sharded_savers(graph, op_index)
    if sharded and num_ps_tasks(config) > 1:
        notes.append(f"sharded Saver {', '.join(s.rstrip('/') for s in sharded)}: TF builds one save/restore shard "
                     f"per variable device (saver.py _AddShardedSaveOps); the replay keeps the unplaced build's "
                     f"shards, so the devices (and names) of those save ops differ from TF's placed build")
    return notes


def sharded_savers(graph: Graph, op_index: scopes.OpIndex | None = None) -> list[str]:
    """Name scopes (``save/``, ``save_1/``...) of the sharded Savers in the graph (they hold a
    ``ShardedFilename`` op: saver.py builds it only when ``sharded=True``).

    With the setter's ``op_index`` only those few nodes are read (a walk over every node's name
    and op was 10 ms at 200k nodes)."""
    names = graph.names
    if op_index is not None:
        found = [names[i] for i in op_index.ids(("ShardedFilename",)).tolist()]
    elif "ShardedFilename" in graph.ops:
        found = [name for name, op in zip(names, graph.ops, strict=True) if op == "ShardedFilename"]
    else:
        return []
    return sorted({name.rsplit("/", 1)[0] + "/" for name in found if "/" in name})


def _outside(i: int, graph: Graph, targets: list[int | None], device_none: set[int], hints: dict[int, int],
             devices: list[str | None], rule: list[int], reference: dict[int, int],
             colocated: list[tuple[int, int]]) -> None:
    """A node built after the setter's block: its own device (colocation and library scopes still
    apply, as TF applies them with or without a device function)."""
    own = graph.devices[i]
    target = targets[i]
    if target == scopes.DEVICE_NONE or i in device_none:
        devices[i], rule[i] = "", RULE_DEVICE_NONE
        return
    if target is not None:
        target_device = devices[target]
        if target_device is not None:
            devices[i] = target_device or own
        else:
            colocated.append((i, target))
        rule[i], reference[i] = RULE_COLOCATED, target
        return
    hint = hints.get(i)
    scope = devices[hint] if hint is not None else None
    if hint is not None and scope:
        own = _scoped_device(scope, own)
        reference[i] = hint
    devices[i], rule[i] = own, RULE_OUTSIDE


def _is_resource_generator(graph: Graph, i: int, op_table: OpTable) -> bool:
    """No data inputs and one ref or resource output: a variable, table or queue constructor."""
    lo, hi = graph.in_start[i], graph.in_start[i + 1]
    if any(graph.in_slot[k] != CONTROL for k in range(lo, hi)):
        return False
    return _constructs_a_resource(op_table.output_types(graph.attr_nodes[i]))


def _constructs_a_resource(output_types: tuple[int, ...] | None) -> bool:
    """One output, of a ref type or ``DT_RESOURCE``: what ``init_scope`` is opened for."""
    return output_types is not None and len(output_types) == 1 and (output_types[0] > REF_OFFSET or output_types[0] == DT_RESOURCE)


def _resource_generator_test(graph: Graph, op_table: OpTable, attr_keys: AttrKeys | None) -> Callable[[int], bool]:
    """:func:`_is_resource_generator` as a function of the node id.

    When the caller hands the graph's attr keys (``setter_stage`` reads them before the setter
    runs) and they are this table's op-fact attrs, which include every attr the io types depend on,
    the table is asked once per (op, attr key) instead of reading each node's attrs again. The
    first node of a key is asked first, so an error comes from the same node as without them.
    """
    if attr_keys is None or len(attr_keys[1]) != len(graph):
        return partial(_is_resource_generator, graph, op_table=op_table)
    from placeviz.ops import key_attrs_of_facts as _key_attrs

    key_attrs, values = attr_keys
    in_start, in_slot, ops, nodes = graph.in_start, graph.in_slot, graph.ops, graph.attr_nodes
    usable: dict[str, bool] = {}  # op -> whether the cached keys cover its io attrs
    memo: dict[tuple[str, Hashable], tuple[int, ...] | None] = {}  # (op, attr key) -> output types

    def test(i: int) -> bool:
        if any(in_slot[k] != CONTROL for k in range(in_start[i], in_start[i + 1])):
            return False
        op = ops[i]
        ok = usable.get(op)
        if ok is None:
            facts = op_table.get(op)
            ok = usable[op] = facts is not None and key_attrs.get(op) == _key_attrs(facts)
        if ok:
            key = (op, values[i])
            if key in memo:
                out = memo[key]
            else:
                out = memo[key] = op_table.output_types(nodes[i])
        else:
            out = op_table.output_types(nodes[i])
        return _constructs_a_resource(out)

    return test


def _colocation_targets(graph: Graph) -> list[int | None]:
    """Per node: the node whose device it takes when built under colocate_with, DEVICE_NONE, or None.

    A list indexed by node id, because the replay reads it node by node: at 1M nodes a list walked
    in order is much cheaper than a dict of half a million entries.

    ``_class`` also appears on a variable itself (``loc:@<own name>``, from the attr scope
    ``get_variable`` opens): not colocated. Its initializers built under ``device(None)``
    (``<var>/Initializer/...``) get DEVICE_NONE. A ``Switch`` is colocated with its data input
    (``cond`` builds it under ``colocate_with(data)``); any other op with the node its first
    group names. (TF uses the innermost colocation scope with a device, which a GraphDef no
    longer records.)
    """
    names, ops, colocation = graph.names, graph.ops, graph.colocation
    index = graph.colocated_name_ids  # only names some _class names are looked up (the placer reuses it)
    in_start, in_src, in_slot = graph.in_start, graph.in_src, graph.in_slot
    targets: list[int | None] = [None] * len(names)
    colocated_names = graph.colocated_names
    # Per distinct tuple of names (shared by all the ops colocated with the same ops): each name
    # with its node id and its initializers' prefix, looked up once.
    resolved: dict[tuple[str, ...], list[tuple[str, int | None]]] = {}
    for i, groups in colocation.items():
        located = colocated_names.get(i, ())
        name = names[i]
        if name in located:  # loc:@<own name>
            continue
        if ops[i] in ("Switch", "RefSwitch") and in_start[i + 1] > in_start[i] and in_slot[in_start[i]] != CONTROL:
            data = in_src[in_start[i]]
            if any(g in groups for g in graph.colocation_groups(data)):
                targets[i] = data
                continue
        entries = resolved.get(located)
        if entries is None:
            entries = resolved[located] = [(t + "/Initializer/", index.get(t)) for t in located]
        for initializer_prefix, target in entries:
            if name.startswith(initializer_prefix):
                targets[i] = scopes.DEVICE_NONE
                break
            if target is not None:
                targets[i] = target
                break
    _reimported_initializers(graph, targets)
    return targets


def _reimported_initializers(graph: Graph, targets: list[int | None]) -> None:
    """A graph that went through ``import_graph_def`` (``import_meta_graph``, a program's
    export/import round trip) lost the ``device(None)`` of its initializers: the import gives
    every op with ``_class`` its colocation target's device (importer.py
    ``_apply_colocation_attr`` ... ``_ProcessNewOps``), and TF's placed build went through the same
    import. The evidence: every initializer whose variable has a device has exactly that device.
    Then the initializers take their variable's device, as in TF's placed graph."""
    pairs = []
    names, own, id_of = graph.names, graph.devices, graph.id_lookup()
    for i in compress(range(len(targets)), map(eq, targets, repeat(scopes.DEVICE_NONE))):
        var = id_of(names[i].split("/Initializer/", 1)[0])
        if var is not None:
            pairs.append((i, var))
    evidence = [(i, var) for i, var in pairs if own[var]]
    if evidence and all(own[i] == own[var] for i, var in evidence):
        for i, var in pairs:
            targets[i] = var


def _resolve_colocated(i: int, target: int, devices: list[str | None], graph: Graph,
                       colocated_targets: dict[int, int]) -> str:
    """Follow colocation chains to a node with a setter device; an empty target keeps the op's own."""
    seen = {i}
    while devices[target] is None and target in colocated_targets and target not in seen:
        seen.add(target)
        target = colocated_targets[target]
    device = devices[target]
    return device if device else graph.devices[i]


class _PlainDevice:
    """The setter's answer for a non-ps op whose device scopes gave it ``own`` (once per string)."""

    def __init__(self, worker_spec: PyDeviceSpec, merge_devices: bool, inside: int | None = None):
        self.worker_spec, self.merge_devices = worker_spec, merge_devices
        self.cache: dict[str, str] = {}  # own -> device (read by the C kernel too)
        self.inside = inside  # nodes from this id on were built outside the setter's block

    def at(self, node: int, own: str) -> str:
        """The answer for an op built where ``node`` was: outside the setter's block, ``own``."""
        return own if self.inside is not None and node >= self.inside else self(own)

    def __call__(self, own: str) -> str:
        if not self.merge_devices and own:
            return own
        device = self.cache.get(own)
        if device is None:
            device = self.cache[own] = self.worker_spec.merged_with(PyDeviceSpec.parse(own)).to_string()
        return device


def _split_groups(graph: Graph, devices: list[str], rule: list[int], reference: dict[int, int],
                  strategy_calls: list[int], plain_device: _PlainDevice, op_index: scopes.OpIndex,
                  plain_noops: frozenset[str] = frozenset(),
                  group_assumptions: list[str] | None = None, name_clashes: list[str] | None = None) -> _Split:
    """Rebuild ``control_flow_ops.group`` NoOps for the devices their grouped ops now have.

    An unplaced build made ``group``'s choice for the unplaced devices; each group found
    (:func:`scopes.group_roots`) is planned again over its members' new devices by
    :func:`placeviz.group.group_plan` (TF's rule, written once) and rewired by
    :class:`_GroupRewrite`. What is the setter's own: the device each member is filed under
    (:func:`_group_key_node`), the caller's device context (:class:`_GroupContext`) and the names
    in use before each group (:class:`placeviz.group.NoopNamer`).
    """
    plans: dict[int, list[Kid[int]]] = {}
    devices = list(devices)
    ops, names, assign_ops = graph.ops, graph.names, ASSIGN_VARIABLE_OPS
    noops = scopes.control_only_noops(graph, op_index)
    roots = scopes.group_roots(graph, noops)
    roots.update(_one_member_groups(graph, roots, noops))
    if plain_noops:
        tails = tuple(plain_noops)  # a plain NoOp's name ends with one of them: a cheap first test
        for r in [r for r in roots if names[r].endswith(tails) and _is_plain_noop(names[r], plain_noops)]:
            del roots[r]
    outer_deps: dict[int, list[int]] = {}
    assumed = group_assumptions if group_assumptions is not None else []
    dropped: set[int] = set()
    for root, (children, members) in roots.items():
        dropped.update(children)
        if not children and len(members) >= 2:
            deps = _outer_control_deps(graph, root, members)
            if deps:
                outer_deps[root] = deps
                roots[root] = (children, [m for m in members if m not in deps])
    assign_nodes = frozenset(op_index.ids(ASSIGN_VARIABLE_OPS).tolist())
    namer = NoopNamer(graph.names, graph.id_lookup(), dropped)
    context = _GroupContext(graph, devices, rule, reference, plain_device)
    # A group on one device whose context is the setter's alone (no colocation, no device scope
    # seen around it, built inside the setter's block) has the plan of every such group on that
    # device: asked once per device.
    own, inside = graph.devices, plain_device.inside if plain_device.inside is not None else len(graph)
    same_context: dict[str, str] = {}
    for root, (children, members) in sorted(roots.items()):  # creation order
        one = None if children else _one_device(members, devices, assign_nodes)
        if one is not None and root < inside and not own[root] and rule[root] != RULE_COLOCATED \
                and root not in reference:
            device = same_context.get(one)
            if device is None:
                device = same_context[one] = group_plan(names[root], {one: members},
                                                        context.at(root, children, members), _no_names).root_device
            devices[root] = device
            continue
        split = {one: members} if one is not None else by_device(members, [
            devices[m if ops[m] not in assign_ops else _group_key_node(graph, m)] for m in members])
        plan = group_plan(names[root], split, context.at(root, children, members), partial(namer.names, root))
        devices[root] = plan.root_device
        if plan.kids:
            plans[root] = plan.kids
            if not children and not _LIBRARY_GROUP.fullmatch(names[root]):
                assumed.append(names[root])
        elif children:  # was split, now on one device: the root holds the members itself
            plans[root] = [Kid(names[root], plan.root_device, members)]
    if name_clashes is not None:
        name_clashes += namer.clashes
    rewrite = _GroupRewrite(graph, devices, rule, plans, dropped, outer_deps)
    return rewrite.result(reference, strategy_calls)


def _no_names(base: str, count: int) -> list[str]:
    raise AssertionError("a group on one device names no NoOps")  # pragma: no cover


class _GroupContext:
    """``place(dev)`` of :func:`placeviz.group.group_plan` for the setter: the device of a NoOp
    built under ``ops.device(dev)`` in the context of ``group``'s call, under the setter.

    A root built under ``colocate_with`` keeps its device and so do its NoOps (the colocation
    decides). Otherwise the context is the device scope around the call (:func:`_outer_device`,
    merged over the library scope :mod:`placeviz.placement.scopes` found, or, for a root that the
    build already split, the root's own replayed device) under the setter's device function
    (``_PlainDevice.at``); ``dev`` merges over it (dev's fields win) and ``""`` is the context
    itself (a null merge, ops.py ``_UserDeviceSpec``). The context is only read when it can
    matter: a root whose unplaced device is empty had none.
    """

    __slots__ = ("graph", "devices", "rule", "reference", "plain_device", "root", "children", "members", "_outer")

    def __init__(self, graph: Graph, devices: list[str], rule: list[int], reference: dict[int, int],
                 plain_device: _PlainDevice):
        self.graph, self.devices, self.rule, self.reference = graph, devices, rule, reference
        self.plain_device = plain_device
        self.root = -1
        self.children: list[int] = []
        self.members: list[int] = []
        self._outer: str | None = None

    def at(self, root: int, children: list[int], members: list[int]) -> _GroupContext:
        """This context for the group ``root`` (one object for every root: no allocation each)."""
        self.root, self.children, self.members, self._outer = root, children, members, None
        return self

    def outer(self) -> str:
        if self._outer is None:
            root = self.root
            outer = "" if self.children else _outer_device(self.graph, root, self.members)
            if root in self.reference:  # built under device(<that node's device>) (scopes.py)
                scope = self.devices[self.reference[root]] or ""
                outer = PyDeviceSpec.parse(scope).merged_with(PyDeviceSpec.parse(outer)).to_string()
            self._outer = outer
        return self._outer

    def __call__(self, dev: str) -> str:
        root = self.root
        if self.rule[root] == RULE_COLOCATED:
            return self.devices[root]
        if not dev:
            if self.children:  # the build split it: the root's own device is its context
                return self.devices[root]
            return self.plain_device.at(root, self.outer())
        if self.graph.devices[root] or root in self.reference:
            outer = self.outer()
            if outer:
                dev = PyDeviceSpec.parse(outer).merged_with(PyDeviceSpec.parse(dev)).to_string()
        return self.plain_device.at(root, dev)


def _one_device(members: list[int], devices: list[str], assign_nodes: frozenset[int]) -> str | None:
    """The device of a ``group``'s members when they all have one, for the usual root: no assign
    op among them (``group`` files an assign under its variable's device: :func:`_group_key_node`).
    None: file them one by one (:func:`placeviz.group.by_device`)."""
    if not members or not assign_nodes.isdisjoint(members):
        return None
    on = set(map(devices.__getitem__, members))
    return on.pop() if len(on) == 1 else None


def _outer_control_deps(graph: Graph, root: int, members: list[int]) -> list[int]:
    """Control inputs of a ``group`` NoOp that come from an enclosing ``control_dependencies``.

    ``with control_dependencies([x]): group(a, b)`` gives the NoOp ``^a ^b ^x``, like ``group(a, b,
    x)``; only the first splits by the devices of ``a`` and ``b`` and keeps ``^x`` on every NoOp
    (control_flow_ops.py ``group``: each per-device ``no_op`` is built inside the same outer
    block). The evidence is the block itself: TF gives ``^x`` to every op created there without a
    data input from the block (ops.py ``_control_dependencies_for_inputs``), such as the Consts the
    group's scope made first (``ExponentialMovingAverage/decay`` under ``control_dependencies([
    apply_gradient_op])``). The scope's ops are the ones just before the NoOp.
    """
    names = graph.names
    prefix = names[root] + "/"
    if root == 0 or not names[root - 1].startswith(prefix):
        return []  # the usual case: no op of the group's scope just before it
    in_start, in_src, in_slot = graph.in_start, graph.in_src, graph.in_slot
    candidates = set(members)
    found: set[int] = set()
    k = root - 1
    while k >= 0 and names[k].startswith(prefix):
        lo, hi = in_start[k], in_start[k + 1]
        if hi > lo and all(slot == CONTROL for slot in in_slot[lo:hi]):
            found.update(src for src in in_src[lo:hi] if src in candidates)
        k -= 1
    return [m for m in members if m in found]


class _GroupRewrite:
    """The setter's result graph: ``graph`` with its devices, group roots rewired onto their new
    per-device NoOps (inserted just before the root) and the old per-device NoOps dropped.

    Built from the graph's arrays: the stretches between rewritten nodes are copied as slices, so
    the cost is a few C-level copies plus work per rewritten node. The GraphDef is only made if
    someone asks the new graph for it (:func:`_rewritten_graph_def`).
    """

    def __init__(self, graph: Graph, devices: list[str], rule: list[int],
                 plans: dict[int, list[Kid[int]]], dropped: set[int], outer_deps: dict[int, list[int]] | None = None):
        self.graph, self.devices, self.rule = graph, devices, rule
        self.plans, self.dropped = plans, dropped
        self.outer_deps = outer_deps or {}  # root -> control inputs from an enclosing block
        self.colocated_roots = {i for i in plans if rule[i] == RULE_COLOCATED}
        self.noops = GraphDef()  # NodeDefs of the new per-device NoOps, in order
        n = len(graph)
        import numpy as np

        # Sources are old node ids, or n + k for the k-th new NoOp, until remapped at the end.
        # The new id of each (-1: dropped), as int32: a list would hold a million int objects.
        self.old_to_new = np.full(n, -1, dtype=np.int32)
        self.names: list[str] = []
        self.ops: list[str] = []
        self.new_devices: list[str] = []
        self.new_rules: list[int] = []
        self.attr_ids = array("i")
        self.in_start, self.in_src, self.in_slot = array("i", [0]), array("i"), array("i")
        self.noop_ids: list[int] = []  # new id of the k-th new NoOp
        self.noop_colocation: list[tuple[int, tuple[str, ...]]] = []
        self.specials = sorted(dropped | plans.keys())
        start = 0
        for i in self.specials:
            self._copy(start, i)
            if i in plans:
                self._rewire(i)
            start = i + 1
        self._copy(start, n)
        # source n + k is the k-th new NoOp
        self.old_to_new = np.concatenate([self.old_to_new, np.asarray(self.noop_ids, dtype=np.int32)])

    def _copy(self, a: int, b: int) -> None:
        """Copy old nodes ``a..b-1`` (none of them rewritten) to the end of the new graph."""
        if a >= b:
            return
        import numpy as np

        g = self.graph
        new = len(self.names)
        self.old_to_new[a:b] = np.arange(new, new + b - a, dtype=np.int32)
        self.names += g.names[a:b]
        self.ops += g.ops[a:b]
        self.new_devices += self.devices[a:b]
        self.new_rules += self.rule[a:b]
        self.attr_ids.frombytes(np.arange(a, b, dtype=np.int32).tobytes())
        lo, hi = g.in_start[a], g.in_start[b]
        shift = len(self.in_src) - lo
        stretch = np.frombuffer(g.in_start, dtype=np.int32)[a + 1:b + 1]
        self.in_start.frombytes((stretch + shift).astype(np.int32).tobytes() if shift else stretch.tobytes())
        self.in_src.extend(g.in_src[lo:hi])
        self.in_slot.extend(g.in_slot[lo:hi])

    def _append(self, name: str, op: str, device: str, rule: int, attr_id: int, srcs: list[int],
                slots: Iterable[int]) -> int:
        """Add one node with inputs ``srcs`` (with their ``slots``) at the end of the new graph."""
        self.names.append(name)
        self.ops.append(op)
        self.new_devices.append(device)
        self.new_rules.append(rule)
        self.attr_ids.append(attr_id)
        self.in_src.extend(srcs)
        self.in_slot.extend(slots)
        self.in_start.append(len(self.in_src))
        return len(self.names) - 1

    def _rewire(self, root: int) -> None:
        """Root ``root``: its new per-device NoOps (:func:`placeviz.group.group_plan`'s kids), then
        the root with control inputs on them."""
        g, plan = self.graph, self.plans[root]
        outer = self.outer_deps.get(root, [])
        if len(plan) == 1:
            controls = plan[0].members + outer
        else:
            controls = []
            for kid in plan:
                members = kid.members + outer  # the enclosing block's control inputs on every NoOp
                noop = self.noops.node.add(name=kid.name, op="NoOp", device=kid.device)
                noop.input.extend(map("^".__add__, map(g.names.__getitem__, members)))
                # TF 2.x marks ops used in control_dependencies([...]) (ops.py)
                noop.attr["_has_manual_control_dependencies"].b = True
                if root in self.colocated_roots:
                    # Built inside the root's colocate_with: the colocation decides the device.
                    noop.attr["_class"].CopyFrom(g.attr_nodes[root].attr["_class"])
                k = len(self.noops.node) - 1
                new = self._append(kid.name, "NoOp", kid.device, RULE_GROUP, -1 - k, members,
                                   repeat(CONTROL, len(members)))
                self.noop_ids.append(new)
                if root in self.colocated_roots:
                    self.noop_colocation.append((new, g.colocation[root]))
                controls.append(len(g) + k)
            controls += outer
        lo, hi = g.in_start[root], g.in_start[root + 1]
        data = [k for k in range(lo, hi) if g.in_slot[k] != CONTROL]
        self.old_to_new[root] = self._append(g.names[root], g.ops[root], self.devices[root], self.rule[root], root,
                                             [g.in_src[k] for k in data] + list(controls),
                                             [g.in_slot[k] for k in data] + [CONTROL] * len(controls))

    def names_added(self) -> list[str]:
        """The names of the new per-device NoOps, in order."""
        return [node.name for node in self.noops.node]

    def result(self, reference: dict[int, int], strategy_calls: list[int]) -> _Split:
        import numpy as np

        g, new_id = self.graph, self.old_to_new  # by old id (new NoOps: n + k)
        in_src = array("i", new_id[np.frombuffer(self.in_src, dtype=np.int32)].tobytes())
        # ``colocation`` is made on first use (the placer reads only ``colocated_names``).
        first = self.specials[0] if self.specials else len(g)  # ids below it keep their number
        colocation = partial(_new_colocation, g.colocation, new_id, first, self.noop_colocation)
        colocated_names = _renumbered(g.colocated_names, new_id, first, keys_only=True)
        # The names _class attrs name: the old graph's, when no dropped node named any (a new
        # NoOp names what its root names).
        located_names = None
        if g.computed("located_names") and not any(i in g.colocated_names for i in self.dropped):
            located_names = g.located_names
        if self.noop_colocation:  # NoOps built in a root's colocate_with carry its _class
            located = [(i, names) for i, names in ((i, _located_names(groups)) for i, groups in self.noop_colocation)
                       if names]
            colocated_names = _with_entries(colocated_names, located)
            if located_names is not None and located:
                located_names = located_names.union(*(names for _, names in located))
        # No node moved: the old graph's name index answers. Else the new one is made on first
        # use; until then names are looked up in the old graph's.
        index, ids_of, same_names_as = None, None, g if not self.specials else None
        if self.specials:
            index = partial(_new_index, g, self.names, self.dropped, self.specials[0])
            added = dict(zip(self.names_added(), self.noop_ids, strict=True))
            ids_of = partial(_new_ids_of, g, new_id[:len(g)], added)
        # Only what the GraphDef needs is kept for it (not this object, with its renumbering).
        make_graph_def = partial(_rewritten_graph_def, g, self.names, self.new_devices, self.in_start, in_src,
                                 self.in_slot, self.attr_ids, frozenset(self.plans), self.noops,
                                 self.specials[0] if self.specials else len(g))
        new_graph = Graph.derived(
            names=self.names, ops=self.ops, devices=self.new_devices, in_start=self.in_start, in_src=in_src,
            in_slot=self.in_slot, colocation=colocation,
            attr_nodes=RemappedNodeDefs(g.attr_nodes, self.noops.node, self.attr_ids, self.noop_ids),
            make_graph_def=make_graph_def, index=index, ids_of=ids_of, same_names_as=same_names_as,
            colocated_names=colocated_names,
            located_names=located_names, source=g,
            node_wire=partial(_remapped_node_wire, g, self.attr_ids, frozenset(self.plans)), versions_present=True)
        calls = [c for c in new_id[np.asarray(strategy_calls, dtype=np.int64)].tolist() if c >= 0]
        return new_graph, self.new_rules, partial(_renumbered, reference, new_id, first), calls

def _remapped_node_wire(source: Graph, attr_ids: array[int], rewired: frozenset[int]) -> NodeWire | None:
    """The setter's result graph's :attr:`Graph.node_wire`: its old nodes' bytes in the source's,
    the group roots whose control inputs were rebuilt (``rewired``, old ids) marked stale, as
    :func:`_rewritten_graph_def` rebuilds their inputs; the new NoOps have none."""
    import numpy as np

    wire = source.node_wire
    if wire is None:
        return None
    ids = np.frombuffer(attr_ids, dtype=np.int32)
    stale = frozenset(np.nonzero(np.isin(ids, np.fromiter(rewired, dtype=np.int64, count=len(rewired))))[0].tolist())
    return wire.remapped(ids, stale)


def _new_index(source: Graph, names: list[str], dropped: set[int], first: int) -> dict[str, int]:
    """The setter's result graph's name index: the old one, ids from ``first`` on renumbered."""
    index = source.index.copy()
    for i in dropped:
        del index[source.names[i]]
    index.update(zip(names[first:], range(first, len(names)), strict=True))
    return index


def _new_ids_of(source: Graph, new_id: NDArray[np.int32], added: dict[str, int], names: set[str]) -> dict[str, int]:
    """:meth:`Graph.ids_of` of the setter's result graph, from the old graph's ids.

    ``new_id``: the new id of each old node (-1 if dropped); ``added``: name -> new id of the new
    NoOps (a NoOp may take the name of a dropped node).
    """
    if names <= source.located_names:  # the usual case: the placer asks for the names _class names
        found = source.colocated_name_ids  # computed already: the setter looked them up
        if len(names) < len(source.located_names):
            found = {name: i for name, i in found.items() if name in names}
    else:
        found = source.ids_of(names)
    out = dict(zip(found, new_id[list(found.values())].tolist(), strict=True))
    if len(out) and -1 in out.values():
        out = {name: i for name, i in out.items() if i >= 0}
    out.update((name, i) for name, i in added.items() if name in names)
    return out


def _rewritten_graph_def(source: Graph, names: list[str], devices: list[str], in_start: array[int], in_src: array[int],
                         in_slot: array[int], attr_ids: array[int], rewired: frozenset[int], noops: GraphDef,
                         first: int) -> GraphDef:
    """The GraphDef of the setter's result graph: the old nodes with their devices, in the new order.

    ``attr_ids`` maps each new node to its old one (``-1 - k`` for the k-th new NoOp in ``noops``);
    ``rewired`` are the old ids of the group roots whose control inputs were rebuilt (the inputs
    arrays give them); nodes before ``first`` kept their position. Like the NodeDef-by-NodeDef copy
    it replaces, it keeps only ``node``, ``versions`` and ``library`` of the old GraphDef; the
    nodes before ``first`` are copied in one C-level ``CopyFrom`` of the whole GraphDef, cut there.
    """
    src = source.graph_def
    out = GraphDef()
    if len(unknown_fields.UnknownFieldSet(src)) == 0:
        out.CopyFrom(src)
        for field_descriptor, _ in out.ListFields():
            if field_descriptor.name not in ("node", "versions", "library"):
                out.ClearField(field_descriptor.name)
        del out.node[first:]
    else:  # unknown top-level fields must not be copied: copy node by node
        first = 0
    out.versions.CopyFrom(src.versions)  # also marks both as present, as the copy always did
    out.library.CopyFrom(src.library)
    nodes, added = src.node, noops.node
    for j in range(first, len(names)):
        attr_id = attr_ids[j]
        new = out.node.add()
        if attr_id < 0:
            new.CopyFrom(added[-1 - attr_id])
            continue
        node = nodes[attr_id]
        new.CopyFrom(node)
        if attr_id in rewired:
            del new.input[:]
            new.input.extend(x for x in node.input if not x.startswith("^"))
            lo, hi = in_start[j], in_start[j + 1]
            new.input.extend("^" + names[s] for s, slot in zip(in_src[lo:hi], in_slot[lo:hi], strict=True)
                             if slot == CONTROL)
    for node, device in zip(out.node, devices, strict=True):
        node.device = device
    return out


def _renumbered(mapping: dict[int, _V], new_id: NDArray[np.int32], first: int,
                keys_only: bool = False) -> dict[int, _V]:
    """``mapping`` with its node-id keys (and values, unless ``keys_only``) renumbered through
    ``new_id`` (a numpy int32 array: the new id of each old one); entries that name a dropped
    node (new id -1) are left out. Order is kept.

    Ids below ``first`` (the first node the group split rewrote) keep their number, so the
    leading entries that name only such ids are copied as they are (one C-level copy: the split's
    NoOps usually sit near the end of a graph, after the model)."""
    import numpy as np

    old_keys = np.fromiter(mapping.keys(), dtype=np.int64, count=len(mapping))
    moved = old_keys >= first
    old_values = None
    if not keys_only:
        old_values = np.fromiter(mapping.values(), dtype=np.int64, count=len(mapping))
        moved |= old_values >= first
    cut = int(moved.argmax()) if moved.any() else len(mapping)
    out = dict(islice(mapping.items(), cut))
    if cut == len(mapping):
        return out
    keys = new_id[old_keys[cut:]].tolist()
    values = (list(islice(mapping.values(), cut, None)) if old_values is None else
              new_id[old_values[cut:]].tolist())
    pairs = zip(keys, values, strict=True)
    if -1 in keys or (not keys_only and -1 in values):  # entries naming a dropped node are left out
        out.update((key, value) for key, value in pairs if key >= 0 and (keys_only or value >= 0))
    else:
        out.update(pairs)
    return out


def _new_colocation(colocation: dict[int, tuple[str, ...]], new_id: NDArray[np.int32], first: int,
                    added: list[tuple[int, tuple[str, ...]]]) -> dict[int, tuple[str, ...]]:
    """The setter's result graph's ``colocation``: the old one renumbered (:func:`_renumbered`),
    with the ``_class`` of the new NoOps (``added``) in id order."""
    out = _renumbered(colocation, new_id, first, keys_only=True)
    return _with_entries(out, added) if added else out


def _with_entries(mapping: dict[int, _V], entries: list[tuple[int, _V]]) -> dict[int, _V]:
    """``mapping`` (int keys, ascending) with a few ``entries`` (new keys, ascending) put in key order.

    The long runs of ``mapping`` between the new keys are copied as slices, not sorted again.
    """
    keys, values = list(mapping), list(mapping.values())
    out_keys: list[int] = []
    out_values: list[_V] = []
    start = 0
    for key, value in entries:
        cut = bisect_left(keys, key, start)
        out_keys += keys[start:cut]
        out_values += values[start:cut]
        out_keys.append(key)
        out_values.append(value)
        start = cut
    out_keys += keys[start:]
    out_values += values[start:]
    return dict(zip(out_keys, out_values, strict=True))


PLAIN_NOOP_NAMES = frozenset({"update_barrier"})
"""Control-only NoOps that library code builds with ``no_op`` under ``control_dependencies``, never
with ``group``: tf_slim's and tf.contrib.training's ``create_train_op`` (``update_barrier`` over the
UPDATE_OPS). An unplaced GraphDef cannot tell ``group(a, b)`` from ``with control_dependencies([a,
b]): no_op()`` (both are one NoOp with control inputs); under the setter only ``group`` splits into
per-device NoOps. Every other control-only NoOp is taken for a ``group`` (TF's library builds most of
them so: ``init``, ``<optimizer>/update``, ``ExponentialMovingAverage``, ``group_deps``);
``--plain-noop NAME`` says otherwise for a program's own."""


_LIBRARY_GROUP = re.compile(
    r"(?:.*/)?(?:init|group_deps|init_all_tables|restore_all|restore_shard|update|ExponentialMovingAverage)"
    r"(?:_\d+)?")
"""Names TF's library gives ``group`` NoOps: variables.py ``variables_initializer`` "init",
control_flow_ops.py "group_deps", lookup_ops.py "init_all_tables", saver.py "restore_all" and
"restore_shard", optimizer.py ``_finish`` "<optimizer>/update", moving_averages.py
"ExponentialMovingAverage"."""


def _one_member_groups(graph: Graph, roots: dict[int, tuple[list[int], list[int]]],
                       noops: scopes.NoOps) -> _Groups:
    """``group`` NoOps over a single op, known by TF's library names.

    ``group(x)`` is built under ``device(x.device)``; a NoOp with one control input is otherwise
    taken for ``no_op`` (its own device). ``variables_initializer`` over one local variable (the
    SyncReplicas local step) is the usual case. ``noops``: :func:`scopes.control_only_noops`.
    """
    out: dict[int, tuple[list[int], list[int]]] = {}
    names, in_src = graph.names, graph.in_src
    ids, lo, hi = noops
    one = (hi - lo) == 1
    for i, first in zip(ids[one].tolist(), lo[one].tolist(), strict=True):
        if i not in roots and _LIBRARY_GROUP.fullmatch(names[i]):
            out[i] = ([], [in_src[first]])
    return out


def _is_plain_noop(name: str, plain: frozenset[str]) -> bool:
    return name in plain or name.rsplit("/", 1)[-1] in plain


def _outer_device(graph: Graph, root: int, members: list[int]) -> str:
    """The device scope around a ``group`` that the unplaced build made on one device.

    There ``group`` built its NoOp under ``device(<the members' device>)``, so the NoOp's own
    device is that device merged over the scope around the call. Split over several devices, the
    root NoOp is built under the outer scope alone (control_flow_ops.py ``group``): when the
    NoOp's device is just the members' device, the outer scope set nothing we can see.
    """
    own = graph.devices[root]
    member_devices = {graph.devices[_group_key_node(graph, m)] for m in members}
    return "" if member_devices == {own} else own


def _group_key_node(graph: Graph, m: int) -> int:
    """The node whose device ``group`` files member ``m`` under.

    An assign to a resource variable returns an ``_UnreadVariable`` whose ``device`` is the
    variable's, not the assign op's: ``group`` sorts those by the variable's device.
    """
    if graph.ops[m] in ASSIGN_VARIABLE_OPS:
        inputs = graph.inputs_of(m)
        if inputs and inputs[0][1] != CONTROL:
            return inputs[0][0]
    return m
