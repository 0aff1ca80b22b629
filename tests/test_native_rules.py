"""Native nf_tables rules read into iptables' model (nft_rules.decode_native_rule,
nft_forward.key_set) from expressions built here as the kernel dumps
them, and the native chains' place among the FORWARD hooks when Linux's
counters are told what the fast path decided. Pure: no namespace."""
from __future__ import annotations

import struct
from dataclasses import replace

from linuxfp.graph.filtering.program import (DROP, compile_program, matched_boxes, packet_fields, policy_of,
                                             verdict_and_counted)
from linuxfp.state import netlink as nl
from linuxfp.state.iptables import Chain, IptTable, Ruleset, parse_rule
from linuxfp.state.nft_forward import key_set, static_named
from linuxfp.state.nft_rules import NFTA_RULE_EXPRESSIONS, KeySet, decode_native_rule

NEST = 0x8000
EQ, NEQ, LTE, GTE = 0, 1, 3, 5
META_IIFNAME, META_NFPROTO, META_L4PROTO = 6, 15, 16
NETWORK, TRANSPORT = 1, 2


def _be(value: int) -> bytes:
    return struct.pack("!I", value)


def _expr(name: str, body: bytes = b"") -> bytes:
    return nl.attr(1 | NEST, nl.attr(1, name.encode() + b"\0") + nl.attr(2 | NEST, body))


def _value(value: bytes) -> bytes:
    return nl.attr(1, value)


def meta(key: int) -> bytes:
    return _expr("meta", nl.attr(2, _be(key)) + nl.attr(1, _be(1)))


def payload(base: int, offset: int, length: int) -> bytes:
    return _expr("payload", nl.attr(1, _be(1)) + nl.attr(2, _be(base)) + nl.attr(3, _be(offset))
                 + nl.attr(4, _be(length)))


def cmp(op: int, value: bytes) -> bytes:
    return _expr("cmp", nl.attr(1, _be(1)) + nl.attr(2, _be(op)) + nl.attr(3 | NEST, _value(value)))


def range_(op: int, low: bytes, high: bytes) -> bytes:
    return _expr("range", nl.attr(1, _be(1)) + nl.attr(2, _be(op)) + nl.attr(3 | NEST, _value(low))
                 + nl.attr(4 | NEST, _value(high)))


def limit() -> bytes:
    return _expr("limit", nl.attr(1, struct.pack("!Q", 10)) + nl.attr(2, struct.pack("!Q", 1)) + nl.attr(3, _be(5))
                 + nl.attr(4, _be(0)) + nl.attr(5, _be(0)))


def verdict(code: int) -> bytes:
    return _expr("immediate", nl.attr(1, _be(0)) + nl.attr(2 | NEST, nl.attr(2 | NEST, nl.attr(1, struct.pack(
        "!i", code)))))


ACCEPT_, DROP_ = verdict(1), verdict(0)
TCP = meta(META_L4PROTO) + cmp(EQ, b"\x06")
IPV4_ONLY = meta(META_NFPROTO) + cmp(EQ, b"\x02")


def read(family: str, native: str, *expressions: bytes):
    rule = decode_native_rule("fwd", 1, {NFTA_RULE_EXPRESSIONS: b"".join(expressions)}, family, native)
    return None if rule is None else rule.text


def test_a_limit_ends_what_is_known_of_the_rule():
    """Every packet that reaches a limit spends its budget: the tests after
    it must not turn any away from the kernel — nor, in an inet table, the
    family test after it."""
    tail = (IPV4_ONLY, payload(NETWORK, 16, 4), cmp(EQ, bytes([192, 0, 2, 1])), ACCEPT_)
    assert read("ip", "inet", TCP, limit(), *tail) == "-A fwd -p tcp -m nft --expression 'expression limit'"
    assert read("ip6", "inet", TCP, limit(), *tail) == "-A fwd -p tcp -m nft --expression 'expression limit'"


def test_a_range_is_a_gte_then_its_lte():
    dport = (TCP, payload(TRANSPORT, 2, 2))
    assert read("ip", "ip", *dport, cmp(GTE, b"\x03\xe8"), cmp(LTE, b"\x07\xd0"), DROP_) == \
        "-A fwd -p tcp -m tcp --dport 1000:2000 -j DROP"
    # anything between the two (a range of the same load, another load) is not read
    assert read("ip", "ip", *dport, cmp(GTE, b"\x03\xe8"), range_(EQ, b"\0\1", b"\xff\xfe"),
                payload(TRANSPORT, 0, 2), cmp(LTE, b"\x07\xd0"), DROP_) == \
        "-A fwd -p tcp -m nft --expression 'cmp gte without its lte'"


def test_interface_names_whole_or_wildcard():
    name = b"abcdefghijklmno"          # 15 characters, the longest a name has
    assert read("ip", "ip", meta(META_IIFNAME), cmp(EQ, name + b"\0"), ACCEPT_) == \
        "-A fwd -i abcdefghijklmno -j ACCEPT"
    assert read("ip", "ip", meta(META_IIFNAME), cmp(NEQ, b"eth0" + bytes(12)), ACCEPT_) == "-A fwd ! -i eth0 -j ACCEPT"
    assert read("ip", "ip", meta(META_IIFNAME), cmp(EQ, b"eth"), ACCEPT_) == "-A fwd -i eth+ -j ACCEPT"
    # bytes after the NUL: no name a device has
    assert "--expression" in read("ip", "ip", meta(META_IIFNAME), cmp(EQ, b"eth0\0x" + bytes(10)), ACCEPT_)


def test_an_inet_rule_reads_per_family():
    ipv6_not = (meta(META_NFPROTO), cmp(NEQ, b"\x0a"), DROP_)
    assert read("ip", "inet", *ipv6_not) == "-A fwd -j DROP"
    assert read("ip6", "inet", *ipv6_not) is None
    # a network-header test with no family test before it is not read
    assert "network header without its family" in read("ip", "inet", payload(NETWORK, 16, 4), cmp(EQ, bytes(4)), DROP_)


def _elements(*elements: dict[int, bytes]) -> list[dict[int, bytes]]:
    listed = b"".join(nl.attr(1 | NEST, b"".join(nl.attr(kind, value) for kind, value in e.items()))
                      for e in elements)
    return [{3: listed}]


def _key(value: bytes) -> bytes:
    return _value(value)


def test_a_constant_sets_intervals():
    interval = {3: _be(0x7), 5: _be(2)}        # anonymous, constant, interval; 2-byte keys
    # { 53, 1000-2000, 65535 } as the kernel dumps it: each range's start,
    # and the key after it flagged as an interval's end
    read_ = key_set(interval, _elements(
        {1: _key(b"\xff\xff")}, {1: _key(b"\x07\xd1"), 3: _be(1)}, {1: _key(b"\x03\xe8")},
        {1: _key(b"\x00\x36"), 3: _be(1)}, {1: _key(b"\x00\x35")}, {1: _key(b"\x00\x00"), 3: _be(1)}))
    assert read_.ranges == ((53, 53), (1000, 2000), (65535, 65535))
    # an element carrying an expression (a counter) is more than a key
    assert key_set(interval, _elements({1: _key(b"\x00\x35"), 7: b""})) is None
    # a key range of its own (a set that keeps both ends)
    assert key_set(interval, _elements({1: _key(b"\x00\x10"), 10: _key(b"\x00\x20")})).ranges == ((16, 32),)


def lookup(name: str, negated: bool = False) -> bytes:
    return _expr("lookup", nl.attr(1, name.encode() + b"\0") + nl.attr(2, _be(1)) + nl.attr(5, _be(int(negated))))


def test_named_sets_only_commits_change_are_read():
    """A named set is read when only a commit (which moves the nf_tables
    generation the datapath checks) can change its keys: not a map, no
    timeouts, not dynamic, no expressions, no dynset of its table writing
    it. A lookup in an empty one never matches (negated, always); in any set not read, the
    rule is the kernel's from there, and says which set stopped it."""
    named = {2: b"blocked\0", 5: _be(4)}
    assert static_named(named, ()) and static_named({**named, 3: _be(0x4)}, ())        # (an interval set)
    for flags in (0x8, 0x10, 0x20, 0x40, 0x80):          # map, timeout, dynamic, object, concatenation
        assert not static_named({**named, 3: _be(flags)}, ()), flags
    assert not static_named(named, {"blocked"})           # a dynset of its table writes it
    assert not static_named({**named, 17: b""}, ())       # its elements get an expression each
    sets = {"blocked": KeySet(4, ((0xC6130100, 0xC613017F),)), "none": KeySet(4, ()), "noports": KeySet(2, ())}
    address = (meta(META_NFPROTO), cmp(EQ, b"\x02"), payload(NETWORK, 16, 4))

    def read_with(*expressions: bytes):
        rule = decode_native_rule("fwd", 1, {NFTA_RULE_EXPRESSIONS: b"".join(expressions)}, "ip", "inet", sets)
        return None if rule is None else rule.text
    assert read_with(*address, lookup("blocked"), DROP_) == "-A fwd -d 198.19.1.0/25 -j DROP"
    assert read_with(*address, lookup("blocked", negated=True), DROP_) == "-A fwd ! -d 198.19.1.0/25 -j DROP"
    assert read_with(*address, lookup("none"), DROP_) is None
    # (negated, it always matches where the key loads: an address of the
    # family's header — in an inet table, once the family was tested)
    assert read_with(*address, lookup("none", negated=True), DROP_) == "-A fwd -j DROP"
    assert "lookup" in read_with(payload(NETWORK, 16, 4), lookup("none", negated=True), DROP_)
    # ... a port of the rule's TCP or UDP (without a protocol tested first: the kernel's)
    assert read_with(*address[:2], TCP, payload(TRANSPORT, 2, 2), lookup("noports", negated=True), DROP_) == \
        "-A fwd -p tcp -j DROP"
    assert "lookup" in read_with(*address[:2], payload(TRANSPORT, 2, 2), lookup("noports", negated=True), DROP_)
    assert "@seen, a set not mirrored" in read_with(*address, lookup("seen"), DROP_)


def _rules(chain: str, *lines: str) -> tuple:
    return tuple(replace(parse_rule(f"-A {chain} {line}"), position=n) for n, line in enumerate(lines, 1))


def _native(name: str, priority: int, *lines: str) -> Ruleset:
    rules = _rules(name, *lines)
    table = IptTable("t", (Chain(name, "ACCEPT", rules),))
    return Ruleset(f"ip t {name}", (table,), (), "ip", native="ip t", entry=name, priority=priority)


def test_a_drop_counts_the_hooks_before_it_by_priority():
    """Linux counts a packet on every hook it crossed before the one that
    dropped it: a native chain before iptables' FORWARD (priority 0) that
    drops keeps iptables' rules from ever seeing it."""
    legacy = Ruleset("legacy", (IptTable("filter", (Chain("FORWARD", "ACCEPT", _rules(
        "FORWARD", "-d 192.0.2.1/32 -j DROP")),)),), (), "ip")
    early, late = _native("early", -10, "-d 192.0.2.0/24 -j DROP"), _native("late", 10, "-j ACCEPT")
    program = compile_program((legacy, early, late), ())
    fields = packet_fields(0xC6120001, 0xC0000201, 17, 1, 2, 1, 2)
    decided, rule, counted = verdict_and_counted(program, matched_boxes(program, fields))
    assert decided == DROP and program.rules[rule].describe() == "nft ip t early #1"
    assert [program.rules[i].describe() for i in counted] == ["nft ip t early #1"]
    # dropped by iptables: the native chain before it counted the packet too, the one after it did not
    fields = packet_fields(0xC6120001, 0xC0000201, 17, 1, 2, 1, 2)
    program = compile_program((legacy, _native("early", -10, "-d 192.0.2.0/24"), late), ())
    decided, rule, counted = verdict_and_counted(program, matched_boxes(program, fields))
    assert decided == DROP and program.rules[rule].describe() == "iptables-legacy FORWARD #1"
    # (the early chain's rule has no verdict: its policy accepted the packet, and counted it)
    assert [program.rules[i].describe() if i >= 0 else f"policy of {program.tool(policy_of(i))}" for i in counted] \
        == ["nft ip t early #1", "policy of nft ip t", "iptables-legacy FORWARD #1"]


def test_a_prerouting_chain_counts_before_every_forward_hook():
    """A prerouting chain sees the packet before any forward chain,
    whatever their priorities: its drop keeps every FORWARD hook from
    counting it."""
    legacy = Ruleset("legacy", (IptTable("filter", (Chain("FORWARD", "ACCEPT", _rules(
        "FORWARD", "-d 192.0.2.1/32")),)),), (), "ip")
    early_forward = _native("early", -50, "-d 192.0.2.0/24")
    pre = replace(_native("pre", 100, "-d 192.0.2.0/24 -j DROP"), hook="prerouting")
    program = compile_program((legacy, early_forward, pre), ())
    fields = packet_fields(0xC6120001, 0xC0000201, 17, 1, 2, 1, 2)
    decided, rule, counted = verdict_and_counted(program, matched_boxes(program, fields))
    assert decided == DROP and program.rules[rule].describe() == "nft ip t pre #1"
    assert [program.rules[i].describe() for i in counted] == ["nft ip t pre #1"]


def test_before_routing_no_egress_device_and_below_conntrack_no_entry_is_read():
    """A prerouting chain's rule is read without what the kernel does not
    know there yet: the egress device (an oifname reads empty before
    routing) and, below conntrack's priority, the connection's state."""
    META_OIFNAME, CT_STATE = 7, 0
    oifname = (meta(META_OIFNAME), cmp(EQ, b"to-sink".ljust(16, b"\0")), DROP_)
    ct = (_expr("ct", nl.attr(2, _be(CT_STATE)) + nl.attr(1, _be(1))), _expr("bitwise", b""), DROP_)

    def read_as(expressions, **where):
        rule = decode_native_rule("c", 1, {NFTA_RULE_EXPRESSIONS: b"".join(expressions)}, "ip", "ip", **where)
        return rule.text
    assert read_as(oifname) == "-A c -o to-sink -j DROP"
    assert "oifname before routing" in read_as(oifname, before_routing=True)
    assert "ct before conntrack" in read_as(ct, before_routing=True, before_conntrack=True)
    assert "ct before conntrack" not in read_as(ct, before_routing=True)
