"""The SyncReplicas rewrite (placeviz/sync/rewrite.py) against TensorFlow's own SyncReplicasOptimizer.

For each sample/config TF builds the plain graph and the sync graph of the same model (unplaced);
placeviz rewrites the plain one. The rewritten graph must have TF's node names (in TF's creation
order), op types, inputs, devices and attrs; placed by placeviz's placer (2 ps tasks) it must give the
same per-device op-type counts as TF's sync graph placed the same way, with every accumulator on its
variable's device; and it must satisfy the single-update proof. For a few configs the comparison also
runs against TF's sync graph built under TF's own replica_device_setter.

Then a K-step run: TF's sync graph and the rewritten one, each in a direct TF session, are driven by
the same schedule (per global step: R worker train-op runs, then the chief's sync op) and must end
with the same variable values.
"""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import pytest

from placeviz.devices import ClusterSpec
from placeviz.graph import Graph
from placeviz.io import read_collections
from placeviz.placement import PlacementOptions, SetterConfig, place_graph
from placeviz.placement.placer import PlacementError
from placeviz.protos import GraphDef, MetaGraphDef
from placeviz.sync import detect, prove
from placeviz.sync.rewrite import SyncRewriteError, rewrite_sync

pytestmark = pytest.mark.tf

TRANSFORMER_LAYERS = 2
"""The transformer sample has LAYERS=20 per unit of scale (scale >= 1); the test builds 2 layers."""

# (sample, R, W, variable_averages, resource variables)
CONFIGS = [
    ("mlp", 2, None, False, False),
    ("mlp", 2, 3, False, False),           # R < W: one backup worker, 3 tokens per step
    ("mlp", 3, 3, False, True),
    ("inception", 2, 3, True, False),      # Momentum + batch norm + EMA moved into the sync op
    ("inception", 2, 3, True, True),
    ("wide_deep", 2, None, False, False),  # partitioned embeddings: SparseConditionalAccumulator
    ("wide_deep", 2, 3, False, True),      # ResourceGather: dense_shape is a Const
    ("lstm", 2, None, False, False),       # Adam sparse (ScatterAdd), int32 ids: two Casts
    ("lstm", 2, 3, False, True),
    ("hashtable", 2, 3, False, False),     # FTRL, SparseApplyFtrl
    ("hashtable", 2, None, False, True),
    ("misconfigured", 2, None, False, False),
    ("misconfigured", 2, 3, False, True),
    ("transformer", 2, 3, False, False),   # Adam, 2 layers (see TRANSFORMER_LAYERS)
    ("transformer", 2, None, False, True),
]
TF_PLACED = {("mlp", 2, None, False, False), ("inception", 2, 3, True, False),
             ("wide_deep", 2, 3, False, True)}
"""Configs also compared with TF's sync graph built under TF's replica_device_setter (2 ps)."""


def _id(c) -> str:
    s, r, w, ema, res = c
    return f"{s}-R{r}W{w or r}{'-ema' if ema else ''}-{'resource' if res else 'ref'}"


def _meta(tf_meta) -> MetaGraphDef:
    return MetaGraphDef.FromString(tf_meta.SerializeToString())


@functools.cache
def _build(sample: str, sync: bool, r: int, w: int | None, resource: bool, ps_tasks: int = 0) -> MetaGraphDef:
    """TF's graph of a sample (built once per process; plain graphs do not depend on R/W)."""
    from placeviz.sample_graphs import BuildOptions, build_meta_graph
    from placeviz.sample_graphs import transformer as transformer_sample

    opts = BuildOptions(sync_replicas=sync, replicas_to_aggregate=r, total_replicas=w, ps_tasks=ps_tasks,
                        resource_variables=resource)
    layers = transformer_sample.LAYERS
    transformer_sample.LAYERS = TRANSFORMER_LAYERS
    try:
        return _meta(build_meta_graph(sample, opts))
    finally:
        transformer_sample.LAYERS = layers


def _plain(sample: str, resource: bool) -> MetaGraphDef:
    return _build(sample, False, 2, None, resource)


@functools.cache
def _rewrite(sample: str, r: int, w: int | None, ema: bool, resource: bool):
    return rewrite_sync(_plain(sample, resource), r, w, variable_averages=ema)


def _placement_options() -> PlacementOptions:
    return PlacementOptions(setter=SetterConfig(ps_tasks=2, worker_device="/job:worker/task:0"),
                            cluster=ClusterSpec.from_ps_tasks(2))


def _place(graph_def: GraphDef):
    """(devices by node name, Counter of (device, op)) or the placement error's text."""
    try:
        p = place_graph(Graph(graph_def), _placement_options())
    except PlacementError as e:
        return str(e), None
    g = p.graph
    devices = dict(zip(g.names, p.placement.devices, strict=True))
    return devices, Counter((d, g.ops[i]) for i, d in enumerate(p.placement.devices))


@pytest.mark.parametrize(("sample", "r", "w", "ema", "resource"), CONFIGS, ids=[_id(c) for c in CONFIGS])
def test_rewrite_matches_tf(sample, r, w, ema, resource):
    tf_sync = _build(sample, True, r, w, resource)
    res = _rewrite(sample, r, w, ema, resource)
    ours = {n.name: n for n in res.graph_def.node}
    theirs = {n.name: n for n in tf_sync.graph_def.node}
    common = set(ours) & set(theirs)
    diffs = [name for name in common if ours[name].op != theirs[name].op
             or list(ours[name].input) != list(theirs[name].input)
             or ours[name].device != theirs[name].device
             or dict(ours[name].attr) != dict(theirs[name].attr)]
    added = set(res.added)
    print(f"sync-rewrite {_id((sample, r, w, ema, resource))}: TF nodes {len(theirs)}, ours {len(ours)}, "
          f"names equal {len(common)} (added by the rewrite: {len(added)}), differing "
          f"op/inputs/device/attrs {len(diffs)} {sorted(diffs)[:5]}; only ours "
          f"{sorted(set(ours) - set(theirs))[:5]}; only TF {sorted(set(theirs) - set(ours))[:5]}")
    assert set(ours) == set(theirs)
    assert [n.name for n in res.graph_def.node] == [n.name for n in tf_sync.graph_def.node]  # creation order
    assert not diffs
    assert added <= set(theirs)

    # every (grad, var) got the accumulator kind TF gives it
    kinds = Counter(theirs[a].op for a in res.accumulators.values())
    tf_kinds = Counter(n.op for n in tf_sync.graph_def.node if n.op.endswith("ConditionalAccumulator"))
    assert kinds == tf_kinds and sum(kinds.values()) == len(res.variables)

    # collections: the local step is a local variable; the train op collection rewired
    coll = read_collections(res.meta_graph)
    assert "sync_rep_local_step" in coll.local_variables
    assert coll.local_variables == read_collections(tf_sync).local_variables
    assert coll.train_ops == read_collections(tf_sync).train_ops

    # placement by placeviz's placer: ours vs TF's sync graph
    odev, ocounts = _place(res.graph_def)
    tdev, tcounts = _place(tf_sync.graph_def)
    if ocounts is None or tcounts is None:  # the misconfigured sample: same refusal for both
        assert ocounts is None and tcounts is None and odev == tdev, (odev, tdev)
        print(f"  placement: both refused: {odev}")
    else:
        same_dev = sum(odev[n] == tdev.get(n) for n in odev)
        print(f"  placed (2 ps): op-type counts over {len(set(d for d, _ in tcounts))} devices equal: "
              f"{ocounts == tcounts}; same device {same_dev} / {len(tdev)}")
        assert ocounts == tcounts, (ocounts - tcounts, tcounts - ocounts)
        assert odev == tdev
        for var, acc in res.accumulators.items():
            assert odev[acc] == odev[var], (acc, odev[acc], var, odev[var])
        if (sample, r, w, ema, resource) in TF_PLACED:
            tf_placed = _build(sample, True, r, w, resource, ps_tasks=2)
            pdev, pcounts = _place(tf_placed.graph_def)
            print(f"  vs TF's setter build: op-type counts equal {ocounts == pcounts}")
            assert ocounts == pcounts, (ocounts - pcounts, pcounts - ocounts)
            for var, acc in res.accumulators.items():
                assert pdev[acc] == odev[acc] == pdev[var]

    # the single-update proof holds on the rewritten graph, and detection reads back R and W
    g = Graph(res.graph_def)
    m = detect(g, read_collections(res.meta_graph))
    assert m is not None
    proof = prove(g, m)
    assert proof.single_update, proof.violations
    assert m.replicas_to_aggregate == r and m.tokens_per_step == max(r, w or r)
    assert g.names[m.primary.queue] == res.token_queue
    assert {g.names[a.variable] for a in m.accumulators} == set(res.variables)


# ------------------------------------------------------------------------------------- K-step run
K_STEPS = 3
RUN_CONFIGS = [
    ("mlp", 2, 3, False, False),        # dense, ref, backup worker
    ("wide_deep", 2, 3, False, True),   # sparse + dense, resource, Adagrad
    ("lstm", 2, None, False, False),    # sparse Adam (ScatterAdd) with int32 indices (Casts)
]


def _run_sync(meta_bytes: bytes, ops: dict[str, str], r: int, steps: int):
    """Import a sync MetaGraphDef into TF, run ``steps`` global steps, return variable values.

    Schedule per global step: R times (local_step := global_step; worker train op on that replica's
    batch: the float inputs' defaults scaled by 1 + k/4), then the chief's sync op once. Resetting the local step first (the chief's ``local_step_init_op``) tags every
    gradient with the current step, so none is dropped as stale and the token queue never runs dry.
    """
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        meta = tf.compat.v1.MetaGraphDef.FromString(meta_bytes)
        tf.compat.v1.train.import_meta_graph(meta, clear_devices=True)
        variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=2)
        opts = tf.compat.v1.RunOptions(timeout_in_ms=30000)  # a broken graph blocks in TakeGradient
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            for name in ("init", "local_init"):
                sess.run(graph.get_operation_by_name(name))
            start = {name: sess.run(v) for name, v in variables.items()}
            sess.run(graph.get_operation_by_name(ops["chief_init"]))
            sess.run(graph.get_operation_by_name(ops["init_tokens"]))
            inputs = [op for op in graph.get_operations()
                      if op.type == "PlaceholderWithDefault" and op.outputs[0].dtype == tf.float32]
            defaults = sess.run([op.inputs[0] for op in inputs])
            for _ in range(steps):
                for k in range(r):
                    # each replica's batch differs, so the aggregated gradient is a real mean of R
                    feed = {op.outputs[0]: d * (1.0 + 0.25 * k) for op, d in zip(inputs, defaults, strict=True)}
                    sess.run(graph.get_operation_by_name(ops["local_step_init"]), options=opts)
                    sess.run(graph.get_operation_by_name(ops["train_op"]), feed_dict=feed, options=opts)
                sess.run(graph.get_operation_by_name(ops["sync_op"]), options=opts)
            end = {name: sess.run(v) for name, v in variables.items()}
    return start, end


@pytest.mark.parametrize(("sample", "r", "w", "ema", "resource"), RUN_CONFIGS,
                         ids=[_id(c) for c in RUN_CONFIGS])
def test_k_steps_equal_values(sample, r, w, ema, resource):
    from placeviz.sample_graphs.options import SyncCollections as SC

    tf_sync = _build(sample, True, r, w, resource)
    res = _rewrite(sample, r, w, ema, resource)
    cd = tf_sync.collection_def

    def one(key):
        return cd[key].node_list.value[0]

    tf_ops = {"chief_init": one(SC.CHIEF_INIT_OP), "init_tokens": one(SC.INIT_TOKENS_OP),
              "local_step_init": one(SC.LOCAL_STEP_INIT_OP), "sync_op": one(SC.SYNC_OP),
              "train_op": "train_op"}
    our_ops = {"chief_init": res.chief_init_op, "init_tokens": res.init_tokens_op,
               "local_step_init": res.local_step_init_op, "sync_op": res.sync_op, "train_op": "train_op"}
    assert {k: v.split(":")[0] for k, v in tf_ops.items()} == our_ops
    tf_start, tf_end = _run_sync(tf_sync.SerializeToString(), tf_ops, r, K_STEPS)
    start, end = _run_sync(res.meta_graph.SerializeToString(), our_ops, r, K_STEPS)
    assert set(end) == set(tf_end)
    for k in tf_start:  # same initial values: the same initializer ops with the same seeds
        np.testing.assert_array_equal(start[k], tf_start[k], err_msg=k)
    gs = [k for k in end if k.endswith("global_step")][0]
    assert tf_end[gs] == end[gs] == K_STEPS
    moved = [k for k in tf_end if not np.array_equal(tf_start[k], tf_end[k])]
    assert len(moved) > len(res.variables) // 2  # the steps did update the model
    worst = max(float(np.max(np.abs(np.asarray(tf_end[k], np.float64) - np.asarray(end[k], np.float64))))
                for k in tf_end if np.asarray(tf_end[k]).dtype.kind == "f")
    print(f"k-step {_id((sample, r, w, ema, resource))}: {K_STEPS} steps, {len(tf_end)} variables, "
          f"{len(moved)} changed, max |TF - ours| = {worst:.3g}")
    for k in tf_end:
        np.testing.assert_allclose(end[k], tf_end[k], rtol=1e-6, atol=1e-7, err_msg=k)


# ------------------------------------------------------------------------------------- refusals
def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text and text
    return text


def test_refusals():
    plain = _plain("mlp", False)
    with pytest.raises(SyncRewriteError, match="already synchronous") as e:
        rewrite_sync(_build("mlp", True, 2, None, False), 2)
    _one_line(e)
    gd = GraphDef()
    gd.CopyFrom(plain.graph_def)
    kept = [n for n in gd.node if "ApplyGradientDescent" not in n.op]
    del gd.node[:]
    gd.node.extend(kept)
    with pytest.raises(SyncRewriteError, match="no optimizer apply ops") as e:
        rewrite_sync(gd, 2)
    _one_line(e)
    gd2 = GraphDef()
    gd2.CopyFrom(plain.graph_def)
    for n in gd2.node:
        if n.op == "AssignAdd" and n.input[0] == "global_step":
            n.op = "NoOp"
            del n.input[:]
    with pytest.raises(SyncRewriteError, match="global step") as e:
        rewrite_sync(gd2, 2)
    _one_line(e)
    with pytest.raises(SyncRewriteError, match="variable-averages") as e:
        rewrite_sync(plain, 2, variable_averages=True)
    _one_line(e)
    with pytest.raises(SyncRewriteError, match="replicas_to_aggregate"):
        rewrite_sync(plain, 0)


@pytest.mark.parametrize("resource", [False, True])
def test_refuses_an_update_it_cannot_trace(resource):
    """An update op that is not one of TF's optimizer kernels: no gradient to aggregate."""
    gd = GraphDef()
    gd.CopyFrom(_plain("mlp", resource).graph_def)
    victim = next(n for n in gd.node if n.op.endswith("ApplyGradientDescent"))
    victim.op = victim.op.replace("GradientDescent", "MyOwnRule")
    with pytest.raises(SyncRewriteError, match="cannot trace its gradient") as e:
        rewrite_sync(gd, 2)
    assert victim.name.split("/")[1][len("update_"):] in _one_line(e)


def test_refuses_a_ready_list_naming_no_node():
    """A ``report_uninitialized_variables`` list (rebuilt to also list the local step) that names a
    variable the graph does not hold: one line, not a traceback (it used to be an AttributeError)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        global_step = v1.train.get_or_create_global_step()
        w = v1.get_variable("w", [2, 1])
        v1.get_variable("counter", [], collections=[v1.GraphKeys.LOCAL_VARIABLES])
        loss = tf.reduce_sum(tf.matmul(tf.ones([1, 2]), w))
        v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)
        v1.report_uninitialized_variables()  # every variable: global ones and the local one
        meta = _meta(v1.train.export_meta_graph(graph=graph))
    const = next(n for n in meta.graph_def.node if n.name == "report_uninitialized_variables/Const")
    assert b"counter" in const.attr["value"].tensor.string_val
    res = rewrite_sync(meta, 2)  # as TF built it: rebuilt to list the local step too
    assert any(n.name == "report_uninitialized_variables/Const" for n in res.graph_def.node)
    const.attr["value"].tensor.string_val.append(b"no_such_variable")
    with pytest.raises(SyncRewriteError, match="no_such_variable") as e:
        rewrite_sync(meta, 2)
    _one_line(e)


@pytest.mark.parametrize("resource", [False, True])
def test_refuses_sparse_gradient_without_dense_shape(resource):
    """IndexedSlices whose dense_shape cannot be found where the gradient function made them."""
    gd = GraphDef()
    gd.CopyFrom(_plain("wide_deep", resource).graph_def)
    for n in gd.node:  # hide every params-shape op of the gather gradients
        if "_grad/" in n.name and n.name.rsplit("/", 1)[1] in ("Shape", "Const", "VariableShape"):
            n.name = n.name + "_hidden"
            n.op = "Placeholder" if n.op != "Const" else n.op
            if n.op == "Const":
                n.attr["dtype"].type = 1  # float: no longer a shape
    with pytest.raises(SyncRewriteError, match="dense_shape") as e:
        rewrite_sync(gd, 2)
    _one_line(e)


def test_refuses_two_optimizers():
    gd = GraphDef()
    gd.CopyFrom(_plain("mlp", False).graph_def)
    inc = next(n for n in gd.node if n.name == "GradientDescent")
    twin = gd.node.add()
    twin.CopyFrom(inc)
    twin.name = "accuracy"  # `accuracy/update_op` exists: now looks like an optimizer scope too
    with pytest.raises(SyncRewriteError, match="more than one optimizer") as e:
        rewrite_sync(gd, 2)
    _one_line(e)


# ------------------------------------------------------------------------- every wrapped optimizer
OPTIMIZERS = {
    "GradientDescent": lambda tf: tf.compat.v1.train.GradientDescentOptimizer(0.1),
    "Momentum": lambda tf: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
    "Adam": lambda tf: tf.compat.v1.train.AdamOptimizer(0.01),
    "Adagrad": lambda tf: tf.compat.v1.train.AdagradOptimizer(0.1),
    "AdagradDA": "AdagradDA",  # needs the global step
    "Adadelta": lambda tf: tf.compat.v1.train.AdadeltaOptimizer(0.1),
    "Ftrl": lambda tf: tf.compat.v1.train.FtrlOptimizer(0.1, l2_shrinkage_regularization_strength=0.01),
    "RMSProp": lambda tf: tf.compat.v1.train.RMSPropOptimizer(0.1),
    "CenteredRMSProp": lambda tf: tf.compat.v1.train.RMSPropOptimizer(0.1, centered=True),
    "ProximalGradientDescent": lambda tf: tf.compat.v1.train.ProximalGradientDescentOptimizer(0.1, 0.01),
    "ProximalAdagrad": lambda tf: tf.compat.v1.train.ProximalAdagradOptimizer(0.1, l1_regularization_strength=0.01),
}


def _small_model(optimizer: str, resource: bool, sync: bool, r: int, w: int | None) -> MetaGraphDef:
    """A dense weight and an embedding (IndexedSlices gradient, int32 ids) under one optimizer."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(1)
        tf.compat.v1.get_variable_scope().set_use_resource(resource)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        emb = tf.compat.v1.get_variable("emb", [10, 3])
        dense = tf.compat.v1.get_variable("dense", [3, 1])
        ids = tf.constant([1, 4, 1], tf.int32)
        loss = tf.reduce_sum(tf.matmul(tf.nn.embedding_lookup(emb, ids), dense))
        make = OPTIMIZERS[optimizer]
        opt = (tf.compat.v1.train.AdagradDAOptimizer(0.1, global_step) if make == "AdagradDA" else make(tf))
        if sync:
            opt = tf.compat.v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=r, total_num_replicas=w)
        train = opt.minimize(loss, global_step=global_step)
        with tf.control_dependencies([train]):
            tf.identity(loss, name="train_op")
        if sync:
            opt.get_chief_queue_runner()
            opt.get_init_tokens_op()
        tf.compat.v1.global_variables_initializer()
        tf.compat.v1.local_variables_initializer()
        return _meta(tf.compat.v1.train.export_meta_graph(graph=graph))


@pytest.mark.parametrize("resource", [False, True], ids=["ref", "resource"])
def test_every_wrapped_optimizer(resource):
    """Dense and sparse updates of every tf.compat.v1 optimizer rewrite to TF's own sync graph."""
    for name in OPTIMIZERS:
        r, w = 2, 3
        plain = _small_model(name, resource, False, r, w)
        tf_sync = _small_model(name, resource, True, r, w)
        res = rewrite_sync(plain, r, w)
        ours = [(n.name, n.op, list(n.input), n.device, dict(n.attr)) for n in res.graph_def.node]
        theirs = [(n.name, n.op, list(n.input), n.device, dict(n.attr)) for n in tf_sync.graph_def.node]
        bad = [t[0] for t, o in zip(theirs, ours, strict=False) if t != o]
        update_ops = sorted({n.op for n in tf_sync.graph_def.node if n.name.startswith(f"{res.optimizer}/update_")
                             and n.op[0].isupper() and n.op not in ("Const", "NoOp", "Identity")})
        print(f"optimizer {name} ({'resource' if resource else 'ref'}): {len(theirs)} nodes, "
              f"differing {len(bad) + abs(len(ours) - len(theirs))}; update ops {update_ops}")
        assert len(ours) == len(theirs) and not bad, (name, bad[:5])
        assert sorted(res.accumulators) == ["dense", "emb"]


@pytest.mark.parametrize("resource", [False, True], ids=["ref", "resource"])
def test_aggregated_clipped_sparse_gradient_without_initializers(resource):
    """An embedding gathered twice (IndexedSlices aggregated by concat), int64 ids (no index Cast),
    clipped by global norm; no local-variables initializer or train-op Identity after the update (so
    TF marks fewer ops with _has_manual_control_dependencies)."""
    import tensorflow as tf

    def build(sync: bool) -> MetaGraphDef:
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.get_variable_scope().set_use_resource(resource)
            gs = tf.compat.v1.train.get_or_create_global_step()
            emb = tf.compat.v1.get_variable("emb", [10, 3])
            dense = tf.compat.v1.get_variable("dense", [3, 1])
            a = tf.nn.embedding_lookup(emb, tf.constant([1, 4], tf.int64))
            b = tf.nn.embedding_lookup(emb, tf.constant([2, 4], tf.int64))
            loss = tf.reduce_sum(tf.matmul(a + b, dense))
            opt = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)
            if sync:
                opt = tf.compat.v1.train.SyncReplicasOptimizer(opt, 2)
            grads, variables = zip(*opt.compute_gradients(loss), strict=True)
            grads, _ = tf.clip_by_global_norm(grads, 1.0)
            opt.apply_gradients(list(zip(grads, variables, strict=True)), global_step=gs)
            if sync:
                opt.get_init_tokens_op()
            return _meta(tf.compat.v1.train.export_meta_graph(graph=graph))

    tf_sync = build(True)
    res = rewrite_sync(build(False), 2)
    ours = [(n.name, n.op, list(n.input), n.device, dict(n.attr)) for n in res.graph_def.node]
    theirs = [(n.name, n.op, list(n.input), n.device, dict(n.attr)) for n in tf_sync.graph_def.node]
    assert ours == theirs, [t[0] for t, o in zip(theirs, ours, strict=False) if t != o][:5]
    assert [n.op for n in res.graph_def.node if n.name.startswith("sync_replicas/Cast")] == ["Cast"]


# ------------------------------------------------------------- names, scopes, devices, init tokens
def _scoped_model(sync: bool, placed: bool, chief: bool, resource: bool) -> MetaGraphDef:
    """apply_gradients inside a name scope, with ``name=``, an int32 global step, a hand-made
    IndexedSlices gradient (Const dense_shape), names TF's SyncReplicas build takes already in use
    before it (``report_uninitialized_variables``, ``init_1``, ``ReadVariableOp``...) and the ops a
    Supervisor/Scaffold makes after it (ready ops, local init op), optionally under
    replica_device_setter(ps_tasks=2)."""
    import contextlib

    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        setter = (v1.device(v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0"))
                  if placed else contextlib.nullcontext())
        with setter:
            v1.get_variable_scope().set_use_resource(resource)
            global_step = v1.Variable(0, name="global_step", trainable=False)  # int32: TF casts
            w = v1.get_variable("w", [3, 2])
            emb = v1.get_variable("emb", [4, 2])
            v1.report_uninitialized_variables()  # taken before SyncReplicas asks for it
            v1.no_op(name="init_1")
            if resource:
                tf.raw_ops.ReadVariableOp(resource=w.handle, dtype=tf.float32)  # "ReadVariableOp"
            loss = tf.reduce_sum(tf.matmul(tf.ones([1, 3]), w))
            grad_w = tf.gradients(loss, [w])[0]
            grad_emb = tf.IndexedSlices(tf.constant([[0.5, 0.5]]), tf.constant([1]), tf.constant([4, 2]))
            opt = v1.train.GradientDescentOptimizer(0.1)
            if sync:
                opt = v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=2, total_num_replicas=3,
                                                     name="my_sync")
            with tf.name_scope("train"):
                train = opt.apply_gradients([(grad_w, w), (grad_emb, emb)], global_step=global_step)
            with tf.control_dependencies([train]):
                tf.identity(loss, name="train_op")
            if sync and chief:  # the chief's hook, right after the train op (placeviz's order)
                opt.get_chief_queue_runner()
                opt.get_init_tokens_op()
            # what a Supervisor/Scaffold makes afterwards
            v1.add_to_collection(v1.GraphKeys.READY_OP, v1.report_uninitialized_variables())
            v1.add_to_collection(v1.GraphKeys.READY_FOR_LOCAL_INIT_OP,
                                 v1.report_uninitialized_variables(v1.global_variables()))
            v1.add_to_collection(v1.GraphKeys.LOCAL_INIT_OP,
                                 tf.group(v1.local_variables_initializer(), v1.tables_initializer()))
        return _meta(v1.train.export_meta_graph(graph=graph, clear_devices=False))


@pytest.mark.parametrize("resource", [False, True], ids=["ref", "resource"])
@pytest.mark.parametrize("placed", [False, True], ids=["unplaced", "placed"])
def test_names_scope_devices_and_chief(placed, resource):
    """TF's names (unique against everything already in use, later plain ops renamed as TF's
    counters rename them, the caller's name scope, ``name=``), devices under
    replica_device_setter, the int32 global step's Casts, the hand-made IndexedSlices' Const
    dense_shape, and the init-tokens op only on the chief."""
    for chief in (True, False):
        plain = _scoped_model(False, placed, chief, resource)
        tf_sync = _scoped_model(True, placed, chief, resource)
        res = rewrite_sync(plain, 2, 3, name="my_sync", is_chief=chief)
        ours = [(n.name, n.op, list(n.input), n.device, dict(n.attr)) for n in res.graph_def.node]
        theirs = [(n.name, n.op, list(n.input), n.device, dict(n.attr)) for n in tf_sync.graph_def.node]
        assert [o[0] for o in ours] == [t[0] for t in theirs]
        bad = [t for t, o in zip(theirs, ours, strict=True) if t != o]
        assert not bad, [(t[0], o) for t, o in zip(theirs, ours, strict=True) if t != o][:3]
        # the wrapped optimizer's block is built under name_scope(""): out of the caller's scope
        assert res.renamed["train/GradientDescent"] == "GradientDescent"
        assert any(n.name == "train/report_uninitialized_variables/stack" for n in res.graph_def.node)
        assert res.chief_init_op == "train/my_sync/group_deps"
        assert (res.init_tokens_op == "sync_token_q_EnqueueMany_1") == chief


def test_no_duplicate_names_ever():
    """Every rewritten graph has unique names (the rewrite raises rather than write a duplicate)."""
    res = rewrite_sync(_scoped_model(False, False, True, True), 2, 3)
    names = [n.name for n in res.graph_def.node]
    assert len(names) == len(set(names))


# ------------------------------------------------------- an EMA the plain program applies first
def _ema_first_model(sync: bool, placed: bool, resource: bool) -> MetaGraphDef:
    """TF-Slim's train_image_classifier pattern: the plain program applies its
    ExponentialMovingAverage *before* the optimizer and groups it with the update
    (``tf.group(*update_ops)``); in sync mode it hands the EMA to SyncReplicasOptimizer
    (``variable_averages=``), which applies it in the chief's sync op. A Supervisor-style
    ``report_uninitialized_variables()`` afterwards lists every variable in creation order."""
    import contextlib

    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    v1 = tf.compat.v1
    graph = tf.Graph()
    v2_cond = control_flow_util.ENABLE_CONTROL_FLOW_V2
    with graph.as_default(), contextlib.ExitStack() as restore:
        # TF1 control flow (EMA.apply's cond), as the TF1 programs build it: a v2 cond's
        # function names are unique per build
        v1.disable_control_flow_v2()
        restore.callback(setattr, control_flow_util, "ENABLE_CONTROL_FLOW_V2", v2_cond)
        setter = (v1.device(v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0"))
                  if placed else contextlib.nullcontext())
        with setter:
            v1.get_variable_scope().set_use_resource(resource)
            global_step = v1.train.get_or_create_global_step()
            w = v1.get_variable("w", [3, 2])
            b = v1.get_variable("b", [2], initializer=v1.zeros_initializer())
            loss = tf.reduce_sum(tf.matmul(tf.ones([1, 3]), w) + b)
            ema = v1.train.ExponentialMovingAverage(0.99, global_step)
            opt = v1.train.RMSPropOptimizer(0.1)
            update_ops = []
            if sync:
                opt = v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=2, total_num_replicas=2,
                                                     variable_averages=ema, variables_to_average=[w, b])
            else:
                update_ops.append(ema.apply([w, b]))
            grads = opt.compute_gradients(loss)
            update_ops.append(opt.apply_gradients(grads, global_step=global_step))
            tf.group(*update_ops, name="train")
            if sync:  # the chief's hook, right after the train op (placeviz's order)
                opt.get_chief_queue_runner()
                opt.get_init_tokens_op()
            v1.report_uninitialized_variables()
            v1.global_variables_initializer()
            v1.local_variables_initializer()
        return _meta(v1.train.export_meta_graph(graph=graph, clear_devices=False))


@pytest.mark.parametrize("resource", [False, True], ids=["ref", "resource"])
@pytest.mark.parametrize("placed", [False, True], ids=["unplaced", "placed"])
def test_ema_applied_before_the_optimizer(placed, resource):
    """The EMA block is found before the optimizer, taken out of the plain train group and built
    where SyncReplicasOptimizer builds it (after the token enqueue): TF's names, order, inputs,
    devices and attrs; the train group and the later variable lists follow."""
    plain = _ema_first_model(False, placed, resource)
    tf_sync = _ema_first_model(True, placed, resource)
    res = rewrite_sync(plain, 2, 2, variable_averages=True)
    ours = [(n.name, n.op, list(n.input), n.device, dict(n.attr)) for n in res.graph_def.node]
    theirs = [(n.name, n.op, list(n.input), n.device, dict(n.attr)) for n in tf_sync.graph_def.node]
    assert [o[0] for o in ours] == [t[0] for t in theirs]
    bad = [(t[0], o) for t, o in zip(theirs, ours, strict=True) if t != o]
    assert not bad, bad[:3]
    assert res.sync_op == "ExponentialMovingAverage"
    ours_vars = read_collections(res.meta_graph).global_variables
    assert ours_vars == read_collections(tf_sync).global_variables
