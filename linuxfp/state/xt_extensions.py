"""x_tables match and target payloads (the `info` an iptables extension hands
the kernel) decoded into the options its save function prints, as
iptables-save would show them: the same Match values parse_rule reads from
the tool's output.

Each decoder knows one (name, revision) and its exact layout; a size, flag
or mode it does not know raises Undecodable, never a guess. The layouts are
the kernel's uapi structs (linux/netfilter/xt_*.h, ipt_*.h, nf_nat.h).
"""
from __future__ import annotations

import functools
import ipaddress
import struct

from . import netlink as nl
from collections.abc import Callable

from .iptables import Match


class Undecodable(Exception):
    """Something the decoder does not know exactly: the tool must read it."""


def undecodable_name(raw: bytes) -> str:
    """A table's, chain's or extension's name (nl.strict_name): one that is
    not UTF-8 would meet another once replaced, so the tool must read it."""
    try:
        return nl.strict_name(raw)
    except UnicodeDecodeError:
        raise Undecodable("a name that is not UTF-8") from None


@functools.cache
def _protocol_names() -> dict[int, str]:
    """Protocol number -> the name getprotobynumber() gives (/etc/protocols,
    package netbase), as iptables prints `-p`; its own table where that file
    has none."""
    names = {0: "all", 1: "icmp", 6: "tcp", 17: "udp", 50: "esp", 51: "ah", 58: "ipv6-icmp", 132: "sctp",
             135: "mh", 136: "udplite"}
    try:
        with open("/etc/protocols", encoding="utf-8", errors="replace") as f:
            read: dict[int, str] = {}
            for line in f:
                words = line.split("#", 1)[0].split()
                if len(words) >= 2 and words[1].isdigit():
                    read.setdefault(int(words[1]), words[0])
    except OSError:
        return names
    return {**names, **read}


def protocol_name(number: int) -> str:
    """`-p` as iptables prints it."""
    return _protocol_names().get(number, str(number))


def _need(info: bytes, size: int, what: str) -> None:
    """`size`: the struct's; the kernel holds it padded to 8 bytes (XT_ALIGN)."""
    if len(info) != (size + 7) & ~7:
        raise Undecodable(f"{what}: {len(info)} bytes, expected {size}")


# --- matches: (info, family) -> (module, options) ------------------------------

def _comment(info: bytes, family: str) -> tuple[str, list[Match]]:
    _need(info, 256, "comment")
    text = info.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    return "comment", [Match("comment", "--comment", (text,))]


XT_MULTIPORT_OPTIONS = {0: "--sports", 1: "--dports", 2: "--ports"}


def _multiport(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_multiport_v1: flags, count, ports[15], pflags[15], invert."""
    _need(info, 48, "multiport")
    flags, count = info[0], info[1]
    ports = struct.unpack_from("=15H", info, 2)
    pflags, invert = info[32:47], info[47]
    if flags not in XT_MULTIPORT_OPTIONS or not 0 < count <= 15 or invert > 1:
        raise Undecodable("multiport flags")
    words, i = [], 0
    while i < count:
        if pflags[i]:
            if i + 1 >= count:
                raise Undecodable("multiport range without its end")
            if ports[i] > ports[i + 1]:
                raise Undecodable("an empty multiport range")
            words.append(f"{ports[i]}:{ports[i + 1]}")
            i += 2
        else:
            words.append(str(ports[i]))
            i += 1
    return "multiport", [Match("multiport", XT_MULTIPORT_OPTIONS[flags], (",".join(words),), bool(invert))]


# xt_conntrack.h: state bits as conntrack_save and state_save print them
XT_CONNTRACK_STATE, XT_CONNTRACK_STATE_ALIAS = 1 << 0, 1 << 13
_CT_STATES = (("INVALID", 1 << 0), ("NEW", 1 << 3), ("RELATED", 1 << 2), ("ESTABLISHED", 1 << 1),
              ("UNTRACKED", 1 << 8), ("SNAT", 1 << 6), ("DNAT", 1 << 7))


def _conntrack(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_conntrack_mtinfo3, only its state test (also `-m state`,
    which iptables writes as this match with the alias flag)."""
    _need(info, 168, "conntrack")
    match_flags, invert_flags, state_mask = struct.unpack_from("=HHH", info, 146)
    alias = bool(match_flags & XT_CONNTRACK_STATE_ALIAS)
    if match_flags & ~(XT_CONNTRACK_STATE | XT_CONNTRACK_STATE_ALIAS) or not match_flags & XT_CONNTRACK_STATE \
            or invert_flags & ~XT_CONNTRACK_STATE or not state_mask:
        raise Undecodable("conntrack beyond --ctstate")
    known = _CT_STATES[:5] if alias else _CT_STATES
    if state_mask & ~sum(bit for _, bit in known):
        raise Undecodable("conntrack state bits")
    names = ",".join(name for name, bit in known if state_mask & bit)
    module, option = ("state", "--state") if alias else ("conntrack", "--ctstate")
    return module, [Match(module, option, (names,), bool(invert_flags & XT_CONNTRACK_STATE))]


def _icmp(module: str, option: str) -> Callable[[bytes, str], tuple[str, list[Match]]]:
    def decode(info: bytes, family: str) -> tuple[str, list[Match]]:
        """struct ipt_icmp / ip6t_icmp: type, code range, invflags."""
        _need(info, 4, module)
        kind, low, high, invert = info[:4]
        if invert > 1:
            raise Undecodable(f"{module} flags")
        if kind == 0xFF and module == "icmp":           # (ICMPv6 compares 255 as a type like any other)
            if (low, high) != (0, 0xFF):
                raise Undecodable(f"{module} type 255 with a code")   # the kernel takes 255 as any, whatever the code
            text = "any"
        elif (low, high) == (0, 0xFF):
            text = str(kind)
        elif low == high:
            text = f"{kind}/{low}"
        else:
            raise Undecodable(f"{module} code range")
        return module, [Match(module, option, (text,), bool(invert))]
    return decode


IPSET_INV_MATCH = 1 << 0


def _set(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_set_info_match_v4: the set by index, its
    dimensions' directions; counters and flags are more than a set test."""
    _need(info, 48, "set")
    index, dim, flags = struct.unpack_from("=HBB", info)
    packets_op, bytes_op, match_flags = info[16], info[32], struct.unpack_from("=I", info, 40)[0]
    if not 1 <= dim <= 6 or flags >> (dim + 1) or packets_op or bytes_op or match_flags:
        raise Undecodable("set beyond --match-set")
    name = _set_name(index)
    directions = ",".join("src" if flags & (1 << i) else "dst" for i in range(1, dim + 1))
    return "set", [Match("set", "--match-set", (name, directions), bool(flags & IPSET_INV_MATCH))]


def _set_name(index: int) -> str:
    from .ipset import set_name_by_index
    try:
        return set_name_by_index(index)
    except OSError as exc:
        raise Undecodable(f"set index {index}: {exc}") from None


_ADDRTYPES = ("UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST", "BLACKHOLE", "UNREACHABLE",
              "PROHIBIT", "THROW", "NAT", "XRESOLVE")
XT_ADDRTYPE_INVERT_SOURCE, XT_ADDRTYPE_INVERT_DEST = 1, 2
XT_ADDRTYPE_LIMIT_IFACE_IN, XT_ADDRTYPE_LIMIT_IFACE_OUT = 4, 8


def _addrtype(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_addrtype_info_v1: source and dest type masks, flags."""
    _need(info, 8, "addrtype")
    source, dest, flags = struct.unpack("=HHI", info)
    if (source | dest) >> len(_ADDRTYPES) or flags & ~0xF:
        raise Undecodable("addrtype bits")
    options = []
    for mask, option, invert in ((source, "--src-type", XT_ADDRTYPE_INVERT_SOURCE),
                                 (dest, "--dst-type", XT_ADDRTYPE_INVERT_DEST)):
        if mask:
            names = ",".join(n for i, n in enumerate(_ADDRTYPES) if mask & (1 << i))
            options.append(Match("addrtype", option, (names,), bool(flags & invert)))
        elif flags & invert:
            raise Undecodable("addrtype inverts an empty type")
    if flags & XT_ADDRTYPE_LIMIT_IFACE_IN:
        options.append(Match("addrtype", "--limit-iface-in"))
    if flags & XT_ADDRTYPE_LIMIT_IFACE_OUT:
        options.append(Match("addrtype", "--limit-iface-out"))
    return "addrtype", options


XT_STATISTIC_MODE_RANDOM, XT_STATISTIC_MODE_NTH = 0, 1
XT_STATISTIC_INVERT = 1


def _statistic(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_statistic_info: mode, flags, then random's probability
    (of 2^31) or nth's every/packet; the kernel's private pointer last."""
    _need(info, 24, "statistic")
    mode, flags = struct.unpack_from("=HH", info)
    if flags & ~XT_STATISTIC_INVERT:
        raise Undecodable("statistic flags")
    negated = bool(flags & XT_STATISTIC_INVERT)
    if mode == XT_STATISTIC_MODE_RANDOM:
        probability = struct.unpack_from("=I", info, 4)[0]
        return "statistic", [Match("statistic", "--mode", ("random",)),
                             Match("statistic", "--probability", ("%.11f" % (probability / 0x80000000),), negated)]
    if mode == XT_STATISTIC_MODE_NTH:
        every, packet = struct.unpack_from("=II", info, 4)
        return "statistic", [Match("statistic", "--mode", ("nth",)),
                             Match("statistic", "--every", (str(every + 1),), negated),
                             Match("statistic", "--packet", (str(packet),))]
    raise Undecodable(f"statistic mode {mode}")


XT_LIMIT_SCALE, XT_LIMIT_BURST = 10000, 5
_RATES = (("day", XT_LIMIT_SCALE * 24 * 60 * 60), ("hour", XT_LIMIT_SCALE * 60 * 60), ("min", XT_LIMIT_SCALE * 60),
          ("sec", XT_LIMIT_SCALE))


def _limit(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_rateinfo: the average period (of XT_LIMIT_SCALE seconds)
    and the burst; the rest is the kernel's. As libxt_limit's print_rate."""
    _need(info, 40, "limit")
    return "limit", limit_options(*struct.unpack_from("=II", info))


def limit_options(period: int, burst: int) -> list[Match]:
    """`--limit` (and `--limit-burst`) as limit_save prints them."""
    if not period:
        raise Undecodable("limit without a period")
    i = 1
    while i < len(_RATES) and not (period > _RATES[i][1] or _RATES[i][1] // period < _RATES[i][1] % period):
        i += 1
    name, mult = _RATES[i - 1]
    options = [Match("limit", "--limit", (f"{mult // period}/{name}",))]
    if burst != XT_LIMIT_BURST:
        options.append(Match("limit", "--limit-burst", (str(burst),)))
    return options


def _length(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_length_info: min, max, invert."""
    _need(info, 6, "length")
    low, high, invert = struct.unpack_from("=HHB", info)
    if invert > 1 or low > high:
        raise Undecodable("length flags or an empty range")
    return "length", [Match("length", "--length", (str(low) if low == high else f"{low}:{high}",), bool(invert))]


_PKTTYPES = {0: "unicast", 1: "broadcast", 2: "multicast", 3: "otherhost"}


def _pkttype(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_pkttype_info: the skb's packet type, invert."""
    _need(info, 8, "pkttype")
    kind, invert = struct.unpack_from("=ii", info)
    if kind not in _PKTTYPES or invert not in (0, 1):
        raise Undecodable(f"pkttype {kind}")
    return "pkttype", [Match("pkttype", "--pkt-type", (_PKTTYPES[kind],), bool(invert))]


_TTL_MODES = {0: ("--ttl-eq", False), 1: ("--ttl-eq", True), 2: ("--ttl-lt", False), 3: ("--ttl-gt", False)}


def _ttl(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct ipt_ttl_info: mode (eq, ne, lt, gt) and the TTL, IPv4."""
    _need(info, 2, "ttl")
    mode, ttl = info[0], info[1]
    if mode not in _TTL_MODES or family != "ip":
        raise Undecodable(f"ttl mode {mode}")
    option, negated = _TTL_MODES[mode]
    return "ttl", [Match("ttl", option, (str(ttl),), negated)]


def _mark_match(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_mark_mtinfo1: mark, mask, invert."""
    _need(info, 12, "mark")
    mark, mask, invert = struct.unpack_from("=IIB", info)
    if invert > 1 or mark & ~mask:
        raise Undecodable("mark flags, or a mark outside its mask")
    text = f"0x{mark:x}" if mask == 0xFFFFFFFF else f"0x{mark:x}/0x{mask:x}"
    return "mark", [Match("mark", "--mark", (text,), bool(invert))]


XT_TCP_INV_SRCPT, XT_TCP_INV_DSTPT, XT_TCP_INV_FLAGS = 0x01, 0x02, 0x04
_TCP_FLAGS = (("FIN", 0x01), ("SYN", 0x02), ("RST", 0x04), ("PSH", 0x08), ("ACK", 0x10), ("URG", 0x20))


def tcp_flags(bits: int) -> str:
    """As libxt_tcp's print_tcpf."""
    return ",".join(name for name, bit in _TCP_FLAGS if bits & bit) or "NONE"


def _ports(module: str, option: str, low: int, high: int, negated: bool) -> list[Match]:
    if low > high or ((low, high) == (0, 0xFFFF) and negated):
        raise Undecodable(f"{option} that never matches")        # the tool would print it as one that does
    if (low, high) == (0, 0xFFFF):
        return []
    return [Match(module, option, (str(low) if low == high else f"{low}:{high}",), negated)]


def _tcp(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_tcp (what iptables-nft keeps as a match when a rule has
    `-m tcp` and nothing it writes natively): ports, option, flags."""
    _need(info, 12, "tcp")
    sport_low, sport_high, dport_low, dport_high, option, mask, compare, invert = struct.unpack("=4H4B", info[:12])
    if option or invert & ~(XT_TCP_INV_SRCPT | XT_TCP_INV_DSTPT | XT_TCP_INV_FLAGS) or mask & ~0x3F \
            or compare & ~mask:
        raise Undecodable("tcp option or flags")
    options = _ports("tcp", "--sport", sport_low, sport_high, bool(invert & XT_TCP_INV_SRCPT)) \
        + _ports("tcp", "--dport", dport_low, dport_high, bool(invert & XT_TCP_INV_DSTPT))
    if mask or invert & XT_TCP_INV_FLAGS:
        options.append(Match("tcp", "--tcp-flags", (tcp_flags(mask), tcp_flags(compare)),
                             bool(invert & XT_TCP_INV_FLAGS)))
    return "tcp", options


def _udp(info: bytes, family: str) -> tuple[str, list[Match]]:
    """struct xt_udp: ports."""
    _need(info, 10, "udp")
    sport_low, sport_high, dport_low, dport_high, invert = struct.unpack("=4HB", info[:9])
    if invert & ~(XT_TCP_INV_SRCPT | XT_TCP_INV_DSTPT):
        raise Undecodable("udp flags")
    return "udp", _ports("udp", "--sport", sport_low, sport_high, bool(invert & XT_TCP_INV_SRCPT)) \
        + _ports("udp", "--dport", dport_low, dport_high, bool(invert & XT_TCP_INV_DSTPT))


xt_matches: dict[tuple[str, int], Callable[[bytes, str], tuple[str, list[Match]]]] = {
    ("comment", 0): _comment,
    ("multiport", 1): _multiport,
    ("conntrack", 3): _conntrack,
    ("icmp", 0): _icmp("icmp", "--icmp-type"),
    ("icmp6", 0): _icmp("icmp6", "--icmpv6-type"),
    ("set", 4): _set,
    ("addrtype", 1): _addrtype,
    ("statistic", 0): _statistic,
    ("tcp", 0): _tcp,
    ("mark", 1): _mark_match,
    ("limit", 0): _limit,
    ("length", 0): _length,
    ("pkttype", 0): _pkttype,
    ("ttl", 0): _ttl,
    ("udp", 0): _udp,
}


# --- targets: (info, family) -> options ---------------------------------------

_REJECT_WITH = {0: "icmp-net-unreachable", 1: "icmp-host-unreachable", 2: "icmp-proto-unreachable",
                3: "icmp-port-unreachable", 5: "icmp-net-prohibited", 6: "icmp-host-prohibited",
                7: "tcp-reset", 8: "icmp-admin-prohibited"}


def _reject(info: bytes, family: str) -> list[str]:
    """struct ipt_reject_info: the ICMP (or TCP reset) answer, IPv4."""
    _need(info, 8, "REJECT")
    with_type = struct.unpack_from("=I", info)[0]
    if family != "ip" or with_type not in _REJECT_WITH:
        raise Undecodable(f"REJECT with {with_type}")
    return ["--reject-with", _REJECT_WITH[with_type]]


NF_NAT_RANGE_MAP_IPS, NF_NAT_RANGE_PROTO_SPECIFIED = 1 << 0, 1 << 1
NF_NAT_RANGE_PROTO_RANDOM, NF_NAT_RANGE_PERSISTENT = 1 << 2, 1 << 3
NF_NAT_RANGE_PROTO_RANDOM_FULLY = 1 << 4


def _masquerade(info: bytes, family: str) -> list[str]:
    """struct nf_nat_ipv4_multi_range_compat with one range: ports, flags."""
    _need(info, 24, "MASQUERADE")
    size, flags = struct.unpack_from("=II", info)
    low, high = struct.unpack_from("!HH", info, 16)
    known = NF_NAT_RANGE_PROTO_SPECIFIED | NF_NAT_RANGE_PROTO_RANDOM | NF_NAT_RANGE_PROTO_RANDOM_FULLY
    if family != "ip" or size != 1 or flags & ~known:
        raise Undecodable("MASQUERADE flags")
    options = []
    if flags & NF_NAT_RANGE_PROTO_SPECIFIED:
        options += ["--to-ports", str(low) if low == high else f"{low}-{high}"]
    if flags & NF_NAT_RANGE_PROTO_RANDOM:
        options.append("--random")
    if flags & NF_NAT_RANGE_PROTO_RANDOM_FULLY:
        options.append("--random-fully")
    return options


def _nat(option: str, revision: int) -> Callable[[bytes, str], list[str]]:
    def decode(info: bytes, family: str) -> list[str]:
        """IPv4 DNAT/SNAT: revision 0 holds a struct
        nf_nat_ipv4_multi_range_compat with one range, revision 2 a struct
        nf_nat_range2; either an address range and a port range (no port
        offset)."""
        if revision == 0:
            _need(info, 24, option)
            size, flags = struct.unpack_from("=II", info)
            low, high = info[8:12], info[12:16]
            ports = struct.unpack_from("!HH", info, 16)
        else:
            _need(info, 44, option)
            size, flags = 1, struct.unpack_from("=I", info)[0]
            low, high = info[4:8], info[20:24]
            ports = struct.unpack_from("!HH", info, 36)
        known = NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED | NF_NAT_RANGE_PROTO_RANDOM \
            | NF_NAT_RANGE_PERSISTENT | NF_NAT_RANGE_PROTO_RANDOM_FULLY
        if family != "ip" or size != 1 or flags & ~known \
                or not flags & (NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED):
            raise Undecodable(f"{option} flags")
        text = ""
        if flags & NF_NAT_RANGE_MAP_IPS:
            first, last = ipaddress.IPv4Address(low), ipaddress.IPv4Address(high)
            text = str(first) if first == last else f"{first}-{last}"
        if flags & NF_NAT_RANGE_PROTO_SPECIFIED:
            text += f":{ports[0]}" if ports[0] == ports[1] else f":{ports[0]}-{ports[1]}"
        options = [option, text]
        if flags & NF_NAT_RANGE_PROTO_RANDOM:
            options.append("--random")
        if flags & NF_NAT_RANGE_PROTO_RANDOM_FULLY:
            options.append("--random-fully")
        if flags & NF_NAT_RANGE_PERSISTENT:
            options.append("--persistent")
        return options
    return decode


def _mark(info: bytes, family: str) -> list[str]:
    """struct xt_mark_tginfo2: mark and mask, as --set-xmark."""
    _need(info, 8, "MARK")
    mark, mask = struct.unpack("=II", info)
    return ["--set-xmark", f"0x{mark:x}/0x{mask:x}"]


_LOG_FLAGS = ((0x01, "--log-tcp-sequence"), (0x02, "--log-tcp-options"), (0x04, "--log-ip-options"),
              (0x08, "--log-uid"), (0x20, "--log-macdecode"))
LOG_DEFAULT_LEVEL = 4


def _log(info: bytes, family: str) -> list[str]:
    """struct xt_log_info: level, flags, prefix[30]."""
    _need(info, 32, "LOG")
    level, flags = info[0], info[1]
    if flags & ~sum(bit for bit, _ in _LOG_FLAGS) or level > 7:
        raise Undecodable("LOG flags")
    prefix = info[2:32].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    options = ["--log-prefix", prefix] if prefix else []
    if level != LOG_DEFAULT_LEVEL:
        options += ["--log-level", str(level)]
    return options + [option for bit, option in _LOG_FLAGS if flags & bit]


xt_targets: dict[tuple[str, int], Callable[[bytes, str], list[str]]] = {
    ("REJECT", 0): _reject,
    ("MASQUERADE", 0): _masquerade,
    ("DNAT", 0): _nat("--to-destination", 0),
    ("DNAT", 2): _nat("--to-destination", 2),
    ("SNAT", 0): _nat("--to-source", 0),
    ("SNAT", 2): _nat("--to-source", 2),
    ("MARK", 2): _mark,
    ("LOG", 0): _log,
}
