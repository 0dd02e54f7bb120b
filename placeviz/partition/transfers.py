"""A partition's transfers as columns: :class:`TransferTable`.

One ``_Send``/``_Recv`` pair of a partition is a transfer (``tensorflow/core/graph/
graph_partition.cc`` ``AddSend``/``AddRecv``; what each record holds: :func:`placeviz.partition.
partition`). A 200k-node train step has about 45k of them, a 1M-node one about 225k. They were one
dict each, made by the cut and walked by every reader; the readers that run on every
``partition``/``analyze`` (the CLI's totals, ``index.json``, the traffic summary of
:mod:`placeviz.traffic`) read whole columns instead: sums and counts over lists, numpy group-bys
over device and origin indices, JSON text written from the columns
(:class:`placeviz.jsontext.ColumnRecords`). The others (render, the rules, verify) read
:meth:`TransferTable.records`, the same dicts as before, made once on first use.

The cut fills the table: :meth:`placeviz.partition.graph_partition._GraphPartition._transfer`
appends a row, and the C cut (``placeviz._partition_kernels.split_originals``) returns its rows as
one list per column (:data:`COLUMNS`' order), which :meth:`TransferTable.extend` appends.
"""

from __future__ import annotations

from typing import Any

from placeviz.jsontext import ColumnRecords

COLUMNS = ("origin", "src", "slot", "src_dev", "dst_dev", "dtype", "shape", "bytes", "send", "recv", "send_op",
           "recv_op", "tensor_name", "dst")
"""A row's fields in order: the origin's node id (an added node's id when it has no origin) and
name, its slot (``"control"`` for a control edge), the devices' indices (into
:attr:`TransferTable.devices`), the dtype's name, the static shape, the bytes per step (None:
unknown), the ``_Send`` and ``_Recv`` names and ops, ``tensor_name``, the first consumer."""
RECORD_KEYS = ["src", "slot", "src_device", "dst_device", "dtype", "shape", "bytes", "level", "send", "recv",
               "send_op", "recv_op", "tensor_name", "dst"]
"""A transfer record's keys, in their order in the dicts and in ``index.json``."""
CONTROL_SLOT = "control"
TASK, DEVICE = "task", "device"


class TransferTable:
    """The transfers of one partition, one list per field of :data:`COLUMNS` (module docstring).

    ``devices``/``tasks``: the partitioner's device names and each device's task index (shared
    with it: a device interned later is known here too). ``assumed``: per row the
    ``--batch-size`` its bytes were sized with, or None (:func:`placeviz.traffic.assume_batch`).
    """

    def __init__(self, devices: list[str], tasks: list[int], columns: tuple[list[Any], ...] | None = None,
                 assumed: list[int | None] | None = None) -> None:
        self.devices = devices
        self.tasks = tasks
        self.columns: tuple[list[Any], ...] = columns if columns is not None else tuple([] for _ in COLUMNS)
        (self.origin, self.src, self.slot, self.src_dev, self.dst_dev, self.dtype, self.shape, self.bytes, self.send,
         self.recv, self.send_op, self.recv_op, self.tensor_name, self.dst) = self.columns
        self.assumed = assumed
        self._records: list[dict[str, Any]] | None = None

    def __len__(self) -> int:
        return len(self.origin)

    def append(self, *row: Any) -> None:
        """One transfer, its fields in :data:`COLUMNS`' order."""
        for column, value in zip(self.columns, row, strict=True):
            column.append(value)
        self._records = None

    def extend(self, columns: tuple[list[Any], ...]) -> None:
        """Transfers given as one list per column (the C cut's result)."""
        for column, more in zip(self.columns, columns, strict=True):
            column.extend(more)
        self._records = None

    def with_bytes(self, nbytes: list[int | None], assumed: list[int | None]) -> TransferTable:
        """The same transfers with the bytes ``nbytes``, sized with ``assumed`` (a new table; the
        other columns are shared)."""
        columns = list(self.columns)
        columns[COLUMNS.index("bytes")] = nbytes
        return TransferTable(self.devices, self.tasks, tuple(columns), assumed)

    def levels(self) -> list[str]:
        """Per row ``"task"`` (between tasks) or ``"device"`` (between devices of one task)."""
        tasks = self.tasks
        return [DEVICE if tasks[s] == tasks[d] else TASK for s, d in zip(self.src_dev, self.dst_dev, strict=True)]

    def record_columns(self) -> list[list[Any]]:
        """The records' values, one list per key of :data:`RECORD_KEYS`."""
        names = self.devices
        return [self.src, self.slot, [names[d] for d in self.src_dev], [names[d] for d in self.dst_dev], self.dtype,
                self.shape, self.bytes, self.levels(), self.send, self.recv, self.send_op, self.recv_op,
                self.tensor_name, self.dst]

    def records(self) -> list[dict[str, Any]]:
        """One dict per transfer (keys :data:`RECORD_KEYS`, then ``assumed_batch`` on the rows
        sized with ``--batch-size``), made on the first call."""
        if self._records is None:
            # A dict display per row (its keys constant): twice as fast as dict(zip(keys, row)).
            out = [{"src": src, "slot": slot, "src_device": src_device, "dst_device": dst_device, "dtype": dtype,
                    "shape": shape, "bytes": nbytes, "level": level, "send": send, "recv": recv, "send_op": send_op,
                    "recv_op": recv_op, "tensor_name": tensor_name, "dst": dst}
                   for (src, slot, src_device, dst_device, dtype, shape, nbytes, level, send, recv, send_op, recv_op,
                        tensor_name, dst) in zip(*self.record_columns(), strict=True)]
            if self.assumed is not None:
                for record, batch in zip(out, self.assumed, strict=True):
                    if batch is not None:
                        record["assumed_batch"] = batch
            self._records = out
        return self._records

    def json_value(self) -> ColumnRecords | list[dict[str, Any]]:
        """The records as a JSON document's value: columns (written without dicts,
        :func:`placeviz.commands.output.to_json_pieces`) unless some rows carry ``assumed_batch``."""
        if self.assumed is not None and any(b is not None for b in self.assumed):
            return self.records()
        return ColumnRecords(RECORD_KEYS, self.record_columns())

    def totals(self) -> tuple[int, int, int, int]:
        """(transfers, bytes per step of those of known size, data transfers of unknown size,
        control transfers): the CLI's summary line."""
        nbytes = self.bytes
        return len(nbytes), sum(filter(None, nbytes)), nbytes.count(None), self.slot.count(CONTROL_SLOT)
