"""The training modes verify runs, decided statically (no TensorFlow): async, sync, barrier.

* ``sync`` (the default): the SyncReplicas graph (the user's, or placeviz's sync pass of a plain
  one), its chief running the sync op once per global step (:func:`placeviz.verify.plan.make_plan`).
* ``async``: the plain training graph as between-graph asynchronous training runs it: W workers,
  each looping on the train op in its own session, every run applying its own gradients to the
  shared variables on the ps tasks (``tf.compat.v1.train.Optimizer.apply_gradients`` without
  ``SyncReplicasOptimizer``; tensorflow/python/training/optimizer.py). verify hands out exactly K
  runs in all (one global-step increment each) and records, from each run's step stats, when
  every variable was read on its ps task and when each update was applied there, to measure
  staleness (:mod:`placeviz.verify.staleness`).
* ``barrier``: the SyncReplicas graph with R = W, and verify's driver letting every worker start its
  run n only once global step n is done: each worker gives exactly one gradient to each step, the
  "fully synchronous" training of in-graph replication or an all-reduce, paced by the slowest
  worker. (Without the driver, SyncReplicasOptimizer's token queue is first come, first served:
  a fast worker may take a slow one's token.)

``--slow-worker I=SECONDS`` slows worker I in every mode without touching the user's file: in the
graph verify imports for that worker, an ``IteratorGetNext`` of a ``SleepDataset``
(tensorflow/core/kernels/data/experimental/sleep_dataset_op.cc: sleeps that long before each
element) on the worker's device becomes a control input of the ops that hand the worker's update to
the ps (:attr:`RunPlan.delay_targets`: the optimizer's update ops in async, the accumulators'
``*ApplyGradient`` in sync and barrier). The worker reads the parameters when its step starts and
its gradient reaches the ps at least SECONDS later: a slow machine, as the ps sees it.
"""

from __future__ import annotations

from placeviz.errors import PlacevizError
from placeviz.op_kinds import SCATTER_UPDATE_OPS
from placeviz.verify.plan import RunPlan, UpdatePlan, init_ops, tensor, update_plan, value_variable

MODES = ("sync", "async", "barrier")
_READ_OPS = frozenset({"Identity", "ReadVariableOp", "Snapshot", "Gather", "GatherV2", "ResourceGather",
                       "ResourceGatherNd", "GatherNd"})


def parse_slow_workers(values: tuple[str, ...] | list[str], workers: int | None = None) -> dict[int, float]:
    """``I=SECONDS`` pairs (``--slow-worker``, repeatable) -> {worker: seconds}; one-line errors."""
    out: dict[int, float] = {}
    for text in values:
        task, sep, seconds = text.partition("=")
        try:
            i, s = int(task), float(seconds)
        except ValueError:
            raise PlacevizError(f"--slow-worker {text!r}: expected I=SECONDS (e.g. 2=0.2)") from None
        if not sep or i < 0:
            raise PlacevizError(f"--slow-worker {text!r}: expected I=SECONDS with a worker index I >= 0")
        if not 0 <= s <= 3600 or s != s:
            raise PlacevizError(f"--slow-worker {text!r}: the delay must be between 0 and 3600 seconds")
        if i in out:
            raise PlacevizError(f"--slow-worker: worker {i} is given twice")
        out[i] = s
    if workers is not None:
        check_slow_workers(out, workers)
    return out


def check_slow_workers(slow: dict[int, float], workers: int) -> None:
    bad = sorted(i for i in slow if i >= workers)
    if bad:
        raise PlacevizError(f"--slow-worker {bad[0]}=...: there is no worker {bad[0]} (W={workers}: workers "
                            f"0..{workers - 1})")


def train_ops(pipe) -> list[str]:
    """The plain graph's train op: the ``train_op`` collection, else the optimizer's global-step
    increment (``apply_gradients(global_step=...)`` returns ``assign_add(global_step, 1, name=<opt>)``
    with the updates ``<opt>/update_<var>/...`` as control inputs: optimizer.py ``apply_gradients``)."""
    g = pipe.graph
    listed = [t for t in pipe.model.collections.train_ops if t in g.index]
    if listed:
        return listed
    scopes = {name.partition("/update_")[0] for name in g.names if "/update_" in name}
    incs = [n for n, op in zip(g.names, g.ops, strict=True) if op in ("AssignAdd", "AssignAddVariableOp")
            and n in scopes]
    if len(incs) == 1:
        return incs
    raise PlacevizError("--mode async: cannot tell the train op (no train_op collection, and "
                        f"{'no' if not incs else len(incs)} optimizer increment(s) of a global step next to "
                        "<optimizer>/update_<variable>/ ops)")


def make_async_plan(pipe, *, workers: int, steps: int, cluster: dict, worker_job: str, ps_job: str,
                    timeout_s: float, isolate: bool, existing_cluster: bool, seed: int, feeds: list[str],
                    fault: str | None = None, cpus_per_task: int = 1) -> RunPlan:
    """The run of a plain (asynchronous) training graph: K worker runs in all, no chief sync op."""
    from placeviz.sync.detect import state_of
    from placeviz.sync.reach import Reach

    if pipe.machinery is not None and pipe.machinery.primary is not None:
        q = pipe.machinery.name(pipe.machinery.primary.queue)
        raise PlacevizError(f"--mode async runs a plain training graph, but this one already has SyncReplicas "
                            f"machinery (token queue {q}): run it without --mode async, or give its plain build")
    g = pipe.graph
    targets = train_ops(pipe)
    closure = set(Reach(g, [g.index[t] for t in targets]).order)
    idx = state_of(g, pipe.machinery)  # detection's, if it found accumulators
    updates: list[UpdatePlan] = []
    other_writes: dict[str, list[str]] = {}
    for v in _trained_variables(pipe, idx, closure):
        for w in idx.writers.get(v, ()):
            if w in closure and (v, 0) in idx.writes.get(w, ()):
                # an optimizer builds each variable's update under <opt>/update_<var>/ (optimizer.py
                # apply_gradients: name_scope("update_" + var.op.name)); any other write is the program's
                if "/update_" in g.names[w]:
                    updates.append(update_plan(g, g.names[w], g.names[v], None))
                else:
                    other_writes.setdefault(g.names[v], []).append(g.names[w])
    if not updates:
        raise PlacevizError(f"--mode async: the train op {targets[0]} runs no optimizer update "
                            "(Apply*/SparseApply*/Scatter* of a variable)")
    gs = _global_step(pipe, closure)
    variables: dict[str, str] = {}
    for u in updates:
        for name in u.state.values():
            variables[name] = "resource" if g.ops[g.index[name]] == "VarHandleOp" else "ref"
    if gs is not None:
        variables[gs] = "resource" if g.ops[g.index[gs]] == "VarHandleOp" else "ref"
    update_ops = {u.op for u in updates}
    reads = {u.variable: _reads(g, u.variable, update_ops, closure) for u in updates}
    # Adam's beta powers: advanced once per run by their own Assign (adam.py _finish); the replay
    # gives each update the power its run read (plan.powers: the writers, timed like the updates)
    powers: dict[str, list[str]] = {}
    for u in updates:
        for role in ("beta1_power", "beta2_power"):
            power = u.state.get(role)
            if power is not None and power not in powers:
                powers[power] = sorted(g.names[w] for w in idx.writers.get(g.index[power], ()) if w in closure)
                reads[power] = _reads(g, power, set(powers[power]), closure)
    fetches = list(dict.fromkeys(t for u in updates for t in u.fetch.values()))
    loss = loss_tensor(g)
    global_init, local_init = init_ops(pipe.model)
    incs = [g.names[i] for i in sorted(closure) if g.ops[i] in ("AssignAdd", "AssignAddVariableOp") and gs is not None
            and value_variable(g, next(x for x in g.node_def(i).input if not x.startswith("^"))) == gs]
    watch = sorted(update_ops | set(incs) | {w for ws in powers.values() for w in ws})
    plan = RunPlan(
        workers=workers, steps=steps, worker_job=worker_job, ps_job=ps_job, cluster=cluster, train_ops=targets,
        global_step=gs, local_step=None, init_ops=global_init, local_init_ops=local_init, chief_init_op=None,
        local_step_init_ops=[], init_tokens_ops=[], sync_op=None, queue_runner=None, token_queue=None,
        token_dequeue=None, tokens_per_step=None, replicas_to_aggregate=None, accumulators=[], updates=updates,
        increments=incs, per_worker_updates=[], watch=watch, variables=variables, feeds=feeds,
        worker_fetches=fetches, sync_fetches=[], timeout_s=timeout_s, isolate=isolate,
        existing_cluster=existing_cluster, seed=seed, fault=fault, cpus_per_task=cpus_per_task, mode="async",
        reads=reads, delay_targets=sorted(update_ops), loss=loss, powers=powers, other_writes=other_writes)
    plan.notes.append(f"async: {workers} workers loop on {targets[0]} until {steps} runs in all are done; each run "
                      f"applies its own gradients ({len(updates)} update op(s)), no aggregation")
    return plan


def _trained_variables(pipe, idx, closure: set[int]) -> list[int]:
    """The variables the train step trains: the ``trainable_variables`` collection's, else those an
    optimizer kernel in the step writes as its variable (input 0), minus optimizer slots (written
    at another input of an ``Apply*``, or named ``<variable>/<slot>``: slot_creator.py makes slots
    under the primary variable's name)."""
    from placeviz.sync.detect import is_optimizer_apply

    g = pipe.graph
    trainable = set(pipe.model.collections.trainable_variables)
    if trainable:
        return [g.index[v] for v in sorted(trainable) if v in g.index and idx.is_state(g.index[v])]
    primary: set[int] = set()
    slots: set[int] = set()
    for w in closure:
        if not (is_optimizer_apply(g.ops[w]) or g.ops[w] in SCATTER_UPDATE_OPS):
            continue
        for state, pos in idx.writes.get(w, ()):
            (primary if pos == 0 else slots).add(state)
    names = set(g.names[v] for v in primary | slots)
    return sorted(v for v in primary - slots if g.names[v].rsplit("/", 1)[0] not in names)


def _global_step(pipe, closure: set[int]) -> str | None:
    """The variable the optimizer's increment in the train step adds 1 to: the ``AssignAdd`` named
    like its ``<opt>/update_<var>/`` scope (optimizer.py ``apply_gradients``:
    ``state_ops.assign_add(global_step, 1, name=name)``), else the one of the ``global_step``
    collection / node."""
    g = pipe.graph
    scopes = {name.partition("/update_")[0] for name in g.names if "/update_" in name}
    found = []
    for i in sorted(closure):
        if g.ops[i] in ("AssignAdd", "AssignAddVariableOp"):
            data = [x for x in g.node_def(i).input if not x.startswith("^")]
            var = value_variable(g, data[0]) if data else None
            if var is not None:
                found.append((g.names[i] in scopes, var))
    named = [v for by_optimizer, v in found if by_optimizer]
    if named:
        return named[0]
    return next((v for _b, v in found if v.rsplit("/", 1)[-1] == "global_step"), None)


def _reads(g, variable: str, update_ops: set[str], closure) -> list[str]:
    """The ops of a train step that read ``variable`` for the forward pass: its consumers (through
    identities of a ref variable) that run in the step and are not its updates. For a ref variable
    ``<v>/read`` (an ``Identity`` on the variable's device: variables.py ``_build_initializer_expr``
    ... ``array_ops.identity``); for a resource one, ``ReadVariableOp``/``ResourceGather``, which
    TF's placer colocates with the handle (tensorflow/core/common_runtime/colocation_graph.cc
    ``ColocateResourceOrRefEdge``). Timed on the ps task where the value leaves for the worker."""
    start = g.index[variable]
    out = []
    for c, slot in g.consumers_of(start):
        if slot < 0 or c not in closure or g.names[c] in update_ops:
            continue
        if g.ops[c] in _READ_OPS:
            out.append(g.names[c])
    return sorted(set(out))


def loss_tensor(g) -> str | None:
    """The scalar the gradients were taken of, from the default ``grad_ys`` TF builds under the
    ``gradients`` name scope, ``grad_ys_0 = fill(shape(y), 1)`` (tensorflow/python/ops/
    gradients_util.py ``_DefaultGradYs``): input 0 of ``gradients/Shape`` when the shape is
    computed, else (a static shape folds ``Shape`` into a ``Const``) the op whose gradient function
    consumes ``grad_ys_0``: gradient ops are built under ``name_scope(op.name + "_grad")``
    (gradients_util.py ``_GradientsHelper``). None when it cannot be found."""
    shape = g.index.get("gradients/Shape")
    if shape is not None and g.ops[shape] == "Shape":
        data = [x for x in g.node_def(shape).input if not x.startswith("^")]
        if data:
            return tensor(data[0])
    seed = g.index.get("gradients/grad_ys_0")
    if seed is None:
        return None
    for c, slot in g.consumers_of(seed):
        name = g.names[c]
        if slot >= 0 and name.startswith("gradients/") and "_grad/" in name:
            y = name[len("gradients/"): name.index("_grad/")]
            if y in g.index:
                return f"{y}:0"
    return None


def delay_targets_sync(plan: RunPlan) -> list[str]:
    """Where a slow worker's delay goes in a SyncReplicas graph: before its accumulator applies."""
    return sorted({a for acc in plan.accumulators for a in acc.apply_ops})

