"""Generate placeviz's TF proto descriptors from the installed TensorFlow (imports TF).

The static core (:mod:`placeviz.protos`) reads TF's graph formats without importing TensorFlow: it
builds its message classes from a ``FileDescriptorSet`` shipped in ``placeviz/data/tf_protos.binpb``.
This module writes that file. It reads TF's own compiled descriptors (the ``*_pb2`` modules TF
generates from ``tensorflow/core/framework/*.proto``, ``tensorflow/core/protobuf/*.proto`` and
``tsl/protobuf/*.proto``) and hard-codes none of their fields.

What is kept. The messages placeviz reads (:data:`ROOTS`) and everything they refer to, transitively
(a message's field types, a nested type's enclosing message, every nested type of a kept message):
a message that is kept is kept whole, so no field TF writes is ever an unknown field to placeviz.
Every other message and enum of those files is dropped, and so are the files nothing kept refers to
(the closure of ``SavedModel`` pulls in ``SavedObjectGraph`` and ``StructuredValue``, but not
``ConfigProto``, ``RunOptions``...). Files keep their names, package (``tensorflow``) and field
options; their file-level options (``go_package``, ``java_package``, ``cc_enable_arenas``: code
generation only) and source info (comments) are dropped, as are imports left unused by the pruning; an
import that only re-exports another file (``import public``) is replaced by that file.
The ``google/protobuf/*.proto`` files they import (``any.proto``...) are included as the installed
protobuf has them, so the set is self-contained.

Output: a serialized ``google.protobuf.FileDescriptorSet``, files in dependency order (each after
the files it imports, ties by name), written with deterministic serialization: regenerating under
the same TF and protobuf gives the same bytes (``tests/test_protos.py`` checks the shipped file).

Usage: ``python -m placeviz.protos_generate [-o PATH]`` (or ``make protos``). The file is written
with :func:`placeviz.io.atomic_write`, whose module loads the shipped set: if that file is missing
or broken, restore it from git before regenerating.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

# The messages placeviz reads, and the TF modules that register them in the default pool.
ROOTS = (
    "tensorflow.SavedModel",  # tensorflow/core/protobuf/saved_model.proto (MetaGraphDef, GraphDef...)
    "tensorflow.QueueRunnerDef",  # tensorflow/core/protobuf/queue_runner.proto
    "tensorflow.VariableDef",  # tensorflow/core/framework/variable.proto
    "tensorflow.OpList",  # tensorflow/core/framework/op_def.proto
    "tensorflow.GraphDebugInfo",  # tensorflow/core/framework/graph_debug_info.proto
    "tensorflow.TensorProto",  # tensorflow/core/framework/tensor.proto
)
TF_MODULES = (
    "tensorflow.core.protobuf.saved_model_pb2",
    "tensorflow.core.protobuf.queue_runner_pb2",
    "tensorflow.core.framework.variable_pb2",
    "tensorflow.core.framework.op_def_pb2",
    "tensorflow.core.framework.graph_debug_info_pb2",
    "tensorflow.core.framework.tensor_pb2",
)


def default_path() -> Path:
    """Where the shipped descriptor set lives (``placeviz/data/tf_protos.binpb``)."""
    return Path(__file__).resolve().parent / "data" / "tf_protos.binpb"


def _top_level(desc):
    while desc.containing_type is not None:
        desc = desc.containing_type
    return desc


def _kept_types(roots) -> set[str]:
    """Full names of the top-level messages and enums reachable from ``roots``."""
    kept: set[str] = set()
    todo = list(roots)
    while todo:
        top = _top_level(todo.pop())
        if top.full_name in kept:
            continue
        kept.add(top.full_name)
        if not hasattr(top, "fields"):  # an enum
            continue
        stack = [top]
        while stack:
            msg = stack.pop()
            stack.extend(msg.nested_types)
            for field in msg.fields:
                if field.message_type is not None:
                    todo.append(field.message_type)
                if field.enum_type is not None:
                    todo.append(field.enum_type)
    return kept


def _referenced_files(proto, package: str, pool) -> set[str]:
    """Names of the files defining the types that the fields of ``proto``'s messages refer to."""
    names: set[str] = set()
    stack = list(proto.message_type)
    while stack:
        msg = stack.pop()
        stack.extend(msg.nested_type)
        for field in msg.field:
            if field.type_name:
                full = field.type_name.lstrip(".")
                try:
                    desc = pool.FindMessageTypeByName(full)
                except KeyError:
                    desc = pool.FindEnumTypeByName(full)
                names.add(desc.file.name)
    names.discard(proto.name)
    return names


def build_descriptor_set(pool=None, roots=ROOTS) -> bytes:
    """The pruned ``FileDescriptorSet`` of ``roots`` from ``pool`` (TF's default pool), serialized."""
    from google.protobuf import descriptor_pb2, descriptor_pool  # noqa: PLC0415

    if pool is None:
        for module in TF_MODULES:
            importlib.import_module(module)
        pool = descriptor_pool.Default()
    kept = _kept_types([pool.FindMessageTypeByName(r) for r in roots])
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    deps: dict[str, set[str]] = {}
    todo = {pool.FindMessageTypeByName(r).file.name for r in roots}
    while todo:
        name = todo.pop()
        if name in files:
            continue
        proto = descriptor_pb2.FileDescriptorProto.FromString(pool.FindFileByName(name).serialized_pb)
        if proto.extension or proto.public_dependency or proto.weak_dependency:
            raise ValueError(f"{name}: extensions and public/weak imports are not supported")
        prefix = proto.package + "." if proto.package else ""
        messages = [m for m in proto.message_type if prefix + m.name in kept]
        enums = [e for e in proto.enum_type if prefix + e.name in kept]
        del proto.message_type[:], proto.enum_type[:], proto.service[:]
        proto.message_type.extend(messages)
        proto.enum_type.extend(enums)
        proto.ClearField("options")
        proto.ClearField("source_code_info")
        deps[name] = _referenced_files(proto, proto.package, pool)
        # Imports: the files that define the types used, directly (TF's
        # tensorflow/core/protobuf/error_codes.proto only re-exports tsl's with ``import public``).
        imports = [d for d in proto.dependency if d in deps[name]]
        imports += sorted(deps[name] - set(imports))
        del proto.dependency[:]
        proto.dependency.extend(imports)
        files[name] = proto
        todo |= deps[name] - files.keys()
    out = descriptor_pb2.FileDescriptorSet()
    done: set[str] = set()
    while len(done) < len(files):
        ready = sorted(n for n in files if n not in done and deps[n] <= done)
        if not ready:
            raise ValueError("import cycle among " + ", ".join(sorted(files.keys() - done)))
        for name in ready:
            out.file.append(files[name])
            done.add(name)
    return out.SerializeToString(deterministic=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m placeviz.protos_generate", description=__doc__.split("\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=default_path(), help="default: %(default)s")
    args = parser.parse_args(argv)
    data = build_descriptor_set()
    from placeviz.io import atomic_write  # noqa: PLC0415

    atomic_write(args.output, data)
    print(f"wrote {args.output} ({len(data)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
