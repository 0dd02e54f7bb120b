"""The TF-compatible proto classes placeviz uses everywhere, without importing TensorFlow.

Where they come from. ``placeviz/data/tf_protos.binpb`` is a ``FileDescriptorSet``: TF's own
descriptors of the messages placeviz reads (``GraphDef``, ``NodeDef``, ``AttrValue``,
``TensorProto``, ``FunctionDefLibrary``, ``GraphDebugInfo``, ``MetaGraphDef`` with
``CollectionDef``/``SaverDef``/``SignatureDef``/``AssetFileDef``, ``SavedModel``,
``QueueRunnerDef``, ``VariableDef``, ``OpDef``/``OpList``, ``DataType``...) and everything they refer
to, from ``tensorflow/core/framework/*.proto``, ``tensorflow/core/protobuf/*.proto`` and
``xla/tsl/protobuf/error_codes.proto``. :mod:`placeviz.protos_generate` writes it from the
installed TensorFlow (a kept message is kept whole, with TF's field numbers, types and options), and
``tests/test_protos.py`` checks that the shipped file is what the generator makes. Building the
classes from descriptors costs a few milliseconds at import; ``import tensorflow`` costs seconds and
~500 MB, and the copy of TF's protos in another package (TensorBoard's) cost an install of ~85 MB
(tensorboard, its data server, grpcio, pillow and their dependencies).

A private pool, TF's names. The descriptors go into their own ``DescriptorPool`` (:data:`POOL`),
not protobuf's default pool: TF registers the same file names (``tensorflow/core/framework/
graph.proto``...) in the default pool when it is imported, and two definitions of one name in one
pool are an error, whichever comes first. In a pool of their own, placeviz's messages keep TF's
package and full names (``tensorflow.GraphDef``), so everything that names a type reads as TF wrote
it: ``google.protobuf.Any`` type URLs (``type.googleapis.com/tensorflow.SavedUserObject``) and the
expanded ``[type.googleapis.com/tensorflow...] { ... }`` form in text format resolve in :data:`POOL`
(pass ``descriptor_pool=POOL`` to ``text_format.Parse``, see :func:`parse_text`). What differs from
TF: these are other classes, so a TF message and a placeviz one exchange bytes
(``SerializeToString``/``ParseFromString``), never objects (``CopyFrom`` between them raises).

Parsing speed depends entirely on the protobuf backend, not on the pool: upb parses messages of any
pool with the same C parser, 140-190x faster than the pure-Python backend, so :func:`check_backend`
warns when only the latter is present.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.internal import api_implementation
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

DESCRIPTOR_SET = Path(__file__).resolve().parent / "data" / "tf_protos.binpb"
"""The shipped ``FileDescriptorSet`` (written by :mod:`placeviz.protos_generate`)."""


def _load_pool(data: bytes) -> descriptor_pool.DescriptorPool:
    """A new pool holding the files of a serialized ``FileDescriptorSet`` (imports before importers)."""
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(data).file:
        pool.Add(file)
    return pool


POOL = _load_pool(DESCRIPTOR_SET.read_bytes())
"""placeviz's private pool of TF's descriptors (package ``tensorflow``)."""


def message_class(full_name: str) -> type:
    """The class of TF message ``full_name`` (``tensorflow.GraphDef``) in :data:`POOL`."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


def parse_text(text: str, message, **kwargs):
    """``text_format.Parse`` resolving ``Any`` type URLs in :data:`POOL` (where TF's names live)."""
    return text_format.Parse(text, message, descriptor_pool=POOL, **kwargs)


if TYPE_CHECKING:  # classes made at run time from descriptors: to a type checker, messages of any shape

    class _MessageType(type):
        # nested message classes (``AttrValue.ListValue``) are class attributes made at run time
        def __getattr__(cls, name: str) -> Any: ...

    _M = TypeVar("_M", bound="_Message")

    class _Message(metaclass=_MessageType):
        def __init__(self, *args: Any, **kwargs: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...
        @classmethod
        def FromString(cls: type[_M], data: bytes) -> _M: ...

    AssetFileDef = _Message
    AttrValue = _Message
    CollectionDef = _Message
    FunctionDefLibrary = _Message
    GraphDebugInfo = _Message
    GraphDef = _Message
    MetaGraphDef = _Message
    NodeDef = _Message
    OpDef = _Message
    OpList = _Message
    QueueRunnerDef = _Message
    SavedModel = _Message
    SaverDef = _Message
    SignatureDef = _Message
    TensorProto = _Message
    TensorShapeProto = _Message
    VariableDef = _Message
    VersionDef = _Message
else:
    GraphDef = message_class("tensorflow.GraphDef")
    NodeDef = message_class("tensorflow.NodeDef")
    AttrValue = message_class("tensorflow.AttrValue")
    TensorProto = message_class("tensorflow.TensorProto")
    TensorShapeProto = message_class("tensorflow.TensorShapeProto")
    FunctionDefLibrary = message_class("tensorflow.FunctionDefLibrary")
    VersionDef = message_class("tensorflow.VersionDef")
    GraphDebugInfo = message_class("tensorflow.GraphDebugInfo")
    """``GraphDef.debug_info`` (field 5): TF's ``GraphDebugInfo``, the ops' creation stacks (placeviz.sources)."""
    MetaGraphDef = message_class("tensorflow.MetaGraphDef")
    CollectionDef = message_class("tensorflow.CollectionDef")
    SignatureDef = message_class("tensorflow.SignatureDef")
    SaverDef = message_class("tensorflow.SaverDef")
    AssetFileDef = message_class("tensorflow.AssetFileDef")
    SavedModel = message_class("tensorflow.SavedModel")
    QueueRunnerDef = message_class("tensorflow.QueueRunnerDef")
    VariableDef = message_class("tensorflow.VariableDef")
    OpDef = message_class("tensorflow.OpDef")
    OpList = message_class("tensorflow.OpList")
DataType = EnumTypeWrapper(POOL.FindEnumTypeByName("tensorflow.DataType"))
"""TF's ``DataType`` enum: ``DataType.Value("DT_FLOAT") == 1``, ``DataType.Name(1) == "DT_FLOAT"``."""


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
    DataType.DT_FLOAT: 4, DataType.DT_DOUBLE: 8, DataType.DT_INT32: 4, DataType.DT_UINT8: 1,
    DataType.DT_INT16: 2, DataType.DT_INT8: 1, DataType.DT_STRING: None, DataType.DT_COMPLEX64: 8,
    DataType.DT_INT64: 8, DataType.DT_BOOL: 1, DataType.DT_QINT8: 1, DataType.DT_QUINT8: 1,
    DataType.DT_QINT32: 4, DataType.DT_BFLOAT16: 2, DataType.DT_QINT16: 2, DataType.DT_QUINT16: 2,
    DataType.DT_UINT16: 2, DataType.DT_COMPLEX128: 16, DataType.DT_HALF: 2,
    DataType.DT_RESOURCE: None, DataType.DT_VARIANT: None, DataType.DT_UINT32: 4,
    DataType.DT_UINT64: 8,
}


def dtype_size(dtype: int) -> int | None:
    """Bytes per element of a DataType (ref types count as their base type); None if not fixed."""
    return DTYPE_SIZE.get(dtype - 100 if dtype > 100 else dtype)


def dtype_name(dtype: int) -> str:
    """TF's short dtype name: ``float32``, ``int64``, ``float32_ref``, ``resource``..."""
    ref = dtype > 100
    base = dtype - 100 if ref else dtype
    try:
        enum_name = DataType.Name(base)
    except ValueError:
        return f"dtype_{dtype}"
    short = _SHORT_DTYPE_NAMES.get(enum_name, enum_name[3:].lower())
    return short + ("_ref" if ref else "")


_SHORT_DTYPE_NAMES = {
    "DT_FLOAT": "float32", "DT_DOUBLE": "float64", "DT_HALF": "float16", "DT_COMPLEX64": "complex64",
    "DT_COMPLEX128": "complex128",
}
