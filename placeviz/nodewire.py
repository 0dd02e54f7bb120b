"""Serialized NodeDefs: where each node's bytes lie in a GraphDef file, and GraphDefs written from them.

Why: a partition holds most of the graph's nodes unchanged but for their device. Copying every
NodeDef into a new message (``CopyFrom``), then serializing the whole GraphDef, costs about 10 us
per node in Python; copying the node's bytes without its ``device`` field and appending the new
one costs a fraction of a microsecond in C. Protobuf's wire format allows it: a message is the
concatenation of its fields, in any order (``google/protobuf/io/coded_stream.h``; TF reads
GraphDefs with the same parser, ``tensorflow/core/framework/graph.proto``), so the spliced bytes
parse to exactly the NodeDef that setting ``device`` on a copy gives (tests/test_nodewire.py and
tests/test_partition_kernels.py compare the two; tests/test_partition_fidelity.py imports written
partitions into TF).

Determinism: a written node is a function of the input file's bytes only (their attr order is
the file's), so two runs, or the C and Python paths, write the same bytes. Nodes placeviz builds
itself (``_Send``/``_Recv``, rewired nodes) are serialized with protobuf's deterministic
serialization (attrs in key order), as :func:`placeviz.io.proto_bytes` writes whole messages:
:func:`encode_added` writes the added transfer nodes' bytes directly in that order, and
:func:`rebuild_nodes` gives rewired originals from their bytes for protobuf to parse and
serialize, both without a Python object per node.

:func:`splice_nodes_py` and :func:`field_spans_py` are the reference loops; ``placeviz._wire``
does the same in C when built (see ``placeviz/native.py``).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from placeviz.native import kernels

if TYPE_CHECKING:  # numpy is imported by the callers that pass its arrays, not here
    import numpy as np
    import numpy.typing as npt

Int64s = Union["array[int]", "npt.NDArray[np.int64]"]  # an array('q') or a numpy int64 array
Int32s = Union["array[int]", "npt.NDArray[np.int32]"]
# A serialized message: the kernels read any buffer (``memoryview(data)`` in Python).
Buffer = bytes | bytearray | memoryview

_wire = kernels("_wire")
# A ``_wire`` built before ``splice_nodes`` existed (a stale build): the Python loop does the work.
_splice = getattr(_wire, "splice_nodes", None)

NODE_FIELD = 1  # GraphDef.node
DEVICE_FIELD = 4  # NodeDef.device
_LEN = 2  # wire type of length-delimited fields


@dataclass(frozen=True)
class NodeWire:
    """The serialized NodeDef of each node of a graph: ``data[offsets[i]:offsets[i] + lengths[i]]``.

    ``offsets[i] == -1``: node ``i`` has no bytes there (a node a pass added). ``stale``: nodes
    whose bytes hold inputs that are no longer theirs (the setter rewires a few ``group`` roots);
    their names, ops and attrs are current, their device is always rewritten.
    """

    data: bytes | memoryview
    offsets: array[int]
    lengths: array[int]
    stale: frozenset[int] = frozenset()

    def remapped(self, ids: npt.ArrayLike, stale: frozenset[int]) -> NodeWire:
        """The wire of a graph whose node ``i`` is this graph's node ``ids[i]`` (a negative id: a
        node with no bytes here)."""
        import numpy as np

        ids = np.asarray(ids, dtype=np.int64)
        known = ids >= 0
        take = np.where(known, ids, 0)
        offsets = np.where(known, np.frombuffer(self.offsets, dtype=np.int64)[take], -1)
        lengths = np.where(known, np.frombuffer(self.lengths, dtype=np.int64)[take], 0)
        return NodeWire(self.data, array("q", offsets.tobytes()), array("q", lengths.tobytes()), stale)


def of_graph_def(data: bytes | memoryview, node_count: int, spans: bytes | None = None) -> NodeWire | None:
    """Where each node of the serialized GraphDef ``data`` lies; None when its ``node`` fields do
    not match ``node_count`` nodes (then nothing is written from the bytes). ``spans``: the
    (offset, length) pairs as native uint32 bytes, when the C reader already found them
    (``placeviz._wire.scan_graph``)."""
    if spans is not None and len(spans) == 8 * node_count:
        import numpy as np

        pairs = np.frombuffer(spans, dtype=np.uint32).reshape(-1, 2).astype(np.int64)
        return NodeWire(data, array("q", pairs[:, 0].tobytes()), array("q", pairs[:, 1].tobytes()))
    pair_list = field_spans(data, NODE_FIELD)
    if len(pair_list) != node_count:
        return None
    offsets = array("q", (s[0] for s in pair_list))
    lengths = array("q", (s[1] for s in pair_list))
    return NodeWire(data, offsets, lengths)


def field_spans(data: Buffer, field: int) -> list[tuple[int, int]]:
    """The payloads (offset, length) of every length-delimited occurrence of a top-level ``field``
    of a serialized message, in order; empty on an odd wire form."""
    if _wire is not None:
        spans: list[tuple[int, int]] = _wire.field_spans(data, field)  # a C kernel's result: untyped
        return spans
    return field_spans_py(data, field)


def field_spans_py(data: Buffer, field: int) -> list[tuple[int, int]]:
    """:func:`field_spans` in Python (``placeviz/_wire.c`` ``field_spans`` transliterates it)."""
    view = memoryview(data).cast("B")
    end = len(view)
    p = 0
    out: list[tuple[int, int]] = []
    try:
        while p < end:
            tag, p = _varint(view, p, end)
            number, wire_type = tag >> 3, tag & 7
            if number == 0 or number > 0x1FFFFFFF:
                return []
            if number == field and wire_type == _LEN:
                length, p = _varint(view, p, end)
                if length > end - p:
                    return []
                out.append((p, length))
                p += length
            else:
                p = _skip(view, p, end, wire_type)
    except ValueError:
        return []
    return out


def splice_nodes(data: Buffer, offsets: Int64s, lengths: Int64s, devices: Int32s, device_names: list[bytes],
                 extra: list[bytes], tail: bytes = b"") -> bytes | None:
    """The ``node`` fields of a GraphDef: item ``k`` is the NodeDef at ``offsets[k]``/``lengths[k]``
    in ``data`` without its ``device`` field, followed by ``device: device_names[devices[k]]``; an
    offset of ``-1 - j`` takes the next ``node`` field of ``extra[j]`` whole (each item of
    ``extra``: ``node`` fields one after the other, as :func:`encode_added` writes them and as a
    GraphDef of nodes only serializes: no bytes object per node). ``offsets`` and ``lengths`` are
    int64 arrays, ``devices`` int32. ``tail`` (the GraphDef's other fields) is appended, so that a
    partition of a million nodes is not copied once more. None on an odd wire form of a node in
    ``data`` (a group field); ValueError when ``extra[j]`` has no next ``node`` field."""
    if _wire is not None and _splice is not None:
        spliced: bytes | None = _splice(data, offsets, lengths, devices, device_names, extra, tail)  # C: untyped
        return spliced
    return splice_nodes_py(data, offsets, lengths, devices, device_names, extra, tail)


def node_fields(nodes: Iterable[bytes]) -> bytes:
    """Serialized NodeDefs as :func:`splice_nodes` takes them from ``extra``: each a GraphDef
    ``node`` field (tag, length, NodeDef), one after the other."""
    return b"".join([encode_field(NODE_FIELD, body) for body in nodes])


def any_leading_underscore(names: list[str]) -> bool:
    """Whether a name of ``names`` starts with ``_`` (TF reserves such names for the runtime, so
    :mod:`placeviz.partition.graphdefs` renames them): ``placeviz._wire.any_leading_underscore``
    reads each name's first character (200k names: about 1 ms), else
    :func:`any_leading_underscore_py`."""
    check = getattr(_wire, "any_leading_underscore", None) if _wire is not None else None
    if check is None:
        return any_leading_underscore_py(names)
    found: bool = check(names)  # a C kernel's result: untyped
    return found


def any_leading_underscore_py(names: list[str]) -> bool:
    """:func:`any_leading_underscore` in Python: a C-level substring search over the names joined
    by NULs, a slice at a time (joining a million names at once holds some 50 MB for nothing)."""
    step = 1 << 12
    return any("\0_" in "\0" + "\0".join(names[lo:lo + step]) for lo in range(0, len(names), step))


# ``added``: the partitioner's added-node records (``placeviz.partition.base._New``, which imports this
# module), read by the kernel attribute by attribute.
def encode_added(ids: list[int], n: int, added: list[Any], names: list[str], device_names: list[bytes],
                 incarnations: list[int], skip: Container[int], fallback: Callable[[int], bytes], const_attrs: bytes,
                 identity_attrs: bytes) -> bytes | None:
    """The serialized NodeDef of each node of ``ids`` as :func:`node_fields` frames them, one
    ``bytes`` for all (``placeviz._wire.encode_added``): the partitioner's added ``_Send``/``_Recv``
    and control-transfer ``Const``/``Identity`` written in C, every other node (and any id in
    ``skip``) by ``fallback(id)``. None when the kernel is not built: the caller then makes every
    node in Python (``placeviz.partition.graphdefs._GraphDefs._node_bytes``, the reference)."""
    encode = getattr(_wire, "encode_added", None) if _wire is not None else None
    if encode is None:
        return None
    encoded: bytes = encode(ids, n, added, names, device_names, incarnations, skip, fallback, const_attrs,
                            identity_attrs)  # a C kernel's result: untyped
    return encoded


def rebuild_nodes(data: Buffer, offsets: Int64s, lengths: Int64s, ids: list[int], rewrite: npt.NDArray[np.uint8],
                  fix_names: bool, in_start: Int32s, e_src: Int32s, e_slot: Int32s, names: list[str], added: list[Any],
                  device_names: list[bytes], devices: Int32s) -> bytes | None:
    """The ``node`` fields of a GraphDef of the original nodes ``ids``, each its input bytes with a
    new ``device`` and, where ``rewrite``, new inputs (``placeviz._wire.rebuild_nodes``); the
    caller parses and re-serializes them. None when the kernel is not built (the caller then
    builds those nodes from their NodeDefs, ``placeviz.partition.graphdefs._GraphDefs._node_bytes``)."""
    rebuild = getattr(_wire, "rebuild_nodes", None) if _wire is not None else None
    if rebuild is None:
        return None
    rebuilt: bytes = rebuild(data, offsets, lengths, ids, rewrite, fix_names, in_start, e_src, e_slot, names, added,
                             device_names, devices)  # a C kernel's result: untyped
    return rebuilt


def splice_nodes_py(data: Buffer, offsets: Int64s, lengths: Int64s, devices: Int32s, device_names: list[bytes], extra: list[bytes],
                    tail: bytes = b"") -> bytes | None:
    """:func:`splice_nodes` in Python (``placeviz/_wire.c`` ``splice_nodes`` transliterates it)."""
    view = memoryview(data).cast("B")
    device_fields = [bytes([DEVICE_FIELD << 3 | _LEN]) + encode_varint(len(d)) + d for d in device_names]
    cursors = [0] * len(extra)
    out = bytearray()
    for offset, length, device in zip(offsets, lengths, devices, strict=True):
        if offset < 0:
            j = -1 - offset
            if j >= len(extra):
                raise ValueError("extra: no such source")
            out += _next_node_field(extra[j], cursors, j)
            continue
        kept = _without_field(view, offset, offset + length, DEVICE_FIELD)
        if kept is None:
            return None
        body = kept + device_fields[device]
        out += b"\x0a"
        out += encode_varint(len(body))
        out += body
    out += tail
    return bytes(out)


def _next_node_field(source: bytes, cursors: list[int], j: int) -> bytes:
    """The ``node`` field of ``source`` at ``cursors[j]``, whole; the cursor moves past it."""
    p = start = cursors[j]
    end = len(source)
    try:
        if p >= end or source[p] != NODE_FIELD << 3 | _LEN:
            raise ValueError
        size, p = _varint(source, p + 1, end)
        if size > end - p:
            raise ValueError
    except ValueError:
        raise ValueError("extra: too few node fields") from None
    cursors[j] = p + size
    return source[start:p + size]


def _without_field(view: memoryview, p: int, end: int, field: int) -> bytes | None:
    kept = bytearray()
    try:
        while p < end:
            start = p
            tag, p = _varint(view, p, end)
            number, wire_type = tag >> 3, tag & 7
            if number == 0 or number > 0x1FFFFFFF or wire_type in (3, 4):
                return None
            p = _skip(view, p, end, wire_type)
            if number != field:
                kept += view[start:p]
    except ValueError:
        return None
    return bytes(kept)


def _varint(view: bytes | memoryview, p: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while p < end and shift < 64:
        b = view[p]
        p += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, p
        shift += 7
    raise ValueError("truncated varint")


def _skip(view: memoryview, p: int, end: int, wire_type: int) -> int:
    if wire_type == 0:
        return _varint(view, p, end)[1]
    if wire_type == 1:
        size = 8
    elif wire_type == _LEN:
        size, p = _varint(view, p, end)
    elif wire_type == 5:
        size = 4
    else:
        raise ValueError("group or unknown wire type")
    if size > end - p:
        raise ValueError("truncated field")
    return p + size


def encode_varint(value: int) -> bytes:
    """A non-negative int as a protobuf varint."""
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = [bytes((v,)) for v in range(0x80)]


def encode_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (``number``, ``payload``) on the wire."""
    size = len(payload)
    if number < 16 and size < 0x80:  # one-byte tag and length: most fields of a NodeDef
        return bytes((number << 3 | _LEN, size)) + payload
    return encode_varint(number << 3 | _LEN) + encode_varint(size) + payload
