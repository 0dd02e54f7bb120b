"""PV203 local-variable-on-ps: a LOCAL_VARIABLES member is placed on a PS task."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import PS_JOB, effective_devices, job_of, variable_ids

RULE = Rule(
    id="PV203",
    name="local-variable-on-ps",
    severity="info",
    summary="A local variable (tf.metrics counter, epoch counter) is placed on a PS task and shared by all workers.",
    needs=("meta",),
    doc="""\
## What it does
Finds members of the MetaGraphDef's `local_variables` collection placed on the `ps` job.

## Why it matters
Local variables are meant to be per-worker (streaming-metric `total`/`count`, input epoch counters,
RNN state). `replica_device_setter` moves every `VariableV2`/`VarHandleOp` to the PS, locals
included (its source says they should not be: `TODO(sherrym): Variables in the LOCAL_VARIABLES
collection should not be placed in the parameter server`). On the PS, all workers share one copy:
metric values mix the workers, and every worker's `local_variables_initializer` resets the shared
counters. Training itself is not affected, hence `info`.

## How it is detected
`local_variables` members (except the SyncReplicas local step, PV303) whose placed device's job is
`ps`.

## Example
```python
with tf.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2)):
    acc, acc_update = tf.compat.v1.metrics.accuracy(labels, predictions)   # total/count -> ps
```

## Fix
Create local variables under `tf.device(worker_device)` (outside the setter), or accept shared
metrics.

## References
- `tensorflow/python/training/device_setter.py` (TODO on LOCAL_VARIABLES); snuspl/parallax#4
""",
    references=("snuspl/parallax#4",),
)


def check(ctx):
    g = ctx.graph
    local = {n.split(":", 1)[0] for n in ctx.collections.local_variables}
    m = ctx.machinery
    sync_steps = {i for q in m.token_queues for i in q.local_steps} if m is not None else set()
    devices = effective_devices(ctx)
    for i in variable_ids(ctx):
        if g.names[i] not in local or i in sync_steps or job_of(devices[i]) != PS_JOB:
            continue
        yield ctx.finding(
            RULE, i,
            f"local variable {g.names[i]!r} is placed on {devices[i]}: every worker shares (and re-initializes) "
            "this one copy instead of keeping its own",
            suggestion=f"create {g.names[i]!r} under the worker's device, outside the replica_device_setter scope",
        )
