"""`linuxfp bench bridge`: port-to-port bridging, the paper's bridge
function. The benchmark line's DUT becomes a Linux bridge (`ip link add br0
type bridge`, both veths its ports, the generator's and the sink's MACs as
static FDB entries so that nothing floods), the generator addresses the
sink's MAC; frames arrive unchanged (same MACs, TTL untouched). Linux alone
and LinuxFP (XDP, TC) in the same repetitions; same-run ratios.

Then routed into a bridge, as a container host's uplink traffic reaches its
containers: the router line's egress becomes the only port of br0, which
takes over its address (so its MAC too); the routes lead via the sink on the
bridge, whose MAC is a static FDB entry. Frames arrive routed (TTL - 1)."""
from __future__ import annotations

import json

from . import throughput
from .machine import machine
from .options import Options
from .results import ratios_line, ratios_table, systems_table, timestamp
from .systems import System, linux, linuxfp
from .topology import DUT_OUT_IP, LINK_PREFIXLEN, SINK_IP, Line

FRAME_SIZE = 64
PREFIXES = 1
PAIRS = (("linuxfp-xdp", "linux"), ("linuxfp-tc", "linux"), ("linuxfp-tc", "linuxfp-xdp"))
# The targets: XDP ≥ 3× the Linux bridge, TC ≥ 1.5×.
TARGETS = {"linuxfp-xdp/linux": 3.0, "linuxfp-tc/linux": 1.5}

# Bridged frames reach the sink exactly as sent: TTL unchanged.
BRIDGE_SYSTEMS = (
    System("linux", "Linux bridge alone", "ttl_unchanged", linux),
    System("linuxfp-xdp", "LinuxFP controller, XDP hook", "ttl_unchanged", linuxfp("xdp")),
    System("linuxfp-tc", "LinuxFP controller, TC hook", "ttl_unchanged", linuxfp("tc")),
)


# Routed into the bridge: forwarded frames arrive as a router sends them.
ROUTED_SYSTEMS = tuple(System(s.name, s.description, "good", s.install) for s in BRIDGE_SYSTEMS)


def into_bridge(line: Line) -> None:
    """The router line's egress made the only port of br0, which takes over
    its address (and, as the bridge adopts its only port's MAC, its MAC:
    the sink sees the source it expects)."""
    dut, port = line.dut, line.dut_out.ifname
    dut.run(["ip", "addr", "flush", "dev", port])
    dut.run(["ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"])
    dut.disable_ipv6("br0")
    dut.sysctl("net/ipv4/conf/default/rp_filter", 0)
    dut.run(["ip", "link", "set", port, "master", "br0"])
    dut.run(["ip", "link", "set", "br0", "up"])
    dut.run(["ip", "addr", "add", f"{DUT_OUT_IP}/{LINK_PREFIXLEN}", "dev", "br0"])
    dut.sysctl("net/ipv4/conf/br0/rp_filter", 0)
    batch = "".join(f"route add {prefix} via {SINK_IP} dev br0\n" for prefix in line.prefixes)
    dut.run(["ip", "-batch", "-"], input=batch)
    dut.run(["ip", "neigh", "replace", SINK_IP, "lladdr", line.snk.mac, "dev", "br0", "nud", "permanent"])
    dut.run(["bridge", "fdb", "replace", line.snk.mac, "dev", port, "master", "static"])
    bridge_mac = json.loads(dut.run(["ip", "-j", "link", "show", "dev", "br0"]).stdout)[0]["address"]
    if bridge_mac != line.dut_out.mac:
        raise RuntimeError(f"br0 has MAC {bridge_mac}, not its port's {line.dut_out.mac}")


def _measure(options: Options, systems, bridged: bool, configure=None) -> tuple[dict, dict, dict]:
    plan = throughput.Plan(
        systems=systems,
        frame_sizes=(FRAME_SIZE,),
        repetitions=options.reps(full=10),
        window=throughput.QUICK_WINDOW if options.quick else throughput.FULL_WINDOW,
        retries=0 if options.quick else 1,
    )
    names = tuple(s.name for s in systems)
    with throughput.rig(PREFIXES, configure=configure, lab_prefix=options.lab_prefix, bridged=bridged) as rig:
        what = "bridge" if bridged else "routed into a bridge"
        throughput.progress(f"{what}: {len(names)} systems x {plan.repetitions} repetitions")
        raw = throughput.run(rig, plan)
        summary = throughput.summarize(raw["repetitions"], FRAME_SIZE, names, PAIRS)
        method = throughput.method(plan, rig.placement, PREFIXES)
    return raw, summary, method


def run(options: Options) -> dict:
    started = timestamp()
    raw, summary, method = _measure(options, BRIDGE_SYSTEMS, bridged=True)
    routed_raw, routed, _ = _measure(options, ROUTED_SYSTEMS, bridged=False, configure=into_bridge)
    method["bridge"] = ("br0 (ip link, STP off, ageing 300 s, bridge-nf-call-iptables=1 and no rules), "
                        "two veth ports, static FDB entries for the generator's and the sink's MACs")
    method["routed"] = ("the router line with its egress the only port of br0 (which holds the address), "
                        "routes via the sink on br0, the sink's MAC a static FDB entry")
    return {
        "scenario": "bridge",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": method,
        "systems": summary["systems"],
        "ratios": summary["ratios"],
        "ratio_spread": summary["ratio_spread"],
        "regime": summary["regime"],
        "repetitions": raw["repetitions"],
        "targets": TARGETS,
        "errors": raw["errors"],
        "routed": {key: routed[key] for key in ("systems", "ratios", "ratio_spread", "regime")}
        | {"repetitions": routed_raw["repetitions"], "errors": routed_raw["errors"]},
    }


def summary_line(result: dict) -> str:
    line = ratios_line("bridge", result)
    return f"{line}; {ratios_line('routed into it', result['routed'])}" if "routed" in result else line


def markdown(result: dict) -> str:
    out = [f"# bridge benchmark, {result['timestamp']}\n\n",
           f"Machine: kernel {result['machine']['kernel']}, {result['machine']['cpus']} CPUs "
           f"({result['machine']['cpu_model']}); {result['method']['bridge']}; {FRAME_SIZE} B frames"
           f"{' (quick run)' if result['quick'] else ''}. pps = DUT capacity.\n\n",
           systems_table(result["systems"]), "\n", ratios_table(result["ratio_spread"], TARGETS)]
    if "routed" in result:
        out += [f"\n## Routed into the bridge\n\n{result['method']['routed']}.\n\n",
                systems_table(result["routed"]["systems"]), "\n", ratios_table(result["routed"]["ratio_spread"], {})]
    if result["errors"]:
        out.append("\n## Errors\n\n" + "".join(f"- {k}: {v}\n" for k, v in result["errors"].items()))
    return "".join(out)
