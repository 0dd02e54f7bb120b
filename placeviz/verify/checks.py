"""Judge what the coordinator saw: each check has a status and the evidence behind it (no TF here).

Statuses: ``pass``, ``fail`` (exit code 1), ``skip`` (not applicable, or the run ended before the
evidence existed) and ``warn`` (reported, does not fail: partition fidelity, a run the user asked
to go without isolation, ``--no-isolation``).

The checks, in report order:

* ``run``: the run finished: K global steps, no hang, no dead process (else the diagnosis: what
  waited on what, the token queue and the accumulators);
* ``global_step``: after K aggregated steps ``global_step == K``, not K x W;
* ``single_update``: from the step stats of every run, each wrapped-optimizer update and the
  global-step increment ran exactly once per chief sync run and never in a worker run;
* ``per_worker_updates``: non-trainable writes in the worker train op (batch-norm statistics,
  metrics) counted per worker run, against the static proof's ``per_worker_updates``;
* ``gradients_per_step``: each step averaged exactly R of the gradients the workers computed for
  it (a subset of the captured gradients whose mean is the aggregated one); the rest were dropped;
* ``values``: the variables and slots after K steps equal a numpy replay of the wrapped
  optimizer's update kernels (every dense and sparse kernel of ``tf.compat.v1.train``'s optimizers,
  :data:`placeviz.verify.plan.OPTIMIZERS`) from the values before the first step and the inputs
  each sync run gave them;
* ``stale_gradient``: a gradient tagged with a local step K steps old is dropped, a current one
  counted;
* ``partitions``: the runtime's partition graphs agree with ``placeviz partition``;
* ``isolation`` and ``released``: the servers saw only loopback and could not write outside the
  temp dir; every process is gone and the temp dir removed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placeviz.verify.optimizers import UPDATES

RTOL, ATOL = 1e-4, 1e-5
MAX_SUBSETS = 20000


@dataclass
class Check:
    id: str
    title: str
    status: str  # pass | fail | skip | warn
    summary: str
    evidence: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "status": self.status, "summary": self.summary,
                "evidence": self.evidence}


def _close(a, b) -> tuple[bool, float]:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False, float("inf")
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    return bool(np.allclose(a, b, rtol=RTOL, atol=ATOL)), diff


# ------------------------------------------------------------------------------------------ run


def check_run(plan: dict, result: dict, raw) -> Check:
    failure = result.get("failure")
    if not result:
        why = ("was stopped (SIGSTOP?) and killed" if getattr(raw, "kill_reason", None) == "stopped" else
               "killed after the timeout" if raw.killed else f"exited with code {raw.returncode}")
        last = raw.stderr_tail.strip().splitlines()[-1:] or [""]
        return Check("run", "the run finished", "fail", f"the coordinator process {why}: {last[0]}",
                     {"stderr_tail": raw.stderr_tail})
    if failure is None and plan.get("mode") == "async":
        return Check("run", "the run finished", "pass",
                     f"{plan['workers']} workers ran {plan['steps']} train steps in all, each on its own",
                     {"worker_runs": len(result["worker_runs"])})
    if failure is None:
        return Check("run", "the run finished", "pass",
                     f"{plan['workers']} workers and the chief ran {plan['steps']} global steps",
                     {"worker_runs": len(result["worker_runs"]), "sync_runs": len(result["sync_runs"])})
    return Check("run", "the run finished", "fail", explain_failure(plan, failure), failure)


def explain_failure(plan: dict, failure: dict) -> str:
    """One paragraph: what happened, and what was waiting on what."""
    state = failure.get("state") or {}
    r = plan.get("replicas_to_aggregate")
    counts = {a["name"]: state.get(a["name"]) for a in plan["accumulators"]}
    queue = state.get("__queue_size__")
    step = state.get("__global_step__")
    waiting = failure.get("waiting", [])
    workers = [w["who"] for w in waiting if w["who"].startswith("worker") and w.get("op")]
    chief = next((w for w in waiting if w["who"] == "chief queue runner"), None)
    parts = [failure["message"] + "."]
    count_text = ", ".join(f"{k.rsplit('/', 1)[-1]}={v}" for k, v in counts.items()) if counts else "?"
    if plan.get("queue_runner") is None:
        parts.append(f"No chief queue runner: nothing runs the sync op {plan['sync_op']}, so no "
                     f"TakeGradient ever runs; the accumulators hold {count_text} gradients (R={r}) that nobody "
                     f"takes, global_step stays {step}.")
    elif chief is not None and chief.get("op"):
        short = [n for n, c in counts.items() if c is not None and r is not None and c < r]
        if short:
            parts.append(f"The chief's sync op {plan['sync_op']} has waited {chief['for_s']} s in TakeGradient for "
                         f"R={r} gradients; the accumulators hold {count_text}.")
    empty = [q for q in failure.get("queues", []) if not q["token_queue"] and q["size"] == 0]
    if workers and empty:
        def why(q):
            return "its queue runner is running" if q["runner"] else "no queue runner fills it"
        listed = "; ".join(f"worker {q['worker']}'s {q['queue']} holds 0 of {q['capacity']} ({why(q)})"
                           for q in empty[:4])
        parts.append(f"{', '.join(workers)} {'waits' if len(workers) == 1 else 'wait'} in {plan['train_ops'][0]}; the "
                     f"token queue holds {queue}, but {len(empty)} input queue(s) are empty: {listed}"
                     f"{' ...' if len(empty) > 4 else ''}.")
        if any(not q["runner"] for q in empty):
            parts.append("A TF1 program starts these with Supervisor/MonitoredTrainingSession (the queue_runners "
                         "collection) or tf.compat.v1.train.start_queue_runners, but the graph's collection has "
                         "no runner for them (or feed the dequeued tensors with --feeds).")
    elif workers:
        parts.append(f"{', '.join(workers)} {'waits' if len(workers) == 1 else 'wait'} in {plan['train_ops'][0]} "
                     f"(for a token from {plan['token_dequeue']}); the token queue holds {queue}.")
    tokens = plan.get("init_tokens_ops")
    if failure.get("kind") == "deadlock" and plan.get("queue_runner") is not None and queue == 0 and r is not None \
            and workers and \
            all(c is not None and c < r for c in counts.values()):
        parts.append(f"R={r} is more than the gradients the workers can supply without new tokens "
                     f"(one per worker plus one per init token; init tokens op: {tokens[0] if tokens else 'none'}).")
    for t in failure.get("details", {}).get("tasks", []):
        parts.append(f"Task {t['task']} is gone (pid {t['pid']}, {t['signal'] or t['returncode']}).")
    return " ".join(parts)


def check_global_step(plan: dict, result: dict, arrays: dict) -> Check:
    k, w = plan["steps"], plan["workers"]
    if result.get("failure") is not None:
        step = (result["failure"].get("state") or {}).get("__global_step__")
        return Check("global_step", "global_step == K after K aggregated steps", "skip",
                     f"the run did not finish (global_step {step} when it stopped)", {"global_step": step})
    value = arrays.get(f"final/{plan['global_step']}")
    value = int(np.asarray(value).reshape(-1)[0]) if value is not None else (result.get("final_probe") or {}).get(
        "__global_step__")
    runs = len(result["worker_runs"])
    ev = {"global_step": value, "K": k, "workers": w, "worker_runs": runs, "K_times_W": k * w}
    if value == k:
        return Check("global_step", "global_step == K after K aggregated steps", "pass",
                     f"global_step = {value} after {k} sync runs and {runs} worker runs (not K x W = {k * w})", ev)
    return Check("global_step", "global_step == K after K aggregated steps", "fail",
                 f"global_step = {value}, expected {k} ({runs} worker runs, K x W = {k * w})", ev)


# ------------------------------------------------------------------------------------------ step stats


def check_single_update(plan: dict, result: dict) -> Check:
    title = "each update runs once per global step, only in the chief's sync run"
    sync_runs, worker_runs = result.get("sync_runs", []), result.get("worker_runs", [])
    if not sync_runs and not worker_runs:
        return Check("single_update", title, "skip", "no run finished", {})
    chief_ops = [u["op"] for u in plan["updates"]] + plan["increments"]
    per_op = []
    bad = []
    worker_totals: dict[str, int] = {}
    for run in worker_runs:
        for op, n in run["counts"].items():
            worker_totals[op] = worker_totals.get(op, 0) + n
    allowed_in_workers = {a for acc in plan["accumulators"] for a in acc["apply_ops"]} | {
        e["op"] for e in plan["per_worker_updates"]}
    for op in chief_ops:
        in_sync = [run["counts"].get(op, 0) for run in sync_runs]
        in_workers = worker_totals.get(op, 0)
        ok = all(n == 1 for n in in_sync) and in_workers == 0
        per_op.append({"op": op, "per_sync_run": in_sync, "in_worker_runs": in_workers, "ok": ok})
        if not ok:
            bad.append(op)
    # writes of trainable variables or the global step that are not the chief's (e.g. an optimizer's
    # apply op added to the worker train op)
    extra = {op: n for op, n in worker_totals.items() if op not in allowed_in_workers and op not in chief_ops
             and not any(op in acc["take_ops"] for acc in plan["accumulators"])}
    takes_in_workers = {op: n for op, n in worker_totals.items()
                        if any(op in acc["take_ops"] for acc in plan["accumulators"])}
    ev = {"sync_runs": len(sync_runs), "worker_runs": len(worker_runs), "updates": per_op,
          "other_writes_in_worker_runs": extra, "takes_in_worker_runs": takes_in_workers}
    if bad or extra or takes_in_workers:
        what = []
        for item in per_op:
            if not item["ok"]:
                what.append(f"{item['op']} ran {item['per_sync_run']} per sync run and {item['in_worker_runs']} "
                            "times in worker runs")
        for op, n in sorted(extra.items()):
            what.append(f"{op} ran {n} times in {len(worker_runs)} worker runs (a per-worker update)")
        for op, n in sorted(takes_in_workers.items()):
            what.append(f"{op} (TakeGradient) ran {n} times in worker runs")
        return Check("single_update", title, "fail", "; ".join(what[:8]) + ("; ..." if len(what) > 8 else ""), ev)
    if result.get("failure") is not None:
        return Check("single_update", title, "skip",
                     f"the run stopped early; no violation in the {len(sync_runs)} sync and {len(worker_runs)} "
                     "worker runs that finished", ev)
    return Check("single_update", title, "pass",
                 f"{len(chief_ops)} update ops (incl. the global-step increment) ran exactly once in each of "
                 f"{len(sync_runs)} sync runs and never in {len(worker_runs)} worker runs", ev)


def check_per_worker(plan: dict, result: dict) -> Check:
    title = "per-worker updates of non-trainable variables match the proof"
    entries = plan["per_worker_updates"]
    runs = result.get("worker_runs", [])
    if not entries:
        return Check("per_worker_updates", title, "pass" if runs and result.get("failure") is None else "skip",
                     "the proof lists no per-worker update, and none ran", {"entries": []})
    rows = []
    bad = []
    for e in entries:
        n = sum(r["counts"].get(e["op"], 0) for r in runs)
        # only the runs of workers whose graph holds the op (a chief-only update runs on the chief)
        mine = [r for r in runs if r["worker"] in e.get("workers", [r["worker"]])]
        expected = len(mine) if e["runs"] == "once per worker run" else None
        ok = expected is None or n == expected
        rows.append({**e, "executions": n, "worker_runs": len(mine), "expected": expected, "ok": ok})
        if not ok:
            bad.append(f"{e['op']} ({e['variable']}) ran {n} times in {len(mine)} worker runs")
    steps = max(len(result.get("sync_runs", [])), 1)
    ev = {"entries": rows, "worker_runs_per_global_step": round(len(runs) / steps, 2)}
    if not runs:
        return Check("per_worker_updates", title, "skip", "no worker run finished", ev)
    if bad and result.get("failure") is None:
        return Check("per_worker_updates", title, "fail", "; ".join(bad), ev)
    if result.get("failure") is not None:
        return Check("per_worker_updates", title, "skip", "the run stopped early", ev)
    kinds: dict[str, int] = {}
    for e in entries:
        kinds[e.get("hint") or e["variable"]] = kinds.get(e.get("hint") or e["variable"], 0) + 1
    what = ", ".join(f"{n} x {k}" for k, n in sorted(kinds.items()))
    return Check("per_worker_updates", title, "pass",
                 f"{len(entries)} per-worker update(s) ({what}) ran once per worker run ({len(runs)} runs, about "
                 f"{ev['worker_runs_per_global_step']} per global step), as the proof says: per worker by design, "
                 "not aggregated", ev)


# ------------------------------------------------------------------------------------------ gradients


def _tags(result: dict) -> list[tuple[int, int, int]]:
    """(worker, run, tag) for every recorded worker run: the tag is the token of the worker's
    previous run (its local step), 0 for its first run."""
    out = []
    last: dict[int, int] = {}
    for run in sorted(result.get("worker_runs", []), key=lambda r: (r["worker"], r["run"])):
        w = run["worker"]
        out.append((w, run["run"], last.get(w, 0)))
        if "token" in run:
            last[w] = run["token"]
    return out


def match_steps(plan: dict, result: dict, arrays: dict) -> dict:
    """Per dense accumulator and step: which R captured gradients the aggregated one is the mean of."""
    r = plan["replicas_to_aggregate"]
    tags = _tags(result)
    out: dict[str, list[dict]] = {}
    for acc in plan["accumulators"]:
        if not acc.get("take") or not acc.get("grad"):
            continue
        rows = []
        for k in range(1, len(result.get("sync_runs", [])) + 1):
            agg = arrays.get(f"s{k}/{acc['take']}")
            cands = [(w, n) for w, n, tag in tags if tag == k - 1 and f"w{w}/r{n}/{acc['grad']}" in arrays]
            row: dict[str, Any] = {"step": k, "candidates": [f"w{w}#{n}" for w, n in cands], "used": None,
                                   "max_diff": None}
            if agg is None or r is None:
                rows.append(row)
                continue
            grads = [np.asarray(arrays[f"w{w}/r{n}/{acc['grad']}"], np.float64) for w, n in cands]
            diff, subset = _best_subset(grads, agg, r)
            ok = subset is not None and _close(np.mean([grads[i] for i in subset], axis=0), agg)[0]
            chosen: tuple[int, ...] = subset if subset is not None else ()  # `subset` whenever ok
            row.update(used=[row["candidates"][i] for i in chosen] if ok else None, max_diff=diff, ok=ok)
            row["dropped"] = [c for i, c in enumerate(row["candidates"]) if ok and i not in chosen]
            rows.append(row)
        out[acc["name"]] = rows
    return out


def _best_subset(grads: list, agg, r: int) -> tuple[float, tuple[int, ...] | None]:
    """The subset of at least ``r`` gradients whose mean is ``agg`` (or the closest one tried).

    TF's ``TakeGrad`` blocks until ``r`` gradients of the current step have arrived and then
    averages *every* one accumulated so far, so with backup workers a gradient that arrives before
    the chief takes is averaged too (more than R); one that arrives after is dropped as stale.
    Sizes are tried from ``r`` up, so exactly R is preferred when both fit.
    """
    best: tuple[float, tuple[int, ...] | None] = (float("inf"), None)
    count = 0
    for size in range(r, len(grads) + 1):
        for subset in itertools.combinations(range(len(grads)), size):
            count += 1
            if count > MAX_SUBSETS:
                return best
            ok, diff = _close(np.mean([grads[i] for i in subset], axis=0), agg)
            if diff < best[0]:
                best = (diff, subset)
            if ok:
                return best
    return best


def check_gradients(plan: dict, result: dict, arrays: dict, matched: dict) -> Check:
    title = "each step averages at least R of the workers' gradients of that step"
    r = plan["replicas_to_aggregate"]
    if result.get("failure") is not None:
        done = len(result.get("sync_runs", []))
        return Check("gradients_per_step", title, "skip",
                     f"the run did not finish ({done} global step(s) done): the gradients of the steps in flight "
                     "were never all captured", {})
    if not matched or not any(matched.values()):
        return Check("gradients_per_step", title, "skip", "no dense accumulator step to match", {})
    bad = []
    for acc, rows in matched.items():
        for row in rows:
            if not row.get("ok"):
                bad.append(f"{acc} step {row['step']}: no {r} or more of the {len(row['candidates'])} gradients tagged "
                           f"{row['step'] - 1} average to the aggregated one (closest max diff {row['max_diff']:.3g})")
    first = next(iter(matched.values()))
    per_step = [{"step": row["step"], "averaged": row.get("used"), "dropped_late": row.get("dropped")}
                for row in first]
    ev = {"R": r, "workers": plan["workers"], "steps": per_step, "accumulators": matched}
    if bad:
        return Check("gradients_per_step", title, "fail", "; ".join(bad[:5]), ev)
    steps = len(first)
    backup = plan["workers"] - r if r is not None and plan["workers"] > r else 0
    dropped_first = sum(len(row.get("dropped") or []) for row in first)
    extra = (f"; {dropped_first} late gradient(s) per accumulator, tagged with an already aggregated step, were "
             "dropped" if dropped_first else "")
    twice = [row["step"] for row in first
             if len({name.split("#")[0] for name in row.get("used") or []}) < len(row.get("used") or [])]
    if twice:
        tokens = plan.get("tokens_per_step")
        extra += (f"; in step(s) {', '.join(map(str, twice))} one worker contributed more than one gradient: it "
                  f"dequeued a second token of the same step before a slower worker took its first (the sync op "
                  f"enqueues {tokens if tokens is not None else '?'} tokens per step, one per replica, and "
                  "any worker may take any of them)")
    sparse = sum(1 for a in plan["accumulators"] if a["sparse"])
    not_matched = f"; {sparse} sparse accumulator(s) not matched" if sparse else ""
    sizes = sorted({len(row.get("used") or []) for rows in matched.values() for row in rows})
    if sizes == [r]:
        how = f"exactly R={r}"
    else:
        how = (f"R={r} or more ({', '.join(map(str, sizes))}: a backup worker's gradient that arrived before the "
               "chief's take was averaged too, as TF's accumulator does)")
    return Check("gradients_per_step", title, "pass",
                 f"in each of {steps} steps every dense accumulator averaged {how} captured gradients "
                 f"({len(matched)} accumulators, W={plan['workers']}, {backup} backup worker(s)){extra}{not_matched}",
                 ev)


def _replay_input(x) -> np.ndarray:
    """A fetched kernel input as the replay uses it: floats in float64, indices and steps as they are."""
    a = np.asarray(x)
    return a.astype(np.float64) if np.issubdtype(a.dtype, np.floating) else a


SMALL = 64  # variables of at most this many elements show their values in the evidence


def check_values(plan: dict, result: dict, arrays: dict) -> Check:
    """Replay every update op the plan models (:data:`placeviz.verify.plan.OPTIMIZERS`, dense and
    sparse) K times from the initial values with the inputs each sync run fetched, and compare the
    variables and slots with the values TF ended with."""
    from placeviz.verify.plan import not_replayed_why, replayed_summary

    title = "variables equal a numpy replay of the optimizer on the aggregated gradients"
    updates = [u for u in plan["updates"] if u["kind"] is not None]
    skipped = sorted({u["op_type"] for u in plan["updates"] if u["kind"] is None})
    why = {u["op_type"]: not_replayed_why(u) for u in plan["updates"] if u["kind"] is None}
    if result.get("failure") is not None or not result.get("sync_runs"):
        return Check("values", title, "skip", "the run did not finish", {})
    if not updates:
        return Check("values", title, "skip",
                     f"no update op verify replays ({', '.join(skipped) or 'none'}; replayed: {replayed_summary()})",
                     {"not_replayed": skipped, "not_replayed_why": why})
    k_total = len(result["sync_runs"])
    states: dict[str, np.ndarray] = {}
    for u in updates:
        for v in u["state"].values():
            if f"initial/{v}" in arrays:
                states[v] = np.array(arrays[f"initial/{v}"], np.float64)
    missing = [v for u in updates for v in u["state"].values() if v not in states]
    if missing:
        return Check("values", title, "skip", f"initial values not read for {', '.join(sorted(set(missing)))}", {})
    for k in range(1, k_total + 1):
        beta_updates: dict[str, np.ndarray] = {}
        for u in updates:
            inputs = {role: _replay_input(arrays[f"s{k}/{t}"]) for role, t in u["fetch"].items()}
            local = {role: states[v] for role, v in u["state"].items()}
            UPDATES[u["kind"]](local, inputs, u.get("attrs") or {"use_nesterov": u["use_nesterov"]})
            for role, v in u["state"].items():
                if role not in ("beta1_power", "beta2_power"):
                    states[v] = np.asarray(local[role], np.float64)
            for role, beta in (("beta1_power", "beta1"), ("beta2_power", "beta2")):
                if role in u["state"]:
                    beta_updates[u["state"][role]] = inputs[beta]
        for v, factor in beta_updates.items():
            states[v] = states[v] * factor
    rows, bad = [], []
    for v, replay in sorted(states.items()):
        final = arrays.get(f"final/{v}")
        if final is None:
            continue
        ok, diff = _close(replay, final)
        moved = float(np.max(np.abs(np.asarray(final, np.float64) - arrays[f"initial/{v}"]))) if np.size(final) else 0.0
        row = {"variable": v, "ok": ok, "max_abs_diff": diff, "max_abs_change": moved}
        if np.size(final) <= SMALL:
            row.update(initial=np.asarray(arrays[f"initial/{v}"], np.float64).tolist(),
                       final=np.asarray(final, np.float64).tolist(), replayed=np.asarray(replay).tolist())
        rows.append(row)
        if not ok:
            bad.append(f"{v}: max |TF - replay| = {diff:.3g} (changed by up to {moved:.3g})")
    kinds = sorted({u["op_type"] for u in updates})
    ev = {"steps": k_total, "optimizers": kinds, "variables": rows, "not_replayed": skipped,
          "not_replayed_why": why, "rtol": RTOL, "atol": ATOL}
    if bad:
        return Check("values", title, "fail", f"{len(bad)} of {len(rows)} variables differ from one update per "
                     f"step: " + "; ".join(bad[:4]), ev)
    note = f" ({'; '.join(f'{op} not replayed: {why[op]}' for op in skipped)})" if skipped else ""
    return Check("values", title, "pass",
                 f"{len(rows)} variables/slots match {k_total} replayed {', '.join(kinds)} steps "
                 f"(rtol {RTOL}){note}", ev)


def check_stale(plan: dict, result: dict) -> Check:
    title = "a stale gradient is dropped"
    probe = result.get("stale_probe")
    if not probe:
        return Check("stale_gradient", title, "skip", "the run did not finish, or no dense accumulator", {})
    stale, cur = probe["stale"], probe["current"]
    dropped = stale["before"] == stale["after"]
    counted = all(b + 1 == a for b, a in zip(cur["before"], cur["after"], strict=True))
    ev = dict(probe)
    if dropped and counted:
        n = len(stale["after"])
        return Check("stale_gradient", title, "pass",
                     f"a lagging worker's gradient tagged local step {stale['tag']} (accumulators at step "
                     f"{probe['accumulator_global_step']}) left all {n} accumulator counts unchanged; one tagged "
                     f"{cur['tag']} was counted in each (+1)", ev)
    return Check("stale_gradient", title, "fail",
                 f"stale tag {stale['tag']}: counts {stale['before']} -> {stale['after']}; current tag {cur['tag']}: "
                 f"{cur['before']} -> {cur['after']}", ev)


def check_isolation(plan: dict, result: dict) -> Check:
    """Local servers: every process saw only ``lo``, and a write outside the temp dir and one among
    verify's own files failed with EROFS while one in the scratch dir succeeded (the coordinator's
    probe, :func:`placeviz.verify.coordinator.write_probe`). ``warn`` with
    ``--no-isolation`` (the run was asked to go without); ``fail`` if the namespaces were made but
    do not hold."""
    title = "local servers reachable only from loopback, host file system read-only"
    if plan["existing_cluster"]:
        return Check("isolation", title, "skip", "--servers: verify started no server", {})
    net = result.get("network") or {}
    evidence = {**net, "isolation": result.get("isolation")}
    if not plan.get("isolation", True):
        return Check("isolation", title, "warn",
                     "NOT ISOLATED (--no-isolation): the TF servers listened on every interface and were reachable "
                     "from other hosts while they ran, and the graph's ops could write wherever you can", evidence)
    seen = net.get("interfaces", {})
    only_lo = bool(seen) and all(v == ["lo"] for v in seen.values())
    mounts = (result.get("isolation") or {}).get("mounts") or {}
    read_only = mounts.get("outside") == mounts.get("own_files") == "EROFS" and mounts.get("inside") == "written"
    if net.get("namespace") and only_lo and read_only:
        written = (result.get("isolation") or {}).get("written") or []
        wrote = (f"; the graph's ops wrote {len(written)} file(s) there, removed with it: {', '.join(written[:5])}"
                 f"{' ...' if len(written) > 5 else ''}") if written else ""
        return Check("isolation", title, "pass",
                     f"{len(seen)} process(es) ran in private user, network and mount namespaces: only lo, and a "
                     f"write anywhere but {mounts['writable']} failed with EROFS{wrote}", evidence)
    why = "not in a private network namespace" if not net.get("namespace") else \
        f"interfaces {seen}" if not only_lo else f"write probe {mounts}"
    return Check("isolation", title, "fail", f"the sandbox did not hold: {why}", evidence)


def check_released(raw) -> Check:
    rel = raw.released
    title = "every started process is gone, the temp dir removed"
    if rel.get("ok") and rel.get("temp_dir_removed", True):
        return Check("released", title, "pass",
                     f"{len(rel.get('processes', {}))} process(es) started, none left running; temp dir removed", rel)
    what = [f"still running: {rel.get('still_running')}"] if not rel.get("ok") else []
    what += [] if rel.get("temp_dir_removed", True) else ["the temp dir is still there"]
    return Check("released", title, "fail", "; ".join(what), rel)


def check_partitions(pipe, prepared, result: dict) -> Check:
    from placeviz.verify.compare import compare_run

    title = "runtime partition graphs agree with placeviz partition"
    runs = result.get("partition_runs") or {}
    if not runs:
        return Check("partitions", title, "skip", "no run reported its partition graphs", {})
    feeds = prepared.plan.feeds
    out, texts, worst = {}, [], 100.0
    for key, run in runs.items():
        try:
            got = compare_run(pipe.graph, pipe.devices, run, feeds=feeds if key == "worker" else [],
                              client_device=prepared.client_device,
                              attr_keys=pipe.placement.placement.attr_keys if pipe.placement is not None else None)
        except Exception as e:  # noqa: BLE001 - placeviz's partitioner failing is itself the finding
            got = {"error": f"{type(e).__name__}: {e}", "percent": 0.0}
        out[key] = got
        worst = min(worst, got["percent"])
        what = "worker train step" if key == "worker" else "chief sync run"
        if "error" in got:
            texts.append(f"{what}: placeviz partition failed: {got['error']}")
        else:
            texts.append(f"{what} {got['percent']}% (nodes {got['nodes']['agree']}/{got['nodes']['total']}, "
                         f"transfers {got['transfers']['agree']}/{got['transfers']['total']})")
    status = "pass" if worst == 100.0 else "warn"
    return Check("partitions", title, status, "; ".join(texts), out)


def evaluate(pipe, prepared, raw, *, model_spec: str):
    """All checks on one run -> :class:`placeviz.verify.report.VerifyReport`."""
    from placeviz.verify.report import VerifyReport

    plan = prepared.plan.to_json()
    result, arrays = raw.result, raw.arrays
    checks = [check_run(plan, result, raw)]
    if result and plan.get("mode") == "async":
        from placeviz.verify import async_values, staleness

        per_var = staleness.applies(plan, result)
        checks += [staleness.check_async_run(plan, result, arrays), staleness.check_staleness(plan, result, per_var),
                   staleness.check_locking(plan, per_var),
                   async_values.check_async_values(plan, result, arrays, per_var)]
    elif result:
        matched = match_steps(plan, result, arrays)
        checks += [check_global_step(plan, result, arrays), check_single_update(plan, result),
                   check_per_worker(plan, result), check_gradients(plan, result, arrays, matched),
                   check_values(plan, result, arrays), check_stale(plan, result)]
    if result:  # every mode: where TF put each node, and nothing reached outside the cluster
        checks += [check_partitions(pipe, prepared, result), check_isolation(plan, result)]
    checks.append(check_released(raw))
    return VerifyReport(model=model_spec, plan=plan, checks=checks, result=result, raw_seconds=raw.seconds,
                        proof_single_update=getattr(pipe.proof, "single_update", None))
