"""TF-Slim's image-classifier trainer over ``model_deploy`` clones, parameter servers and replicas.

Source: tensorflow/models, ``research/slim/train_image_classifier.py`` (commit 64f40ce1), with the
parts it uses of ``research/slim/deployment/model_deploy.py`` (commit 2fd7d3ae; not on PyPI, so
copied here), ``research/slim/nets/lenet.py``, ``research/slim/nets/nets_factory.py``
(``get_network_fn``, commit 6766e6dd) and ``research/slim/preprocessing/lenet_preprocessing.py``.

model_deploy makes its own device functions and never calls ``replica_device_setter``:
``variables_device()`` is a ``_PSDeviceChooser`` putting each ``Variable*`` op on the next
``/job:ps/task:N`` in turn (the rest go to the clone's ``/job:worker/device:CPU:0``),
``optimizer_device()``/``inputs_device()`` are ``/job:worker/device:CPU:0``. So ``SETTER`` is
``None``; ``placed=True`` means ``DeploymentConfig(num_ps_tasks=2, num_replicas=2)`` (those device
functions), ``placed=False`` means ``num_ps_tasks=0`` (model_deploy then names no job: clones,
inputs, optimizer and variables all get ``/device:CPU:0``).

Changes made for the corpus:

* Flags became constants: ``num_clones=2``, ``clone_on_cpu=True``, ``worker_replicas=2``,
  ``num_ps_tasks=2``, ``model_name='lenet'``, ``batch_size=4``, ``moving_average_decay=0.9999``
  (set, so the ``ExponentialMovingAverage`` path is built), ``replicas_to_aggregate=2``; the other
  flags keep their defaults (``optimizer='rmsprop'``, ``learning_rate_decay_type='exponential'``,
  ``weight_decay=0.00004``, ``label_smoothing=0``, ``labels_offset=0``, ``quantize_delay=-1``,
  ``trainable_scopes=None``, ``checkpoint_path=None``, ``log_every_n_steps=10``,
  ``save_summaries_secs=save_interval_secs=600``). ``sync_replicas`` is ``build``'s ``sync``;
  ``task`` is 0 for the chief and 1 otherwise; ``train_dir`` is a temporary directory.
* ``placed=False``: the DeploymentConfig also gets ``num_replicas=1`` and ``replica_id=0``, which
  model_deploy requires without ps tasks (neither changes the graph); ``SyncReplicasOptimizer`` still
  gets ``total_num_replicas=worker_replicas=2``.
* Dataset: ``dataset_factory``'s TFRecord dataset and ``DatasetDataProvider`` (parallel readers
  and their queues) became one random 28x28x1 uint8 image and a random int64 label (10 classes,
  ``num_samples=64``); ``lenet_preprocessing``, ``tf.train.batch``, ``one_hot_encoding`` and
  ``prefetch_queue`` follow as written, under ``inputs_device()``.
* Network: ``nets_factory.get_network_fn`` reduced to lenet; lenet's widths shrunk (conv1 32->4,
  conv2 64->8, fc3 1024->16).
* ``_configure_optimizer`` keeps only its ``rmsprop`` branch and ``_configure_learning_rate`` only
  its ``exponential`` one (the ones the flags select); ``_get_init_fn`` (no checkpoint) returns
  ``None``; ``contrib_quantize`` (``quantize_delay=-1``: not called) dropped.
* model_deploy: only what the script uses (``Clone``, ``create_clones``, ``_gather_clone_loss``,
  ``_optimize_clone``, ``optimize_clones``, ``_sum_clones_gradients``, ``DeploymentConfig``
  without its unused ``caching_device``), with ``tf.contrib.slim`` -> ``tf_slim`` and
  ``tf.X`` -> ``tf.compat.v1.X`` (``tf.div`` -> ``tf.compat.v1.div``, ``tf.NodeDef`` ->
  ``tf.compat.v1.NodeDef``, ``tf.summary.*`` -> ``tf.compat.v1.summary.*``); the same in the
  script and lenet_preprocessing (``tf.to_float`` -> ``tf.cast(..., tf.float32)``,
  ``tf.image.resize_image_with_crop_or_pad`` -> ``tf.compat.v1.image...``);
  ``preprocessing_factory.get_preprocessing('lenet', is_training=True)`` is a
  ``functools.partial`` of lenet's ``preprocess_image``. The script's ``--dataset_dir`` check and
  ``tf.logging`` call are gone.
* ``slim.learning.train(...)`` is called as the script calls it, but stops where it would open its
  session (``run_train_without_session``, a copy of slim_learning.py's: the graph is what
  ``train()`` builds, its ``Saver``, ``init_ops``, the SyncReplicas chief/worker init ops, ``get_init_tokens_op`` and
  ``get_chief_queue_runner`` for the chief, the ``Supervisor``).
* tf_slim 1.1 still names ``ops.Tensor`` (removed in TF 2.21) in ``layers.utils``; during
  ``build`` that module sees it restored (``tf_slim_compat``, as in slim_learning.py).
* Variables are TF1's ref variables (``VariableV2``): the root variable scope is set to
  ``use_resource=False``, as TF 1.x built them. (The ``_PSDeviceChooser`` only places ops whose
  type starts with ``Variable``: with TF 2.x's ``VarHandleOp`` nothing would reach the ps.)
* The copied code is re-indented to 4 spaces, its docstrings shortened, and (for the repository's
  ruff rules) ``%`` formatting became f-strings, ``(object)`` bases dropped and
  ``zip(*clone_grads)`` got ``strict=False``. Same behaviour.
* The summaries are merged from a Python ``set``, as the script does: ``summary_op``'s input order
  can change from run to run.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import tempfile
from unittest import mock

import tensorflow as tf
import tf_slim as slim

SOURCE = "tensorflow/models: research/slim/train_image_classifier.py"
SETTER = None
SYNC = {"replicas_to_aggregate": 2, "total_replicas": 2, "variable_averages": True}
SYNC_PROGRAM_CHANGES = {
    "names": ["exponential_decay_learning_rate/Cast", "exponential_decay_learning_rate/Cast/x",
              "exponential_decay_learning_rate/truediv", "init_ops/concat/concat",
              "init_ops/concat/concat_dim", "init_ops/group_deps", "init_ops/group_deps_1",
              "sync_replicas/group_deps", "summary_op/summary_op"],
    "why": "in sync mode the script divides decay_steps by replicas_to_aggregate (a float: no Cast); "
           "tf_slim's learning.train, given sync_optimizer, groups chief_init_op into its local init op and "
           "concats a ready_for_local_init_op (learning.py train); summary_op merges a set of Tensors (id order)",
}
CHIEF_ONLY = True

# Flags, as constants.
MASTER = ""
NUM_CLONES = 2
CLONE_ON_CPU = True
WORKER_REPLICAS = 2
NUM_PS_TASKS = 2
NUM_PREPROCESSING_THREADS = 4
LOG_EVERY_N_STEPS = 10
SAVE_SUMMARIES_SECS = 600
SAVE_INTERVAL_SECS = 600
WEIGHT_DECAY = 0.00004
OPTIMIZER = "rmsprop"
OPT_EPSILON = 1.0
RMSPROP_MOMENTUM = 0.9
RMSPROP_DECAY = 0.9
QUANTIZE_DELAY = -1
LEARNING_RATE_DECAY_TYPE = "exponential"
LEARNING_RATE = 0.01
LABEL_SMOOTHING = 0.0
LEARNING_RATE_DECAY_FACTOR = 0.94
NUM_EPOCHS_PER_DECAY = 2.0
REPLICAS_TO_AGGREGATE = 2
MOVING_AVERAGE_DECAY = 0.9999
LABELS_OFFSET = 0
MODEL_NAME = "lenet"
BATCH_SIZE = 4
TRAIN_IMAGE_SIZE = None
MAX_NUMBER_OF_STEPS = None
TRAINABLE_SCOPES = None
# The dataset's facts (dataset_factory's dataset).
NUM_CLASSES = 10
NUM_SAMPLES = 64


# ---------------------------------------------------------------------------------------------
# Porting support (the same as in slim_learning.py; each corpus module stands alone)
# ---------------------------------------------------------------------------------------------

class _SessionNotStarted(Exception):
    """Raised instead of starting ``Supervisor.managed_session``: only the graph is wanted."""


def run_train_without_session(train_fn, *args, **kwargs) -> None:
    """Calls ``slim.learning.train``-like ``train_fn`` and stops where it would open a session."""
    supervisor_cls = tf.compat.v1.train.Supervisor
    supervisor_init = supervisor_cls.__init__
    supervisors = []

    def init(sv, *init_args, **init_kwargs):
        supervisors.append(sv)
        supervisor_init(sv, *init_args, **init_kwargs)

    def managed_session(sv, *unused_args, **unused_kwargs):
        raise _SessionNotStarted

    try:
        with mock.patch.object(supervisor_cls, "__init__", init), \
                mock.patch.object(supervisor_cls, "managed_session", managed_session):
            train_fn(*args, **kwargs)
    except _SessionNotStarted:
        pass
    except ValueError as e:
        # A non-chief Supervisor over variables without a device: TF refuses it after train()
        # has built all its ops.
        if "all Variables must have their device set" not in str(e):
            raise
    finally:
        for sv in supervisors:
            # The session would have run these; tell tf_should_use they are not forgotten.
            for name in ("_ready_op", "_ready_for_local_init_op"):
                getattr(getattr(sv, name, None), "mark_used", lambda: None)()
            writer = getattr(sv, "_summary_writer", None)
            if writer is not None:
                writer.close()


class _OpsWithTensor:
    """``tensorflow.python.framework.ops`` plus its ``Tensor`` alias, which TF 2.21 dropped."""

    Tensor = tf.Tensor

    def __init__(self, ops):
        self._ops = ops

    def __getattr__(self, name):
        return getattr(self._ops, name)


@contextlib.contextmanager
def tf_slim_compat():
    """tf_slim 1.1's ``layers.utils.constant_value`` tests ``isinstance(x, ops.Tensor)``; TF 2.21
    has no ``ops.Tensor`` any more (tf-slim's main branch now says ``tensor_lib.Tensor``)."""
    from tf_slim.layers import utils as slim_utils

    if hasattr(slim_utils.ops, "Tensor"):
        yield
        return
    with mock.patch.object(slim_utils, "ops", _OpsWithTensor(slim_utils.ops)):
        yield


# ---------------------------------------------------------------------------------------------
# research/slim/deployment/model_deploy.py (the parts train_image_classifier.py uses)
# ---------------------------------------------------------------------------------------------

# Namedtuple used to represent a clone during deployment.
Clone = collections.namedtuple('Clone',
                               ['outputs',  # Whatever model_fn() returned.
                                'scope',  # The scope used to create it.
                                'device',  # The device used to create.
                                ])


def create_clones(config, model_fn, args=None, kwargs=None):
    clones = []
    args = args or []
    kwargs = kwargs or {}
    with slim.arg_scope([slim.model_variable, slim.variable],
                        device=config.variables_device()):
        # Create clones.
        for i in range(0, config.num_clones):
            with tf.compat.v1.name_scope(config.clone_scope(i)) as clone_scope:
                clone_device = config.clone_device(i)
                with tf.compat.v1.device(clone_device):
                    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                                     reuse=True if i > 0 else None):
                        outputs = model_fn(*args, **kwargs)
                    clones.append(Clone(outputs, clone_scope, clone_device))
    return clones


def _gather_clone_loss(clone, num_clones, regularization_losses):
    # The return value.
    sum_loss = None
    # Individual components of the loss that will need summaries.
    clone_loss = None
    regularization_loss = None
    # Compute and aggregate losses on the clone device.
    with tf.compat.v1.device(clone.device):
        all_losses = []
        clone_losses = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES, clone.scope)
        if clone_losses:
            clone_loss = tf.add_n(clone_losses, name='clone_loss')
            if num_clones > 1:
                clone_loss = tf.compat.v1.div(clone_loss, 1.0 * num_clones,
                                              name='scaled_clone_loss')
            all_losses.append(clone_loss)
        if regularization_losses:
            regularization_loss = tf.add_n(regularization_losses,
                                           name='regularization_loss')
            all_losses.append(regularization_loss)
        if all_losses:
            sum_loss = tf.add_n(all_losses)
    # Add the summaries out of the clone device block.
    if clone_loss is not None:
        tf.compat.v1.summary.scalar(clone.scope + '/clone_loss', clone_loss)
    if regularization_loss is not None:
        tf.compat.v1.summary.scalar('regularization_loss', regularization_loss)
    return sum_loss


def _optimize_clone(optimizer, clone, num_clones, regularization_losses,
                    **kwargs):
    sum_loss = _gather_clone_loss(clone, num_clones, regularization_losses)
    clone_grad = None
    if sum_loss is not None:
        with tf.compat.v1.device(clone.device):
            clone_grad = optimizer.compute_gradients(sum_loss, **kwargs)
    return sum_loss, clone_grad


def optimize_clones(clones, optimizer,
                    regularization_losses=None,
                    **kwargs):
    grads_and_vars = []
    clones_losses = []
    num_clones = len(clones)
    if regularization_losses is None:
        regularization_losses = tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)
    for clone in clones:
        with tf.compat.v1.name_scope(clone.scope):
            clone_loss, clone_grad = _optimize_clone(
                optimizer, clone, num_clones, regularization_losses, **kwargs)
            if clone_loss is not None:
                clones_losses.append(clone_loss)
                grads_and_vars.append(clone_grad)
            # Only use regularization_losses for the first clone
            regularization_losses = None
    # Compute the total_loss summing all the clones_losses.
    total_loss = tf.add_n(clones_losses, name='total_loss')
    # Sum the gradients across clones.
    grads_and_vars = _sum_clones_gradients(grads_and_vars)
    return total_loss, grads_and_vars


def _sum_clones_gradients(clone_grads):
    sum_grads = []
    for grad_and_vars in zip(*clone_grads, strict=False):
        # Note that each grad_and_vars looks like the following:
        #   ((grad_var0_clone0, var0), ... (grad_varN_cloneN, varN))
        grads = []
        var = grad_and_vars[0][1]
        for g, v in grad_and_vars:
            assert v == var
            if g is not None:
                grads.append(g)
        if grads:
            if len(grads) > 1:
                sum_grad = tf.add_n(grads, name=var.op.name + '/sum_grads')
            else:
                sum_grad = grads[0]
            sum_grads.append((sum_grad, var))
    return sum_grads


class DeploymentConfig:
    """Configuration for deploying a model with `deploy()`."""

    def __init__(self,
                 num_clones=1,
                 clone_on_cpu=False,
                 replica_id=0,
                 num_replicas=1,
                 num_ps_tasks=0,
                 worker_job_name='worker',
                 ps_job_name='ps'):
        if num_replicas > 1:
            if num_ps_tasks < 1:
                raise ValueError('When using replicas num_ps_tasks must be positive')
        if num_replicas > 1 or num_ps_tasks > 0:
            if not worker_job_name:
                raise ValueError('Must specify worker_job_name when using replicas')
            if not ps_job_name:
                raise ValueError('Must specify ps_job_name when using parameter server')
        if replica_id >= num_replicas:
            raise ValueError('replica_id must be less than num_replicas')
        self._num_clones = num_clones
        self._clone_on_cpu = clone_on_cpu
        self._replica_id = replica_id
        self._num_replicas = num_replicas
        self._num_ps_tasks = num_ps_tasks
        self._ps_device = '/job:' + ps_job_name if num_ps_tasks > 0 else ''
        self._worker_device = '/job:' + worker_job_name if num_ps_tasks > 0 else ''

    @property
    def num_clones(self):
        return self._num_clones

    @property
    def clone_on_cpu(self):
        return self._clone_on_cpu

    @property
    def replica_id(self):
        return self._replica_id

    @property
    def num_replicas(self):
        return self._num_replicas

    @property
    def num_ps_tasks(self):
        return self._num_ps_tasks

    @property
    def ps_device(self):
        return self._ps_device

    @property
    def worker_device(self):
        return self._worker_device

    def clone_device(self, clone_index):
        if clone_index >= self._num_clones:
            raise ValueError('clone_index must be less than num_clones')
        device = ''
        if self._num_ps_tasks > 0:
            device += self._worker_device
        if self._clone_on_cpu:
            device += '/device:CPU:0'
        else:
            device += f'/device:GPU:{clone_index}'
        return device

    def clone_scope(self, clone_index):
        if clone_index >= self._num_clones:
            raise ValueError('clone_index must be less than num_clones')
        scope = ''
        if self._num_clones > 1:
            scope = f'clone_{clone_index}'
        return scope

    def optimizer_device(self):
        if self._num_ps_tasks > 0 or self._num_clones > 0:
            return self._worker_device + '/device:CPU:0'
        else:
            return ''

    def inputs_device(self):
        device = ''
        if self._num_ps_tasks > 0:
            device += self._worker_device
        device += '/device:CPU:0'
        return device

    def variables_device(self):
        device = ''
        if self._num_ps_tasks > 0:
            device += self._ps_device
        device += '/device:CPU:0'

        class _PSDeviceChooser:
            """Slim device chooser for variables when using PS."""

            def __init__(self, device, tasks):
                self._device = device
                self._tasks = tasks
                self._task = 0

            def choose(self, op):
                if op.device:
                    return op.device
                node_def = op if isinstance(op, tf.compat.v1.NodeDef) else op.node_def
                if node_def.op.startswith('Variable'):
                    t = self._task
                    self._task = (self._task + 1) % self._tasks
                    d = f'{self._device}/task:{t}'
                    return d
                else:
                    return op.device

        if not self._num_ps_tasks:
            return device
        else:
            chooser = _PSDeviceChooser(device, self._num_ps_tasks)
            return chooser.choose


# ---------------------------------------------------------------------------------------------
# research/slim/nets/lenet.py, nets_factory.get_network_fn, preprocessing/lenet_preprocessing.py
# ---------------------------------------------------------------------------------------------

def lenet(images, num_classes=10, is_training=False,
          dropout_keep_prob=0.5,
          prediction_fn=slim.softmax,
          scope='LeNet'):
    end_points = {}

    with tf.compat.v1.variable_scope(scope, 'LeNet', [images]):
        net = end_points['conv1'] = slim.conv2d(images, 4, [5, 5], scope='conv1')
        net = end_points['pool1'] = slim.max_pool2d(net, [2, 2], 2, scope='pool1')
        net = end_points['conv2'] = slim.conv2d(net, 8, [5, 5], scope='conv2')
        net = end_points['pool2'] = slim.max_pool2d(net, [2, 2], 2, scope='pool2')
        net = slim.flatten(net)
        end_points['Flatten'] = net

        net = end_points['fc3'] = slim.fully_connected(net, 16, scope='fc3')
        if not num_classes:
            return net, end_points
        net = end_points['dropout3'] = slim.dropout(
            net, dropout_keep_prob, is_training=is_training, scope='dropout3')
        logits = end_points['Logits'] = slim.fully_connected(
            net, num_classes, activation_fn=None, scope='fc4')

    end_points['Predictions'] = prediction_fn(logits, scope='Predictions')

    return logits, end_points


lenet.default_image_size = 28


def lenet_arg_scope(weight_decay=0.0):
    with slim.arg_scope(
            [slim.conv2d, slim.fully_connected],
            weights_regularizer=slim.l2_regularizer(weight_decay),
            weights_initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1),
            activation_fn=tf.nn.relu) as sc:
        return sc


networks_map = {'lenet': lenet}
arg_scopes_map = {'lenet': lenet_arg_scope}


def get_network_fn(name, num_classes, weight_decay=0.0, is_training=False):
    if name not in networks_map:
        raise ValueError(f'Name of network unknown {name}')
    func = networks_map[name]

    @functools.wraps(func)
    def network_fn(images, **kwargs):
        # Built per call, inside model_deploy's arg_scope: the `device=` it sets for
        # slim.model_variable/slim.variable stays in effect.
        arg_scope = arg_scopes_map[name](weight_decay=weight_decay)
        with slim.arg_scope(arg_scope):
            return func(images, num_classes=num_classes, is_training=is_training,
                        **kwargs)
    if hasattr(func, 'default_image_size'):
        network_fn.default_image_size = func.default_image_size

    return network_fn


def preprocess_image(image, output_height, output_width, is_training):
    image = tf.cast(image, tf.float32)
    image = tf.compat.v1.image.resize_image_with_crop_or_pad(
        image, output_width, output_height)
    image = tf.subtract(image, 128.0)
    image = tf.compat.v1.div(image, 128.0)
    return image


# ---------------------------------------------------------------------------------------------
# research/slim/train_image_classifier.py
# ---------------------------------------------------------------------------------------------

def _configure_learning_rate(num_samples_per_epoch, global_step, sync_replicas):
    # Note: when num_clones is > 1, this will actually have each clone to go
    # over each epoch FLAGS.num_epochs_per_decay times. This is different
    # behavior from sync replicas and is expected to produce different results.
    decay_steps = int(num_samples_per_epoch * NUM_EPOCHS_PER_DECAY /
                      BATCH_SIZE)

    if sync_replicas:
        decay_steps /= REPLICAS_TO_AGGREGATE

    if LEARNING_RATE_DECAY_TYPE == 'exponential':
        return tf.compat.v1.train.exponential_decay(LEARNING_RATE,
                                                    global_step,
                                                    decay_steps,
                                                    LEARNING_RATE_DECAY_FACTOR,
                                                    staircase=True,
                                                    name='exponential_decay_learning_rate')
    else:
        raise ValueError(f'learning_rate_decay_type [{LEARNING_RATE_DECAY_TYPE}] was not recognized')


def _configure_optimizer(learning_rate):
    if OPTIMIZER == 'rmsprop':
        optimizer = tf.compat.v1.train.RMSPropOptimizer(
            learning_rate,
            decay=RMSPROP_DECAY,
            momentum=RMSPROP_MOMENTUM,
            epsilon=OPT_EPSILON)
    else:
        raise ValueError(f'Optimizer [{OPTIMIZER}] was not recognized')
    return optimizer


def _get_init_fn():
    # FLAGS.checkpoint_path is None.
    return None


def _get_variables_to_train():
    if TRAINABLE_SCOPES is None:
        return tf.compat.v1.trainable_variables()
    else:
        scopes = [scope.strip() for scope in TRAINABLE_SCOPES.split(',')]

    variables_to_train = []
    for scope in scopes:
        variables = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES, scope)
        variables_to_train.extend(variables)
    return variables_to_train


def _dataset_example():
    """One (image, label) of the dataset, as ``provider.get(['image', 'label'])`` gives them."""
    image = tf.cast(tf.compat.v1.random_uniform([28, 28, 1], 0, 256, dtype=tf.int32), tf.uint8)
    label = tf.compat.v1.random_uniform([], 0, NUM_CLASSES, dtype=tf.int64)
    return image, label


def main(sync_replicas, num_ps_tasks, task, train_dir):
    # (The script's `with tf.Graph().as_default():` is build()'s graph.)
    #######################
    # Config model_deploy #
    #######################
    deploy_config = DeploymentConfig(
        num_clones=NUM_CLONES,
        clone_on_cpu=CLONE_ON_CPU,
        replica_id=task if num_ps_tasks else 0,
        num_replicas=WORKER_REPLICAS if num_ps_tasks else 1,
        num_ps_tasks=num_ps_tasks)

    # Create global_step
    with tf.compat.v1.device(deploy_config.variables_device()):
        global_step = slim.create_global_step()

    ######################
    # Select the network #
    ######################
    network_fn = get_network_fn(
        MODEL_NAME,
        num_classes=(NUM_CLASSES - LABELS_OFFSET),
        weight_decay=WEIGHT_DECAY,
        is_training=True)

    #####################################
    # Select the preprocessing function #
    #####################################
    image_preprocessing_fn = functools.partial(preprocess_image, is_training=True)

    ##############################################################
    # Create a dataset provider that loads data from the dataset #
    ##############################################################
    with tf.compat.v1.device(deploy_config.inputs_device()):
        [image, label] = _dataset_example()
        label -= LABELS_OFFSET

        train_image_size = TRAIN_IMAGE_SIZE or network_fn.default_image_size

        image = image_preprocessing_fn(image, train_image_size, train_image_size)

        images, labels = tf.compat.v1.train.batch(
            [image, label],
            batch_size=BATCH_SIZE,
            num_threads=NUM_PREPROCESSING_THREADS,
            capacity=5 * BATCH_SIZE)
        labels = slim.one_hot_encoding(
            labels, NUM_CLASSES - LABELS_OFFSET)
        batch_queue = slim.prefetch_queue.prefetch_queue(
            [images, labels], capacity=2 * deploy_config.num_clones)

    ####################
    # Define the model #
    ####################
    def clone_fn(batch_queue):
        """Allows data parallelism by creating multiple clones of network_fn."""
        images, labels = batch_queue.dequeue()
        logits, end_points = network_fn(images)

        #############################
        # Specify the loss function #
        #############################
        if 'AuxLogits' in end_points:
            slim.losses.softmax_cross_entropy(
                end_points['AuxLogits'], labels,
                label_smoothing=LABEL_SMOOTHING, weights=0.4,
                scope='aux_loss')
        slim.losses.softmax_cross_entropy(
            logits, labels, label_smoothing=LABEL_SMOOTHING, weights=1.0)
        return end_points

    # Gather initial summaries.
    summaries = set(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES))

    clones = create_clones(deploy_config, clone_fn, [batch_queue])
    first_clone_scope = deploy_config.clone_scope(0)
    # Gather update_ops from the first clone. These contain, for example,
    # the updates for the batch_norm variables created by network_fn.
    update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS,
                                             first_clone_scope)

    # Add summaries for end_points.
    end_points = clones[0].outputs
    for end_point in end_points:
        x = end_points[end_point]
        summaries.add(tf.compat.v1.summary.histogram('activations/' + end_point, x))
        summaries.add(tf.compat.v1.summary.scalar('sparsity/' + end_point,
                                                  tf.nn.zero_fraction(x)))

    # Add summaries for losses.
    for loss in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES, first_clone_scope):
        summaries.add(tf.compat.v1.summary.scalar(f'losses/{loss.op.name}', loss))

    # Add summaries for variables.
    for variable in slim.get_model_variables():
        summaries.add(tf.compat.v1.summary.histogram(variable.op.name, variable))

    #################################
    # Configure the moving averages #
    #################################
    if MOVING_AVERAGE_DECAY:
        moving_average_variables = slim.get_model_variables()
        variable_averages = tf.compat.v1.train.ExponentialMovingAverage(
            MOVING_AVERAGE_DECAY, global_step)
    else:
        moving_average_variables, variable_averages = None, None

    #########################################
    # Configure the optimization procedure. #
    #########################################
    with tf.compat.v1.device(deploy_config.optimizer_device()):
        learning_rate = _configure_learning_rate(NUM_SAMPLES, global_step, sync_replicas)
        optimizer = _configure_optimizer(learning_rate)
        summaries.add(tf.compat.v1.summary.scalar('learning_rate', learning_rate))

    if sync_replicas:
        # If sync_replicas is enabled, the averaging will be done in the chief
        # queue runner.
        optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
            opt=optimizer,
            replicas_to_aggregate=REPLICAS_TO_AGGREGATE,
            total_num_replicas=WORKER_REPLICAS,
            variable_averages=variable_averages,
            variables_to_average=moving_average_variables)
    elif MOVING_AVERAGE_DECAY:
        # Update ops executed locally by trainer.
        update_ops.append(variable_averages.apply(moving_average_variables))

    # Variables to train.
    variables_to_train = _get_variables_to_train()

    #  and returns a train_tensor and summary_op
    total_loss, clones_gradients = optimize_clones(
        clones,
        optimizer,
        var_list=variables_to_train)
    # Add total_loss to summary.
    summaries.add(tf.compat.v1.summary.scalar('total_loss', total_loss))

    # Create gradient updates.
    grad_updates = optimizer.apply_gradients(clones_gradients,
                                             global_step=global_step)
    update_ops.append(grad_updates)

    update_op = tf.group(*update_ops)
    with tf.control_dependencies([update_op]):
        train_tensor = tf.identity(total_loss, name='train_op')

    # Add the summaries from the first clone. These contain the summaries
    # created by model_fn and either optimize_clones() or _gather_clone_loss().
    summaries |= set(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES,
                                                 first_clone_scope))

    # Merge all summaries together.
    summary_op = tf.compat.v1.summary.merge(list(summaries), name='summary_op')

    ###########################
    # Kicks off the training. #
    ###########################
    run_train_without_session(
        slim.learning.train,
        train_tensor,
        logdir=train_dir,
        master=MASTER,
        is_chief=(task == 0),
        init_fn=_get_init_fn(),
        summary_op=summary_op,
        number_of_steps=MAX_NUMBER_OF_STEPS,
        log_every_n_steps=LOG_EVERY_N_STEPS,
        save_summaries_secs=SAVE_SUMMARIES_SECS,
        save_interval_secs=SAVE_INTERVAL_SECS,
        sync_optimizer=optimizer if sync_replicas else None)


def build(placed: bool, sync: bool, is_chief: bool = True) -> tf.compat.v1.MetaGraphDef:
    g = tf.Graph()
    with g.as_default():
        # TF 1.x's ref variables (VariableV2).
        tf.compat.v1.get_variable_scope().set_use_resource(False)
        with tf_slim_compat(), tempfile.TemporaryDirectory() as train_dir:
            main(sync_replicas=sync, num_ps_tasks=NUM_PS_TASKS if placed else 0,
                 task=0 if is_chief else 1, train_dir=train_dir)
        return tf.compat.v1.train.export_meta_graph(graph=g, clear_devices=False)
