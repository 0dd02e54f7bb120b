"""The async values check's search (``placeviz/verify/async_values.py``) on recorded step stats.

Each case builds what a run records (update and read events with their windows) and the final
values a given true history produces through the same kernel models; the check must pass when that
history is one the windows allow (saying what it assumed), and fail when it is not. The cluster
runs that exercise it against TF itself are in ``tests/test_modes.py``
(``test_async_every_plain_sample_passes``, ``test_async_values_catch_a_planted_update``).
"""

from __future__ import annotations

import numpy as np
import pytest

from placeviz.verify.async_values import check_async_values, clusters
from placeviz.verify.optimizers import UPDATES
from placeviz.verify.staleness import Apply, applies

PS0, PS1 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"
RNG = np.random.default_rng(7)


def _adam_plan(use_locking=True):
    return {"updates": [{"op": "upd", "variable": "w", "kind": "adam", "use_locking": use_locking, "attrs": {},
                         "fetch": {"lr": "lr", "beta1": "b1c", "beta2": "b2c", "epsilon": "eps", "grad": "g"},
                         "state": {"var": "w", "m": "w/m", "v": "w/v", "beta1_power": "p1", "beta2_power": "p2"}}],
            "reads": {"p1": ["p1/read"], "p2": ["p2/read"], "w": ["w/read"]},
            "powers": {"p1": ["adv1"], "p2": ["adv2"]}}


class _History:
    """Runs of one Adam variable ``w`` (on ``device``) with powers on PS1: the events a run records,
    and the final values the true history (order and powers seen per update) gives."""

    def __init__(self, device):
        self.device, self.events, self.runs = device, [], []
        self.arrays = {"initial/w": RNG.normal(size=(3, 4)), "initial/w/m": np.zeros((3, 4)),
                       "initial/w/v": np.zeros((3, 4)), "initial/p1": np.float64(0.9),
                       "initial/p2": np.float64(0.999)}

    def run(self, worker, run, read, update, advance, seen=None):
        """One run: reads the powers at ``read``, updates w in the window ``update``, advances the
        powers in the window ``advance``; ``seen`` = (k1, k2), the advances its update truly saw."""
        who = f"worker:{worker}"
        for name, dev in (("p1/read", PS1), ("p2/read", PS1), ("w/read", self.device)):
            self.events.append([who, run, dev, name, "Identity", read, 1])
        self.events.append([who, run, self.device, "upd", "ApplyAdam", update[0], update[1] - update[0]])
        for name in ("adv1", "adv2"):
            self.events.append([who, run, PS1, name, "Assign", advance[0], advance[1] - advance[0]])
        grad = RNG.normal(size=(3, 4))
        self.arrays.update({f"w{worker}/r{run}/{k}": v for k, v in
                            (("lr", 0.1), ("b1c", 0.9), ("b2c", 0.999), ("eps", 1e-8), ("g", grad))})
        self.runs.append((worker, run, seen))

    def finish(self, order):
        """The finals when the updates ran in ``order`` (indices into the runs)."""
        state = {"var": self.arrays["initial/w"], "m": self.arrays["initial/w/m"], "v": self.arrays["initial/w/v"]}
        for i in order:
            worker, run, (k1, k2) = self.runs[i]
            inputs = {k: np.float64(self.arrays[f"w{worker}/r{run}/{t}"]) if t != "g"
                      else self.arrays[f"w{worker}/r{run}/g"]
                      for k, t in (("lr", "lr"), ("beta1", "b1c"), ("beta2", "b2c"), ("epsilon", "eps"),
                                   ("grad", "g"))}
            local = state | {"beta1_power": 0.9 * 0.9 ** k1, "beta2_power": 0.999 * 0.999 ** k2}
            UPDATES["adam"](local, inputs, {})
            state = {r: local[r] for r in ("var", "m", "v")}
        n = len(self.runs)
        self.arrays.update({"final/w": state["var"], "final/w/m": state["m"], "final/w/v": state["v"],
                            "final/p1": np.float64(0.9 * 0.9 ** n), "final/p2": np.float64(0.999 * 0.999 ** n)})

    def check(self, plan=None):
        plan = plan or _adam_plan()
        result = {"events": self.events}
        return check_async_values(plan, result, self.arrays, applies(plan, result))


def _two_runs(device, seen_second, advance_first=(40.0, 60.0)):
    """Run 0 of worker 1 updates at [10, 12] and advances in ``advance_first``; run 0 of worker 0
    reads at 5 and updates at [50, 55]: whether it saw the first advance is what the windows pin."""
    h = _History(device)
    h.run(1, 0, read=0.0, update=(10.0, 12.0), advance=advance_first, seen=(0, 0))
    h.run(0, 0, read=5.0, update=(50.0, 55.0), advance=(70.0, 71.0), seen=seen_second)
    h.finish([0, 1])
    return h


def test_an_advance_straddling_the_update_may_or_may_not_have_landed():
    """Same device as the powers: the update reads them inside its own window [50, 55]; an advance
    in [40, 60] (started before: the estimate counts it) may have landed after, for each power on
    its own. TF's run saw beta2's advance and not beta1's: the check finds it and says so."""
    c = _two_runs(PS1, seen_second=(0, 1)).check()
    assert c.status == "pass", c.summary
    assert "worker 0 run 0 saw beta1_power after 0 advance(s), not 1" in c.summary
    assert all(r.get("assumed") for r in c.evidence["variables"] if r["variable"].startswith("w"))


def test_the_estimate_is_taken_when_it_matches():
    c = _two_runs(PS1, seen_second=(1, 1)).check()
    assert c.status == "pass" and "assumed" not in str(c.evidence["variables"]), c.summary
    assert c.evidence["alternatives_replayed"] == 0


def test_a_remote_update_sees_the_power_the_send_serialized_before_the_update():
    """On another device than the powers the value is the one sent, somewhere between the read (5)
    and the update (50): an advance in [20, 21] may have landed. The estimate (read time) says 0."""
    c = _two_runs(PS0, seen_second=(1, 1), advance_first=(20.0, 21.0)).check()
    assert c.status == "pass", c.summary
    assert "worker 0 run 0 saw beta1_power after 1 advance(s), not 0" in c.summary


@pytest.mark.parametrize("device", [PS0, PS1])
def test_an_advance_the_windows_rule_out_still_fails(device):
    """The first advance ended (12-13) before the second run's read (15): every window says it
    landed, so a final made as if it had not is a real difference."""
    h = _History(device)
    h.run(1, 0, read=0.0, update=(10.0, 11.0), advance=(12.0, 13.0), seen=(0, 0))
    h.run(0, 0, read=15.0, update=(50.0, 55.0), advance=(70.0, 71.0), seen=(0, 0))
    h.finish([0, 1])
    c = h.check()
    assert c.status == "fail", c.summary
    assert c.summary.startswith("1 of 5 variables differ from the replay of 6 updates in ps order: w:")


def test_overlapping_updates_in_either_order():
    """Windows [10, 30] and [20, 40] overlap: TF may have applied the later-started first (locked:
    whoever takes the mutex). Adam's updates do not commute, so only the swapped order matches."""
    h = _History(PS0)
    h.run(0, 0, read=0.0, update=(10.0, 30.0), advance=(100.0, 101.0), seen=(0, 0))
    h.run(1, 0, read=1.0, update=(20.0, 40.0), advance=(102.0, 103.0), seen=(0, 0))
    h.finish([1, 0])
    c = h.check()
    assert c.status == "pass", c.summary
    assert "overlapping updates applied as worker 1 run 0 < worker 0 run 0" in c.summary


def test_disjoint_updates_keep_their_order():
    """The same swap with windows that do not overlap is not allowed: fail (locked), and an unlocked
    update that did not overlap anything gets no benefit of the doubt either."""
    for locking in (True, False):
        h = _History(PS0)
        h.run(0, 0, read=0.0, update=(10.0, 15.0), advance=(100.0, 101.0), seen=(0, 0))
        h.run(1, 0, read=1.0, update=(20.0, 40.0), advance=(102.0, 103.0), seen=(0, 0))
        h.finish([1, 0])
        c = h.check(_adam_plan(use_locking=locking))
        assert c.status == "fail", c.summary


def test_clusters_group_overlapping_windows_transitively():
    rows = [Apply("v", "u", 0, i, s, e, PS0, None) for i, (s, e) in
            enumerate([(0, 10), (5, 6), (8, 20), (25, 30), (31, 32), (31.5, 40)])]
    assert clusters(rows) == [[0, 1, 2], [3], [4, 5]]
