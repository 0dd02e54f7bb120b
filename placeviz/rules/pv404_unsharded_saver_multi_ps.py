"""PV404 unsharded-saver-multi-ps: one save op gathers the variables of several PS tasks."""

from __future__ import annotations

from placeviz.graph import CONTROL
from placeviz.lint import Rule
from placeviz.rules._common import PS_JOB, effective_devices, job_of, task_of

SAVE_OPS = {"SaveV2": 3, "Save": 2, "SaveSlices": 3}
"""Save op -> index of its first tensor input."""

RULE = Rule(
    id="PV404",
    name="unsharded-saver-multi-ps",
    severity="info",
    summary="A non-sharded Saver writes the variables of several PS tasks through one save op (advice).",
    doc="""\
## What it does
Reports save ops (`SaveV2`, `Save`, `SaveSlices`) whose saved tensors come from more than one PS task
and whose file name is not a `ShardedFilename` (i.e. `tf.compat.v1.train.Saver(sharded=False)`).

## Why it matters
A non-sharded Saver builds one save op: at every checkpoint all parameters travel from every PS
task to one device and are written from there (memory and network spikes, slow or stalled
checkpoints with large models). `Saver(sharded=True)` builds one save op per device that writes
its own shard, then merges the index: each PS writes its own variables.

It is advice, hence `info`: the checkpoint is correct, only slower and heavier on one device, and
`Saver()`'s default is `sharded=False`, which is also what `tf.compat.v1.train.Supervisor` builds
(`supervisor.py`: `saver_mod.Saver()`), so TF's own distributed examples (`mnist_replica.py`,
`inception_distributed_train.py`) checkpoint this way; and sharding needs a file system every PS
task can write. Raise it with `[tool.placeviz.lint.severity] PV404 = "warning"` where checkpoints are
large.

## How it is detected
The devices of the save op's tensor inputs (through `Identity`) after placement; the file-name
input traced through `Identity` must not come from `ShardedFilename`.

## Example
```python
saver = tf.compat.v1.train.Saver()                    # sharded=False, 2 ps tasks
```

## Fix
`tf.compat.v1.train.Saver(sharded=True)` (`Scaffold`/`MonitoredTrainingSession` do this by default).
Sharded checkpoints need a file system shared by the PS tasks.

## References
- tensorflow/tensorflow#3812 (mrry: `sharded=True` makes each PS write its shard), #6326, #6374, #3453;
  tensorflow/tensor2tensor#394
""",
    references=("tensorflow/tensorflow#3812", "tensorflow/tensorflow#6326"),
)


def _source(g, src: int) -> int:
    seen = set()
    while g.ops[src] in ("Identity", "Snapshot") and src not in seen:
        seen.add(src)
        data = [s for s, slot in g.inputs_of(src) if slot != CONTROL]
        if not data:
            break
        src = data[0]
    return src


def check(ctx):
    g = ctx.graph
    devices = effective_devices(ctx)
    for i in ctx.nodes_by_op(*SAVE_OPS):
        data = [s for s, slot in g.inputs_of(i) if slot != CONTROL]
        if not data or g.ops[_source(g, data[0])] == "ShardedFilename":
            continue
        tasks: dict[str, int] = {}
        for s in data[SAVE_OPS[g.ops[i]]:]:
            src = _source(g, s)
            if job_of(devices[src]) == PS_JOB:
                tasks.setdefault(task_of(devices[src]), src)
        if len(tasks) < 2:
            continue
        yield ctx.finding(
            RULE, i,
            f"{g.ops[i]} {g.names[i]!r} on {devices[i] or 'its device'} writes the variables of {len(tasks)} PS "
            f"tasks ({', '.join(sorted(tasks))}) in one non-sharded checkpoint: every checkpoint funnels all "
            "parameters through one device",
            related=list(tasks.values())[:3],
            suggestion="use tf.compat.v1.train.Saver(sharded=True) so each PS task writes its own shard",
        )
