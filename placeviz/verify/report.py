"""The verify report: ``placeviz.verify/1`` JSON and the text form (no TF here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from placeviz.escape import terminal_text

SCHEMA = "placeviz.verify/1"
MARK = {"pass": "PASS", "fail": "FAIL", "skip": "skip", "warn": "WARN"}


@dataclass
class VerifyReport:
    model: str
    plan: dict
    checks: list
    result: dict = field(default_factory=dict)
    raw_seconds: float = 0.0
    proof_single_update: bool | None = None

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def check(self, check_id: str):
        return next((c for c in self.checks if c.id == check_id), None)

    def timings(self) -> dict:
        t = dict(self.result.get("timings") or {})
        t["wall_s"] = self.raw_seconds
        return t

    def summary_line(self) -> str:
        counts = {s: sum(c.status == s for c in self.checks) for s in ("pass", "fail", "warn", "skip")}
        verdict = "every check passed" if self.ok else "FAILED"
        return (f"verify: {verdict}: {counts['pass']} passed, {counts['fail']} failed, {counts['warn']} warnings, "
                f"{counts['skip']} skipped ({self.raw_seconds:.1f} s)")

    def warnings(self) -> list[str]:
        """What the report says before anything else: a run without isolation (``--no-isolation``)."""
        p = self.plan
        if p.get("isolation", True) or p.get("existing_cluster"):
            return []
        check = self.check("isolation")
        return [f"WARNING: {check.summary if check is not None else 'NOT ISOLATED (--no-isolation)'}"]

    def to_json(self) -> dict:
        p = self.plan
        failure = self.result.get("failure") if self.result else None
        return {
            "schema": SCHEMA,
            "warnings": self.warnings(),
            "model": self.model,
            "ok": self.ok,
            "run": {
                "cluster": self.result.get("cluster_spec") or p["cluster"], "workers": p["workers"],
                "steps": p["steps"], "replicas_to_aggregate": p["replicas_to_aggregate"],
                "tokens_per_step": p["tokens_per_step"], "isolate": p["isolate"], "mode": p.get("mode", "sync"),
                "slow_workers": p.get("slow_workers") or {}, "loss": p.get("loss"),
                "existing_cluster": p["existing_cluster"], "isolation": p.get("isolation", True),
                "allow_io": p.get("allow_io", False), "train_ops": p["train_ops"], "sync_op": p["sync_op"],
                "chief_queue_runner": p["queue_runner"], "init_tokens_ops": p["init_tokens_ops"],
                "feeds": p["feeds"], "seed": p["seed"], "tf_version": self.result.get("tf_version"),
                "per_worker": [{"task": w["task"], "graph": w["source"], "train_ops": w["train_ops"],
                                "queue_runners": [q["queue"] for q in w["queue_runners"]],
                                "chief_only_ops_left_out": w["dropped"]} for w in p.get("per_worker", [])],
                "chief_only_variables": p.get("chief_only", []),
            },
            "static_proof_single_update": self.proof_single_update,
            "checks": [c.to_json() for c in self.checks],
            "failure": failure,
            "timings": self.timings(),
            "network": self.result.get("network"),
            "processes": self.result.get("pids"),
            "notes": p.get("notes", []),
            "modes": self.mode_summary(),
        }

    def mode_summary(self) -> dict:
        """Steps/s, token waits, staleness, gradients per step and worker (:mod:`placeviz.verify.metrics`)."""
        from placeviz.verify.metrics import mode_summary

        return mode_summary(self)


def format_text(report: VerifyReport) -> str:
    p = report.plan
    cluster = report.result.get("cluster_spec") or p["cluster"]
    mode = p.get("mode", "sync")
    shape = (f"W={p['workers']} workers, K={p['steps']} runs in all, each applying its own update (async)"
             if mode == "async" else f"W={p['workers']} workers, K={p['steps']} steps, R={p['replicas_to_aggregate']}, "
             f"tokens/step={p['tokens_per_step']}{' (barrier)' if mode == 'barrier' else ''}")
    lines = [*report.warnings(), f"placeviz verify {report.model}",
             f"  cluster: {_cluster_text(cluster)}{' (one process per task)' if p['isolate'] else ''}; {shape}",
             f"  worker train op: {', '.join(p['train_ops'])}" + ("" if mode == "async" else
                                                                  f"; chief queue runner: {p['queue_runner'] or 'NONE'} "
                                                                  f"({p['sync_op']})")]
    for note in p.get("notes", []):
        lines.append(f"  note: {note}")
    lines.append("")
    for c in report.checks:
        lines.append(f"{MARK[c.status]:4}  {c.id:20} {c.summary}")
        lines.extend(_details(c))
    lines += _mode_lines(report)
    t = report.timings()
    parts = [f"{k.removesuffix('_s')} {v:.2f} s" for k, v in t.items() if isinstance(v, (int, float))]
    lines += ["", "timings: " + ", ".join(parts), "", report.summary_line()]
    return "\n".join(map(terminal_text, lines)) + "\n"  # names from the model stay one line each


def _cluster_text(cluster: dict) -> str:
    out = []
    for job, tasks in cluster.items():
        out.append(f"{job} x {len(tasks) if isinstance(tasks, list) else tasks}")
    return ", ".join(out)


def _details(c) -> list[str]:
    ev = c.evidence
    out = []
    if c.id == "single_update" and c.status == "fail":
        for u in ev.get("updates", []):
            if not u["ok"]:
                out.append(f"        {u['op']}: per sync run {u['per_sync_run']}, in worker runs {u['in_worker_runs']}")
        for op, n in sorted(ev.get("other_writes_in_worker_runs", {}).items()):
            out.append(f"        {op}: {n} executions in {ev['worker_runs']} worker runs")
    elif c.id == "gradients_per_step" and c.status == "pass":
        for row in ev.get("steps", [])[:10]:
            dropped = f", dropped {', '.join(row['dropped_late'])}" if row.get("dropped_late") else ""
            out.append(f"        step {row['step']}: averaged {', '.join(row['averaged'] or [])}{dropped}")
    elif c.id == "partitions":
        for key, got in ev.items():
            for side in ("only_placeviz", "only_runtime"):
                for kind in ("nodes", "transfers"):
                    items = (got.get(side) or {}).get(kind) or []
                    if items:
                        out.append(f"        {key}: {side.replace('_', ' ')} {kind}: {', '.join(items[:5])}")
    elif c.id == "run" and c.status == "fail":
        for w in ev.get("waiting", []):
            op = w.get("op") or w.get("note")
            out.append(f"        waiting: {w['who']} in {op}" + (f" for {w['for_s']} s" if "for_s" in w else ""))
        state = ev.get("state")
        if state:
            out.append(f"        state: {state}")
    return out


def _mode_lines(report: VerifyReport) -> list[str]:
    """The run in numbers: steps/s, token waits, staleness, each worker's averaged and dropped gradients."""
    if not report.result or report.result.get("failure") is not None:
        return []
    m = report.mode_summary()
    out = ["", f"run: {m['global_steps']} {'runs' if m['mode'] == 'async' else 'global steps'} in {m['wall_s']} s "
               f"({m['steps_per_s']} per s)"]
    if m.get("token_wait_s"):
        out.append("  token wait per worker (s): " + ", ".join(f"{w}: {s:.3f}" for w, s in m["token_wait_s"].items()))
    g = m.get("gradients")
    if g:
        out.append("  gradients per worker: " + ", ".join(f"worker {w}: {v['averaged']} averaged, {v['dropped']} dropped"
                                                           for w, v in g["per_worker"].items()))
    st = m.get("staleness")
    if m["mode"] == "async" and st:
        out.append(f"  staleness: mean {st['mean']}, max {st['max']}; per worker: "
                   + ", ".join(f"{w}: {v['mean']}" for w, v in (st.get("per_worker") or {}).items()))
    if m.get("loss") is not None:
        out.append(f"  loss ({m['loss_tensor']}) after the run: {m['loss']:.6g}")
    return out
