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


def _tf_placement(model, init_ops=(), soft: bool = False):
    """TF's own placer on ``model``'s GraphDef: a session on a loopback cluster of 2 ps and 1 worker
    tasks (2 CPUs each) runs ``init_ops`` then one sink (the whole graph is placed first); its
    placer log gives each node's device."""
    from placeviz.verify.runtime_truth import all_sinks, run_in_subprocess

    data = model.meta_graph.graph_def.SerializeToString()
    sinks = [s for s in all_sinks(data) if s not in init_ops]
    return run_in_subprocess(data, cluster={"ps": 2, "worker": 1}, targets=sinks[:1], init_ops=init_ops,
                             allow_soft_placement=soft, cpus_per_task=2, timeout_s=180)


def _class_after_ref_edge(ref_edge: bool):
    """C is colocated with X (ps:0) and Y (ps:1, no _class). With ``ref_edge`` Y is an Assign of the
    variable V on ps:0: TF's ref-edge step moves Y's request to V's device before the _class step,
    so the groups merge. Without it Y is an ordinary op and the merge fails."""

    def builder():
        t = tf()
        g = t.Graph()
        with g.as_default():
            v = t.raw_ops.VariableV2(shape=[2], dtype=t.float32, name="V")
            value = t.constant([1.0, 2.0], name="value")
            y = t.raw_ops.Assign(ref=v, value=value, name="Y") if ref_edge else t.raw_ops.AddV2(
                x=value, y=value, name="Y")
            x = t.constant([3.0, 4.0], name="X")
            t.raw_ops.AddV2(x=x, y=y, name="C")
            for name, device in (("V", "/job:ps/task:0"), ("value", "/job:ps/task:0"), ("Y", "/job:ps/task:1"),
                                 ("X", "/job:ps/task:0")):
                g.get_operation_by_name(name)._set_device(device)
            g.get_operation_by_name("Y")._clear_attr("_class")  # Assign's own loc:@V
            g.get_operation_by_name("C")._set_attr("_class", t.compat.v1.AttrValue(
                list=t.compat.v1.AttrValue.ListValue(s=[b"loc:@X", b"loc:@Y"])))
        return g

    return build(f"pv1-class-after-ref-{ref_edge}", builder)


def test_pv104_reads_the_placer_after_its_ref_edge_step():
    """Issue 19: PV104 is the placer's answer, not a second merge of the requested devices."""
    placed = _class_after_ref_edge(True)
    truth = _tf_placement(placed)
    assert truth.error is None, truth.error
    assert truth.placer_devices["Y"] == truth.placer_devices["C"] == "/job:ps/replica:0/task:0/device:CPU:0"
    assert not {f for f in lint(placed) if f[0] == "PV104"}

    rejected = _class_after_ref_edge(False)
    truth = _tf_placement(rejected)
    assert truth.error is not None and "Cannot colocate nodes" in truth.error
    assert {f for f in lint(rejected) if f[0] == "PV104"} == {("PV104", "C")}


def test_pv104_follows_the_session_soft_placement():
    """c is colocated with a (worker CPU:0) and b (worker CPU:1): TF rejects the graph, but with
    allow_soft_placement a differing device index merges, so there is nothing to report."""

    def builder():
        t = tf()
        g = t.Graph()
        with g.as_default():
            for name in ("a", "b", "c"):
                t.identity(t.ones([1], name=f"{name}_in"), name=name)
            for name in ("a_in", "a", "b_in", "b", "c_in"):
                device = "/job:worker/task:0/device:CPU:1" if name.startswith("b") else "/job:worker/task:0/device:CPU:0"
                g.get_operation_by_name(name)._set_device(device)
            g.get_operation_by_name("c")._set_attr("_class", t.compat.v1.AttrValue(
                list=t.compat.v1.AttrValue.ListValue(s=[b"loc:@a", b"loc:@b"])))
        return g

    model = build("pv1-class-device-ids", builder)
    assert "Cannot colocate nodes" in (_tf_placement(model).error or "")
    assert {f for f in lint(model) if f[0] == "PV104"} == {("PV104", "c")}
    assert _tf_placement(model, soft=True).error is None
    assert not {f for f in lint(model, soft_placement=True) if f[0] == "PV104"}


def test_pv106_an_exempt_consumer_is_not_anchored_by_its_resource():
    """A StatefulPartitionedCall forwards its resource inputs, so TF's placer does not colocate it with
    the handle (placer.cc's exemption list): unplaced, it lands on the session's task. An
    AssignAddVariableOp reading the same handle goes where the handle is."""

    def builder():
        t = tf()
        g = t.Graph()
        with g.as_default():
            with t.compat.v1.device("/job:ps/task:1"):
                handle = t.raw_ops.VarHandleOp(dtype=t.float32, shape=[2], name="handle")
                one = t.ones([2], name="one")
                t.raw_ops.AssignVariableOp(resource=handle, value=one, name="init")
            t.raw_ops.AssignAddVariableOp(resource=handle, value=one, name="add")  # no device

            @t.function
            def add_one(resource):
                t.raw_ops.AssignAddVariableOp(resource=resource, value=t.ones([2]))
                return t.constant(1.0)

            add_one(handle)  # a StatefulPartitionedCall, no device
        return g

    model = build("pv1-exempt-resource-consumer", builder)
    truth = _tf_placement(model, init_ops=["init"])
    assert truth.error is None, truth.error
    assert truth.placer_devices["add"] == truth.placer_devices["handle"] == "/job:ps/replica:0/task:1/device:CPU:0"
    assert truth.placer_devices["StatefulPartitionedCall"] == "/job:worker/replica:0/task:0/device:CPU:0"
    assert lint(model) == {("PV106", "StatefulPartitionedCall")}


def _class_list(t, *names: str):
    return t.compat.v1.AttrValue(list=t.compat.v1.AttrValue.ListValue(s=[f"loc:@{n}".encode() for n in names]))


def _groups_beyond_own_class():
    """Unplaced variables whose own ``_class`` names only themselves, bound (or not) to a device
    through what TF's placer joins: V by X's ``_class`` with two entries (V and W on ps:1); V2 by
    the ref edge into its Assign, whose ``_class`` names Z on ps:0; U1 and U2 by Y's two entries,
    with nothing placed. Only U1 and U2 land where the session is, together."""

    def builder():
        t = tf()
        g = t.Graph()
        with g.as_default():
            value = t.constant([1.0, 2.0], name="value")
            for name in ("V", "W", "V2", "U1", "U2"):
                v = t.raw_ops.VariableV2(shape=[2], dtype=t.float32, name=name)
                t.raw_ops.Assign(ref=v, value=value, name=f"{name}/Assign")
            t.constant([3.0, 4.0], name="Z")
            t.identity(value, name="X")
            t.identity(value, name="Y")
            for name, device in (("W", "/job:ps/task:1"), ("W/Assign", "/job:ps/task:1"), ("Z", "/job:ps/task:0"),
                                 ("value", "/job:worker/task:0")):
                g.get_operation_by_name(name)._set_device(device)
            g.get_operation_by_name("X")._set_attr("_class", _class_list(t, "V", "W"))
            g.get_operation_by_name("Y")._set_attr("_class", _class_list(t, "U1", "U2"))
            g.get_operation_by_name("V2/Assign")._set_attr("_class", _class_list(t, "Z"))
        return g

    return build("pv1-groups-beyond-own-class", builder)


def test_pv106_reads_the_placers_colocation_groups():
    """Issue 19: PV106 asks the placer's groups whether a node is bound to a placed one, instead
    of reading ``_class`` itself. A read of the variables' own ``_class`` (each names only itself)
    reported V, V2, U1 and U2; TF puts V on ps:1 and V2 on ps:0 (X's second entry, the ref edge),
    and U1 and U2 on one device of the session's task: one group, one finding, at its first
    variable."""
    model = _groups_beyond_own_class()
    assigns = [f"{n}/Assign" for n in ("V", "W", "V2", "U1", "U2")]
    truth = _tf_placement(model, init_ops=assigns)
    assert truth.error is None, truth.error
    placed = truth.placer_devices
    assert placed["V"] == placed["W"] == placed["X"] == "/job:ps/replica:0/task:1/device:CPU:0"
    assert placed["V2"] == placed["Z"] == "/job:ps/replica:0/task:0/device:CPU:0"
    assert placed["U1"] == placed["U2"] == placed["Y"] and placed["U1"].startswith("/job:worker/replica:0/task:0/")
    ours = context(model).pipeline.placement.placement
    index = {n: i for i, n in enumerate(ours.graph.names)}
    assert ours.devices[index["V"]] == placed["V"] and ours.devices[index["V2"]] == placed["V2"]
    assert {f for f in lint(model) if f[0] == "PV106"} == {("PV106", "U1")}


def test_pv106_on_a_graph_that_is_not_placed():
    """A graph whose variables have no job (one op pinned to a worker) is not placed, so lint
    runs no placement; PV106 still reads the placer's groups, from a soft placement on the
    cluster the graph names: the variable is reported once, its initializer and Assign with it."""

    def builder():
        t = tf()
        g = t.Graph()
        with g.as_default():
            w = t.compat.v1.get_variable("w", [2], use_resource=False)
            with t.compat.v1.device("/job:worker/task:0"):
                x = t.ones([2], name="x")
            t.compat.v1.assign_add(w, x, name="upd")
        return g

    model = build("pv1-not-placed", builder)
    assert context(model).pipeline.placement is None
    assert lint(model) == {("PV106", "w")}


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
