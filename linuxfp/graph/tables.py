"""Tables: the desired contents of one BPF map, as a node derives them from
the snapshot. The controller syncs every table the same way (controller/
reconcile.py plans the difference, controller/installer.py writes it); no
node has a writer of its own.

Entries are packed bytes, keyed exactly as the map is, so the installed
contents read back from a pinned map compare equal to the desired ones. Each
table names the C types of its key and value (CType): the one Python
description of those layouts, which packs the entries and which the
controller checks member by member against the compiled object's BTF
before it shares or writes a map (controller/shared_maps.py).
"""
from __future__ import annotations

import copy
import socket
import struct
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

HASH, ARRAY, DEVMAP = "hash", "array", "devmap"


@dataclass(frozen=True)
class CType:
    """A map key's or value's C type: "struct NAME" and its members in
    order as (name, struct format), an unnamed member "" being padding the
    C struct leaves implicit; or a scalar ("__u32", "__be32") as one
    unnamed member."""

    name: str
    members: tuple[tuple[str, str], ...]

    @cached_property
    def packer(self) -> struct.Struct:
        return struct.Struct("<" + "".join(fmt for _, fmt in self.members))

    @property
    def size(self) -> int:
        return self.packer.size

    # pack(*members) -> bytes, unpack(bytes) -> tuple: the struct's own bound
    # methods once asked for (tables of 100 000 entries are packed with them)
    @cached_property
    def pack(self):
        return self.packer.pack

    @cached_property
    def unpack(self):
        return self.packer.unpack

    @cached_property
    def layout(self) -> tuple[tuple[str, int, int], ...] | None:
        """The named members as (name, offset, size) in bits, like the BTF
        view (linuxfp/datapath/btf.py's CTypeShape); None for a scalar."""
        if not self.name.startswith(("struct ", "union ")):
            return None
        out, offset = [], 0
        for member, fmt in self.members:
            size = struct.calcsize("<" + fmt)
            if member:
                out.append((member, 8 * offset, 8 * size))
            offset += size
        return tuple(out)

    def mismatch(self, compiled) -> str | None:
        """How the compiled object's view of this type (a CTypeShape: name,
        size in bytes, members) differs from this one; None when alike."""
        if compiled.name != self.name:
            return f"the compiled object holds {compiled.name}, the table {self.name}"
        if compiled.size != self.size:
            return f"{self.name} is {compiled.size} bytes in the compiled object, {self.size} in the table"
        if compiled.members is None or self.layout is None:
            return None
        if tuple(compiled.members) != self.layout:
            return (f"{self.name} members differ: compiled {_members(compiled.members)}; "
                    f"table {_members(self.layout)}")
        return None


def _members(members) -> str:
    """name@byte offset:bytes, as a mismatch message shows them."""
    return ", ".join(f"{name}@{offset / 8:g}:{size / 8:g}" for name, offset, size in members)


def scalar(name: str, fmt: str) -> CType:
    return CType(name, (("", fmt),))


U8, U32, U64, BE32 = scalar("__u8", "B"), scalar("__u32", "I"), scalar("__u64", "Q"), scalar("__be32", "4s")
HINT = CType("struct lfp_hint", (("bits", "32s"),))     # hint.h


@dataclass(frozen=True)
class Table:
    """One map's desired contents.

    kind: HASH (absent keys are deleted), ARRAY (absent keys read as zeros)
    or DEVMAP (absent keys are deleted; values are ifindexes).
    by_ifindex: an array indexed by ifindex, sized to cover the namespace's
    interfaces when it is created.
    summary: a prefilter (hint.h): while its table changes it is first
    widened to old | new and narrowed once the entries are written, so a
    packet never skips a lookup it needs."""

    name: str
    owner: str
    key: CType
    value: CType
    entries: frozenset[tuple[bytes, bytes]] = frozenset()
    kind: str = HASH
    by_ifindex: bool = False
    summary: bool = False
    describe: str = field(default="", compare=False)    # what an entry means, for `linuxfp graph`

    def __post_init__(self) -> None:
        Table._check(self.name, self.entries, self.key_size, self.value_size)

    def changed(self, gone: frozenset[tuple[bytes, bytes]], new: frozenset[tuple[bytes, bytes]]) -> "Table":
        """This table without the entries `gone` and with those `new`,
        checking only the new ones (a large table's other entries were
        checked when it was made)."""
        Table._check(self.name, new, self.key_size, self.value_size)
        table = copy.copy(self)
        object.__setattr__(table, "entries", (self.entries - gone) | new)
        table.__dict__.pop("as_dict", None)       # (cached for the old entries)
        return table

    @staticmethod
    def _check(name: str, entries, key_size: int, value_size: int) -> None:
        for key, value in entries:
            if len(key) != key_size or len(value) != value_size:
                raise ValueError(f"{name}: entry of {len(key)}/{len(value)} bytes, "
                                 f"layout is {key_size}/{value_size}")

    @property
    def key_size(self) -> int:
        return self.key.size

    @property
    def value_size(self) -> int:
        return self.value.size

    @cached_property
    def as_dict(self) -> Mapping[bytes, bytes]:
        return dict(self.entries)

    @property
    def empty_value(self) -> bytes:
        return bytes(self.value_size)

    def to_dict(self) -> dict:
        return {"name": self.name, "owner": self.owner, "kind": self.kind, "entries": len(self.entries),
                "key": self.key.name, "value": self.value.name,
                "key_size": self.key_size, "value_size": self.value_size, "summary": self.summary,
                "describe": self.describe}


def u32(value: int) -> bytes:
    """A __u32 key or value as the map holds it."""
    return struct.pack("<I", value)


def be32(addr: str) -> int:
    """An IPv4 address as the CPU reads the __be32 holding it."""
    return struct.unpack("<I", socket.inet_aton(addr))[0]


def hint_bit(value: int) -> int:
    """Bit of a value in a 256-bit hint (lfp_hint_bit() in bpf_modules/hint.h)."""
    value ^= value >> 16
    value ^= value >> 8
    return value & 0xFF


def hint(values: Iterable[int]) -> bytes:
    """The struct lfp_hint with a bit set for each value."""
    bits = 0
    for value in values:
        bits |= 1 << hint_bit(value)
    return bits.to_bytes(32, "little")


def hint_table(name: str, owner: str, values: Iterable[int], describe: str) -> Table:
    """A one-entry array holding a hint (LFP_HINT_MAP in hint.h)."""
    return Table(name, owner, U32, HINT, frozenset({(u32(0), hint(values))}), kind=ARRAY, summary=True,
                 describe=describe)


def widened(old: bytes, new: bytes) -> bytes:
    """old | new, byte by byte: a summary that covers both contents."""
    return bytes(a | b for a, b in zip(old.ljust(len(new), b"\0"), new))
