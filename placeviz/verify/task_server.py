"""One TF server per process (``placeviz verify --isolate``): ``python -m placeviz.verify.task_server``.

Started by the coordinator inside its private network namespace (so it inherits it), with
``PR_SET_PDEATHSIG`` so it dies with the coordinator. It starts ``tf.distribute.Server`` for one
task of ``cluster.json``, writes ``ready_<job>_<task>.json`` (pid, the interfaces it sees, start-up
time) and then serves until it is killed: TF servers cannot be stopped any other way.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(workdir: str, job: str, task: int, cpus: int = 1) -> None:
    t0 = time.monotonic()
    from placeviz.tflog import quiet_if_inherited
    from placeviz.verify import sandbox

    quiet_if_inherited()

    work = Path(workdir)
    spec = json.loads((work / "cluster.json").read_text())
    import tensorflow as tf

    t_import = time.monotonic() - t0
    config = tf.compat.v1.ConfigProto(device_count={"CPU": cpus})
    server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=task, protocol="grpc",
                                  config=config, start=True)
    ready = {"pid": os.getpid(), "interfaces": sandbox.interfaces(), "import_tf_s": round(t_import, 3),
             "start_s": round(time.monotonic() - t0, 3), "target": server.target}
    tmp = work / f".ready_{job}_{task}.json"
    tmp.write_text(json.dumps(ready))
    tmp.replace(work / f"ready_{job}_{task}.json")
    server.join()


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        print("usage: python -m placeviz.verify.task_server WORKDIR JOB TASK [CPUS]", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) == 5 else 1)
