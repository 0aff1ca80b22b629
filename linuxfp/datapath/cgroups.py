"""The cgroup v2 hierarchy's root, where a cgroup program sees every process
(of this cgroup namespace). `ip netns exec` gives a fresh /sys without
/sys/fs/cgroup; then a private mount of cgroup2 (same hierarchy) is made for
as long as it takes to open the root, and dropped."""
from __future__ import annotations

import ctypes
import errno
import os
import tempfile

from .errors import BpfError
from .fds import OwnedFd
from .libbpf import libc

MNT_DETACH = 2
CGROUP_NS_INIT_INO = 0xEFFFFFFB     # the initial cgroup namespace's inode (proc_ns.h)


def in_initial_cgroup_namespace() -> bool:
    """Whether the cgroup root this process can open is the host's: in
    another cgroup namespace (a container's) it is that namespace's root,
    and a cgroup program there sees only the processes below it."""
    try:
        return os.stat("/proc/self/ns/cgroup").st_ino == CGROUP_NS_INIT_INO
    except OSError:
        return True       # no cgroup namespaces: one hierarchy for all


def _mounted_cgroup2() -> str | None:
    try:
        with open("/proc/thread-self/mountinfo") as mountinfo:
            for line in mountinfo:
                fields = line.split()
                separator = fields.index("-")
                if fields[separator + 1] == "cgroup2" and fields[3] == "/":
                    return fields[4]
    except (OSError, ValueError, IndexError):
        pass
    return None


def open_cgroup2_root() -> OwnedFd:
    """An fd of the cgroup v2 root directory (root needed to mount one)."""
    path = _mounted_cgroup2()
    if path is not None:
        return OwnedFd(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    scratch = tempfile.mkdtemp(prefix="linuxfp-cgroup2-")
    try:
        if libc().mount(b"none", scratch.encode(), b"cgroup2", 0, None) != 0:
            code = ctypes.get_errno() or errno.EPERM
            raise BpfError("mount cgroup2 (to attach a cgroup program)", code)
        try:
            return OwnedFd(os.open(scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        finally:
            libc().umount2(scratch.encode(), MNT_DETACH)
    finally:
        os.rmdir(scratch)
