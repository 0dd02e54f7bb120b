"""Asynchronous training's values: every variable against a replay of every run's update, in an
order the runtime's own step stats allow (no TF here).

Each worker run applies its update of a variable on the variable's ps task with the inputs it
fetched (:mod:`placeviz.verify.staleness` collects the updates, :mod:`placeviz.verify.optimizers`
models the kernels). Replaying them one by one from the initial values gives the final value TF
must end with, provided the replay applies them in TF's order and gives each the value it read.
The step stats give each kernel a window (its start and its ``all_end_rel_micros``), not an
instant, and two facts are only pinned where windows do not overlap:

* **the ps order.** Updates of one variable whose windows overlap (a *cluster*) ran in either
  order: with ``use_locking`` the kernel that takes the variable's mutex first goes first
  (tensorflow/core/kernels/training_ops.cc ``MaybeLockVariableInputMutexesInOrder``), which the
  windows do not show;
* **the Adam power a run saw.** ``AdamOptimizer`` advances ``beta1_power``/``beta2_power`` once per
  run, after its updates (adam.py ``_finish``), by an ``Assign`` that copies into the variable's
  buffer in place (tensorflow/core/kernels/assign_op.h, "Try to copy into an existing buffer").
  ``ApplyAdam`` gets the power through the variable's ``read`` identity, which shares that buffer:
  on the power's own device the kernel sees the value at the moment it runs (inside its window);
  on another device it sees the value the ``_Send`` serialized, at some moment between the read
  and the update (a ``RecvTensor`` encodes the tensor when the request meets the send, which can
  be long after the read). An advance whose window straddles that moment may or may not have
  landed, independently for the two powers (seen on a local cluster: one run's update used the
  advanced ``beta1_power`` and the old ``beta2_power``).

So the check replays the order the recorded start times give, with the power each estimate gives
(advances that started before the read); when that does not match, it searches the alternatives the
windows allow, fewest changes first, and passes with the first that matches, saying which. What
no ordering explains fails, except for unlocked updates that overlapped: their elements may have
interleaved (Hogwild-style), so a difference there is reported as ambiguous, never as a failure.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from placeviz.verify.checks import RTOL, SMALL, Check, _close, _replay_input
from placeviz.verify.optimizers import UPDATES
from placeviz.verify.staleness import (
    BETA_ROLES,
    DEVICE,
    DUR,
    NODE,
    START,
    WHO,
    Apply,
    overlaps,
    read_times,
    worker_index,
)

MAX_CHANGES = 4  # alternatives differ from the recorded estimate in at most this many choices
MAX_ORDERS = 720  # orders tried per cluster of overlapping updates (all of them up to 6 updates)
WORK_BUDGET = 5e7  # element-updates the search of one variable may replay, all alternatives together


class _BetaPowers:
    """Adam's beta powers: their timed advances, and the value each update may have seen."""

    ROLES = tuple(zip(BETA_ROLES, ("beta1", "beta2"), strict=True))

    def __init__(self, plan: dict, result: dict, arrays: dict):
        writers = {w: v for v, ws in (plan.get("powers") or {}).items() for w in ws}
        self.advances: dict[str, list[tuple[float, float]]] = {v: [] for v in plan.get("powers") or {}}
        for e in result.get("events", []):
            if e[NODE] in writers and worker_index(e[WHO]) is not None:
                self.advances[writers[e[NODE]]].append((e[START], e[START] + e[DUR]))
        read_of = {r: v for v, names in (plan.get("reads") or {}).items() if v in self.advances for r in names}
        self.device = {read_of[e[NODE]]: e[DEVICE] for e in result.get("events", []) if e[NODE] in read_of}
        self.reads = read_times(plan, result)
        self.arrays = arrays
        self.betas: dict[str, np.ndarray] = {}  # power variable -> the beta it is advanced by

    def unrecorded(self, u: dict) -> str | None:
        """Why update ``u`` cannot be replayed (a power it reads has no recorded advances), else None."""
        return next((f"{role} {v}: its advances were not recorded" for role in BETA_ROLES
                     if (v := u["state"].get(role)) is not None and v not in self.advances), None)

    def candidates(self, u: dict, a: Apply, inputs: dict) -> dict[str, list[tuple[int, np.ndarray]]] | str:
        """Per power role ``a`` reads: the (advances seen, value) it may have used, the estimate
        first (advances that started before the read), or why it is unknown."""
        out = {}
        for role, beta in self.ROLES:
            if role not in u["state"]:
                continue
            b = u["state"][role]
            if a.device == self.device.get(b):
                lo, hi = a.start, a.end  # read in place by the kernel itself
            elif (read := self.reads.get((f"worker:{a.worker}", a.run, b))) is not None:
                lo, hi = read, a.start  # serialized by the send, between the read and the update
            else:
                return f"{a.op} of worker {a.worker} run {a.run}: its read of {b} not recorded"
            times = self.advances[b]
            estimate = sum(1 for s, _e in times if s < lo)
            landed = sum(1 for _s, e in times if e <= lo)
            maybe = sum(1 for s, _e in times if s < hi)
            ks = [estimate] + [k for k in range(landed, maybe + 1) if k != estimate]
            initial = np.asarray(self.arrays[f"initial/{b}"], np.float64)
            out[role] = [(k, initial * inputs[beta] ** k) for k in ks]
        return out

    def record(self, u: dict, inputs: dict) -> None:
        self.betas.update({u["state"][role]: inputs[beta] for role, beta in self.ROLES if role in u["state"]})

    def finals(self) -> dict[str, np.ndarray]:
        """Each power after every run's advance."""
        return {b: np.asarray(self.arrays[f"initial/{b}"], np.float64) * beta ** len(self.advances[b])
                for b, beta in self.betas.items()}


@dataclass
class _Step:
    """One update to replay: the run's apply, its update op's plan, its inputs and the powers it may
    have seen (role -> candidates, the estimate first)."""

    apply: Apply
    update: dict
    inputs: dict
    powers: dict[str, list[tuple[int, np.ndarray]]] = field(default_factory=dict)

    def label(self) -> str:
        return f"worker {self.apply.worker} run {self.apply.run}"


def clusters(rows: list[Apply]) -> list[list[int]]:
    """The updates of one variable (ps order) grouped where their windows overlap, transitively:
    within a group any order is consistent with the step stats."""
    out: list[list[int]] = []
    end = float("-inf")
    for i, a in enumerate(rows):
        if out and a.start < end:
            out[-1].append(i)
            end = max(end, a.end)
        else:
            out.append([i])
            end = a.end
    return out


class _Search:
    """One variable's replay: the recorded estimate, then the alternatives the windows allow.

    A *choice* is either the order of one cluster (a permutation, the recorded one first) or the
    number of advances one update's power had seen (the estimate first). An alternative changes
    some choices away from their first option; alternatives are tried fewest changes first, each
    replayed from the first cluster it changes (the estimate's states before every cluster are
    kept)."""

    def __init__(self, steps: list[_Step], states: dict[str, np.ndarray], targets: dict[str, np.ndarray]):
        self.steps, self.targets = steps, targets
        self.groups = clusters([s.apply for s in steps])
        self.group_of = {i: g for g, members in enumerate(self.groups) for i in members}
        self.choices: list[tuple[int, str, list]] = []  # (group, what, options)
        for g, members in enumerate(self.groups):
            if len(members) > 1:
                orders = itertools.permutations(range(len(members)))  # the recorded one first
                self.choices.append((g, "order", list(itertools.islice(orders, MAX_ORDERS))))
        for i, s in enumerate(steps):
            for role, options in s.powers.items():
                if len(options) > 1:
                    self.choices.append((self.group_of[i], role, [(i, k) for k, _v in options]))
        size = sum(int(np.size(v)) for v in states.values()) or 1
        self.budget = max(len(steps) * 16, int(WORK_BUDGET / size))
        self.before = [states]  # states before each group, under the estimate
        self.tried = 0

    def _replay(self, groups: range, picked: dict[int, int], states: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Replay ``groups`` from ``states`` with ``picked`` (choice index -> option index; every
        other choice takes its first option)."""
        order = {self.choices[c][0]: self.choices[c][2][o] for c, o in picked.items() if self.choices[c][1] == "order"}
        powers = {(self.choices[c][2][o][0], self.choices[c][1]): o for c, o in picked.items()
                  if self.choices[c][1] != "order"}
        for g in groups:
            members = self.groups[g]
            for j in order.get(g, range(len(members))):
                i = members[j]
                s = self.steps[i]
                seen = {role: options[powers.get((i, role), 0)][1] for role, options in s.powers.items()}
                states = _apply(states, s, seen)
            self.tried += len(members)
        return states

    def _matches(self, states: dict[str, np.ndarray]) -> bool:
        return all(_close(states[s], final)[0] for s, final in self.targets.items())

    def run(self) -> tuple[dict[str, np.ndarray], str | None, int, bool]:
        """The states to report, what they assumed beyond the recorded estimate (None: nothing; ""
        when no alternative matched), how many alternatives were replayed, and whether the search
        stopped at its budget before trying them all."""
        states = self.before[0]
        for g in range(len(self.groups)):
            states = self._replay(range(g, g + 1), {}, states)
            self.before.append(states)
        estimate = states
        if self._matches(estimate) or not self.choices:
            return estimate, None, 0, False
        alternatives = 0
        for n in range(1, min(MAX_CHANGES, len(self.choices)) + 1):
            for changed in itertools.combinations(range(len(self.choices)), n):
                for options in itertools.product(*(range(1, len(self.choices[c][2])) for c in changed)):
                    if self.tried > self.budget:
                        return estimate, "", alternatives, True
                    picked = dict(zip(changed, options, strict=True))
                    start = min(self.choices[c][0] for c in changed)
                    alternatives += 1
                    got = self._replay(range(start, len(self.groups)), picked, self.before[start])
                    if self._matches(got):
                        return got, self._describe(picked), alternatives, False
        return estimate, "", alternatives, False

    def _describe(self, picked: dict[int, int]) -> str:
        parts = []
        for c, o in sorted(picked.items()):
            g, what, options = self.choices[c]
            if what == "order":
                runs = [self.steps[self.groups[g][j]].label() for j in options[o]]
                parts.append(f"overlapping updates applied as {' < '.join(runs)}")
            else:
                i, k = options[o]
                parts.append(f"{self.steps[i].label()} saw {what} after {k} advance(s), not "
                             f"{options[0][1]}")
        return "; ".join(parts)


def _apply(states: dict[str, np.ndarray], step: _Step, seen: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``states`` after ``step``'s update kernel, with the powers ``seen`` (a new dict)."""
    u = step.update
    local = {role: states[s] for role, s in u["state"].items() if role not in BETA_ROLES} | seen
    UPDATES[u["kind"]](local, step.inputs, u.get("attrs") or {})
    out = dict(states)
    for role, s in u["state"].items():
        if role not in BETA_ROLES:
            out[s] = np.asarray(local[role], np.float64)
    return out


def check_async_values(plan: dict, result: dict, arrays: dict, per_var: dict[str, list[Apply]]) -> Check:
    """Replay every run's update of every variable in an order its step stats allow, with the
    inputs that run fetched, and compare with the values TF ended with."""
    from placeviz.verify.plan import not_replayed_why

    title = "variables equal a numpy replay of every worker's update, in the order the ps applied them"
    if result.get("failure") is not None:
        return Check("values", title, "skip", "the run did not finish", {})
    ops = {u["op"]: u for u in plan["updates"]}
    skipped = {u["op"]: not_replayed_why(u) for u in plan["updates"] if u["kind"] is None}
    powers = _BetaPowers(plan, result, arrays)
    skipped.update({u["op"]: why for u in plan["updates"] if (why := powers.unrecorded(u))})
    steps: dict[str, list[_Step]] = {}
    missing: list[str] = []
    for v, rows in per_var.items():
        for a in rows:
            u = ops[a.op]
            if a.op in skipped:
                continue
            try:
                inputs = {role: _replay_input(arrays[f"w{a.worker}/r{a.run}/{t}"]) for role, t in u["fetch"].items()}
            except KeyError as e:
                missing.append(f"{a.op} of worker {a.worker} run {a.run}: {e.args[0]} not captured")
                continue
            seen = powers.candidates(u, a, inputs)
            if isinstance(seen, str):
                missing.append(seen)
                continue
            steps.setdefault(v, []).append(_Step(a, u, inputs, seen))
            powers.record(u, inputs)
    if missing:
        return Check("values", title, "skip", "; ".join(missing[:3]), {})
    finals = powers.finals()
    unlocked_overlap = {u["variable"] for u in plan["updates"] if not u.get("use_locking")
                        and overlaps([a for a in per_var.get(u["variable"], []) if a.op == u["op"]])}
    replayed: dict[str, int] = {v: len(s) for v, s in steps.items()}
    replayed.update({b: len(powers.advances[b]) for b in finals})
    owner = {s: u["variable"] for u in plan["updates"] for s in u["state"].values()} | {b: b for b in finals}
    checked = {s for u in plan["updates"] if u["op"] not in skipped for s in u["state"].values()
               if s in finals or s not in powers.advances}
    # An update whose runs were not recorded leaves its state as it was: compared as such.
    states = {s: np.array(arrays[f"initial/{s}"], np.float64) for u in plan["updates"] if u["op"] not in skipped
              for r, s in u["state"].items() if r not in BETA_ROLES and f"initial/{s}" in arrays} | finals
    assumed: dict[str, str] = {}  # variable -> the timing alternative its replay matched with
    searched, cut = 0, False
    for v, mine in steps.items():
        roles = {s for st in mine for r, s in st.update["state"].items() if r not in BETA_ROLES}
        start = {s: states[s] for s in roles if s in states}
        targets = {s: arrays[f"final/{s}"] for s in roles & checked if f"final/{s}" in arrays and s in start}
        if len(start) < len(roles):
            continue
        got, why, tried, stopped = _Search(mine, start, targets).run()
        states.update(got)
        searched, cut = searched + tried, cut or stopped
        if why:
            assumed[v] = why
    rows_out, bad, ambiguous = [], [], []
    for s in sorted(checked):
        final = arrays.get(f"final/{s}")
        if final is None or s not in states:
            continue
        ok, diff = _close(states[s], final)
        row = {"variable": s, "ok": ok, "max_abs_diff": diff, "updates": replayed.get(owner[s], 0)}
        if owner[s] in assumed:
            row["assumed"] = assumed[owner[s]]
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
    ev = {"variables": rows_out, "not_replayed": skipped, "rtol": RTOL, "alternatives_replayed": searched,
          "order": "the start of each update kernel on the variable's ps task; where windows overlap, "
                   "an order (and Adam power) they allow"}
    total = sum(replayed.values())
    if bad:
        nor = (f" (nor with any of the {searched} alternatives the overlapping step stats allow that were tried"
               + ("; the search stopped at its budget)" if cut else ")")) if searched else ""
        return Check("values", title, "fail", f"{len(bad)} of {len(rows_out)} variables differ from the replay of "
                     f"{total} updates in ps order: " + "; ".join(bad[:4]) + nor, ev)
    if not rows_out:
        return Check("values", title, "skip", "no update verify replays" +
                     (f" ({'; '.join(f'{k}: {w}' for k, w in list(skipped.items())[:2])})" if skipped else ""), ev)
    extra = (f"; {len(assumed)} variable(s) match with a timing their overlapping step stats allow, not the "
             f"estimate from start times (e.g. {next(iter(assumed))}: {next(iter(assumed.values()))})") if assumed else ""
    extra += (f"; {len(ambiguous)} variable(s) differ but had unlocked overlapping updates, whose order and result "
              f"TF does not pin (ambiguous, not a failure): {', '.join(ambiguous[:3])}") if ambiguous else ""
    status = "warn" if ambiguous else "pass"
    return Check("values", title, status, f"{len(rows_out) - len(ambiguous)} variables/slots match {total} updates "
                 f"replayed one by one in ps order, each with the inputs its own run fed it{extra}", ev)
