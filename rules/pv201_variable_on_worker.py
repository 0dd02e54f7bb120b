"""PV201 variable-on-worker: a global variable lands on the worker task that runs the replica."""

from __future__ import annotations

from placeviz.lint import Rule
from rules._common import (
    effective_devices,
    global_step_ids,
    has_ps_job,
    is_distributed,
    local_variable_names,
    task_of,
    variable_ids,
    worker_task,
)

RULE = Rule(
    id="PV201",
    name="variable-on-worker",
    severity="error",
    summary="A global (shared) variable is placed on the worker task that runs the model replica, not on a PS task.",
    ignorable=False,
    doc="""\
## What it does
Finds global variables (not in `LOCAL_VARIABLES`) that end up on the worker task the graph's model
replica runs on (the worker task holding most of the graph's ops, i.e. its `worker_device`), in a
graph that has a `ps` job.

## Why it matters
Every worker builds the same program with its own `worker_device` (`/job:worker/task:<i>`), so a
variable placed on the replica's own task exists once **per worker**. The chief initializes only
its copy; every other worker waits forever in `Waiting for model to be ready. Ready_for_local_init_op:
Variables not initialized: ...` (or, with a plain `Session`, trains its own private copy). The usual
causes: a variable created before entering `tf.device(tf.train.replica_device_setter(...))`, under an
explicit `tf.device("/job:worker/...")`, or with a custom device function that misses its op type.

## How it is detected
Variable ops (`VariableV2`, `VarHandleOp`, ...) that are not local variables (the MetaGraphDef's
`local_variables`, and the SyncReplicas local step the sync pass finds) whose device after
placement has job `worker`/`chief`/`master` and is the replica's own task. A variable with no device
at all is placed by TF next to its consumers or on the session's task: also the worker. When TF's
placer rejects the graph (see PV104), the placement TF makes with `allow_soft_placement` is used.
A variable on *another* worker task is reported by PV210 instead, and the global step by PV202.

## Example
```python
bias = tf.compat.v1.get_variable("output_bias", [10])      # before the setter: no device
with tf.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2)):
    ...
```

## Fix
Create every global variable inside the `replica_device_setter` scope (or pin it to `/job:ps`);
mark per-worker state as local (`collections=[tf.GraphKeys.LOCAL_VARIABLES]`).

## References
- tensorflow/tensorflow#18737, #20585, #2472, #32081; tensorflow/benchmarks#145
- `tensorflow/python/training/device_setter.py`
""",
    references=("tensorflow/tensorflow#18737", "tensorflow/tensorflow#2472", "tensorflow/benchmarks#145"),
)


def check(ctx):
    if not is_distributed(ctx) or not has_ps_job(ctx):
        return
    own = worker_task(ctx)
    if own is None:
        return
    g = ctx.graph
    devices = effective_devices(ctx)
    local = local_variable_names(ctx)
    steps = set(global_step_ids(ctx))  # PV202's
    for i in variable_ids(ctx):
        name = g.names[i]
        if name in local or i in steps or task_of(devices[i]) != own:
            continue
        requested = g.devices[i]
        why = (f"it was requested on {requested!r}" if requested
               else "it has no device (created outside the replica_device_setter scope?), so TF places it there")
        yield ctx.finding(
            RULE, i,
            f"global variable {name!r} is placed on {devices[i]}, the task that runs this worker's "
            f"replica ({why}): every worker gets its own copy, only the chief initializes its own, and "
            "non-chief workers wait forever for it to be initialized",
            suggestion=f"create {name!r} inside the replica_device_setter scope (or pin it to /job:ps); "
                       "if it is per-worker state, add it to LOCAL_VARIABLES",
        )
