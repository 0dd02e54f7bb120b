"""PV202 global-step-not-on-ps: the global step is not on a PS task, or there are several."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import (
    PS_JOB,
    effective_devices,
    global_step_ids,
    has_ps_job,
    is_distributed,
    job_of,
)

RULE = Rule(
    id="PV202",
    name="global-step-not-on-ps",
    severity="error",
    summary="The global step is not placed on a PS task, or the graph has more than one global step.",
    doc="""\
## What it does
Finds the global step (a variable named `global_step`, as `tf.train.get_or_create_global_step`
names it, or the variable the SyncReplicas tokens carry) and reports it when it is not on the
`ps` job of a graph that has one, and reports every global step after the first when there are
several.

## Why it matters
All workers must share one step counter: `max_steps`, `StopAtStepHook`, checkpoint and summary
intervals, learning-rate schedules and SyncReplicas' staleness checks read it. A global step on a
worker is one counter per worker (each worker counts only its own steps, and `global_step/sec`
looks wrong); two global steps mean two schedules advancing at different rates.

## How it is detected
Variable ops whose last name component is `global_step` (plus the SyncReplicas global step) whose
placed device's job is not `ps` while the graph (or the cluster) has a `ps` job; and any such
variable beyond the first.

## Example
```python
global_step = tf.compat.v1.train.get_or_create_global_step()   # before the setter
with tf.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2)):
    ...
```

## Fix
Create the global step inside the `replica_device_setter` scope (once), and pass that variable to
`minimize`/`apply_gradients`.

## References
- tensorflow/tensorflow#3918; tensorflow/benchmarks#205, #38, #89; horovod/horovod#135
""",
    references=("tensorflow/tensorflow#3918", "tensorflow/benchmarks#205"),
)


def check(ctx):
    steps = global_step_ids(ctx)
    g = ctx.graph
    for extra in steps[1:]:
        yield ctx.finding(
            RULE, extra,
            f"{g.names[extra]!r} is a second global step (the first is {g.names[steps[0]]!r}): hooks, "
            "schedules and SyncReplicas read one of them while the other advances",
            related=steps[:1],
            suggestion="create the global step once with tf.compat.v1.train.get_or_create_global_step() "
                       "and pass that variable everywhere",
        )
    if not steps or not is_distributed(ctx) or not has_ps_job(ctx):
        return
    devices = effective_devices(ctx)
    for i in steps:
        if job_of(devices[i]) != PS_JOB:
            where = devices[i] or "no device (TF places it on the session's task)"
            yield ctx.finding(
                RULE, i,
                f"global step {g.names[i]!r} is on {where}, not on a {PS_JOB} task: each worker would "
                "count its own steps instead of sharing one counter",
                suggestion="create the global step inside the replica_device_setter scope so it goes to "
                           f"/job:{PS_JOB}",
            )
