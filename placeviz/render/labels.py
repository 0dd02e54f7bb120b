"""Box names that tell siblings apart: the distinguishing end of a scope path, never its common start.

A training graph's names are long and share most of their length (``gradients/tower_0/conv2/
Conv2D_grad/tuple/control_dependency_1``); cutting them to a fixed width from the start, as a
plain ``…`` + tail does, leaves two sibling boxes reading the same ``…/tuple/control_dependency_1``.
So every picture names its boxes together:

* each box shows the *shortest tail* of its path (in whole name components) that no other box of
  the picture ends with; a path whose tail is not unique grows one component at a time;
* the components every box of a cluster starts with (its common scope) are said once, in the
  cluster's label, and left out of the boxes (:func:`common_prefix`);
* a tail longer than the width keeps its first component (the one that made it unique) and its
  last ones and elides the middle (``conv2/…/tuple/control_dependency_1``); a single component
  longer than the width keeps its start and end;
* two boxes whose whole paths are equal (the same scope split over two devices) are told apart by
  their tag (the device), so no two boxes of one picture carry the same name.

TensorBoard's graph view shows a node's base name inside its expanded parent scope; a static
picture has no parent box to open, so the tail grows until it is unique instead.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict

ELLIPSIS = "…"
WIDTH = 44
"""Characters per box name: about 250 pt at the 10 pt node font, five boxes to a laptop screen."""


def _cut(component: str, width: int) -> str:
    """One over-long component: its start and its end (numbers and ``_grad`` suffixes live there)."""
    if len(component) <= width:
        return component
    head = max(4, width // 3)
    return component[:head] + ELLIPSIS + component[-(width - head - 1):]


def _fit(parts: tuple[str, ...], width: int) -> str:
    """``parts`` joined by ``/``; the middle components elided when the text is too wide."""
    text = "/".join(parts)
    if len(text) <= width or len(parts) == 1:
        return _cut(text, width)
    first = parts[0]
    tail: list[str] = []
    room = width - len(first) - 3  # "first/…/"
    for comp in reversed(parts[1:]):
        if len(comp) + 1 > room and tail:
            break
        tail.insert(0, comp)
        room -= len(comp) + 1
    if len(tail) == len(parts) - 1:
        return text if len(text) <= width else _cut(first, width // 2) + "/" + "/".join(tail)
    return "/".join([_cut(first, width // 2), ELLIPSIS, *(_cut(c, width) for c in tail)])


def common_prefix(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The leading components every path shares, leaving at least one component to each path."""
    if len(paths) < 2:
        return ()
    shortest = min(len(p) for p in paths) - 1
    out = []
    for k in range(shortest):
        comp = paths[0][k]
        if any(p[k] != comp for p in paths):
            break
        out.append(comp)
    return tuple(out)


def distinct_names(paths: list[tuple[str, ...]], tags: list[str] | None = None, width: int = WIDTH) -> list[str]:
    """One name per path, unique across the list (see the module docstring); a shortened one
    starts with ``…/``. ``tags[k]``: said after the name when two whole paths are equal.
    """
    lengths = [min(1, len(p)) for p in paths]
    while True:
        shown: dict[tuple, list[int]] = defaultdict(list)
        for k, p in enumerate(paths):
            shown[p[len(p) - lengths[k]:]].append(k)
        grew = False
        for members in shown.values():
            if len(members) < 2:
                continue
            for k in members:
                if lengths[k] < len(paths[k]):
                    lengths[k] += 1
                    grew = True
        if not grew:
            break
    names = []
    for k, p in enumerate(paths):
        tail = p[len(p) - lengths[k]:]
        if not tail:
            names.append("(all ops)")
            continue
        text = _fit(tail, width)
        names.append(text if len(tail) == len(p) else ELLIPSIS + "/" + text)
    # Equal whole paths (or tails made equal by elision): the tag, then a number, tells them apart.
    seen: dict[str, list[int]] = defaultdict(list)
    for k, name in enumerate(names):
        seen[name].append(k)
    for name, members in seen.items():
        if len(members) < 2:
            continue
        for rank, k in enumerate(members):
            tag = tags[k] if tags else ""
            names[k] = f"{name} @{tag}" if tag else f"{name} #{rank + 1}"
    counts: dict[str, int] = defaultdict(int)
    for k, name in enumerate(names):
        counts[name] += 1
        if counts[name] > 1:
            names[k] = f"{name} #{counts[name]}"
    return names


def series_text(element) -> str:
    """A component of a group's path: a plain name, or a series of numbered siblings written as
    ``first … last`` when short and as their common stem with ``× count`` when not
    (``ResourceAccumulatorApplyGradient* × 9``)."""
    if isinstance(element, str):
        return element
    text = str(element)
    if len(text) <= WIDTH // 2:
        return text
    stem = os.path.commonprefix([element.first, element.last]).rstrip("_-")
    return f"{stem or element.first}* × {element.count}"


def group_path(group, names: list[str]) -> tuple[str, ...]:
    """The components that name a collapsed group (or single op) of :mod:`placeviz.render.collapse`."""
    if group.is_op:
        return tuple(names[group.members[0]].split("/"))
    path = tuple(series_text(e) for e in group.path)
    if group.others is not None:
        return (*path, f"{ELLIPSIS} {len(group.others)} more")
    return path or ("(all ops)",)


_CPU0 = re.compile(r"^(\S+:\d+) CPU:0$")


def _short_tag(tag: str) -> str:
    """``ps:1 CPU:0`` -> ``ps:1`` (a PS or worker task's usual device); ``worker:0 GPU:1`` stays."""
    m = _CPU0.match(tag)
    return m.group(1) if m else tag


def name_boxes(groups, names: list[str], cluster_of, tag_of=lambda g: g.owner,
               width: int = WIDTH) -> tuple[list[str], dict]:
    """Names for every group of one picture, and each cluster's common scope (said once there).

    ``cluster_of(group)``: the cluster key the group's box sits in. Returns (names in group order,
    cluster key -> its common prefix as text, only for clusters that have one).
    """
    paths = [group_path(g, names) for g in groups]
    by_cluster: dict = defaultdict(list)
    for k, g in enumerate(groups):
        by_cluster[cluster_of(g)].append(k)
    skip = [0] * len(groups)
    prefixes = {}
    for key, members in by_cluster.items():
        prefix = common_prefix([paths[k] for k in members])
        if prefix:
            prefixes[key] = "/".join(prefix) + "/"
            for k in members:
                skip[k] = len(prefix)
    # Within a cluster the common prefix is never needed to tell boxes apart: strip it first.
    stripped = [p[skip[k]:] for k, p in enumerate(paths)]
    out = distinct_names(stripped, [_short_tag(tag_of(g)) for g in groups], width)
    return out, prefixes
