"""Collapse ops into boxes by name scope until the picture fits a box budget.

Graphviz's ``dot`` lays out a few hundred boxes in seconds and a few thousand in minutes, while a
training graph has 10^4-10^6 ops (``docs/architecture.md``, "... a view"), so every view that draws ops
draws *groups* of them. The grouping follows what TensorBoard does (name-scope hierarchy, series
of numbered siblings) but is driven by a budget instead of by clicks:

* a group never spans two owners (devices): a box sits in exactly one device cluster;
* each owner starts as one group; the largest group is split into its children next, as long as
  the total stays within the budget; a split that would overflow it is refused and that group
  stays collapsed (smaller groups may still split after it);
* children of a scope ``a/b`` are its sub-scopes ``a/b/c``, except that numbered siblings
  (``layer_0 ... layer_325``, ``add, add_1 ... add_9``) first form one *series* group, which
  splits into its members only if they fit. This is what keeps a 326-layer model at a handful of
  boxes per device instead of 326;
* a chain of single children is followed without costing a box (``a`` -> ``a/b`` -> ``a/b/c``);
* no split takes more than a quarter of the budget: a scope with too many children keeps its
  largest ones and puts the rest in one "… N more" box, which splits again if boxes are left.
  Without this, the biggest device would take every box and leave the others undivided.

The result is deterministic: children are visited in name order and ties in size are broken by
the order groups were made.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from placeviz.native import kernels

_kernels = kernels("_partition_kernels")  # bucket_by_component's loop in C (see placeviz.native)

_DIGITS = re.compile(r"\d+")
_SUFFIX = re.compile(r"_\d+$")


def series_key(component: str) -> str:
    """Scope components that differ only in numbers belong to one series (``add``, ``add_3``, ``layer_07``)."""
    return _DIGITS.sub("#", _SUFFIX.sub("", component))


def natural_key(text: str) -> tuple:
    """Sort ``layer_2`` before ``layer_10``."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


_NATURAL: dict[str, tuple] = {}


def _natural(text: str) -> tuple:
    """:func:`natural_key`, memoised: a big graph sorts the same scope names many times."""
    key = _NATURAL.get(text)
    if key is None:
        if len(_NATURAL) > 1_000_000:
            _NATURAL.clear()
        key = _NATURAL[text] = natural_key(text)
    return key


@dataclass(frozen=True)
class Series:
    """A path element standing for numbered sibling scopes: ``layer_00000 … layer_00325``."""

    first: str
    last: str
    count: int

    def __str__(self) -> str:
        return f"{self.first} … {self.last}"


@dataclass
class Group:
    """A set of ops of one owner shown as one box: a scope, a series of scopes, or a single op.

    ``path`` holds one element per name component consumed: an exact component, or a
    :class:`Series`. A path like ``gradients / layer_0 … layer_325 / attention`` is a *template*:
    the ``attention`` scope of every layer, one box for all of them.
    """

    owner: str
    path: tuple
    members: list[int]
    series: dict[str, list[int]] | None = None
    """When the last path element is a Series: each member scope -> its ops."""
    pinned: bool = False
    others: list[Group] | None = None
    """For a box of *the other scopes* of a split that did not fit: the groups it stands for."""
    _ids: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def ids(self) -> np.ndarray:
        """:attr:`members` as an array, made once: the groups of a :class:`CollapseMemo` are shared
        by every build of a view, and each build maps the ops to boxes and counts roles with it."""
        if self._ids is None:
            self._ids = np.asarray(self.members, dtype=np.int64)
        return self._ids

    @property
    def is_op(self) -> bool:
        return len(self.members) == 1 and self.series is None and self.others is None

    @property
    def scopes(self) -> int:
        """How many real scopes the box stands for (the product of its series' sizes)."""
        n = 1
        for element in self.path:
            if isinstance(element, Series):
                n *= element.count
        return n

    def label(self, names: list[str]) -> str:
        """The scope path (``a/b``), a series or template (``a/layer_0 … layer_9/b``), or the op's name."""
        if self.is_op:
            return names[self.members[0]]
        head = "/".join(map(str, self.path))
        if self.others is not None:
            return f"{head + '/' if head else ''}… {len(self.others)} more"
        return head or "(all ops)"


@dataclass
class Collapse:
    """The boxes of a collapsed view: ``groups[box_of[node]]`` holds the node (-1: not shown)."""

    groups: list[Group]
    box_of: list[int]
    budget: int
    refused: int = 0
    """Splits refused because they would have overflowed the budget (0: nothing is hidden by it)."""
    stats: dict = field(default_factory=dict)
    box_array: np.ndarray | None = field(default=None, repr=False)
    """:attr:`box_of` as the array it was made from (for array passes; a caller that edits
    :attr:`box_of` must not read it)."""


def bucket_by_component(names: list[str], members: list[int], depth: int
                        ) -> tuple[list[int], dict[str, list[int]]]:
    """``members`` (ids into ``names``) bucketed by the component at ``depth`` of their names
    (``names[i].split("/")[depth]``): (the members that have no such component, named like the
    scope itself; component -> its members), the components in the order they are first met, each
    list in the order of ``members``.

    The C kernel (``placeviz._partition_kernels.bucket_by_component``) runs the same loop over the
    names' characters without splitting them into lists: the first build of a 200k-op view visits
    517k members here, most of them in groups that share one component at that depth.
    """
    if _kernels is not None and type(names) is list and type(members) is list:
        found = _kernels.bucket_by_component(names, members, depth)
        if found is not None:
            return found
    own: list[int] = []
    buckets: dict[str, list[int]] = {}
    get = buckets.get
    for i in members:
        parts = names[i].split("/", depth + 1)  # the components up to ``depth``, then the rest
        if len(parts) <= depth:
            own.append(i)
            continue
        bucket = get(parts[depth])
        if bucket is None:
            buckets[parts[depth]] = [i]
        else:
            bucket.append(i)
    return own, buckets


class _Splitter:
    def __init__(self, names: list[str]):
        self.names = names
        self.keys: dict[str, str] = {}
        self.children: dict[tuple, tuple[list[Group], Group | None]] = {}
        """(owner, path) -> what :meth:`deeper` found for that group (see :class:`CollapseMemo`)."""

    def key(self, component: str) -> str:
        k = self.keys.get(component)
        if k is None:
            k = self.keys[component] = series_key(component)
        return k

    def members_of_series(self, g: Group) -> list[Group]:
        """A series group split into one group per member scope."""
        assert g.series is not None  # the one caller splits this way only a group with a series
        head = g.path[:-1]
        return [Group(g.owner, (*head, comp), ids) for comp, ids in g.series.items()]

    def deeper(self, g: Group) -> tuple[list[Group], Group | None]:
        """The children of ``g`` one name component down, following chains of single children.

        Also returns the deepest single child met on the way (None if there was none): when the
        children do not fit the budget, that one still names the box more precisely for free
        (``gradients`` -> ``gradients/layer_0 … layer_49/matmul_grad/MatMul``).
        """
        key = (g.owner, g.path)
        found = self.children.get(key)
        if found is not None:
            return found
        children = self._deeper_once(g)
        single = None
        while len(children) == 1 and not children[0].is_op:
            single = children[0]
            children = self._deeper_once(single)
        self.children[key] = children, single
        return children, single

    def _deeper_once(self, g: Group) -> list[Group]:
        # Bucket the members by the next component (each path element, a scope or a series of
        # them, stands for one); an op named like the scope itself (``global_step`` next to
        # ``global_step/read``) has no next component and becomes a box of its own.
        own, exact = bucket_by_component(self.names, g.members, len(g.path))
        by_key: dict[str, list[str]] = {}
        for comp in exact:
            by_key.setdefault(self.key(comp), []).append(comp)
        out = [Group(g.owner, g.path, [i]) for i in own]
        for name_key in sorted(by_key, key=_natural):
            comps = sorted(by_key[name_key], key=_natural)
            if len(comps) == 1:
                out.append(Group(g.owner, (*g.path, comps[0]), exact[comps[0]]))
            else:
                series = {comp: exact[comp] for comp in comps}
                members = list(chain.from_iterable(series.values()))
                element = Series(comps[0], comps[-1], len(comps))
                out.append(Group(g.owner, (*g.path, element), members, series=series))
        return out


class CollapseMemo:
    """What :func:`collapse` learns about one set of ops, kept for the next collapse of the same set.

    ``placeviz render`` builds a view at a few budgets until its picture fits
    (:mod:`placeviz.render.fit`); each build collapses the same ops of the same owners, so the
    ops of each owner and every group's children (a group is its owner and its path:
    the same ops whatever the budget) are found once, by the first build, and reused. Only a
    collapse of the same ``names``, ``nodes``, ``owners`` and ``pinned`` reuses it; anything else
    starts it afresh. The groups it hands out are shared between the collapses: never mutate them.
    """

    def __init__(self):
        self.signature: tuple | None = None
        self._nodes: list[int] | range = []
        self.by_owner: dict[str, list[int]] = {}
        self.splitter = _Splitter([])

    def matches(self, names, nodes: list[int] | range, owners, pinned: set[int]) -> bool:
        """True when the memo is for these inputs; else it is cleared and takes them on."""
        signature = (id(names), id(owners), len(nodes), tuple(sorted(pinned)))
        if signature == self.signature and nodes == self._nodes:
            return True
        self.signature, self._nodes = signature, nodes
        self.by_owner, self.splitter = {}, _Splitter(names)
        return False


SPLIT_SHARE = 4
"""One split may use at most 1/SPLIT_SHARE of the budget: the first (largest) groups would
otherwise take every box and leave the other devices as one undivided box each."""
MIN_SPLIT = 4


def _partial(children: list[Group], room: int, parent: Group) -> list[Group] | None:
    """``children`` if they fit in ``room`` boxes; else the largest ``room - 1`` of them and one box
    for the others (which may split again later); None when not even that fits."""
    if len(children) <= room:
        return children
    if room < 3 or any(isinstance(e, Series) for e in parent.path):
        return None  # a template (one box for many scopes) splits fully or not at all
    order = sorted(range(len(children)), key=lambda k: -len(children[k].members))  # stable: name order
    keep = sorted(k for k in order[:room - 1] if len(children[k].members) > 1)
    if not keep:
        return None  # only single ops: "3 ops and 40 more" says less than the scope itself
    kept = set(keep)
    rest = [c for k, c in enumerate(children) if k not in kept]
    members = [i for c in rest for i in c.members]
    lump = Group(parent.owner, parent.path, members, others=rest)
    return [children[k] for k in keep] + [lump]


def collapse(names: list[str], nodes, owners: list[str], budget: int, pinned=(),
             memo: CollapseMemo | None = None) -> Collapse:
    """Group ``nodes`` (ids into ``names``/``owners``) into at most ``budget`` boxes.

    ``pinned`` ops always get a box of their own (the focus of a dependency view, the ops on a
    violation path); they count against the budget first.

    A series group first tries to split into its member scopes; when they do not fit, it splits
    one level deeper *across* its members instead (``layer_0 … layer_325/attention``,
    ``…/ffn``): the repeated structure of a deep model stays visible at a fixed cost.

    ``memo``: a :class:`CollapseMemo` kept between collapses of the same ops at other budgets
    (the result is the same with or without it).
    """
    nodes = nodes if isinstance(nodes, range) else list(nodes)  # a range compares with the memo's at no cost
    pinned_set = {i for i in pinned if 0 <= i < len(names)}
    if memo is not None and memo.matches(names, nodes, owners, pinned_set):
        by_owner, splitter = memo.by_owner, memo.splitter
    else:
        by_owner = {}
        for i in nodes:
            if i not in pinned_set:
                by_owner.setdefault(owners[i], []).append(i)
        splitter = _Splitter(names)
        if memo is not None:
            memo.by_owner, memo.splitter = by_owner, splitter
    groups: list[Group] = [Group(owners[i], (), [i], pinned=True) for i in sorted(pinned_set)]
    heap: list[tuple[int, int, Group]] = []
    seq = 0
    for owner in sorted(by_owner):
        heap.append((-len(by_owner[owner]), seq, Group(owner, (), by_owner[owner])))
        seq += 1
    heapq.heapify(heap)
    total = len(groups) + len(heap)
    cap = max(MIN_SPLIT, budget // SPLIT_SHARE)
    refused = 0
    final: list[Group] = []
    while heap:
        _, _, g = heapq.heappop(heap)
        if g.is_op:
            final.append(g)
            continue
        if total >= budget:  # every split adds at least one box: nothing else can split
            refused += 1 + sum(1 for _, _, h in heap if not h.is_op)
            final.append(g)
            final.extend(h for _, _, h in heap)
            break
        children = None
        room = min(budget - total + 1, cap)  # boxes this split may use
        if g.others is not None:
            children = _partial(g.others, room, g)
        elif g.series is not None and len(g.series) <= room:
            children = splitter.members_of_series(g)
        else:
            candidates, single = splitter.deeper(g)
            if len(candidates) > 1:
                children = _partial(candidates, room, single or g)
            if children is None and single is not None:
                g = single  # the same ops under a more precise name; its split does not fit either
        if children is None:
            refused += 1
            final.append(g)
            continue
        total += len(children) - 1
        for c in children:
            heapq.heappush(heap, (-len(c.members), seq, c))
            seq += 1
    final.sort(key=lambda g: (g.owner, _natural(g.label(names))))
    groups.extend(final)
    box = np.full(len(names), -1, dtype=np.int64)
    for b, g in enumerate(groups):  # a later group wins, as the loop over members did
        box[g.ids] = b
    return Collapse(groups, box.tolist(), budget, refused, box_array=box)


def quotient_edges(graph, nodes, box_of: list[int] | np.ndarray, control: bool = True
                   ) -> dict[tuple[int, int], list[int]]:
    """Edges between boxes: ``(src box, dst box) -> [data edges, control edges]`` (self-loops dropped).

    The in-edges of ``nodes`` (in that order, each node's in NodeDef order) in one array pass over
    the graph's CSR arrays; the pairs come in the order of their first edge, as a walk over the
    edges would meet them. ``box_of``: a list, or an int64 array (:attr:`Collapse.box_array`, no
    conversion).
    """
    box = np.asarray(box_of, dtype=np.int64)
    n_boxes = int(box.max()) + 1 if len(box) else 0
    if n_boxes <= 0:
        return {}
    src, dst, slot = graph.edge_arrays
    if not (isinstance(nodes, range) and nodes == range(len(graph))):
        ids = np.fromiter(nodes, dtype=np.int64)
        in_start = np.frombuffer(graph.in_start, dtype=np.int32).astype(np.int64)
        starts = in_start[ids]
        counts = in_start[ids + 1] - starts
        firsts = np.cumsum(counts) - counts
        edges = np.repeat(starts - firsts, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        src, dst, slot = src[edges], np.repeat(ids, counts), slot[edges]
    b = box[dst]
    a = box[src]
    is_control = slot < 0
    keep = (a >= 0) & (b >= 0) & (a != b)
    if not control:
        keep &= ~is_control
    pair = (a * n_boxes + b)[keep]
    is_control = is_control[keep]
    pairs, which = pairs_in_first_order(pair, n_boxes * n_boxes)
    data = np.bincount(which[~is_control], minlength=len(pairs)).tolist()
    ctrl = np.bincount(which[is_control], minlength=len(pairs)).tolist()
    out: dict[tuple[int, int], list[int]] = {}
    for j, code in enumerate(pairs.tolist()):
        out[divmod(code, n_boxes)] = [data[j], ctrl[j]]
    return out


DENSE_CODES = 1 << 16
""":func:`pairs_in_first_order` counts codes below this (or below 4x the items) in a table
instead of sorting the items."""


def pairs_in_first_order(codes: np.ndarray, n_codes: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values of ``codes`` (ints in ``[0, n_codes)``) in the order of their first
    occurrence; for each item, the position of its value in that order).

    What ``np.unique`` with ``return_index`` and ``return_inverse`` gives, re-ordered; for a few
    boxes' pairs (a view's bundles: ``n_codes`` is the boxes squared) from a table of ``n_codes``
    first positions, without sorting the 10^5 edges of every build of a big graph's view.
    """
    n = len(codes)
    if n_codes <= max(DENSE_CODES, 4 * n):
        first = np.full(n_codes, n, dtype=np.int64)
        np.minimum.at(first, codes, np.arange(n, dtype=np.int64))
        present = np.flatnonzero(first < n)
        values = present[np.argsort(first[present], kind="stable")]
        rank = np.zeros(n_codes, dtype=np.int64)
        rank[values] = np.arange(len(values), dtype=np.int64)
        return values, rank[codes]
    distinct, first_at, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(first_at, kind="stable")
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[order] = np.arange(len(distinct), dtype=np.int64)
    return distinct[order], rank[inverse.reshape(-1)]
