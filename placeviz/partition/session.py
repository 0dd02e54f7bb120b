"""One run of a placed graph, partitioned as a TF session does: :func:`partition`.

:func:`partition` takes a :class:`~placeviz.graph.Graph` and the full runtime device of every node
(what :func:`placeviz.placement.place_graph` returns) and does, for one run signature (fetches,
targets, feeds), what a distributed TF session does before executing it (``docs/tf-behaviours.md``,
"Pruning and partitioning"), each step in the module named after the TF file it mirrors:

1. **Prune** and add the client feed and fetch nodes (:mod:`~placeviz.partition.subgraph`,
   ``tensorflow/core/graph/subgraph.cc``).
2. **Replicate small constants** (:mod:`~placeviz.partition.const_replication`,
   ``tensorflow/core/common_runtime/replicate_constants_pass.cc``).
3. **Control flow**: move control-flow nodes and add control loops for frames that span devices
   (:mod:`~placeviz.partition.graph_partition`, with the frames of
   :mod:`~placeviz.partition.control_flow`).
4. **Partition** (:mod:`~placeviz.partition.graph_partition`, memory types from
   :mod:`~placeviz.partition.memory_types`), the way the distributed runtime does it, in two
   levels: the master splits the graph by **task** (``tensorflow/core/distributed_runtime/
   master_session.cc``, added nodes named ``<src>_S<n>``), then every worker splits its task graph
   by **device** (``graph_mgr.cc``, ``<src>_G<n>``, one counter per task).

``level="task"`` stops after the first level (one GraphDef per task). ``session="direct"``
partitions once by device with DirectSession's ``<prefix>/_<n>`` names (graph_partition_test.cc's
setting). Names of added nodes are deterministic: the counters start at 0 for each call (TF's keep
growing across runs of a session), and ``tensor_name`` is ``edge_<k>_<src>`` with placeviz's own
edge numbering (TF's edge ids are not stable either); treat both as opaque. The GraphDefs
(:attr:`PartitionResult.partitions`, :mod:`~placeviz.partition.graphdefs`) import into
``tf.compat.v1.import_graph_def``.

Fidelity (tests/test_partition_fidelity.py): with Grappler off and the classic optimizer at L0, the
runtime's ``RunMetadata.partition_graphs`` hold exactly the same original nodes per device and the
same transfers, as multisets of (source node, slot or control, source and destination device,
send/recv op), for every sample model, while loops spanning three devices and moved control-flow
nodes included. Where TF's own choice is arbitrary (hash-set order of out-edges) placeviz takes the
first in graph order: the device of an ``Enter``/``NextIteration`` whose consumers sit on several
devices, the processing order inside a worker (only names and ``_dst`` depend on it).

Not modelled: functional control flow and function calls (``While``, ``If``,
``StatefulPartitionedCall``...), which TF lowers or inlines into their bodies' nodes before placing
(:attr:`PartitionResult.notes` says when a run has them); recv scheduling (``_start_time``,
off by default); bfloat16 send/recv casts (``enable_bfloat16_sendrecv``, off by default); the
per-partition classic optimizer at L1, TF's default (constant folding and CSE remove nodes, and a
send may then read a merged twin).

Speed: everything runs on the Graph's int arrays (vectorised with numpy where it pays); per-edge
work happens only for edges that cross partitions (in C when built:
:mod:`~placeviz.partition.graph_partition`). NodeDefs are built only when
:attr:`PartitionResult.partitions` is read (or ``materialize=True``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Literal, overload

from placeviz.graph import AttrKeys, Graph
from placeviz.partition.base import JsonDict
from placeviz.partition.const_replication import _ConstReplication
from placeviz.partition.graph_partition import _GraphPartition
from placeviz.partition.graphdefs import _GraphDefs
from placeviz.partition.subgraph import _Subgraph, parse_run
from placeviz.partition.transfers import TransferTable
from placeviz.protos import GraphDef

if TYPE_CHECKING:
    from placeviz.ops import OpTable
    from placeviz.partition.base import I64Array

SCHEMA = "placeviz.partition/1"
LEVELS = ("device", "task")
SESSIONS = ("master", "direct")
# Ops TF's runtime rewrites before placement (LowerFunctionalOpsPass, function inlining): the
# partition graphs then hold their bodies' nodes, which a static partition of the GraphDef cannot.
LOWERED_OPS = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase",
                         "PartitionedCall", "StatefulPartitionedCall", "SymbolicGradient"})


# ----------------------------------------------------------------------------------------- result
class PartitionResult:
    """The partitions of one run: node lists, transfers and (lazily) GraphDefs.

    * ``table``: the ``_Send``/``_Recv`` pairs as columns (:class:`~placeviz.partition.transfers.
      TransferTable`); ``transfers``: the same, one dict per pair (see :func:`partition`), made on
      first access;
    * ``nodes``: partition key (full device, or task for ``level="task"``) -> names of its nodes,
      original and added, in GraphDef order; ``original_nodes``: the same, the graph's own nodes
      only (both built on first access);
    * ``partitions``: partition key -> GraphDef (built on first access, or at once with
      ``materialize=True``);
    * ``replicated``: Const -> devices of its ``/replicate/`` copies; ``moved``: control-flow
      nodes TF moves before partitioning -> ``{"from", "to"}``; ``control_loops``: the ``_cloop``
      loops added for frames that span devices;
    * ``node_count``: original nodes the run executes; ``fetches``/``targets``/``feeds``: the run;
    * ``notes``: what this partition cannot show (functional control flow and function calls,
      which TF's runtime lowers or inlines into their bodies' nodes before placement).
    """

    def __init__(self, level: str, session: str, client_device: str | None, transfers: TransferTable,
                 replicated: dict[str, list[str]], moved: dict[str, dict[str, str]], control_loops: list[JsonDict],
                 node_count: int, fetches: list[str], targets: list[str], feeds: list[str],
                 builder: _Partitioner) -> None:
        self.level = level
        self.session = session
        self.client_device = client_device
        self.table = transfers
        self.replicated = replicated
        self.moved = moved
        self.control_loops = control_loops
        self.node_count = node_count
        self.fetches = fetches
        self.targets = targets
        self.feeds = feeds
        self.notes: list[str] = []
        self._builder = builder
        self._arrays: dict[str, I64Array] | None = None
        self._lists: dict[str, list[int]] | None = None
        self._nodes: dict[str, list[str]] | None = None
        self._originals: dict[str, list[str]] | None = None
        self._partitions: dict[str, GraphDef] | None = None
        self._device_of: dict[str, str] | None = None

    def _node_arrays(self) -> dict[str, I64Array]:
        """Partition key -> node ids as the partitioner orders them (:meth:`_Partitioner.node_arrays`):
        what the writer and the index read, without a list of ints (300k at 200k) made and read back."""
        if self._arrays is None:
            self._arrays = self._builder.node_arrays()
        return self._arrays

    def _node_lists(self) -> dict[str, list[int]]:
        """:meth:`_node_arrays` as lists, for the readers that walk them node by node."""
        if self._lists is None:
            self._lists = {k: ids.tolist() for k, ids in self._node_arrays().items()}
        return self._lists

    @property
    def keys(self) -> list[str]:
        """Partition keys, sorted."""
        return list(self._node_arrays())

    @property
    def nodes(self) -> dict[str, list[str]]:
        if self._nodes is None:
            self._nodes = {k: self._builder.names_of(ids) for k, ids in self._node_lists().items()}
        return self._nodes

    @property
    def original_nodes(self) -> dict[str, list[str]]:
        if self._originals is None:
            names, n = self._builder.names, self._builder.n
            self._originals = {k: [names[i] for i in ids if i < n] for k, ids in self._node_lists().items()}
        return self._originals

    @property
    def partitions(self) -> dict[str, GraphDef]:
        """Partition key -> GraphDef that ``tf.compat.v1.import_graph_def`` accepts (see
        :meth:`graph_defs`); built on first access."""
        if self._partitions is None:
            self._partitions = self._builder.materialize(self._node_lists())
        return self._partitions

    def graph_defs(self, importable: bool = True) -> dict[str, GraphDef]:
        """The GraphDefs; ``importable=False`` keeps TF's own internal names (a leading ``_``,
        which ``import_graph_def`` refuses, becomes ``._`` otherwise) and every ``_class`` entry."""
        if importable:
            return self.partitions
        return self._builder.materialize(self._node_lists(), importable=False)

    def serialized(self) -> dict[str, bytes]:
        """Partition key -> the serialized GraphDef of :attr:`partitions` (the same message once
        parsed): :meth:`iter_serialized` as a dict."""
        return dict(self.iter_serialized())

    @overload
    def iter_serialized(self, pieces: Literal[False] = False) -> Iterator[tuple[str, bytes]]: ...

    @overload
    def iter_serialized(self, pieces: Literal[True]) -> Iterator[tuple[str, Iterator[bytes]]]: ...

    def iter_serialized(self, pieces: bool = False) -> Iterator[tuple[str, bytes]] | Iterator[tuple[str, Iterator[bytes]]]:
        """(partition key, serialized GraphDef of :attr:`partitions`), in key order, one at a
        time: written from the input's bytes where a node only changes device (see
        :mod:`placeviz.nodewire`), what ``placeviz partition`` writes. Deterministic: the bytes
        depend only on the input's bytes and the run. ``pieces``: each GraphDef as an iterator of
        bytes whose concatenation it is (so that a writer never holds a whole partition)."""
        out = self._builder.serialize(self._node_arrays()) if self._partitions is None else None
        if out is None:
            out = ((k, iter([gd.SerializeToString(deterministic=True)])) for k, gd in self.partitions.items())
        return out if pieces else ((k, b"".join(chunks)) for k, chunks in out)

    def device_of(self, name: str) -> str | None:
        """The partition a node (original or added) is in, or None if the run does not execute it."""
        if self._device_of is None:
            self._device_of = {n: key for key, names in self.nodes.items() for n in names}
        return self._device_of.get(name)

    @property
    def transfers(self) -> list[JsonDict]:
        """One dict per transfer (:meth:`TransferTable.records`), for the readers that walk them."""
        return self.table.records()

    def transfers_at(self, level: str) -> list[JsonDict]:
        return [t for t in self.transfers if t["level"] == level]

    def traffic(self) -> list[JsonDict]:
        """Per (src_device, dst_device): transfers, control transfers and bytes per step."""
        out: dict[tuple[str, str], JsonDict] = {}
        for t in self.transfers:
            row = out.get((t["src_device"], t["dst_device"]))
            if row is None:
                row = out[(t["src_device"], t["dst_device"])] = {
                    "src_device": t["src_device"], "dst_device": t["dst_device"], "level": t["level"],
                    "transfers": 0, "control": 0, "bytes": 0, "unknown_bytes": 0}
            row["transfers"] += 1
            if t["slot"] == "control":
                row["control"] += 1
            if t["bytes"] is None:
                row["unknown_bytes"] += 1
            else:
                row["bytes"] += t["bytes"]
        return [out[k] for k in sorted(out)]

    def to_json(self, columns: bool = False) -> JsonDict:
        """``placeviz.partition/1`` without file names (the CLI writes those). ``columns``: the
        transfers as :meth:`TransferTable.json_value` (the same JSON text, written without a dict
        per transfer by :func:`placeviz.commands.output.to_json_pieces`), else as dicts."""
        return {
            "schema": SCHEMA, "level": self.level, "session": self.session,
            "client_device": self.client_device, "fetches": self.fetches, "targets": self.targets,
            "feeds": self.feeds, "node_count": self.node_count,
            "partitions": [{"device": k, "nodes": len(ids), "original_nodes": self._builder.original_count(ids)}
                           for k, ids in self._node_arrays().items()],
            "transfers": self.table.json_value() if columns else self.transfers, "replicated": self.replicated,
            "moved": self.moved,
            "control_loops": self.control_loops, "notes": self.notes,
        }

    def __repr__(self) -> str:
        return (f"<PartitionResult level={self.level} nodes={self.node_count} "
                f"transfers={len(self.table)}>")


# ------------------------------------------------------------------------------------ partitioner
def partition(graph: Graph, devices: list[str], *, fetches: Iterable[str] = (), targets: Iterable[str] = (),
              feeds: Iterable[str] = (), level: str = "device", session: str = "master",
              replicate_constants: bool = True, client_device: str | None = None, op_table: OpTable | None = None,
              incarnation: Callable[[str], int] | None = None, materialize: bool = False,
              attr_keys: AttrKeys | None = None) -> PartitionResult:
    """Partition one run of a placed graph as TF's distributed runtime does (module docstring).

    ``devices``: the full runtime device of every node of ``graph`` (``PlacementResult.placement.
    devices`` for ``PlacementResult.graph``). ``fetches``/``feeds``: tensor names; ``targets``: op
    names; none of the three: the whole graph, without client nodes. ``level``: ``"device"`` (one
    partition per device, after the task split and the per-task device split) or ``"task"``.
    ``session``: ``"master"`` (distributed runtime, two levels, ``_S``/``_G`` names) or
    ``"direct"`` (one split by device, ``/_n`` names, as DirectSession and graph_partition_test).
    ``client_device``: where client feeds/fetches live (default: CPU:0 of ``/job:worker/task:0``,
    else of ``/job:localhost/task:0``, else of the first task). ``incarnation(device)``: the
    ``send_device_incarnation`` attr (default 1, DirectSession's; TF's distributed runtime uses a
    random number per device). ``materialize``: build the GraphDefs now (else on first access of
    :attr:`PartitionResult.partitions`). ``attr_keys``: the op-fact attr keys of ``graph``'s
    nodes as the placer read them (``PlacementResult.placement.attr_keys``): nodes with equal op
    facts and device type then share one memory-types row (without them each node has its own:
    the same partitions, more time).

    Each transfer dict: ``src`` (original node), ``slot`` (int, or ``"control"``), ``src_device``,
    ``dst_device``, ``dtype`` (e.g. ``float32``), ``shape`` (list, None for unknown dims, or None),
    ``bytes`` per step (None when the shape or dtype size is unknown; 0 for control), ``level``
    (``task``: across tasks, ``device``: inside a task), ``send``/``recv`` (node names),
    ``send_op``/``recv_op``, ``tensor_name``, ``dst`` (the first consumer).

    Raises :class:`~placeviz.prune.PruneError` for unknown names, :class:`PartitionError` for a
    node without a complete device, a node missing inputs, or a cross-device loop without a
    ``LoopCond``.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if session not in SESSIONS:
        raise ValueError(f"session must be one of {SESSIONS}, got {session!r}")
    if session == "direct" and level != "device":
        raise ValueError("session='direct' partitions by device only")
    if len(devices) != len(graph):
        raise ValueError(f"{len(devices)} devices for {len(graph)} nodes")
    if op_table is None:
        from placeviz.ops import load_op_table

        op_table = load_op_table()
    run = parse_run(graph, fetches, targets, feeds)
    was_enabled = gc.isenabled()
    gc.disable()  # many small objects, no cycles: collector passes only cost time
    try:
        p = _Partitioner(graph, devices, op_table, session, incarnation or (lambda _d: 1), attr_keys)
        p.prepare(run, client_device)
        if replicate_constants:
            p.replicate_constants()
        p.control_flow()
        p.check_complete()
        if session == "direct":
            p.split(2)
            final = 2
        else:
            p.split(0)
            if level == "device":
                p.split(1)
            final = 1 if level == "device" else 0
        result = p.result(final, level)
        if materialize:
            _ = result.partitions
    finally:
        if was_enabled:
            gc.enable()
    return result


class _Partitioner(_GraphDefs, _GraphPartition, _ConstReplication, _Subgraph):
    """Every step of :func:`partition` (one mixin per TF file, module docstring) and the result."""

    def result(self, final_level: int, level: str) -> PartitionResult:
        self.final_level = final_level
        run = self.run
        names = self.names
        result = PartitionResult(
            level=level, session=self.session,
            client_device=self.client_device if (run.fetches or run.feeds) else None,
            transfers=self.transfers, replicated=self.replicated, moved=self.moved,
            control_loops=self.control_loops, node_count=int(self.keep_np.sum()),
            fetches=[f"{names[i]}:{k}" for i, k in run.fetches], targets=[names[i] for i in run.targets],
            feeds=[f"{names[i]}:{k}" for i, k in run.feeds], builder=self,
        )
        functions = {f.signature.name for f in self.graph.library.function}
        lowered = sorted(op for op in self.op_index if op in LOWERED_OPS or op in functions)
        if lowered:
            kept = [op for op in lowered if self.nodes_with_op([op])]
            if kept:
                result.notes.append(
                    f"ops {', '.join(kept)} are partitioned as single nodes; TF's runtime first lowers or "
                    "inlines them into their bodies' nodes, so its partitions hold more nodes and transfers")
        return result

    def node_arrays(self) -> dict[str, I64Array]:
        """Partition key -> node ids (original and added) in GraphDef order (int64 arrays)."""
        import numpy as np

        devs = self.devs
        n = self.n
        kept = np.nonzero(self.keep_np)[0].astype(np.int64)
        by_task = self.final_level == 0
        keys_of_dev = np.asarray((devs.task if by_task else list(range(len(devs.names)))) + [-1], dtype=np.int64)
        key_names = devs.task_names if by_task else devs.names
        ids, parts = kept, keys_of_dev[self.dev_np[kept]]
        majors, minors = self.rank[kept], np.zeros(len(kept), dtype=np.int64)
        if self.added:
            m = len(self.added)
            ids = np.concatenate([ids, np.arange(n, n + m, dtype=np.int64)])
            parts = np.concatenate([parts, keys_of_dev[np.fromiter((a.dev for a in self.added), dtype=np.int64,
                                                                   count=m)]])
            majors = np.concatenate([majors, np.fromiter((a.major for a in self.added), dtype=np.int64, count=m)])
            minors = np.concatenate([minors, np.fromiter((a.minor for a in self.added), dtype=np.int64, count=m)])
        order = np.lexsort((minors, majors, parts))
        ids, parts = ids[order], parts[order]
        bounds = (np.nonzero(np.diff(parts))[0] + 1).tolist()
        out: dict[str, I64Array] = {}
        for lo, hi in zip([0] + bounds, bounds + [len(ids)], strict=True):
            if hi > lo:
                out[key_names[int(parts[lo])]] = ids[lo:hi]
        return {k: out[k] for k in sorted(out)}

    def original_count(self, ids: I64Array) -> int:
        """How many of ``ids`` (in GraphDef order: originals and added nodes mixed) are original."""
        return int((ids < self.n).sum())

    def names_of(self, ids: list[int]) -> list[str]:
        names, added, n = self.names, self.added, self.n
        return [names[i] if i < n else added[i - n].name for i in ids]
