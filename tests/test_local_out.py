"""linuxfp/graph/filtering/local_out.py: whether netfilter leaves every
outer packet a VXLAN device sends to one remote untouched on its way out —
the condition for the fast path to encapsulate itself (vxlan_tx.h)."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from linuxfp.graph.filtering.addrtypes import address_types
from linuxfp.graph.filtering.local_out import SentFlow, sent_untouched
from linuxfp.lab.flannel_kubeproxy import ruleset as kube_ruleset
from linuxfp.lab.flannel_state import Service, ServicePort
from linuxfp.state.iptables import parse_save
from linuxfp.state.model import NetfilterState, NftChain, NftNative

FLOW = SentFlow("192.0.2.1", "192.0.2.2", (32768, 60998), 8472)
BUILTIN = {"raw": ("PREROUTING", "OUTPUT"), "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
           "filter": ("INPUT", "FORWARD", "OUTPUT"), "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
           "security": ("INPUT", "FORWARD", "OUTPUT")}


def save(tables: dict[str, list[str]], policies: dict[str, str] | None = None) -> str:
    """iptables-save text: each table's built-in chains (ACCEPT, or as
    `policies` says, by "table CHAIN"), the user chains its rules name, its rules."""
    out = []
    for table, rules in tables.items():
        out.append(f"*{table}")
        out += [f":{c} {(policies or {}).get(f'{table} {c}', 'ACCEPT')} [0:0]" for c in BUILTIN[table]]
        users = {r.split()[1] for r in rules} - set(BUILTIN[table])
        out += [f":{c} - [0:0]" for c in sorted(users)]
        out += rules + ["COMMIT"]
    return "\n".join(out) + "\n"


def state(text: str, native=()) -> NetfilterState:
    ruleset = parse_save(text, "nft")
    return NetfilterState(active=True, tables=tuple(f"nft:ip {t.name}" for t in ruleset.tables), detail="test",
                          rulesets=(ruleset,), native=NftNative(chains=tuple(native)))


def local_types():
    route = SimpleNamespace(family=2, dst="192.0.2.1/32", type="local", table=255)
    return address_types([route])


LINKS = (SimpleNamespace(index=2, name="eth0"), SimpleNamespace(index=3, name="flannel.1"))


def verdict(tables, tracked: bool = True, flow: SentFlow = FLOW, policies=None, native=()) -> str | None:
    return sent_untouched(state(save(tables, policies), native), LINKS, local_types(), flow, tracked)


def restored(text: str) -> str:
    """iptables-restore input that inserts at the top (-I CHAIN 1) as
    iptables-save would show it."""
    out, chains, table = [], {}, None
    for line in text.splitlines():
        if line.startswith("*"):
            table, chains = line, {}
        elif line.startswith(":"):
            chains[line.split()[0][1:]] = (line, [])
        elif line.startswith("-I "):
            words = line.split(" ", 3)
            chains.setdefault(words[1], (f":{words[1]} ACCEPT [0:0]", []))[1].insert(0, f"-A {words[1]} {words[3]}")
        elif line.startswith("-A "):
            name = line.split()[1]
            chains.setdefault(name, (f":{name} ACCEPT [0:0]", []))[1].append(line)
        elif line == "COMMIT":
            out.append(table)
            out += [declared for declared, _ in chains.values()]
            out += [rule for _, rules in chains.values() for rule in rules]
            out.append("COMMIT")
    return "\n".join(out) + "\n"


def test_no_rules_and_rules_that_match_none_of_the_flow_leave_it_untouched():
    assert verdict({}) is None
    assert verdict({"filter": ["-A OUTPUT -d 192.0.2.9/32 -j DROP", "-A OUTPUT -p tcp -j DROP",
                               "-A OUTPUT -p udp -m udp --dport 4789 -j DROP",
                               "-A OUTPUT -p udp -m udp --sport 1000:2000 -j DROP"]}) is None
    # a rule without a target counts only; a user chain that returns
    assert verdict({"filter": ["-A OUTPUT -p udp", "-A OUTPUT -j CHK", "-A CHK -s 192.0.2.1/32 -j RETURN",
                               "-A CHK -j DROP"]}) is None
    # nat's chains see a connection's first packet only: never one the fast path sends
    assert verdict({"nat": ["-A POSTROUTING -j MASQUERADE", "-A OUTPUT -p udp -j DNAT --to-destination 192.0.2.7"]}) is None


def test_a_kube_proxy_node_leaves_its_outer_packets_untouched_where_connections_are_tracked():
    service = Service("echo", "198.19.0.10", [ServicePort("udp", 53, 5353)], "pod-1", "198.18.1.2")
    text = kube_ruleset(service, "198.18.0.0/16")
    netfilter = state(restored(text))
    assert sent_untouched(netfilter, LINKS, local_types(), FLOW, tracked=True) is None
    # (untracked, a conntrack match is not evaluated: it could not be there)
    assert "not known here" in sent_untouched(netfilter, LINKS, local_types(), FLOW, tracked=False)


def test_what_drops_changes_or_may_match_some_of_the_flow_names_the_rule():
    why = verdict({"filter": ["-A OUTPUT -p udp -m udp --dport 8472 -j DROP"]})
    assert "filter OUTPUT #1" in why and "drops them" in why
    assert "may match some" in verdict({"filter": ["-A OUTPUT -p udp -m udp --sport 40000:50000 -j DROP"]})
    assert "may match some" in verdict({"filter": ["-A OUTPUT -o eth0 -j ACCEPT"]})      # (the egress is the route's)
    assert "MARK" in verdict({"mangle": ["-A POSTROUTING -j MARK --set-xmark 0x1/0xffffffff"]})
    assert "LOG" in verdict({"security": ["-A OUTPUT -j LOG"]})
    assert "policy drops" in verdict({"filter": []}, policies={"filter OUTPUT": "DROP"})
    # a RETURN in a built-in chain, or a goto whose chain ends, ends in the policy
    assert "policy drops" in verdict({"filter": ["-A OUTPUT -p udp -m udp --dport 8472 -j RETURN",
                                                 "-A OUTPUT -j ACCEPT"]}, policies={"filter OUTPUT": "DROP"})
    assert "policy drops" in verdict({"filter": ["-A OUTPUT -g CHK", "-A OUTPUT -j ACCEPT", "-A CHK -p tcp -j ACCEPT"]},
                                     policies={"filter OUTPUT": "DROP"})
    assert verdict({"filter": ["-A OUTPUT -p udp -m udp --dport 8472 -j ACCEPT"]},
                   policies={"filter OUTPUT": "DROP"}) is None
    # conntrack has not run at raw's priority; -m limit keeps state
    assert "not known here" in verdict({"raw": ["-A OUTPUT -m conntrack --ctstate NEW -j ACCEPT"]})
    assert "not evaluated" in verdict({"filter": ["-A OUTPUT -m limit --limit 1/sec -j ACCEPT"]})
    # the outer connection never sees a reply: NEW, not ESTABLISHED
    assert "drops them" in verdict({"filter": ["-A OUTPUT -m conntrack --ctstate NEW -j DROP"]})
    assert verdict({"filter": ["-A OUTPUT -m conntrack --ctstate ESTABLISHED -j DROP"]}) is None
    # the host's own address is a type the fast path leaves to the kernel
    assert "not known here" in verdict({"filter": ["-A OUTPUT -m addrtype --src-type LOCAL -j ACCEPT"]})


def test_native_chains_on_the_way_out_are_the_kernel_s():
    chain = NftChain("inet", "fw", "out", hook="output", kind="filter", policy="accept", rules=1)
    assert "fw" in verdict({}, native=(chain,))
    assert verdict({}, native=(replace(chain, rules=0),)) is None          # accepts all, does nothing
    assert verdict({}, native=(replace(chain, family="ip6"),)) is None     # not IPv4's
    assert verdict({}, native=(replace(chain, hook="input"),)) is None
