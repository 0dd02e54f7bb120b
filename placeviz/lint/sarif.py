"""SARIF 2.1.0 output, shaped for GitHub code scanning (``docs/architecture.md``, "... a lint rule").

* one run; ``tool.driver.rules`` holds every selected rule (ID, name, summary, the generated doc
  page as ``help``, default level, category tag);
* a result's location is where the fix goes: the user's Python line that created the node when
  it is known (:mod:`placeviz.sources`: a builder's op tracebacks, or the model's GraphDebugInfo),
  with the model file as a related location; else the model file itself, at line 1 for a binary
  model or the node's ``name:`` line in a text one (for a builder ``train.py:build``, the file
  ``train.py``: see :func:`~placeviz.lint.formats.model_file`). Paths are relative to the current directory
  (run from the repo root, that is what GitHub expects); the node itself is a logical location
  (kind ``member``);
* ``partialFingerprints["placevizNode/v1"]`` is the baseline fingerprint (rule, model, node), so
  alerts survive re-exports of a model, which move every byte but keep node names;
* at most 25,000 results (GitHub's limit per run), the most severe first, with a notification
  saying how many were left out;
* errors and skipped rules are ``invocations[0].toolExecutionNotifications`` (errors make
  ``executionSuccessful`` false), so nothing is lost in this format either.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

from placeviz.lint.baseline import fingerprint
from placeviz.lint.formats import NodeLines, group_skipped, model_file

SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
MAX_RESULTS = 25_000
"""GitHub code scanning rejects a run with more results: keep the most severe, say so."""


def artifact_uri(path: str) -> str:
    p = Path(path)
    if p.is_absolute():
        return p.as_uri()
    return urllib.parse.quote(p.as_posix(), safe="/:")


def rule_descriptor(rule) -> dict:
    from placeviz.lint.docs import rule_page

    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.summary},
        "help": {"text": rule.summary, "markdown": rule_page(rule)},
        "defaultConfiguration": {"level": LEVEL[rule.severity], "enabled": True},
        "properties": {"tags": ["placeviz", rule.category], "needs": list(rule.needs),
                       "ignorable": rule.ignorable, "preview": rule.preview},
    }


def to_sarif(report) -> dict:
    from placeviz import __version__

    rules = [r.rule for r in report.rules]
    index = {r.id: i for i, r in enumerate(rules)}
    lines_of = NodeLines()
    results = []
    findings = report.findings
    dropped = 0
    if len(findings) > MAX_RESULTS:
        rank = {"error": 0, "warning": 1, "info": 2}
        findings = sorted(findings, key=lambda f: rank[f.severity])[:MAX_RESULTS]
        dropped = len(report.findings) - MAX_RESULTS
    for f in findings:
        model_location: dict[str, Any] = {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(model_file(f.model))},
                                               "region": {"startLine": lines_of(f.model, f.node)}}}
        location = model_location
        if f.source:
            location = {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(f.source["file"])},
                                             "region": {"startLine": f.source["line"]}}}
        if f.node:
            location["logicalLocations"] = [{"fullyQualifiedName": f.node, "name": f.node.rsplit("/", 1)[-1],
                                             "kind": "member"}]
        result = {
            "ruleId": f.rule,
            "level": LEVEL[f.severity],
            "message": {"text": f.message + (f" Fix: {f.suggestion}" if f.suggestion else "")},
            "locations": [location],
            "partialFingerprints": {"placevizNode/v1": fingerprint(f)},
            "properties": {"severity": f.severity, "device": f.device, "related": f.related},
        }
        if f.source:
            result["relatedLocations"] = [{"id": 1, **model_location,
                                           "message": {"text": f"node {f.node} in the model {f.model}"}}]
        if f.rule in index:
            result["ruleIndex"] = index[f.rule]
        results.append(result)
    notifications = [{"level": "error", "message": {"text": e.message},
                      **({"associatedRule": {"id": e.rule}} if e.rule else {})} for e in report.errors]
    if dropped:
        notifications.append({"level": "warning", "message": {"text": f"{dropped} less severe findings left out: "
                                                                      f"code scanning takes {MAX_RESULTS} results "
                                                                      "per run; see --format json for all"}})
    for model, reason, ids in group_skipped(report.skipped):
        notifications.append({"level": "note", "message": {"text": f"skipped on {model}: {', '.join(ids)}: {reason}"}})
    return {
        "$schema": SARIF_SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "placeviz", "version": __version__, "semanticVersion": __version__,
                                "rules": [rule_descriptor(r) for r in rules]}},
            "invocations": [{"executionSuccessful": not report.errors,
                             "exitCode": report.exit_code,
                             "toolExecutionNotifications": notifications}],
            "results": results,
            "properties": {"summary": report.summary()},
        }],
    }


def format_sarif(report, *, pretty: bool = False) -> str:
    from placeviz.jsontext import json_text

    return json_text(to_sarif(report), pretty=pretty)
