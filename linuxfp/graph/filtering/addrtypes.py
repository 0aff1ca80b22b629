"""What `-m addrtype` (xt_addrtype) says of an IPv4 address, from the routes
a snapshot holds: the address space cut into disjoint prefixes, each with
its type, and the prefixes whose type the fast path leaves to the kernel.
Pure.

The kernel (inet_dev_addr_type() without an interface) answers BROADCAST
for 0.0.0.0/8 and 255.255.255.255, MULTICAST for 224.0.0.0/4; otherwise it
looks the address up in the local table: the type of the longest route
holding it, UNICAST where none does or where that route's lookup fails
(blackhole, unreachable, prohibit, throw, nat, xresolve return the error),
and BROADCAST for everything while the namespace has no local table yet
(it is made with the first local route).

Exact only where no change the controller has not seen yet could matter:
- every local-table prefix is unsure: an address removed there is UNICAST
  for the kernel at once (and the router, reading the FIB live, forwards to
  it) while the classifier still says LOCAL until it is rebuilt; and until
  the namespace's first routing rule the local table is the main table's
  alias (fib_new_table(): one trie), so main's routes there may win;
- so is every main-table route of a type of its own (local, broadcast,
  anycast), for that alias;
- and everything but the fixed ranges when no local-table route is known.
Packets from or to unsure prefixes go to the kernel. Forwarded ones almost
never are: the host's own, broadcast and martian addresses.
"""
from __future__ import annotations

from dataclasses import dataclass

from linuxfp.state.model import RT_TABLE_LOCAL, RT_TABLE_MAIN

from .predicates import Prefix, range_prefixes

AF_INET = 2
BITS = 32
# xt_addrtype's names, as the kernel's RTN_* (the bit of a type in its masks)
TYPES = ("UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST", "BLACKHOLE", "UNREACHABLE",
         "PROHIBIT", "THROW", "NAT", "XRESOLVE")
UNSURE = "unsure"
# What the kernel answers before any lookup.
FIXED = (((0, 8), "BROADCAST"), ((0xE0000000, 4), "MULTICAST"), ((0xFFFFFFFF, 32), "BROADCAST"))
# Route types whose lookup fails (fib_props[].error): the address stays UNICAST.
FAILING = frozenset({"blackhole", "unreachable", "prohibit", "throw", "nat", "xresolve"})


@dataclass(frozen=True)
class AddressTypes:
    pieces: tuple[tuple[Prefix, str], ...]     # disjoint, covering every address: (prefix, TYPE or UNSURE)
    local_table: bool = True                   # a local-table route was seen

    @property
    def why_unsure(self) -> str:
        if not self.local_table:
            return "no local table yet: the kernel calls every address BROADCAST until it has one"
        return ("local-table addresses may change before the classifier follows, and main-table routes may "
                "share the local table's trie")

    def prefixes(self, types) -> frozenset[Prefix]:
        return frozenset(p for p, t in self.pieces if t in types)

    @property
    def unsure(self) -> frozenset[Prefix]:
        return self.prefixes((UNSURE,))


def address_types(routes) -> AddressTypes:
    """`routes`: Snapshot.routes (every local-table route and every main-table
    route that is not plain unicast)."""
    unsure: set[Prefix] = set()
    local_table = False
    for route in routes:
        if route.family != AF_INET:
            continue
        if route.table == RT_TABLE_LOCAL:
            local_table = True
            unsure.add(_prefix(route.dst))
        elif route.table == RT_TABLE_MAIN and route.type not in FAILING and route.type != "unicast":
            unsure.add(_prefix(route.dst))
    if not local_table:
        unsure = {(0, 0)}
    pieces: dict[Prefix, str] = {(0, 0): "UNICAST"}
    for prefix in sorted(unsure, key=lambda p: p[1]):
        _carve(pieces, prefix, UNSURE)
    for prefix, kind in FIXED:
        _carve(pieces, prefix, kind)
    return AddressTypes(tuple(sorted(_coalesced(pieces).items())), local_table)


def _prefix(text: str) -> Prefix:
    address, _, length = text.partition("/")
    value = 0
    for part in address.split("."):
        value = value << 8 | int(part)
    return (value, int(length or 32))


def _carve(pieces: dict[Prefix, str], prefix: Prefix, kind: str) -> None:
    """Give `prefix` the type `kind`: pieces inside it go, the piece holding
    it keeps the rest of itself. A prefix carved no shorter than any before
    lies in one piece (the rest of a split is never longer than what split
    it), found by its ancestors; the others (the fixed ranges) by a scan."""
    value, length = prefix
    for shorter in range(length, -1, -1):
        holder = (value >> (BITS - shorter) << (BITS - shorter), shorter)
        if holder in pieces:
            held = pieces.pop(holder)
            for rest in _minus(holder, prefix) if shorter < length else ():
                pieces[rest] = held
            pieces[prefix] = kind
            return
    for (pv, pl), pkind in list(pieces.items()):
        if pl >= length and pv >> (BITS - length) == value >> (BITS - length):
            del pieces[(pv, pl)]
        elif pl < length and pv >> (BITS - pl) == value >> (BITS - pl):
            del pieces[(pv, pl)]
            for rest in _minus((pv, pl), prefix):
                pieces[rest] = pkind
    pieces[prefix] = kind


def _coalesced(pieces: dict[Prefix, str]) -> dict[Prefix, str]:
    """Two halves of one prefix with one type made that prefix, longest first."""
    pieces = dict(pieces)
    for length in range(BITS, 0, -1):
        for (value, plen), kind in sorted(pieces.items()):
            if plen != length or (value, plen) not in pieces:
                continue
            sibling = (value ^ (1 << (BITS - length)), length)
            if pieces.get(sibling) == kind:
                del pieces[(value, plen)], pieces[sibling]
                pieces[(value & ~(1 << (BITS - length)), length - 1)] = kind
    return pieces


def _minus(outer: Prefix, inner: Prefix) -> list[Prefix]:
    """outer without inner (which lies within it), as prefixes."""
    lo, hi = outer[0], outer[0] + (1 << (BITS - outer[1])) - 1
    ilo, ihi = inner[0], inner[0] + (1 << (BITS - inner[1])) - 1
    out: list[Prefix] = []
    if lo < ilo:
        out += range_prefixes(lo, ilo - 1, BITS)
    if ihi < hi:
        out += range_prefixes(ihi + 1, hi, BITS)
    return out
