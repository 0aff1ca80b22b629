"""The maps every pipeline of a namespace shares (interface facts, local
addresses, neighbour states): pinned once, written from the graph, reused by
each program instance at load time."""
from __future__ import annotations

import os
import socket
import struct

from linuxfp import datapath as dp
from linuxfp.graph import IfaceFacts, NeighbourFacts

from .namespace import NamespaceLayout

IFACES, LOCAL_SRC, NEIGH = "lfp_ifaces", "lfp_local_src", "lfp_neigh"
NAMES = (IFACES, LOCAL_SRC, NEIGH)
MIN_IFACE_SLOTS = 256

_IFACE_VALUE = struct.Struct("<II6sH")     # struct lfp_iface (bpf_modules/common.h)
_EMPTY_IFACE = bytes(_IFACE_VALUE.size)


def pack_iface(f: IfaceFacts) -> bytes:
    return _IFACE_VALUE.pack(f.flags, f.mtu, f.mac, f.fwd_len_cap)


def unpack_iface(ifindex: int, raw: bytes) -> IfaceFacts:
    flags, mtu, mac, cap = _IFACE_VALUE.unpack(raw[: _IFACE_VALUE.size])
    return IfaceFacts(ifindex, flags, mtu, mac, cap)


def iface_slots(facts) -> int:
    """Array size covering every ifindex in `facts` (a power of two)."""
    highest = max((f.ifindex for f in facts), default=0)
    slots = MIN_IFACE_SLOTS
    while slots <= highest:
        slots *= 2
    return slots


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
        m = self.get(IFACES)
        return m is None or all(f.ifindex < m.max_entries for f in facts)

    def drop_ifaces(self) -> None:
        """Forget the interface array so the next load creates a larger one;
        programs still using the old one keep it alive until replaced."""
        m = self._open.pop(IFACES, None)
        if m is not None:
            m.close()
        dp.unpin(self.layout.shared_map_pin(IFACES), missing_ok=True)

    # -- loading -----------------------------------------------------------

    def prepare(self, obj, desired_ifaces) -> list[str]:
        """Make `obj` reuse the pinned maps; size the ones it will create.
        Returns the names `obj` creates (to be adopted after load)."""
        fresh = []
        for name in NAMES:
            m = self.get(name)
            if m is not None:
                obj.reuse_map(name, m)
            else:
                fresh.append(name)
                if name == IFACES:
                    obj.set_max_entries(name, iface_slots(desired_ifaces))
        return fresh

    def adopt(self, obj, fresh: list[str], desired) -> None:
        """Pin the maps `obj` created and fill them before any program using
        them is attached."""
        for name in fresh:
            obj.map(name).pin(self.layout.shared_map_pin(name))
        if fresh:
            self.fill(desired.ifaces, desired.local_addrs, desired.neighbours)

    # -- contents ----------------------------------------------------------

    def fill(self, facts, local, neighbours) -> None:
        self.write(facts, local, neighbours)

    def write(self, facts=(), local=(), neighbours=()) -> None:
        ifaces, src, neigh = self.get(IFACES), self.get(LOCAL_SRC), self.get(NEIGH)
        if ifaces is not None:
            for f in facts:
                ifaces.update(_u32(f.ifindex), pack_iface(f))
        if src is not None:
            for addr in local:
                src.update(socket.inet_aton(addr), b"\x01")
        if neigh is not None:
            for n in neighbours:
                neigh.update(_neigh_key(n.key), bytes([n.state]))

    def erase(self, ifindexes=(), local=(), neighbour_keys=()) -> None:
        ifaces, src, neigh = self.get(IFACES), self.get(LOCAL_SRC), self.get(NEIGH)
        if ifaces is not None:
            for ifindex in ifindexes:
                if ifindex < ifaces.max_entries:
                    ifaces.update(_u32(ifindex), _EMPTY_IFACE)   # zero facts: pass everything
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
