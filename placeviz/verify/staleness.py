"""Asynchronous training, judged from the step stats of every run (no TF here).

In between-graph asynchronous training (no ``SyncReplicasOptimizer``) every worker run reads the
variables on their ps tasks, computes its gradients, and applies them there with the optimizer's
update kernel, while the other workers do the same. What the coordinator records per run (its
``events``: the marked ops of its step stats, with start and duration on the task that ran them)
is enough to say, per variable and per update:

* **the ps order**: the updates of one variable sorted by the time their kernel started on the
  variable's ps task (the one clock that matters: reads and updates of a variable run on the
  same task);
* **staleness**: how many other updates of that variable started between this run's read of it
  (its forward pass's ``<v>/read`` / ``ReadVariableOp`` / gather on the ps) and this run's own
  update: the updates the gradient did not see;
* **locking**: the kernel's ``use_locking`` attr. With it, TF's training kernels hold the
  variable's mutex for the whole update (tensorflow/core/kernels/training_ops.cc
  ``MaybeLockVariableInputMutexesInOrder`` when ``use_exclusive_lock_``), so overlapping updates
  of one variable are serialized; without it (every ``tf.compat.v1.train`` optimizer's default)
  they run concurrently and may interleave element by element (Hogwild-style).

Each variable's final value against a replay of every run's update is
:mod:`placeviz.verify.async_values`.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

import numpy as np

from placeviz.verify.checks import Check

WHO, RUN, DEVICE, NODE, OP, START, DUR = range(7)  # the fields of one recorded event
BETA_ROLES = ("beta1_power", "beta2_power")


@dataclass
class Apply:
    """One update of one variable by one worker run, on the variable's ps task."""

    variable: str
    op: str
    worker: int
    run: int
    start: float  # microseconds since the coordinator started
    end: float
    device: str
    read: float | None  # when this run's forward pass read the variable (None: no read recorded)
    staleness: int | None = None  # updates of the variable that started between ``read`` and ``start``


def worker_index(who: str) -> int | None:
    return int(who.split(":", 1)[1]) if who.startswith("worker:") else None


def read_times(plan: dict, result: dict) -> dict[tuple[str, int, str], float]:
    """(who, run, variable) -> when that run first read the variable (its read ops' earliest start)."""
    read_of = {r: v for v, names in (plan.get("reads") or {}).items() for r in names}
    reads: dict[tuple[str, int, str], float] = {}
    for e in result.get("events", []):
        if e[NODE] in read_of:
            k = (e[WHO], e[RUN], read_of[e[NODE]])
            reads[k] = min(reads.get(k, e[START]), e[START])
    return reads


def applies(plan: dict, result: dict) -> dict[str, list[Apply]]:
    """Per variable, its updates in ps order, each with its staleness."""
    updates = {u["op"]: u for u in plan["updates"]}
    reads = read_times(plan, result)
    found = [e for e in result.get("events", []) if e[NODE] in updates and worker_index(e[WHO]) is not None]
    out: dict[str, list[Apply]] = collections.defaultdict(list)
    for e in found:
        v = updates[e[NODE]]["variable"]
        worker = worker_index(e[WHO])
        assert worker is not None  # `found` keeps the workers' events only
        out[v].append(Apply(variable=v, op=e[NODE], worker=worker, run=e[RUN], start=e[START],
                            end=e[START] + e[DUR], device=e[DEVICE], read=reads.get((e[WHO], e[RUN], v))))
    for rows in out.values():
        rows.sort(key=lambda a: (a.start, a.end))
        starts = [a.start for a in rows]
        for a in rows:
            if a.read is not None:
                # other updates that started at or after the read and before this one
                a.staleness = sum(1 for s in starts if a.read <= s < a.start)
    return dict(out)


def summary(per_var: dict[str, list[Apply]]) -> dict:
    """Histogram, mean and max of the staleness of every update, overall and per worker."""
    values = [a.staleness for rows in per_var.values() for a in rows if a.staleness is not None]
    by_worker: dict[int, list[int]] = collections.defaultdict(list)
    for rows in per_var.values():
        for a in rows:
            if a.staleness is not None:
                by_worker[a.worker].append(a.staleness)
    hist = collections.Counter(values)
    return {"updates": len(values), "histogram": {str(k): hist[k] for k in sorted(hist)},
            "mean": round(float(np.mean(values)), 3) if values else None, "max": max(values) if values else None,
            "per_worker": {str(w): {"mean": round(float(np.mean(v)), 3), "max": max(v), "updates": len(v)}
                           for w, v in sorted(by_worker.items())}}


def overlaps(rows: list[Apply]) -> int:
    """Pairs of consecutive updates (ps order) of one variable whose kernels ran at the same time."""
    return sum(1 for a, b in zip(rows, rows[1:], strict=False) if b.start < a.end)


def check_async_run(plan: dict, result: dict, arrays: dict) -> Check:
    """global_step == initial + K (each of the K runs increments it once) and the runs per worker."""
    title = "K runs in all, each incrementing global_step once"
    runs = result.get("worker_runs", [])
    per_worker = collections.Counter(r["worker"] for r in runs)
    ev: dict[str, Any] = {"runs": len(runs),
                          "per_worker": {str(w): per_worker.get(w, 0) for w in range(plan["workers"])}}
    if result.get("failure") is not None:
        return Check("global_step", title, "skip", "the run did not finish", ev)
    gs = plan.get("global_step")
    if gs is None or f"final/{gs}" not in arrays:
        return Check("global_step", title, "skip", "the graph has no global step verify can read", ev)
    before = int(np.asarray(arrays[f"initial/{gs}"]).reshape(-1)[0])
    after = int(np.asarray(arrays[f"final/{gs}"]).reshape(-1)[0])
    ev.update(initial=before, final=after)
    split = ", ".join(f"worker {w}: {n}" for w, n in ev["per_worker"].items())
    if after - before == len(runs) == plan["steps"]:
        return Check("global_step", title, "pass",
                     f"global_step {before} -> {after} after {len(runs)} runs ({split}): one increment per run, "
                     "no aggregation", ev)
    return Check("global_step", title, "fail",
                 f"global_step {before} -> {after} after {len(runs)} runs ({split}); expected +{plan['steps']}", ev)


def check_staleness(plan: dict, result: dict, per_var: dict[str, list[Apply]]) -> Check:
    title = "staleness: updates of a variable between a run's read of it and its own update"
    if not per_var:
        return Check("staleness", title, "skip", "no update recorded", {})
    s = summary(per_var)
    if s["updates"] == 0:
        return Check("staleness", title, "skip", "no run's read of a variable was recorded on its ps task", s)
    slow = plan.get("slow_workers") or {}
    worst = max(s["per_worker"].items(), key=lambda kv: kv[1]["mean"])
    text = (f"{s['updates']} updates: mean {s['mean']}, max {s['max']} (histogram {s['histogram']}); "
            f"most stale: worker {worst[0]} (mean {worst[1]['mean']})")
    if slow:
        text += f"; slowed: {', '.join(f'worker {i} +{t:g} s' for i, t in slow.items())}"
    return Check("staleness", title, "pass", text, s)


def check_locking(plan: dict, per_var: dict[str, list[Apply]]) -> Check:
    """How concurrent updates of one variable were kept apart: the kernel's ``use_locking`` attr,
    and how many updates of the variable overlapped in time."""
    title = "concurrent updates of a variable: serialized (use_locking) or not"
    rows = []
    for u in plan["updates"]:
        v = u["variable"]
        mine = [a for a in per_var.get(v, []) if a.op == u["op"]]
        rows.append({"variable": v, "op": u["op"], "op_type": u["op_type"], "use_locking": u.get("use_locking"),
                     "updates": len(mine), "overlapping": overlaps(mine)})
    locked = [r for r in rows if r["use_locking"]]
    unlocked = [r for r in rows if not r["use_locking"]]
    racing = [r for r in unlocked if r["overlapping"]]
    parts = []
    if locked:
        parts.append(f"{len(locked)} update op(s) with use_locking=true: the kernel holds the variable's mutex, "
                     "overlapping updates are serialized")
    if unlocked:
        parts.append(f"{len(unlocked)} with use_locking=false (e.g. {unlocked[0]['op']}): no lock, concurrent "
                     f"updates may interleave; {sum(r['overlapping'] for r in unlocked)} overlapping pair(s) seen "
                     f"on {len(racing)} variable(s)")
    return Check("locking", title, "pass", "; ".join(parts) or "no update op", {"updates": rows})


