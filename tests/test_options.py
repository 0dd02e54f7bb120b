"""One options object per command: :class:`placeviz.pipeline.Options`, built once from the command
line (:func:`placeviz.commands.options.build_options`) and handed to the pipeline as it is.

The pipeline's results for the same options are checked in tests/test_pipeline.py; here: that a
command parses its options in one place and the pipeline sees what was parsed, that the per-task
variant is made from the same object, and that ``place``/``partition`` given the SYNC options write
what ``sync`` followed by ``place``/``partition`` writes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import placeviz.cli
import placeviz.commands.options
import placeviz.pipeline
from placeviz.pipeline import Options
from placeviz.protos import GraphDef
from tests.conftest import run_cli

PLAIN_MLP = Path(__file__).parent / "golden" / "render" / "mlp_plain.pbtxt"
SYNC = ["--sync-replicas", "--replicas-to-aggregate", "2", "--total-replicas", "3", "--sync-name", "my_sync"]


@pytest.fixture
def seen(monkeypatch):
    """Every Options ``build_options`` made and every Options ``run_pipeline`` received, in order."""
    record: dict[str, list] = {"built": [], "received": []}
    build, run = placeviz.commands.options.build_options, placeviz.pipeline.run_pipeline

    def built(*args, **kwargs):
        options = build(*args, **kwargs)
        record["built"].append(options)
        return options

    def received(model, options=None, **kwargs):
        record["received"].append(options)
        return run(model, options, **kwargs)

    monkeypatch.setattr(placeviz.commands.options, "build_options", built)
    monkeypatch.setattr(placeviz.cli, "build_options", built)
    monkeypatch.setattr(placeviz.pipeline, "run_pipeline", received)
    for module in ("analyze", "place", "partition", "render"):
        monkeypatch.setattr(f"placeviz.commands.{module}.run_pipeline", received)
    return record


@pytest.mark.parametrize("command", [
    ["analyze", PLAIN_MLP, "--format", "json", "--fetch", "loss:0", "--batch-size", "8", *SYNC],
    ["place", PLAIN_MLP, "-o", "{tmp}/p.pb", *SYNC],
    ["place", PLAIN_MLP, "-o", "{tmp}/s.pb", "--stage", "setter"],
    ["partition", PLAIN_MLP, "-o", "{tmp}/parts", "--level", "task", *SYNC],
    ["lint", PLAIN_MLP, "--format", "json", "--batch-size", "8", *SYNC],
    ["render", PLAIN_MLP, "-o", "{tmp}/v.dot", "--view", "overview", *SYNC],
    ["render", PLAIN_MLP, "-o", "{tmp}/r.html", *SYNC],
], ids=["analyze", "place", "place-setter", "partition", "lint", "render", "render-html"])
def test_a_command_builds_its_options_once_and_the_pipeline_receives_them(command, seen, tmp_path, capsys):
    args = [str(a).replace("{tmp}", str(tmp_path)) for a in command]
    code, _out, err = run_cli([*args, "--ps-tasks", "3", "--worker-device", "/job:worker/task:%d"], capsys)
    assert code in (0, 1), err  # lint: 1 when it finds something
    assert len(seen["built"]) == 1, "the command line is parsed into one Options, once"
    built = seen["built"][0]
    assert len(seen["received"]) == 1
    received = seen["received"][0]
    # The pipeline gets that object (lint: with the two switches its rules decide, lint.runner;
    # render to a picture: without the placement summaries only the HTML report draws), not
    # options parsed again.
    if command[0] == "lint" or (command[0] == "render" and not args[3].endswith(".html")):
        assert (received.placement, received.sync, received.step) == (built.placement, built.sync, built.step)
        assert received.placement is built.placement and received.sync is built.sync
        assert dataclasses.replace(received, partition=built.partition, summaries=built.summaries) == built
        assert not received.summaries
    else:
        assert received is built
    # And they say what the command line said.
    assert built.placement.setter.ps_tasks == 3
    if "--sync-replicas" in args:
        assert (built.sync.replicas_to_aggregate, built.sync.total_replicas, built.sync.name) == (2, 3, "my_sync")
    else:
        assert built.sync is None
    assert built.step.batch_size == (8 if "--batch-size" in args else None)
    assert built.setter_only == ("setter" in args)
    assert built.describe == (command[0] not in ("place", "partition"))


def test_for_task_is_the_same_options_as_a_worker_task_has_them(tmp_path):
    """Task I gets its worker device and its session's task (PlacementOptions.for_task) and a non-chief
    worker's SyncReplicas graph; task 0 only fills in the ``%d``; the switches and the step stay."""
    place = {"ps_tasks": 2, "ps_tasks_zero": False, "cluster_file": None, "worker_device": "/job:worker/task:%d",
             "ps_device": "/job:ps", "strategy": "round-robin", "ps_ops": None, "no_merge_devices": False,
             "cpus_per_task": 1, "gpus_per_worker": 0, "replace_devices": False, "master": "/job:worker/task:0",
             "soft_placement": False, "global_default_graph": False, "setter_scope_end": None, "plain_noops": ()}
    sync = placeviz.pipeline.SyncOptions(replicas_to_aggregate=2, total_replicas=3)
    options = placeviz.commands.options.build_options(place, sync, fetches=["loss:0"], place_always=True,
                                                      summaries=False)
    chief, worker = options.for_task(0), options.for_task(2)
    assert chief.sync is sync and chief.placement.setter.worker_device == "/job:worker/task:0"
    assert worker.sync == dataclasses.replace(sync, is_chief=False)
    assert worker.placement.setter.worker_device == "/job:worker/task:2"
    assert worker.placement.placer.master_task == "/job:worker/task:2"  # the session runs in the task itself
    for task in (chief, worker):
        assert (task.step, task.place_always, task.summaries, task.partition) == (options.step, True, False, True)
    plain = Options()
    assert plain.for_task(0) is plain and plain.for_task(3) is plain  # nothing task-specific in it
    fixed = placeviz.commands.options.build_options({**place, "worker_device": "/job:worker"})
    assert fixed.for_task(0) is fixed  # the chief of a graph without %d: nothing to fill in
    assert fixed.for_task(1).placement.placer.master_task == "/job:worker/task:1"


def test_place_with_the_sync_options_writes_what_sync_then_place_writes(tmp_path, capsys):
    """``place --sync-replicas ...`` is ``sync`` then ``place`` of its output: the same bytes."""
    code, _out, err = run_cli(["place", PLAIN_MLP, "-o", tmp_path / "one.pb", "--ps-tasks", "2", *SYNC], capsys)
    assert code == 0, err
    code, _out, err = run_cli(["sync", PLAIN_MLP, "-o", tmp_path / "sync.pb", "--replicas-to-aggregate", "2",
                               "--total-replicas", "3", "--name", "my_sync"], capsys)
    assert code == 0, err
    code, _out, err = run_cli(["place", tmp_path / "sync.pb", "-o", tmp_path / "two.pb", "--ps-tasks", "2"], capsys)
    assert code == 0, err
    one = (tmp_path / "one.pb").read_bytes()
    assert one == (tmp_path / "two.pb").read_bytes()
    assert b"my_sync/" in one and b"sync_token_q" in one


def test_partition_with_the_sync_options_writes_what_sync_then_partition_writes(tmp_path, capsys):
    """``partition --sync-replicas ...`` is ``sync`` then ``partition`` of its output: the same
    partition GraphDefs and the same index but for the model's name. (Not the same bytes: from a
    binary file partition copies each node's bytes and writes its new device after them,
    placeviz.nodewire; a rewritten graph is serialized in field order.)"""
    common = ["--ps-tasks", "2", "--level", "task", "--target", "train_op"]
    code, _out, err = run_cli(["partition", PLAIN_MLP, "-o", tmp_path / "one", *common, *SYNC], capsys)
    assert code == 0, err
    code, _out, err = run_cli(["sync", PLAIN_MLP, "-o", tmp_path / "sync.pb", "--replicas-to-aggregate", "2",
                               "--total-replicas", "3", "--name", "my_sync"], capsys)
    assert code == 0, err
    code, _out, err = run_cli(["partition", tmp_path / "sync.pb", "-o", tmp_path / "two", *common], capsys)
    assert code == 0, err
    one, two = (json.loads((tmp_path / d / "index.json").read_text()) for d in ("one", "two"))
    files = sorted(entry["file"] for entry in one["partitions"])
    assert files == sorted(entry["file"] for entry in two["partitions"]) and len(files) > 1
    for name in files:
        parsed = [GraphDef.FromString((tmp_path / d / name).read_bytes()) for d in ("one", "two")]
        assert parsed[0] == parsed[1], name
    assert {k: v for k, v in one.items() if k != "model"} == {k: v for k, v in two.items() if k != "model"}
    assert one["transfers"], "the sync graph's step crosses the network"


def test_worker_graphs_are_placed_as_the_chiefs_is(tmp_path, capsys):
    """``analyze --explain`` places an unplaced graph given no PLACE option (``place_always``); the
    worker tasks' graphs get the same switches (Options.for_task), so the same graph given as worker
    1's agrees with the chief's, instead of a placed chief compared with an unplaced worker (a
    disagreement per variable, each "on '' in task 1's graph")."""
    code, _out, err = run_cli(["sync", PLAIN_MLP, "-o", tmp_path / "sync.pb", "--replicas-to-aggregate", "2"], capsys)
    assert code == 0, err
    model = tmp_path / "sync.pb"  # unplaced, with SyncReplicas' shared accumulators and token queue
    code, out, err = run_cli(["analyze", model, "--explain", "global_step", "--worker-graph", f"1={model}",
                              "--format", "json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["placement"]["explain"], "--explain placed the chief's graph"
    agreement = report["agreement"]
    assert [t["task"] for t in agreement["tasks"]] == [0, 1]
    assert agreement["agree"] and agreement["disagreements"] == [] and agreement.get("notes", []) == []
