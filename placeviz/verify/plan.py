"""What a verify run executes, decided statically (no TensorFlow) from the pipeline's results.

The coordinator process (:mod:`placeviz.verify.coordinator`) only follows a :class:`RunPlan`: which
ops the chief runs to initialize, which op its queue runner loops on, which op every worker runs per
step, which tensors each run fetches as evidence, and which op names to count in the step stats.
Keeping those decisions here keeps them testable without a cluster and keeps the TF side dumb.

Evidence fetched per run (fresh tensors only: a fetched ``Identity`` of a ref variable aliases the
buffer that a later op of the same run may overwrite, so such reads are never fetched mid-run):

* worker run: the gradient each dense accumulator receives (input 2 of its ``*ApplyGradient``) and
  the token the run dequeued (the local step, hence the tag, of that worker's *next* run);
* chief sync run: the non-state inputs of every wrapped-optimizer update op (learning rate,
  momentum, the averaged gradient taken from the accumulator, a sparse update's indices and
  values...), so the update can be replayed in numpy from the values before the first step
  (:data:`OPTIMIZERS` lists the kernels replayed and their input roles).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from placeviz.devices import PyDeviceSpec
from placeviz.graph import Graph
from placeviz.op_kinds import VARIABLE_OPS
from placeviz.protos import GraphDef
from placeviz.sync.reach import Reach
from placeviz.verify.optimizers import SLOT_ROLES as _SLOT_ROLES


class Kernel(NamedTuple):
    """One update kernel verify replays: its ref op type (``"Resource" + op`` is the resource
    twin, same input order), the role of each input (op-def order), the optimizer that emits it
    (a ``tf.compat.v1.train`` class name without ``Optimizer``, or Keras') and whether it is a
    sparse (indexed) update."""

    op: str
    roles: tuple[str, ...]
    optimizer: str
    sparse: bool = False


# The update kernels verify replays in numpy (placeviz.verify.optimizers, one function per kind),
# with their input roles in op-def order (tensorflow/core/ops/training_ops.cc, state_ops.cc).
# State roles (STATE_ROLES) are variables, read before the first step and replayed; the others are
# fetched in the chief's sync run, so the replay gets exactly what the kernel got.
OPTIMIZERS: dict[str, Kernel] = {
    "gd": Kernel("ApplyGradientDescent", ("var", "alpha", "delta"), "GradientDescent"),
    "scatter_sub": Kernel("ScatterSub", ("var", "indices", "updates"), "GradientDescent", True),
    "scatter_add": Kernel("ScatterAdd", ("var", "indices", "updates"), "GradientDescent", True),
    "momentum": Kernel("ApplyMomentum", ("var", "accum", "lr", "grad", "momentum"), "Momentum"),
    "sparse_momentum": Kernel("SparseApplyMomentum", ("var", "accum", "lr", "grad", "indices", "momentum"),
                              "Momentum", True),
    "adam": Kernel("ApplyAdam", ("var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon",
                                 "grad"), "Adam"),
    "adagrad": Kernel("ApplyAdagrad", ("var", "accum", "lr", "grad"), "Adagrad"),
    "sparse_adagrad": Kernel("SparseApplyAdagrad", ("var", "accum", "lr", "grad", "indices"), "Adagrad", True),
    "adagrad_da": Kernel("ApplyAdagradDA", ("var", "gradient_accumulator", "gradient_squared_accumulator", "grad",
                                            "lr", "l1", "l2", "global_step"), "AdagradDA"),
    "sparse_adagrad_da": Kernel("SparseApplyAdagradDA", ("var", "gradient_accumulator",
                                                         "gradient_squared_accumulator", "grad", "indices", "lr",
                                                         "l1", "l2", "global_step"), "AdagradDA", True),
    "rmsprop": Kernel("ApplyRMSProp", ("var", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad"), "RMSProp"),
    "sparse_rmsprop": Kernel("SparseApplyRMSProp", ("var", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad",
                                                    "indices"), "RMSProp", True),
    "centered_rmsprop": Kernel("ApplyCenteredRMSProp", ("var", "mg", "ms", "mom", "lr", "rho", "momentum",
                                                        "epsilon", "grad"), "RMSProp"),
    "sparse_centered_rmsprop": Kernel("SparseApplyCenteredRMSProp", ("var", "mg", "ms", "mom", "lr", "rho",
                                                                     "momentum", "epsilon", "grad", "indices"),
                                      "RMSProp", True),
    "adadelta": Kernel("ApplyAdadelta", ("var", "accum", "accum_update", "lr", "rho", "epsilon", "grad"), "Adadelta"),
    "sparse_adadelta": Kernel("SparseApplyAdadelta", ("var", "accum", "accum_update", "lr", "rho", "epsilon", "grad",
                                                      "indices"), "Adadelta", True),
    "ftrl": Kernel("ApplyFtrl", ("var", "accum", "linear", "grad", "lr", "l1", "l2", "lr_power"), "Ftrl"),
    "ftrl_v2": Kernel("ApplyFtrlV2", ("var", "accum", "linear", "grad", "lr", "l1", "l2", "l2_shrinkage",
                                      "lr_power"), "Ftrl"),
    "sparse_ftrl": Kernel("SparseApplyFtrl", ("var", "accum", "linear", "grad", "indices", "lr", "l1", "l2",
                                              "lr_power"), "Ftrl", True),
    "sparse_ftrl_v2": Kernel("SparseApplyFtrlV2", ("var", "accum", "linear", "grad", "indices", "lr", "l1", "l2",
                                                   "l2_shrinkage", "lr_power"), "Ftrl", True),
    "proximal_gd": Kernel("ApplyProximalGradientDescent", ("var", "alpha", "l1", "l2", "delta"),
                          "ProximalGradientDescent"),
    "sparse_proximal_gd": Kernel("SparseApplyProximalGradientDescent", ("var", "alpha", "l1", "l2", "delta",
                                                                        "indices"), "ProximalGradientDescent", True),
    "proximal_adagrad": Kernel("ApplyProximalAdagrad", ("var", "accum", "lr", "l1", "l2", "grad"),
                               "ProximalAdagrad"),
    "sparse_proximal_adagrad": Kernel("SparseApplyProximalAdagrad", ("var", "accum", "lr", "l1", "l2", "grad",
                                                                     "indices"), "ProximalAdagrad", True),
    "adagrad_v2": Kernel("ApplyAdagradV2", ("var", "accum", "lr", "epsilon", "grad"), "Keras AdagradV2"),
    "sparse_adagrad_v2": Kernel("SparseApplyAdagradV2", ("var", "accum", "lr", "epsilon", "grad", "indices"),
                                "Keras AdagradV2", True),
}
SLOT_ROLES = frozenset(_SLOT_ROLES)  # the variable and the slots a kernel updates
STATE_ROLES = SLOT_ROLES | {"beta1_power", "beta2_power"}
BOOL_ATTRS = ("use_nesterov", "update_slots", "multiply_linear_by_lr")  # the kernel attrs the models read
SPARSE_ADAM = {
    "AssignSub": "sparse Adam's composite update (tensorflow/python/training/adam.py _apply_sparse_shared: "
                 "Assign and ScatterAdd of the m and v slots, then AssignSub of the variable) is several ops, not "
                 "one kernel",
    "AssignSubVariableOp": "sparse Adam's composite update on a resource variable (adam.py _apply_sparse_shared: "
                           "AssignVariableOp and ResourceScatterAdd of m and v, then AssignSubVariableOp of the "
                           "variable) is several ops, not one kernel",
}
"""Why the last op of ``AdamOptimizer``'s sparse update, the one that writes the variable, is not
replayed (said where its value comes from a scatter-add of a slot, see :func:`_sparse_adam`)."""
_VALUE_FORWARD = frozenset({"Identity", "RefIdentity", "ReadVariableOp", "Snapshot"})


def optimizer_kind(op_type: str) -> str | None:
    for kind, kernel in OPTIMIZERS.items():
        if op_type in (kernel.op, "Resource" + kernel.op):
            return kind
    return None


def replayed_summary() -> str:
    """The optimizers whose updates verify replays, from :data:`OPTIMIZERS` (the plan's note and
    the ``values`` check both say it)."""
    dense: dict[str, int] = {}
    sparse: dict[str, int] = {}
    for k in OPTIMIZERS.values():
        (sparse if k.sparse else dense)[k.optimizer] = 1
    parts = []
    for name in dict.fromkeys(k.optimizer for k in OPTIMIZERS.values()):
        how = "dense and sparse" if name in dense and name in sparse else "dense only" if name in dense else "sparse only"
        parts.append(f"{name} ({how})")
    return ", ".join(parts)


def not_replayed_note(updates) -> str:
    """The plan's note on the update ops whose values are not replayed, and why."""
    why = {u.op_type: not_replayed_why(u) for u in updates if u.kind is None}
    return (f"update ops {', '.join(sorted(why))}: values not replayed ("
            + "; ".join(f"{op}: {text}" for op, text in sorted(why.items()))
            + f"). Replayed: {replayed_summary()}")


def not_replayed_why(update) -> str:
    """Why ``update`` (an :class:`UpdatePlan` or its JSON) is not replayed."""
    get = update.get if isinstance(update, dict) else lambda k, d=None: getattr(update, k, d)
    return get("why") or f"no numpy model of {get('op_type')}"


def _sparse_adam(graph: Graph, op: str, depth: int = 6) -> bool:
    """``op`` (an ``AssignSub``) subtracts a value computed from a scatter-add of a slot: adam.py's
    ``var - lr * m_t / (sqrt(v_t) + epsilon)`` with ``m_t``/``v_t`` a ``ScatterAdd`` (ref) or a read
    after a ``ResourceScatterAdd`` (resource; a control input)."""
    frontier, seen = [op], {op}
    for _ in range(depth):
        nxt = []
        for name in frontier:
            for text in graph.node_def(graph.index[name]).input:
                src = op_of(text)
                if src in seen or src not in graph.index:
                    continue
                if graph.ops[graph.index[src]] in ("ScatterAdd", "ResourceScatterAdd"):
                    return True
                seen.add(src)
                nxt.append(src)
        frontier = nxt
    return False


def tensor(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def op_of(name: str) -> str:
    return name[1:] if name.startswith("^") else name.split(":", 1)[0]


@dataclass
class UpdatePlan:
    """One wrapped-optimizer update op that the chief's sync op runs for a trainable variable."""

    op: str
    op_type: str
    variable: str
    accumulator: str | None
    kind: str | None  # a key of OPTIMIZERS, or None (not replayed: see ``why``)
    fetch: dict[str, str] = field(default_factory=dict)  # role -> tensor fetched in the sync run
    state: dict[str, str] = field(default_factory=dict)  # role -> variable the replay tracks
    use_nesterov: bool = False
    attrs: dict[str, bool] = field(default_factory=dict)  # the kernel's BOOL_ATTRS the model reads
    why: str | None = None  # why it is not replayed (kind None)
    use_locking: bool | None = None  # the kernel's use_locking attr (None: the op has none)


@dataclass
class AccumulatorPlan:
    name: str
    op: str
    sparse: bool
    variable: str | None
    num_required: int | None
    apply_ops: list[str]
    take_ops: list[str]
    update_ops: list[str]
    grad: str | None  # tensor a worker run fetches (dense only)
    take: str | None = None  # the averaged gradient, fetched in the sync run (dense only)


@dataclass
class RunPlan:
    """Everything the coordinator needs; JSON-able (``asdict``)."""

    workers: int
    steps: int
    worker_job: str
    ps_job: str
    cluster: dict  # job -> number of tasks (local servers) or list of addresses (--servers)
    train_ops: list[str]
    global_step: str | None
    local_step: str | None
    init_ops: list[str]
    local_init_ops: list[str]
    chief_init_op: str | None
    local_step_init_ops: list[str]
    init_tokens_ops: list[str]
    sync_op: str | None
    queue_runner: str | None  # where the chief queue runner comes from; None: there is none
    token_queue: str | None
    token_dequeue: str | None
    tokens_per_step: int | None
    replicas_to_aggregate: int | None
    accumulators: list[AccumulatorPlan]
    updates: list[UpdatePlan]
    increments: list[str]
    per_worker_updates: list[dict]
    watch: list[str]  # op names whose executions are counted in every run's step stats
    variables: dict[str, str]  # variable op -> "ref" | "resource": read before and after the run
    feeds: list[str]  # tensors fed in worker runs (values in feeds_w<i>.npz)
    worker_fetches: list[str]
    sync_fetches: list[str]
    timeout_s: float
    isolate: bool
    existing_cluster: bool
    seed: int
    fault: str | None = None
    cpus_per_task: int = 1
    notes: list[str] = field(default_factory=list)
    per_worker: list[dict] = field(default_factory=list)  # placeviz.verify.workers.WorkerRun per worker task
    chief_only: list[str] = field(default_factory=list)  # variables only the chief's graph has
    reset_containers: bool = False  # --servers --reset-containers: Session.reset before the run
    isolation: bool = True  # local servers in private namespaces (False: --no-isolation)
    allow_io: bool = False  # --allow-io: ops that touch the file system or run code may run
    mode: str = "sync"  # sync | async | barrier (placeviz.verify.modes)
    slow_workers: dict = field(default_factory=dict)  # worker index (str in JSON) -> seconds (--slow-worker)
    delay_targets: list[str] = field(default_factory=list)  # ops a slow worker's delay is a control input of
    reads: dict = field(default_factory=dict)  # async: variable -> the ops of a step that read it
    powers: dict = field(default_factory=dict)  # async: Adam's beta-power variable -> the ops that advance it
    other_writes: dict = field(default_factory=dict)  # async: trained variable -> its writes outside the optimizer
    loss: str | None = None  # a scalar loss tensor read after the run (--loss, or the gradients' seed)
    trace: bool = False  # keep every op of every run for --trace (else only the ops the analysis needs)

    def to_json(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------------ helpers


def value_variable(graph: Graph, text: str) -> str | None:
    """The variable whose value (or ref/handle) the input ``text`` is, through reads and identities."""
    name = op_of(text)
    seen = set()
    while name in graph.index and name not in seen:
        seen.add(name)
        i = graph.index[name]
        op = graph.ops[i]
        if op in VARIABLE_OPS:
            return name
        if op not in _VALUE_FORWARD:
            return None
        data = [x for x in graph.node_def(i).input if not x.startswith("^")]
        if not data:
            return None
        name = op_of(data[0])
    return None


def _data_inputs(graph: Graph, name: str) -> list[str]:
    return [x for x in graph.node_def(graph.index[name]).input if not x.startswith("^")]


def worker_gradient(pipe, accumulator) -> str | None:
    """The gradient tensor a worker run feeds a dense accumulator: input 2 of its first
    ``*ApplyGradient`` (``ConditionalAccumulator.apply_grad(grad, local_step)``); None for sparse."""
    if accumulator.sparse or not accumulator.applies:
        return None
    data = _data_inputs(pipe.graph, pipe.machinery.name(accumulator.applies[0]))
    return tensor(data[2]) if len(data) > 2 else None


def update_plan(graph: Graph, op: str, variable: str, accumulator: str | None) -> UpdatePlan:
    """The replay of update op ``op`` of ``variable``: which input is which role, which are
    variables the replay follows (the variable and its slots, through reads and identities) and
    which tensors the sync run fetches (hyper-parameters, the gradient, sparse indices...)."""
    i = graph.index[op]
    op_type = graph.ops[i]
    kind = optimizer_kind(op_type)
    plan = UpdatePlan(op=op, op_type=op_type, variable=variable, accumulator=accumulator, kind=kind)
    attr = graph.node_def(i).attr
    plan.use_locking = bool(attr["use_locking"].b) if "use_locking" in attr else None
    if kind is None:
        plan.why = SPARSE_ADAM[op_type] if op_type in SPARSE_ADAM and _sparse_adam(graph, op) else None
        plan.why = not_replayed_why(plan)
        return plan
    roles = OPTIMIZERS[kind].roles
    inputs = _data_inputs(graph, op)
    for role, text in zip(roles, inputs, strict=False):
        source = value_variable(graph, text) if role in STATE_ROLES else None
        if role in STATE_ROLES and source is not None:
            plan.state[role] = source
        else:
            plan.fetch[role] = tensor(text)
    attr = graph.node_def(i).attr
    plan.attrs = {a: bool(attr[a].b) for a in BOOL_ATTRS if a in attr}
    plan.use_nesterov = plan.attrs.get("use_nesterov", False)
    missing = sorted((set(roles) & SLOT_ROLES) - set(plan.state))
    if len(inputs) < len(roles) or missing:
        plan.kind = None  # a slot we cannot follow: do not pretend to replay it
        plan.why = (f"input(s) {', '.join(missing)} of {op_type} are not variables verify can read" if missing
                    else f"{op_type} has {len(inputs)} inputs, the model expects {len(roles)}")
    return plan


def worker_graph(graph_def: GraphDef, worker_job: str, task: int) -> GraphDef:
    """The chief's graph as worker ``task`` would have built it: its worker device names ``task``.

    TF1 programs build one graph per worker under ``replica_device_setter(worker_device=
    "/job:worker/task:<i>")``; only the worker-side ops (the model, the local step) move, the ps
    side is shared. Nodes on ``/job:<worker_job>`` with task 0 or no task get task ``task``.
    """
    out = GraphDef()
    out.CopyFrom(graph_def)
    if task == 0:
        return out
    cache: dict[str, str] = {}
    for node in out.node:
        d = node.device
        if not d:
            continue
        new = cache.get(d)
        if new is None:
            spec = PyDeviceSpec.parse(d)
            moves = spec.job == worker_job and spec.task in (None, 0)
            new = dataclasses.replace(spec, task=task).to_string() if moves else d
            cache[d] = new
        node.device = new
    return out


def init_ops(model) -> tuple[list[str], list[str]]:
    """(global init ops, local init ops) as a TF1 Scaffold would run them.

    The graph's own ``init``/``local_init`` NoOps when it has them (the samples, most TF1 scripts);
    else the initializers the MetaGraphDef's variable collections name; else ``<var>/Assign``.
    """
    g = model.graph
    names = g.index
    if "init" in names:
        global_init = ["init"]
    else:
        global_init = _collection_initializers(model, "variables") or [
            f"{n}/Assign" for n, op in zip(g.names, g.ops, strict=True)
            if op in VARIABLE_OPS and f"{n}/Assign" in names]
    local = [n for n in ("local_init", "init_all_tables", "init_1") if n in names][:1]
    if not local:
        local = _collection_initializers(model, "local_variables")
    return global_init, local


def _collection_initializers(model, key: str) -> list[str]:
    meta = model.meta_graph
    if meta is None or key not in meta.collection_def:
        return []
    from placeviz.protos import VariableDef

    out = []
    for raw in meta.collection_def[key].bytes_list.value:
        vd = VariableDef.FromString(raw)
        if vd.initializer_name and op_of(vd.initializer_name) in model.graph.index:
            out.append(op_of(vd.initializer_name))
    return out


def placeholders(graph: Graph, targets: list[str]) -> list[str]:
    """Placeholders (with or without default) in the reverse closure of ``targets``, in graph order."""
    seen = Reach(graph, [graph.index[t] for t in targets if t in graph.index]).order
    return [graph.names[i] for i in sorted(seen)
            if graph.ops[i] in ("Placeholder", "PlaceholderV2", "PlaceholderWithDefault")]


# ------------------------------------------------------------------------------------------ the plan


def make_plan(pipe, *, workers: int, steps: int, cluster: dict, worker_job: str, ps_job: str,
              timeout_s: float, isolate: bool, existing_cluster: bool, seed: int, feeds: list[str],
              chief_queue_runner: str = "auto", fault: str | None = None, cpus_per_task: int = 1) -> RunPlan:
    """The run for the SyncReplicas graph of ``pipe`` (raises PlacevizError if it is not one).

    ``chief_queue_runner``: ``auto`` (a runner from the ``queue_runners`` collection, else the
    detected sync op, which TF keeps out of the collection), ``detected`` (always run the detected
    sync op), ``none`` (never: what a chief without SyncReplicasHook does).
    """
    from placeviz.errors import PlacevizError
    from placeviz.sync.detect import is_optimizer_apply, state_of

    m = pipe.machinery
    tq = m.primary if m is not None else None
    if tq is None:
        raise PlacevizError("not a SyncReplicasOptimizer graph (no token queue with accumulators found); "
                            "pass --sync-replicas to apply placeviz's sync pass to a plain training graph")
    g = pipe.graph
    name = m.name
    notes: list[str] = []
    train_ops = [name(i) for i in tq.worker_train_ops]
    if not train_ops:
        raise PlacevizError("the SyncReplicas graph has no worker train op (no Assign(local_step, dequeue))")
    sync_op = name(tq.sync_op)
    qr_source, qr_op = _queue_runner(pipe, tq, name, chief_queue_runner, notes)
    if qr_op is not None:
        sync_op = qr_op

    trainable = set(pipe.model.collections.trainable_variables) or None
    accs: list[AccumulatorPlan] = []
    updates: list[UpdatePlan] = []
    for a in m.accumulators:
        if a.queue is not None and a.queue != tq.queue:
            continue
        var = name(a.variable) if a.variable is not None else None
        applies = [name(u) for u in a.applies]
        grad = worker_gradient(pipe, a)
        accs.append(AccumulatorPlan(
            name=name(a.node), op=g.ops[a.node], sparse=a.sparse, variable=var,
            num_required=next((r for r in a.num_required if r is not None), None), apply_ops=applies,
            take_ops=[name(u) for u in a.takes], update_ops=[name(u) for u in a.updates], grad=grad,
            take=f"{name(a.takes[0])}:0" if a.takes and not a.sparse else None))
        if var is not None and (trainable is None or var in trainable):
            updates.extend(update_plan(g, name(u), var, name(a.node)) for u in a.updates)

    increments = [name(i) for i in tq.global_step_increments]
    idx = state_of(g, m)  # the index detection built, not a second one
    watched_states = {g.index[u.variable] for u in updates} | ({tq.global_step} if tq.global_step is not None else set())
    watch = set(increments) | {u.op for u in updates}
    for a in accs:
        watch.update(a.apply_ops + a.take_ops)
    for s in watched_states:
        watch.update(g.names[w] for w in idx.writers.get(s, ()))
    watch.update(n for n, op in zip(g.names, g.ops, strict=True) if is_optimizer_apply(op))
    per_worker = []
    for e in (pipe.proof.per_worker_updates if pipe.proof is not None else []):
        per_worker.append({k: e.get(k) for k in ("variable", "kind", "op", "op_type", "runs",
                                                  "runs_per_global_step", "hint")})
        watch.add(e["op"])

    variables = {}
    for u in updates:
        for v in u.state.values():
            variables[v] = "resource" if g.ops[g.index[v]] == "VarHandleOp" else "ref"
    gs = name(tq.global_step) if tq.global_step is not None else None
    if gs is not None:
        variables[gs] = "resource" if g.ops[g.index[gs]] == "VarHandleOp" else "ref"
    local_step = name(tq.local_steps[0]) if tq.local_steps else None

    dequeue = name(tq.dequeues[0]) if tq.dequeues else None
    worker_fetches = ([f"{dequeue}:0"] if dequeue else []) + [a.grad for a in accs if a.grad]
    sync_fetches = list(dict.fromkeys([a.take for a in accs if a.take] + [t for u in updates for t in u.fetch.values()]))
    global_init, local_init = init_ops(pipe.model)
    if any(u.kind is None for u in updates):
        notes.append(not_replayed_note(updates))
    return RunPlan(
        workers=workers, steps=steps, worker_job=worker_job, ps_job=ps_job, cluster=cluster,
        train_ops=train_ops, global_step=gs, local_step=local_step, init_ops=global_init,
        local_init_ops=local_init, chief_init_op=name(tq.chief_init_op) if tq.chief_init_op is not None else None,
        local_step_init_ops=[name(i) for i in tq.local_step_init_ops],
        init_tokens_ops=[name(i) for i in tq.init_tokens_ops[:1]], sync_op=sync_op, queue_runner=qr_source,
        token_queue=name(tq.queue), token_dequeue=dequeue, tokens_per_step=tq.tokens_per_step,
        replicas_to_aggregate=m.replicas_to_aggregate, accumulators=accs, updates=updates,
        increments=increments, per_worker_updates=per_worker, watch=sorted(watch), variables=variables,
        feeds=feeds, worker_fetches=worker_fetches, sync_fetches=sync_fetches, timeout_s=timeout_s,
        isolate=isolate, existing_cluster=existing_cluster, seed=seed, fault=fault, cpus_per_task=cpus_per_task,
        notes=notes)


def _queue_runner(pipe, tq, name, mode: str, notes: list[str]) -> tuple[str | None, str | None]:
    """(where the chief queue runner comes from, the op it runs) or (None, None) when there is none."""
    targets = {name(i) for i in (tq.sync_op, tq.sync_enqueue) if i is not None}
    if mode == "none":
        notes.append("--chief-queue-runner none: the chief does not run the sync op")
        return None, None
    for qr in pipe.model.collections.queue_runners:
        ops = [op_of(x) for x in qr.get("enqueue_ops", [])]
        hit = [x for x in ops if x in targets]
        if hit:
            return "queue_runners collection", hit[0]
    if mode == "detected":
        return "detected sync op (--chief-queue-runner detected)", None
    if pipe.rewrite is not None:
        return "placeviz sync pass", None
    # SyncReplicasOptimizer keeps its runner out of the collection (get_chief_queue_runner): the
    # chief starts it through SyncReplicasHook (make_session_run_hook) or Supervisor's
    # start_queue_runners(sess, [chief_queue_runner]), neither of which leaves a trace in the graph.
    notes.append(f"the chief runs the sync op {name(tq.sync_op)} as its queue runner, as SyncReplicasHook "
                 "(make_session_run_hook) or sv.start_queue_runners(sess, [opt.get_chief_queue_runner()]) do "
                 "(--chief-queue-runner none: a chief that never starts it)")
    return "detected sync op (SyncReplicasOptimizer.get_chief_queue_runner)", None
