"""Python's device names: ``tf.DeviceSpec`` and the ``MergeDevice`` device function.

Mirrors ``DeviceSpecV2`` of TF 2.21 (``tensorflow/python/framework/device_spec.py``:
``from_string``, ``to_string``, ``make_merged_spec``) and ``canonical_name`` / ``merge_device`` /
``MergeDevice`` of ``tensorflow/python/framework/device.py``: what ``tf.device`` scopes and
``replica_device_setter`` compute and write into ``NodeDef.device``. placeviz's setter replay
(:mod:`placeviz.placement.setter`) runs on these.

Python's grammar is not the C++ runtime's (:mod:`~placeviz.devices.device_name_utils`): it
uppercases lowercase ``cpu``/``gpu`` everywhere (also in ``/device:cpu:0``) and accepts bare
``CPU:0`` pieces. TF's importer re-applies every node's device through ``tf.device``
(``importer._ProcessNewOps``), so a GraphDef loaded from Python reaches the placer in this
module's canonical form; :func:`canonical_device` is that step.

Parses and merges are cached per string (:data:`~placeviz.devices.errors.CACHE_LIMIT`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from placeviz.devices.errors import CACHE_LIMIT, DeviceSpecError

VALID_DEVICE_TYPES = frozenset({"CPU", "GPU", "TPU", "CUSTOM", "EPU"})
"""``device_spec._VALID_DEVICE_TYPES`` of TF 2.21: the types the legacy ``TYPE:N`` piece accepts.

TF adds the types of installed pluggable devices (``TF_ListPluggablePhysicalDevices``); placeviz
assumes none are installed.
"""

_PARSE_CACHE: dict[str, PyDeviceSpec] = {}
_MERGE_CACHE: dict[tuple[str, str], PyDeviceSpec] = {}


def _spec_int(value: Any, what: str, spec: str | None) -> int:
    try:
        return int(value)  # TF converts with int(): accepts " 1", "+1", "01", "1_0" like TF does
    except (TypeError, ValueError):
        where = f" in device spec {spec!r}" if spec is not None else ""
        raise DeviceSpecError(f"invalid {what} {value!r}{where}: not an integer") from None


def _spec_string(job: str | None, replica: int | None, task: int | None, device_type: str | None,
                 device_index: int | None) -> str:
    out: list[str] = []
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

    def __post_init__(self) -> None:
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
        if len(_PARSE_CACHE) >= CACHE_LIMIT:
            _PARSE_CACHE.clear()
        _PARSE_CACHE[spec] = result
        return result

    @classmethod
    def _parse_uncached(cls, spec: str) -> PyDeviceSpec:
        job: str | None = None
        replica_text: str | None = None
        task_text: str | None = None
        device_type: str | None = None
        device_index: int | None = None
        for piece in spec.split("/"):
            y = piece.split(":")
            ly = len(y)
            head = y[0]
            if ly == 2 and head == "job":
                job = y[1]
            elif ly == 2 and head == "replica":
                replica_text = y[1]
            elif ly == 2 and head == "task":
                task_text = y[1]
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
        replica = _spec_int(replica_text, "replica", spec) if replica_text is not None else None
        task = _spec_int(task_text, "task", spec) if task_text is not None else None
        return cls(job, replica, task, device_type, device_index)

    def to_string(self) -> str:
        """TF's canonical string: ``/job:J/replica:R/task:T/device:TYPE:N`` for the set fields.

        A type without an index prints ``:*``; an index without a type is not printed at all.
        """
        return self._string

    def __str__(self) -> str:
        return self._string

    def __eq__(self, other: object) -> bool:
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
        if len(_MERGE_CACHE) >= CACHE_LIMIT:
            _MERGE_CACHE.clear()
        _MERGE_CACHE[key] = result
        return result

    def replace(self, **changes: Any) -> PyDeviceSpec:
        """``DeviceSpec.replace``: a copy with the given fields set (``None`` unsets a field)."""
        fields: dict[str, Any] = {"job": self.job, "replica": self.replica, "task": self.task,
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
            if len(self._cache) >= CACHE_LIMIT:
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
