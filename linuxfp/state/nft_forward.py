"""The native nf_tables chains (the `nft` tool's) that filter forwarded
packets, read into the model iptables' rules are: every base chain of type
filter on the forward hook of a table of family ip, ip6 or inet — with the
regular chains of its table it may jump to — as one Ruleset per base chain
and packet family (an inet chain: one for IPv4, one for IPv6), each rule
decoded by nft_rules.decode_native_rule. The filter node evaluates each such
base chain as one more FORWARD hook: a packet is forwarded only if every
hook accepts it, so their priorities, and their order beside iptables'
FORWARD chains, change nothing the fast path decides (they order the
counts Linux would have kept: program.verdict_and_counted). Pure."""
from __future__ import annotations

from collections.abc import Iterable

from . import netlink as nl
from .iptables import Chain, IptTable, Ruleset
from .model import NftChain
from .netfilter_hooks import FORWARD_PATH_HOOKS, NF_IP_PRI_CONNTRACK
from .nft_rules import NFTA_DATA_VALUE, KeySet, decode_native_rule

# a native table's family -> the families of the packets it filters
FORWARD_FAMILIES = {"ip": ("ip",), "ip6": ("ip6",), "inet": ("ip", "ip6")}

# linux/netfilter/nf_tables.h
NFT_MSG_NEWSETELEM, NFT_MSG_GETSETELEM = 12, 13
NFTA_SET_NAME, NFTA_SET_FLAGS, NFTA_SET_KEY_LEN, NFTA_SET_DATA_TYPE = 2, 3, 5, 6
NFTA_SET_EXPR, NFTA_SET_EXPRESSIONS = 17, 18
NFT_SET_ANONYMOUS, NFT_SET_CONSTANT, NFT_SET_INTERVAL = 0x1, 0x2, 0x4
NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_ELEMENTS = 1, 2, 3
NFTA_LIST_ELEM = 1
NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_FLAGS, NFTA_SET_ELEM_USERDATA, NFTA_SET_ELEM_KEY_END = 1, 3, 6, 10
NFT_SET_ELEM_INTERVAL_END = 0x1
# what an element of a constant set may carry beyond these changes what a
# lookup does (data: a map; expressions, an object: state; a timeout); its
# user data is the nft tool's (how to print it)
_ELEMENT_ATTRIBUTES = frozenset({NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_FLAGS, NFTA_SET_ELEM_USERDATA,
                                 NFTA_SET_ELEM_KEY_END})


def constant_anonymous(a: dict[int, bytes]) -> bool:
    """Whether an NFT_MSG_NEWSET answer is a rule's own set (`{ 22, 80 }`):
    anonymous and constant (it never changes while the rule exists), a set
    of keys or of intervals — not a map, with no timeouts, no expressions."""
    flags = nl.be32(a.get(NFTA_SET_FLAGS, b"\0\0\0\0"))
    return (flags & (NFT_SET_ANONYMOUS | NFT_SET_CONSTANT) == NFT_SET_ANONYMOUS | NFT_SET_CONSTANT
            and not flags & ~(NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_INTERVAL)
            and NFTA_SET_DATA_TYPE not in a and NFTA_SET_EXPR not in a and NFTA_SET_EXPRESSIONS not in a
            and NFTA_SET_KEY_LEN in a)


def static_named(a: dict[int, bytes], written: Iterable[str]) -> bool:
    """Whether an NFT_MSG_NEWSET answer is a named set of keys or intervals
    that only commits change (`set blocklist { type ipv4_addr; flags
    interval; elements = { ... } }`): not a map, no timeouts (an element
    would expire with no commit), not dynamic, no expressions, and no
    dynset of its table writing it from the packet path (`written`: the
    names dynsets of its table name). A commit moves the nf_tables
    generation, which the datapath checks: its elements, as last read, are
    exactly the kernel's while it acts."""
    flags = nl.be32(a.get(NFTA_SET_FLAGS, b"\0\0\0\0"))
    return (not flags & ~(NFT_SET_CONSTANT | NFT_SET_INTERVAL)
            and nl.cstr(a.get(NFTA_SET_NAME, b"")) not in set(written)
            and NFTA_SET_DATA_TYPE not in a and NFTA_SET_EXPR not in a and NFTA_SET_EXPRESSIONS not in a
            and NFTA_SET_KEY_LEN in a)


def key_set(a: dict[int, bytes], elements: list[dict[int, bytes]]) -> KeySet | None:
    """A constant_anonymous() or static_named() set's keys as ranges, from its NFT_MSG_NEWSETELEM
    answers; None where an element is more than a key (or a range) and the
    set could do more than a lookup tells."""
    flags, width = nl.be32(a.get(NFTA_SET_FLAGS, b"\0\0\0\0")), nl.be32(a[NFTA_SET_KEY_LEN])
    keyed: list[tuple[int, bool, int | None]] = []     # key, interval end, last key of a range
    for answer in elements:
        for _kind, element in nl.parse_attr_list(answer.get(NFTA_SET_ELEM_LIST_ELEMENTS, b"")):
            e = nl.parse_attrs(element)
            if set(e) - _ELEMENT_ATTRIBUTES or NFTA_SET_ELEM_KEY not in e:
                return None
            element_flags = nl.be32(e.get(NFTA_SET_ELEM_FLAGS, b"\0\0\0\0"))
            key = _value(e[NFTA_SET_ELEM_KEY], width)
            last = _value(e[NFTA_SET_ELEM_KEY_END], width) if NFTA_SET_ELEM_KEY_END in e else None
            if key is None or element_flags & ~NFT_SET_ELEM_INTERVAL_END or (last is not None and last < key) \
                    or (element_flags and not flags & NFT_SET_INTERVAL) or (last is not None and element_flags):
                return None
            keyed.append((key, bool(element_flags), last))
    keyed.sort()
    if len({key for key, _, _ in keyed}) != len(keyed):
        return None                 # (two elements at one key: not a layout read here)
    ranges = []
    for n, (key, end, last) in enumerate(keyed):
        if end:
            continue
        if last is None and flags & NFT_SET_INTERVAL:
            # an interval set of single keys (rbtree): an element opens a
            # range that runs to the next element, an interval end or not
            last = keyed[n + 1][0] - 1 if n + 1 < len(keyed) else (1 << (8 * width)) - 1
        ranges.append((key, key if last is None else last))
    return KeySet(width, tuple(ranges))


def _value(data: bytes, width: int) -> int | None:
    value = nl.parse_attrs(data).get(NFTA_DATA_VALUE)
    return int.from_bytes(value, "big") if value is not None and len(value) == width else None




def forward_rulesets(chains: Iterable[NftChain], rules: dict[tuple[str, str, str], list[dict[int, bytes]]],
                     sets: dict[tuple[str, str], dict[str, KeySet]] | None = None) -> tuple[Ruleset, ...]:
    """The Rulesets of the filter base chains among `chains` that forwarded
    packets cross (FORWARD_PATH_HOOKS); `rules`: each chain's rules,
    (family, table, chain) -> the attributes of its NFT_MSG_NEWRULE
    answers, in chain order; `sets`: the key sets (constant_anonymous,
    static_named) of each (family, table), by name, that its rules may look
    keys up in."""
    chains = tuple(chains)
    sets = sets or {}
    out = []
    for base in chains:
        if base.hook not in FORWARD_PATH_HOOKS or base.kind != "filter" or base.family not in FORWARD_FAMILIES \
                or base.policy not in ("accept", "drop"):
            continue
        regular = [c for c in chains if (c.family, c.table) == (base.family, base.table) and not c.hook]
        for family in FORWARD_FAMILIES[base.family]:
            table = IptTable(base.table, tuple(
                Chain(chain.name, base.policy.upper() if chain is base else None,
                      _rules(chain, family, rules.get((chain.family, chain.table, chain.name), ()),
                             sets.get((base.family, base.table), {}), base))
                for chain in [base, *regular]))
            out.append(Ruleset(f"{base.family} {base.table} {base.name}", (table,), (), family, source="kernel",
                               native=f"{base.family} {base.table}", entry=base.name, priority=base.priority,
                               hook=base.hook))
    return tuple(out)


def _rules(chain: NftChain, family: str, answers, sets: dict[str, KeySet], base: NftChain) -> tuple:
    """The chain's rules as they treat `family`'s packets reaching it from
    `base` (one that never matches them is left out; the others keep their
    place in the chain)."""
    before_routing = base.hook == "prerouting"
    before_conntrack = before_routing and base.priority <= NF_IP_PRI_CONNTRACK
    decoded = (decode_native_rule(chain.name, position, a, family, chain.family, sets,
                                  before_routing=before_routing, before_conntrack=before_conntrack)
               for position, a in enumerate(answers, 1))
    return tuple(rule for rule in decoded if rule is not None)
