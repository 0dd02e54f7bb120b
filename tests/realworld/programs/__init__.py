"""Ports of public TF1 distributed-training programs that this repository did not write.

Each module here is one public program (or one group of scenarios from a TF test file), ported
minimally to TF 2.21 ``tf.compat.v1``: the program's structure, optimizer, device scopes and
``replica_device_setter``/``SyncReplicasOptimizer`` calls stay as written; only sizes shrink and
flags become constants. The module docstring names the source (repository and path) and lists
every change.

The contract a module fulfils (read by ``tests/realworld/corpus.py``):

``SOURCE``
    ``"owner/repo: path/in/repo.py"`` of the program ported.
``SETTER``
    The keyword arguments the program passes to ``tf.compat.v1.train.replica_device_setter``,
    exactly as it passes them (``ps_tasks``, ``ps_device``, ``worker_device``, ``merge_devices``,
    ``cluster`` as a ``{job: [addresses]}`` dict, ``ps_ops``, ``ps_strategy`` given as the string
    ``"greedy"`` for ``GreedyLoadBalancingStrategy(ps_tasks, byte_size_load_fn)``). Arguments the
    program leaves out are left out here too: TF's defaults apply.
``SYNC``
    ``None`` when the program does not use ``SyncReplicasOptimizer``; else the keyword arguments
    it passes: ``{"replicas_to_aggregate": R, "total_replicas": W, "name": ..., "variable_averages":
    True}`` (the last when it passes ``variable_averages=``/``variables_to_average=``); also
    ``"num_tokens"`` (``make_session_run_hook(num_tokens=...)``) and ``"init_tokens_on_every_task":
    True`` when the program calls ``get_init_tokens_op`` on every task, not only on the chief.
``SYNC_PROGRAM_CHANGES``
    Optional ``{"names": [...], "why": ...}``: nodes the program itself builds differently in sync
    mode (beyond wrapping the optimizer), counted apart by the sync-rewrite comparison.
``CHIEF_ONLY``
    ``True`` when the program builds something only ``if is_chief:`` (then ``build`` honours
    ``is_chief``); default ``False``.
``GPUS_PER_WORKER``, ``SOFT_PLACEMENT``
    Optional: the devices per worker task and ``allow_soft_placement`` the program runs with.
``build(placed, sync, is_chief=True) -> tf.compat.v1.MetaGraphDef``
    Builds the program in a fresh ``tf.Graph()`` (under ``as_default()``) and returns
    ``tf.compat.v1.train.export_meta_graph(graph=g, clear_devices=False)`` (or the program's own
    export). ``placed=True``: the model is built under the program's own
    ``tf.device(replica_device_setter(**SETTER))``; ``placed=False``: the same code with that
    device function left out (every explicit ``tf.device``/``colocate_with`` the program writes
    stays). ``sync=True``: the optimizer wrapped in ``SyncReplicasOptimizer(**SYNC)`` as the
    program does it (with its chief/worker ops: ``make_session_run_hook``,
    ``get_chief_queue_runner``, ``get_init_tokens_op`` when the program calls them);
    ``sync=False``: the plain optimizer, everything else the same. Programs whose ``SYNC`` is
    ``None`` ignore ``sync``.

Where the program's setter block ends is not declared: the corpus records TF's calls of the
device function while building (``corpus.py``) and passes it on as ``--setter-scope-end``.
"""
