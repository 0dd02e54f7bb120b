"""PV106 unplaced-nodes: nodes without any device in a graph built for a cluster."""

from __future__ import annotations

from placeviz.graph import CONTROL
from placeviz.lint import Rule
from placeviz.rules._common import colocation_groups, effective_devices, is_distributed, nodes_by_device

RULE = Rule(
    id="PV106",
    name="unplaced-nodes",
    severity="info",
    summary="In a graph built for a cluster, a stateful or source op has no device and nothing binds it to a placed node.",
    doc="""\
## What it does
In a graph whose devices name cluster jobs, reports stateful ops (variables, tables, queues, ...)
and source ops (no data input) with an empty device whose colocation group, as TF's placer forms
it, has no member with a device. The group is reported once, at its variable (or other state):
the nodes colocated with it (its initializer, `read`, `Assign`) are not reported separately.

## Why it matters
TF places such nodes at session start: next to their ref/resource consumers, or on the session's
own task (the worker running the client). So where they run depends on which task opens the
session and what they are connected to, not on the program. It usually means the op was created
outside the `replica_device_setter` scope (see PV201 for variables).

## How it is detected
The colocation groups are the ones placeviz's copy of TF's placer built (for a graph that is
not placed and was not given `--ps-tasks`, with soft placement on the cluster it names): every `_class` entry of
a node (all of them, not only the first), and every data edge into a ref or resource input
(except into the ops that only forward a resource: `StatefulPartitionedCall`, `PartitionedCall`,
`IdentityN`, dataset ops, which TF places on their own). A group in which some node requests a
device (after the import rewrite) runs there, so none of its nodes is reported, even when the
binding is indirect (a variable whose `Assign` is colocated with a placed op). In a group without
one, the candidates are the nodes with an empty requested device that are stateful (op-facts
table) or have no data inputs, except those reading a ref or resource through a joined edge (they
go where their variable goes); the one reported is the producer of a ref or resource edge (the
variable or handle) if there is one, else the first stateful candidate, else the first. The
message gives the device TF picks for it. When TF's placer rejects the graph even with soft
placement, there are no groups to read and the rule says nothing (the rules that explain the
rejection do).

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


def _unbound(ctx) -> dict[int, int]:
    """Group root -> the node PV106 reports for it, for every colocation group of TF's placer
    (:class:`placeviz.placement.placer.Placement`: ``_class`` entries, ref and resource edges)
    that no member binds to a device (:attr:`~placeviz.placement.placer.Placement.group_requested`)
    and that has a candidate: a node without a requested device, stateful or without data inputs,
    that does not read a ref or resource through an edge the placer joined
    (:attr:`~placeviz.placement.placer.Placement.ref_edges`: such an op goes where its variable
    goes). TF places the group as one, so it is reported once, at the node a user moves: a
    producer of a ref or resource edge (the variable or handle) first, then a stateful op, then
    any, each the first in id order (a ``get_variable``'s initializer ops, stateful
    ``RandomUniform`` included, come before the variable). Empty when there is no placement to
    read (TF's placer rejects the graph even with soft placement: the rules of the rejection say
    why)."""
    chosen: dict[int, tuple[int, int]] = {}  # root -> (rank, node)
    placement = colocation_groups(ctx)
    g = ctx.graph
    unplaced = nodes_by_device(ctx, g.devices).get("", ())
    if placement is not None and unplaced:
        table = ctx.op_table
        if table is None:
            from placeviz.ops import load_op_table

            table = load_op_table()
        root, bound = placement.group_root, placement.group_requested
        ends: tuple[set[int], set[int]] | None = None  # (consumers, producers): the edge list only when asked
        for i in unplaced:
            if bound[i]:
                continue
            stateful = table.is_stateful(g.ops[i])
            if not stateful and any(slot != CONTROL for _, slot in g.inputs_of(i)):
                continue  # a stateless op with inputs: where it runs is decided per step, it holds nothing
            if ends is None:
                edges = placement.ref_edges
                ends = {dst for _, dst in edges}, {src for src, _ in edges}
            consumers, producers = ends
            if i in consumers:
                continue
            r, rank = root[i], 0 if i in producers else 1 if stateful else 2
            if r not in chosen or rank < chosen[r][0]:
                chosen[r] = (rank, i)
    return {r: i for r, (_, i) in chosen.items()}


def check(ctx):
    if not is_distributed(ctx):
        return
    g = ctx.graph
    devices = effective_devices(ctx)
    for i in sorted(_unbound(ctx).values()):
        where = devices[i] or "a device chosen at session start"
        yield ctx.finding(
            RULE, i,
            f"{g.ops[i]} {g.names[i]!r} has no device in a graph built for a cluster; TF places it on {where} "
            "(created outside the device setter scope?)",
            suggestion=f"create {g.names[i]!r} inside the replica_device_setter scope or pin it explicitly",
        )
