"""``placeviz demo``: the bundled end-to-end example, extended by every stage placeviz gains.

It builds a real sample training graph with TensorFlow (an Inception-style CNN wrapped in
``SyncReplicasOptimizer`` with a backup worker, built *without* a device setter, as a
single-machine program would be), then asks placeviz what ``replica_device_setter(ps_tasks=2)`` and
TF's placer would do with it, and writes everything into one directory.
"""

from __future__ import annotations

from pathlib import Path

import click

from placeviz.commands.analyze import explain_node, format_text
from placeviz.commands.output import progress, to_json
from placeviz.commands.partition import partition_file_name
from placeviz.devices import ClusterSpec
from placeviz.errors import PlacevizError
from placeviz.io import atomic_write, model_from_proto, save_proto
from placeviz.partition import partition
from placeviz.pipeline import run_pipeline
from placeviz.placement import PlacementOptions
from placeviz.placement.setter import SetterConfig
from placeviz.protos import GraphDef

DEMO_SAMPLE = "inception"
PS_TASKS = 2
EXPLAIN = ("global_step", "sync_replicas/conditional_accumulator", "sync_token_q")


def run(out_dir: str) -> None:
    import sample_graphs
    from sample_graphs.options import BuildOptions

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PlacevizError(f"{out}: cannot create the output directory: {e.strerror}") from None
    options = BuildOptions(sync_replicas=True, replicas_to_aggregate=2, total_replicas=3)
    progress(f"[1/4] building sample {DEMO_SAMPLE!r} with TensorFlow (SyncReplicas 2 of 3, no device setter) ...")
    meta = sample_graphs.build_meta_graph(DEMO_SAMPLE, options)
    model_path = out / f"{DEMO_SAMPLE}.meta"
    save_proto(meta, model_path)
    model = model_from_proto(str(model_path), "metagraph", meta)

    progress(f"[2/4] placing: replica_device_setter(ps_tasks={PS_TASKS}) replay, then TF's placer ...")
    placement_options = PlacementOptions(setter=SetterConfig(ps_tasks=PS_TASKS, worker_device="/job:worker/task:0"),
                                         cluster=ClusterSpec.from_ps_tasks(PS_TASKS))
    progress("[3/4] analyzing: SyncReplicas proof, placement, one training step's partitions and traffic ...")
    pipe = run_pipeline(model, placement_options)
    if pipe.placement is None:
        raise PlacevizError(f"the demo sample did not place: {pipe.placement_error}")
    result = pipe.placement
    placed = GraphDef()
    placed.CopyFrom(result.graph.graph_def)
    for node, device in zip(placed.node, result.placement.devices, strict=True):
        node.device = device
    save_proto(placed, out / f"{DEMO_SAMPLE}.placed.pb")
    report = pipe.analysis
    report.placement["explain"] = [explain_node(result, name) for name in EXPLAIN if name in result.graph.index]
    parts = partition(result.graph, result.placement.devices, targets=tuple(pipe.run["targets"]), level="device")
    parts_dir = out / "partitions"
    parts_dir.mkdir(exist_ok=True)
    for device, graph_def in parts.partitions.items():
        save_proto(graph_def, parts_dir / partition_file_name(device))
    text = format_text(report)
    atomic_write(out / "analysis.txt", text)
    atomic_write(out / "analysis.json", to_json(report.to_json()))

    progress("[4/4] done")
    click.echo(text, nl=False)
    files = [model_path, out / f"{DEMO_SAMPLE}.placed.pb", out / "analysis.txt", out / "analysis.json",
             f"{parts_dir}/ ({len(parts.partitions)} per-device GraphDefs of one worker step)"]
    click.echo("\nWrote " + ", ".join(str(f) for f in files))
