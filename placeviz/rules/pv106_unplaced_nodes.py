"""PV106 unplaced-nodes: nodes without any device in a graph built for a cluster."""

from __future__ import annotations

from placeviz.graph import CONTROL
from placeviz.lint import Rule
from placeviz.rules._common import effective_devices, is_distributed, nodes_by_device, placer_result

RULE = Rule(
    id="PV106",
    name="unplaced-nodes",
    severity="info",
    summary="In a graph built for a cluster, a stateful or source op has no device and nothing binds it to a placed node.",
    doc="""\
## What it does
In a graph whose devices name cluster jobs, reports stateful ops (variables, tables, queues, ...)
and source ops (no data input) with an empty device that are not bound by `_class` colocation to a
node that has one. Nodes colocated with such a node (its initializer,
`read`, `Assign`) are not reported separately.

## Why it matters
TF places such nodes at session start: next to their ref/resource consumers, or on the session's
own task (the worker running the client). So where they run depends on which task opens the
session and what they are connected to, not on the program. It usually means the op was created
outside the `replica_device_setter` scope (see PV201 for variables).

## How it is detected
Stateful (op-facts table) or without data inputs; empty requested device; the node's `_class`
names only itself, and no consumer with a device is bound to it by a ref or resource edge (TF
colocates a variable or TensorArray handle with the ops that use it); ops reading a ref or
resource through such an edge are never reported, their variable is. The edges are the ones
placeviz's copy of TF's placer joined: a data edge into a ref or resource input, except into
the ops that only forward a resource (`StatefulPartitionedCall`, `PartitionedCall`, `IdentityN`,
dataset ops), which TF places on their own. The message gives the device TF picks for it.

## Example
```python
bias = tf.compat.v1.get_variable("bias", [10])      # before `with tf.device(setter):`
```

## Fix
Create the op inside the device scope, or pin it explicitly.

## References
- `tensorflow/core/common_runtime/placer.cc`;
  `tensorflow/core/common_runtime/colocation_graph.cc` (`ColocateResourceAndRefEdges`);
  `tensorflow/core/common_runtime/input_colocation_exemption_registry.cc`
""",
)


def _ref_edge_ends(ctx) -> tuple[set[int], set[int]]:
    """(consumers, anchored producers) of the ref and resource edges TF's placer colocates, as
    placeviz's placer found them (:attr:`placeviz.placement.placer.Placement.ref_edges`: placer.cc
    joins both ends of a data edge into a ref or resource input, except into the ops of
    ``EXEMPT_FROM_RESOURCE_COLOCATION``): every consumer, and the producers with a consumer that
    has a device. Both empty when there is no placement to read (TF's placer rejects the graph
    even with soft placement)."""
    cache = ctx.rule_cache
    if "PV106.ref_edges" not in cache:
        placement = placer_result(ctx)
        edges = placement.ref_edges if placement is not None else []
        devices = ctx.graph.devices
        cache["PV106.ref_edges"] = ({dst for _, dst in edges}, {src for src, dst in edges if devices[dst]})
    return cache["PV106.ref_edges"]


def _anchored(ctx, i: int) -> bool:
    """True when TF's placer decides node ``i``'s device through a ref or resource edge: an op
    reading a ref or resource goes where the variable (or handle) is, so only the variable is
    reported; a variable or TensorArray handle goes where a placed op using it is."""
    consumers, anchored = _ref_edge_ends(ctx)
    return i in consumers or i in anchored


def check(ctx):
    if not is_distributed(ctx):
        return
    table = ctx.op_table
    if table is None:
        from placeviz.ops import load_op_table

        table = load_op_table()
    g = ctx.graph
    devices = effective_devices(ctx)
    located = g.colocated_names
    for i in nodes_by_device(ctx, g.devices).get("", ()):
        others = [g.index[n] for n in located.get(i, ()) if n != g.names[i] and n in g.index]
        if others:
            continue  # colocated: reported at the node it follows (if that one is unplaced)
        if not (table.is_stateful(g.ops[i]) or not any(slot != CONTROL for _, slot in g.inputs_of(i))):
            continue  # a stateless op with inputs: where it runs is decided per step, it holds nothing
        if _anchored(ctx, i):
            continue
        where = devices[i] or "a device chosen at session start"
        yield ctx.finding(
            RULE, i,
            f"{g.ops[i]} {g.names[i]!r} has no device in a graph built for a cluster; TF places it on {where} "
            "(created outside the device setter scope?)",
            suggestion=f"create {g.names[i]!r} inside the replica_device_setter scope or pin it explicitly",
        )
