"""Shared fixtures: TF-built models (made in a subprocess) and a CLI runner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# The suite runs both the C kernels and the Python paths and compares them itself; a
# PLACEVIZ_NO_KERNELS left in the environment would silently drop one side (placeviz.native).
os.environ.pop("PLACEVIZ_NO_KERNELS", None)

from placeviz.cli import main  # noqa: E402 - after the environment is settled

TESTS = Path(__file__).parent


@pytest.fixture(params=["c", "python"])
def kernel_mode(request, monkeypatch) -> str:
    """Run the test with the C kernels (skipped where they are not built), then with every module on
    its Python loops, as ``PLACEVIZ_NO_KERNELS=1`` gives (``placeviz/native.py``)."""
    import placeviz.closure
    import placeviz.graph
    import placeviz.io
    import placeviz.nodewire
    from placeviz.partition import base, graph_partition
    from placeviz.placement import placer, setter
    from placeviz.render import collapse

    slots = [(placeviz.graph, "_wire"), (placeviz.io, "_wire"), (placeviz.nodewire, "_wire"), (base, "_kernels"),
             (placeviz.closure, "_kernels"), (graph_partition, "_kernels"), (setter, "_kernels"), (placer, "_kernels"),
             (collapse, "_kernels")]
    if request.param == "python":
        for module, name in slots:
            monkeypatch.setattr(module, name, None)
    elif any(getattr(module, name) is None for module, name in slots):
        pytest.skip("the C kernels are not built")
    return request.param


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """Run ``placeviz ARGS`` in-process; return (exit code, stdout, stderr)."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    out, err = capsys.readouterr()
    return code, out, err


_SETTER_PAIR = """\
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()
for placed in (False, True):
    g = tf.Graph()
    with g.as_default():
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=PS_TASKS) if placed else None
        with tf.compat.v1.device(setter):
BODY
AFTER
    with open(os.path.join(sys.argv[1], ("placed" if placed else "unplaced") + ".pb"), "wb") as f:
        f.write(g.as_graph_def().SerializeToString())
"""


def build_setter_pair(directory: Path, body: str, ps_tasks: int, after: str = "") -> Path:
    """Build a model twice with TF in a subprocess: ``unplaced.pb`` (``body`` bare) and
    ``placed.pb`` (``body`` under ``tf.device(replica_device_setter(ps_tasks))``), in
    ``directory``. ``after``: code run after the setter's block, still in the graph (a Saver).
    The setter tests replay the unplaced build and compare with TF's placed one node for node."""
    pytest.importorskip("tensorflow")
    script = (_SETTER_PAIR.replace("PS_TASKS", str(ps_tasks))
              .replace("BODY", textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 12))
              .replace("AFTER", textwrap.indent(textwrap.dedent(after).strip("\n"), " " * 8)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-c", script, str(directory)], check=True, env=env, capture_output=True,
                   timeout=300)
    return directory


SIGNALS_USERS_SEND = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


def default_signals() -> None:
    """``preexec_fn`` of a child whose signal handling a test checks: the dispositions a command
    started from a terminal has, even when the suite runs where some are ignored (a job started
    with ``nohup`` or ``&`` from a script ignores SIGINT and SIGHUP, and its children inherit it)."""
    for sig in SIGNALS_USERS_SEND:
        signal.signal(sig, signal.SIG_DFL)


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler (KeyboardInterrupt) in this process for one test, as an
    interactive start installs it; Python leaves SIGINT ignored when it started ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def pb_varint(v: int) -> bytes:
    """A protobuf varint, written here (not by placeviz's encoder) for hand-made wire bytes."""
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def pb_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2) of hand-made wire bytes."""
    return pb_varint(number << 3 | 2) + pb_varint(len(payload)) + payload


def lint_workdir(tmp_path: Path, monkeypatch, nodes, rules: dict[str, str], rules_dir: str = "myrules") -> Path:
    """``tmp_path`` made the cwd, holding ``model.pb`` (``nodes``: (name, op, inputs) triples) and a
    user rules directory ``rules_dir`` (file name -> module text)."""
    from placeviz.protos import GraphDef

    monkeypatch.chdir(tmp_path)
    g = GraphDef()
    for name, op, inputs in nodes:
        g.node.add(name=name, op=op, input=inputs)
    (tmp_path / "model.pb").write_bytes(g.SerializeToString())
    (tmp_path / rules_dir).mkdir()
    for name, text in rules.items():
        (tmp_path / rules_dir / name).write_text(text)
    return tmp_path


def lint_cli(capsys, *args, fmt: str = "json", rules_dir: str = "myrules"):
    """``placeviz lint --format FMT --rules RULES_DIR ARGS`` -> (exit code, parsed JSON or text, stderr)."""
    code, out, err = run_cli(["lint", "--format", fmt, "--rules", rules_dir, *map(str, args)], capsys)
    return code, (json.loads(out) if fmt in ("json", "sarif") and out.strip() else out), err


@pytest.fixture(scope="session")
def tf_models(tmp_path_factory) -> Path:
    """Directory of models built by TensorFlow itself, plus ``truth.json`` (TF's own view)."""
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("tf_models")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, str(TESTS / "make_tf_fixtures.py"), str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def tf_truth(tf_models) -> dict:
    return json.loads((tf_models / "truth.json").read_text())
