"""`linuxfp bench router`: the paper's virtual router (Fig. 5/6, Table III).

50 prefixes set with iproute2 on the DUT; Linux, LinuxFP (XDP and TC), the
upper bound and the reference forwarder measured in the same run, at 64 B and
1500 B (1518 B frames)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from . import throughput
from .generator import FrameSpec
from .machine import machine
from .options import Options
from .results import fmt_mpps, table, timestamp
from .systems import SYSTEMS

SYSTEM_NAMES = ("linux", "linuxfp-xdp", "linuxfp-tc", "upper-bound", "reference")
FRAME_SIZES = (64, 1518)
PREFIXES = 50
PAIRS = (
    ("linuxfp-xdp", "linux"), ("linuxfp-tc", "linux"), ("reference", "linux"), ("upper-bound", "linux"),
    ("linuxfp-xdp", "upper-bound"), ("linuxfp-xdp", "reference"), ("linuxfp-tc", "upper-bound"),
    ("linuxfp-tc", "reference"), ("reference", "upper-bound"), ("linuxfp-tc", "linuxfp-xdp"),
)
# The targets, as (ratio, minimum): shown next to the figures.
TARGETS = {"linuxfp-xdp/linux": 3.0, "linuxfp-xdp/upper-bound": 0.60}
# Besides the steady flows (one per prefix): traffic that tests the FIB-answer
# cache (generator.TRAFFIC), 64 B only, against the two XDP references.
TRAFFIC_ROWS = {
    "destinations": "10 000 destinations (200 per prefix)",
    "all-new": "every frame a new (source, destination): no cached answer",
}
TRAFFIC_SYSTEMS = ("linuxfp-xdp", "reference", "upper-bound")
TRAFFIC_PAIRS = (("linuxfp-xdp", "upper-bound"), ("linuxfp-xdp", "reference"), ("reference", "upper-bound"))
TRAFFIC_TARGETS = {"destinations": {"linuxfp-xdp/upper-bound": 0.8, "linuxfp-xdp/reference": 1.5},
                   "all-new": {"linuxfp-xdp/reference": 1.0}}
HEADLINE = ("linuxfp-xdp/linux", "linuxfp-xdp/upper-bound", "linuxfp-xdp/reference")


def plan(options: Options, frame_sizes: tuple[int, ...]) -> throughput.Plan:
    """The five systems at `frame_sizes` (router and router6)."""
    return throughput.Plan(
        systems=tuple(SYSTEMS[name] for name in SYSTEM_NAMES),
        frame_sizes=frame_sizes,
        repetitions=options.reps(full=20),
        window=throughput.QUICK_WINDOW if options.quick else throughput.FULL_WINDOW,
        retries=0 if options.quick else 1,
        sentinel=SYSTEMS["upper-bound"],
    )


def result(scenario: str, options: Options, started: str, method: dict, raw: dict,
           frame_sizes: tuple[int, ...], targets: dict) -> dict:
    """The results file of a router run: the first frame size is the headline."""
    by_size = {str(size): throughput.summarize(raw["repetitions"], size, SYSTEM_NAMES, PAIRS)
               for size in frame_sizes}
    headline = by_size[str(frame_sizes[0])]
    return {
        "scenario": scenario,
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": method,
        "systems": headline["systems"],
        "ratios": headline["ratios"],
        "ratio_spread": headline["ratio_spread"],
        "regime": headline["regime"],
        "frame_sizes": by_size,
        "targets": targets,
        "errors": dict(raw["errors"]),
        "repetitions": raw["repetitions"],
    }


def run(options: Options) -> dict:
    started = timestamp()
    steady = plan(options, FRAME_SIZES)
    with throughput.rig(PREFIXES, lab_prefix=options.lab_prefix) as rig:
        throughput.progress(f"router: {len(SYSTEM_NAMES)} systems x {len(FRAME_SIZES)} frame sizes "
                            f"x {steady.repetitions} repetitions")
        raw = throughput.run(rig, steady)
        method = throughput.method(steady, rig.placement, PREFIXES)
        method["sample_frame_64"] = rig.generator.sample_frame(FrameSpec(64)).hex()
        traffic_plan = replace(steady, systems=tuple(SYSTEMS[name] for name in TRAFFIC_SYSTEMS), frame_sizes=(64,))
        traffic_raw = {}
        for name, label in TRAFFIC_ROWS.items():
            throughput.progress(f"router: 64 B, {label}")
            rig.generator.set_traffic(name)
            traffic_raw[name] = throughput.run(rig, traffic_plan)
        rig.generator.set_traffic("steady")
    out = result("router", options, started, method, raw, FRAME_SIZES, TARGETS)
    out["traffic"] = {name: {"label": TRAFFIC_ROWS[name], "targets": TRAFFIC_TARGETS[name],
                             **throughput.summarize(r["repetitions"], 64, TRAFFIC_SYSTEMS, TRAFFIC_PAIRS)}
                      for name, r in traffic_raw.items()}
    out["errors"].update({f"{name}: {k}": v for name, r in traffic_raw.items() for k, v in r["errors"].items()})
    return out


def summary_line(result: dict) -> str:
    parts = []
    for size, data in result["frame_sizes"].items():
        shown = ", ".join(f"{key} {data['ratios'][key]:.2f}" for key in HEADLINE if key in data["ratios"])
        parts.append(f"{size} B: {shown or 'no valid ratios'}")
    for name, data in result.get("traffic", {}).items():
        shown = ", ".join(f"{key} {value:.2f}" for key, value in data["ratios"].items() if key.startswith("linuxfp"))
        parts.append(f"64 B {name}: {shown or 'no valid ratios'}")
    errors = f"; errors: {', '.join(result['errors'])}" if result["errors"] else ""
    return "router " + " | ".join(parts) + errors


def markdown(result: dict) -> str:
    """router's and router6's: the first frame size is the one targets hold for."""
    headline_size = next(iter(result["frame_sizes"]), "64")
    targets = result.get("targets", TARGETS)
    out = [f"# {result['scenario']} benchmark, {result['timestamp']}\n",
           (f"Machine: kernel {result['machine']['kernel']}, {result['machine']['cpus']} CPUs "
            f"({result['machine']['cpu_model']}); {result['method']['repetitions']} repetitions"
            f"{' (quick run)' if result['quick'] else ''}. pps = DUT capacity (DUT frames per DUT CPU-second).\n")]
    for size, data in result["frame_sizes"].items():
        out.append(f"\n## {size} B frames\n\nHeadline from the {data['regime']} placement "
                   f"({data.get('repetitions_used', 0)} stable repetitions; "
                   f"{data['unstable_repetitions']} unstable ones not used).\n\n")
        out.append(_tables(data, size, targets, headline_size))
        for regime, other in data["by_regime"].items():
            if regime != data["regime"]:
                out.append(f"\n### {size} B, {regime} placement ({other['repetitions_used']} stable repetitions)\n\n")
                out.append(_tables(other, size, targets, headline_size))
    for data in result.get("traffic", {}).values():
        out.append(f"\n## 64 B frames, {data['label']}\n\nHeadline from the {data['regime']} placement.\n\n")
        out.append(_tables(data, "64", data["targets"]))
    if result["errors"]:
        out.append("\n## Errors\n\n" + "".join(f"- {k}: {v}\n" for k, v in result["errors"].items()))
    return "".join(out)


def _tables(data: dict, size: str, targets: dict = TARGETS, headline_size: str = "64") -> str:
    rows = []
    for name, s in data["systems"].items():
        rows.append([name, fmt_mpps(s["pps_median"]), f"{fmt_mpps(s['pps_min'])}–{fmt_mpps(s['pps_max'])}",
                     f"{s['ns_per_packet_median']:.0f}", fmt_mpps(s["offered_pps_median"]),
                     f"{s['valid_measurements']}/{s['measurements']}"])
    ratio_rows = []
    for key, spread in data["ratio_spread"].items():
        target = targets.get(key)
        verdict = "" if target is None or size != headline_size else (
            f"≥ {target:g}: {'met' if spread['median'] >= target else 'missed'}")
        ratio_rows.append([key, f"{spread['median']:.2f}", f"{spread['min']:.2f}–{spread['max']:.2f}",
                           str(spread["n"]), verdict])
    return (table(["system", "Mpps (median)", "min–max", "ns/packet", "offered Mpps", "valid"], rows) + "\n"
            + table(["ratio", "median", "min–max", "repetitions", "target"], ratio_rows))


def plot(result: dict, path: Path, plt) -> None:
    sizes = list(result["frame_sizes"])
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.5), squeeze=False)
    for axis, size in zip(axes[0], sizes):
        systems = result["frame_sizes"][size]["systems"]
        names = list(systems)
        medians = [systems[n]["pps_median"] / 1e6 for n in names]
        low = [m - systems[n]["pps_min"] / 1e6 for m, n in zip(medians, names)]
        high = [systems[n]["pps_max"] / 1e6 - m for m, n in zip(medians, names)]
        colors = ["#888888" if n == "linux" else "#1f77b4" if n.startswith("linuxfp") else "#bbbbbb"
                  for n in names]
        axis.bar(names, medians, yerr=[low, high], capsize=4, color=colors)
        for x, value in enumerate(medians):
            axis.text(x, value, f"{value:.2f}", ha="center", va="bottom", fontsize=8)
        axis.set_title(f"{result['scenario']}, {size} B frames ({result['frame_sizes'][size]['regime']} placement)")
        axis.set_ylabel("DUT capacity (Mpps)")
        axis.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
