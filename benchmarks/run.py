#!/usr/bin/env python3
"""Time each placeviz stage on the generated graphs (see gen_graphs.py) and print a table.

Every graph runs in a fresh subprocess, so the peak RSS reported for it is that graph's alone.
Times are process CPU seconds (``time.process_time``), the median over the repetitions (fewer at
1M nodes); wall-clock medians are kept in the JSON results. Results go to
``benchmarks/results/<timestamp>.json``.

Stages live in the ``STAGES`` registry: a new stage is one function decorated with ``@stage``.
A stage whose module does not exist yet is reported as skipped; a stage that raises is reported
as an error (with the message) and the run goes on. Stages read what they need from a context
(``ctx.data``: the file's bytes; ``ctx.graph_def``: a parsed GraphDef; ``ctx.model``: a loaded
``placeviz.io.Model``); a value that no earlier stage produced is computed untimed on first use.

This script never imports TensorFlow (it checks ``sys.modules`` at the end of every run), and it
refuses to run on the pure-Python protobuf backend (150x slower parsing) unless told otherwise.

Examples:
  python benchmarks/run.py                                # 10k,50k,200k,1m placed graphs
  python benchmarks/run.py --sizes 10k,200k --reps 3
  python benchmarks/run.py --variant unplaced --stages parse,load,analyze
  python benchmarks/run.py benchmarks/graphs/g50k_sync.pb
  python benchmarks/run.py --list-stages
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GRAPHS = HERE / "graphs"
RESULTS = HERE / "results"
PS_TASKS = 4  # the generated graphs were placed with replica_device_setter(ps_tasks=4)
VARIANT_SUFFIX = {"placed": ".pb", "unplaced": ".unplaced.pb", "sync": "_sync.pb",
                  "sync-unplaced": "_sync.unplaced.pb"}


# ============================================================================ the stage registry
@dataclass(frozen=True)
class Stage:
    name: str
    label: str
    run: Callable[[Context], object]
    modules: tuple[str, ...] = ()  # skipped while any of these does not exist
    needs: tuple[str, ...] = ()  # context values it reads (kept alive until it has run)
    provides: str | None = None  # context value its result becomes
    setup: Callable[[Context], None] | None = None  # untimed, before every repetition
    doc: str = ""


STAGES: dict[str, Stage] = {}


def stage(name: str, label: str, *, modules=(), needs=(), provides=None, setup=None):
    """Register ``fn(ctx)`` as a timed stage; the registration order is the run order."""

    def register(fn):
        STAGES[name] = Stage(name, label, fn, tuple(modules), tuple(needs), provides, setup,
                             (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
        return fn

    return register


class Context:
    """What stages share within one graph's process. Missing values are computed untimed."""

    def __init__(self, path: Path):
        self.path = path
        self.data = path.read_bytes()
        self.values: dict[str, object] = {}

    def get(self, key: str):
        if key not in self.values:
            self.values[key] = PROVIDERS[key](self)
        return self.values[key]

    @property
    def graph_def(self):
        return self.get("graph_def")

    @property
    def model(self):
        return self.get("model")

    @property
    def graph(self):
        return self.model.graph


def _parse(ctx: Context):
    from placeviz.protos import GraphDef

    graph_def = GraphDef()
    graph_def.ParseFromString(ctx.data)
    return graph_def


def _load(ctx: Context):
    from placeviz.io import load

    return load(str(ctx.path))


PROVIDERS: dict[str, Callable[[Context], object]] = {"graph_def": _parse, "model": _load}


def _forget(obj, *attrs: str) -> None:
    """Drop cached properties of a non-graph object (the view context) so that the next access
    recomputes them; a graph's are dropped with ``Graph.clear_caches``/``reset_caches``."""
    for attr in attrs:
        obj.__dict__.pop(attr, None)


# ---------------------------------------------------------------------------- the stages
@stage("parse", "parse floor: GraphDef.ParseFromString (upb)", provides="graph_def")
def parse_stage(ctx: Context):
    """GraphDef().ParseFromString(bytes) with placeviz.protos.GraphDef: the floor."""
    return _parse(ctx)


@stage("ir_build", "IR build: Graph(graph_def)", modules=("placeviz.graph",), needs=("graph_def",))
def ir_build_stage(ctx: Context):
    """placeviz.graph.Graph(graph_def) on an already parsed GraphDef."""
    from placeviz.graph import Graph

    return Graph(ctx.graph_def)


@stage("load", "load: placeviz.io.load(path)", modules=("placeviz.io",), provides="model")
def load_stage(ctx: Context):
    """placeviz.io.load(path): read, parse, validate names, build the IR."""
    return _load(ctx)


@stage("consumers", "consumers (out-edge CSR)", modules=("placeviz.graph",), needs=("model",),
       setup=lambda ctx: ctx.graph.clear_caches("edge_arrays", "consumers", "topological_order"))
def consumers_stage(ctx: Context):
    """graph.consumers, from scratch."""
    return ctx.graph.consumers


def _topo_setup(ctx: Context) -> None:
    ctx.graph.clear_caches("topological_order")
    ctx.graph.consumers  # noqa: B018 - computed untimed: topo is timed on top of it


@stage("topo", "topological order (consumers cached)", modules=("placeviz.graph",), needs=("model",),
       setup=_topo_setup)
def topo_stage(ctx: Context):
    """graph.topological_order, with graph.consumers already computed."""
    return ctx.graph.topological_order


def _colocation_setup(ctx: Context) -> None:
    ctx.graph.clear_caches("colocation", "colocated_names")


@stage("colocation", "colocation (`_class` attrs, lazy)", modules=("placeviz.graph",), needs=("model",),
       setup=_colocation_setup)
def colocation_stage(ctx: Context):
    """graph.colocation and graph.colocated_names from scratch: one pass over the `_class` attrs.

    Read on first use (it used to be part of `load`); the setter, place and pipeline stages have
    it computed untimed, like the topological order.
    """
    return ctx.graph.colocation, ctx.graph.colocated_names


@stage("analyze", "analyze(model)", modules=("placeviz.analysis",), needs=("model",))
def analyze_stage(ctx: Context):
    """placeviz.analysis.analyze(model)."""
    from placeviz.analysis import analyze

    return analyze(ctx.model)


def _unplaced_path(path: Path) -> Path:
    """The generator's devices-cleared sibling (NAME.unplaced.pb) of NAME.pb, or the file itself."""
    if path.name.endswith(".unplaced.pb") or not path.name.endswith(".pb"):
        return path
    sibling = path.with_name(path.name.removesuffix(".pb") + ".unplaced.pb")
    return sibling if sibling.exists() else path


def _load_unplaced(ctx: Context):
    from placeviz.io import load

    return load(str(_unplaced_path(ctx.path)))


def _op_table(ctx: Context):
    from placeviz.ops import load_op_table

    return load_op_table()


def _unplaced_attr_keys(ctx: Context):
    from placeviz.placement.placer import read_fact_attrs

    return read_fact_attrs(ctx.get("unplaced_model").graph, ctx.get("op_table"))


def _attr_keys(ctx: Context):
    from placeviz.placement.placer import read_fact_attrs

    return read_fact_attrs(ctx.graph, ctx.get("op_table"))


PROVIDERS.update(unplaced_model=_load_unplaced, op_table=_op_table, unplaced_attr_keys=_unplaced_attr_keys,
                 attr_keys=_attr_keys)


def _setter_setup(ctx: Context) -> None:
    graph = ctx.get("unplaced_model").graph
    graph.colocation, graph.colocated_names  # noqa: B018 - see the colocation stage; computed untimed
    _drop_name_lookups(graph)


@stage("setter", "replica_device_setter replay (unplaced)", modules=("placeviz.placement.setter",),
       needs=("unplaced_model", "op_table", "unplaced_attr_keys"), setup=_setter_setup)
def setter_stage(ctx: Context):
    """placement.setter.run_setter(ps_tasks=4) on the NAME.unplaced.pb sibling (op table, attr keys preloaded).

    The attr keys are what ``placement.setter_stage`` hands the setter (``read_fact_attrs``)."""
    from placeviz.placement.setter import SetterConfig, run_setter

    config = SetterConfig(ps_tasks=PS_TASKS, worker_device="/job:worker/task:0")
    return run_setter(ctx.get("unplaced_model").graph, config, op_table=ctx.get("op_table"),
                      attr_keys=ctx.get("unplaced_attr_keys"))


def _device_set(ctx: Context):
    from placeviz.devices import DeviceSet

    cluster = {"ps": [f"localhost:{2300 + t}" for t in range(PS_TASKS)], "worker": ["localhost:2222"]}
    return DeviceSet(cluster)


def _place_setup(ctx: Context) -> None:
    # The placer reads them; computed untimed (colocation is timed in its own stage).
    ctx.graph.topological_order, ctx.graph.colocation, ctx.graph.colocated_names  # noqa: B018
    _drop_attr_keys(ctx.graph)
    _drop_name_lookups(ctx.graph)


def _drop_attr_keys(graph) -> None:
    """Put the op-fact attr keys back as ``io.load`` left them, so that every repetition pays what
    a command pays.

    ``read_fact_attrs`` has the graph read them (``Graph.attr_keys``); without this, only the
    first repetition of ``place`` and ``pipeline`` would pay for that pass over the NodeDefs. When
    ``io.load`` read a binary GraphDef with the C reader (``placeviz._wire``), the keys came with
    the load (and its time is in the ``load`` stage), so they stay (``Graph.reset_caches``).
    """
    graph.reset_caches("attr_keys")


PROVIDERS.update(device_set=_device_set)


@stage("place", "place: placer (colocation, assignment)", modules=("placeviz.placement.placer",),
       needs=("model", "op_table", "device_set"), setup=_place_setup)
def place_stage(ctx: Context):
    """placement.placer.place on the placed graph, 4 ps + 1 worker CPU devices (topo order cached)."""
    from placeviz.placement.placer import place

    return place(ctx.graph, ctx.get("device_set"), op_table=ctx.get("op_table"))


def _pipeline_setup(ctx: Context) -> None:
    _setter_setup(ctx)
    _drop_attr_keys(ctx.get("unplaced_model").graph)


def _drop_name_lookups(graph) -> None:
    """Forget the ids of the names ``_class`` attrs name (``Graph.located_names`` and
    ``colocated_name_ids``), cached on the graph by the first repetition: the setter and the
    placer look them up, so every repetition pays for that as a command does."""
    graph.clear_caches("located_names", "colocated_name_ids")


@stage("pipeline", "setter + placer: place_graph (unplaced)", modules=("placeviz.placement",),
       needs=("unplaced_model", "op_table"), setup=_pipeline_setup)
def pipeline_stage(ctx: Context):
    """placement.place_graph on the unplaced sibling with ps_tasks=4: the setter, then the placer
    on its result (including that graph's topological order); what `placeviz place` does."""
    from placeviz.placement import PlacementOptions, place_graph
    from placeviz.placement.setter import SetterConfig

    options = PlacementOptions(setter=SetterConfig(ps_tasks=PS_TASKS, worker_device="/job:worker/task:0"))
    return place_graph(ctx.get("unplaced_model").graph, options, op_table=ctx.get("op_table"))


# Later pipeline stages. They are skipped until their module exists; when it lands, check that the
# call below matches its final API (a mismatch shows up as "error" in the table, not as a crash).
def _placed_devices(ctx: Context):
    from placeviz.placement.placer import place

    return place(ctx.graph, ctx.get("device_set"), op_table=ctx.get("op_table")).devices


PROVIDERS.update(placed_devices=_placed_devices)


def _train_targets(ctx: Context, graph=None) -> list[str]:
    """The generator's train op(s) (its sidecar, NAME.json, also for NAME.unplaced.pb) present in the graph."""
    graph = graph if graph is not None else ctx.graph
    facts = graph_facts(ctx.path)
    names = facts.get("train_op") or facts.get("train_ops") or []
    names = [names] if isinstance(names, str) else list(names)
    return [n for n in names if n in graph.index]


@stage("partition", "prune + partition (one train step)", modules=("placeviz.partition",),
       needs=("model", "op_table", "device_set", "placed_devices", "attr_keys"))
def partition_stage(ctx: Context):
    """prune + partition of one training step (the sidecar's train op), device level, no NodeDefs;
    handed the op-fact attr keys as the pipeline hands the placer's (preloaded)."""
    from placeviz.partition import partition

    return partition(ctx.graph, ctx.get("placed_devices"), targets=_train_targets(ctx), level="device",
                     op_table=ctx.get("op_table"), attr_keys=ctx.get("attr_keys"))


@stage("e2e", "end to end: load + setter + placer + partition (unplaced)",
       modules=("placeviz.partition", "placeviz.placement"), needs=("op_table",))
def e2e_stage(ctx: Context):
    """load the NAME.unplaced.pb sibling, place_graph (ps_tasks=4: setter, then placer), prune +
    partition one train step by device: what `placeviz partition` computes before writing files.

    Run it alone (``--stages e2e``) for its peak RSS: the process peak is then this stage's.
    """
    from placeviz.io import load
    from placeviz.partition import partition
    from placeviz.placement import PlacementOptions, place_graph
    from placeviz.placement.setter import SetterConfig

    model = load(str(_unplaced_path(ctx.path)))
    options = PlacementOptions(setter=SetterConfig(ps_tasks=PS_TASKS, worker_device="/job:worker/task:0"))
    placed = place_graph(model.graph, options, op_table=ctx.get("op_table"))
    graph = placed.graph
    return partition(graph, placed.placement.devices, targets=_train_targets(ctx, graph), level="device",
                     client_device=options.placer.client_device, op_table=ctx.get("op_table"),
                     attr_keys=placed.placement.attr_keys)


def _lint_rules(ctx: Context):
    from placeviz.lint.discovery import load_rules

    return load_rules()


@stage("lint", "lint: pipeline + all built-in rules (model loaded)", modules=("placeviz.lint.runner",),
       needs=("model",))
def lint_stage(ctx: Context):
    """What ``placeviz lint MODEL`` runs after the load: the raw-graph tables, the pipeline (the
    placer on the graph's own devices) and every built-in rule (``lint_pipeline``); the rules are
    imported untimed. ``benchmarks/lint_profile.py`` splits it per rule."""
    from placeviz.lint.runner import LintOptions, lint_pipeline
    from placeviz.pipeline import run_pipeline

    options = LintOptions()
    ctx.model.graph.clear_caches("consumers")  # a shared index the rules build: counted here
    pipe = run_pipeline(ctx.model, options.pipeline)
    return lint_pipeline(pipe, ctx.get("lint_rules"), options)


PROVIDERS.update(lint_rules=_lint_rules)


def _render_context(ctx: Context):
    """The pipeline `placeviz render` runs (placer on the graph's own devices, one train step
    partitioned at task level, sync detection and proof), wrapped for the views; untimed."""
    from placeviz.pipeline import Options, StepOptions, run_pipeline
    from placeviz.placement import PlacementOptions
    from placeviz.render import ViewContext

    step = StepOptions(targets=tuple(_train_targets(ctx)))
    pipe = run_pipeline(ctx.model, Options(placement=PlacementOptions(), step=step))
    return ViewContext(pipe)


PROVIDERS.update(render_ctx=_render_context)


def _render_setup(ctx: Context) -> None:
    """Each repetition recomputes what the view context caches (bytes per device, edges across
    devices...): it is part of building a view in a fresh `placeviz render`."""
    _forget(ctx.get("render_ctx"), "device_list", "ops_per_device", "variable_bytes", "variables_per_device",
            "transfers", "cross_device_edges")
RENDER_BUDGET = 250  # placeviz render's default --max-nodes


def _render_view_stage(view: str):
    def run(ctx: Context):
        from placeviz.render import build_view, to_dot

        focus = _train_targets(ctx)[0] if view == "deps" and _train_targets(ctx) else None
        return to_dot(build_view(ctx.get("render_ctx"), view, focus=focus, max_nodes=RENDER_BUDGET))

    run.__doc__ = (f"The {view} view of `placeviz render`: collapse by name scope to at most "
                   f"{RENDER_BUDGET} boxes, bundle edges, emit DOT (pipeline untimed).")
    return run


def _render_layout_stage(view: str):
    def run(ctx: Context):
        from placeviz.render.layout import run_graphviz

        return run_graphviz(ctx.get(f"render_{view}_dot"), "svg", "dot", timeout=120)

    run.__doc__ = (f"Graphviz `dot -Tsvg` on the {view} view's DOT (a subprocess; its CPU is counted "
                   "through RUSAGE_CHILDREN).")
    return run


for _view in ("overview", "devices", "deps", "sync"):
    stage(f"render_{_view}", f"render {_view}: collapse + DOT", modules=("placeviz.render",),
          needs=("model", "render_ctx"), provides=f"render_{_view}_dot", setup=_render_setup)(
              _render_view_stage(_view))
    stage(f"layout_{_view}", f"render {_view}: dot -Tsvg layout", modules=("placeviz.render",),
          needs=(f"render_{_view}_dot",))(_render_layout_stage(_view))


# ============================================================================ one graph (child)
def _module_missing(modules: tuple[str, ...]) -> str | None:
    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except ModuleNotFoundError:
            return name
    return None


def _cpu() -> float:
    """This process's CPU seconds plus those of its finished children (the layout stages run
    Graphviz as a subprocess; every other stage has none, so their times are unchanged)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class StageTimeout(Exception):
    """One repetition of a stage used more CPU time than the budget."""


def _on_sigprof(signum, frame):
    raise StageTimeout


def run_graph(path: Path, stage_names: list[str], reps: int, budget: float) -> dict:
    """Time the stages on one graph, in this process.

    A repetition that uses more than ``budget`` CPU seconds is stopped (status ``timeout``); once
    the repetitions of a stage have used ``budget`` seconds in total, the stage stops repeating.
    """
    signal.signal(signal.SIGPROF, _on_sigprof)
    from google.protobuf.internal import api_implementation

    import placeviz.protos  # noqa: F401 - import cost stays out of the first stage
    from placeviz.native import MODULES, kernels

    out: dict = {"path": str(path), "bytes": path.stat().st_size, "reps": reps,
                 "protobuf_backend": api_implementation.Type(),
                 "c_kernels": {name: kernels(name) is not None for name in MODULES},
                 "rss_before_mib": round(_rss_mib(), 1), "stages": {}}
    ctx = Context(path)
    selected = [STAGES[n] for n in stage_names]
    missing_module = {st.name: _module_missing(st.modules) for st in selected}
    for k, st in enumerate(selected):
        rec: dict = {"label": st.label}
        out["stages"][st.name] = rec
        missing = missing_module[st.name]
        if missing:
            rec["status"] = "skipped"
            rec["reason"] = f"module {missing} does not exist yet"
            continue
        if st.provides:
            ctx.values.pop(st.provides, None)  # do not hold the old value while timing a new one
        cpu: list[float] = []
        wall: list[float] = []
        try:
            for need in st.needs:
                ctx.get(need)
            result = None
            for _ in range(reps):
                result = None
                if st.setup:
                    st.setup(ctx)
                gc.collect()
                signal.setitimer(signal.ITIMER_PROF, budget)  # CPU-time limit of one repetition
                c0, t0 = _cpu(), time.perf_counter()
                try:
                    result = st.run(ctx)
                finally:
                    signal.setitimer(signal.ITIMER_PROF, 0)
                wall.append(time.perf_counter() - t0)
                cpu.append(_cpu() - c0)
                if sum(cpu) > budget:  # slow stage: fewer repetitions
                    break
        except StageTimeout:
            rec["status"] = "timeout"
            rec["budget_s"] = budget
            result = None
        except Exception as e:  # noqa: BLE001 - reported per stage, the run goes on
            rec["status"] = "error"
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()
            result = None
        else:
            rec.update(status="ok", cpu_median=statistics.median(cpu), cpu_min=min(cpu),
                       cpu_max=max(cpu), wall_median=statistics.median(wall),
                       cpu_samples=cpu, wall_samples=wall)
            if st.provides:
                ctx.values[st.provides] = result
        result = None
        rec["peak_rss_after_mib"] = round(_peak_rss_mib(), 1)
        if "model" in ctx.values and "nodes" not in out:
            out["nodes"], out["edges"] = len(ctx.graph), ctx.graph.num_edges
        # free what no later stage needs (keeps the peak RSS close to one copy of the graph)
        later = {need for s in selected[k + 1:] if not missing_module[s.name] for need in s.needs}
        for key in [key for key in ctx.values if key not in later]:
            del ctx.values[key]
        gc.collect()
    if "nodes" not in out:  # no stage loaded the model: count on a parse (after the peak is taken)
        out["peak_rss_mib"] = round(_peak_rss_mib(), 1)
        try:
            out["nodes"], out["edges"] = len(ctx.graph_def.node), None
        except Exception as e:  # noqa: BLE001
            out["nodes"] = out["edges"] = None
            out["load_error"] = f"{type(e).__name__}: {e}"
        ctx.values.clear()
    out.setdefault("peak_rss_mib", round(_peak_rss_mib(), 1))
    out["tensorflow_imported"] = any(m == "tensorflow" or m.startswith("tensorflow.") for m in sys.modules)
    return out


# ============================================================================ the driver (parent)
def parse_size(text: str) -> int:
    text = text.strip().lower()
    scale = 1_000_000 if text.endswith("m") else 1_000 if text.endswith("k") else 1
    return int(float(text.rstrip("km")) * scale)


def size_label(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    return f"{n // 1_000}k" if n % 1_000 == 0 else str(n)


def default_reps(nodes: int) -> int:
    return 7 if nodes < 100_000 else 5 if nodes < 500_000 else 3


def graph_facts(path: Path) -> dict:
    """The generator's sidecar (NAME.json next to NAME.pb / NAME.unplaced.pb), if any."""
    name = path.name.removesuffix(".pb").removesuffix(".unplaced")
    sidecar = path.with_name(name + ".json")
    if sidecar.exists():
        return json.loads(sidecar.read_text())
    return {}


def machine_info() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        import google.protobuf

        info["protobuf"] = google.protobuf.__version__
    except ImportError:
        pass
    try:
        info["git_commit"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                            capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "placeviz"],
                               capture_output=True, text=True).stdout.strip()
        info["placeviz_tree_dirty"] = bool(dirty)
    except OSError:
        pass
    return info


def fmt_s(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.4f}" if x < 0.1 else f"{x:.3f}" if x < 10 else f"{x:.2f}"


def cell(rec: dict | None, reps: int) -> str:
    if rec is None:
        return "–"
    if rec.get("status") == "timeout":
        return f"> {rec['budget_s']:.0f} (timeout)"
    if rec.get("status") != "ok":
        return rec.get("status", "–")
    done = len(rec["cpu_samples"])
    return fmt_s(rec["cpu_median"]) + (f" ({done} rep{'s' if done > 1 else ''})" if done < reps else "")


def derived(res: dict) -> dict:
    """Ratios to the parse floor."""
    st = res["stages"]

    def med(name):
        rec = st.get(name)
        return rec["cpu_median"] if rec and rec.get("status") == "ok" else None

    parse, ir, load = med("parse"), med("ir_build"), med("load")
    out = {}
    if parse and ir is not None:
        out["parse_plus_ir_over_parse"] = (parse + ir) / parse
    if parse and load is not None:
        out["load_over_parse"] = load / parse
    return out


def table(results: list[dict]) -> str:
    """A Markdown table: one row per stage, one column per graph."""
    heads = [r["name"] for r in results]
    lines = ["| CPU s, median | " + " | ".join(heads) + " |",
             "|---|" + "---:|" * len(heads)]

    def row(label, cells):
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    row("nodes", [f"{r['nodes']:,}" if r.get("nodes") else "?" for r in results])
    row("edges (data + control)", [f"{r['edges']:,}" if r.get("edges") else "?" for r in results])
    row(".pb MiB", [f"{r['bytes'] / 2**20:.1f}" for r in results])
    row("reps", [str(r["reps"]) for r in results])
    names = [n for n in STAGES if any(n in r["stages"] for r in results)]
    for n in names:
        row(STAGES[n].label, [cell(r["stages"].get(n), r["reps"]) for r in results])
    row("**(parse + IR build) / parse**",
        [f"**{r['derived']['parse_plus_ir_over_parse']:.1f}×**"
         if "parse_plus_ir_over_parse" in r["derived"] else "–" for r in results])
    row("load / parse", [f"{r['derived']['load_over_parse']:.1f}×"
                         if "load_over_parse" in r["derived"] else "–" for r in results])
    row("peak RSS after load, MiB", [f"{r['stages']['load']['peak_rss_after_mib']:,.0f}"
                                     if "load" in r["stages"] else "–" for r in results])
    row("peak RSS, MiB (whole process)", [f"{r['peak_rss_mib']:,.0f}" for r in results])
    lines.append("")
    lines.append("| µs per node (CPU, median) | " + " | ".join(heads) + " |")
    lines.append("|---|" + "---:|" * len(heads))
    for n in names:
        if not any(r["stages"].get(n, {}).get("status") == "ok" for r in results):
            continue
        cells = []
        for r in results:
            rec = r["stages"].get(n)
            ok = rec and rec.get("status") == "ok" and r.get("nodes")
            cells.append(f"{rec['cpu_median'] / r['nodes'] * 1e6:.2f}" if ok else "–")
        row(STAGES[n].label, cells)
    return "\n".join(lines)


def resolve_graphs(args) -> list[Path]:
    if args.graphs:
        return [Path(p) for p in args.graphs]
    paths = []
    for s in args.sizes.split(","):
        if s.strip():
            path = args.graph_dir / f"g{size_label(parse_size(s))}{VARIANT_SUFFIX[args.variant]}"
            paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graphs", nargs="*", help="GraphDef files (default: the generated ones for --sizes)")
    ap.add_argument("--sizes", default="10k,50k,200k,1m", help="generated sizes to run (default all four)")
    ap.add_argument("--variant", choices=sorted(VARIANT_SUFFIX), default="placed",
                    help="which generated file of each size (default placed)")
    ap.add_argument("--graph-dir", type=Path, default=GRAPHS)
    ap.add_argument("--stages", default="", help="comma list of stages (default: all registered)")
    ap.add_argument("--reps", type=int, help="repetitions per stage (default 7 below 100k nodes, "
                                             "5 below 500k, 3 above)")
    ap.add_argument("--budget", type=float, default=60.0,
                    help="CPU seconds one repetition of a stage may take before it is stopped and "
                         "reported as a timeout; also ends the repetitions early (default 60)")
    ap.add_argument("--list-stages", action="store_true")
    ap.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/*.json")
    ap.add_argument("--allow-python-backend", action="store_true",
                    help="run even on the pure-Python protobuf backend (numbers will be ~150x off)")
    ap.add_argument("--no-kernels", action="store_true",
                    help="time the pure-Python paths: the benchmark processes run with "
                         "PLACEVIZ_NO_KERNELS=1, as placeviz does where no C compiler was at hand")
    ap.add_argument("--commands", action="store_true",
                    help="time whole CLI commands as users run them (partition, lint, analyze, render; "
                         "wall, CPU, peak RSS) next to the parse floor of the same file, instead of the stages")
    ap.add_argument("--only-commands", default="",
                    help="with --commands: a comma list of the commands to time, by the first word of their "
                         "name (partition, lint, analyze, render; default all); the cold lint runs when lint "
                         "is among them")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # internal: one graph, JSON out
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # measure the working tree's placeviz

    stage_names = [s for s in args.stages.split(",") if s] or list(STAGES)
    unknown = [s for s in stage_names if s not in STAGES]
    if unknown:
        ap.error(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(STAGES)}")
    stage_names.sort(key=list(STAGES).index)

    if args.child:
        res = run_graph(args.child, stage_names, args.reps, args.budget)
        args.child_out.write_text(json.dumps(res))
        return 0

    if args.list_stages:
        for st in STAGES.values():
            missing = _module_missing(st.modules)
            state = f"skipped: {missing} missing" if missing else "available"
            print(f"{st.name:10s} {st.label:48s} [{state}]  {st.doc}")
        return 0

    from google.protobuf.internal import api_implementation

    backend = api_implementation.Type()
    print(f"protobuf backend: {backend}")
    if backend == "python":
        msg = ("the pure-Python protobuf backend parses ~150x slower than upb; these numbers would "
               "not mean anything (unset PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION, upgrade protobuf)")
        if not args.allow_python_backend:
            print(f"refusing to run: {msg}; --allow-python-backend overrides", file=sys.stderr)
            return 2
        print(f"WARNING WARNING WARNING: {msg}", file=sys.stderr)

    paths = resolve_graphs(args)
    missing = [p for p in paths if not p.exists()]
    if missing:
        print("missing graph file(s): " + ", ".join(map(str, missing))
              + "\ngenerate them first: python benchmarks/gen_graphs.py --sizes " + args.sizes,
              file=sys.stderr)
        return 2
    info = machine_info()
    if args.no_kernels:
        os.environ["PLACEVIZ_NO_KERNELS"] = "1"  # inherited by the benchmark processes
    info["c_kernels"] = not args.no_kernels
    print(f"C kernels: {'off (PLACEVIZ_NO_KERNELS=1)' if args.no_kernels else 'on'}")
    print(f"machine: {info.get('cpu_model', '?')}, {info['cpus']} CPUs, {info.get('mem_gib', '?')} GiB; "
          f"python {info['python']}, protobuf {info.get('protobuf', '?')}; "
          f"placeviz {info.get('git_commit', '?')}{' (+uncommitted)' if info.get('placeviz_tree_dirty') else ''}")
    info["loadavg_start"] = os.getloadavg()
    if args.commands:
        return _main_commands(args, paths, info)
    results = []
    for path in paths:
        facts = graph_facts(path)
        nodes = facts.get("nodes") or path.stat().st_size // 225  # about 225 bytes per node
        reps = args.reps or default_reps(nodes)
        sys.stdout.flush()
        print(f"{path.name}: {nodes:,} nodes, {reps} reps ...", file=sys.stderr, flush=True)
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            child_out = Path(tmp.name)
        try:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(path),
                                   "--child-out", str(child_out), "--reps", str(reps),
                                   "--budget", str(args.budget),
                                   "--stages", ",".join(stage_names)])
            if proc.returncode != 0:
                print(f"{path.name}: the benchmark process failed (exit {proc.returncode})", file=sys.stderr)
                return 1
            res = json.loads(child_out.read_text())
        finally:
            child_out.unlink(missing_ok=True)
        res["name"] = path.name.removesuffix(".pb")
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        res["generated"] = {k: facts[k] for k in ("how", "train_ops", "nodes", "edges") if k in facts}
        res["derived"] = derived(res)
        results.append(res)
    info["loadavg_end"] = os.getloadavg()

    print()
    print(table(results))
    print()
    for res in results:
        for name, rec in res["stages"].items():
            if rec.get("status") == "error":
                print(f"error: {res['name']} {name}: {rec['error']}")
    skipped = sorted({n for r in results for n, rec in r["stages"].items() if rec.get("status") == "skipped"})
    if skipped:
        print("skipped (module not there yet): " + ", ".join(skipped))
    tf_children = [r["name"] for r in results if r["tensorflow_imported"]]
    tf_here = "tensorflow" in sys.modules
    if tf_children or tf_here:
        print(f"ERROR: TensorFlow was imported ({', '.join(tf_children) or 'driver'}): the static core "
              "must not import it")
    else:
        print("TensorFlow imported: no ('tensorflow' not in sys.modules of any benchmark process)")
    missing_kernels = sorted({k for r in results for k, built in r.get("c_kernels", {}).items() if not built})
    if missing_kernels and not args.no_kernels:
        print(f"WARNING: C kernels not loaded ({', '.join(missing_kernels)}): these are the pure-Python "
              "paths' times (run `make` or `pip install -e .` with a C compiler)")
    print(f"load average: {info['loadavg_start'][0]:.2f} at start, {info['loadavg_end'][0]:.2f} at end "
          f"(1 min); times are process CPU seconds, medians")
    if not args.no_save:
        _save({"schema": "placeviz.benchmark/1", "machine": info, "protobuf_backend": backend,
               "stages": stage_names, "variant": args.variant, "results": results}, ".json")
    return 1 if (tf_children or tf_here) else 0


def _save(payload: dict, suffix: str) -> None:
    """Write one run's results (with its date) under benchmarks/results/ and say where."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / (time.strftime("%Y%m%d-%H%M%S") + suffix)
    payload = {"schema": payload["schema"], "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **payload}
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"results: {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")


def _main_commands(args, paths: list[Path], info: dict) -> int:
    """``--commands``: whole processes (see benchmarks/commands.py)."""
    sys.path.insert(0, str(HERE))
    import commands

    only = {name.strip() for name in args.only_commands.split(",") if name.strip()} or None
    results = commands.run_commands(paths, args.reps, default_reps, graph_facts, _unplaced_path, only=only)
    info["loadavg_end"] = os.getloadavg()
    print()
    print(commands.table(results))
    print(f"load average: {info['loadavg_start'][0]:.2f} at start, {info['loadavg_end'][0]:.2f} at end "
          f"(1 min); wall and CPU are medians, the floor is ParseFromString's CPU median")
    if not args.no_save:
        _save({"schema": "placeviz.benchmark-commands/1", "machine": info, "results": results}, "-commands.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
