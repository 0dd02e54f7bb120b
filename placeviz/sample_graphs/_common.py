"""The skeleton every sample shares: graph context, device setter, global step, optimizer.

A sample module only writes its model as a ``model_fn(ctx) -> Model``;
:func:`build_training_graph` wraps it the way TF1 parameter-server programs did
(``models/inception/inception_distributed_train.py``, ``tools/dist_test/python/mnist_replica.py``)::

    with tf.device(tf.train.replica_device_setter(...)):
        global_step = ...
        loss = model(...)
        opt = tf.train.SyncReplicasOptimizer(opt, ...)      # when sync_replicas
        with tf.control_dependencies([tf.group(*update_ops)]):
            loss = tf.identity(loss)
        grads = opt.compute_gradients(loss)
        apply_gradients_op = opt.apply_gradients(grads, global_step=global_step)
        with tf.control_dependencies([apply_gradients_op]):
            train_op = tf.identity(loss, name="train_op")
        chief_queue_runners = [opt.get_chief_queue_runner()]
        init_tokens_op = opt.get_init_tokens_op()
        init_op = tf.global_variables_initializer()

The graph is the chief's (worker task 0) graph: with sync_replicas it holds the chief queue runner
and the init-tokens op. See :class:`placeviz.sample_graphs.options.SyncCollections` for where the
SyncReplicas machinery is recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from placeviz import progress
from placeviz.sample_graphs.options import BuildOptions, SyncCollections
from placeviz.sample_graphs.strategies import GreedyLoadBalancingStrategy, byte_size_load_fn

__all__ = [
    "BuildContext",
    "Model",
    "build_training_graph",
    "feature",
    "make_device_setter",
    "num_ps_tasks",
]

GRAPH_SEED = 20240611
"""Graph-level random seed: every random op gets a fixed seed, so runs are reproducible."""

GraphKeys = tf.compat.v1.GraphKeys


@dataclass
class BuildContext:
    """What a model function gets: the options, the global step and the prelude's result."""

    options: BuildOptions
    global_step: tf.Variable
    prelude: Any = None
    rng: np.random.RandomState = field(default_factory=lambda: np.random.RandomState(0))


@dataclass
class Model:
    """What a model function returns; the skeleton turns it into a training step."""

    loss: tf.Tensor
    optimizer: tf.compat.v1.train.Optimizer
    ema: tf.compat.v1.train.ExponentialMovingAverage | None = None
    """Averages of the variables: applied after the update, or by SyncReplicasOptimizer's sync op."""
    variables_to_average: Sequence[tf.Variable] | None = None
    train_deps: list = field(default_factory=list)
    """Extra ops every training step runs (e.g. a hash-table insert)."""
    grad_clip_norm: float | None = None
    """Clip the gradients with tf.clip_by_global_norm before applying them (as ptb_word_lm.py)."""
    metrics_fn: Callable[[], list] | None = None
    """Builds streaming metrics after apply_gradients (their local variables are created after the
    optimizer's slots, as in TF1 scripts that log metrics from the training graph); returns the
    metric update ops, which the training step runs."""


def num_ps_tasks(options: BuildOptions) -> int:
    """The number of ps tasks replica_device_setter will use (0 when it places nothing)."""
    if options.cluster is None:
        return options.ps_tasks
    job = tf.DeviceSpec.from_string(options.ps_device or "").job
    cluster = tf.train.ClusterSpec(options.cluster).as_dict()
    if job not in cluster or cluster[job] is None:
        return 0
    return len(cluster[job])


def make_device_setter(options: BuildOptions) -> Callable[[tf.Operation], str] | None:
    """``tf.compat.v1.train.replica_device_setter`` for the options (None when it returns None)."""
    strategy = None
    if options.ps_strategy == "greedy":
        strategy = GreedyLoadBalancingStrategy(num_ps_tasks(options), byte_size_load_fn)
    return tf.compat.v1.train.replica_device_setter(
        ps_tasks=options.ps_tasks,
        ps_device=options.ps_device,
        worker_device=options.worker_device,
        merge_devices=options.merge_devices,
        cluster=options.cluster,
        ps_ops=list(options.ps_ops) if options.ps_ops is not None else None,
        ps_strategy=strategy,
    )


def feature(name: str, value: np.ndarray | Sequence, dtype: tf.DType | None = None) -> tf.Tensor:
    """An input placeholder that defaults to ``value``, so a step runs without feeds."""
    value = np.asarray(value)
    return tf.compat.v1.placeholder_with_default(
        tf.constant(value, dtype=dtype), shape=value.shape, name=name
    )


@contextlib.contextmanager
def _graph_scope(options: BuildOptions) -> Iterator[tf.Graph]:
    if options.graph_as_default:
        graph = tf.Graph()
        with graph.as_default():
            progress.count(lambda: graph.version)  # ops so far; Graph.version is safe from another thread
            yield graph
    else:
        # A TF1 script: ops go to the implicit global default graph, never entered with as_default.
        tf.compat.v1.disable_eager_execution()
        tf.compat.v1.reset_default_graph()
        graph = tf.compat.v1.get_default_graph()
        progress.count(lambda: graph.version)
        yield graph


@contextlib.contextmanager
def _v1_control_flow() -> Iterator[None]:
    """TF1 control flow (Enter/Merge/Switch/NextIteration/Exit), restored afterwards."""
    was_v2 = tf.compat.v1.control_flow_v2_enabled()
    tf.compat.v1.disable_control_flow_v2()
    try:
        yield
    finally:
        if was_v2:
            tf.compat.v1.enable_control_flow_v2()


@contextlib.contextmanager
def _device_scope(options: BuildOptions) -> Iterator[None]:
    if not options.placed:
        yield
        return
    # replica_device_setter may return None (e.g. the ps job is not in the cluster); like a TF1
    # program we still enter tf.device(None), which clears any outer device scope.
    with tf.compat.v1.device(make_device_setter(options)):
        yield


def build_training_graph(
    options: BuildOptions,
    model_fn: Callable[[BuildContext], Model],
    *,
    prelude: Callable[[BuildOptions], Any] | None = None,
) -> tf.Graph:
    """Builds a training graph around ``model_fn`` as a TF1 parameter-server program would.

    ``prelude`` runs inside the graph but *before* the replica_device_setter scope is entered;
    its result is ``ctx.prelude``. (Only the misconfigured sample uses it.)
    """
    with _graph_scope(options) as graph, _v1_control_flow():
        tf.compat.v1.set_random_seed(GRAPH_SEED)
        # get_variable, tf.compat.v1.Variable and the optimizers' slots follow the root scope.
        tf.compat.v1.get_variable_scope().set_use_resource(options.resource_variables)
        pre = prelude(options) if prelude is not None else None
        with _device_scope(options):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            ctx = BuildContext(options=options, global_step=global_step, prelude=pre)
            model = model_fn(ctx)
            train_op = _training_step(ctx, model)
            # Optimizer.apply_gradients(global_step=...) appends its own op to TRAIN_OP (with
            # SyncReplicas that is the wrapped optimizer's update, which only the chief queue runner
            # may run). Keep exactly one entry: the op every worker runs per step.
            tf.compat.v1.get_collection_ref(GraphKeys.TRAIN_OP)[:] = [train_op.op]
            _initializers()
    return graph


def _training_step(ctx: BuildContext, model: Model) -> tf.Tensor:
    options = ctx.options
    opt = model.optimizer
    if options.sync_replicas:
        opt = tf.compat.v1.train.SyncReplicasOptimizer(
            opt,
            replicas_to_aggregate=options.replicas_to_aggregate,
            total_num_replicas=options.num_replicas,
            variable_averages=model.ema,
            variables_to_average=model.variables_to_average,
        )

    loss = model.loss
    update_ops = tf.compat.v1.get_collection(GraphKeys.UPDATE_OPS)
    if update_ops:
        # Batch-norm statistics are updated with every step.
        with tf.control_dependencies([tf.group(*update_ops)]):
            loss = tf.identity(loss)

    grads_and_vars = opt.compute_gradients(loss)
    if model.grad_clip_norm is not None:
        grads, tvars = zip(*grads_and_vars, strict=True)
        grads, _ = tf.clip_by_global_norm(grads, model.grad_clip_norm)
        grads_and_vars = list(zip(grads, tvars, strict=True))
    apply_gradients_op = opt.apply_gradients(grads_and_vars, global_step=ctx.global_step)

    deps = [apply_gradients_op, *model.train_deps]
    if model.ema is not None and not options.sync_replicas:
        deps.append(model.ema.apply(model.variables_to_average))
    if model.metrics_fn is not None:
        deps.extend(model.metrics_fn())
    with tf.control_dependencies(deps):
        # `loss` carries the UPDATE_OPS dependency (gradients do not depend on that Identity).
        train_op = tf.identity(loss, name="train_op")

    if options.sync_replicas:
        _record_sync_machinery(opt)
    return train_op


def _record_sync_machinery(opt: tf.compat.v1.train.SyncReplicasOptimizer) -> None:
    """The chief's part of SyncReplicas (inception_distributed_train.py makes the same calls)."""
    chief_queue_runner = opt.get_chief_queue_runner()
    tf.compat.v1.train.add_queue_runner(chief_queue_runner)
    init_tokens_op = opt.get_init_tokens_op()

    def add(key: str, value: tf.Operation | tf.Tensor) -> None:
        # Operations for what is run for its effect, the Tensor for ready_for_local_init_op.
        if key != SyncCollections.READY_FOR_LOCAL_INIT_OP and isinstance(value, tf.Tensor):
            value = value.op
        tf.compat.v1.add_to_collection(key, value)

    ready = opt.ready_for_local_init_op
    if hasattr(ready, "mark_used"):  # a tf_should_use wrapper; the chief's hook does use it
        ready.mark_used()
    add(SyncCollections.SYNC_OP, chief_queue_runner.enqueue_ops[0])
    add(SyncCollections.CHIEF_INIT_OP, opt.chief_init_op)
    add(SyncCollections.LOCAL_STEP_INIT_OP, opt.local_step_init_op)
    add(SyncCollections.READY_FOR_LOCAL_INIT_OP, ready)
    add(SyncCollections.INIT_TOKENS_OP, init_tokens_op)
    add(SyncCollections.TOKEN_QUEUE, chief_queue_runner.queue.queue_ref.op)


def _initializers() -> None:
    """The init ops a TF1 Supervisor/Scaffold would add (INIT_OP, LOCAL_INIT_OP collections)."""
    init_op = tf.compat.v1.global_variables_initializer()
    local_init_op = tf.group(
        tf.compat.v1.local_variables_initializer(),
        tf.compat.v1.tables_initializer(),
        name="local_init",
    )
    tf.compat.v1.add_to_collection(GraphKeys.INIT_OP, init_op)
    tf.compat.v1.add_to_collection(GraphKeys.LOCAL_INIT_OP, local_init_op)
