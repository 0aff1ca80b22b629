"""Tables: the desired contents of one BPF map, as a node derives them from
the snapshot. The controller syncs every table the same way (controller/
reconcile.py plans the difference, controller/installer.py writes it); no
node has a writer of its own.

Entries are packed bytes, keyed exactly as the map is, so the installed
contents read back from a pinned map compare equal to the desired ones, and
the layouts are checked against the compiled object when it loads.
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

HASH, ARRAY, DEVMAP = "hash", "array", "devmap"


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
    key_size: int
    value_size: int
    entries: frozenset[tuple[bytes, bytes]] = frozenset()
    kind: str = HASH
    by_ifindex: bool = False
    summary: bool = False
    describe: str = field(default="", compare=False)    # what an entry means, for `linuxfp graph`

    def __post_init__(self) -> None:
        for key, value in self.entries:
            if len(key) != self.key_size or len(value) != self.value_size:
                raise ValueError(f"{self.name}: entry of {len(key)}/{len(value)} bytes, "
                                 f"layout is {self.key_size}/{self.value_size}")

    @cached_property
    def as_dict(self) -> Mapping[bytes, bytes]:
        return dict(self.entries)

    @property
    def empty_value(self) -> bytes:
        return bytes(self.value_size)

    def to_dict(self) -> dict:
        return {"name": self.name, "owner": self.owner, "kind": self.kind, "entries": len(self.entries),
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
    return Table(name, owner, 4, 32, frozenset({(u32(0), hint(values))}), kind=ARRAY, summary=True,
                 describe=describe)


def widened(old: bytes, new: bytes) -> bytes:
    """old | new, byte by byte: a summary that covers both contents."""
    return bytes(a | b for a, b in zip(old.ljust(len(new), b"\0"), new))
