"""The graph IR on hand-built GraphDefs (no TensorFlow needed)."""

from __future__ import annotations

import pytest

from placeviz.errors import GraphError
from placeviz.graph import CONTROL, Graph, Input, parse_input
from placeviz.protos import GraphDef


def make_graph(*nodes: tuple) -> GraphDef:
    """nodes: (name, op, [inputs], device='', _class=[])"""
    g = GraphDef()
    for spec in nodes:
        name, op, inputs = spec[:3]
        n = g.node.add(name=name, op=op, input=inputs)
        if len(spec) > 3:
            n.device = spec[3]
        if len(spec) > 4:
            n.attr["_class"].list.s.extend(s.encode() for s in spec[4])
    return g


def test_parse_input_forms():
    assert parse_input("a") == Input("a", 0)
    assert parse_input("scope/a:3") == Input("scope/a", 3)
    assert parse_input("^b") == Input("b", CONTROL)
    assert str(Input("a", 2)) == "a:2" and str(Input("b", CONTROL)) == "^b" and str(Input("c", 0)) == "c"
    with pytest.raises(GraphError):
        parse_input("a:x")


def test_inputs_consumers_and_colocation():
    g = Graph(make_graph(
        ("v", "VariableV2", []),
        ("init", "Const", []),
        ("assign", "Assign", ["v", "init"], "", ["loc:@v"]),
        ("read", "Identity", ["v"], "/job:ps/task:0", ["loc:@v"]),
        ("split", "Split", ["init", "read"]),
        ("use", "AddN", ["split:1", "split", "^assign"]),
    ))
    assert len(g) == 6 and g.names[2] == "assign"
    use = g.node("use")
    assert use.inputs == [Input("split", 1), Input("split", 0), Input("assign", CONTROL)]
    assert [str(x) for x in use.control_inputs] == ["^assign"]
    assert sorted(g.node("v").consumers) == [("assign", 0), ("read", 0)]
    assert g.node("assign").consumers == [("use", CONTROL)]
    assert g.node("split").consumers == [("use", 1), ("use", 0)]
    assert g.colocation_groups(g.index["read"]) == ("loc:@v",)
    assert g.colocation_groups(g.index["init"]) == ("loc:@init",)
    assert g.devices[g.index["read"]] == "/job:ps/task:0"
    order = g.topological_order
    pos = {g.names[i]: k for k, i in enumerate(order)}
    for dst in range(len(g)):
        for src, _ in g.inputs_of(dst):
            assert pos[g.names[src]] < pos[g.names[dst]]
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == 6 and nxg.number_of_edges() == g.num_edges


def test_while_loop_back_edge_is_not_a_cycle():
    # i = Enter(0); Merge(i, NextIteration(add)) -> Switch -> Identity -> add -> NextIteration
    g = Graph(make_graph(
        ("zero", "Const", []),
        ("enter", "Enter", ["zero"]),
        ("merge", "Merge", ["enter", "next"]),
        ("limit", "Const", []),
        ("less", "Less", ["merge", "limit"]),
        ("cond", "LoopCond", ["less"]),
        ("switch", "Switch", ["merge", "cond"]),
        ("ident", "Identity", ["switch:1"]),
        ("one", "Const", ["^ident"]),
        ("add", "AddV2", ["ident", "one"]),
        ("next", "NextIteration", ["add"]),
        ("exit", "Exit", ["switch"]),
    ))
    order = [g.names[i] for i in g.topological_order]
    assert len(order) == len(g)
    assert order.index("merge") < order.index("add") < order.index("next")


def test_real_cycle_is_an_error_naming_nodes():
    g = Graph(make_graph(("a", "Identity", ["c"]), ("b", "Identity", ["a"]), ("c", "Identity", ["b"]),
                         ("d", "Const", [])))
    with pytest.raises(GraphError, match="cycle.*a, b, c"):
        _ = g.topological_order


def test_duplicate_names_and_dangling_inputs_are_errors():
    with pytest.raises(GraphError, match="two nodes are named 'a'"):
        Graph(make_graph(("a", "Const", []), ("a", "Const", [])))
    with pytest.raises(GraphError, match="input 'missing:1'.*'missing'"):
        Graph(make_graph(("a", "Identity", ["missing:1"])))
    with pytest.raises(GraphError, match="no op type"):
        Graph(make_graph(("a", "", [])))


def test_topological_order_breaks_ties_by_node_id():
    g = Graph(make_graph(("c", "Const", []), ("b", "Const", []), ("a", "AddV2", ["c", "b"]), ("z", "Const", [])))
    assert [g.names[i] for i in g.topological_order] == ["c", "b", "a", "z"]


def _consumers_by_loop(g: Graph) -> tuple[list[int], list[int], list[int]]:
    """The out-edge CSR filled node by node, edge by edge (the loop ``Graph.consumers`` replaced)."""
    n = len(g)
    starts = [0] * (n + 1)
    for src in g.in_src:
        starts[src + 1] += 1
    for i in range(n):
        starts[i + 1] += starts[i]
    fill = starts[:-1]
    dst_of, pos_of = [0] * len(g.in_src), [0] * len(g.in_src)
    for dst in range(n):
        for pos in range(g.in_start[dst], g.in_start[dst + 1]):
            k = fill[g.in_src[pos]]
            dst_of[k], pos_of[k] = dst, pos
            fill[g.in_src[pos]] = k + 1
    return starts, dst_of, pos_of


@pytest.mark.parametrize("seed", range(5))
def test_consumers_equal_the_edge_by_edge_fill(seed):
    """Random graphs with repeated inputs, control edges and isolated nodes: the vectorised CSR is
    the one the per-edge loop builds, order included."""
    import random

    rng = random.Random(seed)
    gd = GraphDef()
    for i in range(300):
        inputs = []
        for _ in range(rng.randrange(5) if i else 0):
            j = rng.randrange(i)
            inputs.append(rng.choice([f"n{j}", f"n{j}:1", f"^n{j}"]))
        data = [x for x in inputs if not x.startswith("^")]
        gd.node.add(name=f"n{i}", op="Op", input=data + [x for x in inputs if x.startswith("^")])
    g = Graph(gd)
    assert [list(a) for a in g.consumers] == [list(a) for a in _consumers_by_loop(g)]
    assert all(a.typecode == "i" for a in g.consumers)
