"""The picture a view builds, before it becomes DOT: boxes in nested clusters, bundled edges, a legend.

Views (overview, devices, deps, sync) build a :class:`Diagram` from the pipeline's results; only
:mod:`placeviz.render.dot` turns it into Graphviz text. Keeping the picture as plain data means a
view can be tested without Graphviz, the emitter alone decides identifiers and ordering (so the
same graph always gives the same DOT), and the layout runner can ask a view for a coarser picture
when ``dot`` runs out of time.

Boxes and clusters are addressed by *keys* (any sortable tuple of strings and ints), never by
node names: names such as ``/job:ps/task:0`` or ``scope/op:0`` would be read by Graphviz as
``node:port`` if they became DOT identifiers. The emitter numbers boxes ``n0, n1, ...`` in key
order and puts real names in labels and tooltips.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Key = tuple


@dataclass
class Box:
    """One DOT node: a single op, a collapsed group of ops, a device, or a note."""

    key: Key
    label: str
    """Lines separated by ``\\n`` (a real newline); the emitter escapes it for DOT."""
    cluster: Key = ()
    """Key of the innermost cluster the box sits in (``()``: top level)."""
    fill: str = "#ffffff"
    """A colour, or Graphviz's striped list ``"#a;0.3:#b"`` (the emitter adds ``striped``)."""
    shape: str = "box"
    tooltip: str = ""
    border: str = "#444444"
    penwidth: float = 1.0
    peripheries: int = 1
    style: str = "filled"
    font_color: str = "#000000"


@dataclass
class Cluster:
    """A Graphviz cluster (job, task, device lane); nested by key prefix through ``parent``."""

    key: Key
    label: str
    parent: Key = ()
    fill: str = "#ffffff"
    border: str = "#888888"
    tooltip: str = ""
    label_below: bool = False
    """The label under the contents instead of above them (``labelloc=b``): Graphviz does not route
    edges around a cluster's label, so a cluster that edges enter from above gets its label below."""


@dataclass
class Edge:
    """A bundle of graph edges (or transfers) between two boxes."""

    src: Key
    dst: Key
    label: str = ""
    tooltip: str = ""
    color: str = "#555555"
    style: str = "solid"
    penwidth: float = 1.0
    weight: int = 1
    constraint: bool = True
    arrowhead: str = "normal"
    priority: float = 0.0
    """Higher is more important: when a dense view has too many edges, the lowest go first."""


@dataclass
class LegendItem:
    """One legend row: a colour swatch (or line style) and what it means."""

    text: str
    fill: str | None = None
    line: str | None = None  # "solid"/"dashed"/"bold"; with ``fill`` as the line colour
    shape: str | None = None


@dataclass
class Diagram:
    """A view ready for emission. ``notes`` are shown under the title (and in the HTML report)."""

    name: str
    """The view: overview, devices, deps, sync (also the DOT graph's name)."""
    title: str
    boxes: list[Box] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)
    legend: list[LegendItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rankdir: str = "TB"
    graph_attrs: dict[str, str] = field(default_factory=dict)
    node_box: list[int] | None = None
    """Node id -> index into :attr:`group_keys` of the box that shows it (-1: not shown), for the
    HTML report's search; None when the view does not draw the graph's ops."""
    group_keys: list[Key] = field(default_factory=list)
    groups: list | None = None
    """The collapsed groups behind the boxes (``group_keys[k]`` is the key of ``groups[k]``'s box),
    for the HTML report, which draws what is inside a group when its box is clicked."""
    stats: dict = field(default_factory=dict)
    """What the view cost and dropped (ops shown, boxes, edges kept/dropped, collapse seconds)."""

    def box_keys(self) -> set:
        return {b.key for b in self.boxes}
