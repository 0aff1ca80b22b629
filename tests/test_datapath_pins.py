"""bpffs discovery and pins, including sharing across `ip netns exec` invocations."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bpf"))
from datapath_support import netns, python_in_netns, unique_name  # noqa: E402

from linuxfp.datapath import (  # noqa: E402
    BpfError,
    Map,
    anchor_pid,
    bpffs_root,
    get_pinned,
    is_bpffs,
    makedirs,
    remove_tree,
    unpin,
)
from linuxfp.datapath.maps import BPF_MAP_TYPE_HASH  # noqa: E402

KEY = struct.pack("<I", 1)
VALUE = struct.pack("<I", 0x2A)


@pytest.fixture
def pin_dir() -> Iterator[str]:
    directory = os.path.join(bpffs_root(), unique_name("pins"))
    remove_tree(directory)
    makedirs(directory)
    try:
        yield directory
    finally:
        remove_tree(directory)


def test_bpffs_root_is_bpffs() -> None:
    assert is_bpffs(bpffs_root())


def test_pin_from_pinned_unpin(pin_dir: str) -> None:
    path = os.path.join(pin_dir, "sub", "table")
    makedirs(os.path.dirname(path))
    with Map.create(BPF_MAP_TYPE_HASH, 4, 4, 8, "lfp_t_pin") as table:
        table.update(KEY, VALUE)
        table.pin(path)
        assert table.pinned_path == path
    # our fd is closed: the pin alone keeps the map alive
    with Map.from_pinned(path) as again:
        assert again.lookup(KEY) == VALUE
        assert again.name == "lfp_t_pin"
    fd = get_pinned(path)
    os.close(fd)
    unpin(path)
    assert not os.path.exists(path)
    with pytest.raises(BpfError) as caught:
        Map.from_pinned(path)
    assert caught.value.errno == 2
    unpin(path, missing_ok=True)


def test_remove_tree_unpins_everything(pin_dir: str) -> None:
    makedirs(os.path.join(pin_dir, "a", "b"))
    with Map.create(BPF_MAP_TYPE_HASH, 4, 4, 8, "lfp_t_tree") as table:
        table.pin(os.path.join(pin_dir, "top"))
        table.pin(os.path.join(pin_dir, "a", "b", "deep"))
    remove_tree(pin_dir)
    assert not os.path.exists(pin_dir)


def test_remove_tree_tolerates_another_remover(pin_dir: str, monkeypatch) -> None:
    """A reclaim and a `linuxfp detach` may remove the same tree at once: a
    pin the other removed first is not an error (CI of ea791bf failed on it)."""
    makedirs(os.path.join(pin_dir, "a"))
    with Map.create(BPF_MAP_TYPE_HASH, 4, 4, 8, "lfp_t_race") as table:
        table.pin(os.path.join(pin_dir, "a", "pin"))
    walk = os.walk

    def walk_seen_before_the_other_removed(path, topdown=True):
        for directory, subdirectories, files in walk(path, topdown=topdown):
            yield directory, subdirectories + ["gone-dir"], files + ["gone-pin"]

    monkeypatch.setattr(os, "walk", walk_seen_before_the_other_removed)
    remove_tree(pin_dir)
    assert not os.path.exists(pin_dir)


def test_pin_and_tree_ops_refuse_non_bpffs_paths(tmp_path: Path) -> None:
    victim = tmp_path / "keep-me"
    victim.write_text("not a pin")
    with pytest.raises(BpfError, match="not on bpffs"):
        remove_tree(str(tmp_path))
    with pytest.raises(BpfError, match="not on bpffs"):
        makedirs(str(tmp_path / "x" / "y"))
    with Map.create(BPF_MAP_TYPE_HASH, 4, 4, 8, "lfp_t_refuse") as table:
        with pytest.raises(BpfError, match="not on bpffs"):
            table.pin(str(tmp_path / "pin"))
    assert victim.read_text() == "not a pin"


def _writer(root_expr: str, rel: str) -> str:
    return (
        "import os, struct\n"
        "from linuxfp.datapath import Map, makedirs, bpffs_root\n"
        f"root = {root_expr}\n"
        f"path = os.path.join(root, {rel!r})\n"
        "makedirs(os.path.dirname(path))\n"
        "m = Map.create(1, 4, 4, 8, 'lfp_t_xns')\n"
        "m.update(struct.pack('<I', 1), struct.pack('<I', 0x2a))\n"
        "m.pin(path)\n"
        "print(root)\n"
    )


def _reader(root_expr: str, rel: str) -> str:
    return (
        "import os, struct\n"
        "from linuxfp.datapath import Map, bpffs_root\n"
        f"root = {root_expr}\n"
        f"print(Map.from_pinned(os.path.join(root, {rel!r})).lookup(struct.pack('<I', 1)).hex())\n"
    )


def test_pins_are_shared_across_ip_netns_exec_invocations() -> None:
    rel = os.path.join(unique_name("xns"), "shared_map")
    with netns("xns") as ns:
        try:
            written = python_in_netns(ns, _writer("bpffs_root()", rel))
            assert written.returncode == 0, written.stderr
            root_seen_inside = written.stdout.strip()
            # ip netns exec has its own mount namespace: the pin must go through the anchor
            assert root_seen_inside.startswith("/proc/") and root_seen_inside.endswith("/sys/fs/bpf")
            read = python_in_netns(ns, _reader("bpffs_root()", rel))
            assert read.returncode == 0, read.stderr
            assert read.stdout.strip() == VALUE.hex()
            # ...and the pin is the host-wide one this process sees too
            with Map.from_pinned(os.path.join(bpffs_root(), rel)) as shared:
                assert shared.lookup(KEY) == VALUE
        finally:
            remove_tree(os.path.join(bpffs_root(), os.path.dirname(rel)))


@pytest.fixture
def anchor_without_bpffs() -> Iterator[int]:
    """A process in a private mount namespace whose /sys/fs/bpf is not bpffs."""
    helper = subprocess.Popen(
        [
            "unshare", "--mount", "--propagation", "private", "sh", "-c",
            "umount -l /sys/fs/bpf 2>/dev/null; echo ready; exec sleep 600",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert helper.stdout is not None and helper.stdout.readline().strip() == "ready"
        assert not is_bpffs(f"/proc/{helper.pid}/root/sys/fs/bpf")
        yield helper.pid
    finally:
        helper.kill()
        helper.wait()
        if helper.stdout is not None:
            helper.stdout.close()


def test_missing_anchor_bpffs_is_mounted_in_the_anchor_namespace(anchor_without_bpffs: int) -> None:
    anchor = anchor_without_bpffs
    rel = os.path.join(unique_name("anchor"), "shared_map")
    with netns("anchor") as ns:
        written = python_in_netns(ns, _writer(f"bpffs_root({anchor})", rel))
        assert written.returncode == 0, written.stderr
        assert written.stdout.strip() == f"/proc/{anchor}/root/sys/fs/bpf"
        assert is_bpffs(f"/proc/{anchor}/root/sys/fs/bpf")
        read = python_in_netns(ns, _reader(f"bpffs_root({anchor})", rel))
        assert read.returncode == 0, read.stderr
        assert read.stdout.strip() == VALUE.hex()
        # a separate bpffs instance: nothing leaked into this process's bpffs
        assert not os.path.exists(os.path.join(bpffs_root(), rel))
        remove_tree(os.path.join(f"/proc/{anchor}/root/sys/fs/bpf", os.path.dirname(rel)))


def test_anchor_is_pid1_or_an_inspectable_ancestor() -> None:
    anchor = anchor_pid()
    assert os.readlink(f"/proc/{anchor}/ns/mnt").startswith("mnt:[")
    if anchor != 1:  # only when PID 1's namespaces are hidden from us (sandboxes)
        with pytest.raises(OSError):
            os.readlink("/proc/1/ns/mnt")
