"""Pictures that fit a screen: distinct box names, the size-driven collapse, folded sync chains,
the opened-box pictures of the HTML report.

The input is the golden fixture (``tests/golden/render/mlp_sync.pbtxt``, built by TensorFlow; see
the README there); the samples' pictures are checked in ``tests/test_render.py``. Nothing here
imports TensorFlow.
"""

from __future__ import annotations

import os
import re
import shutil
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from test_render import fixture_pipeline

from placeviz.render import VIEWS, ViewContext, build_view
from placeviz.render.collapse import Group, collapse
from placeviz.render.dot import box_ids, to_dot
from placeviz.render.expand import lay_out_expansions, plan_expansions
from placeviz.render.fit import MAX_SIDE_PX, START_BUDGET, fit_view, svg_size_px
from placeviz.render.labels import common_prefix, distinct_names, name_boxes
from placeviz.render.layout import lay_out, run_graphviz

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def ctx():
    return ViewContext(fixture_pipeline())


# ----------------------------------------------------------------------------- names
GRAD = "gradients/tower_0/{}/Conv2D_grad/tuple/control_dependency_1"


def test_names_keep_the_distinguishing_end_and_are_unique():
    paths = [tuple(GRAD.format(c).split("/")) for c in ("conv2", "conv3")]
    paths += [("a", "b", "x"), ("a", "c", "x"), ("b", "x"), ("read",)]
    names = distinct_names(paths)
    assert len(set(names)) == len(names)
    # Siblings that differ in one component keep it (the old cut at the start read the same twice).
    assert names[0] == "…/conv2/Conv2D_grad/tuple/control_dependency_1"
    assert names[1] == "…/conv3/Conv2D_grad/tuple/control_dependency_1"
    # A path that is the tail of another keeps its whole self; the other grows to its start.
    assert names[2:5] == ["a/b/x", "…/c/x", "b/x"]
    assert names[5] == "read"


def test_equal_paths_on_two_devices_are_told_apart_by_the_device():
    assert distinct_names([("save",), ("save",)], tags=["ps:0", "ps:1"]) == ["save @ps:0", "save @ps:1"]
    assert distinct_names([("save",), ("save",)]) == ["save #1", "save #2"]


def test_long_names_elide_the_middle_not_the_end():
    path = tuple("model/encoder/layer_11/attention/self/query/kernel/Regularizer/l2_regularizer".split("/"))
    other = path[:-1] + ("l1_regularizer",)
    a, b = distinct_names([path, other], width=30)
    assert a.endswith("l2_regularizer") and b.endswith("l1_regularizer")
    assert "…" in a and len(a) <= 34


def test_common_prefix_leaves_every_path_a_component():
    assert common_prefix([("a", "b", "c"), ("a", "b", "d")]) == ("a", "b")
    assert common_prefix([("a", "b"), ("a", "b", "c")]) == ("a",)
    assert common_prefix([("a", "b")]) == ()


@pytest.mark.parametrize("view", VIEWS)
def test_no_two_boxes_of_a_view_share_a_label(ctx, view):
    for budget in (8, 20, 60, START_BUDGET):
        d = build_view(ctx, view, max_nodes=budget)
        labels = Counter(b.label for b in d.boxes)
        assert not [lb for lb, n in labels.items() if n > 1], (view, budget)


def test_a_cluster_says_its_common_scope_once():
    names = [f"model/tower/layer_{k}/{op}" for k in range(3) for op in ("w", "matmul")]
    c = collapse(names, range(len(names)), ["w"] * len(names), 50)
    box_names, prefixes = name_boxes(c.groups, names, lambda g: "dev")
    assert prefixes == {"dev": "model/tower/"}
    assert not any(n.startswith("model") for n in box_names)
    assert len(set(box_names)) == len(box_names)


# ----------------------------------------------------------------------------- fit
def _text_sizes(svg: bytes) -> list[float]:
    root = ET.fromstring(svg)
    return [float(t.get("font-size")) for t in root.iter(f"{SVG}text") if t.get("font-size")]


@needs_dot
@pytest.mark.parametrize("view", VIEWS)
def test_default_pictures_fit_the_screen_with_10pt_text(ctx, view):
    result = lay_out(lambda b: build_view(ctx, view, max_nodes=b), START_BUDGET, "svg", fit=True)
    width, height = svg_size_px(result.data)
    assert max(width, height) <= MAX_SIDE_PX, result.tries
    assert (width, height) == result.size
    assert min(_text_sizes(result.data)) >= 10  # never scaled down: 100 % shows 10 pt text
    labels = Counter(b.label for b in result.diagram.boxes)
    assert max(labels.values()) == 1


@needs_dot
def test_fit_collapses_further_only_when_the_picture_is_too_big(ctx):
    build = lambda b: build_view(ctx, "devices", max_nodes=b)  # noqa: E731
    run = lambda src: run_graphviz(src, "svg")  # noqa: E731
    roomy = fit_view(build, run, START_BUDGET, max_side=100_000)
    assert roomy.budget == START_BUDGET and len(roomy.tries) == 1
    tight = fit_view(build, run, START_BUDGET, max_side=1200)
    assert len(tight.diagram.boxes) < len(roomy.diagram.boxes)
    assert max(tight.size) <= 1200 or tight.budget <= 6, tight.tries
    # What the measurement reads is what Graphviz wrote.
    assert re.search(rb'<svg width="[\d.]+pt"', tight.svg)


class _SlowClock:
    """A clock on which every reading is a minute after the last: a search that asked it how long
    it had taken would think it had run for many minutes."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 60.0
        return self.now


@needs_dot
def test_the_fitted_picture_does_not_depend_on_the_clock(ctx, monkeypatch):
    import placeviz.render.fit as fit

    build = lambda b: build_view(ctx, "devices", max_nodes=b)  # noqa: E731
    run = lambda src: run_graphviz(src, "svg")  # noqa: E731
    quick = fit_view(build, run, START_BUDGET, max_side=2000)
    budgets = list(dict.fromkeys(line.split(" ")[0] for line in quick.tries))
    # 150 and 37 boxes are too big, 20 fits; then the refinement tries 17 and 14 (or 15) boxes
    assert len(budgets) >= 4, quick.tries
    monkeypatch.setattr(fit, "time", _SlowClock())
    slow = fit_view(build, run, START_BUDGET, max_side=2000)
    assert slow.tries == quick.tries
    assert slow.svg == quick.svg and to_dot(slow.diagram) == to_dot(quick.diagram)
    assert slow.seconds >= 60  # the clock was read: it only reports how long the search took


# ----------------------------------------------------------------------------- sync chains
def test_identical_accumulator_chains_are_drawn_once(ctx):
    d = build_view(ctx, "sync", max_nodes=START_BUDGET)
    # The fixture has 4 trainable variables, two per PS task, each with its own accumulator chain.
    folded = [b for b in d.boxes if "× 2 (one per variable)" in b.label]
    assert folded and any("also stands for" in b.tooltip for b in folded)
    assert any("identical accumulator chains drawn as" in n for n in d.notes)
    accumulators = [b for b in d.boxes if "ResourceConditionalAccumulator" in b.label]
    assert len(accumulators) == 2  # one per PS task instead of four
    # Every machinery op still has a box (the report's search finds a folded op in its stand-in).
    m = ctx.pipe.machinery
    for a in m.accumulators:
        assert d.node_box[a.node] >= 0 and d.node_box[a.variable] >= 0
    # The folded variables' verdicts are counted: 4 hold, plus the global step.
    assert sum(int(n) for n in re.findall(r"(\d+) hold,", "\n".join(b.label for b in d.boxes))) == 4


# ----------------------------------------------------------------------------- opened boxes
@needs_dot
def test_opened_box_pictures_cover_their_box_and_have_distinct_ids(ctx):
    d = build_view(ctx, "devices", max_nodes=10)
    subs = plan_expansions(ctx, d)
    assert subs
    lay_out_expansions(subs, lambda src: run_graphviz(src, "svg"))
    names = [e.diagram.name for e in subs]
    assert len(set(names)) == len(names)
    for e in subs:
        assert e.svg.startswith(b"<?xml") and f'id="{e.diagram.name}"'.encode() in e.svg
        pic, _, box = e.parent.rpartition("_n")
        parent = d if pic == d.name else next(s.diagram for s in subs if s.diagram.name == pic)
        key = next(k for k, v in box_ids(parent).items() if v == f"n{box}")
        group = parent.groups[parent.group_keys.index(key)]
        inside = sorted(i for g in e.diagram.groups for i in g.members)
        assert inside == sorted(group.members)  # the picture shows exactly what the box held
        assert len(e.diagram.boxes) >= 2


def test_golden_opened_box(ctx):
    """The first opened-box picture of the golden devices view (regenerate as tests/test_render.py says)."""
    d = build_view(ctx, "devices", max_nodes=10)
    text = to_dot(plan_expansions(ctx, d)[0].diagram)
    path = Path(__file__).parent / "golden" / "render" / "mlp_sync.devices_opened.dot"
    if os.environ.get("PLACEVIZ_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


def test_a_scope_on_two_devices_names_the_task_or_the_device():
    names = ["save/SaveV2", "save/Const", "save/RestoreV2", "save/Assign", "save/x", "save/y"]
    owners = ["ps:0 CPU:0", "ps:1 CPU:0", "worker:0 GPU:1", "(no device)"]
    groups = [Group(owner, ("save",), [k, k + 1]) for k, owner in enumerate(owners)]
    box_names, _ = name_boxes(groups, names, lambda g: g.owner)
    assert sorted(box_names) == ["save @(no device)", "save @ps:0", "save @ps:1", "save @worker:0 GPU:1"]


@needs_dot
def test_the_render_api_fits_unless_given_a_budget(ctx):
    from placeviz.render import render

    fitted = svg_size_px(render(ctx.pipe, "devices", "svg"))
    fixed = svg_size_px(render(ctx.pipe, "devices", "svg", max_nodes=200))
    assert max(fitted) <= MAX_SIDE_PX < max(fixed)
    assert render(ctx.pipe, "devices", "dot", max_nodes=200).count("peripheries=2") > 0


def test_the_report_says_why_no_op_is_explained():
    """Unplaced: how to place it; placed: the command for the ops it has no text for (a graph
    whose placement fails is checked on the misconfigured sample in tests/test_render.py)."""
    from test_render import PLAIN

    from placeviz.io import load
    from placeviz.pipeline import run_pipeline
    from placeviz.render.report import _explain_hint

    assert "give --ps-tasks N" in _explain_hint(ViewContext(run_pipeline(load(str(PLAIN)), None)))
    assert "--explain NAME" in _explain_hint(ViewContext(fixture_pipeline()))
