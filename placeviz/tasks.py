"""One graph per task: the worker graphs of between-graph replication.

In TF1 between-graph replication every task's client runs the same program with its own
``--task_index`` and builds its own graph: ``replica_device_setter(worker_device=
"/job:worker/task:%d" % task_index)`` puts that task's model on its own task, and code under
``if is_chief:`` (inception's loss averages, the chief hooks of ``MonitoredTrainingSession``,
``SyncReplicasOptimizer``'s init tokens) exists only in the chief's graph. MODEL is the graph of
task 0, the chief; the other tasks' graphs come from, in this order:

* ``--worker-graph I=MODEL`` (repeatable): the graph the program built on task I;
* a builder ``file.py:fn`` whose function takes ``task_index`` (and ``is_chief``): called once
  per task (:func:`placeviz.io.load`);
* nothing: the chief's graph stands for every task (``verify`` moves its worker device to task I
  and leaves out the chief-only state, :mod:`placeviz.verify.prepare`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from placeviz.errors import PlacevizError
from placeviz.io import Model, load

if TYPE_CHECKING:
    from placeviz.pipeline import Options, Pipeline
    from placeviz.placement import PlacementOptions

_OPTION_RE = re.compile(r"^(?P<task>\d+)=(?P<model>.+)$")


@dataclass
class TaskGraphs:
    """The chief's model and the models other worker tasks built themselves."""

    chief: Model
    workers: dict[int, Model] = field(default_factory=dict)  # task index >= 1 -> that task's own model
    sources: dict[int, str] = field(default_factory=dict)  # task index -> "--worker-graph" | "builder"

    def model(self, task: int) -> Model:
        """Task ``task``'s own model, else the chief's (which then stands for it)."""
        return self.workers.get(task, self.chief)


def parse_worker_graphs(values: Iterable[str]) -> dict[int, str]:
    """``("1=w1.meta", "2=w2.meta")`` -> ``{1: "w1.meta", 2: "w2.meta"}``; bad forms raise PlacevizError."""
    out: dict[int, str] = {}
    for value in values:
        m = _OPTION_RE.match(value)
        if m is None:
            raise PlacevizError(f"--worker-graph {value!r}: expected I=MODEL, I the worker task index (1, 2, ...)")
        task = int(m["task"])
        if task == 0:
            raise PlacevizError(f"--worker-graph {value!r}: task 0 is the chief, whose graph is MODEL itself")
        if task in out:
            raise PlacevizError(f"--worker-graph: task {task} is given twice ({out[task]!r} and {m['model']!r})")
        out[task] = m["model"]
    return out


def load_task_graphs(chief: Model, model_spec: str, worker_graphs: dict[int, str], workers: int | None, *,
                     tag: str | None = None, progress: Callable[[str], None] | None = None) -> TaskGraphs:
    """Load every worker task's own graph (see the module docstring).

    ``workers``: the number of worker tasks, when known (a per-task builder is then called for each
    of tasks 1..W-1); a ``--worker-graph`` index outside it is an error. Raises
    :class:`PlacevizError` (one line, before anything runs) for a bad index or a graph that does not
    load.
    """
    say = progress or (lambda _m: None)
    check_workers_range(worker_graphs, workers)
    out = TaskGraphs(chief=chief)
    for task, spec in sorted(worker_graphs.items()):
        say(f"loading worker {task}'s graph {spec} ...")
        out.workers[task] = load(spec, tag=tag, task_index=task)
        out.sources[task] = "--worker-graph"
    if chief.per_task and workers is not None:
        for task in range(1, workers):
            if task not in out.workers:
                say(f"building worker {task}'s graph ({model_spec}, task_index={task}) ...")
                out.workers[task] = load(model_spec, tag=tag, task_index=task)
                out.sources[task] = "builder"
    return out


def cluster_workers(options: PlacementOptions | None) -> int | None:
    """The worker tasks of the ``--cluster`` the user gave (its job of ``--worker-device``), else None."""
    if options is None or options.cluster is None:
        return None
    cluster = options.cluster
    job = options.for_task(0).setter.worker_job
    return cluster.num_tasks(job) if job in cluster.jobs else None


def task_pipelines(chief_model, chief_pipe, model_spec: str, worker_graphs: dict[int, str], options: Options, *,
                   workers: int | None = None,
                   progress: Callable[[str], None] | None = None) -> tuple[dict[int, Pipeline], dict[int, str]]:
    """Every task's pipeline (task 0: ``chief_pipe``, the pipeline of ``chief_model`` as loaded) and
    where each graph came from.

    The other tasks' graphs: ``--worker-graph I=MODEL`` (``worker_graphs``), and a per-task builder
    called for each task when the number of worker tasks is known: ``workers`` (the cluster's),
    else the SyncReplicas total replicas of the chief's graph. Each graph runs the pipeline with
    the command's ``options`` as task I has them (:meth:`placeviz.pipeline.Options.for_task`:
    its worker device, its session's task, a non-chief worker's SyncReplicas graph), without a
    partition (no step of a worker's graph is compared). Raises :class:`PlacevizError` (one line)
    for an index outside the cluster or a graph that does not load.
    """
    from placeviz.pipeline import run_pipeline
    from placeviz.tasks import load_task_graphs

    count = workers
    if count is None and chief_model.per_task and chief_pipe.machinery is not None:
        total = chief_pipe.machinery.total_replicas
        if total:
            # W as the graph tells it, not a cluster: a --worker-graph beyond it is still allowed.
            count = max([total, *(t + 1 for t in worker_graphs)])
    graphs = load_task_graphs(chief_model, model_spec, worker_graphs, count, tag=options.tag, progress=progress)
    pipes = {0: chief_pipe}
    sources = {0: model_spec}
    for t, model in sorted(graphs.workers.items()):
        if progress:
            progress(f"placing worker {t}'s graph ...")
        pipes[t] = run_pipeline(model, dataclasses.replace(options.for_task(t), partition=False))
        sources[t] = worker_graphs.get(t, f"{model_spec} (task_index={t})")
    return pipes, sources


def check_workers_range(worker_graphs: dict[int, str], workers: int | None) -> None:
    """Raise PlacevizError (one line) for a ``--worker-graph`` index outside the cluster's workers."""
    if workers is None:
        return
    bad = sorted(t for t in worker_graphs if t >= workers)
    if bad:
        raise PlacevizError(f"--worker-graph {bad[0]}={worker_graphs[bad[0]]}: the cluster has {workers} worker "
                            f"task(s), 0-{workers - 1}")
