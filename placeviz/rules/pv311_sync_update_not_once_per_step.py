"""PV311 sync-update-not-once-per-step: the chief's sync op does not update each variable exactly once."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import proof_violations

CHIEF_SIDE = {
    "global_step_increments": "the global step is not incremented exactly once per step",
    "multiple_chief_updates": "a variable is updated more than once per global step",
    "no_chief_update": "a variable with an accumulator is never updated by the sync op",
    "update_after_tokens": "an update is not ordered before the tokens that start the next step",
    "enqueue_not_after_increment": "the tokens do not wait for the global-step increment",
    "chief_update_in_loop": "an update runs inside a while loop (once per iteration)",
    "no_sync_op": "no op of the chief takes the gradients and hands out tokens",
    "no_worker_train_op": "no worker train op (assign of a dequeued token to a local step) exists",
}

RULE = Rule(
    id="PV311",
    name="sync-update-not-once-per-step",
    severity="warning",
    summary="The static proof that SyncReplicas applies each update once per global step fails on the chief's side.",
    needs=("sync",),
    doc="""\
## What it does
Reads placeviz's static proof that SyncReplicasOptimizer updates each trainable variable and the
global step exactly once per global step, and reports its chief-side violations (worker-side ones
are PV308): the global step incremented twice per step, a variable updated twice or never, updates
not ordered before the tokens, updates inside a while loop, no sync op or no worker train op.

## Why it matters
The guarantee of synchronous training is one aggregated update per step. Two SyncReplicas
optimizers on one global step advance it twice per step (schedules and `max_steps` run at double
speed); `apply_gradients` called twice updates variables twice; tokens that do not wait for the
update let workers read parameters of the previous step.

## How it is detected
`placeviz.sync.proof.prove` on the detected machinery: one reverse closure of the chief's sync op
(the token `EnqueueMany`, or the op run after it), counting the writes of each trainable variable
and of the global step and checking that the token enqueue depends on them. Violation kinds
reported: `global_step_increments`, `multiple_chief_updates`, `no_chief_update`,
`update_after_tokens`, `enqueue_not_after_increment`, `chief_update_in_loop`, `no_sync_op`,
`no_worker_train_op` (`multiple_token_queues` is left to PV301 and to the increments it causes).

## Example
```python
g_train = g_sync_opt.apply_gradients(g_grads, global_step)
d_train = d_sync_opt.apply_gradients(d_grads, global_step)   # global_step += 2 per step
```

## Fix
One SyncReplicasOptimizer and one `apply_gradients` call per model; build extra updates
(`variable_averages`) through its arguments, not after its sync op.

## References
- `tensorflow/python/training/sync_replicas_optimizer.py`; tensorflow/tensorflow#11071, #20834
""",
    references=("tensorflow/tensorflow#11071",),
)


def check(ctx):
    g = ctx.graph
    for v, what, node in proof_violations(ctx, CHIEF_SIDE, ("op", "ops", "variable", "queue")):
        yield ctx.finding(
            RULE, node, f"{what}: {v['message']}",
            related=[n for n in (v.get("ops") or ()) if n in g and n != node][:5],
            suggestion="use one SyncReplicasOptimizer with a single apply_gradients call for all gradients",
        )
