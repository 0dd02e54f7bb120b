"""Generate placeviz's op-facts table from the installed TensorFlow (the only module that imports TF).

The static core (:mod:`placeviz.ops`) reads a small table shipped in ``placeviz/data/``; this module
writes it. It reads three things from the TF it runs under, and hard-codes none of them:

- the op registry: every registered ``OpDef`` (``TF_GetAllOpList`` of the C API), for input/output
  arg specs, statefulness and attr defaults;
- the kernel registry (``get_all_registered_kernels``, the same ``KernelDef`` records that
  ``tensorflow.python.framework.kernels.get_registered_kernels_for_op`` returns op by op): device
  type, priority, type/int/bool/string constraints, label and host-memory args of every kernel;
- ``STANDARD_PS_OPS`` from ``tensorflow/python/training/device_setter.py``.

Which build. The CPU wheel (``tensorflow-cpu``) registers CPU, DEFAULT and a few GPU/TPU/XLA kernels
only. The CUDA-enabled wheel (``tensorflow`` on Linux x86_64) registers every GPU kernel at import
time, with or without a GPU, CUDA driver or ``nvidia-*`` packages (it logs that it cannot find CUDA
drivers and goes on); its CPU kernels and OpDefs are those of the CPU wheel, and it adds DEFAULT
kernels that only GPU-enabled builds compile (int32 ``Sum``/``ScatterNd``... kept in host memory;
every CPU node still selects a CPU kernel) and two internal ops (``_CopyFromGpuToHost``,
``_CopyFromHostToGpu``). The shipped table is generated under that wheel, in a throwaway venv::

    python -m venv /tmp/tf-cuda && /tmp/tf-cuda/bin/pip install tensorflow==<version>
    PYTHONPATH=. /tmp/tf-cuda/bin/python -m placeviz.ops_generate

The table records exactly what TF reports, plus which device types were seen and which of them are
*complete* (all kernels of that type are in this build: CPU and DEFAULT always, GPU in a CUDA or
ROCm build), so that a consumer can tell "no GPU kernel" from "GPU unknown", and which
distribution it came from (``generated_by``).

Output: gzip-compressed JSON (``mtime=0``, sorted keys: regenerating with the same TF gives the same
bytes). Format ``placeviz.op_facts/1``, documented in :mod:`placeviz.ops`.

Usage: ``python -m placeviz.ops_generate [-o PATH]`` (the CLI wires ``placeviz ops generate``).
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import os
import sysconfig
from pathlib import Path
from typing import Any

from placeviz.ops import build_label

SCHEMA = "placeviz.op_facts/1"

# Device types whose kernels a build registers only when it is built for them. Anything else the
# build registers (CPU, DEFAULT) is complete in every wheel.
_ACCELERATOR_TYPES_BY_BUILD = {"GPU": ("is_cuda_build", "is_rocm_build")}


def default_path() -> Path:
    """Where the shipped table lives (``placeviz/data/op_facts.json.gz``)."""
    return Path(__file__).resolve().parent / "data" / "op_facts.json.gz"


# ----------------------------------------------------------------------------------------------
# Conversion helpers (TF protos -> JSON-native values)


def _json_scalar(kind: str, value: Any) -> Any:
    if kind == "s":
        return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value
    if kind == "f":
        f = float(value)
        return f if math.isfinite(f) else repr(f)
    if kind in ("i", "type"):
        return int(value)
    if kind == "b":
        return bool(value)
    raise ValueError(kind)


_LIST_KINDS = ("s", "i", "f", "b", "type")


def _attr_default_json(attr_type: str, av) -> Any:
    """A JSON-native default for the attr kinds ops.py computes with; None for the others.

    Kinds handled: type, int, float, bool, string and lists of those. Shapes, tensors and funcs
    are left to the full OpDef (kept in the table as bytes).
    """
    scalar = {"type": "type", "int": "i", "float": "f", "bool": "b", "string": "s"}
    if attr_type in scalar:
        kind = scalar[attr_type]
        return _json_scalar(kind, getattr(av, kind))
    if attr_type.startswith("list(") and attr_type[5:-1] in scalar:
        kind = scalar[attr_type[5:-1]]
        return [_json_scalar(kind, v) for v in getattr(av.list, kind)]
    return None


def _arg_json(arg) -> list:
    """[name, fixed type (0 if none), type_attr, number_attr, type_list_attr, is_ref]."""
    return [arg.name, int(arg.type), arg.type_attr, arg.number_attr, arg.type_list_attr, bool(arg.is_ref)]


def _constraint_json(constraint) -> list:
    """[attr name, kind, allowed values]; kind is one of type, s, i, b (KernelAttrsMatch's cases)."""
    lst = constraint.allowed_values.list
    kinds = [k for k in ("type", "s", "i", "b") if len(getattr(lst, k))]
    if len(kinds) != 1:
        # TF rejects such a KernelDef at match time ("unsupported type"); keep it visible.
        return [constraint.name, "unsupported", []]
    kind = kinds[0]
    return [constraint.name, kind, [_json_scalar(kind, v) for v in getattr(lst, kind)]]


def _kernel_json(kernel) -> dict:
    out: dict[str, Any] = {"priority": int(kernel.priority)}
    constraints = [_constraint_json(c) for c in kernel.constraint]
    if constraints:
        out["constraints"] = constraints
    if kernel.label:
        out["label"] = kernel.label
    if kernel.host_memory_arg:
        out["host_memory"] = list(kernel.host_memory_arg)
    return out


def _kernel_sort_key(k: dict) -> tuple:
    return (
        -k["priority"],
        k.get("label", ""),
        json.dumps(k.get("constraints", []), sort_keys=True),
        k.get("host_memory", []),
    )


def _strip_docs(op_def) -> None:
    op_def.summary = ""
    op_def.description = ""
    for arg in list(op_def.input_arg) + list(op_def.output_arg):
        arg.description = ""
    for attr in op_def.attr:
        attr.description = ""


# ----------------------------------------------------------------------------------------------
# Reading TF


def _generated_by(build_info: dict) -> dict:
    """Which distribution (wheel) and build the registries were read from.

    ``distribution``: the installed distribution(s) providing the ``tensorflow`` package
    (``tensorflow`` for the CUDA-enabled wheel, ``tensorflow_cpu`` / ``tensorflow-cpu`` for the CPU
    one), its version, the platform, and the CUDA/cuDNN/ROCm versions the build was made for.
    """
    from importlib import metadata  # noqa: PLC0415

    dists: list[tuple[str, str]] = []
    try:
        for name in sorted(set(metadata.packages_distributions().get("tensorflow", ()))):
            try:
                dist = metadata.distribution(name)
                dists.append((dist.metadata["Name"] or name, dist.version))
            except metadata.PackageNotFoundError:  # pragma: no cover - broken install
                dists.append((name, ""))
    except Exception:  # pragma: no cover - unusual importers
        dists = []
    out: dict[str, Any] = {
        "distribution": ", ".join(n for n, _ in dists),
        "distribution_version": ", ".join(v for _, v in dists),
        "platform": sysconfig.get_platform(),
    }
    for key in ("cuda_version", "cudnn_version", "rocm_version"):
        if build_info.get(key):
            out[key] = str(build_info[key])
    return out


def _quiet_tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # noqa: PLC0415  (the one module allowed to import TF)

    return tf


def collect() -> dict:
    """Read the installed TF's registries and return the table as a JSON-native dict."""
    tf = _quiet_tf()
    from tensorflow.core.framework import op_def_pb2  # noqa: PLC0415
    from tensorflow.python.client import pywrap_tf_session as c_api  # noqa: PLC0415
    from tensorflow.python.framework import kernels as tf_kernels  # noqa: PLC0415
    from tensorflow.python.training import device_setter  # noqa: PLC0415

    buf = c_api.TF_GetAllOpList()
    try:
        op_list = op_def_pb2.OpList.FromString(c_api.TF_GetBuffer(buf))
    finally:
        c_api.TF_DeleteBuffer(buf)

    kernels_by_op: dict[str, dict[str, list[dict]]] = {}
    device_types_seen: set[str] = set()
    for kernel in tf_kernels.get_all_registered_kernels().kernel:
        device_types_seen.add(kernel.device_type)
        per_dev = kernels_by_op.setdefault(kernel.op, {})
        per_dev.setdefault(kernel.device_type, []).append(_kernel_json(kernel))

    ops: dict[str, dict] = {}
    for op_def in op_list.op:
        facts: dict[str, Any] = {
            "in": [_arg_json(a) for a in op_def.input_arg],
            "out": [_arg_json(a) for a in op_def.output_arg],
        }
        if op_def.is_stateful:
            facts["stateful"] = True
        attrs = []  # a list, not a dict: keeps the OpDef's order through sort_keys
        for attr in op_def.attr:
            entry: list = [attr.name, attr.type]
            if attr.HasField("default_value"):
                entry.append(_attr_default_json(attr.type, attr.default_value))
            attrs.append(entry)
        if attrs:
            facts["attrs"] = attrs
        kernels = kernels_by_op.get(op_def.name, {})
        if kernels:
            facts["kernels"] = {dev: sorted(ks, key=_kernel_sort_key) for dev, ks in sorted(kernels.items())}
        stripped = op_def_pb2.OpDef()
        stripped.CopyFrom(op_def)
        _strip_docs(stripped)
        facts["op_def"] = base64.b64encode(stripped.SerializeToString(deterministic=True)).decode("ascii")
        ops[op_def.name] = facts

    try:
        build_info = dict(tf.sysconfig.get_build_info())
    except Exception:  # pragma: no cover - very old TF
        build_info = {}
    build = {
        k: bool(build_info.get(k, False)) for k in ("is_cuda_build", "is_rocm_build", "is_tensorrt_build")
    }
    # GPU kernels are complete only in a GPU-enabled build: the CPU wheel registers a few (control
    # flow, iterators, XLA ops) but not, e.g., L2Loss or MatMul.
    complete = {"CPU", "DEFAULT"} & device_types_seen
    for dev, flags in _ACCELERATOR_TYPES_BY_BUILD.items():
        if dev in device_types_seen and any(build.get(f) for f in flags):
            complete.add(dev)

    ps_ops = list(device_setter.STANDARD_PS_OPS)
    return {
        "schema": SCHEMA,
        "tf_version": tf.__version__,
        "tf_git_version": getattr(tf, "__git_version__", ""),
        "build": build,
        "generated_by": _generated_by(build_info),
        "kernel_device_types_seen": sorted(device_types_seen),
        "kernel_device_types_complete": sorted(complete),
        "standard_ps_ops": ps_ops,
        "standard_ps_ops_source": "tensorflow.python.training.device_setter.STANDARD_PS_OPS",
        "ops": dict(sorted(ops.items())),
    }


def encode(table: dict) -> bytes:
    """The table as deterministic gzip-compressed JSON bytes."""
    raw = json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return gzip.compress(raw, compresslevel=9, mtime=0)


def generate(path: str | os.PathLike | None = None) -> dict:
    """Read the installed TF and write the op-facts table to ``path`` (default: the shipped one).

    The write is atomic (temporary file + rename). Returns a summary dict: path, bytes, tf_version,
    ops, kernels, kernel counts per device type, device types seen/complete, ps ops (and which of
    them this TF does not register).
    """
    table = collect()
    data = encode(table)
    out = Path(path) if path is not None else default_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    from placeviz.io import atomic_write  # the one writer: devices, symlinks, umask (placeviz.io)

    atomic_write(out, data)
    return summarize(table, out, len(data))


def summarize(table: dict, path: Path | str, size: int) -> dict:
    per_dev: dict[str, int] = {}
    n_kernels = 0
    for facts in table["ops"].values():
        for dev, ks in facts.get("kernels", {}).items():
            per_dev[dev] = per_dev.get(dev, 0) + len(ks)
            n_kernels += len(ks)
    return {
        "path": str(path),
        "bytes": size,
        "tf_version": table["tf_version"],
        "generated_by": build_label(table),
        "ops": len(table["ops"]),
        "ops_without_kernels": sum(1 for f in table["ops"].values() if not f.get("kernels")),
        "kernels": n_kernels,
        "kernels_per_device_type": dict(sorted(per_dev.items())),
        "kernel_device_types_seen": table["kernel_device_types_seen"],
        "kernel_device_types_complete": table["kernel_device_types_complete"],
        "standard_ps_ops": table["standard_ps_ops"],
        "standard_ps_ops_not_registered": [o for o in table["standard_ps_ops"] if o not in table["ops"]],
    }


def format_summary(summary: dict) -> str:
    """Human-readable lines for ``placeviz ops generate``."""
    lines = [
        f"wrote {summary['path']} ({summary['bytes'] / 1024:.0f} KiB) for TensorFlow {summary['tf_version']}",
        f"  from: {summary['generated_by']}",
        f"  ops: {summary['ops']} ({summary['ops_without_kernels']} without any kernel)",
        f"  kernels: {summary['kernels']} ("
        + ", ".join(f"{d} {n}" for d, n in summary["kernels_per_device_type"].items())
        + ")",
        "  device types seen: " + ", ".join(summary["kernel_device_types_seen"]),
        "  complete in this build: "
        + ", ".join(summary["kernel_device_types_complete"])
        + " (a missing kernel of another type means 'unknown', not 'none')",
        "  default ps ops: " + ", ".join(summary["standard_ps_ops"]),
    ]
    if summary["standard_ps_ops_not_registered"]:
        lines.append(
            "  ps ops this TF does not register: " + ", ".join(summary["standard_ps_ops_not_registered"])
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m placeviz.ops_generate [-o PATH]``: the generator without placeviz's CLI deps, for
    a throwaway venv that has only TensorFlow (``PYTHONPATH=<repo> <venv>/bin/python -m ...``)."""
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="python -m placeviz.ops_generate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("-o", "--output", help=f"where to write the table (default: {default_path()})")
    args = parser.parse_args(argv)
    print(format_summary(generate(args.output)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
