"""`linuxfp bench rules`: forwarding rate against the number of iptables
FORWARD rules, none of which the traffic matches (issue 8: Linux walks them
all for every packet; the filter node's classifier should not notice).

For each rule count the same rules are restored on the DUT with
iptables-restore (iptables-nft), then Linux alone and LinuxFP are measured in
the same repetition; ratios are same-run. Two workloads: steady flows (the
generator's fixed 5-tuples over the routed prefixes) and every packet a new
5-tuple (the source port counts up), which no flow cache helps."""
from __future__ import annotations

from collections.abc import Callable

from linuxfp.lab.rulesets import unmatched_ruleset

from . import throughput
from .generator import BENCH_UDP_PORT
from .machine import machine
from .options import Options
from .results import fmt_mpps, table, timestamp
from .systems import SYSTEMS

SYSTEM_NAMES = ("linux", "linuxfp-xdp", "linuxfp-tc")
PAIRS = (("linuxfp-xdp", "linux"), ("linuxfp-tc", "linux"), ("linuxfp-tc", "linuxfp-xdp"))
COUNTS = (1, 10, 100, 1000, 10000)
QUICK_COUNTS = (1, 1000)
PREFIXES = 50
FRAME_SIZE = 64
# The targets: at 1 000 rules LinuxFP ≥ 30× Linux; at 10 000 within
# 10 % of its own 1-rule rate.
TARGET_RATIO_1000 = 30.0
TARGET_FLATNESS = 0.90
# steady: the generator's fixed flows (the filter's verdict cache hits);
# new-tuples: every frame a new source port (every frame misses it).
WORKLOADS = {"steady": False, "new-tuples": True}


def run(options: Options) -> dict:
    started = timestamp()
    counts = QUICK_COUNTS if options.quick else COUNTS
    plan = systems_plan(options, full_repetitions=5)
    by_workload: dict[str, dict] = {name: {} for name in WORKLOADS}
    errors = {}
    with throughput.rig(PREFIXES, lab_prefix=options.lab_prefix) as rig:
        for count in counts:
            for workload, new_tuples in WORKLOADS.items():
                throughput.progress(f"rules: {count} rule(s), {workload}, {len(SYSTEM_NAMES)} systems x "
                                    f"{plan.repetitions} repetitions")
                rig.generator.set_new_tuples(new_tuples)
                by_workload[workload][str(count)], failed = measure_with_rules(
                    rig, plan, unmatched_ruleset(count, BENCH_UDP_PORT))
                errors.update({f"{count} rules, {workload}: {k}": v for k, v in failed.items()})
        rig.generator.set_new_tuples(False)
        method = throughput.method(plan, rig.placement, PREFIXES)
    method["rules"] = ("N x `-A FORWARD -s <documentation /32> -d 198.19.0.0/16 -p udp -m udp --dport <1024+> "
                       "-j DROP`, policy ACCEPT, iptables-nft; the traffic (198.18.0.1 -> 198.19.x.1 udp/9) "
                       "matches none")
    return {
        "scenario": "rules",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": method,
        "counts": by_workload["steady"],
        "new_tuples": by_workload["new-tuples"],
        "flatness": _flatness(by_workload["steady"]),
        "flatness_new_tuples": _flatness(by_workload["new-tuples"]),
        "errors": errors,
    }


def systems_plan(options: Options, full_repetitions: int, frame_size: int = FRAME_SIZE) -> throughput.Plan:
    """Linux, LinuxFP XDP and TC at `frame_size`: the plan of the scenarios
    that measure rulesets."""
    return throughput.Plan(
        systems=tuple(SYSTEMS[name] for name in SYSTEM_NAMES),
        frame_sizes=(frame_size,),
        repetitions=options.reps(full=full_repetitions),
        window=throughput.QUICK_WINDOW if options.quick else throughput.FULL_WINDOW,
        retries=0 if options.quick else 1,
    )


def measure_with_rules(rig, plan, ruleset: str, prepare: Callable[[throughput.Rig], None] | None = None,
                       observe: throughput.Observer | None = None,
                       restore: str = "iptables-restore") -> tuple[dict, dict]:
    """Every system of `plan` with `ruleset` restored on the DUT by
    `restore` (iptables-nft's, or ip6tables-nft's): the summary at the
    plan's frame size and the errors. `prepare` runs once after the
    restore, before any system is installed (e.g. to establish
    connections); `observe` as in throughput.run."""
    rig.line.dut.run([restore], input=ruleset)
    if prepare:
        prepare(rig)
    names = tuple(system.name for system in plan.systems)
    pairs = tuple((a, b) for a, b in PAIRS if a in names and b in names)
    raw = throughput.run(rig, plan, observe)
    return ({**throughput.summarize(raw["repetitions"], plan.frame_sizes[0], names, pairs),
             "repetitions": raw["repetitions"]}, raw["errors"])


def _flatness(by_count: dict) -> dict:
    """Per system, its rate at the largest count over its rate at 1 rule."""
    if "1" not in by_count or len(by_count) < 2:
        return {}
    last = by_count[max(by_count, key=int)]
    out = {}
    for name, first in by_count["1"]["systems"].items():
        other = last["systems"].get(name)
        if other and first.get("pps_median"):
            out[name] = other["pps_median"] / first["pps_median"]
    return out


def summary_line(result: dict) -> str:
    lines = []
    for workload, key, flat_key in (("steady", "counts", "flatness"), ("new-tuples", "new_tuples", "flatness_new_tuples")):
        parts = []
        for count, data in result[key].items():
            ratio = data["ratios"].get("linuxfp-xdp/linux")
            xdp = data["systems"].get("linuxfp-xdp", {}).get("pps_median")
            parts.append(f"{count}: xdp {fmt_mpps(xdp) if xdp else '-'} Mpps"
                         + (f" ({ratio:.1f}x linux)" if ratio else ""))
        flat = result[flat_key].get("linuxfp-xdp")
        lines.append(f"{workload}: " + " | ".join(parts) + (f"; xdp largest/1 rule {flat:.2f}" if flat else ""))
    return "rules " + "; ".join(lines)


def markdown(result: dict) -> str:
    out = [f"# rules benchmark, {result['timestamp']}\n\n",
           f"Machine: kernel {result['machine']['kernel']}, {result['machine']['cpus']} CPUs "
           f"({result['machine']['cpu_model']}); {result['method']['rules']}"
           f"{' (quick run)' if result['quick'] else ''}. pps = DUT capacity.\n\n"]
    for title, key, flat_key in (("Steady flows", "counts", "flatness"),
                                 ("Every packet a new 5-tuple", "new_tuples", "flatness_new_tuples")):
        rows = []
        for count, data in result[key].items():
            systems, ratios = data["systems"], data["ratios"]
            rows.append([count] + [f"{fmt_mpps(systems[n]['pps_median'])} ({systems[n]['ns_per_packet_median']:.0f} ns)"
                                   if n in systems else "-" for n in SYSTEM_NAMES]
                        + [f"{ratios[k]:.2f}" if k in ratios else "-" for k in ("linuxfp-xdp/linux", "linuxfp-tc/linux")])
        out.append(f"## {title}\n\n")
        out.append(table(["rules"] + [f"{n} Mpps (ns/packet)" for n in SYSTEM_NAMES] + ["xdp/linux", "tc/linux"],
                         rows))
        if result[flat_key]:
            out.append("\nRate at the largest count over the 1-rule rate: "
                       + ", ".join(f"{k} {v:.2f}" for k, v in result[flat_key].items())
                       + f" (target for LinuxFP ≥ {TARGET_FLATNESS:g}; at 1 000 rules xdp/linux ≥ "
                       f"{TARGET_RATIO_1000:g}).\n\n")
    if result["errors"]:
        out.append("\n## Errors\n\n" + "".join(f"- {k}: {v}\n" for k, v in result["errors"].items()))
    return "".join(out)
