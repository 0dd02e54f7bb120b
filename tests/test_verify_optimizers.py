"""The ``values`` check's numpy replay against TensorFlow itself, no mocks.

a) Every ``tf.compat.v1.train`` optimizer, dense and sparse (``tf.gather`` gives ``IndexedSlices``
   gradients, with repeated indices), on ref and resource variables: one subprocess (``DIFF``)
   builds each case in its own graph, runs a few ``apply_gradients`` steps in a local
   ``tf.compat.v1.Session`` and records what ``verify`` records (the variables and slots before and
   after, and per step the non-state inputs of the update op). The test replays them with
   placeviz's models through the roles :func:`placeviz.verify.plan.update_plan` reads from the
   graph, i.e. with :func:`placeviz.verify.checks.check_values` itself. Kernel cases (``raw_*``)
   call the ops directly: repeated indices in ``SparseApply*`` ops, ``update_slots=False``,
   ``multiply_linear_by_lr=True`` and AdagradV2, which ``tf.compat.v1.train`` does not reach.
b) TF's own ``sync_replicas_optimizer_test.py`` graphs (``test2Workers``, ``test3Workers1Backup``)
   under ``placeviz verify`` on a local cluster: see :func:`test_tf_sync_replicas_test_graphs`.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from placeviz.graph import Graph
from placeviz.protos import GraphDef
from placeviz.verify import optimizers as models
from placeviz.verify.checks import ATOL, RTOL, check_values
from placeviz.verify.plan import OPTIMIZERS, not_replayed_note, replayed_summary, update_plan
from tests.conftest import run_cli

HAS_TF = importlib.util.find_spec("tensorflow") is not None
ROOT = Path(__file__).parents[1]
STEPS = 3

# name -> (tf.compat.v1.train constructor (``gs``: the global step), dense op, sparse op on a ref
# variable, sparse op on a resource variable). The resource twin of an Apply op is "Resource" + op.
OPTIMIZER_CASES = {
    "gd": ("v1.train.GradientDescentOptimizer(0.3)", "ApplyGradientDescent", "ScatterSub", "ResourceScatterAdd"),
    "momentum": ("v1.train.MomentumOptimizer(0.1, 0.9)", "ApplyMomentum", "SparseApplyMomentum", None),
    "momentum_nesterov": ("v1.train.MomentumOptimizer(0.1, 0.8, use_nesterov=True)", "ApplyMomentum",
                          "SparseApplyMomentum", None),
    "adam": ("v1.train.AdamOptimizer(0.05)", "ApplyAdam", "AssignSub", "AssignSubVariableOp"),
    "adam_locking": ("v1.train.AdamOptimizer(0.05, beta1=0.8, beta2=0.99, epsilon=1e-3, use_locking=True)",
                              "ApplyAdam", "AssignSub", "AssignSubVariableOp"),
    "adagrad": ("v1.train.AdagradOptimizer(0.2, initial_accumulator_value=0.3)", "ApplyAdagrad",
                "SparseApplyAdagrad", None),
    "adagrad_da": ("v1.train.AdagradDAOptimizer(0.2, gs)", "ApplyAdagradDA", "SparseApplyAdagradDA", None),
    "adagrad_da_l1_l2": ("v1.train.AdagradDAOptimizer(0.2, gs, l1_regularization_strength=0.01, "
                         "l2_regularization_strength=0.02)", "ApplyAdagradDA", "SparseApplyAdagradDA", None),
    "rmsprop": ("v1.train.RMSPropOptimizer(0.05)", "ApplyRMSProp", "SparseApplyRMSProp", None),
    "rmsprop_momentum": ("v1.train.RMSPropOptimizer(0.05, decay=0.8, momentum=0.9, epsilon=1e-6)", "ApplyRMSProp",
                         "SparseApplyRMSProp", None),
    "rmsprop_centered": ("v1.train.RMSPropOptimizer(0.05, momentum=0.5, epsilon=1e-3, centered=True)",
                         "ApplyCenteredRMSProp", "SparseApplyCenteredRMSProp", None),
    "adadelta": ("v1.train.AdadeltaOptimizer(1.0, rho=0.9, epsilon=1e-2)", "ApplyAdadelta", "SparseApplyAdadelta",
                 None),
    "ftrl": ("v1.train.FtrlOptimizer(0.3, l1_regularization_strength=0.001, l2_regularization_strength=0.01)",
             "ApplyFtrl", "SparseApplyFtrl", None),
    "ftrl_power_beta": ("v1.train.FtrlOptimizer(0.3, learning_rate_power=-0.3, l2_regularization_strength=0.01, "
                        "beta=0.1)", "ApplyFtrl", "SparseApplyFtrl", None),
    "ftrl_shrinkage": ("v1.train.FtrlOptimizer(0.3, l1_regularization_strength=0.001, l2_regularization_strength=0.01, "
                       "l2_shrinkage_regularization_strength=0.05)", "ApplyFtrlV2", "SparseApplyFtrlV2", None),
    "proximal_gd": ("v1.train.ProximalGradientDescentOptimizer(0.2)", "ApplyProximalGradientDescent",
                    "SparseApplyProximalGradientDescent", None),
    "proximal_gd_l1_l2": ("v1.train.ProximalGradientDescentOptimizer(0.2, l1_regularization_strength=0.01, "
                          "l2_regularization_strength=0.05)", "ApplyProximalGradientDescent",
                          "SparseApplyProximalGradientDescent", None),
    "proximal_adagrad": ("v1.train.ProximalAdagradOptimizer(0.3)", "ApplyProximalAdagrad",
                         "SparseApplyProximalAdagrad", None),
    "proximal_adagrad_l1_l2": ("v1.train.ProximalAdagradOptimizer(0.3, l1_regularization_strength=0.01, "
                               "l2_regularization_strength=0.05)", "ApplyProximalAdagrad",
                               "SparseApplyProximalAdagrad", None),
}

# Kernel cases: the op called directly (tf.raw_ops) on ref variables unless "resource"; ``dup``:
# repeated indices (the kernels with a sequential loop; SparseApplyAdagrad(V2) shard theirs).
RAW_CASES = {
    "raw_sparse_momentum_dup_nesterov": {"op": "SparseApplyMomentum", "dup": True, "attrs": {"use_nesterov": True}},
    "raw_sparse_rmsprop_dup": {"op": "SparseApplyRMSProp", "dup": True},
    "raw_sparse_centered_rmsprop_dup": {"op": "SparseApplyCenteredRMSProp", "dup": True},
    "raw_sparse_adadelta_dup": {"op": "SparseApplyAdadelta", "dup": True},
    "raw_sparse_ftrl_dup": {"op": "SparseApplyFtrl", "dup": True},
    "raw_sparse_ftrl_v2_dup_mlr": {"op": "SparseApplyFtrlV2", "dup": True, "attrs": {"multiply_linear_by_lr": True}},
    "raw_ftrl_mlr": {"op": "ApplyFtrl", "attrs": {"multiply_linear_by_lr": True}},
    "raw_ftrl_v2_mlr": {"op": "ApplyFtrlV2", "attrs": {"multiply_linear_by_lr": True}},
    "raw_ftrl_v2": {"op": "ApplyFtrlV2"},
    "raw_sparse_proximal_gd_dup": {"op": "SparseApplyProximalGradientDescent", "dup": True},
    "raw_sparse_proximal_adagrad_dup": {"op": "SparseApplyProximalAdagrad", "dup": True},
    "raw_sparse_adagrad_da_dup": {"op": "SparseApplyAdagradDA", "dup": True},
    "raw_adam_nesterov": {"op": "ApplyAdam", "attrs": {"use_nesterov": True}},
    "raw_adagrad_no_update_slots": {"op": "ApplyAdagrad", "attrs": {"update_slots": False}},
    "raw_adagrad_v2": {"op": "ApplyAdagradV2"},
    "raw_resource_adagrad_v2": {"op": "ResourceApplyAdagradV2", "resource": True},
    "raw_sparse_adagrad_v2": {"op": "SparseApplyAdagradV2"},
    "raw_resource_sparse_adagrad_v2_no_update_slots": {"op": "ResourceSparseApplyAdagradV2", "resource": True,
                                                       "attrs": {"update_slots": False}},
    "raw_resource_scatter_sub_dup": {"op": "ResourceScatterSub", "dup": True, "resource": True},
    "raw_scatter_add_dup": {"op": "ScatterAdd", "dup": True},
}


def _optimizer_cases() -> dict[str, dict]:
    out = {}
    for name, (ctor, dense, sparse_ref, sparse_res) in OPTIMIZER_CASES.items():
        for sparse, resource in itertools.product((False, True), (False, True)):
            if sparse:
                expected = sparse_ref if not resource else sparse_res or "Resource" + sparse_ref
            else:
                expected = "Resource" + dense if resource else dense
            key = f"{name}-{'sparse' if sparse else 'dense'}-{'resource' if resource else 'ref'}"
            out[key] = {"ctor": ctor, "sparse": sparse, "resource": resource, "expected": expected}
    return out


CASES = {**_optimizer_cases(), **{k: {**v, "raw": True, "expected": v["op"]} for k, v in RAW_CASES.items()}}

DIFF = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()
v1 = tf.compat.v1
cases, steps, out = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
WRITERS = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply")
OTHER_WRITERS = {"ScatterSub", "ScatterAdd", "ResourceScatterSub", "ResourceScatterAdd", "AssignSub",
                 "AssignSubVariableOp"}
ROWS, COLS = 6, 3
IDS = [1, 4, 1, 5, 4]  # repeated indices: the gather's gradient is IndexedSlices with duplicates


def writes(op, var):
    if not (op.type.startswith(WRITERS) or op.type in OTHER_WRITERS) or not op.inputs:
        return False
    return op.inputs[0].op.name == var.op.name


def optimizer_graph(spec, rs):
    var = v1.get_variable("var", initializer=rs.randn(ROWS, COLS).astype(np.float32))
    gs = v1.train.get_or_create_global_step()
    if spec["sparse"]:
        rows = tf.gather(var, IDS)
        target = tf.constant(rs.randn(len(IDS), COLS).astype(np.float32))
        loss = tf.reduce_sum(tf.square(rows - target) * tf.constant(rs.rand(len(IDS), COLS).astype(np.float32)))
    else:
        target = tf.constant(rs.randn(ROWS, COLS).astype(np.float32))
        loss = tf.reduce_sum(tf.square(var - target) * tf.constant(rs.rand(ROWS, COLS).astype(np.float32)))
    opt = eval(spec["ctor"], {"v1": v1, "gs": gs})
    gv = opt.compute_gradients(loss, var_list=[var])
    assert isinstance(gv[0][0], tf.IndexedSlices) == spec["sparse"], gv
    train = opt.apply_gradients(gv, global_step=gs)
    return var, train


def raw_graph(spec, rs):
    """One kernel call per run on ``var`` and slots made here (positive accumulators)."""
    op = spec["op"]
    resource = spec.get("resource", False)
    base = op[len("Resource"):] if op.startswith("Resource") else op
    sparse = base.startswith(("Sparse", "Scatter"))
    ids = [1, 3, 1, 0, 3] if spec.get("dup") else [1, 3, 0]

    def variable(name, value):
        return v1.get_variable(name, initializer=np.asarray(value, np.float32), use_resource=resource)

    var = variable("var", rs.randn(ROWS, COLS))
    pos = lambda name: variable(name, 0.1 + rs.rand(ROWS, COLS))  # noqa: E731
    zero = lambda name: variable(name, np.zeros((ROWS, COLS)))  # noqa: E731
    # the gradient changes with the variable (tanh of the rows it updates), so every step differs
    read = tf.identity(var.read_value() if resource else var)
    if sparse:
        grad = tf.tanh(tf.gather(read, ids)) + tf.constant(rs.randn(len(ids), COLS).astype(np.float32))
    else:
        grad = tf.tanh(read) + tf.constant(rs.randn(ROWS, COLS).astype(np.float32))
    ref = (lambda v: v.handle) if resource else (lambda v: v._ref())  # noqa: E731
    f = lambda x: tf.constant(x, tf.float32)  # noqa: E731
    args = {"var": ref(var)}
    slots = {
        "Momentum": [("accum", zero)], "RMSProp": [("ms", pos), ("mom", zero)],
        "CenteredRMSProp": [("mg", zero), ("ms", pos), ("mom", zero)],
        "Adadelta": [("accum", zero), ("accum_update", zero)], "FtrlV2": [("accum", pos), ("linear", zero)],
        "Ftrl": [("accum", pos), ("linear", zero)], "ProximalAdagrad": [("accum", pos)],
        "AdagradDA": [("gradient_accumulator", zero), ("gradient_squared_accumulator", pos)],
        "AdagradV2": [("accum", pos)], "Adagrad": [("accum", pos)], "ProximalGradientDescent": [],
        "Adam": [("m", zero), ("v", zero)],
    }
    name = base.replace("SparseApply", "").replace("Apply", "")
    for role, make in slots.get(name, []):
        args[role] = ref(make(role))
    hyper = {
        "Momentum": {"lr": f(0.1), "momentum": f(0.8)},
        "RMSProp": {"lr": f(0.05), "rho": f(0.8), "momentum": f(0.5), "epsilon": f(1e-3)},
        "CenteredRMSProp": {"lr": f(0.05), "rho": f(0.8), "momentum": f(0.5), "epsilon": f(1e-1)},
        "Adadelta": {"lr": f(1.0), "rho": f(0.9), "epsilon": f(1e-2)},
        "Ftrl": {"lr": f(0.3), "l1": f(0.001), "l2": f(0.01), "lr_power": f(-0.5)},
        "FtrlV2": {"lr": f(0.3), "l1": f(0.001), "l2": f(0.01), "l2_shrinkage": f(0.05), "lr_power": f(-0.5)},
        "ProximalGradientDescent": {"alpha": f(0.2), "l1": f(0.01), "l2": f(0.05)},
        "ProximalAdagrad": {"lr": f(0.3), "l1": f(0.01), "l2": f(0.05)},
        "AdagradDA": {"lr": f(0.2), "l1": f(0.01), "l2": f(0.02),
                      "global_step": tf.constant(3, tf.int64)},
        "Adagrad": {"lr": f(0.2)}, "AdagradV2": {"lr": f(0.2), "epsilon": f(0.1)},
        "Adam": {"beta1_power": f(0.81), "beta2_power": f(0.98), "lr": f(0.05), "beta1": f(0.9), "beta2": f(0.99),
                 "epsilon": f(1e-3)},  # constant beta powers: nothing updates them here
    }
    if name in ("ScatterSub", "ScatterAdd"):
        args = {("resource" if resource else "ref"): ref(var), "indices": tf.constant(ids), "updates": grad * 0.3}
    else:
        args.update(hyper[name])
        if name == "ProximalGradientDescent" and not sparse:
            args["delta"] = grad
        else:
            args["grad"] = grad
        if sparse:
            args["indices"] = tf.constant(ids)
    args.update(spec.get("attrs", {}))
    train = getattr(tf.raw_ops, op)(**args)
    return var, train


manifest = {}
for key, spec in cases.items():
    g = tf.Graph()
    rs = np.random.RandomState(sorted(cases).index(key))
    with g.as_default():
        with v1.variable_scope(v1.get_variable_scope(), use_resource=spec.get("resource", False)):
            before = set(g.get_operations())
            var, train = (raw_graph if spec.get("raw") else optimizer_graph)(spec, rs)
        updates = [op for op in g.get_operations() if op not in before and writes(op, var)
                   and not op.name.startswith(var.op.name + "/")]
        fetches = sorted({t.name for op in updates for t in op.inputs
                          if not t.dtype._is_ref_dtype and t.dtype != tf.resource})
        variables = {v.op.name: v for v in v1.global_variables()}
        init = v1.global_variables_initializer()
    arrays = {}
    with v1.Session(graph=g) as sess:
        sess.run(init)
        for name, value in sess.run(variables).items():
            arrays[f"initial/{name}"] = value
        for k in range(1, steps + 1):
            got = sess.run({"train": train, "fetch": {t: g.get_tensor_by_name(t) for t in fetches}})
            for t, value in got["fetch"].items():
                arrays[f"s{k}/{t}"] = value
        for name, value in sess.run(variables).items():
            arrays[f"final/{name}"] = value
    np.savez(os.path.join(out, key + ".npz"), **{k.replace("/", "|"): np.asarray(v) for k, v in arrays.items()})
    with open(os.path.join(out, key + ".pb"), "wb") as fh:
        fh.write(g.as_graph_def().SerializeToString())
    manifest[key] = {"variable": var.op.name, "updates": [op.name for op in updates],
                     "update_types": [op.type for op in updates]}
with open(os.path.join(out, "manifest.json"), "w") as fh:
    json.dump(manifest, fh)
'''


@pytest.fixture(scope="module")
def tf_runs(tmp_path_factory) -> Path:
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("optimizer_runs")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", DIFF, json.dumps(CASES), str(STEPS), str(out)], capture_output=True,
                          text=True, env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    print(f"{len(CASES)} TF optimizer cases built and run in {time.monotonic() - t0:.1f} s")
    return out


def _case(out: Path, key: str):
    manifest = json.loads((out / "manifest.json").read_text())[key]
    graph = Graph(GraphDef.FromString((out / f"{key}.pb").read_bytes()))
    with np.load(out / f"{key}.npz") as data:
        arrays = {k.replace("|", "/"): data[k] for k in data.files}
    plans = [update_plan(graph, op, manifest["variable"], None) for op in manifest["updates"]]
    plan = {"updates": [asdict(p) for p in plans]}
    result = {"failure": None, "sync_runs": [{"step": k} for k in range(1, STEPS + 1)]}
    return manifest, plans, plan, result, arrays


@pytest.mark.tf
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize("key", sorted(CASES))
def test_replay_matches_tensorflow(tf_runs, key):
    """TF's variables and slots after STEPS updates equal the numpy replay from the recorded inputs."""
    spec = CASES[key]
    manifest, plans, plan, result, arrays = _case(tf_runs, key)
    assert manifest["update_types"] == [spec["expected"]], manifest
    check = check_values(plan, result, arrays)
    (p,) = plans
    if spec["expected"] in ("AssignSub", "AssignSubVariableOp"):
        # sparse Adam: a composite of Assign/ScatterAdd/AssignSub ops, said, not faked
        assert p.kind is None and "sparse Adam" in p.why
        assert check.status == "skip" and spec["expected"] in check.summary
        assert "sparse Adam" in check.evidence["not_replayed_why"][spec["expected"]]
        return
    assert p.kind is not None, p
    assert check.status == "pass", (check.summary, check.evidence)
    kernel = OPTIMIZERS[p.kind]
    assert set(p.state) | set(p.fetch) == set(kernel.roles)
    # every slot the kernel updates is followed as a variable and compared with TF's final value
    compared = {row["variable"]: row for row in check.evidence["variables"]}
    assert set(compared) == set(p.state.values())
    assert compared[manifest["variable"]]["max_abs_change"] > 100 * ATOL  # the check has something to see
    for row in compared.values():
        assert np.allclose(row["replayed"], row["final"], rtol=RTOL, atol=ATOL)


@pytest.mark.tf
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize("key", ["momentum-sparse-ref", "ftrl_shrinkage-dense-resource", "gd-sparse-resource",
                                 "raw_resource_scatter_sub_dup", "rmsprop_centered-sparse-ref"])
def test_replay_detects_a_wrong_update(tf_runs, key):
    """The same replay fails when TF's update differs: one extra step's worth of change in the variable."""
    manifest, _plans, plan, result, arrays = _case(tf_runs, key)
    v = manifest["variable"]
    arrays[f"final/{v}"] = arrays[f"final/{v}"] + (arrays[f"final/{v}"] - arrays[f"initial/{v}"]) / STEPS
    check = check_values(plan, result, arrays)
    assert check.status == "fail" and v in check.summary


@pytest.mark.tf
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
def test_every_table_kernel_is_exercised():
    """Each kernel of the table (ref or resource form) is run against TF by some case above."""
    seen = {spec["expected"].removeprefix("Resource") for spec in CASES.values()}
    assert {k.op for k in OPTIMIZERS.values()} <= seen


# ------------------------------------------------------------------------------------------------
# Pure parts (no TF)


def test_scatter_updates_accumulate_repeated_indices():
    state = {"var": np.zeros((3, 2))}
    models.scatter_sub(state, {"indices": np.array([2, 0, 2]), "updates": np.array([[1.0, 2], [3, 4], [5, 6]])})
    assert np.array_equal(state["var"], [[-3, -4], [0, 0], [-6, -8]])
    models.scatter_add(state, {"indices": np.array([[1, 1]]), "updates": np.ones((1, 2, 2))})
    assert np.array_equal(state["var"][1], [2, 2])


def test_sparse_kernels_apply_a_repeated_row_twice_in_order():
    """Momentum's accumulator is updated twice, the second time from the first update's value."""
    state = {"var": np.array([[1.0], [2.0]]), "accum": np.array([[0.5], [0.0]])}
    inputs = {"lr": np.float64(0.1), "momentum": np.float64(0.9), "grad": np.array([[1.0], [2.0]]),
              "indices": np.array([0, 0])}
    models.sparse_momentum(state, inputs)
    a1 = 0.5 * 0.9 + 1.0
    a2 = a1 * 0.9 + 2.0
    assert np.allclose(state["accum"], [[a2], [0.0]]) and np.allclose(state["var"], [[1.0 - 0.1 * a1 - 0.1 * a2], [2]])


def test_ftrl_and_proximal_models_match_hand_computed_steps():
    s = {"var": np.array([0.5]), "accum": np.array([0.1]), "linear": np.array([0.0])}
    models.ftrl(s, {"grad": np.array([0.3]), "lr": 0.5, "l1": 0.01, "l2": 0.02, "lr_power": -0.5})
    linear = 0.3 - (np.sqrt(0.19) - np.sqrt(0.1)) / 0.5 * 0.5
    assert np.allclose(s["linear"], linear) and np.allclose(s["accum"], 0.19)
    assert np.allclose(s["var"], (0.01 * np.sign(linear) - linear) / (np.sqrt(0.19) / 0.5 + 0.04))
    s = {"var": np.array([0.05, -1.0])}
    models.proximal_gd(s, {"alpha": 0.1, "l1": 1.0, "l2": 0.0, "delta": np.array([0.0, 1.0])})
    assert np.allclose(s["var"], [0.0, -1.1 + 0.1])  # |0.05| < alpha * l1: shrunk to 0


def test_replayed_summary_is_generated_from_the_table():
    text = replayed_summary()
    for kernel in OPTIMIZERS.values():
        assert kernel.optimizer in text
    assert "GradientDescent (dense and sparse)" in text and "Adam (dense only)" in text

    class U:  # an UpdatePlan-like object
        def __init__(self, op_type, why=None):
            self.op_type, self.kind, self.why = op_type, None, why

    note = not_replayed_note([U("AssignSub", "composite"), U("ApplyAdaMax")])
    assert "AssignSub: composite" in note and "no numpy model of ApplyAdaMax" in note and text in note


def test_values_skip_text_names_the_table():
    plan = {"updates": [{"op": "x", "op_type": "AssignSub", "kind": None, "fetch": {}, "state": {},
                         "use_nesterov": False, "why": "composite"}]}
    check = check_values(plan, {"failure": None, "sync_runs": [{}]}, {})
    assert check.status == "skip" and replayed_summary() in check.summary
    assert check.evidence["not_replayed_why"] == {"AssignSub": "composite"}


# ------------------------------------------------------------------------------------------------
# b) TF's sync_replicas_optimizer_test.py under placeviz verify

SYNC_BUILDER = r"""
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()  # the test is @run_v1_only
sys.path.insert(0, os.path.join("tests", "realworld"))
from programs import _tfsync
from tensorflow.python.framework import tensor_util

out = sys.argv[1]
info = {}
for name, num_workers, replicas_to_aggregate in (("test2Workers", 2, 2), ("test3Workers1Backup", 3, 2)):
    meta = _tfsync.build_chief(num_workers, replicas_to_aggregate, placed=True, sync=True)
    with open(os.path.join(out, name + ".meta"), "wb") as fh:
        fh.write(meta.SerializeToString())
    # get_workers' gradient constants in worker 0's graph: grads_0, grads_1, grads_sparse's values
    consts = {}
    for node in meta.graph_def.node:
        if node.op == "Const" and node.device == "/job:worker/task:0":
            value = tensor_util.MakeNdarray(node.attr["value"].tensor)
            if value.dtype == np.float32:
                consts[node.name] = value
    grads_0 = [n for n, v in consts.items() if v.shape == () and np.isclose(v, 0.1)]
    grads_1 = [n for n, v in consts.items() if v.shape == () and np.isclose(v, 0.9)]
    sparse = [n for n, v in consts.items() if v.shape == (1, 1) and np.isclose(v[0, 0], 0.1)]
    assert len(grads_0) == len(grads_1) == len(sparse) == 1, consts
    # worker i's own graph has constant(0.1 + worker_id * 0.2) etc. (get_workers): what it feeds here
    feeds = {}
    for worker_id in range(num_workers):
        feeds[f"worker{worker_id}/{grads_0[0]}:0"] = np.float32(0.1 + worker_id * 0.2)
        feeds[f"worker{worker_id}/{grads_1[0]}:0"] = np.float32(0.9 + worker_id * 0.2)
        feeds[f"worker{worker_id}/{sparse[0]}:0"] = np.array([[0.1 + worker_id * 0.2]], np.float32)
    np.savez(os.path.join(out, name + "_feeds.npz"), **feeds)
    accumulators = {node.name: node.attr["shared_name"].s.decode().split(":")[0] for node in meta.graph_def.node
                    if node.op.endswith("ConditionalAccumulator")}
    info[name] = {"accumulators": accumulators, "feeds": sorted(feeds)}
with open(os.path.join(out, "info.json"), "w") as fh:
    json.dump(info, fh)
"""

LR = 2.0  # get_workers: GradientDescentOptimizer(2.0)
GRADS = {"v0": lambda w: 0.1 + w * 0.2, "v1": lambda w: 0.9 + w * 0.2, "v_sparse": lambda w: 0.1 + w * 0.2}
INITIAL = {"v0": 0.0, "v1": 1.0, "v_sparse": 4.0}  # v_sparse: row 1, the only row its gradient touches


def tf_test_arithmetic(variable: str, steps: list[list[int]]) -> float:
    """The TF test's arithmetic, e.g. ``0 - (0.1 + 0.3) / 2 * 2.0`` after one step of workers 0 and 1:
    the initial value minus, per global step, the mean of the gradients averaged in it times the
    learning rate; ``steps`` lists the worker of every gradient averaged in each step."""
    value = INITIAL[variable]
    for workers in steps:
        value -= sum(GRADS[variable](w) for w in workers) / len(workers) * LR
    return value


# The TF test's asserted numbers (copied as the test writes them) and the interleaving of workers
# it forces by hand for them: {test: (steps, [(workers averaged per step), ...], {variable: value})}.
TF_ASSERTS = {
    "test2Workers_after_1": (1, [[0, 1]], {"v0": 0 - (0.1 + 0.3) / 2 * 2.0, "v1": 1 - (0.9 + 1.1) / 2 * 2.0,
                                           "v_sparse": [[3.0], [4.0 - (0.1 + 0.3) / 2 * 2.0]]}),
    "test2Workers": (2, [[0, 1], [0, 1]], {"v0": 0 - 2 * (0.1 + 0.3) / 2 * 2.0, "v1": 1 - 2 * (0.9 + 1.1) / 2 * 2.0}),
    "test3Workers1Backup": (2, [[0, 2], [0, 1]], {"v0": -0.6 - (0.1 + 0.3) / 2 * 2.0,
                                                  "v1": -1.2 - (0.9 + 1.1) / 2 * 2.0}),
}
TF_STEP1_3WORKERS = {"v0": 0 - (0.1 + 0.5) / 2 * 2.0, "v1": 1 - (0.9 + 1.3) / 2 * 2.0}  # after workers 0 and 2


def test_tf_test_arithmetic_gives_the_tf_tests_numbers():
    """At the interleaving the TF test forces, the arithmetic is the TF test's asserted numbers."""
    for _key, (_steps, order, expected) in TF_ASSERTS.items():
        for v, value in expected.items():
            got = tf_test_arithmetic(v, order)
            assert np.isclose(got, value if v != "v_sparse" else value[1][0], rtol=1e-6), (v, got, value)
    for v, value in TF_STEP1_3WORKERS.items():
        assert np.isclose(tf_test_arithmetic(v, [[0, 2]]), value)


@pytest.fixture(scope="module")
def sync_graphs(tmp_path_factory) -> Path:
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("tf_sync_test")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", SYNC_BUILDER, str(out)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _workers(names) -> list[int]:
    return [int(n[1:].split("#")[0]) for n in names]  # "w1#3" -> 1


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize("key", sorted(TF_ASSERTS))
def test_tf_sync_replicas_test_graphs(sync_graphs, key, capsys):
    """TF's ``SyncReplicasOptimizerTest`` graphs under ``placeviz verify``, against the test's numbers.

    The graph is ``get_workers``' worker 0 (the chief), built by ``tests/realworld/programs/_tfsync``
    exactly as the test builds it (TF 2.21, ``disable_v2_behavior``): GradientDescent(2.0) wrapped in
    ``SyncReplicasOptimizer`` on ref variables ``v0``, ``v1`` and ``v_sparse`` (whose gradient is an
    ``IndexedSlices``: a ``SparseConditionalAccumulator`` and the chief's ``ScatterSub``), the hook's
    init tokens (``num_tokens=num_workers``), 2 ps tasks. The hook keeps the chief queue runner out of
    the ``queue_runners`` collection, hence ``--chief-queue-runner detected``.

    Every worker of the test builds its own graph, which differs from worker 0's in its worker
    device (verify moves it), in ``is_chief`` (chief-only ops, which verify runs on the chief only)
    and in its gradient constants, ``0.1 + worker_id * 0.2`` etc. verify runs the chief's graph on
    every worker, so ``--feeds`` gives worker i the constants of its own graph (``worker<i>/Const:0``
    keys: a TF1 session feeds any feedable tensor, a ``Const`` too): the workers compute exactly the
    test's gradients.

    What is comparable: the test drives its workers by hand (test2Workers: workers 0 and 1 per
    step; test3Workers1Backup: workers 0 and 2, then, after stale runs, 0 and 1) and asserts the
    numbers of that interleaving. verify runs the workers freely, so which gradients a step averages
    is TF's race (R of that step's gradients, more when a backup's arrives before the take, a fast
    worker's twice when it takes two tokens of one step). The comparable part is the test's
    arithmetic, ``initial - sum over steps of mean(averaged gradients) * 2.0``
    (:func:`tf_test_arithmetic`), evaluated on the gradients each step really averaged
    (``gradients_per_step`` names them per accumulator); for the sparse variable, whose gradients
    verify does not capture, on some choice of R or more of each step's gradients. Where the run's
    interleaving is the test's, this is the test's own numbers
    (:func:`test_tf_test_arithmetic_gives_the_tf_tests_numbers`), compared as written there (for
    ``v_sparse`` only its value can tell which gradients its step averaged, so that comparison
    adds nothing beyond the arithmetic's).
    """
    steps, tf_order, tf_numbers = TF_ASSERTS[key]
    name = key.removesuffix("_after_1")
    workers = 3 if name == "test3Workers1Backup" else 2
    info = json.loads((sync_graphs / "info.json").read_text())[name]
    out = sync_graphs / f"{key}.json"
    t0 = time.monotonic()
    code, stdout, _err = run_cli(["verify", sync_graphs / f"{name}.meta", "--workers", workers, "--steps", steps,
                                    "--chief-queue-runner", "detected", "--feeds", sync_graphs / f"{name}_feeds.npz",
                                    "--format", "json", "-o", out], capsys)
    print(f"verify {key}: exit {code} in {time.monotonic() - t0:.1f} s")
    assert stdout == "", stdout
    report = json.loads(out.read_text())
    checks = {c["id"]: c for c in report["checks"]}
    assert code == 0 and report["ok"], {k: c["summary"] for k, c in checks.items() if c["status"] != "pass"}
    values = checks["values"]
    assert values["status"] == "pass", values["summary"]
    assert values["evidence"]["optimizers"] == ["ApplyGradientDescent", "ScatterSub"]
    final = {row["variable"]: row["final"] for row in values["evidence"]["variables"]}
    assert set(final) == {"v0", "v1", "v_sparse"}  # the sparse variable is replayed too
    assert checks["global_step"]["evidence"]["global_step"] == steps

    # the gradients each step averaged, per dense variable (its accumulator's matched subset)
    rows = checks["gradients_per_step"]["evidence"]["accumulators"]
    used = {info["accumulators"][acc]: [_workers(r["used"]) for r in acc_rows] for acc, acc_rows in rows.items()}
    candidates = [_workers(r["candidates"]) for r in next(iter(rows.values()))]
    for v in ("v0", "v1"):
        assert len(used[v]) == steps
        assert np.isclose(final[v], tf_test_arithmetic(v, used[v]), rtol=1e-5), (v, final[v], used[v])
    # v_sparse: row 0 never moves; row 1 follows the arithmetic for some R-or-more subset per step
    r = 2
    assert final["v_sparse"][0] == [3.0]
    choices = [[list(c) for n in range(r, len(cands) + 1) for c in itertools.combinations(cands, n)]
               for cands in candidates]
    fits = [order for order in itertools.product(*choices)
            if np.isclose(final["v_sparse"][1][0], tf_test_arithmetic("v_sparse", list(order)), rtol=1e-5)]
    assert fits, (final["v_sparse"], candidates)
    print(f"{key}: steps averaged v0 {used['v0']}, v1 {used['v1']}, v_sparse one of {fits}; the TF test's: {tf_order}")
    same = {v: all(sorted(u) == sorted(t) for u, t in zip(orders, tf_order, strict=True))
            for v, orders in (("v0", used["v0"]), ("v1", used["v1"]))}
    same["v_sparse"] = any(all(sorted(u) == sorted(t) for u, t in zip(order, tf_order, strict=True)) for order in fits)
    for v, number in tf_numbers.items():
        if same[v]:  # the run's interleaving is the test's: its number, as written there
            assert np.allclose(final[v], number, rtol=1e-5), (v, final[v], number)
            print(f"{key}: {v} = {final[v]}, the TF test's {number}")


# ------------------------------------------------------------------------------------------------
# verify end to end with other optimizers: dense and sparse (embedding) variables in one graph

E2E_BUILDER = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()
v1 = tf.compat.v1
out, name, ctor, resource = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "resource"
rs = np.random.RandomState(0)
g = tf.Graph()
with g.as_default():
    with v1.variable_scope(v1.get_variable_scope(), use_resource=resource):
        with v1.device(v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0")):
            gs = v1.train.get_or_create_global_step()
            ids = v1.placeholder_with_default(np.array([1, 3, 1, 7], np.int32), [None], name="ids")
            x = v1.placeholder_with_default(rs.randn(4, 4).astype(np.float32), [None, 4], name="x")
            y = v1.placeholder_with_default(rs.randn(4, 1).astype(np.float32), [None, 1], name="y")
            emb = v1.get_variable("emb", [10, 4])
            w = v1.get_variable("w", [4, 1])
            h = tf.nn.embedding_lookup(emb, ids) * x  # IndexedSlices gradient for emb, repeated ids
            loss = tf.reduce_mean(tf.square(tf.matmul(h, w) - y), name="loss")
            opt = eval(ctor, {"v1": v1, "gs": gs})
            sync = v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=2, total_num_replicas=2)
            train = sync.apply_gradients(sync.compute_gradients(loss), global_step=gs)
            sync.get_init_tokens_op()
            v1.train.add_queue_runner(sync.get_chief_queue_runner())
            v1.add_to_collection("train_op", train)
            v1.global_variables_initializer()
        v1.train.export_meta_graph(os.path.join(out, name + ".meta"), graph=g)
"""

E2E = {
    "rmsprop_centered_resource": ("v1.train.RMSPropOptimizer(0.05, momentum=0.5, epsilon=1e-3, centered=True)",
                                  "resource", {"ResourceApplyCenteredRMSProp", "ResourceSparseApplyCenteredRMSProp"}),
    "ftrl_shrinkage_ref": ("v1.train.FtrlOptimizer(0.3, l1_regularization_strength=0.001, "
                           "l2_shrinkage_regularization_strength=0.05)", "ref", {"ApplyFtrlV2", "SparseApplyFtrlV2"}),
    "adagrad_da_ref": ("v1.train.AdagradDAOptimizer(0.2, gs, l1_regularization_strength=0.001)", "ref",
                       {"ApplyAdagradDA", "SparseApplyAdagradDA"}),
    "adam_resource": ("v1.train.AdamOptimizer(0.05)", "resource", {"ResourceApplyAdam"}),
}


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")
@pytest.mark.parametrize("key", sorted(E2E))
def test_verify_replays_other_optimizers_end_to_end(tmp_path, key, capsys):
    """``placeviz verify`` on a SyncReplicas graph with an embedding (sparse) and a dense variable:
    the sync run fetches every update's inputs, the slots are read before and after, and the replay
    passes; sparse Adam's composite update is reported as not replayed, not faked."""
    ctor, resource, optimizers = E2E[key]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", E2E_BUILDER, str(tmp_path), key, ctor, resource],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "report.json"
    code, stdout, _err = run_cli(["verify", tmp_path / f"{key}.meta", "--workers", 2, "--steps", 3, "--format",
                                  "json", "-o", out], capsys)
    assert stdout == ""
    report = json.loads(out.read_text())
    checks = {c["id"]: c for c in report["checks"]}
    assert code == 0 and report["ok"], {k: c["summary"] for k, c in checks.items() if c["status"] != "pass"}
    values = checks["values"]
    assert values["status"] == "pass", values["summary"]
    assert set(values["evidence"]["optimizers"]) == optimizers
    replayed = {row["variable"] for row in values["evidence"]["variables"]}
    assert "w" in replayed and all(row["max_abs_change"] > 0 for row in values["evidence"]["variables"])
    if key.startswith("adam"):
        assert "emb" not in replayed
        assert values["evidence"]["not_replayed"] == ["AssignSubVariableOp"]
        assert "sparse Adam" in values["summary"]
        assert any("sparse Adam" in note for note in report["notes"])
    else:
        assert "emb" in replayed and len(replayed) > 2  # the variables and their slots


def test_assign_sub_is_called_sparse_adam_only_after_a_scatter_add():
    g = GraphDef()
    g.node.add(name="v", op="VariableV2")
    g.node.add(name="m", op="VariableV2")
    g.node.add(name="c", op="Const")
    g.node.add(name="idx", op="Const")
    g.node.add(name="plain", op="AssignSub", input=["v", "c"])
    g.node.add(name="m_t", op="ScatterAdd", input=["m", "idx", "c"])
    g.node.add(name="step", op="Mul", input=["c", "m_t"])
    g.node.add(name="adam", op="AssignSub", input=["v", "step"])
    graph = Graph(g)
    plain, adam = (update_plan(graph, op, "v", None) for op in ("plain", "adam"))
    assert plain.kind is None and plain.why == "no numpy model of AssignSub"
    assert adam.kind is None and adam.why.startswith("sparse Adam's composite update")
