"""The whole static pipeline in one call: load → sync pass → place → detect/prove → partition.

``analyze``, ``render``, ``lint``, ``verify`` and the demo all need the same facts about a model;
they get them from :func:`run_pipeline` so that each stage runs once and every command sees the
same result; ``place`` and ``partition`` run it too, without the report (``describe=False``), so
that the SYNC options mean the same everywhere. What to run comes in one :class:`Options`, built
once per command from its command-line values (:func:`placeviz.commands.options.build_options`):
the placement, sync and step sections and the stage switches. Stages that do not apply are
``None``; a stage that fails on a graph that loaded fine (TF's placer would reject it,
partitioning finds a cycle across devices) records its error message instead of raising, because
that failure is itself something to report.

The results are typed (:class:`Pipeline`'s fields), and the report (:class:`~placeviz.analysis.
Analysis`) gets typed stage results too (``PlacementStage``, ``SyncStage``, ``TrafficStage``),
of which its JSON sections are views.

Order, as ``docs/architecture.md`` draws it: the SyncReplicas pass rewrites the *plain* graph first
(TF builds ``SyncReplicasOptimizer``'s ops under the same device setter as the model), then the
setter and placer run over the result, then the sync machinery is detected and proven on the
placed graph, then one step of the worker's train op is partitioned.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from placeviz.analysis import Analysis, PlacementStage, TrafficStage, analyze, detect_and_prove
from placeviz.errors import PlacevizError
from placeviz.graph import Graph
from placeviz.io import Model, load, model_from_proto
from placeviz.limits import LimitError

if TYPE_CHECKING:  # the stages' result types, imported where each stage runs
    from placeviz.partition import PartitionResult
    from placeviz.placement import PlacementOptions, PlacementResult
    from placeviz.placement.placer import ColocationConflict
    from placeviz.placement.setter import SetterResult
    from placeviz.sync.detect import SyncMachinery
    from placeviz.sync.proof import SyncProof
    from placeviz.sync.rewrite import RewriteResult


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
    train_op_by_default: bool = True
    """Without fetches and targets: one step of the worker's train op (``analyze``, ``render``,
    ``lint``), or, when False, the whole graph (``partition``, as TF's partitioner given every node)."""


@dataclass(frozen=True)
class Options:
    """Everything a command asks of the pipeline, parsed once from its command-line values
    (:func:`placeviz.commands.options.build_options`) and handed through unchanged.

    Three sections (what to place, what to rewrite, which step to partition) and the stage
    switches (what to run). One object so that no command assembles its own mix of option objects
    and flags, and a per-task variant (:meth:`for_task`) is made in one place.
    """

    placement: PlacementOptions | None = None
    """:class:`placeviz.placement.PlacementOptions` (the PLACE options); None: no placement."""
    sync: SyncOptions | None = None
    """The SYNC options: rewrite a plain graph into SyncReplicas form first; None: no rewrite."""
    step: StepOptions = field(default_factory=StepOptions)
    """Which run to partition."""
    tag: str | None = None
    """``--tag``: the SavedModel MetaGraph to load (a model given by path only)."""
    place_always: bool = False
    """Place the graph even without a placement option asking for it (``place``, ``partition``,
    ``analyze --explain``, ``verify``)."""
    partition: bool = True
    """Partition one step (when the graph is placed)."""
    describe: bool = True
    """Make the report (``analyze``, sync detection and proof); False for the commands that only
    write the placed graph or its partitions."""
    setter_only: bool = False
    """Stop placement after the setter stage (``place --stage setter``); nothing is partitioned."""
    summaries: bool = True
    """Attach the variables' placed devices to the report; lint's rules never read them."""

    def for_task(self, task: int) -> Options:
        """The options as worker task ``task``'s client has them (between-graph replication):
        :meth:`placeviz.placement.PlacementOptions.for_task` (``replica_device_setter``'s
        ``worker_device`` of that task, ``tensorflow/python/training/device_setter.py``), and for a
        task other than the chief (task 0) the SyncReplicas graph of a non-chief worker (no
        init-tokens op: ``get_init_tokens_op`` is the chief's,
        ``tensorflow/python/training/sync_replicas_optimizer.py``). The step and the stage switches
        are kept. Options with nothing task-specific are returned as they are."""
        placement = self.placement.for_task(task) if self.placement is not None else None
        sync = self.sync
        if task and sync is not None and sync.is_chief:
            sync = replace(sync, is_chief=False)
        if placement is self.placement and sync is self.sync:
            return self
        return replace(self, placement=placement, sync=sync)


@dataclass
class Pipeline:
    """Everything the static stages computed for one model."""

    model: Model
    """The model as loaded, or as rewritten by the sync pass."""
    analysis: Analysis | None
    """``analyze`` of :attr:`model`, given the placement, sync and traffic stage results; None
    when the caller asked for no report (``Options(describe=False)``: ``place``, ``partition``)."""
    rewrite: RewriteResult | None = None
    """:class:`placeviz.sync.rewrite.RewriteResult` when the sync pass ran."""
    setter: SetterResult | None = None
    """:class:`placeviz.placement.setter.SetterResult` of ``Options(setter_only=True)`` (the
    setter stage alone, ``place --stage setter``); with full placement it is ``placement.setter``."""
    notes: list[str] = field(default_factory=list)
    """What the placement stage says about itself (``--ps-tasks 0``, no placement asked for, nodes
    the setter added, the setter's own notes), in that order; the report's notes end with them."""
    placement: PlacementResult | None = None
    """:class:`placeviz.placement.PlacementResult`, or None (not asked for, or failed)."""
    placement_error: str | None = None
    placement_conflicts: tuple[ColocationConflict, ...] = ()
    """When the placer rejected the graph in its ``_class`` step, every join that failed there
    (:attr:`placeviz.placement.placer.PlacementError.conflicts`; PV104 reports them)."""
    machinery: SyncMachinery | None = None
    """:class:`placeviz.sync.detect.SyncMachinery` found in the (placed) graph, or None."""
    proof: SyncProof | None = None
    """:class:`placeviz.sync.proof.SyncProof` for :attr:`machinery`."""
    partitions: PartitionResult | None = None
    """:class:`placeviz.partition.PartitionResult` of one step at ``StepOptions.level``."""
    partition_error: str | None = None
    run: dict = field(default_factory=dict)
    """What was partitioned: ``{"fetches", "targets", "feeds", "what"}``."""

    @property
    def report(self) -> Analysis:
        """:attr:`analysis`, for the callers that asked for one (``describe=True``, the default)."""
        if self.analysis is None:
            raise RuntimeError("this pipeline ran with describe=False: it made no report")
        return self.analysis

    @property
    def graph(self) -> Graph:
        """The graph later stages refer to: the placed one when placement ran (the setter's when
        only the setter ran), else the model's."""
        if self.placement is not None:
            return self.placement.graph
        return self.setter.graph if self.setter is not None else self.model.graph

    @property
    def devices(self) -> list[str] | None:
        """Full runtime device of every node of :attr:`graph`, or None without placement."""
        return self.placement.placement.devices if self.placement is not None else None


def run_pipeline(model_spec: str | Model, options: Options | None = None, *, progress=None) -> Pipeline:
    """Run every static stage that applies; see the module docstring.

    ``options``: :class:`Options` (None: ``Options()``, the model as it is, with no placement
    option), as task 0 has them (:meth:`Options.for_task`). Placement runs when ``options.placement`` asks for the setter, gives a cluster, the
    graph is already placed, or ``options.place_always``. ``options.setter_only``: stop placement
    after the setter stage (:attr:`Pipeline.setter`; nothing is partitioned). ``describe=False``:
    no report (no ``analyze``, no sync detection or proof), for the commands that only write the
    placed graph or its partitions. ``summaries=False``: the variables' placed devices are not
    attached to the report (the placement table and the traffic summary are views made on first
    read anyway), for callers that read the stages' results only (lint's rules read ``devices``,
    ``partitions`` and the bytes of ``analysis.variables``). ``progress``: optional callable taking
    one status line. Raises :class:`PlacevizError` only for bad input (load errors, a graph the
    sync pass refuses).
    """
    from placeviz.coverage import serving_graph_problem

    # A model alone is task 0's, the chief's (``--worker-device /job:worker/task:%d`` is task 0's
    # device); a worker task's pipeline is given ``options.for_task(I)``, on which this changes nothing.
    options = options.for_task(0) if options is not None else Options()
    say = progress or (lambda _msg: None)
    model = model_spec if isinstance(model_spec, Model) else load(model_spec, tag=options.tag)
    serving = serving_graph_problem(model)  # a serving graph is neither rewritten nor placed
    rewrite = None
    if options.sync is not None and serving is None:
        model, rewrite = _sync_pass(model, options.sync, say)
    # The sync section is filled below from the one detection/proof of the model's graph.
    report = analyze(model, with_sync=False) if options.describe else None
    pipe = Pipeline(model=model, analysis=report, rewrite=rewrite)

    if serving is not None:
        pipe.notes.append(serving)  # and nothing is placed or partitioned: see placeviz.coverage
    else:
        pipe.notes.extend(placement_notes(model.graph, options.placement))
        _place(pipe, options, say)
    if report is not None:
        report.notes.extend(pipe.notes)
        _describe_sync(pipe, report)
    if options.partition and pipe.placement is not None and options.placement is not None:
        _partition_step(pipe, pipe.placement, options.step, options.placement, say)
    return pipe


def _sync_pass(model: Model, sync_options: SyncOptions, say):
    """The SyncReplicas rewrite of the plain graph (:mod:`placeviz.sync.rewrite`): the new model and the rewrite."""
    from placeviz.sync.rewrite import rewrite_sync

    say("sync pass: rewriting into SyncReplicas form ...")
    source = model.meta_graph if model.meta_graph is not None else model.graph_def
    rewrite = rewrite_sync(source, sync_options.replicas_to_aggregate, sync_options.total_replicas,
                           sync_options.variable_averages,
                           collections=model.collections if model.meta_graph is not None else None,
                           name=sync_options.name, is_chief=sync_options.is_chief)
    model = model_from_proto(model.source, model.kind,
                             rewrite.meta_graph if rewrite.meta_graph is not None else rewrite.graph_def)
    return model, rewrite


def _place(pipe: Pipeline, options: Options, say) -> None:
    """The setter and the placer (or the setter alone), when they apply; a placement TF's placer
    would reject is recorded in :attr:`Pipeline.placement_error`, not raised."""
    from placeviz.placement import is_placed, place_graph, setter_stage

    graph = pipe.model.graph
    placement_options = options.placement
    if placement_options is None or not (options.place_always or placement_options.wants_setter
                                         or placement_options.cluster is not None or is_placed(graph)):
        return
    if options.setter_only:
        say("placing (setter stage) ...")
        pipe.setter = setter_stage(graph, placement_options)
        if pipe.setter is not None:
            pipe.notes.extend(pipe.setter.notes)
        return
    say("placing ...")
    report = pipe.analysis
    try:
        pipe.placement = place_graph(graph, placement_options)
    except LimitError:
        raise  # a cluster beyond placeviz's bounds: exit 2, not a placement to report
    except PlacevizError as e:
        pipe.placement_error = str(e)
        pipe.placement_conflicts = getattr(e, "conflicts", ())
        if report is not None:
            report.placement_stage = PlacementStage(None, error=str(e))
        return
    added = len(pipe.placement.graph) - len(graph)
    if added:
        pipe.notes.append(added_nodes_note(added, len(graph)))
    if pipe.placement.setter is not None:
        pipe.notes.extend(pipe.placement.setter.notes)
    if report is not None:
        if options.summaries:
            from placeviz.analysis import attach_placement

            attach_placement(report, pipe.placement)
        report.placement_stage = PlacementStage(pipe.placement, ps_job=placement_options.setter.ps_job,
                                                nodes_added=added)


def _describe_sync(pipe: Pipeline, report: Analysis) -> None:
    """Detect and prove the sync machinery of the graph later stages read (:attr:`Pipeline.graph`),
    once; the report's ``sync`` section is a view of it.

    Except when the setter ran: its graph is another graph (``tf.group``'s per-device NoOps made
    again, the setter's device strings), and the report describes the graph as loaded, as
    ``analyze`` does, so that graph gets its own detection and proof. The two differ in the
    requested devices they name, in proof paths through the split NoOps and in closure sizes; a
    view of one cannot be made from the other without re-walking the graph.
    """
    model = pipe.model
    collections = model.collections if model.collections.present else None
    stage = detect_and_prove(pipe.graph, collections)
    if stage is not None:
        pipe.machinery, pipe.proof = stage.machinery, stage.proof
    report.sync_stage = stage if pipe.graph is model.graph else detect_and_prove(model.graph, collections)


def _partition_step(pipe: Pipeline, placed: PlacementResult, step: StepOptions,
                    placement_options: PlacementOptions, say) -> None:
    from placeviz.partition import partition

    fetches, targets, feeds = step.fetches, step.targets, step.feeds
    if not (fetches or targets) and step.train_op_by_default:
        worker_ops = pipe.proof.worker_train_ops if pipe.proof is not None else []
        targets = tuple(worker_ops or pipe.model.collections.train_ops)
    pipe.run = {"fetches": list(fetches), "targets": list(targets), "feeds": list(feeds),
                "what": "one step of the train op" if targets and not fetches else
                        ("the given fetches" if fetches or targets else "the whole graph")}
    say(f"partitioning ({step.level} level) ...")
    try:
        pipe.partitions = partition(placed.graph, placed.placement.devices, fetches=fetches, targets=targets, feeds=feeds,
                                    level=step.level, replicate_constants=step.replicate_constants,
                                    client_device=placement_options.placer.client_device,
                                    attr_keys=placed.placement.attr_keys)
    except PlacevizError as e:
        pipe.partition_error = str(e)
        if pipe.analysis is not None:
            pipe.analysis.traffic_stage = TrafficStage(step.level, pipe.run, error=str(e))
        return
    parts = pipe.partitions
    if step.batch_size is not None:
        from placeviz.traffic import assume_batch

        # A new table for every later reader (analyze, render, lint); the partitions stay TF's.
        parts.table = assume_batch(parts.table, step.batch_size)
    if pipe.analysis is not None:
        pipe.analysis.traffic_stage = TrafficStage(step.level, pipe.run, placed.graph, parts, step.batch_size)


NO_PLACEMENT_NOTE = ("the graph places no variable on a job and no --ps-tasks/--cluster was given: nothing goes to "
                     "a parameter server, so no traffic between tasks shows; give --ps-tasks N (or --cluster FILE) "
                     "to place it as replica_device_setter would")


def placement_notes(graph: Graph, placement_options: PlacementOptions | None) -> list[str]:
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
    """The setter replay rebuilds each ``tf.group`` NoOp as TF's ``group`` builds it under the
    setter's devices (``tensorflow/python/ops/control_flow_ops.py``, ``group``/``_GroupControlDeps``:
    one NoOp per device when the inputs span devices, one NoOp when they do not), so the placed
    graph can count more nodes than the loaded one, or fewer (a graph exported with other devices
    carried per-device NoOps that now collapse into one); say so, or the two counts look like a bug.
    ``added`` is the difference, of either sign."""
    change = f"added {added:,} node(s)" if added > 0 else f"removed {-added:,} node(s)"
    return (f"the setter replay {change} (tf.group's per-device NoOps, as TF builds them under "
            f"replica_device_setter): the placed graph and its views count {loaded + added:,} nodes, the "
            f"loaded graph {loaded:,}")
