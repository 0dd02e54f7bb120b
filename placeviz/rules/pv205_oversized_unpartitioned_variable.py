"""PV205 oversized-unpartitioned-variable: one huge variable lives whole on one PS task."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import effective_devices, fmt_bytes, has_ps_job, partition_of, variable_ids

RULE = Rule(
    id="PV205",
    name="oversized-unpartitioned-variable",
    severity="warning",
    summary="A variable larger than the threshold is not partitioned, so one PS task holds and serves all of it.",
    doc="""\
## What it does
Reports variables larger than `unpartitioned-bytes` that are not shards of a partitioned variable,
in a graph with a `ps` job. Optimizer slots of a reported variable (`<var>/Adam`, ...) are not
reported again.

## Why it matters
A single `[vocabulary, dim]` embedding sits on one PS task: that task serves every lookup and
update of it (a hot spot while the other tasks idle), must hold it and its slots in memory, and
writes it as one checkpoint tensor; tensors above 2 GB also hit protobuf limits.

## How it is detected
Static shape x dtype size of each variable op; a variable is partitioned when the MetaGraphDef's
`save_slice_info` says so, or (bare GraphDef) when it is named `<name>/part_<i>`.

Thresholds:
- `unpartitioned-bytes` (default `"64MiB"`, the shard size `variable_axis_size_partitioner`
  aims at).

## Example
```python
emb = tf.compat.v1.get_variable("emb", [5_000_000, 64])          # 1.2 GB on one ps task
```

## Fix
```python
emb = tf.compat.v1.get_variable("emb", [5_000_000, 64],
                                partitioner=tf.compat.v1.fixed_size_partitioner(num_ps_tasks))
```

## References
- `tf.compat.v1.variable_axis_size_partitioner` docs; tensorflow/tensorflow#23254;
  tensorflow/community#55; Stack Overflow 43288147
""",
    references=("tensorflow/tensorflow#23254", "tensorflow/community#55"),
)


def check(ctx):
    if not has_ps_job(ctx):
        return
    limit = ctx.threshold_bytes("unpartitioned-bytes", "64MiB")
    shards = partition_of(ctx)
    sizes = {v.name: v.bytes for v in ctx.analysis.variables}
    g = ctx.graph
    devices = effective_devices(ctx)
    reported: list[str] = []
    for i in variable_ids(ctx):
        name = g.names[i]
        size = sizes.get(name)
        if size is None or size <= limit or i in shards:
            continue
        if any(name.startswith(r + "/") for r in reported):  # an optimizer slot of a reported variable
            continue
        reported.append(name)
        yield ctx.finding(
            RULE, i,
            f"variable {name!r} ({fmt_bytes(size)}) is not partitioned: {devices[i] or 'one task'} holds, "
            f"serves and updates all of it (threshold {fmt_bytes(limit)})",
            suggestion=f"create {name!r} with partitioner=tf.compat.v1.fixed_size_partitioner(<ps tasks>) "
                       "(or variable_axis_size_partitioner)",
        )
