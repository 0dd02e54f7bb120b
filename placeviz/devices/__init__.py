"""Device names and clusters exactly as TensorFlow handles them, without importing TensorFlow.

TensorFlow has two device-name grammars, and placeviz needs both. One module per TF source:

* :mod:`~placeviz.devices.device_spec`: the **Python side** (:class:`PyDeviceSpec`,
  :class:`MergeDevice`), what ``tf.device`` scopes and ``replica_device_setter`` write into
  ``NodeDef.device`` (``tensorflow/python/framework/device_spec.py``, ``device.py``).
* :mod:`~placeviz.devices.device_name_utils`: the **C++ side** (:class:`ParsedName`,
  :func:`parse_full_name`, :func:`merge_dev_names`...), what the runtime placer and the
  partitioner parse and merge (``xla/tsl/util/device_name_utils.cc``).
* :mod:`~placeviz.devices.cluster_spec`: :class:`ClusterSpec`, cluster files and TF_CONFIG
  (``tensorflow/python/training/server_lib.py``).
* :mod:`~placeviz.devices.device_set`: :class:`DeviceSet` and TF's device order
  :func:`sort_devices` (``tensorflow/core/common_runtime/device_set.cc``).
* :mod:`~placeviz.devices.errors`: :class:`DeviceSpecError` and the cache bound, shared by the
  modules above.

The two grammars differ: Python uppercases lowercase ``cpu``/``gpu`` everywhere (also in
``/device:cpu:0``) and accepts bare ``CPU:0`` pieces; C++ keeps ``/device:cpu:0`` as a device of
type ``"cpu"`` and only maps the legacy ``/cpu:N`` / ``/gpu:N`` pieces to ``CPU``/``GPU``
(``device_name_utils`` tells what the placer makes of that).

Imports go one way: ``errors`` <- ``device_spec``, ``device_name_utils``; ``cluster_spec`` needs
neither grammar; ``device_set`` <- ``device_name_utils``, ``device_spec`` (a NodeDef's device as the
placer reads it, :func:`~placeviz.devices.device_set.requested_device`), ``cluster_spec``. Every
public name is re-exported here: import them as ``from placeviz.devices import X``.
"""

from placeviz.devices.cluster_spec import (
    WORKER_JOBS,
    ClusterError,
    ClusterSpec,
    TaskSpec,
    check_cluster_bounds,
)
from placeviz.devices.device_name_utils import (
    DeviceMergeError,
    ParsedName,
    address_space,
    are_compatible,
    full_name,
    is_complete_specification,
    is_different_address_space,
    is_same_address_space,
    is_specification,
    job_of,
    local_name,
    merge_dev_names,
    merge_override_dev_names,
    merge_unset_dev_names,
    names_for_device_mappings,
    parse_full_name,
    parse_full_or_local,
    parse_local_name,
    split_device_name,
    task_label,
    task_of,
)
from placeviz.devices.device_set import (
    DEVICE_TYPE_PRIORITY,
    Device,
    DeviceSet,
    device_type_priority,
    prioritized_device_types,
    requested_device,
    sort_devices,
)
from placeviz.devices.device_spec import (
    VALID_DEVICE_TYPES,
    MergeDevice,
    PyDeviceSpec,
    canonical_device,
    merge_device_fn,
)
from placeviz.devices.errors import DeviceSpecError

__all__ = [
    "VALID_DEVICE_TYPES", "DEVICE_TYPE_PRIORITY", "DeviceSpecError", "DeviceMergeError", "ClusterError",
    "PyDeviceSpec", "MergeDevice", "merge_device_fn", "canonical_device",
    "ParsedName", "parse_full_name", "parse_local_name", "parse_full_or_local", "full_name", "local_name",
    "is_specification", "is_complete_specification", "are_compatible", "merge_dev_names",
    "merge_override_dev_names", "merge_unset_dev_names", "is_same_address_space",
    "is_different_address_space", "address_space", "split_device_name", "names_for_device_mappings", "task_of",
    "job_of", "task_label", "WORKER_JOBS",
    "ClusterSpec", "TaskSpec", "Device", "DeviceSet", "sort_devices", "device_type_priority", "requested_device",
    "prioritized_device_types",
    "check_cluster_bounds",
]
