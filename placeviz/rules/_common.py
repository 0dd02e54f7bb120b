"""Helpers shared by the PV1xx-PV4xx rules (not a rule: the engine skips modules starting with ``_``).

Everything here reads the :class:`placeviz.lint.LintContext` the engine built; results that cost
a pass over the graph are kept in the context's ``rule_cache``, so rules calling the same helper
share one pass.
Nothing here imports TensorFlow.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from placeviz.devices import WORKER_JOBS, job_of, parse_full_name, task_of
from placeviz.graph import CONTROL
from placeviz.op_kinds import FORWARD_ANY_INPUT_OPS, FORWARD_INPUT0_OPS, VARIABLE_OPS, VARIABLE_READ_OPS
from placeviz.sync.reach import forward_through

FORWARD_OPS = FORWARD_INPUT0_OPS | FORWARD_ANY_INPUT_OPS | VARIABLE_READ_OPS | {"Snapshot"}
"""Ops through which a consumer still sees the variable's value (or ref/handle)."""

PS_JOB = "ps"
"""The job ``replica_device_setter`` puts variables on (its ``ps_device`` default)."""


_PART_RE = re.compile(r"^(?P<base>.+)/part_(?P<index>\d+)$")


def _cache(ctx) -> dict:
    """The context's :attr:`placeviz.lint.LintContext.rule_cache`: the helpers below key their
    entries by their own names."""
    return ctx.rule_cache


# ----------------------------------------------------------------------------- devices


def parsed(device: str):
    """The parsed device name (``ParsedName``), or None when empty or malformed."""
    if not device:
        return None
    return parse_full_name(device)


# ``job_of`` and ``task_of`` are :func:`placeviz.devices.job_of` and :func:`placeviz.devices.task_of`,
# re-exported for the rules: the one device-name splitter, cached per string.


def nodes_by_device(ctx, devices: list[str]) -> dict[str, list[int]]:
    """Device string -> the ids of the nodes on it (ascending), devices in order of their first
    node; ``devices`` is ``ctx.graph.devices`` (as requested) or :func:`effective_devices`.

    Built once per list and shared: a rule that judges devices judges each distinct string once
    (a graph has a handful) instead of parsing one per node.
    """
    from placeviz.lint.api import ids_by_value

    built = _cache(ctx).setdefault("nodes_by_device", [])
    for seen, index in built:
        if seen is devices:
            return index
    index = ids_by_value(devices)
    built.append((devices, index))
    return index


def effective_devices(ctx) -> list[str]:
    """Where each node runs, as well as the context can tell.

    The placed device when placement ran. When TF's placer rejects the graph (e.g. a colocation
    conflict, which PV104 reports), the placement TF makes with ``allow_soft_placement=True`` on
    the cluster the graph names (so that the other rules still see where variables land); when
    that fails too, the requested devices.
    """
    cache = _cache(ctx)
    if "effective_devices" in cache:
        return cache["effective_devices"]
    devices = ctx.devices
    if devices is None:
        soft = placer_result(ctx)
        devices = soft.devices if soft is not None else list(ctx.graph.devices)
    cache["effective_devices"] = devices
    return devices


def placer_result(ctx):
    """The placer's :class:`placeviz.placement.placer.Placement` of ``ctx.graph`` (node ids are
    the graph's): the pipeline's when placement ran; when TF's placer rejects the graph, the
    placement TF makes with ``allow_soft_placement=True`` on the cluster the graph names (as
    :func:`effective_devices` says); None when there is neither. Made once per context."""
    pipe = ctx.pipeline
    if pipe.placement is not None:
        return pipe.placement.placement
    cache = _cache(ctx)
    if "soft_placement" not in cache:
        cache["soft_placement"] = _place(ctx, soft=True) if _placeable(ctx) else None
    result = cache["soft_placement"]
    return result if not isinstance(result, Exception) else None


def colocation_groups(ctx):
    """The :class:`placeviz.placement.placer.Placement` whose colocation groups a rule reads
    (``group_root``, ``group_requested``, ``ref_edges``): :func:`placer_result`, and for a graph
    that is not placed (a few ops pinned to a job, the variables not: :func:`placer_result` does
    not place it) the placement TF makes with ``allow_soft_placement=True`` on the cluster the
    graph names, made once per context. None when TF's placer rejects the graph."""
    result = placer_result(ctx)
    if result is not None or _placeable(ctx):
        return result
    cache = _cache(ctx)
    if "group_placement" not in cache:
        cache["group_placement"] = _place(ctx, soft=True)
    result = cache["group_placement"]
    return result if not isinstance(result, Exception) else None


def colocation_conflicts(ctx) -> tuple:
    """The ``_class`` joins TF's placer fails on (:class:`placeviz.placement.placer.
    ColocationConflict`), as the placer recorded them: the pipeline's placement (with soft
    placement) or its error; when placement did not run, the placer is run here on ``ctx.graph``
    (the session's ``--soft-placement`` setting, the cluster the graph names). Empty when none."""
    pipe = ctx.pipeline
    if pipe.placement is not None:
        return pipe.placement.placement.conflicts
    if pipe.placement_error is not None:
        return pipe.placement_conflicts
    cache = _cache(ctx)
    if "colocation_conflicts" not in cache:
        graph = ctx.graph
        if not graph.colocated_names or len(set(graph.devices) - {""}) < 2:
            # No merge of device requests can fail without two different ones (the import rewrite
            # only copies or canonicalises them): the placer is not run for nothing.
            cache["colocation_conflicts"] = ()
        else:
            result = _place(ctx, soft=ctx.soft_placement)
            cache["colocation_conflicts"] = getattr(result, "conflicts", ())  # a Placement or a PlacementError
    return cache["colocation_conflicts"]


def _placeable(ctx) -> bool:
    from placeviz.placement import is_placed

    return is_placed(ctx.graph)


def _place(ctx, soft: bool):
    """TF's placer on ``ctx.graph`` and the cluster it names (or the one the user gave): the
    :class:`placeviz.placement.placer.Placement`, or the :class:`placeviz.errors.PlacevizError`
    that rejected the graph."""
    from placeviz.devices import DeviceSet
    from placeviz.errors import PlacevizError
    from placeviz.placement import PlacementOptions, cluster_for
    from placeviz.placement.placer import PlacerConfig, place

    graph = ctx.graph
    try:
        options = PlacementOptions(placer=PlacerConfig(allow_soft_placement=soft))
        cluster = ctx.cluster if ctx.cluster is not None else cluster_for(graph, options)
        master = "/job:worker/replica:0/task:0" if "worker" in cluster.jobs else None
        return place(graph, DeviceSet(cluster), PlacerConfig(allow_soft_placement=soft, master_task=master))
    except PlacevizError as e:
        return e


def is_distributed(ctx) -> bool:
    """True when some node names a job other than ``localhost`` (a graph for a cluster)."""
    cache = _cache(ctx)
    if "distributed" not in cache:
        jobs = {job_of(d) for d in set(ctx.graph.devices)}
        cache["distributed"] = bool(jobs - {None, "localhost"})
    return cache["distributed"]


def has_ps_job(ctx) -> bool:
    """True when the graph (or the cluster the user gave) has a ``ps`` job."""
    if ctx.cluster is not None and PS_JOB in ctx.cluster.jobs:
        return True
    return any(job_of(d) == PS_JOB for d in set(effective_devices(ctx)))


def ps_tasks(ctx) -> list[str]:
    """``/job:ps/task:T`` of every PS task: the cluster's when given, else the N tasks of
    ``--ps-tasks N`` (an idle task counts: the user said it exists), else those the graph uses."""
    if ctx.cluster is not None and PS_JOB in ctx.cluster.jobs:
        return [f"/job:{PS_JOB}/task:{t}" for t in ctx.cluster.task_indices(PS_JOB)]
    # task_of is never None here (a ps device has a job); the test only tells mypy so.
    tasks = {t for d in set(effective_devices(ctx)) if job_of(d) == PS_JOB and (t := task_of(d)) is not None}
    stated = ctx.stated_ps_tasks
    if stated:
        tasks |= {f"/job:{PS_JOB}/task:{t}" for t in range(stated)}
    return sorted(tasks, key=_task_sort_key)


def setter_strategy(ctx) -> str | None:
    """The ps_strategy of the setter placeviz replayed on this graph (``--strategy``), or None when
    the graph kept its own devices."""
    pipe = ctx.pipeline
    if pipe is None or pipe.placement is None or pipe.placement.setter is None:
        return None
    return getattr(getattr(ctx.placement_options, "setter", None), "strategy", None)


GREEDY_RESOURCE_TRAP = (
    "GreedyLoadBalancingStrategy with byte_size_load_fn weighs a resource variable by its VarHandleOp's "
    "DT_RESOURCE handle, 0 bytes in TF 2.x, so it cannot balance resource variables: use round-robin, or a "
    "load function that sizes each variable by its shape x dtype")


def greedy_resource_note(ctx, ids: Iterable[int]) -> str | None:
    """Advice about the greedy strategy's blind spot when resource variables are among ``ids``: firm when
    placeviz replayed ``--strategy greedy`` here, conditional when the graph came placed."""
    g = ctx.graph
    if not any(g.ops[i] == "VarHandleOp" for i in ids):
        return None
    if setter_strategy(ctx) == "greedy":
        return "this is --strategy greedy's doing: " + GREEDY_RESOURCE_TRAP
    return "if the program placed them with " + GREEDY_RESOURCE_TRAP


def chief_task(ctx) -> str:
    """The task that acts as the chief: task 0 of a ``chief`` (or ``master``) job when the cluster the
    user gave, or the graph, has one; else ``/job:worker/task:0`` (TF1's ``is_chief = task_index == 0``)."""
    jobs = set(ctx.cluster.jobs) if ctx.cluster is not None else {job_of(d) for d in set(effective_devices(ctx))}
    for job in ("chief", "master"):
        if job in jobs:
            return f"/job:{job}/task:0"
    return "/job:worker/task:0"


def trainable_names(ctx) -> set[str]:
    """Op names of the MetaGraphDef's ``trainable_variables`` (empty for a bare GraphDef)."""
    return {n.split(":", 1)[0] for n in ctx.collections.trainable_variables}


def _task_sort_key(task: str):
    job, _, index = task.rpartition("/task:")
    return job, int(index) if index.isdigit() else 0


def worker_task(ctx) -> str | None:
    """The task the graph's model replica runs on (its ``worker_device``): the worker-job task
    holding the most nodes."""
    cache = _cache(ctx)
    if "worker_task" not in cache:
        counts: dict[str, int] = {}
        for d, ids in nodes_by_device(ctx, effective_devices(ctx)).items():
            if job_of(d) in WORKER_JOBS:
                t = task_of(d)
                assert t is not None  # a worker-job device has a job, so a task
                counts[t] = counts.get(t, 0) + len(ids)
        cache["worker_task"] = max(counts, key=lambda t: (counts[t], t)) if counts else None
    return cache["worker_task"]


def replica_count(cluster) -> int:
    """Tasks that run model replicas: those of the cluster's worker, chief and master jobs."""
    return sum(cluster.num_tasks(j) for j in cluster.jobs if j in WORKER_JOBS)


# ----------------------------------------------------------------------------- variables


def variable_ids(ctx) -> list[int]:
    return ctx.nodes_by_op(*VARIABLE_OPS)


def local_variable_names(ctx) -> set[str]:
    """LOCAL_VARIABLES (MetaGraphDef) plus the SyncReplicas local steps the sync pass found."""
    names = {n.split(":", 1)[0] for n in ctx.collections.local_variables}
    m = ctx.machinery
    if m is not None:
        names |= {ctx.graph.names[i] for q in m.token_queues for i in q.local_steps}
    return names


def global_step_ids(ctx) -> list[int]:
    """Variables that are the global step: named ``global_step`` (TF's ``get_or_create_global_step``)
    or found as the value the SyncReplicas tokens carry."""
    cache = _cache(ctx)
    if "global_step_ids" not in cache:
        g = ctx.graph
        out = [i for i in variable_ids(ctx) if g.names[i].rsplit("/", 1)[-1] == "global_step"]
        m = ctx.machinery
        if m is not None and m.global_step is not None and m.global_step not in out:
            out.append(m.global_step)
        cache["global_step_ids"] = sorted(out)
    return list(cache["global_step_ids"])


def partition_of(ctx) -> dict[int, tuple[str, int]]:
    """Variable id -> (full variable name, shard index) for shards of partitioned variables.

    From the MetaGraphDef's ``save_slice_info`` when present, else TF's ``<name>/part_<i>`` naming.
    """
    cache = _cache(ctx)
    if "partition_of" in cache:
        return cache["partition_of"]
    g = ctx.graph
    known = ctx.collections.partitioned
    out: dict[int, tuple[str, int]] = {}
    for i in variable_ids(ctx):
        name = g.names[i]
        m = _PART_RE.match(name)
        full = known.get(name)
        if full is not None:
            out[i] = (full, int(m["index"]) if m else 0)
        elif m is not None and not known:
            out[i] = (m["base"], int(m["index"]))
    cache["partition_of"] = out
    return out


def value_consumers(ctx, i: int) -> list[tuple[int, int]]:
    """(consumer, via) pairs of the ops that use variable ``i``'s value or ref/handle, looking
    through Identity/ReadVariableOp/Enter/Switch/Merge; ``via`` is the node the consumer reads."""
    return [(c, via) for c, via, _forwards in forward_through(ctx.graph, i, FORWARD_OPS)]


def _state_index(ctx, build):
    """The graph's :class:`placeviz.sync.detect.StateIndex`: the one sync detection handed on
    (``ctx.machinery.state``) when it ran on this graph, else built once per context by ``build``."""
    machinery = ctx.machinery if ctx.loaded else None
    state = machinery.state if machinery is not None else None
    if state is not None and state.graph is ctx.graph:
        return state
    cache = _cache(ctx)
    if "state_index" not in cache:
        cache["state_index"] = build(ctx.graph)
    return cache["state_index"]


def state_writers(ctx, i: int) -> list[int]:
    """Ops that write variable (or table) ``i``: those taking its ref or resource handle (directly or
    through Identity/Enter/Switch/Merge) on a ref or resource input, other than the known readers.

    The same answer as :func:`placeviz.sync.detect.state_index`, found from the variable alone (a
    linter asks for a few variables, the index costs a pass over every op); a function call among
    the users falls back to the index, which looks into function bodies.
    """
    from placeviz.ops import DT_RESOURCE, REF_OFFSET, load_op_table
    from placeviz.sync.detect import (
        CALL_OPS,
        READ_ONLY_OPS,
        state_index,
    )

    g = ctx.graph
    table = ctx.op_table or load_op_table()
    cache = _cache(ctx).setdefault("state_writers", {})
    if i in cache:
        return cache[i]
    out: list[int] = []
    seen = {i}
    stack = [i]
    while stack:
        u = stack.pop()
        for c, slot in g.consumers_of(u):
            if slot == CONTROL:
                continue
            op = g.ops[c]
            if op in CALL_OPS or op.startswith("__inference"):
                cache[i] = list(_state_index(ctx, state_index).writers.get(i, ()))
                return cache[i]
            if op in READ_ONLY_OPS:
                continue
            if op in FORWARD_INPUT0_OPS or op in FORWARD_ANY_INPUT_OPS:
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
                continue
            try:
                types = table.input_types(g.node_def(c))
            except Exception:  # noqa: BLE001 - an op the table cannot read: not a known write
                continue
            data = [src for src, s2 in g.inputs_of(c) if s2 != CONTROL]
            for pos, src in enumerate(data):
                if src == u and types is not None and pos < len(types) and (
                        types[pos] == DT_RESOURCE or types[pos] > REF_OFFSET):
                    if c not in out:
                        out.append(c)
                    break
    out.sort()
    cache[i] = out
    return out


def is_restore_or_init(ctx, writer: int, var: int) -> bool:
    """True for a write that only initializes or restores ``var``: ``<var>/Assign`` (the
    initializer TF names after the variable) or a write whose value comes from a Restore op
    (directly or through ``Identity``, as Saver builds it for resource variables)."""
    g = ctx.graph
    if g.names[writer] == g.names[var] + "/Assign":
        return True
    stack = [src for src, slot in g.inputs_of(writer) if slot != CONTROL]
    seen = set(stack)
    while stack:
        src = stack.pop()
        op = g.ops[src]
        if op in ("RestoreV2", "Restore", "RestoreSlice"):
            return True
        if op in ("Identity", "Snapshot"):
            for s, slot in g.inputs_of(src):
                if slot != CONTROL and s not in seen:
                    seen.add(s)
                    stack.append(s)
    return False


# ----------------------------------------------------------------------------- sync proof


def proof_violations(ctx, kinds: dict[str, str], anchors: Iterable[str], *, require_anchor: bool = False):
    """``(violation, description, node)`` for each violation of the sync proof (``ctx.proof``)
    whose kind is in ``kinds`` (kind -> description), once per (kind, node).

    ``node`` is the first of the violation's ``anchors`` fields that names a node of the graph
    (a field may hold one name or a list of names); None when none does, and then the violation
    is skipped if ``require_anchor``.
    """
    proof = ctx.proof
    if proof is None:
        return
    graph = ctx.graph
    seen = set()
    for v in proof.violations:
        what = kinds.get(v["kind"])
        if what is None:
            continue
        node = next((n for n in _names(v, anchors) if n and n in graph), None)
        if (node is None and require_anchor) or (v["kind"], node) in seen:
            continue
        seen.add((v["kind"], node))
        yield v, what, node


def _names(v: dict, fields: Iterable[str]):
    for field in fields:
        value = v.get(field)
        if isinstance(value, (list, tuple)):
            yield from value
        else:
            yield value


# ----------------------------------------------------------------------------- misc


def shared_name_clashes(ctx, ids: Iterable[int]) -> Iterator[tuple[str, str, int, list[int]]]:
    """Stateful ops that TF's resource manager makes one at run time: for each op in ``ids`` with a
    ``shared_name`` used by an earlier op of ``ids`` on the same (effective) device, yield
    ``(shared_name, device, op, the other ops of its group)``. Ops without a shared_name never clash.
    """
    devices = effective_devices(ctx)
    groups: dict[tuple[str, str], list[int]] = {}
    for i in ids:
        shared = ctx.attr_str(i, "shared_name")
        if shared:
            groups.setdefault((shared, devices[i]), []).append(i)
    for (shared, device), members in groups.items():
        for i in members[1:]:
            yield shared, device, i, [j for j in members if j != i]


def shown(names: Iterable[str], limit: int = 5) -> str:
    names = list(names)
    text = ", ".join(names[:limit])
    return text + (f" and {len(names) - limit} more" if len(names) > limit else "")


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "unknown size"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"

