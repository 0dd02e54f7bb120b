"""Overview: the device quotient graph. One box per device, edges weighted by bytes per step.

However big the graph, this picture has as many boxes as the cluster has devices, so it always
lays out in well under a second; it is the first thing a reader should see (what runs where, how
much state each PS holds, what crosses the network every step).
"""

from __future__ import annotations

from collections import Counter

from placeviz.devices import job_of
from placeviz.render.context import ViewContext, pen_width
from placeviz.render.diagram import Box, Cluster, Diagram, Edge, LegendItem
from placeviz.sizes import transfers_text

TRAFFIC_COLOR = "#c0392b"
IDLE_COLOR = "#999999"


def job_clusters(ctx: ViewContext) -> dict[str, Cluster]:
    """One cluster per job (``ps``, ``worker``...), keyed by job name."""
    out = {}
    for d in ctx.device_list:
        job = job_of(d) or ""  # "": no job, also NO_DEVICE (a string that names none)
        if job not in out:
            out[job] = Cluster(("job", job), f"job {job}" if job else "no job",
                               fill="#fdf6e3" if job == "ps" else "#f3f8fc" if job else "#f5f5f5")
    return out


def build_overview(ctx: ViewContext, focus: int | None = None) -> Diagram:
    """The device quotient graph; ``focus`` (an op id) outlines the device it runs on."""
    g = ctx.graph
    d = Diagram("overview", f"{ctx.pipe.model.source}: devices and traffic per step ({len(g):,} ops)")
    jobs = job_clusters(ctx)
    for job, cluster in jobs.items():
        # The PS tasks rank above the workers (every step reads the variables from them), so the
        # traffic enters a worker cluster from above, across where its label would be.
        cluster.label_below = job != "ps"
    d.clusters.extend(jobs.values())
    ps_total = sum(b for dev, (_, b) in ctx.variables_per_device.items() if job_of(dev) == "ps") or 0
    for dev in ctx.device_list:
        n_vars, n_bytes = ctx.variables_per_device.get(dev, (0, 0))
        lines = [ctx.device_label(dev), f"{ctx.ops_per_device[dev]:,} ops"]
        if n_vars:
            share = f" ({100 * n_bytes / ps_total:.0f}% of PS)" if job_of(dev) == "ps" and ps_total else ""
            noun = "variable" if n_vars == 1 else "variables"
            lines.append(f"{n_vars:,} {noun}, {ctx.variable_bytes_text(dev)}{share}")
        box = Box(("dev", dev), "\n".join(lines), cluster=jobs[job_of(dev) or ""].key,
                  fill=ctx.colors[dev], tooltip=dev, penwidth=1.5)
        if focus is not None and ctx.devices[focus] == dev:
            box.border, box.penwidth = "#d62728", 3.0
            box.label += f"\nruns {ctx.graph.names[focus]}"
        d.boxes.append(box)

    per_pair: dict[tuple[str, str], list[int]] = {}
    for t in ctx.transfers:
        row = per_pair.setdefault((t["src_device"], t["dst_device"]), [0, 0, 0, 0])
        row[0] += 1
        row[1] += t["bytes"] or 0
        row[2] += t["slot"] == "control"
        row[3] += t["slot"] != "control" and t["bytes"] is None
    top = max((r[1] for r in per_pair.values()), default=0)
    devs = set(ctx.device_list)
    for (src, dst), (count, nbytes, control, unknown) in sorted(per_pair.items()):
        if src not in devs or dst not in devs:
            continue  # the client's feed/fetch devices are not graph devices
        label = transfers_text(count, nbytes, unknown, control, sep="\n")
        tip = f"{src} -> {dst}: {transfers_text(count, nbytes, unknown, control)}"
        d.edges.append(Edge(("dev", src), ("dev", dst), label=label, tooltip=tip, color=TRAFFIC_COLOR,
                            penwidth=pen_width(nbytes, top), priority=nbytes))
    idle = Counter({k: v for k, v in ctx.cross_device_edges.items() if k not in per_pair})
    for (src, dst), n in sorted(idle.items()):
        d.edges.append(Edge(("dev", src), ("dev", dst), label=f"{n:,} edges", style="dashed", color=IDLE_COLOR,
                            tooltip=f"{src} -> {dst}: {n:,} graph edges that the step does not run"))
    d.notes.append(ctx.step_note())
    d.legend = [LegendItem("parameter-server task", fill="#f6c343"), LegendItem("worker task", fill="#8ecae6"),
                LegendItem("bytes sent per step (width: amount)", fill=TRAFFIC_COLOR, line="bold"),
                LegendItem("graph edges not run by the step", fill=IDLE_COLOR, line="dashed")]
    return d
