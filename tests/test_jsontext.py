"""``placeviz.jsontext.pretty_json`` writes exactly what ``json.dumps(indent=2)`` writes.

Random nested documents (every JSON value kind, empty and nested containers, strings needing
escapes and non-ASCII), the values json encodes specially (NaN, infinities, big ints, tuples),
the documents it must hand back to ``json.dumps`` (non-string keys, subclasses, unencodable
values), and the analysis report of the fixed golden graph. No TensorFlow.
"""

from __future__ import annotations

import json
import random
from collections import Counter, OrderedDict
from enum import IntEnum
from pathlib import Path

import pytest

from placeviz.jsontext import pretty_json

GOLDEN = Path(__file__).parent / "golden" / "render" / "mlp_sync.pbtxt"
STRINGS = ["", "a", "é", "quote \" and \\ back", "line\nbreak\ttab", "\x00\x1f", "☃ snow", "𝄞 clef", "/job:ps/task:0"]


def _use_kernel(monkeypatch, kernel: bool, attr: str, c_name: str, twin) -> None:
    """``placeviz.jsontext``'s accelerator ``attr``: ``placeviz._wire``'s ``c_name`` (skip when it
    is not built), or the Python ``twin`` that declines, so json writes."""
    from placeviz import jsontext
    from placeviz.native import kernels

    wire = kernels("_wire")
    if kernel and wire is None:
        pytest.skip("placeviz._wire is not built")
    monkeypatch.setattr(jsontext, attr, getattr(wire, c_name) if kernel else twin)


def _random_value(rng: random.Random, depth: int):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice(STRINGS) + str(rng.randrange(100))
    if kind == 1:
        return rng.randrange(-10**20, 10**20)
    if kind == 2:
        return rng.choice([0.1, -2.5e-300, 1e300, 3.0, rng.random()])
    if kind == 3:
        return rng.choice([None, True, False])
    if kind == 4:
        return rng.randrange(10)
    if kind == 5:
        return rng.choice(STRINGS)
    if kind == 6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    if kind == 7:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return {rng.choice(STRINGS) + str(k): _random_value(rng, depth + 1) for k in range(rng.randrange(5))}


@pytest.mark.parametrize("seed", range(20))
def test_random_documents(seed):
    rng = random.Random(seed)
    document = {f"k{k}": _random_value(rng, 0) for k in range(8)}
    assert pretty_json(document) == json.dumps(document, indent=2)


@pytest.mark.parametrize("document", [
    {}, [], (), "", 0, None, True, 1.5, {"a": []}, {"a": {}}, [[]], [{}], [[], {}],
    [float("nan"), float("inf"), -float("inf"), -0.0, 10**40, -(10**40)],
    {"nested": {"deeper": {"deepest": [1, [2, [3, {}]]]}}},
])
def test_edge_values(document):
    assert pretty_json(document) == json.dumps(document, indent=2)


class Level(IntEnum):
    LOW = 1


@pytest.mark.parametrize("document", [
    {1: "int key"}, {None: 1, True: 2, 1.5: 3}, Counter("abca"), {"c": Counter("xyy")}, OrderedDict(a=1),
    [Level.LOW], {"level": Level.LOW},
])
def test_what_json_encodes_its_own_way_is_left_to_json(document):
    assert pretty_json(document) == json.dumps(document, indent=2)


@pytest.mark.parametrize("document", [{"a": {1, 2}}, [object()], {"b": b"bytes"}])
def test_what_json_rejects_is_rejected(document):
    with pytest.raises(TypeError):
        json.dumps(document, indent=2)
    with pytest.raises(TypeError):
        pretty_json(document)


def test_the_analysis_report_of_a_real_graph():
    from placeviz.pipeline import Options, run_pipeline
    from placeviz.placement import PlacementOptions
    from placeviz.placement.setter import SetterConfig

    report = run_pipeline(str(GOLDEN), Options(placement=PlacementOptions(setter=SetterConfig(ps_tasks=0)))).report.to_json()
    text = pretty_json(report)
    assert text == json.dumps(report, indent=2)
    assert len(text) > 1000 and json.loads(text) == json.loads(json.dumps(report))


@pytest.mark.parametrize("seed", range(10))
def test_the_two_output_forms_hold_the_same_content(seed):
    """``json_text`` (every JSON report): compact is ``json.dumps``'s C-encoder text, ``pretty`` the
    indented text, both in the document's key order, ending in a newline, parsing to equal values."""
    from placeviz.jsontext import json_text

    rng = random.Random(seed)
    document = {f"k{k}": _random_value(rng, 0) for k in range(8)}
    compact, pretty = json_text(document), json_text(document, pretty=True)
    assert compact == json.dumps(document, separators=(",", ":")) + "\n"
    assert pretty == json.dumps(document, indent=2) + "\n"
    assert json.loads(compact) == json.loads(pretty)
    assert compact.isascii() and pretty.isascii()
    assert "\n" not in compact[:-1]  # one line: strings' newlines are escaped


def _records_cases():
    """Lists of dicts as ``index.json``'s ``transfers`` (str, int, None, bool, lists of them) and as
    ``analyze``'s variables (nested lists and dicts of them), with strings and keys that need
    escapes, and the lists the kernel must decline (floats, dicts with a key that is not a str,
    subclasses, big ints, items with other keys or another key order)."""
    rng = random.Random(7)
    plain = [{"src": rng.choice(STRINGS) + str(k), "slot": rng.choice([0, 3, "control", -1]), "shape":
              rng.choice([None, [], [k, None], (2, [3, True])]), "bytes": rng.choice([None, 0, 2**63 - 1, -2**63]),
              "client": rng.choice([True, False]), "\u00e9 \"key\"\n%s": "\x7f\x00~ "} for k in range(50)]
    nested = [{"name": f"v{k}", "slots": [{"name": f"v{k}/Adam", "slot": "Adam", "bytes": k}] * (k % 3),
               "meta": {"\u00e9\n": None, "x": {"y": [True, "\x00"]}, "z": {}}} for k in range(20)]
    declined = [
        [{"a": 1.5}], [{"a": {"b": 1.5}}], [{"a": {1: "b"}}], [{"a": {"b": OrderedDict(c=1)}}], [{"a": 2**64}], [{"a": 1}, {"b": 1}], [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
        [{"a": 1}, {"a": 1, "b": 2}], [OrderedDict(a=1)], [{"a": 1}, Counter(a=1)], [{"a": IntEnum("E", "x").x}],
        [{1: "a"}], [{"a": 1}, {1: "a"}], [{"a": [float("nan")]}], [[1, 2]], [], [{"a": "x"}, "y"],
    ]
    return [plain, nested, [{}], [{}, {}], [{"a": None}] * 3] + declined


@pytest.mark.parametrize("items", _records_cases())
@pytest.mark.parametrize("kernel", [True, False])
def test_compact_items_is_json(items, kernel, monkeypatch):
    """``compact_items`` (a slice of ``index.json``'s transfers) is the compact JSON of the items, with
    the C kernel and without it; what the kernel declines, json writes."""
    from placeviz import jsontext

    _use_kernel(monkeypatch, kernel, "_records", "json_records", jsontext._no_records)
    expected = json.dumps(items, separators=(",", ":"))[1:-1].encode("utf-8")
    assert jsontext.compact_items(items) == expected


def test_the_kernel_writes_transfers_and_declines_the_rest():
    """The kernel itself: bytes for the plain lists (so the fast path is taken), None for each
    declined one (so the test above compared json with json there)."""
    from json.encoder import encode_basestring_ascii

    from placeviz.native import kernels

    wire = kernels("_wire")
    if wire is None:
        pytest.skip("placeviz._wire is not built")
    cases = _records_cases()
    for items in cases[:5]:
        assert wire.json_records(items, encode_basestring_ascii) == \
            json.dumps(items, separators=(",", ":"))[1:-1].encode("utf-8")
    for items in cases[5:]:
        assert wire.json_records(items, encode_basestring_ascii) is None, items


def _records(rng: random.Random, plain: bool) -> list[dict]:
    """A list of records as long as :func:`placeviz.jsontext.compact_tree` hands to ``compact_items``:
    ``plain`` ones (values the kernel writes itself, as analyze's variables), or any values."""
    from placeviz.jsontext import RECORDS_MIN

    def value():
        return ({"name": rng.choice(STRINGS), "slots": [{"bytes": rng.randrange(-2**63, 2**63)}] * rng.randrange(3)}
                if plain else _random_value(rng, 2))

    return [{"variable": rng.choice(STRINGS) + str(k), "value": value()} for k in range(RECORDS_MIN + rng.randrange(3))]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("kernel", [True, False])
def test_compact_tree_is_json(seed, kernel, monkeypatch):
    """``compact_tree`` (every compact JSON report): ``json.dumps``'s compact text of documents whose
    long lists of records, at the top or in nested dicts, ``compact_items`` writes, with the C
    kernel and without it; a dict with a key that is not a str, a list the kernel declines and
    anything that is not a dict are json's."""
    from placeviz import jsontext

    _use_kernel(monkeypatch, kernel, "_records", "json_records", jsontext._no_records)
    rng = random.Random(seed)
    documents = [
        {"variables": _records(rng, True), "partition": {"level": "task", "variable_reads": _records(rng, True),
                                                         "other": _random_value(rng, 0)},
         "sync": {"variables": _records(rng, False)}, "notes": _random_value(rng, 0), "empty": {}},
        {"a": {"b": {"c": _records(rng, True)}, 1: "int key"}, "d": [*_records(rng, True), "not a record"]},
        {}, {"k": _random_value(rng, 0)}, _records(rng, True), Counter(a=1), {"c": OrderedDict(a=_records(rng, True))},
    ]
    for document in documents:
        assert jsontext.compact_tree(document) == json.dumps(document, separators=(",", ":"))


def _column_cases():
    """:func:`_records_cases` whose items share one key order, as (keys, columns): the same
    records kept as columns (a partition's transfers, ``TransferTable``)."""
    out = []
    for items in _records_cases():
        if items and all(type(item) is dict for item in items) and all(list(item) == list(items[0]) for item in items):
            keys = list(items[0])
            if keys:
                out.append((keys, [[item[k] for item in items] for k in keys]))
    return out


@pytest.mark.parametrize("case", _column_cases())
@pytest.mark.parametrize("kernel", [True, False])
def test_compact_columns_is_json_of_the_records(case, kernel, monkeypatch):
    """``compact_columns`` (index.json's transfers, from the table's columns): the compact JSON of
    the records ``dict(zip(keys, row))``, with ``placeviz._wire.json_columns`` and without it; what
    the kernel declines, json writes. ``ColumnRecords.compact_pieces``, joined, is the whole list's
    text for any slice size."""
    from placeviz import jsontext

    keys, columns = case
    _use_kernel(monkeypatch, kernel, "_columns", "json_columns", jsontext._no_columns)
    records = [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]
    assert jsontext.compact_columns(keys, columns) == json.dumps(records, separators=(",", ":"))[1:-1].encode()
    table = jsontext.ColumnRecords(keys, columns)
    assert table.records() == records and len(table) == len(records)
    for size in (1, 7, 10_000):
        assert b"".join(table.compact_pieces(size)) == json.dumps(records, separators=(",", ":")).encode()


def test_the_column_kernel_writes_what_the_record_kernel_writes():
    """``json_columns`` gives ``json_records``' bytes (or None) for every case, and declines columns
    of unequal lengths."""
    from json.encoder import encode_basestring_ascii

    from placeviz.native import kernels

    wire = kernels("_wire")
    if wire is None:
        pytest.skip("placeviz._wire is not built")
    for keys, columns in _column_cases():
        records = [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]
        assert wire.json_columns(keys, columns, encode_basestring_ascii) == \
            wire.json_records(records, encode_basestring_ascii)
    assert wire.json_columns(["a", "b"], [[1, 2], [3]], encode_basestring_ascii) is None
    assert wire.json_columns([], [], encode_basestring_ascii) is None
    assert wire.json_columns(["a"], [[]], encode_basestring_ascii) == b""


def test_the_kernel_finds_an_escaped_character_at_any_position():
    """``json_columns`` reads a string eight bytes at a time for characters json escapes: each such
    character (and its neighbours in byte value) at every position of strings up to 27 characters,
    around the eight-byte blocks, gives json's own text."""
    from json.encoder import encode_basestring_ascii

    from placeviz.native import kernels

    wire = kernels("_wire")
    if wire is None:
        pytest.skip("placeviz._wire is not built")
    specials = [chr(c) for c in (*range(0x20), 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7e, 0x7f)] + ["é"]
    strings = [("abcdefghijklmnopqrstuvwxyz0"[:n], n) for n in range(28)]
    column = [s[:k] + c + s[k:] for s, n in strings for k in range(n + 1) for c in specials] + [s for s, _ in strings]
    records = [{"s": s} for s in column]
    assert wire.json_columns(["s"], [column], encode_basestring_ascii) == \
        json.dumps(records, separators=(",", ":"))[1:-1].encode()
