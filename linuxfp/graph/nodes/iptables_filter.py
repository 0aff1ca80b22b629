"""The filter node (bpf_modules/filter.h): iptables' and ip6tables' FORWARD
chains of both backends, evaluated by a classifier per family whose cost
does not grow with the rule count (linuxfp/graph/filtering/). It applies
where the namespace's netfilter configuration is within what it reproduces
(filtering/scope.py); otherwise the ingress stays on the kernel path with
the reason."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from operator import itemgetter

from linuxfp.resources import modules_dir
from linuxfp.state.ipset import NFPROTO_UNSPEC
from linuxfp.state.iptables import TOOLS

from ..filtering.addrtypes import AddressTypes, address_types
from ..filtering.classifier import (FIELD_BIT, LATE_BIT, LPM_FIELDS, PAIRS, VERDICT_NODE, Classifier, GenerationBook, TooLarge,
                                    build_classifier, patch_classifier)
from ..filtering.predicates import IPV4, IPV6, WIDTH
from ..filtering.program import Program, compile_program, link_names
from ..filtering.scope import evaluated_scope6, filter_scope, translating
from ..remember import forgotten_too, remembered
from ..tables import ARRAY, HASH, U32, CType, Table, u32
from . import Node, Series, Stage, register

OBSTACLE = "iptables_filter"
CFG, IFS, COMB = "lfp_flt_cfg", "lfp_flt_ifs", "lfp_flt_comb"
CACHE, HITS = "lfp_flt_cache", "lfp_flt_hits"
LPM_TABLE = {name: f"lfp_flt_{name}" for name in LPM_FIELDS}
assert {node for node, _, _ in PAIRS} | {VERDICT_NODE} == set(range(1, 9))   # filter.h's nodes


@dataclass(frozen=True)
class FilterPlan:
    """What the node makes of a snapshot's netfilter state: iptables' rules
    and ip6tables' (None: that family's FORWARD chains filter nothing)."""

    program: Program | None = None
    classifier: Classifier | None = None
    problem: str | None = None       # why it cannot evaluate the rules
    tracking: tuple[str, ...] = ()   # what turns connection tracking on (FilterScope.stateful)
    program6: Program | None = None
    classifier6: Classifier | None = None
    tracking6: tuple[str, ...] = ()  # (IPv6's)
    # whether routed IPv6 may reach the node (nothing else of ip6tables
    # touches it): lfp_flt_cfg then says "open" where no rule filters it
    ipv6: bool = False

    @property
    def families(self) -> tuple[tuple[Program, Classifier | None], ...]:
        return tuple((p, c) for p, c in ((self.program, self.classifier), (self.program6, self.classifier6))
                     if p is not None)


@dataclass(frozen=True)
class FilterPresence:
    """What an interface's decision reads of the plan: whether each family's
    FORWARD filters anything (and makes the kernel track connections), why
    the rules cannot be evaluated, and whether they read the mark. Asked by
    answer (filter_presence): a change of the rules' contents leaves it
    equal, and no interface's decision is then redone."""

    filters4: bool = False          # an IPv4 classifier (FORWARD filters something)
    filters6: bool = False          # an IPv6 one (not FilterPlan.ipv6: whether routed IPv6 reaches the node)
    tracking: bool = False
    tracking6: bool = False
    problem: str | None = None
    reads_mark: bool = False


def filter_presence(snapshot) -> FilterPresence:
    return remembered("filter.presence", snapshot, _filter_presence, by_answer=True)


def _filter_presence(snapshot) -> FilterPresence:
    plan = filter_plan(snapshot)
    return FilterPresence(filters4=plan.classifier is not None, filters6=plan.classifier6 is not None,
                          tracking=plan.classifier is not None and bool(plan.tracking),
                          tracking6=plan.classifier6 is not None and bool(plan.tracking6),
                          problem=plan.problem,
                          reads_mark=any(program.reads_mark for program, _ in plan.families))


class Filter(Node):
    name = "filter"
    stage = Stage.FORWARD
    header = modules_dir() / "filter.h"
    covers = frozenset({OBSTACLE})
    # (routes: -m addrtype reads the address types they make)
    # per namespace: the flow cache (whose slots hold counts not yet moved)
    # and the per-class counts, both read by `linuxfp stats`
    state_maps = (CACHE, HITS)
    # ipsets change with no event: the watch makes the datapath pass from
    # every netfilter netlink message until the sets are read again.
    watch = modules_dir() / "filter_watch.c"

    def applies(self, snapshot, link) -> bool:
        presence = filter_presence(snapshot)
        return presence.filters4 or presence.filters6

    def needs(self, snapshot, link) -> tuple[str, ...]:
        # FORWARD as the routed path meets it (a bridge port's frames to the
        # bridge included, with the bridge as -i); bridged frames skip it:
        # br_netfilter's FORWARD is bridge_filter.py's, with these tables.
        return ("router",)

    def blocker(self, snapshot, link) -> str | None:
        return filter_presence(snapshot).problem

    def hook_blocker(self, snapshot, link, hook: str) -> str | None:
        if hook == "xdp" and filter_presence(snapshot).reads_mark:
            # a frame from a veth peer keeps the mark its sender set, unseen
            return "iptables or ip6tables rules match the packet mark, which XDP cannot see"
        return None

    def tables(self, snapshot) -> tuple[Table, ...]:
        global _last_tables
        plan = filter_plan(snapshot)
        key = (plan.classifier, plan.classifier6, plan.ipv6)
        last = _last_tables
        if last is None or any(a is not b for a, b in zip(last[0], key)):
            # the same objects while the classifiers are: the sync skips them
            patched = _patched_tables(last, key) if last is not None else None
            last = _last_tables = (key, patched if patched is not None else
                                   filter_tables(plan.classifier, plan.classifier6, plan.ipv6))
        return last[1]

    def notes(self, snapshot) -> tuple[str, ...]:
        plan = filter_plan(snapshot)
        nf = snapshot.netfilter
        lines: list[str] = list(dict.fromkeys(ruleset.reading()        # (an inet table's, once for both families)
                                              for ruleset in nf.rulesets + nf.rulesets6 + nf.native.forward))
        for program, classifier in plan.families:
            tool = TOOLS[program.family.name]
            rules = [r for r in program.rules if not r.unsure_part]
            counts = ", ".join(f"{program.tool(i)} {program.entry(i)} {sum(1 for r in rules if r.backend == b)}"
                               for i, b in enumerate(program.backends))
            lines.append(f"{len(rules)} rules reached from the forward hooks ({counts or f'{tool}: none'})")
            if program.stateful:
                tracking = plan.tracking6 if program.family is IPV6 else plan.tracking
                which = ("established connections, with NAT or without (the conntrack node translates them; "
                         "--ctstate SNAT / DNAT read the entry), are classified" if program.translated else
                         "established connections without NAT are classified")
                early = ("; what a chain before conntrack drops is dropped first, its connection not refreshed"
                         if classifier is not None and classifier.used & LATE_BIT else "")
                lines.append(f"{'IPv6' if program.family is IPV6 else 'IPv4'} connection tracking on ("
                             + "; ".join(tracking) + f"): {which}, the rest go to the kernel{early}")
            if classifier is not None:
                fields = ",".join(name for name in classifier.fields if classifier.used & FIELD_BIT[name]) or "none"
                patched = f" epoch {classifier.epoch:08x} (ipset members patched in)" if classifier.patch else ""
                lines.append(f"{tool} classifier generation {classifier.generation:08x}{patched}: "
                             f"{classifier.entry_count()} entries, fields {fields}")
            elif f"not evaluated: {plan.problem}" not in lines:
                lines.append(f"not evaluated: {plan.problem}")
            mirrored = [s for s in snapshot.netfilter.ipsets
                        if s.unsupported is None and s.family in (program.family.nfproto, NFPROTO_UNSPEC)]
            if mirrored and classifier is not None:
                lines.append("ipsets compiled in: " + ", ".join(
                    f"{s.name} ({s.kind}, {len(s.prefixes) + len(s.ports) + len(s.ifaces)} members)"
                    for s in mirrored))
            for rule in program.unsupported:
                lines.append(f"to the kernel: {rule.describe()} ({'; '.join(rule.unsupported)})")
            effects = [r for r in program.rules if r.action == "kernel" and not r.unsupported]
            if effects:
                shown = ", ".join(f"{r.describe()} -j {r.target}" for r in effects[:5])
                more = f" and {len(effects) - 5} more" if len(effects) > 5 else ""
                lines.append(f"to the kernel (its effects: log, reject, ...): {shown}{more}")
        return tuple(lines)


    def publish(self, snapshot) -> dict | None:
        return attribution(filter_plan(snapshot))

    def stats(self, maps, published) -> dict | None:
        totals = fast_path_counts(maps(HITS), maps(CACHE))
        if not totals:
            return None
        return attribute(totals, published)

    def stats_lines(self, detail: dict) -> list[str]:
        lines = ["iptables and ip6tables rules: packets and bytes the fast path decided (the nft backend's -L -v "
                 "counts only the kernel's; the legacy backend's counters get these added every few seconds)"]
        if "error" in detail:
            return lines + [f"  cannot attribute them: {detail['error']}"]
        for row in detail["rules"]:
            what = (f"{row['chain']} #{row['position']}" if "position" in row
                    else f"{row['chain']} policy {row['policy']}")
            tool = row.get("tool") or f"{TOOLS[row.get('family', IPV4.name)]}-{row['backend']}"
            lines.append(f"  {tool} {what:<20} {row['packets']:>12} {row['bytes']:>14}  "
                         f"{row.get('rule', '')}".rstrip())
        earlier = detail["earlier_rulesets"]
        if earlier["packets"]:
            lines.append(f"  under earlier rulesets (not attributed): {earlier['packets']} packets, "
                         f"{earlier['bytes']} bytes")
        return lines

    def upkeep(self, maps, snapshot, memory: dict) -> None:
        give_back_legacy_counts(maps, snapshot, memory)

    def stats_series(self, detail: dict) -> list[Series]:
        if "rules" not in detail:
            return []
        series = []
        for row in detail["rules"]:
            family = row.get("family", IPV4.name)
            # the rule's text too: a position moves when rules are inserted above it
            # (raw's and mangle's PREROUTING: backend "nft raw", tool "iptables-nft -t raw")
            view = " -t " in row.get("tool", "")
            # (rows published before they named their table: an iptables view's tool says it)
            table = row.get("table") or row.get("tool", "").partition(" -t ")[2] or "filter"
            labels = (("family", "ipv6" if family == IPV6.name else "ipv4"),
                      ("backend", row["backend"].partition(" ")[0] if view else row["backend"]),
                      ("table", table), ("chain", row["chain"]),
                      ("rule", str(row["position"]) if "position" in row else "policy"),
                      ("spec", row.get("rule") or f"-P {row['chain']} {row['policy']}"))
            generation = detail.get("generation6" if family == IPV6.name else "generation") or ""
            series.append(Series("iptables_fast_path_packets", RULE_PACKETS_HELP, labels, row["packets"],
                                 epoch=generation))
            series.append(Series("iptables_fast_path_bytes", RULE_BYTES_HELP, labels, row["bytes"], epoch=generation))
        earlier = detail["earlier_rulesets"]
        # (a gauge: an earlier generation's counts leave the LRU map first)
        series.append(Series("iptables_fast_path_earlier_packets", EARLIER_HELP, (), earlier["packets"], kind="gauge"))
        return series


RULE_PACKETS_HELP = ("packets the fast path decided that Linux would have counted on this iptables or ip6tables "
                     "rule (or chain policy), this ruleset generation's (from zero when the rules change): "
                     "the nft backend's -L -v counts only the kernel's; the legacy backend's counters (iptables- "
                     "and ip6tables-legacy) have these added")
RULE_BYTES_HELP = "bytes (IP length) of linuxfp_iptables_fast_path_packets"
EARLIER_HELP = ("packets the fast path decided under earlier iptables or ip6tables rulesets of this datapath, no "
                "longer attributed to a rule (the oldest leave first)")


FILTER = register(Filter())

# filter.h's per-flow cache slot and per-class counts, as `stats` reads them
TALLY = CType("struct lfp_tally", (("packets", "Q"), ("bytes", "Q")))     # common.h
HIT_KEY = CType("struct lfp_flt_hit_key", (("gen", "I"), ("cls", "I")))
CACHED = CType("struct lfp_flt_cached", (("tally", "16s"), ("verdict", "I"), ("cls", "I"), ("epoch", "I"),
                                         ("flow", "52s")))


def fast_path_counts(hits_map, cache_map) -> dict[tuple[int, int], list[int]]:
    """(generation, class) -> [packets, bytes] the fast path decided: the
    moved counts, then those still in cache slots (read in this order, a
    slot moved in between is missed until the next read, never counted
    twice)."""
    totals: dict[tuple[int, int], list[int]] = {}

    def add(gen: int, cls: int, packets: int, size: int) -> None:
        if packets:
            entry = totals.setdefault((gen, cls), [0, 0])
            entry[0] += packets
            entry[1] += size

    if hits_map is not None:
        for key, values in hits_map.items_percpu():
            gen, cls = HIT_KEY.unpack(key)
            for value in values:
                add(gen, cls, *TALLY.unpack(value[:TALLY.size]))
    if cache_map is not None:
        read = _SLOT                  # 4 096 slots per CPU: one unpack each, no slicing
        for _, values in cache_map.items_percpu():
            for value in values:
                add(*read(value))
    return totals


def _slot_reader():
    """A reader of a cache slot's (generation, class, packets, bytes), at
    CACHED's offsets: the generation is the flow key's first member. One
    unpack per slot, whatever the members' order."""
    at = {name: offset // 8 for name, offset, _ in CACHED.layout}
    wanted = sorted([(at["flow"], "I", "gen"), (at["cls"], "I", "cls"), (at["tally"], "QQ", "tally")])
    fmt, end, names = "<", 0, []
    for offset, code, name in wanted:
        fmt += f"{offset - end}x{code}"
        end = offset + struct.calcsize("<" + code)
        names += ["packets", "bytes"] if name == "tally" else [name]
    read = struct.Struct(fmt).unpack_from
    pick = itemgetter(*(names.index(n) for n in ("gen", "cls", "packets", "bytes")))
    return lambda value: pick(read(value))


_SLOT = _slot_reader()


_last_attribution: tuple[object, dict] | None = None


def attribution(plan: FilterPlan) -> dict:
    """What attributing the fast path's counts needs, as JSON (what the
    controller publishes for `linuxfp stats`, which then reads no netfilter
    state of its own — reading ipsets would trip the filter's watch): per
    family its classifier's generation and, per class, its trail; each rule
    or policy that counts as a row; and the distinct trails of rows Linux
    adds a packet to (classifier.counted). The same object while the
    classifiers are."""
    global _last_attribution
    from ..filtering.program import policy_of

    key = (plan.classifier, plan.classifier6)
    last = _last_attribution
    if last is not None and all(a is b for a, b in zip(last[0], key)):
        return last[1]
    rows: list[dict] = []
    # per class, its trail of rows; classes share few trails (a 40-rule
    # ruleset: thousands of classes, tens of trails), so each is written once
    trails: dict[tuple[int, ...], int] = {}
    published: dict = {"generation": None, "generation6": None, "classes": [], "classes6": []}
    for program, classifier in plan.families:
        if classifier is None:
            continue
        family = program.family.name
        row_of: dict[int, int] = {}
        for position, backend in enumerate(program.backends):
            for chain_backend, chain, _, indexes in program.chains:
                if chain_backend != backend:
                    continue
                for index in indexes:
                    rule = program.rules[index]
                    if rule.unsure_part:
                        continue        # (decides nothing in the fast path, so counts nothing)
                    row_of[index] = len(rows)
                    rows.append({"family": family, "backend": backend, "tool": program.tool(position),
                                 "table": program.table(position), "chain": chain, "position": rule.position,
                                 "rule": rule.text})
            row_of[policy_of(position)] = len(rows)
            entry = program.entry(position)
            rows.append({"family": family, "backend": backend, "tool": program.tool(position),
                         "table": program.table(position), "chain": entry, "policy": program.chain(backend, entry)[2]})
        suffix = "6" if program.family is IPV6 else ""
        published["generation" + suffix] = f"{classifier.generation:08x}"
        published["classes" + suffix] = [
            trails.setdefault(tuple(row_of[item] for item in items if item in row_of), len(trails))
            for items in classifier.counted]
    published["rows"] = rows
    published["trails"] = [list(trail) for trail in trails]
    _last_attribution = (key, published)
    return published


def attribute(totals: dict[tuple[int, int], list[int]], published: dict | None) -> dict:
    """Per rule (and built-in chain policy) of the rulesets `published`
    describes (attribution()), the packets and bytes the fast path decided
    that Linux would have added to its counter; counts of other generations
    (the rules changed since) in one sum."""
    published = published or {}
    rows, trails = published.get("rows", []), published.get("trails", [])
    classes_of = {published[name]: published.get(classes, [])
                  for name, classes in (("generation", "classes"), ("generation6", "classes6"))
                  if published.get(name) is not None}
    per_row: dict[int, list[int]] = {}
    earlier = [0, 0]
    for (gen, cls), (packets, size) in totals.items():
        classes = classes_of.get(f"{gen:08x}")
        if classes is None or cls >= len(classes):
            earlier[0] += packets
            earlier[1] += size
            continue
        for row in trails[classes[cls]]:
            entry = per_row.setdefault(row, [0, 0])
            entry[0] += packets
            entry[1] += size
    counted = [{**rows[row], "packets": per_row[row][0], "bytes": per_row[row][1]}
               for row in range(len(rows)) if row in per_row]
    return {"generation": published.get("generation"), "generation6": published.get("generation6"),
            "rules": counted, "earlier_rulesets": {"packets": earlier[0], "bytes": earlier[1]}}


def _legacy(backend: str) -> bool:
    """Whether a program backend's rules are iptables-legacy's (its filter
    table's, or a raw or mangle view's: "legacy raw")."""
    return backend.partition(" ")[0] == "legacy"


def give_back_legacy_counts(maps, snapshot, memory: dict) -> None:
    """Add to iptables-legacy's counters, rule by rule and table by table
    (filter's FORWARD, raw's and mangle's PREROUTING), what the fast path
    decided since the last time (state/xt_counters.py): `iptables-legacy -L
    -v` then counts as Linux alone would. `memory` holds, per table and
    (generation, class) still in the counts map, what was given back, for
    the map it was read from (a new map starts from nothing): a ruleset that
    comes back (the same rules, the same generation) gives only what came
    since — a table that left the rules meanwhile included — and a table
    whose add failed gets its share later without the others getting theirs
    twice. A count that reads lower than what was given (a cache slot moved
    by another CPU while it was read; an entry evicted and made again) is
    given once it reads higher. What was counted under a ruleset the rules
    have since left (at most one interval's worth) stays in `linuxfp stats`
    only, unless those rules come back."""
    from linuxfp.state.xt_counters import RETRIED_ERRNOS, TableChanged, add_counters

    plan = filter_plan(snapshot)
    nf = snapshot.netfilter
    # per family whose rules the fast path decides with: its legacy ruleset,
    # and the tables its program evaluates of it
    legacy, tables = {}, {}
    for program, classifier in plan.families:
        ruleset = next((r for r in (nf.rulesets6 if program.family is IPV6 else nf.rulesets)
                        if r.backend == "legacy"), None)
        evaluated = {program.table(i) for i, backend in enumerate(program.backends) if _legacy(backend)}
        if classifier is not None and ruleset is not None and evaluated:
            legacy[classifier.generation] = ruleset
            tables[classifier.generation] = sorted(evaluated)
    hits = maps(HITS)
    if not legacy or hits is None:
        return
    if memory.get("map") != hits.id or not isinstance(memory.get("given"), dict):
        memory.clear()
        memory.update({"map": hits.id, "given": {}})
    given: dict[str, list[int]] = memory["given"]
    published = attribution(plan)
    counted = fast_path_counts(hits, maps(CACHE))
    due: dict[tuple[str, int, int], list[int]] = {}
    for (gen, cls), (packets, size) in counted.items():
        for table in tables.get(gen, ()):
            before = given.get(_given_key(table, gen, cls), [0, 0])
            if packets > before[0] and size >= before[1]:
                due[(table, gen, cls)] = [packets - before[0], size - before[1]]
    failure = None
    for generation, ruleset in legacy.items():
        for table in tables[generation]:
            totals = {(gen, cls): value for (t, gen, cls), value in due.items() if t == table and gen == generation}
            additions = {(row["chain"], row.get("position")): (row["packets"], row["bytes"])
                         for row in attribute(totals, published)["rules"]
                         if _legacy(row["backend"]) and row["table"] == table and row["family"] == ruleset.family
                         } if totals else {}
            if not additions:
                continue
            try:
                add_counters(ruleset, table, additions)
            except (TableChanged, OSError) as exc:
                # (the tables changed since they were read, or the kernel
                # refused the add because a replace changed the entry count
                # in between, or the table went) read again at the next poll:
                # given then, or left to a new generation; any other refusal
                # is reported once this poll's bookkeeping is saved
                if isinstance(exc, OSError) and exc.errno not in RETRIED_ERRNOS:
                    failure = failure or exc
                for pair in totals:
                    due.pop((table, *pair), None)
    # what the map still holds, whatever table it was given to (one that
    # left the rules may come back with them), and what was given now
    remembered = {name: value for name, value in given.items() if _given_pair(name) in counted}
    remembered.update((_given_key(table, gen, cls), counted[(gen, cls)]) for table, gen, cls in due)
    memory["given"] = remembered
    if failure is not None:
        raise failure


def _given_key(table: str, gen: int, cls: int) -> str:
    """give_back_legacy_counts' memory key (JSON: a string; the filter
    table's as it was before other tables were given to)."""
    return f"{gen}:{cls}" if table == "filter" else f"{table}:{gen}:{cls}"


def _given_pair(key: str) -> tuple[int, int]:
    gen, cls = key.split(":")[-2:]
    return int(gen), int(cls)


# The last plan: its netfilter state (by identity), the links it depends on
# (their (ifindex, name) pairs, or None when no rule names an interface),
# and the plan. Link events are frequent (an XDP attach is one) and a plan
# can take seconds for tens of thousands of rules: it is rebuilt only when
# something it reads changed.
_last: tuple[object, object, object, FilterPlan] | None = None
_last_tables: tuple[object, tuple[Table, ...]] | None = None


def filter_plan(snapshot) -> FilterPlan:
    """The compiled rules for this snapshot (every ingress asks: by answer,
    so an interface's decision is not redone for a link event that leaves
    the rules' meaning as it was)."""
    return remembered("filter.plan", snapshot, _filter_plan, by_answer=True)


def _filter_plan(snapshot) -> FilterPlan:
    global _last
    nf, links = snapshot.netfilter, snapshot.links
    # (equal but not the same object: a re-read, e.g. `linuxfp stats` asking
    # again; the controller hands unchanged state on as the same object.
    # Read once: a metrics scrape may ask from another thread.)
    last = _last
    types = _address_types(snapshot) if remembered("filter.reads_address_types", snapshot,
                                                   _reads_address_types) else None
    if last is not None and (last[0] is nf or last[0] == nf) and last[2] == types:
        names = link_names(links) if last[1] is not None else None
        if names == last[1]:
            return last[3]
    plan = _plan(nf, links, types, last[3] if last is not None else None)
    names = link_names(links) if any(program.interface_fields for program, _ in plan.families) else None
    _last = (nf, names, types, plan)
    return plan


def _address_types(snapshot) -> AddressTypes:
    """addrtypes.address_types(), again only when the routes changed."""
    return remembered("filter.address_types", snapshot, _address_types_of)


def _address_types_of(snapshot) -> AddressTypes:
    return address_types(snapshot.routes)


def _reads_address_types(snapshot) -> bool:
    """Whether an iptables rule has -m addrtype."""
    return any(m.module == "addrtype" for ruleset in snapshot.netfilter.rulesets for table in ruleset.tables
               for chain in table.chains for rule in chain.rules for m in rule.matches)


@forgotten_too
def _forget_memos() -> None:
    global _last, _last_tables, _last_attribution
    _last = _last_tables = _last_attribution = None


def _plan(netfilter, links, addrtypes: AddressTypes | None = None, previous: FilterPlan | None = None) -> FilterPlan:
    """`previous`: the plan before, whose classifiers a change of ipset
    members alone is patched into (classifier.patch_classifier)."""
    scope, scope6 = filter_scope(netfilter), evaluated_scope6(netfilter)
    filters6 = scope6 is not None and scope6.filters_forward
    if not scope.filters_forward and not filters6:
        return FilterPlan()
    if scope.uncovered:
        return FilterPlan(problem=scope.uncovered[0])
    ipv6 = scope6 is not None
    tracking6 = scope6.stateful if scope6 is not None else ()
    program = program6 = classifier = classifier6 = None
    try:
        if scope.filters_forward:
            program = compile_program(scope.forward, links, stateful=bool(scope.stateful), ipsets=netfilter.ipsets,
                                      addrtypes=addrtypes, nat=translating(netfilter) is not None)
            classifier = _classifier(program, links, previous.classifier if previous is not None else None)
        if filters6:
            program6 = compile_program(scope6.forward, links, stateful=bool(tracking6), ipsets=netfilter.ipsets,
                                       family=IPV6)
            classifier6 = _classifier(program6, links, previous.classifier6 if previous is not None else None)
        try:
            check_capacity(classifier, classifier6)
        except TooLarge:
            if not any(c is not None and c.patch for c in (classifier, classifier6)):
                raise
            # what patches left behind may be what does not fit: built anew
            classifier = _classifier(program, links) if program is not None else None
            classifier6 = _classifier(program6, links) if program6 is not None else None
            check_capacity(classifier, classifier6)
    except TooLarge as exc:
        return FilterPlan(program, problem=f"the rules need too large a classifier ({exc})", tracking=scope.stateful,
                          program6=program6, ipv6=ipv6, tracking6=tracking6)
    return FilterPlan(program, classifier, tracking=scope.stateful, program6=program6, classifier6=classifier6,
                      ipv6=ipv6, tracking6=tracking6)


# The generations this process gave: a new classifier never takes one that
# named other contents. What a datapath kept from an earlier process
# (--keep) or from further back than the book keeps is not known: such a
# generation could come back for other contents once in 2^21 (a cache slot
# still holding one would then give its verdict to a flow of the same key).
_GENERATIONS = GenerationBook()


def _classifier(program: Program, links, previous: Classifier | None = None) -> Classifier:
    ifindexes = [link.index for link in links] if program.interface_fields else []
    patched = patch_classifier(previous, program, ifindexes, _GENERATIONS) if previous is not None else None
    return patched if patched is not None else build_classifier(program, ifindexes, _GENERATIONS)


# max_entries of the maps in filter.h (tests/test_filter_datapath.py checks
# them against the compiled object). Two generations of each family live
# side by side while one replaces the other, so both families' current
# generations together may fill half.
CAPACITY = {"lfp_flt_src": 262144, "lfp_flt_dst": 262144, "lfp_flt_src6": 262144, "lfp_flt_dst6": 262144,
            "lfp_flt_l4s": 262144, "lfp_flt_l4d": 262144, "lfp_flt_tcpflags": 262144, "lfp_flt_ctnat": 262144,
            IFS: 8192, COMB: 2097152}


def check_capacity(*classifiers: Classifier | None) -> None:
    """TooLarge when the generations would not fit beside others."""
    counts = dict.fromkeys(CAPACITY, 0)
    for classifier in classifiers:
        if classifier is None:
            continue
        for name, entries in classifier.prefixes:
            counts[LPM_TABLE[name]] += len(entries)
        counts[IFS] += len(classifier.interfaces)
        counts[COMB] += len(classifier.pairs) + len(classifier.verdicts)
    for table, count in counts.items():
        if count > CAPACITY[table] // 2:
            raise TooLarge(f"{count} entries for {table}, which holds {CAPACITY[table] // 2} per generation")


# filter.h's keys and values
LPM_KEY = CType("struct lfp_flt_lpm_key", (("prefixlen", "I"), ("gen", "I"), ("value", "4s")))
LPM6_KEY = CType("struct lfp_flt_lpm6_key", (("prefixlen", "I"), ("gen", "I"), ("value", "16s")))
IF_KEY = CType("struct lfp_flt_if_key", (("gen", "I"), ("ifindex", "I")))
IF_CLASSES = CType("struct lfp_flt_if_classes", (("in", "I"), ("out", "I")))
PAIR_KEY = CType("struct lfp_flt_pair_key", (("gen", "I"), ("node", "I"), ("left", "I"), ("right", "I")))
CFG_VALUE = CType("struct lfp_flt_cfg", (("gen", "I"), ("epoch", "I")))


def lpm_key(generation: int, name: str, value: int, length: int) -> bytes:
    """struct lfp_flt_lpm_key (an IPv6 address: lfp_flt_lpm6_key): the
    generation, then the value as on the wire (an address, or protocol and
    port / ICMP type or code, padded)."""
    ctype, size = (LPM6_KEY, 16) if WIDTH[name] == 128 else (LPM_KEY, 4)
    return ctype.pack(32 + length, generation, (value << (size * 8 - WIDTH[name])).to_bytes(size, "big"))


def pair_key(generation: int, node: int, left: int, right: int) -> bytes:
    return PAIR_KEY.pack(generation, node, left, right)


# lfp_flt_cfg's value for a family whose FORWARD chains let every packet
# through (LFP_FLT_OPEN; no generation is below 0x1000); its index per family
OPEN = 1
CFG_INDEX = {IPV4.name: 0, IPV6.name: 1}


def filter_tables(classifier: Classifier | None, classifier6: Classifier | None = None,
                  ipv6: bool = False) -> tuple[Table, ...]:
    """The node's maps, iptables' classifier and ip6tables' side by side;
    lfp_flt_cfg last, so it names a generation only once all of its entries
    are written (the sync writes tables in this order and erases the old
    generation's entries after). A family without a classifier is open
    (the node applies only while one family's rules filter), except IPv6
    where it may not be routed (`ipv6` False): left unconfigured there."""
    lpm: dict[str, set] = {name: set() for name in LPM_FIELDS}
    ifs, comb = set(), set()
    for current in (classifier, classifier6):
        if current is None:
            continue
        gen, used = current.generation, current.used
        for name, entries in current.prefixes:
            if used & FIELD_BIT[name]:
                lpm[name].update((lpm_key(gen, name, value, length), u32(cls)) for value, length, cls in entries)
        if used & (FIELD_BIT["iif"] | FIELD_BIT["oif"]):
            ifs.update((IF_KEY.pack(gen, index), IF_CLASSES.pack(i, o)) for index, i, o in current.interfaces)
        comb.update((pair_key(gen, node, left, right), u32(cls)) for node, left, right, cls in current.pairs)
        comb.update((pair_key(gen, VERDICT_NODE, cls, 0), u32(verdict | (rule + 1) << 2))
                    for cls, verdict, rule in current.verdicts)
    return tuple(Table(LPM_TABLE[name], FILTER.name, LPM6_KEY if WIDTH[name] == 128 else LPM_KEY, U32,
                       frozenset(lpm[name]), kind=HASH, describe=f"filter classes of {name} prefixes")
                 for name in LPM_FIELDS) + (
        Table(IFS, FILTER.name, IF_KEY, IF_CLASSES, frozenset(ifs), kind=HASH,
              describe="filter classes of interfaces as -i / -o"),
        Table(COMB, FILTER.name, PAIR_KEY, U32, frozenset(comb), kind=HASH,
              describe="filter classes of class pairs; verdicts"),
        _cfg_table(classifier, classifier6, ipv6),
    )


def _cfg_table(classifier: Classifier | None, classifier6: Classifier | None, ipv6: bool) -> Table:
    """lfp_flt_cfg: per family its classifier's generation and epoch, open
    (no classifier), or nothing (IPv6 not routed; no classifier at all)."""
    cfg = {CFG_INDEX[IPV4.name]: (OPEN, 0), CFG_INDEX[IPV6.name]: (OPEN if ipv6 else 0, 0)}
    for current in (classifier, classifier6):
        if current is not None:
            cfg[CFG_INDEX[current.family]] = (current.generation, current.epoch)
    if classifier is None and classifier6 is None:
        cfg = {}        # the node does not apply
    return Table(CFG, FILTER.name, U32, CFG_VALUE,
                 frozenset((u32(index), CFG_VALUE.pack(gen, epoch)) for index, (gen, epoch) in cfg.items() if gen),
                 kind=ARRAY, describe="current filter generation per family (its low bits: fields used), or 1: "
                                      "open; and the epoch of its address prefixes' contents")


def _patched_tables(last, key) -> tuple[Table, ...] | None:
    """The tables of `key`'s classifiers made from the `last` ones where
    each classifier is the last one or a patch of it (classifier.py's
    patch_classifier: only LPM entries changed): those entries swapped in
    their tables, lfp_flt_cfg with the new epoch. None: build them anew."""
    (old4, old6, old_ipv6), tables = last
    if key[2] != old_ipv6:
        return None
    changes: dict[str, tuple[set, set]] = {}
    for old, new in zip((old4, old6), key[:2]):
        if new is old:
            continue
        if old is None or new is None or new.generation != old.generation or new.patched_from != old.epoch \
                or not new.patch:
            return None
        for name, gone, added in new.patch:
            if not new.used & FIELD_BIT[name]:
                continue        # (a field no lookup reads has no entries)
            pairs = changes.setdefault(LPM_TABLE[name], (set(), set()))
            pairs[0].update((lpm_key(new.generation, name, v, length), u32(c)) for v, length, c in gone)
            pairs[1].update((lpm_key(new.generation, name, v, length), u32(c)) for v, length, c in added)
    out = []
    for table in tables:
        if table.name in changes:
            gone, added = changes[table.name]
            table = table.changed(frozenset(gone), frozenset(added))
        elif table.name == CFG:
            table = _cfg_table(key[0], key[1], key[2])
        out.append(table)
    return tuple(out)
