"""One source for every layout: each table's key and value C types (CType)
match, member by member, the BTF of every shipped object that declares the
map, and an object laid out otherwise is refused with both layouts named."""
from __future__ import annotations

from dataclasses import replace

import pytest

from controller.shared_maps import LayoutMismatch, check_layout
from linuxfp import state as kstate
from linuxfp.datapath.objects import BpfObject
from linuxfp.graph import build_graph
from linuxfp.graph.nodes.bridge import FDB_ENTRY, FDB_KEY
from linuxfp.graph.tables import U32, CType
from linuxfp.lab.netns import entered
from linuxfp.synth.shipped import shipped_dir

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def tables(require_root):
    """Every table of every node (a graph holds them all, filled or not),
    from a fresh namespace's snapshot."""
    from linuxfp.lab.netns import Lab

    with Lab("lfp-t") as lab:
        with entered(lab.namespace("dut")):
            snapshot = kstate.read_snapshot()
    return {t.name: t for t in build_graph(snapshot).tables}


def _objects():
    return sorted(shipped_dir().glob("*.o"))


def test_every_table_matches_every_shipped_object_that_declares_its_map(tables):
    checked: dict[str, int] = {}
    for path in _objects():
        obj = BpfObject.open(path.read_bytes(), name=path.stem[:15])
        try:
            for name in obj.map_names():
                if name in tables:
                    check_layout(obj, tables[name])
                    checked[name] = checked.get(name, 0) + 1
        finally:
            obj.close()
    assert set(checked) == set(tables), f"tables no shipped object declares: {set(tables) - set(checked)}"


@pytest.fixture
def fdb_object():
    path = next(p for p in _objects() if "bridge" in p.name)
    obj = BpfObject.open(path.read_bytes(), name="layout")
    yield obj
    obj.close()


@pytest.mark.parametrize("wrong, says", [
    # same size, two members swapped: a size check cannot see it
    (CType("struct lfp_fdb_key", (("bridge", "I"), ("mac", "6s"), ("vlan", "H"))), "mac@4:6"),
    # a member renamed in C but not here
    (CType("struct lfp_fdb_key", (("ifindex", "I"), ("vlan", "H"), ("mac", "6s"))), "ifindex@0:4"),
    # the same bytes under another type's name
    (CType("struct lfp_neigh6_key", FDB_KEY.members), "holds struct lfp_fdb_key"),
], ids=["swapped", "renamed", "other struct"])
def test_a_key_laid_out_otherwise_is_refused_with_both_layouts(tables, fdb_object, wrong, says):
    assert wrong.size == FDB_KEY.size
    with pytest.raises(LayoutMismatch) as refused:
        check_layout(fdb_object, replace(tables["lfp_fdb"], key=wrong, entries=frozenset()))
    message = str(refused.value)
    assert "map lfp_fdb of node bridge, key:" in message and says in message, message
    if "members differ" in message:
        assert "vlan@4:2" in message, message      # the compiled object's side


def test_a_scalar_of_another_type_is_refused(tables, fdb_object):
    with pytest.raises(LayoutMismatch, match="value: the compiled object holds struct lfp_fdb_entry, the table __u32"):
        check_layout(fdb_object, replace(tables["lfp_fdb"], value=CType("__u32", U32.members + (("", "12x"),)),
                                         entries=frozenset()))
    check_layout(fdb_object, replace(tables["lfp_fdb"], key=FDB_KEY, value=FDB_ENTRY))   # as declared: accepted


def test_padding_is_an_unnamed_member():
    padded = CType("struct t", (("a", "I"), ("", "4x"), ("b", "Q")))
    assert padded.size == 16 and padded.layout == (("a", 0, 32), ("b", 64, 64))
    assert padded.pack(1, 2) == (1).to_bytes(4, "little") + bytes(4) + (2).to_bytes(8, "little")


def test_what_stats_reads_back_is_laid_out_as_the_filter_declares_it():
    """The flow cache and per-class counts are the datapath's own (never
    synced), but `linuxfp stats` unpacks them: the same check."""
    from linuxfp.graph.nodes.iptables_filter import CACHE, CACHED, HIT_KEY, HITS, TALLY

    path = next(p for p in _objects() if "filter" in p.name)
    obj = BpfObject.open(path.read_bytes(), name="layout")
    try:
        key, value = obj.map_types(HITS)
        assert HIT_KEY.mismatch(key) is None and TALLY.mismatch(value) is None
        _, cached = obj.map_types(CACHE)
        assert CACHED.mismatch(cached) is None, CACHED.mismatch(cached)
    finally:
        obj.close()


def test_the_namespace_maps_are_laid_out_as_the_controller_reads_them():
    """The lease and the netfilter-message count: controller/lease.py's
    CTypes against every shipped object that declares them (the
    controller's own object included)."""
    from controller.lease import NAMESPACE_TYPES
    from controller.shared_maps import check_types

    seen = set()
    for path in _objects():
        obj = BpfObject.open(path.read_bytes(), name=path.stem[:15])
        try:
            for name, (key, value) in NAMESPACE_TYPES.items():
                if name in obj.map_names():
                    check_types(obj, name, "test", key, value)
                    seen.add((name, path.name))
        finally:
            obj.close()
    assert {name for name, _ in seen} == set(NAMESPACE_TYPES)
    assert any(file == "controller.o" for _, file in seen)
