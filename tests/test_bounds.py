"""Bounded resources (placeviz.limits): a hostile number or file fails fast with one line.

The planted inputs of the issue "Hostile models and faults": one device string
``/job:ps/task:99999999999`` (or ``--ps-tasks 1000000000``, ``--cpus-per-task 100000000``) grew
placeviz to 23 GB; ``/dev/zero`` as MODEL was read forever; a shape whose byte count overflows
crashed the text report. Every case goes through the CLI, in both kernel modes (the C kernels and
the Python loops) where kernels are involved; the allocation bombs also run in a subprocess whose
address space is capped at 2 GB, so a regression is a MemoryError or a kill, not a pass.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import run_cli

import placeviz.graph
import placeviz.io
import placeviz.limits
import placeviz.partition
import placeviz.placement.placer
import placeviz.placement.setter
from placeviz.limits import MAX_TENSOR_BYTES, device_bound_problem, parse_size, tensor_bytes
from placeviz.native import NO_KERNELS_ENV
from placeviz.protos import GraphDef

REPO = Path(__file__).parent.parent



def graph_file(path: Path, device: str = "/job:ps/task:0", dims=(4, 3), dtype: int = 1) -> Path:
    """w (VariableV2 on ``device``) -> w/read (Identity) -> y (MatMul with x) on the worker."""
    g = GraphDef()
    w = g.node.add(name="w", op="VariableV2", device=device)
    w.attr["dtype"].type = dtype
    for d in dims:
        w.attr["shape"].shape.dim.add(size=d)
    shape = w.attr["_output_shapes"].list.shape.add()
    for d in dims:
        shape.dim.add(size=d)
    r = g.node.add(name="w/read", op="Identity", input=["w"], device=device)
    r.attr["T"].type = dtype
    r.attr["_class"].list.s.append(b"loc:@w")
    shape = r.attr["_output_shapes"].list.shape.add()
    for d in dims:
        shape.dim.add(size=d)
    x = g.node.add(name="x", op="Const", device="/job:worker/task:0")
    x.attr["dtype"].type = dtype
    x.attr["value"].tensor.dtype = dtype
    y = g.node.add(name="y", op="Identity", input=["w/read"], device="/job:worker/task:0")
    y.attr["T"].type = dtype
    path.write_bytes(g.SerializeToString())
    return path


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def run_capped(args: list[str], no_kernels: bool = False, limit: int = 2 << 30, timeout: float = 120):
    """``placeviz ARGS`` in a subprocess whose address space is capped at ``limit`` bytes."""

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {k: v for k, v in os.environ.items() if k != NO_KERNELS_ENV}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if no_kernels:
        env[NO_KERNELS_ENV] = "1"
    return subprocess.run([sys.executable, "-m", "placeviz", *map(str, args)], capture_output=True, text=True,
                          env=env, preexec_fn=cap, timeout=timeout)


# --------------------------------------------------------------------------- device numbers
@pytest.mark.parametrize("no_kernels", [False, True], ids=["c", "python"])
@pytest.mark.parametrize("command", [
    ["analyze"], ["analyze", "--format", "json"], ["lint", "--format", "json"], ["render", "-o", "{out}.dot"],
    ["partition", "-o", "{out}"], ["place", "-o", "{out}.pb"],
])
def test_huge_task_index_in_a_graph_fails_fast_in_bounded_memory(tmp_path, command, no_kernels):
    # 99999999999 keeps 1215752191 in TF's C++ parser (low 32 bits): a cluster of 1.2e9 tasks.
    model = graph_file(tmp_path / "huge.pb", "/job:ps/task:99999999999")
    args = [command[0], model, *(a.format(out=tmp_path / "out") for a in command[1:])]
    done = run_capped(args, no_kernels)
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert "huge.pb" in line and "'/job:ps/task:99999999999'" in line and "10,000 tasks per job" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.pb").exists()


@pytest.mark.parametrize("option, value, bound", [
    ("--ps-tasks", "1000000000", "0<=x<=10000"),
    ("--cpus-per-task", "100000000", "1<=x<=1024"),
    ("--gpus-per-worker", "5000", "0<=x<=1024"),
])
def test_huge_counts_on_the_command_line_are_usage_errors(tmp_path, option, value, bound):
    model = graph_file(tmp_path / "m.pb")
    done = run_capped(["analyze", model, option, value, "--replace-devices"])
    assert done.returncode == 2 and bound in done.stderr and option in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("option, value, message", [
    ("--worker-device", "/job:worker/task:99999999999", "task 99999999999 is beyond placeviz's bound of 10,000"),
    ("--master", "/job:worker/task:10000", "task 10000 is beyond"),
    ("--ps-device", "/job:ps/device:CPU:1024", "device index 1024 is beyond placeviz's bound of 1,024"),
])
def test_device_options_beyond_the_bounds(tmp_path, capsys, option, value, message):
    model = graph_file(tmp_path / "m.pb", device="")
    code, _, err = run_cli(["analyze", model, "--ps-tasks", "2", option, value], capsys)
    assert code == 2
    line = one_line(err)
    assert option in line and message in line


@pytest.mark.parametrize("command", ["analyze", "lint"])
def test_a_huge_worker_graph_index_fails_fast(tmp_path, command):
    model = graph_file(tmp_path / "m.pb")
    done = run_capped([command, model, "--worker-graph", f"99999999999={model}"])
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == ("placeviz: error: device '/job:worker/task:99999999999': task 99999999999 is "
                                     "beyond placeviz's bound of 10,000 tasks per job (task indices 0-9999)")


def test_the_device_set_bound_counts_before_allocating(tmp_path, capsys):
    # (10,000 ps + 1 worker) x 1,024 CPUs: each option is within its bound, the product is not.
    model = graph_file(tmp_path / "m.pb", device="")
    code, _, err = run_cli(["analyze", model, "--ps-tasks", "10000", "--cpus-per-task", "1024"], capsys)
    assert code == 2
    assert "is 10,241,024" in one_line(err) and "bound of 100,000" in err


@pytest.mark.parametrize("device, message", [
    ("/job:ps/task:4294967295", "task 4294967295 is beyond"),  # wraps to -1 in TF's C++ parser
    ("/job:ps/task:10000", "task 10000 is beyond"),
    ("/job:ps/replica:123456789/task:0", "replica 123456789 is beyond"),
    ("/job:ps/task:0/device:GPU:5000", "device index 5000 is beyond placeviz's bound of 1,024"),
    ("/job:ps/task:0/cpu:99999999999", "device index 99999999999 is beyond"),
])
def test_device_strings_beyond_the_bounds_are_refused_at_load(tmp_path, capsys, kernel_mode, device, message):
    model = graph_file(tmp_path / "m.pb", device)
    for command in (["analyze", model], ["lint", model, "--format", "json"]):
        code, out, err = run_cli(command, capsys)
        assert code == 2, err
        line = one_line(err)
        assert line.startswith(f"placeviz: error: {model}: node 'w' has device") and message in line
        if command[0] == "lint":
            assert message in json.loads(out)["errors"][0]["message"]


def test_the_largest_task_index_within_the_bound_still_works(tmp_path, capsys, kernel_mode):
    model = graph_file(tmp_path / "m.pb", "/job:ps/task:9999")
    code, out, err = run_cli(["analyze", model, "--format", "json"], capsys)
    assert code == 0, err
    tasks = json.loads(out)["placement"]["tasks"]
    assert len([t for t in tasks if t["job"] == "ps"]) == 10_000  # every ps task listed, as before


def test_device_bound_problem_reads_digits_as_written():
    assert device_bound_problem("/job:ps/task:9999/device:GPU:1023") is None
    assert device_bound_problem("/job:worker/task:%d") is None and device_bound_problem("") is None
    assert device_bound_problem("/job:ps1/task:3") is None  # digits in a job name are not an index
    assert "task 10000" in device_bound_problem("/job:ps/task:1_0000")  # Python's int() reads 1_0000
    assert "task 99999999999999999999999" in device_bound_problem("/task:99999999999999999999999")
    assert "device index 2048" in device_bound_problem("GPU:2048")


def test_cluster_files_beyond_the_bounds(tmp_path, capsys):
    model = graph_file(tmp_path / "m.pb", device="")
    cases = {
        "dense.json": ({"ps": [f"p{i}:1" for i in range(10_001)], "worker": ["w:1"]},
                       "the number of tasks of job 'ps' is 10,001, beyond placeviz's bound of 10,000"),
        "sparse.json": ({"ps": {"0": "a:1", "50000": "b:1"}, "worker": ["w:1"]},
                        "job 'ps' has task 50000, beyond placeviz's bound of 10,000 tasks per job"),
    }
    for name, (doc, message) in cases.items():
        (tmp_path / name).write_text(json.dumps(doc))
        code, _, err = run_cli(["analyze", model, "--cluster", tmp_path / name], capsys)
        assert code == 2
        line = one_line(err)
        assert name in line and message in line
    code, _, err = run_cli(["analyze", model, "--cluster", "/dev/zero"], capsys)
    assert code == 2 and "/dev/zero: a character device, not a regular file" in one_line(err)
    code, _, err = run_cli(["lint", model, "--baseline", "/dev/zero"], capsys)
    assert code == 2 and one_line(err) == ("placeviz: error: --baseline /dev/zero: a character device, not a "
                                           "regular file: placeviz reads a baseline only from a regular file")


# ----------------------------------------------------------------------------------- inputs
def test_dev_zero_and_a_fifo_are_refused_before_reading(tmp_path):
    fifo = tmp_path / "model.pb"
    os.mkfifo(fifo)  # nobody writes to it: a blocking open or read would hang
    for target, kind in (("/dev/zero", "a character device"), (fifo, "a FIFO (named pipe)")):
        for command in ("analyze", "lint"):
            done = run_capped([command, target], timeout=60)
            assert done.returncode == 2, done.stderr
            line = one_line(done.stderr)
            assert f"{target}: {kind}, not a regular file" in line


def test_max_bytes_refuses_bigger_models_with_one_line(tmp_path, capsys, monkeypatch):
    model = graph_file(tmp_path / "m.pb")
    size = model.stat().st_size
    code, _, err = run_cli(["--max-bytes", str(size - 1), "analyze", model], capsys)
    assert code == 2
    line = one_line(err)
    assert f"{size:,} bytes, more than {size - 1:,} bytes, placeviz's limit" in line and "--max-bytes" in line
    code, _, err = run_cli(["--max-bytes", str(size), "analyze", model], capsys)
    assert code == 0, err
    monkeypatch.setenv("PLACEVIZ_MAX_BYTES", "1KiB")
    big = tmp_path / "big.pbtxt"
    big.write_text("# padding\n" * 200 + 'node { name: "a" op: "NoOp" }\n')
    code, _, err = run_cli(["analyze", big], capsys)
    assert code == 2 and "more than 1 KiB, placeviz's limit" in one_line(err)
    code, _, err = run_cli(["analyze", model], capsys)  # the limit does not stick to later runs
    assert code == 0, err
    monkeypatch.delenv("PLACEVIZ_MAX_BYTES")
    code, _, err = run_cli(["--max-bytes", "lots", "analyze", model], capsys)
    assert code == 2 and "not a size" in err
    assert placeviz.limits.max_input_bytes == 2 << 30  # each run set its limit for itself only
    assert parse_size("2GiB") == 2 << 30 and parse_size("1.5 KB") == 1500 and parse_size("3M") == 3 << 20


def test_oserrors_on_input_paths_are_one_line(tmp_path, capsys):
    loop = tmp_path / "loop.pb"
    loop.symlink_to(loop)
    code, _, err = run_cli(["analyze", loop], capsys)
    assert code == 2 and one_line(err) == f"placeviz: error: {loop}: cannot read: Too many levels of symbolic links"
    not_dir = graph_file(tmp_path / "m.pb")
    code, _, err = run_cli(["analyze", f"{not_dir}/x.pb"], capsys)
    assert code == 2 and "no such file or directory" in one_line(err)


def _without_dac_override():
    """In the child before exec: drop CAP_DAC_OVERRIDE (1) and CAP_DAC_READ_SEARCH (2) from the
    bounding set (``prctl(PR_CAPBSET_DROP)``), so even root gets EACCES after exec, as a user would."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            os._exit(99)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux capabilities")
def test_permission_denied_is_one_line_not_an_internal_error(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    graph_file(secret / "m.pb")
    graph_file(tmp_path / "unreadable.pb").chmod(0o000)
    secret.chmod(0o000)  # no search permission: even a stat of secret/m.pb fails
    env = {k: v for k, v in os.environ.items() if k != NO_KERNELS_ENV}
    env["PYTHONPATH"] = str(REPO)
    try:
        for target in (tmp_path / "unreadable.pb", secret / "m.pb"):
            done = subprocess.run([sys.executable, "-m", "placeviz", "analyze", str(target)], capture_output=True,
                                  text=True, env=env, preexec_fn=_without_dac_override, timeout=120)
            if done.returncode == 99:
                pytest.skip("cannot drop capabilities here")
            assert done.returncode == 2, done.stderr
            assert one_line(done.stderr) == f"placeviz: error: {target}: cannot read: Permission denied"
    finally:
        secret.chmod(0o700)


# ---------------------------------------------------------------------------- tensor sizes
BIG = (1 << 63) - 1


def _no_negative_numbers(value) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        return value >= 0 or value == -1  # -1 only as TF's "unknown dim" in shapes
    if isinstance(value, dict):
        return all(map(_no_negative_numbers, value.values()))
    if isinstance(value, list):
        return all(map(_no_negative_numbers, value))
    return True


def test_an_overflowing_size_says_overflow_and_never_goes_negative(tmp_path, capsys, kernel_mode):
    # 4 bytes x (2**63-1)**3: far beyond int64 (and beyond a float, which crashed the text report).
    model = graph_file(tmp_path / "big.pb", dims=(BIG,) * 18)
    code, out, err = run_cli(["analyze", model, "--format", "json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert _no_negative_numbers(doc)
    [var] = doc["variables"]
    assert var["bytes"] is None and doc["variable_bytes"]["total"] == 0
    assert any(n.startswith("overflow: the size of variable(s) 'w'") for n in doc["notes"])
    traffic = doc["partition"]
    assert traffic["bytes_per_step"] == 0 and traffic["unknown_size_transfers"] == traffic["transfers"] >= 1
    assert any(n.startswith("overflow: 1 transfer(s) (w/read:0)") for n in traffic["notes"])
    code, out, err = run_cli(["analyze", model], capsys)
    assert code == 0 and "overflow" in out and "Traceback" not in err
    code, _, err = run_cli(["render", model, "--view", "overview", "-o", tmp_path / "o.dot"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["partition", model, "-o", tmp_path / "parts"], capsys)
    assert code == 0, err
    index = json.loads((tmp_path / "parts" / "index.json").read_text())
    assert _no_negative_numbers(index) and [t["bytes"] for t in index["transfers"]] == [None]
    code, out, err = run_cli(["analyze", model, "--format", "json", "--ps-tasks", "2", "--strategy", "greedy",
                              "--replace-devices"], capsys)
    assert code == 0, err
    assert "overflows int64" in json.loads(out)["placement"]["error"]


def test_a_size_at_the_int64_limit_is_exact(tmp_path, capsys, kernel_mode):
    model = graph_file(tmp_path / "edge.pb", dims=(BIG,), dtype=4)  # uint8: exactly 2**63 - 1 bytes
    code, out, err = run_cli(["analyze", model, "--format", "json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["variables"][0]["bytes"] == BIG and doc["partition"]["bytes_per_step"] == BIG
    assert not [n for n in doc["notes"] + doc["partition"]["notes"] if "overflow" in n]
    assert tensor_bytes(2, [BIG]) is None and tensor_bytes(1, [BIG]) == MAX_TENSOR_BYTES
    assert tensor_bytes(4, [3, None]) is None and tensor_bytes(4, []) == 4


# ------------------------------------------------------------------------------ builder help
def test_help_and_readme_say_a_builder_runs_code(capsys):
    code, out, _ = run_cli(["analyze", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    assert "runs that Python code with your permissions, as `python file.py` would" in text
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "runs that file's code with your permissions, as `python file.py` would" in readme


def test_a_builder_really_runs_its_file(tmp_path, capsys):
    marker = tmp_path / "ran"
    builder = tmp_path / "b.py"
    builder.write_text(textwrap.dedent(f"""
        from pathlib import Path
        Path({str(marker)!r}).write_text("the builder's code ran")
        def build():
            raise RuntimeError("no graph")
    """))
    code, _, err = run_cli(["analyze", f"{builder}:build"], capsys)
    assert code == 2 and "no graph" in err
    assert marker.read_text() == "the builder's code ran"  # what the help text warns about
