"""PV310 train-op-runs-chief-update: a TRAIN_OP collection entry runs the chief-only sync update."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.op_kinds import ACCUMULATOR_TAKE_OPS

RULE = Rule(
    id="PV310",
    name="train-op-runs-chief-update",
    severity="info",
    summary="A train_op collection entry (warning: the workers' own train op) runs the aggregated, chief-only "
            "SyncReplicas update.",
    needs=("sync", "meta"),
    doc="""\
## What it does
Checks each entry of the MetaGraphDef's `train_op` collection in a SyncReplicas graph and reports
entries whose run takes aggregated gradients (`*AccumulatorTakeGradient`), i.e. that run the
update only the chief's queue runner should run. It is a **warning** when that entry is the
workers' own train op (the op that runs the worker's token dequeue and local-step assign), and
**info** otherwise.

## Why it matters
`SyncReplicasOptimizer.apply_gradients` calls the wrapped optimizer's `apply_gradients` on the
aggregated gradients, and `Optimizer.apply_gradients` appends its result (the update plus the
global-step increment) to the `train_op` collection; the op `SyncReplicasOptimizer.apply_gradients`
returns (what workers must run) is never added. So **every** MetaGraphDef TF exports with
SyncReplicas holds the chief's update in `train_op`, and a correct program never runs it there:
it runs the op `apply_gradients` returned, and the chief's queue runner runs the update. Only a
tool or script that runs the collection's ops on every worker (e.g. `get_collection("train_op")[0]`
after `import_meta_graph`) trips over it: each worker blocks in `TakeGradient` until R gradients
arrive and then applies the update itself (W updates per step, or a hang). That is why this case is
info.

When the workers' train op itself runs the update (the program grouped its train op with the
collection, `tf.group(train_op, *tf.get_collection(TRAIN_OP))`, and runs that), the program really
does it on every worker: warning.

## How it is detected
For each `train_op` collection entry, the reverse closure (what a session runs to run it) is
searched for a `TakeGradient` op. The entry is the workers' train op when the sync pass found it as
such (a `train_op` entry downstream of the local-step assign).

## Example
```python
train_op = sync_opt.apply_gradients(grads, global_step)     # what workers must run
tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.TRAIN_OP)
# -> [<the wrapped optimizer's update>]: chief-only (info)

train_op = tf.group(train_op, *tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.TRAIN_OP))
tf.compat.v1.get_collection_ref(tf.compat.v1.GraphKeys.TRAIN_OP)[:] = [train_op]
# -> the workers' own train op runs the chief update (warning)
```

## Fix
Run the op `apply_gradients` returned on workers, not the collection; to silence the info, replace
the collection with that op before exporting
(`tf.compat.v1.get_collection_ref(tf.compat.v1.GraphKeys.TRAIN_OP)[:] = [train_op]`).

## References
- `tensorflow/python/training/optimizer.py` (`apply_gradients` adds to `TRAIN_OP`);
  `tensorflow/python/training/sync_replicas_optimizer.py` (`update_op = self._opt.apply_gradients(...)`,
  returns `train_op = state_ops.assign(self._local_step, token)`)
""",
)


def check(ctx):
    g = ctx.graph
    m = ctx.machinery
    worker_ops = {t for q in m.token_queues for t in q.worker_train_ops}
    for name in ctx.collections.train_ops:
        i = g.id_of(name.split(":", 1)[0])
        if i is None:
            continue
        take = _first_take(g, i)
        if take is None:
            continue
        if i in worker_ops:
            yield ctx.finding(
                RULE, i,
                f"the workers' train op {g.names[i]!r} (a train_op collection entry that runs the token dequeue) "
                f"also runs {g.ops[take]} {g.names[take]!r}, the aggregated update only the chief's queue runner "
                "may run: every worker blocks on the accumulator and then applies the update itself",
                related=[take],
                suggestion="run only the op SyncReplicasOptimizer.apply_gradients returned on workers; do not group "
                           "it with the wrapped optimizer's update from the train_op collection",
                severity="warning",
            )
            continue
        yield ctx.finding(
            RULE, i,
            f"train_op collection entry {g.names[i]!r} runs {g.ops[take]} {g.names[take]!r}: it is the "
            "aggregated update only the chief's queue runner may run (TF's Optimizer.apply_gradients put it "
            "there); harmless unless a tool runs the collection on workers, which would block on the accumulator "
            "and then apply the update itself",
            related=[take] + [t for t in sorted(worker_ops)][:1],
            suggestion="run the op SyncReplicasOptimizer.apply_gradients returned on workers; to silence this, set "
                       "the train_op collection to that op before exporting",
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
