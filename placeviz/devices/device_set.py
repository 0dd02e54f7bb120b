"""The devices a session places on, and the order TF's placer tries them in.

Mirrors ``tensorflow::DeviceSet`` (``tensorflow/core/common_runtime/device_set.cc``):
:class:`DeviceSet` lists the devices a MasterSession sees for a
:class:`~placeviz.devices.cluster_spec.ClusterSpec` (or a DirectSession, :meth:`DeviceSet.local`),
and :func:`sort_devices` orders candidates like TF 2.x's ``DeviceSet::SortPrioritizedDeviceVector``,
with the device-type priorities of ``DeviceFactory::DevicePriority``
(``tensorflow/core/framework/device_factory.h``). Device names are built and matched with the C++
runtime's rules (:mod:`~placeviz.devices.device_name_utils`). A cluster and its device counts are
checked against placeviz's bounds (:func:`~placeviz.devices.cluster_spec.check_cluster_bounds`)
before any device is built.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from placeviz.devices.cluster_spec import ClusterError, ClusterSpec, check_cluster_bounds
from placeviz.devices.device_name_utils import (
    ParsedName,
    address_space,
    as_parsed,
    full_name,
    is_complete_specification,
    is_job_name,
    names_for_device_mappings,
    parse_full_name,
)
from placeviz.devices.device_spec import canonical_device
from placeviz.devices.errors import DeviceSpecError

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


def prioritized_device_types(types: Iterable[str], table: Mapping[str, int] | None = None) -> list[str]:
    """``DeviceSet::PrioritizedDeviceTypeList``'s order (device_set.cc): higher
    :func:`device_type_priority` first, then by name (GPU, CPU, XLA_CPU, XLA_GPU, then types without
    a factory). The one device-type order: :meth:`DeviceSet.device_types` and the op table's
    default types (``placeviz.ops.OpTable.default_device_types``) use it."""
    return sorted(types, key=lambda t: (-device_type_priority(t, table), t))


def requested_device(device: str, python_import: bool = True) -> ParsedName | None:
    """The device a NodeDef's ``device`` string asks TF's placer for, parsed (None: TF cannot parse it).

    The one rule for device types: TF compares them exactly, case included. ``DeviceSet::
    FindMatchingDevices`` (tensorflow/core/common_runtime/device_set.cc) keeps the devices that
    ``DeviceNameUtils::IsCompleteSpecification`` accepts, which compares the ``type`` strings with
    ``==`` (xla/tsl/util/device_name_utils.cc, also ``IsSpecification``): ``/device:Cpu:0`` names
    no device. Only the string the placer gets depends on the path the graph took:

    * from Python (``python_import``, the usual case: a graph built under ``tf.device``, or read
      with ``import_graph_def``/``import_meta_graph``, whose importer re-applies each device through
      ``tf.device``), every device went through ``DeviceSpec`` first
      (tensorflow/python/framework/device_spec.py ``_string_to_components``,
      ``_as_device_str_or_none``): the legacy ``/cpu:N``/``/Gpu:N`` pieces and the exact types
      ``cpu`` and ``gpu`` of ``/device:cpu:0`` become upper case; ``/device:Cpu:0`` stays ``Cpu``
      (:func:`~placeviz.devices.device_spec.canonical_device`);
    * raw, as the C++ runtime loads a GraphDef (``python_import=False``), ``ParseFullName`` upper-cases
      only the legacy pieces: ``/device:cpu:0`` is a type ``cpu`` that no device has.

    Checked with TF's placer on CPU (``tests/test_devices.py::test_requested_device_types_match_tf``,
    ``::test_placer_lowercase_types``). Matched with :meth:`DeviceSet.requested`.
    """
    if python_import:
        try:
            device = canonical_device(device)
        except DeviceSpecError:
            return None
    return parse_full_name(device)


@dataclass(frozen=True, slots=True)
class Device:
    """One runtime device: canonical full name and its parsed form (complete)."""

    name: str
    parsed: ParsedName

    @classmethod
    def from_name(cls, name: str | ParsedName) -> Device:
        parsed = as_parsed(name)
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
                if not is_job_name(job):
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
        """``FindMatchingDevices``: devices (in set order) that complete ``pattern`` (device types
        compared exactly, case included: :func:`requested_device`)."""
        pattern = as_parsed(pattern)
        return [d for d in self.devices if is_complete_specification(pattern, d.parsed)]

    def requested(self, device: str, python_import: bool = True) -> list[Device] | None:
        """The devices (in set order) a NodeDef's ``device`` string names for TF's placer: the
        string read as :func:`requested_device` reads it, then :meth:`matching`. None when TF
        cannot parse it."""
        pattern = requested_device(device, python_import)
        return None if pattern is None else self.matching(pattern)

    def device_types(self, type_priority: Mapping[str, int] | None = None) -> list[str]:
        """``PrioritizedDeviceTypeList``: the types present, higher priority first, then by name."""
        return prioritized_device_types({d.device_type for d in self.devices}, type_priority)

    def sorted(self, kernel_priority_by_type: Mapping[str, int] | None = None,
               master_task: ParsedName | str | None = None,
               type_priority: Mapping[str, int] | None = None) -> list[Device]:
        """:func:`sort_devices` over this set."""
        return sort_devices(self.devices, kernel_priority_by_type, master_task, type_priority=type_priority)


def _master_address(master_task: ParsedName | str) -> tuple[str, int, int]:
    pn = as_parsed(master_task)
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

    def key(d: Device) -> tuple[int, int, bool, bytes]:
        t = d.device_type  # complete: the type is set
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
