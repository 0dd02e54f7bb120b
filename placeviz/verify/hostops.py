"""Ops a verify run would execute that touch the host's file system or run code (TF-free, static).

``placeviz verify`` runs the model's ops on real TF servers on this machine, and a graph file is
untrusted input (it comes from a pull request). A TF op runs with the rights of the process that
runs it: ``WriteFile`` writes any path the user can write (``tensorflow/core/kernels/io_ops.cc``),
``PyFunc`` calls Python (``tensorflow/python/ops/script_ops.py``). So before anything starts,
:func:`find` walks exactly what the run executes and reports every op that reaches the disk or
runs code; :func:`placeviz.commands.verify.run` refuses them unless ``--allow-io``.

What the run executes is the reverse closure (:class:`placeviz.sync.reach.Reach`, as TF prunes a
graph to the closure of the fetches and targets of ``Session.run``, fed tensors cutting it) of
everything the coordinator runs (:func:`run_targets`): the init, local init, chief init and init-tokens ops, the sync op and
what the chief's sync run fetches, every worker's train op, fetches, local init ops and input
queue runners (enqueue, close and cancel ops), the variables read before and after and the
accumulators' appliers (the stale-gradient probe). The Saver's ``save/SaveV2`` of a TF1 graph is
therefore no finding: no verify run executes it. Neither is an op behind a tensor every worker
run feeds (``--feeds FILE.npz`` may feed any tensor, e.g. the output of a ``py_func`` input
stage): TF prunes it from those runs (``tensorflow/core/graph/subgraph.cc``), so it is flagged only
if a run without those feeds (an init op, a queue runner) reaches it. Inside that closure:

* the op types of :data:`HOST_OPS` (kept by what reaches the disk, from TF's op registrations:
  ``core/ops/io_ops.cc`` (``WriteFile``, ``ReadFile``, ``MatchingFiles``, ``Save*``, ``Restore*``,
  ``MergeV2Checkpoints``, the ``*Reader`` ops that open the files their queue names),
  ``script_ops.cc`` (``PyFunc``, ``PyFuncStateless``, ``EagerPyFunc``), ``summary_ops.cc`` (the
  summary *writers*: the ``*Summary`` ops that only serialize a ``Summary`` proto are harmless),
  ``dataset_ops.cc``/``experimental_dataset_ops.cc`` (datasets that read, list or write files),
  ``lookup_ops.cc`` (``InitializeTableFromTextFile``), ``checkpoint_ops.cc``
  (``LoadAndRemapMatrix``, ``GenerateVocabRemapping``), ``array_ops.cc`` (``ImmutableConst``
  memory-maps a file), ``data_flow_ops.cc`` (``RecordInput``), ``filesystem_ops.cc``);
* ops that touch files only with some attr or input (:func:`_conditional`): ``PrintV2`` with an
  ``output_stream`` of ``file://...`` (``core/kernels/logging_ops.cc``), the tfdbg ``Debug*`` ops
  with ``debug_urls`` (``core/ops/debug_ops.cc``; ``file://`` dumps to disk), ``DecodeProtoV2`` /
  ``EncodeProto`` with a ``descriptor_source`` file, ``CacheDataset`` with a file name that is not
  a constant empty string (``Dataset.cache(filename)``);
* op types the op-facts table (:mod:`placeviz.ops`, every op TF registers) does not know: a
  custom-op library's, whose code verify cannot judge;
* the same, recursively, in every library function a node of the closure calls (an attr of type
  ``func``/``list(func)``: ``PartitionedCall``, ``If``/``While``, ``MapDataset``'s ``f``..., or a
  node whose op *is* a library function), and in the functions' gradient functions.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from placeviz.sync.reach import Reach

WRITES, READS, LISTS, CODE = "writes files", "reads files", "lists directories", "runs Python code"

HOST_OPS: dict[str, str] = {
    # core/ops/io_ops.cc
    "WriteFile": WRITES, "ReadFile": READS, "MatchingFiles": LISTS,
    "Save": WRITES, "SaveV2": WRITES, "SaveSlices": WRITES, "MergeV2Checkpoints": WRITES,
    "Restore": READS, "RestoreV2": READS, "RestoreSlice": READS, "DTensorRestoreV2": READS,
    "TFRecordReader": READS, "TFRecordReaderV2": READS, "TextLineReader": READS, "TextLineReaderV2": READS,
    "FixedLengthRecordReader": READS, "FixedLengthRecordReaderV2": READS, "WholeFileReader": READS,
    "WholeFileReaderV2": READS, "LMDBReader": READS,
    # core/ops/script_ops.cc
    "PyFunc": CODE, "PyFuncStateless": CODE, "EagerPyFunc": CODE,
    # core/ops/summary_ops.cc: the writers (event files, a database)
    "SummaryWriter": WRITES, "CreateSummaryFileWriter": WRITES, "CreateSummaryDbWriter": WRITES,
    "FlushSummaryWriter": WRITES, "CloseSummaryWriter": WRITES, "WriteSummary": WRITES, "ImportEvent": WRITES,
    "WriteScalarSummary": WRITES, "WriteHistogramSummary": WRITES, "WriteImageSummary": WRITES,
    "WriteAudioSummary": WRITES, "WriteGraphSummary": WRITES, "WriteRawProtoSummary": WRITES,
    "StatsAggregatorSetSummaryWriter": WRITES,
    # core/ops/dataset_ops.cc, experimental_dataset_ops.cc
    "TFRecordDataset": READS, "TFRecordDatasetV2": READS, "TextLineDataset": READS,
    "FixedLengthRecordDataset": READS, "FixedLengthRecordDatasetV2": READS, "CSVDataset": READS,
    "CSVDatasetV2": READS, "ExperimentalCSVDataset": READS, "LMDBDataset": READS, "ExperimentalLMDBDataset": READS,
    "SqlDataset": READS, "ExperimentalSqlDataset": READS, "MatchingFilesDataset": LISTS,
    "ExperimentalMatchingFilesDataset": LISTS, "LoadDataset": READS, "SnapshotDatasetReader": READS,
    "SnapshotNestedDatasetReader": READS, "SnapshotChunkDataset": READS, "ListSnapshotChunksDataset": READS,
    "SnapshotDataset": WRITES, "SnapshotDatasetV2": WRITES, "SaveDataset": WRITES, "SaveDatasetV2": WRITES,
    "DatasetToTFRecord": WRITES, "ExperimentalDatasetToTFRecord": WRITES, "DistributedSave": WRITES,
    "DatasetFromGraph": "runs a graph it is given at run time",
    # core/ops/lookup_ops.cc, checkpoint_ops.cc, array_ops.cc, data_flow_ops.cc, filesystem_ops.cc
    "InitializeTableFromTextFile": READS, "InitializeTableFromTextFileV2": READS,
    "LoadAndRemapMatrix": READS, "GenerateVocabRemapping": READS, "ImmutableConst": READS, "RecordInput": READS,
    "FileSystemSetConfiguration": "changes the file system configuration",
    # compiler/mlir/quantization: calibration dumps
    "DumpTensor": WRITES, "CalibrationStatisticsSaver": WRITES,
}
"""Op type -> what it does to the host, for ops that always touch the file system or run code."""

_DEBUG_URL_OPS = frozenset({"DebugIdentity", "DebugIdentityV2", "DebugIdentityV3", "DebugNanCount",
                            "DebugNumericSummary"})
_DESCRIPTOR_OPS = frozenset({"DecodeProtoV2", "EncodeProto"})
_CACHE_OPS = frozenset({"CacheDataset", "CacheDatasetV2"})
CONDITIONAL = frozenset({"PrintV2"}) | _DEBUG_URL_OPS | _DESCRIPTOR_OPS | _CACHE_OPS

_FUNC_ATTR_TYPES = ("func", "list(func)")


@dataclass(frozen=True)
class HostOp:
    """One op of the run that touches the host: where it is and what reaches it."""

    node: str  # the node (in a library function: the function's node)
    op: str
    what: str  # "writes files", "reads files", ...
    role: str  # what the run target is: "the worker train op", "an init op" ...
    target: str  # the run target whose closure holds it
    function: str | None = None  # the library function whose body holds ``node``
    caller: str | None = None  # the node of the graph that calls it (directly or through other functions)

    def where(self) -> str:
        inside = f" in function '{self.function}' called by node '{self.caller}'" if self.function else ""
        return f"node '{self.node}'{inside}, run by {self.role} '{self.target}'"


_FUNC_OPS: dict[int, frozenset[str]] = {}


def _graph_function_ops(table) -> frozenset[str]:
    """Op types with an attr of type ``func`` or ``list(func)`` (they call library functions), from
    the op table's attr lists (once per table)."""
    cached = _FUNC_OPS.get(id(table))
    if cached is None:
        cached = _FUNC_OPS[id(table)] = frozenset(
            op for op, raw in table._raw.items()
            if any(len(a) > 1 and a[1] in _FUNC_ATTR_TYPES for a in raw.get("attrs", ())))
    return cached


def _called(node_def) -> list[str]:
    """Library function names a NodeDef's attrs call (``func`` and ``list(func)`` values)."""
    out = []
    for value in node_def.attr.values():
        kind = value.WhichOneof("value")
        if kind == "func":
            out.append(value.func.name)
        elif kind == "list":
            out.extend(f.name for f in value.list.func)
    return [n for n in out if n]


def _conditional(node_def, filename_is_empty) -> str | None:
    """What a node of :data:`CONDITIONAL` does to the host given its attrs (None: nothing)."""
    op, attr = node_def.op, node_def.attr
    if op == "PrintV2":
        stream = attr["output_stream"].s.decode("utf-8", "replace") if "output_stream" in attr else "stderr"
        return f"{WRITES} (output_stream {stream})" if stream.startswith("file://") else None
    if op in _DEBUG_URL_OPS:
        urls = [u.decode("utf-8", "replace") for u in attr["debug_urls"].list.s] if "debug_urls" in attr else []
        urls = [u for u in urls if u]
        return f"{WRITES} (debug_urls {urls[0]})" if urls else None
    if op in _DESCRIPTOR_OPS:
        source = attr["descriptor_source"].s.decode("utf-8", "replace") if "descriptor_source" in attr else ""
        return None if source in ("", "local://") or source.startswith("bytes://") else \
            f"{READS} (descriptor_source {source})"
    if op in _CACHE_OPS:
        return None if filename_is_empty() else f"{WRITES} (a cache file, unless its file name is empty)"
    return None


class _Functions:
    """The graph's function library: which host ops each function's body (and its callees) runs."""

    def __init__(self, library, table):
        self.defs = {f.signature.name: f for f in library.function} if library is not None else {}
        self.gradients = {g.function_name: g.gradient_func for g in library.gradient} if library is not None else {}
        self.table = table
        self._memo: dict[str, list[tuple[str, str, str, str]]] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.defs

    def host_ops(self, name: str) -> list[tuple[str, str, str, str]]:
        """(function, node, op, what) of every host op ``name`` runs, its callees' too (depth first)."""
        if name in self._memo:
            return self._memo[name]
        self._memo[name] = []  # a recursive function: what its other nodes add is enough
        out: list[tuple[str, str, str, str]] = []
        fdef = self.defs.get(name)
        if fdef is None:
            return out
        for nd in fdef.node_def:
            what = verdict(nd, self.table, self, lambda: False)
            if what is not None:
                out.append((name, nd.name, nd.op, what))
            for callee in [nd.op] * (nd.op in self.defs) + _called(nd):
                out.extend(self.host_ops(callee))
        grad = self.gradients.get(name)
        if grad:
            out.extend(self.host_ops(grad))
        self._memo[name] = out
        return out


def verdict(node_def, table, functions: _Functions, filename_is_empty) -> str | None:
    """What one node does to the host by itself (not through functions it calls), or None."""
    op = node_def.op
    what = HOST_OPS.get(op)
    if what is not None:
        return what
    if op in CONDITIONAL:
        return _conditional(node_def, filename_is_empty)
    if op not in table and op not in functions:
        return "is no TensorFlow op (a custom-op library's: verify cannot tell what it does)"
    return None


PROGRAM_ROLES = frozenset({"an init op", "the chief init op", "the init tokens op", "the sync op",
                           "the worker train op", "a local init op", "an input queue runner"})
"""What a TF1 program itself runs; the other targets are what verify adds to collect evidence."""


FED_ROLES = frozenset({"the worker train op", "a tensor the worker run fetches", "the loss verify reads",
                       "the stale-gradient probe"})
"""The targets verify runs with the workers' feeds (``feed_dict``); the others are run unfed."""


def find(graph, targets: Iterable[tuple[str, str]], table=None, feeds: Iterable[str] = ()) -> list[HostOp]:
    """Every host op in the reverse closure of ``targets`` ((role, node or tensor name)) of ``graph``.

    ``feeds``: tensor names (``x`` or ``x:0``) fed in every run of the targets of
    :data:`FED_ROLES`; they cut those runs' closures as TF's pruning does (an op behind a fed
    tensor does not run; names the graph lacks are ignored, as verify's runs drop them).
    Ops the program's own targets (:data:`PROGRAM_ROLES`: train, init, sync ops...) reach come
    first, named after the nearest of those; then those only verify's evidence fetches reach;
    each group in breadth-first order from its targets, the unfed runs' before the fed ones'."""
    if table is None:
        from placeviz.ops import load_op_table

        table = load_op_table()
    roles: dict[int, tuple[str, str]] = {}
    for role, name in targets:
        if not name:
            continue
        op_name = name[1:] if name.startswith("^") else name.split(":", 1)[0]
        i = graph.index.get(op_name)
        if i is not None:
            roles.setdefault(i, (role, op_name))
    fed = _fed(graph, feeds)
    functions = _Functions(graph.library, table)
    callers = _graph_function_ops(table)
    suspects = HOST_OPS.keys() | CONDITIONAL
    out: list[HostOp] = []
    done: set[int] = set()
    program = [i for i, (role, _n) in roles.items() if role in PROGRAM_ROLES]
    for roots in (program, list(roles)):
        if fed:
            runs = [([i for i in roots if roles[i][0] not in FED_ROLES], []),
                    ([i for i in roots if roles[i][0] in FED_ROLES], fed)]
        else:
            runs = [(roots, [])]
        for run_roots, run_feeds in runs:
            reach = Reach(graph, run_roots, run_feeds)
            for i in reach.order:
                op = graph.ops[i]
                if i in done or (op not in suspects and op not in callers and op in table):
                    continue
                done.add(i)
                node_def = graph.node_def(i)
                root = i
                while reach.parent[root] >= 0:
                    root = reach.parent[root]
                role, target = roles[root]
                what = verdict(node_def, table, functions, lambda i=i: _const_empty_string(graph, i, 1))
                if what is not None:
                    out.append(HostOp(graph.names[i], op, what, role, target))
                for callee in [op] * (op in functions) + _called(node_def):
                    for function, node, fop, fwhat in functions.host_ops(callee):
                        out.append(HostOp(node, fop, fwhat, role, target, function=function,
                                          caller=graph.names[i]))
    return out


def _fed(graph, feeds: Iterable[str]) -> list[tuple[int, int]]:
    """``(node id, output index)`` of the fed tensor names ``graph`` has (a malformed one cuts nothing)."""
    from placeviz.partition.subgraph import PruneError, parse_tensor_name

    out = []
    for text in feeds:
        try:
            name, slot = parse_tensor_name(text, "feed")
        except PruneError:
            continue
        i = graph.index.get(name)
        if i is not None and (i, slot) not in out:
            out.append((i, slot))
    return out


def _const_empty_string(graph, i: int, slot: int) -> bool:
    """Input ``slot`` of node ``i`` is a ``Const`` holding the empty string (``Dataset.cache()``'s
    in-memory cache: ``filename=""``, ``tensorflow/python/data/ops/cache_op.py``)."""
    data = [src for src, s in graph.inputs_of(i) if s >= 0]
    if len(data) <= slot or graph.ops[data[slot]] != "Const":
        return False
    tensor = graph.node_def(data[slot]).attr["value"].tensor
    values = list(tensor.string_val)
    return values in ([], [b""]) and not tensor.tensor_content


def run_targets(plan) -> tuple[list[tuple[str, str]], dict[int, list[tuple[str, str]]]]:
    """(what the chief's graph runs, worker task -> what it runs in its own graph) as (role, name)
    pairs, from a :class:`placeviz.verify.plan.RunPlan` whose ``per_worker`` is set: the chief's
    graph also stands for every worker that has no graph of its own."""
    chief: list[tuple[str, str]] = []
    chief += [("an init op", o) for o in plan.init_ops]
    chief += [("the chief init op", plan.chief_init_op)] if plan.chief_init_op else []
    chief += [("the init tokens op", o) for o in plan.init_tokens_ops]
    chief += [("the sync op", plan.sync_op)] if plan.sync_op else []
    chief += [("a tensor the sync run fetches", t) for t in plan.sync_fetches]
    chief += [("a variable verify reads", v) for v in plan.variables]
    chief += [("the token queue", plan.token_queue)] if plan.token_queue else []
    chief += [("the loss verify reads", plan.loss)] if plan.loss else []
    for a in plan.accumulators:
        chief += [("an accumulator", a.name)] + [("the stale-gradient probe", o) for o in a.apply_ops]
    own: dict[int, list[tuple[str, str]]] = {}
    for run in plan.per_worker:
        targets = [("the worker train op", o) for o in run["train_ops"]]
        targets += [("a tensor the worker run fetches", t) for t in run["fetches"]]
        targets += [("a local init op", o) for o in run["local_init_ops"]]
        for qr in run["queue_runners"]:
            targets += [("an input queue runner", o) for o in qr.get("enqueue_ops", [])]
            targets += [("an input queue runner", qr[k]) for k in ("close_op", "cancel_op") if qr.get(k)]
        if run["source"] == "the chief's graph":
            chief += targets
        else:
            own[run["task"]] = targets
    return chief, own


def refusal(found: HostOp, source: str, more: int, servers: bool) -> str:
    """The one-line error for the first host op of a run (``more``: how many others there are)."""
    machine = "the machines of your --servers" if servers else "this machine"
    effect = found.what if found.what.startswith("is no") else f"{found.what} on {machine}"
    others = f" ({more} more such op{'s' if more > 1 else ''})" if more else ""
    return (f"{source}: the verify run would execute {found.op} ({found.where()}): it {effect}{others}; verify "
            "refuses ops that touch the file system or run code unless --allow-io")
