"""placeviz's optional C kernels, loaded in one place.

``setup.py`` compiles them when placeviz is installed and a C compiler is at hand. Each kernel
module mirrors Python loops that stay in the code as the reference (README, "How it is built"):
when a module is missing, :func:`kernels` returns None and its callers run those loops, with the
same results. Tests set a caller's ``_kernels`` (or ``placeviz.graph._wire``) to None to do the
same.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def kernels(name: str) -> ModuleType | None:
    """The compiled module ``placeviz.<name>``, or None when it was not built."""
    try:
        return importlib.import_module(f"placeviz.{name}")
    except ImportError:  # pragma: no cover - only without a C compiler at install time
        return None
