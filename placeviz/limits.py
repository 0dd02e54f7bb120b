"""Bounds on what an untrusted model or option may make placeviz allocate, read or compute.

A model file from a pull request is untrusted input (placeviz runs in CI on such files). Without
bounds, one device string ``/job:ps/task:99999999999`` made placeviz build a cluster of 1.2
billion tasks (the C++ device-name parser keeps the low 32 bits,
``devices.device_name_utils._consume_number``) and grow to 23 GB until the OOM killer ended it;
``--ps-tasks 1000000000`` and ``--cpus-per-task 100000000`` did the same, and ``/dev/zero`` as
MODEL was read forever. Every such number is now checked against the bounds below *before*
anything is allocated, and an error names the bound.

The bounds are far above any real TF1 parameter-server cluster (TF's own largest published
deployments ran a few thousand tasks) and low enough that the largest cluster they allow fits in
about 100 MB of placeviz objects (measured: 10,000 ps tasks x 10 CPUs, 100,000 devices, place a
small graph in 140 MB):

* :data:`MAX_TASKS_PER_JOB`: task (and replica) indices 0-9,999, at most 10,000 tasks per job;
* :data:`MAX_DEVICES_PER_TASK`: at most 1,024 CPUs or GPUs per task, device indices 0-1,023;
* :data:`MAX_CLUSTER_TASKS` / :data:`MAX_CLUSTER_DEVICES`: 100,000 tasks / devices in a cluster;
* :data:`DEFAULT_MAX_INPUT_BYTES`: model files up to 2 GiB, protobuf's own limit for one message
  (``kint32max`` in ``CodedInputStream``; a bigger GraphDef cannot be parsed by TF either), and
  ``placeviz --max-bytes SIZE`` (or ``PLACEVIZ_MAX_BYTES``) to lower or raise it; only regular
  files are read (not ``/dev/zero``, a FIFO or a terminal);
* :data:`MAX_TENSOR_BYTES`: a tensor's byte count (dtype size x every dimension, computed with
  Python's exact integers) above 2**63 - 1 is an *overflow*, reported as such and counted as
  unknown, never as a wrapped or negative number. TF itself refuses such a shape:
  ``TensorShapeBase::RecomputeNumElements`` fails with "Shape ... is too large (more than 2**63 - 1
  entries)" (``tensorflow/core/framework/tensor_shape.cc``), so no real tensor is that big.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from typing import TYPE_CHECKING

from placeviz.errors import LoadError, PlacevizError

if TYPE_CHECKING:  # numpy is imported on first use: its types for the checker only
    import numpy as np

MAX_TASKS_PER_JOB = 10_000
"""Task indices (and replica indices) are 0 .. MAX_TASKS_PER_JOB - 1; a job has at most this many tasks."""
MAX_DEVICES_PER_TASK = 1_024
"""``--cpus-per-task`` and ``--gpus-per-worker`` at most this; device indices 0 .. MAX_DEVICES_PER_TASK - 1."""
MAX_CLUSTER_TASKS = 100_000
"""Tasks of all jobs of one cluster together."""
MAX_LOCAL_TASKS = 256
"""``verify`` on local servers: at most this many TF servers (ps + worker tasks) on this machine,
each a gRPC server with its own threads, plus one session and one thread per worker."""
MAX_CLUSTER_DEVICES = 100_000
"""Devices (tasks x devices per task) of one cluster's device set."""
DEFAULT_MAX_INPUT_BYTES = 2 << 30
"""2 GiB: protobuf's limit for one serialized message."""
MAX_CLUSTER_FILE_BYTES = 64 << 20
"""A cluster/TF_CONFIG JSON file: 64 MiB is ~1,000 times a cluster of MAX_CLUSTER_TASKS tasks."""
MAX_TENSOR_BYTES = (1 << 63) - 1
"""The largest byte count of one tensor: TF's int64 sizes (see the module docstring)."""
MAX_BYTES_ENV = "PLACEVIZ_MAX_BYTES"

max_input_bytes = DEFAULT_MAX_INPUT_BYTES
"""The limit :func:`read_regular_file` applies to models: set by ``placeviz --max-bytes``."""


class LimitError(PlacevizError):
    """A number beyond one of placeviz's bounds: exit 2 before anything is allocated.

    Commands that report a failed stage instead of stopping (``analyze`` reports a graph TF cannot
    place) re-raise this one: a bound is not a property of the graph worth a report.
    """


class InputRefused(LoadError):
    """A MODEL path placeviz will not read at all (not a regular file, or too big).

    Unlike other load errors, nothing else may try to read it either (lint's raw integrity pass).
    """


def set_max_input_bytes(limit: int | None) -> None:
    """Set the model size limit (None: the default); ``placeviz --max-bytes`` calls this."""
    global max_input_bytes
    max_input_bytes = DEFAULT_MAX_INPUT_BYTES if limit is None else int(limit)


_SIZE_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000**2,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30, "t": 1 << 40, "tb": 1000**4,
          "tib": 1 << 40}


def parse_size(text: str) -> int:
    """``"2GiB"``, ``"500M"``, ``"1.5 GB"``, ``"1000"`` -> bytes (K/M/G alone are binary units);
    ValueError for anything else, or for less than one byte."""
    m = _SIZE_RE.fullmatch(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (bytes, or a number with KiB, MiB, GiB, KB, MB, GB)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value < 1:
        raise ValueError(f"not a size: {text!r} (at least 1 byte)")
    return value


def human_size(n: int) -> str:
    """``2147483648`` -> ``"2 GiB"`` (exact binary units only, else bytes with separators)."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n:,} bytes"


# ------------------------------------------------------------------------------- reading files
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISSOCK, "a socket"))


def read_regular_file(path: str | os.PathLike, source: str, limit: int | None = None,
                      what: str = "model", option: str | None = "--max-bytes") -> bytes:
    """The bytes of ``path``, read only if it is a regular file of at most ``limit`` bytes.

    Raises :class:`InputRefused` (one line naming ``source``) for anything else, and
    :class:`LoadError` with the OS error (``Permission denied``, ``Is a directory``...) when it
    cannot be opened or read. The file is opened with ``O_NONBLOCK``, so a FIFO without a writer
    is refused instead of blocking the open, and its type is taken from the open descriptor
    (``fstat``), so it cannot change between the check and the read. At most ``limit + 1``
    bytes are read, so a file that grows while it is read (or a ``/proc`` file whose size says
    0) is still refused rather than read without end.
    """
    limit = max_input_bytes if limit is None else limit
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise LoadError(source, f"cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _FILE_KINDS if test(st.st_mode)), "not a regular file")
            also = " (or a SavedModel directory)" if what == "model" else ""
            raise InputRefused(source, f"{kind}, not a regular file: placeviz reads a {what} only from a "
                                       f"regular file{also}")
        if st.st_size > limit:
            raise InputRefused(source, _too_big(st.st_size, limit, what, option))
        # The whole file in one read when its size is right (then no chunk is copied again by the
        # join: 40 MB at 200k nodes, 10% of the protobuf parse), one more read to see its end.
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(max(1 << 24, st.st_size + 1 - total), limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise InputRefused(source, _too_big(total, limit, what, option, at_least=True))
        return b"".join(chunks)
    except OSError as e:
        raise LoadError(source, f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _too_big(size: int, limit: int, what: str, option: str | None, at_least: bool = False) -> str:
    more = "more than" if at_least else f"{size:,} bytes, more than"
    hint = f"; raise it with `placeviz {option} SIZE` if the file is genuine" if option else ""
    return f"the {what} file is {more} {human_size(limit)}, placeviz's limit{hint}"


# ------------------------------------------------------------------------------- device numbers
# Numbers in a device string, in both of TF's grammars: `/task:N`, `/replica:N` (C++ and Python),
# `/device:TYPE:N`, legacy `/cpu:N` and Python's bare `CPU:N` pieces. Python's DeviceSpec converts
# with int(), which also takes " 7", "+7" and "1_0"; the C++ parser takes plain digits.
_INDEX_RE = re.compile(r"(?:^|/)(task|replica):\s*\+?([0-9][0-9_]*)")
_DEVICE_INDEX_RE = re.compile(r"(?:^|/)(?:device:)?[A-Za-z_][A-Za-z0-9_]*:\s*\+?([0-9][0-9_]*)\s*(?=/|$)")


def device_bound_problem(device: str) -> str | None:
    """Why ``device`` names a task, replica or device index beyond placeviz's bounds, or None.

    The digits are read as written (``/task:99999999999`` is task 99999999999, although TF's
    C++ parser would keep only its low 32 bits), so no wrapped value slips under a bound.
    """
    if not device or not any(c.isdigit() for c in device):
        return None
    for m in _INDEX_RE.finditer(device):
        value = int(m.group(2).replace("_", ""))
        if value >= MAX_TASKS_PER_JOB:
            return (f"{m.group(1)} {value} is beyond placeviz's bound of {MAX_TASKS_PER_JOB:,} tasks per job "
                    f"({m.group(1)} indices 0-{MAX_TASKS_PER_JOB - 1})")
    for m in _DEVICE_INDEX_RE.finditer(device):
        piece = m.group(0).lstrip("/")
        if piece.startswith(("task:", "replica:", "job:")):
            continue
        value = int(m.group(1).replace("_", ""))
        if value >= MAX_DEVICES_PER_TASK:
            return (f"device index {value} is beyond placeviz's bound of {MAX_DEVICES_PER_TASK:,} devices per task "
                    f"(indices 0-{MAX_DEVICES_PER_TASK - 1})")
    return None


def check_devices(devices: Iterable[str], where: str) -> None:
    """LimitError for the first device string beyond the bounds (``where``: what holds it)."""
    for device in devices:
        problem = device_bound_problem(device)
        if problem is not None:
            raise LimitError(f"{where} {device!r}: {problem}")


def check_count(value: int, bound: int, what: str, source: str | None = None) -> None:
    """LimitError when ``value`` (a count placeviz would allocate for) exceeds ``bound``."""
    if value > bound:
        prefix = f"{source}: " if source else ""
        raise LimitError(f"{prefix}{what} is {value:,}, beyond placeviz's bound of {bound:,}")


# ------------------------------------------------------------------------------- tensor sizes
def tensor_bytes(size: int | None, shape) -> int | None:
    """``size`` x every dimension of ``shape``, exactly; None when unknown or an overflow.

    ``shape``: dims (None for an unknown one) or None (unknown rank). An overflow (more than
    :data:`MAX_TENSOR_BYTES`) is None too: :func:`overflows` tells the two apart for a message.
    """
    if size is None or shape is None or None in shape:
        return None
    nbytes = size
    for d in shape:
        nbytes *= d
    return nbytes if nbytes <= MAX_TENSOR_BYTES else None


def overflows(size: int | None, shape) -> bool:
    """Whether a fully known ``size`` x ``shape`` exceeds :data:`MAX_TENSOR_BYTES`."""
    if size is None or shape is None or None in shape:
        return False
    nbytes = size
    for d in shape:
        nbytes *= d
    return nbytes > MAX_TENSOR_BYTES


def exact_sums(codes: np.ndarray, values: np.ndarray, m: int) -> list[int]:
    """The sums of the int64 ``values`` per code in ``range(m)``, exact: in int64 when no sum can
    overflow it (each value is below 2**63: a larger tensor's size is unknown, :func:`tensor_bytes`),
    else as Python ints."""
    import numpy as np

    if not len(values) or int(values.max()) <= MAX_TENSOR_BYTES // len(values):
        out = np.zeros(m, dtype=np.int64)
        np.add.at(out, codes, values)
        return out.tolist()
    exact = [0] * m
    for c, v in zip(codes.tolist(), values.tolist(), strict=True):
        exact[c] += v
    return exact
