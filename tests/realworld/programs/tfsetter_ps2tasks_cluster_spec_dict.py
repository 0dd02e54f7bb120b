"""DeviceSetterTest.testPS2TasksWithClusterSpecDict, one graph under ``replica_device_setter``.

Source: tensorflow/tensorflow, ``tensorflow/python/training/device_setter_test.py`` (read at
commit 22a71154e0d61730dd75ec2cf7c5cc108c9f80e5), method ``DeviceSetterTest.testPS2TasksWithClusterSpecDict``.

Changes from the test:

* TF-internal imports become public equivalents: ``ops.device`` -> ``tf.compat.v1.device`` (TF 2's
  ``tf.device`` refuses device functions), ``device_setter.replica_device_setter`` ->
  ``tf.compat.v1.train.replica_device_setter``, ``server_lib.ClusterSpec`` -> ``tf.train.ClusterSpec``.
* Built in a fresh ``tf.Graph()`` (the test builds in the test case's default graph under
  ``@test_util.run_deprecated_v1``) and exported with ``export_meta_graph(clear_devices=False)``.
* The test's ``assertDeviceEqual`` checks stay as comments (the devices the setter gives).
* ``placed=False``: the same code without the outer ``replica_device_setter`` scope; the explicit
  ``ops.device`` scopes the test writes inside it stay.
* No loss or optimizer is added: the test's graph is kept as it is (``SYNC = None``).
* ``variables.Variable(x)`` -> ``tf.Variable(x)``, its public name in TF 2.21: the V2 class, which
  builds a ``ResourceVariable`` (``VarHandleOp``, ``AssignVariableOp`` initializer,
  ``Read/ReadVariableOp``) in TF 2.21 whether v2 behaviour is on or off -- what the test itself
  builds today. (When the test was written it made ref ``VariableV2``s; the ref-variable graphs of
  this corpus come from the ``tfsync_*`` ports.)
* ``SETTER``: the test passes ``self._cluster_spec.as_dict()``; ``build`` does the same from
  ``tf.train.ClusterSpec(_CLUSTER)``.
"""

import contextlib

import tensorflow as tf

SOURCE = "tensorflow/tensorflow: tensorflow/python/training/device_setter_test.py"

_CLUSTER = {
    "ps": ["ps0:2222", "ps1:2222"],
    "worker": ["worker0:2222", "worker1:2222", "worker2:2222"],
}

SETTER = {"cluster": _CLUSTER}
SYNC = None
CHIEF_ONLY = False


def build(placed, sync, is_chief=True):
    """testPS2TasksWithClusterSpecDict in a fresh graph; ``placed`` adds the test's replica_device_setter."""
    del sync, is_chief  # no SyncReplicasOptimizer, nothing chief-only
    g = tf.Graph()
    with g.as_default():
        setter = (
            tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
                cluster=tf.train.ClusterSpec(_CLUSTER).as_dict()))
            if placed else contextlib.nullcontext())
        with setter:
            v = tf.Variable([1, 2])
            w = tf.Variable([2, 1])
            a = v + w
            # assertDeviceEqual("/job:ps/task:0", v.device)
            # assertDeviceEqual("/job:ps/task:0", v.initializer.device)
            # assertDeviceEqual("/job:ps/task:1", w.device)
            # assertDeviceEqual("/job:ps/task:1", w.initializer.device)
            # assertDeviceEqual("/job:worker", a.device)
            del a
        # Exported inside as_default(): export_meta_graph refuses to run while eager is on.
        return tf.compat.v1.train.export_meta_graph(graph=g, clear_devices=False)
