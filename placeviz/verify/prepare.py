"""From the pipeline's result to a runnable verify job: cluster shape, per-worker graphs, feeds, plan.

Decisions made here (TF-free):

* **servers**: ``--servers FILE``: the user's, at their addresses; else local ones with the jobs
  and task counts of ``--cluster`` (the placement cluster), or just ps and worker tasks;
* **workers** W: ``--workers``, else the worker tasks of ``--servers``/``--cluster``, else the
  graph's ``total_num_replicas`` as far as the sync machinery tells it (tokens per step), else R;
  with a cluster file they must agree;
* **ps tasks**: the cluster's, else ``--ps-tasks``, else every ps task a node is placed on;
* **graphs**: the placed graph with the devices as the setter (or TF) wrote them, so TF's own
  placer runs on it; worker i gets its own graph (``--worker-graph``, a per-task builder) or the
  chief's with the worker device moved to task i (:func:`placeviz.verify.plan.worker_graph`) and
  without the chief-only state (:mod:`placeviz.verify.workers`);
* **feeds**: every placeholder the worker train op depends on, synthetic (seeded per worker) or
  from ``--feeds FILE.npz``;
* **host ops**: the ops of every graph's run that touch the file system or run code
  (:mod:`placeviz.verify.hostops`), for the command to refuse.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from placeviz.devices import parse_full_name
from placeviz.errors import PlacevizError
from placeviz.verify import feeds as feed_data
from placeviz.verify import hostops, modes
from placeviz.verify import workers as workers_mod
from placeviz.verify.plan import RunPlan, make_plan, op_of, placeholders, worker_graph


@dataclass
class Prepared:
    plan: RunPlan
    graphs: list[bytes]
    feeds: list[dict[str, np.ndarray]]
    unfed: list[str] = field(default_factory=list)
    client_device: str = ""
    cluster_file: str | None = None  # the file the servers' addresses (--servers) or shape (--cluster) come from
    # ops the run executes that touch the host (placeviz.verify.hostops), with the MODEL of the graph
    # that holds them (None: the chief's MODEL); refused unless --allow-io
    host_ops: list = field(default_factory=list)

    def describe(self) -> str:
        p = self.plan
        where = f"your servers of {self.cluster_file}" if p.existing_cluster else (
            "local TF servers, one process per task" if p.isolate else "local TF servers in one process")
        if not p.existing_cluster and self.cluster_file:
            where += f" shaped like {self.cluster_file}"
        ps = p.cluster.get(p.ps_job, 0)
        ps = len(ps) if isinstance(ps, list) else ps
        return f"{where}: {ps} ps x {p.workers} workers, {p.steps} steps"


def prepare(pipe, placement_options, *, servers=None, reset_containers: bool = False, workers: int | None,
            steps: int, timeout: float, isolate: bool, feeds_file: str | None, seed: int, chief_queue_runner: str,
            fault: str | None, task_pipes=None, mode: str = "sync", slow_workers: dict | None = None,
            trace: bool = False, loss: str | None = None) -> Prepared:
    """``servers``: the ClusterSpec of ``--servers`` (the user's running servers), or None for local ones.
    ``task_pipes(W)``: worker task -> (source, the placed pipeline of the graph that task built), for
    the W workers decided here (:func:`placeviz.commands.verify.run` loads them). ``mode``,
    ``slow_workers``, ``trace``, ``loss``: see :mod:`placeviz.verify.modes`."""
    graph = pipe.graph
    worker_job = placement_options.setter.worker_job
    ps_job = placement_options.setter.ps_job
    used: dict[str, int] = {}
    for d in set(pipe.devices):
        parsed = parse_full_name(d)
        if parsed is not None and parsed.job:
            used[parsed.job] = max(used.get(parsed.job, 0), (parsed.task or 0) + 1)
    other = sorted(set(used) - {worker_job, ps_job})
    if other:
        raise PlacevizError(f"the graph places nodes on job(s) {', '.join(other)}; verify runs only "
                            f"/job:{ps_job} and /job:{worker_job}")
    existing = servers is not None
    m = pipe.machinery
    given = servers if existing else placement_options.cluster
    source = Path(given.source).name if given is not None and given.source else None
    if given is not None:
        for job in given.jobs:
            if given.task_indices(job) != list(range(given.num_tasks(job))):
                raise PlacevizError(f"{source or 'the cluster'}: verify needs tasks 0..n-1 in every job; "
                                    f"job {job} has tasks {given.task_indices(job)}")
        if worker_job in given.jobs:
            n_workers = given.num_tasks(worker_job)
            if workers is not None and workers != n_workers:
                raise PlacevizError(f"--workers {workers} but {source or 'the cluster file'} has {n_workers} "
                                    f"{worker_job} tasks")
            workers = n_workers
        elif existing:
            raise PlacevizError(f"--servers {source}: no {worker_job} job to run the workers on")
    if existing:
        cluster = {job: [given.task_address(job, t) for t in given.task_indices(job)] for job in given.jobs}
    else:
        if workers is None:
            total = m.total_replicas if m is not None else None
            workers = total or (m.tokens_per_step if m is not None else None) or 2
        ps = max(placement_options.setter.ps_tasks, used.get(ps_job, 0),
                 given.num_tasks(ps_job) if given is not None and ps_job in given.jobs else 0)
        cluster = {job: given.num_tasks(job) for job in given.jobs} if given is not None else {}
        cluster.update({ps_job: ps, worker_job: workers})
    # set: from --workers, the cluster's worker job (--servers has one, else the error above) or derived
    assert workers is not None
    if workers < 1:
        raise PlacevizError("verify needs at least one worker")
    if not existing:
        from placeviz.limits import MAX_LOCAL_TASKS

        local = sum(n if isinstance(n, int) else len(n) for n in cluster.values())
        if local > MAX_LOCAL_TASKS:
            shape = ", ".join(f"{n} {job}" for job, n in cluster.items())
            raise PlacevizError(f"verify would start {local} local TF servers ({shape}); at most {MAX_LOCAL_TASKS} run "
                                "on one machine: lower --workers, or run on your own servers with --servers FILE")

    if mode == "async":
        train_ops = modes.train_ops(pipe)
    else:
        train_ops = [m.name(i) for i in m.primary.worker_train_ops] if m is not None and m.primary else []
    names = placeholders(graph, train_ops)
    unfed: list[str] = []
    if feeds_file:
        per_worker, unfed = feed_data.load_npz(feeds_file, names, workers)
    else:
        per_worker = []
        for i in range(workers):
            f, unfed = feed_data.synthesize(graph, names, i, seed)
            per_worker.append(f)
    required = [n for n in unfed if graph.ops[graph.index[n]] != "PlaceholderWithDefault"]
    if required:
        raise PlacevizError(f"placeholder(s) {', '.join(required)} need values: give them with --feeds FILE.npz")
    feed_names = sorted({k for f in per_worker for k in f})
    common = dict(workers=workers, steps=steps, cluster=cluster, worker_job=worker_job, ps_job=ps_job,
                  timeout_s=timeout, isolate=isolate, existing_cluster=existing, seed=seed, feeds=feed_names,
                  fault=fault, cpus_per_task=placement_options.cpus_per_task)
    if mode == "async":
        plan = modes.make_async_plan(pipe, **common)
    else:
        plan = make_plan(pipe, chief_queue_runner=chief_queue_runner, **common)
        plan.mode, plan.delay_targets, plan.loss = mode, modes.delay_targets_sync(plan), modes.loss_tensor(graph)
        if mode == "barrier":
            barrier(plan)
    slow_workers = slow_workers or {}
    modes.check_slow_workers(slow_workers, workers)
    plan.slow_workers = {str(i): s for i, s in sorted(slow_workers.items())}
    if slow_workers:
        plan.notes.append("slow worker(s): " + ", ".join(f"worker {i} +{s:g} s" for i, s in sorted(slow_workers.items()))
                          + " before its gradients reach the ps (a SleepDataset's IteratorGetNext on its device, a "
                          "control input of " + ("its update ops" if mode == "async" else "its accumulator applies")
                          + "; the file is not changed)")
    if loss is not None:
        if op_of(loss) not in graph.index:
            raise PlacevizError(f"--loss {loss}: no such tensor in the graph")
        plan.loss = loss if ":" in loss else f"{loss}:0"
    plan.trace = trace
    gpu = [n for n, d in zip(graph.names, graph.devices, strict=True) if "GPU" in d.upper()]
    if gpu:
        plan.notes.append(f"{len(gpu)} node(s) ask for a GPU ({', '.join(gpu[:3])}{' ...' if len(gpu) > 3 else ''}); "
                          "the servers have CPUs only, so TF soft-places them on their task's CPU")
    task_pipes = task_pipes(workers) if task_pipes is not None else {}
    sync_ops = {op_of(x) for x in (plan.sync_op, m.name(m.primary.sync_enqueue) if m.primary.sync_enqueue is not None
                                   else None) if x} if mode != "async" else set()
    own = workers_mod.chief_only(pipe, worker_job, plan.local_step,
                                 plan.train_ops + [op_of(f) for f in plan.worker_fetches])
    plan.chief_only = own.variables
    shared = [t for t in range(1, workers) if t not in task_pipes]
    if own.variables and shared:
        plan.notes.append(f"{len(own.variables)} chief-only variable(s) ({', '.join(own.variables[:3])}"
                          f"{' ...' if len(own.variables) > 3 else ''}) live on the {worker_job} task and only the "
                          f"chief's init op initializes them: as in a between-graph program that builds them only if "
                          f"is_chief, worker(s) {', '.join(map(str, shared))} run the chief's graph without them and "
                          f"the {len(own.dropped) - len(own.variables)} op(s) that read them (give each worker's own "
                          "graph with --worker-graph I=MODEL)")
    runs = []
    for t in range(workers):
        if t in task_pipes:
            task_source, tpipe = task_pipes[t]
            runs.append(workers_mod.from_own_graph(plan, t, task_source, tpipe, pipe))
        else:
            runs.append(workers_mod.from_chief(plan, t, pipe.model, sync_ops, own))
    plan.per_worker = [dataclasses.asdict(r) for r in runs]
    for e in plan.per_worker_updates:  # which workers' graphs hold each per-worker update
        e["workers"] = [t for t in range(workers)
                        if (e["op"] in task_pipes[t][1].graph.index if t in task_pipes
                            else t == 0 or e["op"] not in own.dropped)]
    started = sum(len(r.queue_runners) for r in runs)
    if started:
        queues = sorted({q["queue"] for r in runs for q in r.queue_runners})
        plan.notes.append(f"input pipeline: each worker starts its graph's queue runners ({', '.join(queues[:3])}"
                          f"{' ...' if len(queues) > 3 else ''}), as Supervisor/MonitoredTrainingSession do")
    plan.reset_containers = reset_containers
    if existing and reset_containers:
        plan.notes.append("--reset-containers: the servers' resource containers are reset first (Session.reset): "
                          "variables, queues and accumulators on them are lost")
    if existing:
        plan.notes.append("at the end of its run verify closes the token queue on your servers (as TF's queue "
                          "runner does at stop) and leaves gradients in their accumulators (late ones, the "
                          "stale-gradient probe's), so a second run on them needs --reset-containers")
    elif given is not None:
        shape = ", ".join(f"{job} x {n}" for job, n in cluster.items())
        name = f"--cluster {source}: placed on that cluster" if source else "placed on the given cluster"
        plan.notes.append(f"{name}; run on local servers (127.0.0.1, private network "
                          f"namespace) with its jobs and task counts ({shape}); --servers FILE runs on servers you run")
    if unfed and not feeds_file:
        plan.notes.append(f"kept the default value of {len(unfed)} integer/boolean/string input(s) "
                          f"({', '.join(unfed[:3])}{' ...' if len(unfed) > 3 else ''})")
    chief_targets, own_targets = hostops.run_targets(plan)
    # A tensor cuts the chief's graph's fed runs only if every worker running that graph (and
    # worker 0, whose feeds the loss and the probe use) feeds it.
    chief_fed = set.intersection(*(set(per_worker[t]) for t in range(workers) if t == 0 or t not in task_pipes))
    host_ops = [(None, h) for h in hostops.find(graph, chief_targets, feeds=sorted(chief_fed))]
    for t, targets in sorted(own_targets.items()):
        host_ops += [(task_pipes[t][0], h) for h in hostops.find(task_pipes[t][1].graph, targets,
                                                                 feeds=sorted(per_worker[t]))]
    base = graph.graph_def
    non_chief = workers_mod.without(base, own.dropped) if own.dropped and shared else base
    graphs = []
    for i in range(workers):
        if i in task_pipes:
            own_graph = task_pipes[i][1].graph.graph_def
        else:
            own_graph = base if i == 0 else non_chief
        graphs.append(worker_graph(own_graph, worker_job, i).SerializeToString())

    return Prepared(plan=plan, graphs=graphs, feeds=per_worker, unfed=unfed,
                    client_device=placement_options.placer.client_device or "", cluster_file=source,
                    host_ops=host_ops)



def barrier(plan: RunPlan) -> None:
    """``--mode barrier``: the SyncReplicas graph with R = W whose chief puts no initial tokens in the
    token queue (``get_init_tokens_op(num_tokens=0)``, sync_replicas_optimizer.py). Every worker's run
    then ends by waiting for a token of the step its gradient completes; with R = W no step
    completes without every worker's gradient, so each worker is already waiting when the sync op
    enqueues the step's W tokens and gets exactly one: one gradient per worker per step, at the
    slowest worker's pace. With TF's default R initial tokens a fast worker takes a second token of
    the first step instead, and from then on may take a slow worker's."""
    r, w = plan.replicas_to_aggregate, plan.workers
    if r != w:
        raise PlacevizError(f"--mode barrier needs R = W (one gradient of every worker per step); the graph "
                            f"aggregates R={r} with W={w} workers")
    skipped = ", ".join(plan.init_tokens_ops) or "none"
    plan.init_tokens_ops = []
    plan.notes.append(f"barrier: the chief runs no init tokens op ({skipped} skipped, as get_init_tokens_op("
                      f"num_tokens=0)): each worker waits for the token of the step its gradient completes, so every "
                      f"step averages exactly one gradient of each of the {w} workers")
