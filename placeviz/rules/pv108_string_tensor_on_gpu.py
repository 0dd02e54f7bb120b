"""PV108 string-tensor-on-gpu: an op producing DT_STRING tensors is pinned to a GPU."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import nodes_by_device, parsed

DT_STRING = 7

RULE = Rule(
    id="PV108",
    name="string-tensor-on-gpu",
    severity="warning",
    summary="An op producing string tensors is pinned to a GPU.",
    doc="""\
## What it does
Reports nodes explicitly pinned to a GPU that have a `DT_STRING` output.

## Why it matters
GPUs have no string kernels: string ops (decoding, parsing, summaries, file names, lookups by key)
either fail to place (`no supported kernel for GPU devices is available`) or, with soft placement,
run on CPU anyway; the few that have GPU registrations keep strings in host memory. The pin is at
best useless and often a placement failure. This complements PV107, which judges GPU kernels only
when the op table comes from a build with all GPU kernels (a CUDA build), and which names the
string ops that have no GPU kernel at all.

## How it is detected
Requested device type `GPU` and an output of type `DT_STRING` (from the op-facts table and the
node's attrs).

Not reported under soft placement (`--soft-placement`, i.e. the program's session runs with
`ConfigProto(allow_soft_placement=True)`): TF's placer then puts an op on CPU when "there's no
GPU implementation for the OP" or no GPU is known (`tensorflow/core/protobuf/config.proto`,
`allow_soft_placement`), and an op that does have a GPU kernel keeps its string tensors in host
memory. Either way the program runs as
written: multi-GPU tower programs (`cifar10_multi_gpu_train.py`) rely on exactly this for the
summaries they build inside `tf.device('/gpu:%d' % i)`.

## Example
```python
with tf.device("/gpu:0"):
    tf.compat.v1.summary.scalar("loss", loss)
```

Quiet with soft placement (the summary op runs on CPU):
```python
config = tf.compat.v1.ConfigProto(allow_soft_placement=True)   # lint with --soft-placement
```

## Fix
Build input parsing and summaries outside the GPU device scope (`tf.device("/cpu:0")`), or run the
session with `allow_soft_placement=True` (and lint with `--soft-placement`).

## References
- Humbatova et al., ICSE 2020 ("unsupported operations on CUDA tensors"); tensorflow/tensorflow#22476
- `tensorflow/core/protobuf/config.proto` (`allow_soft_placement`)
""",
    references=("tensorflow/tensorflow#22476",),
)


def check(ctx):
    if ctx.soft_placement:
        return  # TF's placer moves string ops without a GPU kernel to CPU; the others use host memory
    table = ctx.op_table
    if table is None:
        from placeviz.ops import load_op_table

        table = load_op_table()
    g = ctx.graph
    on_gpu = []
    for d, ids in nodes_by_device(ctx, g.devices).items():
        if not d or "gpu" not in d.lower():
            continue
        p = parsed(d)
        if p is not None and p.type is not None and p.type.upper() == "GPU":
            on_gpu.extend(ids)
    for i in sorted(on_gpu):
        d = g.devices[i]
        try:
            out = table.output_types(g.node_def(i))
        except Exception:  # noqa: BLE001
            continue
        if out and DT_STRING in out:
            yield ctx.finding(
                RULE, i,
                f"{g.ops[i]} {g.names[i]!r} produces string tensors but is pinned to {d!r}: GPUs have no string "
                "kernels, so placement fails or the op runs on CPU anyway",
                suggestion=f"create {g.names[i]!r} under tf.device('/cpu:0') (or without a GPU pin)",
            )
