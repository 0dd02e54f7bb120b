"""The SyncReplicas pass: rewrite a plain training graph into the graph SyncReplicasOptimizer builds.

:func:`rewrite_sync` takes a single-worker training graph whose wrapped optimizer's apply ops are
present (built without ``SyncReplicasOptimizer``) and returns the graph TF 2.21's
``tf.compat.v1.train.SyncReplicasOptimizer.apply_gradients`` (plus ``get_init_tokens_op``) would
have built for the same model: same node names, op types, attrs, devices, colocation and control
edges, in TF's creation order (which decides TF's per-scope name counters and the device setter's
round-robin order). See ``docs/tf-behaviours.md``, "SyncReplicasOptimizer", for the op list.

Creation order reproduced (``O`` = the wrapped optimizer's ``apply_gradients`` block of the plain
graph, from its first slot/non-slot variable or ``<opt>/...`` op to the global-step increment)::

    plain[:O]  NoOp  sync_rep_local_step{...}  local_step_init_op
               report_uninitialized_variables/...   (global variables that exist before O)
               sync_replicas/{conditional_accumulator | sparse_conditional_accumulator, [Cast],
                              ...ApplyGradient, ...TakeGradient/num_required, ...TakeGradient}
                              per (grad, var)
    O          (update ops now take the TakeGradient outputs)
               sync_token_q  sync_token_q_Dequeue(^every ApplyGradient)  train_op
               Fill/dims(^increment)  Fill  sync_token_q_EnqueueMany
               [the plain graph's ExponentialMovingAverage.apply block, from before or after O,
                with ^EnqueueMany]
               sync_token_q_Close  sync_token_q_Close_1  sync_replicas/SetGlobalStep...
               sync_replicas/group_deps (per-device NoOps when the members sit on several devices)
    plain[O+1:] (users of the increment now use the train op; local_variables_initializer also
               initializes the local step), with Fill_1 + sync_token_q_EnqueueMany_1 (the
               init-tokens op) right after the last op that depended on the increment.

Variables. The local step follows the global step: a ref ``VariableV2`` (``/read``, ``Assign``,
``Assign_1``) when the global step is one, else a resource ``VarHandleOp`` with TF's
``Initializer/initial_value``, ``IsInitialized/VarIsInitializedOp``, ``Assign``,
``Read/ReadVariableOp``, a ``ReadVariableOp`` per apply-gradient and per ``SetGlobalStep`` (built by
``value()``, so with no device), ``AssignVariableOp``/``AssignVariableOp_1`` + their lazy reads, and
``Fill/ReadVariableOp``. Model variables may be ref or resource (``Apply*``/``ResourceApply*``);
``report_uninitialized_variables`` uses ``IsVariableInitialized`` or ``VarIsInitializedOp`` per kind.

Gradients are traced per variable from the wrapped optimizer's ``<opt>/update_<var>/`` ops:

* dense: the gradient input of the one ``Apply*``/``ResourceApply*`` op (:data:`APPLY_GRAD_INPUT`;
  tested against TF for every ``tf.compat.v1.train`` optimizer: GradientDescent, Momentum, Adam,
  Adagrad, AdagradDA, Adadelta, FTRL (``ApplyFtrl``/``ApplyFtrlV2``), RMSProp, centered RMSProp,
  ProximalGradientDescent, ProximalAdagrad; the AdaMax/AddSign/PowerSign/KerasMomentum kernels in
  the table have no v1 optimizer in TF 2.21) -> ``ResourceConditionalAccumulator``;
* IndexedSlices: ``Unique(indices)`` + ``UnsortedSegmentSum(values, ...)`` (TF's deduplication
  before every ``_apply_sparse``/``_resource_apply_sparse``: ``SparseApply*``, Adam's
  ``ScatterAdd``...), or GradientDescent's ``ScatterSub``/``ResourceScatterAdd`` of ``values*lr``
  -> ``SparseConditionalAccumulator`` with ``Cast`` ops to int64 for int32 indices / dense_shape.
  The dense_shape, which optimizers never read, is found where the gradient function built the
  slices (``gradients/<op>_grad/``: the ``Shape``/``VariableShape`` of the variable, or the
  ``Const`` of its static shape), else, for slices made by hand (``IndexedSlices(values, indices,
  dense_shape)``), the unread ``Shape``/integer ``Const`` of the variable's shape made closest
  after the indices and values. The update ops then take int64 indices and unknown-rank values
  from the take op: their type attrs (``Unique``'s ``T``, ``ScatterAdd``'s ``Tindices``...) and
  ``_output_shapes`` are re-derived as TF's shape functions do.

Names (tensorflow/python/framework/ops.py ``Graph.unique_name``, ``name_scope``): TF keeps one
flat dict of every full name in use; :class:`_Names` replays it over the plain build and the new
build in TF's creation order, so new names are unique against everything made before them
(a Scaffold's ``report_uninitialized_variables``, ``init_1``, ``ReadVariableOp``...), and plain ops
made after the optimizer are renamed as TF's counters rename them (``RewriteResult.renamed``; a
Supervisor's ready op becomes ``report_uninitialized_variables_1``). SyncReplicasOptimizer's own ops
(anchor ``NoOp``, local step, ``Assign``, ``report_uninitialized_variables``, and ``<name>/`` for
``ops.name_scope(None, self._name)``: accumulators, ``SetGlobalStep``, ``group_deps``) take the name
scope ``apply_gradients`` was called in (the plain optimizer's parent scope); the wrapped
optimizer's block and the token-queue ops are built under ``ops.name_scope("")``
(sync_replicas_optimizer.py ``apply_gradients``): at the top level. The rewrite refuses to write
two nodes of one name (an internal error).

Devices (ops.py device stack; sync_replicas_optimizer.py ``ops.device(var.device)`` /
``ops.device(global_step.device)``): ``W`` is the device context of the ``apply_gradients`` call,
read from the plain graph (the wrapped optimizer's ``_prepare`` constants, else the gradients'
seed; none when unplaced). The worker-side ops get ``W`` (the local step through its colocation
with the anchor; ``report_uninitialized_variables`` ``W`` merged with ``/cpu:0``); the accumulator
ops ``W`` merged with the variable's device; the token queue ops, and the plain block re-made
under ``device(global_step.device)``, the global step's device merged over theirs (the queue also
with ``/device:CPU:*``), except colocated ops, ops made with a cleared device stack
(``colocate_with(None, ignore_existing=True)``: a resource variable's reads/``Assign``) and
``group``'s per-device NoOps. ``local_variables_initializer()`` now groups the local step's
initializer: with no plain local variables it moves to ``W``, and a group holding it is split per
device (control_flow_ops.py ``group``). Later ``report_uninitialized_variables()`` over every
variable also lists the local step (variables.py: ``global_variables() + local_variables()``).

EMA (``variable_averages=True``): in sync mode a program hands its ``ExponentialMovingAverage`` to
``SyncReplicasOptimizer(variable_averages=ema, variables_to_average=...)`` instead of calling
``apply`` itself; TF then builds ``ema.apply`` inside ``apply_gradients`` under
``ops.device(global_step.device), ops.name_scope("")`` and ``control_dependencies([sync_op])``
(sync_replicas_optimizer.py ``apply_gradients``, after ``sync_token_q_EnqueueMany``). The plain
program's apply block (the ``ExponentialMovingAverage`` group NoOp, its ``ExponentialMovingAverage/``
ops and, made first in ``init_scope``, the shadow variables with their initial-value
``is_variable_initialized`` + ``cond`` ops; moving_averages.py ``apply``) is found wherever it was
built, after the optimizer (``control_dependencies([train_op])``, cifar10) or before it
(``update_ops.append(ema.apply(...))``, TF-Slim's train_image_classifier), taken out of the plain
train path (control inputs on the group dropped; ``group`` NoOps holding it or the increment redone
over their new members, one NoOp on their one device or per-device NoOps, control_flow_ops.py
``group``) and re-made there. Its shadow variables are then made after the optimizer's slots: the
``variables`` collection and later ``report_uninitialized_variables`` lists in creation order
follow. Names are recovered by replaying the plain build's ``unique_name`` counters in the plain
order (:meth:`_Names.prime`).

Chief and worker: only the chief calls ``get_init_tokens_op(num_tokens)`` (the SyncReplicas hook's
``begin``): ``is_chief=False`` leaves it out; ``num_tokens`` as TF (-1: R; 0: ``no_init_tokens``).

Refused, with one line: no global step or no optimizer increment of it, no apply ops, two
optimizers incrementing the global step, an update op that is not one of TF's optimizer kernels
(its gradient cannot be traced), IndexedSlices whose dense_shape cannot be found, a gradient made
inside the optimizer's block, a variable updated twice, graphs that already hold sync machinery,
``variable_averages`` without an ``ExponentialMovingAverage`` group (or with one inside the
optimizer's block, or read by ops the program made between it and the optimizer).

This module never imports TensorFlow.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, NoReturn

from placeviz.errors import PlacevizError
from placeviz.graph import Graph
from placeviz.group import GroupPlan, NoopNamer, by_device, group_plan, is_noop_of, noop_group, noop_names
from placeviz.names import unique_name
from placeviz.op_kinds import (
    ACCUMULATOR_OPS,
    RESOURCE_VARIABLE_OPS,
    SCATTER_UPDATE_OPS,
    VARIABLE_OPS,
    VARIABLE_READ_OPS,
)
from placeviz.protos import AttrValue, CollectionDef, GraphDef, MetaGraphDef, NodeDef, VariableDef

__all__ = ["APPLY_GRAD_INPUT", "RewriteResult", "SyncRewriteError", "rewrite_sync"]

_INT32, _INT64, _BOOL, _STRING = 3, 9, 10, 7

APPLY_GRAD_INPUT: dict[str, int] = {
    "ApplyGradientDescent": 2,
    "ApplyMomentum": 3,
    "ApplyKerasMomentum": 3,
    "ApplyAdam": 9,
    "ApplyAdaMax": 8,
    "ApplyAdagrad": 3,
    "ApplyAdagradV2": 4,
    "ApplyAdagradDA": 3,
    "ApplyAdadelta": 6,
    "ApplyFtrl": 3,
    "ApplyFtrlV2": 3,
    "ApplyRMSProp": 7,
    "ApplyCenteredRMSProp": 8,
    "ApplyProximalGradientDescent": 4,
    "ApplyProximalAdagrad": 5,
    "ApplyAddSign": 6,
    "ApplyPowerSign": 6,
}
"""Dense ``Apply*`` op -> index of its gradient input (TF's op signatures; the ``ResourceApply*`` twin
of each op takes its inputs in the same order)."""

_EMA_SCOPE = "ExponentialMovingAverage"
_UPDATE_PREFIXES = ("Apply", "SparseApply", "ResourceApply", "ResourceSparseApply")


@dataclass
class _Grad:
    """One (gradient, variable) pair of grads_and_vars, traced in the plain graph."""

    var: NodeDef
    ids: list[int]
    """Node ids of the variable's ``<opt>/update_<var>/`` ops."""
    dense: str | None = None
    values: str | None = None
    indices: str | None = None
    dense_shape: str | None = None

    @property
    def sparse(self) -> bool:
        return self.dense is None

    def tensors(self) -> list[str]:
        if self.dense is not None:
            return [self.dense]
        values, indices, _ = self.slices()
        return [values, indices]

    def slices(self) -> tuple[str, str, str]:
        """``(values, indices, dense_shape)`` of an IndexedSlices gradient (all three are set then)."""
        assert self.values is not None and self.indices is not None and self.dense_shape is not None
        return self.values, self.indices, self.dense_shape


class SyncRewriteError(PlacevizError):
    """The graph cannot be rewritten into SyncReplicas form (one line, says why)."""


@dataclass
class RewriteResult:
    """What :func:`rewrite_sync` made."""

    graph_def: GraphDef
    meta_graph: MetaGraphDef | None
    """The MetaGraphDef with updated collections, when one was given."""
    replicas_to_aggregate: int
    total_replicas: int
    tokens_per_step: int
    optimizer: str
    """Name scope of the wrapped optimizer (e.g. ``GradientDescent``)."""
    variables: list[str]
    """Variable op names, in grads_and_vars order, each with its accumulator."""
    accumulators: dict[str, str]
    """variable -> accumulator node name."""
    train_op: str
    """The worker's train op (the local-step ``Assign`` after the token dequeue)."""
    sync_op: str
    """What the chief queue runner runs (token EnqueueMany, or the moving-average group)."""
    chief_init_op: str
    local_step_init_op: str
    init_tokens_op: str
    token_queue: str
    ready_for_local_init_op: str
    added: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    """Plain-graph nodes whose name TF's counters would shift (old -> new)."""
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"sync rewrite: {len(self.variables)} variable(s) with accumulators, "
                f"R={self.replicas_to_aggregate}, W={self.total_replicas}, "
                f"tokens/step={self.tokens_per_step}, +{len(self.added)} nodes; "
                f"train_op={self.train_op}, sync_op={self.sync_op}")


# ------------------------------------------------------------------------------ small helpers
def _op_name(inp: str) -> str:
    return inp[1:] if inp.startswith("^") else inp.split(":", 1)[0]


def _shape_attr(dims: list[int] | None) -> AttrValue:
    a = AttrValue()
    a.shape.SetInParent()
    for d in dims or []:
        a.shape.dim.add().size = d
    return a


def _output_shapes(*shapes: list[int] | None) -> AttrValue:
    """``_output_shapes``; ``None`` is an unknown-rank shape."""
    a = AttrValue()
    a.list.SetInParent()
    for dims in shapes:
        s = a.list.shape.add()
        if dims is None:
            s.unknown_rank = True
            continue
        for d in dims:
            s.dim.add().size = d
    return a


class _NoShape(enum.Enum):
    """The sentinel :func:`_out_shape` returns for "no recorded shape" (``None`` is an unknown rank)."""

    NO_SHAPE = 0


_NO_SHAPE = _NoShape.NO_SHAPE


def _canon(tensor: str) -> str:
    """``name`` and ``name:0`` are the same tensor."""
    return tensor if ":" in tensor else f"{tensor}:0"


def _shape_of(s) -> list[int] | None:
    return None if s.unknown_rank else [d.size for d in s.dim]


def _out_shape(node: NodeDef | None, tensor: str) -> list[int] | None | Literal[_NoShape.NO_SHAPE]:
    """The static shape of output ``tensor`` from its node's ``_output_shapes`` (or _NO_SHAPE)."""
    if node is None or "_output_shapes" not in node.attr:
        return _NO_SHAPE
    k = int(tensor.partition(":")[2] or 0)
    shapes = node.attr["_output_shapes"].list.shape
    return _shape_of(shapes[k]) if k < len(shapes) else _NO_SHAPE


def _in_context(context: str, dev: str) -> str:
    """The device of an op built under ``ops.device(dev)`` in the device context ``context``:
    ``dev`` merged over it, and ``ops.device("")`` a null merge, the context itself
    (tensorflow/python/framework/ops.py ``_UserDeviceSpec.is_null_merge``)."""
    return _merge_device(context, dev) if dev else context


def _merge_device(outer: str, inner: str) -> str:
    """``with device(outer): with device(inner):`` for string devices."""
    if not outer:
        return inner
    from placeviz.devices import PyDeviceSpec  # noqa: PLC0415

    return PyDeviceSpec.parse(outer).merged_with(inner).to_string()


def _expand_args(op_def, node: NodeDef) -> list[str]:
    """Per data input position: the type attr naming its dtype ('' if fixed or a type list)."""
    out: list[str] = []
    for arg in op_def.input_arg:
        n = 1
        if arg.number_attr:
            n = node.attr[arg.number_attr].i if arg.number_attr in node.attr else 1
        elif arg.type_list_attr:
            n = len(node.attr[arg.type_list_attr].list.type) if arg.type_list_attr in node.attr else 0
        out.extend([arg.type_attr if not arg.type_list_attr else ""] * n)
    return out


_UNARY_SHAPE_OPS = frozenset({"Neg", "Sqrt", "Rsqrt", "Square", "Abs", "Sign", "Reciprocal", "Exp", "Log",
                              "Identity", "Cast", "Relu", "Sigmoid", "Tanh", "Floor", "Ceil", "Round",
                              "ZerosLike", "OnesLike", "StopGradient"})
_BINARY_SHAPE_OPS = frozenset({"Mul", "AddV2", "Add", "Sub", "RealDiv", "Div", "DivNoNan", "Maximum",
                               "Minimum", "Pow", "SquaredDifference", "FloorDiv", "TruncateDiv",
                               "MulNoNan", "Greater", "Less", "GreaterEqual", "LessEqual", "Equal"})


def _broadcast(a: list[int] | None, b: list[int] | None) -> list[int] | None:
    """TF's BroadcastBinaryOpOutputShapeFn on static shapes (-1 = unknown dim)."""
    if a is None or b is None:
        return None
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x == 1:
            out.append(y)
        elif y == 1 or y == -1:
            out.append(x)
        else:
            out.append(y)
    return out[::-1]


def _infer_shapes(op: str, ins: list, old: list, out_types) -> list | None:
    """Output shapes of an update op whose input shapes changed (None: keep them)."""
    if out_types and any(t > 100 for t in out_types):
        return None  # ref outputs (Scatter*, SparseApply*, Assign*): the variable's shape
    if not old:
        return None
    if op in ("Unique", "UniqueV2"):
        return [[-1], ins[0]]
    if op in _UNARY_SHAPE_OPS:
        return [ins[0]]
    if op in _BINARY_SHAPE_OPS and len(ins) >= 2:
        return [_broadcast(ins[0], ins[1])]
    if op == "Shape":
        return [[-1] if ins[0] is None else [len(ins[0])]]
    if op.startswith("UnsortedSegment") and len(ins) >= 2:
        data, ids = ins[0], ins[1]
        if data is None or ids is None:
            return [None]
        return [[-1] + data[len(ids):]]
    return [None] * len(old)


def _int_tensor(values: list[int], dtype: int, shape: list[int] | None) -> AttrValue:
    a = AttrValue()
    t = a.tensor
    t.dtype = dtype
    t.tensor_shape.SetInParent()
    for d in shape or []:
        t.tensor_shape.dim.add().size = d
    if dtype == _INT64:
        t.int64_val.extend(values)
    else:
        t.int_val.extend(values)
    return a


def _int_values(t) -> list[int]:
    """The values an int32/int64 TensorProto spells out (``int_val``/``int64_val`` or packed
    ``tensor_content``); a splat constant gives its one value."""
    vals = list(t.int_val) or list(t.int64_val)
    if not vals and t.tensor_content:
        width = 8 if t.dtype == _INT64 else 4
        raw = t.tensor_content
        vals = [int.from_bytes(raw[k:k + width], "little", signed=True) for k in range(0, len(raw), width)]
    return vals


_MARK = "\x00"
"""Prefix of an input, in a plain node, that already names a node of the new build."""


class _Names:
    """TF's ``Graph.unique_name`` (tensorflow/python/framework/ops.py) replayed twice.

    ``unique_name`` keeps one flat dict of every full name (op names and name scopes, compared
    lowercase) and appends ``_<k>`` to a name already in use. ``plain`` replays the plain build,
    ``new`` the SyncReplicas build. A plain node is claimed component by component: each
    component's requested name is recovered from the plain counters (``foo_1`` was asked as
    ``foo`` when ``foo`` was in use and ``unique_name('foo')`` gives ``foo_1``), then asked again
    of the new build under its parent's new name. ``map``: plain full name -> new full name.
    Each ask is :func:`placeviz.names.unique_name` (the setter's ``group`` NoOps use it too).
    """

    def __init__(self):
        self.plain: dict[str, int] = {}
        self.new_used: dict[str, int] = {}
        self.map: dict[str, str] = {}
        self.reqs: dict[str, str] = {}

    def prime(self, plain_names) -> None:
        """Replay the plain build's counters over its node names in the plain creation order, so
        that claims made in the new order (a block the new build makes later) still recover the
        names the program asked for."""
        for name in plain_names:
            self.requested(name)

    def requested(self, old: str) -> str:
        """The last component ``unique_name`` was asked for when the plain build named ``old``."""
        got = self.reqs.get(old)
        if got is not None:
            return got
        parent, _, comp = old.rpartition("/")
        if parent:
            self.requested(parent)
        req = comp
        m = re.fullmatch(r"(.+)_(\d+)", comp)
        if m:
            base = f"{parent}/{m[1]}" if parent else m[1]
            if base.lower() in self.plain and unique_name(self.plain, base, mark_as_used=False) == old:
                req = m[1]
        full_req = f"{parent}/{req}" if parent else req
        if unique_name(self.plain, full_req) != old:  # an explicit name that unique_name altered
            self.plain[old.lower()] = self.plain.get(old.lower(), 0) + 1
            req = comp
        self.reqs[old] = req
        return req

    def claim(self, old: str, moved_from: str | None = None) -> str:
        """The new name of plain op or scope ``old``. ``moved_from``: a scope prefix of ``old``
        whose contents the new build makes at the top level (``ops.name_scope("")``)."""
        got = self.map.get(old)
        if got is not None:
            return got
        parent, _, comp = old.rpartition("/")
        if parent and parent == moved_from:
            self.claim(parent)
            new_parent = ""
        else:
            new_parent = self.claim(parent, moved_from) if parent else ""
        req = self.requested(old)
        result = unique_name(self.new_used, f"{new_parent}/{req}" if new_parent else req)
        self.map[old] = result
        return result

    def new(self, name: str) -> str:
        """``unique_name`` of an op the SyncReplicas build adds."""
        return unique_name(self.new_used, name)

    def rename(self, old: str) -> str:
        """The new name of a plain name (an unclaimed one follows its closest claimed scope)."""
        got = self.map.get(old)
        if got is not None:
            return got
        parent, _, comp = old.rpartition("/")
        return f"{self.rename(parent)}/{comp}" if parent else old


class _Builder:
    """Makes NodeDefs the way TF's Python op constructors do (default attrs included)."""

    def __init__(self, op_table, shapes: bool):
        self.table = op_table
        self.shapes = shapes

    def node(self, name: str, op: str, inputs=(), device: str = "", attrs: dict | None = None,
             coloc: list[str] | None = None, out_shapes: list[list[int] | None] | None = None,
             manual_deps: bool = False) -> NodeDef:
        n = NodeDef(name=name, op=op, device=device)
        n.input.extend(inputs)
        if self.table is not None:
            for k, v in self.table.default_attrs(op).items():
                n.attr[k].CopyFrom(v)
        for k, v in (attrs or {}).items():
            n.attr[k].CopyFrom(v)
        if coloc:
            n.attr["_class"].list.s.extend(c.encode() for c in coloc)
        if self.shapes and out_shapes is not None:
            n.attr["_output_shapes"].CopyFrom(_output_shapes(*out_shapes))
        if manual_deps:
            n.attr["_has_manual_control_dependencies"].b = True
        return n


def _type(t: int) -> AttrValue:
    return AttrValue(type=t)


def _int(v: int) -> AttrValue:
    return AttrValue(i=v)


def _b(v: bool) -> AttrValue:
    return AttrValue(b=v)


def _s(v: str) -> AttrValue:
    return AttrValue(s=v.encode())


# ------------------------------------------------------------------------------ the pass
def rewrite_sync(graph, replicas_to_aggregate: int, total_replicas: int | None = None,
                 variable_averages: bool = False, collections=None, op_table=None,
                 meta_graph: MetaGraphDef | None = None, name: str = "sync_replicas",
                 is_chief: bool = True, num_tokens: int = -1) -> RewriteResult:
    """Rewrite a plain training graph into SyncReplicasOptimizer's graph (see the module doc).

    ``graph``: a :class:`placeviz.graph.Graph`, a GraphDef, or a MetaGraphDef (then its
    collections are read and updated). ``collections``: a :class:`placeviz.io.Collections`
    (optional; gives global/local variables and train ops). ``variable_averages``: move the
    plain graph's ``ExponentialMovingAverage.apply`` block into the chief's sync op, as
    ``SyncReplicasOptimizer(variable_averages=ema)`` builds it. ``name``: the optimizer's
    ``name=`` argument, the name scope of its accumulators and chief ops (TF's default
    ``"sync_replicas"``). ``is_chief``: build the chief's graph, whose SyncReplicas hook (or
    hand-written chief code) calls ``get_init_tokens_op(num_tokens)`` (``Fill_1`` +
    ``sync_token_q_EnqueueMany_1``; ``no_init_tokens`` when ``num_tokens`` is 0); a worker's graph
    has no init-tokens op. ``num_tokens``: -1 is TF's default, ``replicas_to_aggregate``.
    Raises :class:`SyncRewriteError`.
    """
    if not name or "/" in name:
        raise SyncRewriteError(f"the SyncReplicasOptimizer name must be a non-empty name without '/', got {name!r}")
    if replicas_to_aggregate is None or replicas_to_aggregate < 1:
        raise SyncRewriteError(f"replicas_to_aggregate must be >= 1, got {replicas_to_aggregate}")
    if total_replicas is None:
        total_replicas = replicas_to_aggregate
    if total_replicas < 1:
        raise SyncRewriteError(f"total_replicas must be >= 1, got {total_replicas}")
    if num_tokens != -1 and num_tokens < replicas_to_aggregate - total_replicas:
        # sync_replicas_optimizer.py get_init_tokens_op: "Too few tokens to finish the first step"
        raise SyncRewriteError(f"num_tokens {num_tokens} is too few to finish the first step: at least "
                               f"replicas_to_aggregate - total_replicas = {replicas_to_aggregate - total_replicas}")
    if op_table is None:
        from placeviz.ops import load_op_table  # noqa: PLC0415

        op_table = load_op_table()
    if isinstance(graph, MetaGraphDef) or type(graph).__name__ == "MetaGraphDef":
        meta_graph = graph if isinstance(graph, MetaGraphDef) else MetaGraphDef.FromString(
            graph.SerializeToString())
        graph_def = meta_graph.graph_def
    elif isinstance(graph, Graph):
        graph_def = graph.graph_def
    else:
        graph_def = graph if isinstance(graph, GraphDef) else GraphDef.FromString(graph.SerializeToString())
    if collections is None and meta_graph is not None:
        from placeviz.io import read_collections  # noqa: PLC0415

        collections = read_collections(meta_graph)
    return _Rewrite(graph_def, replicas_to_aggregate, total_replicas, variable_averages,
                    collections, op_table, meta_graph, name, is_chief, num_tokens).run()


class _Rewrite:
    def __init__(self, graph_def, r, w, ema, collections, op_table, meta, name="sync_replicas",
                 is_chief=True, num_tokens=-1):
        self.gd = graph_def
        self.is_chief = is_chief
        self.num_tokens = num_tokens
        self.scope_name = name
        self.nodes = list(graph_def.node)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.r, self.w = r, w
        self.tokens_per_step = max(r, w)
        self.want_ema = ema
        self.coll = collections
        self.table = op_table
        self.meta = meta
        self.shapes = bool(self.nodes) and "_output_shapes" in self.nodes[0].attr
        self.b = _Builder(op_table, self.shapes)
        self.notes: list[str] = []
        self._scopes: dict[str, list[NodeDef]] | None = None

    # -------------------------------------------------------------- analysis of the plain graph
    def fail(self, message: str) -> NoReturn:
        raise SyncRewriteError(message)

    def node(self, name: str) -> NodeDef | None:
        i = self.index.get(name)
        return None if i is None else self.nodes[i]

    def known(self, name: str) -> NodeDef:
        """The plain node ``name``, which this pass found in the graph (never absent)."""
        return self.nodes[self.index[name]]

    def source_variable(self, inp: str) -> NodeDef | None:
        """The variable op a (ref/handle/value) input comes from, through reads and identities."""
        seen = set()
        name = _op_name(inp)
        while name not in seen:
            seen.add(name)
            n = self.node(name)
            if n is None:
                return None
            if n.op in VARIABLE_OPS:
                return n
            if n.op not in VARIABLE_READ_OPS or not n.input:
                return None
            name = _op_name(n.input[0])
        return None

    def analyse(self) -> None:
        nodes = self.nodes
        if any(n.op in ACCUMULATOR_OPS for n in nodes) or "sync_token_q" in self.index:
            self.fail("the graph is already synchronous (it holds SyncReplicas accumulators or a "
                      "sync_token_q); rewrite its plain (non-sync) build instead")
        if not any(n.op.startswith(_UPDATE_PREFIXES) or n.op in SCATTER_UPDATE_OPS for n in nodes):
            self.fail("no optimizer apply ops (Apply*/ResourceApply*/SparseApply*/Scatter*) found: "
                      "nothing to aggregate")
        # global step increment: `<opt>` = AssignAdd(global_step, `<opt>/value` or `<opt>/Const`).
        gs_name = self.global_step_name()
        incs = [i for i, n in enumerate(nodes)
                if n.op in ("AssignAdd", "AssignAddVariableOp") and n.input
                and (v := self.source_variable(n.input[0])) is not None and v.name == gs_name]
        if gs_name is None or not incs:
            self.fail("no global step (or no optimizer increment of it) found: "
                      "SyncReplicasOptimizer needs apply_gradients(..., global_step=...)")
        # The optimizer's name scope is the increment's name (``assign_add(global_step, 1,
        # name=<opt name>)``); its per-variable updates are under ``<opt>/update_<var>/``.
        scopes_with_updates = set()
        for n in nodes:
            head, sep, _rest = n.name.partition("/update_")
            if sep:
                scopes_with_updates.add(head)
        inc = [i for i in incs if nodes[i].name in scopes_with_updates]
        if not inc:
            self.fail(f"no optimizer increments the global step {gs_name!r} next to its "
                      "<optimizer>/update_<variable>/ ops (apply_gradients without global_step?)")
        if len(inc) > 1:
            self.fail("more than one optimizer increments the global step: "
                      + ", ".join(nodes[i].name for i in inc) + " (only one wrapped optimizer is supported)")
        self.scope = nodes[inc[0]].name
        self.inc = inc[0]
        self.gs = self.known(gs_name)
        self.gs_resource = self.gs.op in RESOURCE_VARIABLE_OPS
        if not self.gs_resource:
            if f"{gs_name}/read" not in self.index:
                self.fail(f"the global step {gs_name!r} has no {gs_name}/read snapshot")
            self.gs_read = f"{gs_name}/read"
        self.gs_dtype = self.gs.attr["dtype"].type
        if self.gs_dtype not in (_INT64, _INT32):
            self.fail(f"the global step {gs_name!r} is not an integer variable")
        self.find_updates()
        self.find_block()

    def global_step_name(self) -> str | None:
        if self.meta is not None and "global_step" in self.meta.collection_def:
            vals = self.meta.collection_def["global_step"].bytes_list.value
            if vals:
                vd = VariableDef.FromString(vals[0])
                return _op_name(vd.variable_name)
        if "global_step" in self.index:
            return "global_step"
        return None

    def dtype_of(self, tensor: str) -> int | None:
        name, _, slot = tensor.partition(":")
        n = self.node(name)
        types = self.table.output_types(n) if (n is not None and self.table is not None) else None
        k = int(slot) if slot else 0
        if not types or k >= len(types):
            return None
        return types[k] % 100 if types[k] != 20 else 20

    def find_updates(self) -> None:
        """Per variable (grads_and_vars order): its gradient, dense or IndexedSlices.

        The wrapped optimizer builds each variable's update under ``<opt>/update_<var>/``. A dense
        gradient is the gradient input of the one ``Apply*``/``ResourceApply*`` op there. An
        IndexedSlices gradient is consumed as TF's optimizers do (``optimizer.py``): deduplicated
        (``Unique(indices)`` + ``UnsortedSegmentSum(values, ...)``) before ``_apply_sparse`` /
        ``_resource_apply_sparse``, or, for GradientDescent, ``ScatterSub(var, indices, values*lr)``
        / ``ResourceScatterAdd(var, indices, -values*lr)``.
        """
        nodes = self.nodes
        prefix = f"{self.scope}/update_"
        var_names = {n.name for n in nodes if n.op in VARIABLE_OPS}
        groups: dict[str, list[int]] = {}
        for i, n in enumerate(nodes[: self.inc]):
            if not n.name.startswith(prefix):
                continue
            # the longest variable name that `<var>/...` starts with
            parts = n.name[len(prefix):].split("/")
            var = next((v for k in range(len(parts) - 1, 0, -1)
                        if (v := "/".join(parts[:k])) in var_names), None)
            if var is None:
                self.fail(f"{n.name}: cannot tell which variable this update op belongs to")
            groups.setdefault(var, []).append(i)
        self.grads: list[_Grad] = []
        for var_name, ids in groups.items():
            self.grads.append(self.gradient_of(self.known(var_name), ids))

    def gradient_of(self, var: NodeDef, ids: list[int]) -> _Grad:
        nodes = self.nodes
        ops = [nodes[i] for i in ids]
        if var.op in RESOURCE_VARIABLE_OPS and var.attr["dtype"].type == 0:
            self.fail(f"{var.name}: resource variable without a dtype attr")
        for n in ops:
            base = n.op[len("Resource"):] if n.op.startswith("ResourceApply") else n.op
            if base in APPLY_GRAD_INPUT:
                k = APPLY_GRAD_INPUT[base]
                if k >= len(n.input) or n.input[k].startswith("^"):
                    self.fail(f"{n.name}: no gradient input at position {k}")
                src = self.source_variable(n.input[0])
                if src is None or src.name != var.name:
                    self.fail(f"{n.name}: cannot trace its variable input {n.input[0]!r} to {var.name}")
                return _Grad(var=var, ids=ids, dense=n.input[k])
        by_name = {n.name: n for n in ops}
        unique = [n for n in ops if n.op in ("Unique", "UniqueV2")]
        if unique:
            u = unique[0]
            indices = u.input[0]
            seg = [n for n in ops if n.op == "UnsortedSegmentSum" and len(n.input) > 1
                   and n.input[1] == f"{u.name}:1"]
            if not seg:
                self.fail(f"{u.name}: deduplicated sparse update without its UnsortedSegmentSum")
            values = seg[0].input[0]
        else:
            scatter = [n for n in ops if n.op in SCATTER_UPDATE_OPS]
            if not scatter:
                ops_seen = ", ".join(sorted({n.op for n in ops}))
                self.fail(f"{var.name}: no dense or sparse update op the sync rewrite knows among "
                          f"{ops_seen}; cannot trace its gradient")
            s = scatter[0]
            indices = s.input[1]
            t = s.input[2]
            while _op_name(t) in by_name and by_name[_op_name(t)].op in ("Mul", "Neg"):
                t = by_name[_op_name(t)].input[0]
            values = t
        for t in (indices, values):
            if _op_name(t) in by_name:
                self.fail(f"{var.name}: cannot trace its IndexedSlices gradient (got {t!r})")
        return _Grad(var=var, ids=ids, values=values, indices=indices,
                     dense_shape=self.dense_shape_of(var, indices, values))

    def dense_shape_of(self, var: NodeDef, indices: str, values: str) -> str:
        """The ``dense_shape`` tensor of the IndexedSlices gradient of ``var``.

        Optimizers never read it, so it is found where the gradient function made the slices
        (``gradients/<op>_grad/``, reached from the indices through pass-through ops): the
        ``Shape``/``VariableShape`` of the variable there, or the ``Const`` holding its static shape
        (``variable_shape`` of a fully defined resource variable).
        """
        dims = [d.size for d in var.attr["shape"].shape.dim]
        for start in (indices, values):
            t = start
            for _ in range(12):
                name = _op_name(t)
                n = self.node(name)
                if n is None:
                    break
                if "_grad/" in name:
                    scope = name.rsplit("_grad/", 1)[0] + "_grad/"
                    found = self.shape_in_scope(scope, var, dims)
                    if found is not None:
                        return found
                data = [i for i in n.input if not i.startswith("^")]
                if not data:
                    break
                t = data[0]
        found = self.unread_shape(var, dims, indices, values)
        if found is not None:
            return found
        self.fail(f"{var.name}: cannot find the dense_shape of its IndexedSlices gradient "
                  f"(indices {indices!r})")
        raise AssertionError  # unreachable

    def unread_shape(self, var: NodeDef, dims: list[int], indices: str, values: str) -> str | None:
        """An IndexedSlices made by hand (``IndexedSlices(values, indices, dense_shape)``, as
        sync_replicas_optimizer_test.py does): its dense_shape is a tensor nobody reads in the plain
        graph (optimizers never do), made before the optimizer's block, holding the variable's
        shape: the ``Shape``/``VariableShape`` of the variable or an integer ``Const`` of its static
        shape. The one made closest after the indices and values (else closest before) is taken.
        """
        read = {_op_name(i) for n in self.nodes for i in n.input}
        made = max(self.index[_op_name(indices)], self.index[_op_name(values)])
        best: tuple[tuple[int, int], str] | None = None
        for k, n in enumerate(self.nodes[: self.inc]):
            if n.name in read or not self.holds_shape(n, var, dims):
                continue
            rank = (0, k - made) if k > made else (1, made - k)
            if best is None or rank < best[0]:
                best = (rank, n.name)
        return None if best is None else best[1]

    def holds_shape(self, n: NodeDef, var: NodeDef, dims: list[int]) -> bool:
        if n.op in ("Shape", "VariableShape") and n.input:
            src = self.source_variable(n.input[0])
            return src is not None and src.name == var.name
        if n.op == "Const" and n.attr["dtype"].type in (_INT32, _INT64):
            t = n.attr["value"].tensor
            vals = _int_values(t)
            shape = [d.size for d in t.tensor_shape.dim]
            if len(shape) == 1 and len(vals) == 1 and shape[0] > 1:
                vals = vals * shape[0]  # a splat constant
            return len(shape) == 1 and vals == dims
        return False

    def shape_in_scope(self, scope: str, var: NodeDef, dims: list[int]) -> str | None:
        if self._scopes is None:
            self._scopes = {}
            for n in self.nodes:
                self._scopes.setdefault(n.name.rpartition("/")[0] + "/", []).append(n)
        for n in self._scopes.get(scope, []):
            if n.op in ("Shape", "VariableShape") and n.input:
                src = self.source_variable(n.input[0])
                if src is not None and src.name == var.name:
                    return n.name
            if n.op == "Const" and n.attr["dtype"].type in (_INT32, _INT64):
                t = n.attr["value"].tensor
                if len(t.tensor_shape.dim) == 1 and _int_values(t) == dims:
                    return n.name
        return None

    def used_outside(self, name: str, start: int) -> bool:
        """Whether a node before or after the optimizer's block reads ``name``."""
        for j, n in enumerate(self.nodes):
            if start <= j <= self.inc:
                continue
            if any(_op_name(i) == name for i in n.input):
                return True
        return False

    def find_block(self) -> None:
        """Start of the wrapped optimizer's apply_gradients block (slots, `<opt>/...` ops)."""
        nodes = self.nodes
        main_vars = {g.var.name for g in self.grads}
        prefixes = {self.scope}
        # slots and non-slot variables (Adam's beta1_power...) are made by apply_gradients, after
        # every gradient; a variable the program made before (a learning-rate variable) is not
        # the optimizer's
        grads_made = max(self.index[_op_name(t)] for g in self.grads for t in g.tensors())
        for g in self.grads:
            for i in g.ids:
                for inp in nodes[i].input:
                    if inp.startswith("^"):
                        continue
                    v = self.source_variable(inp)
                    if (v is not None and v.name not in main_vars and v.name != self.gs.name
                            and self.index[v.name] > grads_made):
                        prefixes.add(v.name)
        start = self.inc
        tops = {p.split("/", 1)[0] for p in prefixes}
        for j, n in enumerate(nodes[: self.inc]):
            if n.name.split("/", 1)[0] not in tops:
                continue
            parts = n.name.split("/")
            if any("/".join(parts[:k]) in prefixes for k in range(1, len(parts) + 1)):
                start = j
                break
        # Constants made by the optimizer for its slots' initial values (AdagradDA's _create_slots)
        # come right before the first slot: part of the block when only the block uses them.
        grad_ops = {_op_name(t) for g in self.grads for t in g.tensors()}
        consumers: dict[str, set[int]] = {}
        for j, n in enumerate(nodes[start: self.inc + 1], start=start):
            for inp in n.input:
                consumers.setdefault(_op_name(inp), set()).add(j)
        while start > 0:
            prev = nodes[start - 1]
            if prev.op != "Const" or prev.input or prev.name in grad_ops:
                break
            users = consumers.get(prev.name)
            if not users or any(i < start for i in users) or self.used_outside(prev.name, start):
                break
            start -= 1
        self.start = start
        # The gradients must exist before the block (compute_gradients runs first).
        for g in self.grads:
            for t in g.tensors():
                if self.index[_op_name(t)] >= start:
                    self.fail(f"{g.var.name}: its gradient {t} is created inside the optimizer's "
                              "apply_gradients block; cannot aggregate it before the update")
        seen = set()
        for g in self.grads:
            if g.var.name in seen:
                self.fail(f"variable {g.var.name} is updated twice; cannot tell which gradient to aggregate")
            seen.add(g.var.name)

    # -------------------------------------------------------------- building the new graph
    # ------------------------------------------------------------------------------- the build
    # ``run`` replays SyncReplicasOptimizer.apply_gradients (sync_replicas_optimizer.py) block by
    # block, one method per block of TF's code, in TF's creation order. The node lists it fills,
    # concatenated in this order, are the output graph:
    #   pre (plain, before the wrapped optimizer's block)  added (local step, ready op, accumulators)
    #   new_block (the wrapped optimizer, rewired)  sync_nodes (token queue, train op, sync op)
    #   moved_ema  tail (queue close ops, SetGlobalStep, chief init group)  rest (plain, after it)
    def run(self) -> RewriteResult:
        self.analyse()
        self.split_program()
        self.start_names()
        self.build_local_step()
        self.build_ready_op()
        self.build_accumulators()
        self.build_wrapped_apply()
        self.build_token_queue()
        self.build_chief_init()
        self.rebuild_rest()
        return self.assemble()

    def split_program(self) -> None:
        """The plain graph around the wrapped optimizer's block ``O`` (see the module docstring),
        and the ExponentialMovingAverage.apply block, which moves into the sync op wherever the
        plain program built it."""
        nodes = self.nodes
        self.pre = nodes[: self.start]
        self.block = nodes[self.start: self.inc + 1]
        self.post = list(nodes[self.inc + 1:])
        self.inc_name = nodes[self.inc].name
        self.ema_block: list[NodeDef] = []
        self.ema_group = None
        if self.want_ema:
            lo, hi = self.find_ema()
            self.ema_block = nodes[lo: hi + 1]
            self.ema_group = self.ema_block[-1].name
            if hi < self.start:
                self.pre = nodes[:lo] + nodes[hi + 1: self.start]
            else:
                self.post = nodes[self.inc + 1: lo] + nodes[hi + 1:]
            # the program no longer groups it: in sync mode it never calls apply itself
            self.pre = [self.without_control(n, self.ema_group) for n in self.pre]

    def start_names(self) -> None:
        """TF's Graph.unique_name over full names, in the new creation order. apply_gradients runs in
        the name scope the plain optimizer's scope sits in (``P``); the wrapped optimizer's block
        and the token queue ops are built under ``name_scope("")``."""
        self.names = names = _Names()
        names.prime(n.name for n in self.nodes)
        for n in self.pre:
            names.claim(n.name)
        self.scope_prefix = self.scope.rpartition("/")[0]
        self.p_new = names.claim(self.scope_prefix) if self.scope_prefix else ""

    def new_op(self, base: str) -> str:
        """An op of SyncReplicasOptimizer.apply_gradients, in the caller's name scope."""
        return self.names.new(f"{self.p_new}/{base}" if self.p_new else base)

    def new_root(self, base: str) -> str:
        """An op built under ``ops.name_scope("")``."""
        return self.names.new(base)

    def build_local_step(self) -> None:
        """``# local_anchor op will be placed on this worker task by default.``
        ``# Colocating local_step variable prevents it being placed on the PS.``: the anchor
        ``NoOp``, ``sync_rep_local_step`` colocated with it (the global step's dtype and variable
        kind), and ``local_step_init_op = state_ops.assign(self._local_step, global_step)``.

        Devices: ``W`` the caller's device context, ``with ops.device(global_step.device)`` merged
        into it for the token queue ops and the wrapped optimizer's block."""
        b, gs_dtype, new = self.b, self.gs_dtype, self.new_op
        self.added: list[NodeDef] = []
        added = self.added
        self.w_dev = w_dev = self.worker_device()
        self.gs_dev = _merge_device(w_dev, self.gs.device)
        self.notes.append(f"worker device (the apply_gradients context): {w_dev or '(none)'}")
        anchor = new("NoOp")
        added.append(b.node(anchor, "NoOp", device=w_dev))
        self.ls = ls = new("sync_rep_local_step")
        self.loc = loc = [f"loc:@{anchor}"]
        self.dt = dt = _type(gs_dtype)
        if self.gs_resource:
            # VariableV1 under a use_resource scope, as the global step: a resource local step.
            init_value = f"{ls}/Initializer/initial_value"
            added.append(b.node(init_value, "Const", coloc=loc, out_shapes=[[]], device=w_dev,
                                attrs={"dtype": dt, "value": _int_tensor([0], gs_dtype, [])}))
            added.append(self.handle_like(ls, loc, w_dev))
            added.append(b.node(f"{ls}/IsInitialized/VarIsInitializedOp", "VarIsInitializedOp", [ls],
                                coloc=loc, out_shapes=[[]], device=w_dev))
            added.append(b.node(f"{ls}/Assign", "AssignVariableOp", [ls, init_value], device=w_dev,
                                attrs={"dtype": dt}, manual_deps=True))
            added.append(b.node(f"{ls}/Read/ReadVariableOp", "ReadVariableOp", [ls], coloc=loc,
                                out_shapes=[[]], attrs={"dtype": dt}, device=w_dev))
            # local_step_init_op = state_ops.assign(local_step, global_step)
            r0 = new("ReadVariableOp")
            added.append(b.node(r0, "ReadVariableOp", [self.gs.name], out_shapes=[[]], attrs={"dtype": dt}))
            self.local_init = new("AssignVariableOp")
            added.append(b.node(self.local_init, "AssignVariableOp", [ls, r0], manual_deps=True, device=w_dev,
                                attrs={"dtype": dt, "validate_shape": _b(True)}))
            r1 = new("ReadVariableOp")
            added.append(b.node(r1, "ReadVariableOp", [ls, f"^{self.local_init}"], out_shapes=[[]],
                                attrs={"dtype": dt}, device=w_dev))
            self.ls_vardef = VariableDef(variable_name=f"{ls}:0", initializer_name=f"{ls}/Assign",
                                         snapshot_name=f"{ls}/Read/ReadVariableOp:0",
                                         initial_value_name=f"{init_value}:0", is_resource=True)
        else:
            added.append(b.node(f"{ls}/initial_value", "Const", coloc=loc, out_shapes=[[]], device=w_dev,
                                attrs={"dtype": dt, "value": _int_tensor([0], gs_dtype, [])}))
            added.append(b.node(ls, "VariableV2", coloc=loc, out_shapes=[[]], device=w_dev,
                                attrs={"shape": _shape_attr([]), "dtype": dt}))
            added.append(b.node(f"{ls}/Assign", "Assign", [ls, f"{ls}/initial_value"], coloc=loc,
                                out_shapes=[[]], manual_deps=True, device=w_dev,
                                attrs={"T": dt, "use_locking": _b(True), "validate_shape": _b(True)}))
            added.append(b.node(f"{ls}/read", "Identity", [ls], coloc=loc, out_shapes=[[]],
                                attrs={"T": dt}, device=w_dev))
            self.local_init = new("Assign")
            added.append(b.node(self.local_init, "Assign", [ls, self.gs_read], coloc=loc, out_shapes=[[]],
                                manual_deps=True, device=w_dev,
                                attrs={"T": dt, "use_locking": _b(True), "validate_shape": _b(True)}))
            self.ls_vardef = VariableDef(variable_name=f"{ls}:0", initializer_name=f"{ls}/Assign",
                                         snapshot_name=f"{ls}/read:0",
                                         initial_value_name=f"{ls}/initial_value:0")

    def build_ready_op(self) -> None:
        """``self.ready_for_local_init_op = variables.report_uninitialized_variables(
        variables.global_variables())``: the global variables that exist at this moment."""
        pre_names = {n.name for n in self.pre}
        if self.coll is not None and self.coll.global_variables:
            gvars = [v for v in self.coll.global_variables if v in pre_names]
        else:
            local = set(self.coll.local_variables) if self.coll is not None else set()
            gvars = [n.name for n in self.pre if n.op in VARIABLE_OPS and n.name not in local]
        sc = self.new_op("report_uninitialized_variables")
        self.ready = self.report_uninitialized(self.added, sc, gvars, self.w_dev)

    def scoped(self, base: str) -> str:
        """An op under ``ops.name_scope(None, self._name)`` (``sync_replicas/...``): ``unique_name``
        in that scope."""
        return self.names.new(f"{self.sr}/{base}")

    def read_step(self, out: list[NodeDef], var_handle: str, ref_read: str | None, device: str,
                  cast: bool = True) -> str:
        """``convert_to_tensor(step)`` (+ ``cast(..., int64)``) inside the sync_replicas scope."""
        if ref_read is not None:
            t = ref_read
        else:
            # value(): built under colocate_with(None, ignore_existing=True), no device
            t = self.scoped("ReadVariableOp")
            out.append(self.b.node(t, "ReadVariableOp", [var_handle], out_shapes=[[]], attrs={"dtype": self.dt}))
        if cast and self.gs_dtype != _INT64:
            c = self.scoped("Cast")
            out.append(self.b.node(c, "Cast", [t], device=device, out_shapes=[[]], attrs={
                "SrcT": self.dt, "DstT": _type(_INT64), "Truncate": _b(False)}))
            t = c
        return t

    def build_accumulators(self) -> None:
        """``with ops.name_scope(None, self._name): for grad, var in grads_and_vars: with
        ops.device(var.device):`` a ``ConditionalAccumulator`` for a dense gradient, a
        ``SparseConditionalAccumulator`` for ``IndexedSlices``, each with its ``apply_grad``
        (``train_ops``) and ``take_grad(replicas_to_aggregate)`` (the aggregated gradient)."""
        b, added, ls = self.b, self.added, self.ls
        self.sr = self.new_op(self.scope_name)
        ls_ref_read = None if self.gs_resource else f"{ls}/read"
        self.applies: list[str] = []
        self.accums: list[tuple[str, bool]] = []
        self.accum_of: dict[str, str] = {}
        self.accum_dev: dict[str, str] = {}
        self.repl: dict[int, dict[str, str]] = {}  # update-op id -> {plain tensor: aggregated tensor}
        self.new_types: dict[str, int] = {}  # aggregated tensor -> dtype
        self.new_shapes: dict[str, list[int] | None] = {}
        for g in self.grads:
            var = g.var
            dev = _merge_device(self.w_dev, var.device)  # ``with ops.device(var.device)``
            dtype = var.attr["dtype"].type
            dims = [d.size for d in var.attr["shape"].shape.dim]
            shared = _s(f"{var.name}:0/grad_accum")
            if g.dense is not None:
                acc = self.scoped("conditional_accumulator")
                added.append(b.node(acc, "ResourceConditionalAccumulator", device=dev, out_shapes=[[2]],
                                    attrs={"dtype": _type(dtype), "shape": _shape_attr(dims),
                                           "shared_name": shared, "container": _s(""),
                                           "reduction_type": _s("MEAN")}))
                step = self.read_step(added, ls, ls_ref_read, dev)
                ap = self.scoped("ResourceAccumulatorApplyGradient")
                added.append(b.node(ap, "ResourceAccumulatorApplyGradient", [acc, step, g.dense],
                                    device=dev, manual_deps=True, attrs={"dtype": _type(dtype)}))
                tk = self.scoped("ResourceAccumulatorTakeGradient")
                added.append(self.num_required(f"{tk}/num_required", dev))
                added.append(b.node(tk, "ResourceAccumulatorTakeGradient", [acc, f"{tk}/num_required"],
                                    device=dev, out_shapes=[dims], attrs={"dtype": _type(dtype)}))
                m = {_canon(g.dense): tk}
                self.new_types[f"{tk}:0"] = dtype
                self.new_shapes[f"{tk}:0"] = dims
            else:
                values, indices, dense_shape = g.slices()
                acc = self.scoped("sparse_conditional_accumulator")
                cls = [f"loc:@{acc}"]
                added.append(b.node(acc, "SparseConditionalAccumulator", device=dev, out_shapes=[[2]],
                                    attrs={"dtype": _type(dtype), "shape": _shape_attr([]),
                                           "shared_name": shared, "container": _s(""),
                                           "reduction_type": _s("MEAN")}))
                step = self.read_step(added, ls, ls_ref_read, dev)
                idx = self.cast64(added, indices, self.scoped, dev)
                shp = self.cast64(added, dense_shape, self.scoped, dev)
                ap = self.scoped("SparseAccumulatorApplyGradient")
                added.append(b.node(ap, "SparseAccumulatorApplyGradient", [acc, step, idx, values, shp],
                                    device=dev, coloc=cls, manual_deps=True,
                                    attrs={"dtype": _type(dtype), "has_known_shape": _b(True)}))
                tk = self.scoped("SparseAccumulatorTakeGradient")
                added.append(self.num_required(f"{tk}/num_required", dev))
                added.append(b.node(tk, "SparseAccumulatorTakeGradient", [acc, f"{tk}/num_required"],
                                    device=dev, coloc=cls, out_shapes=[None, None, None],
                                    attrs={"dtype": _type(dtype)}))
                m = {_canon(indices): f"{tk}", _canon(values): f"{tk}:1"}
                self.new_types.update({f"{tk}:0": _INT64, f"{tk}:1": dtype})
                self.new_shapes.update({f"{tk}:0": None, f"{tk}:1": None})
            for i in g.ids:
                self.repl[i] = m
            self.applies.append(ap)
            self.accums.append((acc, g.sparse))
            self.accum_of[var.name] = acc
            self.accum_dev[acc] = dev

    def build_wrapped_apply(self) -> None:
        """``# sync_op will be assigned to the same device as the global step.`` ``with
        ops.device(global_step.device), ops.name_scope(""): update_op =
        self._opt.apply_gradients(aggregated_grads_and_vars, global_step)``: the plain block ``O``,
        its update ops rewired to the aggregated gradients."""
        names, scope_prefix = self.names, self.scope_prefix
        slot_prefixes = tuple(f"{g.var.name}/" for g in self.grads)
        new_block: list[NodeDef] = []
        for j, n in enumerate(self.block, start=self.start):
            moved = bool(scope_prefix) and n.name.startswith(scope_prefix + "/") and not n.name.startswith(
                slot_prefixes)
            names.claim(n.name, moved_from=scope_prefix if moved else None)
            if j in self.repl:
                m = self.repl[j]
                if any(_canon(i) in m for i in n.input if not i.startswith("^")):
                    n = NodeDef.FromString(n.SerializeToString())
                    for k, i in enumerate(n.input):
                        if not i.startswith("^") and _canon(i) in m:
                            n.input[k] = _MARK + m[_canon(i)]
            new_block.append(n)
        new_block = self.propagate(new_block, self.new_types, self.new_shapes)
        new_block = self.under_device(new_block, self.gs.device)
        self.inc_new = names.claim(self.inc_name)
        # `_has_manual_control_dependencies` marks ops used in control_dependencies([...]): the
        # increment now is (Fill/dims); the train op is when the plain increment was.
        self.inc_ctrl = "_has_manual_control_dependencies" in self.nodes[self.inc].attr
        inc_node = NodeDef.FromString(new_block[-1].SerializeToString())
        inc_node.attr["_has_manual_control_dependencies"].b = True
        new_block[-1] = inc_node
        self.new_block = new_block

    def build_token_queue(self) -> None:
        """``# Create token queue.`` ``sync_token_q`` (a FIFOQueue under the global step's device);
        ``# Replicas have to wait until they can get a token from the token queue.``: the dequeue
        after every ``apply_grad`` and ``train_op = state_ops.assign(self._local_step, token)``;
        ``# Sync_op needs to insert tokens to the token queue at the end of the step so the replicas
        can fetch them to start the next step.``: ``fill([tokens_per_step], global_step)`` enqueued
        after ``update_op``; then ``variable_averages.apply`` after the sync op, when asked."""
        b, gs_dtype, gs_dev, ls, dt, new_root = self.b, self.gs_dtype, self.gs_dev, self.ls, self.dt, self.new_root
        self.sync_nodes: list[NodeDef] = []
        sync_nodes = self.sync_nodes
        self.q = q = new_root("sync_token_q")
        sync_nodes.append(b.node(q, "FIFOQueueV2", device=_merge_device(gs_dev, "/device:CPU:*"),
                                 out_shapes=[[]], attrs={
            "component_types": AttrValue(list=AttrValue.ListValue(type=[gs_dtype])),
            "shapes": _output_shapes([]), "capacity": _int(-1), "container": _s(""),
            "shared_name": _s("sync_token_q")}))
        deq = new_root(f"{q}_Dequeue")
        sync_nodes.append(b.node(deq, "QueueDequeueV2", [q] + sorted(f"^{a}" for a in self.applies),
                                 device=gs_dev, out_shapes=[[]], attrs={
                                     "component_types": AttrValue(list=AttrValue.ListValue(type=[gs_dtype])),
                                     "timeout_ms": _int(-1)}))
        if self.gs_resource:
            self.train_op = new_root("AssignVariableOp")
            sync_nodes.append(b.node(self.train_op, "AssignVariableOp", [ls, deq], device=gs_dev,
                                     attrs={"dtype": dt, "validate_shape": _b(True)},
                                     manual_deps=True))  # its lazy read depends on it
            rd = new_root("ReadVariableOp")
            sync_nodes.append(b.node(rd, "ReadVariableOp", [ls, f"^{self.train_op}"], device=gs_dev,
                                     out_shapes=[[]], attrs={"dtype": dt}))
        else:
            # a ref Assign is colocated with the local step (the anchor's device)
            self.train_op = new_root("Assign")
            sync_nodes.append(b.node(self.train_op, "Assign", [ls, deq], coloc=self.loc, out_shapes=[[]],
                                     device=self.w_dev, manual_deps=self.inc_ctrl,
                                     attrs={"T": dt, "use_locking": _b(True), "validate_shape": _b(True)}))
        fill, fill_nodes = self.fill_tokens(new_root, self.tokens_per_step, self.inc_new, gs_dev)
        sync_nodes.extend(fill_nodes)
        enq = new_root(f"{q}_EnqueueMany")
        sync_nodes.append(b.node(enq, "QueueEnqueueManyV2", [q, fill], device=gs_dev, attrs={
            "Tcomponents": AttrValue(list=AttrValue.ListValue(type=[gs_dtype])), "timeout_ms": _int(-1)}))
        self.sync_op = enq
        self.moved_ema: list[NodeDef] = []
        if self.ema_block:
            # control_dependencies([sync_op]) marks the enqueue; the EMA group is no longer one.
            sync_nodes[-1].attr["_has_manual_control_dependencies"].b = True
            moved_ema = self.move_ema(self.ema_block, enq, self.inc_name, self.names)
            if "_has_manual_control_dependencies" in moved_ema[-1].attr:
                moved_ema[-1] = NodeDef.FromString(moved_ema[-1].SerializeToString())
                del moved_ema[-1].attr["_has_manual_control_dependencies"]
            self.moved_ema = self.under_device(moved_ema, self.gs.device, only={
                n.name for n in moved_ema if n.name == _EMA_SCOPE or n.name.startswith(_EMA_SCOPE + "/")})
            assert self.ema_group is not None  # set with ema_block (split_program)
            self.sync_op = self.names.claim(self.ema_group)

    def build_chief_init(self) -> None:
        """The chief queue runner's close ops (``QueueRunner(sync_token_queue, [sync_op])`` makes
        ``close()`` and ``close(cancel_pending_enqueues=True)``), then ``for accum, dev in
        self._accumulator_list: with ops.device(dev): chief_init_ops.append(accum.set_global_step(
        global_step, name="SetGlobalStep"))`` and ``self.chief_init_op =
        control_flow_ops.group(*(chief_init_ops))``."""
        b, gs_dev, new_root, q = self.b, self.gs_dev, self.new_root, self.q
        gs_ref_read = None if self.gs_resource else self.gs_read
        self.tail: list[NodeDef] = []
        tail = self.tail
        close = new_root(f"{q}_Close")
        tail.append(b.node(close, "QueueCloseV2", [q], device=gs_dev,
                           attrs={"cancel_pending_enqueues": _b(False)}))
        close1 = new_root(f"{q}_Close")
        tail.append(b.node(close1, "QueueCloseV2", [q], device=gs_dev,
                           attrs={"cancel_pending_enqueues": _b(True)}))
        members = [(self.local_init, self.w_dev)]
        for acc, sparse in self.accums:
            dev = self.accum_dev[acc]
            step = self.read_step(tail, self.gs.name, gs_ref_read, dev)
            s = self.scoped("SetGlobalStep")
            if sparse:
                tail.append(b.node(s, "AccumulatorSetGlobalStep", [acc, step], device=dev,
                                   coloc=[f"loc:@{acc}"], manual_deps=True))
            else:
                tail.append(b.node(s, "ResourceAccumulatorSetGlobalStep", [acc, step], device=dev,
                                   manual_deps=True))
            members.append((s, dev))
        self.chief_init = self.scoped("group_deps")
        tail.extend(self.group(self.chief_init, members, self.w_dev))

    def rebuild_rest(self) -> None:
        """The rest of the plain graph: users of the increment now use the train op;
        ``local_variables_initializer()`` also initializes the local step; the chief's
        ``get_init_tokens_op(num_tokens)`` right after the last op that used the update."""
        b, gs_dtype, gs_dev, new_root, q, ls = self.b, self.gs_dtype, self.gs_dev, self.new_root, self.q, self.ls
        post, inc_name, train_op, ema_group, w_dev = self.post, self.inc_name, self.train_op, self.ema_group, self.w_dev
        local_var_init = self.local_variables_initializer(post)
        last_user = None
        for k, n in enumerate(post):
            if any(_op_name(i) == inc_name for i in n.input):
                last_user = k
        # a per-device NoOp of ``group`` (control_flow_ops.py): its root is made in the same call
        post_pos = {n.name: k for k, n in enumerate(post)}
        while last_user is not None and (group := noop_group(post[last_user].name)) is not None:
            root = post_pos.get(group, -1)
            if root <= last_user or f"^{post[last_user].name}" not in post[root].input:
                break
            last_user = root
        # init-tokens op (get_init_tokens_op, the chief's hook), after the op that used the update
        num_tokens = self.r if self.num_tokens == -1 else self.num_tokens
        init_pos = 0 if last_user is None else last_user + 1
        rest: list[NodeDef] = []
        self.init_nodes: list[NodeDef] = []
        self.init_tokens = None
        ls_init_grouped = False
        regroup: set[str] = set()  # groups whose members changed (the increment, the EMA group)
        for k, n in enumerate(post + [None]):
            if k == init_pos and self.is_chief:
                if num_tokens > 0:
                    fill1, self.init_nodes = self.fill_tokens(new_root, num_tokens, None, gs_dev)
                    self.init_tokens = new_root(f"{q}_EnqueueMany")
                    self.init_nodes.append(b.node(self.init_tokens, "QueueEnqueueManyV2", [q, fill1], device=gs_dev,
                                                  attrs={"Tcomponents": AttrValue(list=AttrValue.ListValue(
                                                      type=[gs_dtype])), "timeout_ms": _int(-1)}))
                else:
                    self.init_tokens = new_root("no_init_tokens")
                    self.init_nodes = [b.node(self.init_tokens, "NoOp", device=gs_dev)]
                rest.extend(self.init_nodes)
            if n is None:
                break
            self.names.claim(n.name)
            m = NodeDef.FromString(n.SerializeToString())
            ins = []
            for inp in m.input:
                if _op_name(inp) == inc_name:
                    inp = _MARK + (f"^{train_op}" if inp.startswith("^") else train_op + inp[len(inc_name):])
                    regroup.add(n.name)
                elif ema_group and inp == f"^{ema_group}":
                    regroup.add(n.name)
                    continue
                ins.append(inp)
            if n.name == local_var_init:
                ins = sorted([*ins, f"{_MARK}^{ls}/Assign"], key=lambda s: s.replace(_MARK, ""))
                ls_init_grouped = True
            del m.input[:]
            m.input.extend(ins)
            rest.append(m)
        if not ls_init_grouped:  # no local_variables_initializer: nothing depends on it
            for n in self.added:
                if n.name == f"{ls}/Assign":
                    del n.attr["_has_manual_control_dependencies"]
        if ls_init_grouped:
            assert local_var_init is not None  # ls_init_grouped: a node of that name was met
            rest = self.regroup_local_init(rest, local_var_init, w_dev)
        devices = {n.name: n.device for n in [*self.pre, *self.new_block, *self.moved_ema, *rest]}
        devices.update({_MARK + n.name: n.device for n in [*self.added, *self.sync_nodes, *self.tail]})
        if self.gs_resource:
            # a resource assign returns the variable's lazy read (resource_variable_ops.py
            # _UnreadVariable): ``group`` reads the device of the variable, the local step's
            devices[_MARK + train_op] = w_dev
        rest = self.regroup_changed(rest, regroup - {local_var_init}, devices, w_dev)
        ls_node = next(n for n in self.added if n.name == ls)
        order: dict[str, int] = {}
        for k, n in enumerate([*self.pre, *self.added, *self.new_block, *self.moved_ema, *rest]):
            order.setdefault(n.name, k)
        self.rest = self.add_local_step_to_reports(rest, ls_node, w_dev, order)

    def assemble(self) -> RewriteResult:
        """The output GraphDef (every field of the input but the nodes kept), the plain nodes
        renamed as TF's counters name them, and the MetaGraphDef's collections updated."""
        names = self.names
        plain_out = [*self.pre, *self.new_block, *self.moved_ema, *self.rest]
        plain_ids = {id(n) for n in plain_out} - {id(n) for n in self.init_nodes}
        out_nodes = (self.pre + self.added + self.new_block + self.sync_nodes + self.moved_ema + self.tail
                     + self.rest)
        out_nodes = [self.apply_names(n, names) if id(n) in plain_ids else n for n in out_nodes]
        seen: set[str] = set()
        for n in out_nodes:
            if n.name in seen:
                raise SyncRewriteError(f"internal error: the rewrite would name two nodes {n.name!r}; "
                                       "no graph written (please report this graph)")
            seen.add(n.name)
        out = GraphDef()
        for field_desc, value in self.gd.ListFields():  # versions, library...: all but the nodes
            if field_desc.name == "node":
                continue
            if field_desc.message_type is None:
                setattr(out, field_desc.name, value)
            else:
                getattr(out, field_desc.name).CopyFrom(value)
        out.node.extend(out_nodes)
        new_names = [n.name for n in [*self.added, *self.sync_nodes, *self.tail, *self.init_nodes]]
        renamed = {old: nn for old, nn in names.map.items() if old != nn and old in self.index}
        meta = (self.update_meta(out, self.ls_vardef, self.train_op, self.inc_name, new_names, names)
                if self.meta is not None else None)
        return RewriteResult(
            graph_def=out, meta_graph=meta, replicas_to_aggregate=self.r, total_replicas=self.w,
            tokens_per_step=self.tokens_per_step, optimizer=self.scope, variables=[g.var.name for g in self.grads],
            accumulators=self.accum_of, train_op=self.train_op, sync_op=self.sync_op, chief_init_op=self.chief_init,
            local_step_init_op=self.local_init, init_tokens_op=self.init_tokens or "", token_queue=self.q,
            ready_for_local_init_op=self.ready, added=new_names, renamed=renamed, notes=self.notes)

    def apply_names(self, n: NodeDef, names: _Names) -> NodeDef:
        """A plain node with its name and inputs as TF's sync build names them (inputs marked
        with ``_MARK`` already name new nodes)."""
        m = NodeDef.FromString(n.SerializeToString())
        m.name = names.rename(n.name)
        ins = []
        for i in m.input:
            if i.startswith(_MARK):
                ins.append(i[len(_MARK):])
                continue
            ctrl = i.startswith("^")
            op = _op_name(i)
            new = names.rename(op)
            ins.append(("^" + new) if ctrl else new + i[len(op):])
        del m.input[:]
        m.input.extend(ins)
        if "_class" in m.attr:
            mark = b"loc:@" + _MARK.encode()
            vals = [(b"loc:@" + s[len(mark):]) if s.startswith(mark) else
                    (b"loc:@" + names.rename(s.decode()[5:]).encode()) if s.startswith(b"loc:@") else s
                    for s in m.attr["_class"].list.s]
            del m.attr["_class"].list.s[:]
            m.attr["_class"].list.s.extend(vals)
        return m

    def handle_like(self, name: str, coloc: list[str], device: str) -> NodeDef:
        """A scalar VarHandleOp like the global step's, named ``name``."""
        n = NodeDef.FromString(self.gs.SerializeToString())
        n.name = name
        n.device = device
        del n.input[:]
        n.attr["shared_name"].s = name.encode()
        if "debug_name" in n.attr:
            n.attr["debug_name"].s = f"{name}/".encode()
        del n.attr["_class"]
        n.attr["_class"].list.s.extend(c.encode() for c in coloc)
        return n

    def num_required(self, name: str, device: str) -> NodeDef:
        return self.b.node(name, "Const", device=device, out_shapes=[[]], attrs={
            "dtype": _type(_INT32), "value": _int_tensor([self.r], _INT32, [])})

    def cast64(self, out: list[NodeDef], tensor: str, scoped, device: str) -> str:
        """``math_ops.cast(tensor, int64)``: a ``sync_replicas/Cast`` unless already int64."""
        dtype = self.dtype_of(tensor)
        if dtype is None:
            self.fail(f"cannot tell the dtype of {tensor!r} (unknown op)")
        if dtype == _INT64:
            return tensor
        c = scoped("Cast")
        src = self.node(_op_name(tensor))
        shape = _out_shape(src, tensor)
        out.append(self.b.node(c, "Cast", [tensor], device=device,
                               out_shapes=None if shape is _NO_SHAPE else [shape],
                               attrs={"SrcT": _type(dtype), "DstT": _type(_INT64), "Truncate": _b(False)}))
        return c

    def fill_tokens(self, new, count: int, after: str | None, device: str) -> tuple[str, list[NodeDef]]:
        """``array_ops.fill([count], global_step)`` (inside control_dependencies([after]))."""
        b = self.b
        fill = new("Fill")
        ctrl = [f"^{after}"] if after else []
        nodes = [b.node(f"{fill}/dims", "Const", ctrl, device=device, out_shapes=[[1]], attrs={
            "dtype": _type(_INT32), "value": _int_tensor([count], _INT32, [1])})]
        if self.gs_resource:
            value = f"{fill}/ReadVariableOp"
            nodes.append(b.node(value, "ReadVariableOp", [self.gs.name, *ctrl],
                                out_shapes=[[]], attrs={"dtype": _type(self.gs_dtype)}))
        else:
            value = self.gs_read
        nodes.append(b.node(fill, "Fill", [f"{fill}/dims", value], device=device, out_shapes=[[count]],
                            attrs={"T": _type(self.gs_dtype), "index_type": _type(_INT32)}))
        return fill, nodes

    def group(self, name: str, members: list[tuple[str, str]], root_device: str = "",
              names: Callable[[str, int], list[str]] | None = None) -> list[NodeDef]:
        """``control_flow_ops.group`` over ``(member, device)`` called in the device context
        ``root_device``: :func:`placeviz.group.group_plan`'s NoOps (the per-device ones, then the
        root). ``names``: the group's ``unique_name`` (default: the new build's, as made now)."""
        split = by_device([f"^{m}" for m, _d in members], [d for _m, d in members])
        plan, kids = self.group_noops(name, split, root_device, names or partial(noop_names, self.names.new_used))
        inputs = [f"^{kid.name}" for kid in plan.kids] or [f"^{m}" for m, _d in members]
        return [*kids, self.b.node(name, "NoOp", sorted(inputs), device=plan.root_device)]

    def group_noops(self, name: str, split: dict[str, list[str]], context: str,
                    names: Callable[[str, int], list[str]],
                    key: Callable[[str], str] | None = None) -> tuple[GroupPlan[str], list[NodeDef]]:
        """:func:`placeviz.group.group_plan` of a group ``name`` over members filed by device
        (``split``; members are control inputs, ``^<name>``) in the device context
        ``context`` (the device of an op under ``ops.device(dev)`` there: ``dev`` merged over it,
        ``""`` the context itself), and the per-device NoOps it makes (their inputs sorted by
        ``key``), each a control input of the root."""
        plan = group_plan(name, split, partial(_in_context, context), names)
        kids = [self.b.node(kid.name, "NoOp", sorted(kid.members, key=key), device=kid.device,
                            manual_deps=True)  # a control input of the root
                for kid in plan.kids]
        return plan, kids

    def worker_device(self) -> str:
        """The device context SyncReplicasOptimizer.apply_gradients runs in (``W``).

        Its worker-side ops (the local-step anchor, ``report_uninitialized_variables``, ...) get
        it; ``with ops.device(var.device)`` / ``ops.device(global_step.device)`` merge into it.
        Evidence, in this order: the wrapped optimizer's hyper-parameter constants
        (``_prepare``'s ``<opt>/learning_rate``..., made in the bare context: no colocation, no
        device scope of their own), else the gradients' seed (``gradients/Fill``,
        ``gradients/grad_ys_0``), else no device.
        """
        opt = self.scope
        depth = opt.count("/") + 1
        for n in self.nodes[self.start: self.inc]:
            if (n.op == "Const" and "_class" not in n.attr and n.name.startswith(opt + "/")
                    and n.name.count("/") == depth):
                return n.device
        for n in reversed(self.nodes[: self.start]):
            if re.search(r"(^|/)gradients(_\d+)?/(Fill|grad_ys_\d+)$", n.name):
                return n.device
        return ""

    def under_device(self, block: list[NodeDef], device: str, only: set[str] | None = None) -> list[NodeDef]:
        """Plain ops re-made inside ``with ops.device(device)`` (ops.py device stack).

        The string device merges over what the outer device functions gave (the op's plain
        device). Colocated ops (``_class``) take their colocation's device, unchanged; a group
        NoOp made under ``ops.device(dev)`` of its members' one device keeps ``dev`` on top.
        ``only``: the names made inside the device scope (the others, made in ``init_scope``,
        keep their devices).
        """
        if not device:
            return block
        placed = bool(self.worker_device())
        own_vars = tuple(f"{n.name}/" for n in block if n.op in VARIABLE_OPS)
        # control_flow_ops.group over several devices: per-device NoOps ``<group>/NoOp[_k]`` made
        # under ``ops.device(dev)`` of their members (a full device: they keep it)
        roots = {n.name: {i[1:] for i in n.input if i.startswith("^")} for n in block if n.op == "NoOp"}
        kids = {k for root, ctrl in roots.items() for k in ctrl
                if is_noop_of(k, root)}
        out: list[NodeDef] = []
        new_dev: dict[str, str] = {}
        for n in block:
            if ("_class" in n.attr or n.name in kids or (placed and not n.device) or n.name.startswith(own_vars)
                    or (only is not None and n.name not in only)):
                # colocated; made under colocate_with(None, ignore_existing=True), which clears
                # the device stack (a resource variable's value()/Assign); or a variable's own
                # initializer ops, which set their own device
                d = n.device
            else:
                d = _merge_device(n.device, device)
                if n.op == "NoOp":
                    members = [i[1:] for i in n.input if i.startswith("^")]
                    devs = {new_dev.get(m, p.device if (p := self.node(m)) is not None else "")
                            for m in members}
                    if members and len(devs) == 1 and "" not in devs:
                        d = _merge_device(d, devs.pop())
            new_dev[n.name] = d
            if d != n.device:
                n = NodeDef.FromString(n.SerializeToString())
                n.device = d
            out.append(n)
        return out

    def add_local_step_to_reports(self, rest: list[NodeDef], ls_node: NodeDef, w_dev: str,
                                  order: dict[str, int]) -> list[NodeDef]:
        """Later ``report_uninitialized_variables()`` blocks whose ``var_list`` is the default
        (``global_variables() + local_variables()``, variables.py) now also list the local step
        (a LOCAL_VARIABLES member created by apply_gradients): they are rebuilt with it. A list in
        the plain creation order (the collections' order) follows the new creation order
        (``order``: an EMA block moved after the optimizer puts its shadow variables after the
        optimizer's slots).

        A block lists the local variables when the plain graph has some and the block names one;
        without plain local variables, a block over every global variable is taken as the
        default list, except the one feeding the ``ready_for_local_init_op`` collection
        (``report_uninitialized_variables(global_variables())`` of Scaffold/Supervisor).
        """
        ls = ls_node.name
        local = set(self.coll.local_variables) if self.coll is not None else set()
        if self.coll is not None and self.coll.global_variables:
            gvars = list(self.coll.global_variables)
        else:
            gvars = [n.name for n in self.nodes if n.op in VARIABLE_OPS
                     and n.name not in local]
        by_name = {n.name: n for n in rest}
        not_default: set[str] = set()
        if self.meta is not None and "ready_for_local_init_op" in self.meta.collection_def:
            frontier = [_op_name(t) for t in self.meta.collection_def["ready_for_local_init_op"].node_list.value]
            for _ in range(4):
                nxt: list[str] = []
                for f in frontier:
                    if f.endswith("/boolean_mask/GatherV2"):
                        not_default.add(f[: -len("/boolean_mask/GatherV2")])
                    n = by_name.get(f)
                    if n is not None:
                        nxt.extend(_op_name(i) for i in n.input if not i.startswith("^"))
                frontier = nxt
        out = list(rest)
        for n in rest:
            m = re.fullmatch(r"((?:.*/)?report_uninitialized_variables(?:_\d+)?)/Const", n.name)
            if not m or n.op != "Const" or n.attr["dtype"].type != _STRING:
                continue
            scope = m[1]
            listed = [v.decode() for v in n.attr["value"].tensor.string_val]
            if local:
                default = any(v in local for v in listed)
            else:
                default = scope not in not_default and listed == gvars and bool(listed)
            var_list = self.creation_order(listed, local, order)
            if default and ls not in listed:
                pos = len(var_list)
                for k, v in enumerate(var_list):
                    if v in local and self.index.get(v, 0) > self.inc:
                        pos = k
                        break
                var_list = [*var_list[:pos], ls, *var_list[pos:]]
            if var_list == listed:
                continue
            members = [x for x in out if x.name.startswith(scope + "/")]
            ctx = next((x.device for x in members if x.op == "VarIsInitializedOp"), None)
            if ctx is None:
                stack = by_name.get(f"{scope}/stack")
                ctx = stack.device if stack is not None else w_dev
                if ctx:
                    from placeviz.devices import PyDeviceSpec  # noqa: PLC0415

                    ctx = PyDeviceSpec.parse(ctx).replace(device_type=None, device_index=None).to_string()
            rebuilt: list[NodeDef] = []
            self.report_uninitialized(rebuilt, scope, var_list, ctx, var_nodes={ls: ls_node})
            for x in rebuilt:
                for k, i in enumerate(x.input):
                    if i == ls:
                        x.input[k] = _MARK + ls
                if "_class" in x.attr and x.input and x.input[0] == _MARK + ls:
                    vals = [b"loc:@" + _MARK.encode() + c[5:] for c in x.attr["_class"].list.s]
                    del x.attr["_class"].list.s[:]
                    x.attr["_class"].list.s.extend(vals)
            first = next(k for k, x in enumerate(out) if x.name.startswith(scope + "/"))
            keep = [x for x in out if not x.name.startswith(scope + "/")]
            out = keep[:first] + rebuilt + keep[first:]
            if ls in var_list and ls not in listed:
                self.notes.append(f"{scope}: report_uninitialized_variables() over every variable now also "
                                  f"lists the local step {ls}")
            if [v for v in var_list if v != ls] != listed:
                self.notes.append(f"{scope}: report_uninitialized_variables() lists the variables in "
                                  "the new creation order")
        return out

    def creation_order(self, listed: list[str], local: set[str], order: dict[str, int]) -> list[str]:
        """``listed`` (global variables, then local ones) in the new creation order, when it was
        in the plain creation order (a collection's order); else unchanged."""
        if any(v not in self.index or v not in order for v in listed):
            return listed
        plain = [(v in local, self.index[v]) for v in listed]
        if plain != sorted(plain):
            return listed
        return sorted(listed, key=lambda v: (v in local, order[v]))

    def regroup_changed(self, rest: list[NodeDef], changed: set[str], devices: dict[str, str],
                        w_dev: str) -> list[NodeDef]:
        """``control_flow_ops.group`` NoOps (control_flow_ops.py) whose members changed: the
        increment became the train op, the EMA group left. ``group`` puts its NoOp under
        ``ops.device(dev)`` of its members' one device, else makes one ``<name>/NoOp[_k]`` per
        device (sorted) under a root in the caller's context: both are redone over the new members.

        A plain NoOp is taken as such a group when its device is what ``group`` gave it: its
        members' one device merged over the context (the ``apply_gradients`` context ``W`` when
        that device names one), or the per-device form. Other NoOps keep their device.
        """
        if not changed:
            return rest
        by_name = {n.name: n for n in rest}

        def kids_of(root: NodeDef) -> list[str] | None:
            kids = [i[1:] for i in root.input]
            if kids and all(i.startswith("^") for i in root.input) and all(
                    is_noop_of(k, root.name) and k in by_name for k in kids):
                return kids
            return None

        plans: dict[str, tuple[list[str], list[str], str]] = {}  # root -> (kids, members, context)
        for name in changed:
            n = by_name.get(name)
            if n is None or n.op != "NoOp" or any(not i.lstrip(_MARK).startswith("^") for i in n.input):
                continue
            group = noop_group(name)
            root = by_name.get(group) if group is not None else None
            if root is not None and (kids := kids_of(root)) is not None and name in kids:
                members = [i for k in kids for i in by_name[k].input]
                plans[root.name] = (kids, members, root.device)
                continue
            plain = self.known(name)  # `changed` holds plain nodes (rebuild_rest)
            pdevs = {p.device for i in plain.input if (p := self.node(i[1:])) is not None}
            if len(pdevs) != 1:
                continue
            d = pdevs.pop()
            if not d:
                ctx = plain.device
            elif _merge_device(w_dev, d) == plain.device:
                ctx = w_dev
            else:
                continue
            plans[name] = ([], list(n.input), ctx)
        drop = {k for kids, _m, _c in plans.values() for k in kids}
        namer, position = self.rest_namer(rest, drop)

        def key(i: str) -> str:
            return i.replace(_MARK, "")

        out: list[NodeDef] = []
        for n in rest:
            if n.name in drop:
                continue
            if n.name not in plans:
                out.append(n)
                continue
            _kids, members, ctx = plans[n.name]
            split = by_device(members, [devices.get(i.replace("^", ""), "") for i in members])
            plan, noops = self.group_noops(n.name, split, ctx, partial(namer.names, position[n.name]), key)
            m = NodeDef.FromString(n.SerializeToString())
            del m.input[:]
            m.input.extend([f"^{kid.name}" for kid in plan.kids] or sorted(members, key=key))
            m.device = plan.root_device
            out.extend(noops)
            out.append(m)
        return out

    @staticmethod
    def rest_namer(rest: list[NodeDef], drop: set[str]) -> tuple[NoopNamer, dict[str, int]]:
        """The ``unique_name`` of groups re-made in ``rest`` (in creation order, plain names):
        over the names before each root, its old per-device NoOps (``drop``) left out; and each
        name's position in ``rest`` (a root's, for the namer)."""
        order = [n.name for n in rest]
        index = {name: k for k, name in enumerate(order)}
        return NoopNamer(order, index.get, {index[k] for k in drop if k in index}), index

    def regroup_local_init(self, rest: list[NodeDef], init: str, w_dev: str) -> list[NodeDef]:
        """Devices of ``local_variables_initializer()`` and the groups holding it, now that it
        groups the local step's initializer (``control_flow_ops.group``, control_flow_ops.py:
        one NoOp under ``ops.device(dev)`` when every member sits on ``dev``, else one
        ``<name>/NoOp[_k]`` per device, sorted, under a root made in the caller's context).

        Only the case TF programs give is handled: a bare ``init`` NoOp (no plain local variables)
        becomes a group of the local step's ``Assign`` on ``W``; a single-NoOp group holding it
        whose members now sit on several devices is split per device.
        """
        if not w_dev or self.local_variable_initializers():
            return rest
        out = []
        devices = {n.name: n.device for n in rest}
        for n in rest:
            if n.name == init and not n.device:
                n = NodeDef.FromString(n.SerializeToString())
                n.device = w_dev
                devices[n.name] = w_dev
            elif n.op == "NoOp" and f"^{init}" in n.input and all(i.startswith("^") for i in n.input):
                members = [(i[1:], devices.get(i[1:], "")) for i in n.input]
                if len({d for _m, d in members}) > 1:
                    namer, position = self.rest_namer(rest, set())
                    regrouped = self.group(n.name, members, n.device, partial(namer.names, position[n.name]))
                    for k in regrouped[:-1]:
                        devices[k.name] = k.device
                    root = regrouped[-1]
                    for key in ("_has_manual_control_dependencies",):
                        if key in n.attr:
                            root.attr[key].CopyFrom(n.attr[key])
                    out.extend(regrouped)
                    continue
            out.append(n)
        return out

    def local_variables_initializer(self, post: list[NodeDef]) -> str | None:
        """The plain ``local_variables_initializer()`` NoOp, which now also runs the local step's
        initializer (``variables_initializer(local_variables())``: a group of the initializers, or
        a bare ``init`` NoOp when there are none).

        With local variables: the NoOp whose control inputs are exactly their initializers. Without:
        a bare ``[scope/]init[_k]`` NoOp; Supervisor, Scaffold and slim group it with
        ``tables_initializer()`` (``init_all_tables``) into the local init op, which tells it from
        ``initialize_resources`` (also a bare ``init``); else the first bare ``init`` after the
        optimizer.
        """
        inits = self.local_variable_initializers()
        if inits:
            for n in post:
                if n.op == "NoOp" and {i[1:] for i in n.input if i.startswith("^")} == inits:
                    return n.name
            return None
        bare = [n.name for n in post if n.op == "NoOp" and not n.input
                and re.fullmatch(r"(.*/)?init(_\d+)?", n.name)]
        if not bare:
            return None
        for n in post:
            ctrl = [i[1:] for i in n.input if i.startswith("^")]
            if n.op == "NoOp" and any(re.fullmatch(r"(.*/)?init_all_tables(_\d+)?", c) for c in ctrl):
                hit = [c for c in ctrl if c in bare]
                if hit:
                    self.notes.append(f"{hit[0]}: taken as local_variables_initializer(); it now "
                                      "initializes the local step")
                    return hit[0]
        self.notes.append(f"{bare[0]}: taken as local_variables_initializer(); it now initializes "
                          "the local step")
        return bare[0]

    def propagate(self, block: list[NodeDef], types: dict[str, int],
                  shapes: dict[str, list[int] | None]) -> list[NodeDef]:
        """Dtype and static-shape changes from the aggregated gradients through the update ops.

        The take ops give int64 indices and unknown-rank values where the plain gradient may have
        had int32 indices and static shapes; TF then builds the same update ops with other type
        attrs (``Unique``'s ``T``, ``ScatterAdd``'s ``Tindices``...) and shapes.
        """
        out = []
        for n in block:
            data = [(k, i.removeprefix(_MARK)) for k, i in enumerate(
                x for x in n.input if not x.startswith("^"))]
            hit = [(k, _canon(i)) for k, i in data if _canon(i) in types or _canon(i) in shapes]
            if not hit:
                out.append(n)
                continue
            m = NodeDef.FromString(n.SerializeToString())
            old_types = self.table.output_types(n) if self.table is not None else None
            od = self.table.op_def(n.op) if self.table is not None else None
            if od is not None:
                args = _expand_args(od, m)
                for k, t in hit:
                    if t in types and k < len(args) and args[k]:
                        attr = args[k]
                        if m.attr[attr].type != types[t]:
                            m.attr[attr].type = types[t]
            new_types = self.table.output_types(m) if self.table is not None else None
            if old_types and new_types:
                for k, (a, c) in enumerate(zip(old_types, new_types, strict=False)):
                    if a != c:
                        types[f"{m.name}:{k}"] = c % 100
            if self.shapes and "_output_shapes" in m.attr:
                old = [_shape_of(s) for s in m.attr["_output_shapes"].list.shape]
                ins = []
                for _k, i in data:
                    ci = _canon(i)
                    if ci in shapes:
                        ins.append(shapes[ci])
                    else:
                        src = self.node(_op_name(i))
                        s = _out_shape(src, i) if src is not None else _NO_SHAPE
                        ins.append(None if s is _NO_SHAPE else s)
                res = _infer_shapes(m.op, ins, old, new_types)
                if res is not None and res != old:
                    m.attr["_output_shapes"].CopyFrom(_output_shapes(*res))
                    for k, (a, c) in enumerate(zip(old, res, strict=False)):
                        if a != c:
                            shapes[f"{m.name}:{k}"] = c
            out.append(m)
        return out

    def report_uninitialized(self, added: list[NodeDef], sc: str, gvars: list[str], ctx_device: str,
                             var_nodes: dict[str, NodeDef] | None = None) -> str:
        """``variables.report_uninitialized_variables(var_list)`` in name scope ``sc`` (TF:
        tensorflow/python/ops/variables.py): per variable ``is_variable_initialized`` (ref:
        ``IsVariableInitialized`` colocated with it; resource: ``VarIsInitializedOp`` in the
        caller's device context ``ctx_device``), the rest ``with ops.device("/cpu:0")``."""
        b = self.b
        nv = len(gvars)
        if nv == 0:  # ``array_ops.constant([], dtype=dtypes.string)``
            c = f"{sc}/Const"
            empty = AttrValue()
            empty.tensor.dtype = _STRING
            empty.tensor.tensor_shape.dim.add().size = 0
            added.append(b.node(c, "Const", device=_merge_device(ctx_device, "/device:CPU:0"),
                                out_shapes=[[0]], attrs={"dtype": _type(_STRING), "value": empty}))
            return f"{c}:0"
        cpu = _merge_device(ctx_device, "/device:CPU:0")
        inits = []
        counts: dict[str, int] = {}
        for v in gvars:
            vn = (var_nodes or {}).get(v) or self.node(v)
            if vn is None:  # a hand-made report_uninitialized_variables list naming no node
                self.fail(f"{sc}: lists {v!r}, which is not a node of the graph")
            # state_ops.is_variable_initialized: IsVariableInitialized (ref, colocated with the
            # variable) or the resource variable's is_initialized() (VarIsInitializedOp)
            op = "VarIsInitializedOp" if vn.op in RESOURCE_VARIABLE_OPS else "IsVariableInitialized"
            k = counts.get(op, 0)
            counts[op] = k + 1
            name = f"{sc}/{op}" + (f"_{k}" if k else "")
            if vn.op in RESOURCE_VARIABLE_OPS:
                added.append(b.node(name, op, [v], out_shapes=[[]], device=ctx_device))
            else:
                coloc = ([s.decode() for s in vn.attr["_class"].list.s] if "_class" in vn.attr
                         else [f"loc:@{v}"])
                added.append(b.node(name, op, [v], coloc=coloc, out_shapes=[[]], device=vn.device,
                                    attrs={"dtype": _type(vn.attr["dtype"].type)}))
            inits.append(name)
        bm = f"{sc}/boolean_mask"
        i32 = _type(_INT32)

        def const(name, vals, shape):
            added.append(b.node(name, "Const", device=cpu, out_shapes=[shape or []], attrs={
                "dtype": i32, "value": _int_tensor(vals, _INT32, shape)}))

        def sslice(name, src, begin, end, strides, bmask, emask, out):
            const(f"{name}/stack", [begin], [1])
            const(f"{name}/stack_1", [end], [1])
            const(f"{name}/stack_2", [strides], [1])
            added.append(b.node(name, "StridedSlice", [src, f"{name}/stack", f"{name}/stack_1",
                                                       f"{name}/stack_2"], device=cpu, out_shapes=[out],
                                attrs={"T": i32, "Index": i32, "begin_mask": _int(bmask),
                                       "end_mask": _int(emask), "ellipsis_mask": _int(0),
                                       "new_axis_mask": _int(0), "shrink_axis_mask": _int(0)}))

        added.append(b.node(f"{sc}/stack", "Pack", inits, device=cpu, out_shapes=[[nv]],
                            attrs={"N": _int(nv), "T": _type(_BOOL), "axis": _int(0)}))
        added.append(b.node(f"{sc}/LogicalNot", "LogicalNot", [f"{sc}/stack"], device=cpu,
                            out_shapes=[[nv]]))
        names = AttrValue()
        names.tensor.dtype = _STRING
        names.tensor.tensor_shape.dim.add().size = nv
        names.tensor.string_val.extend(v.encode() for v in gvars)
        added.append(b.node(f"{sc}/Const", "Const", device=cpu, out_shapes=[[nv]],
                            attrs={"dtype": _type(_STRING), "value": names}))
        const(f"{bm}/Shape", [nv], [1])
        sslice(f"{bm}/strided_slice", f"{bm}/Shape", 0, 1, 1, 0, 0, [1])
        const(f"{bm}/Prod/reduction_indices", [0], [1])
        added.append(b.node(f"{bm}/Prod", "Prod", [f"{bm}/strided_slice", f"{bm}/Prod/reduction_indices"],
                            device=cpu, out_shapes=[[]],
                            attrs={"T": i32, "Tidx": i32, "keep_dims": _b(False)}))
        const(f"{bm}/Shape_1", [nv], [1])
        sslice(f"{bm}/strided_slice_1", f"{bm}/Shape_1", 0, 0, 1, 1, 0, [0])
        const(f"{bm}/Shape_2", [nv], [1])
        sslice(f"{bm}/strided_slice_2", f"{bm}/Shape_2", 1, 0, 1, 0, 1, [0])
        added.append(b.node(f"{bm}/concat/values_1", "Pack", [f"{bm}/Prod"], device=cpu,
                            out_shapes=[[1]], attrs={"N": _int(1), "T": i32, "axis": _int(0)}))
        const(f"{bm}/concat/axis", [0], None)
        added.append(b.node(f"{bm}/concat", "ConcatV2", [f"{bm}/strided_slice_1", f"{bm}/concat/values_1",
                                                         f"{bm}/strided_slice_2", f"{bm}/concat/axis"],
                            device=cpu, out_shapes=[[1]], attrs={"N": _int(3), "T": i32, "Tidx": i32}))
        added.append(b.node(f"{bm}/Reshape", "Reshape", [f"{sc}/Const", f"{bm}/concat"], device=cpu,
                            out_shapes=[[nv]], attrs={"T": _type(_STRING), "Tshape": i32}))
        const(f"{bm}/Reshape_1/shape", [-1], [1])
        added.append(b.node(f"{bm}/Reshape_1", "Reshape", [f"{sc}/LogicalNot", f"{bm}/Reshape_1/shape"],
                            device=cpu, out_shapes=[[nv]], attrs={"T": _type(_BOOL), "Tshape": i32}))
        added.append(b.node(f"{bm}/Where", "Where", [f"{bm}/Reshape_1"], device=cpu,
                            out_shapes=[[-1, 1]], attrs={"T": _type(_BOOL)}))
        added.append(b.node(f"{bm}/Squeeze", "Squeeze", [f"{bm}/Where"], device=cpu, out_shapes=[[-1]],
                            attrs={"T": _type(_INT64),
                                   "squeeze_dims": AttrValue(list=AttrValue.ListValue(i=[1]))}))
        const(f"{bm}/GatherV2/axis", [0], None)
        added.append(b.node(f"{bm}/GatherV2", "GatherV2", [f"{bm}/Reshape", f"{bm}/Squeeze",
                                                           f"{bm}/GatherV2/axis"], device=cpu,
                            out_shapes=[[-1]], attrs={"Tparams": _type(_STRING),
                                                      "Tindices": _type(_INT64), "Taxis": i32,
                                                      "batch_dims": _int(0)}))
        return f"{bm}/GatherV2:0"

    def find_ema(self) -> tuple[int, int]:
        """First and last node index of the plain graph's ``ExponentialMovingAverage.apply`` block.

        The block ends at its group NoOp (``control_flow_ops.group(*updates, name=scope)``,
        moving_averages.py ``apply``), before or after the optimizer's block. Its ops are made in
        one call, so they are contiguous: the ``ExponentialMovingAverage/`` ops and, made first
        in ``init_scope`` per variable, each shadow variable with the ops computing its initial
        value (``is_variable_initialized(var)`` and a ``cond``). The start is found by walking
        back from the first of them over ops nothing after the group reads, keeping those joined
        to the shadow variables' ops (not a tensor the program made for ``apply`` to read).
        """
        nodes = self.nodes
        g = self.index.get(_EMA_SCOPE)
        if g is None or nodes[g].op != "NoOp":
            self.fail("--variable-averages: the graph has no ExponentialMovingAverage.apply group "
                      "(a NoOp named 'ExponentialMovingAverage')")
        if self.start <= g <= self.inc:
            self.fail("--variable-averages: the ExponentialMovingAverage group is inside the "
                      "optimizer's apply_gradients block")
        low = self.inc + 1 if g > self.inc else 0
        prefix = _EMA_SCOPE + "/"
        scoped = [j for j in range(low, g) if nodes[j].name.startswith(prefix)]
        first = min(scoped, default=g)
        # the shadow variables: what the group's assign_moving_average updates write (through
        # group's per-device NoOps when the updates sit on several devices)
        members, todo = [], [nodes[g]]
        while todo:
            for ctrl in todo.pop().input:
                member = self.node(_op_name(ctrl))
                if member is not None and member.op == "NoOp" and member.name.startswith(prefix):
                    todo.append(member)
                elif member is not None:
                    members.append(member)
        for member in members:
            v = self.source_variable(member.input[0]) if member.input else None
            if v is not None and low <= self.index[v.name] < first:
                first = self.index[v.name]
        consumers: dict[str, list[int]] = {}
        for j, n in enumerate(nodes):
            for inp in n.input:
                consumers.setdefault(_op_name(inp), []).append(j)
        # (a cond's ops read ops made after them: a consumer may come first)
        stop = first - 1
        while stop >= low and all(low <= u <= g for u in consumers.get(nodes[stop].name, ())):
            stop -= 1
        region = {nodes[j].name for j in range(stop + 1, first)}
        joined = {nodes[j].name for j in range(first, g + 1) if not nodes[j].name.startswith(prefix)
                  and nodes[j].name != _EMA_SCOPE}
        near = region | joined
        edges: dict[str, set[str]] = {}
        for name in near:
            for inp in nodes[self.index[name]].input:
                src = _op_name(inp)
                if src in near:
                    edges.setdefault(name, set()).add(src)
                    edges.setdefault(src, set()).add(name)
        todo = list(joined)
        while todo:
            name = todo.pop()
            for other in edges.get(name, ()):
                if other not in joined:
                    joined.add(other)
                    todo.append(other)
        lo = min([first] + [self.index[name] for name in region & joined])
        while any(not lo <= u <= g for j in range(lo, first) for u in consumers.get(nodes[j].name, ())):
            lo = 1 + max(j for j in range(lo, first)
                         if any(not lo <= u <= g for u in consumers.get(nodes[j].name, ())))
        # ops made after it and before the optimizer cannot read it: TF builds it after
        if g < self.start:
            inside = {n.name for n in nodes[lo: g + 1]}
            for n in nodes[g + 1: self.start]:
                bad = [i for i in n.input if _op_name(i) in inside and i != f"^{_EMA_SCOPE}"]
                if bad:
                    self.fail(f"--variable-averages: {n.name} reads {bad[0].lstrip('^')} of the "
                              "ExponentialMovingAverage.apply block, which SyncReplicasOptimizer "
                              "builds after the optimizer")
        return lo, g

    @staticmethod
    def without_control(n: NodeDef, op: str) -> NodeDef:
        """``n`` without its control input on ``op``."""
        if f"^{op}" not in n.input:
            return n
        m = NodeDef.FromString(n.SerializeToString())
        ins = [i for i in m.input if i != f"^{op}"]
        del m.input[:]
        m.input.extend(ins)
        return m

    def move_ema(self, ema_block: list[NodeDef], enq: str, inc_name: str, names: _Names) -> list[NodeDef]:
        """The EMA apply block, built inside ``control_dependencies([sync_op])``
        (sync_replicas_optimizer.py: ``variable_averages.apply`` after the token enqueue).

        TF adds the control input to every op of the block created under the control scope
        (the ``ExponentialMovingAverage/...`` ops; the shadow variables are made in init_scope)
        unless one of its data inputs was itself created under that scope. The plain program's
        own ``control_dependencies([<train op>])`` around ``apply`` is replaced by it.
        """
        prefix = _EMA_SCOPE + "/"
        inside = {n.name for n in ema_block if n.name == _EMA_SCOPE or n.name.startswith(prefix)}
        out = []
        for n in ema_block:
            names.claim(n.name)
            if n.name in inside:
                ctrl = [i for i in n.input if i.startswith("^") and i != f"^{inc_name}"]
                data_in = [i for i in n.input if not i.startswith("^")]
                if not any(_op_name(i) in inside for i in data_in):
                    ctrl = [*ctrl, _MARK + f"^{enq}"]
                if len(ctrl) + len(data_in) != len(n.input) or any(c.startswith(_MARK) for c in ctrl):
                    n = NodeDef.FromString(n.SerializeToString())
                    del n.input[:]
                    n.input.extend(data_in + sorted(ctrl, key=lambda c: c.replace(_MARK, "")))
            out.append(n)
        return out

    def local_variable_initializers(self) -> set[str]:
        if self.coll is None or not self.coll.local_variables:
            return set()
        inits = set()
        if self.meta is not None and "local_variables" in self.meta.collection_def:
            for raw in self.meta.collection_def["local_variables"].bytes_list.value:
                inits.add(VariableDef.FromString(raw).initializer_name)
        return inits

    def update_meta(self, out: GraphDef, vd: VariableDef, train_op: str, inc_name: str,
                    new_names: list[str], names: _Names) -> MetaGraphDef:
        meta = MetaGraphDef()
        meta.CopyFrom(self.meta)
        meta.graph_def.CopyFrom(out)
        cd = meta.collection_def

        node_pos = {n.name: k for k, n in enumerate(out.node)}

        def fix(t: str) -> str:
            op = _op_name(t)
            return names.map.get(op, op) + t[len(op):] if not t.startswith("^") else t

        # plain nodes TF's counters renamed: node lists and VariableDefs follow
        for key in list(cd):
            c = cd[key]
            if c.HasField("node_list") and key != "train_op":
                vals = [fix(v) for v in c.node_list.value]
                del c.node_list.value[:]
                c.node_list.value.extend(vals)
            elif c.HasField("bytes_list") and key in ("variables", "trainable_variables", "local_variables",
                                                      "model_variables", "global_step", "moving_average_variables"):
                raws: list[bytes] = []
                plain_pos: list[int] = []
                for raw in c.bytes_list.value:
                    v = VariableDef.FromString(raw)
                    plain_pos.append(self.index.get(_op_name(v.variable_name), -1))
                    for f in ("variable_name", "initializer_name", "snapshot_name", "initial_value_name"):
                        if getattr(v, f):
                            setattr(v, f, fix(getattr(v, f)))
                    raws.append(v.SerializeToString())
                if -1 not in plain_pos and plain_pos == sorted(plain_pos):
                    # a collection in creation order (variables are added as they are made)
                    # follows the new order (the EMA's shadow variables after the slots)
                    raws.sort(key=lambda raw: node_pos.get(_op_name(VariableDef.FromString(raw).variable_name), 0))
                del c.bytes_list.value[:]
                c.bytes_list.value.extend(raws)
        # local variables: the local step, in creation order
        ls = _op_name(vd.variable_name)
        order = {n.name: k for k, n in enumerate(out.node)}
        entries = list(cd["local_variables"].bytes_list.value) if "local_variables" in cd else []
        decoded = [(order.get(_op_name(VariableDef.FromString(e).variable_name), 1 << 60), e)
                   for e in entries]
        decoded.append((order[ls], vd.SerializeToString()))
        decoded.sort(key=lambda t: t[0])
        del cd["local_variables"].bytes_list.value[:]
        cd["local_variables"].bytes_list.value.extend(e for _k, e in decoded)
        # train_op: the wrapped optimizer's update is only the chief's, the worker runs Assign_1
        if "train_op" in cd and cd["train_op"].HasField("node_list"):
            vals = [train_op if v == inc_name else v for v in cd["train_op"].node_list.value]
            del cd["train_op"].node_list.value[:]
            cd["train_op"].node_list.value.extend(vals)
        # the stripped op list: add the op types we introduced
        if meta.meta_info_def.HasField("stripped_op_list"):
            have = {o.name for o in meta.meta_info_def.stripped_op_list.op}
            added = set(new_names)
            types = sorted({n.op for n in out.node if n.name in added} - have)
            for t in types:
                od = self.table.op_def(t) if self.table is not None else None
                if od is not None:
                    meta.meta_info_def.stripped_op_list.op.add().CopyFrom(od)
        _ = CollectionDef  # (queue_runners: TF does not add the chief queue runner)
        return meta
