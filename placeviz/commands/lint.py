"""``placeviz lint``, ``placeviz rules`` and ``placeviz rule``: options in, report out.

The precedence of settings is ruff's: command line over config file over defaults; ``--select``
replaces the config's ``select``, while ``--extend-select`` and ``--ignore`` add to the config's.
A selector typed on the command line that names no rule is a usage error (exit 2, you are right
there to fix it); one in the config file is a PV903 finding (visible in CI, where the config is
read by people who did not write it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from placeviz.commands.output import emit, notice, progress
from placeviz.errors import PlacevizError
from placeviz.lint.api import Finding

if TYPE_CHECKING:
    from placeviz.pipeline import Options

FORMATS = ("text", "json", "sarif", "github")


def run(models, *, place: dict, sync=None, tag=None, select=(), extend_select=(), ignore=(), preview=False,
        fail_on=None, fmt="text", baseline=None, write_baseline=None, config=None, rules_dirs=(),
        output=None, worker_graphs=(), rule_timeout=None, only_graphs=False, batch_size=None,
        pretty=False) -> int:
    """Lint MODELS; returns the exit code (0 clean, 1 findings at or above fail-on, 2 errors).

    ``worker_graphs``: ``--worker-graph I=MODEL`` values (the graphs other worker tasks built, for
    PV211); they need exactly one MODEL, the chief's. ``rule_timeout``: seconds a ``--rules DIR``
    rule may take per model (None: the default; 0: no limit; see :mod:`placeviz.lint.contain`).
    ``only_graphs``: skip, with a note, the files that are not graphs (:mod:`placeviz.lint.inputs`;
    the pre-commit hook's mode).
    """
    from placeviz.commands.options import build_options
    from placeviz.lint.baseline import read_baseline
    from placeviz.lint.baseline import write_baseline as save_baseline
    from placeviz.lint.config import load_config
    from placeviz.lint.contain import DEFAULT_TIMEOUT
    from placeviz.lint.discovery import load_rules
    from placeviz.lint.engine import FAIL_ON_DEFAULT, run_lint
    from placeviz.lint.runner import LintOptions
    from placeviz.lint.selection import select_rules, split_selectors, unknown_selectors
    from placeviz.tasks import check_workers_range, cluster_workers, parse_worker_graphs

    rule_timeout = DEFAULT_TIMEOUT if rule_timeout is None else (rule_timeout or None)
    skipped_files: list[str] = []
    if only_graphs:  # the pre-commit hook: files that are not graphs are noted, not errors
        from placeviz.lint.inputs import graph_models

        models, skipped_files = graph_models(list(models))
    cfg = load_config(config)
    rules = load_rules(rules_dirs, timeout=rule_timeout)
    select, extend_select, ignore = split_selectors(select), split_selectors(extend_select), split_selectors(ignore)
    for option, values in (("--select", select), ("--extend-select", extend_select), ("--ignore", ignore)):
        bad = unknown_selectors(values, rules)
        if bad:
            raise PlacevizError(f"{option} {bad[0]}: no rule has this ID, name or prefix (see `placeviz rules`)")
    config_path = Path(os.path.relpath(cfg.path)).as_posix() if cfg.path else None
    config_findings = _config_findings(cfg, rules, config_path)
    selected = select_rules(rules, list(select) or cfg.select or ["ALL"], [*cfg.extend_select, *extend_select],
                            [*cfg.ignore, *ignore], preview=preview or cfg.preview)

    pipeline = build_options(place, sync, tag=tag, default_cluster=cfg.cluster, batch_size=batch_size)
    placement = pipeline.placement
    assert placement is not None  # build_options always makes the PLACE options
    tasks = parse_worker_graphs(worker_graphs)
    if tasks and len(models) != 1:
        raise PlacevizError(f"--worker-graph needs exactly one MODEL (the chief's graph, task 0); got {len(models)}")
    workers = cluster_workers(placement)
    check_workers_range(tasks, workers)
    options = LintOptions(pipeline=pipeline, thresholds=cfg.thresholds, severity=cfg.severity, worker_graphs=tasks,
                          workers=workers, rule_timeout=rule_timeout)
    baseline_file = baseline or cfg.baseline
    notes = list(skipped_files)
    if not baseline and baseline_file and not write_baseline and not os.path.lexists(baseline_file):
        # The config names a baseline nobody has written yet (a fresh clone, the first CI run): a
        # note, and every finding counts; an explicit --baseline FILE that is missing stays an error.
        shown = Path(os.path.relpath(baseline_file)).as_posix()
        notes.append(f"the config's baseline {shown} does not exist yet, so no finding is baselined; "
                     f"run `placeviz lint ... --write-baseline {shown}` to accept today's findings")
        baseline_file = None
    known = read_baseline(baseline_file) if baseline_file and not write_baseline else None
    report = run_lint(list(models), selected, options, all_rules=rules, ignores=cfg.per_node_ignores,
                      config_path=config_path, config_findings=config_findings, baseline=known,
                      fail_on=fail_on or cfg.fail_on or FAIL_ON_DEFAULT)
    emit(format_report(report, fmt, pretty=pretty), output)
    for r in rules:  # what user rule modules printed, never part of the report
        if r.output:
            first = r.output.strip().splitlines()
            notice(f"rule module {r.path} printed {len(r.output):,} characters when imported, kept out of the "
                   f"report; first line: {repr(first[0][:200]) if first else '(blank)'}")
    for note in [*notes, *report.notes]:
        notice(note)
    for e in report.errors:  # also on stderr, one line each: the report may have gone to a file
        notice(f"error: {e.message}")
    if write_baseline:
        n = save_baseline(write_baseline, report.findings)
        progress(f"wrote {write_baseline}: {n} fingerprints of {len(report.findings)} findings")
        return 2 if report.errors else 0
    return report.exit_code


def format_report(report, fmt: str, *, pretty: bool = False) -> str:
    """``report`` in format ``fmt``; ``pretty`` indents the JSON formats (json, sarif)."""
    from placeviz.lint import formats

    if fmt == "json":
        return formats.format_json(report, pretty=pretty)
    if fmt == "sarif":
        from placeviz.lint import sarif

        return sarif.format_sarif(report, pretty=pretty)
    if fmt == "github":
        return formats.format_github(report)
    return formats.format_text(report)


def _config_findings(cfg, rules, config_path) -> list[Finding]:
    """PV903: selectors in the config that name no rule."""
    from placeviz.lint.selection import unknown_selectors

    meta = next((r.rule for r in rules if r.id == "PV903"), None)
    if meta is None or cfg.path is None:
        return []
    out = []
    where = [("select", cfg.select or []), ("extend-select", cfg.extend_select), ("ignore", cfg.ignore),
             ("severity", list(cfg.severity))]
    where += [(f"per-node-ignores[{e.index}].rule", e.rules) for e in cfg.per_node_ignores]
    for key, values in where:
        for bad in unknown_selectors(values, rules):
            out.append(Finding(rule=meta.id, name=meta.name, severity=meta.severity, model=config_path, node=None,
                               device=None, message=f"{key} names {bad!r}, which matches no rule ID, name or prefix: "
                                                    f"the check it meant to configure is not configured; see "
                                                    f"`placeviz rules` for the IDs"))
    return out


# ------------------------------------------------------------------------- rules / rule
def list_rules(fmt: str = "text", rules_dirs=(), write_docs: str | None = None, check: bool = False) -> int:
    from placeviz.lint.discovery import load_rules

    if check and not write_docs:
        raise PlacevizError("--check needs --write-docs DIR (the directory to compare)")
    rules = load_rules(rules_dirs)
    if write_docs:
        return _write_docs(write_docs, rules, check)
    if fmt == "json":
        emit(json.dumps({"schema": "placeviz.rules/1", "rules": [_rule_json(r) for r in rules]}, indent=2), None)
        return 0
    width = max((len(r.name) for r in rules), default=4)
    lines = [f"{r.id}  {r.name:<{width}}  {r.rule.severity:<7}  {r.rule.summary}"
             + (f"  [needs {', '.join(r.rule.needs)}]" if r.rule.needs else "")
             + ("  [preview]" if r.rule.preview else "") for r in rules]
    lines.append(f"{len(rules)} rules; `placeviz rule ID` shows one rule's page")
    emit("\n".join(lines), None)
    return 0


def _rule_json(r) -> dict:
    rule = r.rule
    return {"id": rule.id, "name": rule.name, "severity": rule.severity, "category": rule.category,
            "summary": rule.summary, "needs": list(rule.needs), "ignorable": rule.ignorable,
            "preview": rule.preview, "integrity": rule.integrity, "references": list(rule.references),
            "doc": f"docs/rules/{rule.id}.md", "origin": r.origin}


def _write_docs(directory: str, rules, check: bool) -> int:
    from placeviz.lint.docs import generate_docs, write_docs

    if check:
        pages = generate_docs(rules)
        d = Path(directory)
        stale = sorted(n for n, text in pages.items()
                       if not (d / n).is_file() or (d / n).read_text(encoding="utf-8") != text)
        extra = sorted(p.name for p in d.glob("*.md") if p.name not in pages) if d.is_dir() else []
        if stale or extra:
            progress(f"{directory} is out of date ({', '.join(stale + extra)}); run "
                     f"`placeviz rules --write-docs {directory}`")
            return 1
        progress(f"{directory} is up to date ({len(pages)} pages)")
        return 0
    n, removed = write_docs(directory, rules)
    progress(f"wrote {n} pages to {directory}" + (f"; removed {', '.join(removed)}" if removed else ""))
    return 0


def show_rule(key: str, rules_dirs=()) -> int:
    from placeviz.lint.discovery import load_rules
    from placeviz.lint.docs import rule_page, source_of

    rules = load_rules(rules_dirs)
    for r in rules:
        if key.upper() == r.id or key == r.name:
            emit(rule_page(r.rule, source_of(r)), None)
            return 0
    raise PlacevizError(f"no rule {key!r}; `placeviz rules` lists them")


def findings_for_pipeline(pipe, options: Options, config: str | None = None) -> list[dict]:
    """Lint findings (as JSON dicts) for a pipeline already computed with ``options``, with the
    default selection and the project's lint config (thresholds, selection, per-node ignores): what
    the HTML report shows."""
    from placeviz.lint.config import load_config
    from placeviz.lint.discovery import load_rules
    from placeviz.lint.runner import LintOptions, lint_pipeline
    from placeviz.lint.selection import select_rules
    from placeviz.lint.suppression import Suppressor

    cfg = load_config(config)
    rules = load_rules()
    selected = select_rules(rules, cfg.select or ["ALL"], cfg.extend_select, cfg.ignore, preview=cfg.preview)
    lint_options = LintOptions(pipeline=options, thresholds=cfg.thresholds, severity=cfg.severity)
    result = lint_pipeline(pipe, selected, lint_options)
    findings = Suppressor(list(cfg.per_node_ignores), {r.id: r for r in rules}).filter(result.findings)
    return [f.to_json() for f in findings]
