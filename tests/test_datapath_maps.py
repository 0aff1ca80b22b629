"""Map CRUD, per-CPU values, batch and fallback dumps, ids."""

from __future__ import annotations

import errno
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bpf"))
from datapath_support import compile_bpf  # noqa: E402

from linuxfp.datapath import (  # noqa: E402
    BPF_EXIST,
    BPF_NOEXIST,
    BpfError,
    BpfObject,
    Map,
    possible_cpus,
    test_run,
)
from linuxfp.datapath.maps import BPF_MAP_TYPE_DEVMAP_HASH  # noqa: E402


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


@pytest.fixture(scope="module")
def obj(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BpfObject]:
    path = compile_bpf("datapath_test", tmp_path_factory.mktemp("bpf"))
    with BpfObject.open(path, name="maps") as loaded:
        loaded.load()
        yield loaded


def test_map_attributes(obj: BpfObject) -> None:
    with obj.map("by_ifindex") as table:
        assert (table.name, table.type, table.key_size, table.value_size, table.max_entries) == (
            "by_ifindex", 1, 4, 8, 1024,
        )
        assert table.id > 0 and table.fd >= 0


def test_hash_crud(obj: BpfObject) -> None:
    with obj.map("by_ifindex") as table:
        assert table.lookup(u32(7)) is None
        table.update(u32(7), u64(70))
        assert table.lookup(u32(7)) == u64(70)
        table.update(u32(7), u64(71), BPF_EXIST)
        assert table.lookup(u32(7)) == u64(71)
        with pytest.raises(BpfError) as caught:
            table.update(u32(7), u64(72), BPF_NOEXIST)
        assert caught.value.errno == errno.EEXIST
        assert "by_ifindex" in str(caught.value)
        assert table.delete(u32(7)) is True
        assert table.delete(u32(7)) is False
        assert table.lookup(u32(7)) is None
        with pytest.raises(ValueError, match="key is 2 bytes"):
            table.lookup(b"\0\0")
        with pytest.raises(ValueError, match="value is 4 bytes"):
            table.update(u32(1), u32(1))


def test_batch_dump_over_several_batches(obj: BpfObject) -> None:
    with obj.map("by_ifindex") as table:
        expected = {u32(i): u64(i * 3) for i in range(700)}  # > one 256-entry batch
        for key, value in expected.items():
            table.update(key, value)
        try:
            assert table._dump_batched(table.value_size) is not None  # hash maps batch
            assert dict(table.items()) == expected
            assert len(table.items()) == 700
            assert sorted(table.keys()) == sorted(expected)
        finally:
            for key in expected:
                table.delete(key)
        assert table.items() == []


def test_dump_falls_back_to_get_next_key(obj: BpfObject, monkeypatch: pytest.MonkeyPatch) -> None:
    with obj.map("by_ifindex") as table:
        for i in range(5):
            table.update(u32(i), u64(i))
        try:
            batched = dict(table.items())
            monkeypatch.setattr(Map, "_dump_batched", lambda self, size: None)
            assert dict(table.items()) == batched == {u32(i): u64(i) for i in range(5)}
        finally:
            for i in range(5):
                table.delete(u32(i))


def test_devmap_hash_dump_without_batch_support() -> None:
    # DEVMAP_HASH has no batch ops: items() must take the get_next_key path.
    with Map.create(BPF_MAP_TYPE_DEVMAP_HASH, 4, 4, 8, "lfp_t_devmap") as devmap:
        devmap.update(u32(1), u32(1))  # ifindex 1 = lo
        assert devmap._dump_batched(devmap.value_size) is None
        assert devmap.items() == [(u32(1), u32(1))]


def test_lpm_trie_items(obj: BpfObject) -> None:
    with obj.map("prefixes") as trie:
        keys = [struct.pack("<I4B", 24, 198, 18, 0, 0), struct.pack("<I4B", 16, 203, 0, 0, 0)]
        for index, key in enumerate(keys):
            trie.update(key, u32(index))
        try:
            assert dict(trie.items()) == {keys[0]: u32(0), keys[1]: u32(1)}
        finally:
            for key in keys:
                trie.delete(key)


def test_percpu_array_counts_program_runs(obj: BpfObject) -> None:
    cpus = possible_cpus()
    with obj.map("counters") as counters:
        before = sum(struct.unpack("<Q", v)[0] for v in counters.lookup_percpu(u32(0)) or [])
        program = obj.program("xdp_verdict")
        test_run(program.fd, bytes(64), repeat=5)
        program.close()
        values = counters.lookup_percpu(u32(0))
        assert values is not None
        assert len(values) == cpus and all(len(v) == 8 for v in values)
        assert sum(struct.unpack("<Q", v)[0] for v in values) == before + 5
        with pytest.raises(TypeError, match="per-CPU"):
            counters.lookup(u32(0))
        dumped = dict(counters.items_percpu())
        assert set(dumped) == {u32(i) for i in range(4)}
        assert dumped[u32(0)] == values


def test_percpu_hash_update_and_dump(obj: BpfObject) -> None:
    cpus = possible_cpus()
    with obj.map("percpu_table") as table:
        per_cpu = [u32(10 + cpu) for cpu in range(cpus)]
        table.update_percpu(u32(1), per_cpu)
        table.update_percpu(u32(2), u32(5))  # same value on every CPU
        try:
            assert table.lookup_percpu(u32(1)) == per_cpu
            assert table.lookup_percpu(u32(2)) == [u32(5)] * cpus
            assert table.lookup_percpu(u32(3)) is None
            assert dict(table.items_percpu()) == {u32(1): per_cpu, u32(2): [u32(5)] * cpus}
            with pytest.raises(ValueError, match="possible CPUs"):
                table.update_percpu(u32(1), [u32(1)] * (cpus + 1))
            with pytest.raises(TypeError, match="per-CPU"):
                table.update(u32(1), u32(1))
        finally:
            table.delete(u32(1))
            table.delete(u32(2))


def test_from_id_opens_the_same_map(obj: BpfObject) -> None:
    with obj.map("by_ifindex") as table, Map.from_id(table.id) as again:
        assert again.id == table.id and again.fd != table.fd
        table.update(u32(99), u64(1))
        try:
            assert again.lookup(u32(99)) == u64(1)
        finally:
            table.delete(u32(99))


def test_from_fd_rejects_non_map_fds(obj: BpfObject) -> None:
    program = obj.program("xdp_verdict")
    try:
        with pytest.raises(BpfError, match="not a BPF map"):
            Map.from_fd(program.fd)
    finally:
        program.close()
