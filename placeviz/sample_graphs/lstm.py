"""An LSTM language model after the PTB tutorial (models/tutorials/rnn/ptb/ptb_word_lm.py).

The embedding lives under ``tf.device("/cpu:0")`` as in ptb_word_lm.py, so under the setter it goes
to ``/job:ps/task:N/device:CPU:0``. A stack of LSTM cells runs through
``tf.compat.v1.nn.dynamic_rnn``, which builds a TF1 while loop (Enter/Merge/Switch/NextIteration/
Exit) and sets a caching device on its variable scope; gradients are clipped by global norm and
applied with Adam. A streaming mean of the cost is kept in local (metric) variables.

TF 2.21 with Keras 3 has no usable ``tf.compat.v1.nn.rnn_cell``, so the cells below reproduce the
math and variable names of TF1's BasicLSTMCell/MultiRNNCell (``multi_rnn_cell/cell_0/
basic_lstm_cell/kernel``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from placeviz.sample_graphs._common import BuildContext, Model, build_training_graph, feature
from placeviz.sample_graphs.options import DEFAULT_OPTIONS, BuildOptions

BATCH_SIZE = 4
NUM_STEPS = 5
HIDDEN_SIZE = 8
VOCAB_SIZE = 50
NUM_LAYERS = 2  # per unit of scale
KEEP_PROB = 0.9
INIT_SCALE = 0.1
MAX_GRAD_NORM = 5.0
LEARNING_RATE = 0.01


class LSTMStateTuple(NamedTuple):
    c: tf.Tensor
    h: tf.Tensor


class BasicLSTMCell:
    """TF1's BasicLSTMCell (forget_bias=1.0, tanh), duck-typed for dynamic_rnn."""

    def __init__(self, num_units: int, forget_bias: float = 1.0) -> None:
        self._num_units = num_units
        self._forget_bias = forget_bias

    @property
    def state_size(self) -> LSTMStateTuple:
        return LSTMStateTuple(self._num_units, self._num_units)

    @property
    def output_size(self) -> int:
        return self._num_units

    def zero_state(self, batch_size, dtype) -> LSTMStateTuple:
        with tf.compat.v1.name_scope("BasicLSTMCellZeroState"):
            return LSTMStateTuple(
                tf.zeros([batch_size, self._num_units], dtype), tf.zeros([batch_size, self._num_units], dtype)
            )

    def __call__(self, inputs: tf.Tensor, state: LSTMStateTuple, scope=None):
        with tf.compat.v1.variable_scope(scope or "basic_lstm_cell"):
            depth = inputs.shape[-1] + self._num_units
            kernel = tf.compat.v1.get_variable("kernel", [depth, 4 * self._num_units])
            bias = tf.compat.v1.get_variable(
                "bias", [4 * self._num_units], initializer=tf.compat.v1.zeros_initializer()
            )
            c, h = state
            gate_inputs = tf.nn.bias_add(tf.matmul(tf.concat([inputs, h], 1), kernel), bias)
            i, j, f, o = tf.split(gate_inputs, 4, axis=1)
            new_c = c * tf.sigmoid(f + self._forget_bias) + tf.sigmoid(i) * tf.tanh(j)
            new_h = tf.tanh(new_c) * tf.sigmoid(o)
            return new_h, LSTMStateTuple(new_c, new_h)


class MultiRNNCell:
    """TF1's MultiRNNCell: cells stacked under ``multi_rnn_cell/cell_<i>``."""

    def __init__(self, cells: list) -> None:
        self._cells = cells

    @property
    def state_size(self) -> tuple:
        return tuple(cell.state_size for cell in self._cells)

    @property
    def output_size(self) -> int:
        return self._cells[-1].output_size

    def zero_state(self, batch_size, dtype) -> tuple:
        with tf.compat.v1.name_scope("MultiRNNCellZeroState"):
            return tuple(cell.zero_state(batch_size, dtype) for cell in self._cells)

    def __call__(self, inputs: tf.Tensor, state: tuple, scope=None):
        with tf.compat.v1.variable_scope(scope or "multi_rnn_cell"):
            new_states = []
            for i, cell in enumerate(self._cells):
                with tf.compat.v1.variable_scope(f"cell_{i}"):
                    inputs, new_state = cell(inputs, state[i])
                    new_states.append(new_state)
            return inputs, tuple(new_states)


def _model(ctx: BuildContext) -> Model:
    rng = ctx.rng
    tokens = rng.randint(0, VOCAB_SIZE, size=(BATCH_SIZE, NUM_STEPS + 1)).astype(np.int32)
    input_data = feature("input_data", tokens[:, :-1])
    targets = feature("targets", tokens[:, 1:])

    initializer = tf.compat.v1.random_uniform_initializer(-INIT_SCALE, INIT_SCALE)
    with tf.compat.v1.variable_scope("Model", initializer=initializer):
        with tf.compat.v1.device("/cpu:0"):
            embedding = tf.compat.v1.get_variable("embedding", [VOCAB_SIZE, HIDDEN_SIZE])
            inputs = tf.compat.v1.nn.embedding_lookup(embedding, input_data)
        inputs = tf.compat.v1.nn.dropout(inputs, rate=1.0 - KEEP_PROB)

        cell = MultiRNNCell([BasicLSTMCell(HIDDEN_SIZE) for _ in range(NUM_LAYERS * ctx.options.scale)])
        initial_state = cell.zero_state(BATCH_SIZE, tf.float32)
        outputs, _ = tf.compat.v1.nn.dynamic_rnn(cell, inputs, initial_state=initial_state)
        output = tf.reshape(outputs, [-1, HIDDEN_SIZE])

        softmax_w = tf.compat.v1.get_variable("softmax_w", [HIDDEN_SIZE, VOCAB_SIZE])
        softmax_b = tf.compat.v1.get_variable("softmax_b", [VOCAB_SIZE])
        logits = tf.reshape(
            tf.compat.v1.nn.xw_plus_b(output, softmax_w, softmax_b), [BATCH_SIZE, NUM_STEPS, VOCAB_SIZE]
        )
        # sequence_loss(average_across_timesteps=False, average_across_batch=True), summed.
        crossent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
        cost = tf.reduce_sum(tf.reduce_mean(crossent, axis=0), name="cost")

    def metrics() -> list:
        _, mean_cost_update = tf.compat.v1.metrics.mean(cost, name="mean_cost")
        return [mean_cost_update]

    return Model(
        loss=cost,
        optimizer=tf.compat.v1.train.AdamOptimizer(LEARNING_RATE),
        grad_clip_norm=MAX_GRAD_NORM,
        metrics_fn=metrics,
    )


def build(options: BuildOptions = DEFAULT_OPTIONS) -> tf.Graph:
    return build_training_graph(options, _model)
