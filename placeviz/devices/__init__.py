"""Device names and clusters exactly as TensorFlow handles them, without importing TensorFlow.

A package so that each module can mirror one TensorFlow source; ``from placeviz.devices import X``
stays the way to import any public name.
"""

from placeviz.devices.device_name_utils import *  # noqa: F403
from placeviz.devices.device_name_utils import __all__  # noqa: F401
