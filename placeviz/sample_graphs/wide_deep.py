"""Wide & deep recommender, after TF1's DNNLinearCombinedClassifier (census wide_deep tutorial).

The wide part is a linear model over hashed, crossed sparse features
(``embedding_lookup_sparse`` with ``combiner="sum"`` on ``linear/weights``, split by
``min_max_variable_partitioner``); the deep part embeds item ids in a large table split with
``fixed_size_partitioner(3)`` (``embedding_lookup`` on a PartitionedVariable, mean-pooled) and feeds
it with dense features through two hidden layers. Adagrad gets IndexedSlices gradients for every
embedding shard, so with sync_replicas each shard gets a SparseConditionalAccumulator.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from placeviz.sample_graphs._common import BuildContext, Model, build_training_graph, feature
from placeviz.sample_graphs.options import DEFAULT_OPTIONS, BuildOptions

BATCH_SIZE = 8
ITEM_VOCAB = 10000  # per unit of scale
ITEM_IDS_PER_EXAMPLE = 3
EMBEDDING_DIM = 8
NUM_EMBEDDING_SHARDS = 3
WIDE_HASH_BUCKETS = 2000  # per unit of scale
WIDE_IDS_PER_EXAMPLE = 4
NUM_DENSE = 4
HIDDEN_UNITS = (16, 8)
LEARNING_RATE = 0.05


def _dense(x: tf.Tensor, units: int, scope: str, activation=None) -> tf.Tensor:
    with tf.compat.v1.variable_scope(scope):
        kernel = tf.compat.v1.get_variable(
            "kernel", [x.shape[-1], units], initializer=tf.compat.v1.glorot_uniform_initializer()
        )
        bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
        y = tf.compat.v1.nn.xw_plus_b(x, kernel, bias)
        return activation(y) if activation is not None else y


def _model(ctx: BuildContext) -> Model:
    rng = ctx.rng
    scale = ctx.options.scale
    item_vocab = ITEM_VOCAB * scale
    wide_buckets = WIDE_HASH_BUCKETS * scale

    # Inputs: a SparseTensor of hashed crossed features (as tf.compat.v1.sparse_placeholder would
    # give, but with defaults), multi-valued item ids, dense features and a binary label.
    n_wide = BATCH_SIZE * WIDE_IDS_PER_EXAMPLE
    wide_indices = np.stack(
        [
            np.repeat(np.arange(BATCH_SIZE), WIDE_IDS_PER_EXAMPLE),
            np.tile(np.arange(WIDE_IDS_PER_EXAMPLE), BATCH_SIZE),
        ],
        axis=1,
    ).astype(np.int64)
    wide_ids = tf.SparseTensor(
        indices=feature("wide_ids/indices", wide_indices),
        values=feature("wide_ids/values", rng.randint(0, wide_buckets, size=n_wide).astype(np.int64)),
        dense_shape=feature("wide_ids/shape", np.array([BATCH_SIZE, WIDE_IDS_PER_EXAMPLE], np.int64)),
    )
    item_ids = feature(
        "item_ids", rng.randint(0, item_vocab, size=(BATCH_SIZE, ITEM_IDS_PER_EXAMPLE)).astype(np.int64)
    )
    dense_features = feature("dense_features", rng.rand(BATCH_SIZE, NUM_DENSE).astype(np.float32))
    labels = feature("labels", rng.randint(0, 2, size=(BATCH_SIZE, 1)).astype(np.float32))

    with tf.compat.v1.variable_scope("linear"):
        linear_weights = tf.compat.v1.get_variable(
            "weights",
            [wide_buckets, 1],
            initializer=tf.compat.v1.zeros_initializer(),
            partitioner=tf.compat.v1.min_max_variable_partitioner(max_partitions=4, min_slice_size=2 << 10),
        )
        linear_bias = tf.compat.v1.get_variable(
            "bias_weight", [1], initializer=tf.compat.v1.zeros_initializer()
        )
        wide_logits = tf.nn.bias_add(
            tf.compat.v1.nn.embedding_lookup_sparse(linear_weights, wide_ids, None, combiner="sum"),
            linear_bias,
            name="wide_logits",
        )

    with tf.compat.v1.variable_scope("dnn"):
        with tf.compat.v1.variable_scope("input_from_feature_columns"):
            embeddings = tf.compat.v1.get_variable(
                "item_id_embedding/weights",
                [item_vocab, EMBEDDING_DIM],
                initializer=tf.compat.v1.truncated_normal_initializer(stddev=1.0 / np.sqrt(EMBEDDING_DIM)),
                partitioner=tf.compat.v1.fixed_size_partitioner(NUM_EMBEDDING_SHARDS),
            )
            item_vectors = tf.compat.v1.nn.embedding_lookup(embeddings, item_ids)
            net = tf.concat([tf.reduce_mean(item_vectors, axis=1), dense_features], axis=1)
        for i, units in enumerate(HIDDEN_UNITS):
            net = _dense(net, units, f"hiddenlayer_{i}", tf.nn.relu)
        deep_logits = _dense(net, 1, "logits")

    logits = tf.add(wide_logits, deep_logits, name="logits")
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits), name="loss")
    return Model(loss=loss, optimizer=tf.compat.v1.train.AdagradOptimizer(LEARNING_RATE))


def build(options: BuildOptions = DEFAULT_OPTIONS) -> tf.Graph:
    return build_training_graph(options, _model)
