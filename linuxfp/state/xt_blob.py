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
Anything the decoder does not know exactly raises Undecodable and the tool
reads the family's tables instead. IPv4 only; ip6tables-legacy goes to the
tool. tests/test_xt_blob.py checks both readings agree rule for rule.
"""
from __future__ import annotations

import ipaddress
import struct

from .iptables import BUILTIN_CHAINS, Chain, IptRule, IptTable, Match, Ruleset
from .xt_extensions import Undecodable, protocol_name, xt_matches, xt_targets

NF_INET_NUMHOOKS = 5
HOOK_CHAINS = ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")   # NF_INET_* order
_GETINFO = struct.Struct(f"=32sI{NF_INET_NUMHOOKS}I{NF_INET_NUMHOOKS}III")
# struct ipt_ip: src, dst, smsk, dmsk, iniface, outiface, their masks, proto, flags, invflags
_IPT_IP = struct.Struct("=4s4s4s4s16s16s16s16sHBB")
_IPT_ENTRY_SIZE = 112                   # sizeof(struct ipt_entry): its matches start here
_OFFSETS = struct.Struct("=HH")         # target_offset, next_offset (after ipt_ip and nfcache)
_OFFSETS_AT = 88
_ENTRY_HEADER = struct.Struct("=H29sB")  # xt_entry_match / xt_entry_target (user view): size, name, revision
_HEADER_SIZE = 32
IPT_F_FRAG, IPT_F_GOTO = 0x01, 0x02
IPT_INV_VIA_IN, IPT_INV_VIA_OUT, IPT_INV_TOS = 0x01, 0x02, 0x04
IPT_INV_SRCIP, IPT_INV_DSTIP, IPT_INV_FRAG, IPT_INV_PROTO = 0x08, 0x10, 0x20, 0x40
# standard verdicts (-verdict - 1) and XT_RETURN
_VERDICTS = {-1: "DROP", -2: "ACCEPT", -5: "RETURN"}


def decode_table(name: str, blob: bytes, known: dict | None = None, used: dict | None = None) -> IptTable:
    """One table's blob (GET_INFO's answer, then its entries) → the table as
    iptables-legacy-save prints it; raises Undecodable. `known`: rules an
    earlier call decoded, by content (its `used`); `used` collects this
    call's."""
    if name not in BUILTIN_CHAINS:
        raise Undecodable(f"table {name}")
    fields = _GETINFO.unpack_from(blob)
    valid_hooks = fields[1]
    hook_entry = fields[2:2 + NF_INET_NUMHOOKS]
    underflow = fields[2 + NF_INET_NUMHOOKS:2 + 2 * NF_INET_NUMHOOKS]
    num_entries, size = fields[-2], fields[-1]
    entries = blob[_GETINFO.size:_GETINFO.size + size]
    if len(entries) != size:
        raise Undecodable(f"{name}: a short blob")
    hooks = [h for h in range(NF_INET_NUMHOOKS) if valid_hooks & (1 << h)]
    if tuple(HOOK_CHAINS[h] for h in hooks) != tuple(sorted(BUILTIN_CHAINS[name], key=HOOK_CHAINS.index)):
        raise Undecodable(f"{name}: hooks {valid_hooks:#x}")
    starts = {hook_entry[h]: HOOK_CHAINS[h] for h in hooks}
    policies = {underflow[h]: HOOK_CHAINS[h] for h in hooks}

    # first pass: every entry's offset, and where each user chain's rules start
    listed: list[tuple[int, int, int]] = []     # (offset, target_offset, next_offset)
    user_starts: dict[int, str] = {}
    heads: set[int] = set()                     # ERROR entries: user chain heads and the table's end
    offset = 0
    while offset < size:
        target_offset, next_offset = _OFFSETS.unpack_from(entries, offset + _OFFSETS_AT)
        if next_offset < _IPT_ENTRY_SIZE or offset + next_offset > size or target_offset > next_offset:
            raise Undecodable(f"{name}: entry at {offset}")
        listed.append((offset, target_offset, next_offset))
        target_name = _target_name(entries, offset + target_offset)
        if target_name == "ERROR":
            heads.add(offset)
            if offset + next_offset < size:
                user_starts[offset + next_offset] = _cstr(entries[offset + target_offset + _HEADER_SIZE:
                                                                  offset + next_offset])
        offset += next_offset
    if len(listed) != num_entries:
        raise Undecodable(f"{name}: {len(listed)} entries, {num_entries} announced")

    chains: dict[str, tuple[str | None, list[IptRule]]] = {}
    chain: str | None = None
    for offset, target_offset, next_offset in listed:
        entry = entries[offset:offset + next_offset]
        target_name = _target_name(entries, offset + target_offset)
        if offset in starts:
            chain = starts[offset]
            chains[chain] = (None, [])
        if target_name == "ERROR":
            label = _cstr(entry[target_offset + _HEADER_SIZE:])
            if offset + next_offset == size and label == "ERROR":
                break                               # the table's end
            chain = label
            chains[chain] = (None, [])
            continue
        if chain is None:
            raise Undecodable(f"{name}: an entry outside any chain")
        if offset in policies:
            verdict = _standard_verdict(entry, target_offset)
            if policies[offset] != chain or verdict not in (-1, -2) or entry[:_IPT_IP.size] != bytes(_IPT_IP.size) \
                    or target_offset != _IPT_ENTRY_SIZE:
                raise Undecodable(f"{name} {chain}: its policy entry")
            chains[chain] = (_VERDICTS[verdict], chains[chain][1])
            chain = None
            continue
        if offset + next_offset in heads:
            # a user chain's closing entry: an unconditional RETURN
            if chain in BUILTIN_CHAINS[name] or _standard_verdict(entry, target_offset) != -5 \
                    or entry[:_IPT_IP.size] != bytes(_IPT_IP.size) or target_offset != _IPT_ENTRY_SIZE:
                raise Undecodable(f"{name} {chain}: its closing entry")
            chain = None
            continue
        rules = chains[chain][1]
        rules.append(_known_rule(chain, len(rules) + 1, entry, target_offset, user_starts, offset + next_offset,
                                 known or {}, used))
    builtin = [c for c in HOOK_CHAINS if c in BUILTIN_CHAINS[name]]
    users = sorted((c for c in chains if c not in BUILTIN_CHAINS[name]), key=lambda c: c.encode())
    if any(chains.get(c, (None,))[0] is None for c in builtin):
        raise Undecodable(f"{name}: a built-in chain without its policy")
    return IptTable(name, tuple(Chain(c, chains[c][0], tuple(chains[c][1])) for c in builtin + users))


def decode_tables(names: tuple[str, ...], blobs: dict[str, bytes | OSError], known: dict | None = None,
                  used: dict | None = None) -> Ruleset:
    """The tables of ip_tables_names (in that file's order, as the tool
    prints them) from their blobs; raises Undecodable. `known`, `used`: as
    decode_table's."""
    tables = []
    for name in names:
        blob = blobs.get(name)
        if not isinstance(blob, bytes):
            raise Undecodable(f"{name}: {blob}")
        tables.append(decode_table(name, blob, known, used))
    return Ruleset("legacy", tuple(tables), (), "ip")


_COUNTERS = slice(96, 112)              # struct ipt_entry's counters: traffic, not the rule


def _known_rule(chain: str, position: int, entry: bytes, target_offset: int, user_starts: dict[int, str],
                next_entry: int, known: dict, used: dict | None) -> IptRule:
    """_rule, or what an earlier call decoded of the same content: the entry
    without its counters, and where a standard target's offset leads (a
    jump's offset changes with every rule added before its chain). A `set`
    match names its set by index, resolved when decoded: such rules are
    decoded every time."""
    leads = None
    if _standard_verdict(entry, target_offset) is not None:
        verdict = _standard_verdict(entry, target_offset)
        leads = "next" if verdict == next_entry else user_starts.get(verdict, verdict)
        entry_key = entry[:target_offset + _HEADER_SIZE]     # (the verdict is `leads`)
    else:
        entry_key = entry
    content = (entry_key[:_COUNTERS.start] + entry_key[_COUNTERS.stop:], leads)
    if content in known:
        matches, target, options, goto, words = known[content]
        rule = IptRule(chain, position, matches, target, options, goto, f"-A {chain}{words}")
    else:
        rule = _rule(chain, position, entry, target_offset, user_starts, next_entry)
        if any(m.module == "set" for m in rule.matches):
            return rule
    if used is not None:
        used[content] = (rule.matches, rule.target, rule.target_options, rule.goto, rule.text[len(f"-A {chain}"):])
    return rule


def _cstr(raw: bytes) -> str:
    try:
        return raw.split(b"\0", 1)[0].decode()
    except UnicodeDecodeError:
        raise Undecodable("a name that is not UTF-8") from None


def _target_name(entries: bytes, at: int) -> str:
    return _cstr(_ENTRY_HEADER.unpack_from(entries, at)[1])


def _standard_verdict(entry: bytes, target_offset: int) -> int | None:
    size, name, _revision = _ENTRY_HEADER.unpack_from(entry, target_offset)
    if name.split(b"\0", 1)[0] != b"" or size < _HEADER_SIZE + 4:
        return None
    return struct.unpack_from("=i", entry, target_offset + _HEADER_SIZE)[0]


def _rule(chain: str, position: int, entry: bytes, target_offset: int, user_starts: dict[int, str],
          next_entry: int) -> IptRule:
    """One rule's entry. `next_entry`: the offset a rule without a target
    "jumps" to (libiptc writes no target as a jump to the next entry)."""
    ip = _IPT_IP.unpack_from(entry)
    src, dst, smsk, dmsk, iniface, outiface, inmask, outmask, proto, flags, invflags = ip
    if flags & ~(IPT_F_FRAG | IPT_F_GOTO) or invflags & ~0x7F or invflags & IPT_INV_TOS:
        raise Undecodable("rule header flags")
    matches = []
    for option, address, mask, invert in (("-s", src, smsk, invflags & IPT_INV_SRCIP),
                                          ("-d", dst, dmsk, invflags & IPT_INV_DSTIP)):
        if int.from_bytes(address, "big") & ~int.from_bytes(mask, "big"):
            raise Undecodable("an address outside its mask")     # never matches
        if mask != bytes(4) or address != bytes(4) or invert:
            matches.append(Match("", option, (_address(address, mask),), bool(invert)))
    for option, name, mask, invert in (("-i", iniface, inmask, invflags & IPT_INV_VIA_IN),
                                       ("-o", outiface, outmask, invflags & IPT_INV_VIA_OUT)):
        if mask[0]:
            matches.append(Match("", option, (_interface(name, mask),), bool(invert)))
        elif invert:
            raise Undecodable("an inverted empty interface")
    if proto:
        matches.append(Match("", "-p", (protocol_name(proto),), bool(invflags & IPT_INV_PROTO)))
    elif invflags & IPT_INV_PROTO:
        raise Undecodable("an inverted protocol 0")
    if flags & IPT_F_FRAG:
        matches.append(Match("", "-f", (), bool(invflags & IPT_INV_FRAG)))
    elif invflags & IPT_INV_FRAG:
        raise Undecodable("an inverted fragment flag without it")
    at = _IPT_ENTRY_SIZE
    while at < target_offset:
        size, raw_name, revision = _ENTRY_HEADER.unpack_from(entry, at)
        if size < _HEADER_SIZE or at + size > target_offset:
            raise Undecodable("a match's size")
        name = _cstr(raw_name)
        decoder = xt_matches.get((name, revision))
        if decoder is None:
            raise Undecodable(f"match {name} revision {revision}")
        module, options = decoder(entry[at + _HEADER_SIZE:at + size], "ip")
        matches.append(Match(module, ""))
        matches.extend(options)
        at += size
    size, raw_name, revision = _ENTRY_HEADER.unpack_from(entry, target_offset)
    if target_offset + size != len(entry):
        raise Undecodable("a target's size")
    name = _cstr(raw_name)
    goto = bool(flags & IPT_F_GOTO)
    target, options = "", ()
    if name == "":
        verdict = struct.unpack_from("=i", entry, target_offset + _HEADER_SIZE)[0]
        if verdict == next_entry and not goto:
            pass                                    # no target: on to the next rule
        elif verdict >= 0:
            if verdict not in user_starts:
                raise Undecodable(f"a jump to offset {verdict}")
            target = user_starts[verdict]
        elif verdict in _VERDICTS:
            target = _VERDICTS[verdict]
        else:
            raise Undecodable(f"verdict {verdict}")
    else:
        decoder = xt_targets.get((name, revision))
        if decoder is None:
            raise Undecodable(f"target {name} revision {revision}")
        target, options = name, tuple(decoder(entry[target_offset + _HEADER_SIZE:], "ip"))
    if goto and not (name == "" and target in user_starts.values()):
        raise Undecodable("a goto that is not to a chain")
    rule = IptRule(chain, position, tuple(matches), target, options, goto)
    return IptRule(chain, position, rule.matches, rule.target, rule.target_options, goto, rule.save_line())


def _address(address: bytes, mask: bytes) -> str:
    """As iptables-legacy-save's print_ip: a prefix length where the mask is
    one, else the mask dotted."""
    text = str(ipaddress.IPv4Address(address))
    whole = int.from_bytes(mask, "big")
    bits = 32 - ((~whole) & 0xFFFFFFFF).bit_length()
    if whole == (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF:
        return f"{text}/{bits}"
    return f"{text}/{ipaddress.IPv4Address(mask)}"


def _interface(name: bytes, mask: bytes) -> str:
    """As print_iface: the name's bytes the mask covers; `+` where the mask
    ends inside the name."""
    covered = len(mask) - len(mask.lstrip(b"\xff")) if mask.startswith(b"\xff") else 0
    if mask != b"\xff" * covered + bytes(16 - covered):
        raise Undecodable("an interface mask that is not a prefix")
    out = bytearray()
    for i in range(16):
        if mask[i]:
            if name[i]:
                out.append(name[i])
        else:
            if name[i - 1]:
                out += b"+"
            break
    if b"+" in out[:-1] or (covered > len(out) and out.endswith(b"+")):
        raise Undecodable("an interface name with a +")          # an exact "x+" reads as a wildcard
    try:
        return out.decode()
    except UnicodeDecodeError:
        raise Undecodable("an interface name that is not UTF-8") from None
