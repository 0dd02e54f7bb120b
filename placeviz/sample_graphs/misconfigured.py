"""A deliberately misconfigured parameter-server program (an MLP classifier) for lint and placement.

Three mistakes seen in real TF1 code:

1. ``output_bias`` is created *before* the ``replica_device_setter`` scope is entered, so it gets no
   device at all: the Placer puts it (and its optimizer update) on the worker, and every worker
   trains its own copy.
2. A colocation conflict: ``feature_mean`` is pinned to ``/job:ps/task:0`` and ``feature_std`` to
   ``/job:worker/task:0``, then ``normalized`` is built under ``colocate_with`` both of them, so its
   ``_class`` binds ops pinned to different jobs. TF refuses this without soft placement
   ("Cannot colocate nodes ... incompatible jobs"); with ``allow_soft_placement`` it is dropped.
3. The hidden layer's matmul is pinned to ``/gpu:0``; under the setter that becomes
   ``/job:worker/task:0/device:GPU:0``, which a CPU-only cluster does not have.

These pins are in the graph whatever the options say (also when it is otherwise unplaced). The
training step runs on a cluster with ``/job:ps`` and ``/job:worker`` and ``allow_soft_placement``
(as inception_distributed_train.py configures its sessions), not in a local one-device session.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from placeviz.sample_graphs._common import BuildContext, Model, build_training_graph, feature
from placeviz.sample_graphs.options import DEFAULT_OPTIONS, BuildOptions

PS_PIN = "/job:ps/task:0"
WORKER_PIN = "/job:worker/task:0"
GPU_PIN = "/gpu:0"
BATCH_SIZE = 8
NUM_FEATURES = 12
HIDDEN_UNITS = 16
NUM_CLASSES = 4
LEARNING_RATE = 0.1


def _prelude(options: BuildOptions) -> tf.Variable:
    # Mistake 1: created before `with tf.device(replica_device_setter(...))`.
    return tf.compat.v1.get_variable(
        "output_bias", [NUM_CLASSES], initializer=tf.compat.v1.zeros_initializer()
    )


def _model(ctx: BuildContext) -> Model:
    rng = ctx.rng
    x = feature("features", rng.randn(BATCH_SIZE, NUM_FEATURES).astype(np.float32))
    labels = feature("labels", rng.randint(0, NUM_CLASSES, size=BATCH_SIZE).astype(np.int64))

    # Mistake 2: two ops pinned to different jobs, then bound together by colocation.
    with tf.compat.v1.device(PS_PIN):
        feature_mean = tf.reduce_mean(x, axis=0, name="feature_mean")
    with tf.compat.v1.device(WORKER_PIN):
        feature_std = tf.sqrt(tf.math.reduce_variance(x, axis=0), name="feature_std")
    with tf.compat.v1.colocate_with(feature_mean.op), tf.compat.v1.colocate_with(feature_std.op):
        normalized = tf.math.divide_no_nan(x - feature_mean, feature_std, name="normalized")

    hidden_w = tf.compat.v1.get_variable("hidden/weights", [NUM_FEATURES, HIDDEN_UNITS])
    hidden_b = tf.compat.v1.get_variable(
        "hidden/biases", [HIDDEN_UNITS], initializer=tf.compat.v1.zeros_initializer()
    )
    # Mistake 3: a GPU pin on a CPU-only cluster.
    with tf.compat.v1.device(GPU_PIN):
        hidden = tf.nn.relu(tf.matmul(normalized, hidden_w) + hidden_b, name="hidden/Relu")

    output_w = tf.compat.v1.get_variable("output/weights", [HIDDEN_UNITS, NUM_CLASSES])
    logits = tf.nn.bias_add(tf.matmul(hidden, output_w), ctx.prelude, name="logits")
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), name="loss"
    )
    return Model(loss=loss, optimizer=tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE))


def build(options: BuildOptions = DEFAULT_OPTIONS) -> tf.Graph:
    return build_training_graph(options, _model, prelude=_prelude)
