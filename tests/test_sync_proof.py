"""The single-update proof (placeviz.sync.proof) and the detection it builds on.

Two kinds of graphs:

* hand-built GraphDefs of the SyncReplicas machinery (no TensorFlow), mutated one way at a time to
  break the proof, so the core logic is tested on its own;
* graphs built with TensorFlow's real API (``@pytest.mark.tf``) that break the single-update
  property the ways users do: a second plain optimizer in the worker's train op, a hand-written
  ``assign_add`` on a trainable variable, two SyncReplicasOptimizers (two token queues). Graphs that
  keep the property but update non-trainable state per worker (a while loop, TF1 and TF2 control
  flow) must hold and report ``per_worker_updates``.
"""

from __future__ import annotations

import functools

import pytest

from placeviz.graph import Graph
from placeviz.io import model_from_proto
from placeviz.protos import GraphDef
from placeviz.sync import detect, prove, sync_report
from placeviz.sync.detect import const_ints, state_index
from placeviz.sync.proof import PER_ITERATION, loop_frames

DT_FLOAT, DT_INT32, DT_INT64, DT_STRING = 1, 3, 9, 7


# ----------------------------------------------------------------------------- helpers


def assert_paths_are_chains(graph: Graph, proof) -> None:
    """Every evidence path goes from a run target down through inputs (data or control)."""
    def check(path):
        for a, b in zip(path, path[1:], strict=False):
            ia, ib = graph.index[a], graph.index[b]
            assert any(src == ib for src, _ in graph.inputs_of(ia)), f"{b} is not an input of {a}"

    for v in proof.variables:
        for ev in v["evidence"]:
            check(ev["path"])
    for v in proof.violations:
        check(v.get("path", []))
    for p in proof.per_worker_updates:
        check(p["path"])


def _attr_type(node, key: str, dtype: int) -> None:
    node.attr[key].type = dtype


class Builder:
    """A GraphDef under construction: ``add(name, op, inputs, **attrs)``."""

    def __init__(self):
        self.g = GraphDef()

    def add(self, name: str, op: str, inputs=(), **attrs):
        n = self.g.node.add(name=name, op=op, input=list(inputs))
        for key, value in attrs.items():
            if key in ("T", "dtype", "index_type") or key.endswith("_type"):
                _attr_type(n, key, value)
            elif key in ("component_types", "Tcomponents"):
                n.attr[key].list.type.extend(value)
            elif isinstance(value, str):
                n.attr[key].s = value.encode()
            elif key == "ivalue":  # int Const
                t = n.attr["value"].tensor
                t.dtype = attrs.get("dtype", DT_INT32)
                if isinstance(value, list):
                    t.tensor_shape.dim.add(size=len(value))
                    if t.dtype == DT_INT64:
                        t.int64_val.extend(value)
                    else:
                        t.int_val.extend(value)
                elif t.dtype == DT_INT64:
                    t.int64_val.append(value)
                else:
                    t.int_val.append(value)
        return n

    def graph(self) -> Graph:
        return Graph(self.g)


def sync_graph(*, r=2, tokens=3, shared_name=True, break_with=()) -> Graph:
    """A TF1-style (ref variables) SyncReplicas graph with variables w and b, built by hand.

    ``break_with``: names of mutations that break (or stress) the proof.
    """
    b = Builder()
    add = b.add
    add("global_step", "VariableV2", dtype=DT_INT64)
    add("global_step/read", "Identity", ["global_step"], T=DT_INT64)
    add("x", "Const", dtype=DT_FLOAT)
    for v in ("w", "b"):
        add(v, "VariableV2", dtype=DT_FLOAT)
        add(f"{v}/read", "Identity", [v], T=DT_FLOAT)
        add(f"grad_{v}", "Mul", ["x", f"{v}/read"], T=DT_FLOAT)
    add("NoOp", "NoOp")
    add("sync_rep_local_step", "VariableV2", ["^NoOp"], dtype=DT_INT64)
    add("sync_rep_local_step/read", "Identity", ["sync_rep_local_step"], T=DT_INT64)
    add("lr", "Const", dtype=DT_FLOAT)
    applies = []
    for k, v in enumerate(("w", "b")):
        acc = f"sync_replicas/conditional_accumulator_{k}"
        kw = {"shared_name": f"{v}:0/grad_accum"} if shared_name else {}
        add(acc, "ConditionalAccumulator", dtype=DT_FLOAT, **kw)
        add(f"{acc}/apply", "AccumulatorApplyGradient", [acc, "sync_rep_local_step/read", f"grad_{v}"],
            dtype=DT_FLOAT)
        applies.append(f"^{acc}/apply")
        add(f"{acc}/num_required", "Const", ivalue=r, dtype=DT_INT32)
        add(f"{acc}/take", "AccumulatorTakeGradient", [acc, f"{acc}/num_required"], dtype=DT_FLOAT)
        add(f"update_{v}", "ApplyGradientDescent", [v, "lr", f"{acc}/take"], T=DT_FLOAT)
        add(f"{acc}/SetGlobalStep", "AccumulatorSetGlobalStep", [acc, "global_step/read"])
    update_deps = ["^update_w", "^update_b"]
    if "double_update" in break_with:
        add("update_w_again", "ApplyGradientDescent", ["w", "lr", "sync_replicas/conditional_accumulator_0/take"],
            T=DT_FLOAT)
        update_deps.append("^update_w_again")
    add("update", "NoOp", update_deps)
    add("value", "Const", ["^update"], ivalue=1, dtype=DT_INT64)
    add("increment", "AssignAdd", ["global_step", "value"], T=DT_INT64)
    if "double_increment" in break_with:
        add("increment_again", "AssignAdd", ["global_step", "value", "^increment"], T=DT_INT64)
    add("sync_token_q", "FIFOQueueV2", component_types=[DT_INT64], shared_name="sync_token_q")
    add("sync_token_q_Dequeue", "QueueDequeueV2", ["sync_token_q", *applies], component_types=[DT_INT64])
    add("Assign_1", "Assign", ["sync_rep_local_step", "sync_token_q_Dequeue"], T=DT_INT64)
    train_deps = ["^Assign_1"]
    dims_deps = [] if "unordered_enqueue" in break_with else [
        "^increment_again" if "double_increment" in break_with else "^increment"]
    add("Fill/dims", "Const", dims_deps, ivalue=[tokens], dtype=DT_INT32)
    add("Fill", "Fill", ["Fill/dims", "global_step/read"], T=DT_INT64, index_type=DT_INT32)
    add("sync_token_q_EnqueueMany", "QueueEnqueueManyV2", ["sync_token_q", "Fill"], Tcomponents=[DT_INT64])
    add("Fill_1/dims", "Const", ivalue=[r], dtype=DT_INT32)
    add("Fill_1", "Fill", ["Fill_1/dims", "global_step/read"], T=DT_INT64, index_type=DT_INT32)
    add("sync_token_q_EnqueueMany_1", "QueueEnqueueManyV2", ["sync_token_q", "Fill_1"], Tcomponents=[DT_INT64])
    add("Assign", "Assign", ["sync_rep_local_step", "global_step/read"], T=DT_INT64)
    add("sync_replicas/group_deps", "NoOp", ["^Assign", "^sync_replicas/conditional_accumulator_0/SetGlobalStep",
                                             "^sync_replicas/conditional_accumulator_1/SetGlobalStep"])
    # model state updated on every worker: a streaming metric and a counter in a while loop
    add("metric/total", "VariableV2", dtype=DT_FLOAT)
    add("metric/AssignAdd", "AssignAdd", ["metric/total", "x"], T=DT_FLOAT)
    train_deps.append("^metric/AssignAdd")
    add("counter", "VariableV2", dtype=DT_FLOAT)
    add("while/Enter", "RefEnter", ["counter"], T=DT_FLOAT, frame_name="while/while_context")
    # every input of a loop body enters the frame (TF's BuildControlFlowInfo refuses mixed frames)
    add("while/Enter_1", "Enter", ["x"], T=DT_FLOAT, frame_name="while/while_context", is_constant=True)
    add("while/AssignAdd", "AssignAdd", ["while/Enter", "while/Enter_1"], T=DT_FLOAT)
    add("while/Exit", "RefExit", ["while/AssignAdd"], T=DT_FLOAT)
    train_deps.append("^while/Exit")
    if "worker_assign_add" in break_with:
        add("AssignAdd_w", "AssignAdd", ["w", "x"], T=DT_FLOAT)
        train_deps.append("^AssignAdd_w")
    if "worker_increment" in break_with:
        add("worker_increment", "AssignAdd", ["global_step", "value"], T=DT_INT64)
        train_deps.append("^worker_increment")
    if "worker_take" in break_with:
        train_deps.append("^sync_replicas/conditional_accumulator_1/take")
    if "worker_enqueue" in break_with:
        train_deps.append("^sync_token_q_EnqueueMany_1")
    if "worker_identity_assign" in break_with:  # the write goes through RefIdentity/Switch forwarders
        add("w/ref", "RefIdentity", ["w"], T=DT_FLOAT)
        add("pred", "Const", dtype=10)
        add("w/switch", "RefSwitch", ["w/ref", "pred"], T=DT_FLOAT)
        add("assign_w_branch", "Assign", ["w/switch:1", "x"], T=DT_FLOAT)
        train_deps.append("^assign_w_branch")
    add("train_op", "NoOp", train_deps)
    return b.graph()


def run(graph: Graph, trainable=None):
    machinery = detect(graph)
    assert machinery is not None
    proof = prove(graph, machinery, trainable=trainable)
    assert_paths_are_chains(graph, proof)
    return machinery, proof


def kinds(proof) -> set[str]:
    return {v["kind"] for v in proof.violations}


# ----------------------------------------------------------------------------- hand-built, no TF


def test_const_ints_reads_int_constants():
    b = Builder()
    b.add("c", "Const", ivalue=[3], dtype=DT_INT32)
    b.add("s", "Const", ivalue=7, dtype=DT_INT64)
    b.add("f", "Const", dtype=DT_FLOAT)
    g = b.graph()
    assert const_ints(g, 0) == [3] and const_ints(g, 1) == [7] and const_ints(g, 2) is None


def test_state_index_follows_forwarders_and_skips_readers():
    g = sync_graph(break_with=("worker_identity_assign",))
    idx = state_index(g)
    n = g.index
    assert idx.writes[n["assign_w_branch"]] == [(n["w"], 0)]  # through RefSwitch:1 and RefIdentity
    assert idx.writes[n["while/AssignAdd"]] == [(n["counter"], 0)]  # through RefEnter
    assert n["w/read"] not in idx.writes and n["sync_token_q_Dequeue"] not in idx.writes
    assert sorted(g.names[w] for w in idx.writers[n["w"]]) == ["assign_w_branch", "update_w"]


@pytest.mark.parametrize("shared_name", [True, False])
def test_hand_built_detection(shared_name):
    g = sync_graph(r=2, tokens=3, shared_name=shared_name)
    m = detect(g)
    assert m is not None
    j = m.to_json()
    assert j["replicas_to_aggregate"] == 2 and j["tokens_per_step"] == 3
    assert j["total_replicas"] == 3 and j["backup_workers"] == 1 and j["total_replicas_exact"] is True
    assert j["global_step"] == "global_step" and j["local_step"] == "sync_rep_local_step"
    assert j["local_step_assign"] == "Assign_1" and j["worker_train_op"] == "train_op"
    assert j["sync_op"] == "sync_token_q_EnqueueMany"
    assert j["init_tokens_ops"] == ["sync_token_q_EnqueueMany_1"]
    assert j["chief_init_op"] == "sync_replicas/group_deps"
    (q,) = j["token_queues"]
    assert q["global_step_increments"] == ["increment"] and q["init_tokens"] == [2]
    assert q["local_step_init_ops"] == ["Assign"]
    accs = {a["variable"]: a for a in j["accumulators"]}
    assert set(accs) == {"w", "b"}
    assert accs["w"]["update_ops"] == ["update_w"] and accs["w"]["num_required"] == [2]
    assert accs["w"]["variable_from"] == ("shared_name+structure" if shared_name else "structure")


def test_hand_built_proof_holds_and_reports_per_worker_updates():
    g = sync_graph()
    m, p = run(g)
    assert p.single_update, p.violations
    assert [v["name"] for v in p.variables] == ["global_step", "w", "b"]
    assert all(v["verdict"] == "holds" and v["updates_per_step"] == 1 for v in p.variables)
    w = p.variable("w")
    sides = {e["side"]: e for e in w["evidence"]}
    assert sides["worker"]["path"] == ["train_op", "Assign_1", "sync_token_q_Dequeue",
                                       "sync_replicas/conditional_accumulator_0/apply"]
    assert sides["chief"]["path"][0] == "sync_token_q_EnqueueMany"
    assert sides["chief"]["path"][-1] == "update_w"
    upd = {u["variable"]: u for u in p.per_worker_updates}
    assert set(upd) == {"metric/total", "counter"}
    assert upd["metric/total"]["runs"] == "once per worker run" and upd["metric/total"]["runs_per_global_step"] == 3
    assert upd["counter"]["runs"] == PER_ITERATION and upd["counter"]["loop_frame"] == "while/while_context"
    frames = loop_frames(g)
    # An Exit is in its loop's frame; its consumers are in the parent frame (control_flow.cc).
    assert frames[g.index["while/AssignAdd"]] == "while/while_context" == frames[g.index["while/Exit"]]
    assert frames[g.index["train_op"]] is None
    j = p.to_json()
    assert j["single_update"] is True and j["schema"] == "placeviz.sync_proof/1"


@pytest.mark.parametrize("trainable", [None, ["w", "b"]])
def test_trainable_default_and_given(trainable):
    _, p = run(sync_graph(), trainable=trainable)
    assert [v["name"] for v in p.variables if v["role"] == "trainable"] == ["w", "b"]


@pytest.mark.parametrize(
    ("mutation", "kind", "culprit"),
    [
        ("worker_assign_add", "worker_updates_trainable", "w"),
        ("worker_identity_assign", "worker_updates_trainable", "w"),
        ("worker_increment", "worker_increments_global_step", "global_step"),
        ("worker_take", "worker_takes_gradient", None),
        ("worker_enqueue", "worker_enqueues_tokens", None),
        ("double_update", "multiple_chief_updates", "w"),
        ("double_increment", "global_step_increments", "global_step"),
        ("unordered_enqueue", "enqueue_not_after_increment", "global_step"),
    ],
)
def test_hand_built_breakages_are_named(mutation, kind, culprit):
    g = sync_graph(break_with=(mutation,))
    _, p = run(g)
    assert not p.single_update
    assert kind in kinds(p), p.violations
    if culprit is not None:
        assert p.variable(culprit)["verdict"] == "violated"
        assert any(v.get("variable") == culprit for v in p.violations_of(kind))
    if kind.startswith("worker_"):
        (v,) = p.violations_of(kind)
        assert v["path"][0] == "train_op"
    others = [v for v in p.variables if v["name"] != culprit]
    if kind.startswith("worker_updates"):
        assert all(v["verdict"] == "holds" for v in others)


def test_unordered_enqueue_also_flags_updates_after_tokens():
    _, p = run(sync_graph(break_with=("unordered_enqueue",)))
    assert {"update_after_tokens", "enqueue_not_after_increment"} <= kinds(p)


def test_no_sync_machinery_gives_none():
    b = Builder()
    b.add("w", "VariableV2", dtype=DT_FLOAT)
    b.add("x", "Const", dtype=DT_FLOAT)
    b.add("update", "ApplyGradientDescent", ["w", "x", "x"], T=DT_FLOAT)
    b.add("q", "FIFOQueueV2", component_types=[DT_INT64])
    b.add("deq", "QueueDequeueV2", ["q"], component_types=[DT_INT64])
    g = b.graph()
    assert detect(g) is None and sync_report(g) is None


def test_accumulator_without_token_queue_is_not_sync():
    b = Builder()
    b.add("acc", "ConditionalAccumulator", dtype=DT_FLOAT)
    assert detect(b.graph()) is None


# ----------------------------------------------------------------------------- TensorFlow-built


def _quiet_tf():
    tf = pytest.importorskip("tensorflow")
    return tf


@functools.cache
def tf_graph(kind: str, resource: bool):
    """A small model under replica_device_setter with SyncReplicasOptimizer, broken per ``kind``."""
    tf = _quiet_tf()
    v1 = tf.compat.v1
    was_v2 = v1.control_flow_v2_enabled()
    if kind == "while_v2":
        v1.enable_control_flow_v2()
    else:
        v1.disable_control_flow_v2()
    try:
        g = tf.Graph()
        with g.as_default(), v1.device(v1.train.replica_device_setter(ps_tasks=2)):
            v1.get_variable_scope().set_use_resource(resource)
            gs = v1.train.get_or_create_global_step()
            x = tf.constant([[1.0, 2.0]])
            w = v1.get_variable("w", [2, 1])
            b = v1.get_variable("b", [1])
            loss = tf.reduce_sum(tf.matmul(x, w) + b)
            opts = []
            if kind.startswith("two_sync"):
                lists = [[w], [b]] if kind == "two_sync" else [[w, b], [w, b]]
                trains = []
                for var_list in lists:
                    opt = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), 2, 2)
                    trains.append(opt.minimize(loss, global_step=gs, var_list=var_list))
                    opts.append(opt)
                train = tf.group(*trains, name="train_op")
            else:
                opt = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), 2, 3)
                opts.append(opt)
                deps = [opt.minimize(loss, global_step=gs)]
                if kind == "second_optimizer":  # (a) another optimizer in the worker's train op
                    deps.append(v1.train.GradientDescentOptimizer(0.1).minimize(loss))
                if kind == "assign_add":  # (b) a hand-written update of a trainable variable
                    deps.append(v1.assign_add(w, tf.ones([2, 1])))
                if kind in ("while", "while_v2"):  # a non-trainable counter bumped per loop iteration
                    c = v1.get_variable("loop_counter", [], trainable=False,
                                        initializer=v1.zeros_initializer())

                    def body(i):
                        with tf.control_dependencies([v1.assign_add(c, 1.0)]):
                            return i + 1

                    deps.append(v1.while_loop(lambda i: i < 3, body, [tf.constant(0)]))
                with tf.control_dependencies(deps):
                    train = tf.no_op(name="train_op")
            for opt in opts:
                v1.train.add_queue_runner(opt.get_chief_queue_runner())
                opt.get_init_tokens_op()
                opt.ready_for_local_init_op.mark_used()
            v1.add_to_collection(v1.GraphKeys.TRAIN_OP, train)
            meta = v1.train.export_meta_graph(graph=g)
    finally:
        if was_v2:
            v1.enable_control_flow_v2()
        else:
            v1.disable_control_flow_v2()
    return model_from_proto(f"tf:{kind}", "metagraph", meta)


def tf_proof(kind: str, resource: bool, with_collections: bool):
    model = tf_graph(kind, resource)
    coll = model.collections if with_collections else None
    machinery = detect(model.graph, coll)
    assert machinery is not None
    trainable = coll.trainable_variables if coll else None
    proof = prove(model.graph, machinery, trainable=trainable)
    assert_paths_are_chains(model.graph, proof)
    return proof


BOTH = [(r, c) for r in (False, True) for c in (True, False)]


@pytest.mark.tf
@pytest.mark.parametrize(("resource", "with_collections"), BOTH)
def test_tf_plain_sync_holds(resource, with_collections):
    p = tf_proof("plain", resource, with_collections)
    assert p.single_update, p.violations
    assert [v["name"] for v in p.variables] == ["global_step", "w", "b"]
    assert p.replicas_to_aggregate == 2 and p.tokens_per_step == 3 and p.backup_workers == 1


@pytest.mark.tf
@pytest.mark.parametrize(("resource", "with_collections"), BOTH)
def test_tf_second_optimizer_in_train_op_is_violation(resource, with_collections):
    p = tf_proof("second_optimizer", resource, with_collections)
    assert not p.single_update
    bad = p.violations_of("worker_updates_trainable")
    assert {v["variable"] for v in bad} == {"w", "b"}
    op = "ResourceApplyGradientDescent" if resource else "ApplyGradientDescent"
    assert all(v["op"].startswith("GradientDescent_1/") and op in v["message"] for v in bad)
    assert all(v["path"][0] == "train_op" for v in bad)
    assert p.variable("global_step")["verdict"] == "holds"  # minimize() without global_step


@pytest.mark.tf
@pytest.mark.parametrize(("resource", "with_collections"), BOTH)
def test_tf_hand_written_assign_add_is_violation(resource, with_collections):
    p = tf_proof("assign_add", resource, with_collections)
    assert not p.single_update
    (v,) = p.violations
    assert v["kind"] == "worker_updates_trainable" and v["variable"] == "w"
    assert ("AssignAddVariableOp" if resource else "AssignAdd") in v["message"]
    assert p.variable("w")["verdict"] == "violated" and p.variable("b")["verdict"] == "holds"


@pytest.mark.tf
@pytest.mark.parametrize(("resource", "with_collections"), BOTH)
def test_tf_two_sync_optimizers_are_violation(resource, with_collections):
    p = tf_proof("two_sync", resource, with_collections)
    assert not p.single_update
    assert {"multiple_token_queues", "global_step_increments"} <= kinds(p)
    assert len(p.sync_ops) == 2
    assert any("share shared_name 'sync_token_q'" in w for w in p.warnings)


@pytest.mark.tf
@pytest.mark.parametrize("resource", [False, True])
def test_tf_two_sync_optimizers_on_the_same_variables(resource):
    p = tf_proof("two_sync_same", resource, True)
    assert {"multiple_token_queues", "global_step_increments", "multiple_chief_updates"} <= kinds(p)
    assert {v["variable"] for v in p.violations_of("multiple_chief_updates")} == {"w", "b"}
    assert any("share shared_name 'w:0/grad_accum'" in w for w in p.warnings)


@pytest.mark.tf
@pytest.mark.parametrize(("kind", "resource"), [("while", False), ("while", True), ("while_v2", True)])
def test_tf_per_iteration_update_in_while_loop_holds(kind, resource):
    p = tf_proof(kind, resource, False)
    assert p.single_update, p.violations
    (u,) = p.per_worker_updates
    assert u["variable"] == "loop_counter" and u["runs"] == PER_ITERATION
    assert u["runs_per_global_step"] is None
    if kind == "while":
        assert u["loop_frame"] == "while/while_context"
    else:
        assert u["op_type"] == "While"
