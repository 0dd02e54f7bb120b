"""What placeviz covers, and the one-line answers for inputs it does not.

placeviz answers questions about a TF1-style *training* graph (``tf.compat.v1``, parameter
servers, ``replica_device_setter``): where each op of the training step runs and what crosses the
network. Some inputs look like models but are not such a graph; for them a confident answer would
be a wrong one, so placeviz says what the input is and what to give instead.

* A TF2 SavedModel (``tf.saved_model.save``, also Keras' ``model.export``) holds a
  *serving* graph: the model's ``tf.function`` bodies in the function library, called from a
  small outer graph of captured resource handles (``VarHandleOp``), with no optimizer and no train
  op (``tensorflow/python/saved_model/save.py`` builds it, ``_fill_meta_graph_def``; the
  ``object_graph_def`` records the Python objects). ``replica_device_setter`` never ran over such a
  graph and never will: placing it would describe a program nobody runs. Export the training
  graph instead (README, "Getting your graph out").
* A checkpoint (``model.ckpt-100.index``, ``model.ckpt-100.data-00000-of-00001``) holds variable
  values, not the graph: ``tf.compat.v1.train.Saver`` writes the graph next to it as ``.meta``.
* A ``.py`` file is code: placeviz runs it only as ``file.py:function`` (see :mod:`placeviz.io`).

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import re

SERVING_GRAPH = ("a TF2 SavedModel (tf.saved_model.save / Keras export) holds a serving graph: tf.function bodies called "
                 "with captured variables, no optimizer and no training step, which replica_device_setter never "
                 "places; placeviz analyses TF1 training graphs, so it is not placed, partitioned or linted as one. "
                 "Export the training graph instead, e.g. tf.compat.v1.train.export_meta_graph('train.meta') after "
                 "building the model and its train op under tf.compat.v1 graph mode (README: 'Getting your graph out')")

_CHECKPOINT_DATA = re.compile(r"\.data-\d+-of-\d+$")


def serving_graph_problem(model) -> str | None:
    """:data:`SERVING_GRAPH` when ``model`` (a :class:`placeviz.io.Model`) is a TF2 SavedModel's
    serving graph, else None.

    Judged by what ``tf.saved_model.save`` writes and a training export does not: an object graph
    (or a function library) and no train op (no ``train_op`` collection, no ``train`` tag). A TF1
    SavedModel written by ``tf.compat.v1.saved_model.Builder`` with a training MetaGraph is not one.
    """
    meta = model.meta_graph
    if model.kind != "savedmodel" or meta is None:
        return None
    if "train" in model.tags or model.collections.train_ops:
        return None
    tf2 = bool(meta.object_graph_def.nodes) or bool(model.graph.library.function)
    return SERVING_GRAPH if tf2 else None


def refuse_serving_graph(model) -> None:
    """Raise :class:`~placeviz.errors.LoadError` (exit 2, one line) for a serving graph: the
    commands that place, partition or run a graph have no answer for it."""
    problem = serving_graph_problem(model)
    if problem is not None:
        from placeviz.errors import LoadError

        raise LoadError(model.source, problem)


def checkpoint_problem(path: str) -> str | None:
    """The one line for a checkpoint file given as MODEL, or None when ``path`` is not one.

    ``tf.compat.v1.train.Saver.save`` writes ``PREFIX.index`` and ``PREFIX.data-K-of-N`` (the
    values) and ``PREFIX.meta`` (the MetaGraphDef, ``write_meta_graph=True`` by default).
    """
    if path.endswith(".index"):
        prefix = path[: -len(".index")]
    else:
        match = _CHECKPOINT_DATA.search(path)
        if match is None:
            return None
        prefix = path[: match.start()]
    return (f"a TF checkpoint holds variable values, not the graph: pass the .meta next to it ({prefix}.meta), "
            "or export one with tf.compat.v1.train.export_meta_graph")


PY_WITHOUT_FUNCTION = ("a Python file: name the function that builds the graph, as FILE.py:FUNCTION (it returns a "
                       "tf.Graph, GraphDef or MetaGraphDef; placeviz runs the file, as python would)")
