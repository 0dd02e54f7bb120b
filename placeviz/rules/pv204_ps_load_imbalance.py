"""PV204 ps-load-imbalance: one PS task holds far more variable bytes than the average."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import (
    PS_JOB,
    effective_devices,
    fmt_bytes,
    greedy_resource_note,
    job_of,
    ps_tasks,
    shown,
    task_of,
    variable_ids,
)

RULE = Rule(
    id="PV204",
    name="ps-load-imbalance",
    severity="warning",
    summary="The variable bytes per PS task are unbalanced: the most loaded task holds well above the mean.",
    needs=("placement",),
    doc="""\
## What it does
Sums the bytes of the variables (optimizer slots included) on each PS task and reports the most
loaded task when it holds more than `ps-imbalance-ratio` times the mean, and at least
`ps-imbalance-min-bytes`.

## Why it matters
`replica_device_setter`'s default `_RoundRobinStrategy` is size-blind: it deals variables to tasks
in creation order, so one task can get the big embedding and its slots while the others idle. Every
worker reads and updates its variables every step, so that task's NIC and CPU bound the step time.

The size-aware alternative has its own trap: TF1 contrib's `GreedyLoadBalancingStrategy` with
`byte_size_load_fn` weighs an op by its single output, and a resource variable's op
(`VarHandleOp`) outputs a scalar `DT_RESOURCE` handle, whose `DType.size` is 0 in TF 2.x
(`DataTypeSize(DT_RESOURCE)`; `tensorflow/python/framework/dtypes.cc`). Every resource variable
weighs 0 bytes, the least loaded task never changes, and the greedy strategy puts **all** of them
on one task (task 0; task 1 when a ref global step went to task 0 first). `--ps-tasks 2 --strategy
greedy` reproduces it, and the finding's advice names this cause when the most loaded task holds
resource variables.

## How it is detected
Static shapes and dtypes of the variable ops (unknown shapes count 0) on their placed device,
grouped by PS task (every task of the cluster when one is given, or the N tasks of `--ps-tasks N`,
so empty tasks count).

Thresholds:
- `ps-imbalance-ratio` (default `1.5`): max / mean bytes per PS task above which the rule fires;
- `ps-imbalance-min-bytes` (default `"16MiB"`): the most loaded task must hold at least this much;
  below it the imbalance costs nothing measurable.

## Example
```python
with tf.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2)):
    emb = tf.compat.v1.get_variable("emb", [1_000_000, 64])      # 256 MB on ps:0
    w = tf.compat.v1.get_variable("w", [64, 10])                 # ps:1
```

## Fix
Partition big variables (`partitioner=tf.compat.v1.fixed_size_partitioner(num_ps)`), so each task
gets a shard. A greedy `ps_strategy` helps only with a load function that sizes the variable
itself (its `shape` attr times its `dtype`), not with `byte_size_load_fn` on resource variables,
which is what causes the imbalance above; with resource variables, keep the round-robin default
or partition.

## References
- tensorflow/tensorflow#24953, #45291, #42675; bytedance/byteps#116
- `tensorflow/contrib/training/python/training/device_setter.py` (`GreedyLoadBalancingStrategy`,
  `byte_size_load_fn`); `tensorflow/python/framework/dtypes.cc` (`DType.size`)
""",
    references=("tensorflow/tensorflow#24953", "tensorflow/tensorflow#45291"),
)


def check(ctx):
    tasks = ps_tasks(ctx)
    if len(tasks) < 2:
        return
    g = ctx.graph
    sizes = {v.name: v.bytes or 0 for v in ctx.analysis.variables}
    devices = effective_devices(ctx)
    load = dict.fromkeys(tasks, 0)
    members: dict[str, list[int]] = {t: [] for t in tasks}
    for i in variable_ids(ctx):
        if job_of(devices[i]) != PS_JOB:
            continue
        t = task_of(devices[i])
        load[t] = load.get(t, 0) + sizes.get(g.names[i], 0)
        members.setdefault(t, []).append(i)
    mean = sum(load.values()) / len(load)
    if not mean:
        return
    top = max(load, key=lambda t: (load[t], t))
    ratio = load[top] / mean
    if ratio <= float(ctx.threshold("ps-imbalance-ratio", 1.5)):
        return
    if load[top] < ctx.threshold_bytes("ps-imbalance-min-bytes", "16MiB"):
        return
    biggest = sorted(members[top], key=lambda i: -sizes.get(g.names[i], 0))
    per_task = ", ".join(f"{t}: {fmt_bytes(load[t])}" for t in sorted(load, key=_task_key))
    suggestion = "partition the largest variables across the PS tasks (fixed_size_partitioner(num_ps))"
    note = greedy_resource_note(ctx, members[top])
    if note:
        suggestion += "; " + note
    else:
        suggestion += ", or a ps_strategy whose load function sizes each variable by its shape x dtype"
    yield ctx.finding(
        RULE, biggest[0],
        f"PS task {top} holds {fmt_bytes(load[top])} of variables, {ratio:.2f}x the mean of "
        f"{fmt_bytes(mean)} ({per_task}); largest there: "
        + shown(f"{g.names[i]} ({fmt_bytes(sizes.get(g.names[i], 0))})" for i in biggest[:5]),
        related=biggest[1:5],
        suggestion=suggestion,
    )


def _task_key(task: str):
    job, _, index = task.rpartition("/task:")
    return job, int(index) if index.isdigit() else 0
