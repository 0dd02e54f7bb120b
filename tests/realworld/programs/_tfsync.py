"""``get_workers`` of TF's sync_replicas_optimizer_test.py, worker 0's (the chief's) graph.

Shared by ``tfsync_2workers`` and ``tfsync_3workers_1backup``, as upstream's test methods share
the module function ``get_workers(num_workers, replicas_to_aggregate, workers)``. Source:
tensorflow/tensorflow ``tensorflow/python/training/sync_replicas_optimizer_test.py`` (read at commit
08df8c40b4376ed012fa3ba03ff3e3068d8d2a94).

The test builds one graph per worker; this builds worker 0's (``is_chief = (worker_id == 0)``), the
graph a real run of the test gives to ``MonitoredTrainingSession`` on the chief. Changes from the
test:

* Only the graph building is kept: no ``create_local_cluster`` servers, no session, no run steps or
  assertions. ``MonitoredTrainingSession(master=..., is_chief=True, hooks=[sync_replicas_hook])``
  is replaced by what it adds to the graph before connecting (TF 2.21, no ``checkpoint_dir`` so no
  default hooks), where the test creates the session (under ``graph.as_default()``, outside the
  worker device scope): ``MonitoredSession`` calls ``sync_replicas_hook.begin()`` (for the chief
  ``get_chief_queue_runner()`` + ``get_init_tokens_op(num_tokens)``: ``Fill_1`` /
  ``sync_token_q_EnqueueMany_1`` on the global step's device), then ``ChiefSessionCreator``
  finalizes a default ``tf.compat.v1.train.Scaffold()`` (``init``/``ready_op``/
  ``ready_for_local_init_op``/``local_init_op`` and the sharded default ``Saver``). ``sync=False``
  does the same without the hook.
* TF-internal imports become public equivalents: ``ops.Graph``/``ops.device`` -> ``tf.Graph`` /
  ``tf.compat.v1.device``, ``constant_op.constant`` -> ``tf.constant``,
  ``indexed_slices.IndexedSlices`` -> ``tf.IndexedSlices``, ``gradient_descent.GradientDescentOptimizer``
  / ``training.SyncReplicasOptimizer`` -> ``tf.compat.v1.train.*``.
* ``variable_v1.VariableV1`` -> ``tf.compat.v1.Variable`` (same class). The test is
  ``@run_v1_only``: it runs only with TF1 behaviour, where every ``VariableV1`` is a ref
  ``VariableV2`` -- the test's four and ``SyncReplicasOptimizer``'s own ``sync_rep_local_step``.
  To build that graph when v2 behaviour (resource variables by default) is on globally, the body of
  ``graph.as_default()`` runs inside ``tf.compat.v1.variable_scope(<root scope>,
  use_resource=False)`` (no name change). The global step stays ``int32``
  (``VariableV1(0, ...)``), as in the test.
* ``SETTER = None``: the test places everything with explicit ``ops.device`` scopes
  (``/job:ps/task:0`` for ``global_step``/``v0``, ``/job:ps/task:1`` for ``v1``/``v_sparse``,
  ``/job:worker/task:0`` for the gradients and the optimizer). ``placed=True`` keeps those scopes;
  ``placed=False`` drops every one of them (a graph with no devices at all).
* ``sync=False``: the plain ``sgd_opt.apply_gradients(zip(...), global_step=global_step)`` on the
  same gradients (no ``SyncReplicasOptimizer``, no hook); ``sync=True`` is the test's code.
* ``is_chief`` is ignored: only worker 0 (the chief) is built (``CHIEF_ONLY = False``).
"""

import contextlib

import tensorflow as tf


def build_chief(num_workers, replicas_to_aggregate, placed, sync):
    """Worker 0's graph of ``get_workers``; ``placed`` keeps the test's explicit devices."""

    def device(spec):
        return tf.compat.v1.device(spec) if placed else contextlib.nullcontext()

    worker_id = 0
    graph = tf.Graph()
    is_chief = (worker_id == 0)
    with graph.as_default():
        # @run_v1_only: TF1 behaviour, every VariableV1 a ref variable (see the docstring).
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), use_resource=False):
            with device("/job:ps/task:0"):
                global_step = tf.compat.v1.Variable(
                    0, name="global_step", trainable=False)
                var_0 = tf.compat.v1.Variable(0.0, name="v0")
            with device("/job:ps/task:1"):
                var_1 = tf.compat.v1.Variable(1.0, name="v1")
                var_sparse = tf.compat.v1.Variable([[3.0], [4.0]], name="v_sparse")

            with device("/job:worker/task:" + str(worker_id)):
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
                        total_num_replicas=num_workers)
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

            # Creates MonitoredSession: MonitoredTrainingSession(master=workers[worker_id].target,
            # is_chief=is_chief, hooks=[sync_replicas_hook]) builds, before it connects: every hook's
            # begin(), then ChiefSessionCreator's scaffold.finalize() (see the docstring).
            scaffold = tf.compat.v1.train.Scaffold()
            if sync_replicas_hook is not None:
                sync_replicas_hook.begin()
            scaffold.finalize()

        del train_op
        # Exported inside as_default(): export_meta_graph refuses to run while eager is on.
        return tf.compat.v1.train.export_meta_graph(graph=graph, clear_devices=False)
