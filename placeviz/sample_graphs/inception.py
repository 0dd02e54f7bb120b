"""A tiny Inception-style CNN trained as models/inception/inception_distributed_train.py does.

Conv layers follow slim's inception_v3 layout (``conv0/weights``, ``conv0/BatchNorm/beta``,
``mixed_0/branch3x3dbl/Conv_1/...``): convolutions without biases, batch norm with a learned
``beta``, and ``moving_mean``/``moving_variance`` updated through ``UPDATE_OPS`` and listed in
``MOVING_AVERAGE_VARIABLES``. Training uses an exponentially decayed learning rate, momentum, and an
ExponentialMovingAverage of the trainable and moving-average variables; with sync_replicas the
average is handed to SyncReplicasOptimizer (``variable_averages=``, ``variables_to_average=``), as
the distributed inception trainer does, so the chief's sync op runs it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from placeviz.sample_graphs._common import BuildContext, Model, build_training_graph, feature
from placeviz.sample_graphs.options import DEFAULT_OPTIONS, BuildOptions

BATCH_SIZE = 2
IMAGE_SIZE = 12
CHANNELS = 3
NUM_CLASSES = 5
BATCHNORM_MOVING_AVERAGE_DECAY = 0.9997
BATCHNORM_EPSILON = 0.001
MOVING_AVERAGE_DECAY = 0.9999
WEIGHT_DECAY = 0.00004
INITIAL_LEARNING_RATE = 0.1
LEARNING_RATE_DECAY_FACTOR = 0.16
DECAY_STEPS = 1000
MOMENTUM = 0.9


def _assign_moving_average(variable: tf.Variable, value: tf.Tensor, decay: float) -> tf.Operation:
    """TF's moving_averages.assign_moving_average(zero_debias=False), which is not public API."""
    with tf.compat.v1.name_scope(None, "AssignMovingAvg", [variable, value]) as scope:
        decay_t = tf.convert_to_tensor(1.0 - decay, name="decay")
        with tf.compat.v1.colocate_with(variable):
            return tf.compat.v1.assign_sub(variable, (variable - value) * decay_t, name=scope)


def _weight_decay(weights: tf.Variable) -> tf.Tensor:
    return tf.multiply(WEIGHT_DECAY, tf.nn.l2_loss(weights), name="weight_decay")


def _batch_norm(x: tf.Tensor) -> tf.Tensor:
    depth = x.shape[-1]
    with tf.compat.v1.variable_scope("BatchNorm"):
        beta = tf.compat.v1.get_variable("beta", [depth], initializer=tf.compat.v1.zeros_initializer())
        moving_collections = [
            tf.compat.v1.GraphKeys.GLOBAL_VARIABLES,
            tf.compat.v1.GraphKeys.MOVING_AVERAGE_VARIABLES,
        ]
        moving_mean = tf.compat.v1.get_variable(
            "moving_mean",
            [depth],
            initializer=tf.compat.v1.zeros_initializer(),
            trainable=False,
            collections=moving_collections,
        )
        moving_variance = tf.compat.v1.get_variable(
            "moving_variance",
            [depth],
            initializer=tf.compat.v1.ones_initializer(),
            trainable=False,
            collections=moving_collections,
        )
        mean, variance = tf.nn.moments(x, [0, 1, 2])
        for var, value in ((moving_mean, mean), (moving_variance, variance)):
            tf.compat.v1.add_to_collection(
                tf.compat.v1.GraphKeys.UPDATE_OPS,
                _assign_moving_average(var, value, BATCHNORM_MOVING_AVERAGE_DECAY),
            )
        return tf.nn.batch_normalization(x, mean, variance, beta, None, BATCHNORM_EPSILON)


def _conv(x: tf.Tensor, depth: int, kernel: int, scope: str, stride: int = 1) -> tf.Tensor:
    with tf.compat.v1.variable_scope(scope):
        weights = tf.compat.v1.get_variable(
            "weights",
            [kernel, kernel, x.shape[-1], depth],
            initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1),
            regularizer=_weight_decay,
        )
        conv = tf.nn.conv2d(x, weights, strides=[1, stride, stride, 1], padding="SAME")
        return tf.nn.relu(_batch_norm(conv))


def _mixed(x: tf.Tensor, scope: str) -> tf.Tensor:
    """An Inception block: four towers concatenated on the channel axis."""
    with tf.compat.v1.variable_scope(scope):
        with tf.compat.v1.variable_scope("branch1x1"):
            branch1x1 = _conv(x, 4, 1, "Conv")
        with tf.compat.v1.variable_scope("branch5x5"):
            branch5x5 = _conv(x, 3, 1, "Conv")
            branch5x5 = _conv(branch5x5, 4, 5, "Conv_1")
        with tf.compat.v1.variable_scope("branch3x3dbl"):
            branch3x3dbl = _conv(x, 4, 1, "Conv")
            branch3x3dbl = _conv(branch3x3dbl, 4, 3, "Conv_1")
            branch3x3dbl = _conv(branch3x3dbl, 4, 3, "Conv_2")
        with tf.compat.v1.variable_scope("branch_pool"):
            branch_pool = tf.nn.avg_pool2d(x, 3, strides=1, padding="SAME", name="AvgPool")
            branch_pool = _conv(branch_pool, 4, 1, "Conv")
        return tf.concat([branch1x1, branch5x5, branch3x3dbl, branch_pool], axis=3)


def _model(ctx: BuildContext) -> Model:
    rng = ctx.rng
    images = feature("images", rng.rand(BATCH_SIZE, IMAGE_SIZE, IMAGE_SIZE, CHANNELS).astype(np.float32))
    labels = feature("labels", rng.randint(0, NUM_CLASSES, size=BATCH_SIZE).astype(np.int32))

    lr = tf.compat.v1.train.exponential_decay(
        INITIAL_LEARNING_RATE,
        ctx.global_step,
        DECAY_STEPS,
        LEARNING_RATE_DECAY_FACTOR,
        staircase=True,
    )
    opt = tf.compat.v1.train.MomentumOptimizer(lr, MOMENTUM)

    with tf.compat.v1.variable_scope("inception_v3"):
        net = _conv(images, 8, 3, "conv0")
        net = tf.nn.max_pool2d(net, 3, strides=2, padding="SAME", name="pool0")
        for i in range(ctx.options.scale):
            net = _mixed(net, f"mixed_{i}")
        net = tf.reduce_mean(net, axis=[1, 2], name="pool")
        with tf.compat.v1.variable_scope("logits"):
            weights = tf.compat.v1.get_variable(
                "weights",
                [net.shape[-1], NUM_CLASSES],
                initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1),
                regularizer=_weight_decay,
            )
            biases = tf.compat.v1.get_variable(
                "biases", [NUM_CLASSES], initializer=tf.compat.v1.zeros_initializer()
            )
            logits = tf.compat.v1.nn.xw_plus_b(net, weights, biases, name="logits")

    tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits, scope="cross_entropy")
    losses = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES)
    losses += tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)
    total_loss = tf.add_n(losses, name="total_loss")

    ema = tf.compat.v1.train.ExponentialMovingAverage(MOVING_AVERAGE_DECAY, ctx.global_step)
    variables_to_average = tf.compat.v1.trainable_variables() + tf.compat.v1.moving_average_variables()
    return Model(loss=total_loss, optimizer=opt, ema=ema, variables_to_average=variables_to_average)


def build(options: BuildOptions = DEFAULT_OPTIONS) -> tf.Graph:
    return build_training_graph(options, _model)
