"""Host or device memory of each input and output of a node: TF's ``MemoryTypesForNode``.

``tensorflow/core/framework/memory_types.cc`` ``MemoryTypesForNode``: an input or output is in host
memory when the kernel registered for the node's device type declares it ``HostMemory``
(``REGISTER_KERNEL_BUILDER(...).HostMemory("x")``, read from the op table), when its dtype always
lives on the host (``string``, ``resource``: ``MTypeFromDType``), or when the node carries
``_input_hostmem``/``_output_hostmem`` (XLA/TPU rewrites). Without a kernel for the device type
(function calls, kernels the op table lacks) ``int32`` counts as host memory too, TF's rule for
kernels it cannot find. The partitioner asks this for the ends of every cut edge: a send from host
memory is a ``_HostSend``, a receive into host memory a ``_HostRecv``
(``tensorflow/core/graph/graph_partition.cc`` ``AddSend``/``AddRecv``), and an edge between
different memory types of one non-CPU device is cut as well.

Memory types on GPU come from the op table, which the CPU wheel fills for CPU kernels only: on
other device types int32 counts as host memory (TF's rule for kernels it cannot find).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from placeviz.errors import PlacevizError
from placeviz.graph import AttrKeys, Graph
from placeviz.op_kinds import SWITCH_OPS
from placeviz.ops import DT_RESOURCE, REF_OFFSET
from placeviz.partition.base import DT_INT32, DT_STRING, _PartitionerBase

if TYPE_CHECKING:
    from placeviz.ops import ArgSpec, OpFacts, OpTable
    from placeviz.partition.base import I32Array
    from placeviz.protos import AttrValue, NodeDef

# Per position of a node's inputs and of its outputs: whether it is in host memory.
MemTypes = tuple[tuple[bool, ...], tuple[bool, ...]]
# A node's facts as the C cut reads them (_MemoryTypes.fact_row): input types, output types,
# input memory (0 device, 1 host, 2 the edge's dtype decides), output memory (0 device, 1 host).
FactRow = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]

_ALWAYS_ON_HOST = frozenset({DT_STRING, DT_STRING + REF_OFFSET, DT_RESOURCE})
_FUNCTION_CALL_OPS = frozenset({"SymbolicGradient", "PartitionedCall", "StatefulPartitionedCall",
                                "While", "StatelessWhile", "If", "StatelessIf", "Case"})


def _host_positions(args: tuple[ArgSpec, ...], facts: OpFacts, nd: NodeDef, hms: set[str],
                    total: int) -> list[bool]:
    """Per expanded position of ``args``: whether its arg is one of the kernel's HostMemory args."""
    out: list[bool] = []
    attr = nd.attr
    count: int
    for a in args:
        if a.type_list_attr:
            av = attr.get(a.type_list_attr)
            if av is not None:
                count = len(av.list.type)
            else:
                spec = facts.attrs.get(a.type_list_attr)
                count = len(spec.default or ()) if spec is not None else 0
        elif a.number_attr:
            av = attr.get(a.number_attr)
            if av is not None:
                count = av.i
            else:
                spec = facts.attrs.get(a.number_attr)
                count = int(spec.default) if spec is not None and spec.default is not None else 1
        else:
            count = 1
        out.extend([a.name in hms] * count)
    if len(out) < total:
        out.extend([False] * (total - len(out)))
    return out[:total]


def _attr_key(av: AttrValue | None) -> object:
    if av is None:
        return None
    return av.type or av.i or av.SerializeToString()


class _OpSpec:
    """What memory types of one op on one device type depend on (precomputed once)."""

    __slots__ = ("attrs", "facts", "host_in", "host_out", "kernel_known", "io_only")

    def __init__(self, table: OpTable, op: str, device_type: str) -> None:
        facts = table.get(op)
        assert facts is not None  # the caller asks for ops of the table only
        self.facts = facts
        names: set[str] = set()
        for arg in facts.inputs + facts.outputs:
            names.update(a for a in (arg.type_attr, arg.number_attr, arg.type_list_attr) if a)
        kernels = facts.kernels.get(device_type) or facts.kernels.get("DEFAULT") or ()
        self.kernel_known = bool(kernels) and op not in _FUNCTION_CALL_OPS
        host: set[str] = set()
        for kernels_of in (facts.kernels.get(device_type, ()), facts.kernels.get("DEFAULT", ())):
            for k in kernels_of:
                host.update(k.host_memory)
                names.update(k.constraints)
                if k.label:
                    names.add("_kernel")
        self.host_in = bool(host & {a.name for a in facts.inputs})
        self.host_out = bool(host & {a.name for a in facts.outputs})
        self.attrs = tuple(sorted(names))
        # When kernels are chosen by the args' type attrs only, the io types decide memory types.
        type_attrs = {a.type_attr for a in facts.inputs + facts.outputs if a.type_attr} | \
            {a.type_list_attr for a in facts.inputs + facts.outputs if a.type_list_attr}
        self.io_only = all(a in type_attrs for a in names)


class _MemoryTypes(_PartitionerBase):
    """Memory types of the inputs and outputs of original and added nodes (module docstring)."""

    def __init__(self, graph: Graph, devices: list[str], table: OpTable, session: str,
                 incarnation: Callable[[str], int], attr_keys: AttrKeys | None = None) -> None:
        """``attr_keys``: the op-fact attr keys of ``graph``'s nodes as the placer read them
        (:attr:`placeviz.placement.placer.Placement.attr_keys`), handed on by the caller; see
        :meth:`fact_table`."""
        super().__init__(graph, devices, table, session, incarnation)
        self.attr_keys = attr_keys
        self._specs: dict[tuple[str, str], _OpSpec | None] = {}
        self._mem: dict[tuple[object, ...], MemTypes] = {}
        self._node_mem: dict[int, MemTypes] = {}

    def spec(self, op: str, device_type: str) -> _OpSpec | None:
        key = (op, device_type)
        if key in self._specs:
            return self._specs[key]
        sp = self._specs[key] = _OpSpec(self.table, op, device_type) if op in self.table else None
        return sp

    def _node_mem_types(self, i: int) -> MemTypes:
        """(input on host?, output on host?) per position of an original node (MemoryTypesForNode)."""
        res = self._node_mem.get(i)
        if res is not None:
            return res
        device_type = self.devs.type[self.dev_l[i]]
        sp = self.spec(self.ops[i], device_type)
        io = self.types(i)
        if sp is None or io is None:
            res = ((), ())
        else:
            in_t, out_t = io
            key: tuple[object, ...]
            # The NodeDef's attrs only when needed (reading them is most of the cost here).
            if sp.io_only:
                key = (self.ops[i], device_type, in_t, out_t)
            else:
                attr = self.nodes_pb[i].attr
                key = (self.ops[i], device_type, in_t, out_t, *[_attr_key(attr.get(a)) for a in sp.attrs])
            known = self._mem.get(key)
            if known is None:
                known = self._mem[key] = self._compute_mem(self.nodes_pb[i], sp, device_type, in_t, out_t)
            res = known
            if self.hostmem_attrs and ("_input_hostmem" in (attr := self.nodes_pb[i].attr)
                                       or "_output_hostmem" in attr):
                ins, outs = list(res[0]), list(res[1])
                for name, vec in (("_input_hostmem", ins), ("_output_hostmem", outs)):
                    if name in attr:
                        for k in attr[name].list.i:
                            if 0 <= k < len(vec):
                                vec[k] = True
                res = (tuple(ins), tuple(outs))
        self._node_mem[i] = res
        return res

    def _compute_mem(self, nd: NodeDef, sp: _OpSpec, device_type: str, in_t: tuple[int, ...],
                     out_t: tuple[int, ...]) -> MemTypes:
        hm = None
        if sp.kernel_known:
            try:
                hm = self.table.host_memory_args(nd, device_type)
            except PlacevizError:
                hm = None
        if hm is None:  # no kernel (functions, unknown device kernels): int32 and host types
            return (tuple(t == DT_INT32 or t in _ALWAYS_ON_HOST for t in in_t),
                    tuple(t == DT_INT32 or t in _ALWAYS_ON_HOST for t in out_t))
        hms = set(hm)
        ins = _host_positions(sp.facts.inputs, sp.facts, nd, hms, len(in_t))
        outs = _host_positions(sp.facts.outputs, sp.facts, nd, hms, len(out_t))
        return (tuple(h or t in _ALWAYS_ON_HOST for h, t in zip(ins, in_t, strict=True)),
                tuple(h or t in _ALWAYS_ON_HOST for h, t in zip(outs, out_t, strict=True)))

    def out_host(self, i: int, slot: int) -> bool:
        if i >= self.n:
            a = self.added[i - self.n]
            if a.kind == "replicate":
                return self.out_host(a.copy_of, slot)
            if not self.devs.is_cpu[a.dev] and a.op == "_HostRecv":
                return True
            return a.dtype in _ALWAYS_ON_HOST
        outs = self._out_mem(i)
        if outs is not None and slot < len(outs):
            return outs[slot]
        return self.out_type(i, slot) in _ALWAYS_ON_HOST

    def in_host(self, i: int, idx: int, dtype: int) -> bool:
        """Whether input ``idx`` of ``i`` is in host memory; ``dtype`` is the edge's type."""
        if i >= self.n:
            a = self.added[i - self.n]
            if a.op in SWITCH_OPS:
                return idx == 1 or dtype in _ALWAYS_ON_HOST
            if not self.devs.is_cpu[a.dev] and a.op == "_HostSend":
                return True
            return dtype in _ALWAYS_ON_HOST
        rule = self._in_host_rule(i, idx)
        return dtype in _ALWAYS_ON_HOST if rule is None else rule

    def _in_host_rule(self, i: int, idx: int) -> bool | None:
        """Input ``idx`` of original node ``i``: in host memory (True), not (False), or None when the
        edge's dtype decides (a kernel without HostMemory inputs, or no memory type for ``idx``)."""
        ins = self._in_mem(i)
        return ins[idx] if ins is not None and idx < len(ins) else None

    def _in_mem(self, i: int) -> tuple[bool, ...] | None:
        """Input memory of original node ``i`` per position as its kernel says (MemoryTypesForNode),
        or None when the edges' dtypes decide (a known kernel without HostMemory inputs): the rule
        of :meth:`_in_host_rule`, for one position, and :meth:`fact_row`, for all at once."""
        sp = self.spec(self.ops[i], self.devs.type[self.dev_l[i]])
        if sp is not None and not sp.host_in and sp.kernel_known:
            return None
        return self._node_mem_types(i)[0]

    def _out_mem(self, i: int) -> tuple[bool, ...] | None:
        """Output memory of original node ``i`` per slot as its kernel says, or None when the
        outputs' dtypes decide (a known kernel without HostMemory outputs): the rule of
        :meth:`out_host`, for one slot, and :meth:`fact_row`, for all at once."""
        sp = self.spec(self.ops[i], self.devs.type[self.dev_l[i]])
        if sp is not None and not sp.host_out and sp.kernel_known:
            return None
        return self._node_mem_types(i)[1]

    # ---------------------------------------------------------------------------- the C cut's table
    def fact_row(self, i: int) -> FactRow:
        """What the C cut (``placeviz._partition_kernels.split_originals``) reads of original node
        ``i``, from the methods above: (input types, output types, input memory, output memory).
        Input memory per position: 1 host, 0 device, 2 the edge's dtype decides (:meth:`in_host`
        beyond the row too); output memory per slot: 1 host, 0 device (:meth:`out_host` is False
        beyond the node's outputs: their type is 0)."""
        io = self.types(i)
        in_t, out_t = io if io is not None else ((), ())
        # Whole tuples, not one call per position: a node can have thousands of inputs or outputs.
        ins = self._in_mem(i) or ()
        in_mem = tuple(map(int, ins[:len(in_t)])) + (2,) * (len(in_t) - len(ins))
        outs = self._out_mem(i) or ()  # beyond them the output's type decides, as in out_host
        out_mem = tuple(map(int, outs[:len(out_t)])) + tuple(int(t in _ALWAYS_ON_HOST) for t in out_t[len(outs):])
        return in_t, out_t, in_mem, out_mem

    def fact_table(self, nodes: list[int]) -> tuple[I32Array, list[FactRow]]:
        """:meth:`fact_row` of each of ``nodes`` (distinct original ids), as a table: per node id the
        index of its row (-1 for the others), and the rows.

        Why a table: the C cut then reads the facts of its edges' ends without calling back into
        Python per edge, and nodes with the same facts share a row, computed once from the first
        of them. The facts of a node depend only on its op, the values of the attrs its op facts
        depend on (:func:`placeviz.ops.key_attrs_of_facts`: io types, kernel constraints,
        ``_kernel``; ``memory_types.cc`` reads no other) and its device type, so nodes are grouped by
        those when the caller handed these attr values (:attr:`attr_keys`, read for the placer)
        for this table's attrs; otherwise, and with ``_input_hostmem`` or
        ``_output_hostmem`` in the graph (per-node overrides), each node has a row of its own.
        """
        import numpy as np

        row_of = np.full(self.n, -1, dtype=np.int32)
        keys = self._fact_keys(nodes)
        first = dict(zip(reversed(keys), reversed(nodes), strict=True))  # each key's first node
        index = {key: k for k, key in enumerate(first)}
        self.graph.prefetch_node_defs(first.values())  # their NodeDefs parsed together (a graph read from bytes)
        rows = [self.fact_row(i) for i in first.values()]
        if nodes:
            row_of[np.asarray(nodes, dtype=np.int64)] = np.fromiter(map(index.__getitem__, keys), dtype=np.int32,
                                                                    count=len(keys))
        return row_of, rows

    def _fact_keys(self, nodes: list[int]) -> list[object]:
        """Per node of ``nodes``: (op, attr key, device type), or its id when it has a row of its own
        (see :meth:`fact_table`)."""
        cached = self.attr_keys
        if cached is None or self.hostmem_attrs or len(cached[1]) != self.n:
            return list(nodes)
        from placeviz.ops import key_attrs_of_facts

        key_attrs, values = cached
        node_ops = list(map(self.ops.__getitem__, nodes))
        usable: dict[str, bool] = {}
        for op in set(node_ops):
            facts = self.table.get(op)
            usable[op] = facts is not None and key_attrs.get(op) == key_attrs_of_facts(facts)
        keys: list[object] = list(zip(node_ops, map(values.__getitem__, nodes),
                                      map(self.devs.type.__getitem__, map(self.dev_l.__getitem__, nodes)),
                                      strict=True))
        if not all(usable.values()):
            keys = [k if usable[op] else i for k, op, i in zip(keys, node_ops, nodes, strict=True)]
        return keys

