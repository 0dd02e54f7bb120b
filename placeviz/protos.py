"""The TF-compatible proto classes placeviz uses everywhere, without importing TensorFlow.

TensorBoard ships copies of TF's protos under ``tensorboard.compat.proto`` (package ``tensorboard``).
They are wire-compatible with TensorFlow's own, import in a few milliseconds (``import tensorflow``
costs seconds and ~500 MB), and can live in the same process as TF because their full names differ.
Two messages TensorBoard does not ship (``SavedModel`` and ``QueueRunnerDef``) are declared here
from their ``.proto`` definitions, on top of TensorBoard's ``MetaGraphDef``.

Parsing speed depends entirely on the protobuf backend: upb parses 140-190x faster than the
pure-Python one, so :func:`check_backend` warns when only the latter is present.
"""

from __future__ import annotations

import warnings

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import api_implementation
from tensorboard.compat.proto import (
    attr_value_pb2,
    graph_pb2,
    meta_graph_pb2,
    node_def_pb2,
    op_def_pb2,
    tensor_shape_pb2,
    types_pb2,
    variable_pb2,
)

GraphDef = graph_pb2.GraphDef
NodeDef = node_def_pb2.NodeDef
AttrValue = attr_value_pb2.AttrValue
MetaGraphDef = meta_graph_pb2.MetaGraphDef
CollectionDef = meta_graph_pb2.CollectionDef
VariableDef = variable_pb2.VariableDef
OpDef = op_def_pb2.OpDef
OpList = op_def_pb2.OpList
TensorShapeProto = tensor_shape_pb2.TensorShapeProto
DataType = types_pb2.DataType
GraphDebugInfo = message_factory.GetMessageClass(GraphDef.DESCRIPTOR.fields_by_name["debug_info"].message_type)
"""``GraphDef.debug_info`` (field 5): TF's ``GraphDebugInfo``, the ops' creation stacks (placeviz.sources)."""


def _declare_missing_messages():
    """Declare ``tensorboard.SavedModel`` and ``tensorboard.QueueRunnerDef`` (TF field numbers)."""
    pool = descriptor_pool.Default()
    name = "placeviz/extra_tf_protos.proto"
    try:
        pool.FindFileByName(name)
    except KeyError:
        fdp = descriptor_pb2.FileDescriptorProto(
            name=name,
            package="tensorboard",
            syntax="proto3",
            dependency=[meta_graph_pb2.DESCRIPTOR.name],
        )
        F = descriptor_pb2.FieldDescriptorProto
        saved = fdp.message_type.add(name="SavedModel")
        saved.field.add(name="saved_model_schema_version", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
        saved.field.add(
            name="meta_graphs", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
            type_name=".tensorboard.MetaGraphDef",
        )
        qr = fdp.message_type.add(name="QueueRunnerDef")
        qr.field.add(name="queue_name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        qr.field.add(name="enqueue_op_name", number=2, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
        qr.field.add(name="close_op_name", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        qr.field.add(name="cancel_op_name", number=4, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        # repeated tensorflow.error.Code (an enum): the same varints on the wire as int32
        qr.field.add(name="queue_closed_exception_types", number=5, type=F.TYPE_INT32, label=F.LABEL_REPEATED)
        pool.Add(fdp)
    saved_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorboard.SavedModel"))
    qr_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorboard.QueueRunnerDef"))
    return saved_cls, qr_cls


SavedModel, QueueRunnerDef = _declare_missing_messages()


def backend() -> str:
    """The protobuf backend in use: ``upb`` (fast), ``cpp`` or ``python`` (very slow)."""
    return api_implementation.Type()


_warned = False


def check_backend() -> None:
    """Warn once when protobuf runs on its pure-Python backend (parsing is 140-190x slower)."""
    global _warned
    if backend() == "python" and not _warned:
        _warned = True
        warnings.warn(
            "protobuf is using its pure-Python backend: parsing large graphs will be ~150x slower. "
            "Install a protobuf wheel with the upb backend (pip install --upgrade protobuf) and unset "
            "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION.",
            RuntimeWarning,
            stacklevel=2,
        )


# Byte sizes of DataType values (TF's DataTypeSize). Ref types (value + 100) have their base size.
# String, resource and variant have no fixed size: None.
DTYPE_SIZE: dict[int, int | None] = {
    types_pb2.DT_FLOAT: 4, types_pb2.DT_DOUBLE: 8, types_pb2.DT_INT32: 4, types_pb2.DT_UINT8: 1,
    types_pb2.DT_INT16: 2, types_pb2.DT_INT8: 1, types_pb2.DT_STRING: None, types_pb2.DT_COMPLEX64: 8,
    types_pb2.DT_INT64: 8, types_pb2.DT_BOOL: 1, types_pb2.DT_QINT8: 1, types_pb2.DT_QUINT8: 1,
    types_pb2.DT_QINT32: 4, types_pb2.DT_BFLOAT16: 2, types_pb2.DT_QINT16: 2, types_pb2.DT_QUINT16: 2,
    types_pb2.DT_UINT16: 2, types_pb2.DT_COMPLEX128: 16, types_pb2.DT_HALF: 2,
    types_pb2.DT_RESOURCE: None, types_pb2.DT_VARIANT: None, types_pb2.DT_UINT32: 4,
    types_pb2.DT_UINT64: 8,
}


def dtype_size(dtype: int) -> int | None:
    """Bytes per element of a DataType (ref types count as their base type); None if not fixed."""
    return DTYPE_SIZE.get(dtype - 100 if dtype > 100 else dtype)


def dtype_name(dtype: int) -> str:
    """TF's short dtype name: ``float32``, ``int64``, ``float32_ref``, ``resource``..."""
    ref = dtype > 100
    base = dtype - 100 if ref else dtype
    try:
        enum_name = types_pb2.DataType.Name(base)
    except ValueError:
        return f"dtype_{dtype}"
    short = _SHORT_DTYPE_NAMES.get(enum_name, enum_name[3:].lower())
    return short + ("_ref" if ref else "")


_SHORT_DTYPE_NAMES = {
    "DT_FLOAT": "float32", "DT_DOUBLE": "float64", "DT_HALF": "float16", "DT_COMPLEX64": "complex64",
    "DT_COMPLEX128": "complex128",
}
