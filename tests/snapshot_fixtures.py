"""Hand-built snapshots for the pure stages (graph, reconcile): no kernel."""
from __future__ import annotations

from dataclasses import replace

from linuxfp.state.model import (
    AF_INET, ARPHRD_ETHER, ARPHRD_LOOPBACK, IFF_LOWER_UP, IFF_UP, NETDEV_XDP_ACT_BASIC,
    NETDEV_XDP_ACT_NDO_XMIT, NETDEV_XDP_ACT_REDIRECT, Address, BridgeOptions, BridgePort, InterfaceSysctls, Link,
    NetfilterState, NextHop, Route, Rule, Snapshot, Sysctls, VethPeer,
)

XDP_ALL = NETDEV_XDP_ACT_BASIC | NETDEV_XDP_ACT_REDIRECT | NETDEV_XDP_ACT_NDO_XMIT


def link(index, name, kind="veth", master=None, up=True, mtu=1500, xdp=XDP_ALL, qdisc="noqueue",
         link_type=ARPHRD_ETHER, rx_metadata=7, tc_ingress=False):
    flags = (IFF_UP | IFF_LOWER_UP) if up else 0
    return Link(index=index, name=name, kind=kind, master=master, mtu=mtu, up=up, oper_up=up,
                operstate=6 if up else 2, mac=f"02:00:00:00:00:{index:02x}", link_type=link_type,
                flags=flags, qdisc=qdisc, xdp_prog_id=0, xdp_mode=0, xdp_features=xdp,
                xdp_rx_metadata=rx_metadata, tc_ingress=tc_ingress)


def addr(index, address, prefixlen=24):
    return Address(index=index, family=AF_INET, address=address, prefixlen=prefixlen,
                   local=address, broadcast=None, scope=0)


def route(dst, table=254, type_="unicast", gateway=None, oif=None, protocol=3):
    nhs = (NextHop(gateway, oif),) if (gateway or oif) else ()
    return Route(family=AF_INET, table=table, dst=dst, type=type_, protocol=protocol, scope=0,
                 priority=0, tos=0, nexthops=nhs)


DEFAULT_RULES = (
    Rule(family=AF_INET, priority=0, table=255, action="to_tbl"),
    Rule(family=AF_INET, priority=32766, table=254, action="to_tbl"),
    Rule(family=AF_INET, priority=32767, table=253, action="to_tbl"),
)


def sysctl(index, forwarding=True, rp_filter=0):
    return InterfaceSysctls(ifindex=index, forwarding=forwarding, rp_filter=rp_filter,
                            accept_local=False, send_redirects=True, route_localnet=False)


def router_snapshot(**overrides) -> Snapshot:
    """lo, two veths with addresses, a routed prefix: the DUT of the demo."""
    links = (link(1, "lo", kind="", link_type=ARPHRD_LOOPBACK, xdp=0),
             link(2, "left"), link(3, "right"))
    fields = dict(
        links=links,
        addresses=(addr(1, "127.0.0.1", 8), addr(2, "198.18.1.254"), addr(3, "198.18.2.254")),
        routes=(
            route("198.18.1.254/32", table=255, type_="local", oif=2, protocol=2),
            route("198.18.1.255/32", table=255, type_="broadcast", oif=2, protocol=2),
            route("198.18.2.254/32", table=255, type_="local", oif=3, protocol=2),
            route("198.18.1.0/24", oif=2, protocol=2),
            route("198.18.2.0/24", oif=3, protocol=2),
            route("198.19.0.0/24", gateway="198.18.2.1", oif=3),
        ),
        rules=DEFAULT_RULES,
        neighbours=(),
        sysctls=Sysctls(ip_forward=True, interfaces=tuple(sysctl(i) for i in (1, 2, 3))),
        netfilter=NetfilterState(active=False),
        netns_inode=4026531840,
    )
    fields.update(overrides)
    return Snapshot(**fields)


def bridged_router_snapshot(bridge_qdisc="noqueue", locked=False, **overrides) -> Snapshot:
    """The router's veths plus br0 (up, an address) with one port."""
    snap = router_snapshot(**overrides)
    bridge = replace(link(4, "br0", kind="bridge", qdisc=bridge_qdisc), bridge=BridgeOptions())
    port = replace(link(5, "port", master=4), bridge_port=BridgePort(state=3, locked=locked))
    return replace(snap, links=snap.links + (bridge, port))


def with_pods(snapshot: Snapshot) -> Snapshot:
    """`snapshot` with each veth's peer in a container of its own, taking
    frames through the backlog (no XDP, no GRO there)."""
    links = tuple(replace(l, xdp_features=NETDEV_XDP_ACT_BASIC, peer_netnsid=1, peer=l.index)
                  if l.kind == "veth" else l for l in snapshot.links)
    return replace(snapshot, links=links, peers=tuple(
        VethPeer(1, l.index, f"02:00:00:00:01:{l.index:02x}", 1500, True, 0) for l in links if l.kind == "veth"))
