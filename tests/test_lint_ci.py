"""placeviz lint in a user's CI: comma lists of selectors, a configured baseline not written yet,
findings at the Python line that created the op (builders' tracebacks, TF's GraphDebugInfo), and
the pre-commit hook's file filter (graph files only; SavedModel side files and label maps skipped).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placeviz.lint.selection import split_selectors
from placeviz.protos import GraphDef
from tests.conftest import lint_cli, lint_workdir, run_cli

SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"

FLAG_IDENTITY = '''
from placeviz.lint import Rule
RULE = Rule(id="XY101", name="flag-identity", severity="error", summary="Flags Identity nodes.")
def check(ctx):
    for i in ctx.nodes_by_op("Identity"):
        yield ctx.finding(RULE, i, f"{ctx.graph.names[i]} is an Identity")
'''
FLAG_NOOP = '''
from placeviz.lint import Rule
RULE = Rule(id="XY102", name="flag-noop", severity="warning", summary="Flags NoOps.")
def check(ctx):
    for i in ctx.nodes_by_op("NoOp"):
        yield ctx.finding(RULE, i, "a NoOp")
'''


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """A temp cwd with model.pb (c: Const, i: Identity, n: NoOp) and a rules dir (XY101, XY102)."""
    return lint_workdir(tmp_path, monkeypatch, [("c", "Const", []), ("i", "Identity", ["c"]), ("n", "NoOp", ["^i"])],
                        {"flag_identity.py": FLAG_IDENTITY, "flag_noop.py": FLAG_NOOP})


lint = lint_cli


def rule_ids(doc) -> list[str]:
    return sorted({f["rule"] for f in doc["findings"]})


# ------------------------------------------------------------------------ comma lists
def test_split_selectors():
    assert split_selectors(["PV201,PV104", " PV3 ", "a-name, ,XY1,"]) == ["PV201", "PV104", "PV3", "a-name", "XY1"]


def test_comma_lists_on_the_command_line_and_in_the_config(work, capsys):
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY101,XY102")
    assert rule_ids(doc) == ["XY101", "XY102"] and code == 1
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY101", "--extend-select", "flag-noop,PV0")
    assert rule_ids(doc) == ["XY101", "XY102"] and "PV001" in doc["rules"]
    code, doc, _ = lint(capsys, "model.pb", "--select", "ALL", "--ignore", "XY101,PV")
    assert doc["rules"] == ["XY102"] and code == 0
    code, _, err = lint(capsys, "model.pb", "--select", "XY101,XY777", fmt="text")
    assert code == 2 and "--select XY777: no rule" in err  # each part is checked on its own
    (work / "placeviz.toml").write_text('[lint]\nselect = "XY102, XY101"\nignore = ["PV0,PV1"]\n')
    code, doc, _ = lint(capsys, "model.pb")
    assert doc["rules"] == ["XY101", "XY102"]


# ------------------------------------------------------------- a baseline not written yet
def test_a_configured_baseline_that_does_not_exist_yet_is_a_note(work, capsys):
    (work / "placeviz.toml").write_text('[lint]\nselect = ["XY1"]\nbaseline = ".placeviz-baseline.json"\n')
    code, doc, err = lint(capsys, "model.pb")
    assert code == 1 and rule_ids(doc) == ["XY101", "XY102"]  # exit by the findings, not 2
    assert ("the config's baseline .placeviz-baseline.json does not exist yet" in err
            and "--write-baseline .placeviz-baseline.json" in err)
    code, _, err = lint(capsys, "model.pb", "--write-baseline", ".placeviz-baseline.json")
    assert code == 0 and (work / ".placeviz-baseline.json").is_file()
    code, doc, err = lint(capsys, "model.pb")
    assert code == 0 and doc["findings"] == [] and doc["summary"]["baselined"] == 2 and "does not exist" not in err
    code, _, err = lint(capsys, "model.pb", "--baseline", "typo.json", fmt="text")
    assert code == 2 and "typo.json" in err  # named on the command line: still an error


# ------------------------------------------------------------- findings at the source line
PROGRAM = '''\
import tensorflow as tf
import tf_slim as slim

tf1 = tf.compat.v1


def dense(x, n):
    w = tf1.get_variable("dense_w", [4, n])  # MARK helper
    return tf.matmul(x, w)


def build():
    g = tf.Graph()
    with g.as_default():
        bias = tf1.get_variable("output_bias", [3])  # MARK planted
        with tf1.device(tf1.train.replica_device_setter(ps_tasks=2)):
            x = tf1.placeholder(tf.float32, [None, 4], name="x")
            h = slim.fully_connected(x, 4, scope="fc")  # MARK slim
            y = tf.concat([dense(h, 2), h[:, :1]], 1) + bias
            tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(y))
    return g


if __name__ == "__main__":
    import os
    import sys

    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import error_interpolation

    out = sys.argv[1]
    g = build()
    with g.as_default():
        # TF writes prog.debug next to prog.meta (meta_graph.export_scoped_meta_graph).
        tf1.train.export_meta_graph(os.path.join(out, "prog.meta"), graph=g, save_debug_info=True)
        tf1.train.export_meta_graph(os.path.join(out, "text.meta"), graph=g, save_debug_info=True, as_text=True)
        meta = tf1.train.export_meta_graph(os.path.join(out, "bare.meta"), graph=g)
    # A SavedModel (TF's proto, the graph tagged "train") with its debug/saved_model_debug_info.pb,
    # made by the function TF's savers use.
    meta.meta_info_def.tags.append("train")
    os.makedirs(os.path.join(out, "sm", "debug"))
    with open(os.path.join(out, "sm", "saved_model.pb"), "wb") as f:
        f.write(saved_model_pb2.SavedModel(saved_model_schema_version=1, meta_graphs=[meta]).SerializeToString())
    info = error_interpolation.create_graph_debug_info_def([("", op) for op in g.get_operations()])
    with open(os.path.join(out, "sm", "debug", "saved_model_debug_info.pb"), "wb") as f:
        f.write(info.SerializeToString())
'''


def marked_line(text: str, mark: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.endswith(f"# MARK {mark}"))


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    """prog.py (a builder with a planted PV201) and what TF itself saved from it: prog.meta with
    prog.debug, text.meta with text.debug (as_text), bare.meta without, sm/ (a SavedModel) with
    debug/saved_model_debug_info.pb."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf_slim")
    import os
    import subprocess
    import sys

    d = tmp_path_factory.mktemp("program")
    (d / "prog.py").write_text(PROGRAM)
    proc = subprocess.run([sys.executable, "prog.py", str(d)], cwd=d, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (d / "prog.debug").is_file() and (d / "sm" / "saved_model.pb").is_file()
    return d


def pv201(doc) -> dict:
    found = [f for f in doc["findings"] if f["rule"] == "PV201"]
    assert [f["node"] for f in found] == ["output_bias"], doc["findings"]
    return found[0]


@pytest.mark.tf
@pytest.mark.parametrize("model", ["prog.py:build", "prog.meta", "text.meta", "sm"])
def test_findings_point_at_the_line_that_created_the_op(program, capsys, monkeypatch, model):
    monkeypatch.chdir(program)
    planted = marked_line(PROGRAM, "planted")
    code, out, _ = run_cli(["lint", model, "--select", "PV201", "--format", "json"], capsys)
    assert code == 1
    assert pv201(json.loads(out))["source"] == {"file": "prog.py", "line": planted, "function": "build"}
    code, out, _ = run_cli(["lint", model, "--select", "PV201", "--format", "text"], capsys)
    assert out.startswith(f"prog.py:{planted}: {model}: output_bias: PV201 [error] ")
    code, out, _ = run_cli(["lint", model, "--select", "PV201", "--format", "github"], capsys)
    assert out.startswith(f"::error file=prog.py,line={planted},title=PV201 variable-on-worker::{model}: output_bias")


@pytest.mark.tf
def test_library_frames_are_skipped_and_a_helper_is_the_users_line(program, monkeypatch):
    from placeviz.io import load

    monkeypatch.chdir(program)
    slim_line, helper_line = f"prog.py:{marked_line(PROGRAM, 'slim')}", f"prog.py:{marked_line(PROGRAM, 'helper')}"
    built, saved = load("prog.py:build"), load("prog.meta")
    assert str(built.sources["fc/weights"]) == slim_line  # the call of slim, not a line inside tf_slim
    assert str(built.sources["dense_w"]) == str(saved.sources["dense_w"]) == helper_line  # the helper's own line
    # TF saves at most 10 frames outwards from the innermost frame outside TF itself, which for a
    # slim variable is inside tf_slim: the user's line may be cut off, and then none is invented.
    assert str(saved.sources.get("fc/weights", slim_line)) == slim_line
    for model in (built, saved):
        assert not any("/tf_slim/" in line.file or "/tensorflow/" in line.file for line in model.sources.values())
    assert load("bare.meta").sources == {}  # no GraphDebugInfo saved: nothing invented


@pytest.mark.tf
def test_sarif_result_is_at_the_builders_line_and_valid(program, capsys, monkeypatch):
    jsonschema = pytest.importorskip("jsonschema")
    monkeypatch.chdir(program)
    code, out, _ = run_cli(["lint", "prog.py:build", "--select", "PV201", "--format", "sarif"], capsys)
    sarif = json.loads(out)
    validator = jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text()))
    errors = sorted(validator.iter_errors(sarif), key=str)
    assert not errors, errors[0]
    (result,) = sarif["runs"][0]["results"]
    first = result["locations"][0]
    assert first["physicalLocation"] == {"artifactLocation": {"uri": "prog.py"},
                                         "region": {"startLine": marked_line(PROGRAM, "planted")}}
    assert first["logicalLocations"][0]["fullyQualifiedName"] == "output_bias"
    (related,) = result["relatedLocations"]
    assert related["physicalLocation"]["artifactLocation"]["uri"] == "prog.py"  # the builder's file, not "prog.py:build"
    assert related["message"]["text"] == "node output_bias in the model prog.py:build"
    result["relatedLocations"][0]["id"] = "one"  # the schema check has teeth
    assert list(validator.iter_errors(sarif))


def test_debug_info_in_either_layout(tmp_path):
    """GraphDebugInfo as TF >= 2.15 writes it (frames by id) and as older TFs did (frames inline)."""
    from placeviz.protos import GraphDebugInfo
    from placeviz.sources import from_debug_info, is_library_file

    lib = "/usr/lib/python3/dist-packages/tensorflow/python/ops/variables.py"
    new = GraphDebugInfo(files=["/src/train.py", lib])
    new.frames_by_id[7].CopyFrom(GraphDebugInfo.FileLineCol(file_index=0, line=12, func="main"))
    new.frames_by_id[8].CopyFrom(GraphDebugInfo.FileLineCol(file_index=1, line=99, func="var"))
    new.traces_by_id[1].frame_id.extend([7, 8])
    new.name_to_trace_id["w@"] = 1
    new.name_to_trace_id["w@some_function"] = 1  # a function's node: not the top-level graph's
    assert {k: (v.file, v.line) for k, v in from_debug_info(new).items()} == {"w": ("/src/train.py", 12)}
    old = GraphDebugInfo(files=["/src/train.py", lib])
    old.traces["v@"].file_line_cols.add(file_index=0, line=3, func="main")
    old.traces["v@"].file_line_cols.add(file_index=1, line=5, func="var")
    old.traces["lib_only@"].file_line_cols.add(file_index=1, line=5, func="var")
    assert {k: (v.file, v.line) for k, v in from_debug_info(old).items()} == {"v": ("/src/train.py", 3)}
    assert is_library_file("<frozen runpy>") and is_library_file("tensorflow/python/ops/array_ops.py")
    assert not is_library_file("/home/me/tensorflow-models/train.py")


# ------------------------------------------------------------ the pre-commit hook's files
LABEL_MAP = 'item {\n  id: 1\n  name: "cat"\n}\nitem {\n  id: 2\n  name: "dog"\n}\n'
PIPELINE_CONFIG = '# SSD with MobileNet\nmodel {\n  ssd {\n    num_classes: 2\n  }\n}\n'
SAVE_MODULE = '''
import sys
import tensorflow as tf
from tensorflow.python.saved_model import fingerprinting_utils

tf1 = tf.compat.v1
export_dir = sys.argv[1]
g = tf.Graph()
with g.as_default():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    w = tf1.get_variable("w", [2, 1])
    loss = tf.reduce_sum(tf.matmul(x, w))
    train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    tf1.add_to_collection(tf1.GraphKeys.TRAIN_OP, train_op)
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        builder = tf1.saved_model.Builder(export_dir)
        builder.add_meta_graph_and_variables(sess, ["train"])
        builder.save()
fingerprinting_utils.write_fingerprint(export_dir)  # fingerprint.pb, as tf.saved_model.save writes it
'''


@pytest.fixture(scope="module")
def user_repo(tmp_path_factory) -> Path:
    """A user's repository: a TF1 training SavedModel written by TF (with the fingerprint.pb TF
    writes for it), Keras metadata, a label map, a pipeline config and a broken training graph (a
    dangling input: PV003)."""
    pytest.importorskip("tensorflow")
    import os
    import subprocess
    import sys

    repo = tmp_path_factory.mktemp("user_repo")
    models = repo / "models"
    models.mkdir()
    (repo / "save.py").write_text(SAVE_MODULE)
    proc = subprocess.run([sys.executable, "save.py", str(models / "exported")], cwd=repo, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (models / "exported" / "fingerprint.pb").is_file()
    (models / "exported" / "keras_metadata.pb").write_bytes(b"\n\x02{}")
    (repo / "label_map.pbtxt").write_text(LABEL_MAP)
    (repo / "pipeline.pbtxt").write_text(PIPELINE_CONFIG)
    g = GraphDef()
    g.node.add(name="x", op="Placeholder")
    g.node.add(name="y", op="Identity", input=["gone"])
    (models / "train.pb").write_bytes(g.SerializeToString())
    return repo


HOOK_FILES = ["label_map.pbtxt", "models/exported/fingerprint.pb", "models/exported/keras_metadata.pb",
              "models/exported/saved_model.pb", "models/train.pb", "pipeline.pbtxt"]


@pytest.mark.tf
def test_only_graphs_lints_the_graphs_and_notes_the_rest(user_repo, capsys, monkeypatch):
    monkeypatch.chdir(user_repo)
    code, out, err = run_cli(["lint", "--only-graphs", "--format", "json", *HOOK_FILES], capsys)
    doc = json.loads(out)
    assert doc["models"] == ["models/exported", "models/train.pb"] and doc["errors"] == []
    assert {(f["model"], f["rule"]) for f in doc["findings"]} == {("models/train.pb", "PV003")} and code == 1
    notes = [line for line in err.splitlines() if "(--only-graphs)" in line]
    assert sorted(n.split(":")[1].split()[-1] for n in notes) == [
        "label_map.pbtxt", "models/exported/fingerprint.pb", "models/exported/keras_metadata.pb", "pipeline.pbtxt"]
    assert all(n.count("\n") == 0 and n.startswith("placeviz: skipped ") for n in notes)
    # Staged twice (the directory and its saved_model.pb): one model.
    code, out, _ = run_cli(["lint", "--only-graphs", "--format", "json", "models/exported",
                            "models/exported/saved_model.pb"], capsys)
    assert json.loads(out)["models"] == ["models/exported"] and code == 0
    # Without --only-graphs, a label map is what it always was: not a graph, exit 2, one line.
    code, _, err = run_cli(["lint", "label_map.pbtxt"], capsys)
    assert code == 2 and "label_map.pbtxt" in err and "Traceback" not in err


def test_text_proto_kind_reads_the_first_field():
    from placeviz.io import text_proto_kind

    assert text_proto_kind(LABEL_MAP) is None and text_proto_kind(PIPELINE_CONFIG) is None
    assert text_proto_kind("# a graph\n\nnode {\n name: 'a'\n op: 'NoOp'\n}\n") == "graphdef"
    assert text_proto_kind("meta_info_def {\n}\ngraph_def {\n}\n") == "metagraph"
    assert text_proto_kind("saved_model_schema_version: 1\n") == "savedmodel"
    assert text_proto_kind("") is None


@pytest.mark.slow
@pytest.mark.tf
def test_pre_commit_try_repo_fails_only_on_the_training_graph(user_repo, tmp_path):
    """The hook as a user runs it: `pre-commit try-repo` installs this repository into its own
    virtualenv (network or a package index needed; about a minute) and runs it on every file.
    ``pre-commit`` is in the dev extra, so ``make test`` runs this in CI."""
    import os
    import shutil
    import subprocess

    pre_commit = shutil.which("pre-commit") or str(Path(os.sys.executable).with_name("pre-commit"))
    if not Path(pre_commit).is_file():
        pytest.skip("pre-commit is not installed")
    repo = tmp_path / "repo"
    shutil.copytree(user_repo, repo, ignore=shutil.ignore_patterns("save.py"))
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "models"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "cache"))
    proc = subprocess.run([pre_commit, "try-repo", str(Path(__file__).resolve().parent.parent), "placeviz-lint",
                           "--all-files", "--verbose"], cwd=repo, capture_output=True, text=True, env=env,
                          timeout=1200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "- exit code: 1" in out and "models/train.pb: y: PV003 [error]" in out
    assert "1 finding (1 error, 0 warning, 0 info) in 2 models" in out  # the SavedModel: one model, clean
    assert not [line for line in out.splitlines() if line.startswith(("error: ", "placeviz: error"))]
    for skipped in ("label_map.pbtxt", "pipeline.pbtxt", "models/exported/fingerprint.pb",
                    "models/exported/keras_metadata.pb"):
        assert f"placeviz: skipped {skipped}: " in out


# ------------------------------------------------------------------ TensorFlow kept quiet
CHATTY = '''\
import tensorflow as tf

tf1 = tf.compat.v1


def build():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2], name="x")
        with tf1.colocate_with(x):  # TF logs "Colocations handled automatically by placer."
            tf.identity(x, name="y")
    return g
'''


@pytest.mark.tf
def test_tensorflow_logging_is_silenced_unless_debug(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "chatty.py").write_text(CHATTY)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)  # this checkout's placeviz

    def stderr(*args) -> str:
        proc = subprocess.run([sys.executable, "-m", "placeviz", *args, "lint", "chatty.py:build", "--select",
                               "PV0"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stderr

    loud = stderr("--debug")
    assert "Colocations handled automatically by placer" in loud  # what TF says here, shown with --debug
    quiet = stderr()
    assert quiet == "", quiet  # nothing but placeviz's own lines (none on a clean run)


def test_a_hostile_file_name_in_debug_info_stays_one_line(work, capsys):
    """A GraphDebugInfo is untrusted input like the model: its file names reach every format."""
    from placeviz.protos import GraphDebugInfo, MetaGraphDef

    meta = MetaGraphDef()
    meta.meta_info_def.tags.append("train")
    meta.graph_def.ParseFromString((work / "model.pb").read_bytes())
    (work / "model.meta").write_bytes(meta.SerializeToString())
    info = GraphDebugInfo(files=["evil\n::error file=x::pwned\x1b]0;title\x07.py"])
    info.traces["i@"].file_line_cols.add(file_index=0, line=7, func="build")
    (work / "model.debug").write_bytes(info.SerializeToString())
    code, out, _ = lint(capsys, "model.meta", "--select", "XY101", fmt="github")
    first = out.splitlines()[0]
    assert first.startswith("::error file=evil%0A%3A%3Aerror file=x%3A%3Apwned") and ",line=7," in first
    assert sum(line.startswith("::") for line in out.splitlines()) == 1
    code, out, _ = lint(capsys, "model.meta", "--select", "XY101", fmt="text")
    assert out.splitlines()[0].startswith("evil\\n::error file=x::pwned\\x1b]0;title\\x07.py:7: model.meta: i: XY101")
    code, doc, _ = lint(capsys, "model.meta", "--select", "XY101", fmt="sarif")
    (result,) = doc["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": 7}
    assert "\n" not in result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]


@pytest.mark.tf
def test_processes_placeviz_starts_inherit_the_quiet(tmp_path):
    """verify's coordinator and task servers import TF themselves: quiet when their parent was."""
    import os
    import subprocess
    import sys

    from placeviz import tflog

    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", tflog.INHERITED)}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    child = ("from placeviz.tflog import quiet_if_inherited; quiet_if_inherited(); import tensorflow as tf; "
             "tf.compat.v1.logging.warning('a TF warning')")

    def stderr(**extra) -> str:
        proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env | extra,
                              timeout=600, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stderr

    assert "a TF warning" in stderr()  # a parent under --debug does not set the variable
    assert stderr(**{tflog.INHERITED: "1"}) == ""
