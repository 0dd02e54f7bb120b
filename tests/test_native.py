"""``PLACEVIZ_NO_KERNELS``: a whole process on the pure-Python paths, with the same results.

``benchmarks/run.py --no-kernels`` times the fallback this way, and a user can rule the C kernels
out when a result looks wrong. The switch must really turn every kernel off, and the commands
must print exactly what they print with the kernels on.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from placeviz.native import MODULES, NO_KERNELS_ENV, kernels
from tests.test_fuzz_load import realistic_graph


@pytest.mark.parametrize("value, off", [("1", True), ("yes", True), ("0", False), ("", False)])
def test_the_switch(monkeypatch, value, off):
    monkeypatch.setenv(NO_KERNELS_ENV, value)
    assert all((kernels(name) is None) == off for name in MODULES)


def test_the_modules_are_the_ones_setup_py_builds():
    tree = ast.parse((Path(__file__).parent.parent / "setup.py").read_text())
    built = next(ast.literal_eval(node.value) for node in tree.body
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "KERNELS")
    assert {f"placeviz.{name}" for name in MODULES} == set(built)


def _run(args: list[str], no_kernels: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != NO_KERNELS_ENV}
    if no_kernels:
        env[NO_KERNELS_ENV] = "1"
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


def test_every_module_runs_its_python_loops_when_switched_off():
    probe = ("import placeviz.graph, placeviz.io, placeviz.partition.base as b, placeviz.closure as cl, "
             "placeviz.partition.graph_partition as gp, placeviz.placement.setter as s, placeviz.placement.placer as p; "
             "print([m is None for m in (placeviz.graph._wire, placeviz.io._wire, b._kernels, cl._kernels, "
             "gp._kernels, s._kernels, p._kernels)])")
    assert _run(["-c", probe], no_kernels=True).stdout.strip() == str([True] * 7)
    assert _run(["-c", probe], no_kernels=False).stdout.strip() == str([False] * 7)


@pytest.mark.parametrize("command", [
    ["analyze", "--ps-tasks", "2", "--format", "json"],
    ["place", "--ps-tasks", "3", "--stage", "placed"],
    ["analyze", "--ps-tasks", "2", "--format", "json", "--explain", "w1/read", "--explain", "h2"],
])
def test_commands_print_the_same_without_the_kernels(tmp_path, command):
    graph = realistic_graph()
    for node in graph.node:
        node.device = ""  # unplaced: the setter runs too
        if node.op not in ("VariableV2", "Const", "Placeholder", "NoOp"):
            node.attr["T"].type = 1  # the placer's op facts need it
        if node.op == "Merge":
            node.attr["N"].i = 2
        if node.op == "Enter":
            node.attr["frame_name"].s = b"loop"
    model = tmp_path / "model.pb"
    model.write_bytes(graph.SerializeToString())
    placed = tmp_path / "placed.pbtxt"
    outputs = []
    for no_kernels in (False, True):
        args = ["-m", "placeviz", command[0], str(model), *command[1:]]
        if command[0] == "place":
            args += ["-o", str(placed)]
        done = _run(args, no_kernels)
        assert done.returncode == 0, done.stderr
        outputs.append((done.stdout, placed.read_text() if placed.exists() else None))
        placed.unlink(missing_ok=True)
    assert outputs[0] == outputs[1]
    assert outputs[0][0] or outputs[0][1]  # something was compared


def test_help_names_the_switch(capsys):
    from conftest import run_cli

    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0 and NO_KERNELS_ENV in out
