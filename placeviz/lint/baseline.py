"""Baselines: accept today's findings, fail only on new ones (checkov ``--create-baseline``).

A finding's fingerprint is its rule ID, model path and node name: node names survive a re-export
of the same model, line numbers and node ids do not. Findings about the model as a whole (no node)
share one fingerprint per rule and model.
"""

from __future__ import annotations

import json

from placeviz.errors import PlacevizError
from placeviz.io import atomic_write
from placeviz.limits import read_regular_file
from placeviz.lint.api import Finding

SCHEMA = "placeviz.lint-baseline/1"


def fingerprint(finding: Finding) -> str:
    import hashlib  # a clean run fingerprints nothing: its import is not paid at start-up

    key = f"{finding.rule}\0{finding.model}\0{finding.node or ''}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


def read_baseline(path: str) -> set[str]:
    try:
        # A regular file of bounded size (placeviz.limits): not /dev/zero or a FIFO, read forever.
        doc = json.loads(read_regular_file(path, f"--baseline {path}", what="baseline"))
    except PlacevizError as e:
        raise PlacevizError(str(e)) from None
    except ValueError as e:
        raise PlacevizError(f"--baseline {path}: not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("findings"), list):
        raise PlacevizError(f"--baseline {path}: not a placeviz baseline (schema {SCHEMA})")
    try:
        return {entry["fingerprint"] for entry in doc["findings"]}
    except (TypeError, KeyError):
        raise PlacevizError(f"--baseline {path}: an entry has no fingerprint") from None


def write_baseline(path: str, findings: list[Finding]) -> int:
    """Write the fingerprints of ``findings``; returns how many distinct entries were written."""
    entries: dict[str, dict[str, str | None]] = {}
    for f in findings:
        fp = fingerprint(f)
        entries.setdefault(fp, {"fingerprint": fp, "rule": f.rule, "model": f.model, "node": f.node})
    doc = {"schema": SCHEMA,
           "findings": sorted(entries.values(), key=lambda e: (e["model"], e["rule"], e["node"] or ""))}
    atomic_write(path, json.dumps(doc, indent=2) + "\n")
    return len(entries)


def split_baselined(findings: list[Finding], known: set[str]) -> tuple[list[Finding], int]:
    """(findings not in the baseline, how many were)."""
    new = [f for f in findings if fingerprint(f) not in known]
    return new, len(findings) - len(new)
