"""Differential proof of NAT in the fast path: established UDP connections
through a gateway that MASQUERADEs, forwards a port (DNAT) and serves an
address translated both ways (DNAT and MASQUERADE, a Kubernetes service's
shape), set up by real exchanges, then the same frames through Linux alone
and Linux + LinuxFP, byte-compared — in both directions (the replies of a
MASQUERADEd connection are addressed to the gateway itself), at XDP and TC.
The fast path must have carried the established datagrams itself, and
decide rules that tell connections with NAT apart (--ctstate DNAT,
! --ctstate SNAT) per connection as the kernel does; a connection whose route moves off
MASQUERADE's device must go to the kernel."""
from __future__ import annotations

import ipaddress
import struct
import time

import pytest

from controller_counting import Counting, absorbed, counting
from controller_counting import reasons as count_reasons
from linuxfp.lab import RouterTopology, run_differential
from linuxfp.lab.conntrack import malformed_udp, timeouts_to
from linuxfp.lab.differential import Step
from linuxfp.lab.frames import udp_frame
from linuxfp.lab.packet_io import inject

pytestmark = pytest.mark.netns

SRC, GATEWAY = RouterTopology.SRC_IP, RouterTopology.DUT_RIGHT_IP
MASQUERADED = ["198.19.1.10", "198.19.1.11"]      # src -> here: MASQUERADE out of to-sink
SERVICE, BACKEND = "198.51.100.10", "198.19.2.5"  # src -> SERVICE:53 is BACKEND:5353, MASQUERADEd
# PEER -> GATEWAY:7000 is SRC:7001 (a routed address behind sink, which
# answers nothing: an ICMP error of its own would carry an IP ID of its own)
PEER, FORWARDED_PORT, INSIDE_PORT = "198.19.3.9", 7000, 7001
CLIENT_PORT, PEER_PORT = 40001, 45000

RULES = "\n".join([
    "*filter", ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]",
    "-A FORWARD -m conntrack --ctstate INVALID -j DROP",
    "-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
    "-A FORWARD -i to-src -p udp -j ACCEPT",
    f"-A FORWARD -i to-sink -d {SRC} -p udp --dport {INSIDE_PORT} -j ACCEPT",
    "COMMIT",
    "*nat", ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]",
    f"-A PREROUTING -i to-src -d {SERVICE} -p udp --dport 53 -j DNAT --to-destination {BACKEND}:5353",
    f"-A PREROUTING -i to-sink -d {GATEWAY} -p udp --dport {FORWARDED_PORT} "
    f"-j DNAT --to-destination {SRC}:{INSIDE_PORT}",
    "-A POSTROUTING -o to-sink -d 198.19.0.0/16 -j MASQUERADE",
    "COMMIT", ""])


# A native chain at mangle's priority (after conntrack), ahead of
# destination NAT: it sees a translated packet's destination as it came (the service's requests
# dropped; the MASQUERADEd replies, addressed to the gateway, not), the fast
# path's filter as the conntrack node rewrote it — so those are the
# kernel's; an untranslated destination is decided in the fast path
AHEAD_OF_DNAT = f"""table ip lfpearly {{
    chain pre {{ type filter hook prerouting priority mangle;
        ip daddr {SERVICE} drop
        ip daddr {SRC} drop
        ip daddr {MASQUERADED[1]} drop
    }}
}}
"""


def _out(router, dst: str, dport: int, size: int = 80, **ip) -> bytes:
    """src -> dst (a connection's original direction, or a port-forward's reply)."""
    sport = INSIDE_PORT if dport == PEER_PORT else CLIENT_PORT
    return udp_frame(router.src_if.mac, router.dut_left.mac, SRC, dst, sport=sport, dport=dport, size=size, **ip)


def _in(router, src: str, sport: int, dst: str, dport: int, size: int = 80, **ip) -> bytes:
    """sink's side -> the gateway (replies, and a port-forward's original direction)."""
    return udp_frame(router.sink_if.mac, router.dut_right.mac, src, dst, sport=sport, dport=dport, size=size, **ip)


def _outbound(router, size: int = 80, **ip) -> list[bytes]:
    return ([_out(router, dst, 5000, size, **ip) for dst in MASQUERADED] + [_out(router, SERVICE, 53, size, **ip)]
            + [_out(router, PEER, PEER_PORT, size, **ip)])


def _inbound(router, size: int = 80, **ip) -> list[bytes]:
    return ([_in(router, dst, 5000, GATEWAY, CLIENT_PORT, size, **ip) for dst in MASQUERADED]
            + [_in(router, BACKEND, 5353, GATEWAY, CLIENT_PORT, size, **ip)]
            + [_in(router, PEER, PEER_PORT, GATEWAY, FORWARDED_PORT, size, **ip)])


def _connect(router) -> None:
    """Each connection: its first datagram, the reply, and one more after
    conntrack's stream mark (2 s), which makes the entry ASSURED."""
    router.dut.run(["iptables-restore"], input=RULES)
    firsts, replies = _outbound(router), _inbound(router)
    # the port-forward opens from the sink's side; the others from src's
    inject(router.src, "to-dut", firsts[:-1])
    inject(router.sink, "to-dut", replies[-1:])
    time.sleep(0.2)
    inject(router.sink, "to-dut", replies[:-1])
    inject(router.src, "to-dut", firsts[-1:])
    time.sleep(2.3)
    inject(router.src, "to-dut", firsts[:-1])
    inject(router.sink, "to-dut", replies[-1:])
    time.sleep(0.5)


SIZES = (60, 61, 63, 64, 99, 128, 333, 512, 513, 1023, 1400, 1514)


def _burst(router, frames, outbound: bool) -> list[bytes]:
    """Every size, a datagram without a checksum (valid: nothing of it to
    change), TTLs 1 and 2 — and, where conntrack's INVALID ends them in
    FORWARD's DROP, the malformed datagrams. (ICMP errors the DUT sends are
    rate limited per peer: none are provoked twice a step; and none about
    the service, whose errors leave with its address and an IP ID of the
    DUT's own, which the comparison cannot normalise.)"""
    service = len(MASQUERADED)
    out = [frame for size in SIZES for frame in frames(router, size)]
    for i, good in enumerate(frames(router, 200)):
        bad_sum, no_sum, too_long, too_short = malformed_udp(good)
        out.append(no_sum)
        if outbound and i < service:
            out += [bad_sum, too_long, too_short]
    for ttl in (1, 2):
        out += [frame for i, frame in enumerate(frames(router, 120, ttl=ttl)) if i != service]
    return out


def _fold(data: bytes) -> int:
    """The one's complement sum of `data`'s 16-bit words, folded."""
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _zeroing(src: str, sport: int, dst: str, dport: int) -> tuple[bytes, int]:
    """A payload and an IP ID for a 64-TTL datagram that, translated to
    src:sport -> dst:dport with its TTL spent by one, has both checksums
    zero: the UDP one, which NAT then writes as 0xffff (__udp_manip_pkt()),
    and the header's — what only the kernel's own forms of the one's
    complement zero (csum_replace4(), ip_decrease_ttl()) give byte for byte."""
    payload = bytearray(b"linuxfp nat edge..")
    length = 8 + len(payload)
    a, b = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed
    rest = _fold(a + b + struct.pack("!BBH", 0, 17, length) + struct.pack("!HHHH", sport, dport, length, 0)
                 + bytes(payload[:-2]) + b"\0\0")
    payload[-2:] = struct.pack("!H", 0xFFFF - rest)
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + length, 0, 0, 63, 17, 0, a, b)
    return bytes(payload), 0xFFFF - _fold(header)


def _edges(router, outbound: bool) -> list[bytes]:
    """Both checksums of the first MASQUERADEd connection's datagram, and of
    the service's (both addresses translated), zero once translated."""
    first = MASQUERADED[0]
    if outbound:
        cases = [(SRC, first, 5000, (GATEWAY, CLIENT_PORT, first, 5000)),
                 (SRC, SERVICE, 53, (GATEWAY, CLIENT_PORT, BACKEND, 5353))]
        frames = []
        for src, dst, dport, translated in cases:
            payload, ident = _zeroing(*translated)
            frames.append(udp_frame(router.src_if.mac, router.dut_left.mac, src, dst, sport=CLIENT_PORT,
                                    dport=dport, payload=payload, ident=ident))
        return frames
    cases = [(first, 5000, (first, 5000, SRC, CLIENT_PORT)), (BACKEND, 5353, (SERVICE, 53, SRC, CLIENT_PORT))]
    frames = []
    for src, sport, translated in cases:
        payload, ident = _zeroing(*translated)
        frames.append(udp_frame(router.sink_if.mac, router.dut_right.mac, src, GATEWAY, sport=sport,
                                dport=CLIENT_PORT, payload=payload, ident=ident))
    return frames


def _outbound_burst(router, index: int) -> list[bytes]:
    return _burst(router, _outbound, True) + _edges(router, True)


def _inbound_burst(router, index: int) -> list[bytes]:
    return _burst(router, _inbound, False) + _edges(router, False)


@pytest.mark.parametrize("hook", ["xdp", "tc"])
@pytest.mark.parametrize("inject_from", ["src", "sink"])
def test_connections_with_nat_are_translated_as_linux_translates_them(require_root, hook, inject_from):
    """Both directions of MASQUERADE, a port-forward and a service (DNAT and
    MASQUERADE on one connection): the same bytes as Linux, carried by the
    fast path. Then a rule that tells connections with NAT apart, dropping
    the DNATed ones not SNATed too (the port-forward's; the service's is
    both): the same bytes, decided by the fast path — the port-forward's
    dropped, the others carried. Then a native chain ahead of destination
    NAT (at mangle's priority): the same bytes, what it would see
    untranslated the kernel's."""
    timeouts: list[dict[str, int]] = []

    def tell_apart(router):
        timeouts.append(timeouts_to(router.dut, [*MASQUERADED, SERVICE, GATEWAY]))
        absorbed(seen, lambda: router.dut.run(["iptables", "-I", "FORWARD", "1", "-m", "conntrack", "--ctstate",
                                               "DNAT", "-m", "conntrack", "!", "--ctstate", "SNAT", "-j", "DROP"]))

    def chain_ahead_of_dnat(router):
        absorbed(seen, lambda: router.dut.run(["nft", "-f", "-"], input=AHEAD_OF_DNAT))

    steps = [Step("gateway with NAT, connections", _connect), Step("unchanged", lambda router: None),
             Step("a rule tells NAT apart", tell_apart), Step("still told apart", lambda router: None),
             Step("a chain ahead of DNAT", chain_ahead_of_dnat), Step("still ahead of DNAT", lambda router: None)]
    seen: list[Counting] = []
    topology = RouterTopology(prefixes=4, inject_from=inject_from)
    frames = _outbound_burst if inject_from == "src" else _inbound_burst
    report = run_differential(topology, steps, counting(seen, hook), frames, prefix="lfp-nat")
    assert report.ok, report.render()
    # (the counters are read as the controller starts and as each step
    # settles: a burst's are the difference of the two readings after it)
    # every size and no checksum per connection, TTL 2 but the service's, the edges
    valid = len(SIZES) * 4 + 4 + 3 + 2
    fast = [sum(i["fast_path"] for i in s["interfaces"]) for s in seen[0].stats]
    assert fast[2] - fast[1] >= valid, (fast, count_reasons(seen[0].stats[2]))
    # told apart per connection, in the fast path: three carried, one dropped
    # (each has every size and a datagram without a checksum at least)
    dropped = [count_reasons(s).get("filter_dropped", 0) for s in seen[0].stats]
    each = len(SIZES) + 1
    assert fast[4] - fast[3] >= 3 * each, (fast, count_reasons(seen[0].stats[4]))
    assert dropped[4] - dropped[3] >= each, (dropped, count_reasons(seen[0].stats[4]))
    # ahead of DNAT: a destination the conntrack node translated (the
    # service's requests, the MASQUERADEd replies, the port-forward) goes to
    # the kernel, whose chain sees it as it came; an untranslated one is
    # decided in the fast path (the first MASQUERADEd connection carried,
    # the second dropped)
    if inject_from == "src":
        assert fast[6] - fast[5] >= each, (fast, count_reasons(seen[0].stats[6]))
        assert dropped[6] - dropped[5] >= 2 * each, (dropped, count_reasons(seen[0].stats[6]))
    # the entries the fast path kept alive are as fresh as Linux keeps them
    kernel, accelerated = timeouts
    assert set(kernel) == set(accelerated) == {*MASQUERADED, SERVICE, GATEWAY}, timeouts
    assert all(accelerated[dst] >= kernel[dst] - 1 for dst in kernel), timeouts


def test_a_masqueraded_connection_routed_elsewhere_goes_to_the_kernel(require_root):
    """Linux drops a MASQUERADEd connection's packet routed out of another
    device than its own, and forgets the connection (nf_nat_oif_changed()):
    the fast path hands it over, and what follows is the kernel's too.
    (XDP only: the check is a node's, the same C at either hook.)"""
    hook = "xdp"
    def reroute(router):
        # (out of a third device: one back out of the ingress is the router's to pass, a hairpin)
        def change():
            for command in ("link add alt0 type veth peer name alt1", "link set alt1 up", "link set alt0 up",
                            "addr add 198.18.9.254/24 dev alt0",
                            "neigh replace 198.18.9.1 lladdr 02:00:00:00:09:01 dev alt0 nud permanent",
                            "route replace 198.19.1.0/24 via 198.18.9.1"):
                router.dut.run(["ip", *command.split()])
        absorbed(seen, change)

    # (a last step reads the counters of the burst before it)
    steps = [Step("gateway with NAT, connections", _connect), Step("route moves to src's side", reroute),
             Step("unchanged", lambda router: None)]
    seen: list[Counting] = []
    report = run_differential(RouterTopology(prefixes=4), steps, counting(seen, hook),
                              lambda router, index: [_out(router, dst, 5000, size) for dst in MASQUERADED
                                                     for size in SIZES], prefix="lfp-natr")
    assert report.ok, report.render()
    reasons = count_reasons(seen[0].stats[-1])
    assert reasons.get("nat_masq_elsewhere", 0) >= 1, reasons


@pytest.mark.parametrize("hook", ["tc", "xdp"])
def test_datagrams_of_local_sockets_are_translated_as_linux_translates_them(router_topology, ip_forw_datagrams,
                                                                             hook):
    """Real sockets on both sides of a MASQUERADEing gateway. A socket leaves
    the UDP checksum to be filled later (CHECKSUM_PARTIAL across veths): the
    kernel's NAT then changes only the pseudo-header's part of it, and so
    does the fast path at TC, which calls the kernel's own function on the
    skb; every datagram arrives whole, from the translated address, and TC
    carries both directions itself. XDP cannot see that state: the partial
    checksum does not verify there, so the kernel translates them."""
    from controller.launcher import ControllerProcess
    from udp_peers import SRC_PORT, SINK_PORT, assured, udp_peers

    r = router_topology
    sink = RouterTopology.SINK_IP
    r.dut.run(["iptables-restore"], input="\n".join([
        "*filter", ":FORWARD DROP [0:0]", "-A FORWARD -m conntrack --ctstate INVALID -j DROP",
        "-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        "-A FORWARD -i to-src -p udp -j ACCEPT", "COMMIT",
        "*nat", ":POSTROUTING ACCEPT [0:0]", "-A POSTROUTING -o to-sink -j MASQUERADE", "COMMIT", ""]))
    with udp_peers(r) as (a, b), ControllerProcess(r.dut.name, hook=hook) as controller:
        controller.settled()
        assert assured(a, b) == (GATEWAY, SRC_PORT)
        before = ip_forw_datagrams(r.dut)
        sizes = [1 + n * 31 for n in range(40)]
        for size in sizes:
            payload = bytes((size + i) & 0xFF for i in range(size))
            a.sendto(payload, (sink, SINK_PORT))
            assert b.recvfrom(4096) == (payload, (GATEWAY, SRC_PORT))
            b.sendto(payload[::-1], (GATEWAY, SRC_PORT))
            assert a.recvfrom(4096) == (payload[::-1], (sink, SINK_PORT))
    kernel_forwarded = ip_forw_datagrams(r.dut) - before
    assert kernel_forwarded == (0 if hook == "tc" else 2 * len(sizes)), kernel_forwarded
