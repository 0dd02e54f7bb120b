"""What crosses the network every step: a summary of a task-level partition.

Built from :func:`placeviz.partition.partition` at ``level="task"`` for one run (the training step):
bytes per step for every pair of tasks, sent and received per task, the largest transfers, and how
many times each variable's value is read across the network per step.
"""

from __future__ import annotations

from collections import Counter
from functools import cache

from placeviz.devices import task_of as device_task
from placeviz.graph import CONTROL, Graph
from placeviz.limits import overflows, tensor_bytes
from placeviz.op_kinds import VARIABLE_OPS, VARIABLE_READ_OPS
from placeviz.partition import PartitionResult
from placeviz.protos import DTYPE_SIZE, dtype_name

TOP_TRANSFERS = 10
_READ_OPS = VARIABLE_READ_OPS | {"Enter", "RefEnter", "Switch", "RefSwitch"}
"""A variable's reads, and the control-flow ops that pass its value into a loop or a branch."""


def variable_behind(graph: Graph, name: str) -> str | None:
    """The variable a tensor reads (through Identity/ReadVariableOp/Enter/Switch), or None."""
    return _variable_behind_id(graph, graph.index.get(name))


def _variable_behind_id(graph: Graph, i: int | None) -> str | None:
    """:func:`variable_behind` of node ``i`` (None: no such node)."""
    ops = graph.ops
    for _ in range(8):
        if i is None:
            return None
        op = ops[i]
        if op in VARIABLE_OPS:
            return graph.names[i]
        if op not in _READ_OPS:
            return None
        in_slot = graph.in_slot
        i = next((graph.in_src[k] for k in range(graph.in_start[i], graph.in_start[i + 1]) if in_slot[k] != CONTROL),
                 None)  # the first data input
    return None


def assume_batch(transfers: list[dict], batch_size: int) -> list[dict]:
    """The transfers with an unknown leading (batch) dimension sized as ``batch_size`` (``--batch-size``).

    A tensor fed per step (``placeholder(shape=[None, ...])``) has a batch dimension TF only
    learns at run time, so its ``_Send``/``_Recv`` pair has no static size (see
    :func:`placeviz.partition.partition`). Only a shape whose *first* dimension alone is unknown is
    resolved; the resolved transfers are new dicts with ``bytes`` filled and ``assumed_batch``
    set, the others are the same objects. The partitions themselves are not changed.
    """
    sizes = _size_by_name()
    out = []
    for t in transfers:
        shape = t.get("shape")
        if (t["slot"] != "control" and t["bytes"] is None and isinstance(shape, list) and shape
                and shape[0] is None and None not in shape[1:]):
            nbytes = tensor_bytes(sizes.get(t.get("dtype")), [batch_size, *shape[1:]])
            if nbytes is not None:
                t = {**t, "bytes": nbytes, "assumed_batch": batch_size}
        out.append(t)
    return out


def traffic_summary(graph: Graph, parts: PartitionResult, run: dict, batch_size: int | None = None) -> dict:
    """The ``traffic`` part of the ``partition`` section of ``placeviz.analysis/1``.

    A transfer of unknown size adds nothing to the bytes and one to the ``unknown`` counts next to
    them (``unknown_size_transfers``, per task ``sent_unknown``/``received_unknown``, per pair
    ``unknown_bytes``, per variable ``unknown_size_reads``): the bytes are then a lower bound.
    """
    transfers = [t for t in parts.transfers if t["level"] == "task"]
    # One pass over the transfers (tens of thousands a step) adds them up per pair of *devices*
    # (a few); the per-task rows and counts are folded from those sums below. Per device pair:
    # [transfers, control, bytes, unknown-size transfers, transfers sized with --batch-size].
    by_devices: dict[tuple[str, str], list[int]] = {}
    unknown_size: list[dict] = []  # the non-control transfers of unknown size (for the overflow note)
    data: list[dict] = []  # the transfers of a tensor (not control), in order
    sizes: list[int] = []  # their bytes (0 when unknown), for the largest transfers
    for t in transfers:
        key = (t["src_device"], t["dst_device"])
        acc = by_devices.get(key)
        if acc is None:
            acc = by_devices[key] = [0, 0, 0, 0, 0]
        acc[0] += 1
        if t["slot"] == "control":
            acc[1] += 1
            continue
        data.append(t)
        if (nbytes := t["bytes"]) is None:
            acc[3] += 1
            unknown_size.append(t)
            sizes.append(0)
        else:
            acc[2] += nbytes
            acc[4] += "assumed_batch" in t
            sizes.append(nbytes)
    pairs: dict[tuple[str, str], dict] = {}
    sent: Counter = Counter()
    received: Counter = Counter()
    sent_unknown: Counter = Counter()
    received_unknown: Counter = Counter()
    unknown = control = assumed = 0
    task_of: dict[str, str] = {}  # device -> its task
    for src_device, dst_device in by_devices:
        for d in (src_device, dst_device):
            if d not in task_of:
                task = device_task(d, replica=True)
                task_of[d] = d if task is None else task  # d: a string TF cannot parse
    for (src_device, dst_device), (count, n_control, nbytes, n_unknown, n_assumed) in by_devices.items():
        src, dst = task_of[src_device], task_of[dst_device]
        row = pairs.get((src, dst))
        if row is None:
            row = pairs[(src, dst)] = {"src_task": src, "dst_task": dst, "transfers": 0, "control": 0,
                                       "bytes": 0, "unknown_bytes": 0}
        row["transfers"] += count
        row["control"] += n_control
        row["bytes"] += nbytes
        row["unknown_bytes"] += n_unknown
        control += n_control
        unknown += n_unknown
        assumed += n_assumed
        if n_unknown:
            sent_unknown[src] += n_unknown
            received_unknown[dst] += n_unknown
        if count - n_control - n_unknown:  # some transfer of known size: the task sent and received bytes
            sent[src] += nbytes
            received[dst] += nbytes
    from placeviz.sync.proof import loop_frames

    frames = loop_frames(graph)  # None when the graph has no while loops
    # Per variable: [reads, bytes, reads of unknown size, receiving tasks, loop frames of the readers].
    reads: dict[str, list] = {}
    # A tensor sent to several tasks is one transfer per task: its variable is looked up once.
    # Most sources are neither a variable nor one of its reads: their op settles it without a call.
    behind: dict[str, str | None] = {}
    in_loops = False  # some read crosses the network inside a while loop
    index, ops, names = graph.index, graph.ops, graph.names
    for t in data:
        src_name = t["src"]
        var: str | None
        if src_name in behind:
            var = behind[src_name]
        else:
            i = index.get(src_name)
            if i is None:
                var = None
            elif ops[i] in VARIABLE_OPS:
                var = names[i]
            elif ops[i] in _READ_OPS:
                var = _variable_behind_id(graph, i)
            else:
                var = None
            behind[src_name] = var
        if var is not None:
            r = reads.get(var)
            if r is None:
                r = reads[var] = [0, 0, 0, set(), set()]
            r[0] += 1
            if (nbytes := t["bytes"]) is None:
                r[2] += 1
            else:
                r[1] += nbytes
            r[3].add(task_of[t["dst_device"]])
            if frames is not None:
                # A transfer inside a while loop runs once per iteration (the receiving node's frame).
                dst_id = index.get(t.get("dst") or "")
                frame = frames[dst_id] if dst_id is not None else None
                if frame:
                    r[4].add(frame)
                    in_loops = True
    tasks = sorted(set(sent) | set(received) | {p[0] for p in pairs} | {p[1] for p in pairs})
    import numpy as np

    # The largest transfers, equal sizes in the transfers' order: a stable sort by bytes, descending
    # (bytes fit int64: a larger tensor's size is unknown, see placeviz.limits).
    top = [data[k] for k in np.argsort(-np.array(sizes, dtype=np.int64), kind="stable")[:TOP_TRANSFERS]]
    # Variables by bytes read, descending, then by name: sorted by name, then stably by bytes
    # (reverse keeps equal keys in order), both sorts without a Python key function per item.
    read_order = sorted(reads)
    read_order.sort(key={v: r[1] for v, r in reads.items()}.__getitem__, reverse=True)
    return {
        "run": run,
        "bytes_per_step": sum(sent.values()),
        "transfers": len(transfers),
        "unknown_size_transfers": unknown,
        "control_transfers": control,
        "assumed_batch": batch_size,  # --batch-size (see assume_batch), or None
        "assumed_batch_transfers": assumed,
        "task_pairs": [pairs[k] for k in sorted(pairs)],
        "tasks": [{"task": t, "sent_bytes": sent[t], "received_bytes": received[t], "sent_unknown": sent_unknown[t],
                   "received_unknown": received_unknown[t]} for t in tasks],
        "top_transfers": [{k: t[k] for k in ("src", "slot", "src_device", "dst_device", "dtype", "shape", "bytes")}
                          for t in top],
        "variable_reads": [_variable_read(v, *reads[v]) for v in read_order],
        "notes": (["a read inside a while loop crosses the network once per iteration; the trip count is "
                   "unknown statically, so reads_per_step and bytes_per_step count one iteration "
                   "(see per_iteration_of)"]
                  if in_loops else []) + _overflow_notes(unknown_size)
                 + ([f"--batch-size {batch_size}: {assumed} transfer(s) with an unknown leading (batch) dimension are "
                     f"counted with {batch_size} rows"] if assumed else []),
    }


def _variable_read(variable: str, n: int, nbytes: int, n_unknown: int, to_tasks: set[str],
                   frames: set[str]) -> dict:
    """One ``variable_reads`` row of :func:`traffic_summary`."""
    return {"variable": variable, "reads_per_step": n, "bytes_per_step": nbytes, "unknown_size_reads": n_unknown,
            "to_tasks": sorted(to_tasks) if len(to_tasks) > 1 else list(to_tasks),
            "per_iteration_of": sorted(frames) if frames else None}


def _overflow_notes(transfers: list[dict]) -> list[str]:
    """A note naming the transfers whose size overflowed (``bytes`` None although shape and dtype
    are known: more than 2**63 - 1 bytes, see :mod:`placeviz.limits`), so that "unknown" is not
    mistaken for a shape nobody wrote down."""
    over = [t for t in transfers if t["slot"] != "control" and t["bytes"] is None
            and isinstance(t.get("shape"), list) and None not in t["shape"]
            and all(isinstance(d, int) for d in t["shape"])
            and overflows(_size_by_name().get(t.get("dtype")), t["shape"])]
    if not over:
        return []
    names = ", ".join(f"{t['src']}:{t['slot']}" for t in over[:5]) + (f" and {len(over) - 5} more" if len(over) > 5
                                                                      else "")
    return [f"overflow: {len(over)} transfer(s) ({names}) carry a tensor of more than 2**63 - 1 bytes (dtype size x "
            "shape); TF refuses such a shape, and they are counted in unknown_size_transfers, not in the bytes"]


@cache
def _size_by_name() -> dict[str | None, int | None]:  # looked up by a transfer's dtype, maybe None
    return {dtype_name(code + ref): size for code, size in DTYPE_SIZE.items() for ref in (0, 100)}
