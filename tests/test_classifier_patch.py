"""ipset members changed alone are patched into the classifier
(classifier.patch_classifier): the same generation and phase-2 tables, the
changed LPM entries (rewritten, never erased) and a fresh epoch — and every
packet classified as a
classifier built anew from the same rules and sets classifies it, as the
reference evaluator (program.verdict) says. Where a patch cannot be exact
(a prefix with others inside it, a set of boxes no class stands for, rules
that changed) it declines and the classifier is built anew."""
from __future__ import annotations

import random

from linuxfp.graph.filtering.classifier import build_classifier, classify, patch_classifier
from linuxfp.graph.filtering.program import compile_program, matched_boxes, packet_fields, verdict
from linuxfp.graph.filtering.scope import filter_scope
from linuxfp.graph.nodes import iptables_filter
from linuxfp.state.iptables import parse_save
from linuxfp.state.model import IpSet, NetfilterState

RULES = ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
         "-A FORWARD -s 198.18.0.0/16 -m set --match-set block dst -j DROP\n"
         "-A FORWARD -m set --match-set block src -j DROP\n"
         "-A FORWARD -p udp --dport 53 -j ACCEPT\n"
         "-A FORWARD -m set ! --match-set allow dst -p udp -j DROP\n"
         "-A FORWARD -d 203.0.113.0/24 -j DROP\nCOMMIT\n")
PROGRAM_RULESET = parse_save(RULES, "nft")
FORWARD = filter_scope(NetfilterState(active=True, detail="test", rulesets=(PROGRAM_RULESET,),
                                      tables=("nft:ip filter",))).forward


def _ip(text: str) -> int:
    return int.from_bytes(bytes(map(int, text.split("."))), "big")


def _program(block, allow):
    sets = (IpSet("block", "hash:net", tuple(sorted(block))), IpSet("allow", "hash:ip", tuple(sorted(allow))))
    return compile_program(FORWARD, (), ipsets=sets)


def _addresses(rng, block, allow) -> list[int]:
    """Members, their neighbours, addresses inside /24 members, and random
    ones in the lab ranges."""
    out = []
    for value, length in list(block) + list(allow):
        out += [value, value + (1 << (32 - length)), value - 1, value + rng.randrange(1 << (32 - length))]
    out += [rng.choice((_ip("198.18.0.0"), _ip("198.19.0.0"), _ip("203.0.113.0"))) + rng.randrange(65536)
            for _ in range(40)]
    return [a & 0xFFFFFFFF for a in out]


def _same_decisions(rng, program, patched, built, block, allow) -> None:
    addresses = _addresses(rng, block, allow)
    for _ in range(150):
        src, dst = rng.choice(addresses), rng.choice(addresses)
        proto, dport = rng.choice(((17, 53), (17, 9), (6, 80)))
        values = packet_fields(src, dst, proto, 1000, dport, 2, 3)
        expected = verdict(program, matched_boxes(program, values))
        assert classify(built, values) == expected
        assert classify(patched, values) == expected, (hex(src), hex(dst), proto, dport)


def test_member_changes_are_patched_and_classify_as_a_fresh_build():
    rng = random.Random(1129)
    block = {(_ip("198.19.1.0"), 24), (_ip("198.18.5.5"), 32)}
    allow = {(_ip("198.19.7.7"), 32), (_ip("203.0.113.9"), 32)}
    program = _program(block, allow)
    current = first = build_classifier(program, [])
    epochs = {first.epoch}
    patched = declined = 0
    for step in range(120):
        kind = rng.random()
        target = block if kind < 0.6 else allow
        if target and rng.random() < 0.4:
            target.discard(rng.choice(sorted(target)))
        elif target is block and rng.random() < 0.2:
            target.add((_ip("198.19.0.0") + (rng.randrange(256) << 8), 24))
        else:
            start, size = rng.choice(((_ip("198.18.0.0"), 65536), (_ip("198.19.0.0"), 65536),
                                      (_ip("203.0.113.0"), 256)))
            target.add((start + rng.randrange(size), 32))
        program = _program(block, allow)
        built = build_classifier(program, [])
        attempt = patch_classifier(current, program, [])
        if attempt is None:
            declined += 1
            current = built
            continue
        patched += 1
        assert attempt.generation == current.generation and attempt.pairs == current.pairs
        assert attempt.verdicts == current.verdicts and attempt.memo is not None
        _same_decisions(rng, program, attempt, built, block, allow)
        # the memo moved on: the classifier patched from cannot be patched again
        assert patch_classifier(current, program, []) is None
        # no epoch comes back: a verdict cached under one never outlives it
        assert attempt.epoch not in epochs and attempt.patched_from == current.epoch
        epochs.add(attempt.epoch)
        current = attempt
    assert patched > 60 and declined > 0, (patched, declined)


def test_a_member_removed_keeps_its_entry_with_the_class_around_it():
    """The sync erases entries only after lfp_flt_cfg names the new epoch:
    a removed member's entry is rewritten to its parent's class instead,
    before, so no packet classified under the new epoch finds the old one."""
    block, allow = {(_ip("198.19.1.0"), 24)}, {(_ip("198.19.7.7"), 32)}
    base = build_classifier(_program(block, allow), [])
    member = (_ip("198.19.9.9"), 32)
    added = patch_classifier(base, _program(block | {member}, allow), [])
    assert added is not None and added.epoch not in (0, base.epoch)
    # block is matched as source and as destination: both tries got the member
    assert {name for name, _, new in added.patch if new} == {"src", "dst"}
    back = patch_classifier(added, _program(block, allow), [])
    assert back is not None and back.epoch not in (base.epoch, added.epoch)
    root = {name: next(c for v, length, c in entries if length == 0) for name, entries in base.prefixes}
    for name, gone, new in back.patch:
        assert [(v, length) for v, length, _ in gone] == [member] == [(v, length) for v, length, _ in new]
        assert new[0][2] == root[name]          # (nothing else of the trie contains it)
    # the same program again: nothing to patch, the same classifier
    assert patch_classifier(back, _program(block, allow), []) is back
    rng = random.Random(7)
    _same_decisions(rng, _program(block, allow), back, build_classifier(_program(block, allow), []), block | {member},
                    allow)


def test_what_a_patch_cannot_make_exact_is_built_anew():
    block, allow = {(_ip("198.19.1.0"), 24)}, {(_ip("198.19.7.7"), 32)}
    base = build_classifier(_program(block, allow), [])
    # a member with another prefix of the trie inside it (198.19.1.0/24)
    assert patch_classifier(base, _program(block | {(_ip("198.19.0.0"), 16)}, allow), []) is None
    base = build_classifier(_program(block, allow), [])
    # a set of boxes no class stands for yet: in block, and within 198.18.0.0/16
    # where nothing of block lay before
    assert patch_classifier(base, _program(block | {(_ip("198.18.3.3"), 32)}, allow), []) is None
    # other rules: never patched
    other = parse_save(RULES.replace("--dport 53", "--dport 54"), "nft")
    forward = filter_scope(NetfilterState(active=True, detail="test", rulesets=(other,),
                                          tables=("nft:ip filter",))).forward
    sets = (IpSet("block", "hash:net", tuple(sorted(block))), IpSet("allow", "hash:ip", tuple(sorted(allow))))
    base = build_classifier(_program(block, allow), [])
    assert patch_classifier(base, compile_program(forward, (), ipsets=sets), []) is None


def test_patched_tables_are_the_tables_of_the_patched_classifier():
    """The node's tables made from the last ones and the patch (only the
    changed LPM entries swapped, lfp_flt_cfg's epoch) are those the patched
    classifier would make from scratch."""
    block, allow = {(_ip("198.19.1.0"), 24), (_ip("198.18.5.5"), 32)}, {(_ip("198.19.7.7"), 32)}
    base = build_classifier(_program(block, allow), [])
    last = ((base, None, False), iptables_filter.filter_tables(base, None, False))
    for change in ({(_ip("198.18.5.6"), 32)}, {(_ip("198.19.2.2"), 32)}):
        block |= change
        patched = patch_classifier(last[0][0], _program(block, allow), [])
        assert patched is not None
        tables = iptables_filter._patched_tables(last, (patched, None, False))
        fresh = iptables_filter.filter_tables(patched, None, False)
        assert tables is not None
        assert {t.name: t.entries for t in tables} == {t.name: t.entries for t in fresh}
        cfg = {t.name: t for t in tables}["lfp_flt_cfg"]
        assert iptables_filter.CFG_VALUE.unpack(next(iter(cfg.entries))[1]) == (patched.generation, patched.epoch)
        last = ((patched, None, False), tables)


def test_a_patched_generation_is_never_built_again_for_other_contents():
    """The sync erases what a plan no longer has only after lfp_flt_cfg
    names the new contents: a build given the generation patches changed in
    place would leave the patched-in entries readable under the new epoch.
    So a patch retires its generation in the book, and each process salts
    its generations (a --keep datapath patched by another process)."""
    import subprocess
    import sys

    from linuxfp.graph.filtering.classifier import GenerationBook

    block, allow = {(_ip("198.19.1.0"), 24)}, {(_ip("198.19.7.7"), 32)}
    book = GenerationBook()
    base = build_classifier(_program(block, allow), [], book)
    assert build_classifier(_program(block, allow), [], book).generation == base.generation   # equal contents
    patched = patch_classifier(base, _program(block | {(_ip("198.19.9.9"), 32)}, allow), [], book)
    assert patched is not None and patched.generation == base.generation
    again = build_classifier(_program(block, allow), [], book)
    assert again.generation != base.generation
    assert build_classifier(_program(block | {(_ip("198.19.9.9"), 32)}, allow), [], book).generation \
        not in (base.generation, again.generation)
    code = ("from tests.test_classifier_patch import _program, _ip; "
            "from linuxfp.graph.filtering.classifier import build_classifier; "
            "print(build_classifier(_program({(_ip('198.19.1.0'), 24)}, {(_ip('198.19.7.7'), 32)}), []).generation)")
    root = __file__.rsplit("/tests/", 1)[0]
    other = {int(subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                                check=True).stdout) for _ in range(2)}
    assert len(other | {build_classifier(_program(block, allow), []).generation}) == 3


def test_removed_members_left_behind_are_bounded(monkeypatch):
    """A removed member's entry stays (with the class around it) until a
    build: past the bound a patch declines, and the build drops them."""
    from linuxfp.graph.filtering import classifier as module

    monkeypatch.setattr(module, "MIN_LEFTOVER", 5)
    block, allow = {(_ip("198.19.1.0"), 24)}, {(_ip("198.19.7.7"), 32)}
    current = build_classifier(_program(block, allow), [])
    size = {name: len(entries) for name, entries in current.prefixes}
    removed = 0
    for n in range(20):
        member = (_ip("198.19.9.0") + n, 32)
        current = patch_classifier(current, _program(block | {member}, allow), [])
        assert current is not None
        attempt = patch_classifier(current, _program(block, allow), [])
        if attempt is None:
            break
        current, removed = attempt, removed + 1
    assert removed == 5, removed      # each removal leaves one atom per field it lies in (src and dst)
    rebuilt = build_classifier(_program(block, allow), [])
    assert {name: len(entries) for name, entries in rebuilt.prefixes} == size
