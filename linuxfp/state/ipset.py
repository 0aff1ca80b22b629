"""The ipsets iptables rules match against, read over netlink
(NFNL_SUBSYS_IPSET, the `ipset` tool's own protocol) in the calling
thread's network namespace.

Only what the filter node can mirror exactly is decoded into members: IPv4
and IPv6 sets (family inet, inet6: IpSet.family) of types hash:ip, hash:net
and bitmap:ip (a set of prefixes: hash:ip's and bitmap:ip's `netmask` is
each member's length; a bitmap's range holds every member, and an address
outside it matches none), hash:ip,port and hash:net,port (prefix,
protocol, port; an ICMP or ICMPv6 member's port is type << 8 | code),
hash:net,iface (prefix, interface name, whether the name is a `wildcard`
prefix). Everything else is read as a reason
the fast path cannot evaluate the set (`IpSet.unsupported`), so the rules
that match it go to the kernel:
* other types and dimensions (bitmap:port, bitmap:ip,mac, hash:ip,port,ip,
  ...; a list:set is what its members match, combined by
  state/netfilter.py when all of them are address sets of one family:
  combine_list), physdev members (a bridge port's name),
  members of protocols whose ports the fast path does not read (SCTP,
  UDPLITE, the other family's ICMP), and in IPv6 sets members of extension
  headers (the kernel never matches a packet by them);
* members with a timeout: the kernel expires them with no event at all;
* hash:net `nomatch` members (longest-prefix exceptions) and a `bitmask`;
* sets a SET target changes from the packet path (state/netfilter.py asks
  for those: no system call announces those changes).

ipset sends no change notifications. The filter node's kernel watch
(bpf_modules/filter_watch.c) makes the datapath pass from the moment any
process of the namespace has sent a netfilter netlink message, until these
sets have been read again.
"""
from __future__ import annotations

import re
import socket
import struct

from . import netlink as nl
from .model import IpSet

NFNL_SUBSYS_IPSET = 6
IPSET_PROTOCOL = 7
IPSET_CMD_LIST = 7
# Attributes of a command (linux/netfilter/ipset/ip_set.h)
IPSET_ATTR_PROTOCOL = 1
IPSET_ATTR_SETNAME = 2
IPSET_ATTR_TYPENAME = 3
IPSET_ATTR_FAMILY = 5
IPSET_ATTR_DATA = 7
IPSET_ATTR_ADT = 8
# ... of a set's data and of its members
IPSET_ATTR_IP = 1
IPSET_ATTR_CIDR = 3
IPSET_ATTR_PORT = 4
IPSET_ATTR_PROTO = 7
IPSET_ATTR_TIMEOUT = 6
IPSET_ATTR_CADT_FLAGS = 8
IPSET_ATTR_BITMASK = 12
IPSET_ATTR_NETMASK = 20
IPSET_ATTR_NAME = 18            # a list:set member
IPSET_ATTR_IFACE = 23
IPSET_FLAG_PHYSDEV = 1 << 1
IPSET_FLAG_IFACE_WILDCARD = 1 << 7
IPSET_ATTR_IPADDR_IPV4 = 1
IPSET_ATTR_IPADDR_IPV6 = 2
IPSET_FLAG_NOMATCH = 1 << 2
NFPROTO_UNSPEC = 0
NFPROTO_IPV4 = 2
NFPROTO_IPV6 = 10
WIDTH = {NFPROTO_IPV4: 32, NFPROTO_IPV6: 128}       # of a family's addresses
ICMP_OF = {NFPROTO_IPV4: 1, NFPROTO_IPV6: 58}      # the ICMP whose type/code a port member holds

MIRRORED_TYPES = ("hash:ip", "hash:net", "hash:ip,port", "hash:net,port", "hash:net,iface", "bitmap:ip")
# Protocols of a port member the fast path reads the same value for: TCP and
# UDP ports, ICMP type and code, and protocols without ports (port 0).
_PORTED = (6, 17)
_UNREAD = (132, 136)     # SCTP, UDPLITE: ports the kernel reads, the fast path does not
# IPv6 next headers ip_set_get_ip6_port() never matches a packet by
# (ipv6_skip_exthdr() walks extension headers, fails at "no next header"),
# while the fast path would read them as the protocol.
_IPV6_NEVER = (0, 43, 44, 51, 59, 60)
_NFGENMSG = struct.Struct("=BBH")


IPSET_CMD_GET_BYINDEX = 15
IPSET_ATTR_INDEX = 11


def set_name_by_index(index: int) -> str:
    """The name of the set an x_tables `set` match refers to by its index
    (what libxt_set asks with SO_IP_SET); OSError when there is none."""
    payload = (_NFGENMSG.pack(socket.AF_INET, 0, 0) + nl.attr(IPSET_ATTR_PROTOCOL, bytes([IPSET_PROTOCOL]))
               + nl.attr(IPSET_ATTR_INDEX, struct.pack("!H", index)))
    with nl.query_socket(nl.NETLINK_NETFILTER) as sock:
        replies = sock.request((NFNL_SUBSYS_IPSET << 8) | IPSET_CMD_GET_BYINDEX, payload, dump=False)
    for reply in replies:
        name = nl.parse_attrs(reply.payload, _NFGENMSG.size).get(IPSET_ATTR_SETNAME)
        if name:
            return nl.cstr(name)
    raise OSError(f"no set has index {index}")


def read_ipsets(names) -> tuple[IpSet, ...]:
    """Each named set as the kernel holds it now; a set that does not exist
    comes back with that as its reason. Raises OSError when ipset cannot be
    asked at all."""
    wanted = sorted(set(names))
    if not wanted:
        return ()
    sets = {}
    with nl.query_socket(nl.NETLINK_NETFILTER) as sock:
        for name in wanted:
            payload = (_NFGENMSG.pack(socket.AF_INET, 0, 0) + nl.attr(IPSET_ATTR_PROTOCOL, bytes([IPSET_PROTOCOL]))
                       + nl.attr(IPSET_ATTR_SETNAME, name.encode() + b"\0"))
            try:
                replies = sock.dump((NFNL_SUBSYS_IPSET << 8) | IPSET_CMD_LIST, payload)
            except nl.NetlinkError as exc:
                sets[name] = IpSet(name, unsupported=f"ipset {name!r} cannot be read ({exc.strerror})")
                continue
            sets[name] = decode_set(name, [r.payload for r in replies])
    return tuple(sets[name] for name in wanted)


def decode_set(name: str, payloads) -> IpSet:
    """One set from its LIST replies (a large set spans several messages,
    each with its name and a run of members)."""
    kind, family, options, members = "", 0, {}, []
    plain: list[tuple[bytes, bytes]] = []      # (address, cidr) of members laid out as _PLAIN_IPV4
    for payload in payloads:
        attrs = nl.parse_attrs(payload, _NFGENMSG.size)
        if nl.cstr(attrs.get(IPSET_ATTR_SETNAME, b"")) != name:
            continue
        if IPSET_ATTR_TYPENAME in attrs:
            kind = nl.cstr(attrs[IPSET_ATTR_TYPENAME])
            family = nl.u8(attrs.get(IPSET_ATTR_FAMILY, b"\0"))
            options = nl.parse_attrs(attrs.get(IPSET_ATTR_DATA, b""))
        adt = attrs.get(IPSET_ATTR_ADT, b"")
        run = _plain_ipv4_members(adt)
        if run is not None:
            plain += run
            continue
        try:
            members += _members(adt)
        except ValueError as exc:
            return IpSet(name, kind, unsupported=f"ipset {name}: {exc}")
    if plain and not members and kind in ("hash:ip", "hash:net") and family == NFPROTO_IPV4 \
            and _unsupported(kind, family, options) is None:
        prefixes = _plain_prefixes(kind, options, plain)
        if prefixes is not None:
            return IpSet(name, kind, prefixes=prefixes, family=family)
    members += ({IPSET_ATTR_IP: address, **({IPSET_ATTR_CIDR: cidr} if cidr else {})} for address, cidr in plain)
    reason = _unsupported(kind, family, options)
    if reason is None:
        if kind.endswith(",port"):
            ports, reason = _ports(kind, family, options, members)
            if reason is None:
                return IpSet(name, kind, ports=ports, family=family)
        elif kind.endswith(",iface"):
            ifaces, reason = _ifaces(kind, family, members)
            if reason is None:
                return IpSet(name, kind, ifaces=ifaces, family=family)
        else:
            prefixes, reason = _prefixes(kind, family, options, members)
            if reason is None:
                return IpSet(name, kind, prefixes=prefixes, family=family)
    names: tuple[str, ...] = ()
    if kind == "list:set":
        # Its members: a SET target naming it changes them, and its matches
        # are theirs (state/netfilter.py combines them: combine_list).
        names = tuple(nl.cstr(m[IPSET_ATTR_NAME]) for m in members if IPSET_ATTR_NAME in m)
        timed = any(m.get(IPSET_ATTR_TIMEOUT, b"\0\0\0\0") != b"\0\0\0\0" for m in members)
        reason = "members that time out (the kernel expires them without an event)" if timed else LIST_PENDING
    return IpSet(name, kind, unsupported=f"ipset {name} ({kind or 'unknown type'}): {reason}", members=names)


# A list:set read alone: what it matches is its members' (combine_list).
LIST_PENDING = "its members are not combined"
# Member types whose union is a union of prefixes (what a list:set of them matches).
PREFIX_TYPES = ("hash:ip", "hash:net", "bitmap:ip")


def combine_list(listed: IpSet, members: dict[str, IpSet]) -> IpSet:
    """What a list:set matches: a packet its members match, tried in order
    (list_set_ktest) — the union of their prefixes when every member is an
    address set the fast path mirrors; otherwise why not."""
    if listed.unsupported is None or not listed.unsupported.endswith(LIST_PENDING):
        return listed
    prefixes: set[tuple[int, int]] = set()
    families = set()
    for name in listed.members:
        member = members.get(name)
        if member is None or member.unsupported is not None:
            why = member.unsupported if member is not None else f"member {name} was not read"
            return IpSet(listed.name, listed.kind, unsupported=f"ipset {listed.name} (list:set): {why}",
                         members=listed.members)
        if member.kind not in PREFIX_TYPES:
            return IpSet(listed.name, listed.kind, members=listed.members,
                         unsupported=f"ipset {listed.name} (list:set): member {name} is a {member.kind} "
                                     f"(only {', '.join(PREFIX_TYPES)} members are combined)")
        prefixes.update(member.prefixes)
        families.add(member.family)
    if len(families) > 1:
        # (a packet matches only its family's members: two unions, not one)
        return IpSet(listed.name, listed.kind, members=listed.members,
                     unsupported=f"ipset {listed.name} (list:set): members of both families")
    # (an empty list matches no packet of either family: NFPROTO_UNSPEC, as the kernel's)
    return IpSet(listed.name, listed.kind, prefixes=tuple(sorted(prefixes)), members=listed.members,
                 family=families.pop() if families else NFPROTO_UNSPEC)


_NLATTR = struct.Struct("=HH")

# The members of an IPv4 hash:ip or hash:net with nothing but an address
# (and a hash:net's CIDR): no timeout, flags, counters or comment. Such runs,
# almost every large set's, are read by two regular expressions instead of
# attribute by attribute (100 000 members: 0.56 s -> see _plain_prefixes).
_PLAIN_IPV4 = (re.compile(rb"\x10\x00\x07\x80\x0c\x00\x01\x80\x08\x00\x01\x00(....)()", re.S),     # hash:ip
               re.compile(rb"\x18\x00\x07\x80\x0c\x00\x01\x80\x08\x00\x01\x00(....)"
                          rb"\x05\x00\x03\x00(.)\x00\x00\x00", re.S))                                    # hash:net
_PLAIN_HEADS = ((b"\x10\x00\x07\x80", 16), (b"\x18\x00\x07\x80", 24))    # each record's first bytes, its size


def _plain_ipv4_members(adt: bytes) -> list[tuple[bytes, bytes]] | None:
    """(address, CIDR byte or b"") of every member of `adt` when each is
    laid out as _PLAIN_IPV4 (one layout throughout), else None."""
    for pattern, (head, size) in zip(_PLAIN_IPV4, _PLAIN_HEADS):
        if adt and len(adt) % size == 0 and adt.startswith(head):
            found = pattern.findall(adt)
            if len(found) * size == len(adt):       # (every byte is in a match: back to back)
                return found
    return None


def _plain_prefixes(kind: str, options: dict[int, bytes], plain) -> tuple[tuple[int, int], ...] | None:
    """_prefixes() of plain members (a hash:net's CIDR, a hash:ip's
    netmask); None where one is not a length _member_prefix() accepts."""
    netmask = nl.u8(options[IPSET_ATTR_NETMASK]) if IPSET_ATTR_NETMASK in options else 32
    values = struct.unpack(f">{len(plain)}I", b"".join(address for address, _ in plain))
    lengths = b"".join(cidr for _, cidr in plain) if kind == "hash:net" else bytes([netmask])
    if kind == "hash:net" and len(lengths) != len(values):     # a member without its CIDR: walk them
        return None
    if max(lengths) > 32:
        return None
    if min(lengths) == max(lengths):       # one length (a set of addresses): sort plain numbers
        length = lengths[0]
        mask = (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
        return tuple((value, length) for value in sorted({value & mask for value in values}))
    out = set()
    for value, length in zip(values, lengths):
        out.add((value >> (32 - length) << (32 - length) if length else 0, length))
    return tuple(sorted(out))


def _members(adt: bytes) -> list[dict[int, bytes]]:
    """Each member's attributes, its address (IPSET_ATTR_IP) already
    unnested to its 4 or 16 bytes (empty when neither). A tight loop: a set
    of 100 000 members is read on every change."""
    out = []
    unpack = _NLATTR.unpack_from
    pos, end = 0, len(adt)
    while pos + 4 <= end:
        length, atype = unpack(adt, pos)
        if length < 4 or pos + length > end:
            raise ValueError("a malformed member in the kernel's answer")
        if atype & nl.NLA_TYPE_MASK == IPSET_ATTR_DATA:
            member = {}
            at, stop = pos + 4, pos + length
            while at + 4 <= stop:
                size, kind = unpack(adt, at)
                if size < 4 or at + size > stop:
                    raise ValueError("a malformed member in the kernel's answer")
                kind &= nl.NLA_TYPE_MASK
                if kind == IPSET_ATTR_IP:
                    inner = unpack(adt, at + 4) if size >= 12 else (0, 0)
                    if inner[1] & nl.NLA_TYPE_MASK == IPSET_ATTR_IPADDR_IPV4 and inner[0] == 8:
                        member[kind] = adt[at + 8: at + 12]
                    elif inner[1] & nl.NLA_TYPE_MASK == IPSET_ATTR_IPADDR_IPV6 and inner[0] == 20 and size >= 24:
                        member[kind] = adt[at + 8: at + 24]
                    else:
                        member[kind] = b""
                else:
                    member[kind] = adt[at + 4: at + size]
                at += (size + 3) & ~3
            out.append(member)
        pos += (length + 3) & ~3
    return out


def _unsupported(kind: str, family: int, options: dict[int, bytes]) -> str | None:
    if kind not in MIRRORED_TYPES:
        return f"type {kind} is not mirrored (only {', '.join(MIRRORED_TYPES)})"
    if family not in WIDTH:
        return f"family {family} (neither inet nor inet6)"
    if IPSET_ATTR_BITMASK in options:
        return "a bitmask"
    return None


def _prefixes(kind: str, family: int, options: dict[int, bytes],
              members) -> tuple[tuple[tuple[int, int], ...], str | None]:
    return _each_member(kind, family, options, members, lambda member, prefix: (prefix, None))


def _ports(kind: str, family: int, options: dict[int, bytes],
           members) -> tuple[tuple[tuple[int, int, int, int], ...], str | None]:
    """(network, length, protocol, port) of each member."""
    icmp = ICMP_OF[family]

    def port_of(member, prefix):
        proto = nl.u8(member.get(IPSET_ATTR_PROTO, b"\0"))
        port = int.from_bytes(member.get(IPSET_ATTR_PORT, b"\0\0"), "big")
        if proto == 0 or proto in _UNREAD or (proto in ICMP_OF.values() and proto != icmp):
            return None, f"a member of protocol {proto} (its ports are not read in the fast path)"
        if family == NFPROTO_IPV6 and proto in _IPV6_NEVER:
            return None, f"a member of IPv6 extension header {proto} (the kernel never matches a packet by it)"
        if proto not in _PORTED and proto != icmp and port:
            return None, f"a member of protocol {proto} with port {port}"
        return (*prefix, proto, port), None
    return _each_member(kind, family, options, members, port_of)


def _each_member(kind: str, family: int, options: dict[int, bytes], members, entry) -> tuple[tuple, str | None]:
    """entry(member, its prefix) -> (what the set holds, or why not) of every
    member, sorted; the first reason stops it. hash:ip's, bitmap:ip's and
    hash:ip,port's `netmask` (the last from kernel 6.1 on) is each member's
    length."""
    width = WIDTH[family]
    netmask = nl.u8(options[IPSET_ATTR_NETMASK]) if IPSET_ATTR_NETMASK in options else width
    out = set()
    for member in members:
        prefix, reason = _member_prefix(kind, member, netmask, width)
        if reason is None:
            item, reason = entry(member, prefix)
        if reason is not None:
            return (), reason
        out.add(item)
    return tuple(sorted(out)), None


def _ifaces(kind: str, family: int, members) -> tuple[tuple[tuple[int, int, str, bool], ...], str | None]:
    """(network, length, interface name, wildcard) of each member: a
    `wildcard` member's name matches every interface it begins; any other
    name (a "+" included) only itself.

    The kernel looks the address up from its most specific member prefix
    on and stops at the first prefix that has a member at all, matching or
    not (hash_netiface4_data_equal counts it before comparing the name): a
    longest-prefix match. That equals "any member matches" only when each
    member prefix names at least the interfaces of every prefix around it;
    a set where a nested prefix names fewer is not mirrored."""
    width = WIDTH[family]
    out = set()
    for member in members:
        prefix, reason = _member_prefix(kind, member, width, width)
        if reason is not None:
            return (), reason
        flags = nl.be32(member[IPSET_ATTR_CADT_FLAGS]) if IPSET_ATTR_CADT_FLAGS in member else 0
        if flags & IPSET_FLAG_PHYSDEV:
            return (), "physdev members (a bridge port's name)"
        out.add((*prefix, nl.cstr(member.get(IPSET_ATTR_IFACE, b"")), bool(flags & IPSET_FLAG_IFACE_WILDCARD)))
    names: dict[tuple[int, int], set] = {}
    for value, length, name, wildcard in out:
        names.setdefault((value, length), set()).add((name, wildcard))
    lengths = sorted({length for _, length in names})
    for (value, length), inner in names.items():
        for shorter in (n for n in lengths if n < length):
            outer = names.get((value >> (width - shorter) << (width - shorter) if shorter else 0, shorter))
            if outer is not None and not outer <= inner:
                return (), ("nested members naming different interfaces (the kernel matches the most specific "
                            "prefix only)")
    return tuple(sorted(out)), None


def _member_prefix(kind: str, member: dict[int, bytes], netmask: int,
                   width: int) -> tuple[tuple[int, int], str | None]:
    if member.get(IPSET_ATTR_TIMEOUT, b"\0\0\0\0") != b"\0\0\0\0":
        return (0, 0), "members that time out (the kernel expires them without an event)"
    flags = nl.be32(member[IPSET_ATTR_CADT_FLAGS]) if IPSET_ATTR_CADT_FLAGS in member else 0
    if flags & IPSET_FLAG_NOMATCH:
        return (0, 0), "nomatch members"
    address = member.get(IPSET_ATTR_IP, b"")
    if len(address) * 8 != width:
        return (0, 0), "a member without an address of the set's family"
    length = nl.u8(member[IPSET_ATTR_CIDR]) if kind.startswith("hash:net") and IPSET_ATTR_CIDR in member else netmask
    if not 0 <= length <= width:
        return (0, 0), f"a member of length {length}"
    value = int.from_bytes(address, "big")
    return (value >> (width - length) << (width - length) if length else 0, length), None
