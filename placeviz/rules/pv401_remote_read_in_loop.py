"""PV401 remote-read-in-loop: a variable is read inside a while loop and sent across tasks every iteration."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.op_kinds import EXIT_OPS
from placeviz.rules._common import fmt_bytes, task_of
from placeviz.sync.proof import loop_frames
from placeviz.traffic import variables_behind

RULE = Rule(
    id="PV401",
    name="remote-read-in-loop",
    severity="warning",
    summary="A variable's value is read inside a while loop and crosses tasks once per iteration.",
    needs=("partition",),
    doc="""\
## What it does
In the partition of one training step, finds cross-task transfers whose source is a read of a
variable (`ReadVariableOp`, `Identity` of a ref variable) that sits inside a TF1 while-loop frame:
such a transfer happens once per loop iteration.

## Why it matters
"If your graph reads it several times, it will be transferred several times": a remote variable read
inside `tf.while_loop`/`dynamic_rnn` (typically a resource variable, whose `ReadVariableOp` is
created in the loop body and colocated with the variable on the PS) sends the whole tensor from the
PS to the worker on every iteration, so per-step traffic grows with the sequence length. Reading
the value once outside the loop (a tensor the loop captures through `Enter`) transfers it once.

## How it is detected
Task-level transfers of the step (`placeviz partition`), the while-loop frame of each source node
(from `Enter` frame names), and the variable behind the source (through `Identity`,
`ReadVariableOp`, `Enter`, `Switch`). Bytes are per iteration; the trip count is unknown statically.

## Example
```python
w = tf.compat.v1.get_variable("w", [512, 512], use_resource=True)     # on /job:ps
_, h = tf.compat.v1.while_loop(lambda i, h: i < 100,
                               lambda i, h: (i + 1, tf.matmul(h, w)), [0, h0])
```

## Fix
Read the variable once before the loop (`w_value = tf.identity(w)` outside, use `w_value` in the
body), or give the variable scope a `caching_device` on the worker.

## References
- tensorflow/tensorflow#4495 (zheng-xq on repeated reads), #28065
""",
    references=("tensorflow/tensorflow#4495", "tensorflow/tensorflow#28065"),
)


def check(ctx):
    g = ctx.graph
    frames = loop_frames(g)
    if frames is None:
        return
    candidates: list[tuple[dict, int]] = []  # (transfer, its source) for the sources inside a loop
    for t in ctx.partitions.transfers:
        if t.get("level") != "task" or t["slot"] == "control":
            continue
        src = g.id_of(t["src"])
        if src is None or frames[src] is None or g.ops[src] in EXIT_OPS:
            continue
        candidates.append((t, src))
    if not candidates:
        return
    import numpy as np

    # the variables behind all of them in one walk (one per transfer would pass over every edge each time)
    behind = variables_behind(g, np.fromiter((src for _, src in candidates), dtype=np.int64,
                                             count=len(candidates))).tolist()
    seen: set[tuple[str, str]] = set()
    for (t, src), v in zip(candidates, behind, strict=True):
        if v < 0:
            continue
        var = g.names[v]
        dst_task = task_of(t["dst_device"])
        if (t["src"], dst_task) in seen:
            continue
        seen.add((t["src"], dst_task))
        yield ctx.finding(
            RULE, src,
            f"{g.ops[src]} {t['src']!r} reads variable {var!r} on {task_of(t['src_device'])} inside while loop "
            f"{frames[src]!r} and sends it to {dst_task} on every iteration ({fmt_bytes(t['bytes'])} each)",
            related=[var],
            suggestion=f"read {var!r} once outside the loop (capture a tf.identity of it) or use a "
                       "caching_device on the worker",
        )
