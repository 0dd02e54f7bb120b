"""A Transformer language model stack after TF1's official/transformer (model/transformer.py).

Each layer is pre-norm self-attention (``q``/``k``/``v``/``output_transform`` without biases, split
heads, causal mask) and a ``feed_forward_network`` (``filter_layer``/``output_layer``), both wrapped
with ``layer_normalization`` and a residual connection (official's PrePostProcessingWrapper). The
embedding is shared with the softmax (``embedding_shared_weights``); Adam trains it all. Dimensions
are tiny (d=8) so a step is cheap, but the default ``LAYERS`` makes a 10k+ node graph;
``options.scale`` multiplies the layers.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from placeviz.sample_graphs._common import BuildContext, Model, build_training_graph, feature
from placeviz.sample_graphs.options import DEFAULT_OPTIONS, BuildOptions

LAYERS = 20  # per unit of scale
BATCH_SIZE = 2
LENGTH = 4
VOCAB_SIZE = 16
HIDDEN_SIZE = 8
NUM_HEADS = 2
FILTER_SIZE = 16
EPSILON = 1e-6
LEARNING_RATE = 0.001


def _dense(x: tf.Tensor, units: int, name: str, use_bias: bool = True, activation=None) -> tf.Tensor:
    """A tf.layers.Dense over the last axis of a rank-3 tensor."""
    with tf.compat.v1.variable_scope(name):
        kernel = tf.compat.v1.get_variable(
            "kernel", [x.shape[-1], units], initializer=tf.compat.v1.glorot_uniform_initializer()
        )
        y = tf.tensordot(x, kernel, axes=[[2], [0]])
        if use_bias:
            bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
            y = tf.nn.bias_add(y, bias)
        return activation(y) if activation is not None else y


def _layer_norm(x: tf.Tensor) -> tf.Tensor:
    with tf.compat.v1.variable_scope("layer_normalization"):
        scale = tf.compat.v1.get_variable(
            "layer_norm_scale", [HIDDEN_SIZE], initializer=tf.compat.v1.ones_initializer()
        )
        bias = tf.compat.v1.get_variable(
            "layer_norm_bias", [HIDDEN_SIZE], initializer=tf.compat.v1.zeros_initializer()
        )
        mean = tf.reduce_mean(x, axis=[-1], keepdims=True)
        variance = tf.reduce_mean(tf.square(x - mean), axis=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + EPSILON) * scale + bias


def _split_heads(x: tf.Tensor) -> tf.Tensor:
    with tf.compat.v1.name_scope("split_heads"):
        x = tf.reshape(x, [BATCH_SIZE, LENGTH, NUM_HEADS, HIDDEN_SIZE // NUM_HEADS])
        return tf.transpose(x, [0, 2, 1, 3])


def _combine_heads(x: tf.Tensor) -> tf.Tensor:
    with tf.compat.v1.name_scope("combine_heads"):
        x = tf.transpose(x, [0, 2, 1, 3])
        return tf.reshape(x, [BATCH_SIZE, LENGTH, HIDDEN_SIZE])


def _self_attention(x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    with tf.compat.v1.variable_scope("self_attention"):
        q = _split_heads(_dense(x, HIDDEN_SIZE, "q", use_bias=False))
        k = _split_heads(_dense(x, HIDDEN_SIZE, "k", use_bias=False))
        v = _split_heads(_dense(x, HIDDEN_SIZE, "v", use_bias=False))
        q *= (HIDDEN_SIZE // NUM_HEADS) ** -0.5
        logits = tf.matmul(q, k, transpose_b=True) + bias
        weights = tf.nn.softmax(logits, name="attention_weights")
        attention_output = _combine_heads(tf.matmul(weights, v))
        return _dense(attention_output, HIDDEN_SIZE, "output_transform", use_bias=False)


def _feed_forward(x: tf.Tensor) -> tf.Tensor:
    with tf.compat.v1.variable_scope("feed_forward_network"):
        h = _dense(x, FILTER_SIZE, "filter_layer", activation=tf.nn.relu)
        return _dense(h, HIDDEN_SIZE, "output_layer")


def _model(ctx: BuildContext) -> Model:
    rng = ctx.rng
    tokens = rng.randint(0, VOCAB_SIZE, size=(BATCH_SIZE, LENGTH + 1)).astype(np.int32)
    inputs = feature("inputs", tokens[:, :-1])
    targets = feature("targets", tokens[:, 1:])

    with tf.compat.v1.variable_scope("model/Transformer"):
        with tf.compat.v1.variable_scope("embedding_shared_weights/embedding_and_softmax"):
            shared_weights = tf.compat.v1.get_variable(
                "weights",
                [VOCAB_SIZE, HIDDEN_SIZE],
                initializer=tf.compat.v1.random_normal_initializer(0.0, HIDDEN_SIZE**-0.5),
            )
            x = tf.gather(shared_weights, inputs) * HIDDEN_SIZE**0.5
        with tf.compat.v1.name_scope("attention_bias"):
            causal = np.tril(np.ones([LENGTH, LENGTH], np.float32))
            attention_bias = tf.constant(-1e9 * (1.0 - causal).reshape(1, 1, LENGTH, LENGTH))
        with tf.compat.v1.variable_scope("decoder_stack"):
            for n in range(LAYERS * ctx.options.scale):
                with tf.compat.v1.variable_scope(f"layer_{n}"):
                    with tf.compat.v1.variable_scope("self_attention"):
                        x += _self_attention(_layer_norm(x), attention_bias)
                    with tf.compat.v1.variable_scope("ffn"):
                        x += _feed_forward(_layer_norm(x))
            x = _layer_norm(x)
        with tf.compat.v1.name_scope("presoftmax_linear"):
            logits = tf.tensordot(x, shared_weights, axes=[[2], [1]])
        xentropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
        loss = tf.reduce_mean(xentropy, name="loss")
    return Model(loss=loss, optimizer=tf.compat.v1.train.AdamOptimizer(LEARNING_RATE))


def build(options: BuildOptions = DEFAULT_OPTIONS) -> tf.Graph:
    return build_training_graph(options, _model)
