"""Every `linuxfp bench` scenario runs end to end in --quick mode and writes
well-formed results. No timing assertions: only the harness is under test."""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path

import pytest

from linuxfp.bench.cli import SCENARIOS, run_bench

pytestmark = pytest.mark.netns

THROUGHPUT_FIELDS = {
    "pps_median": (int, float), "pps_min": (int, float), "pps_max": (int, float),
    "offered_pps_median": (int, float), "ns_per_packet_median": (int, float), "valid": bool,
}
MEASUREMENT_FIELDS = {"capacity_pps", "offered_pps", "ns_per_packet", "refused_fraction",
                      "polls_after_full_fraction", "busy_fraction", "sink_verified", "sink_bad",
                      "valid", "invalid_reasons"}


def bench(scenario: str, out: Path, capsys, as_json: bool = True) -> dict:
    args = argparse.Namespace(scenario=scenario, quick=True, out=str(out), repetitions=None,
                              json=as_json, lab_prefix="lfp-t-bench")
    assert run_bench(args) == 0
    printed = capsys.readouterr().out
    written = sorted(out.glob(f"{scenario}-*.json"))
    assert len(written) == 1
    result = json.loads(written[0].read_text())
    if as_json:
        assert json.loads(printed)["scenario"] == scenario
    assert result["scenario"] == scenario
    assert isinstance(result["supported"], bool)
    assert result["quick"] is True
    assert {"kernel", "cpus"} <= set(result["machine"])
    assert isinstance(result["method"], dict)
    assert isinstance(result["summary"], str) and result["summary"]
    assert (out / result["files"]["markdown"]).read_text().startswith("# ")
    return result


def check_throughput(result: dict, systems: set[str]) -> None:
    assert set(result["systems"]) == systems, result.get("errors")
    assert result["regime"] in ("near", "far", "unbracketed", "all (no stable repetition)")
    for name, summary in result["systems"].items():
        for field, kinds in THROUGHPUT_FIELDS.items():
            assert isinstance(summary[field], kinds), (name, field)
        assert summary["measurements"] >= 1
        assert summary["pps_median"] > 0 and math.isfinite(summary["pps_median"])
        assert summary["pps_min"] <= summary["pps_median"] <= summary["pps_max"]
    for key, value in result["ratios"].items():
        a, b = key.split("/")
        assert a in systems and b in systems and value > 0
    for repetition in result["repetitions"]:
        for measurement in repetition["measurements"].values():
            assert MEASUREMENT_FIELDS <= set(measurement)
            assert measurement["sink_bad"] == 0, measurement   # every frame forwarded correctly


def test_router(tmp_path, capsys):
    result = bench("router", tmp_path, capsys)
    systems = {"linux", "linuxfp-xdp", "linuxfp-tc", "upper-bound", "reference"}
    assert result["errors"] == {}
    check_throughput(result, systems)
    assert set(result["frame_sizes"]) == {"64", "1518"}
    for per_size in result["frame_sizes"].values():
        check_throughput({**per_size, "repetitions": []}, systems)
    # the FIB-answer cache's rows: 10 000 destinations, every frame a new flow
    assert set(result["traffic"]) == {"destinations", "all-new"}
    for per_traffic in result["traffic"].values():
        check_throughput({**per_traffic, "repetitions": []}, {"linuxfp-xdp", "reference", "upper-bound"})
    if importlib.util.find_spec("matplotlib") is not None:   # without it: a warning, no plot
        assert (tmp_path / result["files"]["plot"]).stat().st_size > 0
    else:
        assert "plot" not in result["files"]
    # The fast path really carried the traffic: the DUT kernel forwarded none of it.
    for repetition in result["repetitions"]:
        for name in ("linuxfp-xdp", "upper-bound", "reference"):
            assert repetition["measurements"][name]["kernel_forwarded"] == 0
        assert repetition["measurements"]["linux"]["kernel_forwarded"] > 0


def test_router6(tmp_path, capsys):
    result = bench("router6", tmp_path, capsys)
    systems = {"linux", "linuxfp-xdp", "linuxfp-tc", "upper-bound", "reference"}
    assert result["errors"] == {}
    check_throughput(result, systems)
    assert set(result["frame_sizes"]) == {"78"}      # quick: the small frames only
    assert bytes.fromhex(result["method"]["sample_frame_78"])[12:14] == b"\x86\xdd"   # IPv6
    # The fast path carried the IPv6 traffic; Linux forwarded it alone.
    for repetition in result["repetitions"]:
        for name in ("linuxfp-xdp", "linuxfp-tc", "upper-bound", "reference"):
            assert repetition["measurements"][name]["kernel_forwarded"] == 0, name
        assert repetition["measurements"]["linux"]["kernel_forwarded"] > 0


def test_chain(tmp_path, capsys):
    result = bench("chain", tmp_path, capsys, as_json=False)
    assert result["errors"] == {}
    check_throughput(result, {"inline-1", "inline-10", "tail-1", "tail-10"})
    assert set(result["ns_per_added_stage"]) == {"inline", "tail"}


def test_breakdown(tmp_path, capsys):
    result = bench("breakdown", tmp_path, capsys, as_json=False)
    assert result["errors"] == {}
    check_throughput(result, {"xdp-rung-1", "xdp-rung-5", "xdp-rung-9", "linuxfp-xdp",
                              "tc-rung-1", "tc-rung-9", "linuxfp-tc", "reference"})
    # each hook's ladder climbs to its datapath; the reference forwarder is
    # measured beside them, not as a step
    assert [step["to"] for step in result["steps"]] == ["xdp-rung-5", "xdp-rung-9", "linuxfp-xdp",
                                                        "tc-rung-9", "linuxfp-tc"]
    for repetition in result["repetitions"]:   # every rung forwards by itself, none falls back
        assert all(m["kernel_forwarded"] == 0 for m in repetition["measurements"].values())


def test_every_ladder_rung_verifies_at_both_hooks():
    """The quick run climbs only some rungs: every one must still build
    against the datapath's current headers, and each adds code."""
    from linuxfp.bench.breakdown import HOOKS, RUNGS, ladder_source
    from linuxfp.datapath import BpfObject
    from linuxfp.synth import compile_source

    for hook in HOOKS:
        sizes = []
        for rung, _ in RUNGS:
            with BpfObject.open(compile_source(ladder_source(hook, rung)).data, name="bench_ladder") as obj:
                obj.load()
                sizes.append(obj.insn_count("lfp_ladder"))
        assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), (hook, sizes)


def test_breakdown_refuses_cache_rungs_where_the_cache_is_off():
    """With the FIB cache off (ip_forward_use_pmtu=1), the cache's rungs would
    time the kernel or plain lookups under their name: they are refused."""
    from linuxfp.bench import throughput
    from linuxfp.bench.breakdown import climb
    from linuxfp.bench.systems import SYSTEMS

    plan = throughput.Plan(systems=climb("xdp", (6, 7, 8))[:-1], frame_sizes=(64,), repetitions=1,
                           window=throughput.QUICK_WINDOW, retries=0, sentinel=SYSTEMS["upper-bound"])
    with throughput.rig(configure=lambda line: line.dut.run("sysctl -qw net.ipv4.ip_forward_use_pmtu=1"),
                        lab_prefix="lfp-t-bdoff") as rig:
        raw = throughput.run(rig, plan)
    assert set(raw["errors"]) == {"xdp-rung-7", "xdp-rung-8"}, raw["errors"]
    assert all("FIB cache is off" in e for e in raw["errors"].values())


def test_a_low_rung_on_the_controllers_tc_link_outlasts_its_tcx_poll():
    """Rung 1 reads no map of the controller's, yet is bound to its lease
    map: the controller, which takes a tcx program for its own by that map,
    leaves it on its link past the 1 s poll (unbound, the link was severed
    as another tool's)."""
    import time

    from linuxfp.bench.breakdown import _install
    from linuxfp.bench.topology import build_line
    from linuxfp.lab.netns import Lab

    with Lab("lfp-t-lad") as lab:
        line = build_line(lab, 2)
        with _install("tc", 1)(line):      # raises on leaving if the controller replaced it
            time.sleep(2.5)


def test_hooks(tmp_path, capsys):
    result = bench("hooks", tmp_path, capsys, as_json=False)
    assert result["errors"] == {}
    check_throughput(result, {"linux", "linuxfp-xdp", "linuxfp-tc"})
    functions = result["functions"]
    assert functions["forward"]["supported"] is True and functions["forward"]["xdp"]["pps_median"] > 0
    assert functions["bridge"]["supported"] is True and functions["bridge"]["xdp"]["pps_median"] > 0
    assert functions["filter"]["supported"] is True and functions["filter"]["xdp"]["pps_median"] > 0


def test_response(tmp_path, capsys):
    result = bench("response", tmp_path, capsys)
    response = result["response"]
    for command in ("ip route add", "ip route del", "ip neigh change", "ip addr add", "brctl addbr",
                    "brctl addif", "iptables -A FORWARD", "iptables -A (filter present)", "ipset add",
                    "iptables -P FORWARD DROP", "iptables -P FORWARD ACCEPT", "nft add rule", "nft flush chain",
                    "nft add element", "nft delete element"):
        entry = response[command]
        assert {"p50_ms", "p99_ms", "n", "status", "end_to_end", "command"} <= set(entry)
        assert entry["errors"] == 0, entry.get("first_error")
        if entry["n"]:
            assert entry["p50_ms"] <= entry["p99_ms"]
        else:
            assert entry["p50_ms"] is None   # never a made-up number
    for command in ("ip route add", "ip route del", "ip neigh change", "ip addr add", "iptables -A (filter present)",
                    "iptables -P FORWARD DROP", "nft add rule", "nft add element"):
        assert response[command]["n"] > 0
    for command in ("ip route add", "ip route del", "ip neigh change", "ip addr add", "iptables -A (filter present)",
                    "ipset add", "ipset del", "iptables-legacy -A", "iptables-legacy -D"):
        for system in ("linux", "linuxfp-xdp"):
            assert response[command]["end_to_end"][system]["n"] > 0, command
    # how long a watched change keeps the traffic on the kernel path, once re-read
    for command in ("iptables-legacy -A", "sysctl -w (no event)", "ipset add", "iptables -A (filter present)",
                    "ipset add (large set)", "ipset del (large set)"):
        assert response[command]["errors"] == 0, response[command].get("first_error")
        assert response[command]["kernel_path"]["n"] > 0, command


def test_latency(tmp_path, capsys):
    result = bench("latency", tmp_path, capsys)
    assert result["errors"] == {}
    for sessions, entry in result["latency_by_sessions"].items():
        assert set(entry) == {"linux", "linuxfp-xdp", "linuxfp-tc"}
        for figures in entry.values():
            assert figures["sessions"] == int(sessions)
            assert figures["round_trips"] > 0
            assert 0 < figures["avg_us"] and 0 < figures["p99_us"] and figures["std_us"] >= 0
    assert result["latency"] == result["latency_by_sessions"]["1"]


def test_scale(tmp_path, capsys):
    result = bench("scale", tmp_path, capsys)
    for entry in result["startup"].values():
        assert entry["ready_s_median"] > 0 and entry["rss_kib_median"] > 0
    assert result["burst"]["changes"] > 0 and result["burst"]["batches"] >= 1
    interfaces = result["interfaces"]
    assert interfaces["ready"]["ready_s_median"] > 0 and len(interfaces["added_ms"]) == interfaces["added"] > 0


def test_watch(tmp_path, capsys):
    result = bench("watch", tmp_path, capsys)
    for system in ("no controller", "controller"):
        assert set(result["ns_per_call"][system]) == {"getppid", "setsockopt", "sysctl-read", "sysctl-write", "send"}
        assert all(v > 0 for v in result["ns_per_call"][system].values())
    assert set(result["added_ns_per_call"]) == {"getppid", "setsockopt", "sysctl-read", "sysctl-write", "send"}


def test_rules(tmp_path, capsys):
    result = bench("rules", tmp_path, capsys)
    for workload in ("counts", "new_tuples"):
        assert set(result[workload]) == {"1", "1000"}, result["errors"]
        for data in result[workload].values():
            check_throughput(data, {"linux", "linuxfp-xdp", "linuxfp-tc"})
    assert set(result["flatness"]) == set(result["flatness_new_tuples"]) == {"linux", "linuxfp-xdp", "linuxfp-tc"}


def test_gateway6(tmp_path, capsys):
    """IPv6 under 100 ip6tables rules, as one inet6 ipset, and under a
    stateful ruleset over established connections: the fast path forwards
    it itself (its counters), XDP and TC."""
    result = bench("gateway6", tmp_path, capsys)
    systems = {"linux", "linuxfp-xdp", "linuxfp-tc"}
    check_throughput(result, systems)
    check_throughput(result["ipset"], systems)
    check_throughput(result["stateful"], systems)
    assert bytes.fromhex(result["method"]["sample_frame"])[12:14] == b"\x86\xdd"   # IPv6
    # the stateful variant's flows were IPv6 connections conntrack had ASSURED
    established = result["stateful"]["conntrack"]["established"]
    assert established["assured"] == established["flows"] > 0, established
    for shares in (result["fast_path"], result["ipset"]["fast_path"], result["stateful"]["fast_path"]):
        for name in ("linuxfp-xdp", "linuxfp-tc"):
            assert shares[name]["fast_path_share"] >= 0.99, shares[name]
    assert result["errors"] == {}, result["errors"]
    assert "gateway6" in next(tmp_path.glob("gateway6-*.md")).read_text()


def test_gateway(tmp_path, capsys):
    result = bench("gateway", tmp_path, capsys)
    check_throughput(result, {"linux", "linuxfp-xdp", "linuxfp-tc"})
    assert "-m set" in result["method"]["ipset_variant"]
    # The ipset variant: the blacklist as one set, fast-pathed like the rules.
    check_throughput(result["ipset"], {"linux", "linuxfp-xdp", "linuxfp-tc"})
    for name in ("linuxfp-xdp", "linuxfp-tc"):
        assert result["ipset"]["fast_path"][name]["fast_path_share"] >= 0.99, result["ipset"]["fast_path"][name]
    # The stateful variant, same run: the generator's flows established in
    # conntrack, and LinuxFP forwarding them itself (not filter_ct_* passes).
    stateful = result["stateful"]
    check_throughput(stateful, {"linux", "linuxfp-xdp", "linuxfp-tc"})
    established = stateful["conntrack"]["established"]
    assert established["flows"] == 50 and established["assured"] == 50, stateful["errors"]
    for name in ("linuxfp-xdp", "linuxfp-tc"):
        assert stateful["fast_path"][name]["fast_path_share"] >= 0.99, stateful["fast_path"][name]
        assert stateful["conntrack"]["after_measurement"][name]["assured_min"] == 50
        assert result["fast_path"][name]["fast_path_share"] >= 0.99, result["fast_path"][name]
    assert stateful["errors"] == {}
    assert "stateful" in result["summary"]


def test_bridge(tmp_path, capsys):
    result = bench("bridge", tmp_path, capsys)
    assert result["errors"] == {}
    check_throughput(result, {"linux", "linuxfp-xdp", "linuxfp-tc"})
    # Bridged with br_netfilter and the stateful ruleset: the generator's
    # flow established (its reply bridged back), every frame arriving
    # unchanged, and LinuxFP bridging the established flow itself (the
    # share's check may name a quick run's short windows, nothing else).
    netfilter = result["netfilter"]
    check_throughput(netfilter, {"linux", "linuxfp-xdp", "linuxfp-tc"})
    established = netfilter["conntrack"]["established"]
    assert established["flows"] == 1 and established["assured"] == 1, netfilter["errors"]
    for name in ("linuxfp-xdp", "linuxfp-tc"):
        assert netfilter["fast_path"][name]["fast_path_share"] >= 0.9, netfilter["fast_path"][name]
        assert netfilter["conntrack"]["after_measurement"][name]["assured_min"] == 1
    assert [key for key in netfilter["errors"] if not key.endswith(" fast path")] == [], netfilter["errors"]
    assert "br_netfilter" in result["summary"] and "br_netfilter" in result["method"]["netfilter"]


def test_flannel(tmp_path, capsys):
    """Round trips between pods of the real Flannel lab, both placements,
    Linux alone and with LinuxFP in both nodes."""
    result = bench("flannel", tmp_path, capsys)
    assert result["errors"] == {}
    for placement in ("intra-node", "inter-node"):
        entry = result["latency"][placement]["1"]
        assert set(entry) == {"linux", "linuxfp"}, entry
        for measured in entry.values():
            assert measured["round_trips"] > 0 and 0 < measured["p50_us"] <= measured["p99_us"]
    assert set(result["reductions"]) == {"intra-node, 1 session(s)", "inter-node, 1 session(s)"}
    # the inter-node runs cross the nodes' IP forwarding; bridged ones never do
    by_run = {(r["system"], r["placement"]): r["kernel_forwarded"] for r in result["runs"]}
    assert by_run[("linux", "inter-node")] > 0 and by_run[("linux", "intra-node")] == 0
    # TCP bulk (iperf3) both ways of placing the server, both systems
    for placement in ("intra-node", "inter-node"):
        entry = result["tcp_bulk"][placement]["1"]
        assert set(entry) == {"linux", "linuxfp"}, entry
        assert all(measured["gbit_s"] > 0 for measured in entry.values()), entry
    # 64 B UDP at full speed, received per second and per CPU-second, both placements and systems
    for placement in ("intra-node", "inter-node"):
        entry = result["udp64"][placement]
        assert set(entry) == {"linux", "linuxfp"}, entry
        assert all(measured["pps"] > 0 and measured["per_cpu_second"] > 0 for measured in entry.values()), entry
    # 1 200 B UDP inter-node (past flannel.1's cap: each packet asks its
    # remote's outer route), both systems, counted by the kernels too
    entry = result["udp_large"]["inter-node"]
    assert set(entry) == {"linux", "linuxfp"}, entry
    assert all(measured["pps"] > 0 and measured["kernel_forwarded"] >= 0 for measured in entry.values()), entry
    report = next(tmp_path.glob("flannel-*.md")).read_text()
    assert "TCP bulk" in report and "64 B UDP" in report and "1200 B UDP" in report


def test_every_scenario_is_tested():
    tested = {"router", "router6", "chain", "response", "latency", "scale", "gateway", "gateway6", "rules", "bridge",
              "hooks", "breakdown",
              "watch", "flannel"}
    assert set(SCENARIOS) == tested


def test_unknown_scenario_is_a_usage_error(tmp_path):
    args = argparse.Namespace(scenario="nope", quick=True, out=str(tmp_path), repetitions=None, json=False)
    assert run_bench(args) == 2
