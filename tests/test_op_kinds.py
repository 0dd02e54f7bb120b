"""placeviz.op_kinds against TensorFlow itself: the op types TF's own API creates are the ones each set names.

Every set is checked by building what it describes with TF's real API (graph mode, no session) and
reading the op types TF wrote, so a set that forgets a member, or names an op TF does not create,
fails here rather than in a report.
"""

from __future__ import annotations

import pytest

from placeviz import op_kinds
from placeviz.ops import load_op_table

CONTRIB_ONLY = frozenset({"AutoReloadVariable"})
"""In ``STANDARD_PS_OPS`` but registered only by TF1's contrib, so absent from TF 2.x's registry."""


@pytest.fixture(scope="module")
def tf():
    import tensorflow as tf

    return tf


def _sets() -> dict[str, frozenset[str]]:
    return {name: value for name, value in vars(op_kinds).items()
            if name.isupper() and isinstance(value, frozenset)}


def test_every_op_kind_is_a_registered_op():
    """Each op type named in a set is one TF registers (per the shipped op table), contrib aside."""
    table = load_op_table()
    unknown = {name: sorted(ops - CONTRIB_ONLY - set(table.op_types())) for name, ops in _sets().items()}
    assert {name: ops for name, ops in unknown.items() if ops} == {}


@pytest.mark.tf
def test_variable_ops_are_the_variable_ps_ops_of_tf(tf):
    from tensorflow.python.training import device_setter

    ps_ops = set(device_setter.STANDARD_PS_OPS)
    assert op_kinds.VARIABLE_OPS <= ps_ops
    # Everything else the setter sends to a ps task is other state (tables, the resource
    # accumulator) or a resource placeviz does not name (boosted trees, decision trees).
    rest = ps_ops - op_kinds.VARIABLE_OPS
    assert {op for op in rest if "Variable" in op or op == "VarHandleOp"} == set()
    assert {op for op in rest if "HashTable" in op} <= op_kinds.TABLE_OPS
    assert "ResourceConditionalAccumulator" in rest & op_kinds.ACCUMULATOR_OPS


@pytest.mark.tf
def test_variables_and_their_reads_built_by_tf(tf):
    g = tf.Graph()
    with g.as_default():
        ref = tf.compat.v1.Variable(1.0, name="ref", use_resource=False)
        res = tf.compat.v1.get_variable("res", shape=(), use_resource=True)
        ref.assign(2.0)
        res.assign(2.0, read_value=False)
        res.assign_add(1.0, read_value=False)
        res.assign_sub(1.0, read_value=False)
        tf.identity(res.value(), name="use")
    nodes = {n.name: n.op for n in g.as_graph_def().node}
    assert nodes["ref"] in op_kinds.REF_VARIABLE_OPS and nodes["ref"] in op_kinds.VARIABLE_OPS
    assert nodes["res"] in op_kinds.RESOURCE_VARIABLE_OPS and nodes["res"] in op_kinds.VARIABLE_OPS
    assert op_kinds.REF_VARIABLE_OPS.isdisjoint(op_kinds.RESOURCE_VARIABLE_OPS)
    reads = {nodes["ref/read"], g.get_tensor_by_name("use:0").op.inputs[0].op.type}
    assert reads == op_kinds.VARIABLE_READ_OPS
    assert {op for op in nodes.values() if op.endswith("VariableOp") and op.startswith("Assign")} \
        == op_kinds.ASSIGN_VARIABLE_OPS


@pytest.mark.tf
def test_accumulators_and_queues_built_by_tf(tf):
    from tensorflow.python.ops import data_flow_ops

    g = tf.Graph()
    with g.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        dense = data_flow_ops.ConditionalAccumulator(tf.float32, shape=(), name="dense")
        sparse = data_flow_ops.SparseConditionalAccumulator(tf.float32, shape=(), name="sparse")
        dense.apply_grad(1.0, local_step=0)
        dense.take_grad(1)
        dense.set_global_step(step)
        sparse.apply_grad([0], [1.0], local_step=0)
        sparse.take_grad(1)
        sparse.set_global_step(step)
        fifo = data_flow_ops.FIFOQueue(-1, [tf.int64], shapes=[()], name="fifo")
        fifo.enqueue_many([[1, 2]])
        fifo.enqueue([3])
        fifo.dequeue()
        queues = [fifo,
                  data_flow_ops.PaddingFIFOQueue(2, [tf.float32], shapes=[()], name="padding"),
                  data_flow_ops.RandomShuffleQueue(2, 0, [tf.float32], name="shuffle"),
                  data_flow_ops.PriorityQueue(2, [tf.float32], shapes=[()], name="priority")]
    ops = {n.op for n in g.as_graph_def().node}
    assert {dense.accumulator_ref.op.type, sparse.accumulator_ref.op.type} <= op_kinds.ACCUMULATOR_OPS
    for wanted, kind in ((lambda op: "Accumulator" in op and "Apply" in op, op_kinds.ACCUMULATOR_APPLY_OPS),
                         (lambda op: "Accumulator" in op and "Take" in op, op_kinds.ACCUMULATOR_TAKE_OPS),
                         (lambda op: op.endswith("SetGlobalStep"), op_kinds.ACCUMULATOR_SET_STEP_OPS),
                         (lambda op: op.startswith("QueueEnqueueMany"), op_kinds.ENQUEUE_MANY_OPS),
                         (lambda op: op.startswith("QueueEnqueue"), op_kinds.ENQUEUE_OPS),
                         (lambda op: op.startswith("QueueDequeue"), op_kinds.DEQUEUE_OPS)):
        built = {op for op in ops if wanted(op)}
        assert built and built <= kind, (built, kind)
    assert fifo.queue_ref.op.type in op_kinds.FIFO_QUEUE_OPS
    assert len({q.queue_ref.op.type for q in queues}) == 4
    assert {q.queue_ref.op.type for q in queues} <= op_kinds.QUEUE_OPS
    assert op_kinds.FIFO_QUEUE_OPS <= op_kinds.QUEUE_OPS


@pytest.mark.tf
def test_forwarding_ops_and_placeholders(tf):
    """TF's OpDefs: a forwarding op's output 0 has its input's type (ref-ness included), so the
    variable behind it is the same; ``Merge`` takes N inputs of that type and outputs one."""
    from tensorflow.python.framework import op_def_registry

    for name in sorted(op_kinds.FORWARD_INPUT0_OPS | op_kinds.FORWARD_ANY_INPUT_OPS):
        op_def = op_def_registry.get(name)
        inp, out = op_def.input_arg[0], op_def.output_arg[0]
        assert (inp.type_attr, inp.is_ref) == (out.type_attr, out.is_ref), name
        assert bool(inp.number_attr) == (name in op_kinds.FORWARD_ANY_INPUT_OPS), name
    g = tf.Graph()
    with g.as_default():
        built = tf.compat.v1.placeholder(tf.float32).op.type
    # PlaceholderV2 is deprecated since GraphDef version 23 (TF refuses to build it) but older
    # graphs still hold it, so both count.
    assert built in op_kinds.PLACEHOLDER_OPS
    assert {name for name in op_kinds.PLACEHOLDER_OPS if op_def_registry.get(name).deprecation.version} \
        == op_kinds.PLACEHOLDER_OPS - {built}
