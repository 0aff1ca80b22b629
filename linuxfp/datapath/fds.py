"""File descriptors owned by a Python object, closed exactly once.

BPF objects live as long as some fd (or pin, or attachment) refers to them;
every wrapper in this package owns its own fd (dup'ed where it came from
libbpf) so closing one wrapper never invalidates another.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class OwnedFd:
    """An fd closed by ``close()`` or, as a safety net, when garbage-collected."""

    __slots__ = ("_fd", "_finalizer", "__weakref__")

    def __init__(self, fd: int) -> None:
        if fd < 0:
            raise ValueError(f"invalid fd {fd}")
        self._fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)

    @classmethod
    def dup(cls, fd: int) -> OwnedFd:
        # F_DUPFD_CLOEXEC: a forked helper (ip, nsenter) must not inherit BPF fds.
        import fcntl

        return cls(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 0))

    @property
    def fd(self) -> int:
        if not self._finalizer.alive:
            raise ValueError("fd already closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        self._finalizer()


def fd_kind(fd: int) -> str:
    """'map', 'prog', 'link' or 'other', from the kernel's /proc fdinfo for fd."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii", errors="replace") as fdinfo:
            keys = {line.split(":", 1)[0] for line in fdinfo}
    except OSError:
        return "other"
    if "map_type" in keys:
        return "map"
    if "prog_type" in keys:
        return "prog"
    if "link_type" in keys:
        return "link"
    return "other"


class HasFd(Protocol):
    @property
    def fd(self) -> int: ...


def fd_of(target: int | HasFd) -> int:
    """The fd of a Program/Map wrapper or a raw fd; the caller keeps the wrapper alive."""
    return target if isinstance(target, int) else target.fd
