"""Differential checks against TensorFlow itself (the only placeviz package allowed to import TF).

Only the modules that run in child processes import TF (``runtime_truth``'s child, ``coordinator``,
``task_server``); everything the CLI process uses is TF-free:

* ``runtime_truth``: where TF's runtime placed every node of one run (placement/partition tests);
* ``sandbox``: private loopback-only network namespace, child environment, ports, process groups;
* ``plan``, ``feeds``, ``prepare``: what a ``placeviz verify`` run executes (ops, fetches, feeds,
  per-worker graphs), decided statically from the pipeline;
* ``runner`` (parent) and ``coordinator`` / ``task_server`` (children): the run itself;
* ``checks``, ``optimizers``, ``compare``, ``report``: judging the evidence and reporting it.
"""
