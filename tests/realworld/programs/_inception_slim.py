"""The pieces of the old Inception "slim" library that ``inception_distributed.py`` uses.

Copied from tensorflow/models ``research/inception/inception/slim/`` (``scopes.py``,
``variables.py``, ``losses.py``, ``ops.py``, ``inception_model.py``; read at the fork snapshot
SimiaCryptus/models@fc8e060e773e09cbe56b010117756380f8c21c95 and checked against the
tensorflow/models copies stored for ``inception/inception/slim/scopes.py`` @1875363,
``research/inception/inception/slim/variables.py`` @4f77686 and
``research/inception/inception/slim/losses.py`` @4825173). This is *not* ``tf_slim``: the program
uses its own older slim, whose ``variables.variable``/``global_step`` take a ``device=`` argument
(a string or a device chooser called with a fake ``NodeDef``) and open their own ``tf.device``
scope around ``tf.get_variable``.

The five modules become five namespaces (``scopes``, ``variables``, ``losses``, ``ops``,
``inception``) and ``slim`` (``slim/slim.py``: the same five plus ``arg_scope``), so the program
reads ``slim.scopes.arg_scope``, ``slim.variables.VariableDeviceChooser``, ... as upstream.
``arg_scope`` keys are ``(fn.__module__, fn.__name__)`` as upstream; the decorated function names
are unique in this one module, so merging the modules changes nothing.

Changes (only what the program reaches is copied; the code of what is copied is unchanged
except for these):

* ``tf.*`` TF1 names -> ``tf.compat.v1.*`` (``get_variable``, ``variable_scope``,
  ``name_scope``, ``get_collection``, ``add_to_collection``, ``GraphKeys``, ``NodeDef``,
  ``nn.conv2d``/``max_pool``/``avg_pool``/``dropout``/``moments``/``xw_plus_b``/
  ``batch_normalization``, ``truncated_normal_initializer``, ``constant_initializer``,
  ``zeros_initializer``, ``ones_initializer``); ``scopes.py``'s ``ops.get_collection`` is
  ``tf.compat.v1.get_collection``.
* ``losses.cross_entropy_loss``: ``tf.contrib.nn.deprecated_flipped_softmax_cross_entropy_with_logits
  (logits, labels, name='xentropy')`` (removed with contrib) -> its body,
  ``tf.compat.v1.nn.softmax_cross_entropy_with_logits(labels=..., logits=..., name='xentropy')``;
  ``get_shape()[-1].value`` -> ``tf.compat.dimension_value(get_shape()[-1])``.
* ``variables.py``: ``class VariableDeviceChooser(object)`` -> ``class VariableDeviceChooser``.
* ``variables.variable``: TF 2.21's ``get_variable(regularizer=...)`` no longer does what the
  program relied on: it runs the regularizer once outside the variable's colocation (dangling
  ops), then files a ``_LazyEvalTensor`` in ``REGULARIZATION_LOSSES`` that builds a fresh copy of
  the loss ops at every use, and that ``ExponentialMovingAverage.apply`` (the chief's loss
  averages) rejects (``'_LazyEvalTensor' object has no attribute 'ref'``). So ``variable`` calls
  ``get_variable(regularizer=None)`` and then runs TF 1.x's own regularizer step (TF 1.0-1.4
  ``variable_scope._get_single_variable``: ``with colocate_with(v.op): with
  name_scope(name + "/Regularizer/"): loss = regularizer(v)``, then
  ``add_to_collection(REGULARIZATION_LOSSES, loss)``), inside the same ``tf.device`` scope.
* Not copied (the program does not reach them): ``variables.add_variable``/``get_variables*``/
  ``get_unique_variable``, ``losses.l1_regularizer``/``l1_l2_regularizer``/``l1_loss``/``l2_loss``,
  ``ops.one_hot_encoding``/``repeat_op``, ``inception_model.inception_v3_parameters``. Docstrings
  are cut to their first line.
* ``inception.inception_v3`` is shrunk: the stem keeps ``conv0``, ``conv1``, ``pool1`` (``conv2``,
  ``conv3``, ``conv4``, ``pool2`` dropped), one Inception block (``mixed_35x35x256a``, its four
  branches, ``branch3x3dbl`` with two convs instead of three) instead of eleven, then the
  auxiliary head (``aux_logits``: avg_pool, ``proj`` conv, full-map conv, flatten, fc) and the
  ``logits`` head (avg_pool, dropout, flatten, fc) as written; filter counts are 8-16 instead of
  32-2048. Scope names, arg_scopes, endpoints and the op wrappers are as upstream.
"""

import contextlib
import functools
from types import SimpleNamespace

import tensorflow as tf
from tensorflow.python.training import moving_averages

# ------------------------------------------------------------------------------------ scopes.py
_ARGSTACK_KEY = ("__arg_stack",)

_DECORATED_OPS = set()


def _get_arg_stack():
    stack = tf.compat.v1.get_collection(_ARGSTACK_KEY)
    if stack:
        return stack[0]
    else:
        stack = [{}]
        tf.compat.v1.add_to_collection(_ARGSTACK_KEY, stack)
        return stack


def _current_arg_scope():
    stack = _get_arg_stack()
    return stack[-1]


def _add_op(op):
    key_op = (op.__module__, op.__name__)
    if key_op not in _DECORATED_OPS:
        _DECORATED_OPS.add(key_op)


@contextlib.contextmanager
def arg_scope(list_ops_or_scope, **kwargs):
    """Stores the default arguments for the given set of list_ops."""
    if isinstance(list_ops_or_scope, dict):
        # Assumes that list_ops_or_scope is a scope that is being reused.
        if kwargs:
            raise ValueError("When attempting to re-use a scope by suppling a"
                             "dictionary, kwargs must be empty.")
        current_scope = list_ops_or_scope.copy()
        try:
            _get_arg_stack().append(current_scope)
            yield current_scope
        finally:
            _get_arg_stack().pop()
    else:
        # Assumes that list_ops_or_scope is a list/tuple of ops with kwargs.
        if not isinstance(list_ops_or_scope, (list, tuple)):
            raise TypeError("list_ops_or_scope must either be a list/tuple or reused"
                            "scope (i.e. dict)")
        try:
            current_scope = _current_arg_scope().copy()
            for op in list_ops_or_scope:
                key_op = (op.__module__, op.__name__)
                if not has_arg_scope(op):
                    raise ValueError("%s is not decorated with @add_arg_scope", key_op)
                if key_op in current_scope:
                    current_kwargs = current_scope[key_op].copy()
                    current_kwargs.update(kwargs)
                    current_scope[key_op] = current_kwargs
                else:
                    current_scope[key_op] = kwargs.copy()
            _get_arg_stack().append(current_scope)
            yield current_scope
        finally:
            _get_arg_stack().pop()


def add_arg_scope(func):
    """Decorates a function with args so it can be used within an arg_scope."""
    @functools.wraps(func)
    def func_with_args(*args, **kwargs):
        current_scope = _current_arg_scope()
        current_args = kwargs
        key_func = (func.__module__, func.__name__)
        if key_func in current_scope:
            current_args = current_scope[key_func].copy()
            current_args.update(kwargs)
        return func(*args, **current_args)
    _add_op(func)
    return func_with_args


def has_arg_scope(func):
    """Checks whether a func has been decorated with @add_arg_scope or not."""
    key_op = (func.__module__, func.__name__)
    return key_op in _DECORATED_OPS


scopes = SimpleNamespace(arg_scope=arg_scope, add_arg_scope=add_arg_scope, has_arg_scope=has_arg_scope)

# --------------------------------------------------------------------------------- variables.py
# Collection containing all the variables created using slim.variables
MODEL_VARIABLES = '_model_variables_'

# Collection containing the slim.variables that are created with restore=True.
VARIABLES_TO_RESTORE = '_variables_to_restore_'


class VariableDeviceChooser:
    """Slim device chooser for variables.

    When using a parameter server it will assign them in a round-robin fashion.
    When not using a parameter server it allows GPU:0 placement otherwise CPU:0.
    """

    def __init__(self,
                 num_parameter_servers=0,
                 ps_device='/job:ps',
                 placement='CPU:0'):
        self._num_ps = num_parameter_servers
        self._ps_device = ps_device
        self._placement = placement if num_parameter_servers == 0 else 'CPU:0'
        self._next_task_id = 0

    def __call__(self, op):
        device_string = ''
        if self._num_ps > 0:
            task_id = self._next_task_id
            self._next_task_id = (self._next_task_id + 1) % self._num_ps
            device_string = '%s/task:%d' % (self._ps_device, task_id)  # noqa: UP031
        device_string += '/%s' % self._placement  # noqa: UP031
        return device_string


# TODO(sguada) Remove once get_variable is able to colocate op.devices.
def variable_device(device, name):
    """Fix the variable device to colocate its ops."""
    if callable(device):
        var_name = tf.compat.v1.get_variable_scope().name + '/' + name
        var_def = tf.compat.v1.NodeDef(name=var_name, op='Variable')
        device = device(var_def)
    if device is None:
        device = ''
    return device


@add_arg_scope
def global_step(device=''):
    """Returns the global step variable."""
    global_step_ref = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.GLOBAL_STEP)
    if global_step_ref:
        return global_step_ref[0]
    else:
        collections = [
            VARIABLES_TO_RESTORE,
            tf.compat.v1.GraphKeys.GLOBAL_VARIABLES,
            tf.compat.v1.GraphKeys.GLOBAL_STEP,
        ]
        # Get the device for the variable.
        with tf.compat.v1.device(variable_device(device, 'global_step')):
            return tf.compat.v1.get_variable('global_step', shape=[], dtype=tf.int64,
                                             initializer=tf.compat.v1.zeros_initializer(),
                                             trainable=False, collections=collections)


@add_arg_scope
def variable(name, shape=None, dtype=tf.float32, initializer=None,
             regularizer=None, trainable=True, collections=None, device='',
             restore=True):
    """Gets an existing variable with these parameters or creates a new one."""
    collections = list(collections or [])

    # Make sure variables are added to tf.GraphKeys.GLOBAL_VARIABLES and MODEL_VARIABLES
    collections += [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, MODEL_VARIABLES]
    # Add to VARIABLES_TO_RESTORE if necessary
    if restore:
        collections.append(VARIABLES_TO_RESTORE)
    # Remove duplicates
    collections = set(collections)
    # Get the device for the variable.
    with tf.compat.v1.device(variable_device(device, name)):
        # port: regularizer=None, and the regularizer applied as TF 1.x's get_variable applied it
        # (see the module docstring).
        var = tf.compat.v1.get_variable(name, shape=shape, dtype=dtype,
                                        initializer=initializer, regularizer=None,
                                        trainable=trainable, collections=collections)
        if regularizer:
            with tf.compat.v1.colocate_with(var.op):
                with tf.compat.v1.name_scope(var.op.name + "/Regularizer/"):
                    loss = regularizer(var)
                if loss is not None:
                    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES, loss)
        return var


variables = SimpleNamespace(MODEL_VARIABLES=MODEL_VARIABLES, VARIABLES_TO_RESTORE=VARIABLES_TO_RESTORE,
                            VariableDeviceChooser=VariableDeviceChooser, variable_device=variable_device,
                            global_step=global_step, variable=variable)

# ------------------------------------------------------------------------------------ losses.py
# In order to gather all losses in a network, the user should use this
# key for get_collection, i.e:
#   losses = tf.get_collection(slim.losses.LOSSES_COLLECTION)
LOSSES_COLLECTION = '_losses'


def l2_regularizer(weight=1.0, scope=None):
    """Define a L2 regularizer."""
    def regularizer(tensor):
        with tf.compat.v1.name_scope(scope, 'L2Regularizer', [tensor]):
            l2_weight = tf.convert_to_tensor(weight,
                                             dtype=tensor.dtype.base_dtype,
                                             name='weight')
            return tf.multiply(l2_weight, tf.nn.l2_loss(tensor), name='value')
    return regularizer


def cross_entropy_loss(logits, one_hot_labels, label_smoothing=0,
                       weight=1.0, scope=None):
    """Define a Cross Entropy loss using softmax_cross_entropy_with_logits."""
    logits.get_shape().assert_is_compatible_with(one_hot_labels.get_shape())
    with tf.compat.v1.name_scope(scope, 'CrossEntropyLoss', [logits, one_hot_labels]):
        num_classes = tf.compat.dimension_value(one_hot_labels.get_shape()[-1])
        one_hot_labels = tf.cast(one_hot_labels, logits.dtype)
        if label_smoothing > 0:
            smooth_positives = 1.0 - label_smoothing
            smooth_negatives = label_smoothing / num_classes
            one_hot_labels = one_hot_labels * smooth_positives + smooth_negatives
        # Upstream: tf.contrib.nn.deprecated_flipped_softmax_cross_entropy_with_logits(
        #     logits, one_hot_labels, name='xentropy'), which calls exactly this.
        cross_entropy = tf.compat.v1.nn.softmax_cross_entropy_with_logits(
            labels=one_hot_labels, logits=logits, name='xentropy')

        weight = tf.convert_to_tensor(weight,
                                      dtype=logits.dtype.base_dtype,
                                      name='loss_weight')
        loss = tf.multiply(weight, tf.reduce_mean(cross_entropy), name='value')
        tf.compat.v1.add_to_collection(LOSSES_COLLECTION, loss)
        return loss


losses = SimpleNamespace(LOSSES_COLLECTION=LOSSES_COLLECTION, l2_regularizer=l2_regularizer,
                         cross_entropy_loss=cross_entropy_loss)

# --------------------------------------------------------------------------------------- ops.py
# Used to keep the update ops done by batch_norm.
UPDATE_OPS_COLLECTION = '_update_ops_'


@add_arg_scope
def batch_norm(inputs,
               decay=0.999,
               center=True,
               scale=False,
               epsilon=0.001,
               moving_vars='moving_vars',
               activation=None,
               is_training=True,
               trainable=True,
               restore=True,
               scope=None,
               reuse=None):
    """Adds a Batch Normalization layer."""
    inputs_shape = inputs.get_shape()
    with tf.compat.v1.variable_scope(scope, 'BatchNorm', [inputs], reuse=reuse):
        axis = list(range(len(inputs_shape) - 1))
        params_shape = inputs_shape[-1:]
        # Allocate parameters for the beta and gamma of the normalization.
        beta, gamma = None, None
        if center:
            beta = variables.variable('beta',
                                      params_shape,
                                      initializer=tf.compat.v1.zeros_initializer(),
                                      trainable=trainable,
                                      restore=restore)
        if scale:
            gamma = variables.variable('gamma',
                                       params_shape,
                                       initializer=tf.compat.v1.ones_initializer(),
                                       trainable=trainable,
                                       restore=restore)
        # Create moving_mean and moving_variance add them to
        # GraphKeys.MOVING_AVERAGE_VARIABLES collections.
        moving_collections = [moving_vars, tf.compat.v1.GraphKeys.MOVING_AVERAGE_VARIABLES]
        moving_mean = variables.variable('moving_mean',
                                         params_shape,
                                         initializer=tf.compat.v1.zeros_initializer(),
                                         trainable=False,
                                         restore=restore,
                                         collections=moving_collections)
        moving_variance = variables.variable('moving_variance',
                                             params_shape,
                                             initializer=tf.compat.v1.ones_initializer(),
                                             trainable=False,
                                             restore=restore,
                                             collections=moving_collections)
        if is_training:
            # Calculate the moments based on the individual batch.
            mean, variance = tf.compat.v1.nn.moments(inputs, axis)

            update_moving_mean = moving_averages.assign_moving_average(
                moving_mean, mean, decay)
            tf.compat.v1.add_to_collection(UPDATE_OPS_COLLECTION, update_moving_mean)
            update_moving_variance = moving_averages.assign_moving_average(
                moving_variance, variance, decay)
            tf.compat.v1.add_to_collection(UPDATE_OPS_COLLECTION, update_moving_variance)
        else:
            # Just use the moving_mean and moving_variance.
            mean = moving_mean
            variance = moving_variance
        # Normalize the activations.
        outputs = tf.compat.v1.nn.batch_normalization(
            inputs, mean, variance, beta, gamma, epsilon)
        outputs.set_shape(inputs.get_shape())
        if activation:
            outputs = activation(outputs)
        return outputs


def _two_element_tuple(int_or_tuple):
    """Converts `int_or_tuple` to height, width."""
    if isinstance(int_or_tuple, (list, tuple)):
        if len(int_or_tuple) != 2:
            raise ValueError('Must be a list with 2 elements: %s' % int_or_tuple)  # noqa: UP031
        return int(int_or_tuple[0]), int(int_or_tuple[1])
    if isinstance(int_or_tuple, int):
        return int(int_or_tuple), int(int_or_tuple)
    if isinstance(int_or_tuple, tf.TensorShape):
        if len(int_or_tuple) == 2:
            return int_or_tuple[0], int_or_tuple[1]
    raise ValueError('Must be an int, a list with 2 elements or a TensorShape of '
                     'length 2')


@add_arg_scope
def conv2d(inputs,
           num_filters_out,
           kernel_size,
           stride=1,
           padding='SAME',
           activation=tf.nn.relu,
           stddev=0.01,
           bias=0.0,
           weight_decay=0,
           batch_norm_params=None,
           is_training=True,
           trainable=True,
           restore=True,
           scope=None,
           reuse=None):
    """Adds a 2D convolution followed by an optional batch_norm layer."""
    with tf.compat.v1.variable_scope(scope, 'Conv', [inputs], reuse=reuse):
        kernel_h, kernel_w = _two_element_tuple(kernel_size)
        stride_h, stride_w = _two_element_tuple(stride)
        num_filters_in = inputs.get_shape()[-1]
        weights_shape = [kernel_h, kernel_w,
                         num_filters_in, num_filters_out]
        weights_initializer = tf.compat.v1.truncated_normal_initializer(stddev=stddev)
        l2_regularizer = None
        if weight_decay and weight_decay > 0:
            l2_regularizer = losses.l2_regularizer(weight_decay)
        weights = variables.variable('weights',
                                     shape=weights_shape,
                                     initializer=weights_initializer,
                                     regularizer=l2_regularizer,
                                     trainable=trainable,
                                     restore=restore)
        conv = tf.compat.v1.nn.conv2d(inputs, weights, [1, stride_h, stride_w, 1],
                                      padding=padding)
        if batch_norm_params is not None:
            with scopes.arg_scope([batch_norm], is_training=is_training,
                                  trainable=trainable, restore=restore):
                outputs = batch_norm(conv, **batch_norm_params)
        else:
            bias_shape = [num_filters_out,]
            bias_initializer = tf.compat.v1.constant_initializer(bias)
            biases = variables.variable('biases',
                                        shape=bias_shape,
                                        initializer=bias_initializer,
                                        trainable=trainable,
                                        restore=restore)
            outputs = tf.nn.bias_add(conv, biases)
        if activation:
            outputs = activation(outputs)
        return outputs


@add_arg_scope
def fc(inputs,
       num_units_out,
       activation=tf.nn.relu,
       stddev=0.01,
       bias=0.0,
       weight_decay=0,
       batch_norm_params=None,
       is_training=True,
       trainable=True,
       restore=True,
       scope=None,
       reuse=None):
    """Adds a fully connected layer followed by an optional batch_norm layer."""
    with tf.compat.v1.variable_scope(scope, 'FC', [inputs], reuse=reuse):
        num_units_in = inputs.get_shape()[1]
        weights_shape = [num_units_in, num_units_out]
        weights_initializer = tf.compat.v1.truncated_normal_initializer(stddev=stddev)
        l2_regularizer = None
        if weight_decay and weight_decay > 0:
            l2_regularizer = losses.l2_regularizer(weight_decay)
        weights = variables.variable('weights',
                                     shape=weights_shape,
                                     initializer=weights_initializer,
                                     regularizer=l2_regularizer,
                                     trainable=trainable,
                                     restore=restore)
        if batch_norm_params is not None:
            outputs = tf.matmul(inputs, weights)
            with scopes.arg_scope([batch_norm], is_training=is_training,
                                  trainable=trainable, restore=restore):
                outputs = batch_norm(outputs, **batch_norm_params)
        else:
            bias_shape = [num_units_out,]
            bias_initializer = tf.compat.v1.constant_initializer(bias)
            biases = variables.variable('biases',
                                        shape=bias_shape,
                                        initializer=bias_initializer,
                                        trainable=trainable,
                                        restore=restore)
            outputs = tf.compat.v1.nn.xw_plus_b(inputs, weights, biases)
        if activation:
            outputs = activation(outputs)
        return outputs


@add_arg_scope
def max_pool(inputs, kernel_size, stride=2, padding='VALID', scope=None):
    """Adds a Max Pooling layer."""
    with tf.compat.v1.name_scope(scope, 'MaxPool', [inputs]):
        kernel_h, kernel_w = _two_element_tuple(kernel_size)
        stride_h, stride_w = _two_element_tuple(stride)
        return tf.compat.v1.nn.max_pool(inputs,
                                        ksize=[1, kernel_h, kernel_w, 1],
                                        strides=[1, stride_h, stride_w, 1],
                                        padding=padding)


@add_arg_scope
def avg_pool(inputs, kernel_size, stride=2, padding='VALID', scope=None):
    """Adds a Avg Pooling layer."""
    with tf.compat.v1.name_scope(scope, 'AvgPool', [inputs]):
        kernel_h, kernel_w = _two_element_tuple(kernel_size)
        stride_h, stride_w = _two_element_tuple(stride)
        return tf.compat.v1.nn.avg_pool(inputs,
                                        ksize=[1, kernel_h, kernel_w, 1],
                                        strides=[1, stride_h, stride_w, 1],
                                        padding=padding)


@add_arg_scope
def dropout(inputs, keep_prob=0.5, is_training=True, scope=None):
    """Returns a dropout layer applied to the input."""
    if is_training and keep_prob > 0:
        with tf.compat.v1.name_scope(scope, 'Dropout', [inputs]):
            return tf.compat.v1.nn.dropout(inputs, keep_prob)
    else:
        return inputs


def flatten(inputs, scope=None):
    """Flattens the input while maintaining the batch_size."""
    if len(inputs.get_shape()) < 2:
        raise ValueError('Inputs must be have a least 2 dimensions')
    dims = inputs.get_shape()[1:]
    k = dims.num_elements()
    with tf.compat.v1.name_scope(scope, 'Flatten', [inputs]):
        return tf.reshape(inputs, [-1, k])


ops = SimpleNamespace(UPDATE_OPS_COLLECTION=UPDATE_OPS_COLLECTION, batch_norm=batch_norm, conv2d=conv2d,
                      fc=fc, max_pool=max_pool, avg_pool=avg_pool, dropout=dropout, flatten=flatten)


# -------------------------------------------------------------------------- inception_model.py
def inception_v3(inputs,
                 dropout_keep_prob=0.8,
                 num_classes=1000,
                 is_training=True,
                 restore_logits=True,
                 scope=''):
    """Latest Inception from http://arxiv.org/abs/1512.00567 (shrunk: see the module docstring)."""
    # end_points will collect relevant activations for external use, for example
    # summaries or losses.
    end_points = {}
    with tf.compat.v1.name_scope(scope, 'inception_v3', [inputs]):
        with scopes.arg_scope([ops.conv2d, ops.fc, ops.batch_norm, ops.dropout],
                              is_training=is_training):
            with scopes.arg_scope([ops.conv2d, ops.max_pool, ops.avg_pool],
                                  stride=1, padding='VALID'):
                # 35 x 35 x 3 (upstream: 299 x 299 x 3)
                end_points['conv0'] = ops.conv2d(inputs, 8, [3, 3], stride=2,
                                                 scope='conv0')
                # 17 x 17 x 8
                end_points['conv1'] = ops.conv2d(end_points['conv0'], 8, [3, 3],
                                                 scope='conv1')
                # 15 x 15 x 8
                end_points['pool1'] = ops.max_pool(end_points['conv1'], [3, 3],
                                                   stride=2, scope='pool1')
                # 7 x 7 x 8
                net = end_points['pool1']
            # Inception blocks
            with scopes.arg_scope([ops.conv2d, ops.max_pool, ops.avg_pool],
                                  stride=1, padding='SAME'):
                # mixed: 7 x 7 x 32 (upstream: 35 x 35 x 256).
                with tf.compat.v1.variable_scope('mixed_35x35x256a'):
                    with tf.compat.v1.variable_scope('branch1x1'):
                        branch1x1 = ops.conv2d(net, 8, [1, 1])
                    with tf.compat.v1.variable_scope('branch5x5'):
                        branch5x5 = ops.conv2d(net, 8, [1, 1])
                        branch5x5 = ops.conv2d(branch5x5, 8, [5, 5])
                    with tf.compat.v1.variable_scope('branch3x3dbl'):
                        branch3x3dbl = ops.conv2d(net, 8, [1, 1])
                        branch3x3dbl = ops.conv2d(branch3x3dbl, 8, [3, 3])
                    with tf.compat.v1.variable_scope('branch_pool'):
                        branch_pool = ops.avg_pool(net, [3, 3])
                        branch_pool = ops.conv2d(branch_pool, 8, [1, 1])
                    net = tf.concat(axis=3, values=[branch1x1, branch5x5, branch3x3dbl, branch_pool])
                    end_points['mixed_35x35x256a'] = net
                # Auxiliary Head logits
                aux_logits = tf.identity(end_points['mixed_35x35x256a'])
                with tf.compat.v1.variable_scope('aux_logits'):
                    aux_logits = ops.avg_pool(aux_logits, [5, 5], stride=3,
                                              padding='VALID')
                    aux_logits = ops.conv2d(aux_logits, 16, [1, 1], scope='proj')
                    # Shape of feature map before the final layer.
                    shape = aux_logits.get_shape()
                    aux_logits = ops.conv2d(aux_logits, 16, shape[1:3], stddev=0.01,
                                            padding='VALID')
                    aux_logits = ops.flatten(aux_logits)
                    aux_logits = ops.fc(aux_logits, num_classes, activation=None,
                                        stddev=0.001, restore=restore_logits)
                    end_points['aux_logits'] = aux_logits
                # Final pooling and prediction
                with tf.compat.v1.variable_scope('logits'):
                    shape = net.get_shape()
                    net = ops.avg_pool(net, shape[1:3], padding='VALID', scope='pool')
                    # 1 x 1 x 32
                    net = ops.dropout(net, dropout_keep_prob, scope='dropout')
                    net = ops.flatten(net, scope='flatten')
                    # 32
                    logits = ops.fc(net, num_classes, activation=None, scope='logits',
                                    restore=restore_logits)
                    # num_classes
                    end_points['logits'] = logits
                    end_points['predictions'] = tf.nn.softmax(logits, name='predictions')
            return logits, end_points


inception = SimpleNamespace(inception_v3=inception_v3)

# ------------------------------------------------------------------------------------- slim.py
slim = SimpleNamespace(inception=inception, losses=losses, ops=ops, scopes=scopes, variables=variables,
                       arg_scope=arg_scope)
