"""Distributed MNIST training with model replicas (TF's dist_test trainer), ported.

Source: tensorflow/tensorflow: tensorflow/tools/dist_test/python/mnist_replica.py
(stored revision 1024d00b6394c6e173caae85ed0e578c1c1da683, the SyncReplicasOptimizer "V2" form:
``total_num_replicas=``/``name=``, ``local_step_init_op``/``chief_init_op``/
``ready_for_local_init_op`` handed to ``tf.train.Supervisor``).

What the program builds: an int32 ``global_step`` (``tf.Variable(0, ...)``) and the hidden-layer
softmax model (``hid_w``, ``hid_b``, ``sm_w``, ``sm_b``), all under
``replica_device_setter(worker_device=..., ps_device="/job:ps/cpu:0", cluster=cluster)``; Adam,
optionally wrapped in ``SyncReplicasOptimizer(..., name="mnist_sync_replicas")``; with
``--sync_replicas`` the chief-queue-runner and init-tokens ops; ``global_variables_initializer``
and a ``tf.train.Supervisor`` (ready/ready-for-local-init/saver ops), still inside the device
scope.

Changes (nothing else differs from the program):

* Flags become constants: ``task_index`` 0 (the chief), ``hidden_units`` 100 -> 8,
  ``IMAGE_PIXELS`` 28 -> 4 (4x4 images), ``replicas_to_aggregate`` left at its default (None ->
  ``num_workers``), ``--sync_replicas`` is ``build``'s ``sync``. ``--ps_hosts``/
  ``--worker_hosts`` become a 2-ps, 3-worker cluster on 127.0.0.1.
* ``worker_device``: the stored revision derives it from ``--num_gpus`` (default 1:
  ``"/job:worker/task:%d/gpu:%d"``, which raises "number of gpus is less than number of workers"
  for more than one worker; 0: ``".../cpu:0"``); this port passes
  ``worker_device="/job:worker/task:%d" % task_index`` (the form of the program's other
  revisions), as the corpus brief asks.
* The stored revision has a stray ``elif:`` (a syntax error) between ``local_init_op = ...`` and
  ``ready_for_local_init_op = opt.ready_for_local_init_op``; all four statements sit in the
  ``if FLAGS.sync_replicas:`` block here, as in the program's other revisions.
* ``is_chief`` is ``build``'s argument (the program: ``task_index == 0``); the task index stays 0,
  so the setter is the same for both. It only picks ``chief_init_op`` over ``local_step_init_op``
  (both exist in the graph either way) and the Supervisor's summary writer: the placed graph does
  not depend on it (``CHIEF_ONLY`` is False). (A non-chief Supervisor also checks that every
  variable has a device, so ``placed=False, is_chief=False`` raises in TF, as it would for the
  program run without its device setter.)
* Removed: MNIST download/reading (the model is fed through its placeholders), ``tf.train.Server``,
  ``ConfigProto``, ``sv.prepare_or_wait_for_session`` and everything that runs a session (training
  loop, validation). The Supervisor is constructed (which builds its ops and finalizes the graph)
  with ``tempfile.mkdtemp()`` as its logdir, as the program does; after export its summary writer
  is closed and the directory removed.
* ``tf.*`` -> ``tf.compat.v1.*`` (``placeholder``, ``Variable``, ``truncated_normal``,
  ``nn.xw_plus_b``, ``log``, ``train.AdamOptimizer``, ``train.SyncReplicasOptimizer``,
  ``global_variables_initializer``, ``train.Supervisor``, ``train.ClusterSpec``,
  ``train.replica_device_setter``, ``device``). Under ``tf.compat.v1.disable_v2_behavior()`` (as the corpus
  builds) ``tf.compat.v1.Variable`` makes ref variables (``VariableV2``), as TF1 did.
* ``placed=False`` drops the ``tf.device(replica_device_setter(...))`` scope (nothing else in
  the program names a device).

``SOFT_PLACEMENT``: the program's session config sets ``allow_soft_placement=True``.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile

SOURCE = "tensorflow/tensorflow: tensorflow/tools/dist_test/python/mnist_replica.py"

TASK_INDEX = 0
HIDDEN_UNITS = 8
LEARNING_RATE = 0.01
IMAGE_PIXELS = 4
PS_HOSTS = ["127.0.0.1:2222", "127.0.0.1:2223"]
WORKER_HOSTS = ["127.0.0.1:2224", "127.0.0.1:2225", "127.0.0.1:2226"]
CLUSTER = {"ps": PS_HOSTS, "worker": WORKER_HOSTS}

SETTER = {
    "worker_device": "/job:worker/task:%d" % TASK_INDEX,  # noqa: UP031 - as the program writes it
    "ps_device": "/job:ps/cpu:0",
    "cluster": CLUSTER,
}
SYNC = {"replicas_to_aggregate": len(WORKER_HOSTS), "total_replicas": len(WORKER_HOSTS),
        "name": "mnist_sync_replicas"}
CHIEF_ONLY = False
SYNC_PROGRAM_CHANGES = {
    "names": ["group_deps", "init_1", "init_all_tables", "sync_rep_local_step/Assign"],
    "why": "in sync mode the program gives its Supervisor local_init_op=opt.local_step_init_op, so the "
           "Supervisor's default local-init group (group_deps, init_1, init_all_tables) is never built "
           "and the local step's initializer is never a control input (_has_manual_control_dependencies)",
}
SOFT_PLACEMENT = True


def build(placed: bool, sync: bool, is_chief: bool = True):
    import tensorflow as tf

    v1 = tf.compat.v1
    sync_replicas = sync
    replicas_to_aggregate_flag = None

    g = tf.Graph()
    with g.as_default():
        # Construct the cluster
        ps_spec = PS_HOSTS
        worker_spec = WORKER_HOSTS

        # Get the number of workers.
        num_workers = len(worker_spec)

        cluster = v1.train.ClusterSpec({
            "ps": ps_spec,
            "worker": worker_spec})

        worker_device = "/job:worker/task:%d" % TASK_INDEX  # noqa: UP031 - as the program writes it
        # The device setter will automatically place Variables ops on separate
        # parameter servers (ps). The non-Variable ops will be placed on the workers.
        device_scope = (v1.device(v1.train.replica_device_setter(
            worker_device=worker_device,
            ps_device="/job:ps/cpu:0",
            cluster=cluster)) if placed else contextlib.nullcontext())
        with device_scope:
            global_step = v1.Variable(0, name="global_step", trainable=False)

            # Variables of the hidden layer
            hid_w = v1.Variable(
                v1.truncated_normal(
                    [IMAGE_PIXELS * IMAGE_PIXELS, HIDDEN_UNITS],
                    stddev=1.0 / IMAGE_PIXELS),
                name="hid_w")
            hid_b = v1.Variable(v1.zeros([HIDDEN_UNITS]), name="hid_b")

            # Variables of the softmax layer
            sm_w = v1.Variable(
                v1.truncated_normal(
                    [HIDDEN_UNITS, 10],
                    stddev=1.0 / math.sqrt(HIDDEN_UNITS)),
                name="sm_w")
            sm_b = v1.Variable(v1.zeros([10]), name="sm_b")

            # Ops: located on the worker specified with task_index
            x = v1.placeholder(tf.float32, [None, IMAGE_PIXELS * IMAGE_PIXELS])
            y_ = v1.placeholder(tf.float32, [None, 10])

            hid_lin = v1.nn.xw_plus_b(x, hid_w, hid_b)
            hid = v1.nn.relu(hid_lin)

            y = v1.nn.softmax(v1.nn.xw_plus_b(hid, sm_w, sm_b))
            cross_entropy = -v1.reduce_sum(y_ * v1.log(v1.clip_by_value(y, 1e-10, 1.0)))

            opt = v1.train.AdamOptimizer(LEARNING_RATE)

            if sync_replicas:
                if replicas_to_aggregate_flag is None:
                    replicas_to_aggregate = num_workers
                else:
                    replicas_to_aggregate = replicas_to_aggregate_flag

                opt = v1.train.SyncReplicasOptimizer(
                    opt,
                    replicas_to_aggregate=replicas_to_aggregate,
                    total_num_replicas=num_workers,
                    name="mnist_sync_replicas")

            train_step = opt.minimize(cross_entropy, global_step=global_step)  # noqa: F841

            if sync_replicas:
                local_init_op = opt.local_step_init_op
                if is_chief:
                    local_init_op = opt.chief_init_op

                ready_for_local_init_op = opt.ready_for_local_init_op

                # Initial token and chief queue runners required by the sync_replicas mode
                chief_queue_runner = opt.get_chief_queue_runner()  # noqa: F841
                sync_init_op = opt.get_init_tokens_op()  # noqa: F841

            init_op = v1.global_variables_initializer()
            train_dir = tempfile.mkdtemp()

            if sync_replicas:
                sv = v1.train.Supervisor(
                    is_chief=is_chief,
                    logdir=train_dir,
                    init_op=init_op,
                    local_init_op=local_init_op,
                    ready_for_local_init_op=ready_for_local_init_op,
                    recovery_wait_secs=1,
                    global_step=global_step)
            else:
                sv = v1.train.Supervisor(
                    is_chief=is_chief,
                    logdir=train_dir,
                    init_op=init_op,
                    recovery_wait_secs=1,
                    global_step=global_step)

        meta = v1.train.export_meta_graph(graph=g, clear_devices=False)
    if sv.summary_writer is not None:
        sv.summary_writer.close()
    shutil.rmtree(train_dir, ignore_errors=True)
    return meta
