"""Turn a :class:`~placeviz.render.diagram.Diagram` into DOT text, deterministically.

Every element gets an SVG id prefixed with the view's name, so several views can be inlined in
one HTML page without clashing ids. Same diagram, same bytes: boxes are numbered ``n0, n1, ...`` in key order, clusters
``cluster_0, ...`` in key order, edges sorted by their endpoints' numbers, attributes written in a
fixed order. That is what lets the golden tests compare DOT text, and it keeps Graphviz's own
layout stable between runs (dot's result depends on input order).

The layout limits measured for ``docs/architecture.md`` ("... a view") are written into the DOT itself
(``mclimit``, ``nslimit``, ``nslimit1``, and ``splines=false`` above a few dozen boxes), so
running ``dot`` by hand on a ``.dot`` output behaves like ``placeviz render`` does.

Labels and tooltips carry model strings (names, op types, devices, file names), which are
untrusted: every one goes through :func:`text` (:func:`placeviz.escape.dot_string`, kept away
from the ``graphviz`` package's HTML-label pass-through), the legend's HTML-like label through
:func:`placeviz.escape.dot_html`. Identifiers, colours, shapes and styles are placeviz's own, and
no ``URL``/``href`` attribute is ever written, so the SVG Graphviz makes holds no link.
"""

from __future__ import annotations

import graphviz

from placeviz.escape import dot_html, dot_string
from placeviz.render.diagram import Box, Cluster, Diagram, Edge

LAYOUT_LIMITS = {"mclimit": "0.1", "nslimit": "1", "nslimit1": "1"}
"""Crossing-minimisation and network-simplex limits: a 930-op training graph goes from >120 s to
12 s with them, a 426-box collapsed view to 5 s (``docs/architecture.md``, "... a view")."""
SPLINES_OFF_ABOVE = 40
"""Above this many boxes edges are drawn straight (``splines=false``): spline routing can thrash on
dense graphs, while on small ones it costs nothing and keeps edges from crossing boxes."""
FONT = "Helvetica"


def _sortable(key: tuple) -> tuple:
    """Keys mix ints and strings; compare them by (kind, value) so sorting never fails."""
    return tuple((0, k, "") if isinstance(k, int) else (1, 0, str(k)) for k in key)


def text(value: str) -> str:
    """A label or tooltip: :func:`~placeviz.escape.dot_string` (quotes, backslashes, entities and
    control characters escaped; newlines are line breaks), marked ``nohtml`` so the ``graphviz``
    package quotes it even when it looks like ``<...>`` (which it would otherwise write as an
    HTML-like label, where ``<td href=...>`` is a link)."""
    return graphviz.nohtml(dot_string(value))


def _fmt(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


TITLE_WIDTH = 140
"""Characters per title or note line: a long note would otherwise set the picture's width."""


def _wrapped(lines: list[str]) -> list[str]:
    """Lines longer than :data:`TITLE_WIDTH` broken at spaces (and only there: a model string's
    other characters, newlines included, reach :func:`text` as they are)."""
    out = []
    for line in lines:
        current = ""
        for word in line.split(" "):
            if current and len(current) + 1 + len(word) > TITLE_WIDTH:
                out.append(current)
                current = word
            else:
                current = f"{current} {word}" if current else word
        out.append(current)
    return out


def box_ids(diagram: Diagram) -> dict:
    """Box key -> its DOT id (``n<k>``), numbered in key order."""
    return {b.key: f"n{i}" for i, b in enumerate(sorted(diagram.boxes, key=lambda b: _sortable(b.key)))}


def to_dot(diagram: Diagram) -> str:
    """The DOT text of ``diagram`` (see the module docstring for what makes it deterministic)."""
    ids = box_ids(diagram)
    g = graphviz.Digraph(diagram.name)
    attrs = {
        "rankdir": diagram.rankdir, "fontname": FONT, "fontsize": "11", "labelloc": "t", "labeljust": "l",
        "label": text("\n".join(_wrapped([diagram.title, *diagram.notes]))), "newrank": "true", "id": diagram.name,
        **LAYOUT_LIMITS, "outputorder": "edgesfirst", "nodesep": "0.25", "ranksep": "0.45",
    }
    if len(diagram.boxes) > SPLINES_OFF_ABOVE:
        attrs["splines"] = "false"
    attrs.update(diagram.graph_attrs)
    g.attr("graph", **attrs)
    g.attr("node", fontname=FONT, fontsize="10", margin="0.08,0.04")
    g.attr("edge", fontname=FONT, fontsize="10", arrowsize="0.6")

    clusters = sorted(diagram.clusters, key=lambda c: _sortable(c.key))
    cluster_ids = {c.key: f"cluster_{i}" for i, c in enumerate(clusters)}
    children: dict[tuple, list[Cluster]] = {}
    for c in clusters:
        children.setdefault(c.parent if c.parent in cluster_ids else (), []).append(c)
    boxes_in: dict[tuple, list[Box]] = {}
    for b in sorted(diagram.boxes, key=lambda b: _sortable(b.key)):
        boxes_in.setdefault(b.cluster if b.cluster in cluster_ids else (), []).append(b)

    _emit_clusters(g, (), diagram.name, children, cluster_ids, boxes_in, ids)
    if diagram.legend:
        g.node("legend", id=f"{diagram.name}_legend", label=_legend_label(diagram), shape="plaintext", margin="0")
    edges = sorted(diagram.edges, key=lambda e: (int(ids[e.src][1:]), int(ids[e.dst][1:]), e.style))
    for k, e in enumerate(edges):
        _emit_edge(g, e, ids, f"{diagram.name}_e{k}")
    return g.source


def _emit_clusters(container, key: tuple, name: str, children: dict, cluster_ids: dict, boxes_in: dict,
                   ids: dict) -> None:
    """The clusters inside cluster ``key`` (``()``: the top level), nested, then its boxes.

    A module function, not a closure that calls itself: such a closure is a reference cycle
    (the function holds the cell that holds the function), so everything it reached (the
    diagram, its groups, the name parts of every op they hold: 200k lists at 200k ops) stayed
    alive until the cyclic collector ran, which it did at the end of ``placeviz render``, for a
    full pass costing 0.3-0.4 s CPU at 200k ops."""
    for c in children.get(key, []):
        with container.subgraph(name=cluster_ids[c.key]) as sub:
            sub.attr(id=f"{name}_{cluster_ids[c.key]}", label=text(c.label), style="filled,rounded",
                     fillcolor=c.fill, color=c.border, tooltip=text(c.tooltip or c.label), fontsize="10",
                     **({"labelloc": "b"} if c.label_below else {}))
            _emit_clusters(sub, c.key, name, children, cluster_ids, boxes_in, ids)
    for b in boxes_in.get(key, []):
        _emit_box(container, b, ids[b.key], f"{name}_{ids[b.key]}")


def _emit_box(container, b: Box, node_id: str, svg_id: str) -> None:
    style = b.style
    fill = b.fill
    if ";" in fill:  # a role mix: "filled" would read the list as a two-colour gradient
        style = ",".join(["striped", *(s for s in style.split(",") if s not in ("filled", "striped"))])
    attrs = {"id": svg_id, "label": text(b.label), "shape": b.shape, "style": style, "fillcolor": fill,
             "color": b.border}
    if b.tooltip:
        attrs["tooltip"] = text(b.tooltip)
    if b.penwidth != 1.0:
        attrs["penwidth"] = _fmt(b.penwidth)
    if b.peripheries != 1:
        attrs["peripheries"] = str(b.peripheries)
    if b.font_color != "#000000":
        attrs["fontcolor"] = b.font_color
    container.node(node_id, **attrs)


def _emit_edge(g, e: Edge, ids: dict, svg_id: str) -> None:
    attrs = {"id": svg_id, "color": e.color}
    if e.label:
        # Padded: dot sets the labels of parallel edges side by side with no gap between them.
        attrs["label"] = text("\n".join(f"  {line}  " for line in e.label.split("\n")))
    if e.tooltip:
        attrs["tooltip"] = text(e.tooltip)
    if e.style != "solid":
        attrs["style"] = e.style
    if e.penwidth != 1.0:
        attrs["penwidth"] = _fmt(e.penwidth)
    if e.weight != 1:
        attrs["weight"] = str(e.weight)
    if not e.constraint:
        attrs["constraint"] = "false"
    if e.arrowhead != "normal":
        attrs["arrowhead"] = e.arrowhead
    g.edge(ids[e.src], ids[e.dst], **attrs)


def _legend_label(diagram: Diagram) -> str:
    """An HTML-like table: one node for the whole legend, so it costs the layout nothing."""
    rows = ['<tr><td colspan="2" align="left"><b>Legend</b></td></tr>']
    for item in diagram.legend:
        if item.line is not None:
            color = item.fill or "#555555"
            glyph = {"dashed": "- - - -", "dotted": ". . . . .", "bold": "<b>=====</b>"}.get(item.line, "-------")
            swatch = f'<td><font color="{color}">{glyph}</font></td>'
        else:
            swatch = f'<td bgcolor="{item.fill or "#ffffff"}" width="18" border="1"> </td>'
        rows.append(f'<tr>{swatch}<td align="left">{dot_html(item.text)}</td></tr>')
    return '<<table border="0" cellborder="0" cellspacing="2" cellpadding="2">' + "".join(rows) + "</table>>"
