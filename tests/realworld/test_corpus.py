"""placeviz against TensorFlow on public programs this repository did not write.

Each program of ``tests/realworld/programs`` (ports of public TF1 trainers and of TF's own test
scenarios; the module docstrings name the sources) is built with TF's real API in every variant,
then placeviz must reproduce, node for node:

* setter stage: ``replica_device_setter`` replayed over the unplaced build gives every node of TF's
  placed build its ``NodeDef.device`` (programs that call ``replica_device_setter``);
* sync rewrite: the plain build rewritten into SyncReplicas form equals TF's SyncReplicas build in
  names (and their order), ops, inputs, attrs and devices, unplaced and placed;
* placed stage (slow): TF's placed build run on a local cluster; TF's placer's device for every
  node, and the partitions of every run (nodes per device, transfers);
* lint: no warning or error on the program's own export.

Every test prints ``<stage> <program> <variant>: agree X / Y`` (``pytest -s``) for the closing notes.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

import corpus  # noqa: E402

from placeviz.verify.runtime_truth import DEFAULT_BLOCKING_OPS  # noqa: E402

pytestmark = pytest.mark.tf
PROGRAMS = corpus.program_names()


from corpus import built  # noqa: E402, F401 - the session fixture, shared by the corpus tests
from corpus import program as _program  # noqa: E402


def _label(sync: bool, chief: bool) -> str:
    return f"{'sync' if sync else 'plain'}{'' if chief else '-worker'}"


@pytest.mark.parametrize("kernels", ["c", "python"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_setter_stage(built, name, kernels, monkeypatch):
    """With the C kernels and with the Python reference loops (``setter._kernels = None``)."""
    if kernels == "python":
        from placeviz.placement import setter

        monkeypatch.setattr(setter, "_kernels", None)
    program = _program(built, name)
    if not program.manifest["setter"]:
        pytest.skip("the program places with its own device functions, not replica_device_setter")
    problems = []
    for placed, sync, chief in program.variants:
        if not placed:
            continue
        total, wrong, known = corpus.setter_diff(program, sync, chief)
        print(f"setter[{kernels}] {name} {_label(sync, chief)}: agree {total - len(wrong) - len(known)} / {total}"
              + (f" ({len(known)} announced: sharded Saver)" if known else ""))
        if wrong:
            problems.append((_label(sync, chief), len(wrong), wrong[:8]))
    assert not problems, problems


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("placed", [False, True], ids=["unplaced", "placed"])
def test_sync_rewrite(built, name, placed):
    program = _program(built, name)
    if not program.manifest["sync"]:
        pytest.skip("the program does not use SyncReplicasOptimizer")
    if placed and not program.manifest["setter"]:
        pytest.skip("placed by the program's own device functions: the rewrite cannot know their devices")
    problems = []
    for chief in sorted({c for _, _, c in program.variants}, reverse=True):
        total, diffs, program_changes = corpus.rewrite_diff(program, placed, chief)
        label = f"{'placed' if placed else 'unplaced'}{'' if chief else '-worker'}"
        print(f"sync-rewrite {name} {label}: agree {total - len(diffs) - len(program_changes)} / {total}"
              + (f" ({len(program_changes)} built differently by the program in sync mode: "
                 f"{program.manifest['sync_program_changes']['why']})" if program_changes else ""))
        if diffs:
            problems.append((label, len(diffs), diffs[:8]))
    assert not problems, problems


@pytest.mark.parametrize("name", PROGRAMS)
def test_lint_is_quiet_on_correct_programs(built, name, capsys):
    from conftest import run_cli

    program = _program(built, name)
    findings, lines = [], []
    for placed, sync, chief in program.variants:
        if not placed:
            continue
        path = program.dir / f"placed-{'sync' if sync else 'plain'}-{'chief' if chief else 'worker'}.meta"
        args = ["lint", path, "--format", "json", "--fail-on", "warning"]
        if program.manifest["soft_placement"]:
            args.append("--soft-placement")
        code, out, err = run_cli(args, capsys)
        report = json.loads(out) if out.strip().startswith("{") else {"findings": [], "error": err}
        loud = [(f["rule"], f.get("message", "")[:160]) for f in report.get("findings", [])
                if f.get("severity") in ("warning", "error")]
        lines.append(f"lint {name} {_label(sync, chief)}: exit {code}, warnings/errors {len(loud)}")
        if code != 0 or loud:
            findings.append((path.name, code, loud[:6], err[-300:]))
    print("\n".join(lines))  # after the runs: run_cli reads (and drops) what was printed before
    assert not findings, findings


# ------------------------------------------------------------------------------- placed stage
def _init_ops(meta) -> list[str]:
    """What initializes the program's state before a step: every global and local variable's
    initializer (``VariableDef.initializer_name``) and the table initializers."""
    from placeviz.protos import VariableDef

    names = []
    for key in ("variables", "local_variables"):
        if key in meta.collection_def:
            for raw in meta.collection_def[key].bytes_list.value:
                names.append(VariableDef.FromString(raw).initializer_name.split(":")[0])
    if "table_initializer" in meta.collection_def:
        names += [v.split(":")[0] for v in meta.collection_def["table_initializer"].node_list.value]
    return list(dict.fromkeys(n for n in names if n))


# A run of every sink must not touch the file system (a Saver's save/restore, summary writers).
# Nor close a queue another sink enqueues into in the same run.
_SINK_BLOCKERS = DEFAULT_BLOCKING_OPS + ("SaveV2", "RestoreV2", "MergeV2Checkpoints", "Save", "Restore*",
                                         "*SummaryWriter*", "WriteFile", "QueueClose*")


@pytest.fixture(scope="session")
def truths(built) -> dict:
    """TF's runtime on every program's placed build (sync when it has one), two at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from placeviz.verify.runtime_truth import all_sinks, run_in_subprocess

    def one(name):
        program = built[name]
        if isinstance(program, Exception):
            return None
        sync = bool(program.manifest["sync"])
        meta = program.meta(True, sync)
        cluster = corpus.cluster_of(program.graph(True, sync))
        gd = meta.graph_def.SerializeToString()
        # Every unblocked sink, except in graphs with TF1 while loops: a sink inside a frame whose
        # entry is cut off by a blocked dequeue crashes TF's executor (seen with dynamic_rnn).
        looped = any(n.op in ("Enter", "RefEnter") for n in meta.graph_def.node)
        return run_in_subprocess(gd, cluster=cluster, init_ops=_init_ops(meta),
                                 targets=[] if looped else all_sinks(gd, blocking_ops=_SINK_BLOCKERS),
                                 allow_soft_placement=program.manifest["soft_placement"],
                                 timeout_s=240, run_timeout_s=30)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(PROGRAMS, pool.map(one, PROGRAMS), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
def test_placed_stage_and_partitions(built, truths, name):
    from test_partition_fidelity import compare_run

    from placeviz.devices import ClusterSpec
    from placeviz.placement import PlacementOptions, place_graph
    from placeviz.placement.placer import PlacerConfig

    program = _program(built, name)
    truth = truths[name]
    sync = bool(program.manifest["sync"])
    graph = program.graph(True, sync)
    cluster = corpus.cluster_of(graph)
    options = PlacementOptions(cluster=ClusterSpec.from_dict({job: [f"h{i}:1" for i in range(n)]
                                                              for job, n in cluster.items()}),
                               placer=PlacerConfig(allow_soft_placement=program.manifest["soft_placement"]))
    result = place_graph(graph, options)
    ours = dict(zip(result.graph.names, result.placement.devices, strict=True))
    theirs = truth.placer_devices
    assert theirs, truth.error
    wrong = [(n, ours.get(n), d) for n, d in theirs.items() if ours.get(n) != d]
    print(f"placed {name} {_label(sync, True)}: agree {len(theirs) - len(wrong)} / {len(theirs)}")
    problems = [("placer", len(wrong), wrong[:8])] if wrong else []
    counts = collections.Counter()
    for index, run in enumerate(truth.runs):
        got = compare_run(result.graph, result.placement.devices, truth, index, [])
        counts.update(nodes_ok=got["nodes"][0], nodes=got["nodes"][1], transfers_ok=got["transfers"][0],
                      transfers=got["transfers"][1])
        if got["node_wrong"] or any(got["transfer_diff"]) or not got["strict_ok"]:
            problems.append((run["kind"], got["node_wrong"][:5], got["transfer_diff"], got["strict_diff"]))
    print(f"partition {name}: {len(truth.runs)} runs, nodes {counts['nodes_ok']} / {counts['nodes']}, "
          f"transfers {counts['transfers_ok']} / {counts['transfers']}"
          f"{'' if truth.error is None else ' (TF: ' + str(truth.error)[:120] + ')'}")
    assert not problems, problems
