"""A classifier whose cost per packet does not grow with the rule count:
recursive flow classification over the program's boxes. Pure.

Phase 1, per field: the values every box can tell apart fall into classes
(for an address field, the longest rule prefix containing the address
decides which rules' predicates hold, so an LPM trie holding exactly the rule
prefixes maps an address to its class). Each class stands for the set of
boxes whose predicate on that field holds, as a bit vector.
Phase 2, pairwise: (src, dst), (l4s, l4d), that with tcpflags, that with
ctnat, (iif, oif), then the addresses with the transport fields, then that
with the interfaces: each pair of classes maps to the class of the intersection of
their bit vectors, without the boxes no packet of the class can reach
(_Shadows: the rules after one that ends its chain and that the class's
packets all match). The last class is the set of boxes the packet lies in
that its rules' evaluation can look at, so its verdict (program.verdict)
is computed here, once, by the same evaluator the tests check against
Linux.

A field no box tells apart is unused: the datapath skips its lookup, and a
pair with one unused side passes the other side's class through unchanged.

iptables' and ip6tables' rules make one classifier each; only the address
fields differ (predicates.Family). The generation says which family it is,
so both live side by side in the datapath's shared tables.

A change of ipset members alone (the same rules, boxes that differ only in
the prefixes of LPM fields) is patched into the classifier instead
(patch_classifier): when every changed prefix is a leaf of its field's
trie (no other prefix of any box lies within it) and its new set of boxes
is already a class of that field, only its LPM entry changes — the phase-2
tables, the verdicts and the generation stay, and a fresh epoch (each
build and each patch draws one) tells the datapath's cached verdicts
apart. Anything else is built anew.
"""
from __future__ import annotations

import bisect
import hashlib
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property

from .predicates import FIELDS, FIELDS6, IPV4, IPV6, WIDTH
from .program import DROP_EARLY, ENDS_CHAIN, Program, bit_indexes, verdict_and_counted

# Phase-2 nodes (bpf_modules/filter.h): node id, left, right, as positions
# in a family's fields (src, dst, l4s, l4d, tcpflags, ctnat, iif, oif), in
# the order they are computed.
PAIRS = ((1, (0,), (1,)), (2, (2,), (3,)), (7, (2, 3), (4,)), (8, (2, 3, 4), (5,)), (3, (6,), (7,)),
         (4, (0, 1), (2, 3, 4, 5)), (5, (0, 1, 2, 3, 4, 5), (6, 7)))
VERDICT_NODE = 6
# The generation's low bits (filter.h's LFP_FLT_*): the fields looked up ...
FIELD_BIT = {"src": 1 << 0, "src6": 1 << 0, "dst": 1 << 1, "dst6": 1 << 1, "l4s": 1 << 2, "l4d": 1 << 3,
             "iif": 1 << 4, "oif": 1 << 5, "tcpflags": 1 << 6, "ctnat": 1 << 9}
assert set(FIELD_BIT) == set(FIELDS) | set(FIELDS6)
# ... and whether the datapath takes only packets of established
# connections, looked up in the kernel's conntrack table (Program.stateful;
# LFP_FLT_CT).
CONNTRACK_BIT = 1 << 7
# ... and whether connections with NAT are classified too (Program.translated;
# LFP_FLT_NAT: the conntrack node takes them).
NAT_BIT = 1 << 8
# ... and whether a hook before conntrack's drops some class's packets
# (program.DROP_EARLY; LFP_FLT_CT_LATE: the conntrack node leaves a
# connection's refresh for after the verdict).
LATE_BIT = 1 << 10
USED_MASK = (LATE_BIT << 1) - 1
# Set in the generation of ip6tables' classifier, never in iptables'.
FAMILY_BIT = {IPV4.name: 0, IPV6.name: USED_MASK + 1}
# A generation's bits above these are its digest (never all zero, so no
# generation is 0, "none", or LFP_FLT_OPEN).
GENERATION_LOW = (USED_MASK << 1) | 1
LPM_FIELDS = ("src", "dst", "src6", "dst6", "l4s", "l4d", "tcpflags", "ctnat")
# More changed prefixes than this are built anew (each is checked against the others).
MAX_PATCHED = 256
# Atoms left behind by removed members a field keeps before a patch declines:
# this many, or an eighth of its entries.
MIN_LEFTOVER = 1024
# Mixed into every generation's digest: equal contents get equal generations
# within a process, never the same one as in another (GenerationBook.retire).
_PROCESS_SALT = secrets.token_bytes(8)
MAX_SALTS = 16
MAX_PAIR_ENTRIES = 1 << 20
# Pairs of classes worked out (stored or not) before a build declines.
MAX_PAIR_WORK = 1 << 23
# The right class of a left class's default pair (filter.h's
# LFP_FLT_ANY_RIGHT): what a pair of it that is not stored joins to.
ANY_RIGHT = 0xFFFFFFFF


class TooLarge(ValueError):
    pass


@dataclass(frozen=True)
class Classifier:
    generation: int                                   # 32 bits, never 0; low bits: `used`, the family
    used: int                                         # FIELD_BIT of the fields looked up, CONNTRACK_BIT
    prefixes: tuple[tuple[str, tuple[tuple[int, int, int], ...]], ...]   # field -> (value, length, class)
    interfaces: tuple[tuple[int, int, int], ...]      # ifindex, iif class, oif class
    pairs: tuple[tuple[int, int, int, int], ...]      # node, left, right (or ANY_RIGHT), class
    verdicts: tuple[tuple[int, int, int], ...]        # class, verdict, rule index (or -1)
    # per class (its index): the counters Linux adds a packet of it to when
    # the fast path decides it (program.verdict_and_counted): what
    # `linuxfp stats` attributes the datapath's per-class counts to
    counted: tuple[tuple[int, ...], ...] = ()
    fields: tuple[str, ...] = FIELDS                  # its family's (predicates.Family.fields)
    # which contents the generation's LPM entries have: drawn afresh by each
    # build and each patch (patch_classifier), never 0
    epoch: int = 0
    # what the last patch changed, per field: (entries gone, entries new),
    # from the classifier of this generation at epoch `patched_from`
    patch: tuple[tuple[str, tuple, tuple], ...] = ()
    patched_from: int = 0
    # what patching needs (_Memo): held by one classifier at a time
    memo: object = field(default=None, compare=False, repr=False)
    # pairs of classes the build worked out, stored or not (MAX_PAIR_WORK)
    worked: int = 0

    @property
    def family(self) -> str:
        return IPV6.name if self.fields == FIELDS6 else IPV4.name

    @cached_property
    def pair_index(self) -> dict[tuple[int, int, int], int]:
        return {(n, l, r): c for n, l, r, c in self.pairs}

    @cached_property
    def verdict_index(self) -> dict[int, tuple[int, int]]:
        return {c: (v, r) for c, v, r in self.verdicts}

    def entry_count(self) -> int:
        return sum(len(p) for _, p in self.prefixes) + len(self.interfaces) + len(self.pairs) + len(self.verdicts)


class GenerationBook:
    """The generations given (the most recent `kept`) and the contents each
    named (a digest). Two digests collide once in 2^21, and the datapath
    would take two classifiers under one generation for one (cached
    verdicts, the sync's entries, counts): contents keep the generation they
    were given, and new contents get the first of their salted candidates
    that no other contents hold. Thread-safe (a metrics scrape may plan
    from another thread)."""

    def __init__(self, kept: int = 65536) -> None:
        self.kept = kept
        self._by_generation: OrderedDict[int, bytes] = OrderedDict()
        self._by_contents: dict[bytes, int] = {}
        self._lock = threading.Lock()

    def choose(self, contents: bytes, candidates: Iterator[int]) -> int:
        with self._lock:
            generation = self._by_contents.get(contents)
            if generation is None:
                generation = next((g for g in candidates if g not in self._by_generation), None)
                if generation is None:
                    raise TooLarge(f"every generation the rules' digest gives ({MAX_SALTS} salts) is taken")
            self._by_generation[generation] = contents
            self._by_generation.move_to_end(generation)
            self._by_contents[contents] = generation
            while len(self._by_generation) > self.kept:
                gone, its_contents = self._by_generation.popitem(last=False)
                if self._by_contents.get(its_contents) == gone:
                    del self._by_contents[its_contents]
            return generation

    def retire(self, generation: int) -> None:
        """`generation` no longer names the contents it was given (a patch
        changed them in place): those contents, built again, get another —
        a build under the same generation would erase what the patches added
        only after lfp_flt_cfg named it (the sync's order), and a packet in
        between would find those entries. It stays taken."""
        with self._lock:
            contents = self._by_generation.get(generation)
            if contents is not None and self._by_contents.get(contents) == generation:
                del self._by_contents[contents]
                self._by_generation[generation] = b"patched"


def build_classifier(program: Program, ifindexes, book: GenerationBook | None = None) -> Classifier:
    """`book`: the generations given so far (GenerationBook); without one,
    the contents' first candidate."""
    everything = (1 << len(program.boxes)) - 1
    fields = program.family.fields
    field_classes: dict[str, list[int]] = {}
    prefixes = []
    interface_classes = {}
    memos: dict[str, _FieldMemo] = {}
    for name in fields:
        bits_of_node, field_memo = _field_nodes(program, name)
        if name in LPM_FIELDS:
            classes, entries = _dedupe_nodes(bits_of_node)
            prefixes.append((name, tuple(entries)))
            if field_memo is not None:
                field_memo.entries = entries
                field_memo.class_ids = {bits: i for i, bits in enumerate(classes)}
                memos[name] = field_memo
        else:
            per_value = {index: _value_bits(bits_of_node, index, WIDTH[name]) for index in ifindexes}
            classes, ids = _dedupe_values(per_value, bits_of_node[(0, 0)])
            interface_classes[name] = ids
        field_classes[name] = classes
    used = 0
    for name in fields:
        if len(field_classes[name]) > 1:
            used |= FIELD_BIT[name]
    # An interface named by a rule may appear (or be renamed into a pattern)
    # before the classifier is rebuilt: whenever rules name interfaces, each
    # one is looked up, and one the classifier does not know misses.
    for name in program.interface_fields:
        used |= FIELD_BIT[name]
    if program.stateful:
        used |= CONNTRACK_BIT
    if program.translated:
        used |= NAT_BIT
    level = {(i,): (field_classes[name], bool(used & FIELD_BIT[name])) for i, name in enumerate(fields)}
    pairs = []
    shadows = None
    worked = 0
    for node, left, right in PAIRS:
        (lbits, lused), (rbits, rused) = level[left], level[right]
        if lused and rused:
            shadows = shadows or _Shadows(program)
            deciding = shadows.decided_by(fields[i] for i in range(len(fields)) if i not in left + right)
            join_name = f"{'+'.join(fields[i] for i in left)} / {'+'.join(fields[i] for i in right)}"
            # (known before the pairs are worked out: a large ruleset's take seconds)
            if worked + _fewest_pairs(lbits, rbits) > MAX_PAIR_WORK:
                raise TooLarge(f"more than {MAX_PAIR_WORK} pairs of classes to work out for {join_name}")
            merged, seen = [0], {0: 0}
            by_box: dict[int, list[int]] = {}
            for j, b in enumerate(rbits):
                for box in bit_indexes(b):
                    by_box.setdefault(box, []).append(j)
            for i, a in enumerate(lbits):
                # Pairs that share no box are class 0, the empty set.
                partners = sorted({j for box in bit_indexes(a) for j in by_box.get(box, ())})
                joins = {}
                met: dict[int, int] = {}     # (this left class's intersections met before)
                for j in partners:
                    both = a & rbits[j]
                    cls = met.get(both)
                    if cls is None:
                        bits = shadows.unshadowed(both, deciding)
                        cls = seen.get(bits)
                        if cls is None:
                            cls = seen[bits] = len(merged)
                            merged.append(bits)
                        met[both] = cls
                    joins[j] = cls
                pairs.extend(_stored_pairs(node, i, joins, len(rbits)))
                worked += len(partners)
                if len(pairs) > MAX_PAIR_ENTRIES:
                    raise TooLarge(f"more than {MAX_PAIR_ENTRIES} pairs of classes for {join_name}")
                if worked > MAX_PAIR_WORK:
                    raise TooLarge(f"more than {MAX_PAIR_WORK} pairs of classes to work out for {join_name}")
            level[left + right] = (merged, True)
        # (a class passed through keeps its index, so what its packets cannot
        # reach is dropped where it is joined: there the boxes deciding are
        # more, and what is dropped is at least what would have been here)
        elif lused:
            level[left + right] = ([a & rbits[0] for a in lbits], True)
        elif rused:
            level[left + right] = ([lbits[0] & b for b in rbits], True)
        else:
            level[left + right] = ([lbits[0] & rbits[0]], False)
    final, _ = level[tuple(range(len(fields)))]
    per_hook: list[dict] = [{} for _ in program.backends]
    decided = [verdict_and_counted(program, bits & everything, per_hook) for bits in final]
    verdicts = tuple((cls, decision, rule) for cls, (decision, rule, _) in enumerate(decided))
    counted = tuple(trail for _, _, trail in decided)
    # (only where a drop before conntrack can happen: the conntrack node's
    # refresh left owed costs a second lookup, at most about once per jiffy
    # and flow)
    if any(decision == DROP_EARLY for decision, _, _ in decided):
        used |= LATE_BIT
    interfaces = tuple((index, interface_classes["iif"][index], interface_classes["oif"][index])
                       for index in sorted(ifindexes))
    # Interfaces count only where rules name them: link churn must not
    # make a new generation of an unchanged classifier.
    if not used & (FIELD_BIT["iif"] | FIELD_BIT["oif"]):
        interfaces = ()
    # (counted too: a rule that only counts makes a new generation, so the
    # per-class counts of one are never attributed to another's rules; and
    # the rules as written: one edited without changing what it matches — a
    # comment — is a new rule whose kernel counter starts afresh)
    rules = tuple((r.backend, r.chain, r.position, r.text) for r in program.rules)
    body = repr((program.family.name, used, tuple(prefixes), interfaces, tuple(pairs), verdicts, counted,
                 rules)).encode()

    def candidates() -> Iterator[int]:
        for salt in range(MAX_SALTS):
            # The low bits are `used` and the family: the datapath reads them
            # in one word, so it can never pair one generation with another's
            # fields, and the two families' entries never share a key.
            # (and this process's salt: a generation an earlier process
            # patched — a --keep datapath — is not taken again for what its
            # build held; the first plan writes a generation of its own,
            # the kept one serving meanwhile)
            digest = int.from_bytes(hashlib.blake2b(_PROCESS_SALT + body + salt.to_bytes(1, "big") * bool(salt),
                                                    digest_size=4).digest(), "big")
            yield (digest & ~GENERATION_LOW & 0xFFFFFFFF or GENERATION_LOW + 1) | FAMILY_BIT[program.family.name] | used

    if book is None:
        generation = next(candidates())
    else:
        generation = book.choose(hashlib.blake2b(body, digest_size=16).digest(), candidates())
    memo = _Memo(program, tuple(sorted(ifindexes)), memos)
    built = Classifier(generation, used, tuple(prefixes), interfaces, tuple(pairs), verdicts, counted, fields,
                       epoch=fresh_epoch(), memo=memo, worked=worked)
    memo.owner = built
    return built


def _stored_pairs(node: int, left: int, joins: dict[int, int], rights: int) -> list[tuple[int, int, int, int]]:
    """The entries of a left class's pairs, `joins` its pairs that share a
    box (right -> class; the others are class 0) among `rights` right
    classes: those that share a box, or — when fewer — a default (its pair
    with ANY_RIGHT: the class most of them join to) and every pair that
    joins to another class, class 0 included. A source blocklist's class
    joins to itself with every destination: one entry, not one per
    destination. Left class 0 has no default (the datapath looks for none:
    traffic in a field's root class, or in the empty set, misses once, as
    before)."""
    if not joins:
        return []
    if left == 0:
        return [(node, left, right, cls) for right, cls in joins.items()]
    counts: dict[int, int] = {}
    for cls in joins.values():
        counts[cls] = counts.get(cls, 0) + 1
    default, most = max(counts.items(), key=lambda item: item[1])
    if 1 + rights - most >= len(joins):
        return [(node, left, right, cls) for right, cls in joins.items()]
    return [(node, left, ANY_RIGHT, default)] + [(node, left, right, joins.get(right, 0)) for right in range(rights)
                                                  if joins.get(right, 0) != default]


def _fewest_pairs(lbits: list[int], rbits: list[int]) -> int:
    """How many pairs of these classes share a box (the pairs worked out),
    at least: a left class holding a box every non-empty right class holds
    pairs with all of them."""
    full = [b for b in rbits if b]
    if not full:
        return 0
    common = full[0]
    for b in full[1:]:
        common &= b
    return sum(1 for a in lbits if a & common) * len(full) if common else 0


class _Shadows:
    """Which boxes of a phase-2 class no packet of it can reach: those of
    the rules after a rule that ends its chain (ACCEPT, DROP, the kernel's,
    RETURN, a goto) and that every packet of the class matches — one of its
    boxes is in the class and holds any value of the fields not yet combined
    — and those of a user chain no jump left in the class enters. Every
    traversal of that chain stops at that rule or before, so the rules
    after it are never looked at, nor a chain only they lead to: without
    their boxes, the class has the same verdict and the same counted rules
    (verdict_and_counted), and classes that differ only there are one. A
    blocklist of N sources and N destinations is then about 2N classes, not
    N² — and, each source's class joining to itself with every destination,
    about 2N pairs stored (_stored_pairs), though N² are worked out. Phase 1
    is left whole (patch_classifier reads its classes as built)."""

    def __init__(self, program: Program) -> None:
        # per ending box: the boxes of the rules after its rule in its chain
        self.after: dict[int, int] = {}
        self.ending = 0
        # per user chain: the jumps and gotos into it, and its own boxes;
        # per jump's box: the chain it enters
        self.into: dict[tuple[str, str], int] = {}
        self.own: dict[tuple[str, str], int] = {}
        self.target: dict[int, tuple[str, str]] = {}
        self.jumps = 0
        for backend, chain, _, indexes in program.chains:
            later = 0
            for index in reversed(indexes):
                rule = program.rules[index]
                mask = sum(1 << box for box in rule.box_ids)
                if rule.action in ENDS_CHAIN:
                    for box in rule.box_ids:
                        self.after[box] = later
                    self.ending |= mask
                if rule.jump:
                    key = (backend, rule.jump)
                    self.into[key] = self.into.get(key, 0) | mask
                    self.target.update(dict.fromkeys(rule.box_ids, key))
                    self.jumps |= mask
                later |= mask
            self.own[(backend, chain)] = later
        # per field: the ending boxes any value of it lies in (a box bound on
        # a field the classifier does not look up decides nothing)
        self.free = dict.fromkeys(program.family.fields, self.ending)
        for box in self.after:
            for name, pred in program.boxes[box].fields:
                if pred.inside is not None or pred.outside:      # (not ANY)
                    if name not in self.free:
                        self.ending &= ~(1 << box)
                    else:
                        self.free[name] &= ~(1 << box)

    def decided_by(self, unseen) -> int:
        """The ending boxes a class's packets lie in whenever the class
        holds them: those free on every field in `unseen` (the fields not
        combined yet)."""
        boxes = self.ending
        for name in unseen:
            boxes &= self.free[name]
        return boxes

    def unshadowed(self, bits: int, deciding: int) -> int:
        """`bits` without the boxes the class's deciding boxes shadow."""
        found = bits & deciding
        while found:
            low = found & -found
            gone = bits & self.after[low.bit_length() - 1]
            if gone:
                bits ^= gone
                if gone & self.jumps:
                    bits = self._unentered(bits, gone & self.jumps)
            found = (found ^ low) & bits
        return bits

    def _unentered(self, bits: int, jumps_gone: int) -> int:
        """`bits` without the boxes of the chains those jumps entered that
        no jump left in `bits` enters (and so on, down their own jumps)."""
        todo = {self.target[box] for box in bit_indexes(jumps_gone)}
        while todo:
            chain = todo.pop()
            inner = bits & self.own.get(chain, 0)
            if not inner or bits & self.into[chain]:
                continue
            bits ^= inner
            todo.update(self.target[box] for box in bit_indexes(inner & self.jumps))
        return bits


@dataclass
class _FieldMemo:
    """One field's phase 1 as built, kept for patching: the boxes each
    prefix is named inside / outside by, those with no inside predicate,
    per trie prefix ("atom") the boxes inside / outside along its path from
    the root, the atoms in (network, length) order, and (LPM fields) the
    class of each set of boxes and the entries."""
    inside: dict[tuple[int, int], int]
    outside: dict[tuple[int, int], int]
    no_inside: int
    path: dict[tuple[int, int], tuple[int, int]]
    ordered: list[tuple[int, int]]
    width: int
    class_ids: dict[int, int] = field(default_factory=dict)
    entries: list[tuple[int, int, int]] = field(default_factory=list)
    # atoms no box names any more, kept with their parent's class (patches
    # never erase): a build drops them, so past MIN_LEFTOVER a patch declines
    leftover: int = 0
    # one object per distinct set of boxes and path (wide ints: few distinct
    # values, however many atoms hold them)
    shared: dict = field(default_factory=dict)


@dataclass
class _Memo:
    program: Program
    ifindexes: tuple[int, ...]
    fields: dict[str, _FieldMemo]
    owner: object = None      # the classifier it describes: patching moves it on


def patch_classifier(old: Classifier, program: Program, ifindexes,
                     book: GenerationBook | None = None) -> Classifier | None:
    """`old` for `program`, when it differs from the program `old` was made
    for only in LPM fields' prefixes that can be patched (the module's
    docstring): the same generation, classes and verdicts, new LPM entries
    and epoch. None: build it anew. `book`: the generations given, where
    the patched one is retired (GenerationBook.retire)."""
    with _PATCHING:      # (a memo is patched by one thread at a time, and moves on)
        try:
            patched = _patched(old, program, ifindexes)
        except Exception:   # noqa: BLE001 - whatever went wrong, a build is exact
            return None
    if patched is not None and patched is not old and book is not None:
        book.retire(old.generation)
    return patched


_PATCHING = threading.Lock()


def _patched(old: Classifier, program: Program, ifindexes) -> Classifier | None:
    memo = old.memo
    if not isinstance(memo, _Memo) or memo.owner is not old or memo.ifindexes != tuple(sorted(ifindexes)):
        return None
    deltas = _prefix_deltas(memo.program, program)
    if deltas is None:
        return None
    if not deltas:
        return old
    if sum(len(changes) for changes in deltas.values()) > MAX_PATCHED:
        return None
    planned = {}
    for name, changes in deltas.items():
        fm = memo.fields.get(name)
        if fm is None:
            return None
        plan = _field_patch(fm, changes)
        if plan is None:
            return None
        planned[name] = plan
    # every field can take its changes: apply them (the memo moves to the new
    # classifier; disowned until then, so one half patched is never used)
    memo.owner = None
    patch = []
    prefixes = dict(old.prefixes)
    for name, (atoms, gone, new) in planned.items():
        fm = memo.fields[name]
        _apply_field_patch(fm, atoms, gone, new)
        prefixes[name] = tuple(fm.entries)
        patch.append((name, tuple(gone), tuple(new)))
    patched = replace(old, prefixes=tuple((name, prefixes[name]) for name, _ in old.prefixes),
                      epoch=fresh_epoch(), patch=tuple(patch), patched_from=old.epoch, memo=memo)
    memo.program, memo.owner = program, patched
    return patched


def fresh_epoch() -> int:
    """An epoch no classifier had (but once in 2^32): verdicts cached under
    another — in this process or one before it (--keep), while entries were
    being written, or read in a torn lfp_flt_cfg — never match it."""
    return secrets.randbits(32) or 1


def _prefix_deltas(before: Program, after: Program):
    """Per LPM field, per prefix: the boxes that now name it inside and
    outside, as (added inside, removed inside, added outside, removed
    outside) bit masks — when the programs differ in nothing else; None
    otherwise."""
    if (before.rules != after.rules or before.chains != after.chains or before.backends != after.backends
            or before.interface_fields != after.interface_fields or before.reads_mark != after.reads_mark
            or before.stateful != after.stateful or before.family != after.family
            or before.translated != after.translated
            or len(before.boxes) != len(after.boxes)):
        return None
    deltas: dict[str, dict[tuple[int, int], list[int]]] = {}
    for box_id, (a, b) in enumerate(zip(before.boxes, after.boxes)):
        if a is b or a == b:
            continue
        if [n for n, _ in a.fields] != [n for n, _ in b.fields]:
            return None
        bit = 1 << box_id
        for (name, pa), (_, pb) in zip(a.fields, b.fields):
            if pa == pb:
                continue
            if name not in LPM_FIELDS or (pa.inside is None) != (pb.inside is None):
                return None
            changes = deltas.setdefault(name, {})
            for prefixes, slot in ((pb.inside - pa.inside if pb.inside is not None else (), 0),
                                   (pa.inside - pb.inside if pa.inside is not None else (), 1),
                                   (pb.outside - pa.outside, 2), (pa.outside - pb.outside, 3)):
                for prefix in prefixes:
                    changes.setdefault(prefix, [0, 0, 0, 0])[slot] |= bit
    return deltas


def _field_patch(fm: _FieldMemo, changes):
    """What the changes make of the field's trie: per changed prefix, its
    new (inside, outside, path, class) — an atom no box names any more
    stays, with its parent's path and class (its entry is rewritten, never
    erased: the sync erases after lfp_flt_cfg names the new epoch, and
    until then a packet would still find it); None for a prefix that never
    was one and is not now. The entries replaced and new. None when the
    field cannot be patched."""
    width = fm.width
    changed = set(changes)
    atoms, gone, new = {}, [], []
    leftover = 0
    for prefix, (add_in, drop_in, add_out, drop_out) in changes.items():
        value, length = prefix
        if length == 0 or value != _network(value, length, width):
            return None       # the root (every address) or an unnormalised prefix
        if _has_inside(fm, prefix, changed):
            return None       # another prefix's path runs through it
        inside = _shared(fm, (fm.inside.get(prefix, 0) | add_in) & ~drop_in)
        outside = _shared(fm, (fm.outside.get(prefix, 0) | add_out) & ~drop_out)
        parent = _parent(fm, prefix, changed)
        if parent is None:
            return None       # an ancestor changes too
        before = _bits(fm, fm.path[prefix]) if prefix in fm.path else None
        if not (inside or outside or before is not None):
            atoms[prefix] = None
            continue
        if not (inside or outside) and (prefix in fm.inside or prefix in fm.outside):
            leftover += 1
            if fm.leftover + leftover > max(MIN_LEFTOVER, len(fm.entries) // 8):
                return None   # enough left behind: a build drops them
        up_in, up_out = fm.path[parent]
        path = _shared(fm, (up_in | inside, up_out | outside))
        bits = _bits(fm, path)
        cls = fm.class_ids.get(bits)
        if cls is None:
            return None   # a set of boxes no class stands for: phase 2 changes
        atoms[prefix] = (inside, outside, path)
        if before is None or fm.class_ids[before] != cls:
            new.append((value, length, cls))
            if before is not None:
                gone.append((value, length, fm.class_ids[before]))
    return atoms, gone, new


def _apply_field_patch(fm: _FieldMemo, atoms, gone, new) -> None:
    key = lambda e: (e[1], e[0])     # noqa: E731  (the entries' order: length, then value)
    for entry in gone:
        i = bisect.bisect_left(fm.entries, key(entry), key=key)
        if i == len(fm.entries) or fm.entries[i] != entry:
            raise LookupError(f"{entry} is not an entry of the memo")
        del fm.entries[i]
    for entry in new:
        bisect.insort(fm.entries, entry, key=key)
    for prefix, state in atoms.items():
        if state is None:
            continue
        inside, outside, path = state
        was = prefix in fm.inside or prefix in fm.outside
        if was != bool(inside or outside) and prefix in fm.path:
            fm.leftover += 1 if was else -1
        for table, bits_ in ((fm.inside, inside), (fm.outside, outside)):
            if bits_:
                table[prefix] = bits_
            else:
                table.pop(prefix, None)
        if prefix not in fm.path:
            bisect.insort(fm.ordered, prefix)
        fm.path[prefix] = path


def _shared(fm: _FieldMemo, value):
    return fm.shared.setdefault(value, value)


def _bits(fm: _FieldMemo, path: tuple[int, int]) -> int:
    """The boxes whose predicate holds below an atom with this path."""
    return (fm.no_inside | path[0]) & ~path[1]


def _network(value: int, length: int, width: int) -> int:
    shift = width - length
    return value >> shift << shift


def _has_inside(fm: _FieldMemo, prefix: tuple[int, int], changed) -> bool:
    """Whether an atom, or another changed prefix, lies strictly within
    `prefix` (atoms are ordered by network, then length: those within
    follow it)."""
    value, length = prefix
    if length == fm.width:
        return False
    last = value + (1 << (fm.width - length)) - 1
    i = bisect.bisect_left(fm.ordered, (value, length + 1))
    if i < len(fm.ordered) and fm.ordered[i][0] <= last:
        return True
    return any(q != prefix and q[1] > length and value <= q[0] <= last for q in changed)


def _parent(fm: _FieldMemo, prefix: tuple[int, int], changed) -> tuple[int, int] | None:
    """The longest atom strictly containing `prefix` (the root at least);
    None when one of the prefixes containing it changes too."""
    value, length = prefix
    for shorter in range(length - 1, -1, -1):
        up = (_network(value, shorter, fm.width), shorter)
        if up in changed:
            return None
        if up in fm.path:
            return up
    return None


def _field_nodes(program: Program, name: str) -> tuple[dict[tuple[int, int], int], _FieldMemo | None]:
    """For the root prefix and every prefix a box names on this field: the
    boxes whose predicate holds for a value whose longest named prefix it is;
    and what patching needs of the field (None: a prefix with bits outside
    its length, which the patch's lookups by network would miss)."""
    width = WIDTH[name]
    no_inside = 0
    inside: dict[tuple[int, int], int] = {}
    outside: dict[tuple[int, int], int] = {}
    for box_id, box in enumerate(program.boxes):
        pred = box.get(name)
        bit = 1 << box_id
        # (a prefix one box names holds that box's own `bit` object: a
        # 100 000-member set makes no 100 000 copies of a wide int)
        if pred.inside is None:
            no_inside |= bit
        else:
            for p in pred.inside:
                held = inside.get(p)
                inside[p] = bit if held is None else held | bit
        for p in pred.outside:
            held = outside.get(p)
            outside[p] = bit if held is None else held | bit
    atoms = sorted(set(inside) | set(outside) | {(0, 0)}, key=lambda p: (p[0] >> (width - p[1]) << (width - p[1]), p[1]))
    nodes: dict[tuple[int, int], int] = {}
    path: dict[tuple[int, int], tuple[int, int]] = {}
    stack: list[tuple[tuple[int, int], int, int]] = []   # prefix, inside so far, outside so far
    normal = True
    shared: dict = {}       # one object per distinct path and node (few, however many atoms)
    for atom in atoms:
        while stack and not _within(atom, stack[-1][0], width):
            stack.pop()
        ins = (stack[-1][1] if stack else 0) | inside.get(atom, 0)
        outs = (stack[-1][2] if stack else 0) | outside.get(atom, 0)
        walked = shared.setdefault((ins, outs), (ins, outs))
        stack.append((atom, walked[0], walked[1]))
        node = (no_inside | ins) & ~outs
        nodes[atom] = shared.setdefault(node, node)
        path[atom] = walked
        normal = normal and atom[0] == atom[0] >> (width - atom[1]) << (width - atom[1])
    return nodes, (_FieldMemo(inside, outside, no_inside, path, atoms, width, shared=shared) if normal else None)


def _within(inner: tuple[int, int], outer: tuple[int, int], width: int) -> bool:
    if inner[1] < outer[1]:
        return False
    shift = width - outer[1]
    return (inner[0] >> shift) == (outer[0] >> shift)


def _dedupe_nodes(bits_of_node):
    """Class ids (the root's class is 0) and the LPM entries."""
    classes, ids, entries = [], {}, []
    for prefix in sorted(bits_of_node, key=lambda p: (p[1], p[0])):
        bits = bits_of_node[prefix]
        if bits not in ids:
            ids[bits] = len(classes)
            classes.append(bits)
        entries.append((prefix[0], prefix[1], ids[bits]))
    return classes, entries


def _value_bits(bits_of_node, value: int, width: int) -> int:
    best = (0, 0)
    for prefix in bits_of_node:
        if prefix[1] >= best[1] and _within((value, width), prefix, width):
            best = prefix
    return bits_of_node[best]


def _dedupe_values(per_value: dict[int, int], root_bits: int):
    classes, ids, out = [root_bits], {root_bits: 0}, {}
    for value in sorted(per_value):
        bits = per_value[value]
        if bits not in ids:
            ids[bits] = len(classes)
            classes.append(bits)
        out[value] = ids[bits]
    return classes, out


def classify(classifier: Classifier, values: dict[str, int]) -> tuple[int, int] | None:
    """What the datapath computes for a packet (verdict, rule), or None for a
    miss (it passes to the kernel): the model of bpf_modules/filter.h."""
    final = final_class(classifier, values)
    return None if final is None else classifier.verdict_index[final]


def final_class(classifier: Classifier, values: dict[str, int]) -> int | None:
    """The class the datapath finds a packet in (its verdict's and counted
    rules' index), or None for a miss."""
    cls = {}
    for name, entries in classifier.prefixes:
        if not classifier.used & FIELD_BIT[name]:
            cls[name] = 0
            continue
        best = None
        for value, length, c in entries:
            if _within((values[name], WIDTH[name]), (value, length), WIDTH[name]) and (best is None or length > best[0]):
                best = (length, c)
        cls[name] = best[1]
    ifaces = {index: (i, o) for index, i, o in classifier.interfaces}
    fields = classifier.fields
    for name, slot in (("iif", 0), ("oif", 1)):
        if not classifier.used & FIELD_BIT[name]:
            cls[name] = 0
        elif values[name] not in ifaces:
            return None
        else:
            cls[name] = ifaces[values[name]][slot]
    pairs = classifier.pair_index
    level = {(i,): cls[name] for i, name in enumerate(fields)}
    for node, left, right in PAIRS:
        lu = any(classifier.used & FIELD_BIT[fields[i]] for i in left)
        ru = any(classifier.used & FIELD_BIT[fields[i]] for i in right)
        if lu and ru:
            joined = pairs.get((node, level[left], level[right]))
            if joined is None and level[left] != 0:
                joined = pairs.get((node, level[left], ANY_RIGHT))
            level[left + right] = joined or 0
        else:
            level[left + right] = level[left] if lu else level[right] if ru else 0
    return level[tuple(range(len(fields)))]
