"""Progress on stderr (``placeviz.progress``): only on a terminal or when forced, never with
``--quiet``, and never a byte of difference in what a command prints on stdout or writes.

Commands run as real processes: their stderr is a pipe, or the slave side of a pseudo-terminal
(``pty.openpty``), so the terminal test is the one the OS answers.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from placeviz.protos import GraphDef

REPO = Path(__file__).resolve().parent.parent
ERASE = b"\r\x1b[K"


def _graph(path: Path) -> Path:
    """Two variables on a PS and a worker's MatMul reading them: a graph every command accepts."""
    g = GraphDef()
    for name, device in (("w", "/job:ps/task:0"), ("v", "/job:ps/task:1")):
        var = g.node.add(name=name, op="VariableV2", device=device)
        var.attr["dtype"].type = 1
        var.attr["shape"].shape.dim.add(size=4)
        var.attr["shape"].shape.dim.add(size=4)
        read = g.node.add(name=f"{name}/read", op="Identity", input=[name], device=device)
        read.attr["_class"].list.s.append(f"loc:@{name}".encode())
        read.attr["T"].type = 1
    x = g.node.add(name="x", op="Const", device="/job:worker/task:0")
    x.attr["dtype"].type = 1
    x.attr["value"].tensor.dtype = 1
    x.attr["value"].tensor.tensor_shape.dim.add(size=4)
    x.attr["value"].tensor.tensor_shape.dim.add(size=4)
    x.attr["value"].tensor.float_val.append(1.0)
    for name, inputs in (("y", ["x", "w/read"]), ("z", ["y", "v/read"])):
        g.node.add(name=name, op="MatMul", input=inputs, device="/job:worker/task:0").attr["T"].type = 1
    path.write_bytes(g.SerializeToString())
    return path


def _run(args: list, cwd: Path, *, progress: str | None, tty: bool = False) -> tuple[int, bytes, bytes]:
    """``python -m placeviz ARGS``: exit code, stdout, stderr (read from a pty's master when ``tty``)."""
    env = {k: v for k, v in os.environ.items() if k != "PLACEVIZ_PROGRESS"}
    env["PYTHONPATH"] = str(REPO)
    if progress is not None:
        env["PLACEVIZ_PROGRESS"] = progress
    cmd = [sys.executable, "-m", "placeviz", *map(str, args)]
    if not tty:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=300)
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        slave = None
        out = proc.stdout.read()
        proc.wait(timeout=300)
        err = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the slave side is closed and everything was read
                break
            if not chunk:
                break
            err.append(chunk)
        return proc.returncode, out, b"".join(err).replace(b"\r\n", b"\n")  # the tty's ONLCR
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    return _graph(tmp_path_factory.mktemp("progress") / "g.pb")


def test_a_pipe_gets_no_progress_unless_forced(graph, tmp_path):
    code, out, err = _run(["lint", graph], tmp_path, progress=None)
    assert code == 0 and out
    assert b"placeviz: linting" not in err and b"placeviz: loading" not in err and ERASE not in err
    code, forced_out, forced = _run(["lint", graph], tmp_path, progress="always")
    assert code == 0 and forced_out == out
    lines = forced.decode().splitlines()
    assert f"placeviz: loading {graph}" in forced.decode() and ERASE not in forced  # lines, no redraws
    assert any(line.startswith("placeviz: linting 1/1 models (100%)") and line.endswith(": done") for line in lines)


def test_a_terminal_gets_a_line_redrawn_in_place_and_erased(graph, tmp_path):
    code, out, err = _run(["lint", graph], tmp_path, progress="always", tty=True)
    assert code == 0 and out
    assert err.startswith(ERASE + b"placeviz: ") and b"placeviz: linting 0/1 models (0%)" in err
    assert b"\n" not in err and err.endswith(ERASE)  # only the redrawn line, gone at the end
    code, _, never = _run(["lint", graph], tmp_path, progress="never", tty=True)
    assert code == 0 and never == b""


def test_quiet_silences_progress_and_status_lines_but_not_notes(graph, tmp_path):
    code, _, err = _run(["--quiet", "lint", graph, "-o", tmp_path / "l.txt"], tmp_path, progress="always")
    assert code == 0 and err == b"" and (tmp_path / "l.txt").exists()
    code, _, err = _run(["-q", "lint", graph, "-o", tmp_path / "l.txt"], tmp_path, progress="always", tty=True)
    assert code == 0 and err == b""
    code, _, err = _run(["lint", graph, "-o", tmp_path / "l.txt"], tmp_path, progress=None)
    assert code == 0 and err.decode() == f"placeviz: wrote {tmp_path / 'l.txt'}\n"
    # --ps-tasks 0 is a note: it stays; the summary of the placement is a status line: it goes
    code, _, err = _run(["--quiet", "place", graph, "--ps-tasks", 0, "-o", tmp_path / "p.pb"], tmp_path,
                        progress="always")
    assert code == 0 and err.decode().startswith("placeviz: note: ") and "nodes on" not in err.decode()
    code, _, err = _run(["place", graph, "--ps-tasks", 0, "-o", tmp_path / "p.pb"], tmp_path, progress=None)
    assert code == 0 and "placeviz: note: " in err.decode() and " nodes on " in err.decode()


COMMANDS = {
    "analyze json": ["analyze", "{g}", "--format", "json"],
    "analyze text": ["analyze", "{g}", "--ps-tasks", "2", "--replace-devices"],
    "lint text": ["lint", "{g}"],
    "lint json": ["lint", "{g}", "--format", "json"],
    "lint sarif": ["lint", "{g}", "--format", "sarif"],
    "place": ["place", "{g}", "--ps-tasks", "2", "-o", "{o}/placed.pb"],
    "partition": ["partition", "{g}", "-o", "{o}/parts"],
    "render dot": ["render", "{g}", "--view", "devices", "-o", "{o}/devices.dot"],
    "samples list": ["samples", "list"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_stdout_and_outputs_are_the_same_bytes_with_progress(graph, tmp_path, name):
    results = {}
    for how, progress, tty in (("off", "never", False), ("lines", "always", False), ("terminal", "always", True)):
        out_dir = tmp_path / how
        out_dir.mkdir()
        args = [a.format(g=graph, o=out_dir) for a in COMMANDS[name]]
        code, out, err = _run(args, out_dir, progress=progress, tty=tty)
        assert code in (0, 1), err
        files = {p.relative_to(out_dir).as_posix(): p.read_bytes() for p in sorted(out_dir.rglob("*")) if p.is_file()}
        results[how] = (code, out.replace(str(out_dir).encode(), b"OUT"), files)
        if how != "off" and name != "samples list":
            assert b"placeviz: " in err and b" s" in err, err  # progress was on
    assert results["off"] == results["lines"] == results["terminal"]


@pytest.mark.tf
def test_samples_build_counts_the_ops_tensorflow_adds(tmp_path):
    code, out, err = _run(["samples", "build", "mlp", "-o", tmp_path / "mlp.pb"], tmp_path, progress="always")
    assert code == 0 and out == b"", err
    lines = err.decode().splitlines()
    done = [line for line in lines if line.startswith("placeviz: building sample mlp with TensorFlow ")
            and line.endswith(": done")]
    wrote = [line for line in lines if line.startswith(f"placeviz: wrote {tmp_path / 'mlp.pb'} (")]
    assert len(done) == 1 and len(wrote) == 1, err
    ops = int(done[0].split("TensorFlow ")[1].split(" ops")[0].replace(",", ""))
    nodes = int(wrote[0].rsplit("(", 1)[1].split(" nodes")[0].replace(",", ""))
    assert ops == nodes > 0  # Graph.version, read while TF built the graph, ends at its node count
