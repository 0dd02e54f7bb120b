"""TF's ``Graph.unique_name``, written once: how TF names an op it creates.

tensorflow/python/framework/ops.py ``Graph.unique_name`` keeps one flat dict, ``_names_in_use``,
of every full name made so far (op names and name scopes), keyed by the name *lower-cased*
("for the sake of checking for names in use, we treat names as case insensitive"), with a counter
per key. Asked for ``name`` whose key has counter ``i > 0``, it tries ``<name>_<i>``,
``<name>_<i+1>``, ... and returns the first whose key is not in use, marking it, in the caller's
capitalisation. So the answer depends on every name made *before* the call, in creation order,
and ``init/noop`` makes ``init/NoOp`` unavailable.

Used by ``group``'s per-device NoOps (:mod:`placeviz.group`, for the setter replay and the
SyncReplicas rewrite) and by the SyncReplicas rewrite's own names (:mod:`placeviz.sync.rewrite`).
Never imports TensorFlow.
"""

from __future__ import annotations

__all__ = ["unique_name"]


def unique_name(used: dict[str, int], name: str, mark_as_used: bool = True) -> str:
    """``Graph.unique_name(name, mark_as_used)`` over ``used`` (TF's ``_names_in_use``: lower-cased
    full name -> counter), which it updates when ``mark_as_used``.

    A graph's existing names can be entered as ``used[name.lower()] = 1``: TF's counter for a key
    only runs ahead of the names ``<key>_<k>`` in use, never past a free one, so the next answer is
    the same as with the counters TF kept.
    """
    key = name.lower()
    i = used.get(key, 0)
    if mark_as_used:
        used[key] = i + 1
    if i == 0:
        return name
    base = key
    while key in used:
        key = f"{base}_{i}"
        i += 1
    if mark_as_used:
        used[key] = 1
    return f"{name}_{i - 1}"
