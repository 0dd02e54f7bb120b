"""``placeviz place``: write the graph with the devices our setter and placer give each node.

It runs the static pipeline (:func:`placeviz.pipeline.run_pipeline`) up to placement, so the SYNC
options rewrite a plain graph into SyncReplicas form first, as for ``analyze``; no report is made.
"""

from __future__ import annotations

from collections import Counter

from placeviz.commands.output import notice, progress
from placeviz.coverage import refuse_serving_graph
from placeviz.errors import PlacevizError
from placeviz.io import check_output, load, save_proto
from placeviz.pipeline import Options, run_pipeline
from placeviz.progress import begin
from placeviz.protos import GraphDef


def run(model_spec: str, output: str, options: Options, stage: str) -> None:
    """Place MODEL as ``options`` say (``stage``: ``setter`` or ``placed``, the name progress shows;
    ``options.setter_only`` is what stops at the setter) and write the placed GraphDef."""
    placement = options.placement
    if placement is None:
        raise PlacevizError("place needs the PLACE options")
    model = load(model_spec, tag=options.tag)
    refuse_serving_graph(model)
    check_output(output)  # before placing: -o may not be the model (placeviz.io, "writing")
    for note in placement.notes:  # --ps-tasks 0
        notice(f"note: {note}")
    pipe = run_pipeline(model, options, progress=_stages(stage))
    if options.setter_only:  # the setter only writes strings: TF's placer judges them later
        setter, graph = pipe.setter, pipe.graph
        devices = graph.devices
    elif pipe.placement is None:  # place is asked for the placement: its failure is an error
        raise PlacevizError(pipe.placement_error or "the graph was not placed")
    else:
        setter, graph = pipe.placement.setter, pipe.placement.graph
        devices = pipe.placement.placement.devices
    out = GraphDef()
    out.CopyFrom(graph.graph_def)
    for node, device in zip(out.node, devices, strict=True):
        node.device = device
    save_proto(out, output)
    for note in setter.notes if setter is not None else ():
        notice(f"note: {note}")
    if setter is None and options.setter_only:
        progress("the graph already places its variables on jobs: kept its devices "
                 "(use --replace-devices to re-run the setter)" if placement.wants_setter else
                 "no --ps-tasks/--cluster given: the setter stage leaves the devices as they are")
    counts = Counter(devices)
    progress(f"{len(devices):,} nodes on {len(counts)} devices ({stage} stage): "
             + ", ".join(f"{d or '(none)'} {n:,}" for d, n in sorted(counts.items())[:8]))



def _stages(stage: str):
    """The pipeline's status lines as progress stages: the sync pass, then ``placing (STAGE stage)``."""
    return lambda message: begin(f"placing ({stage} stage)" if message.startswith("placing") else message.rstrip(" ."))
