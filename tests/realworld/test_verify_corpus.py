"""``placeviz verify`` on the real-program corpus: each correct SyncReplicas program passes every check.

The programs of ``tests/realworld/programs`` are built with TF's real API (``corpus.py``); each
SyncReplicas program is then run on a local TF cluster by ``placeviz verify`` (3 global steps):

* ``tf-placed``: the chief's graph as TF placed it, alone, as a user passes the one file the chief
  wrote. The input queues start (``queue_runners`` collection), the chief runs the sync op as
  ``SyncReplicasHook`` does, and chief-only state (inception's loss averages) stays on the chief;
* ``placeviz-placed``: the unplaced build placed by placeviz's setter replay with the program's
  own ``replica_device_setter`` arguments as PLACE options; programs that build something only
  ``if is_chief`` pass every worker's own build with ``--worker-graph I=MODEL`` (between-graph
  replication).

Broken variants fail with their cause: a queue input nobody fills names the empty queue; a chief
that never starts its queue runner is named as such. Every run prints ``verify <program> <variant>:
<checks>`` (``pytest -s``) for the closing notes. Slow: about 5 s per run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

import corpus  # noqa: E402

pytestmark = [pytest.mark.tf, pytest.mark.slow]
PROGRAMS = corpus.program_names()
STEPS = 3


from corpus import built  # noqa: E402, F401 - the session fixture, shared by the corpus tests


def _sync_program(built, name) -> corpus.Program:
    program = corpus.program(built, name)
    if not program.manifest["sync"]:
        pytest.skip(f"{name} does not use SyncReplicasOptimizer")
    return program


def _verify(program: corpus.Program, label: str, args: list, capsys) -> tuple[int, dict, str]:
    from conftest import run_cli

    out = program.dir / f"verify-{label}.json"
    code, stdout, err = run_cli(["verify", *args, "--steps", STEPS, "--timeout", 120, "--format", "json", "-o", out],
                                capsys)
    report = json.loads(out.read_text()) if out.exists() else {}
    statuses = {c["id"]: c["status"] for c in report.get("checks", [])}
    print(f"verify {program.name} {label}: exit {code} {statuses}")
    return code, report, err


def _failures(report: dict) -> list[str]:
    return [f"{c['id']}: {c['summary'][:400]}" for c in report.get("checks", []) if c["status"] in ("fail", "warn")]


def _workers(program: corpus.Program) -> int:
    sync = program.manifest["sync"]
    return sync.get("total_replicas") or sync["replicas_to_aggregate"]


@pytest.mark.parametrize("name", PROGRAMS)
def test_tf_placed_chief_graph_passes(built, name, capsys):
    program = _sync_program(built, name)
    code, report, err = _verify(program, "tf-placed", [program.dir / "placed-sync-chief.meta"], capsys)
    assert code == 0, (_failures(report), err[-1500:])
    run = report["run"]
    assert run["workers"] == _workers(program)
    if any(w["queue_runners"] for w in run["per_worker"]):
        assert "input pipeline" in err
    if run["chief_only_variables"]:
        assert "chief-only variable" in err and run["per_worker"][1]["chief_only_ops_left_out"] > 0


@pytest.mark.parametrize("name", PROGRAMS)
def test_placeviz_placed_with_each_workers_graph_passes(built, name, capsys):
    program = _sync_program(built, name)
    if program.manifest["setter"] is None:
        pytest.skip(f"{name} places its ops with its own device functions")
    args = [program.dir / "unplaced-sync-chief.meta", *corpus.setter_cli_args(program, "placed-sync-chief")]
    if program.manifest["chief_only"]:
        ends = program.manifest.get("scope_ends", {})
        # The setter's scope ends at a node of the chief's graph; a worker graph whose block ends
        # elsewhere is passed as TF placed it (the file that worker's program wrote).
        same = ends.get("placed-sync-worker") == ends.get("placed-sync-chief")
        worker = program.dir / ("unplaced-sync-worker.meta" if same else "placed-sync-worker.meta")
        for i in range(1, _workers(program)):
            args += ["--worker-graph", f"{i}={worker}"]
    code, report, err = _verify(program, "placeviz-placed", args, capsys)
    assert code == 0, (_failures(report), err[-1500:])
    if program.manifest["chief_only"]:
        assert [w["graph"] for w in report["run"]["per_worker"][1:]] == [str(worker)] * (_workers(program) - 1)


def test_a_queue_input_nobody_fills_is_named(built, tmp_path, capsys):
    """slim's trainer without its queue_runners collection: the batch queue is empty on every worker."""
    from placeviz.protos import MetaGraphDef

    program = _sync_program(built, "slim_learning")
    meta = MetaGraphDef.FromString((program.dir / "placed-sync-chief.meta").read_bytes())
    del meta.collection_def["queue_runners"]
    broken = tmp_path / "no_input_runner.meta"
    broken.write_bytes(meta.SerializeToString())
    code, report, err = _verify(program, "no-input-runner", [broken, "--timeout", 60], capsys)
    run = {c["id"]: c for c in report["checks"]}["run"]
    assert code == 1 and run["status"] == "fail"
    assert "batch/fifo_queue holds 0" in run["summary"] and "no queue runner fills it" in run["summary"], run
    assert "the token queue holds 2" in run["summary"]  # tokens were there: the input queue is the cause
    skipped = {c["id"] for c in report["checks"] if c["status"] == "skip"}
    assert {"global_step", "gradients_per_step", "values", "stale_gradient"} <= skipped


def test_a_chief_that_never_starts_its_queue_runner_is_named(built, capsys):
    program = _sync_program(built, "tfsync_2workers")
    code, report, err = _verify(program, "no-chief-qr", [program.dir / "placed-sync-chief.meta",
                                                         "--chief-queue-runner", "none", "--timeout", 60], capsys)
    run = {c["id"]: c for c in report["checks"]}["run"]
    assert code == 1 and "No chief queue runner: nothing runs the sync op" in run["summary"], run
