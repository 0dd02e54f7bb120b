"""Device view: one cluster per job and device, ops collapsed by name scope to a box budget.

Every box says how many ops it holds and of which kinds (a striped fill shows the mix: variables,
updates, compute...). Edges between boxes are bundled per pair of boxes; an edge that crosses
devices is red and carries the tensors and bytes one training step sends over it (from the
partitioner's ``_Send``/``_Recv`` plan). On dense pictures the labels move into tooltips, because
edge labels multiply ``dot``'s cost 8-26x (``docs/architecture.md``, "... a view"); the line width still shows the
amount. Each PS cluster's label shows its share of the variable bytes as a bar.
"""

from __future__ import annotations

import time
from collections import Counter

from placeviz.devices import job_of
from placeviz.render.collapse import Collapse, collapse, quotient_edges
from placeviz.render.context import ViewContext, pen_width
from placeviz.render.diagram import Box, Cluster, Diagram, Edge, LegendItem
from placeviz.render.labels import name_boxes
from placeviz.render.overview import TRAFFIC_COLOR, job_clusters
from placeviz.render.roles import ROLE_COLOR, ROLE_LABEL, ROLE_ONE, ROLE_SHORT, ROLES, striped_fill
from placeviz.sizes import transfers_text

EDGES_PER_BOX = 2.5
"""At most this many edges per box: a 426-box view with 1,675 edges takes dot 5 s even with limits
(``docs/architecture.md``, "... a view"); the weakest bundles (fewest edges, no traffic) are dropped first."""
LABELLED_CROSS_EDGES = 40
"""Cross-device bundles get a text label only when there are at most this many of them."""
FOCUS_COLOR = "#d62728"


def group_box(ctx: ViewContext, group, key, cluster, counts: Counter, name: str) -> Box:
    """The box of one collapsed group (or single op): label, striped fill by role, tooltip.

    ``name``: the box's name in its picture (:func:`placeviz.render.labels.name_boxes`)."""
    g = ctx.graph
    names, ops = g.names, g.ops
    if group.is_op:
        i = group.members[0]
        role = ctx.roles[ops[i]]
        label = f"{name}\n{ops[i]}"
        tip = f"{names[i]} ({ops[i]}) on {ctx.devices[i]}"
        return Box(key, label, cluster=cluster, fill=ROLE_COLOR[role], tooltip=tip,
                   shape="cylinder" if role == "variable" else "box")
    n = len(group.members)
    kinds = " · ".join(f"{c:,} {ROLE_SHORT[r]}" for r, c in sorted(counts.items(), key=lambda rc: (-rc[1], rc[0]))[:3])
    scopes = f" ({group.scopes:,} scopes)" if group.scopes > 1 else ""
    label = f"{name}{scopes}\n{n:,} ops: {kinds}"
    top_ops = ctx.top_ops(group, 6)
    tip = (f"{group.label(names)}{scopes} on {group.owner}: {n:,} ops; "
           + ", ".join(f"{c:,} {(ROLE_ONE if c == 1 else ROLE_LABEL)[r]}" for r, c in sorted(counts.items()))
           + "; top op types: " + ", ".join(f"{op} {c:,}" for op, c in top_ops))
    # Only plain rectangles take a striped fill; a double border marks the box as a group.
    return Box(key, label, cluster=cluster, fill=striped_fill(counts), tooltip=tip, peripheries=2)


def device_clusters(ctx: ViewContext, d: Diagram) -> dict[str, tuple]:
    """Job clusters with one device cluster each; returns device -> its cluster key."""
    jobs = job_clusters(ctx)
    d.clusters.extend(jobs.values())
    per_device = ctx.variables_per_device
    ps_total = sum(b for dev, (_, b) in per_device.items() if job_of(dev) == "ps")
    out = {}
    for dev in ctx.device_list:
        job = job_of(dev) or ""
        n_vars, n_bytes = per_device.get(dev, (0, 0))
        label = f"{ctx.device_label(dev)}: {ctx.ops_per_device[dev]:,} ops"
        if n_vars:
            label += f"\nvariables {ctx.variable_bytes_text(dev)} ({n_vars:,})"
            if job == "ps" and ps_total:
                share = n_bytes / ps_total
                filled = round(share * 10)
                label += f"  [{'#' * filled}{'-' * (10 - filled)}] {100 * share:.0f}% of PS bytes"
        key = ("dev", dev)
        d.clusters.append(Cluster(key, label, parent=jobs[job].key, fill="#ffffff", border=ctx.colors[dev],
                                  tooltip=dev))
        out[dev] = key
    return out


def name_clusters(ctx: ViewContext, d: Diagram, groups, clusters: dict[str, tuple]) -> list[str]:
    """Distinct box names for ``groups``; each device cluster's label says its common scope once."""
    names, prefixes = name_boxes(groups, ctx.graph.names, lambda grp: clusters[grp.owner],
                                 lambda grp: ctx.device_label(grp.owner))
    for cl in d.clusters:
        if cl.key in prefixes:
            cl.label += f"\nscope {prefixes[cl.key]}"
    return names


def build_devices(ctx: ViewContext, budget: int, focus: int | None = None) -> Diagram:
    g = ctx.graph
    d = Diagram("devices", f"{ctx.pipe.model.source}: ops per device, collapsed by name scope "
                           f"({len(g):,} ops)")
    started = time.perf_counter()
    c = collapse(g.names, range(len(g)), ctx.devices, budget, memo=ctx.collapse_memo("devices"))
    d.stats["collapse_seconds"] = time.perf_counter() - started
    clusters = device_clusters(ctx, d)
    keys = [("box", ctx.devices[grp.members[0]], b) for b, grp in enumerate(c.groups)]
    box_names = name_clusters(ctx, d, c.groups, clusters)
    for b, grp in enumerate(c.groups):
        box = group_box(ctx, grp, keys[b], clusters[grp.owner], ctx.role_counts(grp), box_names[b])
        if focus is not None and c.box_of[focus] == b:
            box.border, box.penwidth = FOCUS_COLOR, 3.0
        d.boxes.append(box)
    d.node_box, d.group_keys, d.groups = c.box_of, keys, c.groups
    add_edges(ctx, d, c, keys, budget)
    d.notes.append(ctx.step_note())
    if c.refused:
        d.notes.append(f"{len(c.groups):,} boxes for {len(g):,} ops (budget --max-nodes {budget})")
    d.legend = role_legend(ctx) + [
        LegendItem("tensors crossing devices (width: bytes per step)", fill=TRAFFIC_COLOR, line="bold"),
        LegendItem("edges across devices the step does not send", fill=TRAFFIC_COLOR, line="dashed"),
        LegendItem("data edges within a device", fill="#777777", line="solid"),
        LegendItem("control-only edges", fill="#777777", line="dashed")]
    d.stats["build_seconds"] = time.perf_counter() - started
    return d


def role_legend(ctx: ViewContext) -> list[LegendItem]:
    """The roles of the graph's ops, in legend order."""
    return [LegendItem(ROLE_LABEL[r], fill=ROLE_COLOR[r]) for r in ROLES if r in ctx.roles_present]


def add_edges(ctx: ViewContext, d: Diagram, c: Collapse, keys: list, budget: int) -> None:
    """Bundle graph edges per pair of boxes; attach each step's transfers to the bundles they use."""
    g = ctx.graph
    box_of = c.box_array if c.box_array is not None else c.box_of
    bundles = quotient_edges(g, range(len(g)), box_of)
    traffic = ctx.transfers_per_pair(box_of)
    owner = [grp.owner for grp in c.groups]
    cross = [k for k in bundles if owner[k[0]] != owner[k[1]]]
    label_cross = sum(1 for k in cross if k in traffic) <= LABELLED_CROSS_EDGES
    top_bytes = max((r[1] for r in traffic.values()), default=0)
    top_count = max((sum(r) for r in bundles.values()), default=0)
    edges = []
    for (a, b), (data, control) in bundles.items():
        n = data + control
        if owner[a] != owner[b]:
            tensors, nbytes, unknown, control_sent = traffic.get((a, b), (0, 0, 0, 0))
            if tensors:
                text = transfers_text(tensors, nbytes, unknown, control_sent)
            else:
                text = f"{n:,} edge{'s' if n != 1 else ''}, not sent in the step"
            tip = f"{owner[a]} -> {owner[b]}: {text} ({data:,} data, {control:,} control graph edges)"
            # Only bundles the step really sends get a label; the others (init, save...) a tooltip.
            edges.append(Edge(keys[a], keys[b], label=text.replace(", ", "\n") if label_cross and tensors else "",
                              tooltip=tip, color=TRAFFIC_COLOR, style="solid" if tensors else "dashed",
                              penwidth=pen_width(nbytes, top_bytes, 1.2, 6.0) if tensors else 0.8,
                              priority=1e15 + nbytes + n, weight=1))
        else:
            edges.append(Edge(keys[a], keys[b], tooltip=f"{data:,} data, {control:,} control edges",
                              color="#777777", style="solid" if data else "dashed",
                              penwidth=pen_width(n, top_count, 0.8, 3.0), priority=n, weight=2))
    limit = max(20, int(EDGES_PER_BOX * len(c.groups)))
    if len(edges) > limit:
        edges.sort(key=lambda e: -e.priority)
        dropped = edges[limit:]
        edges = edges[:limit]
        d.notes.append(f"{len(dropped):,} of the weakest edge bundles not drawn (kept {limit:,}); "
                       "cross-device bundles are kept first")
    if cross and not label_cross:
        d.notes.append(f"{len(cross):,} cross-device bundles: tensors and bytes per step are in their tooltips")
    elif any(k not in traffic for k in cross):
        d.notes.append("dashed red: edges across devices that one step does not send (init, save...)")
    d.edges = edges
    d.stats.update(boxes=len(c.groups), bundles=len(bundles), edges=len(edges), cross=len(cross))
