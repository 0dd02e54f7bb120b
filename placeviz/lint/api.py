"""What a lint rule sees and returns: :class:`Rule` metadata, :class:`LintContext`, :class:`Finding`.

A rule is one module in ``placeviz/rules/`` (or a user's ``--rules DIR``) holding ``RULE = Rule(...)`` and
``def check(ctx: LintContext) -> Iterable[Finding]``. The engine builds the context once per model
from the static pipeline (:mod:`placeviz.pipeline`) and hands the same object to every rule, so
no rule reparses, re-places or re-partitions anything.

Example::

    RULE = Rule(id="PV301", name="sync-token-queue-shared", severity="error", category="sync",
                summary="More than one SyncReplicas token queue shares shared_name 'sync_token_q'.",
                ignorable=False, doc=\"\"\"## What it does ... \"\"\")

    def check(ctx):
        queues = [i for i in ctx.nodes_by_op("FIFOQueueV2", "FIFOQueue")
                  if ctx.attr_str(i, "shared_name") == "sync_token_q"]
        if len(queues) > 1:
            yield ctx.finding(RULE, queues[1], "2 queues share ...", related=queues[:1])

Nothing here imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placeviz.devices import ClusterSpec
    from placeviz.lint.raw import RawGraph

SEVERITIES = ("error", "warning", "info")
"""Most to least severe; ``--fail-on`` thresholds are inclusive."""

CATEGORIES = {
    "0": "graph", "1": "devices", "2": "variables", "3": "sync", "4": "traffic", "9": "meta",
}
"""First digit of a rule ID -> category."""

NEEDS = frozenset({"placement", "cluster", "ps-count", "meta", "sync", "partition", "tasks"})
"""What a rule may need beyond the GraphDef:

* ``placement``: placed devices (``ctx.devices``); missing when TF's placer would reject the graph;
* ``cluster``: a cluster spec the user gave (``--cluster`` or config), not one inferred from the graph;
* ``ps-count``: how many PS tasks there are, as the user stated it: a cluster spec with a ``ps`` job,
  or ``--ps-tasks N`` (not inferred from the tasks the graph happens to use);
* ``meta``: MetaGraphDef collections (trainable/local variables, train ops, queue runners);
* ``sync``: detected SyncReplicas machinery (``ctx.machinery``/``ctx.proof``);
* ``partition``: the partition of one train step (``ctx.partitions``);
* ``tasks``: the graphs other worker tasks built (between-graph replication: ``--worker-graph``, or
  a builder taking ``task_index``), compared with the model's in ``ctx.agreement``.

A rule whose need is missing is reported as skipped with the reason, never silently dropped.
"""


@dataclass(frozen=True)
class Rule:
    """A rule's metadata; the rule's docs page is generated from it."""

    id: str  # "PV301"
    name: str  # "sync-token-queue-shared" (kebab-case, usable wherever the ID is)
    severity: str  # default severity: "error" | "warning" | "info"
    summary: str  # one sentence
    needs: tuple[str, ...] = ()  # subset of NEEDS
    ignorable: bool = True  # False: per-node ignores cannot silence it (config may still deselect it)
    preview: bool = False
    doc: str = ""  # Markdown: What it does / Why it matters / How it is detected / Example / Fix / References
    references: tuple[str, ...] = ()
    integrity: bool = False
    """True for graph-integrity rules (PV0xx): they read ``ctx.raw`` and also run when the GraphDef
    is too broken to build a :class:`placeviz.graph.Graph` (duplicate names, dangling inputs, an
    illegal cycle); every other rule is then skipped, and ``ctx.pipeline`` is None."""

    @property
    def category(self) -> str:
        return CATEGORIES.get(self.id[2:3], "other")

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"{self.id}: severity must be one of {SEVERITIES}, got {self.severity!r}")
        unknown = set(self.needs) - NEEDS
        if unknown:
            raise ValueError(f"{self.id}: unknown needs {sorted(unknown)}")


@dataclass
class Finding:
    """One problem a rule found at one node (``node`` None: about the model as a whole)."""

    rule: str
    name: str
    severity: str
    model: str
    node: str | None
    device: str | None
    message: str
    related: list[str] = field(default_factory=list)
    suggestion: str | None = None
    source: dict | None = None
    """Where the node was created in the user's Python code, ``{"file", "line", "function"}``
    (file relative to the current directory when inside it), set by the engine from the model's
    :attr:`placeviz.io.Model.sources`; None when unknown. Rules leave it alone."""

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class LintContext:
    """Everything a rule may look at, computed once per model.

    Node ids are ints (positions in ``graph``); use ``graph.names[i]``, ``graph.ops[i]``,
    ``graph.node_def(i)``, ``graph.inputs_of(i)`` -> [(src, slot or CONTROL)],
    ``graph.consumers_of(i)``.
    """

    model_path: str
    pipeline: Any
    """:class:`placeviz.pipeline.Pipeline`, or None when the graph could not be built (then only
    integrity rules run, and they read :attr:`raw`). Typed ``Any``: the properties below read it
    unguarded, as no rule asks them of an unbuilt graph."""
    cluster: ClusterSpec | None = None  # the cluster spec the user gave, or None
    thresholds: dict = field(default_factory=dict)
    op_table: object | None = None
    raw: RawGraph | None = None
    """:class:`placeviz.lint.raw.RawGraph`: the GraphDef as written, indexed without validation
    (set by the engine for every model; integrity rules read it)."""
    placement_options: object | None = None
    """:class:`placeviz.placement.PlacementOptions` the model was placed with (the PLACE options:
    ``--ps-tasks``, ``--soft-placement``, ...), or None when the caller gave none."""
    agreement: object | None = None
    """:class:`placeviz.agreement.Agreement` of the model (task 0, the chief) with the graphs the
    other worker tasks built, or None when only the model's graph is known."""
    rule_cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """What rules and their shared helpers (``placeviz/rules/_common.py``) computed about this
    model, kept so that the next rule asking does not pay again: one entry per helper or rule,
    keyed by its name (a rule's own entries under its id, e.g. ``"PV003.outputs"``). Empty when
    the engine hands the context to the first rule; it lives as long as the context."""

    @property
    def loaded(self) -> bool:
        """False when the graph could not be built or run through the pipeline (integrity rules only)."""
        return self.pipeline is not None

    # ------------------------------------------------------------------ the stages' results
    @property
    def model(self):
        return self.pipeline.model

    @property
    def graph(self):
        """The placed graph when placement ran (may hold group NoOps the setter added), else the model's."""
        return self.pipeline.graph

    @property
    def requested_devices(self) -> list[str]:
        """Device strings as written in the GraphDef (or as the replayed setter wrote them)."""
        return self.graph.devices

    @property
    def devices(self) -> list[str] | None:
        """Full runtime device per node after TF's placer; None when placement did not run or failed."""
        return self.pipeline.devices

    @property
    def placement_error(self) -> str | None:
        return self.pipeline.placement_error

    @property
    def collections(self):
        """:class:`placeviz.io.Collections` (``.present`` False for a bare GraphDef)."""
        return self.pipeline.model.collections

    @property
    def analysis(self):
        """:class:`placeviz.analysis.Analysis` (variables with bytes, placement/sync/partition sections)."""
        return self.pipeline.analysis

    @property
    def machinery(self):
        return self.pipeline.machinery

    @property
    def proof(self):
        return self.pipeline.proof

    @property
    def partitions(self):
        return self.pipeline.partitions

    @property
    def soft_placement(self) -> bool:
        """True when the session places softly (``--soft-placement``: the program's
        ``ConfigProto(allow_soft_placement=True)``): TF's placer then moves an op whose requested
        device type has no kernel for it to a device that has one, instead of failing."""
        options = self.placement_options
        placer = getattr(options, "placer", None)
        return bool(getattr(placer, "allow_soft_placement", False))

    @property
    def stated_ps_tasks(self) -> int | None:
        """The number of PS tasks the user stated: the ``ps`` job of the cluster spec they gave, else
        ``--ps-tasks N``; None when they stated neither."""
        if self.cluster is not None and "ps" in self.cluster.jobs:
            return self.cluster.num_tasks("ps")
        setter = getattr(self.placement_options, "setter", None)
        n = getattr(setter, "ps_tasks", 0) or 0
        return n if n > 0 else None

    def has(self, need: str) -> bool:
        """Whether the input ``need`` (see :data:`NEEDS`) is available for this model."""
        if need == "placement":
            return self.devices is not None
        if need == "cluster":
            return self.cluster is not None
        if need == "ps-count":
            return self.stated_ps_tasks is not None
        if need == "meta":
            return self.collections.present
        if need == "sync":
            return self.machinery is not None
        if need == "partition":
            return self.partitions is not None
        if need == "tasks":
            return self.agreement is not None
        raise ValueError(f"unknown need {need!r}")

    def missing(self, rule: Rule) -> list[str]:
        return [n for n in rule.needs if not self.has(n)]

    # ------------------------------------------------------------------ helpers for rules
    @cached_property
    def _by_op(self) -> dict[str, list[int]]:
        return ids_by_value(self.graph.ops)

    @cached_property
    def _by_ops(self) -> dict[tuple[str, ...], list[int]]:
        return {}

    def nodes_by_op(self, *ops: str) -> list[int]:
        """Ids of nodes whose op is one of ``ops``, in graph order (a new list: the caller may
        change it). The ids of several ops are merged once per set of ops and kept: rules ask for
        the variables (four op types, 15k ids at 200k nodes) nine times."""
        if len(ops) == 1:
            return list(self._by_op.get(ops[0], ()))
        merged = self._by_ops.get(ops)
        if merged is None:
            by_op = self._by_op
            merged = self._by_ops[ops] = sorted(chain.from_iterable(by_op.get(op, ()) for op in ops))
        return list(merged)

    def attr_str(self, i: int, key: str) -> str | None:
        attr = self.graph.node_def(i).attr
        return attr[key].s.decode("utf-8", "replace") if key in attr else None

    def device_of(self, i: int) -> str:
        """The placed device when known, else the requested one."""
        if self.pipeline is None:
            assert self.raw is not None  # the engine gives every context the raw graph
            return self.raw.devices[i]
        devices = self.devices
        return devices[i] if devices is not None else self.graph.devices[i]

    def threshold(self, key: str, default):
        return self.thresholds.get(key, default)

    def threshold_bytes(self, key: str, default: int | str) -> int:
        """A size threshold from config: an int (bytes) or a string like ``"64MiB"``/``"1.5 GB"``."""
        return parse_bytes(self.thresholds.get(key, default))

    def finding(self, rule: Rule, node: int | str | None, message: str, *, related: Iterable[int | str] = (),
                suggestion: str | None = None, severity: str | None = None) -> Finding:
        """A :class:`Finding` of ``rule`` at ``node`` (id or name), with its device filled in."""
        name = device = None
        if self.pipeline is not None:
            nodes = self.graph
        else:  # the graph could not be built
            assert self.raw is not None  # the engine gives every context the raw graph
            nodes = self.raw
        if node is not None:
            i = node if isinstance(node, int) else nodes.index[node]
            name = nodes.names[i]
            device = self.device_of(i) or None
        return Finding(
            rule=rule.id, name=rule.name, severity=severity or rule.severity, model=self.model_path,
            node=name, device=device, message=message,
            related=[nodes.names[r] if isinstance(r, int) else r for r in related],
            suggestion=suggestion,
        )

    def raw_finding(self, rule: Rule, i: int | None, message: str, *, related: Iterable[int] = (),
                    suggestion: str | None = None, severity: str | None = None) -> Finding:
        """A finding at node ``i`` of :attr:`raw` (the GraphDef as written; integrity rules).

        Raw ids are positions in the model's own GraphDef, which differ from ``graph`` ids once the
        sync pass rewrote the graph. The device is the placed one when the node was placed, else
        the one written in the GraphDef.
        """
        raw = self.raw
        assert raw is not None  # the engine gives every context the raw graph (integrity rules read it)
        name = device = None
        if i is not None:
            name = raw.names[i]
            device = raw.devices[i] or None
            if self.pipeline is not None and self.devices is not None:
                j = self.graph.id_of(name)
                if j is not None:
                    device = self.devices[j] or device
        return Finding(rule=rule.id, name=rule.name, severity=severity or rule.severity, model=self.model_path,
                       node=name, device=device, message=message, related=[raw.names[r] for r in related],
                       suggestion=suggestion)


_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_bytes(value: int | float | str) -> int:
    """``64 * 2**20``, ``"64MiB"``, ``"1.5 GB"`` -> bytes; ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {value!r} (use bytes or a unit: KiB, MiB, GiB, KB, MB, GB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def ids_by_value(values: list) -> dict:
    """Value -> the ids holding it (ascending), values in the order they first appear: what
    ``for i, v in enumerate(values): out.setdefault(v, []).append(i)`` builds, with one pass of
    dict lookups and numpy for the rest (the rules' per-op and per-device indices of a 200k-node
    graph are built in a few milliseconds).
    """
    import numpy as np

    distinct, code = value_codes(values)
    if not distinct:
        return {}
    order = np.argsort(code, kind="stable")
    bounds = np.cumsum(np.bincount(code, minlength=len(distinct)))[:-1]
    return dict(zip(distinct, (part.tolist() for part in np.split(order, bounds)), strict=True))


def value_codes(values: list):
    """``(distinct, codes)``: the distinct values in order of first appearance, and for each of
    ``values`` the position of its value in ``distinct`` (an int64 numpy array). The loops run in
    C (``dict.fromkeys``, ``map`` of a dict lookup)."""
    import numpy as np

    distinct = list(dict.fromkeys(values))
    position = {v: k for k, v in enumerate(distinct)}
    return distinct, np.fromiter(map(position.__getitem__, values), dtype=np.int64, count=len(values))
