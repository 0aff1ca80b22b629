"""The router line builds as documented and forwards through the DUT's kernel."""

from __future__ import annotations

import json
from ipaddress import IPv4Interface, IPv4Network

from linuxfp.lab.netns import Lab
from linuxfp.lab.probe import ping
from linuxfp.lab.topology import LinkSpec, Router, RouterTopology, TopologySpec, build


def test_router_topology_attributes(router_topology: Router) -> None:
    r = router_topology
    assert {role for role, _ in r.hosts} == {"src", "dut", "sink"}
    assert all(ns.exists() for _, ns in r.hosts)
    assert r.src_if.addresses == (IPv4Interface("198.18.1.1/24"),)
    assert r.dut_left.addresses == (IPv4Interface("198.18.1.254/24"),)
    assert r.dut_right.addresses == (IPv4Interface("198.18.2.254/24"),)
    assert IPv4Interface("198.18.2.1/24") in r.sink_if.addresses
    # Deterministic MACs: two builds must emit byte-identical frames.
    assert (r.src_if.mac, r.dut_left.mac, r.dut_right.mac, r.sink_if.mac) == (
        "02:00:00:00:01:01", "02:00:00:00:01:02", "02:00:00:00:02:01", "02:00:00:00:02:02",
    )
    assert r.dut_left.ifindex != r.dut_right.ifindex
    assert [i.label for i in r.capture_points] == ["src:to-dut", "sink:to-dut"]
    assert r.inject_point == r.src_if
    assert len(r.prefixes) == 50 and r.prefixes[3] == IPv4Network("198.19.3.0/24")


def test_dut_is_configured_as_an_operator_would(router_topology: Router) -> None:
    dut = router_topology.dut
    assert dut.read_sysctl("net.ipv4.ip_forward") == "1"
    routes = json.loads(dut.run("ip -j route show").stdout)
    via = {r["dst"]: r.get("gateway") for r in routes}
    assert all(via[str(p)] == "198.18.2.1" for p in router_topology.prefixes)
    assert via["198.18.200.0/24"] == "198.18.2.3"
    assert via["198.18.64.0/18"] == "198.18.1.1"


def test_ping_crosses_the_dut_and_the_kernel_counts_it(router_topology: Router, ip_forw_datagrams) -> None:
    before = ip_forw_datagrams(router_topology.dut)
    assert ping(router_topology.src, "198.18.2.1", count=3) == 3
    assert ping(router_topology.sink, "198.18.1.1", count=1) == 1
    # Request and reply of each echo are forwarded.
    assert ip_forw_datagrams(router_topology.dut) - before == 8


def test_neighbours_are_warm_by_default(router_topology: Router) -> None:
    neighbours = json.loads(router_topology.dut.run("ip -j neigh show").stdout)
    known = {n["dst"]: n["lladdr"] for n in neighbours if "lladdr" in n}
    assert known == {"198.18.1.1": router_topology.src_if.mac, "198.18.2.1": router_topology.sink_if.mac}


def test_neighbours_can_be_left_unresolved(lab: Lab) -> None:
    router = RouterTopology(prefixes=2, resolve_neighbours=False)(lab)
    for _, ns in router.hosts:
        assert json.loads(ns.run("ip -j neigh show").stdout) == []


def test_redirect_targets_have_gro_and_lab_sysctls(router_topology: Router) -> None:
    for interface in router_topology.capture_points:
        ns = router_topology.ns(interface.host)
        features = ns.run(f"ethtool -k {interface.name}").stdout
        assert "generic-receive-offload: on" in features
    dut = router_topology.dut
    assert dut.read_sysctl("net.ipv4.icmp_ratemask") == "0"
    assert dut.read_sysctl("net/ipv6/conf/to-sink/disable_ipv6") == "1"
    assert int(dut.read_sysctl("net/ipv4/neigh/to-sink/base_reachable_time_ms")) >= 3_600_000


def test_generic_builder_two_hosts(lab: Lab) -> None:
    spec = TopologySpec(
        hosts=("left", "right"),
        links=(LinkSpec("left", "eth0", "right", "eth0", mtu=1400),),
        dut="right",
        inject=("left", "eth0"),
        addresses=(("left", "eth0", "192.0.2.1/24"), ("right", "eth0", "192.0.2.2/24")),
        warmup=(("left", "192.0.2.2"),),
    )
    topology = build(lab, spec)
    assert topology.iface("right", "eth0").mtu == 1400
    assert topology.dut_ipv4_addresses() == {IPv4Interface("192.0.2.2/24").ip}
    assert [i.label for i in topology.capture_points] == ["left:eth0"]
