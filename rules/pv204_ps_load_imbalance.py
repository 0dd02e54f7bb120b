"""PV204 ps-load-imbalance: one PS task holds far more variable bytes than the average."""

from __future__ import annotations

from placeviz.lint import Rule
from rules._common import PS_JOB, effective_devices, fmt_bytes, job_of, ps_tasks, shown, task_of, variable_ids

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

## How it is detected
Static shapes and dtypes of the variable ops (unknown shapes count 0) on their placed device,
grouped by PS task (every task of the cluster when one is given, so empty tasks count).

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
Partition big variables (`partitioner=tf.compat.v1.fixed_size_partitioner(num_ps)`), or pass a
size-aware strategy (`ps_strategy=GreedyLoadBalancingStrategy(num_ps, byte_size_load_fn)` in TF1
contrib).

## References
- tensorflow/tensorflow#24953, #45291, #42675; bytedance/byteps#116
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
    per_task = ", ".join(f"{t}: {fmt_bytes(load[t])}" for t in sorted(load))
    yield ctx.finding(
        RULE, biggest[0],
        f"PS task {top} holds {fmt_bytes(load[top])} of variables, {ratio:.2f}x the mean of "
        f"{fmt_bytes(mean)} ({per_task}); largest there: "
        + shown(f"{g.names[i]} ({fmt_bytes(sizes.get(g.names[i], 0))})" for i in biggest[:5]),
        related=biggest[1:5],
        suggestion="partition the largest variables across the PS tasks, or use a size-aware ps_strategy "
                   "(GreedyLoadBalancingStrategy with byte_size_load_fn)",
    )
