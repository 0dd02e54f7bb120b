"""Ask TensorFlow's distributed runtime where every node of a GraphDef really ran.

:func:`run_in_subprocess` (use this one) starts a fresh Python process that starts one in-process
``tf.distribute.Server`` per task of a small cluster on 127.0.0.1, opens a ``tf.compat.v1.Session``
on the master task, imports the GraphDef unchanged (``import_graph_def(name="")``), runs the init ops
and then the fetches/targets once with ``RunOptions(output_partition_graphs=True)``, and returns a
:class:`RuntimeTruth`: the device of every original node found in the partition graphs, the
partition graphs themselves, the nodes the runtime added, and TF's own error if placement failed.
:func:`run_on_local_cluster` does the same in the calling process (TF's gRPC servers cannot be shut
down, so every call leaks a cluster; prefer the subprocess).

Two sources of truth are collected:

* ``devices``: from ``RunMetadata.partition_graphs`` (per device, after the master's per-task
  partition, the worker's per-device partition and the per-partition classic optimizer). Only the
  nodes of each run's *pruned* graph appear, so pass targets that reach every node (see
  :func:`all_sinks`).
* ``placer_devices``: TF's Placer places the *whole* graph once per session (``docs/tf-behaviours.md``). With
  ``log_device_placement`` the placer ``printf``\\ s ``name: (Op): device`` for every node to the C
  stdout, which we capture (fd 1 is redirected to a file while the session runs). This covers nodes
  no run reaches. On a placement error it holds the nodes placed before the failure.

Configuration that makes the partition graphs comparable with placeviz (``config`` records it all):
Grappler off (``rewrite_options.disable_meta_optimizer``), classic optimizer ``opt_level=L0``,
``global_jit_level=OFF``, ``place_pruned_graph=False``, no ``device_filters``. Observed in TF 2.21:

* ``do_function_inlining=True`` also turns on ``RemoveIdentityNodes``/``RemoveDeadNodes`` in the
  per-partition GraphOptimizer even at L0, so plain ``Identity`` nodes (one data input, no control
  edges) *vanish* from the partition graphs (a soft-placed ``Identity`` fetch was replaced by its
  input). The default here is therefore ``do_function_inlining=False``.
* With oneDNN on (the x86 default), the MKL layout pass renames ops in the partition graphs
  (``MatMul`` ran as ``_MklMatMul``). :func:`run_in_subprocess` sets ``TF_ENABLE_ONEDNN_OPTS=0``
  unless ``onednn=True``; ``partitions[...]["op"]`` is the op as TF ran it.
* ReplicateConstantsPass cannot be switched off: a small CPU ``Const`` with consumers on several
  CPUs disappears and one copy per target CPU runs instead (``replicated``). Such a Const is in
  ``placer_devices`` but not in ``devices``.
* ``RunMetadata.partition_graphs`` is empty when a run fails, so a failing or timed-out run reports
  no devices (earlier successful runs still do).
* TF's gRPC server always listens on the wildcard address (``0.0.0.0:port``, hard-coded in
  ``grpc_server_lib.cc``) even though every cluster address given here is ``127.0.0.1``. The child
  process of :func:`run_in_subprocess` therefore first moves itself into a private network
  namespace (``unshare(CLONE_NEWUSER|CLONE_NEWNET)``, loopback only) when the kernel allows it;
  ``config["network_namespace"]`` says whether it did. In-process runs cannot do this.

Names of the nodes the runtime adds (observed; ``n`` counters are per MasterSession (``_S``) or per
worker (``_G``) and keep growing across runs and run signatures):

* Task level (MasterSession partitions the graph by task), cross-task data edge ``src:k -> dst``:
  ``_Send`` ``<src>_S<n>`` on src's device, ``_Recv`` ``<src>_S<n+1>`` on dst's device (send named
  first), ``tensor_name="edge_<id>_<src>"``, attrs ``_src=<src>``, ``_dst=<first consumer>``.
  Deduplicated per (src, slot, destination task): a tensor used on two devices of one remote task
  crosses the network once into the first consumer's device.
* Device level (each worker partitions its task graph by device): the same shapes with ``_G<n>``.
  The prefix is the immediate source, which may itself be an added node: ``w/read_S1_G2`` relays
  the received ``w/read_S1`` to a second device, ``_recv_x_0_G0`` relays a feed.
* Cross-partition control edge ``^src -> dst``: dummy ``Const`` ``<src>/ctrl_S<n>`` (input
  ``^src``) + ``_Send`` ``<src>_S<n+1>`` on src's device; ``_Recv`` ``<src>_S<n+2>`` + ``Identity``
  ``<src>_S<n+3>`` on dst's device, and dst gets ``^<src>_S<n+3>`` (``/ctrl_G``, ``_G`` in-task).
* Host memory: ``_HostSend``/``_HostRecv`` instead of ``_Send``/``_Recv`` when the source output /
  destination input is in host memory (e.g. an int32 shape into ``Fill``), same naming.
* Client feeds/fetches (MasterSession): ``_recv_<node>_<slot>`` (``_Recv``) and
  ``_send_<node>_<slot>`` (``_Send``) on the master task's CPU:0, ``client_terminated=True``,
  ``tensor_name="<node>:<slot>"``. A fed node is cut off and does not run.
* ReplicateConstantsPass: ``<const>/replicate/_<n>``, one per target CPU (the consumer's CPU, else
  CPU:0 of the consumer's task), ``n`` from 0 again for every new run signature (so the same name
  can appear in several runs); the original Const is gone from the partition graphs.
* DirectSession forms (not produced here, recognised anyway): ``<src>/_<n>``, ``<src>/ctrl/_<n>``,
  ``_arg_<node>_<slot>_<i>``/``_retval_<node>_<slot>_<i>`` (``_Arg``/``_Retval``).

Blocking ops (queue dequeues, accumulator ``TakeGradient``...) must never hang a test: every run has
``RunOptions.timeout_in_ms`` (clamped to the overall deadline) and the subprocess is killed after
``timeout_s`` (``error == "timeout"``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from placeviz.devices.device_name_utils import is_job_name
from placeviz.op_kinds import PLACEHOLDER_OPS
from placeviz.verify import sandbox

# Ops that can wait forever for another step or another worker. :func:`all_sinks` leaves out these
# ops and everything that depends on them (fnmatch patterns on the op type).
DEFAULT_BLOCKING_OPS: tuple[str, ...] = (
    "QueueDequeue*",  # QueueDequeue(V2), QueueDequeueMany(V2), QueueDequeueUpTo(V2)
    "*TakeGradient",  # AccumulatorTakeGradient, ResourceAccumulatorTakeGradient, SparseAccumulator...
    "BarrierTakeMany",
    "ReaderRead*",  # readers pull file names from a queue
    "*Unstage*",  # Unstage, MapUnstage(NoKey), OrderedMapUnstage(NoKey)
    "*MapPeek",  # MapPeek, OrderedMapPeek wait for their key
)
# A Placeholder that is not fed fails the run; :func:`all_sinks` treats it like a blocking op.

SEND_OPS = frozenset({"_Send", "_HostSend"})
RECV_OPS = frozenset({"_Recv", "_HostRecv"})
FRAME_OPS = frozenset({"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval"})
# Attributes copied into the NodeDef dicts of ``RuntimeTruth.partitions``.
KEPT_ATTRS = ("tensor_name", "send_device", "recv_device", "client_terminated", "T", "_src", "_dst")

_REPLICATE_RE = re.compile(r"^(?P<src>.+)/replicate/_(?P<n>\d+)$")
_CTRL_CONST_RE = re.compile(r"^(?P<src>.+)/ctrl(?:_[SG]\d+|/_\d+)$")
_PARTITIONER_RE = re.compile(r"^(?P<src>.+)(?:_[SG]\d+|/_\d+)$")
_CLIENT_RE = re.compile(r"^_(?:send|recv)_(?P<node>.+)_(?P<slot>\d+)$")
_FRAME_RE = re.compile(r"^_(?:arg|retval)_(?P<node>.+)_(?P<slot>\d+)_(?P<i>\d+)$")
_PLACER_LOG_RE = re.compile(r"^(?P<name>[^\s:][^:]*): \((?P<op>[^)]*)\): (?P<device>/job:\S+)\s*$")
_TASK_RE = re.compile(r"^(/job:[^/]+/replica:\d+/task:\d+)")

CHILD_FLAG = "--runtime-truth-child"


@dataclass
class RuntimeTruth:
    """What TensorFlow's runtime did with one graph on one local cluster.

    ``devices``, ``replicated`` and ``conflicts`` merge every successful run (init runs and the
    main run). ``partitions``, ``added_nodes``, ``added_kinds`` and ``added_origins`` describe the
    main run (fetches + targets), or the last init run when there are no fetches or targets;
    ``runs`` keeps each run's own partitions and added nodes (added names can repeat across runs).
    """

    # original node -> full runtime device, for every original node found in a partition graph
    devices: dict[str, str]
    # device -> NodeDefs (dicts: name, op, input, device, attr{KEPT_ATTRS present}) as TF ran them
    partitions: dict[str, list[dict]]
    # runtime-added node -> device
    added_nodes: dict[str, str]
    fetches: list[str]
    targets: list[str]
    # cluster, addresses, master, session ConfigProto settings, env, timings, tf version
    config: dict
    # TF's message ("<ErrorType>: <key line> [nodes: a, b]") if a run or the set-up failed
    error: str | None = None
    error_nodes: list[str] = field(default_factory=list)
    error_detail: str | None = None  # the full message
    error_phase: str | None = None  # servers | import | init:<op> | main | timeout | child
    # added node -> send | recv | ctrl_const | ctrl_identity | replicate | feed_recv | fetch_send
    #               | arg | retval | other
    added_kinds: dict[str, str] = field(default_factory=dict)
    # added node -> the original node it stands for (transfer source, control source, copied Const,
    # fed/fetched node); None when unknown
    added_origins: dict[str, str | None] = field(default_factory=dict)
    # original Const -> sorted devices its ``/replicate/`` copies ran on
    replicated: dict[str, list[str]] = field(default_factory=dict)
    # whole-graph placement printed by the Placer (log_device_placement)
    placer_devices: dict[str, str] = field(default_factory=dict)
    # original node seen on different devices in different runs -> all devices (should be empty)
    conflicts: dict[str, list[str]] = field(default_factory=dict)
    # one dict per run: kind, fetches, targets, seconds, partitions, added_nodes, error
    runs: list[dict] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RuntimeTruth:
        return cls(**json.loads(text))

    @property
    def ok(self) -> bool:
        return self.error is None

    def nodes_on(self, device: str) -> list[str]:
        """Original nodes that ran on ``device`` (a full name or a prefix such as ``/job:ps``)."""
        return sorted(n for n, d in self.devices.items() if d == device or d.startswith(device + "/"))

    def transfers(self, run: int | None = None) -> list[dict]:
        """The send/recv pairs of the main run (or of ``runs[run]``), client feeds/fetches excluded.

        Each dict: ``tensor`` (``"<orig>:<slot>"``, or ``"^<orig>"`` for a control edge),
        ``send``/``recv`` (node names), ``send_op``/``recv_op``, ``send_device``/``recv_device``,
        ``tensor_name`` and ``level`` (``task`` across tasks, ``device`` inside one task).
        """
        if run is None:
            parts, origins = self.partitions, self.added_origins
        else:
            parts, origins = self.runs[run]["partitions"], self.runs[run]["added_origins"]
        return _transfers(parts, origins)


# --------------------------------------------------------------------------------------------
# Pure helpers (no TensorFlow)


def _node_of(inp: str) -> str:
    """``'^a'``, ``'a:1'``, ``'a'`` -> ``'a'``."""
    return inp[1:] if inp.startswith("^") else inp.split(":", 1)[0]


def _slot_of(inp: str) -> int:
    if inp.startswith("^"):
        return -1
    _, _, slot = inp.partition(":")
    return int(slot) if slot.isdigit() else 0


def tensor_name(name: str) -> str:
    """A fetch/feed name as a tensor name: ``'mm'`` -> ``'mm:0'``."""
    return name if ":" in name else f"{name}:0"


def op_name(name: str) -> str:
    """A target name as an op name: ``'init:0'`` -> ``'init'``, ``'^init'`` -> ``'init'``."""
    return _node_of(name)


def _graph_bytes(graph_def: Any) -> bytes:
    """Serialized bytes of a GraphDef given as bytes or as a message (TF's or placeviz's)."""
    if isinstance(graph_def, (bytes, bytearray, memoryview)):
        return bytes(graph_def)
    return graph_def.SerializeToString()


def _parse_graph_def(graph_def: Any):
    from placeviz.protos import GraphDef

    if isinstance(graph_def, GraphDef):
        return graph_def
    gd = GraphDef()
    gd.ParseFromString(_graph_bytes(graph_def))
    return gd


def all_sinks(graph_def: Any, *, blocking_ops: Iterable[str] = DEFAULT_BLOCKING_OPS,
              fed: Iterable[str] = ()) -> list[str]:
    """Targets that together make one run reach every node that can run without blocking.

    ``graph_def``: serialized bytes or a GraphDef message (TF's or placeviz's).

    Returns, in graph order, the sinks (nodes without data or control consumers) of the graph
    *after removing the blocked nodes*: ops whose type matches ``blocking_ops`` (fnmatch patterns,
    default :data:`DEFAULT_BLOCKING_OPS`: ``QueueDequeue*``, ``*TakeGradient``, ``BarrierTakeMany``,
    ``ReaderRead*``, ``*Unstage*``, ``*MapPeek``), ``Placeholder``\\ s not named in ``fed`` (an
    unfed placeholder fails the run), and everything that depends on them (data or control, any
    distance). A node whose consumers are all blocked is therefore returned although it has
    consumers, so the result covers every unblocked node; without blocked nodes it is exactly the
    set of nodes with no consumers. Nodes of the function library are not considered.
    """
    gd = _parse_graph_def(graph_def)
    patterns = tuple(blocking_ops)
    fed_nodes = {op_name(f) for f in fed}
    names = [n.name for n in gd.node]
    known = set(names)
    consumers: dict[str, list[str]] = {n: [] for n in names}
    for n in gd.node:
        for inp in n.input:
            src = _node_of(inp)
            if src in known:
                consumers[src].append(n.name)
    stack = [n.name for n in gd.node
             if any(fnmatch.fnmatchcase(n.op, p) for p in patterns)
             or (n.op in PLACEHOLDER_OPS and n.name not in fed_nodes)]
    blocked: set[str] = set()
    while stack:
        name = stack.pop()
        if name in blocked:
            continue
        blocked.add(name)
        stack.extend(consumers[name])
    return [n for n in names if n not in blocked and all(c in blocked for c in consumers[n])]


def classify_added(node: Mapping[str, Any], original: set[str] | frozenset[str]) -> tuple[str, str | None]:
    """Kind and immediate origin of a node the runtime added (see the module docstring).

    The origin is the node the added one stands for, possibly itself an added node (a ``_G`` send
    relays a ``_S`` recv); :func:`_resolve_origins` follows such chains to an original node.
    """
    name, op = node["name"], node["op"]
    attr = node.get("attr", {})
    inputs = list(node.get("input", []))
    if op in SEND_OPS or op in RECV_OPS:
        if attr.get("client_terminated"):
            tname = attr.get("tensor_name", "")
            origin = _node_of(tname) if tname else None
            if origin is None and (m := _CLIENT_RE.match(name)):
                origin = m.group("node")
            return ("fetch_send" if op in SEND_OPS else "feed_recv"), origin
        origin = attr.get("_src")
        if not origin:
            m = _PARTITIONER_RE.match(name)
            origin = m.group("src") if m else None
        return ("send" if op in SEND_OPS else "recv"), origin
    if op in FRAME_OPS or _FRAME_RE.match(name):
        m = _FRAME_RE.match(name)
        return ("retval" if "Retval" in op or name.startswith("_retval_") else "arg"), (m.group("node") if m else None)
    if op == "Const":
        m = _REPLICATE_RE.match(name)
        if m and (m.group("src") in original or not _CTRL_CONST_RE.match(name)):
            return "replicate", m.group("src")
        m = _CTRL_CONST_RE.match(name)
        if m:
            ctrl = [i[1:] for i in inputs if i.startswith("^")]
            return "ctrl_const", (ctrl[0] if ctrl else m.group("src"))
    if op == "Identity" and len(inputs) == 1 and not inputs[0].startswith("^"):
        m = _PARTITIONER_RE.match(name)
        if m:
            return "ctrl_identity", m.group("src")
    return "other", None


def _resolve_origins(immediate: Mapping[str, str | None], original: set[str] | frozenset[str]) -> dict[str, str | None]:
    """Follow chains of added nodes (``w/read_S1_G2`` -> ``w/read_S1`` -> ``w/read``)."""
    out: dict[str, str | None] = {}
    for name in immediate:
        seen = {name}
        cur = immediate[name]
        while cur is not None and cur not in original and cur in immediate and cur not in seen:
            seen.add(cur)
            cur = immediate[cur]
        out[name] = cur
    return out


def _transfers(partitions: Mapping[str, list[dict]], origins: Mapping[str, str | None]) -> list[dict]:
    nodes = {n["name"]: n for part in partitions.values() for n in part}
    sends: dict[tuple, dict] = {}
    recvs: dict[tuple, dict] = {}
    for n in nodes.values():
        a = n.get("attr", {})
        if a.get("client_terminated") or (n["op"] not in SEND_OPS and n["op"] not in RECV_OPS):
            continue
        key = (a.get("tensor_name"), a.get("send_device"), a.get("recv_device"))
        (sends if n["op"] in SEND_OPS else recvs)[key] = n

    def tensor_of(inp: str, depth: int = 0) -> str:
        src, slot = _node_of(inp), _slot_of(inp)
        node = nodes.get(src)
        if node is None or src not in origins or depth > 20:
            return f"{src}:{slot}"  # an original node
        a = node.get("attr", {})
        if node["op"] in RECV_OPS:
            if a.get("client_terminated"):
                return a.get("tensor_name") or f"{origins.get(src)}:0"
            paired = sends.get((a.get("tensor_name"), a.get("send_device"), a.get("recv_device")))
            if paired is not None and paired.get("input"):
                return tensor_of(paired["input"][0], depth + 1)
        if node["op"] == "Identity" and node.get("input"):
            return tensor_of(node["input"][0], depth + 1)
        origin = origins.get(src)
        if node["op"] == "Const" and _CTRL_CONST_RE.match(src) and not _REPLICATE_RE.match(src):
            return f"^{origin}"
        return f"{origin}:{max(slot, 0)}"

    out = []
    for key, s in sends.items():
        r = recvs.get(key)
        task_s, task_r = _TASK_RE.match(key[1] or ""), _TASK_RE.match(key[2] or "")
        same_task = bool(task_s and task_r and task_s.group(1) == task_r.group(1))
        out.append({
            "tensor": tensor_of(s["input"][0]) if s.get("input") else None,
            "send": s["name"], "recv": r["name"] if r else None,
            "send_op": s["op"], "recv_op": r["op"] if r else None,
            "send_device": key[1], "recv_device": key[2], "tensor_name": key[0],
            "level": "device" if same_task else "task",
        })
    return sorted(out, key=lambda t: (t["tensor"] or "", t["send_device"] or "", t["recv_device"] or ""))


_BOILERPLATE = ("Graph execution error:", "Detected at node", "Node: '", "File \"", "=====")


def summarize_error(message: str, type_name: str = "") -> tuple[str, list[str]]:
    """TF's error as ``"<Type>: <key line> [nodes: ...]"`` plus the node names it mentions.

    TF 2.x wraps Session errors in "Graph execution error:" and a "Detected at node" trace; the key
    line is the first line after that (joined with the next one when it ends with ``:``).
    """
    lines = [ln.strip() for ln in message.splitlines()]
    body = [ln for ln in lines if ln and not ln.startswith(_BOILERPLATE) and not ln.startswith("[[")]
    key = body[0] if body else (lines[0] if lines else "")
    if key.endswith(":") and len(body) > 1:
        key = f"{key} {body[1]}"
    nodes: list[str] = []
    for pat in (r"\{\{node ([^}]+)\}\}", r"\[\[([^\[\]{}]+)\]\]", r"node '([^']+)'",
                r"for operation ([^\s:]+):"):
        for m in re.finditer(pat, message):
            name = m.group(1).strip()
            if name and name not in nodes:
                nodes.append(name)
    text = f"{type_name}: {key}" if type_name else key
    if nodes:
        text += f" [nodes: {', '.join(nodes)}]"
    return text, nodes


def parse_placer_log(text: str, original: Iterable[str]) -> dict[str, str]:
    """``name: (Op): device`` lines printed by the Placer; first line per original node wins."""
    wanted = set(original)
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _PLACER_LOG_RE.match(line)
        if m and m.group("name") in wanted and m.group("name") not in out:
            out[m.group("name")] = m.group("device")
    return out


def _check_cluster(cluster: Mapping[str, int], master: tuple[str, int]) -> dict[str, int]:
    out = {}
    for job, n in cluster.items():
        if not is_job_name(job):
            raise ValueError(f"bad job name {job!r}")
        if int(n) < 1:
            raise ValueError(f"job {job!r} needs at least one task")
        out[job] = int(n)
    if not out:
        raise ValueError("empty cluster")
    job, task = master
    if job not in out or not 0 <= int(task) < out[job]:
        raise ValueError(f"master {master!r} is not a task of the cluster {out}")
    return out


# --------------------------------------------------------------------------------------------
# In-process runtime (imports TensorFlow)


_libc = sandbox.libc


def _flush_c_stdio() -> None:
    with contextlib.suppress(Exception):
        _libc().fflush(None)


@contextlib.contextmanager
def _stdout_fd_to(path: str):
    """Send fd 1 (C ``printf`` included) to ``path`` for the duration of the block."""
    sys.stdout.flush()
    _flush_c_stdio()
    saved = os.dup(1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)


_free_ports = sandbox.free_ports


_LIVE_SERVERS: list = []  # in-process servers cannot be stopped; keep them referenced


def _node_to_dict(node, dtype_name) -> dict:
    attr: dict[str, Any] = {}
    for key in KEPT_ATTRS:
        if key not in node.attr:
            continue
        v = node.attr[key]
        kind = v.WhichOneof("value")
        if kind == "s":
            attr[key] = v.s.decode("utf-8", "replace")
        elif kind == "b":
            attr[key] = bool(v.b)
        elif kind == "type":
            attr[key] = dtype_name(v.type)
        elif kind == "i":
            attr[key] = int(v.i)
    return {"name": node.name, "op": node.op, "input": list(node.input), "device": node.device, "attr": attr}


class _Collector:
    def __init__(self, truth: RuntimeTruth, original: frozenset[str], dtype_name):
        self.truth = truth
        self.original = original
        self.dtype_name = dtype_name
        self.replicated: dict[str, set[str]] = {}
        self.seen: dict[str, set[str]] = {}

    def add_run(self, kind: str, fetches: list[str], targets: list[str], seconds: float, metadata) -> None:
        partitions: dict[str, list[dict]] = {}
        for pg in metadata.partition_graphs:
            nodes = [_node_to_dict(n, self.dtype_name) for n in pg.node]
            if not nodes:
                continue
            device = nodes[0]["device"]
            partitions.setdefault(device, []).extend(nodes)
        added: dict[str, str] = {}
        kinds: dict[str, str] = {}
        immediate: dict[str, str | None] = {}
        for device, nodes in partitions.items():
            for n in nodes:
                name, dev = n["name"], n["device"] or device
                if name in self.original:
                    self.seen.setdefault(name, set()).add(dev)
                    self.truth.devices.setdefault(name, dev)
                    continue
                what, origin = classify_added(n, self.original)
                added[name], kinds[name], immediate[name] = dev, what, origin
                if what == "replicate" and origin is not None:
                    self.replicated.setdefault(origin, set()).add(dev)
        origins = _resolve_origins(immediate, self.original)
        self.truth.runs.append({"kind": kind, "fetches": fetches, "targets": targets,
                                "seconds": round(seconds, 4), "partitions": partitions,
                                "added_nodes": added, "added_kinds": kinds, "added_origins": origins})
        if kind == "main" or not any(r["kind"] == "main" for r in self.truth.runs[:-1]):
            t = self.truth
            t.partitions, t.added_nodes, t.added_kinds, t.added_origins = partitions, added, kinds, origins

    def finish(self) -> None:
        self.truth.replicated = {k: sorted(v) for k, v in sorted(self.replicated.items())}
        self.truth.conflicts = {k: sorted(v) for k, v in sorted(self.seen.items()) if len(v) > 1}


def run_on_local_cluster(
    graph_def_bytes: bytes,
    *,
    cluster: Mapping[str, int],
    master: tuple[str, int] = ("worker", 0),
    fetches: Iterable[str] = (),
    targets: Iterable[str] = (),
    init_ops: Iterable[str] = (),
    feeds: Mapping[str, Any] | None = None,
    allow_soft_placement: bool = False,
    cpus_per_task: int = 1,
    timeout_s: float = 120,
    disable_grappler: bool = True,
    opt_level_l0: bool = True,
    do_function_inlining: bool = False,
    run_timeout_s: float | None = None,
    log_placement: bool = True,
) -> RuntimeTruth:
    """Run the graph on an in-process local cluster and report where TF ran every node.

    ``cluster``: job -> number of tasks (each task gets ``cpus_per_task`` CPU devices);
    ``master``: the task whose session target is used (its CPU:0 is the client device);
    ``fetches``: tensors (``'mm'`` means ``'mm:0'``); ``targets``/``init_ops``: op names.
    Each init op runs once, alone and in order, then fetches+targets run once together. Feeds
    (tensor name -> array) are given to every run. Every run has a ``RunOptions.timeout_in_ms`` of
    ``run_timeout_s`` (default: whatever is left of ``timeout_s``). Never raises for TF errors:
    they are returned in ``error``/``error_phase``. Leaks the servers (TF cannot stop them); use
    :func:`run_in_subprocess` instead unless the process is about to exit.
    """
    t_start = time.monotonic()
    deadline = t_start + float(timeout_s)
    cluster = _check_cluster(cluster, master)
    fetches = [tensor_name(f) for f in fetches]
    targets = [op_name(t) for t in targets]
    init_ops = [op_name(t) for t in init_ops]
    feeds = {tensor_name(k): v for k, v in (feeds or {}).items()}
    timings: dict[str, Any] = {}
    config: dict[str, Any] = {
        "cluster": dict(cluster), "master": [master[0], int(master[1])], "protocol": "grpc",
        "cpus_per_task": int(cpus_per_task), "allow_soft_placement": bool(allow_soft_placement),
        "log_device_placement": bool(log_placement), "disable_meta_optimizer": bool(disable_grappler),
        "opt_level": "L0" if opt_level_l0 else "L1", "do_function_inlining": bool(do_function_inlining),
        "global_jit_level": "OFF", "place_pruned_graph": False, "device_filters": [],
        "init_ops": init_ops, "feeds": sorted(feeds), "pid": os.getpid(), "timings": timings,
        "env": {k: os.environ.get(k) for k in ("TF_ENABLE_ONEDNN_OPTS",
                                               "TF_FLAG_ENABLE_AGGRESSIVE_CONSTANT_REPLICATION")},
    }
    truth = RuntimeTruth(devices={}, partitions={}, added_nodes={}, fetches=fetches, targets=targets,
                         config=config)

    def fail(phase: str, exc: BaseException) -> RuntimeTruth:
        message = getattr(exc, "message", None) or str(exc)
        truth.error, truth.error_nodes = summarize_error(message, type(exc).__name__)
        truth.error_detail, truth.error_phase = message, phase
        timings["total_s"] = round(time.monotonic() - t_start, 4)
        return truth

    t0 = time.monotonic()
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2

    timings["import_tf_s"] = round(time.monotonic() - t0, 4)
    config["tf_version"] = tf.__version__

    def dtype_name(t: int) -> str:
        try:
            return types_pb2.DataType.Name(t)
        except ValueError:
            return str(t)

    # The graph: parse it and import it unchanged.
    try:
        graph_def = tf.compat.v1.GraphDef.FromString(_graph_bytes(graph_def_bytes))
        original = frozenset(n.name for n in graph_def.node)
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return fail("import", e)

    # The cluster: one server per task, on free loopback ports.
    t0 = time.monotonic()
    server_config = tf.compat.v1.ConfigProto(device_count={"CPU": int(cpus_per_task)})
    servers: dict[tuple[str, int], Any] = {}
    last_error: BaseException | None = None
    for _attempt in range(3):
        ports = iter(_free_ports(sum(cluster.values())))
        spec = {job: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for job, n in cluster.items()}
        try:
            cluster_spec = tf.train.ClusterSpec(spec)
            servers = {}
            for job, n in cluster.items():
                for i in range(n):
                    servers[(job, i)] = tf.distribute.Server(
                        cluster_spec, job_name=job, task_index=i, protocol="grpc",
                        config=server_config, start=True)
            _LIVE_SERVERS.extend(servers.values())
            last_error = None
            break
        except Exception as e:  # noqa: BLE001 - a port was taken meanwhile: retry with new ones
            _LIVE_SERVERS.extend(servers.values())
            last_error = e
    if last_error is not None:
        return fail("servers", last_error)
    timings["servers_start_s"] = round(time.monotonic() - t0, 4)
    config["cluster_spec"] = spec
    master_server = servers[(master[0], int(master[1]))]
    config["target"] = master_server.target

    session_config = tf.compat.v1.ConfigProto(allow_soft_placement=bool(allow_soft_placement),
                                              log_device_placement=bool(log_placement))
    if disable_grappler:
        session_config.graph_options.rewrite_options.disable_meta_optimizer = True
    oo = session_config.graph_options.optimizer_options
    if opt_level_l0:
        oo.opt_level = tf.compat.v1.OptimizerOptions.L0
    oo.do_function_inlining = bool(do_function_inlining)
    oo.global_jit_level = tf.compat.v1.OptimizerOptions.OFF
    session_config.graph_options.place_pruned_graph = False
    config["session_config"] = str(session_config).strip()

    collector = _Collector(truth, original, dtype_name)
    feed_dict = {k: np.asarray(v) for k, v in feeds.items()}
    runs: list[tuple[str, list[str], list[str]]] = [("init", [], [op]) for op in init_ops]
    if fetches or targets:
        runs.append(("main", fetches, targets))
    run_times = timings.setdefault("runs_s", [])

    log_file = tempfile.NamedTemporaryFile(prefix="placeviz-placer-", suffix=".log", delete=False)
    log_file.close()
    sess = None
    try:
        with _stdout_fd_to(log_file.name) if log_placement else contextlib.nullcontext():
            t0 = time.monotonic()
            sess = tf.compat.v1.Session(master_server.target, graph=graph, config=session_config)
            timings["session_s"] = round(time.monotonic() - t0, 4)
            for kind, f, t in runs:
                phase = kind if kind == "main" else f"init:{t[0]}"
                remaining = deadline - time.monotonic() - 1.0
                if remaining <= 0.2:
                    return fail("timeout", TimeoutError(f"Operation timed out: no time left for {phase}"))
                limit = remaining if run_timeout_s is None else min(float(run_timeout_s), remaining)
                options = tf.compat.v1.RunOptions(output_partition_graphs=True,
                                                  timeout_in_ms=max(100, int(limit * 1000)))
                metadata = tf.compat.v1.RunMetadata()
                t0 = time.monotonic()
                try:
                    sess.run(f + t, feed_dict=feed_dict, options=options, run_metadata=metadata)
                except Exception as e:  # noqa: BLE001 - TF's error is the result
                    run_times.append(round(time.monotonic() - t0, 4))
                    return fail(phase, e)
                seconds = time.monotonic() - t0
                run_times.append(round(seconds, 4))
                collector.add_run(kind, f, t, seconds, metadata)
    except Exception as e:  # noqa: BLE001
        return fail("session", e)
    finally:
        collector.finish()
        if sess is not None:
            with contextlib.suppress(Exception):
                sess.close()
        if log_placement:
            with contextlib.suppress(OSError):
                truth.placer_devices = parse_placer_log(Path(log_file.name).read_text(errors="replace"),
                                                        original)
        with contextlib.suppress(OSError):
            os.unlink(log_file.name)
        timings["total_s"] = round(time.monotonic() - t_start, 4)
    return truth


# --------------------------------------------------------------------------------------------
# Subprocess wrapper


_PROXY_VARS = sandbox.PROXY_VARS


def _child_env(onednn: bool) -> dict[str, str]:
    return sandbox.child_env(onednn)


def run_in_subprocess(
    graph_def_bytes: bytes,
    *,
    cluster: Mapping[str, int],
    master: tuple[str, int] = ("worker", 0),
    fetches: Iterable[str] = (),
    targets: Iterable[str] = (),
    init_ops: Iterable[str] = (),
    feeds: Mapping[str, Any] | None = None,
    allow_soft_placement: bool = False,
    cpus_per_task: int = 1,
    timeout_s: float = 120,
    disable_grappler: bool = True,
    opt_level_l0: bool = True,
    do_function_inlining: bool = False,
    run_timeout_s: float | None = None,
    log_placement: bool = True,
    onednn: bool = False,
) -> RuntimeTruth:
    """:func:`run_on_local_cluster` in a fresh Python process (same arguments).

    Data goes through files in a temporary directory. The child isolates itself in a private
    loopback-only network namespace when it can, runs with ``TF_ENABLE_ONEDNN_OPTS=0`` unless
    ``onednn``, and ends with ``os._exit`` (TF servers cannot be shut down). After ``timeout_s`` the
    child's process group is killed and the result has ``error == "timeout"``.
    """
    cluster = _check_cluster(cluster, master)
    fetches, targets, init_ops = list(fetches), list(targets), list(init_ops)
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="placeviz-runtime-") as tmp:
        work = Path(tmp)
        (work / "graph.pb").write_bytes(_graph_bytes(graph_def_bytes))
        feed_names = []
        if feeds:
            import numpy as np

            feed_names = list(feeds)
            named: dict[str, Any] = {f"f{i}": np.asarray(feeds[k]) for i, k in enumerate(feed_names)}
            np.savez(work / "feeds.npz", **named)
        args = {
            "cluster": cluster, "master": [master[0], int(master[1])], "fetches": fetches,
            "targets": targets, "init_ops": init_ops, "feed_names": feed_names,
            "allow_soft_placement": allow_soft_placement, "cpus_per_task": cpus_per_task,
            "timeout_s": max(0.5, float(timeout_s) - 2.0), "disable_grappler": disable_grappler,
            "opt_level_l0": opt_level_l0, "do_function_inlining": do_function_inlining,
            "run_timeout_s": run_timeout_s, "log_placement": log_placement,
        }
        (work / "args.json").write_text(json.dumps(args))
        cmd = [sys.executable, "-m", "placeviz.verify.runtime_truth", CHILD_FLAG, str(work)]
        with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=_child_env(onednn), cwd=tmp, start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=float(timeout_s))
            except subprocess.TimeoutExpired:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        stderr_tail = (work / "stderr.txt").read_text(errors="replace")[-4000:]
        result = work / "result.json"
        base_config = {"cluster": cluster, "master": [master[0], int(master[1])], "pid": proc.pid,
                       "returncode": proc.returncode,
                       "timings": {"subprocess_s": round(time.monotonic() - t_start, 4)}}
        if timed_out:
            return RuntimeTruth(devices={}, partitions={}, added_nodes={}, fetches=fetches, targets=targets,
                                config={**base_config, "stderr_tail": stderr_tail}, error="timeout",
                                error_phase="timeout",
                                error_detail=f"killed after {timeout_s} s")
        if proc.returncode != 0 or not result.exists():
            last = next((ln for ln in reversed(stderr_tail.splitlines()) if ln.strip()), "")
            return RuntimeTruth(devices={}, partitions={}, added_nodes={}, fetches=fetches, targets=targets,
                                config={**base_config, "stderr_tail": stderr_tail},
                                error=f"child exited with code {proc.returncode}: {last}",
                                error_phase="child", error_detail=stderr_tail)
        truth = RuntimeTruth.from_json(result.read_text())
    truth.config["returncode"] = proc.returncode
    truth.config.setdefault("timings", {})["subprocess_s"] = round(time.monotonic() - t_start, 4)
    return truth


_enter_private_network = sandbox.enter_private_network


def _child_main(workdir: str) -> None:
    try:
        isolated = _enter_private_network()
    except OSError:
        isolated = False
    code = 0
    work = Path(workdir)
    try:
        args = json.loads((work / "args.json").read_text())
        feeds = None
        names = args.pop("feed_names")
        if names:
            import numpy as np

            with np.load(work / "feeds.npz") as data:
                feeds = {name: data[f"f{i}"] for i, name in enumerate(names)}
        args["master"] = tuple(args["master"])
        truth = run_on_local_cluster((work / "graph.pb").read_bytes(), feeds=feeds, **args)
        truth.config["network_namespace"] = isolated
        tmp = work / "result.json.tmp"
        tmp.write_text(truth.to_json())
        tmp.replace(work / "result.json")
    except BaseException as e:  # noqa: BLE001 - reported through the exit code and stderr
        import traceback

        traceback.print_exc()
        print(f"runtime_truth child failed: {type(e).__name__}: {e}", file=sys.stderr)
        code = 3
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    _flush_c_stdio()
    os._exit(code)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == CHILD_FLAG:
        _child_main(sys.argv[2])
    print(f"usage: python -m placeviz.verify.runtime_truth {CHILD_FLAG} WORKDIR", file=sys.stderr)
    sys.exit(2)
