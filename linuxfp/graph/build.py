"""Snapshot → Graph: where a node can reproduce Linux exactly, and the facts
it needs. Pure: reads only the snapshot."""
from __future__ import annotations

import ipaddress

from linuxfp.synth import Shape

from .model import (
    IF_FORWARDING, IF_RP_FILTER, IF_SET_PRIORITY, IF_SRC_FULL_CHECK,
    IF_TC_TX, IF_XDP_TX, NEIGH_CONFIRMED, NEIGH_PROBING, NEIGH_STALE, Graph, IfaceFacts,
    NeighbourFacts, Pipeline, Skipped,
)

ARPHRD_ETHER = 1
LOCAL_TABLE = 255
XDP_ACT_BASIC = 1 << 0

# Interface kinds whose packets Linux hands straight to IP (no bridge, tunnel
# or aggregation semantics in between), so the router node can stand in for it.
ROUTABLE_KINDS = frozenset({"", "veth"})

# Root qdiscs that neither reorder by class nor rewrite: an XDP redirect, which
# bypasses the egress qdisc, is then indistinguishable from Linux's output.
PLAIN_QDISCS = frozenset({"", "noqueue", "pfifo_fast", "fq_codel", "fq", "mq"})

# Route types that make __fib_validate_source() refuse a source when found
# outside the local table (where lfp_local_src already covers them).
_SOURCE_REFUSING_TYPES = frozenset({"local", "broadcast", "multicast", "anycast", "nat"})

HOOK_CHOICES = ("auto", "xdp", "tc")


def build_graph(snapshot, hook: str = "auto") -> Graph:
    """Per ingress interface, the pipeline Linux's configuration calls for."""
    if hook not in HOOK_CHOICES:
        raise ValueError(f"unknown hook {hook!r} (expected one of {', '.join(HOOK_CHOICES)})")
    full_check = needs_full_source_check(snapshot)
    cap = forward_length_cap(snapshot)
    facts = tuple(
        iface_facts(link, snapshot, full_check, cap)
        for link in snapshot.links
        if link.link_type == ARPHRD_ETHER
    )
    namespace_block = _namespace_blocker(snapshot)
    pipelines, skipped = [], []
    for link in snapshot.links:
        reason = namespace_block or _ingress_blocker(link, snapshot)
        chosen, why_not = _choose_hook(link, hook, snapshot)
        reason = reason or why_not
        if reason:
            skipped.append(Skipped(link.index, link.name, reason))
        else:
            pipelines.append(Pipeline(link.index, link.name, Shape(chosen, ("router",))))
    return Graph(tuple(pipelines), tuple(skipped), facts, local_source_addresses(snapshot),
                 neighbour_states(snapshot))


def _namespace_blocker(snapshot) -> str | None:
    nf = snapshot.netfilter
    if nf.active:
        return f"netfilter rules present ({nf.detail}); the filter node is not available yet"
    if snapshot.xfrm.active:
        return "IPsec (xfrm) policies present: ip_forward would check or transform packets"
    policy = snapshot.sysctls.multipath_hash_policy
    if policy not in (0, 1) and any(len(r.nexthops) > 1 or r.nh_id for r in snapshot.routes):
        return (f"fib_multipath_hash_policy={policy} hashes fields bpf_fib_lookup does not see, "
                "and multipath routes exist")
    return None


def _ingress_blocker(link, snapshot) -> str | None:
    if link.link_type != ARPHRD_ETHER:
        return "not an Ethernet interface"
    if link.master:
        master = snapshot.link(link.master)
        name = master.name if master else str(link.master)
        return f"port of {name}: the bridge node is not available yet"
    if link.kind not in ROUTABLE_KINDS:
        return f"{link.kind} interfaces are not supported yet"
    if link.tc_ingress:
        return "an ingress/clsact qdisc is present: its tc filters would be bypassed"
    return None


def _xdp_blocker(link, snapshot) -> str | None:
    """Why XDP could not reproduce Linux on this ingress (None: it can)."""
    if not link.xdp_features & XDP_ACT_BASIC:
        return "the device has no native XDP"
    if not link.xdp_sees_vlan_tags:
        return "the driver cannot report offloaded VLAN tags to XDP (rx-metadata vlan-tag)"
    if any(r.family == 2 and (r.fwmark or r.fwmask) for r in snapshot.rules):
        return "policy rules match fwmark, which XDP cannot see"
    return None


def _choose_hook(link, requested: str, snapshot) -> tuple[str, str | None]:
    """The hook for this ingress, or why the requested one cannot be used."""
    if requested == "tc":
        return "tc", None
    blocker = _xdp_blocker(link, snapshot)
    if requested == "xdp":
        return "xdp", (f"xdp: {blocker}; use --hook tc or auto" if blocker else None)
    return ("tc" if blocker else "xdp"), None


def iface_facts(link, snapshot, full_check: bool, fwd_len_cap: int = 0) -> IfaceFacts:
    conf = snapshot.sysctls.for_ifindex(link.index)
    flags = 0
    if conf is not None:
        flags |= IF_FORWARDING if conf.forwarding else 0
        flags |= IF_RP_FILTER if conf.rp_filter else 0
    if full_check:
        flags |= IF_SRC_FULL_CHECK
    if snapshot.sysctls.forward_update_priority:
        flags |= IF_SET_PRIORITY
    # Accepted ICMP redirects create next-hop exceptions bpf_fib_lookup ignores.
    redirects = conf is not None and conf.accept_redirects
    sendable = (link.up and link.oper_up and link.kind in ROUTABLE_KINDS and not link.master
                and not redirects)
    if sendable:
        flags |= IF_TC_TX
        # An XDP redirect skips the egress qdisc and tc egress filters.
        if link.can_receive_xdp_redirect and (link.qdisc or "") in PLAIN_QDISCS and not link.tc_ingress:
            flags |= IF_XDP_TX
    return IfaceFacts(link.index, flags, link.mtu, _mac_bytes(link.mac), fwd_len_cap)


def forward_length_cap(snapshot) -> int:
    """The smallest route MTU metric of the namespace (0 when none): Linux's
    forwarding honours these, bpf_fib_lookup() only when locked, so longer
    packets go to the kernel rather than risk a difference."""
    mtus = [r.mtu for r in snapshot.routes if r.family == 2 and r.mtu]
    if not mtus:
        return 0
    if snapshot.sysctls.forward_use_pmtu:
        # Linux then prefers a learned path MTU, which bpf_fib_lookup ignores
        # when a metric is set: only minimum-size packets are safe.
        return 68
    return min(min(mtus), 0xFFFF)


def _mac_bytes(mac: str) -> bytes:
    try:
        raw = bytes(int(part, 16) for part in mac.split(":"))
    except (ValueError, AttributeError):
        return bytes(6)
    return raw if len(raw) == 6 else bytes(6)


def local_source_addresses(snapshot) -> frozenset[str]:
    """Sources Linux refuses on forwarded packets: every address of the host
    (inet_lookup_ifaddr_rcu sees addresses of down links too) and every local or
    broadcast destination of the local table (what a reverse lookup would find)."""
    addrs = {a.host_address for a in snapshot.addresses if a.family == 2}
    for route in snapshot.routes:
        if route.family == 2 and route.table == LOCAL_TABLE and route.type in _SOURCE_REFUSING_TYPES:
            net = ipaddress.ip_network(route.dst, strict=False)
            if net.prefixlen == 32:
                addrs.add(str(net.network_address))
    return frozenset(addrs)


_NUD_CONFIRMED = 0x02 | 0x40 | 0x80     # REACHABLE, NOARP, PERMANENT
_NUD_STALE = 0x04
_NUD_PROBING = 0x08 | 0x10              # DELAY, PROBE


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


def needs_full_source_check(snapshot) -> bool:
    """Whether a source can be refused by a route lfp_local_src does not hold:
    the local table is not consulted first, or another table has routes of a
    type that makes __fib_validate_source() fail."""
    local_first = any(
        r.family == 2 and r.priority == 0 and r.table == LOCAL_TABLE and r.action == "to_tbl"
        and not r.has_selectors
        for r in snapshot.rules
    )
    if not local_first:
        return True
    return any(
        r.family == 2 and r.type in _SOURCE_REFUSING_TYPES
        and (r.table != LOCAL_TABLE or not r.dst.endswith("/32"))   # lfp_local_src holds /32s only
        and not _LOOPBACK.supernet_of(ipaddress.ip_network(r.dst, strict=False))  # martian anyway
        for r in snapshot.routes
    )


_LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
