"""What every view reads from a pipeline, computed once: devices, roles, colours, bytes, transfers.

Views get a :class:`ViewContext` instead of the raw :class:`~placeviz.pipeline.Pipeline` so that
the facts they share (which device an op runs on, how many variable bytes each device holds, which
transfers one step makes) are derived in one place and the same way for every picture.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import cached_property

import numpy as np

from placeviz.graph import CONTROL
from placeviz.op_kinds import VARIABLE_OPS
from placeviz.render.collapse import CollapseMemo, pairs_in_first_order, quotient_edges
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


def _ordered_counts(codes: np.ndarray, labels: list[str]) -> Counter:
    """``Counter(labels[c] for c in codes)``, with its keys in the same order (first met first),
    from one array pass."""
    values, first, counts = np.unique(codes, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable").tolist()
    values, counts = values.tolist(), counts.tolist()
    return Counter({labels[values[k]]: counts[k] for k in order})


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
    def _op_codes(self) -> tuple[np.ndarray, list[str], np.ndarray, list[str]]:
        """Each node's op type and role as small ints: (op code per node, op types by code, role
        code per node, roles by code). The per-box counts of every build are then array passes
        instead of one dict lookup per op and box (at 200k ops most of a build's time)."""
        ops = self.graph.ops
        code = {op: k for k, op in enumerate(dict.fromkeys(ops))}  # op type -> code, first met first
        op_code = np.fromiter(map(code.__getitem__, ops), dtype=np.int32, count=len(ops))
        op_types = list(code)
        role_names: dict[str, int] = {}
        role_of_op = np.array([role_names.setdefault(self.roles[op], len(role_names)) for op in op_types],
                              dtype=np.int32)
        return op_code, op_types, role_of_op[op_code], list(role_names)

    def role_counts(self, group) -> Counter:
        """How many ops of each role ``group`` holds, once per group (see :meth:`per_group`): the
        Counter a pass over its members makes, in the same order (first member of each role first),
        so that ``most_common`` breaks ties the same way."""
        def compute() -> Counter:
            _, _, role_code, roles = self._op_codes
            return _ordered_counts(role_code[self._members(group)], roles)

        return self.per_group(group, "roles", compute)

    def top_ops(self, group, n: int) -> list[tuple[str, int]]:
        """The ``n`` most common op types of ``group`` with their counts (ties: first met first)."""
        def compute() -> Counter:
            op_code, op_types, _, _ = self._op_codes
            return _ordered_counts(op_code[self._members(group)], op_types)

        return self.per_group(group, "op types", compute).most_common(n)

    def _members(self, group) -> np.ndarray:
        """``group.members`` as an array, made once per group for its role and op type counts."""
        return group.ids

    @cached_property
    def roles_present(self) -> set[str]:
        """The roles of the graph's op types (from the distinct op types, not a pass over the ops)."""
        _, op_types, _, _ = self._op_codes
        return {self.roles[op] for op in op_types}

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
        op_code, op_types, _, _ = self._op_codes
        is_variable = np.array([op in VARIABLE_OPS for op in op_types], dtype=bool)
        for i in np.flatnonzero(is_variable[op_code]).tolist():  # in id order, as a pass over the ops
            row = out.setdefault(self.devices[i], [0, 0])
            row[0] += 1
            row[1] += sizes.get(g.names[i], 0)
        return {d: (r[0], r[1]) for d, r in out.items()}

    @cached_property
    def unknown_variables_per_device(self) -> Counter:
        """Device -> variables of unknown size (left out of :attr:`variables_per_device`'s bytes)."""
        unknown = {v.name for v in self.pipe.analysis.variables if v.bytes is None}
        g = self.graph
        return Counter(self.devices[i] for i in g.ids_of(unknown).values())

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
        """One line on what the byte counts mean (or why there are none); made once (a pass over
        one step's transfers, 146k at 200k ops), while ``placeviz render`` builds a view at up to
        a dozen budgets."""
        return self._step_note

    @cached_property
    def _step_note(self) -> str:
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

    @cached_property
    def transfer_arrays(self) -> tuple[np.ndarray, ...]:
        """:attr:`transfers` whose two ops are in the graph, as arrays: (src id, dst id, bytes (0
        when unknown), unknown size (0/1), control (0/1)). Every build of the devices view
        attaches them to its bundles (:func:`transfers_per_pair`) without a pass over the dicts."""
        index = self.graph.ids_of(dict.fromkeys(n for t in self.transfers for n in (t["src"], t.get("dst") or "")))
        rows = [(s, d, t["bytes"] or 0, t["slot"] != "control" and t["bytes"] is None, t["slot"] == "control")
                for t in self.transfers
                if (s := index.get(t["src"])) is not None and (d := index.get(t.get("dst") or "")) is not None]
        if not rows:
            return tuple(np.zeros(0, dtype=np.int64) for _ in range(5))
        return tuple(np.array(column, dtype=np.int64) for column in zip(*rows, strict=True))

    def transfers_per_pair(self, box_of) -> dict[tuple[int, int], list[int]]:
        """(src box, dst box) -> [transfers, bytes, of unknown size, control] of one step, for the
        transfers whose two ops are drawn (``box_of[i] >= 0``); pairs in the order of their first
        transfer."""
        src, dst, nbytes, unknown, control = self.transfer_arrays
        if not len(src):
            return {}
        box = np.asarray(box_of, dtype=np.int64)
        a, b = box[src], box[dst]
        keep = (a >= 0) & (b >= 0)
        n_boxes = int(box.max()) + 1
        pair = (a * n_boxes + b)[keep]
        pairs, which = pairs_in_first_order(pair, n_boxes * n_boxes)
        columns = [np.bincount(which, minlength=len(pairs))]
        for values in (nbytes, unknown, control):  # integer sums: bincount's float weights would round bytes
            total = np.zeros(len(pairs), dtype=np.int64)
            np.add.at(total, which, values[keep])
            columns.append(total)
        rows = np.stack(columns, axis=1).tolist()
        return {divmod(code, n_boxes): rows[j] for j, code in enumerate(pairs.tolist())}

    def device_label(self, device: str) -> str:
        return short_device(device) if device != NO_DEVICE else NO_DEVICE

    def data_inputs(self, i: int) -> list[int]:
        g = self.graph
        return [g.in_src[k] for k in range(g.in_start[i], g.in_start[i + 1]) if g.in_slot[k] != CONTROL]
