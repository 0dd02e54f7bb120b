"""The setter options a GraphDef cannot answer for itself, through the CLI, against TF's own build.

``--setter-scope-end``: a Saver built after the ``with tf.device(replica_device_setter(...))``
block keeps its own devices in TF. ``--plain-noop``: ``tf.no_op`` under ``control_dependencies``
is not split per device, while ``tf.group`` is. Each case builds the program twice with TF's real
API (without and with the setter) and compares every node's device with ``place --stage setter``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import build_setter_pair, run_cli

pytestmark = pytest.mark.tf

BUILD = """
    a = tf.compat.v1.get_variable("a", [2], initializer=tf.compat.v1.zeros_initializer())
    b = tf.compat.v1.get_variable("b", [2], initializer=tf.compat.v1.ones_initializer())
    loss = tf.reduce_sum(a * b)
    step = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.control_dependencies([step]):
        tf.no_op(name="barrier")           # a plain no_op over one update
    with tf.control_dependencies([a.assign_add([1.0, 1.0]).op, b.assign_add([1.0, 1.0]).op]):
        tf.no_op(name="both_updated")      # a plain no_op over two PS tasks
    tf.group(a.initializer, b.initializer, name="init_ab")  # a group over two PS tasks
"""
AFTER_BUILD = "tf.compat.v1.train.Saver()  # after the block: its ops keep their own devices"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_setter_pair(tmp_path_factory.mktemp("setter_options"), BUILD, 2, after=AFTER_BUILD)


def _devices(path):
    from placeviz.io import load

    g = load(path).graph
    return dict(zip(g.names, g.devices, strict=True))


def test_scope_end_and_plain_noop_match_tf(built, tmp_path, capsys):
    theirs = _devices(built / "placed.pb")
    out = tmp_path / "setter.pb"
    args = ["place", built / "unplaced.pb", "--ps-tasks", "2", "--stage", "setter", "-o", out]
    # without the options: the replay assumes the Saver was inside and both NoOps were groups
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    assert "--setter-scope-end save/filename/input" in err and "both_updated" in err
    ours = _devices(out)
    assert ours != theirs
    code, _, err = run_cli(args + ["--setter-scope-end", "save/filename/input", "--plain-noop", "both_updated"],
                           capsys)
    assert code == 0, err
    ours = _devices(out)
    assert set(ours) == set(theirs)
    wrong = {n: (ours[n], theirs[n]) for n in theirs if ours[n] != theirs[n]}
    assert not wrong, wrong
    assert theirs["save/SaveV2"] == "" and theirs["init_ab/NoOp"] != theirs["init_ab/NoOp_1"]


def test_unknown_scope_end_is_one_line(built, tmp_path, capsys):
    code, _, err = run_cli(["place", built / "unplaced.pb", "--ps-tasks", "2", "--stage", "setter",
                            "--setter-scope-end", "no/such/node", "-o", tmp_path / "x.pb"], capsys)
    assert code == 2 and err.count("\n") == 1 and "no/such/node" in err
    assert not (tmp_path / "x.pb").exists()


@pytest.mark.parametrize("command", ["place", "partition"])
def test_worker_device_template_is_the_chiefs_task(built, tmp_path, capsys, command):
    """``--worker-device /job:worker/task:%d`` (the program's ``"/job:worker/task:%d" % task_index``)
    on a single graph: the chief's, task 0, as analyze/lint/verify read MODEL."""
    outs = []
    for device in ("/job:worker/task:%d", "/job:worker/task:0"):
        out = tmp_path / f"{command}-{device.rsplit(':', 1)[-1].replace('%', 'pct')}"
        code, _, err = run_cli([command, built / "unplaced.pb", "--ps-tasks", "2", "--worker-device", device,
                                "-o", out if command == "partition" else out.with_suffix(".pb")], capsys)
        assert code == 0, err
        outs.append(out if command == "partition" else out.with_suffix(".pb"))
    if command == "place":
        assert outs[0].read_bytes() == outs[1].read_bytes()
    else:
        assert sorted(p.name for p in outs[0].iterdir()) == sorted(p.name for p in outs[1].iterdir())
        assert all((outs[0] / p.name).read_bytes() == p.read_bytes() for p in outs[1].iterdir())


REGROUP = textwrap.dedent("""
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    tf.compat.v1.disable_v2_behavior()
    for ps in (2, 1):
        g = tf.Graph()
        with g.as_default():
            with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=ps)):
                a = tf.compat.v1.get_variable("a", [2], initializer=tf.compat.v1.zeros_initializer())
                b = tf.compat.v1.get_variable("b", [2], initializer=tf.compat.v1.ones_initializer())
                tf.group(a.initializer, b.initializer, name="init_ab")
        gd = g.as_graph_def()
        if ps == 2:  # exported with its devices cleared: the per-device NoOps stay
            for n in gd.node:
                n.device = ""
        with open(os.path.join(sys.argv[1], f"ps{ps}.pb"), "wb") as f:
            f.write(gd.SerializeToString())
""")


def test_group_built_for_two_ps_tasks_replayed_on_one_removes_its_noops(tmp_path, capsys):
    """A graph exported from a 2-PS build carries ``tf.group``'s per-device NoOps; replayed with
    one PS task the group has one device, so TF builds a single NoOp: the placed graph has fewer
    nodes than the loaded one, node for node TF's own 1-PS build, and the note says "removed"."""
    pytest.importorskip("tensorflow")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-c", REGROUP, str(tmp_path)], check=True, env=env, capture_output=True,
                   timeout=300)
    out = tmp_path / "out.pb"
    code, _, err = run_cli(["place", tmp_path / "ps2.pb", "--ps-tasks", "1", "--stage", "setter", "-o", out], capsys)
    assert code == 0, err
    assert _devices(out) == _devices(tmp_path / "ps1.pb")
    loaded, placed = len(_devices(tmp_path / "ps2.pb")), len(_devices(out))
    assert placed < loaded
    code, out_json, err = run_cli(["analyze", tmp_path / "ps2.pb", "--ps-tasks", "1", "--format", "json"], capsys)
    assert code == 0, err
    assert f"the setter replay removed {loaded - placed:,} node(s)" in out_json
    assert "added -" not in out_json


NAMES = """
    a = tf.compat.v1.get_variable("a", [2], initializer=tf.compat.v1.zeros_initializer())
    b = tf.compat.v1.get_variable("b", [2], initializer=tf.compat.v1.ones_initializer())
    tf.no_op(name="init/noop")                   # lower case: takes the key init/NoOp
    tf.group(a.initializer, b.initializer, name="init")
    with tf.compat.v1.name_scope("grp/NoOp_1"):  # a scope: takes the key grp/NoOp_1
        tf.constant(1.0, name="c")
    tf.group(a.initializer, b.initializer, name="grp")
"""


def test_group_noops_are_named_by_unique_name_in_creation_order(tmp_path, capsys, kernel_mode):
    """``group``'s per-device NoOps take TF's ``Graph.unique_name`` of ``<root>/NoOp`` over the
    names made before them, lower-cased, scopes included (ops.py): with ``init/noop`` in the graph
    TF names them ``init/NoOp_1``, ``init/NoOp_2``; after a scope ``grp/NoOp_1/``, ``grp/NoOp``,
    ``grp/NoOp_2``. Node for node (names, order, devices), with and without the C kernels."""
    build_setter_pair(tmp_path, NAMES, 2)
    out = tmp_path / "out.pb"
    code, _, err = run_cli(["place", tmp_path / "unplaced.pb", "--ps-tasks", "2", "--stage", "setter", "-o", out],
                           capsys)
    assert code == 0, err
    tf_names = list(_devices(tmp_path / "placed.pb"))
    assert {"init/NoOp_1", "init/NoOp_2", "grp/NoOp", "grp/NoOp_2"} <= set(tf_names)  # the case is the one meant
    assert list(_devices(out).items()) == list(_devices(tmp_path / "placed.pb").items())
