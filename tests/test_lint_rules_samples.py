"""The sample graphs are the false-positive test bed of the PV1xx-PV4xx rules.

Correct samples (ps_tasks=2, with and without SyncReplicas, ref and resource variables) must give no
finding at warning level or above; ``misconfigured`` must give exactly the findings its three defects
deserve.
"""

from __future__ import annotations

import pytest
from test_lint_rules_fixtures import cluster, context, run, sample, serious

CORRECT = ["mlp", "inception", "wide_deep", "lstm", "hashtable", "transformer"]

# Info findings the correct samples do deserve: tf.metrics' local total/count land on the PS tasks.
EXPECTED_INFO = {
    "mlp": {("PV203", "accuracy/total"), ("PV203", "accuracy/count")},
    "lstm": {("PV203", "mean_cost/total"), ("PV203", "mean_cost/count")},
}


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("name", CORRECT)
def test_correct_samples_have_no_warnings(name, sync):
    findings = run(context(sample(name, sync_replicas=sync)))
    assert serious(findings) == set()
    assert {(f.rule, f.node) for f in findings} == EXPECTED_INFO.get(name, set())


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("name", ["mlp", "wide_deep", "lstm", "hashtable"])
def test_correct_samples_with_resource_variables(name, sync):
    findings = run(context(sample(name, sync_replicas=sync, resource_variables=True)))
    assert {(f.rule, f.node) for f in findings} == EXPECTED_INFO.get(name, set())


@pytest.mark.parametrize("name", ["mlp", "wide_deep"])
def test_correct_samples_against_their_cluster(name):
    """With the cluster they were built for (2 ps, 2 workers, R = N = 2) nothing changes."""
    findings = run(context(sample(name, sync_replicas=True), cluster_spec=cluster(ps=2, workers=2)))
    assert {(f.rule, f.node) for f in findings} == EXPECTED_INFO.get(name, set())


MISCONFIGURED = {
    # 1. output_bias created before the replica_device_setter scope: it has no device, TF puts it
    #    on the worker (one copy per worker).
    ("PV201", "output_bias"),
    ("PV106", "output_bias"),
    # 2. normalized/sub colocated with feature_mean (/job:ps/task:0) and feature_std (/job:worker/task:0).
    ("PV104", "sub"),
    ("PV104", "normalized"),
}


def test_misconfigured():
    assert {(f.rule, f.node) for f in run(context(sample("misconfigured")))} == MISCONFIGURED


def test_misconfigured_sync():
    # With SyncReplicas, output_bias' accumulator goes to a ps task (the setter moves
    # ResourceConditionalAccumulator), away from its variable on the worker.
    expected = MISCONFIGURED | {("PV304", "sync_replicas/conditional_accumulator")}
    assert {(f.rule, f.node) for f in run(context(sample("misconfigured", sync_replicas=True)))} == expected


def test_misconfigured_with_cluster():
    # 3. The /gpu:0 pin of the hidden layer's matmul on CPU-only workers needs the cluster to judge.
    findings = run(context(sample("misconfigured"), cluster_spec=cluster(ps=2, workers=1)))
    assert {(f.rule, f.node) for f in findings} == MISCONFIGURED | {("PV103", "MatMul")}
    by_rule = {f.rule: f for f in findings}
    assert "feature_std" in by_rule["PV104"].message and "incompatible jobs" in by_rule["PV104"].message
    assert "/job:worker/replica:0/task:0" in by_rule["PV201"].message
