"""PV210 variable-hosted-on-single-worker: a shared variable lives on another worker task."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import (
    WORKER_JOBS,
    effective_devices,
    is_distributed,
    job_of,
    local_variable_names,
    task_of,
    variable_ids,
    worker_task,
)

RULE = Rule(
    id="PV210",
    name="variable-hosted-on-single-worker",
    severity="info",
    summary="A global variable is pinned to a worker task other than the replica's own: that worker acts as a PS.",
    doc="""\
## What it does
Finds global variables placed on a task of a worker job (`worker`, `chief`, `master`) that is not
the task the graph's replica runs on.

## Why it matters
Such a variable is shared by all workers (one copy, on that task), so it works, but that worker now
serves parameters on top of its own training step: it is slower than its peers (a straggler in
synchronous training) and its failure loses state that a PS would keep. Horovod-style and
hand-placed setups do this on purpose; in a PS job it is usually a leftover pin.

## How it is detected
Variable ops not in `LOCAL_VARIABLES` whose placed device's job is a worker job and whose task
differs from the worker task holding most of the graph's ops. (A variable on the replica's own
task is PV201.)

## Example
```python
with tf.device("/job:worker/task:3"):
    table = tf.compat.v1.get_variable("table", [1000, 8])
```

## Fix
Put the variable on the `ps` job, or accept it and ignore this rule for the node.

## References
- horovod/horovod#3866
""",
    references=("horovod/horovod#3866",),
)


def check(ctx):
    if not is_distributed(ctx):
        return
    own = worker_task(ctx)
    g = ctx.graph
    devices = effective_devices(ctx)
    local = local_variable_names(ctx)
    for i in variable_ids(ctx):
        name = g.names[i]
        task = task_of(devices[i])
        if name in local or job_of(devices[i]) not in WORKER_JOBS or task == own:
            continue
        yield ctx.finding(
            RULE, i,
            f"global variable {name!r} is placed on {devices[i]}, a worker task other than the one this "
            f"replica runs on ({own}): that worker serves it to every replica as a parameter server would",
            suggestion=f"place {name!r} on the ps job unless {task} is meant to host it",
        )
