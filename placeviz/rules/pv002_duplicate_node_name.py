"""PV002 duplicate-node-name: two nodes of the GraphDef share a name."""

from __future__ import annotations

from collections import Counter

from placeviz.lint import Rule

RULE = Rule(
    id="PV002",
    name="duplicate-node-name",
    severity="error",
    summary="Two or more nodes of the GraphDef have the same name.",
    integrity=True,
    ignorable=False,  # TensorFlow cannot import the graph: there is nothing to accept per node
    doc="""\
## What it does
Finds node names used by more than one node. One finding per name, at its second node.

## Why it matters
A node name is the node's identity: inputs, colocation (`loc:@name`), fetches and checkpoints
refer to it. TensorFlow refuses such a GraphDef (`Node 'x' is not unique` on import; Grappler's
`VerifyNoDuplicateNodeNames`), so the job fails before the first step. `tf.Graph` always makes
names unique, so a duplicate comes from editing or merging GraphDefs by hand (concatenating two
exports, renaming with a script).

## How it is detected
`NodeDef.name` of every node, counted. Other rules do not run on such a graph (it cannot be
indexed); placeviz reports every duplicated name at once instead of stopping at the first.

## Example
Two exports merged with `graph_def.node.extend(other.node)`, both holding `global_step`.

## Fix
Import one graph under a scope (`tf.import_graph_def(other, name="tower1")`) instead of
concatenating protos, or rename the clashing nodes *and* every input that refers to them.

## References
- `tensorflow/core/grappler/verifiers/structure_verifier.cc` (`VerifyNoDuplicateNodeNames`)
""",
    references=("tensorflow/core/grappler/verifiers/structure_verifier.cc",),
)


def check(ctx):
    raw = ctx.raw
    if raw.graph is not None:  # the graph was indexed: names are unique
        return
    counts = Counter(raw.names)
    duplicated = {name for name, n in counts.items() if n > 1}
    positions: dict[str, list[int]] = {}
    for i, name in enumerate(raw.names):
        if name in duplicated:
            positions.setdefault(name, []).append(i)
    for name, ids in positions.items():
        ops = ", ".join(f"#{i} {raw.ops[i]}" + (f" on {raw.devices[i]}" if raw.devices[i] else "") for i in ids[:5])
        yield ctx.raw_finding(
            RULE, ids[1],
            f"{len(ids)} nodes are named {name!r} ({ops}): TensorFlow refuses the GraphDef (node names must be "
            "unique); rename all but one and the inputs that mean them, or import one graph under a name scope "
            "instead of concatenating GraphDefs")
