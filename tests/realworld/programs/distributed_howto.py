"""The example trainer of TensorFlow's "Distributed TensorFlow" how-to, ported.

Source: tensorflow/tensorflow: tensorflow/docs_src/deploy/distributed.md (stored revision
11461ab3bb368ff98e6bb09984ce0d19d935a277; the same program later lives in tensorflow/docs:
site/en/r1/deploy/distributed.md), section "Putting it all together: example trainer program".

What the program builds, for a worker task: under
``tf.device(tf.train.replica_device_setter(worker_device="/job:worker/task:%d" % task_index,
cluster=cluster))`` the model ("Build model... loss = ..."), an int64 global step from
``tf.contrib.framework.get_or_create_global_step()`` and
``train_op = tf.train.AdagradOptimizer(0.01).minimize(loss, global_step=global_step)``; then,
outside the device scope, ``hooks=[tf.train.StopAtStepHook(last_step=1000000)]`` and
``tf.train.MonitoredTrainingSession(master=server.target, is_chief=(task_index == 0),
checkpoint_dir="/tmp/train_logs", hooks=hooks)``.

Changes (nothing else differs from the program):

* The model, which the how-to leaves open, is a small softmax classifier with one hidden layer
  (4 inputs, 8 ReLU units, 3 classes, fed through placeholders ``x``/``y_``) whose variables are
  resource variables (``tf.compat.v1.get_variable(..., use_resource=True)``: ``hid_w``, ``hid_b``,
  ``sm_w``, ``sm_b``), built before the global step as the how-to orders it.
* ``tf.contrib.framework.get_or_create_global_step()`` ->
  ``tf.compat.v1.train.get_or_create_global_step()`` (same function, moved: an int64 variable;
  under ``tf.compat.v1.disable_v2_behavior()``, as the corpus builds, a ref ``VariableV2``).
  Other ``tf.*`` -> ``tf.compat.v1.*`` (``device``, ``train.replica_device_setter``,
  ``train.ClusterSpec``, ``train.AdagradOptimizer``, ``train.StopAtStepHook``, ...).
* Flags become constants: ``task_index`` 0, ``--ps_hosts``/``--worker_hosts`` a 2-ps, 2-worker
  cluster on 127.0.0.1 (the how-to's example command line starts two of each). ``is_chief`` is
  ``build``'s argument (the program: ``task_index == 0``), the task index staying 0 so the setter
  is the same for chief and worker.
* Synchronous variant (``sync=True``): the how-to's comment sends synchronous training to
  ``tf.train.SyncReplicasOptimizer``, whose documented use is wrapping the optimizer and passing
  ``opt.make_session_run_hook(is_chief)`` to ``MonitoredTrainingSession``'s hooks. So the Adagrad
  optimizer is wrapped in ``SyncReplicasOptimizer(opt, replicas_to_aggregate=2,
  total_num_replicas=2)`` (default name) inside the device scope, and its hook is appended to
  ``hooks`` after the ``StopAtStepHook``.
* No ``tf.train.Server`` and no session: ``MonitoredTrainingSession`` is replaced by
  :func:`_monitored_training_session`, which builds what ``MonitoredTrainingSession`` adds to the
  graph before it would connect, in TF's order (``tf.compat.v1.train.MonitoredTrainingSession``
  of TF 2.21, no distribute-coordinator worker context): on the chief, with ``checkpoint_dir``
  set, the chief-only ``StepCounterHook``, ``SummarySaverHook`` and ``CheckpointSaverHook``
  (TF's defaults: every 100 steps, every 100 steps, every 600 s) ahead of the program's hooks,
  on a worker only the program's hooks; then ``MonitoredSession`` calls every hook's ``begin()``
  (the global-step read ``global_step/cond``/``add``; the SyncReplicas hook's init-tokens op on
  the chief) and the session creator finalizes a default ``tf.compat.v1.train.Scaffold()``
  (``init_op``, ``ready_op``, ``ready_for_local_init_op``, ``local_init_op``, ``summary_op``
  (none: the model writes no summaries) and the sharded default ``Saver``; the
  ``CheckpointSaverHook`` uses that scaffold's saver, no saver of its own). The hooks' summary
  writer goes to a temporary ``checkpoint_dir`` instead of ``/tmp/train_logs``; after export it is
  closed and the directory removed. (Checked with TF 2.21: for the unplaced chief builds, plain
  and sync, the GraphDef and collections equal those left by a real
  ``MonitoredTrainingSession(master="", ...)`` opened on a local session.)
* ``placed=False`` drops the ``tf.device(replica_device_setter(...))`` scope (nothing else in
  the program names a device).

``CHIEF_ONLY``: the chief-only hooks and the SyncReplicas hook's chief ops exist only on the chief.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile

SOURCE = "tensorflow/tensorflow: tensorflow/docs_src/deploy/distributed.md"

TASK_INDEX = 0
PS_HOSTS = ["127.0.0.1:2222", "127.0.0.1:2223"]
WORKER_HOSTS = ["127.0.0.1:2224", "127.0.0.1:2225"]
CLUSTER = {"ps": PS_HOSTS, "worker": WORKER_HOSTS}
MASTER = "grpc://" + WORKER_HOSTS[TASK_INDEX]  # server.target of the task's in-process server

SETTER = {"worker_device": "/job:worker/task:%d" % TASK_INDEX, "cluster": CLUSTER}  # noqa: UP031 - as the program writes it
SYNC = {"replicas_to_aggregate": 2, "total_replicas": 2}
CHIEF_ONLY = True

N_INPUTS = 4
HIDDEN_UNITS = 8
N_CLASSES = 3


def _model(tf):
    """The how-to's "Build model... loss = ...": a small softmax classifier, resource variables."""
    v1 = tf.compat.v1
    x = v1.placeholder(tf.float32, [None, N_INPUTS], name="x")
    y_ = v1.placeholder(tf.float32, [None, N_CLASSES], name="y_")
    hid_w = v1.get_variable("hid_w", [N_INPUTS, HIDDEN_UNITS],
                            initializer=v1.truncated_normal_initializer(stddev=0.5), use_resource=True)
    hid_b = v1.get_variable("hid_b", [HIDDEN_UNITS], initializer=v1.zeros_initializer(), use_resource=True)
    sm_w = v1.get_variable("sm_w", [HIDDEN_UNITS, N_CLASSES],
                           initializer=v1.truncated_normal_initializer(stddev=0.35), use_resource=True)
    sm_b = v1.get_variable("sm_b", [N_CLASSES], initializer=v1.zeros_initializer(), use_resource=True)
    hid = v1.nn.relu(v1.matmul(x, hid_w) + hid_b)
    logits = v1.matmul(hid, sm_w) + sm_b
    return v1.reduce_mean(v1.nn.softmax_cross_entropy_with_logits_v2(labels=y_, logits=logits))


def _monitored_training_session(tf, master, is_chief, checkpoint_dir, hooks):
    """The graph side of ``tf.compat.v1.train.MonitoredTrainingSession(master=..., is_chief=...,
    checkpoint_dir=..., hooks=...)`` with its defaults: every op it builds, no session."""
    v1 = tf.compat.v1
    del master  # used only to connect
    scaffold = v1.train.Scaffold()
    if not is_chief:
        all_hooks = list(hooks or [])
    else:
        all_hooks = []
        summary_dir = checkpoint_dir
        if summary_dir:
            all_hooks.append(v1.train.StepCounterHook(output_dir=summary_dir, every_n_steps=100))
            all_hooks.append(v1.train.SummarySaverHook(scaffold=scaffold, save_steps=100, save_secs=None,
                                                       output_dir=summary_dir))
        if checkpoint_dir:
            all_hooks.append(v1.train.CheckpointSaverHook(checkpoint_dir, save_steps=None, save_secs=600,
                                                          scaffold=scaffold, save_graph_def=True))
        if hooks:
            all_hooks.extend(hooks)
    # MonitoredSession.__init__: every hook's begin(), then the session creator's create_session(),
    # whose first step is scaffold.finalize().
    for h in all_hooks:
        h.begin()
    scaffold.finalize()
    return scaffold


def build(placed: bool, sync: bool, is_chief: bool = True):
    import tensorflow as tf

    v1 = tf.compat.v1
    checkpoint_dir = tempfile.mkdtemp()  # the program: "/tmp/train_logs"
    g = tf.Graph()
    with g.as_default():
        ps_hosts = PS_HOSTS
        worker_hosts = WORKER_HOSTS

        # Create a cluster from the parameter server and worker hosts.
        cluster = v1.train.ClusterSpec({"ps": ps_hosts, "worker": worker_hosts})

        # Assigns ops to the local worker by default.
        device_scope = (v1.device(v1.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % TASK_INDEX,  # noqa: UP031 - as the program writes it
            cluster=cluster)) if placed else contextlib.nullcontext())
        with device_scope:

            # Build model...
            loss = _model(tf)
            global_step = v1.train.get_or_create_global_step()

            opt = v1.train.AdagradOptimizer(0.01)
            if sync:
                opt = v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=2, total_num_replicas=2)
            train_op = opt.minimize(loss, global_step=global_step)  # noqa: F841

        # The StopAtStepHook handles stopping after running given steps.
        hooks = [v1.train.StopAtStepHook(last_step=1000000)]
        if sync:
            hooks.append(opt.make_session_run_hook(is_chief))

        # The MonitoredTrainingSession takes care of session initialization,
        # restoring from a checkpoint, saving to a checkpoint, and closing when done
        # or an error occurs.
        _monitored_training_session(tf, master=MASTER, is_chief=is_chief,
                                    checkpoint_dir=checkpoint_dir, hooks=hooks)

        meta = v1.train.export_meta_graph(graph=g, clear_devices=False)
        if is_chief:  # the chief-only hooks opened a summary writer on checkpoint_dir
            v1.summary.FileWriterCache.get(checkpoint_dir).close()
    shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return meta
