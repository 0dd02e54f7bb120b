"""Feature-id remapping with mutable hash tables in front of a small embedding model.

Recommenders that see an unbounded id space (the TF1 ``tf.contrib.lookup.MutableHashTable``
pattern, later TFRA/DeepRec dynamic embeddings) remap raw 64-bit feature ids to rows of a fixed
embedding: ``feature_id_table`` (MutableHashTableV2) maps raw id -> row, unseen ids fall back to
``raw_id mod buckets`` and every training step inserts the mapping it used; ``feature_counts``
(MutableDenseHashTableV2) counts how often each id was seen. Both table ops are in
replica_device_setter's default ps op list, so they go to ps tasks; the lookups and inserts take
the table's resource handle, so the Placer puts them next to the table. The embedding and the two
dense layers are trained with FTRL (sparse updates for the embedding).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from placeviz.sample_graphs._common import BuildContext, Model, build_training_graph, feature
from placeviz.sample_graphs.options import DEFAULT_OPTIONS, BuildOptions

BATCH_SIZE = 8
IDS_PER_EXAMPLE = 4
NUM_BUCKETS = 1000
EMBEDDING_DIM = 8
HIDDEN_UNITS = 16
LEARNING_RATE = 0.05


def _model(ctx: BuildContext) -> Model:
    rng = ctx.rng
    raw = rng.randint(0, 2**40, size=(BATCH_SIZE, IDS_PER_EXAMPLE), dtype=np.int64)
    raw[:, 0] = raw[0, 0]  # a popular id, seen by every example
    raw_ids = feature("raw_feature_ids", raw)
    labels = feature("labels", rng.randint(0, 2, size=(BATCH_SIZE, 1)).astype(np.float32))

    train_deps = []
    num_tables = ctx.options.scale
    pooled = []
    for t in range(num_tables):
        suffix = "" if t == 0 else f"_{t}"
        id_table = tf.lookup.experimental.MutableHashTable(
            key_dtype=tf.int64, value_dtype=tf.int64, default_value=-1, name=f"feature_id_table{suffix}"
        )
        counts = tf.lookup.experimental.DenseHashTable(
            key_dtype=tf.int64,
            value_dtype=tf.int64,
            default_value=0,
            empty_key=-1,
            deleted_key=-2,
            name=f"feature_counts{suffix}",
        )
        with tf.compat.v1.name_scope(f"remap{suffix}"):
            flat_ids = tf.reshape(raw_ids, [-1])
            known_rows = id_table.lookup(flat_ids)
            rows = tf.where(known_rows >= 0, known_rows, tf.math.floormod(flat_ids, NUM_BUCKETS), name="rows")
            train_deps.append(id_table.insert(flat_ids, rows))
            train_deps.append(counts.insert(flat_ids, counts.lookup(flat_ids) + 1))

        with tf.compat.v1.variable_scope(f"embedding{suffix}"):
            embeddings = tf.compat.v1.get_variable(
                "weights",
                [NUM_BUCKETS, EMBEDDING_DIM],
                initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1),
            )
            vectors = tf.compat.v1.nn.embedding_lookup(embeddings, rows)
            vectors = tf.reshape(vectors, [BATCH_SIZE, IDS_PER_EXAMPLE, EMBEDDING_DIM])
            pooled.append(tf.reduce_mean(vectors, axis=1))

    net = tf.concat(pooled, axis=1) if len(pooled) > 1 else pooled[0]
    for name, units in (("hidden", HIDDEN_UNITS), ("logits", 1)):
        with tf.compat.v1.variable_scope(name):
            kernel = tf.compat.v1.get_variable("kernel", [net.shape[-1], units])
            bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
            net = tf.compat.v1.nn.xw_plus_b(net, kernel, bias)
            if name == "hidden":
                net = tf.nn.relu(net)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=net), name="loss")
    return Model(
        loss=loss,
        optimizer=tf.compat.v1.train.FtrlOptimizer(LEARNING_RATE),
        train_deps=train_deps,
    )


def build(options: BuildOptions = DEFAULT_OPTIONS) -> tf.Graph:
    return build_training_graph(options, _model)
