"""PV4xx (traffic and I/O): graphs built with tf.compat.v1 that must and must not trigger."""

from __future__ import annotations

from test_lint_rules_fixtures import build, lint, lint_levels, tf


def _graph(name: str, body):
    """``body(t, gs)`` returns the loss, built under replica_device_setter(ps_tasks=2); trained with SGD."""

    def make():
        t = tf()
        v1 = t.compat.v1
        g = t.Graph()
        was_v2 = v1.control_flow_v2_enabled()
        v1.disable_control_flow_v2()  # TF1 while loops (Enter/Exit frames), as TF1 programs have
        try:
            with g.as_default(), v1.device(v1.train.replica_device_setter(ps_tasks=2,
                                                                          worker_device="/job:worker/task:0")):
                gs = v1.train.get_or_create_global_step()
                loss = body(t, gs)
                update = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
                with t.control_dependencies([update]):  # the step computes the loss too
                    train_op = t.identity(loss, name="train_op")
                v1.get_collection_ref(v1.GraphKeys.TRAIN_OP)[:] = [train_op.op]
        finally:
            if was_v2:
                v1.enable_control_flow_v2()
        return g

    return build(f"pv4-{name}", make)


def _loop(read_inside: bool):
    def body(t, gs):
        v1 = t.compat.v1
        # A resource variable (each read is a ReadVariableOp, colocated with it on ps:1), not trained
        # here: backprop through the loop would stack the read on the PS, which TF's placer rejects
        # (PV104 reports that "Cannot colocate nodes .../f_acc" graph).
        w = v1.get_variable("w", [16, 16], use_resource=True, trainable=False)
        v = v1.get_variable("v", [4], use_resource=False)
        h0 = v1.placeholder_with_default(t.ones([4, 16]), [4, 16], name="h0")
        w_once = None if read_inside else t.identity(w, name="w_once")

        def step(i, h):
            return i + 1, t.tanh(t.matmul(h, w if read_inside else w_once))

        _, h = v1.while_loop(lambda i, h: i < 10, step, [t.constant(0), h0], name="rnn")
        return t.reduce_sum(h) + t.reduce_sum(v * v)

    return body


def test_pv401_remote_read_in_loop():
    findings = lint(_graph("loop-read-inside", _loop(True)))
    assert findings == {("PV401", "rnn/MatMul/ReadVariableOp")}
    assert lint(_graph("loop-read-once", _loop(False))) == set()


def _dense(t, gs):
    v1 = t.compat.v1
    w = v1.get_variable("w", [512, 512], use_resource=False)  # 1 MiB, on ps:1
    x = v1.placeholder_with_default(t.ones([4, 512]), [4, 512], name="x")
    return t.reduce_sum(t.matmul(x, w, name="logits"))


def test_pv403_cross_task_traffic_report():
    model = _graph("dense", _dense)
    assert lint(model) == set()  # 1 MiB per step: below the default 64 MiB
    findings = lint(model, thresholds={"cross-task-bytes": "512KiB"})
    # ps:1 sends w's value to the worker; the worker sends w's gradient to ps:1.
    assert findings == {("PV403", "w/read"), ("PV403", "gradients/logits_grad/tuple/control_dependency_1")}


def _saver(sharded: bool):
    def make():
        t = tf()
        v1 = t.compat.v1
        g = t.Graph()
        with g.as_default(), v1.device(v1.train.replica_device_setter(ps_tasks=2)):
            gs = v1.train.get_or_create_global_step()          # ps:0
            w = v1.get_variable("w", [8, 2], use_resource=False)  # ps:1
            v1.train.GradientDescentOptimizer(0.1).minimize(t.reduce_sum(w * w), global_step=gs)
            v1.train.Saver(sharded=sharded)
        return g

    return build(f"pv4-saver-{sharded}", make)


def test_pv404_unsharded_saver_multi_ps():
    # Advice, not a defect: Saver()'s (and Supervisor's) default checkpoints correctly, through one device.
    assert lint_levels(_saver(False)) == {("PV404", "save/SaveV2", "info")}
    assert lint(_saver(True)) == set()


def _queue(device: str):
    def body(t, gs):
        v1 = t.compat.v1
        w = v1.get_variable("w", [8, 2], use_resource=False)
        with v1.device(device):
            queue = t.queue.RandomShuffleQueue(100, 10, [t.float32], shapes=[[8]], name="examples")
            enqueue = queue.enqueue_many([t.ones([20, 8])])
        v1.train.add_queue_runner(v1.train.QueueRunner(queue, [enqueue]))
        return t.reduce_sum(t.matmul(queue.dequeue_many(4), w))

    return body


def test_pv405_input_pipeline_on_ps():
    assert lint(_graph("queue-ps", _queue("/job:ps/task:0"))) == {("PV405", "examples")}
    assert lint(_graph("queue-worker", _queue("/job:worker/task:0"))) == set()


def _cached(read_after_update: bool, cache: str = "/job:worker/task:0"):
    def make():
        t = tf()
        v1 = t.compat.v1
        g = t.Graph()
        with g.as_default(), v1.device(v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0")):
            gs = v1.train.get_or_create_global_step()
            with v1.variable_scope("m", caching_device=cache):
                w = v1.get_variable("w", [8, 2], use_resource=False)  # m/w/read is built on the cache device
            x = v1.placeholder_with_default(t.ones([4, 8]), [4, 8], name="x")
            loss = t.reduce_sum(t.matmul(x, w))
            update = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
            with t.control_dependencies([update]):
                after = t.reduce_sum(w, name="w_after") if read_after_update else t.identity(loss, name="done")
            v1.get_collection_ref(v1.GraphKeys.TRAIN_OP)[:] = [after.op]
        return g

    return build(f"pv4-cached-{read_after_update}-{cache}", make)


def test_pv402_caching_device_hazard():
    assert lint(_cached(True)) == {("PV402", "w_after")}
    assert lint(_cached(False)) == set()
    # caching_device on a PS task: the cache is as remote as the variable (m/w is on ps:1).
    assert lint(_cached(False, "/job:ps/task:0")) == {("PV402", "m/w/read")}
