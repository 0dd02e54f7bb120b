"""PTB word-level LSTM language model (Zaremba et al.), ported from the TF1 tutorial.

Source: ``tensorflow/models: tutorials/rnn/ptb/ptb_word_lm.py`` (the ``rnn_mode`` version with
``export_ops``/``import_ops`` and a ``tf.train.Supervisor``; text read at commit
086660faed00c84086b05bee6cfa1a2c9f801712), with ``reader.ptb_producer`` from
``tutorials/rnn/ptb/reader.py`` and the helpers it uses from ``tutorials/rnn/ptb/util.py``.

Kept as written: ``PTBInput`` / ``PTBModel`` with the embedding under ``tf.device("/cpu:0")``, a
``MultiRNNCell`` of LSTM cells built from ``zero_state``, ``xw_plus_b`` softmax, the sequence loss,
the ``_lr`` variable with its ``new_learning_rate`` placeholder and ``assign``, ``tf.gradients`` +
``tf.clip_by_global_norm`` + ``GradientDescentOptimizer.apply_gradients(...,
global_step=get_or_create_global_step())``; the Train/Valid/Test name scopes with
``variable_scope("Model", reuse=...)``; the ``export_ops`` -> ``export_meta_graph`` ->
``import_meta_graph`` in a second fresh graph -> ``import_ops`` round trip; and a
``tf.train.Supervisor`` over the imported graph (constructed, ``managed_session`` never entered).
``build`` returns the export of that second graph, the one the program trains with.

Changes:

* Flags became constants (``FLAGS`` below): model "small", no data or save path, fp32, one GPU.
  Tiny sizes: ``SmallConfig`` now has vocab 50, hidden 8, 2 layers, num_steps 3, batch 2
  (``keep_prob`` stays 1.0, so no dropout is built, as in the original small config).
  ``MediumConfig``/``LargeConfig``/``TestConfig``, ``run_epoch``, the ``--data_path`` and
  ``device_lib`` GPU-count checks and the ``num_gpus > 1`` ``util.auto_parallel`` branch (never
  taken with one GPU) are dropped; ``main(_)`` is ``_main(placed, sync, is_chief)``, returning
  the second graph; ``sv.managed_session`` and everything after it is not run.
* ``reader.ptb_raw_data`` (reads files) is replaced by tiny constant word-id lists;
  ``reader.ptb_producer`` is kept verbatim, so each input still gets its
  ``tf.compat.v1.train.range_input_producer`` FIFO queue and queue runner.
* ``rnn_mode`` is BASIC: ``tf.contrib.rnn.LSTMBlockCell`` (BLOCK) and ``CudnnLSTM`` (CUDNN) left TF
  with ``tf.contrib``, and ``tf.compat.v1.nn.rnn_cell.*`` is not available with Keras 3, so
  ``BasicLSTMCell``/``MultiRNNCell``/``LSTMStateTuple`` come from TF's bundled legacy copy
  ``tensorflow.python.keras.layers.legacy_rnn.rnn_cell_impl`` (the classes ``tf.contrib.rnn``
  aliased). The CUDNN branch (``_build_rnn_graph_cudnn``, ``RNNParamsSaveable``) and the
  ``StrictVersion`` check are dropped.
* The original unrolls the cell by hand in ``_build_rnn_graph_lstm`` ("Simplified version of
  tf.nn.static_rnn()"). This port uses ``tf.compat.v1.nn.dynamic_rnn`` (same variable scope
  ``RNN``, same initial state) so the graph has a v1 while loop with TensorArrays and its gradient
  (``TensorArrayGradV3``, ``gradient_flow``). ``build`` turns control flow v2 off while it builds
  (``control_flow_util.ENABLE_CONTROL_FLOW_V2``, restored afterwards) so TF 2 emits TF1's
  Enter/Exit/Switch/Merge/NextIteration + ``TensorArrayV3`` ops rather than ``While``/TensorList.
* ``variable_scope("Model", ..., use_resource=False)``: keeps TF1's reference variables
  (``VariableV2``); TF 2 would otherwise make every variable a resource variable.
* ``tf.contrib.seq2seq.sequence_loss`` is gone: ``_sequence_loss`` below is its TF 1 body
  (``tensorflow/contrib/seq2seq/python/ops/loss.py``), inlined.
* Removed APIs use ``tf.compat.v1`` (``get_variable``, ``placeholder``, ``assign``, ``gradients``,
  ``train.*``, ``summary.scalar``, ``assert_positive``, ``device``, ``name_scope``...). Lint-only
  edits: classes drop ``(object)``, ``zip(grads, tvars, strict=True)``, one f-string.
* Added for the corpus (the original is single-machine): the model building (inputs, models,
  summaries) runs under ``tf.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2))`` as
  TF's between-graph replication docs recommend; ``placed=False`` leaves that out.
* Added for the corpus: with ``sync=True`` the training model's optimizer is wrapped in
  ``tf.compat.v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=2,
  total_num_replicas=2)``; right after ``apply_gradients`` it takes the Supervisor-era sync ops
  as TF's ``tools/dist_test/python/mnist_replica.py`` does (``chief_init_op`` or
  ``local_step_init_op`` by ``is_chief``, ``ready_for_local_init_op``,
  ``get_chief_queue_runner()``, ``get_init_tokens_op()`` -- the latter on every worker, so the
  graph does not depend on ``is_chief``). They cross the meta-graph round trip like the model's
  other ops (collections; the chief queue runner as its ``QueueRunnerDef``) and are passed to the
  Supervisor (``is_chief``, ``local_init_op``, ``ready_for_local_init_op``).
"""

import tensorflow as tf
from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rnn_cell
from tensorflow.python.ops import control_flow_util

SOURCE = "tensorflow/models: tutorials/rnn/ptb/ptb_word_lm.py"
SETTER = {"ps_tasks": 2}
SYNC = {"replicas_to_aggregate": 2, "total_replicas": 2}
SYNC_PROGRAM_CHANGES = {
    "names": ["group_deps", "group_deps/NoOp", "group_deps/NoOp_1", "init_1", "init_all_tables",
              "Train/Model/sync_rep_local_step/Assign"],
    "why": "in sync mode the program gives its Supervisor local_init_op (mnist_replica's pattern), so the "
           "Supervisor's default local-init group is never built and the local step's initializer is never "
           "a control input (_has_manual_control_dependencies)",
}
CHIEF_ONLY = False


class _Flags:
  """The original's command-line flags, as constants."""
  model = "small"
  data_path = None
  save_path = None
  use_fp16 = False
  num_gpus = 1
  rnn_mode = None


FLAGS = _Flags()
BASIC = "basic"
CUDNN = "cudnn"
BLOCK = "block"


def data_type():
  return tf.float16 if FLAGS.use_fp16 else tf.float32


# --- reader.py ---------------------------------------------------------------------------------

def ptb_raw_data(data_path=None):
  """Stands in for reader.ptb_raw_data: tiny constant word-id lists, vocabulary 50."""
  del data_path
  train_data = [(7 * i + 3) % 50 for i in range(40)]
  valid_data = [(11 * i + 5) % 50 for i in range(24)]
  test_data = [(13 * i + 1) % 50 for i in range(12)]
  return train_data, valid_data, test_data, 50


def ptb_producer(raw_data, batch_size, num_steps, name=None):
  """Iterate on the raw PTB data (reader.ptb_producer)."""
  with tf.compat.v1.name_scope(name, "PTBProducer", [raw_data, batch_size, num_steps]):
    raw_data = tf.convert_to_tensor(raw_data, name="raw_data", dtype=tf.int32)

    data_len = tf.size(raw_data)
    batch_len = data_len // batch_size
    data = tf.reshape(raw_data[0 : batch_size * batch_len],
                      [batch_size, batch_len])

    epoch_size = (batch_len - 1) // num_steps
    assertion = tf.compat.v1.assert_positive(
        epoch_size,
        message="epoch_size == 0, decrease batch_size or num_steps")
    with tf.control_dependencies([assertion]):
      epoch_size = tf.identity(epoch_size, name="epoch_size")

    i = tf.compat.v1.train.range_input_producer(epoch_size, shuffle=False).dequeue()
    x = tf.strided_slice(data, [0, i * num_steps],
                         [batch_size, (i + 1) * num_steps])
    x.set_shape([batch_size, num_steps])
    y = tf.strided_slice(data, [0, i * num_steps + 1],
                         [batch_size, (i + 1) * num_steps + 1])
    y.set_shape([batch_size, num_steps])
    return x, y


# --- util.py -----------------------------------------------------------------------------------

def export_state_tuples(state_tuples, name):
  for state_tuple in state_tuples:
    tf.compat.v1.add_to_collection(name, state_tuple.c)
    tf.compat.v1.add_to_collection(name, state_tuple.h)


def import_state_tuples(state_tuples, name, num_replicas):
  restored = []
  for i in range(len(state_tuples) * num_replicas):
    c = tf.compat.v1.get_collection_ref(name)[2 * i + 0]
    h = tf.compat.v1.get_collection_ref(name)[2 * i + 1]
    restored.append(rnn_cell.LSTMStateTuple(c, h))
  return tuple(restored)


def with_prefix(prefix, name):
  """Adds prefix to name."""
  return "/".join((prefix, name))


# --- tf.contrib.seq2seq.sequence_loss (TF 1 body) ----------------------------------------------

def _sequence_loss(logits, targets, weights,
                   average_across_timesteps=True, average_across_batch=True,
                   softmax_loss_function=None, name=None):
  with tf.compat.v1.name_scope(name, "sequence_loss", [logits, targets, weights]):
    num_classes = tf.shape(logits)[2]
    logits_flat = tf.reshape(logits, [-1, num_classes])
    targets = tf.reshape(targets, [-1])
    if softmax_loss_function is None:
      crossent = tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=targets, logits=logits_flat)
    else:
      crossent = softmax_loss_function(labels=targets, logits=logits_flat)
    crossent *= tf.reshape(weights, [-1])
    if average_across_timesteps and average_across_batch:
      crossent = tf.reduce_sum(crossent)
      total_size = tf.reduce_sum(weights)
      total_size += 1e-12  # to avoid division by 0 for all-0 weights
      crossent /= total_size
    else:
      batch_size = tf.shape(logits)[0]
      sequence_length = tf.shape(logits)[1]
      crossent = tf.reshape(crossent, [batch_size, sequence_length])
    if average_across_timesteps and not average_across_batch:
      crossent = tf.reduce_sum(crossent, axis=[1])
      total_size = tf.reduce_sum(weights, axis=[1])
      total_size += 1e-12  # to avoid division by 0 for all-0 weights
      crossent /= total_size
    if not average_across_timesteps and average_across_batch:
      crossent = tf.reduce_sum(crossent, axis=[0])
      total_size = tf.reduce_sum(weights, axis=[0])
      total_size += 1e-12  # to avoid division by 0 for all-0 weights
      crossent /= total_size
    return crossent


# --- ptb_word_lm.py ----------------------------------------------------------------------------

class PTBInput:
  """The input data."""

  def __init__(self, config, data, name=None):
    self.batch_size = batch_size = config.batch_size
    self.num_steps = num_steps = config.num_steps
    self.epoch_size = ((len(data) // batch_size) - 1) // num_steps
    self.input_data, self.targets = ptb_producer(
        data, batch_size, num_steps, name=name)


class PTBModel:
  """The PTB model."""

  def __init__(self, is_training, config, input_, sync_replicas=False, is_chief=True):
    self._is_training = is_training
    self._input = input_
    self._rnn_params = None
    self._cell = None
    self._sync_replicas = sync_replicas and is_training  # added: corpus sync mode
    self.batch_size = input_.batch_size
    self.num_steps = input_.num_steps
    size = config.hidden_size
    vocab_size = config.vocab_size

    with tf.compat.v1.device("/cpu:0"):
      embedding = tf.compat.v1.get_variable(
          "embedding", [vocab_size, size], dtype=data_type())
      inputs = tf.compat.v1.nn.embedding_lookup(embedding, input_.input_data)

    if is_training and config.keep_prob < 1:
      inputs = tf.compat.v1.nn.dropout(inputs, config.keep_prob)

    output, state = self._build_rnn_graph(inputs, config, is_training)

    softmax_w = tf.compat.v1.get_variable(
        "softmax_w", [size, vocab_size], dtype=data_type())
    softmax_b = tf.compat.v1.get_variable("softmax_b", [vocab_size], dtype=data_type())
    logits = tf.compat.v1.nn.xw_plus_b(output, softmax_w, softmax_b)
    # Reshape logits to be a 3-D tensor for sequence loss
    logits = tf.reshape(logits, [self.batch_size, self.num_steps, vocab_size])

    # Use the contrib sequence loss and average over the batches
    loss = _sequence_loss(
        logits,
        input_.targets,
        tf.ones([self.batch_size, self.num_steps], dtype=data_type()),
        average_across_timesteps=False,
        average_across_batch=True)

    # Update the cost
    self._cost = tf.reduce_sum(loss)
    self._final_state = state

    if not is_training:
      return

    self._lr = tf.compat.v1.Variable(0.0, trainable=False)
    tvars = tf.compat.v1.trainable_variables()
    grads, _ = tf.clip_by_global_norm(tf.compat.v1.gradients(self._cost, tvars),
                                      config.max_grad_norm)
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(self._lr)
    if self._sync_replicas:  # added: corpus sync mode
      optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
          optimizer, replicas_to_aggregate=SYNC["replicas_to_aggregate"],
          total_num_replicas=SYNC["total_replicas"])
    self._train_op = optimizer.apply_gradients(
        zip(grads, tvars, strict=True),
        global_step=tf.compat.v1.train.get_or_create_global_step())
    if self._sync_replicas:  # added: Supervisor-era sync ops, as mnist_replica.py takes them
      self._local_init_op = optimizer.local_step_init_op
      if is_chief:
        self._local_init_op = optimizer.chief_init_op
      self._ready_for_local_init_op = optimizer.ready_for_local_init_op
      self._chief_queue_runner = optimizer.get_chief_queue_runner()
      self._sync_init_op = optimizer.get_init_tokens_op()

    self._new_lr = tf.compat.v1.placeholder(
        tf.float32, shape=[], name="new_learning_rate")
    self._lr_update = tf.compat.v1.assign(self._lr, self._new_lr)

  def _build_rnn_graph(self, inputs, config, is_training):
    return self._build_rnn_graph_lstm(inputs, config, is_training)

  def _get_lstm_cell(self, config, is_training):
    if config.rnn_mode == BASIC:
      return rnn_cell.BasicLSTMCell(
          config.hidden_size, forget_bias=0.0, state_is_tuple=True,
          reuse=not is_training)
    raise ValueError(f"rnn_mode {config.rnn_mode} not supported")

  def _build_rnn_graph_lstm(self, inputs, config, is_training):
    """Build the inference graph using canonical LSTM cells."""
    # Slightly better results can be obtained with forget gate biases
    # initialized to 1 but the hyperparameters of the model would need to be
    # different than reported in the paper.
    def make_cell():
      cell = self._get_lstm_cell(config, is_training)
      if is_training and config.keep_prob < 1:
        cell = rnn_cell.DropoutWrapper(
            cell, output_keep_prob=config.keep_prob)
      return cell

    cell = rnn_cell.MultiRNNCell(
        [make_cell() for _ in range(config.num_layers)], state_is_tuple=True)

    self._initial_state = cell.zero_state(config.batch_size, data_type())
    state = self._initial_state
    # Port: dynamic_rnn in place of the original's hand-unrolled loop over num_steps.
    with tf.compat.v1.variable_scope("RNN"):
      outputs, state = tf.compat.v1.nn.dynamic_rnn(
          cell, inputs, initial_state=self._initial_state)
    output = tf.reshape(outputs, [-1, config.hidden_size])
    return output, state

  def assign_lr(self, session, lr_value):
    session.run(self._lr_update, feed_dict={self._new_lr: lr_value})

  def export_ops(self, name):
    """Exports ops to collections."""
    self._name = name
    ops = {with_prefix(self._name, "cost"): self._cost}
    if self._is_training:
      ops.update(lr=self._lr, new_lr=self._new_lr, lr_update=self._lr_update)
      if self._rnn_params:
        ops.update(rnn_params=self._rnn_params)
      if self._sync_replicas:  # added: corpus sync mode
        ops.update(local_init_op=self._local_init_op,
                   ready_for_local_init_op=self._ready_for_local_init_op,
                   sync_init_op=self._sync_init_op)
        self._chief_queue_runner_def = self._chief_queue_runner.to_proto()
    for name, op in ops.items():
      tf.compat.v1.add_to_collection(name, op)
    self._initial_state_name = with_prefix(self._name, "initial")
    self._final_state_name = with_prefix(self._name, "final")
    export_state_tuples(self._initial_state, self._initial_state_name)
    export_state_tuples(self._final_state, self._final_state_name)

  def import_ops(self):
    """Imports ops from collections."""
    if self._is_training:
      self._train_op = tf.compat.v1.get_collection_ref("train_op")[0]
      self._lr = tf.compat.v1.get_collection_ref("lr")[0]
      self._new_lr = tf.compat.v1.get_collection_ref("new_lr")[0]
      self._lr_update = tf.compat.v1.get_collection_ref("lr_update")[0]
      if self._sync_replicas:  # added: corpus sync mode
        self._local_init_op = tf.compat.v1.get_collection_ref("local_init_op")[0]
        self._ready_for_local_init_op = tf.compat.v1.get_collection_ref(
            "ready_for_local_init_op")[0]
        self._sync_init_op = tf.compat.v1.get_collection_ref("sync_init_op")[0]
        self._chief_queue_runner = tf.compat.v1.train.QueueRunner(
            queue_runner_def=self._chief_queue_runner_def)
    self._cost = tf.compat.v1.get_collection_ref(with_prefix(self._name, "cost"))[0]
    num_replicas = max(1, FLAGS.num_gpus) if self._name == "Train" else 1
    self._initial_state = import_state_tuples(
        self._initial_state, self._initial_state_name, num_replicas)
    self._final_state = import_state_tuples(
        self._final_state, self._final_state_name, num_replicas)

  @property
  def input(self):
    return self._input

  @property
  def initial_state(self):
    return self._initial_state

  @property
  def cost(self):
    return self._cost

  @property
  def final_state(self):
    return self._final_state

  @property
  def lr(self):
    return self._lr

  @property
  def train_op(self):
    return self._train_op

  @property
  def initial_state_name(self):
    return self._initial_state_name

  @property
  def final_state_name(self):
    return self._final_state_name


class SmallConfig:
  """Small config (sizes shrunk for the corpus)."""
  init_scale = 0.1
  learning_rate = 1.0
  max_grad_norm = 5
  num_layers = 2
  num_steps = 3
  hidden_size = 8
  max_epoch = 4
  max_max_epoch = 13
  keep_prob = 1.0
  lr_decay = 0.5
  batch_size = 2
  vocab_size = 50
  rnn_mode = BASIC  # was BLOCK (tf.contrib.rnn.LSTMBlockCell, gone)


def get_config():
  """Get model config."""
  config = None
  if FLAGS.model == "small":
    config = SmallConfig()
  else:
    raise ValueError("Invalid model: %s", FLAGS.model)
  if FLAGS.rnn_mode:
    config.rnn_mode = FLAGS.rnn_mode
  if FLAGS.num_gpus != 1:
    config.rnn_mode = BASIC
  return config


def _main(placed, sync, is_chief):
  raw_data = ptb_raw_data(FLAGS.data_path)
  train_data, valid_data, test_data, _ = raw_data

  config = get_config()
  eval_config = get_config()
  eval_config.batch_size = 1
  eval_config.num_steps = 1

  g = tf.Graph()
  with g.as_default():
    initializer = tf.compat.v1.random_uniform_initializer(-config.init_scale,
                                                          config.init_scale)

    # Added: between-graph replication device function (placed=True only).
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(**SETTER) if placed else None):
      with tf.compat.v1.name_scope("Train"):
        train_input = PTBInput(config=config, data=train_data, name="TrainInput")
        with tf.compat.v1.variable_scope("Model", reuse=None, initializer=initializer,
                                         use_resource=False):
          m = PTBModel(is_training=True, config=config, input_=train_input,
                       sync_replicas=sync, is_chief=is_chief)
        tf.compat.v1.summary.scalar("Training Loss", m.cost)
        tf.compat.v1.summary.scalar("Learning Rate", m.lr)

      with tf.compat.v1.name_scope("Valid"):
        valid_input = PTBInput(config=config, data=valid_data, name="ValidInput")
        with tf.compat.v1.variable_scope("Model", reuse=True, initializer=initializer,
                                         use_resource=False):
          mvalid = PTBModel(is_training=False, config=config, input_=valid_input)
        tf.compat.v1.summary.scalar("Validation Loss", mvalid.cost)

      with tf.compat.v1.name_scope("Test"):
        test_input = PTBInput(
            config=eval_config, data=test_data, name="TestInput")
        with tf.compat.v1.variable_scope("Model", reuse=True, initializer=initializer,
                                         use_resource=False):
          mtest = PTBModel(is_training=False, config=eval_config,
                           input_=test_input)

    models = {"Train": m, "Valid": mvalid, "Test": mtest}
    for name, model in models.items():
      model.export_ops(name)
    metagraph = tf.compat.v1.train.export_meta_graph()
    soft_placement = False

  g2 = tf.Graph()
  with g2.as_default():
    tf.compat.v1.train.import_meta_graph(metagraph)
    for model in models.values():
      model.import_ops()
    sv_kwargs = {}
    if sync:  # added: corpus sync mode
      sv_kwargs = dict(is_chief=is_chief, local_init_op=m._local_init_op,
                       ready_for_local_init_op=m._ready_for_local_init_op)
    sv = tf.compat.v1.train.Supervisor(logdir=FLAGS.save_path, **sv_kwargs)
    config_proto = tf.compat.v1.ConfigProto(allow_soft_placement=soft_placement)
    del sv, config_proto  # sv.managed_session(config=config_proto) would start training.
  return g2


def build(placed, sync, is_chief=True):
  saved_cf_v2 = control_flow_util.ENABLE_CONTROL_FLOW_V2
  control_flow_util.ENABLE_CONTROL_FLOW_V2 = False  # TF1 while loop + TensorArrayV3
  try:
    g2 = _main(placed, sync, is_chief)
  finally:
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = saved_cf_v2
  with g2.as_default():
    return tf.compat.v1.train.export_meta_graph(graph=g2, clear_devices=False)
