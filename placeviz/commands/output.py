"""Where command results go: stdout, or a file written atomically; messages go to stderr.

Three kinds of stderr line, so that a script or a CI log gets what it needs and a person at a
terminal sees that long work moves:

* :func:`notice`: notes and warnings about the input or the run, always shown;
* :func:`progress`: status messages (``wrote FILE``, a summary): shown on any stderr, silenced
  by ``placeviz --quiet``;
* :mod:`placeviz.progress`: stages with counters, only on a terminal (see there); :func:`say`
  sorts the free-form lines of long runs (verify) into notes and progress events.
"""

from __future__ import annotations

import io as _io
import sys
from collections.abc import Iterator

import click

from placeviz import progress as _progress
from placeviz.io import STDOUT, atomic_write
from placeviz.jsontext import ColumnRecords, compact_items, compact_json, json_text, pretty_json_parts
from placeviz.progress import notice  # the one voice for notes, defined in the core (io.py uses it too)


def emit(text: str, output: str | None) -> None:
    """Print ``text`` to stdout (``output`` None or ``-``), or write it to ``output`` through
    :func:`placeviz.io.atomic_write` (never over an input; devices and FIFOs written into)."""
    _progress.finish()  # the results come last: a progress line would sit in front of them on a terminal
    if output and output != STDOUT:
        atomic_write(output, text if text.endswith("\n") else text + "\n")
        progress(f"wrote {output}")
    else:
        click.echo(text, nl=not text.endswith("\n"))


def to_json(document: dict, *, pretty: bool = False) -> str:
    """``document`` as JSON text ending in a newline: compact, or indented for people (``pretty``,
    the commands' ``--pretty``): :func:`placeviz.jsontext.json_text`, where the choice is explained."""
    return json_text(document, pretty=pretty)


_LIST_SLICE = 10_000
"""Items of a top-level list encoded per call by :func:`to_json_pieces` (a few MB of text)."""
_PIECE_CHARS = 1 << 20


def to_json_pieces(document: dict, *, pretty: bool = False) -> Iterator[bytes]:
    """:func:`to_json` as UTF-8 bytes in pieces whose concatenation is exactly its text, so that a
    writer never holds the whole document's text (a million-node partition's ``index.json`` is
    about 100 MB; as one str, plus its newline and its UTF-8 copy, three times that). Compact:
    each top-level value by CPython's C encoder, a top-level list's items by
    :func:`placeviz.jsontext.compact_items` (index.json's transfers: the same text, a dict at a
    fifth of the cost), a long one in slices of ``_LIST_SLICE`` items (the same text: the
    encoder's options are the same for every item).
    Indented: :func:`placeviz.jsontext.pretty_json_parts` (each top-level value, and each item of
    a top-level list, at twice the speed of json's indenting encoder), gathered in about 1 MB
    pieces. A document with a top-level key that is not a string is one piece. A top-level
    :class:`~placeviz.jsontext.ColumnRecords` (index.json's transfers) is its list of records,
    written compact from its columns (:func:`placeviz.jsontext.compact_columns`)."""
    if pretty or not all(type(key) is str for key in document):
        document = {key: value.records() if isinstance(value, ColumnRecords) else value
                    for key, value in document.items()}
    if not all(type(key) is str for key in document):  # json makes such keys strings: not cut here
        yield to_json(document, pretty=pretty).encode("utf-8")
        return
    if pretty:
        buffer: list[str] = []
        size = 0
        for piece in pretty_json_parts(document):
            buffer.append(piece)
            size += len(piece)
            if size >= _PIECE_CHARS:
                yield "".join(buffer).encode("utf-8")
                buffer, size = [], 0
        buffer.append("\n")
        yield "".join(buffer).encode("utf-8")
        return

    dumps = compact_json
    yield b"{"
    for k, (key, value) in enumerate(document.items()):
        yield (("," if k else "") + dumps(key) + ":").encode("utf-8")
        if isinstance(value, ColumnRecords):
            yield from value.compact_pieces(_LIST_SLICE)
        elif isinstance(value, list) and len(value) > _LIST_SLICE:
            yield b"["
            for lo in range(0, len(value), _LIST_SLICE):
                yield (b"," if lo else b"") + compact_items(value[lo:lo + _LIST_SLICE])
            yield b"]"
        elif type(value) is list:
            yield b"[" + compact_items(value) + b"]"
        else:
            yield dumps(value).encode("utf-8")
    yield b"}\n"


def render_rich(render, width: int | None = None) -> str:
    """Run ``render(console)`` against an off-screen console and return the text it printed.

    Colour is kept only when stdout is a terminal, so files and pipes get plain text. ``rich`` is
    imported here, by the text reports that draw tables, not by every command that emits.
    """
    from rich.console import Console

    buffer = _io.StringIO()
    console = Console(file=buffer, width=width or 110, force_terminal=sys.stdout.isatty(),
                      color_system="auto" if sys.stdout.isatty() else None, highlight=False)
    render(console)
    return buffer.getvalue()


def progress(message: str) -> None:
    """A status line on stderr (never mixed into stdout results), unless ``placeviz --quiet``.

    A status line says that something is done (``wrote FILE``, a summary, the demo's next part):
    it ends the stage :func:`placeviz.progress.begin` started, whose line would otherwise linger.
    Messages name files, nodes and devices, which may hold newlines or escape sequences:
    :func:`~placeviz.escape.terminal_text` keeps the line one line and the terminal untouched.
    """
    _progress.finish()
    if not _progress.is_quiet():
        notice(message)


NOTE_PREFIXES = ("note:", "warning", "error", "skipped")


def say(message: str) -> None:
    """A line of a long run's narration (verify's coordinator, per-task builds): a note or a
    warning (by its first word) is a :func:`notice`; anything else is a progress event of the
    running stage (:func:`placeviz.progress.step`), seen on a terminal only."""
    if message.lower().startswith(NOTE_PREFIXES):
        notice(message)
    else:
        _progress.step(message)
