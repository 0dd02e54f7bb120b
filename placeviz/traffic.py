"""What crosses the network every step: a summary of a task-level partition.

Built from :func:`placeviz.partition.partition` at ``level="task"`` for one run (the training step):
bytes per step for every pair of tasks, sent and received per task, the largest transfers, and how
many times each variable's value is read across the network per step.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from itertools import repeat
from typing import TYPE_CHECKING

from placeviz.devices import task_of as device_task
from placeviz.graph import CONTROL, Graph
from placeviz.limits import exact_sums, overflows, tensor_bytes
from placeviz.op_kinds import VARIABLE_OPS, VARIABLE_READ_OPS
from placeviz.partition import PartitionResult
from placeviz.partition.graph_partition import unique_sorted
from placeviz.partition.transfers import TransferTable
from placeviz.protos import DTYPE_SIZE, dtype_name

if TYPE_CHECKING:  # numpy is imported on first use: its types for the checker only
    import numpy as np

TOP_TRANSFERS = 10
_READ_OPS = VARIABLE_READ_OPS | {"Enter", "RefEnter", "Switch", "RefSwitch"}
"""A variable's reads, and the control-flow ops that pass its value into a loop or a branch."""


_READ_STEPS = 8
"""How many ops a variable's value is followed through (a variable, or a read of a read ... of one)."""


def variable_behind(graph: Graph, name: str) -> str | None:
    """The variable a tensor reads (through Identity/ReadVariableOp/Enter/Switch), or None. For
    many tensors, :func:`variables_behind` (one walk for all: each call here reads every edge)."""
    i = graph.id_of(name)
    if i is None:
        return None
    import numpy as np

    v = int(variables_behind(graph, np.array([i], dtype=np.int64))[0])
    return graph.names[v] if v >= 0 else None


def variables_behind(graph: Graph, ids: np.ndarray) -> np.ndarray:
    """Per node of ``ids`` (int64; an id beyond ``graph`` is a node the partitioner added: none),
    the id of the variable it reads (:func:`variable_behind`), or -1.

    The walk goes a step at a time for all of them at once: the op of each node still walking
    (looked up in C, ``map`` over the ids), then the first data input of the reads among them
    (numpy over the CSR inputs). A step of a 1M-node graph's 30k-odd transfer origins is a few
    array passes, where one Python walk per origin was about 0.1 s.
    """
    import numpy as np

    ops = graph.ops
    out = np.full(len(ids), -1, dtype=np.int64)
    at = np.asarray(ids, dtype=np.int64).copy()  # where each walk is
    walking = np.flatnonzero((at >= 0) & (at < len(ops)))
    first_data = None
    for _ in range(_READ_STEPS):
        if not len(walking):
            break
        here = at[walking]
        kind = np.fromiter(map(_KIND_OF_OP.get, map(ops.__getitem__, here.tolist()), repeat(0)), dtype=np.int8,
                           count=len(here))
        found = kind == _VARIABLE
        out[walking[found]] = here[found]
        reads = kind == _READ
        if first_data is None and reads.any():
            first_data = _first_data_inputs(graph)
        walking = walking[reads]
        if first_data is not None and len(walking):
            at[walking] = nxt = first_data(at[walking])
            walking = walking[nxt >= 0]
    return out


_VARIABLE, _READ = 1, 2
_KIND_OF_OP = {**{op: _READ for op in _READ_OPS}, **{op: _VARIABLE for op in VARIABLE_OPS}}


def _first_data_inputs(graph: Graph):
    """A function from node ids (int64 array) to the source of each one's first data input (-1:
    it has none), read from ``graph``'s CSR inputs (control inputs have slot ``CONTROL``)."""
    import numpy as np

    start = np.frombuffer(graph.in_start, dtype=np.int32)
    src = np.frombuffer(graph.in_src, dtype=np.int32)
    data = np.flatnonzero(np.frombuffer(graph.in_slot, dtype=np.int32) != CONTROL)  # data edges' positions

    def first(nodes: np.ndarray) -> np.ndarray:
        if not len(data):
            return np.full(len(nodes), -1, dtype=np.int64)
        k = np.searchsorted(data, start[nodes])  # the first data edge at or after each node's first input
        pos = data[np.minimum(k, len(data) - 1)]
        inside = (k < len(data)) & (pos < start[nodes + 1])
        return np.where(inside, src[pos], -1).astype(np.int64)

    return first


def assume_batch(table: TransferTable, batch_size: int) -> TransferTable:
    """The transfers with an unknown leading (batch) dimension sized as ``batch_size`` (``--batch-size``).

    A tensor fed per step (``placeholder(shape=[None, ...])``) has a batch dimension TF only
    learns at run time, so its ``_Send``/``_Recv`` pair has no static size (see
    :func:`placeviz.partition.partition`). Only a shape whose *first* dimension alone is unknown is
    resolved; the result is a new table whose resolved rows have their bytes and
    ``assumed_batch`` (:attr:`TransferTable.assumed`) set. The partitions themselves are not changed.
    """
    sizes = _size_by_name()
    nbytes = list(table.bytes)
    assumed: list[int | None] = [None] * len(nbytes)
    for k, (slot, known, shape, dtype) in enumerate(zip(table.slot, table.bytes, table.shape, table.dtype,
                                                        strict=True)):
        if (slot != "control" and known is None and isinstance(shape, list) and shape
                and shape[0] is None and None not in shape[1:]):
            size = tensor_bytes(sizes.get(dtype), [batch_size, *shape[1:]])
            if size is not None:
                nbytes[k] = size
                assumed[k] = batch_size
    return table.with_bytes(nbytes, assumed)


def traffic_summary(graph: Graph, parts: PartitionResult, run: dict, batch_size: int | None = None) -> dict:
    """The ``traffic`` part of the ``partition`` section of ``placeviz.analysis/1``.

    A transfer of unknown size adds nothing to the bytes and one to the ``unknown`` counts next to
    them (``unknown_size_transfers``, per task ``sent_unknown``/``received_unknown``, per pair
    ``unknown_bytes``, per variable ``unknown_size_reads``): the bytes are then a lower bound.

    Read from the transfers' columns (:class:`~placeviz.partition.transfers.TransferTable`: tens
    of thousands of transfers a step, hundreds of thousands at 1M nodes): numpy adds them up per
    pair of *devices* (a few) and per variable; the per-task rows are folded from those sums.
    """
    import numpy as np

    table = parts.table
    src_dev = np.asarray(table.src_dev, dtype=np.int64)
    dst_dev = np.asarray(table.dst_dev, dtype=np.int64)
    dev_task = np.asarray(table.tasks, dtype=np.int64)
    rows = np.flatnonzero(dev_task[src_dev] != dev_task[dst_dev])  # the task-level transfers, in order
    ndev = len(table.devices)
    control = np.equal(np.array(table.slot, dtype=object)[rows], "control").astype(bool)
    held = np.array(table.bytes, dtype=object)[rows]
    known = (held != None).astype(bool)  # noqa: E711 - elementwise, on the object array
    nbytes = np.where(known, held, 0).astype(np.int64)  # each below 2**63 (placeviz.limits)
    sized = ((np.array(table.assumed, dtype=object)[rows] != None).astype(bool) & known  # noqa: E711
             if table.assumed is not None else np.zeros(len(rows), dtype=bool))
    data = ~control
    unknown_rows = data & ~known
    # Per device pair: transfers, control, bytes, unknown-size transfers, sized with --batch-size.
    code = src_dev[rows] * ndev + dst_dev[rows]
    present = unique_sorted(code).tolist()
    sums = [np.bincount(code, minlength=ndev * ndev).tolist(), np.bincount(code[control], minlength=ndev * ndev).tolist(),
            exact_sums(code, nbytes, ndev * ndev), np.bincount(code[unknown_rows], minlength=ndev * ndev).tolist(),
            np.bincount(code[sized], minlength=ndev * ndev).tolist()]
    names = table.devices
    task_of: dict[str, str] = {}  # device -> its task
    for c in present:
        for d in (names[c // ndev], names[c % ndev]):
            if d not in task_of:
                task = device_task(d, replica=True)
                task_of[d] = d if task is None else task  # d: a string TF cannot parse
    pairs: dict[tuple[str, str], dict] = {}
    sent: Counter = Counter()
    received: Counter = Counter()
    sent_unknown: Counter = Counter()
    received_unknown: Counter = Counter()
    for c in present:
        count, n_control, total, n_unknown = sums[0][c], sums[1][c], sums[2][c], sums[3][c]
        src, dst = task_of[names[c // ndev]], task_of[names[c % ndev]]
        row = pairs.get((src, dst))
        if row is None:
            row = pairs[(src, dst)] = {"src_task": src, "dst_task": dst, "transfers": 0, "control": 0,
                                       "bytes": 0, "unknown_bytes": 0}
        row["transfers"] += count
        row["control"] += n_control
        row["bytes"] += total
        row["unknown_bytes"] += n_unknown
        if n_unknown:
            sent_unknown[src] += n_unknown
            received_unknown[dst] += n_unknown
        if count - n_control - n_unknown:  # some transfer of known size: the task sent and received bytes
            sent[src] += total
            received[dst] += total
    data_rows = rows[data]
    variable_reads, in_loops = _variable_reads(graph, table, data_rows, nbytes[data], known[data], task_of)
    tasks = sorted(set(sent) | set(received) | {p[0] for p in pairs} | {p[1] for p in pairs})
    # The largest transfers, equal sizes in the transfers' order: a stable sort by bytes, descending
    # (bytes fit int64: a larger tensor's size is unknown, see placeviz.limits).
    top = data_rows[np.argsort(-nbytes[data], kind="stable")[:TOP_TRANSFERS]].tolist()
    n_unknown_all = int(unknown_rows.sum())
    assumed = int(sized[data].sum())
    return {
        "run": run,
        "bytes_per_step": sum(sent.values()),
        "transfers": len(rows),
        "unknown_size_transfers": n_unknown_all,
        "control_transfers": int(control.sum()),
        "assumed_batch": batch_size,  # --batch-size (see assume_batch), or None
        "assumed_batch_transfers": assumed,
        "task_pairs": [pairs[k] for k in sorted(pairs)],
        "tasks": [{"task": t, "sent_bytes": sent[t], "received_bytes": received[t], "sent_unknown": sent_unknown[t],
                   "received_unknown": received_unknown[t]} for t in tasks],
        "top_transfers": [{"src": table.src[k], "slot": table.slot[k], "src_device": names[table.src_dev[k]],
                           "dst_device": names[table.dst_dev[k]], "dtype": table.dtype[k], "shape": table.shape[k],
                           "bytes": table.bytes[k]} for k in top],
        "variable_reads": variable_reads,
        "notes": (["a read inside a while loop crosses the network once per iteration; the trip count is "
                   "unknown statically, so reads_per_step and bytes_per_step count one iteration "
                   "(see per_iteration_of)"]
                  if in_loops else []) + _overflow_notes(table, rows[unknown_rows].tolist())
                 + ([f"--batch-size {batch_size}: {assumed} transfer(s) with an unknown leading (batch) dimension are "
                     f"counted with {batch_size} rows"] if assumed else []),
    }


def _variable_reads(graph: Graph, table: TransferTable, rows: np.ndarray, nbytes: np.ndarray, known: np.ndarray,
                    task_of: dict[str, str]) -> tuple[list[dict], bool]:
    """The ``variable_reads`` rows of the variables read by the task-level transfers of a tensor
    ``rows`` (their bytes, 0 when not ``known``), most bytes first, then by name, and whether some
    read crosses the network inside a while loop. A transfer's origin is a node id of ``graph``
    (the partitioned graph) or of a node the partitioner added (no variable)."""
    import numpy as np

    origins = np.asarray(table.origin, dtype=np.int64)[rows]
    distinct = unique_sorted(origins)
    # A tensor sent to several tasks is one transfer per task: its variable is looked up once.
    behind = variables_behind(graph, distinct)
    var_ids = unique_sorted(behind[behind >= 0])  # the variables read
    if not len(var_ids):
        return [], False
    gnames = graph.names
    found = list(map(gnames.__getitem__, var_ids.tolist()))
    by_name = sorted(range(len(found)), key=found.__getitem__)
    found = [found[k] for k in by_name]  # the variables by name: their codes
    code = np.empty(len(var_ids), dtype=np.int64)
    code[by_name] = np.arange(len(var_ids))
    var = np.where(behind >= 0, code[np.searchsorted(var_ids, behind)], -1)[np.searchsorted(distinct, origins)]
    hit = var >= 0
    var, rows, nbytes, known = var[hit], rows[hit], nbytes[hit], known[hit]
    m = len(found)
    counts = np.bincount(var, minlength=m).tolist()
    unknown = np.bincount(var[~known], minlength=m).tolist()
    totals = exact_sums(var, nbytes, m)
    # The receiving tasks of each variable, sorted: task codes in the order of their names, then
    # the distinct (variable, task) pairs in order.
    dev_tasks = [task_of.get(d) for d in table.devices]
    task_names = sorted({t for t in dev_tasks if t is not None})
    task_code = np.asarray([task_names.index(t) if t is not None else -1 for t in dev_tasks], dtype=np.int64)
    pair = unique_sorted(var * len(task_names) + task_code[np.asarray(table.dst_dev, dtype=np.int64)[rows]])
    # The pairs are sorted by variable: each variable's tasks are one slice of the pairs' task names.
    pair_task = list(map(task_names.__getitem__, (pair % len(task_names)).tolist()))
    bounds = np.searchsorted(pair // len(task_names), np.arange(m + 1)).tolist()
    to_tasks = [pair_task[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    frames_of, in_loops = _reader_frames(graph, table, var.tolist(), rows.tolist(), m)
    # Most bytes first, then by name: the codes are in name order, and the sort is stable (reverse keeps
    # equal keys in order).
    order = sorted(range(m), key=totals.__getitem__, reverse=True)
    return ([{"variable": found[k], "reads_per_step": counts[k], "bytes_per_step": totals[k],
              "unknown_size_reads": unknown[k], "to_tasks": to_tasks[k],
              "per_iteration_of": sorted(frames_of[k]) if frames_of is not None and frames_of[k] else None}
             for k in order], in_loops)


def _reader_frames(graph: Graph, table: TransferTable, var: list[int], rows: list[int],
                   m: int) -> tuple[list[set[str]] | None, bool]:
    """Per variable code, the while-loop frames its reads ``rows`` (of variables ``var``) are
    received in (a transfer inside a loop runs once per iteration: the receiving node's frame),
    and whether there is any; None when the graph has no while loops."""
    frames = _loop_frames(graph)
    if frames is None:
        return None, False
    frames_of: list[set[str]] = [set() for _ in range(m)]
    in_loops = False
    dst = table.dst
    index = graph.ids_of(dict.fromkeys(dst[k] or "" for k in rows))
    for v, k in zip(var, rows, strict=True):
        dst_id = index.get(dst[k] or "")
        frame = frames[dst_id] if dst_id is not None else None
        if frame:
            frames_of[v].add(frame)
            in_loops = True
    return frames_of, in_loops


def _loop_frames(graph: Graph) -> list[str | None] | None:
    """:func:`placeviz.sync.proof.loop_frames` (imported on use)."""
    from placeviz.sync.proof import loop_frames

    return loop_frames(graph)


def _overflow_notes(table: TransferTable, rows: list[int]) -> list[str]:
    """A note naming the transfers ``rows`` (of unknown size) whose size overflowed (``bytes``
    None although shape and dtype are known: more than 2**63 - 1 bytes, see
    :mod:`placeviz.limits`), so that "unknown" is not mistaken for a shape nobody wrote down."""
    shapes, dtypes, sizes = table.shape, table.dtype, _size_by_name()
    over = [k for k in rows if isinstance(shape := shapes[k], list) and None not in shape
            and all(isinstance(d, int) for d in shape) and overflows(sizes.get(dtypes[k]), shape)]
    if not over:
        return []
    names = ", ".join(f"{table.src[k]}:{table.slot[k]}" for k in over[:5]) + (f" and {len(over) - 5} more"
                                                                             if len(over) > 5 else "")
    return [f"overflow: {len(over)} transfer(s) ({names}) carry a tensor of more than 2**63 - 1 bytes (dtype size x "
            "shape); TF refuses such a shape, and they are counted in unknown_size_transfers, not in the bytes"]


@cache
def _size_by_name() -> dict[str | None, int | None]:  # looked up by a transfer's dtype, maybe None
    return {dtype_name(code + ref): size for code, size in DTYPE_SIZE.items() for ref in (0, 100)}
