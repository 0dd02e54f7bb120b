"""Progress of long work on stderr: one line with the stage's name, a counter and the elapsed time.

Shown only where it helps, never mixed into results:

* on stderr, so stdout (reports, JSON, DOT) is byte for byte the same with or without it;
* only when stderr is a terminal: a pipe, a file or a CI log gets none;
* never with ``placeviz --quiet``;
* ``PLACEVIZ_PROGRESS`` overrides the terminal test: ``always`` (or ``1``) shows it on any stderr,
  as one line per update (a CI log that wants it, the tests), and at once rather than after
  :data:`DELAY_S`; ``never`` (or ``0``) hides it everywhere.

On a terminal the line is redrawn in place (``\\r`` and erase-to-end-of-line) at most
``1 / REDRAW_S`` times a second, by a timer thread so that the elapsed time moves while one call
(``dot``, TF building a graph) runs; it appears only once a stage has run for :data:`DELAY_S`, so
a command that ends sooner shows nothing, and it is erased when the stage ends, so that the next
line (``placeviz: wrote ...``) starts clean. A message printed while a stage is on screen goes
through :func:`message`, which erases the line first.

Callers name stages and count; they never test for a terminal themselves::

    with stage("parsing model.pb", total=n, unit="nodes") as s:
        for ...:
            s.advance()
    with stage("laying out with dot"):          # elapsed time only
        subprocess.run(...)
    with stage("building sample mlp", unit="nodes") as s:
        s.poll(lambda: graph.version)           # a count read by the timer thread
    step("global step 3/10")                     # one event of the running stage (relayed lines)
    doing("PV301 sync-token-queue-shared")       # what it does now (redrawn, never one line each)
    begin("placing"); ...; begin("partitioning")  # a command's sequence of stages, one line each

A stage :func:`begin` started lasts until the next :func:`begin` or :func:`finish` (which
``placeviz.cli.main`` calls when a command ends, on an error too).

No TensorFlow and no third-party import: every command imports this module at start-up.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from placeviz.escape import terminal_text

ENV = "PLACEVIZ_PROGRESS"
DELAY_S = 0.5  # a stage shorter than this shows nothing on a terminal
REDRAW_S = 0.1  # a terminal's line is redrawn at most this often
LINES_EVERY_S = 2.0  # without a terminal (PLACEVIZ_PROGRESS=always): a counter line at most this often
_ON = ("1", "always", "yes", "on", "true")
_OFF = ("0", "never", "no", "off", "false")
_ERASE = "\r\x1b[K"

_quiet = False
_lock = threading.RLock()
_stages: list[Stage] = []  # the running stages, innermost last: the line shows the innermost
_drawn = False  # a live line is on the terminal now
_paused = 0  # > 0 while someone else owns file descriptor 2 (see paused())


def set_quiet(quiet: bool) -> None:
    """``placeviz --quiet``: no progress (and no status messages, see :func:`is_quiet`)."""
    global _quiet
    _quiet = bool(quiet)


def is_quiet() -> bool:
    return _quiet


def mode() -> str:
    """``"off"``, ``"live"`` (a terminal: one line redrawn) or ``"lines"`` (forced on another stderr)."""
    if _quiet:
        return "off"
    setting = os.environ.get(ENV, "").strip().lower()
    if setting in _OFF:
        return "off"
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        tty = False
    if tty:
        return "live"
    return "lines" if setting in _ON else "off"


def _forced() -> bool:
    return os.environ.get(ENV, "").strip().lower() in _ON


def _write(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stderr: progress is never worth an error
        pass


def _width() -> int:
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
        return columns - 1 if columns > 20 else 79  # 0: a terminal that gives no size
    except (OSError, ValueError, AttributeError):
        return 79


def _erase() -> None:
    global _drawn
    if _drawn:
        _write(_ERASE)
        _drawn = False


def message(text: str) -> None:
    """Print one whole line on stderr (a status message, a note), erasing a progress line first;
    the running stage redraws itself on its next tick."""
    with _lock:
        if _paused:
            return  # stderr is someone else's capture now: the line would land in it
        _erase()
        _write(text if text.endswith("\n") else text + "\n")


def notice(text: str) -> None:
    """A note or warning line on stderr, ``placeviz: `` first and escaped for a terminal: shown even
    with ``--quiet`` (it says something about the input or the run that the results alone do not)."""
    message(f"placeviz: {terminal_text(text)}")


@contextmanager
def paused() -> Iterator[None]:
    """Nothing is drawn while the body runs: it has redirected file descriptor 2 (TensorFlow's
    import into a temporary file, a ``--rules`` rule's output into a pipe), where a redrawn line
    would be taken for what the body printed."""
    global _paused
    with _lock:
        _erase()
        _paused += 1
    try:
        yield
    finally:
        with _lock:
            _paused -= 1


class Stage:
    """A running stage: its name, what is done of its total, an optional detail (the last event)."""

    def __init__(self, name: str, total: int | None, unit: str, how: str):
        self.name, self.total, self.unit, self._how = name, total, unit, how
        self.done = 0
        self.detail = ""
        self.t0 = time.monotonic()
        self._delay = 0.0 if _forced() else DELAY_S
        self._last = 0.0  # when a line was last written
        self._poll: Callable[[], int] | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None

    # -- what callers call -------------------------------------------------------------------------
    def advance(self, n: int = 1) -> None:
        self.done += n
        self._tick()

    def update(self, done: int | None = None, detail: str | None = None, event: bool = False) -> None:
        """``detail``: what the stage does now; ``event``: it is worth a line of its own in a log
        (``PLACEVIZ_PROGRESS=always``), not only the next rate-limited one."""
        if done is not None:
            self.done = done
        if detail is not None:
            self.detail = detail
        self._tick(event=event)

    def poll(self, count: Callable[[], int]) -> None:
        """Let the timer thread read the count with ``count()`` (e.g. the ops of a graph being built)."""
        self._poll = count
        if self._how != "off":
            self._start_timer()

    # -- drawing -------------------------------------------------------------------------------------
    def text(self) -> str:
        parts = [f"placeviz: {self.name}"]
        if self.total:
            parts.append(f" {self.done:,}/{self.total:,}{' ' + self.unit if self.unit else ''}"
                         f" ({100 * self.done // self.total}%)")
        elif self.done or self.unit:
            parts.append(f" {self.done:,}{' ' + self.unit if self.unit else ''}")
        elapsed = time.monotonic() - self.t0
        parts.append(f" {elapsed:.1f} s" if elapsed < 10 else f" {elapsed:.0f} s")
        if self.detail:
            parts.append(f": {self.detail}")
        return terminal_text("".join(parts))

    def _tick(self, event: bool = False) -> None:
        if self._how == "off":
            return
        now = time.monotonic()
        if self._how == "lines":
            if event or now - self._last >= LINES_EVERY_S:
                self._line(now)
            return
        if now - self.t0 >= self._delay and now - self._last >= REDRAW_S:
            self._draw(now)

    def _line(self, now: float) -> None:
        self._last = now
        message(self.text())

    def _draw(self, now: float) -> None:
        global _drawn
        with _lock:
            if _paused or not _stages or _stages[-1] is not self:
                return  # stderr is redirected, or an inner stage owns the line
            self._last = now
            _write(_ERASE + self.text()[:_width()])
            _drawn = True

    def _start_timer(self) -> None:
        if self._timer is not None:
            return
        self._timer = threading.Thread(target=self._run_timer, name="placeviz-progress", daemon=True)
        self._timer.start()

    def _run_timer(self) -> None:
        interval = REDRAW_S if self._how == "live" else LINES_EVERY_S
        while not self._stop.wait(interval):
            if self._poll is not None:
                try:
                    self.done = int(self._poll())
                except Exception:  # noqa: BLE001 - a count that cannot be read is just not shown
                    self._poll = None
            self._tick()

    def _end(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=1.0)
        if self._poll is not None:  # the final count, not the last one the timer read
            try:
                self.done = int(self._poll())
            except Exception:  # noqa: BLE001 - as in _run_timer
                pass
        if self._how == "lines":
            self.detail = "done"
            self._line(time.monotonic())


@contextmanager
def stage(name: str, total: int | None = None, unit: str = "") -> Iterator[Stage]:
    """Run the body as a named stage (see the module docstring); a no-op object when progress is off."""
    how = mode()
    s = Stage(name, total, unit, how)
    if how == "off":
        yield s
        return
    with _lock:
        _stages.append(s)
    if how == "lines":
        s._line(time.monotonic())
    else:
        s._start_timer()
    try:
        yield s
    finally:
        with _lock:
            _stages.remove(s)
            _erase()
        s._end()


def count(read: Callable[[], int]) -> None:
    """Let the innermost running stage count with ``read()``, called by its timer thread (code that
    knows what to count, such as a graph being built, but not which stage runs it)."""
    with _lock:
        current = _stages[-1] if _stages else None
    if current is not None:
        current.poll(read)


def step(event: str) -> None:
    """One event of the running stage (a line a child process relayed, a global step run): the
    stage's detail on a terminal, each one a line of its own otherwise; nothing when progress is off."""
    with _lock:
        current = _stages[-1] if _stages else None
    if current is not None:
        current.update(detail=event, event=True)
    elif mode() == "lines":
        message(terminal_text(f"placeviz: {event}"))


def doing(what: str) -> None:
    """What the running stage does now (the rule being run): shown with the stage's next redraw,
    rate-limited like a counter; nothing without a running stage."""
    with _lock:
        current = _stages[-1] if _stages else None
    if current is not None:
        current.update(detail=what)


_begun: list = []  # the context managers of begin()'s stages


def begin(name: str, total: int | None = None, unit: str = "") -> Stage:
    """End the stage the previous :func:`begin` started, if any, and start ``name``."""
    finish()
    cm = stage(name, total, unit)
    s = cm.__enter__()
    _begun.append(cm)
    return s


def finish() -> None:
    """End the stage :func:`begin` started (the end of a command)."""
    while _begun:
        _begun.pop().__exit__(None, None, None)


def _in_forked_child() -> None:
    """A forked child (a contained ``--rules`` rule) draws nothing: its stderr is captured, and a
    lock the parent's timer thread held at the fork would never be released in it."""
    global _lock, _drawn, _quiet
    _lock = threading.RLock()
    _stages.clear()
    _begun.clear()
    _drawn, _quiet = False, True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_forked_child)
