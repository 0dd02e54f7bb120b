"""Clusters as ``tf.train.ClusterSpec`` holds them, from dicts, JSON cluster files and TF_CONFIG.

Mirrors ``ClusterSpec`` of ``tensorflow/python/training/server_lib.py``: jobs in the order given,
each a dense list of addresses or a sparse mapping from int32 task index to address (string keys
go through ``int()`` as in TF, which JSON files need). A cluster file is either such a mapping or
a TF_CONFIG document, whose ``cluster`` and ``task`` keys are what
``tensorflow/python/distribute/cluster_resolver/tfconfig_cluster_resolver.py`` reads.

Bounds (:mod:`placeviz.limits`): TF accepts any int32 task index and any device count; placeviz
allocates per task and device, so :meth:`ClusterSpec.from_ps_tasks`, cluster files and device
sets (:class:`~placeviz.devices.device_set.DeviceSet`, through :func:`check_cluster_bounds`) are
checked against documented bounds (10,000 tasks per job, 1,024 devices per task, 100,000 devices
in a cluster) before anything is built. :class:`ClusterSpec` itself stays TF's (sparse int32
indices).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placeviz.errors import PlacevizError
from placeviz.limits import (
    MAX_CLUSTER_DEVICES,
    MAX_CLUSTER_FILE_BYTES,
    MAX_CLUSTER_TASKS,
    MAX_DEVICES_PER_TASK,
    MAX_TASKS_PER_JOB,
    LimitError,
    check_count,
    read_regular_file,
)

WORKER_JOBS = frozenset({"worker", "chief", "master"})
"""Jobs whose tasks run replicas of the model: TF1's ``worker``; ``chief`` and ``master`` in
TF_CONFIG (``tfconfig_cluster_resolver.py``). Read by the rules, the graphs' agreement check and
the views' colours."""


class ClusterError(PlacevizError, ValueError):
    """An unusable cluster description; names its source (file) and the problem, on one line."""

    def __init__(self, problem: str, source: str | None = None):
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}" if source else problem)


_INT32 = (-(1 << 31), (1 << 31) - 1)
_TF_CONFIG_KEYS = frozenset({"cluster", "task", "environment", "rpc_layer"})


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """The task a TF_CONFIG document names: ``{"task": {"type": "worker", "index": 0}}``."""

    type: str
    index: int

    def device(self) -> str:
        """``/job:TYPE/task:INDEX``."""
        return f"/job:{self.type}/task:{self.index}"


def _task_index(value: Any, job: str, source: str | None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ClusterError(f"job {job!r}: task index {value!r} is not an integer", source)
    try:
        index = int(value)  # TF: int(i) for the keys of a sparse job
    except ValueError:
        raise ClusterError(f"job {job!r}: task index {value!r} is not an integer", source) from None
    if not _INT32[0] <= index <= _INT32[1]:
        raise ClusterError(f"job {job!r}: task index {index} does not fit in an int32", source)
    return index


def _address(value: Any, job: str, index: int, source: str | None) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise ClusterError(f"job {job!r}, task {index}: address is not UTF-8", source) from None
    if not isinstance(value, str):
        raise ClusterError(f"job {job!r}, task {index}: address {value!r} is not a string", source)
    return value


class ClusterSpec:
    """``tf.train.ClusterSpec``: jobs (in the order given) -> {task index -> address}.

    A job is a list of addresses (task i = position i) or a sparse mapping from task index to
    address (``{"ps": {0: "a:1", 5: "b:1"}}``; string keys are converted with ``int()`` as TF
    does, which is what JSON files need). ``num_tasks`` counts the tasks; ``task_indices`` lists
    them sorted. Job names are kept as given, as in TF; :class:`DeviceSet` rejects names the C++
    runtime cannot put in a device name.
    """

    __slots__ = ("_jobs", "source")

    def __init__(self, jobs: Mapping[str, Mapping[int, str]] | None = None, source: str | None = None):
        self._jobs: dict[str, dict[int, str]] = {j: dict(t) for j, t in (jobs or {}).items()}
        self.source = source

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, cluster: Mapping[str, Any], source: str | None = None) -> ClusterSpec:
        """Mirror ``tf.train.ClusterSpec(dict)``: lists/tuples or sparse dicts of addresses."""
        if isinstance(cluster, ClusterSpec):
            return cls(cluster._jobs, source or cluster.source)
        if not isinstance(cluster, Mapping):
            raise ClusterError(f"a cluster must map job names to lists of addresses, not "
                               f"{type(cluster).__name__}", source)
        jobs: dict[str, dict[int, str]] = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str):
                raise ClusterError(f"job name {job!r} is not a string", source)
            if isinstance(tasks, (list, tuple)):
                jobs[job] = {i: _address(a, job, i, source) for i, a in enumerate(tasks)}
            elif isinstance(tasks, Mapping):
                job_tasks: dict[int, str] = {}
                for key, a in tasks.items():
                    index = _task_index(key, job, source)
                    job_tasks[index] = _address(a, job, index, source)
                jobs[job] = job_tasks
            else:
                raise ClusterError(f"the tasks of job {job!r} must be a list of addresses or a mapping "
                                   f"from task index to address, not {type(tasks).__name__}", source)
        return cls(jobs, source)

    @classmethod
    def from_json_file(cls, path: str | Path) -> tuple[ClusterSpec, TaskSpec | None]:
        """Read a cluster file: ``{"ps": [...], "worker": [...]}`` or a TF_CONFIG document.

        A TF_CONFIG document (``{"cluster": {...}, "task": {"type": "worker", "index": 0}}``,
        keys among cluster/task/environment/rpc_layer) gives its cluster and the :class:`TaskSpec`
        it names (None without ``"task"``); a plain cluster gives ``(cluster, None)``. Raises
        :class:`ClusterError` naming the file: unreadable file, bad JSON, no jobs, non-integer
        task index, a task whose type is not a job of the cluster or whose index is not one of
        its tasks...
        """
        source = str(path)
        try:
            # A regular file of bounded size only: not /dev/zero, a FIFO, or a 2 GB JSON array.
            text = read_regular_file(path, source, MAX_CLUSTER_FILE_BYTES, what="cluster", option=None).decode("utf-8")
        except PlacevizError as e:
            problem = getattr(e, "problem", None) or str(e)
            raise ClusterError(problem.replace("cannot read:", "cannot read the cluster file:", 1), source) from None
        except UnicodeDecodeError:
            raise ClusterError("the cluster file is not UTF-8 text", source) from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ClusterError(f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}", source) from None
        return cls.from_document(doc, source)

    @classmethod
    def from_document(cls, doc: Any, source: str | None = None) -> tuple[ClusterSpec, TaskSpec | None]:
        """:meth:`from_json_file` on an already decoded JSON value (e.g. ``$TF_CONFIG``)."""
        if not isinstance(doc, dict):
            raise ClusterError(f"expected a JSON object (job -> addresses, or TF_CONFIG), "
                               f"got {type(doc).__name__}", source)
        task = None
        if _looks_like_tf_config(doc):
            cluster_doc = doc["cluster"]
            if not isinstance(cluster_doc, dict):
                raise ClusterError("TF_CONFIG 'cluster' must be an object mapping job names to "
                                   "addresses", source)
            spec = cls.from_dict(cluster_doc, source)
            if "task" in doc:
                task = _tf_config_task(doc["task"], spec, source)
        else:
            spec = cls.from_dict(doc, source)
        if not spec.jobs:
            raise ClusterError("the cluster defines no jobs", source)
        return spec, task

    @classmethod
    def from_ps_tasks(cls, ps_tasks: int, workers: int = 1) -> ClusterSpec:
        """The cluster ``--ps-tasks N`` implies: job ``ps`` with N tasks, job ``worker`` with ``workers``.

        Addresses are placeholders (``ps0:2222``, ``worker0:2222``...), as in TF's own tests.
        """
        if isinstance(ps_tasks, bool) or not isinstance(ps_tasks, int) or ps_tasks < 1:
            raise ClusterError(f"the number of ps tasks must be a positive integer, got {ps_tasks!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ClusterError(f"the number of workers must be a positive integer, got {workers!r}")
        check_count(ps_tasks, MAX_TASKS_PER_JOB, "the number of ps tasks")
        check_count(workers, MAX_TASKS_PER_JOB, "the number of workers")
        return cls({"ps": {i: f"ps{i}:2222" for i in range(ps_tasks)},
                    "worker": {i: f"worker{i}:2222" for i in range(workers)}}, f"--ps-tasks {ps_tasks}")

    # -- queries -----------------------------------------------------------------------------

    @property
    def jobs(self) -> list[str]:
        """Job names, in the order given (TF's ``ClusterSpec.jobs``)."""
        return list(self._jobs)

    def _job(self, job: str) -> dict[int, str]:
        try:
            return self._jobs[job]
        except KeyError:
            known = ", ".join(self._jobs) or "none"
            raise ClusterError(f"no job {job!r} in the cluster (jobs: {known})", self.source) from None

    def num_tasks(self, job: str) -> int:
        """Number of tasks of ``job`` (a sparse job counts its entries); ClusterError if missing."""
        return len(self._job(job))

    def task_indices(self, job: str) -> list[int]:
        """Sorted task indices of ``job``; ClusterError if missing."""
        return sorted(self._job(job))

    def task_address(self, job: str, index: int) -> str:
        """Address of one task; ClusterError if the job or task is missing."""
        tasks = self._job(job)
        try:
            return tasks[index]
        except KeyError:
            raise ClusterError(f"no task {index!r} in job {job!r}", self.source) from None

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """``ClusterSpec.as_dict()``: a list for a dense job, a dict for a sparse one, {} if empty."""
        out: dict[str, list[str] | dict[int, str]] = {}
        for job, tasks in self._jobs.items():
            indices = sorted(tasks)
            if not indices:
                out[job] = {}
            elif max(indices) + 1 == len(indices):
                out[job] = [tasks[i] for i in indices]
            else:
                out[job] = {i: tasks[i] for i in indices}
        return out

    def __bool__(self) -> bool:
        return bool(self._jobs)

    def __contains__(self, job: object) -> bool:
        return job in self._jobs

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __hash__(self) -> int:
        return hash(tuple((j, tuple(sorted(t.items()))) for j, t in self._jobs.items()))

    def __repr__(self) -> str:
        items = ", ".join(f"{j!r}: {v!r}" for j, v in sorted(self.as_dict().items()))
        return "ClusterSpec({" + items + "})"


def check_cluster_bounds(cluster: ClusterSpec, cpus_per_task: int = 1, gpus_per_worker: int = 0,
                         gpu_jobs: Iterable[str] = ("worker",)) -> None:
    """:class:`LimitError` (naming the bound and the cluster's source) for a cluster beyond
    placeviz's bounds (:mod:`placeviz.limits`): a task index of 10,000 or more, more than 10,000
    tasks in a job or 100,000 in all, more than 1,024 CPUs or GPUs per task, or a device set of
    more than 100,000 devices. Counts only: nothing is allocated before the check.
    """
    source = cluster.source
    check_count(cpus_per_task, MAX_DEVICES_PER_TASK, "the number of CPUs per task", source)
    check_count(gpus_per_worker, MAX_DEVICES_PER_TASK, "the number of GPUs per worker", source)
    total = devices = 0
    gpu_jobs = frozenset(gpu_jobs)
    for job, tasks in cluster._jobs.items():
        check_count(len(tasks), MAX_TASKS_PER_JOB, f"the number of tasks of job {job!r}", source)
        top = max(tasks, default=0)
        if top >= MAX_TASKS_PER_JOB:
            raise LimitError(f"{source + ': ' if source else ''}job {job!r} has task {top}, beyond placeviz's "
                             f"bound of {MAX_TASKS_PER_JOB:,} tasks per job (task indices 0-{MAX_TASKS_PER_JOB - 1})")
        total += len(tasks)
        devices += len(tasks) * (cpus_per_task + (gpus_per_worker if job in gpu_jobs else 0))
    check_count(total, MAX_CLUSTER_TASKS, "the number of tasks in the cluster", source)
    check_count(devices, MAX_CLUSTER_DEVICES, "the number of devices in the cluster (tasks x devices per task)",
                source)


def _looks_like_tf_config(doc: dict) -> bool:
    cluster = doc.get("cluster")
    if not isinstance(cluster, dict) or not set(doc) <= _TF_CONFIG_KEYS:
        return False
    # A plain cluster with a sparse job named "cluster" maps indices to address strings.
    return not cluster or all(isinstance(v, (list, dict)) for v in cluster.values())


def _tf_config_task(task: Any, spec: ClusterSpec, source: str | None) -> TaskSpec | None:
    if task is None or task == {}:
        return None
    if not isinstance(task, dict):
        raise ClusterError("TF_CONFIG 'task' must be an object with 'type' and 'index'", source)
    ttype = task.get("type")
    if not isinstance(ttype, str) or not ttype:
        raise ClusterError("TF_CONFIG 'task' has no 'type' (the job name)", source)
    if ttype not in spec:
        raise ClusterError(f"TF_CONFIG task type {ttype!r} is not a job of the cluster "
                           f"(jobs: {', '.join(spec.jobs)})", source)
    index = _task_index(task.get("index", 0), ttype, source)
    if index not in spec.task_indices(ttype):
        raise ClusterError(f"TF_CONFIG task index {index} is not a task of job {ttype!r} "
                           f"(tasks: {', '.join(map(str, spec.task_indices(ttype)))})", source)
    return TaskSpec(ttype, index)
