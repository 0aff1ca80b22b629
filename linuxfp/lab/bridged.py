"""The bridge lab: hosts a, b and c on the ports of one Linux bridge in the
DUT, made with `ip link` or with `brctl` as an operator would, with an
address on the bridge (the hosts' gateway); and the frames that exercise
what a bridge decides (known and unknown unicast, group addresses, frames
to the bridge itself, what br_netfilter drops or trims, MTU).

Address plan: hosts 198.18.10.1-3/24 on their `to-dut`, the bridge
198.18.10.254/24. The link to c has a smaller MTU (1400) so that frames
too long for one port exist. With `uplink`, the DUT also routes: host u
(198.18.11.1/24) behind its `to-u` (198.18.11.254/24), the bridge's hosts
reaching it through the bridge's address, as containers on docker0 or cni0
reach the world.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from .frames import (
    NEXTHDR_FRAGMENT,
    arp_frame,
    ethernet,
    icmp_echo_frame,
    ipv4,
    ipv6_fragment_header,
    ipv6_frame,
    ipv6_udp_frame,
    padded,
    tcp_frame,
    udp,
    udp6,
    udp_frame,
    with_bad_ip_checksum,
)
from .netns import Lab
from .topology import (IPV6_INTERFACE_SYSCTLS, LAB_INTERFACE_SYSCTLS, LinkSpec, Topology, TopologySpec, build,
                       ipv6_sysctls, read_interfaces)

HOSTS = ("a", "b", "c")
BRIDGE = "br0"
BRIDGE_IP = "198.18.10.254"
UNKNOWN_MAC = "02:00:00:00:99:99"
STATIC_MAC = "02:00:00:00:aa:aa"
NEW_MAC = "02:00:00:00:77:77"
C_MTU = 1400
UPLINK = "u"
UPLINK_IP, UPLINK_DUT_IP = "198.18.11.1", "198.18.11.254"
# With ipv6 (and uplink): the DUT routes IPv6 too — the bridge's address,
# its uplink, what lies beyond u, and addresses on the bridge whose
# permanent neighbours are the hosts' MACs (the hosts keep IPv6 off and drop
# what reaches them silently; no neighbour discovery at all).
BRIDGE_IP6, UPLINK_IP6, UPLINK_DUT_IP6 = "2001:db8:10::fe", "2001:db8:11::1", "2001:db8:11::fe"
BEYOND_UPLINK6 = "2001:db8:12::"
ON_BRIDGE6 = {h: f"2001:db8:10::1{i + 1:02x}" for i, h in enumerate(HOSTS)}


def host_ip(host: str) -> str:
    return f"198.18.10.{HOSTS.index(host) + 1}"


@dataclass(frozen=True)
class Bridged(Topology):
    """A built `BridgeTopology`."""

    tool: str

    def mac(self, host: str) -> str:
        return self.iface(host, "to-dut").mac

    @property
    def bridge_mac(self) -> str:
        for interface in read_interfaces("dut", self.dut):
            if interface.name == BRIDGE:
                return interface.mac
        raise KeyError(BRIDGE)


@dataclass(frozen=True)
class BridgeTopology:
    """``a, b, c — [br0 in dut]``: a factory, ``BridgeTopology(tool="brctl")(lab)``.

    `tool` is "ip" (ip link ... type bridge) or "brctl" (bridge-utils);
    `ageing` the bridge's ageing time in seconds; `uplink` adds the routed
    host u; frames enter at `inject_from`'s `to-dut`; `containers` makes
    a, b and c like pods (no GRO on their ends)."""

    tool: str = "ip"
    ageing: int = 300
    uplink: bool = False
    inject_from: str = "a"
    containers: bool = False    # a, b, c keep veth defaults, as pods do (see TopologySpec.containers)
    ipv6: bool = False          # with uplink: the DUT routes IPv6 as well (BRIDGE_IP6, ...)

    def commands(self) -> list[list[str]]:
        """What the operator runs in the DUT to make the bridge."""
        ports = [f"to-{h}" for h in HOSTS]
        if self.tool == "brctl":
            cmds = [["brctl", "addbr", BRIDGE], ["brctl", "setageing", BRIDGE, str(self.ageing)]]
            cmds += [["brctl", "addif", BRIDGE, port] for port in ports]
        elif self.tool == "ip":
            cmds = [["ip", "link", "add", BRIDGE, "type", "bridge", "ageing_time", str(self.ageing * 100)]]
            cmds += [["ip", "link", "set", port, "master", BRIDGE] for port in ports]
        else:
            raise ValueError(f"unknown bridge tool {self.tool!r} (ip or brctl)")
        # With multicast snooping the bridge joins the all-snoopers group and
        # sends IGMP reports at random times (report timers), which two builds
        # cannot reproduce; without it, it floods group frames as the lab
        # expects.
        cmds += [["ip", "link", "set", BRIDGE, "type", "bridge", "mcast_snooping", "0"],
                 ["ip", "link", "set", BRIDGE, "up"],
                 ["ip", "address", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE]]
        return cmds

    def spec(self) -> TopologySpec:
        links = tuple(LinkSpec(h, "to-dut", "dut", f"to-{h}", mtu=C_MTU if h == "c" else 1500) for h in HOSTS)
        addresses = tuple((h, "to-dut", f"{host_ip(h)}/24") for h in HOSTS)
        hosts, routes, sysctls = (*HOSTS, "dut"), (), ()
        if self.uplink:
            hosts += (UPLINK,)
            links += (LinkSpec(UPLINK, "to-dut", "dut", f"to-{UPLINK}"),)
            addresses += ((UPLINK, "to-dut", f"{UPLINK_IP}/24"), ("dut", f"to-{UPLINK}", f"{UPLINK_DUT_IP}/24"))
            routes = ((UPLINK, f"route add 198.18.10.0/24 via {UPLINK_DUT_IP}"),
                      *((h, f"route add 198.18.11.0/24 via {BRIDGE_IP}") for h in HOSTS))
            # A packet routed back out of the bridge draws an ICMP redirect,
            # rate-limited by time: two runs would differ by when they ran.
            sysctls = (("dut", "net.ipv4.ip_forward", 1), ("dut", "net.ipv4.conf.all.send_redirects", 0),
                       ("dut", "net.ipv4.conf.default.send_redirects", 0))
        if self.ipv6:
            if not self.uplink:
                raise ValueError("BridgeTopology(ipv6=True) routes IPv6: it needs uplink=True")
            addresses += (("dut", f"to-{UPLINK}", f"{UPLINK_DUT_IP6}/64"),)
            sysctls += ipv6_sysctls("dut", (f"to-{UPLINK}",))
        if self.inject_from not in hosts or self.inject_from == "dut":
            raise ValueError(f"frames cannot enter at {self.inject_from!r}")
        return TopologySpec(hosts=hosts, links=links, dut="dut", inject=(self.inject_from, "to-dut"),
                            addresses=addresses, routes=routes, sysctls=sysctls,
                            containers=HOSTS if self.containers else ())

    def __call__(self, lab: Lab) -> Bridged:
        built = build(lab, self.spec())
        for cmd in self.commands() + (_uplink_commands(built) if self.uplink else []):
            built.dut.run(cmd)
        # The bridge carries the DUT's address: its neighbour timers are the
        # lab's too (no re-probing at times that depend on a run's speed).
        for key, value in LAB_INTERFACE_SYSCTLS:
            built.dut.sysctl(key.format(ifname=BRIDGE), value)
        if self.ipv6:
            for key, value in IPV6_INTERFACE_SYSCTLS:
                built.dut.sysctl(key.format(ifname=BRIDGE), value)
            built.dut.run(["ip", "address", "add", f"{BRIDGE_IP6}/64", "dev", BRIDGE])
            # (after the bridge exists: the write reaches every device)
            built.dut.sysctl("net.ipv6.conf.all.forwarding", 1)
            for cmd in _uplink_commands6(built):
                built.dut.run(cmd)
        built.wait_links_settled()
        # The bridge learns every host (and every host its neighbours):
        # the same FDB in every build.
        pings = [(src, BRIDGE_IP if dst == "dut" else host_ip(dst))
                 for src, dst in (("a", "b"), ("a", "c"), ("b", "c"), ("a", "dut"))]
        if self.uplink:
            # and every host's route through the DUT to u (the DUT's
            # neighbours on both sides)
            pings += [(h, UPLINK_IP) for h in HOSTS]
        for src, target in pings:
            built.ns(src).run(["ping", "-c", "1", "-W", "2", "-q", target])
        interfaces = tuple(i for host, ns in built.hosts for i in read_interfaces(host, ns))
        values = {f.name: getattr(built, f.name) for f in fields(Topology)}
        values["interfaces"] = interfaces
        return Bridged(**values, tool=self.tool)


def bridge_frames(topology: Bridged, step: int = 0) -> list[bytes]:
    """Frames injected at a, each one a case of the bridge's decision."""
    a, b, c = topology.mac("a"), topology.mac("b"), topology.mac("c")
    # Addressed to the hosts' MACs but not to their addresses: they drop the
    # packets silently (no forwarding), so nothing they would answer with
    # (IP IDs from a per-namespace random key) differs between two builds.
    ip_a, ip_b, ip_c = host_ip("a"), "198.18.10.102", "198.18.10.103"
    br = topology.bridge_mac
    out: list[bytes] = []
    # known unicast, several protocols and sizes
    for n in range(4):
        out.append(udp_frame(a, b, ip_a, ip_b, sport=41000 + n, dport=9, size=64 + 100 * n))
        out.append(tcp_frame(a, c, ip_a, ip_c, sport=42000 + n, dport=80, payload=bytes([n]) * (10 + n)))
    out.append(icmp_echo_frame(a, b, ip_a, ip_b, ident=7, seq=step + 1))
    out.append(arp_frame(a, ip_a, ip_b, op=2, dst_mac=b, target_mac=b))     # unicast ARP reply
    out.append(ipv6_udp_frame(a, b, "2001:db8::1", "2001:db8::2"))
    # an IPv6 fragment (the first of two): the kernel's, whatever the rules
    out.append(ipv6_frame(a, b, "2001:db8::1", "2001:db8::2", NEXTHDR_FRAGMENT,
                          ipv6_fragment_header(17, more=True, ident=0x1234)
                          + udp6("2001:db8::1", "2001:db8::2", 40200, 9, bytes(24))[:16]))
    out.append(ethernet(b, a, 0x88B5, b"local experimental ethertype".ljust(46, b"\0")))
    # group destinations: flooded by the kernel
    out.append(udp_frame(a, "ff:ff:ff:ff:ff:ff", ip_a, "198.18.10.255", dport=9))
    out.append(udp_frame(a, "01:00:5e:00:00:fb", ip_a, "224.0.0.251", dport=5353))
    out.append(ethernet("01:80:c2:00:00:00", a, 0x0026, bytes(46)))       # link-local (STP)
    # unknown unicast (flooded), static entry, the bridge's own MAC (local delivery)
    out.append(udp_frame(a, UNKNOWN_MAC, ip_a, ip_b, sport=43000))
    out.append(udp_frame(a, STATIC_MAC, ip_a, ip_c, sport=43001))
    out.append(icmp_echo_frame(a, br, ip_a, BRIDGE_IP, ident=8, seq=step + 1))
    # what br_netfilter drops or trims (with bridge-nf-call-iptables=1)
    out.append(with_bad_ip_checksum(udp_frame(a, b, ip_a, ip_b, sport=44000)))
    out.append(padded(ethernet(b, a, 0x0800, ipv4(ip_a, ip_b, 17, udp(ip_a, ip_b, 44001, 9, b"x"))), 12))
    out.append(ethernet(b, a, 0x0800, ipv4(ip_a, ip_b, 17, udp(ip_a, ip_b, 44002, 9, b"opts"),
                                        options=b"\x01\x01\x01\x00")))
    out.append(ethernet(b, a, 0x0800, ipv4(ip_a, ip_b, 17, udp(ip_a, ip_b, 44003, 9, b"short"))[:24]))
    # too long for c's port (MTU 1400): with DF dropped, without DF fragmented by br_netfilter
    out.append(udp_frame(a, c, ip_a, ip_c, sport=45000, size=1450))
    out.append(ethernet(c, a, 0x0800, ipv4(ip_a, ip_c, 17, udp(ip_a, ip_c, 45001, 9, bytes(1420)), df=True)))
    # a source that is not valid, and one the bridge has not seen (it learns it)
    out.append(udp_frame("01:00:00:00:00:01", b, ip_a, ip_b, sport=46000))
    out.append(udp_frame(NEW_MAC, b, ip_a, ip_b, sport=46001))
    out.append(udp_frame(a, NEW_MAC, ip_a, ip_b, sport=46002))            # behind the ingress port now
    # a steady flow: after the first, these take the fast path
    out.extend(udp_frame(a, c, ip_a, ip_c, sport=47000, dport=9, payload=bytes([n]) * 32) for n in range(16))
    return out


# Behind the uplink host (routed to it; it drops them silently) and, on the
# bridge, addresses whose permanent neighbours are the hosts' MACs (they
# drop them silently): no host answers, so no host-made IP ID differs.
BEYOND_UPLINK = "198.18.12"
ON_BRIDGE = {h: f"198.18.10.{101 + i}" for i, h in enumerate(HOSTS)}
UNKNOWN_ON_BRIDGE = "198.18.10.104"     # its neighbour is UNKNOWN_MAC, which no port has shown


def _uplink_commands(topology: Topology) -> list[list[str]]:
    """What the DUT of an uplinked lab carries besides the bridge: a route
    beyond u and the permanent neighbours of ON_BRIDGE."""
    cmds = [["ip", "route", "add", f"{BEYOND_UPLINK}.0/24", "via", UPLINK_IP]]
    cmds += [["ip", "neigh", "replace", address, "lladdr", topology.iface(h, "to-dut").mac, "dev", BRIDGE,
              "nud", "permanent"] for h, address in ON_BRIDGE.items()]
    cmds.append(["ip", "neigh", "replace", UNKNOWN_ON_BRIDGE, "lladdr", UNKNOWN_MAC, "dev", BRIDGE, "nud", "permanent"])
    return cmds


def _uplink_commands6(topology: Topology) -> list[list[str]]:
    """IPv6 of an uplinked lab: the route beyond u, and permanent neighbours
    (u, and ON_BRIDGE6 on the bridge)."""
    cmds = [["ip", "-6", "route", "add", f"{BEYOND_UPLINK6}/64", "via", UPLINK_IP6]]
    cmds.append(["ip", "-6", "neigh", "replace", UPLINK_IP6, "lladdr", topology.iface(UPLINK, "to-dut").mac,
                 "dev", f"to-{UPLINK}", "nud", "permanent"])
    cmds += [["ip", "-6", "neigh", "replace", address, "lladdr", topology.iface(h, "to-dut").mac, "dev", BRIDGE,
              "nud", "permanent"] for h, address in ON_BRIDGE6.items()]
    return cmds


def routed_frames6(topology: Bridged, step: int = 0) -> list[bytes]:
    """IPv6 across the bridge and the router (BridgeTopology(ipv6=True)):
    from a host to the bridge's MAC and beyond u, or from u to addresses on
    the bridge, out of the port its FDB names."""
    source = topology.spec.inject[0]
    mac, dut_mac, _, _ = routed_ends(topology)
    if source == UPLINK:
        ip, targets = "2001:db8:11::1", list(ON_BRIDGE6.values())
    else:
        ip, targets = f"2001:db8:10::{HOSTS.index(source) + 1}", [f"{BEYOND_UPLINK6}{n}" for n in (1, 2, 3)]
    out = [ipv6_udp_frame(mac, dut_mac, ip, target, sport=41000 + n, size=80 + 400 * n)
           for n, target in enumerate(targets)]
    out.append(ipv6_udp_frame(mac, dut_mac, ip, targets[0], sport=43000, hop_limit=1))
    if source != UPLINK:
        out.append(ipv6_udp_frame(mac, dut_mac, ip, BRIDGE_IP6, sport=40100))           # local
        out.append(ipv6_udp_frame(mac, dut_mac, ip, ON_BRIDGE6["b"], sport=40101))      # back out of br0
    # a steady flow: after the first, these take the fast path
    out.extend(ipv6_udp_frame(mac, dut_mac, ip, targets[1], sport=47000, payload=bytes([n]) * 32)
               for n in range(16))
    return out


def routed_ends(topology: Bridged) -> tuple[str, str, str, list[str]]:
    """Where routed frames start (source MAC, the DUT's MAC they are sent
    to, source address) and the addresses they go to, from the host that
    injects: a host sends to the bridge's MAC and beyond the uplink, u to
    the DUT's uplink and to addresses on the bridge."""
    source = topology.spec.inject[0]
    if source == UPLINK:
        return topology.mac(UPLINK), topology.iface("dut", f"to-{UPLINK}").mac, UPLINK_IP, list(ON_BRIDGE.values())
    return topology.mac(source), topology.bridge_mac, host_ip(source), [f"{BEYOND_UPLINK}.{n}" for n in (1, 2, 3)]


def routed_frames(topology: Bridged, step: int = 0) -> list[bytes]:
    """Frames that cross the bridge and the router, from where the lab
    injects: from a host to the bridge's MAC and on to the uplink, or from
    u into the bridge and out of the port its FDB names."""
    source = topology.spec.inject[0]
    mac, dut_mac, ip, targets = routed_ends(topology)
    out: list[bytes] = []
    if source == UPLINK:
        big_target = ON_BRIDGE["c"]            # the bridge's MTU is c's port's (1400)
        out.append(udp_frame(mac, dut_mac, ip, UNKNOWN_ON_BRIDGE, sport=40103))    # the bridge floods it
    else:
        big_target = targets[0]
        # what the bridge hands up but the router does not forward itself
        out.append(udp_frame(mac, dut_mac, ip, BRIDGE_IP, sport=40100, dport=9))          # local
        out.append(udp_frame(mac, dut_mac, ip, ON_BRIDGE["b"], sport=40101, dport=9))     # back out of br0
        out.append(ipv6_udp_frame(mac, dut_mac, "2001:db8::1", "2001:db8::2"))
        # another port's own MAC (a local FDB entry that is not the bridge's:
        # the bridge, which took the lowest port MAC, hands it up as not for
        # this host)
        other = "c" if source != "c" else "b"
        out.append(udp_frame(mac, topology.iface("dut", f"to-{other}").mac, ip, targets[0], sport=40102))
    for n, target in enumerate(targets):
        out.append(udp_frame(mac, dut_mac, ip, target, sport=41000 + n, dport=9, size=64 + 400 * n))
        out.append(udp_frame(mac, dut_mac, ip, target, sport=41100 + n, dport=7, payload=bytes([n]) * 20))
        out.append(tcp_frame(mac, dut_mac, ip, target, sport=42000 + n, dport=80, payload=bytes([n]) * (10 + n)))
    out.append(udp_frame(mac, dut_mac, ip, targets[0], sport=43000, ttl=1))
    out.append(with_bad_ip_checksum(udp_frame(mac, dut_mac, ip, targets[0], sport=43001)))
    out.append(udp_frame(mac, dut_mac, ip, big_target, sport=43002, size=1450))
    out.append(ethernet(dut_mac, mac, 0x0800, ipv4(ip, big_target, 17, udp(ip, big_target, 43003, 9, bytes(1420)),
                                                    df=True)))
    # a steady flow: after the first, these take the fast path
    out.extend(udp_frame(mac, dut_mac, ip, targets[1], sport=47000, dport=9, payload=bytes([n]) * 32)
               for n in range(16))
    return out


__all__ = ["BridgeTopology", "Bridged", "bridge_frames", "host_ip", "BRIDGE", "BRIDGE_IP",
           "STATIC_MAC", "UNKNOWN_MAC", "NEW_MAC",
           "UPLINK", "UPLINK_IP", "ON_BRIDGE", "UNKNOWN_ON_BRIDGE", "BEYOND_UPLINK", "routed_ends", "routed_frames",
           "BRIDGE_IP6", "ON_BRIDGE6", "routed_frames6"]
