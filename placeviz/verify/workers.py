"""What each worker task runs: its graph, train op, fetches, queue runners (between-graph replication).

In TF1 between-graph replication every worker's client builds its own graph, and the chief's may
hold state the others lack: code under ``if is_chief:`` (inception's loss averages, the chief
hooks) builds variables that only the chief's ``init_op`` initializes. Run on a non-chief worker,
the chief's graph then fails with ``uninitialized value``; TF1 would never run it there (that
worker's ``Supervisor`` waits for ``report_uninitialized_variables`` to come back empty).

So, per worker task (decided here, TF-free):

* a graph of its own (``--worker-graph I=MODEL`` or a builder taking ``task_index``, see
  :mod:`placeviz.tasks`) is placed and analysed like the chief's, and its train op and gradient
  tensors are found in it (accumulators are matched by ``shared_name``, which is what makes them
  one resource across the tasks' graphs);
* otherwise the chief's graph stands for it, its worker device moved to the task
  (:func:`placeviz.verify.plan.worker_graph`), without the **chief-only state**: the global
  variables placed on the worker job (each worker would get a copy on its own task that no op of
  its own initializes) and every op that reads them (:func:`chief_only`). When the worker's train
  op itself needs one of them, the graph cannot stand for the other tasks: one-line error.

Every worker starts the input queue runners of its graph's ``queue_runners`` collection, as
``Supervisor``/``MonitoredTrainingSession`` do on every task (``Supervisor.start_queue_runners``,
``tensorflow/python/training/supervisor.py``; ``QueueRunner.create_threads``); the runner of the
sync op is the chief's only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from placeviz.devices import parse_full_name
from placeviz.errors import PlacevizError
from placeviz.op_kinds import ACCUMULATOR_OPS, QUEUE_OPS, VARIABLE_OPS
from placeviz.sync.reach import Reach
from placeviz.verify.plan import op_of, worker_gradient


@dataclass
class ChiefOnly:
    """The chief's state that non-chief workers' own graphs would not have."""

    variables: list[str] = field(default_factory=list)
    dropped: set[str] = field(default_factory=set)  # the variables and every op that reads them
    shared_writes: list[str] = field(default_factory=list)  # dropped ops that also use shared state


def _is_resource(op: str) -> bool:
    """Ops that create state other ops then use (variables, accumulators, queues, tables)."""
    return op in VARIABLE_OPS or op in ACCUMULATOR_OPS or op in QUEUE_OPS or "HashTable" in op


def chief_only(pipe, worker_job: str, local_step: str | None, targets: list[str]) -> ChiefOnly:
    """Global variables on the worker job (not the local step, not local variables) and their readers.

    ``targets``: what a worker runs (its train op and fetches); ``shared_writes`` are the dropped
    ops among them that also use shared state.

    The readers are the forward closure over data edges and colocation (``loc:@var``: the
    initializer's constant is built with the variable, without an edge from it). A control edge
    from a dropped op is dropped with it: ``with tf.control_dependencies([loss_averages_op])`` then
    waits for nothing, as in the worker's own graph where the op was never built.
    """
    graph, devices = pipe.graph, pipe.devices
    local = set(pipe.model.collections.local_variables) | {local_step}
    out = ChiefOnly()
    seeds = []
    for i, (name, op) in enumerate(zip(graph.names, graph.ops, strict=True)):
        if op in VARIABLE_OPS and name not in local:
            parsed = parse_full_name(devices[i])
            if parsed is not None and parsed.job == worker_job:
                out.variables.append(name)
                seeds.append(i)
    if not seeds:
        return out
    consumers: dict[int, list[int]] = {}
    for i in range(len(graph.names)):
        for src, slot in graph.inputs_of(i):
            if slot >= 0:
                consumers.setdefault(src, []).append(i)
    for i, located in graph.colocated_names.items():
        for name in located:
            if name in graph.index:
                consumers.setdefault(graph.index[name], []).append(i)
    seen = set(seeds)
    stack = list(seeds)
    while stack:
        for c in consumers.get(stack.pop(), ()):
            if c not in seen:
                seen.add(c)
                stack.append(c)
    out.dropped = {graph.names[i] for i in seen}
    # A dropped op the worker runs that also takes shared state (an accumulator apply fed by a
    # gradient that reads a chief-only variable) changes what the other workers do, not only the
    # chief's own state. (The Saver's SaveV2 reads every variable, but no worker step runs it.)
    runs = Reach(graph, [graph.index[t] for t in targets if t in graph.index])
    for i in sorted(seen & set(runs.order)):
        for src, slot in graph.inputs_of(i):
            if slot >= 0 and src not in seen and _is_resource(graph.ops[src]):
                out.shared_writes.append(graph.names[i])
                break
    return out


def without(graph_def, dropped: set[str]):
    """A copy of ``graph_def`` without the ``dropped`` nodes and the control edges from them."""
    from placeviz.protos import GraphDef

    out = GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.name in dropped:
            continue
        new = out.node.add()
        new.CopyFrom(node)
        if any(op_of(x) in dropped for x in node.input):
            kept = [x for x in node.input if op_of(x) not in dropped]
            del new.input[:]
            new.input.extend(kept)
    return out


@dataclass
class WorkerRun:
    """What worker ``task`` runs (JSON-able; ``RunPlan.per_worker``)."""

    task: int
    source: str  # "the chief's graph", or the MODEL that task built (--worker-graph, a per-task builder)
    train_ops: list[str]
    fetches: list[str]  # tensors fetched in each worker run (its own graph's names)
    keys: list[str]  # per fetch: "token", or the chief's gradient tensor it stands for
    queue_runners: list[dict]  # input queue runners this task starts (QueueRunnerDef fields)
    local_init_ops: list[str]
    dropped: int = 0  # chief-only ops left out of the chief's graph for this task


def input_queue_runners(model, sync_ops: set[str]) -> list[dict]:
    """The ``queue_runners`` collection without the chief's sync-op runner, minus dropped queues."""
    return [qr for qr in model.collections.queue_runners if not {op_of(x) for x in qr["enqueue_ops"]} & sync_ops]


def from_chief(plan, task: int, model, sync_ops: set[str], own: ChiefOnly) -> WorkerRun:
    """Worker ``task`` running the chief's graph (moved to its task, chief-only state left out)."""
    dropped = own.dropped if task > 0 else set()
    needed = [op_of(x) for x in plan.train_ops + plan.worker_fetches]
    hit = [n for n in needed if n in dropped] + [n for n in own.shared_writes if task > 0]
    if hit:
        raise PlacevizError(f"the worker train op needs chief-only state ({hit[0]} uses a global variable on the "
                            "worker job that only the chief initializes): give the other workers' graphs with "
                            "--worker-graph I=MODEL or a builder taking task_index")
    runners = [qr for qr in input_queue_runners(model, sync_ops)
               if task == 0 or not ({qr["queue"]} | {op_of(x) for x in qr["enqueue_ops"]}) & dropped]
    keys = ["token" if plan.token_dequeue and f == f"{plan.token_dequeue}:0" else f for f in plan.worker_fetches]
    local = plan.local_init_ops + ([] if task == 0 else plan.local_step_init_ops)
    return WorkerRun(task=task, source="the chief's graph", train_ops=list(plan.train_ops),
                     fetches=list(plan.worker_fetches), keys=keys, queue_runners=runners,
                     local_init_ops=[o for o in local if task == 0 or o not in dropped],
                     dropped=len(dropped))


def from_own_graph(plan, task: int, source: str, pipe, chief_pipe) -> WorkerRun:
    """Worker ``task`` running the graph its own program built (``pipe``: its placed pipeline)."""
    from placeviz.verify.plan import init_ops

    m = pipe.machinery
    tq = m.primary if m is not None else None
    if tq is None or not tq.worker_train_ops:
        raise PlacevizError(f"worker {task}'s graph ({source}) has no SyncReplicas worker train op "
                            "(no token queue with accumulators found)")
    name = m.name
    train_ops = [name(i) for i in tq.worker_train_ops]
    fetches, keys = [], []
    if tq.dequeues:
        fetches.append(f"{name(tq.dequeues[0])}:0")
        keys.append("token")
    chief_grads = {a.shared_name: g for a, g in _grads(chief_pipe) if a.shared_name}
    for a, grad in _grads(pipe):
        if a.shared_name in chief_grads and grad is not None and chief_grads[a.shared_name] is not None:
            fetches.append(grad)
            keys.append(chief_grads[a.shared_name])
    sync_ops = {name(i) for i in (tq.sync_op, tq.sync_enqueue) if i is not None}
    _global, local = init_ops(pipe.model)
    return WorkerRun(task=task, source=source, train_ops=train_ops, fetches=fetches, keys=keys,
                     queue_runners=input_queue_runners(pipe.model, sync_ops),
                     local_init_ops=local + [name(i) for i in tq.local_step_init_ops])


def _grads(pipe):
    """(accumulator, the gradient a worker run feeds it) for the primary token queue's accumulators."""
    m = pipe.machinery
    return [(a, worker_gradient(pipe, a)) for a in m.accumulators if a.queue is None or a.queue == m.primary.queue]
