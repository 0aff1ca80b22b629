"""The sink's verifying XDP program (bpf/sink.c) and its counters."""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from linuxfp.datapath import attach_xdp
from linuxfp.lab.netns import entered

from . import programs
from .generator import BENCH_UDP_PORT, SENT_TTL
from .topology import Line

PROBE_UDP_PORT = 7
ECHO_UDP_PORT = 7007
_PROBE_KEY = struct.Struct("<4s6sH")
_PROBE_SEEN = struct.Struct("<QQQ")
COUNTERS = ("frames", "good", "ttl_unchanged", "bad_mac", "bad_csum", "bad_ttl", "other")


@dataclass(frozen=True)
class SinkSample:
    counts: dict[str, int]

    def __sub__(self, earlier: SinkSample) -> SinkSample:
        return SinkSample({key: self.counts[key] - earlier.counts[key] for key in self.counts})

    def __getitem__(self, key: str) -> int:
        return self.counts[key]


@dataclass(frozen=True)
class ProbeSeen:
    first_ns: int   # CLOCK_MONOTONIC, comparable with time.monotonic_ns()
    last_ns: int
    count: int


class Sink:
    """Attached (native XDP) to the sink's veth for its lifetime.

    An XDP program on the sink is also what lets the DUT's egress veth
    accept XDP redirects."""

    def __init__(self, line: Line) -> None:
        self._obj = programs.load("sink", rodata={
            "sink_own_mac": programs.mac_bytes(line.snk.mac),
            "sink_peer_mac": programs.mac_bytes(line.arrival_src_mac),
            "sink_sent_ttl": SENT_TTL,
            "sink_dst_port": BENCH_UDP_PORT,
            "sink_probe_port": PROBE_UDP_PORT,
            "sink_echo_port": ECHO_UDP_PORT,
        })
        prog = self._obj.program("bench_sink")
        with entered(line.sink):
            self._link = attach_xdp(prog.fd, line.snk.ifindex, mode="native")
        prog.close()
        self._counters = self._obj.map("sink_counters")
        self._probes = self._obj.map("sink_probes")

    def sample(self) -> SinkSample:
        totals = dict.fromkeys(COUNTERS, 0)
        for index, name in enumerate(COUNTERS):
            for value in self._counters.lookup_percpu(index.to_bytes(4, "little")) or []:
                totals[name] += int.from_bytes(value, "little")
        return SinkSample(totals)

    @staticmethod
    def _probe_key(daddr: str, dmac: str) -> bytes:
        return _PROBE_KEY.pack(ipaddress.ip_address(daddr).packed, programs.mac_bytes(dmac), 0)

    def probe_seen(self, daddr: str, dmac: str) -> ProbeSeen | None:
        """Arrivals of probes to daddr carrying destination MAC dmac since the last forget."""
        raw = self._probes.lookup(self._probe_key(daddr, dmac))
        return ProbeSeen(*_PROBE_SEEN.unpack(raw)) if raw is not None else None

    def forget_probes(self, daddr: str, dmac: str) -> None:
        self._probes.delete(self._probe_key(daddr, dmac))

    def close(self) -> None:
        self._link.detach()
        self._probes.close()
        self._counters.close()
        self._obj.close()
