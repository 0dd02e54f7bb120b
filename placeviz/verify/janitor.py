"""The janitor of one verify run: ``python -m placeviz.verify.janitor``.

``placeviz verify`` cleans up after itself when it ends, on an error, on SIGINT and on SIGTERM
(:func:`placeviz.verify.runner.run_plan`). SIGKILL gives it no chance, and the coordinator's
``PR_SET_PDEATHSIG`` kills the TF processes but cannot remove the temp dir: inside their mount
namespace it is a mount point under a read-only ``/tmp``. So the runner starts this process first,
in a session of its own (a Ctrl-C on the terminal and a kill of the runner's process group do not
reach it). It

1. makes the run's temp dir (``placeviz-verify-*``) and prints its path on stdout: there is no
   moment at which the dir exists and nobody will remove it;
2. waits until its stdin reaches end of file: the runner holds the only write end, which the
   kernel closes when the runner ends, however it ends (``pipe(7)``: end of file once every
   write end is closed);
3. SIGKILLs every process whose command line names the temp dir (the coordinator and the task
   servers have it in their arguments), waits until they are gone, removes the temp dir, and exits.

After a normal run the runner has already done 3 (nothing is left to kill or remove) and waits
for the janitor to exit. It imports nothing of TensorFlow or placeviz's core.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import time

from placeviz.verify import sandbox

PREFIX = "placeviz-verify-"
KILL_WAIT_S = 10.0


def sweep(work: str, wait_s: float = KILL_WAIT_S) -> list[int]:
    """SIGKILL every process naming ``work`` and wait until they are gone, scanning again until two
    scans 0.1 s apart find none (a process may start while a scan runs), for at most ``wait_s``;
    then remove ``work``. Returns the pids it killed."""
    deadline = time.monotonic() + wait_s
    killed: list[int] = []
    quiet = 0
    while quiet < 2 and time.monotonic() < deadline:
        found = sandbox.kill_naming(work)
        if not found:
            quiet += 1
            time.sleep(0.1)
            continue
        quiet = 0
        killed += found
        while any(sandbox.alive(p) for p in found) and time.monotonic() < deadline:
            time.sleep(0.05)
    shutil.rmtree(work, ignore_errors=True)
    killed += sandbox.kill_naming(work)  # one that started while the dir was removed cannot use it
    return killed


def _stop(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # stop waiting, sweep, then exit
        signal.signal(sig, _stop)
    work = tempfile.mkdtemp(prefix=PREFIX)
    try:
        sys.stdout.write(work + "\n")
        sys.stdout.flush()
        stdin = sys.stdin.buffer
        while stdin.read(4096):
            pass
    except BaseException:  # noqa: BLE001 - whatever stops the wait, the sweep must run
        pass
    finally:
        sweep(work)


if __name__ == "__main__":
    main()
