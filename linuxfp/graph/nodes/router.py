"""The router node (bpf_modules/router.h): IPv4 and IPv6 forwarding decided
by the kernel's FIB, read live; it owns the local-source set and its
prefilter. Whether IPv6 may be routed at all is an interface fact
(interfaces.ipv6_routing_blocker)."""
from __future__ import annotations

import socket

from linuxfp.resources import modules_dir

from ..interfaces import ARPHRD_ETHER, ipv6_routing_blocker, routing_blocker
from ..remember import link_at, remembered
from ..tables import ARRAY, BE32, HASH, U8, U32, Table, be32, hint_table, u32
from . import Node, Stage, register

LOCAL_TABLE = 255
LOCAL_SRC, LOCAL_HINT = "lfp_local_src", "lfp_local_hint"
# fib_cache.h: LFP_FIB_POLICY_OFF, LFP_FIB6_POLICY_OFF
FIB_POLICY, FIB_POLICY_OFF, FIB6_POLICY_OFF = "lfp_fib_policy", 1, 2

# Route types that make __fib_validate_source() refuse a source when found
# outside the local table (where lfp_local_src already covers them).
_SOURCE_REFUSING_TYPES = frozenset({"local", "broadcast", "multicast", "anycast", "nat"})


def _in_loopback(dst: str) -> bool:
    """Whether the prefix (canonical "a.b.c.d/len") lies inside 127.0.0.0/8;
    string arithmetic: this runs per kept route on every address change."""
    address, _, length = dst.partition("/")
    return int(length) >= 8 and address.startswith("127.")


class Router(Node):
    name = "router"
    stage = Stage.ROUTE
    header = modules_dir() / "router.h"
    decides = True
    # The neighbour generation of the FIB-answer cache (fib_cache.h): the
    # kernel versions its routes, rules and links, not its neighbours.
    watch = modules_dir() / "router_watch.c"
    state_maps = ("lfp_fib_cache", "lfp_fib6_cache", "lfp_fib_epochs", "lfp_neigh_watch")

    def applies(self, snapshot, link) -> bool:
        if link.bridge_port is not None:
            # IP runs on the bridge: frames to its MAC arrive there
            master = link_at(snapshot, link.master) if link.master else None
            return master is not None and master.kind == "bridge" and master.link_type == ARPHRD_ETHER
        return not link.master and self.blocker(snapshot, link) is None

    def needs(self, snapshot, link) -> tuple[str, ...]:
        return ("bridge",) if link.bridge_port is not None else ()

    def blocker(self, snapshot, link) -> str | None:
        if link.link_type != ARPHRD_ETHER:
            return "not an Ethernet interface"
        if link.master:
            master = link_at(snapshot, link.master)
            if link.bridge_port is not None:
                return None     # bridged, not routed: the bridge node says why it does not apply
            name = master.name if master else str(link.master)
            kind = f" ({master.kind})" if master is not None and master.kind else ""
            return f"port of {name}{kind}: not supported yet"
        return routing_blocker(link, snapshot)

    def hook_blocker(self, snapshot, link, hook: str) -> str | None:
        # (the namespace's, the same for every interface: asked by answer,
        # so a new device's sysctls do not redo every interface's decision)
        return remembered("router.xdp_blocker", snapshot, _xdp_blocker, by_answer=True) if hook == "xdp" else None

    def notes(self, snapshot) -> tuple[str, ...]:
        # (otherwise FIB answers are cached; the datapath checks
        # ip_forward_use_pmtu per packet, so that note may lag, the cache never)
        notes = []
        if snapshot.sysctls.forward_use_pmtu:
            notes.append("FIB answers not cached: ip_forward_use_pmtu=1 (learned path MTUs change with no "
                         "generation the datapath can check)")
        elif why := fib_cache_off(snapshot):
            notes.append(f"FIB answers not cached: {why}")
        if why := ipv6_routing_blocker(snapshot):
            notes.append(f"IPv6 not routed: {why}")
        elif why := fib6_cache_off(snapshot):
            notes.append(f"IPv6 FIB answers not cached: {why}")
        return tuple(notes)

    def tables(self, snapshot) -> tuple[Table, ...]:
        local = local_source_addresses(snapshot)
        return (
            Table(LOCAL_SRC, self.name, BE32, U8, frozenset((socket.inet_aton(a), b"\x01") for a in local),
                  kind=HASH, describe="local addresses: refused as sources, passed as destinations"),
            hint_table(LOCAL_HINT, self.name, (be32(a) for a in local), "prefilter of lfp_local_src"),
            Table(FIB_POLICY, self.name, U32, U32, fib_policy_entries(snapshot), kind=ARRAY,
                  describe="the FIB-answer cache, per family: off where an answer changes with no generation"),
        )


ROUTER = register(Router())


def _xdp_blocker(snapshot) -> str | None:
    """Why XDP cannot route as Linux does in this namespace (None: it can)."""
    if any(r.family == 2 and (r.fwmark or r.fwmask) for r in snapshot.rules):
        return "policy rules match fwmark, which XDP cannot see"
    if snapshot.sysctls.multipath_hash_policy == 1 and any(len(r.nexthops) > 1 or r.nh_id
                                                            for r in snapshot.routes if r.family == 2):
        # (TC reads the skb's l4_hash and passes such packets: router.h)
        return ("fib_multipath_hash_policy=1 with multipath routes: Linux hashes the skb's L4 hash "
                "(the NIC's RSS hash, a socket's txhash), which XDP cannot see")
    return None


def fib_cache_off(snapshot) -> str | None:
    """Why FIB answers may not be cached though every generation the
    datapath reads is unchanged (None: they may). The window: from such a
    configuration's appearance to this table's write (the response time).
    Asked on every graph build: remembered while routes and sysctls are."""
    return remembered("router.fib_cache_off", snapshot, _fib_cache_off)


def _fib_cache_off(snapshot) -> str | None:
    routes, sysctls = snapshot.routes, snapshot.sysctls
    why = None
    if any(r.nh_id for r in routes if r.family == 2):
        why = ("routes use nexthop objects (a group's choice reads its members' neighbour entries, "
               "whose creation has no generation; a resilient group moves buckets by timer, and a cache "
               "hit does not keep a bucket busy)")
    elif any(s.ignore_routes_with_linkdown for s in sysctls.interfaces):
        why = "ignore_routes_with_linkdown is set (read by every lookup; setting it flushes nothing)"
    return why


def fib6_cache_off(snapshot) -> str | None:
    """fib_cache_off() for IPv6 (None: answers may be cached), with the same
    window (accept_ra: polled, ≤ 1 s). Routes that expire stop answering
    when their time is up, and nothing moves a generation until the garbage
    collector deletes them; multipath routes: Snapshot.routes6_uncached."""
    if snapshot.routes6_uncached:
        return snapshot.routes6_uncached[0][1]
    if any(s.ipv6_ignore_routes_with_linkdown for s in snapshot.sysctls.interfaces):
        return "ignore_routes_with_linkdown is set for IPv6 (read by every lookup; setting it flushes nothing)"
    if any(s.ipv6_accept_ra for s in snapshot.sysctls.interfaces):
        return ("an interface accepts router advertisements (they change routes' lifetimes and preferences "
                "in place, with no route event)")
    return None


def fib_policy_entries(snapshot) -> frozenset:
    """lfp_fib_policy's one entry: a bit per family whose cache is off."""
    bits = (FIB_POLICY_OFF if fib_cache_off(snapshot) else 0) | (FIB6_POLICY_OFF if fib6_cache_off(snapshot) else 0)
    return frozenset({(u32(0), u32(bits))} if bits else ())


def local_source_addresses(snapshot) -> frozenset[str]:
    """Sources Linux refuses on forwarded packets: every address of the host
    (inet_lookup_ifaddr_rcu sees addresses of down links too) and every local or
    broadcast destination of the local table (what a reverse lookup would find)."""
    addrs = {a.host_address for a in snapshot.addresses if a.family == 2}
    for route in snapshot.routes:
        if (route.family == 2 and route.table == LOCAL_TABLE and route.type in _SOURCE_REFUSING_TYPES
                and route.dst.endswith("/32")):
            addrs.add(route.dst[:-3])   # Route.dst is the kernel's canonical "a.b.c.d/len"
    return frozenset(addrs)


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
        and not _in_loopback(r.dst)  # martian anyway
        for r in snapshot.routes
    )


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
