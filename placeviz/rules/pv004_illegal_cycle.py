"""PV004 illegal-cycle: a cycle in the graph that is not a while loop's NextIteration -> Merge."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.op_kinds import NEXT_ITERATION_OPS

RULE = Rule(
    id="PV004",
    name="illegal-cycle",
    severity="error",
    summary="The graph has a cycle that is not closed by a while loop's NextIteration -> Merge back edge.",
    integrity=True,
    ignorable=False,  # TensorFlow cannot import the graph: there is nothing to accept per node
    doc="""\
## What it does
Finds the strongly connected parts of the graph once the back edges of while loops (the edges out
of `NextIteration`/`RefNextIteration`) are removed. Each part with more than one node (or a node
reading itself) is reported once, at its first node, with one cycle through it spelled out.

## Why it matters
TensorFlow's executor runs a node when all its inputs are ready; on a cycle nothing ever is. The
graph is refused (`ComputeTopologicalOrder` / "graph contains a cycle"), or, in older runtimes,
the step hangs. `tf.Graph` cannot build such a cycle through its API; it comes from rewiring a
GraphDef by hand or from a buggy graph transformation.

## How it is detected
Tarjan's algorithm over data and control edges, ignoring edges out of `NextIteration`, as TF's
topological sort does. Other rules do not run on such a graph (it has no topological order).

## Example
```
node { name: "a" op: "Identity" input: "b" }
node { name: "b" op: "Identity" input: "a" }
```

## Fix
Remove the back edge. A loop must be a `tf.while_loop`, whose only back edge is
`NextIteration -> Merge`.

## References
- `tensorflow/core/grappler/utils/topological_sort.cc` (`ComputeTopologicalOrder`)
""",
    references=("tensorflow/core/grappler/utils/topological_sort.cc",),
)

SHOWN = 8


def check(ctx):
    if ctx.loaded:  # the pipeline ran, so the graph has a topological order: no illegal cycle
        return
    raw = ctx.raw
    succ = _successors(raw)
    for component in _cycles(succ, len(raw)):
        start = min(component)
        path = _cycle_through(start, succ, set(component))
        shown = " -> ".join(raw.names[i] for i in path[:SHOWN]) + (" -> ..." if len(path) > SHOWN else "")
        shown += f" -> {raw.names[start]}"
        yield ctx.raw_finding(
            RULE, start,
            f"cycle not closed by NextIteration -> Merge: {shown} ({len(component)} node(s) on cycles here): "
            "TensorFlow refuses a graph without a topological order; remove the back edge (a loop must be a "
            "tf.while_loop)", related=path[1:SHOWN + 1])


def _successors(raw) -> list[list[int]]:
    n = len(raw)
    succ: list[list[int]] = [[] for _ in range(n)]
    ops = raw.ops
    graph = raw.graph
    if graph is not None:
        in_start, in_src = graph.in_start, graph.in_src
        for dst in range(n):
            for k in range(in_start[dst], in_start[dst + 1]):
                src = in_src[k]
                if ops[src] not in NEXT_ITERATION_OPS:
                    succ[src].append(dst)
        return succ
    index = raw.index
    for dst in range(n):
        for text in raw.input_strings(dst):
            src = index.get(text.lstrip("^").split(":", 1)[0])
            if src is not None and ops[src] not in NEXT_ITERATION_OPS:
                succ[src].append(dst)
    return succ


def _cycles(succ: list[list[int]], n: int) -> list[list[int]]:
    """Strongly connected components that contain a cycle (iterative Tarjan), in id order."""
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    out = []
    counter = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, pos = work[-1]
            edges = succ[v]
            if pos < len(edges):
                work[-1] = (v, pos + 1)
                w = edges[pos]
                if index[w] == -1:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, 0))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1 or v in succ[v]:
                    out.append(sorted(component))
    return sorted(out)


def _cycle_through(start: int, succ: list[list[int]], members: set[int]) -> list[int]:
    """One cycle start -> ... -> start inside the component (breadth-first: a shortest one)."""
    parent: dict[int, int | None] = {start: None}
    queue = [start]
    for v in queue:
        for w in succ[v]:
            if w == start:
                path = [v]
                up = parent[v]
                while up is not None:
                    path.append(up)
                    up = parent[up]
                return path[::-1]
            if w in members and w not in parent:
                parent[w] = v
                queue.append(w)
    return [start]
