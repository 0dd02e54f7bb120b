"""PV306 replicas-to-aggregate-vs-workers: each step waits for more gradients than there are workers."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import replica_count

RULE = Rule(
    id="PV306",
    name="replicas-to-aggregate-vs-workers",
    severity="warning",
    summary="replicas_to_aggregate is larger than the number of workers in the cluster.",
    needs=("sync", "cluster"),
    doc="""\
## What it does
Compares `replicas_to_aggregate` (R, the `num_required` Const of every `*TakeGradient`) with the
number of tasks running replicas in the cluster (W: the `worker`, `chief` and `master` jobs).

## Why it matters
Each global step waits for R gradients. With R > W every step needs several batches from some
workers; their second gradient is computed on parameters that are not updated yet, and the step
only starts at all thanks to extra init tokens. Usually R was set for a bigger cluster, or the
cluster spec lacks workers.

## How it is detected
R from the sync pass (it must be a Const and equal for all accumulators) and W from the cluster
spec the user gave.

## Example
`SyncReplicasOptimizer(opt, replicas_to_aggregate=4)` with a cluster of 2 workers.

## Fix
Set `replicas_to_aggregate` to at most the number of workers (and `total_num_replicas` to the number
of workers; see PV307).

## References
- `SyncReplicasOptimizer` docstring; tensorflow/tensorflow#11660
""",
    references=("tensorflow/tensorflow#11660",),
)


def check(ctx):
    m = ctx.machinery
    r = m.replicas_to_aggregate
    w = replica_count(ctx.cluster)
    if r is None or not w or r <= w:
        return
    takes = [t for a in m.accumulators for t in a.takes]
    yield ctx.finding(
        RULE, takes[0] if takes else m.token_queues[0].queue,
        f"replicas_to_aggregate is {r} but the cluster has {w} worker task(s): every global step waits "
        f"for {r} gradients, so some workers contribute several per step, computed on stale parameters",
        related=takes[1:4],
        suggestion=f"set replicas_to_aggregate to at most {w} (or add workers to the cluster spec)",
    )
