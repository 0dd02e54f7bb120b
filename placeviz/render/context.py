"""What every view reads from a pipeline, computed once: devices, roles, colours, bytes, transfers.

Views get a :class:`ViewContext` instead of the raw :class:`~placeviz.pipeline.Pipeline` so that
the facts they share (which device an op runs on, how many variable bytes each device holds, which
transfers one step makes) are derived in one place and the same way for every picture.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import cached_property

from placeviz.graph import CONTROL
from placeviz.op_kinds import VARIABLE_OPS
from placeviz.render.collapse import CollapseMemo, quotient_edges
from placeviz.render.roles import RoleCache, device_colors, short_device
from placeviz.sizes import bytes_at_least, human_bytes, transfers_text  # noqa: F401 - the views import human_bytes from here

NO_DEVICE = "(no device)"


def pen_width(value: float, top: float, low: float = 1.0, high: float = 6.0) -> float:
    """Line width for an amount, log-scaled against the largest one in the picture."""
    if value <= 0 or top <= 0:
        return low
    return round(low + (high - low) * math.log1p(value) / math.log1p(top), 2)


def shorten(text: str, width: int = 42) -> str:
    """Keep the end of a long scope path (the part that differs between boxes)."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


class ViewContext:
    """Shared facts of one pipeline for the views (see the module docstring)."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.graph = pipe.graph
        placed = pipe.devices
        self.placed = placed is not None
        raw = placed if placed is not None else self.graph.devices
        self.devices: list[str] = [d or NO_DEVICE for d in raw]
        self.roles = RoleCache()
        self.colors = device_colors([d for d in set(self.devices)])
        self._collapse_memos: dict[str, CollapseMemo] = {}
        self._per_group: dict[tuple[int, str], tuple] = {}

    def collapse_memo(self, view: str) -> CollapseMemo:
        """``view``'s :class:`~placeviz.render.collapse.CollapseMemo`: its builds at other budgets
        (``placeviz render`` fitting a picture to the screen) reuse what the first one found."""
        return self._collapse_memos.setdefault(view, CollapseMemo())

    def per_group(self, group, what: str, compute):
        """``compute()``, a fact ``what`` about one collapsed group (its role counts, its top op
        types), computed once per group: the builds that share a collapse memo share its groups."""
        key = (id(group), what)
        hit = self._per_group.get(key)
        if hit is None or hit[0] is not group:  # the group is held here, so its id is not reused
            hit = self._per_group[key] = (group, compute())
        return hit[1]

    @cached_property
    def device_list(self) -> list[str]:
        return sorted(set(self.devices))

    @cached_property
    def ops_per_device(self) -> Counter:
        return Counter(self.devices)

    @cached_property
    def variable_bytes(self) -> dict[str, int]:
        """Variable name -> bytes (from ``analyze``; unknown shapes count 0)."""
        return {v.name: v.bytes or 0 for v in self.pipe.analysis.variables}

    @cached_property
    def variables_per_device(self) -> dict[str, tuple[int, int]]:
        """Device -> (variables, variable bytes), as placed."""
        out: dict[str, list[int]] = {}
        sizes = self.variable_bytes
        g = self.graph
        for i, op in enumerate(g.ops):
            if op in VARIABLE_OPS:
                row = out.setdefault(self.devices[i], [0, 0])
                row[0] += 1
                row[1] += sizes.get(g.names[i], 0)
        return {d: (r[0], r[1]) for d, r in out.items()}

    @cached_property
    def unknown_variables_per_device(self) -> Counter:
        """Device -> variables of unknown size (left out of :attr:`variables_per_device`'s bytes)."""
        unknown = {v.name for v in self.pipe.analysis.variables if v.bytes is None}
        g = self.graph
        return Counter(self.devices[g.index[name]] for name in unknown if name in g.index)

    def variable_bytes_text(self, device: str) -> str:
        """A device's variable bytes as a label says them: ``≥ X, k of n unknown`` when some are unknown."""
        n_vars, n_bytes = self.variables_per_device.get(device, (0, 0))
        return bytes_at_least(n_bytes, self.unknown_variables_per_device[device], n_vars)

    @cached_property
    def transfers(self) -> list[dict]:
        """The transfers of one step at the pipeline's partition level (empty without partitioning)."""
        parts = self.pipe.partitions
        if parts is None:
            return []
        return [t for t in parts.transfers if t.get("level", parts.level) == parts.level]

    @cached_property
    def cross_device_edges(self) -> Counter:
        """(src device, dst device) -> graph edges between them (data and control), in the order of
        their first edge: the devices as the boxes of :func:`~placeviz.render.collapse.quotient_edges`."""
        code = {d: k for k, d in enumerate(self.device_list)}
        pairs = quotient_edges(self.graph, range(len(self.graph)), [code[d] for d in self.devices])
        devices = self.device_list
        return Counter({(devices[a], devices[b]): data + control for (a, b), (data, control) in pairs.items()})

    def step_note(self) -> str:
        """One line on what the byte counts mean (or why there are none)."""
        pipe = self.pipe
        if pipe.placement_error:
            return f"devices as requested in the graph: placement fails as TensorFlow's would: {pipe.placement_error}"
        if pipe.partition_error:
            return f"no traffic: partitioning failed: {pipe.partition_error}"
        if pipe.partitions is None:
            return ("no traffic: the graph is not placed (give --ps-tasks N or --cluster FILE)"
                    if not self.placed else "no traffic: nothing to partition")
        run = pipe.run or {}
        what = run.get("what", "one step")
        ops = ", ".join((run.get("targets") or []) + (run.get("fetches") or []))
        total = sum(t["bytes"] or 0 for t in self.transfers)
        control = sum(1 for t in self.transfers if t["slot"] == "control")
        unknown = sum(1 for t in self.transfers if t["slot"] != "control" and t["bytes"] is None)
        return (f"bytes per step: {what}" + (f" ({ops})" if ops else "")
                + f", {transfers_text(len(self.transfers), total, unknown, control)}")

    def device_label(self, device: str) -> str:
        return short_device(device) if device != NO_DEVICE else NO_DEVICE

    def data_inputs(self, i: int) -> list[int]:
        g = self.graph
        return [g.in_src[k] for k in range(g.in_start[i], g.in_start[i + 1]) if g.in_slot[k] != CONTROL]
