"""``analyze`` against TensorFlow's own view of the same graphs."""

from __future__ import annotations

from collections import Counter

import pytest

from placeviz.analysis import analyze
from placeviz.io import load

pytestmark = pytest.mark.tf

DTYPE_SIZES = {"float32": 4, "int64": 8, "int32": 4, "float64": 8}


def test_analysis_matches_tf(tf_models, tf_truth):
    report = analyze(load(tf_models / "setter.meta"))
    assert report.node_count == tf_truth["nodes"]
    assert report.op_histogram == dict(Counter(tf_truth["ops"].values()))
    assert report.requested_devices == dict(Counter(tf_truth["devices"].values()))
    assert report.unplaced_count == sum(1 for d in tf_truth["devices"].values() if not d)

    variables = {v.name: v for v in report.variables}
    assert set(variables) == set(tf_truth["global_variables"])
    for name, shape in tf_truth["variable_shapes"].items():
        v = variables[name]
        assert v.shape == shape
        assert v.dtype.removesuffix("_ref") == tf_truth["variable_dtypes"][name]
        expected = DTYPE_SIZES[v.dtype.removesuffix("_ref")]
        for d in shape:
            expected *= d
        assert v.bytes == expected
        assert v.trainable == (name in tf_truth["trainable_variables"])
        assert v.device == tf_truth["devices"][name]
    assert {v.name: v.partition_of for v in report.variables if v.partition_of} == {
        **{f"emb/part_{k}": "emb" for k in range(3)}, **{f"emb/part_{k}/Momentum": "emb/Momentum" for k in range(3)}}


def test_graphdef_without_collections_says_trainable_is_unknown(tf_models):
    report = analyze(load(tf_models / "setter.pb"))
    assert all(v.trainable is None for v in report.variables)
    assert any("trainable" in note for note in report.notes)
    doc = report.to_json()
    assert doc["schema"] == "placeviz.analysis/1"
    assert doc["variable_bytes"]["total"] == sum(v.bytes for v in report.variables)


def test_variables_read_from_the_file_bytes_match_tf_and_the_parsed_node_defs(tf_models, tf_truth, monkeypatch):
    # A binary GraphDef is not parsed on load: the variables' dtype and shape attrs come from the
    # C reader (Graph.wire_attr_values). They must be TF's, and what the parsed NodeDefs give.
    from placeviz import io

    model = load(tf_models / "setter.pb")
    ids = [model.graph.index[name] for name in tf_truth["variable_shapes"]]
    if io._wire is not None:
        assert model.graph.wire_attr_values(ids, ("dtype", "shape")) is not None
    report = analyze(model)
    variables = {v.name: v for v in report.variables}
    for name, shape in tf_truth["variable_shapes"].items():
        assert variables[name].shape == shape
        assert variables[name].dtype.removesuffix("_ref") == tf_truth["variable_dtypes"][name]
    monkeypatch.setattr(io, "LAZY_PARSE", False)
    eager = load(tf_models / "setter.pb")  # parsed whole, its bytes let go: the NodeDefs are read
    assert eager.graph.wire_attr_values(ids, ("dtype", "shape")) is None
    assert analyze(eager).to_json() == report.to_json()
