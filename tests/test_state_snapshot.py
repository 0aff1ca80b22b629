"""read_snapshot / refresh_polled against real throw-away namespaces."""

from __future__ import annotations

import json
import os

import pytest
from test_state_support import basic_topology, have, sh, throwaway_netns

from linuxfp.state import (
    AF_INET,
    ARPHRD_ETHER,
    ARPHRD_LOOPBACK,
    NETDEV_XDP_ACT_NDO_XMIT,
    RT_TABLE_LOCAL,
    RT_TABLE_MAIN,
    read_snapshot,
    refresh_polled,
)
from linuxfp.state import decode
from linuxfp.state import netlink as nl
from linuxfp.state.model import route_order
from linuxfp.state.read import dump_routes

pytestmark = pytest.mark.netns


@pytest.fixture
def netns():
    with throwaway_netns() as name:
        yield name


def test_fresh_namespace(netns):
    snap = read_snapshot()
    assert snap.netns_inode == os.stat(f"/run/netns/{netns}").st_ino
    lo = snap.link_by_name("lo")
    assert lo.index == 1 and lo.link_type == ARPHRD_LOOPBACK and not lo.up
    assert snap.default_rules
    assert [(r.priority, r.table) for r in snap.rules if r.family == 2] == [(0, 255), (32766, 254), (32767, 253)]
    # IPv6's defaults have no "default" table rule
    assert [(r.priority, r.table) for r in snap.rules if r.family == 10] == [(0, 255), (32766, 254)]
    assert not snap.netfilter.active, snap.netfilter.detail
    assert snap.netfilter.tables == ()
    assert snap.sysctls.ip_forward is False
    assert snap == read_snapshot()
    assert hash(snap) == hash(read_snapshot())


def test_links_addresses_routes_rules_neighbours(netns):
    basic_topology()
    sh("ip route add 203.0.113.0/24 nexthop via 198.18.0.2 nexthop via 198.18.1.2 weight 3",
       "ip route add blackhole 198.51.100.0/25",
       "ip route add unreachable 198.51.100.128/26",
       "ip route add prohibit 198.51.100.192/26 metric 7",
       "ip route add 192.0.2.0/24 via 198.18.0.2 table 100 mtu 1400 realm 5",
       "ip route add default via 198.18.1.2",
       "ip rule add from 198.18.0.0/24 table 100 pref 100",
       "ip neigh add 198.18.0.9 lladdr 02:00:00:00:00:09 dev a0 nud permanent",
       # Kernel-internal entries that come and go without events are left out.
       "ip neigh add 198.18.0.10 lladdr 02:00:00:00:00:0a dev a0 nud noarp",
       "tc qdisc add dev b0 clsact")
    snap = read_snapshot()

    a0, a1, b0 = snap.link_by_name("a0"), snap.link_by_name("a1"), snap.link_by_name("b0")
    assert a0.kind == "veth" and a0.link_type == ARPHRD_ETHER and a0.up and a0.oper_up
    assert a0.peer == a1.index and a1.peer == a0.index
    assert a0.mac == a0.mac.lower() and len(a0.mac) == 17
    assert a0.mtu == 1500 and a0.master is None and a0.xdp_prog_id == 0
    assert a0.qdisc == "noqueue"
    assert snap.link(a0.index) is a0
    assert b0.tc_ingress and not a0.tc_ingress

    assert [(a.address, a.prefixlen) for a in snap.addresses_of(a0.index)] == [("198.18.0.1", 24)]
    assert snap.addresses_of(a0.index)[0].family == AF_INET

    by_dst = {(r.table, r.dst): r for r in snap.routes}
    mp = by_dst[(RT_TABLE_MAIN, "203.0.113.0/24")]
    assert [(nh.gateway, nh.oif, nh.weight) for nh in mp.nexthops] == [
        ("198.18.0.2", a0.index, 1), ("198.18.1.2", b0.index, 3)]
    assert by_dst[(RT_TABLE_MAIN, "198.51.100.0/25")].type == "blackhole"
    assert by_dst[(RT_TABLE_MAIN, "198.51.100.128/26")].type == "unreachable"
    prohibit = by_dst[(RT_TABLE_MAIN, "198.51.100.192/26")]
    assert prohibit.type == "prohibit" and prohibit.priority == 7 and prohibit.nexthops == ()
    custom = by_dst[(100, "192.0.2.0/24")]
    assert custom.mtu == 1400 and custom.realm == 5
    # Plain unicast routes are answered by the live FIB and not kept; an
    # IPv4 default route is kept (several in a table make output lookups
    # pick among them, which the transmit node must know).
    assert by_dst[(RT_TABLE_MAIN, "0.0.0.0/0")].nexthops[0].gateway is not None
    assert (RT_TABLE_MAIN, "198.18.0.0/24") not in by_dst
    # The local table is part of the dump too (pyroute2 would filter it out).
    assert by_dst[(RT_TABLE_LOCAL, "198.18.0.1/32")].type == "local"
    assert by_dst[(RT_TABLE_LOCAL, "198.18.0.255/32")].type == "broadcast"

    assert not snap.default_rules
    custom_rule = next(r for r in snap.rules if r.priority == 100)
    assert (custom_rule.table, custom_rule.src, custom_rule.action) == (100, "198.18.0.0/24", "to_tbl")

    neigh = snap.neighbours_of(a0.index)
    assert [(n.dst, n.lladdr, n.state_name) for n in neigh] == [("198.18.0.9", "02:00:00:00:00:09", "permanent")]

    json.dumps(snap.to_dict())  # CLI output must serialise
    assert snap == read_snapshot()


def test_route_dump_scan_keeps_exactly_what_a_full_decode_would(netns, tmp_path):
    """The scan decodes only flagged messages; a full decode of every message
    is the reference. Kept routes sit among thousands of plain ones, across
    datagram boundaries, with plain companions of the same identity, and
    with payload bytes that look like the attributes the scan looks for."""
    basic_topology()
    lines = []
    for i in range(6000):
        dst = f"198.19.{i // 250}.{i % 250}/32"
        if i % 997 == 0:
            lines.append(f"route add {dst} via 198.18.0.2 mtu 1300")
        elif i % 1499 == 0:
            lines.append(f"route add blackhole {dst}")
        elif i % 1201 == 0:
            lines.append(f"route add {dst} nexthop via 198.18.0.2 nexthop via 198.18.1.2")
        else:
            lines.append(f"route add {dst} via 198.18.0.2 metric {i % 3}")
        if i % 1777 == 0:   # a group: a kept route with a plain one beside it
            lines.append(f"route append {dst} via 198.18.1.2" if i % 997 == 0 else
                         f"route append {dst} via 198.18.1.2 mtu 1200")
    # Longer groups: plain routes on both sides of a kept one, and a kept
    # route inside a run of 300 (likely across a datagram boundary).
    for n, dst in enumerate(("198.19.30.1/32", "198.19.30.2/32")):
        group = [f"via 198.18.0.{10 + k}" for k in range(3)]
        group.insert(2 * n, "via 198.18.1.9 mtu 1250")   # first, or last
        lines += [f"route {'add' if k == 0 else 'append'} {dst} {g}" for k, g in enumerate(group)]
    run = [f"via 198.18.{k // 200}.{20 + k % 200}" for k in range(300)]
    run.insert(150, "via 198.18.1.8 mtu 1240")
    lines += [f"route {'add' if k == 0 else 'append'} 198.19.31.0/24 {g}" for k, g in enumerate(run)]
    # Payloads with the byte patterns of RTAX_MTU / RTA_MULTIPATH headers.
    lines += ["route add 198.19.200.0/24 via 198.18.0.2 metric 131080", "route add 198.19.9.0/24 via 198.18.0.2",
              "route add 203.0.113.0/24 via 198.18.0.2 metric 589833"]
    (tmp_path / "r").write_text("\n".join(lines) + "\n")
    sh(f"ip -batch {tmp_path / 'r'}")
    with nl.NetlinkSocket(nl.NETLINK_ROUTE) as sock:
        everything = [r for m in sock.dump(decode.RTM_GETROUTE, decode.route_dump_request())
                      if (r := decode.decode_route(m.payload)) is not None]
        scanned = dump_routes(sock)
    kept_identities = {r.identity for r in everything if not r.plain}
    reference = sorted((r for r in everything if not r.plain or r.identity in kept_identities), key=route_order)
    assert list(scanned) == reference
    assert len(everything) > 6000 and 320 < len(scanned) < 420
    assert any(r.plain for r in scanned)   # companions were found


def test_sysctls_effective_values(netns):
    basic_topology()
    sh("sysctl -qw net.ipv4.ip_forward=1",
       "sysctl -qw net.ipv4.conf.all.forwarding=1",
       "sysctl -qw net.ipv4.conf.b0.forwarding=0",
       "sysctl -qw net.ipv4.conf.all.rp_filter=1",
       "sysctl -qw net.ipv4.conf.a0.rp_filter=2",
       "sysctl -qw net.ipv4.conf.b0.rp_filter=0",
       "sysctl -qw net.ipv4.conf.a0.accept_local=1",
       "sysctl -qw net.ipv4.conf.all.send_redirects=0",
       "sysctl -qw net.ipv4.conf.a0.send_redirects=0",
       "sysctl -qw net.ipv4.conf.all.route_localnet=1")
    snap = read_snapshot()
    a0 = snap.interface_sysctls(snap.link_by_name("a0").index)
    b0 = snap.interface_sysctls(snap.link_by_name("b0").index)
    assert snap.sysctls.ip_forward
    assert a0.forwarding and not b0.forwarding  # per device only
    assert a0.rp_filter == 2 and b0.rp_filter == 1  # max(all, dev)
    assert a0.accept_local and not b0.accept_local  # all || dev
    assert not a0.send_redirects and b0.send_redirects
    assert a0.route_localnet and b0.route_localnet


def test_device_configuration_is_read_from_the_link_dump_as_the_files_show_it(netns):
    """Each device's sysctls come with its RTM_NEWLINK (IFLA_AF_SPEC): at
    the positions sysctl.py reads, the values are the conf/DEV files', key
    by key, device by device (each key given values, over the devices, no
    other key has; a negative one too), and a device without IPv6
    configuration has none there either."""
    from linuxfp.state.read import dump_links_and_confs
    from linuxfp.state.sysctl import CONF4_INDEX, CONF6_INDEX, _values

    basic_topology()
    sh("ip link add m0 mtu 1200 type veth peer name m1 mtu 1200")     # (below 1280: no IPv6 configuration)
    sh("ip link add c0 type veth peer name c1")
    devices, devices6 = ("a0", "b0", "m0"), ("a0", "b0", "c0")
    values4 = {"forwarding": (1, 0, 1), "accept_redirects": (0, 1, 1), "send_redirects": (1, 1, 0),
               "rp_filter": (2, 0, -1), "accept_local": (1, 0, 0), "route_localnet": (0, 0, 1),
               "ignore_routes_with_linkdown": (0, 1, 0)}
    values6 = {"forwarding": (1, 0, 0), "accept_ra": (2, 0, 1), "accept_redirects": (0, 1, 1),
               "disable_ipv6": (0, 1, 0), "ignore_routes_with_linkdown": (1, 1, 0)}
    assert len(set(values4.values())) == len(values4) and len(set(values6.values())) == len(values6)
    for key, per_device in values4.items():
        sh(*(f"sysctl -qw net.ipv4.conf.{dev}.{key}={v}" for dev, v in zip(devices, per_device)))
    for key, per_device in values6.items():
        sh(*(f"sysctl -qw net.ipv6.conf.{dev}.{key}={v}" for dev, v in zip(devices6, per_device)))
    with nl.NetlinkSocket(nl.NETLINK_ROUTE) as sock:
        links, confs = dump_links_and_confs(sock)
    by_name = {link.name: confs[link.index] for link in links}

    def files(family: str, dev: str, keys) -> dict[str, int]:
        return {key: int(open(f"/proc/sys/net/{family}/conf/{dev}/{key}").read()) for key in keys}

    for dev in devices:
        assert _values(by_name[dev].ipv4, CONF4_INDEX) == files("ipv4", dev, CONF4_INDEX), dev
    for dev in devices6:
        assert _values(by_name[dev].ipv6, CONF6_INDEX) == files("ipv6", dev, CONF6_INDEX), dev
    assert by_name["m0"].ipv6 is None and not os.path.exists("/proc/sys/net/ipv6/conf/m0")
    with pytest.raises(RuntimeError, match="fewer than"):     # (a kernel that knows fewer keys: not guessed at)
        _values(by_name["a0"].ipv4[:40], CONF4_INDEX)
    # and what the snapshot makes of them
    snap = read_snapshot()
    a0, b0, m0 = (snap.interface_sysctls(snap.link_by_name(n).index) for n in ("a0", "b0", "m0"))
    assert (a0.ipv6, a0.ipv6_accept_ra, a0.ipv6_ignore_routes_with_linkdown) == (True, True, True)
    assert (b0.ipv6, b0.ipv6_accept_redirects) == (False, True)
    assert not m0.ipv6 and m0.rp_filter == max(int(open("/proc/sys/net/ipv4/conf/all/rp_filter").read()), -1)
    # read again (the poll's way: what did not change is not decoded or
    # worked out again): a device's change, and a namespace-wide one that
    # combines with every device's, are followed; the rest is as it was
    c0 = snap.interface_sysctls(snap.link_by_name("c0").index)
    assert not b0.accept_local and not m0.accept_local and not c0.ipv6_ignore_routes_with_linkdown
    sh("sysctl -qw net.ipv4.conf.a0.forwarding=0", "sysctl -qw net.ipv4.conf.all.accept_local=1",
       "sysctl -qw net.ipv6.conf.all.ignore_routes_with_linkdown=1")
    again = read_snapshot()
    a0, b0, m0, c0 = (again.interface_sysctls(again.link_by_name(n).index) for n in ("a0", "b0", "m0", "c0"))
    assert not a0.forwarding and a0.accept_local and b0.accept_local and m0.accept_local
    assert c0.ipv6_ignore_routes_with_linkdown
    assert (b0.forwarding, m0.forwarding, m0.rp_filter) == (False, True, max(
        int(open("/proc/sys/net/ipv4/conf/all/rp_filter").read()), -1))
    sh("sysctl -qw net.ipv4.conf.all.accept_local=0")
    b0 = read_snapshot().interface_sysctls(again.link_by_name("b0").index)
    assert not b0.accept_local


def test_a_read_of_some_devices_sysctls_keeps_what_the_poll_worked_out_for_the_rest(netns, monkeypatch):
    """An event reads its devices' sysctls only; the next poll, reading
    every device, works out again none that did not change."""
    from linuxfp.state import sysctl
    from linuxfp.state.read import dump_links_and_confs

    basic_topology()
    with nl.NetlinkSocket(nl.NETLINK_ROUTE) as sock:
        links, confs = dump_links_and_confs(sock)
    sysctl.read_sysctls(confs.values())                                   # the poll
    some = next(conf for link in links if link.name == "a0" for conf in (confs[link.index],))
    sysctl.read_sysctls([some], every_device=False)                       # an event's
    worked_out = []
    real = sysctl._interface_sysctls
    monkeypatch.setattr(sysctl, "_interface_sysctls", lambda *a: worked_out.append(a) or real(*a))
    again = sysctl.read_sysctls(confs.values())                           # the next poll
    assert not worked_out and len(again.interfaces) == len([c for c in confs.values() if c.ipv4])


def test_xdp_features_follow_peer_gro(netns):
    basic_topology()
    a0 = read_snapshot().link_by_name("a0")
    assert a0.xdp_features != 0  # veth supports at least BASIC
    assert not a0.can_receive_xdp_redirect
    sh("ethtool -K a1 gro on")
    a0 = read_snapshot().link_by_name("a0")
    assert a0.can_receive_xdp_redirect and a0.xdp_features & NETDEV_XDP_ACT_NDO_XMIT


def test_vxlan_options_are_read(netns):
    basic_topology()
    sh("ip link add vx0 type vxlan id 42 local 192.0.2.1 dev a0 dstport 8472 nolearning")
    sh("ip link add vx1 type vxlan external dstport 4789")
    sh("ip link add vx6 type vxlan id 7 local 2001:db8::1 dstport 4789")
    sh("ip link add vx2 type vxlan id 3 dstport 4789 rsc tos 0x10")
    snap = read_snapshot()
    vx2 = snap.link_by_name("vx2").vxlan
    assert vx2.route_short_circuit and vx2.tos == 0x10 and vx2.local == ""
    a0 = snap.link_by_name("a0")
    vx0 = snap.link_by_name("vx0").vxlan
    assert (vx0.vni, vx0.lower, vx0.port, vx0.collect_metadata, vx0.ipv6) == (42, a0.index, 8472, False, False)
    assert (vx0.local, vx0.route_short_circuit, vx0.tos) == ("192.0.2.1", False, 0)
    assert vx0.overhead == 50 and snap.link_by_name("vx6").vxlan.overhead == 70
    assert snap.link_by_name("vx1").vxlan.collect_metadata and snap.link_by_name("vx1").vxlan.lower == 0
    assert snap.link_by_name("a0").vxlan is None
    assert json.loads(json.dumps(snap.to_dict()))["links"]
    # what the outer headers are built from: the defaults, then each option set
    assert (vx0.ttl, vx0.ttl_inherit, vx0.df, vx0.udp_csum, vx0.port_range, vx0.extensions) == (
        0, False, 0, True, (0, 0), False)
    sh("ip link add vx3 type vxlan id 4 dstport 4789 ttl 9 srcport 1000 2000 noudpcsum df set gbp")
    sh("ip link add vx4 type vxlan id 5 dstport 4789 ttl inherit remcsumtx")
    snap = read_snapshot()
    vx3, vx4 = snap.link_by_name("vx3").vxlan, snap.link_by_name("vx4").vxlan
    assert (vx3.ttl, vx3.ttl_inherit, vx3.df, vx3.udp_csum, vx3.port_range, vx3.extensions) == (
        9, False, 1, False, (1000, 2000), True)
    assert (vx4.ttl_inherit, vx4.extensions) == (True, True)


def test_what_the_host_sends_with_is_read(netns):
    """A route's hop limit (kept, where a plain route is not), the default
    TTL and the local port range: what a VXLAN device's outer packets carry."""
    basic_topology()
    sh("ip route add 198.19.7.0/24 via 198.18.0.2 hoplimit 7")
    sh("sysctl -qw net.ipv4.ip_default_ttl=70 net.ipv4.ip_local_port_range='40000 50000'")
    snap = read_snapshot()
    assert {r.dst: r.hoplimit for r in snap.routes if r.hoplimit} == {"198.19.7.0/24": 7}
    assert (snap.sysctls.default_ttl, snap.sysctls.local_port_range) == (70, (40000, 50000))


def test_netfilter_nft(netns):
    assert not read_snapshot().netfilter.active
    sh("iptables -A FORWARD -j DROP")  # Debian: iptables-nft
    nf = read_snapshot().netfilter
    assert nf.active and "nft:ip filter" in nf.tables, nf


@pytest.mark.skipif(not have("iptables-legacy"), reason="iptables-legacy not installed")
def test_netfilter_legacy_and_refresh_polled(netns):
    basic_topology()
    snap = read_snapshot()
    assert refresh_polled(snap) is snap  # nothing changed: same object
    # An existing but empty legacy table (listing creates it) is harmless.
    sh("iptables-legacy -L -n")
    assert refresh_polled(snap) is snap
    sh("iptables-legacy -A FORWARD -j DROP")
    polled = refresh_polled(snap)
    assert polled.netfilter.active and "legacy:filter" in polled.netfilter.tables
    assert polled.routes is snap.routes
    sh("iptables-legacy -F FORWARD", "iptables-legacy -P FORWARD DROP")
    assert refresh_polled(snap).netfilter.active
    sh("iptables-legacy -P FORWARD ACCEPT")
    assert not refresh_polled(snap).netfilter.active
    # accept_local changes come with no netlink event: only polling sees them.
    sh("sysctl -qw net.ipv4.conf.b0.accept_local=1")
    polled = refresh_polled(snap)
    assert polled.interface_sysctls(snap.link_by_name("b0").index).accept_local


def test_ipsets_rules_match_are_read(netns):
    """Only sets `-m set` names are read, members as prefixes (a hash:ip
    netmask is each member's length); what cannot be mirrored says why
    (iptables itself refuses an IPv6 set in an IPv4 rule); a
    refresh without fresh sets keeps what was read, one with them sees a
    change."""
    sh("ipset create lfp-net hash:net", "ipset add lfp-net 198.51.100.0/24", "ipset add lfp-net 203.0.113.7",
       "ipset create lfp-mask hash:ip netmask 24", "ipset add lfp-mask 198.18.5.9",
       "ipset create lfp-expire hash:ip timeout 600", "ipset add lfp-expire 198.18.5.9",
       "ipset create lfp-except hash:net", "ipset add lfp-except 198.18.0.0/16",
       "ipset add lfp-except 198.18.1.0/24 nomatch",
       "ipset create lfp-pairs hash:ip,port", "ipset add lfp-pairs 198.18.5.9,udp:53",
       "ipset add lfp-pairs 198.18.5.9,icmp:8/0", "ipset add lfp-pairs 198.18.5.10,gre:0",
       "ipset create lfp-sctp hash:net,port", "ipset add lfp-sctp 198.18.0.0/16,sctp:5",
       "ipset create lfp-iface hash:net,iface", "ipset add lfp-iface 198.18.0.0/16,veth+",
       "ipset add lfp-iface 198.19.0.0/16,veth wildcard",
       "ipset create lfp-nested hash:net,iface", "ipset add lfp-nested 198.18.0.0/15,a",
       "ipset add lfp-nested 198.18.64.0/24,b",
       "ipset create lfp-physdev hash:net,iface", "ipset add lfp-physdev 198.18.0.0/16,physdev:eth0",
       "ipset create lfp-bitmap bitmap:ip range 198.19.0.0/16 netmask 26", "ipset add lfp-bitmap 198.19.1.9",
       "ipset create lfp-ports bitmap:port range 1-1024", "ipset add lfp-ports 53",
       "ipset create lfp-list list:set", "ipset add lfp-list lfp-net", "ipset add lfp-list lfp-bitmap",
       "ipset create lfp-mixed list:set", "ipset add lfp-mixed lfp-net", "ipset add lfp-mixed lfp-pairs",
       "ipset create lfp-unused hash:ip")
    for name in ("lfp-net", "lfp-mask", "lfp-expire", "lfp-except", "lfp-pairs", "lfp-sctp", "lfp-iface",
                 "lfp-physdev", "lfp-nested", "lfp-bitmap", "lfp-ports", "lfp-list", "lfp-mixed"):
        sh(f"iptables -A FORWARD -m set --match-set {name} src -j DROP")
    snap = read_snapshot()
    sets = {s.name: s for s in snap.netfilter.ipsets}
    assert sorted(sets) == ["lfp-bitmap", "lfp-except", "lfp-expire", "lfp-iface", "lfp-list", "lfp-mask",
                            "lfp-mixed", "lfp-nested", "lfp-net", "lfp-pairs", "lfp-physdev", "lfp-ports", "lfp-sctp"]
    # a list:set matches what its members match: a union of address sets' prefixes
    assert sets["lfp-list"].prefixes == ((0xC6130100, 26), (0xC6336400, 24), (0xCB007107, 32))
    assert sets["lfp-list"].unsupported is None and sets["lfp-list"].members == ("lfp-net", "lfp-bitmap")
    assert "member lfp-pairs is a hash:ip,port" in sets["lfp-mixed"].unsupported
    # a bitmap:ip's netmask is each member's length, as a hash:ip's; bitmap:port is not mirrored
    assert sets["lfp-bitmap"].prefixes == ((0xC6130100, 26),) and sets["lfp-bitmap"].unsupported is None
    assert "bitmap:port is not mirrored" in sets["lfp-ports"].unsupported
    # "+" is a character of the name; `wildcard` makes the name a prefix
    assert sets["lfp-iface"].ifaces == ((0xC6120000, 16, "veth+", False), (0xC6130000, 16, "veth", True))
    assert "nested members naming different interfaces" in sets["lfp-nested"].unsupported
    assert "physdev" in sets["lfp-physdev"].unsupported
    assert sets["lfp-net"].prefixes == ((0xC6336400, 24), (0xCB007107, 32)) and sets["lfp-net"].unsupported is None
    assert sets["lfp-mask"].prefixes == ((0xC6120500, 24),)
    assert "time out" in sets["lfp-expire"].unsupported
    assert "nomatch" in sets["lfp-except"].unsupported
    # (address, protocol, port); ICMP's port is type << 8 | code
    assert sets["lfp-pairs"].ports == ((0xC6120509, 32, 1, 8 << 8), (0xC6120509, 32, 17, 53), (0xC612050A, 32, 47, 0))
    assert "protocol 132" in sets["lfp-sctp"].unsupported
    sh("ipset add lfp-net 192.0.2.0/25")
    assert refresh_polled(snap, sets=False) is snap
    fresh = {s.name: s for s in refresh_polled(snap).netfilter.ipsets}
    assert (0xC0000200, 25) in fresh["lfp-net"].prefixes
    assert (0xC0000200, 25) in fresh["lfp-list"].prefixes      # through the list too


def test_snapshot_belongs_to_its_namespace(netns):
    snap = read_snapshot()
    with throwaway_netns():
        other = read_snapshot()
        assert other.netns_inode != snap.netns_inode
        with pytest.raises(RuntimeError):
            refresh_polled(snap)


def test_xdp_program_is_reported(netns, tmp_path):
    source = tmp_path / "pass.c"
    source.write_text(
        '__attribute__((section("xdp"), used)) int pass(void *ctx) { return 2; }\n'
        'char _license[] __attribute__((section("license"), used)) = "GPL";\n')
    obj = tmp_path / "pass.o"
    sh(f"clang -O2 -target bpf -c {source} -o {obj}")
    basic_topology()
    # iproute2 creates its pin directories in the bpffs it finds; give it a
    # private one so the host's /sys/fs/bpf stays clean.
    sh("unshare --mount --propagation private sh -c 'mount -t tmpfs lfp-test /sys/fs/bpf && "
       f"ip link set dev a0 xdpgeneric obj {obj} sec xdp'")
    a0 = read_snapshot().link_by_name("a0")
    assert a0.xdp_prog_id > 0 and a0.xdp_mode == 2  # XDP_ATTACHED_SKB
    sh("ip link set dev a0 xdpgeneric off")
    assert read_snapshot().link_by_name("a0").xdp_prog_id == 0


def test_refresh_polled_sees_bpf_link_xdp_attach(netns, tmp_path):
    """bpf_link XDP attachment sends no RTM_NEWLINK; polling must catch it."""
    from linuxfp.datapath.links import attach_xdp
    from linuxfp.datapath.objects import BpfObject

    source = tmp_path / "pass.c"
    source.write_text(
        '__attribute__((section("xdp"), used)) int pass(void *ctx) { return 2; }\n'
        'char _license[] __attribute__((section("license"), used)) = "GPL";\n')
    obj_path = tmp_path / "pass.o"
    sh(f"clang -O2 -target bpf -c {source} -o {obj_path}")
    basic_topology()
    snap = read_snapshot()
    a0 = snap.link_by_name("a0").index
    obj = BpfObject.open(obj_path.read_bytes())
    obj.load()
    try:
        link = attach_xdp(obj.program(obj.program_names()[0]), a0, "generic")
        try:
            polled = refresh_polled(snap)
            assert polled.link(a0).xdp_prog_id > 0
            assert polled.routes is snap.routes
        finally:
            link.detach()
    finally:
        obj.close()
    assert refresh_polled(polled).link(a0).xdp_prog_id == 0


def test_a_netfilter_refresh_sees_br_netfilter_come_or_go(netns, monkeypatch):
    """A physdev match loads br_netfilter (on Debian a module; here built
    in), which no event announces: the re-read after an nf_tables commit
    reads the sysctls too when the module came (here: a snapshot read while
    it looked absent) or went."""
    from linuxfp.state import read as state_read
    from linuxfp.state import sysctl as state_sysctl

    with monkeypatch.context() as absent:
        absent.setattr(state_sysctl, "br_netfilter_loaded", lambda: False)
        before = read_snapshot()
        assert not before.sysctls.br_netfilter
        assert state_read.refresh_netfilter(before) is before
    came = state_read.refresh_netfilter(before)
    assert came.sysctls.br_netfilter and came.netfilter is before.netfilter
    assert state_read.refresh_netfilter(came) is came
    monkeypatch.setattr(state_sysctl, "br_netfilter_loaded", lambda: False)
    assert not state_read.refresh_netfilter(came).sysctls.br_netfilter
