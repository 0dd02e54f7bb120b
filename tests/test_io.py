"""Loading every model format, against what TensorFlow itself says about the same graph."""

from __future__ import annotations

import hashlib

import pytest

from placeviz.errors import LoadError
from placeviz.io import OutputError, atomic_write, load, save_proto

pytestmark = pytest.mark.tf


@pytest.mark.parametrize("name,kind", [("setter.pb", "graphdef"), ("setter.pbtxt", "graphdef-text"),
                                       ("setter.meta", "metagraph")])
def test_formats_agree_with_tf_node_for_node(tf_models, tf_truth, name, kind):
    model = load(tf_models / name)
    assert model.kind == kind
    graph = model.graph
    assert len(graph) == tf_truth["nodes"]
    assert dict(zip(graph.names, graph.ops, strict=True)) == tf_truth["ops"]
    assert dict(zip(graph.names, graph.devices, strict=True)) == tf_truth["devices"]
    # every node is reachable in a valid topological order (the TF1 while loop included)
    assert len(graph.topological_order) == tf_truth["nodes"]


def test_meta_graph_keeps_collections(tf_models, tf_truth):
    c = load(tf_models / "setter.meta").collections
    assert c.global_variables == tf_truth["global_variables"]
    assert c.trainable_variables == tf_truth["trainable_variables"]
    assert c.train_ops == tf_truth["train_op"]
    # partitioned variables and their optimizer slots know the full variable they belong to
    assert c.partitioned == {**{f"emb/part_{k}": "emb" for k in range(3)},
                             **{f"emb/part_{k}/Momentum": "emb/Momentum" for k in range(3)}}


def test_saved_model_picks_training_graph_or_tag(tf_models):
    model = load(tf_models / "saved_tf1")
    assert model.kind == "savedmodel" and "train" in model.tags
    assert model.collections.train_ops  # the training MetaGraph has the train op
    serve = load(tf_models / "saved_tf1", tag="serve")
    assert serve.tags == ("serve",)
    with pytest.raises(LoadError, match="no MetaGraph with tag 'nope'; tags present: train; serve"):
        load(tf_models / "saved_tf1", tag="nope")
    # the saved_model.pb file itself works too
    assert load(tf_models / "saved_tf1" / "saved_model.pb").tags == model.tags


def test_tf2_saved_model(tf_models):
    model = load(tf_models / "saved_tf2")
    assert model.tags == ("serve",)
    assert sorted(op for op in model.graph.ops if op == "VarHandleOp") == ["VarHandleOp"] * 2
    assert model.graph_def.library.function  # TF2 keeps its functions in the library


def test_builder_file_and_module(tmp_path, tf_models):
    builder = tmp_path / "my_builder.py"
    builder.write_text(
        "import tensorflow as tf\n"
        "def graph():\n"
        "    g = tf.Graph()\n"
        "    with g.as_default():\n"
        "        v = tf.compat.v1.Variable(1.0, name='v', use_resource=False)\n"
        "        tf.identity(v * 2.0, name='out')\n"
        "    return g\n"
        "def graph_def():\n"
        "    return graph().as_graph_def()\n"
        "def broken():\n"
        "    raise RuntimeError('no data here')\n"
        "def wrong_type():\n"
        "    return 42\n"
    )
    model = load(f"{builder}:graph")
    assert model.kind == "builder" and "out" in model.graph and model.meta_graph is not None
    assert model.collections.global_variables == ["v"]
    assert load(f"{builder}:graph_def").meta_graph is None
    with pytest.raises(LoadError, match="the builder raised RuntimeError: no data here"):
        load(f"{builder}:broken")
    with pytest.raises(LoadError, match="returned int"):
        load(f"{builder}:wrong_type")
    with pytest.raises(LoadError, match="has no function nope"):
        load(f"{builder}:nope")
    with pytest.raises(LoadError, match="does not exist"):
        load(f"{tmp_path}/absent.py:graph")
    with pytest.raises(LoadError, match="cannot import module no_such_pkg_xyz"):
        load("no_such_pkg_xyz.mod:graph")


def test_loading_never_modifies_the_input(tf_models):
    path = tf_models / "setter.meta"
    before = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
    load(path)
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before


def test_save_round_trip_is_atomic(tmp_path, tf_models):
    model = load(tf_models / "setter.pb")
    for name in ("copy.pb", "copy.pbtxt"):
        save_proto(model.graph_def, tmp_path / name)
        again = load(tmp_path / name)
        assert again.graph_def == model.graph_def
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.pb", "copy.pbtxt"]  # no temp files left
    with pytest.raises(OutputError, match="does not exist"):
        atomic_write(tmp_path / "no_dir" / "x.pb", b"x")
