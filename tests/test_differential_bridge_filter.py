"""Differential proof of the bridge-filter node: hosts on a Linux bridge with
br_netfilter on (bridge-nf-call-iptables=1, as every Kubernetes node has)
and a stateful iptables ruleset of Docker's and kube-proxy's shape —
FORWARD policy DROP, `--ctstate INVALID -j DROP`, `--ctstate
RELATED,ESTABLISHED -j ACCEPT`, a port accepted with the bridge as -i and
-o (br_netfilter shows iptables the bridge, not its ports), a physdev rule
(which the fast path leaves to the kernel), a nat table — and UDP
connections established across the bridge by real exchanges. The same
frames through Linux alone and Linux + LinuxFP, byte-compared at every
host: established datagrams (of every length, valid or not), new
connections, a destination blocked once established, fragments, TCP and
ICMP. The fast
path must have bridged the established datagrams itself (at TC straight
into the pods) and kept their conntrack entries as alive as Linux does."""
from __future__ import annotations

import json
import time

import pytest

from controller_counting import Counting, absorbed, counting, reasons
from linuxfp.lab import run_differential
from linuxfp.lab.bridged import BRIDGE, BridgeTopology
from linuxfp.lab.conntrack import malformed_udp, timeouts_to
from linuxfp.lab.differential import Step
from linuxfp.lab.frames import ethernet, icmp_frame, ipv4, tcp_frame, udp, udp_frame
from linuxfp.lab.packet_io import inject
from linuxfp.lab.rulesets import native_ruleset, stateful_forward

pytestmark = pytest.mark.netns

# Not the hosts' own addresses: they drop what reaches them silently, so
# nothing they would answer (with IP IDs of their own) differs between builds.
SOURCE = "198.18.10.101"
ALLOWED = {"198.18.10.120": "b", "198.18.10.121": "b", "198.18.10.130": "c"}
BLOCKED_LATER = {"198.18.10.122": "b"}
ESTABLISHED = ALLOWED | BLOCKED_LATER
SPORT = 40001
RULES = stateful_forward([f"-i {BRIDGE} -o {BRIDGE} -p udp -m udp --dport 5000:5199 -j ACCEPT",
                          "-m physdev --physdev-in to-c -j DROP", "-o to-b -j ACCEPT"],
                         ["-d 198.18.10.140/32 -j DROP"], masquerade="-s 198.18.10.0/24 ! -d 198.18.10.0/24")
SIZES = (60, 61, 64, 99, 128, 333, 512, 513, 1023, 1400)


def _port(dst: str) -> int:
    return 5000 + int(dst.rsplit(".", 1)[1])


def _datagram(topology, dst: str, size: int, ident: int, sport: int = SPORT) -> bytes:
    return udp_frame(topology.mac("a"), topology.mac(ESTABLISHED.get(dst, "b")), SOURCE, dst, sport=sport,
                     dport=_port(dst), size=size, ident=ident)


def _connect(topology, native: bool = False) -> None:
    """Each connection: a datagram, its reply (from the host behind the
    destination's MAC), and one more after conntrack's stream mark (2 s),
    which makes the entry ASSURED. `native`: RULES as the nft tool's own
    inet tables (without the physdev rule, which iptables-restore-translate
    cannot write)."""
    if native:
        topology.dut.run(["nft", "-f", "-"], input=native_ruleset(RULES, "inet"))
    else:
        topology.dut.run(["iptables-restore"], input=RULES)
    _exchange(topology, [_datagram(topology, dst, 80, 1) for dst in ESTABLISHED],
              [(host, udp_frame(topology.mac(host), topology.mac("a"), dst, SOURCE, sport=_port(dst), dport=SPORT))
               for dst, host in ESTABLISHED.items()])
    # Long enough that an entry the fast path forgot to refresh shows it.
    time.sleep(3)
    _warm_up(topology)


def _per_step(counting: Counting) -> str:
    """Each step's reasons and per-interface fast-path counts (a failure's detail)."""
    return json.dumps([{"step": index, "reasons": reasons(each),
                        "interfaces": [(i["ifname"], i["fast_path"]) for i in each["interfaces"]]}
                       for index, each in enumerate(counting.stats)], indent=1)


def _exchange(topology, opening: list[bytes], replies) -> None:
    """`opening` from a, each (host, reply) from its host, `opening` again
    past conntrack's stream mark (2 s): the connections are ASSURED."""
    inject(topology.ns("a"), "to-dut", opening)
    time.sleep(0.2)
    for host, reply in replies:
        inject(topology.ns(host), "to-dut", [reply])
    time.sleep(2.3)
    inject(topology.ns("a"), "to-dut", opening)


def _warm_up(topology) -> None:
    """Frames from a to b and to c before a burst (outside the captures;
    policy-dropped): with LinuxFP the first refreshes a's FDB entry, the next
    are the first use of b's and c's, and the burst comes once they have
    settled, as for traffic that has been flowing."""
    def send(*hosts: str) -> None:
        for host in hosts:
            inject(topology.ns("a"), "to-dut", [udp_frame(topology.mac("a"), topology.mac(host), SOURCE,
                                                          "198.18.10.160", sport=51000, dport=9)])
        time.sleep(0.03)

    send("b")
    send("b", "c")



def frames(topology, index: int) -> list[bytes]:
    out = []
    ident = 100 * (index + 1)
    for dst in ESTABLISHED:
        for size in SIZES:
            ident += 1
            out.append(_datagram(topology, dst, size, ident))
        # conntrack's verdicts on malformed datagrams of an established connection
        good = _datagram(topology, dst, 200, ident + 1)
        out.extend(malformed_udp(good))
        ident += 2
    a, b = topology.mac("a"), topology.mac("b")
    # fragments of an established connection's datagram, all of it and only
    # its first: conntrack's defrag reassembles (or drops) them, the kernel's
    first = next(iter(ALLOWED))
    datagram = udp(SOURCE, first, SPORT, _port(first), bytes(range(64)))
    for whole in (True, False):
        ident += 1
        out.append(ethernet(b, a, 0x0800, ipv4(SOURCE, first, 17, datagram[:40], mf=True, ident=ident)))
        if whole:
            out.append(ethernet(b, a, 0x0800, ipv4(SOURCE, first, 17, datagram[40:], frag_offset=5, ident=ident)))
    for n in range(9):   # new connections: accepted by port, dropped by the policy or GUARD
        dst, dport = (("198.18.10.150", 5050), ("198.18.10.151", 6000), ("198.18.10.140", 5060))[n % 3]
        out.append(udp_frame(a, b, SOURCE, dst, sport=41000 + n, dport=dport, ident=ident + n))
    out.append(tcp_frame(a, b, SOURCE, first, sport=SPORT, dport=_port(first), ident=ident + 20))
    out.append(icmp_frame(a, b, SOURCE, first, 8, 0, ident=ident + 21))
    return out



# (iptables' rules at TC, the same as native nft tables at XDP: the rules are
# read apart, evaluated by one classifier)
@pytest.mark.parametrize("hook,native", [("xdp", True), ("tc", False)], ids=["xdp-native", "tc"])
def test_bridged_connections_are_filtered_as_br_netfilter_filters_them(require_root, hook, native):
    timeouts: list[dict[str, int]] = []

    def guard(dst: str) -> list[str]:
        return (["nft", "insert", "rule", "inet", "lfpfilter", "GUARD", "ip", "daddr", dst, "drop"] if native
                else ["iptables", "-I", "GUARD", "1", "-d", dst, "-j", "DROP"])

    def block(topology):
        timeouts.append(timeouts_to(topology.dut, ESTABLISHED))
        absorbed(seen, lambda: [topology.dut.run(guard(dst)) for dst in BLOCKED_LATER])
        _warm_up(topology)

    # The counters are read as each step settles: the last step's are those
    # of the bursts before it. Two bursts after the block: a burst that
    # begins as a source's once-a-second ageing refresh falls due goes to
    # the kernel whole (the entry settles for 8 ms, bridge.h), and the
    # fast path's drops must not hinge on the second hand.
    steps = [Step("stateful rules, connections", lambda topology: _connect(topology, native)),
             Step("block established", block), Step("unchanged", _warm_up), Step("unchanged again", _warm_up)]
    seen: list[Counting] = []
    # at TC the hosts are pods: what the fast path bridges goes straight into them
    report = run_differential(BridgeTopology(containers=hook == "tc"), steps, counting(seen, hook, _warm_up), frames,
                              prefix="lfp-brfl")
    assert report.ok, report.render()
    stats = seen[0].stats[-1]
    seen_reasons = reasons(stats)
    # (a string, which pytest prints whole: every step's counters, per interface)
    detail = json.dumps([{"step": index, "reasons": reasons(each), "fast": reasons(each, ("fast",)),
                          "interfaces": [(i["ifname"], i["fast_path"]) for i in each["interfaces"]]}
                         for index, each in enumerate(seen[0].stats)], indent=1)
    # Established datagrams were bridged by the fast path, forwarded and dropped ...
    assert sum(i["fast_path"] for i in stats["interfaces"]) >= len(ALLOWED) * (len(SIZES) - 2), detail
    assert seen_reasons.get("filter_dropped", 0) >= len(BLOCKED_LATER) * len(SIZES), detail
    # ... everything conntrack had a say in went to the kernel, each for its reason.
    for reason in ("filter_ct_new", "filter_ct_tcp", "filter_ct_proto", "filter_ct_invalid", "br_nf_fragment"):
        assert seen_reasons.get(reason, 0) > 0, f"{reason}: {detail}"
    for reason in ("br_netfilter", "filter_stale", "filter_unconfigured"):
        assert not seen_reasons.get(reason), (reason, seen_reasons)
    into_peer = reasons(stats, ("fast",)).get("into_peer", 0)
    assert (into_peer > 0) == (hook == "tc"), into_peer
    # The entries the fast path kept alive are as fresh as Linux keeps them.
    kernel, accelerated = timeouts
    assert set(kernel) == set(accelerated) == set(ESTABLISHED), timeouts
    for dst in ALLOWED:
        assert accelerated[dst] >= kernel[dst] - 1, timeouts


SOURCE6 = "2001:db8:10::101"
RULES6 = f"""*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:GUARD - [0:0]
-A FORWARD -j GUARD
-A FORWARD -i {BRIDGE} -o {BRIDGE} -p udp -m udp --dport 5000:5199 -j ACCEPT
-A FORWARD -p ipv6-icmp -m icmp6 --icmpv6-type echo-request -j ACCEPT
-A FORWARD -s 2001:db8:10::/112 -d 2001:db8:10::130 -j ACCEPT
-A FORWARD -m physdev --physdev-in to-a -p udp -j DROP
-A GUARD -d 2001:db8:10::140 -j DROP
-A GUARD -p tcp -j LOG
-A GUARD -j RETURN
COMMIT
"""


def frames6(topology, index: int) -> list[bytes]:
    """IPv6 across the bridge, from a: accepted by port, by addresses and
    as an echo request; dropped by GUARD and by the policy; TCP to the LOG
    rule and UDP to the physdev rule (the kernel's); a fragment and a
    hop-by-hop header (br_netfilter's)."""
    from linuxfp.lab.frames import icmpv6, ipv6_extension, ipv6_fragment_header, ipv6_frame, tcp6, udp6

    a, b, c = topology.mac("a"), topology.mac("b"), topology.mac("c")
    out = []
    for n, size in enumerate(SIZES):
        out.append(ipv6_frame(a, b, SOURCE6, "2001:db8:10::120", 17,
                              udp6(SOURCE6, "2001:db8:10::120", SPORT, 5000 + n, bytes(size))))
        out.append(ipv6_frame(a, c, SOURCE6, "2001:db8:10::130", 17,
                              udp6(SOURCE6, "2001:db8:10::130", SPORT, 7000 + n, bytes(size))))
        out.append(ipv6_frame(a, b, SOURCE6, "2001:db8:10::140", 17,
                              udp6(SOURCE6, "2001:db8:10::140", SPORT, 5000 + n, bytes(size))))
        out.append(ipv6_frame(a, b, "2001:db8:20::5", "2001:db8:10::121", 17,       # the physdev rule
                              udp6("2001:db8:20::5", "2001:db8:10::121", SPORT, 9000 + n, bytes(size))))
    for icmp_type in (128, 129):
        out.append(ipv6_frame(a, b, SOURCE6, "2001:db8:10::121", 58,
                              icmpv6(SOURCE6, "2001:db8:10::121", icmp_type, 0, bytes(4 + index))))
    out.append(ipv6_frame(a, b, SOURCE6, "2001:db8:10::121", 6, tcp6(SOURCE6, "2001:db8:10::121", SPORT, 5001)))
    datagram = udp6(SOURCE6, "2001:db8:10::120", SPORT, 5001, bytes(64))
    out.append(ipv6_frame(a, b, SOURCE6, "2001:db8:10::120", 44, ipv6_fragment_header(17, more=True) + datagram[:40]))
    out.append(ipv6_frame(a, b, SOURCE6, "2001:db8:10::120", 0, ipv6_extension(17) + datagram))
    return out


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_bridged_ipv6_is_filtered_as_br_netfilter_filters_it_with_ip6tables(require_root, hook):
    """bridge-nf-call-ip6tables: ip6tables' FORWARD chains see bridged IPv6
    with the bridge as -i and -o; the bridge-filter node evaluates them with
    the IPv6 classifier — the same bytes at every host as Linux alone, and
    the fast path bridged and dropped frames itself."""
    def rules(topology):
        topology.dut.sysctl("net.bridge.bridge-nf-call-ip6tables", 1)
        topology.dut.run(["ip6tables-restore"], input=RULES6)
        _warm_up(topology)

    # (the counters are read as each step settles: the last step's are those
    # of the two bursts before it — one that meets a source's ageing
    # refresh goes to the kernel whole, bridge.h)
    steps = [Step("ip6tables rules", rules), Step("unchanged", _warm_up), Step("unchanged again", _warm_up)]
    seen: list[Counting] = []
    report = run_differential(BridgeTopology(containers=hook == "tc"), steps, counting(seen, hook, _warm_up), frames6,
                              prefix="lfp-brf6")
    assert report.ok, report.render()
    stats = seen[0].stats[-1]
    seen_reasons = reasons(stats)
    detail = _per_step(seen[0])
    assert sum(i["fast_path"] for i in stats["interfaces"]) >= 2 * len(SIZES), detail
    assert seen_reasons.get("filter_dropped", 0) >= len(SIZES) + 1, detail         # GUARD, the policy
    assert seen_reasons.get("filter_kernel", 0) >= len(SIZES), detail             # physdev, LOG
    assert seen_reasons.get("br_nf_fragment", 0) > 0 and seen_reasons.get("br_nf_invalid", 0) > 0, detail
    for reason in ("br_netfilter", "filter_stale", "filter_unconfigured"):
        assert not seen_reasons.get(reason), (reason, seen_reasons)


STATEFUL6 = stateful_forward([f"-i {BRIDGE} -o {BRIDGE} -p udp -m udp --dport 5000:5199 -j ACCEPT"],
                             ["-d 2001:db8:10::140 -j DROP"])
ESTABLISHED6 = {"2001:db8:10::120": "b", "2001:db8:10::121": "b", "2001:db8:10::130": "c", "2001:db8:10::122": "b"}
BLOCKED_LATER6 = "2001:db8:10::122"


def _port6(dst: str) -> int:
    return 5000 + int(dst.rsplit(":", 1)[1])       # (the last group read as decimal: 5120 ... 5150)


def _datagram6(topology, dst: str, size: int, sport: int = SPORT) -> bytes:
    from linuxfp.lab.frames import ipv6_udp_frame

    return ipv6_udp_frame(topology.mac("a"), topology.mac(ESTABLISHED6.get(dst, "b")), SOURCE6, dst, sport=sport,
                          dport=_port6(dst), size=size)


def _connect6(topology) -> None:
    """IPv6 connections across the bridge, made by real exchanges (a
    datagram, its reply, one more after the stream mark: ASSURED)."""
    from linuxfp.lab.frames import ipv6_udp_frame

    topology.dut.sysctl("net.bridge.bridge-nf-call-ip6tables", 1)
    topology.dut.run(["ip6tables-restore"], input=STATEFUL6)
    _exchange(topology, [_datagram6(topology, dst, 80) for dst in ESTABLISHED6],
              [(host, ipv6_udp_frame(topology.mac(host), topology.mac("a"), dst, SOURCE6, sport=_port6(dst),
                                     dport=SPORT)) for dst, host in ESTABLISHED6.items()])
    time.sleep(0.5)
    _warm_up(topology)


def stateful_frames6(topology, index: int) -> list[bytes]:
    from linuxfp.lab.frames import icmpv6, ipv6_frame, tcp6

    out = []
    for dst in ESTABLISHED6:
        out += [_datagram6(topology, dst, size + 2) for size in SIZES]    # (IPv6's minimum frame: 62 bytes)
        out += malformed_udp(_datagram6(topology, dst, 200 + index))
    # new connections, each burst its own (a burst the bridge settles whole
    # goes to the kernel, which would make its connections known to the next)
    out += [_datagram6(topology, "2001:db8:10::150", 90, sport=41000 + 4 * index + n) for n in range(4)]
    a, b = topology.mac("a"), topology.mac("b")
    first = next(iter(ESTABLISHED6))
    out.append(ipv6_frame(a, b, SOURCE6, first, 6, tcp6(SOURCE6, first, SPORT, _port6(first))))
    out.append(ipv6_frame(a, b, SOURCE6, first, 58, icmpv6(SOURCE6, first, 128, 0, bytes(4 + index))))
    return out


def test_bridged_ipv6_connections_are_filtered_as_br_netfilter_filters_them(require_root):
    """IPv6 connection tracking through br_netfilter: established datagrams
    bridged (and, once a rule blocks their destination, dropped) by the
    fast path with their entries refreshed; new connections, invalid
    datagrams, TCP and ICMPv6 left to the kernel — the same bytes at every
    host as Linux alone."""
    def block(topology):
        absorbed(seen, lambda: topology.dut.run(["ip6tables", "-I", "GUARD", "1", "-d", BLOCKED_LATER6, "-j", "DROP"]))
        _warm_up(topology)

    steps = [Step("stateful ip6tables, connections", _connect6), Step("block established", block),
             Step("unchanged", _warm_up), Step("unchanged again", _warm_up)]
    seen: list[Counting] = []
    report = run_differential(BridgeTopology(), steps, counting(seen, "xdp", _warm_up), stateful_frames6,
                              prefix="lfp-brc6")
    assert report.ok, report.render()
    stats = seen[0].stats[-1]
    seen_reasons = reasons(stats)
    detail = _per_step(seen[0])
    assert sum(i["fast_path"] for i in stats["interfaces"]) >= 3 * (len(SIZES) - 2), detail
    assert seen_reasons.get("filter_dropped", 0) >= len(SIZES), detail
    for reason in ("filter_ct_new", "filter_ct_tcp", "filter_ct_proto", "filter_ct_invalid"):
        assert seen_reasons.get(reason, 0) > 0, f"{reason}: {detail}"
    for reason in ("br_netfilter", "filter_stale", "filter_unconfigured"):
        assert not seen_reasons.get(reason), (reason, seen_reasons)
