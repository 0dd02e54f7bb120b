"""Inception's synchronous distributed trainer: ``train(target, dataset, cluster_spec)``.

Source: tensorflow/models, ``research/inception/inception/inception_distributed_train.py``
(before the move to ``research/``: ``inception/inception/inception_distributed_train.py``; read at
tensorflow/models@147e2c81323f690878ebeb9ff153761868228c96 for the old path and at the forks
SimiaCryptus/models@fc8e060e773e09cbe56b010117756380f8c21c95 and
kanyesthaker/models@523cdc3ff9e5c1bcc1fb215df1d8c097295868bb for the ``research/`` path: ``train()``
is the same text in all three). With the pieces it imports: ``inception_model.py``
(``inference``, ``loss``, ``MOVING_AVERAGE_DECAY``; copied here from the SimiaCryptus snapshot,
the same text as tensorflow/models ``inception/inception/inception_model.py``@0866e7de but for
``tf.concat``'s argument order), ``image_processing.py`` (``distorted_inputs``;
tensorflow/models ``research/inception/inception/image_processing.py``@ebafe289; replaced, see
below), ``imagenet_data.py`` (the ``dataset``; reduced to its two numbers) and the old Inception
slim library (``slim/scopes.py``, ``variables.py``, ``losses.py``, ``ops.py``,
``inception_model.py``; copied in ``_inception_slim.py``, whose docstring lists its own changes).

Placement: the program does not call ``replica_device_setter``. Everything is built under
``tf.device('/job:worker/task:%d' % FLAGS.task_id)`` and, inside it, an ``arg_scope`` that gives
``slim.variables.variable`` and ``slim.variables.global_step`` the device
``slim.variables.VariableDeviceChooser(num_parameter_servers)``: each slim variable, in creation
order, calls the chooser with a fake ``NodeDef`` and gets ``/job:ps/task:<round robin>/CPU:0``,
which ``variables.variable``/``global_step`` open as their own ``tf.device`` around
``tf.get_variable`` (the int64 global step is created first, so it is on ``/job:ps/task:0``).
Variables made by plain ``tf.get_variable`` (batch norm's zero-debias ``biased``/``local_step``,
the optimizer's slots, the moving-average shadows, SyncReplicas' accumulators) are not slim
variables: they are colocated with their primary or get the worker scope. Hence ``SETTER = None``.

Changes from the program:

* Flags become constants: ``task_id`` 0; ``num_replicas_to_aggregate`` 2 (the flag's default -1
  would mean all 3 workers); ``batch_size`` 4 (was 32); ``image_size`` 35 (was 299);
  ``num_preprocess_threads`` 4; ``initial_learning_rate`` 0.045, ``num_epochs_per_decay`` 2.0,
  ``learning_rate_decay_factor`` 0.94, ``save_interval_secs`` 600 as the flags' defaults;
  ``train_dir`` is a temporary directory (the Supervisor's logdir; its chief FileWriter is closed
  before the directory is removed). ``cluster_spec``: 2 ps and 3 workers on 127.0.0.1.
* ``dataset`` (``imagenet_data.ImagenetData('train')``): ``num_examples_per_epoch()`` 1281167 as
  upstream, ``num_classes()`` 10 (was 1000).
* ``image_processing.distorted_inputs``: its ``tf.device('/cpu:0')`` scope and the
  ``batch_processing`` name scope, the batching call, cast, reshape, ``images`` image summary
  and label reshape of ``batch_inputs`` are kept; the TFRecord readers, the example queue,
  JPEG decoding and the distortions are replaced by one random constant image and label (numpy,
  seed 0) batched by ``tf.compat.v1.train.batch`` (was ``tf.train.batch_join`` over the
  preprocessing threads' outputs), so ``QUEUE_RUNNERS`` still holds the input queue's runner.
* ``inception_model.py``: ``tf.app.flags.FLAGS.batch_size`` -> ``BATCH_SIZE``;
  ``logits[0].get_shape()[-1].value`` -> ``tf.compat.dimension_value(...)``; the network it calls
  (``slim.inception.inception_v3``) is shrunk to a few conv/batch-norm/fc layers (see
  ``_inception_slim.py``), keeping its scopes, endpoints and the auxiliary head.
* TF1 names -> ``tf.compat.v1`` (``train.exponential_decay``, ``train.RMSPropOptimizer``,
  ``train.ExponentialMovingAverage``, ``train.SyncReplicasOptimizer``, ``train.Saver``,
  ``train.Supervisor``, ``summary.*``, ``get_collection``, ``GraphKeys``, ``trainable_variables``,
  ``moving_average_variables``, ``global_variables_initializer``, ``device``, ``name_scope``,
  ``sparse_to_dense``, ``nn.zero_fraction``).
* Everything after the Supervisor's construction (``tf.logging``, ``ConfigProto``,
  ``prepare_or_wait_for_session``, starting queue runners, ``init_tokens_op``, the training loop,
  ``sv.stop()``, ``saver.save``) is left out: no session is started. ``train`` returns the pieces
  it built instead.
* ``is_chief``: upstream derives it from ``task_id == 0``; here ``build``'s ``is_chief`` sets it
  (the task stays 0). ``CHIEF_ONLY``: only the chief builds the loss averages (``avg`` moving
  averages, their summaries and the control dependency on ``total_loss``).
* ``placed=False``: both the ``/job:worker/task:%d`` scope and the ``VariableDeviceChooser``
  ``arg_scope`` are left out (together they are the program's placement: the chooser alone is
  not a device function on the whole graph, and the worker scope alone would pin every op,
  variables included, to the worker); the explicit ``tf.device('/cpu:0')`` of the input
  pipeline stays. With TF1 (ref) variables ``Supervisor(is_chief=False)`` refuses a graph whose
  ``Variable``/``VariableV2`` ops have no device ("When using replicas, all Variables must have
  their device set"), which is what the unplaced worker build is: there the Supervisor is not
  constructed (the graph it would have added to is the same as the chief's; only the placed
  builds and the unplaced chief build have the Supervisor's ops).
* ``sync=False``: ``opt`` stays the RMSProp optimizer (no ``SyncReplicasOptimizer``, no
  ``get_chief_queue_runner``/``get_init_tokens_op``). The averaging the program hands to
  ``SyncReplicasOptimizer`` (``variable_averages=exp_moving_averager,
  variables_to_average=variables_to_average``, applied by its chief path right after its sync op)
  is then done by the program itself, as the non-distributed ``inception_train.py`` does it:
  ``exp_moving_averager.apply(variables_to_average)`` right after ``apply_gradients`` (no control
  dependencies, top-level name scope, as in the wrapper), and ``train_op`` also waits for it. This
  is the plain graph placeviz's ``rewrite_sync(variable_averages=True)`` turns into the sync one.
* ``for l in losses + [total_loss]`` keeps its name (``noqa: E741``).
* ``build`` marks the unused ``report_uninitialized_variables`` tensors (SyncReplicasOptimizer's
  ``ready_for_local_init_op``, the Supervisor's ready ops) used, which only silences TF's "Object
  was never used" log that the missing session part would otherwise cause; no op changes.
* Variable kind: the code is unchanged, so it makes ref variables (``VariableV2``) when TF 2's
  behaviour is disabled (as the corpus builder does, and as TF 1 did) and resource variables
  otherwise; ``build`` works either way.
"""

import contextlib
import re
import tempfile

import numpy as np
import tensorflow as tf

from ._inception_slim import slim

SOURCE = "tensorflow/models: research/inception/inception/inception_distributed_train.py"
SETTER = None  # the program places with slim.variables.VariableDeviceChooser, not replica_device_setter
# The program calls opt.get_init_tokens_op() on every task, not only on the chief.
SYNC = {"replicas_to_aggregate": 2, "total_replicas": 3, "variable_averages": True,
        "init_tokens_on_every_task": True}
CHIEF_ONLY = True

_CLUSTER = {
    "ps": ["127.0.0.1:2222", "127.0.0.1:2223"],
    "worker": ["127.0.0.1:2224", "127.0.0.1:2225", "127.0.0.1:2226"],
}

# Flags (inception_distributed_train.py, image_processing.py), as constants.
TASK_ID = 0
NUM_REPLICAS_TO_AGGREGATE = 2
BATCH_SIZE = 4
IMAGE_SIZE = 35
NUM_PREPROCESS_THREADS = 4
SAVE_INTERVAL_SECS = 10 * 60
INITIAL_LEARNING_RATE = 0.045
NUM_EPOCHS_PER_DECAY = 2.0
LEARNING_RATE_DECAY_FACTOR = 0.94

# Constants dictating the learning rate schedule.
RMSPROP_DECAY = 0.9                # Decay term for RMSProp.
RMSPROP_MOMENTUM = 0.9             # Momentum in RMSProp.
RMSPROP_EPSILON = 1.0              # Epsilon term for RMSProp.


# --------------------------------------------------------------------------- imagenet_data.py
class _ImagenetData:
    """ImagenetData('train'), reduced to what ``train`` asks of it."""

    def num_classes(self):
        return 10  # upstream: 1000

    def num_examples_per_epoch(self):
        return 1281167


# ------------------------------------------------------------------------ image_processing.py
def distorted_inputs(dataset, batch_size=None, num_preprocess_threads=None):
    """Generate batches of distorted versions of ImageNet images (here: one random image)."""
    if not batch_size:
        batch_size = BATCH_SIZE

    # Force all input processing onto CPU in order to reserve the GPU for
    # the forward inference and back-propagation.
    with tf.compat.v1.device('/cpu:0'):
        images, labels = batch_inputs(
            dataset, batch_size, train=True,
            num_preprocess_threads=num_preprocess_threads)
    return images, labels


def batch_inputs(dataset, batch_size, train, num_preprocess_threads=None):
    """batch_inputs with the readers, parsing and distortions replaced by constants."""
    with tf.compat.v1.name_scope('batch_processing'):
        if num_preprocess_threads is None:
            num_preprocess_threads = NUM_PREPROCESS_THREADS
        rng = np.random.RandomState(0)
        image = tf.constant(rng.uniform(-1.0, 1.0, [IMAGE_SIZE, IMAGE_SIZE, 3]).astype(np.float32))
        label_index = tf.constant([int(rng.randint(1, dataset.num_classes() + 1))], dtype=tf.int32)

        images, label_index_batch = tf.compat.v1.train.batch(
            [image, label_index],
            batch_size=batch_size,
            num_threads=num_preprocess_threads,
            capacity=2 * num_preprocess_threads * batch_size)

        # Reshape images into these desired dimensions.
        height = IMAGE_SIZE
        width = IMAGE_SIZE
        depth = 3

        images = tf.cast(images, tf.float32)
        images = tf.reshape(images, shape=[batch_size, height, width, depth])

        # Display the training images in the visualizer.
        tf.compat.v1.summary.image('images', images)

        return images, tf.reshape(label_index_batch, [batch_size])


# ------------------------------------------------------------------------- inception_model.py
# If a model is trained using multiple GPUs, prefix all Op names with tower_name
# to differentiate the operations. Note that this prefix is removed from the
# names of the summaries when visualizing a model.
TOWER_NAME = 'tower'

# Batch normalization. Constant governing the exponential moving average of
# the 'global' mean and variance for all activations.
BATCHNORM_MOVING_AVERAGE_DECAY = 0.9997

# The decay to use for the moving average.
MOVING_AVERAGE_DECAY = 0.9999


def inference(images, num_classes, for_training=False, restore_logits=True,
              scope=None):
    """Build Inception v3 model architecture."""
    # Parameters for BatchNorm.
    batch_norm_params = {
        # Decay for the moving averages.
        'decay': BATCHNORM_MOVING_AVERAGE_DECAY,
        # epsilon to prevent 0s in variance.
        'epsilon': 0.001,
    }
    # Set weight_decay for weights in Conv and FC layers.
    with slim.arg_scope([slim.ops.conv2d, slim.ops.fc], weight_decay=0.00004):
        with slim.arg_scope([slim.ops.conv2d],
                            stddev=0.1,
                            activation=tf.nn.relu,
                            batch_norm_params=batch_norm_params):
            logits, endpoints = slim.inception.inception_v3(
                images,
                dropout_keep_prob=0.8,
                num_classes=num_classes,
                is_training=for_training,
                restore_logits=restore_logits,
                scope=scope)

    # Add summaries for viewing model statistics on TensorBoard.
    _activation_summaries(endpoints)

    # Grab the logits associated with the side head. Employed during training.
    auxiliary_logits = endpoints['aux_logits']

    return logits, auxiliary_logits


def loss(logits, labels, batch_size=None):
    """Adds all losses for the model."""
    if not batch_size:
        batch_size = BATCH_SIZE

    # Reshape the labels into a dense Tensor of
    # shape [FLAGS.batch_size, num_classes].
    sparse_labels = tf.reshape(labels, [batch_size, 1])
    indices = tf.reshape(tf.range(batch_size), [batch_size, 1])
    concated = tf.concat(axis=1, values=[indices, sparse_labels])
    num_classes = tf.compat.dimension_value(logits[0].get_shape()[-1])
    dense_labels = tf.compat.v1.sparse_to_dense(concated,
                                                [batch_size, num_classes],
                                                1.0, 0.0)

    # Cross entropy loss for the main softmax prediction.
    slim.losses.cross_entropy_loss(logits[0],
                                   dense_labels,
                                   label_smoothing=0.1,
                                   weight=1.0)

    # Cross entropy loss for the auxiliary softmax head.
    slim.losses.cross_entropy_loss(logits[1],
                                   dense_labels,
                                   label_smoothing=0.1,
                                   weight=0.4,
                                   scope='aux_loss')


def _activation_summary(x):
    """Helper to create summaries for activations."""
    # Remove 'tower_[0-9]/' from the name in case this is a multi-GPU training
    # session. This helps the clarity of presentation on tensorboard.
    tensor_name = re.sub('%s_[0-9]*/' % TOWER_NAME, '', x.op.name)  # noqa: UP031
    tf.compat.v1.summary.histogram(tensor_name + '/activations', x)
    tf.compat.v1.summary.scalar(tensor_name + '/sparsity', tf.compat.v1.nn.zero_fraction(x))


def _activation_summaries(endpoints):
    with tf.compat.v1.name_scope('summaries'):
        for act in endpoints.values():
            _activation_summary(act)


# ------------------------------------------------------------- inception_distributed_train.py
def _supervisor_accepts(graph, is_chief):
    """Supervisor._verify_setup: a non-chief refuses ref variables without a device."""
    return is_chief or all(op.device for op in graph.get_operations()
                           if op.type in ("Variable", "VariableV2"))


def train(target, dataset, cluster_spec, *, placed, sync, is_chief, train_dir):
    """Train Inception on a dataset for a number of steps (graph construction only)."""
    del target  # only used by the session part, which is left out
    # Number of workers and parameter servers are inferred from the workers and ps
    # hosts string.
    num_workers = len(cluster_spec.as_dict()['worker'])
    num_parameter_servers = len(cluster_spec.as_dict()['ps'])
    # If no value is given, num_replicas_to_aggregate defaults to be the number of
    # workers.
    if NUM_REPLICAS_TO_AGGREGATE == -1:
        num_replicas_to_aggregate = num_workers
    else:
        num_replicas_to_aggregate = NUM_REPLICAS_TO_AGGREGATE

    # Both should be greater than 0 in a distributed training.
    assert num_workers > 0 and num_parameter_servers > 0, (' num_workers and '
                                                           'num_parameter_servers'
                                                           ' must be > 0.')

    # Choose worker 0 as the chief. Note that any worker could be the chief
    # but there should be only one chief.
    # (port: is_chief comes from build(); upstream: is_chief = (FLAGS.task_id == 0))

    # Ops are assigned to worker by default.
    worker_scope = (tf.compat.v1.device('/job:worker/task:%d' % TASK_ID)  # noqa: UP031
                    if placed else contextlib.nullcontext())
    with worker_scope:
        # Variables and its related init/assign ops are assigned to ps.
        chooser_scope = (slim.scopes.arg_scope(
            [slim.variables.variable, slim.variables.global_step],
            device=slim.variables.VariableDeviceChooser(num_parameter_servers))
            if placed else contextlib.nullcontext())
        with chooser_scope:
            # Create a variable to count the number of train() calls. This equals the
            # number of updates applied to the variables.
            global_step = slim.variables.global_step()

            # Calculate the learning rate schedule.
            num_batches_per_epoch = (dataset.num_examples_per_epoch() /
                                     BATCH_SIZE)
            # Decay steps need to be divided by the number of replicas to aggregate.
            decay_steps = int(num_batches_per_epoch * NUM_EPOCHS_PER_DECAY /
                              num_replicas_to_aggregate)

            # Decay the learning rate exponentially based on the number of steps.
            lr = tf.compat.v1.train.exponential_decay(INITIAL_LEARNING_RATE,
                                                      global_step,
                                                      decay_steps,
                                                      LEARNING_RATE_DECAY_FACTOR,
                                                      staircase=True)
            # Add a summary to track the learning rate.
            tf.compat.v1.summary.scalar('learning_rate', lr)

            # Create an optimizer that performs gradient descent.
            opt = tf.compat.v1.train.RMSPropOptimizer(lr,
                                                      RMSPROP_DECAY,
                                                      momentum=RMSPROP_MOMENTUM,
                                                      epsilon=RMSPROP_EPSILON)

            images, labels = distorted_inputs(
                dataset,
                batch_size=BATCH_SIZE,
                num_preprocess_threads=NUM_PREPROCESS_THREADS)

            # Number of classes in the Dataset label set plus 1.
            # Label 0 is reserved for an (unused) background class.
            num_classes = dataset.num_classes() + 1
            logits = inference(images, num_classes, for_training=True)
            # Add classification loss.
            loss(logits, labels)

            # Gather all of the losses including regularization losses.
            losses = tf.compat.v1.get_collection(slim.losses.LOSSES_COLLECTION)
            losses += tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)

            total_loss = tf.add_n(losses, name='total_loss')

            if is_chief:
                # Compute the moving average of all individual losses and the
                # total loss.
                loss_averages = tf.compat.v1.train.ExponentialMovingAverage(0.9, name='avg')
                loss_averages_op = loss_averages.apply(losses + [total_loss])

                # Attach a scalar summmary to all individual losses and the total loss;
                # do the same for the averaged version of the losses.
                for l in losses + [total_loss]:  # noqa: E741
                    loss_name = l.op.name
                    # Name each loss as '(raw)' and name the moving average version of the
                    # loss as the original loss name.
                    tf.compat.v1.summary.scalar(loss_name + ' (raw)', l)
                    tf.compat.v1.summary.scalar(loss_name, loss_averages.average(l))

                # Add dependency to compute loss_averages.
                with tf.control_dependencies([loss_averages_op]):
                    total_loss = tf.identity(total_loss)

            # Track the moving averages of all trainable variables.
            # Note that we maintain a 'double-average' of the BatchNormalization
            # global statistics.
            # This is not needed when the number of replicas are small but important
            # for synchronous distributed training with tens of workers/replicas.
            exp_moving_averager = tf.compat.v1.train.ExponentialMovingAverage(
                MOVING_AVERAGE_DECAY, global_step)

            variables_to_average = (
                tf.compat.v1.trainable_variables() + tf.compat.v1.moving_average_variables())

            # Add histograms for model variables.
            for var in variables_to_average:
                tf.compat.v1.summary.histogram(var.op.name, var)

            # Create synchronous replica optimizer.
            if sync:
                opt = tf.compat.v1.train.SyncReplicasOptimizer(
                    opt,
                    replicas_to_aggregate=num_replicas_to_aggregate,
                    total_num_replicas=num_workers,
                    variable_averages=exp_moving_averager,
                    variables_to_average=variables_to_average)

            batchnorm_updates = tf.compat.v1.get_collection(slim.ops.UPDATE_OPS_COLLECTION)
            assert batchnorm_updates, 'Batchnorm updates are missing'
            batchnorm_updates_op = tf.group(*batchnorm_updates)
            # Add dependency to compute batchnorm_updates.
            with tf.control_dependencies([batchnorm_updates_op]):
                total_loss = tf.identity(total_loss)

            # Compute gradients with respect to the loss.
            grads = opt.compute_gradients(total_loss)

            # Add histograms for gradients.
            for grad, var in grads:
                if grad is not None:
                    tf.compat.v1.summary.histogram(var.op.name + '/gradients', grad)

            apply_gradients_op = opt.apply_gradients(grads, global_step=global_step)

            train_deps = [apply_gradients_op]
            if not sync:
                # port (sync=False): the averages SyncReplicasOptimizer's chief path would apply
                # after its sync op are applied here, as inception_train.py applies them.
                variables_averages_op = exp_moving_averager.apply(variables_to_average)
                train_deps.append(variables_averages_op)

            with tf.control_dependencies(train_deps):
                train_op = tf.identity(total_loss, name='train_op')

            # Get chief queue_runners and init_tokens, which is used to synchronize
            # replicas. More details can be found in SyncReplicasOptimizer.
            chief_queue_runners, init_tokens_op = [], None
            if sync:
                chief_queue_runners = [opt.get_chief_queue_runner()]
                init_tokens_op = opt.get_init_tokens_op()

            # Create a saver.
            saver = tf.compat.v1.train.Saver()

            # Build the summary operation based on the TF collection of Summaries.
            summary_op = tf.compat.v1.summary.merge_all()

            # Build an initialization operation to run below.
            init_op = tf.compat.v1.global_variables_initializer()

            # We run the summaries in the same thread as the training operations by
            # passing in None for summary_op to avoid a summary_thread being started.
            # Running summaries and training operations in parallel could run out of
            # GPU memory.
            sv = None
            if _supervisor_accepts(tf.compat.v1.get_default_graph(), is_chief):
                sv = tf.compat.v1.train.Supervisor(is_chief=is_chief,
                                                   logdir=train_dir,
                                                   init_op=init_op,
                                                   summary_op=None,
                                                   global_step=global_step,
                                                   saver=saver,
                                                   save_model_secs=SAVE_INTERVAL_SECS)
    return dict(train_op=train_op, summary_op=summary_op, chief_queue_runners=chief_queue_runners,
                init_tokens_op=init_tokens_op, sv=sv, opt=opt)


def build(placed, sync, is_chief=True):
    """The program's graph up to its Supervisor, in a fresh graph (see the module docstring)."""
    cluster_spec = tf.train.ClusterSpec(_CLUSTER)
    g = tf.Graph()
    with tempfile.TemporaryDirectory() as train_dir, g.as_default():
        built = train("grpc://" + _CLUSTER["worker"][TASK_ID], _ImagenetData(), cluster_spec,
                      placed=placed, sync=sync, is_chief=is_chief, train_dir=train_dir)
        # Without the session part TF logs "Object was never used" for the unused
        # report_uninitialized_variables tensors (SyncReplicasOptimizer's ready_for_local_init_op,
        # the Supervisor's ready ops), and the chief Supervisor's FileWriter stays open.
        sv = built["sv"]
        unused = [getattr(built["opt"], "ready_for_local_init_op", None)]
        if sv is not None:
            unused += [sv.ready_op, sv.ready_for_local_init_op]
            if sv.summary_writer is not None:
                sv.summary_writer.close()
        for tensor in unused:
            getattr(tensor, "mark_used", lambda: None)()
        return tf.compat.v1.train.export_meta_graph(graph=g, clear_devices=False)
