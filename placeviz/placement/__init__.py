"""Placement: our ``replica_device_setter`` replay followed by our copy of TF's placer.

:func:`place_graph` is the pipeline every command uses:

1. the **setter** stage (:mod:`placeviz.placement.setter`) runs when the graph is unplaced (no node
   names a job) and ps tasks or a cluster are given, or always with ``replace_devices``; it writes
   the device strings ``replica_device_setter`` would have written;
2. the **placer** stage (:mod:`placeviz.placement.placer`) assigns every node a full runtime device
   of the cluster's device set, as a TF session does.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from itertools import compress

from placeviz.devices import ClusterSpec, DeviceSet, PyDeviceSpec, address_space, parse_full_name
from placeviz.graph import Graph, gc_paused
from placeviz.limits import (
    MAX_CLUSTER_TASKS,
    MAX_TASKS_PER_JOB,
    LimitError,
    check_count,
    device_bound_problem,
    exact_sums,
)
from placeviz.op_kinds import VARIABLE_OPS
from placeviz.placement.placer import Placement, PlacerConfig, place, read_fact_attrs
from placeviz.placement.setter import SetterConfig, SetterResult, run_setter
from placeviz.protos import GraphDef


@dataclass(frozen=True)
class PlacementOptions:
    """What the PLACE command-line options say."""

    setter: SetterConfig = field(default_factory=SetterConfig)
    cluster: ClusterSpec | None = None  # None: ps_tasks' cluster, or the jobs the graph names
    cpus_per_task: int = 1
    gpus_per_worker: int = 0
    placer: PlacerConfig = field(default_factory=PlacerConfig)
    replace_devices: bool = False
    notes: tuple[str, ...] = ()  # what the options themselves leave unsaid (e.g. --ps-tasks 0), for the report

    @property
    def wants_setter(self) -> bool:
        return self.setter.ps_tasks > 0 or self.setter.cluster is not None

    def for_task(self, task: int) -> PlacementOptions:
        """The options as worker task ``task``'s client has them (between-graph replication).

        ``--worker-device /job:worker/task:%d`` gets the task's index (the program's
        ``"/job:worker/task:%d" % task_index``); a session on the worker job runs in the task itself
        (``--master /job:worker/task:0`` becomes task ``task``'s), so a worker device without a
        task resolves to the task, as TF's placer does. Everything else is the same for every
        task; task 0 (the chief) only fills in the ``%d``.
        """
        setter = self.setter
        if "%d" in (setter.worker_device or ""):
            setter = dataclasses.replace(setter, worker_device=setter.worker_device.replace("%d", str(task)))
        placer = self.placer
        try:
            worker_job = setter.worker_job  # the one reading of --worker-device's job (SetterConfig)
        except Exception:  # noqa: BLE001 - a malformed device: the placement stage reports it
            worker_job = "worker"
        master = placer.master
        if task and master is not None and master.job == worker_job:
            placer = dataclasses.replace(placer, master_task=dataclasses.replace(master, task=task).to_string())
        if setter is self.setter and placer is self.placer:
            return self  # nothing task-specific (no %d, the session not on the worker job or task 0)
        return dataclasses.replace(self, setter=setter, placer=placer)


@dataclass
class PlacementResult:
    setter: SetterResult | None  # None when the graph kept its own devices
    placement: Placement
    device_set: DeviceSet
    cluster: ClusterSpec

    @property
    def graph(self) -> Graph:
        """The graph whose nodes ``placement.devices`` refers to (group NoOps may have been added)."""
        return self.placement.graph


def is_placed(graph: Graph) -> bool:
    """Was the graph built under a device setter (or placed by hand)? Its variables say.

    A setter gives every variable a job. Programs also pin a few ops of an otherwise unplaced
    graph to a job (``tf.device('/job:worker')`` around an input pipeline, ``colocate_with`` a
    variable...): such a graph is still unplaced, so ``--ps-tasks``/``--cluster`` run the setter
    over it. Only a graph without variables is judged by all its devices.
    """
    ops, devices = graph.ops, graph.devices
    variable_devices = set(compress(devices, map(VARIABLE_OPS.__contains__, ops)))  # C-level filter
    return any("/job:" in d for d in (variable_devices or set(devices)))


def strip_jobs(graph: Graph) -> Graph:
    """The graph as if built without a setter: job/replica/task removed from every device."""
    out = GraphDef()
    out.CopyFrom(graph.graph_def)
    cache: dict[str, str] = {}
    for node in out.node:
        device = node.device
        if device:
            stripped = cache.get(device)
            if stripped is None:
                spec = PyDeviceSpec.parse(device)
                stripped = cache[device] = spec.replace(job=None, replica=None, task=None).to_string()
            node.device = stripped
    return Graph(out)


def cluster_for(graph: Graph, options: PlacementOptions) -> ClusterSpec:
    """The cluster to place on.

    Given (``--cluster``), or the one ``--ps-tasks`` describes (the ps job with N tasks and the
    worker and master jobs with as many tasks as they name), or, with neither, every job and task
    the graph's devices name (so a placed graph can be analyzed as it is). A job gets every task
    below the highest one named, so the task indices are checked against placeviz's bounds
    (:mod:`placeviz.limits`) before any is listed: :class:`LimitError`.
    """
    if options.cluster is not None:
        return options.cluster
    if options.setter.cluster is not None:
        return options.setter.cluster
    tasks: dict[str, int] = {}
    named = {options.setter.worker_device, options.placer.master_task or ""}
    if not options.setter.ps_tasks:
        named |= set(graph.devices)
    for device in named:
        parsed = parse_full_name(device) if device else None
        if parsed is not None and parsed.job:
            if not 0 <= (parsed.task or 0) < MAX_TASKS_PER_JOB:
                # Every task below the highest one gets an address: check before building them.
                # (load() refuses such a graph already; options and other callers may not.)
                problem = device_bound_problem(device) or (f"task {parsed.task} is outside placeviz's task indices "
                                                           f"0-{MAX_TASKS_PER_JOB - 1}")
                raise LimitError(f"device {device!r}: {problem}")
            tasks[parsed.job] = max(tasks.get(parsed.job, 0), (parsed.task or 0) + 1)
    if options.setter.ps_tasks:
        ps_job = options.setter.ps_job
        check_count(options.setter.ps_tasks, MAX_TASKS_PER_JOB, "--ps-tasks")
        tasks[ps_job] = max(tasks.get(ps_job, 0), options.setter.ps_tasks)
    if not tasks:
        tasks = {"localhost": 1}
    check_count(sum(tasks.values()), MAX_CLUSTER_TASKS, "the number of tasks the graph's devices name")
    return ClusterSpec.from_dict({job: [f"{job}{k}:2222" for k in range(n)] for job, n in tasks.items()})


def place_graph(graph: Graph, options: PlacementOptions, op_table=None) -> PlacementResult:
    """Run the setter (when it applies) and the placer; see the module docstring."""
    options = options.for_task(0)  # a graph alone is the chief's: `/job:worker/task:%d` is task 0
    with gc_paused():  # the whole pipeline: a collection between the stages would walk both graphs
        return _place_graph(graph, options, op_table)


def setter_stage(graph: Graph, options: PlacementOptions, op_table=None) -> SetterResult | None:
    """The setter stage alone: ``replica_device_setter`` replayed when it applies, else None.

    It only writes device strings, as TF's device function does at op-creation time; nothing is
    checked against a cluster here (a ``/device:GPU:3`` pin is TF's placer's business, later).
    """
    options = options.for_task(0)
    if not (options.wants_setter and (options.replace_devices or not is_placed(graph))):
        return None
    source = strip_jobs(graph) if options.replace_devices else graph
    if op_table is None:
        from placeviz.ops import load_op_table

        op_table = load_op_table()
    # One pass over the NodeDefs reads `_class` (the setter needs it) and the attrs the op
    # facts depend on (the setter's resource test is handed them; the placer asks them again of
    # the setter's result, which shares NodeDefs and takes them from its source).
    attr_keys = read_fact_attrs(source, op_table)
    return run_setter(source, options.setter, op_table, attr_keys=attr_keys)


def _place_graph(graph: Graph, options: PlacementOptions, op_table) -> PlacementResult:
    if op_table is None and options.wants_setter:
        from placeviz.ops import load_op_table

        op_table = load_op_table()
    setter_result = setter_stage(graph, options, op_table)
    if setter_result is not None:
        graph = setter_result.graph
    cluster = cluster_for(graph, options)
    device_set = DeviceSet(cluster, options.cpus_per_task, options.gpus_per_worker)
    placer = options.placer
    if placer.master is not None and placer.master.job not in cluster.jobs:
        placer = PlacerConfig(placer.allow_soft_placement, None, placer.python_import)
    placement = place(graph, device_set, placer, op_table)
    return PlacementResult(setter_result, placement, device_set, cluster)


def placement_summary(result: PlacementResult, variable_ids: list[int], variable_bytes: list[int | None],
                      is_slot: list[bool], ps_job: str = "ps") -> dict:
    """The ``placement`` section of ``placeviz.analysis/1``: per device, per PS task, balance.

    The variables are given as three aligned lists: each one's node id in the placed graph (-1:
    not in it), its bytes (None: unknown) and whether it is an optimizer slot. They cover every
    variable, slots included: a PS holds its variables' slots too, so the bytes per task and the
    balance count them, and ``slot_bytes`` says how much of it they are. A variable of unknown
    size adds nothing to the bytes and one to ``unknown_size_variables``, so that a sum is never
    mistaken for the whole. The per-device sums are numpy group-bys over the variables' devices
    (78k variables at 1M nodes: a Python loop of Counter updates per variable was 0.1 s).
    """
    import numpy as np

    placement = result.placement
    per_device = Counter(placement.devices)
    ids = np.asarray(variable_ids, dtype=np.int64)
    placed = np.flatnonzero(ids >= 0)
    first: dict[str, int] = {}  # device -> the first of its variables: its code
    code = np.fromiter(map(first.setdefault, map(placement.devices.__getitem__, ids[placed].tolist()),
                           range(len(placed))), dtype=np.int64, count=len(placed))
    held = np.array(variable_bytes, dtype=object)[placed]
    known = (held != None).astype(bool)  # noqa: E711 - elementwise, on the object array
    nbytes = np.where(known, held, 0).astype(np.int64)  # each below 2**63 (placeviz.limits)
    slot = np.asarray(is_slot, dtype=bool)[placed]
    m = len(placed)
    sums = {"variables": np.bincount(code, minlength=m).tolist(), "bytes": exact_sums(code, nbytes, m),
            "slot_bytes": exact_sums(code[slot], nbytes[slot], m),
            "unknown": np.bincount(code[~known], minlength=m).tolist()}
    vars_per_device, bytes_per_device, slot_bytes_per_device, unknown_per_device = (
        Counter({device: column[c] for device, c in first.items()}) for column in sums.values())
    tasks: dict[str, dict] = {}

    def new_task(name: str, job: str) -> dict:
        return {"task": name, "job": job, "nodes": 0, "variables": 0, "variable_bytes": 0, "slot_bytes": 0,
                "unknown_size_variables": 0}

    for device, count in per_device.items():
        parsed = parse_full_name(device)
        assert parsed is not None and parsed.job is not None  # the placer gives every node a full device name
        task = address_space(parsed).to_string()  # /job:J/replica:R/task:T, as task_of(replica=True)
        t = tasks.setdefault(task, new_task(task, parsed.job))
        t["nodes"] += count
        t["variables"] += vars_per_device[device]
        t["variable_bytes"] += bytes_per_device[device]
        t["slot_bytes"] += slot_bytes_per_device[device]
        t["unknown_size_variables"] += unknown_per_device[device]
    ps_loads = [t["variable_bytes"] for t in tasks.values() if t["job"] == ps_job]
    for index in result.cluster.task_indices(ps_job) if ps_job in result.cluster.jobs else []:
        name = f"/job:{ps_job}/replica:0/task:{index}"
        if name not in tasks:
            tasks[name] = new_task(name, ps_job)
            ps_loads.append(0)
    mean = sum(ps_loads) / len(ps_loads) if ps_loads else 0
    return {
        "stage": "placed",
        "setter_ran": result.setter is not None,
        "strategy_calls": len(result.setter.strategy_calls) if result.setter else 0,
        "devices": [
            {"device": d, "nodes": per_device[d], "variables": vars_per_device[d],
             "variable_bytes": bytes_per_device[d], "slot_bytes": slot_bytes_per_device[d],
             "unknown_size_variables": unknown_per_device[d]}
            for d in sorted(per_device)
        ],
        "tasks": sorted(tasks.values(), key=lambda t: t["task"]),
        "ps_balance": {
            "job": ps_job,
            "max_variable_bytes": max(ps_loads) if ps_loads else 0,
            "mean_variable_bytes": mean,
            "max_over_mean": (max(ps_loads) / mean) if mean else None,
        },
    }
