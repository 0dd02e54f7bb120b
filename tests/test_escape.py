"""Hostile model strings through every output format: nothing in a model writes its own output.

A corpus of hostile strings (:data:`HOSTILE`: GitHub workflow commands after a newline or in the
legacy ``##[`` form, DOT breakouts, HTML-label and ``URL`` injection, ``</script>`` and
``<!--<script>``, ``javascript:`` devices, terminal escape sequences, line separators, bidi
overrides) is put into the op types and devices of a GraphDef written with placeviz's own protos
(node names are the one field TF restricts), and into a model's *file name*. Then every format
is checked for the property its language needs, through the CLI, with and without the C kernels:

* ``lint --format github``: the runner's own two parsers (``TryParseV2``/``TryParse`` of
  actions/runner ``ActionCommand.cs``, re-implemented here) find exactly one command per finding
  and error, with the properties placeviz wrote, and none in any other line;
* ``lint --format text``, progress and error lines: one line each, no control character, no
  workflow command;
* ``lint --format json|sarif``: the strings come back exactly;
* ``render`` to ``.dot``: ``dot`` parses it, with exactly the boxes and edges of the view and no
  ``URL``/``href`` attribute; ``.html``: well-formed, the search index round-trips, every SVG is
  inert, only the page's own two scripts; in headless Chromium the report's script runs to its
  end and none of the strings' scripts runs (not even through the ``#find=`` link).

A bounded hypothesis fuzz checks each escaping function of :mod:`placeviz.escape` on arbitrary
text (surrogates, control characters and the languages' special tokens included).
"""

from __future__ import annotations

import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_render import CHROMIUM, FIXTURE, _check_html

from placeviz.escape import (
    UNSAFE,
    dot_html,
    dot_string,
    github_data,
    github_property,
    html_text,
    script_json,
    svg_for_html,
    terminal_text,
    visible,
)
from placeviz.native import NO_KERNELS_ENV
from placeviz.protos import GraphDef

HAS_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAS_DOT, reason="Graphviz's dot is not installed")
PWN = "document.body.setAttribute('data-pwned','{}')"

HOSTILE = [
    "x\n::error::injected by a newline",
    "x\r\n::warning file=evil.py,line=1::crlf",
    "%0A::error::percent-encoded newline",
    "a ##[error]legacy command mid-line",
    "##[stop-commands]tok",
    "::error::at the start",
    '"];pw[URL="javascript:' + PWN.format("dot-quote") + '" label="CLICK"];x[label="',
    '\\"];pw[URL="javascript:' + PWN.format("dot-backslash") + '"];x[label="',
    '<x>];pw[URL="javascript:' + PWN.format("dot-html-string") + '" label="CLICK"];x[label=<y>',
    '<<table><tr><td href="javascript:' + PWN.format("html-label") + '">CLICK</td></tr></table>>',
    "<!--<script>",
    "</script><script>" + PWN.format("script-close") + "</script>",
    '"><script>document.title="PWNED"</script>',
    "<img src=x onerror=\"" + PWN.format("img") + "\">",
    "<svg onload=\"" + PWN.format("svg") + "\">",
    "javascript:" + PWN.format("js-url"),
    "data:text/html,<script>alert(1)</script>",
    "\x1b]0;PWNED-TITLE\x07",
    "\x1b[2J\x1b[31mred\x1b[0m\x9b31m",
    "line\u2028separator\u2029paragraph",
    "bidi\u202eevil\u2066",
    "amp&nbsp;&lt;b&gt;&#60;",
    "\\N \\G \\L \\l escString",
    "del\x7f c1\x85 nul-free\x01\x02",
    "{0} %s %(x)s",
    "[link=https://evil.example/]CLICK[/link] [bold red]rich markup[/bold red]",
]
"""Each string is an op type and a device of one node of :func:`hostile_graph`."""
HOSTILE_FILE_NAME = "evil\n::error file=x,line=1::name %0A, a:b <!--<script> ##[error]x \x1b]0;T\x07.pbtxt"
REGISTERED = {"error", "warning", "notice", "debug", "group", "endgroup", "set-output", "set-env", "add-path",
              "add-mask", "save-state", "add-matcher", "remove-matcher", "echo", "stop-commands"}


# --------------------------------------------------------------------- GitHub's runner, re-implemented
def _unescape(text: str, mappings: list[tuple[str, str]]) -> str:
    for token, replacement in mappings:
        text = text.replace(replacement, token)
    return text


_DATA = [("\r", "%0D"), ("\n", "%0A"), ("%", "%25")]  # ActionCommand._escapeDataMappings, in its order
_PROPERTY = [("\r", "%0D"), ("\n", "%0A"), (":", "%3A"), (",", "%2C"), ("%", "%25")]
_LEGACY = [(";", "%3B"), ("\r", "%0D"), ("\n", "%0A"), ("]", "%5D"), ("%", "%25")]


def runner_command(line: str) -> tuple[str, dict, str] | None:
    """What the GitHub Actions runner makes of one output line: (command, properties, data) or None.

    ``ActionCommandManager.TryProcessCommand`` tries ``ActionCommand.TryParseV2`` (``::cmd k=v::data``
    at the start of the line, after leading whitespace) and then ``TryParse`` (``##[cmd k=v;]data``
    anywhere in the line), both in actions/runner ``src/Runner.Common/ActionCommand.cs``.
    """
    message = line.lstrip()
    if message.startswith("::"):
        end = message.find("::", 2)
        if end >= 0:
            info = message[2:end]
            name, _, props = info.partition(" ")
            if name in REGISTERED:
                properties = {}
                for item in props.strip().split(","):
                    key, sep, value = item.partition("=")
                    if item and sep and key and value:
                        properties[key] = _unescape(value, _PROPERTY)
                return name, properties, _unescape(message[end + 2:], _DATA)
    start = line.find("##[")
    if start >= 0:
        close = line.find("]", start)
        if close >= 0:
            info = line[start + 3:close]
            name, _, props = info.partition(" ")
            if name in REGISTERED:
                properties = {}
                for item in props.split(";"):
                    key, sep, value = item.partition("=")
                    if item and sep and key and value:
                        properties[key] = _unescape(value, _LEGACY)
                return name, properties, _unescape(line[close + 1:], _LEGACY)
    return None


def test_the_runner_model_finds_the_injections_it_must():
    """The re-implemented parser is not vacuous: it sees what unescaped output would inject."""
    assert runner_command("  ::error file=a%2Cb,line=1::x%0Ay") == ("error", {"file": "a,b", "line": "1"}, "x\ny")
    assert runner_command("mentions ##[error]boom")[0] == "error"
    assert runner_command("##[stop-commands]tok")[0] == "stop-commands"
    assert runner_command("placeviz lint: 1 finding") is None
    assert runner_command("::unknown::x") is None and runner_command("##[\\error]x") is None


# ------------------------------------------------------------------------------------ inputs
def hostile_graph(path: Path) -> Path:
    """One node per hostile string (op type and device), wired in a chain so edges cross devices."""
    g = GraphDef()
    g.node.add(name="root", op="Const", device="/job:worker/task:0")
    previous = "root"
    for k, text in enumerate(HOSTILE):
        name = f"n{k}/op>{k}"  # '>' is the one markup character TF allows in a node name
        g.node.add(name=name, op=text, device=text, input=[previous])
        previous = name
    path.write_bytes(g.SerializeToString())
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("hostile")
    named = work / HOSTILE_FILE_NAME
    shutil.copyfile(FIXTURE, named)  # a real placed SyncReplicas graph under a hostile file name
    return {"strings": hostile_graph(work / "hostile.pb"), "file name": named, "dir": work}


def placeviz(args: list, cwd: Path, no_kernels: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != NO_KERNELS_ENV}
    if no_kernels:
        env[NO_KERNELS_ENV] = "1"
    return subprocess.run([sys.executable, "-m", "placeviz", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, errors="surrogateescape", timeout=300)


def assert_safe_lines(text: str) -> list[str]:
    """Lines of terminal or CI-log text: no control character, no workflow command."""
    lines = text.splitlines()
    assert text.count("\n") == len(lines) and "\r" not in text
    for line in lines:
        assert not UNSAFE.search(line), repr(line)
        assert runner_command(line) is None, repr(line)
    return lines


KERNEL_MODES = pytest.mark.parametrize("no_kernels", [False, True], ids=["kernels", "no-kernels"])
MODELS_AND_MODES = pytest.mark.parametrize("which, no_kernels", [
    ("strings", False), ("strings", True),  # the C wire reader and the Python one both read these strings
    ("file name", False),  # a file name never reaches the kernels
], ids=["strings-kernels", "strings-no-kernels", "file-name"])


# ------------------------------------------------------------------------------------ lint
@MODELS_AND_MODES
def test_lint_formats_carry_hostile_strings_safely(models, which, no_kernels):
    model = models[which]
    arg = model.name
    runs = {fmt: placeviz(["lint", arg, "--format", fmt], models["dir"], no_kernels)
            for fmt in ("json", "sarif", "github", "text")}
    for fmt, proc in runs.items():
        assert proc.returncode in (0, 1), (fmt, proc.stderr[-2000:])
        assert_safe_lines(proc.stderr)
    doc = json.loads(runs["json"].stdout)
    findings, errors = doc["findings"], doc["errors"]

    # github: exactly one workflow command per finding and error, with placeviz's properties.
    commands = [(line, runner_command(line)) for line in runs["github"].stdout.splitlines()]
    parsed = [c for _, c in commands if c is not None]
    assert len(parsed) == len(findings) + len(errors)
    for (line, c), f in zip([lc for lc in commands if lc[1] is not None], findings, strict=False):
        name, props, data = c
        assert name == {"error": "error", "warning": "warning", "info": "notice"}[f["severity"]], line
        assert set(props) == {"file", "line", "title"} and props["file"] == visible(f["model"], keep="\r\n")
        assert props["title"] == f"{f['rule']} {f['name']}"
        assert data.endswith(visible(f["message"], keep="\r\n"))
    for line, c in commands:
        if c is None:
            assert not UNSAFE.search(line), repr(line)
    # text: the same findings, one line each (plus their help lines), nothing a terminal or runner obeys.
    lines = assert_safe_lines(runs["text"].stdout)
    assert sum(1 for line in lines if re.search(r": PV\d+ \[(error|warning|info)\] ", line)) == len(findings)
    # json and sarif: the strings come back exactly.
    sarif = json.loads(runs["sarif"].stdout)
    results = sarif["runs"][0]["results"]
    assert [r["properties"]["device"] for r in results] == [f["device"] for f in findings]
    if which == "strings":
        assert {f["device"] for f in findings} >= set(HOSTILE)  # every hostile device is flagged (PV101)
    else:
        assert {f["model"] for f in findings} == {HOSTILE_FILE_NAME}
        assert sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]


# ------------------------------------------------------------------------------------ analyze
def _on_a_terminal(args: list, cwd: Path, no_kernels: bool) -> str:
    """stdout of ``placeviz ARGS`` run on a pseudo-terminal (rich styles only a terminal's output)."""
    env = {k: v for k, v in os.environ.items() if k != NO_KERNELS_ENV}
    if no_kernels:
        env[NO_KERNELS_ENV] = "1"
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "placeviz", *map(str, args)], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) in (0, 1), proc.stderr.read().decode()[-2000:]
    proc.stderr.close()
    return b"".join(chunks).decode("utf-8")


@KERNEL_MODES
def test_analyze_on_a_terminal_shows_hostile_strings_as_text(models, no_kernels):
    out = _on_a_terminal(["analyze", models["strings"].name], models["dir"], no_kernels)
    assert "\x1b[1m" in out  # a terminal indeed: rich styled the output
    text = re.sub(r"\x1b\[[0-9;]*m", "", out).replace("\r\n", "\n")  # rich's own SGR styles
    assert "\x1b" not in text  # no OSC 8 hyperlink ([link=...]), no OSC 0 title, no CSI from the model
    assert_safe_lines(text)
    assert "[link=" in text and "[bold red]" in text  # rich markup in an op type or device is shown as text


# ------------------------------------------------------------------------------------ errors, progress
@KERNEL_MODES
@pytest.mark.parametrize("device", [HOSTILE[0], HOSTILE[3], HOSTILE[17], HOSTILE[19]],
                         ids=["newline-command", "legacy-command", "osc-title", "u2028"])
def test_error_lines_stay_one_line(tmp_path, device, no_kernels):
    g = GraphDef()
    g.node.add(name="v", op="VariableV2", device=device)
    (tmp_path / "m.pb").write_bytes(g.SerializeToString())
    proc = placeviz(["place", "m.pb", "-o", "out.pb"], tmp_path, no_kernels)
    assert proc.returncode == 2 and not proc.stdout
    (line,) = assert_safe_lines(proc.stderr)
    assert line.startswith("placeviz: error: ") and "Traceback" not in proc.stderr
    assert terminal_text(device)[:20] in line or repr(device)[1:21] in line  # the device is named, escaped
    assert not (tmp_path / "out.pb").exists()


def test_file_names_in_errors_progress_and_usage_errors(models, tmp_path):
    missing = tmp_path / ("no such\n::error::model\x1b]0;T\x07.pb")
    proc = placeviz(["analyze", missing], tmp_path, False)
    assert proc.returncode == 2
    (line,) = assert_safe_lines(proc.stderr)
    assert line.startswith("placeviz: error: ") and "\\n::error::model\\x1b]0;T\\x07" in line
    # click's own usage errors quote the path too.
    proc = placeviz(["verify", models["strings"], "--feeds", missing], tmp_path, False)
    assert proc.returncode == 2
    assert "Error:" in assert_safe_lines(proc.stderr)[-1]
    # A progress line ("wrote ...") names the output file.
    out = tmp_path / "out\n::error::x ##[warning]y\x1b[2J.dot"
    proc = placeviz(["render", models["strings"], "-o", out, "--view", "overview"], tmp_path, False)
    assert proc.returncode == 0, proc.stderr
    (line,) = assert_safe_lines(proc.stderr)
    assert line.startswith("placeviz: wrote ") and out.exists()


# ------------------------------------------------------------------------------------ DOT
def _dot_json(source: str) -> dict:
    proc = subprocess.run(["dot", "-Tjson"], input=source.encode("utf-8"), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return json.loads(proc.stdout)


def _shape(doc: dict) -> tuple[set, set, int]:
    """(node names, cluster names, edge count) of ``dot -Tjson`` output; no URL/href anywhere."""
    objects = doc.get("objects", [])
    for item in [doc, *objects, *doc.get("edges", [])]:
        links = [k for k in item if "url" in k.lower() or "href" in k.lower()]
        assert not links, (item.get("name"), links)
    nodes = {o["name"] for o in objects if "nodes" not in o and "subgraphs" not in o}
    clusters = {o["name"] for o in objects if "nodes" in o or "subgraphs" in o}
    return nodes, clusters, len(doc.get("edges", []))


@needs_dot
@MODELS_AND_MODES
def test_dot_output_has_exactly_the_views_boxes(models, which, no_kernels, tmp_path, monkeypatch):
    from placeviz.cli import render
    from placeviz.commands.options import build_options
    from placeviz.io import load
    from placeviz.pipeline import run_pipeline
    from placeviz.render import ViewContext, build_view, to_dot
    from placeviz.render.fit import start_budget
    from placeviz.render.layout import lay_out

    monkeypatch.chdir(models["dir"])  # the CLI runs there: titles name the model as given
    defaults = render.make_context("render", [models[which].name, "-o", "x.dot"]).params  # the CLI's PLACE options
    ctx = ViewContext(run_pipeline(load(models[which].name), build_options(defaults)))
    focus = {"strings": "n3/op>3", "file name": None}[which]
    for view in ("overview", "devices", "deps", "sync"):
        options = ["--focus", focus] if focus else []
        out = tmp_path / f"{view}.dot"
        proc = placeviz(["render", models[which].name, "-o", out, "--view", view, *options], models["dir"],
                        no_kernels)
        assert proc.returncode == 0, proc.stderr[-2000:]
        # The CLI's default: collapsed until the laid-out picture fits a screen.
        diagram = lay_out(lambda b, v=view: build_view(ctx, v, focus=focus, max_nodes=b), start_budget(view), "dot",
                          fit=True).diagram
        written = out.read_text()
        assert written == to_dot(diagram)  # in-process and CLI, kernels or not: the same bytes
        nodes, clusters, edges = _shape(_dot_json(written))
        assert nodes == {f"n{k}" for k in range(len(diagram.boxes))} | ({"legend"} if diagram.legend else set())
        assert clusters == {f"cluster_{k}" for k in range(len(diagram.clusters))}
        assert edges == len(diagram.edges)


# ------------------------------------------------------------------------------------ HTML report
class _Attributes(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.attrs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.attrs.extend((tag, k, v or "") for k, v in attrs)

    handle_startendtag = handle_starttag


LINK_ATTRIBUTES = {"href", "xlink:href", "src", "action", "formaction", "data", "poster", "background"}


def assert_inert_html(text: str) -> None:
    checker = _check_html(text)  # well-formed, no external URL, unique ids
    assert checker.scripts == 2, checker.scripts  # the search index and the report's own script
    parser = _Attributes()
    parser.feed(text)
    for tag, key, value in parser.attrs:
        assert not key.startswith("on"), (tag, key, value)
        if key in LINK_ATTRIBUTES:
            assert value.startswith("#"), (tag, key, value)
    for svg in re.findall(r"<svg.*?</svg>", text, re.S):
        assert svg_for_html(svg) == svg


@needs_dot
@KERNEL_MODES
def test_html_report_of_hostile_strings(models, no_kernels, tmp_path):
    out = tmp_path / "report.html"
    proc = placeviz(["render", models["strings"], "-o", out], models["dir"], no_kernels)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_safe_lines(proc.stderr)
    text = out.read_bytes().decode("utf-8")  # not read_text: it would turn CR LF into LF
    assert_inert_html(text)
    raw = re.search(r'<script type="application/json" id="index">(.*?)</script>', text, re.S).group(1)
    index = json.loads(raw)
    assert set(index["ops"]) == set(HOSTILE) | {"Const"} and set(index["devices"]) == set(HOSTILE) | {
        "/job:worker/task:0"}
    assert "<" not in raw and ">" not in raw and "&" not in raw
    for s in HOSTILE:  # shown as text: tables list every op type and device, escaped
        assert html_text(s) in text


def _chromium_dom(url: str) -> tuple[str, str]:
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--virtual-time-budget=3000", "--dump-dom", url], capture_output=True, text=True,
                          timeout=120)
    return proc.stdout, proc.stderr


@needs_dot
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: the report is validated with html.parser instead")
def test_hostile_report_runs_only_its_own_script_in_chromium(models, tmp_path):
    out = tmp_path / "report.html"
    proc = placeviz(["render", models["strings"], "-o", out], models["dir"], False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    search = "<img src=x onerror=\"" + PWN.format("find") + "\">"
    for fragment in ("", "#find=" + re.sub(r"[^A-Za-z0-9]", lambda m: f"%{ord(m.group()):02X}", search),
                     "#find=%E0%A4%A", "#find=n3/op>3"):
        dom, log = _chromium_dom(out.as_uri() + fragment)
        body = re.search(r"<body[^>]*>", dom)
        assert body and 'data-ready="1"' in body.group(), (fragment, log[-2000:])  # the report's script ran
        assert "data-pwned" not in body.group(), (fragment, body.group())  # no string's script did
        assert re.search(r"<title>placeviz report: [^<]*hostile\.pb</title>", dom), fragment
        assert "Uncaught" not in log, log[-2000:]
        parser = _Attributes()
        parser.feed(dom)
        assert not [a for a in parser.attrs if a[1] in LINK_ATTRIBUTES and not a[2].startswith("#")]
        assert not [a for a in parser.attrs if a[1].startswith("on")]
    where = re.search(r'<div id="where">(.*?)</div>', dom, re.S).group(1)
    assert "n3/op&gt;3 (a ##[error]legacy command mid-line) runs on" in where


# ------------------------------------------------------------------------------------ fuzz
TOKENS = ["\n", "\r", "\r\n", "%", "%0A", "%25", ":", "::", ",", "=", "##[", "]", ";", '"', "'", "\\", "\\\"",
          "<", ">", "&", "&amp;", "<!--", "<script", "</script", "]]>", "\x1b", "\x07", "\x9b", "\x00", "\x7f",
          "\u2028", "\u2029", "\u202e", "\ud800", "\udfff", "\ufffe", "\t", " ", "::error::", "javascript:"]
hostile_text = st.lists(st.one_of(st.text(st.characters(exclude_categories=())), st.sampled_from(TOKENS)),
                        max_size=12).map("".join)
FUZZ = settings(max_examples=200, deadline=None)


@FUZZ
@given(hostile_text)
def test_fuzz_terminal_text_is_one_inert_line(text):
    out = terminal_text(text)
    assert not UNSAFE.search(out)
    assert runner_command(out) is None and runner_command("placeviz: error: " + out) is None
    assert "\n" not in out and "\r" not in out


@FUZZ
@given(hostile_text, hostile_text, hostile_text)
def test_fuzz_github_commands_round_trip(file, title, message):
    # (line and col at the ends: the runner trims the property list, and drops empty values)
    line = (f"::error line=1,file={github_property(file)},title={github_property(title)},col=1::"
            f"{github_data(message)}")
    assert "\n" not in line and "\r" not in line
    name, props, data = runner_command(line)
    assert name == "error"
    expected = {"line": "1", "file": visible(file, keep="\r\n"), "title": visible(title, keep="\r\n"), "col": "1"}
    assert props == {k: v for k, v in expected.items() if v}
    assert data == visible(message, keep="\r\n")


def _dot_quoted_value(quoted: str) -> str:
    """The value of one DOT quoted string (the whole of ``quoted``), as Graphviz reads a label:
    the lexer ends the string at the first unescaped quote; then escString turns ``\\\\`` into a
    backslash and ``\\n`` into a line break, and entities are replaced."""
    assert quoted[0] == '"'
    i = 1
    while quoted[i] != '"':
        i += 2 if quoted[i] == "\\" else 1
    assert i == len(quoted) - 1, "the string ended early: what follows would be DOT syntax"
    body, out, i = quoted[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\":
            out.append({"n": "\n"}.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out).replace("&amp;", "&")


@FUZZ
@given(hostile_text)
def test_fuzz_dot_string_cannot_close_its_quotes(text):
    out = dot_string(text)
    assert not UNSAFE.search(out)
    assert _dot_quoted_value(f'"{out}"') == visible(text, keep="\n")
    import graphviz

    assert graphviz.quoting.quote(graphviz.nohtml(out)) in (out, f'"{out}"')  # the package keeps it as is


@FUZZ
@given(hostile_text)
def test_fuzz_dot_html_is_xml_text(text):
    cell = ET.fromstring(f"<td>{dot_html(text)}</td>")
    assert (cell.text or "") == visible(text) and not list(cell)


@FUZZ
@given(hostile_text)
def test_fuzz_html_text_is_text_and_attribute(text):
    out = html_text(text)
    assert not re.search("[<>\"']", out)
    parser = _Attributes()
    data: list[str] = []
    parser.handle_data = data.append
    parser.feed(f'<p title="{out}" class=\'{out}\'>{out}</p>')
    parser.close()
    expected = visible(text, keep="\t\n\r")
    assert parser.attrs == [("p", "title", expected), ("p", "class", expected)]
    assert "".join(data) == expected


def _utf16(value):
    """``value`` as JavaScript (and ``json.loads``) sees it: strings are UTF-16, so two lone
    surrogates that form a pair are one character."""
    if isinstance(value, str):
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    if isinstance(value, list):
        return [_utf16(v) for v in value]
    if isinstance(value, dict):
        return {_utf16(k): _utf16(v) for k, v in value.items()}
    return value


@FUZZ
@given(st.dictionaries(hostile_text, st.lists(st.one_of(hostile_text, st.integers(), st.none()), max_size=5),
                       max_size=4))
def test_fuzz_script_json_round_trips_and_cannot_end_the_script(document):
    """The search index's shape: names -> lists of strings and numbers."""
    out = script_json(document)
    assert json.loads(out) == _utf16(document)
    assert not re.search("[<>&\u2028\u2029]", out)


@needs_dot
@settings(max_examples=50, deadline=None)
@given(st.lists(hostile_text, min_size=1, max_size=20))
def test_fuzz_graphviz_svg_of_escaped_labels_is_inert(labels):
    """Labels and tooltips through ``dot``: it parses, draws exactly these boxes, and the SVG is inert."""
    import graphviz

    g = graphviz.Digraph("fuzz")
    for k, label in enumerate(labels):
        g.node(f"n{k}", label=graphviz.nohtml(dot_string(label)), tooltip=graphviz.nohtml(dot_string(label)))
    proc = subprocess.run(["dot", "-Tsvg"], input=g.source.encode("utf-8"), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()[-1000:]
    svg = svg_for_html(proc.stdout)
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    titles = [n.find(f"{ns}title").text for n in root.iter(f"{ns}g") if n.get("class") == "node"]
    assert titles == [f"n{k}" for k in range(len(labels))]
