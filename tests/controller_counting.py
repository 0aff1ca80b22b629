"""The differential harness's handle for Linux + LinuxFP: a controller in the
DUT whose counters are read after every step (`linuxfp -j stats`; they are
cumulative per interface), and the pass/drop reasons summed from them."""
from __future__ import annotations

import contextlib
import json

from controller.launcher import ControllerProcess, linuxfp_cli


class Counting:
    def __init__(self, controller: ControllerProcess, dut: str) -> None:
        self.controller, self.dut = controller, dut
        self.stats: list[dict] = []

    def settled(self) -> None:
        self.controller.settled()
        self.stats.append(json.loads(linuxfp_cli(self.dut, "-j", "stats").stdout))


def counting(seen: list[Counting], hook: str):
    """An `accelerate` for run_differential; each handle is appended to `seen`."""
    @contextlib.contextmanager
    def accelerate(topology):
        with ControllerProcess(topology.dut.name, hook=hook) as controller:
            handle = Counting(controller, topology.dut.name)
            seen.append(handle)
            yield handle
    return accelerate


def reasons(stats: dict, kinds: tuple[str, ...] = ("passed", "drops")) -> dict[str, int]:
    """Every pass (and drop) reason, summed over the interfaces."""
    totals: dict[str, int] = {}
    for entry in stats["interfaces"]:
        for node in entry["nodes"].values():
            for kind in kinds:
                for name, value in node[kind].items():
                    totals[name] = totals.get(name, 0) + value
    return totals
