"""DERIVED from SyncReplicasOptimizerTest.test2Workers: resource variables, a named
``SyncReplicasOptimizer`` and ``replica_device_setter(ps_tasks=2)`` instead of explicit devices.

Source: tensorflow/tensorflow, ``tensorflow/python/training/sync_replicas_optimizer_test.py`` (read
at commit 08df8c40b4376ed012fa3ba03ff3e3068d8d2a94), module function ``get_workers`` as
``test2Workers`` calls it (``num_workers = 2``, ``replicas_to_aggregate = 2``). The test file has no
resource-variable or named-optimizer scenario (nor any ``replica_device_setter``); this module is a
variant of ``tfsync_2workers`` written for this corpus, not upstream code. Its changes from the
test:

* The same graph-only port as ``tfsync_2workers`` (worker 0 = chief only; no servers, sessions or
  assertions; ``MonitoredTrainingSession`` replaced by what it builds before connecting:
  ``sync_replicas_hook.begin()`` then a default ``Scaffold().finalize()``; public ``tf.compat.v1``
  names for the TF-internal imports).
* Resource variables: ``variable_v1.VariableV1`` -> ``tf.compat.v1.Variable`` built inside
  ``tf.compat.v1.variable_scope(<root scope>, use_resource=True)``, so that every ``VariableV1`` --
  the four of the test (the global step included, still ``int32``) and the optimizer's
  ``sync_rep_local_step`` -- is a ``ResourceVariable`` (like ``DeviceSetterTest.testResource``)
  whether v2 behaviour is on or off globally.
* ``SyncReplicasOptimizer(..., name="my_sync")`` (the test uses the default name ``sync_replicas``).
* The explicit ``ops.device("/job:ps/task:0")`` / ``("/job:ps/task:1")`` /
  ``("/job:worker/task:0")`` scopes are replaced by one ``tf.compat.v1.device(
  replica_device_setter(ps_tasks=2))`` around the model (variables, gradients, optimizer); the
  hook's ``begin()`` stays outside it, where the test creates its session. ``placed=False`` leaves
  the setter out (no devices at all).
* ``sync=False``: the plain ``sgd_opt.apply_gradients(...)`` on the same gradients, no hook.
* ``SYNC`` also records ``"num_tokens": 2`` (the test's ``make_session_run_hook(is_chief,
  num_tokens=num_workers)``), a key beyond the ones the package contract lists.
"""

import contextlib

import tensorflow as tf

SOURCE = "tensorflow/tensorflow: tensorflow/python/training/sync_replicas_optimizer_test.py"

SETTER = {"ps_tasks": 2}
# num_tokens: what the test passes to make_session_run_hook (num_workers), beyond the contract's keys.
SYNC = {"replicas_to_aggregate": 2, "total_replicas": 2, "name": "my_sync", "num_tokens": 2}
CHIEF_ONLY = False


def build(placed, sync, is_chief=True):
    """Worker 0's graph of the derived test2Workers; ``placed`` adds replica_device_setter(ps_tasks=2)."""
    del is_chief  # only the chief (worker 0) is built
    num_workers = 2
    replicas_to_aggregate = 2

    worker_id = 0
    graph = tf.Graph()
    is_chief = (worker_id == 0)
    with graph.as_default():
        # Resource variables everywhere, the optimizer's local step included (see the docstring).
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), use_resource=True):
            setter = (tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2))
                      if placed else contextlib.nullcontext())
            with setter:
                global_step = tf.compat.v1.Variable(
                    0, name="global_step", trainable=False)
                var_0 = tf.compat.v1.Variable(0.0, name="v0")
                var_1 = tf.compat.v1.Variable(1.0, name="v1")
                var_sparse = tf.compat.v1.Variable([[3.0], [4.0]], name="v_sparse")

                grads_0 = tf.constant(0.1 + worker_id * 0.2)
                grads_1 = tf.constant(0.9 + worker_id * 0.2)
                # This is to test against sparse gradients.
                grads_sparse = tf.IndexedSlices(
                    tf.constant(
                        [0.1 + worker_id * 0.2], shape=[1, 1]),
                    tf.constant([1]),
                    tf.constant([2, 1]))
                sgd_opt = tf.compat.v1.train.GradientDescentOptimizer(2.0)
                if sync:
                    sync_rep_opt = tf.compat.v1.train.SyncReplicasOptimizer(
                        sgd_opt,
                        replicas_to_aggregate=replicas_to_aggregate,
                        total_num_replicas=num_workers,
                        name="my_sync")
                    train_op = [
                        sync_rep_opt.apply_gradients(
                            zip([grads_0, grads_1, grads_sparse],  # noqa: B905 (as the test writes it)
                                [var_0, var_1, var_sparse]),
                            global_step=global_step)
                    ]
                    sync_replicas_hook = sync_rep_opt.make_session_run_hook(
                        is_chief, num_tokens=num_workers)
                else:
                    train_op = [
                        sgd_opt.apply_gradients(
                            zip([grads_0, grads_1, grads_sparse],  # noqa: B905 (as the test writes it)
                                [var_0, var_1, var_sparse]),
                            global_step=global_step)
                    ]
                    sync_replicas_hook = None

            # MonitoredTrainingSession(..., is_chief=is_chief, hooks=[sync_replicas_hook]) builds, before it
            # connects: every hook's begin(), then ChiefSessionCreator's scaffold.finalize().
            scaffold = tf.compat.v1.train.Scaffold()
            if sync_replicas_hook is not None:
                sync_replicas_hook.begin()
            scaffold.finalize()

        del train_op
        # Exported inside as_default(): export_meta_graph refuses to run while eager is on.
        return tf.compat.v1.train.export_meta_graph(graph=graph, clear_devices=False)
