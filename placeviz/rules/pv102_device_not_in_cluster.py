"""PV102 device-not-in-cluster: a device names a job or task the cluster does not have."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import parsed

RULE = Rule(
    id="PV102",
    name="device-not-in-cluster",
    severity="error",
    summary="A node's device names a job, or a task index, that the cluster spec does not define.",
    needs=("cluster",),
    doc="""\
## What it does
Compares the job and task of every distinct requested device with the cluster spec the user gave
(`--cluster`), and reports each device naming a missing job or task, at its first node.

## Why it matters
TF's placer fails at session start: `Cannot assign a device for operation ...: Operation was
explicitly assigned to /job:ps/task:2 but available devices are [...]`; soft placement does not
help with an unknown job or task. Typical causes: a graph built with `ps_tasks=3` for a cluster
with 2 PS tasks, a job renamed (`chief` vs `master`), or a graph built for a cluster run locally.

## How it is detected
Each device string's job must be a job of the cluster and its task (when given) one of that job's
task indices. Devices without a job are not checked (the placer completes them).

## Example
`replica_device_setter(ps_tasks=3)` with `{"ps": ["ps0:2222", "ps1:2222"], "worker": [...]}`.

## Fix
Build the graph for the cluster (`replica_device_setter(cluster=cluster_spec)`), or fix the spec.

## References
- tensorflow/tensorflow#23697, #2322, #11608
""",
    references=("tensorflow/tensorflow#23697", "tensorflow/tensorflow#2322"),
)


def _problem(cluster, device: str) -> tuple[tuple, str] | None:
    """(key, text) when ``device`` names a job or task the cluster lacks; key groups the devices."""
    p = parsed(device)
    if p is None or p.job is None:
        return None
    if p.job not in cluster.jobs:
        return (p.job,), f"job {p.job!r} is not in the cluster (jobs: {', '.join(cluster.jobs)})"
    if p.task is not None and p.task not in cluster.task_indices(p.job):
        return (p.job, p.task), f"job {p.job!r} has tasks {cluster.task_indices(p.job)}, not task {p.task}"
    return None


def check(ctx):
    g = ctx.graph
    problems: dict[str, tuple[tuple, str] | None] = {}
    first: dict[tuple, tuple[int, str, str]] = {}
    count: dict[tuple, int] = {}
    for i, d in enumerate(g.devices):
        if not d:
            continue
        if d not in problems:
            problems[d] = _problem(ctx.cluster, d)
        found = problems[d]
        if found is None:
            continue
        key, text = found
        count[key] = count.get(key, 0) + 1
        first.setdefault(key, (i, d, text))
    for key, (i, device, text) in first.items():
        yield ctx.finding(
            RULE, i,
            f"node {g.names[i]!r} is assigned to {device!r}, but {text}; {count[key]} node(s) name it, and "
            "TF's placer fails at session start",
            suggestion="build the graph for this cluster (replica_device_setter(cluster=...)) or fix the cluster spec",
        )
