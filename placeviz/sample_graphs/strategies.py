"""Port of TF1 contrib's greedy ps placement strategy (absent from TF 2.x).

``tf.contrib.training.GreedyLoadBalancingStrategy`` and ``tf.contrib.training.byte_size_load_fn``
(contrib/training/python/training/device_setter.py) were removed with contrib. This is a
faithful port, using TensorFlow's own op and dtype objects, so it behaves exactly as the contrib
code would on TF 2.21. In particular ``tf.resource.size == 0`` in TF 2.x, so resource variables
(``VarHandleOp``), hash tables and accumulators all weigh 0 bytes and pile onto the least-loaded
task (TF 1.x reported size 1 for resource dtypes).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

__all__ = ["GreedyLoadBalancingStrategy", "byte_size_load_fn"]


class GreedyLoadBalancingStrategy:
    """Returns the least-loaded ps task for ps placement.

    Each call picks ``argmin(loads)`` (ties go to the lowest task index), then adds
    ``load_fn(op)`` to that task's load. Pass an instance as ``ps_strategy`` to
    ``tf.compat.v1.train.replica_device_setter``.
    """

    def __init__(self, num_tasks: int, load_fn: Callable[[tf.Operation], float]) -> None:
        self._num_tasks = num_tasks
        self._load_fn = load_fn
        self._ps_loads = np.zeros(num_tasks)

    @property
    def loads(self) -> np.ndarray:
        """A copy of the current load of each task."""
        return self._ps_loads.copy()

    def __call__(self, op: tf.Operation) -> np.integer:  # numpy's int, as TF's own strategy returns
        task = np.argmin(self._ps_loads)
        self._ps_loads[task] += self._load_fn(op)
        return task


def byte_size_load_fn(op: tf.Operation) -> int:
    """Byte size of the single output of ``op`` (typically a variable op).

    Raises ValueError when ``op`` does not have exactly one output or when the output's shape
    (or, as a fallback, the op's ``shape`` attr) is not fully defined.
    """
    if len(op.outputs) != 1:
        raise ValueError(f"Op {op} must have a single output")
    output = op.outputs[0]
    elem_size = output.dtype.size
    shape = output.get_shape()
    if not shape.is_fully_defined():
        # Legacy scalar "Variable" ops had outputs of unknown shape when created (and hence when
        # passed here for placement), although the scalar shape is set right afterwards.
        shape = tf.TensorShape(op.get_attr("shape"))
    shape.assert_is_fully_defined()
    return shape.num_elements() * elem_size
