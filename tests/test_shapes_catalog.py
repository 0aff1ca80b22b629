"""The shape catalog (linuxfp/graph/catalog.py): derived from the node
declarations, it holds every shape build_graph produces for the snapshots
the graph tests use. Pure: no kernel."""
from __future__ import annotations

from dataclasses import replace

import pytest

from linuxfp.graph import HOOK_CHOICES, HOOKS, build_graph
from linuxfp.graph.catalog import builtin_nodes, possible_shapes
from linuxfp.graph.nodes import Node, Stage
from linuxfp.state.iptables import parse_save
from linuxfp.state.model import BridgeOptions, BridgePort, NetfilterState

from snapshot_fixtures import link, router_snapshot
from snapshot_fixtures import bridged_router_snapshot

FORWARD_RULES = ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                 "-A FORWARD -d 198.19.0.0/24 -p udp -j DROP\nCOMMIT\n")


STATEFUL_RULES = FORWARD_RULES.replace("COMMIT", "-A FORWARD -m conntrack --ctstate ESTABLISHED -j ACCEPT\nCOMMIT")


def with_filter(snapshot, rules: str = FORWARD_RULES):
    ruleset = parse_save(rules, "nft")
    return replace(snapshot, netfilter=NetfilterState(active=True, tables=("nft:ip filter",), detail="test",
                                                      rulesets=(ruleset,)))


def bridge_only_snapshot():
    """A bridge with two ports and no address: bridged frames only."""
    snap = router_snapshot()
    bridge = replace(link(4, "br0", kind="bridge"), bridge=BridgeOptions())
    ports = tuple(replace(link(i, f"port{i}", master=4), bridge_port=BridgePort(state=3)) for i in (5, 6))
    return replace(snap, links=snap.links + (bridge,) + ports)


def with_br_netfilter(snapshot):
    """br_netfilter showing bridged IPv4 to iptables (bridge-nf-call-iptables=1)."""
    return replace(snapshot, sysctls=replace(snapshot.sysctls, bridge_nf_call_iptables=True))


SNAPSHOTS = {
    "router": router_snapshot,
    "router+filter": lambda: with_filter(router_snapshot()),
    "bridge": bridge_only_snapshot,
    "bridge+router": bridged_router_snapshot,
    "bridge+router+filter": lambda: with_filter(bridged_router_snapshot()),
    "bridge+router, queued bridge": lambda: bridged_router_snapshot(bridge_qdisc="htb"),
    "bridge+router+filter, queued bridge": lambda: with_filter(bridged_router_snapshot(bridge_qdisc="htb")),
    "bridge+bridge_filter+router+filter": lambda: with_br_netfilter(with_filter(bridged_router_snapshot())),
    "bridge+bridge_filter+router+filter, queued bridge":
        lambda: with_br_netfilter(with_filter(bridged_router_snapshot(bridge_qdisc="htb"))),
}
# The same with connection tracking on: the conntrack and nat_out nodes join the filter.
SNAPSHOTS.update({f"{name}, stateful": (lambda make=make: with_filter(make(), STATEFUL_RULES))
                  for name, make in list(SNAPSHOTS.items()) if "filter" in name})


@pytest.mark.parametrize("hook", HOOK_CHOICES)
@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_every_shape_the_graph_builds_is_in_the_catalog(name, hook):
    graph = build_graph(SNAPSHOTS[name](), hook)
    assert graph.pipelines, graph.skipped
    assert set(graph.shapes()) <= set(possible_shapes())


def test_bridging_alone_where_the_filter_cannot_take_the_rules(monkeypatch):
    """The router leaves a port's pipeline when FORWARD has rules no node
    evaluates; bridged frames skip FORWARD, so the bridge stays."""
    from linuxfp.graph.filtering import classifier
    from linuxfp.lab.rulesets import PREFIX_POOL

    monkeypatch.setattr(classifier, "MAX_PAIR_ENTRIES", 2)
    rules = "".join(f"-A FORWARD -s {p} -d {q} -j DROP\n" for p in PREFIX_POOL[:4] for q in PREFIX_POOL[4:8])
    ruleset = parse_save(f"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n{rules}COMMIT\n",
                         "nft")
    snapshot = replace(bridge_only_snapshot(), netfilter=NetfilterState(
        active=True, tables=("nft:ip filter",), detail="test", rulesets=(ruleset,)))
    for hook in HOOK_CHOICES:
        shapes = set(build_graph(snapshot, hook).shapes())
        assert {s.nodes for s in shapes} == {("bridge", "transmit")}
        assert shapes <= set(possible_shapes())


def test_the_snapshots_produce_most_of_the_catalog():
    produced = {s for make in SNAPSHOTS.values() for hook in HOOK_CHOICES for s in build_graph(make(), hook).shapes()}
    missing = {s for s in possible_shapes() if s not in produced}
    # the over-approximation stays small: the bridge alone (the test above)
    # is produced by no snapshot here, nor the bridge filter without the
    # filter node (both apply wherever the rules can be evaluated, and the
    # router is on every bridge port's pipeline that has them; the catalog
    # reads `needs`, not that)
    assert {s.nodes for s in missing if "filter" not in s.nodes} <= {
        ("bridge", "transmit"), ("bridge", "bridge_filter", "transmit"),
        ("bridge", "bridge_filter", "router", "transmit"),
        ("bridge", "bridge_filter", "router", "bridge_tx", "transmit")}, sorted(map(str, missing))
    assert all("filter" not in s.nodes for s in missing), sorted(map(str, missing))


def test_catalog_follows_the_declarations():
    catalog = possible_shapes()
    nodes = {n.name: n for n in builtin_nodes()}
    assert len(catalog) == len(set(catalog)) and all(not s.testable for s in catalog)
    for shape in catalog:
        chosen = [nodes[n] for n in shape.nodes]
        assert any(n.decides for n in chosen), shape
        assert [n.stage for n in chosen] == sorted(n.stage for n in chosen), shape
        assert "transmit" in shape.nodes, shape           # applies everywhere, needs nothing
        assert "filter" not in shape.nodes or "router" in shape.nodes, shape   # FORWARD sees routed packets
        assert "conntrack" not in shape.nodes or "filter" in shape.nodes, shape   # its verdict is FORWARD's
        # applies everywhere its need is met: with the conntrack node, always
        assert ("nat_out" in shape.nodes) == ("conntrack" in shape.nodes), shape
    for hook in HOOKS:
        assert {s.nodes for s in catalog if s.hook == hook} == {s.nodes for s in catalog}


def test_a_new_node_enters_the_catalog_through_its_declaration(tmp_path, monkeypatch):
    from linuxfp.graph import nodes as registry

    class Nat(Node):
        name, stage = "nat", Stage.POSTROUTING
        header = tmp_path / "nat.h"

        def applies(self, snapshot, link):
            return False

        def needs(self, snapshot, link):
            return ("router",)

    Nat.header.write_text("/* test */\n")
    base = builtin_nodes()
    monkeypatch.setattr(registry, "_REGISTRY", list(registry._REGISTRY))
    monkeypatch.setattr(registry, "_registered", None)
    nat = registry.register(Nat())
    assert builtin_nodes() == base            # a node from elsewhere is not shipped
    with_nat = possible_shapes(base + (nat,), hooks=("tc",))
    without = possible_shapes(base, hooks=("tc",))
    # where the router is, with and without NAT; nowhere else
    assert len(with_nat) == len(without) + sum("router" in s.nodes for s in without)
    assert all("router" in s.nodes for s in with_nat if "nat" in s.nodes)


def test_a_node_that_applies_wherever_its_needs_are_met_follows_them(tmp_path, monkeypatch):
    """A node with no applies() of its own is in every pipeline whose nodes
    meet its needs (build_graph drops it only where they are unmet), so the
    catalog holds no shape without it there; one whose needs cannot be
    asked without a configuration is assumed to need nothing, never left
    out on that assumption."""
    from linuxfp.graph import nodes as registry

    class Audit(Node):
        name, stage = "audit", Stage.POSTROUTING
        header = tmp_path / "audit.h"

        def needs(self, snapshot, link):
            return ("filter",)

    class Guess(Audit):
        name = "guess"

        def needs(self, snapshot, link):
            return snapshot.netfilter.rulesets[0]     # raises on the empty probe

    Audit.header.write_text("/* test */\n")
    monkeypatch.setattr(registry, "_REGISTRY", list(registry._REGISTRY))
    monkeypatch.setattr(registry, "_registered", None)
    base = builtin_nodes()
    audit, guess = registry.register(Audit()), registry.register(Guess())
    shapes = possible_shapes(base + (audit,), hooks=("tc",))
    assert shapes and all(("audit" in s.nodes) == ("filter" in s.nodes) for s in shapes)
    shapes = possible_shapes(base + (guess,), hooks=("tc",))
    assert {s.nodes for s in shapes if "guess" not in s.nodes} == {s.nodes for s in possible_shapes(base, ("tc",))}
