"""The answers users come for: where each variable lands (with its optimizer slots), and one-line
notes for what placeviz does not cover (issue 17, parts 1 and 5).

The placed device of every variable in ``analyze --format json`` must be the device ``place
--stage placed`` writes for it, and its task the one TensorFlow's own ``replica_device_setter``
gives it; slots are the ones TF's optimizer reports (``Optimizer.get_slot``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import run_cli

from placeviz.protos import GraphDef

pytestmark = pytest.mark.tf


@pytest.fixture(scope="module")
def wide_deep(tmp_path_factory):
    """sample:wide_deep placed on 2 ps tasks: analyze's JSON and place's placed GraphDef."""
    from placeviz.commands import analyze, place
    from placeviz.commands.options import build_options

    out = tmp_path_factory.mktemp("wide_deep")
    report = analyze.run("sample:wide_deep", build_options(_place_args(ps_tasks=2)), fmt="json",
                         output=str(out / "a.json"))
    place.run("sample:wide_deep", str(out / "placed.pbtxt"),
              build_options(_place_args(ps_tasks=2), place_always=True, partition=False, describe=False), "placed")
    from google.protobuf import text_format

    placed = text_format.Parse((out / "placed.pbtxt").read_text(), GraphDef())
    return json.loads((out / "a.json").read_text()), {n.name: n.device for n in placed.node}, report


def _place_args(**given) -> dict:
    args = {"ps_tasks": 0, "cluster_file": None, "worker_device": "/job:worker", "ps_device": "/job:ps",
            "strategy": "round-robin", "ps_ops": None, "no_merge_devices": False, "cpus_per_task": 1,
            "gpus_per_worker": 0, "replace_devices": False, "master": "/job:worker/task:0",
            "soft_placement": False, "global_default_graph": False, "setter_scope_end": None, "plain_noops": ()}
    args.update(given)
    return args


def test_every_variable_has_the_device_place_writes(wide_deep):
    doc, placed, _ = wide_deep
    assert doc["variables"]
    for v in doc["variables"]:
        assert v["placed_device"] == placed[v["name"]], v["name"]
        assert v["placed_device"].startswith("/job:ps/replica:0/task:") and v["placed_by"]


def test_slots_and_per_task_bytes(wide_deep):
    doc, _, _ = wide_deep
    by_name = {v["name"]: v for v in doc["variables"]}
    slots = [v for v in doc["variables"] if v["slot_of"]]
    assert len(slots) == 14  # one Adagrad accumulator per trainable variable (global_step has none)
    for s in slots:
        primary = by_name[s["slot_of"]]
        assert {"name": s["name"], "slot": "Adagrad", "bytes": s["bytes"]} in primary["slots"]
        assert s["placed_device"] == primary["placed_device"]  # colocated, as TF builds them
        assert s["bytes"] == primary["bytes"]
    tasks = {t["task"]: t for t in doc["placement"]["tasks"]}
    for task, t in tasks.items():
        mine = [v for v in doc["variables"] if v["placed_device"].startswith(task + "/")]
        assert t["variable_bytes"] == sum(v["bytes"] for v in mine)
        assert t["slot_bytes"] == sum(v["bytes"] for v in mine if v["slot_of"])
        assert t["unknown_size_variables"] == 0
    loads = [t["variable_bytes"] for t in tasks.values() if t["job"] == "ps"]
    assert doc["placement"]["ps_balance"]["max_over_mean"] == pytest.approx(max(loads) / (sum(loads) / len(loads)))
    # the setter replay splits tf.group NoOps per device: said, and counted
    added = doc["placement"]["nodes_added"]
    assert added == sum(t["nodes"] for t in tasks.values()) - doc["graph"]["nodes"] > 0
    assert any("setter replay added" in n for n in doc["notes"])


def test_the_variables_placed_ids_with_or_without_their_loaded_ids(wide_deep):
    """``placed_ids`` finds the variables in the setter's graph from their ids in the graph as
    loaded, checked by name (the setter renumbers nodes after the first group it splits), else by
    ``Graph.ids_of``: the ids the placed graph's name index gives, whatever the guesses; and the
    ``placement`` section is the same with the loaded ids and without them."""
    from placeviz.analysis import placed_ids

    _, _, report = wide_deep
    stage = report.placement_stage
    graph = stage.result.placement.graph
    names = [v.name for v in report.variables]
    assert len(report.variable_ids) == len(names)
    expected = [graph.index[name] for name in names]
    assert placed_ids(graph, names, report.variable_ids) == expected
    assert placed_ids(graph, names, []) == expected
    assert placed_ids(graph, names, [0] * len(names)) == expected
    assert placed_ids(graph, [*names, "no/such/node"], [*report.variable_ids, 0]) == [*expected, -1]
    assert stage.to_json(report.variables, report.variable_ids) == stage.to_json(report.variables)


def test_text_names_every_device_and_variable_whole(wide_deep):
    from placeviz.commands.analyze import format_text

    doc, _, report = wide_deep
    text = format_text(report)
    section = text[text.index("Variables by PS task"):text.index("Network traffic")]
    assert "…" not in section  # folded onto more lines, never cut
    for device in {v["placed_device"] for v in doc["variables"]}:
        assert device in section
    # the variable column, its folded lines joined: every name is there whole
    first_column = "".join(line.split("│")[1].strip() for line in section.splitlines() if line.startswith("│"))
    for v in doc["variables"]:
        if not v["slot_of"]:
            assert v["name"] in first_column, v["name"]
    assert "█" in text and "of which slots" in text and "max/mean" in text


_TF_SLOTS = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    resource = sys.argv[2] == "resource"
    g = tf.Graph()
    with g.as_default(), tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=3)):
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.compat.v1.get_variable("dense/w", [4, 5], use_resource=resource)
        b = tf.compat.v1.get_variable("dense/b", [5], use_resource=resource)
        loss = tf.reduce_sum(tf.matmul(x, w) + b)
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = tf.compat.v1.train.AdamOptimizer()
        opt.minimize(loss, global_step=step, name="train")
    slots = {v.op.name: sorted(opt.get_slot(v, s).op.name for s in opt.get_slot_names()) for v in (w, b)}
    devices = {n.name: n.device for n in g.as_graph_def().node}
    tf.io.write_graph(tf.compat.v1.train.export_meta_graph(graph=g), sys.argv[1], "m.meta", as_text=False)
    print(json.dumps({"slots": slots, "devices": devices}))
""")


@pytest.mark.parametrize("variables", ["ref", "resource"])
def test_slots_and_tasks_match_tensorflow(tmp_path, capsys, variables):
    """Adam's slots as TF's optimizer names them (beta1_power is Adam's own, not a slot), and every
    variable on the ps task TF's replica_device_setter gave it; ref (VariableV2) and resource
    (VarHandleOp) variables."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", _TF_SLOTS, str(tmp_path), variables], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    truth = json.loads(proc.stdout.strip().splitlines()[-1])
    code, out, err = run_cli(["analyze", tmp_path / "m.meta", "--format", "json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    ours = {v["name"]: sorted(s["name"] for s in v["slots"]) for v in doc["variables"] if v["slots"]}
    assert ours == truth["slots"]
    ops = {v["op"] for v in doc["variables"] if v["name"].startswith("dense/")}  # with their slots
    assert ops == {"VarHandleOp" if variables == "resource" else "VariableV2"}
    assert {v["name"] for v in doc["variables"] if v["slot_of"] is None} >= {"beta1_power", "beta2_power"}
    for v in doc["variables"]:
        tf_device = truth["devices"][v["name"]]  # e.g. /job:ps/task:2
        assert v["placed_device"].replace("/replica:0", "").startswith(tf_device + "/"), (v, tf_device)


def test_unplaced_graph_without_placement_options_says_so(capsys):
    code, out, _ = run_cli(["analyze", "sample:mlp", "--format", "json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["placement"] is None
    assert any("give --ps-tasks N" in n for n in doc["notes"])
    assert all(v["placed_device"] is None for v in doc["variables"])
    code, out, _ = run_cli(["analyze", "sample:mlp", "--ps-tasks", "0", "--format", "json"], capsys)
    notes = json.loads(out)["notes"]
    assert any(n.startswith("--ps-tasks 0:") for n in notes)
    assert not any("give --ps-tasks N (or" in n for n in notes)  # one note, not two
    code, out, _ = run_cli(["analyze", "sample:mlp", "--ps-tasks", "2", "--format", "json"], capsys)
    assert not any("--ps-tasks" in n for n in json.loads(out)["notes"])


def test_partition_and_render_say_the_graph_is_unplaced(tmp_path, capsys):
    code, _, err = run_cli(["partition", "sample:mlp", "-o", tmp_path / "parts"], capsys)
    assert code == 0 and "give --ps-tasks N" in err
    code, _, err = run_cli(["render", "sample:mlp", "-o", tmp_path / "mlp.dot", "--view", "overview"], capsys)
    assert code == 0 and "give --ps-tasks N" in err


_KERAS = textwrap.dedent("""
    import sys
    import tensorflow as tf
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    tf.saved_model.save(model, sys.argv[1])
""")


@pytest.fixture(scope="module")
def keras_saved_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras") / "saved"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", _KERAS, str(out)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_tf2_saved_model_is_a_serving_graph_not_placed(keras_saved_model, tmp_path, capsys):
    code, out, err = run_cli(["analyze", keras_saved_model, "--ps-tasks", "2", "--format", "json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    [note] = [n for n in doc["notes"] if "serving graph" in n]
    assert "no training step" in note and "export_meta_graph" in note
    assert doc["placement"] is None and doc["partition"] is None
    code, out, _ = run_cli(["analyze", keras_saved_model], capsys)
    assert "serving graph" in out
    for args in (["lint", keras_saved_model, "--ps-tasks", "2"],
                 ["place", keras_saved_model, "--ps-tasks", "2", "-o", tmp_path / "p.pbtxt"],
                 ["partition", keras_saved_model, "--ps-tasks", "2", "-o", tmp_path / "parts"]):
        code, _, err = run_cli(args, capsys)
        assert code == 2 and "serving graph" in err and "Traceback" not in err, args
    assert not (tmp_path / "p.pbtxt").exists()
    code, _, err = run_cli(["render", keras_saved_model, "--ps-tasks", "2", "-o", tmp_path / "k.dot"], capsys)
    assert code == 0 and "note: " in err and "serving graph" in err  # drawn as loaded, and said


def test_tf1_training_saved_model_is_still_analysed(tf_models, capsys):
    code, out, _ = run_cli(["analyze", tf_models / "saved_tf1", "--format", "json"], capsys)
    assert code == 0 and not any("serving graph" in n for n in json.loads(out)["notes"])


@pytest.mark.parametrize("name", ["model.ckpt-100.index", "model.ckpt-100.data-00000-of-00001"])
def test_checkpoint_file_points_at_the_meta(tmp_path, capsys, name):
    (tmp_path / name).write_bytes(b"\x00\x01 not a graph")
    code, out, err = run_cli(["analyze", tmp_path / name], capsys)
    assert code == 2 and out == ""
    assert f"{tmp_path / 'model.ckpt-100'}.meta" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_python_file_without_function(tmp_path, capsys):
    builder = tmp_path / "train.py"
    builder.write_text("raise SystemExit('must not run')\n")
    code, _, err = run_cli(["analyze", builder], capsys)
    assert code == 2 and "FILE.py:FUNCTION" in err and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- honest sizes
_BATCH = textwrap.dedent("""
    import sys
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    batch = None if sys.argv[2] == "none" else int(sys.argv[2])
    g = tf.Graph()
    with g.as_default(), tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2)):
        ids = tf.compat.v1.placeholder(tf.int64, [batch], name="ids")
        x = tf.compat.v1.placeholder(tf.float32, [batch, 4], name="x")
        emb = tf.compat.v1.get_variable("emb", [100, 8], use_resource=False)
        w = tf.compat.v1.get_variable("w", [12, 1], use_resource=False)
        h = tf.concat([tf.nn.embedding_lookup(emb, ids), x], axis=1)
        loss = tf.reduce_sum(tf.matmul(h, w))
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf.compat.v1.train.get_or_create_global_step(), name="train")
    tf.io.write_graph(tf.compat.v1.train.export_meta_graph(graph=g), sys.argv[1], sys.argv[2] + ".meta",
                      as_text=False)
""")


def test_batch_size_gives_the_bytes_tf_infers_for_that_batch(tmp_path, capsys):
    """The same program built by TF with ``[None, ...]`` inputs and with ``[16, ...]`` inputs:
    ``--batch-size 16`` on the first must give the traffic of the second, whose shapes TF's own
    shape inference fixed; without it, the unknown sizes are shown as unknown, never as 0."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for batch in ("none", "16"):
        proc = subprocess.run([sys.executable, "-c", _BATCH, str(tmp_path), batch], capture_output=True, text=True,
                              env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]

    def traffic(*args):
        code, out, err = run_cli(["analyze", *args, "--format", "json"], capsys)
        assert code == 0, err
        return json.loads(out)["partition"]

    fixed = traffic(tmp_path / "16.meta")
    unknown = traffic(tmp_path / "none.meta")
    assumed = traffic(tmp_path / "none.meta", "--batch-size", "16")
    assert fixed["unknown_size_transfers"] == 0 and assumed["unknown_size_transfers"] == 0
    assert unknown["unknown_size_transfers"] == assumed["assumed_batch_transfers"] > 0
    assert assumed["assumed_batch"] == 16 and unknown["assumed_batch"] is None
    assert assumed["bytes_per_step"] == fixed["bytes_per_step"] > unknown["bytes_per_step"]
    assert ({t["task"]: (t["sent_bytes"], t["received_bytes"]) for t in assumed["tasks"]}
            == {t["task"]: (t["sent_bytes"], t["received_bytes"]) for t in fixed["tasks"]})
    assert any(t["sent_unknown"] for t in unknown["tasks"])
    code, out, _ = run_cli(["analyze", tmp_path / "none.meta"], capsys)
    words = " ".join(out.split())
    header = words[words.index("Network traffic"):words.index("Per task")]
    assert f"({unknown['unknown_size_transfers']} of " in header and "≥" in header
    assert "unknown" in out[out.index("Per task"):]
    code, out, _ = run_cli(["analyze", tmp_path / "none.meta", "--batch-size", "16"], capsys)
    assert "sized with --batch-size 16" in " ".join(out.split())  # the header may wrap
    # lint sees the same traffic: 4M rows of 8 floats cross tasks, above PV403's 64 MiB
    lint = ["lint", tmp_path / "none.meta", "--select", "PV403", "--format", "json", "--fail-on", "never"]
    code, out, err = run_cli(lint, capsys)
    assert code == 0 and not json.loads(out)["findings"], err
    code, out, err = run_cli([*lint, "--batch-size", str(4 << 20)], capsys)
    assert code == 0, err
    [finding] = [f for f in json.loads(out)["findings"] if f["rule"] == "PV403"][:1]
    assert "MiB per step" in finding["message"]


def test_sizes_read_as_unknown_never_zero():
    from placeviz.sizes import bytes_at_least, human_bytes, transfers_text

    assert human_bytes(None) == "? B" and human_bytes(0) == "0 B" and human_bytes(2867) == "2.8 KiB"
    assert bytes_at_least(2867, 28, 52) == "≥ 2.8 KiB, 28 of 52 unknown"
    assert bytes_at_least(0, 3, 3) == "? B (3 of 3 unknown)" and bytes_at_least(96, 0) == "96 B"
    assert transfers_text(7, 0, 0, 7) == "7 control"
    assert transfers_text(3, 96, 0, 1) == "2 tensors + 1 control, 96 B/step"
    assert transfers_text(3, 0, 3, 0) == "3 tensors, ? B/step (3 unknown)"
    assert transfers_text(3, 1024, 1, 0) == "3 tensors, ≥ 1.0 KiB/step (1 of 3 unknown)"


def test_html_report_shows_where_each_variable_landed(tmp_path, capsys):
    code, _, err = run_cli(["render", "sample:wide_deep", "--ps-tasks", "2", "-o", tmp_path / "r.html"], capsys)
    assert code == 0, err
    assert "setter replay added" in err
    code, out, _ = run_cli(["analyze", "sample:wide_deep", "--ps-tasks", "2", "--format", "json"], capsys)
    doc = json.loads(out)
    import html

    text = html.unescape((tmp_path / "r.html").read_text())
    assert "Variables by PS task" in text and "of which slots" in text and "█" in text
    for v in doc["variables"]:
        if v["slot_of"] is None:
            assert f"<td>{v['name']}</td>" in text and f"<td>{v['placed_device']}</td>" in text
    assert "setter replay added" in text  # the report's notes


def test_every_device_shows_its_largest_variables():
    """With many variables, each device still shows its biggest ones (an embedding on the last PS
    task is not pushed out by the first task's hundred small ones)."""
    from placeviz.analysis import Analysis, VariableInfo
    from placeviz.commands.analyze import format_text

    variables = []
    for task in range(3):
        for k in range(50):
            size = 4 * (k + 1) * (1000 if (task, k) == (2, 7) else 1)
            variables.append(VariableInfo(name=f"t{task}/v{k}", op="VariableV2", dtype="float32", shape=[size // 4],
                                          bytes=size, trainable=True, device="",
                                          placed_device=f"/job:ps/replica:0/task:{task}/device:CPU:0",
                                          placed_by="ps op, strategy call #1"))
    report = Analysis(model="m", kind="graphdef", node_count=150, data_edge_count=0, control_edge_count=0,
                      op_histogram={"VariableV2": 150}, requested_devices={"": 150}, unplaced_count=150,
                      unplaced_sample=[], variables=variables, other_state=[], collections=[], train_ops=[],
                      producer=0, function_count=0, placement_stage=_Placed())
    text = format_text(report)
    assert "t2/v7 " in text and text.count("smaller on this device") == 3
    for task in range(3):
        assert f"/job:ps/replica:0/task:{task}/device:CPU:0: 50 variables" in text
        assert f"t{task}/v49 " in text  # each device's largest of the rest


class _Placed:
    """A placement stage whose ``placement`` section is given (the table reads only the variables)."""

    def to_json(self, _variables, _variable_ids=None) -> dict:
        return {"stage": "placed", "setter_ran": True, "tasks": [], "ps_balance": {"max_over_mean": None}}


def test_place_says_ps_tasks_zero_places_nothing(tmp_path, capsys):
    code, _, err = run_cli(["place", "sample:mlp", "--ps-tasks", "0", "--stage", "setter", "-o", tmp_path / "p.pbtxt"],
                           capsys)
    assert code == 0 and "note: --ps-tasks 0: replica_device_setter(ps_tasks=0) returns None" in err


_UNKNOWN_VARIABLE = textwrap.dedent("""
    import sys
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        known = tf.compat.v1.get_variable("known", [4], use_resource=False)
        free = tf.compat.v1.Variable(tf.zeros_like(x), validate_shape=False, name="free", use_resource=False)
        tf.identity(tf.reduce_sum(free) + tf.reduce_sum(known), name="out")
    tf.io.write_graph(tf.compat.v1.train.export_meta_graph(graph=g), sys.argv[1], "m.meta", as_text=False)
""")


def test_a_variable_of_unknown_size_is_not_zero(tmp_path, capsys):
    """TF's own variable built with validate_shape=False has no static shape: placeviz reports its
    size as unknown in analyze (text and JSON) and in the pictures, never as 0 B."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", _UNKNOWN_VARIABLE, str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    model = tmp_path / "m.meta"
    code, out, err = run_cli(["analyze", model, "--ps-tasks", "1", "--format", "json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert {v["name"]: v["bytes"] for v in doc["variables"]} == {"known": 16, "free": None}
    assert doc["variable_bytes"]["unknown_size_variables"] == 1
    [ps] = [t for t in doc["placement"]["tasks"] if t["job"] == "ps"]
    assert ps["variable_bytes"] == 16 and ps["unknown_size_variables"] == 1
    code, out, _ = run_cli(["analyze", model, "--ps-tasks", "1"], capsys)
    assert "holding ≥ 16 B, 1 of 2 unknown" in out and "? B" in out
    code, _, err = run_cli(["render", model, "--ps-tasks", "1", "--view", "overview", "-o", tmp_path / "o.dot"],
                           capsys)
    assert code == 0, err
    assert "2 variables, ≥ 16 B, 1 of 2 unknown" in (tmp_path / "o.dot").read_text()
