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

import numpy as np
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
IMAGE_SIZE = 8
NUM_CLASSES = 10
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = 50000

# cifar10.py constants.
MOVING_AVERAGE_DECAY = 0.9999  # The decay to use for the moving average.
NUM_EPOCHS_PER_DECAY = 350.0  # Epochs after which learning rate decays.
LEARNING_RATE_DECAY_FACTOR = 0.1  # Learning rate decay factor.
INITIAL_LEARNING_RATE = 0.1  # Initial learning rate.
TOWER_NAME = "tower"

# Shrunk layer sizes (64 filters, 384 and 192 units in the original).
CONV_FILTERS = 4
LOCAL3_UNITS = 8
LOCAL4_UNITS = 8


# --- cifar10_input.py (replaced by a tiny constant queue) -------------------------------------------------


def _generate_image_and_label_batch(image, label, min_queue_examples, batch_size):
    num_preprocess_threads = 2  # 16 in the original
    images, label_batch = v1.train.batch(
        [image, label],
        batch_size=batch_size,
        num_threads=num_preprocess_threads,
        capacity=min_queue_examples + 3 * batch_size,
    )
    # Display the training images in the visualizer.
    v1.summary.image("images", images)
    return images, tf.reshape(label_batch, [batch_size])


def _input_distorted_inputs(batch_size):
    """Stands in for cifar10_input.distorted_inputs: a fixed random image/label, batched by a queue."""
    rng = np.random.RandomState(0)
    with tf.name_scope("data_augmentation"):
        float_image = tf.constant(rng.standard_normal((IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32))
        label = tf.constant([rng.randint(NUM_CLASSES)], dtype=tf.int32)
        min_queue_examples = 2 * batch_size
    return _generate_image_and_label_batch(float_image, label, min_queue_examples, batch_size)


# --- cifar10.py -----------------------------------------------------------------------------------------


def _activation_summary(x):
    tensor_name = re.sub(f"{TOWER_NAME}_[0-9]*/", "", x.op.name)
    v1.summary.histogram(tensor_name + "/activations", x)
    v1.summary.scalar(tensor_name + "/sparsity", v1.nn.zero_fraction(x))


def _variable_on_cpu(name, shape, initializer):
    with v1.device("/cpu:0"):
        dtype = tf.float16 if USE_FP16 else tf.float32
        var = v1.get_variable(name, shape, initializer=initializer, dtype=dtype)
    return var


def _variable_with_weight_decay(name, shape, stddev, wd):
    dtype = tf.float16 if USE_FP16 else tf.float32
    var = _variable_on_cpu(name, shape, v1.truncated_normal_initializer(stddev=stddev, dtype=dtype))
    if wd is not None:
        weight_decay = tf.multiply(tf.nn.l2_loss(var), wd, name="weight_loss")
        v1.add_to_collection("losses", weight_decay)
    return var


def distorted_inputs():
    images, labels = _input_distorted_inputs(batch_size=BATCH_SIZE)
    if USE_FP16:
        images = tf.cast(images, tf.float16)
        labels = tf.cast(labels, tf.float16)
    return images, labels


def inference(images):
    # conv1
    with v1.variable_scope("conv1") as scope:
        kernel = _variable_with_weight_decay("weights", shape=[5, 5, 3, CONV_FILTERS], stddev=5e-2, wd=None)
        conv = v1.nn.conv2d(images, kernel, [1, 1, 1, 1], padding="SAME")
        biases = _variable_on_cpu("biases", [CONV_FILTERS], v1.constant_initializer(0.0))
        pre_activation = tf.nn.bias_add(conv, biases)
        conv1 = tf.nn.relu(pre_activation, name=scope.name)
        _activation_summary(conv1)

    # pool1
    pool1 = v1.nn.max_pool(conv1, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME", name="pool1")
    # norm1
    norm1 = v1.nn.lrn(pool1, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75, name="norm1")

    # conv2
    with v1.variable_scope("conv2") as scope:
        kernel = _variable_with_weight_decay(
            "weights", shape=[5, 5, CONV_FILTERS, CONV_FILTERS], stddev=5e-2, wd=None
        )
        conv = v1.nn.conv2d(norm1, kernel, [1, 1, 1, 1], padding="SAME")
        biases = _variable_on_cpu("biases", [CONV_FILTERS], v1.constant_initializer(0.1))
        pre_activation = tf.nn.bias_add(conv, biases)
        conv2 = tf.nn.relu(pre_activation, name=scope.name)
        _activation_summary(conv2)

    # norm2
    norm2 = v1.nn.lrn(conv2, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75, name="norm2")
    # pool2
    pool2 = v1.nn.max_pool(norm2, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME", name="pool2")

    # local3
    with v1.variable_scope("local3") as scope:
        reshape = tf.reshape(pool2, [images.get_shape().as_list()[0], -1])
        dim = v1.dimension_value(reshape.get_shape()[1])
        weights = _variable_with_weight_decay("weights", shape=[dim, LOCAL3_UNITS], stddev=0.04, wd=0.004)
        biases = _variable_on_cpu("biases", [LOCAL3_UNITS], v1.constant_initializer(0.1))
        local3 = tf.nn.relu(tf.matmul(reshape, weights) + biases, name=scope.name)
        _activation_summary(local3)

    # local4
    with v1.variable_scope("local4") as scope:
        weights = _variable_with_weight_decay(
            "weights", shape=[LOCAL3_UNITS, LOCAL4_UNITS], stddev=0.04, wd=0.004
        )
        biases = _variable_on_cpu("biases", [LOCAL4_UNITS], v1.constant_initializer(0.1))
        local4 = tf.nn.relu(tf.matmul(local3, weights) + biases, name=scope.name)
        _activation_summary(local4)

    # linear layer(WX + b)
    with v1.variable_scope("softmax_linear") as scope:
        weights = _variable_with_weight_decay(
            "weights", [LOCAL4_UNITS, NUM_CLASSES], stddev=1 / float(LOCAL4_UNITS), wd=None
        )
        biases = _variable_on_cpu("biases", [NUM_CLASSES], v1.constant_initializer(0.0))
        softmax_linear = tf.add(tf.matmul(local4, weights), biases, name=scope.name)
        _activation_summary(softmax_linear)

    return softmax_linear


def loss(logits, labels):
    labels = tf.cast(labels, tf.int64)
    cross_entropy = v1.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits, name="cross_entropy_per_example"
    )
    cross_entropy_mean = tf.reduce_mean(cross_entropy, name="cross_entropy")
    v1.add_to_collection("losses", cross_entropy_mean)
    return tf.add_n(v1.get_collection("losses"), name="total_loss")


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
