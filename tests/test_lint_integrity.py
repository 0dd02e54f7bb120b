"""Graph-integrity rules PV001-PV005 on graphs built with TF's real API, then broken by hand.

TensorFlow refuses to build a graph with a duplicate name, a dangling input or an illegal cycle,
so the fixtures are a real ``tf.compat.v1`` training graph (replica_device_setter, a while loop,
Adam-free SGD, a large-ish constant, a Split with two outputs), exported by TF in a subprocess,
whose GraphDef the tests then edit the way hand edits and merges break real ones. Each test
asserts the exact set of (rule, node) findings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from placeviz.protos import GraphDef, MetaGraphDef
from tests.conftest import run_cli

BUILD = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf

tf.compat.v1.disable_control_flow_v2()
out = sys.argv[1]
g = tf.Graph()
with g.as_default():
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=1)):
        gs = tf.compat.v1.train.get_or_create_global_step()
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.compat.v1.get_variable("w", [4, 2], use_resource=False)
        y = tf.matmul(x, w, name="y")
        left, right = tf.split(y, 2, axis=1, name="split")
        big = tf.constant(np.zeros(1024, np.float32), name="big")
        loop = tf.compat.v1.while_loop(lambda i: i < 3, lambda i: i + 1, [tf.constant(0)], name="loop")
        loss = tf.add_n([tf.reduce_mean(left, name="mean"), tf.reduce_sum(big, name="big_sum"),
                         tf.cast(loop, tf.float32)], name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs, name="train")
    meta = tf.compat.v1.train.export_meta_graph(graph=g)
with open(os.path.join(out, "good.meta"), "wb") as f:
    f.write(meta.SerializeToString())
with open(os.path.join(out, "good.pb"), "wb") as f:
    f.write(g.as_graph_def().SerializeToString())
tf.io.write_graph(g.as_graph_def(), out, "good.pbtxt", as_text=True)
'''


@pytest.fixture(scope="module")
def tf_graph(tmp_path_factory) -> Path:
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("lint_tf")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", BUILD, str(out)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def good_def(tf_graph) -> GraphDef:
    g = GraphDef()
    g.ParseFromString((tf_graph / "good.pb").read_bytes())
    return g


def node(g: GraphDef, name: str):
    return next(n for n in g.node if n.name == name)


def write(g: GraphDef, path: Path) -> Path:
    path.write_bytes(g.SerializeToString())
    return path


def lint(capsys, *args) -> tuple[int, dict, str]:
    code, out, err = run_cli(["lint", "--format", "json", *map(str, args)], capsys)
    return code, (json.loads(out) if out.strip() else {}), err


def found(doc: dict, prefix: str = "PV0") -> set[tuple[str, str | None]]:
    return {(f["rule"], f["node"]) for f in doc["findings"] if f["rule"].startswith(prefix)}


@pytest.fixture(autouse=True)
def _no_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no pyproject.toml with a lint config above the test's cwd


@pytest.mark.tf
@pytest.mark.parametrize("name", ["good.pb", "good.pbtxt", "good.meta"])
def test_the_tf_graph_has_no_integrity_finding(tf_graph, capsys, name):
    code, doc, _ = lint(capsys, tf_graph / name, "--select", "PV0")
    assert found(doc) == set() and doc["errors"] == [] and code == 0
    assert doc["summary"]["rules"] == 5


@pytest.mark.tf
def test_duplicate_names_are_findings_not_a_load_error(tf_graph, tmp_path, capsys):
    g = good_def(tf_graph)
    g.node.add(name="w", op="NoOp", device="/job:worker/task:0")  # a merge of two exports
    extra = g.node.add()
    extra.CopyFrom(node(g, "mean"))
    code, doc, err = lint(capsys, write(g, tmp_path / "dup.pb"))
    assert code == 1 and doc["errors"] == []
    assert found(doc, "PV") == {("PV002", "w"), ("PV002", "mean")}
    by_node = {f["node"]: f for f in doc["findings"]}
    assert by_node["w"]["device"] == "/job:worker/task:0"  # the second node named w, not the variable
    assert "2 nodes are named 'w'" in by_node["w"]["message"]
    # Every other rule is reported as skipped, with the reason, none silently dropped.
    skipped = {s["rule"] for s in doc["skipped"]}
    assert "PV201" in skipped and all("cannot be loaded" in s["reason"] for s in doc["skipped"])
    assert "PV001" not in skipped


@pytest.mark.tf
def test_dangling_inputs_each_reported(tf_graph, tmp_path, capsys):
    g = good_def(tf_graph)
    node(g, "y").input[0] = "ghost"
    kept = [n for n in g.node if n.name != "big"]  # its consumer big_sum now dangles
    del g.node[:]
    g.node.extend(kept)
    code, doc, _ = lint(capsys, write(g, tmp_path / "dangling.pb"))
    assert code == 1
    assert found(doc) == {("PV003", "y"), ("PV003", "big_sum")}
    messages = " ".join(f["message"] for f in doc["findings"])
    assert "names no node 'ghost'" in messages and "names no node 'big'" in messages


@pytest.mark.tf
def test_output_index_out_of_range_on_a_loadable_graph(tf_graph, tmp_path, capsys):
    g = good_def(tf_graph)
    node(g, "mean").input[0] = "split:7"  # Split(num_split=2) has outputs 0 and 1
    code, doc, _ = lint(capsys, write(g, tmp_path / "slot.pb"), "--select", "PV0")
    assert found(doc) == {("PV003", "mean")}
    assert "reads output 7 of split (Split), which has 2 outputs" in doc["findings"][0]["message"]
    assert code == 1


@pytest.mark.tf
def test_illegal_cycle_but_not_the_while_loop(tf_graph, tmp_path, capsys):
    g = good_def(tf_graph)
    node(g, "y").input[0] = "mean"  # y -> split -> mean -> y
    code, doc, _ = lint(capsys, write(g, tmp_path / "cycle.pb"))
    assert code == 1
    assert found(doc) == {("PV004", "y")}  # the tf.while_loop's NextIteration -> Merge is legal
    message = doc["findings"][0]["message"]
    assert "y -> split -> mean -> y" in message


@pytest.mark.tf
def test_unknown_op_and_its_effect_on_placement(tf_graph, tmp_path, capsys):
    g = good_def(tf_graph)
    node(g, "big_sum").op = "MyCustomSum"
    code, doc, _ = lint(capsys, write(g, tmp_path / "unknown.pb"))
    assert code == 1
    assert found(doc) == {("PV001", "big_sum")}
    assert "'MyCustomSum'" in doc["findings"][0]["message"]
    placement_skips = [s for s in doc["skipped"] if s["reason"].startswith("placement failed")]
    assert placement_skips and "MyCustomSum" in placement_skips[0]["reason"]
    (tmp_path / "placeviz.toml").write_text('[lint.thresholds]\ncustom-ops = ["MyCustomSum"]\n')
    code, doc, _ = lint(capsys, tmp_path / "unknown.pb", "--select", "PV001")
    assert found(doc) == set() and code == 0  # declared as registered by the user's op library


@pytest.mark.tf
def test_large_const_with_a_configured_threshold(tf_graph, tmp_path, capsys):
    (tmp_path / "placeviz.toml").write_text('[lint.thresholds]\nconst-bytes = "1KiB"\n')
    code, doc, _ = lint(capsys, tf_graph / "good.pb", "--select", "PV005")
    assert found(doc) == {("PV005", "big")}
    f = doc["findings"][0]
    assert f["severity"] == "warning" and "4.0 KiB" in f["message"] and code == 0  # fail-on error
    code, doc, _ = lint(capsys, tf_graph / "good.pb", "--select", "PV005", "--fail-on", "warning")
    assert code == 1


@pytest.mark.tf
@pytest.mark.parametrize("name", ["good.pb", "good.meta", "good.pbtxt"])
def test_large_const_at_the_threshold_in_every_file_kind(tf_graph, tmp_path, capsys, name):
    """The rule reads a Const's tensor only when its serialized NodeDef is over the limit (binary
    files; a text file has no such sizes): a tensor of exactly the limit is not reported, one
    byte more is, whatever the file kind."""
    content = len(node(GraphDef.FromString((tf_graph / "good.pb").read_bytes()), "big").attr["value"]
                  .tensor.tensor_content)
    assert content == 4096
    from placeviz.io import load
    from placeviz.lint.raw import RawGraph

    model = load(str(tf_graph / name))
    lengths = RawGraph.from_graph(model.graph, model.graph_def).node_lengths
    if name != "good.pbtxt":  # the binary kinds take the shortcut: every other Const is passed over unread
        assert lengths is not None and lengths[model.graph.index["big"]] > content
    for limit, expected in ((content, set()), (content - 1, {("PV005", "big")})):
        (tmp_path / "placeviz.toml").write_text(f'[lint.thresholds]\nconst-bytes = {limit}\n')
        _, doc, _ = lint(capsys, tf_graph / name, "--select", "PV005")
        assert found(doc) == expected, (name, limit)


@pytest.mark.tf
def test_text_and_meta_graphs_with_duplicates_and_dangling_inputs(tf_graph, tmp_path, capsys):
    from google.protobuf import text_format

    meta = MetaGraphDef()
    meta.ParseFromString((tf_graph / "good.meta").read_bytes())
    meta.graph_def.node.add(name="loss", op="NoOp")
    node(meta.graph_def, "y").input[1] = "^nowhere"
    (tmp_path / "broken.meta").write_bytes(meta.SerializeToString())
    (tmp_path / "broken.pbtxt").write_text(text_format.MessageToString(meta.graph_def))
    for name in ("broken.meta", "broken.pbtxt"):
        code, doc, _ = lint(capsys, tmp_path / name)
        assert found(doc) == {("PV002", "loss"), ("PV003", "y")}, name
        assert code == 1


@pytest.mark.tf
def test_a_truncated_file_is_still_exit_2_with_one_line(tf_graph, tmp_path, capsys):
    data = (tf_graph / "good.pb").read_bytes()
    path = tmp_path / "truncated.pb"
    path.write_bytes(data[: len(data) // 2])
    code, out, err = run_cli(["lint", str(path)], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "truncated.pb" in lines[0] and "Traceback" not in err


@pytest.mark.tf
def test_graph_size_thresholds(tf_graph, tmp_path, capsys, monkeypatch):
    (tmp_path / "placeviz.toml").write_text('[lint.thresholds]\ngraph-bytes = "1KiB"\n')
    code, doc, _ = lint(capsys, tf_graph / "good.pb", "--select", "PV005")
    assert found(doc) == {("PV005", None)} and doc["findings"][0]["severity"] == "warning"
    import placeviz.rules.pv005_oversized_graph_or_const as pv005

    monkeypatch.setattr(pv005, "HARD_LIMIT", 2048)  # stands in for 2 GiB, which no test should write
    code, doc, _ = lint(capsys, tf_graph / "good.pb", "--select", "PV005")
    assert found(doc) == {("PV005", None)} and doc["findings"][0]["severity"] == "error" and code == 1
    assert "2 GiB limit" in doc["findings"][0]["message"]
