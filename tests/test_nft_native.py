"""Native nf_tables tables (the `nft` tool's, not iptables-nft's): where they
hook in is read from the kernel, and only what they can touch leaves the
fast path — Debian's default /etc/nftables.conf (empty base chains) and a
stateless host firewall on input leave forwarding accelerated (beside
iptables-nft and iptables-legacy rules too), one that tracks connections
makes the filter stateful, a rule on the forward hook sends forwarded
packets to the kernel, a chain on one device's ingress only that device's
ingress. Differential: the same frames through Linux alone
and Linux + LinuxFP, byte-compared."""
from __future__ import annotations

import errno
import os
from dataclasses import replace

import pytest

from controller_counting import Counting, counting
from controller_counting import reasons as count_reasons
from linuxfp.graph.filtering import scope
from linuxfp.graph.filtering.scope import bridge_chains, filter_scope, filter_scope6
from linuxfp.lab import RouterTopology, run_differential
from linuxfp.lab.differential import Step
from linuxfp.lab.netns import entered
from linuxfp.lab.rulesets import probe_frames
from linuxfp.state.model import NetfilterState, NftChain, NftNative, NftObject

from snapshot_fixtures import router_snapshot


def ingress_chain(netfilter, ifname):
    """scope.ingress_chain of a snapshot holding `netfilter`."""
    return scope.ingress_chain(router_snapshot(netfilter=netfilter), ifname)


def egress_chain(netfilter, ifname):
    """scope.egress_chain of a snapshot holding `netfilter`."""
    return scope.egress_chain(router_snapshot(netfilter=netfilter), ifname)


# Debian 12's /etc/nftables.conf
DEBIAN_DEFAULT = """flush ruleset
table inet filter {
    chain input { type filter hook input priority filter; }
    chain forward { type filter hook forward priority filter; }
    chain output { type filter hook output priority filter; }
}
"""
# a host firewall: what reaches the host is filtered, forwarding is not ...
STATELESS_FIREWALL = """flush ruleset
table inet filter {
    chain input { type filter hook input priority filter; policy drop; iif lo accept; tcp dport 22 accept; }
    chain forward { type filter hook forward priority filter; policy accept; }
    chain output { type filter hook output priority filter; }
}
"""
# ... and with connection tracking (the filter node turns stateful: one-way
# probes are never established, they stay the kernel's)
HOST_FIREWALL = """flush ruleset
table inet filter {
    ct helper ftp-standard { type "ftp" protocol tcp; }
    chain input { type filter hook input priority filter; policy drop;
                  ct state established,related accept; iif lo accept; tcp dport 22 accept; }
    chain forward { type filter hook forward priority filter; policy accept; }
    chain output { type filter hook output priority filter; }
}
table ip6 other {
    chain c { type filter hook prerouting priority 0; ip6 saddr 2001:db8::1 drop; }
}
"""
FORWARD_DROPS = DEBIAN_DEFAULT + "add rule inet filter forward ip daddr 198.19.1.0/24 drop\n"
# ... and rules with their own sets: prefixes, address and port ranges
FORWARD_SETS = DEBIAN_DEFAULT + """table ip sets {
    chain forward { type filter hook forward priority 10;
        ip daddr { 198.19.1.0/24, 198.19.2.128-198.19.2.200 } udp dport { 53, 80-443, 8080 } drop
        ip saddr != { 198.18.0.0/17 } tcp dport { 1000-8472 } drop
        udp sport { 22, 65535 } drop
    }
}
"""
# ... and named sets: a set of intervals and a set of ports (their elements
# as the last commit left them: read again whenever the nf_tables generation
# moves), and an empty one (its lookup never matches; negated, it always does)
NAMED_SETS = DEBIAN_DEFAULT + """table ip sets {
    set blocked { type ipv4_addr; flags interval; elements = { 198.19.1.0/25, 198.19.2.60-198.19.2.70 } }
    set ports { type inet_service; elements = { 53, 8080 } }
    set none { type ipv4_addr; }
    chain forward { type filter hook forward priority 10;
        ip daddr @blocked drop
        ip daddr 198.19.0.0/23 udp dport @ports drop
        ip saddr @none drop
        ip saddr != @none ip daddr 198.19.4.0/24 drop
    }
}
"""
# ... and prerouting filter chains, below conntrack's priority and above
# it: evaluated as forward's are, but for an egress device test (none is
# known before routing: that rule's packets are the kernel's)
PREROUTING_DROPS = DEBIAN_DEFAULT + """table ip edge {
    chain raw { type filter hook prerouting priority raw; ip daddr 198.19.2.0/24 iifname != "to-sink" drop; }
    chain early { type filter hook prerouting priority filter; ip daddr 198.19.1.9 oifname "to-sink" drop;
                  ip saddr 198.18.64.0/24 drop; }
}
"""
# named sets the packet path (a dynset) or time (timeouts) change: their
# lookups are the kernel's, beside those of sets only commits change
CHANGING_SETS = """table inet fw {
    set block { type ipv4_addr; flags interval; elements = { 198.51.100.0/24, 192.0.2.10-192.0.2.20 } }
    set ports { type inet_service; elements = { 22, 8080 } }
    set empty { type ipv4_addr; }
    set noports { type inet_service; }
    set dyn { type ipv4_addr; size 100; flags dynamic; }
    set fed { type ipv4_addr; size 100; }
    set expiring { type ipv4_addr; flags timeout; elements = { 203.0.113.5 timeout 1h } }
    chain forward { type filter hook forward priority 0; policy accept;
        ip saddr @block drop
        udp dport @ports drop
        ip daddr @empty drop
        ip daddr != @empty ip saddr 198.18.99.0/24 drop
        udp sport != @noports ip saddr 198.18.98.0/24 drop
        ip saddr @dyn drop
        ip saddr @expiring drop
        ip daddr 203.0.113.0/24 add @fed { ip saddr }
        ip saddr @fed drop
    }
}
"""
# a chain on the sink side's ingress: the probes' ingress stays accelerated
SINK_INGRESS = DEBIAN_DEFAULT + """table netdev edge {
    chain in { type filter hook ingress device "to-sink" priority 0; ip saddr 198.19.0.0/16 drop; }
}
"""
# ... and on the probes' own ingress: that ingress goes to the kernel
SOURCE_INGRESS = DEBIAN_DEFAULT + """table netdev edge {
    chain in { type filter hook ingress device "to-src" priority 0; ip daddr 198.19.2.0/24 drop; }
}
"""
# ... and one there that does nothing: the controller keeps the ingress
# accelerated, the datapath hands every packet to the kernel's hooks
# (nf_ingress)
QUIET_SOURCE_INGRESS = DEBIAN_DEFAULT + """table netdev edge {
    chain in { type filter hook ingress device "to-src" priority 0; }
}
"""
# ... and on the probes' egress: every redirect (tc's too: nf_skip_egress)
# would skip it, so what leaves there is the kernel's
SINK_EGRESS = DEBIAN_DEFAULT + """table netdev edge {
    chain out { type filter hook egress device "to-sink" priority 0; ip daddr 198.19.2.0/24 drop; }
}
"""
# iptables-nft's FORWARD rule, then a native forward rule, in a table
# flagged dormant: Linux evaluates neither, nor does the fast path
DORMANT = FORWARD_DROPS + "add table inet filter { flags dormant; }\n"
DORMANT_IPTABLES = (("iptables-legacy", "-F", "FORWARD"),       # (the step before's)
                    ("iptables-nft", "-A", "FORWARD", "-d", "198.19.2.0/24", "-j", "DROP"),
                    ("nft", "add table ip filter { flags dormant; }"))
FRAMES = 200


def _state(*chains: NftChain, objects=(), hooks_by_name=True, error="", unread=()) -> NetfilterState:
    """A netfilter state whose native tables were read, but for `unread`."""
    tables = sorted({f"{c.family} {c.table}" for c in chains} | {f"{o.family} {o.table}" for o in objects})
    return NetfilterState(active=True, tables=tuple(f"nft:{t}" for t in sorted([*tables, *unread])),
                          native=NftNative(chains, objects, hooks_by_name, tuple(tables)), native_error=error)


def _base(family, table, name, hook, policy="accept", kind="filter", rules=0, expressions=(), devices=(),
          prefixes=()):
    return NftChain(family, table, name, hook, kind, policy, devices, prefixes, rules, tuple(expressions))


def test_what_native_chains_touch_is_told_from_where_they_hook():
    default = _state(_base("inet", "filter", "input", "input"), _base("inet", "filter", "forward", "forward"),
                     _base("inet", "filter", "output", "output"))
    assert filter_scope(default).uncovered == () and not filter_scope(default).filters_forward
    assert filter_scope6(default).uncovered == ()
    # input and output rules and policies leave forwarded packets alone; their
    # conntrack expressions, a ct helper and sets turn connection tracking on
    stateless = _state(_base("inet", "filter", "input", "input", "drop", rules=3, expressions=("cmp", "meta")),
                       _base("inet", "filter", "output", "output", rules=1, expressions=("counter",)))
    assert filter_scope(stateless) == filter_scope(_state())
    host = _state(_base("inet", "filter", "input", "input", "drop", rules=3, expressions=("cmp", "ct", "meta")),
                  objects=(NftObject("inet", "filter", "ct helper"), NftObject("inet", "filter", "counter"),
                           NftObject("inet", "filter", "set")))
    scope = filter_scope(host)
    assert scope.uncovered == () and scope.stateful == (
        "nf_tables chain inet filter input (ct)", "nf_tables ct helper of inet filter", "nf_tables set of inet filter")
    assert filter_scope6(host).stateful == scope.stateful
    # x_tables matches and targets by iptables' lists
    xt = _state(_base("bridge", "filter", "INPUT", "input", rules=2,
                      expressions=("match conntrack", "match comment", "target TPROXY")))
    assert filter_scope(xt).stateful == ("nf_tables chain bridge filter INPUT (match conntrack)",)
    assert filter_scope(xt).defrag == ("nf_tables chain bridge filter INPUT (target TPROXY)",)
    # a rule or a drop policy on a hook forwarded packets cross is the kernel's
    forward = _state(_base("inet", "filter", "forward", "forward", rules=1, expressions=("cmp", "payload")))
    assert filter_scope(forward).uncovered == (
        "nf_tables chain inet filter forward on forward: 1 rule (native nft: the kernel evaluates it)",)
    dropping = _state(_base("ip", "t", "pre", "prerouting", "drop"))
    assert filter_scope(dropping).uncovered == (
        "nf_tables chain ip t pre on prerouting: policy drop (native nft: the kernel evaluates it)",)
    assert filter_scope6(dropping).uncovered == ()          # an ip table never sees IPv6
    # the bridge family's chains (ebtables-nft's too), on any hook, meet a
    # bridge's frames only: the bridges go to the kernel, not the namespace
    bridge = _state(_base("bridge", "b", "in", "input", rules=1, expressions=("meta",)))
    assert filter_scope(bridge).uncovered == () and filter_scope6(bridge).uncovered == ()
    assert bridge_chains(bridge) == (
        "nf_tables chain bridge b in on input: 1 rule (native nft: the kernel evaluates it)",)
    assert bridge_chains(default) == () and bridge_chains(forward) == ()
    assert bridge_chains(_state(_base("bridge", "filter", "FORWARD", "forward"))) == ()     # ebtables -F leaves this
    assert bridge_chains(replace(bridge, dormant=("bridge b",))) == ()
    assert bridge_chains(_state(_base("bridge", "b", "x", "hook 9", rules=1, expressions=("meta",))))
    # (a table that could not be read: the namespace's, as uncovered)
    unread = replace(bridge, native_error="cannot read nf_tables")
    assert bridge_chains(unread) == () and filter_scope(unread).uncovered == ("cannot read nf_tables",)
    assert filter_scope(_state(_base("inet", "t", "x", "hook 9", rules=1, expressions=("cmp",)))).uncovered
    # ... unless its table is dormant (not hooked in), whose conntrack rules still track
    asleep = replace(_state(_base("inet", "fw", "forward", "forward", "drop", rules=1, expressions=("ct",))),
                     dormant=("inet fw",))
    assert filter_scope(asleep).uncovered == () and filter_scope(asleep).stateful == (
        "nf_tables chain inet fw forward (ct)",)
    # a nat chain tracks connections (its rules see only their first packets)
    nat = _state(_base("ip", "n", "post", "postrouting", kind="nat", rules=1, expressions=("masq",)))
    assert filter_scope(nat).uncovered == () and filter_scope(nat).stateful[0] == "nf_tables chain ip n post: a nat chain"
    # defragmentation, expressions and objects not known here, flowtables, unread tables
    sock = _state(_base("inet", "t", "in", "input", rules=1, expressions=("socket",)))
    assert filter_scope(sock).defrag == ("nf_tables chain inet t in (socket)",)
    odd = _state(_base("inet", "t", "in", "input", rules=1, expressions=("brandnew",)))
    assert "expression brandnew" in filter_scope(odd).uncovered[0]
    assert filter_scope(_state(objects=(NftObject("inet", "t", "object type 42"),))).uncovered
    assert filter_scope(_state(objects=(NftObject("inet", "t", "flowtable"),))).uncovered == (
        "nf_tables flowtable of inet t",)
    assert filter_scope(_state(error="native nf_tables tables: boom")).uncovered == ("native nf_tables tables: boom",)
    # a native table the state does not say it read is never taken for an empty one
    assert filter_scope(_state(unread=("inet fw",))).uncovered == ("nf_tables table inet fw: not read",)
    assert filter_scope(_state(unread=("ip6 fw",))).uncovered == ()        # IPv6's
    assert filter_scope(_state(unread=("ip filter",))).uncovered == (      # iptables-nft's: its rules, unread
        "iptables-nft holds tables whose rules were not read",)


def test_a_chain_on_a_devices_ingress_keeps_only_that_ingress():
    edge = _state(_base("netdev", "e", "in", "ingress", rules=1, expressions=("cmp",), devices=("eth1", "eth2")),
                  _base("netdev", "e", "wild", "ingress", "drop", prefixes=("wan",)),
                  _base("netdev", "e", "quiet", "ingress", devices=("eth3",)),
                  _base("inet", "e", "checks", "ingress", devices=("eth4",)))
    assert filter_scope(edge).uncovered == () and filter_scope6(edge).uncovered == ()
    bound = {name: ingress_chain(edge, name) for name in ("eth1", "eth2", "eth3", "eth4", "wan0", "lan0")}
    assert [name for name, why in bound.items() if why] == ["eth1", "eth2", "eth4", "wan0"], bound
    assert "drops malformed packets" in bound["eth4"]
    # a kernel that binds hooks to devices, not names: no name tells which
    older = _state(*edge.native.chains, hooks_by_name=False)
    assert ingress_chain(older, "eth1") is None and filter_scope(older).uncovered
    # an egress chain: the device it binds is no target of the redirects
    # that skip its transmit path (egress_chain); where the kernel binds it
    # to a device, not a name, no name tells which: the namespace's
    out = _state(_base("netdev", "e", "out", "egress", "drop", devices=("eth1",)),
                 _base("netdev", "e", "quiet", "egress", devices=("eth2",)))
    assert filter_scope(out).uncovered == () and filter_scope6(out).uncovered == ()
    assert [name for name in ("eth1", "eth2", "eth3") if egress_chain(out, name)] == ["eth1"]
    assert "nf_tables chain netdev e out on egress: policy drop" in egress_chain(out, "eth1")
    older = _state(*out.native.chains, hooks_by_name=False)
    assert egress_chain(older, "eth1") is None and filter_scope(older).uncovered
    assert egress_chain(replace(out, dormant=("netdev e",)), "eth1") is None


def test_chains_and_expressions_are_decoded_from_the_dump():
    """The reader's decoding, on answers built here: device names, name
    prefixes (6.17's NFTA_DEVICE_PREFIX, and 6.16's name without its NUL),
    hooks this reader does not know, nested and x_tables expressions."""
    import struct

    from linuxfp.state import netlink as nl
    from linuxfp.state import nft_native as nn

    def be32(value):
        return struct.pack(">I", value)

    devices = (nl.attr(nn.NFTA_DEVICE_NAME, b"eth0\0") + nl.attr(nn.NFTA_DEVICE_PREFIX, b"wan\0")
               + nl.attr(nn.NFTA_DEVICE_NAME, b"lan"))
    hook = nl.attr(nn.NFTA_HOOK_HOOKNUM, be32(0)) + nl.attr(nn.NFTA_HOOK_DEVS, devices)
    attrs = {nn.NFTA_CHAIN_TABLE: b"t\0", nn.NFTA_CHAIN_NAME: b"c\0", nn.NFTA_CHAIN_HOOK: hook,
             nn.NFTA_CHAIN_POLICY: be32(0), nn.NFTA_CHAIN_TYPE: b"filter\0"}
    chain = nn._chain("netdev", attrs, {("netdev", "t", "c"): 2}, {("netdev", "t", "c"): {"cmp"}})
    assert (chain.hook, chain.policy, chain.devices, chain.device_prefixes, chain.rules) == (
        "ingress", "drop", ("eth0",), ("lan", "wan"), 2)
    assert chain.binds("eth0") and chain.binds("wan3") and chain.binds("lan") and not chain.binds("eth1")
    odd = {**attrs, nn.NFTA_CHAIN_HOOK: nl.attr(nn.NFTA_HOOK_HOOKNUM, be32(7))}
    assert nn._chain("inet", odd, {}, {}).hook == "hook 7"
    with pytest.raises(nn.NativeUnreadable):
        nn._chain("netdev", {**attrs, nn.NFTA_CHAIN_HOOK: nl.attr(nn.NFTA_HOOK_HOOKNUM, be32(0))
                             + nl.attr(nn.NFTA_HOOK_DEVS, nl.attr(9, b"x\0"))}, {}, {})
    with pytest.raises(UnicodeDecodeError):
        nn._chain("inet", {**attrs, nn.NFTA_CHAIN_TABLE: b"\xff\0"}, {}, {})

    def expression(name: bytes, data: bytes = b"") -> bytes:
        return nl.attr(nn.NFTA_EXPR_NAME, name + b"\0") + nl.attr(nn.NFTA_EXPR_DATA, data)

    dynset = expression(b"dynset", nl.attr(nn.NFTA_DYNSET_EXPR, expression(b"connlimit"))
                        + nl.attr(nn.NFTA_DYNSET_EXPRESSIONS, nl.attr(1, expression(b"limit"))))
    assert nn._expression_names(dynset) == {"dynset", "connlimit", "limit"}
    assert nn._expression_names(expression(b"match", nl.attr(nn.NFTA_MATCH_NAME, b"conntrack\0"))) == {
        "match conntrack"}
    assert nn._expression_names(expression(b"target", nl.attr(nn.NFTA_TARGET_NAME, b"SET\0"))) == {"target SET"}
    state = _state(_base("inet", "t", "in", "input", rules=1, expressions=("target SET",)))
    assert "expression target SET" in filter_scope(state).uncovered[0]


def test_a_bridge_with_an_ingress_chain_does_not_hand_frames_up():
    """Frames to the bridge's own address continue into IP in the fast path
    only when nothing runs on the bridge device's receive path: an nf_tables
    chain on its ingress does."""
    from linuxfp.graph.nodes.bridge import hands_up
    from snapshot_fixtures import link, router_snapshot

    bridge = link(4, "br0", kind="bridge")
    assert hands_up(router_snapshot(), bridge)
    chain = _base("netdev", "e", "in", "ingress", rules=1, expressions=("cmp",), devices=("br0",))
    assert not hands_up(router_snapshot(netfilter=_state(chain)), bridge)
    other = _base("netdev", "e", "in", "ingress", rules=1, expressions=("cmp",), devices=("eth9",))
    assert hands_up(router_snapshot(netfilter=_state(other)), bridge)


def test_the_graph_keeps_only_the_bound_ingress_on_the_kernel_path():
    """Debian's default table: both ingresses routed in the fast path; a
    chain that drops on `left`'s ingress: `left` alone is the kernel's, and
    `linuxfp graph` names the chain."""
    from linuxfp.graph import build_graph
    from snapshot_fixtures import router_snapshot

    default = (_base("inet", "filter", "input", "input"), _base("inet", "filter", "forward", "forward"))
    graph = build_graph(router_snapshot(netfilter=_state(*default)), "xdp")
    assert sorted(p.ifname for p in graph.pipelines) == ["left", "right"]
    edge = _base("netdev", "edge", "in", "ingress", rules=1, expressions=("cmp", "payload"), devices=("left",))
    graph = build_graph(router_snapshot(netfilter=_state(*default, edge)), "xdp")
    assert [p.ifname for p in graph.pipelines] == ["right"]
    reason = {s.ifname: s.reason for s in graph.skipped}["left"]
    assert "nf_tables chain netdev edge in on ingress: 1 rule" in reason, reason


def test_an_egress_chain_keeps_the_redirects_that_skip_it_from_its_device():
    """A netdev egress chain on `right`: every redirect would skip it (tc's
    too), so nothing the fast path sends leaves there — its facts lose
    TC_TX, ROUTED_TX and XDP_TX, no veth peer redirect enters its peer,
    `linuxfp graph` says why — while both ingresses keep their pipelines
    (`left`'s packets routed out of `right` go to the kernel, the rest
    stays fast)."""
    from linuxfp.graph import build_graph
    from linuxfp.graph.model import IF_ROUTED_TX, IF_TC_TX, IF_XDP_TX
    from snapshot_fixtures import router_snapshot, with_pods

    default = (_base("inet", "filter", "input", "input"), _base("inet", "filter", "forward", "forward"))
    out = _base("netdev", "edge", "out", "egress", rules=1, expressions=("cmp", "payload"), devices=("right",))

    plain = router_snapshot(netfilter=_state(*default))
    pods = with_pods(plain)     # (both veths' peers in a container each)
    chained = _state(*default, out)

    def graph(snapshot, hook: str):
        built = build_graph(snapshot, hook)
        assert sorted(p.ifname for p in built.pipelines) == ["left", "right"]
        return built

    def targets(snapshot, flag: int) -> list[int]:
        return sorted(f.ifindex for f in graph(snapshot, "xdp").ifaces if f.flags & flag)

    def peer_targets(snapshot) -> list[int]:
        return sorted(int.from_bytes(key, "little") for key, _ in graph(snapshot, "tc").table("lfp_peers").entries)

    # (the same links and the rest, only netfilter changed — as the state
    # layer hands on what did not change — and back: the nodes' memos see it)
    steps = ((plain.netfilter, [2, 3]), (chained, [2]), (plain.netfilter, [2, 3]))
    for netfilter, sent in steps:
        for flag in (IF_XDP_TX, IF_TC_TX, IF_ROUTED_TX):
            assert targets(replace(plain, netfilter=netfilter), flag) == sent, flag
    for netfilter, sent in steps:
        assert peer_targets(replace(pods, netfilter=netfilter)) == sent
    notes = dict(graph(replace(plain, netfilter=chained), "xdp").notes)["transmit"]
    assert notes == ("right: nothing the fast path sends leaves here: nf_tables chain netdev edge out on egress: "
                     "1 rule (native nft: the kernel evaluates it)",), notes


def test_an_egress_chain_on_a_bridge_or_its_port_keeps_what_leaves_there_with_the_kernel():
    """On a port: no bridged or routed frame leaves through it in the fast
    path (no BRIDGE_TX, out of lfp_br_tx_ports), while what arrives on it
    still does (its port row keeps BRP_FORWARDING); on the bridge device:
    routed packets into the bridge are the kernel's (no BRD_SENDS)."""
    from linuxfp.graph import build_graph
    from linuxfp.graph.model import IF_BRIDGE_TX
    from linuxfp.graph.nodes.bridge import BRP_FORWARDING, PORT
    from linuxfp.graph.nodes.bridge_tx import BRD_SENDS
    from snapshot_fixtures import bridged_router_snapshot

    base = bridged_router_snapshot()
    default = (_base("inet", "filter", "input", "input"),)

    def state(netfilter):
        graph = build_graph(replace(base, netfilter=netfilter))
        # (bridge_tx stays out of pipelines while no bridge sends)
        assert graph.pipeline(5).shape.nodes[:2] == ("bridge", "router")
        port = next(f for f in graph.ifaces if f.ifindex == 5)
        row = dict(graph.table("lfp_br_ports").entries)[(5).to_bytes(4, "little")]
        bridge = int.from_bytes(dict(graph.table("lfp_br_devs").entries)[(4).to_bytes(4, "little")], "little")
        xdp_ports = {int.from_bytes(k, "little") for k, _ in graph.table("lfp_br_tx_ports").entries}
        return (bool(port.flags & IF_BRIDGE_TX), 5 in xdp_ports, bool(PORT.unpack(row)[1] & BRP_FORWARDING),
                bool(bridge & BRD_SENDS))

    chain = {name: _base("netdev", "e", "out", "egress", rules=1, expressions=("cmp",), devices=(name,))
             for name in ("port", "br0")}
    for netfilter, expected in ((_state(*default), (True, True, True, True)),
                                (_state(*default, chain["port"]), (False, False, True, True)),
                                (_state(*default, chain["br0"]), (True, True, True, False)),
                                (_state(*default), (True, True, True, True))):
        assert state(netfilter) == expected, netfilter.native.chains


# more of what the reader sees: several devices, inet ingress, a nat chain,
# a meter counting connections (a connlimit nested in a dynset), an x_tables
# match, objects of iptables-nft's own table
MORE = """table inet edge {
    set seen { type ipv4_addr; flags dynamic; }
    chain in { type filter hook ingress devices = { "to-sink", "far" } priority 0; }
    chain input { type filter hook input priority 0; tcp dport 22 add @seen { ip saddr ct count over 2 } drop; }
}
table ip nt {
    chain post { type nat hook postrouting priority 100; }
}
table ip filter {
    ct timeout slow { protocol tcp; policy = { established: 100 }; }
}
"""


@pytest.mark.netns
def test_native_tables_are_read_as_the_kernel_holds_them(lab):
    from linuxfp.state.netfilter import read_netfilter
    from linuxfp.state.nft_native import HOOKS_BY_NAME

    ns = lab.namespace("nft")
    ns.run(["ip", "link", "add", "to-sink", "type", "veth", "peer", "name", "far"])
    ns.run(["nft", "-f", "-"], input=HOST_FIREWALL + SINK_INGRESS.replace("flush ruleset\n", "").replace(
        "table inet filter", "table inet other") + MORE)
    with entered(ns):
        state = read_netfilter()
    chains = {(c.family, c.table, c.name): c for c in state.native.chains}
    assert state.native_error == "" and state.native.hooks_by_name == HOOKS_BY_NAME
    firewall = chains[("inet", "filter", "input")]
    assert (firewall.hook, firewall.kind, firewall.policy, firewall.rules) == ("input", "filter", "drop", 3)
    assert {"ct", "meta", "cmp"} <= set(firewall.expressions)
    assert chains[("inet", "filter", "forward")].rules == 0
    assert chains[("netdev", "edge", "in")].devices == ("to-sink",)
    assert chains[("inet", "edge", "in")].devices == ("far", "to-sink")
    assert {"dynset", "connlimit"} <= set(chains[("inet", "edge", "input")].expressions)
    assert chains[("ip", "nt", "post")].kind == "nat"
    assert chains[("ip6", "other", "c")].hook == "prerouting"
    assert not any(c.table == "filter" and c.family == "ip" for c in state.native.chains)   # iptables-nft's
    assert {(o.family, o.table, o.kind) for o in state.native.objects} == {
        ("inet", "filter", "ct helper"), ("inet", "edge", "set"), ("ip", "filter", "ct timeout")}
    # (before 6.16 the chains bound to devices are the namespace's)
    assert filter_scope(state).uncovered == () if HOOKS_BY_NAME else filter_scope(state).uncovered
    assert "nf_tables chain inet edge input (connlimit)" in filter_scope(state).stateful
    assert "nf_tables ct timeout of ip filter" in filter_scope(state).stateful
    # a prerouting filter chain is evaluated as forward's are (its rule for
    # the fast path's filter); one of a table that translates, ahead of DNAT,
    # is the kernel's (test_prerouting_chains_are_evaluated_as_forward_chains_are)
    assert filter_scope6(state).uncovered == () and "nft ip6 other" in [r.tool for r in filter_scope6(state).forward]
    if HOOKS_BY_NAME:
        assert "inet edge in on ingress" in ingress_chain(state, "far")     # (inet ingress: never a no-op)
        assert "on ingress" in ingress_chain(state, "to-sink") and ingress_chain(state, "lo") is None
    # a commit is read again (the generation changed)
    ns.run(["nft", "add", "rule", "inet", "filter", "output", "counter"])
    with entered(ns):
        again = read_netfilter()
    assert {(c.table, c.name): c.rules for c in again.native.chains}[("filter", "output")] == 1


# a router's native firewall: what the nft tool writes for the common tests
NATIVE_FORWARD = """flush ruleset
table inet fw {
    chain forward { type filter hook forward priority filter; policy drop;
        ct state established,related accept
        ct state invalid drop
        ct state != established counter drop
        iifname "lan0" oifname "wan*" accept
        ip saddr 198.51.100.0/24 tcp dport 22 accept
        ip6 daddr 2001:db8::/32 udp dport 5000-5010 drop
        meta l4proto udp udp sport != 53 drop
        ip daddr 198.19.2.0/20 drop
        tcp dport { 22, 80 } accept
        ip daddr 198.19.3.0/24 log prefix "x" drop
        icmp type != echo-reply drop
        jump other
    }
    chain other { ip saddr 203.0.113.1 return; meta nfproto ipv6 drop; ip protocol udp udp dport != 1-100 goto last; }
    chain last { }
}
table ip gw {
    chain pass { type filter hook forward priority 10; ip daddr 192.0.2.1 drop;
        ip saddr { 198.51.100.0/24, 192.0.2.10-192.0.2.20 } udp dport { 53, 1000-2000, 65535 } drop
        udp sport . udp dport { 1 . 2 } drop
    }
}
"""


@pytest.mark.netns
def test_named_sets_are_read_where_only_commits_change_them(lab):
    """A named set is read as the rule's own sets are when only commits
    change it (those move the nf_tables generation the datapath checks); a
    lookup in an empty one never matches, and one negated always does; a set that is dynamic, has
    timeouts or is written by a rule of its table (`add @fed`) leaves the
    rules that look it up to the kernel, and says so."""
    from linuxfp.state.netfilter import read_netfilter

    ns = lab.namespace("nfs")
    ns.run(["nft", "-f", "-"], input=CHANGING_SETS)
    with entered(ns):
        state = read_netfilter()
    read = {r.family: r for r in state.native.forward}
    unread = "a set not mirrored (the packet path or time may change it, or it holds more than keys)"
    assert [r.text for r in read["ip"].forward_table.chains[0].rules] == [
        "-A forward -s 192.0.2.10/31,192.0.2.12/30,192.0.2.16/30,192.0.2.20/32,198.51.100.0/24 -j DROP",
        "-A forward -p udp -m multiport --dports 22,8080 -j DROP",
        "-A forward -s 198.18.99.0/24 -j DROP",                 # (not in an empty set: a test of nothing)
        "-A forward -s 198.18.98.0/24 -p udp -j DROP",
        f"-A forward -m nft --expression 'lookup in @dyn, {unread}'",
        f"-A forward -m nft --expression 'lookup in @expiring, {unread}'",
        "-A forward -d 203.0.113.0/24 -m nft --expression 'expression dynset'",
        f"-A forward -m nft --expression 'lookup in @fed, {unread}'"]
    assert [r.text for r in read["ip6"].forward_table.chains[0].rules] == [
        "-A forward -p udp -m multiport --dports 22,8080 -j DROP"]
    # a set made without the dynamic flag, written later by a rule of
    # another chain of its table (nft adds no flag to it): the kernel's too
    ns.run(["nft", "add", "set", "inet", "fw", "later", "{ type ipv4_addr; }"])
    ns.run(["nft", "add", "rule", "inet", "fw", "forward", "ip", "saddr", "@later", "drop"])
    with entered(ns):
        assert "@later" not in "\n".join(
            r.text for r in read_netfilter().native.forward[0].forward_table.chains[0].rules)   # (read: empty)
    ns.run(["nft", "add", "chain", "inet", "fw", "input", "{ type filter hook input priority 0; }"])
    ns.run(["nft", "add", "rule", "inet", "fw", "input", "ip", "saddr", "198.51.100.0/24", "update", "@later",
            "{ ip saddr }"])
    assert "dynamic" not in ns.run(["nft", "list", "set", "inet", "fw", "later"]).stdout
    with entered(ns):
        state = read_netfilter()
    assert f"-A forward -m nft --expression 'lookup in @later, {unread}'" in [
        r.text for r in {r.family: r for r in state.native.forward}["ip"].forward_table.chains[0].rules]


@pytest.mark.netns
def test_prerouting_chains_are_evaluated_as_forward_chains_are(lab):
    """A prerouting filter chain is one more hook on the forwarded packet's
    path, crossed before forward's: its rules are read as forward's are,
    without an egress device (none yet) and, below conntrack's priority,
    without the connection's state (none yet). Where anything translates, a
    chain ahead of destination NAT sees a translated packet's destination as
    it came, not as the fast path's filter does: those packets are the
    kernel's (test_differential_nat.py compares them)."""
    from linuxfp.state.netfilter import read_netfilter

    ns = lab.namespace("npre")
    ns.run(["nft", "-f", "-"], input=PREROUTING_DROPS)
    ns.run(["nft", "add", "rule", "ip", "edge", "raw", "ip", "daddr", "198.19.3.9", "ct", "state", "new", "drop"])
    with entered(ns):
        state = read_netfilter()
    read = {r.entry: r for r in state.native.forward}
    assert {entry: (r.hook, r.priority) for entry, r in read.items()} == {
        "forward": ("forward", 0), "raw": ("prerouting", -300), "early": ("prerouting", 0)}
    assert [r.text for r in read["raw"].forward_table.chains[0].rules] == [
        "-A raw -d 198.19.2.0/24 ! -i to-sink -j DROP",
        "-A raw -d 198.19.3.9/32 -m nft --expression 'ct before conntrack'"]
    assert [r.text for r in read["early"].forward_table.chains[0].rules] == [
        "-A early -d 198.19.1.9/32 -m nft --expression 'oifname before routing'",
        "-A early -s 198.18.64.0/24 -j DROP"]
    # (its ct test turns tracking on: both chains are still evaluated — what
    # the one before conntrack drops is dropped before conntrack, its
    # connection not refreshed: program.DROP_EARLY)
    scope = filter_scope(state)
    assert scope.stateful and scope.uncovered == ()
    assert {r.entry for r in scope.forward if r.native} == {"raw", "early"}
    # ... but not one at conntrack's very priority: which of the two runs
    # first the dump does not tell
    ns.run(["nft", "add", "chain", "ip", "edge", "level200", "{ type filter hook prerouting priority -200; }"])
    ns.run(["nft", "add", "rule", "ip", "edge", "level200", "ip", "daddr", "198.19.3.11", "drop"])
    with entered(ns):
        scope = filter_scope(read_netfilter())
    assert scope.uncovered == ("nft ip edge level200 on prerouting at priority -200: conntrack's own, "
                               "which may run before or after it",)
    ns.run(["nft", "delete", "chain", "ip", "edge", "level200"])
    ns.run(["nft", "delete", "rule", "ip", "edge", "raw", "handle",
            ns.run(["nft", "-a", "list", "chain", "ip", "edge", "raw"]).stdout.split("# handle ")[-1].split()[0]])
    with entered(ns):
        scope = filter_scope(read_netfilter())
    assert scope.uncovered == () and {r.entry for r in scope.forward if r.native} == {"raw", "early"}
    ns.run(["nft", "add", "table", "ip", "nt"])
    ns.run(["nft", "add", "chain", "ip", "nt", "post", "{ type nat hook postrouting priority srcnat; }"])
    # (at NAT's own priority, created after it: the kernel runs it first)
    ns.run(["nft", "add", "chain", "ip", "edge", "level", "{ type filter hook prerouting priority -100; }"])
    ns.run(["nft", "add", "rule", "ip", "edge", "level", "ip", "daddr", "198.19.3.10", "drop"])
    with entered(ns):
        scope = filter_scope(read_netfilter())
    # (a nat chain tracks connections; the chains at -300 and -100 may run
    # ahead of DNAT: the packets whose destination the conntrack node
    # translated are the kernel's before their first rule)
    assert scope.uncovered == ()
    raw = next(r for r in scope.forward if r.entry == "raw")
    assert raw.forward_table.chains[0].rules[0].text.startswith("-A raw --destination-translated -m nft")
    level = next(r for r in scope.forward if r.entry == "level")
    assert level.forward_table.chains[0].rules[0].text.startswith("-A level --destination-translated -m nft")
    assert next(r for r in scope.forward if r.entry == "early").forward_table == read["early"].forward_table


@pytest.mark.netns
def test_native_forward_chains_are_read_as_iptables_rules(lab):
    """Each forward filter base chain, per family of packets it sees, in
    iptables' model: a rule's own set of ports or addresses as multiport or
    prefixes; a test not known here (a log, a concatenation) ends the rule,
    which keeps the tests before it for the kernel; an inet rule for the
    other family is left out (the others keep their positions)."""
    from linuxfp.graph.filtering.program import compile_program
    from linuxfp.graph.filtering.predicates import IPV6
    from linuxfp.state.netfilter import read_netfilter

    ns = lab.namespace("nfw")
    ns.run(["nft", "-f", "-"], input=NATIVE_FORWARD)
    with entered(ns):
        state = read_netfilter()
    read = {(r.backend, r.family): r for r in state.native.forward}
    assert set(read) == {("inet fw forward", "ip"), ("inet fw forward", "ip6"), ("ip gw pass", "ip")}
    v4 = read["inet fw forward", "ip"]
    assert (v4.tool, v4.entry, [c.name for c in v4.forward_table.chains]) == (
        "nft inet fw", "forward", ["forward", "last", "other"])
    lines = [(r.position, r.text) for r in v4.forward_table.chain("forward").rules]
    assert lines == [
        (1, "-A forward -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
        (2, "-A forward -m conntrack --ctstate INVALID -j DROP"),
        (3, "-A forward -m conntrack ! --ctstate ESTABLISHED -j DROP"),
        (4, "-A forward -i lan0 -o wan+ -j ACCEPT"),
        (5, "-A forward -s 198.51.100.0/24 -p tcp -m tcp --dport 22 -j ACCEPT"),
        (7, "-A forward -p udp -m udp ! --sport 53 -j DROP"),
        (8, "-A forward -d 198.19.0.0/20 -j DROP"),
        (9, "-A forward -p tcp -m multiport --dports 22,80 -j ACCEPT"),
        (10, "-A forward -d 198.19.3.0/24 -m nft --expression 'expression log'"),
        (11, "-A forward -p icmp -m icmp ! --icmp-type 0 -j DROP"),
        (12, "-A forward -j other")], lines
    assert [r.text for r in v4.forward_table.chain("other").rules] == [
        "-A other -s 203.0.113.1/32 -j RETURN", "-A other -p udp -m udp ! --dport 1:100 -g last"]
    assert [r.text for r in read["ip gw pass", "ip"].forward_table.chains[0].rules[1:]] == [
        "-A pass -s 192.0.2.10/31,192.0.2.12/30,192.0.2.16/30,192.0.2.20/32,198.51.100.0/24 -p udp "
        "-m multiport --dports 53,1000:2000,65535 -j DROP",
        "-A pass -p udp -m nft --expression 'register 9'"]
    v6 = read["inet fw forward", "ip6"]
    assert [r.position for r in v6.forward_table.chain("forward").rules] == [1, 2, 3, 4, 6, 7, 9, 12]
    assert v6.forward_table.chain("forward").rules[4].text == \
        "-A forward -d 2001:db8::/32 -p udp -m udp --dport 5000:5010 -j DROP"
    assert [r.text for r in v6.forward_table.chain("other").rules] == ["-A other -j DROP"]
    # evaluated, not uncovered; the lookup's and the log's packets the kernel's
    scope = filter_scope(state)
    assert scope.uncovered == () and [r.tool for r in scope.forward] == ["nft inet fw", "nft ip gw"]
    program = compile_program(scope.forward, (), stateful=True)
    assert program.entries == ("forward", "pass") and program.tools == ("nft inet fw", "nft ip gw")
    assert [(r.describe(), r.unsupported) for r in program.unsupported] == [
        ("nft inet fw forward #10", ("-m nft --expression 'expression log'",)),
        ("nft ip gw pass #3", ("-m nft --expression 'register 9'",))]
    # the rules' own sets track nothing (a set of two keys concatenated neither)
    assert not any("set" in why for why in scope.stateful), scope.stateful
    assert filter_scope6(state).uncovered == ()
    assert [r.tool for r in filter_scope6(state).forward] == ["nft inet fw"]
    assert compile_program(filter_scope6(state).forward, (), stateful=True, family=IPV6).entries == ("forward",)
    # a dormant table's chains are not hooked in: neither evaluated nor uncovered
    ns.run(["nft", "add", "table", "ip", "gw", "{ flags dormant; }"])
    with entered(ns):
        asleep = read_netfilter()
    assert [r.tool for r in filter_scope(asleep).forward] == ["nft inet fw"] and filter_scope(asleep).uncovered == ()


@pytest.mark.netns
def test_a_read_starts_from_a_commit_that_is_over(lab, monkeypatch):
    """A netfilter read starts from the generation of a commit that has
    applied all of itself: an empty batch naming it returns once the
    commit mutex is free (and is refused when another commit came since),
    changing nothing; a generation whose NFT_MSG_NEWGEN was received (sent
    at the commit's very end) needs no batch at all."""
    import struct

    from linuxfp.state import decode
    from linuxfp.state import netfilter as nf
    from linuxfp.state import netlink as nl

    ns = lab.namespace("gen")
    ns.run(["nft", "add", "table", "inet", "lfpgen"])
    monkeypatch.setattr(nf, "_settled", {})        # (this test's own, gone after it)
    with entered(ns):
        generation = nf.nft_generation()
        assert nf.settled_nft_generation() == generation
        assert nf.nft_generation() == generation              # the empty batch committed nothing
        assert list(nf._settled.values()) == [generation]    # (a read under it again needs no barrier)
        assert nf._empty_batch(generation) and not nf._empty_batch(generation + 1)
        body = nf._NFGENMSG.pack(0, 0, 0) + nl.attr(nf.NFTA_GEN_ID, struct.pack(">I", generation))
        announced = nl.NLMSGHDR.pack(16 + len(body), nf.nft_message(nf.NFT_MSG_NEWGEN), 0, 0, 0) + body
        events = [decode.decode_nft_event(message) for message in nl.split_messages(announced)]
        assert [event.generation for event in events] == [generation]
        monkeypatch.setattr(nf, "_settled", {})
        nf.generation_announced(generation)
        monkeypatch.setattr(nf, "_empty_batch", lambda generation: pytest.fail("a batch for an announced commit"))
        assert nf.settled_nft_generation() == generation and nf.unsettled_reason() is None
        # a barrier nf_tables refuses settles nothing, and says why (the
        # controller takes no such read in: test_an_unsettled_read_is_not_taken_in)
        ns.run(["nft", "add", "table", "inet", "lfpgen2"])

        def refused(generation):
            raise OSError(105, "No buffer space available")
        monkeypatch.setattr(nf, "_empty_batch", refused)
        assert nf.settled_nft_generation() is None
        assert "refused the barrier" in nf.unsettled_reason()
        monkeypatch.setattr(nf, "_empty_batch", lambda generation: False)    # commits keep coming
        assert nf.settled_nft_generation() is None and nf.unsettled_reason() == "commits kept coming"
        monkeypatch.undo()
        # a generation that cannot be read settles nothing either; a kernel
        # without nf_tables has nothing to settle

        def unreadable(code):
            def read():
                raise OSError(code, os.strerror(code))
            return read
        monkeypatch.setattr(nf, "_read_generation", unreadable(errno.EIO))
        assert nf.settled_nft_generation() is None and "cannot be read" in nf.unsettled_reason()
        monkeypatch.setattr(nf, "_read_generation", unreadable(errno.EPROTONOSUPPORT))
        assert nf.settled_nft_generation() is None and nf.unsettled_reason() is None
        monkeypatch.undo()
        monkeypatch.setattr(nf, "_settled", {})
        assert nf.settled_nft_generation() == nf.nft_generation() and nf.unsettled_reason() is None


def test_an_unsettled_read_is_not_taken_in(monkeypatch):
    """A netfilter read nf_tables would not settle may hold half a commit
    (its rules, not yet the policies and set updates it applies after moving
    the generation): the controller takes it in under no generation, so the
    datapath keeps passing while the kernel's generation is past the last
    one taken in; the next settled read is taken in."""
    from types import SimpleNamespace

    from controller.daemon import Controller
    from controller.lease import Lease
    from linuxfp import state as kstate

    from controller.daemon import UNSETTLED_WAIT_S

    controller = SimpleNamespace(lease=Lease(), _unsettled=None, _unsettled_wait=0.0, _unsettled_logged_at=0.0)
    controller.lease.nft_seq = 7
    monkeypatch.setattr(kstate, "unsettled_reason", lambda: "nf_tables refused the barrier: [Errno 105]")
    Controller._nft_taken_in(controller, 8)
    assert controller.lease.nft_seq == 7 and controller.lease.nft_behind(8) and controller._unsettled
    # each unsettled read waits twice as long for the next, up to the loop's longest wait
    assert controller._unsettled_wait == UNSETTLED_WAIT_S[0]
    for _ in range(10):
        Controller._nft_taken_in(controller, 8)
    assert controller._unsettled_wait == UNSETTLED_WAIT_S[1] and controller.lease.nft_seq == 7
    monkeypatch.setattr(kstate, "unsettled_reason", lambda: None)
    Controller._nft_taken_in(controller, 8)
    assert controller.lease.nft_seq == 8 and not controller.lease.nft_behind(8) and controller._unsettled is None
    assert controller._unsettled_wait == 0.0


@pytest.mark.netns
def test_objects_in_iptables_own_tables_are_seen(lab):
    """iptables-nft's tables are read by the rule decoder, whose chains tell
    whether a table holds more (its use count counts chains, sets, objects
    and flowtables): an object nft added there turns conntrack on."""
    from linuxfp.state.netfilter import read_netfilter

    ns = lab.namespace("nfo")
    ns.run(["iptables-nft", "-A", "FORWARD", "-d", "192.0.2.1", "-j", "DROP"])
    with entered(ns):
        plain = read_netfilter()
    assert plain.native.objects == () and filter_scope(plain).stateful == ()
    ns.run(["nft", "-f", "-"], input='table ip filter {\n ct helper h { type "ftp" protocol tcp; }\n}\n')
    with entered(ns):
        helped = read_netfilter()
    assert filter_scope(helped).stateful == ("nf_tables ct helper of ip filter",)
    assert helped.rulesets == plain.rulesets          # the same rules, read the same way


@pytest.mark.netns
def test_a_dormant_tables_nat_chains_translate_nothing(lab):
    """A table flagged dormant has none of its chains hooked in: its nat
    chains register no NAT hooks, so established connections with NAT are
    not the fast path's to translate (scope.translating()) — until another
    table's nat chain registers them."""
    from linuxfp.graph.filtering.scope import translating
    from linuxfp.state.netfilter import read_netfilter

    ns = lab.namespace("nfd")
    ns.run(["nft", "-f", "-"], input="table ip gw {\n flags dormant\n chain post { type nat hook postrouting "
                                     "priority 100; }\n}\n")
    with entered(ns):
        asleep = read_netfilter()
    assert asleep.dormant == ("ip gw",) and translating(asleep) is None
    ns.run(["nft", "add table ip awake"])
    ns.run(["nft", "add chain ip awake post { type nat hook postrouting priority 100; }"])
    with entered(ns):
        awake = read_netfilter()
    assert awake.dormant == ("ip gw",) and translating(awake) == "nf_tables chain ip awake post"


@pytest.mark.netns
def test_name_bound_ingress_chains_follow_the_name_as_the_reader_assumes(lab):
    """What `hooks_by_name` stands for, checked on this kernel: a renamed
    device leaves the chain bound to its old name, a new device of that name
    joins it (before 6.16 the chain stays with the device)."""
    from linuxfp.lab.packet_io import inject
    from linuxfp.state.nft_native import HOOKS_BY_NAME

    ns = lab.namespace("nfr")
    for name, peer in (("d0", "p0"), ("e0", "q0")):
        ns.run(["ip", "link", "add", name, "type", "veth", "peer", "name", peer])
        for device in (name, peer):
            ns.run(["ip", "link", "set", device, "up"])
    ns.run(["nft", "-f", "-"], input='table netdev t {\n chain c { type filter hook ingress device "d0" '
                                     'priority 0; ether type 0x88b5 counter; }\n}\n')
    frame = bytes.fromhex("ffffffffffff02000000000188b5") + bytes(46)

    def counted(through: str) -> int:
        before = ns.run(["nft", "list", "chain", "netdev", "t", "c"]).stdout
        inject(ns, through, [frame])
        after = ns.run(["nft", "list", "chain", "netdev", "t", "c"]).stdout
        return int(after.split("packets ")[1].split()[0]) - int(before.split("packets ")[1].split()[0])

    assert counted("p0") == 1                      # into d0
    ns.run(["ip", "link", "set", "d0", "name", "d9"])
    assert counted("p0") == (0 if HOOKS_BY_NAME else 1)     # into the renamed d9
    ns.run(["ip", "link", "set", "e0", "name", "d0"])
    assert counted("q0") == (1 if HOOKS_BY_NAME else 0)     # into a new d0


def _commands(*commands: tuple[str, ...]):
    def apply(router):
        for command in commands:
            router.dut.run(list(command))
    return apply


def _ruleset(text: str, *commands: tuple[str, ...]):
    def apply(router):
        router.dut.run(["nft", "-f", "-"], input=text)
        _commands(*commands)(router)
    return apply


# Debian's default table beside iptables-nft and iptables-legacy rules: the
# filter node evaluates both backends' FORWARD rules in the fast path
BESIDE_IPTABLES = (("iptables-nft", "-A", "FORWARD", "-d", "198.19.1.0/24", "-j", "DROP"),
                   ("iptables-legacy", "-A", "FORWARD", "-d", "198.19.2.0/24", "-j", "DROP"))


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_native_tables_leave_forwarding_fast_where_they_do_not_touch_it(require_root, hook):
    """Per step, what Linux alone delivers and what Linux + LinuxFP delivers
    are the same frames; where the native tables leave the probes' path
    alone, the fast path forwarded most of them."""
    steps = [Step("debian default", _ruleset(DEBIAN_DEFAULT)), Step("stateless firewall", _ruleset(STATELESS_FIREWALL)),
             Step("host firewall", _ruleset(HOST_FIREWALL)), Step("forward drops", _ruleset(FORWARD_DROPS)),
             Step("forward sets", _ruleset(FORWARD_SETS)),
             Step("named sets", _ruleset(NAMED_SETS)),
             Step("named set grown", _commands(("nft", "add element ip sets blocked { 198.19.3.128/26 }"),
                                               ("nft", "add element ip sets none { 198.18.64.7 }"))),
             Step("named set shrunk", _commands(("nft", "delete element ip sets blocked { 198.19.1.0/25 }"),
                                                ("nft", "flush set ip sets ports"))),
             Step("prerouting drops", _ruleset(PREROUTING_DROPS)),
             Step("sink ingress", _ruleset(SINK_INGRESS)), Step("source ingress", _ruleset(SOURCE_INGRESS)),
             Step("quiet source ingress", _ruleset(QUIET_SOURCE_INGRESS)),
             Step("sink egress", _ruleset(SINK_EGRESS)),
             Step("beside iptables", _ruleset(DEBIAN_DEFAULT, *BESIDE_IPTABLES)),
             Step("dormant iptables", _ruleset(DEBIAN_DEFAULT, *DORMANT_IPTABLES)),
             Step("dormant native", _ruleset(DORMANT))]
    seen: list[Counting] = []
    report = run_differential(RouterTopology(prefixes=8), steps, counting(seen, hook),
                              lambda router, index: probe_frames(router, 60, FRAMES), prefix="lfp-nn")
    assert report.ok, report.render()
    fast = {}
    for step, kernel, accelerated in zip(steps, report.kernel, report.accelerated):
        assert kernel.forwarded_by_kernel > 0, report.render()
        fast[step.name] = accelerated.forwarded_by_kernel < kernel.forwarded_by_kernel // 2
    # (the host firewall tracks connections: one-way probes stay NEW, the kernel's)
    from linuxfp.state.nft_native import HOOKS_BY_NAME      # (before 6.16: ingress chains are everyone's)
    # (a native forward chain's rules are evaluated in the fast path)
    assert fast == {"debian default": True, "stateless firewall": True, "host firewall": False,
                    "forward drops": True, "forward sets": True, "named sets": True, "named set grown": True,
                    "named set shrunk": True, "prerouting drops": True, "sink ingress": HOOKS_BY_NAME,
                    "source ingress": False,
                    "quiet source ingress": False, "sink egress": False,
                    "beside iptables": True,
                    "dormant iptables": True, "dormant native": True}, report.render()
    # (the quiet chain's ingress kept its program, which passed every packet;
    # the counts are read as each step's change is settled: its frames show
    # in the next step's)
    assert count_reasons(seen[0].stats[-1]).get("nf_ingress", 0) > 0, seen[0].stats[-1]
    # the sets and the prerouting chains dropped in the fast path (a step's
    # burst shows in the reading after the next step's); the sets' rules
    # left nothing to the kernel
    dropped, kernel = ([count_reasons(s).get(reason, 0) for s in seen[0].stats]
                       for reason in ("filter_dropped", "filter_kernel"))
    for name in ("forward sets", "named sets", "named set grown", "named set shrunk", "prerouting drops"):
        k = report.step_index(name)
        assert dropped[k + 2] > dropped[k + 1], (name, dropped)
        if "sets" in name or "set " in name:
            assert kernel[k + 2] == kernel[k + 1], (name, kernel)
    # the egress chain's device alone left the fast path: the probes' ingress
    # kept its pipeline, which handed over what it routed there
    unsent = [count_reasons(s).get("egress_unsupported", 0) for s in seen[0].stats]
    k = report.step_index("sink egress")
    assert unsent[k + 2] - unsent[k + 1] >= FRAMES // 2 or not HOOKS_BY_NAME, unsent
    # the same frames each step: Linux dropped what the forward rule and the
    # probes' ingress chain drop
    delivered = {step.name: len(kernel.at("sink:to-dut")) for step, kernel in zip(steps, report.kernel)}
    assert delivered["forward drops"] < delivered["debian default"], delivered
    assert delivered["forward sets"] < delivered["debian default"], delivered
    assert delivered["named set grown"] < delivered["named sets"] < delivered["debian default"], delivered
    assert delivered["prerouting drops"] < delivered["debian default"], delivered
    assert delivered["named set grown"] < delivered["named set shrunk"], delivered
    assert delivered["source ingress"] < delivered["debian default"], delivered
    assert delivered["sink egress"] < delivered["debian default"], delivered
    assert delivered["beside iptables"] < delivered["debian default"], delivered
    assert delivered["dormant iptables"] == delivered["dormant native"] == delivered["debian default"], delivered
