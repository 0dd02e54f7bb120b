"""Shared helpers of the lint-rule tests (PV1xx-PV4xx): TF graph builders and a rule runner.

Graphs are built with TensorFlow's real ``tf.compat.v1`` API, once per session (``build`` caches by
key). ``lint`` runs every PV1xx-PV4xx rule whose needs are met on the pipeline of a model and returns
the set of ``(rule id, node name)`` pairs, so each test asserts the *exact* set of findings.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable

import pytest

from placeviz import rules
from placeviz.devices import ClusterSpec
from placeviz.io import model_from_proto
from placeviz.lint import LintContext
from placeviz.pipeline import Options, run_pipeline
from placeviz.placement import PlacementOptions
from placeviz.placement.placer import PlacerConfig
from placeviz.placement.setter import SetterConfig

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

RULE_MODULES = [
    importlib.import_module(f"placeviz.rules.{m.name}")
    for m in pkgutil.iter_modules(rules.__path__)
    if not m.name.startswith("_") and m.name[:3] in ("pv1", "pv2", "pv3", "pv4")
]
RULES = {m.RULE.id: m for m in RULE_MODULES}

_CACHE: dict = {}


def tf():
    """TensorFlow, or skip the test."""
    return pytest.importorskip("tensorflow")


def build(key: str, builder: Callable[[], object]):
    """The placeviz Model of the tf.Graph ``builder()`` returns (cached per session by ``key``)."""
    if key not in _CACHE:
        t = tf()
        graph = builder()
        with graph.as_default():
            meta = t.compat.v1.train.export_meta_graph(graph=graph)
        _CACHE[key] = model_from_proto(key, "metagraph", meta)
    return _CACHE[key]


def sample(name: str, **options):
    """A sample graph (``sample_graphs``) built with ps_tasks=2 and ``options``."""
    from placeviz.sample_graphs import BuildOptions, build_graph

    key = f"sample:{name}:" + ",".join(f"{k}={v}" for k, v in sorted(options.items()))
    return build(key, lambda: build_graph(name, BuildOptions(ps_tasks=2, **options)))


def cluster(ps: int = 2, workers: int = 1) -> ClusterSpec:
    return ClusterSpec.from_dict({"ps": [f"ps{i}:2222" for i in range(ps)],
                                  "worker": [f"worker{i}:2222" for i in range(workers)]})


def context(model, *, cluster_spec: ClusterSpec | None = None, thresholds: dict | None = None,
            gpus_per_worker: int = 0, ps_tasks: int = 0, strategy: str = "round-robin",
            soft_placement: bool = False) -> LintContext:
    """The context ``placeviz lint`` builds with ``--ps-tasks ps_tasks --strategy strategy`` (0: no
    ``--ps-tasks``; the setter only runs on an unplaced graph), or ``--cluster`` when ``cluster_spec``
    is given, and ``--soft-placement``."""
    placer = PlacerConfig(allow_soft_placement=soft_placement)
    options = PlacementOptions(setter=SetterConfig(ps_tasks=ps_tasks, strategy=strategy),
                               gpus_per_worker=gpus_per_worker, placer=placer)
    if cluster_spec is not None:
        options = PlacementOptions(cluster=cluster_spec, gpus_per_worker=gpus_per_worker, placer=placer)
    pipe = run_pipeline(model, Options(placement=options))
    return LintContext(model.source, pipe, cluster=cluster_spec, thresholds=dict(thresholds or {}),
                       placement_options=options)


def run(ctx: LintContext, only: str | None = None) -> list:
    """Findings of every PV1xx-PV4xx rule whose needs the context meets (or of rule ``only``)."""
    out = []
    for rule_id, module in sorted(RULES.items()):
        if only is not None and rule_id != only:
            continue
        if ctx.missing(module.RULE):
            continue
        out.extend(module.check(ctx))
    return out


def lint(model, **kwargs) -> set[tuple[str, str | None]]:
    """``{(rule, node)}`` of every PV1xx-PV4xx finding on ``model``."""
    return {(f.rule, f.node) for f in run(context(model, **kwargs))}


def lint_levels(model, **kwargs) -> set[tuple[str, str | None, str]]:
    """``{(rule, node, severity)}`` of every PV1xx-PV4xx finding on ``model``."""
    return {(f.rule, f.node, f.severity) for f in run(context(model, **kwargs))}


def serious(findings) -> set[tuple[str, str | None]]:
    return {(f.rule, f.node) for f in findings if f.severity in ("error", "warning")}


def edit_devices(model, devices: dict[str, str], clear_colocation: bool = False):
    """A copy of ``model`` with some node devices rewritten (a graph transform after export)."""
    from placeviz.protos import MetaGraphDef

    meta = MetaGraphDef()
    meta.CopyFrom(model.meta_graph)
    for node in meta.graph_def.node:
        if node.name in devices:
            node.device = devices[node.name]
            if clear_colocation and "_class" in node.attr:
                del node.attr["_class"]
    return model_from_proto(model.source + "+edited", "metagraph", meta)


def test_rule_metadata():
    """Every rule documents the sections the docs page needs and each threshold key it reads."""
    import inspect
    import re

    assert len(RULES) >= 26
    for rule_id, module in RULES.items():
        rule = module.RULE
        assert module.__name__.split(".")[-1].startswith(rule_id.lower() + "_"), rule_id
        assert module.__name__.endswith(rule.name.replace("-", "_")), rule_id
        for section in ("## What it does", "## Why it matters", "## How it is detected", "## Example", "## Fix",
                        "## References"):
            assert section in rule.doc, (rule_id, section)
        source = inspect.getsource(module)
        for key in re.findall(r'threshold(?:_bytes)?\("([a-z-]+)"', source):
            assert f"`{key}`" in rule.doc, (rule_id, key)
