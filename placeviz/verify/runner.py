"""The parent side of a verify run: hand a :class:`RunPlan` to a coordinator process and collect.

The coordinator (:mod:`placeviz.verify.coordinator`) runs in a fresh process group, so whatever it
started (servers, task processes) goes when the group is killed. Its progress lines (``@@ ...`` on
stderr) are relayed as placeviz progress; everything else it prints is kept as a tail for errors.
The parent enforces the timeout itself too: the coordinator gets ``timeout_s`` for its own
watchdog, the parent kills the group ``GRACE_S`` later. Afterwards it checks that every process
the run reported is gone (``released``).

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from placeviz.verify import sandbox
from placeviz.verify.coordinator import CHILD_FLAG

GRACE_S = 20.0


@dataclass
class RawRun:
    """What the coordinator reported, plus the parent's own view of the process."""

    result: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    returncode: int | None = None
    killed: bool = False
    stderr_tail: str = ""
    seconds: float = 0.0
    released: dict = field(default_factory=dict)


def run_plan(plan_json: dict, graphs: list[bytes], feeds: list[dict[str, np.ndarray]],
             progress: Callable[[str], None] | None = None) -> RawRun:
    say = progress or (lambda _m: None)
    t0 = time.monotonic()
    timeout = float(plan_json["timeout_s"])
    with tempfile.TemporaryDirectory(prefix="placeviz-verify-") as tmp:
        work = Path(tmp)
        (work / "plan.json").write_text(json.dumps(plan_json))
        for i, data in enumerate(graphs):
            (work / f"graph_w{i}.pb").write_bytes(data)
        for i, f in enumerate(feeds):
            np.savez(work / f"feeds_w{i}.npz", **f)
        cmd = [sys.executable, "-m", "placeviz.verify.coordinator", CHILD_FLAG, str(work)]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=sandbox.child_env(), cwd=tmp, start_new_session=True)
        tail: list[str] = []

        def relay() -> None:
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if line.startswith("@@ "):
                    say(line[3:])
                else:
                    tail.append(line)
                    del tail[:-60]

        reader = threading.Thread(target=relay, daemon=True)
        reader.start()
        killed = False
        try:
            proc.wait(timeout=timeout + GRACE_S)
        except subprocess.TimeoutExpired:
            killed = True
            sandbox.kill_group(proc)
        except BaseException:
            sandbox.kill_group(proc)
            raise
        # The coordinator ends with os._exit; anything left in its group goes now.
        sandbox.kill_group(proc)
        reader.join(timeout=5)
        result_file = work / "result.json"
        result = json.loads(result_file.read_text()) if result_file.exists() else {}
        arrays: dict[str, np.ndarray] = {}
        if (work / "arrays.npz").exists():
            with np.load(work / "arrays.npz") as data:
                arrays = {k.replace("|", "/"): data[k] for k in data.files}
    raw = RawRun(result=result, arrays=arrays, returncode=proc.returncode, killed=killed,
                 stderr_tail="\n".join(tail[-30:]), seconds=round(time.monotonic() - t0, 3))
    pids = dict(result.get("pids", {}))
    pids.setdefault("coordinator", proc.pid)
    deadline = time.monotonic() + 5
    left = {k: p for k, p in pids.items() if sandbox.alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {k: p for k, p in left.items() if sandbox.alive(p)}
    raw.released = {"processes": pids, "still_running": left, "ok": not left}
    return raw
