"""Seeded random iptables (and ip6tables) rulesets in iptables-save format
(apply them with iptables-restore / iptables-legacy-restore, or the
ip6tables ones), and packets that probe them: the input of the filter's
differential tests and benchmarks.

Addresses come from the lab ranges only (198.18.0.0/15 and the documentation
networks; 2001:db8::/32 for IPv6); prefixes nest and overlap on purpose so
that first-match order, negation and user chains decide verdicts.
"""
from __future__ import annotations

import ipaddress
import random
import struct
from collections import Counter
from dataclasses import dataclass, field

PREFIX_POOL = ("198.18.0.0/15", "198.18.0.0/16", "198.19.0.0/16", "198.18.1.0/24", "198.18.2.0/24",
               "198.19.1.0/24", "198.19.2.0/24", "198.18.1.0/25", "198.18.1.128/25", "198.18.1.7/32",
               "198.19.1.9/32", "198.19.2.64/26", "203.0.113.0/24", "198.51.100.0/24", "192.0.2.0/24")
# Prefixes that split RouterTopology's source pool (198.18.64.0/18) and its
# routed prefixes (198.19.0.0/24 ...), nested and overlapping: rules over
# them decide the fate of probe_frames().
ROUTER_POOL = ("198.18.0.0/15", "198.18.64.0/18", "198.18.64.0/24", "198.18.96.0/19", "198.18.64.7/32",
               "198.18.65.0/24", "198.18.100.0/22", "198.19.0.0/21", "198.19.0.0/23", "198.19.1.0/24",
               "198.19.2.0/24", "198.19.1.9/32", "198.19.2.64/26", "198.19.3.128/25", "192.0.2.0/24")
# RouterTopology's routed prefixes (198.19.0.0/24 ...; 2001:db8:100::/64 ...)
ROUTED, ROUTED6 = "198.19.0.0/16", "2001:db8:100::/48"
PORTS = (22, 53, 80, 443, 1000, 1024, 4789, 8080, 8472, 65535)
# what firewall scripts say of TCP flags (--syn: new connections; the rest:
# scans and impossible combinations)
TCP_FLAGS = ("--syn", "--tcp-flags SYN,RST SYN", "--tcp-flags ALL NONE", "--tcp-flags ALL ALL",
             "--tcp-flags FIN,SYN FIN,SYN", "--tcp-flags ACK,FIN FIN", "--tcp-flags SYN,ACK SYN,ACK",
             "--tcp-flags PSH,ACK ACK")
# -m addrtype's (with the router topology's default rules, local and
# broadcast addresses are of unsure type: the kernel decides for them)
ADDRESS_TYPES = ("UNICAST", "LOCAL", "BROADCAST,MULTICAST", "BLACKHOLE", "UNICAST,LOCAL")
# what probe frames carry: ACK, SYN, SYN-ACK, FIN-ACK, RST, PSH-ACK, none,
# all six, SYN-FIN, FIN-PSH-URG
PROBE_TCP_FLAGS = (0x10, 0x02, 0x12, 0x11, 0x04, 0x18, 0x00, 0x3F, 0x03, 0x29)
ICMP = ("echo-request", "echo-reply", "8/0", "3", "destination-unreachable", "any", "0")
UNSUPPORTED = ("-m length --length 100:300", "-p tcp -m tcp --tcp-option 2",
               "-m addrtype --dst-type UNICAST --limit-iface-out", "-m ttl --ttl-gt 30",
               "-m pkttype --pkt-type unicast")
# The same for ip6tables and RouterTopology(ipv6=True): its source pool
# (2001:db8:4000::/48) and routed prefixes (2001:db8:100:0::/64 ...) split.
ROUTER_POOL6 = ("2001:db8::/32", "2001:db8:4000::/48", "2001:db8:4000::/56", "2001:db8:4000:80::/57",
                "2001:db8:4000::7/128", "2001:db8:4000:1::/64", "2001:db8:4000:400::/54", "2001:db8:100::/61",
                "2001:db8:100::/63", "2001:db8:100:1::/64", "2001:db8:100:2::/64", "2001:db8:100:1::9/128",
                "2001:db8:100:2::40/122", "2001:db8:100:3:8000::/65", "2001:db8:ffff::/48")
ICMP6 = ("echo-request", "echo-reply", "128/0", "1", "destination-unreachable", "129", "128/1")
UNSUPPORTED6 = ("-m length --length 100:300", "-p tcp -m tcp --tcp-option 2",
                "-m hl --hl-gt 30", "-m pkttype --pkt-type unicast", "-m ipv6header --header dst --soft")


def stateful_forward(forward: list[str], guard: list[str], masquerade: str = "") -> str:
    """iptables-save text of a real host's stateful FORWARD, as the
    conntrack and bridge-filter differentials load it: policy DROP, a GUARD
    chain jumped to first (`guard`'s rules, then RETURN), INVALID dropped,
    RELATED,ESTABLISHED accepted, then `forward`'s rules; with `masquerade`
    (a POSTROUTING rule's matches), a nat table holding that rule."""
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]", ":GUARD - [0:0]",
             "-A FORWARD -j GUARD", "-A FORWARD -m conntrack --ctstate INVALID -j DROP",
             "-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"]
    lines += [f"-A FORWARD {rule}" for rule in forward]
    lines += [f"-A GUARD {rule}" for rule in guard] + ["-A GUARD -j RETURN", "COMMIT"]
    if masquerade:
        lines += ["*nat", ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]",
                  ":POSTROUTING ACCEPT [0:0]", f"-A POSTROUTING {masquerade} -j MASQUERADE", "COMMIT"]
    return "\n".join(lines) + "\n"


@dataclass
class Coverage:
    """How often each match kind and target occurs (reported by the tests)."""

    matches: Counter = field(default_factory=Counter)
    targets: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        m = ", ".join(f"{k} {v}" for k, v in sorted(self.matches.items()))
        t = ", ".join(f"{k} {v}" for k, v in sorted(self.targets.items()))
        return f"matches: {m}; targets: {t}"


# A bitmap:ip holds addresses of one range only (at most 65 536): the
# routed side of RouterTopology's prefixes.
BITMAP_RANGE = ROUTED
# The ipsets random_ruleset() may match (random_ipsets() fills them): a set
# of prefixes, one of addresses, one of addresses under a netmask, sets of
# (address or prefix, protocol:port) or (prefix, interface), a bitmap, and
# a list of address sets.
IPSETS = (("lfp-net", "hash:net"), ("lfp-ip", "hash:ip"), ("lfp-mask", "hash:ip netmask 24"),
          ("lfp-port", "hash:ip,port"), ("lfp-netport", "hash:net,port"), ("lfp-iface", "hash:net,iface"),
          ("lfp-bitmap", f"bitmap:ip range {BITMAP_RANGE} netmask 26"), ("lfp-list", "list:set"))
# what a list:set may hold: the address sets above it
LISTED = ("lfp-net", "lfp-ip", "lfp-mask", "lfp-bitmap")
# RouterTopology's DUT interfaces, a wildcard, a name with "+" (only itself)
SET_IFACES = ("to-src", "to-sink", "to- wildcard", "lo", "to-+")
SET_PORTS = ("udp:53", "tcp:80", "udp:8080", "tcp:443", "udp:22", "icmp:8/0", "icmp:3/3", "gre:0")
# The same for ip6tables' rules (family inet6; no bitmap: IPv4 only)
IPSETS6 = (("lfp6-net", "hash:net family inet6"), ("lfp6-ip", "hash:ip family inet6"),
           ("lfp6-mask", "hash:ip family inet6 netmask 64"), ("lfp6-port", "hash:ip,port family inet6"),
           ("lfp6-netport", "hash:net,port family inet6"), ("lfp6-iface", "hash:net,iface family inet6"),
           ("lfp6-list", "list:set"))
LISTED6 = ("lfp6-net", "lfp6-ip", "lfp6-mask")
SET_PORTS6 = ("udp:53", "tcp:80", "udp:8080", "tcp:443", "udp:22", "icmpv6:128/0", "icmpv6:129/0", "gre:0")


def random_ruleset(seed: int, rules: int, ifnames: tuple[str, ...], coverage: Coverage | None = None,
                   unsupported: bool = True, pool: tuple[str, ...] = PREFIX_POOL, ipsets: bool = False,
                   ipv6: bool = False, prerouting: bool = False, stateful: bool = False) -> str:
    """A filter table in iptables-save format: FORWARD, two user chains;
    addresses from the prefixes of `pool`; with `ipsets`, rules also match
    the sets of IPSETS (create them first: random_ipsets()); `ipv6`:
    ip6tables' (ICMPv6, its matches; `pool` then holds IPv6 prefixes).
    `prerouting`: raw and mangle tables too, whose PREROUTING chains every
    forwarded packet crosses first (random_prerouting(); an eighth of
    `rules` more); `stateful`: FORWARD accepts established connections
    first (connections are tracked then, and what raw drops is dropped
    before conntrack)."""
    rng = random.Random(seed)
    coverage = coverage if coverage is not None else Coverage()
    chains = {"FORWARD": [], "LFP_A": [], "LFP_B": []}
    for _ in range(rules):
        chain = rng.choice(("FORWARD", "FORWARD", "FORWARD", "LFP_A", "LFP_B"))
        chains[chain].append(_rule(rng, chain, ifnames, coverage, unsupported, pool, ipsets, ipv6))
    if stateful:
        chains["FORWARD"].insert(0, "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")
        coverage.matches["ctstate"] += 1
    policy = rng.choice(("ACCEPT", "ACCEPT", "DROP"))
    coverage.targets[f"policy {policy}"] += 1
    lines = ["*filter", ":INPUT ACCEPT [0:0]", f":FORWARD {policy} [0:0]", ":OUTPUT ACCEPT [0:0]",
             ":LFP_A - [0:0]", ":LFP_B - [0:0]"]
    for chain, body in chains.items():
        lines += [f"-A {chain} {r}".rstrip() for r in body]
    lines.append("COMMIT")
    text = "\n".join(lines) + "\n"
    if prerouting:
        text = random_prerouting(rng, max(rules // 8, 2), ifnames, coverage, unsupported, pool, ipv6,
                                 stateful) + text
    return text


def random_prerouting(rng: random.Random, rules: int, ifnames: tuple[str, ...], coverage: Coverage,
                      unsupported: bool = True, pool: tuple[str, ...] = PREFIX_POOL, ipv6: bool = False,
                      stateful: bool = False) -> str:
    """raw and mangle tables in iptables-save format, whose PREROUTING
    chains a forwarded packet crosses before FORWARD: raw's with a user
    chain (ACCEPT, DROP — one rule at least —, RETURN, a jump, a goto;
    `stateful`: NOTRACK too, which tracks connections in the namespace and
    the fast path leaves to the kernel), mangle's with up to two rules (a
    MARK among their targets: the kernel's too). No test of the egress device (iptables
    refuses one before routing). Every table is written, empty or not: a
    restore replaces only the tables it names."""
    # (each rule names a prefix of /24 or longer (/64: IPv6), and fewer
    # drop: a chain crossed by every packet first would otherwise decide
    # for most)
    narrow = tuple(p for p in pool if ipaddress.ip_network(p).prefixlen >= (64 if ipv6 else 24)) or pool
    raw = {"PREROUTING": [], "LFP_R": []}
    for _ in range(rules):
        chain = rng.choice(("PREROUTING", "PREROUTING", "LFP_R"))
        targets = ("ACCEPT", "DROP", "", "LFP_R", "goto LFP_R") + ("NOTRACK",) * stateful \
            if chain == "PREROUTING" else ("ACCEPT", "DROP", "", "RETURN", "RETURN")
        raw[chain].append(_rule(rng, chain, ifnames, coverage, unsupported, narrow, ipv6=ipv6, egress=False,
                                targets=targets))
    # (and one drop of destinations RouterTopology routes at least — 64 or
    # more, which probe_frames() reach where the topology routes 4 prefixes
    # or more: what raw drops is then never FORWARD's to decide)
    routed = ipaddress.ip_network(ROUTED6 if ipv6 else ROUTED)
    probed = [p for p in narrow if ipaddress.ip_network(p).subnet_of(routed)
              and ipaddress.ip_network(p).num_addresses >= 64] or narrow
    raw["PREROUTING"].insert(rng.randrange(len(raw["PREROUTING"]) + 1), f"-d {rng.choice(probed)} -j DROP")
    coverage.matches["-d"] += 1
    coverage.targets["DROP"] += 1
    mangle = [_rule(rng, "PREROUTING", ifnames, coverage, unsupported, narrow, ipv6=ipv6, egress=False,
                    targets=("ACCEPT", "DROP", "", "MARK")) for _ in range(rng.randrange(3))]
    lines = ["*raw", ":PREROUTING ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", ":LFP_R - [0:0]"]
    lines += [f"-A {chain} {r}".rstrip() for chain, body in raw.items() for r in body]
    lines += ["COMMIT", "*mangle", ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]",
              ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]"]
    lines += [f"-A PREROUTING {r}".rstrip() for r in mangle]
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def _rule(rng: random.Random, chain: str, ifnames, coverage: Coverage, unsupported: bool, pool,
          ipsets: bool = False, ipv6: bool = False, egress: bool = True, targets: tuple[str, ...] | None = None) -> str:
    """One rule of `chain`; `egress`: it may test the egress device (not
    before routing); `targets`: those it may have besides LOG (None: the
    filter table's chains' own), and it then names an address too, never
    negated (all but a prefix would decide for most packets)."""
    words = []

    def neg() -> str:
        return "! " if rng.random() < 0.25 else ""

    if ipsets and rng.random() < 0.4:
        n = neg()
        name = rng.choice(IPSETS6 if ipv6 else IPSETS)[0]
        direction = rng.choice(("src", "dst", "dst,src", "src,dst", "src,src", "dst,dst"))
        words.append(f"-m set {n}--match-set {name} {direction}")
        coverage.matches[f"{n}set {direction.split(',')[0]}"] += 1
    if rng.random() < 0.5:
        n = neg() if targets is None else ""
        words.append(f"{n}-s {rng.choice(pool)}")
        coverage.matches[f"{n}-s"] += 1
    if rng.random() < 0.5:
        n = neg() if targets is None else ""
        words.append(f"{n}-d {rng.choice(pool)}")
        coverage.matches[f"{n}-d"] += 1
    if rng.random() < 0.25 and ifnames:
        n = neg()
        name = rng.choice(ifnames)
        words.append(f"{n}-i {name[:-1] + '+' if rng.random() < 0.3 else name}")
        coverage.matches[f"{n}-i"] += 1
    if egress and rng.random() < 0.25 and ifnames:
        n = neg()
        words.append(f"{n}-o {rng.choice(ifnames)}")
        coverage.matches[f"{n}-o"] += 1
    proto = rng.choice(("", "", "tcp", "udp", "icmpv6" if ipv6 else "icmp"))
    if proto:
        words.append(f"-p {proto}")
        coverage.matches[f"-p {proto}"] += 1
    if proto in ("tcp", "udp") and rng.random() < 0.7:
        kind = rng.choice(("sport", "dport", "range", "multiport", "ports"))
        n = neg()
        port = rng.choice(PORTS)
        if kind == "sport":
            words.append(f"-m {proto} {n}--sport {port}")
        elif kind == "dport":
            words.append(f"-m {proto} {n}--dport {port}")
        elif kind == "range":
            lo = rng.choice(PORTS)
            words.append(f"-m {proto} {n}--dport {min(lo, port)}:{max(lo, port)}")
        else:
            ports = ",".join(str(p) for p in sorted(set(rng.sample(PORTS, 3))))
            words.append(f"-m multiport {n}--{'dports' if kind == 'multiport' else 'ports'} {ports}")
        coverage.matches[f"{n}{kind}"] += 1
    def option(kind: str, text) -> None:
        """A match that may be negated: text(n) with n "! " or ""."""
        n = neg()
        words.append(text(n))
        coverage.matches[f"{n}{kind}"] += 1

    if not ipv6 and rng.random() < 0.1:
        option("addrtype", lambda n: f"-m addrtype {n}--{rng.choice(('src', 'dst'))}-type {rng.choice(ADDRESS_TYPES)}")
    if proto == "tcp" and rng.random() < 0.3:
        option("tcp-flags", lambda n: f"-m tcp {n}{rng.choice(TCP_FLAGS)}")
    elif proto == "icmp" and rng.random() < 0.6:
        option("icmp-type", lambda n: f"-m icmp {n}--icmp-type {rng.choice(ICMP)}")
    elif proto == "icmpv6" and rng.random() < 0.6:
        option("icmpv6-type", lambda n: f"-m icmp6 {n}--icmpv6-type {rng.choice(ICMP6)}")
    # (a rule matching everything would end most chains at once)
    if not words or targets is not None and not any(w.split()[0] in ("-s", "-d") for w in words):
        words.append(f"-d {rng.choice(pool)}")
        coverage.matches["-d"] += 1
    if rng.random() < 0.1:
        words.append('-m comment --comment "lab rule"')
        coverage.matches["comment"] += 1
    if unsupported and rng.random() < 0.05:
        extra = rng.choice(UNSUPPORTED6 if ipv6 else UNSUPPORTED)
        if extra.startswith("-p tcp") and proto or not egress and "-out" in extra:
            extra = "-m length --length 100:300"
        words.append(extra)
        coverage.matches["unsupported"] += 1
    choices = ["ACCEPT", "ACCEPT", "DROP", "DROP", "DROP", ""] if targets is None else list(targets)
    choices += ["LOG"] if rng.random() < 0.3 else []
    if targets is None:         # the filter table's chains: FORWARD jumps to both, LFP_A to LFP_B
        choices += {"FORWARD": ["LFP_A", "LFP_B", "goto LFP_B"], "LFP_A": ["RETURN", "LFP_B"]}.get(chain, ["RETURN"])
    target = rng.choice(choices)
    coverage.targets[target or "none"] += 1
    if target.startswith("goto "):
        words.append(f"-g {target[5:]}")
    elif target == "LOG":
        words.append('-j LOG --log-prefix "lfp "')
    elif target == "NOTRACK":
        words.append("-j CT --notrack")
    elif target == "MARK":
        words.append("-j MARK --set-mark 1")
    elif target:
        words.append(f"-j {target}")
    return " ".join(words)


def random_ipsets(seed: int, pool: tuple[str, ...] = ROUTER_POOL, members: int = 6, ipv6: bool = False) -> str:
    """`ipset restore` input that creates (or keeps) the sets of IPSETS
    (`ipv6`: IPSETS6, from an IPv6 pool) and refills them: prefixes of
    `pool` for hash:net, addresses at their edges for hash:ip and the bitmap
    (those in its range), some of the address sets for the list. Addresses:
    the lab ranges only."""
    rng = random.Random(seed)
    edges = [a for p in pool for a in _edges(ipaddress.ip_network(p))]
    listed, ports = (LISTED6, SET_PORTS6) if ipv6 else (LISTED, SET_PORTS)
    lines = []
    for name, kind in IPSETS6 if ipv6 else IPSETS:
        lines += [f"create {name} {kind} -exist", f"flush {name}"]
        if kind == "list:set":
            lines += [f"add {name} {member} -exist" for member in rng.sample(listed, rng.randrange(len(listed) + 1))]
            continue
        for _ in range(rng.randrange(members + 1)):
            member = rng.choice(pool) if kind.startswith("hash:net") else rng.choice(edges)
            if kind.startswith("bitmap:ip") and ipaddress.ip_address(member) not in ipaddress.ip_network(BITMAP_RANGE):
                continue        # (ipset refuses an address outside the range)
            if kind.split()[0].endswith(",port"):
                member += "," + rng.choice(ports)
            elif kind.split()[0].endswith(",iface"):
                member += "," + rng.choice(SET_IFACES)
            lines.append(f"add {name} {member} -exist")
    return "\n".join(lines) + "\n"


def probe_addresses(seed: int, count: int, pool: tuple[str, ...] = PREFIX_POOL) -> list[str]:
    """Addresses at and around the pool's prefix edges."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        net = ipaddress.ip_network(rng.choice(pool))
        offset = rng.choice((0, 1, net.num_addresses - 1, net.num_addresses, -1, rng.randrange(net.num_addresses)))
        value = int(net.network_address) + offset
        addr = ipaddress.ip_address(value)
        if not any(addr in ipaddress.ip_network(p) for p in ("198.18.0.0/15", "203.0.113.0/24",
                                                           "198.51.100.0/24", "192.0.2.0/24")):
            addr = net.network_address + 1
        out.append(str(addr))
    return out


def probe_frames(router, seed: int, count: int) -> list[bytes]:
    """Frames from src through a RouterTopology's DUT that the rules of
    random_ruleset() tell apart: sources from its source pool, destinations
    in its routed prefixes (both at prefix edges), TCP/UDP to the pool's
    ports with PROBE_TCP_FLAGS, ICMP of several types, other protocols, and
    a TCP header cut short. Deterministic in (seed, count) and the
    topology's MACs."""
    from .frames import icmp_frame, ipv4, ethernet, tcp_frame, udp_frame, ETH_P_IP

    rng = random.Random(seed)
    flags = random.Random((seed + 1) << 20)     # (its own: the other choices stay what they were)
    src_mac, dut_mac = router.src_if.mac, router.dut_left.mac
    pool = router.source_pool
    edges = [ipaddress.ip_address(a) for p in ROUTER_POOL for a in _edges(ipaddress.ip_network(p))]
    srcs = [str(a) for a in edges if a in pool]
    dsts = [str(a) for a in edges if any(a in net for net in router.prefixes)]
    frames = []
    for n in range(count):
        src = rng.choice(srcs) if rng.random() < 0.7 else str(pool[rng.randrange(1, pool.num_addresses - 1)])
        dst = rng.choice(dsts)
        kind = rng.choice(("udp", "udp", "tcp", "tcp", "icmp", "gre", "short"))
        port = rng.choice(PORTS + (rng.randrange(1, 65536),))
        other = rng.choice(PORTS + (rng.randrange(1, 65536),))
        fields = {"ident": n + 1}
        if kind == "udp":
            frames.append(udp_frame(src_mac, dut_mac, src, dst, sport=other, dport=port, **fields))
        elif kind == "tcp":
            frames.append(tcp_frame(src_mac, dut_mac, src, dst, sport=other, dport=port,
                                    flags=flags.choice(PROBE_TCP_FLAGS), **fields))
        elif kind == "icmp":
            icmp_type, code = rng.choice(((8, 0), (0, 0), (13, 0), (8, 1), (3, 3)))
            frames.append(icmp_frame(src_mac, dut_mac, src, dst, icmp_type, code, **fields))
        elif kind == "gre":
            frames.append(ethernet(dut_mac, src_mac, ETH_P_IP, ipv4(src, dst, 47, bytes(8) + b"lab", **fields)))
        else:   # a TCP header of 8 bytes: iptables' tcp match drops it
            frames.append(ethernet(dut_mac, src_mac, ETH_P_IP,
                                   ipv4(src, dst, 6, struct.pack("!HHI", other, port, 1), **fields)))
    return frames


def probe_frames6(router, seed: int, count: int) -> list[bytes]:
    """probe_frames() for ip6tables' rules and RouterTopology(ipv6=True):
    sources from its IPv6 source pool, destinations in its routed IPv6
    prefixes (both at ROUTER_POOL6's prefix edges), TCP/UDP to the pool's
    ports with PROBE_TCP_FLAGS, ICMPv6 echo of several codes, a protocol the
    fast path leaves to the kernel, and a TCP header cut short."""
    from .frames import icmpv6, ipv6_frame, tcp6, udp6

    rng = random.Random(seed)
    flags = random.Random((seed + 1) << 20)
    src_mac, dut_mac = router.src_if.mac, router.dut_left.mac
    pool = router.source_pool6
    edges = [ipaddress.ip_address(a) for p in ROUTER_POOL6 for a in _edges(ipaddress.ip_network(p))]
    srcs = [str(a) for a in edges if a in pool]
    dsts = [str(a) for a in edges if any(a in net for net in router.prefixes6)]
    frames = []
    for n in range(count):
        src = rng.choice(srcs) if rng.random() < 0.7 else str(pool[rng.randrange(1, 1 << 20)])
        dst = rng.choice(dsts)
        kind = rng.choice(("udp", "udp", "tcp", "tcp", "icmpv6", "gre", "short"))
        port = rng.choice(PORTS + (rng.randrange(1, 65536),))
        other = rng.choice(PORTS + (rng.randrange(1, 65536),))
        if kind == "udp":
            frames.append(ipv6_frame(src_mac, dut_mac, src, dst, 17, udp6(src, dst, other, port, struct.pack("!I", n))))
        elif kind == "tcp":
            frames.append(ipv6_frame(src_mac, dut_mac, src, dst, 6, tcp6(src, dst, other, port, struct.pack("!I", n),
                                                                         flags=flags.choice(PROBE_TCP_FLAGS))))
        elif kind == "icmpv6":
            icmp_type, code = rng.choice(((128, 0), (129, 0), (128, 1), (1, 4)))
            frames.append(ipv6_frame(src_mac, dut_mac, src, dst, 58,
                                     icmpv6(src, dst, icmp_type, code, struct.pack("!HH", 7, n & 0xFFFF))))
        elif kind == "gre":
            frames.append(ipv6_frame(src_mac, dut_mac, src, dst, 47, bytes(8) + b"lab"))
        else:   # a TCP header of 8 bytes: ip6tables' tcp match drops it
            frames.append(ipv6_frame(src_mac, dut_mac, src, dst, 6, struct.pack("!HHI", other, port, 1)))
    return frames


def native_ruleset(save_text: str, family: str = "inet", ipv6: bool = False) -> str:
    """An iptables-save ruleset (random_ruleset()'s, stateful_forward()'s)
    as the nft tool's own tables: what iptables-restore-translate (package
    iptables) writes for it, each table of `family` and renamed lfpNAME
    (iptables-nft owns the tables it is named after), loaded with `nft -f`
    after the ruleset is flushed. Rules it writes with a concatenation
    (`-m multiport --ports`: `tcp sport . tcp dport { ... }`) are left out:
    the set it writes can hold overlapping intervals, which nft refuses."""
    import subprocess
    tool = "ip6tables-restore-translate" if ipv6 else "iptables-restore-translate"
    done = subprocess.run([tool, "-f", "/dev/stdin"], input=save_text, capture_output=True, text=True, check=True)
    lines = ["flush ruleset"]
    for line in done.stdout.splitlines():
        words = line.split(" ", 4)
        if line.startswith("add ") and not (line.startswith("add rule ") and " . " in line):
            words[2:4] = [family, f"lfp{words[3]}"]         # add KIND FAMILY TABLE ...
            lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


def _edges(net) -> list[str]:
    last = net.num_addresses - 1
    return [str(net[i]) for i in sorted({0, min(1, last), last // 2, max(last - 1, 0), last})]


DOCUMENTATION_NETS = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")


def unmatched_ruleset(count: int, matched_port: int = 9) -> str:
    """`count` FORWARD DROP rules that traffic from the lab's 198.18/15
    sources never matches: each names a documentation-range /32 source, the
    routed 198.19.0.0/16 and a UDP port other than `matched_port`; policy
    ACCEPT. The benchmark of rule-count scaling (`linuxfp bench rules`)."""
    sources = [str(a) for net in DOCUMENTATION_NETS for a in ipaddress.ip_network(net)]
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
    for i in range(count):
        port = 1024 + i // len(sources)
        if port == matched_port:
            raise ValueError("port collision")
        lines.append(f"-A FORWARD -s {sources[i % len(sources)]}/32 -d {ROUTED} -p udp -m udp "
                     f"--dport {port} -j DROP")
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"
