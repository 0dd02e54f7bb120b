"""PV207 idle-ps-task: a PS task of the cluster hosts (almost) no variables."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import (
    PS_JOB,
    effective_devices,
    fmt_bytes,
    greedy_resource_note,
    job_of,
    ps_tasks,
    task_of,
    variable_ids,
)

RULE = Rule(
    id="PV207",
    name="idle-ps-task",
    severity="info",
    summary="A PS task of the cluster hosts no variables, or a negligible share of the variable bytes.",
    needs=("ps-count", "placement"),
    doc="""\
## What it does
For each task of the cluster's `ps` job, sums the bytes of the variables placed there and reports
tasks holding less than `idle-ps-fraction` of the total.

## Why it matters
An idle PS task is a machine (and its NIC) paid for and unused, usually because the program was
built for fewer PS tasks than the cluster has (`ps_tasks=` vs the cluster spec), because the
round-robin strategy happened to deal it only small variables, or because a greedy strategy
could not weigh the variables: TF1 contrib's `byte_size_load_fn` weighs a resource variable's
`VarHandleOp` by its `DT_RESOURCE` handle output, 0 bytes in TF 2.x, so
`GreedyLoadBalancingStrategy` puts every resource variable on task 0 and leaves the others empty.

## How it is detected
Variable bytes (static shape x dtype) per placed PS task, against the PS task count the user
stated: the cluster's `ps` job (`--cluster`), or the N tasks of `--ps-tasks N` (an idle task is
then one the setter never chose). Without either, the rule is skipped: the tasks a placed graph
names all host something by construction.

Thresholds:
- `idle-ps-fraction` (default `0.05`): a task holding less than this share of the total variable
  bytes is reported;
- `idle-ps-min-bytes` (default `"16MiB"`): below this total, only tasks hosting no variable at all
  are reported (a small share of a small model costs nothing).

## Example
A graph built with `replica_device_setter(ps_tasks=2)` linted against a cluster with 3 PS tasks;
or resource variables placed with `--ps-tasks 2 --strategy greedy`:
```python
setter = tf.compat.v1.train.replica_device_setter(
    ps_tasks=2, ps_strategy=GreedyLoadBalancingStrategy(2, byte_size_load_fn))
with tf.device(setter):
    w = tf.compat.v1.get_variable("w", [1024, 256], use_resource=True)   # ps:0, weighs 0
    b = tf.compat.v1.get_variable("b", [256], use_resource=True)         # ps:0 again
```

## Fix
Build the graph for the cluster (`replica_device_setter(cluster=cluster_spec)`), shrink the
cluster, or partition the big variables so every task gets a share; with resource variables, use
round-robin or a load function that sizes each variable by its shape x dtype.

## References
- tensorflow/tensorflow#45291
""",
    references=("tensorflow/tensorflow#45291",),
)


def check(ctx):
    tasks = ps_tasks(ctx)
    if not tasks:
        return
    sizes = {v.name: v.bytes or 0 for v in ctx.analysis.variables}
    devices = effective_devices(ctx)
    g = ctx.graph
    load = dict.fromkeys(tasks, 0)
    count = dict.fromkeys(tasks, 0)
    for i in variable_ids(ctx):
        if job_of(devices[i]) == PS_JOB:
            t = task_of(devices[i])
            load[t] = load.get(t, 0) + sizes.get(g.names[i], 0)
            count[t] = count.get(t, 0) + 1
    total = sum(load.values())
    if not total:
        return
    fraction = float(ctx.threshold("idle-ps-fraction", 0.05))
    small_model = total < ctx.threshold_bytes("idle-ps-min-bytes", "16MiB")
    ps_vars = [i for i in variable_ids(ctx) if job_of(devices[i]) == PS_JOB]
    note = greedy_resource_note(ctx, ps_vars)
    for t in tasks:
        if load[t] >= fraction * total or (count[t] and small_model):
            continue
        what = ("hosts no variables" if not count[t] else
                f"hosts {fmt_bytes(load[t])} of variables, {100 * load[t] / total:.1f}% of {fmt_bytes(total)}")
        yield ctx.finding(
            RULE, None,
            f"PS task {t} {what}: it is (nearly) idle",
            suggestion="build the graph for this cluster's PS count, or partition the large variables"
                       + (f"; {note}" if note else ""),
        )
