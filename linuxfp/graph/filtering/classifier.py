"""A classifier whose cost per packet does not grow with the rule count:
recursive flow classification over the program's boxes. Pure.

Phase 1, per field: the values every box can tell apart fall into classes
(for an address field, the longest rule prefix containing the address
decides which rules' predicates hold, so an LPM trie holding exactly the rule
prefixes maps an address to its class). Each class stands for the set of
boxes whose predicate on that field holds, as a bit vector.
Phase 2, pairwise: (src, dst), (l4s, l4d), that with tcpflags, (iif, oif),
then the addresses with the transport fields, then that with the
interfaces: each pair of classes maps to the class of the intersection of
their bit vectors. The last class is the exact set of boxes
the packet lies in, so its verdict (program.verdict) is computed here, once,
by the same evaluator the tests check against Linux.

A field no box tells apart is unused: the datapath skips its lookup, and a
pair with one unused side passes the other side's class through unchanged.

iptables' and ip6tables' rules make one classifier each; only the address
fields differ (predicates.Family). The generation says which family it is,
so both live side by side in the datapath's shared tables.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from .predicates import FIELDS, FIELDS6, IPV4, IPV6, WIDTH
from .program import Program, bit_indexes, verdict_and_counted

# Phase-2 nodes (bpf_modules/filter.h): node id, left, right, as positions
# in a family's fields (src, dst, l4s, l4d, tcpflags, iif, oif), in the
# order they are computed.
PAIRS = ((1, (0,), (1,)), (2, (2,), (3,)), (7, (2, 3), (4,)), (3, (5,), (6,)), (4, (0, 1), (2, 3, 4)),
         (5, (0, 1, 2, 3, 4), (5, 6)))
VERDICT_NODE = 6
# The generation's low bits (filter.h's LFP_FLT_*): the fields looked up ...
FIELD_BIT = {"src": 1 << 0, "src6": 1 << 0, "dst": 1 << 1, "dst6": 1 << 1, "l4s": 1 << 2, "l4d": 1 << 3,
             "iif": 1 << 4, "oif": 1 << 5, "tcpflags": 1 << 6}
assert set(FIELD_BIT) == set(FIELDS) | set(FIELDS6)
# ... and whether the datapath looks the packet up in the kernel's
# conntrack table first (Program.stateful; LFP_FLT_CT).
CONNTRACK_BIT = 1 << 7
USED_MASK = (CONNTRACK_BIT << 1) - 1
# Set in the generation of ip6tables' classifier, never in iptables'.
FAMILY_BIT = {IPV4.name: 0, IPV6.name: USED_MASK + 1}
# A generation's bits above these are its digest (never all zero, so no
# generation is 0, "none", or LFP_FLT_OPEN).
GENERATION_LOW = (USED_MASK << 1) | 1
LPM_FIELDS = ("src", "dst", "src6", "dst6", "l4s", "l4d", "tcpflags")
MAX_SALTS = 16
MAX_PAIR_ENTRIES = 1 << 20


class TooLarge(ValueError):
    pass


@dataclass(frozen=True)
class Classifier:
    generation: int                                   # 32 bits, never 0; low bits: `used`, the family
    used: int                                         # FIELD_BIT of the fields looked up, CONNTRACK_BIT
    prefixes: tuple[tuple[str, tuple[tuple[int, int, int], ...]], ...]   # field -> (value, length, class)
    interfaces: tuple[tuple[int, int, int], ...]      # ifindex, iif class, oif class
    pairs: tuple[tuple[int, int, int, int], ...]      # node, left, right, class
    verdicts: tuple[tuple[int, int, int], ...]        # class, verdict, rule index (or -1)
    # per class (its index): the counters Linux adds a packet of it to when
    # the fast path decides it (program.verdict_and_counted): what
    # `linuxfp stats` attributes the datapath's per-class counts to
    counted: tuple[tuple[int, ...], ...] = ()
    fields: tuple[str, ...] = FIELDS                  # its family's (predicates.Family.fields)

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
    named (a digest). Two digests collide once in 2^24, and the datapath
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


def build_classifier(program: Program, ifindexes, book: GenerationBook | None = None) -> Classifier:
    """`book`: the generations given so far (GenerationBook); without one,
    the contents' first candidate."""
    everything = (1 << len(program.boxes)) - 1
    fields = program.family.fields
    field_classes: dict[str, list[int]] = {}
    prefixes = []
    interface_classes = {}
    for name in fields:
        bits_of_node = _field_nodes(program, name)
        if name in LPM_FIELDS:
            classes, entries = _dedupe_nodes(bits_of_node)
            prefixes.append((name, tuple(entries)))
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
    level = {(i,): (field_classes[name], bool(used & FIELD_BIT[name])) for i, name in enumerate(fields)}
    pairs = []
    for node, left, right in PAIRS:
        (lbits, lused), (rbits, rused) = level[left], level[right]
        if lused and rused:
            # Class 0 is the empty set, and the datapath reads a missing pair
            # as class 0: only pairs that share a box are stored.
            merged, seen = [0], {0: 0}
            by_box: dict[int, list[int]] = {}
            for j, b in enumerate(rbits):
                for box in bit_indexes(b):
                    by_box.setdefault(box, []).append(j)
            for i, a in enumerate(lbits):
                partners = sorted({j for box in bit_indexes(a) for j in by_box.get(box, ())})
                for j in partners:
                    bits = a & rbits[j]
                    cls = seen.get(bits)
                    if cls is None:
                        cls = seen[bits] = len(merged)
                        merged.append(bits)
                    pairs.append((node, i, j, cls))
                if len(pairs) > MAX_PAIR_ENTRIES:
                    raise TooLarge(f"more than {MAX_PAIR_ENTRIES} pairs of classes for "
                                   f"{'+'.join(fields[i] for i in left)} / {'+'.join(fields[i] for i in right)}")
            level[left + right] = (merged, True)
        elif lused:
            level[left + right] = ([a & rbits[0] for a in lbits], True)
        elif rused:
            level[left + right] = ([lbits[0] & b for b in rbits], True)
        else:
            level[left + right] = ([lbits[0] & rbits[0]], False)
    final, _ = level[tuple(range(len(fields)))]
    decided = [verdict_and_counted(program, bits & everything) for bits in final]
    verdicts = tuple((cls, decision, rule) for cls, (decision, rule, _) in enumerate(decided))
    counted = tuple(trail for _, _, trail in decided)
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
            digest = int.from_bytes(hashlib.blake2b(body + salt.to_bytes(1, "big") * bool(salt),
                                                    digest_size=4).digest(), "big")
            yield (digest & ~GENERATION_LOW & 0xFFFFFFFF or GENERATION_LOW + 1) | FAMILY_BIT[program.family.name] | used

    if book is None:
        generation = next(candidates())
    else:
        generation = book.choose(hashlib.blake2b(body, digest_size=16).digest(), candidates())
    return Classifier(generation, used, tuple(prefixes), interfaces, tuple(pairs), verdicts, counted, fields)


def _field_nodes(program: Program, name: str) -> dict[tuple[int, int], int]:
    """For the root prefix and every prefix a box names on this field: the
    boxes whose predicate holds for a value whose longest named prefix it is."""
    width = WIDTH[name]
    no_inside = 0
    inside: dict[tuple[int, int], int] = {}
    outside: dict[tuple[int, int], int] = {}
    for box_id, box in enumerate(program.boxes):
        pred = box.get(name)
        bit = 1 << box_id
        if pred.inside is None:
            no_inside |= bit
        else:
            for p in pred.inside:
                inside[p] = inside.get(p, 0) | bit
        for p in pred.outside:
            outside[p] = outside.get(p, 0) | bit
    atoms = sorted(set(inside) | set(outside) | {(0, 0)}, key=lambda p: (p[0] >> (width - p[1]) << (width - p[1]), p[1]))
    nodes: dict[tuple[int, int], int] = {}
    stack: list[tuple[tuple[int, int], int, int]] = []   # prefix, inside so far, outside so far
    for atom in atoms:
        while stack and not _within(atom, stack[-1][0], width):
            stack.pop()
        ins = (stack[-1][1] if stack else 0) | inside.get(atom, 0)
        outs = (stack[-1][2] if stack else 0) | outside.get(atom, 0)
        stack.append((atom, ins, outs))
        nodes[atom] = (no_inside | ins) & ~outs
    return nodes


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
            level[left + right] = pairs.get((node, level[left], level[right]), 0)
        else:
            level[left + right] = level[left] if lu else level[right] if ru else 0
    return classifier.verdict_index[level[tuple(range(len(fields)))]]
