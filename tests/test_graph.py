"""Snapshot → graph, on hand-built snapshots."""
from dataclasses import replace

import pytest

from linuxfp.graph import build_graph, flag_names, to_dot, to_text
from linuxfp.state.model import (BridgeOptions, BridgePort, NetfilterState, NextHop, NftChain, NftNative, Rule,
                                 Sysctls, VtepRemote, VxlanOptions)
from linuxfp.graph import Shape
from linuxfp.graph.nodes.router import local_source_addresses
from linuxfp.graph.nodes.transmit import VTEP, neighbour_states

from snapshot_fixtures import XDP_ALL, addr, bridged_router_snapshot, link, route, router_snapshot, sysctl, with_pods


def facts(graph, ifindex):
    return next(f for f in graph.ifaces if f.ifindex == ifindex)


def test_router_placed_on_both_veths_and_not_on_loopback():
    g = build_graph(router_snapshot())
    assert [(p.ifname, str(p.shape)) for p in g.pipelines] == [("left", "xdp:router+transmit"),
                                                                 ("right", "xdp:router+transmit")]
    assert [s.ifname for s in g.skipped] == ["lo"]


def test_hook_choice():
    snap = router_snapshot()
    assert {p.hook for p in build_graph(snap, "tc").pipelines} == {"tc"}
    no_xdp = replace(snap, links=(snap.links[0], link(2, "left", xdp=0), link(3, "right")))
    hooks = {p.ifname: p.hook for p in build_graph(no_xdp, "auto").pipelines}
    assert hooks == {"left": "tc", "right": "xdp"}
    with pytest.raises(ValueError):
        build_graph(snap, "nope")


def test_xdp_only_where_it_can_see_vlan_tags_and_no_fwmark_rules():
    snap = router_snapshot()
    blind = replace(snap, links=(snap.links[0], link(2, "left", rx_metadata=0), link(3, "right")))
    assert {p.ifname: p.hook for p in build_graph(blind).pipelines} == {"left": "tc", "right": "xdp"}
    explicit = build_graph(blind, "xdp")
    assert [p.ifname for p in explicit.pipelines] == ["right"]
    assert "VLAN" in {s.ifname: s.reason for s in explicit.skipped}["left"]
    marked = replace(snap, rules=snap.rules + (Rule(family=2, priority=10, table=100, action="to_tbl", fwmark=1),))
    assert {p.hook for p in build_graph(marked).pipelines} == {"tc"}


def test_tc_qdisc_on_ingress_keeps_kernel_path_and_blocks_xdp_egress():
    snap = router_snapshot()
    snap = replace(snap, links=(snap.links[0], link(2, "left", tc_ingress=True), link(3, "right")))
    g = build_graph(snap)
    assert [p.ifname for p in g.pipelines] == ["right"]
    assert "xdp_tx" not in flag_names(facts(g, 2).flags) and "tc_tx" in flag_names(facts(g, 2).flags)


def test_tcx_programs_of_another_tool_keep_their_ingress_on_the_kernel_path_and_block_xdp_egress():
    snap = router_snapshot()
    theirs_in = replace(snap, links=(snap.links[0], replace(link(2, "left"), tcx_others_ingress=True),
                                     link(3, "right")))
    g = build_graph(theirs_in)
    assert [p.ifname for p in g.pipelines] == ["right"]
    assert "tcx programs of another tool" in {s.ifname: s.reason for s in g.skipped}["left"]
    theirs_out = replace(snap, links=(snap.links[0], replace(link(2, "left"), tcx_others_egress=True),
                                      link(3, "right")))
    g = build_graph(theirs_out)
    assert [p.ifname for p in g.pipelines] == ["left", "right"]
    assert "xdp_tx" not in flag_names(facts(g, 2).flags) and "tc_tx" in flag_names(facts(g, 2).flags)
    assert "xdp_tx" in flag_names(facts(g, 3).flags)


def test_neighbour_states_for_the_datapath():
    from linuxfp.state.model import Neighbour
    snap = router_snapshot(neighbours=(
        Neighbour(3, 2, "198.18.2.1", "02:00:00:00:00:99", 0x02),
        Neighbour(3, 2, "198.18.2.7", "02:00:00:00:00:98", 0x04),
        Neighbour(3, 2, "198.18.2.8", "02:00:00:00:00:96", 0x08),
        Neighbour(3, 2, "198.18.2.9", None, 0x20),
        Neighbour(2, 2, "198.18.1.1", "02:00:00:00:00:97", 0x80)))
    states = {(n.ifindex, n.address): n.state for n in neighbour_states(snap.neighbours)}
    assert states == {(3, "198.18.2.1"): 1, (3, "198.18.2.7"): 2, (3, "198.18.2.8"): 3, (2, "198.18.1.1"): 1}


def test_same_shape_is_shared():
    g = build_graph(router_snapshot())
    assert g.shapes() == (Shape("xdp", ("router", "transmit")),)


def test_netfilter_keeps_whole_namespace_on_kernel_path():
    snap = router_snapshot(netfilter=NetfilterState(active=True, tables=("nft:ip filter",), detail="table ip filter"))
    g = build_graph(snap)
    assert g.pipelines == ()
    assert all("netfilter" in s.reason for s in g.skipped)


def test_bridge_ports_get_the_bridge_node_and_other_kinds_are_skipped():
    snap = router_snapshot()
    port = replace(link(5, "port", master=4), bridge_port=BridgePort(state=3))
    filtering = replace(link(7, "br1", kind="bridge"), bridge=BridgeOptions(vlan_filtering=True))
    snap = replace(snap, links=snap.links + (
        replace(link(4, "br0", kind="bridge"), bridge=BridgeOptions()), port, link(6, "vx", kind="vxlan"),
        filtering, replace(link(8, "port2", master=7), bridge_port=BridgePort(state=3)),
        replace(link(9, "locked", master=4), bridge_port=BridgePort(state=3, locked=True))))
    graph = build_graph(snap)
    reasons = {s.ifname: s.reason for s in graph.skipped}
    assert graph.pipeline(5).shape.nodes == ("bridge", "router", "bridge_tx", "transmit")
    assert graph.pipeline(5).shape.hook == "tc"          # a veth port: its peer keeps GSO/TSO
    assert build_graph(snap, "xdp").pipeline(5).shape.hook == "xdp"
    assert "VLAN filtering" in reasons["port2"] and "locked" in reasons["locked"]
    assert "bridge" in reasons["br0"] and "vxlan" in reasons["vx"]
    # a port that makes the bridge answer ARP/ND, and a promiscuous bridge,
    # keep every port of that bridge on the kernel path
    suppressing = replace(link(10, "sup", master=4), bridge_port=BridgePort(state=3, neigh_suppress=True))
    reasons = {s.ifname: s.reason for s in build_graph(replace(snap, links=snap.links + (suppressing,))).skipped}
    assert "neigh_suppress on port sup" in reasons["port"]
    promisc = replace(snap.link(4), flags=snap.link(4).flags | 0x100)
    links = tuple(promisc if l.index == 4 else l for l in snap.links)
    reasons = {s.ifname: s.reason for s in build_graph(replace(snap, links=links)).skipped}
    assert "promiscuous" in reasons["port"]


def test_a_vxlan_device_with_a_fixed_vni_routes_at_tc_in_both_directions():
    """flannel.1's shape: its receive and transmit functions decapsulate and
    encapsulate around tc, so it is Ethernet to IP — at TC (no native XDP,
    and an XDP redirect cannot reach its transmit) — unless the tunnel keys
    ride in metadata or the outer packets' paths lie in another namespace.
    What it may send in the fast path is capped below every path MTU the
    outer packet could meet (Linux would lower the inner route's there)."""
    snap = router_snapshot()
    snap = replace(snap, sysctls=replace(snap.sysctls, interfaces=snap.sysctls.interfaces + (sysctl(6),)))
    flannel = replace(link(6, "flannel.1", kind="vxlan", mtu=1450, xdp=0),
                      vxlan=VxlanOptions(vni=1, lower=3, port=8472))
    graph = build_graph(replace(snap, links=snap.links + (flannel,)))
    assert graph.pipeline(6).shape == Shape("tc", ("router", "transmit"))
    assert {"forwarding", "tc_tx"} <= set(flag_names(facts(graph, 6).flags))
    assert "xdp_tx" not in flag_names(facts(graph, 6).flags)
    # route/min_pmtu 552 less 50 bytes of IPv4 encapsulation; other egresses uncapped
    assert facts(graph, 6).tx_len_cap == 502 and facts(graph, 3).tx_len_cap == 0

    def built(**changes):
        vx = replace(flannel, vxlan=replace(flannel.vxlan, **changes.pop("vxlan", {})), **changes.pop("link", {}))
        return build_graph(replace(snap, links=snap.links + (vx,), **changes))

    def reason(**changes):
        g = built(**changes)
        assert "tc_tx" not in flag_names(facts(g, 6).flags)
        return {s.ifname: s.reason for s in g.skipped}["flannel.1"]

    assert facts(built(routes=snap.routes + (replace(route("198.19.9.0/24", oif=3), mtu=400),)), 6).tx_len_cap == 350
    assert facts(built(vxlan={"ipv6": True}), 6).tx_len_cap == 1280 - 70
    assert facts(built(sysctls=replace(snap.sysctls, route_min_pmtu=1400)), 6).tx_len_cap == 1350
    assert "external" in reason(vxlan={"collect_metadata": True})
    assert "another namespace" in reason(link={"peer_netnsid": 3})
    assert "no room" in reason(sysctls=replace(snap.sysctls, route_min_pmtu=100))
    assert "options unknown" in {s.ifname: s.reason for s in build_graph(replace(
        snap, links=snap.links + (replace(flannel, vxlan=None),))).skipped}["flannel.1"]


def test_a_vxlan_egress_checks_longer_packets_against_each_remote_s_outer_route():
    """Past tx_len_cap, a packet into a VXLAN device is sent when the outer
    route to its MAC's remote VTEP has room (transmit.h asks the FIB as
    vxlan_get_route() does): lfp_vteps holds each MAC's one remote, the
    device's local address and underlay, and the longest inner packet
    under every route MTU metric. Wherever the fast path's lookup could
    part from the device's, the table holds nothing and the cap alone
    decides."""
    import socket
    import struct

    snap = router_snapshot()
    snap = replace(snap, sysctls=replace(snap.sysctls, interfaces=snap.sysctls.interfaces + (sysctl(6),)))
    flannel = replace(link(6, "flannel.1", kind="vxlan", mtu=1450, xdp=0),
                      vxlan=VxlanOptions(vni=1, lower=3, port=8472, local="192.0.2.1"))
    remotes = (VtepRemote(6, "02:00:00:00:00:02", "192.0.2.2"), VtepRemote(6, "02:00:00:00:00:03", "192.0.2.3"),
               VtepRemote(6, "01:00:5e:00:00:04", "192.0.2.4"), VtepRemote(6, "01:00:5e:00:00:04", "192.0.2.5"),
               VtepRemote(6, "00:00:00:00:00:00", "192.0.2.9"), VtepRemote(6, "02:00:00:00:00:06", "224.0.0.7"),
               VtepRemote(6, "02:00:00:00:00:07", "192.0.2.7", via=4))
    base = replace(snap, links=snap.links + (flannel,), vteps=remotes)

    def vteps(snapshot=base, **options):
        if options:
            vx = replace(flannel, vxlan=replace(flannel.vxlan, **options))
            snapshot = replace(snapshot, links=snap.links + (vx,))
        entries = dict(build_graph(snapshot).table("lfp_vteps").entries)
        out = {}
        for key, value in entries.items():
            ifindex, mac, _ = struct.unpack("<I6sH", key)
            remote, local, oif, overhead, max_len = VTEP.unpack(value)[:5]
            out[mac.hex(":")] = (ifindex, socket.inet_ntoa(remote), socket.inet_ntoa(local), oif, overhead, max_len)
        return out

    # a unicast MAC's remote each; the default entry and a multicast MAC
    # (a remote per append, each sent a copy) and a multicast remote are
    # left out; only an entry's own underlay is an output interface (the
    # device's `dev` serves its default remote only)
    assert vteps() == {"02:00:00:00:00:02": (6, "192.0.2.2", "192.0.2.1", 0, 50, 0xFFFF - 50),
                       "02:00:00:00:00:03": (6, "192.0.2.3", "192.0.2.1", 0, 50, 0xFFFF - 50),
                       "02:00:00:00:00:07": (6, "192.0.2.7", "192.0.2.1", 4, 50, 0xFFFF - 50)}
    assert vteps(lower=0) == vteps()
    metric = replace(route("198.19.9.0/24", oif=3), mtu=1000)
    assert {v[5] for v in vteps(replace(base, routes=snap.routes + (metric,))).values()} == {950}
    assert vteps(local="")["02:00:00:00:00:02"][2] == "0.0.0.0"
    # where the device's lookup and the fast path's could part: nothing
    multipath = replace(route("198.19.8.0/24"), nexthops=(NextHop("198.18.1.2", 3), NextHop("198.18.2.2", 4)))
    rule = Rule(family=2, priority=100, table=100, action="to_tbl", src="192.0.2.1/32")
    assert vteps(replace(base, routes=snap.routes + (multipath,))) == {}
    assert vteps(replace(base, routes=snap.routes + (replace(route("198.19.8.0/24", oif=3), nh_id=7),))) == {}
    assert vteps(replace(base, rules=snap.rules + (rule,))) == {}
    assert vteps(replace(base, sysctls=replace(base.sysctls, forward_use_pmtu=True))) == {}
    assert vteps(tos=1) == {} and vteps(ipv6=True) == {} and vteps(collect_metadata=True) == {}
    assert vteps(route_short_circuit=True) == {}
    # two default routes in a table: an output lookup may pick the second
    # (fib_select_default); one each in two tables is no choice
    default = route("0.0.0.0/0", gateway="198.18.1.1", oif=2)
    assert len(vteps(replace(base, routes=snap.routes + (default,)))) == 3
    assert vteps(replace(base, routes=snap.routes + (default, replace(default, priority=10)))) == {}
    assert len(vteps(replace(base, routes=snap.routes + (default, replace(default, table=100))))) == 3
    # the underlay in a VRF, directly or under a bond: the device's socket is bound to it
    vrf, bond = link(9, "vrf0", kind="vrf"), replace(link(8, "bond0", kind="bond"), master=9)
    enslaved = tuple(replace(x, master=9) if x.index == 3 else x for x in base.links) + (vrf,)
    assert vteps(replace(base, links=enslaved)) == {}
    nested = tuple(replace(x, master=8) if x.index == 3 else x for x in base.links) + (bond, vrf)
    assert vteps(replace(base, links=nested)) == {}
    assert len(vteps(replace(base, links=nested[:-2] + (replace(bond, master=None),)))) == 3
    # IPv4 forwarding off on the device: the lookup would refuse it as its input
    off = tuple(replace(c, forwarding=False) if c.ifindex == 6 else c for c in base.sysctls.interfaces)
    assert vteps(replace(base, sysctls=replace(base.sysctls, interfaces=off))) == {}
    assert vteps(replace(base, vteps=())) == {}


def test_a_vxlan_egress_s_remotes_are_encapsulated_by_the_fast_path_only_as_the_device_would():
    """lfp_vteps says, per remote, how the device's transmit would
    encapsulate (VNI, destination port, source port range, TTL, whether it
    sums its UDP) and whether the fast path may do so itself
    (VTEP_ENCAP): only where it builds exactly those headers and the
    kernel's output path leaves them as they are; where connections are
    tracked, the outer connection must exist (VTEP_TRACKED). Anywhere else
    the device encapsulates, and graph's notes say why."""
    from linuxfp.graph.nodes.transmit import VTEP_ENCAP, VTEP_NAT_HOOKS, VTEP_TRACKED, VTEP_UDP_CSUM
    from linuxfp.state.iptables import parse_save
    from linuxfp.state.model import NetfilterState

    snap = router_snapshot()
    snap = replace(snap, sysctls=replace(snap.sysctls, interfaces=snap.sysctls.interfaces + (sysctl(6),)))
    flannel = replace(link(6, "flannel.1", kind="vxlan", mtu=1450, xdp=0, qdisc="noqueue"),
                      vxlan=VxlanOptions(vni=1, lower=3, port=8472, local="192.0.2.1"))
    remotes = (VtepRemote(6, "02:00:00:00:00:02", "192.0.2.2"),
               VtepRemote(6, "02:00:00:00:00:03", "192.0.2.3", port=4789, vni=7))
    base = replace(snap, links=snap.links + (flannel,), vteps=remotes, addresses=snap.addresses + (addr(3, "192.0.2.1"),))

    def encap(snapshot=base, **options):
        if options:
            vx = replace(flannel, **options.pop("link", {}), vxlan=replace(flannel.vxlan, **options))
            snapshot = replace(snapshot, links=snap.links + (vx,))
        graph = build_graph(snapshot)
        out = {}
        for key, value in graph.table("lfp_vteps").entries:
            mac = key[4:10].hex(":")
            vni, port_min, port_max, port, ttl, flags = VTEP.unpack(value)[5:]
            out[mac] = (int.from_bytes(vni, "big") >> 8, (port_min, port_max), int.from_bytes(port, "big"), ttl,
                        flags)
        return out, " ".join(line for _, lines in graph.notes for line in lines)

    both = VTEP_ENCAP | VTEP_UDP_CSUM
    assert encap()[0] == {"02:00:00:00:00:02": (1, (32768, 60999), 8472, 64, both),
                          "02:00:00:00:00:03": (7, (32768, 60999), 4789, 64, both)}
    assert encap()[1] == ""
    # the device's own TTL and source ports, else the namespace's
    assert encap(ttl=9, port_range=(1000, 2000))[0]["02:00:00:00:00:02"][:4] == (1, (1000, 2000), 8472, 9)
    sysctls = replace(base.sysctls, default_ttl=70, local_port_range=(40000, 50000))
    assert encap(replace(base, sysctls=sysctls))[0]["02:00:00:00:00:02"][1:4] == ((40000, 50000), 8472, 70)
    assert encap(udp_csum=False)[0]["02:00:00:00:00:02"][4] == VTEP_ENCAP
    # what the fast path does not build, or the device's transmit does beyond it
    for options, why in (({"ttl_inherit": True}, "ttl inherit"), ({"df": 1}, "DF"), ({"extensions": True}, "GBP"),
                         ({"local": ""}, "no local address"), ({"link": {"qdisc": "htb"}}, "its qdisc")):
        entries, notes = encap(**options)
        assert {v[4] & VTEP_ENCAP for v in entries.values()} == {0} and why in notes, options
        assert "flannel.1 to 192.0.2.2" in notes
    entries, notes = encap(replace(base, addresses=snap.addresses))
    assert {v[4] for v in entries.values()} == {0} and "not one of the host's" in notes
    entries, notes = encap(replace(base, vteps=(replace(remotes[0], ages=True), remotes[1])))
    assert entries["02:00:00:00:00:02"][4] == 0 and entries["02:00:00:00:00:03"][4] == both and "ages" in notes
    hop = replace(route("198.19.9.0/24", oif=3), hoplimit=5)
    entries, notes = encap(replace(base, routes=base.routes + (hop,)))
    assert {v[4] for v in entries.values()} == {0} and "hop limit" in notes
    # netfilter: a rule on the outer packets' way out keeps them the device's;
    # a tracked namespace needs the outer connection
    def with_rules(*rules):
        text = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" + "".join(
            r + "\n" for r in rules) + "COMMIT\n"
        ruleset = parse_save(text, "nft")
        return replace(base, netfilter=NetfilterState(active=True, tables=("nft:ip filter",), detail="test",
                                                      rulesets=(ruleset,)))
    entries, notes = encap(with_rules("-A OUTPUT -d 192.0.2.2/32 -p udp -m udp --dport 8472 -j DROP"))
    assert entries["02:00:00:00:00:02"][4] == 0 and "OUTPUT #1" in notes
    assert entries["02:00:00:00:00:03"][4] == both
    entries, _ = encap(with_rules("-A FORWARD -m conntrack --ctstate ESTABLISHED -j ACCEPT"))
    assert {v[4] for v in entries.values()} == {both | VTEP_TRACKED}
    # nat's hooks registered: the outer connection must have been bound by them
    nat = parse_save("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                     ":POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -s 198.18.0.0/16 -j MASQUERADE\nCOMMIT\n", "nft")
    entries, _ = encap(replace(base, netfilter=NetfilterState(active=True, tables=("nft:ip nat",), detail="test",
                                                             rulesets=(nat,))))
    assert {v[4] for v in entries.values()} == {both | VTEP_TRACKED | VTEP_NAT_HOOKS}
    # the outer packets may leave only where nothing on the transmit path reads more than their bytes
    assert "encap_tx" in flag_names(facts(build_graph(base), 3).flags)
    queued = tuple(replace(x, qdisc="htb") if x.index == 3 else x for x in base.links)
    assert "encap_tx" not in flag_names(facts(build_graph(replace(base, links=queued)), 3).flags)


def test_dot_output_escapes_what_the_reasons_contain():
    snap = router_snapshot()
    odd = link(6, 'vx"0', kind="vxlan", xdp=0)
    dot = to_dot(build_graph(replace(snap, links=snap.links + (odd,))))
    assert '"vx\\"0"' in dot and "vxlan options unknown" in dot and "\n\n" not in dot


def test_bridge_and_router_compose_on_ports_and_uplinks():
    from linuxfp.graph.nodes.bridge_tx import BRD_BRIDGE, BRD_SENDS

    graph = build_graph(bridged_router_snapshot())
    # frames to br0's MAC go up into routing; routes out of br0 find the port
    assert graph.pipeline(5).shape.nodes == ("bridge", "router", "bridge_tx", "transmit")
    assert graph.pipeline(2).shape.nodes == ("router", "bridge_tx", "transmit")
    devs = dict(graph.table("lfp_br_devs").entries)
    assert devs == {(4).to_bytes(4, "little"): (BRD_BRIDGE | BRD_SENDS).to_bytes(4, "little")}
    # a bridge with a queue of its own: routed packets to it stay with the
    # kernel, and pipelines without such an egress carry no bridge_tx
    queued = build_graph(bridged_router_snapshot(bridge_qdisc="htb"))
    assert queued.pipeline(2).shape.nodes == ("router", "transmit")
    assert dict(queued.table("lfp_br_devs").entries) == {(4).to_bytes(4, "little"): BRD_BRIDGE.to_bytes(4, "little")}
    # the router never stands on a port without the bridge that hands it up
    locked = build_graph(bridged_router_snapshot(locked=True))
    assert locked.pipeline(5) is None
    assert "locked" in {s.ifname: s.reason for s in locked.skipped}["port"]


def test_a_bridge_family_chain_keeps_the_bridges_on_the_kernel_path_not_the_namespace():
    """ebtables (nft) or a native bridge table: every frame of a port meets
    its hooks, and so does what the host sends through the bridge; packets
    routed between other interfaces meet none of them."""
    from linuxfp.graph.nodes.bridge_tx import BRD_BRIDGE, BRD_SENDS

    chain = NftChain("bridge", "filter", "FORWARD", hook="forward", kind="filter", policy="accept", rules=1,
                     expressions=("match ip",))
    netfilter = NetfilterState(active=True, tables=("nft:bridge filter",),
                               native=NftNative(chains=(chain,), tables=("bridge filter",)))
    plain = bridged_router_snapshot()
    chained = replace(plain, netfilter=netfilter)
    graph = build_graph(chained)
    reason = {s.ifname: s.reason for s in graph.skipped}["port"]
    assert graph.pipeline(5) is None and not graph.table("lfp_br_ports").entries
    assert "nf_tables chain bridge filter FORWARD on forward: 1 rule" in reason, reason
    # the uplinks keep routing, but not into br0 (its output and postrouting hooks)
    assert graph.pipeline(2).shape.nodes == ("router", "transmit")
    assert dict(graph.table("lfp_br_devs").entries) == {(4).to_bytes(4, "little"): BRD_BRIDGE.to_bytes(4, "little")}
    assert not any("IPv6 not routed" in line for _node, lines in graph.notes for line in lines)
    # a chain left empty with policy accept (what `ebtables -F` leaves) does
    # nothing; and back: the same links, only netfilter changed, as the
    # state layer hands on what did not change (the nodes' memos see it)
    idle = replace(chained, netfilter=replace(netfilter, native=NftNative(
        chains=(replace(chain, rules=0, expressions=()),), tables=("bridge filter",))))
    for snapshot, blocked in ((idle, False), (chained, True), (idle, False)):
        again = build_graph(snapshot)
        assert (again.pipeline(5) is None) == blocked
        assert bool(again.table("lfp_br_ports").entries) != blocked
        assert again.pipeline(2).shape.nodes == (("router", "transmit") if blocked
                                                 else ("router", "bridge_tx", "transmit"))
        assert dict(again.table("lfp_br_devs").entries)[(4).to_bytes(4, "little")] == (
            BRD_BRIDGE | (0 if blocked else BRD_SENDS)).to_bytes(4, "little")


def test_bridged_ipv4_meets_forward_where_br_netfilter_shows_it_to_iptables():
    """br_netfilter shows bridged IPv4 to iptables with the namespace's
    bridge-nf-call-iptables, or with the bridge's own nf_call_iptables while
    br_netfilter is loaded (its sysctls exist; netlink reports the option
    regardless): there the port's pipeline evaluates FORWARD for bridged
    frames too, and the port's flags say iptables rules matter."""
    import struct

    from linuxfp.graph.nodes.bridge import BRP_NF_IPV4, BRP_NF_IPV4_RULES
    from linuxfp.state.iptables import parse_save

    rules = parse_save("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                       "-A FORWARD -i br0 -o br0 -p udp -j DROP\nCOMMIT\n", "nft")

    def port_flags(graph) -> int:
        return struct.unpack("<IIII", dict(graph.table("lfp_br_ports").entries)[(5).to_bytes(4, "little")])[1]

    def graph_of(switch: bool, option: bool, loaded: bool):
        snap = bridged_router_snapshot()
        links = tuple(replace(l, bridge=replace(l.bridge, nf_call_iptables=option)) if l.kind == "bridge" else l
                      for l in snap.links)
        return build_graph(replace(
            snap, links=links,
            sysctls=replace(snap.sysctls, bridge_nf_call_iptables=switch, br_netfilter=loaded or switch),
            netfilter=NetfilterState(active=True, tables=("nft:ip filter",), detail="test", rulesets=(rules,))))

    for switch, option, loaded, shown in ((True, False, True, True), (False, True, True, True),
                                          (False, True, False, False), (False, False, True, False)):
        graph = graph_of(switch, option, loaded)
        nodes = graph.pipeline(5).shape.nodes
        assert ("bridge_filter" in nodes) == shown, (switch, option, loaded, nodes)
        flags = port_flags(graph)
        assert bool(flags & BRP_NF_IPV4) == bool(flags & BRP_NF_IPV4_RULES) == shown, (switch, option, loaded)
        assert "bridge_filter" not in graph.pipeline(2).shape.nodes     # not a bridge port


def test_a_bridge_port_pipeline_is_a_dag_of_the_bridged_and_the_routed_path():
    """Behind the bridge, bridged frames skip the IP stages and frames to the
    bridge's own MAC skip br_netfilter's FORWARD: `graph` shows both paths
    (text, -j, dot); a pipeline with one path shows no branch."""
    from linuxfp.graph.model import Pipeline
    from linuxfp.graph.shape import Shape

    port = Pipeline(5, "port", Shape("tc", ("bridge", "bridge_filter", "conntrack", "router", "filter",
                                            "nat_out", "bridge_tx", "transmit")))
    assert port.paths() == (
        ("forwarded by bridge", ("bridge", "bridge_filter", "transmit")),
        ("handed up to IP", ("bridge", "conntrack", "router", "filter", "nat_out", "bridge_tx", "transmit")))
    plain = Pipeline(2, "left", Shape("xdp", ("router", "filter", "transmit")))
    assert plain.paths() == (("", ("router", "filter", "transmit")),)
    # a bridge with nothing deciding behind it: what it hands up goes to the kernel
    alone = Pipeline(6, "p2", Shape("tc", ("bridge", "bridge_filter", "transmit")))
    assert alone.paths() == (("forwarded by bridge", ("bridge", "bridge_filter", "transmit")),)

    graph = build_graph(bridged_router_snapshot())
    text = to_text(graph)
    assert ("port (ifindex 5) [tc]: parse -> bridge -> router -> bridge_tx -> transmit -> egress\n"
            "  forwarded by bridge: parse -> bridge -> transmit -> egress\n"
            "  handed up to IP:     parse -> bridge -> router -> bridge_tx -> transmit -> egress") in text
    assert "forwarded by" not in text.split("port (ifindex 5)")[0]     # the uplinks: one path
    assert graph.to_dict()["pipelines"][2]["paths"] == [
        {"via": "forwarded by bridge", "nodes": ["bridge", "transmit"]},
        {"via": "handed up to IP", "nodes": ["bridge", "router", "bridge_tx", "transmit"]}]
    dot = to_dot(graph)
    assert '"port.bridge" -> "port.transmit" [label="forwarded by bridge"];' in dot
    assert '"port.bridge" -> "port.router" [label="handed up to IP"];' in dot
    assert dot.count('"port.bridge_tx" -> "port.transmit"') == 1 and dot.count('"port" -> "port.bridge"') == 1


def test_interface_facts_follow_sysctls_and_redirect_capability():
    snap = router_snapshot(sysctls=Sysctls(ip_forward=True, interfaces=(
        sysctl(1), sysctl(2, rp_filter=2), sysctl(3, forwarding=False))))
    g = build_graph(snap)
    assert set(flag_names(facts(g, 2).flags)) == {"rp_filter", "forwarding", "xdp_tx", "tc_tx", "routed_tx",
                                                  "set_priority", "encap_tx"}
    assert set(flag_names(facts(g, 3).flags)) == {"xdp_tx", "tc_tx", "routed_tx", "set_priority", "encap_tx"}
    assert facts(g, 2).mac == bytes.fromhex("020000000002")


def test_xdp_tx_needs_ndo_xmit_carrier_and_a_plain_qdisc():
    base = router_snapshot()
    for right in (link(3, "right", xdp=XDP_ALL & ~4), link(3, "right", up=False),
                  link(3, "right", qdisc="htb")):
        g = build_graph(replace(base, links=(base.links[0], base.links[1], right)))
        assert "xdp_tx" not in flag_names(facts(g, 3).flags)
    g = build_graph(replace(base, links=(base.links[0], base.links[1], link(3, "right", qdisc="htb"))))
    assert "tc_tx" in flag_names(facts(g, 3).flags)


def test_local_sources_cover_addresses_and_local_table():
    local = local_source_addresses(router_snapshot())
    assert {"198.18.1.254", "198.18.2.254", "198.18.1.255", "127.0.0.1"} <= local
    import socket
    table = build_graph(router_snapshot()).table("lfp_local_src")
    assert {socket.inet_ntoa(k) for k, _ in table.entries} == local


def test_full_source_check_only_when_a_source_could_be_refused_elsewhere():
    snap = router_snapshot()
    assert not any(f.flags & 64 for f in build_graph(snap).ifaces)
    custom_rule = replace(snap, rules=snap.rules + (Rule(family=2, priority=100, table=100, action="to_tbl",
                                                         src="198.18.1.0/24"),))
    assert not any(f.flags & 64 for f in build_graph(custom_rule).ifaces)
    local_elsewhere = replace(snap, routes=snap.routes + (route("203.0.113.0/24", table=100, type_="local", oif=2),))
    assert all(f.flags & 64 for f in build_graph(local_elsewhere).ifaces)
    local_prefix = replace(snap, routes=snap.routes + (route("203.0.113.0/24", table=255, type_="local", oif=2),))
    assert all(f.flags & 64 for f in build_graph(local_prefix).ifaces)
    loopback = replace(snap, routes=snap.routes + (route("127.0.0.0/8", table=255, type_="local", oif=1),))
    assert not any(f.flags & 64 for f in build_graph(loopback).ifaces)   # loopback sources are martians
    no_local_rule = replace(snap, rules=snap.rules[1:])
    assert all(f.flags & 64 for f in build_graph(no_local_rule).ifaces)


def test_ipsec_and_exotic_multipath_hashing_keep_the_kernel_path():
    from linuxfp.state.model import XfrmState, NextHop
    assert build_graph(router_snapshot(xfrm=XfrmState(policies_fwd=1))).pipelines == ()
    assert build_graph(router_snapshot(xfrm=XfrmState(default_blocks=True))).pipelines == ()
    snap = router_snapshot(sysctls=Sysctls(ip_forward=True, interfaces=tuple(sysctl(i) for i in (1, 2, 3)),
                                           multipath_hash_policy=2))
    assert build_graph(snap).pipelines != ()       # no multipath route: fine
    multi = replace(snap.routes[-1], nexthops=(NextHop("198.18.2.1", 3), NextHop("198.18.2.2", 3)))
    assert build_graph(replace(snap, routes=snap.routes + (multi,))).pipelines == ()


def test_accepted_redirects_and_pmtu_use_are_conservative():
    from linuxfp.graph.model import IF_ROUTED_TX, IF_TC_TX
    from linuxfp.state.model import InterfaceSysctls
    conf = InterfaceSysctls(3, True, 0, False, True, False, accept_redirects=True)
    snap = router_snapshot(sysctls=Sysctls(ip_forward=True, interfaces=(sysctl(1), sysctl(2), conf)))
    g = build_graph(snap)
    # IPv4's redirects: no egress of routed IPv4 at either hook (the
    # interface still sends routed IPv6, whose redirects are its own)
    assert not facts(g, 3).flags & IF_TC_TX and (3).to_bytes(4, "little") not in dict(g.table("lfp_tx_ports").entries)
    assert facts(g, 3).flags & IF_ROUTED_TX
    pmtu = router_snapshot(routes=router_snapshot().routes + (route("198.19.9.0/24", gateway="198.18.2.1", oif=3),),
                           sysctls=Sysctls(ip_forward=True, interfaces=tuple(sysctl(i) for i in (1, 2, 3)),
                                           forward_use_pmtu=True))
    assert facts(build_graph(pmtu), 2).fwd_len_cap == 0
    with_metric = replace(pmtu, routes=pmtu.routes + (replace(route("198.19.8.0/24", gateway="198.18.2.1", oif=3), mtu=1400),))
    assert facts(build_graph(with_metric), 2).fwd_len_cap == 68


def test_presentations():
    g = build_graph(router_snapshot())
    text = to_text(g)
    assert "left (ifindex 2) [xdp]: parse -> router -> transmit -> egress" in text
    assert "lo (ifindex 1): kernel path" in text
    assert to_dot(g).startswith("digraph linuxfp {")
    d = g.to_dict()
    assert d["pipelines"][0]["shape"] == "xdp:router+transmit" and "ifaces" in d
    assert {t["name"]: t["owner"] for t in d["tables"]}["lfp_neigh"] == "transmit"


def test_ipv6_egresses_are_not_governed_by_ipv4_switches():
    """An IPv6-only router (ip_forward=0: IPv4 forwarding off, its redirects
    on): its egresses take routed IPv6 (lfp_tx6_ports) and no routed IPv4
    (lfp_tx_ports); IPv6's own redirects, a bridge port, an enslaved or a
    down interface take neither."""
    devmap = lambda g, name: {int.from_bytes(k, "little") for k, _ in g.table(name).entries}  # noqa: E731
    v6only = lambda i, **kw: replace(sysctl(i, forwarding=False), ipv6=True, accept_redirects=True, **kw)  # noqa: E731
    snap = router_snapshot(sysctls=Sysctls(ip_forward=False, interfaces=(
        v6only(1), v6only(2), v6only(3, ipv6_accept_redirects=True))))
    g = build_graph(snap)
    assert devmap(g, "lfp_tx6_ports") == {2} and devmap(g, "lfp_tx_ports") == set()
    on = lambda i: replace(sysctl(i), ipv6=True)   # noqa: E731
    both = build_graph(router_snapshot(sysctls=Sysctls(ip_forward=True, interfaces=(on(1), on(2), on(3)))))
    assert devmap(both, "lfp_tx6_ports") == devmap(both, "lfp_tx_ports") == {2, 3}
    for changed in (link(3, "right", up=False), link(3, "right", master=9)):
        links = tuple(changed if existing.index == 3 else existing for existing in snap.links)
        assert 3 not in devmap(build_graph(replace(snap, links=links)), "lfp_tx6_ports"), changed


def test_ipv6_facts_follow_what_bpf_fib_lookup_cannot_see():
    from linuxfp.graph.model import IF_IPV6, IF_IPV6_TX
    from linuxfp.state.model import InterfaceSysctls
    on = lambda i, **kw: replace(sysctl(i), ipv6=True, **kw)   # noqa: E731
    snap = router_snapshot(sysctls=Sysctls(ip_forward=True, interfaces=(on(1), on(2), on(3, ipv6_accept_redirects=True))))
    g = build_graph(snap)
    assert facts(g, 2).flags & IF_IPV6 and facts(g, 2).flags & IF_IPV6_TX
    assert not facts(g, 3).flags & IF_IPV6_TX          # takes redirects: exceptions with another gateway
    assert facts(g, 2).fwd_len_cap6 == 0
    capped = replace(snap, route_mtus6=(((10, 254, "2001:db8::/64", 0, 1024, "::/0"), 1000),))
    assert facts(build_graph(capped), 2).fwd_len_cap6 == 1000      # no 1280 floor: the output path honours it
    for rule in (Rule(family=10, priority=5, table=254, action="to_tbl", suppress_prefixlen=0),
                 Rule(family=10, priority=5, table=100, action="to_tbl", fwmark=1),
                 Rule(family=10, priority=5, table=100, action="to_tbl", uid_range=(1000, 2000))):
        assert not facts(build_graph(replace(snap, rules=snap.rules + (rule,))), 2).flags & IF_IPV6, rule
    hashed = replace(snap, sysctls=replace(snap.sysctls, ipv6_multipath_hash_policy=1))
    assert not facts(build_graph(hashed), 2).flags & IF_IPV6
    tables = replace(snap, netfilter=replace(snap.netfilter, active=True, tables=("nft:ip6 filter",)))
    assert not facts(build_graph(tables), 2).flags & IF_IPV6
    assert InterfaceSysctls(1, True, 0, False, True, False).ipv6 is False    # unread: off


def test_multipath_l4_hash_policy_keeps_xdp_off():
    from linuxfp.state.model import NextHop
    snap = router_snapshot(sysctls=Sysctls(ip_forward=True, interfaces=tuple(sysctl(i) for i in (1, 2, 3)),
                                           multipath_hash_policy=1))
    assert {p.shape.hook for p in build_graph(snap).pipelines} == {"xdp"}      # no multipath route
    multi = replace(snap.routes[-1], nexthops=(NextHop("198.18.2.1", 3), NextHop("198.18.2.2", 3)))
    g = build_graph(replace(snap, routes=snap.routes + (multi,)))
    assert {p.shape.hook for p in g.pipelines} == {"tc"}


@pytest.mark.parametrize("hooked, xdp_tx_stays, tc_tx_stays", [
    (dict(qdisc="pfifo_fast"), True, True),     # a queue XDP's redirect is indistinguishable from: only XDP may skip it
    (dict(qdisc="htb"), False, True),
    (dict(tc_ingress=True), False, True),
    (dict(tcx_others_egress=True), False, True),
    # (a tc redirect skips the nf_tables egress hook too: nf_skip_egress)
    (dict(egress_chain=True), False, False),
])
def test_every_way_past_a_transmit_path_stops_where_something_runs_on_it(hooked, xdp_tx_stays, tc_tx_stays):
    """An XDP redirect into a device, a frame delivered straight into a
    veth's peer and a routed packet sent to a bridge's port instead of
    through the bridge all skip the device's transmit path: each is kept
    off a device where something runs there (interfaces.transmit_skips)."""
    from linuxfp.graph.model import IF_TC_TX, IF_XDP_TX
    from linuxfp.graph.nodes.bridge_tx import BRD_SENDS

    def hook(snapshot, ifindex):
        if "egress_chain" in hooked:
            chain = NftChain("netdev", "edge", "out", hook="egress", kind="filter", policy="accept",
                             devices=(snapshot.link(ifindex).name,), rules=1, expressions=("cmp", "payload"))
            return replace(snapshot, netfilter=NetfilterState(active=True, tables=("nft:netdev edge",), native=NftNative(
                chains=(chain,), hooks_by_name=True, tables=("netdev edge",))))
        return replace(snapshot, links=tuple(replace(l, **hooked) if l.index == ifindex else l
                                             for l in snapshot.links))

    plain = router_snapshot()
    for snapshot, xdp_tx, tc_tx in ((plain, True, True), (hook(plain, 3), xdp_tx_stays, tc_tx_stays)):
        right = facts(build_graph(snapshot, "xdp"), 3)
        assert bool(right.flags & IF_XDP_TX) == xdp_tx and bool(right.flags & IF_TC_TX) == tc_tx

    pods = with_pods(plain)
    for snapshot, delivered in ((pods, [2, 3]), (hook(pods, 3), [2])):
        entries = build_graph(snapshot, "tc").table("lfp_peers").entries
        assert sorted(int.from_bytes(key, "little") for key, _ in entries) == delivered

    bridged = bridged_router_snapshot()
    for snapshot, sends in ((bridged, True), (hook(bridged, 4), False)):
        flags = int.from_bytes(dict(build_graph(snapshot).table("lfp_br_devs").entries)[(4).to_bytes(4, "little")],
                               "little")
        assert bool(flags & BRD_SENDS) == sends
