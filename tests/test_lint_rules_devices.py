"""PV1xx (devices and colocation): graphs built with tf.compat.v1 that must and must not trigger."""

from __future__ import annotations

from test_lint_rules_fixtures import build, cluster, context, edit_devices, lint, lint_levels, run, tf


def _setter(ps_tasks=2):
    return tf().compat.v1.train.replica_device_setter(ps_tasks=ps_tasks, worker_device="/job:worker/task:0")


def _mlp(name: str, body=None, ps_tasks: int = 2):
    """A small training graph under replica_device_setter; ``body(x)`` adds the case's ops."""

    def make():
        t = tf()
        g = t.Graph()
        with g.as_default(), t.compat.v1.device(_setter(ps_tasks)):
            gs = t.compat.v1.train.get_or_create_global_step()
            x = t.compat.v1.placeholder_with_default(t.ones([4, 8]), [4, 8], name="x")
            w = t.compat.v1.get_variable("w", [8, 2], use_resource=False)
            h = t.matmul(x, w, name="logits")
            if body is not None:
                h = body(t, x, h)
            loss = t.reduce_mean(h * h, name="loss")
            t.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        return g

    return build(name, make)


def test_pv101_malformed_device():
    good = _mlp("pv1-base")
    bad = edit_devices(good, {"logits": "/job:worker/tsk:0"})
    assert lint(bad) == {("PV101", "logits")}
    assert lint(good) == set()


def test_pv102_device_not_in_cluster():
    model = _mlp("pv1-three-ps", ps_tasks=3)  # built for 3 ps tasks: global_step ps:0, w ps:1
    assert lint(model, cluster_spec=cluster(ps=1, workers=1)) == {("PV102", "w")}
    # On the cluster it was built for, only the info that ps:2 hosts nothing (2 variables, 3 tasks).
    assert lint(model, cluster_spec=cluster(ps=3, workers=1)) == {("PV207", None)}


def _gpu_matmul(t, x, h):
    with t.compat.v1.device("/gpu:0"):
        return h + t.matmul(x, t.ones([8, 2]), name="gpu_matmul")


def test_pv103_gpu_pin_on_cpu_only_cluster():
    model = _mlp("pv1-gpu", _gpu_matmul)
    # Reported once per distinct device string, at its first node (tf.ones' Const under the pin).
    assert lint(model, cluster_spec=cluster()) == {("PV103", "ones_1")}
    # The same graph on workers with one GPU each. (placeviz's placer cannot place the GPU pin with the
    # op table of a CPU build, so the rule reads the GPU count from its threshold.)
    assert lint(model, cluster_spec=cluster(), thresholds={"gpus-per-worker": 1}) == set()


def _cpu_pin(device: str):
    def body(t, x, h):
        with t.compat.v1.device(device):
            return h + t.reduce_sum(x, name="pinned_sum")

    return body


def test_pv103_device_types_are_compared_as_tf_compares_them():
    """``/device:cpu:0`` is ``CPU:0`` once Python's DeviceSpec has read it; ``/device:Cpu:0`` names
    no device, and TF's placer refuses it (``tests/test_devices.py::test_requested_device_types_match_tf``
    runs both). PV103 used to upper-case every type and let the second pass."""
    for device, expected in (("/device:cpu:0", set()), ("/device:Cpu:0", {("PV103", "Const")})):
        model = _mlp(f"pv1-type-{device.replace('/', '_').replace(':', '_')}", _cpu_pin(device))
        assert lint(model, cluster_spec=cluster()) == expected, device


def _colocated(conflict: bool):
    def body(t, x, h):
        with t.compat.v1.device("/job:ps/task:0"):
            mean = t.reduce_mean(x, 0, name="mean")
        with t.compat.v1.device("/job:worker/task:0" if conflict else "/job:ps/task:0"):
            std = t.math.reduce_std(x, 0, name="std")
        with t.compat.v1.colocate_with(mean.op), t.compat.v1.colocate_with(std.op):
            normalized = t.math.divide_no_nan(x - mean, std, name="normalized")
        return h + t.reduce_sum(normalized)

    return body


def test_pv104_colocation_conflict():
    bad = lint(_mlp("pv1-coloc-bad", _colocated(True)))
    assert {f for f in bad if f[0] == "PV104"} == {("PV104", "sub"), ("PV104", "normalized")}
    good = lint(_mlp("pv1-coloc-good", _colocated(False)))
    assert not {f for f in good if f[0] in ("PV104", "PV208")}


def test_pv105_localhost_mixed_with_cluster():
    def body(t, x, h):
        with t.compat.v1.device("/job:localhost/replica:0/task:0/device:CPU:0"):
            return h + t.reduce_sum(x, name="local_sum")

    assert lint(_mlp("pv1-localhost", body)) == {("PV105", "Const")}
    assert not lint(_mlp("pv1-base"))


def test_pv106_unplaced_state():
    def make(outside: bool):
        def builder():
            t = tf()
            g = t.Graph()
            with g.as_default():
                if outside:
                    counter = t.compat.v1.get_variable("counter", [], trainable=False, use_resource=False)
                with t.compat.v1.device(_setter()):
                    t.compat.v1.train.get_or_create_global_step()  # a ps job exists
                    x = t.compat.v1.placeholder_with_default(t.ones([4]), [4], name="x")
                    if not outside:
                        counter = t.compat.v1.get_variable("counter", [], trainable=False, use_resource=False)
                    t.compat.v1.assign_add(counter, t.reduce_sum(x), name="count")
            return g

        return builder

    bad = lint(build("pv1-unplaced", make(True)))
    assert bad == {("PV106", "counter"), ("PV201", "counter")}
    assert not lint(build("pv1-placed", make(False)))


def test_pv107_no_kernel_for_device():
    def body(uint8: bool):
        def f(t, x, h):
            dtype = t.uint8 if uint8 else t.float32
            with t.compat.v1.device("/job:worker/task:0/device:CPU:0"):
                a = t.cast(x, dtype)
                m = t.raw_ops.MatMul(a=a, b=t.transpose(a), name="cpu_matmul")
            return h + t.reduce_sum(t.cast(m, t.float32))

        return f

    assert lint(_mlp("pv1-int8", body(True))) == {("PV107", "cpu_matmul")}
    assert not lint(_mlp("pv1-float", body(False)))
    # Soft placement cannot save an op no device type has a kernel for: still an error.
    assert lint_levels(_mlp("pv1-int8", body(True)), soft_placement=True) == {("PV107", "cpu_matmul", "error")}


def _gpu_kernels_judged() -> bool:
    """Whether the shipped op table knows every GPU kernel (generated from a CUDA build); only then
    does PV107 judge GPU pins."""
    from placeviz.ops import load_op_table

    return "GPU" in load_op_table().kernel_device_types_complete


def test_pv108_string_tensor_on_gpu():
    def body(gpu: bool):
        def f(t, x, h):
            with t.compat.v1.device("/job:worker/task:0/device:GPU:0" if gpu else "/job:worker/task:0/device:CPU:0"):
                s = t.strings.as_string(x, name="as_string")
            return h + t.cast(t.strings.length(s)[0, :2], t.float32)

        return f

    no_gpu_kernel = {("PV107", "as_string", "error")} if _gpu_kernels_judged() else set()
    assert lint_levels(_mlp("pv1-str-gpu", body(True))) == {("PV108", "as_string", "warning")} | no_gpu_kernel
    assert not lint(_mlp("pv1-str-cpu", body(False)))


def test_pv108_quiet_under_soft_placement():
    """With allow_soft_placement TF's placer runs a string op that has no GPU kernel on CPU (and one
    that has a GPU kernel keeps strings in host memory): the multi-GPU tower pattern, summaries built
    under tf.device('/gpu:N'), is correct there."""

    def tower(t, x, h):
        with t.compat.v1.device("/job:worker/task:0/device:GPU:0"):
            t.compat.v1.summary.scalar("tower_loss", t.reduce_mean(h))
        return h

    model = _mlp("pv1-gpu-summary", tower)
    judged = _gpu_kernels_judged()  # then PV107 also says the summary and its tag have no GPU kernel
    ops = ("tower_loss", "tower_loss/tags")
    assert lint_levels(model) == {("PV108", n, "warning") for n in ops} | (
        {("PV107", n, "error") for n in ops} if judged else set())
    # Soft placement runs them on the worker's CPU: PV108 has nothing to say, PV107 says where they run.
    soft = run(context(model, soft_placement=True))
    assert {(f.rule, f.node, f.severity) for f in soft} == ({("PV107", n, "info") for n in ops} if judged else set())
    assert all("soft placement runs it on" in f.message for f in soft)
