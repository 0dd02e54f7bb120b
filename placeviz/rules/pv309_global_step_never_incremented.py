"""PV309 global-step-never-incremented: a training graph never writes its global step."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import global_step_ids, is_restore_or_init, state_writers
from placeviz.sync.detect import is_optimizer_apply

RULE = Rule(
    id="PV309",
    name="global-step-never-incremented",
    severity="warning",
    summary="The graph trains variables but no op increments its global step.",
    doc="""\
## What it does
Reports a global step (a variable named `global_step`, or the SyncReplicas one) that no op writes
other than its initializer and restore ops, in a graph that has optimizer updates.

## Why it matters
`global_step` drives `max_steps`/`StopAtStepHook`, checkpoint and summary intervals, learning-rate
decay and SyncReplicas' tokens. When it is created but not passed to `minimize`/`apply_gradients`,
training never stops by step count, logs `It seems that global step (tf.train.get_global_step) has
not been increased`, and `global_step/sec` stays 0.

## How it is detected
The writers of the global step variable (ops taking its ref or resource handle as a mutable input,
from placeviz's state index), minus `<global_step>/Assign` (its initializer) and writes whose value
comes from a `Restore*` op; the graph must contain an optimizer apply op (`Apply*`,
`ResourceApply*`, `SparseApply*`).

## Example
```python
global_step = tf.compat.v1.train.get_or_create_global_step()
train_op = opt.minimize(loss)          # global_step=global_step forgotten
```

## Fix
`opt.minimize(loss, global_step=global_step)` (or `apply_gradients(..., global_step=...)`).

## References
- tensorflow/tensorflow#3918; coMindOrg/federated-averaging-tutorials#4
""",
    references=("tensorflow/tensorflow#3918",),
)


def check(ctx):
    if not any(is_optimizer_apply(op) for op in set(ctx.graph.ops)):
        return
    g = ctx.graph
    for i in global_step_ids(ctx):
        writers = [w for w in state_writers(ctx, i) if not is_restore_or_init(ctx, w, i)]
        if writers:
            continue
        yield ctx.finding(
            RULE, i,
            f"global step {g.names[i]!r} is never incremented (no op writes it besides its initializer), "
            "although the graph has optimizer updates: step-based hooks, schedules and checkpoints never advance",
            suggestion=f"pass global_step={g.names[i]} to minimize()/apply_gradients()",
        )
