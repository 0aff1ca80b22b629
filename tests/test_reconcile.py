"""Reconcile planning: desired graph vs installed state → smallest change."""
from dataclasses import replace

from controller.reconcile import InstalledPipeline, InstalledState, plan
from linuxfp.graph import build_graph
from linuxfp.state.model import Neighbour, Sysctls
from linuxfp.graph import Shape
from linuxfp.graph.tables import u32

from snapshot_fixtures import addr, router_snapshot, sysctl

XDP = Shape("xdp", ("router", "transmit"))
TC = Shape("tc", ("router", "transmit"))
DIGESTS = {XDP: "d-xdp", TC: "d-tc"}


def installed_from(graph, digest="d-xdp", hook="xdp"):
    return InstalledState(
        pipelines=tuple(InstalledPipeline(p.ifindex, p.ifname, hook, f"{hook}:router+transmit", digest,
                                          "native", 10, 20)
                        for p in graph.pipelines),
        tables={t.name: t.entries for t in graph.tables})


def test_fresh_install_attaches_everything_and_fills_maps():
    g = build_graph(router_snapshot())
    p = plan(g, DIGESTS, InstalledState())
    assert [x.ifname for x in p.attach] == ["left", "right"]
    assert set(p.writes("lfp_ifaces").set) == g.table("lfp_ifaces").entries
    assert set(p.writes("lfp_local_src").set) == g.table("lfp_local_src").entries
    assert not p.replace and not p.detach


def test_nothing_to_do_when_equal():
    g = build_graph(router_snapshot())
    assert plan(g, DIGESTS, installed_from(g)).empty


def test_sysctl_change_is_a_map_update_only():
    g = build_graph(router_snapshot())
    changed = build_graph(router_snapshot(sysctls=Sysctls(True, (sysctl(1), sysctl(2, forwarding=False), sysctl(3)))))
    p = plan(changed, DIGESTS, installed_from(g))
    assert not p.touches_programs
    assert [k for k, _ in p.writes("lfp_ifaces").set] == [u32(2)]
    assert [w.table.name for w in p.tables] == ["lfp_ifaces", "lfp_tx_ports"]


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
    assert [x.ifname for x in p.detach] == ["right"] and p.writes("lfp_ifaces").erase == (u32(3),)


def test_failed_install_not_retried_until_program_changes():
    g = build_graph(router_snapshot())
    failed = InstalledState(pipelines=tuple(
        InstalledPipeline(p.ifindex, p.ifname, "xdp", "xdp:router+transmit", "d-xdp", error="verifier said no")
        for p in g.pipelines), tables={t.name: t.entries for t in g.tables})
    assert plan(g, DIGESTS, failed).empty
    assert len(plan(g, {XDP: "fixed", TC: "d-tc"}, failed).attach) == 2


def test_installed_state_round_trips_json():
    g = build_graph(router_snapshot())
    s = installed_from(g)
    assert InstalledState.from_json(s.to_json()).pipelines == s.pipelines


def test_installed_state_json_is_the_whole_state_after_a_change():
    """Each pipeline's text is made once: the file must still say what the
    state says after one pipeline changed (an error, a new program)."""
    import dataclasses
    import json
    s = installed_from(build_graph(router_snapshot()))
    s.to_json()
    changed = s.with_pipeline(dataclasses.replace(s.pipelines[0], prog_id=77, error="verifier said no"))
    assert json.loads(changed.to_json()) == {"pipelines": [dataclasses.asdict(p) for p in changed.pipelines]}
    assert InstalledState.from_json(changed.to_json()).pipelines == changed.pipelines != s.pipelines


def test_pipelines_long_replaced_leave_no_json_text_behind():
    import dataclasses
    from controller import reconcile
    s = installed_from(build_graph(router_snapshot()))
    for prog_id in range(200):
        dataclasses.replace(s, pipelines=tuple(dataclasses.replace(p, prog_id=prog_id) for p in s.pipelines)).to_json()
    assert len(reconcile._pipeline_json) <= 2 * len(s.pipelines) + 64 + len(s.pipelines)


def test_unchanged_tables_are_reused_and_not_compared():
    snap = router_snapshot()
    g = build_graph(snap)
    again = build_graph(replace(snap, neighbours=()))
    assert again.table("lfp_local_src") is g.table("lfp_local_src")
    p = plan(again, DIGESTS, installed_from(g))
    assert {w.table.name for w in p.tables} <= {"lfp_neigh", "lfp_neigh_hint"}


def test_summary_is_widened_before_and_narrowed_after():
    snap = router_snapshot()
    g = build_graph(snap)
    installed = installed_from(g)
    # 198.18.2.254 leaves (address and local route), 203.0.113.9 arrives
    moved = replace(snap, addresses=snap.addresses[:2] + (addr(3, "203.0.113.9"),),
                    routes=tuple(r for r in snap.routes if r.dst != "198.18.2.254/32"))
    write = plan(build_graph(moved), DIGESTS, installed).writes("lfp_local_hint")
    (key, old), = g.table("lfp_local_hint").entries
    (_, new), = write.set
    (_, wide), = write.widen
    assert wide == bytes(a | b for a, b in zip(old, new)) and new != old


def test_announced_keys_are_rewritten_even_when_unchanged():
    stale = Neighbour(3, 2, "198.18.2.1", "02:00:00:00:00:01", 0x04)
    g = build_graph(router_snapshot(neighbours=(stale,)))
    (key, value), = g.table("lfp_neigh").entries
    assert value == b"\x02"      # STALE: the datapath advances it to PROBING itself
    assert plan(g, DIGESTS, installed_from(g)).empty
    p = plan(g, DIGESTS, installed_from(g), {"lfp_neigh": frozenset({key})})
    assert [k for k, _ in p.writes("lfp_neigh").set] == [key]


def test_the_controller_builds_untidy_and_tidies_once_idle_or_every_so_many_builds(monkeypatch):
    """The controller's graphs are built without forget_stale (the response
    time); _tidy runs it for the last snapshot when the loop idles, and a
    burst that never idles runs it every UNTIDY_BUILDS_MAX builds."""
    import os

    from controller import daemon
    from controller.namespace import NamespaceLayout
    from linuxfp.datapath import bpffs_root
    from linuxfp.graph import Graph

    builds, tidied = [], []
    monkeypatch.setattr(daemon, "build_graph", lambda snapshot, hook, tidy=True: builds.append(tidy) or Graph())
    monkeypatch.setattr(daemon, "forget_stale", tidied.append)
    controller = daemon.Controller(daemon.RunOptions(), NamespaceLayout(bpffs_root(), -os.getpid()))
    controller._reconcile = lambda snapshot, graph, again: False
    snapshots = [object() for _ in range(daemon.UNTIDY_BUILDS_MAX)]
    for snapshot in snapshots[:-1]:
        controller.reconcile(snapshot)
    assert builds == [False] * (daemon.UNTIDY_BUILDS_MAX - 1) and tidied == []
    controller.reconcile(snapshots[-1])          # a burst's UNTIDY_BUILDS_MAX-th build
    assert tidied == [snapshots[-1]]
    controller._tidy()                            # nothing built since
    assert len(tidied) == 1
    controller.reconcile(snapshots[0])
    controller.reconcile(snapshots[0])            # the same snapshot: no build
    controller._tidy()                            # (idle)
    assert tidied == [snapshots[-1], snapshots[0]] and len(builds) == daemon.UNTIDY_BUILDS_MAX + 1
