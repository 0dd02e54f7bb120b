"""The derived facts a Graph keeps are declared (``Graph.CACHES``) and asked about through
``computed``/``peek``/``clear_caches``/``reset_caches``; no other module writes into a graph, a
lint context or a weak-keyed table (issue 19: caches are explicit values). No TensorFlow needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from placeviz.graph import Graph
from placeviz.io import _default_fact_key_attrs, load
from placeviz.native import kernels
from placeviz.ops import load_op_table
from placeviz.placement.placer import read_fact_attrs
from placeviz.placement.setter import SetterConfig, run_setter
from tests.test_fuzz_load import realistic_graph
from tests.test_setter_kernels import setter_graph

PACKAGE = Path(__file__).resolve().parent.parent / "placeviz"
OP_TABLE = load_op_table()


def _value(graph: Graph, name: str):
    """Compute the fact ``name`` of ``graph`` (``attr_keys``: with the placer's key attrs)."""
    if name == "attr_keys":
        return graph.attr_keys(_default_fact_key_attrs(set(graph.ops)))
    return getattr(graph, name)


def _comparable(value):
    """Arrays and numpy arrays as lists, so that a recomputed value compares with the first."""
    if isinstance(value, tuple):
        return tuple(_comparable(v) for v in value)
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


@pytest.mark.parametrize("name", [n for n in Graph.CACHES if n != "node_wire"])
def test_each_cache_is_reported_cleared_and_recomputed_equal(name):
    graph = Graph(realistic_graph())
    graph.clear_caches(name)
    assert not graph.computed(name) and graph.peek(name) is None
    first = _value(graph, name)
    assert graph.computed(name)
    peeked = graph.peek(name)
    assert (peeked[1] if name == "attr_keys" else peeked) is first  # the kept value, not a copy
    graph.clear_caches(name)
    assert not graph.computed(name)
    assert _comparable(_value(graph, name)) == _comparable(first)


def test_unknown_cache_names_are_refused():
    graph = Graph(realistic_graph())
    for ask in (graph.computed, graph.peek, graph.clear_caches, graph.reset_caches):
        with pytest.raises(ValueError, match="not one of Graph.CACHES"):
            ask("names")  # a field of the graph, not a derived fact


def test_clear_caches_without_names_forgets_everything_but_the_wire_map_it_cannot_remake():
    graph_def = realistic_graph()
    graph = Graph(graph_def, wire=graph_def.SerializeToString())  # keeps its bytes (io.load drops them)
    for name in Graph.CACHES:
        _value(graph, name)
    graph.clear_caches()
    assert not any(graph.computed(n) for n in Graph.CACHES)  # the bytes are there: node_wire too
    wire = graph.node_wire
    graph.drop_bytes()  # node_wire cannot be made again now
    graph.clear_caches()
    assert [n for n in Graph.CACHES if graph.computed(n)] == ["node_wire"]
    assert graph.node_wire is wire


def test_reset_caches_keeps_what_the_graph_was_built_with(tmp_path):
    """After a reset the graph is as ``io.load`` left it: what the C reader read with the nodes
    stays (loading paid for it), what later passes derived goes."""
    path = tmp_path / "g.pb"
    path.write_bytes(realistic_graph().SerializeToString())
    graph = load(path).graph
    as_loaded = {n for n in Graph.CACHES if graph.computed(n)}
    # the Python path builds the name index as a dict; the C reader keeps its own (Graph.id_of)
    assert ("index" in as_loaded) == (kernels("_wire") is None)
    if kernels("_wire") is not None:
        assert {"colocation", "colocated_names", "attr_keys"} <= as_loaded
    for name in ("consumers", "topological_order", "located_names", "colocated_name_ids", "attr_keys"):
        _value(graph, name)
    graph.reset_caches()
    assert {n for n in Graph.CACHES if graph.computed(n)} == as_loaded
    graph.reset_caches("colocation")
    assert graph.computed("colocation") == ("colocation" in as_loaded)
    graph.clear_caches("colocation")  # forgotten whatever made it, and not "built" any more
    assert not graph.computed("colocation")
    assert graph.colocation == Graph(realistic_graph()).colocation
    graph.reset_caches()
    assert not graph.computed("colocation")


def test_a_replaced_attr_key_memo_is_not_kept_by_a_reset(tmp_path):
    path = tmp_path / "g.pb"
    path.write_bytes(realistic_graph().SerializeToString())
    graph = load(path).graph
    graph.attr_keys({"VariableV2": ("shape",)})  # another question than the load's
    graph.reset_caches()
    assert not graph.computed("attr_keys")


def test_the_setter_result_shares_what_is_known_and_answers_like_a_fresh_graph():
    """The setter's result takes the source's name lookups through ``peek``/``computed``; clearing
    the result's caches changes none of its answers."""
    source = Graph(setter_graph())
    source.located_names  # noqa: B018 - known, so the result takes it
    read_fact_attrs(source, OP_TABLE)
    graph = run_setter(source, SetterConfig(ps_tasks=2, worker_device="/job:worker/task:0"), OP_TABLE).graph
    assert graph is not source
    before = {n: _comparable(_value(graph, n)) for n in Graph.CACHES if n != "node_wire"}
    graph.clear_caches()
    after = {n: _comparable(_value(graph, n)) for n in Graph.CACHES if n != "node_wire"}
    assert after == before
    fresh = Graph(graph.graph_def)
    assert graph.located_names == fresh.located_names and graph.index == fresh.index
    assert list(graph.colocation.items()) == list(fresh.colocation.items())


def test_the_setter_is_handed_its_attr_keys_not_the_graphs_last_question():
    """The setter's resource test takes the attr keys it is handed (what setter_stage read), not
    whatever the graph was asked last: another question in between changes nothing, and without
    keys it asks node by node, with the same devices."""
    from placeviz.placement import setter

    source = Graph(setter_graph())
    keys = read_fact_attrs(source, OP_TABLE)
    source.attr_keys({"VariableV2": ("shape",)})  # another question: the graph's memo is now that one
    facts = setter._resource_facts(source, OP_TABLE, keys)
    assert facts is not None and facts[0] and facts[1] is keys[1]  # by (op, attr key)
    unkeyed = setter._resource_facts(source, OP_TABLE, None)
    assert unkeyed is not None and not unkeyed[0] and unkeyed[1] is None and unkeyed[2]  # by node
    config = SetterConfig(ps_tasks=2, worker_device="/job:worker/task:0")
    with_keys = run_setter(source, config, OP_TABLE, attr_keys=keys)
    without = run_setter(source, config, OP_TABLE)
    assert with_keys.graph.devices == without.graph.devices and with_keys.rule == without.rule


@pytest.mark.tf
def test_the_partitioner_is_handed_the_placers_attr_keys_not_the_graphs_memo():
    """The memory types' fact table groups nodes by the attr keys the placer read and kept
    (``Placement.attr_keys``, handed to ``partition(attr_keys=)``), not by the graph's memo of
    them; without them every node has a row of its own, and the partitions are the same."""
    tf = pytest.importorskip("tensorflow")
    from placeviz.io import model_from_proto
    from placeviz.partition import partition
    from placeviz.placement import PlacementOptions, place_graph
    from placeviz.sample_graphs import BuildOptions, build_graph

    with build_graph("mlp", BuildOptions()).as_default() as built:
        meta = tf.compat.v1.train.export_meta_graph(graph=built)
    model = model_from_proto("mlp", "metagraph", meta)
    result = place_graph(model.graph, PlacementOptions(setter=SetterConfig(ps_tasks=2)), OP_TABLE)
    graph, devices, keys = result.graph, result.placement.devices, result.placement.attr_keys
    assert keys is not None and len(keys[1]) == len(graph)
    assert graph.cached_attr_keys() is not None  # the memo holds the same answer: it is not read
    handed, alone = partition(graph, devices, attr_keys=keys), partition(graph, devices)
    nodes = list(range(len(graph)))
    assert len(handed._builder.fact_table(nodes)[1]) < len(graph) == len(alone._builder.fact_table(nodes)[1])
    assert handed.transfers == alone.transfers and handed.original_nodes == alone.original_nodes


# Writing into another object's instance dict, or reading it to guess what was computed.
_PLANTING = re.compile(r"__dict__\s*(\[|\.setdefault|\.get|\.pop)|in\s+[\w.]+\.__dict__|WeakKeyDictionary")


def test_no_module_plants_or_peeks_caches_outside_graph_py():
    """Only ``graph.py`` touches a graph's cache slots; the rest of the package asks it. (A
    ``to_json`` returning ``dict(self.__dict__)`` reads its own fields and is not matched.)"""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "graph.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _PLANTING.search(line):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_colocated_name_ids_and_located_names_in_either_order():
    """``colocated_name_ids`` looks the names up in the order the graph first names them (and fills
    ``located_names`` on the way): the same answers as asking ``located_names`` first, and as the
    names' union looked up in the index, with names of no node left out."""
    graph_def = realistic_graph()
    graph_def.node[0].attr["_class"].list.s.append(b"loc:@no_such_node")
    ids_first, names_first = Graph(graph_def), Graph(graph_def)
    ids = ids_first.colocated_name_ids
    assert ids_first.computed("located_names")
    names_first.located_names  # noqa: B018 - asked first
    assert ids == names_first.colocated_name_ids
    assert ids_first.located_names == names_first.located_names
    union = set().union(*ids_first.colocated_names.values())
    assert ids_first.located_names == union and "no_such_node" in union
    assert ids == {name: ids_first.index[name] for name in union if name in ids_first.index}
    assert ids


def test_sharded_savers_by_op_index_or_by_walk():
    from placeviz.placement.scopes import OpIndex
    from placeviz.placement.setter import sharded_savers
    from placeviz.protos import GraphDef

    graph_def = GraphDef()
    for name, op in [("save_1/ShardedFilename", "ShardedFilename"), ("a", "NoOp"),
                     ("save/ShardedFilename_1", "ShardedFilename"), ("ShardedFilename", "ShardedFilename"),
                     ("save/ShardedFilename", "ShardedFilename")]:
        graph_def.node.add(name=name, op=op)
    graph = Graph(graph_def)
    assert sharded_savers(graph) == sharded_savers(graph, OpIndex(graph.ops)) == ["save/", "save_1/"]
    plain = Graph(realistic_graph())
    assert sharded_savers(plain) == sharded_savers(plain, OpIndex(plain.ops)) == []


def test_op_index_from_the_readers_codes_answers_as_from_the_ops(tmp_path):
    """``OpIndex.of`` a graph read from bytes takes the C reader's op codes (``Graph.op_codes``):
    the same node ids for every question as the index made from the op names."""
    from placeviz.placement.scopes import OpIndex

    path = tmp_path / "g.pb"
    path.write_bytes(realistic_graph().SerializeToString())
    graph = load(path).graph
    by_codes, by_names = OpIndex.of(graph), OpIndex(graph.ops)
    assert (graph.op_codes() is not None) == (kernels("_wire") is not None)
    ops = sorted(set(graph.ops))
    for wanted in [(op,) for op in ops] + [tuple(ops), ("NoSuchOp",), (), (ops[0], "NoSuchOp")]:
        assert by_codes.ids(wanted).tolist() == by_names.ids(wanted).tolist()
