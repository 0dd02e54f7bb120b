"""placeviz's static partition of a run against the partition graphs TF's runtime reported for it.

Compared, as in ``tests/test_partition_fidelity.py``: per device, the set of original nodes that
ran there; the transfers as multisets of (tensor or ``^control`` source, destination device). The
runtime's own names for the nodes it adds are opaque, so they are not compared. The result gives
agreement counts, a percentage, and the differing items.
"""

from __future__ import annotations

import collections

from placeviz.verify.runtime_truth import RuntimeTruth

MAX_LISTED = 10


def transfer_key(t: dict) -> str:
    """A placeviz transfer's source as the runtime names the tensor: ``node:slot`` or ``^node``."""
    return f"^{t['src']}" if t["slot"] == "control" else f"{t['src']}:{t['slot']}"


def runtime_nodes(graph, run: dict) -> dict[str, set[str]]:
    """Per device, the nodes of ``graph`` the runtime ran there (the nodes it added left out)."""
    original = set(graph.names)
    out: dict[str, set[str]] = collections.defaultdict(set)
    for device, nodes in run["partitions"].items():
        for n in nodes:
            if n["name"] in original:
                out[device].add(n["name"])
    return out


def compare_run(graph, devices: list[str], run: dict, *, feeds: list[str], client_device: str | None,
                attr_keys=None) -> dict:
    """``attr_keys``: the placer's op-fact attr keys of ``graph`` (``Placement.attr_keys``), handed
    on to the partitioner."""
    from placeviz.partition import partition

    result = partition(graph, devices, fetches=run["fetches"], targets=run["targets"], feeds=feeds,
                       level="device", client_device=client_device or None, attr_keys=attr_keys)
    theirs = runtime_nodes(graph, run)
    ours = {d: set(v) for d, v in result.original_nodes.items()}
    node_total = sum(len(v) for v in theirs.values())
    only_ours = sorted((n, d) for d in ours for n in ours[d] - theirs.get(d, set()))
    only_theirs = sorted((n, d) for d in theirs for n in theirs[d] - ours.get(d, set()))
    node_agree = node_total - len(only_theirs)
    truth = RuntimeTruth(devices={}, partitions={}, added_nodes={}, fetches=[], targets=[], config={}, runs=[run])
    t_theirs = collections.Counter((t["tensor"], t["recv_device"]) for t in truth.transfers(0))
    t_ours = collections.Counter((transfer_key(t), t["dst_device"]) for t in result.transfers)
    t_total = sum(t_theirs.values())
    t_agree = sum((t_ours & t_theirs).values())
    agree, total = node_agree + t_agree, node_total + t_total
    extra = len(only_ours) + sum((t_ours - t_theirs).values())
    return {
        "nodes": {"agree": node_agree, "total": node_total},
        "transfers": {"agree": t_agree, "total": t_total},
        "percent": round(100.0 * agree / (total + extra), 2) if total + extra else 100.0,
        "only_placeviz": {"nodes": [f"{n} @ {d}" for n, d in only_ours[:MAX_LISTED]],
                          "transfers": [f"{s} -> {d}" for s, d in sorted((t_ours - t_theirs).elements())[:MAX_LISTED]]},
        "only_runtime": {"nodes": [f"{n} @ {d}" for n, d in only_theirs[:MAX_LISTED]],
                         "transfers": [f"{s} -> {d}" for s, d in sorted((t_theirs - t_ours).elements())[:MAX_LISTED]]},
        "differences": len(only_ours) + len(only_theirs) + sum((t_ours - t_theirs).values())
        + sum((t_theirs - t_ours).values()),
    }
