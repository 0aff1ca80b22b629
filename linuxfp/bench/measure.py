"""One throughput measurement: offered load, DUT capacity, and the proof that
the DUT (not the generator or the sink) was the bottleneck."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from linuxfp.lab.counters import ip6_forw_datagrams

from . import placement as cpu_placement
from .accounting import CpuAccounting, CpuSample
from .generator import FrameSpec, Generator
from .sink import Sink, SinkSample
from .topology import Line


@dataclass(frozen=True)
class Validity:
    """When a measurement counts (the issue's bottleneck proof)."""

    min_refused_fraction: float = 0.02     # the DUT's ingress ring refuses frames
    min_polls_after_full: float = 0.90     # the DUT always finds its ring full
    min_busy_fraction: float = 0.97        # the DUT CPU never idles
    max_sink_loss_fraction: float = 0.001  # the sink loses nothing, verifies everything
    max_foreign_fraction: float = 0.25     # other tasks and other devices' polls on the DUT CPU


@dataclass(frozen=True)
class Window:
    warmup_s: float
    measure_s: float


@dataclass(frozen=True)
class Measurement:
    system: str
    frame_size: int
    window_s: float
    offered_pps: float
    dut_frames: int
    dut_ns: int
    capacity_pps: float          # DUT frames per DUT CPU-second
    ns_per_packet: float
    delivered_pps: float         # what reached the sink per wall-clock second
    refused_fraction: float
    polls_after_full_fraction: float
    busy_fraction: float
    sink_ns_per_packet: float
    sink_verified: int
    sink_bad: int
    sink_loss_fraction: float
    kernel_forwarded: int        # the DUT kernel's IpForwDatagrams in the window
    valid: bool
    invalid_reasons: tuple[str, ...]
    cpu_share: dict[str, float]  # the DUT CPU's time by role (dut, sink, idle, ...)
    dut_post_poll_ns_per_packet: float  # part of ns_per_packet spent after the poll returned

    def to_dict(self) -> dict:
        data = asdict(self)
        data["invalid_reasons"] = list(self.invalid_reasons)
        return data


def ip_forwarded(line: Line) -> int:
    """The DUT kernel's IpForwDatagrams, and Ip6OutForwDatagrams on a
    dual-stack line (fast-pathed frames do not count)."""
    lines = [row.split() for row in line.dut.read_proc_net("snmp").splitlines() if row.startswith("Ip:")]
    header, values = lines[0], lines[1]
    forwarded = int(values[header.index("ForwDatagrams")])
    if line.ipv6:
        forwarded += ip6_forw_datagrams(line.dut)
    return forwarded


def sink_bad(sink: SinkSample, expect: str) -> int:
    """Frames the sink saw that were not forwarded the way `expect` says."""
    unexpected = "ttl_unchanged" if expect == "good" else "good"
    return sink["bad_mac"] + sink["bad_csum"] + sink["bad_ttl"] + sink[unexpected]


def judge(
    *,
    offered: int,
    dut: CpuSample,
    sink: SinkSample,
    expect: str,
    rules: Validity,
) -> tuple[str, ...]:
    reasons = []
    dut_frames = dut.frames["dut"]
    refused = 1.0 - dut_frames / offered if offered else 0.0
    if offered == 0 or dut_frames == 0:
        reasons.append("no traffic reached the DUT")
    if refused < rules.min_refused_fraction:
        reasons.append(f"DUT ring refused only {refused:.1%} of offered frames (DUT not saturated)")
    after_full = dut.polls_after_full["dut"] / dut.polls["dut"] if dut.polls["dut"] else 0.0
    if after_full < rules.min_polls_after_full:
        reasons.append(f"only {after_full:.0%} of DUT polls followed a full-budget poll")
    if dut.busy_fraction < rules.min_busy_fraction:
        reasons.append(f"DUT CPU busy only {dut.busy_fraction:.1%}")
    foreign = (dut.ns["task"] + dut.ns["napi_other"]) / dut.total_ns if dut.total_ns else 0.0
    if foreign > rules.max_foreign_fraction:
        reasons.append(f"other work took {foreign:.0%} of the DUT CPU (another benchmark or test running?)")
    bad = sink_bad(sink, expect)
    if bad:
        reasons.append(f"sink saw {bad} frames not forwarded as expected "
                       f"({', '.join(f'{k}={sink[k]}' for k in ('bad_mac', 'bad_csum', 'bad_ttl', 'good', 'ttl_unchanged') if sink[k])})")
    loss = 1.0 - sink[expect] / dut_frames if dut_frames else 1.0
    if loss > rules.max_sink_loss_fraction:
        reasons.append(f"{loss:.2%} of the frames the DUT took never reached the sink")
    return tuple(reasons)


def measure(
    system: str,
    frame: FrameSpec,
    line: Line,
    generator: Generator,
    accounting: CpuAccounting,
    sink: Sink,
    placement: cpu_placement.Placement,
    window: Window,
    expect: str = "good",
    rules: Validity = Validity(),
) -> Measurement:
    """Saturate the DUT for one window and derive its capacity.

    `expect` names the sink counter every frame must land in: "good" (TTL
    decremented, MACs rewritten) or "ttl_unchanged" (the upper bound, which
    only rewrites MACs)."""
    if not cpu_placement.verify(placement):
        raise cpu_placement.PlacementError("the DUT's NAPI thread lost its CPU pinning")
    cpu = placement.dut_cpu
    with generator.running(frame):
        time.sleep(window.warmup_s)
        t0, sent0, acct0, sink0, fwd0 = (time.monotonic(), generator.sent(), accounting.sample(cpu),
                                         sink.sample(), ip_forwarded(line))
        time.sleep(window.measure_s)
        t1, sent1, acct1, sink1, fwd1 = (time.monotonic(), generator.sent(), accounting.sample(cpu),
                                         sink.sample(), ip_forwarded(line))
    elapsed = t1 - t0
    dut = acct1 - acct0
    sunk = sink1 - sink0
    offered = sent1 - sent0
    dut_frames, dut_ns = dut.frames["dut"], dut.ns["dut"]
    reasons = judge(offered=offered, dut=dut, sink=sunk, expect=expect, rules=rules)
    sink_frames = dut.frames["sink"]
    return Measurement(
        system=system,
        frame_size=frame.frame_size,
        window_s=round(elapsed, 4),
        offered_pps=offered / elapsed,
        dut_frames=dut_frames,
        dut_ns=dut_ns,
        capacity_pps=dut_frames / dut_ns * 1e9 if dut_ns else 0.0,
        ns_per_packet=dut_ns / dut_frames if dut_frames else 0.0,
        delivered_pps=sunk[expect] / elapsed,
        refused_fraction=1.0 - dut_frames / offered if offered else 0.0,
        polls_after_full_fraction=dut.polls_after_full["dut"] / dut.polls["dut"] if dut.polls["dut"] else 0.0,
        busy_fraction=dut.busy_fraction,
        sink_ns_per_packet=dut.ns["sink"] / sink_frames if sink_frames else 0.0,
        sink_verified=sunk[expect],
        sink_bad=sink_bad(sunk, expect),
        sink_loss_fraction=1.0 - sunk[expect] / dut_frames if dut_frames else 1.0,
        kernel_forwarded=fwd1 - fwd0,
        valid=not reasons,
        invalid_reasons=reasons,
        cpu_share={role: round(ns / dut.total_ns, 4) if dut.total_ns else 0.0 for role, ns in dut.ns.items()},
        dut_post_poll_ns_per_packet=dut.post_ns["dut"] / dut_frames if dut_frames else 0.0,
    )
