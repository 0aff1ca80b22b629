"""The maps every pipeline of a namespace shares (interface facts, local
addresses, neighbour states): pinned once, written from the graph, reused by
each program instance at load time."""
from __future__ import annotations

import logging
import os
import socket
import struct

from linuxfp import datapath as dp
from linuxfp.graph import IfaceFacts, NeighbourFacts
from linuxfp.graph.model import IF_FORWARDING, IF_XDP_TX, NEIGH_CONFIRMED

from .lease import LEASE_MAP
from .namespace import NamespaceLayout

log = logging.getLogger("linuxfp.maps")

IFACES, LOCAL_SRC, HINTS, NEIGH, TX_PORTS = (
    "lfp_ifaces", "lfp_local_src", "lfp_hints", "lfp_neigh", "lfp_tx_ports")
NAMES = (IFACES, LOCAL_SRC, HINTS, NEIGH, TX_PORTS, LEASE_MAP)
HINT_LOCAL, HINT_NEIGH = 0, 1        # rows of lfp_hints (bpf_modules/router.h)
_BY_IFINDEX = (IFACES, TX_PORTS)     # arrays indexed by ifindex, sized together
_XDP_TX_READY = IF_XDP_TX | IF_FORWARDING
MIN_IFACE_SLOTS = 256
# Interfaces with a larger ifindex get no facts: all-zero facts mean "pass",
# so they simply stay on the kernel path.
MAX_IFACE_SLOTS = 1 << 16

_IFACE_VALUE = struct.Struct("<II6sH")     # struct lfp_iface (bpf_modules/common.h)
_EMPTY_IFACE = bytes(_IFACE_VALUE.size)


def pack_iface(f: IfaceFacts) -> bytes:
    return _IFACE_VALUE.pack(f.flags, f.mtu, f.mac, f.fwd_len_cap)


def unpack_iface(ifindex: int, raw: bytes) -> IfaceFacts:
    flags, mtu, mac, cap = _IFACE_VALUE.unpack(raw[: _IFACE_VALUE.size])
    return IfaceFacts(ifindex, flags, mtu, mac, cap)


def iface_slots(facts) -> int:
    """Array size covering every ifindex in `facts` (a power of two)."""
    highest = max((f.ifindex for f in facts if f.ifindex < MAX_IFACE_SLOTS), default=0)
    slots = MIN_IFACE_SLOTS
    while slots <= highest:
        slots *= 2
    return slots


def _be32(addr: str) -> int:
    """An IPv4 address as the CPU reads the __be32 holding it."""
    return struct.unpack("<I", socket.inet_aton(addr))[0]


def hint_bit(value: int) -> int:
    """Bit of a value in a 256-bit hint (lfp_hint_bit() in bpf_modules/router.h)."""
    value ^= value >> 16
    value ^= value >> 8
    return value & 0xFF


def _hint(values) -> bytes:
    bits = 0
    for value in values:
        bits |= 1 << hint_bit(value)
    return bits.to_bytes(32, "little")


def local_hint(addrs) -> bytes:
    return _hint(_be32(a) for a in addrs)


def neighbour_hint(neighbours) -> bytes:
    """Next hops the datapath must look up: every entry not CONFIRMED."""
    return _hint(n.ifindex ^ _be32(n.address) for n in neighbours if n.state != NEIGH_CONFIRMED)


def _u32(value: int) -> bytes:
    return struct.pack("<I", value)


def _neigh_key(key: tuple[int, str]) -> bytes:
    ifindex, addr = key
    return _u32(ifindex) + socket.inet_aton(addr)


class SharedMaps:
    def __init__(self, layout: NamespaceLayout) -> None:
        self.layout = layout
        self._open: dict[str, dp.Map] = {}

    def get(self, name: str) -> dp.Map | None:
        m = self._open.get(name)
        if m is None:
            path = self.layout.shared_map_pin(name)
            if os.path.exists(path):
                m = self._open[name] = dp.Map.from_pinned(path)
        return m

    @property
    def exist(self) -> bool:
        return self.get(IFACES) is not None

    def fits(self, facts) -> bool:
        for name in _BY_IFINDEX:
            m = self.get(name)
            if m is not None and any(m.max_entries <= f.ifindex < MAX_IFACE_SLOTS for f in facts):
                return False
        return True

    def drop_ifindex_arrays(self) -> None:
        """Forget the arrays indexed by ifindex so the next load creates larger
        ones; programs still using the old ones keep them alive until replaced."""
        for name in _BY_IFINDEX:
            m = self._open.pop(name, None)
            if m is not None:
                m.close()
            dp.unpin(self.layout.shared_map_pin(name), missing_ok=True)

    # -- loading -----------------------------------------------------------

    def prepare(self, obj, desired_ifaces) -> list[str]:
        """Make `obj` reuse the pinned maps; size the ones it will create.
        Returns the names `obj` creates (to be adopted after load)."""
        fresh = []
        for name in NAMES:
            if name not in obj.map_names():
                continue            # e.g. lfp_tx_ports exists in XDP programs only
            m = self.get(name)
            if m is not None:
                obj.reuse_map(name, m)
            else:
                fresh.append(name)
                if name in _BY_IFINDEX:
                    obj.set_max_entries(name, iface_slots(desired_ifaces))
        return fresh

    def pin_fresh(self, obj, fresh: list[str]) -> None:
        """Pin the maps `obj` created, for every later object to share."""
        if fresh:
            dp.makedirs(self.layout.maps_dir)
        for name in fresh:
            obj.map(name).pin(self.layout.shared_map_pin(name))

    def adopt(self, obj, fresh: list[str], desired) -> None:
        """Pin the maps `obj` created and fill them before any program using
        them is attached."""
        self.pin_fresh(obj, fresh)
        if fresh:
            self.write(desired.ifaces, desired.local_addrs, desired.neighbours)
            self.set_hints(desired.local_addrs, desired.neighbours)

    # -- contents ----------------------------------------------------------

    def set_hints(self, all_local, all_neighbours) -> None:
        """After the hashes hold every entry: a bit may only be set for an
        entry the exact lookup will find (and cleared once it needs none)."""
        hints = self.get(HINTS)
        if hints is not None:
            hints.update(_u32(HINT_LOCAL), local_hint(all_local))
            hints.update(_u32(HINT_NEIGH), neighbour_hint(all_neighbours))

    def write(self, facts=(), local=(), neighbours=()) -> None:
        ifaces, src, neigh, tx = self.get(IFACES), self.get(LOCAL_SRC), self.get(NEIGH), self.get(TX_PORTS)
        facts = [f for f in facts if f.ifindex < MAX_IFACE_SLOTS]
        if ifaces is not None:
            for f in facts:
                ifaces.update(_u32(f.ifindex), pack_iface(f))
        if tx is not None:
            for f in facts:
                if f.flags & _XDP_TX_READY == _XDP_TX_READY:
                    try:
                        tx.update(_u32(f.ifindex), _u32(f.ifindex))
                    except dp.BpfError as e:   # the device went away meanwhile: pass to it
                        log.warning("ifindex %d not usable as XDP egress: %s", f.ifindex, e)
                else:
                    tx.delete(_u32(f.ifindex))
        if src is not None:
            for addr in local:
                src.update(socket.inet_aton(addr), b"\x01")
        if neigh is not None:
            for n in neighbours:
                neigh.update(_neigh_key(n.key), bytes([n.state]))

    def erase(self, ifindexes=(), local=(), neighbour_keys=()) -> None:
        ifaces, src, neigh, tx = self.get(IFACES), self.get(LOCAL_SRC), self.get(NEIGH), self.get(TX_PORTS)
        if ifaces is not None:
            for ifindex in ifindexes:
                if ifindex < ifaces.max_entries:
                    ifaces.update(_u32(ifindex), _EMPTY_IFACE)   # zero facts: pass everything
        if tx is not None:
            for ifindex in ifindexes:
                if ifindex < tx.max_entries:
                    tx.delete(_u32(ifindex))
        if src is not None:
            for addr in local:
                src.delete(socket.inet_aton(addr))
        if neigh is not None:
            for key in neighbour_keys:
                neigh.delete(_neigh_key(key))

    def read_back(self):
        """(ifaces, local_addrs, neighbours) as pinned, for adopting a datapath."""
        ifaces, local, neighbours = (), frozenset(), frozenset()
        m = self.get(IFACES)
        if m is not None:
            ifaces = tuple(unpack_iface(struct.unpack("<I", k)[0], v) for k, v in m.items()
                           if v[: _IFACE_VALUE.size] != _EMPTY_IFACE)
        m = self.get(LOCAL_SRC)
        if m is not None:
            local = frozenset(socket.inet_ntoa(k) for k in m.keys())
        m = self.get(NEIGH)
        if m is not None:
            # The link-layer address is not in the map: "?" makes every adopted
            # entry differ from the desired one, so all are rewritten once.
            neighbours = frozenset(NeighbourFacts(struct.unpack("<I", k[:4])[0], socket.inet_ntoa(k[4:8]), v[0], "?")
                                   for k, v in m.items())
        return ifaces, local, neighbours

    def close(self) -> None:
        for m in self._open.values():
            m.close()
        self._open.clear()
