"""From the pipeline's result to a runnable verify job: cluster shape, per-worker graphs, feeds, plan.

Decisions made here (TF-free):

* **servers**: ``--servers FILE``: the user's, at their addresses; else local ones with the jobs
  and task counts of ``--cluster`` (the placement cluster), or just ps and worker tasks;
* **workers** W: ``--workers``, else the worker tasks of ``--servers``/``--cluster``, else the
  graph's ``total_num_replicas`` as far as the sync machinery tells it (tokens per step), else R;
  with a cluster file they must agree;
* **ps tasks**: the cluster's, else ``--ps-tasks``, else every ps task a node is placed on;
* **graphs**: the placed graph with the devices as the setter (or TF) wrote them, so TF's own
  placer runs on it; worker i gets its copy with the worker device moved to task i
  (:func:`placeviz.verify.plan.worker_graph`);
* **feeds**: every placeholder the worker train op depends on, synthetic (seeded per worker) or
  from ``--feeds FILE.npz``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from placeviz.devices import PyDeviceSpec, parse_full_name
from placeviz.errors import PlacevizError
from placeviz.verify import feeds as feed_data
from placeviz.verify.plan import RunPlan, make_plan, placeholders, worker_graph


@dataclass
class Prepared:
    plan: RunPlan
    graphs: list[bytes]
    feeds: list[dict[str, np.ndarray]]
    unfed: list[str] = field(default_factory=list)
    client_device: str = ""
    cluster_file: str | None = None  # the file the servers' addresses (--servers) or shape (--cluster) come from

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
            fault: str | None) -> Prepared:
    """``servers``: the ClusterSpec of ``--servers`` (the user's running servers), or None for local ones."""
    graph = pipe.graph
    worker_job = PyDeviceSpec.parse(placement_options.setter.worker_device).job or "worker"
    ps_job = PyDeviceSpec.parse(placement_options.setter.ps_device).job or "ps"
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
    if workers < 1:
        raise PlacevizError("verify needs at least one worker")

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
    plan = make_plan(pipe, workers=workers, steps=steps, cluster=cluster, worker_job=worker_job, ps_job=ps_job,
                     timeout_s=timeout, isolate=isolate, existing_cluster=existing, seed=seed, feeds=feed_names,
                     chief_queue_runner=chief_queue_runner, fault=fault,
                     cpus_per_task=placement_options.cpus_per_task)
    gpu = [n for n, d in zip(graph.names, graph.devices, strict=True) if "GPU" in d.upper()]
    if gpu:
        plan.notes.append(f"{len(gpu)} node(s) ask for a GPU ({', '.join(gpu[:3])}{' ...' if len(gpu) > 3 else ''}); "
                          "the servers have CPUs only, so TF soft-places them on their task's CPU")
    own = _worker_variables(pipe, worker_job, plan.local_step)
    if own:
        plan.notes.append(f"{len(own)} variable(s) live on the {worker_job} task itself ({', '.join(own[:3])}"
                          f"{' ...' if len(own) > 3 else ''}): every worker has its own copy and only the chief "
                          "initializes its own (TF1 non-chief workers would wait for them forever)")
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
        name = f"--cluster {source}" if source else "the placement cluster"
        plan.notes.append(f"{name}: placed on that cluster; run on local servers (127.0.0.1, private network "
                          f"namespace) with its jobs and task counts ({shape}); --servers FILE runs on servers you run")
    if unfed and not feeds_file:
        plan.notes.append(f"kept the default value of {len(unfed)} integer/boolean/string input(s) "
                          f"({', '.join(unfed[:3])}{' ...' if len(unfed) > 3 else ''})")
    base = graph.graph_def
    graphs = [worker_graph(base, worker_job, i).SerializeToString() for i in range(workers)]
    from placeviz.pipeline import client_device

    return Prepared(plan=plan, graphs=graphs, feeds=per_worker, unfed=unfed,
                    client_device=client_device(placement_options.placer.master_task) or "", cluster_file=source)


def _worker_variables(pipe, worker_job: str, local_step: str | None) -> list[str]:
    """Global variables placed on the worker job (not the local step, not local variables)."""
    graph, devices = pipe.graph, pipe.devices
    local = set(pipe.model.collections.local_variables) | {local_step}
    out = []
    for i, (name, op) in enumerate(zip(graph.names, graph.ops, strict=True)):
        if op in ("VariableV2", "VarHandleOp") and name not in local:
            parsed = parse_full_name(devices[i])
            if parsed is not None and parsed.job == worker_job:
                out.append(name)
    return out
