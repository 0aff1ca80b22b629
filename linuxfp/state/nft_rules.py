"""iptables-nft rules read straight from nf_tables over nfnetlink and decoded
into the same model `iptables-nft-save` output parses into, without running
the tool.

Why: the tool is a process (~3 ms) and, after a commit that deleted
anything, its own netlink socket's close() waits for nf_tables' destroy work
(an RCU grace period, ~12 ms measured after `iptables -D`) before it prints
a word. A dump through the controller's kept query socket costs a fraction
of a millisecond.

The decoder knows exactly what iptables-nft 1.8.9 writes for the matches
and targets below, and nothing else:
* the rule header: `-s/-d` (payload loads of the address, masked), `-i/-o`
  (interface names; a name compared without its NUL is a `+` prefix),
  `-p` (meta l4proto), `-f` (the fragment offset);
* native `-m tcp/udp` ports and TCP flags, `-m mark`, `-m limit`, a
  comment kept in the rule's user data;
* x_tables matches (nft `match`, xt_extensions.py): comment, multiport,
  conntrack and state (states only), icmp, icmp6, set, addrtype, statistic,
  tcp, udp, mark, limit, length, pkttype, ttl; targets (nft `target`):
  REJECT, MASQUERADE, DNAT, SNAT, MARK, LOG; verdicts ACCEPT, DROP, RETURN,
  jumps and gotos.
Anything else — an unknown expression, match, revision, layout, flag,
register, a value outside its mask, a base chain that is not the table's
built-in one, a chain named like a verdict — raises Undecodable with the
reason for the whole read, and the caller asks iptables-nft-save, which
stays the authority (it also says which tables are incompatible).
tests/test_rule_decoders.py checks that both readings agree, rule for rule
and down to the printed line, over a corpus of rulesets.

decode_native_rule reads a native table's rule (the nft tool's, for
nft_forward.py) with the same expression readers and what the tool writes
besides — `ct state`, `meta nfproto` in inet tables, `ip protocol`, `icmp
type`, whole interface names, ranges as `cmp gte` + `cmp lte` — and never
raises: a rule keeps the tests before the first expression it does not know.
"""
from __future__ import annotations

import functools
import ipaddress
import socket
import struct
import threading
from dataclasses import dataclass, replace

from . import netlink as nl
from .decode import NFNL_SUBSYS_NFTABLES
from .netfilter_hooks import TABLE_PRIORITY
from .iptables import BUILTIN_CHAINS, Chain, IptRule, IptTable, Match, Ruleset, remembered_rule
from .xt_extensions import (XT_LIMIT_SCALE, Undecodable, limit_options, protocol_name, tcp_flags, undecodable_name,
                            xt_matches, xt_targets)

NFT_MSG_GETCHAIN = 4
NFT_MSG_NEWCHAIN = 3
NFT_MSG_GETRULE = 7
NFT_MSG_NEWRULE = 6
_NFGENMSG = struct.Struct("=BBH")
FAMILIES = {"ip": socket.AF_INET, "ip6": socket.AF_INET6}


def nft_message(kind: int) -> int:
    """The netlink message type of nf_tables' message `kind` (NFT_MSG_*)."""
    return (NFNL_SUBSYS_NFTABLES << 8) | kind


# Each x_tables table's built-in base chains as iptables-nft creates them:
# name -> (hook number, priority, chain type). A base chain that differs in
# any of them is one iptables-nft-save calls incompatible.
_HOOK = {"PREROUTING": 0, "INPUT": 1, "FORWARD": 2, "OUTPUT": 3, "POSTROUTING": 4}
_NAT_PRIORITY = {"PREROUTING": -100, "INPUT": 100, "OUTPUT": -100, "POSTROUTING": 100}
# iptables-nft-save prints tables in this order, and built-in chains in
# hook order before the user chains (sorted by name)
TABLE_ORDER = ("mangle", "security", "raw", "filter", "nat")


# names a jump would be read as something else by: verdicts, built-in chains
_NOT_A_USER_CHAIN = frozenset({"", "ACCEPT", "DROP", "RETURN", "QUEUE", "ERROR", *_HOOK})


def _builtin_base_chain(table: str, chain: str) -> tuple[int, int, str]:
    if table == "nat":
        return _HOOK[chain], _NAT_PRIORITY[chain], "nat"
    kind = "route" if (table, chain) == ("mangle", "OUTPUT") else "filter"
    return _HOOK[chain], TABLE_PRIORITY[table], kind


# --- netlink attribute numbers (linux/netfilter/nf_tables.h) ------------------

NFTA_CHAIN_TABLE, NFTA_CHAIN_NAME, NFTA_CHAIN_HOOK, NFTA_CHAIN_POLICY, NFTA_CHAIN_TYPE = 1, 3, 4, 5, 7
NFTA_CHAIN_FLAGS = 10
NFTA_HOOK_HOOKNUM, NFTA_HOOK_PRIORITY = 1, 2
NFTA_RULE_TABLE, NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS, NFTA_RULE_USERDATA = 1, 2, 4, 7
NFTA_EXPR_NAME, NFTA_EXPR_DATA = 1, 2
NFTA_DATA_VALUE, NFTA_DATA_VERDICT = 1, 2
NFTA_VERDICT_CODE, NFTA_VERDICT_CHAIN = 1, 2
NF_DROP, NF_ACCEPT = 0, 1
NFT_JUMP, NFT_GOTO, NFT_RETURN = -3, -4, -5
NFT_CMP_EQ, NFT_CMP_NEQ, NFT_CMP_LTE, NFT_CMP_GTE = 0, 1, 3, 5
NFT_META_MARK, NFT_META_IIFNAME, NFT_META_OIFNAME, NFT_META_NFPROTO, NFT_META_L4PROTO = 3, 6, 7, 15, 16
NFT_CT_STATE = 0
NFPROTO = {"ip": 2, "ip6": 10}
NFT_PAYLOAD_NETWORK_HEADER, NFT_PAYLOAD_TRANSPORT_HEADER = 1, 2
NFTNL_UDATA_RULE_COMMENT = 0
NFT_REG_1 = 1
# what a meta load puts in the register, in bytes
_META_SIZE = {NFT_META_MARK: 4, NFT_META_IIFNAME: 16, NFT_META_OIFNAME: 16, NFT_META_L4PROTO: 1}
_NATIVE_META_SIZE = {**_META_SIZE, NFT_META_NFPROTO: 1}
# nft's `ct state` bits (NF_CT_STATE_BIT, nf_conntrack_common.h): exactly
# one is set for any packet, as xt_conntrack's state (names as it prints them)
_NFT_CT_STATES = (("INVALID", 1 << 0), ("NEW", 1 << 3), ("RELATED", 1 << 2), ("ESTABLISHED", 1 << 1),
                  ("UNTRACKED", 1 << 6))


class NeverMatches(Exception):
    """A native rule that matches none of the packets read for: an inet
    rule testing for the other family's, a lookup in an empty set."""


@dataclass(frozen=True)
class KeySet:
    """The keys of a set only commits change — a rule's own (`{ 22, 80,
    1000-2000 }`) or a named one (`@blocklist`) — (nft_forward.key_set):
    its keys' width in bytes and the keys, as inclusive ranges of the key
    read as a big-endian number (a payload's, network order)."""

    width: int
    ranges: tuple[tuple[int, int], ...]


def _nested_value(data: bytes) -> bytes:
    value = nl.parse_attrs(data).get(NFTA_DATA_VALUE)
    if value is None:
        raise Undecodable("data without a value")
    return value


# --- reading ------------------------------------------------------------------

# (netns cookie, family) -> what the last read knew: (rule content -> the
# decoded rule, the rule's bytes as dumped -> its content)
_decoded: dict[tuple[int, str], tuple[dict, dict]] = {}
_decoded_lock = threading.Lock()


def read_native(family: str = "ip", generation: int | None = None) -> Ruleset:
    """The iptables-nft rules of `family` ("ip" or "ip6") in the calling
    thread's namespace. Raises Undecodable, saying why, when
    iptables-nft-save must read them (an expression this module does not
    know, or the ruleset kept changing while it was dumped). Rules whose
    content the last read of this namespace decoded are not decoded again.
    `generation`: the nf_tables generation read before this call (saves
    reading it again; as read_native_tables takes it)."""
    from .netfilter import nft_generation           # (netfilter imports this module)
    key = (nl.netns_cookie(), family)
    with _decoded_lock:
        known, dumped = _decoded.get(key, ({}, {}))
    for _ in range(3):
        before = generation if generation is not None else nft_generation()
        generation = None
        try:
            with nl.query_socket(nl.NETLINK_NETFILTER) as sock:
                request = _NFGENMSG.pack(FAMILIES[family], 0, 0)
                chains = sock.dump(nft_message(NFT_MSG_GETCHAIN), request)
                rules = sock.dump(nft_message(NFT_MSG_GETRULE), request)
        except (OSError, nl.DumpInterrupted, struct.error) as exc:
            raise Undecodable(f"nf_tables could not be dumped: {exc}") from None
        if before is None:
            raise Undecodable("the nf_tables generation cannot be read")
        if nft_generation() != before:
            continue                                # a commit came between the dumps
        used: dict = {}
        dumped_now: dict = {}
        try:
            ruleset = decode_ruleset(chains, rules, family, known, used, (dumped, dumped_now))
        except (struct.error, IndexError) as exc:
            raise Undecodable(f"a malformed dump: {exc}") from None
        with _decoded_lock:
            _decoded[key] = (used, dumped_now)
        return ruleset
    raise Undecodable("the ruleset kept changing while it was dumped")


def decode_ruleset(chain_messages, rule_messages, family: str = "ip", known: dict | None = None,
                   used: dict | None = None, dumped: tuple[dict, dict] | None = None) -> Ruleset:
    """NFT_MSG_NEWCHAIN and NFT_MSG_NEWRULE dump replies → the Ruleset
    iptables-nft-save would print; raises Undecodable. `known`: rules a
    previous call decoded, by content (its `used`); `used` collects this
    call's; `dumped`: (the previous call's, this call's) content keys by
    the rules' bytes as dumped."""
    chains: dict[str, dict[str, tuple[str | None, list[IptRule]]]] = {}
    for table, name, a in _iptables_objects(chain_messages, NFT_MSG_NEWCHAIN, NFTA_CHAIN_TABLE, NFTA_CHAIN_NAME):
        if a.get(NFTA_CHAIN_FLAGS) is not None and nl.be32(a[NFTA_CHAIN_FLAGS]) & ~1:
            raise Undecodable(f"chain {table} {name}: flags")     # (1: base chain)
        policy = _policy(table, name, a)
        if policy is None and name in _NOT_A_USER_CHAIN:
            raise Undecodable(f"a user chain called {name!r}")
        chains.setdefault(table, {})[name] = (policy, [])
    for table, chain, a in _iptables_objects(rule_messages, NFT_MSG_NEWRULE, NFTA_RULE_TABLE, NFTA_RULE_CHAIN):
        if chain not in chains.get(table, {}):
            raise Undecodable(f"rule of unknown chain {table} {chain}")
        rules = chains[table][chain][1]
        rules.append(_decoded_rule(chain, len(rules) + 1, a, family, known or {}, used, dumped))
    tables = []
    for table in TABLE_ORDER:
        if table not in chains:
            continue
        # iptables-nft creates a built-in chain when it is first used, and the
        # tool prints every one of the table's (a missing one: ACCEPT, empty)
        for name in BUILTIN_CHAINS[table]:
            chains[table].setdefault(name, ("ACCEPT", []))
        builtin = sorted(BUILTIN_CHAINS[table], key=_HOOK.__getitem__)
        users = sorted((c for c in chains[table] if c not in BUILTIN_CHAINS[table]), key=lambda c: c.encode())
        tables.append(IptTable(table, tuple(Chain(c, chains[table][c][0], tuple(chains[table][c][1]))
                                            for c in builtin + users)))
    return Ruleset("nft", tuple(tables), (), family, source="kernel")


def _iptables_objects(messages, kind: int, table_attribute: int, name_attribute: int):
    """(table, name, attributes) of each dump answer of `kind` in one of
    iptables' tables (the save tool ignores every other table too)."""
    for message in messages:
        if message.type & 0xFF != kind:
            continue
        a = nl.parse_attrs(message.payload, _NFGENMSG.size)
        table = undecodable_name(a.get(table_attribute, b""))
        if table in BUILTIN_CHAINS:
            yield table, undecodable_name(a.get(name_attribute, b"")), a


def _policy(table: str, name: str, a: dict[int, bytes]) -> str | None:
    hook = a.get(NFTA_CHAIN_HOOK)
    if hook is None:
        if name in BUILTIN_CHAINS[table]:
            raise Undecodable(f"{table} {name} is not a base chain")
        return None
    if name not in BUILTIN_CHAINS[table]:
        raise Undecodable(f"base chain {table} {name} is not a built-in one")
    h = nl.parse_attrs(hook)
    seen = (nl.be32(h.get(NFTA_HOOK_HOOKNUM, b"\xff" * 4)),
            struct.unpack("!i", h.get(NFTA_HOOK_PRIORITY, b"\x7f" * 4))[0],
            nl.cstr(a.get(NFTA_CHAIN_TYPE, b"")))
    if seen != _builtin_base_chain(table, name):
        raise Undecodable(f"base chain {table} {name} is not the built-in one")
    policy = nl.be32(a.get(NFTA_CHAIN_POLICY, struct.pack("!I", NF_ACCEPT)))
    if policy not in (NF_ACCEPT, NF_DROP):
        raise Undecodable(f"{table} {name}: policy {policy}")
    return "ACCEPT" if policy == NF_ACCEPT else "DROP"


# --- one rule -----------------------------------------------------------------

class RuleReading:
    """What iptables-nft-save gathers of one rule while it walks the
    expressions (or decode_native_rule of a native one): the header fields,
    the matches in order, the verdict."""

    def __init__(self, family: str, native_family: str = "", sets: dict[str, KeySet] | None = None,
                 before_routing: bool = False, before_conntrack: bool = False):
        self.family = family
        self.sets = sets or {}              # a native rule's table's key sets, by name
        # a native prerouting chain's: no egress device yet (an oifname
        # reads empty), and below conntrack's priority no entry either (a
        # ct test there is the kernel's)
        self.before_routing, self.before_conntrack = before_routing, before_conntrack
        # a native table's rule (nft_forward.py), read for `family`'s packets:
        # its family ("ip", "ip6", "inet"), which allows what the nft tool
        # writes and iptables-nft never does (below: `native`)
        self.native = native_family
        self.nfproto_tested = False         # inet: `meta nfproto` came before any network-header test
        self.at_least: tuple[int, bytes] | None = None   # a `cmp gte` waiting for its `cmp lte`
        self.header: dict[str, Match] = {}
        self.matches: list[Match] = []
        self.proto: int | None = None
        # "tcp"/"udp" -> its native options, in save order (None: an x_tables match)
        self.transport: dict[str, list[Match] | None] = {}
        self.target, self.goto, self.target_options = "", False, ()
        self.ended = False
        self.registers: dict[int, tuple] = {}

    def kept(self) -> tuple:
        """What restore() takes back to: the tests read so far."""
        return (dict(self.header), list(self.matches), self.proto, self.nfproto_tested,
                {name: None if options is None else list(options) for name, options in self.transport.items()})

    def restore(self, kept: tuple) -> None:
        """Back to kept(), the tests an expression not understood left half-read dropped."""
        self.header, self.matches, self.proto, self.nfproto_tested, self.transport = kept
        self.registers, self.at_least = {}, None

    def module(self, name: str) -> list[Match]:
        """The options of a native tcp/udp match, created where its first
        expression is (iptables-nft-save prints it there)."""
        if self.transport.get(name, ()) is None:
            raise Undecodable(f"{name} as a match and written natively")
        if name not in self.transport:
            self.transport[name] = []
            self.matches.append(Match(name, ""))
            self.matches.append(Match(name, "\0" + name))   # placeholder for its options
        return self.transport[name]


_ADDRESS_OFFSETS = {"ip": {12: "-s", 16: "-d"}, "ip6": {8: "-s", 24: "-d"}}
_WIDTH = {"ip": 4, "ip6": 16}


_COUNTER = nl.attr(NFTA_EXPR_NAME, b"counter\0")


def _decoded_rule(chain: str, position: int, a: dict[int, bytes], family: str, known: dict,
                  used: dict | None, dumped: tuple[dict, dict] | None = None) -> IptRule:
    """decode_rule, or what an earlier read decoded of the same content
    (remembered_rule): its expressions but for its counters' values, and
    its user data. `dumped`: (the last read's, this read's) content keys
    by the rule's bytes as dumped, counters included."""
    expressions, userdata = a.get(NFTA_RULE_EXPRESSIONS, b""), a.get(NFTA_RULE_USERDATA)
    # (most rules' counters did not move since the last read)
    raw = (family, expressions, userdata)
    content = dumped[0].get(raw) if dumped is not None else None
    if content is None:
        content = (family, _without_counters(expressions), userdata)
    rule = remembered_rule(chain, position, content, known, used, lambda: decode_rule(chain, position, a, family))
    if dumped is not None and used is not None and content in used:
        dumped[1][raw] = content
    return rule


def _without_counters(expressions: bytes) -> bytes:
    """The rule's expressions, each whole, except its counters (whose values
    change with every packet)."""
    kept, offset, end = [], 0, len(expressions)
    while offset + 4 <= end:
        length = int.from_bytes(expressions[offset:offset + 2], "little")
        if length < 4:
            break
        if not expressions.startswith(_COUNTER, offset + 4):
            kept.append(expressions[offset:offset + length])
        offset += (length + 3) & ~3
    return b"".join(kept)


def decode_rule(chain: str, position: int, a: dict[int, bytes], family: str = "ip") -> IptRule:
    """One NFT_MSG_NEWRULE's attributes → the rule iptables-nft-save prints."""
    rule = RuleReading(family)
    for _, element in nl.parse_attr_list(a.get(NFTA_RULE_EXPRESSIONS, b"")):
        name, data = _expression(element)
        if rule.ended:
            raise Undecodable(f"{name} after the verdict")
        handler = _EXPRESSIONS.get(name)
        if handler is None:
            raise Undecodable(f"expression {name}")
        handler(rule, data)
    if rule.registers:
        raise Undecodable("a loaded register nobody compared")
    if NFTA_RULE_USERDATA in a:
        rule.matches.extend(_userdata_comment(a[NFTA_RULE_USERDATA]))
    return assembled(rule, chain, position)


def assembled(rule: RuleReading, chain: str, position: int, *more: Match) -> IptRule:
    """The rule's matches in the order iptables-nft-save prints them (then
    `more`), with its target and its save line."""
    matches = [rule.header[o] for o in ("-s", "-d", "-i", "-o", "-p", "-f") if o in rule.header]
    for match in rule.matches:
        if match.option.startswith("\0"):
            matches.extend(rule.transport[match.option[1:]])
        else:
            matches.append(match)
    built = IptRule(chain, position, (*matches, *more), rule.target, tuple(rule.target_options), rule.goto)
    return IptRule(chain, position, built.matches, built.target, built.target_options, built.goto, built.save_line())


# where a native rule's expressions stop being known: the rule then matches,
# for the fast path, whatever passed the tests before (Match("nft", ...):
# no filter evaluates it, so the kernel gets those packets)
UNKNOWN_MODULE = "nft"


def kernel_from(rule: IptRule, cut: int, why: str) -> IptRule:
    """`rule` from its `cut`-th match on replaced by a test no filter
    evaluates, named `why`, and without a target: the packets that pass the
    tests before it are the kernel's, whatever the rule would do to them."""
    kept = replace(rule, matches=(*rule.matches[:cut], Match(UNKNOWN_MODULE, ""),
                                  Match(UNKNOWN_MODULE, "--expression", (why,))),
                   target="", target_options=(), goto=False)
    return replace(kept, text=kept.save_line())


def decode_native_rule(chain: str, position: int, a: dict[int, bytes], family: str,
                       native_family: str, sets: dict[str, KeySet] | None = None,
                       before_routing: bool = False, before_conntrack: bool = False) -> IptRule | None:
    """One rule of a native table (of `native_family`: "ip", "ip6" or
    "inet"), as it treats `family`'s packets, in the model iptables' rules
    read into: None when it never matches them (an inet rule for the other
    family). Never raises: from the first expression not known here (or
    known but not as written), the rule keeps the tests before it and no
    verdict, and ends in a Match of UNKNOWN_MODULE naming what stopped it —
    the packets that pass those tests are the kernel's. Counters and
    comments change nothing. `sets`: the table's key sets, by name
    (a lookup in any other is not known here). `before_routing`: the rule
    is reached from a prerouting chain (an egress device test is not read),
    `before_conntrack`: below conntrack's priority (nor is `ct`)."""
    rule = RuleReading(family, native_family, sets, before_routing, before_conntrack)
    unknown = ""
    for _, element in nl.parse_attr_list(a.get(NFTA_RULE_EXPRESSIONS, b"")):
        name, data = _expression(element)
        kept = rule.kept()
        try:
            if rule.ended:
                raise Undecodable(f"{name} after the verdict")
            if rule.at_least is not None and name != "cmp":
                raise Undecodable("cmp gte without its lte")
            if name not in _NATIVE_EXPRESSIONS:
                raise Undecodable(f"expression {name}")
            _EXPRESSIONS[name](rule, data)
        except NeverMatches:
            return None
        except Undecodable as exc:
            rule.restore(kept)
            unknown = str(exc)
            break
    if not unknown and (rule.registers or rule.at_least is not None):
        unknown = "a loaded register nobody compared"
    built = assembled(rule, chain, position)
    return kernel_from(built, len(built.matches), unknown) if unknown else built


@functools.lru_cache(maxsize=4096)
def _expression(element: bytes) -> tuple[str, dict[int, bytes]]:
    """An expression's name and attributes (never changed by the handlers):
    most of a ruleset's expressions repeat from rule to rule (the loads, the
    counters' zeros, the verdicts), and are parsed once."""
    e = nl.parse_attrs(element)
    return nl.cstr(e.get(NFTA_EXPR_NAME, b"")), nl.parse_attrs(e.get(NFTA_EXPR_DATA, b""))


def _reg(data: dict[int, bytes], attribute: int) -> int:
    return nl.be32(data.get(attribute, b"\0\0\0\0"))


def _loaded(rule: RuleReading, data: dict[int, bytes]) -> int:
    """The register a load writes, which must not hold a value nobody
    compared yet: that load could fail (a payload beyond the packet ends the
    rule for that packet) while only the later one is read as a test."""
    register = _register(data, 1)
    if register in rule.registers:
        raise Undecodable("a load over a value not compared")
    return register


def _register(data: dict[int, bytes], attribute: int) -> int:
    """The data register an expression reads or writes: iptables-nft uses
    NFT_REG_1 alone; any other (the 4-byte registers overlap the 16-byte
    ones) is beyond what this decoder tracks."""
    register = _reg(data, attribute)
    if register != NFT_REG_1:
        raise Undecodable(f"register {register}")
    return register


def _load_meta(rule: RuleReading, data) -> None:
    key = _reg(data, 2)
    sizes = _NATIVE_META_SIZE if rule.native else _META_SIZE
    if key not in sizes or 3 in data:
        raise Undecodable(f"meta key {key}")
    if key == NFT_META_OIFNAME and rule.before_routing:
        raise Undecodable("oifname before routing")
    rule.registers[_loaded(rule, data)] = ("meta", key, sizes[key], None)


def _load_ct(rule: RuleReading, data) -> None:
    """nft's `ct state` (native tables only; NFTA_CT_DIRECTION would make it
    another key's)."""
    if not rule.native or _reg(data, 2) != NFT_CT_STATE or 3 in data:
        raise Undecodable("ct beyond its state")
    if rule.before_conntrack:
        raise Undecodable("ct before conntrack")
    rule.registers[_loaded(rule, data)] = ("ct", NFT_CT_STATE, 4, None)


def _load_payload(rule: RuleReading, data) -> None:
    if any(k in data for k in (5, 6, 7, 8)):        # a payload write, not a load
        raise Undecodable("payload write")
    rule.registers[_loaded(rule, data)] = ("payload", _reg(data, 2), _reg(data, 3), _reg(data, 4), None)


def _bitwise(rule: RuleReading, data) -> None:
    source, dest = _register(data, 1), _register(data, 2)
    loaded = rule.registers.get(source)
    if loaded is None or source != dest or _reg(data, 6) != 0 or loaded[-1] is not None:
        raise Undecodable("bitwise")
    mask, xor = _nested_value(data.get(4, b"")), _nested_value(data.get(5, b""))
    if any(xor) or len(mask) != _reg(data, 3) or len(mask) != loaded[-2]:
        raise Undecodable("bitwise that is not a mask of the whole value")
    rule.registers[source] = loaded[:-1] + (mask,)


def _cmp(rule: RuleReading, data) -> None:
    op = _reg(data, 2)
    register = _register(data, 1)
    if rule.native and op == NFT_CMP_GTE and rule.at_least is None and register in rule.registers:
        # the nft tool writes a range as `cmp gte` then `cmp lte` of the same load
        rule.at_least = (register, _nested_value(data.get(3, b"")))
        return
    if rule.at_least is not None:
        if op != NFT_CMP_LTE or rule.at_least[0] != register or rule.registers.get(register, ("",))[0] != "payload":
            raise Undecodable("cmp gte without its lte")
        low, rule.at_least = rule.at_least[1], None
        _port(rule, rule.registers.pop(register), False, low, _nested_value(data.get(3, b"")))
        return
    if op not in (NFT_CMP_EQ, NFT_CMP_NEQ):
        raise Undecodable(f"cmp op {op}")
    _compared(rule, rule.registers.pop(register, None), op == NFT_CMP_NEQ, _nested_value(data.get(3, b"")))


def _range(rule: RuleReading, data) -> None:
    op = _reg(data, 2)
    loaded = rule.registers.pop(_register(data, 1), None)
    if op not in (NFT_CMP_EQ, NFT_CMP_NEQ) or loaded is None or loaded[0] != "payload":
        raise Undecodable("range")
    low, high = _nested_value(data.get(3, b"")), _nested_value(data.get(4, b""))
    _port(rule, loaded, op == NFT_CMP_NEQ, low, high)


def _compared(rule: RuleReading, loaded, negated: bool, value: bytes) -> None:
    if loaded is None:
        raise Undecodable("cmp of an unloaded register")
    if loaded[0] == "ct":
        _ct_state(rule, loaded[-1], negated, value)
        return
    if loaded[0] == "meta":
        _, key, _size, mask = loaded
        if key == NFT_META_NFPROTO and rule.native == "inet" and mask is None and len(value) == 1 \
                and not rule.nfproto_tested:
            if (value[0] == NFPROTO[rule.family]) == negated:
                raise NeverMatches()
            rule.nfproto_tested = True
        elif key in (NFT_META_IIFNAME, NFT_META_OIFNAME) and mask is None:
            option = "-i" if key == NFT_META_IIFNAME else "-o"
            if rule.native and b"\0" in value:
                # the nft tool compares the whole name, NULs after it
                name, _, rest = value.partition(b"\0")
                value = name + b"\0" if not rest.strip(b"\0") else b"\0\0"   # (NULs amid: not a name)
            name = value[:-1] if value.endswith(b"\0") else value + b"+"
            # (a whole name: its NUL ends the 16 bytes, in a native rule)
            longest = 16 if rule.native and value.endswith(b"\0") else 15
            if b"\0" in name or b"+" in name[:-1] or not name or len(value) > longest or option in rule.header \
                    or (value.endswith(b"\0") and name.endswith(b"+")):    # an exact "x+" reads as a wildcard
                raise Undecodable("interface name")
            try:
                rule.header[option] = Match("", option, (name.decode(),), negated)
            except UnicodeDecodeError:
                raise Undecodable("interface name") from None
        elif key == NFT_META_L4PROTO and mask is None and len(value) == 1 and value[0] \
                and "-p" not in rule.header:              # (protocol 0: iptables prints no -p at all)
            rule.proto = value[0]
            rule.header["-p"] = Match("", "-p", (protocol_name(value[0]),), negated)
            if negated:
                rule.proto = None
        elif key == NFT_META_MARK and len(value) == 4:
            mark = struct.unpack("=I", value)[0]
            if mask is not None and mark & ~struct.unpack("=I", mask)[0]:
                raise Undecodable("a mark outside its mask")      # never matches
            full = mask is None or mask == b"\xff\xff\xff\xff"
            text = f"0x{mark:x}" if full else f"0x{mark:x}/0x{struct.unpack('=I', mask)[0]:x}"
            rule.matches += [Match("mark", ""), Match("mark", "--mark", (text,), negated)]
        else:
            raise Undecodable(f"meta {key} compared")
        return
    _, base, offset, length, mask = loaded
    if base == NFT_PAYLOAD_NETWORK_HEADER and rule.native == "inet" and not rule.nfproto_tested:
        raise Undecodable("an inet rule's network header without its family")
    if base == NFT_PAYLOAD_NETWORK_HEADER and offset in _ADDRESS_OFFSETS[rule.family]:
        _address(rule, _ADDRESS_OFFSETS[rule.family][offset], length, mask, value, negated)
    elif rule.native and base == NFT_PAYLOAD_NETWORK_HEADER and rule.family == "ip" and (offset, length) == (9, 1) \
            and mask is None and len(value) == 1 and value[0] and "-p" not in rule.header:
        # `ip protocol`: IPv4's is the packet's transport protocol, as -p
        rule.header["-p"] = Match("", "-p", (protocol_name(value[0]),), negated)
        rule.proto = None if negated else value[0]
    elif rule.native and base == NFT_PAYLOAD_TRANSPORT_HEADER and (offset, length) == (0, 1) and mask is None \
            and len(value) == 1 and rule.proto in _ICMP_MATCHES and (rule.proto == 58 or value[0] != 0xFF) \
            and not any(m.module == _ICMP_MATCHES[rule.proto][0] for m in rule.matches):
        # `icmp type` / `icmpv6 type`, any code (iptables' type 255 is any type)
        module, option = _ICMP_MATCHES[rule.proto]
        rule.matches += [Match(module, ""), Match(module, option, (str(value[0]),), negated)]
    elif base == NFT_PAYLOAD_NETWORK_HEADER and rule.family == "ip" and (offset, length) == (6, 2) \
            and mask == b"\x1f\xff" and value == b"\0\0" and "-f" not in rule.header:
        rule.header["-f"] = Match("", "-f", (), not negated)     # -f: offset != 0
    elif base == NFT_PAYLOAD_TRANSPORT_HEADER and offset in (0, 2) and length == 2 and mask is None:
        _port(rule, loaded, negated, value, value)
    elif base == NFT_PAYLOAD_TRANSPORT_HEADER and (offset, length) == (13, 1) and rule.proto == 6 \
            and mask is not None and len(value) == 1 and not mask[0] & ~0x3F and not value[0] & ~mask[0]:
        options = rule.module("tcp")
        if any(m.option == "--tcp-flags" for m in options):
            raise Undecodable("two tcp flag tests")
        options.append(Match("tcp", "--tcp-flags", (tcp_flags(mask[0]), tcp_flags(value[0])), negated))
    else:
        raise Undecodable(f"payload base {base} offset {offset} compared")


NFTA_LOOKUP_SET, NFTA_LOOKUP_SREG, NFTA_LOOKUP_DREG, NFTA_LOOKUP_FLAGS = 1, 2, 3, 5
NFT_LOOKUP_F_INV = 1


def _lookup(rule: RuleReading, data) -> None:
    """A lookup in one of the table's key sets (native rules only): of a
    whole address, as -s/-d with every prefix the set's ranges cover; of a
    TCP or UDP port, as -m multiport. In an empty set (a named one, before
    its first element) a lookup never matches, and a negated one always
    does where the key loads (an address of the family's header, a port of
    the rule's TCP or UDP: a test of nothing)."""
    register = _register(data, NFTA_LOOKUP_SREG)
    loaded = rule.registers.pop(register, None)
    name = nl.cstr(data.get(NFTA_LOOKUP_SET, b""))
    found = rule.sets.get(name)
    flags = _reg(data, NFTA_LOOKUP_FLAGS)
    if rule.native and found is None and not name.startswith("__"):
        # (what stops a named set being read: nft_forward.static_named)
        raise Undecodable(f"lookup in @{name}, a set not mirrored (the packet path or time may change it, or it holds more than keys)")
    if not rule.native or loaded is None or loaded[0] != "payload" or found is None or NFTA_LOOKUP_DREG in data \
            or flags & ~NFT_LOOKUP_F_INV or loaded[-1] is not None or loaded[3] != found.width:
        raise Undecodable("lookup")
    _, base, offset, length, _mask = loaded
    negated = bool(flags & NFT_LOOKUP_F_INV)
    address = base == NFT_PAYLOAD_NETWORK_HEADER and offset in _ADDRESS_OFFSETS[rule.family] \
        and length == _WIDTH[rule.family] and (rule.native != "inet" or rule.nfproto_tested)
    port = base == NFT_PAYLOAD_TRANSPORT_HEADER and offset in (0, 2) and length == 2 and rule.proto in (6, 17)
    if not found.ranges:
        if not negated:
            raise NeverMatches()
        if address or port:
            return          # (the fast path's packets all have the key: the router's and the filter's checks)
        raise Undecodable("lookup")
    if address:
        option = _ADDRESS_OFFSETS[rule.family][offset]
        if option in rule.header:
            raise Undecodable("address")
        make = ipaddress.IPv4Address if length == 4 else ipaddress.IPv6Address
        prefixes = [str(net) for low, high in found.ranges
                    for net in ipaddress.summarize_address_range(make(low), make(high))]
        rule.header[option] = Match("", option, (",".join(prefixes),), negated)
    elif port:
        module = "multiport"
        if any(m.module == module for m in rule.matches):
            raise Undecodable("two port sets")
        ports = ",".join(str(low) if low == high else f"{low}:{high}" for low, high in found.ranges)
        rule.matches += [Match(module, ""), Match(module, "--sports" if offset == 0 else "--dports", (ports,), negated)]
    else:
        raise Undecodable("lookup")


# the transport protocol -> the x_tables match and option its type reads as
_ICMP_MATCHES = {1: ("icmp", "--icmp-type"), 58: ("icmp6", "--icmpv6-type")}


def _ct_state(rule: RuleReading, mask: bytes | None, negated: bool, value: bytes) -> None:
    """`ct state` tests as the nft tool writes them: a set of states is a
    mask compared unequal (in) or equal (not in) to zero; one state, the
    state compared (its single bit). As -m conntrack --ctstate."""
    if len(value) != 4 or (mask is not None and len(mask) != 4):
        raise Undecodable("ct state")
    if mask is not None:
        if any(value):
            raise Undecodable("ct state masked and compared to a value")
        bits, negated = struct.unpack("=I", mask)[0], not negated
    else:
        bits = struct.unpack("=I", value)[0]
        if bits & (bits - 1):
            raise Undecodable("ct state compared to several states")   # (it never is)
    if not bits or bits & ~sum(bit for _, bit in _NFT_CT_STATES):
        raise Undecodable("ct state bits")
    names = ",".join(name for name, bit in _NFT_CT_STATES if bits & bit)
    rule.matches += [Match("conntrack", ""), Match("conntrack", "--ctstate", (names,), negated)]


def _address(rule: RuleReading, option: str, length: int, mask: bytes | None, value: bytes, negated: bool) -> None:
    width = _WIDTH[rule.family]
    if option in rule.header or length > width or len(value) != length:
        raise Undecodable("address")
    if mask is None:
        bits = length * 8
    else:
        whole = int.from_bytes(mask, "big")
        bits = length * 8 - ((~whole) & ((1 << (length * 8)) - 1)).bit_length()
        if whole != ((1 << (length * 8)) - 1) ^ ((1 << (length * 8 - bits)) - 1):
            raise Undecodable("a non-contiguous address mask")
        if int.from_bytes(value, "big") & ~whole:
            raise Undecodable("an address outside its mask")     # never matches
    address = ipaddress.ip_address(value + b"\0" * (width - length))
    rule.header[option] = Match("", option, (f"{address}/{bits}",), negated)


def _port(rule: RuleReading, loaded, negated: bool, low: bytes, high: bytes) -> None:
    _, base, offset, length, mask = loaded
    names = {6: "tcp", 17: "udp"}
    if base != NFT_PAYLOAD_TRANSPORT_HEADER or offset not in (0, 2) or length != 2 or mask is not None \
            or rule.proto not in names or len(low) != 2 or len(high) != 2:
        raise Undecodable("ports")
    module = names[rule.proto]
    option = "--sport" if offset == 0 else "--dport"
    options = rule.module(module)
    if any(m.option == option for m in options):
        raise Undecodable(f"two {option} tests")
    first, last = struct.unpack("!H", low)[0], struct.unpack("!H", high)[0]
    if first > last or (first, last) == (0, 0xFFFF):
        raise Undecodable("a port range that is empty or everything")    # the tool would print it otherwise
    options.append(Match(module, option, (str(first) if first == last else f"{first}:{last}",), negated))
    options.sort(key=lambda m: ("--sport", "--dport", "--tcp-flags").index(m.option))   # tcp_save's order


def _counter(rule: RuleReading, data) -> None:
    pass                                            # iptables-save's [packets:bytes], not part of the rule


def _immediate(rule: RuleReading, data) -> None:
    if _reg(data, 1) != 0:
        raise Undecodable("immediate into a data register")
    verdict = nl.parse_attrs(nl.parse_attrs(data.get(2, b"")).get(NFTA_DATA_VERDICT, b""))
    code = struct.unpack("!i", verdict.get(NFTA_VERDICT_CODE, b"\x7f\0\0\0"))[0]
    simple = {NF_ACCEPT: "ACCEPT", NF_DROP: "DROP", NFT_RETURN: "RETURN"}
    if code in simple:
        rule.target = simple[code]
    elif code in (NFT_JUMP, NFT_GOTO) and NFTA_VERDICT_CHAIN in verdict:
        rule.target, rule.goto = undecodable_name(verdict[NFTA_VERDICT_CHAIN]), code == NFT_GOTO
        if rule.target in _NOT_A_USER_CHAIN:
            raise Undecodable(f"a jump to a chain called {rule.target!r}")   # it would read as the verdict
    else:
        raise Undecodable(f"verdict {code}")
    rule.ended = True


def _xt_match(rule: RuleReading, data) -> None:
    name, revision, info = nl.cstr(data.get(1, b"")), nl.be32(data.get(2, b"\0\0\0\0")), data.get(3, b"")
    decoder = xt_matches.get((name, revision))
    if decoder is None:
        raise Undecodable(f"match {name} revision {revision}")
    module, options = decoder(info, rule.family)
    if module in ("tcp", "udp"):
        if module in rule.transport:
            raise Undecodable(f"{module} written natively and as a match")
        rule.transport[module] = None           # native ports after it would be a second tcp match
    rule.matches.append(Match(module, ""))
    rule.matches.extend(options)


def _xt_target(rule: RuleReading, data) -> None:
    name, revision, info = nl.cstr(data.get(1, b"")), nl.be32(data.get(2, b"\0\0\0\0")), data.get(3, b"")
    decoder = xt_targets.get((name, revision))
    if decoder is None:
        raise Undecodable(f"target {name} revision {revision}")
    rule.target, rule.target_options = name, tuple(decoder(info, rule.family))
    rule.ended = True


NFT_LIMIT_PKTS = 0


def _limit(rule: RuleReading, data) -> None:
    """nft's limit expression, which iptables-nft writes for `-m limit` and
    reads back as the x_tables match (avg = XT_LIMIT_SCALE * unit / rate)."""
    rate, unit = struct.unpack("!Q", data.get(1, bytes(8)))[0], struct.unpack("!Q", data.get(2, bytes(8)))[0]
    burst, kind, flags = _reg(data, 3), _reg(data, 4), _reg(data, 5)
    if kind != NFT_LIMIT_PKTS or flags or not rate or not unit or XT_LIMIT_SCALE * unit // rate > 0xFFFFFFFF:
        raise Undecodable("limit: bytes, inverted, or out of range")
    rule.matches.append(Match("limit", ""))
    rule.matches.extend(limit_options(XT_LIMIT_SCALE * unit // rate, burst))


_EXPRESSIONS = {"limit": _limit, "meta": _load_meta, "payload": _load_payload, "bitwise": _bitwise, "cmp": _cmp,
                "range": _range, "ct": _load_ct, "lookup": _lookup,
                "counter": _counter, "immediate": _immediate, "match": _xt_match, "target": _xt_target}


# what decode_native_rule reads of a native rule: the tests that keep no
# state, counters and verdicts (a limit spends its budget on every packet
# that reaches it, whatever the tests after it say; x_tables' matches in a
# native table are not read)
_NATIVE_EXPRESSIONS = frozenset({"meta", "payload", "bitwise", "cmp", "range", "ct", "lookup", "counter",
                                 "immediate"})


def _userdata_comment(data: bytes) -> list[Match]:
    """The comment iptables-nft keeps in a rule's user data (type-length-value
    records, libnftnl's udata): printed after every other match."""
    out, offset = [], 0
    while offset + 2 <= len(data):
        kind, length = data[offset], data[offset + 1]
        value = data[offset + 2:offset + 2 + length]
        if kind != NFTNL_UDATA_RULE_COMMENT or len(value) != length:
            raise Undecodable(f"user data type {kind}")
        out += [Match("comment", ""), Match("comment", "--comment", (nl.cstr(value),))]
        offset += 2 + length
    return out
