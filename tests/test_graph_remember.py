"""What the graph remembers between snapshots (linuxfp/graph/remember.py):
reused while every field it read is the same object, recomputed as soon as
one is not, with what a computation reads recorded rather than declared."""
from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

import threading

from linuxfp.graph import build, build_graph
from linuxfp.graph.nodes import registered
from linuxfp.graph.remember import fields_read, forget, forget_stale, link_at, remembered, remembered_each
from linuxfp.state.model import AF_INET, Neighbour, XfrmState

from snapshot_fixtures import bridged_router_snapshot, link, route, router_snapshot, sysctl, with_pods


def _counting(compute):
    calls = []

    def counted(snapshot, *args):
        calls.append(args)
        return compute(snapshot, *args)
    return counted, calls


def test_reused_while_what_it_read_is_the_same_object_and_only_that():
    s1 = router_snapshot()
    compute, calls = _counting(lambda s: len(s.routes))
    assert remembered("t.routes", s1, compute) == len(s1.routes)
    assert remembered("t.routes", s1, compute) == len(s1.routes)
    assert len(calls) == 1
    assert fields_read("t.routes") == {"routes"}
    # a field it did not read changed: reused
    s2 = dataclasses.replace(s1, neighbours=(_neighbour(),))
    remembered("t.routes", s2, compute)
    assert len(calls) == 1
    # an equal tuple, but another object: the state layer would have handed
    # the old one on, so this is a change
    s3 = dataclasses.replace(s1, routes=tuple(list(s1.routes)))
    remembered("t.routes", s3, compute)
    assert len(calls) == 2


def test_methods_and_properties_record_the_fields_they_read():
    s1 = router_snapshot()
    remembered("t.link", s1, lambda s, index: s.link(index).name, 2)
    assert fields_read("t.link", 2) == {"links"}
    remembered("t.sysctl", s1, lambda s: s.sysctl.ip_forward)
    assert fields_read("t.sysctl") == {"sysctls"}


def test_an_inner_answer_reused_still_counts_as_a_read_of_the_outer():
    """The outer computation asks an inner one that was remembered before:
    the inner's fields must become the outer's, or a change the inner reads
    would leave the outer stale."""
    s1 = router_snapshot()
    inner = lambda s: tuple(r.dst for r in s.routes)          # noqa: E731
    outer, calls = _counting(lambda s: remembered("t.inner", s, inner) + (len(s.links),))
    remembered("t.inner", s1, inner)                            # remembered first, on its own
    first = remembered("t.outer", s1, outer)
    assert fields_read("t.outer") == {"routes", "links"}
    s2 = dataclasses.replace(s1, routes=s1.routes + (route("198.19.9.0/24", gateway="198.18.2.1", oif=3),))
    second = remembered("t.outer", s2, outer)
    assert len(calls) == 2 and second != first and "198.19.9.0/24" in second


def test_arguments_are_part_of_the_key_and_a_stale_one_drops_its_name():
    s1 = router_snapshot()
    compute, calls = _counting(lambda s, index: s.link(index).name)
    assert [remembered("t.name", s1, compute, i) for i in (2, 3, 2, 3)] == ["left", "right", "left", "right"]
    assert len(calls) == 2
    s2 = dataclasses.replace(s1, links=s1.links[:2])
    remembered("t.name", s2, compute, 2)
    assert fields_read("t.name", 3) is None        # asked about a snapshot before: forgotten


def test_the_view_cannot_be_written():
    with pytest.raises(AttributeError):
        remembered("t.write", router_snapshot(), lambda s: setattr(s, "links", ()))


def test_a_neighbour_event_recomputes_transmit_neighbour_tables_and_nothing_else():
    s1 = router_snapshot()
    g1 = build_graph(s1, "xdp")
    s2 = dataclasses.replace(s1, neighbours=(_neighbour(),))
    g2 = build_graph(s2, "xdp")
    assert g2.pipelines is g1.pipelines and g2.skipped is g1.skipped and g2.ifaces is g1.ifaces
    before, after = _tables(g1), _tables(g2)
    changed = {name for name in after if after[name] is not before[name]}
    assert changed == {"lfp_neigh", "lfp_neigh6", "lfp_neigh_hint"}
    assert after["lfp_neigh"].entries != before["lfp_neigh"].entries


def test_an_address_recomputes_the_local_sources_and_reuses_the_pipelines_that_read_neither():
    s1 = router_snapshot()
    g1 = build_graph(s1, "xdp")
    extra = route("198.18.9.9/32", table=255, type_="local", oif=2, protocol=2)
    s2 = dataclasses.replace(s1, routes=s1.routes + (extra,))
    g2 = build_graph(s2, "xdp")
    assert b"".join(sorted(k for k, _ in _tables(g2)["lfp_local_src"].entries)).find(bytes([198, 18, 9, 9])) >= 0
    assert _tables(g2)["lfp_local_src"] is not _tables(g1)["lfp_local_src"]
    # the pipelines read neither the routes nor the addresses here: reused,
    # and what a build from nothing says
    assert not fields_read("graph.pipelines", "xdp", registered()) & {"routes", "addresses"}
    assert g2.pipelines is g1.pipelines
    # the interface facts read every route only through answers this route
    # leaves as they were (the full source check, the route MTU cap): reused
    assert g2.ifaces is g1.ifaces
    forget()
    fresh = build_graph(s2, "xdp")
    assert fresh.pipelines == g2.pipelines and fresh.ifaces == g2.ifaces


def test_a_field_read_through_a_method_changing_is_a_change():
    s1 = router_snapshot()
    compute, calls = _counting(lambda s, index: s.link(index).name)
    assert remembered("t.name", s1, compute, 2) == "left"
    renamed = dataclasses.replace(s1, links=tuple(dataclasses.replace(link, name="west") if link.index == 2 else link
                                                  for link in s1.links))
    assert remembered("t.name", renamed, compute, 2) == "west"
    assert len(calls) == 2


def test_an_inner_answer_computed_inside_counts_as_a_read_of_the_outer():
    s1 = router_snapshot()
    remembered("t.outer", s1, lambda s: remembered("t.inner", s, lambda s2: len(s2.routes)) + len(s.links))
    assert fields_read("t.outer") == {"routes", "links"}
    assert fields_read("t.inner") == {"routes"}


def test_nothing_remembered_keeps_an_old_snapshot_alive():
    """Only the fields read are kept, not the snapshot (nor the view, whose
    bound methods would hold it in a cycle the collector frees late)."""
    s1 = router_snapshot()
    gone = weakref.ref(s1)
    gc.disable()
    try:
        remembered("t.name", s1, lambda s, index: s.link(index).name + str(s.sysctl.ip_forward), 2)
        build_graph(s1, "xdp")
        del s1
        assert gone() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("tidy", [True, False], ids=["tidy", "untidy"])     # (the controller's builds: untidy)
@pytest.mark.parametrize("change", ["IPsec policy", "right down", "left's forwarding off", "a route MTU",
                                    "an IPv6 route MTU", "a source-refusing route"])
def test_a_change_that_takes_traffic_back_to_the_kernel_is_never_met_by_a_remembered_answer(change, tidy):
    """The direction that matters: a graph built before must not be served
    for a configuration under which Linux would not forward the same way."""
    s1 = router_snapshot()
    g1 = build_graph(s1, "xdp", tidy=tidy)
    if change == "IPsec policy":
        s2 = dataclasses.replace(s1, xfrm=XfrmState(policies_fwd=1))
    elif change == "a route MTU":      # (longer packets to the kernel: the facts' length cap)
        s2 = dataclasses.replace(s1, routes=s1.routes + (dataclasses.replace(route("192.0.2.0/24", oif=3), mtu=1400),))
    elif change == "a source-refusing route":     # (sources checked in full: the facts say so)
        s2 = dataclasses.replace(s1, routes=s1.routes + (route("192.0.2.0/24", type_="local", oif=3),))
    elif change == "an IPv6 route MTU":     # (the facts' IPv6 length cap)
        s2 = dataclasses.replace(s1, route_mtus6=(((10, 254, "2001:db8::/64", 0, 0, None), 1400),))
    elif change == "right down":
        s2 = dataclasses.replace(s1, links=tuple(dataclasses.replace(link, up=False, oper_up=False)
                                                 if link.name == "right" else link for link in s1.links))
    else:
        s2 = dataclasses.replace(s1, sysctls=dataclasses.replace(s1.sysctls, interfaces=tuple(
            dataclasses.replace(conf, forwarding=False) if conf.ifindex == 2 else conf
            for conf in s1.sysctls.interfaces)))
    g2 = build_graph(s2, "xdp", tidy=tidy)
    # and back to the first snapshot's own fields: its answers again
    g3 = build_graph(s1, "xdp", tidy=tidy)
    assert (g3.pipelines, g3.skipped, g3.ifaces) == (g1.pipelines, g1.skipped, g1.ifaces)
    g4 = build_graph(s2, "xdp", tidy=tidy)
    fresh = (forget(), build_graph(s2, "xdp"))[1]
    for g in (g2, g4):
        assert (g.pipelines, g.skipped, g.ifaces) == (fresh.pipelines, fresh.skipped, fresh.ifaces)
    assert (g2.pipelines, g2.skipped, g2.ifaces) != (g1.pipelines, g1.skipped, g1.ifaces)


def test_an_answer_asked_by_answer_is_depended_on_by_value_not_by_what_it_read():
    s1 = router_snapshot()
    # (a new tuple each time: an equal answer must be handed on as the old one)
    inner = lambda s: (len(s.routes) > 0,)                            # noqa: E731
    outer, calls = _counting(lambda s: (remembered("t.any_routes", s, inner, by_answer=True), len(s.links)))
    first = remembered("t.outer", s1, outer)
    assert fields_read("t.outer") == {"routes", "links"}          # (the inner's, too: what it may depend on)
    # the routes changed, the inner's answer did not: the outer is reused
    s2 = dataclasses.replace(s1, routes=s1.routes + (route("198.19.9.0/24", gateway="198.18.2.1", oif=3),))
    assert remembered("t.outer", s2, outer) is first and len(calls) == 1
    assert remembered("t.any_routes", s2, inner, by_answer=True) is first[0]
    # the answer changed: worked out again
    s3 = dataclasses.replace(s1, routes=())
    assert remembered("t.outer", s3, outer) == ((False,), 3) and len(calls) == 2


def test_a_link_looked_up_by_answer_is_the_only_link_depended_on():
    s1 = router_snapshot()
    compute, calls = _counting(lambda s, index: link_at(s, index).mtu)
    assert remembered("t.mtu", s1, compute, 2) == 1500
    more = dataclasses.replace(s1, links=s1.links + (link(9, "other"),))
    assert remembered("t.mtu", more, compute, 2) == 1500 and len(calls) == 1
    changed = dataclasses.replace(more, links=tuple(dataclasses.replace(l, mtu=9000) if l.index == 2 else l
                                                    for l in more.links))
    assert remembered("t.mtu", changed, compute, 2) == 9000 and len(calls) == 2


def test_each_item_is_remembered_on_its_own_and_items_gone_are_forgotten():
    s1 = router_snapshot()
    compute, calls = _counting(lambda s, l: (l.name, s.sysctl.ip_forward))
    by_index = lambda l: l.index                                      # noqa: E731
    first = remembered_each("t.each", s1, compute, s1.links, key=by_index)
    assert [name for name, _ in first] == ["lo", "left", "right"] and len(calls) == 3
    # a new item: only its answer is worked out
    s2 = dataclasses.replace(s1, links=s1.links + (link(9, "other"),))
    assert [name for name, _ in remembered_each("t.each", s2, compute, s2.links, key=by_index)][-1] == "other"
    assert len(calls) == 4
    # one item changed: only its own again
    renamed = tuple(dataclasses.replace(l, name="west") if l.index == 2 else l for l in s2.links)
    s3 = dataclasses.replace(s2, links=renamed)
    assert [name for name, _ in remembered_each("t.each", s3, compute, s3.links, key=by_index)][1] == "west"
    assert len(calls) == 5 and [args[0].name for args in calls[3:]] == ["other", "west"]
    # a field every answer read changed: every answer again
    s4 = dataclasses.replace(s3, sysctls=dataclasses.replace(s3.sysctls, ip_forward=False))
    assert {f for _, f in remembered_each("t.each", s4, compute, s4.links, key=by_index)} == {False}
    assert len(calls) == 9
    # an item gone: its answer too (not kept for a device that may never return)
    gone = [k for k in _keys("t.each") if k[0].key == 3]
    assert len(gone) == 1 and fields_read("t.each", *gone[0]) == {"sysctls"}
    remembered_each("t.each", s4, compute, s4.links[:2], key=by_index)
    assert fields_read("t.each", *gone[0]) is None
    assert sorted(k[0].key for k in _keys("t.each")) == [1, 2]


def test_what_asks_every_item_depends_on_the_fields_under_each_item_answer():
    """The asker depends on what every item's answer depends on (fields,
    and answers asked by answer), checked once for all items: an inner
    answer that starts reading a new field (a branch) still makes the asker
    see its change."""
    s1 = router_snapshot()
    # the inner reads the routes only while forwarding is on
    inner = lambda s: bool(s.routes) if s.sysctl.ip_forward else None          # noqa: E731
    per_item = lambda s, l: (l.index, remembered("t.branch", s, inner, by_answer=True))  # noqa: E731
    outer, calls = _counting(lambda s: tuple(remembered_each("t.items", s, per_item, s.links,
                                                             key=lambda l: l.index)))
    off = dataclasses.replace(s1, sysctls=dataclasses.replace(s1.sysctls, ip_forward=False))
    assert remembered("t.outer", off, outer)[0] == (1, None)
    assert remembered("t.outer", s1, outer)[0] == (1, True)       # (the inner read the routes now)
    assert len(calls) == 2
    no_routes = dataclasses.replace(s1, routes=())
    assert remembered("t.outer", no_routes, outer)[0] == (1, False) and len(calls) == 3
    assert {"links", "sysctls", "routes"} <= fields_read("t.outer")


def test_a_new_interface_recomputes_its_own_decision_and_facts_only():
    s1 = bridged_router_snapshot()
    g1 = build_graph(s1, "xdp")
    originals = build._pipeline, build._iface_facts
    decide, calls = _counting(build._pipeline)
    facts, fact_calls = _counting(build._iface_facts)
    build._pipeline, build._iface_facts = decide, facts
    try:
        s2 = dataclasses.replace(s1, links=s1.links + (link(9, "pod"),),
                                 sysctls=dataclasses.replace(s1.sysctls, interfaces=s1.sysctls.interfaces + (
                                     sysctl(9),)))
        g2 = build_graph(s2, "xdp")
    finally:
        build._pipeline, build._iface_facts = originals
    assert [args[0].name for args in calls] == ["pod"]
    assert [args[0][0].name for args in fact_calls] == ["pod"]
    assert {p.ifname for p in g2.pipelines} - {p.ifname for p in g1.pipelines} == {"pod"}
    kept = {p.ifindex: p for p in g1.pipelines}
    assert all(p is kept[p.ifindex] for p in g2.pipelines if p.ifindex in kept)
    forget()
    fresh = build_graph(s2, "xdp")
    assert (g2.pipelines, g2.skipped, g2.ifaces, g2.tables) == (fresh.pipelines, fresh.skipped, fresh.ifaces,
                                                                fresh.tables)


def test_a_rule_change_that_leaves_the_filters_presence_redoes_no_interface_decision():
    """`iptables -A` under a ruleset: the rules' contents change (the
    filter's tables and plan follow), but what interfaces read of the plan —
    whether FORWARD filters, tracks, can be evaluated, reads the mark — does
    not, so no interface's pipeline is decided again; a change of that
    (conntrack matched for the first time) is."""
    from linuxfp.graph.nodes.iptables_filter import filter_plan
    from linuxfp.state.iptables import parse_save
    from linuxfp.state.model import NetfilterState

    def with_rules(snapshot, *rules: str):
        text = ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                + "".join(f"-A FORWARD {r}\n" for r in rules) + "COMMIT\n")
        return dataclasses.replace(snapshot, netfilter=NetfilterState(
            active=True, tables=("nft:ip filter",), detail="test", rulesets=(parse_save(text, "nft"),)))

    base = router_snapshot()
    s1 = with_rules(base, "-d 198.19.0.0/24 -p udp -j DROP")
    g1 = build_graph(s1, "xdp")
    assert any("filter" in p.shape.nodes for p in g1.pipelines), g1.pipelines
    original = build._pipeline
    decide, calls = _counting(original)
    build._pipeline = decide
    try:
        s2 = with_rules(base, "-d 198.19.0.0/24 -p udp -j DROP", "-d 198.19.1.9/32 -j DROP")
        g2 = build_graph(s2, "xdp")
        assert calls == []
        assert filter_plan(s2) != filter_plan(s1)
        assert all(a is b for a, b in zip(g2.pipelines, g1.pipelines)) and len(g2.pipelines) == len(g1.pipelines)
        assert g2.tables != g1.tables           # (the rules themselves do reach the datapath)
        s3 = with_rules(base, "-m conntrack --ctstate ESTABLISHED -j ACCEPT", "-d 198.19.0.0/24 -p udp -j DROP")
        g3 = build_graph(s3, "xdp")
        assert len(calls) == len(g3.pipelines) + len(g3.skipped)
        assert any("conntrack" in p.shape.nodes for p in g3.pipelines), g3.pipelines
        # a rule reading the mark: at XDP, no interface keeps the filter
        s4 = with_rules(base, "-m mark --mark 1 -j DROP", "-d 198.19.0.0/24 -p udp -j DROP")
        g4 = build_graph(s4, "xdp")
        assert not any("filter" in p.shape.nodes for p in g4.pipelines), g4.pipelines
        assert any("mark" in s.reason for s in g4.skipped), g4.skipped
        # no rule left in FORWARD: no filter at all
        g5 = build_graph(with_rules(base), "xdp")
        assert g5.pipelines and not any("filter" in p.shape.nodes for p in g5.pipelines), g5.pipelines
    finally:
        build._pipeline = original
    forget()
    fresh = build_graph(s2, "xdp")       # (the tables hold a fresh classifier generation: not compared)
    assert (g2.pipelines, g2.skipped) == (fresh.pipelines, fresh.skipped)


def test_another_threads_snapshot_does_not_answer_for_this_one():
    """Answers are checked once per snapshot and thread: a metrics scrape
    asking about another snapshot meanwhile gets its own."""
    s1 = router_snapshot()
    s2 = dataclasses.replace(s1, routes=())
    count = lambda s: len(s.routes)                                   # noqa: E731
    assert remembered("t.count", s1, count, by_answer=True) == len(s1.routes)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(remembered("t.count", s2, count, by_answer=True)))
    worker.start()
    worker.join()
    assert seen == [0]
    assert remembered("t.count", s1, count, by_answer=True) == len(s1.routes)


def test_two_threads_asking_about_two_snapshots_get_their_own_answers():
    """A metrics scrape asks the filter's plan by answer about the snapshot
    it has while the controller builds from a newer one: neither may fail
    nor get the other's answer."""
    import sys
    snapshots = [router_snapshot(), dataclasses.replace(router_snapshot(), routes=())]
    count = lambda s: (len(s.routes),)                                # noqa: E731
    failures = []

    def ask(first):
        try:
            for i in range(5000):
                snapshot = snapshots[(first + i) % 2]      # (a new snapshot: no answer checked for it yet)
                assert remembered("t.race", snapshot, count, by_answer=True) == (len(snapshot.routes),)
                if i % 500 == 0:
                    forget_stale(snapshot)
        except Exception as e:          # noqa: BLE001 (reported below)
            failures.append(repr(e))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=ask, args=(first,)) for first in (0, 1)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []


def test_what_is_compared_for_reuse_compares_every_field():
    """An answer stands for another when equal, an item's answer for an
    equal item: a field left out of equality would let it stand for one
    that differs there."""
    import typing

    from linuxfp.graph.nodes.iptables_filter import FilterPlan
    from linuxfp.graph.obstacles import Obstacle
    from linuxfp.state.model import InterfaceSysctls, Link
    for cls in (Link, InterfaceSysctls, Obstacle, FilterPlan):
        assert all(f.compare for f in dataclasses.fields(cls)), cls
    # and every dataclass within them, but for two fields that say nothing
    # of their own: the Classifier's memo (what patching ipset members
    # learns) and a Family's ICMP type names (a constant per family, whose
    # name is compared)
    aside = {("Classifier", "memo"), ("Family", "icmp_types")}
    seen: set[type] = set()
    todo = [Link, InterfaceSysctls, Obstacle, FilterPlan]
    while todo:
        cls = todo.pop()
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            assert f.compare or (cls.__name__, f.name) in aside, (cls, f.name)
            inner = [hints[f.name]]
            while inner:
                hint = inner.pop()
                inner += typing.get_args(hint)
                if isinstance(hint, type) and dataclasses.is_dataclass(hint) and hint not in seen:
                    seen.add(hint)
                    todo.append(hint)
    assert {"BridgePort", "Program", "Classifier", "Box"} <= {t.__name__ for t in seen}


def test_forget_stale_drops_an_answer_whose_field_changed_and_keeps_the_rest():
    s1 = router_snapshot()
    remembered("t.routes", s1, lambda s: len(s.routes))
    remembered("t.links", s1, lambda s: len(s.links))
    forget_stale(s1)
    s2 = dataclasses.replace(s1, routes=())
    forget_stale(s2)
    assert fields_read("t.routes") is None and fields_read("t.links") == {"links"}


def test_a_build_left_untidy_keeps_what_went_stale_until_forget_stale():
    """build_graph(tidy=False) (the controller's, in the response time)
    drops nothing; the caller's forget_stale does, as a tidy build would."""
    s1 = router_snapshot()
    remembered("t.routes", s1, lambda s: len(s.routes))
    build_graph(s1, "xdp")
    s2 = dataclasses.replace(s1, routes=())
    untidy = build_graph(s2, "xdp", tidy=False)
    assert fields_read("t.routes") == {"routes"}
    forget_stale(s2)
    assert fields_read("t.routes") is None
    remembered("t.routes", s1, lambda s: len(s.routes))
    build_graph(s2, "xdp")
    assert fields_read("t.routes") is None
    fresh = (forget(), build_graph(s2, "xdp"))[1]
    assert (fresh.pipelines, fresh.ifaces, fresh.tables) == (untidy.pipelines, untidy.ifaces, untidy.tables)


def test_forget_stale_drops_what_asked_an_answer_it_dropped():
    """An answer asked by answer goes when a field it read changed, and then
    what asked it, though that read no changed field itself."""
    s1 = router_snapshot()
    inner = lambda s: (len(s.routes),)                                # noqa: E731
    remembered("t.asker", s1, lambda s: (remembered("t.asked", s, inner, by_answer=True), len(s.links)))
    remembered("t.bystander", s1, lambda s: len(s.links))
    forget_stale(s1)
    assert fields_read("t.asker") == {"routes", "links"}
    forget_stale(dataclasses.replace(s1, routes=()))
    assert fields_read("t.asked") is None and fields_read("t.asker") is None
    assert fields_read("t.bystander") == {"links"}


def _keys(name):
    from linuxfp.graph import remember
    return list(remember._results.get(name, {}))


@pytest.mark.parametrize("tidy", [True, False], ids=["tidy", "untidy"])
@pytest.mark.parametrize("change", ["bridge down", "STP on", "a port's proxy ARP", "bridge-nf-call-iptables",
                                    "a new pod"])
def test_a_bridged_change_is_never_met_by_a_remembered_answer(change, tidy):
    """The answers asked by answer (one link, a bridge's blocker, the
    br_netfilter switches) and per interface: a change behind any of them
    gives what a build from nothing gives, for the ports and the rest."""
    s1 = with_pods(bridged_router_snapshot())
    g1 = build_graph(s1, "tc", tidy=tidy)

    def bridge(**options):
        return tuple(dataclasses.replace(l, bridge=dataclasses.replace(l.bridge, **options)) if l.kind == "bridge"
                     else l for l in s1.links)
    if change == "bridge down":
        s2 = dataclasses.replace(s1, links=tuple(dataclasses.replace(l, up=False, oper_up=False)
                                                 if l.kind == "bridge" else l for l in s1.links))
    elif change == "STP on":
        s2 = dataclasses.replace(s1, links=bridge(stp_state=1))
    elif change == "a port's proxy ARP":
        s2 = dataclasses.replace(s1, links=tuple(
            dataclasses.replace(l, bridge_port=dataclasses.replace(l.bridge_port, proxyarp=True))
            if l.bridge_port is not None else l for l in s1.links))
    elif change == "bridge-nf-call-iptables":
        s2 = dataclasses.replace(s1, sysctls=dataclasses.replace(s1.sysctls, bridge_nf_call_iptables=True,
                                                                 br_netfilter=True))
    else:
        pod = dataclasses.replace(link(9, "pod", master=4), bridge_port=next(
            l.bridge_port for l in s1.links if l.bridge_port is not None))
        s2 = dataclasses.replace(s1, links=s1.links + (pod,), sysctls=dataclasses.replace(
            s1.sysctls, interfaces=s1.sysctls.interfaces + (sysctl(9),)))
    g2 = build_graph(s2, "tc", tidy=tidy)
    g3 = build_graph(s1, "tc", tidy=tidy)        # (back, and the change again)
    assert (g3.pipelines, g3.skipped, g3.ifaces, g3.tables) == (g1.pipelines, g1.skipped, g1.ifaces, g1.tables)
    again = build_graph(s2, "tc", tidy=tidy)
    fresh = (forget(), build_graph(s2, "tc"))[1]
    for g in (g2, again):
        assert (g.pipelines, g.skipped, g.ifaces, g.tables) == (fresh.pipelines, fresh.skipped, fresh.ifaces,
                                                                fresh.tables)
    assert (g2.pipelines, g2.skipped, g2.ifaces, g2.tables) != (g1.pipelines, g1.skipped, g1.ifaces, g1.tables)


def _neighbour() -> Neighbour:
    return Neighbour(ifindex=3, family=AF_INET, dst="198.18.2.1", lladdr="02:00:00:00:01:01", state=0x02)


def _tables(graph):
    return {table.name: table for table in graph.tables}
