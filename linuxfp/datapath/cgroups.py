"""The cgroup v2 hierarchy's root, where a cgroup program sees every
process. In a cgroup namespace of its own (a container's) a process's view
is rooted at that namespace's cgroup, but a bind mount of the host's
hierarchy (a DaemonSet's hostPath /sys/fs/cgroup) still reaches the real
root: it is found by what it is (kernfs numbers a hierarchy's root cgroup
1), not by the path mountinfo shows for it ("/.." there). `ip netns exec`
gives a fresh /sys without /sys/fs/cgroup; then a private mount of cgroup2
is made for as long as it takes to open its root, and dropped (the cgroup
namespace's root: the real one only in the host's cgroup namespace)."""
from __future__ import annotations

import ctypes
import errno
import os
import re
import tempfile

from .errors import BpfError
from .fds import OwnedFd
from .libbpf import libc

MNT_DETACH = 2
HIERARCHY_ROOT_INO = 1      # kernfs gives a hierarchy's root node id (inode) 1


def is_hierarchy_root(fd: int) -> bool:
    """Whether `fd` (a cgroup v2 directory) is the hierarchy's root, below
    which every process of the machine lies: not a cgroup namespace's."""
    return os.fstat(fd).st_ino == HIERARCHY_ROOT_INO


def _cgroup2_mounts() -> list[tuple[str, str, int]]:
    """(mount point, the cgroup it shows as mountinfo roots it at this
    process's cgroup namespace, its device) of every cgroup2 mount in view."""
    found = []
    try:
        # (a mount point is bytes: one named in no encoding must not stop the read)
        with open("/proc/thread-self/mountinfo", errors="surrogateescape") as mountinfo:
            for line in mountinfo:
                fields = line.split()
                try:
                    separator = fields.index("-")
                    if fields[separator + 1] == "cgroup2":
                        major, minor = fields[2].split(":")
                        found.append((_unescaped(fields[4]), _unescaped(fields[3]),
                                      os.makedev(int(major), int(minor))))
                except (ValueError, IndexError):
                    continue
    except OSError:
        pass
    return found


def _unescaped(field: str) -> str:
    """mountinfo's octal escapes (space, tab, newline, backslash) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounted_cgroup2() -> str | None:
    """A mount point that shows the hierarchy's root, else one that shows
    this cgroup namespace's root; None when neither is mounted. (By the
    directory found there: inode 1 on the mount's own device, not on one
    mounted over it, as procfs or sysfs roots are inode 1 too.)"""
    namespace_root = None
    for path, root, device in _cgroup2_mounts():
        try:
            found = os.stat(path)
        except OSError:
            continue
        if found.st_dev != device:
            continue          # something else is mounted over it
        if found.st_ino == HIERARCHY_ROOT_INO:
            return path
        if root == "/" and namespace_root is None:
            namespace_root = path
    return namespace_root


def open_cgroup2_root() -> OwnedFd:
    """An fd of the cgroup v2 hierarchy's root directory where a mount in
    view shows it, else of this cgroup namespace's root (is_hierarchy_root
    tells which; mounting one needs CAP_SYS_ADMIN)."""
    path = mounted_cgroup2()
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
