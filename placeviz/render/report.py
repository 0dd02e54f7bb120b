"""The HTML report: one self-contained file with the views, the ``analyze`` tables and a search box.

Self-contained means no network at all: the SVGs are laid out here by native Graphviz and
inlined, the style sheet and the few lines of script are inlined, and there is no font, image or
script URL (``docs/architecture.md``, "... a view": pre-rendered SVG plus a little vanilla JS is the
fastest to open and the only option CI can check). The search box knows every op of the graph (its
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

from collections.abc import Callable

from placeviz.errors import PlacevizError
from placeviz.escape import UnsafeSvg, html_text, script_json, svg_for_html
from placeviz.render import DEFAULT_MAX_NODES, build_view
from placeviz.render.context import ViewContext, human_bytes
from placeviz.render.diagram import Diagram
from placeviz.render.dot import box_ids
from placeviz.render.layout import lay_out

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


def _table(headers: list[str], rows: list[list], numeric: set[int] = frozenset(), cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="num">{esc(c)}</td>' if k in numeric else f"<td>{esc(c)}</td>"
                                    for k, c in enumerate(r)) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _tables(ctx: ViewContext) -> str:
    a = ctx.pipe.analysis
    out = []
    p = a.placement
    if p and "error" not in p:
        rows = [[t["task"], f"{t['nodes']:,}", t["variables"], human_bytes(t["variable_bytes"])] for t in p["tasks"]]
        out.append("<h3>Placement per task</h3>" + _table(["task", "ops", "variables", "variable bytes"], rows, {1, 2, 3}))
        bal = p.get("ps_balance") or {}
        if bal.get("max_over_mean") is not None:
            out.append(f"<p>PS balance ({esc(bal['job'])}): max {esc(human_bytes(bal['max_variable_bytes']))}, "
                       f"max/mean {bal['max_over_mean']:.2f}</p>")
    elif p and "error" in p:
        out.append(f'<p class="bad">Placement fails as TensorFlow\'s would: {esc(p["error"])}</p>')
    part = a.partition
    if part and "error" not in part:
        rows = [[t["task"], human_bytes(t["sent_bytes"]), human_bytes(t["received_bytes"])] for t in part["tasks"]]
        out.append(f"<h3>Network traffic per step ({esc(part['run']['what'])})</h3>"
                   f"<p>{esc(human_bytes(part['bytes_per_step']))} per step in {part['transfers']:,} transfers</p>"
                   + _table(["task", "sent per step", "received per step"], rows, {1, 2}))
        reads = part.get("variable_reads") or []
        if reads:
            rows = [[v["variable"], v["reads_per_step"], human_bytes(v["bytes_per_step"]), ", ".join(v["to_tasks"])]
                    for v in reads[:VARIABLES_SHOWN]]
            out.append("<h3>Variables read across the network per step</h3>"
                       + _table(["variable", "reads", "bytes", "read by"], rows, {1, 2}))
    elif part and "error" in part:
        out.append(f'<p class="bad">Partitioning failed: {esc(part["error"])}</p>')
    if a.variables:
        placed = {}
        if ctx.placed:
            index = ctx.graph.index
            placed = {v.name: ctx.devices[index[v.name]] for v in a.variables if v.name in index}
        rows = [[v.name, v.op, v.dtype, "?" if v.shape is None else "[" + ",".join("?" if x is None else str(x)
                                                                              for x in v.shape) + "]",
                 human_bytes(v.bytes), placed.get(v.name, v.device or "(none)")] for v in a.variables[:VARIABLES_SHOWN]]
        more = (f"<p>… and {len(a.variables) - VARIABLES_SHOWN:,} more (placeviz analyze --format json)</p>"
                if len(a.variables) > VARIABLES_SHOWN else "")
        out.append(f"<h3>Variables ({len(a.variables):,}, {esc(human_bytes(a.variable_bytes))})</h3>"
                   + _table(["name", "op", "dtype", "shape", "bytes", "device"], rows, {4}) + more)
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
    return "\n".join(out)


def _findings(findings: list[dict] | None) -> str:
    if findings is None:
        return "<p>Lint was not run for this report.</p>"
    if not findings:
        return '<p class="ok">No lint findings.</p>'
    rows = [[f.get(k, "") for k in FINDING_KEYS] for f in findings]
    return _table(list(FINDING_KEYS), rows, cls="findings")


def _search_index(ctx: ViewContext, diagrams: dict[str, Diagram]) -> str:
    """Every op's name, op type and device, and the DOT id of the box holding it in each view."""
    g = ctx.graph
    devices = ctx.device_list
    dev_idx = {d: k for k, d in enumerate(devices)}
    op_types = sorted(set(g.ops))
    op_idx = {op: k for k, op in enumerate(op_types)}
    boxes = {}
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
    doc = {"names": g.names, "op": [op_idx[o] for o in g.ops], "dev": [dev_idx[d] for d in ctx.devices],
           "ops": op_types, "devices": devices, "boxes": boxes}
    return script_json(doc)


def build_report(pipe, findings: list[dict] | None = None, *, focus: str | None = None, depth: int | None = None,
                 max_nodes: int = DEFAULT_MAX_NODES, timeout: float = 30.0,
                 progress: Callable[[str], None] | None = None) -> str:
    """The report's HTML text (see the module docstring). Needs Graphviz's ``dot``."""
    ctx = ViewContext(pipe)
    a = pipe.analysis
    diagrams: dict[str, Diagram] = {}
    sections = []
    for view in ("overview", "devices", "deps", "sync"):
        try:
            d = build_view(ctx, view, focus=focus if view == "deps" else None, depth=depth, max_nodes=max_nodes)
        except Exception as e:  # a view that cannot be drawn (no train op to focus on) is a note
            if not isinstance(e, PlacevizError):
                raise
            sections.append(f'<section id="view-{view}"><h2>{esc(VIEW_TITLES[view])}</h2>'
                            f'<p class="note">Not drawn: {esc(e)}</p></section>')
            continue
        result = lay_out(lambda b, v=view: build_view(ctx, v, focus=focus if v == "deps" else None, depth=depth,
                                                      max_nodes=b),
                         max_nodes, "svg", timeout, progress, diagram=d)
        d = result.diagram
        diagrams[view] = d
        how = f"laid out by {result.engine} in {result.seconds:.1f} s" + (
            f" (after: {'; '.join(result.attempts)})" if result.attempts else "")
        notes = "".join(f"<li>{esc(n)}</li>" for n in [d.title, *d.notes, how])
        sections.append(f'<section id="view-{view}"><h2>{esc(VIEW_TITLES[view])}</h2><ul class="notes">{notes}</ul>'
                        f'<div class="zoom"><button data-z="1.25">+</button><button data-z="0.8">−</button>'
                        f'<button data-z="0">fit</button></div>'
                        f'<div class="svg" data-view="{view}">{inline_svg(result.data)}</div></section>')
    title = f"placeviz report: {a.model}"
    summary = (f"{a.node_count:,} ops, {a.data_edge_count:,} data and {a.control_edge_count:,} control edges, "
               f"{len(a.variables):,} variables holding {human_bytes(a.variable_bytes)}; "
               f"{len(ctx.device_list)} device{'s' if len(ctx.device_list) != 1 else ''}")
    nav = " · ".join(f'<a href="#view-{v}">{v}</a>' for v in VIEW_TITLES) + ' · <a href="#tables">tables</a> · ' \
        '<a href="#lint">lint</a>'
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{_CSS}</style>
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
<main>
{"".join(sections)}
<section id="tables"><h2>Tables (placeviz analyze)</h2>
{_tables(ctx)}
</section>
<section id="lint"><h2>Lint findings</h2>
{_findings(findings)}
</section>
</main>
<script type="application/json" id="index">{_search_index(ctx, diagrams)}</script>
<script>{_JS}</script>
</body>
</html>
"""


_CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:0;color:#222;background:#fff}
header{position:sticky;top:0;background:#f7f7f7;border-bottom:1px solid #ccc;padding:6px 16px;z-index:2}
h1{font-size:18px;margin:4px 0}h2{font-size:16px;margin:18px 0 6px}h3{font-size:14px;margin:14px 0 4px}
main{padding:0 16px 40px}nav a{color:#1f5f9f}
#finder{margin-top:4px}#search{width:28em;padding:3px}
#results{list-style:none;margin:2px 0;padding:0;max-height:9em;overflow:auto;font-family:monospace;font-size:12px}
#results li{cursor:pointer;padding:1px 4px}#results li:hover{background:#e8eefc}
#where{font-size:13px;margin:2px 0}
.svg{overflow:auto;max-height:80vh;border:1px solid #ddd}.svg svg{display:block}
.zoom button{margin-right:4px}
ul.notes{font-size:12px;color:#555;margin:2px 0 6px;padding-left:18px}
table{border-collapse:collapse;font-size:12px;margin:4px 0}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:left}td.num{text-align:right}
.ok{color:#2a7d2a;font-weight:bold}.bad{color:#c0392b;font-weight:bold}table.bad td{color:#c0392b}
.hit polygon,.hit path,.hit ellipse,.hit polyline{stroke:#ff00aa !important;stroke-width:5px !important}
"""

_JS = r"""
(function () {
  "use strict";
  var index = JSON.parse(document.getElementById("index").textContent);
  var input = document.getElementById("search");
  var results = document.getElementById("results");
  var where = document.getElementById("where");
  var LIMIT = 50;

  function matcher(q) {
    if (q.length > 2 && q[0] === "/" && q[q.length - 1] === "/") {
      try { var re = new RegExp(q.slice(1, -1)); return function (s) { return re.test(s); }; }
      catch (e) { return null; }
    }
    return function (s) { return s.indexOf(q) !== -1; };
  }

  function clearHits() {
    var hits = document.querySelectorAll(".hit");
    for (var k = 0; k < hits.length; k++) { hits[k].classList.remove("hit"); }
  }

  function show(i) {
    clearHits();
    var parts = [];
    var first = null;
    Object.keys(index.boxes).forEach(function (view) {
      var box = index.boxes[view][i];
      if (box === undefined || box < 0) { return; }
      var el = document.getElementById(view + "_n" + box);
      if (el) { el.classList.add("hit"); parts.push(view); if (!first) { first = el; } }
    });
    where.textContent = index.names[i] + " (" + index.ops[index.op[i]] + ") runs on " +
      index.devices[index.dev[i]] + (parts.length ? "; highlighted in: " + parts.join(", ") : "");
    if (first) { first.scrollIntoView({block: "center", inline: "center"}); }
  }

  function search() {
    var q = input.value.trim();
    results.textContent = "";
    if (!q) { where.textContent = ""; clearHits(); return; }
    var match = matcher(q);
    if (!match) { where.textContent = "invalid regular expression"; return; }
    var found = 0, exact = -1;
    for (var i = 0; i < index.names.length && found < LIMIT; i++) {
      if (!match(index.names[i])) { continue; }
      if (index.names[i] === q) { exact = i; }
      var li = document.createElement("li");
      li.textContent = index.names[i] + "  —  " + index.devices[index.dev[i]];
      li.dataset.i = i;
      results.appendChild(li);
      found++;
    }
    where.textContent = found ? (found === LIMIT ? "first " + LIMIT + " matches" : found + " match(es)") : "no op matches";
    if (exact >= 0 || found === 1) { show(exact >= 0 ? exact : +results.firstChild.dataset.i); }
  }

  var timer = null;
  input.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(search, 150); });
  results.addEventListener("click", function (ev) {
    if (ev.target && ev.target.dataset.i !== undefined) { show(+ev.target.dataset.i); }
  });
  var zooms = document.querySelectorAll(".zoom button");
  for (var k = 0; k < zooms.length; k++) {
    zooms[k].addEventListener("click", function (ev) {
      var svg = ev.target.parentNode.nextElementSibling.querySelector("svg");
      if (!svg) { return; }
      var z = +ev.target.dataset.z;
      if (!svg.dataset.w) { svg.dataset.w = svg.getBoundingClientRect().width; }
      var w = z === 0 ? svg.parentNode.clientWidth : svg.getBoundingClientRect().width * z;
      svg.setAttribute("width", w + "px");
      svg.removeAttribute("height");
    });
  }
  if (location.hash.indexOf("#find=") === 0) {  // a link can open the report on one op
    var wanted = location.hash.slice(6);
    try { wanted = decodeURIComponent(wanted); } catch (e) { /* a malformed %-escape: search it as typed */ }
    input.value = wanted;
    search();
  }
  document.body.setAttribute("data-ready", "1");  // tests check that the script ran to the end
})();
"""
