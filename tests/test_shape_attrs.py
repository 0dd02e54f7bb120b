"""The attrs a transfer's static shape is read from (``placeviz.partition.shapes``): the batched C
reader (``Graph.wire_attr_values`` with paths, ``placeviz/_wire.c``) and its fallback on NodeDefs
against TensorFlow and protobuf.

Every node of graphs TensorFlow built (with and without ``_output_shapes``: unknown dims, unknown
rank, Const scalars and a tensor with content, placeholders with ``shape`` attrs, variables of both
kinds, a while loop), read from the file and through a derived graph's remapped NodeDefs (one node
without bytes), kernels on and off, must give what TF says of the op and what the parsed NodeDef
holds. Hand-made attr values TF never writes (oneof fields twice, merged messages) must give the
parse's answer too: the C reader declines them, and the NodeDefs answer. Transfers of a partition
of the TF graph carry shapes TF agrees with.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from array import array
from pathlib import Path

import pytest
from conftest import pb_field as _field

from placeviz import graph as graph_module
from placeviz.graph import Graph, RemappedNodeDefs
from placeviz.io import load
from placeviz.partition import partition
from placeviz.partition.shapes import _NAMES, _PATHS, ABSENT, ShapeAttrReader, ShapeAttrs
from placeviz.placement import PlacementOptions, place_graph
from placeviz.placement.setter import SetterConfig
from placeviz.protos import AttrValue, GraphDef, NodeDef

WRITE_GRAPHS = textwrap.dedent('''
    import json
    import os
    import sys

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.disable_control_flow_v2()
    out = sys.argv[1]
    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, [None, 3], name="x")  # an unknown dim
        anything = v1.placeholder(tf.float32, None, name="anything")  # unknown rank
        n = v1.placeholder(tf.int32, [], name="n")  # a scalar
        d = v1.placeholder_with_default(tf.ones([2, 3]), [None, 3], name="d")
        c = tf.constant(1.5, name="c_scalar") + tf.constant(np.zeros([64, 64], np.float32), name="c_big")[0, 0]
        tf.constant(["a", "b"], name="c_strings")
        w = v1.get_variable("w", [3, 2], use_resource=False)
        r = v1.get_variable("r", [2], use_resource=True)
        y = tf.matmul(x, w) + r
        z = tf.identity(anything * c, name="z")  # unknown rank
        u = tf.reshape(d, tf.stack([n, -1]), name="u")  # [?, ?]
        i = v1.while_loop(lambda k: k < 3, lambda k: k + 1, [tf.constant(0)])
        loss = tf.reduce_sum(y) + tf.cast(i, tf.float32) + tf.reduce_sum(z) + tf.reduce_sum(u)
        v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss, name="train")


    def dims(shape):
        shape = tf.TensorShape(shape)
        return None if shape.rank is None else shape.as_list()


    truth = {}
    for op in g.get_operations():
        attrs = op.node_def.attr
        truth[op.name] = {
            "outputs": [dims(t.shape) for t in op.outputs],
            "value": dims(op.get_attr("value").tensor_shape) if "value" in attrs else None,
            "shape": dims(op.get_attr("shape")) if "shape" in attrs else None,
            "has": sorted(k for k in ("value", "shape") if k in attrs),
        }
    with open(os.path.join(out, "shapes.pb"), "wb") as f:
        f.write(g.as_graph_def(add_shapes=True).SerializeToString())
    with open(os.path.join(out, "plain.pb"), "wb") as f:
        f.write(g.as_graph_def().SerializeToString())
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(truth, f)
''')


@pytest.fixture(scope="module")
def tf_shapes(tmp_path_factory) -> tuple[Path, dict]:
    """Two GraphDefs TF wrote of one graph (``shapes.pb`` with ``_output_shapes``, ``plain.pb``
    without) and TF's own view of each op: its outputs' shapes and its ``value``/``shape`` attrs."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    out = tmp_path_factory.mktemp("tf_shapes")
    proc = subprocess.run([sys.executable, "-c", WRITE_GRAPHS, str(out)], capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads((out / "truth.json").read_text())


def parsed_row(node: NodeDef) -> ShapeAttrs:
    """What a parsed NodeDef says (the reference, written out here on its own)."""
    attr = node.attr

    def dims(proto):
        return None if proto.unknown_rank else [d.size if d.size >= 0 else None for d in proto.dim]

    return ShapeAttrs(
        tuple(dims(s) for s in attr["_output_shapes"].list.shape) if "_output_shapes" in attr else None,
        dims(attr["value"].tensor.tensor_shape) if "value" in attr else ABSENT,
        dims(attr["shape"].shape) if "shape" in attr else ABSENT,
    )


def tf_row(facts: dict, with_shapes: bool) -> ShapeAttrs:
    """What TF says of an op, as a row: ``_output_shapes`` are its outputs' shapes (an op without
    outputs has none: ``Graph._as_graph_def(add_shapes=True)``, ``tensorflow/python/framework/ops.py``)."""
    return ShapeAttrs(
        tuple(facts["outputs"]) if with_shapes and facts["outputs"] else None,
        facts["value"] if "value" in facts["has"] else ABSENT,
        facts["shape"] if "shape" in facts["has"] else ABSENT,
    )


def read_rows(graph: Graph, ids: list[int]) -> tuple[list[ShapeAttrs], list[ShapeAttrs]]:
    """The rows of ``ids`` read in one batch, and one by one with another reader."""
    batch = ShapeAttrReader(graph)
    batch.prefetch(ids)
    single = ShapeAttrReader(graph)
    return [batch[i] for i in ids], [single[i] for i in ids]


@pytest.mark.parametrize("name", ["shapes.pb", "plain.pb"])
def test_every_node_of_tf_graphs(tf_shapes, kernel_mode, name):
    folder, truth = tf_shapes
    data = (folder / name).read_bytes()
    graph = load(folder / name).graph
    nodes = GraphDef.FromString(data).node
    ids = list(range(len(graph)))[::-1]  # any order
    if kernel_mode == "c":  # the C reader answers for these graphs: the rows below are its
        assert graph.wire_attr_values(ids, _NAMES, _PATHS) is not None
    batch, single = read_rows(graph, ids)
    assert batch == single
    seen = {"_output_shapes unknown rank": 0, "unknown dim": 0, "Const scalar": 0, "Placeholder shape": 0}
    for i, row in zip(ids, batch, strict=True):
        assert row == parsed_row(nodes[i]), graph.names[i]
        assert row == tf_row(truth[graph.names[i]], name == "shapes.pb"), graph.names[i]
        seen["_output_shapes unknown rank"] += None in (row.output_shapes or ())
        seen["unknown dim"] += any(isinstance(s, list) and None in s for s in (*(row.output_shapes or ()), row.shape))
        seen["Const scalar"] += row.value == []
        seen["Placeholder shape"] += graph.ops[i] == "Placeholder" and row.shape is not ABSENT
    if name == "shapes.pb":
        assert all(seen.values()), seen


def test_a_derived_graph_reads_its_source_bytes(tf_shapes, kernel_mode):
    """A derived graph's NodeDefs are its source's, remapped (``RemappedNodeDefs``); a node it
    added has no bytes: its row comes from its NodeDef."""
    folder, truth = tf_shapes
    source = load(folder / "shapes.pb").graph
    n = len(source)
    added = NodeDef(name="added", op="Placeholder")
    added.attr["shape"].shape.dim.add(size=7)
    ids = array("q", list(range(n))[::-1])
    ids.insert(5, -1)
    names = [source.names[j] if j >= 0 else "added" for j in ids]
    graph = Graph.derived(names=names, ops=[source.ops[j] if j >= 0 else "Placeholder" for j in ids],
                          devices=[""] * len(ids), in_start=array("i", [0] * (len(ids) + 1)), in_src=array("i"),
                          in_slot=array("i"), attr_nodes=RemappedNodeDefs(source.attr_nodes, [added], ids, [5]),
                          make_graph_def=GraphDef)
    every = list(range(len(graph)))
    raw = graph.wire_attr_values(every, _NAMES, _PATHS)
    if kernel_mode == "c":
        assert raw is not None and [k for k, row in enumerate(raw) if row is None] == [5]
    batch, single = read_rows(graph, every)
    assert batch == single
    for i, row in zip(every, batch, strict=True):
        expected = ShapeAttrs(None, ABSENT, [7]) if i == 5 else tf_row(truth[names[i]], True)
        assert row == expected == parsed_row(graph.node_def(i)), names[i]


ROUND_ROBIN = ["/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0",
               "/job:worker/replica:0/task:0/device:CPU:0"]


def test_partition_transfers_carry_the_shapes_tf_gives(tf_shapes, kernel_mode):
    """Each transfer's shape (placeviz's estimate, ``_GraphPartition.shape``) agrees with TF's
    static shape of the tensor it sends: the same rank and no dim that differs where both know
    it; with ``_output_shapes`` it knows at least what TF knows (a ``PlaceholderWithDefault`` of
    unknown dims takes its default's: more than TF). Partitions of the graph placed as
    ``--ps-tasks 2`` places it (a derived graph), and with its nodes dealt over three devices in
    turn (transfers out of Consts, placeholders, variables and a while loop)."""
    folder, truth = tf_shapes
    for name in ("shapes.pb", "plain.pb"):
        graph = load(folder / name).graph
        setter = SetterConfig(ps_tasks=2, worker_device="/job:worker/task:0")
        placed = place_graph(graph, PlacementOptions(setter=setter))
        transfers = partition(placed.graph, placed.placement.devices, level="task").transfers
        dealt = [ROUND_ROBIN[i % len(ROUND_ROBIN)] for i in range(len(graph))]
        transfers += partition(graph, dealt, level="device").transfers
        compared = 0
        for t in transfers:
            if t["slot"] == "control" or t["src"] not in truth:
                continue
            ours, theirs = t["shape"], truth[t["src"]]["outputs"][t["slot"]]
            if name == "shapes.pb" and theirs is not None:
                assert ours is not None and len(ours) == len(theirs), t
                assert all(b is None or a == b for a, b in zip(ours, theirs, strict=True)), t
            elif ours is not None and theirs is not None:
                assert len(ours) == len(theirs), t
                assert all(a is None or b is None or a == b for a, b in zip(ours, theirs, strict=True)), t
            compared += ours is not None
        assert compared > 20, name


# ------------------------------------------------------------------------------------ wire forms
def _node(name: str, op: str, attrs: list[tuple[str, bytes]]) -> bytes:
    entries = b"".join(_field(5, _field(1, key.encode()) + _field(2, value)) for key, value in attrs)
    return _field(1, _field(1, name.encode()) + _field(2, op.encode()) + entries)


DIM4 = _field(2, b"\x08\x04")  # TensorShapeProto.dim {size: 4}
SHAPE4 = _field(7, DIM4)  # AttrValue{shape: [4]}
TENSOR4 = _field(8, b"\x08\x01" + _field(2, DIM4))  # AttrValue{tensor: {dtype: DT_FLOAT, tensor_shape: [4]}}
UNKNOWN_RANK = _field(7, b"\x18\x01")  # AttrValue{shape: {unknown_rank: true}}
PLAIN = ("p", "Placeholder", [("shape", SHAPE4), ("_output_shapes", _field(1, _field(7, DIM4)))])


@pytest.mark.parametrize("attrs, declines", [
    # Forms the C reader reads: a list with another item kind, a value that is not a tensor,
    # an empty AttrValue, an unknown rank, an entry without a value, a tensor without a shape.
    ([("_output_shapes", _field(1, _field(2, b"x") + _field(7, DIM4) + _field(7, b"")))], False),
    ([("value", b"\x18\x03")], False),
    ([("value", b""), ("shape", b"")], False),
    ([("shape", UNKNOWN_RANK), ("_output_shapes", _field(1, _field(7, b"\x18\x01")))], False),
    ([("value", _field(8, b"\x08\x01"))], False),
    ([("value", TENSOR4), ("shape", _field(1, b""))], False),
    # Forms only a full parse reads: the AttrValue's oneof set twice (the last wins), a message
    # field twice (the two merge), an unknown field beside the value.
    ([("value", SHAPE4 + TENSOR4)], True),
    ([("value", TENSOR4 + SHAPE4)], True),
    ([("value", TENSOR4 + TENSOR4)], True),
    ([("value", _field(8, _field(2, DIM4) + _field(2, DIM4)))], True),
    ([("shape", SHAPE4 + SHAPE4)], True),
    ([("_output_shapes", _field(1, _field(7, DIM4)) + _field(1, _field(7, b"")))], True),
    ([("shape", SHAPE4 + _field(99, b"x"))], True),
])
def test_attr_value_forms(attrs, declines):
    data = _node(*PLAIN) + _node("a", "Const", attrs)
    graph_def = GraphDef.FromString(data)  # what io.load has done before building the IR
    graph = Graph(graph_def, wire=data)
    if graph_module._wire is not None:
        assert (graph.wire_attr_values([0, 1], _NAMES, _PATHS) is None) == declines
    batch, single = read_rows(graph, [0, 1])
    assert batch == single == [parsed_row(node) for node in graph_def.node]


def test_attr_value_fields_are_one_oneof():
    """What lets the C reader read a path inside an AttrValue with one field only: every field of
    AttrValue is in its oneof ``value`` (``tensorflow/core/framework/attr_value.proto``)."""
    assert {f.containing_oneof.name if f.containing_oneof else None for f in AttrValue.DESCRIPTOR.fields} == {"value"}
