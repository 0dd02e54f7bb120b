"""Build the real-program corpus (``tests/realworld/programs``) with TensorFlow, and compare.

Every program is built in its own subprocess, as a TF1 user runs it under TF 2.x
(``tf.compat.v1.disable_v2_behavior()`` first: ref variables, TF1 control flow, graph mode), once
per variant (placed by its own device functions or not, plain or SyncReplicas, chief or not).
The subprocess writes one MetaGraphDef per variant and ``manifest.json`` (the module's
``SOURCE``/``SETTER``/``SYNC``/... constants) into the program's directory.

The comparisons (:func:`setter_diff`, :func:`rewrite_diff`, :func:`placed_diff`) return the
differing nodes, so the tests can print per-program agreement for the closing notes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).parent
PROGRAMS_DIR = HERE / "programs"


def program_names() -> list[str]:
    """Every ported program (module names; ``_``-prefixed modules are shared helpers)."""
    return sorted(p.stem for p in PROGRAMS_DIR.glob("*.py") if not p.stem.startswith("_"))


BUILD_SCRIPT = r"""
import importlib, json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()
here, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:0] = [here]

# Which ops did the program build inside its `with tf.device(replica_device_setter(...))` block?
# TF calls the device function once per op created there: record the calls.
from tensorflow.python.training import device_setter
called = []
_real_setter = device_setter.replica_device_setter
def _recording_setter(*args, **kwargs):
    fn = _real_setter(*args, **kwargs)
    if fn is None:
        return None
    def device_function(op):
        called.append(op.name)
        return fn(op)
    return device_function
device_setter.replica_device_setter = _recording_setter
tf.compat.v1.train.replica_device_setter = _recording_setter

mod = importlib.import_module("programs." + name)
scope_ends = {}
sync_opts = getattr(mod, "SYNC", None)
chief_only = getattr(mod, "CHIEF_ONLY", False)
variants = []
for placed in (False, True):
    for sync in ((False, True) if sync_opts else (False,)):
        for chief in ((True, False) if chief_only else (True,)):
            del called[:]
            meta = mod.build(placed=placed, sync=sync, is_chief=chief)
            key = "%s-%s-%s" % ("placed" if placed else "unplaced", "sync" if sync else "plain",
                                "chief" if chief else "worker")
            if placed and called:
                names = [n.name for n in meta.graph_def.node]
                inside = set(called)
                last = max(k for k, n in enumerate(names) if n in inside)
                if last + 1 < len(names):
                    scope_ends[key] = names[last + 1]
            with open(os.path.join(out, key + ".meta"), "wb") as f:
                f.write(meta.SerializeToString())
            variants.append(key)
setter = getattr(mod, "SETTER", None)
manifest = {
    "source": mod.SOURCE, "setter": setter, "sync": sync_opts, "chief_only": chief_only,
    "gpus_per_worker": getattr(mod, "GPUS_PER_WORKER", 0),
    "soft_placement": getattr(mod, "SOFT_PLACEMENT", False), "variants": variants,
    "scope_ends": scope_ends,
    "sync_program_changes": getattr(mod, "SYNC_PROGRAM_CHANGES", None),
}
with open(os.path.join(out, "manifest.json"), "w") as f:
    json.dump(manifest, f)
"""


@dataclass
class Program:
    name: str
    dir: Path
    manifest: dict

    def meta(self, placed: bool, sync: bool = False, chief: bool = True):
        from placeviz.protos import MetaGraphDef

        key = f"{'placed' if placed else 'unplaced'}-{'sync' if sync else 'plain'}-{'chief' if chief else 'worker'}"
        return MetaGraphDef.FromString((self.dir / f"{key}.meta").read_bytes())

    def graph(self, placed: bool, sync: bool = False, chief: bool = True):
        from placeviz.io import model_from_proto

        return model_from_proto("tf", f"{self.name}", self.meta(placed, sync, chief)).graph

    @property
    def variants(self) -> list[tuple[bool, bool, bool]]:
        out = []
        for key in self.manifest["variants"]:
            placed, sync, chief = key.split("-")
            out.append((placed == "placed", sync == "sync", chief == "chief"))
        return out


def build(name: str, out: Path) -> Program:
    out.mkdir(parents=True, exist_ok=True)
    # PYTHONHASHSEED: a program that iterates over a set (slim's summaries) builds the same graph twice
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0")
    proc = subprocess.run([sys.executable, "-c", BUILD_SCRIPT, str(HERE), name, str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"building {name} failed:\n{proc.stderr[-4000:]}")
    return Program(name, out, json.loads((out / "manifest.json").read_text()))


_BUILT: dict[str, Program | Exception] = {}


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Program | Exception]:
    """Every program built once per test process (the test modules import this fixture)."""
    pytest.importorskip("tensorflow")
    return built_once(program_names(), lambda: tmp_path_factory.mktemp("realworld"))


def program(built: dict, name: str) -> Program:
    """``name``'s build, or the test fails with the build's error."""
    result = built[name]
    if isinstance(result, Exception):
        pytest.fail(str(result))
    return result


def built_once(names: Iterable[str], root_factory) -> dict[str, Program | Exception]:
    """:func:`build_all` once per test process (the test modules share the builds);
    ``root_factory()`` gives the directory when something is still to build."""
    todo = [n for n in names if n not in _BUILT]
    if todo:
        _BUILT.update(build_all(todo, root_factory()))
    return _BUILT


def build_all(names: Iterable[str], root: Path, jobs: int = 2) -> dict[str, Program | Exception]:
    names = list(names)

    def one(name):
        try:
            return build(name, root / name)
        except Exception as e:  # noqa: BLE001 - reported by the test of that program
            return e

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


# ----------------------------------------------------------------------------------------- setter
def setter_config(setter: dict, scope_end: str | None = None):
    """placeviz's SetterConfig for the program's ``replica_device_setter(**setter)`` call.

    ``scope_end``: the first node built after the program's ``with tf.device(setter)`` block, as
    the user passes it with ``--setter-scope-end`` (the build recorded TF's device-function calls).
    """
    from placeviz.devices import ClusterSpec
    from placeviz.placement.setter import SetterConfig

    known = {"ps_tasks", "ps_device", "worker_device", "merge_devices", "cluster", "ps_ops", "ps_strategy"}
    unknown = set(setter) - known
    if unknown:
        raise ValueError(f"unknown replica_device_setter arguments {sorted(unknown)}")
    kwargs = {}
    for key in ("ps_tasks", "ps_device", "worker_device", "merge_devices"):
        if key in setter:
            kwargs[key] = setter[key]
    if setter.get("cluster") is not None:
        kwargs["cluster"] = ClusterSpec.from_dict(setter["cluster"])
    if setter.get("ps_ops") is not None:
        kwargs["ps_ops"] = frozenset(setter["ps_ops"])
    if setter.get("ps_strategy"):
        kwargs["strategy"] = setter["ps_strategy"]
    return SetterConfig(scope_end=scope_end, **kwargs)


def setter_cli_args(program: Program, key: str) -> list[str]:
    """The PLACE options a user passes for the program's ``replica_device_setter(**SETTER)`` call.

    ``key``: the variant whose recorded scope end is passed (``--setter-scope-end``). A ``cluster``
    is written next to the program's graphs as ``cluster.json``.
    """
    setter = program.manifest["setter"]
    args: list[str] = []
    if "ps_tasks" in setter:
        args += ["--ps-tasks", str(setter["ps_tasks"])]
    for name in ("ps_device", "worker_device"):
        if setter.get(name):
            args += [f"--{name.replace('_', '-')}", setter[name]]
    if setter.get("merge_devices") is False:
        args.append("--no-merge-devices")
    if setter.get("cluster") is not None:
        path = program.dir / "cluster.json"
        path.write_text(json.dumps(setter["cluster"]))
        args += ["--cluster", str(path)]
    if setter.get("ps_ops") is not None:
        args += ["--ps-ops", ",".join(setter["ps_ops"])]
    if setter.get("ps_strategy"):
        args += ["--strategy", setter["ps_strategy"]]
    end = program.manifest.get("scope_ends", {}).get(key)
    if end:
        args += ["--setter-scope-end", end]
    if program.manifest["soft_placement"]:
        args.append("--soft-placement")
    return args


def setter_diff(program: Program, sync: bool, chief: bool) -> tuple[int, list, list]:
    """(nodes compared, [(name, ours, TF's)], the same for the differences placeviz announces).

    Announced: the ops of a sharded Saver, which TF builds per variable device and the replay does
    not rebuild; counted only when the replay's notes say so.
    """
    from placeviz.placement.setter import run_setter, sharded_savers

    key = f"placed-{'sync' if sync else 'plain'}-{'chief' if chief else 'worker'}"
    config = setter_config(program.manifest["setter"], program.manifest.get("scope_ends", {}).get(key))
    result = run_setter(program.graph(False, sync, chief), config)
    ours = dict(zip(result.graph.names, result.graph.devices, strict=True))
    placed = program.graph(True, sync, chief)
    theirs = dict(zip(placed.names, placed.devices, strict=True))
    wrong = [(n, ours.get(n, "<missing>"), theirs[n]) for n in theirs if ours.get(n) != theirs[n]]
    wrong += [(n, ours[n], "<not in TF>") for n in ours if n not in theirs]
    announced = tuple(sharded_savers(program.graph(False, sync, chief))) if any(
        "sharded Saver" in note for note in result.notes) else ()
    known = [w for w in wrong if announced and w[0].startswith(announced)]
    return len(theirs), [w for w in wrong if w not in known], known


# ----------------------------------------------------------------------------------- sync rewrite
def sync_kwargs(sync: dict) -> dict:
    return {"replicas_to_aggregate": sync["replicas_to_aggregate"],
            "total_replicas": sync.get("total_replicas"),
            "variable_averages": bool(sync.get("variable_averages")),
            "name": sync.get("name", "sync_replicas"),
            "num_tokens": sync.get("num_tokens", -1)}


def rewrite_diff(program: Program, placed: bool, chief: bool = True) -> tuple[int, list, list]:
    """(TF nodes, [(name, what differs)], the same for the program's own sync-mode changes).

    ``rewrite_sync`` of the plain build vs TF's sync build. A program may build more than the
    optimizer differently in sync mode (mnist_replica hands its Supervisor the optimizer's
    ``local_step_init_op``, so the Supervisor's default local-init group is never built); a module
    names those nodes in ``SYNC_PROGRAM_CHANGES = {"names": [...], "why": "..."}`` and they are
    counted apart.
    """
    from placeviz.sync.rewrite import rewrite_sync

    sync = program.manifest["sync"]
    # rewrite_sync(is_chief=False) leaves out get_init_tokens_op, which most programs call on the
    # chief only (through the SyncReplicas hook); SYNC says when a program calls it everywhere.
    builds_init_tokens = chief or bool(sync.get("init_tokens_on_every_task"))
    res = rewrite_sync(program.meta(placed, False, chief), is_chief=builds_init_tokens, **sync_kwargs(sync))
    theirs = {n.name: n for n in program.meta(placed, True, chief).graph_def.node}
    ours = {n.name: n for n in res.graph_def.node}
    diffs = []
    for name in sorted(set(ours) | set(theirs)):
        a, b = ours.get(name), theirs.get(name)
        if a is None:
            diffs.append((name, "only in TF"))
        elif b is None:
            diffs.append((name, "only in ours"))
        else:
            what = [field for field, x, y in (("op", a.op, b.op), ("inputs", list(a.input), list(b.input)),
                                              ("device", a.device, b.device),
                                              ("attrs", dict(a.attr), dict(b.attr))) if x != y]
            if what:
                detail = {f: ((a.device, b.device) if f == "device" else (a.op, b.op) if f == "op" else
                              (list(a.input), list(b.input)) if f == "inputs" else
                              sorted(k for k in set(a.attr) | set(b.attr) if a.attr.get(k) != b.attr.get(k)))
                          for f in what}
                diffs.append((name, detail))
    names = len(res.graph_def.node) == len(set(ours))
    if not names:
        diffs.append(("<duplicate names>", len(res.graph_def.node) - len(set(ours))))
    changes = set((program.manifest.get("sync_program_changes") or {}).get("names", ()))
    return len(theirs), [d for d in diffs if d[0] not in changes], [d for d in diffs if d[0] in changes]


# ------------------------------------------------------------------------------------- runtime
def cluster_of(graph) -> dict[str, int]:
    """The smallest cluster that holds every job/task the placed graph names (at least one worker)."""
    from placeviz.devices import parse_full_name

    jobs: dict[str, int] = {"worker": 1}
    for device in set(graph.devices):
        spec = parse_full_name(device) if device else None
        if spec is None or spec.job is None:
            continue
        jobs[spec.job] = max(jobs.get(spec.job, 0), (spec.task or 0) + 1)
    return jobs
