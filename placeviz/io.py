"""Loading models and writing outputs.

A MODEL argument may be:

* a binary GraphDef (``.pb``) or text GraphDef (``.pbtxt``, ``.pbtx``, ``.prototxt``, ``.txt``);
* a MetaGraphDef (``.meta``, binary or text), whose collections (variables, train_op, queue
  runners) are kept;
* a SavedModel directory (or its ``saved_model.pb``/``.pbtxt``): the training MetaGraph is chosen
  (tag ``train``), or the one named by ``tag``, or the only one;
* a Python builder ``path/to/file.py:function`` or ``package.module:function`` returning a
  ``tf.Graph``, ``GraphDef`` or ``MetaGraphDef``;
* ``sample:NAME``, a bundled sample model (see ``placeviz samples list``).

Only builders and samples import TensorFlow. Every failure is a :class:`LoadError` that names the
source and the problem in one line. A binary GraphDef whose bytes surely parse is not parsed by
the load: the graph IR is read from the bytes and ``Model.graph_def`` is parsed on first use;
:func:`_load_unparsed` says why that gives the same answers and the same errors. A model file is
untrusted input: it is read only if it is a regular file of at most ``placeviz --max-bytes``
(default 2 GiB), and a graph whose device strings name a task, replica or device index beyond
placeviz's bounds is refused before anything is sized by it (:mod:`placeviz.limits`). A builder, by contrast, is code: loading ``file.py:fn`` runs
``file.py`` with the user's permissions, as ``python file.py`` would. Inputs are opened read-only. Outputs never destroy: see the
"writing" section (an input is never overwritten, devices and FIFOs are written into, files and
directories are replaced atomically, the umask is honoured); each failure is an
:class:`OutputError`, one line.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import os
import re
import stat
import struct
import sys
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import message as pb_message

from placeviz import protos
from placeviz.errors import GraphError, LoadError, PlacevizError
from placeviz.graph import Graph
from placeviz.limits import InputRefused, device_bound_problem, read_regular_file
from placeviz.native import kernels
from placeviz.nodewire import field_spans
from placeviz.progress import doing, stage
from placeviz.protos import GraphDef, MetaGraphDef, SavedModel

TEXT_SUFFIXES = {".pbtxt", ".pbtx", ".prototxt", ".txt"}
_BUILDER_RE = re.compile(r"^(?P<target>[^:]+):(?P<func>[A-Za-z_][A-Za-z0-9_]*)$")
_DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_wire = kernels("_wire")  # the C reader (see placeviz.graph, placeviz.native)
# TF's rule for node names (NodeDef name regex in graph_def validation).
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/>]*$")


@dataclass
class Collections:
    """What a MetaGraphDef's collections say about the graph (empty for a bare GraphDef)."""

    global_variables: list[str] = field(default_factory=list)  # variable op names
    trainable_variables: list[str] = field(default_factory=list)
    local_variables: list[str] = field(default_factory=list)
    train_ops: list[str] = field(default_factory=list)
    queue_runners: list[dict] = field(default_factory=list)
    """QueueRunnerDefs: {"queue", "enqueue_ops", "close_op", "cancel_op", "closed_errors"} (op names)."""
    partitioned: dict[str, str] = field(default_factory=dict)  # part op name -> full variable name
    names: list[str] = field(default_factory=list)  # every collection key present

    @property
    def present(self) -> bool:
        return bool(self.names)


@dataclass
class Model:
    """A loaded model: the GraphDef, its MetaGraphDef if there was one, and the graph index."""

    source: str
    kind: str  # graphdef | graphdef-text | metagraph | savedmodel | builder | sample
    graph: Graph
    meta_graph: MetaGraphDef | None = None
    tags: tuple[str, ...] = ()
    collections: Collections = field(default_factory=Collections)
    per_task: bool = False
    """A builder whose function takes ``task_index``: each task's graph comes from its own call."""
    sources: dict = field(default_factory=dict)
    """Node name -> :class:`placeviz.sources.SourceLine`, the user's line that created it: from a
    builder's ``tf.Graph`` or the model's GraphDebugInfo (empty when neither is at hand)."""

    @property
    def graph_def(self) -> GraphDef:
        """The GraphDef: ``graph.graph_def``, which a binary file's load parses on first use (see
        :func:`_load_unparsed`). Commands that read a few nodes read them from ``graph``."""
        return self.graph.graph_def


# ---------------------------------------------------------------------------------- loading
def load(spec: str | os.PathLike, *, tag: str | None = None, task_index: int | None = None,
         keep_bytes: bool = False) -> Model:
    """Load MODEL (see the module docstring). Raises :class:`LoadError` on any failure.

    ``task_index``: for a builder whose function takes ``task_index`` (and ``is_chief``), the
    worker task whose graph to build (between-graph replication: every task's client builds its
    own graph); default 0, the chief. Other MODEL kinds ignore it. ``keep_bytes``: the graph keeps
    the file's bytes (``Graph.node_wire``, from which ``partition`` writes its GraphDefs); else
    they are let go after the load (the file's size in memory: 234 MB at 1M nodes).
    """
    with stage(f"loading {os.fspath(spec)}"):  # its steps: parsing, building the graph
        model = _load(spec, tag=tag, task_index=task_index)
    if not keep_bytes:
        model.graph.drop_bytes()
    return model


def _load(spec: str | os.PathLike, *, tag: str | None, task_index: int | None) -> Model:
    protos.check_backend()
    spec = os.fspath(spec)
    _note_input(spec)  # -o may not overwrite it (see "writing")
    if spec.startswith("sample:"):
        return _load_sample(spec)
    path = Path(spec)
    kind = _path_kind(spec, path)
    if kind == "dir":
        return _load_saved_model_dir(spec, path, tag)
    if kind is None:
        match = _BUILDER_RE.match(spec)
        if match and (match["target"].endswith(".py") or _DOTTED_RE.match(match["target"])):
            from placeviz.gcpause import gc_running

            with gc_running():
                return _load_builder(spec, match["target"], match["func"], task_index)
        raise LoadError(spec, "no such file or directory")
    if path.name in ("saved_model.pb", "saved_model.pbtxt"):
        return _load_saved_model_dir(spec, path.parent, tag, file=path)
    from placeviz.coverage import PY_WITHOUT_FUNCTION, checkpoint_problem

    problem = checkpoint_problem(spec)
    if problem is not None:
        raise LoadError(spec, problem)
    if path.suffix.lower() == ".py":
        raise LoadError(spec, PY_WITHOUT_FUNCTION)
    data = _read(spec, path)
    suffix = path.suffix.lower()
    if suffix == ".meta":
        meta = _parse_meta_graph(spec, data)
        return _with_debug_info(_from_meta_graph(spec, "metagraph", meta, wire=_graph_def_wire(data)), path)
    if suffix in TEXT_SUFFIXES:
        return _load_text(spec, data)
    return _load_binary_graph(spec, data)


def _path_kind(spec: str, path: Path) -> str | None:
    """"dir", "other" (anything else that exists, checked by ``_read``), or None (nothing there).

    ``os.stat`` rather than ``Path.is_dir``/``exists``: those raise on EACCES (a directory on the
    way without search permission), which must be one line naming the path, not an internal error.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise LoadError(spec, f"cannot read: {e.strerror or e}") from None
    return "dir" if stat.S_ISDIR(st.st_mode) else "other"


def model_from_proto(source: str, kind: str, obj) -> Model:
    """Wrap a GraphDef or MetaGraphDef (placeviz's or TensorFlow's classes) as a :class:`Model`."""
    full_name = obj.DESCRIPTOR.full_name
    if full_name.endswith(".MetaGraphDef"):
        meta = obj if isinstance(obj, MetaGraphDef) else _reparse(MetaGraphDef, obj)
        return _from_meta_graph(source, kind, meta)
    if full_name.endswith(".GraphDef"):
        graph_def = obj if isinstance(obj, GraphDef) else _reparse(GraphDef, obj)
        return _from_graph_def(source, kind, graph_def)
    raise LoadError(source, f"expected a GraphDef or MetaGraphDef, got {full_name}")


def model_from_bytes(source: str, data: bytes) -> Model:
    """A serialized GraphDef (or MetaGraphDef, SavedModel) as :func:`load` reads a file's bytes:
    the graph keeps them (``Graph.node_wire``), so partitions are written from them."""
    return _load_binary_graph(source, data)


def _reparse(cls, obj):
    out = cls()
    out.ParseFromString(obj.SerializeToString())
    return out


def _read(spec: str, path: Path) -> bytes:
    """The bytes of a model file: a regular file of at most ``placeviz --max-bytes`` (2 GiB,
    protobuf's own message limit, by default), refused with one line before it is read otherwise
    (``/dev/zero``, a FIFO, a terminal; see :func:`placeviz.limits.read_regular_file`)."""
    data = read_regular_file(path, spec)
    if not data:
        raise LoadError(spec, "the file is empty")
    return data


def _load_binary_graph(spec: str, data: bytes) -> Model:
    lazy = _load_unparsed(spec, data)
    if lazy is not None:
        return lazy
    doing(f"parsing {len(data):,} bytes")
    graph_def = GraphDef()
    try:
        graph_def.ParseFromString(data)
    except (pb_message.DecodeError, RuntimeError, ValueError) as e:
        # Maybe a MetaGraphDef or SavedModel saved under another name, or a text file.
        alternative = _try_other_formats(spec, data)
        if alternative is not None:
            return alternative
        raise LoadError(spec, f"not a valid binary GraphDef ({_decode_problem(e)}); "
                              "truncated or corrupt file?") from None
    if not graph_def.node:
        alternative = _try_other_formats(spec, data)
        if alternative is not None:
            return alternative
        raise LoadError(spec, "no nodes: not a GraphDef, or an empty graph")
    return _from_graph_def(spec, "graphdef", graph_def, wire=data)


# --------------------------------------------------------------- loading without parsing
LAZY_PARSE = True
"""Whether :func:`load` may skip ``GraphDef.ParseFromString`` (see :func:`_load_unparsed`);
tests set it to False to compare with the eager path."""

_SCALAR_KINDS = {  # FieldDescriptor.type -> the kind _wire.parses checks (see _wire.c, "parses")
    1: 2, 2: 3, 3: 1, 4: 1, 5: 1, 6: 2, 7: 3, 8: 1, 9: 4, 12: 5, 13: 1, 14: 1, 15: 3, 16: 2, 17: 1, 18: 1,
}
_MESSAGE_KIND, _REFUSE_KIND = 6, 7  # TYPE_MESSAGE; anything else (a group) makes parses() unsure
_schemas: dict[str, tuple[bytes, ...]] = {}


def _wire_schema(descriptor) -> tuple[bytes, ...]:
    """The message ``descriptor`` and every message it contains, as ``_wire.parses`` reads them:
    per message type (the root first), 8 bytes per field (number, kind, repeated, the index of
    its message type). From the same descriptors the classes are made of (:mod:`placeviz.protos`)."""
    cached = _schemas.get(descriptor.full_name)
    if cached is not None:
        return cached
    order, index, out = [descriptor], {descriptor.full_name: 0}, []
    for message in order:  # grows while it is walked: breadth first over the message types
        records = []
        for f in message.fields:
            sub = 0
            if f.type == f.TYPE_MESSAGE:
                sub = index.setdefault(f.message_type.full_name, len(order))
                if sub == len(order):
                    order.append(f.message_type)
            kind = _MESSAGE_KIND if f.type == f.TYPE_MESSAGE else _SCALAR_KINDS.get(f.type, _REFUSE_KIND)
            records.append(struct.pack("<IBBH", f.number, kind, f.is_repeated, sub))
        out.append(b"".join(records))
    _schemas[descriptor.full_name] = result = tuple(out)
    return result


def surely_parses(data, message_class) -> bool:
    """True when ``message_class().ParseFromString(data)`` surely succeeds (False: unsure, or the
    C reader is not built). See :func:`_load_unparsed` for what is checked."""
    return _wire is not None and _wire.parses(data, _wire_schema(message_class.DESCRIPTOR))


def _parse_later(message_class, data) -> Callable:
    """A function that parses ``data`` (bytes that surely parse) once, then lets go of them."""
    held = [data]

    def parse():
        message = message_class()
        message.ParseFromString(held.pop())
        return message

    return parse


def _load_unparsed(spec: str, data: bytes) -> Model | None:
    """The model of a binary GraphDef without ``GraphDef.ParseFromString``, or None: then the
    eager path runs (it gives every error, and reads the other formats a ``.pb`` may hold).

    Why: upb's parse of the whole file (0.18 s at 200k nodes, most of it the NodeDefs' ``attr``
    maps) is what every ratio of issue 18 is measured against, and most commands never read the
    parsed message: the graph IR is read from the bytes by the C reader (``Graph.from_wire``) and
    the attrs the placer needs too. ``Model.graph_def`` parses the bytes on first use, once; the
    passes that read some NodeDefs get them from their own slices of the bytes
    (``Graph.node_def``, ``Graph.prefetch_node_defs``: ``graph.WireNodeDefs``), and
    ``Graph.library``/``versions`` parse only their records.

    Why the answer is the same. The lazy path is taken only when ``_wire.parses`` says upb would
    accept the bytes as a GraphDef; then the eager path would have parsed them and built the same
    IR from the same bytes (``Graph(graph_def, wire=data)`` runs the same C reader), and any later
    parse of them cannot fail. The check walks every field of every nested message against TF's
    descriptors (the ones the classes are made of) and accepts a subset of what upb's decoder
    (``upb/wire/decode.c``) accepts, answering "unsure" for everything else:

    * every tag and length is read, bounds-checked and canonical enough for upb (a tag of at most
      5 bytes and not field 0, a length of at most 5 bytes below 2 GiB, a varint of at most 10
      bytes with no bits past 64), wire types 0, 1, 2 and 5 only: a group (3, 4; TF's protos
      have none) or wire types 6 and 7 is "unsure";
    * every known field has its declared wire type (packed or not for a repeated scalar; a packed
      fixed-size run a multiple of its size, a packed varint run whole varints), and each
      message-typed field (``attr`` values, ``TensorProto``, ``library``, ``versions``,
      ``debug_info``) is walked recursively, to a depth of 32 (upb's limit is 100);
    * every ``string`` field is valid UTF-8 as Python's strict decoder reads it (upb checks
      proto3 strings: ``name``, ``op``, ``input``, ``device``, attr keys, ``NameAttrList.name``,
      ...; proto2 ones are checked too, which upb would not do: that is only "unsure");
    * unknown fields are skipped as upb keeps them (bytes, not parsed), except groups.

    The walk costs about a third of upb's parse (no allocation). The C reader's own checks (a
    duplicate or empty name, an input naming no node, invalid UTF-8 in a name) send the load to
    the eager path too, which gives the exact error. Without the C kernels
    (``PLACEVIZ_NO_KERNELS``) the eager path always runs. ``tests/test_io_lazy.py`` corrupts a
    valid graph in each place the C reader does not read and checks the error is the eager one.
    """
    if not LAZY_PARSE or not surely_parses(data, GraphDef):
        return None
    doing(f"reading {len(data):,} bytes")
    graph = Graph.from_wire(data, _parse_later(GraphDef, data), key_attrs_for=_default_fact_key_attrs)
    if graph is None:  # the C reader declined (an empty graph, a duplicate name, ...)
        return None
    return _model_of(spec, "graphdef", graph,
                     debug_info=bool(field_spans(data, _GRAPH_DEF_DEBUG_INFO)))


_GRAPH_DEF_DEBUG_INFO = GraphDef.DESCRIPTOR.fields_by_name["debug_info"].number


def _try_other_formats(spec: str, data: bytes) -> Model | None:
    for cls, kind in ((MetaGraphDef, "metagraph"), (SavedModel, "savedmodel")):
        msg = cls()
        try:
            msg.ParseFromString(data)
        except (pb_message.DecodeError, RuntimeError, ValueError):
            continue
        if kind == "metagraph" and msg.graph_def.node and msg.HasField("meta_info_def"):
            return _from_meta_graph(spec, kind, msg, wire=_graph_def_wire(data))
        if kind == "savedmodel" and msg.meta_graphs and msg.meta_graphs[0].graph_def.node:
            return _choose_meta_graph(spec, msg, None, data)
    if _looks_like_text(data):
        try:
            return _load_text(spec, data)
        except LoadError:
            return None
    return None


def _looks_like_text(data: bytes) -> bool:
    head = data[:4096]
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head


def _load_text(spec: str, data: bytes) -> Model:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise LoadError(spec, "not a text proto (not UTF-8); is it a binary .pb?") from None
    kind = text_proto_kind(text)
    if kind == "savedmodel":
        saved = _parse_text(spec, text, SavedModel(), "SavedModel")
        return _choose_meta_graph(spec, saved, None)
    if kind == "metagraph":
        meta = _parse_text(spec, text, MetaGraphDef(), "MetaGraphDef")
        return _from_meta_graph(spec, "metagraph", meta)
    graph_def = _parse_text(spec, text, GraphDef(), "GraphDef")
    if not graph_def.node:
        raise LoadError(spec, "no nodes: an empty text GraphDef")
    return _from_graph_def(spec, "graphdef-text", graph_def)


def text_proto_kind(text: str) -> str | None:
    """Which graph message a text proto holds, from its first field name: ``savedmodel``,
    ``metagraph``, ``graphdef``, or None (another message: a label map's ``item``, a pipeline
    config's ``model``, an empty file). The field names are those of ``SavedModel``,
    ``MetaGraphDef`` and ``GraphDef`` (``tensorflow/core/protobuf/saved_model.proto``,
    ``meta_graph.proto``, ``tensorflow/core/framework/graph.proto``)."""
    first = _first_field_name(text)
    if first in _FIELDS["savedmodel"]:
        return "savedmodel"
    if first in _FIELDS["metagraph"]:
        return "metagraph"
    return "graphdef" if first in _FIELDS["graphdef"] else None


_FIELDS = {
    "savedmodel": {f.name for f in SavedModel.DESCRIPTOR.fields},
    "metagraph": {f.name for f in MetaGraphDef.DESCRIPTOR.fields},
    "graphdef": {f.name for f in GraphDef.DESCRIPTOR.fields},
}


def _first_field_name(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", line)
        return m.group(0) if m else ""
    return ""


def _parse_text(spec: str, text: str, msg, what: str):
    from google.protobuf import text_format  # text models only: a cold start reads binary ones

    try:
        protos.parse_text(text, msg, allow_unknown_extension=True)
    except text_format.ParseError as e:
        raise LoadError(spec, f"text {what} syntax error at {e}") from None
    return msg


def _parse_meta_graph(spec: str, data: bytes) -> MetaGraphDef:
    meta = MetaGraphDef()
    try:
        meta.ParseFromString(data)
    except (pb_message.DecodeError, RuntimeError, ValueError) as e:
        if _looks_like_text(data):
            return _parse_text(spec, data.decode("utf-8"), MetaGraphDef(), "MetaGraphDef")
        raise LoadError(spec, f"not a valid MetaGraphDef ({_decode_problem(e)}); "
                              "truncated or corrupt file?") from None
    if not meta.graph_def.node:
        raise LoadError(spec, "the MetaGraphDef holds no graph nodes")
    return meta


def _load_saved_model_dir(spec: str, directory: Path, tag: str | None, file: Path | None = None) -> Model:
    candidates = [file] if file else [directory / "saved_model.pb", directory / "saved_model.pbtxt"]
    for candidate in candidates:
        if candidate is not None and candidate.is_file():
            data = _read(spec, candidate)
            saved = SavedModel()
            if candidate.suffix == ".pbtxt":
                _parse_text(spec, data.decode("utf-8", "replace"), saved, "SavedModel")
            else:
                try:
                    saved.ParseFromString(data)
                except (pb_message.DecodeError, RuntimeError, ValueError) as e:
                    raise LoadError(spec, f"{candidate.name} is not a valid SavedModel "
                                          f"({_decode_problem(e)})") from None
            model = _choose_meta_graph(spec, saved, tag, data if candidate.suffix != ".pbtxt" else None)
            return _with_debug_info(model, directory)
    raise LoadError(spec, "a directory without saved_model.pb: not a SavedModel")


def _choose_meta_graph(spec: str, saved, tag: str | None, data: bytes | None = None) -> Model:
    """The MetaGraph of the SavedModel to load (``tag``, or the one tagged 'train'); ``data``: the
    SavedModel's bytes, if binary (the GraphDef is then read from them, see ``_graph_def_wire``)."""
    metas = list(saved.meta_graphs)
    if not metas:
        raise LoadError(spec, "the SavedModel holds no MetaGraphs")
    all_tags = [tuple(m.meta_info_def.tags) for m in metas]
    if tag is not None:
        chosen = [m for m, tags in zip(metas, all_tags, strict=True) if tag in tags]
        if not chosen:
            raise LoadError(spec, f"no MetaGraph with tag {tag!r}; tags present: {_fmt_tags(all_tags)}")
    else:
        chosen = [m for m, tags in zip(metas, all_tags, strict=True) if "train" in tags] or (
            metas if len(metas) == 1 else [])
        if not chosen:
            raise LoadError(spec, f"several MetaGraphs and none tagged 'train'; choose one with --tag "
                                  f"({_fmt_tags(all_tags)})")
    meta = chosen[0]
    if not meta.graph_def.node:
        raise LoadError(spec, "the chosen MetaGraph holds no graph nodes")
    wire = None
    if data is not None:
        spans = field_spans(data, 2)  # SavedModel.meta_graphs
        if len(spans) == len(metas):
            offset, length = spans[next(k for k, m in enumerate(metas) if m is meta)]
            wire = _graph_def_wire(memoryview(data)[offset:offset + length])
    return _from_meta_graph(spec, "savedmodel", meta, wire=wire)


def _with_debug_info(model: Model, path: Path) -> Model:
    """Add the source lines of the GraphDebugInfo TF saved next to the model (``NAME.debug`` of a
    ``.meta``, ``debug/saved_model_debug_info.pb`` of a SavedModel; see :mod:`placeviz.sources`).
    The file is optional metadata: one that is missing, too big or not a GraphDebugInfo adds nothing,
    and the model is linted as without it."""
    from placeviz.sources import debug_info_files, from_debug_info

    for candidate in debug_info_files(str(path), model.kind):
        info = _read_debug_info(candidate)
        if info is not None:
            for node, line in from_debug_info(info).items():
                model.sources.setdefault(node, line)
    return model


def _read_debug_info(path: Path):
    """A GraphDebugInfo file (binary, or text when TF was asked ``as_text=True``), or None."""
    try:
        if not path.is_file():
            return None
        data = read_regular_file(path, str(path), what="GraphDebugInfo")
    except (OSError, PlacevizError):
        return None
    from google.protobuf import text_format

    info = protos.GraphDebugInfo()
    try:
        if _looks_like_text(data):
            protos.parse_text(data.decode("utf-8"), info)
        else:
            info.ParseFromString(data)
    except (UnicodeDecodeError, text_format.ParseError, pb_message.DecodeError, RuntimeError, ValueError):
        return None
    return info


def _fmt_tags(all_tags) -> str:
    return "; ".join(",".join(t) or "(none)" for t in all_tags)


def _load_builder(spec: str, target: str, func_name: str, task_index: int | None = None) -> Model:
    """Run a user's builder function. Only here (and for samples) is TensorFlow imported.

    A function with a ``task_index`` parameter builds the graph of that worker task, as a TF1
    between-graph program's ``main`` does with ``FLAGS.task_index``; it gets ``is_chief`` too
    when it takes it (task 0 is the chief, as in ``MonitoredTrainingSession``).
    """
    if target.endswith(".py"):
        file = Path(target)
        if not file.is_file():
            raise LoadError(spec, f"builder file {target} does not exist")
        module_name = "placeviz_builder_" + re.sub(r"\W", "_", file.stem)
        mod_spec = importlib.util.spec_from_file_location(module_name, file)
        assert mod_spec is not None and mod_spec.loader is not None  # a .py file has a source loader
        module = importlib.util.module_from_spec(mod_spec)
        sys.path.insert(0, str(file.resolve().parent))
        try:
            mod_spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - any error in user code is a load error
            raise LoadError(spec, f"importing the builder failed: {type(e).__name__}: {e}") from None
        finally:
            sys.path.remove(str(file.resolve().parent))
    else:
        try:
            module = importlib.import_module(target)
        except Exception as e:  # noqa: BLE001
            raise LoadError(spec, f"cannot import module {target}: {type(e).__name__}: {e}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise LoadError(spec, f"{target} has no function {func_name}")
    kwargs = _task_kwargs(func, task_index or 0)
    try:
        result = func(**kwargs)
    except Exception as e:  # noqa: BLE001
        task = f" for task_index={kwargs['task_index']}" if "task_index" in kwargs else ""
        raise LoadError(spec, f"the builder raised {type(e).__name__}{task}: {e}") from None
    model = _from_tf_object(spec, "builder", result)
    model.per_task = "task_index" in kwargs
    return model


def _task_kwargs(func, task_index: int) -> dict:
    """``task_index``/``is_chief`` for the builder parameters of those names (none otherwise)."""
    import inspect

    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return {}
    out = {}
    if "task_index" in params:
        out["task_index"] = task_index
    if "is_chief" in params:
        out["is_chief"] = task_index == 0
    return out


def _from_tf_object(spec: str, kind: str, obj) -> Model:
    sources = {}
    if hasattr(obj, "as_graph_def") and hasattr(obj, "get_operations"):  # a tf.Graph
        import tensorflow as tf

        from placeviz.sources import from_tf_graph

        sources = from_tf_graph(obj)  # each op's creation stack: findings point at the builder's lines
        with obj.as_default():  # export_meta_graph refuses to run while eager execution is on
            obj = tf.compat.v1.train.export_meta_graph(graph=obj)
    if hasattr(obj, "DESCRIPTOR"):
        model = model_from_proto(spec, kind, obj)
        for node, line in sources.items():
            model.sources.setdefault(node, line)
        return model
    raise LoadError(spec, f"the builder returned {type(obj).__name__}; expected a tf.Graph, "
                          "GraphDef or MetaGraphDef")


def _load_sample(spec: str) -> Model:
    name = spec.split(":", 1)[1]
    from placeviz import sample_graphs

    if name not in sample_graphs.SAMPLES:
        known = ", ".join(sorted(sample_graphs.SAMPLES))
        raise LoadError(spec, f"unknown sample {name!r}; samples: {known}")
    try:
        meta = sample_graphs.build_meta_graph(name)
    except Exception as e:  # noqa: BLE001
        raise LoadError(spec, f"building the sample failed: {type(e).__name__}: {e}") from None
    return model_from_proto(spec, "sample", meta)


def _decode_problem(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]


# ------------------------------------------------------------------------ graph validation
def _from_graph_def(spec: str, kind: str, graph_def: GraphDef, meta=None, collections=None,
                    tags=(), wire=None) -> Model:
    """``wire``: the bytes ``graph_def`` was parsed from, if at hand: the IR is then read from them
    (faster, same result), with the attr keys the placer's op facts need (see ``Graph``)."""
    doing(f"building the graph of {len(graph_def.node):,} nodes")
    try:
        graph = Graph(graph_def, wire=wire, key_attrs_for=_default_fact_key_attrs if wire is not None else None)
    except Exception as e:
        # An invalid name is reported first: it usually means the file is not a GraphDef at all.
        _check_node_names(spec, [node.name for node in graph_def.node])
        if isinstance(e, GraphError):
            raise LoadError(spec, str(e)) from None
        raise
    return _model_of(spec, kind, graph, meta=meta, collections=collections, tags=tags,
                     debug_info=graph_def.HasField("debug_info"))


def _model_of(spec: str, kind: str, graph: Graph, *, meta=None, collections=None, tags=(),
              debug_info: bool = False) -> Model:
    """The checks every loaded graph goes through, and its Model. ``debug_info``: the GraphDef
    carries a GraphDebugInfo (read from ``graph.graph_def``, which it then parses)."""
    _check_node_names(spec, graph.names)
    _check_device_bounds(spec, graph)
    model = Model(source=spec, kind=kind, graph=graph, meta_graph=meta,
                  tags=tuple(tags), collections=collections or Collections())
    if debug_info:  # a GraphDebugInfo carried in the GraphDef itself
        from placeviz.sources import from_debug_info

        model.sources.update(from_debug_info(graph.graph_def.debug_info))
    return model


def _default_fact_key_attrs(ops: set[str]) -> dict[str, tuple[str, ...]]:
    """The attrs the default op table's facts depend on, for these ops (what the placer reads)."""
    from placeviz.ops import fact_key_attrs, load_op_table

    return fact_key_attrs(load_op_table(), ops)


def _check_node_names(spec: str, names: list[str]) -> None:
    """LoadError for the first node whose name breaks TF's rule (checked on the Python strings:
    a second pass over the protos would cost more than the regex)."""
    if _wire is not None and _wire.valid_node_names(names):  # the same rule, in C; False: ask the regex
        return
    match = _NODE_NAME_RE.match
    if all(map(match, names)):
        return
    i = next(i for i, name in enumerate(names) if not match(name))
    raise LoadError(spec, f"node #{i} has an invalid name {names[i][:60]!r}: not a GraphDef, or a corrupt one")


def _check_device_bounds(spec: str, graph: Graph) -> None:
    """InputRefused for the first node whose device names a task, replica or device index beyond
    placeviz's bounds (:mod:`placeviz.limits`): such a number would size a cluster later (every
    task below it gets an address), so it is refused here, before anything is allocated.
    Only the distinct device strings are looked at (a few per graph)."""
    for device in set(graph.devices):
        problem = device_bound_problem(device)
        if problem is not None:
            node = graph.names[graph.devices.index(device)]
            raise InputRefused(spec, f"node {node[:60]!r} has device {device[:80]!r}: {problem}")


def _from_meta_graph(spec: str, kind: str, meta: MetaGraphDef, wire=None) -> Model:
    """``wire``: the bytes ``meta.graph_def`` was parsed from, if at hand (see ``_from_graph_def``)."""
    collections = read_collections(meta)
    return _from_graph_def(spec, kind, meta.graph_def, meta=meta, collections=collections,
                           tags=meta.meta_info_def.tags, wire=wire)


def _graph_def_wire(meta_graph_bytes) -> memoryview | None:
    """The bytes of the ``graph_def`` field of a serialized MetaGraphDef, when it occurs once (twice
    would merge: then the IR is read from the parsed messages instead). Found with or without the
    C kernels, so that partitions are written from the same bytes either way."""
    spans = field_spans(meta_graph_bytes, 2)  # MetaGraphDef.graph_def
    if len(spans) != 1:
        return None
    offset, length = spans[0]
    return memoryview(meta_graph_bytes)[offset:offset + length]


def _op_name(tensor_or_op_name: str) -> str:
    name = tensor_or_op_name.lstrip("^")
    return name.split(":", 1)[0]


def read_collections(meta: MetaGraphDef) -> Collections:
    """Read the standard TF1 collections of a MetaGraphDef (variables, train_op, queue runners)."""
    out = Collections(names=sorted(meta.collection_def))
    coll = meta.collection_def

    def variables(key: str) -> list[str]:
        if key not in coll:
            return []
        names = []
        for raw in coll[key].bytes_list.value:
            var = protos.VariableDef()
            try:
                var.ParseFromString(raw)
            except pb_message.DecodeError:
                continue
            op = _op_name(var.variable_name)
            names.append(op)
            if var.HasField("save_slice_info_def") and var.save_slice_info_def.full_name:
                out.partitioned[op] = var.save_slice_info_def.full_name
        return names

    out.global_variables = variables("variables")
    out.trainable_variables = variables("trainable_variables")
    out.local_variables = variables("local_variables")
    if "train_op" in coll:
        out.train_ops = list(dict.fromkeys(_op_name(n) for n in coll["train_op"].node_list.value))
    if "queue_runners" in coll:
        for raw in coll["queue_runners"].bytes_list.value:
            qr = protos.QueueRunnerDef()
            try:
                qr.ParseFromString(raw)
            except pb_message.DecodeError:
                continue
            out.queue_runners.append({
                "queue": _op_name(qr.queue_name),
                "enqueue_ops": [_op_name(n) for n in qr.enqueue_op_name],
                "close_op": _op_name(qr.close_op_name),
                "cancel_op": _op_name(qr.cancel_op_name),
                "closed_errors": list(qr.queue_closed_exception_types),
            })
    return out


# ---------------------------------------------------------------------------------- writing
# Outputs never destroy (README, "Output files"). Every command writes through the functions
# below, so the rules hold in one place:
#
# * ``-o`` that is (same inode, through any symlink or hard link) a MODEL this run reads, or a file
#   inside an input SavedModel directory, is refused. The CLI remembers its inputs while a
#   :func:`guard_outputs` block is active (``placeviz.cli`` opens one per command).
# * ``-`` is standard output. ``/dev/stdout``, ``/dev/fd/N`` and ``/proc/self/fd/N`` are written to
#   that descriptor as a shell redirection would. An existing character device or FIFO
#   (``/dev/null``, a terminal, a named pipe) is opened and written into, never replaced by a
#   regular file (as root, ``os.replace`` onto ``/dev/full`` would replace the system's device
#   node). A block device or a socket is refused.
# * A regular file is replaced atomically: a temporary file in the same directory, written,
#   fsync'ed and renamed over the destination (POSIX rename(2) is atomic within a file system), so a
#   reader sees the old file or the new one and an interrupted run leaves the old one. A symlink is
#   followed: its target is replaced this way and the link stays; a stderr note says so. (``cp``,
#   shell ``>`` and ``install`` without ``-T`` write through a symlink too; replacing the link by a
#   regular file would silently break whatever the link is for.)
# * New files get ``0o666 & ~umask`` (the mode is given to open(2), which applies the umask and any
#   default ACL); a replaced file keeps its mode (and owner, when we may set it). A file we may not
#   write (read-only to us) is refused as the shell refuses ``>``, not replaced behind its back.
# * A directory output (``partition -o DIR``) is written to a fresh temporary directory next to
#   DIR and renamed into place as a whole; an earlier output of the same kind is swapped out
#   atomically (renameat2 RENAME_EXCHANGE, Linux 3.15+) and removed; any other non-empty
#   directory is refused.
# * An OS error (EACCES, EROFS, ENOSPC, ENAMETOOLONG, ...) is an :class:`OutputError`: one line
#   naming the path and the error, exit 2.

STDOUT = "-"
"""``-o -``: write to standard output."""

_FD_PATH_RE = re.compile(r"^/(?:dev/fd|proc/self/fd)/(\d+)$")
_DESCRIPTOR_PATHS = {"/dev/stdout": 1, "/dev/stderr": 2}
_TEMP_NAME_CHARS = 80  # of the destination's name kept in a temporary file's name (NAME_MAX is 255)
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


class OutputError(PlacevizError):
    """An output cannot be written, or writing it would destroy something: names the path."""

    def __init__(self, path, problem: str):
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {problem}")


@dataclass
class _Inputs:
    files: dict[tuple[int, int], tuple[str, str]] = field(default_factory=dict)
    """(st_dev, st_ino) of every input file -> (MODEL as given, its real path)."""
    trees: dict[str, str] = field(default_factory=dict)
    """Real path of every input directory (a SavedModel) -> MODEL as given."""
    modules: dict[str, str] = field(default_factory=dict)
    """Builder module name (``pkg.module:fn``) -> MODEL as given; its file is looked up when checked."""


_inputs: _Inputs | None = None


@contextmanager
def guard_outputs():
    """While active, every MODEL :func:`load` opens is remembered, and the writers below refuse to
    overwrite it. The CLI runs each command inside one; library callers may too."""
    global _inputs
    saved, _inputs = _inputs, _Inputs()
    try:
        yield _inputs
    finally:
        _inputs = saved


def note_input(path: str | os.PathLike, option: str) -> None:
    """Remember the file of ``option`` (``--cluster``, ``--servers``, ``--feeds``), an input other
    than MODEL: ``-o`` may not overwrite it either."""
    if _inputs is None:
        return
    try:
        st = os.stat(path)
    except OSError:
        return  # its reader reports it
    _inputs.files[(st.st_dev, st.st_ino)] = (f"{option} file {os.fspath(path)}", os.path.realpath(path))


def _note_input(spec: str) -> None:
    """Remember MODEL ``spec`` (a file, a SavedModel directory or a builder) as an input."""
    if _inputs is None or spec.startswith("sample:"):
        return
    path = Path(spec)
    if not os.path.lexists(path):
        match = _BUILDER_RE.match(spec)
        if match is None:
            return
        if match["target"].endswith(".py"):
            path = Path(match["target"])
        elif _DOTTED_RE.match(match["target"]):
            _inputs.modules[match["target"]] = spec
            return
    try:
        st = os.stat(path)
    except OSError:
        return  # load() reports it
    real = os.path.realpath(path)
    if stat.S_ISDIR(st.st_mode):
        _inputs.trees[real] = spec
        return
    _inputs.files[(st.st_dev, st.st_ino)] = (spec, real)
    if path.name in ("saved_model.pb", "saved_model.pbtxt"):  # the rest of the SavedModel too
        _inputs.trees[os.path.dirname(real)] = spec


def _input_files(inputs: _Inputs) -> dict[tuple[int, int], tuple[str, str]]:
    files = dict(inputs.files)
    for module_name, spec in inputs.modules.items():
        file = getattr(sys.modules.get(module_name), "__file__", None)
        if file:
            try:
                st = os.stat(file)
            except OSError:
                continue
            files[(st.st_dev, st.st_ino)] = (spec, os.path.realpath(file))
    return files


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def check_output(path: str | os.PathLike, *, directory: bool = False) -> None:
    """Raise :class:`OutputError` when writing ``path`` would overwrite an input of this run.

    Refused: the same file as an input MODEL (compared by device and inode after following
    symlinks, so a symlink or a hard link to the input is caught); an existing file inside an
    input SavedModel directory; with ``directory`` (the output replaces a whole directory), a
    directory that holds an input or lies inside an input directory. Without an active
    :func:`guard_outputs` nothing is known about inputs and nothing is refused.
    """
    if _inputs is None or os.fspath(path) == STDOUT:
        return
    shown = os.fspath(path)
    real = os.path.realpath(path)
    files = _input_files(_inputs)
    try:
        st = os.stat(real)
    except OSError:
        st = None
    if st is not None:
        hit = files.get((st.st_dev, st.st_ino))
        if hit is not None:
            what = f"the {hit[0]}" if hit[0].startswith("--") else (
                "the input model" + ("" if hit[0] == shown else f" {hit[0]}"))
            raise OutputError(shown, f"is {what} (the same file); refusing to overwrite it, choose another output")
        for tree, spec in _inputs.trees.items():
            if _inside(real, tree):
                raise OutputError(shown, f"is inside the input SavedModel {spec}; refusing to overwrite it, "
                                         "choose another output")
    if directory:
        for spec, input_real in [*files.values(), *((s, t) for t, s in _inputs.trees.items())]:
            if _inside(input_real, real):
                raise OutputError(shown, f"holds the input model {spec}; refusing to replace the directory, "
                                         "choose another output")


def proto_bytes(message, path: str | os.PathLike) -> bytes:
    """``message`` serialized for ``path``: text format for a text suffix, else binary.

    Binary output uses protobuf's deterministic serialization: map fields (a NodeDef's ``attr``)
    are written in key order. Without it the order follows the map's hash table, so two runs of
    ``place`` on the same model wrote different bytes. (Protobuf documents deterministic output
    as stable for one build of the library, not across versions: enough for reruns and caches.)
    Text format always prints map entries sorted by key.
    """
    if Path(path).suffix.lower() in TEXT_SUFFIXES:
        from google.protobuf import text_format

        return text_format.MessageToString(message, descriptor_pool=protos.POOL).encode("utf-8")
    return message.SerializeToString(deterministic=True)


def save_proto(message, path: str | os.PathLike) -> None:
    """Save a GraphDef/MetaGraphDef through :func:`atomic_write` (see :func:`proto_bytes`)."""
    atomic_write(path, proto_bytes(message, path))


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` (str: UTF-8) to the output ``path``, never destroying anything.

    ``-``: standard output. A descriptor path (``/dev/stdout``, ``/dev/fd/N``): that descriptor.
    An existing character device or FIFO: written into. Anything else: a regular file replaced
    atomically (a symlink's target; see the notes above). Raises :class:`OutputError` (one line)
    when ``path`` is an input or the OS refuses.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    shown = os.fspath(path)
    if shown == STDOUT:
        _write_stdout(payload)
        return
    fd = _descriptor_number(shown)
    if fd is not None:
        _write_descriptor(shown, fd, payload)
        return
    st = _stat(shown)
    if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        check_output(shown)
        _write_into(shown, payload)
        return
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(shown, "is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(shown, "is neither a regular file nor a character device or FIFO (a block device or "
                                 "socket): refusing to write it")
    check_output(shown)
    target = Path(os.path.realpath(shown))
    if os.path.islink(shown):
        _say(f"{shown} is a symbolic link: writing its target {target} (the link stays)")
    _replace_file(shown, target, payload, st)


def is_stream(path: str | os.PathLike) -> bool:
    """Whether the output ``path`` is a stream that is written into rather than replaced: ``-``,
    a descriptor path, or an existing character device or FIFO. (``sync`` picks a binary GraphDef
    for one without a suffix, as for ``-``.)"""
    shown = os.fspath(path)
    if shown == STDOUT or _descriptor_number(shown) is not None:
        return True
    try:
        mode = os.stat(shown).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _say(message: str) -> None:
    from placeviz.progress import notice  # the one stderr voice (escaping included)

    notice(f"note: {message}")


def _stat(shown: str) -> os.stat_result | None:
    try:
        return os.stat(shown)
    except FileNotFoundError:
        return None  # also a dangling symlink: its target is created
    except OSError as e:
        raise OutputError(shown, f"cannot write: {_os_problem(e)}") from None


def _os_problem(e: OSError) -> str:
    return e.strerror or str(e)


def _descriptor_number(shown: str) -> int | None:
    """The descriptor a path names (``/dev/stdout``, ``/dev/fd/3``, ``/proc/self/fd/3``), else None."""
    normal = os.path.normpath(os.path.abspath(shown))
    if normal in _DESCRIPTOR_PATHS:
        return _DESCRIPTOR_PATHS[normal]
    match = _FD_PATH_RE.match(normal)
    return int(match.group(1)) if match else None


def _write_stdout(payload: bytes) -> None:
    """Bytes to ``sys.stdout`` (its binary buffer); a reader that went away raises BrokenPipeError,
    which the CLI treats as the end of the output (``| head``)."""
    stream = sys.stdout
    stream.flush()
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text-only stream (some embedding): decode what we would have written
        stream.write(payload.decode("utf-8", "replace"))
    else:
        buffer.write(payload)
        buffer.flush()


def _write_descriptor(shown: str, fd: int, payload: bytes) -> None:
    if fd == 1:
        _write_stdout(payload)
        return
    if fd == 2:
        sys.stderr.flush()
    try:
        _write_all(fd, payload)
    except OSError as e:
        raise OutputError(shown, f"cannot write: {_os_problem(e)}") from None


def _write_into(shown: str, payload: bytes) -> None:
    """Write into an existing character device or FIFO: no O_CREAT, no O_TRUNC, no rename.

    A FIFO without a reader blocks in open(2) until one comes, as a shell redirection does."""
    try:
        fd = os.open(shown, os.O_WRONLY | os.O_CLOEXEC | os.O_NOCTTY)
        try:
            _write_all(fd, payload)
        finally:
            os.close(fd)
    except OSError as e:
        raise OutputError(shown, f"cannot write: {_os_problem(e)}") from None


def _write_all(fd: int, payload: bytes | bytearray | memoryview) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def _create_temp(directory: Path, name: str, *, mkdir: bool = False) -> tuple[int | None, Path]:
    """A new hidden file (or directory) next to ``name`` in ``directory``, created exclusively with
    mode 0o666 (0o777 for a directory) so that open(2)/mkdir(2) apply the umask."""
    base = name[:_TEMP_NAME_CHARS]
    for _ in range(100):
        tmp = directory / f".{base}.{os.urandom(4).hex()}.tmp"  # secrets.token_hex(4), without its import
        try:
            if mkdir:
                os.mkdir(tmp, 0o777)
                return None, tmp
            return os.open(tmp, _NEW_FILE_FLAGS, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(directory))


def _keep_owner_and_mode(fd: int, st: os.stat_result) -> None:
    """Give the new file the replaced file's owner (when allowed) and permission bits."""
    if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except OSError:
            pass  # only root (or the owner, for its own groups) may: the file becomes ours
    os.fchmod(fd, stat.S_IMODE(st.st_mode))


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: some file systems refuse)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_file(path: Path, payload: bytes | Iterable[bytes]) -> None:
    """Create the new file ``path`` (inside a temporary directory) with ``payload`` (bytes, or
    pieces of bytes written in order)."""
    _fill(os.open(path, _NEW_FILE_FLAGS, 0o666), payload)


def _fill(fd: int, payload: bytes | Iterable[bytes], st: os.stat_result | None = None) -> None:
    """Write ``payload`` (bytes, or pieces of bytes in order) to the new file ``fd``, fsync and
    close it; ``st``: the file it replaces."""
    try:
        if st is not None:
            _keep_owner_and_mode(fd, st)
        if isinstance(payload, (bytes, bytearray, memoryview)):
            _write_all(fd, payload)
        else:
            for piece in payload:
                _write_all(fd, piece)
                del piece  # before the next one is made
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_file(shown: str, target: Path, payload: bytes, st: os.stat_result | None) -> None:
    directory = target.parent
    if not directory.is_dir():
        raise OutputError(shown, f"the output directory {directory} does not exist")
    if st is not None and not os.access(target, os.W_OK, effective_ids=os.access in os.supports_effective_ids):
        raise OutputError(shown, "cannot write: Permission denied (the file is read-only to us)")
    tmp = None
    try:
        fd, tmp = _create_temp(directory, target.name)
        assert fd is not None  # a file (mkdir=False)
        _fill(fd, payload, st)
        os.replace(tmp, target)
        tmp = None
        _fsync_directory(directory)
    except OSError as e:
        raise OutputError(shown, f"cannot write: {_os_problem(e)}") from None
    finally:
        if tmp is not None:
            _remove(tmp)


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            import shutil

            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except OSError:
        pass


# ------------------------------------------------------------------------- directory outputs
_Content = bytes | str | Iterable[bytes]


def write_directory(path: str | os.PathLike, files: Mapping[str, _Content] | Iterable[tuple[str, _Content]], *,
                    replaceable: Callable[[Path], bool], kind: str) -> Path:
    """Write ``files`` (name -> content, or (name, content) pairs) as the directory ``path``, all at once.

    A content is a str, bytes, or an iterable of bytes (written one after the other). Pairs may
    come from a generator that makes each content as it is asked for, and an iterable content
    may make its pieces as they are asked for: each is written and dropped before the next is
    made, so a caller never holds all of them (``placeviz partition`` at a million nodes writes
    hundreds of MB).

    The files go into a fresh temporary directory next to ``path`` (same file system), which is
    then renamed into place: a reader sees the old directory or the complete new one, never a
    mix, and an interrupted run leaves the old one and no temporary directory (the temporary
    directory is removed on any exception; only SIGKILL or a power cut can leave a hidden
    ``.NAME.*.tmp`` behind). Every file is fsynced before the rename and the directories after
    it: without the file fsyncs a power cut could leave the renamed directory holding empty or
    short files (ext4 and XFS allocate data blocks lazily, and the rename's journal entry may
    reach the disk first; ext4's ``auto_da_alloc`` covers only a file renamed over another, see
    the kernel's ``Documentation/admin-guide/ext4.rst``), which is the mix this function
    promises never to show. They cost little next to the writes themselves
    (``benchmarks/write_profile.py``). A missing or empty ``path`` is simply replaced; a non-empty one is
    replaced only when ``replaceable(path)`` says it is an earlier output of this ``kind``
    (swapped atomically, the old one then removed), else refused. A symlink to a directory is
    followed (a note says so). Returns the directory written.
    """
    shown, target, st, existing = _directory_target(path, replaceable, kind)
    parent = target.parent
    tmp = None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _, tmp = _create_temp(parent, target.name, mkdir=True)
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))  # the replaced directory's mode
        for name, data in (files.items() if isinstance(files, Mapping) else files):
            _write_file(tmp / name, data.encode("utf-8") if isinstance(data, str) else data)
            del data  # before the generator makes the next one
        _fsync_directory(tmp)
        if existing:
            _swap_directories(tmp, target)  # tmp now holds the old output, removed below
        else:
            os.rename(tmp, target)  # onto nothing, or onto an empty directory (rename(2) allows it)
            tmp = None
        _fsync_directory(parent)
    except OSError as e:
        raise OutputError(shown, f"cannot write: {_os_problem(e)}") from None
    finally:
        if tmp is not None:
            _remove(tmp)
    return target


def check_directory_output(path: str | os.PathLike, *, replaceable: Callable[[Path], bool], kind: str) -> None:
    """The checks of :func:`write_directory`, without writing: to fail before a long computation."""
    _directory_target(path, replaceable, kind)


def _directory_target(path, replaceable, kind: str):
    shown = os.fspath(path)
    if shown == STDOUT:
        raise OutputError(shown, f"{kind} is a directory: it cannot go to standard output")
    target = Path(os.path.realpath(shown))
    st = _stat(shown)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise OutputError(shown, "exists and is not a directory")
    check_output(shown, directory=True)
    existing = False
    if st is not None:
        try:
            with os.scandir(target) as entries:
                existing = any(True for _ in entries)
        except OSError as e:
            raise OutputError(shown, f"cannot read the directory: {_os_problem(e)}") from None
        if existing and not replaceable(target):
            raise OutputError(shown, f"a non-empty directory that is not {kind}: refusing to replace it "
                                     "(choose a new or empty directory)")
    if st is not None and os.path.islink(shown):
        _say(f"{shown} is a symbolic link: writing its target {target} (the link stays)")
    return shown, target, st, existing


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _swap_directories(new: Path, old: Path) -> None:
    """Exchange two directories: atomically (:func:`_exchange`), or where the kernel, the C
    library or the file system cannot, by two renames with a roll-back (a crash between them
    leaves the old output under ``new``'s hidden name and no ``old``)."""
    if _exchange(new, old):
        return
    _, aside = _create_temp(old.parent, old.name, mkdir=True)
    os.rename(old, aside)  # onto the empty directory just made
    try:
        os.rename(new, old)
    except BaseException:
        os.rename(aside, old)
        raise
    os.rename(aside, new)  # the caller removes ``new``, now the old output


def _exchange(a: Path, b: Path) -> bool:
    """renameat2(a, b, RENAME_EXCHANGE) (Linux 3.15+, glibc 2.28+; rename(2) man page): both names
    swap in one step. False when unsupported here; OSError for any other failure."""
    import ctypes  # only when an output replaces a directory

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), os.fspath(b))
