"""The parts of tensorflow/models ``tutorials/image/cifar10/cifar10.py`` (and ``cifar10_input.py``)
that ``cifar10_ema_resource`` and ``cifar10_multi_gpu`` both use, as upstream's two trainers import
the one ``cifar10`` module: inputs, ``inference``, ``loss`` and their constants. The changes from
upstream are listed in those two modules' docstrings (sizes shrunk, a constant input queue).
"""

import re

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1

# cifar10.py flags, as constants (the same in both trainers).
BATCH_SIZE = 2
USE_FP16 = False

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
