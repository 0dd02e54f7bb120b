"""Op facts: what TensorFlow's op and kernel registries know, without importing TensorFlow.

placeviz ships a table generated from a real TF install by :mod:`placeviz.ops_generate`
(``placeviz ops generate``) in ``placeviz/data/op_facts.json.gz``. This module loads it lazily,
once, and answers the questions the setter, placer, partitioner and analysis ask per node:

- :meth:`OpTable.input_types` / :meth:`OpTable.output_types`: the DataType of each input / output
  position of a NodeDef, exactly as TF's ``Operation._input_types`` / ``outputs[i].dtype`` report
  them (ref types as ``base + 100``, ``DT_RESOURCE`` = 20), expanding ``number_attr`` and
  ``type_list_attr`` args from the node's attrs, falling back to the OpDef's defaults;
- :meth:`OpTable.is_ref_or_resource_input`: whether input ``i`` is a ref or resource edge (the
  placer colocates those);
- :meth:`OpTable.supported_device_types`: TF's ``SupportedDeviceTypesForNode`` on the table
  (kernel constraints, ``_kernel`` labels, priorities and the DEFAULT-kernel fallback);
- :meth:`OpTable.ps_ops`: ``replica_device_setter``'s default ps op list, read from that TF.

Speed: results are cached per (op type, values of the attrs they depend on), so the cost per node
is an op lookup, one attr read per relevant attr and a dict hit.

DEFAULT kernels. TF registers some kernels for device type ``DEFAULT`` (``Const``, ``VariableV2``,
``VarHandleOp``, ``Shape``, queues...). They are not a device type: when no kernel registered for
a concrete device type (``GPU``) matches a node, TF falls back to a matching DEFAULT kernel, so the
op runs on that device type anyway. :meth:`OpTable.supported_device_types` applies that rule for
every device type it is asked about; the raw kernels stay visible under ``"DEFAULT"`` in
:attr:`OpFacts.kernels`.

Completeness. A TF wheel registers only the kernels it was built for: the CPU wheel has all CPU and
DEFAULT kernels but only a few GPU/TPU ones; the CUDA-enabled wheel (which the shipped table comes
from, see ``generated_by``) has all GPU kernels too. :attr:`OpTable.kernel_device_types_complete`
says which device types are complete in the generating build. For any other device type a missing
kernel means "unknown", never "absent": :meth:`OpTable.supported_device_types` counts such a type as
supported at priority 0 when no recorded kernel fits (as TF treats an op it does not know), so the
placer honours a pin to it, and :meth:`OpTable.kernel_support` returns ``None`` rather than
``False``. ``registered_only=True`` gives the generating build's own answer instead.

Table format ``placeviz.op_facts/1`` (gzip JSON): ``tf_version``, ``tf_git_version``, ``build``
(``is_cuda_build``...), ``generated_by`` (optional: ``distribution``, ``distribution_version``,
``platform``, ``cuda_version``...), ``kernel_device_types_seen``, ``kernel_device_types_complete``,
``standard_ps_ops``, and ``ops``: op name -> ``{"in": [args], "out": [args], "stateful": true?,
"attrs": [[name, attr type, default?]], "kernels": {device type: [{"priority", "constraints":
[[attr, kind, allowed]], "label"?, "host_memory"?}]}, "op_def": base64 OpDef without docs}``;
an arg is ``[name, type, type_attr, number_attr, type_list_attr, is_ref]``.
"""

from __future__ import annotations

import base64
import enum
import gzip
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

from placeviz.errors import PlacevizError

SCHEMA = "placeviz.op_facts/1"
DT_RESOURCE = 20
REF_OFFSET = 100
DEFAULT_DEVICE_TYPE = "DEFAULT"
_ENV_PATH = "PLACEVIZ_OP_FACTS"

class OpFactsError(PlacevizError):
    """The op-facts table is missing, unreadable, or a node cannot be interpreted with it."""


class UnknownOpError(OpFactsError):
    """Ops that the op-facts table does not know (``ops``: sorted list of op types)."""

    def __init__(self, ops: Iterable[str], tf_version: str = ""):
        self.ops = sorted(set(ops))
        shown = ", ".join(self.ops[:10]) + (f" (+{len(self.ops) - 10} more)" if len(self.ops) > 10 else "")
        where = f" TensorFlow {tf_version}'s" if tf_version else " the"
        super().__init__(
            f"{len(self.ops)} op type(s) unknown to{where} op registry: {shown} "
            "(custom ops? regenerate the table with `placeviz ops generate` under the TF that has them)"
        )


class NodeAttrError(OpFactsError):
    """A node lacks an attr its op needs to type its inputs/outputs, and the OpDef has no default."""


class ArgSpec(NamedTuple):
    """One input or output arg of an OpDef."""

    name: str
    type: int  # fixed DataType, or 0 when given by an attr
    type_attr: str
    number_attr: str
    type_list_attr: str
    is_ref: bool


class Kernel(NamedTuple):
    """One registered kernel of an op for one device type."""

    priority: int
    constraints: Mapping[str, tuple]  # attr name -> allowed values (DataType ints for type attrs)
    label: str = ""  # selected only by nodes whose `_kernel` attr equals it
    host_memory: tuple[str, ...] = ()  # args kept in host memory (drives _HostSend/_HostRecv)


class AttrSpec(NamedTuple):
    """An OpDef attr: its type string (``type``, ``int``, ``list(type)``...) and default, if any.

    ``default`` is JSON-native for type/int/float/bool/string attrs and lists of them (a DataType
    is an int), and None for shapes/tensors/funcs: use :meth:`OpTable.default_attrs` for those.
    """

    type: str
    has_default: bool
    default: Any


@dataclass(frozen=True)
class OpFacts:
    """What the registries know about one op type."""

    name: str
    inputs: tuple[ArgSpec, ...]
    outputs: tuple[ArgSpec, ...]
    is_stateful: bool
    is_ps_op: bool
    kernels: Mapping[str, tuple[Kernel, ...]]  # device type (incl. "DEFAULT") -> kernels
    attrs: Mapping[str, AttrSpec] = field(default_factory=dict)


class _Missing(enum.Enum):
    """The "absent" sentinel of lookups whose values may be None (an unknown op, an attr without default)."""

    MISSING = 0


_MISSING: Final = _Missing.MISSING

# Extractor kinds for io-relevant attrs.
_K_TYPE, _K_INT, _K_TYPE_LIST = 0, 1, 2


class _OpRec:
    """Compiled per-op data for the fast paths."""

    __slots__ = (
        "name",
        "raw",
        "io_attrs",
        "single_type",
        "static_io",
        "k_attrs",
        "k_static",
        "kernels_by_dev",
        "has_label",
    )

    def __init__(self, name: str, raw: dict):
        self.name = name
        self.raw = raw
        attrs = {a[0]: a[1:] for a in raw.get("attrs", ())}
        io: dict[str, int] = {}
        for arg in raw.get("in", []) + raw.get("out", []):
            _, _t, type_attr, number_attr, type_list_attr, _ref = arg
            if type_attr:
                io[type_attr] = _K_TYPE
            if number_attr:
                io[number_attr] = _K_INT
            if type_list_attr:
                io[type_list_attr] = _K_TYPE_LIST
        self.io_attrs = tuple(
            (name_, kind, _default_for(attrs.get(name_), kind)) for name_, kind in io.items()
        )
        self.single_type = None
        if len(self.io_attrs) == 1 and self.io_attrs[0][1] == _K_TYPE:
            self.single_type = (self.io_attrs[0][0], self.io_attrs[0][2])
        self.static_io = None
        if not self.io_attrs:
            self.static_io = _expand(self, {}, "")

        # Kernel matching: constrained attrs (name, kind, default), compiled kernels per device type.
        k_attrs: dict[str, str] = {}
        kernels_by_dev: dict[str, list[tuple[int, str, tuple, tuple]]] = {}
        has_label = False
        for dev, ks in raw.get("kernels", {}).items():
            compiled = []
            for k in ks:
                cons = []
                for attr_name, kind, allowed in k.get("constraints", []):
                    k_attrs.setdefault(attr_name, kind)
                    if kind == "s":
                        allowed = [a.encode("utf-8") for a in allowed]
                    cons.append((attr_name, kind, frozenset(allowed)))
                label = k.get("label", "")
                has_label = has_label or bool(label)
                compiled.append((k["priority"], label, tuple(cons), tuple(k.get("host_memory", ()))))
            kernels_by_dev[dev] = compiled
        self.k_attrs = tuple(
            (n, kind, _constraint_default(attrs.get(n), kind)) for n, kind in k_attrs.items()
        )
        self.kernels_by_dev = kernels_by_dev
        self.has_label = has_label
        self.k_static = not self.k_attrs and not has_label


def _default_for(attr_entry: list | None, kind: int) -> Any:
    if not attr_entry or len(attr_entry) < 2 or attr_entry[1] is None:
        return _MISSING
    value = attr_entry[1]
    if kind == _K_TYPE_LIST:
        return tuple(value)
    return value


def _constraint_default(attr_entry: list | None, kind: str) -> Any:
    if not attr_entry or len(attr_entry) < 2 or attr_entry[1] is None:
        return _MISSING
    value = attr_entry[1]
    if kind == "s":
        return value.encode("utf-8")
    if kind == "type" and isinstance(value, list):
        return tuple(value)
    return value


def _expand(
    rec: _OpRec, values: Mapping[str, Any], node_name: str
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Input and output DataTypes of an op given the values of its io attrs."""

    def one(args: list) -> tuple[int, ...]:
        out: list[int] = []
        for arg in args:
            name, fixed, type_attr, number_attr, type_list_attr, is_ref = arg
            ref = REF_OFFSET if is_ref else 0
            if type_list_attr:
                types = _need(values, type_list_attr, rec, node_name)
                out.extend(t + ref for t in types)
                continue
            t = fixed if fixed else _need(values, type_attr, rec, node_name)
            n = _need(values, number_attr, rec, node_name) if number_attr else 1
            out.extend([t + ref] * n)
        return tuple(out)

    return one(rec.raw.get("in", [])), one(rec.raw.get("out", []))


def _need(values: Mapping[str, Any], attr: str, rec: _OpRec, node_name: str) -> Any:
    v = values.get(attr, _MISSING)
    if v is _MISSING:
        raise NodeAttrError(
            f"node {node_name!r} ({rec.name}) has no attr {attr!r} and the OpDef gives no default"
        )
    return v


class OpTable:
    """The op-facts table of one TF build. Create with :func:`load_op_table`."""

    def __init__(self, data: dict, path: str = "<memory>"):
        if data.get("schema") != SCHEMA:
            raise OpFactsError(f"{path}: not a placeviz op-facts table (schema {data.get('schema')!r})")
        self.path = path
        self.tf_version: str = data["tf_version"]
        self.tf_git_version: str = data.get("tf_git_version", "")
        self.build: dict = data.get("build", {})
        self.generated_by: dict = data.get("generated_by", {})
        self.kernel_device_types_seen: frozenset[str] = frozenset(data["kernel_device_types_seen"])
        self.kernel_device_types_complete: frozenset[str] = frozenset(
            data.get("kernel_device_types_complete", ())
        )
        self._ps_ops = frozenset(data["standard_ps_ops"])
        self._ps_ops_ordered: tuple[str, ...] = tuple(data["standard_ps_ops"])
        self._raw: Mapping[str, dict] = data["ops"]  # a dict, or _LazyOps as _read gives it
        self._recs: dict[str, _OpRec | None] = {}
        self._facts: dict[str, OpFacts] = {}
        self._op_defs: dict[str, Any] = {}
        self._io_cache: dict[tuple, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._dev_cache: dict[tuple, list[tuple[str, int]]] = {}
        from placeviz.devices.device_set import prioritized_device_types

        # TF's device-type order (DeviceSet::PrioritizedDeviceTypeList): the order ties in kernel
        # priority keep.
        seen = self.kernel_device_types_seen - {DEFAULT_DEVICE_TYPE}
        self.default_device_types: tuple[str, ...] = tuple(prioritized_device_types(seen))

    # -- lookups ---------------------------------------------------------------------------------

    def __contains__(self, op_type: object) -> bool:
        return op_type in self._raw

    def __len__(self) -> int:
        return len(self._raw)

    def op_types(self) -> list[str]:
        """All op types in the table, sorted."""
        return list(self._raw)

    def get(self, op_type: str) -> OpFacts | None:
        """The facts of one op type, or None if the table does not know it."""
        facts = self._facts.get(op_type)
        if facts is None:
            raw = self._raw.get(op_type)
            if raw is None:
                return None
            facts = self._facts[op_type] = self._make_facts(op_type, raw)
        return facts

    def _make_facts(self, name: str, raw: dict) -> OpFacts:
        kernels = {}
        for dev, ks in raw.get("kernels", {}).items():
            kernels[dev] = tuple(
                Kernel(
                    k["priority"],
                    {c[0]: tuple(c[2]) for c in k.get("constraints", [])},
                    k.get("label", ""),
                    tuple(k.get("host_memory", ())),
                )
                for k in ks
            )
        attrs = {a[0]: AttrSpec(a[1], len(a) > 2, a[2] if len(a) > 2 else None) for a in raw.get("attrs", ())}
        return OpFacts(
            name=name,
            inputs=tuple(ArgSpec(*a) for a in raw.get("in", [])),
            outputs=tuple(ArgSpec(*a) for a in raw.get("out", [])),
            is_stateful=bool(raw.get("stateful", False)),
            is_ps_op=name in self._ps_ops,
            kernels=kernels,
            attrs=attrs,
        )

    def op_def(self, op_type: str):
        """TF's OpDef of the op (as ``placeviz.protos.OpDef``, docs stripped), or None if unknown."""
        od = self._op_defs.get(op_type)
        if od is None:
            raw = self._raw.get(op_type)
            if raw is None:
                return None
            from placeviz.protos import OpDef  # noqa: PLC0415  (keeps `import placeviz.ops` light)

            od = self._op_defs[op_type] = OpDef.FromString(base64.b64decode(raw["op_def"]))
        return od

    def default_attrs(self, op_type: str) -> dict:
        """``{attr name: AttrValue}`` of the attrs with a default (what TF adds to a NodeDef)."""
        od = self.op_def(op_type)
        if od is None:
            return {}
        return {a.name: a.default_value for a in od.attr if a.HasField("default_value")}

    def ps_ops(self) -> frozenset[str]:
        """``STANDARD_PS_OPS`` of ``replica_device_setter`` in the generating TF (may name ops it
        does not register, e.g. ``AutoReloadVariable``)."""
        return self._ps_ops

    def ps_ops_ordered(self) -> tuple[str, ...]:
        return self._ps_ops_ordered

    def is_stateful(self, op_type: str) -> bool | None:
        raw = self._raw.get(op_type)
        return None if raw is None else bool(raw.get("stateful", False))

    # -- per-node fast paths ---------------------------------------------------------------------

    def _rec(self, op: str) -> _OpRec | None:
        rec = self._recs.get(op, _MISSING)
        if rec is _MISSING:
            raw = self._raw.get(op)
            rec = self._recs[op] = _OpRec(op, raw) if raw is not None else None
        return rec

    def io_types(self, node) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """``(input types, output types)`` of a NodeDef, or None if its op is unknown.

        Types are DataType ints; ref inputs/outputs are ``base + 100``; resources are 20.
        Raises :class:`NodeAttrError` if an attr needed for the types is absent without default.
        """
        op = node.op
        rec = self._recs.get(op, _MISSING)
        if rec is _MISSING:
            rec = self._rec(op)
        if rec is None:
            return None
        static = rec.static_io
        if static is not None:
            return static
        single = rec.single_type
        if single is not None:  # the common case: one type attr ("T", "dtype")
            av = node.attr.get(single[0])
            tkey: tuple = (op, single[1] if av is None else av.type)
        else:
            attr = node.attr
            key: list = [op]
            for name, kind, default in rec.io_attrs:
                av = attr.get(name)
                if av is None:
                    key.append(default)
                elif kind == _K_TYPE:
                    key.append(av.type)
                elif kind == _K_INT:
                    key.append(av.i)
                else:
                    key.append(tuple(av.list.type))
            tkey = tuple(key)
        res = self._io_cache.get(tkey)
        if res is None:
            values = {name: v for (name, _, _), v in zip(rec.io_attrs, tkey[1:], strict=True)}
            res = self._io_cache[tkey] = _expand(rec, values, node.name)
        return res

    def input_types(self, node) -> tuple[int, ...] | None:
        """DataType per input position (data inputs only, in order), or None if the op is unknown."""
        res = self.io_types(node)
        return None if res is None else res[0]

    def output_types(self, node) -> tuple[int, ...] | None:
        """DataType per output position (so also the output count), or None if the op is unknown."""
        res = self.io_types(node)
        return None if res is None else res[1]

    def is_ref_or_resource_input(self, node, i: int) -> bool:
        """Whether data input ``i`` of the node has a ref or resource type (False if unknown op or
        out of range)."""
        types = self.input_types(node)
        if types is None or not 0 <= i < len(types):
            return False
        t = types[i]
        return t == DT_RESOURCE or t > REF_OFFSET

    def supported_device_types(
        self, node, device_types: Iterable[str] | None = None, *, registered_only: bool = False
    ) -> list[tuple[str, int]] | None:
        """TF's ``SupportedDeviceTypesForNode``: ``[(device type, kernel priority)]`` for the device
        types with a kernel whose constraints (and label) accept the node, sorted by priority
        (highest first, stable in the order of ``device_types``).

        ``device_types``: the device types present (in TF's preference order, e.g. ``("GPU",
        "CPU")``); default :attr:`default_device_types` (every concrete type seen, in TF's device-type
        order: GPU, CPU, XLA_CPU, XLA_GPU, then by name).
        A matching DEFAULT kernel counts for a device type that has no matching kernel of its own
        (TF's fallback), with the DEFAULT kernel's priority. ``"DEFAULT"`` itself is never returned
        unless asked for. Returns None if the op is unknown (TF would treat an op missing from its
        registry, e.g. a function call, as supported everywhere at priority 0).

        Unknown is not absent: a device type that is not in :attr:`kernel_device_types_complete`
        (GPU in a table generated from the CPU wheel, TPU, XLA_*, ...) and has no recorded kernel
        fitting the node is returned with priority 0, since the full build may have that kernel.
        ``registered_only=True`` returns only the device types with a recorded kernel (what the
        generating build itself would answer); then ``[]`` means no kernel fits.
        """
        op = node.op
        rec = self._recs.get(op, _MISSING)
        if rec is _MISSING:
            rec = self._rec(op)
        if rec is None:
            return None
        dtypes = self.default_device_types if device_types is None else tuple(device_types)
        key = (dtypes, registered_only, *self._kernel_key(rec, node))
        res = self._dev_cache.get(key)
        if res is None:
            res = self._dev_cache[key] = self._match_devices(rec, key)
        return list(res)

    @staticmethod
    def _kernel_key(rec: _OpRec, node) -> tuple:
        """(op, label, values of the constrained attrs) of a node: what kernel selection depends on."""
        if rec.k_static:
            return (rec.name, "")
        attr = node.attr
        parts: list = [rec.name]
        lav = attr.get("_kernel") if rec.has_label else None
        parts.append(
            lav.s.decode("utf-8", "replace") if lav is not None and lav.WhichOneof("value") == "s" else ""
        )
        for name, kind, default in rec.k_attrs:
            av = attr.get(name)
            if av is None:
                parts.append(default)
            elif kind == "type":
                parts.append(av.type if av.type else tuple(av.list.type))
            elif kind == "s":
                parts.append(av.s)
            elif kind == "i":
                parts.append(av.i)
            elif kind == "b":
                parts.append(av.b)
            else:
                parts.append(None)
        return tuple(parts)

    @staticmethod
    def _select(rec: _OpRec, dev: str, kkey: tuple) -> tuple | None:
        """The kernel TF's FindKernelRegistration picks for ``dev`` (with the DEFAULT fallback)."""
        label = kkey[1]
        values = {name: v for (name, _, _), v in zip(rec.k_attrs, kkey[2:], strict=False)}
        best = _best_kernel(rec.kernels_by_dev.get(dev, ()), label, values)
        if best is None and dev != DEFAULT_DEVICE_TYPE:
            best = _best_kernel(rec.kernels_by_dev.get(DEFAULT_DEVICE_TYPE, ()), label, values)
        return None if best is _KERNEL_ERROR else best

    def _match_devices(self, rec: _OpRec, key: tuple) -> list[tuple[str, int]]:
        registered_only = key[1]
        kkey = key[2:]
        complete = self.kernel_device_types_complete
        out: list[tuple[str, int]] = []
        for dev in key[0]:
            best = self._select(rec, dev, kkey)
            if best is not None:
                out.append((dev, best[0]))
            elif not registered_only and dev not in complete and dev != DEFAULT_DEVICE_TYPE:
                out.append((dev, 0))  # unknown: the generating build lacks this type's kernels
        out.sort(key=lambda p: -p[1])  # stable, like TF's std::stable_sort
        return out

    def build_label(self) -> str:
        """The build the table came from, e.g. ``tensorflow 2.21.0 (CUDA 12.5.1 build, linux-x86_64)``."""
        return build_label(
            {"tf_version": self.tf_version, "build": self.build, "generated_by": self.generated_by}
        )

    def kernel_support(self, node, device_type: str) -> bool | None:
        """True if a kernel of ``device_type`` (or a DEFAULT one) accepts the node; False if none does
        and the table is complete for that device type; None if unknown (op unknown, or the
        generating build did not register that device type's kernels, e.g. GPU in the CPU wheel)."""
        res = self.supported_device_types(node, (device_type,), registered_only=True)
        if res is None:
            return None
        if res:
            return True
        return False if device_type in self.kernel_device_types_complete else None

    def host_memory_args(self, node, device_type: str) -> tuple[str, ...] | None:
        """Arg names that the kernel TF picks for ``device_type`` keeps in host memory (``()`` if
        none), or None if no kernel fits or the op is unknown."""
        rec = self._rec(node.op)
        if rec is None:
            return None
        best = self._select(rec, device_type, self._kernel_key(rec, node))
        return None if best is None else best[3]

    # -- whole graphs ----------------------------------------------------------------------------

    def missing_ops(self, graph_def) -> list[str]:
        """Sorted op types used by the graph (and by its function library's bodies) that the table
        does not know; functions defined in the graph's library are not missing."""
        return missing_ops(graph_def, self)

    def check_known(self, graph_def) -> None:
        """Raise :class:`UnknownOpError` listing every unknown op type of the graph, if any."""
        missing = self.missing_ops(graph_def)
        if missing:
            raise UnknownOpError(missing, self.tf_version)


_KERNEL_ERROR = object()


def fact_key_attrs(op_table, ops) -> dict[str, tuple[str, ...]]:
    """op -> the attrs its facts depend on (:func:`key_attrs_of_facts`), for the ``ops`` the table knows."""
    out = {}
    for op in ops:
        facts = op_table.get(op)
        if facts is not None:
            out[op] = key_attrs_of_facts(facts)
    return out


def key_attrs_of_facts(facts) -> tuple[str, ...]:
    """The attrs a node's op facts depend on: its io types' attrs, kernel constraints, ``_kernel``.

    :meth:`OpTable.io_types` reads the attrs named by the args (type, number and type-list attrs),
    :meth:`OpTable.supported_device_types` the attrs any kernel constrains and, when some kernel
    has a label, ``_kernel``. Two nodes of one op with equal values of these attrs get the same
    answers, so the placer asks the table once per distinct combination.
    """
    names: set[str] = set()
    for arg in facts.inputs + facts.outputs:
        names.update(a for a in (arg.type_attr, arg.number_attr, arg.type_list_attr) if a)
    for kernels in facts.kernels.values():
        for kernel in kernels:
            names.update(kernel.constraints)
            if kernel.label:
                names.add("_kernel")
    return tuple(sorted(names))


def _best_kernel(kernels, label: str, values: Mapping[str, Any]) -> Any:
    """TF's FindKernelRegistration loop over one (op, device type, label) key: the highest-priority
    compiled kernel whose constraints accept the values (KernelAttrsMatch), None if none does, or
    ``_KERNEL_ERROR`` where TF fails the lookup: a kernel constrains an attr the node lacks (even if
    another kernel would match), or two matching kernels share the best priority."""
    best: tuple | None = None
    tie = False
    for k in kernels:
        prio, klabel, cons = k[0], k[1], k[2]
        if klabel != label:
            continue
        ok = True
        for attr_name, kind, allowed in cons:
            v = values.get(attr_name, _MISSING)
            if v is _MISSING:
                return _KERNEL_ERROR  # "OpKernel ... has constraint on attr ... not in NodeDef"
            if v is None:
                ok = False
                break
            if kind == "type" and isinstance(v, tuple):
                if not all(t in allowed for t in v):
                    ok = False
                    break
            elif v not in allowed:
                ok = False
                break
        if ok:
            if best is None or prio > best[0]:
                best, tie = k, False
            elif prio == best[0]:
                tie = True
    if tie:
        return _KERNEL_ERROR  # "Multiple OpKernel registrations match NodeDef at the same priority"
    return best


def _iter_op_types(graph_def) -> tuple[set[str], set[str]]:
    used: set[str] = set()
    nodes = graph_def.node if hasattr(graph_def, "node") else graph_def
    for n in nodes:
        used.add(n.op)
    functions: set[str] = set()
    library = getattr(graph_def, "library", None)
    if library is not None:
        for f in library.function:
            functions.add(f.signature.name)
            for n in f.node_def:
                used.add(n.op)
        for g in library.gradient:
            functions.add(g.gradient_func)
    return used, functions


def missing_ops(graph_def, table: OpTable | None = None) -> list[str]:
    """Sorted op types of a GraphDef (or an iterable of NodeDefs) unknown to the table.

    Ops of function bodies in ``graph_def.library`` are checked too; calls to functions the library
    defines are not reported. Callers report these instead of crashing on them.
    """
    table = table or load_op_table()
    used, functions = _iter_op_types(graph_def)
    return sorted(op for op in used if op not in table._raw and op not in functions)


# ------------------------------------------------------------------------------------------------
# Loading

_TABLES: dict[str, OpTable] = {}
_LOCK = threading.Lock()


def default_table_path() -> Path:
    """``$PLACEVIZ_OP_FACTS`` if set, else the shipped ``placeviz/data/op_facts.json.gz``."""
    env = os.environ.get(_ENV_PATH)
    if env:
        return Path(env)
    return Path(__file__).resolve().parent / "data" / "op_facts.json.gz"


def load_op_table(path: str | os.PathLike | None = None) -> OpTable:
    """Load (once per path, then cached) the op-facts table; default :func:`default_table_path`."""
    p = Path(path) if path is not None else default_table_path()
    key = str(p)
    table = _TABLES.get(key)
    if table is not None:
        return table
    with _LOCK:
        table = _TABLES.get(key)
        if table is None:
            table = _TABLES[key] = _read(p)
    return table


def _read(p: Path) -> OpTable:
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise OpFactsError(
            f"op-facts table {p} cannot be read ({e.strerror or e}); run `placeviz ops generate`"
        ) from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = _parse_lazily(raw, str(p))
        if data is None:
            data = json.loads(raw)
    except (OSError, ValueError, EOFError) as e:
        raise OpFactsError(f"op-facts table {p} is corrupt: {e}") from None
    if not isinstance(data, dict):
        raise OpFactsError(f"op-facts table {p} is corrupt: not a JSON object")
    return OpTable(data, str(p))


# ``"}","Name":{`` between two ops of the compact JSON ``ops_generate.table_bytes`` writes.
_OP_BOUNDARY = re.compile(rb'\},"([A-Za-z0-9_>.\-]+)":\{')
_OPS_OPEN, _OPS_CLOSE = b'],"ops":{"', b'}},"schema":'


class _LazyOps(Mapping):
    """The table's ``ops`` object, each op's JSON parsed when first looked up.

    A graph uses a few dozen of the ~1,900 op types; parsing all of them (``json.loads`` of 2 MB)
    was 60-90 ms of every command, a third of a cold ``lint`` of a small graph once the imports
    were trimmed. Keys and order are those of the file (sorted by ``ops_generate``).
    """

    def __init__(self, body: bytes, spans: dict[str, tuple[int, int]], path: str):
        self._body, self._spans, self._path = body, spans, path
        self._parsed: dict[str, dict] = {}

    def __getitem__(self, op_type: str) -> dict:
        value = self._parsed.get(op_type)
        if value is None:
            start, end = self._spans[op_type]  # KeyError for an unknown op, as a dict
            try:
                value = json.loads(self._body[start:end])
            except ValueError as e:
                raise OpFactsError(f"op-facts table {self._path} is corrupt: op {op_type}: {e}") from None
            self._parsed[op_type] = value
        return value

    def __contains__(self, op_type: object) -> bool:
        return op_type in self._spans

    def __iter__(self):
        return iter(self._spans)

    def __len__(self) -> int:
        return len(self._spans)


def _parse_lazily(raw: bytes, path: str) -> dict | None:
    """The table with its ``ops`` as a :class:`_LazyOps`, or None when ``raw`` is not laid out as
    ``ops_generate.table_bytes`` writes it (compact, sorted keys): then the caller parses it whole.

    The split is checked before it is trusted: every op's text must open with ``{``, close with
    ``}`` and hold as many of each (JSON strings escape no braces, so a string holding one makes
    the check fail: a whole parse, never a wrong table), and everything outside ``ops`` is parsed.
    """
    open_at, close_at = raw.find(_OPS_OPEN), raw.rfind(_OPS_CLOSE)
    if open_at < 0 or close_at < open_at:
        return None
    body_start = open_at + len(_OPS_OPEN) - 1  # at the first op name's opening quote
    body = raw[body_start:close_at + 1]  # '"Abort":{...},...,"ZerosLike":{...}'
    first = re.match(rb'"([A-Za-z0-9_>.\-]+)":\{', body)
    if first is None:
        return None
    names, starts = [first.group(1)], [first.end() - 1]
    ends = []
    for m in _OP_BOUNDARY.finditer(body):
        ends.append(m.start() + 1)
        names.append(m.group(1))
        starts.append(m.end() - 1)
    ends.append(len(body))
    spans: dict[str, tuple[int, int]] = {}
    for name, start, end in zip(names, starts, ends, strict=True):
        if body.count(b"{", start, end) != body.count(b"}", start, end):
            return None
        spans[name.decode("ascii")] = (start, end)
    if len(spans) != len(names):
        return None
    data = json.loads(raw[:body_start - 1] + b"{}" + raw[close_at + 2:])
    if not isinstance(data, dict) or data.get("ops") != {}:
        return None
    data["ops"] = _LazyOps(body, spans, path)
    return data


# ------------------------------------------------------------------------------------------------
# `placeviz ops show OPTYPE`


def build_label(table: Mapping) -> str:
    """One line naming the build a table came from, e.g. ``tensorflow 2.21.0 (CUDA 12.5.1 build)``."""
    gen = table.get("generated_by") or {}
    build = table.get("build") or {}
    name = gen.get("distribution") or "TensorFlow"
    version = gen.get("distribution_version") or table.get("tf_version", "")
    if build.get("is_cuda_build"):
        kind = f"CUDA {gen['cuda_version']} build" if gen.get("cuda_version") else "CUDA build"
    elif build.get("is_rocm_build"):
        kind = f"ROCm {gen['rocm_version']} build" if gen.get("rocm_version") else "ROCm build"
    else:
        kind = "CPU-only build"
    platform = f", {gen['platform']}" if gen.get("platform") else ""
    return f"{name} {version} ({kind}{platform})"


def _dt(t: int) -> str:
    from placeviz.protos import dtype_name  # noqa: PLC0415

    return dtype_name(t)


def _arg_text(a: ArgSpec) -> str:
    if a.type_list_attr:
        s = f"{a.type_list_attr} (type list)"
    else:
        s = _dt(a.type) if a.type else a.type_attr
        if a.number_attr:
            s = f"{a.number_attr} * {s}"
    return f"{a.name}: {'ref(' + s + ')' if a.is_ref else s}"


def _value_text(kind_is_type: bool, v: Any) -> str:
    if kind_is_type and isinstance(v, int):
        return _dt(v)
    if kind_is_type and isinstance(v, list):
        return "[" + ", ".join(_dt(x) for x in v) + "]"
    return json.dumps(v)


def describe_op(op_type: str, table: OpTable | None = None) -> dict:
    """The facts of one op as a JSON-ready dict (schema ``placeviz.op/1``); raises
    :class:`UnknownOpError` (with close matches in the message) if the table lacks it."""
    table = table or load_op_table()
    facts = table.get(op_type)
    if facts is None:
        import difflib  # noqa: PLC0415

        close = difflib.get_close_matches(op_type, table.op_types(), n=5)
        err = UnknownOpError([op_type], table.tf_version)
        if close:
            err.args = (f"{err.args[0]}; did you mean: {', '.join(close)}?",)
        raise err
    return {
        "schema": "placeviz.op/1",
        "tf_version": table.tf_version,
        "name": facts.name,
        "is_stateful": facts.is_stateful,
        "is_ps_op": facts.is_ps_op,
        "inputs": [a._asdict() for a in facts.inputs],
        "outputs": [a._asdict() for a in facts.outputs],
        "attrs": {
            n: {"type": a.type, **({"default": a.default} if a.has_default else {})}
            for n, a in facts.attrs.items()
        },
        "kernels": {
            dev: [
                {
                    "priority": k.priority,
                    "constraints": {n: list(v) for n, v in k.constraints.items()},
                    **({"label": k.label} if k.label else {}),
                    **({"host_memory": list(k.host_memory)} if k.host_memory else {}),
                }
                for k in ks
            ]
            for dev, ks in facts.kernels.items()
        },
        "generated_by": table.build_label(),
        "kernel_device_types_seen": sorted(table.kernel_device_types_seen),
        "kernel_device_types_complete": sorted(table.kernel_device_types_complete),
    }


def format_op(op_type: str, table: OpTable | None = None) -> str:
    """Human-readable facts of one op (``placeviz ops show OPTYPE``)."""
    table = table or load_op_table()
    describe_op(op_type, table)  # raises UnknownOpError with suggestions
    facts = table.get(op_type)
    assert facts is not None
    lines = [f"{facts.name}  (TensorFlow {table.tf_version} registry; table from {table.build_label()})"]
    lines.append(
        f"  stateful: {'yes' if facts.is_stateful else 'no'}    "
        f"default ps op (replica_device_setter): {'yes' if facts.is_ps_op else 'no'}"
    )
    lines.append("  inputs:" + ("" if facts.inputs else " none"))
    lines += [f"    {_arg_text(a)}" for a in facts.inputs]
    lines.append("  outputs:" + ("" if facts.outputs else " none"))
    lines += [f"    {_arg_text(a)}" for a in facts.outputs]
    if facts.attrs:
        lines.append("  attrs:")
        for n, a in facts.attrs.items():
            d = f" = {_value_text(a.type in ('type', 'list(type)'), a.default)}" if a.has_default else ""
            if a.has_default and a.default is None:
                d = " = (default set)"
            lines.append(f"    {n}: {a.type}{d}")
    lines.append("  kernels:" + ("" if facts.kernels else " none registered"))
    type_attrs = {n for n, a in facts.attrs.items() if a.type in ("type", "list(type)")}
    for dev, ks in facts.kernels.items():
        lines.append(f"    {dev}:")
        lines += [f"      {s}" for s in _kernel_lines(ks, type_attrs)]
    other = sorted(table.kernel_device_types_seen - table.kernel_device_types_complete)
    lines.append(
        f"  (kernels complete for {', '.join(sorted(table.kernel_device_types_complete))} in this build; "
        f"partial for {', '.join(other) or 'none'}: a missing kernel there means unknown; a DEFAULT kernel "
        "serves any device type with no matching kernel of its own)"
    )
    return "\n".join(lines)


def _kernel_lines(ks: Iterable[Kernel], type_attrs: set[str]) -> list[str]:
    """One line per kernel, merging kernels that differ only in one single-attr constraint."""
    groups: dict[tuple, list] = {}
    singles: list[Kernel] = []
    for k in ks:
        if len(k.constraints) == 1:
            ((name, allowed),) = k.constraints.items()
            groups.setdefault((k.priority, k.label, k.host_memory, name), []).extend(allowed)
        else:
            singles.append(k)
    out = []

    def tail(prio: int, label: str, host: tuple) -> str:
        parts = [f"priority {prio}"] if prio else []
        if label:
            parts.append(f"label {label!r}")
        if host:
            parts.append("host memory: " + ", ".join(host))
        return ("  [" + "; ".join(parts) + "]") if parts else ""

    def vals(name: str, allowed) -> str:
        if name in type_attrs:
            return "{" + ", ".join(_dt(v) for v in sorted(set(allowed))) + "}"
        return "{" + ", ".join(json.dumps(v) for v in allowed) + "}"

    for (prio, label, host, name), merged in groups.items():
        out.append(f"{name} in {vals(name, merged)}{tail(prio, label, host)}")
    for k in singles:
        cons = ", ".join(f"{n} in {vals(n, a)}" for n, a in k.constraints.items()) or "any attrs"
        out.append(cons + tail(k.priority, k.label, k.host_memory))
    return out
