"""The TF side of ``placeviz verify``: ``python -m placeviz.verify.coordinator WORKDIR``.

Started by :mod:`placeviz.verify.runner` in a fresh process, which first arms
``PR_SET_PDEATHSIG`` (it dies with placeviz verify, even on SIGKILL) and moves into private user,
network and mount namespaces (:func:`placeviz.verify.sandbox.enter_sandbox`: only loopback, only
``WORKDIR/run`` writable, the servers' working directory; verify's own files in WORKDIR are not,
so an op of the graph cannot replace them) unless it runs on servers the user already runs
(``--servers FILE``) or
``--no-isolation`` says not to. When the kernel refuses, it writes ``{"refused": why}`` and exits
4 without starting anything. It then follows ``plan.json`` (a
:class:`placeviz.verify.plan.RunPlan`) the way a TF1 chief with ``SyncReplicasHook`` and its
workers would:

1. servers: every task of the plan's cluster (the jobs and task counts of ``--cluster``, or ps and
   worker) on 127.0.0.1 in this process, or one process per task (``isolate``,
   :mod:`placeviz.verify.task_server`), or none (``--servers``: their resource containers are
   reset only with ``--reset-containers``; otherwise a token queue that is closed or holds tokens,
   or accumulators holding gradients, fail the run before anything is initialized);
2. one session per worker on its own server, each importing its own graph (``graph_w<i>.pb``: the
   worker-side ops on its task), Grappler off and L0 so the partition graphs compare with placeviz;
3. the chief runs the init op, the local init op and the chief init op, every other worker its
   local-step init; the chief runs the init tokens and starts the queue runner thread, which runs
   the sync op once per global step (exactly ``steps`` times); W worker threads run the train op
   until the queue runner is done, then the token queue is closed (as TF's queue runner does at
   stop) so no worker stays blocked;
4. evidence: every run is traced (``FULL_TRACE``: the step stats of every device, also remote ones)
   and the watched op names are counted; worker runs fetch their gradients and the token, sync runs
   fetch the inputs of the optimizer's updates; worker 0's first run and the first sync run keep
   their partition graphs; variables are read before and after; then a stale-gradient probe;
5. a watchdog turns hangs into results: a task process that dies, no progress while the
   accumulators and the token queue stand still (a deadlock), or the deadline. It reads what every
   thread waits in and the state of the queue and the accumulators.

Everything goes to ``result.json`` and ``arrays.npz`` (opened before the sandbox, written last);
the checks are made by the parent
(:mod:`placeviz.verify.checks`). The process ends with ``os._exit`` (TF servers cannot be stopped);
task processes are killed first.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placeviz.escape import terminal_text
from placeviz.op_kinds import QUEUE_OPS
from placeviz.verify import sandbox

# numpy is imported by main() once the process is in its sandbox: its BLAS starts threads at import,
# and unshare(CLONE_NEWUSER) refuses a process with more than one thread (EINVAL, unshare(2)).
if TYPE_CHECKING:
    import numpy as np
else:
    np = None

CHILD_FLAG = "--verify-coordinator"
SCRATCH = "run"  # WORKDIR/run: the only writable directory in the sandbox, the servers' working directory
STALL_S = 6.0  # no run finished and no state change for this long while everything waits: deadlock
DELAY_SCOPE = "placeviz_slow_worker"  # --slow-worker: the delay op's name scope (its op is <scope>/delay)
MAX_EVENTS = 300_000  # --trace keeps every op of every run up to this many (then only the marked ones)
_LABEL_OP = re.compile(r"= ([A-Za-z0-9_>]+)\(")


def progress(message: str) -> None:
    """One ``@@ `` line on stderr, which the parent relays as progress: a control character from the
    model (a node name with a newline) is shown escaped, so it cannot end the line or forge another."""
    print(f"@@ {terminal_text(message)}", file=sys.stderr, flush=True)


class Failure(Exception):
    """A failed run: ``kind`` (dead_task | deadlock | timeout | tf_error | setup | leftover_state) and details."""

    def __init__(self, kind: str, message: str, **details):
        super().__init__(message)
        self.kind, self.message, self.details = kind, message, details


class Coordinator:
    # set by run() once TensorFlow is imported (in the sandbox)
    tf: Any
    dtype_name: Callable[[int], str]
    failure: Failure | None
    watch: frozenset[str]
    marks: set[str]
    feeds: list[dict[str, Any]]

    def __init__(self, work: Path, plan: dict, isolated: bool):
        self.work, self.plan = work, plan
        self.scratch = work / SCRATCH  # cluster.json, the task processes' ready files and stderr
        self.t_start = time.monotonic()
        self.epoch0_us = time.time() * 1e6  # step stats' all_start_micros are wall-clock microseconds
        self.deadline = self.t_start + float(plan["timeout_s"])
        self.timings: dict = {}
        self.arrays: dict[str, np.ndarray] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.procs: dict[str, subprocess.Popen] = {}
        self.servers: list = []
        self.result: dict = {
            "network": {"namespace": isolated, "interfaces": {"coordinator": sandbox.interfaces()}},
            "pids": {"coordinator": os.getpid()}, "timings": self.timings, "worker_runs": [], "sync_runs": [],
            "failure": None, "errors": [], "partition_runs": {}, "threads": {}, "events": [],
            "events_truncated": False,
        }
        self.last_progress = time.monotonic()
        self.sync_done = 0
        self.injected, self.injected_at = False, 0
        self.runner_queues: dict[int, set[str]] = {}
        self.queue_probes: list[tuple[int, str, str, int, Any]] = []
        self.close_op = None
        self.tickets = 0

    # ------------------------------------------------------------------------------ cluster
    def cluster_spec(self) -> dict:
        """job -> addresses: the user's servers (``--servers``), or free loopback ports (of our namespace)
        for every job of the plan's cluster (``--cluster``'s jobs and task counts; W workers)."""
        plan = self.plan
        if plan["existing_cluster"]:
            return plan["cluster"]
        counts = {**plan["cluster"], plan["worker_job"]: plan["workers"]}
        jobs = list(counts.items())
        ports = iter(sandbox.free_ports(sum(n for _, n in jobs if n)))
        return {job: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for job, n in jobs if n}

    def start_cluster(self, spec: dict) -> None:
        plan = self.plan
        if plan["existing_cluster"]:
            # Leftover tokens, gradients or a closed token queue from an earlier run would falsify this one:
            # cleared when asked, else found by leftover_state() before anything is initialized.
            if plan.get("reset_containers"):
                target = "grpc://" + spec[plan["worker_job"]][0]
                progress(f"resetting the resource containers of the cluster ({target}) ...")
                self.tf.compat.v1.Session.reset(target)
            return
        t0 = self.t_start if plan["isolate"] else time.monotonic()
        if plan["isolate"]:  # spawned before TF was imported here; now wait for them
            self._wait_for_tasks()
        else:
            jobs = [(job, len(addresses)) for job, addresses in spec.items()]
            tf = self.tf
            config = tf.compat.v1.ConfigProto(device_count={"CPU": int(plan.get("cpus_per_task", 1))})
            cs = tf.train.ClusterSpec(spec)
            for job, n in jobs:
                for i in range(n):
                    self.servers.append(tf.distribute.Server(cs, job_name=job, task_index=i, protocol="grpc",
                                                             config=config, start=True))
        self.timings["servers_start_s"] = round(time.monotonic() - t0, 3)

    def spawn_tasks(self, spec: dict) -> None:
        (self.scratch / "cluster.json").write_text(json.dumps(spec))
        env = sandbox.child_env()
        for job, addresses in spec.items():
            for i in range(len(addresses)):
                err = open(self.scratch / f"task_{job}_{i}.stderr", "wb")  # noqa: SIM115 - kept open for the child
                self.procs[f"{job}:{i}"] = subprocess.Popen(
                    [sys.executable, "-m", "placeviz.verify.task_server", str(self.scratch), job, str(i),
                     str(self.plan.get("cpus_per_task", 1))],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=self.scratch,
                    preexec_fn=sandbox.die_with_parent)
        progress(f"started {len(self.procs)} task processes")

    def _wait_for_tasks(self) -> None:
        progress("waiting for the task processes' servers ...")
        pending = dict(self.procs)
        while pending:
            for key, proc in list(pending.items()):
                job, i = key.split(":")
                ready = self.scratch / f"ready_{job}_{i}.json"
                if ready.exists():
                    info = json.loads(ready.read_text())
                    self.result["pids"][key] = info["pid"]
                    self.result["network"]["interfaces"][key] = info["interfaces"]
                    self.timings.setdefault("task_start_s", {})[key] = info["start_s"]
                    del pending[key]
                elif proc.poll() is not None:
                    raise Failure("setup", f"task process {key} exited with code {proc.returncode} while starting: "
                                  f"{self._tail(key)}", task=key)
            if time.monotonic() > self.deadline:
                raise Failure("timeout", f"servers not ready before the deadline: {sorted(pending)}")
            time.sleep(0.1)

    def _tail(self, key: str) -> str:
        job, i = key.split(":")
        with contextlib.suppress(OSError):
            lines = (self.scratch / f"task_{job}_{i}.stderr").read_text(errors="replace").strip().splitlines()
            return lines[-1] if lines else ""
        return ""

    def dead_tasks(self) -> list[dict]:
        out = []
        for key, proc in self.procs.items():
            code = proc.poll()
            if code is not None:
                sig = -code if code < 0 else None
                out.append({"task": key, "pid": proc.pid, "returncode": code,
                            "signal": signal.Signals(sig).name if sig else None})
        return out

    def kill_tasks(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for proc in self.procs.values():
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)

    # ------------------------------------------------------------------------------ graphs
    def build_sessions(self, spec: dict) -> None:
        tf, plan = self.tf, self.plan
        t0 = time.monotonic()
        config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        oo = config.graph_options.optimizer_options
        oo.opt_level = tf.compat.v1.OptimizerOptions.L0
        oo.do_function_inlining = False
        oo.global_jit_level = tf.compat.v1.OptimizerOptions.OFF
        self.graphs, self.sessions = [], []
        for i in range(plan["workers"]):
            graph_def = tf.compat.v1.GraphDef.FromString((self.work / f"graph_w{i}.pb").read_bytes())
            g = tf.Graph()
            with g.as_default():
                tf.compat.v1.import_graph_def(graph_def, name="")
            self.graphs.append(g)
        self.original = frozenset(n.name for n in self.graphs[0].as_graph_def().node)
        for i, seconds in plan.get("slow_workers", {}).items():
            self._add_delay(int(i), float(seconds))
        self._add_probe_ops(self.graphs[0])
        self._add_queue_probes()
        self.timings["graph_import_s"] = round(time.monotonic() - t0, 3)
        t0 = time.monotonic()
        for i, g in enumerate(self.graphs):
            target = "grpc://" + spec[plan["worker_job"]][i]
            self.sessions.append(tf.compat.v1.Session(target, graph=g, config=config))
        self.timings["sessions_s"] = round(time.monotonic() - t0, 3)

    def _add_delay(self, i: int, seconds: float) -> None:
        """``--slow-worker``: an ``IteratorGetNext`` of a ``SleepDataset`` (it sleeps ``seconds`` before
        each element; tensorflow/core/kernels/data/experimental/sleep_dataset_op.cc) on worker ``i``'s
        device, made a control input of the plan's ``delay_targets`` in worker ``i``'s graph: its
        gradients reach the ps that much later than its read of the parameters."""
        from tensorflow.python.data.experimental.ops.testing import sleep

        tf, g = self.tf, self.graphs[i]
        targets = [g.get_operation_by_name(n) for n in self.plan["delay_targets"] if _has_op(g, n)]
        if not targets:
            return
        device = f"/job:{self.plan['worker_job']}/task:{i}"
        with g.as_default(), tf.device(device), tf.name_scope(DELAY_SCOPE):
            ds = tf.data.Dataset.from_tensors(np.int64(0)).repeat().apply(sleep(int(seconds * 1e6)))
            # no prefetch (tf.data's default inject_prefetch/autotune would sleep ahead, between runs)
            options = tf.data.Options()
            options.experimental_optimization.apply_default_optimizations = False
            options.experimental_optimization.inject_prefetch = False
            options.autotune.enabled = False
            ds = ds.with_options(options)
            delay = tf.compat.v1.data.make_one_shot_iterator(ds).get_next(name="delay")
        for op in targets:
            op._add_control_input(delay.op)  # noqa: SLF001 - TF has no public API to add one to an imported op
        self.delay_ops = getattr(self, "delay_ops", set()) | {delay.op.name}

    def _add_probe_ops(self, g) -> None:
        """Ops of ours in the chief's graph: accumulator counts, queue size, variable reads, queue close."""
        tf, plan = self.tf, self.plan
        raw = tf.raw_ops
        self.probe: dict[str, object] = {}
        self.reads: dict[str, object] = {}
        with g.as_default(), tf.name_scope("placeviz_verify"):
            for a in plan["accumulators"]:
                op = g.get_operation_by_name(a["name"])
                with g.colocate_with(op):
                    h = op.outputs[0]
                    if a["op"].startswith("Resource"):
                        self.probe[a["name"]] = raw.ResourceAccumulatorNumAccumulated(handle=h)
                    else:
                        self.probe[a["name"]] = raw.AccumulatorNumAccumulated(handle=h)
            self.close_op = None
            if plan["token_queue"]:
                q = g.get_operation_by_name(plan["token_queue"])
                with g.colocate_with(q):
                    v2 = q.type.endswith("V2")
                    self.probe["__queue_size__"] = (raw.QueueSizeV2 if v2 else raw.QueueSize)(handle=q.outputs[0])
                    self.queue_closed = (raw.QueueIsClosedV2 if v2 else raw.QueueIsClosed)(handle=q.outputs[0])
                    self.close_op = (raw.QueueCloseV2 if v2 else raw.QueueClose)(handle=q.outputs[0],
                                                                                 cancel_pending_enqueues=True)
            for name, kind in plan["variables"].items():
                op = g.get_operation_by_name(name)
                if kind == "resource":
                    with g.colocate_with(op):
                        self.reads[name] = raw.ReadVariableOp(resource=op.outputs[0], dtype=op.get_attr("dtype"))
                else:
                    self.reads[name] = op.outputs[0]
            if plan["global_step"]:
                self.probe["__global_step__"] = self.reads.get(plan["global_step"])

    def _add_queue_probes(self) -> None:
        """The size of every queue each worker's session can see (the chief: all; others: their own
        worker-side queues), to name the queue a hung run really waits on."""
        raw = self.tf.raw_ops
        self.queue_probes = []
        for i, g in enumerate(self.graphs):
            with g.as_default(), self.tf.name_scope("placeviz_verify_queues"):
                for op in list(g.get_operations()):
                    if op.type not in QUEUE_OPS or (i > 0 and f"/job:{self.plan['worker_job']}" not in op.device):
                        continue
                    v2 = op.type.endswith("V2")
                    with g.colocate_with(op):
                        size = (raw.QueueSizeV2 if v2 else raw.QueueSize)(handle=op.outputs[0])
                    capacity = op.get_attr("capacity") if "capacity" in op.node_def.attr else -1
                    self.queue_probes.append((i, op.name, op.device, capacity, size))

    def read_queues(self) -> list[dict]:
        """Every probed queue's size now (a queue whose session does not answer is left out)."""
        out = []
        for i, name, device, capacity, size in self.queue_probes:
            with contextlib.suppress(Exception):
                n = int(self.sessions[i].run(size, options=self.run_options(2)))
                out.append({"worker": i, "queue": name, "device": device, "size": n, "capacity": capacity,
                            "runner": name in self.runner_queues.get(i, ()),
                            "token_queue": name == self.plan["token_queue"]})
        return out

    # ------------------------------------------------------------------------------ queue runners
    def start_input_runners(self) -> None:
        """Each worker's input queue runners, on its own session (Supervisor.start_queue_runners)."""
        from tensorflow.core.protobuf import queue_runner_pb2

        tf = self.tf
        self.runner_coord = tf.compat.v1.train.Coordinator(clean_stop_exception_types=[])
        self.runner_threads: list[threading.Thread] = []
        self.runner_queues = {}
        for i, mine in enumerate(self.plan["per_worker"]):
            for qr in mine["queue_runners"]:
                proto = queue_runner_pb2.QueueRunnerDef(
                    queue_name=qr["queue"], enqueue_op_name=qr["enqueue_ops"], close_op_name=qr["close_op"],
                    cancel_op_name=qr["cancel_op"], queue_closed_exception_types=qr["closed_errors"])
                with self.graphs[i].as_default():
                    runner = tf.compat.v1.train.QueueRunner(queue_runner_def=proto)
                self.runner_threads += runner.create_threads(self.sessions[i], coord=self.runner_coord, daemon=True,
                                                             start=True)
                self.runner_queues.setdefault(i, set()).add(qr["queue"])
        if self.runner_threads:
            n = sum(len(q) for q in self.runner_queues.values())
            progress(f"started {n} input queue runner(s) on {len(self.runner_queues)} worker(s)")

    def runner_error(self) -> BaseException | None:
        """The exception an input queue runner stopped with (TF's Coordinator keeps the first)."""
        coord = getattr(self, "runner_coord", None)
        exc_info = getattr(coord, "_exc_info_to_raise", None)
        return exc_info and exc_info[1]

    def stop_input_runners(self) -> None:
        coord = getattr(self, "runner_coord", None)
        if coord is None:
            return
        coord.request_stop()  # each runner's close-on-stop thread runs its cancel op
        for t in self.runner_threads:
            t.join(timeout=5)

    def leftover_state(self) -> None:
        """``--servers`` without ``--reset-containers``: the token queue must be open and empty and the
        accumulators empty, as no earlier run left them. Only reads (the queue and the accumulators are
        created if they do not exist yet, as the init would); on a finding nothing else runs."""
        plan = self.plan
        names = [a["name"] for a in plan["accumulators"]]
        fetches = {"closed": self.queue_closed, "tokens": self.probe["__queue_size__"],
                   **{n: self.probe[n] for n in names}}
        values = self.sessions[0].run(fetches, options=self.run_options(10))
        found = []
        if bool(values["closed"]):
            found.append(f"the token queue {plan['token_queue']} is closed")
        elif int(values["tokens"]):
            found.append(f"the token queue {plan['token_queue']} holds {int(values['tokens'])} tokens")
        held = {n: int(values[n]) for n in names if int(values[n])}
        if held:
            found.append(f"{len(held)} accumulator(s) hold gradients: "
                         + ", ".join(f"{n}={c}" for n, c in list(held.items())[:3]) + (" ..." if len(held) > 3 else ""))
        self.result["leftover_state"] = {"queue_closed": bool(values["closed"]), "tokens": int(values["tokens"]),
                                         "accumulators": held}
        if found:
            raise Failure("leftover_state", f"the servers hold state from an earlier run ({'; '.join(found)}); "
                          "pass --reset-containers to clear it")

    def read_variables(self, label: str) -> None:
        if not self.reads:
            return
        values = self.sessions[0].run(self.reads, options=self.run_options(10))
        for name, value in values.items():
            self.arrays[f"{label}/{name}"] = np.asarray(value)

    def read_loss(self) -> None:
        """The loss after the run, on worker 0's inputs (the same seeded feeds in every mode)."""
        loss = self.plan.get("loss")
        if not loss:
            return
        try:
            value = self.sessions[0].run(loss, feed_dict=self.feeds[0], options=self.run_options(30))
            self.result["loss"] = {"tensor": loss, "value": float(np.mean(value))}
        except Exception as e:  # noqa: BLE001 - reported, the run itself is done
            self.result["loss"] = {"tensor": loss, "error": f"{type(e).__name__}: {_first_line(e)}"}

    def read_probe(self) -> dict:
        values = self.sessions[0].run(self.probe, options=self.run_options(3))
        return {k: (int(v) if np.ndim(v) == 0 else np.asarray(v).tolist()) for k, v in values.items()}

    # ------------------------------------------------------------------------------ runs
    def run_options(self, limit_s: float | None = None, trace: bool = False, partitions: bool = False):
        tf = self.tf
        remaining = max(0.2, self.deadline - time.monotonic())
        limit = remaining if limit_s is None else min(limit_s, remaining)
        return tf.compat.v1.RunOptions(
            timeout_in_ms=max(100, int(limit * 1000)),
            trace_level=tf.compat.v1.RunOptions.FULL_TRACE if trace else tf.compat.v1.RunOptions.NO_TRACE,
            output_partition_graphs=partitions)

    def record(self, who: str, run: int, metadata) -> None:
        """The run's ops from its step stats as ``[who, run, device, node, op, start_us, dur_us]``
        (microseconds since the coordinator started): every op with ``--trace`` (up to MAX_EVENTS),
        else only the marked ones the analysis reads (reads and updates of the variables, the token
        dequeue, accumulator applies and takes, the slow-worker delay)."""
        out = []
        keep_all = self.plan.get("trace") and len(self.result["events"]) < MAX_EVENTS
        for dev in metadata.step_stats.dev_stats:
            for ns in dev.node_stats:
                if not keep_all and ns.node_name not in self.marks:
                    continue
                m = _LABEL_OP.search(ns.timeline_label)
                out.append([who, run, dev.device, ns.node_name, m.group(1) if m else "",
                            round(ns.all_start_micros - self.epoch0_us, 1), max(0, int(ns.all_end_rel_micros))])
        with self.lock:
            if keep_all is False and self.plan.get("trace"):
                self.result["events_truncated"] = True
            self.result["events"].extend(out)

    def counts(self, metadata) -> dict[str, int]:
        c: collections.Counter = collections.Counter()
        for dev in metadata.step_stats.dev_stats:
            for ns in dev.node_stats:
                if ns.node_name in self.watch:
                    c[ns.node_name] += 1
        return dict(c)

    def keep_partitions(self, key: str, kind: str, fetches, targets, seconds: float, metadata) -> None:
        from placeviz.verify.runtime_truth import RuntimeTruth, _Collector

        truth = RuntimeTruth(devices={}, partitions={}, added_nodes={}, fetches=list(fetches),
                             targets=list(targets), config={})
        _Collector(truth, self.original, self.dtype_name).add_run(kind, list(fetches), list(targets), seconds,
                                                                   metadata)
        self.result["partition_runs"][key] = truth.runs[-1]

    def initialize(self) -> None:
        plan, chief = self.plan, self.sessions[0]
        t0 = time.monotonic()
        mine = plan["per_worker"][0]
        steps = [("init op", o) for o in plan["init_ops"]] + [("local init op", o) for o in mine["local_init_ops"]]
        if plan["chief_init_op"]:
            steps.append(("chief init op", plan["chief_init_op"]))
        for what, op in steps:
            progress(f"chief: {what} {op}")
            chief.run(op, options=self.run_options(120))
        for i, sess in enumerate(self.sessions[1:], start=1):
            for op in plan["per_worker"][i]["local_init_ops"]:
                sess.run(op, options=self.run_options(120))
            progress(f"worker {i}: local init")
        self.start_input_runners()
        self.read_variables("initial")
        for op in plan["init_tokens_ops"]:
            progress(f"chief: init tokens {op}")
            chief.run(op, options=self.run_options(60))
        self.timings["init_s"] = round(time.monotonic() - t0, 3)

    def worker_loop(self, i: int) -> None:
        plan, sess = self.plan, self.sessions[i]
        mine = plan["per_worker"][i]
        feeds = self.feeds[i]
        fetches, train_ops = mine["fetches"], mine["train_ops"]
        state = self.result["threads"][f"worker:{i}"] = {"state": "starting", "runs": 0}
        n = 0
        while not self.stop.is_set():
            if not self.may_start(state):
                return
            metadata = self.tf.compat.v1.RunMetadata()
            first = i == 0 and n == 0
            state.update(state="running", op=",".join(train_ops), since=round(time.monotonic() - self.t_start, 3))
            t0 = time.monotonic()
            try:
                out = sess.run(fetches + train_ops, feed_dict=feeds,
                               options=self.run_options(trace=True, partitions=first), run_metadata=metadata)
            except Exception as e:  # noqa: BLE001 - reported, or expected after the stop
                if self.stop.is_set():
                    state["state"] = "stopped"
                    return
                state.update(state="error", error=f"{type(e).__name__}: {_first_line(e)}")
                self.fail(Failure("tf_error", f"worker {i} run {n}: {type(e).__name__}: {_first_line(e)}",
                                  worker=i, run=n))
                return
            t1 = time.monotonic()
            record = {"worker": i, "run": n, "t0": round(t0 - self.t_start, 4), "t1": round(t1 - self.t_start, 4),
                      "counts": self.counts(metadata)}
            for key, value in zip(mine["keys"], out[: len(fetches)], strict=True):
                if key == "token":
                    record["token"] = int(np.asarray(value).reshape(-1)[0])
                else:
                    self.arrays[f"w{i}/r{n}/{key}"] = np.asarray(value)
            if first:
                self.timings["first_worker_run_s"] = round(t1 - t0, 3)
                self.keep_partitions("worker", "main", fetches, train_ops, t1 - t0, metadata)
            self.record(f"worker:{i}", n, metadata)
            with self.lock:
                self.result["worker_runs"].append(record)
                self.last_progress = t1
            state.update(state="idle", runs=n + 1)
            n += 1

    def may_start(self, state: dict) -> bool:
        """async: whether one of the K runs handed out in all is left for this worker (False: stop).
        Other modes: always (TF's token queue decides when a worker's run can finish)."""
        if self.plan.get("mode") != "async":
            return True
        with self.lock:
            if self.tickets <= 0:
                state["state"] = "done"
                return False
            self.tickets -= 1
            return True

    def queue_runner(self) -> None:
        plan, sess = self.plan, self.sessions[0]
        state = self.result["threads"]["chief queue runner"] = {"state": "starting", "runs": 0}
        for k in range(1, plan["steps"] + 1):
            metadata = self.tf.compat.v1.RunMetadata()
            state.update(state="running", op=plan["sync_op"], since=round(time.monotonic() - self.t_start, 3))
            t0 = time.monotonic()
            try:
                out = sess.run(plan["sync_fetches"] + [plan["sync_op"]],
                               options=self.run_options(trace=True, partitions=k == 1), run_metadata=metadata)
            except Exception as e:  # noqa: BLE001
                if self.stop.is_set():
                    state["state"] = "stopped"
                    return
                state.update(state="error", error=f"{type(e).__name__}: {_first_line(e)}")
                self.fail(Failure("tf_error", f"sync run {k}: {type(e).__name__}: {_first_line(e)}", run=k))
                return
            t1 = time.monotonic()
            for name, value in zip(plan["sync_fetches"], out, strict=False):
                self.arrays[f"s{k}/{name}"] = np.asarray(value)
            if k == 1:
                self.timings["first_sync_run_s"] = round(t1 - t0, 3)
                self.keep_partitions("sync", "main", plan["sync_fetches"], [plan["sync_op"]], t1 - t0, metadata)
            self.record("chief", k, metadata)
            with self.lock:
                self.result["sync_runs"].append({"step": k, "t0": round(t0 - self.t_start, 4),
                                                 "t1": round(t1 - self.t_start, 4), "counts": self.counts(metadata)})
                self.last_progress = t1
                self.sync_done = k
            state.update(state="idle", runs=k)
            progress(f"global step {k}/{plan['steps']} ({t1 - t0:.2f} s)")
            self.maybe_inject_fault()
        state["state"] = "done"

    def fail(self, failure: Failure) -> None:
        with self.lock:
            if self.failure is None:
                self.failure = failure

    # ------------------------------------------------------------------------------ watchdog
    def watch_run(self, threads: list[threading.Thread], qr: threading.Thread | None) -> None:
        plan = self.plan
        last_state = None
        still_since = None
        while True:
            # first: a task that died is the cause, even if a session already failed or the steps got done
            dead = self.dead_tasks()
            if dead:
                d = dead[0]
                how = f"killed by {d['signal']}" if d["signal"] else f"exited with code {d['returncode']}"
                cause = " (fault injected by --inject-fault)" if self.injected else ""
                step = self.injected_at if self.injected else self.sync_done
                raise Failure("dead_task", f"task process {d['task']} (pid {d['pid']}) {how}{cause} after global "
                              f"step {step}", tasks=dead)
            if self.failure is not None:
                return
            err = self.runner_error()
            if err is not None:
                raise Failure("tf_error", f"an input queue runner stopped: {type(err).__name__}: {_first_line(err)}")
            if qr is not None and not qr.is_alive() and self.sync_done >= plan["steps"]:
                return
            if plan.get("mode") == "async" and not any(t.is_alive() for t in threads) and self.tickets <= 0:
                return
            if not any(t.is_alive() for t in threads) and (qr is None or not qr.is_alive()):
                raise Failure("tf_error", "every worker stopped before the run finished")
            now = time.monotonic()
            if now > self.deadline - 1.5:
                raise Failure("timeout", f"the run did not finish within the timeout ({plan['timeout_s']} s)")
            if now - self.last_progress > self.stall_after():
                try:
                    state = self.read_probe()
                except Exception:  # noqa: BLE001 - the chief cannot be reached: keep waiting for the deadline
                    state = None
                if state is not None and state == last_state and still_since is not None \
                        and now - still_since > self.stall_after() / 2:
                    raise Failure("deadlock", "no run finished and nothing changed for "
                                  f"{now - self.last_progress:.1f} s while every thread waits")
                if state != last_state:
                    last_state, still_since = state, now
            time.sleep(0.2)

    def maybe_inject_fault(self) -> None:
        """``--inject-fault TASK@STEP``: SIGKILL task process TASK right after global step STEP."""
        fault = self.plan.get("fault")
        if not fault or self.injected:
            return
        task, _, at = fault.partition("@")
        if self.sync_done >= int(at or 1) and task in self.procs:
            progress(f"fault injection: killing {task} (pid {self.procs[task].pid})")
            self.procs[task].send_signal(signal.SIGKILL)
            self.procs[task].wait()
            self.injected, self.injected_at = True, self.sync_done

    def stall_after(self) -> float:
        """Seconds without a finished run before the state is compared: a few times the slowest run
        so far (a slow model is not a deadlock), or of the initialization before any run finished."""
        with self.lock:
            runs = self.result["worker_runs"] + self.result["sync_runs"]
            slowest = max((r["t1"] - r["t0"] for r in runs), default=self.timings.get("init_s", 0.0))
        return max(STALL_S, 4.0 * slowest)

    def diagnose(self, failure: Failure) -> dict:
        plan = self.plan
        now = time.monotonic() - self.t_start
        waiting = []
        for who, st in self.result["threads"].items():
            if st.get("state") == "running":
                waiting.append({"who": who, "op": st.get("op"), "for_s": round(now - st.get("since", now), 2),
                                "runs_done": st.get("runs", 0)})
        if plan["queue_runner"] is None and plan.get("mode") != "async":
            waiting.append({"who": "chief queue runner", "op": None, "note": "not running: the chief has none"})
        probe = None
        with contextlib.suppress(Exception):
            probe = self.read_probe()
        queues = []
        with contextlib.suppress(Exception):
            queues = self.read_queues()
        return {"kind": failure.kind, "message": failure.message, "details": failure.details,
                "waiting": waiting, "state": probe, "queues": queues, "global_steps_done": self.sync_done,
                "at_s": round(now, 3)}

    # ------------------------------------------------------------------------------ probe
    def stale_probe(self) -> dict | None:
        """A lagging worker's gradient (tagged with local step 0, K steps old) is dropped; a current one
        (tagged K) is counted. Run on the chief's session: only the accumulator applies, tag fed."""
        plan = self.plan
        dense = [a for a in plan["accumulators"] if a["apply_ops"]]
        if not dense or self.sync_done < 1:
            return None
        g = self.graphs[0]
        # With a resource local step every apply reads it on its own device: feed every read.
        tags = list(dict.fromkeys(g.get_operation_by_name(a["apply_ops"][0]).inputs[1] for a in dense))
        targets = [a["apply_ops"][0] for a in dense]
        out: dict[str, Any] = {"tag_tensors": [t.name for t in tags], "accumulators": [a["name"] for a in dense]}
        for label, tag in (("stale", 0), ("current", self.sync_done)):
            before = self.read_probe()
            fed = {t: np.asarray(tag, t.dtype.as_numpy_dtype) for t in tags}
            self.sessions[0].run(targets, feed_dict={**self.feeds[0], **fed}, options=self.run_options(30))
            after = self.read_probe()
            out[label] = {"tag": tag, "before": [before[a["name"]] for a in dense],
                          "after": [after[a["name"]] for a in dense]}
        out["accumulator_global_step"] = self.sync_done
        return out

    # ------------------------------------------------------------------------------ main
    def run(self) -> dict:
        plan = self.plan
        self.failure = None
        self.watch = frozenset(plan["watch"])
        self.tickets = plan["steps"] if plan.get("mode") == "async" else 0
        self.marks = set(plan["watch"]) | {r for rs in plan.get("reads", {}).values() for r in rs} | {
            f"{DELAY_SCOPE}/delay"} | ({plan["token_dequeue"]} if plan.get("token_dequeue") else set())
        spec = self.cluster_spec()
        self.result["cluster_spec"] = spec
        if plan["isolate"]:  # their TF imports overlap with ours
            self.spawn_tasks(spec)
        t0 = time.monotonic()
        import tensorflow as tf
        from tensorflow.core.framework import types_pb2

        self.tf = tf
        self.dtype_name = lambda t: types_pb2.DataType.Name(t)
        tf.compat.v1.disable_eager_execution()
        self.timings["import_tf_s"] = round(time.monotonic() - t0, 3)
        self.result["tf_version"] = tf.__version__
        try:
            progress("starting the cluster ...")
            self.start_cluster(spec)
            progress("creating the worker sessions ...")
            self.build_sessions(spec)
            if plan["existing_cluster"] and not plan.get("reset_containers") and plan["token_queue"]:
                self.leftover_state()
            self.feeds = []
            for i in range(plan["workers"]):
                with np.load(self.work / f"feeds_w{i}.npz") as data:  # a worker's own graph may lack some
                    self.feeds.append({k: data[k] for k in data.files if _has_tensor(self.graphs[i], k)})
            self.initialize()
            threads = [threading.Thread(target=self.worker_loop, args=(i,), daemon=True, name=f"worker{i}")
                       for i in range(plan["workers"])]
            qr = None
            t_steps = time.monotonic()
            if plan["queue_runner"] is not None:
                qr = threading.Thread(target=self.queue_runner, daemon=True, name="chief-qr")
                qr.start()
            elif plan.get("mode") != "async":
                progress("no chief queue runner: nothing will run the sync op")
            progress(f"{plan['workers']} workers run {', '.join(plan['train_ops'])} ...")
            self.last_progress = time.monotonic()
            for t in threads:
                t.start()
            self.watch_run(threads, qr)
            if self.failure is not None:
                raise self.failure
            self.timings["steps_s"] = round(time.monotonic() - t_steps, 3)
            self.stop.set()
            if self.close_op is not None:
                self.sessions[0].run(self.close_op, options=self.run_options(10))
            for t in threads:
                t.join(timeout=10)
            self.read_variables("final")
            self.read_loss()
            self.result["final_probe"] = self.read_probe()
            self.result["stale_probe"] = self.stale_probe()
        except Failure as f:
            self.stop.set()
            self.result["failure"] = self.diagnose(f)
            if f.kind != "leftover_state" and self.close_op is not None:  # the user's servers stay as found
                with contextlib.suppress(Exception):
                    self.sessions[0].run(self.close_op, options=self.run_options(3))
        except Exception as e:  # noqa: BLE001 - any other error is a result too
            self.stop.set()
            error = Failure("tf_error", f"{type(e).__name__}: {_first_line(e)}")
            self.result["failure"] = self.diagnose(error)
            self.result["errors"].append(traceback.format_exc()[-3000:])
        with contextlib.suppress(Exception):
            self.stop_input_runners()
        self.timings["total_s"] = round(time.monotonic() - self.t_start, 3)
        self.result["task_stderr"] = {k: self._tail(k) for k in self.procs}
        return self.result


def _has_op(g, name: str) -> bool:
    try:
        g.get_operation_by_name(name)
    except (KeyError, ValueError):
        return False
    return True


def _has_tensor(g, name: str) -> bool:
    try:
        g.get_tensor_by_name(name if ":" in name else f"{name}:0")
    except (KeyError, ValueError):
        return False
    return True


def _first_line(e: BaseException) -> str:
    from placeviz.verify.runtime_truth import summarize_error

    text, _nodes = summarize_error(getattr(e, "message", None) or str(e))
    return text[:500]


def write_probe(work: Path) -> dict:
    """Evidence of the mount namespace: creating a file next to the temp dir (outside it) and one
    among verify's own files must fail with EROFS, one in the scratch dir must succeed. None is left."""
    out = {"writable": str(work / SCRATCH)}
    for key, path in (("outside", work.parent / f".placeviz-verify-probe-{os.getpid()}"),
                      ("own_files", work / ".probe"), ("inside", work / SCRATCH / ".probe")):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(path)
            out[key] = "written"
        except OSError as e:
            out[key] = errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else str(e)
    return out


_OWN_FILES = re.compile(r"cluster\.json|task_.*\.stderr|\.?ready_.*\.json|\.placeviz-mplconfig/.*")


def written_by_the_graph(scratch: Path, limit: int = 50) -> list[str]:
    """Files in the scratch dir that verify did not write: what the graph's ops wrote (``--allow-io``;
    relative paths land here, the servers' working directory), shown in the report."""
    out = []
    for path in sorted(scratch.rglob("*")):
        rel = path.relative_to(scratch).as_posix()
        if path.is_file() and not _OWN_FILES.fullmatch(rel):
            out.append(rel)
    return out[:limit]


def main(workdir: str, parent: int | None = None) -> None:
    from placeviz.tflog import quiet_if_inherited

    quiet_if_inherited()
    work = Path(workdir)
    # Die with placeviz verify, even on its SIGKILL (prctl(2) PR_SET_PDEATHSIG; armed here, not in a
    # preexec_fn, so the parent needs no fork-time code; a parent that died before this is caught by
    # the getppid check).
    sandbox.die_with_parent()
    if parent is not None and os.getppid() != parent:
        os._exit(5)
    global np
    plan = json.loads((work / "plan.json").read_text())
    # Opened before the sandbox: in it, only WORKDIR/run (which the graph may write) is writable, so
    # that an op of the graph (--allow-io) cannot replace verify's own inputs or its result.
    result_out = open(work / "result.json", "w")  # noqa: SIM115 - written at the end, through os._exit
    arrays_out = open(work / "arrays.npz", "wb")  # noqa: SIM115
    isolation: dict = {"requested": bool(plan.get("isolation", True)), "namespaces": False}
    if not plan["existing_cluster"]:
        if isolation["requested"]:
            try:
                made = sandbox.enter_sandbox(work / SCRATCH)
            except (sandbox.SandboxError, OSError) as e:
                result_out.write(json.dumps({"refused": str(e)}))
                result_out.close()
                os._exit(4)
            sandbox.die_with_parent()  # again: a user namespace may have reset it (prctl(2))
            isolation.update(namespaces=True, **made, mounts=write_probe(work))
        else:
            progress("WARNING: --no-isolation: the local TF servers listen on every interface (reachable from "
                     "other hosts while they run) and the graph's ops can write wherever you can")
    import numpy as np
    code = 0
    coordinator = Coordinator(work, plan, isolation["namespaces"])
    coordinator.result["isolation"] = isolation
    try:
        result = coordinator.run()
        isolation["written"] = written_by_the_graph(work / SCRATCH)
        named: dict[str, Any] = {k.replace("/", "|"): v for k, v in coordinator.arrays.items()}
        np.savez(arrays_out, **named)
        arrays_out.close()
        result_out.write(json.dumps(result, default=_jsonable))
        result_out.close()
    except BaseException:  # noqa: BLE001 - reported through the exit code and stderr
        traceback.print_exc()
        code = 3
    coordinator.kill_tasks()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == CHILD_FLAG:
        main(sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else None)
    print(f"usage: python -m placeviz.verify.coordinator {CHILD_FLAG} WORKDIR [PARENT_PID]", file=sys.stderr)
    sys.exit(2)
