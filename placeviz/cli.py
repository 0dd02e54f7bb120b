"""The ``placeviz`` command line: option parsing only; the work happens in ``placeviz.commands``.

Exit codes (a stable contract, see the README): 0 ok; 1 findings or a failed check; 2 usage
error, unreadable or invalid input, or internal error. Errors are one line on stderr, without a
traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import os
import sys

import click

from placeviz import __version__
from placeviz.commands.options import build_options
from placeviz.commands.place_options import place_options
from placeviz.commands.sync_options import sync_options
from placeviz.errors import PlacevizError
from placeviz.escape import terminal_text

_debug = False

MODEL_HELP = ("MODEL: file.pb | file.pbtxt | file.meta | saved_model_dir | path/to/builder.py:function | "
              "package.module:function | sample:NAME. A builder MODEL (file.py:fn, pkg.module:fn) runs that "
              "Python code with your permissions, as `python file.py` would: use only code you trust. "
              "Model files are data: at most --max-bytes (placeviz --max-bytes SIZE, default 2 GiB) and regular "
              "files only.")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog="Environment: PLACEVIZ_NO_KERNELS=1 runs the pure-Python paths instead of the C kernels "
                    "(the same results, 2-3x slower on big graphs). PLACEVIZ_PROGRESS=always shows progress "
                    "even when stderr is not a terminal (one line per update), =never hides it.")
@click.version_option(__version__, prog_name="placeviz")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors, and TensorFlow's own log lines and warnings.")
@click.option("-q", "--quiet", is_flag=True,
              help="No progress and no status lines on stderr (`wrote FILE`, summaries); notes, warnings and "
                   "errors still show. Progress is otherwise shown only when stderr is a terminal.")
@click.option("--max-bytes", metavar="SIZE", envvar="PLACEVIZ_MAX_BYTES", default="2GiB", show_default=True,
              callback=lambda _ctx, _param, value: _size_option(value),
              help="Refuse model files larger than SIZE (bytes, or KiB/MiB/GiB/KB/MB/GB); env PLACEVIZ_MAX_BYTES.")
def cli(debug: bool, quiet: bool, max_bytes: int) -> None:
    """See and prove where a TensorFlow parameter-server training graph runs."""
    global _debug
    _debug = debug
    from placeviz import progress

    progress.set_quiet(quiet)
    if not debug:  # TF's banners and deprecation notices, should anything import TF (placeviz.tflog)
        from placeviz.tflog import quiet_tensorflow

        quiet_tensorflow()
    from placeviz.io import guard_outputs
    from placeviz.limits import set_max_input_bytes

    ctx = click.get_current_context()
    ctx.with_resource(guard_outputs())  # -o never overwrites a MODEL read
    set_max_input_bytes(max_bytes)
    ctx.call_on_close(lambda: set_max_input_bytes(None))  # for this run only
    ctx.call_on_close(lambda: progress.set_quiet(False))


def batch_size_option(func):
    """``--batch-size N``: the size of an unknown leading (batch) dimension in the step's transfers."""
    return click.option("--batch-size", type=click.IntRange(min=1, max=2**62), default=None, metavar="N",
                        help="Size transfers whose only unknown dimension is the first (the batch) as N rows; "
                             "without it their size is unknown.")(func)


def pretty_option(func):
    """``--pretty``: JSON indented for people; without it compact (``placeviz.jsontext``: the same
    content, a third smaller and written by CPython's C encoder)."""
    return click.option("--pretty", is_flag=True,
                        help="Indent the JSON report for people (default: compact, one line of the same "
                             "content).")(func)


def _size_option(value: str) -> int:
    from placeviz.limits import parse_size

    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


@cli.command(epilog=MODEL_HELP)
@click.argument("model")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report here instead of stdout.")
@click.option("--tag", help="SavedModel: the MetaGraph tag to analyze (default: 'train', or the only one).")
@click.option("--explain", multiple=True, metavar="NODE", help="Say why NODE landed where it did (repeatable).")
@click.option("--fetch", "fetches", multiple=True, metavar="TENSOR",
              help="Traffic of a step fetching TENSOR (default: the train op).")
@click.option("--target", "targets", multiple=True, metavar="OP", help="Traffic of a step running OP.")
@click.option("--feed", "feeds", multiple=True, metavar="TENSOR", help="A tensor the step feeds.")
@click.option("--worker-graph", "worker_graphs", multiple=True, metavar="I=MODEL",
              help="Between-graph replication: the graph worker task I built itself (MODEL is task 0's, the "
                   "chief's); the tasks' graphs are compared (repeatable).")
@pretty_option
@batch_size_option
@place_options
@sync_options
def analyze(model: str, fmt: str, output: str | None, tag: str | None, explain, fetches, targets, feeds,
            worker_graphs, pretty, batch_size, place, sync) -> None:
    """Report node count, op types, devices, variables and placement of MODEL.

    An unplaced graph is placed when --ps-tasks or --cluster is given; a placed one is always run
    through the placer. With --sync-replicas a plain training graph is first rewritten into
    SyncReplicasOptimizer's form. With --worker-graph (or a builder taking task_index and a
    --cluster) the graphs the worker tasks build are compared with MODEL's.
    """
    from placeviz.commands import analyze as command

    options = build_options(place, sync, tag=tag, fetches=fetches, targets=targets, feeds=feeds,
                            batch_size=batch_size, place_always=bool(explain))
    command.run(model, options, fmt=fmt, output=output, explain=explain, worker_graphs=worker_graphs, pretty=pretty)


@cli.command(epilog=MODEL_HELP)
@click.argument("model")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The placed GraphDef: .pbtxt for text, anything else binary.")
@click.option("--stage", type=click.Choice(["setter", "placed"]), default="placed", show_default=True,
              help="setter: the device strings replica_device_setter writes; placed: full runtime devices.")
@click.option("--tag", help="SavedModel: the MetaGraph tag (default: 'train', or the only one).")
@place_options
@sync_options
def place(model: str, output: str, stage: str, tag: str | None, place, sync) -> None:
    """Write MODEL with the devices TF would give its nodes.

    With --sync-replicas a plain training graph is first rewritten into SyncReplicasOptimizer's
    form, and the result is placed.
    """
    from placeviz.commands import place as command

    options = build_options(place, sync, tag=tag, place_always=True, partition=False, describe=False,
                            setter_only=stage == "setter")
    command.run(model, output, options, stage)


@cli.command(epilog=MODEL_HELP)
@click.argument("model")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for one GraphDef per partition and index.json.")
@click.option("--fetch", "fetches", multiple=True, metavar="TENSOR", help="A tensor the step fetches (repeatable).")
@click.option("--target", "targets", multiple=True, metavar="OP", help="An op the step runs (repeatable).")
@click.option("--feed", "feeds", multiple=True, metavar="TENSOR", help="A tensor the step feeds (repeatable).")
@click.option("--level", type=click.Choice(["device", "task"]), default="device", show_default=True,
              help="Partition per device (as workers run them) or per task (what crosses the network).")
@click.option("--no-replicate-constants", is_flag=True,
              help="Do not copy small constants per device as TF 2.13+'s ReplicateConstantsPass does.")
@click.option("--pretty", is_flag=True, help="Indent index.json for people (default: compact, the same content).")
@click.option("--tag", help="SavedModel: the MetaGraph tag (default: 'train', or the only one).")
@place_options
@sync_options
def partition(model, out_dir, fetches, targets, feeds, level, no_replicate_constants, pretty, tag, place,
              sync) -> None:
    """Split MODEL per device with _Send/_Recv pairs, as TF's runtime does for one step.

    Without --fetch/--target the whole graph is partitioned. With --sync-replicas a plain training
    graph is first rewritten into SyncReplicasOptimizer's form, then placed and partitioned.
    """
    from placeviz.commands import partition as command

    options = build_options(place, sync, tag=tag, fetches=fetches, targets=targets, feeds=feeds, level=level,
                            replicate_constants=not no_replicate_constants, train_op_by_default=False,
                            place_always=True, describe=False)
    command.run(model, out_dir, options, pretty=pretty)


@cli.command("sync", epilog=MODEL_HELP)
@click.argument("model")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The synchronous graph, by suffix: .pb (binary) or .pbtxt (text) a GraphDef, .meta a "
                   "MetaGraphDef (collections updated).")
@click.option("--meta-graph", is_flag=True, help="Write a MetaGraphDef into a .pb/.pbtxt output.")
@click.option("--replicas-to-aggregate", type=click.IntRange(min=1), required=True,
              help="Gradients averaged per step (R).")
@click.option("--total-replicas", type=click.IntRange(min=1), default=None,
              help="Workers (W, default R; W > R means backup workers).")
@click.option("--variable-averages", is_flag=True,
              help="Run the graph's ExponentialMovingAverage update after the token enqueue, as "
                   "SyncReplicasOptimizer(variable_averages=...) does.")
@click.option("--name", default="sync_replicas", show_default=True,
              help="SyncReplicasOptimizer(name=...): the name scope of its accumulators and chief ops.")
@click.option("--worker", is_flag=True,
              help="Build a non-chief worker's graph: no init-tokens op (get_init_tokens_op is the chief's).")
@click.option("--num-tokens", type=click.IntRange(min=-1), default=-1, show_default=True,
              help="The chief's get_init_tokens_op(num_tokens): -1 is R; 0 makes no_init_tokens.")
@click.option("--tag", help="SavedModel: the MetaGraph tag (default: 'train', or the only one).")
def sync_command(model, output, meta_graph, replicas_to_aggregate, total_replicas, variable_averages, name,
                 worker, num_tokens, tag) -> None:
    """Rewrite a plain training graph into the graph SyncReplicasOptimizer would have built."""
    from placeviz.commands import sync as command

    command.run(model, output, replicas_to_aggregate, total_replicas, variable_averages, tag, name=name,
                meta_graph=meta_graph, is_chief=not worker, num_tokens=num_tokens)


@cli.command("lint", epilog=MODEL_HELP)
@click.argument("models", nargs=-1, required=True)
@click.option("--select", multiple=True, metavar="RULE[,RULE]",
              help="Run only these rules: ID, name, ID prefix (PV3) or ALL, repeated or comma-separated; replaces "
                   "the config's select.")
@click.option("--extend-select", multiple=True, metavar="RULE[,RULE]", help="Add rules to the selection.")
@click.option("--ignore", multiple=True, metavar="RULE[,RULE]", help="Deselect rules (ID, name or prefix).")
@click.option("--preview", is_flag=True, help="Also select preview rules.")
@click.option("--fail-on", type=click.Choice(["error", "warning", "info", "never"]), default=None,
              help="Exit 1 when a finding is at least this severe (default: config, else error).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]), default="text",
              show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report here instead of stdout.")
@click.option("--baseline", type=click.Path(dir_okay=False), help="Report only findings not in this baseline.")
@click.option("--write-baseline", type=click.Path(dir_okay=False),
              help="Write every current finding to this baseline file (and exit 0 unless an error).")
@click.option("--config", type=click.Path(dir_okay=False),
              help="Lint config (pyproject.toml or placeviz.toml; default: the nearest one upwards).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="A directory of your own rule modules (repeatable).")
@click.option("--tag", help="SavedModel: the MetaGraph tag (default: 'train', or the only one).")
@click.option("--worker-graph", "worker_graphs", multiple=True, metavar="I=MODEL",
              help="Between-graph replication: the graph worker task I built itself (MODEL is task 0's, the "
                   "chief's); the tasks' graphs are compared (repeatable).")
@click.option("--rule-timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Stop a --rules DIR rule that runs longer than this per model (default 10; 0: no limit); "
                   "it is reported as timed out and lint goes on.")
@click.option("--only-graphs", is_flag=True,
              help="Skip, with a note, files that are not graphs: a SavedModel's fingerprint.pb/keras_metadata.pb "
                   "and other side files, text protos that are not a GraphDef/MetaGraphDef/SavedModel (label "
                   "maps, pipeline configs); saved_model.pb is linted as its directory (the pre-commit hook's mode).")
@pretty_option
@batch_size_option
@place_options
@sync_options
def lint_command(models, select, extend_select, ignore, preview, fail_on, fmt, output, baseline, write_baseline,
                 config, rules_dirs, tag, worker_graphs, rule_timeout, only_graphs, pretty, batch_size, place,
                 sync) -> int:
    """Check MODELS for parameter-server mistakes; exit 0 clean, 1 findings, 2 errors.

    --cluster FILE (a PLACE option) is also the cluster spec the cluster rules check against.
    --worker-graph I=MODEL (one MODEL only) gives the graph worker task I built, for PV211.
    """
    from placeviz.commands import lint as command

    return command.run(models, place=place, sync=sync, tag=tag, select=select, extend_select=extend_select,
                       ignore=ignore, preview=preview, fail_on=fail_on, fmt=fmt, baseline=baseline,
                       write_baseline=write_baseline, config=config, rules_dirs=rules_dirs, output=output,
                       worker_graphs=worker_graphs, rule_timeout=rule_timeout, only_graphs=only_graphs,
                       batch_size=batch_size, pretty=pretty)


@cli.command("rules")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Also list the rules of this directory (repeatable).")
@click.option("--write-docs", type=click.Path(file_okay=False), metavar="DIR",
              help="Write one Markdown page per rule, and an index, into DIR (docs/rules).")
@click.option("--check", is_flag=True, help="With --write-docs: exit 1 if the pages in DIR are out of date.")
def rules_command(fmt, rules_dirs, write_docs, check) -> int:
    """List the lint rules (or write their documentation pages)."""
    from placeviz.commands import lint as command

    return command.list_rules(fmt, rules_dirs, write_docs, check)


@cli.command("rule")
@click.argument("rule")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Also look in this directory of rules (repeatable).")
def rule_command(rule, rules_dirs) -> int:
    """Print the documentation page of RULE (an ID like PV201, or a name)."""
    from placeviz.commands import lint as command

    return command.show_rule(rule, rules_dirs)


@cli.command("render", epilog=MODEL_HELP)
@click.argument("model")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Output file; its suffix picks the format: .svg .png .pdf (Graphviz), .dot, .html (report).")
@click.option("--view", type=click.Choice(["overview", "devices", "deps", "sync"]), default="devices",
              show_default=True, help="Which picture (.html holds all of them).")
@click.option("--focus", metavar="NODE", help="deps: the op to centre on (default: the worker's train op); "
                                              "devices, overview: outline the box holding NODE.")
@click.option("--depth", type=click.IntRange(min=1), default=None,
              help="deps: hops up and down from --focus (default: everything the op runs, plus its consumers).")
@click.option("--max-nodes", type=click.IntRange(min=1), default=None,
              help="At most this many boxes: ops are collapsed by name scope to fit (default: as many as keep "
                   "the picture within 2,500 px at 100%, text at 10 pt).")
@click.option("--layout-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds Graphviz may take per attempt before a coarser collapse or sfdp is tried.")
@click.option("--tag", help="SavedModel: the MetaGraph tag (default: 'train', or the only one).")
@click.option("--verify", "verify_file", type=click.Path(dir_okay=False, exists=True), metavar="FILE.json",
              help=".html: add the run of `verify --format json` or `compare-modes --format json` (checks, "
                   "comparison, whose gradients each step averaged, the timeline).")
@batch_size_option
@place_options
@sync_options
def render(model, output, view, focus, depth, max_nodes, layout_timeout, tag, verify_file, batch_size, place,
           sync) -> None:
    """Draw MODEL's placement: device overview, collapsed device view, dependencies, sync machinery."""
    from placeviz.commands import render as command

    options = build_options(place, sync, tag=tag, batch_size=batch_size)
    command.run(model, output, options, view=view, focus=focus, depth=depth, max_nodes=max_nodes,
                layout_timeout=layout_timeout, verify_file=verify_file)


@cli.command(epilog=MODEL_HELP)
@click.argument("model")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker tasks W (default: the worker tasks of --servers/--cluster, else the graph's total "
                   "replicas).")
@click.option("--steps", type=click.IntRange(min=1), default=5, show_default=True, help="Global steps K to run.")
@click.option("--timeout", type=click.FloatRange(min=5), default=180.0, show_default=True,
              help="Seconds before a hang is reported as a failure (everything started is killed).")
@click.option("--isolate", is_flag=True, help="One process per TF server task instead of one for all.")
@click.option("--servers", "servers_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Run on TF servers you already run, at the addresses of FILE (same formats as --cluster, and "
                   "the placement cluster unless --cluster is given); verify starts no server.")
@click.option("--reset-containers", is_flag=True,
              help="With --servers: clear the servers' resource containers first (Session.reset: their "
                   "variables, queues and accumulators are lost). Without it, state left by an earlier run "
                   "fails the run.")
@click.option("--feeds", "feeds_file", type=click.Path(dir_okay=False, exists=True),
              help="Input values (.npz: tensor name -> array, or worker<i>/name); default: seeded synthetic data.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic feeds.")
@click.option("--chief-queue-runner", type=click.Choice(["auto", "detected", "none"]), default="auto",
              show_default=True, help="auto: the queue_runners collection's (or the sync op placeviz built).")
@click.option("--worker-graph", "worker_graphs", metavar="I=MODEL", multiple=True,
              help="Between-graph replication: the graph worker task I's program built (repeatable); default: "
                   "the chief's graph (MODEL) on every task, without its chief-only state.")
@click.option("--allow-io", is_flag=True,
              help="Run ops that touch the file system or run code (WriteFile, ReadFile, Save/Restore, readers, "
                   "file datasets, PyFunc, custom ops...) instead of refusing the graph; local servers can then "
                   "write only in verify's temp dir.")
@click.option("--no-isolation", "no_isolation", is_flag=True,
              help="Run the local servers without private namespaces: reachable from other hosts, free to write "
                   "wherever you can. Without it, a kernel that refuses the namespaces means no run.")
@click.option("--mode", type=click.Choice(["sync", "async", "barrier"]), default="sync", show_default=True,
              help="sync: the SyncReplicas graph as TF runs it; async: the plain graph, each worker applying its own "
                   "updates (staleness, locking); barrier: sync with R=W and each worker allowed one step per global "
                   "step (the straggler's pace).")
@click.option("--slow-worker", "slow_workers", metavar="I=SECONDS", multiple=True,
              help="Delay worker I's gradients by SECONDS every step (repeatable; an op in verify's copy of the "
                   "graph, the file is not changed).")
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False), metavar="FILE.json",
              help="Write a Chrome trace (Perfetto, chrome://tracing) of every task's ops in every run.")
@click.option("--timeline", "timeline_file", type=click.Path(dir_okay=False), metavar="FILE.png|svg",
              help="Draw the worker lanes over time, step boundaries and the staleness histogram.")
@click.option("--loss", metavar="TENSOR", help="The scalar loss read after the run (default: the tensor the "
                                               "gradients were taken of, when it can be found).")
@click.option("--inject-fault", "fault", metavar="TASK@STEP", hidden=True,
              help="Testing: kill task process TASK (e.g. worker:2) after global step STEP (needs --isolate).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report here instead of stdout.")
@click.option("--tag", help="SavedModel: the MetaGraph tag (default: 'train', or the only one).")
@pretty_option
@place_options
@sync_options
def verify(model, workers, steps, timeout, isolate, servers_file, reset_containers, feeds_file, seed,
           chief_queue_runner, worker_graphs, allow_io, no_isolation, mode, slow_workers, trace_file, timeline_file,
           loss, fault, fmt, output, tag, pretty, place, sync) -> None:
    """Run MODEL's synchronous training on real TF servers (127.0.0.1, private network) and check it.

    Checks that K global steps make global_step == K, that every update ran once per step in the
    chief's sync run only, the values against numpy, stale gradients, and the partition graphs.
    --cluster FILE is the cluster the graph is placed on, as in every command: the local servers
    get its jobs and task counts. --servers FILE runs on servers you already run instead.
    The local servers run in private user, network and mount namespaces (only loopback; only
    verify's temp dir writable); a graph whose run would touch the file system or run code is
    refused unless --allow-io. Exit 0 when every check passes, 1 when one fails, 2 on bad input,
    130 on SIGINT, 143 on SIGTERM (nothing started is left running).
    """
    from placeviz.commands import verify as command

    command.main(model, place=place, sync=sync, workers=workers, steps=steps, timeout=timeout, isolate=isolate,
                 feeds_file=feeds_file, seed=seed, chief_queue_runner=chief_queue_runner, fault=fault, fmt=fmt,
                 output=output, tag=tag, servers_file=servers_file, reset_containers=reset_containers,
                 worker_graphs=worker_graphs, allow_io=allow_io, isolation=not no_isolation, mode=mode,
                 slow_workers=slow_workers, trace_file=trace_file, timeline_file=timeline_file, loss=loss,
                 pretty=pretty)


@cli.command("compare-modes", epilog=MODEL_HELP)
@click.argument("model")
@click.option("--workers", type=click.IntRange(min=2), default=3, show_default=True, help="Worker tasks W.")
@click.option("--steps", type=click.IntRange(min=1), default=10, show_default=True,
              help="Global steps K per mode (async: K runs in all).")
@click.option("--backup-workers", "backup", type=click.IntRange(min=0), default=1, show_default=True,
              help="B: the third run aggregates R = W - B gradients per step (0: leave that run out).")
@click.option("--slow-worker", "slow_workers", metavar="I=SECONDS", multiple=True,
              help="Delay worker I's gradients by SECONDS every step, in every mode (repeatable).")
@click.option("--loss", metavar="TENSOR", help="The scalar loss compared after K steps (default: the tensor the "
                                               "gradients were taken of).")
@click.option("--timeout", type=click.FloatRange(min=5), default=180.0, show_default=True,
              help="Seconds per run before a hang is reported.")
@click.option("--feeds", "feeds_file", type=click.Path(dir_okay=False, exists=True),
              help="Input values (.npz), as verify; default: seeded synthetic data (the same in every mode).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic feeds.")
@click.option("--allow-io", is_flag=True, help="As verify: run ops that touch the file system or run code.")
@click.option("--no-isolation", "no_isolation", is_flag=True, help="As verify: no private namespaces.")
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False), metavar="FILE.json",
              help="One Chrome trace of every task in every mode.")
@click.option("--timeline", "timeline_file", type=click.Path(dir_okay=False), metavar="FILE.png|svg",
              help="Worker lanes over time per mode, with the staleness and gradients panels.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the result here instead of stdout.")
@click.option("--tag", help="SavedModel: the MetaGraph tag (default: 'train', or the only one).")
@pretty_option
@place_options
def compare_modes(model, workers, steps, backup, slow_workers, loss, timeout, feeds_file, seed, allow_io,
                  no_isolation, trace_file, timeline_file, fmt, output, tag, pretty, place) -> None:
    """Run MODEL's plain training graph async, SyncReplicas (R=W, R=W-B) and barrier; compare them.

    The same W workers, seeded inputs and --slow-worker delays in every mode. One table: steps/s,
    time per step, token waits, staleness, which worker's gradients each step averaged or dropped,
    the loss after K steps, and the relations the runs show (placeviz.modes/1 JSON with --format
    json). Exit 0 when every run's checks pass, 1 otherwise, 2 on bad input.
    """
    from placeviz.commands import compare_modes as command

    command.main(model, place=place, workers=workers, steps=steps, backup=backup, slow_workers=slow_workers,
                 timeout=timeout, feeds_file=feeds_file, seed=seed, loss=loss, allow_io=allow_io,
                 isolation=not no_isolation, trace_file=trace_file, timeline_file=timeline_file, fmt=fmt,
                 output=output, tag=tag, pretty=pretty)


@cli.group()
def samples() -> None:
    """The bundled sample models, built with TensorFlow's real tf.compat.v1 API."""


@samples.command("list")
def samples_list() -> None:
    """List the sample models."""
    from placeviz.commands import samples as command

    command.list_samples()


@samples.command("build")
@click.argument("name")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Output file: .meta (MetaGraphDef with collections), .pbtxt (text GraphDef) or .pb.")
@click.option("--ps-tasks", type=click.IntRange(min=0), default=0, show_default=True,
              help="Build under replica_device_setter(ps_tasks=N); 0 builds an unplaced graph.")
@click.option("--worker-device", default="/job:worker/task:0", show_default=True)
@click.option("--strategy", type=click.Choice(["round-robin", "greedy"]), default="round-robin",
              show_default=True, help="PS strategy of the setter (greedy: byte-size load balancing).")
@click.option("--sync-replicas", is_flag=True, help="Wrap the optimizer in SyncReplicasOptimizer.")
@click.option("--replicas-to-aggregate", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--total-replicas", type=click.IntRange(min=1), default=None,
              help="Total workers (default: replicas to aggregate; more means backup workers).")
@click.option("--resource-variables", is_flag=True, help="Resource variables (VarHandleOp) instead of VariableV2.")
@click.option("--scale", type=click.IntRange(min=1), default=1, show_default=True,
              help="Size multiplier for samples that have one (e.g. transformer layers).")
def samples_build(name, output, ps_tasks, worker_device, strategy, sync_replicas, replicas_to_aggregate,
                  total_replicas, resource_variables, scale) -> None:
    """Build sample NAME into a file."""
    from placeviz.commands import samples as command
    from placeviz.sample_graphs.options import BuildOptions

    options = BuildOptions(
        ps_tasks=ps_tasks, worker_device=worker_device, ps_strategy=strategy, sync_replicas=sync_replicas,
        replicas_to_aggregate=replicas_to_aggregate, total_replicas=total_replicas,
        resource_variables=resource_variables, scale=scale,
    )
    command.build(name, output, options)


@cli.group()
def ops() -> None:
    """The op-facts table: what TensorFlow's op and kernel registries say about each op type."""


@ops.command("show")
@click.argument("op_type")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def ops_show(op_type: str, fmt: str) -> None:
    """Show inputs, outputs, statefulness and kernels per device type of OP_TYPE."""
    import json

    from placeviz import ops as op_facts

    table = op_facts.load_op_table()
    if fmt == "json":
        click.echo(json.dumps(op_facts.describe_op(op_type, table), indent=2))
    else:
        click.echo(op_facts.format_op(op_type, table))


@ops.command("generate")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Where to write the table (default: the one shipped with placeviz).")
def ops_generate(output: str | None) -> None:
    """Regenerate the op-facts table from the installed TensorFlow (needs placeviz[tf])."""
    from placeviz import ops_generate as generator
    from placeviz.progress import begin, finish

    begin("reading TensorFlow's op and kernel registries")
    summary = generator.format_summary(generator.generate(output))
    finish()
    click.echo(summary)


@cli.command()
@click.option("-o", "--output", "out_dir", default="placeviz-demo", show_default=True,
              type=click.Path(file_okay=False), help="Directory for the demo's files.")
def demo(out_dir: str) -> None:
    """Build a bundled sample and show everything placeviz can say about it."""
    from placeviz.commands import demo as command

    command.run(out_dir)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning placeviz errors into one stderr line and exit code 2.

    Signals end a run with one line and the shell's code, 128 + the signal number: 130 for
    SIGINT (Ctrl-C, which click turns into ``Abort``), 143 for SIGTERM, 129 for SIGHUP, after the
    stack unwound (see :mod:`placeviz.interrupts`). An OS error on a path (EACCES, EISDIR,
    ENOSPC...) that reached here is one line naming the path and the error, exit 2.
    The cyclic garbage collector is paused for the run (:mod:`placeviz.gcpause`).
    """
    from placeviz import progress
    from placeviz.gcpause import gc_paused
    from placeviz.interrupts import Terminated, handle_termination

    try:
        with handle_termination(), gc_paused():
            try:
                code = cli.main(args=argv, prog_name="placeviz", standalone_mode=False)
            finally:
                progress.finish()  # the line of the last stage begun, before any error line
    except click.exceptions.Exit as e:
        code = e.exit_code
    except click.ClickException as e:
        # it may quote a file name: one line, no escape sequences (click's stubs mark `message` Final,
        # but click itself only sets it in __init__; replacing it before show() is what we want)
        e.message = terminal_text(e.message)  # type: ignore[misc]
        e.show()
        code = 2 if isinstance(e, click.UsageError) else e.exit_code
    except click.Abort as e:
        interrupted = isinstance(e.__cause__, KeyboardInterrupt)
        click.echo("placeviz: interrupted" if interrupted else "placeviz: aborted", err=True)
        code = 130 if interrupted else 2
    except Terminated as e:
        click.echo(f"placeviz: terminated by {e.name}", err=True)
        code = e.exit_code
    except PlacevizError as e:
        if _debug:
            raise
        click.echo(f"placeviz: error: {terminal_text(str(e))}", err=True)
        code = e.exit_code
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    except KeyboardInterrupt:
        click.echo("placeviz: interrupted", err=True)
        code = 130
    except OSError as e:  # a permission or disk problem that no command turned into its own message
        if _debug:
            raise
        where = f"{e.filename}: " if e.filename is not None else ""
        click.echo(f"placeviz: error: {terminal_text(where + str(e.strerror or e))}", err=True)
        code = 2
    except Exception as e:  # noqa: BLE001 - the last line of defence: one line, exit 2
        if _debug:
            raise
        click.echo(f"placeviz: internal error: {type(e).__name__}: {terminal_text(str(e))} "
                   "(run with --debug for a traceback)", err=True)
        code = 2
    sys.exit(code or 0)


def run() -> None:
    """The ``placeviz`` program (the console script and ``python -m placeviz``): :func:`main`, then
    the process ends with main's exit code without tearing the interpreter down.

    Why: after the last line of output CPython still frees every module and object one by one
    (numpy, protobuf, click, the op table, the rules): about 0.05 s CPU of a cold ``lint`` of a
    100-node graph, a sixth of it (``benchmarks/README.md``, "Lint at pipeline speed"), which
    nobody waits for usefully; for the same reason the big results of a command are held to the end
    (:func:`placeviz.gcpause.keep_until_exit`). What a normal exit does that a user can see still happens: the
    ``atexit`` handlers run and stdout/stderr are flushed. The normal exit runs instead when
    TensorFlow was imported (its threads and exit handlers), another thread that is not a daemon
    is alive, or the exit status is not a number. Tests call :func:`main` in-process, never this.
    """
    import threading

    from placeviz.blas_threads import one_thread
    from placeviz.gcpause import hold_until_exit

    one_thread()  # before numpy is imported: OpenBLAS's idle threads spin for nothing (placeviz.blas_threads)
    hold_until_exit()  # the commands' results are not freed one by one before os._exit
    code: int | None = 0
    try:
        main()
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            raise
        code = e.code
    run_exit_handlers = getattr(__import__("atexit"), "_run_exitfuncs", None)
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if "tensorflow" in sys.modules or others or run_exit_handlers is None:
        sys.exit(code)
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away, a closed stream: nothing more to say there
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    run()
