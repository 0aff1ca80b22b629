"""The benchmark's three-node line: source — DUT — sink, in throw-away namespaces.

    [src] gen ==veth== in [dut] out ==veth== snk [sink]
    198.18.0.1/30  198.18.0.2/30   198.18.0.5/30  198.18.0.6/30

The DUT routes `prefixes` /24s of 198.19.0.0/16 (and more for the scale
scenario) via the sink, configured with iproute2 exactly as an operator
would; every system under test sees the same configuration. A *bridged*
line's DUT is a Linux bridge instead: both veths are ports of br0 (no
addresses), the generator's and the sink's MACs are static FDB entries, and
frames cross it unchanged. Interface names
carry a per-run tag so the CPU accounting can tell the DUT's ingress device
from the sink's by name, whatever namespace they live in.
"""
from __future__ import annotations

import ipaddress
import json
import secrets
from dataclasses import dataclass

from linuxfp.lab.netns import Lab, Namespace

GEN_IP, DUT_IN_IP = "198.18.0.1", "198.18.0.2"
DUT_OUT_IP, SINK_IP = "198.18.0.5", "198.18.0.6"
LINK_PREFIXLEN = 30
ROUTED_NET = ipaddress.ip_network("198.19.0.0/16")
# Sources the generator cycles through when every frame must be a new flow
# (generator.c, traffic 3): no address of the line's, and rp_filter is off.
SOURCE_POOL = ipaddress.ip_network("198.18.16.0/20")
MAX_PREFIXES = 256
# The dual-stack line (bench router6): the same roles in IPv6, prefix i
# routed as 2001:db8:100:i::/64.
GEN_IP6, DUT_IN_IP6 = "2001:db8:b::1", "2001:db8:b::2"
DUT_OUT_IP6, SINK_IP6 = "2001:db8:c::1", "2001:db8:c::2"


@dataclass(frozen=True)
class Port:
    """One end of a veth inside a namespace."""

    ns: Namespace
    ifname: str
    ifindex: int
    mac: str
    ip: str


@dataclass(frozen=True)
class Line:
    src: Namespace
    dut: Namespace
    sink: Namespace
    gen: Port        # the generator's veth (source side)
    dut_in: Port     # the DUT's ingress, peer of gen
    dut_out: Port    # the DUT's egress
    snk: Port        # the sink's veth, peer of dut_out
    prefixes: tuple[str, ...]
    bridged: bool = False
    ipv6: bool = False      # dual stack: prefixes6 routed too

    @property
    def frame_dst_mac(self) -> str:
        """Where the generator addresses its frames: the DUT's ingress (a
        router's next hop), or the sink itself across a bridge."""
        return self.snk.mac if self.bridged else self.dut_in.mac

    @property
    def arrival_src_mac(self) -> str:
        """The source MAC forwarded frames reach the sink with."""
        return self.gen.mac if self.bridged else self.dut_out.mac

    def prefix_address(self, index: int, host: int = 1) -> str:
        """An address inside routed prefix `index`."""
        network = ipaddress.ip_network(self.prefixes[index])
        return str(network.network_address + host)


def routed_prefix6(index: int) -> str:
    return f"2001:db8:100:{index:x}::/64"


def routed_prefixes(count: int) -> tuple[str, ...]:
    if not 1 <= count <= MAX_PREFIXES:
        raise ValueError(f"prefixes must be 1..{MAX_PREFIXES}, not {count}")
    return tuple(str(net) for net in list(ROUTED_NET.subnets(new_prefix=24))[:count])


def _port(ns: Namespace, ifname: str, ip: str) -> Port:
    shown = json.loads(ns.run(["ip", "-j", "link", "show", "dev", ifname]).stdout)[0]
    return Port(ns, ifname, int(shown["ifindex"]), shown["address"], ip)


def build_line(lab: Lab, prefixes: int = 50, tag: str | None = None, bridged: bool = False,
               ipv6: bool = False) -> Line:
    """Create the namespaces, veths, addresses and routes (or the bridge);
    the Lab removes them. ipv6: a dual-stack router (routed_prefix6 too)."""
    tag = tag or secrets.token_hex(2)
    names = {role: f"b{role}{tag}" for role in ("g", "i", "o", "s")}
    src, dut, sink = lab.namespace("bsrc"), lab.namespace("bdut"), lab.namespace("bsnk")

    src.run(["ip", "link", "add", names["g"], "type", "veth", "peer", "name", names["i"], "netns", dut.name])
    dut.run(["ip", "link", "add", names["o"], "type", "veth", "peer", "name", names["s"], "netns", sink.name])
    if bridged:
        return _bridged_line(src, dut, sink, names, routed_prefixes(prefixes))
    for ns, ifname, ip in (
        (src, names["g"], GEN_IP),
        (dut, names["i"], DUT_IN_IP),
        (dut, names["o"], DUT_OUT_IP),
        (sink, names["s"], SINK_IP),
    ):
        ns.disable_ipv6(ifname)
        ns.run(["ip", "addr", "add", f"{ip}/{LINK_PREFIXLEN}", "dev", ifname])
        ns.run(["ip", "link", "set", "dev", ifname, "up"])

    # A plain router: forwarding on, reverse-path filtering off (the fast
    # path hands rp_filter to the kernel; a router with asymmetric routes
    # runs without it), and the same settings whatever the host's defaults.
    dut.sysctl("net.ipv4.ip_forward", 1)
    for scope in ("all", "default", names["i"], names["o"]):
        dut.sysctl(f"net/ipv4/conf/{scope}/rp_filter", 0)
    for ns in (src, sink):
        ns.sysctl("net.ipv4.conf.all.rp_filter", 0)

    line_prefixes = routed_prefixes(prefixes)
    batch = "".join(f"route add {prefix} via {SINK_IP} dev {names['o']}\n" for prefix in line_prefixes)
    dut.run(["ip", "-batch", "-"], input=batch)
    # Return path for the latency scenario's replies.
    sink.run(["ip", "route", "add", f"{GEN_IP}/32", "via", DUT_OUT_IP])
    src.run(["ip", "route", "add", str(ROUTED_NET), "via", DUT_IN_IP])

    gen, dut_in = _port(src, names["g"], GEN_IP), _port(dut, names["i"], DUT_IN_IP)
    dut_out, snk = _port(dut, names["o"], DUT_OUT_IP), _port(sink, names["s"], SINK_IP)
    # Resolved neighbours, as on a router that has been forwarding for a
    # while: ARP must not be part of any measurement.
    dut.run(["ip", "neigh", "replace", SINK_IP, "lladdr", snk.mac, "dev", dut_out.ifname, "nud", "permanent"])
    dut.run(["ip", "neigh", "replace", GEN_IP, "lladdr", gen.mac, "dev", dut_in.ifname, "nud", "permanent"])
    src.run(["ip", "neigh", "replace", DUT_IN_IP, "lladdr", dut_in.mac, "dev", gen.ifname, "nud", "permanent"])
    sink.run(["ip", "neigh", "replace", DUT_OUT_IP, "lladdr", dut_out.mac, "dev", snk.ifname, "nud", "permanent"])
    if ipv6:
        _add_ipv6(src, dut, sink, gen, dut_in, dut_out, snk, len(line_prefixes))
    return Line(src, dut, sink, gen, dut_in, dut_out, snk, line_prefixes, ipv6=ipv6)


def _add_ipv6(src, dut, sink, gen: Port, dut_in: Port, dut_out: Port, snk: Port, prefixes: int) -> None:
    """IPv6 beside IPv4 on the routed line: addresses, forwarding, the
    prefixes via the sink, resolved neighbours."""
    from linuxfp.lab.topology import IPV6_HOST_SYSCTLS, IPV6_INTERFACE_SYSCTLS

    for port, address in ((gen, GEN_IP6), (dut_in, DUT_IN_IP6), (dut_out, DUT_OUT_IP6), (snk, SINK_IP6)):
        for key, value in IPV6_HOST_SYSCTLS:
            port.ns.sysctl(key, value)
        for key, value in IPV6_INTERFACE_SYSCTLS:
            port.ns.sysctl(key.format(ifname=port.ifname), value)
        port.ns.run(["ip", "addr", "add", f"{address}/64", "dev", port.ifname])
    dut.sysctl("net.ipv6.conf.all.forwarding", 1)
    batch = "".join(f"route add {routed_prefix6(i)} via {SINK_IP6} dev {dut_out.ifname}\n" for i in range(prefixes))
    dut.run(["ip", "-batch", "-"], input=batch)
    dut.run(["ip", "neigh", "replace", SINK_IP6, "lladdr", snk.mac, "dev", dut_out.ifname, "nud", "permanent"])
    dut.run(["ip", "neigh", "replace", GEN_IP6, "lladdr", gen.mac, "dev", dut_in.ifname, "nud", "permanent"])
    src.run(["ip", "neigh", "replace", DUT_IN_IP6, "lladdr", dut_in.mac, "dev", gen.ifname, "nud", "permanent"])
    sink.run(["ip", "neigh", "replace", DUT_OUT_IP6, "lladdr", dut_out.mac, "dev", snk.ifname, "nud", "permanent"])


def _bridged_line(src: Namespace, dut: Namespace, sink: Namespace, names: dict, prefixes: tuple[str, ...]) -> Line:
    """The DUT as an operator's bridge: br0 with both veths as ports, STP
    off, the two end hosts' MACs as static FDB entries (nothing floods, and
    nothing ages out during a long run)."""
    for ns, ifname in ((src, names["g"]), (sink, names["s"])):
        ns.disable_ipv6(ifname)
    for ifname in (names["i"], names["o"]):
        dut.disable_ipv6(ifname)
    for ns, ifname, ip in ((src, names["g"], GEN_IP), (sink, names["s"], SINK_IP)):
        ns.run(["ip", "addr", "add", f"{ip}/24", "dev", ifname])
    dut.run(["ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"])
    dut.disable_ipv6("br0")
    for ifname in (names["i"], names["o"]):
        dut.run(["ip", "link", "set", ifname, "master", "br0"])
    for ns, ifname in ((src, names["g"]), (dut, names["i"]), (dut, names["o"]), (sink, names["s"]), (dut, "br0")):
        ns.run(["ip", "link", "set", "dev", ifname, "up"])
    gen, dut_in = _port(src, names["g"], GEN_IP), _port(dut, names["i"], "")
    dut_out, snk = _port(dut, names["o"], ""), _port(sink, names["s"], SINK_IP)
    dut.run(["bridge", "fdb", "replace", gen.mac, "dev", dut_in.ifname, "master", "static"])
    dut.run(["bridge", "fdb", "replace", snk.mac, "dev", dut_out.ifname, "master", "static"])
    # Replies of the latency scenario come straight back across the bridge.
    src.run(["ip", "route", "add", str(ROUTED_NET), "dev", gen.ifname])
    src.run(["ip", "neigh", "replace", SINK_IP, "lladdr", snk.mac, "dev", gen.ifname, "nud", "permanent"])
    sink.run(["ip", "neigh", "replace", GEN_IP, "lladdr", gen.mac, "dev", snk.ifname, "nud", "permanent"])
    return Line(src, dut, sink, gen, dut_in, dut_out, snk, prefixes, bridged=True)
