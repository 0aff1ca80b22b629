"""From iptables-save text to the filter node's verdicts, pure: the parser
over a corpus of representative rulesets (written by us), what the filter
node may evaluate (scope), what each rule means (boxes, scoped fallbacks
named with the rule), and the classifier against the rules' evaluator over
seeded random rulesets. The kernel checks the evaluator itself in
test_differential_filter.py."""
from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from linuxfp.graph import build_graph
from linuxfp.graph.filtering.classifier import TooLarge, build_classifier, classify
from linuxfp.graph.filtering.program import ACCEPT, DROP, KERNEL, compile_program, matched_boxes, packet_fields, verdict
from linuxfp.graph.filtering.scope import filter_scope
from linuxfp.graph.nodes.iptables_filter import filter_plan
from linuxfp.lab.rulesets import PREFIX_POOL, PORTS, Coverage, probe_addresses, random_ruleset
from linuxfp.state.iptables import ParseError, parse_rule, parse_save
from linuxfp.state.model import NetfilterState

from snapshot_fixtures import link, router_snapshot

CORPUS = Path(__file__).parent / "fixtures" / "iptables"
LINKS = (SimpleNamespace(index=1, name="lo"), SimpleNamespace(index=2, name="lan0"),
         SimpleNamespace(index=3, name="wan0"), SimpleNamespace(index=4, name="dmz0"),
         SimpleNamespace(index=5, name="docker0"))


def corpus_text(name: str) -> str:
    """A corpus file without our annotations (lines starting with "#:")."""
    return "".join(line for line in (CORPUS / name).read_text().splitlines(keepends=True)
                   if not line.startswith("#:"))


def corpus(name: str, backend: str = "nft"):
    return parse_save(corpus_text(name), backend)


def netfilter(*rulesets, tables=None) -> NetfilterState:
    if tables is None:
        tables = tuple(f"nft:ip {t.name}" if r.backend == "nft" else f"legacy:{t.name}"
                       for r in rulesets for t in r.tables)
    return NetfilterState(active=bool(tables), tables=tables, detail="test", rulesets=rulesets)


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.rules")))
def test_corpus_round_trips_through_the_model(name):
    text = corpus_text(name)
    for backend in ("nft", "legacy"):
        ruleset = parse_save(text, backend)
        lines = [line for line in text.splitlines() if line.startswith("-A ")]
        rules = [r for t in ruleset.tables for c in t.chains for r in c.rules]
        assert len(rules) == len(lines)
        for rule in rules:
            again = parse_rule(rule.save_line())
            assert (again.chain, again.matches, again.target, again.target_options, again.goto) == \
                   (rule.chain, rule.matches, rule.target, rule.target_options, rule.goto), rule.text
        for table in ruleset.tables:
            for chain in table.chains:
                assert [r.position for r in chain.rules] == list(range(1, len(chain.rules) + 1))


def test_parsed_rules_keep_negation_modules_and_targets():
    docker = corpus("docker-host.rules")
    forward = docker.table("filter").chain("FORWARD")
    assert forward.policy == "DROP" and docker.table("filter").chain("DOCKER").policy is None
    rule = docker.table("filter").chain("DOCKER").rules[0]
    assert [str(m) for m in rule.matches] == ["-d 198.18.17.2/32", "! -i docker0", "-o docker0", "-p tcp",
                                               "-m tcp", "-m tcp --dport 80"]
    assert rule.target == "ACCEPT" and rule.modules == ("tcp",)
    dnat = docker.table("nat").chain("DOCKER").rules[1]
    assert dnat.target == "DNAT" and dnat.target_options == ("--to-destination", "198.18.17.2:80")
    kube = corpus("kube-node.rules")
    fw = kube.table("filter").chain("FLANNEL-FWD").rules[0]
    assert any(m.module == "comment" and m.values == ("flanneld forward",) for m in fw.matches)
    goto = parse_rule("-A FORWARD -s 198.18.0.0/15 -g LFP_B")
    assert goto.goto and goto.target == "LFP_B"


def test_parse_errors_name_the_line():
    with pytest.raises(ParseError, match="undeclared chain 'NOPE'"):
        parse_save("*filter\n:FORWARD ACCEPT [0:0]\n-A NOPE -j DROP\nCOMMIT\n", "nft")
    with pytest.raises(ParseError, match="no COMMIT"):
        parse_save("*filter\n:FORWARD ACCEPT [0:0]\n", "nft")
    ruleset = parse_save("# Table `filter' is incompatible, use 'nft' tool.\n", "nft")
    assert ruleset.incompatible == ("filter",)
    # iptables 1.8.9 lists a table without the base chains it cannot show
    hidden = parse_save("# Table `filter' contains incompatible base-chains, use 'nft' tool to list them.\n"
                        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n", "nft")
    assert hidden.incompatible == ("filter",)
    # any remark the parser does not know is taken as something left out
    assert parse_save("# Something new\n", "nft").incompatible == ("Something new",)
    with pytest.raises(ParseError, match="cannot read"):
        parse_save("*filter\n:FORWARD ACCEPT [0:0]\n[5:300] -A FORWARD -j DROP\nCOMMIT\n", "nft")


def test_values_that_look_like_syntax_stay_values():
    """`--comment "!"` and `--comment -f` are printed so by iptables-save; the
    word after --comment is its value whatever it looks like."""
    rule = parse_rule('-A FORWARD -p tcp -m comment --comment "!" -m tcp --dport 22 -j ACCEPT')
    dport = next(m for m in rule.matches if m.option == "--dport")
    assert not dport.negated and dport.values == ("22",)
    rule = parse_rule("-A FORWARD -s 198.18.0.0/15 -m comment --comment -f -j DROP")
    assert [m.option for m in rule.matches if m.module == ""] == ["-s"]
    rule = parse_rule("-A FORWARD -m comment --comment -s -j DROP")
    assert rule.matches[-1].values == ("-s",)
    program = compile_program(filter_scope(netfilter(parse_save(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
        "-A FORWARD -m tcp --dport x -j DROP\nCOMMIT\n", "nft"))).forward, LINKS)
    assert program.rules[0].action == "kernel" and program.rules[0].unsupported


def test_scope_names_what_the_filter_node_cannot_reproduce():
    docker = filter_scope(netfilter(corpus("docker-host.rules")))
    assert any("FORWARD #3 uses connection tracking (conntrack)" in u for u in docker.uncovered), docker.uncovered
    assert any("table nat: rule POSTROUTING #1 uses connection tracking (MASQUERADE)" in u for u in docker.uncovered)
    kube = filter_scope(netfilter(corpus("kube-node.rules")))
    assert kube.uncovered
    # A stateless appliance is within scope: only its filter table is read.
    firewall = filter_scope(netfilter(corpus("firewall-appliance.rules", "legacy")))
    assert firewall.uncovered == () and [r.backend for r in firewall.forward] == ["legacy"]
    # native nft tables of families that see IPv4 are not; ip6/arp do not matter
    native = filter_scope(netfilter(tables=("nft:inet fw", "nft:ip6 filter", "nft:arp filter")))
    assert [u for u in native.uncovered] == ["nf_tables table inet fw (native nft: the filter node reads iptables rules only)"]
    # tables whose rules were not read are never taken for empty ones
    unread = filter_scope(netfilter(tables=("nft:ip filter",)))
    assert unread.uncovered == ("iptables-nft holds tables whose rules were not read",)
    # an empty filter table (iptables-nft leaves one behind) filters nothing
    empty = parse_save("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n", "nft")
    assert filter_scope(netfilter(empty)) == filter_scope(netfilter())


def test_scoped_fallbacks_name_the_rule_and_the_match():
    program = compile_program(filter_scope(netfilter(corpus("firewall-appliance.rules", "legacy"))).forward, LINKS)
    unsupported = {r.describe(): r.unsupported for r in program.unsupported}
    assert unsupported == {
        "iptables-legacy FORWARD #6": ("-m tcp ! --tcp-flags FIN,SYN,RST,ACK SYN",),
        "iptables-legacy FORWARD #10": ("-m limit", "-m limit --limit 5/min"),
    }
    actions = {r.describe(): r.action for r in program.rules}
    assert actions["iptables-legacy FORWARD #11"] == "kernel"      # REJECT: the kernel answers
    assert actions["iptables-legacy BLOCKLIST #1"] == "drop"


def test_firewall_verdicts():
    program = compile_program(filter_scope(netfilter(corpus("firewall-appliance.rules", "legacy"))).forward, LINKS)
    classifier = build_classifier(program, [link.index for link in LINKS])

    def decide(src, dst, proto, sport, dport, iif, oif):
        fields = packet_fields(_ip(src), _ip(dst), proto, sport, dport, iif, oif)
        expected = verdict(program, matched_boxes(program, fields))
        assert classify(classifier, fields) == expected
        return expected[0]

    lan, wan, dmz = 2, 3, 4
    assert decide("198.18.10.5", "198.51.100.99", 6, 40000, 443, lan, wan) == ACCEPT
    assert decide("198.18.10.5", "198.51.100.99", 6, 40000, 25, lan, wan) == KERNEL     # REJECTed by Linux
    assert decide("203.0.113.9", "198.51.100.10", 6, 40000, 25, wan, dmz) == DROP       # blocklist
    assert decide("198.51.100.3", "198.51.100.10", 6, 40000, 25, wan, dmz) == ACCEPT
    assert decide("198.51.100.3", "198.51.100.250", 6, 40000, 25, wan, dmz) == DROP
    assert decide("198.51.100.3", "198.18.10.5", 6, 80, 40000, wan, lan) == KERNEL      # tcp-flags rule
    assert decide("198.51.100.3", "198.18.10.5", 17, 53, 40000, wan, lan) == ACCEPT
    assert decide("198.51.100.3", "198.18.10.5", 1, 3, 4, wan, lan) == ACCEPT           # 3/4
    assert decide("198.51.100.3", "198.18.10.5", 1, 3, 3, wan, lan) == KERNEL           # LOG (limit), REJECT


def _ip(text: str) -> int:
    return int.from_bytes(bytes(int(x) for x in text.split(".")), "big")


def test_classifier_agrees_with_the_rules_evaluator_on_random_rulesets():
    """Seeded random rulesets × packets at and around every prefix edge and
    port: the classifier's answer (what the datapath computes) is the
    evaluator's. Seed printed on failure."""
    coverage = Coverage()
    outcomes = {ACCEPT: 0, DROP: 0, KERNEL: 0}
    cases = 0
    for seed in range(120):
        rng = random.Random(seed)
        text = random_ruleset(seed, rng.choice((1, 5, 20, 40)), ("lan0", "wan0", "dmz0"), coverage)
        program = compile_program(filter_scope(netfilter(parse_save(text, "nft"))).forward, LINKS)
        try:
            classifier = build_classifier(program, [link.index for link in LINKS])
        except TooLarge:
            continue
        addresses = probe_addresses(seed, 40)
        for _ in range(40):
            proto = rng.choice((6, 17, 1, 47))
            sport, dport = (rng.choice(PORTS + (rng.randrange(65536),)) for _ in range(2))
            if proto == 1:
                sport, dport = rng.choice(((8, 0), (0, 0), (3, 3), (3, 4), (11, 0)))    # type, code
            elif proto == 47:
                sport = dport = 0
            fields = packet_fields(_ip(rng.choice(addresses)), _ip(rng.choice(addresses)), proto, sport, dport,
                                   rng.choice((2, 3, 4)), rng.choice((2, 3, 4)))
            expected = verdict(program, matched_boxes(program, fields))
            assert classify(classifier, fields) == expected, f"seed {seed}: {fields}\n{text}"
            outcomes[expected[0]] += 1
            cases += 1
    assert cases >= 4000 and min(outcomes.values()) >= 200, (cases, outcomes, coverage.summary())
    for kind in ("! -s", "-d", "! -i", "-o", "multiport", "icmp-type", "goto LFP_B", "RETURN", "unsupported"):
        assert coverage.matches.get(kind, 0) + coverage.targets.get(kind, 0) > 0, kind


def test_the_graph_places_the_filter_between_route_and_transmit():
    ruleset = parse_save("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                         "-A FORWARD -d 198.19.0.0/24 -p udp -j DROP\nCOMMIT\n", "nft")
    graph = build_graph(router_snapshot(netfilter=netfilter(ruleset)), "xdp")
    assert {p.ifname: p.shape.nodes for p in graph.pipelines} == {
        "left": ("router", "filter", "transmit"), "right": ("router", "filter", "transmit")}
    tables = {t.name: t for t in graph.tables}
    assert len(tables["lfp_flt_cfg"].entries) == 1 and tables["lfp_flt_dst"].entries
    # stateful rules stay with the kernel, with the rule named
    stateful = parse_save("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                          "-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n", "nft")
    graph = build_graph(router_snapshot(netfilter=netfilter(stateful)), "xdp")
    assert graph.pipelines == () and all("FORWARD #1 uses connection tracking" in s.reason for s in graph.skipped
                                         if s.ifname != "lo")


def test_a_classifier_too_large_keeps_the_filter_on_the_kernel_path(monkeypatch):
    from linuxfp.graph.filtering import classifier

    monkeypatch.setattr(classifier, "MAX_PAIR_ENTRIES", 2)
    rules = "".join(f"-A FORWARD -s {p} -d {q} -j DROP\n" for p in PREFIX_POOL[:4] for q in PREFIX_POOL[4:8])
    ruleset = parse_save(f"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n{rules}COMMIT\n",
                         "nft")
    snapshot = router_snapshot(netfilter=netfilter(ruleset))
    assert filter_plan(snapshot).classifier is None
    graph = build_graph(snapshot, "xdp")
    assert graph.pipelines == ()
    assert all("too large a classifier" in s.reason and s.reason.startswith("iptables FORWARD rules")
               for s in graph.skipped if s.ifname != "lo"), graph.skipped


def test_interfaces_of_rules_follow_links():
    """-i/-o name interfaces; a link that appears later gets its class when
    the graph is rebuilt (until then the datapath misses it and passes)."""
    ruleset = parse_save("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                         "-A FORWARD -o ext+ -j DROP\nCOMMIT\n", "nft")
    snap = router_snapshot(netfilter=netfilter(ruleset))
    before = filter_plan(snap).classifier
    with_ext = router_snapshot(netfilter=snap.netfilter, links=snap.links + (link(9, "ext0"),))
    after = filter_plan(with_ext).classifier
    assert 9 not in {i for i, _, _ in before.interfaces} and 9 in {i for i, _, _ in after.interfaces}
    fields = packet_fields(_ip("198.18.1.1"), _ip("198.19.0.1"), 17, 1, 2, 2, 9)
    assert classify(after, fields)[0] == DROP and classify(before, fields) is None
