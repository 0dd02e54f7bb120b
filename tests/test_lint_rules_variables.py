"""PV2xx (variables and PS layout): graphs built with tf.compat.v1 that must and must not trigger."""

from __future__ import annotations

from test_lint_rules_fixtures import build, cluster, context, lint, lint_levels, run, tf

MiB = 1 << 20


def _graph(name: str, body, ps_tasks: int = 2, strategy=None, global_step: bool = True,
           worker_device: str = "/job:worker/task:0"):
    """``body(t, gs)`` builds the model under replica_device_setter and returns the loss (or None)."""

    def make():
        t = tf()
        g = t.Graph()
        setter = t.compat.v1.train.replica_device_setter(ps_tasks=ps_tasks, worker_device=worker_device,
                                                         ps_strategy=strategy)
        with g.as_default(), t.compat.v1.device(setter):
            gs = t.compat.v1.train.get_or_create_global_step() if global_step else None
            loss = body(t, gs)
            if loss is not None:
                t.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        return g

    return build(name, make)


def _x(t, n=8):
    return t.compat.v1.placeholder_with_default(t.ones([4, n]), [4, n], name="x")


def test_pv201_pv210_variable_on_worker():
    def body(pin: str | None):
        def f(t, gs):
            x = _x(t)
            w = t.compat.v1.get_variable("w", [8, 2], use_resource=False)
            with t.compat.v1.device(pin):
                v = t.compat.v1.get_variable("v", [8, 2], use_resource=False)
            return t.reduce_sum(t.matmul(x, w) + t.matmul(x, v))

        return f

    # Under an explicit worker device inside the setter: the replica's own task, one copy per worker.
    assert lint(_graph("pv2-own-worker", body("/job:worker/task:0"))) == {("PV201", "v")}
    # Pinned to another worker task: shared, but worker 1 serves it (info).
    assert lint(_graph("pv2-other-worker", body("/job:worker/task:1"))) == {("PV210", "v")}
    assert lint(_graph("pv2-on-ps", body("/job:ps/task:1"))) == set()


def test_pv201_chief_only_state_is_info_on_the_chief():
    """inception_distributed_train.py: `if is_chief:` it averages the losses with an
    ExponentialMovingAverage inside its tf.device('/job:worker/task:%d') scope. Only the chief's graph
    has those variables, on the chief's task; the chief initializes them itself."""

    def body(task: int, trainable: bool):
        def f(t, gs):
            w = t.compat.v1.get_variable("w", [8, 2], use_resource=False)
            loss = t.identity(t.reduce_sum(t.matmul(_x(t), w)), name="loss")
            with t.compat.v1.device(f"/job:worker/task:{task}"):
                if trainable:
                    scale = t.compat.v1.get_variable("scale", [], use_resource=False)
                    loss = loss * scale
                else:
                    averages = t.compat.v1.train.ExponentialMovingAverage(0.9, name="avg")
                    with t.control_dependencies([averages.apply([loss])]):
                        loss = t.identity(loss)
            return loss

        return f

    chief = _graph("pv2-chief-avg", body(0, False))
    assert lint_levels(chief) == {("PV201", "loss/avg", "info")}
    # The same variable in a non-chief worker's graph: its own copy that nobody initializes.
    worker = _graph("pv2-worker1-avg", body(1, False), worker_device="/job:worker/task:1")
    assert lint_levels(worker) == {("PV201", "loss/avg", "error")}
    # A trainable variable on the chief's task is a model parameter every worker trains privately.
    assert lint_levels(_graph("pv2-chief-trainable", body(0, True))) == {("PV201", "scale", "error")}


def test_pv201_skips_local_variables():
    def body(t, gs):
        x = _x(t)
        w = t.compat.v1.get_variable("w", [8, 2], use_resource=False)
        with t.compat.v1.device("/job:worker/task:0"):
            seen = t.compat.v1.get_variable("seen", [], trainable=False, use_resource=False,
                                            collections=[t.compat.v1.GraphKeys.LOCAL_VARIABLES])
        with t.control_dependencies([t.compat.v1.assign_add(seen, 1.0)]):
            return t.reduce_sum(t.matmul(x, w))

    assert lint(_graph("pv2-local-on-worker", body)) == set()


def test_pv202_global_step_not_on_ps():
    def outside():
        t = tf()
        g = t.Graph()
        with g.as_default():
            gs = t.compat.v1.train.get_or_create_global_step()
            with t.compat.v1.device(t.compat.v1.train.replica_device_setter(ps_tasks=2)):
                w = t.compat.v1.get_variable("w", [8, 2], use_resource=False)
                loss = t.reduce_sum(t.matmul(_x(t), w))
                t.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        return g

    assert lint(build("pv2-gs-outside", outside)) == {("PV202", "global_step"), ("PV106", "global_step")}

    def two_steps(t, gs):
        w = t.compat.v1.get_variable("w", [8, 2], use_resource=False)
        with t.compat.v1.variable_scope("other"):
            other = t.compat.v1.get_variable("global_step", [], t.int64, trainable=False, use_resource=False)
        with t.control_dependencies([t.compat.v1.assign_add(other, 1)]):
            return t.reduce_sum(t.matmul(_x(t), w))

    assert lint(_graph("pv2-two-steps", two_steps)) == {("PV202", "other/global_step")}


def _metrics(on_worker: bool):
    def f(t, gs):
        x = _x(t)
        w = t.compat.v1.get_variable("w", [8, 2], use_resource=False)
        logits = t.matmul(x, w)
        if on_worker:
            with t.compat.v1.device(None), t.compat.v1.device("/job:worker/task:0"):
                _, update = t.compat.v1.metrics.mean(logits, name="mean_logit")
        else:
            _, update = t.compat.v1.metrics.mean(logits, name="mean_logit")
        with t.control_dependencies([update]):
            return t.reduce_sum(logits)

    return f


def test_pv203_local_variable_on_ps():
    assert lint(_graph("pv2-metric-ps", _metrics(False))) == {("PV203", "mean_logit/total"),
                                                               ("PV203", "mean_logit/count")}
    assert lint(_graph("pv2-metric-worker", _metrics(True))) == set()


def test_pv204_ps_load_imbalance():
    def body(order):
        def f(t, gs):
            x = _x(t, 1024)
            out = 0.0
            for name, shape in order:  # round-robin after global_step (ps:0): ps:1, ps:0, ps:1, ...
                v = t.compat.v1.get_variable(name, shape, use_resource=False)
                out += t.reduce_sum(t.matmul(x, v) if shape[0] == 1024 else v)
            return out

        return f

    big = [1024, 4096]  # 16 MiB
    unbalanced = [("big1", big), ("small1", [4]), ("big2", big), ("small2", [4])]  # both big on ps:1
    balanced = [("big1", big), ("big2", big), ("small1", [4]), ("small2", [4])]
    assert lint(_graph("pv2-unbalanced", body(unbalanced))) == {("PV204", "big1")}
    assert lint(_graph("pv2-balanced", body(balanced))) == set()
    # The same layout below the size that matters is not reported; a stricter ratio reports the other one.
    assert lint(_graph("pv2-unbalanced", body(unbalanced)), thresholds={"ps-imbalance-min-bytes": "1GiB"}) == set()


def _unplaced(name: str, resource: bool):
    """Two 16 MiB variables and a bias, built without a device setter (placed by ``--ps-tasks``)."""

    def make():
        t = tf()
        v1 = t.compat.v1
        g = t.Graph()
        with g.as_default():
            gs = v1.train.get_or_create_global_step()
            x = _x(t, 1024)
            w1 = v1.get_variable("w1", [1024, 4096], use_resource=resource)
            w2 = v1.get_variable("w2", [1024, 4096], use_resource=resource)
            b = v1.get_variable("b", [4096], use_resource=resource)
            loss = t.reduce_sum(t.matmul(x, w1) + t.matmul(x, w2) + b)
            v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        return g

    return build(name, make)


def test_pv204_pv207_count_the_ps_tasks_of_ps_tasks_option():
    """`--ps-tasks 2 --strategy greedy`: byte_size_load_fn weighs a resource variable's VarHandleOp by
    its DT_RESOURCE handle, 0 bytes in TF 2.x, so every variable lands on ps:0 and ps:1 idles."""
    resource = _unplaced("pv2-unplaced-resource", True)
    findings = {(f.rule, f.node, f.severity): f for f in run(context(resource, ps_tasks=2, strategy="greedy"))}
    assert set(findings) == {("PV204", "w1", "warning"), ("PV207", None, "info")}
    assert "/job:ps/task:1: 0 B" in findings["PV204", "w1", "warning"].message
    # The advice names the cause and does not recommend the strategy that caused it.
    suggestion = findings["PV204", "w1", "warning"].suggestion
    assert "--strategy greedy's doing" in suggestion and "0 bytes" in suggestion and "use round-robin" in suggestion
    assert "hosts no variables" in findings["PV207", None, "info"].message
    assert "--strategy greedy's doing" in findings["PV207", None, "info"].suggestion
    # Round-robin deals the same variables to both tasks; greedy sizes ref variables (VariableV2) right.
    assert lint(resource, ps_tasks=2) == set()
    assert lint(_unplaced("pv2-unplaced-ref", False), ps_tasks=2, strategy="greedy") == set()


def test_pv207_needs_a_stated_ps_count():
    """Without --cluster or --ps-tasks the tasks a placed graph names are all the rule can see."""
    from test_lint_rules_fixtures import RULES

    model = _graph("pv2-one-task", lambda t, gs: t.reduce_sum(
        t.compat.v1.get_variable("w", [8, 2], use_resource=False)), ps_tasks=1)  # built for one PS task
    assert context(model).missing(RULES["PV207"].RULE) == ["ps-count"]
    ctx = context(model, ps_tasks=2)  # linted with --ps-tasks 2: ps:1 exists and hosts nothing
    assert ctx.missing(RULES["PV207"].RULE) == []
    assert {(f.rule, f.node) for f in run(ctx)} == {("PV207", None)}


def test_pv205_oversized_unpartitioned_variable():
    def body(partitioned: bool):
        def f(t, gs):
            ids = t.constant([1, 7, 300000], name="ids")
            part = t.compat.v1.fixed_size_partitioner(4) if partitioned else None
            emb = t.compat.v1.get_variable("emb", [1 << 20, 32], partitioner=part, use_resource=False)  # 128 MiB
            return t.reduce_sum(t.nn.embedding_lookup(emb, ids))

        return f

    def with_adam(t, gs):
        emb = t.compat.v1.get_variable("emb", [1 << 20, 32], use_resource=False)
        loss = t.reduce_sum(t.nn.embedding_lookup(emb, t.constant([1, 2])))
        t.compat.v1.train.AdamOptimizer().minimize(loss, global_step=gs)  # slots emb/Adam, emb/Adam_1: not again
        return None

    # 128 MiB on one task is also a PS imbalance (the other task holds the global step only).
    assert lint(_graph("pv2-huge", body(False))) == {("PV205", "emb"), ("PV204", "emb")}
    assert lint(_graph("pv2-huge-adam", with_adam)) == {("PV205", "emb"), ("PV204", "emb")}
    assert lint(_graph("pv2-huge-partitioned", body(True))) == set()


def test_pv206_colocated_partition_shards():
    from placeviz.sample_graphs.strategies import GreedyLoadBalancingStrategy, byte_size_load_fn

    def body(t, gs):
        w = t.compat.v1.get_variable("w", [1024, 256], use_resource=False)        # 1 MiB: greedy -> ps:0
        emb = t.compat.v1.get_variable("emb", [1000, 8], use_resource=False,       # both shards -> ps:1
                                       partitioner=t.compat.v1.fixed_size_partitioner(2))
        return t.reduce_sum(w) + t.reduce_sum(t.nn.embedding_lookup(emb, t.constant([1, 999])))

    def greedy():
        return GreedyLoadBalancingStrategy(2, byte_size_load_fn)

    assert lint(_graph("pv2-shards-greedy", body, strategy=greedy())) == {("PV206", "emb/part_1")}
    assert lint(_graph("pv2-shards-rr", body)) == set()


def test_pv207_idle_ps_task():
    def body(t, gs):
        return t.reduce_sum(t.matmul(_x(t), t.compat.v1.get_variable("w", [8, 2], use_resource=False)))

    model = _graph("pv2-two-ps", body)
    assert lint(model, cluster_spec=cluster(ps=3, workers=1)) == {("PV207", None)}
    assert lint(model, cluster_spec=cluster(ps=2, workers=1)) == set()


def test_pv208_compute_on_ps():
    def body(pin: str):
        def f(t, gs):
            w = t.compat.v1.get_variable("w", [8, 2], use_resource=False)
            with t.compat.v1.device(pin):
                return t.reduce_sum(t.matmul(_x(t), w, name="ps_matmul"))

        return f

    assert lint(_graph("pv2-matmul-ps", body("/job:ps/task:0"))) == {("PV208", "ps_matmul")}
    assert lint(_graph("pv2-matmul-worker", body("/job:worker/task:0"))) == set()


def test_pv209_dense_update_of_sparse_variable():
    def make(dense: bool, optimizer: str = "sgd"):
        def builder():
            t = tf()
            g = t.Graph()
            with g.as_default(), t.compat.v1.device(t.compat.v1.train.replica_device_setter(ps_tasks=2)):
                gs = t.compat.v1.train.get_or_create_global_step()
                emb = t.compat.v1.get_variable("emb", [1000, 8], use_resource=False)
                w = t.compat.v1.get_variable("w", [8, 1], use_resource=False)
                loss = t.reduce_sum(t.matmul(t.nn.embedding_lookup(emb, t.constant([1, 5, 7])), w))
                opt = (t.compat.v1.train.AdamOptimizer() if optimizer == "adam"
                       else t.compat.v1.train.GradientDescentOptimizer(0.1))
                grads = opt.compute_gradients(loss)
                if dense:
                    grads = [(t.convert_to_tensor(gr), v) for gr, v in grads]
                opt.apply_gradients(grads, global_step=gs)
            return g

        return builder

    assert lint(build("pv2-dense-sgd", make(True))) == {
        ("PV209", "GradientDescent/update_emb/ApplyGradientDescent")}
    assert lint(build("pv2-sparse-sgd", make(False))) == set()
    # Sparse Adam updates emb with a dense AssignSub but its slots with ScatterAdd: not densified.
    assert lint(build("pv2-sparse-adam", make(False, "adam"))) == set()
    assert lint(build("pv2-dense-adam", make(True, "adam"))) == {("PV209", "Adam/update_emb/ApplyAdam")}
