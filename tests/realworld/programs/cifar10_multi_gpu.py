"""CIFAR-10 multi-GPU tower training (in-graph replication, one machine), ported to TF 2.21 ``tf.compat.v1``.

Source: ``tensorflow/models: tutorials/image/cifar10/cifar10_multi_gpu_train.py`` (the last version, with
``tower_loss(scope, images, labels)``, ``prefetch_queue`` and ``with tf.variable_scope(tf.get_variable_scope())``
around the towers), plus the parts of ``tutorials/image/cifar10/cifar10.py`` it uses (``_activation_summary``,
``_variable_on_cpu``, ``_variable_with_weight_decay``, ``distorted_inputs``, ``inference``, ``loss``) and of
``tutorials/image/cifar10/cifar10_input.py`` (``distorted_inputs``/``_generate_image_and_label_batch``).

The program uses neither ``replica_device_setter`` nor ``SyncReplicasOptimizer``: it replicates the model
in-graph over ``NUM_GPUS`` towers (``tf.device('/gpu:%d' % i)``) under an outer ``tf.device('/cpu:0')``, keeps
every variable on ``/cpu:0`` (``_variable_on_cpu``), averages the tower gradients on the CPU and runs with
``allow_soft_placement=True``. So ``SETTER = None`` and ``SYNC = None``: ``build(placed=True)`` and
``build(placed=False)`` give the same graph, and ``sync`` is ignored. The module exists to test placeviz's
placer with ``--gpus-per-worker 2`` (``GPUS_PER_WORKER``) and soft placement (``SOFT_PLACEMENT``).

Changes from the original:

* Flags become constants: ``batch_size`` 128 -> ``BATCH_SIZE = 2``, ``num_gpus`` 1 -> ``NUM_GPUS = 2``,
  ``use_fp16`` False -> ``USE_FP16 = False``; ``train_dir``/``max_steps``/``log_device_placement`` are dropped with
  the training loop. The other constants (``MOVING_AVERAGE_DECAY``, ``NUM_EPOCHS_PER_DECAY``,
  ``INITIAL_LEARNING_RATE``, ``LEARNING_RATE_DECAY_FACTOR``, ``NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN``,
  ``TOWER_NAME``, ``NUM_CLASSES``) keep their values.
* Sizes shrink: images 24x24x3 -> 8x8x3, conv1/conv2 64 -> 4 filters (5x5 kernels kept), local3 384 -> 8 and
  local4 192 -> 8 units.
* Input: ``cifar10_input.distorted_inputs`` (filename queue, ``FixedLengthRecordReader``, random distortions,
  ``shuffle_batch`` with 16 threads) becomes one fixed pseudo-random image and label (``tf.constant``, seeded)
  batched by ``tf.compat.v1.train.batch`` (2 threads; a queue runner stays), followed by the original
  ``tf.summary.image('images', images)`` and the ``tf.reshape(label_batch, [batch_size])``. The
  ``maybe_download_and_extract`` step is dropped.
* ``tf.contrib.slim.prefetch_queue.prefetch_queue`` -> ``tf_slim.data.prefetch_queue.prefetch_queue`` (the same
  code, moved).
* Removed TF1 names -> ``tf.compat.v1`` equivalents (``get_variable``, ``variable_scope``, ``get_collection``,
  ``train.exponential_decay``, ``train.GradientDescentOptimizer``, ``train.ExponentialMovingAverage``,
  ``train.Saver``, ``summary.*``, ``nn.max_pool``/``lrn``/...); ``reshape.get_shape()[1].value`` ->
  ``tf.compat.v1.dimension_value(reshape.get_shape()[1])``; ``xrange`` -> ``range``.
* ``tf.Graph().as_default()`` -> a fresh ``g = tf.Graph()`` entered with ``g.as_default()``, so the graph can be
  exported.
* With TF 2.x behaviour on, ``get_variable`` creates resource variables by default; the TF1 program got
  reference (``VariableV2``) variables. The port calls ``tf.compat.v1.get_variable_scope().set_use_resource(False)``
  once, first thing in the graph, to keep TF1's variable kind whatever the caller's mode (a no-op under
  ``tf.compat.v1.disable_v2_behavior()``, as the corpus builds; the EMA shadow variables follow their
  primaries).
  ``global_step`` stays as written: ``tf.get_variable('global_step', [], constant_initializer(0),
  trainable=False)``, i.e. FLOAT32.
* Everything after ``init = tf.global_variables_initializer()`` (the session with ``allow_soft_placement=True``,
  ``start_queue_runners``, the ``FileWriter`` and the step loop) is not run; ``build`` returns the graph at that
  point as a ``MetaGraphDef``.
"""

import re

import tensorflow as tf
from tf_slim.data import prefetch_queue

SOURCE = "tensorflow/models: tutorials/image/cifar10/cifar10_multi_gpu_train.py"
SETTER = None
SYNC = None
CHIEF_ONLY = False
GPUS_PER_WORKER = 2
SOFT_PLACEMENT = True

v1 = tf.compat.v1

# Flags (cifar10.py / cifar10_multi_gpu_train.py) as constants.
BATCH_SIZE = 2
NUM_GPUS = 2
USE_FP16 = False

# cifar10_input.py constants (IMAGE_SIZE shrunk from 24).
from programs._cifar10 import (  # cifar10.py, shared by both trainers
    INITIAL_LEARNING_RATE,
    LEARNING_RATE_DECAY_FACTOR,
    MOVING_AVERAGE_DECAY,
    NUM_EPOCHS_PER_DECAY,
    NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN,
    TOWER_NAME,
    distorted_inputs,
    inference,
    loss,
)

# --- cifar10_multi_gpu_train.py -------------------------------------------------------------------------


def tower_loss(scope, images, labels):
    # Build inference Graph.
    logits = inference(images)

    # Build the portion of the Graph calculating the losses.
    _ = loss(logits, labels)

    # Assemble all of the losses for the current tower only.
    losses = v1.get_collection("losses", scope)

    # Calculate the total loss for the current tower.
    total_loss = tf.add_n(losses, name="total_loss")

    for loss_t in losses + [total_loss]:
        loss_name = re.sub(f"{TOWER_NAME}_[0-9]*/", "", loss_t.op.name)
        v1.summary.scalar(loss_name, loss_t)

    return total_loss


def average_gradients(tower_grads):
    average_grads = []
    for grad_and_vars in zip(*tower_grads, strict=True):
        grads = []
        for g, _ in grad_and_vars:
            # Add 0 dimension to the gradients to represent the tower.
            expanded_g = tf.expand_dims(g, 0)
            grads.append(expanded_g)

        # Average over the 'tower' dimension.
        grad = tf.concat(axis=0, values=grads)
        grad = tf.reduce_mean(grad, 0)

        v = grad_and_vars[0][1]
        grad_and_var = (grad, v)
        average_grads.append(grad_and_var)
    return average_grads


def _train(g):
    """cifar10_multi_gpu_train.train() up to the session; returns its ops."""
    with g.as_default(), v1.device("/cpu:0"):
        # Port: keep TF1's reference variables (TF 2.x defaults get_variable to resource variables).
        v1.get_variable_scope().set_use_resource(False)

        # Create a variable to count the number of train() calls.
        global_step = v1.get_variable(
            "global_step", [], initializer=v1.constant_initializer(0), trainable=False
        )

        # Calculate the learning rate schedule.
        num_batches_per_epoch = NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN / BATCH_SIZE
        decay_steps = int(num_batches_per_epoch * NUM_EPOCHS_PER_DECAY)

        # Decay the learning rate exponentially based on the number of steps.
        lr = v1.train.exponential_decay(
            INITIAL_LEARNING_RATE, global_step, decay_steps, LEARNING_RATE_DECAY_FACTOR, staircase=True
        )

        # Create an optimizer that performs gradient descent.
        opt = v1.train.GradientDescentOptimizer(lr)

        # Get images and labels for CIFAR-10.
        images, labels = distorted_inputs()
        batch_queue = prefetch_queue.prefetch_queue([images, labels], capacity=2 * NUM_GPUS)
        # Calculate the gradients for each model tower.
        tower_grads = []
        with v1.variable_scope(v1.get_variable_scope()):
            for i in range(NUM_GPUS):
                with v1.device(f"/gpu:{i}"):
                    with tf.name_scope(f"{TOWER_NAME}_{i}") as scope:
                        # Dequeues one batch for the GPU
                        image_batch, label_batch = batch_queue.dequeue()
                        # Calculate the loss for one tower of the CIFAR model.
                        loss_ = tower_loss(scope, image_batch, label_batch)

                        # Reuse variables for the next tower.
                        v1.get_variable_scope().reuse_variables()

                        # Retain the summaries from the final tower.
                        summaries = v1.get_collection(v1.GraphKeys.SUMMARIES, scope)

                        # Calculate the gradients for the batch of data on this CIFAR tower.
                        grads = opt.compute_gradients(loss_)

                        # Keep track of the gradients across all towers.
                        tower_grads.append(grads)

        # We must calculate the mean of each gradient.
        grads = average_gradients(tower_grads)

        # Add a summary to track the learning rate.
        summaries.append(v1.summary.scalar("learning_rate", lr))

        # Add histograms for gradients.
        for grad, var in grads:
            if grad is not None:
                summaries.append(v1.summary.histogram(var.op.name + "/gradients", grad))

        # Apply the gradients to adjust the shared variables.
        apply_gradient_op = opt.apply_gradients(grads, global_step=global_step)

        # Add histograms for trainable variables.
        for var in v1.trainable_variables():
            summaries.append(v1.summary.histogram(var.op.name, var))

        # Track the moving averages of all trainable variables.
        variable_averages = v1.train.ExponentialMovingAverage(MOVING_AVERAGE_DECAY, global_step)
        variables_averages_op = variable_averages.apply(v1.trainable_variables())

        # Group all updates to into a single train op.
        train_op = tf.group(apply_gradient_op, variables_averages_op)

        # Create a saver.
        saver = v1.train.Saver(v1.global_variables())

        # Build the summary operation from the last tower summaries.
        summary_op = v1.summary.merge(summaries)

        # Build an initialization operation to run below.
        init = v1.global_variables_initializer()

        # (The original now opens tf.Session(config=ConfigProto(allow_soft_placement=True, ...)), runs init,
        # starts the queue runners and loops over sess.run([train_op, loss]); not run here.)
        return train_op, loss_, saver, summary_op, init


def build(placed, sync, is_chief=True):
    """Builds the program's graph. ``placed``, ``sync`` and ``is_chief`` change nothing (no setter, no sync)."""
    del placed, sync, is_chief
    g = tf.Graph()
    _train(g)
    with g.as_default():
        return v1.train.export_meta_graph(graph=g, clear_devices=False)
