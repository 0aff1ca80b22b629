"""Read the current network namespace into a Snapshot (the impure edge).

Everything is read in the namespace of the calling *thread*: netlink sockets
are bound to it at creation and /proc/sys/net follows it at open time.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TypeVar

from . import decode
from . import netlink as nl
from .genl import NetdevFamily
from .model import (
    DeviceConf,
    Link,
    Route,
    Rule,
    Snapshot,
    VethPeer,
    address_order,
    has_far_end,
    fdb_order,
    link_order,
    neighbour_order,
    peer_order,
    route_order,
    rule_order,
    vtep_order,
)
from .netfilter import read_netfilter
from .xfrm import read_xfrm
from . import sysctl as sysctl_state
from .sysctl import read_sysctls
from .tcx import others_attached


T = TypeVar("T")


def netns_inode() -> int:
    """Identity of the calling thread's network namespace."""
    return os.stat("/proc/thread-self/ns/net").st_ino


def _decoded(messages: Iterable[nl.RawMessage], decoder) -> list:
    out = []
    for msg in messages:
        value = decoder(msg.payload)
        if value is not None:
            out.append(value)
    return out


def dump_links(sock: nl.NetlinkSocket) -> list[Link]:
    return _decoded(sock.dump(decode.RTM_GETLINK, decode.link_dump_request()), decode.decode_link)


# The last dump's link messages, decoded, by their bytes: the 1 s poll dumps
# every link, and a message that did not change (the dump leaves the
# statistics out) is not parsed again (a pure function of its bytes).
_decoded_links: dict[bytes, tuple[Link, DeviceConf] | None] = {}


def dump_links_and_confs(sock: nl.NetlinkSocket) -> tuple[list[Link], dict[int, DeviceConf]]:
    """Every link, and each one's configuration from the same dump (the
    sysctls' values: sysctl.py)."""
    global _decoded_links
    known, seen, pairs = _decoded_links, {}, []
    for msg in sock.dump(decode.RTM_GETLINK, decode.link_dump_request()):
        payload = bytes(msg.payload)
        value = known[payload] if payload in known else decode.decode_link_and_conf(payload)
        seen[payload] = value
        if value is not None:
            pairs.append(value)
    _decoded_links = seen
    return [link for link, _conf in pairs], {link.index: conf for link, conf in pairs}


def dump_device_confs(sock: nl.NetlinkSocket, indexes: Iterable[int]) -> list[DeviceConf]:
    """The configuration of the devices with these ifindexes, from one link
    dump (the way to read them all)."""
    wanted = set(indexes)
    return [conf for conf in _decoded(sock.dump(decode.RTM_GETLINK, decode.link_dump_request()),
                                      decode.decode_device_conf) if conf.index in wanted]


def get_device_confs(sock: nl.NetlinkSocket, indexes: Iterable[int]) -> list[DeviceConf]:
    """The same, one request per device (a few of many); gone ones are left out."""
    return _get_each_link(sock, indexes, decode.decode_device_conf)


def get_links_and_confs(sock: nl.NetlinkSocket, indexes: Iterable[int]) -> list[tuple[Link, DeviceConf]]:
    """Both, from one request per device."""
    return _get_each_link(sock, indexes, decode.decode_link_and_conf)


def get_links(sock: nl.NetlinkSocket, indexes: Iterable[int]) -> list[Link]:
    """The links with these ifindexes as they are now (one request each, not
    a dump of every link); gone ones are left out."""
    return _get_each_link(sock, indexes, decode.decode_link)


def _get_each_link(sock: nl.NetlinkSocket, indexes: Iterable[int], decoder: Callable[[bytes], T | None]) -> list[T]:
    """RTM_GETLINK of each ifindex, decoded; gone ones are left out."""
    found = []
    for index in indexes:
        try:
            replies = sock.request(decode.RTM_GETLINK, decode.link_get_request(index), dump=False)
        except nl.NetlinkError as e:
            if e.errno == errno.ENODEV:
                continue
            raise
        found += _decoded((m for m in replies if m.type == decode.RTM_NEWLINK), decoder)
    return found


def read_peer(sock: nl.NetlinkSocket, nsid: int, index: int) -> VethPeer | None:
    """The facts of link `index` of the namespace we know as `nsid`; None
    when it is gone (or that namespace is)."""
    try:
        replies = sock.request(decode.RTM_GETLINK, decode.peer_get_request(nsid, index), dump=False)
    except nl.NetlinkError:
        return None
    for msg in replies:
        if msg.type == decode.RTM_NEWLINK:
            return decode.decode_peer(msg.payload, nsid)
    return None


def read_peers(sock: nl.NetlinkSocket, links: Iterable[Link]) -> tuple[VethPeer, ...]:
    """The far ends of `links` that live in other namespaces, in peer_order."""
    wanted = {(link.peer_netnsid, link.peer) for link in links if has_far_end(link)}
    found = (read_peer(sock, nsid, index) for nsid, index in sorted(wanted))
    return tuple(sorted((p for p in found if p is not None), key=peer_order))


def dump_tc_ingress(sock: nl.NetlinkSocket) -> frozenset[int]:
    """ifindexes that have an ingress or clsact qdisc."""
    found = set()
    for msg in sock.dump(decode.RTM_GETQDISC, decode.qdisc_dump_request()):
        ifindex, kind = decode.decode_qdisc(msg.payload)
        if kind in decode.INGRESS_QDISC_KINDS:
            found.add(ifindex)
    return frozenset(found)


def dump_routes(sock: nl.NetlinkSocket) -> tuple[Route, ...]:
    """The routes the snapshot keeps (see Snapshot.routes), in route_order."""
    try:
        routes = sock.scan_dump(decode.RTM_GETROUTE, decode.route_dump_request(), decode.RouteDumpScan).routes()
    except decode.IdentityTooLong:
        # Hundreds of routes of one prefix and metric: decode every message.
        routes = decode.kept_routes(_decoded(sock.dump(decode.RTM_GETROUTE, decode.route_dump_request()),
                                             decode.decode_route))
    return tuple(sorted(routes, key=route_order))


def dump_routes6(sock: nl.NetlinkSocket) -> tuple[tuple[tuple[tuple, int], ...], tuple[tuple[tuple, str], ...]]:
    """Snapshot.route_mtus6 and Snapshot.routes6_uncached: the IPv6 routes
    with an MTU metric, and those whose answers may not be cached."""
    smallest: dict[tuple, int] = {}     # per identity (siblings share one)
    uncached: dict[tuple, str] = {}
    for msg in sock.dump(decode.RTM_GETROUTE, decode.route_dump_request(decode.AF_INET6)):
        entry = decode.route6_mtu(msg.payload)
        if entry is None:
            continue
        identity, mtu, why = entry
        if mtu:
            smallest[identity] = min(mtu, smallest.get(identity, mtu))
        if why:
            uncached.setdefault(identity, why)
    return tuple(sorted(smallest.items())), tuple(sorted(uncached.items()))


def read_routes6() -> tuple[tuple[tuple[tuple, int], ...], tuple[tuple[tuple, str], ...]]:
    """dump_routes6() on a socket of the calling thread's namespace."""
    with nl.NetlinkSocket(nl.NETLINK_ROUTE) as sock:
        return dump_routes6(sock)


def read_routes() -> tuple[Route, ...]:
    """dump_routes() on a socket of the calling thread's namespace."""
    with nl.NetlinkSocket(nl.NETLINK_ROUTE) as sock:
        return dump_routes(sock)


def dump_rules(sock: nl.NetlinkSocket) -> tuple[Rule, ...]:
    rules = _decoded(sock.dump(decode.RTM_GETRULE, decode.rule_dump_request()), decode.decode_rule)
    rules.sort(key=rule_order)
    return tuple(rules)


def dump_fdb(sock: nl.NetlinkSocket) -> tuple[tuple, tuple]:
    """Every bridge's FDB entries and every VXLAN device's remotes (one
    AF_BRIDGE neighbour dump)."""
    messages = list(sock.dump(decode.RTM_GETNEIGH, decode.neighbour_dump_request(decode.AF_BRIDGE)))
    entries = _decoded(messages, decode.decode_fdb)
    entries.sort(key=fdb_order)
    remotes = _decoded(messages, decode.decode_vtep)
    remotes.sort(key=vtep_order)
    return tuple(entries), tuple(remotes)


def read_snapshot() -> Snapshot:
    """One dump of everything LinuxFP needs from this network namespace."""
    inode = netns_inode()
    with nl.NetlinkSocket(nl.NETLINK_ROUTE) as sock:
        links, confs = dump_links_and_confs(sock)
        tc_ingress = dump_tc_ingress(sock)
        addresses = _decoded(sock.dump(decode.RTM_GETADDR, decode.address_dump_request()),
                             decode.decode_address)
        routes = dump_routes(sock)
        route_mtus6, routes6_uncached = dump_routes6(sock)
        rules = dump_rules(sock)
        neighbours = [n for n in _decoded(sock.dump(decode.RTM_GETNEIGH, decode.neighbour_dump_request()),
                                          decode.decode_neighbour)
                      if decode.neighbour_is_tracked(n)]
        fdb, vteps = dump_fdb(sock)
        peers = read_peers(sock, links)
    with NetdevFamily() as netdev:
        features = netdev.dump_xdp_features()
    links = [replace(link, xdp_features=features.get(link.index, (0, 0))[0],
                     xdp_rx_metadata=features.get(link.index, (0, 0))[1], tc_ingress=link.index in tc_ingress,
                     **_tcx_fields(link.index))
             for link in links]
    links.sort(key=link_order)
    addresses.sort(key=address_order)
    neighbours.sort(key=neighbour_order)
    return Snapshot(
        links=tuple(links),
        addresses=tuple(addresses),
        routes=routes,
        rules=rules,
        neighbours=tuple(neighbours),
        sysctls=read_sysctls(confs[link.index] for link in links),
        netfilter=read_netfilter(),
        xfrm=read_xfrm(),
        netns_inode=inode,
        fdb=fdb,
        peers=peers,
        route_mtus6=route_mtus6,
        routes6_uncached=routes6_uncached,
        vteps=vteps,
    )


def _tcx_fields(ifindex: int) -> dict[str, bool]:
    ingress, egress = others_attached(ifindex)
    return {"tcx_others_ingress": ingress, "tcx_others_egress": egress}


def _with_current_attachments(links: tuple[Link, ...], current: dict[int, Link]) -> tuple[Link, ...]:
    """`links` with the XDP programs and the tcx programs of others as they
    are now (neither announced when attached through a BPF link)."""
    changed = False
    out = []
    for link in links:
        now = current.get(link.index)
        if now is not None and (now.xdp_prog_id, now.xdp_mode) != (link.xdp_prog_id, link.xdp_mode):
            link = replace(link, xdp_prog_id=now.xdp_prog_id, xdp_mode=now.xdp_mode)
            changed = True
        if now is not None:
            tcx = _tcx_fields(link.index)
            if (link.tcx_others_ingress, link.tcx_others_egress) != tuple(tcx.values()):
                link = replace(link, **tcx)
                changed = True
        out.append(link)
    return tuple(out) if changed else links


def refresh_netfilter(snapshot: Snapshot) -> Snapshot:
    """Re-read the netfilter state only (cheap when no backend's fingerprint
    changed; ipsets only where the rules name a set not read before: an
    nf_tables commit changes no set); `snapshot` itself when nothing changed.
    And the sysctls when br_netfilter came or went: a rule's physdev match
    loads the module (its bridge-nf-call-* switches on), which no event
    announces, and bridged frames then meet those rules at once."""
    netfilter = read_netfilter(fresh_sets=False)
    if netfilter == snapshot.netfilter:
        netfilter = snapshot.netfilter
    sysctls = _br_netfilter_followed(snapshot.sysctls)
    if netfilter is snapshot.netfilter and sysctls is snapshot.sysctls:
        return snapshot
    return replace(snapshot, netfilter=netfilter, sysctls=sysctls).inherit_hashes(snapshot)


def follow_br_netfilter(snapshot: Snapshot) -> Snapshot:
    """`snapshot` with the namespace's bridge-nf-call-* switches read again
    if br_netfilter came or went (refresh_netfilter's second half, for a
    netfilter read of its own: a batch's); `snapshot` itself otherwise."""
    sysctls = _br_netfilter_followed(snapshot.sysctls)
    return snapshot if sysctls is snapshot.sysctls else replace(snapshot, sysctls=sysctls).inherit_hashes(snapshot)


def _br_netfilter_followed(sysctls):
    if sysctl_state.br_netfilter_loaded() == sysctls.br_netfilter:
        return sysctls
    # (only the namespace's switches: no device's value moved)
    fresh = replace(read_sysctls((), every_device=False), interfaces=sysctls.interfaces)
    return sysctls if fresh == sysctls else fresh


def refresh_polled(snapshot: Snapshot, sets: bool = True) -> Snapshot:
    """Re-read the state whose changes the kernel never announces.

    Sysctls: accept_local, send_redirects and route_localnet changes produce
    no RTM_NEWNETCONF. Netfilter: legacy iptables changes produce no event at
    all. XDP: attaching or detaching through a BPF link (bpf_link_create, as
    libbpf's bpf_program__attach_xdp does) sends no RTM_NEWLINK, unlike the
    netlink attach `ip link set ... xdp` uses; nor does a tcx attachment
    (state/tcx.py). ipsets: no event either;
    `sets` False reads again only sets the rules name for the first time (a
    kernel watch announces ipset changes: controller/daemon.py).
    Returns `snapshot` itself when nothing changed."""
    if netns_inode() != snapshot.netns_inode:
        raise RuntimeError("refresh_polled: called from a different network namespace "
                           "than the snapshot was read in")
    with nl.NetlinkSocket(nl.NETLINK_ROUTE) as sock:
        current, confs = dump_links_and_confs(sock)
    links = _with_current_attachments(snapshot.links, {l.index: l for l in current})
    sysctls = read_sysctls(confs[link.index] for link in snapshot.links if link.index in confs)
    netfilter = read_netfilter(fresh_sets=sets)
    xfrm = read_xfrm()
    if xfrm == snapshot.xfrm:
        xfrm = snapshot.xfrm
    if sysctls == snapshot.sysctls:
        sysctls = snapshot.sysctls
    if netfilter == snapshot.netfilter:
        netfilter = snapshot.netfilter
    if (links is snapshot.links and sysctls is snapshot.sysctls and netfilter is snapshot.netfilter
            and xfrm is snapshot.xfrm):
        return snapshot
    return replace(snapshot, links=links, sysctls=sysctls, netfilter=netfilter,
                   xfrm=xfrm).inherit_hashes(snapshot)
