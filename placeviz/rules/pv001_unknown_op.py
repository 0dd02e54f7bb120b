"""PV001 unknown-op: a node's op type is not registered in the TensorFlow the op table describes."""

from __future__ import annotations

from placeviz.lint import Rule

RULE = Rule(
    id="PV001",
    name="unknown-op",
    severity="error",
    summary="A node uses an op type that TensorFlow's op registry (placeviz's op table) does not know.",
    integrity=True,
    doc="""\
## What it does
Finds op types used by the graph (and by the bodies of its function library) that are neither in
the op table generated from TensorFlow's op registry nor functions defined in the graph's own
library. One finding per unknown op type, at its first node; the others are listed as related.

## Why it matters
`tf.import_graph_def`, `tf.compat.v1.train.import_meta_graph` and a worker's graph registration all
look every op up in the registry; an unknown one fails with `Op type not registered 'X' in binary
running on ...`, on every task, at start-up. Grappler's `ValidateGraphDefAgainstOpRegistry` makes the
same check. The usual causes: a custom op whose library was not loaded, a graph exported by a newer
TensorFlow, or a hand-edited GraphDef.

## How it is detected
`NodeDef.op` of every node (and of every node in `library.function[*].node_def`) against the op table
(`placeviz ops show OP`); an op naming a function in `library.function` is a function call, not an
unknown op. A node with an empty op is reported too.

## Example
```
node { name: "lookup" op: "MyHashTableLookup" input: "table" input: "ids" }
```

## Fix
Load the op library before importing (`tf.load_op_library("my_ops.so")`) on every task, or export
the graph with the TensorFlow version that runs it. If placeviz's table is older than your
TensorFlow, regenerate it with `placeviz ops generate`. Op types your own libraries register (and
that every task loads) can be declared, which silences this rule for them:

```toml
[tool.placeviz.lint.thresholds]
custom-ops = ["MyHashTableLookup"]
```

## References
- `tensorflow/core/grappler/verifiers/structure_verifier.cc` (`ValidateGraphDefAgainstOpRegistry`)
""",
    references=("tensorflow/core/grappler/verifiers/structure_verifier.cc",),
)

RELATED_SHOWN = 10


def check(ctx):
    raw, table = ctx.raw, ctx.op_table
    library = raw.library
    functions = {f.signature.name for f in library.function}
    functions |= set(ctx.threshold("custom-ops", ()))  # registered by the user's op libraries
    version = getattr(table, "tf_version", "") or "?"
    unknown = sorted(op for op in set(raw.ops) if op not in table and op not in functions)
    for op in unknown:
        ids = [i for i, o in enumerate(raw.ops) if o == op]
        name = raw.names[ids[0]]
        device = raw.devices[ids[0]] or "no device"
        if not op:
            message = (f"node {name} ({device}) has no op type{_more(ids)}: the GraphDef is incomplete; "
                       "re-export it")
        else:
            message = (f"op type {op!r} of {name} ({device}){_more(ids)} is not registered in TensorFlow "
                       f"{version}: importing the graph fails with \"Op type not registered\"; load the op "
                       "library that defines it (tf.load_op_library) on every task, or export the graph "
                       "with the TensorFlow that runs it")
        yield ctx.raw_finding(RULE, ids[0], message, related=ids[1:1 + RELATED_SHOWN])
    for function in library.function:
        for node in function.node_def:
            if node.op not in table and node.op not in functions:
                yield ctx.raw_finding(RULE, None, f"function {function.signature.name}: node {node.name} uses op "
                                              f"type {node.op!r}, which TensorFlow {version} does not register; "
                                              "load its op library or re-export the function")


def _more(ids: list[int]) -> str:
    return f" and {len(ids) - 1} more node(s)" if len(ids) > 1 else ""
