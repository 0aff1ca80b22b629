"""The transmit node (bpf_modules/transmit.h): rewrites and sends what the
deciding node left in pkt->fwd; it owns the next hops' neighbour states and
the veth peers it may deliver into directly."""
from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass, replace

from linuxfp.resources import modules_dir

from ..filtering.addrtypes import address_types
from ..filtering.local_out import SentFlow, sent_untouched
from ..filtering.scope import egress_chain, filter_scope, translating
from ..model import NEIGH_CONFIRMED, NEIGH_PROBING, NEIGH_STALE, NeighbourFacts
from ..interfaces import NO_QDISC, mac_bytes, transmit_skips, vxlan_blocker
from ..remember import remembered
from ..tables import ARRAY, HASH, U8, U32, CType, Table, be32, hint_table, u32
from . import Node, Stage, register

NEIGH, NEIGH6, NEIGH_HINT, PEERS = "lfp_neigh", "lfp_neigh6", "lfp_neigh_hint", "lfp_peers"
VTEPS = "lfp_vteps"
NEIGH_KEY = CType("struct lfp_neigh_key", (("ifindex", "I"), ("addr", "4s")))
NEIGH6_KEY = CType("struct lfp_neigh6_key", (("ifindex", "I"), ("addr", "16s")))
PEER = CType("struct lfp_peer", (("mac", "6s"), ("pad", "H"), ("mtu", "I")))
VTEP_KEY = CType("struct lfp_vtep_key", (("ifindex", "I"), ("mac", "6s"), ("pad", "H")))
VTEP = CType("struct lfp_vtep", (("remote", "4s"), ("local", "4s"), ("oif", "I"), ("overhead", "H"),
                                 ("max_len", "H"), ("vni", "4s"), ("port_min", "H"), ("port_max", "H"),
                                 ("port", "2s"), ("ttl", "B"), ("flags", "B")))
# struct lfp_vtep's flags (vxlan_tx.h)
VTEP_ENCAP, VTEP_TRACKED, VTEP_UDP_CSUM, VTEP_NAT_HOOKS = 1, 2, 4, 8

_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
_NUD_CONFIRMED = 0x02 | 0x40 | 0x80     # REACHABLE, NOARP, PERMANENT
_NUD_STALE = 0x04
_NUD_PROBING = 0x08 | 0x10              # DELAY, PROBE


class Transmit(Node):
    name = "transmit"
    stage = Stage.TRANSMIT
    header = modules_dir() / "transmit.h"

    def tables(self, snapshot) -> tuple[Table, ...]:
        # Up to 65 536 neighbours: their tables are rebuilt only when the
        # neighbours change, not on every link event (which peers follows).
        return (remembered("transmit.neighbour_tables", snapshot, self._neighbour_tables)
                + (remembered("transmit.peers_table", snapshot, self._peers_table),
                   remembered("transmit.vteps_table", snapshot, self._vteps_table)))

    def notes(self, snapshot) -> tuple[str, ...]:
        return tuple(f"{link.name}: nothing the fast path sends leaves here: {why}" for link in snapshot.links
                     if (why := egress_chain(snapshot, link.name))) + tuple(
            f"{snapshot.link(path.device).name} to {path.remote}: the device encapsulates what the fast path "
            f"routes there: {path.not_encapsulated}"
            for path in remembered("transmit.tunnel_paths", snapshot, _tunnel_paths) if path.not_encapsulated)

    def _neighbour_tables(self, snapshot) -> tuple[Table, ...]:
        states = neighbour_states(snapshot.neighbours)
        ipv4 = [n for n in states if ":" not in n.address]
        ipv6 = [n for n in states if ":" in n.address]
        tables = (
            Table(NEIGH, self.name, NEIGH_KEY, U8, frozenset((neigh_key(n.ifindex, n.address), bytes([n.state]))
                                                    for n in ipv4),
                  kind=HASH, describe="IPv4 next hops' neighbour states (1 confirmed, 2 stale, 3 probing)"),
            Table(NEIGH6, self.name, NEIGH6_KEY, U8, frozenset((neigh_key(n.ifindex, n.address), bytes([n.state]))
                                                      for n in ipv6),
                  kind=HASH, describe="IPv6 next hops' neighbour states (1 confirmed, 2 stale, 3 probing)"),
            hint_table(NEIGH_HINT, self.name, (neigh_fold(n.ifindex, n.address) for n in states
                                               if n.state != NEIGH_CONFIRMED),
                       "prefilter of lfp_neigh and lfp_neigh6: next hops not confirmed"),
        )
        return tables

    def _peers_table(self, snapshot) -> Table:
        return Table(PEERS, self.name, U32, PEER,
                     frozenset((u32(link.index), PEER.pack(mac_bytes(peer.mac), 0, peer.mtu))
                               for link, peer in deliverable_peers(snapshot)),
                     kind=ARRAY, by_ifindex=True,
                     describe="veths whose peer (another namespace) takes frames straight: its MAC and MTU")

    def _vteps_table(self, snapshot) -> Table:
        return Table(VTEPS, self.name, VTEP_KEY, VTEP,
                     frozenset((VTEP_KEY.pack(p.device, mac_bytes(p.mac), 0),
                                VTEP.pack(socket.inet_aton(p.remote), socket.inet_aton(p.local), p.oif, p.overhead,
                                          p.max_len, (p.vni << 8).to_bytes(4, "big"), p.ports[0], p.ports[1],
                                          p.port.to_bytes(2, "big"), p.ttl, p.flags))
                               for p in remembered("transmit.tunnel_paths", snapshot, _tunnel_paths)),
                     kind=HASH,
                     describe="VXLAN egresses' remote VTEP per MAC: the outer route a packet longer than "
                              "tx_len_cap is checked against, and what the fast path encapsulates with")

    def refreshed(self, table: str, messages) -> frozenset[bytes]:
        # The datapath advances STALE to PROBING itself; a STALE the kernel
        # announces again must reset it even though our copy says STALE.
        from linuxfp.state import NeighbourUpdate

        family = {NEIGH: socket.AF_INET, NEIGH6: socket.AF_INET6}.get(table)
        if family is None:
            return frozenset()
        return frozenset(neigh_key(m.neighbour.ifindex, m.neighbour.dst) for m in messages
                         if isinstance(m, NeighbourUpdate) and m.neighbour.family == family)


TRANSMIT = register(Transmit())


def neigh_key(ifindex: int, address: str) -> bytes:
    """struct lfp_neigh_key, or struct lfp_neigh6_key for an IPv6 address."""
    if ":" in address:
        return NEIGH6_KEY.pack(ifindex, socket.inet_pton(socket.AF_INET6, address))
    return NEIGH_KEY.pack(ifindex, socket.inet_aton(address))


def neigh_fold(ifindex: int, address: str) -> int:
    """lfp_neigh_fold() in transmit.h: what lfp_neigh_hint is keyed by."""
    if ":" not in address:
        return ifindex ^ be32(address)
    folded = ifindex
    for (word,) in struct.iter_unpack("<I", socket.inet_pton(socket.AF_INET6, address)):
        folded ^= word
    return folded


def deliverable_peers(snapshot):
    """(veth, its peer) pairs where a frame sent out of the veth may be put
    straight into the peer's receive path (bpf_redirect_peer): nothing runs
    on the way out (no qdisc work, no tc egress filters: no clsact, no tcx
    egress programs of other tools, no nf_tables egress chain), and the
    peer receives through the backlog, not NAPI — its GRO or XDP would run
    on the veth path only, which the veth's NDO_XMIT feature reveals (set
    when its peer has either; unknown without the netdev family: no)."""
    for link in snapshot.links:
        peer = snapshot.peer_of(link)
        if (peer is None or not (link.up and link.oper_up) or transmit_skips(link, snapshot, NO_QDISC)
                or not link.xdp_features or link.can_receive_xdp_redirect):
            continue
        if peer.up and not peer.xdp_prog_id and peer.mtu and any(mac_bytes(peer.mac)):
            yield link, peer


def neighbour_states(neighbours) -> frozenset[NeighbourFacts]:
    """lfp_neigh entries: what the next packet to each next hop may do."""
    out = set()
    for n in neighbours:
        if n.family not in (socket.AF_INET, socket.AF_INET6) or not n.lladdr:
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


@dataclass(frozen=True)
class TunnelPath:
    """One VXLAN egress's MAC whose outer route the fast path may ask about
    (tunnel_paths), and how it may encapsulate to that MAC's remote itself
    (`flags` VTEP_ENCAP; else why not: `not_encapsulated`)."""

    device: int
    mac: str
    remote: str
    local: str
    oif: int                    # the entry's own underlay, 0 for none
    overhead: int
    max_len: int                # longest inner IP packet under every route MTU metric
    vni: int = 0
    port: int = 0               # destination port
    ports: tuple[int, int] = (0, 0)     # [min, max) as udp_flow_src_port() draws from it
    ttl: int = 0
    flags: int = 0
    not_encapsulated: str = ""


def _tunnel_paths(snapshot) -> tuple[TunnelPath, ...]:
    return tuple(tunnel_paths(snapshot))


def tunnel_paths(snapshot):
    """A TunnelPath for each VXLAN egress's MAC whose outer route the fast path may ask
    bpf_fib_lookup() about as the device's transmit asks the FIB
    (vxlan_xmit_one(), udp_tunnel_dst_lookup(): from the device's local
    address to the remote, out of the entry's own underlay — `via`, 0
    when it names none: the device's `dev` serves its default remote only
    — with its TOS and the packet's mark). The MTU that lookup answers
    (ip_mtu_from_fib_result(): the path MTU ICMP taught, else the
    device's) is the one skb_tunnel_check_pmtu() holds the encapsulated
    packet to (ipv4_mtu(): the same exception first, then the route's MTU
    metric, which the lookup ignores unless locked: the longest inner
    packet stays under every IPv4 route's metric). Where the two lookups
    could part, nothing is written and longer packets stay the kernel's
    (tx_too_long): policy rules beyond the default three (the mark, the
    ports and the address could choose another table), several paths (a
    multipath route or a nexthop object: the outer flow's hash picks;
    several IPv4 default routes in a table: fib_select_default() picks
    for an output lookup), ip_forward_use_pmtu (the lookup then prefers a
    metric to a learned path MTU), an IPv6 underlay, a TOS (a route's TOS
    selector could tell; 1 inherits each inner packet's), route short
    circuit (a router entry's frames are re-addressed by the neighbour
    table and sent by another entry), a `dev` in a VRF (the device's
    socket is bound to it), and the default and multicast MACs (several
    remotes, each getting a copy). A MAC without an entry of its own goes
    to the kernel too, and so does every long packet of a device with
    IPv4 forwarding off (the lookup without an underlay takes the device
    as its input, and refuses one that does not forward)."""
    if not snapshot.vteps:
        return
    routes4 = [r for r in snapshot.routes if r.family == socket.AF_INET]
    defaults = [r.table for r in routes4 if r.dst == "0.0.0.0/0" and r.type == "unicast"]
    if (not snapshot.default_rules or snapshot.sysctls.forward_use_pmtu
            or any(len(r.nexthops) > 1 or r.nh_id for r in routes4) or len(defaults) != len(set(defaults))):
        return
    metric_floor = min((r.mtu for r in routes4 if r.mtu), default=0xFFFF)
    for remote in snapshot.vteps:
        link = snapshot.link(remote.device)
        options = link.vxlan if link is not None else None
        conf = snapshot.sysctls.for_ifindex(remote.device)
        if (options is None or options.ipv6 or options.tos or options.route_short_circuit or remote.several
                or vxlan_blocker(link, snapshot) is not None or _in_vrf(snapshot, options.lower)
                or conf is None or not conf.forwarding):
            continue
        try:
            address = ipaddress.IPv4Address(remote.dst)
        except ValueError:
            continue
        if address.is_multicast or address.is_unspecified or address == _BROADCAST:
            continue
        max_len = min(metric_floor, 0xFFFF + options.overhead) - options.overhead
        if max_len > 0:
            path = TunnelPath(remote.device, remote.mac, remote.dst, options.local or "0.0.0.0", remote.via,
                              options.overhead, max_len)
            yield _encapsulated(snapshot, link, remote, path)


def _encapsulated(snapshot, link, remote, path: TunnelPath) -> TunnelPath:
    """`path` with what the fast path encapsulates with, where it builds the
    outer packet exactly as the device's transmit would (vxlan_xmit_one(),
    udp_tunnel_xmit_skb(), iptunnel_xmit(): vxlan_tx.h) and the kernel's
    output path would leave it as it is (local_out.py); else with why not.
    The outer TTL is the device's, or the route's hop limit, which no route
    may then carry (none is known here: the lookup does not tell it), the
    namespace's default; source ports come from the device's range or the
    namespace's ip_local_port_range."""
    options = link.vxlan
    sysctls = snapshot.sysctls
    low, high = options.port_range if options.port_range[0] < options.port_range[1] else sysctls.local_port_range
    path = replace(path, vni=remote.vni or options.vni, port=remote.port or options.port,
                   ports=(low, max(low, high)), ttl=options.ttl or sysctls.default_ttl)
    tracked = bool(filter_scope(snapshot.netfilter).stateful)
    why = _encapsulation_blocker(snapshot, link, remote, path, tracked)
    if why is not None:
        return replace(path, not_encapsulated=why)
    return replace(path, flags=VTEP_ENCAP | (VTEP_TRACKED if tracked else 0)
                   | (VTEP_UDP_CSUM if options.udp_csum else 0)
                   | (VTEP_NAT_HOOKS if translating(snapshot.netfilter) is not None else 0))


def _encapsulation_blocker(snapshot, link, remote, path: TunnelPath, tracked: bool) -> str | None:
    options = link.vxlan
    if remote.ages:
        return "its entry for the remote ages, and only the device's transmit keeps it in use"
    if options.ttl_inherit:
        return "its outer TTL is each inner packet's (ttl inherit)"
    if options.df:
        return "it sets or inherits DF on its outer packets"
    if options.extensions:
        return "it writes group policy (GBP), GPE or remote checksum offload into its headers"
    if not options.local:
        return "it has no local address (the outer route chooses the source)"
    if not any(a.address == options.local for a in snapshot.addresses):
        # (an output route from an address the host does not have fails)
        return f"its local address {options.local} is not one of the host's"
    if not path.port or not 0 < path.ttl < 256:
        return "its destination port or TTL is not known"
    skipped = transmit_skips(link, snapshot, NO_QDISC)
    if skipped is not None:
        return f"its own transmit does more than encapsulate: {skipped}"
    if any(r.hoplimit for r in snapshot.routes if r.family == socket.AF_INET):
        return "an IPv4 route has a hop limit, which the outer packet's TTL may take"
    low, high = path.ports
    flow = SentFlow(options.local, path.remote, (low, high - 1 if high > low else low), path.port)
    why = sent_untouched(snapshot.netfilter, snapshot.links, address_types(snapshot.routes), flow, tracked)
    return None if why is None else f"netfilter on its outer packets' way out: {why}"


def _in_vrf(snapshot, index: int) -> bool:
    """Whether device `index` is under a VRF, directly or through the
    masters above it (a bond's port, a bridge's): a VXLAN device's socket is
    then bound to that VRF (__vxlan_sock_add(),
    l3mdev_master_upper_ifindex_by_index())."""
    device = snapshot.link(index) if index else None
    for _ in range(8):          # (masters nest a few levels at most)
        if device is None or not device.master:
            return False
        device = snapshot.link(device.master)
        if device is not None and device.kind == "vrf":
            return True
    return True                 # deeper than any real stack: assume the worst
