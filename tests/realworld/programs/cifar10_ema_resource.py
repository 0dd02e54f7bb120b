"""CIFAR-10 single-machine training (``cifar10_train.py`` + ``cifar10.train()``), with resource variables, under
``replica_device_setter(ps_tasks=2)``; ported to TF 2.21 ``tf.compat.v1``.

Source: ``tensorflow/models: tutorials/image/cifar10/cifar10_train.py`` (the ``MonitoredTrainingSession``
version, ``global_step = tf.train.get_or_create_global_step()``, input pipeline under ``tf.device('/cpu:0')``)
with the parts of ``tutorials/image/cifar10/cifar10.py`` it uses (``_activation_summary``, ``_variable_on_cpu``,
``_variable_with_weight_decay``, ``distorted_inputs``, ``inference``, ``loss``, ``_add_loss_summaries`` and
``train``: the loss ``ExponentialMovingAverage(0.9, name='avg')`` whose op gates ``compute_gradients``
(``with tf.control_dependencies([loss_averages_op])``), ``GradientDescentOptimizer``, ``apply_gradient_op`` and
the ``ExponentialMovingAverage(MOVING_AVERAGE_DECAY, global_step)`` of ``tf.trainable_variables()`` applied
``with tf.control_dependencies([apply_gradient_op])``). ``train()`` is the last upstream version, which returns
that ``variables_averages_op`` as the train op; older versions instead ended with ``with
tf.control_dependencies([apply_gradient_op, variables_averages_op]): train_op = tf.no_op(name='train')``.
``cifar10_input.py``'s ``distorted_inputs`` is replaced (see below).

Changes from the original:

* Added, so the corpus covers ``ExponentialMovingAverage`` over resource variables under the setter:
  - the whole model is built inside ``tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
    use_resource=True)``: every ``get_variable`` (the global step from ``get_or_create_global_step``, the model
    weights; the EMA shadow variables follow their primaries; the loss-average variables are created under
    the same scope) makes a resource variable;
  - the model (from ``get_or_create_global_step()`` through ``cifar10.train()``) is built under
    ``tf.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2))`` when ``placed`` (default worker device
    ``/job:worker``); the original ``tf.device('/cpu:0')`` around the input and ``_variable_on_cpu``'s
    ``tf.device('/cpu:0')`` stay inside it;
  - ``sync=True``: the ``GradientDescentOptimizer`` is wrapped, inside the same ``control_dependencies`` block,
    in ``SyncReplicasOptimizer(opt, replicas_to_aggregate=2, total_num_replicas=2,
    variable_averages=variable_averages, variables_to_average=tf.trainable_variables())`` as
    ``inception/inception_distributed_train.py`` does it. The trainable-variable EMA is then applied by the
    SyncReplicas optimizer's chief path inside ``apply_gradients`` (``variable_averages.apply`` after its sync
    op), so the program does not call ``variable_averages.apply`` itself and returns ``apply_gradient_op`` as the
    train op; the ``ExponentialMovingAverage`` object (which builds no op when constructed) is created before
    the optimizer instead of after ``apply_gradients``. ``opt.make_session_run_hook(is_chief)`` joins the
    session's hooks (its ``begin`` builds ``get_init_tokens_op`` on the chief only, hence ``CHIEF_ONLY``).
* ``tf.train.MonitoredTrainingSession(...)`` is not opened; what it builds before running is reproduced: the
  ``begin()`` of the hooks the program passes (``StopAtStepHook`` builds the global-step read,
  ``NanTensorHook`` and the ``_LoggerHook`` build nothing; plus the SyncReplicas hook when ``sync``), then
  ``tf.compat.v1.train.Scaffold().finalize()`` (init/ready/local-init ops, ``summary.merge_all`` and the
  sharded ``Saver``; it finalizes the graph). Its own chief hooks (``StepCounterHook``, ``SummarySaverHook``,
  ``CheckpointSaverHook``) are left out: their ``begin`` opens event files and adds only the same global-step
  read.
* Flags become constants: ``batch_size`` 128 -> ``BATCH_SIZE = 2``, ``use_fp16`` -> ``USE_FP16 = False``,
  ``max_steps`` -> ``MAX_STEPS``; ``train_dir``, ``log_device_placement`` and ``log_frequency`` are dropped with
  the session. The other constants keep their values.
* Sizes shrink: images 24x24x3 -> 8x8x3, conv1/conv2 64 -> 4 filters (5x5 kernels kept), local3 384 -> 8 and
  local4 192 -> 8 units.
* Input: ``cifar10_input.distorted_inputs`` (filename queue, ``FixedLengthRecordReader``, random distortions,
  ``shuffle_batch`` with 16 threads) becomes one fixed pseudo-random image and label (``tf.constant``, seeded)
  batched by ``tf.compat.v1.train.batch`` (2 threads; a queue runner stays), followed by the original
  ``tf.summary.image('images', images)`` and ``tf.reshape(label_batch, [batch_size])``.
  ``maybe_download_and_extract`` is dropped.
* Removed TF1 names -> ``tf.compat.v1`` equivalents (``tf.contrib.framework.get_or_create_global_step`` /
  ``tf.train.get_or_create_global_step`` -> ``tf.compat.v1.train.get_or_create_global_step``, ``get_variable``,
  ``variable_scope``, ``summary.*``, ``train.*``, ``nn.*``); ``reshape.get_shape()[1].value`` ->
  ``tf.compat.v1.dimension_value(...)``.
* ``tf.Graph().as_default()`` -> a fresh ``g = tf.Graph()`` entered with ``g.as_default()``.
"""

from contextlib import nullcontext

import tensorflow as tf

SOURCE = "tensorflow/models: tutorials/image/cifar10/cifar10_train.py"
SETTER = {"ps_tasks": 2}
SYNC = {"replicas_to_aggregate": 2, "total_replicas": 2, "variable_averages": True}
CHIEF_ONLY = True

v1 = tf.compat.v1

# Flags as constants.
BATCH_SIZE = 2
USE_FP16 = False
MAX_STEPS = 1000000

# cifar10_input.py constants (IMAGE_SIZE shrunk from 24).
from programs._cifar10 import (  # cifar10.py, shared by both trainers
    INITIAL_LEARNING_RATE,
    LEARNING_RATE_DECAY_FACTOR,
    MOVING_AVERAGE_DECAY,
    NUM_EPOCHS_PER_DECAY,
    NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN,
    distorted_inputs,
    inference,
    loss,
)


def _add_loss_summaries(total_loss):
    # Compute the moving average of all individual losses and the total loss.
    loss_averages = v1.train.ExponentialMovingAverage(0.9, name="avg")
    losses = v1.get_collection("losses")
    loss_averages_op = loss_averages.apply(losses + [total_loss])

    for loss_t in losses + [total_loss]:
        v1.summary.scalar(loss_t.op.name + " (raw)", loss_t)
        v1.summary.scalar(loss_t.op.name, loss_averages.average(loss_t))

    return loss_averages_op


def train(total_loss, global_step, sync):
    """cifar10.train(); ``sync`` adds the SyncReplicasOptimizer wrapper (see the module docstring)."""
    # Variables that affect learning rate.
    num_batches_per_epoch = NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN / BATCH_SIZE
    decay_steps = int(num_batches_per_epoch * NUM_EPOCHS_PER_DECAY)

    # Decay the learning rate exponentially based on the number of steps.
    lr = v1.train.exponential_decay(
        INITIAL_LEARNING_RATE, global_step, decay_steps, LEARNING_RATE_DECAY_FACTOR, staircase=True
    )
    v1.summary.scalar("learning_rate", lr)

    # Generate moving averages of all losses and associated summaries.
    loss_averages_op = _add_loss_summaries(total_loss)

    if sync:
        # Port (sync): the EMA is handed to SyncReplicasOptimizer, as inception_distributed_train does.
        variable_averages = v1.train.ExponentialMovingAverage(MOVING_AVERAGE_DECAY, global_step)

    # Compute gradients.
    with tf.control_dependencies([loss_averages_op]):
        opt = v1.train.GradientDescentOptimizer(lr)
        if sync:
            opt = v1.train.SyncReplicasOptimizer(
                opt,
                replicas_to_aggregate=SYNC["replicas_to_aggregate"],
                total_num_replicas=SYNC["total_replicas"],
                variable_averages=variable_averages,
                variables_to_average=v1.trainable_variables(),
            )
        grads = opt.compute_gradients(total_loss)

    # Apply gradients.
    apply_gradient_op = opt.apply_gradients(grads, global_step=global_step)

    # Add histograms for trainable variables.
    for var in v1.trainable_variables():
        v1.summary.histogram(var.op.name, var)

    # Add histograms for gradients.
    for grad, var in grads:
        if grad is not None:
            v1.summary.histogram(var.op.name + "/gradients", grad)

    if sync:
        # The SyncReplicas chief path already applied variable_averages after its sync op.
        return apply_gradient_op, opt

    # Track the moving averages of all trainable variables.
    variable_averages = v1.train.ExponentialMovingAverage(MOVING_AVERAGE_DECAY, global_step)
    with tf.control_dependencies([apply_gradient_op]):
        variables_averages_op = variable_averages.apply(v1.trainable_variables())

    return variables_averages_op, opt


class _LoggerHook(v1.train.SessionRunHook):
    """Logs loss and runtime (cifar10_train.py; builds no op)."""


def build(placed, sync, is_chief=True):
    g = tf.Graph()
    with g.as_default():
        # Port: resource variables throughout (see the module docstring).
        with v1.variable_scope(v1.get_variable_scope(), use_resource=True):
            setter = v1.train.replica_device_setter(**SETTER) if placed else None
            with v1.device(setter) if placed else nullcontext():
                global_step = v1.train.get_or_create_global_step()

                # Force input pipeline to CPU:0.
                with v1.device("/cpu:0"):
                    images, labels = distorted_inputs()

                # Build a Graph that computes the logits predictions from the inference model.
                logits = inference(images)

                # Calculate loss.
                loss_ = loss(logits, labels)

                # Build a Graph that trains the model with one batch of examples and updates the model
                # parameters.
                train_op, opt = train(loss_, global_step, sync)

        # What tf.train.MonitoredTrainingSession(hooks=[...]) builds before its first run: the hooks' begin(),
        # then Scaffold().finalize() (ChiefSessionCreator / WorkerSessionCreator).
        hooks = [
            v1.train.StopAtStepHook(last_step=MAX_STEPS),
            v1.train.NanTensorHook(loss_),
            _LoggerHook(),
        ]
        if sync:
            hooks.insert(0, opt.make_session_run_hook(is_chief))
        for hook in hooks:
            hook.begin()
        v1.train.Scaffold().finalize()
        del train_op

        return v1.train.export_meta_graph(graph=g, clear_devices=False)
