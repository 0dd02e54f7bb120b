"""PV211 task-graphs-disagree: the workers' own graphs put a shared resource in different places."""

from __future__ import annotations

from placeviz.lint import Rule

RULE = Rule(
    id="PV211",
    name="task-graphs-disagree",
    severity="error",
    summary="In between-graph replication, two tasks' graphs give a shared variable, accumulator or queue "
            "different devices, shapes, dtypes or shared names.",
    needs=("tasks",),
    doc="""\
## What it does
Compares the graphs the tasks of a between-graph replicated job build for themselves (MODEL is the
chief's, task 0; `--worker-graph I=MODEL` gives task I's, or a builder taking `task_index` is
called per task when the cluster's workers are known). Per resource name it compares:

* shared variables (not `LOCAL_VARIABLES`, not on the task's own worker task): placed device,
  shape, dtype;
* accumulators (`ConditionalAccumulator`, `SparseConditionalAccumulator`,
  `ResourceConditionalAccumulator`) and queues with a `shared_name` (SyncReplicas' token queue
  `sync_token_q`): device, dtype and shape, component types, shapes and capacity;
* the `shared_name`/`container` of an op of the same name and kind.

## Why it matters
Every task's client builds its own graph, and tasks share state only by name and device. Nothing
checks that their graphs agree. A worker that creates its variables in another order (a dict
iterated in another order, an `if task_index ...` branch, a layer added conditionally) gets another
round-robin assignment from `replica_device_setter`: `/job:ps/task:0` holds `w` in the chief's
graph and `b` in the worker's. TF then creates two variables named `w` on two PS tasks; the
worker trains one the chief never reads, and nothing fails: the workers silently train different
models. The same name with another shape on the same device fails at run time instead. A
SyncReplicas accumulator or token queue whose shared name differs between tasks splits the
gradients or tokens: the chief aggregates without the worker's gradients, or the worker blocks.

## How it is detected
Each task's graph is placed (its own devices, or the setter replayed with the PLACE options;
`--worker-device /job:worker/task:%d` gets the task's index and a session on the worker job runs in
the task itself), then every named resource is compared with the chief's (or, for one the chief
lacks, the lowest task that has it). Errors: a different device, shape, dtype or component types,
or a different shared name for the op of the same name. A resource only the chief has is legitimate
(`if is_chief:` state) and is not reported; one a worker has and the chief lacks is a warning (the
chief never initializes it, so that worker waits for it forever); one that only some workers lack
is info. Without the other tasks' graphs the rule is skipped.

## Example
```python
with tf.device(tf.compat.v1.train.replica_device_setter(
        ps_tasks=2, worker_device="/job:worker/task:%d" % FLAGS.task_index)):
    global_step = tf.compat.v1.train.get_or_create_global_step()
    for name in set(LAYER_NAMES):          # set order differs between the tasks' processes
        layers[name] = tf.compat.v1.get_variable(name, SHAPES[name])
```
`placeviz lint chief.meta --worker-graph 1=worker1.meta`:
`variable 'w' is on /job:ps/replica:0/task:1/device:CPU:0 in task 0's graph but on
/job:ps/replica:0/task:0/device:CPU:0 in task 1's graph`.

## Fix
Build the same variables in the same order on every task (sorted names, no task-dependent layers),
or pin them explicitly (`tf.device("/job:ps/task:%d" % k)`, a deterministic `ps_strategy`); derive
`shared_name`s from the model, never from `task_index`; keep chief-only state (`if is_chief:`)
after the shared model, or on the chief's own task.

## References
- `tensorflow/python/training/device_setter.py` (`_RoundRobinStrategy`: one PS task per variable,
  in creation order); `tensorflow/core/framework/resource_mgr.cc` (a resource is (device,
  container, name))
""",
)


def check(ctx):
    g = ctx.graph
    for d in ctx.agreement.disagreements:
        # On the chief's op (the model linted), when the chief has the resource; else about the model.
        # The other task's op lives in another graph (a node of the same name here may be another
        # resource, e.g. SyncReplicas' numbered accumulators), so it is named in the message only.
        node = d.node_a if d.task_a == 0 else d.node_b if d.task_b == 0 else None
        if node is not None and node not in g:
            node = None
        yield ctx.finding(RULE, node, d.message, severity=d.severity, suggestion=_suggestion(d))


def _suggestion(d) -> str:
    if d.kind == "device":
        return ("build the shared variables in the same order on every task (the round-robin strategy hands out "
                "PS tasks in creation order), or pin them to explicit PS devices")
    if d.kind == "shared_name":
        return "derive shared_name from the model, not from the task; every task must name the same resource"
    if d.kind == "missing":
        return ("build the same shared state on every task; keep chief-only state under `if is_chief:` in the "
                "chief's graph only")
    return "build the resource with the same shape and dtype on every task"
