"""What each op *is* for a reader of a placement picture, and the colours that say it.

Roles are coarse on purpose (a legend with eight rows is read; one with forty is not): the state a
PS hosts (variables, tables, queues and accumulators), the ops that write it (updates), the
network (send/recv), save/restore, grouping NoOps, and everything else (compute). Colours stay the
same in every view and in the HTML report, so a yellow box always means variables.
"""

from __future__ import annotations

import re

from placeviz.devices import WORKER_JOBS, job_of, parse_full_name, task_label
from placeviz.op_kinds import OTHER_STATE_OPS, VARIABLE_OPS

ROLES = ("variable", "table", "queue", "update", "sendrecv", "io", "control", "compute")
ROLE_LABEL = {
    "variable": "variables", "table": "lookup tables", "queue": "queues / accumulators",
    "update": "updates (assign / apply)", "sendrecv": "send / recv", "io": "save / restore",
    "control": "NoOp groups", "compute": "compute",
}
ROLE_ONE = {
    "variable": "variable", "table": "lookup table", "queue": "queue / accumulator",
    "update": "update (assign / apply)", "sendrecv": "send / recv", "io": "save / restore",
    "control": "NoOp group", "compute": "compute",
}
""":data:`ROLE_LABEL` for a count of one ("1 variable", not "1 variables")."""
ROLE_SHORT = {
    "variable": "var", "table": "table", "queue": "queue", "update": "upd", "sendrecv": "send/recv",
    "io": "save", "control": "noop", "compute": "compute",
}
ROLE_COLOR = {
    "variable": "#ffd166", "table": "#a5d6a7", "queue": "#80cbc4", "update": "#f4978e",
    "sendrecv": "#b39ddb", "io": "#d7ccc8", "control": "#eeeeee", "compute": "#cfe2f3",
}

_TABLE_OPS = frozenset(op for op in OTHER_STATE_OPS if "Table" in op)
_QUEUE_OPS = frozenset(op for op in OTHER_STATE_OPS if op not in _TABLE_OPS)
_UPDATE = re.compile(r"^(Resource)?(Sparse)?(Apply|Assign|ScatterN?d?(Update|Add|Sub|Mul|Div|Min|Max)|"
                     r"LookupTable(Insert|Import|Remove)|InitializeTable)|^(Resource|Sparse)?Accumulator"
                     r"(ApplyGradient|SetGlobalStep)|^CountUpTo")
_SEND_RECV = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
_IO = frozenset({"SaveV2", "RestoreV2", "Save", "Restore", "RestoreSlice", "SaveSlices", "MergeV2Checkpoints",
                 "ShardedFilename", "StringJoin"})
_QUEUE_EXTRA = re.compile(r"^(Resource)?(Sparse)?ConditionalAccumulator$|^Queue|Accumulator(Take|Num)")


def role_of(op: str) -> str:
    """The role of one op type (see :data:`ROLES`)."""
    if op in VARIABLE_OPS:
        return "variable"
    if op in _TABLE_OPS:
        return "table"
    if op in _QUEUE_OPS or _QUEUE_EXTRA.search(op):
        return "queue"
    if op in _SEND_RECV:
        return "sendrecv"
    if _UPDATE.search(op):
        return "update"
    if op in _IO:
        return "io"
    if op == "NoOp":
        return "control"
    return "compute"


class RoleCache(dict):
    """op type -> role, computed once per distinct op (a 200k-node graph has ~100 op types)."""

    def __missing__(self, op: str) -> str:
        role = self[op] = role_of(op)
        return role


def striped_fill(counts: dict[str, int]) -> str:
    """Graphviz's striped fill: one stripe per role, width proportional to its share of ops.

    A collapsed box thus shows its mix at a glance, as TensorBoard's device gradient does; a single
    role gives a plain colour. Tiny shares are rounded up to 3% so they stay visible.
    """
    present = [(r, counts[r]) for r in ROLES if counts.get(r)]
    if len(present) == 1:
        return ROLE_COLOR[present[0][0]]
    total = sum(c for _, c in present)
    shares = [max(0.03, c / total) for _, c in present]
    scale = 0.999 / sum(shares)
    return ":".join(f"{ROLE_COLOR[r]};{s * scale:.3f}" for (r, _), s in zip(present, shares, strict=True))


DEVICE_PALETTE = ("#fde2a7", "#cfe8fc", "#d4f0d0", "#f9d3e0", "#e4dbf7", "#d0f0ee", "#fbe3cf", "#e6e6e6",
                  "#fff3b0", "#c9def7", "#e8f5c8", "#f6cfcf")
"""Pale fills for per-device colouring (deps view, device lanes): text stays readable on them."""
PS_COLORS = ("#f6c343", "#f0a04b", "#e9c46a", "#f4a261", "#ffd670", "#e76f51")
WORKER_COLORS = ("#8ecae6", "#90be6d", "#a8dadc", "#b5e48c", "#9bb1ff", "#76c893")


def device_colors(devices: list[str]) -> dict[str, str]:
    """A fill per device: PS tasks in warm colours, workers in cool ones, others from the palette.

    Assigned in sorted order, so a device keeps its colour across views of the same model.
    """
    out: dict[str, str] = {}
    ps = worker = other = 0
    for d in sorted(set(devices)):
        job = job_of(d)
        if job == "ps":
            out[d] = PS_COLORS[ps % len(PS_COLORS)]
            ps += 1
        elif job in WORKER_JOBS:
            out[d] = WORKER_COLORS[worker % len(WORKER_COLORS)]
            worker += 1
        else:
            out[d] = DEVICE_PALETTE[other % len(DEVICE_PALETTE)]
            other += 1
    return out


def short_device(device: str) -> str:
    """``/job:ps/replica:0/task:1/device:CPU:0`` -> ``ps:1 CPU:0`` (for labels; tooltips keep the
    full name): :func:`placeviz.devices.task_label`, then the device type and index as
    ``ParseFullName`` reads them (``/cpu:0`` is ``CPU:0``); a string it rejects is shown whole."""
    if not device:
        return "(no device)"
    parsed = parse_full_name(device)
    if parsed is None:
        return device
    dev = f"{parsed.type}:{'*' if parsed.id is None else parsed.id}" if parsed.type is not None else ""
    return " ".join(x for x in (task_label(device), dev) if x) or device
