"""iptables-legacy tables decoded from the kernel's blob
(linuxfp/state/xt_blob.py) must be exactly the rules iptables-legacy-save
prints: each ruleset is loaded with the real iptables-legacy-restore into a
namespace and read both ways; what the decoder does not know goes to the
tool."""
from __future__ import annotations

import pytest

from linuxfp.lab.netns import Lab, entered
from linuxfp.lab.rulesets import random_ipsets, random_ruleset
from linuxfp.state.iptables import read_ruleset
from linuxfp.state.netfilter import read_legacy_native

from test_filter_rules import CORPUS, corpus_text
from test_nft_rules import KNOWN_FILTER, KNOWN_OTHERS, SETS, UNKNOWN, _same

pytestmark = pytest.mark.netns


def _both(ns, family: str = "ip"):
    with entered(ns):
        return read_ruleset("legacy", family), read_legacy_native(family)


def test_every_known_match_and_target_decodes_as_the_tool_prints_it():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("xt")
        ns.run(["ipset", "restore"], input=SETS)
        ns.run(["iptables-legacy-restore"], input=KNOWN_FILTER + KNOWN_OTHERS)
        tool, native = _both(ns)
        _same(tool, native)
        assert len(native.table("filter").chain("FORWARD").rules) == KNOWN_FILTER.count("-A FORWARD")
        assert {t.name for t in native.tables} == {"raw", "mangle", "filter", "security", "nat"}
        # a rule that ends a user chain with an unconditional RETURN of its own
        ns.run(["iptables-legacy", "-A", "AAA", "-j", "RETURN"])
        ns.run(["iptables-legacy", "-N", "ZZZ"])                 # an empty chain last
        tool, native = _both(ns)
        _same(tool, native)
        assert native.table("filter").chain("AAA").rules[-1].target == "RETURN"


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.rules")))
def test_corpus_rulesets_decode_as_the_tool_prints_them(name):
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("xt")
        ns.run(["iptables-legacy-restore"], input=corpus_text(name))
        tool, native = _both(ns)
        if any(m.module in ("limit", "length") for t in tool.tables for c in t.chains for r in c.rules
               for m in r.matches):
            assert native is None
        else:
            _same(tool, native)


def test_random_rulesets_decode_as_the_tool_prints_them():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("xt")
        ns.run(["ipset", "restore"], input=random_ipsets(7))
        decoded = 0
        for seed in range(12):
            text = random_ruleset(seed, 40, ("lan0", "wan0"), ipsets=True, unsupported=seed % 3 == 0)
            ns.run(["iptables-legacy-restore"], input=text)
            tool, native = _both(ns)
            if native is not None:
                _same(tool, native)
                decoded += 1
        assert decoded >= 8


@pytest.mark.parametrize("rule", UNKNOWN)
def test_what_the_decoder_does_not_know_is_left_to_the_tool(rule):
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("xt")
        ns.run(["ipset", "restore"], input=SETS)
        ns.run(["iptables-legacy-restore"], input=f"*filter\n:FORWARD ACCEPT [0:0]\n{rule}\nCOMMIT\n")
        tool, native = _both(ns)
        if "255.0.255.0" in rule:               # x_tables holds any mask: the tool prints it dotted
            _same(tool, native)
        else:
            assert native is None
        assert len(tool.table("filter").chain("FORWARD").rules) == 1


def test_ip6tables_legacy_goes_to_the_tool():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("xt")
        ns.run(["ip6tables-legacy", "-A", "FORWARD", "-s", "2001:db8::/32", "-j", "DROP"])
        tool, native = _both(ns, "ip6")
        assert native is None and tool.table("filter").chain("FORWARD").rules
