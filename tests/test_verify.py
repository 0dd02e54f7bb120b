"""``placeviz verify``: real TF clusters (127.0.0.1, private network namespace), real graphs, no mocks.

The graphs are built with TF's own API in one subprocess (``BUILDER``): the MLP sample wrapped in
``SyncReplicasOptimizer`` (2 ps, R=3 of W=3, and R=2 of W=3 with a backup worker), a small
regression model on 1 ps (R=2 of W=2, for the one-process-per-task run), and three broken ones:
an optimizer's apply ops added to the worker's train op (per-worker updates), R=4 with no init
tokens for 3 workers (too few tokens), and no chief queue runner in the ``queue_runners``
collection. Each verify run is one in-process CLI call writing its JSON report with ``-o``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from placeviz.graph import Graph
from placeviz.protos import GraphDef
from placeviz.verify import sandbox
from placeviz.verify.feeds import synthesize
from placeviz.verify.optimizers import adam, momentum
from placeviz.verify.plan import worker_graph
from tests.conftest import run_cli

HAS_TF = importlib.util.find_spec("tensorflow") is not None


@pytest.fixture(autouse=True)
def _progress_as_lines(monkeypatch):
    """verify's progress (servers starting, global steps run) as stderr lines, which these tests read:
    without a terminal it is off by default (placeviz.progress)."""
    monkeypatch.setenv("PLACEVIZ_PROGRESS", "always")

BUILDER = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
from placeviz import sample_graphs
from placeviz.sample_graphs.options import BuildOptions
v1 = tf.compat.v1
out = sys.argv[1]

for name, r, w in (("mlp_r3w3", 3, 3), ("mlp_r2w3", 2, 3)):
    meta = sample_graphs.build_meta_graph("mlp", BuildOptions(ps_tasks=2, sync_replicas=True,
                                          replicas_to_aggregate=r, total_replicas=w))
    with open(os.path.join(out, name + ".meta"), "wb") as f:
        f.write(meta.SerializeToString())

def regression(kind, ps_tasks=2):
    """y = xw + b with SyncReplicasOptimizer, broken in the way ``kind`` says."""
    rs = np.random.RandomState(0)
    g = tf.Graph()
    with g.as_default():
        with v1.device(v1.train.replica_device_setter(ps_tasks=ps_tasks, worker_device="/job:worker/task:0")):
            gs = v1.train.get_or_create_global_step()
            x = v1.placeholder_with_default(rs.randn(8, 4).astype(np.float32), [None, 4], name="x")
            y = v1.placeholder_with_default(rs.randn(8, 1).astype(np.float32), [None, 1], name="y")
            w = v1.get_variable("w", [4, 1], use_resource=False)
            b = v1.get_variable("b", [1], initializer=v1.zeros_initializer(), use_resource=False)
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y), name="loss")
            r = {"few_tokens": 4, "small": 2}.get(kind, 3)
            sync = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=r,
                                                  total_num_replicas=r)
            gv = sync.compute_gradients(loss)
            train = sync.apply_gradients(gv, global_step=gs)
            if kind == "per_worker":  # the wrapped optimizer's update also in the worker's train op
                with tf.control_dependencies([train]):
                    train = v1.train.GradientDescentOptimizer(0.1).apply_gradients(gv, name="worker_apply")
            sync.get_init_tokens_op(num_tokens=0 if kind == "few_tokens" else -1)
            if kind != "no_queue_runner":
                v1.train.add_queue_runner(sync.get_chief_queue_runner())
            v1.add_to_collection("train_op", train)
            v1.global_variables_initializer()
        v1.train.export_meta_graph(os.path.join(out, kind + ".meta"), graph=g)

for kind in ("per_worker", "few_tokens", "no_queue_runner"):
    regression(kind)
regression("small", ps_tasks=1)
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("verify_models")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", BUILDER, str(out)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=Path(__file__).parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


_RUNS: dict[str, tuple[int, dict, str, float]] = {}


def verify(models: Path, key: str, args: list, capsys, fmt: str = "json") -> tuple[int, dict | str, str, float]:
    """Run ``placeviz verify ARGS --format FMT -o FILE`` once per key: (code, report, stderr, seconds).

    The report is the parsed JSON, or the text for ``fmt="text"``."""
    if key not in _RUNS:
        out = models / f"{key}.{fmt}"
        t0 = time.monotonic()
        code, stdout, stderr = run_cli(["verify", *args, "--format", fmt, "-o", out], capsys)
        seconds = time.monotonic() - t0
        assert stdout == "", stdout
        text = out.read_text() if out.exists() else ""
        report = json.loads(text) if fmt == "json" and text else text
        print(f"verify {key}: exit {code} in {seconds:.1f} s")
        _RUNS[key] = (code, report, stderr, seconds)
    return _RUNS[key]


def checks(report: dict) -> dict[str, dict]:
    return {c["id"]: c for c in report["checks"]}


def assert_released(report: dict) -> None:
    released = checks(report)["released"]
    assert released["status"] == "pass", released
    for who, pid in report["processes"].items():
        assert not sandbox.alive(pid), f"{who} (pid {pid}) still runs"


def assert_isolated(report: dict, processes: int) -> None:
    """Every process that ran a server saw only loopback (read inside the process, no traffic sent)."""
    net = report["network"]
    assert net["namespace"] is True
    assert len(net["interfaces"]) == processes
    assert all(names == ["lo"] for names in net["interfaces"].values()), net
    for job_addresses in report["run"]["cluster"].values():
        assert all(a.startswith("127.0.0.1:") for a in job_addresses)


# ------------------------------------------------------------------------------------------------
# Passing runs


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_tf_built_sync_mlp_2ps_3workers_passes_every_check(models, capsys):
    code, report, _err, _s = verify(models, "mlp_r3w3", [models / "mlp_r3w3.meta", "--workers", 3, "--steps", 4],
                                    capsys)
    assert report["schema"] == "placeviz.verify/1"
    c = checks(report)
    assert code == 0 and report["ok"], {k: v["summary"] for k, v in c.items() if v["status"] != "pass"}
    assert all(v["status"] == "pass" for v in c.values())
    assert c["global_step"]["evidence"]["global_step"] == 4
    assert c["global_step"]["evidence"]["worker_runs"] > 4
    updates = c["single_update"]["evidence"]["updates"]
    assert {u["op"] for u in updates} >= {"GradientDescent", "GradientDescent/update_hid_w/ApplyGradientDescent"}
    assert all(u["per_sync_run"] == [1, 1, 1, 1] and u["in_worker_runs"] == 0 for u in updates)
    # the accuracy metric's total/count are updated by every worker run, as the proof says
    per_worker = c["per_worker_updates"]["evidence"]["entries"]
    assert {e["variable"] for e in per_worker} == {"accuracy/total", "accuracy/count"}
    assert all(e["executions"] == e["worker_runs"] for e in per_worker)
    assert c["values"]["evidence"]["optimizers"] == ["ApplyGradientDescent"]
    assert len(c["values"]["evidence"]["variables"]) == 4
    for step in c["gradients_per_step"]["evidence"]["steps"]:
        assert len(step["averaged"]) == 3
    assert c["partitions"]["evidence"]["worker"]["percent"] == 100.0
    assert_isolated(report, processes=1)
    assert_released(report)


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_backup_worker_at_least_r_gradients_of_the_step(models, capsys):
    """R=2 of W=3: each step averages R gradients of that step, or more when others arrive before
    the chief's TakeGrad (TF's accumulator averages everything it holds by then; with W tokens per
    step a fast worker may even take two tokens of one step and contribute twice)."""
    code, report, _err, _s = verify(models, "mlp_r2w3", [models / "mlp_r2w3.meta", "--steps", 4], capsys)
    c = checks(report)
    assert code == 0, {k: v["summary"] for k, v in c.items() if v["status"] != "pass"}
    assert report["run"]["workers"] == 3 and report["run"]["replicas_to_aggregate"] == 2
    grads = c["gradients_per_step"]["evidence"]
    assert grads["R"] == 2 and len(grads["steps"]) == 4
    for step in grads["steps"]:
        assert len(step["averaged"]) >= 2
    for rows in grads["accumulators"].values():
        for row in rows:
            # The aggregated gradient is the mean of >= R captured gradients tagged with this step.
            assert row["ok"] and len(row["used"]) >= 2 and set(row["used"]) <= set(row["candidates"])
    assert c["stale_gradient"]["status"] == "pass"
    assert c["values"]["status"] == "pass"


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_placeviz_rewrite_of_the_plain_mlp_passes(models, capsys):
    code, text, err, _s = verify(models, "rewrite", ["sample:mlp", "--ps-tasks", 2, "--sync-replicas",
                                                     "--replicas-to-aggregate", 3, "--steps", 3], capsys, fmt="text")
    assert code == 0, text
    assert "W=3 workers, K=3 steps, R=3" in text
    assert "chief queue runner: placeviz sync pass (sync_token_q_EnqueueMany)" in text
    for check in ("run", "global_step", "single_update", "gradients_per_step", "values", "stale_gradient",
                  "partitions", "isolation", "released"):
        assert f"PASS  {check} " in text, text
    assert "global_step = 3 after 3 sync runs" in text
    assert text.rstrip().endswith("skipped") or "verify: every check passed" in text
    assert "global step 3/3" in err  # progress on stderr


# ------------------------------------------------------------------------------------------------
# Broken graphs: failures are results, within the timeout, nothing left behind


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_apply_ops_in_the_worker_train_op_fail_with_counts(models, capsys):
    code, report, _err, _s = verify(models, "per_worker", [models / "per_worker.meta", "--workers", 3,
                                                           "--steps", 3], capsys)
    c = checks(report)
    assert code == 1 and not report["ok"]
    assert c["run"]["status"] == "pass" and c["global_step"]["status"] == "pass"
    single = c["single_update"]
    assert single["status"] == "fail"
    extra = single["evidence"]["other_writes_in_worker_runs"]
    runs = single["evidence"]["worker_runs"]
    assert extra == {"worker_apply/update_w/ApplyGradientDescent": runs,
                     "worker_apply/update_b/ApplyGradientDescent": runs}
    assert "worker_apply/update_w/ApplyGradientDescent ran" in single["summary"]
    assert c["values"]["status"] == "fail"
    assert report["static_proof_single_update"] is False
    assert_released(report)


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_r_greater_than_the_tokens_is_a_deadlock_reported_in_time(models, capsys):
    code, report, _err, seconds = verify(models, "few_tokens", [models / "few_tokens.meta", "--workers", 3,
                                                                "--timeout", 90], capsys)
    run = checks(report)["run"]
    assert code == 1 and run["status"] == "fail"
    failure = report["failure"]
    assert failure["kind"] == "deadlock"
    assert failure["state"]["__queue_size__"] == 0 and failure["state"]["__global_step__"] == 0
    assert {v for k, v in failure["state"].items() if not k.startswith("__")} == {3}
    assert "TakeGradient for R=4 gradients" in run["summary"] and "the token queue holds 0" in run["summary"]
    waiting = {w["who"]: w["op"] for w in failure["waiting"]}
    assert waiting["chief queue runner"] == "sync_token_q_EnqueueMany"
    assert {"worker:0", "worker:1", "worker:2"} <= set(waiting)
    assert seconds < 90
    assert_released(report)


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_missing_chief_queue_runner_is_reported(models, capsys):
    code, report, err, _s = verify(models, "no_qr", [models / "no_queue_runner.meta", "--workers", 3,
                                                     "--chief-queue-runner", "none", "--timeout", 90], capsys)
    run = checks(report)["run"]
    assert code == 1 and run["status"] == "fail"
    assert report["run"]["chief_queue_runner"] is None
    assert "No chief queue runner: nothing runs the sync op sync_token_q_EnqueueMany" in run["summary"]
    assert report["failure"]["state"]["__global_step__"] == 0
    assert "--chief-queue-runner none" in err
    assert_released(report)


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_dead_worker_process_with_isolate(models, capsys):
    code, report, _err, seconds = verify(models, "dead_worker", [
        models / "small.meta", "--workers", 2, "--steps", 6, "--isolate", "--inject-fault", "worker:1@1",
        "--timeout", 120], capsys)
    run = checks(report)["run"]
    assert code == 1 and run["status"] == "fail"
    failure = report["failure"]
    assert failure["kind"] == "dead_task"
    assert failure["details"]["tasks"][0]["task"] == "worker:1"
    assert failure["details"]["tasks"][0]["signal"] == "SIGKILL"
    assert "worker:1" in run["summary"] and "SIGKILL" in run["summary"]
    # one process per task (1 ps + 2 workers) plus the coordinator, each seeing only loopback
    assert set(report["processes"]) == {"coordinator", "ps:0", "worker:0", "worker:1"}
    assert_isolated(report, processes=4)
    assert_released(report)
    assert seconds < 120


def test_without_tensorflow_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # find_spec() then reports it missing
    code, out, err = run_cli(["verify", tmp_path / "whatever.meta"], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["placeviz: error: TensorFlow is not installed; verify needs it: "
                                        "install placeviz[tf]"]


# ------------------------------------------------------------------------------------------------
# Pure parts (no TF)


def test_worker_graph_moves_only_the_worker_task():
    g = GraphDef()
    g.node.add(name="a", op="NoOp", device="/job:worker/task:0")
    g.node.add(name="b", op="NoOp", device="/job:worker/replica:0/task:0/device:CPU:0")
    g.node.add(name="c", op="NoOp", device="/job:ps/task:0")
    g.node.add(name="d", op="NoOp", device="/job:worker")
    g.node.add(name="e", op="NoOp", device="")
    out = worker_graph(g, "worker", 2)
    assert [n.device for n in out.node] == ["/job:worker/task:2", "/job:worker/replica:0/task:2/device:CPU:0",
                                            "/job:ps/task:0", "/job:worker/task:2", ""]
    assert [n.device for n in g.node][0] == "/job:worker/task:0"  # the input is not changed


def test_synthetic_feeds_are_seeded_per_worker_and_keep_integer_defaults():
    g = GraphDef()
    const = g.node.add(name="ids/default", op="Const")
    const.attr["dtype"].type = 3
    t = const.attr["value"].tensor
    t.dtype = 3
    t.tensor_shape.dim.add().size = 3
    t.int_val.extend([2, 5, 9])
    ph = g.node.add(name="ids", op="PlaceholderWithDefault", input=["ids/default"])
    ph.attr["dtype"].type = 3
    ph.attr["shape"].shape.dim.add().size = -1
    x = g.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = 1
    x.attr["shape"].shape.dim.add().size = -1
    x.attr["shape"].shape.dim.add().size = 2
    graph = Graph(g)
    f0, unfed = synthesize(graph, ["ids", "x"], 0, seed=7)
    assert set(f0) == {"x:0"}
    f0b, _ = synthesize(graph, ["ids", "x"], 0, seed=7)
    f1, _ = synthesize(graph, ["ids", "x"], 1, seed=7)
    assert unfed == ["ids"]  # integer inputs with a default keep it (ids, sparse indices...)
    assert f0["x:0"].shape == (4, 2) and f0["x:0"].dtype == np.float32
    assert np.array_equal(f0["x:0"], f0b["x:0"]) and not np.array_equal(f0["x:0"], f1["x:0"])


def test_numpy_optimizer_models_match_hand_computed_steps():
    state = {"var": np.array([1.0]), "accum": np.array([0.5])}
    momentum(state, {"lr": 0.1, "grad": np.array([2.0]), "momentum": 0.9})
    assert np.allclose(state["accum"], 0.5 * 0.9 + 2.0) and np.allclose(state["var"], 1.0 - 0.1 * 2.45)
    state = {"var": np.array([1.0]), "m": np.array([0.0]), "v": np.array([0.0]), "beta1_power": 0.9,
             "beta2_power": 0.999}
    adam(state, {"lr": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "grad": np.array([3.0])})
    # first Adam step moves by lr * sign(grad) (bias-corrected m / sqrt(v) = 1)
    assert np.allclose(state["var"], 1.0 - 0.001, atol=1e-7)


# ------------------------------------------------------------------------------------------------
# --cluster: the placement cluster (local servers of its shape); --servers: servers the user runs


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_cluster_file_places_and_local_servers_of_its_shape_run(models, tmp_path, capsys):
    """``--cluster`` is the placement cluster, as in every command: its addresses are never used;
    verify starts 2 ps + 3 workers (its shape; W from its worker tasks) on 127.0.0.1 privately."""
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"cluster": {"ps": ["ps0.example:2222", "ps1.example:2222"],
                                               "worker": [f"w{i}.example:2222" for i in range(3)]},
                                   "task": {"type": "worker", "index": 0}}))  # a TF_CONFIG document
    code, report, err, _s = verify(models, "cluster_file", [models / "mlp_r2w3.meta", "--cluster", cluster,
                                                            "--steps", 3], capsys)
    c = checks(report)
    assert code == 0 and report["ok"], {k: v["summary"] for k, v in c.items() if v["status"] != "pass"}
    assert report["run"]["existing_cluster"] is False and report["run"]["workers"] == 3
    assert {job: len(a) for job, a in report["run"]["cluster"].items()} == {"ps": 2, "worker": 3}
    assert c["global_step"]["evidence"]["global_step"] == 3
    assert any("--cluster cluster.json: placed on that cluster; run on local servers" in n for n in report["notes"])
    assert "local TF servers in one process shaped like cluster.json: 2 ps x 3 workers" in err
    assert_isolated(report, processes=1)
    assert_released(report)


@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize(("args", "message"), [
    (["--servers", "s.json", "--isolate"], "--isolate starts local servers, one process per task; it cannot be "
                                           "combined with --servers"),
    (["--cluster", "c.json", "--reset-containers"], "--reset-containers clears the containers of --servers"),
    (["--servers", "s.json", "--cluster", "c.json"], "--cluster c.json and --servers s.json must have the same "
                                                     "tasks: job worker has 3 in c.json and 2 in s.json"),
    (["--servers", "s.json", "--ps-tasks", "2"], "give --ps-tasks or --servers, not both"),
])
def test_servers_option_errors_are_one_line(tmp_path, capsys, monkeypatch, args, message):
    """Checked before the model is even loaded (it does not exist) and before any address is tried."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.json").write_text(json.dumps({"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:1"] * 2}))
    (tmp_path / "c.json").write_text(json.dumps({"ps": ["a:1"], "worker": ["b:1"] * 3}))
    code, out, err = run_cli(["verify", "missing.meta", *args], capsys)
    assert code == 2 and out == ""
    lines = [line for line in err.strip().splitlines() if line.startswith("placeviz: error:")]
    assert len(lines) == 1 and message in lines[0], err


def test_reachability_names_the_task_whose_address_does_not_answer():
    """Plain loopback sockets of this process: a listening one answers, a closed port does not."""
    from placeviz.devices import ClusterSpec
    from placeviz.errors import PlacevizError
    from placeviz.verify.servers import check_reachable

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    closed = sandbox.free_ports(1)[0]
    up = f"127.0.0.1:{listening.getsockname()[1]}"
    try:
        check_reachable(ClusterSpec.from_dict({"ps": [up], "worker": [up, up]}))
        spec = ClusterSpec.from_dict({"ps": [up], "worker": [up, f"127.0.0.1:{closed}"]}, source="dir/s.json")
        t0 = time.monotonic()
        with pytest.raises(PlacevizError) as e:
            check_reachable(spec)
        assert time.monotonic() - t0 < 3.5
    finally:
        listening.close()
    assert str(e.value).startswith(f"--servers s.json: no server answers for job worker task 1 at 127.0.0.1:{closed} (")
    assert "\n" not in str(e.value)


CLUSTER_HELPER = r'''
"""Inside a private user + net namespace: the user's TF servers, then ``placeviz verify --servers``
four times: with one address that has no server, on fresh servers, again without and again with
``--reset-containers``."""
import json, os, subprocess, sys, time
from placeviz.verify import sandbox  # stdlib only: this process is still single-threaded

meta, work = sys.argv[1], sys.argv[2]
out = os.path.join(work, "helper.json")

def finish(status, **info):
    with open(out, "w") as f:
        json.dump(info, f)
    sys.stdout.flush()
    os._exit(status)  # TF servers cannot be stopped: they go with this process

try:
    private = sandbox.enter_private_network()
except OSError as e:
    private, why = False, f"{type(e).__name__}: {e}"
else:
    why = "unshare(CLONE_NEWUSER|CLONE_NEWNET) and unshare(CLONE_NEWNET) refused"
if not private:
    finish(77, skip=f"no private network namespace on this platform ({why})")
seen = sandbox.interfaces()
if seen != ["lo"]:  # never start a server another host could reach
    finish(78, error=f"the namespace has interfaces {seen}, not just lo")
netns = os.readlink("/proc/self/ns/net")

def others():
    # processes in this namespace besides this one (the servers are threads of this process)
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") == netns and sandbox.alive(int(entry)):
                    pids.append(int(entry))
            except OSError:
                pass
    return pids

os.environ.update(sandbox.child_env())
import tensorflow as tf

ports = sandbox.free_ports(6)  # nobody else is in this namespace: no race; the 6th stays unused
spec = {"ps": [f"127.0.0.1:{p}" for p in ports[:2]], "worker": [f"127.0.0.1:{p}" for p in ports[2:5]]}
cluster_file = os.path.join(work, "c.json")
with open(cluster_file, "w") as f:
    json.dump(spec, f)
bad = {"ps": spec["ps"], "worker": spec["worker"][:2] + [f"127.0.0.1:{ports[5]}"]}
bad_file = os.path.join(work, "bad.json")
with open(bad_file, "w") as f:
    json.dump(bad, f)
config = tf.compat.v1.ConfigProto(device_count={"CPU": 1})
servers = [tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=i, config=config, start=True)
           for job in spec for i in range(len(spec[job]))]
runs = []
for servers_file, extra in ((bad_file, []), (cluster_file, []), (cluster_file, []),
                            (cluster_file, ["--reset-containers"])):
    t0 = time.monotonic()
    client = subprocess.Popen([sys.executable, "-m", "placeviz", "verify", meta, "--servers", servers_file, *extra,
                               "--steps", "3", "--format", "json", "--timeout", "60"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=sandbox.child_env())
    try:
        stdout, stderr = client.communicate(timeout=110)
    except subprocess.TimeoutExpired:
        client.kill()
        stdout, stderr = client.communicate()
    runs.append({"code": client.returncode, "stdout": stdout.decode(), "stderr": stderr.decode()[-3000:],
                 "seconds": round(time.monotonic() - t0, 2), "client": client.pid, "left": others()})
finish(0, runs=runs, cluster=spec, bad=bad, interfaces=seen, netns=netns, helper=os.getpid())
'''


def _in_namespace(netns: str) -> list[int]:
    """PIDs of the processes (that we may inspect) still in the network namespace ``netns``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "net") == netns and sandbox.alive(int(entry.name)):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _passed(run: dict) -> dict:
    assert run["code"] == 0, run["stdout"][-3000:] + run["stderr"]
    report = json.loads(run["stdout"])
    c = checks(report)
    assert report["ok"] and all(v["status"] in ("pass", "skip") for v in c.values()), \
        {k: v["summary"] for k, v in c.items() if v["status"] != "pass"}
    assert c["global_step"]["status"] == "pass" and c["global_step"]["evidence"]["global_step"] == 3
    assert c["isolation"]["status"] == "skip"  # verify started no server of its own
    assert set(report["processes"]) == {"coordinator"}
    assert any("a second run on them needs --reset-containers" in n for n in report["notes"])
    return report


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_servers_runs_on_the_users_servers_in_a_private_namespace(models, tmp_path):
    """2 ps + 3 worker servers started by "the user", all in one private user + net namespace (only
    lo, so no server is ever reachable from another host), then ``verify --servers``: a file with one
    address where nobody listens is a one-line error at once; fresh servers pass; a second run finds
    the closed token queue of the first and fails saying so; ``--reset-containers`` passes again."""
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER_HELPER, str(models / "mlp_r2w3.meta"), str(tmp_path)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=sandbox.child_env(), cwd=tmp_path, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        sandbox.kill_group(proc)
        raise
    helper_file = tmp_path / "helper.json"
    info = json.loads(helper_file.read_text()) if helper_file.exists() else {}
    if proc.returncode == 77:
        pytest.skip(info["skip"])
    assert proc.returncode == 0 and info, f"helper exited {proc.returncode}: {info} {output.decode()[-3000:]}"
    assert info["interfaces"] == ["lo"]
    unreachable, first, again, reset = info["runs"]

    # one address without a server: exit 2 within seconds, one line naming it; nothing started
    assert unreachable["code"] == 2 and unreachable["stdout"] == "", unreachable
    errors = [line for line in unreachable["stderr"].splitlines() if line.startswith("placeviz: error:")]
    assert errors == [f"placeviz: error: --servers bad.json: no server answers for job worker task 2 at "
                      f"{info['bad']['worker'][2]} (Connection refused)"], unreachable["stderr"]
    assert unreachable["seconds"] < 15 and "coordinator" not in unreachable["stderr"]
    assert unreachable["left"] == []

    report = _passed(first)
    assert report["run"]["existing_cluster"] is True
    assert report["run"]["cluster"] == info["cluster"] and report["run"]["workers"] == 3
    assert "resetting the resource containers" not in first["stderr"]

    assert again["code"] == 1, again["stdout"][-3000:] + again["stderr"]
    report = json.loads(again["stdout"])
    run = checks(report)["run"]
    assert run["status"] == "fail" and report["failure"]["kind"] == "leftover_state"
    assert run["summary"].startswith("the servers hold state from an earlier run (the token queue ")
    assert " is closed" in run["summary"] and report["failure"]["details"] == {}
    assert run["summary"].endswith("; pass --reset-containers to clear it.")
    assert not report["failure"]["waiting"] or report["failure"]["waiting"][0]["who"] == "chief queue runner"

    _passed(reset)
    assert "resetting the resource containers" in reset["stderr"]
    assert any(n.startswith("--reset-containers: the servers' resource containers are reset first")
               for n in json.loads(reset["stdout"])["notes"])
    # nothing is left: not the clients, their coordinators, nor the servers' process (nothing in the namespace)
    pids = {"helper": info["helper"], **{f"client{i}": r["client"] for i, r in enumerate(info["runs"])}}
    for i, r in enumerate(info["runs"][1:]):
        pids.update({f"{k}{i}": p for k, p in json.loads(r["stdout"])["processes"].items()})
    deadline = time.monotonic() + 5
    while (_in_namespace(info["netns"]) or any(sandbox.alive(p) for p in pids.values())) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _in_namespace(info["netns"])
    assert not [k for k, p in pids.items() if sandbox.alive(p)]
