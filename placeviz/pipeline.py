"""The whole static pipeline in one call: load → sync pass → place → detect/prove → partition.

``analyze``, ``render``, ``lint`` and ``verify`` all need the same facts about a model; they get
them from :func:`run_pipeline` so that each stage runs once and every command sees the same
result. Stages that do not apply are ``None``; a stage that fails on a graph that loaded fine
(TF's placer would reject it, partitioning finds a cycle across devices) records its error
message instead of raising, because that failure is itself something to report.

Order, as ``docs/architecture.md`` draws it: the SyncReplicas pass rewrites the *plain* graph first
(TF builds ``SyncReplicasOptimizer``'s ops under the same device setter as the model), then the
setter and placer run over the result, then the sync machinery is detected and proven on the
placed graph, then one step of the worker's train op is partitioned.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from placeviz.analysis import Analysis, analyze
from placeviz.errors import PlacevizError
from placeviz.graph import Graph
from placeviz.io import Model, load, model_from_proto
from placeviz.limits import LimitError


@dataclass(frozen=True)
class SyncOptions:
    """The SYNC command-line options: rewrite a plain graph into SyncReplicas form first."""

    replicas_to_aggregate: int
    total_replicas: int | None = None
    variable_averages: bool = False
    name: str = "sync_replicas"
    """SyncReplicasOptimizer(name=...): the name scope of its accumulators and chief ops."""
    is_chief: bool = True
    """Build the chief's graph (with its init-tokens op) or a non-chief worker's."""


@dataclass(frozen=True)
class StepOptions:
    """Which run to partition: fetches/targets/feeds (empty: the worker's train op)."""

    fetches: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    feeds: tuple[str, ...] = ()
    level: str = "task"
    replicate_constants: bool = True
    batch_size: int | None = None
    """``--batch-size``: the size of an unknown leading dimension in transfers (None: unknown)."""


@dataclass
class Pipeline:
    """Everything the static stages computed for one model."""

    model: Model
    """The model as loaded, or as rewritten by the sync pass."""
    analysis: Analysis
    """``analyze`` of :attr:`model`, with its placement/sync/partition sections filled."""
    rewrite: object | None = None
    """:class:`placeviz.sync.rewrite.RewriteResult` when the sync pass ran."""
    placement: object | None = None
    """:class:`placeviz.placement.PlacementResult`, or None (not asked for, or failed)."""
    placement_error: str | None = None
    machinery: object | None = None
    """:class:`placeviz.sync.detect.SyncMachinery` found in the (placed) graph, or None."""
    proof: object | None = None
    """:class:`placeviz.sync.proof.SyncProof` for :attr:`machinery`."""
    partitions: object | None = None
    """:class:`placeviz.partition.PartitionResult` of one step at ``StepOptions.level``."""
    partition_error: str | None = None
    run: dict = field(default_factory=dict)
    """What was partitioned: ``{"fetches", "targets", "feeds", "what"}``."""

    @property
    def graph(self) -> Graph:
        """The graph later stages refer to: the placed one when placement ran, else the model's."""
        return self.placement.graph if self.placement is not None else self.model.graph

    @property
    def devices(self) -> list[str] | None:
        """Full runtime device of every node of :attr:`graph`, or None without placement."""
        return self.placement.placement.devices if self.placement is not None else None


def run_pipeline(model_spec: str | Model, placement_options=None, sync_options: SyncOptions | None = None,
                 step: StepOptions | None = None, *, tag: str | None = None, place_always: bool = False,
                 partition: bool = True, summaries: bool = True, progress=None) -> Pipeline:
    """Run every static stage that applies; see the module docstring.

    ``placement_options``: :class:`placeviz.placement.PlacementOptions` (None: no placement).
    Placement runs when the options ask for the setter, give a cluster, the graph is already
    placed, or ``place_always``. ``summaries=False`` leaves out what only the report shows: the
    per-device placement table (``analysis.placement``), the variables' placed devices and the
    partition's traffic summary (``analysis.partition``), for callers that read the stages' results
    only (lint's rules read ``devices``, ``partitions`` and the bytes of ``analysis.variables``).
    ``progress``: optional callable taking one status line.
    Raises :class:`PlacevizError` only for bad input (load errors, a graph the sync pass refuses).
    """
    from placeviz.placement import is_placed, place_graph

    say = progress or (lambda _msg: None)
    model = model_spec if isinstance(model_spec, Model) else load(model_spec, tag=tag)
    from placeviz.coverage import serving_graph_problem

    serving = serving_graph_problem(model)  # a serving graph is neither rewritten nor placed
    rewrite = None
    if sync_options is not None and serving is None:
        from placeviz.sync.rewrite import rewrite_sync

        say("sync pass: rewriting into SyncReplicas form ...")
        source = model.meta_graph if model.meta_graph is not None else model.graph_def
        rewrite = rewrite_sync(source, sync_options.replicas_to_aggregate, sync_options.total_replicas,
                               sync_options.variable_averages,
                               collections=model.collections if model.meta_graph is not None else None,
                               name=sync_options.name, is_chief=sync_options.is_chief)
        model = model_from_proto(model.source, model.kind,
                                 rewrite.meta_graph if rewrite.meta_graph is not None else rewrite.graph_def)
    report = analyze(model, with_sync=False)  # filled below from the one detection/proof of the model's graph
    pipe = Pipeline(model=model, analysis=report, rewrite=rewrite)

    if serving is not None:
        report.notes.append(serving)  # and nothing is placed or partitioned: see placeviz.coverage
    else:
        report.notes.extend(placement_notes(model.graph, placement_options))
    wants_placement = serving is None and placement_options is not None and (
        place_always or placement_options.wants_setter or placement_options.cluster is not None
        or is_placed(model.graph))
    if wants_placement:
        say("placing ...")
        try:
            pipe.placement = place_graph(model.graph, placement_options)
        except LimitError:
            raise  # a cluster beyond placeviz's bounds: exit 2, not a placement to report
        except PlacevizError as e:
            pipe.placement_error = str(e)
            report.placement = {"stage": "placed", "error": str(e)}
        else:
            if summaries:
                _placement_section(pipe, placement_options)

    from placeviz.sync import detect, prove, sync_report, sync_section

    collections = model.collections if model.collections.present else None
    pipe.machinery = detect(pipe.graph, collections)
    if pipe.machinery is not None:
        trainable = collections.trainable_variables if collections is not None else None
        pipe.proof = prove(pipe.graph, pipe.machinery, trainable=trainable or None)
    if pipe.graph is model.graph:
        report.sync = sync_section(pipe.machinery, pipe.proof) if pipe.machinery is not None else None
    else:
        # The setter added group NoOps: the report describes the graph as loaded, as analyze does.
        report.sync = sync_report(model.graph, collections)

    if partition and pipe.placement is not None:
        step = step or StepOptions()
        _partition_step(pipe, step, placement_options, say, summaries)
    return pipe


def _placement_section(pipe: Pipeline, placement_options) -> None:
    """The report's placement section, the variables' placed devices and the setter's notes."""
    from placeviz.analysis import attach_placement
    from placeviz.placement import placement_summary

    report, model = pipe.analysis, pipe.model
    sizes = {v.name: v.bytes for v in report.variables}
    ps_job = placement_options.setter.ps_job
    slots = {v.name for v in report.variables if v.slot_of is not None}
    report.placement = placement_summary(pipe.placement, sizes, ps_job, slots)
    attach_placement(report, pipe.placement)
    added = len(pipe.placement.graph) - len(model.graph)
    report.placement["nodes_added"] = added
    if added:
        report.notes.append(added_nodes_note(added, len(model.graph)))
    if pipe.placement.setter is not None:
        report.notes.extend(pipe.placement.setter.notes)


def _partition_step(pipe: Pipeline, step: StepOptions, placement_options, say, summaries: bool = True) -> None:
    from placeviz.partition import partition
    from placeviz.traffic import traffic_summary

    fetches, targets, feeds = step.fetches, step.targets, step.feeds
    if not (fetches or targets):
        worker_ops = (pipe.analysis.sync or {}).get("worker_train_ops") or []
        targets = tuple(worker_ops or pipe.model.collections.train_ops)
    pipe.run = {"fetches": list(fetches), "targets": list(targets), "feeds": list(feeds),
                "what": "one step of the train op" if targets and not fetches else
                        ("the given fetches" if fetches or targets else "the whole graph")}
    say(f"partitioning ({step.level} level) ...")
    try:
        pipe.partitions = partition(pipe.graph, pipe.devices, fetches=fetches, targets=targets, feeds=feeds,
                                    level=step.level, replicate_constants=step.replicate_constants,
                                    client_device=placement_options.placer.client_device)
    except PlacevizError as e:
        pipe.partition_error = str(e)
        pipe.analysis.partition = {"level": step.level, "error": str(e), "run": pipe.run}
        return
    if step.batch_size is not None:
        from placeviz.traffic import assume_batch

        # A new list for every later reader (analyze, render, lint); the partitions stay TF's.
        pipe.partitions.transfers = assume_batch(pipe.partitions.transfers, step.batch_size)
    if not summaries:
        return
    pipe.analysis.partition = {"level": step.level,
                               **traffic_summary(pipe.graph, pipe.partitions, pipe.run, step.batch_size)}


NO_PLACEMENT_NOTE = ("the graph places no variable on a job and no --ps-tasks/--cluster was given: nothing goes to "
                     "a parameter server, so no traffic between tasks shows; give --ps-tasks N (or --cluster FILE) "
                     "to place it as replica_device_setter would")


def placement_notes(graph: Graph, placement_options) -> list[str]:
    """What a report must say about placement before anything runs: the options' own notes
    (``--ps-tasks 0``), and that an unplaced graph given no placement options stays unplaced (so
    an empty traffic section is not read as "no traffic")."""
    from placeviz.placement import is_placed

    notes = list(placement_options.notes) if placement_options is not None else []
    asked = placement_options is not None and (placement_options.wants_setter or placement_options.cluster is not None)
    if not notes and not asked and not is_placed(graph):
        notes.append(NO_PLACEMENT_NOTE)
    return notes


def added_nodes_note(added: int, loaded: int) -> str:
    """The setter replay splits each ``tf.group`` NoOp per device as TF's ``group`` does
    (``tensorflow/python/ops/control_flow_ops.py``, ``group``/``_GroupControlDeps``), so the placed
    graph has more nodes than the loaded one; say so, or the two counts look like a bug."""
    return (f"the setter replay added {added:,} node(s) (tf.group's per-device NoOps, as TF builds them under "
            f"replica_device_setter): the placed graph and its views count {loaded + added:,} nodes, the "
            f"loaded graph {loaded:,}")
