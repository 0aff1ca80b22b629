"""The IPv6 differential workload for `RouterTopology(ipv6=True)`: frames
that exercise what ipv6_rcv() and ip6_forward() handle specially, and steps
that change the DUT's IPv6 configuration the way an operator would.

As for IPv4 (standard.py), every flow takes its own source from the
router's IPv6 source pool and every round a fresh block of them; ICMPv6
errors are not rate limited in the lab (topology.IPV6_HOST_SYSCTLS), so
each is sent exactly once per packet in both runs.
"""

from __future__ import annotations

import functools
from ipaddress import IPv6Address

from .differential import Step
from .frames import (
    BROADCAST_MAC,
    IPPROTO_TCP,
    IPPROTO_UDP,
    NEXTHDR_DEST,
    NEXTHDR_FRAGMENT,
    NEXTHDR_HOP,
    NEXTHDR_ICMPV6,
    NEXTHDR_NONE,
    NEXTHDR_ROUTING,
    icmpv6,
    ipv6_extension,
    ipv6_fragment_header,
    ipv6_frame,
    padded,
    tcp6,
    truncated,
    udp6,
)
from .topology import Router, RouterTopology

# Which routed prefix each kind of traffic targets (indices into Router.prefixes6).
ORDINARY, BLACKHOLED, DELETED, PROHIBITED, POLICY, LOCKED_MTU, UNLOCKED_MTU, MULTIPATH, ECHO = 0, 1, 2, 3, 4, 5, 6, 7, -1
MIN_PREFIXES = 8
# Not on-link before the step adds it: unroutable until then (an on-link
# address nobody answers would be solicited, and fail, on timers).
ADDED_ADDRESS = "2001:db8:300::1/64"
UNROUTABLE = "2001:db8:ffff::7"
FOREIGN_MAC = "02:00:00:00:99:99"
# Link-local addresses (EUI-64 of topology.default_mac) that exist: one
# nobody answered would be solicited on timers.
DUT_LEFT_LINK_LOCAL = "fe80::ff:fe00:102"
SRC_LINK_LOCAL = "fe80::ff:fe00:101"     # src's: where the DUT's errors to a link-local source go
SOURCES_PER_ROUND = 96

# Hop-by-hop router alert (MLD), a destination option the DUT does not know
# with "skip" semantics, a type 0 routing header with no segments left.
ROUTER_ALERT = bytes([5, 2, 0, 0])
UNKNOWN_SKIP_OPTION = bytes([0x1E, 2, 0, 0])
ROUTING_TYPE0_DONE = bytes([0, 0]) + bytes(4)


def round_sources6(router: Router, round_: int):
    """The fresh IPv6 source addresses of one round, in the order the flows take them."""
    base = int(router.source_pool6.network_address) + (round_ << 16)
    return (str(IPv6Address(base + offset)) for offset in range(1, SOURCES_PER_ROUND))


def multipath_host(router: Router, index: int) -> str:
    """Destinations spread over the multipath prefix (its hash picks per flow)."""
    return str(router.prefixes6[MULTIPATH][0x100 + index])


def standard6_frames(router: Router, round: int = 0) -> list[bytes]:
    """About sixty IPv6 frames in one burst; `round` selects fresh sources."""
    if len(router.prefixes6) < MIN_PREFIXES:
        raise ValueError(f"standard6_frames needs RouterTopology(prefixes>={MIN_PREFIXES}, ipv6=True)")
    src_mac, dut_mac = router.src_if.mac, router.dut_left.mac
    sources = round_sources6(router, round)
    flows: list[list[bytes]] = []

    def to(prefix_index: int, host: int = 1) -> str:
        return str(router.prefixes6[prefix_index][host])

    def udp(dst: str, *, src: str | None = None, dst_mac: str = dut_mac, size: int = 0, extensions=(),
            **fields) -> bytes:
        """UDP after `extensions` ((next header, bytes) pairs, outermost first)."""
        source = src or next(sources)
        number = len(flows)
        payload = udp6(source, dst, 1000 + number, 9, bytes(range(256)) * (size // 256) + bytes(size % 256))
        next_header = IPPROTO_UDP
        for kind, header in reversed(extensions):
            payload = bytes([next_header]) + header[1:] + payload
            next_header = kind
        return ipv6_frame(src_mac, dst_mac, source, dst, next_header, payload, **fields)

    def echo(dst: str, *, src: str | None = None, seq: int = 1, **fields) -> bytes:
        source = src or next(sources)
        return ipv6_frame(src_mac, dut_mac, source, dst, NEXTHDR_ICMPV6,
                          icmpv6(source, dst, 128, 0, bytes([0, 7, 0, seq]) + b"linuxfp-lab-echo6"), **fields)

    def flow(*frames: bytes) -> None:
        flows.append(list(frames))

    # Ordinary traffic: three sizes; an echo flow; TCP; a traffic class and flow label.
    source = next(sources)
    flow(*(udp(to(ORDINARY), src=source, size=size) for size in (10, 250, 950)))
    source = next(sources)
    flow(*(echo(to(ECHO), src=source, seq=seq) for seq in (1, 2)))
    source = next(sources)
    flow(ipv6_frame(src_mac, dut_mac, source, to(ORDINARY, 2), IPPROTO_TCP, tcp6(source, to(ORDINARY, 2), 40001, 80)))
    flow(udp(to(ORDINARY), tclass=0xB8, flow_label=0x12345))
    # Hop limit.
    flow(udp(to(ORDINARY), hop_limit=0))
    flow(udp(to(ORDINARY), hop_limit=1))
    flow(udp(to(ORDINARY), hop_limit=2))
    # Extension headers: hop-by-hop (router alert), destination options,
    # a routing header, fragments (first and later).
    flow(udp(to(ORDINARY), extensions=((NEXTHDR_HOP, ipv6_extension(0, ROUTER_ALERT)),)))
    flow(udp(to(ORDINARY), extensions=((NEXTHDR_DEST, ipv6_extension(0, UNKNOWN_SKIP_OPTION)),)))
    flow(udp(to(ORDINARY), extensions=((NEXTHDR_ROUTING, ipv6_extension(0, ROUTING_TYPE0_DONE)),)))
    flow(udp(to(ORDINARY), extensions=((NEXTHDR_FRAGMENT, ipv6_fragment_header(0, 0, more=True, ident=0x1111)),)))
    flow(udp(to(ORDINARY), extensions=((NEXTHDR_FRAGMENT, ipv6_fragment_header(0, 100, ident=0x2222)),)))
    source = next(sources)
    flow(ipv6_frame(src_mac, dut_mac, source, to(ORDINARY), NEXTHDR_NONE, b""))
    # ICMPv6 errors are forwarded (their inner header feeds the multipath hash).
    source = next(sources)
    inner = ipv6_frame(src_mac, dut_mac, to(ORDINARY), source, IPPROTO_UDP, udp6(to(ORDINARY), source, 9, 1, b"x"))[14:]
    flow(ipv6_frame(src_mac, dut_mac, source, to(ORDINARY), NEXTHDR_ICMPV6,
                    icmpv6(source, to(ORDINARY), 1, 4, bytes(4) + inner)))
    # Broken headers: the wrong version, a payload length past the frame,
    # Ethernet padding (trimmed by Linux).
    flow(udp(to(ORDINARY), version=4))
    flow(truncated(udp(to(ORDINARY), size=200), 120))
    flow(udp(to(ORDINARY), payload_length=4))
    flow(padded(udp(to(ORDINARY)), 20))
    # Link-layer broadcast and multicast, IPv6 multicast: never forwarded.
    flow(udp(to(ORDINARY), dst_mac=BROADCAST_MAC))
    flow(udp(to(ORDINARY), dst_mac="33:33:00:00:00:01"))
    flow(udp("ff0e::1234", dst_mac="33:33:00:00:12:34"))
    flow(udp("ff05::1:3", dst_mac="33:33:00:01:00:03"))
    # A destination MAC that is not the DUT's (PACKET_OTHERHOST).
    flow(udp(to(ORDINARY), dst_mac=FOREIGN_MAC))
    # Special sources and destinations.
    flow(udp(to(ORDINARY), src="::1"))
    flow(udp(to(ORDINARY), src="::"))
    flow(udp(to(ORDINARY), src=SRC_LINK_LOCAL))
    flow(udp(to(ORDINARY), src="fec0::1"))
    flow(udp(to(ORDINARY), src="ff0e::1"))
    flow(udp(to(ORDINARY), src="::ffff:198.51.100.7"))
    flow(udp("::1"))
    flow(udp(DUT_LEFT_LINK_LOCAL))
    flow(udp("fec0::2"))
    flow(udp("::ffff:198.51.100.8"))
    flow(udp("::198.51.100.9"))
    # Local delivery on the DUT: port unreachable, echo reply; the DUT's
    # own address as a forwarded packet's source.
    flow(udp(RouterTopology.DUT_LEFT_IP6))
    flow(echo(RouterTopology.DUT_RIGHT_IP6))
    flow(udp(to(ORDINARY), src=RouterTopology.DUT_RIGHT_IP6))
    # No route; a next hop whose neighbour is not resolved yet (answered by the sink).
    flow(udp(UNROUTABLE))
    flow(udp(str(router.lazy_prefix6[1])))
    # VLAN-tagged (no VLAN device on the DUT).
    flow(udp(to(ORDINARY), vlan=100))
    # Longer than a locked route MTU (Packet Too Big), and than an unlocked
    # one (which forwarding ignores).
    flow(udp(to(LOCKED_MTU), size=1400))
    flow(udp(to(UNLOCKED_MTU), size=1400))
    # Flows spread over a prefix steps make multipath.
    for index in range(6):
        flow(udp(multipath_host(router, index), flow_label=index))
    # Prefixes that individual steps reconfigure, and an address a step adds.
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
    return str(router.prefixes6[index])


def _more_specific(router: Router) -> str:
    return str(next(router.prefixes6[ORDINARY].subnets(new_prefix=120)))   # holds host 1


def mtu_routes(router: Router) -> None:
    """The routes the MTU frames need: built with the topology's prefixes."""
    sink = RouterTopology.SINK_IP6
    _run_in_dut(router,
                f"ip -6 route replace {_prefix(router, LOCKED_MTU)} via {sink} mtu lock 1280",
                f"ip -6 route replace {_prefix(router, UNLOCKED_MTU)} via {sink} mtu 1280")


@functools.cache
def standard6_steps() -> tuple[Step[Router], ...]:
    """IPv6 configuration changes applied one after another to the DUT, each
    followed by a burst (always the same tuple, like standard_steps)."""
    sink = "to-sink"
    sink_ip, lazy = RouterTopology.SINK_IP6, RouterTopology.LAZY_GATEWAY6
    run = _run_in_dut

    return (
        Step("initial", mtu_routes),
        # A more specific route back out of the ingress: a hairpin (Linux
        # would send a redirect only to an on-link source).
        Step("route-add-more-specific",
             lambda r: run(r, f"ip -6 route add {_more_specific(r)} via {RouterTopology.SRC_IP6}")),
        Step("route-blackhole", lambda r: run(r, f"ip -6 route replace blackhole {_prefix(r, BLACKHOLED)}")),
        Step("route-delete", lambda r: run(r, f"ip -6 route del {_prefix(r, DELETED)}")),
        Step("route-prohibit", lambda r: run(r, f"ip -6 route replace prohibit {_prefix(r, PROHIBITED)}")),
        Step("route-multipath", lambda r: run(
            r, f"ip -6 route replace {_prefix(r, MULTIPATH)} nexthop via {sink_ip} nexthop via {lazy}")),
        Step("multipath-hash-l4", lambda r: run(r, "sysctl -qw net.ipv6.fib_multipath_hash_policy=1")),
        Step("multipath-hash-l3", lambda r: run(r, "sysctl -qw net.ipv6.fib_multipath_hash_policy=0")),
        Step("policy-rule", lambda r: run(
            r,
            f"ip -6 route add unreachable {_prefix(r, POLICY)} table 100",
            f"ip -6 rule add to {_prefix(r, POLICY)} table 100 priority 100")),
        Step("neighbour-change",
             lambda r: run(r, f"ip -6 neigh replace {sink_ip} lladdr {FOREIGN_MAC} nud permanent dev {sink}")),
        Step("neighbour-stale", lambda r: run(r, f"ip -6 neigh replace {sink_ip} lladdr 02:00:00:00:02:02 "
                                                 f"nud stale dev {sink}")),
        Step("neighbour-flush", lambda r: run(r, f"ip -6 neigh flush dev {sink} nud all")),
        Step("address-add", lambda r: run(r, f"ip address add {ADDED_ADDRESS} dev {sink}")),
        Step("address-delete", lambda r: run(r, f"ip address del {ADDED_ADDRESS} dev {sink}")),
        Step("mtu-lower", lambda r: run(r, f"ip link set dev {sink} mtu 1280")),
        Step("proxy-ndp-on", lambda r: run(r, "sysctl -qw net.ipv6.conf.all.proxy_ndp=1")),
        Step("proxy-ndp-off", lambda r: run(r, "sysctl -qw net.ipv6.conf.all.proxy_ndp=0")),
        # From here an IPv6-only router: IPv4 forwarding off everywhere, and
        # with it IPv4 redirects accepted (IN_DEV_RX_REDIRECTS).
        Step("ipv4-forwarding-off", lambda r: run(r, "sysctl -qw net.ipv4.ip_forward=0")),
        Step("forwarding-off", lambda r: run(r, "sysctl -qw net.ipv6.conf.all.forwarding=0")),
        Step("forwarding-on", lambda r: run(r, "sysctl -qw net.ipv6.conf.all.forwarding=1")),
        Step("ingress-ipv6-off", lambda r: run(r, "sysctl -qw net.ipv6.conf.to-src.disable_ipv6=1")),
    )
