"""The HTML report: one self-contained file with the views, the ``analyze`` tables and a search box.

Self-contained means no network at all: the SVGs are laid out here by native Graphviz and
inlined (each view, and the insides of its largest boxes, :mod:`placeviz.render.expand`), the
style sheet and the script (``placeviz/data/report.{css,js}``: pan, zoom, opening boxes, search,
the side panel of :mod:`placeviz.render.panel`) are inlined, and there is no font, image or
script URL (``docs/architecture.md``, "... a view": pre-rendered SVG plus a little vanilla JS is
the fastest to open and the only option CI can check). The search box knows every op of the graph (its
device and op type, and which box of each view holds it), so a reader can type a name and see
where it runs even when the picture shows it collapsed into a group.

Lint findings have a slot of their own: :func:`build_report` takes an optional list of dicts
``{rule, severity, node, device, message}``; ``None`` says lint was not run.

Every model string is untrusted (:mod:`placeviz.escape`): text and attributes go through
:func:`~placeviz.escape.html_text`, the search index (names, op types, devices) is JSON written by
:func:`~placeviz.escape.script_json` (no ``</script>`` or ``<!--<script>`` in a name can end or
swallow the script element), and each SVG from Graphviz is checked inert by
:func:`~placeviz.escape.svg_for_html` before it is inlined. The only links are the page's own
``#`` fragments, so the only script that runs is the one the report ships.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from importlib import resources

from placeviz.errors import PlacevizError
from placeviz.escape import UnsafeSvg, html_text, script_json, svg_for_html
from placeviz.render import build_view
from placeviz.render.context import ViewContext, human_bytes
from placeviz.render.diagram import Diagram
from placeviz.render.dot import box_ids
from placeviz.render.expand import Expansion, lay_out_expansions, plan_expansions
from placeviz.render.fit import start_budget
from placeviz.render.layout import AttemptFailed, GraphvizMissing, LayoutFailed, lay_out, run_graphviz
from placeviz.render.panel import explanations, transfer_rows
from placeviz.sizes import bar, bytes_at_least, traffic_total

VIEW_TITLES = {
    "overview": "Overview: devices and bytes per step",
    "devices": "Devices: ops collapsed by name scope",
    "deps": "Dependencies of the worker's train op",
    "sync": "SyncReplicas machinery and the single-update proof",
}
VARIABLES_SHOWN = 200
FINDING_KEYS = ("rule", "severity", "node", "device", "message")
esc = html_text


def inline_svg(svg: bytes) -> str:
    """The ``<svg>`` element alone: no XML prolog and no DOCTYPE (whose DTD URL a browser never
    needs; dropping it keeps the file free of external references), checked inert
    (:func:`~placeviz.escape.svg_for_html`: no script, handler, link or external URL)."""
    try:
        return svg_for_html(svg)
    except UnsafeSvg as e:
        raise PlacevizError(f"HTML report refused: {e}") from None


def _table(headers: list[str], rows: list[list], numeric: Set[int] = frozenset(), cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="num">{esc(c)}</td>' if k in numeric else f"<td>{esc(c)}</td>"
                                    for k, c in enumerate(r)) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _tables(ctx: ViewContext) -> str:
    a = ctx.pipe.analysis
    out = []
    p = a.placement
    if p and "error" not in p:
        top = max((t["variable_bytes"] for t in p["tasks"]), default=0)
        rows = [[t["task"], f"{t['nodes']:,}", t["variables"],
                 bytes_at_least(t["variable_bytes"], t.get("unknown_size_variables", 0), t["variables"]),
                 human_bytes(t.get("slot_bytes", 0)), bar(t["variable_bytes"], top)] for t in p["tasks"]]
        out.append("<h3>Placement per task (variable bytes include optimizer slots)</h3>"
                   + _table(["task", "ops", "variables", "variable bytes", "of which slots", "load"], rows, {1, 2, 3, 4}))
        bal = p.get("ps_balance") or {}
        if bal.get("max_over_mean") is not None:
            out.append(f"<p>PS balance ({esc(bal['job'])}): max {esc(human_bytes(bal['max_variable_bytes']))}, "
                       f"max/mean {bal['max_over_mean']:.2f}</p>")
    elif p and "error" in p:
        out.append(f'<p class="bad">Placement fails as TensorFlow\'s would: {esc(p["error"])}</p>')
    part = a.partition
    if part and "error" not in part:
        rows = [[t["task"], bytes_at_least(t["sent_bytes"], t.get("sent_unknown", 0)),
                 bytes_at_least(t["received_bytes"], t.get("received_unknown", 0))] for t in part["tasks"]]
        out.append(f"<h3>Network traffic per step ({esc(part['run']['what'])})</h3>"
                   f"<p>{esc(traffic_total(part))}</p>"
                   + _table(["task", "sent per step", "received per step"], rows, {1, 2}))
        reads = part.get("variable_reads") or []
        if reads:
            rows = [[v["variable"], v["reads_per_step"],
                     bytes_at_least(v["bytes_per_step"], v.get("unknown_size_reads", 0), v["reads_per_step"]),
                     ", ".join(v["to_tasks"])]
                    for v in reads[:VARIABLES_SHOWN]]
            out.append("<h3>Variables read across the network per step</h3>"
                       + _table(["variable", "reads", "bytes", "read by"], rows, {1, 2}))
    elif part and "error" in part:
        out.append(f'<p class="bad">Partitioning failed: {esc(part["error"])}</p>')
    if a.variables:
        # Where each variable landed (analyze's "Variables by PS task"): slots folded into their
        # variable's row, sorted by device then bytes; the requested device without placement.
        shown = sorted((v for v in a.variables if v.slot_of is None),
                       key=lambda v: (v.placed_device or v.device or "", -(v.bytes or 0), v.name))
        rows = [[v.name, v.dtype, "?" if v.shape is None else "[" + ",".join("?" if x is None else str(x)
                                                                        for x in v.shape) + "]",
                 human_bytes(v.bytes), human_bytes(v.slot_bytes) if v.slots else "",
                 v.placed_device or v.device or "(none)", v.placed_by or ""] for v in shown[:VARIABLES_SHOWN]]
        more = (f"<p>… and {len(shown) - VARIABLES_SHOWN:,} more (placeviz analyze --format json)</p>"
                if len(shown) > VARIABLES_SHOWN else "")
        total = bytes_at_least(a.variable_bytes, a.unknown_size_variables, len(a.variables))
        out.append(f"<h3>Variables by PS task ({len(a.variables):,} with slots, {esc(total)})</h3>"
                   + _table(["name", "dtype", "shape", "bytes", "slots", "device" if ctx.placed else "requested device",
                             "placed by"], rows, {3, 4}) + more)
    s = a.sync if ctx.pipe.proof is None else {**(a.sync or {}), **ctx.pipe.proof.to_json()}
    if s:
        verdict = "holds" if s["single_update"] else "VIOLATED"
        out.append(f'<h3>SyncReplicas: single update per step <span class="{"ok" if s["single_update"] else "bad"}">'
                   f"{verdict}</span></h3>")
        if s["violations"]:
            out.append(_table(["violation", "message"], [[v["kind"], v["message"]] for v in s["violations"]],
                              cls="bad"))
        rows = [[v["name"], v["verdict"], v.get("updates_per_step", ""),
                 " ← ".join((v["evidence"][0]["path"] if v.get("evidence") else [])[:5])]
                for v in s["variables"][:VARIABLES_SHOWN]]
        out.append(_table(["variable", "verdict", "updates per step", "evidence path"], rows, {2}))
    if a.notes:  # what the analysis could not settle or does not cover, as analyze prints it
        out.append("<h3>Notes</h3><ul>" + "".join(f"<li>{esc(n)}</li>" for n in a.notes) + "</ul>")
    return "\n".join(out)


def _findings(findings: list[dict] | None) -> str:
    if findings is None:
        return "<p>Lint was not run for this report.</p>"
    if not findings:
        return '<p class="ok">No lint findings.</p>'
    rows = [[f.get(k, "") for k in FINDING_KEYS] for f in findings]
    return _table(list(FINDING_KEYS), rows, cls="findings")


def _search_index(ctx: ViewContext, diagrams: dict[str, Diagram], subs: list[Expansion]) -> str:
    """Every op's name, op type and device, the DOT id of the box holding it in each view and in
    each opened-box picture, which box opens which picture, the side panel's ``--explain`` texts
    and the step's transfers."""
    g = ctx.graph
    devices = ctx.device_list
    dev_idx = {d: k for k, d in enumerate(devices)}
    op_types = sorted(set(g.ops))
    op_idx = {op: k for k, op in enumerate(op_types)}
    boxes: dict[str, list[int] | dict[int, int]] = {}
    for name, d in diagrams.items():
        if d.node_box is None:
            continue
        ids = box_ids(d)
        numbers = [int(ids[k][1:]) for k in d.group_keys]
        boxes[name] = [numbers[b] if b >= 0 else -1 for b in d.node_box]
    if "overview" in diagrams:
        ids = box_ids(diagrams["overview"])
        per_device = [int(ids[("dev", dv)][1:]) if ("dev", dv) in ids else -1 for dv in devices]
        boxes["overview"] = [per_device[dev_idx[dv]] for dv in ctx.devices]
    clickable: set[int] = set()
    for e in subs:
        d = e.diagram
        assert d.node_box is not None  # every expansion is a build_inside diagram, which sets it
        ids = box_ids(d)
        numbers = [int(ids[k][1:]) for k in d.group_keys]
        boxes[d.name] = {i: numbers[b] for i, b in enumerate(d.node_box) if b >= 0}
    for d in [*diagrams.values(), *(e.diagram for e in subs)]:
        clickable.update(grp.members[0] for grp in d.groups or () if grp.is_op)
    doc = {"names": g.names, "op": [op_idx[o] for o in g.ops], "dev": [dev_idx[d] for d in ctx.devices],
           "ops": op_types, "devices": devices, "boxes": boxes,
           "expand": {e.parent: e.diagram.name for e in subs},
           "titles": {e.diagram.name: e.diagram.title for e in subs},
           "explain": explanations(ctx, clickable), "transfers": transfer_rows(ctx),
           "explainHint": _explain_hint(ctx)}
    return script_json(doc)


def _explain_hint(ctx: ViewContext) -> str:
    """The command that explains an op the report has no text for."""
    if ctx.pipe.placement_error:
        return f"placement fails as TensorFlow's would, so no op has a reason: {ctx.pipe.placement_error}"
    if ctx.pipe.placement is None:
        return "the graph is not placed: give --ps-tasks N (or --cluster FILE) to see why ops land where they do"
    return f"placeviz analyze {ctx.pipe.model.source} [the same placement options] --explain NAME"


def _subpictures(ctx: ViewContext, d: Diagram, timeout: float, say) -> tuple[list[Expansion], str]:
    """The opened-box pictures of one view, laid out; and their HTML (hidden until a click)."""
    subs = plan_expansions(ctx, d)
    try:
        lay_out_expansions(subs, lambda src: run_graphviz(src, "svg", "dot", timeout))
    except (AttemptFailed, ValueError) as e:
        say(f"the boxes of the {d.name} view cannot be opened: {e}")
        return [], ""
    html = "".join(f'<div class="pic" data-pic="{e.diagram.name}" data-parent="{e.parent}" hidden>'
                   f"{inline_svg(e.svg)}</div>" for e in subs)
    return subs, html


def build_report(pipe, findings: list[dict] | None = None, *, focus: str | None = None, depth: int | None = None,
                 max_nodes: int | None = None, timeout: float = 30.0,
                 progress: Callable[[str], None] | None = None, verify: dict | None = None) -> str:
    """The report's HTML text (see the module docstring). Needs Graphviz's ``dot``. ``verify``: a
    verify or compare-modes JSON document, shown in a "Run on a cluster" section
    (:mod:`placeviz.render.verify_section`)."""
    ctx = ViewContext(pipe)
    a = pipe.analysis
    diagrams: dict[str, Diagram] = {}
    subs: list[Expansion] = []
    sections = []
    say = progress or (lambda _m: None)
    fit = max_nodes is None  # the default: each view collapsed until it fits a screen
    for view in ("overview", "devices", "deps", "sync"):
        def build(b, v=view):
            return build_view(ctx, v, focus=focus if v == "deps" else None, depth=depth, max_nodes=b)

        try:  # a view that cannot be drawn (no train op to focus on) is a note
            result = lay_out(build, max_nodes or start_budget(view), "svg", timeout, progress, fit=fit)
        except (LayoutFailed, GraphvizMissing):
            raise
        except PlacevizError as e:
            sections.append(f'<section id="view-{view}"><h2>{esc(VIEW_TITLES[view])}</h2>'
                            f'<p class="note">Not drawn: {esc(e)}</p></section>')
            continue
        d = result.diagram
        diagrams[view] = d
        how = f"laid out by {result.engine} in {result.seconds:.1f} s" + (
            f" (after: {'; '.join(result.attempts)})" if result.attempts else "")
        if result.size:
            how += f", {result.size[0]:,.0f} x {result.size[1]:,.0f} px at 100%"
        view_subs, sub_html = _subpictures(ctx, d, timeout, say)
        subs.extend(view_subs)
        if view_subs:
            how += f"; click a double-bordered box to open it ({len(view_subs)} can be opened)"
        notes = "".join(f"<li>{esc(n)}</li>" for n in [d.title, *d.notes, how])
        sections.append(f'<section id="view-{view}"><h2>{esc(VIEW_TITLES[view])}</h2><ul class="notes">{notes}</ul>'
                        f'<div class="zoom"><button data-z="1.25" title="zoom in">+</button>'
                        f'<button data-z="0.8" title="zoom out">−</button><button data-z="0" title="fit">fit</button>'
                        f'<button data-z="1" title="100%">1:1</button>'
                        f'<span class="crumbs" data-view="{view}"></span></div>'
                        f'<div class="svg" data-view="{view}"><div class="pic" data-pic="{view}">'
                        f"{inline_svg(result.data)}</div>{sub_html}</div></section>")
    title = f"placeviz report: {a.model}"
    summary = (f"{a.node_count:,} ops, {a.data_edge_count:,} data and {a.control_edge_count:,} control edges, "
               f"{len(a.variables):,} variables holding {bytes_at_least(a.variable_bytes, a.unknown_size_variables, len(a.variables))}; "
               f"{len(ctx.device_list)} device{'s' if len(ctx.device_list) != 1 else ''}")
    nav = " · ".join(f'<a href="#view-{v}">{v}</a>' for v in VIEW_TITLES) + ' · <a href="#tables">tables</a> · ' \
        '<a href="#lint">lint</a>' + (' · <a href="#verify">run</a>' if verify is not None else "")
    if verify is not None:
        from placeviz.render.verify_section import section_html

        sections.append(f'<section id="verify"><h2>Run on a cluster (placeviz '
                        f'{"compare-modes" if verify.get("schema") == "placeviz.modes/1" else "verify"})</h2>'
                        f"{section_html(verify)}</section>")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{_asset("report.css")}</style>
</head>
<body>
<header>
<h1>{esc(title)}</h1>
<p>{esc(summary)}</p>
<nav>{nav}</nav>
<div id="finder"><label for="search">Find an op:</label>
<input id="search" type="search" placeholder="name, part of a name, or /regex/" autocomplete="off">
<ul id="results"></ul><div id="where"></div></div>
</header>
<aside id="panel" hidden><button id="panel-close" title="close">×</button><div id="panel-body"></div></aside>
<main>
{"".join(sections)}
<section id="tables"><h2>Tables (placeviz analyze)</h2>
{_tables(ctx)}
</section>
<section id="lint"><h2>Lint findings</h2>
{_findings(findings)}
</section>
</main>
<script type="application/json" id="index">{_search_index(ctx, diagrams, subs)}</script>
<script>{_asset("report.js")}</script>
</body>
</html>
"""


def _asset(name: str) -> str:
    """The report's style sheet or script (``placeviz/data/report.{css,js}``), inlined."""
    return (resources.files("placeviz") / "data" / name).read_text(encoding="utf-8")
