"""TF's own test scenarios, re-created and checked against TF itself.

* ``device_setter_test.py`` (docs/tf-behaviours.md): each scenario is built twice with TF's real API,
  without and with ``replica_device_setter``; placeviz's setter replay of the first must equal the
  second on every node, and the devices TF's test expects are asserted too.
* ``placer_test.cc`` scenarios that make sense on CPUs (docs/tf-behaviours.md): graphs with three
  CPUs on one task are placed by placeviz and by TF's runtime (local cluster, Grappler off); the
  devices, or the failure, must be the same.
"""

from __future__ import annotations

import contextlib

import pytest
from test_placement_fidelity import assert_setter_agrees

from placeviz.devices import ClusterSpec, DeviceSet
from placeviz.io import model_from_proto
from placeviz.placement.placer import PlacementError, PlacerConfig, place
from placeviz.placement.setter import SetterConfig

pytestmark = pytest.mark.tf

CLUSTER = {"ps": ["ps0:2222", "ps1:2222"], "worker": ["worker0:2222", "worker1:2222", "worker2:2222"]}


@pytest.fixture(scope="module")
def tf():
    import tensorflow as tf

    return tf


def _both(tf, body, setter_kwargs):
    """Build ``body()`` with and without the setter; return (unplaced, placed) placeviz graphs."""
    graphs = []
    for with_setter in (False, True):
        g = tf.Graph()
        with g.as_default():
            scope = (tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(**setter_kwargs))
                     if with_setter else contextlib.nullcontext())
            with scope:
                body(tf)
        graphs.append(model_from_proto("tf", "builder", g.as_graph_def()).graph)
    return graphs


def _config(**kw) -> SetterConfig:
    cluster = kw.pop("cluster", None)
    return SetterConfig(cluster=ClusterSpec.from_dict(cluster) if cluster else None, **kw)


def _check(tf, name, body, setter_kwargs, config, expected):
    unplaced, placed = _both(tf, body, setter_kwargs)
    assert_setter_agrees(name, unplaced, placed, config, "device_setter_test")
    for node, device in expected.items():
        assert placed.node(node).device == device, node


def test_cpu_override(tf):
    def body(tf):
        with tf.compat.v1.device("/cpu:0"):
            v = tf.compat.v1.Variable([1, 2], name="v", use_resource=False)
        w = tf.compat.v1.Variable([2, 1], name="w", use_resource=False)
        with tf.compat.v1.device("/cpu:0"):
            tf.add(v, w, name="a")

    _check(tf, "cpu_override", body, dict(cluster=CLUSTER), _config(cluster=CLUSTER),
           {"v": "/job:ps/task:0/device:CPU:0", "v/initial_value": "/job:worker/device:CPU:0",
            "w": "/job:ps/task:1", "a": "/job:worker/device:CPU:0"})


def test_resource_variable(tf):
    def body(tf):
        tf.compat.v1.Variable([1, 2], name="v", use_resource=True)

    _check(tf, "resource", body, dict(cluster=CLUSTER), _config(cluster=CLUSTER), {"v": "/job:ps/task:0"})


def _v_w_sum(tf):
    v = tf.compat.v1.Variable([1, 2], name="v", use_resource=False)
    w = tf.compat.v1.Variable([2, 1], name="w", use_resource=False)
    tf.add(v, w, name="sum")


def test_two_tasks_with_cluster_spec_class_dict_and_cluster_def(tf):
    expected = {"v": "/job:ps/task:0", "w": "/job:ps/task:1", "sum": "/job:worker"}
    for cluster in (tf.train.ClusterSpec(CLUSTER), CLUSTER, tf.train.ClusterSpec(CLUSTER).as_cluster_def()):
        _check(tf, "cluster", _v_w_sum, dict(cluster=cluster), _config(cluster=CLUSTER), expected)


def test_pin_variable_to_job(tf):
    def body(tf):
        v = tf.compat.v1.Variable([1, 2], name="v", use_resource=False)
        with tf.compat.v1.device("/job:moon"):
            w = tf.compat.v1.Variable([2, 1], name="w", use_resource=False)
            with tf.compat.v1.device("/job:ps"):  # explicit ps job: the strategy still picks the task
                x = tf.compat.v1.Variable([0, 1], name="x", use_resource=False)
        tf.add_n([v, w, x], name="sum")

    _check(tf, "pin_to_job", body, dict(cluster=CLUSTER), _config(cluster=CLUSTER),
           {"v": "/job:ps/task:0", "w": "/job:moon", "x": "/job:ps/task:1", "sum": "/job:worker"})


def test_use_cpu_for_ps(tf):
    def body(tf):
        v = tf.compat.v1.Variable([1, 2], name="v", use_resource=False)
        with tf.compat.v1.device("/job:moon"):
            w = tf.compat.v1.Variable([2, 1], name="w", use_resource=False)
        tf.add(v, w, name="sum")

    _check(tf, "cpu_for_ps", body, dict(ps_tasks=1, ps_device="/cpu:0"), _config(ps_tasks=1, ps_device="/cpu:0"),
           {"v": "/device:CPU:0", "w": "/job:moon/device:CPU:0", "sum": "/job:worker"})


def test_no_merging(tf):
    def body(tf):
        v = tf.compat.v1.Variable([1, 2], name="v", use_resource=False)
        with tf.compat.v1.device("/job:ps"):
            w = tf.compat.v1.Variable([2, 1], name="w", use_resource=False)
        tf.add(v, w, name="sum")

    _check(tf, "no_merging", body, dict(cluster=CLUSTER, merge_devices=False),
           _config(cluster=CLUSTER, merge_devices=False),
           {"v": "/job:ps/task:0", "w": "/job:ps", "sum": "/job:worker"})


def test_other_jobs_and_cpu_constraint(tf):
    cluster = {"sun": ["sun0:2222", "sun1:2222", "sun2:2222"], "moon": ["moon0:2222", "moon1:2222"]}
    _check(tf, "with_device", _v_w_sum, dict(cluster=cluster, ps_device="/job:moon", worker_device="/job:sun"),
           _config(cluster=cluster, ps_device="/job:moon", worker_device="/job:sun"),
           {"v": "/job:moon/task:0", "w": "/job:moon/task:1", "sum": "/job:sun"})
    _check(tf, "cpu_constraint", _v_w_sum,
           dict(cluster=cluster, ps_device="/job:moon/cpu:0", worker_device="/job:sun"),
           _config(cluster=cluster, ps_device="/job:moon/cpu:0", worker_device="/job:sun"),
           {"v": "/job:moon/task:0/device:CPU:0", "w": "/job:moon/task:1/device:CPU:0", "sum": "/job:sun"})


def test_setter_returns_none_without_ps_tasks(tf):
    """ps_tasks=0: replica_device_setter returns None and device(None) hides every scope."""
    def body(tf):
        with tf.compat.v1.device("/job:outer/task:7"), tf.compat.v1.device(
                tf.compat.v1.train.replica_device_setter(ps_tasks=0)):
            tf.compat.v1.Variable(1.0, name="v", use_resource=False)

    g = tf.Graph()
    with g.as_default():
        body(tf)
    assert all(not n.device for n in g.as_graph_def().node)
    from placeviz.placement.setter import run_setter

    graph = model_from_proto("tf", "builder", g.as_graph_def()).graph
    assert set(run_setter(graph, SetterConfig(ps_tasks=0)).graph.devices) == {""}


# ----------------------------------------------------------------------------------------- placer
DEV = "/job:worker/replica:0/task:0/device:CPU:{}"


def _graph_def(tf, build):
    """Build with TF, then patch devices / _class into the GraphDef as placer_test.cc's hand-built graphs."""
    g = tf.Graph()
    with g.as_default():
        patches = build(tf)
    gd = model_from_proto("tf", "builder", g.as_graph_def()).graph_def
    for node in gd.node:
        patch = patches.get(node.name, {})
        if "device" in patch:
            node.device = patch["device"]
        if "class" in patch:
            node.attr["_class"].list.s[:] = [c.encode() for c in patch["class"]]
    return gd


def _compare(gd, soft: bool):
    from placeviz.verify.runtime_truth import all_sinks, run_in_subprocess

    # One run makes the session place the whole graph (TF's placer log then covers every node).
    truth = run_in_subprocess(gd.SerializeToString(), cluster={"worker": 1}, cpus_per_task=3,
                              targets=all_sinks(gd)[:1], allow_soft_placement=soft, timeout_s=180)
    graph = model_from_proto("scenario", "builder", gd).graph
    devices = DeviceSet(ClusterSpec.from_dict({"worker": ["w:1"]}), cpus_per_task=3)
    try:
        ours = place(graph, devices, PlacerConfig(allow_soft_placement=soft)).devices
    except PlacementError as e:
        assert truth.error is not None, f"placeviz failed but TF placed the graph: {e}"
        return str(e), truth
    assert truth.error is None, f"TF failed but placeviz placed the graph: {truth.error}"
    ours_map = dict(zip(graph.names, ours, strict=True))
    wrong = {n: (ours_map[n], d) for n, d in truth.placer_devices.items() if ours_map[n] != d}
    assert not wrong
    assert set(truth.placer_devices) == set(ours_map)
    return ours_map, truth


def _var(tf, name, shape=(2,)):
    return tf.raw_ops.VariableV2(shape=shape, dtype=tf.float32, name=name)


def test_placer_scenarios_that_place(tf):
    def build(tf):
        v = _var(tf, "var")
        tf.raw_ops.Assign(ref=v, value=tf.ones([2]), name="assign")  # requested CPU:2, must follow var
        h = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[2], name="handle")
        tf.raw_ops.AssignVariableOp(resource=h, value=tf.ones([2]), name="assign_var")
        tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.float32, name="read_var")
        h2 = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[2], name="handle2")
        tf.raw_ops.IdentityN(input=[h, h2], name="identity_n")  # exempt from resource colocation
        a = tf.identity(tf.ones([2]), name="a")
        tf.identity(a, name="b")
        tf.identity(a, name="c")
        tf.identity(a, name="d")
        x = tf.identity(tf.ones([3, 3]), name="x")
        tf.raw_ops.Shape(input=tf.raw_ops.Relu(features=x, name="relu_on_1"), name="shape_of_1")
        k = tf.constant([1.0, 2.0], name="k_single")
        tf.add(k, k, name="add_on_2")
        k2 = tf.constant(7.0, shape=[40], name="k_two")  # 40 elements: not replicated
        tf.negative(k2, name="neg_on_1")
        tf.abs(k2, name="abs_on_2")
        for spec in ("/device:CPU:*", "/job:worker", "/replica:0/task:0/CPU:2", "/device:cpu:1", "CPU:2"):
            tf.identity(tf.ones([1]), name="spec_" + spec.replace("/", "_").replace(":", "_").replace("*", "any"))
        return {
            "var": {"device": DEV.format(0)}, "assign": {"device": DEV.format(2)},
            "handle": {"device": DEV.format(0)}, "assign_var": {"device": DEV.format(2)},
            "read_var": {"device": DEV.format(1)}, "handle2": {"device": DEV.format(1)},
            "b": {"device": DEV.format(2), "class": ["loc:@a"]}, "c": {"class": ["loc:@b"]},
            "d": {"class": ["loc:@c"]}, "relu_on_1": {"device": DEV.format(1)},
            "add_on_2": {"device": DEV.format(2)}, "neg_on_1": {"device": DEV.format(1)},
            "abs_on_2": {"device": DEV.format(2)},
            **{"spec_" + s.replace("/", "_").replace(":", "_").replace("*", "any"): {"device": s}
               for s in ("/device:CPU:*", "/job:worker", "/replica:0/task:0/CPU:2", "/device:cpu:1", "CPU:2")},
        }

    ours, _ = _compare(_graph_def(tf, build), soft=False)
    assert ours["assign"] == ours["assign_var"] == ours["read_var"] == DEV.format(0)
    # b asked for CPU:2 but names a colocation group: tf.import_graph_def drops its own device for a's
    # (none), so the whole chain lands on the first CPU (TF's C++ alone would keep CPU:2).
    assert ours["a"] == ours["b"] == ours["c"] == ours["d"] == DEV.format(0)
    assert ours["shape_of_1"] == DEV.format(1)  # metadata op follows its input
    assert ours["k_single"] == DEV.format(2)  # generator follows its only consumer
    assert ours["k_two"] == DEV.format(0)  # consumers on two devices: default device
    assert ours["spec__device_cpu_1"] == DEV.format(1)


@pytest.mark.parametrize("soft", [False, True])
def test_placer_conflicts(tf, soft):
    def class_conflict(tf):
        # c is colocated with a (CPU:0) and b (CPU:1); the importer gives c a's device first.
        tf.identity(tf.ones([1]), name="a")
        tf.identity(tf.ones([1]), name="b")
        tf.identity(tf.ones([1]), name="c")
        return {"a": {"device": DEV.format(0)}, "b": {"device": DEV.format(1)},
                "c": {"class": ["loc:@a", "loc:@b"]}}

    def missing_gpu(tf):
        tf.identity(tf.ones([1]), name="on_gpu")
        return {"on_gpu": {"device": "/device:GPU:0"}}

    def unknown_job(tf):
        tf.identity(tf.ones([1]), name="on_nojob")
        return {"on_nojob": {"device": "/job:nojob"}}

    def resource_conflict(tf):
        var = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[2], name="var")
        m = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[2], name="m")
        tf.raw_ops.AssignAddVariableOp(resource=var, value=tf.ones([2]), name="use_var")
        tf.raw_ops.ResourceApplyAdagrad(var=var, accum=m, lr=0.1, grad=tf.ones([2]), name="apply")
        return {"var": {"device": DEV.format(0)}, "m": {"device": DEV.format(1)}}

    expectations = {  # scenario -> does it fail with soft placement?
        class_conflict: False, missing_gpu: False, unknown_job: True, resource_conflict: True,
    }
    for build, fails_soft in expectations.items():
        result, truth = _compare(_graph_def(tf, build), soft=soft)
        failed = isinstance(result, str)
        assert failed == (not soft or fails_soft), (build.__name__, result, truth.error)
        if failed:
            key = {"class_conflict": "Cannot colocate nodes", "missing_gpu": "was explicitly assigned to",
                   "unknown_job": "was explicitly assigned to",
                   "resource_conflict": "incompatible resource devices"}[build.__name__]
            assert key in result and key in (truth.error_detail or truth.error), (result, truth.error)
