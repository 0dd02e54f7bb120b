"""What the HTML report's side panel says about a clicked op: why it landed there, what it sends.

The panel answers, for one op, the two questions a reader clicks a box for: *why is it on this
device* (the text ``placeviz analyze --explain NODE`` prints: the setter's rule, the requested
device, the placer's reason, the colocation group; ``placeviz/placement/placer.py`` mirrors
``tensorflow/core/common_runtime/placer.cc``) and *what crosses the network because of it* (the
step's ``_Send``/``_Recv`` transfers from the partitioner, as in
``tensorflow/core/graph/graph_partition.cc``).

Explaining an op walks its colocation group (linear in the graph), so a report explains every op
of a graph up to :data:`EXPLAIN_ALL_UP_TO` ops and, above that, the ops a reader can click in a
picture (single-op boxes), the variables and the ops that send or receive, at most
:data:`EXPLAIN_AT_MOST` and fewer on bigger graphs (:data:`EXPLAIN_SCAN`); for the others the
panel gives the command that explains them.
"""

from __future__ import annotations

from placeviz.placement.explain import explain_lines
from placeviz.render.context import ViewContext

EXPLAIN_ALL_UP_TO = 2000
EXPLAIN_AT_MOST = 300
EXPLAIN_SCAN = 3_000_000
"""Ops scanned in all (explained ops x graph size): about 1 s; a 50k-op graph gets 60 explained."""
TRANSFERS_AT_MOST = 20000


def explain_text(e: dict) -> str:
    """An ``explain_node`` dict as the lines ``placeviz analyze --explain`` prints."""
    return "\n".join(explain_lines(e))


def explanations(ctx: ViewContext, clickable: set[int]) -> dict[int, str]:
    """Op id -> its ``--explain`` text, for the ops the module docstring says (empty unplaced)."""
    from placeviz.placement.explain import explain_node

    result = ctx.pipe.placement
    if result is None:
        return {}
    g = ctx.graph
    if len(g) <= EXPLAIN_ALL_UP_TO:
        ids = list(range(len(g)))
    else:
        from placeviz.op_kinds import VARIABLE_OPS

        wanted = sorted(clickable) + [i for i, op in enumerate(g.ops) if op in VARIABLE_OPS]
        index = g.ids_of(dict.fromkeys(n for t in ctx.transfers for n in (t["src"], t.get("dst")) if n is not None))
        for t in ctx.transfers:
            wanted.extend(index[n] for n in (t["src"], t.get("dst")) if n in index)
        ids = list(dict.fromkeys(wanted))[:min(EXPLAIN_AT_MOST, EXPLAIN_SCAN // len(g))]
    return {i: explain_text(explain_node(result, g.names[i])) for i in ids}


def transfer_rows(ctx: ViewContext) -> list[list]:
    """The step's transfers as ``[src op, dst op, bytes or None, "control" or dtype+shape, src
    device, dst device]``; ops are ids (``-1``: not a graph op, e.g. the client's feed)."""
    shown = ctx.transfers[:TRANSFERS_AT_MOST]
    index = ctx.graph.ids_of(dict.fromkeys(n for t in shown for n in (t["src"], t.get("dst") or "")))
    out = []
    for t in shown:
        shape = t.get("shape")
        dims = "?" if shape is None else "[" + ",".join("?" if x is None else str(x) for x in shape) + "]"
        kind = "control" if t["slot"] == "control" else f"{t.get('dtype') or '?'} {dims}"
        out.append([index.get(t["src"], -1), index.get(t.get("dst") or "", -1), t["bytes"], kind,
                    t["src_device"], t["dst_device"]])
    return out
