"""Do the workers agree? PV211 and ``analyze``'s agreement on per-task graphs TF built itself.

Between-graph replication: every task's client builds its own graph. The fixtures are one small
SyncReplicas program built by TF's real API (``tf.compat.v1.disable_v2_behavior()``, in a
subprocess) once per task under ``replica_device_setter(ps_tasks=2,
worker_device="/job:worker/task:%d" % task_index)``, with planted differences in some workers'
builds: variables created in another order (TF's round-robin then gives them other PS tasks),
another shape, task-dependent shared names of a queue and an accumulator, an extra variable. No
mocks: the devices the check reports are compared with the devices TF's own setter wrote.
The real corpus (``tests/realworld``): the chief and non-chief builds of every public program that
builds something ``if is_chief:`` must agree.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from placeviz.protos import MetaGraphDef
from tests.conftest import run_cli

pytestmark = pytest.mark.tf

BUILD = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf

tf.compat.v1.disable_v2_behavior()
v1 = tf.compat.v1
out = sys.argv[1]


def build(task_index, order=("w", "b"), w_cols=2, suffix="", extra=False):
    """Task ``task_index``'s graph of a between-graph replicated program (mnist_replica's shape)."""
    is_chief = task_index == 0
    g = tf.Graph()
    with g.as_default():
        setter = v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:%d" % task_index)
        with v1.device(setter):
            global_step = v1.train.get_or_create_global_step()
            x = v1.placeholder(tf.float32, [None, 4], name="x")
            shapes = {"w": [4, w_cols], "b": [w_cols]}
            made = {name: v1.get_variable(name, shapes[name]) for name in order}
            loss = tf.reduce_mean(tf.square(tf.matmul(x, made["w"]) + made["b"]), name="loss")
            with v1.device("/job:ps/task:0"):  # shared by every task: how workers report to the chief
                done = v1.FIFOQueue(4, [tf.int32], shared_name="done_queue" + suffix, name="done_queue")
                loss_acc = v1.ConditionalAccumulator(tf.float32, shape=[], shared_name="loss_acc" + suffix,
                                                     name="loss_acc")
            done.enqueue([tf.constant(task_index)], name="report_done")
            loss_acc.apply_grad(loss, local_step=0, name="report_loss")
            if extra:
                v1.get_variable("extra", [3], trainable=False)
            opt = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=2,
                                                 total_num_replicas=2)
            train_op = opt.minimize(loss, global_step=global_step)
            v1.add_to_collection(v1.GraphKeys.TRAIN_OP, train_op)
            if is_chief:
                opt.get_chief_queue_runner()
                opt.get_init_tokens_op()
            v1.global_variables_initializer()
    return v1.train.export_meta_graph(graph=g)


variants = {
    "chief": build(0),
    "worker": build(1),
    "worker2": build(2),
    "worker_order": build(1, order=("b", "w")),
    "worker_shape": build(1, w_cols=3),
    "worker_renamed": build(1, suffix="_1"),
    "worker_extra": build(1, extra=True),
    "chief_extra": build(0, extra=True),
}
for name, meta in variants.items():
    with open(os.path.join(out, name + ".meta"), "wb") as f:
        f.write(meta.SerializeToString())
'''


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> Path:
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("agreement")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", BUILD, str(out)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(autouse=True)
def _no_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no pyproject.toml with a lint config above the test's cwd


def meta(path: Path) -> MetaGraphDef:
    return MetaGraphDef.FromString(path.read_bytes())


def tf_devices(path: Path, ops=("VariableV2",)) -> dict[str, str]:
    """The NodeDef.device TF's setter wrote, per variable (or other op) name."""
    return {n.name: n.device for n in meta(path).graph_def.node if n.op in ops}


def local_variables(path: Path) -> set[str]:
    m = meta(path)
    if "local_variables" not in m.collection_def:
        return set()
    from placeviz.protos import VariableDef

    return {VariableDef.FromString(raw).variable_name.split(":")[0]
            for raw in m.collection_def["local_variables"].bytes_list.value}


def agreement(capsys, *paths: Path, options=()) -> dict:
    """``analyze``'s agreement of paths[0] (task 0) with paths[1:] (tasks 1, 2, ...)."""
    workers = [f"--worker-graph={i}={p}" for i, p in enumerate(paths[1:], start=1)]
    code, out, err = run_cli(["analyze", paths[0], "--format", "json", *workers, *options], capsys)
    assert code == 0, err
    return json.loads(out)["agreement"]


def lint(capsys, *args) -> tuple[int, dict, str]:
    code, out, err = run_cli(["lint", "--format", "json", *map(str, args)], capsys)
    return code, (json.loads(out) if out.strip().startswith("{") else {}), err


def pv211(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["rule"] == "PV211"]


def task_prefix(device: str) -> str:
    """``/job:ps/task:1`` -> ``/job:ps/replica:0/task:1``: the task part of a full placed device."""
    job, task = re.fullmatch(r"/job:(\w+)/task:(\d+)(?:/.*)?", device).groups()
    return f"/job:{job}/replica:0/task:{task}/"


# --------------------------------------------------------------------------------- the check
def test_identical_graphs_agree(graphs, capsys):
    a = agreement(capsys, graphs / "chief.meta", graphs / "worker.meta", graphs / "worker2.meta")
    assert a["agree"] and a["disagreements"] == []
    assert a["compared"] == {"variable": 3, "accumulator": 3, "queue": 2}  # w, b, global_step; 2 grad + loss_acc
    assert [t["task"] for t in a["tasks"]] == [0, 1, 2]


def test_variables_built_in_another_order_get_other_ps_tasks(graphs, capsys):
    """The planted order difference: exactly the variables whose devices TF's setter made differ."""
    chief, worker = graphs / "chief.meta", graphs / "worker_order.meta"
    theirs_0, theirs_1 = tf_devices(chief), tf_devices(worker)
    local = local_variables(chief) | local_variables(worker)
    expected = {n for n in theirs_0 if n not in local and theirs_0[n] != theirs_1.get(n)}
    assert expected == {"w", "b"}  # global_step is created first in both, on /job:ps/task:0
    a = agreement(capsys, chief, worker)
    assert not a["agree"]
    moved = {d["name"]: d for d in a["disagreements"] if d["resource"] == "variable"}
    assert set(moved) == expected and all(d["kind"] == "device" for d in moved.values())
    for name, d in moved.items():
        assert (d["task_a"], d["task_b"]) == (0, 1)
        assert (d["requested_a"], d["requested_b"]) == (theirs_0[name], theirs_1[name])  # TF's own setter
        assert d["device_a"].startswith(task_prefix(theirs_0[name]))
        assert d["device_b"].startswith(task_prefix(theirs_1[name]))
        assert d["device_a"] in d["message"] and d["device_b"] in d["message"] and repr(name) in d["message"]
    # SyncReplicas puts each accumulator on its variable's device: they move with the variables.
    accs = {d["name"]: (d["requested_a"], d["requested_b"]) for d in a["disagreements"]
            if d["resource"] == "accumulator"}
    acc_devices = {n: (theirs_0[n.split(":")[0]], theirs_1[n.split(":")[0]]) for n in accs}
    assert set(accs) == {"w:0/grad_accum", "b:0/grad_accum"} and accs == acc_devices
    assert {d["severity"] for d in a["disagreements"]} == {"error"} and len(a["disagreements"]) == 4


def test_a_shape_difference_on_the_same_device(graphs, capsys):
    a = agreement(capsys, graphs / "chief.meta", graphs / "worker_shape.meta")
    found = {(d["resource"], d["name"], d["kind"], d["value_a"], d["value_b"]) for d in a["disagreements"]}
    assert found == {
        ("variable", "w", "shape", "[4,2]", "[4,3]"), ("variable", "b", "shape", "[2]", "[3]"),
        ("accumulator", "w:0/grad_accum", "shape", "[4,2]", "[4,3]"),
        ("accumulator", "b:0/grad_accum", "shape", "[2]", "[3]"),
    }
    w = next(d for d in a["disagreements"] if d["name"] == "w")
    assert w["device_a"] == w["device_b"] and "fails at run time" in w["message"]


def test_task_dependent_shared_names(graphs, capsys):
    a = agreement(capsys, graphs / "chief.meta", graphs / "worker_renamed.meta")
    found = {(d["resource"], d["node_a"], d["value_a"], d["value_b"]) for d in a["disagreements"]}
    assert found == {("queue", "done_queue", "done_queue", "done_queue_1"),
                     ("accumulator", "loss_acc", "loss_acc", "loss_acc_1")}
    assert all(d["kind"] == "shared_name" and d["severity"] == "error" for d in a["disagreements"])


def test_state_only_some_tasks_build(graphs, capsys):
    """Only the chief's: legitimate (silent). A worker's extra variable the chief lacks: warning
    (the chief never initializes it); a worker lacking what another worker has: info."""
    a = agreement(capsys, graphs / "chief_extra.meta", graphs / "worker.meta", graphs / "worker2.meta")
    assert a["disagreements"] == [] and a["agree"]
    a = agreement(capsys, graphs / "chief.meta", graphs / "worker_extra.meta", graphs / "worker2.meta")
    found = {(d["name"], d["kind"], d["task_a"], d["task_b"], d["severity"]) for d in a["disagreements"]}
    assert found == {("extra", "missing", 1, 0, "warning"), ("extra", "missing", 1, 2, "info")}
    assert a["agree"]  # no error
    code, doc, _ = lint(capsys, graphs / "chief.meta", "--worker-graph", f"1={graphs / 'worker_extra.meta'}",
                        "--select", "PV211")
    assert code == 0  # fail-on error
    assert [(f["node"], f["severity"]) for f in pv211(doc)] == [(None, "warning")]  # not in the chief's graph
    assert "is in task 1's graph but not in task 0's" in pv211(doc)[0]["message"]


# --------------------------------------------------------------------------------- lint and CLI
def test_lint_reports_the_planted_graphs_and_passes_the_good_ones(graphs, capsys):
    code, doc, err = lint(capsys, graphs / "chief.meta", "--worker-graph", f"1={graphs / 'worker_order.meta'}")
    assert code == 1, err
    found = {(f["node"], f["severity"]) for f in pv211(doc)}
    assert found == {("w", "error"), ("b", "error"), ("sync_replicas/conditional_accumulator", "error"),
                     ("sync_replicas/conditional_accumulator_1", "error")}
    w = next(f for f in pv211(doc) if f["node"] == "w")
    assert "/job:ps/replica:0/task:1/device:CPU:0 in task 0's graph" in w["message"]
    assert "/job:ps/replica:0/task:0/device:CPU:0 in task 1's graph" in w["message"]
    assert w["device"] == "/job:ps/replica:0/task:1/device:CPU:0" and w["suggestion"]

    code, doc, err = lint(capsys, graphs / "chief.meta", "--worker-graph", f"1={graphs / 'worker.meta'}",
                          "--worker-graph", f"2={graphs / 'worker2.meta'}")
    assert code == 0, (err, doc["findings"])
    assert pv211(doc) == [] and "PV211" not in {s["rule"] for s in doc["skipped"]}

    code, out, _ = run_cli(["lint", graphs / "chief.meta", "--worker-graph", f"1={graphs / 'worker_shape.meta'}",
                            "--select", "PV211"], capsys)
    assert code == 1 and "PV211 [error] variable 'w' has shape [4,2] in task 0's graph but [4,3]" in out


def test_lint_skips_the_rule_with_one_graph(graphs, capsys):
    code, doc, _ = lint(capsys, graphs / "chief.meta", "--select", "PV211")
    assert code == 0 and doc["findings"] == []
    assert [(s["rule"], "--worker-graph" in s["reason"]) for s in doc["skipped"]] == [("PV211", True)]


def test_analyze_text_and_json(graphs, capsys):
    code, out, _ = run_cli(["analyze", graphs / "chief.meta", "--worker-graph", f"1={graphs / 'worker_order.meta'}"],
                           capsys)
    assert code == 0 and "Between-graph replication: tasks 0 (" in out and "disagree" in out
    code, out, _ = run_cli(["analyze", graphs / "chief.meta", "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["agreement"] is None  # one graph: nothing to compare
    code, out, _ = run_cli(["analyze", graphs / "chief.meta", "--format", "json", "--worker-graph",
                            f"1={graphs / 'worker.meta'}"], capsys)
    doc = json.loads(out)["agreement"]
    assert doc["agree"] and doc["counts"] == {"error": 0, "warning": 0, "info": 0}


def _cluster(tmp_path, workers: int) -> Path:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"ps": ["ps0:2222", "ps1:2222"],
                                "worker": [f"w{i}:2222" for i in range(workers)]}))
    return path


@pytest.mark.parametrize("command", ["lint", "analyze"])
def test_bad_worker_graphs_are_one_line_exit_2(graphs, tmp_path, capsys, command):
    cluster = _cluster(tmp_path, 2)
    code, out, err = run_cli([command, graphs / "chief.meta", "--cluster", cluster, "--worker-graph", "5=x.meta"],
                             capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["placeviz: error: --worker-graph 5=x.meta: the cluster has 2 worker task(s), 0-1"]
    (tmp_path / "notes.txt").write_text("not a graph\n")
    code, out, err = run_cli([command, graphs / "chief.meta", "--worker-graph", f"1={tmp_path / 'notes.txt'}"],
                             capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "notes.txt" in err and "Traceback" not in err
    code, _, err = run_cli([command, graphs / "chief.meta", "--worker-graph", "0=x.meta"], capsys)
    assert code == 2 and "task 0 is the chief" in err and len(err.strip().splitlines()) == 1


def test_lint_worker_graph_needs_one_model(graphs, capsys):
    code, _, err = run_cli(["lint", graphs / "chief.meta", graphs / "worker.meta", "--worker-graph",
                            f"1={graphs / 'worker.meta'}"], capsys)
    assert code == 2 and "exactly one MODEL" in err and len(err.strip().splitlines()) == 1


BUILDER = '''
import tensorflow as tf

v1 = tf.compat.v1


def build(task_index, is_chief):
    """A program whose non-chief tasks build the model's variables in another order (a planted bug)."""
    g = tf.Graph()
    with g.as_default():
        with v1.device(v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:%d" % task_index)):
            v1.train.get_or_create_global_step()
            for name in (("w", "b") if is_chief else ("b", "w")):
                v1.get_variable(name, [2, 2])
    return g
'''


def test_a_per_task_builder_is_called_per_worker_of_the_cluster(tmp_path):
    """``file.py:fn`` taking ``task_index``: called for tasks 1 and 2 of a 3-worker cluster (a
    subprocess: the builder imports TF, which the test process does not)."""
    pytest.importorskip("tensorflow")
    (tmp_path / "prog.py").write_text(BUILDER)
    cluster = _cluster(tmp_path, 3)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(Path(__file__).parents[1]))
    proc = subprocess.run([sys.executable, "-m", "placeviz", "analyze", "prog.py:build", "--cluster", str(cluster),
                           "--format", "json"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    a = json.loads(proc.stdout)["agreement"]
    assert [t["source"] for t in a["tasks"]] == ["prog.py:build", "prog.py:build (task_index=1)",
                                                 "prog.py:build (task_index=2)"]
    found = {(d["name"], d["task_b"], d["requested_a"], d["requested_b"]) for d in a["disagreements"]}
    assert found == {(n, t, a_, b_) for t in (1, 2) for n, a_, b_ in
                     (("w", "/job:ps/task:1", "/job:ps/task:0"), ("b", "/job:ps/task:0", "/job:ps/task:1"))}


# --------------------------------------------------------------------------------- the real corpus
REALWORLD = Path(__file__).parent / "realworld"


def _chief_only_programs() -> list[str]:
    """Programs that build something ``if is_chief:`` (their manifest has worker variants)."""
    return sorted(p.stem for p in (REALWORLD / "programs").glob("*.py")
                  if not p.stem.startswith("_") and re.search(r"^CHIEF_ONLY\s*=\s*True", p.read_text(), re.M))


@pytest.fixture(scope="module")
def corpus_built(tmp_path_factory) -> dict:
    pytest.importorskip("tensorflow")
    sys.path.insert(0, str(REALWORLD))
    import corpus

    built = corpus.built_once(_chief_only_programs(), lambda: tmp_path_factory.mktemp("realworld_agree"))
    return {name: built[name] for name in _chief_only_programs()}


def _moved_to_task_1(src: Path, dst: Path) -> Path:
    """The worker build as worker task 1 builds it: the corpus builds every variant with task_index 0,
    so its worker-job devices (task 0 or none) name task 1, as ``"/job:worker/task:%d" % 1`` would."""
    import dataclasses

    from placeviz.devices import PyDeviceSpec

    m = meta(src)
    for n in m.graph_def.node:
        if n.device:
            spec = PyDeviceSpec.parse(n.device)
            if spec.job == "worker" and spec.task in (None, 0):
                n.device = dataclasses.replace(spec, task=1).to_string()
    dst.write_bytes(m.SerializeToString())
    return dst


@pytest.mark.slow
@pytest.mark.parametrize("name", _chief_only_programs())
def test_realworld_chief_and_worker_graphs_agree(corpus_built, name, tmp_path, capsys):
    assert len(_chief_only_programs()) == 6
    program = corpus_built[name]
    if isinstance(program, Exception):
        pytest.fail(str(program))
    variants = {sync for placed, sync, chief in program.variants if placed and not chief}
    assert variants == {False, True}  # plain and SyncReplicas builds, each with a worker variant
    lines, problems = [], []
    for sync in sorted(variants):
        key = "sync" if sync else "plain"
        chief = program.dir / f"placed-{key}-chief.meta"
        for label, worker in (("as built", program.dir / f"placed-{key}-worker.meta"),
                              ("as task 1", _moved_to_task_1(program.dir / f"placed-{key}-worker.meta",
                                                             tmp_path / f"{key}-worker1.meta"))):
            soft = ["--soft-placement"] if program.manifest["soft_placement"] else []
            code, out, err = run_cli(["analyze", chief, "--worker-graph", f"1={worker}", "--format", "json", *soft],
                                     capsys)
            assert code == 0, err
            a = json.loads(out)["agreement"]
            code, doc, err = lint(capsys, chief, "--worker-graph", f"1={worker}", "--select", "PV211", *soft)
            lines.append(f"agree {name} {key} worker {label}: compared {a['compared']}, disagreements {a['counts']}, "
                         f"lint exit {code}")
            assert sum(a["compared"].values()) > 0 and a["compared"]["variable"] > 0
            if sync:
                assert a["compared"].get("accumulator", 0) > 0 and a["compared"].get("queue") == 1  # sync_token_q
            if code != 0 or doc["findings"] or not a["agree"]:
                problems.append((key, label, code, [f["message"][:200] for f in doc.get("findings", [])][:5], err))
    print("\n".join(lines))
    assert not problems, problems
