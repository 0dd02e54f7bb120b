"""Tests of placeviz.sample_graphs: every sample built with TF's real API in every placement/sync mode.

Graphs are built once per (sample, configuration) and cached for the module. The expected
placements are recomputed independently from the GraphDef (node order, op types, attrs), following
the replica_device_setter / GreedyLoadBalancingStrategy rules of docs/tf-behaviours.md, "replica_device_setter".
"""

from __future__ import annotations

import functools
import math
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from placeviz.sample_graphs import (
    SAMPLES,
    BuildOptions,
    SampleInfo,
    SyncCollections,
    build_graph,
    build_meta_graph,
)

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
queue_runner_pb2 = pytest.importorskip("tensorflow.core.protobuf.queue_runner_pb2")

REPO = Path(__file__).resolve().parents[1]
REQUIRED_SAMPLES = ("mlp", "inception", "wide_deep", "lstm", "hashtable", "transformer", "misconfigured")

CONFIGS = {
    "unplaced": BuildOptions(),
    "rr2": BuildOptions(ps_tasks=2),
    "greedy3": BuildOptions(ps_tasks=3, ps_strategy="greedy"),
    "sync": BuildOptions(ps_tasks=2, sync_replicas=True, replicas_to_aggregate=2, total_replicas=3),
    "resource": BuildOptions(ps_tasks=2, resource_variables=True),
}
PLACED = ("rr2", "greedy3", "sync", "resource")
BIG_CONFIGS = ("unplaced", "sync", "greedy3")
WORKER = "/job:worker/task:0"

# replica_device_setter's STANDARD_PS_OPS (docs/tf-behaviours.md).
PS_OPS = frozenset(
    {
        "Variable", "VariableV2", "AutoReloadVariable", "MutableHashTable", "MutableHashTableV2",
        "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2", "MutableDenseHashTable",
        "MutableDenseHashTableV2", "VarHandleOp", "BoostedTreesEnsembleResourceHandleOp",
        "BoostedTreesQuantileStreamResourceHandleOp", "ResourceConditionalAccumulator",
        "DecisionTreeResource",
    }
)  # fmt: skip
# DataType enum -> bytes, written out here rather than asking TF (DT_FLOAT, DT_DOUBLE, DT_INT32,
# DT_INT64 and their _REF variants).
DTYPE_BYTES = {1: 4, 2: 8, 3: 4, 9: 8, 101: 4, 102: 8, 103: 4, 109: 8}

# Devices a sample pins itself, so they appear even in an unplaced graph.
MODEL_PINS = {
    "lstm": {"/device:CPU:0"},  # the embedding, as ptb_word_lm.py
    "misconfigured": {"/job:ps/task:0", "/job:worker/task:0", "/device:GPU:0"},
}
# Variables whose gradient is IndexedSlices (embedding lookups): SparseConditionalAccumulator.
SPARSE_GRAD_VARS = {
    "wide_deep": r"(linear/weights|dnn/input_from_feature_columns/item_id_embedding/weights)/part_\d+",
    "lstm": r"Model/embedding",
    "hashtable": r"embedding/weights",
}


# --------------------------------------------------------------------------- helpers


@functools.cache
def graph(sample: str, config: str) -> tf.Graph:
    return build_graph(sample, CONFIGS[config])


@functools.cache
def graph_def(sample: str, config: str):
    return graph(sample, config).as_graph_def()


def nodes_by_name(gd) -> dict:
    return {n.name: n for n in gd.node}


def input_names(node) -> list[str]:
    return [i.lstrip("^").split(":")[0] for i in node.input]


def closure(gd, roots) -> set[str]:
    """Names of the nodes a run of ``roots`` needs (data and control inputs, transitively)."""
    by_name = nodes_by_name(gd)
    seen: set[str] = set()
    stack = [r.split(":")[0] for r in roots]
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(input_names(by_name[name]))
    return seen


def colocation(node) -> list[str]:
    return [c.decode() for c in node.attr["_class"].list.s]


def colocated_elsewhere(node) -> bool:
    groups = colocation(node)
    return bool(groups) and groups != [f"loc:@{node.name}"]


def variable_bytes(node) -> int:
    """byte_size_load_fn recomputed from the NodeDef: resource handles weigh 0 in TF 2.21."""
    if node.op != "VariableV2":
        return 0
    dims = [d.size for d in node.attr["shape"].shape.dim]
    return DTYPE_BYTES[node.attr["dtype"].type] * math.prod(dims)


def replay_setter(gd, num_tasks: int, greedy: bool, graph_as_default: bool) -> list[tuple[str, str, int]]:
    """Replays the ps strategy calls in creation order; returns (node, device, expected task) misses.

    A ps op calls the strategy when the setter sees it with no job or the ps job (so its final job
    is ps), or when it was created under colocate_with (optimizer slots, EMA shadows, the SyncReplicas
    local step) with the setter restored by init_scope. TF 2.21 restores it for the local step only
    when the graph was entered with as_default(); slots and EMA shadows are created inside an outer
    init_scope, which always restores it.
    """
    loads = np.zeros(num_tasks)
    counter = 0
    misses = []
    for node in gd.node:
        if node.op not in PS_OPS:
            continue
        spec = tf.DeviceSpec.from_string(node.device)
        if colocated_elsewhere(node):
            if node.name == "sync_rep_local_step" and not graph_as_default:
                continue
        elif spec.job != "ps":
            continue
        if greedy:
            task = int(np.argmin(loads))
            loads[task] += variable_bytes(node)
        else:
            task = counter % num_tasks
            counter += 1
        # A colocated op takes its device from the colocation; an accumulator is built under
        # tf.device(var.device), whose task wins over the strategy's.
        if not colocated_elsewhere(node) and node.op != "ResourceConditionalAccumulator":
            if spec.task != task:
                misses.append((node.name, node.device, task))
    return misses


def global_step_increment(gd) -> str:
    """Name of the op that increments global_step (the wrapped optimizer's final op)."""
    (name,) = [
        n.name
        for n in gd.node
        if n.op in ("AssignAdd", "AssignAddVariableOp") and input_names(n)[0] == "global_step"
    ]
    return name


def is_variable_update(op_type: str) -> bool:
    return re.match(r"(Resource)?(Sparse)?Apply", op_type) is not None


def run_steps(g: tf.Graph, steps: int, target: str = "", soft_placement: bool = False) -> dict:
    """Initializes and runs ``steps`` training steps; returns losses and variable snapshots."""
    config = tf.compat.v1.ConfigProto(allow_soft_placement=soft_placement)
    # Grappler off: the same configuration placeviz compares against, and much faster on 10k nodes.
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    (train_op,) = g.get_collection(tf.compat.v1.GraphKeys.TRAIN_OP)
    trainable = g.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    global_step = tf.compat.v1.train.get_global_step(g)
    with tf.compat.v1.Session(target, graph=g, config=config) as sess:
        sess.run(g.get_collection(tf.compat.v1.GraphKeys.INIT_OP))
        sess.run(g.get_collection(tf.compat.v1.GraphKeys.LOCAL_INIT_OP))
        before = sess.run(trainable)
        losses = [float(sess.run(train_op.outputs[0])) for _ in range(steps)]
        after = sess.run(trainable)
        step = int(sess.run(global_step))
        local = sess.run(g.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES))
    return {"losses": losses, "before": before, "after": after, "global_step": step, "local": local}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def local_cluster():
    """In-process servers on 127.0.0.1: 2 ps tasks and 1 worker; yields the worker's target."""
    spec = tf.train.ClusterSpec(
        {"ps": [f"127.0.0.1:{free_port()}" for _ in range(2)], "worker": [f"127.0.0.1:{free_port()}"]}
    )
    servers = [tf.distribute.Server(spec, job_name="ps", task_index=i) for i in range(2)]
    worker = tf.distribute.Server(spec, job_name="worker", task_index=0)
    yield worker.target
    del servers  # in-process servers live until the process exits


def params(samples, configs):
    """(sample, config) pairs; transformer (10k+ nodes, ~5 s a build) only in BIG_CONFIGS."""
    return [
        pytest.param(s, c, id=f"{s}-{c}")
        for s in samples
        for c in configs
        if s != "transformer" or c in BIG_CONFIGS
    ]


# --------------------------------------------------------------------------- registry and API


def test_import_does_not_load_tensorflow():
    code = (
        "import sys, placeviz.sample_graphs, placeviz.sample_graphs.options\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
        "print(sorted(placeviz.sample_graphs.SAMPLES))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert "mlp" in out.stdout


def test_registry_lists_every_sample():
    assert set(REQUIRED_SAMPLES) <= set(SAMPLES)
    for name, info in SAMPLES.items():
        assert isinstance(info, SampleInfo)
        assert info.name == name
        assert info.summary and "\n" not in info.summary
        assert info.module == f"placeviz.sample_graphs.{name}"


def test_unknown_sample_raises_key_error():
    with pytest.raises(KeyError) as err:
        build_graph("no_such_sample")
    assert err.value.args == ("no_such_sample",)


def test_invalid_options_are_rejected():
    with pytest.raises(ValueError):
        BuildOptions(ps_strategy="random")
    with pytest.raises(ValueError):
        BuildOptions(ps_tasks=-1)
    assert BuildOptions(replicas_to_aggregate=2).num_replicas == 2
    assert BuildOptions(replicas_to_aggregate=2, total_replicas=3).num_replicas == 3


# --------------------------------------------------------------------------- every sample, every config


@pytest.mark.parametrize(("sample", "config"), params(REQUIRED_SAMPLES, CONFIGS))
def test_builds_with_training_collections(sample, config):
    options = CONFIGS[config]
    g = graph(sample, config)
    gd = graph_def(sample, config)
    keys = tf.compat.v1.GraphKeys
    assert g.get_collection(keys.GLOBAL_VARIABLES)
    assert g.get_collection(keys.TRAINABLE_VARIABLES)
    (train_op,) = g.get_collection(keys.TRAIN_OP)
    assert isinstance(train_op, tf.Operation) and train_op.name == "train_op"
    assert len(g.get_collection(keys.INIT_OP)) == len(g.get_collection(keys.LOCAL_INIT_OP)) == 1

    local_names = {v.op.name for v in g.get_collection(keys.LOCAL_VARIABLES)}
    assert ("sync_rep_local_step" in local_names) == options.sync_replicas

    op_types = {n.op for n in gd.node}
    if options.resource_variables:
        assert "VariableV2" not in op_types and "VarHandleOp" in op_types
    else:
        assert "VarHandleOp" not in op_types and "VariableV2" in op_types
    # Every step of a non-sync graph increments the global step.
    if not options.sync_replicas:
        assert global_step_increment(gd) in closure(gd, ["train_op"])


@pytest.mark.parametrize("sample", REQUIRED_SAMPLES)
def test_unplaced_graph_has_only_the_models_own_pins(sample):
    gd = graph_def(sample, "unplaced")
    devices = {n.device for n in gd.node} - {""}
    assert devices == MODEL_PINS.get(sample, set())


@pytest.mark.parametrize(("sample", "config"), params(REQUIRED_SAMPLES, PLACED))
def test_setter_puts_state_on_ps_tasks(sample, config):
    options = CONFIGS[config]
    gd = graph_def(sample, config)
    ps_device = re.compile(rf"/job:ps/task:[0-{options.ps_tasks - 1}](/device:CPU:0)?")
    for node in gd.node:
        if node.op not in PS_OPS and node.op != "SparseConditionalAccumulator":
            continue
        if node.name == "sync_rep_local_step":
            assert node.device == WORKER  # colocated with the worker's local NoOp
        elif sample == "misconfigured" and node.name == "output_bias":
            assert node.device == ""  # created outside the setter scope
        else:
            assert ps_device.fullmatch(node.device), (node.name, node.op, node.device)
    assert nodes_by_name(gd)["train_op"].device == WORKER


@pytest.mark.parametrize(("sample", "config"), params(REQUIRED_SAMPLES, PLACED))
def test_strategy_choices_match_independent_replay(sample, config):
    options = CONFIGS[config]
    gd = graph_def(sample, config)
    greedy = options.ps_strategy == "greedy"
    assert replay_setter(gd, options.ps_tasks, greedy, graph_as_default=True) == []


def test_greedy_spreads_bytes_unlike_round_robin():
    gd_greedy = graph_def("wide_deep", "greedy3")
    by_task: dict[str, int] = {}
    for node in gd_greedy.node:
        if node.op == "VariableV2":
            by_task[node.device] = by_task.get(node.device, 0) + variable_bytes(node)
    # The three 3334x8 embedding shards dominate and end up on three different tasks.
    shards = [n for n in gd_greedy.node if re.fullmatch(r"dnn/.*embedding/weights/part_\d", n.name)]
    assert len(shards) == 3 and len({n.device for n in shards}) == 3
    assert len(by_task) == 3 and max(by_task.values()) < 0.5 * sum(by_task.values())


# --------------------------------------------------------------------------- the greedy port itself


def test_greedy_strategy_and_byte_size_load_fn():
    from placeviz.sample_graphs.strategies import GreedyLoadBalancingStrategy, byte_size_load_fn

    g = tf.Graph()
    with g.as_default():
        strategy = GreedyLoadBalancingStrategy(2, byte_size_load_fn)
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=2, ps_strategy=strategy)
        with tf.compat.v1.device(setter):
            big = tf.compat.v1.Variable(tf.zeros([1000, 10]), name="big", use_resource=False)
            s = tf.compat.v1.Variable(1.0, name="s", use_resource=False)
            m = tf.compat.v1.Variable(tf.zeros([10], tf.float64), name="m", use_resource=False)
            small = tf.compat.v1.Variable(tf.zeros([5]), name="small", use_resource=False)
            res = tf.compat.v1.Variable(tf.zeros([100]), name="res", use_resource=True)
        assert [v.device for v in (big, s, m, small)] == [
            "/job:ps/task:0",
            "/job:ps/task:1",
            "/job:ps/task:1",
            "/job:ps/task:1",
        ]
        assert res.device == "/job:ps/task:1"  # argmin: 40000 vs 104
        assert list(strategy.loads) == [40000.0, 104.0]  # resource handles weigh 0 in TF 2.21
        assert byte_size_load_fn(s.op) == 4
        with pytest.raises(ValueError):
            byte_size_load_fn(tf.split(tf.zeros([4]), 2)[0].op)  # two outputs
        with pytest.raises(ValueError):
            byte_size_load_fn(tf.compat.v1.placeholder(tf.float32, [None]).op)  # unknown shape


def test_greedy_ties_go_to_the_lowest_task():
    from placeviz.sample_graphs.strategies import GreedyLoadBalancingStrategy

    strategy = GreedyLoadBalancingStrategy(3, lambda op: 0)
    assert [strategy(None) for _ in range(4)] == [0, 0, 0, 0]
    strategy = GreedyLoadBalancingStrategy(3, lambda op: 1)
    assert [int(strategy(None)) for _ in range(5)] == [0, 1, 2, 0, 1]


# --------------------------------------------------------------------------- SyncReplicas


@pytest.mark.parametrize("sample", REQUIRED_SAMPLES)
def test_sync_replicas_machinery(sample):
    options = CONFIGS["sync"]
    g = graph(sample, "sync")
    gd = graph_def(sample, "sync")
    by_name = nodes_by_name(gd)
    keys = tf.compat.v1.GraphKeys

    # One accumulator per trainable variable, on its device, sparse for embedding gradients.
    accumulators = {
        n.attr["shared_name"].s.decode(): n for n in gd.node if n.op.endswith("ConditionalAccumulator")
    }
    trainable = g.get_collection(keys.TRAINABLE_VARIABLES)
    assert len(accumulators) == len(trainable)
    sparse = re.compile(SPARSE_GRAD_VARS.get(sample, r"(?!)"))
    for var in trainable:
        acc = accumulators[f"{var.name}/grad_accum"]
        expected = (
            "SparseConditionalAccumulator"
            if sparse.fullmatch(var.op.name)
            else "ResourceConditionalAccumulator"
        )
        assert acc.op == expected, var.op.name
        if var.device:
            assert acc.device == var.device
        else:  # misconfigured's output_bias: its accumulator is a ps op, so the setter takes it
            assert acc.device.startswith("/job:ps/task:")
        assert acc.attr["reduction_type"].s == b"MEAN"
    if sample in SPARSE_GRAD_VARS:
        assert any(n.op == "SparseConditionalAccumulator" for n in accumulators.values())

    # Token queue with the global step, the local step on the worker.
    global_step = by_name["global_step"]
    queue = by_name["sync_token_q"]
    assert queue.op == "FIFOQueueV2" and queue.device == global_step.device + "/device:CPU:*"
    local_step = by_name["sync_rep_local_step"]
    assert local_step.device == WORKER

    # The chief queue runner (in QUEUE_RUNNERS) runs the sync op; the other ops are recorded.
    (qr,) = g.get_collection(keys.QUEUE_RUNNERS)
    assert qr.queue.name == "sync_token_q"
    (sync_op,) = g.get_collection(SyncCollections.SYNC_OP)
    assert qr.enqueue_ops == [sync_op]
    (init_tokens,) = g.get_collection(SyncCollections.INIT_TOKENS_OP)
    (chief_init,) = g.get_collection(SyncCollections.CHIEF_INIT_OP)
    (local_init,) = g.get_collection(SyncCollections.LOCAL_STEP_INIT_OP)
    (ready,) = g.get_collection(SyncCollections.READY_FOR_LOCAL_INIT_OP)
    (queue_op,) = g.get_collection(SyncCollections.TOKEN_QUEUE)
    assert queue_op.name == "sync_token_q" and isinstance(ready, tf.Tensor)
    assert local_init.type == "Assign" and local_init.inputs[1].op.name == "global_step/read"

    def fill_count(enqueue_name: str) -> int:
        (fill,) = [by_name[i] for i in input_names(by_name[enqueue_name]) if by_name[i].op == "Fill"]
        dims = tf.make_ndarray(by_name[input_names(fill)[0]].attr["value"].tensor)
        return int(dims[0])

    assert init_tokens.type == "QueueEnqueueManyV2"
    assert fill_count(init_tokens.name) == options.replicas_to_aggregate
    assert fill_count("sync_token_q_EnqueueMany") == max(options.replicas_to_aggregate, options.num_replicas)

    # Workers' step: gradients into the accumulators and a token; never an update (2.4).
    train = closure(gd, ["train_op"])
    sync = closure(gd, [sync_op.name])
    take = {n.name for n in gd.node if n.op.endswith("TakeGradient")}
    apply_grad = {n.name for n in gd.node if n.op.endswith("AccumulatorApplyGradient")}
    assert len(take) == len(apply_grad) == len(trainable)
    assert apply_grad <= train and not take & train
    assert not any(is_variable_update(by_name[n].op) for n in train)
    assert "sync_token_q_EnqueueMany" not in train and global_step_increment(gd) not in train
    # The chief's sync op: every take, the update and the global-step increment, then the tokens.
    assert take <= sync and global_step_increment(gd) in sync and "sync_token_q_EnqueueMany" in sync
    chief = closure(gd, [chief_init.name])
    assert len({n for n in chief if by_name[n].op.endswith("SetGlobalStep")}) == len(trainable)


def test_sync_inception_averages_variables_in_the_sync_op():
    keys = tf.compat.v1.GraphKeys
    for config in ("sync", "rr2"):
        g = graph("inception", config)
        gd = graph_def("inception", config)
        # ema.apply() adds what it averages to MOVING_AVERAGE_VARIABLES, hence the set.
        averaged = {v.op.name for v in g.get_collection(keys.TRAINABLE_VARIABLES)}
        averaged |= {v.op.name for v in g.get_collection(keys.MOVING_AVERAGE_VARIABLES)}
        shadows = {
            n.name.removesuffix("/ExponentialMovingAverage")
            for n in gd.node
            if n.op == "VariableV2" and n.name.endswith("/ExponentialMovingAverage")
        }
        assert shadows == averaged
        ema_updates = {
            n.name for n in gd.node if n.name.startswith("ExponentialMovingAverage/AssignMovingAvg")
        }
        assert ema_updates
        if config == "sync":
            (sync_op,) = g.get_collection(SyncCollections.SYNC_OP)
            assert ema_updates <= closure(gd, [sync_op.name])
            assert not ema_updates & closure(gd, ["train_op"])
        else:
            assert ema_updates <= closure(gd, ["train_op"])
        # Batch-norm statistics are updated by every step (UPDATE_OPS), also by sync workers.
        statistics = [n for n in averaged if n.endswith(("/moving_mean", "/moving_variance"))]
        update_ops = g.get_collection(keys.UPDATE_OPS)
        assert len(update_ops) == len(statistics) > 0
        assert {t.op.name for t in update_ops} <= closure(gd, ["train_op"])  # (Tensors)


def test_sync_graph_has_backup_worker_tokens():
    g = build_graph(
        "mlp", BuildOptions(ps_tasks=1, sync_replicas=True, replicas_to_aggregate=3, total_replicas=5)
    )
    gd = g.as_graph_def()
    by_name = nodes_by_name(gd)
    dims = by_name[input_names(by_name["Fill"])[0]]
    assert int(tf.make_ndarray(dims.attr["value"].tensor)[0]) == 5  # tokens_per_step = max(W, R)
    num_required = [n for n in gd.node if n.name.endswith("num_required")]
    assert num_required and all(int(tf.make_ndarray(n.attr["value"].tensor)) == 3 for n in num_required)


@pytest.mark.parametrize("sample", [s for s in REQUIRED_SAMPLES if s != "transformer"])
def test_non_sync_graph_has_no_sync_machinery(sample):
    gd = graph_def(sample, "rr2")
    assert not [n.name for n in gd.node if "Accumulator" in n.op or n.name.startswith("sync_")]


# --------------------------------------------------------------------------- per-sample structure


def test_lstm_builds_a_tf1_while_loop():
    op_types = {n.op for n in graph_def("lstm", "unplaced").node}
    assert {"Enter", "Merge", "Switch", "NextIteration", "Exit", "LoopCond"} <= op_types
    assert not op_types & {"While", "StatelessWhile"}


def test_transformer_is_big():
    assert len(graph_def("transformer", "unplaced").node) >= 10_000


def test_wide_deep_partitions_embeddings():
    names = [n.name for n in graph_def("wide_deep", "unplaced").node if n.op == "VariableV2"]
    shards = [
        n
        for n in names
        if re.fullmatch(r"dnn/input_from_feature_columns/item_id_embedding/weights/part_\d", n)
    ]
    assert len(shards) == 3
    assert any(re.fullmatch(r"linear/weights/part_\d", n) for n in names)
    op_types = {n.op for n in graph_def("wide_deep", "unplaced").node}
    assert {"SparseApplyAdagrad", "SparseSegmentSum", "DynamicPartition", "ParallelDynamicStitch"} <= op_types


def test_hashtable_tables_are_on_ps_and_inserted_by_the_step():
    gd = graph_def("hashtable", "rr2")
    tables = {n.name: n.device for n in gd.node if n.op in ("MutableHashTableV2", "MutableDenseHashTableV2")}
    assert set(tables) == {"feature_id_table", "feature_counts"}
    assert all(d.startswith("/job:ps/task:") for d in tables.values())
    inserts = {n.name for n in gd.node if n.op == "LookupTableInsertV2"}
    assert len(inserts) == 2 and inserts <= closure(gd, ["train_op"])


def test_misconfigured_mistakes_are_in_the_graph():
    by_name = nodes_by_name(graph_def("misconfigured", "rr2"))
    assert by_name["output_bias"].device == ""
    assert by_name["GradientDescent/update_output_bias/ApplyGradientDescent"].device == ""
    assert by_name["feature_mean"].device == "/job:ps/task:0"
    assert by_name["feature_std"].device == WORKER
    assert set(colocation(by_name["normalized"])) == {"loc:@feature_mean", "loc:@feature_std"}
    gpu = [n for n in by_name.values() if n.device == WORKER + "/device:GPU:0"]
    assert any(n.op == "MatMul" for n in gpu)


def test_scale_grows_the_models():
    for sample in ("mlp", "lstm", "hashtable"):
        small = graph(sample, "unplaced").get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
        big = build_graph(sample, BuildOptions(scale=2)).get_collection(
            tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES
        )
        assert len(big) > len(small), sample


def test_cluster_option_matches_ps_tasks():
    cluster = {"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222", "w1:2222"]}
    with_cluster = build_graph("mlp", BuildOptions(cluster=cluster)).as_graph_def()
    assert [(n.name, n.device) for n in with_cluster.node] == [
        (n.name, n.device) for n in graph_def("mlp", "rr2").node
    ]
    # No ps job in the cluster: replica_device_setter returns None, nothing is placed.
    no_ps = build_graph("mlp", BuildOptions(cluster={"worker": ["w0:2222"]})).as_graph_def()
    assert all(n.device == "" for n in no_ps.node)


# --------------------------------------------------------------------------- MetaGraphDef export


@pytest.mark.parametrize("sample", [s for s in REQUIRED_SAMPLES if s != "transformer"])
def test_meta_graph_keeps_collections(sample):
    meta = build_meta_graph(sample, CONFIGS["sync"])
    collections = meta.collection_def
    for key in ("variables", "trainable_variables", "local_variables", "train_op", "queue_runners"):
        assert key in collections, key
    assert list(collections["train_op"].node_list.value) == ["train_op"]
    (qr_bytes,) = collections["queue_runners"].bytes_list.value
    qr = queue_runner_pb2.QueueRunnerDef.FromString(qr_bytes)
    assert qr.queue_name == "sync_token_q"
    assert list(qr.enqueue_op_name) == list(collections[SyncCollections.SYNC_OP].node_list.value)
    assert {qr.close_op_name, qr.cancel_op_name} == {"sync_token_q_Close", "sync_token_q_Close_1"}
    for key in (SyncCollections.SYNC_OP, SyncCollections.INIT_TOKENS_OP, SyncCollections.CHIEF_INIT_OP):
        assert len(collections[key].node_list.value) == 1
    if sample == "inception":
        assert collections["update_ops"].node_list.value
        assert collections["moving_average_variables"].bytes_list.value
    names = {n.name for n in meta.graph_def.node}
    assert "sync_token_q" in names and "train_op" in names


# --------------------------------------------------------------------------- graph_as_default=False


def test_global_default_graph_mode_changes_round_robin_counter(tmp_path):
    """graph_as_default=False (TF1 script style) runs in a subprocess: it disables eager for good."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from placeviz.sample_graphs import BuildOptions, build_graph
        for sample in ("mlp", "lstm"):
            options = BuildOptions(ps_tasks=2, sync_replicas=True, replicas_to_aggregate=2,
                                   total_replicas=3, graph_as_default=False)
            g = build_graph(sample, options)
            assert g is __import__("tensorflow").compat.v1.get_default_graph()
            open({str(tmp_path)!r} + "/" + sample + ".pb", "wb").write(g.as_graph_def().SerializeToString())
        """
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    for sample, metric in (("mlp", "accuracy/total"), ("lstm", "mean_cost/total")):
        gd_global = tf.compat.v1.GraphDef.FromString((tmp_path / f"{sample}.pb").read_bytes())
        gd_default = graph_def(sample, "sync")
        assert [(n.name, n.op) for n in gd_global.node] == [(n.name, n.op) for n in gd_default.node]
        assert replay_setter(gd_global, 2, greedy=False, graph_as_default=False) == []
        assert replay_setter(gd_global, 2, greedy=False, graph_as_default=True) != []
        # The local step moved the counter only under as_default(): later variables shift by one.
        assert nodes_by_name(gd_global)[metric].device != nodes_by_name(gd_default)[metric].device


# --------------------------------------------------------------------------- running a step


@pytest.mark.parametrize("sample", [s for s in REQUIRED_SAMPLES if s != "misconfigured"])
def test_train_step_runs_in_a_local_session(sample):
    steps = 1 if sample == "transformer" else 2  # transformer: 10k nodes, one step is enough
    result = run_steps(graph(sample, "unplaced"), steps)
    assert all(np.isfinite(result["losses"]))
    assert result["global_step"] == steps
    changed = [not np.array_equal(b, a) for b, a in zip(result["before"], result["after"], strict=True)]
    assert sum(changed) >= 0.9 * len(changed)  # (ReLU units that never fire may stay put)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sample", "config"),
    [
        *params([s for s in REQUIRED_SAMPLES if s != "transformer"], ["resource"]),
        ("misconfigured", "unplaced"),
    ],
)
def test_train_step_runs_on_a_local_cluster(local_cluster, sample, config):
    """Placed graphs (and the misconfigured one, with soft placement) run on 2 ps + 1 worker."""
    soft = sample == "misconfigured"
    result = run_steps(graph(sample, config), 2, target=local_cluster, soft_placement=soft)
    assert all(np.isfinite(result["losses"])) and result["global_step"] == 2
    if sample == "misconfigured":
        # Without soft placement the colocation conflict (and /gpu:0) is fatal.
        with pytest.raises(tf.errors.InvalidArgumentError, match="colocate|GPU"):
            run_steps(graph(sample, config), 1, target=local_cluster, soft_placement=False)


def test_metric_variables_count_the_steps():
    result = run_steps(graph("mlp", "unplaced"), 3)
    total, count = result["local"]
    assert count == 3 * 8 and 0 <= total <= count  # accuracy over 3 batches of 8
