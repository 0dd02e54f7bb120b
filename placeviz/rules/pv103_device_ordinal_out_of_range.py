"""PV103 device-ordinal-out-of-range: a GPU (or CPU) index the task does not have."""

from __future__ import annotations

from placeviz.devices import ParsedName, requested_device
from placeviz.lint import Rule

RULE = Rule(
    id="PV103",
    name="device-ordinal-out-of-range",
    severity="error",
    summary="A node asks for a device (e.g. GPU:k) that its task does not have in the cluster.",
    needs=("cluster",),
    doc="""\
## What it does
Reports each distinct requested device whose type and index (`GPU:1`, `CPU:2`) no task it can
land on provides, once, at the first node carrying it (the message counts the others).

## Why it matters
Without soft placement TF fails at session start (`Could not satisfy explicit device specification
'/job:worker/task:0/device:GPU:0' because no supported kernel for GPU devices is available` / `no
devices matching that specification are registered`). With `allow_soft_placement` it silently runs
the op on CPU instead, which is rarely what a GPU pin meant. Typical causes: a model written for a
GPU machine deployed on CPU-only workers, `gpu:N` chosen per worker index on 1-GPU machines.

## How it is detected
The devices of the cluster: the placer's device set when placement ran (the cluster spec plus
`--gpus-per-worker`), else the cluster spec with one CPU per task and the threshold
`gpus-per-worker` GPUs on each worker task. A device matches when some task matching the request's
job/task has a device of that type and index. Types are compared as TF's placer compares them:
exactly, after Python's `DeviceSpec` has upper-cased the lower-case `cpu`/`gpu` (`/device:gpu:0` is
`GPU:0`, `/device:Gpu:0` names no device).

Thresholds:
- `gpus-per-worker` (default `0`): GPUs of each worker task, used only when placement did not run.

## Example
```python
with tf.device("/gpu:0"):          # worker tasks are CPU-only
    hidden = tf.nn.relu(tf.matmul(x, w))
```

## Fix
Drop the pin (let the placer choose), or declare the GPUs (`--gpus-per-worker`).

## References
- tensorflow/tensorflow#11608; SO 39991238; Humbatova et al. ICSE 2020 ("wrong reference to GPU device")
""",
    references=("tensorflow/tensorflow#11608",),
)


def _device_set(ctx):
    placement = ctx.pipeline.placement
    if placement is not None:
        return placement.device_set
    from placeviz.devices import DeviceSet

    return DeviceSet(ctx.cluster, 1, int(ctx.threshold("gpus-per-worker", 0)))


def check(ctx):
    g = ctx.graph
    device_set = _device_set(ctx)
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for i, d in enumerate(g.devices):
        if d:
            first.setdefault(d, i)
            count[d] = count.get(d, 0) + 1
    for device, i in first.items():
        # As TF's placer reads it: types compared exactly, after Python's DeviceSpec (requested_device).
        p = requested_device(device)
        if p is None or p.type is None or p.job is not None and p.job not in ctx.cluster.jobs:
            continue  # unparsable (PV101) or unknown job (PV102)
        hosts = device_set.matching(ParsedName(job=p.job, replica=p.replica, task=p.task))
        if not hosts or device_set.matching(p):
            continue
        dtype = p.type
        have = sorted({f"{a.device_type}:{a.parsed.id}" for a in hosts if a.device_type == dtype})
        where = f"/job:{p.job}" + (f"/task:{p.task}" if p.task is not None else "") if p.job else "any task"
        yield ctx.finding(
            RULE, i,
            f"node {g.names[i]!r} is pinned to {device!r}, but {where} has "
            + (f"only {', '.join(have)}" if have else f"no {dtype} device")
            + (f" ({count[device]} nodes carry this device)" if count[device] > 1 else "")
            + ": TF fails at session start (or, with allow_soft_placement, silently runs it elsewhere)",
            suggestion=f"remove the {dtype} pin or declare the devices the tasks have (--gpus-per-worker)",
        )
