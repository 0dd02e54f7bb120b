"""PV304 accumulator-not-with-variable: a gradient accumulator is not on its variable's PS task."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import WORKER_JOBS, effective_devices, job_of, task_of

RULE = Rule(
    id="PV304",
    name="accumulator-not-with-variable",
    severity="error",
    summary="A SyncReplicas gradient accumulator is not on the task of the variable it updates, or is on a worker.",
    needs=("sync",),
    doc="""\
## What it does
For each gradient accumulator of a SyncReplicas graph, compares its placed task with the task of the
variable its aggregated gradient updates, and reports accumulators on a different task or on a
worker job.

## Why it matters
`SyncReplicasOptimizer` creates each accumulator `with ops.device(var.device)`, so that all workers
push their gradients to one accumulator next to the variable. When the variable has no device yet
(created outside the device setter) the accumulator follows whatever scope is active: on a worker
it is one accumulator **per worker** (the chief aggregates only its own gradients and the others
block), and on another task than the variable every update moves the aggregated gradient and the
variable across the network, while the variable itself is per worker.

## How it is detected
The sync pass links each accumulator to the variable it feeds (its `shared_name`
`<var>:0/grad_accum` and the optimizer update downstream of its `TakeGradient`). Reported when
the placed tasks differ, or the accumulator's job is a worker job.

## Example
```python
bias = tf.compat.v1.get_variable("bias", [10])                     # no device
with tf.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2)):
    ...
    train_op = sync_opt.apply_gradients(grads, global_step)       # bias' accumulator -> a ps task
```

## Fix
Create every trainable variable inside the `replica_device_setter` scope (see PV201).

## References
- `tensorflow/python/training/sync_replicas_optimizer.py`
""",
)


def check(ctx):
    g = ctx.graph
    devices = effective_devices(ctx)
    for a in ctx.machinery.accumulators:
        acc = a.node
        acc_task = task_of(devices[acc])
        if a.variable is None:
            continue
        var_task = task_of(devices[a.variable])
        var = g.names[a.variable]
        if job_of(devices[acc]) in WORKER_JOBS:
            yield ctx.finding(
                RULE, acc,
                f"accumulator {g.names[acc]!r} of {var!r} is on worker task {acc_task}: every worker gets its "
                "own accumulator, so the chief aggregates only its own gradients and the others' are never "
                "taken",
                related=[a.variable],
                suggestion=f"place {var!r} on a PS task (create it inside the replica_device_setter scope)",
            )
        elif acc_task != var_task:
            yield ctx.finding(
                RULE, acc,
                f"accumulator {g.names[acc]!r} is on {acc_task} but the variable it updates, {var!r}, is on "
                f"{var_task or 'no task'}: the variable is not where SyncReplicasOptimizer expects it "
                "(created outside the device setter?)",
                related=[a.variable],
                suggestion=f"create {var!r} inside the replica_device_setter scope so it and its "
                           "accumulator share a PS task",
            )
