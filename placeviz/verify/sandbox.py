"""Where local TF servers run: private user, network and mount namespaces, and child processes.

TF's gRPC server listens on the wildcard address whatever the cluster spec says (``0.0.0.0:port``
is hard-coded in ``grpc_server_lib.cc``), and it runs any graph it is sent; and the ops of a graph
run with the rights of the process (``WriteFile`` writes any path the user may write). So
:func:`enter_sandbox` moves the calling (still single-threaded) process into

* a fresh **network namespace** (with a user namespace, so no privilege is needed) where only a
  loopback interface exists: the servers are reachable from 127.0.0.1 of this namespace only;
* a fresh **mount namespace** where every mount is read-only (``mount_setattr(2)`` with
  ``MOUNT_ATTR_RDONLY`` and ``AT_RECURSIVE``, Linux 5.12; else a read-only bind remount of each
  mount in ``/proc/self/mountinfo``) except a bind mount of verify's temp dir, then a second user +
  mount namespace, in which the kernel locks those mounts (``mount_namespaces(7)``, "restrictions
  on mount namespaces": mounts that come from a more privileged namespace cannot be made writable
  or unmounted). Device files stay usable (``/dev/null``); a write anywhere else fails with
  ``EROFS`` ("Read-only file system").

Every process started afterwards (the ``--isolate`` task servers) inherits all of it.
:func:`enter_private_network` is the network part alone (:mod:`placeviz.verify.runtime_truth`).

The rest are the small process helpers: a clean environment for the children (no proxies, no GPUs
unless asked, placeviz importable), free loopback ports, the interfaces a process sees, the
processes that mention a path, and killing a child's whole process group.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

from placeviz import blas_threads

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
# <sys/mount.h>, <linux/mount.h>
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 0x400, 0x800, 0x1000, 0x4000
MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 1 << 18, 1 << 21, 1 << 24
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (syscalls added since 5.1 are unified)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
_KEPT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
               "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy", "HTTP_PROXY", "HTTPS_PROXY",
              "ALL_PROXY", "GRPC_PROXY")

REPO_ROOT = Path(__file__).resolve().parents[2]


def libc():
    return ctypes.CDLL(None, use_errno=True)


class SandboxError(Exception):
    """The kernel refused a namespace or a mount the sandbox needs (the message says which and why)."""


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(err)}")


def _map_ids(uid: int, gid: int) -> None:
    """Map this user to itself in the new user namespace (``user_namespaces(7)``)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _loopback_up() -> None:
    """Bring ``lo`` up (a new network namespace starts with it down): SIOCGIFFLAGS, SIOCSIFFLAGS."""
    import fcntl
    import struct

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifreq = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, ifreq))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 0x1, b""))  # SIOCSIFFLAGS, IFF_UP
    finally:
        s.close()


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(lib, path: str, attr_set: int, attr_clr: int, recursive: bool) -> int:
    """``mount_setattr(AT_FDCWD, path, AT_RECURSIVE?, {attr_set, attr_clr})``: 0, or the errno."""
    attr = _MountAttr(attr_set, attr_clr, 0, 0)
    lib.syscall.restype = ctypes.c_long
    ret = lib.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), os.fsencode(path),
                      ctypes.c_uint(AT_RECURSIVE if recursive else 0), ctypes.byref(attr),
                      ctypes.c_size_t(ctypes.sizeof(attr)))
    return 0 if ret == 0 else ctypes.get_errno()


def mounts() -> list[tuple[str, set[str]]]:
    """(mount point, per-mount options) of every mount this process sees (``/proc/self/mountinfo``,
    ``proc(5)``: field 5 is the mount point with octal escapes, field 6 the per-mount options)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
            out.append((point, set(fields[5].split(","))))
    return out


def _remount_read_only(lib, point: str, options: set[str]) -> None:
    """A read-only bind remount of one mount, keeping the flags a user namespace may not change
    (``mount(2)``: MS_REMOUNT | MS_BIND; the locked atime, nosuid, nodev, noexec flags)."""
    keep = sum(flag for name, flag in _KEPT_FLAGS.items() if name in options)
    if not options & {"noatime", "relatime"}:
        keep |= MS_STRICTATIME
    if lib.mount(None, os.fsencode(point), None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep, None) != 0:
        err = ctypes.get_errno()
        if os.path.exists(point):  # a mount point hidden by another mount cannot be reached anyway
            raise SandboxError(f"read-only remount of {point}: {os.strerror(err)}")


def _read_only(lib, legacy: bool, but: tuple[str, ...] = (), only: str | None = None) -> None:
    """Make every mount read-only except the mounts ``but`` (and what is under the first of them),
    or only the mount ``only``: ``mount_setattr`` (Linux 5.12), else each mount remounted."""
    if not legacy:
        if only is not None:
            err = _mount_setattr(lib, only, MOUNT_ATTR_RDONLY, 0, recursive=False)
        else:
            err = _mount_setattr(lib, "/", MOUNT_ATTR_RDONLY, 0, recursive=True)
            for path in but:
                if not err:
                    err = _mount_setattr(lib, path, 0, MOUNT_ATTR_RDONLY, recursive=False)
        if err not in (errno.ENOSYS, errno.EINVAL):  # else no mount_setattr: remount each
            if err:
                raise SandboxError(f"mount_setattr({only or '/'}): {os.strerror(err)}")
            return
    for point, options in mounts():
        if "ro" in options or (only is not None and point != only) or point in but or \
                (but and point.startswith(but[0].rstrip("/") + "/")):
            continue
        _remount_read_only(lib, point, options)


def enter_sandbox(writable: str | os.PathLike, *, legacy_remount: bool = False) -> dict:
    """Move this (still single-threaded) process into private user, network and mount namespaces in
    which only ``writable`` (verify's temp dir) can be written and only ``lo`` exists.

    Raises :class:`SandboxError` when the kernel refuses any step: verify then does not run (unless
    ``--no-isolation``). ``legacy_remount``: remount each mount instead of ``mount_setattr`` (what
    kernels before 5.12 need; tests use it to cover that path).

    ``/proc`` is made read-only last, once the second user namespace's id map is written there;
    then the working directory is entered again, so that a working directory in ``writable`` (the
    coordinator's) is the writable bind mount, not the read-only directory under it.

    Returns ``{"user_namespace": ..., "locked": ...}``: without a user namespace (a privileged
    process where user namespaces are refused) the mounts are read-only but not locked.
    """
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1:  # unshare(CLONE_NEWUSER) would fail with EINVAL; a privileged process would go on unlocked
        raise SandboxError(f"the process already runs {threads} threads (import nothing that starts threads, "
                           "such as numpy, before the sandbox)")
    lib = libc()
    uid, gid = os.getuid(), os.getgid()
    path = os.path.realpath(writable)
    userns = lib.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS) == 0
    if userns:
        _map_ids(uid, gid)
    else:
        err = ctypes.get_errno()
        if lib.unshare(CLONE_NEWNET | CLONE_NEWNS) != 0:  # privileged without user namespaces
            raise SandboxError(f"unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS): {os.strerror(err)}")
    _loopback_up()
    _check(lib.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making the mounts private")
    _check(lib.mount(os.fsencode(path), os.fsencode(path), None, MS_BIND | MS_REC, None), f"bind mount of {path}")
    _read_only(lib, legacy_remount, but=(path, "/proc"))
    if userns:  # lock the read-only mounts: a less privileged namespace cannot make them writable again
        _check(lib.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(CLONE_NEWUSER | CLONE_NEWNS) to lock the mounts")
        _map_ids(uid, gid)
    _read_only(lib, legacy_remount, only="/proc")
    # The working directory still points into the mount below the bind (now read-only): a relative
    # path written by the graph (``tf.io.write_file("out.txt")``) must land in the bind mount.
    with contextlib.suppress(OSError):
        os.chdir(os.getcwd())
    return {"user_namespace": userns, "locked": userns}


def enter_private_network() -> bool:
    """Move this (still single-threaded) process into its own user + network namespace.

    Inside, only a loopback interface exists (brought up here), so TF's wildcard listening sockets
    are reachable from 127.0.0.1 of this namespace only. Returns False when the kernel refuses
    (then the caller must say loudly that its servers are reachable).
    """
    lib = libc()
    uid, gid = os.getuid(), os.getgid()
    if lib.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        if lib.unshare(CLONE_NEWNET) != 0:  # already privileged: network namespace only
            return False
    else:
        _map_ids(uid, gid)
    _loopback_up()
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
    """Environment for a child that runs TF: no proxies (gRPC would use them), placeviz importable,
    numpy's BLAS threads as the user had them (:mod:`placeviz.blas_threads`)."""
    env = blas_threads.user_environment(dict(os.environ))
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


def naming(path: str) -> list[int]:
    """Pids of the processes (not this one) one of whose arguments is ``path`` or a path under it."""
    me, under = os.getpid(), path.rstrip("/") + "/"
    out: list[int] = []
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return out
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            args = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.decode("utf-8", "surrogateescape") in (path, under) or
               a.decode("utf-8", "surrogateescape").startswith(under) for a in args):
            out.append(int(entry.name))
    return out


def kill_naming(path: str) -> list[int]:
    """SIGKILL every process :func:`naming` ``path``; returns their pids."""
    pids = naming(path)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids


def state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from ``/proc/PID/stat`` (``proc(5)``: R, S, D, T stopped,
    t traced, Z zombie...), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split(" ", 1)[0]


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
