"""Builders of real sample training graphs, made with TensorFlow's own tf.compat.v1 API.

Importing this package does not import TensorFlow; :func:`build_graph` does. Each sample module
(``placeviz.sample_graphs.<name>``) exposes ``build(options) -> tf.Graph``; the shared skeleton (device
setter scope, global step, SyncReplicasOptimizer, collections) is in ``placeviz.sample_graphs._common``.

>>> from placeviz.sample_graphs import SAMPLES, BuildOptions, build_graph
>>> graph = build_graph("mlp", BuildOptions(ps_tasks=2, sync_replicas=True))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from placeviz.sample_graphs.options import DEFAULT_OPTIONS, BuildOptions, SyncCollections

if TYPE_CHECKING:
    import tensorflow as tf
    from tensorflow.core.protobuf.meta_graph_pb2 import MetaGraphDef

__all__ = [
    "DEFAULT_OPTIONS",
    "SAMPLES",
    "BuildOptions",
    "SampleInfo",
    "SyncCollections",
    "build_graph",
    "build_meta_graph",
]


@dataclass(frozen=True)
class SampleInfo:
    name: str
    summary: str
    """One line."""
    module: str
    """Dotted name of the module whose ``build(options)`` makes the graph."""


def _sample(name: str, summary: str) -> tuple[str, SampleInfo]:
    return name, SampleInfo(name=name, summary=summary, module=f"placeviz.sample_graphs.{name}")


SAMPLES: dict[str, SampleInfo] = dict(
    [
        _sample(
            "mlp", "MLP classifier after mnist_replica.py (tf.Variable, GradientDescent, accuracy metric)"
        ),
        _sample(
            "inception", "Inception-style CNN: conv towers + concat, batch norm (UPDATE_OPS), Momentum, EMA"
        ),
        _sample(
            "wide_deep", "wide & deep recommender: partitioned embeddings, embedding_lookup(_sparse), Adagrad"
        ),
        _sample("lstm", "LSTM language model after ptb_word_lm.py: dynamic_rnn while loop, clipping, Adam"),
        _sample(
            "hashtable", "id-remapping MutableHashTable + DenseHashTable counts (inserts in the step), FTRL"
        ),
        _sample(
            "transformer", "Transformer LM stack (attention, layer norm, FFN, residuals), Adam; 10k+ nodes"
        ),
        _sample(
            "misconfigured",
            "deliberately wrong: variable outside the setter, colocation conflict, /gpu:0 pin",
        ),
    ]
)


def build_graph(name: str, options: BuildOptions = DEFAULT_OPTIONS) -> tf.Graph:
    """Builds sample ``name`` as a ``tf.Graph``. Raises ``KeyError(name)`` for an unknown name."""
    if name not in SAMPLES:
        raise KeyError(name)
    module = importlib.import_module(SAMPLES[name].module)
    return module.build(options)


def build_meta_graph(name: str, options: BuildOptions = DEFAULT_OPTIONS) -> MetaGraphDef:
    """Builds sample ``name`` and exports it as a MetaGraphDef, collections included."""
    import tensorflow as tf

    from placeviz.gcpause import gc_running

    with gc_running():  # TF's graph building, not placeviz's (placeviz.gcpause)
        graph = build_graph(name, options)
        with graph.as_default():  # export_meta_graph refuses to run eagerly
            return tf.compat.v1.train.export_meta_graph(graph=graph)
