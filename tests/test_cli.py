"""The command line: formats, exit codes, one-line errors, no partial outputs."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from placeviz.protos import GraphDef


@pytest.fixture()
def small_pb(tmp_path):
    g = GraphDef()
    g.node.add(name="w", op="VariableV2", device="/job:ps/task:0")
    g.node["w" == "w" and 0].attr["dtype"].type = 1
    dims = g.node[0].attr["shape"].shape.dim
    dims.add(size=4)
    dims.add(size=3)
    g.node.add(name="w/read", op="Identity", input=["w"], device="/job:ps/task:0")
    g.node[1].attr["_class"].list.s.append(b"loc:@w")
    g.node[1].attr["T"].type = 1
    x = g.node.add(name="x", op="Const")
    x.attr["dtype"].type = 1
    x.attr["value"].tensor.dtype = 1
    x.attr["value"].tensor.float_val.append(1.0)
    g.node.add(name="y", op="MatMul", input=["x", "w/read"], device="/job:worker/task:0").attr["T"].type = 1
    path = tmp_path / "small.pb"
    path.write_bytes(g.SerializeToString())
    return path


def test_analyze_json_schema(small_pb, capsys):
    code, out, err = run_cli(["analyze", small_pb, "--format", "json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "placeviz.analysis/1"
    assert doc["graph"]["nodes"] == 4 and doc["graph"]["data_edges"] == 3
    assert doc["ops"] == {"Const": 1, "Identity": 1, "MatMul": 1, "VariableV2": 1}
    assert doc["requested_devices"] == [
        {"device": "/job:ps/task:0", "nodes": 2}, {"device": "/job:worker/task:0", "nodes": 1},
        {"device": "", "nodes": 1}]
    assert doc["unplaced"] == {"count": 1, "names": ["x"]}
    [var] = doc["variables"]
    assert var == {"name": "w", "op": "VariableV2", "dtype": "float32", "shape": [4, 3], "bytes": 48,
                   "trainable": None, "device": "/job:ps/task:0", "partition_of": None, "slot_of": None, "slots": [],
                   "placed_device": "/job:ps/replica:0/task:0/device:CPU:0",
                   "placed_by": "requested /job:ps/task:0; first candidate in TF's device order"}
    assert doc["variable_bytes"] == {"total": 48, "by_requested_device": {"/job:ps/task:0": 48},
                                     "unknown_size_variables": 0}
    # no train op: the traffic of running the whole graph, w/read's 48 bytes from ps to worker
    assert doc["partition"]["bytes_per_step"] == 48 and doc["partition"]["variable_reads"][0]["variable"] == "w"
    # the graph names jobs, so it goes through the placer: the Const follows its only consumer
    placement = doc["placement"]
    assert [t["task"] for t in placement["tasks"]] == ["/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"]
    assert placement["tasks"][0]["variable_bytes"] == 48 and placement["tasks"][1]["nodes"] == 2


def test_analyze_text_and_output_file(small_pb, tmp_path, capsys):
    code, out, _ = run_cli(["analyze", small_pb], capsys)
    assert code == 0
    assert "4 nodes" in out and "/job:ps/task:0" in out and "Unplaced: 1 of 4" in out
    target = tmp_path / "report.json"
    code, out, err = run_cli(["analyze", small_pb, "--format", "json", "-o", target], capsys)
    assert code == 0 and out == "" and "wrote" in err
    assert json.loads(target.read_text())["graph"]["nodes"] == 4


def _bad_inputs(tmp_path, small_pb):
    data = small_pb.read_bytes()
    cases = {
        "missing": (tmp_path / "absent.pb", "no such file or directory"),
        "empty": (tmp_path / "empty.pb", "the file is empty"),
        "random": (tmp_path / "random.pb", "not a valid binary GraphDef"),
        "truncated": (tmp_path / "trunc.pb", "not a valid binary GraphDef"),
        "syntax": (tmp_path / "bad.pbtxt", "syntax error"),
        "dir": (tmp_path / "dir", "without saved_model.pb"),
        "dup": (tmp_path / "dup.pbtxt", "two nodes are named 'a'"),
        "dangling": (tmp_path / "dangling.pbtxt", "no node is named 'nope'"),
        "cycle": (tmp_path / "cycle.pbtxt", "cycle"),
        "sample": ("sample:no_such_sample", "unknown sample 'no_such_sample'"),
        "builder": (tmp_path / "nothere.py:build", "does not exist"),
    }
    (tmp_path / "empty.pb").write_bytes(b"")
    (tmp_path / "random.pb").write_bytes(bytes(range(7, 250, 3)) * 20)
    (tmp_path / "trunc.pb").write_bytes(data[: len(data) // 2])
    (tmp_path / "bad.pbtxt").write_text('node { name: "a" op: "Const" \n node {')
    (tmp_path / "dir").mkdir()
    (tmp_path / "dup.pbtxt").write_text('node { name: "a" op: "Const" } node { name: "a" op: "Const" }')
    (tmp_path / "dangling.pbtxt").write_text('node { name: "a" op: "Identity" input: "nope:0" }')
    (tmp_path / "cycle.pbtxt").write_text(
        'node { name: "a" op: "Identity" input: "b" } node { name: "b" op: "Identity" input: "a" }')
    return cases


@pytest.mark.parametrize("case", ["missing", "empty", "random", "truncated", "syntax", "dir", "dup",
                                  "dangling", "cycle", "sample", "builder"])
def test_bad_input_gives_one_line_exit_2_and_no_output(case, small_pb, tmp_path, capsys):
    spec, message = _bad_inputs(tmp_path, small_pb)[case]
    target = tmp_path / "out.json"
    code, out, err = run_cli(["analyze", spec, "--format", "json", "-o", target], capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("placeviz: error: ") and str(spec) in lines[0] and message in lines[0]
    assert "Traceback" not in err
    assert not target.exists()


def test_usage_errors_exit_2(capsys):
    code, _, err = run_cli(["analyze"], capsys)
    assert code == 2 and "Missing argument" in err
    code, _, err = run_cli(["analyze", "x.pb", "--format", "yaml"], capsys)
    assert code == 2


def test_debug_shows_traceback(tmp_path, capsys):
    (tmp_path / "e.pb").write_bytes(b"")
    from placeviz.errors import LoadError

    with pytest.raises(LoadError):
        run_cli(["--debug", "analyze", tmp_path / "e.pb"], capsys)


def test_analyze_reports_a_graph_tf_cannot_place(tmp_path, capsys):
    path = tmp_path / "nojob.pbtxt"
    path.write_text('node { name: "c" op: "NoOp" device: "/job:nojob/task:0" }\n'
                    'node { name: "d" op: "NoOp" device: "/job:worker/task:0" }')
    code, out, err = run_cli(["analyze", path, "--format", "json", "--ps-tasks", "1"], capsys)
    assert code == 0, err
    error = json.loads(out)["placement"]["error"]
    assert "was explicitly assigned to /job:nojob/task:0" in error


def test_place_writes_setter_and_placed_stages(tmp_path, capsys):
    path = tmp_path / "g.pbtxt"
    path.write_text('node { name: "v" op: "VariableV2" attr { key: "dtype" value { type: DT_FLOAT } }'
                    ' attr { key: "shape" value { shape { } } } }\n'
                    'node { name: "r" op: "Identity" input: "v" attr { key: "T" value { type: DT_FLOAT } } }')
    code, _, err = run_cli(["place", path, "--ps-tasks", "2", "--stage", "setter", "-o", tmp_path / "s.pbtxt"], capsys)
    assert code == 0, err
    text = (tmp_path / "s.pbtxt").read_text()
    # replica_device_setter(ps_tasks=2): TF's worker_device default is "/job:worker" (no task)
    assert 'device: "/job:ps/task:0"' in text and 'device: "/job:worker"\n' in text
    code, _, err = run_cli(["place", path, "--ps-tasks", "2", "--stage", "setter", "--worker-device",
                            "/job:worker/task:1", "-o", tmp_path / "s1.pbtxt"], capsys)
    assert code == 0, err
    assert 'device: "/job:worker/task:1"' in (tmp_path / "s1.pbtxt").read_text()
    code, _, err = run_cli(["place", path, "--ps-tasks", "2", "-o", tmp_path / "p.pbtxt"], capsys)
    assert code == 0, err
    # Identity takes a plain (not ref) input, so nothing colocates it with the variable
    placed = (tmp_path / "p.pbtxt").read_text()
    assert placed.count('device: "/job:ps/replica:0/task:0/device:CPU:0"') == 1
    assert placed.count('device: "/job:worker/replica:0/task:0/device:CPU:0"') == 1


# ------------------------------------------------------------------------------------------ sync
@pytest.mark.tf
def test_sync_output_format_follows_the_suffix(tf_models, tmp_path, capsys):
    """-o .pb/.pbtxt: a GraphDef; .meta (or --meta-graph): a MetaGraphDef; --name: the scope."""
    from google.protobuf import text_format

    from placeviz.protos import MetaGraphDef

    src = tf_models / "setter.meta"
    code, _out, err = run_cli(["sync", src, "-o", tmp_path / "s.pb", "--replicas-to-aggregate", "2"], capsys)
    assert code == 0, err
    gd = GraphDef.FromString((tmp_path / "s.pb").read_bytes())
    assert any(n.name == "sync_replicas/group_deps" for n in gd.node)
    code, _out, err = run_cli(["sync", src, "-o", tmp_path / "s.pbtxt", "--replicas-to-aggregate", "2",
                               "--name", "my_sync"], capsys)
    assert code == 0, err
    gd = text_format.Parse((tmp_path / "s.pbtxt").read_text(), GraphDef())
    assert any(n.name == "my_sync/group_deps" for n in gd.node)
    assert not any(n.name.startswith("sync_replicas/") for n in gd.node)
    for out, extra in (("s.meta", []), ("m.pb", ["--meta-graph"])):
        code, _out, err = run_cli(["sync", src, "-o", tmp_path / out, "--replicas-to-aggregate", "2", *extra],
                                  capsys)
        assert code == 0, err
        meta = MetaGraphDef.FromString((tmp_path / out).read_bytes())
        assert "local_variables" in meta.collection_def
        assert any(n.name == "sync_token_q" for n in meta.graph_def.node)
    # a GraphDef input still gives a MetaGraphDef for .meta
    code, _out, err = run_cli(["sync", tf_models / "setter.pb", "-o", tmp_path / "g.meta",
                               "--replicas-to-aggregate", "2"], capsys)
    assert code == 0, err
    assert MetaGraphDef.FromString((tmp_path / "g.meta").read_bytes()).graph_def.node
    # --worker: no init-tokens op (only the chief calls get_init_tokens_op)
    code, _out, err = run_cli(["sync", src, "-o", tmp_path / "w.pb", "--replicas-to-aggregate", "2",
                               "--worker"], capsys)
    assert code == 0, err
    names = {n.name for n in GraphDef.FromString((tmp_path / "w.pb").read_bytes()).node}
    assert "sync_token_q_EnqueueMany" in names and "sync_token_q_EnqueueMany_1" not in names


@pytest.mark.tf
def test_sync_refuses_an_unknown_output_suffix(tf_models, tmp_path, capsys):
    out = tmp_path / "s.json"
    code, _out, err = run_cli(["sync", tf_models / "setter.meta", "-o", out, "--replicas-to-aggregate", "2"],
                              capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "unknown output suffix" in err and ".meta" in err
    assert not out.exists()


def test_json_reports_are_compact_and_pretty_indents_them(small_pb, tmp_path, capsys):
    """Every JSON report is compact by default, stdout or -o, and ``--pretty`` gives the indented
    text (``json.dumps(indent=2)``, the bytes before compact became the default) of the same content:
    analyze, lint (json and sarif) and partition's index.json."""
    cases = {"analyze.json": ["analyze", small_pb, "--ps-tasks", "1", "--format", "json"],
             "lint.json": ["lint", small_pb, "--format", "json", "--fail-on", "never"],
             "lint.sarif": ["lint", small_pb, "--format", "sarif", "--fail-on", "never"]}
    for name, args in cases.items():
        code, compact_out, err = run_cli(args, capsys)
        assert code == 0, err
        assert run_cli([*args, "-o", tmp_path / name], capsys)[0] == 0
        assert run_cli([*args, "--pretty", "-o", tmp_path / f"pretty-{name}"], capsys)[0] == 0
        compact, pretty = (tmp_path / name).read_text(), (tmp_path / f"pretty-{name}").read_text()
        doc = json.loads(compact)
        assert compact == compact_out == json.dumps(doc, separators=(",", ":")) + "\n", name
        assert pretty == json.dumps(doc, indent=2) + "\n", name
        assert json.loads(pretty) == doc and len(pretty) > len(compact), name
    for flag in ((), ("--pretty",)):
        out = tmp_path / f"parts{len(flag)}"
        assert run_cli(["partition", small_pb, "--ps-tasks", "1", *flag, "-o", out], capsys)[0] == 0
    index = json.loads((tmp_path / "parts0" / "index.json").read_text())
    assert (tmp_path / "parts0" / "index.json").read_text() == json.dumps(index, separators=(",", ":")) + "\n"
    assert (tmp_path / "parts1" / "index.json").read_text() == json.dumps(index, indent=2) + "\n"
