"""A BPF ring buffer read as a doorbell: a program outputs a record to wake
whoever polls the map's fd (epoll), and the reader discards the records."""
from __future__ import annotations

import ctypes
import errno
import os

from .errors import BpfError
from .libbpf import lib

# int (*ring_buffer_sample_fn)(void *ctx, void *data, size_t size)
_SAMPLE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


def _discard(_ctx, _data, _size) -> int:
    return 0


_DISCARD = _SAMPLE(_discard)


class Doorbell:
    """Over a BPF_MAP_TYPE_RINGBUF map, through a descriptor of its own (a
    duplicate of `map_fd`): it lives as long as the doorbell, whoever closes
    theirs."""

    def __init__(self, map_fd: int) -> None:
        self.map_fd = os.dup(map_fd)
        self._rb = lib().ring_buffer__new(self.map_fd, ctypes.cast(_DISCARD, ctypes.c_void_p), None, None)
        if not self._rb:
            code = ctypes.get_errno() or errno.EINVAL
            os.close(self.map_fd)
            raise BpfError(f"ring_buffer__new(map fd {map_fd})", code)

    def fileno(self) -> int:
        """Readable (EPOLLIN) while records wait."""
        return self.map_fd

    def drain(self) -> int:
        """Discard every waiting record; how many there were."""
        return max(0, lib().ring_buffer__consume(self._rb)) if self._rb else 0

    def close(self) -> None:
        if self._rb:
            lib().ring_buffer__free(self._rb)
            self._rb = None
            os.close(self.map_fd)
