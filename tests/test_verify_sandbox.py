"""``placeviz verify`` as a sandbox: a graph file is untrusted input, and an interrupted run leaves nothing.

Real TF graphs (built with TF's own API in one subprocess, ``BUILDER``), real namespaces, real
signals sent to a real ``python -m placeviz verify`` process; no mocks. What is proven:

* **refusal**: a run whose ops write or read files or run code (``WriteFile`` in the worker's
  train step, ``ReadFile`` in an init op, ``PyFunc``, a ``WriteFile`` inside a ``tf.function``) is
  one line naming the node and the op, exit 2, before anything starts; a Saver or summaries that
  no verify run executes are no finding (the reverse closure of what verify runs);
* **--allow-io**: the ops run, the servers' working directory is a scratch dir in verify's temp
  dir (a relative write lands there and is removed with it), and a write to an absolute path
  outside fails with "Read-only file system" (a TF error of the run, exit 1), one process or one
  per task (``--isolate``); ``--no-isolation`` really is unconfined and says so first;
* **no namespace, no run**: where the kernel refuses the namespaces (a user namespace whose
  ``max_*_namespaces`` are 0) verify exits 2 naming ``--no-isolation``;
* **signals**: SIGINT (exit 130), SIGTERM (143), SIGKILL of ``placeviz verify`` while it runs a
  cluster of one process per task leave no process, no namespace and no temp dir; a coordinator
  stopped with SIGSTOP is noticed within seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from placeviz.graph import Graph
from placeviz.native import NO_KERNELS_ENV
from placeviz.protos import GraphDef
from placeviz.verify import hostops, sandbox
from placeviz.verify.coordinator import CHILD_FLAG
from tests.conftest import default_signals, run_cli

HAS_TF = importlib.util.find_spec("tensorflow") is not None


@pytest.fixture(autouse=True)
def _progress_as_lines(monkeypatch):
    """verify's progress (servers starting, global steps run) as stderr lines, which these tests read:
    without a terminal it is off by default (placeviz.progress)."""
    monkeypatch.setenv("PLACEVIZ_PROGRESS", "always")
ROOT = Path(__file__).resolve().parents[1]

BUILDER = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
v1 = tf.compat.v1
out, outside = sys.argv[1], sys.argv[2]


def regression(kind):
    """y = xw + b, SyncReplicasOptimizer R=2 of W=2 on 1 ps, with the host op ``kind`` says."""
    rs = np.random.RandomState(0)
    g = tf.Graph()
    with g.as_default():
        with v1.device(v1.train.replica_device_setter(ps_tasks=1, worker_device="/job:worker/task:0")):
            gs = v1.train.get_or_create_global_step()
            x = v1.placeholder_with_default(rs.randn(8, 4).astype(np.float32), [None, 4], name="x")
            y = v1.placeholder_with_default(rs.randn(8, 1).astype(np.float32), [None, 1], name="y")
            w = v1.get_variable("w", [4, 1], use_resource=False)
            if kind == "read_init":  # an initializer that reads a file of this machine
                text = tf.io.read_file("/etc/hostname", name="read_hostname")
                b = v1.Variable(tf.fill([1], tf.cast(tf.strings.length(text), tf.float32)), name="b")
            else:
                b = v1.get_variable("b", [1], initializer=v1.zeros_initializer(), use_resource=False)
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y), name="loss")
            host = []
            if kind == "write_rel":
                host = [tf.io.write_file("verify-wrote-this.txt", tf.strings.as_string(loss), name="write_loss")]
            elif kind == "write_abs":
                host = [tf.io.write_file(outside, tf.strings.as_string(loss), name="write_outside")]
            elif kind == "py_func":
                host = [v1.py_func(lambda v: v, [loss], tf.float32, name="py_identity")]
            elif kind == "fn_write":
                @tf.function
                def log_loss(v):
                    tf.io.write_file("from-a-function.txt", tf.strings.as_string(v), name="fn_write")
                    return v
                host = [log_loss(loss)]
            sync = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=2,
                                                  total_num_replicas=2)
            gv = sync.compute_gradients(loss)
            with tf.control_dependencies(host):  # every worker step runs the host op before it applies
                gv = [(tf.identity(g_, name="after_host_ops"), v) for g_, v in gv]
            train = sync.apply_gradients(gv, global_step=gs)
            sync.get_init_tokens_op(num_tokens=-1)
            v1.train.add_queue_runner(sync.get_chief_queue_runner())
            v1.add_to_collection("train_op", train)
            v1.summary.scalar("loss", loss)
            v1.summary.merge_all()
            v1.train.Saver()  # save/SaveV2, save/RestoreV2: no verify run executes them
            v1.global_variables_initializer()
        v1.train.export_meta_graph(os.path.join(out, kind + ".meta"), graph=g)


for kind in ("plain", "write_rel", "write_abs", "read_init", "py_func", "fn_write"):
    regression(kind)
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("sandbox_models")
    outside = tmp_path_factory.mktemp("outside") / "written-by-the-graph.txt"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", BUILDER, str(out), str(outside)], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (out / "outside.txt").write_text(str(outside))
    return out


def outside_path(models: Path) -> Path:
    """The absolute path ``write_abs.meta`` writes: outside any verify temp dir."""
    return Path((models / "outside.txt").read_text())


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("placeviz: error:")]


def checks(report: dict) -> dict[str, dict]:
    return {c["id"]: c for c in report["checks"]}


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch) -> Path:
    """A TMPDIR of this test's own, so that its verify temp dirs are told apart from other runs'."""
    base = tmp_path / "TMPDIR"
    base.mkdir()
    monkeypatch.setenv("TMPDIR", str(base))
    return base


def leftover_temp_dirs(base: Path) -> list[str]:
    return sorted(p.name for p in base.glob("placeviz-verify-*"))


# ------------------------------------------------------------------------------------------------
# What the run executes (no TF): the closure, function bodies, custom ops, conditional ops


def _node(g, name, op, inputs=(), **attrs):
    n = g.node.add(name=name, op=op, input=list(inputs))
    for key, value in attrs.items():
        if isinstance(value, bytes):
            n.attr[key].s = value
        elif isinstance(value, list):
            n.attr[key].list.s.extend(value)
        else:
            n.attr[key].func.name = value
    return n


def _const_string(g, name, value: bytes):
    n = g.node.add(name=name, op="Const")
    n.attr["dtype"].type = 7  # DT_STRING
    n.attr["value"].tensor.dtype = 7
    n.attr["value"].tensor.string_val.append(value)
    return n


def test_host_ops_are_found_in_the_closure_in_functions_and_by_their_attrs():
    g = GraphDef()
    _node(g, "call", "PartitionedCall", f="outer")
    _node(g, "print_file", "PrintV2", output_stream=b"file:///tmp/printed")
    _node(g, "print_err", "PrintV2", output_stream=b"stderr")
    _node(g, "debug", "DebugIdentity", debug_urls=[b"file:///tmp/dumps"])
    _node(g, "debug_off", "DebugIdentity", debug_urls=[])
    _node(g, "ds", "RangeDataset")
    _const_string(g, "empty", b"")
    _const_string(g, "name", b"/tmp/cache")
    _node(g, "cache_mem", "CacheDataset", ["ds", "empty"])
    _node(g, "cache_file", "CacheDataset", ["ds", "name"])
    _node(g, "train", "NoOp", ["^call", "^print_file", "^print_err", "^debug", "^debug_off", "^cache_mem",
                               "^cache_file"])
    _node(g, "save", "SaveV2")  # not in the closure of anything the run executes
    _node(g, "init", "NoOp")
    outer = g.library.function.add()
    outer.signature.name = "outer"
    outer.node_def.add(name="inner_call", op="inner")  # a node whose op is a library function
    inner = g.library.function.add()
    inner.signature.name = "inner"
    inner.node_def.add(name="zap", op="ZapCustomOp")
    inner.node_def.add(name="wf", op="WriteFile")
    found = hostops.find(Graph(g), [("the worker train op", "train"), ("an init op", "init")])
    got = {(h.node, h.op, h.function, h.caller, h.target) for h in found}
    assert got == {("print_file", "PrintV2", None, None, "train"), ("debug", "DebugIdentity", None, None, "train"),
                   ("cache_file", "CacheDataset", None, None, "train"),
                   ("zap", "ZapCustomOp", "inner", "call", "train"), ("wf", "WriteFile", "inner", "call", "train")}
    whats = {h.node: h.what for h in found}
    assert whats["print_file"] == "writes files (output_stream file:///tmp/printed)"
    assert whats["zap"].startswith("is no TensorFlow op")
    assert whats["wf"] == "writes files"
    # breadth first from the targets: the call is train's first input
    assert found[0].where() == "node 'zap' in function 'inner' called by node 'call', run by the worker train op 'train'"
    assert hostops.refusal(found[0], "m.pb", len(found) - 1, servers=False) == (
        "m.pb: the verify run would execute ZapCustomOp (node 'zap' in function 'inner' called by node 'call', run "
        "by the worker train op 'train'): it is no TensorFlow op (a custom-op library's: verify cannot tell what it "
        "does) (4 more such ops); verify refuses ops that touch the file system or run code unless --allow-io")
    # the same save op is a finding once something the run executes needs it
    assert [h.op for h in hostops.find(Graph(g), [("an init op", "save")])] == ["SaveV2"]


def _py_func_graph():
    """A TF1 graph whose host ops (PyFuncs) sit behind tensors a run may feed, and the names each
    PyFunc appends to when TF runs it."""
    import numpy as np
    import tensorflow as tf

    v1 = tf.compat.v1
    ran: list[str] = []
    g = tf.Graph()
    with g.as_default():
        def py_func(name):
            return v1.py_func(lambda: (ran.append(name), np.float32(1))[1], [], tf.float32, stateful=True, name=name)

        # y reads a PyFunc's output; y2 (an unfed run) reads it too
        pf = py_func("pf")
        tf.identity(pf * 2.0, name="y")
        tf.identity(pf * 3.0, name="y2")
        # a Placeholder with a PyFunc as control input, read by data (z) and by a control edge (w)
        with tf.control_dependencies([py_func("pf_p")]):
            p = v1.placeholder(tf.float32, [], name="p")
        tf.identity(p, name="z")
        with tf.control_dependencies([p]):
            tf.constant(1.0, name="w")
        # the same with a PlaceholderWithDefault: a feed moves its data edges only (subgraph.cc)
        with tf.control_dependencies([py_func("pf_d")]):
            d = v1.placeholder_with_default(np.float32(0), [], name="d")
        with tf.control_dependencies([d]):
            tf.constant(1.0, name="wd")
        tf.identity(d, name="zd")
    return g, ran


@pytest.mark.tf
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize(("targets", "feeds"), [
    ([("the worker train op", "y")], []),
    ([("the worker train op", "y")], ["pf:0"]),
    ([("the worker train op", "y"), ("an init op", "y2")], ["pf:0"]),  # the unfed run still runs it
    ([("the worker train op", "z")], ["p"]),
    ([("the worker train op", "w")], ["p:0"]),
    ([("the worker train op", "wd")], ["d:0"]),
    ([("the worker train op", "zd")], ["d:0"]),
    ([("the worker train op", "wd")], []),
])
def test_a_host_op_behind_a_fed_tensor_is_found_only_if_tf_runs_it(targets, feeds):
    """TF's session, fed as verify feeds the runs of hostops.FED_ROLES (the others unfed), decides
    which PyFuncs run; hostops.find finds those and no other."""
    import tensorflow as tf

    g, ran = _py_func_graph()
    with tf.compat.v1.Session(graph=g) as sess:
        for role, name in targets:
            fed = role in hostops.FED_ROLES
            feed_dict = {g.get_tensor_by_name(t if ":" in t else f"{t}:0"): 2.0 for t in feeds} if fed else {}
            sess.run(g.get_operation_by_name(name), feed_dict=feed_dict)
    found = hostops.find(Graph(GraphDef.FromString(g.as_graph_def().SerializeToString())), targets, feeds=feeds)
    assert {h.op for h in found} <= {"PyFunc"}
    assert sorted(h.node for h in found) == sorted(set(ran))


# ------------------------------------------------------------------------------------------------
# The sandbox itself (no TF): read-only everywhere but the temp dir, locked, loopback only

SANDBOX_CHILD = r'''
import ctypes, errno, json, os, sys
from placeviz.verify import sandbox
work, outside, legacy = sys.argv[1], sys.argv[2], sys.argv[3] == "legacy"
try:
    sandbox.enter_sandbox(work, legacy_remount=legacy)
except sandbox.SandboxError as e:
    print(json.dumps({"refused": str(e)}))
    sys.exit(0)

def attempt(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "written"
    except OSError as e:
        return errno.errorcode[e.errno]

lib = ctypes.CDLL(None, use_errno=True)
remount = lib.mount(None, b"/", None, sandbox.MS_REMOUNT | sandbox.MS_BIND, None)
print(json.dumps({
    "inside": attempt(os.path.join(work, "inside.txt")), "outside": attempt(outside),
    "relative": attempt("relative.txt"), "devnull": attempt("/dev/null"), "proc": attempt("/proc/self/comm"),
    "remount_rw": errno.errorcode[ctypes.get_errno()] if remount else "remounted",
    "interfaces": sandbox.interfaces(),
}))
'''


@pytest.mark.parametrize("how", ["mount_setattr", "legacy"])
def test_sandbox_leaves_only_the_temp_dir_writable(tmp_path, how):
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-c", SANDBOX_CHILD, str(work), str(outside), how], capture_output=True,
                          text=True, cwd=work, env=sandbox.child_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    if "refused" in got:
        pytest.skip(f"no namespaces on this platform: {got['refused']}")
    assert got == {"inside": "written", "outside": "EROFS", "relative": "written", "devnull": "written",
                   "proc": "EROFS", "remount_rw": "EPERM", "interfaces": ["lo"]}
    assert not outside.exists()
    assert (work / "inside.txt").read_text() == "x" and (work / "relative.txt").exists()


# ------------------------------------------------------------------------------------------------
# Cleanup machinery (no TF): the janitor, exit codes on signals

JANITOR_PARENT = r'''
import subprocess, sys, time
from placeviz.verify.runner import Janitor
janitor = Janitor()
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", str(janitor.work)],
                           start_new_session=True)
print(janitor.work, janitor.proc.pid, sleeper.pid, flush=True)
time.sleep(600)
'''


def test_janitor_sweeps_when_its_parent_is_killed():
    """SIGKILL of the process that made the temp dir: the janitor kills what names the dir and removes it."""
    parent = subprocess.Popen([sys.executable, "-c", JANITOR_PARENT], stdout=subprocess.PIPE, text=True,
                              env=sandbox.child_env(), start_new_session=True)
    try:
        work, janitor, sleeper = parent.stdout.readline().split()
        assert Path(work).is_dir() and sandbox.alive(int(sleeper))
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while (Path(work).exists() or sandbox.alive(int(sleeper)) or sandbox.alive(int(janitor))) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(work).exists()
        assert not sandbox.alive(int(sleeper)) and not sandbox.alive(int(janitor))
    finally:
        sandbox.kill_group(parent)


SIGNAL_CHILD = r'''
import os, signal, sys, time
from placeviz.verify.runner import signal_exits
with signal_exits():
    try:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
        time.sleep(5)
    finally:
        print("cleaned up", flush=True)
print("not reached", flush=True)
'''


@pytest.mark.parametrize(("sig", "code", "message"), [("SIGINT", 130, "interrupted"),
                                                      ("SIGTERM", 143, "terminated by SIGTERM"),
                                                      ("SIGHUP", 129, "terminated by SIGHUP")], ids=["INT", "TERM", "HUP"])
def test_signal_exits_unwind_then_exit_128_plus_the_signal(sig, code, message):
    proc = subprocess.run([sys.executable, "-c", SIGNAL_CHILD, sig], capture_output=True, text=True, timeout=60,
                          env=sandbox.child_env(), preexec_fn=default_signals)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == "cleaned up\n"  # the finally clauses ran
    assert proc.stderr.startswith(f"placeviz: {message}; verify stopped every process") and "Traceback" not in \
        proc.stderr


# ------------------------------------------------------------------------------------------------
# Refusal, before anything runs (TF-built graphs; the CLI itself imports no TF)


REFUSED = {
    "write_rel": "the verify run would execute WriteFile (node 'write_loss', run by the worker train op '",
    "read_init": "the verify run would execute ReadFile (node 'read_hostname', run by an init op 'init'): it reads "
                 "files on this machine; verify refuses",
    "py_func": "the verify run would execute PyFunc (node 'py_identity', run by the worker train op '",
    "fn_write": "the verify run would execute WriteFile (node 'fn_write' in function '",
}


def _cli(args: list, no_kernels: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """``python -m placeviz ARGS`` as a real process, with or without the C kernels."""
    env = {k: v for k, v in sandbox.child_env().items() if k != NO_KERNELS_ENV}
    if no_kernels:
        env[NO_KERNELS_ENV] = "1"
    return subprocess.run([sys.executable, "-m", "placeviz", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300, **kwargs)


@pytest.mark.tf
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize("no_kernels", [False, True], ids=["kernels", "no-kernels"])
@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_host_ops_are_refused_by_default_with_one_line(models, tmp_path, tmpdir_env, kind, no_kernels):
    proc = _cli(["verify", models / f"{kind}.meta", "--steps", 2], no_kernels, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = lines[0].removeprefix("placeviz: error: ")
    assert line.startswith(f"{models / kind}.meta: {REFUSED[kind]}"), line
    assert line.endswith("verify refuses ops that touch the file system or run code unless --allow-io")
    assert "running on" not in proc.stderr and "starting the cluster" not in proc.stderr  # nothing started
    assert leftover_temp_dirs(tmpdir_env) == [] and not list(tmp_path.glob("*.txt"))


@pytest.mark.tf
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_a_saver_and_summaries_no_run_executes_are_no_finding(models):
    """Every graph above has a Saver (save/SaveV2, save/RestoreV2) and merged summaries: only what
    verify runs counts, so the plain graph has no host op, and the Saver's ops are found once asked."""
    from placeviz.io import load
    from placeviz.pipeline import Options, run_pipeline
    from placeviz.placement import PlacementOptions
    from placeviz.verify.prepare import prepare

    pipe = run_pipeline(load(str(models / "plain.meta")),
                        Options(placement=PlacementOptions(), place_always=True, partition=False))
    ops = set(pipe.graph.ops)
    assert {"SaveV2", "RestoreV2", "MergeSummary", "ScalarSummary"} <= ops
    prepared = prepare(pipe, PlacementOptions(), workers=None, steps=2, timeout=60, isolate=False, feeds_file=None,
                       seed=0, chief_queue_runner="auto", fault=None)
    assert prepared.host_ops == []
    found = hostops.find(pipe.graph, [("the save op", "save/control_dependency")])
    assert [h.op for h in found] == ["SaveV2"]
    assert all(h.op != "RestoreV2" for h in found)


@pytest.mark.tf
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_the_plan_reads_the_state_index_detection_built(models, monkeypatch):
    """Which op writes which variable is indexed once per graph, by the sync detection; the verify
    plan reads that index (SyncMachinery.state), it does not build a second one."""
    from placeviz.io import load
    from placeviz.pipeline import Options, run_pipeline
    from placeviz.placement import PlacementOptions
    from placeviz.verify.prepare import prepare

    detect = importlib.import_module("placeviz.sync.detect")  # the module (the package exports its function)
    built = []
    build = detect._build_state_index
    monkeypatch.setattr(detect, "_build_state_index", lambda g, table: built.append(g) or build(g, table))
    pipe = run_pipeline(load(str(models / "plain.meta")),
                        Options(placement=PlacementOptions(), place_always=True, partition=False))
    assert pipe.machinery is not None and pipe.machinery.state is not None
    assert pipe.graph in built
    built.clear()
    prepared = prepare(pipe, PlacementOptions(), workers=None, steps=2, timeout=60, isolate=False, feeds_file=None,
                       seed=0, chief_queue_runner="auto", fault=None)
    assert prepared.plan.updates and built == []


@pytest.mark.tf
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_no_namespace_means_no_run(models, tmp_path, tmpdir_env):
    """In a user namespace whose limits allow no further user, network or mount namespace (the
    limits are per user namespace: the host's stay as they are), verify refuses to start, naming the
    flag that would let it run."""
    limits = "; ".join(f"echo 0 > /proc/sys/user/max_{k}_namespaces" for k in ("user", "net", "mnt"))
    script = f'{limits} && exec "$0" -m placeviz verify "$1" --steps 2'
    try:
        proc = subprocess.run(["unshare", "--user", "--map-root-user", "sh", "-c", script, sys.executable,
                               str(models / "plain.meta")], capture_output=True, text=True, timeout=120,
                              env=sandbox.child_env(), cwd=tmp_path)
    except FileNotFoundError:
        pytest.skip("no unshare(1)")
    if "unshare failed" in proc.stderr or "Permission denied" in proc.stderr.split("\n", 1)[0]:
        pytest.skip(f"cannot make a user namespace to test in: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 2, proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("placeviz: error: verify cannot isolate its TF servers (unshare(CLONE_NEWUSER | "
                               "CLONE_NEWNET | CLONE_NEWNS): No space left on device), so it runs nothing: pass "
                               "--no-isolation to run them anyway"), lines[0]
    assert "starting the cluster" not in proc.stderr
    assert leftover_temp_dirs(tmpdir_env) == []


# ------------------------------------------------------------------------------------------------
# --allow-io: the ops run, confined; --no-isolation: unconfined, said first


def _json_run(tmp_path: Path, capsys, args: list) -> tuple[int, dict, str]:
    out = tmp_path / "report.json"
    code, stdout, err = run_cli(["verify", *args, "--format", "json", "-o", out], capsys)
    assert stdout == ""
    return code, json.loads(out.read_text()) if out.exists() else {}, err


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_allow_io_runs_and_a_relative_write_lands_in_the_temp_dir(models, tmp_path, capsys, monkeypatch, tmpdir_env):
    monkeypatch.chdir(tmp_path)
    code, report, err = _json_run(tmp_path, capsys, [models / "write_rel.meta", "--steps", 2, "--allow-io"])
    c = checks(report)
    assert code == 0, {k: v["summary"] for k, v in c.items() if v["status"] != "pass"}
    assert report["run"]["allow_io"] is True and report["warnings"] == []
    assert report["notes"][0].startswith("--allow-io: the run executes 1 op(s) that touch the file system or run "
                                         "code (WriteFile ('write_loss')), in a mount namespace where only a "
                                         "scratch dir in verify's temp dir")
    isolation = c["isolation"]
    assert isolation["status"] == "pass", isolation
    mounts = isolation["evidence"]["isolation"]["mounts"]
    assert mounts["outside"] == mounts["own_files"] == "EROFS" and mounts["inside"] == "written"
    assert isolation["evidence"]["isolation"]["user_namespace"] is True  # so the read-only mounts are locked
    assert isolation["evidence"]["isolation"]["written"] == ["verify-wrote-this.txt"]
    assert "the graph's ops wrote 1 file(s) there, removed with it: verify-wrote-this.txt" in isolation["summary"]
    assert not (tmp_path / "verify-wrote-this.txt").exists() and not (ROOT / "verify-wrote-this.txt").exists()
    assert c["released"]["status"] == "pass" and c["released"]["evidence"]["temp_dir_removed"] is True
    assert Path(mounts["writable"]).parent.parent == tmpdir_env  # TMPDIR/placeviz-verify-*/run
    assert leftover_temp_dirs(tmpdir_env) == []


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_allow_io_write_outside_the_temp_dir_fails_read_only_in_every_task_process(models, tmp_path, capsys):
    """``--isolate``: the WriteFile runs in the worker task processes, which inherit the mount
    namespace: the write fails, and the run reports it as TF's own error (exit 1)."""
    target = outside_path(models)
    code, report, _err = _json_run(tmp_path, capsys, [models / "write_abs.meta", "--steps", 2, "--allow-io",
                                                               "--isolate"])
    c = checks(report)
    assert code == 1 and c["run"]["status"] == "fail", c["run"]
    assert report["failure"]["kind"] == "tf_error"
    assert "Read-only file system" in c["run"]["summary"], c["run"]["summary"]
    assert not target.exists()
    assert set(report["processes"]) == {"coordinator", "ps:0", "worker:0", "worker:1"}
    assert c["isolation"]["status"] == "pass" and len(report["network"]["interfaces"]) == 4
    assert c["released"]["status"] == "pass", c["released"]


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_no_isolation_is_unconfined_and_says_so_first(models, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PLACEVIZ_PROGRESS", "never")  # the lines a user always sees: the warning is the first
    target = outside_path(models)
    target.unlink(missing_ok=True)
    out = tmp_path / "report.txt"
    code, stdout, err = run_cli(["verify", models / "write_abs.meta", "--steps", 2, "--allow-io", "--no-isolation",
                                 "-o", out], capsys)
    try:
        assert code == 0 and stdout == "", err
        assert target.exists()  # what the sandbox prevents: the graph wrote outside any temp dir
        text = out.read_text()
        assert err.splitlines()[0].startswith("placeviz: WARNING: --no-isolation: the local TF servers run without "
                                              "private namespaces"), err
        assert text.splitlines()[0].startswith("WARNING: NOT ISOLATED (--no-isolation): the TF servers listened on "
                                               "every interface"), text
        assert "WARN  isolation " in text and "with the host's file system writable (--no-isolation)" in text
        assert "verify: every check passed: 9 passed, 0 failed, 1 warnings" in text
    finally:
        target.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------
# Signals: nothing is left behind


class VerifyProcess:
    """``python -m placeviz verify`` with a long run, one process per task, its stderr read by a thread."""

    def __init__(self, models: Path, tmp_path: Path, *extra):
        self.report = tmp_path / "report.json"
        cmd = [sys.executable, "-m", "placeviz", "verify", str(models / "plain.meta"), "--isolate", "--steps",
               "1000000", "--timeout", "600", "--format", "json", "-o", str(self.report), *extra]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env=sandbox.child_env(), cwd=tmp_path, preexec_fn=default_signals)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True)
        self.reader.start()

    def wait_for(self, text: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None, "".join(self.lines)[-3000:]
            assert time.monotonic() < deadline, "".join(self.lines)[-3000:]
            time.sleep(0.1)

    def started(self) -> dict:
        """Every process of the run (by /proc, not by what verify says), its temp dir and namespaces."""
        me = self.proc.pid
        children = {p: args for p, args in _processes().items() if _ppid(p) == me}
        coordinator = next(p for p, args in children.items() if CHILD_FLAG in args)
        janitor = next(p for p, args in children.items() if "placeviz.verify.janitor" in args)
        args = _processes()[coordinator]
        work = args[args.index(CHILD_FLAG) + 1]
        tasks = [p for p in sandbox.naming(work) if p != coordinator]
        namespaces = {kind: os.readlink(f"/proc/{coordinator}/ns/{kind}") for kind in ("net", "mnt", "user")}
        return {"coordinator": coordinator, "janitor": janitor, "tasks": tasks, "work": work,
                "namespaces": namespaces}

    def kill(self) -> None:
        """After a failed test: SIGKILL verify (its coordinator and janitor then clean up, as tested)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _processes() -> dict[int, list[str]]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
    return out


def _ppid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _holding(namespaces: set[str]) -> list[tuple[int, str]]:
    """(pid, link) of every process in one of ``namespaces`` or holding an fd on one."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        for kind in ("net", "mnt", "user"):
            try:
                link = os.readlink(entry / "ns" / kind)
            except OSError:
                continue
            if link in namespaces and sandbox.alive(pid):
                out.append((pid, link))
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link in namespaces:
                out.append((pid, link))
    return out


def _assert_nothing_left(run: dict, timeout: float = 20) -> None:
    pids = [run["coordinator"], run["janitor"], *run["tasks"]]
    ns = set(run["namespaces"].values())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {"processes": [p for p in pids if sandbox.alive(p)], "naming": sandbox.naming(run["work"]),
                "temp_dir": Path(run["work"]).exists(), "namespaces": _holding(ns)}
        if not any(left.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"left behind: {left}")


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize(("sig", "code", "no_kernels"), [(signal.SIGINT, 130, False), (signal.SIGTERM, 143, True),
                                                        (signal.SIGKILL, -9, False)], ids=["INT", "TERM", "KILL"])
def test_a_signal_to_verify_leaves_no_process_namespace_or_temp_dir(models, tmp_path, tmpdir_env, sig, code,
                                                                    no_kernels, monkeypatch):
    """SIGTERM's run is on the pure-Python paths (``PLACEVIZ_NO_KERNELS=1``), the others on the C kernels."""
    if no_kernels:
        monkeypatch.setenv(NO_KERNELS_ENV, "1")
    verify = VerifyProcess(models, tmp_path)
    try:
        verify.wait_for("global step 2/")
        run = verify.started()
        assert len(run["tasks"]) == 3, run  # ps:0, worker:0, worker:1, each in the coordinator's namespaces
        for pid in run["tasks"]:
            assert os.readlink(f"/proc/{pid}/ns/net") == run["namespaces"]["net"]
            assert os.readlink(f"/proc/{pid}/ns/mnt") == run["namespaces"]["mnt"]
        assert run["namespaces"]["net"] != os.readlink("/proc/self/ns/net")
        assert run["namespaces"]["mnt"] != os.readlink("/proc/self/ns/mnt")
        os.kill(verify.proc.pid, sig)
        assert verify.proc.wait(timeout=60) == code, "".join(verify.lines)[-3000:]
        _assert_nothing_left(run)
    finally:
        verify.kill()
    verify.reader.join(timeout=10)
    err = "".join(verify.lines)
    if sig != signal.SIGKILL:
        what = "interrupted" if sig == signal.SIGINT else "terminated by SIGTERM"
        assert f"placeviz: {what}; verify stopped every process it started and removed its temp dir" in err
        assert "Traceback" not in err
    assert not verify.report.exists()
    assert Path(run["work"]).parent == tmpdir_env and leftover_temp_dirs(tmpdir_env) == []


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_a_stopped_coordinator_is_noticed_within_seconds(models, tmp_path, tmpdir_env):
    verify = VerifyProcess(models, tmp_path)
    try:
        verify.wait_for("global step 2/")
        run = verify.started()
        os.kill(run["coordinator"], signal.SIGSTOP)
        t0 = time.monotonic()
        code = verify.proc.wait(timeout=60)
        seconds = time.monotonic() - t0
        _assert_nothing_left(run)
    finally:
        verify.kill()
    assert code == 1 and seconds < 10, (code, seconds)
    report = json.loads(verify.report.read_text())
    run_check = checks(report)["run"]
    assert run_check["status"] == "fail"
    assert run_check["summary"].startswith("the coordinator process was stopped (SIGSTOP?) and killed")
    assert leftover_temp_dirs(tmpdir_env) == []
