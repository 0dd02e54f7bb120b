"""Device names and clusters exactly as TensorFlow handles them, without importing TensorFlow.

TensorFlow has two device-name grammars, and placeviz needs both:

* **Python side** (:class:`PyDeviceSpec`): what ``tf.device`` scopes and ``replica_device_setter``
  compute and write into ``NodeDef.device``. Mirrors ``tf.DeviceSpec`` (``DeviceSpecV2``) of TF
  2.21: ``from_string`` / ``to_string`` / ``make_merged_spec`` and the ``MergeDevice`` device
  function of ``tensorflow/python/framework/device.py``.
* **C++ side** (:class:`ParsedName` and the functions around it): what the runtime placer and the
  partitioner parse and merge. Mirrors ``DeviceNameUtils`` (``xla/tsl/util/device_name_utils.cc``).

The two differ. Python uppercases lowercase ``cpu``/``gpu`` everywhere (also in ``/device:cpu:0``)
and accepts bare ``CPU:0`` pieces; C++ keeps ``/device:cpu:0`` as a device of type ``"cpu"`` and
only maps the legacy ``/cpu:N`` / ``/gpu:N`` pieces to ``CPU``/``GPU``.

Lowercase device types in a GraphDef (checked with TF 2.21, DirectSession, ``device_count
{CPU: 3}``, Grappler off, ``tests/test_devices.py::test_placer_lowercase_types``): the placer
parses a NodeDef's device with ``ParseFullName`` and matches device types **case-sensitively**, so
a raw ``/device:cpu:1`` names no device. Without soft placement the run fails with ``was
explicitly assigned to /device:cpu:1 but available devices are [...]``; with soft placement the
type and index are dropped and the node lands on ``CPU:0`` like an unconstrained node. A
colocation group joining ``/device:cpu:1`` and ``/device:CPU:1`` fails with "Cannot merge devices
with incompatible types". The bare local form ``cpu:2`` is "Malformed device specification" for
the placer (it uses ``ParseFullName``, not ``ParseFullOrLocalName``). The legacy pieces
``/cpu:2`` and ``/CPU:1`` work. **But** a GraphDef loaded through TF's Python API
(``tf.import_graph_def``, ``import_meta_graph``) never reaches the placer raw: the importer
re-applies every node's device through ``tf.device`` (``importer._ProcessNewOps``), i.e. through
:class:`PyDeviceSpec`, so ``/device:cpu:1`` and ``cpu:2`` become ``/device:CPU:1`` and
``/device:CPU:2`` first (and a node with a ``_class`` attr takes the device of the first op it is
colocated with that has one). That is why these strings "work" from Python. placeviz's placer
should canonicalise each NodeDef device with :func:`canonical_device` first when it models a
graph run from Python, and use :func:`parse_full_name` on the raw string when it models the C++
runtime loading the GraphDef directly.

Clusters: :class:`ClusterSpec` mirrors ``tf.train.ClusterSpec`` (dense lists or sparse task dicts)
and reads JSON cluster files and TF_CONFIG documents; :class:`DeviceSet` lists the devices a
MasterSession sees for a cluster and :func:`sort_devices` orders candidates like TF 2.x's
``DeviceSet::SortPrioritizedDeviceVector``.

Every result is cached where the setter or placer calls it once per node (graphs of 1M nodes):
parsing a device string is a dict hit after the first time.

Bounds (:mod:`placeviz.limits`): TF accepts any int32 task index and any device count, and
``ParseFullName`` keeps only the low 32 bits of a longer number; placeviz allocates per task and
device, so :class:`DeviceSet`, :meth:`ClusterSpec.from_ps_tasks` and cluster files are checked
against documented bounds (10,000 tasks per job, 1,024 devices per task, 100,000 devices in a
cluster) before anything is built. :class:`ClusterSpec` itself stays TF's (sparse int32 indices).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placeviz.errors import PlacevizError
from placeviz.limits import (
    MAX_CLUSTER_DEVICES,
    MAX_CLUSTER_FILE_BYTES,
    MAX_CLUSTER_TASKS,
    MAX_DEVICES_PER_TASK,
    MAX_TASKS_PER_JOB,
    LimitError,
    check_count,
    read_regular_file,
)

__all__ = [
    "VALID_DEVICE_TYPES", "DEVICE_TYPE_PRIORITY", "DeviceSpecError", "DeviceMergeError", "ClusterError",
    "PyDeviceSpec", "MergeDevice", "merge_device_fn", "canonical_device",
    "ParsedName", "parse_full_name", "parse_local_name", "parse_full_or_local", "full_name", "local_name",
    "is_specification", "is_complete_specification", "are_compatible", "merge_dev_names",
    "merge_override_dev_names", "merge_unset_dev_names", "is_same_address_space",
    "is_different_address_space", "address_space", "split_device_name", "names_for_device_mappings",
    "ClusterSpec", "TaskSpec", "Device", "DeviceSet", "sort_devices", "device_type_priority",
    "check_cluster_bounds",
]


class DeviceSpecError(PlacevizError, ValueError):
    """A device string TF would reject (Python ``ValueError`` or C++ "Malformed device ...")."""


class DeviceMergeError(PlacevizError, ValueError):
    """Two C++ device names that ``MergeDevNames`` refuses to merge; the message is TF's own.

    ``kind`` is the field that conflicts: ``"jobs"``, ``"replicas"``, ``"tasks"``, ``"types"`` or
    ``"ids"``; ``target`` and ``other`` are the two names as they were when the merge stopped.
    """

    def __init__(self, kind: str, target: ParsedName, other: ParsedName):
        self.kind = kind
        self.target = target
        self.other = other
        super().__init__(f"Cannot merge devices with incompatible {kind}: "
                         f"'{target.to_string()}' and '{other.to_string()}'")


class ClusterError(PlacevizError, ValueError):
    """An unusable cluster description; names its source (file) and the problem, on one line."""

    def __init__(self, problem: str, source: str | None = None):
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}" if source else problem)


# --------------------------------------------------------------------------------------------
# Python side: tf.DeviceSpec
# --------------------------------------------------------------------------------------------

VALID_DEVICE_TYPES = frozenset({"CPU", "GPU", "TPU", "CUSTOM", "EPU"})
"""``device_spec._VALID_DEVICE_TYPES`` of TF 2.21: the types the legacy ``TYPE:N`` piece accepts.

TF adds the types of installed pluggable devices (``TF_ListPluggablePhysicalDevices``); placeviz
assumes none are installed.
"""

_CACHE_LIMIT = 1 << 16  # entries per cache; a full cache is emptied (device strings are few in practice)
_PARSE_CACHE: dict[str, PyDeviceSpec] = {}
_MERGE_CACHE: dict[tuple[str, str], PyDeviceSpec] = {}


def _spec_int(value: Any, what: str, spec: str | None) -> int:
    try:
        return int(value)  # TF converts with int(): accepts " 1", "+1", "01", "1_0" like TF does
    except (TypeError, ValueError):
        where = f" in device spec {spec!r}" if spec is not None else ""
        raise DeviceSpecError(f"invalid {what} {value!r}{where}: not an integer") from None


def _spec_string(job, replica, task, device_type, device_index) -> str:
    out = []
    if job is not None:
        out.append("/job:" + job)
    if replica is not None:
        out.append("/replica:" + str(replica))
    if task is not None:
        out.append("/task:" + str(task))
    if device_type is not None:
        out.append(f"/device:{device_type}:{'*' if device_index is None else device_index}")
    return "".join(out)


@dataclass(frozen=True, eq=False, slots=True)
class PyDeviceSpec:
    """A (partial) device specification as Python's ``tf.DeviceSpec`` (V2) holds it.

    Each field is optional (``None`` = unset). As in TF's constructor, ``replica``, ``task`` and
    ``device_index`` go through ``int()`` and a ``device_type`` of exactly ``"cpu"``/``"gpu"``
    becomes ``"CPU"``/``"GPU"`` (other types keep their case: ``/device:tpu:0`` stays ``tpu``).
    Equality and hash follow the canonical string, as TF's ``__eq__``/``__hash__`` do.
    """

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None
    _string: str = field(init=False, repr=False)

    def __post_init__(self):
        setter = object.__setattr__
        if self.job is not None and type(self.job) is not str:
            setter(self, "job", str(self.job))
        for name in ("replica", "task", "device_index"):
            value = getattr(self, name)
            if value is not None and type(value) is not int:
                setter(self, name, _spec_int(value, name.replace("_", " "), None))
        dt = self.device_type
        if dt is not None:
            if dt in ("cpu", "gpu"):
                setter(self, "device_type", dt.upper())
            elif type(dt) is not str:
                setter(self, "device_type", str(dt))
        setter(self, "_string", _spec_string(self.job, self.replica, self.task, self.device_type,
                                             self.device_index))

    # -- parsing / printing ------------------------------------------------------------------

    @classmethod
    def parse(cls, spec: str | PyDeviceSpec | None) -> PyDeviceSpec:
        """``tf.DeviceSpec.from_string(spec)``; raises :class:`DeviceSpecError` where TF raises.

        The string is split on ``/`` and each piece on ``:``. Pieces: ``job:J``, ``replica:R``,
        ``task:T``, ``device:TYPE:N`` (``N`` may be ``*``; TYPE is free-form), and the legacy
        ``TYPE`` / ``TYPE:N`` / ``TYPE:*`` where ``TYPE.upper()`` is a :data:`VALID_DEVICE_TYPES`
        entry (uppercased). Empty pieces and pieces with an empty head (``/:0``) are ignored; later
        job/replica/task pieces override earlier ones; a second device type and an unknown head
        (``/job:ps/foo:1``, ``/job:ps:1``) are errors, as are non-integer numbers. Results are
        cached per string.
        """
        if type(spec) is str:
            cached = _PARSE_CACHE.get(spec)
            if cached is not None:
                return cached
        elif spec is None:
            spec = ""
            cached = _PARSE_CACHE.get(spec)
            if cached is not None:
                return cached
        elif isinstance(spec, PyDeviceSpec):
            return spec
        else:
            raise DeviceSpecError(f"device spec must be a string, not {type(spec).__name__}")
        result = cls._parse_uncached(spec)
        if len(_PARSE_CACHE) >= _CACHE_LIMIT:
            _PARSE_CACHE.clear()
        _PARSE_CACHE[spec] = result
        return result

    @classmethod
    def _parse_uncached(cls, spec: str) -> PyDeviceSpec:
        job = replica = task = device_type = device_index = None
        for piece in spec.split("/"):
            y = piece.split(":")
            ly = len(y)
            head = y[0]
            if ly == 2 and head == "job":
                job = y[1]
            elif ly == 2 and head == "replica":
                replica = y[1]
            elif ly == 2 and head == "task":
                task = y[1]
            elif (ly == 1 or ly == 2) and head.upper() in VALID_DEVICE_TYPES:
                if device_type is not None:
                    raise DeviceSpecError(f"Multiple device types are not allowed while parsing the "
                                          f"device spec: {spec}.")
                device_type = head.upper()
                if ly == 2 and y[1] != "*":
                    device_index = _spec_int(y[1], "device index", spec)
            elif ly == 3 and head == "device":
                if device_type is not None:
                    raise DeviceSpecError(f"Multiple device types are not allowed while parsing the "
                                          f"device spec: {spec}.")
                device_type = y[1]
                if y[2] != "*":
                    device_index = _spec_int(y[2], "device index", spec)
            elif head != "":
                raise DeviceSpecError(f"Unknown attribute '{head}' is encountered while parsing the "
                                      f"device spec: '{spec}'.")
        # TF converts replica and task in the constructor, after the whole string was read.
        if replica is not None:
            replica = _spec_int(replica, "replica", spec)
        if task is not None:
            task = _spec_int(task, "task", spec)
        return cls(job, replica, task, device_type, device_index)

    def to_string(self) -> str:
        """TF's canonical string: ``/job:J/replica:R/task:T/device:TYPE:N`` for the set fields.

        A type without an index prints ``:*``; an index without a type is not printed at all.
        """
        return self._string

    def __str__(self) -> str:
        return self._string

    def __eq__(self, other) -> bool:
        return isinstance(other, PyDeviceSpec) and self._string == other._string

    def __hash__(self) -> int:
        return hash(self._string)

    # -- merging -----------------------------------------------------------------------------

    def merged_with(self, other: PyDeviceSpec | str | None) -> PyDeviceSpec:
        """``self.make_merged_spec(other)``: every field ``other`` sets wins, field by field.

        Type and index are separate fields: ``/job:ps/device:CPU:0`` merged with
        ``/device:GPU:*`` gives ``/job:ps/device:GPU:0``. Cached per pair of strings.
        """
        if not isinstance(other, PyDeviceSpec):
            other = PyDeviceSpec.parse(other)
        key = (self._string, other._string)
        cached = _MERGE_CACHE.get(key)
        if cached is not None:
            return cached
        result = PyDeviceSpec(
            other.job if other.job is not None else self.job,
            other.replica if other.replica is not None else self.replica,
            other.task if other.task is not None else self.task,
            other.device_type if other.device_type is not None else self.device_type,
            other.device_index if other.device_index is not None else self.device_index,
        )
        if len(_MERGE_CACHE) >= _CACHE_LIMIT:
            _MERGE_CACHE.clear()
        _MERGE_CACHE[key] = result
        return result

    def replace(self, **changes) -> PyDeviceSpec:
        """``DeviceSpec.replace``: a copy with the given fields set (``None`` unsets a field)."""
        fields = {"job": self.job, "replica": self.replica, "task": self.task,
                  "device_type": self.device_type, "device_index": self.device_index}
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"unknown DeviceSpec field(s): {', '.join(sorted(unknown))}")
        fields.update(changes)
        return PyDeviceSpec(**fields)

    @property
    def is_empty(self) -> bool:
        """True for the empty spec (``MergeDevice.is_null_merge``)."""
        return not self._string


def canonical_device(device: str | PyDeviceSpec | None) -> str:
    """``tf.python.framework.device.canonical_name``: '' for None, else the parsed spec's string."""
    if device is None:
        return ""
    return PyDeviceSpec.parse(device).to_string()


class MergeDevice:
    """The device function a string ``tf.device(spec)`` scope pushes (``device.MergeDevice``).

    Called with an op's current device string, returns the merged device string: the op's current
    device wins for every field it sets and the scope fills in the rest
    (``scope_spec.make_merged_spec(current)``). Results are cached per current device string, like
    TF's ``shortcut_string_merge``.
    """

    __slots__ = ("spec", "_cache")

    def __init__(self, spec: str | PyDeviceSpec | None):
        self.spec = PyDeviceSpec.parse(spec)
        self._cache: dict[str, str] = {}

    def __call__(self, current_device: str | None) -> str:
        current_device = current_device or ""
        result = self._cache.get(current_device)
        if result is None:
            result = self.spec.merged_with(PyDeviceSpec.parse(current_device)).to_string()
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[current_device] = result
        return result

    @property
    def is_null_merge(self) -> bool:
        """True when the scope's spec is empty (TF skips such entries of the device stack)."""
        return self.spec.is_empty

    def __repr__(self) -> str:
        return f"MergeDevice({self.spec.to_string()!r})"


_MERGERS: dict[str, MergeDevice] = {}


def merge_device_fn(scope_spec: str | PyDeviceSpec | None) -> MergeDevice:
    """``device.merge_device(scope_spec)``: the (cached) :class:`MergeDevice` for a scope."""
    key = PyDeviceSpec.parse(scope_spec).to_string()
    merger = _MERGERS.get(key)
    if merger is None:
        merger = _MERGERS[key] = MergeDevice(key)
    return merger


# --------------------------------------------------------------------------------------------
# C++ side: DeviceNameUtils
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ParsedName:
    """``DeviceNameUtils::ParsedName``: each field ``None`` when unset (absent or ``*``).

    Equality is C++'s ``operator==`` (values of unset fields do not exist here, so plain field
    equality is the same thing). The device type is case-sensitive: ``cpu`` != ``CPU``.
    """

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    type: str | None = None
    id: int | None = None

    @classmethod
    def from_string(cls, name: str) -> ParsedName:
        """``ParseFullName`` that raises :class:`DeviceSpecError` (TF's placer message) on failure."""
        parsed = parse_full_name(name)
        if parsed is None:
            raise DeviceSpecError(f"Malformed device specification '{name}'")
        return parsed

    def to_string(self) -> str:
        """``ParsedNameToString``: ``/job:J/replica:R/task:T/device:TYPE:N`` for the set fields.

        A set type with an unset id prints ``:*``; an id without a type is not printed.
        """
        buf = []
        if self.job is not None:
            buf.append("/job:" + self.job)
        if self.replica is not None:
            buf.append(f"/replica:{self.replica}")
        if self.task is not None:
            buf.append(f"/task:{self.task}")
        if self.type is not None:
            buf.append(f"/device:{self.type}:{'*' if self.id is None else self.id}")
        return "".join(buf)

    def __str__(self) -> str:
        return self.to_string()

    @property
    def is_complete(self) -> bool:
        """All five fields set: a concrete device name."""
        return (self.job is not None and self.replica is not None and self.task is not None
                and self.type is not None and self.id is not None)

    @property
    def has_some_details(self) -> bool:
        """``HasSomeDetails``: at least one field set."""
        return (self.job is not None or self.replica is not None or self.task is not None
                or self.type is not None or self.id is not None)

    def address_space(self) -> ParsedName:
        """``AddressSpace``: only job, replica and task."""
        return address_space(self)


_JOB_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*(?=/|\Z)")
_TYPE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*(?=[/:]|\Z)")
_DIGITS_RE = re.compile(r"[0-9]+")
_U64 = (1 << 64) - 1


def _consume_number(s: str, i: int) -> tuple[int | None, int]:
    """``ConsumeNumber``: tsl ``ConsumeLeadingDigits`` into a uint64, then stored in an ``int``.

    Fails (None) on no digits or on uint64 overflow (TF's ``new_v / 8 < v`` test); a value that
    fits in uint64 but not int32 wraps like the C++ assignment does.
    """
    m = _DIGITS_RE.match(s, i)
    if m is None:
        return None, i
    v = 0
    for c in m.group():
        new_v = (v * 10 + (ord(c) - 48)) & _U64
        if new_v // 8 < v:
            return None, i
        v = new_v
    v &= 0xFFFFFFFF
    if v >= 1 << 31:
        v -= 1 << 32
    return v, m.end()


_FULL_CACHE: dict[str, ParsedName | None] = {}


def parse_full_name(name: str) -> ParsedName | None:
    """``DeviceNameUtils::ParseFullName``; ``None`` where TF returns false. Cached.

    Pieces (any order, repeated pieces override): ``/job:NAME`` (a letter then letters, digits,
    ``_``), ``/replica:N``, ``/task:N``, ``/device:TYPE``, ``/device:TYPE:N`` (TYPE case kept),
    legacy ``/cpu:N``, ``/CPU:N``, ``/gpu:N``, ``/GPU:N`` (type ``CPU``/``GPU``); ``*`` for any
    value means unset. ``""`` and ``"/"`` parse to the empty name.
    """
    cached = _FULL_CACHE.get(name, False)
    if cached is not False:
        return cached
    result = _parse_full_name(name)
    if len(_FULL_CACHE) >= _CACHE_LIMIT:
        _FULL_CACHE.clear()
    _FULL_CACHE[name] = result
    return result


def _parse_full_name(s: str) -> ParsedName | None:
    job = replica = task = dtype = did = None
    if s == "/":
        return ParsedName()
    i, n = 0, len(s)
    while i < n:
        progress = False
        if s.startswith("/job:", i):
            i += 5
            if s.startswith("*", i):
                i += 1
                job = None
            else:
                m = _JOB_RE.match(s, i)
                if m is None:
                    return None
                job, i = m.group(), m.end()
            progress = True
        if s.startswith("/replica:", i):
            i += 9
            if s.startswith("*", i):
                i += 1
                replica = None
            else:
                replica, i = _consume_number(s, i)
                if replica is None:
                    return None
            progress = True
        if s.startswith("/task:", i):
            i += 6
            if s.startswith("*", i):
                i += 1
                task = None
            else:
                task, i = _consume_number(s, i)
                if task is None:
                    return None
            progress = True
        if s.startswith("/device:", i):
            i += 8
            if s.startswith("*", i):
                i += 1
                dtype = None
            else:
                m = _TYPE_RE.match(s, i)
                if m is None:
                    return None
                dtype, i = m.group(), m.end()
            if not s.startswith(":", i):
                did = None
            else:
                i += 1
                if s.startswith("*", i):
                    i += 1
                    did = None
                else:
                    did, i = _consume_number(s, i)
                    if did is None:
                        return None
            progress = True
        # Legacy pieces: "/cpu:" or "/CPU:" mean type CPU, "/gpu:" or "/GPU:" type GPU.
        for lower, upper, legacy_type in (("/cpu:", "/CPU:", "CPU"), ("/gpu:", "/GPU:", "GPU")):
            if s.startswith(lower, i) or s.startswith(upper, i):
                i += 5
                dtype = legacy_type
                if s.startswith("*", i):
                    i += 1
                    did = None
                else:
                    did, i = _consume_number(s, i)
                    if did is None:
                        return None
                progress = True
        if not progress:
            return None
    return ParsedName(job, replica, task, dtype, did)


def parse_local_name(name: str) -> ParsedName | None:
    """``DeviceNameUtils::ParseLocalName``: ``TYPE:N`` only (no ``*``, nothing after N)."""
    m = _TYPE_RE.match(name, 0)
    if m is None or not name.startswith(":", m.end()):
        return None
    did, i = _consume_number(name, m.end() + 1)
    if did is None or i != len(name):
        return None
    return ParsedName(type=m.group(), id=did)


def parse_full_or_local(name: str) -> ParsedName | None:
    """``DeviceNameUtils::ParseFullOrLocalName``: full name first, then ``TYPE:N``."""
    parsed = parse_full_name(name)
    return parsed if parsed is not None else parse_local_name(name)


def _is_job_name(job: str) -> bool:
    return _JOB_RE.fullmatch(job) is not None


def full_name(job: str, replica: int, task: int, type: str, id: int) -> str:
    """``DeviceNameUtils::FullName``: ``/job:J/replica:R/task:T/device:TYPE:N``.

    Raises :class:`DeviceSpecError` where TF's ``CHECK``s would abort: an invalid job name, a
    negative number or an empty type.
    """
    if not _is_job_name(job):
        raise DeviceSpecError(f"invalid job name {job!r}: a letter, then letters, digits or '_'")
    if replica < 0 or task < 0 or id < 0:
        raise DeviceSpecError(f"negative replica, task or device index in {job}/{replica}/{task}/{id}")
    if not type:
        raise DeviceSpecError("empty device type")
    return f"/job:{job}/replica:{replica}/task:{task}/device:{type}:{id}"


def local_name(type: str, id: int) -> str:
    """``DeviceNameUtils::LocalName(type, id)``: ``/device:TYPE:N``."""
    return f"/device:{type}:{id}"


def names_for_device_mappings(pn: ParsedName) -> list[str]:
    """``GetNamesForDeviceMappings``: the full and the legacy (``/cpu:0``) name of a complete name."""
    if not pn.is_complete:
        return []
    head = f"/job:{pn.job}/replica:{pn.replica}/task:{pn.task}"
    return [f"{head}/device:{pn.type}:{pn.id}", f"{head}/{pn.type.lower()}:{pn.id}"]


def split_device_name(name: str) -> tuple[str, str] | None:
    """``SplitDeviceName``: ``("/job:J/replica:R/task:T", "TYPE:N")`` or None.

    Needs type and id; the task part holds whichever of job/replica/task are set.
    """
    pn = parse_full_name(name)
    if pn is None or pn.type is None or pn.id is None:
        return None
    return address_space(pn).to_string(), f"{pn.type}:{pn.id}"


def _as_parsed(name: ParsedName | str) -> ParsedName:
    return name if isinstance(name, ParsedName) else ParsedName.from_string(name)


def is_specification(less_specific: ParsedName, more_specific: ParsedName) -> bool:
    """``IsSpecification``: every field ``less_specific`` sets is set to the same value in the other."""
    for f in ("job", "replica", "task", "type", "id"):
        want = getattr(less_specific, f)
        if want is not None and getattr(more_specific, f) != want:
            return False
    return True


def is_complete_specification(pattern: ParsedName, name: ParsedName) -> bool:
    """``IsCompleteSpecification``: ``name`` (complete, else ValueError like TF's CHECK) matches."""
    if not name.is_complete:
        raise ValueError(f"is_complete_specification needs a complete name, got '{name.to_string()}'")
    return ((pattern.job is None or pattern.job == name.job)
            and (pattern.replica is None or pattern.replica == name.replica)
            and (pattern.task is None or pattern.task == name.task)
            and (pattern.type is None or pattern.type == name.type)
            and (pattern.id is None or pattern.id == name.id))


def are_compatible(a: ParsedName, b: ParsedName) -> bool:
    """``AreCompatibleDevNames``: no field is set on both sides with different values."""
    for f in ("job", "replica", "task", "type", "id"):
        x, y = getattr(a, f), getattr(b, f)
        if x is not None and y is not None and x != y:
            return False
    return True


def _merge(target: ParsedName, other: ParsedName, allow_soft_placement: bool,
           override_conflicts: bool) -> ParsedName:
    job, replica, task, dtype, did = target.job, target.replica, target.task, target.type, target.id

    def cur() -> ParsedName:
        return ParsedName(job, replica, task, dtype, did)

    if other.job is not None:
        if job is not None and job != other.job:
            raise DeviceMergeError("jobs", cur(), other)
        job = other.job
    if other.replica is not None:
        if replica is not None and replica != other.replica:
            raise DeviceMergeError("replicas", cur(), other)
        replica = other.replica
    if other.task is not None:
        if task is not None and task != other.task:
            raise DeviceMergeError("tasks", cur(), other)
        task = other.task
    if other.type is not None:
        if dtype is not None and dtype != other.type:
            if not allow_soft_placement:
                raise DeviceMergeError("types", cur(), other)
            if override_conflicts:
                dtype = other.type
            else:
                # Soft placement: forget type and id and stop (the id of `other` is not looked at).
                return ParsedName(job, replica, task, None, None)
        else:
            dtype = other.type
    if other.id is not None:
        if did is not None and did != other.id:
            if not allow_soft_placement:
                raise DeviceMergeError("ids", cur(), other)
            if override_conflicts:
                did = other.id
            else:
                return ParsedName(job, replica, task, dtype, None)
        else:
            did = other.id
    return ParsedName(job, replica, task, dtype, did)


def merge_dev_names(target: ParsedName, other: ParsedName, allow_soft_placement: bool = False) -> ParsedName:
    """``MergeDevNames``: the merged name, or :class:`DeviceMergeError` with TF's message.

    Fields are merged in the order job, replica, task, type, id; ``other``'s set values fill in.
    A job, replica or task conflict is always an error ("Cannot merge devices with incompatible
    jobs: 'TARGET' and 'OTHER'", the target as merged so far). A type conflict is an error without
    soft placement; with it, type **and** id are cleared. An id conflict is an error without soft
    placement; with it the id is cleared.

    Not associative: a later merge can set a cleared id again. TF 2.21 merges a colocation group in
    node order, so ``b`` (``CPU:1``) with ``_class`` ``[loc:@a, loc:@zz]`` (``a`` on ``CPU:0``,
    ``zz`` on ``CPU:2``) becomes ``CPU:*`` after ``a`` and ``CPU:2`` after ``zz``: with the raw
    GraphDef devices the DirectSession put all three on ``CPU:2`` with soft placement (and on
    ``CPU:0`` with ``[loc:@zz, loc:@a]``). Loaded through ``tf.import_graph_def``, ``b`` first takes
    ``a``'s device (the importer copies it), the group merges to ``CPU:*`` and lands on ``CPU:0``
    (``docs/tf-behaviours.md``, "The placer"). Without soft placement both fail on the first merge, ``b`` with ``a``.
    """
    return _merge(target, other, allow_soft_placement, False)


def merge_override_dev_names(target: ParsedName, other: ParsedName) -> ParsedName:
    """``MergeOverrideDevNames``: like a soft merge, but ``other`` wins type/id conflicts.

    Job, replica and task conflicts still raise :class:`DeviceMergeError`.
    """
    return _merge(target, other, True, True)


def merge_unset_dev_names(target: ParsedName, other: ParsedName) -> ParsedName:
    """``MergeUnsetDevNames``: fill only the fields ``target`` leaves unset; never fails."""
    return ParsedName(
        target.job if target.job is not None else other.job,
        target.replica if target.replica is not None else other.replica,
        target.task if target.task is not None else other.task,
        target.type if target.type is not None else other.type,
        target.id if target.id is not None else other.id,
    )


def is_same_address_space(a: ParsedName | str, b: ParsedName | str) -> bool:
    """``IsSameAddressSpace``: job, replica and task all set on both sides and equal.

    Strings are parsed with ``ParseFullName``; an unparsable string gives False (as in TF).
    """
    if not isinstance(a, ParsedName):
        a = parse_full_name(a)
    if not isinstance(b, ParsedName):
        b = parse_full_name(b)
    if a is None or b is None:
        return False
    return (a.job is not None and a.job == b.job and a.replica is not None and a.replica == b.replica
            and a.task is not None and a.task == b.task)


def is_different_address_space(a: ParsedName, b: ParsedName) -> bool:
    """``IsDifferentAddressSpace``: job, replica or task set on both sides and different."""
    return ((a.job is not None and b.job is not None and a.job != b.job)
            or (a.replica is not None and b.replica is not None and a.replica != b.replica)
            or (a.task is not None and b.task is not None and a.task != b.task))


def address_space(name: ParsedName | str) -> ParsedName:
    """``AddressSpace``: the job/replica/task part of a name (type and id dropped)."""
    name = _as_parsed(name)
    return ParsedName(name.job, name.replica, name.task)


# --------------------------------------------------------------------------------------------
# Cluster
# --------------------------------------------------------------------------------------------

_INT32 = (-(1 << 31), (1 << 31) - 1)
_TF_CONFIG_KEYS = frozenset({"cluster", "task", "environment", "rpc_layer"})


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """The task a TF_CONFIG document names: ``{"task": {"type": "worker", "index": 0}}``."""

    type: str
    index: int

    def device(self) -> str:
        """``/job:TYPE/task:INDEX``."""
        return f"/job:{self.type}/task:{self.index}"


def _task_index(value: Any, job: str, source: str | None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ClusterError(f"job {job!r}: task index {value!r} is not an integer", source)
    try:
        index = int(value)  # TF: int(i) for the keys of a sparse job
    except ValueError:
        raise ClusterError(f"job {job!r}: task index {value!r} is not an integer", source) from None
    if not _INT32[0] <= index <= _INT32[1]:
        raise ClusterError(f"job {job!r}: task index {index} does not fit in an int32", source)
    return index


def _address(value: Any, job: str, index: int, source: str | None) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise ClusterError(f"job {job!r}, task {index}: address is not UTF-8", source) from None
    if not isinstance(value, str):
        raise ClusterError(f"job {job!r}, task {index}: address {value!r} is not a string", source)
    return value


class ClusterSpec:
    """``tf.train.ClusterSpec``: jobs (in the order given) -> {task index -> address}.

    A job is a list of addresses (task i = position i) or a sparse mapping from task index to
    address (``{"ps": {0: "a:1", 5: "b:1"}}``; string keys are converted with ``int()`` as TF
    does, which is what JSON files need). ``num_tasks`` counts the tasks; ``task_indices`` lists
    them sorted. Job names are kept as given, as in TF; :class:`DeviceSet` rejects names the C++
    runtime cannot put in a device name.
    """

    __slots__ = ("_jobs", "source")

    def __init__(self, jobs: Mapping[str, Mapping[int, str]] | None = None, source: str | None = None):
        self._jobs: dict[str, dict[int, str]] = {j: dict(t) for j, t in (jobs or {}).items()}
        self.source = source

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, cluster: Mapping[str, Any], source: str | None = None) -> ClusterSpec:
        """Mirror ``tf.train.ClusterSpec(dict)``: lists/tuples or sparse dicts of addresses."""
        if isinstance(cluster, ClusterSpec):
            return cls(cluster._jobs, source or cluster.source)
        if not isinstance(cluster, Mapping):
            raise ClusterError(f"a cluster must map job names to lists of addresses, not "
                               f"{type(cluster).__name__}", source)
        jobs: dict[str, dict[int, str]] = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str):
                raise ClusterError(f"job name {job!r} is not a string", source)
            if isinstance(tasks, (list, tuple)):
                jobs[job] = {i: _address(a, job, i, source) for i, a in enumerate(tasks)}
            elif isinstance(tasks, Mapping):
                job_tasks: dict[int, str] = {}
                for key, a in tasks.items():
                    index = _task_index(key, job, source)
                    job_tasks[index] = _address(a, job, index, source)
                jobs[job] = job_tasks
            else:
                raise ClusterError(f"the tasks of job {job!r} must be a list of addresses or a mapping "
                                   f"from task index to address, not {type(tasks).__name__}", source)
        return cls(jobs, source)

    @classmethod
    def from_json_file(cls, path: str | Path) -> tuple[ClusterSpec, TaskSpec | None]:
        """Read a cluster file: ``{"ps": [...], "worker": [...]}`` or a TF_CONFIG document.

        A TF_CONFIG document (``{"cluster": {...}, "task": {"type": "worker", "index": 0}}``,
        keys among cluster/task/environment/rpc_layer) gives its cluster and the :class:`TaskSpec`
        it names (None without ``"task"``); a plain cluster gives ``(cluster, None)``. Raises
        :class:`ClusterError` naming the file: unreadable file, bad JSON, no jobs, non-integer
        task index, a task whose type is not a job of the cluster or whose index is not one of
        its tasks...
        """
        source = str(path)
        try:
            # A regular file of bounded size only: not /dev/zero, a FIFO, or a 2 GB JSON array.
            text = read_regular_file(path, source, MAX_CLUSTER_FILE_BYTES, what="cluster", option=None).decode("utf-8")
        except PlacevizError as e:
            problem = getattr(e, "problem", None) or str(e)
            raise ClusterError(problem.replace("cannot read:", "cannot read the cluster file:", 1), source) from None
        except UnicodeDecodeError:
            raise ClusterError("the cluster file is not UTF-8 text", source) from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ClusterError(f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}", source) from None
        return cls.from_document(doc, source)

    @classmethod
    def from_document(cls, doc: Any, source: str | None = None) -> tuple[ClusterSpec, TaskSpec | None]:
        """:meth:`from_json_file` on an already decoded JSON value (e.g. ``$TF_CONFIG``)."""
        if not isinstance(doc, dict):
            raise ClusterError(f"expected a JSON object (job -> addresses, or TF_CONFIG), "
                               f"got {type(doc).__name__}", source)
        task = None
        if _looks_like_tf_config(doc):
            cluster_doc = doc["cluster"]
            if not isinstance(cluster_doc, dict):
                raise ClusterError("TF_CONFIG 'cluster' must be an object mapping job names to "
                                   "addresses", source)
            spec = cls.from_dict(cluster_doc, source)
            if "task" in doc:
                task = _tf_config_task(doc["task"], spec, source)
        else:
            spec = cls.from_dict(doc, source)
        if not spec.jobs:
            raise ClusterError("the cluster defines no jobs", source)
        return spec, task

    @classmethod
    def from_ps_tasks(cls, ps_tasks: int, workers: int = 1) -> ClusterSpec:
        """The cluster ``--ps-tasks N`` implies: job ``ps`` with N tasks, job ``worker`` with ``workers``.

        Addresses are placeholders (``ps0:2222``, ``worker0:2222``...), as in TF's own tests.
        """
        if isinstance(ps_tasks, bool) or not isinstance(ps_tasks, int) or ps_tasks < 1:
            raise ClusterError(f"the number of ps tasks must be a positive integer, got {ps_tasks!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ClusterError(f"the number of workers must be a positive integer, got {workers!r}")
        check_count(ps_tasks, MAX_TASKS_PER_JOB, "the number of ps tasks")
        check_count(workers, MAX_TASKS_PER_JOB, "the number of workers")
        return cls({"ps": {i: f"ps{i}:2222" for i in range(ps_tasks)},
                    "worker": {i: f"worker{i}:2222" for i in range(workers)}}, f"--ps-tasks {ps_tasks}")

    # -- queries -----------------------------------------------------------------------------

    @property
    def jobs(self) -> list[str]:
        """Job names, in the order given (TF's ``ClusterSpec.jobs``)."""
        return list(self._jobs)

    def _job(self, job: str) -> dict[int, str]:
        try:
            return self._jobs[job]
        except KeyError:
            known = ", ".join(self._jobs) or "none"
            raise ClusterError(f"no job {job!r} in the cluster (jobs: {known})", self.source) from None

    def num_tasks(self, job: str) -> int:
        """Number of tasks of ``job`` (a sparse job counts its entries); ClusterError if missing."""
        return len(self._job(job))

    def task_indices(self, job: str) -> list[int]:
        """Sorted task indices of ``job``; ClusterError if missing."""
        return sorted(self._job(job))

    def task_address(self, job: str, index: int) -> str:
        """Address of one task; ClusterError if the job or task is missing."""
        tasks = self._job(job)
        try:
            return tasks[index]
        except KeyError:
            raise ClusterError(f"no task {index!r} in job {job!r}", self.source) from None

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """``ClusterSpec.as_dict()``: a list for a dense job, a dict for a sparse one, {} if empty."""
        out: dict[str, list[str] | dict[int, str]] = {}
        for job, tasks in self._jobs.items():
            indices = sorted(tasks)
            if not indices:
                out[job] = {}
            elif max(indices) + 1 == len(indices):
                out[job] = [tasks[i] for i in indices]
            else:
                out[job] = {i: tasks[i] for i in indices}
        return out

    def __bool__(self) -> bool:
        return bool(self._jobs)

    def __contains__(self, job: object) -> bool:
        return job in self._jobs

    def __eq__(self, other) -> bool:
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __hash__(self) -> int:
        return hash(tuple((j, tuple(sorted(t.items()))) for j, t in self._jobs.items()))

    def __repr__(self) -> str:
        items = ", ".join(f"{j!r}: {v!r}" for j, v in sorted(self.as_dict().items()))
        return "ClusterSpec({" + items + "})"


def check_cluster_bounds(cluster: ClusterSpec, cpus_per_task: int = 1, gpus_per_worker: int = 0,
                         gpu_jobs: Iterable[str] = ("worker",)) -> None:
    """:class:`LimitError` (naming the bound and the cluster's source) for a cluster beyond
    placeviz's bounds (:mod:`placeviz.limits`): a task index of 10,000 or more, more than 10,000
    tasks in a job or 100,000 in all, more than 1,024 CPUs or GPUs per task, or a device set of
    more than 100,000 devices. Counts only: nothing is allocated before the check.
    """
    source = cluster.source
    check_count(cpus_per_task, MAX_DEVICES_PER_TASK, "the number of CPUs per task", source)
    check_count(gpus_per_worker, MAX_DEVICES_PER_TASK, "the number of GPUs per worker", source)
    total = devices = 0
    gpu_jobs = frozenset(gpu_jobs)
    for job, tasks in cluster._jobs.items():
        check_count(len(tasks), MAX_TASKS_PER_JOB, f"the number of tasks of job {job!r}", source)
        top = max(tasks, default=0)
        if top >= MAX_TASKS_PER_JOB:
            raise LimitError(f"{source + ': ' if source else ''}job {job!r} has task {top}, beyond placeviz's "
                             f"bound of {MAX_TASKS_PER_JOB:,} tasks per job (task indices 0-{MAX_TASKS_PER_JOB - 1})")
        total += len(tasks)
        devices += len(tasks) * (cpus_per_task + (gpus_per_worker if job in gpu_jobs else 0))
    check_count(total, MAX_CLUSTER_TASKS, "the number of tasks in the cluster", source)
    check_count(devices, MAX_CLUSTER_DEVICES, "the number of devices in the cluster (tasks x devices per task)",
                source)


def _looks_like_tf_config(doc: dict) -> bool:
    cluster = doc.get("cluster")
    if not isinstance(cluster, dict) or not set(doc) <= _TF_CONFIG_KEYS:
        return False
    # A plain cluster with a sparse job named "cluster" maps indices to address strings.
    return not cluster or all(isinstance(v, (list, dict)) for v in cluster.values())


def _tf_config_task(task: Any, spec: ClusterSpec, source: str | None) -> TaskSpec | None:
    if task is None or task == {}:
        return None
    if not isinstance(task, dict):
        raise ClusterError("TF_CONFIG 'task' must be an object with 'type' and 'index'", source)
    ttype = task.get("type")
    if not isinstance(ttype, str) or not ttype:
        raise ClusterError("TF_CONFIG 'task' has no 'type' (the job name)", source)
    if ttype not in spec:
        raise ClusterError(f"TF_CONFIG task type {ttype!r} is not a job of the cluster "
                           f"(jobs: {', '.join(spec.jobs)})", source)
    index = _task_index(task.get("index", 0), ttype, source)
    if index not in spec.task_indices(ttype):
        raise ClusterError(f"TF_CONFIG task index {index} is not a task of job {ttype!r} "
                           f"(tasks: {', '.join(map(str, spec.task_indices(ttype)))})", source)
    return TaskSpec(ttype, index)


# --------------------------------------------------------------------------------------------
# Devices of a cluster and TF's device order
# --------------------------------------------------------------------------------------------

DEVICE_TYPE_PRIORITY: dict[str, int] = {"GPU": 210, "CPU": 60, "XLA_CPU": 50, "XLA_GPU": 50}
"""``DeviceFactory::DevicePriority`` per device type: the priority its factory registered with.

``REGISTER_LOCAL_DEVICE_FACTORY("GPU", GPUDeviceFactory, 210)``;
``REGISTER_LOCAL_DEVICE_FACTORY("CPU", ThreadPoolDeviceFactory, 60)`` (a CUDA build registers
``GPUCompatibleCPUDeviceFactory`` for CPU with 70, which wins; GPU still outranks CPU); factories
registered without a priority (``XLA_CPU``, ``XLA_GPU``) get 50. A type without a factory gets -1.
"""


def device_type_priority(device_type: str, table: Mapping[str, int] | None = None) -> int:
    """``DeviceSet::DeviceTypeOrder`` = ``DeviceFactory::DevicePriority``: -1 for unknown types."""
    return (DEVICE_TYPE_PRIORITY if table is None else table).get(device_type, -1)


@dataclass(frozen=True, slots=True)
class Device:
    """One runtime device: canonical full name and its parsed form (complete)."""

    name: str
    parsed: ParsedName

    @classmethod
    def from_name(cls, name: str | ParsedName) -> Device:
        parsed = _as_parsed(name)
        if not parsed.is_complete:
            raise DeviceSpecError(f"not a complete device name: '{parsed.to_string()}'")
        return cls(parsed.to_string(), parsed)

    @property
    def device_type(self) -> str:
        return self.parsed.type  # type: ignore[return-value]

    @property
    def task_name(self) -> str:
        """``/job:J/replica:R/task:T``."""
        return address_space(self.parsed).to_string()

    def __str__(self) -> str:
        return self.name


class DeviceSet:
    """The devices a session can place on (``tensorflow::DeviceSet``).

    ``DeviceSet(cluster, cpus_per_task=1, gpus_per_worker=0)``: for every task of every job of
    the cluster (job order as given, tasks ascending), ``cpus_per_task`` CPU devices and, on tasks
    of the jobs in ``gpu_jobs`` (default: ``worker`` only), ``gpus_per_worker`` GPU devices, named
    ``/job:J/replica:0/task:T/device:CPU:k`` (what a MasterSession lists). :meth:`local` builds a
    DirectSession's set (job ``localhost``); :meth:`from_names` takes explicit names. The cluster
    and counts are checked against placeviz's bounds first (:func:`check_cluster_bounds`), so a
    hostile task index or device count is a :class:`~placeviz.limits.LimitError`, not gigabytes.
    """

    __slots__ = ("devices", "_by_name")

    def __init__(self, cluster: ClusterSpec | Mapping[str, Any] | None = None, cpus_per_task: int = 1,
                 gpus_per_worker: int = 0, *, gpu_jobs: Iterable[str] = ("worker",)):
        devices: list[Device] = []
        if cluster is not None:
            if not isinstance(cluster, ClusterSpec):
                cluster = ClusterSpec.from_dict(cluster)
            for n, what in ((cpus_per_task, "CPUs per task"), (gpus_per_worker, "GPUs per worker")):
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise ClusterError(f"the number of {what} must be a non-negative integer, got {n!r}",
                                       cluster.source)
            gpu_jobs = frozenset(gpu_jobs)
            check_cluster_bounds(cluster, cpus_per_task, gpus_per_worker, gpu_jobs)
            for job in cluster.jobs:
                if not _is_job_name(job):
                    raise ClusterError(f"job name {job!r} cannot be used in a TensorFlow device name "
                                       "(a letter, then letters, digits or '_')", cluster.source)
                for task in cluster.task_indices(job):
                    if task < 0:
                        raise ClusterError(f"job {job!r}: negative task index {task} cannot be used in "
                                           "a device name", cluster.source)
                    for k in range(cpus_per_task):
                        devices.append(Device(full_name(job, 0, task, "CPU", k), ParsedName(job, 0, task, "CPU", k)))
                    if job in gpu_jobs:
                        for k in range(gpus_per_worker):
                            devices.append(Device(full_name(job, 0, task, "GPU", k),
                                                  ParsedName(job, 0, task, "GPU", k)))
        self._init(devices)

    def _init(self, devices: list[Device]) -> None:
        self.devices: tuple[Device, ...] = tuple(devices)
        self._by_name: dict[str, Device] = {}
        for d in self.devices:
            for name in names_for_device_mappings(d.parsed):
                self._by_name.setdefault(name, d)

    @classmethod
    def from_names(cls, names: Iterable[str | ParsedName | Device]) -> DeviceSet:
        """A device set from explicit complete device names (any parseable form)."""
        ds = cls.__new__(cls)
        ds._init([n if isinstance(n, Device) else Device.from_name(n) for n in names])
        return ds

    @classmethod
    def local(cls, cpus: int = 1, gpus: int = 0, job: str = "localhost") -> DeviceSet:
        """A DirectSession's devices: ``/job:localhost/replica:0/task:0/device:CPU:k`` (+ GPUs)."""
        return cls.from_names([full_name(job, 0, 0, "CPU", k) for k in range(cpus)]
                              + [full_name(job, 0, 0, "GPU", k) for k in range(gpus)])

    def __len__(self) -> int:
        return len(self.devices)

    def __iter__(self) -> Iterator[Device]:
        return iter(self.devices)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._by_name

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    def find(self, name: str) -> Device | None:
        """``FindDeviceByName``: by canonical or legacy (``.../cpu:0``) full name."""
        return self._by_name.get(name)

    def matching(self, pattern: ParsedName | str) -> list[Device]:
        """``FindMatchingDevices``: devices (in set order) that complete ``pattern``."""
        pattern = _as_parsed(pattern)
        return [d for d in self.devices if is_complete_specification(pattern, d.parsed)]

    def device_types(self, type_priority: Mapping[str, int] | None = None) -> list[str]:
        """``PrioritizedDeviceTypeList``: the types present, higher priority first, then by name."""
        types = {d.device_type for d in self.devices}
        return sorted(types, key=lambda t: (-device_type_priority(t, type_priority), t))

    def sorted(self, kernel_priority_by_type: Mapping[str, int] | None = None,
               master_task: ParsedName | str | None = None,
               type_priority: Mapping[str, int] | None = None) -> list[Device]:
        """:func:`sort_devices` over this set."""
        return sort_devices(self.devices, kernel_priority_by_type, master_task, type_priority=type_priority)


def _master_address(master_task: ParsedName | str) -> tuple[str, int, int]:
    pn = _as_parsed(master_task)
    if pn.job is None or pn.task is None:
        raise DeviceSpecError(f"the master task must name a job and a task, got '{pn.to_string()}'")
    return pn.job, 0 if pn.replica is None else pn.replica, pn.task


def sort_devices(devices: Iterable[Device | str | ParsedName],
                 kernel_priority_by_type: Mapping[str, int] | None = None,
                 master_task: ParsedName | str | None = None, *,
                 type_priority: Mapping[str, int] | None = None) -> list[Device]:
    """Order candidate devices as TF 2.x's placer does.

    Mirrors the comparator of ``DeviceSet::SortPrioritizedDeviceVector``
    (``tensorflow/core/common_runtime/device_set.cc``, TF 2.x), which sorts (device, priority)
    pairs with:

    1. the pair's priority, higher first. In the placer (``ColocationGraph::FilterSupportedDevices``)
       that is the **kernel priority** of the device's type for the node, from
       ``kernel_priority_by_type`` (type -> priority; devices of types missing from it are dropped,
       as FilterSupportedDevices keeps only supported types). With ``None`` it is the device-type
       priority, as in ``DeviceSet::prioritized_devices()``;
    2. only when the two type names differ: ``DeviceFactory::DevicePriority`` of the type, higher
       first (:data:`DEVICE_TYPE_PRIORITY`, or ``type_priority``; equal priorities fall through);
    3. ``Device::IsLocal()``: local devices first. A device is local when it lives in the master's
       task (``master_task``, e.g. ``/job:worker/task:1``, replica 0 if unset); with ``None`` every
       device is local (DirectSession);
    4. the full device name as a plain byte string (``CPU:10`` < ``CPU:2``, ``/job:ps`` <
       ``/job:worker``).

    Older TF (1.x) had no step 3. The placer then puts the session's default local device, if it
    is a candidate, in front of this order (FilterSupportedDevices); that is the placer's business.
    """
    items = [d if isinstance(d, Device) else Device.from_name(d) for d in devices]
    master = _master_address(master_task) if master_task is not None else None

    def key(d: Device):
        t = d.parsed.type
        if kernel_priority_by_type is None:
            prio = device_type_priority(t, type_priority)
        else:
            prio = kernel_priority_by_type[t]
        if master is None:
            remote = False
        else:
            p = d.parsed
            remote = (p.job, p.replica, p.task) != master
        # Step 2 compares type priorities only for different type names; for equal names the
        # priorities are equal anyway, so comparing them always is the same order.
        return (-prio, -device_type_priority(t, type_priority), remote, d.name.encode("utf-8"))

    if kernel_priority_by_type is not None:
        items = [d for d in items if d.parsed.type in kernel_priority_by_type]
    return sorted(items, key=key)

