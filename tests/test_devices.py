"""placeviz.devices against TensorFlow itself.

* Python side: a corpus of device strings, their pairwise merges and hypothesis-generated strings
  are compared with ``tf.DeviceSpec`` (``from_string``, ``to_string``, ``make_merged_spec``, errors)
  and ``device.merge_device``.
* Clusters: ``ClusterSpec`` against ``tf.train.ClusterSpec`` (dense and sparse jobs).
* C++ side: TF's Python does not expose ``DeviceNameUtils``, so the cases of
  ``xla/tsl/util/device_name_utils_test.cc`` and ``core/common_runtime/device_set_test.cc`` are
  re-created as tables, and a small DirectSession experiment checks the placer-facing claims
  (lowercase types, soft merges of ``_class`` groups).
* Layout: the package's modules (one per TF source) import each other in one direction only.

Tests that need TensorFlow are marked ``tf`` and import it inside the test.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placeviz.devices import (
    DEVICE_TYPE_PRIORITY,
    ClusterError,
    ClusterSpec,
    Device,
    DeviceMergeError,
    DeviceSet,
    DeviceSpecError,
    ParsedName,
    PyDeviceSpec,
    TaskSpec,
    address_space,
    are_compatible,
    canonical_device,
    full_name,
    is_complete_specification,
    is_different_address_space,
    is_same_address_space,
    is_specification,
    job_of,
    local_name,
    merge_dev_names,
    merge_device_fn,
    merge_override_dev_names,
    merge_unset_dev_names,
    names_for_device_mappings,
    parse_full_name,
    parse_full_or_local,
    parse_local_name,
    sort_devices,
    split_device_name,
    task_label,
    task_of,
)
from placeviz.errors import PlacevizError


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


# ----------------------------------------------------------------------------------------------
# Python side: tf.DeviceSpec
# ----------------------------------------------------------------------------------------------

# (string, expected canonical string or None when TF raises ValueError)
PY_CORPUS: list[tuple[str, str | None]] = [
    ("", ""),
    ("/", ""),
    ("//", ""),
    ("/cpu:0", "/device:CPU:0"),
    ("/CPU:0", "/device:CPU:0"),
    ("/Cpu:1", "/device:CPU:1"),
    ("cpu:0", "/device:CPU:0"),
    ("gpu:1", "/device:GPU:1"),
    ("/gpu:*", "/device:GPU:*"),
    ("CPU", "/device:CPU:*"),
    ("gpu", "/device:GPU:*"),
    ("TPU:3", "/device:TPU:3"),
    ("tpu:0", "/device:TPU:0"),
    ("custom:1", "/device:CUSTOM:1"),
    ("EPU", "/device:EPU:*"),
    ("epu:2", "/device:EPU:2"),
    ("/device:GPU:*", "/device:GPU:*"),
    ("/device:GPU:0", "/device:GPU:0"),
    ("/device:cpu:1", "/device:CPU:1"),
    ("/device:gpu:1", "/device:GPU:1"),
    ("/device:Cpu:1", "/device:Cpu:1"),
    ("/device:tpu:0", "/device:tpu:0"),
    ("/device:XLA_CPU:0", "/device:XLA_CPU:0"),
    ("/device:myspecialdevice:13", "/device:myspecialdevice:13"),
    ("/device::1", "/device::1"),
    ("/device:CPU:01", "/device:CPU:1"),
    ("/device:CPU:-1", "/device:CPU:-1"),
    ("/replica:0", "/replica:0"),
    ("/task:3", "/task:3"),
    ("/task:-1", "/task:-1"),
    ("/replica: 2", "/replica:2"),
    ("/job:ps", "/job:ps"),
    ("/job:", "/job:"),
    ("/job:ps-1", "/job:ps-1"),
    ("job:ps", "/job:ps"),
    ("/job:ps/task:0/cpu:0", "/job:ps/task:0/device:CPU:0"),
    ("/job:worker/replica:0/task:1/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"),
    ("/job:worker/replica:0/task:1/cpu:0", "/job:worker/replica:0/task:1/device:CPU:0"),
    ("/job:a/device:cpu:1", "/job:a/device:CPU:1"),
    ("/task:1/job:a", "/job:a/task:1"),
    ("/job:a/job:b", "/job:b"),
    ("/task:1/task:2", "/task:2"),
    ("/job:ps/replica:1/task:2/device:GPU:3", "/job:ps/replica:1/task:2/device:GPU:3"),
    ("/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:0"),
    ("/:0", ""),
    ("/job:ps/:1", "/job:ps"),
    ("/job:ps/", "/job:ps"),
    # errors
    ("/job:ps/foo:1", None),
    ("/job:ps:1", None),
    ("/foo", None),
    ("/JOB:ps", None),
    ("/cpu:0/gpu:0", None),
    ("/cpu:0/device:CPU:0", None),
    ("/device:CPU:0/cpu:1", None),
    ("CPU/GPU", None),
    ("/device:CPU", None),
    ("/device:CPU:0:1", None),
    ("/cpu:0:1", None),
    ("/cpu:x", None),
    ("/device:GPU:x", None),
    ("/task:x", None),
    ("/replica:1.5", None),
    ("/task:", None),
    ("/job:ps/task", None),
    ("xpu:0", None),
    ("/job:ps/replica:x/cpu:0/gpu:0", None),
]


@pytest.mark.parametrize(("spec", "expected"), PY_CORPUS)
def test_py_parse_table(spec, expected):
    if expected is None:
        with pytest.raises(DeviceSpecError):
            PyDeviceSpec.parse(spec)
    else:
        assert PyDeviceSpec.parse(spec).to_string() == expected
        assert canonical_device(spec) == expected


def _tf_canonical(tf, spec: str) -> str | None:
    try:
        return tf.DeviceSpec.from_string(spec).to_string()
    except ValueError:
        return None


@pytest.mark.tf
def test_py_corpus_matches_tf(tf):
    for spec, expected in PY_CORPUS:
        assert _tf_canonical(tf, spec) == expected, spec


@pytest.mark.tf
def test_py_fields_match_tf(tf):
    for spec, expected in PY_CORPUS:
        if expected is None:
            continue
        ours, theirs = PyDeviceSpec.parse(spec), tf.DeviceSpec.from_string(spec)
        assert (ours.job, ours.replica, ours.task, ours.device_type, ours.device_index) == (
            theirs.job, theirs.replica, theirs.task, theirs.device_type, theirs.device_index), spec


@pytest.mark.tf
def test_py_merges_of_corpus_pairs_match_tf(tf):
    valid = [s for s, e in PY_CORPUS if e is not None]
    for a in valid:
        ta, pa = tf.DeviceSpec.from_string(a), PyDeviceSpec.parse(a)
        for b in valid:
            expected = ta.make_merged_spec(tf.DeviceSpec.from_string(b)).to_string()
            assert pa.merged_with(PyDeviceSpec.parse(b)).to_string() == expected, (a, b)
            assert pa.merged_with(b).to_string() == expected, (a, b)


class _Op:
    def __init__(self, device):
        self.device = device


@pytest.mark.tf
def test_merge_device_fn_matches_tf(tf):
    from tensorflow.python.framework import device as tf_device

    valid = [s for s, e in PY_CORPUS if e is not None]
    for scope in valid[::3]:
        ours, theirs = merge_device_fn(scope), tf_device.merge_device(scope)
        assert ours.is_null_merge == theirs.is_null_merge
        for current in valid[::2]:
            assert ours(current) == theirs(_Op(current)).to_string(), (scope, current)


def test_py_merge_examples():
    base = PyDeviceSpec.parse("/job:ps/task:1/device:CPU:0")
    assert base.merged_with("/device:GPU:*").to_string() == "/job:ps/task:1/device:GPU:0"
    # The scope fills in what the op's own device leaves unset.
    scope = merge_device_fn("/job:worker/task:0")
    assert scope("/device:GPU:1") == "/job:worker/task:0/device:GPU:1"
    assert scope("") == scope(None) == "/job:worker/task:0"
    assert scope("/job:ps") == "/job:ps/task:0"
    assert merge_device_fn("/job:worker/task:0") is scope
    assert merge_device_fn("").is_null_merge


def test_py_spec_value_semantics():
    a = PyDeviceSpec.parse("/cpu:0")
    assert a is PyDeviceSpec.parse("/cpu:0")  # cached
    assert a == PyDeviceSpec.parse("/device:CPU:0") == PyDeviceSpec(device_type="cpu", device_index=0)
    assert hash(a) == hash(PyDeviceSpec(device_type="CPU", device_index="0"))
    assert str(a) == "/device:CPU:0"
    assert PyDeviceSpec.parse(None).to_string() == ""
    assert PyDeviceSpec.parse(a) is a
    assert a.replace(job="ps", task=2).to_string() == "/job:ps/task:2/device:CPU:0"
    assert a.replace(device_type=None).to_string() == ""
    assert PyDeviceSpec(task=3).to_string() == "/task:3"
    with pytest.raises(TypeError):
        a.replace(index=1)
    with pytest.raises(DeviceSpecError):
        PyDeviceSpec(task="x")
    with pytest.raises(DeviceSpecError):
        PyDeviceSpec.parse(3)  # type: ignore[arg-type]
    err = pytest.raises(DeviceSpecError, PyDeviceSpec.parse, "/job:ps/foo:1").value
    assert isinstance(err, ValueError) and isinstance(err, PlacevizError)
    assert "Unknown attribute 'foo'" in str(err)


_PIECES = ["job:ps", "job:worker", "job:", "job:a_b", "replica:0", "replica:2", "replica:x", "task:1",
           "task:-1", "task:07", "task:", "cpu", "CPU:0", "Cpu:1", "gpu:*", "GPU:3", "tpu:x", "epu", "custom:2",
           "device:GPU:1", "device:cpu:*", "device:tpu:0", "device:CPU", "device::2", "device:X:Y:Z", "foo:1",
           "", ":0", "job:ps:1", "xpu:1", "device:CPU:01"]


@st.composite
def _spec_strings(draw):
    pieces = draw(st.lists(st.sampled_from(_PIECES), max_size=5))
    lead = draw(st.sampled_from(["/", ""]))
    return lead + "/".join(pieces)


@pytest.mark.tf
@settings(max_examples=400, deadline=None)
@given(spec=st.one_of(_spec_strings(), st.text(alphabet="/:*jobtaskreplicdevCPUGgu0123-_ x", max_size=24)))
def test_py_generated_specs_match_tf(tf, spec):
    expected = _tf_canonical(tf, spec)
    if expected is None:
        with pytest.raises(DeviceSpecError):
            PyDeviceSpec.parse(spec)
    else:
        assert PyDeviceSpec.parse(spec).to_string() == expected


@pytest.mark.tf
@settings(max_examples=200, deadline=None)
@given(a=_spec_strings(), b=_spec_strings())
def test_py_generated_merges_match_tf(tf, a, b):
    if _tf_canonical(tf, a) is None or _tf_canonical(tf, b) is None:
        return
    expected = tf.DeviceSpec.from_string(a).make_merged_spec(tf.DeviceSpec.from_string(b)).to_string()
    assert PyDeviceSpec.parse(a).merged_with(PyDeviceSpec.parse(b)).to_string() == expected


# ----------------------------------------------------------------------------------------------
# Clusters
# ----------------------------------------------------------------------------------------------

CLUSTERS = [
    {"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222", "w1:2222", "w2:2222"]},
    {"worker": {1: "worker1.example.com:2222"}, "ps": ["ps0.example.com:2222", "ps1.example.com:2222"]},
    {"ps": {0: "a:1", 5: "b:1"}},
    {"ps": {"0": "a:1", "5": "b:1"}, "chief": ("c:1",)},
    {"ps": {"3": "a:1", 1: "b:1", "0": "c:1", "2": "d:1"}},
    {"ps": [], "worker": ["w:1"]},
    {"ps": {}},
    {},
]


@pytest.mark.tf
@pytest.mark.parametrize("cluster", CLUSTERS)
def test_cluster_spec_matches_tf(tf, cluster):
    ours, theirs = ClusterSpec.from_dict(cluster), tf.train.ClusterSpec(cluster)
    assert ours.as_dict() == theirs.as_dict()
    assert ours.jobs == theirs.jobs
    assert bool(ours) == bool(theirs)
    for job in theirs.jobs:
        assert ours.num_tasks(job) == theirs.num_tasks(job)
        assert ours.task_indices(job) == theirs.task_indices(job)
        for i in theirs.task_indices(job):
            assert ours.task_address(job, i) == theirs.task_address(job, i)


BAD_CLUSTERS = [
    {"ps": "ps0:2222"},
    {"ps": {"x": "a:1"}},
    {"ps": [3]},
    {"ps": {0: None}},
    ["ps0:2222"],
]


@pytest.mark.tf
@pytest.mark.parametrize("cluster", BAD_CLUSTERS)
def test_bad_clusters_rejected_like_tf(tf, cluster):
    with pytest.raises((TypeError, ValueError)):
        tf.train.ClusterSpec(cluster)
    with pytest.raises(ClusterError):
        ClusterSpec.from_dict(cluster)


def test_cluster_queries_and_errors():
    spec = ClusterSpec.from_dict({"ps": {0: "a:1", 5: "b:1"}, "worker": ["w:1"]}, source="c.json")
    assert spec.num_tasks("ps") == 2 and spec.task_indices("ps") == [0, 5]
    assert "ps" in spec and "chief" not in spec
    with pytest.raises(ClusterError, match=r"^c\.json: no job 'chief' in the cluster \(jobs: ps, worker\)$"):
        spec.num_tasks("chief")
    with pytest.raises(ClusterError, match="no task 3 in job 'ps'"):
        spec.task_address("ps", 3)
    assert spec == ClusterSpec.from_dict({"worker": ["w:1"], "ps": {"5": "b:1", "0": "a:1"}})
    assert repr(ClusterSpec.from_dict({"ps": ["a:1"]})) == "ClusterSpec({'ps': ['a:1']})"


def test_cluster_from_ps_tasks():
    spec = ClusterSpec.from_ps_tasks(3)
    assert spec.jobs == ["ps", "worker"]
    assert spec.num_tasks("ps") == 3 and spec.num_tasks("worker") == 1
    assert ClusterSpec.from_ps_tasks(2, workers=4).task_indices("worker") == [0, 1, 2, 3]
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ClusterError):
            ClusterSpec.from_ps_tasks(bad)  # type: ignore[arg-type]
    with pytest.raises(ClusterError):
        ClusterSpec.from_ps_tasks(1, workers=0)


def test_cluster_files(tmp_path):
    plain = tmp_path / "cluster.json"
    plain.write_text(json.dumps({"ps": ["ps0:2222", "ps1:2222"], "worker": {"0": "w0:1", "3": "w3:1"}}))
    spec, task = ClusterSpec.from_json_file(plain)
    assert task is None and spec.as_dict() == {"ps": ["ps0:2222", "ps1:2222"], "worker": {0: "w0:1", 3: "w3:1"}}
    assert spec.source == str(plain)

    tf_config = tmp_path / "tf_config.json"
    tf_config.write_text(json.dumps({"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p:1"]},
                                     "task": {"type": "worker", "index": 1}, "environment": "cloud"}))
    spec, task = ClusterSpec.from_json_file(tf_config)
    assert spec.jobs == ["chief", "worker", "ps"] and task == TaskSpec("worker", 1)
    assert task.device() == "/job:worker/task:1"

    no_task = tmp_path / "no_task.json"
    no_task.write_text(json.dumps({"cluster": {"ps": ["p:1"], "worker": ["w:1"]}}))
    assert ClusterSpec.from_json_file(no_task)[1] is None

    # A plain cluster with a sparse job named "cluster" is not mistaken for TF_CONFIG.
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"cluster": {"0": "a:1"}}))
    spec, task = ClusterSpec.from_json_file(odd)
    assert spec.jobs == ["cluster"] and task is None


@pytest.mark.parametrize(("content", "problem"), [
    ("{not json", "invalid JSON at line 1 column 2"),
    ("[1, 2]", "expected a JSON object"),
    ("{}", "the cluster defines no jobs"),
    ('{"ps": {"zero": "a:1"}}', "job 'ps': task index 'zero' is not an integer"),
    ('{"ps": "a:1"}', "the tasks of job 'ps' must be a list"),
    ('{"ps": [1]}', "job 'ps', task 0: address 1 is not a string"),
    ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
     "TF_CONFIG task type 'worker' is not a job of the cluster (jobs: ps)"),
    ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 4}}',
     "TF_CONFIG task index 4 is not a task of job 'ps' (tasks: 0)"),
    ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": "x"}}', "task index 'x' is not an integer"),
    ('{"cluster": {"ps": ["a:1"]}, "task": {"index": 0}}', "TF_CONFIG 'task' has no 'type'"),
])
def test_cluster_file_errors(tmp_path, content, problem):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(ClusterError) as info:
        ClusterSpec.from_json_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message
    assert isinstance(info.value, PlacevizError)


def test_cluster_file_missing(tmp_path):
    with pytest.raises(ClusterError, match="cannot read the cluster file"):
        ClusterSpec.from_json_file(tmp_path / "nope.json")


# ----------------------------------------------------------------------------------------------
# C++ side: DeviceNameUtils (cases of xla/tsl/util/device_name_utils_test.cc)
# ----------------------------------------------------------------------------------------------

def N(s: str) -> ParsedName:
    return ParsedName.from_string(s)


def test_cpp_full_name():
    assert full_name("hello", 1, 2, "CPU", 3) == "/job:hello/replica:1/task:2/device:CPU:3"
    for bad in (("1job", 0, 0, "CPU", 0), ("a", -1, 0, "CPU", 0), ("a", 0, 0, "", 0), ("a-b", 0, 0, "CPU", 0)):
        with pytest.raises(DeviceSpecError):
            full_name(*bad)


@pytest.mark.parametrize("name", [
    "foobar",
    "/job:123/replica:1/task:2/device:GPU:3",
    "/job:123/replica:1/task:2/gpu:",
    "/job:123/replica:1/task:2/device:gpu:",
    "/job:foo/replica:-1/task:2/device:GPU:3",
    "/job:foo/replica:1/task:-2/device:GPU:3",
    "/job:foo/replica:1/task:2/bar:3",
    "/job:foo/replica:1/task:2/device:GPU:3/extra",
    "/job:foo/task:0/replica/cpu:1",
    # more failures
    "CPU:2", "cpu:0", "/Cpu:0", "/cpu", "/tpu:0", "/job:", "/job:a:1", "/job:a-b", "/device:", "/device:1",
    "/device:CPU:x", "/replica:", "/task:1x", "/job:ps/foo:1", "/job:*a", "//", " /job:a",
    "/job:a\n", "/task:18446744073709551616", "/task:99999999999999999999",
])
def test_cpp_parse_full_name_failures(name):
    assert parse_full_name(name) is None
    with pytest.raises(DeviceSpecError, match="Malformed device specification"):
        ParsedName.from_string(name)


@pytest.mark.parametrize(("name", "expected"), [
    ("/job:foo/replica:1/task:2/device:GPU:3", ParsedName("foo", 1, 2, "GPU", 3)),
    ("/job:foo_bar/replica:1/task:2/device:GPU:3", ParsedName("foo_bar", 1, 2, "GPU", 3)),
    ("/job:*/replica:4/gpu:*", ParsedName(replica=4, type="GPU")),
    ("/job:*/replica:4/device:GPU:*", ParsedName(replica=4, type="GPU")),
    ("/job:*/device:GPU/replica:4", ParsedName(replica=4, type="GPU")),
    ("/job:*/replica:4/device:myspecialdevice:13", ParsedName(replica=4, type="myspecialdevice", id=13)),
    ("/", ParsedName()),
    ("", ParsedName()),
    ("/job:*/replica:4/device:GPU:5", ParsedName(replica=4, type="GPU", id=5)),
    ("/gpu:*/job:*/replica:4", ParsedName(replica=4, type="GPU")),
    # legacy and case
    ("/cpu:0", ParsedName(type="CPU", id=0)),
    ("/CPU:1", ParsedName(type="CPU", id=1)),
    ("/GPU:2", ParsedName(type="GPU", id=2)),
    ("/device:cpu:1", ParsedName(type="cpu", id=1)),
    ("/job:a/replica:0/task:0/cpu:0", ParsedName("a", 0, 0, "CPU", 0)),
    ("/job:foo/cpu:1/task:2/replica:1", ParsedName("foo", 1, 2, "CPU", 1)),
    ("/replica:0/task:0/CPU:2", ParsedName(replica=0, task=0, type="CPU", id=2)),
    ("/device:*:3", ParsedName(id=3)),
    ("/device:*", ParsedName()),
    ("/job:a/job:b", ParsedName(job="b")),
    ("/cpu:1/device:GPU", ParsedName(type="GPU")),
    ("/cpu:1/gpu:2", ParsedName(type="GPU", id=2)),
    ("/gpu:2/cpu:1", ParsedName(type="CPU", id=1)),
    ("/job:*/replica:*/task:*/device:*:*", ParsedName()),
    ("/task:007", ParsedName(task=7)),
    ("/task:2147483648", ParsedName(task=-2147483648)),  # uint64 -> int wraps like C++
    ("/task:4294967298", ParsedName(task=2)),
])
def test_cpp_parse_full_name(name, expected):
    assert parse_full_name(name) == expected
    assert parse_full_or_local(name) == expected


@pytest.mark.parametrize("parts_mask", range(16))
@pytest.mark.parametrize(("device", "explicit", "expected_device"), [
    ("CPU:3", False, "CPU:3"), ("GPU:3", False, "GPU:3"), ("cpu:3", False, "CPU:3"), ("gpu:3", False, "GPU:3"),
    ("CPU:3", True, "CPU:3"), ("GPU:3", True, "GPU:3"), ("cpu:3", True, "cpu:3"), ("gpu:3", True, "gpu:3"),
    ("someDevice:3", True, "someDevice:3"),
])
def test_cpp_round_trip_partial_names(parts_mask, device, explicit, expected_device):
    original, expected = "", ""
    for bit, piece in ((1, "/job:foo"), (2, "/replica:3"), (4, "/task:2")):
        if parts_mask & bit:
            original += piece
            expected += piece
    if parts_mask & 8:
        original += ("/device:" if explicit else "/") + device
        expected += "/device:" + expected_device
    assert parse_full_name(original).to_string() == expected


def test_cpp_local_names():
    assert parse_local_name("CPU:10") == ParsedName(type="CPU", id=10)
    assert parse_full_or_local("CPU:10") == ParsedName(type="CPU", id=10)
    assert parse_local_name("cpu:2") == ParsedName(type="cpu", id=2)
    for bad in ("cpu:abc", "abc:", "abc", "myspecialdevice", "CPU:*", "CPU:1/", "/CPU:1", "1CPU:0", "CPU:1x"):
        assert parse_local_name(bad) is None, bad
    assert parse_full_or_local("myspecialdevice") is None
    assert local_name("CPU", 1) == "/device:CPU:1"
    assert local_name("MySpecialDevice", 13) == "/device:MySpecialDevice:13"


def test_cpp_address_spaces():
    assert is_same_address_space("/job:foo/replica:1/task:2/cpu:3", "/job:foo/replica:1/task:2/device:GPU:4")
    assert not is_same_address_space("/job:foo/replica:1/task:2/cpu:3", "/job:foo/replica:1/task:3/device:GPU:4")
    assert not is_same_address_space("/job:foo/replica:1/task:2/cpu:3", "/job:foo/replica:10/task:2/device:GPU:4")
    assert not is_same_address_space("/job:foo/replica:1/task:2/cpu:3", "/job:bar/replica:1/task:2/device:GPU:4")
    assert not is_same_address_space("/job:foo/task:2", "/job:foo/task:2")  # replica unset
    assert not is_same_address_space("garbage", "/job:foo/replica:1/task:2")
    assert is_different_address_space(N("/job:a/task:1"), N("/job:a/task:2"))
    assert not is_different_address_space(N("/job:a"), N("/task:2"))
    assert address_space(N("/job:a/replica:0/task:1/device:GPU:0")) == N("/job:a/replica:0/task:1")
    assert N("/job:a/replica:0/task:1/device:GPU:0").address_space() == N("/job:a/replica:0/task:1")


def test_task_of_is_the_task_part_reports_show():
    """``task_of``: the one task splitter of the reports (traffic, render), the rules and the
    agreement check. With ``replica``, a complete name's text before ``/device:`` (what the traffic
    report printed); without, ``/job:J/task:T`` with the task TF fills in (what the rules printed)."""
    cluster = ClusterSpec.from_dict({"ps": ["a:1", "b:1"], "worker": ["c:1"]})
    for device in DeviceSet(cluster, 2, 1).devices:
        assert task_of(device.name, replica=True) == device.name.split("/device:", 1)[0]
        assert task_of(device.name) == f"/job:{device.parsed.job}/task:{device.parsed.task}"
    assert task_of("/job:ps/task:1/device:CPU:0", replica=True) == "/job:ps/task:1"  # unset replica left out
    assert task_of("/job:ps/device:CPU:0") == "/job:ps/task:0"
    assert task_of("/device:CPU:0", replica=True) == "" and task_of("", replica=True) == ""
    assert task_of("/device:CPU:0") is None and task_of("") is None
    assert task_of("/job:ps/tsk:0") is None and task_of("/job:ps/tsk:0", replica=True) is None
    assert task_of("/job:ps/task:0/cpu:0", replica=True) == split_device_name("/job:ps/task:0/cpu:0")[0]


# (device string, job_of, task_label): the one job/task reading of rules, views and the timeline.
JOB_TASK_CASES: list[tuple[str, str | None, str | None]] = [
    ("", None, None),
    ("/", None, None),
    ("/job:ps/task:1", "ps", "ps:1"),
    ("/job:ps/replica:0/task:1/device:CPU:0", "ps", "ps:1"),
    ("/job:ps/replica:0/task:1/cpu:0", "ps", "ps:1"),  # legacy device piece
    ("/job:worker/task:0/device:cpu:1", "worker", "worker:0"),  # lower-case type: still parsed
    ("/job:localhost/replica:0/task:0/device:CPU:0", "localhost", "localhost:0"),
    ("/job:ps", "ps", "ps"),  # partial: no task, none filled in
    ("/job:ps/replica:2", "ps", "ps"),
    ("/job:ps/device:GPU:0", "ps", "ps"),
    ("/job:ps_1/task:2", "ps_1", "ps_1:2"),
    ("/task:1/job:a", "a", "a:1"),  # any order
    ("/job:a/job:b", "b", "b"),  # a repeated piece overrides
    ("/task:1", None, None),  # no job
    ("/replica:0/task:1/device:GPU:0", None, None),
    ("/device:CPU:0", None, None),
    ("/cpu:0", None, None),
    # ParseFullName only (tf.DeviceSpec reads these otherwise): wildcards are unset fields, and
    # strings it rejects name no job
    ("/job:*/task:1", None, None),
    ("/job:ps/task:*", "ps", "ps"),
    ("/job:ps-1/task:2", None, None),
    ("/job:1ps", None, None),
    ("/job:ps/tsk:0", None, None),
    ("cpu:0", None, None),
    ("(no device)", None, None),
]


def test_job_of_and_task_label():
    for device, job, label in JOB_TASK_CASES:
        assert (job_of(device), task_label(device)) == (job, label), device
        pn = parse_full_name(device)
        assert job == (pn.job if pn is not None else None), device  # the C++ grammar's fields
        if job is not None:
            assert task_of(device) == f"/job:{job}/task:{pn.task or 0}"  # same parse, task 0 filled in


@pytest.mark.tf
def test_job_and_task_match_tf_device_spec(tf):
    """Where both grammars accept a string without wildcards, tf.DeviceSpec reads the same job and
    task as ParseFullName (the grammars differ on device types only); the rest are ParseFullName's
    own cases, which ``test_cpp_*`` check against TF's C++ test tables."""
    compared = 0
    for device, job, label in JOB_TASK_CASES:
        if "*" in device or parse_full_name(device) is None:
            continue
        spec = tf.DeviceSpec.from_string(device)
        assert job == spec.job, device
        assert label == (None if spec.job is None else spec.job if spec.task is None else f"{spec.job}:{spec.task}")
        compared += 1
    assert compared >= 15


def test_views_label_devices_with_task_label():
    """The render views' device labels and colours read job and task through job_of/task_label
    (as do the rules and the verify timeline's processes, ``tests/test_modes.py``); what differs
    is in the caller: a view shows the device type too, and a string TF rejects whole."""
    from placeviz.render.roles import DEVICE_PALETTE, PS_COLORS, WORKER_COLORS, device_colors, short_device

    assert short_device("/job:ps/replica:0/task:1/device:CPU:0") == "ps:1 CPU:0"
    assert short_device("/job:ps/task:1/cpu:0") == "ps:1 CPU:0"
    assert short_device("/job:ps") == "ps"
    assert short_device("/job:worker/device:GPU:*") == "worker GPU:*"
    assert short_device("/device:GPU:1") == "GPU:1"
    assert short_device("/job:ps/tsk:0") == "/job:ps/tsk:0"  # rejected: shown whole
    assert short_device("") == "(no device)"
    colors = device_colors(["/job:ps/task:0", "/job:psx/task:0", "/job:chief/task:0", ""])
    assert colors["/job:ps/task:0"] in PS_COLORS and colors["/job:chief/task:0"] in WORKER_COLORS
    assert colors["/job:psx/task:0"] in DEVICE_PALETTE  # job "psx" is not the ps job


def test_timeline_processes_are_task_labels():
    """The verify timeline names one process per task TF ran an op on: ``task_label`` of the
    device (what TF's step stats give is always a full name)."""
    from types import SimpleNamespace

    from placeviz.verify.timeline import trace_events

    events = [("worker:0", 1, device, f"op{k}", "AddV2", 10.0 * k, 5.0) for k, device in enumerate(
        ["/job:ps/replica:0/task:1/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0",
         "/job:ps/replica:0/task:1/device:CPU:1"])]
    report = SimpleNamespace(plan={}, result={"events": events}, check=lambda _name: None)
    out, _ = trace_events("async", report, 1)
    names = [e["args"]["name"] for e in out if e["name"] == "process_name"]
    assert names == ["async / ps:1", "async / worker:0"]


def test_cpp_split_and_mappings():
    assert split_device_name("/job:foo/replica:1/task:2/cpu:1") == ("/job:foo/replica:1/task:2", "CPU:1")
    assert split_device_name("/job:foo/cpu:1/task:2/replica:1") == ("/job:foo/replica:1/task:2", "CPU:1")
    assert split_device_name("/device:GPU:3") == ("", "GPU:3")
    assert split_device_name("gpu:3") is None
    assert split_device_name("/job:foo/task:2/replica:1") is None
    assert split_device_name("/device:myspecialdevice:3") == ("", "myspecialdevice:3")
    p = N("/job:foo/replica:10/task:0/device:GPU:1")
    assert names_for_device_mappings(p) == ["/job:foo/replica:10/task:0/device:GPU:1",
                                            "/job:foo/replica:10/task:0/gpu:1"]
    assert names_for_device_mappings(N("/job:foo/replica:10/device:GPU:1")) == []


def test_cpp_compatibility():
    assert not are_compatible(N("/job:work/replica:1/task:3/device:GPU:*"), N("/device:CPU:*"))
    assert are_compatible(N("/job:work/replica:1/task:3"), N("/device:CPU:*"))


@pytest.mark.parametrize(("pattern", "actual", "expected"), [
    ("/job:*", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/job:*/replica:*", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/job:*/task:*", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/job:*/replica:*/task:*", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/job:*/replica:*/gpu:*", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/cpu:*", "/job:worker/replica:1/task:2/device:GPU:3", False),
    ("/device:GPU:2", "/job:worker/replica:1/task:2/device:GPU:1", False),
    ("/gpu:*", "/job:worker/replica:1/task:2/device:GPU:3", True),
    ("/device:cpu:*", "/job:worker/replica:1/task:2/device:CPU:3", False),
])
def test_cpp_is_complete_specification(pattern, actual, expected):
    assert is_complete_specification(N(pattern), N(actual)) is expected


def test_cpp_is_complete_specification_needs_complete_name():
    with pytest.raises(ValueError):
        is_complete_specification(N("/job:a"), N("/job:a/task:0"))


@pytest.mark.parametrize(("pattern", "actual", "expected"), [
    ("/job:*", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/job:*", "/job:work/replica:1/device:GPU:3", True),
    ("/job:*", "/job:work/replica:1", True),
    ("/job:*", "/replica:1", True),
    ("/job:*", "/job:work", True),
    ("/job:*/replica:*", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/job:work/replica:1/gpu:*", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/job:work/replica:1/device:GPU:3", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/job:work/replica:1/task:2", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/job:work/replica:*/task:2", "/job:work/replica:1/task:2/device:GPU:3", True),
    ("/task:*", "/job:*/replica:1/task:2/device:GPU:3", True),
    ("/task:2", "/job:*/replica:1/task:2/device:GPU:3", True),
    ("/cpu:*", "/job:*/replica:1/task:2/cpu:1", True),
    ("/cpu:0", "/cpu:0", True),
    ("/gpu:*", "/job:worker/replica:1/task:2/device:GPU:3", True),
    ("/job:worker/replica:1/task:2/device:GPU:3", "/gpu:*", False),
    ("/cpu:*", "/job:*/replica:1/task:2", False),
    ("/cpu:*", "/job:*/replica:1/task:2/device:GPU:1", False),
    ("/cpu:*", "/job:worker/replica:1/task:2/device:GPU:3", False),
    ("/device:GPU:2", "/job:worker/replica:1/task:2/device:GPU:1", False),
    ("/job:work/replica:*/task:0", "/job:work/replica:1/task:2/device:GPU:3", False),
    ("/job:work/replica:0/task:2", "/job:work/replica:*/task:2/device:GPU:3", False),
])
def test_cpp_is_specification(pattern, actual, expected):
    assert is_specification(N(pattern), N(actual)) is expected


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("", "", ""),
    ("/job:foo/replica:1/task:2/cpu:1", "/job:foo/replica:1/task:2/cpu:1", "/job:foo/replica:1/task:2/cpu:1"),
    ("", "/job:foo", "/job:foo"),
    ("", "/replica:2", "/replica:2"),
    ("", "/task:7", "/task:7"),
    ("", "/device:GPU:1", "/device:GPU:1"),
    ("/job:foo", "/task:7", "/job:foo/task:7"),
    ("/job:foo", "/device:GPU:1", "/job:foo/device:GPU:1"),
    ("/job:foo/replica:0", "/replica:0/task:1", "/job:foo/replica:0/task:1"),
    ("", "/gpu:*", "/gpu:*"),
    ("/gpu:*", "/gpu:*", "/gpu:*"),
    ("/device:GPU:1", "/gpu:*", "/device:GPU:1"),
])
def test_cpp_merge_dev_names(a, b, expected):
    for soft in (False, True):
        assert merge_dev_names(N(a), N(b), soft) == N(expected)
        assert merge_dev_names(N(b), N(a), soft) == N(expected)


@pytest.mark.parametrize(("a", "b", "kind"), [
    ("/job:foo", "/job:bar", "jobs"),
    ("/replica:0", "/replica:1", "replicas"),
    ("/task:0", "/task:1", "tasks"),
    ("/gpu:*", "/cpu:*", "types"),
    ("/device:GPU:0", "/device:GPU:1", "ids"),
    ("/device:cpu:1", "/device:CPU:1", "types"),
])
def test_cpp_merge_dev_names_errors(a, b, kind):
    with pytest.raises(DeviceMergeError) as info:
        merge_dev_names(N(a), N(b))
    assert info.value.kind == kind
    assert str(info.value) == (f"Cannot merge devices with incompatible {kind}: "
                               f"'{N(a).to_string()}' and '{N(b).to_string()}'")


def test_cpp_merge_error_names_target_as_merged_so_far():
    with pytest.raises(DeviceMergeError, match=r"incompatible tasks: '/job:a/task:1' and '/job:a/task:2'"):
        merge_dev_names(N("/task:1"), N("/job:a/task:2"))
    # job/replica/task conflicts are errors even with soft placement
    with pytest.raises(DeviceMergeError, match="incompatible jobs"):
        merge_dev_names(N("/job:a"), N("/job:b"), allow_soft_placement=True)
    with pytest.raises(DeviceMergeError, match="incompatible tasks"):
        merge_override_dev_names(N("/task:0"), N("/task:1"))


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("/gpu:*", "/cpu:1", ""),
    ("/cpu:*", "/device:GPU:1", ""),
    ("/device:GPU:1", "/device:GPU:2", "/device:GPU:*"),
    ("/job:a/device:GPU:1", "/device:CPU:1/task:3", "/job:a/task:3"),
])
def test_cpp_merge_dev_names_soft(a, b, expected):
    assert merge_dev_names(N(a), N(b), allow_soft_placement=True) == N(expected)
    assert merge_dev_names(N(b), N(a), allow_soft_placement=True) == N(expected)


def test_cpp_soft_merge_is_order_dependent():
    b, a, zz = N("/device:CPU:1"), N("/device:CPU:0"), N("/device:CPU:2")
    assert merge_dev_names(merge_dev_names(b, a, True), zz, True) == N("/device:CPU:2")
    assert merge_dev_names(merge_dev_names(b, zz, True), a, True) == N("/device:CPU:0")


@pytest.mark.parametrize(("target", "name", "expected"), [
    ("", "", ""),
    ("/job:foo/replica:1/task:2/cpu:1", "/job:foo/replica:1/task:2/cpu:1", "/job:foo/replica:1/task:2/cpu:1"),
    ("", "/job:foo", "/job:foo"),
    ("", "/replica:2", "/replica:2"),
    ("", "/task:7", "/task:7"),
    ("", "/device:GPU:1", "/device:GPU:1"),
    ("/job:foo", "/task:7", "/job:foo/task:7"),
    ("/job:foo", "/device:GPU:1", "/job:foo/device:GPU:1"),
    ("/job:foo/replica:0", "/replica:0/task:1", "/job:foo/replica:0/task:1"),
    ("", "/gpu:*", "/gpu:*"),
    ("/gpu:*", "/gpu:*", "/gpu:*"),
    ("/device:GPU:1", "/gpu:*", "/device:GPU:1"),
    ("/gpu:0", "/cpu:1", "/cpu:1"),
    ("/gpu:*", "/cpu:1", "/cpu:1"),
    ("/cpu:*", "/device:GPU:1", "/gpu:1"),
    ("/device:GPU:1", "/device:GPU:2", "/device:GPU:2"),
    ("/job:foo/CPU:*", "/device:GPU:1", "/job:foo/GPU:1"),
    ("/cpu:*", "/job:foo/device:GPU:1", "/job:foo/GPU:1"),
    ("/task:0/cpu:*", "/device:GPU:1", "/task:0/GPU:1"),
    ("/cpu:*", "/task:0/device:GPU:1", "/task:0/GPU:1"),
])
def test_cpp_merge_override_dev_names(target, name, expected):
    assert merge_override_dev_names(N(target), N(name)) == N(expected)


@pytest.mark.parametrize(("a", "b", "ab", "ba"), [
    ("", "", "", ""),
    ("/job:foo/replica:1/task:2/cpu:1", "/job:foo/replica:1/task:2/cpu:1",
     "/job:foo/replica:1/task:2/cpu:1", "/job:foo/replica:1/task:2/cpu:1"),
    ("", "/job:foo", "/job:foo", "/job:foo"),
    ("", "/replica:2", "/replica:2", "/replica:2"),
    ("", "/task:7", "/task:7", "/task:7"),
    ("", "/device:GPU:1", "/device:GPU:1", "/device:GPU:1"),
    ("/job:foo", "/task:7", "/job:foo/task:7", "/job:foo/task:7"),
    ("/job:foo", "/device:GPU:1", "/job:foo/device:GPU:1", "/job:foo/device:GPU:1"),
    ("/job:foo/replica:0", "/replica:0/task:1", "/job:foo/replica:0/task:1", "/job:foo/replica:0/task:1"),
    ("", "/gpu:*", "/gpu:*", "/gpu:*"),
    ("/gpu:*", "/gpu:*", "/gpu:*", "/gpu:*"),
    ("/device:GPU:1", "/gpu:*", "/device:GPU:1", "/device:GPU:1"),
    ("/job:foo", "/job:bar", "/job:foo", "/job:bar"),
    ("/replica:0", "/replica:1", "/replica:0", "/replica:1"),
    ("/task:0", "/task:1", "/task:0", "/task:1"),
    ("/gpu:*", "/cpu:*", "/gpu:*", "/cpu:*"),
    ("/device:GPU:0", "/device:GPU:1", "/device:GPU:0", "/device:GPU:1"),
    ("/job:foo/device:GPU", "/job:bar", "/job:foo/device:GPU", "/job:bar/device:GPU"),
])
def test_cpp_merge_unset_dev_names(a, b, ab, ba):
    assert merge_unset_dev_names(N(a), N(b)) == N(ab)
    assert merge_unset_dev_names(N(b), N(a)) == N(ba)


@st.composite
def _parsed_names(draw):
    opt = st.none() | st.integers(0, 2**31 - 1)
    return ParsedName(
        draw(st.none() | st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,6}", fullmatch=True)), draw(opt), draw(opt),
        draw(st.none() | st.sampled_from(["CPU", "GPU", "cpu", "XLA_CPU", "myspecialdevice"])), draw(opt))


@settings(max_examples=300, deadline=None)
@given(pn=_parsed_names(), other=_parsed_names())
def test_cpp_properties(pn, other):
    assert parse_full_name(pn.to_string()) == (pn if pn.type is not None or pn.id is None
                                               else ParsedName(pn.job, pn.replica, pn.task))
    assert is_specification(ParsedName(), pn) and is_specification(pn, pn)
    if are_compatible(pn, other):
        merged = merge_dev_names(pn, other)
        assert merged == merge_dev_names(other, pn)
        assert is_specification(pn, merged) and is_specification(other, merged)
    else:
        with pytest.raises(DeviceMergeError):
            merge_dev_names(pn, other)
    assert merge_unset_dev_names(pn, other) == merge_unset_dev_names(pn, merge_unset_dev_names(pn, other))


# ----------------------------------------------------------------------------------------------
# Device sets and TF's device order (device_set.cc / device_set_test.cc)
# ----------------------------------------------------------------------------------------------

def test_device_set_of_a_cluster():
    cluster = ClusterSpec.from_dict({"ps": {0: "a:1", 5: "b:1"}, "worker": ["w0:1", "w1:1"], "chief": ["c:1"]})
    ds = DeviceSet(cluster, cpus_per_task=2, gpus_per_worker=1)
    assert ds.names == [
        "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:0/device:CPU:1",
        "/job:ps/replica:0/task:5/device:CPU:0", "/job:ps/replica:0/task:5/device:CPU:1",
        "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:1",
        "/job:worker/replica:0/task:0/device:GPU:0",
        "/job:worker/replica:0/task:1/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:1",
        "/job:worker/replica:0/task:1/device:GPU:0",
        "/job:chief/replica:0/task:0/device:CPU:0", "/job:chief/replica:0/task:0/device:CPU:1",
    ]
    assert all(d.parsed.is_complete and d.parsed.to_string() == d.name for d in ds)
    assert len(DeviceSet(cluster)) == 5
    assert [d.name for d in ds.matching(N("/job:worker/device:GPU:*"))] == [
        "/job:worker/replica:0/task:0/device:GPU:0", "/job:worker/replica:0/task:1/device:GPU:0"]
    assert [d.name for d in ds.matching("/job:ps/task:5/cpu:1")] == ["/job:ps/replica:0/task:5/device:CPU:1"]
    assert ds.matching(N("/job:ps/task:1")) == []
    assert ds.matching(N("/device:cpu:0")) == []  # types are case-sensitive
    assert ds.find("/job:ps/replica:0/task:5/cpu:1") is ds.find("/job:ps/replica:0/task:5/device:CPU:1")
    assert "/job:ps/replica:0/task:5/cpu:1" in ds and ds.find("/job:ps/task:5/cpu:1") is None
    assert ds.device_types() == ["GPU", "CPU"]
    assert DeviceSet.local(3).names == [f"/job:localhost/replica:0/task:0/device:CPU:{k}" for k in range(3)]
    assert DeviceSet(ClusterSpec.from_ps_tasks(1), gpus_per_worker=2, gpu_jobs=("worker", "ps")).device_types() \
        == ["GPU", "CPU"]


@pytest.mark.parametrize("cluster", [{"my-job": ["a:1"]}, {"1ps": ["a:1"]}, {"ps": {-1: "a:1"}}])
def test_device_set_rejects_names_tf_cannot_parse(cluster):
    with pytest.raises(ClusterError):
        DeviceSet(cluster)


def test_device_type_priorities():
    # DeviceFactory priorities: GPU 210 > CPU 60 (70 in CUDA builds) > default 50 > unknown -1.
    assert DEVICE_TYPE_PRIORITY["GPU"] > DEVICE_TYPE_PRIORITY["CPU"] > DEVICE_TYPE_PRIORITY["XLA_CPU"]
    ds = DeviceSet.from_names(["/job:a/replica:0/task:0/device:d1:0", "/job:a/replica:0/task:0/device:d2:0",
                               "/job:a/replica:0/task:0/device:d3:0"])
    table = {"d1": 50, "d2": 51, "d3": 49}  # device_set_test.cc PrioritizedDeviceTypeList
    assert ds.device_types(table) == ["d2", "d1", "d3"]
    assert [d.device_type for d in ds.sorted(type_priority=table)] == ["d2", "d1", "d3"]


def test_sort_prioritized_device_vector_like_device_set_test():
    names = {k: f"/job:a/replica:0/task:0/device:{k[:2]}:{k[3]}" for k in
             ("d1_0", "d2_0", "d3_0", "d1_1", "d2_1", "d3_1")}
    table = {"d1": 50, "d2": 51, "d3": 49}
    # SortPrioritizedDeviceVector: the pair's int first; type priority / name break ties.
    # Modelled with one kernel priority per device type, which is what the placer passes.
    kernel = {"d3": 30, "d2": 20, "d1": 20}
    order = sort_devices(names.values(), kernel, type_priority=table)
    assert [d.name for d in order] == [names[k] for k in ("d3_0", "d3_1", "d2_0", "d2_1", "d1_0", "d1_1")]


def test_sort_devices_tf2_order():
    ds = DeviceSet(ClusterSpec.from_dict({"ps": ["p0:1", "p1:1"], "worker": ["w0:1", "w1:1"]}),
                   cpus_per_task=11, gpus_per_worker=1)
    # DirectSession-like (all local): GPU first, then names as plain strings (CPU:10 < CPU:2).
    order = [d.name for d in ds.sorted()]
    assert order[:2] == ["/job:worker/replica:0/task:0/device:GPU:0", "/job:worker/replica:0/task:1/device:GPU:0"]
    assert order[2:5] == ["/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:0/device:CPU:1",
                          "/job:ps/replica:0/task:0/device:CPU:10"]
    # Master = worker:1: its own devices first (after type priority), remote ones after.
    order = [d.name for d in ds.sorted(master_task="/job:worker/task:1")]
    assert order[0] == "/job:worker/replica:0/task:1/device:GPU:0"
    assert order[1] == "/job:worker/replica:0/task:0/device:GPU:0"
    assert order[2] == "/job:worker/replica:0/task:1/device:CPU:0"
    assert order[13] == "/job:ps/replica:0/task:0/device:CPU:0"
    # docs/tf-behaviours.md, "The placer": with master worker:1, /job:worker -> worker:1, /job:ps -> ps:0.
    assert sort_devices(ds.matching(N("/job:worker/device:CPU:*")), master_task="/job:worker/replica:0/task:1")[0] \
        .name == "/job:worker/replica:0/task:1/device:CPU:0"
    assert sort_devices(ds.matching(N("/job:ps")), master_task="/job:worker/task:1")[0].name == \
        "/job:ps/replica:0/task:0/device:CPU:0"
    assert sort_devices(ds.matching(N("/job:ps")), master_task="/job:ps/task:1")[0].name == \
        "/job:ps/replica:0/task:1/device:CPU:0"
    # Kernel priority beats type priority; types without a kernel are dropped.
    assert sort_devices(ds, {"CPU": 1, "GPU": 0})[0].device_type == "CPU"
    assert {d.device_type for d in sort_devices(ds, {"CPU": 0})} == {"CPU"}
    with pytest.raises(DeviceSpecError):
        sort_devices(ds, master_task="/job:worker")
    assert sort_devices(["/job:b/replica:0/task:0/cpu:0", Device.from_name("/job:a/replica:0/task:0/device:CPU:0")])[
        0].name == "/job:a/replica:0/task:0/device:CPU:0"
    with pytest.raises(DeviceSpecError):
        Device.from_name("/job:a/device:CPU:0")


# ----------------------------------------------------------------------------------------------
# The placer itself (DirectSession, 3 CPUs, Grappler off)
# ----------------------------------------------------------------------------------------------

def _run_direct_session(tf, nodes, fetch, soft, raw=True):
    """Run ``fetch`` of a hand-built GraphDef; return {node: device} or the error's first lines.

    ``raw``: after ``import_graph_def`` put every NodeDef's device string back unchanged, so the
    C++ placer sees the GraphDef's own strings (the importer re-applies them through tf.device).
    """
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

    gd = tf.compat.v1.GraphDef()
    for n in nodes:
        nd = gd.node.add(name=n["name"], op=n["op"], device=n.get("device", ""), input=n.get("inputs", []))
        nd.attr["dtype" if n["op"] == "Const" else "T"].type = tf.float32.as_datatype_enum
        if n["op"] == "Const":
            nd.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(1.0))
        if "cls" in n:
            nd.attr["_class"].list.s.extend(c.encode() for c in n["cls"])
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    if raw:
        for nd in gd.node:
            g.get_operation_by_name(nd.name)._set_device_from_string(nd.device)
    config = config_pb2.ConfigProto(device_count={"CPU": 3}, allow_soft_placement=soft)
    config.graph_options.rewrite_options.CopyFrom(rewriter_config_pb2.RewriterConfig(disable_meta_optimizer=True))
    config.graph_options.optimizer_options.opt_level = config_pb2.OptimizerOptions.L0  # no CSE / folding
    with tf.compat.v1.Session(graph=g, config=config) as sess:
        meta = config_pb2.RunMetadata()
        try:
            sess.run([g.get_operation_by_name(f) for f in fetch],
                     options=config_pb2.RunOptions(output_partition_graphs=True), run_metadata=meta)
        except tf.errors.InvalidArgumentError as e:
            return " ".join(e.message.split())
    return {nd.name: nd.device for pg in meta.partition_graphs for nd in pg.node if not nd.name.startswith("_")}


def _cpu(k: int) -> str:
    return f"/job:localhost/replica:0/task:0/device:CPU:{k}"


@pytest.mark.tf
def test_placer_lowercase_types(tf):
    two = [dict(name="a", op="Const", device="/device:cpu:1"),
           dict(name="b", op="Identity", inputs=["a"], device="/device:cpu:1")]
    # Raw GraphDef: "cpu" is a type of its own and names no device.
    err = _run_direct_session(tf, two, ["b"], soft=False)
    assert isinstance(err, str) and "was explicitly assigned to /device:cpu:1 but available devices are" in err
    assert _run_direct_session(tf, two, ["b"], soft=True) == {"a": _cpu(0), "b": _cpu(0)}
    # Through Python's importer the string is canonicalised first (= canonical_device).
    assert canonical_device("/device:cpu:1") == "/device:CPU:1"
    assert _run_direct_session(tf, two, ["b"], soft=False, raw=False) == {"a": _cpu(1), "b": _cpu(1)}
    # Legacy pieces are uppercased by the C++ parser; the bare local form is malformed for the placer.
    legacy = [dict(name="a", op="Const", device="/cpu:2"), dict(name="b", op="Identity", inputs=["a"], device="/CPU:2")]
    assert _run_direct_session(tf, legacy, ["b"], soft=False) == {"a": _cpu(2), "b": _cpu(2)}
    local = [dict(name="a", op="Const", device="cpu:2")]
    err = _run_direct_session(tf, local, ["a"], soft=True)
    assert isinstance(err, str) and "Malformed device specification 'cpu:2'" in err
    assert parse_full_name("cpu:2") is None
    # A group joining /device:cpu:1 and /device:CPU:1: incompatible types, TF's message = ours.
    mixed = [dict(name="a", op="Const", device="/device:cpu:1"),
             dict(name="b", op="Identity", inputs=["a"], device="/device:CPU:1", cls=["loc:@a"])]
    err = _run_direct_session(tf, mixed, ["b"], soft=False)
    with pytest.raises(DeviceMergeError) as ours:
        merge_dev_names(N("/device:CPU:1"), N("/device:cpu:1"))
    assert isinstance(err, str) and str(ours.value) in err


_TYPE_CASES = ["/device:cpu:1", "/device:Cpu:1", "/device:cPU:1", "/device:CPU:1", "/cpu:1", "/Cpu:1",
               "/device:cpu:5", "/device:CPU:*"]


def _built_in_python(tf, device):
    """A Const built under ``tf.device(device)`` in Python, run: {node: device} or TF's error."""
    g = tf.Graph()
    with g.as_default(), tf.compat.v1.device(device):
        tf.constant(1.0, name="a")
        tf.identity(g.get_tensor_by_name("a:0"), name="b")
    nodes = [dict(name=n.name, op=n.op, inputs=list(n.input), device=n.device) for n in g.as_graph_def().node]
    return _run_direct_session(tf, nodes, ["b"], soft=False, raw=False)


@pytest.mark.tf
@pytest.mark.parametrize("device", _TYPE_CASES)
def test_requested_device_types_match_tf(tf, device):
    """Device types: TF's placer (``device_count {CPU: 3}``) runs a node pinned to ``device`` exactly
    when :meth:`DeviceSet.requested` names a device, and on that device: built in Python, read with
    ``import_graph_def`` (both through DeviceSpec: ``cpu`` upper-cased, ``Cpu`` not) and raw
    (``python_import=False``: ``cpu`` is a type of its own). PV103 reads devices this way."""
    devices = DeviceSet.local(cpus=3)
    nodes = [dict(name="a", op="Const", device=device), dict(name="b", op="Identity", inputs=["a"], device=device)]
    for python_import, ran in ((True, _built_in_python(tf, device)),
                               (True, _run_direct_session(tf, nodes, ["b"], soft=False, raw=False)),
                               (False, _run_direct_session(tf, nodes, ["b"], soft=False, raw=True))):
        ours = devices.requested(device, python_import)
        if ours is None:  # TF cannot parse it (raw /Cpu:1: ParseFullName knows /cpu: and /CPU: only)
            assert isinstance(ran, str) and f"Malformed device specification '{device}'" in ran, ran
        elif isinstance(ran, str):  # TF: no device matches
            assert "was explicitly assigned to" in ran, ran
            assert ours == [], (device, python_import)
        else:
            assert ran["b"] in [d.name for d in ours], (device, python_import)


@pytest.mark.tf
def test_placer_soft_merge_of_class_groups(tf):
    """docs/tf-behaviours.md, "The placer": b (CPU:1) joined by ``_class`` to a (CPU:0) and zz (CPU:2)."""

    def graph(classes):
        return [dict(name="a", op="Const", device="/device:CPU:0"), dict(name="zz", op="Const", device="/device:CPU:2"),
                dict(name="b", op="Identity", inputs=["zz"], device="/device:CPU:1", cls=classes)]

    fetch = ["a", "zz", "b"]
    # Without soft placement: the first merge (b with a) fails with TF's message, which is ours.
    err = _run_direct_session(tf, graph(["loc:@a", "loc:@zz"]), fetch, soft=False)
    with pytest.raises(DeviceMergeError) as ours:
        merge_dev_names(N("/device:CPU:1"), N("/device:CPU:0"))
    assert str(ours.value) == "Cannot merge devices with incompatible ids: '/device:CPU:1' and '/device:CPU:0'"
    assert isinstance(err, str) and str(ours.value) in err
    # Through Python's importer (the setup of the test above) b first takes a's device (CPU:0):
    # the group merges to CPU:* and lands on the first device, CPU:0.
    placed = _run_direct_session(tf, graph(["loc:@a", "loc:@zz"]), fetch, soft=True, raw=False)
    assert placed == {"a": _cpu(0), "zz": _cpu(0), "b": _cpu(0)}
    group = merge_dev_names(merge_dev_names(N("/device:CPU:0"), N("/device:CPU:0"), True), N("/device:CPU:2"), True)
    assert group == N("/device:CPU:*")
    # Raw devices: merges in _class order; a later merge sets the cleared id again.
    for classes, first, second, k in ((["loc:@a", "loc:@zz"], "/device:CPU:0", "/device:CPU:2", 2),
                                      (["loc:@zz", "loc:@a"], "/device:CPU:2", "/device:CPU:0", 0)):
        placed = _run_direct_session(tf, graph(classes), fetch, soft=True)
        assert placed == {"a": _cpu(k), "zz": _cpu(k), "b": _cpu(k)}, classes
        group = merge_dev_names(merge_dev_names(N("/device:CPU:1"), N(first), True), N(second), True)
        assert group == N(f"/device:CPU:{k}")


def test_device_modules_import_one_way():
    """The package's modules mirror one TF source each and import each other in one direction only.

    The Python grammar (``device_spec``) and the C++ one (``device_name_utils``) never import each
    other; both sit on ``errors``; ``cluster_spec`` needs neither; ``device_set`` builds on the C++
    grammar and the cluster, and reads a NodeDef's device through the Python one first
    (``requested_device``: what reaches the placer from Python). Read with ``ast``, so a violation
    fails here, not as an import cycle.
    """
    import ast
    from pathlib import Path

    import placeviz.devices

    allowed = {"errors": set(), "device_spec": {"errors"}, "device_name_utils": {"errors"},
               "cluster_spec": set(), "device_set": {"errors", "device_name_utils", "device_spec", "cluster_spec"}}
    package = Path(placeviz.devices.__file__).parent
    assert {p.stem for p in package.glob("*.py")} == set(allowed) | {"__init__"}
    for name, may_import in allowed.items():
        imported = set()
        for node in ast.walk(ast.parse((package / f"{name}.py").read_text(encoding="utf-8"))):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            imported |= {m.split(".")[2] for m in modules if m.startswith("placeviz.devices.")}
            assert not any(m == "placeviz.devices" or m.split(".")[0] == "tensorflow" for m in modules), name
        assert imported <= may_import, (name, imported - may_import)
