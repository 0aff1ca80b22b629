"""The standard differential workload for `RouterTopology`: frames that
exercise every corner of IPv4 forwarding Linux handles specially, and steps
that change the DUT's configuration the way an operator would.

Each flow uses its own source address from the router's source pool, and
every step (round) uses a fresh block of them.  Linux rate limits
unreachable/prohibited errors per source address with a token bucket that
refills with time and is tuned by a global (not per-namespace) sysctl; fresh
sources keep every such error deterministic without touching the host.

Frames are chosen so that no host other than the DUT answers them (src and
sink do not forward, and the sink only ever receives traffic for addresses it
does not own or ARP it answers), and no ARP goes unanswered (retries would
arrive on a timer).
"""

from __future__ import annotations

import functools
from ipaddress import IPv4Address

from .differential import Step
from .frames import (
    BROADCAST_MAC,
    OPT_MALFORMED,
    OPT_RECORD_ROUTE,
    OPT_ROUTER_ALERT,
    arp_frame,
    icmp_echo_frame,
    ipv6_udp_frame,
    padded,
    truncated,
    udp_frame,
    with_bad_ip_checksum,
    with_ihl,
)
from .topology import Router, RouterTopology

# Which routed prefix each kind of traffic targets (indices into Router.prefixes).
ORDINARY, BLACKHOLED, DELETED, PROHIBITED, POLICY, OVERSIZED, ECHO = 0, 1, 2, 3, 4, 5, -1
MIN_PREFIXES = 7
ADDED_ADDRESS = "192.0.2.254/24"
UNROUTABLE = "203.0.113.7"
FOREIGN_MAC = "02:00:00:00:99:99"
MORE_SPECIFIC_HOST = 200  # inside the /25 that the route-add step points back at src
SOURCES_PER_ROUND = 64


def round_sources(router: Router, round_: int):
    """The fresh source addresses of one round, in the order the flows take them."""
    base = int(router.source_pool.network_address) + round_ * SOURCES_PER_ROUND
    if base + SOURCES_PER_ROUND > int(router.source_pool.broadcast_address):
        raise ValueError(f"round {round_} exceeds the source pool {router.source_pool}")
    return (str(IPv4Address(base + offset)) for offset in range(1, SOURCES_PER_ROUND))


def standard_frames(router: Router, round: int = 0) -> list[bytes]:
    """About forty frames in one burst; `round` selects a fresh block of source addresses."""
    if len(router.prefixes) < MIN_PREFIXES:
        raise ValueError(f"standard_frames needs RouterTopology(prefixes>={MIN_PREFIXES})")
    src_mac, dut_mac = router.src_if.mac, router.dut_left.mac
    dut_left, dut_right = str(router.dut_left.ip), str(router.dut_right.ip)
    sources = round_sources(router, round)
    flows: list[list[bytes]] = []

    def to(prefix_index: int) -> str:
        return str(router.prefixes[prefix_index][1])

    def udp(dst: str, *, src: str | None = None, dst_mac: str = dut_mac, **fields) -> bytes:
        number = len(flows)
        fields.setdefault("ident", 0x100 * number + 1)
        return udp_frame(src_mac, dst_mac, src or next(sources), dst, sport=1000 + number, **fields)

    def flow(*frames: bytes) -> None:
        flows.append(list(frames))

    # Ordinary traffic: a flow of three sizes, and an echo flow, both forwardable.
    source = next(sources)
    flow(*(udp(to(ORDINARY), src=source, size=size, ident=i) for i, size in enumerate((60, 300, 1000), 1)))
    source = next(sources)
    flow(*(icmp_echo_frame(src_mac, dut_mac, source, to(ECHO), ident=7, seq=seq) for seq in (1, 2)))
    # TTL handling.
    flow(udp(to(ORDINARY), ttl=1))
    flow(udp(to(ORDINARY), ttl=2))
    # IP options: forwarded with the slow path's rewriting, or rejected.
    flow(udp(to(ORDINARY), options=OPT_RECORD_ROUTE))
    flow(udp(to(ORDINARY), options=OPT_ROUTER_ALERT))
    flow(udp(to(ORDINARY), options=OPT_MALFORMED))
    # Fragments: a first fragment and a later one.
    flow(udp(to(ORDINARY), mf=True, ident=0x1111))
    flow(udp(to(ORDINARY), frag_offset=100, ident=0x2222))
    # Broken headers: dropped by ip_rcv.
    flow(with_ihl(udp(to(ORDINARY)), 4))
    flow(with_ihl(udp(to(ORDINARY)), 15))
    flow(truncated(udp(to(ORDINARY), size=200), 100))
    flow(with_bad_ip_checksum(udp(to(ORDINARY))))
    # Ethernet padding after the IP packet: Linux trims it before forwarding.
    flow(padded(udp(to(ORDINARY)), 20))
    # Link-layer and IP broadcast/multicast: never forwarded.
    flow(udp(to(ORDINARY), dst_mac=BROADCAST_MAC))
    flow(udp(to(ORDINARY), dst_mac="01:00:5e:13:00:01"))
    flow(udp(str(router.dut_left.addresses[0].network.broadcast_address), dst_mac=BROADCAST_MAC))
    flow(udp("255.255.255.255", dst_mac=BROADCAST_MAC))
    flow(udp("224.1.2.3", dst_mac="01:00:5e:01:02:03"))
    # A destination MAC that is not the DUT's (PACKET_OTHERHOST).
    flow(udp(to(ORDINARY), dst_mac=FOREIGN_MAC))
    # Local delivery on the DUT: port unreachable, echo reply.
    flow(udp(dut_left))
    flow(icmp_echo_frame(src_mac, dut_mac, next(sources), dut_right, ident=9, seq=1))
    # Martian sources: loopback, and the DUT's own address.
    flow(udp(to(ORDINARY), src="127.0.0.1"))
    flow(udp(to(ORDINARY), src=dut_right))
    # No route; a next hop whose neighbour is not resolved yet (answered by the sink).
    flow(udp(UNROUTABLE))
    flow(udp(str(router.lazy_prefix[1])))
    # ARP for the DUT (answered) and for nobody (ignored).
    flow(arp_frame(src_mac, "198.18.1.77", dut_left))
    flow(arp_frame(src_mac, "198.18.1.77", "198.18.1.99"))
    # Not IPv4: VLAN-tagged (no VLAN device on the DUT) and IPv6 (disabled).
    flow(udp(to(ORDINARY), vlan=100))
    flow(ipv6_udp_frame(src_mac, dut_mac, "2001:db8::1", "2001:db8:1::1"))
    # Larger than a lowered egress MTU: with DF (frag needed) and without (fragmented).
    flow(udp(to(OVERSIZED), size=1400, df=True))
    flow(udp(to(OVERSIZED), size=1400))
    # Prefixes that individual steps reconfigure, and an address a step adds.
    flow(udp(str(router.prefixes[ORDINARY][MORE_SPECIFIC_HOST])))
    flow(udp(to(BLACKHOLED)))
    flow(udp(to(DELETED)))
    flow(udp(to(PROHIBITED)))
    flow(udp(to(POLICY)))
    flow(udp(ADDED_ADDRESS.split("/")[0]))
    return [frame for frames in flows for frame in frames]


def _run_in_dut(router: Router, *commands: str) -> None:
    for command in commands:
        router.dut.run(command)


def _prefix(router: Router, index: int) -> str:
    return str(router.prefixes[index])


def _more_specific(router: Router) -> str:
    ordinary = router.prefixes[ORDINARY]
    return str(list(ordinary.subnets(prefixlen_diff=1))[1])  # the upper half, e.g. 198.19.0.128/25


@functools.cache
def standard_steps() -> tuple[Step[Router], ...]:
    """Configuration changes applied one after another to the DUT, each
    followed by a burst (always the same tuple: differentials that differ
    only in the accelerator share their kernel-alone observation)."""
    sink = "to-sink"
    sink_ip, lazy = RouterTopology.SINK_IP, RouterTopology.LAZY_GATEWAY
    run = _run_in_dut

    return (
        Step("initial", lambda r: None),
        # A more specific route back out of the ingress interface: longest
        # prefix match, and a hairpin (no ICMP redirect: the sources are not
        # on-link).
        Step(
            "route-add-more-specific",
            lambda r: run(r, f"ip route add {_more_specific(r)} via {RouterTopology.SRC_IP}"),
        ),
        Step("route-blackhole", lambda r: run(r, f"ip route replace blackhole {_prefix(r, BLACKHOLED)}")),
        Step("route-delete", lambda r: run(r, f"ip route del {_prefix(r, DELETED)}")),
        Step("route-prohibit", lambda r: run(r, f"ip route replace prohibit {_prefix(r, PROHIBITED)}")),
        Step(
            "route-multipath",
            lambda r: run(r, f"ip route replace {_prefix(r, ORDINARY)} nexthop via {sink_ip} nexthop via {lazy}"),
        ),
        Step(
            "policy-rule",
            lambda r: run(
                r,
                f"ip route add unreachable {_prefix(r, POLICY)} table 100",
                f"ip rule add to {_prefix(r, POLICY)} table 100 priority 100",
            ),
        ),
        Step(
            "neighbour-change",
            lambda r: run(r, f"ip neigh replace {sink_ip} lladdr {FOREIGN_MAC} nud permanent dev {sink}"),
        ),
        Step("neighbour-flush", lambda r: run(r, f"ip neigh flush dev {sink} nud all")),
        Step("address-add", lambda r: run(r, f"ip address add {ADDED_ADDRESS} dev {sink}")),
        Step("address-delete", lambda r: run(r, f"ip address del {ADDED_ADDRESS} dev {sink}")),
        Step("mtu-lower", lambda r: run(r, f"ip link set dev {sink} mtu 1280")),
        Step("forwarding-off", lambda r: run(r, "sysctl -qw net.ipv4.ip_forward=0")),
        Step("forwarding-on", lambda r: run(r, "sysctl -qw net.ipv4.ip_forward=1")),
        Step("link-down-up", lambda r: run(r, f"ip link set dev {sink} down", f"ip link set dev {sink} up")),
    )
