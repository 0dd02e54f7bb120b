"""placeviz's optional C kernels, loaded in one place.

``setup.py`` compiles them when placeviz is installed and a C compiler is at hand. Each kernel
module mirrors Python loops that stay in the code as the reference (README, "How it is built"):
when a module is missing, :func:`kernels` returns None and its callers run those loops, with the
same results. Tests set a caller's ``_kernels`` (or ``placeviz.graph._wire``) to None to do the
same; a whole process runs the Python loops when the environment variable
``PLACEVIZ_NO_KERNELS`` is set to anything but ``""`` or ``0`` (to compare results or time the
fallback, e.g. ``benchmarks/run.py --no-kernels``).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

NO_KERNELS_ENV = "PLACEVIZ_NO_KERNELS"
# Every kernel module, as ``kernels`` names it (setup.py's KERNELS lists their sources).
MODULES = ("_wire", "placement._setter_kernels", "placement._placer_kernels", "_partition_kernels")


def kernels_disabled() -> bool:
    """Whether ``PLACEVIZ_NO_KERNELS`` asks for the Python loops only."""
    return os.environ.get(NO_KERNELS_ENV, "") not in ("", "0")


def kernels(name: str) -> ModuleType | None:
    """The compiled module ``placeviz.<name>``, or None when it was not built (or is switched off)."""
    if kernels_disabled():
        return None
    try:
        return importlib.import_module(f"placeviz.{name}")
    except ImportError:  # pragma: no cover - only without a C compiler at install time
        return None
