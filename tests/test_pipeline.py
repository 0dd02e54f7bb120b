"""``run_pipeline``: each stage once, typed results, and the report as a view of them.

The model is ``sample:mlp`` as TensorFlow built it without a device setter or SyncReplicas
(``tests/golden/render/mlp_plain.pbtxt``); what the stages compute is checked against TF in their
own tests (placement, sync pass, partitioning); here, how the pipeline hands their results on.
"""

from __future__ import annotations

import json
from pathlib import Path

from placeviz.io import load
from placeviz.pipeline import Options, StepOptions, SyncOptions, run_pipeline
from placeviz.placement import PlacementOptions
from placeviz.placement.setter import SetterConfig

PLAIN_MLP = Path(__file__).parent / "golden" / "render" / "mlp_plain.pbtxt"


def _sync_pipeline(**switches):
    return run_pipeline(load(PLAIN_MLP), Options(placement=PlacementOptions(setter=SetterConfig(ps_tasks=2)),
                                                 sync=SyncOptions(2), **switches))


def test_report_sections_are_views_of_the_stage_results():
    pipe = _sync_pipeline()
    report = pipe.analysis
    assert report.placement_stage.result is pipe.placement
    assert report.traffic_stage.partitions is pipe.partitions and report.traffic_stage.graph is pipe.graph
    # The step partitioned is one run of the worker's train op the proof found, not a report entry.
    assert pipe.run["targets"] == pipe.proof.worker_train_ops == ["train_op"]
    assert report.partition["run"] is pipe.run and report.partition["bytes_per_step"] > 0
    # A view is made once: the text report, the HTML report and to_json read the same dict.
    assert report.placement is report.placement and report.sync is report.sync
    assert report.to_json()["placement"] is report.placement
    # --explain is a field of its own, shown inside the placement section.
    report.explain = [{"node": "x"}]
    assert report.placement["explain"] == [{"node": "x"}] and "explain" not in report.placement_stage.to_json([])
    json.dumps(report.to_json())


def test_sync_section_describes_the_graph_as_loaded_and_the_pipeline_the_placed_one():
    """The setter rewrote the graph (its device strings, tf.group's NoOps made again per device):
    the report describes the graph as loaded, as ``analyze`` does; the machinery later stages read
    indexes the placed graph."""
    pipe = _sync_pipeline()
    loaded, placed = pipe.model.graph, pipe.graph
    assert placed is not loaded and len(placed) > len(loaded)
    accumulators = pipe.analysis.sync["machinery"]["accumulators"]
    assert accumulators and all(a["device"] == loaded.devices[loaded.index[a["name"]]] == "" for a in accumulators)
    assert pipe.machinery.graph is placed
    assert all(placed.devices[a.node].startswith("/job:ps/task:") for a in pipe.machinery.accumulators)
    assert pipe.analysis.sync["single_update"] is pipe.proof.single_update is True


def test_without_a_report_the_pipeline_still_places_and_partitions():
    """``place`` and ``partition`` run the pipeline with ``describe=False``: no analyze, no detection."""
    pipe = _sync_pipeline(describe=False, step=StepOptions(train_op_by_default=False))
    assert pipe.analysis is None and pipe.machinery is None and pipe.proof is None
    assert pipe.run["what"] == "the whole graph" and pipe.partitions is not None
    assert "sync_token_q" in pipe.graph.index  # the sync pass ran first
    setter = _sync_pipeline(describe=False, setter_only=True)
    assert setter.placement is None and setter.partitions is None
    assert setter.graph is setter.setter.graph  # the setter's device strings, not yet the placer's
    assert setter.graph.devices[setter.graph.index["sync_token_q"]].startswith("/job:ps/task:0")
