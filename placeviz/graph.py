"""The graph IR every placeviz pass works on.

A :class:`Graph` is an immutable index over a ``GraphDef``, built in one pass over the protos.
Reading fields out of protobuf messages costs more than parsing them (about 1 us per node and
pass), so every later pass (placement, partitioning, lint) works on the plain Python lists and
integer arrays built here instead of going back to the protos:

* ``names``, ``ops``, ``devices``: one entry per node, in GraphDef order (node id = position);
* the name index: node name -> node id, asked through :meth:`Graph.id_of` (one name),
  :meth:`Graph.ids_of` (many) and ``name in graph``; :attr:`Graph.index` is that index as a dict,
  made on first use for a caller that wants one (a graph read by the C reader answers from the
  reader's own table, ``placeviz._wire.NameIndex``, without a dict of every name);
* inputs in CSR form: the inputs of node ``i`` are positions ``in_start[i]:in_start[i+1]`` of
  ``in_src`` (source node id) and ``in_slot`` (output index, or ``CONTROL`` = -1 for ``^name``),
  in NodeDef order (data inputs first, then control inputs, as TF requires);
* ``colocation``: node id -> the ``loc:@`` group names of its ``_class`` attr (only nodes that
  have one), in id order; ``colocated_names``: the op names those groups name.

Colocation, colocated names, consumers, topological order and the other facts listed in
:attr:`Graph.CACHES` are derived on first use and kept on the graph: reading ``_class`` costs an
attr lookup per node (about 1 us), which commands that never look at colocation should not pay.
They are functions of the graph's own nodes, which never change, so they are never stale; a pass
asks whether one is known with :meth:`Graph.computed`/:meth:`Graph.peek` (never by looking into
the instance), and a benchmark forgets them with :meth:`Graph.clear_caches` or
:meth:`Graph.reset_caches`. What a stage computes from the graph *and* its own inputs is its own
result, handed to the next stage explicitly (``docs/architecture.md``, "Caches").

networkx is meant for small graphs and ad-hoc analyses: at 1M nodes it costs 3.5x the time and
1.7x the memory of the arrays (``docs/architecture.md``, "Speed").

A pass that only changes devices or rewires a few nodes (the setter replay) makes its result with
:meth:`Graph.with_devices` or :meth:`Graph.derived` from arrays, without another pass over the
protos; the GraphDef of such a graph is built only when someone asks for ``graph_def``.
"""

from __future__ import annotations

import heapq
import operator
import weakref
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate, chain, compress, count, repeat
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

from placeviz.errors import GraphError
from placeviz.gcpause import gc_paused as gc_paused  # re-exported: the placement stages import it from here
from placeviz.native import kernels
from placeviz.nodewire import NodeWire, field_spans, of_graph_def
from placeviz.op_kinds import NEXT_ITERATION_OPS
from placeviz.protos import AttrValue, GraphDef, NodeDef

if TYPE_CHECKING:
    import networkx as nx
    import numpy as np
    import numpy.typing as npt
    from google.protobuf.descriptor import FieldDescriptor

    from placeviz.control_flow import ControlFlowInfo
    from placeviz.protos import FunctionDefLibrary, VersionDef

    I32Array = npt.NDArray[np.int32]

_wire = kernels("_wire")  # the C reader of serialized GraphDefs (see placeviz.native)

CONTROL = -1
"""``in_slot`` value of a control input (``^name``)."""

_MAX_SLOT = 2**31 - 1  # TF's output indices are int32

# Ops whose out-edges into a Merge close a while loop: TF's executor and graph sorts treat
# NextIteration -> Merge as a back edge, so the topological order ignores those edges.


class NameLookup(Protocol):
    """What answers a graph's name lookups without a dict of every name: the C reader's
    ``placeviz._wire.NameIndex`` (see :meth:`Graph.id_of`)."""

    def get(self, name: str, /) -> int | None: ...

    def ids(self, names: Iterable[str], /) -> dict[str, int]: ...


class NodeDefs(Protocol):
    """What :attr:`Graph.attr_nodes` is: a GraphDef's ``node`` field, :class:`RemappedNodeDefs` or
    :class:`WireNodeDefs` (read by length, by id and in order, never sliced)."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int, /) -> NodeDef: ...

    def __iter__(self) -> Iterator[NodeDef]: ...


@dataclass(frozen=True)
class Input:
    """One parsed input of a node: ``src`` output ``slot``; ``slot == CONTROL`` for ``^src``."""

    src: str
    slot: int

    @property
    def is_control(self) -> bool:
        return self.slot == CONTROL

    def __str__(self) -> str:
        if self.slot == CONTROL:
            return "^" + self.src
        return self.src if self.slot == 0 else f"{self.src}:{self.slot}"


def parse_input(text: str) -> Input:
    """Parse a NodeDef input string: ``name``, ``name:k`` or ``^name``."""
    if text.startswith("^"):
        return Input(text[1:], CONTROL)
    name, sep, slot = text.partition(":")
    if not sep:
        return Input(name, 0)
    if not (slot.isascii() and slot.isdigit()):
        raise GraphError(f"malformed input {text!r}: the output index must be a number")
    return Input(name, int(slot))


AttrKeys: TypeAlias = tuple[dict[str, tuple[str, ...]], list[object]]
"""``(key_attrs, values)``: the question :meth:`Graph.attr_keys` was asked (op -> attr names) and
its answer (one key per node). A stage that needs attr keys is handed this value by the stage that
read them (the setter by ``placement.setter_stage``); it does not read the graph's memo."""


class Graph:
    """Index over a GraphDef: node ids, parsed edges, colocation groups. Never mutated."""

    CACHES = ("index", "colocation", "colocated_names", "located_names", "colocated_name_ids", "edge_arrays",
              "consumers", "topological_order", "node_wire", "attr_keys", "control_flow")
    """Every fact a graph keeps once it is derived: all but ``attr_keys`` are ``cached_property``
    values of the same name; ``attr_keys`` is what the last :meth:`attr_keys` call read (its
    argument and values, see :meth:`cached_attr_keys`), kept so that asking the same question
    again (the placer), or of a graph derived from this one, costs no pass over the NodeDefs; the
    answer itself is handed on as a value (:data:`AttrKeys`). Each is computed from the graph's own
    nodes only, so it is never stale. Nothing else is kept on a graph, and nothing outside this
    module writes any of them: :meth:`computed`, :meth:`peek`, :meth:`clear_caches` and
    :meth:`reset_caches` are how other code asks about them."""

    _attr_keys_memo: AttrKeys | None = None  # the ``attr_keys`` entry
    _built: frozenset[str] = frozenset()  # the CACHES entries the graph was built with (see reset_caches)
    # Set by every builder (_build, _build_from_wire, derived); declared here because the C reader's
    # values are untyped.
    names: list[str]
    ops: list[str]
    devices: list[str]
    in_start: array[int]
    in_src: array[int]
    in_slot: array[int]

    def __init__(self, graph_def: GraphDef, *, wire: bytes | memoryview | None = None,
                 key_attrs_for: Callable[[set[str]], dict[str, tuple[str, ...]]] | None = None):
        """Index ``graph_def``.

        ``wire``: the bytes ``graph_def`` was parsed from, when the caller has them (``io.load``
        of a binary GraphDef). Then the C reader (``placeviz._wire``) reads names, ops, devices,
        inputs and ``_class`` from the bytes, about 4x faster than from the messages, and, with
        ``key_attrs_for`` (ops -> the attrs :meth:`attr_keys` will be asked for), the attr keys
        too, so that no later pass has to make the NodeDefs' ``attr`` maps. The result is the
        same as without ``wire``; for anything but the plain case (a duplicate name, an input
        naming no node, ...) the reader declines and the Python path gives the exact error.
        """
        self._hold(graph_def, None, None, None, wire)
        with gc_paused():
            if wire is None or _wire is None or not self._build_from_wire(wire, key_attrs_for):
                self._build(graph_def)
        self._built = self._known()

    def _hold(self, graph_def: GraphDef | None, make_graph_def: Callable[[], GraphDef] | None,
              attr_nodes: NodeDefs | None, source: Graph | None, wire: bytes | memoryview | None) -> None:
        """What a graph holds of its GraphDef, set alike by every constructor: the message, or the
        function that makes it on first use (:attr:`graph_def`); the NodeDefs attrs are read from
        (None: ``graph_def.node``, see :attr:`attr_nodes`); the graph a derived one was made from
        (see :meth:`derived`); the file's bytes, kept for :attr:`node_wire` (partitions are
        written from them)."""
        self._graph_def = graph_def
        self._make_graph_def = make_graph_def
        self._attr_nodes = attr_nodes
        self._source = source
        self._wire_data = wire

    @classmethod
    def from_wire(cls, wire: bytes | memoryview, parse: Callable[[], GraphDef], *,
                  key_attrs_for: Callable[[set[str]], dict[str, tuple[str, ...]]] | None = None) -> Graph | None:
        """The graph of a serialized GraphDef that has not been parsed, or None when the C reader
        declines it (or is not built): then parse it and use ``Graph(graph_def, wire=...)``.

        ``parse()`` makes the GraphDef from ``wire``; :attr:`graph_def` calls it on first use,
        once (``io.load`` skips ``ParseFromString`` when the bytes surely parse: most commands
        read only the arrays built here). The caller guarantees that ``parse()`` succeeds and
        gives the message ``wire`` holds. Everything else is as ``Graph(parse(), wire=wire)``.
        """
        if _wire is None:
            return None
        graph = cls.__new__(cls)
        graph._hold(None, parse, None, None, wire)
        with gc_paused():
            if not graph._build_from_wire(wire, key_attrs_for):
                return None
        graph._built = graph._known()
        assert graph._wire_spans is not None  # set by the C reader
        of = weakref.ref(graph)  # no cycle: the graph holds these nodes

        def whole() -> GraphDef:
            parsed = of()
            assert parsed is not None  # nodes outliving their graph are not handed out
            return parsed.graph_def

        graph._attr_nodes = WireNodeDefs(wire, graph._wire_spans, whole)
        return graph

    def _build_from_wire(self, wire: bytes | memoryview,
                         key_attrs_for: Callable[[set[str]], dict[str, tuple[str, ...]]] | None) -> bool:
        """:meth:`_build` (and the ``_class`` and attr-key reads) by the C reader; False if it declined."""
        assert _wire is not None  # the caller checked
        scanned = _wire.scan_graph(wire)
        if scanned is None:
            return False
        names, ops, devices, index, in_start, in_src, in_slot, spans, op_ids, distinct_ops = scanned
        self._wire_spans = spans  # where each NodeDef lies in ``wire`` (see ``node_wire``)
        self._op_codes = (op_ids, distinct_ops)  # see ``op_codes``
        self.names, self.ops, self.devices = names, ops, devices
        self._name_index = index  # a _wire.NameIndex: the lookups without a dict (see id_of)
        self.in_start, self.in_src, self.in_slot = (_int_array(in_start), _int_array(in_src),
                                                    _int_array(in_slot))
        key_attrs = key_attrs_for(set(distinct_ops)) if key_attrs_for is not None else None
        plans: list[tuple[bytes, ...] | None] = [None] * len(distinct_ops)
        if key_attrs:
            plans = [tuple(a.encode() for a in key_attrs[op]) if op in key_attrs else None for op in distinct_ops]
        attrs = _wire.read_attrs(wire, spans, op_ids, plans, _attr_value_key_of_bytes, _decode_class)
        if attrs is not None:  # else read on first use, by the Python path
            values, colocation, colocated_names = attrs
            self._fill("colocation", colocation)
            self._fill("colocated_names", colocated_names)
            if key_attrs is not None:
                self._attr_keys_memo = (dict(key_attrs), values)
        return True

    def _build(self, graph_def: GraphDef) -> None:
        names: list[str] = []
        ops: list[str] = []
        devices: list[str] = []
        flat: list[str] = []  # every input string, node after node
        input_counts: list[int] = []
        add_inputs, add_count = flat.extend, input_counts.append
        # Few distinct op types and devices repeat over millions of nodes: keep one string object
        # of each (127 MiB less at 1M nodes).
        op_strings: dict[str, str] = {}
        device_strings: dict[str, str] = {}
        intern_op, intern_device = op_strings.setdefault, device_strings.setdefault
        for node in graph_def.node:
            names.append(node.name)
            op = node.op
            ops.append(intern_op(op, op))
            device = node.device
            devices.append(intern_device(device, device))
            # Copied out right away: keeping a million ``input`` container objects alive until a
            # later pass costs more than the copy (upb tracks every live wrapper).
            inputs = node.input
            add_inputs(inputs)
            add_count(len(inputs))
        index = dict(zip(names, range(len(names)), strict=True))  # a duplicate keeps its last id, as a dictcomp would
        if len(index) != len(names):
            _raise_duplicate(names)
        if "" in index or "" in op_strings:
            for i, name in enumerate(names):
                if not name:
                    raise GraphError(f"node #{i} (op {ops[i] or '?'}) has no name")
                if not ops[i]:
                    raise GraphError(f"node {name!r} has no op type")

        # Most inputs are a plain node name: look them all up at once (C-level map), then parse
        # the rest (``^name``, ``name:k``, errors) one by one. A plain lookup could be fooled only
        # by node names with ':' or a leading '^', which TF never makes; then parse everything.
        joined = "\0".join(names)
        if ":" in joined or "^" in joined:
            srcs: list[int | None] = [None] * len(flat)
        else:
            srcs = list(map(index.get, flat))
        in_slot = array("i", bytes(4 * len(flat)))  # all 0; an array raises on a huge slot right away
        in_start = array("i", accumulate(chain((0,), input_counts)))
        get = index.get
        pending = list(compress(count(), map(operator.is_, srcs, repeat(None))))
        # Control inputs (``^name``, most of the rest) in C-level maps too, unless one names no
        # node: then the loop below sees them all, to report the first bad input in order.
        texts = list(map(flat.__getitem__, pending))
        is_control = list(map(str.startswith, texts, repeat("^")))
        # (mypy picks the wrong overload of operator.getitem for a str and a slice)
        control_srcs = list(map(get, map(operator.getitem, compress(texts, is_control),  # type: ignore[arg-type]
                                         repeat(slice(1, None)))))
        if None not in control_srcs:
            for k, src in zip(compress(pending, is_control), control_srcs, strict=True):
                srcs[k] = src
                in_slot[k] = CONTROL
            pending = list(compress(pending, map(operator.not_, is_control)))
        slot: int | None
        for k in pending:
            text = flat[k]
            if text[:1] == "^":
                src = get(text[1:])
                slot = CONTROL
            else:
                colon = text.find(":")
                if colon < 0:
                    src = get(text)
                    slot = 0
                else:
                    src = get(text[:colon])
                    tail = text[colon + 1:]
                    # ASCII digits only: str.isdigit() also accepts '²', which int() refuses.
                    slot = int(tail) if tail.isascii() and tail.isdigit() else None
                    if slot is None or slot > _MAX_SLOT:
                        raise GraphError(f"node {names[bisect_right(in_start, k) - 1]!r} has a malformed "
                                         f"input {text!r}")
            if src is None:
                raise GraphError(f"node {names[bisect_right(in_start, k) - 1]!r} has input {text!r}, but no "
                                 f"node is named {parse_input(text).src!r}")
            srcs[k] = src
            in_slot[k] = slot
        in_src = array("i", cast("list[int]", srcs))  # every None was replaced above (or raised)

        self.names = names
        self.ops = ops
        self.devices = devices
        self.index = index
        self.in_start = in_start
        self.in_src = in_src
        self.in_slot = in_slot

    @classmethod
    def from_graph_def(cls, graph_def: GraphDef) -> Graph:
        return cls(graph_def)

    @classmethod
    def derived(cls, *, names: list[str], ops: list[str], devices: list[str], in_start: array[int],
                in_src: array[int], in_slot: array[int], attr_nodes: NodeDefs,
                make_graph_def: Callable[[], GraphDef],
                index: dict[str, int] | Callable[[], dict[str, int]] | None = None,
                ids_of: Callable[[set[str]], dict[str, int]] | None = None, same_names_as: Graph | None = None,
                colocation: dict[int, tuple[str, ...]] | Callable[[], dict[int, tuple[str, ...]]] | None = None,
                colocated_names: dict[int, tuple[str, ...]] | None = None,
                located_names: set[str] | None = None, source: Graph | None = None,
                node_wire: Callable[[], NodeWire | None] | None = None,
                versions_present: bool = False) -> Graph:
        """A graph made from arrays computed from another graph, without a pass over protos.

        The caller guarantees what ``__init__`` checks (unique non-empty names, ops, valid inputs)
        and passes what ``__init__`` would have read: ``attr_nodes[i]`` is a NodeDef with node
        ``i``'s name, op and attrs (its device and inputs may be stale), and ``make_graph_def()``
        builds the full GraphDef, on first use of ``graph_def``. ``index``, ``colocation``,
        ``colocated_names`` and ``located_names``, when the caller has them, must equal what the
        graph would compute (``colocation`` in id order); otherwise they are computed on first
        use. ``index`` and ``colocation`` may also be functions that make them on first use, and
        ``ids_of`` one that answers :meth:`ids_of` until the index exists (a million-entry name
        index costs a third of a second, and the placer looks up only the names ``_class``
        attrs name). ``same_names_as``: a graph whose names are ``names`` (the same name at each
        id), whose name index this one shares instead (then ``index`` and ``ids_of`` are not
        given). ``source``: the graph this one was made from: its GraphDef's ``library`` is the new one's (so reading
        ``library`` does not build the GraphDef), and when ``attr_nodes`` are its NodeDefs (the
        same sequence, or a :class:`RemappedNodeDefs` over it) what :meth:`attr_keys` read there
        is reused. ``node_wire``: a function that makes :attr:`node_wire` on first use (without
        it the graph has none). ``versions_present``: ``make_graph_def`` always sets
        ``versions`` (else it has the source's, if any).
        """
        graph = cls.__new__(cls)
        graph._make_node_wire = node_wire
        graph._versions_present = versions_present
        graph._hold(None, make_graph_def, attr_nodes, source, None)
        graph.names, graph.ops, graph.devices = names, ops, devices
        if same_names_as is not None:
            assert index is None and ids_of is None, "same_names_as shares the name index"
            graph._share_name_index(same_names_as)
        elif isinstance(index, dict):
            graph.index = index
        else:  # built on first use (see the ``index`` property)
            graph._make_index = index
            graph._ids_of = ids_of
        graph.in_start, graph.in_src, graph.in_slot = in_start, in_src, in_slot
        if colocation is not None:  # the cached_properties' slots
            if callable(colocation):
                graph._make_colocation = colocation  # made on first use
            else:
                graph._fill("colocation", colocation)
            if colocated_names is not None:
                graph._fill("colocated_names", colocated_names)
                if located_names is not None:
                    graph._fill("located_names", located_names)
        graph._built = graph._known()
        return graph

    def with_devices(self, devices: list[str]) -> Graph:
        """This graph with these devices; everything else (and what is cached about it) is shared.

        Its GraphDef is a copy of this one's with the devices written, made on first use.
        """
        if len(devices) != len(self.names):
            raise ValueError(f"{len(devices)} devices for {len(self.names)} nodes")

        def make_graph_def() -> GraphDef:
            out = GraphDef()
            out.CopyFrom(self.graph_def)
            for node, device in zip(out.node, devices, strict=True):
                node.device = device
            return out

        graph = Graph.derived(names=self.names, ops=self.ops, devices=devices, in_start=self.in_start,
                              in_src=self.in_src, in_slot=self.in_slot, attr_nodes=self.attr_nodes,
                              make_graph_def=make_graph_def,
                              same_names_as=self, source=self, node_wire=lambda: self.node_wire)
        # What is already known about this graph holds for the copy: none of it depends on devices.
        for derived_structure in _DEVICE_FREE_CACHES:
            if self.computed(derived_structure):
                graph._fill(derived_structure, getattr(self, derived_structure))
        if not self.computed("colocation") and self._make_colocation is not None:
            graph._make_colocation = lambda: self.colocation  # shared once made
        return graph

    # ----------------------------------------------------------------- the derived facts kept (CACHES)
    def computed(self, name: str) -> bool:
        """Whether the derived fact ``name`` (one of :attr:`CACHES`) is already known, so that
        reading it costs nothing. A pass picks a cheaper way when it is not (the placer reads the
        out-edges of a few nodes without building :attr:`consumers`)."""
        if name == "attr_keys":
            return self._attr_keys_memo is not None
        if name not in self.CACHES:
            raise ValueError(f"{name!r} is not one of Graph.CACHES {self.CACHES}")
        return name in self.__dict__

    def peek(self, name: str) -> Any:
        """The derived fact ``name`` (one of :attr:`CACHES`) if it is already known, else None
        (never computes it). For ``attr_keys``: :meth:`cached_attr_keys`. Typed ``Any``: the type
        is the property's of that name (read the property itself once :meth:`computed` says so
        for a typed value)."""
        if not self.computed(name):
            return None
        return self._attr_keys_memo if name == "attr_keys" else self.__dict__[name]

    def clear_caches(self, *names: str) -> None:
        """Forget the derived facts ``names`` (default: all of :attr:`CACHES`), so that the next use
        computes them again from the nodes; what a benchmark calls to time one from scratch.

        The graph's answers do not change: every fact is a function of the nodes, which never
        change. :attr:`node_wire` stays once the bytes it maps are dropped (it could not be made
        again).
        """
        self._forget(names or self.CACHES)

    def reset_caches(self, *names: str) -> None:
        """Forget those of the derived facts ``names`` (default: all of :attr:`CACHES`) computed
        since the graph was built, so that each repetition of a benchmark pays what a command pays
        after loading the graph.

        What the graph was built with stays: the name index the Python path built (the C reader's
        is not a cache: it answers :meth:`id_of` for the graph's life), and what the C reader read with the
        nodes (``colocation``, ``colocated_names``, the op-fact ``attr_keys``: their time belongs to
        loading) or the caller of :meth:`derived` gave.
        """
        self._forget(tuple(name for name in names or self.CACHES if name not in self._built))

    def _forget(self, names: tuple[str, ...]) -> None:
        for name in names:
            if not self.computed(name):  # (raises for a name not in CACHES)
                continue
            if name == "attr_keys":
                self._attr_keys_memo = None
            elif name != "node_wire" or self._wire_data is not None or self._make_node_wire is not None:
                del self.__dict__[name]
        self._built -= set(names)

    def _known(self) -> frozenset[str]:
        return frozenset(name for name in self.CACHES if self.computed(name))

    def _fill(self, name: str, value: object) -> None:
        """Set the derived fact ``name`` (one of :attr:`CACHES` kept by a ``cached_property``): the
        one place a value is written into a graph's cache slots, by the builders of this module."""
        assert name in self.CACHES and name != "attr_keys", name
        self.__dict__[name] = value

    @property
    def graph_def(self) -> GraphDef:
        """The GraphDef (for a derived graph, or one read from bytes by :meth:`from_wire`, made on
        first use, once; placeviz reads a graph from one thread, so no lock)."""
        if self._graph_def is None:
            make = self._make_graph_def
            assert make is not None  # a graph has its GraphDef or the function that makes it
            self._graph_def = make()
            self._make_graph_def = None
            if isinstance(self._attr_nodes, WireNodeDefs):
                self._attr_nodes.parsed(self._graph_def)
        return self._graph_def

    @property
    def library(self) -> FunctionDefLibrary:
        """The ``FunctionDefLibrary`` of the GraphDef; for a derived graph, or one read from bytes,
        without making the GraphDef."""
        if self._graph_def is None and self._source is not None:
            return self._source.library
        if self._graph_def is None and isinstance(self._attr_nodes, WireNodeDefs):
            return cast("FunctionDefLibrary", self._attr_nodes.top_field(_LIBRARY))  # None only for versions
        library: FunctionDefLibrary = self.graph_def.library  # protobuf fields are untyped
        return library

    @property
    def versions(self) -> VersionDef | None:
        """The GraphDef's ``versions`` (a VersionDef), or None when it has none; for a derived
        graph, without building its GraphDef."""
        if self._graph_def is None and self._source is not None:
            if self._versions_present and self._source.versions is None:
                # the derived GraphDef marks an empty one present
                return cast("VersionDef", GraphDef().versions)
            return self._source.versions
        if self._graph_def is None and isinstance(self._attr_nodes, WireNodeDefs):
            return self._attr_nodes.top_field(_VERSIONS)
        graph_def = self.graph_def
        return cast("VersionDef", graph_def.versions) if graph_def.HasField("versions") else None

    _versions_present = False

    # A derived graph may build its name index on first use (see ``derived``); these stay None
    # for a graph that was given one.
    _make_index: Callable[[], dict[str, int]] | None = None
    _ids_of: Callable[[set[str]], dict[str, int]] | None = None
    # The C reader's name index (``placeviz._wire.NameIndex``: ``get``, ``ids``) of a graph read
    # from bytes, or of one with the same names; None otherwise (then the ``index`` dict answers).
    _name_index: NameLookup | None = None
    _make_colocation: Callable[[], dict[int, tuple[str, ...]]] | None = None
    _make_node_wire: Callable[[], NodeWire | None] | None = None
    _wire_data: bytes | memoryview | None = None
    _wire_spans: bytes | None = None
    _op_codes: tuple[bytes, list[str]] | None = None

    def op_codes(self) -> tuple[bytes, list[str]] | None:
        """Per node a code of its op, as native int32 bytes, and the ops by code (equal ops have
        equal codes): what the C reader read while building the graph from bytes, or None (then
        callers that want codes make them from :attr:`ops`, one dict lookup per node)."""
        return self._op_codes

    def drop_bytes(self) -> None:
        """Let go of the bytes the graph was read from (:attr:`node_wire` is then None, unless it
        was read already). Where each node lay in them is kept (8 bytes a node, for
        :meth:`node_sizes`)."""
        self._wire_data = None

    def node_sizes(self) -> npt.NDArray[np.uint32] | None:
        """The serialized size of each node's NodeDef in the bytes the graph was read from (a numpy
        array indexed by node id), or None when the C reader did not read the graph from bytes.

        Anything inside a NodeDef (an attr's tensor) is at most that long, so a pass can skip the
        nodes too small to matter without making their messages (``lint``'s PV005).
        """
        spans = self._wire_spans
        if spans is None or len(spans) != 8 * len(self.names):
            return None
        import numpy as np

        return np.frombuffer(spans, dtype=np.uint32)[1::2]

    @cached_property
    def node_wire(self) -> NodeWire | None:
        """Where each node's serialized NodeDef lies in the bytes the graph was read from (see
        :mod:`placeviz.nodewire`), or None when the graph was not read from bytes (text,
        ``tf.Graph`` objects) or its bytes do not match its nodes. A derived graph maps its nodes
        to its source's bytes (``derived``'s ``node_wire``)."""
        make = self._make_node_wire  # kept (it holds only what the graph holds): see clear_caches
        if make is not None:
            return make()
        if self._wire_data is None:
            return None
        return of_graph_def(self._wire_data, len(self.names), self._wire_spans)

    @cached_property
    def index(self) -> dict[str, int]:
        """Node name -> node id, as a dict: made on first use (set when the Python path builds the
        graph), for a caller that needs a dict. A lookup asks :meth:`id_of` or :meth:`ids_of`,
        which a graph read by the C reader answers without this dict of every name (at 1M nodes
        its inserts cost 0.34 s, each a cache miss: ``benchmarks/README.md``, "the load's name
        index")."""
        make, self._make_index, self._ids_of = self._make_index, None, None
        return make() if make is not None else dict(zip(self.names, range(len(self.names)), strict=True))

    def _share_name_index(self, other: Graph) -> None:
        """Answer name lookups with ``other``'s index (a graph with the same names at the same ids)."""
        self._name_index = other._name_index
        if other.computed("index"):
            self._fill("index", other.index)
        else:
            self._make_index = lambda: other.index
            self._ids_of = other.ids_of

    def id_of(self, name: str) -> int | None:
        """The id of the node named ``name``, or None: ``index.get(name)``, without making
        :attr:`index` when the C reader's name index or the graph this one was derived from can
        answer. For many names, :meth:`ids_of` (one call)."""
        if self._name_index is not None:
            return self._name_index.get(name)
        if self._ids_of is not None and not self.computed("index"):
            return self._ids_of({name}).get(name)
        return self.index.get(name)

    def id_lookup(self) -> Callable[[str], int | None]:
        """:meth:`id_of` as the cheapest function to call for many single names (a C caller's, or
        a loop's): the C reader's own ``get`` when it answers, without a Python frame per name."""
        return self._name_index.get if self._name_index is not None else self.id_of

    def ids_of(self, names: Iterable[str]) -> dict[str, int]:
        """Node name -> id for those of ``names`` that are nodes of this graph.

        The same as looking each name up in :attr:`index` (and in ``names``' order), without
        building that index when the C reader's name index, or the graph a derived one was made
        from, can answer (the latter in its own order).
        """
        if self._name_index is not None:
            return self._name_index.ids(names)
        if self._ids_of is not None and not self.computed("index"):
            return self._ids_of(names if isinstance(names, set) else set(names))
        get = self.index.get
        return {name: i for name in names if (i := get(name)) is not None}

    @cached_property
    def located_names(self) -> set[str]:
        """Every name some node's ``loc:@`` groups name (see ``colocated_names``)."""
        return set(self._located_in_order())

    def _located_in_order(self) -> dict[str, None]:
        """:attr:`located_names` once each, in the order the ``_class`` attrs first name them
        (node id order); each distinct tuple of ``colocated_names`` is read once."""
        return dict.fromkeys(chain.from_iterable(dict.fromkeys(self.colocated_names.values())))

    @cached_property
    def colocated_name_ids(self) -> dict[str, int]:
        """Name -> id of the nodes :attr:`located_names` names (names of no node left out).

        The setter and the placer look up only these names: colocation targets,
        ``import_graph_def``'s device rewrite and the ``_class`` groups. A derived graph that has
        no index yet asks its source (``ids_of``). Otherwise the names are looked up in the order
        the graph first names them: a ``_class`` names a node that sits near it (a variable, its
        initializers and its readers), so the index's entries are read almost in order rather
        than at random (``benchmarks/setter_stage.py``: 0.023 -> 0.015 s at 200k nodes, 0.138 ->
        0.115 s at 1M with 109k names, ``located_names`` included).
        """
        if self._name_index is None and self._ids_of is not None and not self.computed("index"):
            return self.ids_of(self.located_names)
        in_order = self._located_in_order()
        if not self.computed("located_names"):
            self._fill("located_names", set(in_order))
        return self.ids_of(in_order)

    @cached_property
    def colocation(self) -> dict[int, tuple[str, ...]]:
        """node id -> the group names of its ``_class`` attr (only nodes that have one), in id order."""
        make, self._make_colocation = self._make_colocation, None
        if make is not None:  # a derived graph's, from the graph it was made from
            return make()
        self._read_colocation()
        return cast("dict[int, tuple[str, ...]]", self.__dict__["colocation"])  # filled by the read

    @cached_property
    def colocated_names(self) -> dict[int, tuple[str, ...]]:
        """node id -> the op names its ``loc:@`` groups name, in order (its own name too, if listed).

        Only nodes with some, in id order. Nodes colocated with the same ops share one tuple, so
        callers can cache per-tuple work.
        """
        if not self.computed("colocation"):
            self._read_colocation()
            return cast("dict[int, tuple[str, ...]]", self.__dict__["colocated_names"])  # filled by the read
        out: dict[int, tuple[str, ...]] = {}
        names_of: dict[tuple[str, ...], tuple[str, ...]] = {}
        for i, groups in self.colocation.items():
            located = names_of.get(groups)
            if located is None:
                located = names_of[groups] = _located_names(groups)
            if located:
                out[i] = located
        return out

    def _read_colocation(self) -> None:
        """Fill ``colocation`` and ``colocated_names`` from the ``_class`` attrs, in one pass."""
        self._scan_attrs(None)

    def attr_keys(self, key_attrs: dict[str, tuple[str, ...]]) -> list[object]:
        """Per node, a hashable key of the values of the attrs ``key_attrs[op]`` names.

        With one attr name: ``None`` if the node lacks it, its ``type`` if that is set, else its
        serialized bytes; with several: a tuple of those; with none: ``None``. Equal keys mean
        equal values. The placer keys op facts by them.

        Reading attrs out of protos costs about 1 us per node and pass, most of it in making the
        ``attr`` map object, so this pass also reads ``_class`` (``colocation``) when that was not
        read yet, and the result is cached. A graph derived from another (the setter's result)
        takes the values its source computed for the same ``key_attrs``, reading only the nodes
        the derivation added.
        """
        cached = self._attr_keys_memo
        if cached is not None and cached[0] == key_attrs:
            return cached[1]
        values = self._attr_keys_from_source(key_attrs)
        if values is None:
            values = self._scan_attrs(key_attrs)
            assert values is not None  # key_attrs given: the values are read
        self._attr_keys_memo = (dict(key_attrs), values)
        self._built -= {"attr_keys"}  # another memo than the one the graph was built with
        return values

    def cached_attr_keys(self) -> AttrKeys | None:
        """``(key_attrs, values)`` of the last :meth:`attr_keys` call on this graph, or None (the
        ``attr_keys`` entry of :attr:`CACHES`)."""
        return self._attr_keys_memo

    def _attr_keys_from_source(self, key_attrs: dict[str, tuple[str, ...]]) -> list[object] | None:
        source = self._source
        if source is None:
            return None
        cached = source.cached_attr_keys()
        if cached is None:
            return None
        source_key_attrs, source_values = cached
        if any(source_key_attrs.get(op, attrs) != attrs for op, attrs in key_attrs.items()):
            return None  # some op's key attrs differ: read them here
        nodes = self._attr_nodes
        if nodes is source.attr_nodes:  # the same NodeDefs in the same order (with_devices)
            return source_values
        if not isinstance(nodes, RemappedNodeDefs) or nodes.base is not source.attr_nodes:
            return None
        # Node i is the source's node ids[i]; a negative id (an added node) indexes from the end
        # here, and those few are read below.
        values = list(map(source_values.__getitem__, nodes.ids))
        for i in nodes._added:
            values[i] = _attr_key(nodes[i].attr, key_attrs.get(self.ops[i], ()))
        return values

    def _scan_attrs(self, key_attrs: dict[str, tuple[str, ...]] | None) -> list[object] | None:
        """One pass over the NodeDefs: :meth:`attr_keys` values (if ``key_attrs`` is given) and,
        unless already known, ``colocation`` and ``colocated_names`` from the ``_class`` attrs.

        The nodes colocated with one op have byte-identical ``_class`` values, so the value is
        decoded once per distinct serialized form (cheaper than reading the list of every node).
        """
        read_class = not self.computed("colocation")
        colocation: dict[int, tuple[str, ...]] = {}
        colocated_names: dict[int, tuple[str, ...]] = {}
        decoded: dict[bytes, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        values: list[object] = []
        append = values.append
        # op -> its only key attr (the common case, inlined below), or None and all its key attrs
        plan = {op: (attrs[0] if len(attrs) == 1 else None, attrs) for op, attrs in (key_attrs or {}).items()}
        with gc_paused():
            for i, (node, op) in enumerate(zip(self.attr_nodes, self.ops, strict=True)):
                attr = node.attr
                if key_attrs is not None:
                    attr_name, attrs = plan.get(op, _NO_KEY_ATTRS)
                    if attr_name is not None:
                        av = attr.get(attr_name)
                        append(None if av is None else av.type or av.SerializeToString())  # _attr_value_key
                    elif attrs:
                        append(tuple(map(_attr_value_key, map(attr.get, attrs))))
                    else:
                        append(None)
                if not read_class or "_class" not in attr:  # `in` does not build the value
                    continue
                value = attr["_class"]
                raw = value.SerializeToString()
                known = decoded.get(raw)
                if known is None:
                    groups = tuple(s.decode("utf-8", "replace") for s in value.list.s)
                    known = decoded[raw] = (groups, _located_names(groups))
                groups, located = known
                if groups:
                    colocation[i] = groups
                    if located:
                        colocated_names[i] = located
        if read_class:
            self._fill("colocation", colocation)
            self._fill("colocated_names", colocated_names)
        return values if key_attrs is not None else None

    # ----------------------------------------------------------------- node-level access
    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: str) -> bool:
        return self.id_of(name) is not None

    def __iter__(self) -> Iterator[NodeView]:
        return (NodeView(self, i) for i in range(len(self.names)))

    def node(self, key: str | int) -> NodeView:
        """The node with this name or id (KeyError if there is none)."""
        if isinstance(key, str):
            i = self.id_of(key)
            if i is None:
                raise KeyError(key)
            return NodeView(self, i)
        if not 0 <= key < len(self.names):
            raise KeyError(key)
        return NodeView(self, key)

    def node_def(self, i: int) -> NodeDef:
        """A NodeDef with node ``i``'s name, op and attrs (do not mutate it).

        It is ``attr_nodes[i]``: for a derived graph (the setter's result) that may be the source
        graph's NodeDef, whose device and inputs are stale (read those from the Graph), so that
        reading attrs never builds the derived graph's GraphDef.
        """
        return self.attr_nodes[i]

    @property
    def attr_nodes(self) -> NodeDefs:
        """NodeDefs to read the name, op and attrs of node ``i`` from, as ``attr_nodes[i]``.

        For a derived graph these may be the source graph's NodeDefs, whose device and inputs are
        stale: read those from the Graph. Unlike ``graph_def``, this never builds a GraphDef.
        """
        # (both untyped: a protobuf field, or what ``derived`` was given)
        nodes: NodeDefs = self.graph_def.node if self._attr_nodes is None else self._attr_nodes
        return nodes

    def prefetch_node_defs(self, ids: Iterable[int]) -> None:
        """A hint that :meth:`node_def` will be asked for these node ids: a graph read from bytes
        not parsed (:meth:`from_wire`, or derived from one) parses their NodeDefs in one call
        rather than one by one. Changes no answer; does nothing for other graphs."""
        nodes = self._attr_nodes
        if isinstance(nodes, RemappedNodeDefs):
            ids = [j for j in map(nodes.ids.__getitem__, ids) if j >= 0]
            nodes = nodes.base
        if isinstance(nodes, WireNodeDefs):
            nodes.prefetch(ids)

    def wire_attr_values(self, ids: list[int], names: tuple[str, ...], paths: tuple[tuple[int, ...], ...] | None = None
                         ) -> list[tuple[bytes | None, ...] | None] | None:
        """Per node of ``ids``, the serialized AttrValue of each attr of ``names`` (None: the node
        has no such attr), read by the C reader from the bytes the graph was read from (a derived
        graph: those its NodeDefs come from), without parsing a NodeDef; or None when it cannot
        (the graph was not read from bytes, or let go of them; the kernels are not built; an attr
        map of an odd form): then read ``node_def(i).attr``, which holds the same values. The row
        of a node the bytes do not hold (one a derived graph added) is None: read its NodeDef.

        ``paths``: per attr of ``names``, the message field numbers of what to return from inside
        its AttrValue instead (``placeviz/_wire.c`` ``attr_values``: ``(8, 2)`` is a Const's
        ``value.tensor.tensor_shape``, without copying the tensor); an empty path, the AttrValue.

        Why: a pass that needs two attrs of a few thousand nodes (``analyze``'s variables: dtype
        and shape) otherwise parses each of those NodeDefs whole, every attr and its map object;
        equal values come back as one bytes object, so a caller can key its work by them.
        """
        if _wire is None:
            return None
        data, nodes = self._wire_data, self._attr_nodes
        spans: bytes | memoryview | None = self._wire_spans
        todo: list[int] = ids
        while isinstance(nodes, RemappedNodeDefs):  # a derived graph: its source's NodeDefs
            todo = list(map(nodes.ids.__getitem__, todo))
            nodes, data, spans = nodes.base, None, None
        if isinstance(nodes, WireNodeDefs):  # its bytes (until the whole parse) and spans
            data = data if data is not None else nodes.data
            spans = nodes.spans
        elif spans is None or len(spans) != 8 * len(self.names):
            return None
        if data is None:
            return None
        held = [j for j in todo if j >= 0]  # a negative id: a node the derivation added
        values: list[tuple[bytes | None, ...] | None] | None = _wire.attr_values(
            data, spans, held, tuple(name.encode() for name in names), paths)
        if values is None or len(held) == len(todo):
            return values
        found = iter(values)
        return [next(found) if j >= 0 else None for j in todo]

    def inputs_of(self, i: int) -> list[tuple[int, int]]:
        """(source id, slot) pairs of node ``i`` in NodeDef order; slot ``CONTROL`` for control."""
        lo, hi = self.in_start[i], self.in_start[i + 1]
        return list(zip(self.in_src[lo:hi], self.in_slot[lo:hi], strict=True))

    def colocation_groups(self, i: int) -> tuple[str, ...]:
        """TF's ``colocation_groups()``: the node's ``_class`` list, or ``loc:@<own name>``."""
        return self.colocation.get(i) or ("loc:@" + self.names[i],)

    @property
    def num_edges(self) -> int:
        return len(self.in_src)

    # ----------------------------------------------------------------- derived structure
    @cached_property
    def edge_arrays(self) -> tuple[I32Array, I32Array, I32Array]:
        """Every edge as numpy arrays ``(src, dst, slot)``, in ``in_src`` order (int32).

        ``src`` and ``slot`` are views of ``in_src``/``in_slot``; ``dst[k]`` is the node whose input
        ``k`` is (the CSR rows spelled out). What the passes that read all edges at once share:
        the out-edge index, the views' box-to-box bundles, the lint rules' per-edge checks.
        """
        import numpy as np

        n = len(self.names)
        src = np.frombuffer(self.in_src, dtype=np.int32)
        slot = np.frombuffer(self.in_slot, dtype=np.int32)
        # (numpy's stubs type this diff of an int32 array as timedelta64)
        counts = cast("I32Array", np.diff(np.frombuffer(self.in_start, dtype=np.int32)))
        dst = np.repeat(np.arange(n, dtype=np.int32), counts)
        return src, dst, slot

    @cached_property
    def consumers(self) -> tuple[array[int], array[int], array[int]]:
        """Out-edges in CSR form ``(out_start, out_dst, out_pos)``.

        The out-edges of node ``i`` are positions ``out_start[i]:out_start[i+1]``: ``out_dst`` is
        the consuming node and ``out_pos`` the index of that edge in ``in_src``/``in_slot`` (which
        gives the slot and tells control from data).
        """
        import numpy as np

        n = len(self.names)
        src, dst_of_pos, _slot = self.edge_arrays
        out_start = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=out_start[1:])
        # Edges grouped by source; a stable sort keeps each source's out-edges in edge order, which
        # is consumer order (``in_start`` is ascending): what filling the lists node by node gave.
        out_pos = np.argsort(src, kind="stable").astype(np.int32)
        out_dst = dst_of_pos[out_pos]
        return (array("i", out_start.astype(np.int32).tobytes()), array("i", out_dst.tobytes()),
                array("i", out_pos.tobytes()))

    def consumers_of(self, i: int) -> list[tuple[int, int]]:
        """(consumer id, slot) pairs reading node ``i``; slot ``CONTROL`` for control edges."""
        out_start, out_dst, out_pos = self.consumers
        in_slot = self.in_slot
        return [(out_dst[k], in_slot[out_pos[k]]) for k in range(out_start[i], out_start[i + 1])]

    @cached_property
    def control_flow(self) -> ControlFlowInfo:
        """Every node's while-loop frame and every frame's parent (TF's ``BuildControlFlowInfo``,
        ``tensorflow/core/graph/control_flow.cc``; :mod:`placeviz.control_flow`), read by the sync
        proof, the traffic report, lint and the partitioner."""
        from placeviz.control_flow import build_control_flow_info  # it imports this module for types only

        return build_control_flow_info(self)

    @cached_property
    def topological_order(self) -> list[int]:
        """Node ids such that every node comes after its inputs, ties broken by node id.

        Edges out of ``NextIteration`` are back edges of while loops and are ignored, as TF does.
        Any other cycle is an error that names some nodes on it.
        """
        import numpy as np

        n = len(self.names)
        ops = self.ops
        in_start = self.in_start
        # TF writes a GraphDef in creation order, every input before its consumer. Then the
        # smallest id not yet ordered is always ready, and the order below is 0, 1, ..., n-1:
        # check that (vectorised over the edges; only the backward edges' sources' ops are read)
        # before doing the general work.
        src_np, consumer_ids, _slot = self.edge_arrays
        input_counts_np = np.diff(np.frombuffer(in_start, dtype=np.int32))
        backward = set(src_np[src_np >= consumer_ids].tolist())  # their sources
        if all(ops[i] in NEXT_ITERATION_OPS for i in backward):
            return list(range(n))
        back_edge_sources = list(compress(range(n), map(NEXT_ITERATION_OPS.__contains__, ops)))
        input_counts = input_counts_np.tolist()
        out_start, out_dst, _ = self.consumers
        # In-degrees are the input counts, less the edges out of back-edge sources (rare).
        indegree = input_counts
        for i in back_edge_sources:
            for d in out_dst[out_start[i]:out_start[i + 1]]:
                indegree[d] -= 1
        skip = set(back_edge_sources)
        ready = [i for i, deg in enumerate(indegree) if deg == 0]  # ascending: already a heap
        order: list[int] = []
        push, pop = heapq.heappush, heapq.heappop
        while ready:
            i = pop(ready)
            order.append(i)
            if i in skip:
                continue
            for d in out_dst[out_start[i]:out_start[i + 1]]:
                deg = indegree[d] - 1
                indegree[d] = deg
                if deg == 0:
                    push(ready, d)
        if len(order) != n:
            stuck = [self.names[i] for i in range(n) if indegree[i] > 0]
            shown = ", ".join(stuck[:5]) + (f" and {len(stuck) - 5} more" if len(stuck) > 5 else "")
            raise GraphError(f"the graph has a cycle that is not a while loop; nodes on or after it: {shown}")
        return order

    def to_networkx(self) -> nx.MultiDiGraph:
        """A ``networkx.MultiDiGraph``: one node per op (attrs ``op``, ``device``), one edge per input.

        Edge attrs: ``slot`` (output index, or -1 for control) and ``control`` (bool). Meant for
        small graphs and ad-hoc analyses, not for 100k+ nodes.
        """
        import networkx as nx

        g = nx.MultiDiGraph()
        for i, name in enumerate(self.names):
            g.add_node(name, op=self.ops[i], device=self.devices[i])
        names = self.names
        for dst in range(len(names)):
            for pos in range(self.in_start[dst], self.in_start[dst + 1]):
                slot = self.in_slot[pos]
                g.add_edge(names[self.in_src[pos]], names[dst], slot=slot, control=slot == CONTROL)
        return g


class RemappedNodeDefs:
    """``attr_nodes`` of a derived graph: item ``i`` is ``base[ids[i]]``, or ``extra[-1 - ids[i]]``
    for a negative id (a node the derivation added, whose NodeDef lives in ``extra``)."""

    __slots__ = ("base", "extra", "ids", "_added")

    def __init__(self, base: NodeDefs, extra: NodeDefs, ids: array[int], added: list[int]):
        """``added``: the positions of the negative ids, ascending (the caller made them)."""
        self.base, self.extra, self.ids = base, extra, ids
        self._added = added

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> NodeDef:
        j = self.ids[i]
        return self.base[j] if j >= 0 else self.extra[-1 - j]

    def __iter__(self) -> Iterator[NodeDef]:
        # Runs of base NodeDefs through C-level maps, the few added ones in between.
        base, extra, ids = self.base, self.extra, self.ids
        pieces: list[Iterable[NodeDef]] = []
        start = 0
        for k in self._added:
            pieces.append(map(base.__getitem__, ids[start:k]))
            pieces.append((extra[-1 - ids[k]],))
            start = k + 1
        pieces.append(map(base.__getitem__, ids[start:]))
        return chain.from_iterable(pieces)


_LIBRARY = GraphDef.DESCRIPTOR.fields_by_name["library"]
_VERSIONS = GraphDef.DESCRIPTOR.fields_by_name["versions"]
_TOP_FIELDS = (_LIBRARY, _VERSIONS)
"""The GraphDef fields besides ``node`` that :meth:`WireNodeDefs.top_field` is asked for (``analyze``
reads both: the library's size and the producer): their records are found in one pass over the
bytes, 0.07 s a pass at a million nodes."""


class WireNodeDefs:
    """``attr_nodes`` of a graph read by :meth:`Graph.from_wire` from bytes not parsed yet.

    Item ``i`` is node ``i``'s NodeDef parsed from its own slice of the bytes (``Graph``'s
    ``_wire_spans``), on first use: the same message as ``graph_def.node[i]`` (each repeated
    ``node`` record is parsed on its own either way), without parsing the other nodes. The passes
    that read a few NodeDefs (the variables' attrs, a Const's tensor, the setter's resource ops)
    pay for those only. Iterating, or asking for more than a fifth of the nodes one by one, makes
    the whole GraphDef (``whole()``, one parse) and reads it from then on: a NodeDef parsed on its
    own costs about 4 us against 0.9 us a node in the whole parse (200k nodes), so past a fifth
    the whole parse is the cheaper, and the worst case costs less than two whole parses.
    """

    __slots__ = ("_data", "_spans", "_whole", "_nodes", "_one_by_one", "_budget", "_top", "_top_spans")

    def __init__(self, data: bytes | memoryview, spans: bytes, whole: Callable[[], GraphDef]):
        self._data: memoryview | None = memoryview(data)
        self._spans = memoryview(spans).cast("I")  # (offset, length) per node, native uint32
        self._whole = whole
        self._nodes: NodeDefs | None = None  # graph_def.node, once parsed
        self._one_by_one: dict[int, NodeDef] = {}
        self._top: dict[int, FunctionDefLibrary | VersionDef | None] = {}  # field number -> top_field result
        self._top_spans: dict[int, list[tuple[int, int]]] = {}  # field number -> its records (_TOP_FIELDS)
        self._budget = len(self._spans) // 10  # NodeDefs left to parse one by one: a fifth of the nodes

    def parsed(self, graph_def: GraphDef) -> None:
        """The graph's GraphDef was made: read it from now on, and let go of the bytes."""
        self._nodes = graph_def.node
        self._data = None
        self._one_by_one.clear()

    @property
    def data(self) -> memoryview | None:
        """The bytes the NodeDefs are read from; None once the whole GraphDef was made."""
        return self._data

    @property
    def spans(self) -> memoryview:
        """Where each NodeDef lies in :attr:`data`: (offset, length) per node, native uint32."""
        return self._spans

    def __len__(self) -> int:
        return len(self._spans) // 2

    def __getitem__(self, i: int) -> NodeDef:
        if self._nodes is not None:
            return self._nodes[i]
        node = self._one_by_one.get(i)
        if node is not None:
            return node
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        if self._budget <= 0:
            self._whole()  # calls parsed()
            return self[i]
        self._budget -= 1
        i %= n
        assert self._data is not None  # let go of only once parsed
        offset, length = self._spans[2 * i], self._spans[2 * i + 1]
        raw = cast("bytes", self._data[offset:offset + length])
        node = self._one_by_one[i] = NodeDef.FromString(raw)
        return node

    def __iter__(self) -> Iterator[NodeDef]:
        if self._nodes is None:
            self._whole()
        assert self._nodes is not None
        return iter(self._nodes)

    def prefetch(self, ids: Iterable[int]) -> None:
        """Parse the NodeDefs of node ``ids`` (valid ids) not parsed yet, in one upb call: their
        records copied into one GraphDef (``_wire.node_records``), whose ``node[k]`` is the k-th
        record's NodeDef (at 200k nodes, 50k of them cost 0.06 s, against 0.22 s one by one and
        0.24 s for the whole GraphDef). Past two thirds of the nodes, the whole GraphDef instead."""
        if self._nodes is not None:
            return
        done = self._one_by_one
        todo = sorted(set(ids).difference(done))
        if not todo:
            return
        if len(done) + len(todo) > 2 * len(self) // 3:
            self._whole()
            return
        assert self._data is not None and _wire is not None  # from_wire: the C reader is built
        records = _wire.node_records(self._data, self._spans, todo)
        done.update(zip(todo, GraphDef.FromString(records).node, strict=True))

    def top_field(self, field: FieldDescriptor) -> FunctionDefLibrary | VersionDef | None:
        """The GraphDef's message field ``field`` (``library``, ``versions``) from the bytes, or
        None for ``versions`` when absent (as :attr:`Graph.versions`): its records merged in
        order, as the whole parse merges them; made once."""
        if field.number in self._top:
            return self._top[field.number]
        assert self._data is not None and _wire is not None  # from_wire: the C reader is built
        spans_of = self._top_spans
        if not spans_of:  # the records of every _TOP_FIELDS field, in one pass over the bytes
            numbers = tuple(f.number for f in _TOP_FIELDS)
            spans_of.update(zip(numbers, _wire.fields_spans(self._data, numbers), strict=True))
        out = GraphDef()
        message: FunctionDefLibrary | VersionDef = getattr(out, field.name)
        spans = spans_of.get(field.number)
        if spans is None:
            spans = field_spans(self._data, field.number)
        for offset, length in spans:
            message.MergeFromString(self._data[offset:offset + length])
        result = None if not spans and field is _VERSIONS else message
        self._top[field.number] = result
        return result


class NodeView:
    """A read-only view of one node of a :class:`Graph`."""

    __slots__ = ("graph", "id")

    def __init__(self, graph: Graph, node_id: int):
        self.graph = graph
        self.id = node_id

    @property
    def name(self) -> str:
        return self.graph.names[self.id]

    @property
    def op(self) -> str:
        return self.graph.ops[self.id]

    @property
    def device(self) -> str:
        return self.graph.devices[self.id]

    @property
    def node_def(self) -> NodeDef:
        return self.graph.node_def(self.id)

    @property
    def attr(self) -> Any:  # the NodeDef's protobuf map of AttrValues: untyped
        return self.node_def.attr

    @property
    def inputs(self) -> list[Input]:
        names = self.graph.names
        return [Input(names[src], slot) for src, slot in self.graph.inputs_of(self.id)]

    @property
    def data_inputs(self) -> list[Input]:
        return [x for x in self.inputs if not x.is_control]

    @property
    def control_inputs(self) -> list[Input]:
        return [x for x in self.inputs if x.is_control]

    @property
    def consumers(self) -> list[tuple[str, int]]:
        names = self.graph.names
        return [(names[d], slot) for d, slot in self.graph.consumers_of(self.id)]

    @property
    def colocation_groups(self) -> tuple[str, ...]:
        return self.graph.colocation_groups(self.id)

    def __repr__(self) -> str:
        return f"<node {self.name} op={self.op} device={self.device!r}>"


_DEVICE_FREE_CACHES = ("colocation", "colocated_names", "located_names", "colocated_name_ids", "edge_arrays",
                       "consumers", "topological_order", "control_flow")
"""The :attr:`Graph.CACHES` entries that do not depend on devices: :meth:`Graph.with_devices` shares them."""

_NO_KEY_ATTRS = (None, ())  # the plan of an op that ``key_attrs`` does not name


def _attr_value_key(av: AttrValue | None) -> object:
    """A hashable stand-in for an AttrValue (or None): equal keys mean equal values.

    A set ``type`` is the whole value (AttrValue is a oneof), and reading it is cheaper than
    serializing; anything else is keyed by its serialized bytes.
    """
    if av is None:
        return None
    return av.type or av.SerializeToString()


def _attr_key(attr: Mapping[str, AttrValue], attrs: tuple[str, ...]) -> object:
    """:meth:`Graph.attr_keys` of one node's ``attr`` map."""
    if len(attrs) == 1:
        return _attr_value_key(attr.get(attrs[0]))
    if attrs:
        return tuple(map(_attr_value_key, map(attr.get, attrs)))
    return None


def _attr_value_key_of_bytes(raw: bytes) -> object:
    """:func:`_attr_value_key` of a serialized AttrValue (what the C reader cannot settle itself)."""
    return _attr_value_key(AttrValue.FromString(raw))


def _decode_class(raw: bytes) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(groups, located names) of a serialized ``_class`` AttrValue, as :meth:`Graph._scan_attrs` reads them."""
    groups = tuple(s.decode("utf-8", "replace") for s in AttrValue.FromString(raw).list.s)
    return groups, _located_names(groups)


def _int_array(raw: bytes) -> array[int]:
    out = array("i")
    out.frombytes(raw)
    return out


def _located_names(groups: tuple[str, ...]) -> tuple[str, ...]:
    """The op names of the ``loc:@`` entries of a ``_class`` list."""
    return tuple(g[5:] for g in groups if g.startswith("loc:@"))


def _raise_duplicate(names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise GraphError(f"two nodes are named {name!r} (node names must be unique)")
        seen.add(name)
