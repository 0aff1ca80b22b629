"""The benchmark's pure parts and its own BPF programs, frame by frame."""
from __future__ import annotations

import ipaddress
import os
import struct

import pytest

from linuxfp.bench import bridge, gateway, programs
from linuxfp.bench.accounting import _LAYOUT, ROLE_SLOTS, ROLES, CpuSample
from linuxfp.bench.generator import BENCH_UDP_PORT, SENT_TTL, FrameSpec, steady_flows
from linuxfp.lab.conntrack import parse_conntrack
from linuxfp.bench.measure import Validity, judge
from linuxfp.bench.sink import SinkSample
from linuxfp.bench.stats import percentile, ratios, system_summary
from linuxfp.datapath import test_run
from linuxfp.graph.filtering.program import compile_program
from linuxfp.graph.filtering.scope import filter_scope
from linuxfp.lab import frames
from linuxfp.state.iptables import parse_save
from linuxfp.state.model import NetfilterState

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


def test_gateway_flows_are_the_generators(generator_prog):
    """steady_flows (what the gateway establishes in conntrack) names every
    flow bench_generator sends, in its order."""
    flows = steady_flows("198.18.0.1", int(ipaddress.ip_address("198.19.0.1")), 256, 3)
    assert flows == (("198.18.0.1", "198.19.0.1", 1024, 9), ("198.18.0.1", "198.19.1.1", 1025, 9),
                     ("198.18.0.1", "198.19.2.1", 1026, 9))
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(previous)})   # one per-CPU frame counter
    try:
        sent = [test_run(generator_prog.fd, bytes(60)).data_out for _ in range(6)]
    finally:
        os.sched_setaffinity(0, previous)
    seen = [(str(ipaddress.ip_address(f[26:30])), str(ipaddress.ip_address(f[30:34])),
             *struct.unpack("!HH", f[34:38])) for f in sent]
    first = flows.index(seen[0])
    assert seen == [flows[(first + i) % 3] for i in range(6)]


def test_gateway_stateful_ruleset_is_a_stateful_filter():
    """The stateful variant's rules are all within the filter node's scope,
    stateful (conntrack rules and a nat table), none left to the kernel."""
    text = gateway.stateful_ruleset()
    lines = text.splitlines()
    assert ":FORWARD DROP [0:0]" in lines
    forward = [line for line in lines if line.startswith("-A FORWARD")]
    assert forward[:2] == ["-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
                           "-A FORWARD -m conntrack --ctstate INVALID -j DROP"]
    assert len(forward) == 2 + gateway.BLACKLIST + 1
    assert forward[-1] == f"-A FORWARD -p udp -m udp --dport {BENCH_UDP_PORT} -j ACCEPT"
    assert "-A POSTROUTING -d 192.0.2.0/24 -j MASQUERADE" in lines
    ruleset = parse_save(text, "nft")
    scope = filter_scope(NetfilterState(active=True, tables=("nft:ip filter", "nft:ip nat"), detail="test",
                                        rulesets=(ruleset,)))
    assert scope.uncovered == () and len(scope.stateful) == 2
    program = compile_program(scope.forward, (), stateful=True)
    assert not any(rule.unsupported for rule in program.rules)


def test_bridge_netfilter_ruleset_accepts_only_within_the_bridge():
    """The bridge's stateful ruleset is the gateway's with the service
    accepted between br0's ports only, and as much in the filter node's scope."""
    text = gateway.stateful_ruleset(bridge="br0")
    accept = f"-A FORWARD -i br0 -o br0 -p udp -m udp --dport {BENCH_UDP_PORT} -j ACCEPT"
    assert text.splitlines() == [accept if line.startswith("-A FORWARD -p udp") else line
                                 for line in gateway.stateful_ruleset().splitlines()]
    ruleset = parse_save(text, "nft")
    scope = filter_scope(NetfilterState(active=True, tables=("nft:ip filter", "nft:ip nat"), detail="test",
                                        rulesets=(ruleset,)))
    assert scope.uncovered == () and len(scope.stateful) == 2


CONNTRACK = """\
ipv4     2 udp      17 117 src=198.18.0.1 dst=198.19.0.1 sport=1024 dport=9 src=198.19.0.1 dst=198.18.0.1 sport=9 dport=1024 [ASSURED] mark=0 zone=0 use=2
ipv4     2 udp      17 25 src=198.18.0.1 dst=198.19.1.1 sport=1025 dport=9 src=198.19.1.1 dst=198.18.0.1 sport=9 dport=1025 mark=0 zone=0 use=2
ipv4     2 udp      17 29 src=198.18.0.1 dst=198.19.2.1 sport=1026 dport=9 [UNREPLIED] src=198.19.2.1 dst=198.18.0.1 sport=9 dport=1026 mark=0 zone=0 use=2
ipv4     2 tcp      6 431999 ESTABLISHED src=198.18.0.1 dst=198.19.0.1 sport=1024 dport=9 src=198.19.0.1 dst=198.18.0.1 sport=9 dport=1024 [ASSURED] mark=0 zone=0 use=2
"""


def test_gateway_reads_conntrack_entries():
    entries = parse_conntrack(CONNTRACK)
    assert entries == {
        ("198.18.0.1", "198.19.0.1", 1024, 9): {"timeout_s": 117, "flags": ["ASSURED"]},
        ("198.18.0.1", "198.19.1.1", 1025, 9): {"timeout_s": 25, "flags": []},
        ("198.18.0.1", "198.19.2.1", 1026, 9): {"timeout_s": 29, "flags": ["UNREPLIED"]},
    }


def stateful_repetition(fast: int, passed: dict[str, int], assured: int = 3) -> dict:
    datapath = {"fast_path": fast, "passed_to_kernel": sum(passed.values()), "dropped": 0, "passed": passed,
                "drops": {}, "interfaces": 2}
    conntrack = {"stream_timeout_s": 120, "flows": 3, "entries": 3, "assured": assured, "unreplied": 0,
                 "timeout_min_s": 119, "timeout_max_s": 120}
    return {"measurements": {
        "linux": {"dut_frames": 100, "kernel_forwarded": 100, "observed": {"conntrack": conntrack}},
        "linuxfp-xdp": {"dut_frames": 1000, "kernel_forwarded": 1000 - fast,
                        "observed": {"datapath": datapath, "conntrack": conntrack}},
    }}


def test_gateway_fast_path_share_and_its_checks():
    established = {"stream_timeout_s": 120, "flows": 3, "entries": 3, "assured": 3, "unreplied": 0,
                   "timeout_min_s": 117, "timeout_max_s": 118}
    reps = [stateful_repetition(1000, {}), stateful_repetition(1000, {})]
    shares = gateway.fast_path_shares(reps)
    assert shares["linuxfp-xdp"]["fast_path_share"] == 1.0
    assert shares["linuxfp-xdp"]["kernel_forwarded_share"] == 0.0
    assert shares["linux"]["kernel_forwarded_share"] == 1.0 and "fast_path_share" not in shares["linux"]
    after = gateway.conntrack_after(reps)
    assert after["linuxfp-xdp"] == {"flows": 3, "entries_min": 3, "assured_min": 3, "timeout_min_s": 119}
    assert gateway.conntrack_checks(established, after) == {} and gateway.share_checks(shares) == {}
    # A regression to "everything to the kernel" is named, with its reasons;
    # so are flows that were never (or are no longer) established.
    reps = [stateful_repetition(1000, {}), stateful_repetition(0, {"filter_ct_state": 1000}, assured=1)]
    shares = gateway.fast_path_shares(reps)
    assert shares["linuxfp-xdp"]["fast_path_share"] == 0.5
    errors = {**gateway.conntrack_checks({**established, "assured": 2}, gateway.conntrack_after(reps)),
              **gateway.share_checks(shares)}
    assert errors == {
        "conntrack": "2 of 3 generator flows ASSURED before measuring (3 entries)",
        "conntrack after linux": "only 1 of 3 flows ASSURED after a measurement",
        "conntrack after linuxfp-xdp": "only 1 of 3 flows ASSURED after a measurement",
        "linuxfp-xdp fast path": "50.0% of the frames fast-pathed by LinuxFP's counters (passed to the kernel: "
                                 "filter_ct_state 1000; the kernel forwarded 50.0% of the DUT's frames)",
    }
    # and counters that never moved because LinuxFP's stats listed no interface
    silent = [stateful_repetition(0, {})]
    silent[0]["measurements"]["linuxfp-xdp"]["observed"]["datapath"]["interfaces"] = 0
    errors = gateway.share_checks(gateway.fast_path_shares(silent))
    assert errors == {"linuxfp-xdp fast path": "none of the frames fast-pathed by LinuxFP's counters (passed to "
                                               "the kernel: none; its stats listed 0 interface(s) at worst; the "
                                               "kernel forwarded 100.0% of the DUT's frames)"}
    # so is a measurement without LinuxFP's counters
    reps[1]["measurements"]["linuxfp-xdp"]["observed"] = {"datapath_error": "CalledProcessError: ..."}
    shares = gateway.fast_path_shares(reps)
    assert shares["linuxfp-xdp"]["fast_path_share"] == 1.0 and shares["linuxfp-xdp"]["datapath_errors"] == 1
    assert gateway.share_checks(shares) == {
        "linuxfp-xdp counters": "1 measurement(s) without LinuxFP's counters "
                                "(see repetitions[].measurements[].observed.datapath_error)"}


def test_bridged_shares_leave_out_the_kernels_ip_forwarding():
    """IpForwDatagrams never counts bridged frames: its share is not
    reported, nor quoted by the checks, for the bridge."""
    reps = [stateful_repetition(0, {"br_netfilter": 1000})]
    reps[0]["measurements"]["linuxfp-xdp"]["kernel_forwarded"] = 0
    shares = bridge.bridged_shares(gateway.fast_path_shares(reps))
    assert all("kernel_forwarded" not in entry and "kernel_forwarded_share" not in entry for entry in shares.values())
    assert shares["linuxfp-xdp"]["fast_path_share"] == 0.0
    assert gateway.share_checks(shares) == {
        "linuxfp-xdp fast path": "0.0% of the frames fast-pathed by LinuxFP's counters (passed to the kernel: "
                                 "br_netfilter 1000)"}
