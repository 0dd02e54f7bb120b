"""Find the SyncReplicasOptimizer machinery in any graph, by structure.

Nothing here relies on names or on the collections that placeviz's sample builders add: it works on
a bare GraphDef built by TensorFlow (TF1 ref variables or TF 2.21 resource variables) as well as on
one placeviz rewrote. ``collections`` (``train_op``, ``queue_runners``), when present, only pick the
run targets among structurally equivalent candidates.

What ``SyncReplicasOptimizer.apply_gradients`` builds (``docs/tf-behaviours.md``) and how each
part is recognised:

* **accumulators**: ``ConditionalAccumulator`` / ``ResourceConditionalAccumulator`` /
  ``SparseConditionalAccumulator`` nodes, with their ``*ApplyGradient`` (worker side),
  ``*TakeGradient`` (chief side, ``num_required`` = R is its Const input 1) and ``*SetGlobalStep``
  consumers. The variable each feeds comes from ``shared_name = "<var>:0/grad_accum"`` and,
  independently, from structure: the variables written by the ops downstream (data edges) of the
  TakeGradient, i.e. the wrapped optimizer's apply op(s); when slots are written too (Adam's ``m``,
  ``v``), the variable is the one whose name prefixes the others (TF names slots ``<var>/<opt>``),
  else the one written on input 0 of an ``*Apply*`` op.
* **token queue**: a ``FIFOQueue(V2)`` with a ``QueueDequeue(V2)`` whose control inputs (directly or
  through NoOp groups) are accumulator applies.
* **worker train op**: the write ``Assign(local_step, dequeue)`` (``AssignVariableOp`` with
  resource variables); the written variable is the **local step**. The ops a worker actually runs
  are the ``train_op`` collection entries that depend on it, else the sinks downstream of it.
* **sync op**: the ``QueueEnqueueMany(V2)`` of the token queue whose dependencies hold the
  TakeGradients and the global-step increment (its Fill's dims = **tokens per step**, its value =
  the **global step**); when ops run after it (``variable_averages.apply`` under
  ``control_dependencies([sync_op])``) the sync op is the sink downstream of it (or the
  ``queue_runners`` entry that runs it).
* **init tokens ops**: the other EnqueueMany ops of the token queue, each filled from the global
  step without any update before it.
* **local step init**: a write of the local step whose value is read from the global step;
  **chief init op**: the lowest op that depends on it and on every ``SetGlobalStep``.

State writes (which op mutates which variable) come from :func:`state_index`: an op writes the
variables (and lookup tables) that reach one of its ref/resource inputs through forwarding ops
(Identity, Enter, Switch, Merge...), unless it is in the small explicit list of readers
(:data:`READ_ONLY_OPS`). Ref/resource input positions come from the op-facts table; function calls
(``PartitionedCall``, ``While``, ``If``...) write what their function bodies write. :func:`detect`
builds the index once and hands it on in :attr:`SyncMachinery.state`, which the proof
(:mod:`placeviz.sync.proof`) and the lint rules read instead of building it again.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from itertools import compress

from placeviz.graph import CONTROL, Graph
from placeviz.op_kinds import (
    ACCUMULATOR_APPLY_OPS,
    ACCUMULATOR_OPS,
    ACCUMULATOR_SET_STEP_OPS,
    ACCUMULATOR_TAKE_OPS,
    DEQUEUE_OPS,
    ENQUEUE_MANY_OPS,
    FIFO_QUEUE_OPS,
    FORWARD_ANY_INPUT_OPS,
    FORWARD_INPUT0_OPS,
    TABLE_OPS,
    TEMPORARY_VARIABLE_OPS,
    VARIABLE_OPS,
    VARIABLE_READ_OPS,
)
from placeviz.ops import DT_RESOURCE, REF_OFFSET, OpFactsError, load_op_table
from placeviz.sync.reach import Reach, forward_through

# ----------------------------------------------------------------------------- op classes

_STATE_VARIABLE_OPS = VARIABLE_OPS | TEMPORARY_VARIABLE_OPS
"""Variables whose writes the detector tracks: a step's ``TemporaryVariable`` is state too."""

READ_ONLY_OPS = frozenset({
    # variables
    "IsVariableInitialized", "VarIsInitializedOp", "ReadVariableOp", "_ReadVariablesOp",
    "ReadVariableXlaSplitND", "ResourceGather", "ResourceGatherNd", "VariableShape",
    "DisableCopyOnRead", "IsResourceHandleRefCounting", "MakeWeakResourceHandle",
    "DebugGradientRefIdentity",
    # lookup tables
    "LookupTableFind", "LookupTableFindV2", "LookupTableSize", "LookupTableSizeV2",
    "LookupTableExport", "LookupTableExportV2",
})
"""Ops that take a variable's (or table's) ref/resource input without writing it. Every other op
whose ref/resource input reaches a variable or table counts as writing it (conservative: an op this
list forgets is reported as a write, never silently ignored)."""

VALUE_READ_OPS = FORWARD_INPUT0_OPS | {"ReadVariableOp", "Snapshot", "Cast"}
"""Ops through which a value still *is* the variable's value (to find what a Fill reads)."""

CALL_OPS = {
    "PartitionedCall": (("f",), 0, False), "StatefulPartitionedCall": (("f",), 0, False),
    "While": (("body", "cond"), 0, True), "StatelessWhile": (("body", "cond"), 0, True),
    "_While": (("body", "cond"), 0, True),
    "If": (("then_branch", "else_branch"), 1, False), "StatelessIf": (("then_branch", "else_branch"), 1, False),
    "_If": (("then_branch", "else_branch"), 1, False),
    "Case": (("branches",), 1, False), "StatelessCase": (("branches",), 1, False),
}
"""Function-call ops: (function attrs, offset of the first function argument among the inputs,
whether the body runs per loop iteration)."""

_APPLY_PREFIXES = ("Apply", "SparseApply", "ResourceApply", "ResourceSparseApply")


def is_optimizer_apply(op: str) -> bool:
    """``Apply*``/``SparseApply*``/``ResourceApply*``/``ResourceSparseApply*``: an optimizer's update."""
    return op.startswith(_APPLY_PREFIXES)


# ----------------------------------------------------------------------------- state writes


@dataclass
class StateIndex:
    """Which node writes which variable or table (built by :func:`state_index`; :func:`detect`
    hands the one it built on in :attr:`SyncMachinery.state`)."""

    graph: Graph
    kind: dict[int, str] = field(default_factory=dict)
    """state node id -> "variable" | "table"."""
    writes: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """writer node id -> [(state node id, input position)]."""
    writers: dict[int, list[int]] = field(default_factory=dict)
    """state node id -> writer node ids, in node order."""
    loop_writes: set[tuple[int, int]] = field(default_factory=set)
    """(writer, state) pairs written inside a function-body loop (TF2 ``While``)."""
    unknown_ops: set[str] = field(default_factory=set)
    """Op types the op-facts table does not know (their writes cannot be seen)."""

    def is_state(self, i: int) -> bool:
        return i in self.kind

    def trace(self, src: int, slot: int = 0) -> list[int]:
        """The variables/tables whose ref or handle output ``src:slot`` carries."""
        return _trace(self.graph, src, slot, self.kind)

    def value_source(self, src: int, slot: int = 0) -> int | None:
        """The variable whose current value ``src:slot`` is (through reads, identities, casts)."""
        g = self.graph
        seen = set()
        while (src, slot) not in seen:
            seen.add((src, slot))
            if src in self.kind:
                return src
            if g.ops[src] not in VALUE_READ_OPS:
                return None
            pos = g.in_start[src]
            if pos >= g.in_start[src + 1] or g.in_slot[pos] == CONTROL:
                return None
            src, slot = g.in_src[pos], g.in_slot[pos]
        return None


def _data_inputs(g: Graph, i: int) -> list[tuple[int, int]]:
    out = []
    for p in range(g.in_start[i], g.in_start[i + 1]):
        s = g.in_slot[p]
        if s == CONTROL:
            break
        out.append((g.in_src[p], s))
    return out


def _trace(g: Graph, src: int, slot: int, states: dict[int, str]) -> list[int]:
    out: list[int] = []
    stack = [(src, slot)]
    seen: set[tuple[int, int]] = set()
    ops = g.ops
    while stack:
        n, s = stack.pop()
        if (n, s) in seen:
            continue
        seen.add((n, s))
        if n in states:
            if n not in out:
                out.append(n)
            continue
        op = ops[n]
        if op in FORWARD_INPUT0_OPS:
            pos = g.in_start[n]
            if pos < g.in_start[n + 1] and g.in_slot[pos] != CONTROL:
                stack.append((g.in_src[pos], g.in_slot[pos]))
        elif op in FORWARD_ANY_INPUT_OPS:
            stack.extend(_data_inputs(g, n))
        elif op == "IdentityN":
            ins = _data_inputs(g, n)
            if s < len(ins):
                stack.append(ins[s])
        elif op == "RefSelect":
            stack.extend(_data_inputs(g, n)[1:])
    return out


def state_index(graph: Graph, table=None) -> StateIndex:
    """The :class:`StateIndex` of a graph: one pass over its ops, every call.

    Kept by nobody but the caller: a later stage that needs it takes the one :func:`detect` built
    (:attr:`SyncMachinery.state`) rather than calling this again.
    """
    return _build_state_index(graph, table or load_op_table())


def state_of(graph: Graph, machinery: SyncMachinery | None) -> StateIndex:
    """The :class:`StateIndex` of ``graph``: the one :func:`detect` built and handed on in
    ``machinery`` (:attr:`SyncMachinery.state`) when it describes ``graph``, else a new one (a
    graph without accumulators has no machinery, so nothing built it yet)."""
    state = machinery.state if machinery is not None else None
    return state if state is not None and state.graph is graph else state_index(graph)


def _build_state_index(g: Graph, table) -> StateIndex:
    idx = StateIndex(graph=g)
    ops = g.ops
    kind = idx.kind
    for i, op in enumerate(ops):
        if op in _STATE_VARIABLE_OPS:
            kind[i] = "variable"
        elif op in TABLE_OPS:
            kind[i] = "table"
        elif op == "Placeholder":  # a captured variable handle in a function-style graph
            av = g.node_def(i).attr.get("dtype")
            if av is not None and av.type == DT_RESOURCE:
                kind[i] = "variable"
    if not kind:
        return idx
    library = {f.signature.name: f for f in g.library.function}
    funcs = _FunctionWrites(library, table)
    state_arg_ops: dict[str, bool] = {}
    for i, op in enumerate(ops):
        if op in READ_ONLY_OPS or op in FORWARD_INPUT0_OPS or op in FORWARD_ANY_INPUT_OPS or op in kind:
            continue
        if op in CALL_OPS or op in library:
            _call_writes(g, idx, i, funcs)
            continue
        has = state_arg_ops.get(op)
        if has is None:
            facts = table.get(op)
            if facts is None:
                idx.unknown_ops.add(op)
                has = False
            else:
                has = any(a.is_ref or a.type == DT_RESOURCE for a in facts.inputs)
            state_arg_ops[op] = has
        if not has:
            continue
        try:
            types = table.input_types(g.node_def(i))
        except OpFactsError:
            idx.unknown_ops.add(op)
            continue
        if types is None:
            continue
        ins = _data_inputs(g, i)
        for p, t in enumerate(types):
            if (t == DT_RESOURCE or t > REF_OFFSET) and p < len(ins):
                for s in _trace(g, ins[p][0], ins[p][1], kind):
                    _add_write(idx, i, s, p)
    return idx


def _add_write(idx: StateIndex, writer: int, state: int, pos: int) -> None:
    lst = idx.writes.setdefault(writer, [])
    if all(s != state for s, _ in lst):
        lst.append((state, pos))
        idx.writers.setdefault(state, []).append(writer)


def _call_targets(op: str, attr, library) -> list[tuple[str, int, bool]]:
    spec = CALL_OPS.get(op)
    if spec is None:
        return [(op, 0, False)] if op in library else []
    attrs, offset, loop = spec
    out = []
    for a in attrs:
        av = attr.get(a)
        if av is None:
            continue
        if av.HasField("func"):
            out.append((av.func.name, offset, loop))
        else:
            out.extend((f.name, offset, loop) for f in av.list.func)
    return out


def _call_writes(g: Graph, idx: StateIndex, i: int, funcs: _FunctionWrites) -> None:
    ins = _data_inputs(g, i)
    for fname, offset, loop in _call_targets(g.ops[i], g.node_def(i).attr, funcs.library):
        for arg, inner_loop in funcs.arg_writes(fname).items():
            p = offset + arg
            if p >= len(ins):
                continue
            for s in _trace(g, ins[p][0], ins[p][1], idx.kind):
                _add_write(idx, i, s, p)
                if loop or inner_loop:
                    idx.loop_writes.add((i, s))


class _FunctionWrites:
    """Which arguments a library function writes (through ref/resource inputs), recursively."""

    def __init__(self, library: dict, table):
        self.library = library
        self.table = table
        self.memo: dict[str, dict[int, bool]] = {}

    def arg_writes(self, fname: str, _stack: tuple = ()) -> dict[int, bool]:
        """arg index -> True if written inside a loop (per iteration)."""
        if fname in self.memo:
            return self.memo[fname]
        fdef = self.library.get(fname)
        if fdef is None or fname in _stack:
            return {}
        stack = (*_stack, fname)
        arg_index = {a.name: k for k, a in enumerate(fdef.signature.input_arg)}
        nodes = {nd.name: nd for nd in fdef.node_def}

        def resolve(text: str, seen: set) -> set[int]:
            name = text.split(":", 1)[0]
            if name in seen:
                return set()
            seen.add(name)
            nd = nodes.get(name)
            if nd is None:
                return {arg_index[name]} if name in arg_index and ":" not in text else set()
            data = [x for x in nd.input if not x.startswith("^")]
            if nd.op in FORWARD_INPUT0_OPS and data:
                return resolve(data[0], seen)
            if nd.op in FORWARD_ANY_INPUT_OPS:
                return set().union(*(resolve(x, seen) for x in data)) if data else set()
            return set()

        result: dict[int, bool] = {}
        for nd in fdef.node_def:
            op = nd.op
            if op in READ_ONLY_OPS or op in FORWARD_INPUT0_OPS or op in FORWARD_ANY_INPUT_OPS:
                continue
            data = [x for x in nd.input if not x.startswith("^")]
            targets = _call_targets(op, nd.attr, self.library)
            if targets:
                for inner, offset, loop in targets:
                    for arg, inner_loop in self.arg_writes(inner, stack).items():
                        if offset + arg < len(data):
                            for a in resolve(data[offset + arg], set()):
                                result[a] = result.get(a, False) or loop or inner_loop
                continue
            facts = self.table.get(op)
            if facts is None or not any(a.is_ref or a.type == DT_RESOURCE for a in facts.inputs):
                continue
            try:
                types = self.table.input_types(nd)
            except OpFactsError:
                continue
            for p, t in enumerate(types or ()):
                if (t == DT_RESOURCE or t > REF_OFFSET) and p < len(data):
                    for a in resolve(data[p], set()):
                        result.setdefault(a, False)
        self.memo[fname] = result
        return result


# ----------------------------------------------------------------------------- small helpers


def const_ints(graph: Graph, i: int) -> list[int] | None:
    """The integer values of a ``Const`` node (None if not an integer Const)."""
    if graph.ops[i] != "Const":
        return None
    av = graph.node_def(i).attr.get("value")
    if av is None or not av.HasField("tensor"):
        return None
    t = av.tensor
    n = 1
    for d in t.tensor_shape.dim:
        n *= d.size
    if t.dtype in (3, 9, 4, 5, 6, 17, 19, 22, 23):  # int32 int64 uint8 int16 int8 uint16 ... ints
        if t.tensor_content:
            fmt = {3: "i", 9: "q", 4: "B", 5: "h", 6: "b", 17: "H", 19: "Q", 22: "I", 23: "Q"}[t.dtype]
            size = struct.calcsize(fmt)
            count = len(t.tensor_content) // size
            return list(struct.unpack(f"<{count}{fmt}", t.tensor_content))
        vals = list(t.int64_val) if t.dtype == 9 else list(t.int_val)
        if t.dtype in (19, 23) and t.uint64_val:
            vals = list(t.uint64_val)
        if len(vals) == 1 and n > 1:
            vals = vals * n
        if not vals and n >= 1:
            vals = [0] * n
        return vals
    return None


def _forward(g: Graph, starts, *, data_only: bool = False, limit: int | None = None) -> list[int]:
    """Nodes downstream of ``starts`` (the starts included), breadth first."""
    out_start, out_dst, out_pos = g.consumers
    in_slot = g.in_slot
    seen = set(starts)
    order = list(dict.fromkeys(starts))
    k = 0
    while k < len(order):
        u = order[k]
        k += 1
        for e in range(out_start[u], out_start[u + 1]):
            if data_only and in_slot[out_pos[e]] == CONTROL:
                continue
            v = out_dst[e]
            if v not in seen:
                seen.add(v)
                order.append(v)
                if limit is not None and len(order) > limit:
                    return order
    return order


_DANGLING_READ_OPS = frozenset({"ReadVariableOp", "IsVariableInitialized", "VarIsInitializedOp"})
"""Sinks that are only reads (e.g. the ReadVariableOp that ``assign(..., read_value=True)`` leaves
behind with a control edge from the write): run targets only if nothing else is."""


def _sinks(g: Graph, nodes: list[int]) -> list[int]:
    """Nodes of a downstream-closed set without consumers, dangling reads dropped if others exist."""
    out_start = g.consumers[0]
    sinks = sorted(u for u in nodes if out_start[u] == out_start[u + 1])
    real = [u for u in sinks if g.ops[u] not in _DANGLING_READ_OPS]
    return real or sinks


def _lowest(g: Graph, common: set[int]) -> list[int]:
    """Members of ``common`` none of whose inputs is in ``common``."""
    out = []
    for u in sorted(common):
        if not any(g.in_src[p] in common for p in range(g.in_start[u], g.in_start[u + 1])):
            out.append(u)
    return out


# ----------------------------------------------------------------------------- results


@dataclass
class Accumulator:
    """One gradient accumulator and the variable it feeds."""

    node: int
    sparse: bool
    shared_name: str | None
    variable: int | None
    """The variable the aggregated gradient updates (None if it cannot be told)."""
    variable_from: str
    """How ``variable`` was found: "shared_name+structure", "structure", "shared_name" or "none"."""
    shared_name_variable: str | None
    """The variable named by ``shared_name`` ("<var>:0/grad_accum"), even if not in the graph."""
    applies: list[int]
    takes: list[int]
    set_global_steps: list[int]
    num_required: list[int | None]
    """R of each TakeGradient (its ``num_required`` Const), None where not a Const."""
    updates: list[int]
    """The wrapped optimizer's ops that write ``variable`` with the aggregated gradient."""
    queue: int | None = None
    """The token queue whose dequeue waits for this accumulator's applies."""

    def to_json(self, names: list[str], ops: list[str], devices: list[str]) -> dict:
        return {
            "name": names[self.node],
            "op": ops[self.node],
            "device": devices[self.node],
            "sparse": self.sparse,
            "shared_name": self.shared_name,
            "variable": None if self.variable is None else names[self.variable],
            "variable_from": self.variable_from,
            "apply_ops": [names[i] for i in self.applies],
            "take_ops": [names[i] for i in self.takes],
            "set_global_step_ops": [names[i] for i in self.set_global_steps],
            "num_required": self.num_required,
            "update_ops": [names[i] for i in self.updates],
            "token_queue": None if self.queue is None else names[self.queue],
        }


@dataclass
class TokenQueue:
    """One token queue and everything hanging off it (one SyncReplicasOptimizer)."""

    queue: int
    dequeues: list[int]
    accumulators: list[int]
    """Accumulator node ids whose applies the dequeue waits for."""
    local_step_assigns: list[int]
    """``Assign(local_step, dequeue)``: the op ``apply_gradients`` returns to every worker."""
    local_steps: list[int]
    worker_train_ops: list[int]
    """What a worker runs each step: ``train_op`` entries (or sinks) depending on the assign."""
    sync_enqueue: int | None
    """The EnqueueMany after the update and the global-step increment."""
    sync_op: int | None
    """What the chief queue runner runs: the enqueue, or the op after it (variable averages); the
    global-step increment when no enqueue follows the update (a broken graph)."""
    sync_op_candidates: list[int]
    tokens_per_step: int | None
    global_step: int | None
    global_step_increments: list[int]
    """Writes of the global step the sync enqueue depends on (TF: one AssignAdd)."""
    init_tokens_ops: list[int]
    init_tokens: list[int | None]
    """Tokens each init-tokens op enqueues."""
    local_step_init_ops: list[int]
    chief_init_op: int | None
    variable_averages: list[tuple[int, int]]
    """(writer, variable) of the ops the sync op runs after the enqueue (EMA shadows)."""
    other_enqueues: list[int] = field(default_factory=list)
    """Enqueues on the queue that are neither the sync enqueue nor init tokens."""


@dataclass
class SyncMachinery:
    """The sync machinery of a graph; ids index ``graph`` (see :meth:`to_json` for names)."""

    graph: Graph = field(repr=False)
    token_queues: list[TokenQueue]
    accumulators: list[Accumulator]
    global_step: int | None
    notes: list[str] = field(default_factory=list)
    state: StateIndex | None = field(default=None, repr=False, compare=False)
    """The :func:`state_index` of ``graph`` detection built and read, handed on to the proof and
    the lint rules (None only for a machinery made by hand)."""

    # -- convenience views (the first/only queue; a well-formed graph has exactly one) --
    @property
    def primary(self) -> TokenQueue | None:
        return self.token_queues[0] if self.token_queues else None

    @property
    def replicas_to_aggregate(self) -> int | None:
        """R, when every TakeGradient agrees on it (None otherwise or if unknown)."""
        values = {v for a in self.accumulators for v in a.num_required}
        return values.pop() if len(values) == 1 else None

    @property
    def tokens_per_step(self) -> int | None:
        q = self.primary
        return q.tokens_per_step if q else None

    @property
    def total_replicas(self) -> int | None:
        """W as far as the graph tells: TF keeps ``tokens_per_step = max(W, R)``; so W is exact
        when tokens_per_step > R (backup workers), and W <= R when they are equal (reported R)."""
        return self.tokens_per_step

    @property
    def backup_workers(self) -> int | None:
        r, t = self.replicas_to_aggregate, self.tokens_per_step
        if r is None or t is None:
            return None
        return max(0, t - r)

    def name(self, i: int | None) -> str | None:
        return None if i is None else self.graph.names[i]

    def accumulator_for(self, variable: str) -> Accumulator | None:
        i = self.graph.id_of(variable)
        for a in self.accumulators:
            if a.variable == i:
                return a
        return None

    def to_json(self) -> dict:
        g = self.graph
        names, ops, devices = g.names, g.ops, g.devices
        n = self.name
        r = self.replicas_to_aggregate
        t = self.tokens_per_step
        queues = []
        for q in self.token_queues:
            queues.append({
                "queue": n(q.queue),
                "device": devices[q.queue],
                "dequeue_ops": [names[i] for i in q.dequeues],
                "accumulators": [names[i] for i in q.accumulators],
                "local_steps": [names[i] for i in q.local_steps],
                "local_step_assigns": [names[i] for i in q.local_step_assigns],
                "worker_train_ops": [names[i] for i in q.worker_train_ops],
                "sync_enqueue": n(q.sync_enqueue),
                "sync_op": n(q.sync_op),
                "sync_op_candidates": [names[i] for i in q.sync_op_candidates],
                "tokens_per_step": q.tokens_per_step,
                "global_step": n(q.global_step),
                "global_step_increments": [names[i] for i in q.global_step_increments],
                "init_tokens_ops": [names[i] for i in q.init_tokens_ops],
                "init_tokens": q.init_tokens,
                "local_step_init_ops": [names[i] for i in q.local_step_init_ops],
                "chief_init_op": n(q.chief_init_op),
                "variable_averages": [
                    {"op": names[w], "variable": names[v]} for w, v in q.variable_averages
                ],
                "other_enqueues": [names[i] for i in q.other_enqueues],
            })
        p = self.primary
        return {
            "schema": "placeviz.sync_machinery/1",
            "replicas_to_aggregate": r,
            "tokens_per_step": t,
            "total_replicas": self.total_replicas,
            "total_replicas_exact": None if r is None or t is None else t > r,
            "backup_workers": self.backup_workers,
            "global_step": n(self.global_step),
            "local_step": n(p.local_steps[0]) if p and p.local_steps else None,
            "worker_train_op": n(p.worker_train_ops[0]) if p and p.worker_train_ops else None,
            "local_step_assign": n(p.local_step_assigns[0]) if p and p.local_step_assigns else None,
            "sync_op": n(p.sync_op) if p else None,
            "chief_init_op": n(p.chief_init_op) if p else None,
            "init_tokens_ops": [names[i] for i in p.init_tokens_ops] if p else [],
            "variable_averages": ({
                "op": n(p.sync_op),
                "variables": list(dict.fromkeys(names[v] for _, v in p.variable_averages)),
            } if p and p.variable_averages else None),
            "token_queues": queues,
            "accumulators": [a.to_json(names, ops, devices) for a in self.accumulators],
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------- detection


def detect(graph: Graph, collections=None, *, table=None) -> SyncMachinery | None:
    """Find the SyncReplicas machinery of ``graph``; None if it has none.

    ``collections`` (a :class:`placeviz.io.Collections`, optional): ``train_ops`` and
    ``queue_runners`` pick the run targets among the structural candidates; they are never needed.
    """
    g = graph
    ops = g.ops
    # Most graphs have no accumulator: a set test in C settles that without a Python loop over
    # the nodes (two such loops were 0.05 s each at 200k nodes, for every graph analyzed).
    if ACCUMULATOR_OPS.isdisjoint(ops):
        return None
    accum_nodes = list(compress(range(len(ops)), map(ACCUMULATOR_OPS.__contains__, ops)))
    queue_nodes = list(compress(range(len(ops)), map(FIFO_QUEUE_OPS.__contains__, ops)))
    idx = state_index(g, table)
    accums = {a: _accumulator(g, idx, a) for a in accum_nodes}
    apply_owner = {ap: a for a, acc in accums.items() for ap in acc.applies}

    queues: list[TokenQueue] = []
    for q in queue_nodes:
        tq = _token_queue(g, idx, q, apply_owner, collections)
        if tq is not None:
            queues.append(tq)
            for a in tq.accumulators:
                if accums[a].queue is None:
                    accums[a].queue = q
    if not queues:
        return None

    notes: list[str] = []
    global_steps = list(dict.fromkeys(q.global_step for q in queues if q.global_step is not None))
    if len(global_steps) > 1:
        notes.append("the token queues are filled from different global steps: "
                     + ", ".join(g.names[i] for i in global_steps))
    shared: dict[str, list[int]] = {}
    for acc in accums.values():
        if acc.shared_name:
            shared.setdefault(acc.shared_name, []).append(acc.node)
    for sn, nodes in shared.items():
        if len(nodes) > 1:
            notes.append(f"{len(nodes)} accumulators share shared_name {sn!r} (one resource at run time "
                         f"on the same device): " + ", ".join(g.names[i] for i in nodes))
    queue_names: dict[tuple[str, str], list[int]] = {}
    for tq in queues:
        av = g.node_def(tq.queue).attr.get("shared_name")
        if av is not None and av.s:
            queue_names.setdefault((av.s.decode("utf-8", "replace"), g.devices[tq.queue]), []).append(tq.queue)
    for (sn, _dev), nodes in queue_names.items():
        if len(nodes) > 1:
            notes.append(f"token queues {', '.join(g.names[i] for i in nodes)} share shared_name {sn!r} on "
                         "the same device: at run time they are one queue, so tokens of either sync op "
                         "release either dequeue")
    for acc in accums.values():
        if acc.variable_from == "shared_name" and acc.shared_name_variable is not None:
            notes.append(f"accumulator {g.names[acc.node]}: no update of {acc.shared_name_variable} "
                         "consumes its aggregated gradient")
        if acc.queue is None:
            notes.append(f"accumulator {g.names[acc.node]} feeds no token queue's dequeue")
    if idx.unknown_ops:
        notes.append("op types unknown to the op-facts table (their variable writes are not seen): "
                     + ", ".join(sorted(idx.unknown_ops)[:10]))
    return SyncMachinery(
        graph=g,
        token_queues=queues,
        accumulators=sorted(accums.values(), key=lambda a: a.node),
        global_step=global_steps[0] if global_steps else None,
        notes=notes,
        state=idx,
    )


def _accumulator(g: Graph, idx: StateIndex, a: int) -> Accumulator:
    ops = g.ops
    applies, takes, sets = [], [], []
    for c in _forward_handle_users(g, a):
        op = ops[c]
        if op in ACCUMULATOR_APPLY_OPS:
            applies.append(c)
        elif op in ACCUMULATOR_TAKE_OPS:
            takes.append(c)
        elif op in ACCUMULATOR_SET_STEP_OPS:
            sets.append(c)
    num_required: list[int | None] = []
    for t in takes:
        ins = _data_inputs(g, t)
        vals = const_ints(g, ins[1][0]) if len(ins) > 1 else None
        num_required.append(vals[0] if vals and len(vals) == 1 else None)
    sn_attr = g.node_def(a).attr.get("shared_name")
    shared_name = sn_attr.s.decode("utf-8", "replace") if sn_attr is not None and sn_attr.s else None
    sn_var_name = None
    if shared_name and shared_name.endswith("/grad_accum"):
        sn_var_name = shared_name[: -len("/grad_accum")]
        if ":" in sn_var_name:
            sn_var_name = sn_var_name.rsplit(":", 1)[0]
    sn_var = g.id_of(sn_var_name) if sn_var_name else None
    if sn_var is not None and sn_var not in idx.kind:
        sn_var = None

    # Structure: variables written downstream of the TakeGradient outputs.
    written: dict[int, list[int]] = {}
    for w in _gradient_flow(g, idx, takes):
        for s, pos in idx.writes.get(w, ()):
            if idx.kind.get(s) == "variable":
                written.setdefault(s, []).append(w)
                if pos == 0 and is_optimizer_apply(ops[w]):
                    written[s].append(-1)  # marks "input 0 of an Apply op"
    struct_var = _primary_variable(g, written)
    if sn_var is not None and sn_var in written:
        var, source = sn_var, "shared_name+structure"
    elif struct_var is not None:
        var, source = struct_var, "structure"
    elif sn_var is not None:
        var, source = sn_var, "shared_name"
    else:
        var, source = None, "none"
    updates = [w for w in written.get(var, []) if w >= 0] if var is not None else []
    return Accumulator(
        node=a, sparse=ops[a] == "SparseConditionalAccumulator", shared_name=shared_name,
        variable=var, variable_from=source, shared_name_variable=sn_var_name,
        applies=applies, takes=takes, set_global_steps=sets, num_required=num_required,
        updates=list(dict.fromkeys(updates)),
    )


def _gradient_flow(g: Graph, idx: StateIndex, starts: list[int], limit: int = 20000) -> list[int]:
    """Nodes downstream of ``starts`` over data edges, plus read-after-write control edges (a
    ReadVariableOp that waits for a write, as resource ``assign``/``scatter_add`` return)."""
    out_start, out_dst, out_pos = g.consumers
    in_slot, ops = g.in_slot, g.ops
    seen = set(starts)
    order = list(dict.fromkeys(starts))
    k = 0
    while k < len(order) and len(order) <= limit:
        u = order[k]
        k += 1
        writer = u in idx.writes
        for e in range(out_start[u], out_start[u + 1]):
            v = out_dst[e]
            if v in seen:
                continue
            if in_slot[out_pos[e]] == CONTROL and not (writer and ops[v] in VARIABLE_READ_OPS):
                continue
            seen.add(v)
            order.append(v)
    return order



def _forward_handle_users(g: Graph, a: int) -> list[int]:
    """Consumers of a handle, looking through Identity-like forwarders."""
    return sorted(c for c, _via, forwards in forward_through(g, a, FORWARD_INPUT0_OPS) if not forwards)


def _primary_variable(g: Graph, written: dict[int, list[int]]) -> int | None:
    if not written:
        return None
    if len(written) == 1:
        return next(iter(written))
    names = {v: g.names[v] for v in written}
    # Slots are named "<var>/<optimizer>...": the variable's name prefixes all the others.
    for v, name in names.items():
        if all(o == v or names[o].startswith(name + "/") for o in written):
            return v
    applied = [v for v, ws in written.items() if -1 in ws]
    if len(applied) == 1:
        return applied[0]
    return None


def _control_closure(g: Graph, i: int) -> list[int]:
    """Control inputs of ``i``, looking through NoOp groups."""
    out = []
    stack = [i]
    seen = {i}
    while stack:
        u = stack.pop()
        for src, slot in g.inputs_of(u):
            if slot != CONTROL or src in seen:
                continue
            seen.add(src)
            out.append(src)
            if g.ops[src] == "NoOp":
                stack.append(src)
    return out


def _token_queue(g: Graph, idx: StateIndex, q: int, apply_owner: dict[int, int], collections) -> TokenQueue | None:
    ops = g.ops
    users = _forward_handle_users(g, q)
    dequeues, accs = [], []
    for d in users:
        if ops[d] not in DEQUEUE_OPS:
            continue
        found = [apply_owner[c] for c in _control_closure(g, d) if c in apply_owner]
        if found:
            dequeues.append(d)
            accs.extend(found)
    if not dequeues:
        return None
    accs = list(dict.fromkeys(accs))

    # Worker side: Assign(local_step, dequeue).
    assigns, local_steps = [], []
    for d in dequeues:
        for w, var in _value_writes(g, idx, d):
            assigns.append(w)
            local_steps.append(var)
    assigns = list(dict.fromkeys(assigns))
    local_steps = list(dict.fromkeys(local_steps))
    worker_train_ops = _run_targets(g, assigns, collections.train_ops if collections else ())

    # Chief side: the enqueues of tokens.
    enqueues = [u for u in users if ops[u] in ENQUEUE_MANY_OPS]
    sync_enq, init_ops, init_tokens, others = None, [], [], []
    tokens_per_step, global_step, increments = None, None, []
    for e in enqueues:
        ins = _data_inputs(g, e)
        fill = ins[1][0] if len(ins) > 1 and ops[ins[1][0]] == "Fill" else None
        dims, value_var = None, None
        if fill is not None:
            fins = _data_inputs(g, fill)
            vals = const_ints(g, fins[0][0]) if fins else None
            dims = vals[0] if vals and len(vals) == 1 else None
            value_var = idx.value_source(*fins[1]) if len(fins) > 1 else None
        upstream = Reach(g, [e]).order
        has_take = any(ops[u] in ACCUMULATOR_TAKE_OPS for u in upstream)
        incs = [u for u in upstream if value_var is not None and any(s == value_var for s, _ in idx.writes.get(u, ()))]
        if (has_take or incs) and sync_enq is None:
            sync_enq, tokens_per_step, global_step, increments = e, dims, value_var, incs
        elif fill is not None and value_var is not None and not has_take and not incs:
            init_ops.append(e)
            init_tokens.append(dims)
            if global_step is None:
                global_step = value_var
        else:
            others.append(e)

    sync_op, candidates = None, []
    if sync_enq is not None:
        down = _forward(g, [sync_enq])
        candidates = _sinks(g, down)
        down_set = set(down)
        qr_ops = []
        if collections is not None:
            for qr in collections.queue_runners:
                for name in qr.get("enqueue_ops", ()):
                    i = g.id_of(name)
                    if i is not None and i in down_set:
                        qr_ops.append(i)
        if qr_ops:
            sync_op = qr_ops[0]
        elif len(candidates) == 1:
            sync_op = candidates[0]
        else:
            sync_op = sync_enq
    elif global_step is not None:
        # No enqueue after the update: the chief can only run the update itself (the wrapped
        # optimizer's global-step increment downstream of the TakeGradients).
        takes = [t for a in accs for t in _forward_handle_users(g, a) if ops[t] in ACCUMULATOR_TAKE_OPS]
        gs_writers = set(idx.writers.get(global_step, ()))
        increments = [u for u in _forward(g, takes) if u in gs_writers]
        if len(increments) == 1:
            sync_op = increments[0]
    averages = []
    if sync_op is not None and sync_enq is not None and sync_op != sync_enq:
        after = set(_forward(g, [sync_enq]))
        for u in Reach(g, [sync_op]).order:
            if u in after:
                for s, _ in idx.writes.get(u, ()):
                    averages.append((u, s))

    # Init: local step := global step; chief init op = lowest common dependent with SetGlobalStep.
    init_local = []
    if global_step is not None:
        for ls in local_steps:
            for w in idx.writers.get(ls, ()):
                if w in assigns:
                    continue
                for src, slot in _data_inputs(g, w):
                    if idx.value_source(src, slot) == global_step:
                        init_local.append(w)
                        break
    chief_init = None
    set_steps = [s for a in accs for s in _forward_handle_users(g, a) if ops[s] in ACCUMULATOR_SET_STEP_OPS]
    if init_local:
        common = set(_forward(g, init_local[:1], limit=100000))
        for s in set_steps:
            common &= set(_forward(g, [s], limit=100000))
        lowest = _lowest(g, common)
        if lowest:
            chief_init = lowest[0]
    return TokenQueue(
        queue=q, dequeues=dequeues, accumulators=accs, local_step_assigns=assigns,
        local_steps=local_steps, worker_train_ops=worker_train_ops, sync_enqueue=sync_enq,
        sync_op=sync_op, sync_op_candidates=candidates, tokens_per_step=tokens_per_step,
        global_step=global_step, global_step_increments=increments, init_tokens_ops=init_ops,
        init_tokens=init_tokens, local_step_init_ops=init_local, chief_init_op=chief_init,
        variable_averages=averages, other_enqueues=others,
    )


_VALUE_FORWARD_OPS = frozenset({"Identity", "Cast", "Snapshot"})


def _value_writes(g: Graph, idx: StateIndex, src: int) -> list[tuple[int, int]]:
    """(writer, variable) for writes whose *value* input is ``src``'s output (through Identity/Cast)."""
    out: list[tuple[int, int]] = []
    for c, u, forwards in forward_through(g, src, _VALUE_FORWARD_OPS):
        writes = idx.writes.get(c) if not forwards else None
        if not writes:
            continue
        # the edge u -> c must land on a non-written input
        positions = [p - g.in_start[c] for p in range(g.in_start[c], g.in_start[c + 1])
                     if g.in_src[p] == u and g.in_slot[p] != CONTROL]
        written_pos = {p for _, p in writes}
        if any(p not in written_pos for p in positions):
            out.extend((c, s) for s, _ in writes if idx.kind.get(s) == "variable")
    return out


def _run_targets(g: Graph, cores: list[int], train_ops) -> list[int]:
    """What runs ``cores``: the ``train_op`` collection entries depending on them, else the sinks."""
    if not cores:
        return []
    down = _forward(g, cores)
    down_set = set(down)
    chosen = []
    for name in train_ops or ():
        i = g.id_of(name)
        if i is not None and i in down_set:
            chosen.append(i)
    if chosen:
        return list(dict.fromkeys(chosen))
    return _sinks(g, down)
