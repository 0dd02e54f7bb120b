"""PV201 variable-on-worker: a global variable lands on the worker task that runs the replica."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import (
    chief_task,
    effective_devices,
    global_step_ids,
    has_ps_job,
    is_distributed,
    local_variable_names,
    task_of,
    trainable_names,
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

On the chief's own task (`/job:worker/task:0`, TF1's `is_chief = task_index == 0`, or task 0 of a
`chief`/`master` job) one case is reported as **info** only: a variable that is not trainable (the
MetaGraphDef's `trainable_variables` says so) and that the program itself requested on that task.
That is what chief-only state looks like: TF1 programs build it under `if is_chief:` (e.g.
`inception_distributed_train.py`'s `ExponentialMovingAverage` of the losses, inside its
`tf.device('/job:worker/task:%d' % task_id)` scope). It exists only in the chief's graph, the
chief's own init op initializes it, and the non-chief workers' graphs (and their
`report_uninitialized_variables`) never name it, so nobody waits for it. One graph cannot tell it
from per-worker state every worker builds; lint a non-chief worker's graph to know: there such a
variable lands on that worker's own task and is an error. Trainable variables (model parameters)
and variables with no device at all (created outside the device scope) stay errors on the chief too.

## Example
```python
bias = tf.compat.v1.get_variable("output_bias", [10])      # before the setter: no device
with tf.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2)):
    ...
```

Chief-only state (info on the chief's graph, absent from the workers' graphs):
```python
with tf.device("/job:worker/task:%d" % task_id):
    if is_chief:
        averages = tf.compat.v1.train.ExponentialMovingAverage(0.9, name="avg")
        averages_op = averages.apply(losses)     # non-trainable "<loss>/avg" on the chief's task
```

## Fix
Create every global variable inside the `replica_device_setter` scope (or pin it to `/job:ps`);
mark per-worker state as local (`collections=[tf.GraphKeys.LOCAL_VARIABLES]`). Chief-only state
needs no fix; to silence the info, pin it to `/job:ps` or make it local.

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
    on_chief = own == chief_task(ctx)
    trainable = trainable_names(ctx) if ctx.collections.present else None
    for i in variable_ids(ctx):
        name = g.names[i]
        if name in local or i in steps or task_of(devices[i]) != own:
            continue
        requested = g.devices[i]
        why = (f"it was requested on {requested!r}" if requested
               else "it has no device (created outside the replica_device_setter scope?), so TF places it there")
        if on_chief and requested and trainable is not None and name not in trainable:
            # Chief-only state (built under `if is_chief:`) looks exactly like this on the chief.
            yield ctx.finding(
                RULE, i,
                f"non-trainable variable {name!r} is placed on {devices[i]}, the chief's own task ({why}): "
                "fine if only the chief's graph builds it (under `if is_chief:`, e.g. moving averages of the "
                "losses for summaries); if every worker builds it, each non-chief worker gets its own copy "
                "that nobody initializes (lint a non-chief worker's graph to tell)",
                suggestion=f"if every worker builds {name!r}, create it inside the replica_device_setter scope "
                           "(or pin it to /job:ps), or add it to LOCAL_VARIABLES",
                severity="info",
            )
            continue
        yield ctx.finding(
            RULE, i,
            f"global variable {name!r} is placed on {devices[i]}, the task that runs this worker's "
            f"replica ({why}): every worker gets its own copy, only the chief initializes its own, and "
            "non-chief workers wait forever for it to be initialized",
            suggestion=f"create {name!r} inside the replica_device_setter scope (or pin it to /job:ps); "
                       "if it is per-worker state, add it to LOCAL_VARIABLES",
        )
