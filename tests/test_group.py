"""TF's ``control_flow_ops.group`` split (``placeviz.group.group_plan``) through both of its callers,
against TF's own build.

``group`` files its members by device; over several devices it makes one NoOp per device, devices
sorted, each under ``ops.device(dev)`` and named by the graph's ``unique_name("<group>/NoOp")``,
then the root in the caller's device context; ``ops.device("")`` (members without a device) is a
null merge, so that NoOp takes the caller's context. The cases: three devices, a lower-case name
taken before the group (``init/noop``), a member without a device, device scopes around the call
(nested, and one over a group on one device). The setter replay (``place --stage setter``) and
the SyncReplicas rewrite (``rewrite_sync``) must give TF's names, order, inputs and devices.
"""

from __future__ import annotations

import contextlib

import pytest
from conftest import build_setter_pair, run_cli

pytestmark = pytest.mark.tf

SETTER = """
    vs = [tf.compat.v1.get_variable(f"v{k}", [2], initializer=tf.compat.v1.zeros_initializer())
          for k in range(3)]
    inits = [v.initializer for v in vs]
    zeros = g.get_operation_by_name("v0/Initializer/zeros")  # built under device(None)
    tf.no_op(name="init/noop")                              # takes the key init/NoOp
    tf.group(*inits, name="init")                           # three ps tasks
    tf.group(inits[0], inits[1], zeros, name="with_none")   # a member without device
    with tf.compat.v1.device("/job:worker/task:1"):
        tf.group(inits[0], zeros, name="in_task")           # a device scope around
    with tf.compat.v1.device("/device:CPU:0"):
        tf.group(inits[1], inits[2], zeros, name="on_cpu")
        tf.group(inits[0], vs[0].op, name="one_cpu")        # one device, a scope around
        with tf.compat.v1.device("/job:worker/task:2"):
            tf.group(*inits, name="nested")
"""


def _nodes(path):
    from placeviz.io import load

    g = load(path).graph
    return [(name, device, sorted(g.names[s] for s, _slot in g.inputs_of(i)))
            for i, (name, device) in enumerate(zip(g.names, g.devices, strict=True))]


def test_setter_replays_group_as_tf_builds_it(tmp_path, capsys, kernel_mode):
    """``place --stage setter`` over the unplaced build: node for node TF's build under
    ``replica_device_setter(ps_tasks=3)`` (names, order, devices, inputs), with and without the C
    kernels. The NoOp of the device-less member takes the context around the call, and a NoOp under
    ``ops.device(dev)`` merges ``dev`` over that context (``/job:ps/task:1/device:CPU:0``)."""
    build_setter_pair(tmp_path, SETTER, 3)
    out = tmp_path / "out.pb"
    code, _, err = run_cli(["place", tmp_path / "unplaced.pb", "--ps-tasks", "3", "--stage", "setter", "-o", out],
                           capsys)
    assert code == 0, err
    theirs = _nodes(tmp_path / "placed.pb")
    devices = dict((name, device) for name, device, _ in theirs)
    # the cases are the ones meant
    assert [devices[f"init/NoOp_{k}"] for k in (1, 2, 3)] == [f"/job:ps/task:{k}" for k in range(3)]
    assert devices["in_task/NoOp"] == devices["in_task"] == "/job:worker/task:1"
    assert devices["on_cpu/NoOp_1"] == "/job:ps/task:1/device:CPU:0"
    assert devices["one_cpu"] == "/job:ps/task:0/device:CPU:0"
    assert _nodes(out) == theirs


def _sync_model(sync: bool, placed: bool, context: str):
    """A train op grouped with an op pinned to ``/job:ps/task:1`` (``tf.group(train, side)``)
    under the device scope ``context``, after a NoOp ``train_group/noop`` (which takes the key of
    ``train_group/NoOp``); optionally under ``replica_device_setter(ps_tasks=2)``. In sync mode the
    group's members change (the train op replaces the global step's increment), so the rewrite
    makes the group again (``regroup_changed``); the chief's init group is split over the
    accumulators' devices when placed."""
    import tensorflow as tf

    from placeviz.protos import MetaGraphDef

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        setter = (v1.device(v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0"))
                  if placed else contextlib.nullcontext())
        with setter:
            global_step = v1.train.get_or_create_global_step()
            w = v1.get_variable("w", [3, 2])
            b = v1.get_variable("b", [2], initializer=v1.zeros_initializer())
            loss = tf.reduce_sum(tf.matmul(tf.ones([1, 3]), w) + b)
            opt = v1.train.GradientDescentOptimizer(0.1)
            if sync:
                opt = v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=2, total_num_replicas=3)
            train = opt.apply_gradients(opt.compute_gradients(loss), global_step=global_step)
            with v1.device("/job:ps/task:1"):
                side = v1.no_op(name="side")
            v1.no_op(name="train_group/noop")
            with v1.device(context):
                tf.group(train, side, name="train_group")
            if sync:  # the chief's hook, right after the train op (placeviz's order)
                opt.get_chief_queue_runner()
                opt.get_init_tokens_op()
        meta = v1.train.export_meta_graph(graph=graph, clear_devices=False)
    return MetaGraphDef.FromString(meta.SerializeToString())


@pytest.mark.parametrize("context", ["", "/device:CPU:0", "/job:worker/task:1"], ids=["none", "cpu", "task1"])
@pytest.mark.parametrize("placed", [False, True], ids=["unplaced", "placed"])
def test_sync_rewrite_regroups_as_tf_builds_it(placed, context):
    """``rewrite_sync`` of the plain program: node for node TF's SyncReplicas build (names, order,
    inputs, devices, attrs): the group's NoOps named ``train_group/NoOp_1``, ``_2`` past the
    lower-case ``train_group/noop``, the device-less train op's NoOp in the context around the
    call (unplaced), the pinned op's NoOp with the context merged under its device."""
    pytest.importorskip("tensorflow")
    from placeviz.sync.rewrite import rewrite_sync

    plain, tf_sync = _sync_model(False, placed, context), _sync_model(True, placed, context)
    res = rewrite_sync(plain, 2, 3)
    ours = [(n.name, n.op, list(n.input), n.device, dict(n.attr)) for n in res.graph_def.node]
    theirs = [(n.name, n.op, list(n.input), n.device, dict(n.attr)) for n in tf_sync.graph_def.node]
    kids = {t[0]: t[3] for t in theirs if t[0].startswith("train_group/")}
    assert set(kids) == {"train_group/noop", "train_group/NoOp_1", "train_group/NoOp_2"}  # the case meant
    if placed:
        assert any(t[0].endswith("group_deps/NoOp_1") for t in theirs)  # the chief's init group split
    assert [o[0] for o in ours] == [t[0] for t in theirs]
    bad = [(t[0], o) for t, o in zip(theirs, ours, strict=True) if t != o]
    assert not bad, bad[:3]



def test_noop_namer_reads_names_as_one_text_or_one_by_one():
    """:class:`placeviz.group.NoopNamer` reads the names before a root as lines of one text, and
    name by name when a name holds a newline (the lines would be out of step with the nodes): the
    two give the same names, asked root by root in creation order (TF's cases, checked against TF
    above: a lower-case name, a scope, a name made after the root)."""
    from placeviz.group import NoopNamer

    base = ["a", "init/noop", "grp/NoOp_1/c", "b", "init", "grp", "x", "init/NoOp_2", "grp/NoOp"]
    answers = []
    for first in ("plain", "new\nline"):
        names = [first, *base]
        index = {name: k for k, name in enumerate(names)}
        namer = NoopNamer(names, index.get, {index["grp/NoOp"]})  # grp's old NoOp: dropped
        got = [namer.names(index[root], f"{root}/NoOp", 3) for root in ("init", "grp")]
        answers.append((got, namer.clashes, namer._by_name))
    (one_text, clashes, by_name), (one_by_one, clashes2, by_name2) = answers
    assert (by_name, by_name2) == (False, True)  # both ways were taken
    assert one_text == one_by_one and clashes == clashes2 == ["init/NoOp_2"]
