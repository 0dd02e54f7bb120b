"""TF-Slim's training recipe (``slim.learning``), distributed over parameter servers.

Source: google-research/tf-slim, ``tf_slim/learning.py`` (module docstring, sections "A simple
working training script", "Creating the train_op" and "Performing additional (non-gradient)
updates during training"; and ``train()``'s ``sync_optimizer=`` path), as installed with
``tf_slim`` 1.1. The recipe, as written there::

    images, labels = LoadData(...)
    predictions = MyModel(images)
    slim.losses.log_loss(predictions, labels)
    total_loss = slim.losses.get_total_loss()
    optimizer = tf.compat.v1.train.MomentumOptimizer(FLAGS.learning_rate, FLAGS.momentum)
    train_op = slim.learning.create_train_op(total_loss, optimizer)
    slim.learning.train(train_op, my_log_dir)

Changes made for the corpus:

* The docstring has no section on parameter servers: the ``with
  tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2))`` block around the whole recipe
  (``slim.learning.train`` included, as TF-Slim programs such as tensorflow/models
  ``research/attention_ocr/python/train.py`` call it inside their setter block) and the
  ``SyncReplicasOptimizer(optimizer, replicas_to_aggregate=2, total_num_replicas=2)`` wrapping,
  passed to ``slim.learning.train(..., sync_optimizer=optimizer)`` as its docstring describes, are
  additions. ``is_chief`` is passed to ``slim.learning.train`` (chief: ``get_init_tokens_op``,
  ``get_chief_queue_runner``, ``chief_init_op``; other workers: ``local_step_init_op``).
* The global step is created first, with ``tf.compat.v1.train.get_or_create_global_step()`` (int64,
  what ``slim.create_global_step`` creates); ``create_train_op`` and ``train`` then find it.
* ``LoadData(...)``: one random 8x8x1 image and a random label, batched with
  ``tf.compat.v1.train.batch`` (batch 4, so the graph has a ``QUEUE_RUNNERS`` collection); labels
  one-hot for ``log_loss``.
* ``MyModel``: two ``slim.conv2d`` layers with ``normalizer_fn=slim.batch_norm`` (so
  ``create_train_op`` puts the batch-norm ``UPDATE_OPS`` behind its ``update_barrier``), a
  max-pool, ``slim.flatten`` and a ``slim.fully_connected`` logits layer, then ``slim.softmax``.
* ``slim.batch_norm`` gets ``fused=True, updates_collections=[tf.compat.v1.GraphKeys.UPDATE_OPS]``:
  with the default (the string ``UPDATE_OPS`` itself) tf_slim delegates to the Keras
  ``BatchNormalization`` layer, which under TF 2.21 needs the ``tf_keras`` package (not
  installed). The list names the same collection but takes tf_slim's own fused implementation
  (``FusedBatchNormV3`` + ``assign_moving_average`` updates in ``UPDATE_OPS``), which is the graph
  TF 1.x's fused layer made.
* tf_slim 1.1 (the release on PyPI) still names ``tensorflow.python.framework.ops.Tensor`` in
  ``tf_slim.layers.utils.constant_value`` (reached by ``slim.batch_norm``), which TF 2.21 removed;
  during ``build`` that module sees an ``ops`` with ``Tensor`` restored (tf-slim's main branch
  made the same fix with ``tensor_lib.Tensor``). No graph change.
* ``FLAGS.learning_rate``/``FLAGS.momentum`` became 0.01/0.9; ``my_log_dir`` a temporary
  directory.
* ``slim.learning.train`` is called for real, but ``Supervisor.managed_session`` is replaced (for
  the duration of the call) by one that raises before any session starts: the graph is exactly
  what ``train()`` builds (global step lookup, ``Saver``, ``init_ops``, sync init/chief ops,
  ``train_step`` ops, the ``Supervisor``, which finalizes the graph). The Supervisor's summary
  writer is closed and the directory removed afterwards.
* With ``placed=False`` and ``is_chief=False``, TF's ``Supervisor`` refuses a non-chief graph whose
  variables have no device ("When using replicas, all Variables must have their device set"); that
  error is swallowed there and the graph ``train()`` built before it is exported all the same.
* Variables are TF1's ref variables (``VariableV2``): the root variable scope is set to
  ``use_resource=False``, as TF 1.x built them (TF 2.x would make ``VarHandleOp``).
"""

from __future__ import annotations

import contextlib
import tempfile
from unittest import mock

import tensorflow as tf
import tf_slim as slim

SOURCE = "google-research/tf-slim: tf_slim/learning.py"
SETTER = {"ps_tasks": 2}
SYNC = {"replicas_to_aggregate": 2, "total_replicas": 2}
SYNC_PROGRAM_CHANGES = {
    "names": ["init_ops/concat/concat", "init_ops/concat/concat_dim", "init_ops/group_deps",
              "init_ops/group_deps_1", "sync_replicas/group_deps"],
    "why": "tf_slim's learning.train, given sync_optimizer, builds its local init op as group(chief_init_op) "
           "under control_dependencies([local_init_op]) and a ready_for_local_init_op (learning.py train)",
}
CHIEF_ONLY = True

# Flags and sizes, as constants.
PS_TASKS = 2
LEARNING_RATE = 0.01
MOMENTUM = 0.9
REPLICAS_TO_AGGREGATE = 2
TOTAL_NUM_REPLICAS = 2
BATCH_SIZE = 4
IMAGE_SIZE = 8
NUM_CLASSES = 3


class _SessionNotStarted(Exception):
    """Raised instead of starting ``Supervisor.managed_session``: only the graph is wanted."""


def run_train_without_session(train_fn, *args, **kwargs) -> None:
    """Calls ``slim.learning.train``-like ``train_fn`` and stops where it would open a session."""
    supervisor_cls = tf.compat.v1.train.Supervisor
    supervisor_init = supervisor_cls.__init__
    supervisors = []

    def init(sv, *init_args, **init_kwargs):
        supervisors.append(sv)
        supervisor_init(sv, *init_args, **init_kwargs)

    def managed_session(sv, *unused_args, **unused_kwargs):
        raise _SessionNotStarted

    try:
        with mock.patch.object(supervisor_cls, "__init__", init), \
                mock.patch.object(supervisor_cls, "managed_session", managed_session):
            train_fn(*args, **kwargs)
    except _SessionNotStarted:
        pass
    except ValueError as e:
        # A non-chief Supervisor over variables without a device: TF refuses it after train()
        # has built all its ops.
        if "all Variables must have their device set" not in str(e):
            raise
    finally:
        for sv in supervisors:
            # The session would have run these; tell tf_should_use they are not forgotten.
            for name in ("_ready_op", "_ready_for_local_init_op"):
                getattr(getattr(sv, name, None), "mark_used", lambda: None)()
            writer = getattr(sv, "_summary_writer", None)
            if writer is not None:
                writer.close()


class _OpsWithTensor:
    """``tensorflow.python.framework.ops`` plus its ``Tensor`` alias, which TF 2.21 dropped."""

    Tensor = tf.Tensor

    def __init__(self, ops):
        self._ops = ops

    def __getattr__(self, name):
        return getattr(self._ops, name)


@contextlib.contextmanager
def tf_slim_compat():
    """tf_slim 1.1's ``layers.utils.constant_value`` tests ``isinstance(x, ops.Tensor)``; TF 2.21
    has no ``ops.Tensor`` any more (tf-slim's main branch now says ``tensor_lib.Tensor``)."""
    from tf_slim.layers import utils as slim_utils

    if hasattr(slim_utils.ops, "Tensor"):
        yield
        return
    with mock.patch.object(slim_utils, "ops", _OpsWithTensor(slim_utils.ops)):
        yield


def LoadData():  # noqa: N802 - the recipe's name
    image = tf.compat.v1.random_uniform([IMAGE_SIZE, IMAGE_SIZE, 1], name="image")
    label = tf.compat.v1.random_uniform([], 0, NUM_CLASSES, dtype=tf.int64, name="label")
    images, labels = tf.compat.v1.train.batch([image, label], batch_size=BATCH_SIZE,
                                              num_threads=1, capacity=2 * BATCH_SIZE)
    return images, tf.one_hot(labels, NUM_CLASSES)


def MyModel(images):  # noqa: N802 - the recipe's name
    # updates_collections as a list (same collection) + fused: slim's own batch norm, not the
    # Keras layer (which needs the tf_keras package under TF 2.x).
    batch_norm_params = {"is_training": True, "fused": True,
                         "updates_collections": [tf.compat.v1.GraphKeys.UPDATE_OPS]}
    with slim.arg_scope([slim.conv2d], normalizer_fn=slim.batch_norm,
                        normalizer_params=batch_norm_params):
        net = slim.conv2d(images, 4, [3, 3], scope="conv1")
        net = slim.max_pool2d(net, [2, 2], scope="pool1")
        net = slim.conv2d(net, 8, [3, 3], scope="conv2")
        net = slim.flatten(net)
        logits = slim.fully_connected(net, NUM_CLASSES, activation_fn=None, scope="logits")
    return slim.softmax(logits)


def build(placed: bool, sync: bool, is_chief: bool = True) -> tf.compat.v1.MetaGraphDef:
    g = tf.Graph()
    with g.as_default():
        # TF 1.x's ref variables (VariableV2).
        tf.compat.v1.get_variable_scope().set_use_resource(False)
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=PS_TASKS) if placed else None
        device = tf.compat.v1.device(setter) if placed else contextlib.nullcontext()
        with tf_slim_compat(), device, tempfile.TemporaryDirectory() as my_log_dir:
            tf.compat.v1.train.get_or_create_global_step()

            # Load data and create the model:
            images, labels = LoadData()
            predictions = MyModel(images)

            # Define the loss:
            slim.losses.log_loss(predictions, labels)
            total_loss = slim.losses.get_total_loss()

            # Define the optimizer:
            optimizer = tf.compat.v1.train.MomentumOptimizer(LEARNING_RATE, MOMENTUM)
            if sync:
                optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
                    optimizer,
                    replicas_to_aggregate=REPLICAS_TO_AGGREGATE,
                    total_num_replicas=TOTAL_NUM_REPLICAS)

            # Create the train_op
            train_op = slim.learning.create_train_op(total_loss, optimizer)

            # Run training (up to the session).
            run_train_without_session(
                slim.learning.train, train_op, my_log_dir, is_chief=is_chief,
                sync_optimizer=optimizer if sync else None)
        return tf.compat.v1.train.export_meta_graph(graph=g, clear_devices=False)
