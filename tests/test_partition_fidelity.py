"""Partitioning against TensorFlow itself: the partition graphs of real runs on a local cluster.

Every sample model (and a few graphs built here for control flow, host memory, feeds and two CPUs
per task) is built with TF's API and run on a local cluster (servers on 127.0.0.1, Grappler off,
L0): the init runs, then one training step. For each run, placeviz partitions TF's own placed graph
(placed by placeviz's placer, which agrees with TF's) for the same fetches, targets and feeds, and
the test compares with ``RunMetadata.partition_graphs``:

* per device, the set of original nodes that ran there (nodes the runtime moved or replicated
  included);
* the transfers as multisets of (source node, slot or control, destination device), and also of
  (source, slot, source device, destination device, level, send op, recv op), the runtime's
  names and node order being opaque;
* the Consts replicated by ReplicateConstantsPass and the devices of their copies;
* and every partition GraphDef placeviz builds imports into TF.

Each case prints ``partition <sample> <config>: agree X / Y`` (nodes + transfers; run ``pytest -s``).
The TF runs are started up front, two at a time, in subprocesses.
"""

from __future__ import annotations

import collections
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from placeviz.devices import ClusterSpec
from placeviz.graph import Graph
from placeviz.io import model_from_bytes
from placeviz.partition import partition
from placeviz.placement import PlacementOptions, place_graph
from placeviz.placement.placer import PlacerConfig
from placeviz.protos import GraphDef
from placeviz.verify.compare import runtime_nodes, transfer_key

pytestmark = [pytest.mark.tf, pytest.mark.slow]

SAMPLES = ["mlp", "inception", "wide_deep", "lstm", "hashtable", "transformer", "misconfigured"]
CONFIGS = {
    "ps2": dict(ps_tasks=2),
    "sync": dict(ps_tasks=2, sync_replicas=True),
    "resource": dict(ps_tasks=2, resource_variables=True),
}
CASES = [(s, c) for s in SAMPLES for c in CONFIGS]
HAND_BUILT = ["loops", "moves", "loopconst"]


# ------------------------------------------------------------------------------ building
def _build_sample(name: str, config: str) -> dict:
    from placeviz import sample_graphs
    from placeviz.sample_graphs.options import BuildOptions, SyncCollections

    meta = sample_graphs.build_meta_graph(name, BuildOptions(**CONFIGS[config]))
    names = {n.name for n in meta.graph_def.node}
    init = [n for n in ("init", "local_init") if n in names]
    coll = meta.collection_def
    if SyncCollections.INIT_TOKENS_OP in coll:  # else the train step blocks on the token queue
        init += [v.split(":")[0] for v in coll[SyncCollections.INIT_TOKENS_OP].node_list.value]
    train = [v.split(":")[0] for v in coll["train_op"].node_list.value]
    return {"graph_def": meta.graph_def.SerializeToString(), "meta": meta, "init": init, "targets": train,
            "fetches": [], "feeds": {}, "cpus": 1, "soft": name == "misconfigured"}


def _build_loops() -> dict:
    """TF1 while loops (nested) whose bodies span three devices: TF adds ``_cloop`` control loops."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default(), tf.device("/job:worker/task:0"):
        with tf.device("/job:ps/task:0"):
            w = tf.compat.v1.get_variable("w", initializer=tf.constant([0.5, 0.5]), use_resource=False)

        def body(i, x):
            with tf.device("/job:ps/task:0"):
                y = x * w

            def inner(j, z):
                with tf.device("/job:ps/task:1"):
                    z2 = z + 1.0
                return j + 1, z2

            _, z = tf.compat.v1.while_loop(lambda j, z: j < 2, inner, [tf.constant(0), y])
            return i + 1, tf.compat.v1.cond(i > 0, lambda: z * 3.0, lambda: z) + 1.0

        r = tf.compat.v1.while_loop(lambda i, x: i < 3, body, [tf.constant(0), tf.constant([1.0, 2.0])],
                                    name="outer")
        out = tf.identity(r[1], name="out")
        with tf.device("/job:ps/task:1"):
            q = tf.square(tf.compat.v1.placeholder_with_default(tf.constant([3.0, 4.0]), [2], name="p"), name="q")
        s = tf.add(out, q, name="s")
        with tf.device("/job:worker/task:0/device:CPU:1"):
            t = tf.multiply(s, 2.0, name="t")
            u = tf.multiply(q, 3.0, name="u")
        tf.add_n([t, u, q], name="v")
        tf.compat.v1.global_variables_initializer()
    return {"graph_def": g.as_graph_def().SerializeToString(), "init": ["init"], "targets": [],
            "fetches": ["v", "s"], "feeds": {}, "cpus": 2, "soft": False}


def _build_loop_const() -> dict:
    """A small Const in a TF1 loop body (a control input from the loop's pivot) read on two tasks:
    ReplicateConstantsPass copies it to each, and the copies stay in the loop's frame."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default(), tf.device("/job:worker/task:0"):
        def body(i, x):
            k = tf.constant([2.0, 3.0], name="k")
            with tf.device("/job:ps/task:0"):
                y = x * k
            with tf.device("/job:ps/task:1"):
                z = x + k
            return i + 1, y + z

        r = tf.compat.v1.while_loop(lambda i, x: i < 3, body, [tf.constant(0), tf.constant([1.0, 2.0])], name="lp")
        tf.identity(r[1], name="out")
    return {"graph_def": g.as_graph_def().SerializeToString(), "init": [], "targets": [],
            "fetches": ["out"], "feeds": {}, "cpus": 2, "soft": False}


def _build_moves() -> dict:
    """Host-memory tensors (shape, string), a fed placeholder with control edges, a fetched Const,
    two CPUs per task, and hand-placed Switch/Enter nodes that the runtime moves to their data."""
    import numpy as np
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            w = tf.compat.v1.get_variable("w", initializer=tf.constant([[0.5, 0.5], [1.0, 2.0]]),
                                          use_resource=False)
            s = tf.strings.as_string(tf.reduce_sum(w), name="s")
            k = tf.constant([1.0, 2.0], name="k")
            ps_noop = tf.no_op(name="ps_noop")
            r = tf.reduce_sum(w, name="r")
        with tf.device("/job:worker/task:0"):
            p = tf.compat.v1.placeholder(tf.float32, [2], name="p")
            with tf.control_dependencies([p]):
                q = tf.identity(w, name="q")
            pred = tf.reduce_sum(p) > 0
            c = tf.compat.v1.cond(pred, lambda: w * 2.0, lambda: w, name="c")
            f = tf.fill(tf.shape(w, name="sh"), 1.0, name="f")
            tf.identity(tf.strings.length(s), name="ln2")
            with tf.control_dependencies([ps_noop]):
                a0 = tf.add(c, f, name="a0")
            with tf.device("/job:worker/task:0/device:CPU:1"):
                with tf.control_dependencies([ps_noop]):
                    a1 = tf.multiply(w, q, name="a1")
                a2 = tf.add(a1, k, name="a2")
            with tf.device("/job:ps/task:1"):
                a3 = tf.multiply(a2, k, name="a3")
            c2 = tf.compat.v1.cond(pred, lambda: r * 2.0, lambda: r + 1.0, name="c2")
            inv = tf.reduce_sum(p, name="inv")

            def body(i, x):
                with tf.device("/job:ps/task:1"):
                    y = x + inv
                return i + 1, y

            lp = tf.compat.v1.while_loop(lambda i, x: i < 3, body, [tf.constant(0), tf.constant(0.0)], name="lp")
            tf.identity(tf.add_n([a0, a2, a3]) + (c2 + lp[1]), name="out")
        tf.compat.v1.global_variables_initializer()
    gd = g.as_graph_def()
    for n in gd.node:  # placed by hand on the worker: the runtime moves them next to their data
        if n.name in ("lp/add/Enter", "c2/mul/Switch", "c2/add/Switch"):
            n.device = "/job:worker/task:0/device:CPU:1"
            if "_class" in n.attr:
                del n.attr["_class"]
    return {"graph_def": gd.SerializeToString(), "init": ["init"], "targets": [],
            "fetches": ["out", "ln2", "k", "sh"], "feeds": {"p": np.array([1.0, 2.0], np.float32)}, "cpus": 2,
            "soft": False}


def _truth(case: dict):
    from placeviz.verify.runtime_truth import run_in_subprocess

    return run_in_subprocess(case["graph_def"], cluster={"ps": 2, "worker": 1}, cpus_per_task=case["cpus"],
                             fetches=case["fetches"], targets=case["targets"], init_ops=case["init"],
                             feeds=case["feeds"] or None, allow_soft_placement=case["soft"], timeout_s=240)


@pytest.fixture(scope="module")
def cases() -> dict:
    """Every case built (in this process), then run on TF clusters, two subprocesses at a time."""
    pytest.importorskip("tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    built = {f"{s} {c}": _build_sample(s, c) for s, c in CASES}
    was_v2 = tf.compat.v1.control_flow_v2_enabled()
    tf.compat.v1.disable_control_flow_v2()  # TF1 while loops (Enter/Exit frames), as the samples use
    try:
        built["loops ps2-2cpu"] = _build_loops()
        built["moves ps2-2cpu"] = _build_moves()
        built["loopconst ps2-2cpu"] = _build_loop_const()
    finally:
        if was_v2:
            tf.compat.v1.enable_control_flow_v2()
    with ThreadPoolExecutor(max_workers=2) as pool:
        truths = dict(zip(built, pool.map(_truth, built.values()), strict=True))
    for key, case in built.items():
        case["truth"] = truths[key]
    return built


# ---------------------------------------------------------------------------- comparing
def _placed(case: dict) -> tuple[Graph, list[str]]:
    model = model_from_bytes("case", case["graph_def"])  # keeps the bytes, as io.load of a .pb does
    options = PlacementOptions(cluster=ClusterSpec.from_ps_tasks(2), cpus_per_task=case["cpus"],
                               placer=PlacerConfig(allow_soft_placement=case["soft"]))
    result = place_graph(model.graph, options)
    return result.graph, result.placement.devices


def compare_run(graph: Graph, devices: list[str], truth, index: int, feeds: list[str]) -> dict:
    run = truth.runs[index]
    result = partition(graph, devices, fetches=run["fetches"], targets=run["targets"], feeds=feeds)
    theirs_nodes = runtime_nodes(graph, run)
    ours_nodes = {d: set(v) for d, v in result.original_nodes.items()}
    node_total = sum(len(v) for v in theirs_nodes.values())
    node_wrong = sorted(
        (d, n) for d in set(ours_nodes) | set(theirs_nodes)
        for n in ours_nodes.get(d, set()) ^ theirs_nodes.get(d, set()))
    theirs_t = truth.transfers(index)
    loose_theirs = collections.Counter((t["tensor"], t["recv_device"]) for t in theirs_t)
    loose_ours = collections.Counter((transfer_key(t), t["dst_device"]) for t in result.transfers)
    strict_theirs = collections.Counter((t["tensor"], t["send_device"], t["recv_device"], t["level"],
                                         t["send_op"], t["recv_op"]) for t in theirs_t)
    strict_ours = collections.Counter((transfer_key(t), t["src_device"], t["dst_device"], t["level"], t["send_op"],
                                       t["recv_op"]) for t in result.transfers)
    replicated_theirs: dict[str, set[str]] = collections.defaultdict(set)
    for name, kind in run["added_kinds"].items():
        if kind == "replicate":
            replicated_theirs[run["added_origins"][name]].add(run["added_nodes"][name])
    return {
        "result": result,
        "nodes": (node_total - len([w for w in node_wrong if w[1] in theirs_nodes.get(w[0], ())]), node_total),
        "node_wrong": node_wrong[:10],
        "transfers": (sum((loose_ours & loose_theirs).values()), sum(loose_theirs.values())),
        "transfer_diff": (sorted((loose_ours - loose_theirs).elements())[:5],
                          sorted((loose_theirs - loose_ours).elements())[:5]),
        "strict_ok": strict_ours == strict_theirs,
        "strict_diff": (sorted((strict_ours - strict_theirs).elements())[:5],
                        sorted((strict_theirs - strict_ours).elements())[:5]),
        "replicated_ok": {k: sorted(v) for k, v in replicated_theirs.items()} == result.replicated,
    }


def _check_case(case: dict, label: str) -> None:
    truth = case["truth"]
    assert truth.error is None, truth.error
    graph, devices = _placed(case)
    feeds = [f"{k}:0" if ":" not in k else k for k in case["feeds"]]
    agree = total = 0
    counts = [0, 0, 0, 0]  # nodes agree/total, transfers agree/total
    problems = []
    last = None
    for index, run in enumerate(truth.runs):
        got = compare_run(graph, devices, truth, index, feeds if run["kind"] == "main" else [])
        agree += got["nodes"][0] + got["transfers"][0]
        total += got["nodes"][1] + got["transfers"][1]
        counts = [counts[0] + got["nodes"][0], counts[1] + got["nodes"][1], counts[2] + got["transfers"][0],
                  counts[3] + got["transfers"][1]]
        what = f"{run['kind']} {run['targets'] or run['fetches']}"
        if got["node_wrong"]:
            problems.append(f"{what}: nodes on the wrong device {got['node_wrong']}")
        if any(got["transfer_diff"]):
            problems.append(f"{what}: transfers only ours/only TF {got['transfer_diff']}")
        if not got["strict_ok"]:
            problems.append(f"{what}: transfer devices/ops differ {got['strict_diff']}")
        if not got["replicated_ok"]:
            problems.append(f"{what}: replicated constants differ {got['result'].replicated}")
        last = got["result"]
    print(f"partition {label}: agree {agree} / {total} (node placements {counts[0]}/{counts[1]}, transfers "
          f"{counts[2]}/{counts[3]}, {len(truth.runs)} runs)")
    assert not problems, problems
    _assert_imports(last)


def _assert_imports(result) -> None:
    """What ``placeviz partition`` writes (``serialized``: from the input's bytes) imports into TF
    and parses to exactly the GraphDefs placeviz builds (``partitions``)."""
    import tensorflow as tf

    written = result.serialized()  # before ``partitions``, else it would serialize those
    assert {k: GraphDef.FromString(v) for k, v in written.items()} == result.partitions
    for device, data in written.items():
        with tf.Graph().as_default():
            try:
                tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(data), name="")
            except Exception as e:  # noqa: BLE001 - reported with the partition's name
                pytest.fail(f"partition {device} does not import into TF: {e}")


@pytest.mark.parametrize("name,config", CASES, ids=[f"{s}-{c}" for s, c in CASES])
def test_sample_partitions_match_tf_runtime(cases, name, config):
    _check_case(cases[f"{name} {config}"], f"{name} {config}")


@pytest.mark.parametrize("name", HAND_BUILT)
def test_hand_built_partitions_match_tf_runtime(cases, name):
    case = cases[f"{name} ps2-2cpu"]
    _check_case(case, f"{name} ps2-2cpu")
    result = compare_run(*_placed(case), case["truth"], len(case["truth"].runs) - 1,
                         [f"{k}:0" for k in case["feeds"]])["result"]
    if name in ("loops", "loopconst"):
        # frames spanning ps:0, ps:1 and the worker: control loops on each remote device
        assert {lp["device"] for lp in result.control_loops} >= {
            "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"}
        if name == "loopconst":
            assert result.replicated == {"lp/k": ["/job:ps/replica:0/task:0/device:CPU:0",
                                                  "/job:ps/replica:0/task:1/device:CPU:0"]}
        cloops = collections.Counter(n["op"] for nodes in case["truth"].runs[-1]["partitions"].values()
                                     for n in nodes if n["name"].startswith("_cloop"))
        ours = collections.Counter(n.op for gd in result.graph_defs(importable=False).values() for n in gd.node
                                   if n.name.startswith("_cloop"))
        assert ours == cloops
    else:
        assert set(result.moved) == {"lp/add/Enter", "c2/mul/Switch", "c2/add/Switch"}
        assert {t["send_op"] for t in result.transfers} == {"_Send", "_HostSend"}
        assert any(t["level"] == "device" for t in result.transfers)
