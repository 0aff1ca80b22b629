"""The native nf_tables chains (the `nft` tool's) that filter forwarded
packets, read into the model iptables' rules are: every base chain of type
filter on the forward hook of a table of family ip, ip6 or inet — with the
regular chains of its table it may jump to — as one Ruleset per base chain
and packet family (an inet chain: one for IPv4, one for IPv6), each rule
decoded by nft_rules.decode_native_rule. The filter node evaluates each such
base chain as one more FORWARD hook: a packet is forwarded only if every
hook accepts it, so their priorities, and their order beside iptables'
FORWARD chains, change nothing the fast path decides. Pure."""
from __future__ import annotations

from collections.abc import Iterable

from .iptables import Chain, IptTable, Ruleset
from .model import NftChain
from .nft_rules import decode_native_rule

# a native table's family -> the families of the packets it filters
FORWARD_FAMILIES = {"ip": ("ip",), "ip6": ("ip6",), "inet": ("ip", "ip6")}


def forward_rulesets(chains: Iterable[NftChain], rules: dict[tuple[str, str, str], list[dict[int, bytes]]]
                     ) -> tuple[Ruleset, ...]:
    """The Rulesets of the forward filter base chains among `chains`;
    `rules`: each chain's rules, (family, table, chain) -> the attributes of
    its NFT_MSG_NEWRULE answers, in chain order."""
    chains = tuple(chains)
    out = []
    for base in chains:
        if base.hook != "forward" or base.kind != "filter" or base.family not in FORWARD_FAMILIES \
                or base.policy not in ("accept", "drop"):
            continue
        regular = [c for c in chains if (c.family, c.table) == (base.family, base.table) and not c.hook]
        for family in FORWARD_FAMILIES[base.family]:
            table = IptTable(base.table, tuple(
                Chain(chain.name, base.policy.upper() if chain is base else None,
                      _rules(chain, family, rules.get((chain.family, chain.table, chain.name), ())))
                for chain in [base, *regular]))
            out.append(Ruleset(f"{base.family} {base.table} {base.name}", (table,), (), family, source="kernel",
                               native=f"{base.family} {base.table}", entry=base.name))
    return tuple(out)


def _rules(chain: NftChain, family: str, answers) -> tuple:
    """The chain's rules as they treat `family`'s packets (one that never
    matches them is left out; the others keep their place in the chain)."""
    decoded = (decode_native_rule(chain.name, position, a, family, chain.family)
               for position, a in enumerate(answers, 1))
    return tuple(rule for rule in decoded if rule is not None)
