"""Deterministic synthetic input data per worker, from the placeholders themselves (numpy only).

Every worker gets different data (seed + task), so the average of R gradients is a real average and
a gradient counted twice or dropped shows in the values. Shapes come from the placeholder's
``shape`` attr; unknown dimensions take the size of the default value of a
``PlaceholderWithDefault`` (whose default also gives the value range and keeps one-hot labels
one-hot), or :data:`UNKNOWN_DIM`. Integer and boolean placeholders *with* a default keep it: they
are ids, labels, sparse indices or shapes, whose valid values random numbers would break (sparse
indices must stay sorted). Placeholders of types we cannot invent (strings, resources) are not fed
either: a ``PlaceholderWithDefault`` then uses its default, a plain ``Placeholder`` is reported as
needing ``--feeds``.
"""

from __future__ import annotations

import numpy as np

from placeviz.errors import PlacevizError
from placeviz.graph import Graph

UNKNOWN_DIM = 4

_NUMPY = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8, 9: np.int64,
          10: np.bool_, 17: np.uint16, 19: np.float16, 22: np.uint32, 23: np.uint64}


def _default_value(graph: Graph, name: str) -> np.ndarray | None:
    node = graph.node_def(graph.index[name])
    data = [x for x in node.input if not x.startswith("^")]
    if node.op != "PlaceholderWithDefault" or not data:
        return None
    src = data[0].split(":", 1)[0]
    if src not in graph.index:
        return None
    const = graph.node_def(graph.index[src])
    if const.op != "Const" or "value" not in const.attr:
        return None
    # verify always runs with TensorFlow: TF's own decoding of a TensorProto (MakeNdarray,
    # tensorflow/python/framework/tensor_util.py), handed the bytes of placeviz's message.
    import tensorflow as tf  # noqa: PLC0415
    from tensorflow.core.framework.tensor_pb2 import TensorProto  # noqa: PLC0415

    try:
        return np.asarray(tf.make_ndarray(TensorProto.FromString(const.attr["value"].tensor.SerializeToString())))
    except Exception:  # noqa: BLE001 - an odd constant: fall back to the declared shape
        return None


def _shape(graph: Graph, name: str, default: np.ndarray | None) -> list[int] | None:
    node = graph.node_def(graph.index[name])
    if "shape" not in node.attr or node.attr["shape"].shape.unknown_rank:
        return list(default.shape) if default is not None else None
    dims = [d.size for d in node.attr["shape"].shape.dim]
    out = []
    for k, d in enumerate(dims):
        if d >= 0:
            out.append(d)
        elif default is not None and default.ndim == len(dims):
            out.append(default.shape[k])
        else:
            out.append(UNKNOWN_DIM)
    return out


def synthesize(graph: Graph, names: list[str], worker: int, seed: int) -> tuple[dict[str, np.ndarray], list[str]]:
    """(tensor name -> array, placeholders left unfed) for one worker."""
    rng = np.random.default_rng([seed, worker])
    feeds: dict[str, np.ndarray] = {}
    unfed: list[str] = []
    for name in names:
        node = graph.node_def(graph.index[name])
        dtype = _NUMPY.get(node.attr["dtype"].type) if "dtype" in node.attr else None
        default = _default_value(graph, name)
        shape = _shape(graph, name, default)
        structured = default is not None and (np.issubdtype(dtype, np.integer) or dtype is np.bool_)
        if dtype is None or shape is None or structured:
            unfed.append(name)
            continue
        feeds[f"{name}:0"] = _values(rng, dtype, shape, default)
    return feeds, unfed


def _values(rng, dtype, shape: list[int], default: np.ndarray | None) -> np.ndarray:
    if dtype is np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        lo, hi = (int(default.min()), int(default.max())) if default is not None and default.size else (0, 1)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype)
    if default is not None and default.size and _one_hot(default) and len(shape) == 2:
        out = np.zeros(shape, dtype)
        out[np.arange(shape[0]), rng.integers(0, shape[1], size=shape[0])] = 1
        return out
    mean, std = (float(default.mean()), float(default.std()) or 1.0) if default is not None and default.size else (0.0, 1.0)
    return (rng.standard_normal(shape) * std + mean).astype(dtype)


def _one_hot(a: np.ndarray) -> bool:
    return a.ndim == 2 and bool(np.isin(a, (0, 1)).all()) and bool((a.sum(axis=1) == 1).all())


def load_npz(path: str, names: list[str], workers: int) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """``--feeds FILE.npz``: keys are tensor names (``x`` or ``x:0``) given to every worker, or
    ``worker<i>/x:0`` for one worker only. Returns one feed dict per worker and the placeholders
    no key covers (those that have defaults keep them)."""
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise PlacevizError(f"{path}: cannot read the feeds: {e}") from None
    common: dict[str, np.ndarray] = {}
    per: list[dict[str, np.ndarray]] = [{} for _ in range(workers)]
    with data:
        for key in data.files:
            head, sep, rest = key.partition("/")
            if sep and head.startswith("worker") and head[6:].isdigit():
                w = int(head[6:])
                if w < workers:
                    per[w][rest if ":" in rest else f"{rest}:0"] = data[key]
            else:
                common[key if ":" in key else f"{key}:0"] = data[key]
    out = [{**common, **p} for p in per]
    covered = set(common) | {k for p in per for k in p}
    missing = [n for n in names if f"{n}:0" not in covered]
    return out, missing
