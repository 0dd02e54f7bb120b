"""SyncReplicasOptimizerTest.test3Workers1Backup: the chief's graph from ``get_workers(3, 2, workers)``.

Source: tensorflow/tensorflow, ``tensorflow/python/training/sync_replicas_optimizer_test.py`` (read
at commit 08df8c40b4376ed012fa3ba03ff3e3068d8d2a94), module function ``get_workers`` as ``test3Workers1Backup`` calls it
(``num_workers = 3``, ``replicas_to_aggregate = 2``, ``num_ps = 2``).

The graph-building code, shared with the other ``get_workers`` test methods, is in
``_tfsync.py`` (its docstring lists every change from the test). Here:

* ``SYNC`` also records ``"num_tokens": 3`` (the test's ``make_session_run_hook(is_chief,
  num_tokens=num_workers)``; TF's default -1 would mean ``replicas_to_aggregate`` tokens), a key
  beyond the ones the package contract lists.
* ``is_chief`` is ignored: only worker 0 (the chief) is built (``CHIEF_ONLY = False``).
"""

from programs import _tfsync

SOURCE = "tensorflow/tensorflow: tensorflow/python/training/sync_replicas_optimizer_test.py"

SETTER = None
# num_tokens: what the test passes to make_session_run_hook (num_workers), beyond the contract's keys.
SYNC = {"replicas_to_aggregate": 2, "total_replicas": 3, "num_tokens": 3}
CHIEF_ONLY = False


def build(placed, sync, is_chief=True):
    """Worker 0's graph of ``get_workers(3, 2, workers)``."""
    del is_chief  # only the chief (worker 0) is built
    return _tfsync.build_chief(3, 2, placed, sync)
