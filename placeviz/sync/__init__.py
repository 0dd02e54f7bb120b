"""SyncReplicasOptimizer: find its machinery in any graph and prove one update per global step.

- :func:`placeviz.sync.detect.detect` finds the token queue(s), accumulators, local step, worker
  train op, chief sync op, R, tokens per step, init ops and variable averages by structure;
- :func:`placeviz.sync.proof.prove` checks, with one reverse reachability per run target, that
  every trainable variable and the global step are updated exactly once per global step (by the
  chief's sync op), never by the workers' train op;
- :func:`sync_report` combines both into the ``sync`` section of ``analyze`` (``None`` when the
  graph has no sync machinery).

Nothing here imports TensorFlow.
"""

from __future__ import annotations

from placeviz.sync.detect import SyncMachinery, detect
from placeviz.sync.proof import SyncProof, prove

__all__ = ["SyncMachinery", "SyncProof", "detect", "prove", "sync_report", "sync_section"]


def sync_report(graph, collections=None, trainable=None) -> dict | None:
    """The ``sync`` section of ``analyze`` as a JSON-ready dict, or None without sync machinery.

    ``collections``: a :class:`placeviz.io.Collections` (optional; its ``trainable_variables``,
    ``train_ops`` and ``queue_runners`` refine the result but are never required).
    ``trainable``: variable names overriding the trainable set.
    """
    machinery = detect(graph, collections)
    if machinery is None:
        return None
    if trainable is None and collections is not None and collections.trainable_variables:
        trainable = collections.trainable_variables
    return sync_section(machinery, prove(graph, machinery, trainable=trainable))


def sync_section(machinery: SyncMachinery, proof: SyncProof) -> dict:
    """The JSON-ready ``sync`` section from a detection and its proof."""
    out = proof.to_json()
    out["machinery"] = machinery.to_json()
    return out
