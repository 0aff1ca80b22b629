"""bpffs: finding a bpffs that every LinuxFP invocation shares, and pinning into it.

``ip netns exec`` runs each command in a private mount namespace with a fresh
/sys, where /sys/fs/bpf is not bpffs; a bpffs mounted there would be a new,
private instance. Pins must instead go to the bpffs of the anchor process's
(PID 1's) mount namespace, reached through /proc/<pid>/root, so all
invocations see the same objects. See docs/datapath-binding.md.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import subprocess
import warnings

from .errors import BpfError, DependencyError
from .fds import OwnedFd, fd_kind
from .libbpf import BPF_FS_MAGIC, errno_of, lib, libc, statfs_magic

logger = logging.getLogger("linuxfp.datapath.pins")

DEFAULT_BPFFS = "/sys/fs/bpf"


class PrivateBpffsWarning(UserWarning):
    """Pins made now are visible only inside this mount namespace."""


def is_bpffs(path: str) -> bool:
    try:
        return statfs_magic(path) == BPF_FS_MAGIC
    except OSError:
        return False


def _mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None  # gone, or hidden from us (hardened /proc, sandboxed PID 1)


def _parent_pid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # "pid (comm) state ppid ...": comm may contain spaces and parentheses
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def anchor_pid() -> int:
    """The process whose mount namespace holds the host-wide bpffs.

    PID 1 when we may inspect it. Some sandboxes hide PID 1's /proc entries;
    then the outermost ancestor we can inspect stands in for it: an
    ``ip netns exec`` child reaches its launcher's namespace through it.
    """
    if _mount_namespace(1) is not None:
        return 1
    anchor = os.getpid()
    pid = _parent_pid(anchor)
    while pid > 1:
        if _mount_namespace(pid) is not None:
            anchor = pid
        pid = _parent_pid(pid)
    return anchor


def _mount_bpffs_here(path: str) -> None:
    if libc().mount(b"bpf", path.encode(), b"bpf", 0, b"mode=0700") != 0:
        code = ctypes.get_errno()
        if code == errno.EPERM:
            raise DependencyError(
                f"cannot mount bpffs at {path}: run LinuxFP as root (needs CAP_SYS_ADMIN)"
            )
        raise DependencyError(
            f"cannot mount bpffs at {path}: {os.strerror(code)}; the kernel needs "
            "CONFIG_BPF_SYSCALL=y, or mount it yourself: mount -t bpf bpf /sys/fs/bpf"
        )


def _mount_bpffs_in(anchor_pid: int, path: str) -> bool:
    """Mount bpffs at ``path`` inside anchor_pid's mount namespace via nsenter(1).

    A thread of a multi-threaded process cannot setns() into another mount
    namespace, so a child process does it.
    """
    command = ["nsenter", f"--mount=/proc/{anchor_pid}/ns/mnt", "mount", "-t", "bpf", "-o", "mode=0700", "bpf", path]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        logger.warning("nsenter not found (Debian package util-linux); cannot mount a shared bpffs")
        return False
    if completed.returncode != 0:
        logger.warning("%s failed: %s", " ".join(command), completed.stderr.strip())
        return False
    return True


def bpffs_root(anchor: int | None = None) -> str:
    """A bpffs directory whose pins are shared by every process of this host.

    With the anchor process from ``anchor_pid()`` (PID 1 normally):
    1. In the anchor's mount namespace: /sys/fs/bpf, mounted if needed.
    2. Elsewhere (e.g. under ``ip netns exec``): /proc/<anchor>/root/sys/fs/bpf if it is bpffs.
    3. Else mount bpffs there from inside the anchor's namespace (nsenter) and use it.
    4. Last resort: a bpffs at /sys/fs/bpf private to this mount namespace (warns).
    """
    anchor = anchor_pid() if anchor is None else anchor
    ours = _mount_namespace(os.getpid())
    theirs = _mount_namespace(anchor)
    if theirs is not None and theirs == ours:
        if not is_bpffs(DEFAULT_BPFFS):
            _mount_bpffs_here(DEFAULT_BPFFS)
        return DEFAULT_BPFFS
    anchored = f"/proc/{anchor}/root{DEFAULT_BPFFS}"
    if theirs is not None and is_bpffs(anchored):
        return anchored
    if theirs is not None and _mount_bpffs_in(anchor, DEFAULT_BPFFS) and is_bpffs(anchored):
        return anchored
    if not is_bpffs(DEFAULT_BPFFS):
        _mount_bpffs_here(DEFAULT_BPFFS)
    warnings.warn(
        f"using a bpffs at {DEFAULT_BPFFS} private to this mount namespace: objects pinned "
        "now are invisible to other LinuxFP invocations (run without 'ip netns exec', or "
        "mount -t bpf bpf /sys/fs/bpf on the host)",
        PrivateBpffsWarning,
        stacklevel=2,
    )
    return DEFAULT_BPFFS


def _require_bpffs_parent(path: str) -> None:
    parent = os.path.dirname(os.path.abspath(path)) or "/"
    if not is_bpffs(parent):
        raise BpfError(f"{parent} is not on bpffs (pin paths must be under bpffs_root())", errno.EINVAL)


def pin(fd: int, path: str) -> None:
    """Pin a map/prog/link fd at path (the parent directory must exist on bpffs)."""
    _require_bpffs_parent(path)
    result = lib().bpf_obj_pin(fd, path.encode())
    if result != 0:
        raise BpfError(f"bpf_obj_pin(fd {fd}, {path})", errno_of(result))


def get_pinned(path: str) -> int:
    """A new fd (caller owns it) for the object pinned at path."""
    fd = lib().bpf_obj_get(path.encode())
    if fd < 0:
        raise BpfError(f"bpf_obj_get({path})", errno_of(fd))
    return int(fd)


def unpin(path: str, missing_ok: bool = False) -> None:
    """Remove a pin; the object lives on while fds or attachments hold it."""
    if not os.path.lexists(path):
        if missing_ok:
            return
        raise BpfError(f"unpin {path}", errno.ENOENT)
    _require_bpffs_parent(path)
    try:
        os.unlink(path)
    except OSError as error:
        raise BpfError(f"unpin {path}", error.errno or errno.EIO) from error


def makedirs(path: str, mode: int = 0o700) -> None:
    """mkdir -p below a bpffs mount (refuses to create directories elsewhere)."""
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        current = os.path.dirname(current)
    if not is_bpffs(current):
        raise BpfError(f"makedirs {path}: {current} is not on bpffs", errno.EINVAL)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            pass


def remove_tree(path: str) -> None:
    """Unpin everything under a bpffs directory and remove the emptied directories."""
    if not os.path.lexists(path):
        return
    if not is_bpffs(path):
        if not os.path.lexists(path):
            return          # another remover took it meanwhile (see below)
        raise BpfError(f"remove_tree {path}: not on bpffs, refusing to delete", errno.EINVAL)
    if not os.path.isdir(path) or os.path.islink(path):
        _remove(os.unlink, path)
        return
    # Another process may be removing the same tree (a reclaim racing a
    # `linuxfp detach`): what it removed first is gone either way.
    for directory, subdirectories, files in os.walk(path, topdown=False):
        for name in files:
            _remove(os.unlink, os.path.join(directory, name))
        for name in subdirectories:
            _remove(os.rmdir, os.path.join(directory, name))
    _remove(os.rmdir, path)


def _remove(remove, path: str) -> None:
    try:
        remove(path)
    except FileNotFoundError:
        pass


_GET_FD_BY_ID = {"map": "bpf_map_get_fd_by_id", "prog": "bpf_prog_get_fd_by_id", "link": "bpf_link_get_fd_by_id"}


def open_by_id(kind: str, object_id: int) -> OwnedFd:
    """An owned fd for the live BPF object of `kind` ('map', 'prog', 'link')
    with this id (root only); BpfError once it is gone."""
    call = _GET_FD_BY_ID[kind]
    fd = getattr(lib(), call)(object_id)
    if fd < 0:
        raise BpfError(f"{call}({object_id})", errno_of(fd))
    return OwnedFd(fd)


def open_pinned(path: str, kind: str) -> OwnedFd:
    """An owned fd for the BPF object of `kind` ('map', 'prog', 'link') pinned at `path`."""
    owned = OwnedFd(get_pinned(path))
    if fd_kind(owned.fd) != kind:
        owned.close()
        raise BpfError(f"{path} is not a pinned BPF {'program' if kind == 'prog' else kind}", errno.EINVAL)
    return owned
