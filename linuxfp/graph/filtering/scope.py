"""Which part of a namespace's netfilter configuration touches forwarded
IPv4 packets, and which of it a filter node may evaluate: the filter table's
FORWARD chain of each iptables backend, and — when the kernel tracks
connections — only for packets of established connections without NAT.
Everything else that could touch a forwarded packet is named as uncovered.
Pure.

Connection tracking is on once any rule uses it (a conntrack match, or a
target such as MASQUERADE or CONNMARK: each takes a reference on the
namespace's conntrack hooks; a nat table without NAT targets does not). The filter node is then
`stateful`: it looks every packet up in the kernel's conntrack table and
classifies only those of an established, un-NATed connection, for which
conntrack matches are constants (predicates.py) and nat tables are never
consulted (the kernel runs them for a connection's first packet only);
everything else goes to the kernel.

Uncovered, with the reason:
* native nf_tables tables (families inet, netdev, bridge, or an ip table
  iptables-nft cannot express) — their base chains may sit on any hook;
* raw/mangle/security tables that hold rules or a policy other than ACCEPT;
* a backend whose rules could not be read.
Tables of families ip6 and arp do not touch forwarded IPv4 packets, so they
are neither.

`filter_scope6` asks the same of ip6tables and forwarded IPv6 (tables of
families ip and arp are then the irrelevant ones). The filter nodes evaluate
ip6tables' FORWARD chains of the filter table too, statefully where IPv6
connections are tracked: `ipv6_uncovered` names what else keeps forwarded
IPv6 on the kernel path (graph/interfaces.py, bridge.py); tables that only
filter what the host sends or receives (INPUT, OUTPUT) leave it alone, as
for IPv4.
"""
from __future__ import annotations

from dataclasses import dataclass

from linuxfp.state.iptables import BUILTIN_CHAINS, Ruleset

# Per family: the nf_tables families whose tables never see its forwarded packets.
_IRRELEVANT_FAMILIES = {"ip": ("ip6", "arp"), "ip6": ("ip", "arp")}
# Tables iptables-nft manages (and iptables-nft-save prints).
_XTABLES = frozenset(BUILTIN_CHAINS)
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


@dataclass(frozen=True)
class FilterScope:
    """forward: the FORWARD chain owners to evaluate, per backend;
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
                            if e.startswith(("nft:ip ", "legacy:"))})
        else:
            holders = {"nft" for e in netfilter.tables if e.startswith("nft:ip6 ")}
            scope = _scope(netfilter, family, netfilter.rulesets6, netfilter.errors6,
                           holders | ({"legacy"} if netfilter.legacy_ip6_tables else set()))
        known = _last[family] = (netfilter, scope)
    return known[1]


def _scope(netfilter, family: str, rulesets, errors, holders: set[str]) -> FilterScope:
    uncovered: list[str] = list(errors)
    for entry in netfilter.tables:
        backend, _, name = entry.partition(":")
        if backend != "nft":
            continue
        table_family, _, table = name.partition(" ")
        if table_family in _IRRELEVANT_FAMILIES[family]:
            continue
        if table_family != family or table not in _XTABLES:
            uncovered.append(f"nf_tables table {name} (native nft: the filter node reads iptables rules only)")
    read = {ruleset.backend for ruleset in rulesets}
    if not errors:
        tool = "iptables" if family == "ip" else "ip6tables"
        uncovered.extend(f"{tool}-{backend} holds tables whose rules were not read"
                         for backend in sorted(holders - read))
    forward, stateful, defrag = [], [], []
    for ruleset in rulesets:
        for name in ruleset.incompatible:
            uncovered.append(f"{ruleset.tool}-save cannot show all of {name!r} (native nft chains "
                             "or rules; `nft list ruleset` shows them)")
        for table in ruleset.tables:
            uncovered.extend(_table_findings(ruleset.tool, table))
            stateful.extend(_tracking(ruleset.tool, table))
            defrag.extend(_first_use(ruleset.tool, table, DEFRAG_MATCHES, DEFRAG_TARGETS))
        filter_table = ruleset.table("filter")
        if filter_table is not None and _forward_filters(filter_table):
            forward.append(ruleset)
    return FilterScope(tuple(forward), tuple(uncovered), tuple(stateful), tuple(defrag))


def _table_findings(tool: str, table) -> list[str]:
    where = f"{tool} table {table.name}"
    found = []
    builtin = BUILTIN_CHAINS.get(table.name, ())
    for chain in table.chains:
        if chain.policy is not None and chain.name not in builtin:
            found.append(f"{where}: base chain {chain.name} is not one iptables defines")
    if table.name not in ("filter", "nat") and any(c.rules or c.policy not in (None, "ACCEPT")
                                                   for c in table.chains):
        found.append(f"{where}: rules (only the filter table is evaluated in the fast path)")
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


def _forward_filters(table) -> bool:
    chain = table.chain("FORWARD")
    return chain is not None and (bool(chain.rules) or chain.policy != "ACCEPT")
