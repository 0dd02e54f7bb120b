"""Report formats for people and scripts: ``text``, ``json`` (``placeviz.lint/1``), ``github``.

A finding whose node has a known source line (:mod:`placeviz.sources`: a builder's op tracebacks,
or the model's GraphDebugInfo) is shown there: ``text`` starts the line with ``train.py:42:``,
``github`` annotates ``train.py`` line 42 (the message names the model), ``json`` has ``source``.

SARIF has its own module (:mod:`placeviz.lint.sarif`). Every format carries the full counts,
the skipped rules with their reasons and the errors: GitHub shows only 10 annotations of each
type per step, so the ``github`` format ends with a plain summary line that does not depend on
them.

Model files, node names, op types, devices and messages are untrusted text (see
:mod:`placeviz.escape`): every ``text`` line goes through :func:`~placeviz.escape.terminal_text`
(one finding is one line, and no escape sequence reaches the terminal), and the ``github`` format
encodes annotation messages and properties as GitHub's toolkit does and its plain lines like the
``text`` ones, so each finding is exactly one workflow command and nothing else in the log is one.
JSON and SARIF are escaped by ``json.dumps`` (:func:`placeviz.jsontext.json_text`: compact, or indented
with ``--pretty``).
"""

from __future__ import annotations

import re
from pathlib import Path

from placeviz.escape import github_data, github_property, terminal_text
from placeviz.lint.baseline import fingerprint

JSON_SCHEMA = "placeviz.lint/1"
GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}
TEXT_SUFFIXES = {".pbtxt", ".pbtx", ".prototxt", ".txt"}


def doc_path(rule_id: str) -> str:
    return f"docs/rules/{rule_id}.md"


# ------------------------------------------------------------------------------------ text
def format_text(report) -> str:
    lines = []
    for f in report.findings:
        where = f"{f.model}: {f.node}" if f.node else f.model
        if f.source:  # the user's line first, as compilers print it: editors and terminals jump there
            where = f"{source_text(f.source)}: {where}"
        lines.append(f"{where}: {f.rule} [{f.severity}] {f.message}  ({f.name})")
        if f.suggestion:
            lines.append(f"    help: {f.suggestion}")
    for e in report.errors:
        lines.append(f"error: {e.message}")
    for model, reason, ids in group_skipped(report.skipped):
        lines.append(f"skipped on {model}: {short_ids(ids)}: {reason}")
    lines.append(summary_line(report))
    return "\n".join(map(terminal_text, lines)) + "\n"


def source_text(source: dict) -> str:
    """``train.py:42`` for a finding's :attr:`~placeviz.lint.api.Finding.source`."""
    return f"{source['file']}:{source['line']}"


_BUILDER = re.compile(r"^(?P<file>[^:]+\.py):[A-Za-z_][A-Za-z0-9_]*$")


def model_file(model: str) -> str:
    """The file a model's annotations and SARIF locations name: the model file itself, or for a
    builder MODEL ``train.py:build`` the file ``train.py`` (``train.py:build`` is not a path, and
    as a URI it would read as the scheme ``train.py``)."""
    m = _BUILDER.match(model)
    return m["file"] if m and not Path(model).exists() else model


def short_ids(ids: list[str], shown: int = 8) -> str:
    """``PV101, PV102, ... and 30 more`` for long lists: a skipped line stays readable."""
    return ", ".join(ids) if len(ids) <= shown else ", ".join(ids[:shown]) + f" and {len(ids) - shown} more"


def group_skipped(skipped) -> list[tuple[str, str, list[str]]]:
    """(models, reason, rule IDs) in first-seen order: one line per reason and set of rules, with
    the models that share it (a pre-commit run over 50 graphs should not print 50 copies)."""
    per_model: dict[tuple[str, str], list[str]] = {}
    for s in skipped:
        per_model.setdefault((s.model, s.reason), []).append(s.rule)
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (model, reason), ids in per_model.items():
        groups.setdefault((reason, tuple(ids)), []).append(model)
    out = []
    for (reason, rule_ids), models in groups.items():
        shown = ", ".join(models[:3]) + (f" and {len(models) - 3} more" if len(models) > 3 else "")
        out.append((shown, reason, list(rule_ids)))
    return out


def summary_line(report) -> str:
    counts = report.counts()
    n = len(report.findings)
    parts = [f"{n} finding{'s' if n != 1 else ''} ({counts['error']} error, {counts['warning']} warning, "
             f"{counts['info']} info) in {len(report.models)} model{'s' if len(report.models) != 1 else ''} "
             f"with {len(report.rules)} rules"]
    extra = [f"{len({s.rule for s in report.skipped})} rules skipped"] if report.skipped else []
    if report.suppressed:
        extra.append(f"{report.suppressed} suppressed")
    if report.baselined:
        extra.append(f"{report.baselined} baselined")
    if report.errors:
        extra.append(f"{len(report.errors)} error{'s' if len(report.errors) != 1 else ''}")
    if extra:
        parts.append(", ".join(extra))
    parts.append(f"fail-on {report.fail_on}: exit {report.exit_code}")
    return "placeviz lint: " + "; ".join(parts)


# ------------------------------------------------------------------------------------ json
def to_json_document(report) -> dict:
    from placeviz import __version__

    findings = []
    for f in report.findings:
        item = f.to_json()
        item["doc"] = doc_path(f.rule)
        item["fingerprint"] = fingerprint(f)
        findings.append(item)
    return {
        "schema": JSON_SCHEMA,
        "placeviz": __version__,
        "models": report.models,
        "config": report.config,
        "rules": [r.id for r in report.rules],
        "findings": findings,
        "skipped": [s.to_json() for s in report.skipped],
        "errors": [e.to_json() for e in report.errors],
        "summary": report.summary(),
    }


def format_json(report, *, pretty: bool = False) -> str:
    from placeviz.jsontext import json_text

    return json_text(to_json_document(report), pretty=pretty)


# ---------------------------------------------------------------------------------- github
def format_github(report) -> str:
    """GitHub Actions workflow commands: one annotation per finding, then the full counts.

    Messages and properties are encoded with :func:`~placeviz.escape.github_data` and
    :func:`~placeviz.escape.github_property` (GitHub's toolkit's ``escapeData``/``escapeProperty``),
    the plain lines with :func:`~placeviz.escape.terminal_text` (the runner reads ``##[cmd]``
    anywhere in a line), so a name holding ``\n::error::`` cannot add a command of its own.
    """
    lines = []
    lines_of = NodeLines()
    for f in report.findings:
        where = f"{f.node} ({f.device}): " if f.node and f.device else (f"{f.node}: " if f.node else "")
        if f.source:  # annotate the user's line that created the node; the message names the model
            file, line = f.source["file"], f.source["line"]
            where = f"{f.model}: {where}"
        else:
            file, line = model_file(f.model), lines_of(f.model, f.node)
        props = f"file={github_property(file)},line={line},title={github_property(f'{f.rule} {f.name}')}"
        lines.append(f"::{GITHUB_LEVEL[f.severity]} {props}::{github_data(where + f.message)}")
    for e in report.errors:
        props = f"file={github_property(model_file(e.model))}," if e.model else ""
        lines.append(f"::error {props}title=placeviz lint error::{github_data(e.message)}")
    for model, reason, ids in group_skipped(report.skipped):
        lines.append(terminal_text(f"placeviz lint: skipped on {model}: {short_ids(ids)}: {reason}"))
    lines.append(terminal_text(summary_line(report)))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- node locations
_NAME_LINE = re.compile(r'^[ \t]*name:[ \t]*"((?:[^"\\]|\\.)*)"', re.MULTILINE)


class NodeLines:
    """Line of a node's ``name:`` in a text model (1 for binary models, or when not found)."""

    def __init__(self):
        self._cache: dict[str, dict[str, int]] = {}

    def __call__(self, model: str, node: str | None) -> int:
        if node is None or Path(model).suffix.lower() not in TEXT_SUFFIXES:
            return 1
        table = self._cache.get(model)
        if table is None:
            table = self._cache[model] = self._read(model)
        return table.get(node, 1)

    @staticmethod
    def _read(model: str) -> dict[str, int]:
        try:
            text = Path(model).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return {}
        table: dict[str, int] = {}
        line, last = 1, 0
        for m in _NAME_LINE.finditer(text):
            line += text.count("\n", last, m.start())
            last = m.start()
            table.setdefault(m.group(1), line)
        return table
