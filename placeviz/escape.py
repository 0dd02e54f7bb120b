"""Escaping at output boundaries: one function per output language, used by every writer.

A model file is untrusted input (placeviz runs in CI on graph files from pull requests, and its
HTML reports are opened in browsers), and node names are the only model strings TF restricts
(``[A-Za-z0-9.][A-Za-z0-9_.\\-/>]*``): op types, device strings, attr values and file names may
hold anything, newlines and terminal escape sequences included. So no writer puts a model string
into an output as it is; it goes through the function of that output's language:

================================  =========================================================
output                            function
================================  =========================================================
a terminal or CI log line         :func:`terminal_text` (stderr errors and progress, ``lint``
                                  text format, the plain lines of the ``github`` format;
                                  ``analyze`` adds rich's markup escape)
GitHub workflow command           :func:`github_data` (the message), :func:`github_property`
                                  (``file=``, ``title=``)
DOT double-quoted string          :func:`dot_string` (labels, tooltips, every model string)
DOT HTML-like label text          :func:`dot_html`
HTML text and quoted attributes   :func:`html_text`
JSON inside ``<script>``          :func:`script_json`
Graphviz SVG inlined in HTML      :func:`svg_for_html` (checks it is inert)
================================  =========================================================

Characters no output should carry raw (:data:`UNSAFE`): C0 and C1 control characters and DEL
(Unicode category Cc: newline, ESC, BEL...), the line and paragraph separators U+2028/U+2029,
the bidirectional controls (Unicode's Bidi_Control property: they reorder what a reader sees, the
"Trojan Source" trick, CVE-2021-42574), lone surrogates (a file name that is not valid UTF-8;
they cannot be encoded) and U+FFFE/U+FFFF (not XML characters, so an SVG holding one does not
load). Every function shows them as visible escapes (``\\n``, ``\\x1b``, ``\\u202e``), except
where the language has its own encoding for one (a newline in a GitHub message is ``%0A``; JSON
keeps every character exactly, as a ``\\uXXXX`` escape; HTML keeps tab, newline and CR).
Backslashes are not doubled: the result is meant to be read, and an escape that is a literal
backslash in the input reads the same.

Nothing here imports TensorFlow or Graphviz.
"""

from __future__ import annotations

import html
import json
import re

__all__ = ["UNSAFE", "visible", "terminal_text", "github_data", "github_property", "dot_string", "dot_html",
           "html_text", "script_json", "svg_for_html", "UnsafeSvg"]

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                    "\ud800-\udfff\ufffe\uffff]")
"""The characters :func:`visible` escapes (see the module docstring for why each class)."""

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _show(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, keep: str = "") -> str:
    """``text`` with every :data:`UNSAFE` character not in ``keep`` written as a visible escape
    (``\\n``, ``\\r``, ``\\t``, ``\\xNN``, ``\\uNNNN``)."""
    text = str(text)
    if keep:
        return UNSAFE.sub(lambda m: m.group() if m.group() in keep else _show(m.group()), text)
    return UNSAFE.sub(lambda m: _show(m.group()), text)


# ---------------------------------------------------------------------------- terminal / CI log
_LEGACY_COMMAND = "##["
_LEADING_COMMAND = re.compile(r"^(\s*):")


def terminal_text(text: str) -> str:
    """``text`` made safe as (part of) one line on a terminal or in a CI log.

    * Control characters are shown escaped (:func:`visible`): a newline cannot split one error into
      several lines, and ``ESC ] 0 ; title BEL`` cannot retitle the terminal or an ``ESC [`` CSI
      sequence move the cursor or clear the screen.
    * The GitHub Actions runner reads *every* line a step prints for workflow commands:
      ``::cmd::`` at the start of a line (after leading whitespace), and the legacy ``##[cmd]``
      form **anywhere** in a line (``ActionCommand.TryParseV2`` and ``TryParse`` in
      actions/runner ``src/Runner.Common/ActionCommand.cs``; ``ActionCommandManager.
      TryProcessCommand`` falls back from one to the other). So ``##[`` becomes ``##[\\``, the way
      the runner neutralises its own markers in user output (``OutputManager.cs``: ``##[start-action``
      -> ``##[\\start-action``; ``\\error`` is no registered command), and a line that would start
      with ``::`` gets its first colon as ``\\x3a``.
    """
    text = visible(text).replace(_LEGACY_COMMAND, "##[\\")
    if text.lstrip().startswith("::"):
        text = _LEADING_COMMAND.sub(lambda m: m.group(1) + "\\x3a", text, count=1)
    return text


# ---------------------------------------------------------------------------- GitHub workflow commands
def github_data(text: str) -> str:
    """The message of a workflow command (``::error file=...::MESSAGE``), encoded as GitHub's own
    toolkit does: ``%`` -> ``%25``, CR -> ``%0D``, LF -> ``%0A`` (``escapeData`` in actions/toolkit
    ``packages/core/src/command.ts``; the runner's ``ActionCommand.UnescapeData`` reverses it).
    A newline thus stays inside the one annotation instead of starting a line the runner would
    read as a command of its own. Other control characters are shown escaped (:func:`visible`).
    """
    text = visible(text, keep="\r\n")
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_property(text: str) -> str:
    """A property value of a workflow command (``file=``, ``title=``): :func:`github_data` plus
    ``:`` -> ``%3A`` and ``,`` -> ``%2C`` (``escapeProperty`` in actions/toolkit
    ``packages/core/src/command.ts``): a ``,`` would start another property and ``::`` would end
    the property list, letting the value write the command's message itself."""
    return github_data(text).replace(":", "%3A").replace(",", "%2C")


# ---------------------------------------------------------------------------- DOT
def dot_string(text: str) -> str:
    """The inside of a DOT double-quoted string (``"..."``) that shows ``text`` literally.

    The DOT grammar (graphviz.org/doc/info/lang.html) has one escape in a quoted string, ``\\"``;
    Graphviz then reads labels and tooltips as *escString*s (graphviz.org/docs/attr-types/
    escString), where ``\\\\`` is a backslash, ``\\n``/``\\l``/``\\r`` end lines and ``\\N``,
    ``\\G``, ``\\E``, ``\\T``, ``\\H``, ``\\L`` expand to names, and replaces HTML entities
    (``&amp;``, ``&lt;``...) in labels. So: ``\\`` -> ``\\\\``, ``"`` -> ``\\"`` (no string can
    close its quotes and add attributes such as ``URL`` or ``href``), ``&`` -> ``&amp;`` (a
    name like ``a&nbsp;b`` shows as written, and never reaches the SVG as an entity XML does not
    define), a newline -> ``\\n`` (a line break: views join label lines with newlines) and every
    other control character shown escaped (:func:`visible`; most are not XML characters, so an SVG
    holding one would not load).

    The ``graphviz`` package passes a value that looks like ``<...>`` through unquoted, as an
    HTML-like label (where ``<td href="javascript:...">`` makes a link): callers wrap the result
    in ``graphviz.nohtml`` (see :mod:`placeviz.render.dot`); the package's own quoting leaves an
    already escaped string unchanged.
    """
    text = visible(text, keep="\n")
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;").replace("\n", "\\n")


def dot_html(text: str) -> str:
    """Text inside a Graphviz HTML-like label (``<<table>...</table>>``).

    Graphviz parses those labels as XML (graphviz.org/doc/info/shapes.html#html), so ``<``, ``>``,
    ``&`` and quotes are written as entities (``html.escape``) and control characters, which XML
    forbids (the label would not parse and ``dot`` would fail), are shown escaped.
    """
    return html.escape(visible(text), quote=True)


# ---------------------------------------------------------------------------- HTML, script data, SVG
def html_text(value) -> str:
    """Text or a double- or single-quoted attribute value in HTML: ``& < > " '`` as entities
    (``html.escape(quote=True)``; WHATWG HTML, "serialising HTML fragments", escapes the same set
    for attributes and text). Control characters other than tab, newline and CR, bidi controls and
    lone surrogates are shown escaped (:func:`visible`). ``None`` is the empty string."""
    return html.escape(visible("" if value is None else str(value), keep="\t\n\r"), quote=True)


_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(document) -> str:
    """JSON text to embed in a ``<script>`` element, safe against every string in it.

    Inside ``<script>`` the HTML parser ends the element at ``</script`` and, after ``<!--``, a
    ``<script`` switches it into the "script data double escaped" state, where the next
    ``</script>`` no longer ends the element (WHATWG HTML, "Restrictions for contents of script
    elements"): an op type ``<!--<script>`` would swallow the rest of the page, the report's own
    script included. Writing ``<``, ``>`` and ``&`` as ``\\u003c``, ``\\u003e``, ``\\u0026`` (valid
    only inside JSON strings, which is the only place JSON can hold them) leaves the parser
    nothing to find, and U+2028/U+2029 as escapes keeps the text valid JavaScript for old engines
    too. ``json.loads``/``JSON.parse`` of the result give ``document`` back.
    """
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=True)
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_UNSAFE[m.group()], text)


SVG_ELEMENTS = frozenset({"svg", "g", "title", "desc", "a", "polygon", "polyline", "path", "ellipse", "circle",
                          "rect", "line", "text", "tspan", "defs", "linearGradient", "radialGradient", "stop"})
"""What Graphviz's SVG renderer (``plugin/core/gvrender_core_svg.c``) writes for placeviz's views.
No ``script``, ``foreignObject``, ``use``, ``image``, ``style`` or animation element (``set`` and
``animate`` can rewrite an ``href`` after load)."""
_SVG_PROLOG = re.compile(r"^.*?(?=<svg[\s>])", re.S)
_URL_VALUE = re.compile(r"url\(\s*(?!['\"]?#)", re.I)


class UnsafeSvg(ValueError):
    """The SVG holds an element or attribute that could run script or load something."""


def svg_for_html(svg: bytes | str) -> str:
    """The ``<svg>`` element of a Graphviz SVG document, checked inert, for inlining in HTML.

    The XML prolog and the DOCTYPE (with its DTD URL) are dropped. Then every element must be one
    of :data:`SVG_ELEMENTS` and no attribute may be an ``href`` (``xlink:href`` or plain), an
    event handler (``on...``), ``xml:base``, or a ``url(...)`` that is not a ``#fragment``:
    placeviz never sets Graphviz's ``URL``/``href`` attributes and escapes every model string,
    so this only fails if that ever stops being true, and then the report is refused
    (:class:`UnsafeSvg`) rather than written with a link a click would follow.
    """
    import xml.etree.ElementTree as ET  # here: the CLI imports this module at start-up

    text = svg.decode("utf-8") if isinstance(svg, bytes) else svg
    element = _SVG_PROLOG.sub("", text, count=1)
    try:
        root = ET.fromstring(element)
    except ET.ParseError as e:
        raise UnsafeSvg(f"Graphviz wrote SVG that is not well-formed XML ({e})") from None
    for el in root.iter():
        tag = el.tag.rsplit("}", 1)[-1]
        if tag not in SVG_ELEMENTS:
            raise UnsafeSvg(f"Graphviz wrote an unexpected <{tag}> element")
        for name, value in el.attrib.items():
            local = name.rsplit("}", 1)[-1].lower()
            if local == "href" or local.startswith("on") or local == "base" or _URL_VALUE.search(value):
                raise UnsafeSvg(f"Graphviz wrote an active attribute {local}={value[:40]!r} on <{tag}>")
    return element
