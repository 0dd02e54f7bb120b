"""Running the rules over models: one context per model, every rule against it, nothing lost.

Per model the engine loads the model once, runs the static pipeline once (sync pass, placement,
detect/prove, and the partition of one train step when a selected rule needs it) and hands the
same :class:`LintContext` to every rule.
It never drops a rule silently:

* a rule whose ``needs`` are missing (no cluster spec, no MetaGraphDef, placement failed, ...) is
  *skipped*, with the reason, in every output format;
* a rule that raises becomes an *error* naming the rule and the exception (exit 2, no traceback),
  and the other rules still run;
* a user's rule (``--rules DIR``) runs contained (:mod:`placeviz.lint.contain`): in a child
  process with a time limit (``LintOptions.rule_timeout``), so ``sys.exit``, ``KeyboardInterrupt``,
  a crash or an endless loop in it is an error of that rule (timed out, ...) and lint goes on;
  what it prints is kept out of the report and noted on stderr (``ModelResult.notes``);
* a graph too broken to build (duplicate names, dangling inputs, an illegal cycle) is handed to
  the integrity rules (PV0xx) on the raw GraphDef, which report every such problem as findings
  (exit 1); the other rules are skipped. A file that is not a graph at all stays an error (exit 2).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from placeviz.errors import GraphError, LoadError, PlacevizError
from placeviz.gcpause import keep_until_exit
from placeviz.limits import InputRefused
from placeviz.lint.api import SEVERITIES, Finding, LintContext
from placeviz.lint.contain import DEFAULT_TIMEOUT, run_contained
from placeviz.lint.discovery import LoadedRule
from placeviz.lint.raw import RawGraph, read_graph_def
from placeviz.progress import doing

if TYPE_CHECKING:
    from placeviz.devices import ClusterSpec
    from placeviz.pipeline import Options

SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}

NEED_REASONS = {
    "cluster": "needs a cluster spec: give --cluster FILE (or cluster = \"...\" in the lint config)",
    "ps-count": "needs the number of PS tasks: give --ps-tasks N or --cluster FILE (with a ps job)",
    "meta": "needs MetaGraphDef collections: lint a .meta file or a SavedModel, not a bare GraphDef",
    "sync": "no SyncReplicas machinery in the graph (--sync-replicas rewrites a plain graph first)",
    "tasks": "needs the graphs the other worker tasks build: give --worker-graph I=MODEL (or a builder taking "
             "task_index, with --cluster)",
}


@dataclass
class Skipped:
    rule: str
    name: str
    model: str
    reason: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class LintError:
    """A problem that stopped linting a model, or one rule on it (exit 2)."""

    message: str
    model: str | None = None
    rule: str | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


def _default_pipeline() -> Options:
    from placeviz.pipeline import Options  # the pipeline is imported when a model is linted, not before

    return Options()


@dataclass
class LintOptions:
    pipeline: Options = field(default_factory=_default_pipeline)
    """What the pipeline runs (PLACE, SYNC, ``--tag``, ``--batch-size``), as the command built it
    (:func:`placeviz.commands.options.build_options`); :func:`model_pipeline` sets the two stage
    switches lint's rules decide."""
    thresholds: dict = field(default_factory=dict)
    severity: dict = field(default_factory=dict)  # rule ID -> severity override
    worker_graphs: dict = field(default_factory=dict)  # task index -> MODEL that task built (--worker-graph)
    workers: int | None = None  # worker tasks of the cluster the user gave (a per-task builder runs per task)
    rule_timeout: float | None = DEFAULT_TIMEOUT  # seconds per user rule and model (None or 0: no limit)

    @property
    def cluster(self) -> ClusterSpec | None:
        """The cluster spec the user gave (``--cluster``, or the lint config's): the PLACE options'."""
        placement = self.pipeline.placement
        return placement.cluster if placement is not None else None


@dataclass
class ModelResult:
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    errors: list[LintError] = field(default_factory=list)
    ran: list[LoadedRule] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Said on stderr, never in the report: what user rules printed."""


def display_path(spec: str) -> str:
    """The model path as findings, fingerprints and SARIF name it: relative to the current
    directory when inside it, with forward slashes, so that it is stable across machines."""
    if not os.path.exists(spec):
        return spec
    path = Path(spec).resolve()
    try:
        return path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return Path(spec).as_posix()


def lint_model(spec: str, rules: list[LoadedRule], options: LintOptions, *, last: bool = False) -> ModelResult:
    """Run ``rules`` on one model; see the module docstring.

    ``last``: no other model follows in this process, so the model, its pipeline and the rules'
    context are held to the end (:func:`placeviz.gcpause.keep_until_exit`) rather than freed one
    object at a time; an earlier model's are freed before the next one is read.
    """
    from placeviz.io import load

    model_path = display_path(spec)
    result = ModelResult()
    timeout = options.rule_timeout
    try:
        model = load(spec, tag=options.pipeline.tag)
    except InputRefused as e:  # not to be read at all (a FIFO, /dev/zero, too big): no raw pass either
        result.errors.append(LintError(str(e), model_path))
        return result
    except LoadError as e:
        graph_def = read_graph_def(spec, options.pipeline.tag)
        if graph_def is None:
            result.errors.append(LintError(str(e), model_path))
            return result
        return _broken(result, rules, _context(model_path, None, RawGraph(graph_def), options), e, timeout)
    raw = RawGraph.from_graph(model.graph)
    try:
        model.graph.topological_order  # noqa: B018 - the pipeline's analysis refuses illegal cycles
    except GraphError as e:
        return _broken(result, rules, _context(model_path, None, raw, options), e, timeout)
    from placeviz.coverage import serving_graph_problem

    serving = serving_graph_problem(model)
    if serving is not None:  # not a training graph: no rule can judge it (exit 2, as for bad input)
        result.errors.append(LintError(f"{model_path}: {serving}", model_path))  # worded as a LoadError
        return result
    try:
        pipe = model_pipeline(model, rules, options)
    except PlacevizError as e:
        result.errors.append(LintError(str(e), model_path))
        return result
    except Exception as e:  # noqa: BLE001 - a pipeline bug: integrity findings may explain it, else exit 2
        error = PlacevizError(f"internal error in the pipeline: {type(e).__name__}: {e}")
        return _broken(result, rules, _context(model_path, None, raw, options), error, timeout)
    agreement = None
    if options.worker_graphs or model.per_task:
        from placeviz.agreement import check_agreement  # only here: one model alone does not pay its import
        from placeviz.tasks import task_pipelines

        # A bad --worker-graph (not a graph, outside the cluster) raises: one line, exit 2.
        pipes, sources = task_pipelines(model, pipe, spec, options.worker_graphs, options.pipeline,
                                        workers=options.workers)
        agreement = check_agreement(pipes, sources)
    ctx = _context(model_path, pipe, raw, options, agreement)
    if last:
        keep_until_exit(model, pipe, raw, ctx)
    return _locate(_run_rules(ctx, rules, result, timeout), model.sources)


def model_pipeline(model, rules: list[LoadedRule], options: LintOptions):
    """The pipeline ``lint`` runs on a loaded model (task 0's options), with only what ``rules``
    can read: a partition when one of them may read it (see :func:`_needs_partition`), and no
    summaries; ``benchmarks/lint_profile.py`` times this call."""
    from placeviz.pipeline import run_pipeline

    stages = dataclasses.replace(options.pipeline, partition=_needs_partition(rules), summaries=False)
    return run_pipeline(model, stages)


def _needs_partition(rules: list[LoadedRule]) -> bool:
    """Whether any of ``rules`` may read the partition of one step: a built-in rule that declares
    the need, or any user rule (``--rules DIR``: it may read ``ctx.partitions`` undeclared).

    Partitioning is a fifth of the pipeline; ``--select``/``--ignore`` that leave out PV401 and
    PV403 (and any such rule) skip it. The rules read the stages' results, never the summaries
    ``analyze`` shows (placement table, traffic), so the pipeline is asked not to make those.
    """
    return any(r.origin != "builtin" or "partition" in r.rule.needs for r in rules)


def lint_pipeline(pipe, rules: list[LoadedRule], options: LintOptions, model_path: str | None = None) -> ModelResult:
    """Run ``rules`` on a pipeline already computed (``render``'s HTML report, and the demo through
    ``run_lint(pipelines=...)``), so the model is not loaded and placed twice. The graph loaded, so
    no integrity pre-pass; no agreement check of other tasks' graphs either (``lint_model`` does it
    for a per-task builder or ``--worker-graph``)."""
    model_path = model_path or display_path(pipe.model.source)
    raw = RawGraph.from_graph(pipe.model.graph)
    return _locate(_run_rules(_context(model_path, pipe, raw, options), rules, ModelResult(), options.rule_timeout),
                   pipe.model.sources)


def _locate(result: ModelResult, sources: dict) -> ModelResult:
    """Give each finding on a node the user's line that created it (:mod:`placeviz.sources`)."""
    if sources:
        for f in result.findings:
            line = sources.get(f.node) if f.node else None
            if line is not None and f.source is None:
                f.source = line.to_json()
    return result


def _run_rules(ctx: LintContext, rules: list[LoadedRule], result: ModelResult,
               timeout: float | None = DEFAULT_TIMEOUT) -> ModelResult:
    for r in rules:
        if r.rule.category == "meta":
            continue  # judged by the engine from the config, once per run
        missing = ctx.missing(r.rule)
        if missing:
            result.skipped.append(Skipped(r.id, r.name, ctx.model_path, _reason(ctx, missing[0])))
        else:
            doing(f"{r.id} {r.name}")
            _run_rule(r, ctx, result, timeout)
    return result


def _context(model_path: str, pipe, raw: RawGraph, options: LintOptions, agreement=None) -> LintContext:
    from placeviz.ops import load_op_table

    return LintContext(model_path=model_path, pipeline=pipe, cluster=options.cluster,
                       thresholds=options.thresholds, op_table=load_op_table(), raw=raw,
                       placement_options=options.pipeline.for_task(0).placement,
                       agreement=agreement)


def _broken(result: ModelResult, rules: list[LoadedRule], ctx: LintContext, error: PlacevizError,
            timeout: float | None = DEFAULT_TIMEOUT) -> ModelResult:
    """The graph could not be built: integrity rules only; the rest are skipped."""
    for r in rules:
        if r.rule.integrity:
            _run_rule(r, ctx, result, timeout)
    if not result.findings and not result.errors:
        # None of the integrity rules explains the failure: it is not a finding we can report.
        result.errors.append(LintError(str(error), ctx.model_path))
        return result
    problem = getattr(error, "problem", None) or str(error)
    for r in rules:
        if not r.rule.integrity and r.rule.category != "meta":
            result.skipped.append(Skipped(r.id, r.name, ctx.model_path, f"the graph cannot be loaded: {problem}"))
    return result


def _reason(ctx: LintContext, need: str) -> str:
    pipe = ctx.pipeline
    if need == "placement":
        if pipe.placement_error:
            return f"placement failed: {pipe.placement_error}"
        return "needs placement: the graph requests no devices; give --ps-tasks N or --cluster FILE"
    if need == "partition":
        if pipe.partition_error:
            return f"partitioning failed: {pipe.partition_error}"
        if pipe.placement_error:
            return f"needs a partition, and placement failed: {pipe.placement_error}"
        return "needs a partition of one step, which needs placement: give --ps-tasks N or --cluster FILE"
    return NEED_REASONS.get(need, f"needs {need}")


def _run_rule(r: LoadedRule, ctx: LintContext, result: ModelResult, timeout: float | None = DEFAULT_TIMEOUT) -> None:
    if r.origin != "builtin":
        _run_user_rule(r, ctx, result, timeout)
        return
    try:
        found = list(r.check(ctx) or ())
    except Exception as e:  # noqa: BLE001 - one broken rule must not stop the others
        text = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        result.errors.append(LintError(f"rule {r.id} ({r.name}) failed on {ctx.model_path}: "
                                       f"{type(e).__name__}{': ' + text if text else ''}", ctx.model_path, r.id))
        return
    _accept(r, ctx, result, found)


def _run_user_rule(r: LoadedRule, ctx: LintContext, result: ModelResult, timeout: float | None) -> None:
    """A ``--rules DIR`` rule, contained (:func:`placeviz.lint.contain.run_contained`)."""
    outcome = run_contained(lambda: list(r.check(ctx) or ()), timeout)
    if outcome.output_bytes:
        lines = outcome.output.strip().splitlines()
        first = repr(lines[0][:200]) if lines else "(blank)"
        result.notes.append(f"rule {r.id} ({r.name}) printed {outcome.output_bytes:,} bytes on stdout/stderr on "
                            f"{ctx.model_path}, kept out of the report; first line: {first}")
    if outcome.timed_out:
        result.errors.append(LintError(f"rule {r.id} ({r.name}) timed out on {ctx.model_path} after {timeout:g} s "
                                       "(--rule-timeout): it was stopped, and the other rules ran", ctx.model_path,
                                       r.id))
        return
    if outcome.error is not None:
        result.errors.append(LintError(f"rule {r.id} ({r.name}) failed on {ctx.model_path}: {outcome.error}",
                                       ctx.model_path, r.id))
        return
    assert isinstance(outcome.value, list)  # no error: the value is the list the lambda above made
    _accept(r, ctx, result, outcome.value)


def _accept(r: LoadedRule, ctx: LintContext, result: ModelResult, found: list) -> None:
    """Keep what a rule yielded if every item is a valid Finding of that rule, else one error."""
    for f in found:
        problem = None
        if not isinstance(f, Finding):
            problem = f"yielded {type(f).__name__}, not a Finding"
        elif f.rule != r.id:
            problem = f"yielded a finding of rule {f.rule!r}"
        elif f.severity not in SEVERITY_RANK:
            problem = f"yielded severity {f.severity!r}"
        if problem:
            result.errors.append(LintError(f"rule {r.id} ({r.name}) {problem} on {ctx.model_path}",
                                           ctx.model_path, r.id))
            return
    result.ran.append(r)
    result.findings.extend(found)
