"""Choose a view's collapse depth from the size of the picture it makes, not from a fixed box count.

A fixed budget of boxes says nothing about what a reader sees: 250 boxes of a model whose scopes
sit side by side make an 18,000 px wide strip, while 250 boxes of a deep chain fit a screen. So a
view drawn with the default options is laid out, measured, and collapsed further until its long
side fits :data:`MAX_SIDE_PX` at 100 % zoom with the emitter's fonts (10 pt boxes and edges, never
scaled down). Each try costs one ``dot`` run of a collapsed view (0.1-0.6 s for the samples), and
both orientations (``rankdir`` TB and LR) are tried at each budget: boxes are wide and short, so a
picture with many boxes per rank fits better when the ranks run left to right.

The next budget comes from how much too big the last picture was: its long side grows about as
the 0.7th power of the box count (measured on the samples: 60 -> 250 boxes of inception's devices
view, 6,209 -> 16,509 px), so a picture ``r`` times too long needs about ``r ** 1.45`` times fewer
boxes; a little more is taken off so that most views fit on the second try.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from placeviz.render.diagram import Diagram
from placeviz.render.dot import to_dot

MAX_SIDE_PX = 2500
"""Long side of a default picture at 100 %: a laptop screen shows it with a little scrolling."""
PX_PER_PT = 96 / 72
"""Graphviz's SVG is in points; browsers and ``dot -Tpng`` (96 dpi) draw 4/3 px per point."""
START_BUDGET = 150
"""Boxes of the first try: the size of a view that fits when its scopes form a few deep chains."""
FIRST_TRY = {"devices": 60, "deps": 80}
"""Where the search starts per view (others: :data:`START_BUDGET`): the samples' default devices
views end at 19-41 boxes and their deps views at 29-53, so starting there saves two or three
builds, which cost more than the layout on big graphs (1.3 s per build of a 50k-op devices view)."""
MIN_BUDGET = 6
TRIES = 7
REFINE = 2
REFINE_OPS = 1_500_000
"""Ops the search's builds may have collapsed between them (each build counts the ops of its view)
for the refinement to run. Work, not seconds: a time budget (it was 3 s) made the picture depend
on how loaded the machine was. A build costs about as much as the ops it collapses, so this stands
for what the 3 s allowed on an idle machine: on the samples (up to 12.5k ops) and at 200k ops (at
most :data:`TRIES` builds: 1.4M) the refinement always runs, as it did there; at 1M ops (at least
two builds before it: 2M) it never does, as the first two builds already took more than 3 s."""
EXPONENT = 1.45
_SIZE = re.compile(rb'<svg width="([\d.]+)pt" height="([\d.]+)pt"')


def start_budget(view: str) -> int:
    """The first budget :func:`fit_view` tries for ``view``."""
    return FIRST_TRY.get(view, START_BUDGET)


def svg_size_px(svg: bytes) -> tuple[float, float]:
    """(width, height) in CSS px of an SVG made by Graphviz."""
    m = _SIZE.search(svg[:2000])
    if m is None:
        raise ValueError("not an SVG made by Graphviz (no width/height in pt)")
    return float(m.group(1)) * PX_PER_PT, float(m.group(2)) * PX_PER_PT


@dataclass
class Fit:
    diagram: Diagram
    svg: bytes
    budget: int
    size: tuple[float, float]
    seconds: float
    tries: list[str] = field(default_factory=list)
    """One line per try: budget, boxes, orientation, size."""

    max_side: float = MAX_SIDE_PX

    @property
    def fits(self) -> bool:
        return max(self.size) <= self.max_side


def _other(rankdir: str) -> str:
    return "LR" if rankdir == "TB" else "TB"


def fit_view(build: Callable[[int], Diagram], run: Callable[[str], bytes], budget: int = START_BUDGET,
             max_side: float = MAX_SIDE_PX, say: Callable[[str], None] | None = None) -> Fit:
    """The largest collapse of ``build(budget)`` whose picture fits ``max_side`` px (see the module
    docstring); the smallest picture tried when none fits. ``run(dot_text)``: the SVG bytes (it may
    raise, e.g. on a timeout; the caller's fallbacks then apply).

    Once a budget fits after one that did not, up to :data:`REFINE` more tries halve the gap
    between them, so that the picture uses the room it has rather than the first guess (unless
    the builds so far collapsed more than :data:`REFINE_OPS` ops). The result depends on the
    inputs only, never on the clock: the clock only reports how long the search took.
    """
    say = say or (lambda _m: None)
    started = time.perf_counter()
    tries: list[str] = []
    smallest: list[Fit] = []
    work = [0]  # ops collapsed by the builds so far

    def attempt(b: int) -> tuple[Fit | None, float, int]:
        """(the fitting picture at budget ``b`` or None, its shortest long side, boxes drawn)."""
        d = build(b)
        work[0] += len(d.node_box) if d.node_box is not None else len(d.boxes)
        longest: float | None = None
        for rankdir in (d.rankdir, _other(d.rankdir)):
            d = dataclasses.replace(d, rankdir=rankdir)
            svg = run(to_dot(d))
            size = svg_size_px(svg)
            tries.append(f"{b} boxes max, {len(d.boxes)} drawn, {rankdir}: {size[0]:,.0f} x {size[1]:,.0f} px")
            fit = Fit(d, svg, b, size, 0.0, max_side=max_side)
            if not smallest or max(size) < max(smallest[0].size):
                smallest[:] = [fit]
            if fit.fits:
                return fit, max(size), len(d.boxes)
            longest = max(size) if longest is None else min(longest, max(size))
        assert longest is not None  # the loop above drew both rankdirs, neither fitting
        return None, longest, len(d.boxes)

    def done(fit: Fit) -> Fit:
        fit.seconds, fit.tries = time.perf_counter() - started, tries
        return fit

    too_big = None  # boxes of the smallest picture that did not fit
    last_boxes = None
    for _ in range(TRIES):
        fit, longest, boxes = attempt(budget)
        if fit is not None:
            break
        if boxes == last_boxes or budget <= MIN_BUDGET:
            return done(smallest[0])  # the view cannot get coarser
        too_big = last_boxes = boxes
        budget = max(MIN_BUDGET, min(boxes - 1, int(min(budget, boxes) / (longest / max_side) ** EXPONENT * 0.9)))
        say(f"the view is {longest:,.0f} px long; collapsing to at most {budget} boxes")
    else:
        return done(smallest[0])
    if too_big is not None and work[0] <= REFINE_OPS:
        # halve the gap between the budget that fits and the one that did not
        low, high = min(fit.budget, len(fit.diagram.boxes)), too_big
        for _ in range(REFINE):
            mid = (low + high) // 2
            if high - low < 3:
                break
            better, _, _ = attempt(mid)
            if better is None:
                high = mid
                continue
            low = mid
            if len(better.diagram.boxes) > len(fit.diagram.boxes):
                fit = better
    return done(fit)
