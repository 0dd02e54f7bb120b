"""PV305 missing-init-tokens: the SyncReplicas token queue is never filled before the first step."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import effective_devices

RULE = Rule(
    id="PV305",
    name="missing-init-tokens",
    severity="warning",
    summary="The SyncReplicas token queue has no init-tokens enqueue in the chief's graph: the first step may "
            "never start.",
    needs=("sync",),
    doc="""\
## What it does
Reports a SyncReplicas token queue that has no init-tokens op: no `EnqueueMany` of the queue filled
from the global step without an update before it (what `get_init_tokens_op()` builds), and no
`no_init_tokens` NoOp (what it builds for `num_tokens=0`).

## Why it matters
Workers dequeue a token at the end of every step; only the chief's queue runner (`sync_op`) refills
the queue, after an update. Without the initial tokens, the first steps wait forever when
`total_num_replicas < replicas_to_aggregate`, and generally the chief's queue runner and
`get_init_tokens_op()` must both run on the chief (`make_session_run_hook(is_chief=True)` does both).
A graph without them is the classic "training does not start, async mode works" report.

## How it is detected
From the sync pass: the token queue's enqueue ops other than the sync op, each filled
(`Fill`) from the global step's value with no update upstream. Token queues sharing a `shared_name`
on one device are one queue (see PV301): an init-tokens op of any of them counts for all.

Only the chief builds the op: `make_session_run_hook(is_chief)` calls `get_init_tokens_op()` in
`begin()` only when `is_chief`, and TF1 programs call it under `if is_chief:`. A non-chief worker's
graph (and one exported before the hook's `begin()` ran) therefore lacks it by design, and in
programs that follow TF's examples that op is the only difference between the chief's and a
worker's graph. So the finding is a **warning** only when the graph shows it is the chief's: the
chief queue runner (whose enqueue is the sync op) is registered in the `queue_runners` collection
(`tf.compat.v1.train.add_queue_runner(opt.get_chief_queue_runner())`; its sync op "should only be
executed by one of the replicas (usually the chief)", `sync_replicas_optimizer.py`, and
`Supervisor`/`MonitoredSession` start every runner of that collection, so a graph registering it is
that replica's). Otherwise it is **info**: lint the chief's graph to know.

## Example
```python
opt = tf.compat.v1.train.SyncReplicasOptimizer(base_opt, replicas_to_aggregate=2)
train_op = opt.apply_gradients(grads, global_step)
tf.compat.v1.train.add_queue_runner(opt.get_chief_queue_runner())   # the chief's graph
# missing: opt.get_init_tokens_op() / opt.make_session_run_hook(is_chief)
```

## Fix
Use `hooks=[opt.make_session_run_hook(is_chief)]` with `MonitoredTrainingSession`, or run
`opt.get_init_tokens_op()` and start `opt.get_chief_queue_runner()` on the chief.

## References
- tensorflow/tensorflow#2386, #13854, #4201, #7970; tensorflow/models#2343
- `tensorflow/python/training/sync_replicas_optimizer.py` (`_SyncReplicasOptimizerHook.begin`:
  init tokens and the chief queue runner only `if self._is_chief`)
""",
    references=("tensorflow/tensorflow#2386", "tensorflow/tensorflow#13854"),
)


def check(ctx):
    g = ctx.graph
    no_init = [i for i in ctx.nodes_by_op("NoOp") if g.names[i].rsplit("/", 1)[-1].startswith("no_init_tokens")]
    if no_init:
        return
    devices = effective_devices(ctx)
    queues = ctx.machinery.token_queues

    def resource(q):  # queues with one shared_name on one device are one queue at run time
        shared = ctx.attr_str(q.queue, "shared_name")
        return (shared, devices[q.queue]) if shared else (g.names[q.queue], None)

    filled = {resource(q) for q in queues if q.init_tokens_ops}
    for q in queues:
        if resource(q) in filled:
            continue
        related = [q.sync_enqueue] if q.sync_enqueue is not None else []
        if _chief_runner_registered(ctx, q):
            yield ctx.finding(
                RULE, q.queue,
                f"token queue {g.names[q.queue]!r} has no init-tokens enqueue in the chief's graph (it registers "
                "the chief queue runner): the queue starts empty and only the chief's sync op refills it, so the "
                "first steps can wait forever (get_init_tokens_op() was not built)",
                related=related,
                suggestion="pass opt.make_session_run_hook(is_chief) to MonitoredTrainingSession, or run "
                           "opt.get_init_tokens_op() and the chief queue runner on the chief",
            )
            continue
        yield ctx.finding(
            RULE, q.queue,
            f"token queue {g.names[q.queue]!r} has no init-tokens enqueue: expected in a non-chief worker's graph "
            "(only the chief builds get_init_tokens_op()); if this is the chief's graph, the queue starts empty "
            "and the first steps can wait forever",
            related=related,
            suggestion="lint the chief's graph; there, pass opt.make_session_run_hook(is_chief) to "
                       "MonitoredTrainingSession, or run opt.get_init_tokens_op() and the chief queue runner",
            severity="info",
        )


def _chief_runner_registered(ctx, q) -> bool:
    """Whether the ``queue_runners`` collection holds the chief queue runner of token queue ``q``
    (its queue, with the sync op among its enqueue ops)."""
    g = ctx.graph
    ops = {g.names[i] for i in (q.sync_op, q.sync_enqueue, *q.sync_op_candidates) if i is not None}
    for runner in ctx.collections.queue_runners:
        if runner.get("queue") == g.names[q.queue] or ops & set(runner.get("enqueue_ops") or ()):
            return True
    return False
