"""`linuxfp bench breakdown`: where the router's nanoseconds go.

Climbs from the upper bound (rewrite MACs, redirect) to a LinuxFP-like
router one feature at a time (bpf/ladder.c), then the real LinuxFP XDP
datapath, all in the same run with the router's method. The cost of each
feature is the difference in DUT ns/packet between neighbouring rungs,
taken within each repetition."""
from __future__ import annotations

import contextlib
import ipaddress
import itertools
import statistics
import struct
from collections.abc import Iterator
from pathlib import Path

from linuxfp.lab.netns import entered

from . import programs, throughput
from .machine import machine
from .options import Options
from .results import table, timestamp
from .systems import SYSTEMS, System, on_dut_ingress
from .topology import DUT_IN_IP, DUT_OUT_IP, GEN_IP, SINK_IP, Line

RUNGS = (
    (1, "MAC rewrite + devmap redirect (upper bound)"),
    (2, "+ parse Ethernet/IPv4, TTL check and decrement"),
    (3, "+ bpf_fib_lookup, MACs from the FIB (reference forwarder)"),
    (4, "+ bpf_redirect(ifindex) instead of a devmap"),
    (5, "+ per-interface facts: 2 hash lookups (ingress MAC/flags, egress flags)"),
    (6, "+ local-source hash lookup"),
    (7, "+ IPv4 header validation (checksum, lengths, fragments, martians)"),
    (8, "+ per-CPU counter increment"),
    (9, "+ L4 ports in the FIB lookup"),
    (10, "+ next-hop neighbour state: hash lookup keyed by (ifindex, address)"),
)
QUICK_RUNGS = (1, 3, 10)
FRAME_SIZE = 64
_IFACE = struct.Struct("<II6s2s")
_FORWARDING, _XDP_TX = 1 << 0, 1 << 2


def rung_name(rung: int) -> str:
    return f"rung-{rung}"


def _install(rung: int):
    @contextlib.contextmanager
    def install(line: Line) -> Iterator[None]:
        obj = programs.load("ladder", defines={"LADDER": rung}, rodata={
            "ladder_dst_mac": programs.mac_bytes(line.snk.mac),
            "ladder_src_mac": programs.mac_bytes(line.dut_out.mac),
            "ladder_egress": line.dut_out.ifindex,
        })
        held: list = []
        try:
            devmap, ifaces, local = obj.map("ladder_devmap"), obj.map("ladder_ifaces"), obj.map("ladder_local_src")
            held += [devmap, ifaces, local]
            u32 = lambda value: value.to_bytes(4, "little")
            with entered(line.dut):  # devmap ifindexes resolve in the caller's namespace
                devmap.update(u32(line.dut_out.ifindex), u32(line.dut_out.ifindex))
            for port in (line.dut_in, line.dut_out):
                ifaces.update(u32(port.ifindex), _IFACE.pack(_FORWARDING | _XDP_TX, 1500,
                                                             programs.mac_bytes(port.mac), b"\0\0"))
            for address in (DUT_IN_IP, DUT_OUT_IP):
                local.update(ipaddress.ip_address(address).packed, b"\1")
            neigh = obj.map("ladder_neigh")
            held.append(neigh)
            for port, address in ((line.dut_out, SINK_IP), (line.dut_in, GEN_IP)):
                neigh.update(u32(port.ifindex) + ipaddress.ip_address(address).packed, b"\1")
            prog = obj.program("bench_ladder")
            held.append(prog)
            with on_dut_ingress(line, prog):
                yield
        finally:
            for item in held:
                item.close()
            obj.close()

    return install


def breakdown_systems(rungs: tuple[int, ...]) -> tuple[System, ...]:
    described = dict(RUNGS)
    ladder = tuple(System(rung_name(r), described[r], "ttl_unchanged" if r == 1 else "good", _install(r))
                   for r in rungs)
    return ladder + (SYSTEMS["linuxfp-xdp"],)


def headline_repetitions(repetitions: list[dict], regime: str) -> list[dict]:
    chosen = [r for r in repetitions if r.get("stable") and r.get("regime") == regime]
    return chosen or repetitions


def steps(repetitions: list[dict], names: list[str]) -> list[dict]:
    """ns/packet added by each system over the previous one, median of per-repetition differences."""
    out = []
    for previous, current in itertools.pairwise(names):
        deltas = []
        for repetition in repetitions:
            a, b = repetition["measurements"].get(previous), repetition["measurements"].get(current)
            if a and b and a["valid"] and b["valid"]:
                deltas.append(b["ns_per_packet"] - a["ns_per_packet"])
        out.append({"from": previous, "to": current, "added_ns_median": round(statistics.median(deltas), 1)
                    if deltas else None, "min": round(min(deltas), 1) if deltas else None,
                    "max": round(max(deltas), 1) if deltas else None, "n": len(deltas)})
    return out


def run(options: Options) -> dict:
    started = timestamp()
    rungs = QUICK_RUNGS if options.quick else tuple(r for r, _ in RUNGS)
    systems = breakdown_systems(rungs)
    plan = throughput.Plan(systems=systems, frame_sizes=(FRAME_SIZE,), repetitions=options.reps(full=20),
                           window=throughput.QUICK_WINDOW if options.quick else throughput.FULL_WINDOW,
                           retries=0 if options.quick else 1,
        sentinel=SYSTEMS["upper-bound"])
    with throughput.rig(lab_prefix=options.lab_prefix) as rig:
        throughput.progress(f"breakdown: {len(systems)} programs x {plan.repetitions} repetitions")
        raw = throughput.run(rig, plan)
        method = throughput.method(plan, rig.placement, len(rig.line.prefixes))
    names = [s.name for s in systems]
    pairs = [(name, rung_name(rungs[0])) for name in names[1:]] + [("linuxfp-xdp", rung_name(rungs[-1]))]
    summary = throughput.summarize(raw["repetitions"], FRAME_SIZE, names, pairs)
    return {
        "scenario": "breakdown",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": {**method, "rungs": {rung_name(r): d for r, d in RUNGS if r in rungs}},
        "systems": summary["systems"],
        "ratios": summary["ratios"],
        "ratio_spread": summary["ratio_spread"],
        "regime": summary["regime"],
        "by_regime": summary["by_regime"],
        "steps": steps(headline_repetitions(raw["repetitions"], summary["regime"]), names),
        "errors": raw["errors"],
        "repetitions": raw["repetitions"],
    }


def summary_line(result: dict) -> str:
    shown = [f"{s['to']} {s['added_ns_median']:+.0f} ns" for s in result["steps"] if s["added_ns_median"] is not None]
    return "breakdown (ns/packet added): " + ", ".join(shown)


def markdown(result: dict) -> str:
    described = result["method"]["rungs"]
    added = {s["to"]: s for s in result["steps"]}
    rows = []
    for name, s in result["systems"].items():
        step = added.get(name)
        rows.append([name, described.get(name, "the real LinuxFP XDP datapath"), f"{s['ns_per_packet_median']:.0f}",
                     f"{s['pps_median'] / 1e6:.2f}",
                     f"{step['added_ns_median']:+.1f} ({step['min']:+.0f}…{step['max']:+.0f})"
                     if step and step["added_ns_median"] is not None else "",
                     f"{s['valid_measurements']}/{s['measurements']}"])
    return (f"# breakdown benchmark, {result['timestamp']}\n\nDUT ns/packet at 64 B ({result['regime']} "
            "placement); 'added' = median over repetitions of the difference to the previous row, measured in "
            "the same repetition.\n\n"
            + table(["system", "what", "ns/packet", "Mpps", "added ns (min…max)", "valid"], rows))


def plot(result: dict, path: Path, plt) -> None:
    names = list(result["systems"])
    fig, axis = plt.subplots(figsize=(9, 4.5))
    values = [result["systems"][n]["ns_per_packet_median"] for n in names]
    axis.bar(names, values, color=["#1f77b4" if n.startswith("linuxfp") else "#999999" for n in names])
    for x, value in enumerate(values):
        axis.text(x, value, f"{value:.0f}", ha="center", va="bottom", fontsize=8)
    axis.set_ylabel("DUT ns per packet (64 B)")
    axis.set_title("from the upper bound to LinuxFP, one feature at a time")
    axis.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
