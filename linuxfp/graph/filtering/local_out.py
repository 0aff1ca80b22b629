"""Whether netfilter lets every packet of one flow the host itself sends
through its local output path untouched — the outer packets a VXLAN device
sends to one remote, which the fast path may build and send itself
(bpf_modules/vxlan_tx.h) only where the kernel's OUTPUT and POSTROUTING
hooks would have done nothing to them but count. Pure.

The flow is known but for its source port (the device picks it per inner
flow from a range) and its egress (the outer route's, asked per packet): a
rule counts as matching only when it matches every packet of the flow, as
not matching only when it matches none, and a rule that may match some is
the kernel's. What is evaluated, per iptables backend: the OUTPUT chains
of raw, mangle, filter and security, and mangle's POSTROUTING (nat's see
only a connection's first packet, which the fast path never sends: the
outer connection must already exist, untranslated, where connections are
tracked — vxlan_tx.h checks it). Each must accept, through any chain it
jumps to, with nothing but rules without a target matched on the way; any
other target (DROP, MARK, LOG, CT, ...) keeps the flow the kernel's. Where
connections are tracked, conntrack has run before every hook but raw's
and calls each of these packets NEW (the connection never sees a reply:
the remote sends from a port of its own) with status CONFIRMED; in raw, and
where nothing tracks, a rule matching the connection is not evaluated.
Native nf_tables chains on output or postrouting (families ip and inet)
that do something are not evaluated either.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from .predicates import (IPV4, UNREPLIED, WIDTH, Box, FieldPredicate, Prefix, _contains, range_prefixes,
                         rule_meaning)
from .scope import _awake, _hooked, _native_finding, _no_op

# (table, chain) in the order a sent packet meets them (NF_IP_PRI_*)
SENT_PATH = (("raw", "OUTPUT"), ("mangle", "OUTPUT"), ("filter", "OUTPUT"), ("security", "OUTPUT"),
             ("mangle", "POSTROUTING"))
_NATIVE_HOOKS = frozenset({"output", "postrouting"})
_MAX_DEPTH = 64
UDP = 17


@dataclass(frozen=True)
class SentFlow:
    """The packets: from `src` to `dst`, UDP from a port in `sports`
    (inclusive) to `dport`, out of whichever device the route picks."""

    src: str
    dst: str
    sports: tuple[int, int]
    dport: int

    def fields(self) -> dict[str, frozenset[Prefix]]:
        """Per field, the prefixes whose union is every value the flow's
        packets have there (a field not named: any value)."""
        lo, hi = self.sports
        return {"src": frozenset({(int(ipaddress.IPv4Address(self.src)), 32)}),
                "dst": frozenset({(int(ipaddress.IPv4Address(self.dst)), 32)}),
                "l4s": range_prefixes(UDP << 16 | lo, UDP << 16 | hi, WIDTH["l4s"]),
                "l4d": frozenset({(UDP << 16 | self.dport, WIDTH["l4d"])}),
                "tcpflags": frozenset({(0, WIDTH["tcpflags"])}), "ctnat": frozenset({(0, WIDTH["ctnat"])}),
                "iif": frozenset({(0, WIDTH["iif"])})}


class _Kernel(Exception):
    """The kernel may do something to some of the flow's packets: why."""


def sent_untouched(netfilter, links, addrtypes, flow: SentFlow, tracked: bool) -> str | None:
    """None when every hook on the flow's way out accepts all of its packets
    and does nothing else to them; else why not, naming the rule or chain.
    `tracked`: the kernel tracks connections (scope.FilterScope.stateful)."""
    if netfilter.native_error:
        return netfilter.native_error
    for chain in netfilter.native.chains:
        if chain.family in ("ip", "inet") and chain.hook in _NATIVE_HOOKS and chain.kind != "nat" \
                and _awake(netfilter, chain) and not _no_op(chain):
            return _native_finding(chain)
    if netfilter.errors:
        return netfilter.errors[0]
    values = flow.fields()
    sets = {s.name: s for s in netfilter.ipsets}
    for ruleset in netfilter.rulesets:
        for table_name, chain_name in SENT_PATH:
            table = ruleset.table(table_name)
            if table is None or table.chain(chain_name) is None or not _hooked(netfilter, ruleset, "ip", table_name):
                continue
            connection = UNREPLIED if tracked and table_name != "raw" else None
            where = f"{ruleset.tool} {table_name} {chain_name}"
            try:
                # (a RETURN there, or a goto's chain ending, ends in the policy too)
                outcome = _run(table, chain_name, values, links, sets, addrtypes, connection, where, 0)
                if (outcome or table.chain(chain_name).policy) not in ("accept", "ACCEPT"):
                    raise _Kernel(f"{where}: its policy drops them")
            except _Kernel as why:
                return str(why)
    return None


def _run(table, name: str, values, links, sets, addrtypes, connection, where: str, depth: int) -> str | None:
    """"accept", or None when the chain returns or ends (a built-in
    chain's policy is then its caller's to apply); _Kernel when the outcome
    is not all packets accepted."""
    if depth > _MAX_DEPTH:
        raise _Kernel(f"{where}: chains nested deeper than {_MAX_DEPTH}")
    chain = table.chain(name)
    for rule in chain.rules:
        meaning = rule_meaning(rule, links, sets, IPV4, addrtypes, connection)
        said = f"{where} #{rule.position} ({rule.text})"
        if meaning.unsure and _matches(meaning.unsure, values) != "none":
            raise _Kernel(f"{said}: {meaning.unsure_reason}")
        matched = _matches(meaning.boxes, values)
        if matched == "none":
            continue
        if meaning.unsupported:
            raise _Kernel(f"{said}: {meaning.unsupported[0]} is not evaluated here")
        if matched == "some":
            raise _Kernel(f"{said}: may match some of them")
        target = rule.target
        if target == "":
            continue
        if target == "ACCEPT":
            return "accept"
        if target == "RETURN":
            return None
        jumped = table.chain(target)
        if jumped is None or jumped.policy is not None:
            raise _Kernel(f"{said}: {target}" + (" drops them" if target == "DROP" else ", the kernel's to apply"))
        outcome = _run(table, target, values, links, sets, addrtypes, connection, where, depth + 1)
        if outcome is not None or rule.goto:
            return outcome
    return None


def _matches(boxes: tuple[Box, ...], values: dict[str, frozenset[Prefix]]) -> str:
    """"all", "none" or "some": how many of the flow's packets lie in the
    union of these disjoint boxes ("some" also where that is not told
    without splitting a prefix)."""
    found = [_box_matches(box, values) for box in boxes]
    if "all" in found:
        return "all"
    return "none" if all(f == "none" for f in found) else "some"


def _box_matches(box: Box, values: dict[str, frozenset[Prefix]]) -> str:
    every = True
    for name, pred in box.fields:
        held = values.get(name)
        if held is None:                    # any value: only an unconstrained predicate holds them all
            if pred.inside is not None or pred.outside:
                every = False
            continue
        width = WIDTH[name]
        if all(_none_in(pred, p, width) for p in held):
            return "none"
        if not all(_all_in(pred, p, width) for p in held):
            every = False
    return "all" if every else "some"


def _all_in(pred: FieldPredicate, prefix: Prefix, width: int) -> bool:
    inside = pred.inside is None or any(_within(prefix, q, width) for q in pred.inside)
    return inside and not any(_overlap(prefix, q, width) for q in pred.outside)


def _none_in(pred: FieldPredicate, prefix: Prefix, width: int) -> bool:
    outside = pred.inside is not None and not any(_overlap(prefix, q, width) for q in pred.inside)
    return outside or any(_within(prefix, q, width) for q in pred.outside)


def _within(prefix: Prefix, of: Prefix, width: int) -> bool:
    """Whether `prefix` lies within `of`."""
    return of[1] <= prefix[1] and _contains(of, prefix[0], width)


def _overlap(a: Prefix, b: Prefix, width: int) -> bool:
    return _within(a, b, width) or _within(b, a, width)
