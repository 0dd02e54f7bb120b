"""``placeviz render``: draw a view of MODEL (or the HTML report) into a file.

The output's suffix picks the format: ``.dot`` (DOT text, no Graphviz needed), ``.svg``/``.png``/
``.pdf`` (laid out by Graphviz), ``.html`` (the self-contained report with every view). Files are
written atomically. Graphviz being absent is checked before any work, so the user learns it in
a second, not after placing a 200k-op graph.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

from placeviz.commands.output import notice, progress
from placeviz.commands.output import say as narrate
from placeviz.errors import PlacevizError
from placeviz.gcpause import keep_until_exit
from placeviz.io import atomic_write
from placeviz.pipeline import Options, added_nodes_note, placement_notes, run_pipeline
from placeviz.progress import begin

NO_DOT_BUDGET = 60
"""Boxes of a ``.dot`` output when Graphviz is not there to measure the picture (a size that fits
a screen for most samples)."""
BIG_MODEL_BYTES = 2 << 20
"""Models above this size (about 10k ops) get progress lines on stderr while they render."""


def output_format(output: str) -> str:
    from placeviz.render.layout import FORMATS

    fmt = Path(output).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise PlacevizError(f"-o {output}: the suffix picks the format; use one of "
                            + ", ".join("." + f for f in FORMATS))
    return fmt


def _is_big(model: str) -> bool:
    try:
        return os.path.getsize(model) > BIG_MODEL_BYTES
    except OSError:
        return False


def run(model: str, output: str, options: Options, *, view: str, focus: str | None, depth: int | None,
        max_nodes: int | None, layout_timeout: float, verify_file: str | None = None) -> None:
    """Load and place MODEL (via the pipeline, as ``options`` say), build the view, lay it out, write ``output``.
    ``verify_file`` (``--verify``, HTML only): a verify or compare-modes JSON shown in the report."""
    from placeviz.render import ViewContext, build_view, to_dot
    from placeviz.render.fit import start_budget
    from placeviz.render.layout import lay_out, require_graphviz

    fmt = output_format(output)
    verify = None
    if verify_file:
        from placeviz.io import note_input
        from placeviz.render.verify_section import load

        if fmt != "html":
            raise PlacevizError(f"--verify {verify_file}: the run section is part of the HTML report (-o FILE.html)")
        note_input(verify_file, "--verify")
        verify = load(verify_file)
    if fmt != "dot":
        require_graphviz(fmt)
    if fmt != "html":  # only the report's placement section reads the variables' placed devices
        options = dataclasses.replace(options, summaries=False)
    say = narrate if _is_big(model) else None
    begin(f"rendering the {view} view")
    pipe = run_pipeline(model, options, progress=say)
    keep_until_exit(pipe)  # its graph, placement and transfers are not freed one by one at the end (placeviz.gcpause)
    from placeviz.coverage import serving_graph_problem

    serving = serving_graph_problem(pipe.model)  # drawn as loaded, never placed (placeviz.coverage)
    for note in [serving] if serving else placement_notes(pipe.model.graph, options.placement):
        notice(f"note: {note}")
    stage = pipe.report.placement_stage  # not the report's placement section: a whole table to make
    added = stage.nodes_added if stage is not None and stage.error is None else 0
    if added:  # the views draw the placed graph: say why they count more ops than the graph has
        notice(f"note: {added_nodes_note(added, len(pipe.model.graph))}")
    if fmt == "html":
        from placeviz.commands.lint import findings_for_pipeline

        if say:
            say("linting for the report ...")
        findings = findings_for_pipeline(pipe, options)
        begin("laying out the HTML report's views")
        write_report(pipe, output, findings, focus=focus, depth=depth, max_nodes=max_nodes, timeout=layout_timeout,
                     verify=verify,
                     progress=say)
        return
    ctx = ViewContext(pipe)
    keep_until_exit(ctx)  # the view's memo: every op's name split into its scopes
    fit = max_nodes is None and shutil.which("dot") is not None
    budget = max_nodes or (start_budget(view) if fit else NO_DOT_BUDGET)
    if say:
        say(f"building the {view} view of {len(ctx.graph):,} ops (at most {budget:,} boxes) ...")
    started = time.perf_counter()
    diagram = None if fit else build_view(ctx, view, focus=focus, depth=depth, max_nodes=budget)
    built = time.perf_counter() - started
    if fmt == "dot" and diagram is not None:  # built above: not fitted, so no layout to run
        atomic_write(output, to_dot(diagram))
        progress(f"wrote {output} ({view} view: {len(diagram.boxes):,} boxes, {len(diagram.edges):,} edges)")
        return
    begin(f"laying out the {view} view with Graphviz")
    result = lay_out(lambda b: build_view(ctx, view, focus=focus, depth=depth, max_nodes=b), budget, fmt,
                     layout_timeout, say, diagram=diagram, fit=fit)
    atomic_write(output, result.data)
    d = result.diagram
    if result.size:  # fitted: the builds and layouts of every try
        how = (f"{result.size[0]:,.0f} x {result.size[1]:,.0f} px; fitted in {result.seconds:.1f} s "
               f"({len(result.tries)} layouts with {result.engine})")
    else:
        how = f"view {built:.1f} s, layout {result.seconds:.1f} s with {result.engine}"
    progress(f"wrote {output} ({view} view: {len(d.boxes):,} boxes, {len(d.edges):,} edges; {how})")


def write_report(pipeline, path: str | os.PathLike, findings: list[dict] | None = None, *,
                 focus: str | None = None, depth: int | None = None, max_nodes: int | None = None,
                 timeout: float = 30.0, progress=None, verify: dict | None = None) -> None:
    """Write the self-contained HTML report of a :class:`~placeviz.pipeline.Pipeline` to ``path``.

    ``findings``: lint findings as dicts ``{rule, severity, node, device, message}`` (None: lint
    was not run). ``verify``: a verify or compare-modes JSON document for the report's run
    section. Raises :class:`~placeviz.render.layout.GraphvizMissing` without Graphviz.
    This is what ``placeviz demo`` calls.
    """
    from placeviz.render.layout import require_graphviz
    from placeviz.render.report import build_report

    require_graphviz("html")
    text = build_report(pipeline, findings, focus=focus, depth=depth, max_nodes=max_nodes,
                        timeout=timeout, progress=progress, verify=verify)
    atomic_write(path, text)
    from placeviz.commands.output import progress as say

    say(f"wrote {path} (HTML report, {len(text) / 1024:,.0f} KiB)")
