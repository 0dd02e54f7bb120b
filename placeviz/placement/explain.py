"""Why a node landed on its device: the answer of ``placeviz analyze --explain NODE``, also shown by
the HTML report's side panel (:mod:`placeviz.render.panel`). One text for both."""

from __future__ import annotations

from placeviz.errors import PlacevizError


def explain_node(result, name: str) -> dict:
    """The setter's rule and the placer's reason for ``name`` in a placement ``result``
    (:class:`placeviz.placement.PlacementResult`): JSON-able, the ``explain`` entries of analyze."""
    graph = result.graph
    i = graph.id_of(name)
    if i is None:
        raise PlacevizError(f"--explain: no node named {name!r} in the graph")
    out = {"node": name, "op": graph.ops[i]}
    if result.setter is not None:
        out["setter_device"] = graph.devices[i]
        out["setter_rule"] = result.setter.explain(i)
    out.update(result.placement.explain(i))
    return out


def explain_lines(e: dict) -> list[str]:
    """An :func:`explain_node` dict as lines: the node and its device first, then the reasons."""
    lines = [f"{e['node']} ({e['op']}) -> {e['device']}"]
    if "setter_rule" in e:
        lines.append(f"setter: {e['setter_device'] or '(no device)'}: {e['setter_rule']}")
    lines.append(f"requested: {e['requested'] or '(none)'}; placer: {e['reason']}")
    group = e["colocation_group"]
    if len(group) > 1:
        lines.append(f"colocation group ({len(group)}): {', '.join(group[:8])}{' ...' if len(group) > 8 else ''}")
    if e["candidates"]:
        lines.append(f"candidates in TF's order: {', '.join(e['candidates'][:4])}")
    return lines
