"""The parent side of a verify run: hand a :class:`RunPlan` to a coordinator process and collect.

The coordinator (:mod:`placeviz.verify.coordinator`) runs in a fresh process group, so whatever it
started (servers, task processes) goes when the group is killed. Its progress lines (``@@ ...`` on
stderr) are relayed as placeviz progress; everything else it prints is kept as a tail for errors.
The parent enforces the timeout itself too: the coordinator gets ``timeout_s`` for its own
watchdog, the parent kills the group ``GRACE_S`` later; a coordinator that is stopped (SIGSTOP,
state ``T`` in ``/proc/PID/stat``) for ``STOPPED_S`` is killed at once, and one that dies is seen
at once. Afterwards it checks that every process the run reported is gone (``released``).

Nothing is left behind however verify ends:

* normally, on an error, on SIGINT and on SIGTERM (:func:`signal_exits` turns both into exceptions
  that unwind through :func:`run_plan`), the group is killed and the temp dir removed here;
* on SIGKILL, the coordinator dies with its parent (``PR_SET_PDEATHSIG``, armed by the coordinator
  itself), its task servers with it (the same), and the janitor (:mod:`placeviz.verify.janitor`,
  which made the temp dir and holds its end of a pipe from this process) kills whatever still
  names the temp dir and removes it.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from placeviz.verify import sandbox
from placeviz.verify.coordinator import CHILD_FLAG, SCRATCH

GRACE_S = 20.0
STOPPED_S = 2.0  # a coordinator stopped this long is killed (it would never make progress again)
POLL_S = 0.2
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}  # 128 + the signal, as shells do


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (raised in the main thread by :func:`signal_exits`' handler)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def signal_exits() -> Iterator[None]:
    """verify's handling of SIGINT, SIGTERM and SIGHUP: exit 130, 143 or 129 after cleaning up.

    The first of these signals raises (``KeyboardInterrupt``, :class:`Terminated`) in the main
    thread, so :func:`run_plan`'s ``finally`` clauses kill the coordinator's group and remove the
    temp dir; later ones are ignored until then (a second Ctrl-C cannot cut the cleanup short).
    Python's default for SIGTERM and SIGHUP is to die at once, which left the coordinator, the TF
    servers and the temp dir behind. The exit code is 128 + the signal number, as a shell reports a
    process killed by it (``bash(1)``, EXIT STATUS). Outside the main thread it does nothing; a
    signal that was ignored when verify started stays ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum, _frame) -> None:
        if fired:
            return
        fired.append(signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    # A signal the caller ignores (``nohup``, a background job of a non-interactive shell) stays ignored.
    old = {sig: signal.signal(sig, handler) for sig in EXIT_CODES if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    except KeyboardInterrupt:
        _say_exit("interrupted")
        raise SystemExit(EXIT_CODES[signal.SIGINT]) from None
    except Terminated as e:
        _say_exit(f"terminated by {signal.Signals(e.signum).name}")
        raise SystemExit(EXIT_CODES[signal.Signals(e.signum)]) from None
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def _say_exit(what: str) -> None:
    with contextlib.suppress(Exception):
        print(f"placeviz: {what}; verify stopped every process it started and removed its temp dir",
              file=sys.stderr, flush=True)


class Janitor:
    """The run's temp dir, made by a :mod:`placeviz.verify.janitor` process that removes it (and
    kills what names it) once this process closes its stdin or dies."""

    def __init__(self) -> None:
        env = sandbox.child_env()
        self.proc = subprocess.Popen([sys.executable, "-m", "placeviz.verify.janitor"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        out = self.proc.stdout
        assert out is not None  # stdout=PIPE
        line = out.readline().decode("utf-8", "surrogateescape").rstrip("\n")
        out.close()
        if not line or not os.path.isdir(line):
            self.finish()
            from placeviz.errors import PlacevizError

            raise PlacevizError(f"verify could not make its temp dir (janitor exited with {self.proc.returncode})")
        self.work = Path(line)

    def finish(self, wait_s: float = 15.0) -> None:
        """Remove the temp dir here, let the janitor sweep and exit, and reap it."""
        if getattr(self, "work", None) is not None:
            shutil.rmtree(self.work, ignore_errors=True)
        stdin = self.proc.stdin
        assert stdin is not None  # stdin=PIPE
        with contextlib.suppress(OSError):
            stdin.close()
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class RawRun:
    """What the coordinator reported, plus the parent's own view of the process."""

    result: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    returncode: int | None = None
    killed: bool = False
    kill_reason: str | None = None  # "timeout" | "stopped" when the parent killed the coordinator
    stderr_tail: str = ""
    seconds: float = 0.0
    released: dict = field(default_factory=dict)


def _wait(proc: subprocess.Popen, timeout: float) -> str | None:
    """Wait for the coordinator: None when it exited, else why it must be killed ("timeout", or
    "stopped" when ``/proc`` shows it stopped for :data:`STOPPED_S`)."""
    deadline = time.monotonic() + timeout + GRACE_S
    stopped_since = None
    while True:
        try:
            proc.wait(timeout=POLL_S)
            return None
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now > deadline:
            return "timeout"
        if sandbox.state(proc.pid) in ("T", "t"):
            stopped_since = stopped_since or now
            if now - stopped_since >= STOPPED_S:
                return "stopped"
        else:
            stopped_since = None


def _read_result(work: Path) -> dict:
    """``result.json`` as the coordinator wrote it at its end, or {} when it did not get there (the
    file is opened before the sandbox and written last: empty or cut short if the process died)."""
    try:
        return json.loads((work / "result.json").read_text())
    except (OSError, ValueError):
        return {}


def run_plan(plan_json: dict, graphs: list[bytes], feeds: list[dict[str, np.ndarray]],
             progress: Callable[[str], None] | None = None) -> RawRun:
    say = progress or (lambda _m: None)
    t0 = time.monotonic()
    timeout = float(plan_json["timeout_s"])
    janitor = Janitor()
    proc = None
    try:
        work = janitor.work
        (work / "plan.json").write_text(json.dumps(plan_json))
        for i, data in enumerate(graphs):
            (work / f"graph_w{i}.pb").write_bytes(data)
        for i, f in enumerate(feeds):
            named: dict[str, Any] = f
            np.savez(work / f"feeds_w{i}.npz", **named)
        scratch = work / SCRATCH
        scratch.mkdir()
        cmd = [sys.executable, "-m", "placeviz.verify.coordinator", CHILD_FLAG, str(work), str(os.getpid())]
        env = sandbox.child_env()
        env["TMPDIR"] = str(scratch)  # the only place a child may write once it is in its mount namespace
        # TF imports matplotlib when it is installed, which writes a font cache: keep it apart from
        # the files the graph's ops write (coordinator.written_by_the_graph)
        env["MPLCONFIGDIR"] = str(scratch / ".placeviz-mplconfig")
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=env, cwd=scratch, start_new_session=True)
        tail: list[str] = []
        err_pipe = proc.stderr
        assert err_pipe is not None  # stderr=PIPE

        def relay() -> None:
            for raw in err_pipe:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if line.startswith("@@ "):
                    say(line[3:])
                else:
                    tail.append(line)
                    del tail[:-60]

        reader = threading.Thread(target=relay, daemon=True)
        reader.start()
        try:
            reason = _wait(proc, timeout)
        finally:
            # The coordinator ends with os._exit; anything left in its group goes now (on an
            # exception too: SIGINT and SIGTERM arrive here as KeyboardInterrupt and Terminated).
            sandbox.kill_group(proc)
        if reason == "stopped":
            say("the coordinator process was stopped (SIGSTOP?): killed it")
        reader.join(timeout=5)
        result = _read_result(work)
        arrays: dict[str, np.ndarray] = {}
        if result and "refused" not in result:
            with np.load(work / "arrays.npz") as npz:
                arrays = {k.replace("|", "/"): npz[k] for k in npz.files}
    finally:
        if proc is not None and proc.returncode is None:
            sandbox.kill_group(proc)
        janitor.finish()
    raw = RawRun(result=result, arrays=arrays, returncode=proc.returncode, killed=reason is not None,
                 kill_reason=reason, stderr_tail="\n".join(tail[-30:]), seconds=round(time.monotonic() - t0, 3))
    pids = dict(result.get("pids", {}))
    pids.setdefault("coordinator", proc.pid)
    pids.setdefault("janitor", janitor.proc.pid)
    deadline = time.monotonic() + 5
    left = {k: p for k, p in pids.items() if sandbox.alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {k: p for k, p in left.items() if sandbox.alive(p)}
    raw.released = {"processes": pids, "still_running": left, "ok": not left,
                    "temp_dir_removed": not work.exists()}
    return raw
