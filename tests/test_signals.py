"""Signals end a run with the shell's exit code, one line, and nothing left running.

The issue: Ctrl-C exited 1 (the "findings" code) instead of 130; SIGTERM of ``render`` left ``dot``
running. Each case runs ``python -m placeviz`` as a real subprocess, waits until the command is
provably busy (a builder that said so, a ``dot`` child that exists, a user rule's process that
wrote its pid), sends the signal, and then checks the exit code, stderr and the process table.
"""

from __future__ import annotations

import os
import random
import signal
import string
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import default_signals

from placeviz.native import NO_KERNELS_ENV
from placeviz.protos import GraphDef

REPO = Path(__file__).parent.parent
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def start(args: list[str], cwd: Path, no_kernels: bool = False) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != NO_KERNELS_ENV}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if no_kernels:
        env[NO_KERNELS_ENV] = "1"
    return subprocess.Popen([sys.executable, "-m", "placeviz", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)


def wait_for(condition, timeout: float = 60.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    """Running (a zombie, reaped by nobody in a container without init, counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int, name: str | None = None) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and (name is None or comm == name) and alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("placeviz did not end after the signal") from None
    return proc.returncode, err


EXPECTED = {signal.SIGINT: (130, "placeviz: interrupted"), signal.SIGTERM: (143, "placeviz: terminated by SIGTERM")}


# ------------------------------------------------------------------------- every command
@pytest.mark.parametrize("no_kernels", [False, True], ids=["c", "python"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_busy_command_exits_130_or_143_with_one_line(tmp_path, sig, no_kernels):
    ready = tmp_path / "ready"
    builder = tmp_path / "slow_builder.py"
    builder.write_text(textwrap.dedent(f"""
        import time
        from pathlib import Path
        def build():
            Path({str(ready)!r}).write_text("busy")
            time.sleep(120)
    """))
    proc = start(["analyze", f"{builder}:build"], tmp_path, no_kernels)
    wait_for(ready.exists, what="the builder to start")
    proc.send_signal(sig)
    code, err = finish(proc)
    expected_code, expected_line = EXPECTED[sig]
    assert code == expected_code, err
    assert [line for line in err.splitlines() if line.strip()] == [expected_line]


# ----------------------------------------------------------------------------------- render
def slow_graph(path: Path, n: int = 3000) -> Path:
    """n ops with random unscoped names and random inputs: dot needs tens of seconds for it."""
    rng = random.Random(1)
    names: list[str] = []
    while len(names) < n:
        name = "".join(rng.choice(string.ascii_lowercase) for _ in range(8))
        if name not in names:
            names.append(name)
    g = GraphDef()
    for i, name in enumerate(names):
        if i < 5:
            g.node.add(name=name, op="Const", device="/job:worker/task:0").attr["dtype"].type = 1
            continue
        inputs = sorted({names[rng.randrange(i)] for _ in range(3)})
        node = g.node.add(name=name, op="AddN", input=inputs, device="/job:worker/task:0")
        node.attr["T"].type = 1
        node.attr["N"].i = len(inputs)
    path.write_bytes(g.SerializeToString())
    return path


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v dot"], capture_output=True).returncode != 0,
                    reason="needs Graphviz's dot")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_render_leaves_no_dot_running(tmp_path, sig):
    model = slow_graph(tmp_path / "slow.pb")
    out = tmp_path / "out" / "slow.svg"
    out.parent.mkdir()
    proc = start(["render", model, "-o", out, "--max-nodes", "20000", "--layout-timeout", "600"], tmp_path)
    [dot] = wait_for(lambda: children(proc.pid, "dot"), what="dot to start")
    # Busy laying out, so it has read all of its input: a dot still reading would end on EOF anyway.
    wait_for(lambda: cpu_seconds(dot) > 1.0, what="dot to be laying out")
    proc.send_signal(sig)
    code, err = finish(proc)
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL  # no handler can run: the kernel kills dot (PR_SET_PDEATHSIG)
    else:
        assert (code, [line for line in err.splitlines() if line.strip()][-1]) == EXPECTED[sig], err
    wait_for(lambda: not alive(dot), timeout=10, what=f"dot (pid {dot}) to die")
    assert list(out.parent.iterdir()) == []  # no output, no temporary file


# ------------------------------------------------------------------------------ lint rules
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_lint_leaves_no_rule_process_running(tmp_path, sig):
    g = GraphDef()
    g.node.add(name="c", op="Const")
    (tmp_path / "model.pb").write_bytes(g.SerializeToString())
    rules = tmp_path / "rules"
    rules.mkdir()
    pid_file = tmp_path / "rule.pid"
    (rules / "forever.py").write_text(textwrap.dedent(f"""
        import os
        from placeviz.lint import Rule
        RULE = Rule(id="XY300", name="forever", severity="error", summary="Never returns.")
        def check(ctx):
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            while True:
                pass
    """))
    proc = start(["lint", "model.pb", "--rules", rules, "--rule-timeout", "0"], tmp_path)
    wait_for(lambda: pid_file.exists() and pid_file.read_text(), what="the rule to run")
    rule_pid = int(pid_file.read_text())
    assert rule_pid != proc.pid and alive(rule_pid)
    proc.send_signal(sig)
    code, err = finish(proc)
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
    else:
        assert code == EXPECTED[sig][0] and EXPECTED[sig][1] in err, err
    wait_for(lambda: not alive(rule_pid), timeout=10, what="the rule's process to die")
