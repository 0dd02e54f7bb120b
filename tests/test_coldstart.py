"""Cold start: what a short command pays before it does any work (issue 18: a cold ``lint`` of a
small ``.pb``). The timings are in ``benchmarks/README.md``; here, what they rest on."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from placeviz import ops
from placeviz.protos import GraphDef

REPO = Path(__file__).resolve().parent.parent

# Imported by placeviz only when a run needs them (a table to draw, a config file, a baseline, a
# SARIF report, TensorFlow's import...): a clean `lint` of a small .pb must not load any.
DEFERRED = ("rich", "networkx", "graphviz", "numpy.ma", "logging", "tempfile", "tomllib", "hashlib", "secrets",
            "placeviz.lint.sarif", "placeviz.render", "placeviz.verify")

SCRIPT = """
import sys
from placeviz.cli import main
try:
    main([*sys.argv[3:], sys.argv[1]])
except SystemExit as e:
    assert e.code in (0, 1), e.code
print(repr(sorted(m for m in sys.modules if m in sys.argv[2].split(","))))
"""


@pytest.mark.parametrize("command", [["lint"], ["analyze", "--format", "json"], ["partition", "-o", "parts"]])
def test_a_cold_lint_imports_only_what_it_uses(tmp_path, command):
    """... and so do ``analyze --format json`` (rich draws only the text report) and ``partition -o
    DIR`` (its constant copied to two workers, as TF's ReplicateConstantsPass does)."""
    g = GraphDef()
    c = g.node.add(name="c", op="Const", device="/job:ps/task:0")
    c.attr["dtype"].type = 1  # DT_FLOAT
    c.attr["value"].tensor.dtype = 1
    c.attr["value"].tensor.float_val.append(1.0)
    for task in (0, 1):
        i = g.node.add(name=f"i{task}", op="Identity", input=["c"], device=f"/job:worker/task:{task}")
        i.attr["T"].type = 1
    path = tmp_path / "g.pb"
    path.write_bytes(g.SerializeToString())
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # cwd: a directory without pyproject.toml, as a model's directory in CI usually is
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(path), ",".join(DEFERRED), *command], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout


def _shipped_json() -> bytes:
    return gzip.decompress(ops.default_table_path().read_bytes())


def test_the_lazy_op_table_is_the_whole_parse():
    raw = _shipped_json()
    lazy, full = ops._parse_lazily(raw, "shipped"), json.loads(raw)
    assert lazy is not None, "the shipped table is no longer laid out as ops_generate writes it"
    assert isinstance(lazy["ops"], ops._LazyOps)
    assert list(lazy["ops"]) == list(full["ops"]) and len(lazy["ops"]) == len(full["ops"])
    assert {k: v for k, v in lazy.items() if k != "ops"} == {k: v for k, v in full.items() if k != "ops"}
    for name, value in full["ops"].items():
        assert lazy["ops"][name] == value, name
    assert "NoSuchOp" not in lazy["ops"] and lazy["ops"].get("NoSuchOp") is None


def test_the_lazy_op_table_gives_the_same_facts(tmp_path):
    table = ops.load_op_table()
    whole = ops.OpTable(json.loads(_shipped_json()), "whole")
    assert isinstance(table._raw, ops._LazyOps)
    assert table.op_types() == whole.op_types() and len(table) == len(whole)
    for op in ("Const", "VariableV2", "VarHandleOp", "MatMul", "ApplyGradientDescent", "_Send", "Enter"):
        assert table.get(op) == whole.get(op), op
        assert table.op_def(op) == whole.op_def(op), op
        assert table.is_stateful(op) == whole.is_stateful(op), op


def _small_table(ops_value: dict) -> dict:
    full = json.loads(_shipped_json())
    return {**full, "ops": ops_value}


def _write(path: Path, table: dict, **dumps) -> Path:
    path.write_bytes(gzip.compress(json.dumps(table, **dumps).encode("ascii")))
    return path


COMPACT = {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": True}


def test_a_table_laid_out_otherwise_is_parsed_whole(tmp_path):
    full = json.loads(_shipped_json())
    some = {k: full["ops"][k] for k in ("Const", "Identity", "NoOp")}
    # Indented: not the generator's layout, so no split is tried.
    indented = _write(tmp_path / "indented.json.gz", _small_table(some), indent=1, sort_keys=True)
    assert ops._parse_lazily(gzip.decompress(indented.read_bytes()), "x") is None
    assert ops.load_op_table(indented).op_types() == ["Const", "Identity", "NoOp"]
    # A string that looks like a boundary is escaped in JSON (\"), so it splits nothing...
    tricky = json.loads(json.dumps(some))
    tricky["Identity"]["kernels"]["CPU"][0]["label"] = '},"Fake":{'
    path = _write(tmp_path / "tricky.json.gz", _small_table(tricky), **COMPACT)
    assert isinstance(ops._parse_lazily(gzip.decompress(path.read_bytes()), "x")["ops"], ops._LazyOps)
    table = ops.load_op_table(path)
    assert table.op_types() == ["Const", "Identity", "NoOp"] and "Fake" not in table
    assert table.get("Identity").kernels["CPU"][0].label == '},"Fake":{'
    # ...and a lone brace in a string unbalances the split's check: the table is parsed whole.
    braced = json.loads(json.dumps(some))
    braced["Identity"]["kernels"]["CPU"][0]["label"] = "{"
    path = _write(tmp_path / "braced.json.gz", _small_table(braced), **COMPACT)
    assert ops._parse_lazily(gzip.decompress(path.read_bytes()), "x") is None
    table = ops.load_op_table(path)
    assert table.op_types() == ["Const", "Identity", "NoOp"] and table.get("Identity").kernels["CPU"][0].label == "{"


def test_a_corrupt_op_is_an_op_facts_error_when_read(tmp_path):
    full = json.loads(_shipped_json())
    text = json.dumps(_small_table({k: full["ops"][k] for k in ("Const", "Identity")}), **COMPACT)
    text = text.replace('"Identity":{"attrs":', '"Identity":{"attrs"::', 1)
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(gzip.compress(text.encode("ascii")))
    table = ops.load_op_table(path)
    assert table.get("Const") is not None
    with pytest.raises(ops.OpFactsError, match="corrupt: op Identity"):
        table.get("Identity")


def _program(args: list[str], cwd: Path, prelude: str = "") -> subprocess.CompletedProcess:
    """``placeviz ARGS`` as the console script runs it (:func:`placeviz.cli.run`), stdout a pipe."""
    code = f"import sys\n{prelude}\nfrom placeviz.cli import run\nsys.argv = ['placeviz', *sys.argv[1:]]\nrun()\n"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)


def test_the_program_ends_without_teardown_yet_as_a_normal_exit_would(tmp_path):
    """``run`` skips the interpreter's teardown: the exit status, every byte of output (more than
    a pipe holds) and the atexit handlers are still what a normal exit gives."""
    whole = _program(["rules", "--format", "json"], tmp_path)
    # More than Python's stdout buffer (io.DEFAULT_BUFFER_SIZE): its tail is still buffered at the end.
    assert whole.returncode == 0 and len(whole.stdout) > 2 * io.DEFAULT_BUFFER_SIZE
    assert json.loads(whole.stdout)["schema"] == "placeviz.rules/1"
    bad = _program(["lint", "missing.pb"], tmp_path)
    assert bad.returncode == 2 and "missing.pb" in bad.stderr and "Traceback" not in bad.stderr
    handler = "import atexit\natexit.register(lambda: print('atexit ran', file=sys.stderr))"
    usage = _program(["lint", "--no-such-option"], tmp_path, prelude=handler)
    assert usage.returncode == 2 and usage.stderr.rstrip().endswith("atexit ran")


def test_a_program_with_a_thread_still_running_exits_normally(tmp_path):
    """A thread that is not a daemon is waited for, as a normal exit waits for it: this one waits
    for the main thread to end, then prints (a normal exit ends the main thread first, then joins
    the other threads; ``os._exit`` would end the process with the thread still waiting)."""
    prelude = ("import threading\n"
               "threading.Thread(target=lambda: (threading.main_thread().join(), print('thread done', flush=True)))"
               ".start()")
    proc = _program(["rules", "--format", "json"], tmp_path, prelude=prelude)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("thread done")
