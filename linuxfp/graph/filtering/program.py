"""The FORWARD chains of every iptables backend, and the native nft forward
chains read as theirs (state/nft_forward.py), as one program: each rule
with its boxes (predicates.py) and what it does, and the exact iptables
verdict given which boxes a packet lies in. Pure.

Verdict semantics, as the kernel's: first match wins in a chain; a jump
returns to the rule after it when the called chain falls off its end or hits
RETURN, a goto returns to the caller's caller; a built-in chain ends in its
policy. Two backends (or native base chains) are two hooks: a packet is
forwarded only if both accept it. Anything with an effect the fast path does not have (LOG, REJECT,
MARK, ...) and every rule with a match the fast path cannot evaluate make the
verdict KERNEL for the packets that reach them. Where connections are
tracked, a drop by a chain before conntrack's hook (raw's priority) is
DROP_EARLY: conntrack never sees the packet, so the fast path must not
refresh its connection (bpf_modules/conntrack.h).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from linuxfp.state.iptables import TOOLS
from linuxfp.state.netfilter_hooks import CONNTRACK_HOOK, FORWARD_PATH_HOOKS

from ..remember import forgotten_too
from .predicates import ANY, IPV4, WIDTH, Box, Family, FieldPredicate, RuleMeaning, rule_meaning

ACCEPT, DROP, KERNEL, DROP_EARLY = 0, 1, 2, 3
# The actions after which _run looks at no further rule of the chain.
ENDS_CHAIN = frozenset({"accept", "drop", "kernel", "return", "goto"})
MAX_DEPTH = 64   # the kernel refuses deeper jumps, so any loop is ours


@dataclass(frozen=True)
class CompiledRule:
    index: int                  # position in Program.rules (the stats detail)
    backend: str
    chain: str
    position: int
    text: str
    action: str                 # accept, drop, kernel, return, jump, goto, continue
    jump: str                   # the chain of a jump or goto
    box_ids: tuple[int, ...]    # bits of the boxes this rule owns
    unsupported: tuple[str, ...] = ()
    target: str = ""            # as written: ACCEPT, LOG, a chain, ...
    family: str = "ip"          # its tables': iptables' ("ip") or ip6tables' ("ip6")
    # the part of the rule written before it whose packets the kernel decides
    # (RuleMeaning.unsure): not a rule of its own in Linux's counters
    unsure_part: bool = False
    tool: str = ""              # its Ruleset's (iptables-nft, nft inet fw, ...)

    def describe(self) -> str:
        return f"{self.tool or TOOLS[self.family] + '-' + self.backend} {self.chain} #{self.position}"


@dataclass(frozen=True)
class Program:
    rules: tuple[CompiledRule, ...]
    boxes: tuple[Box, ...]                                   # by box id
    chains: tuple[tuple[str, str, str | None, tuple[int, ...]], ...]   # backend, chain, policy, rule indexes
    backends: tuple[str, ...]
    # "iif"/"oif" when a rule names interfaces (even ones that do not exist)
    interface_fields: frozenset[str] = frozenset()
    reads_mark: bool = False      # a rule matches the packet mark (XDP cannot see it)
    # The kernel tracks connections: only packets of established, un-NATed
    # connections are taken (scope.py), the rest go to the kernel — but
    # those a chain before conntrack drops (DROP_EARLY).
    stateful: bool = False
    family: Family = IPV4         # iptables' rules or ip6tables'
    # ... and of established connections with NAT too (the conntrack node takes
    # them): the kernel translates them (an IPv4 nat table).
    translated: bool = False
    # per backend, the chain a packet starts from (a native base chain's
    # name) and the tool that shows its rules; () for iptables' alone:
    # FORWARD, TOOLS[family]-backend
    entries: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    # per backend, where a packet meets it: its hook's place on the forward
    # path (a prerouting chain's before forward's) and its priority there;
    # (): iptables' alone (FORWARD, 0)
    priorities: tuple[tuple[int, int], ...] = ()
    # per backend, the table its entry chain is in ("filter", an iptables
    # raw or mangle view's table, a native table's name); (): iptables' alone
    tables: tuple[str, ...] = ()

    def priority(self, position: int) -> tuple[int, int]:
        return self.priorities[position] if self.priorities else (FORWARD_PATH_HOOKS.index("forward"), 0)

    def before_conntrack(self, position: int) -> bool:
        """Whether backends[position]'s hook runs before conntrack's, where
        connections are tracked: what it drops conntrack never sees."""
        return self.stateful and self.priority(position) < CONNTRACK_HOOK

    def entry(self, position: int) -> str:
        """The chain backends[position] starts from."""
        return self.entries[position] if self.entries else "FORWARD"

    def table(self, position: int) -> str:
        """The table backends[position]'s entry chain is in."""
        return self.tables[position] if self.tables else "filter"

    def tool(self, position: int) -> str:
        return self.tools[position] if self.tools else f"{TOOLS[self.family.name]}-{self.backends[position]}"

    def chain(self, backend: str, name: str):
        return self._chain_index.get((backend, name))

    @cached_property
    def _chain_index(self) -> dict:
        return {(c[0], c[1]): c for c in self.chains}

    @cached_property
    def box_rule(self) -> tuple[int, ...]:
        """The rule each box belongs to."""
        owner = [0] * len(self.boxes)
        for rule in self.rules:
            for box in rule.box_ids:
                owner[box] = rule.index
        return tuple(owner)

    @cached_property
    def backend_boxes(self) -> tuple[int, ...]:
        """Per backend, the bits of its rules' boxes: all a hook's chains
        decide by."""
        masks = dict.fromkeys(self.backends, 0)
        for rule in self.rules:
            for box in rule.box_ids:
                if rule.backend in masks:
                    masks[rule.backend] |= 1 << box
        return tuple(masks[backend] for backend in self.backends)

    @cached_property
    def hook_order(self) -> tuple[int, ...]:
        """The backends' positions in the order a packet meets their hooks
        (of one priority, in position order)."""
        return tuple(sorted(range(len(self.backends)), key=self.priority))

    @cached_property
    def hooks_before(self) -> tuple[tuple[int, ...], ...]:
        """Per backend position, those whose hooks a packet meets before
        it (a lower priority), in position order."""
        return tuple(tuple(i for i in range(len(self.backends)) if self.priority(i) < self.priority(position))
                     for position in range(len(self.backends)))

    @property
    def unsupported(self) -> tuple[CompiledRule, ...]:
        return tuple(r for r in self.rules if r.unsupported)


def link_names(links) -> tuple[tuple[int, str], ...]:
    """What rules naming interfaces (-i, -o) read of the links."""
    return tuple((link.index, link.name) for link in links)


class _Meanings:
    """rule_meaning() per rule, with its boxes as the classifier takes them
    (_protocol_in_l4d), kept from one compile of a family's rules to the
    next: after a change most rules are the same, and working each out
    again is most of a rebuild (1000 rules: half of it). A meaning depends on
    the rule's matches, and on the interfaces' names where a match names one
    (-i, -o); a rule matching sets or address types is worked out again
    every time (their members and routes change with no rule changing).
    Only the last compile's are kept."""

    _kept: dict[str, tuple[tuple, object, dict]] = {}     # family -> (links' names, their token, meanings)

    def __init__(self, family: Family, links) -> None:
        self.family, self.links = family, links
        names = link_names(links)
        kept = self._kept.get(family.name)
        if kept is not None and kept[0] == names:
            self.token, self.known = kept[1], kept[2]
        else:
            self.token = object()       # (keys that name interfaces carry it: new names, new token)
            self.known = kept[2] if kept is not None else {}
        self.names, self.fresh = names, {}

    def of(self, rule, sets, addrtypes) -> tuple[RuleMeaning, tuple[Box, ...], tuple[Box, ...]]:
        """The rule's meaning, its boxes and its unsure part's boxes."""
        if any(m.module in ("set", "addrtype") for m in rule.matches):
            return self._worked_out(rule, sets, addrtypes)
        key = (rule.matches, self.token if any(m.module == "" and m.option in ("-i", "-o")
                                               for m in rule.matches) else None)
        found = self.fresh.get(key)
        if found is None:
            found = self.known.get(key)
            if found is None:
                found = self._worked_out(rule, sets, addrtypes)
            self.fresh[key] = found
        return found

    def _worked_out(self, rule, sets, addrtypes):
        meaning = rule_meaning(rule, self.links, sets, self.family, addrtypes)
        return (meaning, tuple(_protocol_in_l4d(box) for box in meaning.boxes),
                tuple(_protocol_in_l4d(box) for box in meaning.unsure))

    def keep(self) -> None:
        self._kept[self.family.name] = (self.names, self.token, self.fresh)


@forgotten_too
def forget_rule_meanings() -> None:
    """Keep no rule's meaning from a compile before (each test starts
    without any)."""
    _Meanings._kept.clear()


def compile_program(forward_rulesets, links, stateful: bool = False, ipsets=(), family: Family = IPV4,
                    addrtypes=None, nat: bool = False) -> Program:
    """Each ruleset's entry chain (of `family`): the FORWARD chain of
    iptables' filter table, a raw or mangle PREROUTING view's, a native
    ruleset's base chain — and every chain it reaches; `stateful` as
    FilterScope says; `ipsets` the
    sets rules match; `addrtypes` the namespace's address types
    (addrtypes.py), where rules match them; `nat`: the kernel translates
    connections with NAT (scope.translating())."""
    sets = {s.name: s for s in ipsets}
    meanings = _Meanings(family, links)
    rules: list[CompiledRule] = []
    boxes: list[Box] = []
    chains = []
    named = set()
    marks = False
    for ruleset in forward_rulesets:
        table = ruleset.forward_table
        seen, todo = set(), [ruleset.entry]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            chain = table.chain(name)
            indexes = []
            for rule in chain.rules:
                named.update({"-i": "iif", "-o": "oif"}[m.option] for m in rule.matches
                             if m.module == "" and m.option in ("-i", "-o"))
                named.update(_set_interface_fields(rule, sets))
                marks = marks or "mark" in rule.modules
                meaning, own, unsure = meanings.of(rule, sets, addrtypes)
                if meaning.unsure:
                    ids = tuple(range(len(boxes), len(boxes) + len(unsure)))
                    boxes.extend(unsure)
                    indexes.append(len(rules))
                    rules.append(CompiledRule(len(rules), ruleset.backend, chain.name, rule.position, rule.text,
                                              "kernel", "", ids, (meaning.unsure_reason,), rule.target, family.name,
                                              unsure_part=True, tool=ruleset.tool))
                ids = tuple(range(len(boxes), len(boxes) + len(own)))
                boxes.extend(own)
                action, jump = _action(rule, table, bool(meaning.unsupported))
                if jump:
                    todo.append(jump)
                indexes.append(len(rules))
                rules.append(CompiledRule(len(rules), ruleset.backend, chain.name, rule.position, rule.text,
                                          action, jump, ids, meaning.unsupported, rule.target, family.name,
                                          tool=ruleset.tool))
            chains.append((ruleset.backend, chain.name, chain.policy, tuple(indexes)))
    meanings.keep()
    # (iptables' FORWARD alone needs no annotation)
    annotated = any(r.native or r.hook != "forward" for r in forward_rulesets)
    return Program(tuple(rules), tuple(boxes), tuple(chains), tuple(r.backend for r in forward_rulesets),
                   frozenset(named), marks, stateful, family, stateful and nat,
                   tuple(r.entry for r in forward_rulesets) if annotated else (),
                   tuple(r.tool for r in forward_rulesets) if annotated else (),
                   tuple((FORWARD_PATH_HOOKS.index(r.hook), r.priority) for r in forward_rulesets) if annotated else (),
                   tuple(r.forward_table.name for r in forward_rulesets) if annotated else ())


def _set_interface_fields(rule, sets) -> set[str]:
    """-i / -o as hash:net,iface matches name them (their second direction)."""
    out = set()
    for m in rule.matches:
        if m.module == "set" and m.option == "--match-set" and len(m.values) == 2:
            ipset, flags = sets.get(m.values[0]), m.values[1].split(",")
            if ipset is not None and ipset.kind.endswith(",iface") and len(flags) > 1:
                out.add("iif" if flags[1] == "src" else "oif")
    return out


def _protocol_in_l4d(box: Box) -> Box:
    """The box with a protocol-only constraint on l4s moved to l4d: both
    fields carry the protocol in their top 8 bits, so it is the same
    constraint — and a classifier whose rules name protocols and destination
    ports only then needs no source-side lookup at all."""
    source = box.get("l4s")
    prefixes = (source.inside or frozenset()) | source.outside
    if source == ANY or any(length != 8 for _, length in prefixes):
        return box
    moved = FieldPredicate(source.inside, source.outside)
    fields = dict(box.fields)
    del fields["l4s"]
    fields["l4d"] = fields["l4d"].both(moved, WIDTH["l4d"]) if "l4d" in fields else moved
    return Box(tuple(sorted(fields.items())))


def _action(rule, table, unsupported: bool) -> tuple[str, str]:
    target = rule.target
    if unsupported:
        return "kernel", ""           # even without a target: limit, recent, quota... keep state
    if target == "":
        return "continue", ""         # counts only: whatever it matches, nothing happens
    if target in ("ACCEPT", "DROP"):
        return target.lower(), ""
    if target == "RETURN":
        return "return", ""
    if table.chain(target) is not None and table.chain(target).policy is None:
        return ("goto" if rule.goto else "jump"), target
    return "kernel", ""               # LOG, REJECT, MARK, ...: the kernel's effects


def verdict(program: Program, matched: int) -> tuple[int, int]:
    """(ACCEPT/DROP/KERNEL/DROP_EARLY, deciding rule index or -1 for a policy) for a
    packet inside exactly the boxes whose bits are set in `matched`."""
    return verdict_and_counted(program, matched)[:2]


def policy_of(position: int) -> int:
    """How counted() names the policy of program.backends[position]'s FORWARD
    (its entry chain's)."""
    return -1 - position


def verdict_and_counted(program: Program, matched: int, memo: list[dict] | None = None
                        ) -> tuple[int, int, tuple[int, ...]]:
    """verdict(), and the counters Linux adds that packet to when the fast
    path decides it (ACCEPT, DROP or DROP_EARLY; none for KERNEL, where Linux counts
    itself): every rule it matches on its way through the chains, jumps
    and rules without a target included, in order, and a built-in chain's
    policy as policy_of(backend position). Two backends are two hooks: a
    drop counts the first backend that drops, in the hooks' priority order,
    and those of a lower priority, which accepted it before (a hook after it
    never sees the packet; one of the same priority, iptables-nft's and
    -legacy's, might have counted it too: which runs first is not known).
    `memo` (one dict per backend, empty at first): what each backend
    decided for the boxes of its own a packet is inside, kept for the next
    call — a classifier's classes are many more than any one hook's
    (build_classifier decides each)."""
    results, trails = [], []
    for position, backend in enumerate(program.backends):
        own = matched & program.backend_boxes[position]
        known = memo[position].get(own) if memo is not None else None
        if known is None:
            hits = sorted({program.box_rule[box] for box in bit_indexes(own)})
            trail: list[int] = []
            known = (_run_builtin(program, backend, program.entry(position), hits, trail, position), tuple(trail))
            if memo is not None:
                memo[position][own] = known
        results.append(known[0])
        trails.append(known[1])
    for result in results:
        if result[0] == KERNEL:
            return (*result, ())
    for first in program.hook_order:
        if results[first][0] == DROP:
            return (DROP_EARLY if program.before_conntrack(first) else DROP, results[first][1],
                    tuple(i for position in program.hooks_before[first] + (first,) for i in trails[position]))
    return (ACCEPT, results[0][1] if results else -1, tuple(i for trail in trails for i in trail))


def bit_indexes(bits: int) -> list[int]:
    out = []
    while bits:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


def _run_builtin(program: Program, backend: str, name: str, hits: list[int], trail: list[int],
                 position: int) -> tuple[int, int]:
    _, _, policy, _ = program.chain(backend, name)
    outcome = _run(program, backend, name, hits, 0, trail)
    if outcome is not None:
        return outcome
    trail.append(policy_of(position))
    return (DROP if policy == "DROP" else ACCEPT if policy == "ACCEPT" else KERNEL, -1)


def _run(program: Program, backend: str, name: str, hits: list[int], depth: int, trail: list[int]):
    """A terminal (verdict, rule), or None when the chain returns. `hits`:
    the rules the packet matches, in program order (a chain's rules are
    consecutive and in chain order). `trail` gets every rule matched on the
    way (their counters)."""
    if depth > MAX_DEPTH:
        return (KERNEL, -1)
    for index in hits:
        rule = program.rules[index]
        if rule.chain != name or rule.backend != backend:
            continue
        trail.append(index)
        if rule.action == "accept":
            return (ACCEPT, index)
        if rule.action == "drop":
            return (DROP, index)
        if rule.action == "kernel":
            return (KERNEL, index)
        if rule.action == "return":
            return None
        if rule.action in ("jump", "goto"):
            outcome = _run(program, backend, rule.jump, hits, depth + 1, trail)
            if outcome is not None or rule.action == "goto":
                return outcome
    return None


def box_contains(box: Box, values: dict[str, int]) -> bool:
    """Whether a packet with these field values lies in the box (the
    reference the classifier is tested against)."""
    for name, pred in box.fields:
        value, width = values[name], WIDTH[name]
        inside = pred.inside is None or any(_covers(p, value, width) for p in pred.inside)
        if not inside or any(_covers(p, value, width) for p in pred.outside):
            return False
    return True


def _covers(prefix, value: int, width: int) -> bool:
    shift = width - prefix[1]
    return (value >> shift) == (prefix[0] >> shift)


def matched_boxes(program: Program, values: dict[str, int]) -> int:
    bits = 0
    for box_id, box in enumerate(program.boxes):
        if box_contains(box, values):
            bits |= 1 << box_id
    return bits


def packet_fields(src: int, dst: int, proto: int, sport: int, dport: int, iif: int, oif: int,
                  family: Family = IPV4, tcp_flags: int = 0, ctnat: int = 0) -> dict[str, int]:
    """Field values of a packet as the fast path extracts them (for ICMP
    and ICMPv6, sport/dport are type/code; for protocols without ports, 0;
    TCP's flags byte, 0 for other protocols; its connection's NAT, ctnat)."""
    return {family.src: src, family.dst: dst, "l4s": proto << 16 | sport, "l4d": proto << 16 | dport,
            "tcpflags": tcp_flags if proto == 6 else 0, "iif": iif, "oif": oif, "ctnat": ctnat}
