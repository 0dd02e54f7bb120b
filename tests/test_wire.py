"""The C reader of serialized GraphDefs (``placeviz._wire``) against the Python path.

``Graph(graph_def, wire=bytes)`` must build exactly what ``Graph(graph_def)`` builds (names, ops,
devices, index, inputs, ``_class`` colocation, attr keys), or decline so that the Python path
raises its own error. Compared on TF-built graphs, on hand-made wire forms TF never writes
(merged messages, repeated singular fields, duplicate map keys, unknown fields) and on randomly
mutated graphs.
"""

from __future__ import annotations

import random
import struct

import pytest
from conftest import pb_field as _field
from conftest import pb_varint as _varint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placeviz import graph as graph_module
from placeviz import nodewire
from placeviz.errors import GraphError
from placeviz.graph import Graph
from placeviz.io import _default_fact_key_attrs, load
from placeviz.protos import AttrValue, GraphDef, MetaGraphDef
from tests.test_fuzz_load import realistic_graph


def test_the_extension_is_built():
    # `make test` installs placeviz with `pip install -e .`, which compiles it (setup.py): a
    # machine where that silently failed would run every command on the slow path.
    assert graph_module._wire is not None, "placeviz._wire was not built: is a C compiler installed?"


def _every_attr(ops: set[str]) -> dict[str, tuple[str, ...]]:
    """Key attrs that exercise every shape of key: none, one, several, lists, absent ones."""
    plans = [(), ("dtype",), ("T", "dtype"), ("_class", "shape", "value", "missing"), ("N",)]
    return {op: plans[sum(map(ord, op)) % len(plans)] for op in sorted(ops)}


def assert_same(graph_def: GraphDef, data: bytes | None = None, key_attrs_for=_default_fact_key_attrs) -> str:
    """Build the IR both ways and compare; returns "equal", or the error both raised."""
    data = graph_def.SerializeToString() if data is None else data
    try:
        expected = Graph(graph_def)
        python_error = None
    except GraphError as e:
        python_error = str(e)
    try:
        got = Graph(graph_def, wire=data, key_attrs_for=key_attrs_for)
        wire_error = None
    except GraphError as e:
        wire_error = str(e)
    assert wire_error == python_error
    if python_error is not None:
        return python_error
    for field in ("names", "ops", "devices", "in_start", "in_src", "in_slot"):
        assert getattr(got, field) == getattr(expected, field), field
    assert_same_lookups(got, expected)
    assert list(got.index.items()) == list(expected.index.items())
    assert list(got.colocation.items()) == list(expected.colocation.items())
    assert list(got.colocated_names.items()) == list(expected.colocated_names.items())
    key_attrs = key_attrs_for(set(expected.ops))
    want = expected.attr_keys(key_attrs)
    cached = got.cached_attr_keys()
    if cached is not None:  # the C reader declined the attrs only for odd map entries
        assert cached[0] == key_attrs
    have = got.attr_keys(key_attrs)
    assert have == want
    assert [type(v) for v in have] == [type(v) for v in want]
    assert_same_attr_values(got, graph_def, data)
    return "equal"


def assert_same_lookups(got: Graph, expected: Graph) -> None:
    """``id_of``, ``ids_of`` and ``in`` of ``got`` (the C reader's name index, before any dict is
    made) answer as ``expected``'s dict: every name, names of no node, and a batch with repeats."""
    names = expected.names
    absent = ["", "no such node", *(name + "/x" for name in names[:3]), *(name[:-1] for name in names[:3])]
    for name in [*names, *absent]:
        assert got.id_of(name) == expected.index.get(name), name
        assert (name in got) == (name in expected.index), name
    batch = [*names[::-1], *absent, *names[:5]]
    want = {name: expected.index[name] for name in batch if name in expected.index}
    assert list(got.ids_of(batch).items()) == list(want.items())
    assert list(got.ids_of(iter(batch)).items()) == list(want.items())


_VALUE_ATTRS = ("dtype", "shape", "T", "_class", "missing")


def assert_same_attr_values(graph: Graph, graph_def: GraphDef, data: bytes) -> None:
    """``Graph.wire_attr_values`` (the C reader) holds, node by node, the AttrValues the parsed
    NodeDefs hold (None: the attr is absent); when the graph was read from ``data``, it declines
    (None) exactly when some attr map entry there is not one key and one value."""
    ids = list(range(len(graph)))[::-1]  # any order, each id as asked
    values = graph.wire_attr_values(ids, _VALUE_ATTRS)
    read = graph.node_sizes() is not None  # the C reader read the graph from ``data``
    if values is None:
        assert not read or _odd_attr_entries(data)
        return
    assert read and not _odd_attr_entries(data)
    assert len(values) == len(ids)
    for i, row in zip(ids, values, strict=True):
        attr = graph_def.node[i].attr
        assert len(row) == len(_VALUE_ATTRS)
        for name, raw in zip(_VALUE_ATTRS, row, strict=True):
            if name not in attr:
                assert raw is None, (i, name)
            else:
                assert AttrValue.FromString(raw) == attr[name], (i, name)


def _fields(data: bytes) -> list[tuple[int, bytes | None]]:
    """(field number, payload or None for a non-length-delimited value) of a serialized message."""
    view, p, out = memoryview(data), 0, []
    while p < len(view):
        tag, p = nodewire._varint(view, p, len(view))
        if tag & 7 == 2:
            n, p = nodewire._varint(view, p, len(view))
            out.append((tag >> 3, bytes(view[p:p + n])))
            p += n
        else:
            p = nodewire._skip(view, p, len(view), tag & 7)
            out.append((tag >> 3, None))
    return out


def _odd_attr_entries(data: bytes) -> bool:
    """Some NodeDef's attr map entry in ``data`` is not at most one key (1) and one value (2)."""
    for number, node in _fields(data):
        for field, entry in _fields(node or b"") if number == 1 else ():
            if field == 5:
                numbers = [f for f, _ in _fields(entry or b"")]
                if set(numbers) - {1, 2} or numbers.count(1) > 1 or numbers.count(2) > 1:
                    return True
    return False


def test_tf_built_graphs(tf_models):
    graph_def = GraphDef()
    graph_def.ParseFromString((tf_models / "setter.pb").read_bytes())
    meta = MetaGraphDef()
    meta.ParseFromString((tf_models / "setter.meta").read_bytes())
    for g in (graph_def, meta.graph_def):
        assert len(g.node) > 50
        assert assert_same(g) == "equal"
        assert assert_same(g, key_attrs_for=_every_attr) == "equal"


def test_load_reads_a_binary_graph_def_with_the_c_reader(tmp_path):
    path = tmp_path / "g.pb"
    path.write_bytes(realistic_graph().SerializeToString())
    graph = load(path).graph
    # The attr keys the placer needs came with the load; the Python path leaves them unread.
    assert graph.cached_attr_keys() is not None
    assert graph.cached_attr_keys()[0] == _default_fact_key_attrs(set(graph.ops))
    assert Graph(realistic_graph()).cached_attr_keys() is None


def _node(*fields: tuple[int, bytes]) -> bytes:
    return b"".join(_field(n, p) for n, p in fields)


def _attr(key: str, value: bytes) -> tuple[int, bytes]:
    return 5, _field(1, key.encode()) + _field(2, value)


TYPE_FLOAT = b"\x30\x01"  # AttrValue{type: DT_FLOAT}


@pytest.mark.parametrize("graph_bytes", [
    # Two GraphDefs concatenated: the node lists merge.
    _field(1, _node((1, b"a"), (2, b"Const"), _attr("dtype", TYPE_FLOAT)))
    + _field(1, _node((1, b"b"), (2, b"Identity"), (3, b"a"), _attr("T", TYPE_FLOAT))),
    # A singular field twice (the last wins), unknown fields, a library, versions.
    _field(1, _node((1, b"first"), (1, b"a"), (2, b"NoOp"), (2, b"Const"), (4, b"/cpu:0"), (99, b"x"),
                    _attr("dtype", TYPE_FLOAT)))
    + _field(2, b"") + _field(4, _varint(1 << 3) + _varint(27)),
    # A map key twice (the last wins), type 0 (not a type: keyed by bytes), a list value.
    _field(1, _node((1, b"a"), (2, b"Const"), _attr("dtype", TYPE_FLOAT), _attr("dtype", b"\x30\x00"))),
    _field(1, _node((1, b"a"), (2, b"Const"), _attr("dtype", b"\x30\x01\x18\x05")))
    + _field(1, _node((1, b"c"), (2, b"Identity"), (3, b"a:0"), (3, b"^a"), _attr("T", b"\x18\x05\x30\x02"))),
    # A map entry without a key, one without a value, one with its value twice (messages merge).
    _field(1, _node((1, b"a"), (2, b"Const"), (5, _field(2, TYPE_FLOAT)), (5, _field(1, b"dtype")))),
    _field(1, _node((1, b"a"), (2, b"Const"), (5, _field(1, b"_class") + _field(2, _field(1, _field(2, b"loc:@a")))
                                              + _field(2, _field(1, _field(2, b"loc:@b")))))),
    # _class forms: empty list, non-loc entries, invalid UTF-8 in a bytes list, two classes.
    _field(1, _node((1, b"a"), (2, b"Const"), _attr("_class", _field(1, b""))))
    + _field(1, _node((1, b"b"), (2, b"Const"), _attr("_class", _field(1, _field(2, b"xla:@a") + _field(2, b"loc:@a")))))
    + _field(1, _node((1, b"c"), (2, b"Const"), _attr("_class", _field(1, _field(2, b"loc:@\xff") + _field(2, b"loc:@b"))))),
    # Inputs: big slots, leading zeros, a control input naming a later node.
    _field(1, _node((1, b"a"), (2, b"Split"), (3, b"^b")))
    + _field(1, _node((1, b"b"), (2, b"Identity"), (3, b"a:007"), (3, b"a:123456789")))
    + _field(1, _node((1, b"c"), (2, b"Identity"), (3, b"a:1234567890"))),
    # Errors, which the Python path words: duplicate, empty and odd names, missing and malformed inputs.
    _field(1, _node((1, b"a"), (2, b"Const"))) + _field(1, _node((1, b"a"), (2, b"Const"))),
    _field(1, _node((2, b"Const"))),
    _field(1, _node((1, b"a"))),
    _field(1, _node((1, b"a:1"), (2, b"Const"))) + _field(1, _node((1, b"b"), (2, b"Identity"), (3, b"a:1"))),
    _field(1, _node((1, b"^a"), (2, b"Const"))) + _field(1, _node((1, b"b"), (2, b"Identity"), (3, b"^a"))),
    _field(1, _node((1, b"a"), (2, b"Const"), (3, b"nope"))),
    _field(1, _node((1, b"a"), (2, b"Const"), (3, b"a:"))),
    _field(1, _node((1, b"a"), (2, b"Const"), (3, b"a:1x"))),
    _field(1, _node((1, b"a"), (2, b"Const"), (3, b"a:\xc2\xb2"))),
    _field(1, _node((1, b"a"), (2, b"Const"), (3, b"a:2147483648"))),
    _field(1, _node((1, b"a"), (2, b"Const"), (3, b"a:2147483647"))),
    _field(1, _node((1, b"a"), (2, b"Const"), (3, b""))),
    _field(1, _node((1, b"a"), (2, b"Const"), (3, b"^"))),
])
def test_wire_forms(graph_bytes):
    graph_def = GraphDef()
    graph_def.ParseFromString(graph_bytes)  # what io.load has done before building the IR
    for key_attrs_for in (_default_fact_key_attrs, _every_attr, None):
        assert_same(graph_def, graph_bytes, key_attrs_for or (lambda ops: {}))


def test_an_attr_value_with_fixed_width_and_negative_type_fields():
    value = b"\x25" + struct.pack("<f", 1.5) + b"\x30" + _varint((1 << 64) - 1)  # f then type = -1
    data = _field(1, _node((1, b"a"), (2, b"Const"), _attr("dtype", value)))
    graph_def = GraphDef()
    graph_def.ParseFromString(data)
    assert assert_same(graph_def, data) == "equal"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_graphs(data):
    base = realistic_graph()
    nodes = list(base.node)
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["shuffle", "drop", "dup", "input", "name", "class", "attr", "op"]))
        n = nodes[rng.randrange(len(nodes))]
        if kind == "shuffle":
            rng.shuffle(nodes)
        elif kind == "drop" and len(nodes) > 1:
            nodes.remove(n)
        elif kind == "dup":
            nodes.append(n)
        elif kind == "input":
            n.input.append(data.draw(st.sampled_from(
                ["", "^", ":", "w0:", "w0:-1", "w0:99", "^nope", "h0:1x", "::", "w1", "^w2", "x:0", "x:00"])))
        elif kind == "name":
            n.name = data.draw(st.sampled_from(["", "a b", "é", "/x", "ok", "w0", "x:1", "^y"]))
        elif kind == "class":
            n.attr["_class"].list.s[:] = data.draw(st.lists(st.sampled_from(
                [b"loc:@w0", b"loc:@w1", b"loc:@nope", b"", b"loc:@", b"xla", b"loc:@\xe9"]), max_size=3))
        elif kind == "attr":
            name = data.draw(st.sampled_from(["dtype", "T", "N", "shape", "_kernel"]))
            value = n.attr[name]
            choice = data.draw(st.integers(0, 4))
            if choice == 0:
                value.type = data.draw(st.integers(0, 30))
            elif choice == 1:
                value.i = data.draw(st.integers(-5, 5))
            elif choice == 2:
                value.list.type.extend([1, 3])
            elif choice == 3:
                value.s = b"x"
            else:
                del n.attr[name]
        else:
            n.op = data.draw(st.sampled_from(["", "Const", "Identity", "AddN", "NoSuchOp", "VariableV2"]))
    out = GraphDef()
    for n in nodes:
        out.node.add().CopyFrom(n)
    for key_attrs_for in (_default_fact_key_attrs, _every_attr):
        assert_same(out, key_attrs_for=key_attrs_for)


@pytest.mark.parametrize("spec, tag", [("setter.meta", None), ("saved_tf1", None), ("saved_tf1", "serve"),
                                       ("saved_tf2", None)])
def test_load_reads_meta_graphs_and_saved_models_with_the_c_reader(tf_models, spec, tag):
    model = load(tf_models / spec, tag=tag)
    assert model.graph.cached_attr_keys() is not None  # read from the file's bytes
    expected = Graph(model.graph_def)  # the Python path, from the parsed messages
    for field in ("names", "ops", "devices", "in_start", "in_src", "in_slot"):
        assert getattr(model.graph, field) == getattr(expected, field), field
    assert list(model.graph.colocation.items()) == list(expected.colocation.items())
    key_attrs = _default_fact_key_attrs(set(expected.ops))
    assert model.graph.attr_keys(key_attrs) == expected.attr_keys(key_attrs)


def _name_index(names: list[str]):
    """The C reader's name index over a graph of NoOps with these names (None: not built)."""
    if graph_module._wire is None:
        pytest.skip("the C reader is not built")
    graph_def = GraphDef()
    for name in names:
        graph_def.node.add(name=name, op="NoOp")
    scanned = graph_module._wire.scan_graph(graph_def.SerializeToString())
    assert scanned is not None
    return scanned[3]


def test_the_name_index_answers_as_a_dict_of_the_names():
    """``_wire.NameIndex``, what ``Graph.id_of`` asks on a graph read from bytes, answers as the
    Python twin (a dict of every name) for the keys a dict would be asked: names that are not
    ASCII, a str subclass, keys that are not strings, a string with a lone surrogate (no node
    name read from valid UTF-8 holds one), names sharing long prefixes."""

    class Name(str):
        pass

    names = ["a", "é/ü", "日本/変数", "x" * 40 + "/a", "x" * 40 + "/b", "emoji/😀", "tab\tname"]
    index = _name_index(names)
    twin = {name: i for i, name in enumerate(names)}
    keys = [*names, *map(Name, names), "b", "x" * 40, "é", "a\udcff", "\udcff", 7, None, b"a", ("a",)]
    for key in keys:
        assert index.get(key) == twin.get(key), key  # type: ignore[call-overload]
        assert index.get(key, -1) == twin.get(key, -1), key  # type: ignore[call-overload]
        assert (key in index) == (key in twin), key
    assert len(index) == len(twin)
    strings = [k for k in keys if isinstance(k, str)]
    assert list(index.ids(strings).items()) == list({k: twin[k] for k in strings if k in twin}.items())
    with pytest.raises(TypeError):
        index.ids(3)
    with pytest.raises(TypeError):
        index.get()


def test_a_graph_with_the_same_names_shares_the_name_index(tmp_path):
    """``with_devices`` and the setter's result when no node moved answer lookups from the loaded
    graph's index (the C reader's, when built) without a dict of every name; the dict, when some
    caller asks for it, equals a fresh one."""
    from placeviz.ops import load_op_table
    from placeviz.placement.setter import SetterConfig, run_setter

    path = tmp_path / "g.pb"
    path.write_bytes(realistic_graph().SerializeToString())
    graph = load(path).graph
    fresh = Graph(realistic_graph())
    copies = [graph.with_devices([""] * len(graph)), run_setter(graph, SetterConfig(ps_tasks=2, worker_device="/job:worker/task:0"), load_op_table()).graph]
    for copy in copies:
        if copy.names == graph.names:
            assert_same_lookups(copy, fresh)
            assert not copy.computed("index") or graph_module._wire is None
        assert copy.index == {name: i for i, name in enumerate(copy.names)}


_SEEDED_LOAD = """
import hashlib, sys
from placeviz import _wire
from placeviz.io import load
g = load(sys.argv[1]).graph
ir = (g.names, g.ops, g.devices, list(g.in_start), list(g.in_src), list(g.in_slot), sorted(g.colocation.items()),
      g.ids_of(g.names[::-1]), g.id_of("no such node"))
print(_wire.hash_seed(), hashlib.sha256(repr(ir).encode()).hexdigest())
"""


def test_the_name_tables_are_keyed_per_process_and_no_answer_depends_on_the_key(tmp_path):
    """A fixed hash let a graph file name its nodes so that they shared one run of the tables'
    slots, and linear probing then compared every name with every earlier one (a crafted
    200k-node graph loaded in 14 s instead of 0.2 s; ``benchmarks/README.md``, "A graph that
    floods the name tables"). The C reader mixes a secret of the process into its hashes: it
    follows Python's string hash (random per process, fixed by ``PYTHONHASHSEED``), and
    everything the reader answers is the same whatever it is."""
    import os
    import subprocess
    import sys

    path = tmp_path / "g.pb"
    path.write_bytes(realistic_graph().SerializeToString())

    def run(hash_seed: str) -> tuple[str, str]:
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run([sys.executable, "-c", _SEEDED_LOAD, str(path)], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
        return out[0], out[1]

    seeds_and_digests = [run(s) for s in ("1", "2", "1")]
    assert seeds_and_digests[0] == seeds_and_digests[2]  # the key follows PYTHONHASHSEED
    assert seeds_and_digests[0][0] != seeds_and_digests[1][0]
    assert len({digest for _, digest in seeds_and_digests}) == 1
