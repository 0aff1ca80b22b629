"""The differential harness's handle for Linux + LinuxFP: a controller in the
DUT whose counters are read after every step (what `linuxfp -j stats` prints; they are
cumulative per interface), and the pass/drop reasons summed from them."""
from __future__ import annotations

import contextlib

from controller.launcher import ControllerProcess, linuxfp_stats, wait_lease_current


class Counting:
    def __init__(self, controller: ControllerProcess, dut: str, then=None) -> None:
        self.controller, self.dut, self.then = controller, dut, then
        self.stats: list[dict] = []

    def settled(self) -> None:
        self.controller.settled()
        # and the fast path may act: a watched table's change (legacy
        # iptables, ipsets) is re-read before the lease says so
        wait_lease_current(self.dut)
        self.stats.append(linuxfp_stats(self.dut))
        if self.then is not None:
            self.then()


def absorbed(seen: list[Counting], change) -> None:
    """Make `change()`; with LinuxFP in the system (a handle in `seen`), wait
    until its controller has absorbed it — until then the datapath hands a
    watched table's traffic to the kernel, which the fast-path assertions
    after the burst would miss."""
    applied = seen[0].controller.applied if seen else 0
    change()
    if seen:
        seen[0].controller.wait_applied(applied)


def counting(seen: list[Counting], hook: str, warm_up=None):
    """An `accelerate` for run_differential; each handle is appended to `seen`.
    `warm_up(topology)`, if given, runs once the controller is current after
    every step (a reload may outlast what a step's own warm-up prepared)."""
    @contextlib.contextmanager
    def accelerate(topology):
        with ControllerProcess(topology.dut.name, hook=hook) as controller:
            then = (lambda: warm_up(topology)) if warm_up else None
            handle = Counting(controller, topology.dut.name, then)
            seen.append(handle)
            yield handle
    return accelerate


def reasons(stats: dict, kinds: tuple[str, ...] = ("passed", "drops")) -> dict[str, int]:
    """Every pass (and drop) reason, summed over the interfaces; ("fast",):
    how the fast path sent what it sent (forwarded, into_peer, ...)."""
    totals: dict[str, int] = {}
    for entry in stats["interfaces"]:
        for node in entry["nodes"].values():
            for kind in kinds:
                for name, value in node[kind].items():
                    totals[name] = totals.get(name, 0) + value
    return totals
