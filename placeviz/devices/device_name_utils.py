"""C++ device names: ``DeviceNameUtils``, as TF's runtime placer and partitioner parse and merge them.

Mirrors ``DeviceNameUtils`` (``xla/tsl/util/device_name_utils.cc``, formerly
``tensorflow/core/util/device_name_utils.cc``): :class:`ParsedName`, ``ParseFullName``,
``ParseLocalName``, ``MergeDevNames`` and the address-space helpers. Unlike Python's
``tf.DeviceSpec`` (:mod:`~placeviz.devices.device_spec`), C++ keeps ``/device:cpu:0`` as a device
of type ``"cpu"`` and only maps the legacy ``/cpu:N`` / ``/gpu:N`` pieces to ``CPU``/``GPU``.

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
:class:`~placeviz.devices.device_spec.PyDeviceSpec`, so ``/device:cpu:1`` and ``cpu:2`` become
``/device:CPU:1`` and ``/device:CPU:2`` first (and a node with a ``_class`` attr takes the device
of the first op it is colocated with that has one). That is why these strings "work" from Python.
placeviz's placer should canonicalise each NodeDef device with
:func:`~placeviz.devices.device_spec.canonical_device` first when it models a graph run from
Python, and use :func:`parse_full_name` on the raw string when it models the C++ runtime loading
the GraphDef directly.

``ParseFullName`` keeps only the low 32 bits of a number that fits in uint64 (:func:`_consume_number`);
the bounds placeviz puts on task and device counts are in :mod:`placeviz.limits`. Parses are cached
per string (:data:`~placeviz.devices.errors.CACHE_LIMIT`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from placeviz.devices.errors import CACHE_LIMIT, DeviceSpecError
from placeviz.errors import PlacevizError


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
    cached: ParsedName | None | Literal[False] = _FULL_CACHE.get(name, False)
    if cached is not False:
        return cached
    result = _parse_full_name(name)
    if len(_FULL_CACHE) >= CACHE_LIMIT:
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


def is_job_name(job: str) -> bool:
    """Whether ``job`` is a job name ``ParseFullName`` accepts (a letter, then letters, digits or ``_``)."""
    return _JOB_RE.fullmatch(job) is not None


def full_name(job: str, replica: int, task: int, type: str, id: int) -> str:
    """``DeviceNameUtils::FullName``: ``/job:J/replica:R/task:T/device:TYPE:N``.

    Raises :class:`DeviceSpecError` where TF's ``CHECK``s would abort: an invalid job name, a
    negative number or an empty type.
    """
    if not is_job_name(job):
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
    assert pn.type is not None  # is_complete
    return [f"{head}/device:{pn.type}:{pn.id}", f"{head}/{pn.type.lower()}:{pn.id}"]


def split_device_name(name: str) -> tuple[str, str] | None:
    """``SplitDeviceName``: ``("/job:J/replica:R/task:T", "TYPE:N")`` or None.

    Needs type and id; the task part holds whichever of job/replica/task are set.
    """
    pn = parse_full_name(name)
    if pn is None or pn.type is None or pn.id is None:
        return None
    return address_space(pn).to_string(), f"{pn.type}:{pn.id}"


@lru_cache(maxsize=CACHE_LIMIT)
def task_of(device: str, replica: bool = False) -> str | None:
    """The task a device string belongs to, written once for every report, label and rule that
    groups devices by task: ``/job:J/task:T`` (an unset task reads as 0, the task TF fills in;
    None without a job), or with ``replica`` the name's task part, ``AddressSpace`` spelt by
    ``ParsedNameToString`` (``/job:J/replica:R/task:T``, unset fields left out; for a complete
    name, the text before ``/device:``). None where ``ParseFullName`` rejects the string. Cached
    per string: rules ask once per node.
    """
    pn = parse_full_name(device) if device else (ParsedName() if replica else None)
    if pn is None:
        return None
    if replica:
        return address_space(pn).to_string()
    return None if pn.job is None else f"/job:{pn.job}/task:{pn.task or 0}"


@lru_cache(maxsize=CACHE_LIMIT)
def job_of(device: str) -> str | None:
    """The job a device string names, as ``ParseFullName`` reads it: None when it names none (an
    empty string, ``/device:CPU:0``, ``/job:*``) or when ``ParseFullName`` rejects the string.
    Written once for every rule, view and report that asks which job a device is in; a caller
    that wants another value for "no job" says so itself (``job_of(d) or ""``). Cached per
    string: rules ask once per node.
    """
    pn = parse_full_name(device)
    return None if pn is None else pn.job


@lru_cache(maxsize=CACHE_LIMIT)
def task_label(device: str) -> str | None:
    """The short label of the task a device string names, ``J:T`` (``ps:1`` for
    ``/job:ps/replica:0/task:1/device:CPU:0``), for the views' box labels and the timeline's
    processes: ``J`` alone when the task is unset (unlike :func:`task_of`, a label does not fill
    in task 0: an unplaced ``/job:ps`` is not yet on a task); None without a job or where
    ``ParseFullName`` rejects the string. Cached per string.
    """
    job = job_of(device)
    if job is None:
        return None
    pn = parse_full_name(device)
    assert pn is not None  # job_of parsed it
    return job if pn.task is None else f"{job}:{pn.task}"


def as_parsed(name: ParsedName | str) -> ParsedName:
    """``name`` itself, or the string parsed by :meth:`ParsedName.from_string` (raises on a malformed one)."""
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
    pa = a if isinstance(a, ParsedName) else parse_full_name(a)
    pb = b if isinstance(b, ParsedName) else parse_full_name(b)
    if pa is None or pb is None:
        return False
    return (pa.job is not None and pa.job == pb.job and pa.replica is not None and pa.replica == pb.replica
            and pa.task is not None and pa.task == pb.task)


def is_different_address_space(a: ParsedName, b: ParsedName) -> bool:
    """``IsDifferentAddressSpace``: job, replica or task set on both sides and different."""
    return ((a.job is not None and b.job is not None and a.job != b.job)
            or (a.replica is not None and b.replica is not None and a.replica != b.replica)
            or (a.task is not None and b.task is not None and a.task != b.task))


def address_space(name: ParsedName | str) -> ParsedName:
    """``AddressSpace``: the job/replica/task part of a name (type and id dropped)."""
    name = as_parsed(name)
    return ParsedName(name.job, name.replica, name.task)
