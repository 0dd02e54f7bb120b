"""Build options shared by every sample graph builder.

This module must not import TensorFlow: the placeviz loader and CLI read these options
(and the collection names below) without paying for a TensorFlow import.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_OPTIONS", "BuildOptions", "SyncCollections"]


@dataclass(frozen=True)
class BuildOptions:
    """How a sample graph is built.

    The fields mirror the arguments of ``tf.compat.v1.train.replica_device_setter`` and
    ``tf.compat.v1.train.SyncReplicasOptimizer``; each sample only describes its model.
    """

    ps_tasks: int = 0
    """0 = no replica_device_setter at all (unplaced graph)."""
    cluster: dict | None = None
    """Passed as ``replica_device_setter(cluster=...)`` when set (TF then ignores ps_tasks)."""
    ps_device: str = "/job:ps"
    worker_device: str = "/job:worker/task:0"
    merge_devices: bool = True
    ps_ops: tuple[str, ...] | None = None
    ps_strategy: str = "round-robin"
    """"round-robin" (TF's default) or "greedy" (port of TF1 contrib GreedyLoadBalancingStrategy
    with byte_size_load_fn, see placeviz.sample_graphs.strategies)."""
    sync_replicas: bool = False
    """Wrap the optimizer in tf.compat.v1.train.SyncReplicasOptimizer (graph of the chief, task 0)."""
    replicas_to_aggregate: int = 2
    total_replicas: int | None = None
    """None = replicas_to_aggregate."""
    resource_variables: bool = False
    """False: ref variables (VariableV2, as TF1 graphs have); True: resource variables (VarHandleOp)."""
    graph_as_default: bool = True
    """True: build inside ``with tf.Graph().as_default():``; False: in the implicit global default
    graph, like a TF1 script (the graph is reset first, and eager execution is disabled for the whole
    process, which cannot be undone). In TF 2.21 this decides whether the SyncReplicas local step,
    created under ``colocate_with``, advances the setter's round-robin counter (only in the first
    case). Optimizer slots and EMA shadows advance it in both cases: they are created inside an outer
    ``init_scope``, which re-enters the graph with the setter on its device stack."""
    scale: int = 1
    """Size knob (layers/blocks) where a sample has one."""

    def __post_init__(self) -> None:
        if self.ps_tasks < 0:
            raise ValueError(f"ps_tasks must be >= 0, got {self.ps_tasks}")
        if self.ps_strategy not in ("round-robin", "greedy"):
            raise ValueError(f"ps_strategy must be 'round-robin' or 'greedy', got {self.ps_strategy!r}")
        if self.replicas_to_aggregate < 1:
            raise ValueError(f"replicas_to_aggregate must be >= 1, got {self.replicas_to_aggregate}")
        if self.total_replicas is not None and self.total_replicas < 1:
            raise ValueError(f"total_replicas must be >= 1, got {self.total_replicas}")
        if self.scale < 1:
            raise ValueError(f"scale must be >= 1, got {self.scale}")

    @property
    def placed(self) -> bool:
        """True when the graph is built under a replica_device_setter scope."""
        return self.ps_tasks > 0 or self.cluster is not None

    @property
    def num_replicas(self) -> int:
        """SyncReplicasOptimizer's total_num_replicas (defaults to replicas_to_aggregate)."""
        return self.replicas_to_aggregate if self.total_replicas is None else self.total_replicas


DEFAULT_OPTIONS = BuildOptions()
"""The default options (an unplaced graph with ref variables)."""


class SyncCollections:
    """Names of the graph collections where the builders record the SyncReplicas machinery.

    SyncReplicasOptimizer keeps these ops as Python attributes only; a real TF1 chief passes them to
    its Supervisor or session hook. The builders store them in these collections (node names in the
    exported MetaGraphDef) so a later tool can find them. The chief queue runner itself is in the
    standard ``queue_runners`` collection (its enqueue op is the sync op).
    """

    SYNC_OP = "sync_replicas/sync_op"
    """The op the chief queue runner runs (token EnqueueMany, or the EMA update built after it)."""
    CHIEF_INIT_OP = "sync_replicas/chief_init_op"
    """``opt.chief_init_op``: local step := global step, plus SetGlobalStep on every accumulator."""
    LOCAL_STEP_INIT_OP = "sync_replicas/local_step_init_op"
    """``opt.local_step_init_op``: what non-chief workers run as local init."""
    READY_FOR_LOCAL_INIT_OP = "sync_replicas/ready_for_local_init_op"
    """``opt.ready_for_local_init_op``: report_uninitialized_variables(global variables)."""
    INIT_TOKENS_OP = "sync_replicas/init_tokens_op"
    """``opt.get_init_tokens_op()``: run once by the chief after the queue runner starts."""
    TOKEN_QUEUE = "sync_replicas/token_queue"
    """The ``sync_token_q`` FIFOQueueV2 op."""
