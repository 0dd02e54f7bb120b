"""PV303 sync-local-step-on-ps: SyncReplicas' per-worker local step is placed on a PS task."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import PS_JOB, effective_devices, job_of

RULE = Rule(
    id="PV303",
    name="sync-local-step-on-ps",
    severity="error",
    summary="SyncReplicas' local step (sync_rep_local_step) is placed on a PS task, shared by all workers.",
    needs=("sync",),
    doc="""\
## What it does
Reports the local step of a SyncReplicas graph (the variable the worker train op assigns the
dequeued token to; TF names it `sync_rep_local_step`) when it is placed on the `ps` job.

## Why it matters
Each worker must remember which global step its gradients were computed at: `SyncReplicasOptimizer`
sends the local step with every gradient, and the accumulators drop gradients older than the
current global step. TF creates it colocated with a local `NoOp` precisely "to prevent it being
placed on the PS". On the PS it is one variable for all workers: each worker's token assignment
overwrites the others', fresh gradients are dropped as stale and stale ones accepted.

## How it is detected
The sync pass finds the `Assign(local_step, token_queue.dequeue())` op of each token queue; the
variable it writes is the local step. Reported when its placed device's job is `ps`.

## Example
A custom device function that sends every `VariableV2` to `/job:ps`, colocation ignored.

## Fix
Leave the local step on the worker (do not override SyncReplicasOptimizer's colocation with a
device function that forces variables to the PS).

## References
- `tensorflow/python/training/sync_replicas_optimizer.py` ("Colocating local_step variable prevents
  it being placed on the PS")
""",
)


def check(ctx):
    g = ctx.graph
    devices = effective_devices(ctx)
    for q in ctx.machinery.token_queues:
        for i in q.local_steps:
            if job_of(devices[i]) == PS_JOB:
                yield ctx.finding(
                    RULE, i,
                    f"SyncReplicas local step {g.names[i]!r} is on {devices[i]}: one shared copy for all "
                    "workers, so each worker's token overwrites the others' and the staleness check of the "
                    "accumulators uses the wrong step",
                    related=q.local_step_assigns[:1],
                    suggestion="keep the local step on the worker (do not force every variable to the PS "
                               "with a custom device function)",
                )
