"""Differential proof of the stateful filter: a ruleset that heads with
`--ctstate INVALID -j DROP` and `--ctstate RELATED,ESTABLISHED -j ACCEPT`
(the shape of Docker's and kube-proxy's), a nat table, and UDP connections
established through the DUT by real exchanges (first datagram, reply, a
datagram after conntrack's 2 s stream mark). Then the same frames through
Linux alone and Linux + LinuxFP, byte-compared: established datagrams (of
every length, valid or not), new connections, NATed ones, TCP and ICMP.
The fast path must have carried the established datagrams itself, and
kept their conntrack entries as alive as Linux does."""
from __future__ import annotations

import json
import time

import pytest

from controller_counting import Counting, absorbed, counting
from controller_counting import reasons as count_reasons
from linuxfp.lab import RouterTopology, run_differential
from linuxfp.lab.conntrack import malformed_udp, timeouts_to
from linuxfp.lab.differential import Step
from linuxfp.lab.frames import icmp_frame, tcp_frame, udp_frame
from linuxfp.lab.packet_io import inject
from linuxfp.lab.rulesets import native_ruleset, stateful_forward

pytestmark = pytest.mark.netns

SRC = RouterTopology.SRC_IP
ALLOWED = [f"198.19.0.{10 + i}" for i in range(6)]       # established, accepted
BLOCKED_LATER = ["198.19.2.5", "198.19.2.6"]              # established, then blocked by a rule
NATED = ["198.19.3.7"]                                    # established through MASQUERADE
ESTABLISHED = ALLOWED + BLOCKED_LATER + NATED
RULES = stateful_forward(["-i to-src -p udp -m udp --dport 5000:5099 -j ACCEPT",
                          "-i to-sink -m state --state NEW -j DROP"], ["-d 198.19.9.0/24 -j DROP"],
                         masquerade="-d 198.19.3.0/24 -o to-sink")


def _port(dst: str) -> int:
    return 5000 + int(dst.rsplit(".", 1)[1])


def _forward(router, dst: str, size: int, ident: int, sport: int | None = None) -> bytes:
    return udp_frame(router.src_if.mac, router.dut_left.mac, SRC, dst, sport=sport or 40000 + ident % 7,
                     dport=_port(dst), size=size, ident=ident)


def _reply(router, dst: str) -> bytes:
    # the reply of a MASQUERADEd connection goes to the DUT's address
    to = RouterTopology.DUT_RIGHT_IP if dst in NATED else SRC
    return udp_frame(router.sink_if.mac, router.dut_right.mac, dst, to, sport=_port(dst), dport=40001)


def _connect(router, native: bool = False) -> None:
    """Each connection: a datagram, its reply, and one more after conntrack's
    stream mark (2 s), which makes the entry ASSURED. `native`: RULES as the
    nft tool's own tables."""
    if native:
        router.dut.run(["nft", "-f", "-"], input=native_ruleset(RULES, "ip"))
    else:
        router.dut.run(["iptables-restore"], input=RULES)
    opening = [_forward(router, dst, 80, 1, sport=40001) for dst in ESTABLISHED]
    inject(router.src, "to-dut", opening)
    time.sleep(0.2)
    inject(router.sink, "to-dut", [_reply(router, dst) for dst in ESTABLISHED])
    time.sleep(2.3)
    inject(router.src, "to-dut", opening)
    # Long enough that an entry the fast path forgot to refresh shows it.
    time.sleep(3)



def frames(router, index: int) -> list[bytes]:
    out = []
    ident = 100 * (index + 1)
    sizes = (60, 61, 63, 64, 99, 128, 333, 512, 513, 700, 1023, 1400, 1514)
    for dst in ESTABLISHED:
        for size in sizes:
            ident += 1
            out.append(_forward(router, dst, size, ident, sport=40001))
        # conntrack's verdicts on malformed datagrams of an established connection
        good = _forward(router, dst, 200, ident + 1, sport=40001)
        out.extend(malformed_udp(good))
        ident += 2
    for n in range(12):   # new connections: accepted by port, or dropped by the policy or GUARD
        dst = ("198.19.0.40", "198.19.9.1", "198.19.4.4")[n % 3]
        out.append(udp_frame(router.src_if.mac, router.dut_left.mac, SRC, dst, sport=41000 + n,
                             dport=(5050, 6000)[n % 2], ident=ident + n))
    out.append(tcp_frame(router.src_if.mac, router.dut_left.mac, SRC, ALLOWED[0], sport=40001,
                         dport=_port(ALLOWED[0]), ident=ident + 20))
    out.append(icmp_frame(router.src_if.mac, router.dut_left.mac, SRC, ALLOWED[0], 8, 0, ident=ident + 21))
    return out



# (iptables' rules at XDP, the same as native nft tables at TC: the rules are
# read apart, evaluated by one classifier)
@pytest.mark.parametrize("hook,native", [("xdp", False), ("tc", True)], ids=["xdp", "tc-native"])
def test_established_udp_is_fast_pathed_as_linux_forwards_it(require_root, hook, native):
    """... with iptables' rules, or the same as native nft tables (`ct
    state`, a native nat table's masquerade)."""
    timeouts: list[dict[str, int]] = []
    guard = (["nft", "insert", "rule", "ip", "lfpfilter", "GUARD", "ip", "daddr", "198.19.2.0/24", "drop"] if native
             else ["iptables", "-I", "GUARD", "1", "-d", "198.19.2.0/24", "-j", "DROP"])

    def block(router):
        timeouts.append(timeouts_to(router.dut, ESTABLISHED))
        absorbed(seen, lambda: router.dut.run(guard))

    # (the counters are read as each step settles: the last step's are those of the burst before it)
    steps = [Step("stateful rules, connections", lambda router: _connect(router, native)),
             Step("block established", block), Step("unchanged", lambda router: None)]
    seen: list[Counting] = []
    report = run_differential(RouterTopology(prefixes=10), steps, counting(seen, hook), frames, prefix="lfp-ct")
    _fast_and_fresh(report, seen, timeouts, ALLOWED, BLOCKED_LATER, ESTABLISHED, sizes=13)


# Established connections, one MASQUERADEd, whose datagrams a raw
# PREROUTING rule drops from the second step on: before conntrack, which
# then never sees them, nor refreshes their entries
RAW_DROPPED = ["198.19.0.14", "198.19.0.15"] + NATED
STEADY = 60     # datagrams of one connection in a row
RAW_RULES = {False: [["iptables", "-t", "raw", "-A", "PREROUTING", "-d", "198.19.0.14/31", "-j", "DROP"],
                     ["iptables", "-t", "raw", "-A", "PREROUTING", "-d", NATED[0], "-j", "DROP"]],
             True: [["nft", "add", "table", "ip", "early"],
                    ["nft", "add", "chain", "ip", "early", "raw", "{ type filter hook prerouting priority raw; }"],
                    ["nft", "add", "rule", "ip", "early", "raw", "ip", "daddr", "198.19.0.14/31", "drop"],
                    ["nft", "add", "rule", "ip", "early", "raw", "ip", "daddr", NATED[0], "drop"]]}


@pytest.mark.parametrize("hook,native", [("xdp", False), ("tc", True)], ids=["xdp", "tc-native"])
def test_raw_drops_leave_connections_to_expire_as_linux_does(require_root, hook, native):
    """A raw PREROUTING rule (iptables', or a native chain at raw's
    priority) drops established connections' datagrams, a MASQUERADEd one's
    too, while connections are tracked and translated: the fast path drops
    them itself and leaves their entries unrefreshed, as conntrack — which
    never sees them — does, and refreshes the others' only after that
    verdict (the conntrack node looks a connection up before routing and
    leaves its refresh owed where it would change the entry: conntrack.h)."""
    timeouts: list[dict[str, int]] = []

    def raw(router):
        absorbed(seen, lambda: [router.dut.run(command) for command in RAW_RULES[native]])
        time.sleep(3)       # long enough that a refresh raw's drops must not make shows

    def burst(router, index: int) -> list[bytes]:
        # the steady step's: one established connection's datagram, again and again
        steady = _forward(router, ALLOWED[0], 200, 7, sport=40001)
        return [steady] * STEADY if index == 3 else frames(router, index)

    steps = [Step("stateful rules, connections", lambda router: _connect(router, native)),
             Step("raw drops some", raw),
             Step("unchanged", lambda router: timeouts.append(timeouts_to(router.dut, ESTABLISHED))),
             Step("steady", lambda router: None), Step("after", lambda router: None)]
    seen: list[Counting] = []
    report = run_differential(RouterTopology(prefixes=10), steps, counting(seen, hook), burst, prefix="lfp-ctraw")
    assert report.ok, report.render()
    # (the burst after the raw step shows in the reading after the next)
    before, after = (count_reasons(seen[0].stats[k]) for k in (2, 3))
    dropped = after.get("filter_dropped", 0) - before.get("filter_dropped", 0)
    assert dropped >= len(RAW_DROPPED) * 13, (before, after)
    # ... and forwarded the rest of the established datagrams
    forwarded = sum(i["fast_path"] for i in seen[0].stats[3]["interfaces"]) - sum(
        i["fast_path"] for i in seen[0].stats[2]["interfaces"])
    assert forwarded >= (len(ESTABLISHED) - len(RAW_DROPPED)) * 13, (forwarded, dropped)
    assert not after.get("filter_stale") and not after.get("filter_unconfigured"), after
    # The conntrack node left a refresh owed (a second lookup) only where
    # it would change the entry: for a steady flow's first datagram of each
    # jiffy (4 ms at this kernel's HZ), not for every one — the steady
    # step's burst of one connection's datagrams spans a few jiffies
    owed, steady = (count_reasons(seen[0].stats[5], kinds).get(name, 0) - count_reasons(seen[0].stats[4], kinds).get(
        name, 0) for kinds, name in ((("events",), "ct_refresh_owed"), (("fast",), "forwarded")))
    assert steady == STEADY and 0 < owed <= STEADY // 3, (owed, steady)
    kernel, accelerated = timeouts
    assert set(kernel) == set(accelerated) == set(ESTABLISHED), timeouts
    for dst in RAW_DROPPED:
        assert accelerated[dst] <= kernel[dst] + 1, (dst, timeouts)
    for dst in set(ALLOWED) - set(RAW_DROPPED):
        assert accelerated[dst] >= kernel[dst] - 1, (dst, timeouts)


def _fast_and_fresh(report, seen, timeouts, allowed, blocked, established, sizes: int) -> None:
    """What the stateful differentials ask of Linux + LinuxFP besides the
    same bytes."""
    assert report.ok, report.render()
    stats = seen[0].stats[-1]
    reasons = count_reasons(stats)
    # Established datagrams went through the fast path, forwarded and dropped ...
    assert sum(i["fast_path"] for i in stats["interfaces"]) >= len(allowed) * sizes, json.dumps(stats)
    assert reasons.get("filter_dropped", 0) >= len(blocked) * sizes, reasons
    # ... everything conntrack had a say in went to the kernel, each for its reason.
    for reason in ("filter_ct_new", "filter_ct_state", "filter_ct_proto", "filter_ct_invalid"):
        assert reasons.get(reason, 0) > 0, (reason, reasons)
    # TCP, which the filter would pass anyway, went before routing
    # (ct_prerouting.h): none reached the filter.
    assert reasons.get("ct_tcp_tracked", 0) > 0 and not reasons.get("filter_ct_tcp"), reasons
    assert not reasons.get("filter_stale") and not reasons.get("filter_unconfigured"), reasons
    # The entries the fast path kept alive are as fresh as Linux keeps them.
    kernel, accelerated = timeouts
    assert set(kernel) == set(accelerated) == set(established), timeouts
    for dst in allowed:
        assert accelerated[dst] >= kernel[dst] - 1, timeouts


@pytest.mark.parametrize("hook,accounting", [("tc", False), ("xdp", False), ("tc", True)],
                         ids=["tc", "xdp", "tc-accounting"])
def test_datagrams_of_local_sockets_keep_their_checksum_state(router_topology, ip_forw_datagrams, hook, accounting):
    """A sender's own socket leaves the UDP checksum to be filled later
    (CHECKSUM_PARTIAL across veths, as from every container): conntrack
    takes it as valid, and so does the fast path at TC, which can read the
    skb's checksum state. XDP cannot: it sums the datagram, finds the
    partial checksum wrong, and hands it to the kernel, which forwards it.
    Every datagram arrives either way; TC carries the established ones —
    unless conntrack counts them (nf_conntrack_acct): then the kernel must."""
    from controller.launcher import ControllerProcess, linuxfp_stats
    from udp_peers import assured, udp_peers

    r = router_topology
    r.dut.run(["iptables-restore"], input=RULES)
    if accounting:
        r.dut.run(["sysctl", "-qw", "net.netfilter.nf_conntrack_acct=1"])
    sink_ip = RouterTopology.SINK_IP
    with udp_peers(r) as (a, b), ControllerProcess(r.dut.name, hook=hook) as controller:
        controller.settled()
        assured(a, b)
        before = ip_forw_datagrams(r.dut)
        sizes = [1 + n * 29 for n in range(48)]
        for size in sizes:
            payload = bytes((size + i) & 0xFF for i in range(size))
            a.sendto(payload, (sink_ip, 5001))
            assert b.recvfrom(4096)[0] == payload
        stats = linuxfp_stats(r.dut.name)
    by_name = {entry["ifname"]: entry for entry in stats["interfaces"]}
    passed = by_name["to-src"]["nodes"]["filter"]["passed"]
    kernel_forwarded = ip_forw_datagrams(r.dut) - before
    if accounting:
        assert kernel_forwarded == len(sizes) and passed.get("filter_ct_state", 0) >= len(sizes), passed
    elif hook == "tc":
        assert kernel_forwarded == 0 and not passed.get("filter_ct_invalid"), passed
    else:
        assert kernel_forwarded == len(sizes) and passed.get("filter_ct_invalid", 0) >= len(sizes), passed


SRC6 = RouterTopology.SRC_IP6
ALLOWED6 = [f"2001:db8:100::{10 + i}" for i in range(6)]
BLOCKED_LATER6 = ["2001:db8:100:2::5", "2001:db8:100:2::6"]
NATED6 = ["2001:db8:100:3::7"]
ESTABLISHED6 = ALLOWED6 + BLOCKED_LATER6 + NATED6
RULES6 = stateful_forward(["-i to-src -p udp -m udp --dport 5000:5099 -j ACCEPT",
                           "-i to-sink -m state --state NEW -j DROP"], ["-d 2001:db8:100:9::/64 -j DROP"],
                          masquerade="-d 2001:db8:100:3::/64 -o to-sink")


def _port6(dst: str) -> int:
    return 5000 + int(dst.rsplit(":", 1)[1], 16)


def _forward6(router, dst: str, size: int, sport: int = 40001) -> bytes:
    from linuxfp.lab.frames import ipv6_udp_frame

    return ipv6_udp_frame(router.src_if.mac, router.dut_left.mac, SRC6, dst, sport=sport, dport=_port6(dst), size=size)


def _connect6(router) -> None:
    """_connect() for IPv6: ip6tables' rules, connections through the DUT."""
    from linuxfp.lab.frames import ipv6_udp_frame

    router.dut.run(["ip6tables-restore"], input=RULES6)
    opening = [_forward6(router, dst, 80) for dst in ESTABLISHED6]
    inject(router.src, "to-dut", opening)
    time.sleep(0.2)
    replies = [ipv6_udp_frame(router.sink_if.mac, router.dut_right.mac, dst,
                              RouterTopology.DUT_RIGHT_IP6 if dst in NATED6 else SRC6, sport=_port6(dst), dport=40001)
               for dst in ESTABLISHED6]
    inject(router.sink, "to-dut", replies)
    time.sleep(2.3)
    inject(router.src, "to-dut", opening)
    time.sleep(3)


def frames6(router, index: int) -> list[bytes]:
    from linuxfp.lab.frames import icmpv6, ipv6_frame, ipv6_udp_frame, tcp6

    src, dut = router.src_if.mac, router.dut_left.mac
    out = []
    for dst in ESTABLISHED6:
        for size in (62, 63, 64, 99, 128, 333, 512, 513, 700, 1023, 1400, 1514):
            out.append(_forward6(router, dst, size))
        out.extend(malformed_udp(_forward6(router, dst, 200 + index)))
    for n in range(12):   # new connections: accepted by port, or dropped by the policy or GUARD
        dst = ("2001:db8:100::40", "2001:db8:100:9::1", "2001:db8:100:4::4")[n % 3]
        out.append(ipv6_udp_frame(src, dut, SRC6, dst, sport=41000 + n, dport=(5050, 6000)[n % 2]))
    first = ALLOWED6[0]
    out.append(ipv6_frame(src, dut, SRC6, first, 6, tcp6(SRC6, first, 40001, _port6(first))))
    out.append(ipv6_frame(src, dut, SRC6, first, 58, icmpv6(SRC6, first, 128, 0, bytes(4 + index))))
    return out


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_established_ipv6_udp_is_fast_pathed_as_linux_forwards_it(require_root, hook):
    """The same for ip6tables and IPv6's connection tracking: established
    datagrams (of every length, valid or not, a zero checksum valid for
    conntrack) forwarded and dropped by the fast path, the rest — new,
    NATed, TCP, ICMPv6 — left to the kernel, and the entries kept alive."""
    timeouts: list[dict[str, int]] = []

    def block(router):
        timeouts.append(timeouts_to(router.dut, ESTABLISHED6))
        absorbed(seen, lambda: router.dut.run(["ip6tables", "-I", "GUARD", "1", "-d", "2001:db8:100:2::/64",
                                               "-j", "DROP"]))

    steps = [Step("stateful rules, connections", _connect6), Step("block established", block),
             Step("unchanged", lambda router: None)]
    seen: list[Counting] = []
    report = run_differential(RouterTopology(prefixes=10, ipv6=True), steps, counting(seen, hook), frames6,
                              prefix="lfp-ct6")
    _fast_and_fresh(report, seen, timeouts, ALLOWED6, BLOCKED_LATER6, ESTABLISHED6, sizes=12)
