"""PV104 colocation-conflict: a colocation group binds nodes requested on incompatible devices."""

from __future__ import annotations

import re
from itertools import chain, repeat

from placeviz.devices import DeviceMergeError, DeviceSpecError, ParsedName, merge_dev_names, parse_full_name
from placeviz.lint import Rule
from placeviz.placement.placer import imported_devices

RULE = Rule(
    id="PV104",
    name="colocation-conflict",
    severity="error",
    summary="Nodes bound by colocation (_class loc:@...) request incompatible devices; TF's placer rejects the graph.",
    ignorable=False,
    doc="""\
## What it does
Replays the colocation step of TF's placer: every node joins the groups its `_class` attr names
(`loc:@<op>`, set by `tf.colocate_with`, optimizers, savers, `embedding_lookup`), and the device
requests of a group are merged as `DeviceNameUtils::MergeDevNames` does. Each merge that fails is
reported at the node whose joining fails, with the nodes whose requests conflict.

## Why it matters
TF fails at session start with `InvalidArgumentError: Cannot colocate nodes 'A' and 'B': Cannot
merge devices with incompatible jobs: '/job:worker/task:1' and '/job:ps/task:0'`, after the cluster
has been booked. With `allow_soft_placement` the node silently leaves the group instead, and the
colocation it asked for (e.g. an update next to its variable) is lost. Typical causes: gradient or
saver ops colocated with a PS variable but explicitly pinned to a worker, and explicit pins on ops
that `colocate_with` binds together.

## How it is detected
Devices are first rewritten as `tf.compat.v1.import_graph_def` does (an op with `_class` takes the
device of the first op it names). Then nodes are visited in graph order and joined to each group
they name; each group keeps the merge of its members' requests. A job, replica, task, device type or
index that differs between two requests is a conflict. When TF's own placer (placeviz's replay)
rejected the graph with a colocation error that this replay does not see, that error is reported.

## Example
```python
with tf.device("/job:ps/task:0"):
    mean = tf.reduce_mean(x, 0)
with tf.device("/job:worker/task:0"):
    std = tf.math.reduce_std(x, 0)
with tf.compat.v1.colocate_with(mean.op), tf.compat.v1.colocate_with(std.op):
    normalized = (x - mean) / std
```

## Fix
Remove one of the explicit pins, or stop colocating ops that must run on different tasks.

## References
- `tensorflow/core/common_runtime/colocation_graph.cc`; `tensorflow/core/util/device_name_utils.cc`
- tensorflow/tensorflow#3198, #16542, #25787, #33447; tensorflow/nmt#428; DeepRec-AI/DeepRec#932
""",
    references=("tensorflow/tensorflow#3198", "tensorflow/tensorflow#16542"),
)

_TF_ERROR = re.compile(r"Cannot colocate nodes (\S+) and (\S+?):")


def check(ctx):
    """TF's colocation step (``colocation_graph.cc``), replayed only when some group holds two
    different requests: otherwise no merge can fail, and a numpy pass over the ``loc:@`` edges
    shows that (benchmarks/README.md, "Lint", has the cost per rule)."""
    g = ctx.graph
    try:
        requested = imported_devices(g)
    except Exception:  # noqa: BLE001 - a malformed device is PV101's
        return
    if _one_request_per_group(g, requested):
        reported = False  # no group can hold two requests, so no merge can fail
    else:
        reported = yield from _replay(ctx, g, requested)
    if not reported and ctx.placement_error:
        m = _TF_ERROR.search(ctx.placement_error)
        if m and m.group(1) in g.index:
            yield ctx.finding(
                RULE, m.group(1), f"TF's placer rejects the graph: {ctx.placement_error}",
                related=[m.group(2)] if m.group(2) in g.index else [],
                suggestion="remove one of the conflicting explicit devices, or do not colocate the nodes",
            )


def _one_request_per_group(g, requested: list[str]) -> bool:
    """Whether every colocation group holds at most one distinct non-empty device request.

    Then the replay below cannot fail (merging a request with itself or with no request never
    does), so it can be skipped: the usual case, a variable with its reads, assigns and slots all
    on its PS task. When no node without a request joins a group, equal requests at both ends of
    every ``loc:@`` edge say it; otherwise the groups are found by min-label propagation over the
    edges with numpy (a few rounds: groups are stars around the op they name). After 64 rounds,
    or when a group holds two requests, the caller replays the merges exactly.
    """
    import numpy as np

    from placeviz.lint.api import value_codes

    # The loc:@ edges (node, the op it names), other than to itself or to a missing op.
    colocated = g.colocated_names
    counts = np.fromiter(map(len, colocated.values()), dtype=np.int64, count=len(colocated))
    src = np.repeat(np.fromiter(colocated, dtype=np.int64, count=len(colocated)), counts)
    named = list(chain.from_iterable(colocated.values()))
    dst = np.fromiter(map(g.index.get, named, repeat(-1, len(named))), dtype=np.int64, count=len(named))
    keep = (dst >= 0) & (dst != src)
    src, dst = src[keep], dst[keep]
    if not len(src):
        return True
    distinct, request = value_codes(requested)  # equal codes: equal requests; -1: no request
    if "" in distinct:
        request[request == distinct.index("")] = -1
    a, b = request[src], request[dst]
    if a.min() >= 0 and b.min() >= 0:  # no empty request joins a group: equal ends on every edge suffice
        return bool(np.array_equal(a, b))
    edges = np.stack([np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)], axis=1)
    label = np.arange(len(g), dtype=np.int64)
    for _ in range(64):
        low = np.minimum(label[edges[:, 0]], label[edges[:, 1]])
        before = label.copy()
        np.minimum.at(label, edges[:, 0], low)
        np.minimum.at(label, edges[:, 1], low)
        label = label[label]  # jump to the label's label
        if np.array_equal(label, before):
            break
    else:
        return False
    members = np.unique(edges.ravel())
    members = members[request[members] >= 0]
    groups = np.unique(np.stack([label[members], request[members]], axis=1), axis=0)
    return len(np.unique(groups[:, 0])) == len(groups)


def _replay(ctx, g, requested: list[str]):
    """The merges of TF's colocation step, node by node; yields the findings, returns whether any."""
    n = len(g)
    names: list[ParsedName] = []  # interned ParsedNames; ``merged`` holds their ids
    name_ids: dict[ParsedName, int] = {}
    request_ids: dict[str, int] = {}

    def intern(p: ParsedName) -> int:
        k = name_ids.get(p)
        if k is None:
            k = name_ids[p] = len(names)
            names.append(p)
        return k

    def request_id(device: str) -> int:
        k = request_ids.get(device)
        if k is None:
            k = request_ids[device] = intern((parse_full_name(device) if device else None) or ParsedName())
        return k

    parent = list(range(n))
    joined = bytearray(n)
    merged = [0] * n  # root -> id of the merge of its members' requests
    origin: dict[int, list[int]] = {}  # root -> nodes with a non-empty request, in join order

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(x: int) -> None:
        if not joined[x]:
            joined[x] = 1
            merged[x] = request_id(requested[x])
            origin[x] = [x] if requested[x] else []

    merges: dict[tuple[int, int], int | Exception] = {}

    def merge(a: int, b: int) -> int:
        """merge_dev_names, memoized on interned ids: a graph has few distinct requests."""
        key = (a, b)
        result = merges.get(key)
        if result is None:
            try:
                result = intern(merge_dev_names(names[a], names[b]))
            except (DeviceMergeError, DeviceSpecError) as e:
                result = e
            merges[key] = result
        if isinstance(result, Exception):
            raise result
        return result

    reported = False
    index = g.index
    for i, located in g.colocated_names.items():
        join(i)
        for name in located:
            j = index.get(name)
            if j is None or j == i:
                continue
            join(j)
            a, b = find(j), find(i)
            if a == b:
                continue
            try:
                result = merge(merged[a], merged[b])
            except (DeviceMergeError, DeviceSpecError) as e:
                culprits = [k for k in origin[a] if requested[k] != requested[i]][:3]
                reported = True
                yield ctx.finding(
                    RULE, i,
                    f"{g.names[i]!r} (requested {requested[i] or 'no device'!r}) is colocated with {name!r} "
                    f"(_class loc:@{name}), whose group requests {names[merged[a]].to_string()!r}: {e}; TF's "
                    "placer rejects the graph (with allow_soft_placement the node silently leaves the group)",
                    related=[j, *culprits],
                    suggestion=f"remove the explicit device of {g.names[i]!r} or of {name!r}, or do not colocate them",
                )
                continue
            parent[b] = a
            merged[a] = result
            origin[a].extend(origin[b])  # a's list is its own: the old ``origin[a] + origin[b]``
    return reported
