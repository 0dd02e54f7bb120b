"""``placeviz verify``: run the SyncReplicas graph on real TF servers and check what happened.

The static stages (load, sync pass, placement, detection, proof) come from
:func:`placeviz.pipeline.run_pipeline`; :mod:`placeviz.verify.plan` turns their result into a run;
:mod:`placeviz.verify.runner` executes it on TF servers: local ones on 127.0.0.1 in a private
network namespace, or with ``--servers FILE`` the user's own (:mod:`placeviz.verify.servers`
checks that they answer first); :mod:`placeviz.verify.checks` judges the evidence;
:mod:`placeviz.verify.report` formats it. ``--cluster FILE`` means what it means in every command:
the cluster the graph is placed on; the local servers then have its jobs and task counts.
:func:`run` returns the report (the demo calls it); :func:`main` is the CLI's entry.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import signal
from typing import TYPE_CHECKING

from placeviz.commands.output import emit, progress, say, to_json
from placeviz.errors import PlacevizError

if TYPE_CHECKING:
    from placeviz.pipeline import Options

TF_MISSING = "TensorFlow is not installed; verify needs it: install placeviz[tf]"


def run(model_spec, options: Options, *, workers: int | None = None, steps: int = 5,
        timeout: float = 180.0, isolate: bool = False, feeds_file: str | None = None, seed: int = 0,
        chief_queue_runner: str = "auto", fault: str | None = None, servers=None, reset_containers: bool = False,
        worker_graphs: dict[int, str] | None = None,
        allow_io: bool = False, isolation: bool = True, mode: str = "sync", slow_workers: dict | None = None,
        trace: bool = False, loss: str | None = None, say=say):
    """Verify ``model_spec`` and return a :class:`placeviz.verify.report.VerifyReport`.

    ``options``: :class:`placeviz.pipeline.Options`; its placement section (``--ps-tasks``,
    ``--cluster`` etc.) is required; its cluster, if any, is where the graph is placed, and the
    local servers (127.0.0.1, a private network namespace) get its jobs and task counts. Verify
    places every graph (``place_always``), partitions none itself and places with soft placement
    (its local servers have CPUs only). Its sync section rewrites a plain graph first. ``servers``: a
    :class:`placeviz.devices.ClusterSpec` of TF servers the user already runs (``--servers FILE``):
    no local server is started; the placement cluster must have the same jobs and tasks, and every
    address must accept a TCP connection before anything starts. Their resource containers are
    cleared only with ``reset_containers`` (``--reset-containers``); without it, state left by an
    earlier run fails the run. ``worker_graphs``: worker task -> MODEL that task's program built
    (``--worker-graph``); with a builder MODEL taking ``task_index``, each worker's graph comes from
    its own call. ``allow_io`` (``--allow-io``): run ops that touch the file system or run code
    (:mod:`placeviz.verify.hostops`) instead of refusing the graph. ``mode``: ``sync``, ``async``
    (the plain graph, every worker applying its own updates) or ``barrier`` (sync, one gradient per
    worker per step); ``slow_workers``: worker -> seconds of delay per step; ``trace``: keep every
    op of every run (for ``--trace``); ``loss``: the scalar read after the run
    (:mod:`placeviz.verify.modes`). ``isolation`` False
    (``--no-isolation``): run the local servers without the private namespaces (said first, on
    stderr and in the report); with it, a kernel that refuses them is a one-line error before any
    server starts. ``say``: where the run's narration goes (default :func:`placeviz.commands.output.say`:
    notes and warnings always, the rest as progress of the ``verify`` stage, on a terminal).
    Raises :class:`PlacevizError` for bad input (exit 2); a failed check or run is in the report::

        report = run("sample:mlp", Options(placement=PlacementOptions(setter=SetterConfig(ps_tasks=2)),
                                           sync=SyncOptions(replicas_to_aggregate=2, total_replicas=3)), steps=3)
        report.ok, report.to_json(), placeviz.verify.report.format_text(report)
    """
    if importlib.util.find_spec("tensorflow") is None:
        raise PlacevizError(TF_MISSING)
    from placeviz.pipeline import run_pipeline
    from placeviz.progress import begin
    from placeviz.verify import servers as user_servers
    from placeviz.verify.checks import evaluate
    from placeviz.verify.prepare import prepare
    from placeviz.verify.runner import run_plan

    begin("verify")  # its steps: what verify and its coordinator say they do (commands.output.say)
    if steps < 1:
        raise PlacevizError("--steps must be at least 1")
    placement_options = options.placement
    if placement_options is None:
        raise PlacevizError("verify needs the PLACE options (placeviz.pipeline.Options.placement)")
    if mode == "async" and options.sync is not None:
        raise PlacevizError("--mode async runs the plain graph as it is; --sync-replicas rewrites it into "
                            "SyncReplicas form: give one of them")
    if mode == "async" and worker_graphs:
        raise PlacevizError("--mode async runs the chief's graph on every worker; --worker-graph is for sync mode")
    if isolate and servers is not None:
        raise PlacevizError("--isolate starts local servers, one process per task; it cannot be combined with "
                            "--servers")
    if fault is not None and not isolate:
        raise PlacevizError("--inject-fault kills a task process: it needs --isolate")
    if not isolation and servers is not None:
        raise PlacevizError("--no-isolation is about verify's own local servers; with --servers it starts none")
    if not isolation:
        say(f"WARNING: {NOT_ISOLATED}")
    if reset_containers and servers is None:
        raise PlacevizError("--reset-containers clears the containers of --servers; verify's own local servers "
                            "start empty")
    if servers is not None:
        if placement_options.cluster is None:
            raise PlacevizError("--servers needs the placement cluster too (--cluster FILE, or the same file)")
        user_servers.check_same_shape(placement_options.cluster, servers)
        say(f"checking that the {sum(servers.num_tasks(j) for j in servers.jobs)} servers of "
            f"{servers.source or '--servers'} answer ...")
        user_servers.check_reachable(servers)
    # The local servers have CPUs only (CUDA_VISIBLE_DEVICES=""): TF soft-places GPU ops on CPU, and
    # placeviz must place the same way for the partitions to compare.
    soft = dataclasses.replace(placement_options.placer, allow_soft_placement=True)
    user_options = dataclasses.replace(options, placement=dataclasses.replace(placement_options, placer=soft),
                                       place_always=True, partition=False)
    chief = user_options.for_task(0)
    assert chief.placement is not None  # made just above
    placement_options = chief.placement
    say("loading and placing the model ...")
    pipe = run_pipeline(model_spec, chief, progress=say)
    from placeviz.coverage import refuse_serving_graph

    refuse_serving_graph(pipe.model)
    if pipe.placement is None:
        raise PlacevizError(f"cannot place the graph: {pipe.placement_error}")

    def task_pipes(n_workers: int) -> dict:
        from placeviz.tasks import task_pipelines

        pipes, sources = task_pipelines(pipe.model, pipe, str(model_spec), worker_graphs or {}, user_options,
                                        workers=n_workers, progress=say)
        for t, tpipe in pipes.items():
            if t and tpipe.placement is None:
                raise PlacevizError(f"cannot place worker {t}'s graph ({sources[t]}): {tpipe.placement_error}")
        return {t: (sources[t], tpipe) for t, tpipe in pipes.items() if t}

    prepared = prepare(pipe, placement_options, servers=servers, reset_containers=reset_containers, workers=workers,
                       steps=steps, timeout=timeout, isolate=isolate, feeds_file=feeds_file, seed=seed,
                       chief_queue_runner=chief_queue_runner, fault=fault, task_pipes=task_pipes, mode=mode,
                       slow_workers=slow_workers, trace=trace, loss=loss)
    host_io(prepared, str(model_spec), allow_io=allow_io, isolation=isolation, servers=servers is not None)
    prepared.plan.isolation, prepared.plan.allow_io = isolation, allow_io
    for note in prepared.plan.notes:
        say(f"note: {note}")
    say(f"running on {prepared.describe()} ...")
    raw = run_plan(prepared.plan.to_json(), prepared.graphs, prepared.feeds, progress=say)
    if raw.result.get("refused"):
        raise PlacevizError(f"verify cannot isolate its TF servers ({raw.result['refused']}), so it runs nothing: "
                            "pass --no-isolation to run them anyway, reachable from other hosts and free to write "
                            "wherever you can")
    if not raw.result and not raw.killed:
        last = (raw.stderr_tail.strip().splitlines() or ["no output"])[-1]
        how = (f"was killed by {signal.Signals(-raw.returncode).name}" if raw.returncode and raw.returncode < 0
               and -raw.returncode in signal.valid_signals() else f"exited with code {raw.returncode}")
        raise PlacevizError(f"verify's coordinator process {how}: {last}")
    begin("checking the run")
    return evaluate(pipe, prepared, raw, model_spec=str(model_spec))


NOT_ISOLATED = ("--no-isolation: the local TF servers run without private namespaces: they listen on every "
                "interface (reachable from other hosts while they run) and the graph's ops can write wherever you "
                "can")


def host_io(prepared, model_spec: str, *, allow_io: bool, isolation: bool, servers: bool) -> None:
    """Refuse a run that would execute ops touching the file system or running code (one line naming
    the first, exit 2), unless ``allow_io``; then say in the plan's notes where they run."""
    from placeviz.verify.hostops import refusal

    found = prepared.host_ops
    if not found:
        return
    source, first = found[0]
    if not allow_io:
        raise PlacevizError(refusal(first, source or model_spec, len(found) - 1, servers))
    ops = ", ".join(dict.fromkeys(f"{h.op} ('{h.node}')" for _s, h in found[:3]))
    where = ("on the machines of your --servers, unconfined" if servers else
             "with the host's file system writable (--no-isolation)" if not isolation else
             "in a mount namespace where only a scratch dir in verify's temp dir (their working directory, "
             "removed afterwards) is writable: a write elsewhere fails with 'Read-only file system'")
    prepared.plan.notes.insert(0, f"--allow-io: the run executes {len(found)} op(s) that touch the file system or "
                                  f"run code ({ops}{' ...' if len(found) > 3 else ''}), {where}")


def main(model_spec, *, place: dict, sync, workers, steps, timeout, isolate, feeds_file, seed, chief_queue_runner,
         fault, fmt: str, output: str | None, tag: str | None, servers_file: str | None = None,
         reset_containers: bool = False, worker_graphs: tuple[str, ...] = (), allow_io: bool = False,
         isolation: bool = True, mode: str = "sync", slow_workers: tuple[str, ...] = (), trace_file: str | None = None,
         timeline_file: str | None = None, loss: str | None = None, pretty: bool = False) -> None:
    """The CLI command: exit 0 when every check passes, 1 when one fails (2 comes from errors), 130
    on SIGINT, 143 on SIGTERM, after stopping everything it started
    (:func:`placeviz.verify.runner.signal_exits`).

    ``--cluster FILE`` is the placement cluster (local servers of its shape run the graph);
    ``--servers FILE`` runs on the user's servers and is also the placement cluster unless
    ``--cluster`` is given."""
    from placeviz.verify.runner import signal_exits

    with signal_exits():
        _main(model_spec, place=place, sync=sync, workers=workers, steps=steps, timeout=timeout, isolate=isolate,
              feeds_file=feeds_file, seed=seed, chief_queue_runner=chief_queue_runner, fault=fault, fmt=fmt,
              output=output, tag=tag, servers_file=servers_file, reset_containers=reset_containers,
              worker_graphs=worker_graphs, allow_io=allow_io, isolation=isolation, mode=mode,
              slow_workers=slow_workers, trace_file=trace_file, timeline_file=timeline_file, loss=loss,
              pretty=pretty)


def _main(model_spec, *, place, sync, workers, steps, timeout, isolate, feeds_file, seed, chief_queue_runner, fault,
          fmt, output, tag, servers_file, reset_containers, worker_graphs, allow_io, isolation, mode, slow_workers,
          trace_file, timeline_file, loss, pretty) -> None:
    from placeviz.commands.options import build_options
    from placeviz.devices import ClusterSpec
    from placeviz.tasks import parse_worker_graphs

    if importlib.util.find_spec("tensorflow") is None:
        raise PlacevizError(TF_MISSING)
    from placeviz.io import note_input
    from placeviz.verify.modes import parse_slow_workers
    from placeviz.verify.timeline import check_picture_path

    slow = parse_slow_workers(slow_workers, workers)
    if timeline_file:
        check_picture_path(timeline_file)

    for path, option in ((servers_file, "--servers"), (feeds_file, "--feeds")):
        if path:
            note_input(path, option)  # -o may not overwrite it
    servers = None
    if servers_file:
        servers, _task = ClusterSpec.from_json_file(servers_file)
        if place["ps_tasks"]:
            raise PlacevizError("give --ps-tasks or --servers, not both (--servers places the graph on its cluster, "
                                "and TF ignores ps_tasks when a cluster is given)")
    options = build_options(place, sync, tag=tag, default_cluster=servers_file)
    report = run(model_spec, options, workers=workers, steps=steps, timeout=timeout, isolate=isolate,
                 feeds_file=feeds_file, seed=seed,
                 chief_queue_runner=chief_queue_runner, fault=fault, servers=servers,
                 reset_containers=reset_containers, worker_graphs=parse_worker_graphs(worker_graphs),
                 allow_io=allow_io, isolation=isolation, mode=mode, slow_workers=slow, trace=bool(trace_file), loss=loss)
    from placeviz.verify.report import format_text

    text = to_json(report.to_json(), pretty=pretty) if fmt == "json" else format_text(report)
    write_timeline([(mode, report)], trace_file, timeline_file)
    emit(text, output)
    if output or fmt == "json":
        progress(report.summary_line())
    raise SystemExit(0 if report.ok else 1)



def write_timeline(runs: list, trace_file: str | None, timeline_file: str | None) -> None:
    """``--trace FILE.json`` (a Chrome trace of every task) and ``--timeline FILE.png|svg`` (worker
    lanes) of ``runs``: (label, :class:`placeviz.verify.report.VerifyReport`) pairs."""
    from placeviz.io import atomic_write
    from placeviz.verify import timeline

    if trace_file:
        atomic_write(trace_file, timeline.chrome_trace_bytes(runs))
        progress(f"wrote {trace_file} (open it in https://ui.perfetto.dev or chrome://tracing)")
    if timeline_file:
        from placeviz.verify.metrics import mode_summary

        rows = [{"label": label, **mode_summary(report)} for label, report in runs]
        atomic_write(timeline_file, timeline.picture_bytes(rows, timeline_file))
        progress(f"wrote {timeline_file}")
