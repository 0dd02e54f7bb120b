"""PV3xx (synchronous training): SyncReplicasOptimizer graphs built with tf.compat.v1."""

from __future__ import annotations

from test_lint_rules_fixtures import build, cluster, edit_devices, lint, lint_levels, sample, tf

METRICS = {("PV203", "accuracy/total"), ("PV203", "accuracy/count")}  # the mlp sample's tf.metrics on the PS


def _sync(name: str, variant: str = "good"):
    """A TF1 SyncReplicas chief graph (as inception_distributed_train.py builds it), with one defect."""

    def make():
        t = tf()
        v1 = t.compat.v1
        g = t.Graph()
        with g.as_default():
            outside = v1.get_variable("outside", [2], use_resource=False) if variant == "var-outside" else None
            with v1.device(v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0")):
                gs = v1.train.get_or_create_global_step()
                x = v1.placeholder_with_default(t.ones([4, 8]), [4, 8], name="x")
                w = v1.get_variable("w", [8, 2], use_resource=False)
                b = v1.get_variable("b", [2], use_resource=False)
                logits = t.matmul(x, w) + b + (outside if outside is not None else 0.0)
                loss = t.reduce_mean(logits * logits, name="loss")
                opt = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), 2,
                                                     total_num_replicas=2)
                grads = opt.compute_gradients(loss)
                if variant == "gan":  # a second SyncReplicasOptimizer for b alone (GAN style)
                    train_op = opt.apply_gradients([gv for gv in grads if gv[1] is not b], global_step=gs)
                    opt2 = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1), 2)
                    train_op = t.group(train_op, opt2.apply_gradients([gv for gv in grads if gv[1] is b], gs))
                else:
                    train_op = opt.apply_gradients(grads, global_step=gs)
                if variant == "twice":
                    train_op = t.group(train_op, opt.apply_gradients(grads, global_step=gs))
                if variant == "extra-update":
                    extra = v1.train.GradientDescentOptimizer(0.01).minimize(loss, var_list=[w], name="extra")
                    train_op = t.group(train_op, extra)
                if variant == "worker-step":
                    train_op = t.group(train_op, v1.assign_add(gs, 1, name="count_step"))
                if variant == "worker-runs-collection":  # the workers' op runs TF's TRAIN_OP entry too
                    train_op = t.group(train_op, *v1.get_collection(v1.GraphKeys.TRAIN_OP), name="worker_train")
                if variant != "worker-graph":  # a non-chief worker neither starts nor registers it
                    v1.train.add_queue_runner(opt.get_chief_queue_runner())
                if variant not in ("no-init-tokens", "worker-graph"):
                    opt.get_init_tokens_op()
                if variant != "train-op-collection":
                    v1.get_collection_ref(v1.GraphKeys.TRAIN_OP)[:] = [train_op]
        return g

    return build(f"pv3-{name}", make)


def test_good_sync_graph():
    assert lint(_sync("good")) == set()


def test_pv301_two_sync_optimizers_share_token_queue():
    # ... and both sync ops increment the one global step: it advances twice per step (PV311).
    assert lint(_sync("gan", "gan")) == {("PV301", "sync_token_q_1"), ("PV311", "GradientDescent")}


def test_pv302_apply_gradients_twice():
    findings = lint(_sync("twice", "twice"))
    assert findings == {("PV301", "sync_token_q_1"), ("PV302", "sync_replicas_1/conditional_accumulator"),
                        ("PV302", "sync_replicas_1/conditional_accumulator_1"),
                        # two updates of w and b and two increments per global step
                        ("PV311", "GradientDescent"), ("PV311", "GradientDescent/update_w/ApplyGradientDescent"),
                        ("PV311", "GradientDescent/update_b/ApplyGradientDescent")}


def test_pv303_local_step_on_ps():
    good = _sync("good")
    group = [n.name for n in good.graph_def.node if n.name.startswith("sync_rep_local_step")]
    bad = edit_devices(good, dict.fromkeys(group, "/job:ps/task:0"), clear_colocation=True)
    assert lint(bad) == {("PV303", "sync_rep_local_step")}


def test_pv304_accumulator_not_with_variable():
    assert lint(_sync("var-outside", "var-outside")) == {
        ("PV201", "outside"), ("PV106", "outside"), ("PV304", "sync_replicas/conditional_accumulator")}


def test_pv305_missing_init_tokens():
    # The chief's graph (it registers the chief queue runner) without get_init_tokens_op().
    assert lint_levels(_sync("no-init-tokens", "no-init-tokens")) == {("PV305", "sync_token_q", "warning")}


def test_pv305_non_chief_worker_graph_is_info():
    # make_session_run_hook(is_chief=False) builds neither the init tokens nor the chief queue runner:
    # apart from that op a worker's graph equals the chief's, so the missing op is expected there.
    assert lint_levels(_sync("worker-graph", "worker-graph")) == {("PV305", "sync_token_q", "info")}


def test_pv306_pv307_replicas_vs_cluster():
    model = sample("mlp", sync_replicas=True)  # R = N = 2
    assert lint(model, cluster_spec=cluster(workers=2)) == METRICS
    assert lint(model, cluster_spec=cluster(workers=1)) == METRICS | {
        ("PV306", "sync_replicas/ResourceAccumulatorTakeGradient")}
    assert lint(model, cluster_spec=cluster(workers=3)) == METRICS | {("PV307", "sync_token_q_EnqueueMany")}
    backups = sample("mlp", sync_replicas=True, total_replicas=3)  # N = 3 tokens per step
    assert lint(backups, cluster_spec=cluster(workers=3)) == METRICS
    assert lint(backups, cluster_spec=cluster(workers=2)) == METRICS | {("PV307", "sync_token_q_EnqueueMany")}


def test_pv308_per_worker_updates():
    assert lint(_sync("extra-update", "extra-update")) == {
        ("PV308", "extra/update_w/ApplyGradientDescent")}
    # get_or_create_global_step makes a resource variable: assign_add is an AssignAddVariableOp.
    assert lint(_sync("worker-step", "worker-step")) == {("PV308", "AssignAddVariableOp")}


def test_pv308_accepts_batch_norm_statistics():
    assert lint(sample("inception", sync_replicas=True)) == set()


def test_pv309_global_step_never_incremented():
    def make(with_step: bool):
        def builder():
            t = tf()
            v1 = t.compat.v1
            g = t.Graph()
            with g.as_default(), v1.device(v1.train.replica_device_setter(ps_tasks=2)):
                gs = v1.train.get_or_create_global_step()
                w = v1.get_variable("w", [3], use_resource=False)
                v1.train.GradientDescentOptimizer(0.1).minimize(t.reduce_sum(w * w),
                                                                global_step=gs if with_step else None)
                v1.train.Saver(sharded=True)  # restore ops write the global step: not an increment
            return g

        return builder

    assert lint(build("pv3-no-step", make(False))) == {("PV309", "global_step")}
    assert lint(build("pv3-step", make(True))) == set()


def test_pv310_train_op_collection_runs_chief_update():
    # TF's own export: Optimizer.apply_gradients put the wrapped update in TRAIN_OP; nothing runs it there.
    assert lint_levels(_sync("train-op-collection", "train-op-collection")) == {
        ("PV310", "GradientDescent", "info")}


def test_pv310_worker_train_op_runs_chief_update():
    # The program grouped its train op with the collection and runs that on every worker; PV308 names
    # each update and TakeGradient the workers now run.
    assert lint_levels(_sync("worker-runs-collection", "worker-runs-collection")) == {
        ("PV310", "worker_train", "warning"),
        ("PV308", "GradientDescent", "warning"),
        ("PV308", "GradientDescent/update_w/ApplyGradientDescent", "warning"),
        ("PV308", "GradientDescent/update_b/ApplyGradientDescent", "warning"),
        ("PV308", "sync_replicas/ResourceAccumulatorTakeGradient", "warning"),
        ("PV308", "sync_replicas/ResourceAccumulatorTakeGradient_1", "warning")}
