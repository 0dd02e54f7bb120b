"""Static proof that SyncReplicasOptimizer updates each variable once per global step, not once per worker.

What runs when a session runs op ``t`` is ``t``'s reverse closure over data and control edges
(TF prunes the graph to it). So the proof computes, with **one reverse breadth-first search per
run target** (never one per variable), which state writes each side runs:

* the **worker side**: the train op(s) every worker runs each step (``Assign(local_step,
  dequeue)`` and what depends on it, see :mod:`placeviz.sync.detect`);
* the **chief side**: the sync op the chief's queue runner runs in a loop (the token
  ``EnqueueMany``, or the variable-averages op after it).

The single-update property holds when:

1. the worker side writes no trainable variable and not the global step, and runs no
   TakeGradient and no enqueue of a token queue (it only *applies* gradients to accumulators);
2. each chief run writes every trainable variable that has an accumulator exactly once (and no
   trainable variable twice), outside any while loop, and increments the global step exactly once;
3. the token enqueue depends on the increment and on every update (tokens, hence the workers'
   next steps, come only after the step's update);
4. there is one token queue (two SyncReplicasOptimizers mean two updates and two increments per
   step).

One run of the sync op takes each accumulator's average once (TakeGradient blocks until R
gradients arrived and resets the count), so one run = one update per variable = one global step.

Writes of *non-trainable* variables (and lookup tables) on the worker side, e.g. batch-norm
moving averages (``UPDATE_OPS``) or streaming metrics, are legitimate per-worker updates: they are
listed in ``per_worker_updates`` with how often they run (``runs``: "once per worker run", or "per
iteration, trip count unknown" inside a while loop; ``runs_per_global_step``: tokens per step, i.e.
one worker run per token handed out, None inside a loop), and never fail the proof.

Each path in the evidence lists node names from the run target down to the op in question, each
node an input (data or control) of the previous one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from placeviz.graph import Graph
from placeviz.op_kinds import (
    ACCUMULATOR_SET_STEP_OPS,
    ACCUMULATOR_TAKE_OPS,
    DEQUEUE_OPS,
    ENQUEUE_OPS,
)
from placeviz.sync.detect import SyncMachinery, is_optimizer_apply, state_of
from placeviz.sync.reach import Reach

SCHEMA = "placeviz.sync_proof/1"
ONCE = "once per worker run"
PER_ITERATION = "per iteration, trip count unknown"


# ----------------------------------------------------------------------------- while-loop frames


def loop_frames(g: Graph) -> list[str | None] | None:
    """The innermost TF1 while-loop frame name of every node (None: not in a loop), or None if the
    graph has no loops: a view of :attr:`Graph.control_flow` (``BuildControlFlowInfo``,
    ``tensorflow/core/graph/control_flow.cc``, written once in :mod:`placeviz.control_flow`)."""
    info = g.control_flow
    return info.node_frame_names if info.has_loops else None


# ----------------------------------------------------------------------------- result


@dataclass
class SyncProof:
    """The verdict of :func:`prove`; :meth:`to_json` is the ``sync`` section's shape."""

    single_update: bool
    variables: list[dict]
    violations: list[dict]
    per_worker_updates: list[dict]
    chief_updates: list[dict]
    warnings: list[str]
    worker_train_ops: list[str]
    sync_ops: list[str]
    replicas_to_aggregate: int | None
    tokens_per_step: int | None
    total_replicas: int | None
    total_replicas_exact: bool | None
    backup_workers: int | None
    stats: dict = field(default_factory=dict)

    def violations_of(self, kind: str) -> list[dict]:
        return [v for v in self.violations if v["kind"] == kind]

    def variable(self, name: str) -> dict | None:
        return next((v for v in self.variables if v["name"] == name), None)

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "single_update": self.single_update,
            "replicas_to_aggregate": self.replicas_to_aggregate,
            "total_replicas": self.total_replicas,
            "total_replicas_exact": self.total_replicas_exact,
            "backup_workers": self.backup_workers,
            "tokens_per_step": self.tokens_per_step,
            "worker_train_ops": list(self.worker_train_ops),
            "sync_ops": list(self.sync_ops),
            "variables": self.variables,
            "violations": self.violations,
            "per_worker_updates": self.per_worker_updates,
            "chief_updates": self.chief_updates,
            "warnings": list(self.warnings),
            "stats": dict(self.stats),
        }


def _hint(name: str, kind: str) -> str | None:
    """A guess, from the name only, of what a non-trainable state is (for readers, not logic)."""
    if kind == "table":
        return "lookup table"
    low = name.lower()
    if "moving_mean" in low or "moving_variance" in low or "moving_var" in low:
        return "batch-norm moving average"
    if "exponentialmovingaverage" in low:
        return "EMA shadow variable"
    if low.endswith(("/total", "/count")) or "metric" in low:
        return "streaming metric"
    if low.endswith(("_power", "/beta1_power", "/beta2_power")):
        return "optimizer state"
    return None


# ----------------------------------------------------------------------------- the proof


def prove(graph: Graph, machinery: SyncMachinery, trainable: Iterable[str] | None = None) -> SyncProof:
    """Prove (or refute, naming the cause) that each variable is updated once per global step.

    ``trainable``: names of the trainable variables (variable op names; e.g. the
    ``trainable_variables`` collection). Default: the variables the accumulators feed plus every
    variable written on input 0 of an optimizer ``*Apply*`` op.

    The proof goes side by side (:class:`_Prover`): what the workers' train op runs, what the
    chief's sync op runs, then a verdict per global step and per trainable variable.
    """
    p = _Prover(graph, machinery)
    p.find_trainable(trainable)
    p.worker_side()
    p.chief_side()
    return p.result(p.global_step_verdicts(), p.variable_verdicts(), p.other_chief_updates())


class _Prover:
    """The state one :func:`prove` builds, side by side (one method per side and per verdict)."""

    def __init__(self, graph: Graph, machinery: SyncMachinery):
        g = self.g = graph
        self.names, self.ops, self.devices = g.names, g.ops, g.devices
        # The index detection built (its result hands it on), unless the machinery is not g's.
        self.idx = state_of(g, machinery)
        self.m = m = machinery
        self.queues = queues = m.token_queues
        self.violations: list[dict] = []
        self.warnings: list[str] = list(m.notes)
        self.local_steps = {ls for q in queues for ls in q.local_steps}
        self.assigns = {a for q in queues for a in q.local_step_assigns}
        self.token_queues = {q.queue for q in queues}
        self.global_steps = {q.global_step for q in queues if q.global_step is not None}
        if m.global_step is not None:
            self.global_steps.add(m.global_step)
        self.owner = {u: a.node for a in m.accumulators for u in (*a.applies, *a.takes)}
        self.accum_of: dict[int, list] = {}
        for a in m.accumulators:
            if a.variable is not None:
                self.accum_of.setdefault(a.variable, []).append(a)
        self.frames = loop_frames(g)

    def violation(self, kind: str, message: str, **extra: Any) -> None:
        self.violations.append({"kind": kind, "message": message, **extra})

    def find_trainable(self, trainable: Iterable[str] | None) -> None:
        """The trainable variables: given, else the accumulators' variables and what optimizer applies
        write on input 0; never the global or local steps."""
        g, idx = self.g, self.idx
        if trainable is not None:
            tv: list[int] = []
            for name in trainable:
                i = g.id_of(name.split(":", 1)[0])
                if i is None or i not in idx.kind:
                    self.warnings.append(f"trainable variable {name!r} is not a variable of the graph")
                    continue
                tv.append(i)
            self.trainable_source = "given"
        else:
            tv = list(self.accum_of)
            for w, writes in idx.writes.items():
                if is_optimizer_apply(self.ops[w]):
                    tv.extend(s for s, pos in writes if pos == 0 and idx.kind.get(s) == "variable")
            self.trainable_source = "accumulators+optimizer applies"
        self.tv = [v for v in dict.fromkeys(tv) if v not in self.global_steps and v not in self.local_steps]
        self.trainable_set = set(self.tv)

    def worker_side(self) -> None:
        """What the workers' train op runs (the reverse closure of the ops assigning a dequeued token
        to a local step): no take, no token enqueue, no write of the global step or of a trainable
        variable; every other write is listed with how often it runs per global step."""
        g, names, ops, devices, idx, queues = self.g, self.names, self.ops, self.devices, self.idx, self.queues
        violation, frames = self.violation, self.frames
        if len(queues) > 1:
            violation(
                "multiple_token_queues",
                f"{len(queues)} token queues (one per SyncReplicasOptimizer): each has its own sync op "
                "that takes the gradients, updates its variables and increments the global step, so a "
                "worker step waits for several tokens and the global step advances once per queue",
                queues=[names[q.queue] for q in queues],
            )
        self.worker_targets = list(dict.fromkeys(t for q in queues for t in q.worker_train_ops))
        if not self.worker_targets:
            violation("no_worker_train_op", "no op assigns a dequeued token to a local step: the workers' "
                      "train op cannot be found")
        W = self.W = Reach(g, self.worker_targets)
        self.worker_writes: dict[int, list[int]] = {}
        self.per_worker: list[dict] = []
        for u in W.order:
            op = ops[u]
            if op in ACCUMULATOR_TAKE_OPS:
                violation("worker_takes_gradient",
                          f"the worker train op runs {names[u]} ({op}): workers would take the aggregated "
                          "gradient themselves", op=names[u], path=W.path(names, u))
            elif op in ENQUEUE_OPS:
                q_in = g.in_src[g.in_start[u]] if g.in_start[u] < g.in_start[u + 1] else -1
                if q_in in self.token_queues or any(s in self.token_queues for s in _trace_any(g, q_in)):
                    violation("worker_enqueues_tokens",
                              f"the worker train op runs {names[u]}, an enqueue on token queue "
                              f"{names[q_in]}: workers would hand out tokens", op=names[u],
                              path=W.path(names, u))
            elif op in ACCUMULATOR_SET_STEP_OPS:
                self.warnings.append(f"the worker train op runs {names[u]} ({op}), which resets the "
                                     "accumulator's global step every worker run (stale gradients would be "
                                     "accepted)")
            for s, _pos in idx.writes.get(u, ()):
                if s in self.local_steps and u in self.assigns:
                    continue
                self.worker_writes.setdefault(s, []).append(u)
                if s in self.global_steps:
                    violation("worker_increments_global_step",
                              f"the worker train op writes the global step {names[s]} with {names[u]} "
                              f"({op}): every worker run would advance the step",
                              variable=names[s], op=names[u], path=W.path(names, u))
                elif s in self.trainable_set:
                    violation("worker_updates_trainable",
                              f"trainable variable {names[s]} is also updated from the worker side by "
                              f"{names[u]} ({op}): once per worker run, on top of the chief's aggregated "
                              "update", variable=names[s], op=names[u], path=W.path(names, u))
                else:
                    in_loop = (u, s) in idx.loop_writes
                    frame = frames[u] if frames is not None else None
                    looped = in_loop or frame is not None
                    self.per_worker.append({
                        "variable": names[s],
                        "kind": idx.kind[s],
                        "op": names[u],
                        "op_type": op,
                        "device": devices[u],
                        "variable_device": devices[s],
                        "runs": PER_ITERATION if looped else ONCE,
                        "loop_frame": frame if frame is not None else ("function body while loop" if in_loop else None),
                        "runs_per_global_step": None if looped else self.m.tokens_per_step,
                        "hint": "local step" if s in self.local_steps else _hint(names[s], idx.kind[s]),
                        "path": W.path(names, u),
                    })

    def chief_side(self) -> None:
        """What each token queue's sync op runs (the chief queue runner's op) and what its token
        enqueue waits for: every write, and how often each accumulator's gradient is taken."""
        g, names, ops, idx = self.g, self.names, self.ops, self.idx
        self.chief_writes: dict[int, list[tuple[int, int]]] = {}  # state -> [(writer, queue index)]
        self.sync_ops: list[str] = []
        self.chief_reaches: list[Reach | None] = []
        self.enqueue_reaches: list[Reach | None] = []
        takes_per_accum: dict[int, int] = {}
        for qi, q in enumerate(self.queues):
            if q.sync_op is None:
                self.violation("no_sync_op",
                               f"token queue {names[q.queue]} has no enqueue after an update and no single "
                               "update op: nothing the chief runs takes the gradients and hands out tokens",
                               queue=names[q.queue])
                self.chief_reaches.append(None)
                self.enqueue_reaches.append(None)
                continue
            self.sync_ops.append(names[q.sync_op])
            C = Reach(g, [q.sync_op])
            if q.sync_enqueue is None:
                self.violation("enqueue_not_after_increment",
                               f"no enqueue of token queue {names[q.queue]} depends on the update "
                               f"{names[q.sync_op]}: tokens do not wait for the step's update (and the "
                               "init-tokens enqueue cannot be told from the sync enqueue)", queue=names[q.queue],
                               variable=names[q.global_step] if q.global_step is not None else None)
                E = Reach(g, [])
            else:
                E = C if q.sync_op == q.sync_enqueue else Reach(g, [q.sync_enqueue])
            self.chief_reaches.append(C)
            self.enqueue_reaches.append(E)
            for u in C.order:
                op = ops[u]
                if op in ACCUMULATOR_TAKE_OPS:
                    acc = self.owner.get(u)
                    if acc is not None:
                        takes_per_accum[acc] = takes_per_accum.get(acc, 0) + 1
                elif op in DEQUEUE_OPS and _queue_of(g, u) in self.token_queues:
                    self.warnings.append(f"the sync op {names[q.sync_op]} runs the token dequeue {names[u]}: "
                                         "the chief queue runner would wait for its own tokens")
                for s, _pos in idx.writes.get(u, ()):
                    self.chief_writes.setdefault(s, []).append((u, qi))
        for acc, n in takes_per_accum.items():
            if n > 1:
                self.warnings.append(f"one chief run takes accumulator {names[acc]}'s gradient {n} times "
                                     f"(it would need {n}*R gradients per step)")

    def global_step_verdicts(self) -> list[dict]:
        """Each global step: incremented exactly once per sync op run, before the token enqueue,
        outside any while loop, and never by the workers."""
        names, ops, devices, frames, queues = self.names, self.ops, self.devices, self.frames, self.queues
        violation = self.violation
        entries = []
        for gs in sorted(self.global_steps):
            incs = self.chief_writes.get(gs, [])
            ev: list[dict] = []
            bad = False
            for u, qi in incs:
                C, E = self.chief_reaches[qi], self.enqueue_reaches[qi]
                assert C is not None and E is not None  # chief_writes holds queues with a sync op only
                ev.append({"side": "chief", "claim": f"the sync op increments {names[gs]} with {names[u]} "
                           f"({ops[u]})", "op": names[u], "path": C.path(names, u)})
                enq = queues[qi].sync_enqueue
                if enq is None:
                    bad = True
                elif u in E:
                    ev.append({"side": "chief", "claim": f"the token enqueue {names[enq]} depends on the "
                               "increment: tokens carry the new step", "op": names[u], "path": E.path(names, u)})
                else:
                    bad = True
                    violation("enqueue_not_after_increment",
                              f"the token enqueue {names[enq]} does not depend on the global-step increment "
                              f"{names[u]}: workers may start the next step before the step advances",
                              variable=names[gs], op=names[u])
                if frames is not None and frames[u] is not None:
                    bad = True
                    violation("chief_update_in_loop", f"the global-step increment {names[u]} is inside while "
                              f"loop frame {frames[u]!r}: it runs once per iteration", variable=names[gs],
                              op=names[u])
            if len(incs) != 1 and any(r is not None for r in self.chief_reaches):
                bad = True
                violation("global_step_increments",
                          f"the chief side increments the global step {names[gs]} {len(incs)} times per "
                          "step (expected exactly once)", variable=names[gs], ops=[names[u] for u, _ in incs])
            if names[gs] in {v.get("variable") for v in self.violations
                             if v["kind"] == "worker_increments_global_step"}:
                bad = True
                for u in self.worker_writes.get(gs, []):
                    ev.append({"side": "worker", "claim": f"the worker train op writes {names[gs]} with "
                               f"{names[u]} ({ops[u]})", "op": names[u], "path": self.W.path(names, u)})
            elif self.worker_targets:
                ev.append({"side": "worker", "claim": f"the worker train op never writes {names[gs]}", "path": []})
            entries.append({
                "name": names[gs], "role": "global_step", "device": devices[gs],
                "verdict": "violated" if bad else "holds",
                "updates_per_step": len(incs), "worker_updates": len(self.worker_writes.get(gs, [])),
                "evidence": ev,
            })
        return entries

    def variable_verdicts(self) -> list[dict]:
        """Each trainable variable: never written by the workers (they only feed its accumulator),
        updated exactly once per sync op run, on the aggregated gradient, before the tokens."""
        names, ops, devices, frames, queues, W = self.names, self.ops, self.devices, self.frames, self.queues, self.W
        violation = self.violation
        entries = []
        for v in self.tv:
            ev = []
            bad = False
            accs = self.accum_of.get(v, [])
            w_hits = self.worker_writes.get(v, [])
            c_hits = self.chief_writes.get(v, [])
            for u in w_hits:
                bad = True
                ev.append({"side": "worker", "claim": f"the worker train op also writes {names[v]} with "
                           f"{names[u]} ({ops[u]})", "op": names[u], "path": W.path(names, u)})
            if not w_hits and self.worker_targets:
                applied = [ap for a in accs for ap in a.applies if ap in W]
                if applied:
                    ap = applied[0]
                    ev.append({"side": "worker", "claim": f"the worker train op only applies its gradient to "
                               f"accumulator {names[self.owner.get(ap, ap)]} ({ops[ap]}) and never writes "
                               f"{names[v]}", "op": names[ap], "path": W.path(names, ap)})
                else:
                    ev.append({"side": "worker", "claim": f"the worker train op never writes {names[v]}",
                               "path": []})
                    if accs:
                        self.warnings.append(f"the worker train op does not feed accumulator "
                                             f"{names[accs[0].node]} of {names[v]}: its TakeGradient would block")
            fed = {u for a in accs for u in a.updates}
            for u, qi in c_hits:
                C, E = self.chief_reaches[qi], self.enqueue_reaches[qi]
                assert C is not None and E is not None  # chief_writes holds queues with a sync op only
                src = ""
                if u in fed:
                    a = next(a for a in accs if u in a.updates)
                    r = a.num_required[0] if a.num_required else None
                    src = (f" on the average of R={r} gradients taken from {names[a.node]}"
                           if r is not None else f" on the gradient taken from {names[a.node]}")
                sync_op = cast(int, queues[qi].sync_op)  # chief_writes holds queues with a sync op only
                ev.append({"side": "chief", "claim": f"the sync op {names[sync_op]} updates "
                           f"{names[v]} with {names[u]} ({ops[u]}){src}, once per run", "op": names[u],
                           "path": C.path(names, u)})
                enq = queues[qi].sync_enqueue
                if u not in E:
                    bad = True
                    where = "any token enqueue" if enq is None else f"the token enqueue {names[enq]}"
                    violation("update_after_tokens",
                              f"the update {names[u]} of {names[v]} is not ordered before {where}: workers may "
                              f"read {names[v]} before it is updated", variable=names[v], op=names[u])
                if frames is not None and frames[u] is not None:
                    bad = True
                    violation("chief_update_in_loop", f"the update {names[u]} of {names[v]} is inside while "
                              f"loop frame {frames[u]!r}: it runs once per iteration",
                              variable=names[v], op=names[u])
                if u not in fed and accs:
                    self.warnings.append(f"{names[u]} updates {names[v]} on the chief side without the "
                                         "aggregated gradient")
            if len(c_hits) > 1:
                bad = True
                violation("multiple_chief_updates",
                          f"{names[v]} is updated {len(c_hits)} times per global step on the chief side: "
                          + ", ".join(f"{names[u]} ({ops[u]})" for u, _ in c_hits),
                          variable=names[v], ops=[names[u] for u, _ in c_hits])
            if not c_hits and accs and any(r is not None for r in self.chief_reaches):
                bad = True
                violation("no_chief_update",
                          f"{names[v]} has accumulator {names[accs[0].node]} but the sync op never updates it",
                          variable=names[v])
            reached = set(w_hits) | {u for u, _ in c_hits}
            others = [names[u] for u in self.idx.writers.get(v, []) if u not in reached]
            entries.append({
                "name": names[v], "role": "trainable", "device": devices[v],
                "verdict": "violated" if bad else "holds",
                "accumulators": [names[a.node] for a in accs],
                "updates_per_step": len(c_hits),
                "worker_updates": len(w_hits),
                "evidence": ev,
                "unreached_writers": others[:10],
                "unreached_writer_count": len(others),
            })
        return entries

    def other_chief_updates(self) -> list[dict]:
        """The chief side's other writes (slots, EMA shadows, counters), with a hint of what they are."""
        names, ops, idx = self.names, self.ops, self.idx
        trainable_names = {names[v] for v in self.tv}
        out = []
        for s, hits in self.chief_writes.items():
            if s in self.trainable_set or s in self.global_steps:
                continue
            out.append({
                "variable": names[s], "kind": idx.kind[s], "ops": [names[u] for u, _ in hits],
                "writes_per_run": len(hits), "hint": _hint(names[s], idx.kind[s]) or (
                    "optimizer slot" if any(is_optimizer_apply(ops[u]) for u, _ in hits)
                    or _has_prefix(names[s], trainable_names) else None),
            })
        return sorted(out, key=lambda e: e["variable"])

    def result(self, gs_entries: list[dict], var_entries: list[dict], chief_updates: list[dict]) -> SyncProof:
        m = self.m
        unique_warnings = list(dict.fromkeys(self.warnings))
        return SyncProof(
            single_update=not self.violations,
            variables=gs_entries + var_entries,
            violations=self.violations,
            per_worker_updates=sorted(self.per_worker, key=lambda e: (e["variable"], e["op"])),
            chief_updates=chief_updates,
            warnings=unique_warnings,
            worker_train_ops=[self.names[t] for t in self.worker_targets],
            sync_ops=self.sync_ops,
            replicas_to_aggregate=m.replicas_to_aggregate,
            tokens_per_step=m.tokens_per_step,
            total_replicas=m.total_replicas,
            total_replicas_exact=(None if m.replicas_to_aggregate is None or m.tokens_per_step is None
                                  else m.tokens_per_step > m.replicas_to_aggregate),
            backup_workers=m.backup_workers,
            stats={"trainable_source": self.trainable_source, "trainable_variables": len(self.tv),
                   "worker_closure": len(self.W.order),
                   "chief_closure": sum(len(r.order) for r in self.chief_reaches if r is not None)},
        )


def _has_prefix(name: str, prefixes: set[str]) -> bool:
    parts = name.split("/")
    return any("/".join(parts[:k]) in prefixes for k in range(1, len(parts)))


def _trace_any(g: Graph, i: int) -> list[int]:
    """Queue ops whose handle ``i`` forwards (through Identity-like ops)."""
    if i < 0:
        return []
    seen = set()
    while i not in seen:
        seen.add(i)
        if g.ops[i] not in ("Identity", "RefIdentity", "Enter", "RefEnter"):
            return [i]
        lo = g.in_start[i]
        if lo == g.in_start[i + 1]:
            return []
        i = g.in_src[lo]
    return []


def _queue_of(g: Graph, u: int) -> int | None:
    lo = g.in_start[u]
    if lo == g.in_start[u + 1]:
        return None
    found = _trace_any(g, g.in_src[lo])
    return found[0] if found else None
