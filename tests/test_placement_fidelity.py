"""Placement against TensorFlow itself, node for node.

Setter stage: every sample is built twice with TF's real API, once without a device setter and once
under ``tf.compat.v1.train.replica_device_setter(...)``; placeviz's replay over the first must give
every node of the second its ``NodeDef.device`` exactly (including the per-device NoOps that
``group`` adds, which exist only in the placed build).

Placed stage: TF's own placed build is run on a local cluster (servers on 127.0.0.1, Grappler off,
L0) and TF's placer log gives the device of every node; placeviz's placer must agree everywhere, and
fail with TF's message where TF fails.

Each test prints ``agree N / N`` (run ``pytest -s``) for the closing notes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from placeviz.devices import ClusterSpec, DeviceSet
from placeviz.io import model_from_proto
from placeviz.placement import PlacementOptions, place_graph
from placeviz.placement.placer import PlacementError, PlacerConfig
from placeviz.placement.setter import SetterConfig, run_setter

pytestmark = pytest.mark.tf

SMALL_SAMPLES = ["mlp", "inception", "wide_deep", "lstm", "hashtable"]


def _graph(meta_or_graph_def):
    return model_from_proto("tf", "sample", meta_or_graph_def).graph


def _build(name, **options):
    from placeviz import sample_graphs
    from placeviz.sample_graphs.options import BuildOptions

    return sample_graphs.build_meta_graph(name, BuildOptions(**options))


def _setter_config(options: dict) -> SetterConfig:
    cluster = options.get("cluster")
    return SetterConfig(
        ps_tasks=options.get("ps_tasks", 0),
        ps_device=options.get("ps_device", "/job:ps"),
        worker_device=options.get("worker_device", "/job:worker/task:0"),
        merge_devices=options.get("merge_devices", True),
        cluster=ClusterSpec.from_dict(cluster) if cluster else None,
        ps_ops=frozenset(options["ps_ops"]) if options.get("ps_ops") else None,
        strategy=options.get("ps_strategy", "round-robin"),
        graph_as_default=options.get("graph_as_default", True),
    )


def assert_setter_agrees(name: str, unplaced_graph, placed_graph, config: SetterConfig, label: str) -> None:
    result = run_setter(unplaced_graph, config)
    ours = dict(zip(result.graph.names, result.graph.devices, strict=True))
    theirs = dict(zip(placed_graph.names, placed_graph.devices, strict=True))
    assert set(ours) == set(theirs), (sorted(set(ours) ^ set(theirs))[:10])
    wrong = [(n, ours[n], theirs[n]) for n in theirs if ours[n] != theirs[n]]
    print(f"setter {name} {label}: agree {len(theirs) - len(wrong)} / {len(theirs)}")
    assert not wrong, wrong[:10]


SETTER_CASES = [
    ("ps1", dict(ps_tasks=1)),
    ("ps2", dict(ps_tasks=2)),
    ("ps3", dict(ps_tasks=3)),
    ("ps2-sync", dict(ps_tasks=2, sync_replicas=True, replicas_to_aggregate=2, total_replicas=3)),
    ("ps2-resource", dict(ps_tasks=2, resource_variables=True)),
    ("ps3-sync-resource", dict(ps_tasks=3, sync_replicas=True, resource_variables=True)),
    ("ps3-greedy", dict(ps_tasks=3, ps_strategy="greedy")),
    ("cluster-dict", dict(cluster={"ps": ["a:1", "b:1"], "worker": ["c:1"]})),
    ("sparse-cluster", dict(cluster={"ps": {0: "a:1", 5: "b:1"}, "worker": ["c:1"]})),
    ("custom-ps-ops", dict(ps_tasks=2, ps_ops=("VariableV2", "VarHandleOp", "Const"))),
    ("no-merge", dict(ps_tasks=2, merge_devices=False)),
    ("cpu-ps-device", dict(ps_tasks=2, ps_device="/job:ps/device:CPU:0", worker_device="/job:worker/task:0/cpu:0")),
]


@pytest.mark.parametrize("name", SMALL_SAMPLES)
@pytest.mark.parametrize("label,options", SETTER_CASES, ids=[c[0] for c in SETTER_CASES])
def test_setter_stage_matches_replica_device_setter(name, label, options):
    unplaced_options = {k: v for k, v in options.items()
                        if k in ("sync_replicas", "replicas_to_aggregate", "total_replicas", "resource_variables")}
    unplaced = _graph(_build(name, **unplaced_options))
    placed = _graph(_build(name, **options))
    assert_setter_agrees(name, unplaced, placed, _setter_config(options), label)


def test_setter_stage_on_the_10k_transformer():
    unplaced = _graph(_build("transformer", sync_replicas=True, resource_variables=True))
    placed = _graph(_build("transformer", ps_tasks=3, sync_replicas=True, resource_variables=True))
    assert len(placed) > 10_000
    assert_setter_agrees("transformer", unplaced, placed, SetterConfig(ps_tasks=3, worker_device="/job:worker/task:0"),
                         "ps3-sync-resource")


GLOBAL_GRAPH_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    from placeviz import sample_graphs
    from placeviz.sample_graphs.options import BuildOptions
    name, out = sys.argv[1], sys.argv[2]
    for tag, ps in (("unplaced", 0), ("placed", 2)):
        opts = BuildOptions(ps_tasks=ps, sync_replicas=True, graph_as_default=False)
        meta = sample_graphs.build_meta_graph(name, opts)
        open(os.path.join(out, tag + ".pb"), "wb").write(meta.graph_def.SerializeToString())
""")


@pytest.mark.parametrize("name", ["mlp", "lstm"])
def test_setter_stage_in_the_global_default_graph(name, tmp_path):
    """Built without Graph.as_default(): the SyncReplicas local step no longer moves the counter."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-c", GLOBAL_GRAPH_SCRIPT, name, str(tmp_path)], check=True, env=env,
                   capture_output=True, timeout=300)
    from placeviz.io import load

    unplaced, placed = load(tmp_path / "unplaced.pb").graph, load(tmp_path / "placed.pb").graph
    config = SetterConfig(ps_tasks=2, worker_device="/job:worker/task:0", graph_as_default=False)
    assert_setter_agrees(name, unplaced, placed, config, "global-default-graph")
    # and the switch matters: with the other setting some variable lands elsewhere
    other = run_setter(unplaced, SetterConfig(ps_tasks=2, worker_device="/job:worker/task:0"))
    assert dict(zip(other.graph.names, other.graph.devices, strict=True)) != dict(
        zip(placed.names, placed.devices, strict=True))


# ------------------------------------------------------------------------------------ placed stage
def _runtime_truth(meta, cluster: dict, soft: bool = False):
    from placeviz.verify.runtime_truth import run_in_subprocess

    init = [n for n in ("init", "local_init") if any(node.name == n for node in meta.graph_def.node)]
    return run_in_subprocess(meta.graph_def.SerializeToString(), cluster=cluster, init_ops=init,
                             allow_soft_placement=soft, timeout_s=240)


PLACED_CASES = [
    ("mlp", dict(ps_tasks=2)),
    ("mlp", dict(ps_tasks=2, sync_replicas=True, resource_variables=True)),
    ("inception", dict(ps_tasks=2, sync_replicas=True, total_replicas=3)),
    ("wide_deep", dict(ps_tasks=3, sync_replicas=True)),
    ("lstm", dict(ps_tasks=2, resource_variables=True)),
    ("hashtable", dict(ps_tasks=2, sync_replicas=True)),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,options", PLACED_CASES,
                         ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in o.items())}" for n, o in PLACED_CASES])
def test_placed_stage_matches_tf_runtime(name, options):
    meta = _build(name, **options)
    graph = _graph(meta)
    ps = options["ps_tasks"]
    truth = _runtime_truth(meta, {"ps": ps, "worker": 1})
    assert truth.error is None, truth.error
    result = place_graph(graph, PlacementOptions(cluster=ClusterSpec.from_ps_tasks(ps)))
    ours = dict(zip(result.graph.names, result.placement.devices, strict=True))
    theirs = truth.placer_devices
    assert set(theirs) == set(ours)
    wrong = [(n, ours[n], theirs[n]) for n in theirs if ours[n] != theirs[n]]
    print(f"placed {name} {options}: agree {len(theirs) - len(wrong)} / {len(theirs)}")
    assert not wrong, wrong[:10]


@pytest.mark.slow
def test_misconfigured_sample_fails_like_tf_and_soft_placement_agrees():
    meta = _build("misconfigured", ps_tasks=2)
    graph = _graph(meta)
    options = PlacementOptions(cluster=ClusterSpec.from_ps_tasks(2))
    hard = _runtime_truth(meta, {"ps": 2, "worker": 1})
    assert hard.error is not None
    with pytest.raises(PlacementError) as ours:
        place_graph(graph, options)
    # TF: "Cannot colocate nodes {{colocation_node sub}} and {{colocation_node feature_std}}: ..."
    theirs = hard.error.split(": ", 1)[1].replace("{{colocation_node ", "").replace("}}", "").split(" [nodes:")[0]
    assert str(ours.value) == theirs

    soft = _runtime_truth(meta, {"ps": 2, "worker": 1}, soft=True)
    assert soft.error is None
    result = place_graph(graph, PlacementOptions(cluster=ClusterSpec.from_ps_tasks(2),
                                                 placer=PlacerConfig(allow_soft_placement=True)))
    ours_soft = dict(zip(result.graph.names, result.placement.devices, strict=True))
    wrong = [(n, ours_soft[n], d) for n, d in soft.placer_devices.items() if ours_soft[n] != d]
    print(f"placed misconfigured soft: agree {len(soft.placer_devices) - len(wrong)} / {len(soft.placer_devices)}")
    assert not wrong, wrong[:10]


def test_device_set_local_first_order():
    """docs/tf-behaviours.md, "The placer": with master worker:1, unrequested ops go to worker:1, /job:ps to ps:0."""
    from placeviz.devices import sort_devices

    ds = DeviceSet(ClusterSpec.from_dict({"ps": ["a", "b"], "worker": ["c", "d"]}))
    order = [d.name for d in sort_devices(ds.devices, {"CPU": 0}, "/job:worker/task:1")]
    assert order[0] == "/job:worker/replica:0/task:1/device:CPU:0"
    assert order[1] == "/job:ps/replica:0/task:0/device:CPU:0"
