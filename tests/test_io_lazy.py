"""Loading a binary GraphDef without parsing it (``placeviz.io._load_unparsed``).

The lazy path is taken only when ``_wire.parses`` says upb surely accepts the bytes; then every
answer must be the eager path's. Each test corrupts a valid TF-built graph (``setter.pb`` from
``tests/make_tf_fixtures.py``) in a place the C reader of the IR does not read (attr values, their
nested messages, the library, unknown fields) and checks that the load gives exactly what the eager
parse gives: the same one-line error, or the same model.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import placeviz.io as io
from placeviz.analysis import analyze
from placeviz.errors import LoadError
from placeviz.nodewire import field_spans
from placeviz.protos import GraphDef, NodeDef

_wire = io._wire
needs_wire = pytest.mark.skipif(_wire is None, reason="the C kernels are not built")


def varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def record(field: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def attr_entry(key: bytes, value: bytes) -> bytes:
    """A NodeDef ``attr`` map entry (field 5): key (1) and the AttrValue's bytes (2), as given."""
    return record(5, record(1, key) + record(2, value))


def with_node_suffix(data: bytes, k: int, suffix: bytes) -> bytes:
    """``data`` with ``suffix`` appended to node ``k``'s NodeDef payload (fields may come in any
    order, so a valid suffix keeps the graph valid)."""
    spans = field_spans(data, 1)
    offset, length = spans[k]
    head = data[:offset]
    # Strip the node's tag and length (written again around the longer payload).
    start = offset - 1 - len(varint(length))
    assert data[start] == 0x0A
    return head[:start] + record(1, data[offset:offset + length] + suffix) + data[offset + length:]


def outcome(path, *, lazy: bool) -> tuple:
    """What loading ``path`` gives, with the lazy path allowed or not: the LoadError's text, or the
    model's IR, its GraphDef's bytes and its analysis."""
    saved = io.LAZY_PARSE
    io.LAZY_PARSE = lazy
    try:
        model = io.load(path)
    except LoadError as e:
        return ("error", str(e))
    finally:
        io.LAZY_PARSE = saved
    g = model.graph
    return ("model", g.names, g.ops, g.devices, bytes(g.in_start), bytes(g.in_src), bytes(g.in_slot),
            g.colocation, model.graph_def.SerializeToString(deterministic=True),
            analyze(model).to_json())


@pytest.fixture(scope="module")
def setter_bytes(tf_models) -> bytes:
    return (tf_models / "setter.pb").read_bytes()


def _node_with(data: bytes, op: str) -> int:
    graph_def = GraphDef.FromString(data)
    return next(i for i, node in enumerate(graph_def.node) if node.op == op)


# Corruptions inside a node's attrs, which the C reader of the IR skips. Each: (id, suffix bytes,
# what the eager parse does with it: "error" or "model").
DIM_BAD_UTF8 = record(7, record(2, record(2, b"\xff\xfe")))  # AttrValue.shape.dim[0].name (string)
CORRUPTIONS = [
    ("bad UTF-8 in an attr key", attr_entry(b"k\xc3", record(2, b"x")), "error"),
    ("bad UTF-8 in a shape dim name", attr_entry(b"k", DIM_BAD_UTF8), "error"),
    ("surrogate in a func name", attr_entry(b"k", record(10, record(1, b"\xed\xa0\x80"))), "error"),
    ("bad UTF-8 in AttrValue.s (bytes)", attr_entry(b"k", record(2, b"\xff\xfe")), "model"),
    ("truncated nested AttrValue", attr_entry(b"k", varint(8 << 3 | 2) + varint(10) + b"\x08\x01"), "error"),
    ("truncated TensorProto field", attr_entry(b"k", record(8, varint(4 << 3 | 2) + varint(9) + b"ab")), "error"),
    ("wrong wire type in a TensorProto (kept as unknown)", attr_entry(b"k", record(8, record(1, b"zz"))), "model"),
    ("group inside a TensorProto", attr_entry(b"k", record(8, varint(20 << 3 | 3))), "error"),
    ("wire type 7 inside an AttrValue", attr_entry(b"k", varint(1 << 3 | 7) + b"\x00"), "error"),
    ("unknown field in a NodeDef", varint(99 << 3 | 0) + varint(5), "model"),
    ("overlong varint in AttrValue.i", attr_entry(b"k", varint(3 << 3) + b"\xff" * 10 + b"\x01"), "error"),
    ("packed floats of odd length", attr_entry(b"k", record(1, record(4, b"\x00" * 5))), "error"),
    ("bad UTF-8 in experimental_debug_info", record(6, record(1, b"\xc0\xaf")), "error"),
    ("field 0 inside a NodeDef", b"\x02\x00", "error"),
]


@needs_wire
@pytest.mark.parametrize(("case", "suffix", "eager"), CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_a_corrupt_attr_gives_the_eager_answer(tmp_path, setter_bytes, case, suffix, eager):
    data = with_node_suffix(setter_bytes, _node_with(setter_bytes, "VariableV2"), suffix)
    path = tmp_path / "g.pb"
    path.write_bytes(data)
    want = outcome(path, lazy=False)
    assert want[0] == eager, want  # the corruption is what it says (upb refuses it, or keeps it)
    got = outcome(path, lazy=True)
    assert got == want
    if want[0] == "error":
        assert not _wire.parses(data, io._wire_schema(GraphDef.DESCRIPTOR))
        assert str(path) in got[1] and "\n" not in got[1]


@needs_wire
def test_corrupt_library_versions_and_debug_info(tmp_path, setter_bytes):
    cases = {
        "library: bad UTF-8 in a function name": record(2, record(1, record(1, record(1, b"f\xff")))),
        "library: truncated": record(2, b"\x0a\x09ab"),
        "versions: bad wire type": record(4, b"\x0a\x01x"),
        "debug_info: truncated": record(5, b"\x0a\x07"),
        "unknown top-level field": varint(99 << 3) + b"\x01",
        "library: a valid empty function": record(2, record(1, b"")),
    }
    errors = 0
    for case, tail in cases.items():
        for data in (setter_bytes + tail, tail + setter_bytes):
            path = tmp_path / "g.pb"
            path.write_bytes(data)
            want = outcome(path, lazy=False)
            assert outcome(path, lazy=True) == want, case
            errors += want[0] == "error"
    assert errors >= 6  # the corrupt ones are refused, first or last in the file


@needs_wire
def test_the_lazy_path_is_taken_and_parses_once(tf_models, setter_bytes):
    model = io.load(tf_models / "setter.pb")
    graph = model.graph
    assert graph._graph_def is None  # not parsed by the load
    eager = GraphDef.FromString(setter_bytes)
    variable = _node_with(setter_bytes, "VariableV2")
    assert graph.node_def(variable) == eager.node[variable]  # one node, from its own bytes
    assert graph._graph_def is None
    assert graph.library == eager.library
    assert (graph.versions is None) == (not eager.HasField("versions"))
    if graph.versions is not None:
        assert graph.versions == eager.versions
    assert graph._graph_def is None
    assert model.graph_def == eager
    assert model.graph_def is model.graph_def  # parsed once, kept
    assert list(graph.attr_nodes) == list(eager.node)


@needs_wire
def test_many_nodes_one_by_one_parse_the_whole_graph_once(tf_models, setter_bytes):
    graph = io.load(tf_models / "setter.pb").graph
    eager = GraphDef.FromString(setter_bytes)
    nodes = [graph.node_def(i) for i in range(len(graph))]
    assert graph._graph_def is not None  # past a fifth of the nodes, the whole GraphDef was made
    assert nodes == list(eager.node)
    assert graph.node_def(-1) == eager.node[-1]
    with pytest.raises(IndexError):
        graph.attr_nodes[len(graph)]


@needs_wire
def test_prefetched_node_defs_are_the_graph_defs(tf_models, setter_bytes):
    graph = io.load(tf_models / "setter.pb").graph
    eager = GraphDef.FromString(setter_bytes)
    some = list(range(0, len(graph), 7))
    graph.prefetch_node_defs(some)
    assert graph._graph_def is None  # under two thirds of the nodes: only those were parsed
    assert [graph.node_def(i) for i in some] == [eager.node[i] for i in some]
    derived = graph.with_devices(["/cpu:0"] * len(graph))  # a derived graph passes the hint on
    derived.prefetch_node_defs(range(len(graph)))
    assert graph._graph_def is not None  # all of them: the whole GraphDef, once
    assert list(derived.attr_nodes) == list(eager.node)


@needs_wire
def test_node_records_rebuilds_a_graph_def_of_those_nodes(setter_bytes):
    scanned = _wire.scan_graph(setter_bytes)
    spans = scanned[7]
    eager = GraphDef.FromString(setter_bytes)
    ids = [3, 0, len(eager.node) - 1, 3]
    part = GraphDef.FromString(_wire.node_records(setter_bytes, spans, ids))
    assert list(part.node) == [eager.node[i] for i in ids]
    with pytest.raises(IndexError):
        _wire.node_records(setter_bytes, spans, [len(eager.node)])


@needs_wire
def test_lazy_and_eager_agree_on_a_tf_graph(tf_models):
    assert outcome(tf_models / "setter.pb", lazy=True) == outcome(tf_models / "setter.pb", lazy=False)


def test_without_the_c_reader_the_eager_path_runs(tf_models, monkeypatch):
    monkeypatch.setattr(io, "_wire", None)
    assert io.load(tf_models / "setter.pb").graph._graph_def is not None


@needs_wire
def test_nesting_deeper_than_the_walk_is_left_to_upb(tmp_path, setter_bytes):
    def nested(depth: int) -> bytes:  # AttrValue.func.attr[k] = AttrValue.func... depth times
        value = record(2, b"x")
        for _ in range(depth):
            value = record(10, record(2, record(1, b"k") + record(2, value)))
        return value

    schema = io._wire_schema(GraphDef.DESCRIPTOR)
    variable = _node_with(setter_bytes, "VariableV2")
    shallow = with_node_suffix(setter_bytes, variable, attr_entry(b"k", nested(2)))
    assert _wire.parses(shallow, schema)
    for depth in (12, 40):  # past the walk's depth (32), within or past upb's limit (100)
        data = with_node_suffix(setter_bytes, variable, attr_entry(b"k", nested(depth)))
        assert not _wire.parses(data, schema)
        path = tmp_path / f"deep{depth}.pb"
        path.write_bytes(data)
        assert outcome(path, lazy=True) == outcome(path, lazy=False)


@needs_wire
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_parses_true_means_upb_parses(setter_bytes, data):
    """The soundness of the lazy path: whatever bytes ``parses`` accepts, upb parses."""
    raw = bytearray(setter_bytes)
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if kind == "flip":
            raw[pos] ^= data.draw(st.integers(1, 255))
        elif kind == "insert":
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=6))
        elif kind == "delete":
            del raw[pos:pos + data.draw(st.integers(1, 8))]
        else:
            del raw[pos:]
        if not raw:
            return
    blob = bytes(raw)
    if _wire.parses(blob, io._wire_schema(GraphDef.DESCRIPTOR)):
        GraphDef().ParseFromString(blob)  # raises if the walk accepted what upb refuses
        for offset, length in field_spans(blob, 1):
            NodeDef.FromString(blob[offset:offset + length])


@needs_wire
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_graphs_load_as_eagerly(tmp_path, setter_bytes, data):
    raw = bytearray(setter_bytes)
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= data.draw(st.integers(1, 255))
    path = tmp_path / "m.pb"
    path.write_bytes(bytes(raw))
    assert outcome(path, lazy=True) == outcome(path, lazy=False)


@needs_wire
def test_utf8_check_agrees_with_python_at_every_offset():
    """``parses`` checks strings 8 ASCII bytes at a time, then byte by byte: a multi-byte or invalid
    sequence at any offset around those 8-byte steps is judged as Python's strict decoder (and
    upb, for what it accepts) judges it."""
    schema = io._wire_schema(GraphDef.DESCRIPTOR)
    snippets = [b"\xff", b"\xc3", b"\xc3\xa9", b"\xe2\x82\xac", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80",
                b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80"]
    for k in range(18):
        for snippet in snippets:
            for tail in (b"", b"b" * 9):
                name = b"a" * k + snippet + tail
                data = record(1, record(1, name) + record(2, b"Const"))
                try:
                    name.decode("utf-8")
                    valid = True
                except UnicodeDecodeError:
                    valid = False
                assert _wire.parses(data, schema) == valid, (k, snippet, tail)
                if valid:
                    assert GraphDef.FromString(data).node[0].name == name.decode("utf-8")
