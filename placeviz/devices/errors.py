"""What the device modules share: the error for a device string TF rejects, and the cache bound.

Both grammars (:mod:`~placeviz.devices.device_spec` for Python, :mod:`~placeviz.devices.device_name_utils`
for C++) reject malformed strings with :class:`DeviceSpecError`, and
:mod:`~placeviz.devices.device_set` raises it for names that are not complete. Both grammars cache
their results under the same bound. Defined here, below the modules that use them, so imports go
one way.
"""

from __future__ import annotations

from placeviz.errors import PlacevizError

CACHE_LIMIT = 1 << 16
"""Entries per cache of parsed or merged device strings; a full cache is emptied.

Every result is cached where the setter or placer calls it once per node (graphs of 1M nodes):
parsing a device string is a dict hit after the first time. Device strings are few in practice, so
a cache rarely fills.
"""


class DeviceSpecError(PlacevizError, ValueError):
    """A device string TF would reject (Python ``ValueError`` or C++ "Malformed device ...")."""
