"""Where local TF servers may run: a private loopback-only network namespace, and child processes.

TF's gRPC server listens on the wildcard address whatever the cluster spec says (``0.0.0.0:port``
is hard-coded in ``grpc_server_lib.cc``), and it runs any graph it is sent. A local cluster must
therefore not be reachable from other hosts. :func:`enter_private_network` moves the calling
(still single-threaded) process into a fresh user + network namespace, where only a loopback
interface exists; every process it starts afterwards inherits the namespace. Both
:mod:`placeviz.verify.runtime_truth` and :mod:`placeviz.verify.coordinator` use it.

The rest are the small process helpers both need: a clean environment for the children (no
proxies, no GPUs unless asked, placeviz importable), free loopback ports, the interfaces a process
sees, and killing a child's whole process group.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
from pathlib import Path

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy", "HTTP_PROXY", "HTTPS_PROXY",
              "ALL_PROXY", "GRPC_PROXY")

REPO_ROOT = Path(__file__).resolve().parents[2]


def libc():
    return ctypes.CDLL(None, use_errno=True)


def enter_private_network() -> bool:
    """Move this (still single-threaded) process into its own user + network namespace.

    Inside, only a loopback interface exists (brought up here), so TF's wildcard listening sockets
    are reachable from 127.0.0.1 of this namespace only. Returns False when the kernel refuses
    (then the caller must say loudly that its servers are reachable).
    """
    import fcntl
    import struct

    lib = libc()
    uid, gid = os.getuid(), os.getgid()
    if lib.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        if lib.unshare(CLONE_NEWNET) != 0:  # already privileged: network namespace only
            return False
    else:
        with contextlib.suppress(OSError):
            Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifreq = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, ifreq))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 0x1, b""))  # SIOCSIFFLAGS, IFF_UP
    finally:
        s.close()
    return True


def interfaces() -> list[str]:
    """Network interfaces this process sees (from the kernel, not ``/sys``, which is not per netns)."""
    try:
        return sorted(name for _index, name in socket.if_nameindex())
    except OSError:
        return []


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now (a server may still lose the race: retry)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def child_env(onednn: bool = False, gpus: bool = False) -> dict[str, str]:
    """Environment for a child that runs TF: no proxies (gRPC would use them), placeviz importable."""
    env = dict(os.environ)
    for k in PROXY_VARS:
        env.pop(k, None)
    for k in ("no_proxy", "NO_PROXY", "no_grpc_proxy"):
        env[k] = "127.0.0.1,localhost"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not onednn:
        env["TF_ENABLE_ONEDNN_OPTS"] = "0"
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    root = str(REPO_ROOT)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def die_with_parent() -> None:
    """``preexec_fn`` for task processes: SIGKILL them when the process that started them dies."""
    with contextlib.suppress(Exception):
        libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (it was started with ``start_new_session=True``) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped does not count: it holds no port)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return "Z" not in line.split()[1]
    return True
