"""``placeviz verify --servers FILE``: the user's own TF servers, checked before anything starts.

:func:`check_same_shape` makes sure the placement cluster (``--cluster``) and the servers
(``--servers``) have the same jobs and tasks; :func:`check_reachable` opens one TCP connection
to every address, in parallel, with a short timeout, so an address where no server listens is
a one-line error naming its job and task instead of a run that hangs until ``--timeout``.

Nothing here imports TensorFlow: it runs in the CLI process, before the coordinator.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from placeviz.errors import PlacevizError

CONNECT_TIMEOUT_S = 3.0


def _name(spec) -> str:
    return Path(spec.source).name if spec.source else "the cluster"


def check_same_shape(cluster, servers) -> None:
    """PlacevizError unless ``cluster`` and ``servers`` (ClusterSpecs) have the same jobs and tasks."""
    a, b = _name(cluster), _name(servers)
    if set(cluster.jobs) != set(servers.jobs):
        raise PlacevizError(f"--cluster {a} and --servers {b} must have the same jobs: "
                            f"{', '.join(cluster.jobs)} vs {', '.join(servers.jobs)}")
    for job in cluster.jobs:
        if cluster.task_indices(job) != servers.task_indices(job):
            raise PlacevizError(f"--cluster {a} and --servers {b} must have the same tasks: job {job} has "
                                f"{cluster.num_tasks(job)} in {a} and {servers.num_tasks(job)} in {b}")


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` (an optional ``grpc://`` is dropped) -> (host, port)."""
    text = address.removeprefix("grpc://")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("not host:port")
    return host.strip("[]"), int(port)


def _connect(address: str, timeout: float) -> str | None:
    """None when a TCP connection to ``address`` opens within ``timeout``; else why not."""
    try:
        host, port = split_address(address)
    except ValueError as e:
        return str(e)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as e:
        return e.strerror or type(e).__name__


def check_reachable(servers, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """PlacevizError naming the first task (in the file's order) whose address does not answer."""
    tasks = [(job, i, servers.task_address(job, i)) for job in servers.jobs for i in servers.task_indices(job)]
    if not tasks:
        return
    with ThreadPoolExecutor(max_workers=min(32, len(tasks))) as pool:
        errors = list(pool.map(lambda t: _connect(t[2], timeout), tasks))
    bad = [(t, e) for t, e in zip(tasks, errors, strict=True) if e is not None]
    if bad:
        (job, i, address), why = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise PlacevizError(f"--servers {_name(servers)}: no server answers for job {job} task {i} at {address} "
                            f"({why}){more}")
