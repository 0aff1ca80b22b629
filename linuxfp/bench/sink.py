"""The sink's verifying XDP program (bpf/sink.c) and its counters."""
from __future__ import annotations

from dataclasses import dataclass

from linuxfp.datapath import attach_xdp
from linuxfp.lab.netns import entered

from . import programs
from .generator import BENCH_UDP_PORT, SENT_TTL
from .topology import Line

COUNTERS = ("frames", "good", "ttl_unchanged", "bad_mac", "bad_csum", "bad_ttl", "other")


@dataclass(frozen=True)
class SinkSample:
    counts: dict[str, int]

    def __sub__(self, earlier: "SinkSample") -> "SinkSample":
        return SinkSample({key: self.counts[key] - earlier.counts[key] for key in self.counts})

    def __getitem__(self, key: str) -> int:
        return self.counts[key]


class Sink:
    """Attached (native XDP) to the sink's veth for its lifetime.

    An XDP program on the sink is also what lets the DUT's egress veth
    accept XDP redirects."""

    def __init__(self, line: Line) -> None:
        self._obj = programs.load("sink", rodata={
            "sink_own_mac": programs.mac_bytes(line.snk.mac),
            "sink_peer_mac": programs.mac_bytes(line.dut_out.mac),
            "sink_sent_ttl": SENT_TTL,
            "sink_dst_port": BENCH_UDP_PORT,
        })
        prog = self._obj.program("bench_sink")
        with entered(line.sink):
            self._link = attach_xdp(prog.fd, line.snk.ifindex, mode="native")
        prog.close()
        self._counters = self._obj.map("sink_counters")

    def sample(self) -> SinkSample:
        totals = dict.fromkeys(COUNTERS, 0)
        for index, name in enumerate(COUNTERS):
            for value in self._counters.lookup_percpu(index.to_bytes(4, "little")) or []:
                totals[name] += int.from_bytes(value, "little")
        return SinkSample(totals)

    def close(self) -> None:
        self._link.detach()
        self._counters.close()
        self._obj.close()
