"""`linuxfp bench chain`: N = 1 … 10 no-op functions chained by inline calls
vs by tail calls, then a MAC rewrite + redirect (paper Fig. 10).

The same per-stage work in both variants; what differs is only how control
passes from one stage to the next. Measured with the router's method, on
the router topology, against the sink's TTL-unchanged check."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from linuxfp.lab.netns import entered

from . import programs, throughput
from .machine import machine
from .options import Options
from .results import fmt_mpps, table, timestamp
from .systems import SYSTEMS, System, on_dut_ingress
from .topology import Line

FULL_LENGTHS = tuple(range(1, 11))
QUICK_LENGTHS = (1, 10)
FRAME_SIZE = 64
VARIANTS = ("inline", "tail")
TARGET_INLINE_LOSS = 0.01   # inline chaining loses < 1 % from N = 1 to 10


def system_name(variant: str, length: int) -> str:
    return f"{variant}-{length}"


def _install(variant: str, length: int):
    @contextlib.contextmanager
    def install(line: Line) -> Iterator[None]:
        defines = {"CHAIN_N": length, "CHAIN_TAIL": int(variant == "tail")}
        obj = programs.load("chain", defines=defines, rodata={
            "chain_dst_mac": programs.mac_bytes(line.snk.mac),
            "chain_src_mac": programs.mac_bytes(line.dut_out.mac),
        })
        held: list = []
        try:
            egress = obj.map("chain_egress")
            held.append(egress)
            with entered(line.dut):
                egress.update((0).to_bytes(4, "little"), line.dut_out.ifindex.to_bytes(4, "little"))
            if variant == "tail":
                stages = obj.map("chain_stages")
                held.append(stages)
                names = [f"chain_stage_{i}" for i in range(length)] + ["chain_last"]
                for slot, name in enumerate(names):
                    prog = obj.program(name)
                    held.append(prog)
                    stages.update(slot.to_bytes(4, "little"), prog.fd.to_bytes(4, "little"))
                entry = obj.program("chain_stage_0")
            else:
                entry = obj.program("chain_entry")
            held.append(entry)
            with on_dut_ingress(line, entry):
                yield
        finally:
            for item in held:
                item.close()
            obj.close()

    return install


def chain_systems(lengths: tuple[int, ...]) -> tuple[System, ...]:
    return tuple(
        System(system_name(variant, n), f"{n} no-op stage(s) by {variant} calls, then MAC rewrite + redirect",
               "ttl_unchanged", _install(variant, n))
        for variant in VARIANTS for n in lengths)


def _slope_ns(systems: dict, variant: str, lengths: tuple[int, ...]) -> float | None:
    """Least-squares ns per added stage, from the median ns/packet at each N."""
    points = [(n, systems[system_name(variant, n)]["ns_per_packet_median"])
              for n in lengths if system_name(variant, n) in systems]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    denominator = sum((x - mean_x) ** 2 for x, _ in points)
    return round(sum((x - mean_x) * (y - mean_y) for x, y in points) / denominator, 2)


def run(options: Options) -> dict:
    started = timestamp()
    lengths = QUICK_LENGTHS if options.quick else FULL_LENGTHS
    systems = chain_systems(lengths)
    plan = throughput.Plan(
        systems=systems, frame_sizes=(FRAME_SIZE,), repetitions=options.reps(full=20),
        window=throughput.QUICK_WINDOW if options.quick else throughput.SHORT_WINDOW,
        retries=0 if options.quick else 1,
        sentinel=SYSTEMS["upper-bound"])
    with throughput.rig(lab_prefix=options.lab_prefix) as rig:
        throughput.progress(f"chain: {len(systems)} programs x {plan.repetitions} repetitions")
        raw = throughput.run(rig, plan)
        method = throughput.method(plan, rig.placement, len(rig.line.prefixes))
    first, last = lengths[0], lengths[-1]
    pairs = [(system_name(v, last), system_name(v, first)) for v in VARIANTS]
    pairs += [(system_name("tail", n), system_name("inline", n)) for n in lengths]
    summary = throughput.summarize(raw["repetitions"], FRAME_SIZE, [s.name for s in systems], pairs)
    per_stage = {variant: _slope_ns(summary["systems"], variant, lengths) for variant in VARIANTS}
    return {
        "scenario": "chain",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": {**method, "lengths": list(lengths),
                   "stage": "bounds-check the Ethernet header, compare the EtherType with a load-time constant"},
        "systems": summary["systems"],
        "ratios": summary["ratios"],
        "ratio_spread": summary["ratio_spread"],
        "regime": summary["regime"],
        "by_regime": summary["by_regime"],
        "ns_per_added_stage": per_stage,
        "targets": {f"{system_name('inline', last)}/{system_name('inline', first)}": 1 - TARGET_INLINE_LOSS},
        "errors": raw["errors"],
        "repetitions": raw["repetitions"],
    }


def summary_line(result: dict) -> str:
    lengths = result["method"]["lengths"]
    first, last = lengths[0], lengths[-1]
    parts = []
    for variant in VARIANTS:
        key = f"{variant}-{last}/{variant}-{first}"
        if key in result["ratios"]:
            slope = result["ns_per_added_stage"].get(variant)
            parts.append(f"{variant} N={last}/N={first} {result['ratios'][key]:.3f}"
                         + (f" ({slope:+.1f} ns/stage)" if slope is not None else ""))
    return "chain " + (", ".join(parts) if parts else "no valid ratios")


def markdown(result: dict) -> str:
    lengths = result["method"]["lengths"]
    rows = []
    for n in lengths:
        row = [str(n)]
        for variant in VARIANTS:
            s = result["systems"].get(system_name(variant, n))
            row += [fmt_mpps(s["pps_median"]), f"{s['ns_per_packet_median']:.1f}",
                    f"{s['valid_measurements']}/{s['measurements']}"] if s else ["–", "–", "–"]
        rows.append(row)
    out = [f"# chain benchmark, {result['timestamp']}\n\n",
           ("N no-op stages then MAC rewrite + devmap redirect; DUT capacity at 64 B; "
            f"{result['regime']} placement.\n\n"),
           table(["N", "inline Mpps", "inline ns", "valid", "tail Mpps", "tail ns", "valid"], rows),
           "\nns per added stage (least squares): "
           + ", ".join(f"{v}: {s if s is not None else '–'}" for v, s in result["ns_per_added_stage"].items())
           + "\n\n"]
    ratio_rows = [[k, f"{v['median']:.3f}", f"{v['min']:.3f}–{v['max']:.3f}", str(v["n"])]
                  for k, v in result["ratio_spread"].items()]
    out.append(table(["ratio", "median", "min–max", "repetitions"], ratio_rows))
    return "".join(out)


def plot(result: dict, path: Path, plt) -> None:
    lengths = result["method"]["lengths"]
    fig, axis = plt.subplots(figsize=(7, 4.5))
    for variant, marker in zip(VARIANTS, ("o", "s")):
        xs, ys, low, high = [], [], [], []
        for n in lengths:
            s = result["systems"].get(system_name(variant, n))
            if s:
                xs.append(n)
                ys.append(s["pps_median"] / 1e6)
                low.append(ys[-1] - s["pps_min"] / 1e6)
                high.append(s["pps_max"] / 1e6 - ys[-1])
        axis.errorbar(xs, ys, yerr=[low, high], marker=marker, capsize=3, label=f"{variant} calls")
    axis.set_xlabel("number of chained no-op functions (N)")
    axis.set_ylabel("DUT capacity (Mpps)")
    axis.set_title("chaining: inline calls vs tail calls, 64 B")
    axis.set_ylim(bottom=0)
    axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
