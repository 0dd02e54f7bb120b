"""placeviz as a user installs it: the wheel in a fresh virtualenv without TensorFlow, and the graph it ships.

``scripts/check_install.py`` does the install and prints its time and size; the slow test here runs
it. The shipped graph (``placeviz/data/misconfigured.pb``) is the ``misconfigured`` sample as
TensorFlow builds it; that TF's own placer rejects it as PV104 says is checked in
``tests/test_placement_fidelity.py::test_misconfigured_sample_fails_like_tf_and_soft_placement_agrees``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "check_install.py"
_spec = importlib.util.spec_from_file_location("check_install", SCRIPT)
check_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_install)
SHIPPED = REPO / "placeviz" / check_install.SHIPPED_GRAPH
REGENERATE = f"placeviz samples build misconfigured -o {SHIPPED.relative_to(REPO)} --ps-tasks 2"


@pytest.mark.tf
def test_shipped_graph_is_the_sample_tensorflow_builds():
    pytest.importorskip("tensorflow")
    from placeviz.sample_graphs import BuildOptions, build_meta_graph

    built = build_meta_graph("misconfigured", BuildOptions(ps_tasks=2)).graph_def
    shipped = type(built).FromString(SHIPPED.read_bytes())
    assert shipped == built, f"placeviz/{check_install.SHIPPED_GRAPH} is stale; regenerate it: {REGENERATE}"


def test_lint_finds_the_known_mistakes_in_the_shipped_graph(capsys):
    code, out, err = run_cli(["lint", SHIPPED, "--format", "json"], capsys)
    doc = json.loads(out)
    assert sorted({f["rule"] for f in doc["findings"]}) == sorted(check_install.EXPECTED_RULES)
    assert code == check_install.EXPECTED_EXIT and doc["errors"] == []
    assert [f["node"] for f in doc["findings"] if f["rule"] == "PV201"] == ["output_bias"]


def test_the_check_names_every_kernel_setup_compiles():
    from placeviz import native

    assert [m.replace("/", ".") for m in check_install.KERNEL_MODULES] == list(native.MODULES)


@pytest.mark.slow
def test_wheel_installs_and_lints_without_tensorflow(tmp_path, capsys):
    """Build, install into a fresh venv (dependencies from the package index, about 1-2 minutes) and lint."""
    pytest.importorskip("build", reason="the `build` package (dev extra) is not installed")
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the check builds from the files git lists")
    from placeviz import native

    proc = subprocess.run([sys.executable, str(SCRIPT), "--json", str(tmp_path / "install.json")],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    result = json.loads((tmp_path / "install.json").read_text())
    assert not [name for name in result["distributions"] if name.startswith("tensorflow")]
    assert result["lint_rules"] == sorted(check_install.EXPECTED_RULES) and result["lint_exit"] == 1
    if all(native.kernels(m) is not None for m in native.MODULES):  # this machine compiles them
        assert len(result["wheel_kernels"]) == len(native.MODULES) and result["missing_kernels"] == []
    with capsys.disabled():  # the numbers, in the CI log
        print("\n" + proc.stdout.strip())



def _complete(env_var: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, PYTHONPATH=str(REPO), _PLACEVIZ_COMPLETE=env_var, **env)
    return subprocess.run([sys.executable, "-m", "placeviz"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_scripts_as_the_readme_sources_them(shell, tmp_path):
    """README: `eval "$(_PLACEVIZ_COMPLETE=bash_source placeviz)"` (zsh_source, fish_source): click writes
    the shell's function, which calls placeviz back with ``<shell>_complete`` for each completion."""
    proc = _complete(f"{shell}_source", tmp_path)
    assert proc.returncode == 0 and f"_PLACEVIZ_COMPLETE={shell}_complete" in proc.stdout, proc.stderr


@pytest.mark.parametrize(("words", "expected"), [("placeviz li", "plain,lint"),
                                                  ("placeviz lint --format s", "plain,sarif")])
def test_bash_completion_completes_commands_and_choices(words, expected, tmp_path):
    proc = _complete("bash_complete", tmp_path, COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - 1))
    assert proc.returncode == 0 and proc.stdout.split() == [expected], proc.stdout + proc.stderr
