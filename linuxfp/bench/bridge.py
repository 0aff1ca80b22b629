"""`linuxfp bench bridge`: port-to-port bridging, the paper's bridge
function. The benchmark line's DUT becomes a Linux bridge (`ip link add br0
type bridge`, both veths its ports, the generator's and the sink's MACs as
static FDB entries so that nothing floods), the generator addresses the
sink's MAC; frames arrive unchanged (same MACs, TTL untouched). Linux alone
and LinuxFP (XDP, TC) in the same repetitions; same-run ratios."""
from __future__ import annotations

from . import throughput
from .machine import machine
from .options import Options
from .results import ratios_line, ratios_table, systems_table, timestamp
from .systems import System, linux, linuxfp

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


def run(options: Options) -> dict:
    started = timestamp()
    plan = throughput.Plan(
        systems=BRIDGE_SYSTEMS,
        frame_sizes=(FRAME_SIZE,),
        repetitions=options.reps(full=10),
        window=throughput.QUICK_WINDOW if options.quick else throughput.FULL_WINDOW,
        retries=0 if options.quick else 1,
    )
    names = tuple(s.name for s in BRIDGE_SYSTEMS)
    with throughput.rig(PREFIXES, lab_prefix=options.lab_prefix, bridged=True) as rig:
        throughput.progress(f"bridge: {len(names)} systems x {plan.repetitions} repetitions")
        raw = throughput.run(rig, plan)
        summary = throughput.summarize(raw["repetitions"], FRAME_SIZE, names, PAIRS)
        method = throughput.method(plan, rig.placement, PREFIXES)
    method["bridge"] = ("br0 (ip link, STP off, ageing 300 s, bridge-nf-call-iptables=1 and no rules), "
                        "two veth ports, static FDB entries for the generator's and the sink's MACs")
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
    }


def summary_line(result: dict) -> str:
    return ratios_line("bridge", result)


def markdown(result: dict) -> str:
    out = [f"# bridge benchmark, {result['timestamp']}\n\n",
           f"Machine: kernel {result['machine']['kernel']}, {result['machine']['cpus']} CPUs "
           f"({result['machine']['cpu_model']}); {result['method']['bridge']}; {FRAME_SIZE} B frames"
           f"{' (quick run)' if result['quick'] else ''}. pps = DUT capacity.\n\n",
           systems_table(result["systems"]), "\n", ratios_table(result["ratio_spread"], TARGETS)]
    if result["errors"]:
        out.append("\n## Errors\n\n" + "".join(f"- {k}: {v}\n" for k, v in result["errors"].items()))
    return "".join(out)
