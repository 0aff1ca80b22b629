"""What an iptables rule matches, as per-field predicates the classifier can
partition: a rule becomes one or more disjoint boxes, each a conjunction of
one predicate per header field. Pure.

Fields (what the fast path extracts from a forwarded packet):
  src, dst   the IPv4 addresses (32 bits), or for ip6tables' rules
  src6, dst6 the IPv6 addresses (128 bits)
  l4s, l4d   protocol << 16 | source/destination port for TCP and UDP;
             protocol << 16 | ICMP (ICMPv6) type / code for ICMP (ICMPv6);
             protocol << 16 else
  tcpflags   the TCP header's flags byte (CWR ECE URG ACK PSH RST SYN FIN);
             0 for other protocols (a rule on it names -p tcp)
  iif, oif   ingress and egress ifindex
  ctnat      the NAT the packet's connection carries (the conntrack entry's
             status: CTNAT_SNAT, CTNAT_DNAT), which `--ctstate SNAT,DNAT`
             match, and CTNAT_DESTINATION_TRANSLATED where the conntrack
             node translated this packet's destination; 0 for a connection
             without NAT
A Family names the fields of one address family and what its rules may say
(ICMP or ICMPv6, `-f`): the rest is the same for both.
A field predicate is a union of prefixes that must contain the value (None:
any value) and a union of prefixes that must not. Port ranges become
prefixes; `-i eth+` becomes the ifindexes whose names match.

Connection-tracking matches (`-m conntrack --ctstate`, `-m state --state`,
`--ctstatus`) are constants but for SNAT and DNAT: while the kernel tracks
connections, the filter node classifies only packets of an established
connection — one that carries no NAT, or, where the kernel translates
(Program.translated), one the conntrack node translated
(bpf_modules/filter.h and conntrack.h check the kernel's own entry; every
other packet goes to the kernel, unless a chain before conntrack drops it
first, where conntrack matches are the kernel's) — so each such match holds for all
of them or for none, and `--ctstate SNAT` / `DNAT` ask the entry's status
(the ctnat field).

A match the fast path cannot evaluate makes the rule `unsupported`: its box
keeps the matches it can evaluate (a superset of what it matches) and its
packets go to the kernel, so only packets that could reach that rule leave
the fast path.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from itertools import product

from linuxfp.state.ipset import NFPROTO_IPV4, NFPROTO_IPV6, NFPROTO_UNSPEC
from linuxfp.state.nft_rules import UNKNOWN_MODULE

FIELDS = ("src", "dst", "l4s", "l4d", "tcpflags", "ctnat", "iif", "oif")
FIELDS6 = ("src6", "dst6", "l4s", "l4d", "tcpflags", "ctnat", "iif", "oif")
WIDTH = {"src": 32, "dst": 32, "src6": 128, "dst6": 128, "l4s": 24, "l4d": 24, "tcpflags": 8, "iif": 32, "oif": 32,
         "ctnat": 3}
# ctnat's bits (filter.h's LFP_FLT_CTNAT_BITS; common.h's, shifted down by
# LFP_CT_NAT_SHIFT): whether the conntrack node translated this packet's
# destination at PREROUTING (LFP_NAT_DST: a DNAT connection's request, or an
# SNAT one's reply), and the entry's IPS_SRC_NAT and IPS_DST_NAT
# (LFP_CT_SNAT, LFP_CT_DNAT), which xt_conntrack's SNAT and DNAT states
# stand for
CTNAT_DESTINATION_TRANSLATED, CTNAT_SNAT, CTNAT_DNAT = 1, 2, 4
# Not an x_tables match: the packets whose destination the conntrack node
# translated (a rule of a chain the kernel runs ahead of destination NAT,
# which sees them as they came: scope.py)
DESTINATION_TRANSLATED = ("lfp", "--destination-translated")


@dataclass(frozen=True)
class Family:
    """What differs between iptables' and ip6tables' rules."""

    name: str                   # as Ruleset.family: "ip" or "ip6"
    fields: tuple[str, ...]     # in the classifier's order (filter.h's LFP_FLT_* bits)
    network: type               # parses -s / -d
    icmp: int                   # the protocol whose type and code sit where ports would
    icmp_match: tuple[str, str]  # its match module and option
    icmp_types: dict = field(hash=False, compare=False)     # names -> (type, code or None)
    fragments: bool = False     # whether -f exists (iptables only)
    nfproto: int = NFPROTO_IPV4  # its ipsets' family (IpSet.family)

    @property
    def src(self) -> str:
        return self.fields[0]

    @property
    def dst(self) -> str:
        return self.fields[1]

    def address(self, direction: str) -> str:
        """The field of `src` / `dst` (an ipset direction, -s / -d)."""
        return self.src if direction == "src" else self.dst

Prefix = tuple[int, int]            # (value, length) over the field's width

PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1, "all": 0, "ip": 0, "0": 0, "sctp": 132, "udplite": 136,
             "dccp": 33, "gre": 47, "esp": 50, "ah": 51, "icmpv6": 58, "ipv6-icmp": 58, "ospf": 89}
PORTS_OF = {6, 17}                  # protocols whose ports the fast path reads
# libxt_tcp's flag names (`--tcp-flags MASK COMP`); --syn is
# `--tcp-flags SYN,RST,ACK,FIN SYN`, as iptables-save prints it
TCP_FLAGS = {"FIN": 0x01, "SYN": 0x02, "RST": 0x04, "PSH": 0x08, "ACK": 0x10, "URG": 0x20, "ALL": 0x3F,
             "NONE": 0}
SYN_ONLY = ("FIN,SYN,RST,ACK", "SYN")
_MODULES = frozenset({"comment", "tcp", "udp", "multiport", "icmp", "icmp6", "mark", "conntrack", "state", "set",
                      "addrtype"})
# What conntrack says of every packet the filter node classifies while
# connections are tracked: ctstate ESTABLISHED (its entry has seen a reply),
# status CONFIRMED|SEEN_REPLY|ASSURED; SNAT and DNAT per packet (ctnat).
CT_STATES = frozenset({"NEW", "ESTABLISHED", "RELATED", "INVALID", "UNTRACKED", "SNAT", "DNAT"})
CT_STATUSES = frozenset({"NONE", "EXPECTED", "SEEN_REPLY", "ASSURED", "CONFIRMED"})


@dataclass(frozen=True)
class Connection:
    """What conntrack says of every packet a rule is asked about: its
    --ctstate (SNAT and DNAT aside: the ctnat field) and --ctstatus bits."""

    states: frozenset[str]
    statuses: frozenset[str]


# The packets the filter node classifies: of an established connection.
ESTABLISHED = Connection(frozenset({"ESTABLISHED"}), frozenset({"SEEN_REPLY", "ASSURED", "CONFIRMED"}))
# The packets a tunnel sends to its remote, whose connection never sees a
# reply (the remote answers from a port of its own: local_out.py).
UNREPLIED = Connection(frozenset({"NEW"}), frozenset({"CONFIRMED"}))
ICMP_TYPES = {"echo-reply": (0, None), "destination-unreachable": (3, None), "network-unreachable": (3, 0),
              "host-unreachable": (3, 1), "protocol-unreachable": (3, 2), "port-unreachable": (3, 3),
              "fragmentation-needed": (3, 4), "source-quench": (4, None), "redirect": (5, None),
              "echo-request": (8, None), "ping": (8, None), "pong": (0, None), "router-advertisement": (9, None),
              "router-solicitation": (10, None),
              "time-exceeded": (11, None), "ttl-exceeded": (11, None), "parameter-problem": (12, None),
              "timestamp-request": (13, None), "timestamp-reply": (14, None),
              "address-mask-request": (17, None), "address-mask-reply": (18, None), "any": (None, None)}
# ip6tables' names (libxt_icmp6)
ICMPV6_TYPES = {"destination-unreachable": (1, None), "no-route": (1, 0), "communication-prohibited": (1, 1),
                "beyond-scope": (1, 2), "address-unreachable": (1, 3), "port-unreachable": (1, 4),
                "failed-policy": (1, 5), "reject-route": (1, 6), "packet-too-big": (2, None),
                "time-exceeded": (3, None), "ttl-zero-during-transit": (3, 0),
                "ttl-zero-during-reassembly": (3, 1), "parameter-problem": (4, None),
                "bad-header": (4, 0), "unknown-header-type": (4, 1), "unknown-option": (4, 2),
                "echo-request": (128, None), "ping": (128, None), "echo-reply": (129, None), "pong": (129, None),
                "ttl-exceeded": (3, None),
                "router-solicitation": (133, None), "router-advertisement": (134, None),
                "neighbour-solicitation": (135, None), "neighbor-solicitation": (135, None),
                "neighbour-advertisement": (136, None), "neighbor-advertisement": (136, None),
                "redirect": (137, None)}

IPV4 = Family("ip", FIELDS, ipaddress.IPv4Network, 1, ("icmp", "--icmp-type"), ICMP_TYPES, True, NFPROTO_IPV4)
IPV6 = Family("ip6", FIELDS6, ipaddress.IPv6Network, 58, ("icmp6", "--icmpv6-type"), ICMPV6_TYPES, False,
              NFPROTO_IPV6)


@dataclass(frozen=True)
class FieldPredicate:
    inside: frozenset[Prefix] | None = None     # None: any value
    outside: frozenset[Prefix] = frozenset()

    def both(self, other: "FieldPredicate", width: int) -> "FieldPredicate":
        if self.inside is None:
            inside = other.inside
        elif other.inside is None:
            inside = self.inside
        else:
            inside = _intersect_unions(self.inside, other.inside, width)
        return FieldPredicate(inside, self.outside | other.outside)

    @property
    def empty(self) -> bool:
        return self.inside is not None and not self.inside


ANY = FieldPredicate()


@dataclass(frozen=True)
class Box:
    """A conjunction: the packet's value of every field satisfies its predicate."""

    fields: tuple[tuple[str, FieldPredicate], ...] = ()

    def get(self, name: str) -> FieldPredicate:
        return dict(self.fields).get(name, ANY)

    def both(self, other: "Box") -> "Box":
        merged = dict(self.fields)
        for name, pred in other.fields:
            merged[name] = merged[name].both(pred, WIDTH[name]) if name in merged else pred
        return Box(tuple(sorted(merged.items())))

    @property
    def empty(self) -> bool:
        return any(p.empty for _, p in self.fields)


EVERYTHING = (Box(),)
NOTHING: tuple[Box, ...] = ()


@dataclass(frozen=True)
class RuleMeaning:
    boxes: tuple[Box, ...]                   # disjoint; empty: the rule never matches
    unsupported: tuple[str, ...] = field(default=())  # matches evaluated by the kernel only
    # Packets that may match, where the fast path cannot tell (addresses of
    # unsure type: addrtypes.py), disjoint from `boxes`: the kernel decides.
    unsure: tuple[Box, ...] = ()
    unsure_reason: str = ""


def _intersect_unions(a: frozenset[Prefix], b: frozenset[Prefix], width: int) -> frozenset[Prefix]:
    """The intersection of two unions of prefixes: of every nested pair the
    longer one, i.e. each prefix of one union that lies within the other.
    Linear in the unions' sizes (each prefix asks for its ancestors), so two
    sets of 100 000 members on one field stay cheap."""
    return _within_any(a, b, width) | _within_any(b, a, width)


def _within_any(prefixes: frozenset[Prefix], union: frozenset[Prefix], width: int) -> frozenset[Prefix]:
    """The prefixes that lie within some prefix of `union`."""
    lengths = sorted({length for _, length in union})
    out = []
    for value, length in prefixes:
        for shorter in lengths:
            if shorter > length:
                break
            shift = width - shorter
            if (value >> shift << shift, shorter) in union:
                out.append((value, length))
                break
    return frozenset(out)


def _contains(prefix: Prefix, value: int, width: int) -> bool:
    value_, length = prefix
    shift = width - length
    return (value >> shift) == (value_ >> shift)


def range_prefixes(lo: int, hi: int, width: int) -> frozenset[Prefix]:
    """The fewest prefixes whose union is [lo, hi]."""
    out = []
    while lo <= hi:
        size = lo & -lo if lo else 1 << width
        while size > hi - lo + 1:
            size >>= 1
        out.append((lo, width - size.bit_length() + 1))
        lo += size
    return frozenset(out)


def _single(name: str, prefixes: frozenset[Prefix], negated: bool) -> tuple[Box, ...]:
    if negated:
        return (Box(((name, FieldPredicate(None, prefixes)),)),)
    return (Box(((name, FieldPredicate(prefixes)),)),)


def _and(*alternatives: tuple[Box, ...]) -> tuple[Box, ...]:
    """The conjunction of disjunctions of boxes, dropping empty boxes."""
    out = []
    for combo in product(*alternatives):
        box = Box()
        for part in combo:
            box = box.both(part)
        if not box.empty:
            out.append(box)
    return tuple(out)


class Unsupported(Exception):
    pass


def _address(text: str, family: Family) -> Prefix:
    # strict: iptables writes an address inside its mask; one with bits
    # outside it (a hand-made rule, printed as the kernel holds it) never
    # matches there, and must not be read as the prefix it would round to
    try:
        net = family.network(text, strict=True)
    except ValueError:
        raise Unsupported(f"address {text!r} (not a prefix, or bits outside its mask)") from None
    return (int(net.network_address), net.prefixlen)


def _interfaces(pattern: str, links) -> frozenset[Prefix]:
    """ifindexes whose names match an iptables interface pattern (`eth+`)."""
    if pattern.endswith("+"):
        hit = [l.index for l in links if l.name.startswith(pattern[:-1])]
    else:
        hit = [l.index for l in links if l.name == pattern]
    return frozenset((index, 32) for index in hit)


def _proto_prefix(proto: int) -> frozenset[Prefix]:
    return frozenset({(proto << 16, 8)})


def _ports(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition(":")
        lo_v = int(lo) if lo else 0
        hi_v = int(hi) if hi else (65535 if _ else lo_v)
        if not (0 <= lo_v <= 65535 and 0 <= hi_v <= 65535):
            raise Unsupported(f"port {part!r}")
        if lo_v > hi_v:
            lo_v, hi_v = hi_v, lo_v
        out.append((lo_v, hi_v))
    return out


def _port_prefixes(proto: int, ranges: list[tuple[int, int]]) -> frozenset[Prefix]:
    base = proto << 16
    return frozenset((base + value, 8 + length) for lo, hi in ranges for value, length in range_prefixes(lo, hi, 16))


def rule_meaning(rule, links, sets=None, family: Family = IPV4, addrtypes=None,
                 connection: Connection | None = ESTABLISHED) -> RuleMeaning:
    """The boxes of one rule of `family`'s tables, given the namespace's
    links (for -i/-o), the ipsets it may match (name -> IpSet, as
    state/ipset.py reads them), its address types (addrtypes.py; read
    only where a rule has -m addrtype) and what conntrack says of the
    packets asked about (None: not known, and its matches are not
    evaluated)."""
    parts: list[tuple[Box, ...]] = []
    unsupported: list[str] = []
    unsure: list[tuple[int, tuple[Box, ...], str]] = []     # part, its unsure boxes, why
    proto = None
    for match in rule.matches:
        if match.module == "" and match.option == "-p":
            value = match.values[0].lower() if match.values else ""
            number = PROTOCOLS.get(value, int(value) if value.isdigit() else None)
            if number is None:
                unsupported.append(str(match))
                continue
            if number == 0:
                parts.append(NOTHING if match.negated else EVERYTHING)
            else:
                parts.append(_single("l4s", _proto_prefix(number), match.negated))
                if not match.negated:
                    proto = number
    for match in rule.matches:
        # The kernel gets every packet that reaches a match not known here:
        # one that keeps state (-m limit, -m recent) changes it for packets
        # the matches after it would turn away, so those only name
        # themselves when not known either.
        after_unsupported = bool(unsupported)
        if match.module == "addrtype" and match.option in ("--src-type", "--dst-type"):
            if after_unsupported:
                continue
            try:
                exact, unsure_boxes = _addrtype_boxes(match, addrtypes, family)
            except Unsupported as exc:
                unsupported.append(f"{match} ({exc})")
                continue
            if unsure_boxes:
                unsure.append((len(parts), unsure_boxes, f"{match} (the type of "
                               f"{_some_prefixes(addrtypes.unsure)} is not known here: {addrtypes.why_unsure})"))
            parts.append(exact)
            continue
        try:
            boxes = _match_boxes(match, proto, links, sets or {}, family, connection)
        except Unsupported as exc:
            unsupported.append(f"{match} ({exc})" if str(exc) else str(match))
            continue
        except (IndexError, ValueError):
            unsupported.append(f"{match} (cannot read its value)")
            continue
        if boxes is not None and not after_unsupported:
            parts.append(boxes)
    if unsure and (unsupported or len(unsure) > 1):
        # the kernel decides the rule as a whole: its boxes must hold all it may match
        for index, boxes, why in unsure:
            parts[index] = parts[index] + boxes
        if not unsupported:
            unsupported.append("; ".join(why for _, _, why in unsure))
        unsure = []
    if unsure:
        index, boxes, why = unsure[0]
        return RuleMeaning(_and(*parts), (), _and(*(parts[:index] + [boxes] + parts[index + 1:])), why)
    return RuleMeaning(_and(*parts) if parts else EVERYTHING, tuple(unsupported))


def _addrtype_boxes(match, addrtypes, family: Family) -> tuple[tuple[Box, ...], tuple[Box, ...]]:
    """`-m addrtype --src-type / --dst-type TYPE[,TYPE...]` (with !): the
    boxes of the addresses whose type it names (or, with !, does not), and
    those of the addresses whose type is not known (addrtypes.py)."""
    from .addrtypes import TYPES

    if family is not IPV4:
        raise Unsupported("ip6tables' address types follow its routes (a route lookup per packet)")
    if addrtypes is None:
        raise Unsupported("address types not read")
    names = {word.upper() for word in match.values[0].split(",")} if match.values else set()
    if not names or not names <= set(TYPES):
        raise Unsupported(f"address type {' '.join(match.values)!r}")
    address = family.address("src" if match.option == "--src-type" else "dst")
    inside = addrtypes.prefixes(set(TYPES) - names if match.negated else names)
    exact = (Box(((address, FieldPredicate(inside)),)),) if inside else NOTHING
    unsure = addrtypes.unsure
    return exact, ((Box(((address, FieldPredicate(unsure)),)),) if unsure else ())


def _some_prefixes(prefixes) -> str:
    shown = sorted(prefixes, key=lambda p: (p[1], p[0]))[:3]
    text = ", ".join(f"{ipaddress.IPv4Network(p)}" for p in shown)
    return text + (f" and {len(prefixes) - 3} more" if len(prefixes) > 3 else "")


def _match_boxes(match, proto: int | None, links, sets, family: Family,
                 connection: Connection | None = ESTABLISHED) -> tuple[Box, ...] | None:
    """None: no constraint (or already handled)."""
    m, opt, values, neg = match.module, match.option, match.values, match.negated
    if m == UNKNOWN_MODULE:         # where a native rule stops being known (nft_rules.decode_native_rule)
        if opt:
            raise Unsupported("")
        return None
    if m == "":
        if opt == "-p":
            return None
        if opt in ("-s", "-d"):         # (a native rule's set: several prefixes, as iptables -s a,b would be)
            return _single(family.address("src" if opt == "-s" else "dst"),
                           frozenset(_address(value, family) for value in values[0].split(",")), neg)
        if opt in ("-i", "-o"):
            return _single("iif" if opt == "-i" else "oif", _interfaces(values[0], links), neg)
        if opt == "-f" and family.fragments:
            # Fragments never reach the filter node (the router passes them).
            return EVERYTHING if neg else NOTHING
        raise Unsupported("")
    if opt == "" and m in _MODULES:
        return None       # "-m NAME" itself; its options follow
    if m == "comment":
        return None
    if m in ("tcp", "udp") and opt in ("--sport", "--source-port", "--dport", "--destination-port"):
        number = PROTOCOLS[m]
        if proto != number:
            raise Unsupported(f"-m {m} without -p {m}")
        name = "l4s" if opt in ("--sport", "--source-port") else "l4d"
        return _single(name, _port_prefixes(number, _ports(values[0])), neg)
    if m == "tcp" and opt in ("--tcp-flags", "--syn"):
        if proto != PROTOCOLS["tcp"]:
            raise Unsupported("-m tcp without -p tcp")
        mask, comp = (_tcp_flags(v) for v in (values if opt == "--tcp-flags" else SYN_ONLY))
        if not mask:
            # iptables-nft writes no expression for an empty mask (its rule
            # then matches all TCP), where xt_tcp compares: not guessed at
            raise Unsupported("an empty flag mask")
        # xt_tcp: (flags & mask) == comp
        return _single("tcpflags", _values_prefixes([f for f in range(256) if f & mask == comp], 8), neg)
    if m == "multiport" and opt in ("--sports", "--source-ports", "--dports", "--destination-ports", "--ports"):
        if proto not in PORTS_OF:
            raise Unsupported("multiport without -p tcp or udp")
        prefixes = _port_prefixes(proto, _ports(values[0]))
        if opt in ("--sports", "--source-ports"):
            return _single("l4s", prefixes, neg)
        if opt != "--ports":
            return _single("l4d", prefixes, neg)
        # Source or destination port: two disjoint boxes (sport in P; sport
        # not in P and dport in P), so a jump never runs twice.
        if neg:
            return (Box((("l4d", FieldPredicate(None, prefixes)), ("l4s", FieldPredicate(None, prefixes)))),)
        return (Box((("l4s", FieldPredicate(prefixes)),)),
                Box((("l4d", FieldPredicate(prefixes)), ("l4s", FieldPredicate(None, prefixes)))))
    if (m, opt) == family.icmp_match:
        if proto != family.icmp:
            raise Unsupported(f"-m {m} without -p {'icmp' if family.icmp == 1 else 'icmpv6'}")
        icmp_type, code = _icmp_type(values[0], family.icmp_types)
        if icmp_type is None:
            return NOTHING if neg else EVERYTHING
        type_p = frozenset({((family.icmp << 16) | icmp_type, 24)})
        if code is None:
            return _single("l4s", type_p, neg)
        code_p = frozenset({((family.icmp << 16) | code, 24)})
        if not neg:
            return (Box((("l4d", FieldPredicate(code_p)), ("l4s", FieldPredicate(type_p)))),)
        return (Box((("l4s", FieldPredicate(None, type_p)),)),
                Box((("l4d", FieldPredicate(None, code_p)), ("l4s", FieldPredicate(type_p)))))
    if (m, opt) in (("conntrack", "--ctstate"), ("state", "--state")):
        states = {word.upper() for word in values[0].split(",")}
        if not states <= CT_STATES or (m == "state" and states & {"SNAT", "DNAT"}):
            raise Unsupported(f"state {values[0]!r}")      # (xt_state knows no SNAT, DNAT)
        if connection is None:
            raise Unsupported("the connection is not known here")
        if states & connection.states:
            return NOTHING if neg else EVERYTHING
        # (any listed state holds: xt_conntrack's mask)
        nat = [v for v in range(1 << WIDTH["ctnat"])
               if (v & CTNAT_SNAT and "SNAT" in states) or (v & CTNAT_DNAT and "DNAT" in states)]
        if not nat:
            return EVERYTHING if neg else NOTHING
        return _single("ctnat", _values_prefixes(nat, WIDTH["ctnat"]), neg)
    if (m, opt) == DESTINATION_TRANSLATED:
        translated = [v for v in range(1 << WIDTH["ctnat"]) if v & CTNAT_DESTINATION_TRANSLATED]
        return _single("ctnat", _values_prefixes(translated, WIDTH["ctnat"]), neg)
    if (m, opt) == ("conntrack", "--ctstatus"):
        # any of the listed bits set; EXPECTED (a helper's child) is not known here
        statuses = {word.upper() for word in values[0].split(",")}
        if not statuses <= CT_STATUSES:
            raise Unsupported(f"status {values[0]!r}")
        if connection is None:
            raise Unsupported("the connection is not known here")
        if statuses & connection.statuses:
            return NOTHING if neg else EVERYTHING
        if "EXPECTED" in statuses:
            raise Unsupported("whether the connection was expected")
        return EVERYTHING if neg else NOTHING
    if m == "set" and opt == "--match-set":
        return _set_boxes(sets.get(values[0]), values[0], values[1], neg, links, family)
    if m == "mark" and opt == "--mark":
        # A forwarded packet's mark is 0 at FORWARD: nothing before it may set
        # one for a packet the fast path decides (a MARK target in raw's or
        # mangle's PREROUTING, or a native `meta mark set`, sends the packets
        # it acts on to the kernel; tc ingress filters keep the namespace on
        # the kernel path) and the router passes marked packets — at TC,
        # which sees the mark; such rules keep the filter off XDP.
        value, _, mask = values[0].partition("/")
        hit = (0 & (int(mask, 0) if mask else 0xFFFFFFFF)) == int(value, 0)
        return EVERYTHING if hit != neg else NOTHING
    raise Unsupported("")


def _set_boxes(ipset, name: str, directions: str, negated: bool, links=(), family: Family = IPV4) -> tuple[Box, ...]:
    """`-m set --match-set NAME src|dst[,...]`: the kernel uses one direction
    per dimension of the set (the first for the address, the second for the
    port) and never matches with fewer. An address set's members are
    prefixes of that address field; an address-and-port set becomes one box
    per port (the ports' boxes are disjoint) holding that port's prefixes;
    an address-and-interface set one box per interface (`src`: -i, `dst`:
    -o) holding the prefixes of the members that name it (state/ipset.py
    mirrors only sets where that equals the kernel's longest-prefix match).
    A set of the other family never matches (ip_set_test())."""
    if ipset is None:
        raise Unsupported(f"ipset {name} was not read")
    if ipset.unsupported is not None:
        raise Unsupported(ipset.unsupported)
    flags = directions.split(",")
    if any(f not in ("src", "dst") for f in flags):
        raise Unsupported(f"direction {directions!r}")
    if len(flags) < ipset.dimension or ipset.family not in (family.nfproto, NFPROTO_UNSPEC):
        return EVERYTHING if negated else NOTHING
    address = family.address(flags[0])
    if ipset.dimension == 1:
        return _single(address, frozenset(ipset.prefixes), negated)
    if ipset.ifaces:
        return _interface_set_boxes(ipset, address, "iif" if flags[1] == "src" else "oif", negated, links)
    l4 = "l4s" if flags[1] == "src" else "l4d"
    groups: dict[tuple, set] = {}
    for value, length, proto, port in ipset.ports:
        if proto == family.icmp:      # type << 8 | code: the fast path reads them apart
            key = (("l4d", ((proto << 16) | (port & 0xFF), 24)), ("l4s", ((proto << 16) | (port >> 8), 24)))
        elif proto in PORTS_OF:
            key = ((l4, ((proto << 16) | port, 24)),)
        else:               # no ports: the kernel reads port 0
            key = ((l4, (proto << 16, 8)),)
        groups.setdefault(key, set()).add((value, length))
    if not negated:
        return tuple(Box(tuple(sorted([(address, FieldPredicate(frozenset(prefixes)))]
                                      + [(field_, FieldPredicate(frozenset({p}))) for field_, p in key])))
                     for key, prefixes in sorted(groups.items()))
    if any(len(key) > 1 for key in groups):
        raise Unsupported("! with a set holding ICMP members")
    keys = frozenset(key[0][1] for key in groups)
    boxes = [Box(((l4, FieldPredicate(None, keys)),))]
    for key, prefixes in sorted(groups.items()):
        boxes.append(Box(tuple(sorted([(address, FieldPredicate(None, frozenset(prefixes))),
                                       (l4, FieldPredicate(frozenset({key[0][1]})))]))))
    return tuple(boxes)


def _interface_set_boxes(ipset, address: str, field_: str, negated: bool, links) -> tuple[Box, ...]:
    """Per existing interface, the prefixes of the members it matches; an
    interface the classifier does not know yet misses, and the kernel
    decides for its packets."""
    groups = []
    for link in sorted(links, key=lambda l: l.index):
        prefixes = frozenset((value, length) for value, length, pattern, wildcard in ipset.ifaces
                             if (link.name.startswith(pattern) if wildcard else link.name == pattern))
        if prefixes:
            groups.append(((link.index, 32), prefixes))
    if not negated:
        return tuple(Box(tuple(sorted([(address, FieldPredicate(prefixes)), (field_, FieldPredicate(frozenset({key})))])))
                     for key, prefixes in groups)
    keys = frozenset(key for key, _ in groups)
    return (Box(((field_, FieldPredicate(None, keys)),)),) + tuple(
        Box(tuple(sorted([(address, FieldPredicate(None, prefixes)), (field_, FieldPredicate(frozenset({key})))])))
        for key, prefixes in groups)


def _tcp_flags(text: str) -> int:
    bits = 0
    for name in text.upper().split(","):
        if name not in TCP_FLAGS:
            raise Unsupported(f"TCP flag {name!r}")
        bits |= TCP_FLAGS[name]
    return bits


def _values_prefixes(values, width: int) -> frozenset[Prefix]:
    """The fewest prefixes whose union is a set of values (its runs')."""
    out: set[Prefix] = set()
    run: list[int] = []
    for value in sorted(values):
        if run and value != run[-1] + 1:
            out |= range_prefixes(run[0], run[-1], width)
            run = []
        run.append(value)
    if run:
        out |= range_prefixes(run[0], run[-1], width)
    return frozenset(out)


def _icmp_type(text: str, names: dict) -> tuple[int | None, int | None]:
    if text in names:
        return names[text]
    kind, _, code = text.partition("/")
    try:
        return int(kind), (int(code) if code else None)
    except ValueError:
        raise Unsupported(f"ICMP type {text!r}") from None
