"""The JSON text placeviz writes: compact by default, indented (``--pretty``) for people.

Every JSON report (``analyze``, ``lint`` JSON and SARIF, ``verify``, ``compare-modes``,
``partition``'s ``index.json``) is written by :func:`json_text`: compact, through CPython's C
encoder (its long lists of records through :func:`compact_items`: :func:`compact_tree`), unless
the command's ``--pretty`` asks for the indented form, which is byte for byte
``json.dumps(document, indent=2)``. Both forms keep the document's key order (no ``sort_keys``:
the documents are built in a fixed order, so the bytes depend only on the document, never on hash
seeds) and escape non-ASCII characters (``ensure_ascii``), so the two forms hold the same content
and differ only in whitespace.

The indented form, :func:`pretty_json`, is byte for byte what ``json.dumps(document, indent=2)``
writes, about 2x faster. CPython's C encoder only writes compact JSON: with ``indent`` set,
``json.dumps`` falls back to the pure-Python encoder, a generator per container and a call per
value. The analysis report of a 200k-node graph (``placeviz analyze --format json``: one dict per
variable, 12 MB) took about 0.35 s to encode that way. :func:`pretty_json` writes the same text in
one recursive pass that appends strings, encodes each string with the C ``encode_basestring_ascii``
json uses, and handles the common values (str, int, None) of a container inline. Anything it does
not know the exact encoding of (a non-string key, a value json would reject, a subclass of dict or
list it cannot be sure of) hands the whole document to ``json.dumps``, so the output never differs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from json.encoder import encode_basestring_ascii as _string

_INT = int.__repr__
_FLOAT = float.__repr__
_INFINITY = float("inf")


COMPACT_SEPARATORS = (",", ":")
"""``json.dumps`` separators without spaces: the compact form."""


def compact_json(value) -> str:
    """``value`` as compact JSON (no newline): ``json.dumps(value, separators=(",", ":"))`` exactly.

    ``check_circular=False`` spares the C encoder a dict of every container it is inside (10-15%
    of its time on a partition's ``index.json``): the documents are trees built for the output,
    and a cycle would still fail, as a RecursionError instead of a ValueError."""
    return json.dumps(value, separators=COMPACT_SEPARATORS, check_circular=False)


def compact_items(items: list) -> bytes:
    """The items of ``items`` as compact JSON joined by ``,`` (``compact_json(items)[1:-1]``), as
    UTF-8 bytes: a slice of ``index.json``'s ``transfers`` (:func:`placeviz.commands.output.
    to_json_pieces`), a report's list of records (:func:`compact_tree`).

    Why: that list holds a dict of 14 keys per transfer (tens of thousands at 200k nodes), and
    json's C encoder escapes every key of every dict again: 4-5 us a dict, a quarter of the
    write side of ``placeviz partition``. ``placeviz._wire.json_records`` writes the same text
    from dicts that share their keys, the keys escaped once, strings without a character to escape
    copied as they are, everything else handed to json's own ``encode_basestring_ascii``; it
    declines (None) any item or value it does not write exactly as json would (a float, a
    subclass, a dict with a key that is not a str, a 65-bit int), and this function then asks
    json. Without the kernel
    (``PLACEVIZ_NO_KERNELS``), json always: the reference (``tests/test_jsontext.py`` compares them)."""
    global _records
    if _records is None:
        from placeviz.native import kernels

        wire = kernels("_wire")
        _records = getattr(wire, "json_records", None) or _no_records
    text: bytes | None = _records(items, _string)  # a C kernel's result: untyped
    if text is None:
        return compact_json(items)[1:-1].encode("utf-8")
    return text


def _no_records(items: list, escape: Callable[[str], str]) -> None:
    return None


_records: Callable[[list, Callable[[str], str]], bytes | None] | None = None
"""``placeviz._wire.json_records``, or :func:`_no_records`: found on the first call."""


def compact_columns(keys: list[str], columns: list[list]) -> bytes:
    """:func:`compact_items` of the records ``dict(zip(keys, row))`` for each ``row`` of
    ``zip(*columns)``, without making them: the same text, written by
    ``placeviz._wire.json_columns`` from one list per key (a partition's transfers, kept as
    columns: :class:`placeviz.partition.transfers.TransferTable`), or, where it declines or
    without the kernel, by json from the records (the reference: ``tests/test_jsontext.py``)."""
    global _columns
    if _columns is None:
        from placeviz.native import kernels

        wire = kernels("_wire")
        _columns = getattr(wire, "json_columns", None) or _no_columns
    text: bytes | None = _columns(keys, columns, _string)  # a C kernel's result: untyped
    if text is None:
        return compact_json([dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)])[1:-1].encode()
    return text


def _no_columns(keys: list[str], columns: list[list], escape: Callable[[str], str]) -> None:
    return None


_columns: Callable[[list[str], list[list], Callable[[str], str]], bytes | None] | None = None
"""``placeviz._wire.json_columns``, or :func:`_no_columns`: found on the first call."""


class ColumnRecords:
    """A list of records (dicts with the same keys in the same order) kept as one list per key,
    as a JSON document's value: :func:`placeviz.commands.output.to_json_pieces` writes it as the
    list of those dicts (:func:`compact_columns`) without making them; :meth:`records` makes them
    (the indented form, any other writer)."""

    def __init__(self, keys: list[str], columns: list[list]) -> None:
        self.keys = keys
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def records(self) -> list[dict]:
        """The records as dicts, in order."""
        keys = self.keys
        return [dict(zip(keys, row, strict=True)) for row in zip(*self.columns, strict=True)]

    def compact_pieces(self, size: int) -> Iterator[bytes]:
        """The list's compact JSON text (with its brackets) in pieces of at most ``size`` records."""
        yield b"["
        for lo in range(0, len(self), size):
            yield (b"," if lo else b"") + compact_columns(self.keys, [c[lo:lo + size] for c in self.columns])
        yield b"]"


def json_text(document, *, pretty: bool = False) -> str:
    """``document`` as the JSON text of an output file, ending in a newline: compact (CPython's C
    encoder; ``json.dumps`` falls back to the pure-Python encoder whenever ``indent`` is set), or
    with ``pretty`` indented by two spaces (:func:`pretty_json`, today's indented bytes exactly)."""
    if pretty:
        return pretty_json(document) + "\n"
    return compact_tree(document) + "\n"


RECORDS_MIN = 64
"""A list of at least this many dicts is written by :func:`compact_items` in :func:`compact_tree`."""


def compact_tree(document) -> str:
    """:func:`compact_json` of ``document`` exactly, its long lists of dicts written by
    :func:`compact_items`: the records of a report (``analyze``'s ``variables``, the partition
    section's ``variable_reads``, the sync section's ``variables``: tens of thousands of dicts of
    the same keys at 200k nodes, two thirds of its JSON text).

    Why it is the same text: compact JSON has no whitespace, so a dict's text is ``{``, then each
    ``"key":value`` joined by ``,``, then ``}``, whatever wrote each value. A dict with a key that
    is not a str (json writes an int key as a string) goes to json whole."""
    if type(document) is not dict:
        return compact_json(document)
    parts: list[str] = []
    append = parts.append
    for key, value in document.items():
        if type(key) is not str:
            return compact_json(document)
        append(_string(key) + ":")
        t = type(value)
        if t is dict:
            append(compact_tree(value))
        elif t is list and len(value) >= RECORDS_MIN and type(value[0]) is dict:
            append("[" + compact_items(value).decode("ascii") + "]")
        else:
            append(compact_json(value))
        append(",")
    if not parts:
        return "{}"
    parts[-1] = "}"
    return "{" + "".join(parts)


class _Unsupported(Exception):
    """A value whose encoding this module does not reproduce: ``json.dumps`` takes the document."""


def pretty_json(document) -> str:
    """``json.dumps(document, indent=2)`` (keys in insertion order, ASCII only, no trailing newline)."""
    out: list[str] = []
    append = out.append

    def encode(o, nl: str) -> None:
        """Append ``o``; ``nl`` is a newline plus the indentation of the line ``o`` starts on."""
        t = type(o)
        if t is dict:
            if not o:
                append("{}")
                return
            inner = nl + "  "
            sep = "," + inner
            append("{" + inner)
            first = True
            for k, v in o.items():
                if type(k) is not str:
                    raise _Unsupported  # json turns int/float/bool/None keys into strings
                if first:
                    first = False
                else:
                    append(sep)
                tv = type(v)
                if tv is str:
                    append(_string(k) + ": " + _string(v))
                elif tv is int:
                    append(_string(k) + ": " + _INT(v))
                elif v is None:
                    append(_string(k) + ": null")
                else:
                    append(_string(k) + ": ")
                    encode(v, inner)
            append(nl + "}")
        elif t is list or t is tuple:
            if not o:
                append("[]")
                return
            inner = nl + "  "
            sep = "," + inner
            append("[" + inner)
            first = True
            for v in o:
                if first:
                    first = False
                else:
                    append(sep)
                tv = type(v)
                if tv is str:
                    append(_string(v))
                elif tv is int:
                    append(_INT(v))
                else:
                    encode(v, inner)
            append(nl + "]")
        else:
            append(_scalar(o))

    try:
        encode(document, "\n")
    except (_Unsupported, RecursionError):
        return json.dumps(document, indent=2)
    return "".join(out)


def pretty_json_parts(document: dict) -> Iterator[str]:
    """:func:`pretty_json` of a dict with string keys in parts whose concatenation is its text:
    each top-level value, and each item of a top-level list, encoded on its own, so that a writer
    never holds the whole text (``partition --pretty``'s ``index.json``: a dict per transfer).
    A part is :func:`pretty_json` of the value moved to its depth by indenting every line: a
    newline in that text is always layout, never data (json escapes the newlines of strings)."""
    if not document:
        yield "{}"
        return
    for k, (key, value) in enumerate(document.items()):
        head = ("," if k else "{") + "\n  " + _string(key) + ": "
        if type(value) is list and value:
            yield head + "["
            for j, item in enumerate(value):
                yield ("," if j else "") + "\n    " + pretty_json(item).replace("\n", "\n    ")
            yield "\n  ]"
        else:
            yield head + pretty_json(value).replace("\n", "\n  ")
    yield "\n}"


def _scalar(o) -> str:
    """A value that is not a plain dict, list or tuple, as json's encoder writes it (``allow_nan``)."""
    t = type(o)
    if t is str:
        return _string(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if t is int:
        return _INT(o)
    if t is float:
        if o != o:
            return "NaN"
        if o == _INFINITY:
            return "Infinity"
        if o == -_INFINITY:
            return "-Infinity"
        return _FLOAT(o)
    raise _Unsupported  # subclasses (Counter, IntEnum, ...) and types json rejects
