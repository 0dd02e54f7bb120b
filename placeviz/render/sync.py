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

from placeviz.render.collapse import collapse
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


def accumulator_chain(m, a) -> list[int]:
    """The ops of one accumulator's chain: accumulator, applies, the gradients they take, takes,
    the updates of its variable, and the variable (``SyncReplicasOptimizer.apply_gradients`` builds
    one such chain per variable, ``tensorflow/python/training/sync_replicas_optimizer.py``)."""
    graph = m.graph
    out = [a.node, *a.applies, *a.takes, *a.updates]
    for apply in a.applies:
        out.extend([src for src, slot in graph.inputs_of(apply) if slot >= 0][2:])
    if a.variable is not None:
        out.append(a.variable)
    return list(dict.fromkeys(out))


def fold_chains(ctx: ViewContext, m, keep: set[int]) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Identical accumulator chains on one device, drawn once.

    Two chains are identical when they sit on the same device and hold the same op types; each
    group keeps its first chain (by accumulator name). Chains with an op in ``keep`` (a violation)
    are never folded. Returns (hidden op -> the op of the kept chain that stands for it, kept
    accumulator -> the accumulators its chain stands for, itself first).
    """
    g = ctx.graph
    ops, names, devices = g.ops, g.names, ctx.devices
    chains = {a.node: accumulator_chain(m, a) for a in m.accumulators}
    groups: dict[tuple, list[int]] = {}
    for acc in sorted(chains, key=lambda i: names[i]):
        chain = chains[acc]
        if keep.intersection(chain):
            continue
        signature = (devices[acc], tuple(sorted(ops[i] for i in chain)))
        groups.setdefault(signature, []).append(acc)
    kept_ops = {i for acc in (grp[0] for grp in groups.values()) for i in chains[acc]}
    shared: set[int] = set()
    seen: set[int] = set()
    for chain in chains.values():  # an op in two chains (a shared update) is never hidden
        shared.update(i for i in chain if i in seen)
        seen.update(chain)
    hidden: dict[int, int] = {}
    stands_for: dict[int, list[int]] = {}
    for grp in groups.values():
        if len(grp) < 2:
            continue
        stands_for[grp[0]] = grp
        rep = sorted(chains[grp[0]], key=lambda i: (ops[i], names[i]))
        for acc in grp[1:]:
            mine = sorted(chains[acc], key=lambda i: (ops[i], names[i]))
            for i, j in zip(mine, rep, strict=True):
                if i not in kept_ops and i not in shared and i not in keep:
                    hidden[i] = j
    return hidden, stands_for


def _named(proof):
    """Every node name the proof gives: each variable's, its evidence paths', each violation's
    path, op, variable and ops (looked up at once, ``Graph.ids_of``)."""
    for v in proof.variables:
        yield v["name"]
        for ev in v.get("evidence", []):
            yield from ev.get("path", [])
    for v in proof.violations:
        yield from v.get("path", [])
        yield from (n for n in [v.get("op"), v.get("variable"), *(v.get("ops") or [])] if n is not None)


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
    worker, chief = machinery_nodes(m)
    index = g.ids_of(dict.fromkeys(_named(proof)))  # the ids of the names the proof gives, at once
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
    hidden, stands_for = fold_chains(ctx, m, bad)
    nodes = sorted((worker | chief | bad) - hidden.keys())
    verdict = {index[v["name"]]: v["verdict"] for v in proof.variables if v["name"] in index}

    started = time.perf_counter()
    c = collapse(g.names, nodes, ctx.devices, budget, pinned=sorted(bad)[:PINNED_VIOLATION_OPS],
                 memo=ctx.collapse_memo("sync"))
    d.stats["collapse_seconds"] = time.perf_counter() - started
    for i, j in hidden.items():  # a hidden op is shown by the box of the op that stands for it
        c.box_of[i] = c.box_of[j]
    times = [0] * len(c.groups)  # how many chains each box stands for
    chain_of = {a.node: a for a in m.accumulators}
    for acc, folded in stands_for.items():
        for b in {c.box_of[i] for i in accumulator_chain(m, chain_of[acc]) if c.box_of[i] >= 0}:
            times[b] += len(folded)
    hidden_in: dict[int, list[int]] = {}
    for i in hidden:
        hidden_in.setdefault(c.box_of[i], []).append(i)
    clusters = device_clusters(ctx, d)
    keys = [("box", grp.owner, b) for b, grp in enumerate(c.groups)]
    box_names = name_clusters(ctx, d, c.groups, clusters)
    for b, grp in enumerate(c.groups):
        d.boxes.append(_box(ctx, grp, keys[b], clusters[grp.owner], worker, chief, bad, verdict, box_names[b],
                            hidden_in.get(b, []), times[b]))
    d.node_box, d.group_keys, d.groups = c.box_of, keys, c.groups

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
    pairs = {k: v for k, v in pairs.items() if k[0] != k[1]}  # folded chains meet their stand-ins
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
    if stands_for:
        n_chains = sum(len(grp) for grp in stands_for.values())
        d.notes.append(f"{n_chains:,} identical accumulator chains drawn as {len(stands_for):,} (marked × N: "
                       "one chain per variable, same ops on the same device)")
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


def _box(ctx: ViewContext, grp, key, cluster, worker, chief, bad, verdict, name: str, hidden: list[int],
         times: int) -> Box:
    """``hidden``: the ops of folded chains this box stands for; ``times``: how many chains it shows."""
    g = ctx.graph
    names, ops = g.names, g.ops
    members = grp.members
    counts = ctx.role_counts(grp)
    verdicts = [verdict[i] for i in [*members, *hidden] if i in verdict]
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
    if times > 1:
        label += f"\n× {times} (one per variable)"
        folded = sorted(names[i] for i in hidden if ctx.roles[ops[i]] == "variable")
        if folded:
            tip += "; also stands for " + ", ".join(folded[:20]) + (" …" if len(folded) > 20 else "")
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
