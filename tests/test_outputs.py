"""Outputs that never destroy (README, "Output files"; ``placeviz.io``'s writing section).

Every case runs through the CLI (in-process ``run_cli``, or a real subprocess where the process
itself matters: hash seeds, dropped privileges) on graphs built with placeviz's own protos, so no
TensorFlow is needed. The partition cases run with the C kernels and with the pure-Python paths.

Device nodes: the char-device cases write into a private copy of ``/dev/null`` and ``/dev/full``
made with mknod(2) in the test's directory (same major/minor, same kernel driver), so a regression
cannot replace the machine's own ``/dev/null``; without the privilege to mknod (not root) they use
the real ones, which such a process could not replace anyway.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import run_cli

import placeviz.io as pio
from placeviz.commands.partition import is_partition_output, partition_file_names
from placeviz.partition import SCHEMA
from placeviz.protos import GraphDef, MetaGraphDef, SavedModel

ROOT = Path(__file__).resolve().parent.parent
F, I64 = 1, 9  # DT_FLOAT, DT_INT64


# ------------------------------------------------------------------------------------ models
def training_graph(n_vars: int = 4) -> GraphDef:
    """An unplaced plain training graph as ``GradientDescentOptimizer.minimize(loss, global_step)``
    builds it (variables, reads, MatMuls, ``GradientDescent/update_<var>/ApplyGradientDescent``,
    the global-step increment): ``place``/``partition`` place it, ``sync`` rewrites it."""
    g = GraphDef()

    def add(name, op, inputs=(), **attrs):
        n = g.node.add(name=name, op=op, input=list(inputs))
        for key, value in attrs.items():
            if key in ("T", "dtype"):
                n.attr[key].type = value
            elif isinstance(value, bool):
                n.attr[key].b = value
            elif isinstance(value, list):
                for d in value:
                    n.attr[key].shape.dim.add(size=d)
            else:
                n.attr[key].s = value.encode()
        return n

    def const(name, dtype, **value):
        n = add(name, "Const", dtype=dtype)
        n.attr["value"].tensor.dtype = dtype
        for field_name, v in value.items():
            getattr(n.attr["value"].tensor, field_name).append(v)

    add("x", "Placeholder", dtype=F, shape=[2, 4])
    const("lr", F, float_val=0.1)
    prev = "x"
    for k in range(n_vars):
        add(f"w{k}", "VariableV2", dtype=F, shape=[4, 4], container="", shared_name="")
        const(f"w{k}/init", F, float_val=0.0)
        add(f"w{k}/Assign", "Assign", [f"w{k}", f"w{k}/init"], T=F, use_locking=True, validate_shape=True)
        add(f"w{k}/read", "Identity", [f"w{k}"], T=F)
        add(f"h{k}", "MatMul", [prev, f"w{k}/read"], T=F, transpose_a=False, transpose_b=False)
        prev = f"h{k}"
    for k in range(n_vars):
        add(f"grad{k}", "MatMul", [prev, f"w{k}/read"], T=F, transpose_a=True, transpose_b=False)
    for k in range(n_vars):
        add(f"GradientDescent/update_w{k}/ApplyGradientDescent", "ApplyGradientDescent",
            [f"w{k}", "lr", f"grad{k}"], T=F, use_locking=False)
    add("global_step", "VariableV2", dtype=I64, shape=[], container="", shared_name="")
    add("global_step/read", "Identity", ["global_step"], T=I64)
    const("global_step/one", I64, int64_val=1)
    add("GradientDescent", "AssignAdd", ["global_step", "global_step/one"]
        + [f"^GradientDescent/update_w{k}/ApplyGradientDescent" for k in range(n_vars)], T=I64, use_locking=False)
    add("train", "NoOp", ["^GradientDescent"])
    return g


def two_ps_jobs_graph() -> GraphDef:
    """A placed graph on jobs ``ps`` and ``ps_``: their partitions' plain file names are equal."""
    g = GraphDef()
    for k, job in enumerate(["ps", "ps_"]):
        v = g.node.add(name=f"v{k}", op="VariableV2", device=f"/job:{job}/task:0")
        v.attr["dtype"].type = F
        v.attr["shape"].shape.dim.add(size=3)
        g.node.add(name=f"r{k}", op="Identity", input=[f"v{k}"], device=f"/job:{job}/task:0").attr["T"].type = F
    g.node.add(name="sum", op="AddV2", input=["r0", "r1"], device="/job:worker/task:0").attr["T"].type = F
    return g


@pytest.fixture()
def model(tmp_path) -> Path:
    path = tmp_path / "model.pb"
    path.write_bytes(training_graph().SerializeToString())
    return path



def snapshot(path: Path) -> tuple[bytes, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, st.st_ino


def tree(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def hidden_leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("placeviz: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def char_device(tmp_path: Path, name: str) -> Path:
    """A private ``/dev/<name>`` (see the module docstring), or the real one without mknod rights."""
    real = Path("/dev") / name
    clone = tmp_path / f"{name}-clone"
    try:
        os.mknod(clone, stat.S_IFCHR | 0o666, real.stat().st_rdev)
    except PermissionError:
        return real
    return clone


# ------------------------------------------------------------------------ -o is an input
@pytest.mark.parametrize("via", ["same path", "symlink", "hard link", "relative path"])
@pytest.mark.parametrize("command", [
    ["place", "{model}", "--ps-tasks", "2", "-o", "{out}"],
    ["sync", "{model}", "--replicas-to-aggregate", "2", "-o", "{out}"],
    ["analyze", "{model}", "--ps-tasks", "2", "-o", "{out}"],
    ["lint", "{model}", "--ps-tasks", "2", "--format", "json", "-o", "{out}"],
])
def test_output_that_is_the_input_is_refused(command, via, model, tmp_path, capsys, monkeypatch):
    """One line, exit 2, and the model keeps its bytes, its mtime and its inode."""
    if via == "symlink":
        out = tmp_path / "link.pb"
        out.symlink_to(model)
    elif via == "hard link":
        out = tmp_path / "hard.pb"
        os.link(model, out)
    elif via == "relative path":
        monkeypatch.chdir(tmp_path)
        out = Path("sub/../model.pb")
        (tmp_path / "sub").mkdir()
    else:
        out = model
    before = snapshot(model)
    code, out_text, err = run_cli([a.format(model=model, out=out) for a in command], capsys)
    assert code == 2, err
    assert "is the input model" in one_line(err) and str(out) in one_line(err)
    assert snapshot(model) == before
    assert hidden_leftovers(tmp_path) == []


def test_a_python_builder_is_an_input_too(tmp_path, capsys):
    """``file.py:fn`` runs the file; ``-o file.py`` would overwrite the program."""
    builder = tmp_path / "build.py"
    builder.write_text("from placeviz.protos import GraphDef\n"
                       f"DATA = {training_graph().SerializeToString()!r}\n"
                       "def graph():\n    return GraphDef.FromString(DATA)\n")
    before = snapshot(builder)
    code, _, err = run_cli(["place", f"{builder}:graph", "--ps-tasks", "2", "-o", builder], capsys)
    assert code == 2 and "is the input model" in one_line(err)
    assert snapshot(builder) == before


@pytest.mark.parametrize("command", [["analyze", "{model}", "--cluster", "{other}", "--format", "json", "-o", "{other}"],
                                     ["place", "{model}", "--cluster", "{other}", "-o", "{other}"]])
def test_the_cluster_file_is_an_input_too(command, model, tmp_path, capsys):
    """``-o cluster.json`` next to ``--cluster cluster.json`` would overwrite the user's cluster."""
    other = tmp_path / "cluster.json"
    other.write_text('{"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222"]}')
    before = snapshot(other)
    code, _, err = run_cli([a.format(model=model, other=other) for a in command], capsys)
    assert code == 2 and "is the --cluster file" in one_line(err), err
    assert snapshot(other) == before


def test_any_file_of_an_input_saved_model_is_refused(tmp_path, capsys):
    saved = SavedModel(saved_model_schema_version=1)
    meta = saved.meta_graphs.add()
    meta.meta_info_def.tags.append("train")
    meta.graph_def.CopyFrom(training_graph())
    export = tmp_path / "export"
    (export / "variables").mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(saved.SerializeToString())
    index = export / "variables" / "variables.index"
    index.write_bytes(b"checkpoint index")
    before = {p: snapshot(p) for p in (export / "saved_model.pb", index)}
    for spec in (export, export / "saved_model.pb"):
        for out in (export / "saved_model.pb", index):
            code, _, err = run_cli(["place", spec, "--ps-tasks", "2", "-o", out], capsys)
            assert code == 2 and "input" in one_line(err), err
        code, _, err = run_cli(["partition", spec, "--ps-tasks", "2", "-o", tmp_path], capsys)
        assert code == 2 and "holds the input model" in one_line(err)
    assert {p: snapshot(p) for p in before} == before
    # A new file next to it is not the model: written.
    code, _, err = run_cli(["place", export, "--ps-tasks", "2", "-o", export / "placed.pb"], capsys)
    assert code == 0, err


def test_partition_into_the_directory_holding_its_input_is_refused(model, tmp_path, capsys, kernel_mode):
    out = tmp_path / "parts"
    assert run_cli(["partition", model, "--ps-tasks", "2", "-o", out], capsys)[0] == 0
    part = next(out.glob("job_ps*.pb"))
    before = tree(out)
    code, _, err = run_cli(["partition", part, "-o", out], capsys)
    assert code == 2 and "holds the input model" in one_line(err)
    assert tree(out) == before


# ------------------------------------------------------------------ devices, FIFOs, stdout
def test_a_char_device_is_written_into_not_replaced(model, tmp_path, capsys):
    null = char_device(tmp_path, "null")
    rdev = null.stat().st_rdev
    for args in (["place", model, "--ps-tasks", "2", "-o", null], ["analyze", model, "-o", null],
                 ["sync", model, "--replicas-to-aggregate", "2", "-o", null]):
        code, _, err = run_cli(args, capsys)
        assert code == 0, err
        st = os.stat(null)
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev
    # A symlink to the device: the device is written into, the link stays.
    link = tmp_path / "null-link"
    link.symlink_to(null)
    code, _, err = run_cli(["place", model, "--ps-tasks", "2", "-o", link], capsys)
    assert code == 0, err
    assert link.is_symlink() and stat.S_ISCHR(os.stat(link).st_mode)


def test_a_full_disk_is_one_line_exit_2(model, tmp_path, capsys):
    """``/dev/full`` fails every write with ENOSPC, as a full disk does (and stays a device)."""
    full = char_device(tmp_path, "full")
    code, _, err = run_cli(["place", model, "--ps-tasks", "2", "-o", full], capsys)
    assert code == 2
    line = one_line(err)
    assert str(full) in line and os.strerror(errno.ENOSPC) in line
    assert stat.S_ISCHR(os.stat(full).st_mode)


def test_a_fifo_is_written_into(model, tmp_path, capsys):
    expected = tmp_path / "placed.pb"
    assert run_cli(["place", model, "--ps-tasks", "2", "-o", expected], capsys)[0] == 0
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, _, err = run_cli(["place", model, "--ps-tasks", "2", "-o", fifo], capsys)
    reader.join(timeout=30)
    assert code == 0, err
    assert received == [expected.read_bytes()]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_dash_is_stdout(model, tmp_path, capsysbinary, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a file named "-" would appear
    expected = tmp_path / "placed.pb"
    assert run_cli(["place", model, "--ps-tasks", "2", "-o", expected], capsysbinary)[0] == 0
    code, out, err = run_cli(["place", model, "--ps-tasks", "2", "-o", "-"], capsysbinary)
    assert code == 0, err
    assert out == expected.read_bytes()
    assert not (tmp_path / "-").exists()
    code, out, err = run_cli(["sync", model, "--replicas-to-aggregate", "2", "--meta-graph", "-o", "-"],
                             capsysbinary)
    assert code == 0, err
    assert MetaGraphDef.FromString(out).graph_def.node  # binary, parses
    code, out, err = run_cli(["analyze", model, "--format", "json", "-o", "-"], capsysbinary)
    assert code == 0 and json.loads(out)["graph"]["nodes"] == len(training_graph().node)
    code, _, err = run_cli(["partition", model, "--ps-tasks", "2", "-o", "-"], capsysbinary)
    assert code == 2 and b"standard output" in err


# ---------------------------------------------------------------------------- symlinks
def test_a_symlink_output_writes_its_target_and_says_so(model, tmp_path, capsys):
    target = tmp_path / "real" / "placed.pb"
    target.parent.mkdir()
    target.write_bytes(b"old")
    link = tmp_path / "latest.pb"
    link.symlink_to(target)
    code, _, err = run_cli(["place", model, "--ps-tasks", "2", "-o", link], capsys)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert GraphDef.FromString(target.read_bytes()).node
    assert f"{link} is a symbolic link: writing its target {target}" in err
    assert hidden_leftovers(target.parent) == [] and hidden_leftovers(tmp_path) == []
    # A dangling link: its target is created, as a shell redirection would.
    dangling = tmp_path / "dangling.pb"
    dangling.symlink_to(tmp_path / "real" / "new.pb")
    assert run_cli(["place", model, "--ps-tasks", "2", "-o", dangling], capsys)[0] == 0
    assert dangling.is_symlink() and (tmp_path / "real" / "new.pb").is_file()


def test_a_symlink_loop_is_one_line(model, tmp_path, capsys):
    loop = tmp_path / "loop.pb"
    loop.symlink_to(loop)
    code, _, err = run_cli(["place", model, "--ps-tasks", "2", "-o", loop], capsys)
    assert code == 2 and str(loop) in one_line(err) and os.strerror(errno.ELOOP) in one_line(err)


# ----------------------------------------------------------------------- modes, umask
@pytest.fixture()
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_new_files_honour_the_umask_and_replaced_files_keep_their_mode(model, tmp_path, capsys, umask_027):
    out = tmp_path / "new.pb"
    assert run_cli(["place", model, "--ps-tasks", "2", "-o", out], capsys)[0] == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    report = tmp_path / "report.json"
    assert run_cli(["analyze", model, "--format", "json", "-o", report], capsys)[0] == 0
    assert stat.S_IMODE(report.stat().st_mode) == 0o640
    kept = tmp_path / "kept.pb"
    kept.write_bytes(b"old")
    kept.chmod(0o604)
    assert run_cli(["place", model, "--ps-tasks", "2", "-o", kept], capsys)[0] == 0
    assert stat.S_IMODE(kept.stat().st_mode) == 0o604 and kept.read_bytes() != b"old"


def test_partition_output_honours_the_umask(model, tmp_path, capsys, umask_027, kernel_mode):
    out = tmp_path / "parts"
    assert run_cli(["partition", model, "--ps-tasks", "2", "-o", out], capsys)[0] == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o640}


# ------------------------------------------------------------------- permission problems
def test_a_read_only_directory_is_one_line_exit_2(model, tmp_path, capsys):
    """Root ignores permission bits, so as root the CLI runs in a subprocess without the
    capabilities that override them (setpriv drops CAP_DAC_OVERRIDE & co.)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    args = ["place", str(model), "--ps-tasks", "2", "-o", str(ro / "out.pb")]
    if os.geteuid() != 0:
        code, _, err = run_cli(args, capsys)
    else:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: cannot drop the override of permission bits")
        proc = subprocess.run([setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner",
                               sys.executable, "-m", "placeviz", *args], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
        code, err = proc.returncode, proc.stderr
    assert code == 2, err
    line = one_line(err)
    assert str(ro / "out.pb") in line and os.strerror(errno.EACCES) in line
    assert list(ro.iterdir()) == []


def test_a_missing_output_directory_is_one_line(model, tmp_path, capsys):
    code, _, err = run_cli(["place", model, "--ps-tasks", "2", "-o", tmp_path / "no" / "out.pb"], capsys)
    assert code == 2 and "does not exist" in one_line(err)


# ------------------------------------------------------------------------ partition dirs
def test_partition_names_stay_apart_when_devices_sanitize_alike(tmp_path, capsys, kernel_mode):
    model = tmp_path / "two_ps.pb"
    model.write_bytes(two_ps_jobs_graph().SerializeToString())
    for level, ps, ps_ in (("device", "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps_/replica:0/task:0/device:CPU:0"),
                           ("task", "/job:ps/replica:0/task:0", "/job:ps_/replica:0/task:0")):
        out = tmp_path / level
        code, _, err = run_cli(["partition", model, "--level", level, "-o", out], capsys)
        assert code == 0, err
        index = json.loads((out / "index.json").read_text())
        files = {p["device"]: p["file"] for p in index["partitions"]}
        assert len(files) == 3 and len(set(files.values())) == 3
        assert sorted([*files.values(), "index.json"]) == sorted(p.name for p in out.iterdir())
        for device, var in ((ps, "v0"), (ps_, "v1")):
            graph = GraphDef.FromString((out / files[device]).read_bytes())
            assert var in {n.name for n in graph.node}
            assert all(n.device == device or n.device.startswith(device + "/device:") for n in graph.node)
        assert files[ps] != files[ps_] and files[ps].startswith("job_ps_replica_0_task_0")


def test_partition_file_names():
    names = partition_file_names(["/job:ps/task:0", "/job:ps_/task:0", "/job:PS/task:0", "/job:worker/task:0"])
    assert names["/job:worker/task:0"] == "job_worker_task_0.pb"  # alone: today's name
    assert len({n.casefold() for n in names.values()}) == 4  # apart, even on a case-insensitive file system
    assert names == partition_file_names(list(names))  # the same every run
    long = "/job:" + "w" * 400 + "/task:0"
    assert len(partition_file_names([long])[long].encode()) <= 255
    assert partition_file_names(["///"])["///"] == "partition.pb"


def test_partition_replaces_its_earlier_output_as_a_whole(model, tmp_path, capsys, kernel_mode):
    """A rerun with fewer devices leaves no stale partition from the first run."""
    out = tmp_path / "parts"
    assert run_cli(["partition", model, "--ps-tasks", "3", "-o", out], capsys)[0] == 0
    assert len(list(out.glob("job_ps_*.pb"))) == 3 and is_partition_output(out)
    code, _, err = run_cli(["partition", model, "--ps-tasks", "1", "-o", out], capsys)
    assert code == 0, err
    index = json.loads((out / "index.json").read_text())
    assert sorted([*(p["file"] for p in index["partitions"]), "index.json"]) == sorted(p.name for p in out.iterdir())
    assert len(list(out.glob("job_ps_*.pb"))) == 1
    assert hidden_leftovers(tmp_path) == []


def test_partition_refuses_a_directory_it_did_not_write(model, tmp_path, capsys, kernel_mode):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, _, err = run_cli(["partition", model, "--ps-tasks", "2", "-o", out], capsys)
    assert code == 2 and "not placeviz partition output" in one_line(err)
    assert tree(out) == {"notes.txt": b"keep me"}
    # An earlier output with a file of the user's added is not ours alone either.
    parts = tmp_path / "parts"
    assert run_cli(["partition", model, "--ps-tasks", "2", "-o", parts], capsys)[0] == 0
    (parts / "mine.txt").write_text("keep me")
    before = tree(parts)
    assert run_cli(["partition", model, "--ps-tasks", "2", "-o", parts], capsys)[0] == 2
    assert tree(parts) == before
    # An empty directory is fine.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli(["partition", model, "--ps-tasks", "2", "-o", empty], capsys)[0] == 0
    assert (empty / "index.json").is_file()


def test_an_index_is_read_once_until_it_changes(model, tmp_path, capsys, monkeypatch):
    """``partition`` asks whether DIR is its output before the long part and again when it
    replaces it: the index is parsed once, and read again whenever it is rewritten (same size,
    other content: not ours any more), or listed files of another kind (an unhashable ``file``)."""
    from placeviz.commands import partition as command

    out = tmp_path / "parts"
    assert run_cli(["partition", model, "--ps-tasks", "2", "-o", out], capsys)[0] == 0
    parsed = []
    real = command.json.loads
    monkeypatch.setattr(command.json, "loads",  # json itself: count the indexes read, not other documents
                        lambda data, *a, **k: ("placeviz.partition/" in str(data[:40]) and parsed.append(1))
                        or real(data, *a, **k))
    assert run_cli(["partition", model, "--ps-tasks", "2", "-o", out], capsys)[0] == 0
    assert len(parsed) == 1 and is_partition_output(out) and len(parsed) == 2  # a new index: read again
    assert is_partition_output(out) and len(parsed) == 2
    index = (out / "index.json").read_text()
    (out / "index.json").write_text(index.replace(SCHEMA, SCHEMA[:-1] + "0"))  # same size
    assert not is_partition_output(out) and len(parsed) == 3
    doc = json.loads(index)
    doc["partitions"][0]["file"] = [doc["partitions"][0]["file"]]
    (out / "index.json").write_text(json.dumps(doc))
    assert not is_partition_output(out)  # its first partition's file is no longer listed


def _fail_after(count: int, exc: BaseException):
    real = pio._write_file
    calls = []

    def writer(path, payload):
        calls.append(path)
        if len(calls) > count:
            raise exc
        real(path, payload)

    return writer


def _raise_eio(*args):
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def _failing_once_onto(out: Path):
    real = os.rename
    failed = []

    def rename(src, dst):
        if Path(dst) == out and not failed:
            failed.append(src)
            _raise_eio()
        real(src, dst)

    return rename


@pytest.mark.parametrize("failure", ["ctrl-c while writing", "disk full while writing", "rename fails",
                                     "rename fails without renameat2"])
def test_an_interrupted_partition_leaves_the_previous_output(model, tmp_path, capsys, failure, kernel_mode):
    out = tmp_path / "parts"
    assert run_cli(["partition", model, "--ps-tasks", "2", "-o", out], capsys)[0] == 0
    before = tree(out)
    with pytest.MonkeyPatch.context() as patch:
        expected = 2
        if failure == "ctrl-c while writing":
            patch.setattr(pio, "_write_file", _fail_after(1, KeyboardInterrupt()))
            expected = None  # interrupted: its exit code (130) is cli.main's business, not tested here
        elif failure == "disk full while writing":
            patch.setattr(pio, "_write_file", _fail_after(2, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
        elif failure == "rename fails":
            patch.setattr(pio, "_exchange", _raise_eio)
        else:  # the fallback's two renames: the second one (new output into place) fails
            patch.setattr(pio, "_exchange", lambda a, b: False)
            patch.setattr(pio.os, "rename", _failing_once_onto(out))
        code, _, err = run_cli(["partition", model, "--ps-tasks", "3", "-o", out], capsys)
    if expected is None:
        assert code != 0, err
    else:
        assert code == expected, err
        assert str(out) in one_line(err)
    assert tree(out) == before
    assert hidden_leftovers(tmp_path) == []
    code, _, err = run_cli(["partition", model, "--ps-tasks", "3", "-o", out], capsys)  # then it works
    assert code == 0 and len(list(out.glob("job_ps_*.pb"))) == 3


def test_the_fallback_swap_replaces_the_output(model, tmp_path, capsys, monkeypatch):
    """Without renameat2 (old kernel or C library) the swap is two renames."""
    out = tmp_path / "parts"
    assert run_cli(["partition", model, "--ps-tasks", "3", "-o", out], capsys)[0] == 0
    monkeypatch.setattr(pio, "_exchange", lambda a, b: False)
    assert run_cli(["partition", model, "--ps-tasks", "1", "-o", out], capsys)[0] == 0
    assert len(list(out.glob("job_ps_*.pb"))) == 1 and is_partition_output(out)
    assert hidden_leftovers(tmp_path) == []


@pytest.mark.parametrize("pretty", [False, True])
def test_json_in_pieces_is_the_same_text(pretty, monkeypatch):
    """``to_json_pieces`` (how ``index.json`` is written) joins to exactly ``to_json``'s text, long
    top-level lists cut in slices included."""
    from placeviz.commands import output

    monkeypatch.setattr(output, "_LIST_SLICE", 3)
    monkeypatch.setattr(output, "_PIECE_CHARS", 16)
    doc = {"schema": "placeviz.partition/1", "empty": [], "short": [1, 2, 3], "nothing": None,
           "transfers": [{"src": f"n\u00e9{k}", "bytes": k * 1.5, "shape": [k, None], "slot": "control"}
                         for k in range(10)],
           "moved": {"a": {"from": "x", "to": "y"}}, "ratio": float("inf"), "quote": 'a "b"\n'}
    from collections import Counter

    odd = {"counter": Counter(a=2), "items": [Counter(b=1), (1, [2, ()]), {}, [], "x\ny"], "tuple": (1, 2),
           "deep": {"a": [{"b": [{"c": None}]}]}, "empty_dict": {}, "nan": float("nan")}
    for value in (doc, {}, {"transfers": list(range(7))}, odd, {"int_key": {1: "a"}}, {1: [2], "b": None}):
        pieces = list(output.to_json_pieces(value, pretty=pretty))
        assert b"".join(pieces) == output.to_json(value, pretty=pretty).encode("utf-8")
        expected = json.dumps(value, indent=2) if pretty else json.dumps(value, separators=(",", ":"))
        assert b"".join(pieces) == (expected + "\n").encode("utf-8")
    assert len(list(output.to_json_pieces(doc, pretty=pretty))) > 4


def test_a_directory_of_generated_files_is_written_one_file_at_a_time(tmp_path):
    """``write_directory`` takes (name, content) pairs from a generator and writes each file before
    asking for the next (``placeviz partition`` makes one partition's bytes at a time that way);
    a failure inside the generator leaves the earlier output and no temporary directory."""
    out = tmp_path / "out"
    seen: list[list[str]] = []

    def files():
        for k in range(3):
            tmp = [p for p in tmp_path.iterdir() if p.name.startswith(".")]
            seen.append(sorted(q.name for t in tmp for q in t.iterdir()))
            yield f"f{k}", f"content {k}"

    pio.write_directory(out, files(), replaceable=lambda d: True, kind="test output")
    assert seen == [[], ["f0"], ["f0", "f1"]]
    assert {p.name: p.read_text() for p in out.iterdir()} == {f"f{k}": f"content {k}" for k in range(3)}

    def failing():
        yield "g0", b"new"
        raise ValueError("made in the generator")

    with pytest.raises(ValueError, match="made in the generator"):
        pio.write_directory(out, failing(), replaceable=lambda d: True, kind="test output")
    assert sorted(p.name for p in out.iterdir()) == ["f0", "f1", "f2"]
    assert hidden_leftovers(tmp_path) == []


# ------------------------------------------------------------------------- deterministic bytes
_RUN_ALL = """
import sys
from placeviz.cli import main
for args in {commands!r}:
    try:
        main(args)
    except SystemExit as e:
        if e.code:
            sys.exit(f"{{args}}: exit {{e.code}}")
"""


def _outputs_of_one_run(model, out: Path, seed: str, no_kernels: bool) -> dict[str, bytes]:
    """Run every command that writes a proto or JSON in one process (hash seed ``seed``, C kernels
    on or off) and return the bytes of every file written, by relative path."""
    out.mkdir()
    commands = [["place", str(model), "--ps-tasks", "2", "-o", str(out / "placed.pb")],
                ["place", str(model), "--ps-tasks", "2", "-o", str(out / "placed.pbtxt")],
                ["partition", str(model), "--ps-tasks", "2", "-o", str(out / "parts")],
                ["partition", str(model), "--ps-tasks", "2", "--pretty", "-o", str(out / "pretty")],
                ["partition", str(model), "--ps-tasks", "2", "--level", "task", "-o", str(out / "tasks")],
                ["sync", str(model), "--replicas-to-aggregate", "2", "-o", str(out / "sync.pb")],
                ["sync", str(model), "--replicas-to-aggregate", "2", "-o", str(out / "sync.meta")],
                ["analyze", str(model), "--ps-tasks", "2", "--format", "json", "-o", str(out / "analyze.json")],
                ["analyze", str(model), "--ps-tasks", "2", "--format", "json", "--pretty", "-o",
                 str(out / "analyze-pretty.json")],
                ["lint", str(model), "--format", "json", "-o", str(out / "lint.json")],
                ["lint", str(model), "--format", "json", "--pretty", "-o", str(out / "lint-pretty.json")],
                ["lint", str(model), "--format", "sarif", "-o", str(out / "lint.sarif")],
                ["render", str(model), "--ps-tasks", "2", "--view", "devices", "-o", str(out / "devices.dot")]]
    env = {k: v for k, v in os.environ.items() if k != "PLACEVIZ_NO_KERNELS"}
    env.update(PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
    if no_kernels:
        env["PLACEVIZ_NO_KERNELS"] = "1"
    proc = subprocess.run([sys.executable, "-c", _RUN_ALL.format(commands=commands)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_two_runs_write_identical_bytes(model, tmp_path):
    """Two processes with different hash seeds (set and dict-of-set orders differ between them),
    each with the C kernels and with the pure-Python paths, write the same bytes for place
    (binary and text), partition (every file and index.json, compact and ``--pretty``), sync
    (GraphDef and MetaGraphDef), analyze and lint (JSON compact and ``--pretty``, SARIF) and render
    (DOT): four runs, one set of bytes."""
    runs = {(seed, no_kernels): _outputs_of_one_run(model, tmp_path / f"run{seed}{'py' if no_kernels else 'c'}",
                                                    seed, no_kernels)
            for seed in ("1", "2") for no_kernels in (False, True)}
    first = runs[("1", False)]
    assert len(first) == 2 + 3 * 4 + 2 + 6
    for key, files in runs.items():
        assert files.keys() == first.keys(), key
        differ = [name for name in first if files[name] != first[name]]
        assert not differ, f"seed {key[0]}, kernels {'off' if key[1] else 'on'}: {differ} differ from the first run"
