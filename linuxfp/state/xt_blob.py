"""iptables-legacy tables decoded from the blob the kernel hands out
(IPT_SO_GET_INFO + IPT_SO_GET_ENTRIES, what iptables-legacy-save reads) into
the model the tool's output parses into, without running the tool.

Why: after `iptables-legacy -A` the fast path passes every packet to the
kernel until the controller has read the rules again (the filter node's
watch); running iptables-legacy-save is a process (~3 ms) on that path,
while the controller has already read the blob for its fingerprint.

Each entry is a struct ipt_entry (the rule header: addresses, interfaces,
protocol, fragment flag, with inversion flags), its x_tables matches, and a
target: a standard one (a verdict, or a jump by offset to a user chain),
ERROR (a user chain's head, naming it), or an extension (xt_extensions.py).
Anything the decoder does not know exactly — and any blob libiptc would not
have written (chains not closed, labels that are empty, repeated or a
verdict's name, masks that are no prefix) — raises Undecodable and the tool
reads the family's tables instead. IPv4 (struct ipt_entry) and IPv6 (struct
ip6t_entry). tests/test_rule_decoders.py and test_xt_blob.py check that both
readings agree rule for rule.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from .iptables import BUILTIN_CHAINS, Chain, IptRule, IptTable, Match, Ruleset, remembered_rule
from .xt_extensions import Undecodable, protocol_name, undecodable_name, xt_matches, xt_targets

NF_INET_NUMHOOKS = 5
HOOK_CHAINS = ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")   # NF_INET_* order
GETINFO = struct.Struct(f"=32sI{NF_INET_NUMHOOKS}I{NF_INET_NUMHOOKS}III")   # struct ipt_getinfo
_OFFSETS = struct.Struct("=HH")         # target_offset, next_offset
_ENTRY_HEADER = struct.Struct("=H29sB")  # xt_entry_match / xt_entry_target (user view): size, name, revision
_HEADER_SIZE = 32
# standard verdicts (-verdict - 1) and XT_RETURN
_VERDICTS = {-1: "DROP", -2: "ACCEPT", -5: "RETURN"}
# what no user chain may be called: the tool would print a jump to it as the verdict
_RESERVED = frozenset({"", "ACCEPT", "DROP", "RETURN", "QUEUE", "ERROR"})


def table_info(blob: bytes) -> tuple[int, tuple[int, ...], tuple[int, ...], int, bytes]:
    """A table's blob (GET_INFO's answer, then its entries; struct
    ipt_getinfo and ip6t_getinfo share one layout): its valid hooks, each
    hook's first entry and policy entry (offsets), its number of entries,
    and the entries."""
    fields = GETINFO.unpack_from(blob)
    size = fields[-1]
    return (fields[1], fields[2:2 + NF_INET_NUMHOOKS], fields[2 + NF_INET_NUMHOOKS:2 + 2 * NF_INET_NUMHOOKS],
            fields[-2], blob[GETINFO.size:GETINFO.size + size])


@dataclass(frozen=True)
class Layout:
    """One family's entries: struct ipt_entry or ip6t_entry (offsets checked
    against the kernel's BTF by tests/test_xt_layout.py for netfilter.py's
    XtFamily, which has the same numbers)."""

    family: str
    header: struct.Struct       # struct ipt_ip / ip6t_ip6
    offsets_at: int             # offsetof(..., target_offset)
    counters: slice             # the entry's counters: traffic, not the rule
    size: int                   # sizeof the entry: its matches start here
    goto_flag: int


# ipt_ip: src, dst, smsk, dmsk, iniface, outiface, their masks, proto, flags, invflags
IPV4 = Layout("ip", struct.Struct("=4s4s4s4s16s16s16s16sHBB"), 88, slice(96, 112), 112, 0x02)
# ip6t_ip6: the same with 16-byte addresses, and tos before flags
IPV6 = Layout("ip6", struct.Struct("=16s16s16s16s16s16s16s16sHBBB"), 140, slice(152, 168), 168, 0x04)
LAYOUTS = {layout.family: layout for layout in (IPV4, IPV6)}
IPT_F_FRAG = 0x01                                   # IPv4
IP6T_F_PROTO, IP6T_F_TOS = 0x01, 0x02               # IPv6
INV_VIA_IN, INV_VIA_OUT, INV_TOS, INV_SRCIP, INV_DSTIP, INV_FRAG, INV_PROTO = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40


def decode_table(name: str, blob: bytes, known: dict | None = None, used: dict | None = None,
                 layout: Layout = IPV4) -> IptTable:
    """One table's blob (GET_INFO's answer, then its entries) → the table as
    iptables-legacy-save prints it; raises Undecodable. `known`: rules an
    earlier call decoded, by content (its `used`); `used` collects this
    call's."""
    if name not in BUILTIN_CHAINS:
        raise Undecodable(f"table {name}")
    valid_hooks, hook_entry, underflow, num_entries, entries = table_info(blob)
    size = len(entries)
    if GETINFO.unpack_from(blob)[-1] != size:
        raise Undecodable(f"{name}: a short blob")
    hooks = [h for h in range(NF_INET_NUMHOOKS) if valid_hooks & (1 << h)]
    if tuple(HOOK_CHAINS[h] for h in hooks) != tuple(sorted(BUILTIN_CHAINS[name], key=HOOK_CHAINS.index)):
        raise Undecodable(f"{name}: hooks {valid_hooks:#x}")
    if [hook_entry[h] for h in hooks] != sorted(set(hook_entry[h] for h in hooks)):
        raise Undecodable(f"{name}: built-in chains out of hook order")      # (libiptc would print blob order)
    starts = {hook_entry[h]: HOOK_CHAINS[h] for h in hooks}
    policies = {underflow[h]: HOOK_CHAINS[h] for h in hooks}
    empty_header = bytes(layout.header.size)

    # first pass: every entry's offset, and where each user chain's rules start
    listed: list[tuple[int, int, int]] = []     # (offset, target_offset, next_offset)
    user_starts: dict[int, str] = {}
    heads: set[int] = set()                     # ERROR entries: user chain heads and the table's end
    offset = 0
    while offset < size:
        if offset + layout.offsets_at + _OFFSETS.size > size:
            raise Undecodable(f"{name}: a short entry at {offset}")
        target_offset, next_offset = _OFFSETS.unpack_from(entries, offset + layout.offsets_at)
        if target_offset < layout.size or next_offset < target_offset + _HEADER_SIZE or offset + next_offset > size:
            raise Undecodable(f"{name}: entry at {offset}")
        listed.append((offset, target_offset, next_offset))
        if _target_name(entries, offset + target_offset) == "ERROR":
            heads.add(offset)
            label = undecodable_name(entries[offset + target_offset + _HEADER_SIZE:offset + next_offset])
            if offset + next_offset < size:
                if label in _RESERVED or label in BUILTIN_CHAINS[name] or label in user_starts.values():
                    raise Undecodable(f"{name}: a user chain called {label!r}")
                user_starts[offset + next_offset] = label
            elif label != "ERROR":
                raise Undecodable(f"{name}: the table ends in {label!r}")
        offset += next_offset
    if len(listed) != num_entries or not listed or listed[-1][0] not in heads:
        raise Undecodable(f"{name}: {len(listed)} entries, {num_entries} announced, or no end")

    chains: dict[str, tuple[str | None, list[IptRule]]] = {}
    chain: str | None = None
    for offset, target_offset, next_offset in listed:
        entry = entries[offset:offset + next_offset]
        if offset in starts or offset in heads:
            if chain is not None:
                raise Undecodable(f"{name} {chain}: runs into the next chain")
            if offset in starts and offset in heads:
                raise Undecodable(f"{name} {starts[offset]}: starts with an ERROR entry")
        if offset in starts:
            chain = starts[offset]
            chains[chain] = (None, [])
        if offset in heads:
            if offset + next_offset == size:
                break                               # the table's end
            chain = user_starts[offset + next_offset]
            chains[chain] = (None, [])
            continue
        if chain is None:
            raise Undecodable(f"{name}: an entry outside any chain")
        if offset in policies:
            verdict = _standard_verdict(entry, target_offset)
            if policies[offset] != chain or verdict not in (-1, -2) or entry[:layout.header.size] != empty_header \
                    or target_offset != layout.size:
                raise Undecodable(f"{name} {chain}: its policy entry")
            chains[chain] = (_VERDICTS[verdict], chains[chain][1])
            chain = None
            continue
        if offset + next_offset in heads:
            # a user chain's closing entry: an unconditional RETURN
            if chain in BUILTIN_CHAINS[name] or _standard_verdict(entry, target_offset) != -5 \
                    or entry[:layout.header.size] != empty_header or target_offset != layout.size:
                raise Undecodable(f"{name} {chain}: its closing entry")
            chain = None
            continue
        rules = chains[chain][1]
        rules.append(_known_rule(chain, len(rules) + 1, entry, target_offset, user_starts, offset + next_offset,
                                 known or {}, used, layout))
    builtin = [c for c in HOOK_CHAINS if c in BUILTIN_CHAINS[name]]
    users = sorted((c for c in chains if c not in BUILTIN_CHAINS[name]), key=lambda c: c.encode())
    if chain is not None or any(chains.get(c, (None,))[0] is None for c in builtin):
        raise Undecodable(f"{name}: a chain without its end")
    return IptTable(name, tuple(Chain(c, chains[c][0], tuple(chains[c][1])) for c in builtin + users))


def decode_tables(names: tuple[str, ...], blobs: dict[str, bytes | OSError], known: dict | None = None,
                  used: dict | None = None, family: str = "ip") -> Ruleset:
    """The tables of ip_tables_names / ip6_tables_names (in that file's
    order, as the tool prints them) from their blobs; raises Undecodable.
    `known`, `used`: as decode_table's."""
    tables = []
    for name in names:
        blob = blobs.get(name)
        if not isinstance(blob, bytes):
            raise Undecodable(f"{name}: {blob}")
        try:
            tables.append(decode_table(name, blob, known, used, LAYOUTS[family]))
        except (struct.error, IndexError) as exc:
            raise Undecodable(f"{name}: {exc}") from None
    return Ruleset("legacy", tuple(tables), (), family, source="kernel")


def _known_rule(chain: str, position: int, entry: bytes, target_offset: int, user_starts: dict[int, str],
                next_entry: int, known: dict, used: dict | None, layout: Layout) -> IptRule:
    """_rule, or what an earlier call decoded of the same content
    (remembered_rule): the entry without its counters, and where a standard
    target's offset leads (a jump's offset changes with every rule added
    before its chain)."""
    leads: tuple = ()
    verdict = _standard_verdict(entry, target_offset)
    if verdict is not None:
        leads = ("on",) if verdict == next_entry else ("chain", user_starts[verdict]) if verdict in user_starts \
            else ("verdict", verdict)
        entry_key = entry[:target_offset + _HEADER_SIZE]     # (the verdict is `leads`)
    else:
        entry_key = entry
    content = (layout.family, entry_key[:layout.counters.start] + entry_key[layout.counters.stop:], leads)
    return remembered_rule(chain, position, content, known, used,
                           lambda: _rule(chain, position, entry, target_offset, user_starts, next_entry, layout))


def _target_name(entries: bytes, at: int) -> str:
    return undecodable_name(_ENTRY_HEADER.unpack_from(entries, at)[1])


def _standard_verdict(entry: bytes, target_offset: int) -> int | None:
    size, name, _revision = _ENTRY_HEADER.unpack_from(entry, target_offset)
    if name.split(b"\0", 1)[0] != b"" or size < _HEADER_SIZE + 4:
        return None
    return struct.unpack_from("=i", entry, target_offset + _HEADER_SIZE)[0]


def _rule(chain: str, position: int, entry: bytes, target_offset: int, user_starts: dict[int, str],
          next_entry: int, layout: Layout) -> IptRule:
    """One rule's entry. `next_entry`: the offset a rule without a target
    "jumps" to (libiptc writes no target as a jump to the next entry)."""
    matches = _header(entry, layout)
    flags = entry[layout.header.size - 2]
    goto = bool(flags & layout.goto_flag)
    at = layout.size
    while at < target_offset:
        size, raw_name, revision = _ENTRY_HEADER.unpack_from(entry, at)
        if size < _HEADER_SIZE or at + size > target_offset:
            raise Undecodable("a match's size")
        name = undecodable_name(raw_name)
        decoder = xt_matches.get((name, revision))
        if decoder is None:
            raise Undecodable(f"match {name} revision {revision}")
        module, options = decoder(entry[at + _HEADER_SIZE:at + size], layout.family)
        matches.append(Match(module, ""))
        matches.extend(options)
        at += size
    size, raw_name, revision = _ENTRY_HEADER.unpack_from(entry, target_offset)
    if target_offset + size != len(entry):
        raise Undecodable("a target's size")
    name = undecodable_name(raw_name)
    target, options = "", ()
    if name == "":
        verdict = struct.unpack_from("=i", entry, target_offset + _HEADER_SIZE)[0]
        if verdict == next_entry and not goto:
            pass                                    # no target: on to the next rule
        elif verdict in user_starts:
            target = user_starts[verdict]
        elif verdict in _VERDICTS and not goto:
            target = _VERDICTS[verdict]
        else:
            raise Undecodable(f"verdict {verdict}{' (goto)' if goto else ''}")
    elif goto:
        raise Undecodable("a goto to an extension target")
    else:
        decoder = xt_targets.get((name, revision))
        if decoder is None:
            raise Undecodable(f"target {name} revision {revision}")
        target, options = name, tuple(decoder(entry[target_offset + _HEADER_SIZE:], layout.family))
    rule = IptRule(chain, position, tuple(matches), target, options, goto)
    return IptRule(chain, position, rule.matches, rule.target, rule.target_options, goto, rule.save_line())


def _header(entry: bytes, layout: Layout) -> list[Match]:
    """The rule header as print_rule4 / print_rule6 print it: -s -d -i -o -p
    (and IPv4's -f)."""
    fields = layout.header.unpack_from(entry)
    src, dst, smsk, dmsk, iniface, outiface, inmask, outmask, proto = fields[:9]
    flags, invflags = fields[-2], fields[-1]
    if layout is IPV4:
        known_flags, known_inv = IPT_F_FRAG | layout.goto_flag, 0x7F & ~INV_TOS
    else:
        tos = fields[9]
        known_flags, known_inv = IP6T_F_PROTO | layout.goto_flag, 0x7F & ~(INV_TOS | INV_FRAG)
        if tos or bool(flags & IP6T_F_PROTO) != bool(proto):
            raise Undecodable("ip6tables header: tos, or the protocol flag")   # (-p all with the flag: not "all")
    if flags & ~known_flags or invflags & ~known_inv or proto > 0xFF:
        raise Undecodable("rule header flags")
    matches = []
    for option, address, mask, invert in (("-s", src, smsk, invflags & INV_SRCIP),
                                          ("-d", dst, dmsk, invflags & INV_DSTIP)):
        if int.from_bytes(address, "big") & ~int.from_bytes(mask, "big"):
            raise Undecodable("an address outside its mask")     # never matches
        if mask != bytes(len(mask)) or invert:
            matches.append(Match("", option, (_address(address, mask),), bool(invert)))
    for option, name, mask, invert in (("-i", iniface, inmask, invflags & INV_VIA_IN),
                                       ("-o", outiface, outmask, invflags & INV_VIA_OUT)):
        text = _interface(name, mask)
        if text:
            matches.append(Match("", option, (text,), bool(invert)))
        elif invert:
            raise Undecodable("an inverted empty interface")
    if proto:
        matches.append(Match("", "-p", (protocol_name(proto),), bool(invflags & INV_PROTO)))
    elif invflags & INV_PROTO:
        raise Undecodable("an inverted protocol 0")
    if layout is IPV4 and flags & IPT_F_FRAG:
        matches.append(Match("", "-f", (), bool(invflags & INV_FRAG)))
    elif invflags & INV_FRAG:
        raise Undecodable("an inverted fragment flag without it")
    return matches


def _address(address: bytes, mask: bytes) -> str:
    """As print_ip: a prefix length where the mask is one, else (IPv4) the
    mask dotted."""
    width = len(mask) * 8
    whole = int.from_bytes(mask, "big")
    bits = width - ((~whole) & ((1 << width) - 1)).bit_length()
    contiguous = whole == ((1 << width) - 1) ^ ((1 << (width - bits)) - 1)
    if width == 32:
        text = str(ipaddress.IPv4Address(address))
        return f"{text}/{bits}" if contiguous else f"{text}/{ipaddress.IPv4Address(mask)}"
    words = struct.unpack("!8H", address)
    if not contiguous or (words[:6] == (0,) * 6 and words[6]) or (words[:5] == (0,) * 5 and words[5] == 0xFFFF):
        # inet_ntop would print an IPv4 part (::a.b.c.d, ::ffff:a.b.c.d), the tool a dotted mask
        raise Undecodable("an IPv6 address or mask printed otherwise")
    return f"{ipaddress.IPv6Address(address)}/{bits}"


def _interface(name: bytes, mask: bytes) -> str:
    """As print_iface: the name's bytes the mask covers; `+` where the mask
    ends inside the name. Only what iptables writes: a mask of leading 0xff
    bytes over the name and, for an exact name, its NUL; "" for none."""
    covered = len(mask) - len(mask.lstrip(b"\xff"))
    if mask != b"\xff" * covered + bytes(16 - covered):
        raise Undecodable("an interface mask that is not a prefix")
    if covered == 0:
        return ""
    nul = name.find(b"\0", 0, covered)
    if nul not in (-1, covered - 1) or nul == 0 or covered == 16 and nul == -1:   # (16 bytes, no NUL: no name)
        raise Undecodable("an interface mask beyond the name")   # the kernel compares those bytes too
    text = name[:nul] if nul != -1 else name[:covered] + b"+"
    if b"+" in text[:-1] or (nul != -1 and text.endswith(b"+")):
        raise Undecodable("an interface name with a +")          # an exact "x+" reads as a wildcard
    try:
        return text.decode()
    except UnicodeDecodeError:
        raise Undecodable("an interface name that is not UTF-8") from None
