"""The HTML report's "Run on a cluster" section: ``placeviz render -o report.html --verify FILE``.

FILE is what ``placeviz verify --format json`` (``placeviz.verify/1``) or ``placeviz compare-modes
--format json`` (``placeviz.modes/1``) wrote. The section shows the checks, the comparison table and
its relations, the per-step contributors table (which worker's gradient each step averaged or
dropped as late) and the timeline picture, drawn from the document alone (its ``timeline`` arrays;
matplotlib from the ``[tf]`` extra, else a note). Everything from the file is escaped: it is input.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path

from placeviz.errors import PlacevizError
from placeviz.escape import html_text as esc
from placeviz.render.report import _table

SCHEMAS = ("placeviz.verify/1", "placeviz.modes/1")


def load(path: str) -> dict:
    """The verify or compare-modes JSON at ``path``; one-line errors."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PlacevizError(f"--verify {path}: cannot read it as JSON ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict) or doc.get("schema") not in SCHEMAS:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise PlacevizError(f"--verify {path}: not a placeviz verify or compare-modes JSON (schema {got!r}; expected "
                            f"{' or '.join(SCHEMAS)})")
    return doc


def _rows(doc: dict) -> list[dict]:
    if doc["schema"] == "placeviz.modes/1":
        return [r for r in doc.get("runs", []) if isinstance(r, dict)]
    m = doc.get("modes")
    return [{"label": m.get("mode", "sync"), **m}] if isinstance(m, dict) else []


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}" if isinstance(x, float) else str(x)


def section_html(doc: dict) -> str:
    """The inside of the section (after its heading)."""
    parts = []
    rows = _rows(doc)
    if doc["schema"] == "placeviz.verify/1":
        run = doc.get("run") or {}
        parts.append(f"<p>{esc(doc.get('model'))}: mode {esc(run.get('mode', 'sync'))}, W={esc(run.get('workers'))}, "
                     f"K={esc(run.get('steps'))}, R={esc(run.get('replicas_to_aggregate'))}; "
                     f"{'every check passed' if doc.get('ok') else 'FAILED'}</p>")
        parts.append(_table(["check", "status", "summary"],
                            [[c.get("id"), c.get("status"), c.get("summary")] for c in doc.get("checks", [])]))
    else:
        slow = ", ".join(f"worker {i} +{s} s" for i, s in (doc.get("slow_workers") or {}).items()) or "none"
        parts.append(f"<p>{esc(doc.get('model'))}: W={esc(doc.get('workers'))} workers, K={esc(doc.get('steps'))} "
                     f"steps, slowed: {esc(slow)}</p>")
    if rows:
        table = []
        for r in rows:
            st, g = r.get("staleness") or {}, r.get("gradients") or {}
            waits = r.get("token_wait_s") or {}
            table.append([r.get("label"), _fmt(r.get("steps_per_s")), _fmt(r.get("s_per_step")),
                          " ".join(f"{v:.2f}" for v in waits.values()) or "-",
                          f"{_fmt(st.get('mean'))} / {_fmt(st.get('max'))}" if st else "-",
                          " ".join(str(v.get("averaged")) for v in (g.get("per_worker") or {}).values()) or "-",
                          _fmt(g.get("dropped")), _fmt(r.get("loss")),
                          ", ".join(r.get("failed_checks") or []) or "pass"])
        parts.append("<h3>The runs</h3>" + _table(
            ["mode", "steps/s", "s/step", "token wait s (per worker)", "staleness mean/max",
             "gradients averaged by worker", "dropped", "loss", "checks"], table))
    relations = doc.get("relations") or []
    if relations:
        parts.append("<h3>What the runs show</h3><ul>" + "".join(
            f"<li>{'' if r.get('holds') else '<b>NOT:</b> '}{esc(r.get('text'))}"
            f"{' <i>(guaranteed by TF, tested)</i>' if r.get('guaranteed') else ''}</li>" for r in relations) + "</ul>")
    for r in rows:
        steps = (r.get("gradients") or {}).get("per_step") or []
        if steps:
            parts.append(f"<h3>{esc(r.get('label'))}: whose gradients each step averaged</h3>" + _table(
                ["step", "averaged (worker of each gradient)", "dropped as late"],
                [[s.get("step"), " ".join(map(str, s.get("averaged") or [])) or "-",
                  " ".join(map(str, s.get("dropped") or [])) or "-"] for s in steps]))
    parts.append(_picture(rows))
    return "\n".join(parts)


def _picture(rows: list[dict]) -> str:
    drawable = [r for r in rows if isinstance(r.get("timeline"), dict) and r["timeline"].get("runs")]
    if not drawable:
        return '<p class="note">No timeline in the file.</p>'
    if importlib.util.find_spec("matplotlib") is None:
        return '<p class="note">The timeline picture needs matplotlib (install placeviz[tf]).</p>'
    from placeviz.verify.timeline import picture_bytes

    try:
        png = picture_bytes(drawable, "timeline.png")
    except (KeyError, TypeError, ValueError, IndexError) as e:  # a hand-edited file: say so, show the rest
        return f'<p class="note">The timeline could not be drawn: {esc(type(e).__name__)}: {esc(e)}</p>'
    # a PNG data URI: self-contained and inert (no markup from the file reaches the page)
    data = base64.b64encode(png).decode()
    return (f'<h3>Timeline</h3><img class="timeline" alt="worker lanes over time per mode" '
            f'src="data:image/png;base64,{data}" style="max-width:100%">')
