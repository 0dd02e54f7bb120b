"""Signals that end a run: exit codes a shell expects, cleanup that still happens.

Python's defaults were wrong for placeviz in two ways. SIGTERM (what ``kill``, ``timeout``, CI
runners and container stops send) ended the process at once, without unwinding: ``finally``
blocks never ran, so ``render`` left its ``dot`` child running and a temporary file could stay
behind. And Ctrl-C reached click first, which turned it into ``Abort`` and exit code 1, the code
placeviz uses for "findings" (lint) or "a failed check" (verify).

:func:`handle_termination` makes SIGTERM (and SIGHUP, a closed terminal) raise
:class:`Terminated` in the main thread, so the stack unwinds like it does for Ctrl-C's
``KeyboardInterrupt``: ``subprocess.run`` kills its child, ``atomic_write`` removes its temporary
file, context managers close. ``placeviz.cli.main`` then prints one line and exits with the
shell's convention, 128 + the signal number (`Bash Reference Manual, "Exit Status"
<https://www.gnu.org/software/bash/manual/html_node/Exit-Status.html>`_): 130 for SIGINT, 143
for SIGTERM, 129 for SIGHUP. A second signal while unwinding is ignored, so cleanup finishes
(SIGKILL still ends everything). A signal that was ignored when placeviz started (``nohup``, a
background job's SIGINT) stays ignored.

:func:`set_parent_death_signal` covers what no handler can: placeviz killed with SIGKILL. A child
process that calls it (``dot``, a user rule's process) is killed by the kernel when placeviz dies.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

HANDLED = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Terminated(BaseException):  # noqa: N818 - like KeyboardInterrupt, not an Exception subclass
    """SIGTERM or SIGHUP arrived; BaseException, so ``except Exception`` handlers let it through."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"


def _raise_terminated(signum, _frame) -> None:
    for sig in HANDLED:  # unwinding has started: let it finish
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


@contextlib.contextmanager
def handle_termination() -> Iterator[None]:
    """For the block: SIGTERM/SIGHUP raise :class:`Terminated` (main thread only; elsewhere, and
    for signals ignored on entry, nothing changes). The previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {}
    for sig in HANDLED:
        try:
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN:
                continue
            signal.signal(sig, _raise_terminated)
            saved[sig] = previous
        except (OSError, ValueError):  # pragma: no cover - a platform without it
            continue
    try:
        yield
    finally:
        for sig, previous in saved.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """``prctl(PR_SET_PDEATHSIG, sig)`` (Linux, ``prctl(2)``): the calling process gets ``sig``
    when its parent thread dies, also when the parent is SIGKILLed and cannot clean up. Meant for
    a child between fork and exec (``preexec_fn``) or a forked worker; a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1 (linux/prctl.h)
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        pass
