"""Partitions written from serialized NodeDefs (``placeviz.nodewire``): the C splice
(``placeviz._wire.splice_nodes``, ``field_spans``) against the Python loops it transliterates, and
both against protobuf itself: a spliced node must parse to exactly the NodeDef that setting
``device`` on a parsed copy gives. Inputs: hand-made wire forms (repeated and missing ``device``
fields, unknown fields, fields out of order, merged messages, groups, truncation) and random
NodeDefs. No TensorFlow here (``tests/test_partition_fidelity.py`` imports written partitions
into TF).
"""

from __future__ import annotations

import random
from array import array

import pytest

from placeviz import nodewire
from placeviz.protos import GraphDef, NodeDef

_wire = pytest.importorskip("placeviz._wire")


def _field(number: int, payload: bytes) -> bytes:
    return nodewire.encode_field(number, payload)


def _varint_field(number: int, value: int) -> bytes:
    return nodewire.encode_varint(number << 3) + nodewire.encode_varint(value)


def _random_node(rng: random.Random, k: int) -> NodeDef:
    nd = NodeDef(name=f"n{k}/é{rng.randrange(1000)}", op=rng.choice(["Const", "MatMul", "NoOp", "Identity"]),
                 input=[f"i{j}" for j in range(rng.randrange(4))] + ["^c"] * rng.randrange(2),
                 device=rng.choice(["", "/job:ps/task:0", "/job:worker/replica:0/task:0/device:CPU:0"]))
    for a in range(rng.randrange(6)):
        nd.attr[f"a{a}"].i = rng.randrange(-5, 1 << 40)
    if rng.random() < 0.3:
        nd.attr["_class"].list.s.extend([b"loc:@x", b"loc:@y"])
    return nd


def _odd_nodes() -> list[bytes]:
    """Wire forms a serializer would not write but a parser accepts (plus a few it refuses)."""
    base = NodeDef(name="a", op="NoOp", input=["b"]).SerializeToString()
    return [
        base,
        b"",  # an empty NodeDef
        base + _field(4, b"/job:x") + _field(4, b"/job:y"),  # repeated singular field: the last wins
        _field(4, b"/job:first") + base,  # device before the name
        base + _field(99, b"unknown") + _varint_field(98, 7),  # unknown fields are kept
        base + _field(3, b"c") + _field(1, b"renamed"),  # merged messages: inputs append, name replaced
        base + bytes([0x0D]) + b"\x00\x00\x80\x3f",  # an unknown fixed32 field
        base + bytes([0x09]) + b"\x00" * 8,  # an unknown fixed64 field
    ]


def _both(data, offsets, lengths, devices, names, extra, tail=b""):
    args = (data, array("q", offsets), array("q", lengths), array("i", devices), names, extra, tail)
    return _wire.splice_nodes(*args), nodewire.splice_nodes_py(*args)


def test_spliced_nodes_parse_as_a_copy_with_the_new_device():
    rng = random.Random(7)
    nodes = [_random_node(rng, k).SerializeToString() for k in range(300)] + _odd_nodes()
    graph = GraphDef(versions={"producer": 1})
    data = b"".join(_field(1, body) for body in nodes) + _field(4, graph.versions.SerializeToString())
    spans = nodewire.field_spans(data, nodewire.NODE_FIELD)
    assert spans == nodewire.field_spans_py(data, nodewire.NODE_FIELD) and len(spans) == len(nodes)
    names = [b"/job:ps/replica:0/task:0/device:CPU:0", "/job:wörker/device:CPU:0".encode()]
    extra_node = NodeDef(name="_send", op="_Send", device="/job:ps").SerializeToString(deterministic=True)
    made = [_random_node(rng, k).SerializeToString() for k in range(300, 310)]
    order = list(range(len(nodes)))
    rng.shuffle(order)
    offsets = [spans[i][0] for i in order] + [-1]
    lengths = [spans[i][1] for i in order] + [0]
    devices = [rng.randrange(2) for _ in order] + [0]
    for _ in made:  # extra[1]'s nodes among the others
        at = rng.randrange(len(offsets))
        offsets.insert(at, -2)
        lengths.insert(at, 0)
        devices.insert(at, 1)
    tail = _field(4, graph.versions.SerializeToString())  # GraphDef.versions
    extra = [nodewire.node_fields([extra_node]), nodewire.node_fields(made)]
    c_out, py_out = _both(data, offsets, lengths, devices, names, extra, tail)
    assert c_out == py_out and c_out.endswith(tail)
    parsed = GraphDef.FromString(c_out)
    assert parsed.versions == graph.versions
    assert len(parsed.node) == len(order) + 1 + len(made)
    spliced = [got for got, offset in zip(parsed.node, offsets, strict=True) if offset >= 0]
    for got, i, d in zip(spliced, order, [d for d, o in zip(devices, offsets, strict=True) if o >= 0], strict=True):
        want = NodeDef.FromString(nodes[i])
        want.device = names[d].decode()
        assert got == want
        assert got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)
    assert parsed.node[-1] == NodeDef.FromString(extra_node)
    assert [got for got, offset in zip(parsed.node, offsets, strict=True) if offset == -2] == \
        [NodeDef.FromString(body) for body in made]


@pytest.mark.parametrize("extra", [[b""], [b"\x12\x00"], [b"\x0a\x05ab"], [b"\x0a"], [b"\x0a\x00"]],
                         ids=["empty", "other-field", "short", "no-length", "one-only"])
def test_too_few_extra_node_fields_raise_in_both_paths(extra):
    """``extra`` is the caller's own writing: a source without a next ``node`` field (or an offset
    naming no source) is a ValueError from both paths, never a node cut short."""
    args = (b"", array("q", [-1, -1]), array("q", [0, 0]), array("i", [0, 0]), [b"/d"], extra)
    for splice in (_wire.splice_nodes, nodewire.splice_nodes_py):
        with pytest.raises(ValueError):
            splice(*args)
    for splice in (_wire.splice_nodes, nodewire.splice_nodes_py):  # -2: extra[1], which is not there
        with pytest.raises(ValueError):
            splice(b"", array("q", [-2]), array("q", [0]), array("i", [0]), [b"/d"], [b"\x0a\x00"])


@pytest.mark.parametrize("bad", [b"\x0b\x0c", b"\x0a\x05ab", b"\x08", b"\x80"], ids=["group", "short", "no-value",
                                                                                  "bad-tag"])
def test_an_odd_node_is_declined_by_both_paths(bad):
    """A group or a truncated field: None from both (the caller then builds the NodeDefs)."""
    assert _both(bad, [0], [len(bad)], [0], [b"/d"], []) == (None, None)


def test_field_spans_decline_odd_forms_alike():
    for data in (b"\x0a\x05ab", b"\x0b", b"\x00", b"\x0a\x01a\x12\x00", b""):
        assert _wire.field_spans(data, 1) == nodewire.field_spans_py(data, 1), data


def test_fields_spans_are_field_spans_of_each_field_in_one_pass():
    """``_wire.fields_spans`` (the GraphDef's library and versions found together) gives, field by
    field, what ``field_spans_py`` gives: on a graph with several records of each, and on odd forms."""
    rng = random.Random(3)
    nodes = [_field(1, _random_node(rng, k).SerializeToString()) for k in range(20)]
    versions = _field(4, GraphDef(versions={"producer": 7}).versions.SerializeToString())
    library = _field(2, b"")
    graph = b"".join(nodes[:5]) + versions + b"".join(nodes[5:]) + library + versions + _field(2, b"\x0a\x00")
    for data in (graph, b"\x0a\x05ab", b"\x0b", b"\x00", b"\x0a\x01a\x12\x00", b"\x12\x00\x20\x01", b""):
        fields = (2, 4, 1)
        assert _wire.fields_spans(data, fields) == tuple(nodewire.field_spans_py(data, f) for f in fields), data
    assert [len(spans) for spans in _wire.fields_spans(graph, (2, 4))] == [2, 2]


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        _wire.splice_nodes(b"\x0a\x00", array("q", [0, 0]), array("q", [0]), array("i", [0]), [b"d"], [])
    with pytest.raises(ValueError):  # a span outside the data
        _wire.splice_nodes(b"", array("q", [4]), array("q", [1]), array("i", [0]), [b"d"], [])
    with pytest.raises(ValueError):  # too few extra nodes
        _wire.splice_nodes(b"", array("q", [-1]), array("q", [0]), array("i", [0]), [b"d"], [])
    with pytest.raises(TypeError):
        _wire.splice_nodes(b"", array("q", []), array("q", []), array("i", []), ["str"], [])
    with pytest.raises(TypeError):  # extra holds bytes of node fields
        _wire.splice_nodes(b"", array("q", []), array("q", []), array("i", []), [b"d"], ["str"])


def test_the_splice_kernel_is_built():
    """A ``_wire`` built before ``splice_nodes`` existed runs the Python loop (same bytes, slower):
    flag a stale build here, as ``test_wire.py`` flags a missing one."""
    assert nodewire._splice is not None, "placeviz._wire predates splice_nodes: rebuild it (setup.py build_ext)"


@pytest.mark.parametrize("names", [[], [""], ["a", "b/_c"], ["a", "_b"], ["é", "_"], ["x_"] * 5000 + ["_y"],
                                   ["x"] * 9000, ["\U0001f600", "_\U0001f600"]])
def test_leading_underscore_alike_in_c_and_python(names):
    """``_wire.any_leading_underscore`` (which names the partitions rename) against the Python loop."""
    expected = any(name.startswith("_") for name in names)
    assert _wire.any_leading_underscore(names) is expected
    assert nodewire.any_leading_underscore_py(names) is expected
    with pytest.raises(TypeError):
        _wire.any_leading_underscore(["a", b"_b"])
