"""Lab topologies: a generic builder (hosts, veth links, addresses, routes as
data) and the paper's router line ``src — dut — sink``.

Everything a topology configures is applied with iproute2 and sysctl, the way
an operator would, so the device under test (DUT) looks like any hand-made
Linux router to whatever reads its state.

A few lab-wide settings exist only to make two fresh builds of the same
topology behave identically (the differential harness depends on it); they
are listed in `LAB_SYSCTLS` / `LAB_INTERFACE_SYSCTLS` with the reason for each.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from ipaddress import IPv4Address, IPv4Interface, IPv4Network, IPv6Network

from .netns import Lab, LabError, Namespace
from .probe import ping

# Applied in every lab namespace.
LAB_SYSCTLS: tuple[tuple[str, object], ...] = (
    # ICMP errors are rate limited per destination with a token bucket that
    # refills with wall-clock time, so two runs at different speeds would
    # emit different numbers of errors.  An empty mask exempts every type.
    ("net.ipv4.icmp_ratemask", 0),
)

# Applied to every lab interface ({ifname} is substituted) before it goes up.
LAB_INTERFACE_SYSCTLS: tuple[tuple[str, object], ...] = (
    # Neighbour entries would otherwise turn STALE after 15-45 s (random) and
    # be re-probed 5 s after their next use: unicast ARP at times that depend
    # on how long a run took.  Long timers keep warmed-up entries valid and
    # silent for the life of a lab.  (Child namespaces have no
    # neigh/default, hence per interface.)
    ("net/ipv4/neigh/{ifname}/base_reachable_time_ms", 3_600_000),
    ("net/ipv4/neigh/{ifname}/delay_first_probe_time", 3600),
    # Interfaces inherit default.disable_ipv6 from Namespace.create; this
    # covers any created before that default was set.
    ("net/ipv6/conf/{ifname}/disable_ipv6", 1),
)


# IPv6 on a lab interface (IPV6_INTERFACE_SYSCTLS, then disable_ipv6=0):
# nothing it sends on its own may depend on timing. No duplicate address
# detection, no router solicitations or advertisements taken, MLD reports
# repeated within a millisecond rather than a second; neighbour timers as
# long as IPv4's. Its link-local address (EUI-64 of the deterministic MAC)
# stays: a router solicits a forwarded packet's next hop from it.
IPV6_INTERFACE_SYSCTLS: tuple[tuple[str, object], ...] = (
    ("net/ipv6/conf/{ifname}/accept_dad", 0),
    ("net/ipv6/conf/{ifname}/accept_ra", 0),
    ("net/ipv6/conf/{ifname}/router_solicitations", 0),
    ("net/ipv6/conf/{ifname}/mldv1_unsolicited_report_interval", 1),
    ("net/ipv6/conf/{ifname}/mldv2_unsolicited_report_interval", 1),
    ("net/ipv6/neigh/{ifname}/base_reachable_time_ms", 3_600_000),
    ("net/ipv6/neigh/{ifname}/delay_first_probe_time", 3600),
    ("net/ipv6/conf/{ifname}/disable_ipv6", 0),
)
# ... and in its namespace: ICMPv6 errors are not rate limited (as
# LAB_SYSCTLS does for IPv4), loopback has IPv6.
IPV6_HOST_SYSCTLS: tuple[tuple[str, object], ...] = (
    ("net.ipv6.icmp.ratelimit", 0),
    ("net.ipv6.icmp.ratemask", "255"),
    ("net/ipv6/conf/lo/disable_ipv6", 0),
)


def ipv6_sysctls(host: str, ifnames: tuple[str, ...]) -> tuple[tuple[str, str, object], ...]:
    """TopologySpec.sysctls turning IPv6 on, quietly, for `ifnames` of `host`."""
    out = [(host, key, value) for key, value in IPV6_HOST_SYSCTLS]
    for ifname in ifnames:
        out += [(host, key.format(ifname=ifname), value) for key, value in IPV6_INTERFACE_SYSCTLS]
    return tuple(out)


@dataclass(frozen=True)
class LinkSpec:
    """A veth pair between two hosts; MACs default to ones derived from the link's position."""

    a_host: str
    a_ifname: str
    b_host: str
    b_ifname: str
    mtu: int = 1500
    a_mac: str | None = None
    b_mac: str | None = None


@dataclass(frozen=True)
class TopologySpec:
    """A topology as data.  `routes` are ``ip -batch`` lines run in their host."""

    hosts: tuple[str, ...]
    links: tuple[LinkSpec, ...]
    dut: str
    inject: tuple[str, str]  # (host, ifname) where test frames enter the network
    addresses: tuple[tuple[str, str, str], ...] = ()  # (host, ifname, cidr)
    routes: tuple[tuple[str, str], ...] = ()  # (host, "route add ...")
    sysctls: tuple[tuple[str, str, object], ...] = ()  # (host, key, value)
    warmup: tuple[tuple[str, str], ...] = ()  # (host, destination) pings after building
    # Hosts whose interfaces keep a veth's defaults (GRO off), as a
    # container's eth0 does: the DUT's XDP cannot redirect to them, its TC
    # can deliver straight into them.
    containers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Interface:
    host: str
    netns: str
    name: str
    ifindex: int
    mac: str
    mtu: int
    addresses: tuple[IPv4Interface, ...]

    @property
    def label(self) -> str:
        """Stable across builds (no namespace name): used to key captures."""
        return f"{self.host}:{self.name}"

    @property
    def ip(self) -> IPv4Address:
        if not self.addresses:
            raise LabError(f"{self.label} has no IPv4 address")
        return self.addresses[0].ip


@dataclass(frozen=True)
class Topology:
    """A built topology: which namespace plays which role, and its interfaces."""

    lab: Lab
    spec: TopologySpec
    hosts: tuple[tuple[str, Namespace], ...]
    interfaces: tuple[Interface, ...]

    def ns(self, host: str) -> Namespace:
        for role, namespace in self.hosts:
            if role == host:
                return namespace
        raise KeyError(f"no host {host!r} in this topology")

    def iface(self, host: str, ifname: str) -> Interface:
        for interface in self.interfaces:
            if interface.host == host and interface.name == ifname:
                return interface
        raise KeyError(f"no interface {host}:{ifname} in this topology")

    @property
    def dut(self) -> Namespace:
        return self.ns(self.spec.dut)

    @property
    def inject_point(self) -> Interface:
        return self.iface(*self.spec.inject)

    @property
    def capture_points(self) -> tuple[Interface, ...]:
        """Every interface outside the DUT: the DUT is observed only by what it emits.

        Frames redirected by XDP never reach packet taps on the DUT's ingress,
        so capturing inside the DUT would report differences that are not
        behaviour.
        """
        return tuple(i for i in self.interfaces if i.host != self.spec.dut)

    def dut_ipv4_addresses(self) -> frozenset[IPv4Address]:
        """The DUT's IPv4 addresses right now (steps may add or remove some)."""
        return frozenset(a.ip for i in read_interfaces("", self.dut) for a in i.addresses)

    def wait_links_settled(self, timeout: float = 5.0) -> None:
        wait_links_settled([ns for _, ns in self.hosts], timeout)


def default_mac(link_number: int, end: int) -> str:
    """Locally administered and deterministic: two builds must emit identical frames."""
    return f"02:00:00:00:{link_number:02x}:{end:02x}"


def build(lab: Lab, spec: TopologySpec) -> Topology:
    """Create namespaces, links, addresses and routes of `spec` inside `lab`."""
    namespaces = {host: lab.namespace(host) for host in spec.hosts}
    for ns in namespaces.values():
        for key, value in LAB_SYSCTLS:
            ns.sysctl(key, value)

    for number, link in enumerate(spec.links, start=1):
        a_mac = link.a_mac or default_mac(number, 1)
        b_mac = link.b_mac or default_mac(number, 2)
        namespaces[link.a_host].run(
            ["ip", "link", "add", "name", link.a_ifname, "address", a_mac, "mtu", str(link.mtu),
             "type", "veth", "peer", "name", link.b_ifname, "address", b_mac, "mtu", str(link.mtu),
             "netns", namespaces[link.b_host].name]
        )
    for link in spec.links:
        for host, ifname in ((link.a_host, link.a_ifname), (link.b_host, link.b_ifname)):
            _prepare_interface(namespaces[host], ifname, redirect_target_peer=host != spec.dut and host not in spec.containers)
    for host, key, value in spec.sysctls:
        namespaces[host].sysctl(key, value)

    for host, ns in namespaces.items():
        lines = [f"address add {cidr} dev {ifname}" for h, ifname, cidr in spec.addresses if h == host]
        lines += [route for h, route in spec.routes if h == host]
        if lines:
            ns.run(["ip", "-batch", "-"], input="\n".join(lines) + "\n")

    wait_links_settled(list(namespaces.values()))
    for host, destination in spec.warmup:
        if not ping(namespaces[host], destination):
            raise LabError(f"warm-up: no echo reply from {destination} to {host} ({namespaces[host].name})")

    interfaces = tuple(i for host, ns in namespaces.items() for i in read_interfaces(host, ns))
    return Topology(lab=lab, spec=spec, hosts=tuple(namespaces.items()), interfaces=interfaces)


def _prepare_interface(ns: Namespace, ifname: str, redirect_target_peer: bool) -> None:
    for key, value in LAB_INTERFACE_SYSCTLS:
        ns.sysctl(key.format(ifname=ifname), value)
    ns.run(["ip", "link", "set", "dev", ifname, "up"])
    if redirect_target_peer:
        # XDP_REDIRECT into a veth hands the frame to its peer's NAPI ring,
        # which exists only when the peer has an XDP program or GRO enabled;
        # otherwise the redirect is dropped.  GRO on every non-DUT end lets
        # the DUT redirect into any of its veths without touching the DUT's
        # own configuration.  (GRO does not merge UDP or ICMP on veth by
        # default, so captures still see the frames as sent.)  It is turned
        # on after the link is up: enabled on a down veth, it does not set
        # NDO_XMIT in the peer's xdp_features (seen on 6.18), and LinuxFP
        # trusts that bit.
        ns.run(["ethtool", "-K", ifname, "gro", "on"])


def read_interfaces(host: str, ns: Namespace) -> tuple[Interface, ...]:
    """Interfaces of `ns` other than loopback, with their IPv4 addresses."""
    links = json.loads(ns.run(["ip", "-j", "address", "show"]).stdout)
    return tuple(
        Interface(
            host=host,
            netns=ns.name,
            name=link["ifname"],
            ifindex=link["ifindex"],
            mac=link.get("address", ""),
            mtu=link["mtu"],
            addresses=tuple(
                IPv4Interface(f"{a['local']}/{a['prefixlen']}")
                for a in link.get("addr_info", ())
                if a.get("family") == "inet"
            ),
        )
        for link in links
        if link.get("link_type") != "loopback"
    )


def wait_links_settled(namespaces: list[Namespace], timeout: float = 5.0) -> None:
    """Wait until every interface that is up with carrier is operationally UP.

    Carrier changes are applied by the kernel's linkwatch worker, which also
    activates the transmit queue; frames sent before that are dropped.  After
    a link flap this waits for the worker instead of guessing a delay.
    """
    deadline = time.monotonic() + timeout
    while True:
        pending = [
            f"{ns.name}:{link['ifname']}"
            for ns in namespaces
            for link in json.loads(ns.run(["ip", "-j", "link", "show"]).stdout)
            if {"UP", "LOWER_UP"} <= set(link.get("flags", ()))
            and link.get("link_type") != "loopback"
            and link.get("operstate") not in ("UP", "UNKNOWN")
        ]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise LabError(f"links did not become operationally up: {', '.join(pending)}")
        time.sleep(0.01)


# --- the paper's router line -------------------------------------------------


@dataclass(frozen=True)
class Router(Topology):
    """A built `RouterTopology`; the generic fields plus the router's plan."""

    prefixes: tuple[IPv4Network, ...]
    source_pool: IPv4Network
    lazy_gateway: IPv4Address
    lazy_prefix: IPv4Network
    # With RouterTopology(ipv6=True): the same plan in IPv6 (empty otherwise).
    prefixes6: tuple[IPv6Network, ...] = ()
    source_pool6: IPv6Network | None = None
    lazy_prefix6: IPv6Network | None = None

    @property
    def src(self) -> Namespace:
        return self.ns("src")

    @property
    def sink(self) -> Namespace:
        return self.ns("sink")

    @property
    def src_if(self) -> Interface:
        return self.iface("src", "to-dut")

    @property
    def dut_left(self) -> Interface:
        return self.iface("dut", "to-src")

    @property
    def dut_right(self) -> Interface:
        return self.iface("dut", "to-sink")

    @property
    def sink_if(self) -> Interface:
        return self.iface("sink", "to-dut")


@dataclass(frozen=True)
class RouterTopology:
    """``src — dut — sink`` with `prefixes` /24s (198.19.i.0/24) routed on the DUT via the sink.

    Address plan (all inside 198.18.0.0/15):
      src  to-dut  198.18.1.1/24      dut to-src   198.18.1.254/24
      sink to-dut  198.18.2.1/24      dut to-sink  198.18.2.254/24
                   198.18.2.3/24  -- the *lazy gateway*: never warmed up, so the
                                     first packet via it finds no neighbour
    DUT routes: 198.19.i.0/24 via 198.18.2.1; 198.18.200.0/24 (lazy prefix) via
    198.18.2.3; 198.18.64.0/18 (source pool) via 198.18.1.1.  src and sink have
    a default route via the DUT.

    The *source pool* is a block of source addresses that live behind src, so
    test frames can use many distinct sources and still get ICMP errors back
    at src.  (Linux rate limits unreachable errors per source address with a
    global, not per-namespace, sysctl; distinct sources keep every error.)

    An instance is a topology factory: ``RouterTopology(prefixes=10)(lab)``
    builds a fresh copy inside `lab`.  With ``resolve_neighbours=False`` no
    warm-up ping is sent, so every neighbour starts unresolved.
    """

    prefixes: int = 50
    resolve_neighbours: bool = True
    containers: bool = False     # src and sink keep veth defaults, as pods do (TopologySpec.containers)
    # Dual stack: the same line in 2001:db8::/32 besides (IPv6 stays off otherwise).
    ipv6: bool = False
    # Where test frames enter: "src", or "sink" (the other way through the DUT).
    inject_from: str = "src"

    SRC_IP = "198.18.1.1"
    DUT_LEFT_IP = "198.18.1.254"
    DUT_RIGHT_IP = "198.18.2.254"
    SINK_IP = "198.18.2.1"
    LAZY_GATEWAY = "198.18.2.3"
    LAZY_PREFIX = "198.18.200.0/24"
    SOURCE_POOL = "198.18.64.0/18"
    # IPv6 (ipv6=True): the same roles, 2001:db8:100:i::/64 routed via the sink.
    SRC_IP6 = "2001:db8:1::1"
    DUT_LEFT_IP6 = "2001:db8:1::fe"
    DUT_RIGHT_IP6 = "2001:db8:2::fe"
    SINK_IP6 = "2001:db8:2::1"
    LAZY_GATEWAY6 = "2001:db8:2::3"
    LAZY_PREFIX6 = "2001:db8:200::/64"
    SOURCE_POOL6 = "2001:db8:4000::/48"

    def __post_init__(self) -> None:
        if not 1 <= self.prefixes <= 256:
            raise ValueError("RouterTopology supports 1..256 prefixes (198.19.0.0/24 .. 198.19.255.0/24)")
        if self.inject_from not in ("src", "sink"):
            raise ValueError(f"RouterTopology injects from src or sink, not {self.inject_from!r}")

    def routed_prefixes(self) -> tuple[IPv4Network, ...]:
        return tuple(IPv4Network(f"198.19.{i}.0/24") for i in range(self.prefixes))

    def routed_prefixes6(self) -> tuple[IPv6Network, ...]:
        return tuple(IPv6Network(f"2001:db8:100:{i:x}::/64") for i in range(self.prefixes)) if self.ipv6 else ()

    def _ipv6_plan(self) -> dict[str, tuple]:
        """The IPv6 half of the spec: addresses, routes, sysctls, warm-up."""
        routes = tuple(("dut", f"route add {p} via {self.SINK_IP6}") for p in self.routed_prefixes6())
        routes += (
            ("dut", f"route add {self.LAZY_PREFIX6} via {self.LAZY_GATEWAY6}"),
            ("dut", f"route add {self.SOURCE_POOL6} via {self.SRC_IP6}"),
            ("src", f"route add default via {self.DUT_LEFT_IP6}"),
            ("sink", f"route add default via {self.DUT_RIGHT_IP6}"),
        )
        return {
            "addresses": (
                ("src", "to-dut", f"{self.SRC_IP6}/64"),
                ("dut", "to-src", f"{self.DUT_LEFT_IP6}/64"),
                ("dut", "to-sink", f"{self.DUT_RIGHT_IP6}/64"),
                ("sink", "to-dut", f"{self.SINK_IP6}/64"),
                ("sink", "to-dut", f"{self.LAZY_GATEWAY6}/64"),
            ),
            "routes": routes,
            "sysctls": (ipv6_sysctls("src", ("to-dut",)) + ipv6_sysctls("dut", ("to-src", "to-sink"))
                        + ipv6_sysctls("sink", ("to-dut",)) + (("dut", "net.ipv6.conf.all.forwarding", 1),)),
            "warmup": (("dut", self.SRC_IP6), ("dut", self.SINK_IP6), ("src", self.SINK_IP6)),
        }

    def spec(self) -> TopologySpec:
        routes = tuple(("dut", f"route add {p} via {self.SINK_IP}") for p in self.routed_prefixes())
        routes += (
            ("dut", f"route add {self.LAZY_PREFIX} via {self.LAZY_GATEWAY}"),
            ("dut", f"route add {self.SOURCE_POOL} via {self.SRC_IP}"),
            ("src", f"route add default via {self.DUT_LEFT_IP}"),
            ("sink", f"route add default via {self.DUT_RIGHT_IP}"),
        )
        warmup = (
            # The DUT resolves its neighbours itself first, so its entries are
            # REACHABLE rather than learnt-STALE; then one echo crosses it.
            ("dut", self.SRC_IP),
            ("dut", self.SINK_IP),
            ("src", self.SINK_IP),
        )
        six = self._ipv6_plan() if self.ipv6 else {"addresses": (), "routes": (), "sysctls": (), "warmup": ()}
        return TopologySpec(
            hosts=("src", "dut", "sink"),
            links=(LinkSpec("src", "to-dut", "dut", "to-src"), LinkSpec("dut", "to-sink", "sink", "to-dut")),
            dut="dut",
            inject=(self.inject_from, "to-dut"),
            addresses=(
                ("src", "to-dut", f"{self.SRC_IP}/24"),
                ("dut", "to-src", f"{self.DUT_LEFT_IP}/24"),
                ("dut", "to-sink", f"{self.DUT_RIGHT_IP}/24"),
                ("sink", "to-dut", f"{self.SINK_IP}/24"),
                ("sink", "to-dut", f"{self.LAZY_GATEWAY}/24"),
            ) + six["addresses"],
            routes=routes + six["routes"],
            sysctls=(("dut", "net.ipv4.ip_forward", 1),) + six["sysctls"],
            warmup=(warmup + six["warmup"]) if self.resolve_neighbours else (),
            containers=("src", "sink") if self.containers else (),
        )

    def __call__(self, lab: Lab) -> Router:
        built = build(lab, self.spec())
        return Router(
            **{f.name: getattr(built, f.name) for f in fields(Topology)},
            prefixes=self.routed_prefixes(),
            source_pool=IPv4Network(self.SOURCE_POOL),
            lazy_gateway=IPv4Address(self.LAZY_GATEWAY),
            lazy_prefix=IPv4Network(self.LAZY_PREFIX),
            prefixes6=self.routed_prefixes6(),
            source_pool6=IPv6Network(self.SOURCE_POOL6) if self.ipv6 else None,
            lazy_prefix6=IPv6Network(self.LAZY_PREFIX6) if self.ipv6 else None,
        )


__all__ = [
    "IPV6_INTERFACE_SYSCTLS",
    "LAB_INTERFACE_SYSCTLS",
    "LAB_SYSCTLS",
    "Interface",
    "LinkSpec",
    "Router",
    "RouterTopology",
    "Topology",
    "TopologySpec",
    "build",
    "default_mac",
    "ipv6_sysctls",
    "read_interfaces",
    "wait_links_settled",
]
