"""Running a user's rule (``lint --rules DIR``) so that nothing it does escapes into the run.

A rule directory is code from the repository being linted, and lint runs in CI on pull requests.
Before this module, a rule calling ``sys.exit(0)`` made lint exit 0 with no report, ``sys.exit(3)``
at import exited 3 silently, an endless loop hung lint, and a ``print`` corrupted ``--format
json`` output. Now:

* **check(ctx) runs in a forked child process** (POSIX): whatever it does (``sys.exit``,
  ``os._exit``, ``raise KeyboardInterrupt``, an endless loop in Python *or* in C, a crash, printing
  to stdout/stderr at the Python or file-descriptor level, mutating the shared context) stays in
  the child. The parent reads the pickled findings from a pipe, with a deadline
  (``--rule-timeout``); a child still running at the deadline is killed (SIGKILL) and the rule is
  reported as timed out, and lint goes on with the next rule. The child gets
  ``PR_SET_PDEATHSIG(SIGKILL)`` (Linux, ``prctl(2)``), so it dies with placeviz even when placeviz
  itself is killed with SIGKILL, and its stdin is ``/dev/null``. Forking copies nothing up front
  (copy-on-write), so the context the pipeline built is not rebuilt: a fork costs about a
  millisecond per rule and model, which is why the built-in rules (placeviz's own code) run in
  the process as before.
* **Import runs in the placeviz process** (the rule's metadata must be read there), guarded by
  :func:`run_here`: ``SystemExit``, ``KeyboardInterrupt`` raised by the module (not one from a
  real Ctrl-C, which is told apart by a SIGINT handler set for the duration) and every exception
  become a one-line :class:`~placeviz.lint.discovery.RuleError`; its output is captured; and a
  ``SIGALRM`` timer (``setitimer``) raises :class:`RuleTimeout` into a module that runs too long.
  Limits of that guard: a timer only interrupts Python bytecode, so a module stuck in one long C
  call (a huge regular expression, ``time.sleep`` is fine) is interrupted when the call returns; a
  module that catches ``BaseException`` in a loop is interrupted again every half second; the
  timer works in the main thread only (placeviz's CLI); and ``os._exit`` at import still ends the
  run (nothing in-process can stop it). Without ``os.fork`` (Windows), check() runs in-process
  under the same guard.

What a rule printed never reaches the report: it is returned in :attr:`Outcome.output`, and lint
says on stderr how much the rule printed and its first line.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import pickle
import select
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from placeviz import progress
from placeviz.interrupts import Terminated, set_parent_death_signal

DEFAULT_TIMEOUT = 10.0
"""Seconds a user rule's check (and a rule module's import) may take (``--rule-timeout``)."""
OUTPUT_KEPT = 64 << 10
"""Bytes of a rule's printed output kept for the note (the rest is dropped)."""
_REARM = 0.5
"""Seconds between repeated timeouts when a rule swallowed the first one (in-process guard)."""


class RuleTimeout(BaseException):  # noqa: N818 - raised into a rule; BaseException so `except Exception` misses it
    """Raised into a rule that ran past its time limit (in-process guard only)."""


@dataclass
class Outcome:
    """What running a rule's code gave: ``value`` (None after a failure), or ``error``, a short
    phrase ("KeyError: 'boom'", "timed out after 10 s", "SystemExit: it called sys.exit(0)"...), and
    what it printed on stdout and stderr (``output``, at most :data:`OUTPUT_KEPT` bytes,
    ``output_bytes`` in all)."""

    value: object = None
    error: str | None = None
    timed_out: bool = False
    output: str = ""
    output_bytes: int = 0


def describe(e: BaseException) -> str:
    """``e`` as :attr:`Outcome.error` holds it: ``KeyError: 'boom'`` (one line, 300 characters at
    most), ``SystemExit: it called sys.exit(3)``, ``KeyboardInterrupt: raised by the rule``."""
    if isinstance(e, SystemExit):
        return f"SystemExit: it called sys.exit({'' if e.code is None else repr(e.code)})"
    if isinstance(e, KeyboardInterrupt):
        return "KeyboardInterrupt: raised by the rule itself (not a Ctrl-C)"
    text = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return f"{type(e).__name__}{': ' + text if text else ''}"


def fork_available() -> bool:
    return hasattr(os, "fork") and sys.platform != "win32"


def run_contained(func: Callable[[], object], timeout: float | None) -> Outcome:
    """``func()`` in a forked child if the platform can fork, else in-process (:func:`run_here`).

    ``func`` must return something picklable (the child sends it back through a pipe); ``timeout``
    seconds (None or 0: no limit) before the child is killed.
    """
    if fork_available():
        return run_forked(func, timeout)
    return run_here(func, timeout)


# --------------------------------------------------------------------------------- forked
class _Sink:
    """Printed output: the first :data:`OUTPUT_KEPT` bytes kept, the rest only counted, so a rule
    printing without end costs neither memory nor disk."""

    def __init__(self):
        self.kept = bytearray()
        self.size = 0

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        room = OUTPUT_KEPT - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]

    def text(self) -> str:
        return self.kept.decode("utf-8", "replace")


def run_forked(func: Callable[[], object], timeout: float | None) -> Outcome:
    """See the module docstring. A real Ctrl-C (or SIGTERM) of placeviz while the child runs
    kills the child and propagates."""
    rfd, wfd = os.pipe()  # the pickled result
    out_r, out_w = os.pipe()  # what the rule prints (its stdout and stderr)
    parent = os.getpid()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads (we exec no C++)
            pid = os.fork()
    except BaseException:
        for fd in (rfd, wfd, out_r, out_w):
            os.close(fd)
        raise
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(rfd)
            os.close(out_r)
            _child(func, wfd, out_w, parent)
        except BaseException:  # noqa: BLE001 - nothing may leave the child
            code = 70
        finally:
            os._exit(code)
    os.close(wfd)
    os.close(out_w)
    timed_out = False
    chunks: list[bytes] = []
    sink = _Sink()
    status = None
    try:
        deadline = time.monotonic() + timeout if timeout else None
        open_fds = {rfd, out_r}
        while open_fds:  # until the child closed both pipes (it ended), or the deadline
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(list(open_fds), [], [], remaining)
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    open_fds.discard(fd)
                elif fd == rfd:
                    chunks.append(chunk)
                else:
                    sink.add(chunk)
        if not timed_out:
            status = _reap(pid, deadline)
            timed_out = status is None
    finally:
        os.close(rfd)
        os.close(out_r)
        if status is None:  # timed out, or interrupted: the child must not outlive this call
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    outcome = Outcome(output=sink.text(), output_bytes=sink.size)
    if timed_out:
        outcome.error, outcome.timed_out = f"timed out after {timeout:g} s", True
        return outcome
    try:
        kind, value = pickle.loads(b"".join(chunks)) if chunks else (None, None)
    except Exception:  # noqa: BLE001 - a truncated or foreign payload
        kind, value = None, None
    if kind == "ok":
        outcome.value = value
    elif kind == "error":
        outcome.error = value
    else:
        outcome.error = _status_phrase(status)
    return outcome


def _reap(pid: int, deadline: float | None) -> int | None:
    """Wait for the child (its pipe is closed, so it is ending); None if still alive at ``deadline``."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG if deadline is not None else 0)
        if done:
            return status
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def _status_phrase(status: int | None) -> str:
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"crashed: its process was killed by {name}"
    code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else "?"
    return f"ended its process with exit code {code} (os._exit?) before returning"


def _child(func: Callable[[], object], wfd: int, out_fd: int, parent: int) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM, signal.SIGPIPE):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(OSError, ValueError):
        signal.setitimer(signal.ITIMER_REAL, 0)  # an in-process guard's timer is the parent's
    faulthandler.disable()  # a crash is reported by the parent, not dumped on the parent's stderr
    set_parent_death_signal()
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    stream = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115
    sys.stdout = sys.stderr = stream
    # typeshed marks the originals Final; the contained child replaces them on purpose (see above).
    sys.__stdout__ = sys.__stderr__ = stream  # type: ignore[misc]
    try:
        value = func()
        payload = ("ok", value)
    except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are the rule's too
        payload = ("error", describe(e))
    try:
        data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - what the rule returned cannot cross the pipe
        data = pickle.dumps(("error", f"returned objects that cannot be sent back to placeviz "
                                      f"({type(e).__name__}: {str(e)[:200]})"))
    with contextlib.suppress(Exception):
        stream.flush()
    view = memoryview(data)
    while view:
        view = view[os.write(wfd, view):]
    os.close(wfd)


# ------------------------------------------------------------------------------- in-process
def run_here(func: Callable[[], object], timeout: float | None) -> Outcome:
    """``func()`` in this process, guarded as the module docstring says (import of a rule module,
    or check() where there is no fork). Only a KeyboardInterrupt from a real SIGINT propagates."""
    outcome = Outcome()
    main = threading.current_thread() is threading.main_thread()
    state = {"active": True, "sigint": False}

    def on_alarm(_sig, _frame):
        if state["active"]:
            raise RuleTimeout()

    def on_sigint(_sig, _frame):
        state["sigint"] = True
        raise KeyboardInterrupt

    old_alarm = old_int = None
    set_int = main and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN  # a background job's stays ignored
    if main:
        if set_int:
            old_int = signal.signal(signal.SIGINT, on_sigint)
        if timeout and hasattr(signal, "setitimer"):
            old_alarm = signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, timeout, _REARM)
    try:
        with progress.paused(), _captured() as captured:  # no progress line drawn into the capture
            try:
                outcome.value = func()
            except RuleTimeout:
                outcome.error, outcome.timed_out = f"timed out after {timeout:g} s", True
            except KeyboardInterrupt as e:
                if state["sigint"]:
                    raise
                outcome.error = describe(e)
            except Terminated:
                raise  # SIGTERM/SIGHUP of placeviz (placeviz.interrupts): the run ends
            except BaseException as e:  # noqa: BLE001 - SystemExit and anything else: the rule's error
                outcome.error = describe(e)
            finally:
                state["active"] = False
    finally:
        state["active"] = False
        if main:
            if old_alarm is not None:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old_alarm)
            if set_int:
                signal.signal(signal.SIGINT, old_int if old_int is not None else signal.default_int_handler)
    outcome.output, outcome.output_bytes = captured.text(), captured.size
    return outcome


@contextlib.contextmanager
def _captured():
    """Redirect ``sys.stdout``/``sys.stderr`` and file descriptors 1 and 2 into a pipe for the
    block (Python ``print`` and C-level writes alike), drained by a thread into a :class:`_Sink`."""
    sink = _Sink()
    read_end, write_end = os.pipe()

    def drain():
        while True:
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            sink.add(chunk)

    reader = threading.Thread(target=drain, name="placeviz-rule-output", daemon=True)
    reader.start()
    stream = io.TextIOWrapper(os.fdopen(write_end, "wb"), encoding="utf-8", errors="replace", line_buffering=True)
    saved_streams = sys.stdout, sys.stderr
    saved_fds = []
    for stream_obj in saved_streams:
        with contextlib.suppress(Exception):
            stream_obj.flush()
    try:
        for fd in (1, 2):
            try:
                saved = os.dup(fd)
            except OSError:
                continue
            saved_fds.append((fd, saved))
            os.dup2(write_end, fd)
        sys.stdout = sys.stderr = stream
        yield sink
    finally:
        with contextlib.suppress(Exception):
            stream.flush()
        sys.stdout, sys.stderr = saved_streams
        for fd, saved in saved_fds:
            os.dup2(saved, fd)
            os.close(saved)
        with contextlib.suppress(Exception):
            stream.close()  # the last write end: the reader sees EOF
        reader.join(timeout=5)  # a process the module started may hold the pipe open: then leave it
        if not reader.is_alive():
            os.close(read_end)
