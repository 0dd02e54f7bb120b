"""Diagrams of a placed training graph: overview, devices, dependencies, sync machinery, HTML report.

The views read the results of :func:`placeviz.pipeline.run_pipeline` (placement, partition
transfers, sync proof) and never recompute a stage. Each view builds a plain
:class:`~placeviz.render.diagram.Diagram`; :mod:`placeviz.render.dot` turns it into deterministic
DOT text; :mod:`placeviz.render.layout` runs Graphviz with a timeout and falls back to a coarser
collapse or ``sfdp``; :mod:`placeviz.render.report` writes the self-contained HTML report.

Nothing here imports TensorFlow, and the core (graph, placement, sync...) never imports this.

>>> from placeviz.pipeline import Options, run_pipeline             # doctest: +SKIP
>>> pipe = run_pipeline("model.meta", Options(placement=placement_options))  # doctest: +SKIP
>>> print(to_dot(build_view(pipe, "overview")))                    # doctest: +SKIP
"""

from __future__ import annotations

from placeviz.errors import PlacevizError
from placeviz.render.context import ViewContext
from placeviz.render.diagram import Diagram
from placeviz.render.dot import to_dot

VIEWS = ("overview", "devices", "deps", "sync")
DEFAULT_MAX_NODES = 250
"""Boxes per view: dot lays out ~250 collapsed boxes with the limits in 1-3 s; 400+ takes 5 s or more."""

__all__ = ["DEFAULT_MAX_NODES", "VIEWS", "Diagram", "ViewContext", "build_view", "render", "resolve_focus",
           "to_dot"]


def resolve_focus(graph, name: str) -> int:
    """The id of node ``name``; a one-line error naming a few close names when it does not exist."""
    i = graph.id_of(name)
    if i is not None:
        return i
    base = name.rsplit("/", 1)[-1]
    near = sorted(n for n in graph.names if n.endswith("/" + base) or n == base)[:3]
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise PlacevizError(f"--focus: no node named {name!r} in the graph{hint}")


def build_view(pipe_or_ctx, view: str, *, focus: str | None = None, depth: int | None = None,
               max_nodes: int = DEFAULT_MAX_NODES) -> Diagram:
    """Build one view as a :class:`Diagram` (no Graphviz needed).

    ``focus``: an op name; the deps view centres on it (default: the worker's train op), the
    devices and overview views outline the box that holds it (the sync view ignores it). ``depth``: hops for the deps view (None: the op's
    whole input closure). ``max_nodes``: the box budget of collapsed views.
    """
    ctx = pipe_or_ctx if isinstance(pipe_or_ctx, ViewContext) else ViewContext(pipe_or_ctx)
    if max_nodes < 1:
        raise PlacevizError("--max-nodes must be at least 1")
    focus_id = resolve_focus(ctx.graph, focus) if focus is not None else None
    if view == "overview":
        from placeviz.render.overview import build_overview

        return build_overview(ctx, focus_id)
    if view == "devices":
        from placeviz.render.devices import build_devices

        return build_devices(ctx, max_nodes, focus_id)
    if view == "deps":
        from placeviz.render.deps import build_deps, default_focus

        if focus_id is None:
            focus_id = default_focus(ctx)
            if focus_id is None:
                raise PlacevizError("--view deps needs --focus NODE (the model names no train op)")
        return build_deps(ctx, focus_id, depth, max_nodes)
    if view == "sync":
        from placeviz.render.sync import build_sync

        return build_sync(ctx, max_nodes)
    raise PlacevizError(f"unknown view {view!r}; views: {', '.join(VIEWS)}")


def render(pipe_or_model, view: str = "devices", fmt: str = "dot", **options) -> str | bytes:
    """One view as DOT text (``fmt="dot"``) or laid out by Graphviz (svg/png/pdf bytes).

    ``pipe_or_model``: a :class:`~placeviz.pipeline.Pipeline`, or a loaded Model (run through the
    pipeline without placement options, as it is).
    """
    from placeviz.pipeline import Pipeline, run_pipeline

    pipe = pipe_or_model if isinstance(pipe_or_model, Pipeline) else run_pipeline(pipe_or_model)
    ctx = ViewContext(pipe)
    if fmt == "dot":  # no layout: the budget given, or DEFAULT_MAX_NODES
        return to_dot(build_view(ctx, view, **options))
    from placeviz.render.fit import start_budget
    from placeviz.render.layout import lay_out

    fit = "max_nodes" not in options  # the default: as many boxes as fit a screen
    budget = options.get("max_nodes", start_budget(view))
    rest = {k: v for k, v in options.items() if k != "max_nodes"}
    return lay_out(lambda b: build_view(ctx, view, max_nodes=b, **rest), budget, fmt, fit=fit).data
