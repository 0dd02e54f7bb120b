"""What placeviz can say about a graph: size, ops, devices, variables.

``analyze`` is a pure function from a loaded :class:`~placeviz.io.Model` to an :class:`Analysis`.
The report has one section per pipeline stage; stages that did not run (placement, sync pass,
partitioning) are ``None`` so that later stages slot in without changing the existing fields.

An :class:`Analysis` holds typed results: the graph's own facts, and what the later stages of
:func:`placeviz.pipeline.run_pipeline` produced (:class:`PlacementStage`, :class:`SyncStage`,
:class:`TrafficStage`, each holding the stage's result objects). The JSON form
(``Analysis.to_json``, the documented ``placeviz.analysis/1`` schema) and the ``placement``,
``sync`` and ``partition`` dicts the text report and the HTML report read are *views* of them,
computed once when first asked for; no stage writes into a dict of the report.
"""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass, field
from itertools import compress, islice
from typing import TYPE_CHECKING

from placeviz.errors import GraphError, LoadError
from placeviz.graph import CONTROL, Graph
from placeviz.io import Model
from placeviz.limits import overflows, tensor_bytes
from placeviz.op_kinds import OTHER_STATE_OPS, VARIABLE_OPS
from placeviz.protos import AttrValue, dtype_name, dtype_size

if TYPE_CHECKING:  # the later stages' result types (those modules import this one's users)
    from placeviz.agreement import Agreement
    from placeviz.partition import PartitionResult
    from placeviz.placement import PlacementResult
    from placeviz.sync.detect import SyncMachinery
    from placeviz.sync.proof import SyncProof

SCHEMA = "placeviz.analysis/1"

UNPLACED_NAMES_SHOWN = 50


@dataclass
class VariableInfo:
    """One variable: its op, dtype, static shape and size, as declared in the graph."""

    name: str
    op: str
    dtype: str
    shape: list[int | None] | None  # None: unknown rank; None entries: unknown dims
    bytes: int | None  # None when the shape is not fully known
    trainable: bool | None  # None when the model carries no collections
    device: str  # as requested in the GraphDef
    partition_of: str | None = None  # full variable name for partitioned variables
    slot_of: str | None = None  # an optimizer slot: the variable it belongs to (see find_slots)
    slots: list[dict] = field(default_factory=list)  # this variable's slots: {"name", "slot", "bytes"}
    placed_device: str | None = None  # full runtime device after the placer; None without placement
    placed_by: str | None = None  # why it landed there (the setter's rule, or the placer's reason)

    @property
    def slot_bytes(self) -> int | None:
        """Bytes of this variable's optimizer slots; None when one of them has an unknown size."""
        sizes = [s["bytes"] for s in self.slots]
        return None if None in sizes else sum(sizes)

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PlacementStage:
    """The placement stage as the report sees it: TF's placement of the graph, or why it failed.

    ``result``: :class:`placeviz.placement.PlacementResult` (None when ``error``); ``ps_job``: the
    setter's PS job (``SetterConfig.ps_job``), whose tasks the balance compares; ``nodes_added``:
    the per-device group NoOps the setter replay added (:func:`placeviz.pipeline.added_nodes_note`).
    """

    result: PlacementResult | None
    error: str | None = None
    ps_job: str = "ps"
    nodes_added: int = 0

    def to_json(self, variables: list[VariableInfo], variable_ids: list[int] | None = None) -> dict:
        """The ``placement`` section (:func:`placeviz.placement.placement_summary`); variable bytes
        include the optimizer slots, which TF colocates with their variable. ``variable_ids``: the
        variables' node ids in the graph as loaded, when known (:func:`placed_ids`)."""
        if self.error is not None or self.result is None:
            return {"stage": "placed", "error": self.error or "not placed"}
        from placeviz.placement import placement_summary

        ids = placed_ids(self.result.placement.graph, [v.name for v in variables], variable_ids or [])
        out = placement_summary(self.result, ids, [v.bytes for v in variables],
                                [v.slot_of is not None for v in variables], self.ps_job)
        out["nodes_added"] = self.nodes_added
        return out


@dataclass
class SyncStage:
    """SyncReplicas machinery found in a graph (:func:`placeviz.sync.detect`) and its proof
    (:func:`placeviz.sync.prove`); its view is the ``sync`` section."""

    machinery: SyncMachinery
    """:class:`placeviz.sync.detect.SyncMachinery`."""
    proof: SyncProof
    """:class:`placeviz.sync.proof.SyncProof` of :attr:`machinery`."""

    def to_json(self) -> dict:
        from placeviz.sync import sync_section

        return sync_section(self.machinery, self.proof)


@dataclass
class TrafficStage:
    """One partitioned step as the report sees it: what ran, at which level, and the partitions
    (:class:`placeviz.partition.PartitionResult` of :attr:`graph`), or why partitioning failed."""

    level: str
    run: dict
    """``{"fetches", "targets", "feeds", "what"}``: the step partitioned."""
    graph: Graph | None = None
    partitions: PartitionResult | None = None
    batch_size: int | None = None
    """``--batch-size``: transfers with an unknown leading dimension were sized with it."""
    error: str | None = None

    def to_json(self) -> dict:
        """The ``partition`` section: :func:`placeviz.traffic.traffic_summary` of the step."""
        if self.error is not None or self.graph is None or self.partitions is None:
            return {"level": self.level, "error": self.error or "not partitioned", "run": self.run}
        from placeviz.traffic import traffic_summary

        return {"level": self.level, **traffic_summary(self.graph, self.partitions, self.run, self.batch_size)}


@dataclass
class Analysis:
    """The result of ``analyze`` and of the pipeline's later stages; see the README for the JSON
    schema and the module docstring for the sections (typed stage results, dict views of them)."""

    model: str
    kind: str
    node_count: int
    data_edge_count: int
    control_edge_count: int
    op_histogram: dict[str, int]
    requested_devices: dict[str, int]  # device string as written -> node count ('' = none)
    unplaced_count: int
    unplaced_sample: list[str]
    variables: list[VariableInfo]
    other_state: list[dict]  # {"name", "op", "device"}
    collections: list[str]
    train_ops: list[str]
    producer: int
    function_count: int
    placement_stage: PlacementStage | None = None  # the placement stage (None: not run)
    sync_stage: SyncStage | None = None  # sync machinery and proof of the graph as loaded (None: none found)
    traffic_stage: TrafficStage | None = None  # one partitioned step (None: not partitioned)
    notes: list[str] = field(default_factory=list)
    agreement_result: Agreement | None = None
    """Between-graph replication: the tasks' own graphs compared (:func:`placeviz.agreement.check_agreement`)."""
    explain: list[dict] | None = None
    """``--explain NODE``: :func:`placeviz.placement.explain.explain_node` answers, shown in the
    ``placement`` section."""
    _views: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    variable_ids: list[int] = field(default_factory=list, repr=False, compare=False)
    """The node id of each of :attr:`variables` in the graph as loaded (empty: not known); not in the JSON."""

    def _view(self, key: str, make) -> dict:
        """A section's JSON view, made once (the stages' results do not change after the pipeline)."""
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = make()
        return view

    @property
    def placement(self) -> dict | None:
        """The ``placement`` section: a view of :attr:`placement_stage` (and :attr:`explain`)."""
        stage = self.placement_stage
        if stage is None:
            return None
        view = self._view("placement", lambda: stage.to_json(self.variables, self.variable_ids))
        return view if self.explain is None else {**view, "explain": self.explain}

    @property
    def sync(self) -> dict | None:
        """The ``sync`` section: a view of :attr:`sync_stage`."""
        stage = self.sync_stage
        return None if stage is None else self._view("sync", stage.to_json)

    @property
    def agreement(self) -> dict | None:
        """The ``agreement`` section: a view of :attr:`agreement_result`."""
        result = self.agreement_result
        return None if result is None else self._view("agreement", result.to_json)

    @property
    def partition(self) -> dict | None:
        """The ``partition`` section: a view of :attr:`traffic_stage`."""
        stage = self.traffic_stage
        return None if stage is None else self._view("partition", stage.to_json)

    @property
    def variable_bytes(self) -> int:
        return sum(v.bytes or 0 for v in self.variables)

    @property
    def unknown_size_variables(self) -> int:
        """Variables whose size is unknown: :attr:`variable_bytes` leaves them out (a lower bound)."""
        return sum(1 for v in self.variables if v.bytes is None)

    def variable_bytes_by_device(self) -> dict[str, int]:
        out: Counter = Counter()
        for v in self.variables:
            out[v.device] += v.bytes or 0
        return dict(sorted(out.items()))

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "model": self.model,
            "kind": self.kind,
            "graph": {
                "nodes": self.node_count,
                "data_edges": self.data_edge_count,
                "control_edges": self.control_edge_count,
                "producer": self.producer,
                "functions": self.function_count,
            },
            "ops": self.op_histogram,
            "requested_devices": [
                {"device": d, "nodes": n} for d, n in self.requested_devices.items()
            ],
            "unplaced": {"count": self.unplaced_count, "names": self.unplaced_sample},
            "variables": [v.to_json() for v in self.variables],
            "variable_bytes": {
                "total": self.variable_bytes,
                "by_requested_device": self.variable_bytes_by_device(),
                "unknown_size_variables": self.unknown_size_variables,
            },
            "other_state": self.other_state,
            "collections": self.collections,
            "train_ops": self.train_ops,
            "placement": self.placement,
            "sync": self.sync,
            "partition": self.partition,
            "agreement": self.agreement,
            "notes": self.notes,
        }


def analyze(model: Model, *, with_sync: bool = True) -> Analysis:
    """Summarise a loaded model as it is (no placement yet).

    ``with_sync=False`` leaves the ``sync`` section to the caller (the pipeline fills it from the
    detection and proof it runs anyway, instead of running them twice on the same graph).
    """
    graph = model.graph
    n = len(graph)
    try:
        _ = graph.topological_order  # validates: a cycle other than a while loop is an error
    except GraphError as e:
        raise LoadError(model.source, str(e)) from None
    import numpy as np

    from placeviz.placement.scopes import OpIndex

    # The passes over every node or edge run in C (numpy, Counter, compress); Python sees the
    # variables and the other state only. The ops are counted and searched as codes (the C
    # reader's, when it read the graph: no pass over the op strings at all).
    control_edges = int(np.count_nonzero(graph.edge_arrays[2] == CONTROL))
    op_index = OpIndex.of(graph)
    devices = Counter(graph.devices)
    unplaced_count = devices.get("", 0)  # the nodes requesting no device; their names are not listed
    trainable = set(model.collections.trainable_variables) if model.collections.present else None
    overflowed: list[str] = []
    variable_ids = op_index.ids(VARIABLE_OPS).tolist()
    variables = _variable_infos(graph, variable_ids, trainable, model.collections.partitioned, overflowed)
    _link_slots(variables, find_slots(graph, variable_ids))
    other_state = [{"name": graph.names[i], "op": graph.ops[i], "device": graph.devices[i]}
                   for i in op_index.ids(OTHER_STATE_OPS).tolist()]
    sync = detect_and_prove(graph, model.collections if model.collections.present else None) if with_sync else None
    notes = []
    if not model.collections.present:
        notes.append("no MetaGraphDef collections: which variables are trainable is unknown")
    if overflowed:
        notes.append(_overflow_note(overflowed))
    return Analysis(
        model=model.source,
        kind=model.kind,
        node_count=n,
        data_edge_count=graph.num_edges - control_edges,
        control_edge_count=control_edges,
        op_histogram=_op_histogram(op_index),
        requested_devices=dict(sorted(devices.items(), key=lambda kv: (kv[0] == "", kv[0]))),
        unplaced_count=unplaced_count,
        unplaced_sample=list(islice(compress(graph.names, map(operator.not_, graph.devices)), UNPLACED_NAMES_SHOWN)),
        variables=variables,
        other_state=other_state,
        collections=model.collections.names,
        train_ops=model.collections.train_ops,
        producer=_producer(model.graph),
        function_count=len(model.graph.library.function),  # graph.*: without parsing the whole GraphDef
        sync_stage=sync,
        notes=notes,
        variable_ids=variable_ids,
    )


def _op_histogram(op_index) -> dict[str, int]:
    """Nodes per op type, most first, then by op (the ``ops`` section), from the ops' codes
    (:class:`placeviz.placement.scopes.OpIndex`)."""
    import numpy as np

    counts = np.bincount(op_index.codes, minlength=max(op_index.first.values(), default=-1) + 1).tolist()
    return dict(sorted(((op, counts[code]) for op, code in op_index.first.items() if counts[code]),
                       key=lambda kv: (-kv[1], kv[0])))


def detect_and_prove(graph: Graph, collections=None) -> SyncStage | None:
    """The sync machinery of ``graph`` and its proof, or None when it has none.

    ``collections``: a :class:`placeviz.io.Collections` (optional); its trainable variables, when
    it names any, are the variables the proof holds to one update per step.
    """
    from placeviz.sync import detect, prove

    machinery = detect(graph, collections)
    if machinery is None:
        return None
    trainable = collections.trainable_variables if collections is not None else None
    return SyncStage(machinery, prove(graph, machinery, trainable=trainable or None))


def find_slots(graph: Graph, variables: list[int]) -> dict[str, tuple[str, str]]:
    """Optimizer slot variables: slot name -> (its primary variable, the slot's own name).

    TF builds a slot under ``colocate_with(primary)`` in the name scope ``primary.op.name + "/"``
    (``tensorflow/python/training/slot_creator.py``, ``create_slot``/``_create_slot_var``), so a
    slot is a variable whose ``_class`` names another variable ``P`` and whose name is ``P/<slot>``
    (``w/Adagrad``, ``w/Adam``, ``w/Adam_1``, ``w/Momentum``, ``w/ExponentialMovingAverage``).
    Adam's ``beta1_power`` is colocated with a variable too but is not named under it: it is the
    optimizer's own (non-slot) variable and stays a variable of its own.

    ``variables``: the variables' node ids (their ``_class`` groups are read by id: a look-up in
    the name index of a million-node graph costs a cache miss per variable).
    """
    all_names = graph.names
    names = {all_names[i] for i in variables}
    out: dict[str, tuple[str, str]] = {}
    get_groups = graph.colocation.get
    for i in variables:
        groups = get_groups(i)
        if not groups:
            continue
        name = all_names[i]
        for group in groups:
            primary = group[5:] if group.startswith("loc:@") else group
            if primary != name and primary in names and name.startswith(primary + "/"):
                out[name] = (primary, name[len(primary) + 1:])
                break
    return out


def _link_slots(variables: list[VariableInfo], slots: dict[str, tuple[str, str]]) -> None:
    """Link each slot to its primary; ``slots`` (:func:`find_slots`) is in the variables' order,
    so each primary's ``slots`` list is too."""
    if not slots:
        return
    by_name = {v.name: v for v in variables}
    for name, (primary, slot) in slots.items():
        v = by_name[name]
        v.slot_of = primary
        by_name[primary].slots.append({"name": name, "slot": slot, "bytes": v.bytes})


def attach_placement(report: Analysis, result) -> None:
    """Fill every variable's ``placed_device`` and ``placed_by`` from a
    :class:`placeviz.placement.PlacementResult`: the device is the one ``place --stage placed``
    writes for the node (the placer's full runtime name), the reason the setter's rule when the
    setter ran (``tensorflow/python/training/device_setter.py``), else the placer's
    (``tensorflow/core/common_runtime/placer.cc``)."""
    from placeviz.placement.placer import WHY_NAMES

    placement = result.placement
    graph, devices = placement.graph, placement.devices
    ids = placed_ids(graph, [v.name for v in report.variables], report.variable_ids)
    for v, i in zip(report.variables, ids, strict=True):
        if i < 0:
            continue
        v.placed_device = devices[i]
        v.placed_by = (result.setter.explain(i) if result.setter is not None
                       else f"requested {graph.devices[i] or '(no device)'}; {WHY_NAMES[placement.reason[i]]}")


def placed_ids(graph: Graph, names: list[str], guesses: list[int]) -> list[int]:
    """The node id in ``graph`` (the placed graph) of each of ``names`` (the variables; -1: not in
    it); ``guesses``: their ids in the graph as loaded (empty: unknown).

    Without looking every name up in ``graph``: the setter's graph answers lookups by renumbering
    the loaded graph's ids (:meth:`Graph.ids_of`), which for 15.6k variables at 200k nodes cost
    more than checking their old ids first (it once built a dict of every name for this alone:
    0.38 s at 1M nodes). The setter's graph keeps a node's id
    up to the first ``tf.group`` it splits (near the end of a model; ``placement/setter.py``
    ``_Split.result``), and names are unique in a graph, so where the node at a variable's old id
    has its name, that is its node; the others are looked up by :meth:`Graph.ids_of`.
    """
    all_names = graph.names
    n = len(all_names)
    if len(guesses) == len(names):
        out = [i if i < n and all_names[i] == name else -1 for name, i in zip(names, guesses, strict=True)]
    else:
        out = [-1] * len(names)
    if -1 in out:
        found = graph.ids_of({name for name, i in zip(names, out, strict=True) if i < 0})
        out = [i if i >= 0 else found.get(name, -1) for name, i in zip(names, out, strict=True)]
    return out


def _overflow_note(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (f"overflow: the size of variable(s) {shown} (dtype size x shape) is more than 2**63 - 1 bytes; "
            "TF refuses such a shape, and placeviz reports its bytes as unknown (null)")


def _producer(graph) -> int:
    """The GraphDef's ``versions.producer`` (0 when it has no ``versions``, as the proto reads)."""
    versions = graph.versions
    return versions.producer if versions is not None else 0


def _variable_infos(graph: Graph, ids: list[int], trainable: set[str] | None, partitioned: dict,
                    overflowed: list[str]) -> list[VariableInfo]:
    """The :class:`VariableInfo` of nodes ``ids`` (variables), in that order.

    ``overflowed``: gets the name of every variable whose byte count is beyond int64.
    """
    names, ops, devices = graph.names, graph.ops, graph.devices
    out: list[VariableInfo] = []
    append = out.append
    for i, (dname, shape, nbytes, over) in zip(ids, _variables_declared(graph, ids), strict=True):
        name = names[i]
        if over:
            overflowed.append(name)
        append(VariableInfo(
            name=name,
            op=ops[i],
            dtype=dname,
            shape=None if shape is None else list(shape),  # a list of its own per variable
            bytes=nbytes,
            trainable=None if trainable is None else name in trainable,
            device=devices[i],
            partition_of=partitioned.get(name),
        ))
    return out


_DECLARED_ATTRS = ("dtype", "shape")
"""The attrs a variable op declares its value with (``VariableV2``, ``VarHandleOp``...:
``tensorflow/core/ops/state_ops.cc``, ``resource_variable_ops.cc``)."""


def _variables_declared(graph: Graph, ids: list[int]) -> list[tuple]:
    """:func:`_declared_facts` of each variable of ``ids``, in that order.

    A graph's variables share few (dtype, shape) pairs (a model repeats its layers; a 200k-node
    graph's 15k variables have three), so the facts of each distinct pair are worked out once;
    equal serialized AttrValues are equal values. The two attrs are read from the file's bytes by
    the C reader when it can (:meth:`Graph.wire_attr_values`: no NodeDef is parsed, which was
    most of this pass's time), else from the NodeDefs (parsed in one call when the file was not:
    :meth:`Graph.prefetch_node_defs`); reading a shape's dims out of a NodeDef costs more than
    serializing its ``shape`` AttrValue, hence the key.
    """
    known: dict[tuple, tuple] = {}
    get = known.get
    out: list[tuple] = []
    append = out.append
    raw = graph.wire_attr_values(ids, _DECLARED_ATTRS)
    held = [row for row in raw if row is not None] if raw is not None else []
    if raw is not None and len(held) == len(raw):  # else some node has no bytes: every one from its NodeDef
        for key in held:
            facts = get(key)
            if facts is None:
                dtype_raw, shape_raw = key
                dtype = AttrValue.FromString(dtype_raw).type if dtype_raw is not None else 0
                shape_av = AttrValue.FromString(shape_raw) if shape_raw is not None else None
                facts = known[key] = _declared_facts(dtype, shape_av)
            append(facts)
        return out
    graph.prefetch_node_defs(ids)
    nodes = graph.attr_nodes
    for i in ids:
        attr = nodes[i].attr
        dtype_av = attr.get("dtype")
        dtype = dtype_av.type if dtype_av is not None else 0
        shape_av = attr.get("shape")
        node_key = (dtype, shape_av.SerializeToString() if shape_av is not None else None)
        facts = get(node_key)
        if facts is None:
            facts = known[node_key] = _declared_facts(dtype, shape_av)
        append(facts)
    return out


def _declared_facts(dtype: int, shape_av) -> tuple[str, tuple[int | None, ...] | None, int | None, bool]:
    """(dtype name, shape, bytes, overflows) of a variable declared with ``dtype`` (0: none) and the
    ``shape`` AttrValue ``shape_av`` (None: no such attr); see :class:`VariableInfo`."""
    shape: tuple[int | None, ...] | None = None
    if shape_av is not None and not shape_av.shape.unknown_rank:
        shape = tuple(d.size if d.size >= 0 else None for d in shape_av.shape.dim)
    size = dtype_size(dtype) if dtype else None
    nbytes = tensor_bytes(size, shape)  # exact; None when unknown or beyond int64 (see _overflow_note)
    return (dtype_name(dtype) if dtype else "?", shape, nbytes, nbytes is None and overflows(size, shape))
