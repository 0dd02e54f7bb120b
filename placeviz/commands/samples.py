"""``placeviz samples``: list and build the bundled sample models (building imports TensorFlow)."""

from __future__ import annotations

from pathlib import Path

from placeviz.commands.output import emit, progress
from placeviz.errors import PlacevizError
from placeviz.io import save_proto
from placeviz.progress import begin


def list_samples() -> None:
    from placeviz import sample_graphs

    width = max(len(name) for name in sample_graphs.SAMPLES)
    lines = [f"{name.ljust(width)}  {info.summary}" for name, info in sample_graphs.SAMPLES.items()]
    emit("\n".join(lines), None)


def build(name: str, output: str, options) -> None:
    """Build sample ``name`` with ``options`` (a ``placeviz.sample_graphs.options.BuildOptions``) into ``output``.

    ``.meta`` gets a MetaGraphDef (with collections), ``.pbtxt`` a text GraphDef, anything else a
    binary GraphDef.
    """
    from placeviz import sample_graphs

    if name not in sample_graphs.SAMPLES:
        raise PlacevizError(f"unknown sample {name!r}; samples: {', '.join(sorted(sample_graphs.SAMPLES))}")
    begin(f"building sample {name} with TensorFlow", unit="ops")  # counted by sample_graphs' graph scope
    try:
        meta = sample_graphs.build_meta_graph(name, options)
    except (ValueError, TypeError) as e:
        raise PlacevizError(f"sample {name}: cannot build with these options: {e}") from None
    begin(f"writing {output}")
    message = meta if Path(output).suffix == ".meta" else meta.graph_def
    save_proto(message, output)
    progress(f"wrote {output} ({len(meta.graph_def.node):,} nodes)")
