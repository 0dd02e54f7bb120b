"""The partitions as GraphDefs, built or written straight from the input's bytes.

TF's ``Partition`` (``tensorflow/core/graph/graph_partition.cc``) fills one ``GraphDef`` per
partition: the original nodes with their final device and rewired inputs, and the ``_Send``/
``_Recv`` NodeDefs ``AddSend``/``AddRecv`` make (``tensor_name``, ``send_device``,
``send_device_incarnation``, ``recv_device``, ``client_terminated``, ``_src``/``_dst``); each
partition gets the functions its nodes reach (``FunctionLibraryDefinition::ReachableDefinitions``,
``tensorflow/core/framework/function.cc``).

GraphDefs (:meth:`_GraphDefs.materialize`) import into ``tf.compat.v1.import_graph_def``: TF's
internal names with a leading ``_`` (``_recv_x_0``, ``_cloop...``), which the importer reserves for
the runtime, become ``._recv_x_0``, and ``_class`` entries naming nodes of other partitions are
dropped; ``importable=False`` gives TF's names and attrs unchanged. :meth:`_GraphDefs.serialize`
writes the same messages as bytes, one partition at a time and in pieces, without building the
nodes that only change device (their bytes are the input's, :mod:`placeviz.nodewire`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import chain, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Protocol, cast

from placeviz import nodewire
from placeviz.graph import CONTROL
from placeviz.nodewire import NodeWire, encode_field, encode_varint, splice_nodes
from placeviz.partition.base import DT_FLOAT, AttrMeta, TransferMeta, _New, _PartitionerBase
from placeviz.protos import GraphDef, NodeDef

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from placeviz.partition.base import BoolArray, I32Array, I64Array
    from placeviz.protos import AttrValue

    # nodewire.rebuild_nodes's arguments after (data, offsets, lengths, ids), with offsets and lengths
    # first: see _GraphDefs._serialize.
    RebuildArgs = tuple[I64Array, I64Array, npt.NDArray[np.uint8], bool, I32Array, I32Array, I32Array, list[str],
                        list[_New], list[bytes], I32Array]

class _NameSet(Protocol):
    """``name in`` the names of one partition's nodes: a set, or :class:`_NamesIn`."""

    def __contains__(self, name: str, /) -> bool: ...


Fix = Callable[[str], str]  # a node name as written (importable or TF's own)
# _encode_transfer's cache: (op, device, send device, recv device, client, dtype) -> encoded pieces.
TransferParts = dict[tuple[str, int, int, int, bool, int], tuple[bytes, bytes, bytes, bytes, bytes]]


class _GraphDefs(_PartitionerBase):
    """The NodeDefs of the partitions (module docstring)."""

    def _input_strings(self, i: int, fix: Fix) -> list[str]:
        name = self.name
        out: list[str] = []
        pairs: Iterable[tuple[int, int] | list[int]]
        if i < self.n:
            lo, hi = self.in_start[i], self.in_start[i + 1]
            pairs = zip(self.e_src[lo:hi].tolist(), self.e_slot[lo:hi].tolist(), strict=True)
        else:
            pairs = self.added[i - self.n].inputs
        for s, sl in pairs:
            if sl == CONTROL:
                out.append("^" + fix(name(s)))
            elif sl == 0:
                out.append(fix(name(s)))
            else:
                out.append(f"{fix(name(s))}:{sl}")
        cl = self.cloop_ctrl.get(i)
        if cl is not None and cl[1] > 0:
            out.extend(["^" + fix(name(cl[0]))] * cl[1])
        return out

    def _fill_new(self, nd: NodeDef, a: _New, i: int, fix: Fix) -> None:
        if a.copy_of >= 0:
            nd.CopyFrom(self.nodes_pb[a.copy_of])
            del nd.input[:]
        nd.name = a.name
        nd.op = a.op
        nd.device = self.devs.names[a.dev]
        attr = nd.attr
        if a.op in ("_Send", "_HostSend", "_Recv", "_HostRecv"):
            tname, sdev, rdev, src, dst, client = cast("TransferMeta", a.meta)
            attr["tensor_name"].s = tname.encode()
            attr["send_device"].s = self.devs.names[sdev].encode()
            attr["send_device_incarnation"].i = self.incarnation_of(sdev)
            attr["recv_device"].s = self.devs.names[rdev].encode()
            attr["client_terminated"].b = client
            if src is not None and dst is not None:  # both or neither (client nodes)
                attr["_src"].s = src.encode()
                attr["_dst"].s = dst.encode()
            attr["T" if a.op in ("_Send", "_HostSend") else "tensor_type"].type = a.dtype
        elif a.kind in ("ctrl_const", "cloop_const"):
            attr["dtype"].type = DT_FLOAT
            tensor = attr["value"].tensor
            tensor.dtype = DT_FLOAT
            tensor.tensor_shape.dim.add().size = 0
        elif a.kind == "ctrl_identity":
            attr["T"].type = DT_FLOAT
        elif a.meta:
            for key, (kind, value) in cast("AttrMeta", a.meta).items():
                av = attr[key]
                if kind == "s":
                    av.s = cast(str, value).encode("utf-8")
                elif kind == "i":
                    av.i = value
                elif kind == "b":
                    av.b = value
                elif kind == "type":
                    av.type = value
        nd.name = fix(a.name)
        nd.input.extend(self._input_strings(i, fix))

    def serialize(self, node_arrays: dict[str, I64Array]) -> Iterator[tuple[str, Iterator[bytes]]] | None:
        """:meth:`materialize` (importable), serialized, one partition at a time and each in pieces
        of at most ``_CHUNK_NODES`` nodes (whose concatenation is the GraphDef: its ``node`` fields,
        then its other fields), so that a writer holds one piece, not whole partitions. The nodes
        that only change device are not built: their bytes are the input's (``Graph.node_wire``)
        with the new ``device``. ``_Send``/``_Recv`` and the control transfers' ``Const``/
        ``Identity`` are written straight to protobuf's deterministic bytes
        (:func:`placeviz.nodewire.encode_added` in C, :meth:`_node_bytes` in Python); the other
        nodes (rewired inputs, renamed nodes, trimmed ``_class``) are built as :meth:`materialize`
        builds them and serialized deterministically. None when the graph has no bytes or a
        function library (whose reachable functions :meth:`materialize` finds from the
        NodeDefs). A piece holding a node of odd wire form (a group field, which no serializer
        writes) has all its nodes built: the same message, written by protobuf."""
        wire = self.graph.node_wire
        if wire is None or self.graph.library.function:
            return None
        return self._serialize(node_arrays, wire)

    def _serialize(self, node_arrays: dict[str, I64Array], wire: NodeWire) -> Iterator[tuple[str, Iterator[bytes]]]:
        import numpy as np

        n = self.n
        # Nodes whose inputs differ from their bytes' (moved by control flow, control loops, the
        # setter's rewired roots) or whose name changes are built; so are nodes without bytes.
        moved_inputs = (self.e_src != np.frombuffer(self.graph.in_src, dtype=np.int32)) | \
            (self.e_slot != np.frombuffer(self.graph.in_slot, dtype=np.int32))
        rewrite = np.zeros(n, dtype=bool)
        rewrite[self.e_dst[moved_inputs]] = True  # repeated ids set True alike: no unique() (a sort)
        rewrite[[i for i in self.cloop_ctrl if i < n]] = True  # added nodes are built anyway
        rewrite[np.fromiter(wire.stale, dtype=np.int64, count=len(wire.stale))] = True
        fix_names = nodewire.any_leading_underscore(self.names)
        if fix_names:
            rewrite[:] = True  # original names to fix everywhere
        all_offsets = np.frombuffer(wire.offsets, dtype=np.int64)
        build = rewrite | (all_offsets < 0)
        part_of = np.full(n, -1, dtype=np.int64)  # partition number of each original node it holds
        id_arrays = list(node_arrays.values())  # cut in pieces
        for code, ids_np in enumerate(id_arrays):
            part_of[ids_np[ids_np < n]] = code
        elsewhere = self._located_elsewhere(part_of, id_arrays)
        build |= elsewhere  # their _class is trimmed
        all_lengths = np.frombuffer(wire.lengths, dtype=np.int64)
        device_fields = [d.encode("utf-8") for d in self.devs.names]
        incarnations = [self.incarnation_of(d) for d in range(len(device_fields))]
        versions = self.graph.versions
        tail = b"" if versions is None else encode_field(4, versions.SerializeToString(deterministic=True))
        transfer_attrs: TransferParts = {}  # see _encode_transfer
        # Originals rebuilt from their bytes (_rebuilt_originals): those with bytes, outside control loops.
        from_bytes = all_offsets >= 0
        from_bytes[[i for i in self.cloop_ctrl if i < n]] = False
        arrays: RebuildArgs = (all_offsets, all_lengths, rewrite.view(np.uint8), fix_names, np.ascontiguousarray(self.in_start_np,
                  dtype=np.int32), np.ascontiguousarray(self.e_src, dtype=np.int32),
                  np.ascontiguousarray(self.e_slot, dtype=np.int32), self.names, self.added, device_fields,
                  np.ascontiguousarray(self.dev_np, dtype=np.int32))

        def chunks(code: int, ids: I64Array) -> Iterator[bytes]:
            here = _NamesIn(self, ids, part_of, code)

            def node_bytes(i: int) -> bytes:
                return self._node_bytes(i, rewrite, here, transfer_attrs)

            def made_fields(ids_np: I64Array, original: BoolArray, slow: BoolArray, offsets: I64Array) -> list[bytes]:
                """splice_nodes's ``extra`` for the ``slow`` items: the rebuilt originals'
                (``_REBUILT``, from _rebuilt_originals) and the others' (``_MADE``, from
                _node_fields), each a bytes of node fields; ``offsets`` is set to say which."""
                remade = np.zeros(len(ids_np), dtype=bool)
                remade[original] = from_bytes[ids_np[original]]
                remade &= slow
                rebuilt = self._rebuilt_originals(wire, ids_np[remade].tolist(), arrays, here, elsewhere)
                if rebuilt is not None:
                    offsets[remade] = _REBUILT
                    slow = slow & ~remade
                made = self._node_fields(ids_np[slow].tolist(), node_bytes, device_fields, incarnations)
                return [made, rebuilt or b""]

            for lo in range(0, max(len(ids), 1), _CHUNK_NODES):
                ids_np = ids[lo:lo + _CHUNK_NODES]
                end = tail if lo + _CHUNK_NODES >= len(ids) else b""
                original = ids_np < n
                slow = ~original
                slow[original] = build[ids_np[original]]
                fast_ids = np.where(slow, 0, ids_np)
                offsets = np.where(slow, _MADE, all_offsets[fast_ids])
                lengths = np.where(slow, 0, all_lengths[fast_ids])
                devices = np.where(slow, 0, self.dev_np[fast_ids]).astype(np.int32)
                extra = made_fields(ids_np, original, slow, offsets)
                data = splice_nodes(wire.data, offsets, lengths, devices, device_fields, extra, end)
                if data is None:  # a node of odd wire form (a group field): build every node
                    data = splice_nodes(b"", np.full(len(ids_np), _MADE, dtype=np.int64), np.zeros_like(ids_np),
                                        np.zeros(len(ids_np), dtype=np.int32), device_fields,
                                        [self._node_fields(ids_np.tolist(), node_bytes, device_fields, incarnations)],
                                        end)
                    assert data is not None  # every node built here: no wire form is left to refuse
                yield data
                del data, extra  # before the next chunk's

        for code, (key, ids) in enumerate(node_arrays.items()):
            yield key, chunks(code, ids)

    def _rebuilt_originals(self, wire: NodeWire, ids: list[int], arrays: RebuildArgs, here: _NamesIn,
                           elsewhere: BoolArray) -> bytes | None:
        """The original nodes ``ids`` that :meth:`_node_bytes` would build from a copy of their
        NodeDef, as GraphDef ``node`` fields in the order of ``ids`` (what
        :func:`placeviz.nodewire.splice_nodes` copies from ``extra``): the C kernel
        (``nodewire.rebuild_nodes``) writes each from its bytes with its new device and, when
        rewired, its new inputs (and fixed name); protobuf parses them all at once and serializes
        each deterministically, after the ``_class`` trim, so the bytes are those of
        :meth:`_node_bytes`. The trim runs only on the nodes ``elsewhere`` marks
        (:meth:`_located_elsewhere`: a ``_class`` entry naming a node outside the partition); on
        the others it keeps every entry, and asking costs a Python loop per node (20k rewired
        nodes with ``_class`` at 200k). The GraphDef holding them is serialized at once and is
        those fields: a repeated field's items are written one after the other, each as it is
        alone (``GraphDef.node`` is field 1 of GraphDef, and protobuf writes a repeated message
        item as tag, length, the item's own bytes), so each is the node's
        ``SerializeToString(deterministic=True)``, without a Python object and a call per node
        (28k at 200k). None without the kernel: then :meth:`_node_bytes` builds them."""
        if not ids:
            return b""
        blob = nodewire.rebuild_nodes(wire.data, arrays[0], arrays[1], ids, *arrays[2:])
        if blob is None:
            return None
        import numpy as np

        graph = GraphDef.FromString(blob)
        nodes = graph.node
        for k in np.flatnonzero(elsewhere[ids]).tolist():
            nd = nodes[k]
            if "_class" in nd.attr:
                _keep_local_colocation(nd, here)
        data: bytes = graph.SerializeToString(deterministic=True)
        return data

    def _node_fields(self, ids: list[int], node_bytes: Callable[[int], bytes], device_fields: list[bytes],
                     incarnations: list[int]) -> bytes:
        """The serialized NodeDefs of ``ids`` as node fields (:func:`placeviz.nodewire.node_fields`):
        added transfers in C when ``placeviz._wire`` is built, the rest (or all) by ``node_bytes``."""
        out = nodewire.encode_added(ids, self.n, self.added, self.names, device_fields, incarnations,
                                    self.cloop_ctrl, node_bytes, _CTRL_CONST_ATTRS, _CTRL_IDENTITY_ATTRS)
        return out if out is not None else nodewire.node_fields(map(node_bytes, ids))

    def _located_elsewhere(self, part_of: I64Array, lists: list[I64Array]) -> BoolArray:
        """Nodes whose ``_class`` names a node outside their partition (``part_of``: partition
        number per original node, -1 for none; ``lists``: the partitions' node ids):
        :meth:`materialize` trims those entries (:func:`_keep_local_colocation`), so their bytes
        cannot be the input's. The same test as
        ``names <= set(names of the partition's nodes)``, as array operations over the
        (node, named node) pairs; added nodes whose name a ``_class`` names are looked up by name."""
        import numpy as np

        n = self.n
        out = np.zeros(n, dtype=bool)
        located = self.graph.colocated_names
        if not located:
            return out
        # The pairs node by node: each name looked up once per naming node (113k pairs at 200k),
        # which costs less than finding the 21k distinct tuples first (each tuple hashed twice).
        values = located.values()
        pair_names = list(chain.from_iterable(values))
        pair_node = np.repeat(np.fromiter(located.keys(), dtype=np.int64, count=len(located)),
                              np.fromiter(map(len, values), dtype=np.int64, count=len(located)))
        index_get = self.graph.colocated_name_ids.get  # not the whole name index: a dict of every node
        target = np.fromiter(map(index_get, pair_names, repeat(-1, len(pair_names))), dtype=np.int64,
                             count=len(pair_names))
        bad = (target < 0) | (part_of[np.maximum(target, 0)] != part_of[pair_node])
        # An added node's name a _class names, on a pair found bad: is that node in the same
        # partition? (No bad pair, the usual case: no scan of the added nodes' names.)
        bad_pairs = np.flatnonzero(bad).tolist()
        colliding = {pair_names[k] for k in bad_pairs}.intersection(map(_NAME, self.added)) if bad_pairs else set()
        if colliding:
            here: dict[int, _NamesIn] = {}
            for k in bad_pairs:
                i, name = int(pair_node[k]), pair_names[k]
                p = int(part_of[i])
                if name in colliding and p >= 0:
                    if p not in here:
                        here[p] = _NamesIn(self, lists[p], part_of, p)
                    if name in here[p]:
                        bad[k] = False
        out[pair_node[bad]] = True
        return out

    def _node_bytes(self, i: int, rewrite: BoolArray, here: _NameSet, transfer_attrs: TransferParts) -> bytes:
        """The serialized NodeDef of node ``i`` in a partition whose names ``here`` holds, as
        :meth:`materialize` builds it (the Python reference of :func:`placeviz.nodewire.encode_added`)."""
        n = self.n
        fix = _importable_name
        if i >= n:
            a = self.added[i - n]
            if a.op in _TRANSFER_OPS and a.copy_of < 0:
                return self._encode_transfer(a, i, fix, transfer_attrs)
        nd = NodeDef()
        if i < n:
            nd.CopyFrom(self.nodes_pb[i])
            nd.device = self.devs.names[self.dev_l[i]]
            if rewrite[i]:
                nd.name = fix(nd.name)
                del nd.input[:]
                nd.input.extend(self._input_strings(i, fix))
        else:
            self._fill_new(nd, self.added[i - n], i, fix)
        if "_class" in nd.attr:
            _keep_local_colocation(nd, here)
        data: bytes = nd.SerializeToString(deterministic=True)
        return data

    def _encode_transfer(self, a: _New, i: int, fix: Fix, cache: TransferParts) -> bytes:
        """The deterministic serialization of the ``_Send``/``_Recv`` NodeDef :meth:`_fill_new`
        builds, written directly: tens of thousands of them per graph, and making each as a
        message costs 20 us. Fields in number order, attrs in the key order of protobuf's
        (upb's) deterministic serialization (``tests/test_partition_kernels.py`` compares the bytes
        with ``SerializeToString(deterministic=True)`` of the built NodeDef). The attrs that
        depend only on (op, devices, client, dtype) are encoded once per such key, in ``cache``.
        """
        tname, sdev, rdev, src, dst, client = cast("TransferMeta", a.meta)
        key = (a.op, a.dev, sdev, rdev, client, a.dtype)
        parts = cache.get(key)
        if parts is None:
            names = self.devs.names
            is_send = a.op in ("_Send", "_HostSend")
            typed = _attr_entry(b"T" if is_send else b"tensor_type", _varint_value(6, a.dtype))  # AttrValue.type
            middle = (_attr_entry(b"client_terminated", _varint_value(5, int(client)))  # AttrValue.b
                      + _attr_entry(b"recv_device", encode_field(2, names[rdev].encode()))  # AttrValue.s
                      # upb sorts a longer key before its prefix (upb/message/internal/map_sorter.c)
                      + _attr_entry(b"send_device_incarnation", _varint_value(3, self.incarnation_of(sdev)))
                      + _attr_entry(b"send_device", encode_field(2, names[sdev].encode())))
            head = encode_field(2, a.op.encode())
            device = encode_field(4, names[a.dev].encode())
            # "T" sorts before "_dst", "tensor_type" after "tensor_name" (keys compare as bytes)
            parts = cache[key] = (head, device, typed if is_send else b"", middle, b"" if is_send else typed)
        head, device, first, middle, last = parts
        out = [encode_field(1, fix(a.name).encode("utf-8")), head]
        out.extend(encode_field(3, x.encode("utf-8")) for x in self._input_strings(i, fix))
        out.append(device)
        out.append(first)
        if src is not None and dst is not None:  # both or neither (client nodes)
            out.append(_string_attr(_KEY_DST, dst.encode("utf-8")))
            out.append(_string_attr(_KEY_SRC, src.encode("utf-8")))
        out.append(middle)
        out.append(_string_attr(_KEY_TENSOR_NAME, tname.encode("utf-8")))
        out.append(last)
        return b"".join(out)

    def materialize(self, node_lists: dict[str, list[int]], importable: bool = True) -> dict[str, GraphDef]:
        """One GraphDef per partition. ``importable``: rename TF's internal names (``_recv_x_0``,
        ``_cloop...``: a leading ``_`` is reserved for the runtime, so ``import_graph_def`` refuses
        it) to ``._recv_x_0``, and drop ``_class`` colocation entries naming nodes of other
        partitions (the devices are final). Otherwise names and attrs are exactly TF's."""
        graph_def = self.graph.graph_def
        full_nodes = graph_def.node  # current devices and inputs, unlike ``nodes_pb``
        out: dict[str, GraphDef] = {}
        n = self.n
        dev_names = self.devs.names
        fix = _importable_name if importable else _same
        import numpy as np

        moved_inputs = (self.e_src != np.frombuffer(self.graph.in_src, dtype=np.int32)) | \
            (self.e_slot != np.frombuffer(self.graph.in_slot, dtype=np.int32))
        rewrite: set[int] | range = set(self.e_dst[moved_inputs].tolist()) | set(self.cloop_ctrl)
        if importable and any(name[:1] == "_" for name in self.names):
            rewrite = range(n)  # original names to fix everywhere
        for key, ids in node_lists.items():
            gd = GraphDef()
            if graph_def.HasField("versions"):
                gd.versions.CopyFrom(graph_def.versions)
            nodes = gd.node
            here = {self.name(i) for i in ids} if importable else None
            for i in ids:
                nd = nodes.add()
                if i < n:
                    nd.CopyFrom(full_nodes[i])
                    nd.device = dev_names[self.dev_l[i]]
                    if i in rewrite:
                        nd.name = fix(nd.name)
                        del nd.input[:]
                        nd.input.extend(self._input_strings(i, fix))
                else:
                    self._fill_new(nd, self.added[i - n], i, fix)
                if here is not None and "_class" in nd.attr:  # importable
                    _keep_local_colocation(nd, here)
            _add_library(gd, graph_def)
            out[key] = gd
        return out


_TRANSFER_OPS = frozenset({"_Send", "_HostSend", "_Recv", "_HostRecv"})
_NAME = attrgetter("name")
_MADE, _REBUILT = -1, -2
"""``splice_nodes`` offsets of the nodes a chunk writes from its ``extra`` (``-1 - j``: ``extra[j]``,
:meth:`_GraphDefs._serialize`): made by :meth:`_GraphDefs._node_fields`, or rebuilt from their bytes
(:meth:`_GraphDefs._rebuilt_originals`)."""
_CHUNK_NODES = 1 << 12
"""Nodes per piece of a written partition (:meth:`_GraphDefs.serialize`): about 1.5 MB on the
benchmark graphs, so that write(2) copies a piece into the page cache while it is still in the
CPU's cache, and no piece needs fresh pages (at 1 << 16, 25 MB pieces: the write side took about
8% more CPU, ``benchmarks/README.md``)."""


class _NamesIn:
    """``name in`` the names of one partition's nodes (``ids``, partition number ``code``), as the
    set of them answers it, for the names ``_class`` entries name (``Graph.located_names``),
    without making that set: an original node by ``Graph.colocated_name_ids`` and ``part_of``,
    added nodes by a set of their names made on first need."""

    __slots__ = ("builder", "ids", "part_of", "code", "added")

    def __init__(self, builder: _GraphDefs, ids: I64Array, part_of: I64Array, code: int) -> None:
        self.builder, self.ids, self.part_of, self.code = builder, ids, part_of, code
        self.added: set[str] | None = None

    def __contains__(self, name: str) -> bool:
        b = self.builder
        j = b.graph.colocated_name_ids.get(name)  # the names a _class can name
        if j is not None and self.part_of[j] == self.code:
            return True
        if self.added is None:
            n, added = b.n, b.added
            self.added = {added[i - n].name for i in self.ids[self.ids >= n].tolist()}
        return name in self.added


def _ctrl_attrs(kind: str) -> bytes:
    """The encoded ``attr`` fields of a control transfer's ``Const`` or ``Identity``, as
    :meth:`_GraphDefs._fill_new` sets them, serialized by protobuf (deterministic)."""
    nd = NodeDef()
    if kind == "ctrl_const":
        nd.attr["dtype"].type = DT_FLOAT
        tensor = nd.attr["value"].tensor
        tensor.dtype = DT_FLOAT
        tensor.tensor_shape.dim.add().size = 0
    else:
        nd.attr["T"].type = DT_FLOAT
    data: bytes = nd.SerializeToString(deterministic=True)
    return data


_CTRL_CONST_ATTRS, _CTRL_IDENTITY_ATTRS = _ctrl_attrs("ctrl_const"), _ctrl_attrs("ctrl_identity")


def _attr_entry(key: bytes, value: bytes) -> bytes:
    """One ``NodeDef.attr`` map entry on the wire (field 5: key field 1, AttrValue field 2)."""
    return encode_field(5, encode_field(1, key) + encode_field(2, value))


_KEY_DST, _KEY_SRC, _KEY_TENSOR_NAME = (encode_field(1, k) for k in (b"_dst", b"_src", b"tensor_name"))


def _string_attr(key_field: bytes, value: bytes) -> bytes:
    """:func:`_attr_entry` of an AttrValue ``s``, with its key already encoded (the hot case)."""
    av = b"\x12" + encode_varint(len(value)) + value  # AttrValue.s
    entry = key_field + b"\x12" + encode_varint(len(av)) + av
    return b"\x2a" + encode_varint(len(entry)) + entry


def _varint_value(number: int, value: int) -> bytes:
    """An AttrValue holding one varint field (``b``, ``i`` or ``type``), as protobuf writes an
    int64 (negative: ten bytes, two's complement)."""
    return encode_varint(number << 3) + encode_varint(value & 0xFFFFFFFFFFFFFFFF)


def _same(name: str) -> str:
    return name


def _importable_name(name: str) -> str:
    return "." + name if name.startswith("_") else name


def _keep_local_colocation(nd: NodeDef, here: _NameSet) -> None:
    groups = nd.attr["_class"].list.s
    keep = [g for g in groups if not g.startswith(b"loc:@") or g[5:].decode("utf-8", "replace") in here]
    if len(keep) == len(groups):
        return
    if keep:
        del groups[:]
        groups.extend(keep)
    else:
        del nd.attr["_class"]


def _add_library(gd: GraphDef, source: GraphDef) -> None:
    """Copy the functions the partition's nodes reach (directly, through attrs, or nested), as TF's
    ``ReachableDefinitions`` does, with their gradients."""
    lib = source.library
    if not lib.function:
        return
    by_name = {f.signature.name: f for f in lib.function}
    wanted: list[str] = []
    seen: set[str] = set()

    def want(fname: str) -> None:
        if fname in by_name and fname not in seen:
            seen.add(fname)
            wanted.append(fname)

    def visit_attrs(attrs: Mapping[str, AttrValue]) -> None:
        for av in attrs.values():
            kind = av.WhichOneof("value")
            if kind == "func":
                want(av.func.name)
            elif kind == "list":
                for f in av.list.func:
                    want(f.name)

    def visit_node(nd: NodeDef) -> None:
        want(nd.op)
        visit_attrs(nd.attr)

    for nd in gd.node:
        visit_node(nd)
    k = 0
    while k < len(wanted):
        f = by_name[wanted[k]]
        k += 1
        for nd in f.node_def:
            visit_node(nd)
        visit_attrs(f.attr)
    for fname in wanted:
        gd.library.function.add().CopyFrom(by_name[fname])
    for grad in lib.gradient:
        if grad.function_name in seen:
            gd.library.gradient.add().CopyFrom(grad)
