"""CPU placement of the measurement: generator on one CPU, the DUT on another.

The DUT's ingress veth runs its NAPI in a kernel thread (threaded NAPI)
pinned to the DUT CPU; the sink's NAPI stays in softirq context so it runs
in that same thread right after each DUT poll (a cross-CPU wake-up per poll
costs the DUT about a fifth of its rate in this guest). GRO stays on at the
DUT's ingress so the veth has NAPI in every mode, with or without XDP.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from .topology import Line

GENERATOR_CPU = 0
DUT_CPU = 1


class PlacementError(RuntimeError):
    pass


@dataclass(frozen=True)
class Placement:
    generator_cpu: int
    dut_cpu: int
    napi_thread_pid: int
    napi_thread_name: str

    def to_dict(self) -> dict:
        return {
            "generator_cpu": self.generator_cpu,
            "dut_cpu": self.dut_cpu,
            "dut_ingress_napi": "threaded, kthread pinned to the DUT CPU",
            "sink_napi": "softirq, runs in the DUT's NAPI thread after each poll",
        }


def cpus_available() -> int:
    return len(os.sched_getaffinity(0))


def require_two_cpus() -> None:
    cpus = os.sched_getaffinity(0)
    if GENERATOR_CPU not in cpus or DUT_CPU not in cpus:
        raise PlacementError(
            f"the throughput method needs CPUs {GENERATOR_CPU} and {DUT_CPU} "
            f"(this process may use {sorted(cpus)}): run on a machine with 2 or more vCPUs")


def _napi_threads(prefix: str) -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith(prefix):
            found[int(entry.name)] = comm
    return found


def configure(line: Line) -> Placement:
    """Threaded NAPI on the DUT ingress pinned to DUT_CPU; this process on GENERATOR_CPU."""
    require_two_cpus()
    dut, ifname = line.dut, line.dut_in.ifname
    dut.run(["ethtool", "-K", ifname, "gro", "on"])
    # The sink must not defer to a thread of its own (see module doc).
    line.sink.run(["sh", "-c", f"echo 0 > /sys/class/net/{line.snk.ifname}/threaded"], check=False)
    dut.run(["sh", "-c", f"echo 1 > /sys/class/net/{ifname}/threaded"])
    prefix = f"napi/{ifname}-"[:15]
    deadline = time.monotonic() + 5
    threads: dict[int, str] = {}
    while time.monotonic() < deadline:
        threads = _napi_threads(prefix)
        if threads:
            break
        time.sleep(0.05)
    if len(threads) != 1:
        raise PlacementError(f"expected one NAPI thread named {prefix}*, found {threads or 'none'}")
    pid, name = next(iter(threads.items()))
    os.sched_setaffinity(pid, {DUT_CPU})
    # The harness, the generator thread and every helper it starts (the
    # controller included) stay off the DUT's CPU.
    os.sched_setaffinity(0, {GENERATOR_CPU})
    return Placement(GENERATOR_CPU, DUT_CPU, pid, name)


def verify(placement: Placement) -> bool:
    """The NAPI thread still exists and is still pinned (attaching XDP can recreate it)."""
    try:
        return os.sched_getaffinity(placement.napi_thread_pid) == {placement.dut_cpu}
    except OSError:
        return False


def release() -> None:
    """Give this process all CPUs back."""
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
