"""`linuxfp bench hooks`: the same function at the XDP hook vs the TC hook
(paper Table VII). The forward function (router node) is measured with the
router's method, then the filter function: the same with the gateway's 100
iptables blacklist rules on the DUT (router + filter nodes), then the
bridge function on the bridged line (bridge node, `linuxfp bench bridge`)."""
from __future__ import annotations

from pathlib import Path

from . import throughput
from .machine import machine
from .options import Options
from .results import fmt_mpps, table, timestamp
from .systems import SYSTEMS
from .gateway import BLACKLIST, blacklist_ruleset
from .rules import measure_with_rules
from .bridge import BRIDGE_SYSTEMS

SYSTEM_NAMES = ("linux", "linuxfp-xdp", "linuxfp-tc")
FRAME_SIZE = 64
PAIRS = (("linuxfp-xdp", "linuxfp-tc"), ("linuxfp-xdp", "linux"), ("linuxfp-tc", "linux"))
NOT_YET: dict[str, str] = {}


def run(options: Options) -> dict:
    started = timestamp()
    plan = throughput.Plan(
        systems=tuple(SYSTEMS[name] for name in SYSTEM_NAMES), frame_sizes=(FRAME_SIZE,),
        repetitions=options.reps(full=20),
        window=throughput.QUICK_WINDOW if options.quick else throughput.FULL_WINDOW,
        retries=0 if options.quick else 1, sentinel=SYSTEMS["upper-bound"])
    with throughput.rig(lab_prefix=options.lab_prefix) as rig:
        throughput.progress(f"hooks: forward function at XDP and TC x {plan.repetitions} repetitions")
        raw = throughput.run(rig, plan)
        method = throughput.method(plan, rig.placement, len(rig.line.prefixes))
        throughput.progress(f"hooks: filter function ({BLACKLIST} iptables rules) at XDP and TC x "
                            f"{plan.repetitions} repetitions")
        filtered, filter_errors = measure_with_rules(rig, plan, blacklist_ruleset())
    bridge_plan = throughput.Plan(systems=BRIDGE_SYSTEMS, frame_sizes=(FRAME_SIZE,), repetitions=plan.repetitions,
                                  window=plan.window, retries=plan.retries)
    with throughput.rig(1, lab_prefix=options.lab_prefix, bridged=True) as rig:
        throughput.progress(f"hooks: bridge function at XDP and TC x {plan.repetitions} repetitions")
        bridged_raw = throughput.run(rig, bridge_plan)
    bridged = throughput.summarize(bridged_raw["repetitions"], FRAME_SIZE, SYSTEM_NAMES, PAIRS)
    summary = throughput.summarize(raw["repetitions"], FRAME_SIZE, SYSTEM_NAMES, PAIRS)
    functions = {"forward": {"supported": True, **_by_hook(summary)},
                 "filter": {"supported": True, "rules": BLACKLIST, **_by_hook(filtered)},
                 "bridge": {"supported": True, **_by_hook(bridged)}}
    functions.update({name: {"supported": False, "reason": why} for name, why in NOT_YET.items()})
    return {
        "scenario": "hooks",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": method,
        "functions": functions,
        "systems": summary["systems"],
        "ratios": summary["ratios"],
        "ratio_spread": summary["ratio_spread"],
        "regime": summary["regime"],
        "by_regime": summary["by_regime"],
        "errors": {**raw["errors"], **{f"filter: {k}": v for k, v in filter_errors.items()},
                   **{f"bridge: {k}": v for k, v in bridged_raw["errors"].items()}},
        "repetitions": raw["repetitions"],
    }


def _by_hook(summary: dict) -> dict:
    out = {}
    for hook in ("xdp", "tc"):
        figures = summary["systems"].get(f"linuxfp-{hook}")
        if figures:
            out[hook] = {"pps_median": figures["pps_median"], "ns_per_packet_median": figures["ns_per_packet_median"]}
    out["xdp/tc"] = summary["ratios"].get("linuxfp-xdp/linuxfp-tc")
    return out


def summary_line(result: dict) -> str:
    shown = []
    for name in ("forward", "filter", "bridge"):
        ratio = result["functions"][name].get("xdp/tc")
        shown.append(f"{name} XDP/TC {ratio:.2f}" if ratio else f"{name}: no valid ratio")
    return f"hooks {'; '.join(shown)}"


def markdown(result: dict) -> str:
    rows = []
    for name, entry in result["functions"].items():
        if not entry["supported"]:
            rows.append([name, "–", "–", "–", "not yet supported: " + entry["reason"]])
            continue
        xdp, tc = entry.get("xdp"), entry.get("tc")
        rows.append([name, fmt_mpps(xdp["pps_median"]) if xdp else "–", fmt_mpps(tc["pps_median"]) if tc else "–",
                     f"{entry['xdp/tc']:.2f}" if entry.get("xdp/tc") else "–", ""])
    return (f"# hooks benchmark, {result['timestamp']}\n\nDUT capacity (Mpps) at 64 B, {result['regime']} "
            "placement.\n\n" + table(["function", "XDP Mpps", "TC Mpps", "XDP/TC", "note"], rows))


def plot(result: dict, path: Path, plt) -> None:
    systems = result["systems"]
    names = list(systems)
    fig, axis = plt.subplots(figsize=(6, 4))
    axis.bar(names, [systems[n]["pps_median"] / 1e6 for n in names])
    axis.set_ylabel("DUT capacity (Mpps), 64 B")
    axis.set_title("forward function: XDP vs TC")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
