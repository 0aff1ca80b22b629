"""Which part of a namespace's netfilter configuration touches forwarded
IPv4 packets, and which of it a filter node may evaluate: the filter table's
FORWARD chain of each iptables backend, raw's and mangle's PREROUTING
(_prerouting_view), native nft
filter chains on forward and prerouting, and — when the kernel tracks
connections — only for packets of established connections (with NAT too
where translating() finds the kernel's NAT hooks: program.py), but for
what a chain before conntrack drops. Everything else that could touch a
forwarded packet is named as uncovered. Pure.

Connection tracking is on once any rule uses it (a conntrack match, or a
target such as MASQUERADE or CONNMARK: each takes a reference on the
namespace's conntrack hooks; a nat table without NAT targets does not). The filter node is then
`stateful`: it takes only packets of an established connection (un-NATed,
or one the conntrack node translated), looked up in the kernel's conntrack
table once a chain before conntrack (raw) has not dropped them, and
classifies them as such: conntrack matches are constants but
for --ctstate SNAT/DNAT, read per packet (predicates.py), and nat tables are never consulted (the kernel runs them
for a connection's first packet only); everything else goes to the kernel.

A native nf_tables table's (the `nft` tool's) filter chains on the forward
and prerouting hooks (families ip, ip6, inet) are evaluated too, as one
more hook each: their rules read into iptables' model
(state/nft_forward.py), a rule's tests not known there sending the packets
that reach them to the kernel. Every hook before forward (raw's and
mangle's PREROUTING, native prerouting chains) is evaluated after routing,
with what the kernel does not know there yet left to it (the egress
device; before conntrack, the connection); where connections are tracked,
a drop by one before conntrack leaves the connection unrefreshed, as the
kernel's does (program.DROP_EARLY; one at conntrack's very priority, which
may run before or after it, is uncovered), and where anything translates, one that may run ahead
of destination NAT sends the packets whose destination the conntrack node
translated to the kernel (translated_to_kernel).

Uncovered, with the reason:
* a native nf_tables table's other base chains (families inet, ip, ip6,
  netdev) on a hook forwarded packets cross — any but input and
  output of ip/ip6/inet: postrouting, a forward or prerouting chain of
  another type, a prerouting one at conntrack's own priority where
  connections are tracked, a hook not known here —
  unless it does nothing (a filter chain with no rules and policy accept,
  as Debian's default /etc/nftables.conf makes; never inet's ingress, which
  drops malformed packets). Chains bound to a device's ingress send that device's ingress
  to the kernel (`ingress_chain`), not the namespace's, where the kernel
  binds them by name, and netdev chains bound to its egress keep the fast
  path from sending through it (`egress_chain`: every redirect, tc's too,
  skips that hook); the bridge family's (ebtables-nft's too), on any
  hook, send the bridges' frames there (`bridge_chains`), not the
  namespace's. Rules anywhere still turn connection tracking on (ct,
  NAT, nat chains, ct objects, sets whose elements may count connections)
  or defragmentation (socket, tproxy), as iptables' do; an expression or
  object whose effects are not known here, a flowtable, or tables that
  could not be read are uncovered;
* a security table that holds rules or a policy other than ACCEPT, and a
  raw or mangle table beyond its PREROUTING chain (evaluated as one more
  hook before FORWARD: _prerouting_view) on a forwarded packet's path;
* a backend whose rules could not be read.
Tables of families ip6 and arp do not touch forwarded IPv4 packets, so they
are neither; nor are nf_tables tables flagged dormant, iptables-nft's or
native (the kernel hooks none of their chains in), though their rules still
turn connection tracking or defragmentation on.

`filter_scope6` asks the same of ip6tables and forwarded IPv6 (tables of
families ip and arp are then the irrelevant ones). The filter nodes evaluate
ip6tables' FORWARD chains of the filter table too, statefully where IPv6
connections are tracked: `ipv6_uncovered` names what else keeps forwarded
IPv6 on the kernel path (graph/interfaces.py, bridge.py); tables that only
filter what the host sends or receives (INPUT, OUTPUT) leave it alone, as
for IPv4.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from linuxfp.state.iptables import BUILTIN_CHAINS, IptRule, Match, Ruleset
from linuxfp.state.netfilter import native_table
from linuxfp.state.netfilter_hooks import NF_IP_PRI_CONNTRACK, NF_IP_PRI_NAT_DST, TABLE_PRIORITY
from linuxfp.state.nft_rules import kernel_from

from ..remember import forgotten_too, remembered
from .predicates import DESTINATION_TRANSLATED

# Per family: the nf_tables families whose tables never see its forwarded packets.
_IRRELEVANT_FAMILIES = {"ip": ("ip6", "arp"), "ip6": ("ip", "arp")}
# Matches and targets that make the kernel track connections once loaded.
CONNTRACK_MATCHES = frozenset({"conntrack", "state", "connmark", "connlabel", "connlimit", "connbytes",
                               "helper", "cluster", "ipvs"})
CONNTRACK_TARGETS = frozenset({"CT", "NOTRACK", "CONNMARK", "CONNSECMARK", "SNAT", "DNAT", "MASQUERADE",
                               "REDIRECT", "NETMAP", "SYNPROXY"})
# ... and those that turn defragmentation on without it (whichever chain
# they sit in: the defrag hook then holds every fragment at PREROUTING).
# Fragments go to the kernel anyway, routed or bridged, and IPv6 conntrack
# turns the same defragmentation on; for IPv6 these keep IPv6 off the fast
# path all the same: conservative (-m socket, TPROXY serve host-bound
# traffic; a no costs little there).
DEFRAG_MATCHES = frozenset({"socket"})
DEFRAG_TARGETS = frozenset({"TPROXY"})
# Native nf_tables: the hooks a forwarded packet never crosses, per table
# family — every other hook (bridge's all, but only by a bridge's frames:
# bridge_chains; a hook not known here) is crossed, but for the
# device-bound ingress and egress hooks, asked per device (`device_chain`)
# where the kernel binds them by name.
_LOCAL_HOOKS = {"ip": frozenset({"input", "output"}), "ip6": frozenset({"input", "output"}),
                "inet": frozenset({"input", "output"})}
_INGRESS_FAMILIES = frozenset({"inet", "netdev"})
# The families whose chains the kernel binds to one device, per hook.
_DEVICE_HOOK_FAMILIES = {"ingress": _INGRESS_FAMILIES, "egress": frozenset({"netdev"})}
# The expressions (nested ones included: nft_native.py) that take a
# reference on the namespace's connection tracking once loaded, whatever
# chain they sit in; those that turn defragmentation on; and those whose
# effects reach other packets only through chains that are judged
# themselves (a dynset fills a set other rules look up, a quota or limit
# object counts for the rules naming it, dup/fwd send only what their chain
# sees). x_tables' matches and targets ("match NAME", "target NAME") are
# judged by iptables' lists. Any other expression is not known here.
NATIVE_TRACKING = frozenset({"ct", "nat", "masq", "redir", "connlimit", "notrack", "synproxy", "flow_offload"})
NATIVE_DEFRAG = frozenset({"socket", "tproxy"})
NATIVE_LOCAL = frozenset({"payload", "cmp", "meta", "immediate", "bitwise", "lookup", "counter", "log", "reject",
                          "limit", "range", "byteorder", "exthdr", "fib", "rt", "numgen", "hash", "quota", "dynset",
                          "objref", "queue", "dup", "fwd", "last", "xfrm", "osf"})
# x_tables matches and targets in a native table (nft_compat: ebtables-nft,
# arptables-nft) with no effect beyond their chain's packets; any other
# (SET changes ipsets from the packet path) is not known here
NATIVE_LOCAL_MATCHES = frozenset({
    "comment", "multiport", "tcp", "udp", "icmp", "icmp6", "limit", "length", "pkttype", "ttl", "hl", "mark",
    "addrtype", "iprange", "mac", "set", "statistic", "u32", "string", "time", "dscp", "tos", "ecn", "owner",
    "802_3", "among", "ip", "ip6", "arp", "vlan", "stp", "physdev", "rpfilter", "policy", "hashlimit", "recent"})
NATIVE_LOCAL_TARGETS = frozenset({"LOG", "NFLOG", "REJECT", "MARK", "CLASSIFY", "DSCP", "TOS", "TCPMSS", "TRACE",
                                  "AUDIT", "NFQUEUE", "CHECKSUM", "TTL", "HL", "mark", "redirect", "snat", "dnat",
                                  "arpreply", "nflog", "log", "standard", "ERROR"})
# objects that take the same reference (a set: its elements may carry a
# connlimit each, which the sets' listing does not show — a set whose
# elements were read and carry only keys is not listed: nft_native.py);
# objects that do nothing by themselves
NATIVE_TRACKING_OBJECTS = frozenset({"ct helper", "ct timeout", "ct expectation", "connlimit", "synproxy", "set"})
NATIVE_LOCAL_OBJECTS = frozenset({"counter", "quota", "limit", "secmark", "tunnel"})


@dataclass(frozen=True)
class FilterScope:
    """forward: the rulesets to evaluate on the forwarded path, a hook each
    (FORWARD per backend, raw/mangle PREROUTING views, native chains);
    uncovered: what no filter node reproduces (empty: all of it can be)."""

    forward: tuple[Ruleset, ...]
    uncovered: tuple[str, ...]
    stateful: tuple[str, ...] = ()   # what turns connection tracking on (empty: it is off)
    defrag: tuple[str, ...] = ()     # what turns defragmentation on without it

    @property
    def filters_forward(self) -> bool:
        return bool(self.forward) or bool(self.stateful)


# per family, the last netfilter state asked about and its scope (every node asks about the same state)
_last: dict[str, tuple[object, FilterScope]] = {}
forgotten_too(_last.clear)


def filter_scope(netfilter) -> FilterScope:
    """What of iptables' rules touches forwarded IPv4 packets."""
    return _remembered("ip", netfilter)


def filter_scope6(netfilter) -> FilterScope:
    """What of ip6tables' rules touches forwarded IPv6 packets."""
    return _remembered("ip6", netfilter)


def ipv6_uncovered(netfilter) -> str | None:
    """Why netfilter could do something to a forwarded IPv6 packet beyond
    what ip6tables' FORWARD chains of the filter table decide, with the
    kernel's connection tracking (which the filter nodes evaluate): None
    when nothing could."""
    scope = filter_scope6(netfilter)
    if scope.uncovered:
        return f"netfilter could touch forwarded IPv6: {scope.uncovered[0]}"
    if scope.defrag:
        return (f"ip6tables turns IPv6 defragmentation on ({scope.defrag[0]}): fragments are held "
                "and reassembled before forwarding")
    return None


def evaluated_scope6(netfilter) -> FilterScope | None:
    """What of ip6tables the filter nodes evaluate for forwarded IPv6 (its
    FORWARD chains, and connection tracking: `filters_forward`), or None
    while anything else could touch it (the router then leaves IPv6 to the
    kernel, and so does the bridge)."""
    return None if ipv6_uncovered(netfilter) is not None else filter_scope6(netfilter)


def _remembered(family: str, netfilter) -> FilterScope:
    known = _last.get(family)
    if known is None or known[0] is not netfilter:
        if family == "ip":
            scope = _scope(netfilter, family, netfilter.rulesets, netfilter.errors,
                           {"nft" if e.startswith("nft:ip ") else "legacy" for e in netfilter.tables
                            if e.startswith("legacy:") or (e.startswith("nft:ip ") and not native_table(e[4:]))})
        else:
            holders = {"nft" for e in netfilter.tables if e.startswith("nft:ip6 ") and not native_table(e[4:])}
            scope = _scope(netfilter, family, netfilter.rulesets6, netfilter.errors6,
                           holders | ({"legacy"} if netfilter.legacy_ip6_tables else set()))
        known = _last[family] = (netfilter, scope)
    return known[1]


def _scope(netfilter, family: str, rulesets, errors, holders: set[str]) -> FilterScope:
    uncovered: list[str] = list(errors)
    native_uncovered, stateful, defrag = _native_findings(netfilter, family)
    uncovered.extend(native_uncovered)
    read = {ruleset.backend for ruleset in rulesets}
    sets = {s.name: s for s in netfilter.ipsets}
    if not errors:
        tool = "iptables" if family == "ip" else "ip6tables"
        uncovered.extend(f"{tool}-{backend} holds tables whose rules were not read"
                         for backend in sorted(holders - read))
    forward = []
    for ruleset in rulesets:
        for name in ruleset.incompatible:
            uncovered.append(f"{ruleset.tool}-save cannot show all of {name!r} (native nft chains "
                             "or rules; `nft list ruleset` shows them)")
        for table in ruleset.tables:
            # (a dormant table's rules still turn tracking or defragmentation
            # on: their matches took the reference when they were loaded)
            stateful.extend(_tracking(ruleset.tool, table))
            defrag.extend(_first_use(ruleset.tool, table, DEFRAG_MATCHES, DEFRAG_TARGETS))
            if not _hooked(netfilter, ruleset, family, table.name):
                continue
            view = _prerouting_view(ruleset, table, sets)
            if view is None:
                uncovered.extend(_table_findings(ruleset.tool, table))
            elif _forward_filters(table, "PREROUTING"):
                forward.append(view)
        filter_table = ruleset.table("filter")
        if filter_table is not None and _forward_filters(filter_table, "FORWARD") \
                and _hooked(netfilter, ruleset, family, "filter"):
            forward.append(ruleset)
    forward.extend(ruleset for ruleset in _native_forward(netfilter, family)
                   if _forward_filters(ruleset.forward_table, ruleset.entry))
    # A chain at conntrack's own priority, where connections are tracked:
    # of two hooks at one priority the one registered later runs first,
    # which the dump does not tell, so whether a packet it drops refreshed
    # its connection is not known (one below it drops before conntrack:
    # program.DROP_EARLY, which leaves the connection as Linux does).
    if stateful:
        level = [r for r in forward if r.hook == "prerouting" and r.priority == NF_IP_PRI_CONNTRACK]
        uncovered.extend(f"{r.tool} {r.entry} on prerouting at priority {r.priority}: conntrack's own, "
                         "which may run before or after it" for r in level)
        forward = [r for r in forward if r not in level]
    # (at NAT's very priority too: of two hooks at one priority, the one
    # registered later runs first, which the dump does not tell)
    if family == "ip" and translating(netfilter) is not None:
        forward = [translated_to_kernel(r) if r.hook == "prerouting" and r.priority <= NF_IP_PRI_NAT_DST else r
                   for r in forward]
    return FilterScope(tuple(forward), tuple(uncovered), tuple(stateful), tuple(defrag))


# iptables' tables whose PREROUTING chain forwarded packets cross before
# FORWARD, with its hook's priority (NF_IP_PRI_RAW, NF_IP_PRI_MANGLE), and
# their other built-in chains on that path
_PREROUTING_TABLES = {"raw": (TABLE_PRIORITY["raw"], ()), "mangle": (TABLE_PRIORITY["mangle"], ("FORWARD", "POSTROUTING"))}


def _prerouting_view(ruleset: Ruleset, table, sets: dict) -> Ruleset | None:
    """`table`'s PREROUTING chain as one more hook a forwarded packet
    crosses before FORWARD (a raw or mangle table whose other chains on
    that path do nothing: the Docker engine's raw rules that keep a
    container's address off every other device), its rules read without
    what the kernel does not know there yet — the egress device (`-o`,
    or a hash:net,iface set's second direction `dst`, never match before
    routing) and, at raw's priority, the connection (conntrack has not run:
    its matches see none). `sets`: the ipsets, by name. None for any other
    table, or one that does more: the kernel's. (The chains on the local
    hooks, INPUT and OUTPUT, never see a forwarded packet.)"""
    if table.name not in _PREROUTING_TABLES:
        return None
    priority, others = _PREROUTING_TABLES[table.name]
    builtin = BUILTIN_CHAINS[table.name]
    if any(chain.policy is not None and chain.name not in builtin for chain in table.chains) or any(
            chain.rules or chain.policy not in (None, "ACCEPT") for chain in table.chains if chain.name in others):
        return None
    # (conntrack has not run: its matches see no connection)
    before_conntrack = priority <= NF_IP_PRI_CONNTRACK
    chains = tuple(replace(chain, rules=tuple(_before_routing(rule, before_conntrack, sets) for rule in chain.rules))
                   for chain in table.chains)
    return replace(ruleset, backend=f"{ruleset.backend} {table.name}", tables=(replace(table, chains=chains),),
                   incompatible=(), entry="PREROUTING", priority=priority, hook="prerouting", table_name=table.name)


def _names_egress(match, sets: dict) -> bool:
    """A set match that may test the egress device: a hash:net,iface set's
    second direction `dst` (a list:set may hold one; a set not read, too)."""
    if (match.module, match.option) != ("set", "--match-set") or len(match.values) != 2:
        return False
    ipset, flags = sets.get(match.values[0]), match.values[1].split(",")
    return "dst" in flags[1:] and (ipset is None or ipset.kind.endswith(",iface") or ipset.kind == "list:set")


def _before_routing(rule, before_conntrack: bool, sets: dict):
    """`rule` as a chain before routing sees it: from its first test of the
    egress device (or, `before_conntrack`, of the connection) on, the kernel's."""
    for n, match in enumerate(rule.matches):
        if (match.module, match.option) == ("", "-o") or _names_egress(match, sets):
            why = "-o before routing"
        elif before_conntrack and match.module in CONNTRACK_MATCHES:
            why = f"{match.module} before connection tracking"
        else:
            continue
        # (its module's `-m` word goes with it)
        if n and (rule.matches[n - 1].module, rule.matches[n - 1].option) == (match.module, ""):
            n -= 1
        return kernel_from(rule, n, why)
    return rule


def _native_forward(netfilter, family: str) -> tuple:
    """The native filter chains' rules on a forwarded packet's path
    (forward, prerouting), read for `family`'s packets
    (state/nft_forward.py), of tables not dormant."""
    if netfilter.native_error:
        return ()
    return tuple(r for r in netfilter.native.forward if r.family == family and r.native not in netfilter.dormant)


def translated_to_kernel(ruleset: Ruleset) -> Ruleset:
    """`ruleset`, a chain the kernel may run ahead of destination NAT (a
    prerouting chain at NF_IP_PRI_NAT_DST or below), with the packets whose
    destination the conntrack node translated (a DNAT connection's
    requests, an SNAT one's replies) sent to the kernel before its first
    rule: the chain sees their destination as it came, the fast path's
    filter as the conntrack node rewrote it. (IPv4's only: the conntrack
    node translates nothing else.)"""
    table = ruleset.forward_table
    translated = kernel_from(IptRule(ruleset.entry, 0, (Match(*DESTINATION_TRANSLATED),), ""), 1,
                             "a destination translated after this chain (DNAT, or an SNAT connection's reply)")
    chains = tuple(replace(chain, rules=(translated, *chain.rules)) if chain.name == ruleset.entry else chain
                   for chain in table.chains)
    return replace(ruleset, tables=(replace(table, chains=chains), *ruleset.tables[1:]))


def translating(netfilter) -> str | None:
    """What registers the kernel's IPv4 NAT hooks, which translate an
    established connection with NAT from its conntrack entry (the first nat
    table or base chain of the family registers all of them:
    nf_nat_register_fn()); None when nothing does — the kernel then
    translates nothing, whatever an entry says. A dormant table's chains are
    not hooked in."""
    if "legacy:nat" in netfilter.tables:
        return "iptables-legacy table nat"
    for ruleset in netfilter.rulesets:
        table = ruleset.table("nat") if ruleset.backend == "nft" and _hooked(netfilter, ruleset, "ip", "nat") else None
        if table is not None and any(chain.policy is not None for chain in table.chains):
            return "iptables-nft table nat"
    if not netfilter.native_error:
        for chain in netfilter.native.chains:
            if chain.kind == "nat" and chain.hook and chain.family in ("ip", "inet") and _awake(netfilter, chain):
                return chain.where
    return None


def _native_findings(netfilter, family: str) -> tuple[list[str], list[str], list[str]]:
    """What nf_tables' native chains, and every table's objects, of the
    families that see `family`'s packets do to forwarded ones: (uncovered,
    stateful, defrag)."""
    uncovered, stateful, defrag = [], [], []
    if netfilter.native_error:
        return [netfilter.native_error], stateful, defrag
    irrelevant = _IRRELEVANT_FAMILIES[family]
    read = set(netfilter.native.tables)
    evaluated = {(r.native, r.entry) for r in _native_forward(netfilter, family)}
    for entry in netfilter.tables:
        name = entry.partition(":")[2]
        if entry.startswith("nft:") and native_table(name) and name not in read \
                and name.partition(" ")[0] not in irrelevant:
            uncovered.append(f"nf_tables table {name}: not read")
    for chain in netfilter.native.chains:
        if chain.family in irrelevant:
            continue
        # (a nat chain sees a connection's first packet only: the kernel's,
        # under connection tracking, which it turns on; the bridge family's
        # keep the bridges on the kernel path, not the namespace: bridge_chains)
        if chain.family != "bridge" and chain.kind != "nat" and _acts_on_forwarded(netfilter, chain) \
                and (f"{chain.family} {chain.table}", chain.name) not in evaluated:
            uncovered.append(_native_finding(chain))
        if chain.kind == "nat":
            stateful.append(f"{chain.where}: a nat chain")
        for name in chain.expressions:
            kind, _, xt = name.partition(" ")
            if name in NATIVE_TRACKING or (kind == "match" and xt in CONNTRACK_MATCHES) or (
                    kind == "target" and xt in CONNTRACK_TARGETS):
                stateful.append(f"{chain.where} ({name})")
            elif name in NATIVE_DEFRAG or (kind == "match" and xt in DEFRAG_MATCHES) or (
                    kind == "target" and xt in DEFRAG_TARGETS):
                defrag.append(f"{chain.where} ({name})")
            elif name not in NATIVE_LOCAL and not (kind == "match" and xt in NATIVE_LOCAL_MATCHES) \
                    and not (kind == "target" and xt in NATIVE_LOCAL_TARGETS):
                uncovered.append(f"{chain.where}: expression {name}, whose effects are not known here")
    for obj in netfilter.native.objects:
        if obj.family in irrelevant or obj.kind in NATIVE_LOCAL_OBJECTS:
            continue
        if obj.kind in NATIVE_TRACKING_OBJECTS:
            stateful.append(str(obj))
        else:       # a flowtable (forwarded flows bypass the forwarding path), or a kind not known here
            uncovered.append(str(obj))
    return uncovered, stateful, defrag


def _acts_on_forwarded(netfilter, chain) -> bool:
    """A native base chain hooked where forwarded packets (or frames a
    bridge forwards, hands up or sends) pass, and that may do something to
    them."""
    bound = _device_bound(chain) and netfilter.native.hooks_by_name
    return bool(chain.hook) and chain.hook not in _LOCAL_HOOKS.get(chain.family, ()) and not bound \
        and _awake(netfilter, chain) and not _no_op(chain)


def _native_finding(chain) -> str:
    return f"{chain.where} on {chain.hook}: {_what(chain)} (native nft: the kernel evaluates it)"


def bridge_chains(netfilter) -> tuple[str, ...]:
    """The bridge family's chains that may do something to the frames of a
    bridge port, whichever way they go, of any type (no IP connection's
    first packet only, as an IP nat chain; every hook of the family: a frame
    arriving on a port crosses prerouting, then forward or input; one the
    host sends through a bridge, output and postrouting). They keep the
    namespace's bridges on the kernel path (bridge.bridge_blocker), never
    the rest of it: a packet routed between interfaces that are not a
    bridge or its ports crosses none of them."""
    # (asked once per bridge and netfilter state: bridge.bridge_blocker remembers)
    return () if netfilter.native_error else tuple(
        _native_finding(chain) for chain in netfilter.native.chains
        if chain.family == "bridge" and _acts_on_forwarded(netfilter, chain))


def netfilter_reason(findings) -> str:
    """Why the kernel keeps the traffic these findings concern: the first,
    and how many more."""
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    return f"netfilter: {findings[0]}{more}"


def _device_bound(chain) -> bool:
    """A chain on a device's own ingress or egress (asked per device where
    the kernel binds it by name: device_chain)."""
    return chain.family in _DEVICE_HOOK_FAMILIES.get(chain.hook, ())


def egress_chain(snapshot, ifname: str) -> str | None:
    """Why nothing the fast path sends may leave through the device named
    `ifname`: a netdev egress chain bound to it that does something (None:
    none does). The kernel runs that hook only for what the stack itself
    transmits: XDP's redirects and a veth peer redirect skip the device's
    transmit path, and tc's redirects skip the hook (nf_hook_egress(): a
    packet tc redirected carries nf_skip_egress, "on the tc layer")."""
    return device_chain(snapshot, "egress", ifname)


def ingress_chain(snapshot, ifname: str) -> str | None:
    """Why the device named `ifname` has its ingress go to the kernel: a
    native chain bound to it (netdev or inet `ingress`) that does something
    (None: none does)."""
    return device_chain(snapshot, "ingress", ifname)


def device_chain(snapshot, hook: str, ifname: str) -> str | None:
    """The first native chain on `hook` ("ingress" or "egress") of the
    device named `ifname` that does something, as a finding (None: none
    does). Every device asks, several times per graph: the chains that do
    something are found once, and asked by answer (a device's decision is
    not redone for a netfilter change that leaves them)."""
    acting = remembered("scope.device_chains", snapshot, _acting_device_chains, by_answer=True).get(hook)
    return next((_native_finding(chain) for chain in acting if chain.binds(ifname)), None) if acting else None


def _acting_device_chains(snapshot) -> dict[str, tuple]:
    """Per device hook, the native chains on it that do something."""
    netfilter = snapshot.netfilter
    if not netfilter.native.hooks_by_name:
        return {}           # (namespace-wide: _native_findings)
    return {name: tuple(chain for chain in netfilter.native.chains
                        if chain.hook == name and chain.family in families and not _no_op(chain)
                        and _awake(netfilter, chain))
            for name, families in _DEVICE_HOOK_FAMILIES.items()}


def _hooked(netfilter, ruleset, family: str, table: str) -> bool:
    """Whether the kernel evaluates the chains of `ruleset`'s `table`: an
    iptables-nft table flagged dormant has none of them hooked in, whatever
    iptables-nft-save shows (iptables-legacy knows no such flag)."""
    return ruleset.backend != "nft" or f"{family} {table}" not in netfilter.dormant


def _awake(netfilter, chain) -> bool:
    """Whether a native base chain is hooked in (its table is not dormant)."""
    return f"{chain.family} {chain.table}" not in netfilter.dormant


def _no_op(chain) -> bool:
    """A base chain that lets every packet through untouched (inet's ingress
    never does: it drops malformed IPv4 and IPv6 before any rule)."""
    return (chain.kind == "filter" and chain.policy == "accept" and chain.rules == 0
            and (chain.family, chain.hook) != ("inet", "ingress"))


def _what(chain) -> str:
    if chain.rules:
        return f"{chain.rules} rule{'s' if chain.rules > 1 else ''}"
    if chain.policy != "accept":
        return f"policy {chain.policy}"
    return f"a {chain.kind} chain" + (" (it drops malformed packets)" if chain.hook == "ingress" else "")


def _table_findings(tool: str, table) -> list[str]:
    where = f"{tool} table {table.name}"
    found = []
    builtin = BUILTIN_CHAINS.get(table.name, ())
    for chain in table.chains:
        if chain.policy is not None and chain.name not in builtin:
            found.append(f"{where}: base chain {chain.name} is not one iptables defines")
    if table.name not in ("filter", "nat") and any(c.rules or c.policy not in (None, "ACCEPT")
                                                   for c in table.chains):
        found.append(f"{where}: rules outside what the fast path evaluates (filter's FORWARD, "
                     "raw's and mangle's PREROUTING)")
    return found


def _tracking(tool: str, table) -> list[str]:
    """What in this table makes the kernel track connections: a rule that
    uses it (a nat table itself does not: without conntrack its chains see
    no packet)."""
    return _first_use(tool, table, CONNTRACK_MATCHES, CONNTRACK_TARGETS)


def _first_use(tool: str, table, matches: frozenset[str], targets: frozenset[str]) -> list[str]:
    """The table's first rule using one of `matches` or `targets`, named."""
    where = f"{tool} table {table.name}"
    for chain in table.chains:
        for rule in chain.rules:
            used = set(rule.modules) & matches
            if used or rule.target in targets:
                return [f"{where}: {chain.name} #{rule.position} ({', '.join(sorted(used)) or rule.target})"]
    return []


def _forward_filters(table, entry: str) -> bool:
    chain = table.chain(entry)
    return chain is not None and (bool(chain.rules) or chain.policy != "ACCEPT")
