"""apply_messages and the model, on hand-built snapshots (no kernel)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from linuxfp.state import (
    AF_INET,
    NETDEV_XDP_ACT_BASIC,
    NETDEV_XDP_ACT_NDO_XMIT,
    Address,
    AddressRemoved,
    AddressUpdate,
    InterfaceSysctls,
    Link,
    LinkRemoved,
    LinkUpdate,
    Neighbour,
    NeighbourRemoved,
    NeighbourUpdate,
    NetfilterReplaced,
    NetfilterState,
    NextHop,
    PlainRouteRemoved,
    PlainRouteReplaced,
    ResyncRequired,
    Route,
    RouteRemoved,
    RoutesMayBeFlushed,
    RoutesReplaced,
    RouteUpdate,
    Rule,
    RuleRemoved,
    RuleUpdate,
    Snapshot,
    Sysctls,
    SysctlsReplaced,
    XdpFeaturesUpdate,
    apply_messages,
    routes_may_be_flushed,
    rules_are_default,
)
from linuxfp.state.model import route_order

DEFAULT_RULES = (
    Rule(family=AF_INET, priority=0, table=255, action="to_tbl", protocol=2),
    Rule(family=AF_INET, priority=32766, table=254, action="to_tbl", protocol=2),
    Rule(family=AF_INET, priority=32767, table=253, action="to_tbl", protocol=2),
)


def make_link(index: int, name: str, features: int = 0, up: bool = True) -> Link:
    return Link(index=index, name=name, kind="veth", master=None, mtu=1500, up=up, oper_up=up,
                operstate=6, mac=f"02:00:00:00:00:{index:02x}", link_type=1,
                flags=0x10043 if up else 0x1002, qdisc="noqueue", xdp_prog_id=0, xdp_mode=0,
                xdp_features=features)


def make_route(dst: str, gateway: str | None = None, oif: int | None = 2, table: int = 254,
               priority: int = 0, type_: str = "unicast", mtu: int = 1400) -> Route:
    """A route the snapshot keeps (its MTU metric makes it not plain) unless mtu=0."""
    nexthops = (NextHop(gateway, oif),) if (gateway or oif) else ()
    return Route(family=AF_INET, table=table, dst=dst, type=type_, protocol=3, scope=0,
                 priority=priority, tos=0, nexthops=nexthops, mtu=mtu)


def base_snapshot(routes: tuple[Route, ...] = ()) -> Snapshot:
    return Snapshot(
        links=(make_link(1, "lo"), make_link(2, "a0", NETDEV_XDP_ACT_BASIC), make_link(3, "b0")),
        addresses=(Address(2, AF_INET, "198.18.0.1", 24, "198.18.0.1", None, 0),),
        routes=tuple(sorted(routes, key=route_order)),
        rules=DEFAULT_RULES,
        neighbours=(Neighbour(2, AF_INET, "198.18.0.9", "02:00:00:00:00:09", 0x80),),
        sysctls=Sysctls(True, (InterfaceSysctls(2, True, 0, False, True, False),
                               InterfaceSysctls(3, True, 2, False, True, False))),
        netfilter=NetfilterState(False, (), "no netfilter ruleset"),
        netns_inode=4026531840,
    )


def test_no_messages_returns_the_same_object():
    snap = base_snapshot()
    assert apply_messages(snap, []) is snap
    # Re-announcing existing state changes nothing either.
    assert apply_messages(snap, [AddressUpdate(snap.addresses[0])]) is snap


def test_route_add_and_delete_keep_canonical_order():
    snap = base_snapshot((make_route("198.51.100.0/24", "198.18.0.2"),))
    added = apply_messages(snap, [RouteUpdate(make_route("192.0.2.0/24", "198.18.0.3")),
                                  RouteUpdate(make_route("203.0.113.0/24", "198.18.0.4", table=100))])
    # Canonical order: table first, then destination.
    assert [r.dst for r in added.routes] == ["203.0.113.0/24", "192.0.2.0/24", "198.51.100.0/24"]
    assert added.routes == tuple(sorted(added.routes, key=route_order))
    assert snap.routes != added.routes  # the input is untouched
    removed = apply_messages(added, [RouteRemoved(make_route("192.0.2.0/24", "198.18.0.3"))])
    assert [r.dst for r in removed.routes] == ["203.0.113.0/24", "198.51.100.0/24"]
    assert removed.changed_fields(added) == {"routes"}
    assert removed.links is added.links  # untouched fields are shared


def test_routes_of_one_identity_are_told_apart_by_every_attribute():
    """Each route of an identity has its own fib_info: two that differ only
    in their MTU metric or protocol are two routes."""
    with_mtu = make_route("192.0.2.0/24", "198.18.0.3")
    other_proto = replace(with_mtu, protocol=4)
    snap = base_snapshot((with_mtu, other_proto))
    assert apply_messages(snap, [RouteRemoved(other_proto)]).routes == (with_mtu,)
    assert apply_messages(snap, [RouteUpdate(with_mtu)]) is snap          # a re-announcement
    assert apply_messages(base_snapshot(), [RouteRemoved(with_mtu)]).routes == ()   # a replay
    # A plain route beside it with the same path is a companion, not a refresh.
    plain = replace(with_mtu, mtu=0)
    assert set(apply_messages(snap, [RouteUpdate(plain, beside=True)]).routes) == {with_mtu, other_proto, plain}


def test_a_kept_route_replacing_routes_never_kept_asks_for_a_read():
    """It took the first of a group the snapshot never saw; the rest of that
    group would decide what a later replace takes."""
    kept = make_route("192.0.2.0/24", "198.18.0.3")
    with pytest.raises(ResyncRequired):
        apply_messages(base_snapshot(), [RouteUpdate(kept, replace=True)])


def test_route_replace_and_append():
    first = make_route("192.0.2.0/24", "198.18.0.3")
    snap = base_snapshot((first,))
    replaced = apply_messages(snap, [RouteUpdate(make_route("192.0.2.0/24", "198.18.0.7"), replace=True)])
    assert [r.nexthops[0].gateway for r in replaced.routes] == ["198.18.0.7"]
    appended = apply_messages(snap, [RouteUpdate(make_route("192.0.2.0/24", "198.18.0.8"))])
    assert len(appended.routes) == 2
    with pytest.raises(ResyncRequired):
        apply_messages(appended, [RouteUpdate(make_route("192.0.2.0/24", "198.18.0.9"), replace=True)])


def test_plain_routes_are_left_to_the_fib():
    kept = make_route("192.0.2.0/24", "198.18.0.3")
    plain = make_route("198.51.100.0/24", "198.18.0.3", mtu=0)
    assert plain.plain and not kept.plain
    assert not replace(plain, table=255).plain and not replace(plain, type="blackhole").plain
    assert not replace(plain, nh_id=4).plain
    assert not replace(plain, nexthops=plain.nexthops * 2).plain
    snap = base_snapshot((kept,))
    # Plain routes created alone never reach apply_messages (decode drops
    # them); beside others, they are kept only next to a kept route.
    assert apply_messages(snap, [RouteUpdate(plain, beside=True)]) is snap
    companion = replace(plain, dst=kept.dst, nexthops=(NextHop("198.18.0.4", 2),))
    grouped = apply_messages(snap, [RouteUpdate(companion, beside=True)])
    assert set(grouped.routes) == {kept, companion}
    # Which one a replace takes is then ambiguous; a removal is not, and the
    # companion goes with the last kept route of its identity.
    with pytest.raises(ResyncRequired):
        apply_messages(grouped, [PlainRouteReplaced(kept.identity)])
    path = ("unicast", (("198.18.0.4", 2, 1),))
    assert apply_messages(grouped, [PlainRouteRemoved(kept.identity, path)]).routes == (kept,)
    assert apply_messages(grouped, [RouteRemoved(kept)]).routes == ()


def test_plain_route_replacing_a_kept_one():
    kept = make_route("192.0.2.0/24", "198.18.0.3")
    snap = base_snapshot((kept,))
    assert apply_messages(snap, [PlainRouteReplaced(kept.identity)]).routes == ()
    # Decoded in full (an IPv4 route via an IPv6 gateway) yet plain: not kept either.
    via6 = replace(kept, mtu=0, nexthops=(NextHop("2001:db8::1", 2),))
    assert via6.plain
    assert apply_messages(snap, [RouteUpdate(via6, replace=True)]).routes == ()
    other = kept.identity[:2] + ("203.0.113.0/24",) + kept.identity[3:]
    assert apply_messages(snap, [PlainRouteReplaced(other)]) is snap
    # A kept route created beside routes never seen: a later replace could
    # take either, so the snapshot is read again.
    with pytest.raises(ResyncRequired):
        apply_messages(base_snapshot(), [RouteUpdate(kept, beside=True)])


def test_which_flushes_can_touch_kept_routes():
    sourced = replace(make_route("192.0.2.0/24", "198.18.0.3", oif=3), prefsrc="198.18.0.1")
    snap = base_snapshot((sourced,))
    # Its preferred source went; another address of a0 did not touch it.
    assert routes_may_be_flushed(snap, RoutesMayBeFlushed(2, "198.18.0.1"))
    assert not routes_may_be_flushed(snap, RoutesMayBeFlushed(2, "198.18.0.7"))
    # Through the device: when the link goes, or with its last address.
    assert routes_may_be_flushed(snap, RoutesMayBeFlushed(3))
    assert not routes_may_be_flushed(snap, RoutesMayBeFlushed(2))
    assert routes_may_be_flushed(snap, RoutesMayBeFlushed(3, "198.18.9.9"))   # b0 has no address
    assert apply_messages(snap, [RoutesMayBeFlushed(3)]) is snap   # a marker: advance() reads


def test_replayed_events_converge():
    """Events older than the snapshot are applied again without harm."""
    route = make_route("192.0.2.0/24", "198.18.0.3")
    later = base_snapshot((route,))
    replay = [RouteUpdate(route), RouteRemoved(route), RouteUpdate(route)]
    assert apply_messages(later, replay) == later


def test_multipath_route():
    mp = Route(AF_INET, 254, "203.0.113.0/24", "unicast", 3, 0, 0, 0,
               (NextHop("198.18.0.2", 2, 1), NextHop("198.18.1.2", 3, 3)))
    snap = apply_messages(base_snapshot(), [RouteUpdate(mp)])
    assert snap.routes[0].nexthops[1].weight == 3
    assert apply_messages(snap, [RouteRemoved(mp)]).routes == ()


def test_link_update_keeps_xdp_features_and_removal_cascades():
    snap = base_snapshot()
    renamed = replace(snap.link(2), name="uplink", xdp_features=0)
    snap2 = apply_messages(snap, [LinkUpdate(renamed)])
    assert snap2.link(2).name == "uplink"
    assert snap2.link(2).xdp_features == NETDEV_XDP_ACT_BASIC
    assert snap2.link_by_name("uplink").index == 2
    snap3 = apply_messages(snap2, [XdpFeaturesUpdate(2, NETDEV_XDP_ACT_NDO_XMIT)])
    assert snap3.link(2).can_receive_xdp_redirect
    gone = apply_messages(snap3, [LinkRemoved(2)])
    assert gone.link(2) is None
    assert gone.addresses_of(2) == ()
    assert gone.neighbours_of(2) == ()
    assert gone.interface_sysctls(2) is None
    assert gone.interface_sysctls(3) is not None


def test_new_link_then_features_in_one_batch():
    snap = apply_messages(base_snapshot(), [LinkUpdate(make_link(7, "c0")), XdpFeaturesUpdate(7, 5)])
    assert snap.link(7).xdp_features == 5
    # Features for a device we do not know yet are ignored, not invented.
    assert apply_messages(base_snapshot(), [XdpFeaturesUpdate(9, 5)]).link(9) is None


def test_addresses_neighbours_rules():
    snap = base_snapshot()
    extra = Address(3, AF_INET, "198.18.1.1", 24, "198.18.1.1", None, 0)
    snap2 = apply_messages(snap, [AddressUpdate(extra)])
    assert snap2.addresses_of(3) == (extra,)
    assert apply_messages(snap2, [AddressRemoved(extra)]) == snap
    stale = replace(snap.neighbours[0], state=0x04)
    assert apply_messages(snap, [NeighbourUpdate(stale)]).neighbours[0].state_name == "stale"
    assert apply_messages(snap, [NeighbourRemoved(stale)]).neighbours == ()
    custom = Rule(AF_INET, 100, 100, "to_tbl", src="198.18.0.0/24")
    with_rule = apply_messages(snap, [RuleUpdate(custom)])
    assert not with_rule.default_rules and snap.default_rules
    # The kernel flips "detached" flags silently; deletion still matches.
    assert apply_messages(with_rule, [RuleRemoved(replace(custom, flags=0x8))]).default_rules


def test_replaced_messages():
    snap = base_snapshot((make_route("192.0.2.0/24", "198.18.0.3"),))
    routes = (make_route("198.51.100.0/24", None, None, type_="blackhole"),)
    nf = NetfilterState(True, ("nft:ip filter",), "nf_tables tables: ip filter")
    sysctls = Sysctls(False, ())
    out = apply_messages(snap, [RoutesReplaced(routes), NetfilterReplaced(nf), SysctlsReplaced(sysctls)])
    assert out.routes == routes and out.netfilter == nf and out.sysctl == sysctls


def test_rules_are_default():
    assert rules_are_default(DEFAULT_RULES)
    assert not rules_are_default(DEFAULT_RULES[:2])
    assert not rules_are_default(DEFAULT_RULES + (Rule(AF_INET, 100, 100, "to_tbl"),))
    assert not rules_are_default((replace(DEFAULT_RULES[0], fwmark=1),) + DEFAULT_RULES[1:])
    assert not rules_are_default((replace(DEFAULT_RULES[1], table=100),) + DEFAULT_RULES[::2])
    # Who installed the rule does not matter, only what it matches.
    assert rules_are_default(tuple(replace(r, protocol=3) for r in DEFAULT_RULES))


def test_hash_equality_and_json():
    a = base_snapshot((make_route("192.0.2.0/24", "198.18.0.3"),))
    b = base_snapshot((make_route("192.0.2.0/24", "198.18.0.3"),))
    assert a == b and hash(a) == hash(b)
    c = apply_messages(a, [NeighbourRemoved(a.neighbours[0])])
    assert c != a and hash(c) != hash(a)
    assert {a: 1}[b] == 1
    doc = json.loads(json.dumps(a.to_dict()))
    assert doc["routes"][0]["nexthops"][0]["gateway"] == "198.18.0.3"
    assert doc["links"][1]["can_receive_xdp_redirect"] is False
    assert doc["neighbours"][0]["state_name"] == "permanent"
    assert doc["default_rules"] is True


def test_snapshot_is_immutable():
    snap = base_snapshot()
    with pytest.raises(AttributeError):
        snap.routes = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        snap.links[0].mtu = 9000  # type: ignore[misc]


def test_ipsec_policies_survive_unrelated_events_and_follow_their_own():
    from linuxfp.state import XfrmChanged, XfrmReplaced
    from linuxfp.state.model import XfrmState

    blocked = replace(base_snapshot(), xfrm=XfrmState(policies_fwd=1))
    routed = apply_messages(blocked, [RouteUpdate(make_route("192.0.2.0/24", "198.18.0.3"))])
    assert routed.xfrm == XfrmState(policies_fwd=1) and routed.xfrm.active
    cleared = apply_messages(routed, [XfrmChanged(), XfrmReplaced(XfrmState())])
    assert not cleared.xfrm.active and cleared.changed_fields(routed) == {"xfrm"}


def test_an_xfrm_state_the_kernel_would_not_tell_counts_as_policies():
    from linuxfp.state.model import XfrmState

    assert XfrmState(unreadable=True).active and not XfrmState().active


def test_ipv6_route_mtus_are_kept_and_an_ambiguous_change_is_read_again():
    from linuxfp.state.changes import Route6Mtu
    snap = base_snapshot()
    identity = (10, 254, "2001:db8:1::/64", 0, 1024, "::/0")
    added = apply_messages(snap, [Route6Mtu(identity, 1400)])
    assert added.route_mtus6 == ((identity, 1400),)
    assert apply_messages(added, [Route6Mtu(identity, 1400)]) is added
    assert apply_messages(snap, [Route6Mtu(identity, 0)]) is snap          # a route without a metric
    for mtu in (0, 1300):    # removed or changed: an ECMP sibling may still hold a metric
        with pytest.raises(ResyncRequired):
            apply_messages(added, [Route6Mtu(identity, mtu)])


def test_ipv6_routes_that_stop_cached_answers_are_kept_and_their_change_is_read_again():
    from linuxfp.state.changes import Route6Mtu
    snap = base_snapshot()
    identity = (10, 254, "2001:db8:1::/64", 0, 1024, "::/0")
    why = "routes expire"
    added = apply_messages(snap, [Route6Mtu(identity, 0, why)])
    assert added.routes6_uncached == ((identity, why),) and added.changed_fields(snap) == {"routes6_uncached"}
    assert apply_messages(added, [Route6Mtu(identity, 0, why)]) is added
    assert apply_messages(snap, [Route6Mtu(identity, 0)]) is snap
    with pytest.raises(ResyncRequired):
        apply_messages(added, [Route6Mtu(identity, 0)])    # removed, or replaced by one that does not expire
