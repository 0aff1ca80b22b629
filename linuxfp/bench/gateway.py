"""`linuxfp bench gateway`: the paper's virtual gateway — the router's 50
prefixes plus 100 blacklist rules (iptables FORWARD DROP by source), the
traffic from a source not on the list. Linux alone and LinuxFP (XDP, TC) in
the same repetitions; same-run ratios. The ipset variant (`-m set`) is not
evaluated by the filter node yet: it is reported as such."""
from __future__ import annotations

import ipaddress

from . import throughput
from .machine import machine
from .options import Options
from .results import ratios_line, ratios_table, systems_table, timestamp
from .rules import FRAME_SIZE, PREFIXES, SYSTEM_NAMES, measure_with_rules, systems_plan

BLACKLIST = 100
TARGET = 3.0        # the issue's: LinuxFP ≥ 3× Linux with the same rules


def blacklist_ruleset(count: int = BLACKLIST) -> str:
    """`count` sources (documentation ranges) dropped in FORWARD."""
    sources = [str(a) for net in ("203.0.113.0/24", "198.51.100.0/24", "192.0.2.0/24")
               for a in ipaddress.ip_network(net)][:count]
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
    lines += [f"-A FORWARD -s {source}/32 -j DROP" for source in sources]
    return "\n".join(lines + ["COMMIT"]) + "\n"


def run(options: Options) -> dict:
    started = timestamp()
    plan = systems_plan(options, full_repetitions=10)
    with throughput.rig(PREFIXES, lab_prefix=options.lab_prefix) as rig:
        throughput.progress(f"gateway: {BLACKLIST} blacklist rules, {len(SYSTEM_NAMES)} systems x "
                            f"{plan.repetitions} repetitions")
        summary, errors = measure_with_rules(rig, plan, blacklist_ruleset())
        method = throughput.method(plan, rig.placement, PREFIXES)
    method["rules"] = f"{BLACKLIST} x `-A FORWARD -s <documentation /32> -j DROP`, iptables-nft"
    method["ipset_variant"] = "not measured: the filter node does not evaluate `-m set` yet"
    return {
        "scenario": "gateway",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": method,
        "systems": summary["systems"],
        "ratios": summary["ratios"],
        "ratio_spread": summary["ratio_spread"],
        "regime": summary["regime"],
        "repetitions": summary["repetitions"],
        "targets": {"linuxfp-xdp/linux": TARGET},
        "errors": errors,
    }


def summary_line(result: dict) -> str:
    return ratios_line(f"gateway ({BLACKLIST} rules)", result)


def markdown(result: dict) -> str:
    out = [f"# gateway benchmark, {result['timestamp']}\n\n",
           f"Machine: kernel {result['machine']['kernel']}, {result['machine']['cpus']} CPUs "
           f"({result['machine']['cpu_model']}); {result['method']['rules']}, {PREFIXES} routed prefixes, "
           f"{FRAME_SIZE} B frames{' (quick run)' if result['quick'] else ''}. ipset variant: "
           f"{result['method']['ipset_variant']}.\n\n",
           systems_table(result["systems"]), "\n",
           ratios_table(result["ratio_spread"], {"linuxfp-xdp/linux": TARGET})]
    if result["errors"]:
        out.append("\n## Errors\n\n" + "".join(f"- {k}: {v}\n" for k, v in result["errors"].items()))
    return "".join(out)
