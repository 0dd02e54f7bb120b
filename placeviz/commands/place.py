"""``placeviz place``: write the graph with the devices our setter and placer give each node."""

from __future__ import annotations

from collections import Counter

from placeviz.commands.output import notice, progress
from placeviz.coverage import refuse_serving_graph
from placeviz.io import check_output, load, save_proto
from placeviz.placement import place_graph, setter_stage
from placeviz.progress import begin
from placeviz.protos import GraphDef


def run(model_spec: str, output: str, options, stage: str, tag: str | None = None) -> None:
    model = load(model_spec, tag=tag)
    refuse_serving_graph(model)
    check_output(output)  # before placing: -o may not be the model (placeviz.io, "writing")
    for note in options.notes:  # --ps-tasks 0
        notice(f"note: {note}")
    begin(f"placing ({stage} stage)")
    if stage == "setter":  # the setter only writes strings: TF's placer judges them later
        setter = setter_stage(model.graph, options)
        graph = model.graph if setter is None else setter.graph
        devices = graph.devices
    else:
        result = place_graph(model.graph, options)
        setter, graph = result.setter, result.graph
        devices = result.placement.devices
    out = GraphDef()
    out.CopyFrom(graph.graph_def)
    for node, device in zip(out.node, devices, strict=True):
        node.device = device
    save_proto(out, output)
    for note in setter.notes if setter is not None else ():
        notice(f"note: {note}")
    if setter is None and stage == "setter":
        progress("the graph already places its variables on jobs: kept its devices "
                 "(use --replace-devices to re-run the setter)" if options.wants_setter else
                 "no --ps-tasks/--cluster given: the setter stage leaves the devices as they are")
    counts = Counter(devices)
    progress(f"{len(devices):,} nodes on {len(counts)} devices ({stage} stage): "
             + ", ".join(f"{d or '(none)'} {n:,}" for d, n in sorted(counts.items())[:8]))
