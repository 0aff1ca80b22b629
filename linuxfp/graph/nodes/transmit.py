"""The transmit node (bpf_modules/transmit.h): rewrites and sends what the
deciding node left in pkt->fwd; it owns the next hops' neighbour states."""
from __future__ import annotations

import socket

from linuxfp.resources import modules_dir

from ..model import NEIGH_CONFIRMED, NEIGH_PROBING, NEIGH_STALE, NeighbourFacts
from ..tables import HASH, Table, be32, hint_table, u32
from . import Node, Stage, register

NEIGH, NEIGH_HINT = "lfp_neigh", "lfp_neigh_hint"

_NUD_CONFIRMED = 0x02 | 0x40 | 0x80     # REACHABLE, NOARP, PERMANENT
_NUD_STALE = 0x04
_NUD_PROBING = 0x08 | 0x10              # DELAY, PROBE


class Transmit(Node):
    name = "transmit"
    stage = Stage.TRANSMIT
    header = modules_dir() / "transmit.h"
    inputs = ("neighbours",)

    def tables(self, snapshot) -> tuple[Table, ...]:
        states = neighbour_states(snapshot)
        return (
            Table(NEIGH, self.name, 8, 1, frozenset((neigh_key(n.ifindex, n.address), bytes([n.state]))
                                                    for n in states),
                  kind=HASH, describe="next hops' neighbour states (1 confirmed, 2 stale, 3 probing)"),
            hint_table(NEIGH_HINT, self.name, (n.ifindex ^ be32(n.address) for n in states
                                               if n.state != NEIGH_CONFIRMED),
                       "prefilter of lfp_neigh: next hops not confirmed"),
        )

    def refreshed(self, table: str, messages) -> frozenset[bytes]:
        # The datapath advances STALE to PROBING itself; a STALE the kernel
        # announces again must reset it even though our copy says STALE.
        from linuxfp.state import NeighbourUpdate

        if table != NEIGH:
            return frozenset()
        return frozenset(neigh_key(m.neighbour.ifindex, m.neighbour.dst) for m in messages
                         if isinstance(m, NeighbourUpdate) and m.neighbour.family == 2)


TRANSMIT = register(Transmit())


def neigh_key(ifindex: int, address: str) -> bytes:
    """struct lfp_neigh_key."""
    return u32(ifindex) + socket.inet_aton(address)


def neighbour_states(snapshot) -> frozenset[NeighbourFacts]:
    """lfp_neigh entries: what the next packet to each next hop may do."""
    out = set()
    for n in snapshot.neighbours:
        if n.family != 2 or not n.lladdr:
            continue
        if n.state & _NUD_CONFIRMED:
            state = NEIGH_CONFIRMED
        elif n.state & _NUD_STALE:
            state = NEIGH_STALE
        elif n.state & _NUD_PROBING:
            state = NEIGH_PROBING
        else:
            continue
        out.add(NeighbourFacts(n.ifindex, n.dst, state, n.lladdr))
    return frozenset(out)
