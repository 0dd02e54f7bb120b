"""PV003 dangling-input: an input names a node that does not exist, or an output it does not have."""

from __future__ import annotations

from placeviz.lint import Rule

RULE = Rule(
    id="PV003",
    name="dangling-input",
    severity="error",
    summary="A node's input names a missing node, an output index the producer does not have, or is malformed.",
    integrity=True,
    ignorable=False,  # TensorFlow cannot import the graph: there is nothing to accept per node
    doc="""\
## What it does
Checks every input string of every node (`name`, `name:k`, `^name`): the named node must exist,
`k` must be a number, and the producer must have an output `k` (its op's output count from the op
table, for the node's attrs). One finding per bad input, at the consuming node.

## Why it matters
TensorFlow cannot import such a GraphDef (`Node 'x': Unknown input node 'y'`, or `Connecting to
invalid output 3 of source node y which has 2 outputs`), so the job fails at start-up on every
task. It happens when a GraphDef is pruned or edited by hand (a node removed, its consumers not),
or when a producer's op changed its outputs.

## How it is detected
Names are resolved against every node name; output indices against the producer's output count
(`placeviz ops show OP`), for ops the table knows. A graph with a missing producer cannot be
indexed, so the other rules do not run on it; every dangling input is reported at once.

## Example
```
node { name: "loss" op: "Mean" input: "logits/BiasAdd" input: "Const" }   # no node "logits/BiasAdd"
```

## Fix
Restore the producer, or rewire/remove the input. To cut a graph down, use
`tf.compat.v1.graph_util.extract_sub_graph`, which keeps every node the kept ones need.

## References
- `tensorflow/core/graph/graph_constructor.cc` (input validation on import)
""",
    references=("tensorflow/core/graph/graph_constructor.cc",),
)


def check(ctx):
    raw = ctx.raw
    if raw.graph is None:
        yield from _check_strings(ctx)
    else:
        yield from _check_slots(ctx)


def _check_strings(ctx):
    """The graph could not be indexed: resolve every input string ourselves."""
    raw = ctx.raw
    names = set(raw.names)
    index = raw.index
    for i in range(len(raw)):
        for text in raw.input_strings(i):
            src, slot = _parse(text)
            if src is None:
                yield ctx.raw_finding(RULE, i, f"{raw.names[i]} has a malformed input {text!r}: the output index "
                                           "after ':' must be a number; fix or remove the input")
            elif src not in names:
                yield ctx.raw_finding(RULE, i, f"input {text!r} of {raw.names[i]} ({raw.ops[i]}) names no node "
                                           f"{src!r}: TensorFlow cannot import the graph; restore {src} or remove "
                                           "the input (a pruned or hand-edited GraphDef?)")
            elif slot > 0:
                message = _slot_problem(ctx, index[src], slot, text, raw.names[i])
                if message:
                    yield ctx.raw_finding(RULE, i, message, related=[index[src]])


def _check_slots(ctx):
    """The graph is indexed (names resolve): only output indices can still be wrong."""
    import numpy as np

    graph = ctx.raw.graph
    in_src, in_dst, in_slot = graph.edge_arrays
    candidates = np.flatnonzero(in_slot > 0)  # the edges reading an output other than 0
    for src, dst, slot in zip(in_src[candidates].tolist(), in_dst[candidates].tolist(), in_slot[candidates].tolist(),
                              strict=True):
        text = f"{graph.names[src]}:{slot}"
        message = _slot_problem(ctx, src, slot, text, graph.names[dst])
        if message:
            yield ctx.raw_finding(RULE, dst, message, related=[src])


def _slot_problem(ctx, src: int, slot: int, text: str, consumer: str) -> str | None:
    count = _output_count(ctx, src)
    if count is None or slot < count:
        return None
    raw = ctx.raw
    return (f"input {text!r} of {consumer} reads output {slot} of {raw.names[src]} ({raw.ops[src]}), which has "
            f"{count} output{'s' if count != 1 else ''}: TensorFlow cannot import the graph; read an existing "
            "output or fix the producer's attrs")


def _output_count(ctx, i: int) -> int | None:
    cache = ctx.rule_cache.setdefault("PV003.outputs", {})  # node id -> its output count, or None
    if i in cache:
        return cache[i]
    node = ctx.raw.node_def(i)
    count = None
    try:
        types = ctx.op_table.output_types(node)
    except Exception:  # noqa: BLE001 - attrs the op needs are missing: another problem, not this rule's
        types = None
    if types is not None:
        count = len(types)
    else:
        for f in ctx.raw.library.function:
            if f.signature.name == node.op:
                count = len(f.signature.output_arg)
                break
    cache[i] = count
    return count


def _parse(text: str) -> tuple[str | None, int]:
    if text.startswith("^"):
        return text[1:], -1
    name, sep, tail = text.partition(":")
    if not sep:
        return name, 0
    if not tail.isdigit():
        return None, 0
    return name, int(tail)
