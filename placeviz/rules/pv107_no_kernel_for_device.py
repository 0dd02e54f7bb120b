"""PV107 no-kernel-for-device: an op pinned to a device type it has no kernel for."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import nodes_by_device, parsed

RULE = Rule(
    id="PV107",
    name="no-kernel-for-device",
    severity="error",
    summary="An op is explicitly pinned to a device type (e.g. CPU, GPU) for which TensorFlow registers no kernel.",
    doc="""\
## What it does
For every node with an explicit device type, asks placeviz's op-facts table (generated from TF's
kernel registry) whether a kernel of that type accepts the node (its op and the attrs kernels are
constrained on, e.g. `T`). Reports nodes for which none does.

## Why it matters
`Could not satisfy explicit device specification '/device:GPU:0' because no supported kernel for GPU
devices is available`: without soft placement the session fails at start; with it, TF silently
moves the op (and everything colocated with it) elsewhere. Typical cases: string and summary ops,
some sparse optimizer applies or set ops pinned to a GPU; ops only built for accelerators pinned to
CPU.

## How it is detected
Only device types for which the table is complete are checked (`kernel_device_types_complete`: a
table generated from the CPU wheel knows all CPU kernels but not all GPU ones, so it does not judge
GPU pins; one generated from a CUDA build does); unknown ops are skipped.

Under soft placement (`--soft-placement`, the program's `ConfigProto(allow_soft_placement=True)`)
the finding is **info**: TF's placer then puts an op on CPU when "there's no GPU implementation for
the OP" (`tensorflow/core/protobuf/config.proto`, `allow_soft_placement`), so the session starts and
the program runs; the info says where the op really runs. It stays an error when soft placement
cannot help either: no CPU kernel accepts the node (and placement did not move it elsewhere). Multi-GPU tower programs
(`cifar10_multi_gpu_train.py`) build their summaries under `tf.device('/gpu:%d' % i)` and rely on it.

## Example
```python
with tf.device("/cpu:0"):
    y = some_gpu_only_op(x)
```

With soft placement (info: the summary op runs on CPU):
```python
with tf.device("/gpu:0"):
    tf.compat.v1.summary.scalar("loss", loss)     # session: ConfigProto(allow_soft_placement=True)
```

## Fix
Remove the device type from the pin (keep the job/task), or pick an op/dtype with a kernel there;
or run the session with `allow_soft_placement=True` (and lint with `--soft-placement`).

## References
- tensorflow/tensorflow#1310, #22476, #34774, #20370; tensorflow/models#5522, #4548
""",
    references=("tensorflow/tensorflow#1310", "tensorflow/tensorflow#22476"),
)


def check(ctx):
    table = ctx.op_table
    if table is None:
        from placeviz.ops import load_op_table

        table = load_op_table()
    g = ctx.graph
    complete = {t.upper(): t for t in table.kernel_device_types_complete}
    pinned = []  # nodes whose requested device names a device type the table knows every kernel of
    for d, ids in nodes_by_device(ctx, g.devices).items():
        p = parsed(d)
        if p is not None and p.type is not None and p.type.upper() in complete:
            pinned.extend(ids)
    for i in sorted(pinned):
        d = g.devices[i]
        p = parsed(d)
        dtype = complete[p.type.upper()]
        try:
            support = table.kernel_support(g.node_def(i), dtype)
        except Exception:  # noqa: BLE001 - a node the table cannot read is not this rule's to judge
            continue
        if support is False and ctx.soft_placement and (where := _soft_placed(ctx, table, i, p.type)):
            yield ctx.finding(
                RULE, i,
                f"{g.ops[i]} {g.names[i]!r} is pinned to {d!r}, but TensorFlow has no {dtype} kernel for it "
                f"(with these attrs): soft placement runs it {where} instead",
                suggestion=f"drop the {dtype} device type from the pin of {g.names[i]!r} to say where it runs",
                severity="info",
            )
        elif support is False:
            yield ctx.finding(
                RULE, i,
                f"{g.ops[i]} {g.names[i]!r} is pinned to {d!r}, but TensorFlow has no {dtype} kernel for it "
                "(with these attrs): the session fails to start (with allow_soft_placement it silently runs "
                "elsewhere)",
                suggestion=f"drop the {dtype} device type from the pin of {g.names[i]!r}",
            )


def _soft_placed(ctx, table, i: int, requested: str) -> str | None:
    """Where soft placement runs node ``i`` instead of its pinned device type: its placed device when
    placement ran and put it on another type, else CPU when a CPU kernel accepts it (every task has a
    CPU); None when soft placement cannot help (no kernel elsewhere either: the session still fails)."""
    devices = ctx.devices
    if devices is not None:
        placed = parsed(devices[i])
        if placed is not None and placed.type is not None and placed.type.upper() != requested.upper():
            return f"on {devices[i]}"
    if requested.upper() != "CPU":
        try:
            if table.kernel_support(ctx.graph.node_def(i), "CPU") is True:
                return "on its task's CPU"
        except Exception:  # noqa: BLE001 - unknown: do not claim soft placement saves it
            return None
    return None
