"""Byte counts as people read them, and honest about what is not known.

A size placeviz cannot know statically (a tensor with an unknown batch dimension, a variable
without a full shape) is shown as unknown (``? B``), never as zero; a sum over sizes some of
which are unknown is a lower bound (``≥ 2.8 KiB, 28 of 52 unknown``). Every text and picture
prints sizes through these functions so that they read the same everywhere.
"""

from __future__ import annotations

UNKNOWN = "? B"
BAR = "█"


def human_bytes(n: int | float | None) -> str:
    """Binary units: ``512 B``, ``2.0 KiB``, ``1.3 MiB``; ``? B`` when unknown (None)."""
    if n is None:
        return UNKNOWN
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def bytes_at_least(known: int, unknown: int, total: int | None = None) -> str:
    """A sum of which ``unknown`` of ``total`` parts have no known size.

    ``bytes_at_least(2867, 28, 52)`` is ``≥ 2.8 KiB, 28 of 52 unknown``; with nothing known,
    ``? B (3 of 3 unknown)``; with nothing unknown, the plain size. ``total`` None leaves out "of N".
    """
    if not unknown:
        return human_bytes(known)
    of = f"{unknown:,} of {total:,}" if total is not None else f"{unknown:,}"
    if not known:
        return f"{UNKNOWN} ({of} unknown)"
    return f"≥ {human_bytes(known)}, {of} unknown"


def bar(value: float, top: float, width: int = 20) -> str:
    """A text bar ``value / top`` of ``width`` characters (at least one for a non-zero value)."""
    if top <= 0 or value <= 0:
        return ""
    return BAR * max(1, round(width * value / top))


def transfers_text(transfers: int, known: int, unknown: int, control: int, sep: str = ", ") -> str:
    """What a bundle of transfers carries per step: ``3 tensors, ≥ 1.2 KiB/step (1 of 3 unknown)``;
    ``7 control`` when it carries no tensor at all (a control edge sends no bytes, it is not 0 B of
    data); ``2 tensors + 1 control, 96 B/step`` when mixed. ``transfers`` counts both kinds."""
    data = transfers - control
    if not data:
        return f"{control} control"
    head = f"{data} tensor{'s' if data != 1 else ''}" + (f" + {control} control" if control else "")
    if not unknown:
        amount = f"{human_bytes(known)}/step"
    elif known:
        amount = f"≥ {human_bytes(known)}/step ({unknown} of {data} unknown)"
    else:
        amount = f"{UNKNOWN}/step ({data} unknown)" if unknown == data else f"{UNKNOWN}/step"
    return head + sep + amount


def traffic_total(p: dict) -> str:
    """The total of a ``partition`` section of ``placeviz.analysis/1`` (:func:`placeviz.traffic.traffic_summary`):
    ``≥ 2.8 KiB per step in 53 transfers (28 of 52 tensors of unknown size, 1 control)``: unknown
    sizes are never summed as zero, control-only transfers are counted apart."""
    control = p.get("control_transfers", 0)
    data = p["transfers"] - control
    unknown = p["unknown_size_transfers"]
    amount = human_bytes(p["bytes_per_step"]) if not unknown else (
        f"≥ {human_bytes(p['bytes_per_step'])}" if p["bytes_per_step"] else "? B")
    details = ([f"{unknown} of {data} tensors of unknown size"] if unknown else []) + (
        [f"{control} control"] if control else [])
    if p.get("assumed_batch_transfers"):
        details.append(f"{p['assumed_batch_transfers']} sized with --batch-size {p['assumed_batch']}")
    return (f"{amount} per step in {p['transfers']} transfers" + (f" ({', '.join(details)})" if details else ""))
