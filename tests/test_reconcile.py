"""Reconcile planning: desired graph vs installed state → smallest change."""
from dataclasses import replace

from controller.reconcile import InstalledPipeline, InstalledState, plan
from linuxfp.graph import build_graph
from linuxfp.state.model import Sysctls
from linuxfp.synth import Shape

from snapshot_fixtures import router_snapshot, sysctl

XDP = Shape("xdp", ("router",))
TC = Shape("tc", ("router",))
DIGESTS = {XDP: "d-xdp", TC: "d-tc"}


def installed_from(graph, digest="d-xdp", hook="xdp"):
    return InstalledState(
        pipelines=tuple(InstalledPipeline(p.ifindex, p.ifname, hook, f"{hook}:router", digest, "native", 10, 20)
                        for p in graph.pipelines),
        ifaces=graph.ifaces, local_addrs=graph.local_addrs)


def test_fresh_install_attaches_everything_and_fills_maps():
    g = build_graph(router_snapshot())
    p = plan(g, DIGESTS, InstalledState())
    assert [x.ifname for x in p.attach] == ["left", "right"]
    assert p.iface_set == g.ifaces and p.local_add == g.local_addrs
    assert not p.replace and not p.detach


def test_nothing_to_do_when_equal():
    g = build_graph(router_snapshot())
    assert plan(g, DIGESTS, installed_from(g)).empty


def test_sysctl_change_is_a_map_update_only():
    g = build_graph(router_snapshot())
    changed = build_graph(router_snapshot(sysctls=Sysctls(True, (sysctl(1), sysctl(2, forwarding=False), sysctl(3)))))
    p = plan(changed, DIGESTS, installed_from(g))
    assert not p.touches_programs
    assert [f.ifindex for f in p.iface_set] == [2]


def test_new_program_replaces_atomically_and_hook_change_rehooks():
    g = build_graph(router_snapshot())
    assert [x.ifname for x in plan(g, {XDP: "new", TC: "d-tc"}, installed_from(g)).replace] == ["left", "right"]
    tc = build_graph(router_snapshot(), "tc")
    assert [x.ifname for x in plan(tc, DIGESTS, installed_from(g)).rehook] == ["left", "right"]


def test_removed_interface_is_detached_and_forgotten():
    g = build_graph(router_snapshot())
    snap = router_snapshot()
    smaller = build_graph(replace(snap, links=snap.links[:2]))
    p = plan(smaller, DIGESTS, installed_from(g))
    assert [x.ifname for x in p.detach] == ["right"] and p.iface_delete == (3,)


def test_failed_install_not_retried_until_program_changes():
    g = build_graph(router_snapshot())
    failed = InstalledState(pipelines=tuple(
        InstalledPipeline(p.ifindex, p.ifname, "xdp", "xdp:router", "d-xdp", error="verifier said no")
        for p in g.pipelines), ifaces=g.ifaces, local_addrs=g.local_addrs)
    assert plan(g, DIGESTS, failed).empty
    assert len(plan(g, {XDP: "fixed", TC: "d-tc"}, failed).attach) == 2


def test_installed_state_round_trips_json():
    g = build_graph(router_snapshot())
    s = installed_from(g)
    assert InstalledState.from_json(s.to_json()).pipelines == s.pipelines
