"""PV104 colocation-conflict: a colocation group binds nodes requested on incompatible devices."""

from __future__ import annotations

import re

from placeviz.lint import Rule
from placeviz.rules._common import colocation_conflicts

RULE = Rule(
    id="PV104",
    name="colocation-conflict",
    severity="error",
    summary="Nodes bound by colocation (_class loc:@...) request incompatible devices; TF's placer rejects the graph.",
    ignorable=False,
    doc="""\
## What it does
Reports the colocation conflicts of TF's placer: every node joins the groups its `_class` attr
names (`loc:@<op>`, set by `tf.colocate_with`, optimizers, savers, `embedding_lookup`), and a
group's device requests are merged as `DeviceNameUtils::MergeDevNames` does. Each join that fails
is reported at the node whose joining fails, with the nodes whose requests conflict.

## Why it matters
TF fails at session start with `InvalidArgumentError: Cannot colocate nodes 'A' and 'B': Cannot
merge devices with incompatible jobs: '/job:worker/task:1' and '/job:ps/task:0'`, after the cluster
has been booked. With `allow_soft_placement` the node silently leaves the group instead, and the
colocation it asked for (e.g. an update next to its variable) is lost. Typical causes: gradient or
saver ops colocated with a PS variable but explicitly pinned to a worker, and explicit pins on ops
that `colocate_with` binds together.

## How it is detected
The rule reads the conflicts placeviz's copy of TF's placer recorded while it joined the groups
(it merges nothing itself). The placer first rewrites devices as `tf.compat.v1.import_graph_def`
does (an op with `_class` takes the device of the first op it names), then colocates the two ends
of every ref and resource edge (a consumer pinned elsewhere silently takes its variable's
request), then joins the `_class` groups in node order, keeping each group's merged request. A
job, replica or task that differs between two requests is a conflict, and so is a device type or
index unless the session places softly. Where placement did not run (no `--ps-tasks`, an unplaced
graph), the rule runs the placer on the cluster the graph names. When TF's placer rejected the
graph with a colocation error of its ref/resource-edge step, that error is reported.

## Example
```python
with tf.device("/job:ps/task:0"):
    mean = tf.reduce_mean(x, 0)
with tf.device("/job:worker/task:0"):
    std = tf.math.reduce_std(x, 0)
with tf.compat.v1.colocate_with(mean.op), tf.compat.v1.colocate_with(std.op):
    normalized = (x - mean) / std
```

## Fix
Remove one of the explicit pins, or stop colocating ops that must run on different tasks.

## References
- `tensorflow/core/common_runtime/colocation_graph.cc` (`ColocateResourceAndRefEdges`,
  `ColocateAllNodes`); `tensorflow/core/util/device_name_utils.cc`
- tensorflow/tensorflow#3198, #16542, #25787, #33447; tensorflow/nmt#428; DeepRec-AI/DeepRec#932
""",
    references=("tensorflow/tensorflow#3198", "tensorflow/tensorflow#16542"),
)

_TF_ERROR = re.compile(r"Cannot colocate nodes (\S+) and (\S+?):")


def check(ctx):
    """The ``_class`` joins TF's placer fails on (``ColocationGraph::ColocateAllNodes``,
    ``tensorflow/core/common_runtime/colocation_graph.cc``), as placeviz's placer recorded them
    (:class:`placeviz.placement.placer.ColocationConflict`): the merge is the placer's, after its
    ref/resource-edge step, so it is never done a second time here (issue 19)."""
    g = ctx.graph
    reported = False
    for c in colocation_conflicts(ctx):
        if c.detail is None or c.node not in g:
            continue  # no device type supports both groups: PV107's kind of problem, not a device request
        reported = True
        related = [c.key if c.key in g else c.other, *(n for n in c.culprits if n in g)]
        yield ctx.finding(
            RULE, c.node,
            f"{c.node!r} (requested {c.request or 'no device'!r}) is colocated with {c.key!r} "
            f"(_class loc:@{c.key}), whose group requests {c.group_request!r}: {c.detail}; TF's "
            "placer rejects the graph (with allow_soft_placement the node silently leaves the group)",
            related=related,
            suggestion=f"remove the explicit device of {c.node!r} or of {c.key!r}, or do not colocate them",
        )
    if not reported and ctx.placement_error:
        m = _TF_ERROR.search(ctx.placement_error)
        if m and m.group(1) in g:
            yield ctx.finding(
                RULE, m.group(1), f"TF's placer rejects the graph: {ctx.placement_error}",
                related=[m.group(2)] if m.group(2) in g else [],
                suggestion="remove one of the conflicting explicit devices, or do not colocate the nodes",
            )
