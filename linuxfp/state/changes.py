"""Typed change messages and the pure function that folds them into a Snapshot.

`decode.py` turns netlink events into these; `events.EventStream` adds the
"replaced" messages for state the kernel changes without telling anyone
(routes flushed on link down, sysctls, netfilter). `apply_messages` never
touches the kernel.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from .model import (
    AF_INET,
    Address,
    FdbEntry,
    Link,
    Neighbour,
    NetfilterState,
    Route,
    Rule,
    Snapshot,
    Sysctls,
    VethPeer,
    VtepRemote,
    XfrmState,
    address_order,
    fdb_order,
    has_far_end,
    link_order,
    neighbour_order,
    peer_order,
    route_order,
    rule_order,
    vtep_order,
)
from .sysctl import without_family, without_interface


class ResyncRequired(RuntimeError):
    """The messages cannot be applied unambiguously; call read_snapshot()."""


# --- messages -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LinkUpdate:
    link: Link  # xdp_features and tc_ingress are carried over from the previous version
    kind = "link"


@dataclass(frozen=True, slots=True)
class LinkRemoved:
    index: int
    kind = "link"


@dataclass(frozen=True, slots=True)
class AddressUpdate:
    address: Address
    kind = "addr"


@dataclass(frozen=True, slots=True)
class AddressRemoved:
    address: Address
    kind = "addr"


@dataclass(frozen=True, slots=True)
class RouteUpdate:
    route: Route
    replace: bool = False  # NLM_F_REPLACE: took the place of an existing route
    # Created next to routes of the same identity (no NLM_F_EXCL: `ip route
    # append/prepend`). Plain routes mostly arrive this way (decode turns the
    # rest into Plain* messages), or replacing when decode_route alone could
    # tell (RTA_VIA).
    beside: bool = False
    kind = "route"


@dataclass(frozen=True, slots=True)
class RouteRemoved:
    route: Route
    kind = "route"


@dataclass(frozen=True, slots=True)
class PlainRouteReplaced:
    """A plain route (Route.plain) took the place of the first route with
    this identity; not decoded further, as the snapshot does not keep it."""

    identity: tuple
    kind = "route"


@dataclass(frozen=True, slots=True)
class PlainRouteRemoved:
    identity: tuple
    path: tuple   # (type, ((gateway, oif, weight), ...)), as _path() gives
    kind = "route"


@dataclass(frozen=True, slots=True)
class Route6Mtu:
    """An IPv6 route was added, replaced (its MTU metric, 0 for none, and
    why its answers may not be cached, "" for none) or removed (0, ""):
    what Snapshot.route_mtus6 and Snapshot.routes6_uncached keep of IPv6
    routes."""
    identity: tuple
    mtu: int
    uncached: str = ""
    kind = "route"


@dataclass(frozen=True, slots=True)
class RuleUpdate:
    rule: Rule
    kind = "rule"


@dataclass(frozen=True, slots=True)
class RuleRemoved:
    rule: Rule
    kind = "rule"


@dataclass(frozen=True, slots=True)
class NeighbourUpdate:
    neighbour: Neighbour
    kind = "neigh"


@dataclass(frozen=True, slots=True)
class NeighbourRemoved:
    neighbour: Neighbour
    kind = "neigh"


@dataclass(frozen=True, slots=True)
class FdbUpdate:
    entry: FdbEntry
    kind = "fdb"


@dataclass(frozen=True, slots=True)
class FdbRemoved:
    entry: FdbEntry
    kind = "fdb"


@dataclass(frozen=True, slots=True)
class VtepUpdate:
    remote: VtepRemote
    kind = "vtep"


@dataclass(frozen=True, slots=True)
class VtepRemoved:
    remote: VtepRemote
    kind = "vtep"


@dataclass(frozen=True, slots=True)
class BridgePortChanged:
    """An AF_BRIDGE RTM_NEWLINK: a port's state or flags changed, announced
    in that family only; the stream follows it with a LinkUpdate."""

    ifindex: int
    kind = "bridge_port"


@dataclass(frozen=True, slots=True)
class XdpFeaturesUpdate:
    ifindex: int
    features: int
    rx_metadata: int = 0
    kind = "xdp_features"


@dataclass(frozen=True, slots=True)
class PeerLinkUpdate:
    """A link of another namespace changed: kept when it is one of our
    veths' peers."""
    peer: VethPeer
    kind = "peer"


@dataclass(frozen=True, slots=True)
class PeerLinkRemoved:
    nsid: int
    index: int
    kind = "peer"


@dataclass(frozen=True, slots=True)
class TcIngressUpdate:
    ifindex: int
    present: bool  # an ingress/clsact qdisc exists on the device
    kind = "tc_ingress"


@dataclass(frozen=True, slots=True)
class TcxUpdate:
    ifindex: int
    others_ingress: bool  # tcx programs of other tools on the device (state/tcx.py)
    others_egress: bool
    kind = "tcx"


@dataclass(frozen=True, slots=True)
class QdiscChanged:
    """A qdisc was added/removed (RTM_NEWQDISC/DELQDISC); the root qdisc name
    in RTM_NEWLINK is not re-announced, so the stream follows this with a
    LinkUpdate and a TcIngressUpdate for the device."""

    ifindex: int
    kind = "qdisc"


@dataclass(frozen=True, slots=True)
class NexthopChanged:
    """A nexthop object changed (RTM_NEWNEXTHOP/DELNEXTHOP); routes using it
    are not re-announced, so the stream follows this with RoutesReplaced."""

    kind = "nexthop"


@dataclass(frozen=True, slots=True)
class NetconfChanged:
    """A forwarding/rp_filter sysctl changed (RTM_NEWNETCONF). Carries no
    state itself: the stream follows it with a SysctlsReplaced."""

    ifindex: int  # NETCONFA_IFINDEX_ALL (-1) / _DEFAULT (-2) or a device
    family: int = 0     # AF_INET or AF_INET6
    kind = "netconf"


@dataclass(frozen=True, slots=True)
class NetconfRemoved:
    """A device's IPv4 or IPv6 configuration is gone (RTM_DELNETCONF): the
    device unregisters (its RTM_DELLINK follows, ~17 ms later for a bridge,
    while the kernel holds the RTNL: asking about the device meanwhile
    waits that out to hear ENODEV), is renamed (the family's sysctls are
    registered again at once: RTM_NEWNETCONF), or stays with an MTU too
    small for the family (IPv4 below 68, IPv6 below 1280: the kernel tears
    the family's configuration down, and makes it again, announced, when
    the MTU allows). Carries what the snapshot needs: the device's IPv4
    sysctls go, or its IPv6 ones read as off (sysctl.without_family) —
    what a read finds of a device that unregisters; the stream reads a
    renamed device, or one still up, again (EventStream._silent_changes)."""

    ifindex: int
    family: int     # AF_INET or AF_INET6
    kind = "netconf"


@dataclass(frozen=True, slots=True)
class NftablesChanged:
    """Some nf_tables object changed; followed by a NetfilterReplaced.
    `generation`: what an NFT_MSG_NEWGEN announces (its commit is over)."""

    generation: int | None = None
    kind = "nftables"


@dataclass(frozen=True, slots=True)
class RoutesMayBeFlushed:
    """IPv4 may have removed routes without a word: an address went (the
    routes it was the preferred source of; with the device's last address,
    every route through the device), or a link went down or away (every route
    through it). Carries no state: advance() re-reads the routes only when
    one the snapshot keeps could be among them (routes_may_be_flushed), so
    an address change on a full BGP table costs no 800 000-route dump."""

    ifindex: int
    address: str | None = None   # the address removed; None: the link went down or away
    kind = "route_flush"


def routes_may_be_flushed(snapshot: Snapshot, flush: RoutesMayBeFlushed) -> bool:
    """Whether a route `snapshot` keeps could be among those `flush` removed
    (fib_del_ifaddr -> fib_sync_down_addr / fib_disable_ip, fib_sync_down_dev):
    a superset, since keeping a flushed route is what costs a dump."""
    through_device = flush.address is None or not any(
        a.family == AF_INET for a in snapshot.addresses_of(flush.ifindex))
    return any((flush.address is not None and r.prefsrc == flush.address)
               or (through_device and any(h.oif == flush.ifindex for h in r.nexthops))
               for r in snapshot.routes)


@dataclass(frozen=True, slots=True)
class RoutesReplaced:
    """A fresh dump of every IPv4 route, for kernel changes without events."""

    routes: tuple[Route, ...]
    kind = "routes_dump"


@dataclass(frozen=True, slots=True)
class Routes6MayExpire:
    """An IPv6 address got a finite lifetime: the kernel sets its prefix
    route to expire in place, with no route event (modify_prefix_route()).
    A marker: advance() reads the IPv6 routes again (Routes6Replaced)."""
    kind = "addr"


@dataclass(frozen=True, slots=True)
class Routes6Replaced:
    """A fresh read of what Snapshot.route_mtus6 and routes6_uncached keep."""
    route_mtus6: tuple
    routes6_uncached: tuple
    kind = "routes6_dump"


@dataclass(frozen=True, slots=True)
class RulesReplaced:
    rules: tuple[Rule, ...]
    kind = "rules_dump"


@dataclass(frozen=True, slots=True)
class SysctlsReplaced:
    sysctls: Sysctls
    kind = "sysctls"


@dataclass(frozen=True, slots=True)
class SysctlsPatched:
    """Sysctls read afresh for some interfaces only (new, renamed, or named
    by a netconf event) and for the namespace; the others' stay. Entries of
    `removed` interfaces (gone, or read again) go before the patched ones
    are added. Reading every interface's costs a dump of every link, per
    event: a new veth must not cost that for all the others (one request
    each is read)."""

    sysctls: Sysctls                 # the namespace's values, the patched interfaces'
    removed: frozenset[int] = frozenset()
    kind = "sysctls"


@dataclass(frozen=True, slots=True)
class NetfilterReplaced:
    netfilter: NetfilterState
    kind = "netfilter"


@dataclass(frozen=True, slots=True)
class XfrmChanged:
    """An IPsec policy (or default) changed; followed by an XfrmReplaced."""

    kind = "xfrm"


@dataclass(frozen=True, slots=True)
class XfrmReplaced:
    xfrm: XfrmState
    kind = "xfrm"


Message = (
    LinkUpdate | LinkRemoved | AddressUpdate | AddressRemoved | RouteUpdate | RouteRemoved
    | PlainRouteReplaced | PlainRouteRemoved
    | Route6Mtu | RuleUpdate | RuleRemoved | NeighbourUpdate | NeighbourRemoved | XdpFeaturesUpdate
    | TcIngressUpdate | TcxUpdate | QdiscChanged | NexthopChanged | NetconfChanged | NetconfRemoved | NftablesChanged
    | RoutesReplaced
    | RoutesMayBeFlushed | Routes6MayExpire | Routes6Replaced | RulesReplaced | SysctlsReplaced | SysctlsPatched
    | NetfilterReplaced | XfrmChanged | XfrmReplaced | FdbUpdate | FdbRemoved | VtepUpdate | VtepRemoved
    | BridgePortChanged
    | PeerLinkUpdate | PeerLinkRemoved
)

# --- sorted-tuple editing ---------------------------------------------------

T = TypeVar("T")


class _SortedEdit(Generic[T]):
    """Edits of a sorted tuple, copied to a list only when first touched, so a
    burst of changes costs one O(n) copy plus O(log n) searches."""

    def __init__(self, items: tuple[T, ...], order: Callable[[T], Any]):
        self.original = items
        self.items: list[T] | None = None
        self.order = order

    def _list(self) -> list[T]:
        if self.items is None:
            self.items = list(self.original)
        return self.items

    def _view(self) -> list[T] | tuple[T, ...]:
        return self.original if self.items is None else self.items

    def view(self) -> list[T] | tuple[T, ...]:
        """The current elements (read only)."""
        return self._view()

    def span(self, prefix: Any, prefix_of: Callable[[T], Any]) -> tuple[int, int]:
        view = self._view()
        lo = bisect.bisect_left(view, prefix, key=prefix_of)
        hi = bisect.bisect_right(view, prefix, lo=lo, key=prefix_of)
        return lo, hi

    def get(self, i: int) -> T:
        return self._view()[i]

    def upsert(self, item: T) -> None:
        """Insert, or replace the element with the same order key."""
        key = self.order(item)
        view = self._view()
        i = bisect.bisect_left(view, key, key=self.order)
        if i < len(view) and self.order(view[i]) == key:
            if view[i] != item:
                self._list()[i] = item
        else:
            self._list().insert(i, item)

    def delete_at(self, i: int) -> None:
        del self._list()[i]

    def remove_key(self, key: Any) -> None:
        view = self._view()
        i = bisect.bisect_left(view, key, key=self.order)
        if i < len(view) and self.order(view[i]) == key:
            del self._list()[i]

    def remove_where(self, drop: Callable[[T], bool]) -> None:
        view = self._view()
        if any(drop(x) for x in view):
            self.items = [x for x in view if not drop(x)]

    def reset(self, items: Iterable[T]) -> None:
        self.items = sorted(items, key=self.order)

    def result(self) -> tuple[T, ...]:
        if self.items is None:
            return self.original
        result = tuple(self.items)
        return self.original if result == self.original else result


def _route_identity(r: Route) -> tuple:
    return r.identity


def _path(r: Route) -> tuple:
    return (r.type, tuple((h.gateway, h.oif, h.weight) for h in r.nexthops))


# Snapshot.routes keeps plain routes only as companions of a kept route with
# the same identity, and then all of them: a replace takes the first route of
# an identity, so the whole group must be known to tell which. A dump keeps
# the whole run of a kept route's identity (decode.RouteDumpScan); events add
# to a group only beside it (no NLM_F_EXCL), and where a group the snapshot
# does not know may exist, they ask for a fresh read instead of guessing.
# Routes of one identity may differ in any attribute (each has its own
# fib_info), so "the same route" is an equal Route (nexthop flags the kernel
# flips are not kept), never a similar one.

def _drop_lonely_companions(routes: _SortedEdit[Route], identity: tuple) -> None:
    lo, hi = routes.span(identity, _route_identity)
    if hi > lo and all(routes.get(i).plain for i in range(lo, hi)):
        for i in reversed(range(lo, hi)):
            routes.delete_at(i)


def _apply_route_update(routes: _SortedEdit[Route], msg: RouteUpdate) -> None:
    new = msg.route
    lo, hi = routes.span(new.identity, _route_identity)
    if new.plain and lo == hi:
        return  # no kept route of this identity: nothing to tell apart
    if any(routes.get(i) == new for i in range(lo, hi)):
        return  # a re-announcement (offload flags) or a replay after a dump
    if msg.replace:
        if hi - lo > 1:
            # The kernel replaced the first of several routes in its own list
            # order, which we do not track.
            raise ResyncRequired(f"ambiguous route replace for {new.dst} table {new.table}")
        if lo == hi:
            # It took the place of a plain route the snapshot never kept, and
            # that one may have had plain siblings: the group is unknown.
            raise ResyncRequired(f"route {new.dst} table {new.table} replaced routes not kept")
        routes.delete_at(lo)
    elif msg.beside and lo == hi:
        # Created beside plain routes the snapshot never kept: which of them a
        # later replace takes is unknown until a dump shows them.
        raise ResyncRequired(f"route {new.dst} table {new.table} created beside routes not kept")
    routes.upsert(new)
    _drop_lonely_companions(routes, new.identity)   # a plain route that replaced the last kept one


def _apply_route_removed(routes: _SortedEdit[Route], gone: Route) -> None:
    """The kernel announces the removed route as it was: remove that one
    (absent: a replay of a removal the snapshot already shows)."""
    lo, hi = routes.span(gone.identity, _route_identity)
    for i in range(lo, hi):
        if routes.get(i) == gone:
            routes.delete_at(i)
            break
    _drop_lonely_companions(routes, gone.identity)


def _apply_plain_replaced(routes: _SortedEdit[Route], identity: tuple) -> None:
    lo, hi = routes.span(identity, _route_identity)
    if hi - lo > 1:
        raise ResyncRequired(f"ambiguous route replace for {identity[2]} table {identity[1]}")
    if hi > lo:
        routes.delete_at(lo)


def _apply_plain_removed(routes: _SortedEdit[Route], msg: PlainRouteRemoved) -> None:
    lo, hi = routes.span(msg.identity, _route_identity)
    for i in range(lo, hi):
        if routes.get(i).plain and _path(routes.get(i)) == msg.path:
            routes.delete_at(i)
            return


_RULE_STATE_FLAGS = 0x4 | 0x8 | 0x10  # unresolved, iif/oif detached: kernel-maintained


def _rule_identity(r: Rule) -> Rule:
    return replace(r, flags=r.flags & ~_RULE_STATE_FLAGS, protocol=0)


def _apply_rule_removed(rules: _SortedEdit[Rule], gone: Rule) -> None:
    identity = _rule_identity(gone)
    rules.remove_where(lambda r: _rule_identity(r) == identity)


def _apply_rule_update(rules: _SortedEdit[Rule], new: Rule) -> None:
    identity = _rule_identity(new)
    rules.remove_where(lambda r: _rule_identity(r) == identity)
    rules.upsert(new)


def _on_link(index: int) -> Callable[[Address], bool]:
    return lambda a: a.index == index


def _neighbour_on_link(index: int) -> Callable[[Neighbour], bool]:
    return lambda n: n.ifindex == index


def apply_messages(snapshot: Snapshot, messages: Iterable[Message]) -> Snapshot:
    """Fold change messages into a new Snapshot (the input is not modified).

    Returns `snapshot` itself when nothing changed. Raises ResyncRequired when
    a message cannot be applied exactly."""
    links = _SortedEdit(snapshot.links, link_order)
    addresses = _SortedEdit(snapshot.addresses, address_order)
    routes = _SortedEdit(snapshot.routes, route_order)
    rules = _SortedEdit(snapshot.rules, rule_order)
    neighbours = _SortedEdit(snapshot.neighbours, neighbour_order)
    fdb = _SortedEdit(snapshot.fdb, fdb_order)
    vteps = _SortedEdit(snapshot.vteps, vtep_order)
    peers = _SortedEdit(snapshot.peers, peer_order)
    peers_touched = False       # by a peer or link message: prune to our veths' peers
    sysctls = snapshot.sysctls
    netfilter = snapshot.netfilter
    xfrm = snapshot.xfrm

    kept_identities: set | None = None   # of `routes`, while no kept route changes
    route_mtus6: dict | None = None      # a copy of snapshot.route_mtus6 once one changes
    routes6_uncached: dict | None = None  # likewise
    for msg in messages:
        if type(msg) is Route6Mtu:
            uncached = dict(snapshot.routes6_uncached) if routes6_uncached is None else routes6_uncached
            held_why = uncached.get(msg.identity, "")
            if held_why and held_why != msg.uncached:
                # (as for MTUs below: an identity may be several routes)
                raise ResyncRequired(f"IPv6 route {msg.identity[2]} that stops cached answers changed")
            if msg.uncached and not held_why:
                routes6_uncached = uncached
                uncached[msg.identity] = msg.uncached
            known = dict(snapshot.route_mtus6) if route_mtus6 is None else route_mtus6
            held = known.get(msg.identity, 0)
            if held and held != msg.mtu:
                # Several routes can share an identity (ECMP siblings, an
                # append on another device), each with its metrics: a
                # removal or a change there is read again, never guessed.
                raise ResyncRequired(f"IPv6 route {msg.identity[2]} with an MTU metric changed")
            if msg.mtu and not held:
                route_mtus6 = known
                known[msg.identity] = msg.mtu
            continue
        if type(msg) is PlainRouteReplaced or type(msg) is PlainRouteRemoved:
            # A BGP burst is thousands of these, almost never about a kept
            # identity: answer that in O(1) before any search.
            if kept_identities is None:
                kept_identities = {r.identity for r in routes.view()}
            if msg.identity in kept_identities:
                kept_identities = None
                if type(msg) is PlainRouteReplaced:
                    _apply_plain_replaced(routes, msg.identity)
                else:
                    _apply_plain_removed(routes, msg)
        elif isinstance(msg, RouteUpdate):
            kept_identities = None
            _apply_route_update(routes, msg)
        elif isinstance(msg, RouteRemoved):
            kept_identities = None
            _apply_route_removed(routes, msg.route)
        elif isinstance(msg, AddressUpdate):
            addresses.upsert(msg.address)
        elif isinstance(msg, AddressRemoved):
            addresses.remove_key(address_order(msg.address))
        elif isinstance(msg, NeighbourUpdate):
            neighbours.upsert(msg.neighbour)
        elif isinstance(msg, NeighbourRemoved):
            neighbours.remove_key(neighbour_order(msg.neighbour))
        elif isinstance(msg, FdbUpdate):
            fdb.upsert(msg.entry)
        elif isinstance(msg, FdbRemoved):
            fdb.remove_key(fdb_order(msg.entry))
        elif isinstance(msg, VtepUpdate):
            vteps.upsert(msg.remote)
        elif isinstance(msg, VtepRemoved):
            vteps.remove_key(vtep_order(msg.remote))
        elif isinstance(msg, PeerLinkUpdate):
            peers.upsert(msg.peer)
            peers_touched = True
        elif isinstance(msg, PeerLinkRemoved):
            peers.remove_key((msg.nsid, msg.index))
            peers_touched = True
        elif isinstance(msg, LinkUpdate):
            peers_touched = True
            new = msg.link
            lo, hi = links.span(new.index, link_order)
            if lo < hi:
                old = links.get(lo)
                new = replace(new, xdp_features=old.xdp_features, xdp_rx_metadata=old.xdp_rx_metadata,
                              tc_ingress=old.tc_ingress, tcx_others_ingress=old.tcx_others_ingress,
                              tcx_others_egress=old.tcx_others_egress)
            links.upsert(new)
        elif isinstance(msg, LinkRemoved):
            index = msg.index
            peers_touched = True
            links.remove_key(index)
            # The kernel announces the addresses and neighbours it drops, but
            # possibly after the link itself; dropping them here is idempotent.
            addresses.remove_where(_on_link(index))
            neighbours.remove_where(_neighbour_on_link(index))
            fdb.remove_where(lambda e: e.port == index or e.master == index)
            vteps.remove_where(lambda e: e.device == index)
            sysctls = without_interface(sysctls, index)
        elif isinstance(msg, XdpFeaturesUpdate):
            lo, hi = links.span(msg.ifindex, link_order)
            old_link = links.get(lo) if lo < hi else None
            if old_link is not None and (old_link.xdp_features, old_link.xdp_rx_metadata) != (
                    msg.features, msg.rx_metadata):
                links.upsert(replace(old_link, xdp_features=msg.features, xdp_rx_metadata=msg.rx_metadata))
        elif isinstance(msg, TcIngressUpdate):
            lo, hi = links.span(msg.ifindex, link_order)
            if lo < hi and links.get(lo).tc_ingress != msg.present:
                links.upsert(replace(links.get(lo), tc_ingress=msg.present))
        elif isinstance(msg, TcxUpdate):
            lo, hi = links.span(msg.ifindex, link_order)
            if lo < hi and (links.get(lo).tcx_others_ingress, links.get(lo).tcx_others_egress) != (
                    msg.others_ingress, msg.others_egress):
                links.upsert(replace(links.get(lo), tcx_others_ingress=msg.others_ingress,
                                     tcx_others_egress=msg.others_egress))
        elif isinstance(msg, RuleUpdate):
            _apply_rule_update(rules, msg.rule)
        elif isinstance(msg, RuleRemoved):
            _apply_rule_removed(rules, msg.rule)
        elif isinstance(msg, RoutesReplaced):
            kept_identities = None
            routes.reset(msg.routes)
        elif isinstance(msg, Routes6Replaced):
            route_mtus6, routes6_uncached = dict(msg.route_mtus6), dict(msg.routes6_uncached)
        elif isinstance(msg, RulesReplaced):
            rules.reset(msg.rules)
        elif isinstance(msg, SysctlsReplaced):
            sysctls = msg.sysctls
        elif isinstance(msg, NetconfRemoved):
            sysctls = without_family(sysctls, msg.ifindex, msg.family)
        elif isinstance(msg, SysctlsPatched):
            kept = {i.ifindex: i for i in sysctls.interfaces if i.ifindex not in msg.removed}
            kept.update((i.ifindex, i) for i in msg.sysctls.interfaces)
            sysctls = replace(msg.sysctls, interfaces=tuple(kept[i] for i in sorted(kept)))
        elif isinstance(msg, NetfilterReplaced):
            netfilter = msg.netfilter
        elif isinstance(msg, XfrmReplaced):
            xfrm = msg.xfrm
        elif isinstance(msg, (NetconfChanged, NftablesChanged, XfrmChanged, QdiscChanged, NexthopChanged,
                              BridgePortChanged, RoutesMayBeFlushed, Routes6MayExpire)):
            pass  # markers; the state follows in a *Replaced message
        else:
            raise TypeError(f"apply_messages: unsupported message {msg!r}")

    new_links = links.result()
    new_addresses = addresses.result()
    new_routes = routes.result()
    new_rules = rules.result()
    new_neighbours = neighbours.result()
    new_fdb = fdb.result()
    new_vteps = vteps.result()
    if peers_touched:
        # Every link event of every namespace with an id arrives; only our
        # veths' far ends are kept.
        ours = {(link.peer_netnsid, link.peer) for link in new_links if has_far_end(link)}
        peers.remove_where(lambda p: (p.nsid, p.index) not in ours)
    new_peers = peers.result()
    new_route_mtus6 = snapshot.route_mtus6 if route_mtus6 is None else tuple(sorted(route_mtus6.items()))
    if new_route_mtus6 == snapshot.route_mtus6:
        new_route_mtus6 = snapshot.route_mtus6
    new_routes6_uncached = (snapshot.routes6_uncached if routes6_uncached is None
                            else tuple(sorted(routes6_uncached.items())))
    if new_routes6_uncached == snapshot.routes6_uncached:
        new_routes6_uncached = snapshot.routes6_uncached
    if sysctls == snapshot.sysctls:
        sysctls = snapshot.sysctls
    if netfilter == snapshot.netfilter:
        netfilter = snapshot.netfilter
    if xfrm == snapshot.xfrm:
        xfrm = snapshot.xfrm
    if (new_links is snapshot.links and new_addresses is snapshot.addresses
            and new_routes is snapshot.routes and new_rules is snapshot.rules
            and new_neighbours is snapshot.neighbours and new_fdb is snapshot.fdb and new_vteps is snapshot.vteps
            and new_peers is snapshot.peers and new_route_mtus6 is snapshot.route_mtus6
            and new_routes6_uncached is snapshot.routes6_uncached
            and sysctls is snapshot.sysctls
            and netfilter is snapshot.netfilter and xfrm is snapshot.xfrm):
        return snapshot
    # Every field, xfrm included: a field left to its default would forget
    # state (an IPsec policy) on the next unrelated event.
    return Snapshot(
        links=new_links, addresses=new_addresses, routes=new_routes, rules=new_rules,
        neighbours=new_neighbours, sysctls=sysctls, netfilter=netfilter, xfrm=xfrm,
        netns_inode=snapshot.netns_inode, fdb=new_fdb, peers=new_peers, route_mtus6=new_route_mtus6,
        routes6_uncached=new_routes6_uncached, vteps=new_vteps,
    ).inherit_hashes(snapshot)
