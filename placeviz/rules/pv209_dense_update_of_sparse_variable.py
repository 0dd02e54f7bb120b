"""PV209 dense-update-of-sparse-variable: an embedding only gathered from gets a dense update."""

from __future__ import annotations

from placeviz.graph import CONTROL
from placeviz.lint import Rule
from placeviz.rules._common import (
    VARIABLE_OPS,
    effective_devices,
    fmt_bytes,
    is_restore_or_init,
    state_writers,
    value_consumers,
    variable_ids,
)

GATHER_OPS = frozenset({"Gather", "GatherV2", "ResourceGather", "GatherNd", "ResourceGatherNd"})
"""Reads of some rows: their gradient is IndexedSlices (only the rows read)."""

NON_COMPUTE_READERS = frozenset({
    "SaveV2", "Save", "SaveSlices", "IsVariableInitialized", "VarIsInitializedOp", "VariableShape",
    "Shape", "Size", "Rank", "DestroyResourceOp", "Assign", "AssignVariableOp",
})
"""Ops that touch a variable without reading its full value into the model."""

SPARSE_WRITE_PREFIXES = ("SparseApply", "ResourceSparseApply", "Scatter", "ResourceScatter")
"""Updates of some rows only (sparse optimizer applies, scatter ops)."""


def _dense_apply(op: str) -> bool:
    return op.startswith(("Apply", "ResourceApply")) or op in (
        "AssignSub", "AssignAdd", "AssignSubVariableOp", "AssignAddVariableOp")


RULE = Rule(
    id="PV209",
    name="dense-update-of-sparse-variable",
    severity="warning",
    summary="A variable the model only reads through gathers is updated densely (its gradient was densified).",
    doc="""\
## What it does
Finds variables whose only model reads are gathers (`embedding_lookup`: `Gather`/`GatherV2`/
`ResourceGather`), yet which neither they nor their optimizer slots get a sparse update: the
optimizer applies a dense gradient of the full table.

## Why it matters
The gradient of a gather is `IndexedSlices` (the rows looked up). When something densifies it
(`tf.convert_to_tensor` on the gradient, an op without a sparse gradient, a dense accumulator), TF
logs `Converting sparse IndexedSlices to a dense Tensor` and every worker sends the **whole table**
to the PS every step, and the PS updates every row: traffic and PS time grow with the vocabulary
instead of the batch.

## How it is detected
Consumers of the variable's value (through `read`/`ReadVariableOp`/`Identity`/`Enter`) other than
savers, initializers and its own updates are all gather ops; its writers (besides its initializer
and restore ops) include a dense update (`Apply*`, `ResourceApply*`, `AssignSub`, ...), and no
writer of it or of its slots (`<var>/...`) is a sparse one (`SparseApply*`, `Scatter*`).
(TF's sparse Adam updates the variable with a dense `AssignSub` but its slots with `ScatterAdd`:
not reported.)

## Example
```python
emb = tf.compat.v1.get_variable("emb", [100000, 16])
loss = f(tf.nn.embedding_lookup(emb, ids))
grads = [(tf.convert_to_tensor(g), v) for g, v in opt.compute_gradients(loss)]   # densifies
train_op = opt.apply_gradients(grads)
```

## Fix
Keep the gradient sparse: pass the `IndexedSlices` to `apply_gradients` as they are, clip with
`tf.clip_by_global_norm` (which keeps them sparse), and use sparse-capable optimizers.

## References
- vrenkens/nabu#43 (the densification warning in logs); TF `IndexedSlices` docs
""",
    references=("vrenkens/nabu#43",),
)


def _gathered_variables(ctx) -> list[int]:
    """Variables some gather op reads (its params input, through read/forwarding ops)."""
    g = ctx.graph
    found = set()
    for i in ctx.nodes_by_op(*GATHER_OPS):
        src = g.inputs_of(i)[0][0] if g.inputs_of(i) else None
        for _ in range(16):
            if src is None or g.ops[src] in VARIABLE_OPS:
                break
            if g.ops[src] not in _FORWARD_ONLY:
                src = None
                break
            data = [s for s, slot in g.inputs_of(src) if slot != CONTROL]
            src = data[0] if data else None
        if src is not None and g.ops[src] in VARIABLE_OPS:
            found.add(src)
    return sorted(found)


def check(ctx):
    g = ctx.graph
    candidates = _gathered_variables(ctx)
    if not candidates:
        return
    variables = variable_ids(ctx)
    names = {g.names[i] for i in variables}
    by_prefix: dict[str, list[int]] = {}
    for i in variables:
        parts = g.names[i].split("/")
        for k in range(1, len(parts)):
            prefix = "/".join(parts[:k])
            if prefix in names:
                by_prefix.setdefault(prefix, []).append(i)
    sizes = {v.name: v.bytes for v in ctx.analysis.variables}
    devices = effective_devices(ctx)
    for i in candidates:
        gathers, others = [], []
        for c, _via in value_consumers(ctx, i):
            op = g.ops[c]
            if op in GATHER_OPS:
                gathers.append(c)
            elif op not in NON_COMPUTE_READERS and op not in _FORWARD_ONLY:
                others.append(c)
        if not gathers:
            continue  # most variables: decided without looking for writers
        writers = [w for w in state_writers(ctx, i) if not is_restore_or_init(ctx, w, i)]
        dense = [w for w in writers if _dense_apply(g.ops[w])]
        if not dense or any(c not in writers for c in others):
            continue
        slot_writers = [w for s in by_prefix.get(g.names[i], ()) for w in state_writers(ctx, s)]
        if any(g.ops[w].startswith(SPARSE_WRITE_PREFIXES) for w in (*writers, *slot_writers)):
            continue
        name = g.names[i]
        yield ctx.finding(
            RULE, dense[0],
            f"{g.ops[dense[0]]} {g.names[dense[0]]!r} on {devices[dense[0]]} applies a dense gradient to "
            f"{name!r} ({fmt_bytes(sizes.get(name))}), which the model only reads through "
            f"{g.ops[gathers[0]]} {g.names[gathers[0]]!r}: the full table crosses the network and is "
            "updated every step instead of the rows looked up",
            related=[i, gathers[0]],
            suggestion=f"keep the gradient of {name!r} as IndexedSlices (do not convert it to a dense "
                       "tensor) so the optimizer uses its sparse apply",
        )


_FORWARD_ONLY = frozenset({"Identity", "RefIdentity", "ReadVariableOp", "Enter", "RefEnter", "Switch",
                           "RefSwitch", "Merge", "RefMerge", "Exit", "RefExit", "NextIteration",
                           "RefNextIteration", "Snapshot"})
