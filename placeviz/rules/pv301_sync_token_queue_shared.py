"""PV301 sync-token-queue-shared: two SyncReplicas token queues are one resource at run time."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.op_kinds import FIFO_QUEUE_OPS
from placeviz.rules._common import shared_name_clashes, shown

TOKEN_QUEUE_NAME = "sync_token_q"

RULE = Rule(
    id="PV301",
    name="sync-token-queue-shared",
    severity="error",
    summary="More than one SyncReplicas token queue shares shared_name 'sync_token_q' on one device.",
    ignorable=False,
    doc="""\
## What it does
Finds token queues (`FIFOQueue(V2)` with `shared_name="sync_token_q"`, or queues the sync pass
recognises as token queues) that share their `shared_name` on the same device.

## Why it matters
`SyncReplicasOptimizer.apply_gradients` hard-codes `shared_name="sync_token_q"` and creates the
queue on the global step's device. Two SyncReplicas optimizers (a GAN's generator and
discriminator, two losses) or two `apply_gradients` calls on one optimizer therefore create two
queue ops that TF resolves to **one** queue resource: the tokens of either chief sync op release
either worker dequeue, so workers start steps whose update has not happened, or the non-chief
workers hang ("non-chief worker stuck in distributed SYNC mode").

## How it is detected
Queue ops grouped by (`shared_name`, placed device); a group with more than one op is reported at
every op after the first.

## Example
```python
g_opt = tf.compat.v1.train.SyncReplicasOptimizer(tf.compat.v1.train.AdamOptimizer(), 2)
d_opt = tf.compat.v1.train.SyncReplicasOptimizer(tf.compat.v1.train.AdamOptimizer(), 2)
g_train = g_opt.apply_gradients(g_grads, global_step)
d_train = d_opt.apply_gradients(d_grads, global_step)
```

## Fix
Use one SyncReplicasOptimizer per model (one `apply_gradients` call with all gradients), e.g. sum
the losses or concatenate the (gradient, variable) lists.

## References
- `tensorflow/python/training/sync_replicas_optimizer.py`; tensorflow/tensorflow#11071
""",
    references=("tensorflow/tensorflow#11071",),
)


def check(ctx):
    g = ctx.graph
    queues = [i for i in ctx.nodes_by_op(*FIFO_QUEUE_OPS) if ctx.attr_str(i, "shared_name") == TOKEN_QUEUE_NAME]
    m = ctx.machinery
    if m is not None:
        queues = sorted(set(queues) | {q.queue for q in m.token_queues if ctx.attr_str(q.queue, "shared_name")})
    for shared, device, i, others in shared_name_clashes(ctx, queues):
        yield ctx.finding(
            RULE, i,
            f"token queue {g.names[i]!r} and {shown(repr(g.names[j]) for j in others)} share "
            f"shared_name {shared!r} on {device or 'the same device'}: at run time they are one queue, "
            "so the tokens of either SyncReplicasOptimizer's sync op release either one's workers",
            related=others,
            suggestion="use a single SyncReplicasOptimizer and one apply_gradients call for all gradients",
        )
