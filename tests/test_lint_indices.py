"""The lint rules' shared node indices equal the per-node loops they replace, order included.

``ids_by_value`` (nodes per op type, per device string) is built with C loops and numpy; rules
report findings in the order these indices give, so both the keys' order (first appearance) and
each id list's order (ascending) must be the loop's. No TensorFlow.
"""

from __future__ import annotations

import random

import pytest

from placeviz.lint.api import ids_by_value, value_codes


def _by_loop(values: list) -> dict:
    out: dict = {}
    for i, v in enumerate(values):
        out.setdefault(v, []).append(i)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_ids_by_value_equals_the_loop(seed):
    rng = random.Random(seed)
    pool = ["", "/job:ps/task:0", "/job:ps/task:1", "/job:worker/task:0/device:CPU:0", "Const", "é", "a" * 300]
    values = [rng.choice(pool[: rng.randrange(1, len(pool) + 1)]) for _ in range(rng.randrange(0, 3000))]
    got = ids_by_value(values)
    assert list(got.items()) == list(_by_loop(values).items())
    assert all(type(i) is int for ids in got.values() for i in ids)
    distinct, codes = value_codes(values)
    assert distinct == list(_by_loop(values)) and [distinct[c] for c in codes.tolist()] == values


def test_empty_and_single():
    assert ids_by_value([]) == {} and value_codes([])[0] == []
    assert ids_by_value(["x"]) == {"x": [0]}


@pytest.mark.parametrize("seed", range(4))
def test_nodes_by_op_of_several_ops_is_the_loop_and_a_new_list_each_call(seed):
    """The ids of several ops are merged once and kept on the context; each call still gets the
    loop's ids in graph order, as a list of its own (a rule may change what it got)."""
    from types import SimpleNamespace

    from placeviz.lint.api import LintContext

    rng = random.Random(seed)
    ops = [rng.choice(["VariableV2", "VarHandleOp", "Identity", "Const", "Assign"]) for _ in range(rng.randrange(0, 2000))]
    ctx = LintContext(model_path="m", pipeline=SimpleNamespace(graph=SimpleNamespace(ops=ops)))
    for wanted in (("VariableV2", "VarHandleOp"), ("Assign", "Const", "Missing"), ("Missing", "Other")):
        expected = [i for i, op in enumerate(ops) if op in wanted]
        first = ctx.nodes_by_op(*wanted)
        assert first == expected
        first.append(-1)
        assert ctx.nodes_by_op(*wanted) == expected
