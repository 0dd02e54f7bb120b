"""The whole lint run: models x selected rules, then suppressions, meta rules and the baseline.

Order matters and is fixed: rules run per model (:mod:`placeviz.lint.runner`), config severity
overrides apply, per-node ignores drop what they cover, the meta rules (PV9xx) judge the config,
and only then does the baseline drop known findings, so a baselined finding still counts as a
use of the suppression that covers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from placeviz.lint.api import SEVERITIES, Finding
from placeviz.lint.baseline import split_baselined
from placeviz.lint.discovery import LoadedRule
from placeviz.lint.runner import (
    SEVERITY_RANK,
    LintError,
    LintOptions,
    Skipped,
    display_path,
    lint_model,
    lint_pipeline,
)
from placeviz.lint.suppression import Suppressor
from placeviz.progress import stage

FAIL_ON_DEFAULT = "error"


@dataclass
class LintReport:
    rules: list[LoadedRule]  # the selected rules
    models: list[str]
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    errors: list[LintError] = field(default_factory=list)
    suppressed: int = 0
    baselined: int = 0
    fail_on: str = FAIL_ON_DEFAULT
    config: str | None = None
    notes: list[str] = field(default_factory=list)
    """For stderr only, never the report: what user rules printed (see placeviz.lint.contain)."""

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(SEVERITIES, 0)
        for f in self.findings:
            out[f.severity] += 1
        return out

    def failing(self) -> list[Finding]:
        """Findings at or above ``fail_on`` (inclusive, like hadolint's threshold)."""
        if self.fail_on == "never":
            return []
        limit = SEVERITY_RANK[self.fail_on]
        return [f for f in self.findings if SEVERITY_RANK[f.severity] <= limit]

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        return 1 if self.failing() else 0

    def summary(self) -> dict:
        by_rule: dict[str, int] = {}
        for f in self.findings:
            by_rule[f.rule] = by_rule.get(f.rule, 0) + 1
        return {
            "models": len(self.models), "rules": len(self.rules), "findings": len(self.findings),
            "by_severity": self.counts(), "by_rule": dict(sorted(by_rule.items())),
            "skipped": len(self.skipped), "suppressed": self.suppressed, "baselined": self.baselined,
            "errors": len(self.errors), "fail_on": self.fail_on, "exit_code": self.exit_code,
        }


def run_lint(specs: list[str], selected: list[LoadedRule], options: LintOptions, *,
             all_rules: list[LoadedRule] | None = None, ignores=(), config_path: str | None = None,
             config_findings: Sequence[Finding] = (), baseline: set[str] | None = None,
             fail_on: str = FAIL_ON_DEFAULT, pipelines: dict | None = None) -> LintReport:
    """Lint every model of ``specs`` with the ``selected`` rules and assemble the report.

    ``ignores``: the config's per-node-ignore entries; ``config_findings``: findings about the
    config the caller already made (PV903); ``baseline``: fingerprints to drop. ``pipelines``:
    spec -> a :class:`placeviz.pipeline.Pipeline` the caller already ran for it with
    ``options``' placement and sync options (the demo), linted as it is instead of loaded again.
    """
    known = {r.id: r for r in (all_rules or selected)}
    suppressor = Suppressor(list(ignores), known)
    report = LintReport(rules=selected, models=[], fail_on=fail_on, config=config_path)
    findings: list[Finding] = []
    with stage("linting", total=len(specs), unit="models") as progress:  # its steps: the rules (runner)
        for k, spec in enumerate(specs):
            pipe = (pipelines or {}).get(spec)
            result = (lint_model(spec, selected, options, last=k == len(specs) - 1) if pipe is None
                      else lint_pipeline(pipe, selected, options))
            model = display_path(spec)
            report.models.append(model)
            for r in result.ran:
                suppressor.note_ran(r.id, r.name, model)
            findings.extend(_sorted(_override(result.findings, options.severity)))
            report.skipped.extend(result.skipped)
            report.errors.extend(result.errors)
            report.notes.extend(result.notes)
            progress.advance()
    findings = suppressor.filter(findings)
    report.suppressed = suppressor.suppressed
    selected_ids = {r.id: r.rule for r in selected}
    meta = [*config_findings, *suppressor.meta_findings(config_path or "pyproject.toml",
                                                        selected_ids.get("PV901"), selected_ids.get("PV902"))]
    findings.extend(_override([f for f in meta if f.rule in selected_ids], options.severity))
    if baseline is not None:
        findings, report.baselined = split_baselined(findings, baseline)
    report.findings = findings
    return report


def _override(findings: list[Finding], severity: dict[str, str]) -> list[Finding]:
    if severity:
        for f in findings:
            level = severity.get(f.rule) or severity.get(f.name)
            if level:
                f.severity = level
    return findings


def _sorted(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: f.rule)  # stable: each rule's own order is kept
