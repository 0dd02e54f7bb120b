"""PV101 malformed-device: a device string that TensorFlow cannot parse."""

from __future__ import annotations

from placeviz.devices import DeviceSpecError, canonical_device
from placeviz.lint import Rule
from placeviz.rules._common import nodes_by_device

RULE = Rule(
    id="PV101",
    name="malformed-device",
    severity="error",
    summary="A node's device string does not parse as a TensorFlow device specification.",
    doc="""\
## What it does
Parses every distinct device string of the graph as TensorFlow's Python `DeviceSpec` does when a
GraphDef is imported (`tf.compat.v1.import_graph_def`), and reports each one that does not parse,
at the first node that carries it.

## Why it matters
Importing the graph fails (`ValueError: Unknown attribute ... in '...'` / `Multiple device types`),
or the C++ placer rejects it at session start, after the cluster has been booked. Typical causes:
hand-edited or templated device strings (`/job:ps/tsk:0`, `/job:worker/task:-1`, `/gpu:0/cpu:0`).

## How it is detected
`DeviceSpec.from_string` rules: `/`-separated `job:`, `replica:`, `task:`, `device:TYPE:ID` (or the
legacy `cpu:N`/`gpu:N`) fields, integers where TF expects them, at most one device type.

## Example
```python
with tf.device("/job:ps/tsk:0"):
    w = tf.compat.v1.get_variable("w", [10])
```

## Fix
Write the device as `/job:<job>/replica:<r>/task:<t>/device:<TYPE>:<id>` (any prefix of it).

## References
- `tensorflow/python/framework/device_spec.py`; `tensorflow/core/util/device_name_utils.cc`
""",
)


def check(ctx):
    g = ctx.graph
    for device, ids in nodes_by_device(ctx, g.devices).items():
        if not device:
            continue
        i = ids[0]
        try:
            canonical_device(device)
        except DeviceSpecError as e:
            others = len(ids) - 1
            yield ctx.finding(
                RULE, i,
                f"node {g.names[i]!r} has device {device!r}, which TensorFlow cannot parse ({e})"
                + (f"; {others} more node(s) carry the same device" if others else ""),
                suggestion="write devices as /job:<job>/replica:<r>/task:<t>/device:<TYPE>:<id>",
            )
