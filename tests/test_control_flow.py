"""Every node's while-loop frame (``placeviz.control_flow``, TF's ``BuildControlFlowInfo`` in
``tensorflow/core/graph/control_flow.cc``) against TF's own: graphs built with TF's real
``tf.compat.v1.while_loop`` (nested loops, a cond in a body, a body reading a variable,
``parallel_iterations``), compared op by op with the ``WhileContext`` TF's Python front end put
the op in (``op._get_control_flow_context()``, whose name is the ``frame_name`` of the loop's
``Enter`` ops; None outside every loop)."""

from __future__ import annotations

import pytest

from placeviz.graph import Graph
from placeviz.partition import partition
from placeviz.partition.base import PartitionError
from placeviz.sync.proof import loop_frames

pytestmark = pytest.mark.tf


def _tf_graph():
    """Nested TF1 while loops: the inner one (parallel_iterations=3) has a cond that reads a
    variable; a second loop at the root runs after the first."""
    tf = pytest.importorskip("tensorflow")
    v1 = tf.compat.v1
    was_v2 = v1.control_flow_v2_enabled()
    v1.disable_control_flow_v2()  # TF1 loops: Enter/Exit frames
    try:
        g = tf.Graph()
        with g.as_default():
            w = v1.get_variable("w", [4, 4], use_resource=False)
            r = v1.get_variable("r", [4, 4], use_resource=True)

            def outer(i, h):
                def inner(j, x):
                    y = v1.cond(j > 1, lambda: tf.matmul(x, w), lambda: x)
                    return j + 1, tf.tanh(y)

                _, h2 = v1.while_loop(lambda j, x: j < 3, inner, [tf.constant(0), h], parallel_iterations=3,
                                      name="inner")
                return i + 1, h2

            _, h = v1.while_loop(lambda i, h: i < 5, outer, [tf.constant(0), tf.ones([4, 4])], name="outer")
            _, k = v1.while_loop(lambda i, x: i < 2, lambda i, x: (i + 1, x + r), [tf.constant(0), h],
                                 name="second")
            tf.identity(tf.reduce_sum(k), name="out")
    finally:
        if was_v2:
            v1.enable_control_flow_v2()
    return g


def _while_context(op):
    """The innermost WhileContext TF put ``op`` in (a cond's context is inside one), or None."""
    c = op._get_control_flow_context()
    while c is not None and not c.IsWhileContext():
        c = c.outer_context
    return c


def _assert_matches_tf(tf_graph, graph: Graph) -> None:
    info = graph.control_flow
    assert info.error is None
    ops = tf_graph.get_operations()
    assert len(ops) == len(graph)
    contexts = {}
    for op in ops:
        c = _while_context(op)
        assert info.frame_name(graph.index[op.name]) == (c.name if c is not None else ""), op.name
        if c is not None:
            contexts[c.name] = c
    assert set(info.names[1:]) == set(contexts)  # every frame is one of TF's loops
    for f, name in enumerate(info.names[1:], 1):
        outer = contexts[name].outer_context
        while outer is not None and not outer.IsWhileContext():
            outer = outer.outer_context
        assert info.names[info.parent[f]] == (outer.name if outer is not None else "")
        assert info.parallel[f] == contexts[name].parallel_iterations
    views = loop_frames(graph)
    assert views is not None
    assert views == [name or None for name in map(info.frame_name, range(len(graph)))]


def test_frames_match_tfs_while_contexts():
    g = _tf_graph()
    graph = Graph(g.as_graph_def())
    _assert_matches_tf(g, graph)
    assert {"outer/while_context", "outer/inner/while_context", "second/while_context"} <= set(
        graph.control_flow.names)


def test_frames_do_not_depend_on_node_order_or_on_merge_input_order():
    """TF's walk starts at the nodes without inputs and needs no topological order: reversed
    GraphDef order and a Merge listing its NextIteration input first give the same frames."""
    g = _tf_graph()
    gd = g.as_graph_def()
    del gd.node[:]
    gd.node.extend(reversed(g.as_graph_def().node))
    for node in gd.node:
        if node.op == "Merge":
            node.input[:] = list(reversed(node.input))
    _assert_matches_tf(g, Graph(gd))


def test_an_enter_without_frame_name_is_tfs_error_in_the_partitioner():
    """TF's ``AddControlFlow`` returns BuildControlFlowInfo's error: "The Enter ... must have a
    frame name." The analyses keep reading the frames (the nameless frame is still a loop)."""
    g = _tf_graph()
    gd = g.as_graph_def()
    enter = next(n for n in gd.node if n.op == "Enter" and n.name.startswith("second/"))
    del enter.attr["frame_name"]
    graph = Graph(gd)
    assert graph.control_flow.error == f"The Enter node {enter.name} must have a frame name."
    frames = loop_frames(graph)
    assert frames is not None and frames[graph.index[enter.name]] is not None
    devices = ["/job:worker/replica:0/task:0/device:CPU:0"] * len(graph)
    devices[graph.index["r"]] = "/job:ps/replica:0/task:0/device:CPU:0"
    with pytest.raises(PartitionError, match="must have a frame name"):
        partition(graph, devices, targets=["out"])


def test_inputs_from_different_frames_are_the_error_tf_reports():
    """A node reading a loop body's tensor from outside the loop (no Exit): TF's session refuses
    the graph with BuildControlFlowInfo's error, and placeviz reports the same error."""
    tf = pytest.importorskip("tensorflow")
    gd = _tf_graph().as_graph_def()
    out = next(n for n in gd.node if n.name == "out")
    inside = next(n.name for n in gd.node if n.name.startswith("second/") and n.op == "Identity")
    out.input.append(f"^{inside}")
    with tf.Graph().as_default() as g, tf.compat.v1.Session(graph=g) as sess:
        tf.compat.v1.import_graph_def(gd, name="")
        sess.run(tf.compat.v1.global_variables_initializer())
        with pytest.raises(tf.errors.InvalidArgumentError, match="has inputs from different frames"):
            sess.run("out:0")
    error = Graph(gd).control_flow.error
    assert error is not None and "has inputs from different frames" in error


_PS0, _PS1 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"
_W0 = "/job:worker/replica:0/task:0/device:CPU:0"


def _placed(gd):
    """The nested loops with w and r on two PS tasks, as the setter puts variables, and two ops
    of loop bodies there too (the inner loop's Tanh, the second loop's read of r): edges inside
    those frames cross devices, so the partitioner adds control loops."""
    from placeviz.protos import GraphDef

    graph = Graph(GraphDef.FromString(gd.SerializeToString()))
    devices = [_W0] * len(graph)
    for name, ps in (("w", _PS0), ("r", _PS1), ("outer/inner/Tanh", _PS0), ("second/add_1/ReadVariableOp", _PS1)):
        for i, n in enumerate(graph.names):
            if n == name or n.startswith(name + "/"):
                devices[i] = ps
    return graph, devices


@pytest.mark.parametrize("run", [dict(targets=["out"]), dict(targets=["outer/Exit_1"]),
                                 dict(fetches=["out:0"], feeds=["outer/Exit_1:0"])])
def test_a_run_without_feeds_partitions_with_the_graphs_frames(monkeypatch, run):
    """Pruning without feeds only drops nodes: the frames TF's BuildControlFlowInfo gives the kept
    nodes of the run's graph are the whole graph's, so the partitioner reuses Graph.control_flow
    when it is known, with the same partitions; with feeds it walks the run's graph."""
    import placeviz.partition.control_flow as cf_mod
    from placeviz.control_flow import frames_of
    from placeviz.partition import parse_run, prune_mask

    gd = _tf_graph().as_graph_def()
    walks = []

    def counted(*args, **kw):
        walks.append(1)
        return frames_of(*args, **kw)

    monkeypatch.setattr(cf_mod, "frames_of", counted)
    outcomes = []
    for known in (False, True):
        graph, devices = _placed(gd)
        if known:
            _ = graph.control_flow
        walks.clear()
        result = partition(graph, devices, **run)
        assert result.control_loops
        outcomes.append((result.control_loops, result.moved, sorted(result.partitions),
                         [gd_.SerializeToString(deterministic=True) for _, gd_ in sorted(result.partitions.items())]))
        assert len(walks) == (1 if not known or run.get("feeds") else 0)
    assert outcomes[0] == outcomes[1]
    # the frames themselves, both ways: the whole graph's, and BuildControlFlowInfo over the run's graph
    graph, _ = _placed(gd)
    keep = prune_mask(graph, parse_run(graph, run.get("fetches", ()), run.get("targets", ())))
    pruned = frames_of(graph.ops, graph.names, graph.attr_nodes, graph.in_start, graph.in_src, keep=list(keep))
    whole = graph.control_flow
    kept = [i for i, k in enumerate(keep) if k]
    assert any(whole.frame[i] for i in kept)
    assert [pruned.frame_name(i) for i in kept] == [whole.frame_name(i) for i in kept]
    for i in kept:
        f, p = whole.frame[i], pruned.frame[i]
        assert whole.names[whole.parent[f]] == pruned.names[pruned.parent[p]]
        assert whole.parallel[f] == pruned.parallel[p]
