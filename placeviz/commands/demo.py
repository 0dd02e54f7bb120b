"""``placeviz demo``: the bundled end-to-end example, extended by every stage placeviz gains.

It builds a real sample training graph with TensorFlow (an Inception-style CNN wrapped in
``SyncReplicasOptimizer`` with a backup worker, built *without* a device setter, as a
single-machine program would be), then asks placeviz what ``replica_device_setter(ps_tasks=2)`` and
TF's placer would do with it, partitions one worker step, lints the graph, draws it (overview SVG
and the HTML report), after running it on a loopback TF cluster of 2 ps and 3 workers (worker 2
slowed by 0.2 s) to show by execution that each variable is updated once per global step, and
which worker's gradients each step averaged or dropped as late (a Chrome trace and a timeline
picture of the run; the report's "Run on a cluster" section). Everything lands in one directory.
"""

from __future__ import annotations

from pathlib import Path

import click

from placeviz.commands import verify as verify_command
from placeviz.commands.analyze import format_text
from placeviz.commands.output import notice, progress, to_json
from placeviz.commands.partition import partition_file_names
from placeviz.devices import ClusterSpec
from placeviz.errors import PlacevizError
from placeviz.io import atomic_write, model_from_proto, save_proto
from placeviz.lint import formats as lint_formats
from placeviz.lint.sarif import format_sarif
from placeviz.partition import partition
from placeviz.pipeline import Options, run_pipeline
from placeviz.placement import PlacementOptions
from placeviz.placement.explain import explain_node
from placeviz.placement.setter import SetterConfig
from placeviz.protos import GraphDef
from placeviz.verify.report import format_text as format_verify

DEMO_SAMPLE = "inception"
PS_TASKS = 2
WORKERS = 3
# The cluster the demo describes: 2 PS tasks and 3 workers (R=2 of W=3: one backup worker). The
# addresses are only names here; verify starts its own servers on loopback.
DEMO_CLUSTER = ClusterSpec.from_dict({"ps": [f"ps{i}:2222" for i in range(PS_TASKS)],
                                      "worker": [f"worker{i}:2222" for i in range(WORKERS)]})
VERIFY_STEPS = 4
SLOW_S = 0.2  # worker 2's delay: its gradients arrive late and the backup worker's take their place
VERIFY_TIMEOUT = 240.0
EXPLAIN = ("global_step", "sync_replicas/conditional_accumulator", "sync_token_q")


def run(out_dir: str) -> None:
    from placeviz import sample_graphs
    from placeviz.sample_graphs.options import BuildOptions

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PlacevizError(f"{out}: cannot create the output directory: {e.strerror}") from None
    build = BuildOptions(sync_replicas=True, replicas_to_aggregate=2, total_replicas=3)
    progress(f"[1/6] building sample {DEMO_SAMPLE!r} with TensorFlow (SyncReplicas 2 of 3, no device setter) ...")
    meta = sample_graphs.build_meta_graph(DEMO_SAMPLE, build)
    model_path = out / f"{DEMO_SAMPLE}.meta"
    save_proto(meta, model_path)
    model = model_from_proto(str(model_path), "metagraph", meta)

    progress(f"[2/6] placing: replica_device_setter(ps_tasks={PS_TASKS}) replay, then TF's placer ...")
    options = Options(placement=PlacementOptions(setter=SetterConfig(ps_tasks=PS_TASKS,
                                                                     worker_device="/job:worker/task:0"),
                                                 cluster=DEMO_CLUSTER))
    progress("[3/6] analyzing: SyncReplicas proof, placement, one training step's partitions and traffic ...")
    pipe = run_pipeline(model, options)
    if pipe.placement is None:
        raise PlacevizError(f"the demo sample did not place: {pipe.placement_error}")
    result = pipe.placement
    placed = GraphDef()
    placed.CopyFrom(result.graph.graph_def)
    for node, device in zip(placed.node, result.placement.devices, strict=True):
        node.device = device
    save_proto(placed, out / f"{DEMO_SAMPLE}.placed.pb")
    report = pipe.report
    report.explain = [explain_node(result, name) for name in EXPLAIN if name in result.graph]
    parts = partition(result.graph, result.placement.devices, targets=tuple(pipe.run["targets"]), level="device",
                      attr_keys=result.placement.attr_keys)
    parts_dir = out / "partitions"
    parts_dir.mkdir(exist_ok=True)
    names = partition_file_names(parts.partitions)  # distinct even when two devices sanitize alike
    for device, graph_def in parts.partitions.items():
        save_proto(graph_def, parts_dir / names[device])
    text = format_text(report)
    atomic_write(out / "analysis.txt", text)
    # The demo's files are for people to open: JSON indented (the commands' --pretty).
    atomic_write(out / "analysis.json", to_json(report.to_json(), pretty=True))

    progress("[4/6] linting: every rule, as `placeviz lint` would in CI ...")
    lint_report = _lint(pipe, model_path, options)
    atomic_write(out / "lint.json", lint_formats.format_json(lint_report, pretty=True))
    atomic_write(out / "lint.sarif", format_sarif(lint_report, pretty=True))

    progress(f"[5/6] verifying on a local TF cluster (2 ps x 3 workers, {VERIFY_STEPS} steps, worker 2 slowed by "
             f"{SLOW_S} s, loopback only) ...")
    verify_report = verify_command.run(str(model_path), options, steps=VERIFY_STEPS,
                                       timeout=VERIFY_TIMEOUT, slow_workers={2: SLOW_S}, trace=True)
    verify_doc = verify_report.to_json()
    atomic_write(out / "verify.json", to_json(verify_doc, pretty=True))
    verify_command.write_timeline([("sync", verify_report)], str(out / "verify-trace.json"),
                                  str(out / "verify-timeline.png") if _has_matplotlib() else None)
    verify_text = format_verify(verify_report)

    progress("[6/6] rendering: device overview and the HTML report (with the verify run) ...")
    rendered = _render(pipe, out, lint_report, verify_doc)

    click.echo(text, nl=False)
    click.echo()
    counts = lint_report.counts()
    click.echo(f"Lint: {len(lint_report.findings)} findings ({counts['error']} error, {counts['warning']} warning, "
               f"{counts['info']} info) from {len(lint_report.rules)} rules; details in {out / 'lint.json'}")
    click.echo()
    click.echo(verify_text, nl=False)
    files = [model_path, out / f"{DEMO_SAMPLE}.placed.pb", out / "analysis.txt", out / "analysis.json",
             f"{parts_dir}/ ({len(parts.partitions)} per-device GraphDefs of one worker step)",
             out / "lint.json", out / "lint.sarif", *rendered, out / "verify.json", out / "verify-trace.json",
             *([out / "verify-timeline.png"] if _has_matplotlib() else [])]
    click.echo("\nWrote " + ", ".join(str(f) for f in files))
    if not verify_report.ok:
        raise PlacevizError("the demo's verify run failed; see verify.json")


def _lint(pipe, model_path: Path, options: Options):
    """Every rule on the demo's pipeline, reported as ``placeviz lint MODEL`` reports it (the
    model is not loaded, placed and partitioned again)."""
    from placeviz.lint.discovery import load_rules
    from placeviz.lint.engine import run_lint
    from placeviz.lint.runner import LintOptions
    from placeviz.lint.selection import select_rules

    rules = load_rules()
    selected = select_rules(rules, ["ALL"], [], [], preview=False)
    lint_options = LintOptions(pipeline=options)  # its cluster: DEMO_CLUSTER, the placement's
    return run_lint([str(model_path)], selected, lint_options, all_rules=rules, pipelines={str(model_path): pipe})


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _render(pipe, out: Path, lint_report, verify_doc: dict | None = None) -> list[Path]:
    """The device overview as SVG and the HTML report (analysis tables, views, lint findings)."""
    from placeviz.commands.render import write_report
    from placeviz.render import ViewContext, build_view
    from placeviz.render.layout import GraphvizMissing, lay_out

    try:
        ctx = ViewContext(pipe)
        overview = lay_out(lambda budget: build_view(ctx, "overview", max_nodes=budget), 250, "svg", 30.0, None)
        atomic_write(out / "overview.svg", overview.data)
        write_report(pipe, out / "report.html", [f.to_json() for f in lint_report.findings], verify=verify_doc)
    except GraphvizMissing as e:
        notice(f"skipped the pictures: {e}")
        return []
    return [out / "overview.svg", out / "report.html"]
