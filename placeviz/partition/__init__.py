"""Per-device partitions with ``_Send``/``_Recv``: TF's graph partitioning, on a placed graph.

:func:`partition` (:mod:`placeviz.partition.session`) prunes one run and partitions it as TF's
distributed runtime does; each step lives in the module named after the TF file it mirrors:

* :mod:`~placeviz.partition.subgraph`: ``tensorflow/core/graph/subgraph.cc``
  ``RewriteGraphForExecution`` (feeds, fetches, prune) and the run's names
  (``tensorflow/python/client/session.py``);
* :mod:`~placeviz.partition.const_replication`:
  ``tensorflow/core/common_runtime/replicate_constants_pass.cc``;
* :mod:`~placeviz.partition.control_flow`: ``tensorflow/core/graph/control_flow.cc``
  ``BuildControlFlowInfo`` (while-loop frames);
* :mod:`~placeviz.partition.memory_types`: ``tensorflow/core/framework/memory_types.cc``
  ``MemoryTypesForNode``;
* :mod:`~placeviz.partition.graph_partition`: ``tensorflow/core/graph/graph_partition.cc``
  (control-flow colocation, control loops, ``Partition``: ``_Send``/``_Recv``, shared receives),
  its transfers kept as columns by :mod:`~placeviz.partition.transfers`;
* :mod:`~placeviz.partition.shapes`: the attrs a transfer's static shape is read from
  (``tensorflow/core/framework/attr_value.proto``), many nodes in one call of the C reader;
* :mod:`~placeviz.partition.graphdefs`: the partitions' GraphDefs (built, or written from the
  input's bytes);
* :mod:`~placeviz.partition.session`: the two levels of ``master_session.cc``/``graph_mgr.cc``
  (or DirectSession's one), :func:`partition` and :class:`PartitionResult`;
* :mod:`~placeviz.partition.base`: the state every step shares.

Imports go one way: ``session`` → ``graphdefs``, ``graph_partition`` → ``memory_types``,
``control_flow`` → ``base``; ``graph_partition`` → ``shapes``; ``subgraph`` and
``const_replication`` → ``base`` → ``transfers``.
"""

from placeviz.partition.base import PartitionError
from placeviz.partition.session import SCHEMA, PartitionResult, partition
from placeviz.partition.subgraph import PruneError, RunSignature, parse_run, prune, prune_mask

__all__ = ["SCHEMA", "PartitionError", "PartitionResult", "PruneError", "RunSignature", "parse_run", "partition",
           "prune", "prune_mask"]
