"""PV310 train-op-runs-chief-update: a TRAIN_OP collection entry runs the chief-only sync update."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.sync.detect import ACCUMULATOR_TAKE_OPS

RULE = Rule(
    id="PV310",
    name="train-op-runs-chief-update",
    severity="warning",
    summary="An entry of the train_op collection runs the aggregated (chief-only) SyncReplicas update.",
    needs=("sync", "meta"),
    doc="""\
## What it does
Checks each entry of the MetaGraphDef's `train_op` collection in a SyncReplicas graph and reports
entries whose run takes aggregated gradients (`*AccumulatorTakeGradient`), i.e. that run the
update only the chief's queue runner should run.

## Why it matters
`SyncReplicasOptimizer.apply_gradients` calls the wrapped optimizer's `apply_gradients` on the
aggregated gradients, and `Optimizer.apply_gradients` appends its result (the update plus the
global-step increment) to the `train_op` collection. A tool or script that runs the collection's ops
on every worker (instead of the op `apply_gradients` returned) makes each worker block in
`TakeGradient` until R gradients arrive and then apply the update itself: W updates per step, or a
hang.

## How it is detected
For each `train_op` collection entry other than the workers' train op the sync pass found, the
reverse closure (what a session runs to run it) is searched for a `TakeGradient` op.

## Example
```python
train_op = sync_opt.apply_gradients(grads, global_step)     # what workers must run
tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.TRAIN_OP)
# -> [<the wrapped optimizer's update>]: chief-only
```

## Fix
Run the op `apply_gradients` returned on workers; remove the wrapped optimizer's update from the
`train_op` collection before exporting (or replace the collection with the worker train op).

## References
- `tensorflow/python/training/optimizer.py` (`apply_gradients` adds to `TRAIN_OP`);
  `tensorflow/python/training/sync_replicas_optimizer.py`
""",
)


def check(ctx):
    g = ctx.graph
    m = ctx.machinery
    worker_ops = {t for q in m.token_queues for t in q.worker_train_ops}
    for name in ctx.collections.train_ops:
        i = g.index.get(name.split(":", 1)[0])
        if i is None or i in worker_ops:
            continue
        take = _first_take(g, i)
        if take is None:
            continue
        yield ctx.finding(
            RULE, i,
            f"train_op collection entry {g.names[i]!r} runs {g.ops[take]} {g.names[take]!r}: it is the "
            "aggregated update only the chief's queue runner may run; a worker running the collection would "
            "block on the accumulator and then apply the update itself",
            related=[take] + [t for t in sorted(worker_ops)][:1],
            suggestion="run the op SyncReplicasOptimizer.apply_gradients returned on workers and drop the "
                       f"wrapped optimizer's update {g.names[i]!r} from the train_op collection",
        )


def _first_take(g, start: int) -> int | None:
    seen = {start}
    order = [start]
    k = 0
    while k < len(order):
        u = order[k]
        k += 1
        if g.ops[u] in ACCUMULATOR_TAKE_OPS:
            return u
        for v, _slot in g.inputs_of(u):
            if v not in seen:
                seen.add(v)
                order.append(v)
    return None
