"""PV206 colocated-partition-shards: shards of one partitioned variable pile up on one PS task."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import PS_JOB, effective_devices, job_of, partition_of, ps_tasks, shown, task_of

RULE = Rule(
    id="PV206",
    name="colocated-partition-shards",
    severity="warning",
    summary="A partitioned variable has more shards on one PS task than an even spread would put there.",
    needs=("placement",),
    doc="""\
## What it does
For every partitioned variable, counts its shards on each PS task and reports it when some task
holds more than `ceil(shards / ps_tasks)` of them.

## Why it matters
Partitioning exists to spread a big variable's memory, lookups and updates over the PS tasks. The
round-robin strategy deals shards in creation order together with every other variable and slot,
so the shards of one variable can land on the same task (e.g. 2 shards, 2 tasks, and an odd number
of variables created between them), giving back the hot spot partitioning was meant to remove.
With more shards than tasks some task must hold several: only an uneven spread is reported.

## How it is detected
Shards from the MetaGraphDef's `save_slice_info` (or names `<var>/part_<i>` in a bare GraphDef),
their placed PS task, and the PS tasks of the cluster (or those the graph uses).

## Example
```python
with tf.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2)):
    a = tf.compat.v1.get_variable("a", [10])        # ps:0
    emb = tf.compat.v1.get_variable("emb", [1000, 8],
          partitioner=tf.compat.v1.fixed_size_partitioner(2))   # part_0 -> ps:1, part_1 -> ps:0 ...
```

## Fix
Use as many shards as PS tasks (or a multiple) and a size-aware strategy, or create partitioned
variables before the small ones.

## References
- tensorflow/tensorflow#23254; `tf.compat.v1.fixed_size_partitioner` docs
""",
    references=("tensorflow/tensorflow#23254",),
)


def check(ctx):
    tasks = ps_tasks(ctx)
    if len(tasks) < 2:
        return
    g = ctx.graph
    devices = effective_devices(ctx)
    by_var: dict[str, list[int]] = {}
    for i, (full, _k) in sorted(partition_of(ctx).items(), key=lambda kv: (kv[1][0], kv[1][1])):
        by_var.setdefault(full, []).append(i)
    for full, shards in by_var.items():
        if len(shards) < 2:
            continue
        on: dict[str, list[int]] = {t: [] for t in tasks}
        for i in shards:
            if job_of(devices[i]) == PS_JOB:
                on.setdefault(task_of(devices[i]), []).append(i)
        fair = -(-len(shards) // len(tasks))
        crowded = max(on, key=lambda t: (len(on[t]), t))
        if len(on[crowded]) <= fair:
            continue
        spread = ", ".join(f"{t}: {len(on[t])}" for t in sorted(on))
        here = on[crowded]
        yield ctx.finding(
            RULE, here[fair],
            f"{len(here)} of the {len(shards)} shards of partitioned variable {full!r} are on {crowded} "
            f"({shown(g.names[i] for i in here)}), while an even spread puts at most {fair} on a task "
            f"({spread})",
            related=[i for i in here if i != here[fair]],
            suggestion=f"partition {full!r} into a multiple of {len(tasks)} shards, or place it with a "
                       "size-aware ps_strategy",
        )
