"""`linuxfp demo router|gateway|bridge|flannel`: the paper's virtual router (or
gateway: the router plus 100 iptables blacklist rules; or a Linux bridge
between two hosts; or two Kubernetes-style nodes running the real Flannel),
accelerated before your eyes.
Builds source — DUT — sink in throw-away namespaces (50 prefixes set with
iproute2 on the DUT; the gateway's rules with iptables-restore), measures
Linux alone and LinuxFP in the same run with the benchmark's method, shows
the synthesized graph and the fast-path counters, and removes everything
(also on Ctrl-C)."""
from __future__ import annotations

import contextlib
import json
import sys

from .launcher import ControllerProcess, linuxfp_cli

PREFIXES = 50
FRAME_SIZE = 64


_narration = sys.stdout


def _say(text: str = "") -> None:
    print(text, file=_narration, flush=True)


def run_demo(scenario: str = "router", quick: bool = False, as_json: bool = False) -> int:
    from linuxfp.bench import throughput
    from linuxfp.bench.systems import SYSTEMS, System

    global _narration
    _narration = sys.stderr if as_json else sys.stdout   # -j: stdout carries only the JSON
    if scenario == "flannel":
        return _flannel_demo(quick, as_json)
    shown: dict[str, str] = {}

    @contextlib.contextmanager
    def linuxfp_showing_its_work(line):
        """LinuxFP as the benchmark installs it, plus a look inside once the
        traffic of a measurement has gone through."""
        with ControllerProcess(line.dut.name, hook="auto"):
            shown["graph"] = linuxfp_cli(line.dut.name, "graph").stdout
            yield
            shown["stats"] = linuxfp_cli(line.dut.name, "stats").stdout
            shown["stats_json"] = linuxfp_cli(line.dut.name, "-j", "stats").stdout

    bridged = scenario == "bridge"
    expect = "ttl_unchanged" if bridged else SYSTEMS["linuxfp-xdp"].expect   # bridged frames cross unchanged
    linux = System("linux", "Linux alone", expect, SYSTEMS["linux"].install)
    linuxfp = System("linuxfp", "LinuxFP controller in the DUT", expect, linuxfp_showing_its_work)
    plan = throughput.Plan(
        systems=(linux, linuxfp),
        frame_sizes=(FRAME_SIZE,),
        repetitions=1 if quick else 3,
        window=throughput.QUICK_WINDOW if quick else throughput.FULL_WINDOW,
        retries=1,
    )

    if scenario == "gateway":
        from linuxfp.bench.gateway import BLACKLIST, blacklist_ruleset

        _say(f"LinuxFP demo: virtual gateway, {PREFIXES} prefixes configured with iproute2 and "
             f"{BLACKLIST} blacklist rules with iptables on the DUT")
    elif bridged:
        _say("LinuxFP demo: a Linux bridge (ip link add br0 type bridge) with the source and the sink "
             "on its two ports")
    else:
        _say(f"LinuxFP demo: virtual router, {PREFIXES} prefixes configured with iproute2 on the DUT")
    with throughput.rig(1 if bridged else PREFIXES, bridged=bridged) as rig:
        line = rig.line
        if scenario == "gateway":
            line.dut.run(["iptables-restore"], input=blacklist_ruleset())
        _say(f"  source {line.src.name} ({line.gen.ifname}) -> DUT {line.dut.name} "
             f"({line.dut_in.ifname} -> {line.dut_out.ifname}) -> sink {line.sink.name} ({line.snk.ifname})")
        if bridged:
            _say(f"  traffic: {FRAME_SIZE}-byte UDP frames to the sink's MAC; "
                 "Linux alone and Linux + LinuxFP measured alternately in this run")
            shown["fdb"] = line.dut.run(["bridge", "fdb", "show", "br", "br0"]).stdout
        else:
            _say(f"  traffic: {FRAME_SIZE}-byte UDP frames over the {PREFIXES} prefixes; "
                 "Linux alone and Linux + LinuxFP measured alternately in this run")
        _say()
        raw = throughput.run(rig, plan)
    summary = throughput.summarize(raw["repetitions"], FRAME_SIZE, ("linux", "linuxfp"),
                                   (("linuxfp", "linux"),))

    if as_json:
        print(json.dumps({"scenario": scenario, "summary": summary, "errors": raw["errors"],
                          "graph": shown.get("graph"),
                          "stats": json.loads(shown.get("stats_json") or "null")}))
        return 0 if not raw["errors"] else 1

    if "fdb" in shown:
        _say("The kernel's FDB of br0 (bridge fdb show), which the bridge node mirrors:")
        _say(_indent(shown["fdb"]))
    _say("Synthesized graph in the DUT (linuxfp graph):")
    _say(_indent(shown.get("graph", "(controller did not start)")))
    _say("Fast-path counters after a measurement (linuxfp stats):")
    _say(_indent(shown.get("stats", "(none)")))
    _say(f"Packet rate of the DUT, {FRAME_SIZE}-byte frames (DUT capacity = frames / DUT CPU-seconds):")
    for name, label in (("linux", "Linux alone"), ("linuxfp", "Linux + LinuxFP")):
        s = summary["systems"].get(name)
        if s:
            _say(f"  {label:<16} {s['pps_median'] / 1e6:6.2f} Mpps  ({s['ns_per_packet_median']:.0f} ns/packet, "
                 f"{s.get('valid_measurements', 0)}/{s.get('measurements', 0)} windows valid)")
    ratio = summary["ratios"].get("linuxfp/linux")
    if ratio:
        _say(f"  LinuxFP / Linux: {ratio:.2f}x")
    for name, error in raw["errors"].items():
        _say(f"  {name}: could not be measured: {error}")
    _say(f"All namespaces removed. Full benchmark: linuxfp bench {scenario} (docs/performance.md).")
    return 0 if not raw["errors"] else 1


def _flannel_demo(quick: bool, as_json: bool) -> int:
    """Two Flannel nodes (linuxfp/lab/flannel.py), pod-to-pod round trips and
    TCP bulk with Linux alone and with a controller in each node: the
    benchmark's own run (linuxfp/bench/flannel.py), narrated."""
    from linuxfp.bench import flannel
    from linuxfp.bench.options import Options

    shown: dict[str, str] = {}

    def look(lab) -> None:
        if "graph" not in shown:
            shown["graph"] = linuxfp_cli(lab.namespace("node1").name, "graph").stdout
            shown["stats"] = linuxfp_cli(lab.namespace("node1").name, "stats").stdout
            shown["stats_json"] = linuxfp_cli(lab.namespace("node1").name, "-j", "stats").stdout

    _say("LinuxFP demo: two Kubernetes-style nodes running the real Flannel (etcd, flanneld with its VXLAN "
         "backend, the CNI bridge plugin, kube-proxy-like iptables rules), two pods on each; nothing changed "
         "for LinuxFP but a controller in each node")
    _say("  pod-to-pod UDP round trips and TCP bulk (iperf3), inside node 1 (across cni0) and from node 1 to "
         "node 2 (across cni0, flannel.1 and the underlay); Linux alone and Linux + LinuxFP in this run")
    _say()
    result = flannel.run(Options(quick=quick, repetitions=1 if quick else 2, lab_prefix="lfpdemo"), look=look)
    if as_json:
        print(json.dumps({"scenario": "flannel", "latency": result["latency"], "reductions": result["reductions"],
                          "tcp_bulk": result["tcp_bulk"], "errors": result["errors"], "graph": shown.get("graph"),
                          "stats": json.loads(shown.get("stats_json") or "null")}))
        return 0 if not result["errors"] else 1
    _say("Synthesized graph in node 1 (linuxfp graph):")
    _say(_indent(shown.get("graph", "(controller did not start)")))
    _say("Fast-path counters of node 1 after its measurements (linuxfp stats):")
    _say(_indent(shown.get("stats", "(none)")))
    _say(_indent(flannel.markdown(result)))
    for name, error in result["errors"].items():
        _say(f"  {name}: could not be measured: {error}")
    _say("The lab is down, all namespaces removed. Full benchmark: linuxfp bench flannel (docs/performance.md).")
    return 0 if not result["errors"] else 1


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines()) + "\n"


if __name__ == "__main__":
    sys.exit(run_demo())
