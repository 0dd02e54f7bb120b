"""PV302 duplicate-gradient-accumulator: two accumulators are one resource at run time."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.op_kinds import ACCUMULATOR_OPS
from placeviz.rules._common import shared_name_clashes, shown

RULE = Rule(
    id="PV302",
    name="duplicate-gradient-accumulator",
    severity="error",
    summary="Two gradient accumulators share one shared_name on one device (apply_gradients called twice).",
    ignorable=False,
    doc="""\
## What it does
Groups gradient accumulators (`ConditionalAccumulator`, `ResourceConditionalAccumulator`,
`SparseConditionalAccumulator`) by (`shared_name`, placed device) and reports every accumulator after
the first of a group.

## Why it matters
`SyncReplicasOptimizer` names each accumulator `shared_name=var.name + "/grad_accum"`. Calling
`apply_gradients` twice for the same variable (two SyncReplicas optimizers over shared variables,
or one optimizer applied twice) creates two accumulator ops that TF resolves to one resource: the
two sync paths feed and drain the same accumulator, so a `TakeGradient` returns a mix of both
paths' gradients, or blocks because the other path took them.

## How it is detected
Accumulator ops with a non-empty `shared_name`, grouped by (`shared_name`, placed device).

## Example
```python
train_a = sync_opt.apply_gradients(grads_a, global_step)
train_b = sync_opt.apply_gradients(grads_b, global_step)   # same variables: same shared_names
```

## Fix
Call `apply_gradients` once with every (gradient, variable) pair.

## References
- `tensorflow/python/training/sync_replicas_optimizer.py`; tensorflow/tensorflow#11071
""",
    references=("tensorflow/tensorflow#11071",),
)


def check(ctx):
    g = ctx.graph
    for shared, device, i, others in shared_name_clashes(ctx, ctx.nodes_by_op(*ACCUMULATOR_OPS)):
        yield ctx.finding(
            RULE, i,
            f"accumulator {g.names[i]!r} and {shown(repr(g.names[j]) for j in others)} share "
            f"shared_name {shared!r} on {device or 'the same device'}: at run time they are one "
            "accumulator fed and drained by two sync paths",
            related=others,
            suggestion="call apply_gradients once, with every (gradient, variable) pair",
        )
