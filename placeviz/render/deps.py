"""Dependency view: the data and control dependencies around one op, coloured by device.

``--depth N`` shows N hops up (inputs) and down (consumers). Without it the view shows what
running the op really executes: its whole input closure (everything a ``session.run`` of it
runs), plus its direct consumers, collapsed by name scope to the box budget. The focus and its
direct neighbours always keep a box of their own. When the graph has SyncReplicas machinery,
ops only the chief's sync op runs (the worker's train op does not) are marked "chief only".
"""

from __future__ import annotations

import time
from collections import deque

from placeviz.render.collapse import collapse, quotient_edges
from placeviz.render.context import ViewContext, pen_width
from placeviz.render.diagram import Box, Diagram, Edge, LegendItem
from placeviz.render.labels import name_boxes
from placeviz.render.roles import ROLE_SHORT

PINNED_NEIGHBOURS = 24
"""At most this many direct inputs/consumers of the focus get their own box."""
CHIEF_BORDER = "#6a3d9a"
FOCUS_COLOR = "#d62728"
SHAPES = {"variable": "cylinder", "table": "cylinder", "queue": "cds", "update": "box", "sendrecv": "hexagon"}


def upstream(graph, start: list[int], depth: int | None) -> dict[int, int]:
    """Node -> hops, for everything ``start`` depends on (data and control) within ``depth``."""
    return _hops(start, depth, graph.in_start, graph.in_src)


def downstream(graph, start: int, depth: int) -> dict[int, int]:
    """Node -> hops, for everything that consumes ``start`` (data and control) within ``depth``."""
    out_start, out_dst, _ = graph.consumers
    return _hops([start], depth, out_start, out_dst)


def _hops(start: list[int], depth: int | None, edge_start, edge_node) -> dict[int, int]:
    """Breadth-first hops from ``start`` over CSR edges (node i's neighbours are
    ``edge_node[edge_start[i]:edge_start[i + 1]]``), up to ``depth`` (None: no limit)."""
    seen = {s: 0 for s in start}
    queue = deque(start)
    while queue:
        i = queue.popleft()
        h = seen[i]
        if depth is not None and h >= depth:
            continue
        for k in range(edge_start[i], edge_start[i + 1]):
            s = edge_node[k]
            if s not in seen:
                seen[s] = h + 1
                queue.append(s)
    return seen


def chief_only(ctx: ViewContext) -> set[int]:
    """Ops the chief's sync op runs that no worker train op runs (empty without sync machinery)."""
    m = ctx.pipe.machinery
    if m is None:
        return set()
    g = ctx.graph
    sync_ops = [q.sync_op for q in m.token_queues if q.sync_op is not None]
    worker_ops = [i for q in m.token_queues for i in q.worker_train_ops]
    if not sync_ops:
        return set()
    return set(upstream(g, sync_ops, None)) - set(upstream(g, worker_ops, None))


def build_deps(ctx: ViewContext, focus: int, depth: int | None, budget: int) -> Diagram:
    g = ctx.graph
    names = g.names
    up = upstream(g, [focus], depth)
    down = downstream(g, focus, 1 if depth is None else depth)
    nodes = sorted(set(up) | set(down))
    reach = "everything it runs" if depth is None else f"{depth} hop{'s' if depth != 1 else ''} up and down"
    d = Diagram("deps", f"dependencies of {names[focus]} ({g.ops[focus]} on {ctx.devices[focus]}): {reach}, "
                        f"{len(nodes):,} ops", rankdir="TB")
    neighbours = [i for i in nodes if up.get(i) == 1 or down.get(i) == 1][:PINNED_NEIGHBOURS]
    started = time.perf_counter()
    c = collapse(names, nodes, ctx.devices, budget, pinned=[focus, *neighbours], memo=ctx.collapse_memo("deps"))
    d.stats["collapse_seconds"] = time.perf_counter() - started
    chief = chief_only(ctx)
    keys = [("box", b) for b in range(len(c.groups))]
    box_names, prefixes = name_boxes(c.groups, names, lambda grp: (), lambda grp: ctx.device_label(grp.owner))
    if prefixes:
        d.notes.append(f"every box is in scope {prefixes[()]}")
    for b, grp in enumerate(c.groups):
        dev = grp.owner
        counts = ctx.role_counts(grp)
        if grp.is_op:
            i = grp.members[0]
            role = ctx.roles[g.ops[i]]
            label = f"{box_names[b]}\n{g.ops[i]}"
            shape = SHAPES.get(role, "box")
            tip = f"{names[i]} ({g.ops[i]}) on {dev}"
        else:
            kinds = " · ".join(f"{n:,} {ROLE_SHORT[r]}" for r, n in counts.most_common(3))
            label = f"{box_names[b]}\n{len(grp.members):,} ops: {kinds}"
            shape = "box3d"
            top = ctx.top_ops(grp, 5)
            tip = f"{grp.label(names)} on {dev}: " + ", ".join(f"{op} {n:,}" for op, n in top)
        box = Box(keys[b], label + f"\n{ctx.device_label(dev)}", fill=ctx.colors[dev], shape=shape, tooltip=tip)
        if chief and all(i in chief for i in grp.members):
            box.label += "\n[chief only]"
            box.peripheries, box.border = 2, CHIEF_BORDER
        if focus in grp.members:
            box.border, box.penwidth = FOCUS_COLOR, 3.0
        d.boxes.append(box)
    d.node_box, d.group_keys, d.groups = c.box_of, keys, c.groups
    bundles = quotient_edges(g, nodes, c.box_of)
    heaviest = max((a + b for a, b in bundles.values()), default=0)
    for (a, b), (data, control) in sorted(bundles.items()):
        d.edges.append(Edge(keys[a], keys[b], style="solid" if data else "dashed",
                            color="#333333" if data else "#888888", penwidth=pen_width(data + control, heaviest, 1.0, 4.0),
                            tooltip=f"{data:,} data, {control:,} control edges"))
    limit = max(30, int(2.5 * len(c.groups)))
    if len(d.edges) > limit:
        d.edges.sort(key=lambda e: -float(e.penwidth))
        d.notes.append(f"{len(d.edges) - limit:,} of the thinnest edge bundles not drawn")
        d.edges = d.edges[:limit]
    if c.refused:
        d.notes.append(f"collapsed by name scope to {len(c.groups):,} boxes (--max-nodes {budget})")
    d.legend = [LegendItem(f"on {ctx.device_label(dev)}", fill=ctx.colors[dev])
                for dev in sorted({grp.owner for grp in c.groups})]
    d.legend += [LegendItem("data dependency", fill="#333333", line="solid"),
                 LegendItem("control dependency", fill="#888888", line="dashed"),
                 LegendItem("focus", fill=FOCUS_COLOR, line="bold")]
    if chief:
        d.legend.append(LegendItem("chief only (double border): run by the sync op, not by workers",
                                   fill=CHIEF_BORDER, line="bold"))
    d.stats.update(boxes=len(c.groups), edges=len(d.edges), ops=len(nodes))
    return d


def default_focus(ctx: ViewContext) -> int | None:
    """The op a worker runs each step: the sync machinery's worker train op, else the train op."""
    g = ctx.graph
    m = ctx.pipe.machinery
    if m is not None:
        for q in m.token_queues:
            if q.worker_train_ops:
                return q.worker_train_ops[0]
    for name in ctx.pipe.model.collections.train_ops:
        i = g.id_of(name)
        if i is not None:
            return i
    return None
