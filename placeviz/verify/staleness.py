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
  they run concurrently and may interleave element by element (Hogwild-style);
* **values**: each variable's final value against a numpy replay of every run's update, in the ps
  order, with the inputs (learning rate, gradient...) that run fed its kernel. Where unlocked
  updates of a variable overlapped in time, the order (and, for a racing element, the result) is
  not pinned down: a difference there is reported as ambiguous, never as a failure.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

import numpy as np

from placeviz.verify.checks import RTOL, SMALL, Check, _close, _replay_input
from placeviz.verify.optimizers import UPDATES

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


def _worker(who: str) -> int | None:
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
    found = [e for e in result.get("events", []) if e[NODE] in updates and _worker(e[WHO]) is not None]
    out: dict[str, list[Apply]] = collections.defaultdict(list)
    for e in found:
        v = updates[e[NODE]]["variable"]
        worker = _worker(e[WHO])
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


def _powers(plan: dict, result: dict) -> dict[str, list[float]]:
    """Adam's beta-power variable -> the start times of every run's advance of it (adam.py
    ``_finish``: ``beta1_power.assign(beta1_power * beta1)`` once per run, after its updates)."""
    writers = {w: v for v, ws in (plan.get("powers") or {}).items() for w in ws}
    out: dict[str, list[float]] = {v: [] for v in plan.get("powers") or {}}
    for e in result.get("events", []):
        if e[NODE] in writers and _worker(e[WHO]) is not None:
            out[writers[e[NODE]]].append(e[START])
    return out


def _devices(plan: dict, result: dict, variables) -> dict[str, str]:
    """The device each of ``variables`` is read on (its read ops run with it)."""
    read_of = {r: v for v, names in (plan.get("reads") or {}).items() if v in variables for r in names}
    return {read_of[e[NODE]]: e[DEVICE] for e in result.get("events", []) if e[NODE] in read_of}


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



class _BetaPowers:
    """Adam's beta powers replayed from their timed advances (adam.py ``_finish``: each run advances
    ``beta1_power``/``beta2_power`` once, after its updates, so a run's update uses the power advanced
    once per run whose advance started before the run read it)."""

    ROLES = tuple(zip(BETA_ROLES, ("beta1", "beta2"), strict=True))

    def __init__(self, plan: dict, result: dict, arrays: dict):
        self.advances = _powers(plan, result)
        self.device = _devices(plan, result, self.advances)
        self.reads = read_times(plan, result)
        self.arrays = arrays
        self.betas: dict[str, np.ndarray] = {}  # power variable -> the beta it is advanced by

    def unrecorded(self, u: dict) -> str | None:
        """Why update ``u`` cannot be replayed (a power it reads has no recorded advances), else None."""
        return next((f"{role} {v}: its advances were not recorded" for role in BETA_ROLES
                     if (v := u["state"].get(role)) is not None and v not in self.advances), None)

    def seen_by(self, u: dict, a: Apply, inputs: dict) -> dict | str:
        """The value of each power run ``a`` of update ``u`` read (role -> array), or why it is unknown.

        A ref variable's read is an alias of its buffer, which Adam's Assign overwrites in place
        (state_ops AssignOp copies into the initialized buffer): a kernel on the power's own device
        sees the value at its start, a remote one the value sent."""
        out = {}
        for role, beta in self.ROLES:
            if role not in u["state"]:
                continue
            b = u["state"][role]
            seen = a.start if a.device == self.device.get(b) else self.reads.get((f"worker:{a.worker}", a.run, b))
            if seen is None:
                return f"{a.op} of worker {a.worker} run {a.run}: its read of {b} not recorded"
            k = sum(1 for t in self.advances[b] if t < seen)
            out[role] = np.asarray(self.arrays[f"initial/{b}"], np.float64) * inputs[beta] ** k
        return out

    def record(self, u: dict, inputs: dict) -> None:
        self.betas.update({u["state"][role]: inputs[beta] for role, beta in self.ROLES if role in u["state"]})

    def finals(self) -> dict[str, np.ndarray]:
        """Each power after every run's advance."""
        return {b: np.asarray(self.arrays[f"initial/{b}"], np.float64) * beta ** len(self.advances[b])
                for b, beta in self.betas.items()}

def check_async_values(plan: dict, result: dict, arrays: dict, per_var: dict[str, list[Apply]]) -> Check:
    """Replay every run's update of every variable in ps order with the inputs that run fetched."""
    from placeviz.verify.plan import not_replayed_why

    title = "variables equal a numpy replay of every worker's update, in the order the ps applied them"
    if result.get("failure") is not None:
        return Check("values", title, "skip", "the run did not finish", {})
    ops = {u["op"]: u for u in plan["updates"]}
    skipped = {u["op"]: not_replayed_why(u) for u in plan["updates"] if u["kind"] is None}
    powers = _BetaPowers(plan, result, arrays)
    skipped.update({u["op"]: why for u in plan["updates"] if (why := powers.unrecorded(u))})
    states: dict[str, np.ndarray] = {}
    for u in plan["updates"]:
        for v in u["state"].values():
            if f"initial/{v}" in arrays:
                states[v] = np.array(arrays[f"initial/{v}"], np.float64)
    replayed: dict[str, int] = collections.Counter()
    missing_inputs: list[str] = []
    for v, rows in per_var.items():
        for a in rows:
            u = ops[a.op]
            if a.op in skipped:
                continue
            try:
                inputs = {role: _replay_input(arrays[f"w{a.worker}/r{a.run}/{t}"]) for role, t in u["fetch"].items()}
            except KeyError as e:
                missing_inputs.append(f"{a.op} of worker {a.worker} run {a.run}: {e.args[0]} not captured")
                continue
            seen = powers.seen_by(u, a, inputs)
            if isinstance(seen, str):
                missing_inputs.append(seen)
                continue
            local = {role: states[s] for role, s in u["state"].items()} | seen
            UPDATES[u["kind"]](local, inputs, u.get("attrs") or {})
            for role, s in u["state"].items():
                if role not in BETA_ROLES:
                    states[s] = np.asarray(local[role], np.float64)
            replayed[v] += 1
            powers.record(u, inputs)
    if missing_inputs:
        return Check("values", title, "skip", "; ".join(missing_inputs[:3]), {})
    states.update(powers.finals())
    betas = powers.betas
    rows_out, bad, ambiguous = [], [], []
    checked = {s for u in plan["updates"] if u["op"] not in skipped for s in u["state"].values()
               if s in betas or s not in powers.advances}
    unlocked_overlap = {u["variable"] for u in plan["updates"] if not u.get("use_locking")
                        and overlaps([a for a in per_var.get(u["variable"], []) if a.op == u["op"]])}
    owner = {s: u["variable"] for u in plan["updates"] for s in u["state"].values()}
    replayed.update({b: len(powers.advances[b]) for b in betas})
    owner.update({b: b for b in betas})
    for s in sorted(checked):
        final = arrays.get(f"final/{s}")
        if final is None or s not in states:
            continue
        ok, diff = _close(states[s], final)
        row = {"variable": s, "ok": ok, "max_abs_diff": diff, "updates": replayed.get(owner[s], 0)}
        if np.size(final) <= SMALL:
            row.update(final=np.asarray(final, np.float64).tolist(), replayed=np.asarray(states[s]).tolist())
        if not ok and owner[s] in unlocked_overlap:
            row["ambiguous"] = True
            ambiguous.append(s)
        elif not ok:
            others = (plan.get("other_writes") or {}).get(owner[s])
            also = f" (the train step also writes it outside the optimizer: {', '.join(others[:2])})" if others else ""
            bad.append(f"{s}: max |TF - replay| = {diff:.3g}{also}")
        rows_out.append(row)
    ev = {"variables": rows_out, "not_replayed": skipped, "rtol": RTOL,
          "order": "the start of each update kernel on the variable's ps task"}
    total = sum(replayed.values())
    if bad:
        return Check("values", title, "fail", f"{len(bad)} of {len(rows_out)} variables differ from the replay of "
                     f"{total} updates in ps order: " + "; ".join(bad[:4]), ev)
    if not rows_out:
        return Check("values", title, "skip", "no update verify replays" +
                     (f" ({'; '.join(f'{k}: {w}' for k, w in list(skipped.items())[:2])})" if skipped else ""), ev)
    extra = (f"; {len(ambiguous)} variable(s) differ but had unlocked overlapping updates, whose order and result "
             f"TF does not pin (ambiguous, not a failure): {', '.join(ambiguous[:3])}") if ambiguous else ""
    status = "warn" if ambiguous else "pass"
    return Check("values", title, status, f"{len(rows_out) - len(ambiguous)} variables/slots match {total} updates "
                 f"replayed one by one in ps order, each with the inputs its own run fed it{extra}", ev)
