"""TF's ``control_flow_ops.group`` device split, written once: which NoOps ``group`` builds, where.

tensorflow/python/ops/control_flow_ops.py ``group`` files its inputs by ``inp.device`` (the op's
device string; for an assign to a resource variable, the variable's: the caller says which
device each member is filed under), then

* one device ``dev``: the group is one NoOp, ``_GroupControlDeps(dev, deps, name)``, built under
  ``ops.device(dev)`` in the caller's device context;
* several devices: one NoOp per device, devices sorted (``""`` first), each
  ``_GroupControlDeps(dev, deps)`` under ``ops.device(dev)`` and named ``NoOp`` inside the
  group's fresh name scope, i.e. ``Graph.unique_name("<group>/NoOp")`` over every name made so
  far (:func:`placeviz.names.unique_name`: ``init/noop`` already in the graph makes the first one
  ``init/NoOp_1``); then the root NoOp, named ``<group>``, with a control input on each, in the
  caller's device context (no ``ops.device`` of its own).

``ops.device("")`` is a null merge (tensorflow/python/framework/ops.py ``_UserDeviceSpec``:
``merge_device("")`` has ``is_null_merge``, and ``Graph._apply_device_functions`` skips it), so
the NoOp of the members without a device gets the caller's context itself, as the root does;
``ops.device(dev)`` otherwise merges ``dev`` over the context (dev's fields win). Both are what
the caller's ``place(dev)`` answers: the device of an op built under ``ops.device(dev)`` there,
``place("")`` being the context's own. Group NoOps under ``colocate_with`` answer their
colocation's device whatever ``dev``.

Used by the setter replay (:mod:`placeviz.placement.setter`, over the IR arrays) and by the
SyncReplicas rewrite (:mod:`placeviz.sync.rewrite`, over NodeDefs). Never imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Generic, NamedTuple, TypeVar

from placeviz.names import unique_name

__all__ = ["GroupPlan", "Kid", "NoopNamer", "by_device", "group_plan", "is_noop_of", "noop_group", "noop_names"]

M = TypeVar("M")


class Kid(NamedTuple, Generic[M]):
    """One per-device NoOp of a group over several devices."""

    name: str
    device: str
    members: list[M]


class GroupPlan(NamedTuple, Generic[M]):
    """What ``group`` builds: the per-device NoOps (none when the members share one device; then
    the root holds the members itself) and the root's device."""

    kids: list[Kid[M]]
    root_device: str


def by_device(members: Iterable[M], devices: Iterable[str]) -> dict[str, list[M]]:
    """``group``'s ``ops_on_device``: ``members`` filed by their ``devices`` (one each, in step),
    in their given order."""
    out: dict[str, list[M]] = {}
    for m, d in zip(members, devices, strict=True):
        got = out.get(d)
        if got is None:
            out[d] = [m]
        else:
            got.append(m)
    return out


def group_plan(name: str, split: dict[str, list[M]], place: Callable[[str], str],
               names: Callable[[str, int], list[str]]) -> GroupPlan[M]:
    """``control_flow_ops.group(*members, name=name)`` (module doc): ``split`` the members filed by
    the device ``group`` reads for each (:func:`by_device`), ``place(dev)`` the device of an op
    built under ``ops.device(dev)`` in the caller's context, ``names(base, count)`` ``count``
    names from the graph's ``unique_name(base)`` in creation order (:class:`NoopNamer`,
    :func:`noop_names`), asked only when the group splits."""
    if len(split) <= 1:
        dev = next(iter(split), "")  # no members: TF's bare no_op(name), in the caller's context
        return GroupPlan(_NO_KIDS, place(dev))
    devs = sorted(split)
    kids = [Kid(kid, place(dev), split[dev]) for dev, kid in zip(devs, names(name + "/NoOp", len(devs)), strict=True)]
    return GroupPlan(kids, place(""))


_NO_KIDS: list[Kid] = []  # type: ignore[type-arg]  # shared by every 1-level plan; never changed


def noop_group(name: str) -> str | None:
    """The group a per-device NoOp of ``group`` belongs to, read from its name (``<group>/NoOp`` or
    ``<group>/NoOp_<k>``, ``unique_name``'s answers for ``<group>/NoOp``: ``%d``, ASCII digits),
    or None for another name. Whether the group is there is the caller's question."""
    group, slash, last = name.rpartition("/")
    if not slash or not group:
        return None
    if last == "NoOp" or (last.startswith("NoOp_") and last[5:].isdigit() and last[5:].isascii()):
        return group
    return None


def is_noop_of(name: str, group: str) -> bool:
    """Whether ``name`` is one of the names ``group`` gives its per-device NoOps (:func:`noop_group`)."""
    return len(name) > len(group) and name[len(group)] == "/" and name.startswith(group) and noop_group(name) == group


def noop_names(used: dict[str, int], base: str, count: int, taken: Callable[[str], bool] | None = None,
               clashes: list[str] | None = None) -> list[str]:
    """``count`` answers of ``Graph.unique_name(base)`` over ``used`` (the names in use before the
    group, lower-cased, as :func:`placeviz.names.unique_name` reads them; only keys starting with
    ``base.lower()`` matter, :func:`noop_component`). ``taken(name)``: a node made *after* the group
    holds that name (a build without these NoOps gave it out; TF would have renamed that node,
    which a replay cannot): the name is skipped and listed in ``clashes``."""
    out = []
    for _ in range(count):
        got = unique_name(used, base)
        while taken is not None and taken(got):
            if clashes is not None:
                clashes.append(got)
            got = unique_name(used, base)
        out.append(got)
    return out


def noop_component(key: str, start: int) -> str:
    """``key`` up to the end of its name component that holds position ``start``: the key a name
    made before a group marks in ``unique_name``'s dict that can change its NoOps' names (the
    op's name, or a name scope TF marked when it opened it: a scope ``grp/NoOp_1/`` takes
    ``grp/NoOp_1``)."""
    slash = key.find("/", start)
    return key if slash < 0 else key[:slash]


class NoopNamer:
    """``names(root, base, count)`` (``partial(namer.names, root)`` is :func:`group_plan`'s
    ``names``) for a graph rebuilt with ``group``'s NoOps made again: TF's ``Graph.unique_name``
    over the names TF had made before the root: ``names`` before position ``root`` (creation
    order) that the rebuild keeps (not in ``dropped``: the old per-device NoOps), and the NoOps it
    added for earlier roots (:func:`noop_names`). ``id_of``: name -> position, or None for a name
    no node holds (``Graph.id_of``, or a dict's ``get``).

    Only the keys ``<root>/noop...`` can change the answer (lower-cased: ``init/noop`` takes
    ``init/NoOp``, a scope ``init/NoOp_1/`` takes ``init/NoOp_1``), so only those are looked up,
    for every root at once, as far as the last root asked (:meth:`_scan`). A node made *after* the root
    that holds the name TF gives (the unplaced build had no NoOp there) was renamed by TF; the
    replay cannot rename it and skips that name instead, saying so in ``clashes``.
    """

    def __init__(self, names: Sequence[str], id_of: Callable[[str], int | None], dropped: Collection[int]):
        self.names_in_order, self.id_of, self.dropped = names, id_of, dropped
        self.added: list[str] = []  # names of the new NoOps, lower-cased
        self.clashes: list[str] = []
        self._keys: dict[str, list[tuple[int, str]]] = {}
        self._scanned = 0  # the names before it are in _keys
        self._by_name = False

    def names(self, root: int, base: str, count: int) -> list[str]:
        prefix = base.lower()
        if root > self._scanned:
            self._scan(root)
        dropped = self.dropped
        used = {key: 1 for i, key in self._keys.get(prefix, ()) if i < root and i not in dropped}
        used.update((key, 1) for key in self.added if key.startswith(prefix))
        id_of = self.id_of

        def taken(name: str) -> bool:
            later = id_of(name)
            return later is not None and later > root and later not in dropped

        out = noop_names(used, base, count, taken, self.clashes)
        self.added += map(str.lower, out)
        return out

    def _scan(self, stop: int) -> None:
        """Enter in ``_keys`` the names from ``_scanned`` to ``stop`` that hold ``/noop`` (lower-cased),
        filed under each ``<prefix>/noop`` they start with, with their keys (:func:`noop_component`): for
        every root at once, so that the names are read once whichever root asks, and only as far
        as the last root asked.

        The names, lower-cased, joined one a line in blocks (a few hundred KB each, so the memory
        is reused), searched for ``/noop``; each hit's name is matched against the prefixes. A
        hit's node is its line, checked against its name (a name holding a newline is not TF's:
        then name by name, from the start)."""
        names, out = self.names_in_order, self._keys
        start_at, self._scanned = self._scanned, stop
        if self._by_name:
            self._scan_by_name(start_at, stop)
            return
        for lo in range(start_at, stop, _NAME_BLOCK):
            text = "\n".join(names[lo:min(lo + _NAME_BLOCK, stop)]).lower()
            pos, line, counted = text.find("/noop"), lo, 0
            while pos >= 0:
                start = text.rfind("\n", 0, pos) + 1
                end = text.find("\n", pos)
                end = len(text) if end < 0 else end
                line += text.count("\n", counted, start)
                counted = start
                lowered = text[start:end]
                if names[line].lower() != lowered:  # lines and nodes out of step: a newline in a name
                    self._by_name = True
                    out.clear()
                    self._scan_by_name(0, stop)
                    return
                k = lowered.find("/noop")
                while k >= 0:
                    out.setdefault(lowered[:k + 5], []).append((line, noop_component(lowered, k + 5)))
                    k = lowered.find("/noop", k + 1)
                pos = text.find("/noop", end)

    def _scan_by_name(self, start: int, stop: int) -> None:
        """:meth:`_scan` name by name."""
        out = self._keys
        for i in range(start, stop):
            lowered = self.names_in_order[i].lower()
            k = lowered.find("/noop")
            while k >= 0:
                out.setdefault(lowered[:k + 5], []).append((i, noop_component(lowered, k + 5)))
                k = lowered.find("/noop", k + 1)


_NAME_BLOCK = 8192
"""Names per block of :meth:`NoopNamer._scan`."""
