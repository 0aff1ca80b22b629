"""What `-m addrtype` (xt_addrtype) says of an IPv4 address, from the routes
a snapshot holds: the address space cut into disjoint prefixes, each with
its type, and the prefixes whose type the snapshot cannot decide. Pure.

The kernel (inet_dev_addr_type() without an interface) answers BROADCAST
for 0.0.0.0/8 and 255.255.255.255, MULTICAST for 224.0.0.0/4, and otherwise
the type of the longest route in the local table containing the address,
UNICAST where none does — and where that route is of a type whose lookup
fails (blackhole, unreachable, prohibit, throw, nat, xresolve: the lookup
returns the error, and UNICAST stands). Until the namespace's first routing
rule is added, though, the local table is the main table's alias
(fib_new_table(): one trie for both), so a main-table route can win that
lookup: one as long as a local-table prefix or longer, or a main route of a
type of its own (local, broadcast, anycast). The kernel never merges them
again and says nothing of it, so while only the three default rules exist
those prefixes are unsure: their packets go to the kernel. A namespace with
a rule beyond the defaults has certainly split them, and then the local
table alone decides."""
from __future__ import annotations

from dataclasses import dataclass

from linuxfp.state.model import RT_TABLE_LOCAL, RT_TABLE_MAIN

from .predicates import Prefix, range_prefixes

AF_INET = 2
WIDTH = 32
# xt_addrtype's names, as the kernel's RTN_* (the bit of a type in its masks)
TYPES = ("UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST", "BLACKHOLE", "UNREACHABLE",
         "PROHIBIT", "THROW", "NAT", "XRESOLVE")
UNSURE = "unsure"
# What the kernel answers before any lookup.
FIXED = (((0, 8), "BROADCAST"), ((0xE0000000, 4), "MULTICAST"), ((0xFFFFFFFF, 32), "BROADCAST"))
DEFAULT_RULES = frozenset({(0, RT_TABLE_LOCAL), (32766, RT_TABLE_MAIN), (32767, 253)})
# Route types whose lookup fails (fib_props[].error): the address stays UNICAST.
FAILING = frozenset({"blackhole", "unreachable", "prohibit", "throw", "nat", "xresolve"})


@dataclass(frozen=True)
class AddressTypes:
    pieces: tuple[tuple[Prefix, str], ...]     # disjoint, covering every address: (prefix, TYPE or UNSURE)
    merged_possible: bool                      # why some are unsure

    @property
    def why_unsure(self) -> str:
        if self.merged_possible:
            return ("until a routing rule is added the main table shares the local table's trie, and its "
                    "routes there may win")
        return "local-table routes of two types on one prefix"

    def prefixes(self, types) -> frozenset[Prefix]:
        return frozenset(p for p, t in self.pieces if t in types)

    @property
    def unsure(self) -> frozenset[Prefix]:
        return self.prefixes((UNSURE,))


def address_types(routes, rules) -> AddressTypes:
    """`routes`: Snapshot.routes (every local-table route and every main-table
    route that is not plain unicast); `rules`: Snapshot.rules."""
    merged_possible = not any(r.family == AF_INET and (r.priority, r.table) not in DEFAULT_RULES for r in rules)
    local: dict[Prefix, set[str]] = {}
    main_other: set[Prefix] = set()
    for route in routes:
        if route.family != AF_INET:
            continue
        prefix = _prefix(route.dst)
        kind = "UNICAST" if route.type in FAILING else route.type.upper()
        if route.table == RT_TABLE_LOCAL:
            local.setdefault(prefix, set()).add(kind)
        elif route.table == RT_TABLE_MAIN and kind != "UNICAST":
            main_other.add(prefix)
    pieces: dict[Prefix, str] = {(0, 0): "UNICAST"}
    for prefix in sorted(local, key=lambda p: p[1]):
        kinds = local[prefix]
        # (two types on one prefix: which the lookup meets first is not ours to say)
        _carve(pieces, prefix, kinds.pop() if len(kinds) == 1 else UNSURE)
    if merged_possible:
        # Main's routes share the trie: any as long as or longer than a
        # local prefix may win there, and its own types anywhere.
        for prefix in sorted(set(local) | main_other, key=lambda p: p[1]):
            _carve(pieces, prefix, UNSURE)
    for prefix, kind in FIXED:
        _carve(pieces, prefix, kind)
    return AddressTypes(tuple(sorted(_coalesced(pieces).items())), merged_possible)


def _prefix(text: str) -> Prefix:
    address, _, length = text.partition("/")
    value = 0
    for part in address.split("."):
        value = value << 8 | int(part)
    return (value, int(length or 32))


def _carve(pieces: dict[Prefix, str], prefix: Prefix, kind: str) -> None:
    """Give `prefix` the type `kind`: pieces inside it go, the piece holding
    it keeps the rest of itself. Carved shortest first, a prefix lies in one
    piece (the rest of a split is never longer than what split it): found
    by its length's ancestors, not by a scan of every piece."""
    value, length = prefix
    for shorter in range(length, -1, -1):
        holder = (value >> (WIDTH - shorter) << (WIDTH - shorter), shorter)
        if holder in pieces:
            held = pieces.pop(holder)
            for rest in _minus(holder, prefix) if shorter < length else ():
                pieces[rest] = held
            pieces[prefix] = kind
            return
    for (pv, pl), pkind in list(pieces.items()):
        if pl >= length and pv >> (WIDTH - length) == value >> (WIDTH - length):
            del pieces[(pv, pl)]
        elif pl < length and pv >> (WIDTH - pl) == value >> (WIDTH - pl):
            del pieces[(pv, pl)]
            for rest in _minus((pv, pl), prefix):
                pieces[rest] = pkind
    pieces[prefix] = kind


def _coalesced(pieces: dict[Prefix, str]) -> dict[Prefix, str]:
    """Two halves of one prefix with one type made that prefix, longest first."""
    pieces = dict(pieces)
    for length in range(WIDTH, 0, -1):
        for (value, plen), kind in sorted(pieces.items()):
            if plen != length or (value, plen) not in pieces:
                continue
            sibling = (value ^ (1 << (WIDTH - length)), length)
            if pieces.get(sibling) == kind:
                del pieces[(value, plen)], pieces[sibling]
                pieces[(value & ~(1 << (WIDTH - length)), length - 1)] = kind
    return pieces


def _minus(outer: Prefix, inner: Prefix) -> list[Prefix]:
    """outer without inner (which lies within it), as prefixes."""
    lo, hi = outer[0], outer[0] + (1 << (WIDTH - outer[1])) - 1
    ilo, ihi = inner[0], inner[0] + (1 << (WIDTH - inner[1])) - 1
    out: list[Prefix] = []
    if lo < ilo:
        out += range_prefixes(lo, ilo - 1, WIDTH)
    if ihi < hi:
        out += range_prefixes(ihi + 1, hi, WIDTH)
    return out
