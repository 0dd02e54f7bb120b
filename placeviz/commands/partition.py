"""``placeviz partition``: one GraphDef per device (or task) plus ``index.json``, as TF's runtime splits it."""

from __future__ import annotations

import re
from pathlib import Path

from placeviz.commands.output import progress, to_json
from placeviz.errors import PlacevizError
from placeviz.io import atomic_write, load, save_proto
from placeviz.partition import partition
from placeviz.pipeline import client_device
from placeviz.placement import place_graph


def run(model_spec: str, out_dir: str, options, *, fetches, targets, feeds, level: str,
        replicate_constants: bool, tag: str | None = None) -> None:
    model = load(model_spec, tag=tag)
    progress("placing ...")
    result = place_graph(model.graph, options)
    progress(f"partitioning ({level} level) ...")
    parts = partition(result.graph, result.placement.devices, fetches=fetches, targets=targets, feeds=feeds,
                      level=level, replicate_constants=replicate_constants,
                      client_device=client_device(options.placer.master_task))
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PlacevizError(f"{out}: cannot create the output directory: {e.strerror}") from None
    index = parts.to_json()
    files = {}
    for device, graph_def in parts.partitions.items():
        name = partition_file_name(device)
        save_proto(graph_def, out / name)
        files[device] = name
    for entry in index["partitions"]:
        entry["file"] = files[entry["device"]]
    atomic_write(out / "index.json", to_json(index))
    total = sum(t["bytes"] or 0 for t in parts.transfers)
    progress(f"wrote {len(files)} partitions and index.json to {out}: {len(parts.transfers)} transfers, "
             f"{total:,} bytes per step where shapes are known")


def partition_file_name(device: str) -> str:
    """``/job:ps/replica:0/task:1/device:CPU:0`` -> ``job_ps_replica_0_task_1_device_CPU_0.pb``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", device).strip("_") + ".pb"
