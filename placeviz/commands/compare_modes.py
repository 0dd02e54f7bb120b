"""``placeviz compare-modes``: one plain training graph run four ways on local TF servers.

The question (seed 001): asynchronous updates train on stale parameters; fully synchronous updates
run at the slowest worker's pace; what does SyncReplicasOptimizer really do with a straggler?
Each mode is one :func:`placeviz.commands.verify.run` of the same graph, the same W workers, the
same seeded inputs and the same ``--slow-worker`` delays:

1. ``async``: the plain graph, every worker applying its own updates (staleness, locking);
2. ``sync R=W``: placeviz's SyncReplicas pass with ``replicas_to_aggregate = total_replicas = W``,
   run as TF runs it (R initial tokens, first come first served);
3. ``sync R=W-B``: the same with B backup workers (``--backup-workers``);
4. ``barrier``: R = W without initial tokens: one gradient of every worker per step.

The result is one table and a ``placeviz.modes/1`` JSON document (docs/modes.md), whose
``relations`` state what the runs show against each other, each with the numbers behind it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from placeviz.commands.output import emit, progress, render_rich, to_json
from placeviz.errors import PlacevizError

if TYPE_CHECKING:
    from placeviz.pipeline import Options
    from placeviz.verify.report import VerifyReport

SCHEMA = "placeviz.modes/1"


@dataclasses.dataclass
class ModeRun:
    label: str
    mode: str
    replicas_to_aggregate: int | None
    report: VerifyReport


def modes_to_run(workers: int, backup: int) -> list[tuple[str, str, int | None]]:
    """(label, verify mode, R) of each run, in table order."""
    if workers < 2:
        raise PlacevizError("compare-modes needs at least 2 workers (--workers)")
    if not 0 <= backup < workers:
        raise PlacevizError(f"--backup-workers {backup}: must be between 0 and W-1 = {workers - 1}")
    runs = [("async", "async", None), (f"sync R={workers}", "sync", workers)]
    if backup:
        runs.append((f"sync R={workers - backup} ({backup} backup)", "sync", workers - backup))
    runs.append((f"barrier R={workers}", "barrier", workers))
    return runs


def run(model_spec: str, options: Options, *, workers: int, steps: int, backup: int = 1,
        slow_workers: dict[int, float] | None = None, loss: str | None = None, trace: bool = False,
        say=progress, **verify_options) -> list[ModeRun]:
    """Run every mode: ``options`` (the PLACE options and ``--tag``; a plain graph, no SYNC
    options) with each mode's SyncReplicas options; ``verify_options`` go to
    :func:`placeviz.commands.verify.run` unchanged."""
    from placeviz.commands import verify
    from placeviz.pipeline import SyncOptions

    out = []
    plan = modes_to_run(workers, backup)
    for k, (label, mode, r) in enumerate(plan, start=1):
        say(f"[{k}/{len(plan)}] {label} ...")
        sync = SyncOptions(replicas_to_aggregate=r, total_replicas=workers) if r is not None else None
        report = verify.run(model_spec, dataclasses.replace(options, sync=sync), workers=workers, steps=steps, mode=mode, slow_workers=slow_workers, trace=trace, loss=loss,
                            say=lambda m, label=label: say(f"{label}: {m}") if m.startswith("note:") else None,
                            **verify_options)
        say(f"[{k}/{len(plan)}] {label}: {report.summary_line()}")
        out.append(ModeRun(label=label, mode=mode, replicas_to_aggregate=r, report=report))
    return out


def document(model_spec: str, runs: list[ModeRun], *, workers: int, steps: int, backup: int,
             slow_workers: dict[int, float]) -> dict:
    from placeviz.verify.metrics import mode_summary

    rows = []
    for r in runs:
        m = mode_summary(r.report)
        rows.append({"label": r.label, **m, "checks": {c.id: c.status for c in r.report.checks}})
    return {"schema": SCHEMA, "model": model_spec, "workers": workers, "steps": steps, "backup_workers": backup,
            "slow_workers": {str(i): s for i, s in sorted(slow_workers.items())}, "runs": rows,
            "relations": relations(rows, slow_workers), "ok": all(r.report.ok for r in runs)}


def relations(rows: list[dict], slow: dict[int, float]) -> list[dict]:
    """What the runs show against each other, each with the numbers it rests on.

    ``guaranteed`` marks the relations TF's machinery guarantees (tested); the others are what this
    run measured (timings), stated with their numbers and never asserted."""
    by_mode = {r["mode"]: r for r in rows if r["mode"] in ("async", "barrier")}
    syncs = [r for r in rows if r["mode"] == "sync"]
    out = []
    straggler = max(slow, key=lambda i: slow[i]) if slow else None
    delay = slow[straggler] if straggler is not None else 0.0
    b = by_mode.get("barrier")
    if b and b.get("gradients"):
        once = all(sorted(s["averaged"]) == list(range(b["workers"])) for s in b["gradients"]["per_step"])
        out.append({"id": "barrier_one_gradient_per_worker", "guaranteed": True, "holds": once,
                    "text": f"barrier: each of {b['global_steps']} steps averaged exactly one gradient of each of "
                            f"the {b['workers']} workers" if once else
                            "barrier: a step did not average exactly one gradient of every worker"})
    if b and b.get("s_per_step") is not None and straggler is not None:
        a = by_mode.get("async")
        fast = _fast_step(a, straggler) if a else None
        pace = (f"; 1 / ({delay:g} s + a fast worker's async step {fast:.3f} s) = {1 / (delay + fast):.2f} steps/s"
                if fast else "")
        out.append({"id": "barrier_straggler_pace", "guaranteed": True, "holds": b["s_per_step"] >= delay,
                    "text": f"barrier runs at the straggler's pace: {b['s_per_step']:.3f} s per step "
                            f"({b['steps_per_s']} steps/s), never faster than worker {straggler}'s {delay:g} s delay"
                            f"{pace}"})
    a = by_mode.get("async")
    if a and a.get("staleness"):
        st = a["staleness"]
        per = st.get("per_worker") or {}
        text = f"async: the updates were stale by {st['mean']} on average, at most {st['max']}"
        holds = (st["max"] or 0) > 0
        if straggler is not None and str(straggler) in per:
            others = [v["mean"] for w, v in per.items() if w != str(straggler)]
            text += (f"; the slowed worker {straggler}'s updates by {per[str(straggler)]['mean']} (the others "
                     f"{', '.join(f'{x:g}' for x in others)}): its gradients were computed from parameters that "
                     f"{per[str(straggler)]['mean']:g} updates had already changed")
        out.append({"id": "async_stale", "guaranteed": False, "holds": holds, "text": text})
    for s in syncs:
        g = s.get("gradients")
        if not g:
            continue
        r = s["replicas_to_aggregate"]
        at_least = all(len(x["averaged"]) >= r for x in g["per_step"])
        out.append({"id": f"sync_r{r}_at_least_r", "guaranteed": True, "holds": at_least,
                    "text": f"{s['label']}: every step averaged at least R={r} gradients"})
        if straggler is not None:
            mine = g["per_worker"].get(str(straggler), {})
            twice = g["steps_with_a_worker_twice"]
            text = (f"{s['label']}: worker {straggler} (slowed) gave {mine.get('averaged', 0)} of the "
                    f"{sum(v['averaged'] for v in g['per_worker'].values())} averaged gradients "
                    f"(share {mine.get('share')}), {mine.get('dropped', 0)} of its gradients were dropped as late")
            if twice:
                text += (f"; in step(s) {', '.join(map(str, twice[:8]))}{' ...' if len(twice) > 8 else ''} a fast "
                         "worker's second gradient took its place (the token queue is first come, first served)")
            text += f"; {s['steps_per_s']} steps/s"
            out.append({"id": f"sync_r{r}_straggler", "guaranteed": False, "holds": True, "text": text})
    return out


def _fast_step(async_row: dict, straggler: int) -> float | None:
    """The mean run time of the fastest other worker in the async run."""
    times = [t for w, t in (async_row.get("mean_run_s") or {}).items() if w != str(straggler) and t]
    return min(times) if times else None


def format_text(doc: dict) -> str:
    from rich.table import Table

    def render(console) -> None:
        slow = ", ".join(f"worker {i} +{s:g} s" for i, s in doc["slow_workers"].items()) or "none"
        console.print(f"placeviz compare-modes {doc['model']}: W={doc['workers']} workers, K={doc['steps']} steps, "
                      f"slowed: {slow}")
        t = Table(show_lines=False)
        for col in ("mode", "steps/s", "s/step", "token wait s (per worker)", "staleness mean/max",
                    "averaged by worker", "dropped", "loss", "checks"):
            t.add_column(col, overflow="fold")
        for r in doc["runs"]:
            g = r.get("gradients")
            st = r.get("staleness")
            waits = r.get("token_wait_s")
            failed = r["failed_checks"]
            t.add_row(
                r["label"], _num(r["steps_per_s"]), _num(r["s_per_step"]),
                " ".join(f"{v:.2f}" for v in waits.values()) if waits else "-",
                f"{st['mean']:g} / {st['max']}" if st else "-",
                " ".join(str(v["averaged"]) for v in g["per_worker"].values()) if g else
                "own updates: " + " ".join(str(v) for v in r["runs_per_worker"].values()),
                str(g["dropped"]) if g else "-", _num(r["loss"]),
                "FAILED: " + ", ".join(failed) if failed else "pass")
        console.print(t)
        for rel in doc["relations"]:
            mark = "" if rel["holds"] else "NOT: "
            console.print(f"- {mark}{rel['text']}")

    return render_rich(render, width=150)


def _num(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def main(model_spec, *, place: dict, workers: int, steps: int, backup: int, slow_workers: tuple[str, ...], timeout,
         feeds_file, seed, loss, allow_io: bool, isolation: bool, trace_file, timeline_file, fmt: str, output,
         tag, pretty: bool = False) -> None:
    """The CLI command: exit 0 when every run's checks pass, 1 otherwise (2: bad input)."""
    import importlib.util

    from placeviz.commands.options import build_options
    from placeviz.commands.verify import TF_MISSING, write_timeline
    from placeviz.io import note_input
    from placeviz.verify.modes import parse_slow_workers
    from placeviz.verify.runner import signal_exits
    from placeviz.verify.timeline import check_picture_path

    if importlib.util.find_spec("tensorflow") is None:
        raise PlacevizError(TF_MISSING)
    slow = parse_slow_workers(slow_workers, workers)
    modes_to_run(workers, backup)
    if timeline_file:
        check_picture_path(timeline_file)
    if feeds_file:
        note_input(feeds_file, "--feeds")
    with signal_exits():
        runs = run(model_spec, build_options(place, tag=tag), workers=workers, steps=steps, backup=backup,
                   slow_workers=slow, loss=loss, trace=bool(trace_file), timeout=timeout, feeds_file=feeds_file,
                   seed=seed, allow_io=allow_io, isolation=isolation)
    doc = document(model_spec, runs, workers=workers, steps=steps, backup=backup, slow_workers=slow)
    write_timeline([(r.label, r.report) for r in runs], trace_file, timeline_file)
    emit(to_json(doc, pretty=pretty) if fmt == "json" else format_text(doc), output)
    raise SystemExit(0 if doc["ok"] else 1)
