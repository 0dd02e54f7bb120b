"""PV208 compute-on-ps: heavy model compute (matmul, convolution) runs on a PS task."""

from __future__ import annotations

from placeviz.lint import Rule
from placeviz.rules._common import PS_JOB, effective_devices, job_of

HEAVY_OPS = frozenset({
    "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "SparseMatMul", "SparseTensorDenseMatMul",
    "Einsum", "Conv2D", "Conv3D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3DBackpropInputV2",
    "Conv3DBackpropFilterV2", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter", "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3",
    "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3", "LSTMBlockCell", "BlockLSTM",
    "BlockLSTMV2", "CudnnRNN", "CudnnRNNV2", "CudnnRNNV3", "_FusedConv2D", "_FusedMatMul",
})
"""Ops whose cost grows with the batch and the layer sizes: model compute, never parameter service."""

RULE = Rule(
    id="PV208",
    name="compute-on-ps",
    severity="warning",
    summary="A heavy compute op (MatMul, Conv2D, BatchMatMul, ...) is placed on a PS task.",
    doc="""\
## What it does
Reports heavy compute ops (matrix multiplications, convolutions, fused batch norm, fused RNN
cells) whose device after placement is on the `ps` job.

## Why it matters
`replica_device_setter` only moves `STANDARD_PS_OPS` (variables, hash tables, accumulators) to the
PS; everything else follows `worker_device`. Compute on the PS got there by an explicit
`tf.device("/job:ps...")`, a colocation with a variable, or a custom device function: it runs once
per worker step on a machine sized for serving parameters, saturates its CPU and delays every
worker's reads and updates.

## How it is detected
Op type in a fixed list of heavy ops (`MatMul`, `BatchMatMul*`, `Einsum`, `Conv*`, `DepthwiseConv*`,
`FusedBatchNorm*`, fused LSTM/cuDNN RNN ops, ...) and placed job `ps`.

## Example
```python
with tf.device("/job:ps/task:0"):
    logits = tf.matmul(hidden, w)
```

## Fix
Remove the PS pin (let the setter use `worker_device`), or colocate with the consumer instead of
the variable.

## References
- tensorflow/tensorflow#3562; http://donghao.org/2018/04/11/experiment-for-distributed-tensorflow/
""",
    references=("tensorflow/tensorflow#3562",),
)


def check(ctx):
    devices = effective_devices(ctx)
    g = ctx.graph
    for i in ctx.nodes_by_op(*HEAVY_OPS):
        if job_of(devices[i]) != PS_JOB:
            continue
        requested = g.devices[i]
        why = f"requested {requested!r}" if requested else "colocated there"
        yield ctx.finding(
            RULE, i,
            f"{g.ops[i]} {g.names[i]!r} runs on {devices[i]} ({why}): model compute on a parameter server "
            "runs once per worker step and slows every worker's parameter reads and updates",
            suggestion=f"remove the /job:{PS_JOB} pin from {g.names[i]!r} so it runs on the worker",
        )
