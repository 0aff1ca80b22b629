"""BPF maps by fd: typed CRUD over raw bytes, per-CPU values, batch dumps, pins."""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Sequence
from types import TracebackType

from . import pins
from .errors import BpfError
from .fds import OwnedFd, fd_kind
from .info import map_info
from .libbpf import ENOTSUPP, BpfMapBatchOpts, BpfMapCreateOpts, BPF_ANY, errno_of, lib, new_opts

# enum bpf_map_type values we treat specially
BPF_MAP_TYPE_HASH = 1
BPF_MAP_TYPE_ARRAY = 2
BPF_MAP_TYPE_PERCPU_HASH = 5
BPF_MAP_TYPE_PERCPU_ARRAY = 6
BPF_MAP_TYPE_LRU_HASH = 9
BPF_MAP_TYPE_LRU_PERCPU_HASH = 10
BPF_MAP_TYPE_LPM_TRIE = 11
BPF_MAP_TYPE_ARRAY_OF_MAPS = 12
BPF_MAP_TYPE_DEVMAP = 14
BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE = 21
BPF_MAP_TYPE_DEVMAP_HASH = 25

PERCPU_MAP_TYPES = frozenset(
    {
        BPF_MAP_TYPE_PERCPU_HASH,
        BPF_MAP_TYPE_PERCPU_ARRAY,
        BPF_MAP_TYPE_LRU_PERCPU_HASH,
        BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE,
    }
)

_BATCH_ENTRIES = 256
_WRITE_BATCH = 4096
_BATCH_UNSUPPORTED = frozenset({errno.EINVAL, errno.EOPNOTSUPP, ENOTSUPP})


def possible_cpus() -> int:
    count = lib().libbpf_num_possible_cpus()
    if count <= 0:
        raise BpfError("libbpf_num_possible_cpus", -count if count < 0 else errno.EINVAL)
    return int(count)


def _round8(size: int) -> int:
    return (size + 7) & ~7


class Map:
    """One BPF map. Owns its fd; keys and values are raw ``bytes`` of the map's sizes.

    Per-CPU maps carry one value per possible CPU: use ``lookup_percpu`` /
    ``update_percpu`` / ``items_percpu``; the single-value calls refuse them.
    """

    def __init__(self, owned_fd: OwnedFd) -> None:
        self._owned = owned_fd
        info = map_info(owned_fd.fd)
        self.id: int = info["id"]
        self.name: str = info["name"]
        self.type: int = info["type"]
        self.key_size: int = info["key_size"]
        self.value_size: int = info["value_size"]
        self.max_entries: int = info["max_entries"]
        self.map_flags: int = info["map_flags"]
        self.pinned_path: str | None = None

    # --- construction -------------------------------------------------------

    @classmethod
    def from_fd(cls, fd: int) -> Map:
        """A new Map owning a duplicate of ``fd`` (the caller keeps its own)."""
        if fd_kind(fd) != "map":
            raise BpfError(f"fd {fd} is not a BPF map", errno.EINVAL)
        return cls(OwnedFd.dup(fd))

    @classmethod
    def from_pinned(cls, path: str) -> Map:
        bpf_map = cls(pins.open_pinned(path, "map"))
        bpf_map.pinned_path = path
        return bpf_map

    @classmethod
    def from_id(cls, map_id: int) -> Map:
        return cls(pins.open_by_id("map", map_id))

    @classmethod
    def create(
        cls, map_type: int, key_size: int, value_size: int, max_entries: int, name: str = "",
        inner: Map | None = None,
    ) -> Map:
        """A new map not tied to any object (e.g. shared state created up
        front); `inner`: for an array or hash of maps, a map like the ones
        it will hold."""
        opts = new_opts(BpfMapCreateOpts, inner_map_fd=inner.fd) if inner is not None else None
        fd = lib().bpf_map_create(map_type, name.encode()[:15] or None, key_size, value_size, max_entries,
                                  ctypes.byref(opts) if opts is not None else None)
        if fd < 0:
            raise BpfError(f"bpf_map_create({name or map_type})", errno_of(fd))
        return cls(OwnedFd(fd))

    # --- properties -----------------------------------------------------------

    @property
    def fd(self) -> int:
        return self._owned.fd

    @property
    def closed(self) -> bool:
        return self._owned.closed

    @property
    def is_percpu(self) -> bool:
        return self.type in PERCPU_MAP_TYPES

    @property
    def _percpu_stride(self) -> int:
        return _round8(self.value_size)

    # --- single-value CRUD ----------------------------------------------------

    def _key(self, key: bytes) -> ctypes.Array[ctypes.c_char]:
        if len(key) != self.key_size:
            raise ValueError(f"map {self.name}: key is {len(key)} bytes, map wants {self.key_size}")
        return ctypes.create_string_buffer(bytes(key), self.key_size or 1)

    def _refuse_percpu(self, call: str) -> None:
        if self.is_percpu:
            raise TypeError(f"map {self.name} is per-CPU: use {call}_percpu()")

    def _lookup_raw(self, key: bytes, value_bytes: int) -> bytes | None:
        key_buffer = self._key(key)
        value = ctypes.create_string_buffer(value_bytes)
        result = lib().bpf_map_lookup_elem(self.fd, key_buffer, value)
        if result != 0:
            code = errno_of(result)
            if code == errno.ENOENT:
                return None
            raise BpfError(f"lookup in map {self.name}", code)
        return value.raw

    def lookup(self, key: bytes) -> bytes | None:
        self._refuse_percpu("lookup")
        return self._lookup_raw(key, self.value_size)

    def lookup_percpu(self, key: bytes) -> list[bytes] | None:
        """One value per possible CPU (each ``value_size`` bytes), or None if absent."""
        stride = self._percpu_stride
        raw = self._lookup_raw(key, stride * possible_cpus())
        if raw is None:
            return None
        return _split_percpu(raw, stride, self.value_size)

    def _update_raw(self, key: bytes, value: bytes, flags: int) -> None:
        key_buffer = self._key(key)
        value_buffer = ctypes.create_string_buffer(value, len(value) or 1)
        result = lib().bpf_map_update_elem(self.fd, key_buffer, value_buffer, flags)
        if result != 0:
            raise BpfError(f"update in map {self.name}", errno_of(result))

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        self._refuse_percpu("update")
        if len(value) != self.value_size:
            raise ValueError(
                f"map {self.name}: value is {len(value)} bytes, map wants {self.value_size}"
            )
        self._update_raw(key, value, flags)

    def update_percpu(self, key: bytes, values: bytes | Sequence[bytes], flags: int = BPF_ANY) -> None:
        """Set every CPU's value: one ``bytes`` for all CPUs, or one per possible CPU."""
        cpus = possible_cpus()
        per_cpu = [values] * cpus if isinstance(values, bytes) else list(values)
        if len(per_cpu) != cpus:
            raise ValueError(f"map {self.name}: {len(per_cpu)} values for {cpus} possible CPUs")
        stride = self._percpu_stride
        for value in per_cpu:
            if len(value) != self.value_size:
                raise ValueError(
                    f"map {self.name}: value is {len(value)} bytes, map wants {self.value_size}"
                )
        packed = b"".join(value.ljust(stride, b"\0") for value in per_cpu)
        self._update_raw(key, packed, flags)

    def update_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        """Write many entries with BPF_MAP_UPDATE_BATCH (one system call per
        _WRITE_BATCH entries) where the map type has it, else one by one. Not
        atomic: a reader sees each entry old or new."""
        self._refuse_percpu("update_many")
        done = 0
        while done < len(items):
            chunk = items[done:done + _WRITE_BATCH]
            keys = ctypes.create_string_buffer(b"".join(k for k, _ in chunk), self.key_size * len(chunk))
            values = ctypes.create_string_buffer(b"".join(v for _, v in chunk), self.value_size * len(chunk))
            count = ctypes.c_uint32(len(chunk))
            opts = new_opts(BpfMapBatchOpts)
            result = lib().bpf_map_update_batch(self.fd, keys, values, ctypes.byref(count), ctypes.byref(opts))
            if result != 0:
                code = errno_of(result)
                if code in _BATCH_UNSUPPORTED:
                    # the kernel may leave `count` untouched: redo this chunk
                    for key, value in items[done:]:
                        self.update(key, value)
                    return
                raise BpfError(f"update_batch in map {self.name}", code)
            done += len(chunk)

    def delete_many(self, keys: Sequence[bytes]) -> None:
        """Delete many keys (absent ones are fine), batched where possible."""
        self._refuse_percpu("delete_many")
        done = 0
        while done < len(keys):
            chunk = keys[done:done + _WRITE_BATCH]
            buffer = ctypes.create_string_buffer(b"".join(chunk), self.key_size * len(chunk))
            count = ctypes.c_uint32(len(chunk))
            opts = new_opts(BpfMapBatchOpts)
            result = lib().bpf_map_delete_batch(self.fd, buffer, ctypes.byref(count), ctypes.byref(opts))
            if result != 0:
                # a key already gone stops the batch at it (ENOENT; `count`
                # says how far it got); without batches `count` may be left
                # as it was: the rest one by one
                start = done + count.value if errno_of(result) == errno.ENOENT else done
                for key in keys[start:]:
                    self.delete(key)
                return
            done += len(chunk)

    def delete(self, key: bytes) -> bool:
        """Remove key; False if it was not there."""
        result = lib().bpf_map_delete_elem(self.fd, self._key(key))
        if result != 0:
            code = errno_of(result)
            if code == errno.ENOENT:
                return False
            raise BpfError(f"delete in map {self.name}", code)
        return True

    # --- iteration --------------------------------------------------------------

    def keys(self) -> list[bytes]:
        found: list[bytes] = []
        current: ctypes.Array[ctypes.c_char] | None = None
        following = ctypes.create_string_buffer(self.key_size or 1)
        while True:
            result = lib().bpf_map_get_next_key(self.fd, current, following)
            if result != 0:
                code = errno_of(result)
                if code == errno.ENOENT:
                    return found
                raise BpfError(f"get_next_key in map {self.name}", code)
            found.append(following.raw[: self.key_size])
            current = ctypes.create_string_buffer(following.raw, self.key_size or 1)

    def items(self) -> list[tuple[bytes, bytes]]:
        self._refuse_percpu("items")
        return self._dump(self.value_size)

    def items_percpu(self) -> list[tuple[bytes, list[bytes]]]:
        stride = self._percpu_stride
        return [
            (key, _split_percpu(raw, stride, self.value_size))
            for key, raw in self._dump(stride * possible_cpus())
        ]

    def _dump(self, value_bytes: int) -> list[tuple[bytes, bytes]]:
        batched = self._dump_batched(value_bytes)
        if batched is not None:
            return batched
        entries = []
        for key in self.keys():
            value = self._lookup_raw(key, value_bytes)
            if value is not None:  # deleted since keys() saw it
                entries.append((key, value))
        return entries

    def _dump_batched(self, value_bytes: int) -> list[tuple[bytes, bytes]] | None:
        """BPF_MAP_LOOKUP_BATCH dump, or None when the map type does not support it."""
        entries: list[tuple[bytes, bytes]] = []
        token_size = max(_round8(self.key_size), 8)
        in_token = ctypes.create_string_buffer(token_size)
        out_token = ctypes.create_string_buffer(token_size)
        capacity = min(max(self.max_entries, 1), _BATCH_ENTRIES)
        opts = new_opts(BpfMapBatchOpts)
        first = True
        while True:
            keys = ctypes.create_string_buffer(self.key_size * capacity or 1)
            values = ctypes.create_string_buffer(value_bytes * capacity or 1)
            count = ctypes.c_uint32(capacity)
            result = lib().bpf_map_lookup_batch(
                self.fd,
                None if first else in_token,
                out_token,
                keys,
                values,
                ctypes.byref(count),
                ctypes.byref(opts),
            )
            code = errno_of(result) if result != 0 else 0
            if code and first and code in _BATCH_UNSUPPORTED:
                return None
            if code == errno.ENOSPC and count.value == 0:
                capacity *= 2  # a hash bucket holds more entries than the batch
                continue
            if code and code != errno.ENOENT:
                raise BpfError(f"lookup_batch in map {self.name}", code)
            for index in range(count.value):
                key = keys.raw[index * self.key_size : (index + 1) * self.key_size]
                value = values.raw[index * value_bytes : (index + 1) * value_bytes]
                entries.append((key, value))
            if code == errno.ENOENT:
                return entries
            ctypes.memmove(in_token, out_token, token_size)
            first = False

    # --- lifetime -------------------------------------------------------------

    def pin(self, path: str) -> None:
        pins.pin(self.fd, path)
        self.pinned_path = path

    def close(self) -> None:
        self._owned.close()

    def __enter__(self) -> Map:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Map(name={self.name!r}, id={self.id}, type={self.type}, key_size={self.key_size}, "
            f"value_size={self.value_size}, max_entries={self.max_entries})"
        )


def _split_percpu(raw: bytes, stride: int, value_size: int) -> list[bytes]:
    return [raw[start : start + value_size] for start in range(0, len(raw), stride)]
