"""Sync vs async, run on real local TF clusters: ``verify --mode async|barrier``, ``--slow-worker``,
``compare-modes``, the Chrome trace and the timeline picture (docs/modes.md).

The cluster runs are marked ``slow``. What they assert are the relations TF's machinery guarantees
between the runs of one invocation (a barrier step averages one gradient of every worker and is
never shorter than the straggler's delay; a SyncReplicas step averages at least R gradients; the
async values equal a replay of every update in ps order), never absolute timings.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from placeviz.errors import PlacevizError
from placeviz.verify.modes import parse_slow_workers
from placeviz.verify.staleness import applies
from tests.conftest import run_cli

HAS_TF = importlib.util.find_spec("tensorflow") is not None
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
REPO = Path(__file__).parents[1]

# The JSON trace-event format (what Perfetto and chrome://tracing read; TF's timeline.py writes it):
# the subset placeviz writes, every event kind with the fields its phase requires.
TRACE_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {
            "type": "object",
            "required": ["ph", "name", "pid"],
            "properties": {"ph": {"enum": ["X", "i", "M"]}, "name": {"type": "string"},
                           "pid": {"type": "integer"}, "tid": {"type": "integer"}, "ts": {"type": "number"},
                           "dur": {"type": "number", "minimum": 0}, "s": {"enum": ["g", "p", "t"]},
                           "args": {"type": "object"}},
            "allOf": [
                {"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["ts", "dur", "tid"]}},
                {"if": {"properties": {"ph": {"const": "i"}}}, "then": {"required": ["ts", "s", "tid"]}},
                {"if": {"properties": {"ph": {"const": "M"}}}, "then": {"required": ["args"]}},
            ]}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
    },
}


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(("values", "workers", "message"), [
    (["2"], None, "expected I=SECONDS"),
    (["a=1"], None, "expected I=SECONDS"),
    (["1=-0.5"], None, "the delay must be between 0 and 3600 seconds"),
    (["1=nan"], None, "the delay must be between 0 and 3600 seconds"),
    (["1=0.1", "1=0.2"], None, "worker 1 is given twice"),
    (["3=0.2"], 3, "there is no worker 3 (W=3: workers 0..2)"),
])
def test_slow_worker_values_are_checked(values, workers, message):
    with pytest.raises(PlacevizError, match=None) as e:
        parse_slow_workers(values, workers)
    assert message in str(e.value)


def test_slow_worker_parses():
    assert parse_slow_workers(["0=0.2", "2=1"], 3) == {0: 0.2, 2: 1.0}


@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize(("args", "message"), [
    (["--workers", "3", "--slow-worker", "5=0.2"], "--slow-worker 5=...: there is no worker 5"),
    (["--slow-worker", "1=-1"], "the delay must be between 0 and 3600 seconds"),
    (["--timeline", "t.gif"], "the picture must be a .png or .svg file"),
])
def test_verify_mode_options_one_line_exit_2(tmp_path, capsys, monkeypatch, args, message):
    """Checked before the model is loaded (it does not exist)."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["verify", "missing.meta", *args], capsys)
    assert code == 2 and out == ""
    lines = [line for line in err.strip().splitlines() if line.startswith("placeviz: error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err


@pytest.mark.tf
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize(("args", "message"), [
    (["--mode", "async"], "--mode async runs a plain training graph, but this one already has SyncReplicas "
                          "machinery (token queue sync_token_q)"),
    (["--mode", "async", "--sync-replicas", "--replicas-to-aggregate", "2"],
     "--mode async runs the plain graph as it is; --sync-replicas"),
    (["--mode", "barrier", "--workers", "3"], "--mode barrier needs R = W"),
    (["--workers", "3", "--slow-worker", "3=0.1"], "there is no worker 3"),
])
def test_mode_errors_on_real_graphs_are_one_line(tmp_path, capsys, args, message):
    """A TF-built SyncReplicas mlp (R=2 of W=3): refused before any server starts."""
    meta = tmp_path / "mlp_sync.meta"
    code, _out, err = run_cli(["samples", "build", "mlp", "--ps-tasks", "2", "--sync-replicas",
                               "--replicas-to-aggregate", "2", "--total-replicas", "3", "-o", meta], capsys)
    assert code == 0, err
    code, out, err = run_cli(["verify", meta, *args], capsys)
    assert code == 2 and out == ""
    lines = [line for line in err.strip().splitlines() if line.startswith("placeviz: error:")]
    assert len(lines) == 1 and message in lines[0], err


def test_compare_modes_needs_two_workers_and_fewer_backups(capsys):
    code, _out, err = run_cli(["compare-modes", "missing.meta", "--workers", "3", "--backup-workers", "3"], capsys)
    assert code == 2 and "--backup-workers 3: must be between 0 and W-1 = 2" in err


# ------------------------------------------------------------------------------------------ staleness


def test_staleness_counts_the_updates_between_a_read_and_its_update():
    """Three runs updating v on one ps: r0 reads at 0 and applies at 50; r1 reads at 10, applies at
    60 (after r0's update: stale by 1); r2 reads at 55 (after r0's update) and applies at 70 (after
    r1's, which started after its read: stale by 1). The ps order is by start time."""
    plan = {"updates": [{"op": "upd", "variable": "v"}], "reads": {"v": ["v/read"]}}
    ev = [["worker:0", 0, "ps0", "v/read", "Identity", 0.0, 1],
          ["worker:0", 0, "ps0", "upd", "ApplyGradientDescent", 50.0, 2],
          ["worker:1", 0, "ps0", "v/read", "Identity", 10.0, 1],
          ["worker:1", 0, "ps0", "upd", "ApplyGradientDescent", 60.0, 2],
          ["worker:2", 0, "ps0", "v/read", "Identity", 55.0, 1],
          ["worker:2", 0, "ps0", "upd", "ApplyGradientDescent", 70.0, 2]]
    rows = applies(plan, {"events": ev})["v"]
    assert [(a.worker, a.staleness) for a in rows] == [(0, 0), (1, 1), (2, 1)]


# ------------------------------------------------------------------------------------------ cluster runs


PLANTED = r'''
import sys
import numpy as np
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
g = tf.Graph()
with g.as_default():
    with v1.device(v1.train.replica_device_setter(ps_tasks=1, worker_device="/job:worker/task:0")):
        gs = v1.train.get_or_create_global_step()
        x = v1.placeholder_with_default(np.ones((8, 4), np.float32), [None, 4], name="x")
        w = v1.get_variable("w", [4, 1], use_resource=False)
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)), name="loss")
        # Locked updates: overlapping ones are serialized, so no difference can pass as a race.
        train = v1.train.GradientDescentOptimizer(0.1, use_locking=True).minimize(loss, global_step=gs)
        if sys.argv[2] == "planted":  # an update the optimizer does not make: the replay must miss it
            train = tf.group(train, v1.assign_sub(w, 0.01 * tf.ones_like(w), use_locking=True), name="train")
        v1.add_to_collection(v1.GraphKeys.TRAIN_OP, train)
        init = v1.global_variables_initializer()
    v1.train.export_meta_graph(sys.argv[1], graph=g)
'''


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize("kind", ["plain", "planted"])
def test_async_values_catch_a_planted_update(tmp_path, capsys, kind):
    meta = tmp_path / f"{kind}.meta"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", PLANTED, str(meta), kind], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = tmp_path / "r.json"
    code, _o, err = run_cli(["verify", meta, "--mode", "async", "--workers", "2", "--steps", "6", "--format",
                             "json", "-o", out], capsys)
    report = json.loads(out.read_text())
    values = {c["id"]: c for c in report["checks"]}["values"]
    if kind == "plain":
        assert code == 0 and values["status"] == "pass", values["summary"]
    else:
        assert code == 1 and values["status"] == "fail", values["summary"]
        assert values["summary"].startswith("1 of 1 variables differ from the replay of 6 updates in ps order: w:")


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize("sample", ["mlp", "inception", "wide_deep", "lstm", "hashtable"])
def test_async_every_plain_sample_passes(sample, tmp_path, capsys):
    """Dense (GradientDescent, Momentum, Adam) and sparse (Adagrad, FTRL, Adam's composite) updates."""
    out = tmp_path / "r.json"
    code, _o, err = run_cli(["verify", f"sample:{sample}", "--ps-tasks", "2", "--mode", "async", "--workers", "2",
                             "--steps", "6", "--format", "json", "-o", out], capsys)
    report = json.loads(out.read_text())
    c = {c["id"]: c for c in report["checks"]}
    assert code == 0, {k: v["summary"] for k, v in c.items() if v["status"] != "pass"}
    assert c["global_step"]["status"] == "pass"
    # Unlocked updates (FTRL, Adagrad... default use_locking=False) that overlapped in time have no
    # order TF pins down: a difference there is "warn" (ambiguous), and only there. Whether two
    # updates overlap depends on timing, so a run may show either.
    differing = [r for r in c["values"]["evidence"]["variables"] if not r["ok"]]
    assert c["values"]["status"] == ("warn" if differing else "pass"), c["values"]["summary"]
    assert all(r.get("ambiguous") for r in differing), c["values"]["summary"]
    assert c["global_step"]["evidence"]["final"] - c["global_step"]["evidence"]["initial"] == 6
    assert report["modes"]["mode"] == "async" and report["modes"]["global_steps"] == 6


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """``compare-modes`` on the bundled mlp, 3 workers, worker 2 slowed by 0.2 s, 10 steps."""
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("modes")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "placeviz", "compare-modes", "sample:mlp", "--ps-tasks", "2",
                           "--workers", "3", "--steps", "10", "--slow-worker", "2=0.2", "--format", "json",
                           "-o", str(out / "modes.json"), "--trace", str(out / "trace.json"), "--timeline",
                           str(out / "timeline.png")],
                          capture_output=True, text=True, cwd=REPO, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    print(f"compare-modes mlp W=3 K=10: exit {proc.returncode} in {time.monotonic() - t0:.1f} s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads((out / "modes.json").read_text())


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_compare_modes_relations_tf_guarantees(compared):
    _out, doc = compared
    assert doc["schema"] == "placeviz.modes/1" and doc["ok"]
    runs = {r["label"]: r for r in doc["runs"]}
    assert list(runs) == ["async", "sync R=3", "sync R=2 (1 backup)", "barrier R=3"]
    assert all(r["global_steps"] == 10 for r in doc["runs"])
    rel = {r["id"]: r for r in doc["relations"]}
    guaranteed = [r for r in doc["relations"] if r["guaranteed"]]
    assert {r["id"] for r in guaranteed} >= {"barrier_one_gradient_per_worker", "barrier_straggler_pace",
                                             "sync_r3_at_least_r", "sync_r2_at_least_r"}
    assert all(r["holds"] for r in guaranteed), [r["text"] for r in guaranteed if not r["holds"]]
    barrier = runs["barrier R=3"]
    assert all(sorted(s["averaged"]) == [0, 1, 2] and not s["dropped"] for s in barrier["gradients"]["per_step"])
    assert barrier["s_per_step"] >= 0.2  # each step waits for the straggler's gradient
    # async: the straggler's gradients were computed from parameters others had updated meanwhile
    assert runs["async"]["staleness"]["max"] > 0 and rel["async_stale"]["holds"]
    for label in ("sync R=3", "sync R=2 (1 backup)"):
        g = runs[label]["gradients"]
        assert len(g["per_step"]) == 10
        averaged = sum(v["averaged"] for v in g["per_worker"].values())
        assert averaged == sum(len(s["averaged"]) for s in g["per_step"])
        assert g["per_worker"]["2"]["share"] is not None
    assert runs["sync R=2 (1 backup)"]["replicas_to_aggregate"] == 2


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_compare_modes_trace_is_a_valid_trace_with_one_track_per_task(compared):
    jsonschema = pytest.importorskip("jsonschema")
    out, _doc = compared
    trace = json.loads((out / "trace.json").read_text())
    jsonschema.validate(trace, TRACE_SCHEMA)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    for mode in ("async", "sync R=3", "sync R=2 (1 backup)", "barrier R=3"):
        tasks = {n.split(" / ", 1)[1] for n in names if n.startswith(mode + " / ")}
        expected = {"ps:0", "ps:1", "worker:0", "worker:1", "worker:2"}
        assert tasks == expected | ({"chief sync loop"} if mode != "async" else set()), (mode, tasks)
    instants = {e["name"] for e in trace["traceEvents"] if e["ph"] == "i"}
    assert {"token dequeued", "accumulator apply", "accumulator take"} <= instants
    # the slowed worker's delay is on its own task, about 0.2 s per run
    delays = [e["dur"] for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "placeviz_slow_worker/delay"]
    assert delays and min(delays) >= 0.19e6


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not (HAS_TF and HAS_MPL), reason="TensorFlow or matplotlib is not installed")
def test_compare_modes_timeline_picture(compared):
    out, _doc = compared
    data = (out / "timeline.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert 1000 <= width <= 2500 and 400 <= height <= 2500, (width, height)


@pytest.mark.parametrize(("content", "output", "message"), [
    ('{"schema": "placeviz.analysis/1"}', "r.html", "not a placeviz verify or compare-modes JSON (schema "
                                                    "'placeviz.analysis/1'"),
    ("not json", "r.html", "cannot read it as JSON"),
    ('{"schema": "placeviz.modes/1"}', "r.svg", "the run section is part of the HTML report"),
])
def test_render_verify_file_errors_are_one_line(tmp_path, capsys, monkeypatch, content, output, message):
    """Checked before the model is loaded (it does not exist); nothing is written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.json").write_text(content)
    code, out, err = run_cli(["render", "missing.meta", "-o", output, "--verify", "v.json"], capsys)
    assert code == 2 and out == "" and message in err, err
    assert not (tmp_path / output).exists()


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not (HAS_TF and HAS_MPL), reason="TensorFlow or matplotlib is not installed")
def test_render_report_shows_the_compare_modes_run(compared, capsys):
    out, doc = compared
    html = out / "report.html"
    code, _o, err = run_cli(["render", "sample:mlp", "--ps-tasks", "2", "-o", html, "--verify", out / "modes.json"],
                            capsys)
    assert code == 0, err
    text = html.read_text()
    section = text[text.index('<section id="verify">'):]
    section = section[: section.index("</section>")]
    assert "Run on a cluster (placeviz compare-modes)" in section
    for run in doc["runs"]:
        assert run["label"] in section
    assert "barrier R=3: whose gradients each step averaged" in section
    assert section.count("<tr><td>") >= 4 + 3 * 10  # the runs table and three per-step tables
    assert 'src="data:image/png;base64,' in section  # the timeline, inline: no file next to the report
    assert '<a href="#verify">run</a>' in text


def test_the_trace_has_a_track_for_every_task_even_one_that_finished_no_run():
    """A slowed worker whose first run was still going when the last step ended recorded nothing;
    its track is there, empty, after the other tasks' in job and task order (no TF needed)."""
    from types import SimpleNamespace

    from placeviz.verify.timeline import chrome_trace

    report = SimpleNamespace(
        plan={"cluster": {"ps": 2, "worker": 3}, "workers": 3, "worker_job": "worker"},
        result={"worker_runs": [{"worker": 1, "run": 1, "t0": 0.0, "t1": 0.1, "token": None}],
                "sync_runs": [{"step": 1, "t0": 0.0, "t1": 0.2}], "events": []},
        check=lambda name: None)
    trace = chrome_trace([("sync R=3", report)])
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert names == [f"sync R=3 / {t}" for t in ("ps:0", "ps:1", "worker:0", "worker:1", "worker:2",
                                                  "chief sync loop")]
