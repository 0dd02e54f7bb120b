"""numpy's BLAS on one thread in the ``placeviz`` program, and as the user had it in its children.

numpy's wheels link OpenBLAS, built with its own thread server: when numpy is imported, the library
starts one worker thread per core, and an idle worker spins a while before it sleeps (OpenBLAS's
``driver/others/blas_server.c``; ``OPENBLAS_THREAD_TIMEOUT`` in its documentation). placeviz never
calls a BLAS routine (its numpy is integer sorts, group-bys and masks, no matrix product), so the
spinning is pure cost: on a 2-core machine 0.05-0.13 s CPU per process, a fifth of a cold ``lint``
of a 100-node graph and 0.13 s of a 200k-node ``partition`` (``benchmarks/README.md``, "numpy's
BLAS threads").

OpenBLAS reads its thread count from the environment once, when the library is loaded:
``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS``, ``OMP_NUM_THREADS`` or
``OPENBLAS_DEFAULT_NUM_THREADS``. So the program (:func:`placeviz.cli.run`, never the tests, which
call ``main`` in-process) sets ``OPENBLAS_NUM_THREADS=1`` before anything imports numpy, unless the
user set one of those; and the processes placeviz starts (``verify``'s TensorFlow tasks, through
:func:`placeviz.verify.sandbox.child_env`) get the environment without it, so a user's program runs
with the BLAS threads it would have had without placeviz. Stdlib only: it runs before any import
that matters.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "OPENBLAS_NUM_THREADS"
USER_SETTINGS = (VARIABLE, "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_DEFAULT_NUM_THREADS")
"""The variables OpenBLAS takes its thread count from: one set by the user is left alone."""

_set_here = False
"""Whether :func:`one_thread` set ``OPENBLAS_NUM_THREADS`` (then children do not inherit it)."""


def one_thread() -> None:
    """Have OpenBLAS start no worker threads in this process, when numpy is not loaded yet and the
    user chose no thread count."""
    global _set_here
    if "numpy" in sys.modules or any(name in os.environ for name in USER_SETTINGS):
        return
    os.environ[VARIABLE] = "1"
    _set_here = True


def user_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` (a copy of ``os.environ`` for a child process) without what :func:`one_thread` added."""
    if _set_here:
        env.pop(VARIABLE, None)
    return env
