"""``placeviz partition``: one GraphDef per device (or task) plus ``index.json``, as TF's runtime splits it.

The output directory is written as a whole (:func:`placeviz.io.write_directory`): a fresh
temporary directory next to ``-o DIR`` renamed into place, so a reader (or an interrupted run)
never sees a partial set of partitions or stale files of an earlier run mixed with new ones. An
earlier partition output in DIR is replaced; any other non-empty directory is refused.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from placeviz.commands.output import notice, progress, to_json_pieces
from placeviz.coverage import refuse_serving_graph
from placeviz.errors import PlacevizError
from placeviz.gcpause import keep_until_exit
from placeviz.io import check_directory_output, load, write_directory
from placeviz.partition import SCHEMA
from placeviz.pipeline import Options, run_pipeline
from placeviz.progress import begin
from placeviz.sizes import transfers_text

INDEX = "index.json"
KIND = "placeviz partition output"
_MAX_STEM = 200
"""Longest file name stem kept from a device name (NAME_MAX is 255 bytes; the stem is ASCII)."""
_MAX_INDEX_BYTES = 1 << 30
"""An ``index.json`` bigger than this is not read when judging whether a directory is ours."""


def run(model_spec: str, out_dir: str, options: Options, *, pretty: bool = False) -> None:
    """Place MODEL and write the partitions of ``options.step`` (the whole graph without fetches
    and targets, ``train_op_by_default=False``).

    The static pipeline (:func:`placeviz.pipeline.run_pipeline`) does the work, without its
    report: the SYNC options rewrite a plain graph into SyncReplicas form first, as for ``analyze``.
    """
    model = load(model_spec, tag=options.tag, keep_bytes=True)  # partitions are written from the file's bytes
    refuse_serving_graph(model)
    check_directory_output(out_dir, replaceable=is_partition_output, kind=KIND)  # before the long part
    pipe = run_pipeline(model, options, progress=lambda message: begin(message.rstrip(" .")))
    for note in pipe.notes:
        notice(f"note: {note}")
    parts = pipe.partitions
    if parts is None:  # TF's placer or partitioner would refuse the graph: that is the answer, as an error
        raise PlacevizError(pipe.placement_error or pipe.partition_error or "the graph was not partitioned")
    del pipe  # the placement's per-node lists (reasons, groups, the setter's record): not needed to write
    names = partition_file_names(parts.keys)
    begin(f"writing {len(names):,} partitions")

    def files():
        # Each partition in pieces of bytes, each written and dropped before the next is made
        # (from the input's bytes where a node only changes device, placeviz.nodewire);
        # index.json last, made when no partition's bytes are held.
        for device, pieces in parts.iter_serialized(pieces=True):
            yield names[device], pieces
        index = parts.to_json(columns=True)
        for entry in index["partitions"]:
            entry["file"] = names[entry["device"]]
        yield INDEX, to_json_pieces(index, pretty=pretty)

    write_directory(out_dir, files(), replaceable=is_partition_output, kind=KIND)
    count, total, unknown, control = parts.table.totals()
    progress(f"wrote {len(names)} partitions and {INDEX} to {out_dir}: "
             f"{transfers_text(count, total, unknown, control)}")
    keep_until_exit(model, parts)  # not freed one by one just before the process ends (placeviz.gcpause)


def partition_file_name(device: str) -> str:
    """``/job:ps/replica:0/task:1/device:CPU:0`` -> ``job_ps_replica_0_task_1_device_CPU_0.pb``.

    Two devices can give one name (``/job:ps`` and ``/job:ps_``): a whole output uses
    :func:`partition_file_names`, which keeps them apart.
    """
    stem = re.sub(r"[^A-Za-z0-9]+", "_", device).strip("_") or "partition"
    return stem[:_MAX_STEM] + ".pb"


def partition_file_names(devices: Iterable[str]) -> dict[str, str]:
    """A distinct file name per device: :func:`partition_file_name`, plus ``_`` and the first 10 hex
    digits of the SHA-256 of the full device name when two devices would share a name (compared
    case-insensitively, as macOS and Windows file systems compare them) or the device name was cut.

    The hash depends on the device name only, so a file's name is the same in every run.
    """
    devices = list(dict.fromkeys(devices))
    plain = {d: partition_file_name(d) for d in devices}
    shared = Counter(name.casefold() for name in plain.values())

    def hashed(device: str, digits: int) -> str:
        import hashlib  # only for clashing or cut names (a cold start pays its import otherwise)

        stem = plain[device][:-len(".pb")][:_MAX_STEM - digits - 1]
        return f"{stem}_{hashlib.sha256(device.encode('utf-8', 'surrogatepass')).hexdigest()[:digits]}.pb"

    names = {d: hashed(d, 10) if shared[plain[d].casefold()] > 1 or _was_cut(d) else plain[d] for d in devices}
    if len({n.casefold() for n in names.values()}) < len(names):  # a hashed name met a plain one
        names = {d: hashed(d, 32) for d in devices}
    return names


def _was_cut(device: str) -> bool:
    return len(re.sub(r"[^A-Za-z0-9]+", "_", device).strip("_")) > _MAX_STEM


def is_partition_output(directory: Path) -> bool:
    """Whether ``directory`` holds exactly what ``placeviz partition`` writes: an ``index.json`` of
    schema ``placeviz.partition/1`` and regular files it lists, nothing else (so replacing the
    directory loses nothing but an earlier partition output)."""
    index_path = directory / INDEX
    try:
        st = os.stat(index_path, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_INDEX_BYTES:
            return False
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        listed = _listed.get(identity)
        if listed is None:
            listed = _files_listed(json.loads(index_path.read_bytes()))
            if listed is None:
                return False
            _listed.clear()
            _listed[identity] = listed
    except (OSError, ValueError):
        return False
    try:
        with os.scandir(directory) as entries:
            return all(entry.name == INDEX or (entry.name in listed and entry.is_file(follow_symlinks=False))
                       for entry in entries)
    except OSError:
        return False


def _files_listed(index: object) -> frozenset[str] | None:
    """The ``file`` of each partition an ``index.json`` lists, or None when it is not one of ours
    (a ``file`` that is not a string names no file: an unhashable one no longer raises)."""
    if not isinstance(index, dict) or index.get("schema") != SCHEMA or not isinstance(index.get("partitions"), list):
        return None
    files = (entry.get("file") for entry in index["partitions"] if isinstance(entry, dict))
    return frozenset(f for f in files if isinstance(f, str))


_listed: dict[tuple[int, ...], frozenset[str]] = {}
"""The last ``index.json`` :func:`is_partition_output` read, by identity (device, inode, size,
modification and change times in ns): its listed files. ``partition`` asks twice, before the
long part and when it replaces the directory; parsing a 200k-node graph's index (10 MB, a dict
per transfer) costs 0.1 s each time. Any write to the file changes its change time, so a
rewritten index is read again."""
