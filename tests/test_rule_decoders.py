"""The rule decoders — iptables-nft's from nf_tables (linuxfp/state/nft_rules.py)
and iptables-legacy's from the kernel's blob (xt_blob.py) — must read exactly
the rules the backend's save tool prints: every ruleset here is loaded with
the real restore tool into a namespace and read both ways. What a decoder
does not know must make it leave the rules to the tool, never a guess.
(Legacy blob structure: test_xt_blob.py.)"""
from __future__ import annotations

import pytest

from linuxfp.lab.netns import Lab, entered
from linuxfp.lab.rulesets import random_ipsets, random_ruleset
from linuxfp.state import netlink as nl
from linuxfp.state import nft_rules
from linuxfp.state.iptables import read_ruleset
from linuxfp.state.netfilter import (_cached_ruleset, legacy_fingerprint, legacy_table_names, nft_generation,
                                     read_legacy_native)

from test_filter_rules import CORPUS, corpus_text

pytestmark = pytest.mark.netns

# one rule per line, each a different thing the decoder knows
KNOWN_FILTER = """\
*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:LFP-USER - [0:0]
:AAA - [0:0]
-A INPUT -i lo -j ACCEPT
-A FORWARD -s 198.18.0.0/15 ! -d 192.0.2.1/32 -i eth+ ! -o veth0 -p tcp -m tcp --sport 1000 --dport 80:90 -j ACCEPT
-A FORWARD -s 198.18.16.0/20 -d 203.0.113.0/24 -j ACCEPT
-A FORWARD -s 198.19.0.0/16 -d 192.0.2.128/25 -p udp -m udp ! --sport 53 ! --dport 1:1023 -j DROP
-A FORWARD ! -p tcp -j LFP-USER
-A FORWARD -p gre -j ACCEPT
-A FORWARD -p 200 -j ACCEPT
-A FORWARD -p sctp -j DROP
-A FORWARD -f -j DROP
-A FORWARD ! -f -j LFP-USER
-A FORWARD -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j ACCEPT
-A FORWARD -p tcp -m tcp --dport 22 --tcp-flags SYN,ACK,URG NONE -j DROP
-A FORWARD -p tcp -m tcp --tcp-flags FIN,SYN,RST,PSH,ACK,URG FIN,SYN,RST,PSH,ACK,URG -j DROP
-A FORWARD -p udp -m multiport --dports 53,123,1000:2000 -m comment --comment "a \\"quoted\\" comment" -j DROP
-A FORWARD -p tcp -m multiport ! --sports 1:1023 -j DROP
-A FORWARD -p tcp -m multiport --ports 443 -j ACCEPT
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -m conntrack ! --ctstate INVALID,NEW,UNTRACKED,SNAT,DNAT -j DROP
-A FORWARD -m state --state INVALID,UNTRACKED -j DROP
-A FORWARD -m state ! --state NEW -j LFP-USER
-A FORWARD -p icmp -m icmp --icmp-type 8 -j ACCEPT
-A FORWARD -p icmp -m icmp ! --icmp-type 3/4 -j DROP
-A FORWARD -p icmp -m icmp --icmp-type any -j ACCEPT
-A FORWARD -m mark --mark 0x1/0xff -j RETURN
-A FORWARD -m mark ! --mark 0x4000 -j DROP
-A FORWARD -m addrtype --dst-type LOCAL -j ACCEPT
-A FORWARD -m addrtype ! --src-type LOCAL,BROADCAST --dst-type UNICAST --limit-iface-in -j DROP
-A FORWARD -m addrtype --dst-type MULTICAST --limit-iface-out -j DROP
-A FORWARD -m set --match-set lfp-blocked src -j DROP
-A FORWARD -m set ! --match-set lfp-pairs src,dst -j DROP
-A FORWARD -m set --match-set lfp-ports dst,dst -j ACCEPT
-A FORWARD -m statistic --mode random --probability 0.25000000000 -j DROP
-A FORWARD -m statistic --mode random ! --probability 0.10000000009 -j DROP
-A FORWARD -m statistic --mode nth --every 3 --packet 1 -j ACCEPT
-A FORWARD -j REJECT --reject-with icmp-host-prohibited
-A FORWARD -p tcp -j REJECT --reject-with tcp-reset
-A FORWARD -j REJECT --reject-with icmp-port-unreachable
-A FORWARD -j LOG --log-prefix "lfp: " --log-level 6 --log-tcp-sequence --log-uid
-A FORWARD -j LOG
-A FORWARD -m comment --comment "spaces and 'quotes'" -g AAA
-A FORWARD -s 192.0.2.0/24
-A FORWARD -m limit --limit 5/sec -j ACCEPT
-A FORWARD -p icmp -m limit --limit 3/min --limit-burst 10 -j ACCEPT
-A FORWARD -m limit --limit 7/day -j LOG
-A FORWARD -m length --length 100:200 -j DROP
-A FORWARD -m length ! --length 64 -j DROP
-A FORWARD -m pkttype --pkt-type broadcast -j DROP
-A FORWARD -m pkttype ! --pkt-type unicast -j DROP
-A FORWARD -m ttl --ttl-eq 5 -j DROP
-A FORWARD -m ttl ! --ttl-eq 6 -j DROP
-A FORWARD -m ttl --ttl-gt 200 -j DROP
-A LFP-USER -j RETURN
-A AAA -d 203.0.113.9/32 -j ACCEPT
COMMIT
"""

KNOWN_OTHERS = """\
*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -i lo -j ACCEPT
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -i eth0 -j MARK --set-xmark 0x4000/0x4000
-A FORWARD -j MARK --set-xmark 0x1/0xffffffff
COMMIT
*security
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:LFP-SVC - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j LFP-SVC
-A POSTROUTING -s 198.18.17.0/24 ! -o docker0 -j MASQUERADE
-A POSTROUTING -o eth0 -p tcp -j MASQUERADE --to-ports 1024-65535 --random-fully
-A POSTROUTING -o eth1 -p udp -j MASQUERADE --to-ports 5000 --random
-A POSTROUTING -o eth2 -j SNAT --to-source 203.0.113.1
-A POSTROUTING -o eth3 -p tcp -j SNAT --to-source 203.0.113.1-203.0.113.9:1000-2000 --persistent
-A LFP-SVC -p tcp -m tcp --dport 8080 -j DNAT --to-destination 198.18.17.2:80
-A LFP-SVC -p tcp -m tcp --dport 8081 -j DNAT --to-destination 198.18.17.3
-A LFP-SVC -p udp -m udp --dport 8082 -j DNAT --to-destination 198.18.17.4-198.18.17.6:53 --random
COMMIT
"""

SETS = """\
create lfp-blocked hash:net
create lfp-pairs hash:ip,port
create lfp-ports hash:ip,port
"""

# each alone makes the decoder answer None: the tool reads
UNKNOWN = (
    "-A FORWARD -m iprange --src-range 198.18.0.1-198.18.0.9 -j DROP",
    "-A FORWARD -p tcp -m tcp --tcp-option 2 -j DROP",
    "-A FORWARD -m conntrack --ctstatus ASSURED -j ACCEPT",
    "-A FORWARD -s 198.18.0.0/255.0.255.0 -j DROP",
    "-A FORWARD -m set --match-set lfp-blocked src --return-nomatch -j DROP",
    "-A FORWARD -p tcp -m tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu",
    "-A FORWARD -j NFLOG --nflog-group 5",
)


BACKENDS = ("nft", "legacy")


def _both(ns, family: str = "ip", backend: str = "nft"):
    """The tool's reading and the decoder's (None where it leaves the rules to the tool)."""
    decode = nft_rules.read_native if backend == "nft" else read_legacy_native
    with entered(ns):
        try:
            return read_ruleset(backend, family), decode(family)
        except nft_rules.Undecodable:
            return read_ruleset(backend, family), None


def _same(tool, native) -> None:
    """Equal rule for rule, down to the text (the line the tool prints)."""
    assert native is not None
    assert native.incompatible == tool.incompatible == ()
    assert [t.name for t in native.tables] == [t.name for t in tool.tables]
    for table, theirs in zip(native.tables, tool.tables):
        assert [(c.name, c.policy) for c in table.chains] == [(c.name, c.policy) for c in theirs.chains]
        for chain, their_chain in zip(table.chains, theirs.chains):
            for rule, their_rule in zip(chain.rules, their_chain.rules):
                assert (rule.position, rule.matches, rule.target, rule.target_options, rule.goto, rule.text) == \
                    (their_rule.position, their_rule.matches, their_rule.target, their_rule.target_options,
                     their_rule.goto, their_rule.text), their_rule.text
            assert len(chain.rules) == len(their_chain.rules)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_known_match_and_target_decodes_as_the_tool_prints_it(backend):
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("dec")
        ns.run(["ipset", "restore"], input=SETS)
        ns.run([f"iptables-{backend}-restore"], input=KNOWN_FILTER + KNOWN_OTHERS)
        tool, native = _both(ns, backend=backend)
        _same(tool, native)
        assert len(native.table("filter").chain("FORWARD").rules) == KNOWN_FILTER.count("-A FORWARD")
        assert {t.name for t in native.tables} == {"mangle", "security", "raw", "filter", "nat"}
        assert native.reading() == f"iptables-{backend}: rules decoded from the kernel"
        if backend == "nft":
            # a comment nft keeps in the rule's user data reads as iptables-nft's
            ns.run(["nft", "add", "rule", "ip", "filter", "AAA", "counter", "accept", "comment", '"from nft"'])
        else:
            # a user chain ending in an unconditional RETURN of its own; an empty chain last
            ns.run(["iptables-legacy", "-A", "AAA", "-j", "RETURN"])
            ns.run(["iptables-legacy", "-N", "ZZZ"])
        tool, native = _both(ns, backend=backend)
        _same(tool, native)
        last = native.table("filter").chain("AAA").rules[-1]
        assert str(last.matches[-1]) == "-m comment --comment 'from nft'" if backend == "nft" else \
            last.target == "RETURN"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.rules")))
def test_corpus_rulesets_decode_as_the_tool_prints_them(name, backend):
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("dec")
        ns.run([f"iptables-{backend}-restore"], input=corpus_text(name))
        _same(*_both(ns, backend=backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_rulesets_decode_as_the_tool_prints_them(backend):
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("dec")
        ns.run(["ipset", "restore"], input=random_ipsets(7))
        decoded = 0
        for seed in range(12):
            text = random_ruleset(seed, 40, ("lan0", "wan0"), ipsets=True, unsupported=seed % 3 == 0)
            ns.run([f"iptables-{backend}-restore"], input=text)
            tool, native = _both(ns, backend=backend)
            if native is not None:
                _same(tool, native)
                decoded += 1
        assert decoded >= 11                    # (one draws --tcp-option: read with the tool)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rule", UNKNOWN)
def test_what_the_decoder_does_not_know_is_left_to_the_tool(rule, backend):
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("dec")
        ns.run(["ipset", "restore"], input=SETS)
        ns.run([f"iptables-{backend}-restore"], input=f"*filter\n:FORWARD ACCEPT [0:0]\n{rule}\nCOMMIT\n")
        tool, native = _both(ns, backend=backend)
        assert len(tool.table("filter").chain("FORWARD").rules) == 1
        if backend == "legacy" and "255.0.255.0" in rule:
            _same(tool, native)                 # x_tables holds any mask: both print it dotted
            return
        assert native is None
        with entered(ns):
            cached = _cached_ruleset(backend, nft_generation() if backend == "nft" else
                                     legacy_fingerprint(legacy_table_names()))
        assert cached.table("filter").chain("FORWARD").rules[0].text == \
            tool.table("filter").chain("FORWARD").rules[0].text
        # `linuxfp graph` says which reader read them, and why not the decoder
        assert cached.source == "" and cached.undecoded
        assert cached.reading().startswith(
            f"iptables-{backend}: rules read with iptables-{backend}-save (not decoded: ")
        # the same rules read either way are the same rules (no rebuild when a read falls back once)
        assert cached == tool and cached.reading() != tool.reading()


def test_a_table_the_tool_calls_incompatible_is_left_to_it():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("nft")
        ns.run(["nft", "-f", "-"], input="table ip filter {\n chain FORWARD {\n"
               "  type filter hook forward priority 10; policy drop;\n  accept\n }\n}\n")
        tool, native = _both(ns)
        assert native is None
        assert tool.incompatible


# nft's own syntax, written into iptables' tables: each rule decodes exactly
# as the tool prints it, or is left to the tool
NFT_NATIVE = (
    "ip saddr 198.18.0.0/15 tcp dport 22 drop",
    'iifname "lan*" accept',
    'oifname != "wan0" ip daddr 203.0.113.0/24 drop',
    "meta l4proto udp udp sport 53 accept",
    "tcp dport 1-1023 drop",
    "udp dport != 53 drop",
    "meta mark and 0xff == 0x1 accept",
    "tcp flags & (syn | ack) == syn drop",
    "ip daddr { 192.0.2.1, 192.0.2.2 } drop",
    "ct state established accept",
    "ip protocol tcp drop",
    'tcp dport 22 log prefix "x" drop',
    "ip saddr . ip daddr { 192.0.2.1 . 192.0.2.2 } drop",
    "tcp dport > 1023 accept",
)


def test_rules_nft_writes_into_iptables_tables_decode_as_the_tool_prints_them_or_go_to_it():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("nft")
        ns.run(["iptables-nft", "-A", "FORWARD", "-j", "ACCEPT"])
        decoded = []
        for statement in NFT_NATIVE:
            ns.run(["nft", "flush chain ip filter FORWARD"])
            ns.run(["nft", f"add rule ip filter FORWARD {statement}"])
            tool, native = _both(ns)
            if native is not None and not tool.incompatible:
                _same(tool, native)
                decoded.append(statement)
            else:
                assert native is None, statement
        assert len(decoded) >= 6, decoded


def _expression(name: str, **attrs: bytes) -> bytes:
    numbers = {"dreg": 1, "sreg": 1, "key": 2, "base": 2, "offset": 3, "len": 4, "op": 2, "data": 3}
    data = b"".join(nl.attr(int(k[1:]) if k[0] == "a" else numbers[k], v) for k, v in attrs.items())
    return nl.attr(1, nl.attr(nft_rules.NFTA_EXPR_NAME, name.encode() + b"\0")
                   + nl.attr(nft_rules.NFTA_EXPR_DATA, data))


def _be(n: int) -> bytes:
    return n.to_bytes(4, "big")


def _value(raw: bytes) -> bytes:
    return nl.attr(nft_rules.NFTA_DATA_VALUE, raw)


ACCEPT = _expression("immediate", dreg=_be(0), a2=nl.attr(nft_rules.NFTA_DATA_VERDICT,
                                                          nl.attr(nft_rules.NFTA_VERDICT_CODE, _be(1))))
SOURCE = _expression("payload", dreg=_be(1), base=_be(1), offset=_be(12), len=_be(4))


def _decode(*expressions: bytes):
    attrs = {nft_rules.NFTA_RULE_EXPRESSIONS: b"".join(expressions)}
    return nft_rules.decode_rule("FORWARD", 1, attrs)


def test_shapes_the_decoder_cannot_vouch_for_are_refused():
    mask16 = _expression("bitwise", a1=_be(1), a2=_be(1), a3=_be(4), a4=_value(b"\xff\xff\0\0"),
                         a5=_value(b"\0\0\0\0"))
    assert str(_decode(SOURCE, mask16, _expression("cmp", sreg=_be(1), op=_be(0), data=_value(b"\xc6\x12\0\0")),
                       ACCEPT).matches[0]) == "-s 198.18.0.0/16"
    refused = {
        "a 4-byte register overlapping NFT_REG_1":
            (_expression("payload", dreg=_be(9), base=_be(1), offset=_be(12), len=_be(4)),),
        "an address outside its mask":
            (SOURCE, mask16, _expression("cmp", sreg=_be(1), op=_be(0), data=_value(b"\xc6\x12\1\1"))),
        "a bitwise with xor":
            (SOURCE, _expression("bitwise", a1=_be(1), a2=_be(1), a3=_be(4), a4=_value(b"\xff" * 4),
                                 a5=_value(b"\0\0\0\1")),),
        "a mask of part of the value":
            (SOURCE, _expression("bitwise", a1=_be(1), a2=_be(1), a3=_be(2), a4=_value(b"\xff\xff"),
                                 a5=_value(b"\0\0"))),
        "cmp greater than": (SOURCE, _expression("cmp", sreg=_be(1), op=_be(4), data=_value(b"\xc6\x12\0\0"))),
        "a load nobody compares": (SOURCE,),
        "protocol 0": (_expression("meta", dreg=_be(1), key=_be(16)),
                       _expression("cmp", sreg=_be(1), op=_be(0), data=_value(b"\0"))),
        "an unknown expression": (_expression("ct", dreg=_be(1), key=_be(0)),),
        "a load over one not compared (its failure would end the rule)":
            (_expression("payload", dreg=_be(1), base=_be(1), offset=_be(100), len=_be(4)),
             _expression("meta", dreg=_be(1), key=_be(16)),
             _expression("cmp", sreg=_be(1), op=_be(0), data=_value(b"\6"))),
    }
    for what, expressions in refused.items():
        with pytest.raises(nft_rules.Undecodable):
            _decode(*expressions, ACCEPT)
            pytest.fail(what)
    with pytest.raises(nft_rules.Undecodable):
        _decode(ACCEPT, SOURCE)                       # after the verdict


def test_a_rule_decoded_once_is_known_by_its_content_counters_aside():
    counter = _expression("counter", a1=b"\0" * 8, a2=b"\0" * 8)
    counted = _expression("counter", a1=(10).to_bytes(8, "big"), a2=(1).to_bytes(8, "big"))
    cmp = _expression("cmp", sreg=_be(1), op=_be(0), data=_value(b"\xc6\x12\0\1"))
    used: dict = {}
    first = nft_rules._decoded_rule("FORWARD", 1, {nft_rules.NFTA_RULE_EXPRESSIONS: SOURCE + cmp + counter + ACCEPT},
                                    "ip", {}, used)
    assert len(used) == 1
    poisoned = {key: (first.matches, "DROP", (), False, " poisoned") for key in used}
    again = nft_rules._decoded_rule("LFP", 3, {nft_rules.NFTA_RULE_EXPRESSIONS: SOURCE + cmp + counted + ACCEPT},
                                    "ip", poisoned, None)
    assert (again.chain, again.position, again.target, again.text) == ("LFP", 3, "DROP", "-A LFP poisoned")
    other = nft_rules._decoded_rule("FORWARD", 1, {nft_rules.NFTA_RULE_EXPRESSIONS: SOURCE + cmp + counter + ACCEPT,
                                                   nft_rules.NFTA_RULE_USERDATA: b"\0\2x\0"}, "ip", poisoned, None)
    assert other.target == "ACCEPT" and str(other.matches[-1]) == "-m comment --comment x"


def test_a_rule_known_from_the_read_before_is_known_to_the_read_after_too(monkeypatch):
    """Each read hands on every rule it decoded or knew: one the read before
    knew but this read did not hand on is decoded again by the next (at
    1000 rules, every other `iptables -A`/`-D` decoded them all)."""
    cmp = _expression("cmp", sreg=_be(1), op=_be(0), data=_value(b"\xc6\x12\0\1"))
    rule = {nft_rules.NFTA_RULE_EXPRESSIONS: SOURCE + cmp + _expression("counter", a1=b"\0" * 8, a2=b"\0" * 8)
            + ACCEPT}
    decoded = []
    decode = nft_rules.decode_rule
    monkeypatch.setattr(nft_rules, "decode_rule", lambda *a, **k: decoded.append(a) or decode(*a, **k))
    reads = [{}]
    for _ in range(3):
        used: dict = {}
        nft_rules._decoded_rule("FORWARD", 1, rule, "ip", reads[-1], used)
        reads.append(used)
    assert len(decoded) == 1 and reads[1] == reads[2] == reads[3] and len(reads[3]) == 1


def test_a_rule_whose_counters_did_not_move_is_found_by_its_bytes(monkeypatch):
    """Its bytes as dumped lead to its content without taking the counters
    out; once they moved, its content still finds what was decoded."""
    cmp = _expression("cmp", sreg=_be(1), op=_be(0), data=_value(b"\xc6\x12\0\1"))
    def rule(packets):
        return {nft_rules.NFTA_RULE_EXPRESSIONS: SOURCE + cmp + _expression(
            "counter", a1=packets.to_bytes(8, "big"), a2=packets.to_bytes(8, "big")) + ACCEPT}
    walked, decoded = [], []
    walk, decode = nft_rules._without_counters, nft_rules.decode_rule
    monkeypatch.setattr(nft_rules, "_without_counters", lambda e: walked.append(e) or walk(e))
    monkeypatch.setattr(nft_rules, "decode_rule", lambda *a, **k: decoded.append(a) or decode(*a, **k))
    known, dumped, rules = {}, {}, []
    for packets in (0, 0, 5, 5, 0):
        used, dumped_now = {}, {}
        walked_before = len(walked)
        rules.append(nft_rules._decoded_rule("FORWARD", 1, rule(packets), "ip", known, used, (dumped, dumped_now)))
        rules[-1] = (rules[-1], len(walked) - walked_before)
        known, dumped = used, dumped_now
    assert [w for _, w in rules] == [1, 0, 1, 0, 1] and len(decoded) == 1
    assert len({r.text for r, _ in rules}) == 1 and len(known) == 1


def test_a_rule_matching_a_set_is_decoded_every_time_even_by_its_bytes(monkeypatch):
    """A set is named by index in the kernel's rule, resolved when decoded:
    neither its content nor its bytes as dumped may stand for a decode."""
    from linuxfp.state.iptables import IptRule, Match
    cmp = _expression("cmp", sreg=_be(1), op=_be(0), data=_value(b"\xc6\x12\0\1"))
    rule = {nft_rules.NFTA_RULE_EXPRESSIONS: SOURCE + cmp + ACCEPT}
    decoded = []

    def decode(chain, position, a, family="ip"):
        decoded.append(position)
        return IptRule(chain, position, (Match("set", "--match-set", ("s", "src")),), "ACCEPT",
                       text=f"-A {chain} -m set --match-set s src -j ACCEPT")
    monkeypatch.setattr(nft_rules, "decode_rule", decode)
    known, dumped = {}, {}
    for _ in range(3):
        used, dumped_now = {}, {}
        nft_rules._decoded_rule("FORWARD", 1, rule, "ip", known, used, (dumped, dumped_now))
        known, dumped = used, dumped_now
    assert len(decoded) == 3 and known == {} and dumped == {}


def test_a_read_hands_its_rules_on_to_the_next_read(monkeypatch):
    """read_native itself: a second read of an unchanged ruleset decodes
    and walks only its set-matching rules (what the last read knew and
    dumped is handed on), and its rules are what the first read's were."""
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("dec")
        ns.run(["ipset", "restore"], input=SETS)
        ns.run(["iptables-nft-restore"], input=KNOWN_FILTER)
        with entered(ns):
            first = nft_rules.read_native("ip")
            decoded, walked = [], []
            decode, walk = nft_rules.decode_rule, nft_rules._without_counters
            monkeypatch.setattr(nft_rules, "decode_rule", lambda *a, **k: decoded.append(a) or decode(*a, **k))
            monkeypatch.setattr(nft_rules, "_without_counters", lambda e: walked.append(e) or walk(e))
            second = nft_rules.read_native("ip")
            after_second = len(decoded), len(walked)
            ns.run(["iptables-nft", "-A", "FORWARD", "-d", "198.51.100.7", "-j", "DROP"])
            third = nft_rules.read_native("ip")
    matched_sets = sum(1 for t in first.tables for c in t.chains for r in c.rules
                       if any(m.module == "set" for m in r.matches))
    # (a set-matching rule is decoded, and so walked, every time)
    assert second == first and matched_sets < len(KNOWN_FILTER.splitlines()) // 2
    assert after_second == (matched_sets, matched_sets)
    assert (len(decoded), len(walked)) == (2 * matched_sets + 1, 2 * matched_sets + 1)
    assert third.table("filter").chain("FORWARD").rules[-1].text.endswith("-d 198.51.100.7/32 -j DROP")


KNOWN_IPV6 = """\
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:LFP6 - [0:0]
-A FORWARD -s 2001:db8::/32 ! -d 2001:db8:1::1/128 -i eth+ -o lan0 -p tcp -m tcp --dport 22 -j ACCEPT
-A FORWARD -d 2001:db8:ff00::/40 -p udp -m udp ! --sport 53 -j DROP
-A FORWARD -p ipv6-icmp -m icmp6 --icmpv6-type 128 -j ACCEPT
-A FORWARD -p ipv6-icmp -m icmp6 ! --icmpv6-type 1/4 -j DROP
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -p tcp -m multiport --dports 80,443 -j LFP6
-A FORWARD -m set --match-set lfp-six src -j DROP
-A FORWARD -m comment --comment six -g LFP6
-A LFP6 -j RETURN
COMMIT
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_ip6tables_rules_decode_as_the_tool_prints_them(backend):
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("dec")
        ns.run(["ipset", "create", "lfp-six", "hash:net", "family", "inet6"])
        ns.run([f"ip6tables-{backend}-restore"], input=KNOWN_IPV6)
        ns.run([f"iptables-{backend}", "-A", "FORWARD", "-j", "ACCEPT"])
        tool, native = _both(ns, "ip6", backend)
        _same(tool, native)
        assert len(native.table("filter").chain("FORWARD").rules) == KNOWN_IPV6.count("-A FORWARD")
        ns.run([f"ip6tables-{backend}", "-A", "LFP6", "-j", "REJECT", "--reject-with", "icmp6-adm-prohibited"])
        assert _both(ns, "ip6", backend)[1] is None     # IPv6 REJECT: not known, the tool reads
        assert _both(ns, "ip", backend)[1] is not None  # (iptables' own tables: still decoded)


def test_a_chain_named_like_a_verdict_is_left_to_the_tool():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("nft")
        ns.run(["iptables-nft", "-A", "FORWARD", "-j", "ACCEPT"])
        ns.run(["nft", "add chain ip filter DROP"])
        ns.run(["nft", "add rule ip filter DROP accept"])
        ns.run(["nft", "insert rule ip filter FORWARD jump DROP"])
        assert _both(ns)[1] is None             # read as "-j DROP" it would drop what the kernel accepts
