"""The throughput method shared by every throughput scenario: one rig (lab,
placement, sink, accounting, generator), systems installed one at a time in
random order within each repetition, each measured at every frame size."""
from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field

from linuxfp.lab.netns import Lab

from . import placement as cpu_placement
from .accounting import CpuAccounting
from .generator import BATCH_SIZE, SENT_TTL, FrameSpec, Generator
from .measure import Validity, Window, measure
from .sink import Sink
from .stats import ratios, system_summary
from .systems import System
from .topology import Line, build_line

# Windows are short and repetitions many: the host moves this VM's vCPUs
# every few tens of seconds (see `label`), so a repetition must be over
# before that happens to give a usable ratio.
FULL_WINDOW = Window(warmup_s=0.3, measure_s=1.2)
SHORT_WINDOW = Window(warmup_s=0.2, measure_s=0.6)
NEAR_FACTOR = 1.4     # sentinel within this factor of the fastest seen: near placement
STABLE_SPREAD = 1.2   # sentinels before/after a repetition agree within this factor
QUICK_WINDOW = Window(warmup_s=0.15, measure_s=0.3)


def progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Rig:
    """Everything a throughput measurement needs, attached for the rig's lifetime."""

    lab: Lab
    line: Line
    placement: cpu_placement.Placement
    sink: Sink
    accounting: CpuAccounting
    generator: Generator


LOCK_PATH = "/run/lock/linuxfp-bench.lock"


@contextlib.contextmanager
def exclusive_machine() -> Iterator[None]:
    """One throughput measurement on the machine at a time: two would share the DUT CPU."""
    import fcntl
    import os

    os.makedirs(os.path.dirname(LOCK_PATH), exist_ok=True)
    with open(LOCK_PATH, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            progress(f"waiting for another benchmark run ({holder}) to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}\n")
        lock.flush()
        try:
            yield
        finally:
            lock.seek(0)
            lock.truncate()
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def rig(prefixes: int = 50, configure: Callable[[Line], None] | None = None,
        lab_prefix: str = "lfpb", bridged: bool = False, ipv6: bool = False) -> Iterator[Rig]:
    """The measurement topology with everything attached; removed on exit.
    bridged: the DUT is a Linux bridge rather than a router; ipv6: the
    generator sends IPv6 across a dual-stack router."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(exclusive_machine())
        lab = stack.enter_context(Lab(lab_prefix))
        line = build_line(lab, prefixes, bridged=bridged, ipv6=ipv6)
        if configure:
            configure(line)
        placed = cpu_placement.configure(line)
        stack.callback(cpu_placement.release)
        sink = Sink(line)
        stack.callback(sink.close)
        accounting = CpuAccounting(line.dut_in.ifname, line.snk.ifname)
        stack.callback(accounting.close)
        generator = Generator(line, placed.generator_cpu)
        stack.callback(generator.close)
        yield Rig(lab, line, placed, sink, accounting, generator)


@dataclass(frozen=True)
class Plan:
    systems: tuple[System, ...]
    frame_sizes: tuple[int, ...]
    repetitions: int
    window: Window
    retries: int = 1                 # re-measure an invalid window this many times
    validity: Validity = field(default_factory=Validity)
    # Measured before and after every repetition to see whether the host
    # moved the vCPUs meanwhile (see `label`); None: no bracketing.
    sentinel: System | None = None
    seed: int = field(default_factory=lambda: random.randrange(1 << 30))


def method(plan: Plan, placed: cpu_placement.Placement, prefixes: int) -> dict:
    return {
        "generator": "BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES on the source veth, "
                     "XDP_TX into the DUT's ingress ring; one test-run call per measurement, ended by a signal",
        "generator_batch_size": BATCH_SIZE,
        "frame_sizes": list(plan.frame_sizes),
        "frame_size_note": "RFC 2544 frame size including the 4-byte FCS a veth does not carry",
        "traffic": f"UDP, TTL {SENT_TTL}, destinations cycling over {prefixes} routed /24 prefixes",
        "cpu_placement": placed.to_dict(),
        "accounting": "raw tracepoints napi_poll, softirq_entry/exit, sched_switch: DUT CPU time per DUT frame",
        "pps_definition": "DUT capacity = DUT frames / DUT CPU-seconds while saturated",
        "validity": {
            "min_refused_fraction": plan.validity.min_refused_fraction,
            "min_polls_after_full": plan.validity.min_polls_after_full,
            "min_busy_fraction": plan.validity.min_busy_fraction,
            "max_sink_loss_fraction": plan.validity.max_sink_loss_fraction,
            "sink_verifies": "destination/source MAC, TTL, IPv4 header checksum of every frame",
        },
        "window": {"warmup_s": plan.window.warmup_s, "measure_s": plan.window.measure_s},
        "repetitions": plan.repetitions,
        "retries_per_invalid_window": plan.retries,
        "order": "systems in random order within each repetition (seed recorded); ratios within a repetition",
        "seed": plan.seed,
        "sentinel": (f"{plan.sentinel.name} at 64 B before and after each repetition; a repetition is "
                     f"stable if both agree within x{STABLE_SPREAD}, near if both are within "
                     f"x{NEAR_FACTOR} of the fastest sentinel of the run, else far")
                    if plan.sentinel else None,
    }


def _measure_sentinel(rig_: Rig, plan: Plan, frame: FrameSpec) -> float | None:
    """The sentinel's DUT ns/packet, or None if it could not be measured validly."""
    sentinel = plan.sentinel
    if sentinel is None:
        return None
    try:
        with sentinel.install(rig_.line):
            result = _measure_with_retries(rig_, sentinel, frame, plan)
    except Exception as exc:  # noqa: BLE001 - a repetition without sentinel is just not used
        progress(f"sentinel {sentinel.name}: cannot measure: {type(exc).__name__}: {exc}")
        return None
    progress(f"  sentinel {sentinel.name} {frame.frame_size} B: {result['ns_per_packet']:.0f} ns/pkt"
             + ("" if result["valid"] else " (invalid)"))
    return result["ns_per_packet"] if result["valid"] else None


# Entered with the system installed, around its measurement (retries
# included); the dict it yields, filled by its exit, is kept with the
# measurement as "observed".
Observer = Callable[[Rig, System], ContextManager[dict]]


def run(rig_: Rig, plan: Plan, observe: Observer | None = None) -> dict:
    """Measure every system at every frame size, `plan.repetitions` times.

    One repetition = one frame size, every system once in random order,
    bracketed by the sentinel (see Plan); afterwards each repetition is
    labelled stable or not and near or far (see `label`). Returns
    {"repetitions": [...], "errors": {...}}; a system that fails to install
    is recorded under errors and skipped. `observe` (see Observer) records
    more about each measurement, e.g. the datapath's counters."""
    order_rng = random.Random(plan.seed)
    repetitions: list[dict] = []
    errors: dict[str, str] = {}
    for index in range(plan.repetitions):
        for size in plan.frame_sizes:
            frame = FrameSpec(size)
            order = list(plan.systems)
            order_rng.shuffle(order)
            measured: dict[str, dict] = {}
            before = _measure_sentinel(rig_, plan, frame)
            for system in order:
                if system.name in errors:
                    continue
                try:
                    with system.install(rig_.line):
                        with observe(rig_, system) if observe else contextlib.nullcontext({}) as observed:
                            measured[system.name] = _measure_with_retries(rig_, system, frame, plan)
                    if observed:
                        measured[system.name]["observed"] = observed
                    progress(f"[{index + 1}/{plan.repetitions}] " + _describe_dict(measured[system.name]))
                except Exception as exc:  # noqa: BLE001 - one broken system must not cost the others' figures
                    errors[system.name] = f"{type(exc).__name__}: {exc}"
                    progress(f"{system.name}: cannot measure: {errors[system.name]}")
            after = _measure_sentinel(rig_, plan, frame)
            repetitions.append({"repetition": index, "frame_size": size, "order": [s.name for s in order],
                                "sentinel_ns": [before, after], "measurements": measured})
    label(repetitions, plan.sentinel is not None)
    return {"repetitions": repetitions, "errors": errors}


def label(repetitions: list[dict], bracketed: bool) -> None:
    """Mark each repetition stable/unstable and near/far from its sentinel measurements.

    On a virtual machine the host sometimes places the two vCPUs far apart
    (other core complex): every frame handed from the generator's CPU to the
    DUT's then costs over 100 ns more, for every system alike, while neither
    CPU computes any slower. The sentinel (the upper-bound program, whose
    cost is mostly that hand-off) shows which placement a repetition ran in:
    "near" within NEAR_FACTOR of the fastest sentinel seen at that frame
    size, else "far". A
    repetition whose two sentinels disagree by more than STABLE_SPREAD
    changed placement mid-way: its ratios are not used."""
    if not bracketed:
        for repetition in repetitions:
            repetition.update(stable=True, regime="unbracketed")
        return
    fastest_at: dict[int, float] = {}
    for repetition in repetitions:
        for ns in repetition["sentinel_ns"]:
            if ns:
                size = repetition["frame_size"]
                fastest_at[size] = min(ns, fastest_at.get(size, ns))
    for repetition in repetitions:
        before, after = repetition["sentinel_ns"]
        fastest = fastest_at.get(repetition["frame_size"])
        if not (before and after and fastest):
            repetition.update(stable=False, regime="unknown")
            continue
        repetition["stable"] = max(before, after) <= STABLE_SPREAD * min(before, after)
        repetition["regime"] = "near" if max(before, after) <= NEAR_FACTOR * fastest else "far"


def _describe_dict(m: dict) -> str:
    verdict = "valid" if m["valid"] else "INVALID: " + "; ".join(m["invalid_reasons"])
    return (f"{m['system']} {m['frame_size']} B: {m['capacity_pps'] / 1e6:.2f} Mpps "
            f"({m['ns_per_packet']:.0f} ns/pkt, offered {m['offered_pps'] / 1e6:.2f} Mpps) {verdict}")


def _measure_with_retries(rig_: Rig, system: System, frame: FrameSpec, plan: Plan) -> dict:
    attempts = []
    for _ in range(plan.retries + 1):
        result = measure(system.name, frame, rig_.line, rig_.generator, rig_.accounting, rig_.sink,
                         rig_.placement, plan.window, expect=system.expect, rules=plan.validity)
        attempts.append(result)
        if result.valid:
            break
    final = attempts[-1].to_dict()
    final["attempts"] = len(attempts)
    return final


def _summarize_reps(reps: Sequence[Mapping], system_names: Sequence[str],
                    pairs: Sequence[tuple[str, str]]) -> dict:
    systems = {}
    for name in system_names:
        measured = [rep[name] for rep in reps if name in rep]
        if measured:
            systems[name] = system_summary(measured)
    medians, spreads = ratios(reps, pairs)
    return {"systems": systems, "ratios": medians, "ratio_spread": spreads, "repetitions_used": len(reps)}


def summarize(repetitions: Sequence[Mapping], frame_size: int, system_names: Sequence[str],
              pairs: Sequence[tuple[str, str]]) -> dict:
    """systems + ratios for one frame size, in the issue's stable format.

    The headline comes from the stable repetitions of the near placement
    (the one closest to a NIC-fed router, where no frame crosses CPUs); the
    far placement's figures are kept under by_regime. Without any stable
    repetition every repetition is used, and `regime` says so."""
    at_size = [r for r in repetitions if r["frame_size"] == frame_size]
    by_regime = {}
    for regime in ("near", "far", "unbracketed"):
        reps = [r["measurements"] for r in at_size if r.get("stable") and r.get("regime") == regime]
        if reps:
            by_regime[regime] = _summarize_reps(reps, system_names, pairs)
    headline_regime: str | None = next((r for r in ("near", "unbracketed", "far") if r in by_regime), None)
    if headline_regime is None:
        headline_regime = "all (no stable repetition)"
        headline = _summarize_reps([r["measurements"] for r in at_size], system_names, pairs)
    else:
        headline = by_regime[headline_regime]
    return {**headline, "regime": headline_regime, "by_regime": by_regime,
            "unstable_repetitions": sum(1 for r in at_size if not r.get("stable"))}

