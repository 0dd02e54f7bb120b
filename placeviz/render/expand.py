"""What is inside a collapsed box, drawn in advance so that the HTML report can open it on a click.

A picture that fits a screen (:mod:`placeviz.render.fit`) shows a big model as a few dozen boxes;
the reader then wants to open one of them, as TensorBoard's graph view opens a scope. The report
has no Graphviz at hand (it is one offline file, and Graphviz's WASM build is several MB), so the
next level is laid out here: for the largest group boxes of a view, the group's own ops are
collapsed again (:func:`placeviz.render.collapse.collapse` on the group's members alone goes one
or more name components deeper) and drawn as a small picture of its own, whose group boxes can be
opened in turn, breadth first, until :data:`MAX_EXPANSIONS` pictures are drawn.

All pictures of one view go to Graphviz in one ``dot`` run (``dot`` reads several graphs from its
input and writes one SVG document per graph), so opening boxes costs one process per view.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from placeviz.render.collapse import collapse, quotient_edges
from placeviz.render.context import ViewContext
from placeviz.render.devices import group_box
from placeviz.render.diagram import Diagram, Edge
from placeviz.render.dot import box_ids, to_dot
from placeviz.render.labels import name_boxes

MAX_EXPANSIONS = 40
"""Pictures of opened boxes per view: the biggest groups first (a few hundred KiB of SVG)."""
SUB_BUDGET = 30
"""Boxes per opened picture: what fits a screen when the scope's ops form a few chains."""
EDGES_PER_BOX = 2.5
_XML_START = re.compile(rb"<\?xml ")
_PAGE_ID = re.compile(rb'(<g )id="page\d+,\d+_')
"""From its second graph on, ``dot`` prefixes a graph's own SVG id with its page (``page0,1_``)."""


@dataclass
class Expansion:
    parent: str
    """SVG id of the box that opens this picture (``devices_n12``, ``devices_x3_n4``)."""
    diagram: Diagram
    svg: bytes = b""


def build_inside(ctx: ViewContext, group, name: str, title: str, budget: int = SUB_BUDGET) -> Diagram:
    """The ops of one collapsed ``group``, collapsed again to ``budget`` boxes, with their edges."""
    g = ctx.graph
    c = collapse(g.names, group.members, ctx.devices, budget)
    d = Diagram(name, title)
    keys = [("box", b) for b in range(len(c.groups))]
    names, prefixes = name_boxes(c.groups, g.names, lambda grp: (), lambda grp: ctx.device_label(grp.owner))
    if prefixes:
        d.notes.append(f"every box is in scope {prefixes[()]}")
    for b, grp in enumerate(c.groups):
        d.boxes.append(group_box(ctx, grp, keys[b], (), ctx.role_counts(grp), names[b]))
    bundles = quotient_edges(g, group.members, c.box_of)
    top = sorted(bundles.items(), key=lambda kv: (-sum(kv[1]), kv[0]))[:max(20, int(EDGES_PER_BOX * len(keys)))]
    for (a, b), (data, control) in sorted(top):
        d.edges.append(Edge(keys[a], keys[b], style="solid" if data else "dashed", color="#555555",
                            tooltip=f"{data:,} data, {control:,} control edges"))
    if len(top) < len(bundles):
        d.notes.append(f"{len(bundles) - len(top):,} of the weakest edge bundles not drawn")
    d.node_box, d.group_keys, d.groups = c.box_of, keys, c.groups
    return d


def plan_expansions(ctx: ViewContext, view: Diagram, limit: int = MAX_EXPANSIONS) -> list[Expansion]:
    """Pictures of the insides of ``view``'s largest group boxes, breadth first (see the module docstring)."""
    if not view.groups:
        return []
    out: list[Expansion] = []
    queue = deque([view])
    while queue and len(out) < limit:
        d = queue.popleft()
        groups = d.groups
        assert groups is not None  # ``view`` was checked above and build_inside sets every inner one's
        ids = box_ids(d)
        order = sorted(range(len(groups)), key=lambda k: -len(groups[k].members))
        for k in order:
            grp = groups[k]
            if len(out) >= limit:
                break
            if grp.is_op or len(grp.members) < 2:
                continue
            box = next(b for b in d.boxes if b.key == d.group_keys[k])
            title = f"inside {box.label.splitlines()[0]} on {grp.owner} ({len(grp.members):,} ops)"
            inner = build_inside(ctx, grp, f"{view.name}_x{len(out)}", title)
            if len(inner.boxes) < 2:
                continue  # nothing to open: the group cannot split
            out.append(Expansion(f"{d.name}_{ids[d.group_keys[k]]}", inner))
            queue.append(inner)
    return out


def lay_out_expansions(expansions: list[Expansion], run) -> None:
    """Every picture in one Graphviz run (``run(dot_text) -> svg bytes``), split per graph."""
    if not expansions:
        return
    data = run("\n".join(to_dot(e.diagram) for e in expansions))
    starts = [m.start() for m in _XML_START.finditer(data)]
    parts = [data[a:b] for a, b in zip(starts, [*starts[1:], len(data)], strict=True)]
    if len(parts) != len(expansions):
        raise ValueError(f"Graphviz wrote {len(parts)} pictures for {len(expansions)} graphs")
    for e, svg in zip(expansions, parts, strict=True):
        e.svg = _PAGE_ID.sub(b'\\1id="', svg, count=1)
