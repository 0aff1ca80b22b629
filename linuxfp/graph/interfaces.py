"""Per-interface facts every pipeline reads (struct lfp_iface in
bpf_modules/common.h) and the XDP egress set, as the pipeline's own tables.
Pure: reads only the snapshot."""
from __future__ import annotations


from linuxfp.state.model import BR_STATE_FORWARDING

from .model import (IF_BRIDGE_TX, IF_ENCAP_TX, IF_FORWARDING, IF_IPV6, IF_IPV6_TX, IF_ROUTED_TX, IF_RP_FILTER,
                    IF_SET_PRIORITY, IF_SRC_FULL_CHECK, IF_TC_TX, IF_XDP_TX, IfaceFacts)
from .filtering.scope import egress_chain, ipv6_uncovered
from .remember import link_at, remembered
from .tables import ARRAY, DEVMAP, U32, CType, Table, u32

ARPHRD_ETHER, ARPHRD_LOOPBACK = 1, 772
IFACES, TX_PORTS, TX6_PORTS, BRIDGE_TX_PORTS = "lfp_ifaces", "lfp_tx_ports", "lfp_tx6_ports", "lfp_br_tx_ports"
# Interfaces with a larger ifindex get no facts: all-zero facts mean "pass",
# so they simply stay on the kernel path.
MAX_IFACE_SLOTS = 1 << 16

# Interface kinds that are plain Ethernet: Linux hands their packets straight
# to IP and sends through them with nothing in between (no bridge, tunnel or
# aggregation semantics), so a node can stand in for the stack around them.
PLAIN_KINDS = frozenset({"", "veth"})

# Root qdiscs that neither reorder by class nor rewrite: an XDP redirect, which
# bypasses the egress qdisc, is then indistinguishable from Linux's output.
PLAIN_QDISCS = frozenset({"", "noqueue", "pfifo_fast", "fq_codel", "fq", "mq"})
# No queue at all (a veth's and a bridge's default; "" where the qdisc is
# not known is not one): a frame put past the device's transmit skips none.
NO_QDISC = frozenset({"noqueue"})

IFACE = CType("struct lfp_iface", (("flags", "I"), ("mtu", "I"), ("mac", "6s"), ("fwd_len_cap", "H"),
                                     ("tx_len_cap", "H"), ("fwd_len_cap6", "H")))     # common.h


def pack_iface(f: IfaceFacts) -> bytes:
    return IFACE.pack(f.flags, f.mtu, f.mac, f.fwd_len_cap, f.tx_len_cap, f.fwd_len_cap6)


def unpack_iface(ifindex: int, raw: bytes) -> IfaceFacts:
    flags, mtu, mac, cap, tx_cap, cap6 = IFACE.unpack(raw[: IFACE.size])
    return IfaceFacts(ifindex, flags, mtu, mac, cap, tx_cap, cap6)


def forward_length_cap6(snapshot) -> int:
    """The smallest IPv6 route MTU metric (0 when none): the output path
    after ip6_forward() honours it (ip6_finish_output() fragments, i.e.
    sends Packet Too Big, by the route's MTU, locked or not, and below
    1280 too), bpf_fib_lookup() only when locked, so longer packets go to
    the kernel."""
    mtus = [mtu for _identity, mtu in snapshot.route_mtus6]
    return min(min(mtus), 0xFFFF) if mtus else 0


def iface_facts(link, conf, snapshot, full_check: bool, fwd_len_cap: int = 0, fwd_len_cap6: int = 0) -> IfaceFacts:
    """`link`'s facts; `conf`: its sysctls (None: not known)."""
    flags = 0
    routable = link.up and link.oper_up and routing_blocker(link, snapshot) is None and not link.master
    if conf is not None:
        flags |= IF_FORWARDING if conf.forwarding else 0
        flags |= IF_RP_FILTER if conf.rp_filter else 0
        if conf.ipv6:
            flags |= IF_IPV6 if ipv6_routing_blocker(snapshot) is None else 0
            # IPv6's own redirects create exceptions with another gateway;
            # IPv4's forwarding and redirects do not concern it.
            flags |= IF_IPV6_TX if not conf.ipv6_accept_redirects else 0
    if full_check:
        flags |= IF_SRC_FULL_CHECK
    if remembered("interfaces.update_priority", snapshot, _update_priority, by_answer=True):
        flags |= IF_SET_PRIORITY
    # Accepted ICMP redirects create next-hop exceptions bpf_fib_lookup ignores
    # (IPv4's are on wherever its forwarding is off: IN_DEV_RX_REDIRECTS).
    sendable = routable and not (conf is not None and conf.accept_redirects)
    tx_len_cap = encapsulated_len_cap(link, snapshot) if link.vxlan is not None else 0
    if bridge_sendable(link, snapshot):
        # Bridged frames may leave here; routed ones never (a port is not a
        # route's egress for the router: FORWARDING stays clear).
        flags = (flags & ~IF_FORWARDING) | IF_BRIDGE_TX
        sendable, routable = True, False
    if egress_chain(snapshot, link.name) is not None:
        # nothing the fast path sends may leave here (egress_chain); what
        # arrives here is another matter (a port's BRP_FORWARDING stays)
        sendable = routable = False
        flags &= ~IF_BRIDGE_TX
    if sendable:
        flags |= IF_TC_TX
        # The outer packet the fast path builds for a VXLAN device is not
        # the kernel's own skb (no route, the ingress's skb_iif and queue):
        # only a plain qdisc and no tc egress filters may see it.
        if transmit_skips(link, snapshot, PLAIN_QDISCS) is None:
            flags |= IF_ENCAP_TX
    if routable:
        flags |= IF_ROUTED_TX
    # An XDP redirect skips the egress's transmit path (and never meets a
    # length cap: only TC egresses carry one).
    if (flags & (IF_TC_TX | IF_ROUTED_TX) and link.can_receive_xdp_redirect
            and transmit_skips(link, snapshot, PLAIN_QDISCS) is None and not tx_len_cap):
        flags |= IF_XDP_TX
    return IfaceFacts(link.index, flags, link.mtu, mac_bytes(link.mac), fwd_len_cap, tx_len_cap, fwd_len_cap6)


def _update_priority(snapshot) -> bool:
    """(the namespace's, asked by answer: a new device's sysctls leave it)"""
    return bool(snapshot.sysctls.forward_update_priority)


def transmit_skips(link, snapshot, standing_in_for: frozenset[str]) -> str | None:
    """What runs on `link`'s transmit path that a packet put past it would
    skip (None: nothing): an XDP redirect into it, a frame delivered
    straight into its veth peer, a routed packet sent to a bridge's port
    rather than through the bridge device. `standing_in_for`: the root
    qdiscs the caller's way of sending is indistinguishable from."""
    if (link.qdisc or "") not in standing_in_for:
        return f"its qdisc ({link.qdisc or 'unknown'})"
    if link.tc_ingress:
        return "tc egress filters may run there (an ingress/clsact qdisc is present)"
    if link.tcx_others_egress:
        return "tcx egress programs of another tool"
    return egress_chain(snapshot, link.name)


def ipv6_routing_blocker(snapshot) -> str | None:
    """Why no IPv6 may be routed by the fast path in this namespace (None:
    it may, packet by packet as router.h decides). Asked per interface:
    remembered while netfilter state, sysctls and rules are, and by answer
    (a new device's sysctls change the sysctls, not this)."""
    return remembered("interfaces.ipv6_routing_blocker", snapshot, _ipv6_routing_blocker, by_answer=True)


def _ipv6_routing_blocker(snapshot) -> str | None:
    # (ip6tables' FORWARD chains the filter node evaluates)
    return ipv6_uncovered(snapshot.netfilter) or _ipv6_lookup_blocker(snapshot.sysctls, snapshot.rules)


def _ipv6_lookup_blocker(sysctls, rules) -> str | None:
    """Why bpf_fib_lookup's IPv6 answer could differ from the kernel's."""
    if sysctls.ipv6_multipath_hash_policy != 0:
        return (f"net.ipv6.fib_multipath_hash_policy={sysctls.ipv6_multipath_hash_policy} hashes what "
                "bpf_fib_lookup does not see (policy 1: the skb's L4 hash where the NIC or a socket set one)")
    if any(r.family == 10 and (r.fwmark or r.fwmask) for r in rules):
        return "IPv6 policy rules match fwmark, which XDP cannot see (and TC sees only before netfilter sets it)"
    if any(r.family == 10 and (r.suppress_prefixlen != -1 or r.suppress_ifgroup != -1) for r in rules):
        return "IPv6 policy rules suppress answers (suppress_prefixlength/ifgroup), which bpf_fib_lookup ignores"
    if any(r.family == 10 and r.uid_range not in (None, (0, 0xFFFFFFFF)) for r in rules):
        return "IPv6 policy rules match a uid range (bpf_fib_lookup looks up as the namespace's uid 0)"
    return None


def routing_blocker(link, snapshot) -> str | None:
    """Why Linux would do something between this interface and IP that a
    packet routed in the fast path would miss, in either direction (None:
    nothing does)."""
    if link.kind in PLAIN_KINDS:
        return None
    if link.kind == "vxlan":
        return vxlan_blocker(link, snapshot)
    return f"{link.kind} interfaces are not supported yet"


def vxlan_blocker(link, snapshot) -> str | None:
    """A VXLAN device with one fixed VNI is Ethernet to IP: vxlan_rcv()
    decapsulates (checksum, ECN, source MAC checks) before tc ingress sees
    the inner frame, and vxlan_xmit() encapsulates from the frame and the
    device's FDB alone — a tc redirect reaches it through the same
    dev_queue_xmit() as Linux's neighbour output, so the outer packet is
    the kernel's own (its OUTPUT and POSTROUTING hooks included). What the
    sending side may not do is outgrow a path MTU: see encapsulated_len_cap."""
    options = link.vxlan
    if options is None:
        return "vxlan options unknown"
    if options.collect_metadata or options.vni_filter:
        return "vxlan in external (collect-metadata) mode: its tunnel keys ride in packet metadata"
    if link.peer_netnsid is not None:
        return "vxlan whose underlay is in another namespace: the outer packets' paths are not known here"
    if encapsulated_len_cap(link, snapshot) < IPV4_MIN_MTU:
        return "vxlan whose encapsulation leaves no room under the namespace's smallest MTU"
    return None


IPV4_MIN_MTU, IPV6_MIN_MTU = 68, 1280


def encapsulated_len_cap(link, snapshot) -> int:
    """The longest inner IPv4 packet a VXLAN egress may take in the fast
    path. When the encapsulated packet exceeds the outer route's MTU —
    its metric, its device's, or a path MTU learned from ICMP (never below
    route/min_pmtu for IPv4, 1280 for IPv6) — Linux lowers the inner
    route's path MTU as it sends (skb_tunnel_check_pmtu), which a
    redirected packet, carrying no route, would not do. The outer route is
    not known here (each remote VTEP's, from the device's FDB), so the cap
    holds under every one the namespace has: its smallest route MTU metric,
    device MTU (any device but loopback: tunnels too) and learnable path
    MTU, less the encapsulation. (IPv6 routes are not read: their MTU
    metrics cannot go below the 1280 the IPv6 floor already is.)"""
    options = link.vxlan
    smallest = remembered("interfaces.smallest_mtu", snapshot, _smallest_mtu, 10 if options.ipv6 else 2,
                          by_answer=True)
    return max(0, smallest - options.overhead)


def _smallest_mtu(snapshot, family: int) -> int:
    """The smallest MTU an outer packet of `family` may meet in this
    namespace (encapsulated_len_cap; by answer: a new pod's veth leaves a
    VXLAN device's decision alone)."""
    floor = IPV6_MIN_MTU if family == 10 else snapshot.sysctls.route_min_pmtu
    mtus = [floor]
    mtus += [other.mtu for other in snapshot.links if other.link_type != ARPHRD_LOOPBACK and other.mtu]
    mtus += [route.mtu for route in snapshot.routes if route.family == family and route.mtu]
    return min(min(mtus), 0xFFFF)


def bridge_sendable(link, snapshot) -> bool:
    """A port of a bridge that would transmit a bridged frame as Linux does:
    up, with carrier, in forwarding state, and without a backup port (which
    Linux would use instead when the carrier drops). (The fast path's own
    redirect there also needs no nf_tables egress chain on it: iface_facts.)"""
    port = link.bridge_port
    master = link_at(snapshot, link.master) if link.master else None
    return (port is not None and master is not None and master.kind == "bridge"
            and link.up and link.oper_up and port.state == BR_STATE_FORWARDING and not port.backup_port)


def mac_bytes(mac: str) -> bytes:
    try:
        raw = bytes(int(part, 16) for part in mac.split(":"))
    except (ValueError, AttributeError):
        return bytes(6)
    return raw if len(raw) == 6 else bytes(6)


def interface_tables(facts: tuple[IfaceFacts, ...]) -> tuple[Table, ...]:
    """lfp_ifaces (facts by ifindex), lfp_tx_ports and lfp_tx6_ports (the
    egresses a routed XDP redirect may use: able to take XDP frames, and
    sending routed IPv4 — forwarding — or routed IPv6) and
    lfp_br_tx_ports (those a bridged one may use: bridge ports that send)."""
    usable = [f for f in facts if f.ifindex < MAX_IFACE_SLOTS]
    ifaces = Table(IFACES, "pipeline", U32, IFACE,
                   frozenset((u32(f.ifindex), pack_iface(f)) for f in usable if pack_iface(f) != bytes(IFACE.size)),
                   kind=ARRAY, by_ifindex=True, describe="interface facts by ifindex")
    tx = Table(TX_PORTS, "pipeline", U32, U32,
               frozenset((u32(f.ifindex), u32(f.ifindex)) for f in usable
                         if f.flags & IF_XDP_TX and f.flags & IF_TC_TX and f.flags & IF_FORWARDING),
               kind=DEVMAP, by_ifindex=True, describe="XDP egresses of routed IPv4")
    tx6 = Table(TX6_PORTS, "pipeline", U32, U32,
                frozenset((u32(f.ifindex), u32(f.ifindex)) for f in usable
                          if f.flags & IF_XDP_TX and f.flags & IF_ROUTED_TX and f.flags & IF_IPV6_TX),
                kind=DEVMAP, by_ifindex=True, describe="XDP egresses of routed IPv6")
    bridged = Table(BRIDGE_TX_PORTS, "pipeline", U32, U32,
                    frozenset((u32(f.ifindex), u32(f.ifindex)) for f in usable
                              if f.flags & IF_XDP_TX and f.flags & IF_BRIDGE_TX),
                    kind=DEVMAP, by_ifindex=True, describe="XDP egresses of bridged frames")
    return ifaces, tx, tx6, bridged
