"""`linuxfp bench breakdown`: where the router's nanoseconds go, at XDP and
at TC.

Each hook's ladder climbs from the upper bound (rewrite MACs, redirect) to
LinuxFP's router one step of the real datapath at a time (bpf/ladder.c
calls the datapath's own functions, against the maps of a controller
running in the DUT and on that controller's link), then the real LinuxFP
datapath of that hook, all in the same run with the router's method; the
plain bpf_fib_lookup forwarder is measured beside them. The cost of each
step is the difference in DUT ns/packet between neighbouring rungs, taken
within each repetition."""
from __future__ import annotations

import contextlib
import itertools
import statistics
from collections.abc import Iterator
from pathlib import Path

from controller.launcher import ControllerProcess, layout_of, linuxfp_stats
from controller.shared_maps import IF_COUNTERS_MAP, SharedMaps
from controller.views import status
from linuxfp.datapath import BpfObject, Link, Map, Program, bind_map
from linuxfp.synth import compile_source
from linuxfp.synth.render import counters_define

from . import programs, throughput
from .machine import machine
from .options import Options
from .results import table, timestamp
from .systems import SYSTEMS, System
from .topology import Line

RUNGS = (
    (1, "MAC rewrite + redirect (at XDP through the controller's devmap): the upper bound"),
    (2, "+ the pipeline's start (its namespace check, the ingress's counters) and parse (Ethernet, VLAN checks, IPv4), TTL check "
        "and decrement"),
    (3, "+ the lease check (its address generation too), no tcx program of another tool on the ingress"),
    (4, "+ the ingress's facts: addressed to this host, no mark"),
    (5, "+ IPv4 header validation (lengths, checksum, fragments) and martians"),
    (6, "+ forwarding switches, local source (prefilter, then hash), route MTU cap"),
    (7, "+ the FIB cache's probe: kernel generations (CO-RE), per-CPU epoch, slot"),
    (8, "+ the answer served from the FIB cache, hit counted"),
    (9, "+ the transmit node: neighbour state, TTL, rewrite, redirect, counted"),
)
QUICK_RUNGS = {"xdp": (1, 5, 9), "tc": (1, 9)}
HOOKS = ("xdp", "tc")
FRAME_SIZE = 64
# What the rungs read from the controller's maps: without one of them the
# ladder would measure an empty map, not the router.
_REQUIRED_MAPS = ("lfp_ifaces", "lfp_lease", "lfp_nfnl_sent", "lfp_local_src", "lfp_local_hint",
                  "lfp_fib_policy", "lfp_fib_cache", "lfp_fib_epochs", "lfp_neigh_watch", "lfp_neigh",
                  "lfp_neigh_hint")
_REQUIRED_AT = {"xdp": ("lfp_tx_ports",), "tc": ("lfp_peers", "lfp_counters")}


def rung_name(hook: str, rung: int) -> str:
    return f"{hook}-rung-{rung}"


def ladder_source(hook: str, rung: int) -> str:
    """bpf/ladder.c for `rung` at `hook`, behind the datapath's own headers
    and counter ids, as that hook's pipeline sees them."""
    return (f"#define LADDER {rung}\n#define LFP_HOOK_{hook.upper()} 1\n{counters_define()}\n"
            '#include "router.h"\n#include "transmit.h"\n#line 1 "ladder.c"\n'
            + (programs.BPF_DIR / "ladder.c").read_text())


def _share_controller_maps(obj: BpfObject, line: Line, layout, hook: str, held: list) -> None:
    """Make `obj` use the maps the controller keeps (so it counts into the
    ingress's counters), appending them to `held` for the caller to close."""
    shared = SharedMaps(layout)
    try:
        missing = [name for name in _REQUIRED_MAPS + _REQUIRED_AT[hook] if shared.get(name) is None]
        if missing:
            raise RuntimeError(f"breakdown: the controller in {line.dut.name} has not pinned {', '.join(missing)}")
        for name in obj.map_names():
            if name == IF_COUNTERS_MAP:       # XDP: the ingress's own counter array
                held.append(Map.from_pinned(layout.counters_pin(line.dut_in.ifindex)))
            elif shared.get(name) is not None:
                held.append(Map.from_fd(shared.get(name).fd))  # (a duplicate: SharedMaps closes its own)
            else:
                continue          # .rodata, and maps no rung reads
            obj.reuse_map(name, held[-1])
    finally:
        shared.close()


def _cache_off_count(line: Line) -> int:
    """Packets the ingress's program probed no FIB cache slot for, the cache
    off or in a storm of misses (rungs 7-9 count them as the router does,
    then hand the packet to the kernel)."""
    stats = linuxfp_stats(line.dut.name)
    ingress = next(i for i in stats["interfaces"] if i["ifname"] == line.dut_in.ifname)
    events = ingress["nodes"].get("router", {}).get("events", {})
    return events.get("fib_cache_off", 0) + events.get("fib_cache_storm", 0)


def _controller_link(layout, line: Line, hook: str) -> Link:
    """The link (XDP, or tcx at TC) the controller holds on the DUT's ingress."""
    for entry in status(layout)["interfaces"]:
        if entry["ifindex"] == line.dut_in.ifindex and entry["hook"] == hook and entry["state"] == "active":
            return Link.from_id(entry["link_id"])
    raise RuntimeError(f"breakdown: the controller in {line.dut.name} has no {hook} program on "
                       f"{line.dut_in.ifname}")


def _install(hook: str, rung: int):
    @contextlib.contextmanager
    def install(line: Line) -> Iterator[None]:
        with ControllerProcess(line.dut.name, hook=hook), contextlib.ExitStack() as held:
            layout = layout_of(line.dut.name)
            obj = held.enter_context(BpfObject.open(compile_source(ladder_source(hook, rung)).data,
                                                    name="bench_ladder"))
            maps: list[Map] = []
            held.callback(lambda: [m.close() for m in maps])
            _share_controller_maps(obj, line, layout, hook, maps)
            obj.set_rodata({
                **({"lfp_ingress_ifindex": line.dut_in.ifindex} if hook == "xdp" else {}),
                "lfp_netns_cookie": layout.cookie,
                "ladder_dst_mac": programs.mac_bytes(line.snk.mac),
                "ladder_src_mac": programs.mac_bytes(line.dut_out.mac),
                "ladder_egress": line.dut_out.ifindex,
            })
            obj.load()
            prog = held.enter_context(contextlib.closing(obj.program("lfp_ladder")))
            # The controller takes a tcx program for its own by the lease map
            # it uses (linuxfp/state/tcx.py); the low rungs read none.
            bind_map(prog.fd, obj.map("lfp_lease").fd)
            link = held.enter_context(contextlib.closing(_controller_link(layout, line, hook)))
            original = held.enter_context(contextlib.closing(Program.from_id(link.prog_id)))
            # On the controller's own link: no second attachment, and the
            # controller's program is back before the controller stops.
            cache_off = _cache_off_count(line)
            link.update(prog)
            try:
                yield
                # (a controller that replaced its program meanwhile was measured instead)
                if link.prog_id != prog.id:
                    raise RuntimeError(f"breakdown: the controller replaced {hook}-rung-{rung} during the measurement")
                # rungs 7-9 measure the cache: where it is off they measured the kernel or plain lookups
                if _cache_off_count(line) != cache_off:
                    raise RuntimeError(f"breakdown: the FIB cache is off in {line.dut.name} (linuxfp graph says "
                                       f"why) or in a storm of misses: {hook}-rung-{rung} measured without it")
            finally:
                if link.prog_id == prog.id:
                    link.update(original)

    return install


def climb(hook: str, rungs: tuple[int, ...]) -> tuple[System, ...]:
    """One hook's ladder, then the real datapath it climbs to."""
    described = dict(RUNGS)
    ladder = tuple(System(rung_name(hook, r), f"{hook}: {described[r]}", "ttl_unchanged" if r == 1 else "good",
                          _install(hook, r))
                   for r in rungs)
    return ladder + (SYSTEMS[f"linuxfp-{hook}"],)


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
    rungs = {hook: QUICK_RUNGS[hook] if options.quick else tuple(r for r, _ in RUNGS) for hook in HOOKS}
    climbs = {hook: climb(hook, rungs[hook]) for hook in HOOKS}
    # the reference forwarder is measured beside the ladders, not as a step
    systems = tuple(s for hook in HOOKS for s in climbs[hook]) + (SYSTEMS["reference"],)
    plan = throughput.Plan(systems=systems, frame_sizes=(FRAME_SIZE,), repetitions=options.reps(full=20),
                           window=throughput.QUICK_WINDOW if options.quick else throughput.FULL_WINDOW,
                           retries=0 if options.quick else 1,
        sentinel=SYSTEMS["upper-bound"])
    with throughput.rig(lab_prefix=options.lab_prefix) as rig:
        throughput.progress(f"breakdown: {len(systems)} programs x {plan.repetitions} repetitions")
        raw = throughput.run(rig, plan)
        method = throughput.method(plan, rig.placement, len(rig.line.prefixes))
    names = [s.name for s in systems]
    pairs = [("linuxfp-xdp", "reference"), ("linuxfp-tc", "linuxfp-xdp"),
             (rung_name("tc", rungs["tc"][0]), rung_name("xdp", rungs["xdp"][0]))]
    for hook in HOOKS:
        bottom, top = rung_name(hook, rungs[hook][0]), rung_name(hook, rungs[hook][-1])
        pairs += [(s.name, bottom) for s in climbs[hook][1:]] + [(f"linuxfp-{hook}", top)]
    summary = throughput.summarize(raw["repetitions"], FRAME_SIZE, names, pairs)
    chosen = headline_repetitions(raw["repetitions"], summary["regime"])
    return {
        "scenario": "breakdown",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": {**method, "rungs": {s.name: s.description for hook in HOOKS for s in climbs[hook][:-1]}},
        "systems": summary["systems"],
        "ratios": summary["ratios"],
        "ratio_spread": summary["ratio_spread"],
        "regime": summary["regime"],
        "by_regime": summary["by_regime"],
        "steps": [step for hook in HOOKS for step in steps(chosen, [s.name for s in climbs[hook]])],
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
        what = described.get(name) or SYSTEMS[name].description
        rows.append([name, what, f"{s['ns_per_packet_median']:.0f}",
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
