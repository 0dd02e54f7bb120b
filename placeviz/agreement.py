"""Do the workers agree? The per-task graphs of between-graph replication, compared.

In TF1 between-graph replication every task's client builds its own graph
(:mod:`placeviz.tasks`), and the tasks share state only by name: a variable, accumulator or queue is
one resource at run time when two graphs put an op of the same resource name (``shared_name``, else
the node name for variables; and ``container``) on the same device. Nothing checks that the graphs
agree. A worker that creates its variables in another order gets another round-robin assignment
from ``replica_device_setter``, so ``/job:ps/task:0`` holds ``w`` in the chief's graph and ``b`` in
the worker's: TF then creates two variables named ``w`` on two PS tasks and the workers silently
train different models; the same name with another shape on the same device fails at run time.

:func:`compare_tasks` takes each task's *placed* pipeline (:class:`placeviz.pipeline.Pipeline`;
the requested devices when placement failed) and compares, per resource name:

* **variables** that are shared: not local (``LOCAL_VARIABLES``, SyncReplicas' local step) and not
  on the task's own worker task (a per-worker copy differs in task by design): device, shape, dtype;
* **accumulators** (``ConditionalAccumulator``, ``SparseConditionalAccumulator``,
  ``ResourceConditionalAccumulator``) and **queues** (``FIFOQueueV2``, ... with a ``shared_name``:
  SyncReplicas' token queue is ``sync_token_q``; without one a queue is private to its graph):
  device, dtype/shape (accumulators), component types, shapes and capacity (queues);
* **names**: an op of the same node name and kind whose ``shared_name``/``container`` differs
  between two tasks (the worker feeds another accumulator than the one the chief takes from).

A resource only in the chief's graph is legitimate (``if is_chief:`` state such as inception's loss
averages, the chief's init ops); one a worker has and the chief lacks is never initialized by the
chief (the worker waits for it forever: a warning); one some workers lack is info.

:func:`placeviz.tasks.task_pipelines` loads and places every task's graph for ``analyze`` and ``lint``. Nothing
here imports TensorFlow (a per-task builder does, through :func:`placeviz.io.load`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from placeviz.devices import WORKER_JOBS, job_of, requested_device, task_of
from placeviz.op_kinds import ACCUMULATOR_OPS, QUEUE_OPS, VARIABLE_OPS
from placeviz.protos import dtype_name

_COMPARED_ATTRS = {
    "variable": ("shape", "dtype"),
    "accumulator": ("shape", "dtype", "reduction_type"),
    "queue": ("component_types", "shapes", "capacity"),
}


# ----------------------------------------------------------------------------- one task's view
@dataclass(frozen=True)
class Resource:
    """A named resource of one task's graph."""

    kind: str  # "variable" | "accumulator" | "queue"
    name: str  # the resource name TF resolves: shared_name, else the node name (variables only)
    container: str
    node: str
    op: str
    device: str  # full placed device (the requested one when placement failed)
    requested: str  # the device string as written, or as the replayed setter wrote it
    own: bool  # on the task's own worker task: a per-worker copy, not shared
    attrs: tuple[tuple[str, str], ...]

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.container, self.name

    @property
    def label(self) -> str:
        return f"{self.container}:{self.name}" if self.container else self.name

    def attr(self, key: str) -> str | None:
        return dict(self.attrs).get(key)


@dataclass
class TaskView:
    """What one task's graph says about the resources it shares."""

    task: int
    source: str
    own_task: str | None  # "/job:worker/task:1": the worker task holding the most nodes
    resources: dict[tuple[str, str, str], Resource] = field(default_factory=dict)
    by_node: dict[tuple[str, str], Resource] = field(default_factory=dict)  # (kind, node name) -> resource
    placed: bool = True


def task_view(pipe, task: int, source: str = "") -> TaskView:
    """The shared resources of ``pipe``'s (placed) graph, as task ``task`` built it."""
    graph = pipe.graph
    devices = pipe.devices if pipe.devices is not None else list(graph.devices)
    own_task = _own_task(devices)
    local = {n.split(":", 1)[0] for n in pipe.model.collections.local_variables}
    if pipe.machinery is not None:
        local |= {graph.names[i] for q in pipe.machinery.token_queues for i in q.local_steps}
    view = TaskView(task=task, source=source, own_task=own_task, placed=pipe.devices is not None)
    for i, op in enumerate(graph.ops):
        if op in VARIABLE_OPS:
            kind = "variable"
        elif op in ACCUMULATOR_OPS:
            kind = "accumulator"
        elif op in QUEUE_OPS:
            kind = "queue"
        else:
            continue
        node = graph.names[i]
        if kind == "variable" and node in local:
            continue
        attr = graph.node_def(i).attr
        shared = attr["shared_name"].s.decode("utf-8", "replace") if "shared_name" in attr else ""
        container = attr["container"].s.decode("utf-8", "replace") if "container" in attr else ""
        if not shared and kind != "variable":
            continue  # TF makes a queue or accumulator without a shared_name private to its kernel
        device = devices[i]
        res = Resource(kind=kind, name=shared or node, container=container, node=node, op=op, device=device,
                       requested=graph.devices[i], own=own_task is not None and task_of(device) == own_task,
                       attrs=tuple((k, _attr_text(attr[k])) for k in _COMPARED_ATTRS[kind] if k in attr))
        view.resources.setdefault(res.key, res)
        view.by_node.setdefault((kind, node), res)
    return view


def _own_task(devices: list[str]) -> str | None:
    counts: dict[str, int] = {}
    for d in devices:
        t = task_of(d)
        if t is not None and job_of(d) in WORKER_JOBS:
            counts[t] = counts.get(t, 0) + 1
    return max(counts, key=lambda t: (counts[t], t)) if counts else None


def _canonical(device: str) -> tuple:
    """A device as TF's resource manager tells them apart: (job, replica, task, type, id), with the
    defaults a placer fills in (for a task whose placement failed and kept its requested device),
    its type as TF's placer reads it (:func:`~placeviz.devices.device_set.requested_device`)."""
    p = requested_device(device) if device else None
    if p is None:
        return (device,)
    return p.job, p.replica or 0, p.task or 0, p.type or "CPU", p.id or 0


def _attr_text(value) -> str:
    kind = value.WhichOneof("value")
    if kind == "shape":
        return _shape_text(value.shape)
    if kind == "type":
        return dtype_name(value.type)
    if kind == "list":
        if value.list.type:
            return "[" + ", ".join(dtype_name(t) for t in value.list.type) + "]"
        if value.list.shape:
            return "[" + ", ".join(_shape_text(s) for s in value.list.shape) + "]"
        return "[]"
    if kind == "s":
        return value.s.decode("utf-8", "replace")
    if kind == "i":
        return str(value.i)
    return str(getattr(value, kind)) if kind else ""


def _shape_text(shape) -> str:
    if shape.unknown_rank:
        return "<unknown>"
    return "[" + ",".join(str(d.size) if d.size >= 0 else "?" for d in shape.dim) + "]"


# ----------------------------------------------------------------------------- the comparison
@dataclass(frozen=True)
class Disagreement:
    """Two tasks' graphs disagree about one shared resource.

    ``task_a`` is the reference (the chief when it has the resource), ``task_b`` the task that
    differs. ``value_a``/``value_b``: what differs (devices, shapes, dtypes, shared names; None for
    a missing resource).
    """

    kind: str  # "device" | "shape" | "dtype" | "<attr>" | "shared_name" | "missing"
    resource: str  # "variable" | "accumulator" | "queue"
    name: str  # the resource's name (shared_name, or the variable's name)
    task_a: int
    task_b: int
    node_a: str | None
    node_b: str | None
    device_a: str | None
    device_b: str | None
    requested_a: str | None
    requested_b: str | None
    value_a: str | None
    value_b: str | None
    severity: str  # "error" | "warning" | "info"
    message: str

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Agreement:
    """The result of :func:`compare_tasks`."""

    tasks: list[int]
    sources: dict[int, str]
    compared: dict[str, int]  # resource kind -> shared resources compared
    disagreements: list[Disagreement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        """No error-level disagreement."""
        return not any(d.severity == "error" for d in self.disagreements)

    def counts(self) -> dict[str, int]:
        out = {"error": 0, "warning": 0, "info": 0}
        for d in self.disagreements:
            out[d.severity] += 1
        return out

    def to_json(self) -> dict:
        return {"tasks": [{"task": t, "source": self.sources.get(t, "")} for t in self.tasks],
                "compared": self.compared, "agree": self.agree, "counts": self.counts(),
                "disagreements": [d.to_json() for d in self.disagreements], "notes": self.notes}


def compare_tasks(views: list[TaskView]) -> Agreement:
    """Compare the tasks' views; see the module docstring. The first view is the reference."""
    views = sorted(views, key=lambda v: v.task)
    by_task = {v.task: v for v in views}
    chief = 0 if 0 in by_task else (views[0].task if views else 0)
    out = Agreement(tasks=[v.task for v in views], sources={v.task: v.source for v in views}, compared={})
    for v in views:
        if not v.placed:
            out.notes.append(f"task {v.task}'s graph could not be placed: its requested devices are compared")
    keys: dict[tuple[str, str, str], None] = {}
    for v in views:
        for key, res in v.resources.items():
            if not res.own:
                keys.setdefault(key)
    renamed: set[frozenset] = set()
    for key in keys:
        having = {v.task: v.resources[key] for v in views if key in v.resources}
        shared = {t: r for t, r in having.items() if not r.own}
        ref_task = chief if chief in shared else min(shared)
        ref = having[ref_task]
        out.compared[key[0]] = out.compared.get(key[0], 0) + 1
        for t, res in having.items():
            if t == ref_task:
                continue
            out.disagreements.extend(_differences(ref_task, ref, t, res, by_task))
        missing = [v.task for v in views if key not in v.resources]
        if not missing:
            continue
        for t in missing:
            other = _renamed_in(by_task[t], ref, by_task[ref_task])
            if other is not None:
                pair = frozenset({(ref_task, key), (t, other.key)})
                if pair not in renamed:  # found again from the other side's name
                    renamed.add(pair)
                    out.disagreements.append(_renamed(ref_task, ref, t, other))
                continue
            if set(shared) == {chief}:
                continue  # only the chief's: legitimate chief-only state
            out.disagreements.append(_missing(ref_task, ref, t, chief))
    out.disagreements.sort(key=lambda d: (_RANK[d.severity], _KINDS.index(d.resource), d.name, d.task_b, d.kind))
    return out


_RANK = {"error": 0, "warning": 1, "info": 2}
_KINDS = ("variable", "accumulator", "queue")  # the cause first: accumulators follow their variables' devices
_CONSEQUENCE = {
    "variable": "at run time these are two different variables, so the workers train different models",
    "accumulator": "at run time these are two accumulators: the gradients one task applies are never taken "
                   "by the other's chief update",
    "queue": "at run time these are two queues: what one task enqueues (SyncReplicas: the tokens) never "
             "reaches the other's dequeue, so a task blocks",
}


def _differences(ta: int, a: Resource, tb: int, b: Resource, by_task) -> list[Disagreement]:
    out = []
    same_device = a.device == b.device or _canonical(a.device) == _canonical(b.device) or (a.own and b.own)
    if not same_device:
        message = (f"{a.kind} {a.label!r} is on {a.device} in task {ta}'s graph ({_src(by_task, ta)}) but on "
                   f"{b.device} in task {tb}'s graph ({_src(by_task, tb)}): {_CONSEQUENCE[a.kind]}")
        out.append(_make("device", ta, a, tb, b, a.device, b.device, "error", message))
    for key in _COMPARED_ATTRS[a.kind]:
        x, y = a.attr(key), b.attr(key)
        if x is None or y is None or x == y:
            continue
        where = f"both on {a.device}" if same_device else f"on {a.device} and {b.device}"
        what = {"shape": "shape", "dtype": "dtype", "shapes": "component shapes", "component_types":
                "component types", "capacity": "capacity", "reduction_type": "reduction type"}[key]
        consequence = ("TF fails at run time when the second task's op finds the resource the first one created"
                       if same_device else _CONSEQUENCE[a.kind])
        message = (f"{a.kind} {a.label!r} has {what} {x} in task {ta}'s graph but {y} in task {tb}'s graph "
                   f"({where}): {consequence}")
        out.append(_make(key, ta, a, tb, b, x, y, "error", message))
    return out


def _renamed_in(view: TaskView, ref: Resource, ref_view: TaskView) -> Resource | None:
    """The op of ``view`` with ``ref``'s node name and kind when it names another resource that the
    reference task does not have (a differing ``shared_name``/``container``), else None."""
    other = view.by_node.get((ref.kind, ref.node))
    if other is None or other.key == ref.key or other.own or other.key in ref_view.resources:
        return None
    return other


def _renamed(ta: int, a: Resource, tb: int, b: Resource) -> Disagreement:
    what = "container/shared_name" if a.container != b.container else "shared_name"
    message = (f"{a.kind} op {a.node!r} has {what} {a.label!r} in task {ta}'s graph but {b.label!r} in task "
               f"{tb}'s graph: {_CONSEQUENCE[a.kind]}")
    return _make("shared_name", ta, a, tb, b, a.label, b.label, "error", message)


def _missing(ta: int, a: Resource, tb: int, chief: int) -> Disagreement:
    if tb == chief:
        severity = "warning"
        why = ("the chief never creates or initializes it, so a worker that uses it waits for it forever "
               "(\"Waiting for model to be ready\")" if a.kind == "variable" else
               "the chief's side of the SyncReplicas machinery never serves it")
    else:
        severity = "info"
        why = "that task does not use it"
    message = (f"{a.kind} {a.label!r} (on {a.device}) is in task {ta}'s graph but not in task {tb}'s: {why}")
    return Disagreement(kind="missing", resource=a.kind, name=a.label, task_a=ta, task_b=tb, node_a=a.node,
                        node_b=None, device_a=a.device, device_b=None, requested_a=a.requested, requested_b=None,
                        value_a=None, value_b=None, severity=severity, message=message)


def _make(kind: str, ta: int, a: Resource, tb: int, b: Resource, x: str, y: str, severity: str,
          message: str) -> Disagreement:
    return Disagreement(kind=kind, resource=a.kind, name=a.label, task_a=ta, task_b=tb, node_a=a.node,
                        node_b=b.node, device_a=a.device, device_b=b.device, requested_a=a.requested,
                        requested_b=b.requested, value_a=x, value_b=y, severity=severity, message=message)


def _src(by_task, t: int) -> str:
    source = by_task[t].source
    return source or ("the chief" if t == 0 else f"worker {t}")


def check_agreement(pipelines: Mapping[int, object], sources: dict[int, str] | None = None) -> Agreement | None:
    """Compare the placed pipelines of the tasks (task index -> :class:`placeviz.pipeline.Pipeline`);
    None with fewer than two tasks."""
    if len(pipelines) < 2:
        return None
    sources = sources or {}
    return compare_tasks([task_view(p, t, sources.get(t, "")) for t, p in sorted(pipelines.items())])
