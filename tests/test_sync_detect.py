"""Detection of the SyncReplicas machinery (and the single-update proof) on every sample, built by TF.

Each sample is built once per configuration with TF's real ``SyncReplicasOptimizer`` under
``replica_device_setter`` (ref and resource variables; R < W with backup workers; R > W; the
Inception-style sample hands its ExponentialMovingAverage to the optimizer). The truth is TF's own
graph: the accumulator ops TF created and their ``shared_name``, the collections where the builders
record the optimizer's ops (``placeviz.sample_graphs.SyncCollections``), ``trainable_variables()``. Detection
runs on the exported MetaGraphDef *and* on the bare GraphDef (no collections at all) and must give
the same answer: it works by structure, never through the sample-only collections.
"""

from __future__ import annotations

import functools
import re
from types import SimpleNamespace

import pytest

from placeviz.graph import Graph
from placeviz.io import model_from_proto
from placeviz.sample_graphs import BuildOptions, SyncCollections, build_graph
from placeviz.sync import detect, prove, sync_report
from placeviz.sync.detect import ACCUMULATOR_OPS
from placeviz.sync.proof import PER_ITERATION

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")

# (sample, resource variables, R, W)
SYNC_CONFIGS = [
    ("mlp", False, 2, 3),
    ("mlp", True, 2, 2),
    ("inception", False, 2, 3),
    ("inception", True, 3, 3),
    ("wide_deep", False, 2, 2),
    ("wide_deep", True, 2, 4),
    ("lstm", False, 3, 2),
    ("lstm", True, 2, 3),
    ("hashtable", False, 1, 1),
    ("hashtable", True, 2, 3),
    ("misconfigured", False, 2, 3),
    ("transformer", True, 2, 4),
]
IDS = [f"{s}-{'res' if r else 'ref'}-R{rr}W{w}" for s, r, rr, w in SYNC_CONFIGS]
PLAIN_SAMPLES = ("mlp", "inception", "wide_deep", "lstm", "hashtable", "misconfigured")
# Variables whose gradient is IndexedSlices (embedding lookups): SparseConditionalAccumulator.
SPARSE_GRAD_VARS = {
    "wide_deep": r"(linear/weights|dnn/input_from_feature_columns/item_id_embedding/weights)/part_\d+",
    "lstm": r"Model/embedding",
    "hashtable": r"embedding/weights",
}
TABLE_OPS = {"MutableHashTableV2", "MutableDenseHashTableV2"}


@functools.cache
def built(sample: str, resource: bool, r: int, w: int, sync: bool = True):
    """(TF's truth as plain data, the placeviz Model from the MetaGraphDef)."""
    options = BuildOptions(ps_tasks=2, sync_replicas=sync, replicas_to_aggregate=r, total_replicas=w,
                           resource_variables=resource)
    graph = build_graph(sample, options)
    with graph.as_default():
        meta = tf.compat.v1.train.export_meta_graph(graph=graph)

        def op_of(x):  # Operation, Tensor, or a resource variable's _UnreadVariable (assign result)
            return getattr(x, "op", x)

        def coll(key):
            return [op_of(x).name for x in graph.get_collection(key)]

        accs = {}
        for op in graph.get_operations():
            if op.type in ACCUMULATOR_OPS:
                accs[op.name] = (op.type, op.get_attr("shared_name").decode(), op.device)
        local_step_init = graph.get_collection(SyncCollections.LOCAL_STEP_INIT_OP)
        truth = {
            "accumulators": accs,
            "trainable": [v.op.name for v in tf.compat.v1.trainable_variables()],
            "device": {op.name: op.device for op in graph.get_operations()},
            "global_step": tf.compat.v1.train.get_global_step().op.name,
            "train_op": coll(tf.compat.v1.GraphKeys.TRAIN_OP),
            "sync_op": coll(SyncCollections.SYNC_OP),
            "chief_init_op": coll(SyncCollections.CHIEF_INIT_OP),
            "init_tokens_op": coll(SyncCollections.INIT_TOKENS_OP),
            "local_step_init_op": coll(SyncCollections.LOCAL_STEP_INIT_OP),
            "token_queue": coll(SyncCollections.TOKEN_QUEUE),
            "local_step": op_of(local_step_init[0]).inputs[0].op.name if local_step_init else None,
            "local_variables": [v.op.name for v in tf.compat.v1.local_variables()],
            "moving_average_variables": [v.op.name for v in tf.compat.v1.moving_average_variables()],
            "tables": [op.name for op in graph.get_operations() if op.type in TABLE_OPS],
            "ema_shadows": sorted({v.op.name for v in tf.compat.v1.global_variables()
                                   if v.op.name.endswith("/ExponentialMovingAverage")}),
        }
    return truth, model_from_proto(f"sample:{sample}", "metagraph", meta)


def bare(model) -> Graph:
    """The same graph without any collection (a plain GraphDef)."""
    return Graph(model.graph_def)


def assert_paths_are_chains(graph: Graph, proof) -> None:
    for entry in [*proof.variables, *proof.violations, *proof.per_worker_updates]:
        paths = [e["path"] for e in entry.get("evidence", [])] + [entry.get("path", [])]
        for path in paths:
            for a, b in zip(path, path[1:], strict=False):
                assert any(src == graph.index[b] for src, _ in graph.inputs_of(graph.index[a])), (a, b)


# ----------------------------------------------------------------------------- detection


@pytest.mark.parametrize(("sample", "resource", "r", "w"), SYNC_CONFIGS, ids=IDS)
def test_detection_matches_what_tf_built(sample, resource, r, w):
    truth, model = built(sample, resource, r, w)
    m = detect(model.graph, model.collections)
    assert m is not None
    j = m.to_json()

    # Exactly the accumulators TF created, each feeding the variable of its shared_name.
    assert {a["name"] for a in j["accumulators"]} == set(truth["accumulators"])
    for a in j["accumulators"]:
        op_type, shared_name, device = truth["accumulators"][a["name"]]
        assert a["op"] == op_type and a["shared_name"] == shared_name and a["device"] == device
        assert shared_name == a["variable"] + ":0/grad_accum"
        assert a["variable_from"] == "shared_name+structure"  # structure agrees with the name
        assert a["num_required"] == [r] and len(a["apply_ops"]) == 1 and len(a["update_ops"]) >= 1
        assert a["token_queue"] == "sync_token_q"
        if truth["device"][a["variable"]]:
            assert truth["device"][a["variable"]] == device  # the accumulator sits with its variable
        else:  # misconfigured: a variable made outside the setter; device('') keeps the setter's choice
            assert sample == "misconfigured" and device.startswith("/job:ps/")
    # One accumulator per trainable variable (all have gradients), sparse exactly for IndexedSlices.
    fed = sorted(a["variable"] for a in j["accumulators"])
    assert fed == sorted(truth["trainable"])
    sparse = {a["variable"] for a in j["accumulators"] if a["sparse"]}
    pattern = SPARSE_GRAD_VARS.get(sample)
    assert sparse == {v for v in truth["trainable"] if pattern and re.fullmatch(pattern, v)}

    tokens = max(r, w)
    assert j["replicas_to_aggregate"] == r
    assert j["tokens_per_step"] == tokens and j["total_replicas"] == tokens
    assert j["backup_workers"] == max(0, w - r) and j["total_replicas_exact"] == (w > r)
    assert j["global_step"] == truth["global_step"]
    assert j["local_step"] == truth["local_step"] == "sync_rep_local_step"
    assert [j["worker_train_op"]] == truth["train_op"] == ["train_op"]
    assert [j["sync_op"]] == truth["sync_op"]
    assert [j["chief_init_op"]] == truth["chief_init_op"]
    assert j["init_tokens_ops"] == truth["init_tokens_op"]
    (q,) = j["token_queues"]
    assert [q["queue"]] == truth["token_queue"]
    assert q["local_step_init_ops"] == truth["local_step_init_op"]
    assert q["init_tokens"] == [r]  # get_init_tokens_op(num_tokens=-1) enqueues R tokens
    assert len(q["global_step_increments"]) == 1
    if sample == "inception":
        assert j["variable_averages"]["op"] == "ExponentialMovingAverage" != q["sync_enqueue"]
        assert sorted(j["variable_averages"]["variables"]) == truth["ema_shadows"]
    else:
        assert j["variable_averages"] is None and q["sync_enqueue"] == j["sync_op"]
    assert j["notes"] == []


@pytest.mark.parametrize(("sample", "resource", "r", "w"), SYNC_CONFIGS, ids=IDS)
def test_detection_needs_no_collections(sample, resource, r, w):
    _, model = built(sample, resource, r, w)
    with_coll = detect(model.graph, model.collections).to_json()
    without = detect(bare(model), None).to_json()
    assert without == with_coll


def test_detection_hands_its_state_index_to_the_proof_and_the_rules():
    """The index of state writes is built once, by detection, and handed on in the machinery
    (no cache keyed by the graph): the proof and the lint rules read that one."""
    from placeviz.lint.api import LintContext
    from placeviz.rules._common import _state_index
    from placeviz.sync.detect import state_index
    from placeviz.sync.proof import _Prover

    _, model = built("mlp", True, 2, 3)
    graph = bare(model)
    machinery = detect(graph, None)
    assert machinery is not None and machinery.state is not None and machinery.state.graph is graph
    fresh = state_index(graph)
    assert fresh is not machinery.state  # every call builds one: nothing is kept behind the caller's back
    assert (fresh.kind, fresh.writers, fresh.writes) == (machinery.state.kind, machinery.state.writers,
                                                          machinery.state.writes)
    assert _Prover(graph, machinery).idx is machinery.state
    assert _Prover(Graph(graph.graph_def), machinery).idx is not machinery.state  # not that graph's
    pipe = SimpleNamespace(graph=graph, machinery=machinery)
    assert _state_index(LintContext("m", pipe), state_index) is machinery.state
    pipe.machinery = None  # no machinery: built once per context, kept in its rule_cache
    ctx = LintContext("m", pipe)
    built_once = _state_index(ctx, state_index)
    assert ctx.rule_cache["state_index"] is built_once and _state_index(ctx, state_index) is built_once


@pytest.mark.parametrize("sample", PLAIN_SAMPLES)
def test_no_machinery_without_sync_replicas(sample):
    _, model = built(sample, False, 2, 2, sync=False)
    assert detect(model.graph, model.collections) is None
    assert sync_report(model.graph, model.collections) is None


# ----------------------------------------------------------------------------- the proof holds


@pytest.mark.parametrize(("sample", "resource", "r", "w"), SYNC_CONFIGS, ids=IDS)
def test_single_update_holds_on_every_tf_sync_graph(sample, resource, r, w):
    truth, model = built(sample, resource, r, w)
    for graph, trainable in ((model.graph, model.collections.trainable_variables), (bare(model), None)):
        m = detect(graph)
        p = prove(graph, m, trainable=trainable)
        assert p.single_update, p.violations
        assert_paths_are_chains(graph, p)
        names = [v["name"] for v in p.variables]
        assert names == [truth["global_step"], *truth["trainable"]]
        for v in p.variables:
            assert v["verdict"] == "holds" and v["updates_per_step"] == 1 and v["worker_updates"] == 0
            sides = {e["side"] for e in v["evidence"]}
            assert sides == {"worker", "chief"}
        # What runs on every worker, legitimately: metrics, batch-norm moving averages, tables.
        # (ExponentialMovingAverage.apply adds the variables it averages to MOVING_AVERAGE_VARIABLES
        # too, so the trainable ones are subtracted.)
        expected = (set(truth["local_variables"]) - {"sync_rep_local_step"}) | (
            set(truth["moving_average_variables"]) - set(truth["trainable"])) | set(truth["tables"])
        per_worker = {u["variable"] for u in p.per_worker_updates}
        assert per_worker == expected
        assert all(u["runs"] == "once per worker run" and u["runs_per_global_step"] == max(r, w)
                   for u in p.per_worker_updates)
        assert all(u["runs"] != PER_ITERATION for u in p.per_worker_updates)


def test_inception_report_shape():
    _, model = built("inception", False, 2, 3)
    report = sync_report(model.graph, model.collections)
    assert report["single_update"] is True
    assert {"single_update", "variables", "violations", "per_worker_updates", "machinery"} <= set(report)
    v = report["variables"][1]
    assert set(v) >= {"name", "verdict", "evidence"}
    hints = {u["hint"] for u in report["per_worker_updates"]}
    assert hints == {"batch-norm moving average"}
    chief = {u["hint"] for u in report["chief_updates"]}
    assert {"EMA shadow variable", "optimizer slot"} <= chief
