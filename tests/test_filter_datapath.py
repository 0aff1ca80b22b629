"""The filter node, frame by frame, through BPF_PROG_TEST_RUN: for random
rulesets loaded with the real iptables-restore, every frame's verdict from
the compiled pipeline (router + filter + transmit, maps filled from snapshot
→ graph as the controller fills them) is the one the Python model of the
classifier computes (classifier.classify), with the counter that says why.
The model is checked against the rules' meaning in test_filter_rules.py,
and the whole against Linux in test_differential_filter.py."""
from __future__ import annotations

import struct
from ipaddress import IPv4Network, IPv6Network
from types import SimpleNamespace

import pytest
import pipeline_loader

from linuxfp.graph import build_graph
from linuxfp.graph.filtering.classifier import ANY_RIGHT, CONNTRACK_BIT, FIELD_BIT, classify
from linuxfp.graph.filtering.predicates import IPV4, IPV6
from linuxfp.graph.filtering.program import ACCEPT, DROP_EARLY, KERNEL, packet_fields
from linuxfp.graph.nodes.conntrack import CONNTRACK
from linuxfp.graph.nodes.iptables_filter import CAPACITY, CFG, filter_plan
from linuxfp.lab.netns import Lab, entered
from linuxfp.lab.rulesets import ROUTER_POOL, ROUTER_POOL6, probe_frames, probe_frames6, random_ruleset
from linuxfp.lab.topology import IPV6_HOST_SYSCTLS, IPV6_INTERFACE_SYSCTLS
from linuxfp.state import read_snapshot

pytestmark = pytest.mark.netns

IN_MAC, OUT_MAC, NEXT_HOP_MAC = "02:00:00:00:01:01", "02:00:00:00:02:01", "02:00:00:00:02:02"
XDP_DROP, XDP_PASS, XDP_REDIRECT = 1, 2, 4
SETUP = [
    f"ip link add in0 address {IN_MAC} type veth peer name in0p",
    f"ip link add out0 address {OUT_MAC} type veth peer name out0p",
    "ip link set in0p up", "ip link set out0p up", "ip link set in0 up", "ip link set out0 up",
    "ethtool -K out0p gro on",
    "ip addr add 198.18.1.254/24 dev in0",
    "ip addr add 198.18.2.254/24 dev out0",
    f"ip neigh replace 198.18.2.1 lladdr {NEXT_HOP_MAC} dev out0 nud permanent",
    "ip route add 198.19.0.0/16 via 198.18.2.1",
    "sysctl -qw net.ipv4.ip_forward=1",
]
# ... and IPv6, routed the same way (after the lab's IPv6 sysctls)
SETUP6 = [
    "ip -6 addr add 2001:db8:1::fe/64 dev in0 nodad",
    "ip -6 addr add 2001:db8:2::fe/64 dev out0 nodad",
    f"ip -6 neigh replace 2001:db8:2::1 lladdr {NEXT_HOP_MAC} dev out0 nud permanent",
    "ip -6 route add 2001:db8:100::/56 via 2001:db8:2::1",
    "sysctl -qw net.ipv6.conf.all.forwarding=1",
]
# What probe_frames and probe_frames6 need of a topology.
TOPOLOGY = SimpleNamespace(src_if=SimpleNamespace(mac="02:00:00:00:01:02"), dut_left=SimpleNamespace(mac=IN_MAC),
                           source_pool=IPv4Network("198.18.64.0/18"),
                           prefixes=tuple(IPv4Network(f"198.19.{i}.0/24") for i in range(8)),
                           source_pool6=IPv6Network("2001:db8:4000::/48"),
                           prefixes6=tuple(IPv6Network(f"2001:db8:100:{i:x}::/64") for i in range(8)))


@pytest.fixture(scope="module")
def filter_ns():
    with Lab(prefix="lfp-fd") as lab:
        ns = lab.namespace("dp")
        for cmd in SETUP:
            ns.run(cmd.split())
        for key, value in IPV6_HOST_SYSCTLS:
            ns.sysctl(key, value)
        for ifname in ("in0", "out0"):
            for key, value in IPV6_INTERFACE_SYSCTLS:
                ns.sysctl(key.format(ifname=ifname), value)
        for cmd in SETUP6:
            ns.run(cmd.split())
        yield ns


class LoadedPipeline(pipeline_loader.LoadedPipeline):
    """The XDP pipeline of in0 for the namespace's current rules (`stateful`:
    rules that track connections, which place the conntrack node)."""

    def __init__(self, ns, stateful: bool = False, snapshot=None, name: str = "test_filter") -> None:
        nodes = ("conntrack", "router", "filter", "nat_out", "transmit") if stateful else \
            ("router", "filter", "transmit")
        super().__init__(ns, "in0", "xdp", nodes, name, snapshot)
        self.plan = filter_plan(self.snapshot)
        self.egress = self.snapshot.link_by_name("out0").index
        for name, capacity in CAPACITY.items():      # the Python side's idea of the maps' sizes
            assert self.obj.map(name).max_entries == capacity, name


def expected(pipeline: LoadedPipeline, classifier, frame: bytes, family=IPV4) -> tuple[int, str | None]:
    """(XDP verdict, counter) the model predicts for a frame the router
    forwards (an IPv4 frame with a 20-byte header, or IPv6 without
    extension headers)."""
    if family is IPV6:
        proto, src, dst = frame[20], int.from_bytes(frame[22:38], "big"), int.from_bytes(frame[38:54], "big")
        l4 = frame[54:]
    else:
        proto, src, dst = frame[23], int.from_bytes(frame[26:30], "big"), int.from_bytes(frame[30:34], "big")
        l4 = frame[34:]
    stateful = classifier.used & CONNTRACK_BIT
    if stateful and proto == 6:       # (the conntrack node's, before routing)
        return XDP_PASS, "ct_tcp_tracked"
    need = {6: 20, 17: 8, family.icmp: 8}.get(proto, 0)
    if classifier.used & (FIELD_BIT["l4s"] | FIELD_BIT["l4d"] | FIELD_BIT["tcpflags"]) and len(l4) < need:
        return XDP_PASS, "filter_l4_short"
    sport = dport = 0
    if proto in (6, 17):
        sport, dport = struct.unpack("!HH", l4[:4])
    elif proto == family.icmp:
        sport, dport = l4[0], l4[1]
    fields = packet_fields(src, dst, proto, sport, dport, pipeline.ifindex, pipeline.egress, family,
                           tcp_flags=l4[13] if proto == 6 and len(l4) > 13 else 0)
    verdict, _ = classify(classifier, fields)
    if verdict == KERNEL:
        return XDP_PASS, "filter_kernel"
    if verdict == DROP_EARLY:       # (before conntrack: nothing looked up)
        return XDP_DROP, "filter_dropped"
    if stateful:
        # a verdict for an established connection's packet: the probes'
        # have no connection (UDP), or are not the fast path's to take
        return XDP_PASS, "filter_ct_new" if proto == 17 else "filter_ct_proto"
    return (XDP_REDIRECT, "forwarded") if verdict == ACCEPT else (XDP_DROP, "filter_dropped")


def _agree(filter_ns, family, rulesets, frames_of, skip) -> dict[str, int]:
    """Each ruleset restored, then every frame of frames_of(seed) not
    skip(frame): the compiled pipeline's verdict and counter are the
    model's; what the outcomes were, counted."""
    seen: dict[str, int] = {}
    restore = "ip6tables-restore" if family is IPV6 else "iptables-restore"
    for seed, text in rulesets:
        filter_ns.run([restore], input=text)
        with entered(filter_ns):
            snapshot = read_snapshot()
        # (connections tracked — --ctstate, or raw's CT --notrack — place the conntrack node)
        loaded = LoadedPipeline(filter_ns, stateful=CONNTRACK.applies(snapshot, None), snapshot=snapshot)
        try:
            classifier = loaded.plan.classifier6 if family is IPV6 else loaded.plan.classifier
            # (rulesets whose classifier holds default pairs: filter.h's second lookup)
            seen["default_pairs"] = seen.get("default_pairs", 0) + any(p[2] == ANY_RIGHT for p in classifier.pairs)
            for frame in frames_of(seed):
                if skip(frame):
                    continue
                verdict, counter = expected(loaded, classifier, frame, family)
                before = loaded.counter(counter)
                result = loaded.run(frame)
                assert (result.retval, loaded.counter(counter)) == (verdict, before + 1), (seed, frame.hex(), text)
                if verdict != XDP_REDIRECT:
                    assert result.data_out == frame
                seen[counter] = seen.get(counter, 0) + 1
        finally:
            loaded.obj.close()
    return seen


def test_compiled_ip6tables_filter_agrees_with_its_model(filter_ns):
    """ip6tables' rules, IPv6 frames: the same agreement (iptables' tables
    left empty: IPv4 is open, and only the IPv6 classifier is written)."""
    filter_ns.run(["iptables", "-F"])
    try:
        rulesets = [(seed, random_ruleset(seed + 50, 60, ("in0", "out0"), pool=ROUTER_POOL6, ipv6=True))
                    for seed in range(6)]
        # (the router passes other protocols and ICMPv6 errors)
        seen = _agree(filter_ns, IPV6, rulesets, lambda seed: probe_frames6(TOPOLOGY, seed, 150),
                      lambda frame: frame[20] == 47 or (frame[20] == 58 and frame[54] < 128))
    finally:
        filter_ns.run(["ip6tables", "-F"])
        filter_ns.run(["ip6tables", "-X"])
        filter_ns.run(["ip6tables", "-P", "FORWARD", "ACCEPT"])
    assert min(seen.get(c, 0) for c in ("forwarded", "filter_dropped", "filter_kernel", "filter_l4_short")) >= 20, seen


def test_compiled_filter_agrees_with_its_model(filter_ns):
    rulesets = [(seed, random_ruleset(seed, 60, ("in0", "out0"), pool=ROUTER_POOL)) for seed in range(8)]
    # (ICMP errors: the router passes them)
    seen = _agree(filter_ns, IPV4, rulesets, lambda seed: probe_frames(TOPOLOGY, seed, 150),
                  lambda frame: frame[23] == 1 and frame[34] == 3)
    # every outcome occurred, often
    assert min(seen.get(c, 0) for c in ("forwarded", "filter_dropped", "filter_kernel", "filter_l4_short")) >= 20, seen
    assert seen["default_pairs"] >= 4, seen


def test_compiled_prerouting_chains_agree_with_their_model(filter_ns):
    """Random raw and mangle PREROUTING chains before random FORWARD rules,
    connections tracked for every other ruleset: what raw drops is dropped
    before conntrack (nothing looked up), what the rules leave to the
    kernel passes, and where connections are tracked every other verdict
    waits for the connection, which the probes do not have."""
    rulesets = [(seed, random_ruleset(seed + 20, 60, ("in0", "out0"), pool=ROUTER_POOL, prerouting=True,
                                      stateful=seed % 2 == 1)) for seed in range(4)]
    empty = "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n" \
            "*mangle\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n" \
            ":OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n"
    frames, errors = (lambda seed: probe_frames(TOPOLOGY, seed, 150)), (lambda frame: frame[23] == 1 and frame[34] == 3)
    try:
        plain = _agree(filter_ns, IPV4, rulesets[0::2], frames, errors)
        tracked = _agree(filter_ns, IPV4, rulesets[1::2], frames, errors)
    finally:
        filter_ns.run(["iptables-restore"], input=empty)
        filter_ns.run(["iptables", "-F"])
        filter_ns.run(["iptables", "-X"])
        filter_ns.run(["iptables", "-P", "FORWARD", "ACCEPT"])
    assert min(plain.get(c, 0) for c in ("forwarded", "filter_dropped", "filter_kernel")) >= 20, plain
    # (where connections are tracked, every drop is raw's, before conntrack)
    assert min(tracked.get(c, 0) for c in ("filter_dropped", "filter_ct_new")) >= 10, tracked


def test_generations_never_mix(filter_ns):
    """The next ruleset's entries are written beside the current ones and
    take effect when lfp_flt_cfg names their generation (verdicts the flow
    cache remembers from the old one included); erasing the old generation
    then changes nothing a packet sees."""
    filter_ns.run(["iptables-restore"], input=random_ruleset(100, 40, ("in0", "out0"), pool=ROUTER_POOL))
    first = LoadedPipeline(filter_ns)
    try:
        filter_ns.run(["iptables-restore"], input=random_ruleset(101, 40, ("in0", "out0"), pool=ROUTER_POOL))
        with entered(filter_ns):
            snap = read_snapshot()
            second_tables = build_graph(snap, "xdp").tables
            second = filter_plan(snap).classifier
        assert second.generation != first.plan.classifier.generation
        frames = [f for f in probe_frames(TOPOLOGY, 7, 120) if not (f[23] == 1 and f[34] == 3)]
        old = [first.run(f).retval for f in frames]
        new_entries = [t for t in second_tables if t.owner == "filter" and t.name != CFG]
        first.write(new_entries)                                   # beside the old ones
        assert [first.run(f).retval for f in frames] == old       # cfg still names the old generation
        first.write([t for t in second_tables if t.name == CFG])
        wanted = [expected(first, second, f)[0] for f in frames]
        assert wanted != old                 # the rules differ for some frames the cache holds
        assert [first.run(f).retval for f in frames] == wanted
        for table in first.graph.tables:
            if table.owner == "filter" and table.name != CFG:     # the old generation goes
                m = first.obj.map(table.name)
                for key, _ in table.entries - next(t for t in second_tables if t.name == table.name).entries:
                    m.delete(key)
        assert [first.run(f).retval for f in frames] == [expected(first, second, f)[0] for f in frames]
        assert first.counter("filter_stale") == 0
    finally:
        first.obj.close()


def test_tcp_goes_to_the_kernel_before_routing_while_connections_are_tracked(filter_ns):
    """The conntrack node passes IPv4 TCP before the router looks
    anything up while the generation tracks connections; UDP (without NAT
    to translate) and IPv6 it leaves to the nodes after it; and a ruleset
    without tracking makes TCP the filter's again as soon as its generation
    is written, before any reload."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    from linuxfp.lab.netns import entered

    head = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
    drop = "-A FORWARD -d 198.19.1.0/24 -p tcp -j DROP\n"
    filter_ns.run(["iptables-restore"], input=head + "-A FORWARD -m conntrack --ctstate INVALID -j DROP\n"
                  + drop + "COMMIT\n")
    loaded = pipeline_loader.LoadedPipeline(filter_ns, "in0", "xdp", ("conntrack", "router", "filter", "nat_out", "transmit"),
                                            "test_ct_tcp")

    def frame(dst: str, l4) -> bytes:
        return bytes(Ether(src="02:00:00:00:01:02", dst=IN_MAC) / IP(src="198.18.1.1", dst=dst) / l4)

    allowed, blocked = frame("198.19.2.5", TCP(sport=40000, dport=80, flags="A")), \
        frame("198.19.1.5", TCP(sport=40000, dport=80, flags="A"))

    def looked_up() -> int:
        return sum(loaded.counter(name) for name in ("fib_cache_hit", "fib_cache_miss", "fib_cache_off", "fib_cache_storm"))

    try:
        for tcp in (allowed, blocked):
            tracked, lookups = loaded.counter("ct_tcp_tracked"), looked_up()
            result = loaded.run(tcp)
            assert (result.retval, result.data_out) == (XDP_PASS, tcp)
            assert (loaded.counter("ct_tcp_tracked"), looked_up()) == (tracked + 1, lookups)
        others = (frame("198.19.2.5", UDP(sport=40000, dport=53)),
                  bytes(Ether(src="02:00:00:00:01:02", dst=IN_MAC) / IPv6(src="2001:db8::1", dst="2001:db8:1::5")
                        / TCP(sport=40000, dport=80, flags="A")))
        for other in others:
            tracked = loaded.counter("ct_tcp_tracked")
            loaded.run(other)
            assert loaded.counter("ct_tcp_tracked") == tracked
        # the same rule without tracking: the running program classifies TCP again
        filter_ns.run(["iptables-restore"], input=head + drop + "COMMIT\n")
        with entered(filter_ns):
            tables = build_graph(read_snapshot(), "xdp").tables
        loaded.write([t for t in tables if t.owner == "filter" and t.name != CFG])
        loaded.write([t for t in tables if t.name == CFG])
        tracked = loaded.counter("ct_tcp_tracked")
        assert loaded.run(blocked).retval == XDP_DROP
        assert loaded.run(allowed).retval == XDP_REDIRECT
        assert loaded.counter("ct_tcp_tracked") == tracked
    finally:
        loaded.close()
        filter_ns.run(["iptables", "-F", "FORWARD"])


def test_a_drop_before_conntrack_needs_no_connection(filter_ns):
    """Where connections are tracked and translated, raw's PREROUTING drops
    a datagram that has no connection as Linux does — before conntrack,
    which so never creates one — while one it lets through goes to the
    kernel for its new connection; the generation says a chain before
    conntrack decides (LFP_FLT_CT_LATE)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from linuxfp.graph.filtering.classifier import LATE_BIT
    from linuxfp.lab.conntrack import udp_entries

    filter_ns.run(["iptables-restore"], input="\n".join([
        "*raw", ":PREROUTING ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", "-A PREROUTING -d 198.19.1.0/24 -j DROP", "COMMIT",
        "*nat", ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]",
        "-A POSTROUTING -o out0 -d 198.19.3.0/24 -j MASQUERADE", "COMMIT",
        "*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]",
        "-A FORWARD -m conntrack --ctstate INVALID -j DROP", "COMMIT", ""]))
    loaded = LoadedPipeline(filter_ns, stateful=True, name="test_ct_late")

    def frame(dst: str) -> bytes:
        return bytes(Ether(src="02:00:00:00:01:02", dst=IN_MAC) / IP(src="198.18.1.1", dst=dst)
                     / UDP(sport=40000, dport=53) / b"query")

    try:
        assert loaded.plan.classifier.generation & LATE_BIT
        for dst, retval, counter in (("198.19.1.5", XDP_DROP, "filter_dropped"),
                                     ("198.19.2.5", XDP_PASS, "filter_ct_new")):
            before = loaded.counter(counter)
            result = loaded.run(frame(dst))
            assert (result.retval, loaded.counter(counter)) == (retval, before + 1), dst
            assert result.data_out == frame(dst)
        assert not [key for key in udp_entries(filter_ns) if key[1] == "198.19.1.5"]
    finally:
        loaded.close()
        filter_ns.run(["iptables", "-t", "raw", "-F"])
        filter_ns.run(["iptables", "-t", "nat", "-F"])
        filter_ns.run(["iptables", "-F", "FORWARD"])


@pytest.mark.parametrize("family", [IPV4, IPV6], ids=["iptables", "ip6tables"])
def test_one_flows_packets_are_told_apart_by_their_tcp_flags(filter_ns, family):
    """`! --syn` / `--tcp-flags`: the packets of one flow (same addresses,
    ports, interfaces) get the verdict their flags call for, in any order —
    the flow cache keys on the flags once a rule looks at them. (SYN-FIN is
    not --syn: xt_tcp compares the flags under the mask, FIN,SYN,RST,ACK.)"""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    ip = IPv6(src="2001:db8:1::1", dst="2001:db8:100::5") if family is IPV6 else IP(src="198.18.1.1", dst="198.19.1.5")
    restore, dst = ("ip6tables-restore", "2001:db8:100::/56") if family is IPV6 else ("iptables-restore", "198.19.1.0/24")
    head = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n"
    filter_ns.run([restore], input=head + f"-A FORWARD -d {dst} -p tcp -m tcp --tcp-flags ALL NONE -j DROP\n"
                  f"-A FORWARD -d {dst} -p tcp -m tcp ! --syn -j ACCEPT\n"
                  f"-A FORWARD -d {dst} -p tcp -m tcp --dport 22 -j ACCEPT\nCOMMIT\n")

    def frame(flags: str, dport: int = 80) -> bytes:
        return bytes(Ether(src="02:00:00:00:01:02", dst=IN_MAC) / ip / TCP(sport=40000, dport=dport, flags=flags))

    loaded = LoadedPipeline(filter_ns)
    classifier = loaded.plan.classifier6 if family is IPV6 else loaded.plan.classifier
    try:
        assert classifier.used & FIELD_BIT["tcpflags"]
        assert not loaded.plan.program.unsupported if family is IPV4 else not loaded.plan.program6.unsupported
        cases = [("A", XDP_REDIRECT), ("S", XDP_DROP), ("SA", XDP_REDIRECT), ("", XDP_DROP), ("PA", XDP_REDIRECT),
                 ("S", XDP_DROP), ("FA", XDP_REDIRECT), ("R", XDP_REDIRECT), ("SF", XDP_REDIRECT), ("A", XDP_REDIRECT)]
        for flags, wanted in cases * 2:
            assert loaded.run(frame(flags)).retval == wanted, flags
            assert expected(loaded, classifier, frame(flags), family)[0] == wanted, flags
        assert loaded.run(frame("S", 22)).retval == XDP_REDIRECT     # a SYN to port 22 is let through
    finally:
        loaded.obj.close()
        filter_ns.run([restore], input=head.replace("FORWARD DROP", "FORWARD ACCEPT") + "COMMIT\n")
