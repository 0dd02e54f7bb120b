"""The static core must never import TensorFlow (startup cost: seconds and ~500 MB)."""

from __future__ import annotations

import json
import subprocess
import sys

from placeviz.protos import GraphDef

SCRIPT = """
import sys
from placeviz.cli import main
try:
    main(["analyze", sys.argv[1], "--format", "json"])
except SystemExit as e:
    assert e.code == 0, e.code
# tensorboard neither: it is no dependency of the core any more (placeviz.protos ships TF's descriptors)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tensorboard"))
assert not leaked, leaked
print("NO_TF_OK", file=sys.stderr)
"""


def test_analyze_a_pb_without_importing_tensorflow(tmp_path):
    g = GraphDef()
    g.node.add(name="c", op="Const")
    g.node.add(name="i", op="Identity", input=["c"])
    path = tmp_path / "g.pb"
    path.write_bytes(g.SerializeToString())
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "NO_TF_OK" in proc.stderr and json.loads(proc.stdout)["graph"]["nodes"] == 2


def test_core_modules_do_not_import_tensorflow():
    modules = ["placeviz.cli", "placeviz.io", "placeviz.graph", "placeviz.analysis", "placeviz.protos",
               "placeviz.devices", "placeviz.commands.analyze", "placeviz.sample_graphs",
               "placeviz.sample_graphs.options"]
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "assert 'tensorflow' not in sys.modules and 'tensorboard' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_imports_go_one_way_cli_commands_core():
    """``cli → commands → core`` (docs/architecture.md): nothing outside ``placeviz/commands/`` and
    ``cli.py`` imports a command module, at the top of a file or inside a function."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "placeviz"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("commands/") or rel in ("cli.py", "__main__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{rel}:{node.lineno} {n}" for n in names
                          if n == "placeviz.commands" or n.startswith("placeviz.commands.")]
    assert offenders == []
