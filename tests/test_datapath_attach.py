"""XDP and TC attachment on a veth pair inside a throwaway network namespace."""

from __future__ import annotations

import os
import socket
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bpf"))
from datapath_support import (  # noqa: E402
    compile_bpf,
    inside_netns,
    send_frames,
    unique_name,
    veth_netns,
    wait_until,
)

from linuxfp.datapath import (  # noqa: E402
    BPF_TCX_EGRESS,
    BPF_TCX_INGRESS,
    BPF_XDP,
    BpfError,
    BpfObject,
    Link,
    Program,
    attach_tc,
    attach_xdp,
    bpffs_root,
    makedirs,
    remove_tree,
    xdp_attached,
)

XDP_PASS = 2
COUNTER_XDP_VERDICT, COUNTER_XDP_MARK, COUNTER_TC_COUNT, COUNTER_TC_OTHER = range(4)


@dataclass(frozen=True)
class Lab:
    ns: str
    ifindex_a: int
    ifindex_b: int
    obj: BpfObject

    def program(self, name: str) -> Program:
        return self.obj.program(name)

    def runs(self, slot: int) -> int:
        values = self.obj.map("counters").lookup_percpu(struct.pack("<I", slot)) or []
        return sum(struct.unpack("<Q", value)[0] for value in values)


@pytest.fixture(scope="module")
def object_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_bpf("datapath_test", tmp_path_factory.mktemp("bpf"))


@pytest.fixture
def lab(object_path: Path) -> Iterator[Lab]:
    """Test thread inside a netns with veth lfpa<->lfpb, and a loaded test object."""
    with veth_netns("attach") as ns, inside_netns(ns), BpfObject.open(object_path, name="attach") as obj:
        obj.set_rodata({"verdict": XDP_PASS})
        obj.load()
        yield Lab(ns, socket.if_nametoindex("lfpa"), socket.if_nametoindex("lfpb"), obj)


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_xdp_attach_mode_update_detach(lab: Lab, mode: str) -> None:
    first, second = lab.program("xdp_verdict"), lab.program("xdp_mark")
    link = attach_xdp(first, lab.ifindex_b, mode=mode)
    try:
        assert (link.hook, link.mode, link.ifindex) == ("xdp", mode, lab.ifindex_b)
        attached = xdp_attached(lab.ifindex_b)
        assert attached.mode == mode and attached.prog_id == first.id
        info = link.info()
        assert (info["id"], info["prog_id"], info["ifindex"], info["attach_type"]) == (
            link.id, first.id, lab.ifindex_b, BPF_XDP,
        )
        send_frames("lfpa")
        wait_until(lambda: lab.runs(COUNTER_XDP_VERDICT) >= 3, "xdp_verdict to see frames on lfpb")

        link.update(second)
        assert link.info()["id"] == link.id  # same link...
        assert link.prog_id == second.id  # ...new program
        assert xdp_attached(lab.ifindex_b).prog_id == second.id
        send_frames("lfpa")
        wait_until(lambda: lab.runs(COUNTER_XDP_MARK) >= 3, "xdp_mark to see frames after update")
    finally:
        link.detach()
    assert xdp_attached(lab.ifindex_b).mode == "none"
    assert link.fd is None
    with pytest.raises(BpfError, match="detached"):
        link.update(first)


def test_xdp_auto_prefers_native_on_veth(lab: Lab) -> None:
    with attach_xdp(lab.program("xdp_verdict").fd, lab.ifindex_a) as link:
        assert link.mode == "native"
        assert xdp_attached(lab.ifindex_a).native_prog_id == lab.program("xdp_verdict").id
    assert xdp_attached(lab.ifindex_a).mode == "none"


def test_xdp_attach_errors_name_the_operation(lab: Lab) -> None:
    missing_ifindex = 0x7FFF0000
    with pytest.raises(BpfError, match="attach XDP") as caught:
        attach_xdp(lab.program("xdp_verdict"), missing_ifindex, mode="native")
    assert caught.value.errno != 0
    with pytest.raises(ValueError):
        attach_xdp(lab.program("xdp_verdict"), lab.ifindex_a, mode="offload")


def test_xdp_link_pin_survives_close_and_reopens(lab: Lab) -> None:
    pin_dir = os.path.join(bpffs_root(), unique_name("links"))
    makedirs(pin_dir)
    path = os.path.join(pin_dir, "xdp-b")
    try:
        link = attach_xdp(lab.program("xdp_verdict"), lab.ifindex_b, mode="generic")
        link.pin(path)
        link.close()  # the pin keeps it attached
        assert xdp_attached(lab.ifindex_b).prog_id == lab.program("xdp_verdict").id
        again = Link.from_pinned(path)
        assert (again.id, again.hook, again.mode, again.ifindex) == (link.id, "xdp", "generic", lab.ifindex_b)
        again.update(lab.program("xdp_mark"))
        assert xdp_attached(lab.ifindex_b).prog_id == lab.program("xdp_mark").id
        again.detach()  # detaches and removes the pin
        assert not os.path.exists(path)
        assert xdp_attached(lab.ifindex_b).mode == "none"
    finally:
        remove_tree(pin_dir)


def test_unpinned_link_detaches_when_closed(lab: Lab) -> None:
    link = attach_xdp(lab.program("xdp_verdict"), lab.ifindex_b, mode="native")
    link.close()
    assert xdp_attached(lab.ifindex_b).mode == "none"


@pytest.mark.parametrize("direction, attach_type", [("ingress", BPF_TCX_INGRESS), ("egress", BPF_TCX_EGRESS)])
def test_tcx_attach_update_detach(lab: Lab, direction: str, attach_type: int) -> None:
    first, second = lab.program("tc_count"), lab.program("tc_other")
    # Frames sent out of lfpa hit lfpa's egress and lfpb's ingress.
    ifindex = lab.ifindex_b if direction == "ingress" else lab.ifindex_a
    link = attach_tc(first, ifindex, direction)
    try:
        assert (link.hook, link.mode, link.direction) == ("tc", "tcx", direction)
        info = link.info()
        assert (info["prog_id"], info["ifindex"], info["attach_type"]) == (first.id, ifindex, attach_type)
        send_frames("lfpa")
        wait_until(lambda: lab.runs(COUNTER_TC_COUNT) >= 3, f"tc_count at {direction}")
        link.update(second)
        assert link.info()["id"] == link.id
        assert link.prog_id == second.id
        send_frames("lfpa")
        wait_until(lambda: lab.runs(COUNTER_TC_OTHER) >= 3, f"tc_other at {direction} after update")
    finally:
        link.detach()
    before = lab.runs(COUNTER_TC_OTHER)
    send_frames("lfpa")
    send_frames("lfpa")  # nothing counts them any more
    assert lab.runs(COUNTER_TC_OTHER) == before


def test_tcx_link_pin_and_reopen(lab: Lab) -> None:
    pin_dir = os.path.join(bpffs_root(), unique_name("tcx"))
    makedirs(pin_dir)
    try:
        link = attach_tc(lab.program("tc_count"), lab.ifindex_b, "egress")
        link.pin(os.path.join(pin_dir, "tc-egress"))
        link.close()
        again = Link.from_pinned(os.path.join(pin_dir, "tc-egress"))
        assert (again.hook, again.mode, again.direction, again.ifindex) == ("tc", "tcx", "egress", lab.ifindex_b)
        assert again.prog_id == lab.program("tc_count").id
        again.detach()
        assert not os.listdir(pin_dir)
    finally:
        remove_tree(pin_dir)


def test_cls_bpf_fallback_attach_replace_detach(lab: Lab) -> None:
    first, second = lab.program("tc_count"), lab.program("tc_other")
    link = attach_tc(first, lab.ifindex_b, "ingress", method="cls_bpf")
    try:
        assert (link.mode, link.fd, link.id) == ("cls_bpf", None, None)
        assert link.prog_id == first.id
        send_frames("lfpa")
        wait_until(lambda: lab.runs(COUNTER_TC_COUNT) >= 3, "tc_count via cls_bpf")
        link.update(second)  # replaces the filter on the same handle/priority
        assert link.prog_id == second.id
        with pytest.raises(BpfError, match="cls_bpf"):
            link.pin(os.path.join(bpffs_root(), unique_name("never")))
    finally:
        link.detach()
    with pytest.raises(BpfError):
        link.prog_id  # noqa: B018  # the filter is gone


def test_xdp_auto_falls_back_to_generic_without_native_support(lab: Lab) -> None:
    loopback = socket.if_nametoindex("lo")  # lo has no native XDP
    with pytest.raises(BpfError, match="native"):
        attach_xdp(lab.program("xdp_verdict"), loopback, mode="native")
    with attach_xdp(lab.program("xdp_verdict"), loopback) as link:
        assert link.mode == "generic"
        assert xdp_attached(loopback).mode == "generic"
    assert xdp_attached(loopback).mode == "none"
