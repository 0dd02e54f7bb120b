"""What a verify run did, as numbers to compare across modes (no TF here).

From one :class:`placeviz.verify.report.VerifyReport` (its plan, the runs the coordinator timed, the
recorded step-stats events and the checks' evidence): global steps per second, wall time per
global step, the time each worker's train op spent blocked dequeuing its token (sync modes), the
staleness of the updates (async), which worker's gradients each step averaged or dropped (sync
modes: the ``gradients_per_step`` check's value matching), and the loss after the run.
"""

from __future__ import annotations

import collections

from placeviz.verify.staleness import DUR, NODE, WHO


def _worker_of(entry: str) -> int:
    """``w2#5`` (worker 2's run 5, as the gradients check names a captured gradient) -> 2."""
    return int(entry[1:].split("#", 1)[0])


def mode_summary(report) -> dict:
    p, result = report.plan, report.result or {}
    mode = p.get("mode", "sync")
    runs = result.get("worker_runs", [])
    syncs = result.get("sync_runs", [])
    out: dict = {"mode": mode, "workers": p["workers"], "replicas_to_aggregate": p.get("replicas_to_aggregate"),
                 "slow_workers": p.get("slow_workers") or {}, "ok": report.ok,
                 "failed_checks": [c.id for c in report.checks if c.status == "fail"]}
    start = min((r["t0"] for r in runs), default=None)
    if mode == "async":
        steps = len(runs)
        end = max((r["t1"] for r in runs), default=None)
    else:
        steps = len(syncs)
        end = max((r["t1"] for r in syncs), default=None)
    wall = (end - start) if start is not None and end is not None else None
    out.update(global_steps=steps, wall_s=round(wall, 4) if wall else None,
               steps_per_s=round(steps / wall, 3) if wall and steps else None,
               s_per_step=round(wall / steps, 4) if wall and steps else None)
    per_worker = collections.Counter(r["worker"] for r in runs)
    out["runs_per_worker"] = {str(w): per_worker.get(w, 0) for w in range(p["workers"])}
    busy: dict[int, float] = collections.defaultdict(float)
    for r in runs:
        busy[r["worker"]] += r["t1"] - r["t0"]
    out["mean_run_s"] = {str(w): round(busy[w] / per_worker[w], 4) if per_worker.get(w) else None
                         for w in range(p["workers"])}
    token = p.get("token_dequeue")
    waits: dict[str, float] = {str(w): 0.0 for w in range(p["workers"])}
    if token:
        for e in result.get("events", []):
            if e[NODE] == token and e[WHO].startswith("worker:"):
                waits[e[WHO].split(":", 1)[1]] += e[DUR] / 1e6
    out["token_wait_s"] = {w: round(s, 4) for w, s in waits.items()} if token else None
    stale = report.check("staleness")
    if stale is not None and stale.status == "pass":
        out["staleness"] = {k: stale.evidence[k] for k in ("mean", "max", "histogram", "per_worker")}
    elif mode != "async":
        grads = report.check("gradients_per_step")
        # averaged gradients are the step's own (tag == step - 1): stale ones are dropped, not applied
        out["staleness"] = {"mean": 0.0, "max": 0, "histogram": None, "per_worker": None} if (
            grads is not None and grads.status == "pass") else None
    else:
        out["staleness"] = None
    out["gradients"] = _gradients(report)
    dropped = [[_worker_of(x), int(x.split("#", 1)[1])] for row in (out["gradients"] or {}).get("per_step", [])
               for x in row.get("dropped_runs", [])]
    out["timeline"] = {"runs": [[r["worker"], r["run"], r["t0"], r["t1"]] for r in runs],
                       "steps": [[r["step"], r["t0"], r["t1"]] for r in syncs], "dropped": dropped,
                       "global_step": p.get("global_step")}
    loss = result.get("loss") or {}
    out["loss"] = loss.get("value")
    out["loss_tensor"] = loss.get("tensor")
    return out


def _gradients(report) -> dict | None:
    """Per step: the workers whose gradients were averaged and dropped; per worker: totals and share."""
    check = report.check("gradients_per_step")
    if check is None or check.status != "pass":
        return None
    steps = check.evidence.get("steps") or []
    workers = report.plan["workers"]
    averaged: collections.Counter[int] = collections.Counter()
    dropped: collections.Counter[int] = collections.Counter()
    rows = []
    for row in steps:
        used = [_worker_of(x) for x in row.get("averaged") or []]
        late = [_worker_of(x) for x in row.get("dropped_late") or []]
        averaged.update(used)
        dropped.update(late)
        rows.append({"step": row["step"], "averaged": used, "dropped": late,
                     "dropped_runs": list(row.get("dropped_late") or [])})
    total = sum(averaged.values())
    twice = [r["step"] for r in rows if len(set(r["averaged"])) < len(r["averaged"])]
    return {"per_step": rows,
            "per_worker": {str(w): {"averaged": averaged.get(w, 0), "dropped": dropped.get(w, 0),
                                    "share": round(averaged.get(w, 0) / total, 3) if total else None}
                           for w in range(workers)},
            "dropped": sum(dropped.values()), "steps_with_a_worker_twice": twice}
