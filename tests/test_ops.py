"""Op facts (placeviz.ops): static behaviour, and differential tests against the installed TF."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from placeviz import ops
from placeviz.errors import PlacevizError
from placeviz.protos import DataType, GraphDef, NodeDef

REPO = Path(__file__).resolve().parents[1]
DT = DataType  # enum wrapper: DT.Value("DT_FLOAT") == 1
F32, I32, I64, STRING, RESOURCE = 1, 3, 9, 7, 20
REF = 100


@pytest.fixture(scope="module")
def table() -> ops.OpTable:
    return ops.load_op_table()


def node(op: str, name: str = "n", **attrs) -> NodeDef:
    """A NodeDef with attrs given as: int -> type, ("i", n), ("b", x), ("s", str), [types] -> list(type)."""
    n = NodeDef(name=name, op=op)
    for k, v in attrs.items():
        if isinstance(v, list):
            n.attr[k].list.type.extend(v)
        elif isinstance(v, tuple):
            kind, val = v
            if kind == "s":
                n.attr[k].s = val.encode()
            else:
                setattr(n.attr[k], kind, val)
        else:
            n.attr[k].type = v
    return n


# ------------------------------------------------------------------------------------------------
# Static behaviour (no TensorFlow needed)


def test_table_header(table):
    assert table.tf_version
    assert {"CPU", "DEFAULT"} <= table.kernel_device_types_seen
    assert {"CPU", "DEFAULT"} <= table.kernel_device_types_complete <= table.kernel_device_types_seen
    assert {"VariableV2", "VarHandleOp", "ResourceConditionalAccumulator"} <= table.ps_ops()
    assert "DEFAULT" not in table.default_device_types
    assert len(table) > 1000 and "MatMul" in table and "NoSuchOp" not in table
    assert ops.load_op_table() is table  # cached


def test_facts_of_known_ops(table):
    v = table.get("VariableV2")
    assert v.is_stateful and v.is_ps_op and v.inputs == ()
    assert v.outputs == (ops.ArgSpec("ref", 0, "dtype", "", "", True),)
    assert v.attrs["container"] == ops.AttrSpec("string", True, "")
    m = table.get("MatMul")
    assert not m.is_stateful and not m.is_ps_op
    assert [a.name for a in m.inputs] == ["a", "b"]
    assert all(k.constraints.keys() == {"T"} for k in m.kernels["CPU"])
    assert table.get("NoSuchOp") is None
    assert table.op_def("ConcatV2").name == "ConcatV2"
    assert table.default_attrs("MatMul")["transpose_a"].b is False


def test_input_output_types_expand_attrs(table):
    concat = node("ConcatV2", T=F32, N=("i", 3), Tidx=I32)
    assert table.input_types(concat) == (F32, F32, F32, I32)
    assert table.output_types(concat) == (F32,)
    # Tidx has a default (int32): dropping it changes nothing.
    del concat.attr["Tidx"]
    assert table.input_types(concat) == (F32, F32, F32, I32)
    idn = node("IdentityN", T=[F32, I64, STRING])
    assert table.input_types(idn) == table.output_types(idn) == (F32, I64, STRING)
    assign = node("Assign", T=F32)
    assert table.input_types(assign) == (F32 + REF, F32)
    assert table.output_types(assign) == (F32 + REF,)
    assert table.is_ref_or_resource_input(assign, 0) and not table.is_ref_or_resource_input(assign, 1)
    assert not table.is_ref_or_resource_input(assign, 7)
    ra = node("ResourceApplyAdam", T=F32)
    assert table.input_types(ra) == (RESOURCE,) * 3 + (F32,) * 7
    assert table.output_types(ra) == ()
    assert table.output_types(node("NoOp")) == () and table.input_types(node("NoOp")) == ()
    assert table.output_types(node("Unpack", T=F32, num=("i", 4))) == (F32,) * 4
    assert table.io_types(node("Unknown_Op")) is None
    assert table.input_types(node("Unknown_Op")) is None
    assert not table.is_ref_or_resource_input(node("Unknown_Op"), 0)


def test_missing_attr_without_default_raises(table):
    with pytest.raises(ops.NodeAttrError, match="'N'") as e:
        table.input_types(node("ConcatV2", name="c", T=F32))
    assert isinstance(e.value, PlacevizError) and "'c'" in str(e.value)


def test_cache_does_not_mix_attr_values(table):
    a = table.input_types(node("ConcatV2", T=F32, N=("i", 2)))
    b = table.input_types(node("ConcatV2", T=I64, N=("i", 4)))
    assert a == (F32, F32, I32) and b == (I64,) * 4 + (I32,)


def test_supported_device_types(table):
    assert table.supported_device_types(node("MatMul", T=F32), ["CPU"]) == [("CPU", 0)]
    assert table.supported_device_types(node("MatMul", T=DT.Value("DT_UINT8")), ["CPU"]) == []
    # A DEFAULT kernel serves any device type that has no matching kernel of its own.
    assert table.supported_device_types(node("VarHandleOp", dtype=F32), ["GPU", "CPU", "FOO"]) == [
        ("GPU", 0),
        ("CPU", 0),
        ("FOO", 0),
    ]
    assert table.supported_device_types(node("VarHandleOp", dtype=F32), ["DEFAULT"]) == [("DEFAULT", 0)]
    # Priorities sort first (stable otherwise): iterator ops prefer CPU (2) over GPU (1).
    it = node("IteratorV2", output_types=[F32], output_shapes=[])
    assert table.supported_device_types(it, ["GPU", "CPU"]) == [("CPU", 2), ("GPU", 1)]
    assert table.supported_device_types(node("Unknown_Op")) is None
    racc = node("ResourceConditionalAccumulator", dtype=F32)
    assert [d for d, _ in table.supported_device_types(racc, registered_only=True)] == ["CPU"]
    assert [d for d, _ in table.supported_device_types(racc, ["GPU", "CPU"])] == ["CPU"]
    # Tri-state: complete device types say False, partial ones say unknown.
    assert table.kernel_support(node("MatMul", T=DT.Value("DT_UINT8")), "CPU") is False
    assert table.kernel_support(node("MatMul", T=F32), "CPU") is True
    if "GPU" not in table.kernel_device_types_complete:
        assert table.kernel_support(node("MatMul", T=F32), "GPU") is None
    else:
        assert table.kernel_support(node("MatMul", T=F32), "GPU") is True
        assert table.kernel_support(node("MatMul", T=DT.Value("DT_UINT8")), "GPU") is False
    assert table.kernel_support(node("Const", dtype=F32), "GPU") is True  # DEFAULT kernel
    assert table.host_memory_args(node("Const", dtype=I32), "GPU") == ("output",)
    assert table.host_memory_args(node("Const", dtype=F32), "GPU") == ()


def test_kernel_labels(table):
    # DataFormatDimMap has CPU kernels with and without the "host" label.
    facts = table.get("DataFormatDimMap")
    labels = {k.label for k in facts.kernels["CPU"]}
    assert "host" in labels
    plain = node("DataFormatDimMap", T=I32)
    labelled = node("DataFormatDimMap", T=I32, _kernel=("s", "host"))
    nolabel = node("DataFormatDimMap", T=I32, _kernel=("s", "nope"))
    assert table.supported_device_types(plain, ["CPU"]) == [("CPU", 0)]
    assert table.supported_device_types(labelled, ["CPU"]) == [("CPU", 0)]
    assert table.supported_device_types(nolabel, ["CPU"]) == []


def test_missing_ops_and_functions(table):
    gd = GraphDef()
    gd.node.add(name="a", op="Const").attr["dtype"].type = F32
    gd.node.add(name="b", op="MyCustomOp")
    gd.node.add(name="c", op="my_fn")
    gd.node.add(name="d", op="MyCustomOp")
    fn = gd.library.function.add()
    fn.signature.name = "my_fn"
    fn.node_def.add(name="x", op="OtherCustomOp")
    fn.node_def.add(name="y", op="Identity")
    assert ops.missing_ops(gd) == ["MyCustomOp", "OtherCustomOp"]
    assert table.missing_ops(list(gd.node)) == ["MyCustomOp", "my_fn"]
    with pytest.raises(ops.UnknownOpError) as e:
        table.check_known(gd)
    assert e.value.ops == ["MyCustomOp", "OtherCustomOp"] and "MyCustomOp" in str(e.value)
    gd2 = GraphDef()
    gd2.node.add(name="a", op="NoOp")
    table.check_known(gd2)


def test_show(table, capsys):
    text = ops.format_op("ResourceConditionalAccumulator", table)
    assert "default ps op (replica_device_setter): yes" in text and "CPU:" in text
    d = ops.describe_op("MatMul", table)
    assert d["schema"] == "placeviz.op/1" and d["inputs"][0]["type_attr"] == "T"
    json.dumps(d)
    with pytest.raises(ops.UnknownOpError, match="did you mean: MatMul"):
        ops.describe_op("Matmul", table)
    from conftest import run_cli

    code, out, _ = run_cli(["ops", "show", "Const"], capsys)
    assert code == 0 and "DEFAULT:" in out
    code, _, err = run_cli(["ops", "show", "Matmul"], capsys)
    assert code == 2 and "did you mean" in err


def test_load_errors(tmp_path):
    with pytest.raises(ops.OpFactsError, match="cannot be read"):
        ops.load_op_table(tmp_path / "none.json.gz")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b"{not json"))
    with pytest.raises(ops.OpFactsError, match="corrupt"):
        ops.load_op_table(bad)
    other = tmp_path / "other.json"
    other.write_text('{"schema": "x"}')
    with pytest.raises(ops.OpFactsError, match="not a placeviz op-facts table"):
        ops.load_op_table(other)


def test_env_var_overrides_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PLACEVIZ_OP_FACTS", str(tmp_path / "t.json.gz"))
    assert ops.default_table_path() == tmp_path / "t.json.gz"


def test_static_core_does_not_import_tensorflow():
    code = (
        "import sys, time; t = time.perf_counter(); import placeviz.ops as o; "
        "tab = o.load_op_table(); from placeviz.protos import NodeDef; "
        "n = NodeDef(name='c', op='ConcatV2'); n.attr['T'].type = 1; n.attr['N'].i = 2; "
        "assert tab.input_types(n) == (1, 1, 3), tab.input_types(n); "
        "assert tab.supported_device_types(NodeDef(name='v', op='VarHandleOp')) is not None; "
        "o.format_op('Assign', tab); "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'; "
        "print(time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 2.0


# ------------------------------------------------------------------------------------------------
# GPU kernels: the shipped table comes from TF's CUDA-enabled wheel; "unknown" is never "absent"

HALF, UINT8 = 19, 4
GPU0 = "/job:worker/task:0/device:GPU:0"
NO_GPU_KERNEL_OP = "MatrixSquareRoot"  # CPU kernels only, in TF's CUDA build too


def test_shipped_table_has_the_gpu_kernels_of_the_cuda_build(table):
    assert table.build["is_cuda_build"] and "GPU" in table.kernel_device_types_complete
    assert table.generated_by["distribution"] == "tensorflow" and table.generated_by["cuda_version"]
    assert "CUDA" in table.build_label() and table.tf_version in table.build_label()
    l2 = node("L2Loss", T=F32)
    assert table.supported_device_types(l2, ["GPU", "CPU"]) == [("GPU", 0), ("CPU", 0)]
    assert table.kernel_support(l2, "GPU") is True and table.host_memory_args(l2, "GPU") == ()
    assert table.kernel_support(node("MatMul", T=F32), "GPU") is True
    # Host-memory args of GPU kernels: Shape's output; int32 Sum (a DEFAULT kernel of GPU builds).
    assert table.host_memory_args(node("Shape", T=F32, out_type=I32), "GPU") == ("output",)
    assert set(table.host_memory_args(node("Sum", T=I32, Tidx=I32), "GPU")) == {
        "input",
        "output",
        "reduction_indices",
    }
    assert table.host_memory_args(node("Sum", T=F32, Tidx=I32), "GPU") == ("reduction_indices",)
    # An op that TF's CUDA build has no GPU kernel for: refused, not unknown.
    sqrtm = node(NO_GPU_KERNEL_OP, T=F32)
    assert (
        "GPU" not in table.get(NO_GPU_KERNEL_OP).kernels
        and "DEFAULT" not in table.get(NO_GPU_KERNEL_OP).kernels
    )
    assert table.kernel_support(sqrtm, "GPU") is False
    assert table.supported_device_types(sqrtm, ["GPU", "CPU"]) == [("CPU", 0)]
    assert "partial for TPU" in ops.format_op("L2Loss", table) and "CUDA" in ops.format_op("L2Loss", table)


@pytest.fixture(scope="module")
def cpu_build_table() -> ops.OpTable:
    """The shipped table as a CPU-only build would record it: GPU not complete, GPU kernels missing
    except a half-precision L2Loss one (a recorded kernel that does not fit float nodes)."""
    data = json.loads(gzip.decompress(ops.default_table_path().read_bytes()))
    data["build"] = dict(data["build"], is_cuda_build=False)
    data["generated_by"] = {"distribution": "tensorflow-cpu", "distribution_version": data["tf_version"]}
    data["kernel_device_types_complete"] = ["CPU", "DEFAULT"]
    for facts in data["ops"].values():
        facts.get("kernels", {}).pop("GPU", None)
    data["ops"]["L2Loss"]["kernels"]["GPU"] = [{"priority": 0, "constraints": [["T", "type", [HALF]]]}]
    return ops.OpTable(data, "<cpu-only build>")


def test_unknown_gpu_kernel_is_unknown_not_absent(cpu_build_table):
    t = cpu_build_table
    assert "CPU-only" in t.build_label()
    l2 = node("L2Loss", T=F32)
    # No fitting GPU kernel recorded, GPU incomplete: supported (priority 0), not refused.
    assert t.supported_device_types(l2, ["GPU", "CPU"]) == [("GPU", 0), ("CPU", 0)]
    assert t.supported_device_types(l2, ["GPU", "CPU"], registered_only=True) == [("CPU", 0)]
    assert t.kernel_support(l2, "GPU") is None and t.host_memory_args(l2, "GPU") is None
    assert t.kernel_support(node("L2Loss", T=HALF), "GPU") is True
    sqrtm = node(NO_GPU_KERNEL_OP, T=F32)  # this build cannot tell either
    assert t.supported_device_types(sqrtm, ["GPU", "CPU"]) == [("GPU", 0), ("CPU", 0)]
    assert t.kernel_support(sqrtm, "GPU") is None
    # A complete type still refuses; known priorities still sort first.
    assert t.supported_device_types(node("MatMul", T=UINT8), ["GPU", "CPU"]) == [("GPU", 0)]
    assert t.kernel_support(node("MatMul", T=UINT8), "CPU") is False
    it = node("IteratorV2", output_types=[F32], output_shapes=[])
    assert t.supported_device_types(it, ["GPU", "CPU"]) == [("CPU", 2), ("GPU", 0)]
    # A DEFAULT kernel still serves (with its host-memory args).
    assert t.kernel_support(node("Const", dtype=I32), "GPU") is True
    assert t.host_memory_args(node("Const", dtype=I32), "GPU") == ("output",)
    # Results are cached per flag.
    assert t.supported_device_types(l2, ["GPU", "CPU"]) == [("GPU", 0), ("CPU", 0)]


def _pinned_graph(op: str) -> GraphDef:
    """A Const feeding ``op`` (T=float), both pinned to /job:worker/task:0/device:GPU:0."""
    gd = GraphDef()
    c = gd.node.add(name="c", op="Const", device=GPU0)
    c.attr["dtype"].type = F32
    c.attr["value"].tensor.dtype = F32
    c.attr["value"].tensor.tensor_shape.dim.add(size=2)
    c.attr["value"].tensor.tensor_shape.dim.add(size=2)
    c.attr["value"].tensor.float_val.extend([1.0, 0.0, 0.0, 1.0])
    n = gd.node.add(name="y", op=op, input=["c"], device=GPU0)
    n.attr["T"].type = F32
    return gd


def _place_cli(tmp_path, capsys, op: str, *extra: str) -> tuple[int, dict, str]:
    from conftest import run_cli
    from google.protobuf import text_format

    src = tmp_path / f"{op}.pbtxt"
    src.write_text(text_format.MessageToString(_pinned_graph(op)))
    out = tmp_path / f"{op}.placed.pbtxt"
    code, _, err = run_cli(["place", src, "-o", out, "--gpus-per-worker", "1", *extra], capsys)
    devices = {}
    if code == 0:
        devices = {n.name: n.device for n in text_format.Parse(out.read_text(), GraphDef()).node}
    return code, devices, err


def test_place_l2loss_pinned_to_gpu(tmp_path, capsys):
    """The issue's graph: real TF (CUDA build) runs L2Loss on the GPU."""
    code, devices, err = _place_cli(tmp_path, capsys, "L2Loss")
    assert code == 0, err
    assert devices == {n: "/job:worker/replica:0/task:0/device:GPU:0" for n in ("c", "y")}


def test_op_without_gpu_kernel_is_refused_on_gpu_or_soft_placed(tmp_path, capsys):
    code, _, err = _place_cli(tmp_path, capsys, NO_GPU_KERNEL_OP)
    assert code == 2
    assert "Could not satisfy explicit device specification" in err and "no supported kernel for GPU" in err
    code, devices, err = _place_cli(tmp_path, capsys, NO_GPU_KERNEL_OP, "--soft-placement")
    assert code == 0, err
    assert devices == {
        "c": "/job:worker/replica:0/task:0/device:GPU:0",
        "y": "/job:worker/replica:0/task:0/device:CPU:0",
    }


@pytest.mark.parametrize("op", ["L2Loss", NO_GPU_KERNEL_OP])
def test_incomplete_table_does_not_refuse_gpu_pins(cpu_build_table, op):
    """With a table from a CPU-only build the GPU kernels are unknown: a GPU pin is honoured."""
    from placeviz.graph import Graph
    from placeviz.placement import PlacementOptions, place_graph

    result = place_graph(Graph(_pinned_graph(op)), PlacementOptions(gpus_per_worker=1), cpu_build_table)
    assert result.placement.devices == ["/job:worker/replica:0/task:0/device:GPU:0"] * 2


def test_build_label():
    assert ops.build_label({"tf_version": "2.1"}) == "TensorFlow 2.1 (CPU-only build)"
    gen = {
        "distribution": "tensorflow",
        "distribution_version": "2.21.0",
        "cuda_version": "12.5.1",
        "platform": "linux-x86_64",
    }
    assert ops.build_label({"build": {"is_cuda_build": True}, "generated_by": gen}) == (
        "tensorflow 2.21.0 (CUDA 12.5.1 build, linux-x86_64)"
    )


# ------------------------------------------------------------------------------------------------
# Differential tests against the installed TensorFlow


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def tf_table(tf, tmp_path_factory) -> ops.OpTable:
    """The table of the installed TF's own registries (the CPU wheel in the test venv). The shipped
    table comes from the CUDA-enabled wheel (more GPU and DEFAULT kernels), so the differential
    tests of kernel selection compare TF with a table of the same build;
    test_regenerating_matches_shipped_table relates the two builds. Generated in a fresh process, as
    the shipped one: in this one, earlier tests may have loaded XLA, whose JIT kernels register late
    (see _lazily_registered)."""
    import subprocess
    import sys

    path = tmp_path_factory.mktemp("tf_table") / "op_facts.json.gz"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-m", "placeviz.ops_generate", "-o", str(path)], check=True, env=env,
                   capture_output=True, timeout=600)
    return ops.load_op_table(path)


def _to_pv(nd) -> NodeDef:
    return NodeDef.FromString(nd.SerializeToString())


def _arg_spec(arg) -> ops.ArgSpec:
    return ops.ArgSpec(
        arg.name, int(arg.type), arg.type_attr, arg.number_attr, arg.type_list_attr, bool(arg.is_ref)
    )


@pytest.mark.tf
def test_shipped_table_matches_installed_tf_version(tf, table):
    assert table.tf_version == tf.__version__, (
        f"shipped op facts are for TF {table.tf_version}, installed is {tf.__version__}: "
        "run `placeviz ops generate`"
    )


@pytest.mark.tf
def test_every_op_matches_tf_opdef(tf, tf_table):
    from tensorflow.python.framework import op_def_registry

    table = tf_table
    for name in table.op_types():
        op_def = op_def_registry.get(name)
        assert op_def is not None, name
        facts = table.get(name)
        assert facts.inputs == tuple(_arg_spec(a) for a in op_def.input_arg), name
        assert facts.outputs == tuple(_arg_spec(a) for a in op_def.output_arg), name
        assert facts.is_stateful == op_def.is_stateful, name
        assert list(facts.attrs) == [a.name for a in op_def.attr], name
        for a in op_def.attr:
            assert facts.attrs[a.name].type == a.type, (name, a.name)
            assert facts.attrs[a.name].has_default == a.HasField("default_value"), (name, a.name)
            if a.type == "type" and a.HasField("default_value"):
                assert facts.attrs[a.name].default == a.default_value.type, (name, a.name)
            if a.type == "int" and a.HasField("default_value"):
                assert facts.attrs[a.name].default == a.default_value.i, (name, a.name)
        # The full OpDef round-trips (docs stripped).
        ours = table.op_def(name)
        theirs = type(op_def)()
        theirs.CopyFrom(op_def)
        theirs.summary = theirs.description = ""
        for arg in list(theirs.input_arg) + list(theirs.output_arg):
            arg.description = ""
        for attr in theirs.attr:
            attr.description = ""
        assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True), (
            name
        )


@pytest.mark.tf
def test_every_kernel_matches_tf_registry(tf, tf_table):
    from tensorflow.python.framework import kernels

    table = tf_table
    for name in ["MatMul", "ResourceConditionalAccumulator", "Const", "VarHandleOp", "IteratorV2"]:
        reg = kernels.get_registered_kernels_for_op(name)
        theirs = sorted(
            (
                k.device_type,
                k.priority,
                k.label,
                tuple(
                    (
                        c.name,
                        tuple(c.allowed_values.list.type)
                        or tuple(c.allowed_values.list.s)
                        or tuple(c.allowed_values.list.i)
                        or tuple(c.allowed_values.list.b),
                    )
                    for c in k.constraint
                ),
                tuple(k.host_memory_arg),
            )
            for k in reg.kernel
            if not _lazily_registered(k.device_type)
        )
        ours = sorted(
            (
                dev,
                k.priority,
                k.label,
                tuple(
                    (n, tuple(v.encode() if isinstance(v, str) else v for v in vals))
                    for n, vals in k.constraints.items()
                ),
                k.host_memory,
            )
            for dev, ks in table.get(name).kernels.items()
            for k in ks
        )
        assert ours == theirs, name
    all_k = [k for k in kernels.get_all_registered_kernels().kernel if not _lazily_registered(k.device_type)]
    assert sum(len(ks) for n in table.op_types() for ks in table.get(n).kernels.values()) == len(all_k)
    assert {k.device_type for k in all_k} == set(table.kernel_device_types_seen)
    assert table.get("ResourceConditionalAccumulator").kernels.keys() == {"CPU"}


def _lazily_registered(device_type: str) -> bool:
    """XLA's JIT device kernels register only once something loads XLA (e.g. building a graph that
    touches jit_scope) in this process; the shipped table is generated in a fresh process."""
    return device_type.endswith("_JIT")


def _tf_has_kernel(node_def_pv: NodeDef, device_type: str) -> bool:
    from tensorflow.python.util import _pywrap_kernel_registry

    nd = NodeDef()
    nd.CopyFrom(node_def_pv)
    nd.device = f"/device:{device_type}:0"
    return _pywrap_kernel_registry.TryFindKernelClass(nd.SerializeToString()) != b""


@pytest.mark.tf
def test_kernel_selection_matches_tf_for_every_kernel(tf, tf_table):
    """For every registered kernel, a node satisfying its constraints (and one violating them) gets
    the same yes/no from placeviz (``registered_only``: the build's own answer, no "unknown") as from
    TF's FindKernelDef, on every device type (+ an unknown one, which only DEFAULT kernels serve)."""
    table = tf_table
    bad_type = DT.Value("DT_UINT4") if "DT_UINT4" in DT.keys() else DT.Value("DT_QUINT16")
    checked = mismatches = 0
    problems = []
    seen: set[tuple[bytes, str]] = set()
    for name in table.op_types():
        facts = table.get(name)
        # The op's own device types, CPU, and FOO (served by DEFAULT kernels only).
        device_types = sorted(set(facts.kernels) - {"DEFAULT"} | {"CPU", "FOO"})
        for ks in facts.kernels.values():
            for k in ks:
                for variant in ("fit", "violate"):
                    n = NodeDef(name="n", op=name)
                    if k.label:
                        n.attr["_kernel"].s = k.label.encode()
                    for attr, allowed in k.constraints.items():
                        spec = facts.attrs.get(attr)
                        if spec is None:  # TopK, TileGrad: constraint on an attr the OpDef lacks
                            continue
                        av = n.attr[attr]
                        if spec.type == "type":
                            av.type = allowed[0] if variant == "fit" else bad_type
                        elif spec.type == "list(type)":
                            av.list.type.append(allowed[0] if variant == "fit" else bad_type)
                        elif spec.type == "string":
                            av.s = allowed[0].encode() if variant == "fit" else b"\x00nope"
                        elif spec.type == "int":
                            av.i = allowed[0] if variant == "fit" else -12345
                        elif spec.type == "bool":
                            av.b = allowed[0] if variant == "fit" else not allowed[0]
                    for dev in device_types:
                        key = (n.SerializeToString(deterministic=True), dev)
                        if key in seen:
                            continue
                        seen.add(key)
                        expected = _tf_has_kernel(n, dev)
                        got = table.supported_device_types(n, [dev], registered_only=True)
                        checked += 1
                        if expected != bool(got):
                            mismatches += 1
                            problems.append((name, variant, dev, expected, got, str(n.attr)))
    assert checked > 5000
    assert mismatches == 0, problems[:20]


def _build_graph(tf):
    """A TF1 graph with ref and resource variables, optimizers, accumulators, queues, v1 loops."""
    from tensorflow.python.ops import control_flow_util

    tf1 = tf.compat.v1
    saved_cf2 = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
    try:
        g = tf.Graph()
        with g.as_default():
            x = tf1.placeholder(tf.float32, [None, 4], name="x")
            w_ref = tf1.Variable(tf.ones([4, 3]), name="w_ref", use_resource=False)
            w_res = tf1.Variable(tf.ones([4, 3]), name="w_res", use_resource=True)
            h = tf.matmul(x, w_ref) + tf.matmul(x, w_res)
            loss = tf.reduce_sum(tf.concat([h, h, h], axis=1))
            gs = tf1.train.get_or_create_global_step()
            tf1.train.AdamOptimizer(0.1).minimize(loss, global_step=gs, name="adam")
            tf1.assign(w_ref, tf.zeros([4, 3]), name="assign_ref")
            tf1.assign_add(w_ref, tf.zeros([4, 3]), name="assign_add_ref")
            tf1.scatter_update(w_ref, [0], tf.zeros([1, 3]), name="scatter_ref")
            tf.matmul(tf.constant([[1]], tf.int32), tf.constant([[2]], tf.int32), name="int_matmul")
            tf.identity_n([x, gs, w_res.handle], name="idn")
            tf.shape(x, name="shape")
            tf.shape_n([x, h], name="shape_n")
            tf.unstack(tf.ones([3, 2]), name="unstack")
            tf.split(h, 3, axis=1, name="split")
            tf.add_n([h, h, h], name="add_n")
            acc = tf1.ConditionalAccumulator(tf.float32, shape=[4, 3], name="acc")
            acc.apply_grad(tf.zeros([4, 3]), local_step=0)
            acc.take_grad(1)
            acc.num_accumulated()
            old_acc = tf.raw_ops.ConditionalAccumulator(dtype=tf.float32, shape=[4, 3], name="old_acc")
            tf.raw_ops.AccumulatorApplyGradient(handle=old_acc, local_step=0, gradient=tf.zeros([4, 3]))
            tf.raw_ops.AccumulatorTakeGradient(handle=old_acc, num_required=1, dtype=tf.float32)
            q = tf1.FIFOQueue(4, [tf.float32, tf.int32], name="q")
            q.enqueue([1.0, 2])
            q.dequeue_many(2)
            tf.while_loop(
                lambda i, a: i < 10,
                lambda i, a: (i + 1, a * 2.0),
                [tf.constant(0), tf.constant(1.0)],
                name="loop",
            )
            tf1.cond(x[0, 0] > 0, lambda: tf.identity(x), lambda: x * 2.0, name="cond")
            tf.dynamic_partition(h, tf.constant([0, 1]), 2, name="dynpart")
            tf1.train.SyncReplicasOptimizer  # noqa: B018 (ensures the module imports fine)
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = saved_cf2
    return g


@pytest.fixture(scope="module")
def tf_graph(tf):
    return _build_graph(tf)


@pytest.mark.tf
def test_graph_has_the_interesting_ops(tf_graph):
    types = {op.type for op in tf_graph.get_operations()}
    expected = {
        "VariableV2",
        "VarHandleOp",
        "Assign",
        "AssignAdd",
        "ScatterUpdate",
        "ApplyAdam",
        "ResourceApplyAdam",
        "ResourceConditionalAccumulator",
        "ConditionalAccumulator",
        "AccumulatorApplyGradient",
        "ResourceAccumulatorApplyGradient",
        "IdentityN",
        "ConcatV2",
        "Enter",
        "Merge",
        "Switch",
        "Exit",
        "NextIteration",
        "LoopCond",
        "Const",
        "MatMul",
        "Shape",
        "ShapeN",
        "Unpack",
        "Split",
        "AddN",
        "FIFOQueueV2",
        "QueueEnqueueV2",
        "QueueDequeueManyV2",
        "DynamicPartition",
        "ReadVariableOp",
        "AssignVariableOp",
        "Identity",
    }
    assert expected <= types, expected - types


@pytest.mark.tf
@pytest.mark.parametrize("strip_defaults", [False, True])
def test_io_types_match_tf_operations(tf, table, tf_graph, strip_defaults):
    from tensorflow.python.framework import meta_graph

    nodes = {n.name: n for n in tf_graph.as_graph_def().node}
    if strip_defaults:
        gd = tf_graph.as_graph_def()
        mg = tf.compat.v1.MetaGraphDef()
        mg.graph_def.CopyFrom(gd)
        meta_graph.strip_graph_default_valued_attrs(mg)
        nodes = {n.name: n for n in mg.graph_def.node}
        assert sum(len(n.attr) for n in nodes.values()) < sum(len(n.attr) for n in gd.node)
    for op in tf_graph.get_operations():
        nd = _to_pv(nodes[op.name])
        # Declared input types (what TF's placer checks for ref/resource edges). They equal the
        # incoming tensors' dtypes except that a ref tensor may feed a non-ref input (auto-deref).
        want_in = tuple(t.as_datatype_enum for t in op._input_types)
        got_in = tuple(t.dtype.as_datatype_enum for t in op.inputs)
        assert all(w == g or g == w + REF for w, g in zip(want_in, got_in, strict=True)), op.name
        want_out = tuple(t.dtype.as_datatype_enum for t in op.outputs)
        assert table.input_types(nd) == want_in, (op.name, op.type)
        assert table.output_types(nd) == want_out, (op.name, op.type)
        for i, t in enumerate(want_in):
            assert table.is_ref_or_resource_input(nd, i) == (t == RESOURCE or t > REF), (op.name, i)
    # Ref dtypes really occur.
    assign = _to_pv(nodes["assign_ref"])
    assert table.input_types(assign)[0] == F32 + REF
    assert table.output_types(_to_pv(nodes["old_acc"])) == (STRING + REF,)


@pytest.mark.tf
def test_supported_device_types_match_tf_for_graph_nodes(tf, tf_table, table, tf_graph):
    device_types = sorted(tf_table.kernel_device_types_seen - {"DEFAULT"}) + ["FOO"]
    for n in tf_graph.as_graph_def().node:
        nd = _to_pv(n)
        got = {d for d, _ in tf_table.supported_device_types(nd, device_types, registered_only=True)}
        want = {d for d in device_types if _tf_has_kernel(nd, d)}
        assert got == want, (n.name, n.op)
        # The shipped table (another build of the same TF) agrees on CPU.
        assert table.kernel_support(nd, "CPU") == ("CPU" in want), (n.name, n.op)
    by_name = {n.name: _to_pv(n) for n in tf_graph.as_graph_def().node}
    assert [d for d, _ in table.supported_device_types(by_name["int_matmul"], ["CPU"])] == ["CPU"]
    for name in ("acc", "old_acc"):
        assert [d for d, _ in table.supported_device_types(by_name[name], ["GPU", "CPU"])] == ["CPU"]


@pytest.mark.tf
def test_v2_control_flow_and_function_library(tf, table):
    g = tf.Graph()
    with g.as_default():
        tf.while_loop(lambda i: i < 3, lambda i: i + 1, [tf.constant(0)])
    gd = GraphDef.FromString(g.as_graph_def().SerializeToString())
    assert {"While", "StatelessWhile"} & {n.op for n in gd.node}
    assert ops.missing_ops(gd, table) == []
    for op in g.get_operations():
        nd = _to_pv(op.node_def)
        assert table.output_types(nd) == tuple(t.dtype.as_datatype_enum for t in op.outputs), op.name


@pytest.mark.tf
def test_ps_ops_read_from_tf(tf, table):
    from tensorflow.python.training import device_setter

    assert table.ps_ops_ordered() == tuple(device_setter.STANDARD_PS_OPS)


@pytest.mark.tf
def test_regenerating_matches_shipped_table(tmp_path):
    """`placeviz ops generate` under the installed TF gives the shipped table byte for byte when the
    builds match. Under another build of the same TF (the test venv's CPU wheel vs the CUDA-enabled
    wheel the shipped table comes from), the shipped table must hold the same OpDefs and exactly the
    same CPU kernels, and every kernel the installed build registers; extra DEFAULT kernels (GPU-only
    host-memory ones) must not change what any CPU node selects."""
    out = tmp_path / "op_facts.json.gz"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    res = subprocess.run(
        [sys.executable, "-m", "placeviz", "ops", "generate", "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert f"wrote {out}" in res.stdout and "default ps ops: Variable, VariableV2" in res.stdout
    assert "  from: " in res.stdout
    shipped = ops.default_table_path()
    fresh = json.loads(gzip.decompress(out.read_bytes()))
    old = json.loads(gzip.decompress(shipped.read_bytes()))
    assert fresh.keys() == old.keys()
    stale = "shipped op facts are stale: run `placeviz ops generate` under the shipped build ({})"
    if fresh["build"] == old["build"] and fresh["generated_by"] == old["generated_by"]:
        for key in fresh:
            if key != "ops":
                assert fresh[key] == old[key], key
        changed = sorted(
            k for k in fresh["ops"].keys() | old["ops"].keys() if fresh["ops"].get(k) != old["ops"].get(k)
        )
        assert not changed, stale.format(f"{len(changed)} ops differ, e.g. {changed[:5]}")
        assert out.read_bytes() == shipped.read_bytes()
        return
    # Another build of the same TF.
    for key in ("schema", "tf_version", "tf_git_version", "standard_ps_ops", "standard_ps_ops_source"):
        assert fresh[key] == old[key], key
    assert set(fresh["kernel_device_types_seen"]) <= set(old["kernel_device_types_seen"])
    assert set(fresh["kernel_device_types_complete"]) <= set(old["kernel_device_types_complete"])
    assert fresh["ops"].keys() <= old["ops"].keys(), stale.format(
        sorted(fresh["ops"].keys() - old["ops"].keys())
    )
    default_changed = []
    for name, f in fresh["ops"].items():
        o = old["ops"][name]
        assert {k: v for k, v in f.items() if k != "kernels"} == {
            k: v for k, v in o.items() if k != "kernels"
        }, name
        fk, ok = f.get("kernels", {}), o.get("kernels", {})
        assert fk.get("CPU") == ok.get("CPU"), name
        for dev, ks in fk.items():
            extra = [k for k in ks if k not in ok.get(dev, ())]
            assert not extra, (name, dev, extra)
        if fk.get("DEFAULT") != ok.get("DEFAULT"):
            default_changed.append(name)
    # The extra DEFAULT kernels do not change any CPU node's kernel or memory types.
    fresh_t, old_t = ops.OpTable(fresh), ops.OpTable(old)
    for name in default_changed:
        for k in old["ops"][name]["kernels"]["DEFAULT"]:
            n = NodeDef(name="n", op=name)
            for attr, kind, allowed in k.get("constraints", []):
                assert kind == "type"
                n.attr[attr].type = allowed[0]
            assert fresh_t.supported_device_types(n, ["CPU"]) == old_t.supported_device_types(n, ["CPU"]), (
                name
            )
            assert fresh_t.host_memory_args(n, "CPU") == old_t.host_memory_args(n, "CPU"), name
