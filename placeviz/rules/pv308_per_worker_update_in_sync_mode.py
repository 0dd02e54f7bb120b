"""PV308 per-worker-update-in-sync-mode: the workers' train op updates what only the chief should."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import proof_violations

WORKER_SIDE = {
    "worker_updates_trainable": "updates a trainable variable from every worker, on top of the chief's "
                                "aggregated update",
    "worker_increments_global_step": "increments the global step from every worker",
    "worker_takes_gradient": "takes the aggregated gradient from the workers' side",
    "worker_enqueues_tokens": "hands out sync tokens from the workers' side",
}

RULE = Rule(
    id="PV308",
    name="per-worker-update-in-sync-mode",
    severity="warning",
    summary="In a SyncReplicas graph, the workers' train op updates a trainable variable or the global step itself.",
    needs=("sync",),
    doc="""\
## What it does
Reads placeviz's static proof that SyncReplicasOptimizer updates each variable once per global step
(`placeviz analyze` shows it in the `sync` section) and reports its worker-side violations: ops run
by the workers' train op that write a trainable variable or the global step, take an aggregated
gradient, or enqueue tokens.

## Why it matters
In sync mode only the chief's queue runner (`sync_op`) may apply the aggregated gradients and
advance the global step; workers only push gradients into accumulators. An update reachable from
the workers' train op (a second plain optimizer, a custom `assign_add`, a `minimize` call next to
SyncReplicas) runs once **per worker per step**, on top of the aggregated update: the effective
learning rate scales with the number of workers, and the global step advances W times per step.
Per-worker updates of non-trainable state (batch-norm moving averages, streaming metrics) are
expected and not reported.

## How it is detected
The proof computes the reverse closure of the worker train op (`Assign(local_step,
token_queue.dequeue())` and what runs it) and lists every state write in it; the violations of kinds
`worker_updates_trainable`, `worker_increments_global_step`, `worker_takes_gradient` and
`worker_enqueues_tokens` are reported at the offending op, with the path from the train op.

## Example
```python
train_op = sync_opt.apply_gradients(grads, global_step)
extra = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(aux_loss, var_list=[w])
train_op = tf.group(train_op, extra)          # w updated by every worker, every step
```

## Fix
Put every trainable update through the one SyncReplicasOptimizer (one `apply_gradients` call with
all gradients); increment the global step only through it.

## References
- seed question "does SyncReplicas apply the update once per worker?"; tensorflow/tensorflow#20834
""",
    references=("tensorflow/tensorflow#20834",),
)


def check(ctx):
    g = ctx.graph
    for v, what, op in proof_violations(ctx, WORKER_SIDE, ("op",), require_anchor=True):
        path = v.get("path") or []
        target = path[0] if path else None
        variable = v.get("variable")
        subject = f" ({variable!r})" if variable else ""
        yield ctx.finding(
            RULE, op,
            f"{g.ops[g.node(op).id]} {op!r}{subject} is run by the workers' train op"
            + (f" {target!r}" if target else "") + f": it {what}"
            + (f" (path: {' <- '.join(path)})" if len(path) > 1 else ""),
            related=[n for n in (target, variable) if n and n in g],
            suggestion="apply every gradient through the one SyncReplicasOptimizer (a single apply_gradients "
                       "call) and do not run other optimizers or global-step increments in the workers' train op",
        )
