"""The benchmark's pure parts and its own BPF programs, frame by frame."""
from __future__ import annotations

import ipaddress
import struct

import pytest

from linuxfp.bench import programs
from linuxfp.bench.accounting import _LAYOUT, ROLE_SLOTS, ROLES, CpuSample
from linuxfp.bench.generator import SENT_TTL, FrameSpec
from linuxfp.bench.measure import Validity, judge
from linuxfp.bench.sink import SinkSample
from linuxfp.bench.stats import percentile, ratios, system_summary
from linuxfp.datapath import test_run
from linuxfp.lab import frames

XDP_DROP, XDP_PASS, XDP_TX = 1, 2, 3
DUT_MAC, GEN_MAC, SINK_MAC, OUT_MAC = "02:00:00:00:00:02", "02:00:00:00:00:01", "02:00:00:00:00:06", "02:00:00:00:00:05"


def measurement(capacity: float, valid: bool = True) -> dict:
    return {"capacity_pps": capacity, "offered_pps": 2 * capacity, "delivered_pps": capacity / 2,
            "ns_per_packet": 1e9 / capacity, "valid": valid}


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) == 0.0


def test_system_summary_uses_valid_measurements_only():
    summary = system_summary([measurement(1e6), measurement(3e6), measurement(9e9, valid=False)])
    assert summary["pps_median"] == 2_000_000
    assert (summary["pps_min"], summary["pps_max"]) == (1_000_000, 3_000_000)
    assert summary["valid"] is True and summary["valid_measurements"] == 2 and summary["measurements"] == 3


def test_system_summary_without_valid_measurements_says_so():
    summary = system_summary([measurement(1e6, valid=False)])
    assert summary["valid"] is False and summary["pps_median"] == 1_000_000


def test_ratios_are_taken_within_a_repetition():
    # The second repetition runs twice as slow for everybody: ratios do not move.
    reps = [{"a": measurement(4e6), "b": measurement(1e6)},
            {"a": measurement(2e6), "b": measurement(0.5e6)},
            {"a": measurement(9e6), "b": measurement(1e6, valid=False)}]
    medians, spreads = ratios(reps, [("a", "b"), ("b", "a"), ("a", "missing")])
    assert medians == {"a/b": 4.0, "b/a": 0.25}
    assert spreads["a/b"]["n"] == 2


def cpu_sample(**fields) -> CpuSample:
    values = [0] * (_LAYOUT.size // 8)
    for offset, name in enumerate(("ns", "frames", "polls", "full_polls", "polls_after_full",
                                   "last_was_full", "post_ns")):
        for role, value in fields.get(name, {}).items():
            values[2 + offset * ROLE_SLOTS + ROLES.index(role)] = value
    return CpuSample.decode(_LAYOUT.pack(*values))


def test_cpu_sample_decodes_and_subtracts():
    later = cpu_sample(ns={"dut": 300, "sink": 100, "idle": 0}, frames={"dut": 3})
    earlier = cpu_sample(ns={"dut": 100}, frames={"dut": 1})
    window = later - earlier
    assert window.ns["dut"] == 200 and window.frames["dut"] == 2
    assert window.total_ns == 300 and window.busy_fraction == 1.0


def saturated(**overrides):
    dut = cpu_sample(ns={"dut": 1000}, frames={"dut": 100}, polls={"dut": 10}, polls_after_full={"dut": 10})
    sink = SinkSample({"frames": 100, "good": 100, "ttl_unchanged": 0, "bad_mac": 0, "bad_csum": 0,
                       "bad_ttl": 0, "other": 0} | overrides)
    return dut, sink


def test_judge_accepts_a_saturated_dut():
    dut, sink = saturated()
    assert judge(offered=200, dut=dut, sink=sink, expect="good", rules=Validity()) == ()


def test_judge_names_each_broken_condition():
    dut, sink = saturated(good=90, bad_ttl=10)
    reasons = judge(offered=101, dut=dut, sink=sink, expect="good", rules=Validity())
    text = " ".join(reasons)
    assert "refused only" in text and "not forwarded as expected" in text and "never reached the sink" in text


@pytest.fixture(scope="module")
def generator_prog():
    obj = programs.load("generator", rodata={
        "gen_dst_mac": programs.mac_bytes(DUT_MAC), "gen_src_mac": programs.mac_bytes(GEN_MAC),
        "gen_src_ip": ipaddress.ip_address("198.18.0.1").packed, "gen_dst_first": int(ipaddress.ip_address("198.19.0.1")),
        "gen_dst_stride": 256, "gen_dst_count": 3, "gen_ttl": SENT_TTL, "gen_dst_port": 9})
    yield obj.program("bench_generator")
    obj.close()


@pytest.mark.parametrize("size", [64, 1518])
def test_generator_rewrites_every_header_byte(generator_prog, size):
    garbage = bytes([0xA5]) * FrameSpec(size).wire_bytes   # what a recycled page may hold
    outputs = [test_run(generator_prog.fd, garbage) for _ in range(4)]
    for run in outputs:
        assert run.retval == XDP_TX
        frame = run.data_out
        assert len(frame) == size - 4
        assert frame[:6] == frames.mac_bytes(DUT_MAC) and frame[6:12] == frames.mac_bytes(GEN_MAC)
        ip = frame[14:34]
        assert frames.internet_checksum(ip) == 0
        version_ihl, _, total_length, _, frag, ttl, proto = struct.unpack("!BBHHHBB", ip[:10])
        assert (version_ihl, total_length, frag, ttl, proto) == (0x45, size - 4 - 14, 0, SENT_TTL, 17)
        assert struct.unpack("!H", frame[36:38])[0] == 9
    destinations = {run.data_out[30:34] for run in outputs}
    assert len(destinations) == 3   # cycles over the configured prefixes


@pytest.fixture(scope="module")
def sink_obj():
    obj = programs.load("sink", rodata={
        "sink_own_mac": programs.mac_bytes(SINK_MAC), "sink_peer_mac": programs.mac_bytes(OUT_MAC),
        "sink_sent_ttl": SENT_TTL, "sink_dst_port": 9, "sink_probe_port": 7, "sink_echo_port": 7007})
    yield obj
    obj.close()


def sink_counts(obj) -> dict[int, int]:
    counters = obj.map("sink_counters")
    return {index: sum(int.from_bytes(v, "little") for v in counters.lookup_percpu(index.to_bytes(4, "little")))
            for index in range(7)}


@pytest.mark.parametrize("ttl, mutate, counter", [
    (SENT_TTL - 1, None, 1),                           # good
    (SENT_TTL, None, 2),                               # ttl unchanged (upper bound)
    (SENT_TTL - 1, frames.with_bad_ip_checksum, 4),   # bad checksum
    (SENT_TTL - 2, None, 5),                           # bad ttl
])
def test_sink_sorts_frames(sink_obj, ttl, mutate, counter):
    frame = frames.udp_frame(OUT_MAC, SINK_MAC, "198.18.0.1", "198.19.0.1", dport=9, size=60, ttl=ttl)
    if mutate:
        frame = mutate(frame)
    before = sink_counts(sink_obj)
    assert test_run(sink_obj.program("bench_sink").fd, frame).retval == XDP_DROP
    after = sink_counts(sink_obj)
    assert after[0] - before[0] == 1 and after[counter] - before[counter] == 1


def test_sink_flags_wrong_macs_and_passes_other_traffic(sink_obj):
    prog = sink_obj.program("bench_sink").fd
    before = sink_counts(sink_obj)
    wrong = frames.udp_frame(GEN_MAC, SINK_MAC, "198.18.0.1", "198.19.0.1", dport=9, size=60, ttl=SENT_TTL - 1)
    assert test_run(prog, wrong).retval == XDP_DROP
    arp = frames.arp_frame(OUT_MAC, "198.18.0.5", "198.18.0.6")
    assert test_run(prog, arp).retval == XDP_PASS
    after = sink_counts(sink_obj)
    assert after[3] - before[3] == 1 and after[6] - before[6] == 1


def test_sink_reflects_latency_requests(sink_obj):
    request = frames.udp_frame(OUT_MAC, SINK_MAC, "198.18.0.1", "198.19.0.1", sport=40000, dport=7007, size=64)
    run = test_run(sink_obj.program("bench_sink").fd, request)
    assert run.retval == 4   # XDP_REDIRECT, back out of the receiving device
    reply = run.data_out
    assert reply[:6] == request[6:12] and reply[6:12] == request[:6]
    assert reply[26:30] == request[30:34] and reply[30:34] == request[26:30]
    assert reply[34:36] == request[36:38] and reply[36:38] == request[34:36]
    assert frames.internet_checksum(reply[14:34]) == 0 and reply[40:42] == b"\0\0"
