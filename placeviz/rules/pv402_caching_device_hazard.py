"""PV402 caching-device-hazard: a variable's cached read is useless or stale within the step."""

from __future__ import annotations

from placeviz.graph import CONTROL
from placeviz.lint import Rule
from placeviz.op_kinds import VARIABLE_READ_OPS
from placeviz.rules._common import (
    PS_JOB,
    effective_devices,
    is_restore_or_init,
    job_of,
    nodes_by_device,
    state_writers,
    task_of,
    variable_ids,
)

RULE = Rule(
    id="PV402",
    name="caching-device-hazard",
    severity="info",
    summary="A variable's cached read (caching_device) sits on a PS task, or is used after an update of the variable in the same step.",
    doc="""\
## What it does
Finds the reads of a variable made on another task than the variable's (what a `caching_device`
produces: the `<var>/read` snapshot is built under the caching device instead of next to the
variable) and reports two hazards:

1. the cache is on a `ps` task: every worker still reads it remotely, so it saves nothing;
2. an op that runs after an update of the variable in the same step (it depends on the update)
   reads the cached value, which was copied once per `Session.run`, possibly before the update.

## Why it matters
`caching_device` copies a remote variable once per step to the worker instead of once per read
(`tf.compat.v1.variable_scope(..., caching_device=...)`). The copy is a snapshot: TF orders it
after nothing, so a consumer placed after the optimizer update sees the old value (cached globals
"lag 1-2 steps behind"), and nothing invalidates it within the step.

## How it is detected
Reads (`Identity` of a ref variable, `ReadVariableOp` of a resource variable) whose placed task
differs from the variable's. Hazard 2: a consumer of that read whose reverse closure (data and
control inputs) holds a writer of the variable (initializers and restores excluded) that the read
itself does not depend on.

## Example
```python
with tf.compat.v1.variable_scope("m", caching_device="/job:worker/task:0"):
    w = tf.compat.v1.get_variable("w", [10])
train = opt.minimize(loss)
with tf.control_dependencies([train]):
    w_after = tf.identity(w)          # the cached value from before the update
```

## Fix
Read the variable explicitly after the update (`w.read_value()` under the control dependency,
without caching), or do not cache variables the step updates and then re-reads.

## References
- tensorflow/tensorflow#4495; tensorforce/tensorforce#214
""",
    references=("tensorflow/tensorflow#4495", "tensorforce/tensorforce#214"),
)


def _read_from_other_tasks(ctx, devices: list[str]) -> set[int]:
    """The variables that some read op (``VARIABLE_READ_OPS``) on another task reads through a
    data edge, both ends on a task: one numpy pass over the edges, from the rules' shared per-op
    and per-device indices, so that the per-variable walk below visits only those (at 200k nodes,
    15k variables and usually none of them)."""
    import numpy as np

    g = ctx.graph
    n = len(g)
    task = np.full(n, -1, dtype=np.int64)  # the task of each node as a number; -1: none
    numbers: dict[str, int] = {}
    for device, ids in nodes_by_device(ctx, devices).items():
        t = task_of(device)
        if t is not None:
            task[ids] = numbers.setdefault(t, len(numbers))
    is_var = np.zeros(n, dtype=bool)
    is_var[variable_ids(ctx)] = True
    is_read = np.zeros(n, dtype=bool)
    is_read[ctx.nodes_by_op(*VARIABLE_READ_OPS)] = True
    src, dst, slot = g.edge_arrays
    keep = is_var[src] & is_read[dst] & (slot != CONTROL)
    src, dst = src[keep], dst[keep]
    a, b = task[src], task[dst]
    return set(src[(a >= 0) & (b >= 0) & (a != b)].tolist())


def _closure(g, starts, limit: int = 50000) -> set[int]:
    seen = set(starts)
    stack = list(starts)
    while stack and len(seen) < limit:
        u = stack.pop()
        for v, _slot in g.inputs_of(u):
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen


def check(ctx):
    g = ctx.graph
    devices = effective_devices(ctx)
    remote = _read_from_other_tasks(ctx, devices)
    for var in variable_ids(ctx):
        if var not in remote:
            continue
        var_task = task_of(devices[var])
        if var_task is None:
            continue
        reads = [c for c, slot in g.consumers_of(var)
                 if slot != CONTROL and g.ops[c] in VARIABLE_READ_OPS and task_of(devices[c]) not in (None, var_task)]
        if not reads:
            continue
        writers = [w for w in state_writers(ctx, var) if not is_restore_or_init(ctx, w, var)]
        for r in reads:
            name = g.names[var]
            if job_of(devices[r]) == PS_JOB:
                yield ctx.finding(
                    RULE, r,
                    f"the cached read {g.names[r]!r} of {name!r} (on {var_task}) is on {devices[r]}, another PS "
                    "task: workers still read it across the network, so the cache saves nothing",
                    related=[var],
                    suggestion=f"set the caching_device of {name!r} to the worker's device, or drop it",
                )
                continue
            if not writers:
                continue
            before = _closure(g, [r])
            pending = [w for w in writers if w not in before]
            if not pending:
                continue
            for c, _slot in g.consumers_of(r):
                ancestors = _closure(g, [c])
                hit = next((w for w in pending if w in ancestors), None)
                if hit is None:
                    continue
                yield ctx.finding(
                    RULE, c,
                    f"{g.names[c]!r} runs after {g.ops[hit]} {g.names[hit]!r} updates {name!r} but reads the cached "
                    f"copy {g.names[r]!r} on {devices[r]}, taken once per step and not ordered after the update: "
                    "it may see the value from before the update",
                    related=[r, hit],
                    suggestion=f"read {name!r} after the update without the cache (the variable's read_value() "
                               "under the control dependency), or do not cache it",
                )
                break
