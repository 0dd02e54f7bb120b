"""PV105 localhost-mixed-with-cluster: /job:localhost next to cluster jobs in one graph."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import job_of, nodes_by_device

RULE = Rule(
    id="PV105",
    name="localhost-mixed-with-cluster",
    severity="error",
    summary="Some nodes are pinned to /job:localhost while others name cluster jobs (ps, worker).",
    doc="""\
## What it does
Reports graphs whose device strings name `/job:localhost` together with other jobs, at the first
node pinned to `localhost`.

## Why it matters
`localhost` is the job of a local (DirectSession) run; a cluster (`tf.train.Server`) has named jobs.
No session has both: run locally, the `ps`/`worker` pins fail (`Operation was explicitly assigned
to /job:ps/task:0 but available devices are [ /job:localhost/replica:0/task:0/device:CPU:0 ]`); run
on the cluster, the `localhost` pins fail. It usually means part of the graph was exported from a
local session and merged into a distributed program.

## How it is detected
The set of jobs of all requested devices contains `localhost` and another job.

## Example
A `tf.compat.v1.import_graph_def` of a preprocessing graph saved from a local session (its devices
say `/job:localhost/...`) into a program built under `replica_device_setter`.

## Fix
Clear the devices of imported graphs (`clear_devices=True`) or rewrite `localhost` to the worker job.

## References
- tensorflow/tensorflow#23697
""",
    references=("tensorflow/tensorflow#23697",),
)


def check(ctx):
    g = ctx.graph
    jobs: dict[str, int] = {}  # job -> its first node
    local = []
    for d, ids in nodes_by_device(ctx, g.devices).items():
        job = job_of(d) if d else None
        if job is None:
            continue
        jobs[job] = min(jobs.get(job, ids[0]), ids[0])
        if job == "localhost":
            local.extend(ids)
    local.sort()
    others = sorted(j for j in jobs if j != "localhost")
    if not local or not others:
        return
    yield ctx.finding(
        RULE, local[0],
        f"{len(local)} node(s) are pinned to /job:localhost (first {g.names[local[0]]!r}) while others name "
        f"cluster job(s) {', '.join(others)} (e.g. {g.names[jobs[others[0]]]!r}): no session has both, so "
        "placement fails wherever the graph runs",
        related=[jobs[others[0]]],
        suggestion="clear the devices of the imported part (import_graph_def / import_meta_graph with "
                   "clear_devices=True) or rewrite /job:localhost to the worker job",
    )
