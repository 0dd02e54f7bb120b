"""``placeviz analyze``: load a model and report what it holds, as tables or JSON.

The text report is rich markup: every string from the model (names, op types, devices, file
names, messages quoting them) goes through :func:`_t` first, so ``[link=...]`` in an op type is
not a terminal hyperlink and ``ESC ] 0 ;`` in a device does not retitle the terminal. rich is
imported only when the text report is made: ``--format json`` does not pay for its import (about
0.045 s CPU, a fifth of the parse floor of a 200k-node graph).
"""

from __future__ import annotations

from placeviz.analysis import Analysis
from placeviz.commands.output import emit, render_rich, to_json
from placeviz.errors import PlacevizError
from placeviz.escape import terminal_text
from placeviz.gcpause import keep_until_exit
from placeviz.pipeline import Options, run_pipeline
from placeviz.placement.explain import explain_lines, explain_node
from placeviz.sizes import bar, bytes_at_least, human_bytes, traffic_total

TOP_OPS = 15
VARIABLES_SHOWN = 40
VARIABLES_BY_TASK_SHOWN = 60
VARIABLES_PER_DEVICE_MIN = 5


def run(model_spec: str, options: Options, *, fmt: str, output: str | None, explain: tuple[str, ...] = (),
        worker_graphs=(), pretty: bool = False) -> Analysis:
    """Load MODEL, run the static pipeline (sync pass, placement, partition) as ``options`` say and
    emit the report.

    ``explain``: ``--explain NODE`` values (they need placement: ``options.place_always``).
    ``worker_graphs``: ``--worker-graph I=MODEL`` values; with them (or a builder taking
    ``task_index`` and a known number of workers) the report's ``agreement`` compares the tasks' graphs.
    """
    from placeviz.io import load
    from placeviz.tasks import check_workers_range, cluster_workers, parse_worker_graphs, task_pipelines

    tasks = parse_worker_graphs(worker_graphs)
    workers = cluster_workers(options.placement)
    check_workers_range(tasks, workers)
    model = load(model_spec, tag=options.tag)
    pipe = run_pipeline(model, options)
    report = pipe.report
    if tasks or model.per_task:
        from placeviz.agreement import check_agreement  # its dataclasses: made only when used

        pipes, sources = task_pipelines(model, pipe, model_spec, tasks, options, workers=workers)
        report.agreement_result = check_agreement(pipes, sources)
    if explain:
        if pipe.placement_error is not None:
            # --explain asks about placement itself: its failure is the answer, as an error.
            raise PlacevizError(pipe.placement_error)
        report.explain = [explain_node(pipe.placement, name) for name in explain]
    emit(to_json(report.to_json(), pretty=pretty) if fmt == "json" else format_text(report), output)
    keep_until_exit(model, pipe, report)
    return report


def _t(value) -> str:
    """Model text for rich: control characters shown escaped (:func:`~placeviz.escape.terminal_text`),
    then rich's markup escaped (a ``[tag]`` stays text)."""
    from rich.markup import escape

    return escape(terminal_text(str(value)))


def format_text(report: Analysis) -> str:
    return render_rich(lambda console: _print_report(console, report))


def _print_report(console, r: Analysis) -> None:
    from rich.table import Table

    console.print(f"[bold]{_t(r.model)}[/bold]  ({r.kind}, GraphDef producer {r.producer})")
    console.print(
        f"{r.node_count:,} nodes, {r.data_edge_count:,} data edges, {r.control_edge_count:,} control "
        f"edges, {r.function_count} library functions; {len(r.variables)} variables holding "
        f"{bytes_at_least(r.variable_bytes, r.unknown_size_variables, len(r.variables))}"
    )
    console.print()

    ops = Table(title="Op types", title_justify="left")
    ops.add_column("op")
    ops.add_column("nodes", justify="right")
    items = list(r.op_histogram.items())
    for op, count in items[:TOP_OPS]:
        ops.add_row(_t(op), f"{count:,}")
    if len(items) > TOP_OPS:
        rest = sum(c for _, c in items[TOP_OPS:])
        ops.add_row(f"({len(items) - TOP_OPS} more op types)", f"{rest:,}")
    console.print(ops)

    by_device = r.variable_bytes_by_device()
    devices = Table(title="Requested devices (as written in the graph)", title_justify="left")
    devices.add_column("device")
    devices.add_column("nodes", justify="right")
    devices.add_column("variables", justify="right")
    devices.add_column("variable bytes", justify="right")
    var_counts: dict[str, int] = {}
    for v in r.variables:
        var_counts[v.device] = var_counts.get(v.device, 0) + 1
    for device, count in r.requested_devices.items():
        devices.add_row(_t(device or "(none)"), f"{count:,}", str(var_counts.get(device, 0)),
                        human_bytes(by_device.get(device, 0)))
    console.print(devices)

    placed = r.placement is not None and "error" not in r.placement
    if r.variables and not placed:
        table = Table(title="Variables", title_justify="left")
        for col in ("name", "op", "dtype", "shape", "bytes", "trainable", "device"):
            table.add_column(col, justify="right" if col == "bytes" else "left")
        for v in r.variables[:VARIABLES_SHOWN]:
            shape = _shape(v.shape)
            trainable = "?" if v.trainable is None else ("yes" if v.trainable else "no")
            name = v.name + (f"  (part of {v.partition_of})" if v.partition_of else "")
            table.add_row(_t(name), _t(v.op), _t(v.dtype), shape, human_bytes(v.bytes), trainable,
                          _t(v.device or "(none)"))
        if len(r.variables) > VARIABLES_SHOWN:
            table.add_row(f"... {len(r.variables) - VARIABLES_SHOWN} more (use --format json)", "", "", "",
                          "", "", "")
        console.print(table)

    if r.other_state:
        console.print(f"Other state: {len(r.other_state)} nodes ("
                      + _t(", ".join(sorted({s['op'] for s in r.other_state}))) + ")")
    if r.unplaced_count:
        shown = ", ".join(r.unplaced_sample[:8])
        more = f" and {r.unplaced_count - 8:,} more" if r.unplaced_count > 8 else ""
        console.print(f"Unplaced: {r.unplaced_count:,} of {r.node_count:,} nodes request no device "
                      f"({_t(shown)}{more})")
    else:
        console.print("Unplaced: none, every node requests a device")
    if r.train_ops:
        console.print("Train ops: " + _t(", ".join(r.train_ops)))
    for note in r.notes:
        console.print(f"[dim]note: {_t(note)}[/dim]")
    if r.sync is not None:
        _print_sync(console, r.sync)
    if r.placement is not None:
        _print_placement(console, r.placement)
        if placed and r.variables:
            _print_variables_by_task(console, r)
    if r.partition is not None:
        _print_traffic(console, r.partition)
    if r.agreement is not None:
        _print_agreement(console, r.agreement)


def _print_agreement(console, a: dict) -> None:
    console.print()
    tasks = _t(", ".join(f"{t['task']} ({t['source']})" for t in a["tasks"]))
    compared = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in sorted(a["compared"].items())) or "nothing"
    verdict = "[bold green]agree[/bold green]" if a["agree"] else "[bold red]disagree[/bold red]"
    console.print(f"Between-graph replication: tasks {tasks}; shared {compared} compared: the tasks' graphs {verdict}")
    shown = a["disagreements"][:20]
    for d in shown:
        color = {"error": "red", "warning": "yellow"}.get(d["severity"], "dim")
        console.print(f"  [{color}]{d['severity']}[/{color}] {_t(d['message'])}")
    if len(a["disagreements"]) > len(shown):
        console.print(f"  ... {len(a['disagreements']) - len(shown)} more (use --format json)")
    for note in a.get("notes", []):
        console.print(f"[dim]note: {_t(note)}[/dim]")


def _print_traffic(console, p: dict) -> None:
    from rich.table import Table

    console.print()
    if "error" in p:
        console.print(f"[bold red]Partitioning failed:[/bold red] {_t(p['error'])}")
        return
    console.print(f"Network traffic for {_t(p['run']['what'])}"
                  + (f" ({_t(', '.join(p['run']['targets'] + p['run']['fetches']))})" if p['run']['targets'] or
                     p['run']['fetches'] else "")
                  + f": {traffic_total(p)}")
    table = Table(title="Per task", title_justify="left")
    for col in ("task", "sent per step", "received per step"):
        table.add_column(col, justify="left" if col == "task" else "right")
    for t in p["tasks"]:
        table.add_row(_t(t["task"]), bytes_at_least(t["sent_bytes"], t.get("sent_unknown", 0)),
                      bytes_at_least(t["received_bytes"], t.get("received_unknown", 0)))
    console.print(table)
    if p["variable_reads"]:
        reads = Table(title="Variables read across the network per step", title_justify="left")
        for col in ("variable", "reads", "bytes", "read by"):
            reads.add_column(col, justify="right" if col in ("reads", "bytes") else "left")
        for v in p["variable_reads"][:15]:
            count = str(v["reads_per_step"]) + (" per iteration" if v.get("per_iteration_of") else "")
            reads.add_row(_t(v["variable"]), count,
                          bytes_at_least(v["bytes_per_step"], v.get("unknown_size_reads", 0), v["reads_per_step"]),
                          _t(", ".join(v["to_tasks"])))
        console.print(reads)
    for note in p.get("notes", []):
        console.print(f"[dim]note: {_t(note)}[/dim]")


def _print_variables_by_task(console, r: Analysis) -> None:
    """Which device holds each variable: the question behind ``--ps-tasks``. One table per device,
    titled with its full runtime name (never cut); slots are folded into their variable's row (TF
    builds them under ``colocate_with`` the variable, so the placer keeps them on its device);
    sorted by device, then by bytes. Each device shows its largest variables (at least
    ``VARIABLES_PER_DEVICE_MIN``, sharing ``VARIABLES_BY_TASK_SHOWN`` rows), so a big embedding on
    any task is always in view; the JSON lists them all."""
    from rich.table import Table

    by_device: dict[str, list] = {}
    for v in r.variables:
        by_device.setdefault(v.placed_device or "", []).append(v)
    per_device = max(VARIABLES_PER_DEVICE_MIN, VARIABLES_BY_TASK_SHOWN // max(1, len(by_device)))
    console.print()
    console.print("[bold]Variables by PS task[/bold] (device after placement; slots: the optimizer's slot "
                  "variables, on the same device)")
    for device in sorted(by_device):
        every = by_device[device]
        rows = sorted((v for v in every if v.slot_of is None), key=lambda v: (-(v.bytes or 0), v.name))
        known = sum(v.bytes or 0 for v in every)
        unknown = sum(1 for v in every if v.bytes is None)
        slots = sum(v.bytes or 0 for v in every if v.slot_of is not None)
        title = (f"{_t(device or '(not placed)')}: {len(every)} variable{'s' if len(every) != 1 else ''}, "
                 f"{bytes_at_least(known, unknown, len(every))} (slots {human_bytes(slots)})")
        slot_names = sorted({sl["slot"] for v in rows for sl in v.slots})
        table = Table(title=title, title_justify="left", expand=True,
                      caption=f"slots: {_t(', '.join(slot_names))}" if slot_names else None, caption_justify="left")
        for col in ("variable", _t("dtype[shape]"), "bytes", "slots", "placed by"):
            table.add_column(col, justify="right" if col in ("bytes", "slots") else "left", overflow="fold",
                             ratio=1 if col == "variable" else None)
        for v in rows[:per_device]:
            table.add_row(_t(v.name), _t(f"{v.dtype}{_shape(v.shape)}"), human_bytes(v.bytes),
                          human_bytes(v.slot_bytes) if v.slots else "", _t(v.placed_by or ""))
        if len(rows) > per_device:
            table.add_row(f"... {len(rows) - per_device:,} smaller on this device (use --format json)", *[""] * 4)
        console.print(table)


def _shape(shape) -> str:
    return "?" if shape is None else "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _print_sync(console, sync: dict) -> None:
    from rich.table import Table

    console.print()
    verdict = ("[bold green]holds[/bold green]: every trainable variable and the global step are updated "
               "once per global step, by the chief's sync op only" if sync["single_update"]
               else "[bold red]violated[/bold red]")
    backup = sync.get("backup_workers")
    console.print(f"SyncReplicas: R={sync.get('replicas_to_aggregate')} gradients per step, "
                  f"{sync.get('tokens_per_step')} tokens per step"
                  + (f", {backup} backup worker(s)" if backup else "")
                  + f"; worker train op {_t(', '.join(sync.get('worker_train_ops') or ['?']))}, "
                  f"chief sync op {_t(', '.join(sync.get('sync_ops') or ['?']))}")
    console.print(f"Single update per step: {verdict}")
    for v in sync["violations"][:10]:
        console.print(f"  [red]violation[/red] {v['kind']}: {_t(v['message'])}")
    table = Table(title="Per-variable verdicts", title_justify="left")
    for col in ("variable", "verdict", "updates per step", "evidence"):
        table.add_column(col)
    for v in sync["variables"][:VARIABLES_SHOWN]:
        evidence = v["evidence"][0]["path"] if v["evidence"] else []
        path = " <- ".join(evidence[:4]) + (" ..." if len(evidence) > 4 else "")
        table.add_row(_t(v["name"]), v["verdict"], str(v.get("updates_per_step", "")), _t(path))
    if len(sync["variables"]) > VARIABLES_SHOWN:
        table.add_row(f"... {len(sync['variables']) - VARIABLES_SHOWN} more (use --format json)", "", "", "")
    console.print(table)
    per_worker = sync.get("per_worker_updates") or []
    if per_worker:
        names = sorted({u["variable"] for u in per_worker})
        console.print(f"Updated by every worker run (not synchronized, allowed): {len(names)} variables, e.g. "
                      + _t(", ".join(names[:5])))


def _print_placement(console, p: dict) -> None:
    from rich.table import Table

    console.print()
    if "error" in p:
        console.print(f"[bold red]Placement fails as TensorFlow's would:[/bold red] {_t(p['error'])}")
        return
    how = "setter replayed, then placer" if p["setter_ran"] else "graph's own devices, then placer"
    table = Table(title=f"Placement ({how}); variable bytes include optimizer slots", title_justify="left")
    for col in ("task", "nodes", "variables", "variable bytes", "of which slots", "load"):
        table.add_column(col, justify="left" if col in ("task", "load") else "right",
                         overflow="fold" if col == "task" else "ellipsis", no_wrap=col == "load")
    top = max((t["variable_bytes"] for t in p["tasks"]), default=0)
    for t in p["tasks"]:
        table.add_row(_t(t["task"]), f"{t['nodes']:,}", str(t["variables"]),
                      bytes_at_least(t["variable_bytes"], t.get("unknown_size_variables", 0), t["variables"]),
                      human_bytes(t.get("slot_bytes", 0)), bar(t["variable_bytes"], top))
    console.print(table)
    balance = p["ps_balance"]
    if balance["max_over_mean"] is not None:
        console.print(f"PS balance ({_t(balance['job'])}): max {human_bytes(balance['max_variable_bytes'])}, mean "
                      f"{human_bytes(int(balance['mean_variable_bytes']))}, max/mean {balance['max_over_mean']:.2f}")
    for e in p.get("explain", []):
        head, *reasons = explain_lines(e)
        console.print(f"\n[bold]{_t(head)}[/bold]")
        for line in reasons:
            console.print(f"  {_t(line)}")
