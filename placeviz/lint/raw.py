"""The GraphDef as written, for the graph-integrity rules (PV0xx).

:class:`placeviz.graph.Graph` refuses a GraphDef with duplicate node names or dangling inputs,
and the analysis refuses an illegal cycle: right for every other command, but a linter must
*report* those problems as findings (exit 1), listing all of them, rather than stop at the first
one (exit 2). So the engine keeps a :class:`RawGraph` for every model: built from the loaded
``Graph`` when there is one (no extra pass over the protos), or straight from the protos when
loading failed, in which case :func:`read_graph_def` re-reads the file without validating it.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

from google.protobuf import message as pb_message
from google.protobuf import text_format

from placeviz.protos import GraphDef, MetaGraphDef, SavedModel, parse_text

TEXT_SUFFIXES = {".pbtxt", ".pbtx", ".prototxt", ".txt"}
# TF's rule for node names: a file whose "names" break it is corrupt, not a graph with findings.
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/>]*$")


class RawGraph:
    """Names, ops and devices per node id (GraphDef order), plus the protos; never validated.

    ``graph`` is the built :class:`placeviz.graph.Graph` when the GraphDef could be indexed
    (names unique, inputs resolve), else None. ``index`` maps a name to its *first* node.
    """

    def __init__(self, graph_def: GraphDef | None, graph=None, names=None, ops=None, devices=None):
        """``graph_def`` None: ``graph``'s, read from it only when a rule needs the whole message
        (:meth:`from_graph`)."""
        self._graph_def = graph_def
        self.graph = graph
        if names is None:
            nodes = self.graph_def.node
            names = [n.name for n in nodes]
            ops = [n.op for n in nodes]
            devices = [n.device for n in nodes]
        self.names: list[str] = names
        self.ops: list[str] = ops
        self.devices: list[str] = devices

    @classmethod
    def from_graph(cls, graph, graph_def: GraphDef | None = None) -> RawGraph:
        """Share the lists of a graph as loaded (not one derived from another: its NodeDefs are
        read from ``graph.node_def``): no pass over the protos. Without ``graph_def`` (its
        GraphDef), the GraphDef of a binary file is parsed only if a rule reads :attr:`graph_def`
        (see ``placeviz.io._load_unparsed``)."""
        return cls(graph_def, graph, graph.names, graph.ops, graph.devices)

    @property
    def graph_def(self) -> GraphDef:
        """The whole GraphDef (parsed on first use for a binary file: prefer :meth:`node_def` and
        :attr:`library`)."""
        if self._graph_def is None:
            self._graph_def = self.graph.graph_def
        return self._graph_def

    @property
    def library(self):
        """The GraphDef's ``FunctionDefLibrary`` (from the graph without the whole GraphDef)."""
        if self._graph_def is None:
            return self.graph.library
        return self._graph_def.library

    @cached_property
    def index(self) -> dict[str, int]:
        if self.graph is not None:
            return self.graph.index
        index: dict[str, int] = {}
        for i, name in enumerate(self.names):
            index.setdefault(name, i)
        return index

    def __len__(self) -> int:
        return len(self.names)

    def node_def(self, i: int):
        if self._graph_def is None:
            return self.graph.node_def(i)  # a loaded graph's: its device and inputs are current
        return self._graph_def.node[i]

    def input_strings(self, i: int) -> list[str]:
        return list(self.node_def(i).input)

    @cached_property
    def serialized_bytes(self) -> int:
        return self.graph_def.ByteSize()

    @cached_property
    def node_lengths(self):
        """The serialized size of each node's NodeDef in the file (indexable by node id), or None
        when unknown (a text file, a graph that could not be built): see
        :meth:`placeviz.graph.Graph.node_sizes`."""
        return self.graph.node_sizes() if self.graph is not None else None


def read_graph_def(spec: str, tag: str | None = None) -> GraphDef | None:
    """The GraphDef a model file holds, read without building a Graph; None if it cannot be read
    or its node names break TF's naming rule (then it is corrupt, not merely invalid).

    Used only after :func:`placeviz.io.load` failed, to tell a graph-integrity problem (reported
    as findings) from a corrupt file (still an error). Builders and samples are not re-run.
    """
    graph_def = _read_graph_def(spec, tag)
    if graph_def is None or not all(_NODE_NAME_RE.match(n.name) for n in graph_def.node):
        return None
    return graph_def


def _read_graph_def(spec: str, tag: str | None) -> GraphDef | None:
    path = Path(spec)
    try:
        if path.is_dir():
            return _saved_model_graph(path, tag)
        if not path.is_file():
            return None
        if path.name in ("saved_model.pb", "saved_model.pbtxt"):
            return _saved_model_graph(path.parent, tag)
        data = path.read_bytes()
    except OSError:
        return None
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return _from_text(data)
    for cls in (MetaGraphDef, GraphDef, SavedModel) if suffix == ".meta" else (GraphDef, MetaGraphDef, SavedModel):
        graph_def = _from_binary(cls, data, tag)
        if graph_def is not None:
            return graph_def
    return _from_text(data)


def _from_binary(cls, data: bytes, tag: str | None) -> GraphDef | None:
    msg = cls()
    try:
        msg.ParseFromString(data)
    except (pb_message.DecodeError, RuntimeError, ValueError):
        return None
    return _graph_def_of(msg, tag)


def _from_text(data: bytes) -> GraphDef | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    for cls in (GraphDef, MetaGraphDef, SavedModel):
        msg = cls()
        try:
            parse_text(text, msg, allow_unknown_extension=True)
        except text_format.ParseError:
            continue
        graph_def = _graph_def_of(msg, None)
        if graph_def is not None:
            return graph_def
    return None


def _graph_def_of(msg, tag: str | None) -> GraphDef | None:
    if isinstance(msg, GraphDef):
        return msg if msg.node else None
    if isinstance(msg, MetaGraphDef):
        return msg.graph_def if msg.graph_def.node else None
    metas = list(msg.meta_graphs)
    chosen = [m for m in metas if (tag or "train") in m.meta_info_def.tags] or (metas if len(metas) == 1 else [])
    return chosen[0].graph_def if chosen and chosen[0].graph_def.node else None


def _saved_model_graph(directory: Path, tag: str | None) -> GraphDef | None:
    for name in ("saved_model.pb", "saved_model.pbtxt"):
        file = directory / name
        if file.is_file():
            data = file.read_bytes()
            if name.endswith(".pbtxt"):
                saved = SavedModel()
                try:
                    parse_text(data.decode("utf-8", "replace"), saved, allow_unknown_extension=True)
                except text_format.ParseError:
                    return None
                return _graph_def_of(saved, tag)
            return _from_binary(SavedModel, data, tag)
    return None
