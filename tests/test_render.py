"""``placeviz render``: views, DOT emission, layout fallback, the HTML report, the CLI contract.

Golden DOT files live in ``tests/golden/render/``; regenerate them after an intended change with

    PLACEVIZ_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_render.py -k golden

and review the diff. Their input, ``mlp_sync.pbtxt``, is a fixed TF-built graph (see the README
there), so they do not change with the installed TensorFlow.

Every sample is built once for the module, in one TensorFlow subprocess; everything else here
runs without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import run_cli

from placeviz.commands.render import write_report
from placeviz.io import load
from placeviz.pipeline import Options, run_pipeline
from placeviz.placement import PlacementOptions
from placeviz.placement.setter import SetterConfig
from placeviz.render import VIEWS, ViewContext, build_view, to_dot
from placeviz.render import layout as layout_module
from placeviz.render.collapse import collapse
from placeviz.render.fit import MAX_SIDE_PX, START_BUDGET, svg_size_px
from placeviz.render.layout import lay_out
from placeviz.render.report import _explain_hint, build_report

GOLDEN = Path(__file__).parent / "golden" / "render"
FIXTURE = GOLDEN / "mlp_sync.pbtxt"
PLAIN = GOLDEN / "mlp_plain.pbtxt"
UPDATE = os.environ.get("PLACEVIZ_UPDATE_GOLDEN") == "1"
HAS_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAS_DOT, reason="Graphviz's dot is not installed")
SAMPLES = ("mlp", "inception", "wide_deep", "lstm", "hashtable", "transformer", "misconfigured")
GOLDEN_OPTIONS = {"overview": {}, "devices": {"max_nodes": 40}, "deps": {"max_nodes": 30},
                  "sync": {"max_nodes": 60}}


def placed_options(ps_tasks: int = 0) -> PlacementOptions:
    return PlacementOptions(setter=SetterConfig(ps_tasks=ps_tasks))


def fixture_pipeline(sync=None):
    """The golden input through the pipeline, with a stable source name (titles show it)."""
    model = dataclasses.replace(load(str(FIXTURE)), source="mlp_sync.pbtxt")
    return run_pipeline(model, Options(placement=placed_options(), sync=sync))


@pytest.fixture(scope="module")
def mlp_pipe():
    return fixture_pipeline()


# ----------------------------------------------------------------------------- collapse
def _names(layers: int) -> list[str]:
    names = ["global_step", "global_step/read", "train_op"]
    for k in range(layers):
        for op in ("w", "w/read", "matmul", "relu"):
            names.append(f"layer_{k}/{op}")
        names.append(f"gradients/layer_{k}/matmul_grad/MatMul")
    return names


def test_collapse_respects_the_budget_and_covers_every_op():
    names = _names(50)
    owners = ["ps" if n.endswith("/w") or n == "global_step" else "worker" for n in names]
    for budget in (3, 8, 20, 60, 1000):
        c = collapse(names, range(len(names)), owners, budget)
        assert len(c.groups) <= max(budget, 2)  # never below one box per owner
        assert all(b >= 0 for b in c.box_of)
        assert sorted(i for g in c.groups for i in g.members) == list(range(len(names)))
        assert all(len({owners[i] for i in g.members}) == 1 for g in c.groups)
    # With room for every op, every op is its own box.
    assert all(g.is_op for g in collapse(names, range(len(names)), owners, 1000).groups)


def test_collapse_groups_numbered_scopes_into_series_and_templates():
    names = _names(50)
    c = collapse(names, range(len(names)), ["w"] * len(names), 12)
    labels = {g.label(names) for g in c.groups}
    # 50 layers do not fit in 12 boxes: one box per sub-scope *across* the layers (a template).
    assert "layer_0 … layer_49/matmul" in labels and "layer_0 … layer_49/w" in labels
    assert "gradients/layer_0 … layer_49/matmul_grad/MatMul" in labels
    templ = next(g for g in c.groups if g.label(names) == "layer_0 … layer_49/matmul")
    assert len(templ.members) == 50 and templ.scopes == 50
    # Room for the layers (one split may use a quarter of the budget): each layer gets its own box.
    wide = {g.label(names) for g in collapse(names, range(len(names)), ["w"] * len(names), 400).groups}
    assert any(label == "layer_7" or label.startswith("layer_7/") for label in wide)
    assert not any("…" in label for label in wide)


def test_collapse_keeps_pinned_ops_alone_and_is_deterministic():
    names = _names(30)
    focus = names.index("layer_3/matmul")
    a = collapse(names, range(len(names)), ["w"] * len(names), 6, pinned=[focus])
    b = collapse(list(names), list(range(len(names))), ["w"] * len(names), 6, pinned=[focus])
    assert a.groups[a.box_of[focus]].members == [focus]
    assert [(g.label(names), g.members) for g in a.groups] == [(g.label(names), g.members) for g in b.groups]


# ----------------------------------------------------------------------------- golden DOT
@pytest.mark.parametrize("view", VIEWS)
def test_golden_dot(view, mlp_pipe):
    text = to_dot(build_view(mlp_pipe, view, **GOLDEN_OPTIONS[view]))
    path = GOLDEN / f"mlp_sync.{view}.dot"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"missing {path}; run with PLACEVIZ_UPDATE_GOLDEN=1"
    assert text == path.read_text()


SVG_NS = "{http://www.w3.org/2000/svg}"


def _edges_across_cluster_labels(svg: bytes) -> list[tuple[str, str]]:
    """(cluster label line, edge) for each edge whose drawn path runs through a line of a cluster's
    label: the label's box from its text position and size (Helvetica: about 0.6 of the font size
    per character), the path sampled along its cubic Bezier segments."""
    root = ET.fromstring(svg)
    boxes = []
    for g in root.iter(f"{SVG_NS}g"):
        if g.get("class") == "cluster":
            for t in g.iter(f"{SVG_NS}text"):
                x, y, size = float(t.get("x", 0)), float(t.get("y", 0)), float(t.get("font-size", 10))
                width = 0.6 * size * len(t.text or "")
                left = {"start": x, "middle": x - width / 2, "end": x - width}[t.get("text-anchor", "start")]
                boxes.append((t.text, left, y - size, left + width, y + size / 4))
    crossing = []
    for g in root.iter(f"{SVG_NS}g"):
        if g.get("class") != "edge":
            continue
        points: list[tuple[float, float]] = []
        for path in g.iter(f"{SVG_NS}path"):
            numbers = [float(v) for v in re.findall(r"-?[\d.]+", path.get("d", ""))]
            ends = list(zip(numbers[0::2], numbers[1::2], strict=False))
            for k in range(0, len(ends) - 3, 3):  # M p0 C p1 p2 p3 p4 p5 p6 ...
                p0, p1, p2, p3 = ends[k:k + 4]
                points += [tuple((1 - t) ** 3 * a + 3 * (1 - t) ** 2 * t * b + 3 * (1 - t) * t ** 2 * c + t ** 3 * d
                                 for a, b, c, d in zip(p0, p1, p2, p3, strict=True))
                           for t in (i / 20 for i in range(21))]
        crossing += [(text, g.findtext(f"{SVG_NS}title") or "") for text, x0, y0, x1, y1 in boxes
                     if any(x0 <= x <= x1 and y0 <= y <= y1 for x, y in points)]
    return crossing


@needs_dot
def test_no_edge_of_the_overview_runs_through_a_cluster_label(mlp_pipe):
    from placeviz.render.layout import run_graphviz

    d = build_view(mlp_pipe, "overview")
    assert _edges_across_cluster_labels(run_graphviz(to_dot(d), "svg")) == []
    # The label above the worker cluster, where the traffic from the PS tasks comes in, is crossed.
    for cluster in d.clusters:
        cluster.label_below = False
    assert ("job worker", "n1->n2") in _edges_across_cluster_labels(run_graphviz(to_dot(d), "svg"))


def test_same_graph_gives_the_same_dot(mlp_pipe):
    again = fixture_pipeline()
    for view in VIEWS:
        assert to_dot(build_view(mlp_pipe, view)) == to_dot(build_view(again, view)), view


def test_dot_uses_synthetic_ids_and_carries_the_layout_limits(mlp_pipe):
    text = to_dot(build_view(mlp_pipe, "devices"))
    edges = re.findall(r"^\s*(\S+) -> (\S+)", text, re.M)
    assert edges and all(re.fullmatch(r"n\d+", a) and re.fullmatch(r"n\d+", b) for a, b in edges)
    for attr in ("mclimit=0.1", "nslimit=1", "nslimit1=1", "splines=false"):
        assert attr in text


# ----------------------------------------------------------------------------- view content
def test_overview_edges_carry_the_bytes_of_one_step(mlp_pipe):
    d = build_view(mlp_pipe, "overview")
    part = mlp_pipe.analysis.partition
    assert len(d.boxes) == 3  # ps:0, ps:1, worker:0
    red = [e for e in d.edges if e.style == "solid"]
    total = sum(t["bytes"] or 0 for t in mlp_pipe.partitions.transfers)
    assert total == part["bytes_per_step"] > 0
    # data tensors and control-only transfers are counted apart ("4 tensors + 1 control", "2 control")
    tensors = sum(int(m.group(1)) for e in red for m in [re.search(r"(\d+) tensors?", e.label)] if m)
    control = sum(int(m.group(1)) for e in red for m in [re.search(r"(\d+) control", e.label)] if m)
    assert tensors + control == part["transfers"] and control == part["control_transfers"] > 0
    assert not any("0 B/step" in e.label for e in red)  # a control edge carries no data, not zero bytes
    ps_box = next(b for b in d.boxes if "ps:1" in b.label)
    assert "3 variables" in ps_box.label and "% of PS" in ps_box.label


def test_devices_view_clusters_per_device_and_labels_cross_device_bytes(mlp_pipe):
    d = build_view(mlp_pipe, "devices", max_nodes=40)
    assert len(d.boxes) <= 40
    devices = {c.tooltip for c in d.clusters if c.key[0] == "dev"}
    assert devices == set(mlp_pipe.devices)
    assert any("% of PS bytes" in c.label for c in d.clusters)
    cross = [e for e in d.edges if e.color == "#c0392b"]
    assert cross and any("/step" in e.tooltip for e in cross)
    # Every op is in exactly one box, on its own device.
    g = mlp_pipe.graph
    assert all(b >= 0 for b in d.node_box)
    owner = {k: k[1] for k in d.group_keys}
    assert all(owner[d.group_keys[d.node_box[i]]] == mlp_pipe.devices[i] for i in range(len(g)))
    assert len(d.group_keys) == len(d.boxes)


def test_devices_and_overview_outline_the_focus(mlp_pipe):
    d = build_view(mlp_pipe, "devices", max_nodes=20, focus="hid_w")
    focus_key = d.group_keys[d.node_box[mlp_pipe.graph.index["hid_w"]]]
    assert next(b for b in d.boxes if b.key == focus_key).penwidth == 3.0
    overview = build_view(mlp_pipe, "overview", focus="hid_w")
    (outlined,) = [b for b in overview.boxes if b.penwidth == 3.0]
    assert outlined.key == ("dev", mlp_pipe.devices[mlp_pipe.graph.index["hid_w"]])


def test_deps_view_depth_and_closure(mlp_pipe):
    g = mlp_pipe.graph
    one = build_view(mlp_pipe, "deps", focus="Assign_1", depth=1)
    inputs = {g.names[s] for s, _ in g.inputs_of(g.index["Assign_1"])}
    shown = {lbl.split("\n")[0] for lbl in (b.label for b in one.boxes)}
    assert inputs <= shown and "train_op" in shown  # its consumer
    assert any(e.style == "dashed" for e in build_view(mlp_pipe, "deps", focus="train_op", depth=3).edges)
    closure = build_view(mlp_pipe, "deps", max_nodes=25)  # default focus: the worker's train op
    assert "dependencies of train_op" in closure.title and "everything it runs" in closure.title
    assert len(closure.boxes) <= 25 + 25  # the budget plus the pinned focus and neighbours


def test_deps_view_marks_chief_only_ops():
    pipe = fixture_pipeline()
    d = build_view(pipe, "deps", focus="sync_token_q_EnqueueMany", max_nodes=400)
    chief = [b for b in d.boxes if "[chief only]" in b.label]
    assert any("AccumulatorTakeGradient" in b.label for b in chief)
    assert not any(b.label.startswith("train_op") for b in chief)


def test_sync_view_shows_the_proof(mlp_pipe):
    d = build_view(mlp_pipe, "sync")
    assert "HOLDS" in d.notes[0]
    labels = "\n".join(b.label for b in d.boxes)
    for op in ("QueueDequeueV2", "AccumulatorApplyGradient", "AccumulatorTakeGradient", "QueueEnqueueManyV2",
               "ApplyGradientDescent"):
        assert op in labels
    # 4 trainable variables (two per PS task, their identical chains folded: "2 hold") + global_step.
    alone = sum(1 for b in d.boxes if "\nholds" in b.label)
    folded = sum(int(n) for n in re.findall(r"(\d+) hold, 0 violated", labels))
    assert (alone, folded) == (1, 4)
    assert all(b.fill == "#a6d96a" for b in d.boxes if "hold" in b.label)  # green


def _with_worker_side_update(tmp_path) -> Path:
    """The fixture plus a hand-written AssignAdd of hid_b that the worker's train op runs."""
    from google.protobuf import text_format

    from placeviz.protos import MetaGraphDef

    meta = text_format.Parse(FIXTURE.read_text(), MetaGraphDef())
    nodes = {n.name: n for n in meta.graph_def.node}
    hid_b = nodes["hid_b"]
    bump = meta.graph_def.node.add(name="bad/AssignAdd", op="AssignAdd", device=hid_b.device,
                                   input=["hid_b", "hid_b/read"])
    bump.attr["T"].CopyFrom(hid_b.attr["dtype"])
    nodes["train_op"].input.append("^bad/AssignAdd")
    path = tmp_path / "bad.pbtxt"
    path.write_text(text_format.MessageToString(meta))
    return path


def test_sync_view_draws_a_violation_in_red(tmp_path):
    pipe = run_pipeline(str(_with_worker_side_update(tmp_path)), Options(placement=placed_options()))
    assert not pipe.proof.single_update
    d = build_view(pipe, "sync")
    assert "VIOLATED" in d.notes[0]
    assert any(e.color == "#d62728" for e in d.edges)
    bad = [b for b in d.boxes if b.border == "#d62728"]
    assert any("bad/AssignAdd" in b.tooltip and b.label.startswith("…/AssignAdd") for b in bad)
    assert any(b.fill == "#f46d43" and "hid_b" in b.label for b in d.boxes)


def test_sync_view_without_machinery_is_a_note():
    model = load(str(FIXTURE))
    pipe = run_pipeline(dataclasses.replace(model, source="x"), None)
    pipe.machinery = pipe.proof = None
    d = build_view(pipe, "sync")
    assert len(d.boxes) == 1 and "No SyncReplicasOptimizer" in d.boxes[0].label


# ----------------------------------------------------------------------------- layout
def test_layout_falls_back_to_a_coarser_collapse_then_sfdp(mlp_pipe, monkeypatch):
    calls = []

    def fake(source, fmt, engine="dot", timeout=30.0, extra=()):
        boxes = len(re.findall(r"^\s*n\d+ \[", source, re.M))
        calls.append((engine, boxes))
        if engine == "dot":
            raise layout_module._Attempt(f"{engine} did not finish in {timeout:g} s")
        return b"<svg/>"

    monkeypatch.setattr(layout_module, "run_graphviz", fake)
    monkeypatch.setattr(layout_module, "require_graphviz", lambda fmt, engine="dot": None)
    monkeypatch.setattr(layout_module.shutil, "which", lambda name: "/usr/bin/" + name)
    result = lay_out(lambda b: build_view(mlp_pipe, "devices", max_nodes=b), 90, "svg")
    assert [c[0] for c in calls] == ["dot", "dot", "sfdp"]
    assert calls[1][1] < calls[0][1]  # the second try is coarser
    assert result.engine == "sfdp" and len(result.attempts) == 2


def test_layout_gives_one_error_when_every_attempt_fails(mlp_pipe, monkeypatch):
    monkeypatch.setattr(layout_module, "run_graphviz", _always_fails)
    monkeypatch.setattr(layout_module, "require_graphviz", lambda fmt, engine="dot": None)
    monkeypatch.setattr(layout_module.shutil, "which", lambda name: "/usr/bin/" + name)
    with pytest.raises(layout_module.LayoutFailed, match="could not lay out the devices view: dot failed"):
        lay_out(lambda b: build_view(mlp_pipe, "devices", max_nodes=b), 60, "svg")


def _always_fails(source, fmt, engine="dot", timeout=30.0, extra=()):
    raise layout_module._Attempt(f"{engine} failed (exit 1): boom")


def _fake_dot(tmp_path, body: str) -> None:
    script = tmp_path / "dot"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)


def test_graphviz_runs_in_a_subprocess_with_a_timeout(tmp_path, monkeypatch):
    """A dot that hangs is killed at the timeout; one that fails reports its first error line."""
    sleep = shutil.which("sleep")
    monkeypatch.setenv("PATH", str(tmp_path))
    _fake_dot(tmp_path, f"exec {sleep} 60")
    with pytest.raises(layout_module._Attempt, match="dot did not finish in 0.5 s"):
        layout_module.run_graphviz("digraph g {}", "svg", "dot", timeout=0.5)
    _fake_dot(tmp_path, "echo 'Error: trouble in init_rank' >&2; echo more >&2; exit 1")
    with pytest.raises(layout_module._Attempt, match=r"dot failed \(exit 1\): Error: trouble in init_rank$"):
        layout_module.run_graphviz("digraph g {}", "svg", "dot", timeout=30)


# ----------------------------------------------------------------------------- samples (TF)
BUILD_SAMPLES = textwrap.dedent("""
    import json, sys
    from google.protobuf import text_format  # noqa: F401
    from placeviz.sample_graphs import BuildOptions, build_meta_graph
    out, built = sys.argv[1], {}
    for name in sys.argv[2:]:
        for sync in (True, False):  # SyncReplicas when the sample supports it
            try:
                meta = build_meta_graph(name, BuildOptions(ps_tasks=2, sync_replicas=sync))
            except Exception as e:  # noqa: BLE001
                continue
            with open(f"{out}/{name}.meta", "wb") as f:
                f.write(meta.SerializeToString())
            built[name] = sync
            break
    print(json.dumps(built))
""")


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("render_samples")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", BUILD_SAMPLES, str(out), *SAMPLES], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(built) == set(SAMPLES), proc.stderr[-3000:]
    return out, built


@pytest.mark.tf
@needs_dot
@pytest.mark.parametrize("name", SAMPLES)
def test_every_view_of_every_sample_renders_to_svg(name, samples):
    out, built = samples
    pipe = run_pipeline(str(out / f"{name}.meta"), Options(placement=placed_options()))
    # The misconfigured sample cannot be placed (as TF could not): its views show requested devices.
    assert (pipe.placement_error is not None) == (name == "misconfigured")
    if pipe.placement_error:
        assert "placement fails" in build_view(pipe, "overview").notes[0]
        assert _explain_hint(ViewContext(pipe)).startswith("placement fails as TensorFlow's would")
    for view in VIEWS:
        build = lambda b, v=view: build_view(pipe, v, max_nodes=b)  # noqa: E731
        # The default picture: fits a screen at 100 % (10 pt text), no two boxes named alike.
        fitted = lay_out(build, START_BUDGET, "svg", fit=True)
        assert max(svg_size_px(fitted.data)) <= MAX_SIDE_PX, (view, fitted.tries)
        assert min(float(x) for x in re.findall(rb'font-size="([\d.]+)"', fitted.data)) >= 10  # never scaled down
        labels = Counter(b.label for b in fitted.diagram.boxes)
        assert max(labels.values()) == 1, [lb for lb, n in labels.items() if n > 1]
        d = build(120)
        assert 1 <= len(d.boxes) <= 120 + 25, (view, len(d.boxes))
        assert to_dot(d) == to_dot(build(120)), f"{name} {view}: not deterministic"
        result = lay_out(build, 120, "svg", diagram=d)
        root = ET.fromstring(result.data)
        nodes = root.findall(".//{http://www.w3.org/2000/svg}g[@class='node']")
        assert len(nodes) == len(result.diagram.boxes) + (1 if result.diagram.legend else 0), (view, result.engine)
        if view == "sync" and built[name]:
            assert "machinery" in result.diagram.title and len(result.diagram.boxes) > 5


# ----------------------------------------------------------------------------- HTML report
VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}


class _Checker(HTMLParser):
    """Balanced tags (SVG's self-closing elements included) and every URL an attribute names."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.urls: list[str] = []
        self.ids: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        self._attrs(tag, attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self._attrs(tag, attrs)

    def _attrs(self, tag, attrs):
        if tag == "script":
            self.scripts += 1
        for key, value in attrs:
            if key == "id":
                self.ids.append(value)
            if key in ("src", "href", "xlink:href", "action", "data", "poster") and value and not value.startswith("#"):
                self.urls.append(value)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}> (open: {self.stack[-3:]})")
        else:
            self.stack.pop()


def _check_html(text: str) -> _Checker:
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert text.startswith("<!DOCTYPE html>")
    assert not checker.errors, checker.errors[:5]
    assert not checker.stack, checker.stack
    assert not checker.urls, checker.urls[:5]  # nothing is fetched: no src/href outside the page
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", text)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", text)
    assert len(checker.ids) == len(set(checker.ids)), "duplicate element ids"
    return checker


@needs_dot
def test_html_report_is_self_contained_and_valid(mlp_pipe, tmp_path):
    findings = [{"rule": "PV201", "severity": "warning", "node": "hid_w", "device": "/job:ps/task:1",
                 "message": "a <b>bold</b> claim"}]
    text = build_report(mlp_pipe, findings)
    _check_html(text)
    for view in VIEWS:
        assert f'id="view-{view}"' in text and f'data-view="{view}"' in text
    assert "PV201" in text and "a &lt;b&gt;bold&lt;/b&gt; claim" in text
    index = json.loads(re.search(r'<script type="application/json" id="index">(.*?)</script>', text, re.S).group(1))
    g = mlp_pipe.graph
    assert index["names"] == g.names
    i = g.index["hid_w"]
    assert index["devices"][index["dev"][i]] == mlp_pipe.devices[i]
    # The box the search highlights exists in the devices SVG.
    assert f'id="devices_n{index["boxes"]["devices"][i]}"' in text
    assert "Lint was not run" in build_report(mlp_pipe, None)


CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@needs_dot
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: the report is validated with html.parser instead")
def test_html_report_runs_in_headless_chromium(mlp_pipe, tmp_path):
    path = tmp_path / "report.html"
    write_report(mlp_pipe, path)
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--virtual-time-budget=3000", "--dump-dom", path.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert 'data-ready="1"' in proc.stdout, proc.stderr[-2000:]  # the script ran to its last line
    assert "Uncaught" not in proc.stderr, proc.stderr[-2000:]
    # The search box, opened on one op through the page's #find= link: it says where the op runs
    # and highlights its box in the views.
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000",
                           "--dump-dom", path.as_uri() + "#find=hid_w"], capture_output=True, text=True, timeout=120)
    where = re.search(r'<div id="where">(.*?)</div>', proc.stdout, re.S)
    assert where and "hid_w (VariableV2) runs on /job:ps/replica:0/task:1/device:CPU:0" in where.group(1)
    assert re.search(r'<g id="devices_n\d+" class="node hit"', proc.stdout)


# Drives the report as a reader does, with the events a browser sends: a wheel turn over the
# devices view, a drag, the click that ends the drag (which must not open anything), a click on a
# box that can be opened, then a new #find= in the address bar. It writes what it saw into the
# page (<pre id="test-out">), which --dump-dom returns.
DRIVE = """<script>
window.addEventListener("load", function () {
  var out = {};
  var box = document.querySelector('.svg[data-view="devices"]');
  var pic = box.querySelector('.pic[data-pic="devices"]');
  var r = box.getBoundingClientRect();
  out.before = [+pic.getAttribute("data-scale"), +pic.getAttribute("data-x"), +pic.getAttribute("data-y")];
  box.dispatchEvent(new WheelEvent("wheel", {deltaY: -300, clientX: r.left + 50, clientY: r.top + 50,
                                             bubbles: true, cancelable: true}));
  out.zoom = [+pic.getAttribute("data-scale"), +pic.getAttribute("data-x"), +pic.getAttribute("data-y")];
  box.dispatchEvent(new MouseEvent("mousedown", {button: 0, clientX: r.left + 100, clientY: r.top + 100, bubbles: true}));
  window.dispatchEvent(new MouseEvent("mousemove", {clientX: r.left + 180, clientY: r.top + 140}));
  window.dispatchEvent(new MouseEvent("mouseup", {}));
  out.pan = [+pic.getAttribute("data-x"), +pic.getAttribute("data-y")];
  var index = JSON.parse(document.getElementById("index").textContent);
  out.parent = Object.keys(index.expand).filter(function (k) { return k.indexOf("devices_n") === 0; })[0];
  var shape = document.getElementById(out.parent).querySelector("polygon, path");
  shape.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.openAfterDrag = box.getAttribute("data-open");
  shape.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.open = box.getAttribute("data-open");
  out.expected = index.expand[out.parent];
  out.shown = box.querySelector(".pic:not([hidden])").getAttribute("data-pic");
  out.crumbs = document.querySelector('.crumbs[data-view="devices"]').textContent;
  out.panel = document.getElementById("panel-body").textContent;
  location.hash = "#find=hid";
  setTimeout(function () {
    out.where = document.getElementById("where").textContent;
    out.results = Array.prototype.map.call(document.querySelectorAll("#results li"), function (e) { return e.textContent; });
    location.hash = "#find=hid_w";
    setTimeout(function () {
      out.found = document.getElementById("where").textContent;
      out.why = document.querySelector("#panel-body pre.why").textContent;
      out.opPanel = document.getElementById("panel-body").textContent;
      out.hits = Array.prototype.map.call(document.querySelectorAll(".hit"), function (e) { return e.id; });
      var pre = document.createElement("pre");
      pre.id = "test-out";
      pre.textContent = JSON.stringify(out);
      document.body.appendChild(pre);
    }, 300);
  }, 300);
});
</script>"""


@needs_dot
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium")
def test_html_report_pans_zooms_opens_a_box_and_finds_in_headless_chromium(mlp_pipe, tmp_path):
    import html as html_module

    path = tmp_path / "report.html"
    write_report(mlp_pipe, path)
    text = path.read_text()
    assert text.count("</body>") == 1
    driven = tmp_path / "driven.html"
    driven.write_text(text.replace("</body>", DRIVE + "</body>"))
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--window-size=1400,1000", "--virtual-time-budget=5000", "--dump-dom", driven.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert "Uncaught" not in proc.stderr, proc.stderr[-2000:]
    got = re.search(r'<pre id="test-out">(.*?)</pre>', proc.stdout, re.S)
    assert got, proc.stderr[-2000:]
    out = json.loads(html_module.unescape(got.group(1)))
    assert out["before"] == [1, 0, 0]  # drawn at 100 %: 10 pt text
    scale, x, y = out["zoom"]
    assert scale > 1.5 and x < 0 and y < 0  # zoomed in around the pointer, which stays put
    assert out["pan"] == [x + 80, y + 40]
    assert out["openAfterDrag"] is None  # the click that ends a drag does not open the box
    assert out["open"] == out["shown"] == out["expected"]
    assert out["crumbs"].startswith("devices › inside ")
    assert "ops on /job:ps" in out["panel"] and "Transfers per step" in out["panel"]
    # Ranked: the names whose last component starts with "hid" come before any other match.
    assert out["where"].endswith("best first")
    firsts = [r.split("  —  ")[0].rsplit("/", 1)[-1] for r in out["results"]]
    starts = [f.startswith("hid") for f in firsts]
    assert starts[0] and starts == sorted(starts, reverse=True)
    # A second #find= in the same page (hashchange): found, explained, highlighted.
    assert "hid_w (VariableV2) runs on /job:ps/replica:0/task:1/device:CPU:0" in out["found"]
    assert out["why"].startswith("hid_w (VariableV2) -> /job:ps/replica:0/task:1/device:CPU:0")
    assert "colocation group" in out["why"]
    # The variable's reads cross to the worker through hid_w/read: the panel lists them.
    assert "with hid_w/…" in out["opPanel"] and "sends to " in out["opPanel"]
    assert any(h.startswith("devices_") for h in out["hits"]) and any(h.startswith("overview_") for h in out["hits"])


# ----------------------------------------------------------------------------- CLI
@needs_dot
def test_cli_renders_each_format(tmp_path, capsys):
    for suffix, magic in (("svg", b"<svg"), ("png", b"\x89PNG"), ("pdf", b"%PDF"), ("dot", b"digraph")):
        out = tmp_path / f"v.{suffix}"
        code, _, err = run_cli(["render", FIXTURE, "-o", out, "--view", "overview"], capsys)
        assert code == 0, err
        assert magic in out.read_bytes()[:400]
    out = tmp_path / "r.html"
    code, _, err = run_cli(["render", FIXTURE, "-o", out, "--max-nodes", "60"], capsys)
    assert code == 0, err
    _check_html(out.read_text())


def test_cli_without_graphviz(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot on PATH
    code, _, err = run_cli(["render", FIXTURE, "-o", tmp_path / "v.dot", "--view", "devices"], capsys)
    assert code == 0, err
    assert (tmp_path / "v.dot").read_text().startswith("digraph devices")
    for suffix in ("svg", "png", "html"):
        code, out, err = run_cli(["render", FIXTURE, "-o", tmp_path / f"v.{suffix}"], capsys)
        assert code == 2 and not out
        assert err.count("\n") == 1 and "apt-get install graphviz" in err and ".dot output works" in err
        assert not (tmp_path / f"v.{suffix}").exists()


@pytest.mark.parametrize("args, message", [
    (["--view", "deps", "--focus", "no/such/op"], "--focus: no node named 'no/such/op'"),
    (["--view", "devices", "--focus", "nope"], "--focus: no node named 'nope'"),
])
def test_cli_unknown_focus_is_one_line_exit_2(args, message, tmp_path, capsys):
    code, out, err = run_cli(["render", FIXTURE, "-o", tmp_path / "x.dot", *args], capsys)
    assert code == 2 and not out
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "x.dot").exists()


def test_cli_rejects_an_unknown_suffix(tmp_path, capsys):
    code, _, err = run_cli(["render", FIXTURE, "-o", tmp_path / "x.jpg"], capsys)
    assert code == 2 and ".svg" in err and err.count("\n") == 1


def test_cli_places_and_runs_the_sync_pass(tmp_path, capsys):
    out = tmp_path / "s.dot"
    code, _, err = run_cli(["render", PLAIN, "-o", out, "--view", "sync", "--ps-tasks", "2", "--sync-replicas",
                            "--replicas-to-aggregate", "2"], capsys)
    assert code == 0, err
    text = out.read_text()
    assert "single update per step: HOLDS" in text and "AccumulatorTakeGradient" in text
    code, _, err = run_cli(["render", PLAIN, "-o", out, "--view", "sync", "--ps-tasks", "2"], capsys)
    assert code == 0 and "No SyncReplicasOptimizer machinery" in out.read_text()
    code, _, err = run_cli(["render", PLAIN, "-o", out, "--view", "overview"], capsys)
    assert code == 0 and "not placed" in out.read_text() and "(no device)" in out.read_text()


def test_render_does_not_import_tensorflow(tmp_path):
    script = textwrap.dedent("""
        import sys
        from placeviz.cli import main
        try:
            main(["render", sys.argv[1], "-o", sys.argv[2], "--view", "sync"])
        except SystemExit as e:
            assert e.code == 0, e.code
        leaked = sorted(m for m in sys.modules if m == "tensorflow" or m.startswith("tensorflow."))
        assert not leaked, leaked[:5]
        print("NO_TF_OK")
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(FIXTURE), str(tmp_path / "s.dot")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "NO_TF_OK" in proc.stdout, proc.stderr[-2000:]


def test_core_modules_never_import_render():
    code = ("import sys, placeviz.pipeline, placeviz.analysis, placeviz.placement, placeviz.partition, "
            "placeviz.sync, placeviz.cli\nassert not [m for m in sys.modules if m.startswith('placeviz.render')]")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
