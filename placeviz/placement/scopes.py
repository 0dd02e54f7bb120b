"""Device scopes that TF library code opens around its own ops, recovered from an unplaced graph.

Some TF library code builds ops under ``tf.device(<another op>.device)``. In a graph built
without a device setter that device was empty, so the GraphDef keeps no trace of the scope; under
``replica_device_setter`` it decides where those ops go. The setter replay asks this module which
node's device each such op was built under:

* ``SyncReplicasOptimizer.apply_gradients`` builds each accumulator, its apply/take/set-global-step
  ops and their helper ops (``num_required`` Consts, the ``Cast`` ops of sparse gradients) under
  ``device(var.device)``; the accumulator's ``shared_name`` (``<var>:0/grad_accum``) names the
  variable.
* It builds the wrapped optimizer's update, the token queue (``sync_token_q``), the dequeue, the
  ``Fill`` of new tokens, the enqueue, the queue runner's close ops and the variable averages under
  ``device(global_step.device)``: every op created between the last accumulator op and the first
  ``SetGlobalStep`` op, plus every later user of the token queue (``get_init_tokens_op``).

* A resource variable's own ``<var>/Assign`` and ``<var>/Read/ReadVariableOp`` are built under
  ``device(handle.device)``.
* A Saver restores a resource variable with an ``Identity`` and an ``AssignVariableOp`` built
  under ``device(var.device)``.
* ``ExponentialMovingAverage.apply`` builds ``var.initialized_value()`` (a ``cond`` on
  ``IsVariableInitialized(var)``) under ``device(var.device)``.

And ops built with no device at all, whatever the scopes say (:func:`device_none_nodes`):

* reads of resource variables through ``value()`` (a ``ReadVariableOp`` that is neither a
  ``.../Read/ReadVariableOp`` nor a read after an assign, which has a control input on it) run
  under ``colocate_with(None, ignore_existing=True)``;
* ``TensorArrayV3`` handles are built under ``device(None)`` (``colocate_with_first_write_call``).

Also here: which NoOps are roots of ``control_flow_ops.group`` (whose per-device NoOps the
replay re-creates).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import compress, repeat
from typing import TYPE_CHECKING, TypeAlias

from placeviz.graph import CONTROL, Graph
from placeviz.group import is_noop_of
from placeviz.op_kinds import (
    ACCUMULATOR_OPS,
    ACCUMULATOR_SET_STEP_OPS,
    ASSIGN_VARIABLE_OPS,
    VARIABLE_OPS,
    VARIABLE_READ_OPS,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

DEVICE_NONE = -1
"""Colocation-target value meaning "built under device(None)": no device at all."""

_GRAD_ACCUM_SUFFIX = "/grad_accum"
_HELPER_OPS = frozenset({"Const", "Cast"})


class OpIndex:
    """Which nodes have which op, from one pass over the op names, for the recognizers below and
    the ``group`` split: each asks for a few op types, and each question is then an array test.

    A node's code is the id of the first node with its op (``dict.setdefault`` in one C-level
    pass), so equal ops have equal codes and no second table is needed; or, for a graph the C
    reader read (:meth:`of`), the code it gave the op while reading (``Graph.op_codes``).
    """

    def __init__(self, ops: list[str], codes: tuple[bytes, list[str]] | None = None):
        import numpy as np

        self.first: dict[str, int] = {}
        if codes is not None and len(codes[0]) == 4 * len(ops):  # the C reader's (Graph.op_codes)
            self.first = {op: code for code, op in enumerate(codes[1])}
            self.codes = np.frombuffer(codes[0], dtype=np.int32)
        else:
            self.codes = np.fromiter(map(self.first.setdefault, ops, range(len(ops))), dtype=np.int64,
                                     count=len(ops))

    @classmethod
    def of(cls, graph: Graph) -> OpIndex:
        """The index of ``graph``'s ops, from the codes the C reader read when it has them (the
        walk over the ops is 8 ms at 200k nodes, 40 ms at 1M)."""
        return cls(graph.ops, graph.op_codes())

    def ids(self, wanted: Iterable[str]) -> NDArray[np.intp]:
        """Ids (ascending) of the nodes whose op is in ``wanted``."""
        import numpy as np

        keys = [self.first[op] for op in wanted if op in self.first]
        if len(keys) == 1:
            return np.flatnonzero(self.codes == keys[0])
        return np.flatnonzero(np.isin(self.codes, keys)) if keys else np.zeros(0, dtype=np.intp)


def _nodes_with_ops(graph: Graph, wanted: frozenset[str], op_index: OpIndex | None = None,
                    suffixes: dict[str, str] | None = None) -> list[int]:
    """Ids (ascending) of the nodes whose op is in ``wanted``.

    The recognizers look at a few op types only: finding their nodes first means a graph without
    them costs one array test, not a walk over every node's inputs.

    The nodes whose op is a key of ``suffixes`` are left out unless their name ends with
    ``suffixes[op]`` (the caller's loop would skip them).
    """
    op_index = op_index if op_index is not None else OpIndex.of(graph)
    suffixes = suffixes or {}
    found: list[int] = op_index.ids(wanted - suffixes.keys()).tolist()
    names = graph.names
    for op, suffix in suffixes.items():
        if op in wanted:
            ids = op_index.ids((op,)).tolist()
            found += compress(ids, map(str.endswith, map(names.__getitem__, ids), repeat(suffix)))
            found.sort()  # ascending runs: merged
    return found


def device_scope_hints(graph: Graph, op_index: OpIndex | None = None) -> dict[int, int]:
    """node -> node whose device the op was built under (``device(that.device)``)."""
    hints: dict[int, int] = {}
    found = _nodes_with_ops(graph, _HINT_OPS, op_index)
    if found:
        _resource_variable_init_ops(graph, found, hints)
        _initialized_value_conds(graph, found, hints)
        _sync_replicas(graph, found, hints)
        _resource_restores(graph, found, hints)
    return hints


def device_none_nodes(graph: Graph, op_index: OpIndex | None = None) -> set[int]:
    """Nodes TF library code builds with the device stack cleared: they keep no device."""
    out = set()
    names, ops = graph.names, graph.ops
    token_fill_readers: set[int] | None = None
    # The candidates leave out the Identity ops the loop would skip (most of them).
    for i in _nodes_with_ops(graph, _DEVICE_NONE_CANDIDATE_OPS, op_index, {"Identity": "/Read/Identity"}):
        op = ops[i]
        if op == "ReadVariableOp" and not names[i].endswith("/Read/ReadVariableOp"):
            if not _is_read_after_assign(graph, i) or _in_control_block(graph, i):
                out.add(i)
                continue
            if token_fill_readers is None:
                token_fill_readers = _token_fill_readers(graph)
            if i in token_fill_readers:
                out.add(i)
        elif op in ("TensorArrayV3", "TensorArrayV2", "TensorArray") and i not in graph.colocation:
            out.add(i)
        elif op == "Identity" and names[i].endswith("/Read/Identity"):
            # The cached value of a variable with a caching device: built under
            # colocate_with(None, ignore_existing=True) and device(caching_device) (dynamic_rnn's
            # caching device is a function returning the op's own, empty, device).
            read = graph.id_of(names[i][: -len("Identity")] + "ReadVariableOp")
            if read is not None and graph.inputs_of(i)[:1] == [(read, 0)]:
                out.add(i)
    return out


def _is_read_after_assign(graph: Graph, i: int) -> bool:
    """A read of an assign's result (``_lazy_read``): a control input on an assign of the same variable.

    Any other ReadVariableOp comes from ``value()``, which runs under
    ``colocate_with(None, ignore_existing=True)``.
    """
    inputs = graph.inputs_of(i)
    if not inputs:
        return False
    handle = inputs[0][0]
    after_assign = False
    for src, slot in inputs:
        if slot != CONTROL:
            continue
        first = graph.inputs_of(src)[:1]
        if not first or first[0][0] != handle:
            continue
        if graph.ops[src].startswith("ResourceScatter"):
            return False  # optimizers' _resource_scatter_add: value() after a scatter into the slot
        if graph.ops[src] in ASSIGN_VARIABLE_OPS:
            after_assign = True
    return after_assign


def _in_control_block(graph: Graph, i: int) -> bool:
    """A ``value()`` read inside ``control_dependencies([assign])``, not a lazy read of that assign.

    Both carry ``^assign``. TF gives the block's control input to every op created there without
    a data input from the block (ops.py ``_control_dependencies_for_inputs``), so a block shows
    itself by other such ops holding the same control input (``ExponentialMovingAverage/decay``
    under ``control_dependencies([apply_gradient_op])``); a lazy read's ``^assign`` is its own
    (NoOps do not count: ``group`` and ``no_op`` take control inputs on purpose).
    """
    ins, in_start, in_slot = graph.inputs_of(i), graph.in_start, graph.in_slot
    handle = ins[0][0]
    assigns = [src for src, slot in ins if slot == CONTROL and graph.ops[src] in ASSIGN_VARIABLE_OPS
               and graph.inputs_of(src)[:1] and graph.inputs_of(src)[0][0] == handle]

    def block_input(src: int) -> bool:
        return any(user != i and user_slot == CONTROL and graph.ops[user] != "NoOp" and all(
            s == CONTROL for s in in_slot[in_start[user]:in_start[user + 1]])
            for user, user_slot in graph.consumers_of(src))

    return bool(assigns) and all(map(block_input, assigns))


def _token_fill_readers(graph: Graph) -> set[int]:
    """Nodes with a data edge into a ``Fill`` that feeds a ``QueueEnqueueMany*`` (by any edge).

    SyncReplicas' ``fill([tokens], global_step)`` reads the global step through ``value()``,
    inside ``control_dependencies([update_op])`` whose update is an assign of that same variable.
    Found from the enqueue ops backwards, so no out-edge index is needed.
    """
    ops, in_start, in_src, in_slot = graph.ops, graph.in_start, graph.in_src, graph.in_slot
    readers: set[int] = set()
    for queue_op in [i for i, op in enumerate(ops) if op.startswith("QueueEnqueueMany")]:
        for fill in in_src[in_start[queue_op]:in_start[queue_op + 1]]:
            if ops[fill] == "Fill":
                readers.update(in_src[k] for k in range(in_start[fill], in_start[fill + 1]) if in_slot[k] != CONTROL)
    return readers


def _resource_variable_init_ops(graph: Graph, found: list[int], hints: dict[int, int]) -> None:
    for i in found:
        if graph.ops[i] != "VarHandleOp":
            continue
        name = graph.names[i]
        for suffix in ("/Assign", "/Read/ReadVariableOp"):
            j = graph.id_of(name + suffix)
            if j is not None and graph.in_start[j + 1] > graph.in_start[j] and graph.in_src[graph.in_start[j]] == i:
                hints[j] = i


def _initialized_value_conds(graph: Graph, found: list[int], hints: dict[int, int]) -> None:
    """``cond(is_variable_initialized(v), ...)`` scopes: every op of the cond's name scope."""
    names, ops = graph.names, graph.ops
    scopes: dict[str, int] = {}
    for i in found:
        if ops[i] != "Switch" or not names[i].endswith("/Switch"):
            continue
        inputs = [src for src, slot in graph.inputs_of(i) if slot != CONTROL]
        if len(inputs) == 2 and inputs[0] == inputs[1] and ops[inputs[0]] in _INITIALIZED_OPS:
            pred_inputs = [src for src, slot in graph.inputs_of(inputs[0]) if slot != CONTROL]
            if pred_inputs and names[i].startswith(names[pred_inputs[0]] + "/"):
                # ``<var>/cond``: training_util._get_or_create_global_step_read builds it in the
                # variable's name scope with no device scope (only EMA opens device(var.device)).
                continue
            if pred_inputs:
                scopes[names[i][: -len("Switch")]] = pred_inputs[0]
                hints[inputs[0]] = pred_inputs[0]  # the is-initialized op is built there too
    if not scopes:
        return
    for i, name in enumerate(names):
        slash = name.find("/")
        if slash > 0:
            var = scopes.get(name[: slash + 1])
            if var is not None:
                hints[i] = var


def _resource_restores(graph: Graph, found: list[int], hints: dict[int, int]) -> None:
    """A Saver's restore of a resource variable: ``Identity`` + ``AssignVariableOp`` on its device.

    ``ResourceVariableSaveable.restore`` (tensorflow/python/training/saving/saveable_object_util.py)
    copies the restored tensor "to the variable's device": ``with ops.device(self._var_device):
    identity(restored); assign_variable_op(handle, ...)``. The Identity reads a ``RestoreV2``
    output (through the ``Reshape`` of ``restored_shapes``, which is built outside that scope).
    """
    ops = graph.ops
    for i in found:
        if ops[i] != "AssignVariableOp":
            continue
        inputs = graph.inputs_of(i)
        if len(inputs) < 2 or inputs[0][1] == CONTROL or inputs[1][1] == CONTROL:
            continue
        handle, value = inputs[0][0], inputs[1][0]
        if ops[handle] != "VarHandleOp" or ops[value] != "Identity":
            continue
        source = graph.inputs_of(value)[:1]
        if source and source[0][1] != CONTROL and ops[source[0][0]] == "Reshape":
            source = graph.inputs_of(source[0][0])[:1]
        if source and source[0][1] != CONTROL and ops[source[0][0]] in _RESTORE_OPS:
            hints[i] = hints[value] = handle


_RESTORE_OPS = frozenset({"RestoreV2", "Restore", "RestoreSlice"})
_INITIALIZED_OPS = frozenset({"IsVariableInitialized", "VarIsInitializedOp"})
# The ops device_scope_hints starts from, and those device_none_nodes looks at.
_HINT_OPS = frozenset({"VarHandleOp", "Switch", "AssignVariableOp"}) | ACCUMULATOR_OPS | ACCUMULATOR_SET_STEP_OPS
_DEVICE_NONE_CANDIDATE_OPS = frozenset({"ReadVariableOp", "TensorArrayV3", "TensorArrayV2", "TensorArray",
                                        "Identity"})


def _sync_replicas(graph: Graph, found: list[int], hints: dict[int, int]) -> None:
    accumulators = [i for i in found if graph.ops[i] in ACCUMULATOR_OPS]
    if not accumulators:
        return
    last_accumulator_node = -1
    for acc in accumulators:
        var = _accumulator_variable(graph, acc)
        if var is None:
            continue
        hints[acc] = var
        for user, slot in graph.consumers_of(acc):
            if slot == CONTROL:
                continue
            hints[user] = var
            if graph.ops[user] not in ACCUMULATOR_SET_STEP_OPS:
                last_accumulator_node = max(last_accumulator_node, user)
            for src, src_slot in graph.inputs_of(user):
                if src_slot != CONTROL and src != acc and _is_private_helper(graph, src, user):
                    hints[src] = var
                    if graph.ops[user] not in ACCUMULATOR_SET_STEP_OPS:
                        last_accumulator_node = max(last_accumulator_node, src)
        last_accumulator_node = max(last_accumulator_node, acc)

    set_global_steps = [i for i in found if graph.ops[i] in ACCUMULATOR_SET_STEP_OPS]
    global_step = _global_step_variable(graph, set_global_steps)
    if global_step is None or not set_global_steps:
        return
    first_set = min(set_global_steps)
    for i in range(last_accumulator_node + 1, first_set):
        hints.setdefault(i, global_step)
    # Later users of the token queue (get_init_tokens_op) and the Fill ops feeding them.
    for queue in range(last_accumulator_node + 1, first_set):
        if graph.ops[queue].startswith("FIFOQueue"):
            for user, slot in graph.consumers_of(queue):
                if slot == CONTROL:
                    continue
                hints.setdefault(user, global_step)
                for src, src_slot in graph.inputs_of(user):
                    if src_slot != CONTROL and graph.ops[src] == "Fill":
                        hints.setdefault(src, global_step)
                        for dims, dims_slot in graph.inputs_of(src):
                            if dims_slot != CONTROL and graph.ops[dims] == "Const":
                                hints.setdefault(dims, global_step)


def _accumulator_variable(graph: Graph, acc: int) -> int | None:
    attr = graph.attr_nodes[acc].attr
    if "shared_name" not in attr:
        return None
    shared = attr["shared_name"].s.decode("utf-8", "replace")
    if not shared.endswith(_GRAD_ACCUM_SUFFIX):
        return None
    var_name = shared[: -len(_GRAD_ACCUM_SUFFIX)].rsplit(":", 1)[0]
    return graph.id_of(var_name)


def _is_private_helper(graph: Graph, src: int, user: int) -> bool:
    """A Const/Cast built right next to ``user`` for it alone (``num_required``, sparse casts)."""
    if graph.ops[src] not in _HELPER_OPS:
        return False
    consumers = graph.consumers_of(src)
    return all(c == user for c, _ in consumers) and abs(user - src) <= 3


def _global_step_variable(graph: Graph, set_global_steps: list[int]) -> int | None:
    """The variable behind SetGlobalStep's step input (through its read and cast).

    ``ConditionalAccumulator.set_global_step`` (data_flow_ops.py) passes
    ``math_ops.cast(ops.convert_to_tensor(new_global_step), dtypes.int64)``: a no-op for an int64
    global step, a ``Cast`` of its read for an int32 one (``tf.Variable(0, name="global_step")``).
    """
    for op in set_global_steps:
        inputs = [src for src, slot in graph.inputs_of(op) if slot != CONTROL]
        if len(inputs) < 2:
            continue
        node = inputs[1]
        for _ in range(4):
            if graph.ops[node] in VARIABLE_OPS:
                return node
            if graph.ops[node] not in VARIABLE_READ_OPS and graph.ops[node] != "Cast":
                break
            data = [src for src, slot in graph.inputs_of(node) if slot != CONTROL]
            if not data:
                break
            node = data[0]
    return None


NoOps: TypeAlias = "tuple[NDArray[np.intp], NDArray[np.int32], NDArray[np.int32]]"
"""The control-only NoOps (ids), where their inputs start and where they end (:func:`control_only_noops`)."""


def control_only_noops(graph: Graph, op_index: OpIndex | None = None) -> NoOps:
    """The NoOps with inputs, all of them control inputs (what ``group`` builds), ascending, with
    where their inputs start and end in ``in_src``.

    Array arithmetic over the inputs: a NoOp is control-only when no data input lies between its
    ``in_start`` bounds (a running count of data inputs is equal at both ends).
    """
    import numpy as np

    ids = (op_index if op_index is not None else OpIndex.of(graph)).ids(("NoOp",))
    start = np.frombuffer(graph.in_start, dtype=np.int32)
    lo, hi = start[ids], start[ids + 1]
    data_before = np.zeros(len(graph.in_slot) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(graph.in_slot, dtype=np.int32) != CONTROL, out=data_before[1:])
    keep = (hi > lo) & (data_before[hi] == data_before[lo])
    return ids[keep], lo[keep], hi[keep]


def group_roots(graph: Graph, noops: NoOps | None = None) -> dict[int, tuple[list[int], list[int]]]:
    """NoOps built by ``control_flow_ops.group``: root -> (per-device NoOps, grouped ops).

    A group built on one device is a NoOp with only control inputs (the grouped ops). Built on
    several devices it is a root NoOp whose control inputs are per-device NoOps named
    ``<root>/NoOp``, ``<root>/NoOp_1``..., each consumed by the root alone; the grouped ops are
    their inputs (control_flow_ops.py ``group`` and ``_GroupControlDeps``). Children of a root are
    not roots themselves.

    The control-only NoOps and the edges among them are found with array passes; only the few
    edges from one such NoOp into another have their names compared, and only roots with such an
    edge take the long way in the loop below. ``noops``: :func:`control_only_noops`, if the caller
    has it.
    """
    import numpy as np

    in_src = graph.in_src
    roots, lo, hi = noops if noops is not None else control_only_noops(graph)
    if not len(roots):
        return {}
    names = graph.names
    # The inputs of every root, spelled out: root k's inputs are positions lo[k]:hi[k] of in_src.
    counts = hi - lo
    total = int(counts.sum())
    first = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    positions = np.repeat(lo - first, counts) + np.arange(total, dtype=np.int64)
    sources = np.frombuffer(in_src, dtype=np.int32)[positions]
    is_root = np.zeros(len(names), dtype=bool)
    is_root[roots] = True
    among = np.flatnonzero(is_root[sources])  # an input that is itself a control-only NoOp
    maybe: dict[int, set[int]] = {}  # root -> its inputs named as its per-device NoOps
    for root, src in zip(np.repeat(roots, counts)[among].tolist(), sources[among].tolist(), strict=True):
        if is_noop_of(names[src], names[root]):
            maybe.setdefault(root, set()).add(src)
    consumers = (np.bincount(np.frombuffer(in_src, dtype=np.int32), minlength=len(names))
                 if maybe else np.zeros(0, dtype=np.int64))
    in_start = graph.in_start
    out: dict[int, tuple[list[int], list[int]]] = {}
    children_of_some_root: set[int] = set()
    for i, a, b in zip(roots.tolist(), lo.tolist(), hi.tolist(), strict=True):
        candidates = maybe.get(i)
        if candidates is None:
            if b - a >= 2:
                out[i] = ([], in_src[a:b].tolist())
            continue
        children: list[int] = []
        members: list[int] = []
        for src in in_src[a:b]:
            if src in candidates and consumers[src] == 1:
                children.append(src)
                members.extend(in_src[in_start[src]:in_start[src + 1]])
            else:
                members.append(src)
        if children or len(members) >= 2:
            out[i] = (children, members)
            children_of_some_root.update(children)
    for child in children_of_some_root:
        out.pop(child, None)
    return out
