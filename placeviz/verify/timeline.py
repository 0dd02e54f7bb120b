"""A timeline of every task of a verify run: a Chrome trace and a picture (no TF here).

**Chrome trace** (``--trace FILE.json``): the JSON trace-event format that Perfetto
(https://ui.perfetto.dev) and ``chrome://tracing`` open, the format TF's own
``tensorflow/python/client/timeline.py`` writes from ``RunMetadata.step_stats``. One process per
task (``ps:0``, ``worker:1``..., named after the job and task whose device ran the op), one thread
per loop that issued the run (each worker's session, the chief's sync loop), an ``X`` event per op
of every run, a ``session.run`` span per run on the issuing worker's own process, and instant
events for a token dequeue, an accumulator apply and take, and a gradient dropped as stale. Several
runs (``compare-modes``) go into one file, their processes prefixed with the mode.

**Picture** (``--timeline FILE.png|svg``, matplotlib from the ``[tf]`` extra): per mode, one lane
per worker with its runs over time (a slowed worker's delay hatched), the global-step boundaries,
and beside it the staleness histogram (async) or each worker's averaged and dropped gradients
(sync modes).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

from placeviz.devices import task_label
from placeviz.errors import PlacevizError
from placeviz.op_kinds import ACCUMULATOR_APPLY_OPS, ACCUMULATOR_TAKE_OPS
from placeviz.verify.staleness import DEVICE, DUR, NODE, OP, RUN, START, WHO

if TYPE_CHECKING:
    from placeviz.verify.report import VerifyReport

TRACE_FORMAT = "Chrome JSON trace-event format (traceEvents)"


def trace_events(label: str, report: VerifyReport, pid_base: int) -> tuple[list[dict], int]:
    """The trace events of one verify run; process ids from ``pid_base``. Returns (events, next pid)."""
    p, result = report.plan, report.result or {}
    pids: dict[str, int] = {}
    tids: dict[tuple[int, str], int] = {}
    events: list[dict] = []

    def pid(task: str) -> int:
        if task not in pids:
            pids[task] = pid_base + len(pids)
            events.append({"ph": "M", "name": "process_name", "pid": pids[task],
                           "args": {"name": f"{label} / {task}"}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pids[task],
                           "args": {"sort_index": pids[task]}})
        return pids[task]

    def tid(proc: int, who: str) -> int:
        key = (proc, who)
        if key not in tids:
            tids[key] = 1 + sum(1 for k in tids if k[0] == proc)
            events.append({"ph": "M", "name": "thread_name", "pid": proc, "tid": tids[key],
                           "args": {"name": "chief sync loop" if who == "chief" else f"{who} runs"}})
        return tids[key]

    worker_job = p.get("worker_job", "worker")
    # A track for every task of the cluster, in job and task order, even for a task that finished
    # nothing in the run's window (a slowed worker whose first run was still going when the last
    # step ended): its empty track says so, where a missing one would hide it.
    tasks = {job: len(n) if isinstance(n, list) else int(n) for job, n in (p.get("cluster") or {}).items()}
    tasks[worker_job] = int(p.get("workers") or 0)  # the workers that run steps
    for job in sorted(tasks):
        for i in range(tasks[job]):
            pid(f"{job}:{i}")
    for r in result.get("worker_runs", []):
        proc = pid(f"{worker_job}:{r['worker']}")
        events.append({"ph": "X", "name": f"session.run #{r['run']}", "cat": "run", "pid": proc,
                       "tid": tid(proc, "session"), "ts": r["t0"] * 1e6, "dur": (r["t1"] - r["t0"]) * 1e6,
                       "args": {"worker": r["worker"], "run": r["run"], "token": r.get("token")}})
    for r in result.get("sync_runs", []):
        proc = pid("chief sync loop")
        events.append({"ph": "X", "name": f"global step {r['step']}", "cat": "sync", "pid": proc,
                       "tid": tid(proc, "chief"), "ts": r["t0"] * 1e6, "dur": (r["t1"] - r["t0"]) * 1e6,
                       "args": {"step": r["step"]}})
    token = p.get("token_dequeue")
    dropped = _dropped_runs(report)
    for e in result.get("events", []):
        proc = pid(task_label(e[DEVICE]) or e[DEVICE])  # a device TF ran on always names its task
        thread = tid(proc, e[WHO])
        events.append({"ph": "X", "name": e[NODE], "cat": e[OP] or "op", "pid": proc, "tid": thread,
                       "ts": e[START], "dur": e[DUR], "args": {"op": e[OP], "run": e[RUN], "by": e[WHO]}})
        instant = None
        if e[NODE] == token:
            instant = "token dequeued"
        elif e[OP] in ACCUMULATOR_APPLY_OPS:
            key = (e[WHO], e[RUN])
            instant = "stale gradient dropped" if key in dropped else "accumulator apply"
        elif e[OP] in ACCUMULATOR_TAKE_OPS:
            instant = "accumulator take"
        if instant:
            events.append({"ph": "i", "s": "t", "name": instant, "cat": "sync", "pid": proc, "tid": thread,
                           "ts": e[START] + e[DUR], "args": {"op": e[NODE], "run": e[RUN], "by": e[WHO]}})
    return events, pid_base + len(pids)


def _dropped_runs(report) -> set[tuple[str, int]]:
    """(``worker:i``, run) of every gradient the gradients check found dropped as late."""
    check = report.check("gradients_per_step")
    if check is None:
        return set()
    out = set()
    for row in check.evidence.get("steps") or []:
        for entry in row.get("dropped_late") or []:
            w, n = entry[1:].split("#", 1)
            out.add((f"worker:{w}", int(n)))
    return out


def chrome_trace(runs: list[tuple[str, VerifyReport]]) -> dict:
    events: list[dict] = []
    pid = 1
    for label, report in runs:
        more, pid = trace_events(label, report, pid)
        events += more
    truncated = any((r.result or {}).get("events_truncated") for _l, r in runs)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "placeviz verify", "format": TRACE_FORMAT, "modes": [lbl for lbl, _r in runs],
                          "truncated": truncated}}


def chrome_trace_bytes(runs: list[tuple[str, VerifyReport]]) -> bytes:
    return json.dumps(chrome_trace(runs), separators=(",", ":"), sort_keys=True).encode()


# ------------------------------------------------------------------------------------------ picture

def check_picture_path(path: str) -> None:
    """``--timeline`` needs .png or .svg and matplotlib (the ``[tf]`` extra); one-line errors."""
    if Path(path).suffix.lower() not in (".png", ".svg"):
        raise PlacevizError(f"--timeline {path}: the picture must be a .png or .svg file")
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise PlacevizError("--timeline needs matplotlib: install placeviz[tf]")


def picture_bytes(rows: list[dict], path: str) -> bytes:
    """Worker lanes over time per mode (left) and the staleness or gradients panel (right).
    ``rows``: :func:`placeviz.verify.metrics.mode_summary` dicts with a ``label``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(rows)
    fig, axes = plt.subplots(n, 2, figsize=(13, 1.2 + 1.9 * n), squeeze=False,
                             gridspec_kw={"width_ratios": [3.2, 1]})
    for k, m in enumerate(rows):
        _lanes(axes[k][0], m)
        _side(axes[k][1], m)
    fig.tight_layout()
    buf = io.BytesIO()
    fmt = Path(path).suffix.lower().lstrip(".")
    fig.savefig(buf, format=fmt, dpi=110, metadata={"Software": None} if fmt == "png" else {"Date": None})
    plt.close(fig)
    return buf.getvalue()


_COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7"]


def _lanes(ax, m: dict) -> None:
    workers, tl = m["workers"], m["timeline"]
    slow = {int(k): v for k, v in (m.get("slow_workers") or {}).items()}
    runs = tl["runs"]
    t_origin = min((r[2] for r in runs), default=0.0)
    ends = {(r[0], r[1]): r[3] - t_origin for r in runs}
    for w, _n, t0, t1 in runs:
        ax.broken_barh([(t0 - t_origin, t1 - t0)], (w - 0.35, 0.7), facecolors=_COLORS[w % len(_COLORS)],
                       edgecolor="white", linewidth=0.6, hatch="//" if w in slow else None)
    for _k, _t0, t1 in tl["steps"]:
        ax.axvline(t1 - t_origin, color="#555555", linewidth=0.6, linestyle=":")
    late = [(ends[(w, n)], w) for w, n in tl.get("dropped", []) if (w, n) in ends]
    if late:
        ax.scatter([x for x, _w in late], [w for _x, w in late], marker="x", color="#d62728", s=40, zorder=3,
                   label="gradient dropped as late")
        ax.legend(fontsize=7, loc="upper right")
    label = m.get("label", m["mode"])
    if m["mode"] == "async":
        ax.set_title(f"{label}: {len(runs)} runs, each applying its own update (W={workers})", fontsize=10,
                     loc="left")
    else:
        ax.set_title(f"{label}: {len(tl['steps'])} global steps (dotted: step done), "
                     f"R={m.get('replicas_to_aggregate')}, W={workers}", fontsize=10, loc="left")
    ax.set_yticks(range(workers))
    ax.set_yticklabels([f"worker {w}" + (f" (+{slow[w]:g} s)" if w in slow else "") for w in range(workers)],
                       fontsize=9)
    ax.set_ylim(-0.6, workers - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first run started", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#eeeeee")


def _side(ax, m: dict) -> None:
    stale, grads = m.get("staleness") or {}, m.get("gradients")
    if m["mode"] == "async" and stale.get("histogram"):
        keys = sorted(stale["histogram"], key=int)
        ax.bar([int(k) for k in keys], [stale["histogram"][k] for k in keys], color="#4e79a7")
        ax.set_title(f"staleness: mean {stale['mean']}, max {stale['max']}", fontsize=10, loc="left")
        ax.set_xlabel("updates between a run's read and its update", fontsize=8)
        ax.set_ylabel("updates", fontsize=8)
    elif grads:
        ws = sorted(grads["per_worker"], key=int)
        avg = [grads["per_worker"][w]["averaged"] for w in ws]
        drop = [grads["per_worker"][w]["dropped"] for w in ws]
        ax.barh([int(w) for w in ws], avg, color="#59a14f", label="averaged")
        ax.barh([int(w) for w in ws], drop, left=avg, color="#e15759", label="dropped (late)")
        ax.set_yticks([int(w) for w in ws])
        ax.set_yticklabels([f"worker {w}" for w in ws], fontsize=8)
        ax.invert_yaxis()
        ax.legend(fontsize=7, loc="lower right")
        ax.set_title(f"gradients per worker ({m['global_steps']} steps)", fontsize=10, loc="left")
    else:
        ax.text(0.5, 0.5, "no per-update evidence", ha="center", va="center", fontsize=9)
        ax.set_axis_off()
    ax.tick_params(labelsize=8)
