"""PV307 total-replicas-mismatch: the tokens handed out per step do not match the workers."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import replica_count

RULE = Rule(
    id="PV307",
    name="total-replicas-mismatch",
    severity="warning",
    summary="The tokens per step (max(total_num_replicas, replicas_to_aggregate)) differ from the workers in the cluster.",
    needs=("sync", "cluster"),
    doc="""\
## What it does
Compares the tokens the chief hands out per step (T = `max(total_num_replicas,
replicas_to_aggregate)`, the dims of the `Fill` feeding the sync `EnqueueMany`) with the workers of
the cluster (W: tasks of the `worker`, `chief` and `master` jobs).

## Why it matters
Every worker takes one token per step. With T < W, W - T workers find the queue empty each step
and idle (wasted machines). With T > W, surplus tokens let workers start the next step before the
update; their gradients are stale and dropped ("local_step less than global_step"), and workers
drift apart in step counts. (T = R > W is PV306.)

## How it is detected
T from the sync pass, W from the cluster spec the user gave.

## Example
`SyncReplicasOptimizer(opt, replicas_to_aggregate=2, total_num_replicas=4)` on 2 workers.

## Fix
Set `total_num_replicas` to the number of workers (keep `replicas_to_aggregate <= total_num_replicas`
for backup workers).

## References
- `SyncReplicasOptimizer` docstring; tensorflow/tensorflow#7898, #11660, #21523
""",
    references=("tensorflow/tensorflow#7898", "tensorflow/tensorflow#11660"),
)


def check(ctx):
    m = ctx.machinery
    w = replica_count(ctx.cluster)
    r = m.replicas_to_aggregate
    for q in m.token_queues:
        t = q.tokens_per_step
        if t is None or not w or t == w or (r is not None and t == r and r > w):
            continue
        node = q.sync_enqueue if q.sync_enqueue is not None else q.queue
        if t < w:
            what = (f"the chief hands out {t} tokens per step for {w} workers: {w - t} of them find the queue "
                    "empty every step and idle")
        else:
            what = (f"the chief hands out {t} tokens per step for {w} workers: surplus tokens let workers start "
                    "the next step before the update, and their stale gradients are dropped")
        yield ctx.finding(
            RULE, node, what,
            related=[q.queue],
            suggestion=f"set total_num_replicas={w} (the number of workers)",
        )
