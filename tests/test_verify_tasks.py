"""``placeviz verify`` with one graph per task (between-graph replication), queue inputs, chief-only state.

The builder below is a small TF1 between-graph trainer, written as such programs are: its
function takes ``task_index`` and ``is_chief``, places its model with ``replica_device_setter(
worker_device="/job:worker/task:%d" % task_index)``, reads its input through
``tf.compat.v1.train.batch`` (a queue and its runner), and only the chief builds loss averages (an
``ExponentialMovingAverage`` on its own task, as ``inception_distributed_train.py`` does) and the
init-tokens op. verify calls it once per worker. Bad input (a ``--worker-graph`` that is not a
graph or names a task outside the cluster, a builder raising for one task, a train op that needs
the chief's own state) is one line and exit 2, before any server starts.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import run_cli

HAS_TF = importlib.util.find_spec("tensorflow") is not None


@pytest.fixture(autouse=True)
def _progress_as_lines(monkeypatch):
    """verify's progress (servers starting, global steps run) as stderr lines, which these tests read:
    without a terminal it is off by default (placeviz.progress)."""
    monkeypatch.setenv("PLACEVIZ_PROGRESS", "always")

TRAINER = r'''
import numpy as np
import tensorflow as tf

v1 = tf.compat.v1


def build(task_index, is_chief, fail_on_task=None, loss_reads_average=False):
    if task_index == fail_on_task:
        raise ValueError("no data shard for this task")
    rs = np.random.RandomState(0)
    g = tf.Graph()
    with g.as_default():
        worker = "/job:worker/task:%d" % task_index
        with v1.device(v1.train.replica_device_setter(ps_tasks=1, worker_device=worker)):
            global_step = v1.train.get_or_create_global_step()
            x = tf.constant(rs.randn(32, 4).astype(np.float32))
            y = tf.constant(rs.randn(32, 1).astype(np.float32))
            xb, yb = v1.train.batch([x, y], batch_size=8, enqueue_many=True, capacity=64)
            w = v1.get_variable("w", [4, 1], use_resource=False)
            b = v1.get_variable("b", [1], initializer=v1.zeros_initializer(), use_resource=False)
            loss = tf.reduce_mean(tf.square(tf.matmul(xb, w) + b - yb))
        if is_chief:
            with v1.device(worker):  # the chief's own loss averages (inception_distributed_train.py)
                averages = v1.train.ExponentialMovingAverage(0.9, name="avg")
                averages_op = averages.apply([loss])
            with v1.control_dependencies([averages_op]):
                # the gradient itself reads the average when the loss is scaled by it
                loss = tf.identity(loss) * (1.0 + 0.0 * averages.average(loss) if loss_reads_average else 1.0)
        with v1.device(v1.train.replica_device_setter(ps_tasks=1, worker_device=worker)):
            opt = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=2,
                                                 total_num_replicas=2)
            opt.minimize(loss, global_step=global_step)
            if is_chief:
                opt.get_init_tokens_op()
    return g


def chief_graph_reading_averages():
    return build(0, True, loss_reads_average=True)


def build_failing_on_task_1(task_index, is_chief):
    return build(task_index, is_chief, fail_on_task=1)
'''


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    d = tmp_path_factory.mktemp("between_graph")
    (d / "trainer.py").write_text(TRAINER)
    return d / "trainer.py"


def _run(args, capsys, out=None):
    code, stdout, err = run_cli(["verify", *args, *(["--format", "json", "-o", out] if out else [])], capsys)
    report = json.loads(out.read_text()) if out is not None and out.exists() else None
    return code, report, err


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_a_builder_taking_task_index_builds_every_workers_graph(trainer, tmp_path, capsys):
    code, report, err = _run([f"{trainer}:build", "--steps", 3, "--timeout", 90], capsys, tmp_path / "r.json")
    checks = {c["id"]: c for c in report["checks"]}
    assert code == 0, {k: c["summary"] for k, c in checks.items() if c["status"] != "pass"}
    per_worker = report["run"]["per_worker"]
    assert per_worker[0]["graph"] == "the chief's graph" and per_worker[1]["graph"].endswith("(task_index=1)")
    assert all(w["queue_runners"] == ["batch/fifo_queue"] for w in per_worker)
    assert checks["values"]["status"] == "pass" and checks["gradients_per_step"]["status"] == "pass"
    assert "building worker 1's graph" in err and "input pipeline" in err
    # only the chief's graph has the loss averages; they ran once per chief run, never on worker 1
    averages = [e for e in checks["per_worker_updates"]["evidence"]["entries"] if e["variable"].endswith("/avg")]
    assert averages and all(e["workers"] == [0] and e["ok"] for e in averages)


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_the_chiefs_graph_alone_runs_without_its_chief_only_state_elsewhere(trainer, tmp_path, capsys):
    from placeviz.io import load

    chief = tmp_path / "chief.meta"  # the file the chief's program wrote: build(0, True)
    chief.write_bytes(load(f"{trainer}:build").meta_graph.SerializeToString())
    code, report, err = _run([chief, "--workers", 2, "--steps", 3, "--timeout", 90], capsys, tmp_path / "r.json")
    checks = {c["id"]: c for c in report["checks"]}
    assert code == 0, {k: c["summary"] for k, c in checks.items() if c["status"] != "pass"}
    assert [v.split("/")[-1] for v in report["run"]["chief_only_variables"]] == ["avg"]
    assert report["run"]["per_worker"][1]["chief_only_ops_left_out"] > 0
    assert "chief-only variable" in err


@pytest.mark.tf
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_bad_task_graphs_are_one_line_exit_2_before_any_server(trainer, tmp_path, capsys):
    from placeviz.io import load

    chief = tmp_path / "chief.meta"
    chief.write_bytes(load(f"{trainer}:build").meta_graph.SerializeToString())
    not_a_graph = tmp_path / "notes.pb"
    not_a_graph.write_bytes(b"\x00\x01 this is not a graph")
    cases = [
        ([chief, "--workers", 2, "--worker-graph", f"1={not_a_graph}"], "notes.pb"),
        ([chief, "--workers", 2, "--worker-graph", f"5={chief}"], "the cluster has 2 worker task(s), 0-1"),
        ([chief, "--worker-graph", f"0={chief}"], "task 0 is the chief"),
        ([chief, "--worker-graph", "one=x.meta"], "expected I=MODEL"),
        ([f"{trainer}:build_failing_on_task_1", "--timeout", 30], "for task_index=1: no data shard"),
        ([f"{trainer}:chief_graph_reading_averages", "--workers", 2], "needs chief-only state"),
        ([chief, "--workers", 1000], "verify would start 1001 local TF servers (1 ps, 1000 worker); at most 256"),
    ]
    for args, expected in cases:
        code, _report, err = _run(args, capsys)
        lines = [line for line in err.splitlines() if line.startswith("placeviz: error")]
        assert code == 2 and len(lines) == 1 and expected in lines[0], (args, err)
        assert "starting the cluster" not in err, err
