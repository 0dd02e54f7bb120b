"""PV403 cross-task-traffic-report: a pair of tasks exchanging a lot of bytes per step."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import fmt_bytes, task_of

RULE = Rule(
    id="PV403",
    name="cross-task-traffic-report",
    severity="info",
    summary="A pair of tasks exchanges more bytes per training step than the threshold; lists the largest tensors.",
    needs=("partition",),
    doc="""\
## What it does
Sums the bytes of the cross-task transfers of one training step per (source task, destination task)
pair and reports every pair above `cross-task-bytes`, at the source node of its largest transfer,
with the largest tensors.

## Why it matters
It answers "what crosses the network every step": with parameter servers, every worker reads every
variable it uses and sends every gradient each step, so these figures bound the step time by
bandwidth (e.g. 100 MB/step over 10 Gb/s is 80 ms).

## How it is detected
`placeviz partition` of the worker's train op at task level (the `partition` section of
`placeviz analyze`); transfers of unknown size count 0.

Thresholds:
- `cross-task-bytes` (default `"64MiB"`): bytes per step of a task pair above which it is reported.

## Example
A 300 MB embedding read densely by each worker every step.

## Fix
Partition and shard big variables, keep gradients sparse (PV209), read variables once per step
(PV401), and place compute next to its data.

## References
- `placeviz partition`; tensorflow/tensorflow#4495
""",
)


def check(ctx):
    g = ctx.graph
    limit = ctx.threshold_bytes("cross-task-bytes", "64MiB")
    pairs: dict[tuple[str, str], list[dict]] = {}
    for t in ctx.partitions.transfers:
        if t.get("level") != "task" or t["slot"] == "control":
            continue
        pairs.setdefault((task_of(t["src_device"]), task_of(t["dst_device"])), []).append(t)
    for (src, dst), transfers in sorted(pairs.items()):
        total = sum(t["bytes"] or 0 for t in transfers)
        unknown = sum(1 for t in transfers if t["bytes"] is None)  # a lower bound then, never read as 0
        if total <= limit:
            continue
        top = sorted(transfers, key=lambda t: -(t["bytes"] or 0))[:5]
        listing = ", ".join(f"{t['src']}:{t['slot']} ({fmt_bytes(t['bytes'])})" for t in top)
        yield ctx.finding(
            RULE, top[0]["src"] if top[0]["src"] in g else None,
            f"{src} sends {'at least ' if unknown else ''}{fmt_bytes(total)} per step to {dst} in {len(transfers)} tensors"
            + (f" ({unknown} of unknown size)" if unknown else "") + f"; largest: {listing}",
            related=[t["src"] for t in top[1:] if t["src"] in g],
        )
