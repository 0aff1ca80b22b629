"""One interface's pipeline loaded the way the controller loads it, for
BPF_PROG_TEST_RUN: its shape from snapshot -> graph (made testable: no
device binding, which test runs refuse), compiled and loaded with the
interface's counter array, every table the program reads written as the
controller writes it (summaries last, devmap entries resolved in the
namespace), and the lease granted."""
from __future__ import annotations

import struct
from dataclasses import replace

from controller import lease
from linuxfp import datapath as dp
from linuxfp.graph import build_graph
from linuxfp.lab.netns import entered
from linuxfp.state import read_snapshot
from linuxfp.state.netlink import netns_cookie
from linuxfp.datapath.maps import BPF_MAP_TYPE_PERCPU_ARRAY
from linuxfp.synth import build, counter_named, counters


def skb_ctx(ifindex: int) -> bytes:
    """A struct __sk_buff for a TC test run: the device the skb arrives on."""
    ctx = bytearray(192)
    struct.pack_into("<I", ctx, 40, ifindex)
    return bytes(ctx)


class LoadedPipeline:
    def __init__(self, ns, ifname: str, hook: str, nodes: tuple[str, ...], name: str, snapshot=None) -> None:
        """`snapshot`: the namespace's, if the caller has just read it."""
        self.ns, self.hook = ns, hook
        with entered(ns):
            self.snapshot = snapshot if snapshot is not None else read_snapshot()
            cookie = netns_cookie()
        self.graph = build_graph(self.snapshot, hook)
        self.ifindex = self.snapshot.link_by_name(ifname).index
        pipeline = self.graph.pipeline(self.ifindex)
        assert pipeline is not None, self.graph.skipped
        shape = replace(pipeline.shape, testable=True)
        assert shape.nodes == nodes, shape.nodes
        self.obj = dp.BpfObject.open(build(shape).data, name=name)
        self.obj.set_rodata({"lfp_netns_cookie": cookie})
        # the interface's own counter array, as the controller gives it
        self.counters = dp.Map.create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, len(counters()), name="t_counters")
        if hook == "xdp":       # one program per device: ingress and counters fixed at load
            self.obj.set_rodata({"lfp_ingress_ifindex": self.ifindex})
            self.obj.reuse_map("lfp_if_counters", self.counters)
        self.obj.load()
        if hook == "tc":        # one program per shape: counters found by ifindex
            self.obj.map("lfp_counters").update(struct.pack("<I", self.ifindex), struct.pack("<I", self.counters.fd))
        self.write(self.graph.tables)
        lease.grant(self.obj.map(lease.LEASE_MAP))
        self.prog = self.obj.program(shape.entry)

    def write(self, tables) -> None:
        with entered(self.ns):            # devmap entries resolve ifindexes here
            for table in sorted(tables, key=lambda t: t.summary):
                if table.name in self.obj.map_names():
                    m = self.obj.map(table.name)
                    for key, value in table.entries:
                        m.update(key, value)

    def run(self, frame: bytes):
        with entered(self.ns):
            if self.hook == "xdp":
                return dp.test_run(self.prog.fd, frame, ctx_in=dp.xdp_md(ingress_ifindex=self.ifindex))
            return dp.test_run(self.prog.fd, frame, ctx_in=skb_ctx(self.ifindex))

    def counter(self, name: str) -> int:
        values = self.counters.lookup_percpu(struct.pack("<I", counter_named(name).id))
        return sum(struct.unpack("<Q", v[:8])[0] for v in values)

    def close(self) -> None:
        self.counters.close()
        self.obj.close()
