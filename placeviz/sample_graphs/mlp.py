"""A small MLP classifier, after TF's distributed MNIST example (mnist_replica.py).

Variables are made with ``tf.compat.v1.Variable`` from explicit initial values, as in
``tensorflow/tools/dist_test/python/mnist_replica.py`` (``hid_w``, ``hid_b``, ``sm_w``, ``sm_b``),
so their ``initial_value`` ops land on the worker while the variables go to the ps tasks.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from placeviz.sample_graphs._common import BuildContext, Model, build_training_graph, feature
from placeviz.sample_graphs.options import DEFAULT_OPTIONS, BuildOptions

IMAGE_PIXELS = 8  # images are IMAGE_PIXELS x IMAGE_PIXELS, flattened
HIDDEN_UNITS = 16
NUM_CLASSES = 10
BATCH_SIZE = 8
LEARNING_RATE = 0.01


def _model(ctx: BuildContext) -> Model:
    rng = ctx.rng
    n_in = IMAGE_PIXELS * IMAGE_PIXELS
    x = feature("x", rng.rand(BATCH_SIZE, n_in).astype(np.float32))
    labels = rng.randint(0, NUM_CLASSES, size=BATCH_SIZE)
    y_ = feature("y_", np.eye(NUM_CLASSES, dtype=np.float32)[labels])

    hid = x
    fan_in = n_in
    # ctx.options.scale hidden layers: hid_w/hid_b, then hid1_w/hid1_b, ...
    for i in range(ctx.options.scale):
        prefix = "hid" if i == 0 else f"hid{i}"
        hid_w = tf.compat.v1.Variable(
            tf.random.truncated_normal([fan_in, HIDDEN_UNITS], stddev=1.0 / IMAGE_PIXELS),
            name=f"{prefix}_w",
        )
        hid_b = tf.compat.v1.Variable(tf.zeros([HIDDEN_UNITS]), name=f"{prefix}_b")
        hid = tf.nn.relu(tf.compat.v1.nn.xw_plus_b(hid, hid_w, hid_b))
        fan_in = HIDDEN_UNITS

    sm_w = tf.compat.v1.Variable(
        tf.random.truncated_normal([HIDDEN_UNITS, NUM_CLASSES], stddev=1.0 / math.sqrt(HIDDEN_UNITS)),
        name="sm_w",
    )
    sm_b = tf.compat.v1.Variable(tf.zeros([NUM_CLASSES]), name="sm_b")
    y = tf.nn.softmax(tf.compat.v1.nn.xw_plus_b(hid, sm_w, sm_b))
    cross_entropy = -tf.reduce_sum(y_ * tf.math.log(tf.clip_by_value(y, 1e-10, 1.0)))

    def metrics() -> list:
        _, accuracy_update = tf.compat.v1.metrics.accuracy(
            labels=tf.argmax(y_, 1), predictions=tf.argmax(y, 1), name="accuracy"
        )
        return [accuracy_update]

    return Model(
        loss=cross_entropy,
        optimizer=tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE),
        metrics_fn=metrics,
    )


def build(options: BuildOptions = DEFAULT_OPTIONS) -> tf.Graph:
    return build_training_graph(options, _model)
