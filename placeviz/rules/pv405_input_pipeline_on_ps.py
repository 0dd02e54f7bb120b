"""PV405 input-pipeline-on-ps: input queues, readers or iterators placed on a PS task."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.op_kinds import QUEUE_OPS
from placeviz.rules._common import PS_JOB, effective_devices, job_of

READER_OPS = frozenset({
    "TextLineReader", "TextLineReaderV2", "TFRecordReader", "TFRecordReaderV2", "FixedLengthRecordReader",
    "FixedLengthRecordReaderV2", "WholeFileReader", "WholeFileReaderV2", "IdentityReader", "IdentityReaderV2",
    "LMDBReader",
})
ITERATOR_OPS = frozenset({"Iterator", "IteratorV2", "AnonymousIterator", "AnonymousIteratorV2",
                          "AnonymousIteratorV3", "OneShotIterator", "MultiDeviceIterator"})
SYNC_QUEUE_NAMES = frozenset({"sync_token_q", "dummy_queue"})
"""Queues SyncReplicasOptimizer puts on the global step's device on purpose."""

RULE = Rule(
    id="PV405",
    name="input-pipeline-on-ps",
    severity="warning",
    summary="An input-pipeline op (queue, reader, iterator, dataset) is placed on a PS task.",
    doc="""\
## What it does
Reports input-pipeline ops placed on the `ps` job: queues (`FIFOQueue`, `RandomShuffleQueue`, ...),
readers (`TFRecordReader`, ...), iterators and `*Dataset` ops. SyncReplicasOptimizer's token queue and
`dummy_queue`, which TF puts on the global step's device on purpose, are not reported.

## Why it matters
Input pipelines decode and shuffle data for one worker; on a PS task they compete with parameter
serving for CPU and send every batch over the network to the worker ("a pipeline operation
sometimes even runs on 'ps' role"). A shared queue on a PS also makes workers take each other's
examples, which may or may not be intended.

## How it is detected
Op type in the lists above (or ending in `Dataset`/`DatasetV2`), placed job `ps`, and not a queue
with `shared_name` `sync_token_q`/`dummy_queue` nor a token queue the sync pass found.

## Example
```python
with tf.device("/job:ps/task:0"):
    queue = tf.queue.RandomShuffleQueue(10000, 1000, [tf.string])
```

## Fix
Build the input pipeline under the worker device (`tf.device(worker_device)`, or inside
`replica_device_setter`, which leaves these ops on the worker).

## References
- http://donghao.org/2018/04/11/experiment-for-distributed-tensorflow/; tensorflow/tensorflow#3562
""",
    references=("tensorflow/tensorflow#3562",),
)


def _is_input_op(op: str) -> bool:
    return op in QUEUE_OPS or op in READER_OPS or op in ITERATOR_OPS or op.endswith(("Dataset", "DatasetV2",
                                                                                   "DatasetV3"))


def check(ctx):
    g = ctx.graph
    devices = effective_devices(ctx)
    m = ctx.machinery
    token_queues = {q.queue for q in m.token_queues} if m is not None else set()
    for i in ctx.nodes_by_op(*{op for op in set(g.ops) if _is_input_op(op)}):
        op = g.ops[i]
        if job_of(devices[i]) != PS_JOB:
            continue
        if i in token_queues or (op in QUEUE_OPS and ctx.attr_str(i, "shared_name") in SYNC_QUEUE_NAMES):
            continue
        yield ctx.finding(
            RULE, i,
            f"input-pipeline op {op} {g.names[i]!r} runs on {devices[i]}: it competes with parameter serving "
            "for the PS's CPU and every batch crosses the network to the workers",
            suggestion=f"build {g.names[i]!r} under the worker device, not on /job:{PS_JOB}",
        )
