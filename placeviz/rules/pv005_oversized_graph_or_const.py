"""PV005 oversized-graph-or-const: the GraphDef nears protobuf's 2 GiB limit, or embeds huge constants."""

from __future__ import annotations

import os
from itertools import compress

from placeviz.lint import Rule

RULE = Rule(
    id="PV005",
    name="oversized-graph-or-const",
    severity="error",
    summary="The serialized GraphDef reaches protobuf's 2 GiB limit (error) or embeds a large Const tensor (warning).",
    integrity=True,
    doc="""\
## What it does
Reports an error when the serialized GraphDef is 2 GiB or more, a warning when it exceeds the
`graph-bytes` threshold (default 1 GiB), and a warning for every `Const` node whose tensor is
larger than `const-bytes` (default 10 MiB).

## Why it matters
A protocol buffer cannot exceed 2 GiB: exporting, saving a checkpoint's MetaGraphDef, or sending
the graph to the workers (`CreateSession`/`RegisterGraph`) fails with `Cannot serialize protocol
buffer of type tensorflow.GraphDef as the serialized size exceeds 2GB`. The usual cause is a large
NumPy array passed to `tf.constant` (or as an initial value), which is copied into the graph,
once per use, and sent to every task that runs it.

## How it is detected
`GraphDef.ByteSize()`, and the size of each `Const` node's `value` tensor (only for a `Const`
whose serialized NodeDef is itself over the limit: the tensor lies inside it). Thresholds:

```toml
[tool.placeviz.lint.thresholds]
graph-bytes = "1GiB"
const-bytes = "10MiB"
```

## Example
```python
embeddings = tf.constant(np.load("glove.npy"))   # 400k x 300 floats: 480 MB inside the graph
```

## Fix
Feed large arrays through a variable initialized from a placeholder (`initializer` fed once), a
`tf.data` pipeline or a checkpoint, not as constants.

## References
- "Cannot serialize protocol buffer ... exceeds 2GB": tensorflow/tensorflow#4291 (a `tf.constant` from a large array)
""",
    references=("tensorflow/tensorflow#4291",),
)

HARD_LIMIT = 2**31


def check(ctx):
    raw = ctx.raw
    soft = ctx.threshold_bytes("graph-bytes", "1GiB")
    size = _serialized_size(ctx, soft)
    if size is None:
        pass
    elif size >= HARD_LIMIT:
        yield ctx.raw_finding(RULE, None, f"the GraphDef serializes to {_human(size)}, at or over protobuf's 2 GiB limit: "
                                      "TensorFlow cannot export it or send it to the workers; move large constants "
                                      "out of the graph (variables fed once, tf.data, checkpoints)")
    elif size > soft:
        yield ctx.raw_finding(RULE, None, f"the GraphDef serializes to {_human(size)} (over graph-bytes {_human(soft)}): "
                                      "close to protobuf's 2 GiB limit; move large constants out of the graph",
                          severity="warning")
    limit = ctx.threshold_bytes("const-bytes", "10MiB")
    lengths = raw.node_lengths  # a Const whose whole NodeDef is within the limit cannot embed more
    for i in compress(range(len(raw.ops)), map("Const".__eq__, raw.ops)):
        if lengths is not None and lengths[i] <= limit:
            continue
        attr = raw.node_def(i).attr
        if "value" not in attr:
            continue
        tensor = attr["value"].tensor
        n = len(tensor.tensor_content) or tensor.ByteSize()
        if n > limit:
            device = raw.devices[i] or "no device"
            yield ctx.raw_finding(RULE, i, f"Const {raw.names[i]} ({device}) embeds {_human(n)} in the graph (over "
                                       f"const-bytes {_human(limit)}): it is copied to every task that runs it and "
                                       "counts toward the 2 GiB GraphDef limit; load it into a variable instead "
                                       "(initializer fed from a placeholder, or a checkpoint)", severity="warning")


def _serialized_size(ctx, soft: int) -> int | None:
    """The GraphDef's serialized size, or None when the model file is smaller than ``soft``.

    A model file (binary or text GraphDef, MetaGraphDef) is never smaller than the binary GraphDef
    it holds, so a small file needs no ``ByteSize()`` (a third of a second at 200k nodes).
    """
    path = ctx.model_path
    if os.path.isfile(path) and os.path.getsize(path) <= soft:
        return None
    return ctx.raw.serialized_bytes


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
