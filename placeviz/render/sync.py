"""Sync view: the SyncReplicas machinery as the proof sees it, one lane per device.

Boxes are the ops :mod:`placeviz.sync.detect` found (token queue, dequeue, local-step assign,
worker train op; accumulators with their apply and take ops; the wrapped optimizer's updates,
the global-step increment, the token enqueue, the sync op) plus every op on the proof's evidence
paths, so the picture shows exactly the chains the verdict rests on: worker side (gradients ->
accumulator applies -> token dequeue -> local-step assign; the gradient tensors fed to
the applies are shown too) and chief side (take gradients ->
updates -> global-step increment -> token enqueue). Edges are the graph's own direct edges between
those ops and the consecutive steps of each evidence path. Variables are filled green when the
proof holds for them and red when it is violated; a violation's path is drawn in red.

Big models (thousands of accumulators) collapse by name scope like the other views; ops on
violation paths keep their own boxes.
"""

from __future__ import annotations

import time

from placeviz.render.collapse import collapse, role_counts
from placeviz.render.context import ViewContext, shorten
from placeviz.render.devices import device_clusters, name_clusters
from placeviz.render.diagram import Box, Diagram, Edge, LegendItem
from placeviz.render.roles import ROLE_COLOR, ROLE_SHORT

HOLDS = "#a6d96a"
VIOLATED = "#f46d43"
VIOLATION_EDGE = "#d62728"
WORKER_BORDER = "#1f78b4"
CHIEF_BORDER = "#6a3d9a"
PINNED_VIOLATION_OPS = 40


def machinery_nodes(m) -> tuple[set[int], set[int]]:
    """(worker side, chief side) op ids of the detected machinery."""
    worker: set[int] = set()
    chief: set[int] = set()
    for q in m.token_queues:
        worker.update(q.dequeues, q.local_step_assigns, q.local_steps, q.worker_train_ops)
        chief.update(q.global_step_increments, q.init_tokens_ops)
        for i in (q.sync_enqueue, q.sync_op):
            if i is not None:
                chief.add(i)
        for w, v in q.variable_averages:
            chief.update((w, v))
        shared = {q.queue} | ({q.global_step} if q.global_step is not None else set())
        worker |= shared
        chief |= shared
    graph = m.graph
    for a in m.accumulators:
        worker.update(a.applies)
        for apply in a.applies:  # the gradients a worker computes: inputs 2.. (after handle, local step)
            data = [src for src, slot in graph.inputs_of(apply) if slot >= 0]
            worker.update(data[2:])
        chief.update(a.takes, a.updates)
        both = {a.node} | ({a.variable} if a.variable is not None else set())
        worker |= both
        chief |= both
    if m.global_step is not None:
        chief.add(m.global_step)
    return worker, chief


def build_sync(ctx: ViewContext, budget: int) -> Diagram:
    g = ctx.graph
    m, proof = ctx.pipe.machinery, ctx.pipe.proof
    d = Diagram("sync", f"{ctx.pipe.model.source}: SyncReplicas machinery and the single-update proof",
                rankdir="LR")
    if m is None or proof is None:
        d.boxes.append(Box(("note",), "No SyncReplicasOptimizer machinery in this graph.\n"
                           "Pass --sync-replicas --replicas-to-aggregate R to see what it would build.",
                           shape="note", fill="#ffffe0"))
        return d
    index = g.index
    worker, chief = machinery_nodes(m)
    chains: list[tuple[list[int], bool]] = []  # (path as ids, is a violation)
    for v in proof.variables:
        for ev in v.get("evidence", []):
            ids = [index[n] for n in ev.get("path", []) if n in index]
            (worker if ev.get("side") == "worker" else chief).update(ids)
            chains.append((ids, False))
    bad: set[int] = set()
    for v in proof.violations:
        ids = [index[n] for n in v.get("path", []) if n in index]
        extra = [index[n] for n in [v.get("op"), v.get("variable"), *(v.get("ops") or [])] if n in index]
        bad.update(ids + extra)
        chains.append((ids, True))
    nodes = sorted(worker | chief | bad)
    verdict = {index[v["name"]]: v["verdict"] for v in proof.variables if v["name"] in index}

    started = time.perf_counter()
    c = collapse(g.names, nodes, ctx.devices, budget, pinned=sorted(bad)[:PINNED_VIOLATION_OPS])
    d.stats["collapse_seconds"] = time.perf_counter() - started
    clusters = device_clusters(ctx, d)
    keys = [("box", grp.owner, b) for b, grp in enumerate(c.groups)]
    box_names = name_clusters(ctx, d, c.groups, clusters)
    for b, grp in enumerate(c.groups):
        d.boxes.append(_box(ctx, grp, keys[b], clusters[grp.owner], worker, chief, bad, verdict, box_names[b]))
    d.node_box, d.group_keys = c.box_of, keys

    box_of = c.box_of
    pairs: dict[tuple[int, int], bool] = {}
    node_set = set(nodes)
    for i in nodes:  # the graph's direct edges between machinery ops
        for s, _slot in g.inputs_of(i):
            if s in node_set and box_of[s] != box_of[i]:
                pairs.setdefault((box_of[s], box_of[i]), False)
    for ids, violation in chains:  # evidence paths run from the run target down to the op
        for k in range(len(ids) - 1):
            a, b = box_of[ids[k + 1]], box_of[ids[k]]
            if a != b:
                pairs[(a, b)] = pairs.get((a, b), False) or violation
    for (a, b), violation in sorted(pairs.items()):
        d.edges.append(Edge(keys[a], keys[b], color=VIOLATION_EDGE if violation else "#555555",
                            penwidth=2.5 if violation else 1.0))

    holds = sum(1 for v in proof.variables if v["verdict"] == "holds")
    verdict_line = ("single update per step: HOLDS" if proof.single_update else
                    f"single update per step: VIOLATED ({len(proof.violations)} violation"
                    f"{'s' if len(proof.violations) != 1 else ''})")
    d.notes.append(f"{verdict_line}; R={proof.replicas_to_aggregate}, tokens per step {proof.tokens_per_step}; "
                   f"{holds} of {len(proof.variables)} variables hold")
    for v in proof.violations[:5]:
        d.notes.append(f"violation {v['kind']}: {shorten(v['message'], 160)}")
    if c.refused:
        d.notes.append(f"{len(nodes):,} machinery ops collapsed to {len(c.groups):,} boxes (--max-nodes {budget})")
    d.legend = [LegendItem("variable: proof holds", fill=HOLDS), LegendItem("variable: proof violated", fill=VIOLATED),
                LegendItem("queues / accumulators", fill=ROLE_COLOR["queue"]),
                LegendItem("updates / applies", fill=ROLE_COLOR["update"]),
                LegendItem("worker side (blue border)", fill=WORKER_BORDER, line="bold"),
                LegendItem("chief side (purple, double border)", fill=CHIEF_BORDER, line="bold"),
                LegendItem("violation path", fill=VIOLATION_EDGE, line="bold")]
    d.stats.update(boxes=len(c.groups), edges=len(d.edges), ops=len(nodes))
    return d


def _box(ctx: ViewContext, grp, key, cluster, worker, chief, bad, verdict, name: str) -> Box:
    g = ctx.graph
    names, ops = g.names, g.ops
    members = grp.members
    counts = role_counts(grp, ops, ctx.roles)
    verdicts = [verdict[i] for i in members if i in verdict]
    if grp.is_op:
        i = members[0]
        label = f"{name}\n{ops[i]}"
        tip = f"{names[i]} ({ops[i]}) on {ctx.devices[i]}"
    else:
        kinds = " · ".join(f"{n:,} {ROLE_SHORT[r]}" for r, n in counts.most_common(3))
        label = f"{name}\n{len(members):,} ops: {kinds}"
        tip = f"{grp.label(names)} on {grp.owner}"
    fill = ROLE_COLOR[counts.most_common(1)[0][0]]
    if verdicts:
        n_bad = verdicts.count("violated")
        fill = VIOLATED if n_bad else HOLDS
        label += f"\n{'VIOLATED' if n_bad else 'holds'}" if len(verdicts) == 1 else \
            f"\n{len(verdicts) - n_bad} hold, {n_bad} violated"
    in_w = any(i in worker for i in members)
    in_c = any(i in chief for i in members)
    box = Box(key, label, cluster=cluster, fill=fill, tooltip=tip,
              shape="cylinder" if counts.get("variable") == len(members) else "box")
    if in_c and not in_w:
        box.border, box.peripheries = CHIEF_BORDER, 2
    elif in_w and not in_c:
        box.border, box.penwidth = WORKER_BORDER, 2.0
    if any(i in bad for i in members):
        box.border, box.penwidth = VIOLATION_EDGE, 3.0
    return box
