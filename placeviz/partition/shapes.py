"""The attrs a transfer's static shape is read from, for many nodes at once, without their NodeDefs.

:meth:`~placeviz.partition.graph_partition._GraphPartition.shape` (the one text of the rule: which
attr answers, through which ops) reads three attrs of a node: ``_output_shapes`` (one
``TensorShapeProto`` per output, written by ``Graph.as_graph_def(add_shapes=True)``,
``tensorflow/python/framework/ops.py``), a Const's ``value.tensor.tensor_shape``
(``tensorflow/core/framework/tensor.proto``) and the ``shape`` attr of variables and placeholders
(``tensorflow/core/ops/state_ops.cc``, ``array_ops.cc``, ``resource_variable_ops.cc``). This
module reads them; the rule decides which one counts.

Why: the C cut (:meth:`~placeviz.partition.graph_partition._GraphPartition._cut_tables`) asks for
the shape of every (source, slot) a transfer names: 41,736 of them for ``g200k`` with
``--ps-tasks 4``, whose answers come from 15,651 variables' ``shape`` attrs. Reading those attrs
from NodeDefs made each of those NodeDefs (``NodeDef.FromString`` of its bytes: a graph read from
a file is not parsed as a whole), most of the cut's tables' time. :class:`ShapeAttrReader` reads
them with the C reader from the bytes the graph was read from, a batch of nodes in one call
(:meth:`placeviz.graph.Graph.wire_attr_values` with ``paths``: a Const's tensor is never copied,
only its ``tensor_shape``), and parses each distinct serialized value once: a model repeats its
layers, so its variables share a few shapes. When it cannot (no kernels, a graph not read from
bytes, an attr map of a form only a full parse reads), or for a node the bytes do not hold (one a
derived graph added), it reads the NodeDef, with the same result (``tests/test_shape_attrs.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, NamedTuple

from placeviz.protos import AttrValue, TensorShapeProto

if TYPE_CHECKING:
    from placeviz.graph import Graph
    from placeviz.partition.base import Shape


class Absent(enum.Enum):
    """The node has no such attr (its shape is then not read from it)."""

    ABSENT = 0


ABSENT = Absent.ABSENT


class ShapeAttrs(NamedTuple):
    """What a node's attrs say of its outputs' shapes (:func:`shape_list` forms)."""

    output_shapes: tuple[Shape, ...] | None  # ``_output_shapes``, one per output; None: no such attr
    value: Shape | Literal[Absent.ABSENT]  # ``value.tensor.tensor_shape`` (a Const's)
    shape: Shape | Literal[Absent.ABSENT]  # the ``shape`` attr's shape


def shape_list(shape_proto: TensorShapeProto) -> Shape:
    """A ``TensorShapeProto`` as a list of dims (None: an unknown dim), or None: unknown rank."""
    if shape_proto.unknown_rank:
        return None
    return [d.size if d.size >= 0 else None for d in shape_proto.dim]


_FIELDS = AttrValue.DESCRIPTOR.fields_by_name
_NAMES = ("_output_shapes", "value", "shape")
_PATHS = (
    (_FIELDS["list"].number,),  # AttrValue.list (its ``shape`` items are parsed here)
    (_FIELDS["tensor"].number, _FIELDS["tensor"].message_type.fields_by_name["tensor_shape"].number),
    (_FIELDS["shape"].number,),
)
"""Where each attr of :data:`_NAMES` keeps what is read of it, as message field numbers inside its
``AttrValue`` (``tensorflow/core/framework/attr_value.proto``): the C reader returns the message at
that path (an absent field: its empty default message, as protobuf's getters read it)."""


def _parsed(raw: bytes | None) -> Shape | Literal[Absent.ABSENT]:
    """:func:`shape_list` of a serialized ``TensorShapeProto`` (None: no such attr)."""
    return ABSENT if raw is None else shape_list(TensorShapeProto.FromString(raw))


class ShapeAttrReader:
    """:class:`ShapeAttrs` of a graph's nodes, each read once: in batches (:meth:`prefetch`), or one
    by one as asked (``reader[i]``)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._rows: dict[int, ShapeAttrs] = {}
        self._known: dict[tuple[bytes | None, ...], ShapeAttrs] = {}  # the C reader's row -> its parse
        self._wire = True  # until the C reader declines once

    def __getitem__(self, i: int) -> ShapeAttrs:
        row = self._rows.get(i)
        if row is None:
            if self._wire:
                self.prefetch((i,))
            else:
                self._from_node_defs([i])
            row = self._rows[i]
        return row

    def declared(self, ids: list[int]) -> list[Shape]:
        """The ``shape`` attr of each of the nodes ``ids`` (None: it has none), read in one batch."""
        self.prefetch(ids)
        rows = self._rows
        return [None if (row := rows[i]).shape is ABSENT else row.shape for i in ids]

    def prefetch(self, ids: Iterable[int]) -> None:
        """Read the attrs of the nodes ``ids`` not read yet, from the graph's bytes in one call of
        the C reader when it can."""
        rows = self._rows
        todo = [i for i in dict.fromkeys(ids) if i not in rows]
        if not todo:
            return
        raw = self.graph.wire_attr_values(todo, _NAMES, _PATHS) if self._wire else None
        if raw is None:
            self._wire = False  # (no kernels, no bytes, or an odd form): the NodeDefs from now on
            self._from_node_defs(todo)
            return
        known = self._known
        missing = []
        for i, values in zip(todo, raw, strict=True):
            if values is None:  # no bytes hold this node
                missing.append(i)
                continue
            row = known.get(values)  # equal serialized values are one bytes object: a cheap key
            if row is None:
                outs_raw, value_raw, shape_raw = values
                outs = None
                if outs_raw is not None:
                    outs = tuple(map(shape_list, AttrValue.ListValue.FromString(outs_raw).shape))
                row = known[values] = ShapeAttrs(outs, _parsed(value_raw), _parsed(shape_raw))
            rows[i] = row
        if missing:
            self._from_node_defs(missing)

    def _from_node_defs(self, ids: list[int]) -> None:
        """The same rows from the nodes' NodeDefs (parsed together when the graph's bytes were not)."""
        graph = self.graph
        if len(ids) > 1:
            graph.prefetch_node_defs(ids)
        nodes = graph.attr_nodes
        rows = self._rows
        for i in ids:
            attr = nodes[i].attr
            outs = attr.get("_output_shapes")
            value = attr.get("value")
            shape = attr.get("shape")
            rows[i] = ShapeAttrs(
                None if outs is None else tuple(map(shape_list, outs.list.shape)),
                ABSENT if value is None else shape_list(value.tensor.tensor_shape),
                ABSENT if shape is None else shape_list(shape.shape),
            )
