"""``placeviz sync``: rewrite a plain training graph into SyncReplicasOptimizer's graph."""

from __future__ import annotations

from pathlib import Path

from placeviz.commands.output import progress
from placeviz.errors import PlacevizError
from placeviz.io import check_output, is_stream, load, save_proto
from placeviz.protos import MetaGraphDef
from placeviz.sync.rewrite import rewrite_sync

GRAPH_SUFFIXES = {".pb", ".pbtxt"}
META_SUFFIXES = {".meta"}


def output_kind(output: str, meta_graph: bool) -> str:
    """``"graph"`` or ``"meta"`` from ``-o``'s suffix: ``.pb``/``.pbtxt`` a GraphDef (a
    MetaGraphDef with ``--meta-graph``), ``.meta`` a MetaGraphDef; ``-`` (stdout), or a device or
    FIFO without a suffix, a binary GraphDef (a MetaGraphDef with ``--meta-graph``). Anything else
    is refused."""
    suffix = Path(output).suffix.lower()
    if not suffix and is_stream(output):
        return "meta" if meta_graph else "graph"
    if suffix in META_SUFFIXES:
        return "meta"
    if suffix in GRAPH_SUFFIXES:
        return "meta" if meta_graph else "graph"
    raise PlacevizError(f"-o {output}: unknown output suffix {suffix or '(none)'!r}; use .pb or .pbtxt "
                        "(a GraphDef; add --meta-graph for a MetaGraphDef) or .meta (a MetaGraphDef)")


def run(model_spec: str, output: str, replicas_to_aggregate: int, total_replicas: int | None = None,
        variable_averages: bool = False, tag: str | None = None, name: str = "sync_replicas",
        meta_graph: bool = False, is_chief: bool = True, num_tokens: int = -1) -> None:
    """Load MODEL, rewrite it (see :func:`placeviz.sync.rewrite.rewrite_sync`) and save it.

    ``-o`` decides the format (:func:`output_kind`); a MetaGraphDef keeps the input's collections
    (updated) when it had some, else holds only the graph. Raises
    :class:`placeviz.errors.PlacevizError` (one line) when the graph cannot be rewritten.
    """
    kind = output_kind(output, meta_graph)  # before loading: a bad -o fails fast
    model = load(model_spec, tag=tag)
    check_output(output)  # before rewriting: -o may not be the model (placeviz.io, "writing")
    source = model.meta_graph if model.meta_graph is not None else model.graph_def
    result = rewrite_sync(source, replicas_to_aggregate, total_replicas, variable_averages,
                          collections=model.collections if model.meta_graph is not None else None,
                          name=name, is_chief=is_chief, num_tokens=num_tokens)
    if kind == "meta":
        message = result.meta_graph
        if message is None:
            message = MetaGraphDef()
            message.graph_def.CopyFrom(result.graph_def)
    else:
        message = result.graph_def
    save_proto(message, output)
    progress(result.summary())
