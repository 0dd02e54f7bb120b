"""Where command results go: stdout, or a file written atomically; progress goes to stderr."""

from __future__ import annotations

import io as _io
import json
import sys

import click
from rich.console import Console

from placeviz.escape import terminal_text
from placeviz.io import STDOUT, atomic_write


def emit(text: str, output: str | None) -> None:
    """Print ``text`` to stdout (``output`` None or ``-``), or write it to ``output`` through
    :func:`placeviz.io.atomic_write` (never over an input; devices and FIFOs written into)."""
    if output and output != STDOUT:
        atomic_write(output, text if text.endswith("\n") else text + "\n")
        progress(f"wrote {output}")
    else:
        click.echo(text, nl=not text.endswith("\n"))


def to_json(document: dict, *, pretty: bool = True) -> str:
    """``document`` as JSON text ending in a newline: indented for people (``pretty``), else compact.

    Only the compact form runs CPython's C encoder (``json.dumps`` falls back to the pure-Python
    one whenever ``indent`` is set): about 10x faster on big documents such as a partition's
    ``index.json`` (a dict per transfer); the indented form is :func:`placeviz.jsontext.pretty_json`,
    the same text as ``json.dumps(indent=2)`` at twice its speed. Keys keep their insertion order
    in both forms, so the bytes depend only on the document (never on hash seeds).
    """
    if pretty:
        from placeviz.jsontext import pretty_json

        return pretty_json(document) + "\n"
    return json.dumps(document, separators=(",", ":"), sort_keys=False) + "\n"


def render_rich(render, width: int | None = None) -> str:
    """Run ``render(console)`` against an off-screen console and return the text it printed.

    Colour is kept only when stdout is a terminal, so files and pipes get plain text.
    """
    buffer = _io.StringIO()
    console = Console(file=buffer, width=width or 110, force_terminal=sys.stdout.isatty(),
                      color_system="auto" if sys.stdout.isatty() else None, highlight=False)
    render(console)
    return buffer.getvalue()


def progress(message: str) -> None:
    """A progress line on stderr (never mixed into stdout results).

    Messages name files, nodes and devices, which may hold newlines or escape sequences:
    :func:`~placeviz.escape.terminal_text` keeps the line one line and the terminal untouched.
    """
    click.echo(f"placeviz: {terminal_text(message)}", err=True)
