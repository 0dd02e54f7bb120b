"""Op-type sets: one definition of each kind of op placeviz recognises by its type string.

Why one module: the setter, the placer's hints, the SyncReplicas detector and rewrite, analysis,
traffic, render, lint rules and verify all ask "is this op a variable / an accumulator / a queue /
a read of a variable?". When each module kept its own set, the sets drifted apart (one forgot
``AutoReloadVariable``, another ``PaddingFIFOQueue``), so the same node was a variable in one report
and not in the next. Every set here names the TF source that defines the kind; a module that needs
a wider or narrower notion composes these sets (``VARIABLE_OPS | TEMPORARY_VARIABLE_OPS``) rather
than spelling out a new list. This module imports nothing: every layer may import it (see
``docs/architecture.md``, "Layers").

Sets that belong to one TF algorithm and are read by nothing else stay next to that algorithm
(the partitioner's control-flow sets in :mod:`placeviz.partition.base`, the detector's read-only op list
in :mod:`placeviz.sync.detect`).
"""

from __future__ import annotations

# ----------------------------------------------------------------------------- variables

REF_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "AutoReloadVariable"})
"""Ops that create a ref-typed variable (``RefVariable``: ``tensorflow/python/ops/ref_variable.py``
builds ``VariableV2``; ``Variable`` is its v0 form and ``AutoReloadVariable`` the contrib variant).
All three are in ``STANDARD_PS_OPS`` (``tensorflow/python/training/device_setter.py``)."""

RESOURCE_VARIABLE_OPS = frozenset({"VarHandleOp"})
"""Ops that create a resource variable's handle (``ResourceVariable``,
``tensorflow/python/ops/resource_variable_ops.py`` ``variable_handle_from_shape_and_dtype``)."""

VARIABLE_OPS = REF_VARIABLE_OPS | RESOURCE_VARIABLE_OPS
"""Ops that hold a variable: the node's name is the variable's name. Exactly the variable ops of
``STANDARD_PS_OPS`` in ``tensorflow/python/training/device_setter.py``, so "a variable" here is
what ``replica_device_setter`` sends to a ps task."""

TEMPORARY_VARIABLE_OPS = frozenset({"TemporaryVariable"})
"""A per-step scratch variable (``tensorflow/core/kernels/variable_ops.cc``
``TemporaryVariableOp``): a ref that lives for one step on the device that runs it, so it is not
a ps op, but writes through it are still writes to state."""

VARIABLE_READ_OPS = frozenset({"Identity", "ReadVariableOp"})
"""What reading a variable creates: a ref variable's ``<name>/read`` ``Identity``
(``tensorflow/python/ops/ref_variable.py``, ``array_ops.identity(self._variable, name="read")``)
and a resource variable's ``ReadVariableOp`` (``resource_variable_ops.py`` ``_read_variable_op``)."""

ASSIGN_VARIABLE_OPS = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})
"""Writes to a resource variable's handle (``tensorflow/core/ops/resource_variable_ops.cc``)."""

# ----------------------------------------------------------------------------- forwarding

FORWARD_INPUT0_OPS = frozenset({
    "Identity", "RefIdentity", "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch",
    "NextIteration", "RefNextIteration",
})
"""Ops whose outputs carry input 0's ref/handle, so the variable behind them stays the same
(``tensorflow/core/ops/array_ops.cc`` ``Identity``/``RefIdentity``, ``control_flow_ops.cc``
``Enter``/``Exit``/``Switch``/``NextIteration`` and their ``Ref`` forms)."""

FORWARD_ANY_INPUT_OPS = frozenset({"Merge", "RefMerge"})
"""Ops whose output is whichever input arrived (``tensorflow/core/ops/control_flow_ops.cc``)."""

# ----------------------------------------------------------------------------- feeds

PLACEHOLDER_OPS = frozenset({"Placeholder", "PlaceholderV2"})
"""Placeholders (``tensorflow/core/ops/array_ops.cc``): when one is fed, ``subgraph.cc``
``FeedInputs`` moves its outgoing control edges to the feed node too."""

# ----------------------------------------------------------------------------- other state

ACCUMULATOR_OPS = frozenset({"ConditionalAccumulator", "ResourceConditionalAccumulator",
                             "SparseConditionalAccumulator"})
"""Gradient accumulators (``tensorflow/python/ops/data_flow_ops.py`` ``ConditionalAccumulator``,
``SparseConditionalAccumulator``), the ones ``SyncReplicasOptimizer.apply_gradients``
(``tensorflow/python/training/sync_replicas_optimizer.py``) builds per variable."""

ACCUMULATOR_APPLY_OPS = frozenset({"AccumulatorApplyGradient", "ResourceAccumulatorApplyGradient",
                                   "SparseAccumulatorApplyGradient"})
ACCUMULATOR_TAKE_OPS = frozenset({"AccumulatorTakeGradient", "ResourceAccumulatorTakeGradient",
                                  "SparseAccumulatorTakeGradient"})
SCATTER_UPDATE_OPS = frozenset({"ScatterSub", "ScatterAdd", "ResourceScatterAdd", "ResourceScatterSub"})
"""GradientDescent's sparse updates, without deduplication (``tensorflow/python/training/
gradient_descent.py`` ``_apply_sparse_duplicate_indices``/``_resource_apply_sparse_duplicate_indices``;
also what sparse Adam scatters into its slots): indices at input 1, updates at input 2."""

ACCUMULATOR_SET_STEP_OPS = frozenset({"AccumulatorSetGlobalStep", "ResourceAccumulatorSetGlobalStep"})
"""The accumulator ops of ``tensorflow/core/ops/data_flow_ops.cc`` (apply, take, set_global_step)."""

QUEUE_OPS = frozenset({"FIFOQueue", "FIFOQueueV2", "PaddingFIFOQueue", "PaddingFIFOQueueV2",
                       "RandomShuffleQueue", "RandomShuffleQueueV2", "PriorityQueue", "PriorityQueueV2"})
"""Every queue-creating op of ``tensorflow/core/ops/data_flow_ops.cc`` (ref v1 and resource V2)."""

FIFO_QUEUE_OPS = frozenset({"FIFOQueue", "FIFOQueueV2"})
"""The queue type of ``SyncReplicasOptimizer``'s token queue and ``dummy_queue``
(``data_flow_ops.FIFOQueue`` in ``sync_replicas_optimizer.py``)."""

DEQUEUE_OPS = frozenset({"QueueDequeueV2", "QueueDequeue"})
ENQUEUE_MANY_OPS = frozenset({"QueueEnqueueManyV2", "QueueEnqueueMany"})
ENQUEUE_OPS = ENQUEUE_MANY_OPS | {"QueueEnqueueV2", "QueueEnqueue"}
"""Queue ops of ``tensorflow/core/ops/data_flow_ops.cc`` used by the token queue."""

TABLE_OPS = frozenset({
    "HashTable", "HashTableV2", "MutableHashTable", "MutableHashTableV2", "MutableHashTableOfTensors",
    "MutableHashTableOfTensorsV2", "MutableDenseHashTable", "MutableDenseHashTableV2",
    "AnonymousHashTable", "AnonymousMutableHashTable", "AnonymousMutableHashTableOfTensors",
    "AnonymousMutableDenseHashTable",
})
"""Lookup-table ops (``tensorflow/core/ops/lookup_ops.cc``); the mutable ones are in
``STANDARD_PS_OPS``."""

OTHER_STATE_OPS = TABLE_OPS | ACCUMULATOR_OPS | QUEUE_OPS
"""State other than variables that lives across steps and that a ps task usually hosts."""

# The control-flow op types TF's graph code tests (``IsSwitch``, ``IsMerge``, ``IsEnter``, ``IsExit``,
# ``IsNextIteration``, ``IsLoopCond`` in ``tensorflow/core/graph/graph.h``): the partitioner's frames
# and control loops (``graph_partition.cc``, ``control_flow.cc``), the graph's back edges, the rules.
SWITCH_OPS = frozenset({"Switch", "RefSwitch", "_SwitchN"})
MERGE_OPS = frozenset({"Merge", "RefMerge", "_XlaMerge"})
ENTER_OPS = frozenset({"Enter", "RefEnter"})
EXIT_OPS = frozenset({"Exit", "RefExit"})
NEXT_ITERATION_OPS = frozenset({"NextIteration", "RefNextIteration"})
"""The sources of a while loop's back edges."""
LOOP_COND_OPS = frozenset({"LoopCond"})
