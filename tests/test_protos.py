"""placeviz's proto classes (placeviz/protos.py) against TensorFlow's own.

The classes come from TF's descriptors shipped in ``placeviz/data/tf_protos.binpb`` and live in a
private descriptor pool. TF writes graphs, MetaGraphDefs (with collections, a saver, queue runners,
an ``Any``), v1 and v2 SavedModels (with a function library, signatures, an asset, a
SavedObjectGraph) and a GraphDebugInfo, in binary and text; placeviz must read every byte of them as
TF does (no unknown field anywhere, deterministic bytes equal to TF's), print the same text, and
share one process with TF in either import order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.protobuf import text_format
from google.protobuf.unknown_fields import UnknownFieldSet

from placeviz import protos

WRITE_MODELS = textwrap.dedent('''
    import sys
    from pathlib import Path

    import tensorflow as tf
    from tensorflow.core.framework import variable_pb2

    out = Path(sys.argv[1])
    v1 = tf.compat.v1

    # A TF1 graph: variables, a while loop, a queue runner, a function, a saver, odd collections.
    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, [None, 3], name="x")
        w = v1.get_variable("w", [3, 2], initializer=v1.glorot_uniform_initializer())
        b = v1.get_variable("b", [2], initializer=v1.zeros_initializer(), use_resource=True)

        @tf.function
        def scale(t):
            return t * 2.0 + tf.constant([1.5, -2.0])

        y = scale(tf.matmul(x, w) + b)
        i = tf.while_loop(lambda k: k < 3, lambda k: k + 1, [tf.constant(0)])
        loss = tf.reduce_sum(y) + tf.cast(i, tf.float32)
        v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        queue = v1.FIFOQueue(4, [tf.float32], shapes=[[3]], name="q")
        v1.train.add_queue_runner(v1.train.QueueRunner(queue, [queue.enqueue([tf.ones([3])])]))
        tf.constant(["a", "b\\x00c"], name="strings")
        v1.add_to_collection("ints", 7)
        v1.add_to_collection("floats", 2.5)
        (out / "vocab.txt").write_text("a\\nb\\n")
        asset = tf.constant(str(out / "vocab.txt"), name="asset_path")
        v1.add_to_collection(v1.GraphKeys.ASSET_FILEPATHS, asset)
        saver = v1.train.Saver()
        graph_def = g.as_graph_def(add_shapes=True)
        assert graph_def.library.function, "the tf.function must land in the graph's library"
        (out / "graph.pb").write_bytes(graph_def.SerializeToString())
        tf.io.write_graph(graph_def, str(out), "graph.pbtxt", as_text=True)
        meta = v1.train.export_meta_graph(graph=g, saver_def=saver.as_saver_def())
        # MetaInfoDef.any_info (google.protobuf.Any), packed by protobuf from TF's own class.
        meta.meta_info_def.any_info.Pack(variable_pb2.VariableDef(variable_name="w:0"))
        (out / "meta.meta").write_bytes(meta.SerializeToString())
        tf.io.write_graph(meta, str(out), "meta.pbtxt", as_text=True)
        with v1.Session(graph=g) as sess:
            sess.run(v1.global_variables_initializer())
            sig = v1.saved_model.predict_signature_def({"x": x}, {"y": y})
            for name, as_text in (("saved_v1", False), ("saved_v1_text", True)):
                builder = v1.saved_model.Builder(str(out / name))
                builder.add_meta_graph_and_variables(sess, ["train"], signature_def_map={"serve": sig},
                                                     assets_collection=[asset])
                builder.save(as_text=as_text)

    # A TF2 SavedModel: SavedObjectGraph, concrete functions, and the ops' stacks (GraphDebugInfo).
    class Model(tf.Module):
        def __init__(self):
            self.v = tf.Variable([1.0, 2.0])

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
        def __call__(self, t):
            return {"out": t * self.v}

    tf.saved_model.save(Model(), str(out / "saved_v2"), options=tf.saved_model.SaveOptions(save_debug_info=True))
''')


@pytest.fixture(scope="module")
def tf_written(tmp_path_factory) -> Path:
    """A directory of graphs, MetaGraphDefs, SavedModels and debug info, all written by TF."""
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("tf_written")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", WRITE_MODELS, str(out)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _tf_class(full_name: str):
    """TF's own generated class of ``full_name`` (default pool, filled by importing TF's modules)."""
    from google.protobuf import descriptor_pool, message_factory
    from tensorflow.core.framework import graph_debug_info_pb2, variable_pb2  # noqa: F401
    from tensorflow.core.protobuf import queue_runner_pb2, saved_model_pb2  # noqa: F401

    return message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName(full_name))


def _unknown_fields(msg, path: str = "") -> list[str]:
    """Paths of every field ``msg`` (recursively) did not know: TF wrote something placeviz drops."""
    found = [f"{path or '<root>'}: field {f.field_number}" for f in UnknownFieldSet(msg)]
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is None:
                continue
            items = [(f"{path}.{field.name}[{k!r}]", v) for k, v in value.items()]
        elif hasattr(value, "add"):  # a repeated message field
            items = [(f"{path}.{field.name}[{k}]", v) for k, v in enumerate(value)]
        else:
            items = [(f"{path}.{field.name}", value)]
        for sub_path, sub in items:
            found += _unknown_fields(sub, sub_path)
    return found


def _assert_reads_like_tf(data: bytes, full_name: str):
    """placeviz parses TF's bytes with every field known, and re-serializes them as TF does."""
    ours = protos.message_class(full_name).FromString(data)
    theirs = _tf_class(full_name).FromString(data)
    assert ours.DESCRIPTOR.full_name == theirs.DESCRIPTOR.full_name == full_name
    assert _unknown_fields(ours) == []
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)
    return ours, theirs


def _assert_text_like_tf(text: str, full_name: str):
    """TF's text parses into the message TF parses, and prints back as TF prints it."""
    ours = protos.parse_text(text, protos.message_class(full_name)())
    theirs = text_format.Parse(text, _tf_class(full_name)())
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)
    assert (text_format.MessageToString(ours, descriptor_pool=protos.POOL)
            == text_format.MessageToString(theirs))
    return ours


@pytest.mark.tf
def test_tf_written_graph_def_round_trips(tf_written):
    ours, _ = _assert_reads_like_tf((tf_written / "graph.pb").read_bytes(), "tensorflow.GraphDef")
    assert isinstance(ours, protos.GraphDef) and ours.library.function and ours.versions.producer > 0
    text = _assert_text_like_tf((tf_written / "graph.pbtxt").read_text(), "tensorflow.GraphDef")
    assert text.SerializeToString(deterministic=True) == ours.SerializeToString(deterministic=True)
    while_ops = {n.op for n in ours.node} & {"While", "StatelessWhile", "Enter"}
    assert while_ops, "the loop must be in the graph"


@pytest.mark.tf
def test_tf_written_meta_graph_round_trips_with_its_collections(tf_written):
    data = (tf_written / "meta.meta").read_bytes()
    ours, theirs = _assert_reads_like_tf(data, "tensorflow.MetaGraphDef")
    assert isinstance(ours, protos.MetaGraphDef) and ours.saver_def.filename_tensor_name
    kinds = {key: c.WhichOneof("kind") for key, c in ours.collection_def.items()}
    assert kinds["ints"] == "int64_list" and kinds["floats"] == "float_list"
    assert kinds["trainable_variables"] == kinds["queue_runners"] == "bytes_list"
    for key, full_name in (("trainable_variables", "tensorflow.VariableDef"), ("variables", "tensorflow.VariableDef"),
                           ("queue_runners", "tensorflow.QueueRunnerDef")):
        for value in ours.collection_def[key].bytes_list.value:
            _assert_reads_like_tf(value, full_name)
    assert ours.meta_info_def.any_info.type_url == "type.googleapis.com/tensorflow.VariableDef"
    unpacked = protos.VariableDef()
    assert ours.meta_info_def.any_info.Unpack(unpacked) and unpacked.variable_name == "w:0"
    # The text form has the Any expanded ([type.googleapis.com/tensorflow.VariableDef] {...}).
    text = (tf_written / "meta.pbtxt").read_text()
    assert "[type.googleapis.com/tensorflow.VariableDef]" in text
    assert _assert_text_like_tf(text, "tensorflow.MetaGraphDef").SerializeToString(deterministic=True) == (
        theirs.SerializeToString(deterministic=True))


@pytest.mark.tf
def test_cli_reads_tfs_text_meta_graph_with_an_expanded_any(tf_written):
    """TF prints ``MetaInfoDef.any_info`` expanded (``[type.googleapis.com/tensorflow.VariableDef]``);
    the static core, which never imports TF, resolves that name in its own pool. (With
    tensorboard's copies, named ``tensorboard.*``, this was a syntax error.)"""
    proc = subprocess.run([sys.executable, "-m", "placeviz", "analyze", str(tf_written / "meta.pbtxt"), "--format", "json"],
                          capture_output=True, text=True, timeout=120, cwd=tf_written)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kind"] == "metagraph"


@pytest.mark.tf
@pytest.mark.parametrize("name", ["saved_v1", "saved_v2"])
def test_tf_written_saved_models_round_trip(tf_written, name):
    ours, _ = _assert_reads_like_tf((tf_written / name / "saved_model.pb").read_bytes(), "tensorflow.SavedModel")
    (meta,) = ours.meta_graphs
    assert meta.signature_def and meta.graph_def.node
    if name == "saved_v1":  # the v1 builder lists assets as Any(AssetFileDef) in a collection
        (packed,) = meta.collection_def["saved_model_assets"].any_list.value
        asset = protos.AssetFileDef()
        assert packed.Unpack(asset) and asset.filename == "vocab.txt"
    else:
        assert meta.object_graph_def.nodes and meta.graph_def.library.function
        debug = (tf_written / name / "debug" / "saved_model_debug_info.pb").read_bytes()
        info, _ = _assert_reads_like_tf(debug, "tensorflow.GraphDebugInfo")
        assert isinstance(info, protos.GraphDebugInfo) and info.files and info.name_to_trace_id


@pytest.mark.tf
def test_tf_written_text_saved_model_parses_as_tf_parses_it(tf_written):
    text = (tf_written / "saved_v1_text" / "saved_model.pbtxt").read_text()
    assert 'type_url: "type.googleapis.com/tensorflow.AssetFileDef"' in text  # TF writes this Any packed
    ours = _assert_text_like_tf(text, "tensorflow.SavedModel")
    assert ours.meta_graphs[0].graph_def.node and _unknown_fields(ours) == []


@pytest.mark.tf
def test_shipped_descriptors_are_what_the_generator_makes_from_tf():
    """``placeviz/data/tf_protos.binpb`` is up to date with the installed TF (regenerate with
    ``python -m placeviz.protos_generate`` otherwise)."""
    pytest.importorskip("tensorflow")
    from placeviz.protos_generate import build_descriptor_set

    assert build_descriptor_set() == protos.DESCRIPTOR_SET.read_bytes()


@pytest.mark.tf
def test_every_shipped_message_has_tfs_fields():
    """Independently of the generator: each message in placeviz's pool has exactly the fields of
    TF's message of that name (numbers, types, labels, packing, type names) and each enum its values."""
    pytest.importorskip("tensorflow")
    from google.protobuf import descriptor_pb2, descriptor_pool

    _tf_class("tensorflow.SavedModel")  # fills the default pool with TF's files
    tf_pool = descriptor_pool.Default()
    shipped = descriptor_pb2.FileDescriptorSet.FromString(protos.DESCRIPTOR_SET.read_bytes())
    checked = 0
    for file in shipped.file:
        prefix = file.package + "." if file.package else ""
        for msg in file.message_type:
            ours, theirs = descriptor_pb2.DescriptorProto(), descriptor_pb2.DescriptorProto()
            protos.POOL.FindMessageTypeByName(prefix + msg.name).CopyToProto(ours)
            tf_pool.FindMessageTypeByName(prefix + msg.name).CopyToProto(theirs)
            assert ours == theirs, prefix + msg.name
            checked += 1
        for enum in file.enum_type:
            ours, theirs = descriptor_pb2.EnumDescriptorProto(), descriptor_pb2.EnumDescriptorProto()
            protos.POOL.FindEnumTypeByName(prefix + enum.name).CopyToProto(ours)
            tf_pool.FindEnumTypeByName(prefix + enum.name).CopyToProto(theirs)
            assert ours == theirs, prefix + enum.name
    assert checked > 30


POOLS_IN_ONE_PROCESS = textwrap.dedent('''
    import sys
    if sys.argv[1] == "placeviz-first":
        from placeviz import protos
        import tensorflow as tf
    else:
        import tensorflow as tf
        from placeviz import protos
    from tensorflow.core.framework import graph_pb2

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.get_variable("v", [2])
        meta = tf.compat.v1.train.export_meta_graph(graph=g)  # TF's own classes still work
    ours = protos.MetaGraphDef.FromString(meta.SerializeToString())
    assert ours.DESCRIPTOR is not meta.DESCRIPTOR
    assert ours.DESCRIPTOR.full_name == meta.DESCRIPTOR.full_name == "tensorflow.MetaGraphDef"
    back = graph_pb2.GraphDef.FromString(ours.graph_def.SerializeToString())
    with tf.Graph().as_default():
        tf.graph_util.import_graph_def(back, name="")
    print("POOLS_OK", sorted(n.name for n in ours.graph_def.node if n.op in ("VarHandleOp", "VariableV2")))
''')


@pytest.mark.tf
@pytest.mark.parametrize("order", ["placeviz-first", "tensorflow-first"])
def test_placeviz_and_tf_protos_share_a_process_in_either_order(order):
    pytest.importorskip("tensorflow")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", POOLS_IN_ONE_PROCESS, order], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "POOLS_OK ['v']" in proc.stdout


def test_text_any_resolves_without_tensorflow():
    """An expanded ``Any`` in text names a TF type: placeviz's pool has it, with no TF imported."""
    code = textwrap.dedent('''
        import sys
        from placeviz import protos
        meta = protos.parse_text(
            'meta_info_def { any_info { [type.googleapis.com/tensorflow.VariableDef] { variable_name: "w:0" } } }',
            protos.MetaGraphDef())
        var = protos.VariableDef()
        assert meta.meta_info_def.any_info.Unpack(var) and var.variable_name == "w:0"
        assert not [m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tensorboard")]
        print("ANY_OK")
    ''')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "ANY_OK" in proc.stdout

