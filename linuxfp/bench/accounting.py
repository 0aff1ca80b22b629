"""Per-CPU time and frame accounting from raw tracepoints (bpf/accounting.c)."""
from __future__ import annotations

import struct
from dataclasses import dataclass

from linuxfp import datapath as dp
from linuxfp.datapath.fds import OwnedFd

from . import programs

ROLES = ("dut", "sink", "napi_other", "idle", "task")
ROLE_SLOTS = 8
_FIELDS = ("ns", "frames", "polls", "full_polls", "polls_after_full", "last_was_full", "post_ns")
_LAYOUT = struct.Struct("<QQ" + f"{ROLE_SLOTS}Q" * len(_FIELDS) + "Q")
_TRACEPOINTS = {
    "bench_napi_poll": "napi_poll",
    "bench_softirq_entry": "softirq_entry",
    "bench_softirq_exit": "softirq_exit",
    "bench_sched_switch": "sched_switch",
}


@dataclass(frozen=True)
class CpuSample:
    """Cumulative counters of one CPU; subtract two samples for a window."""

    ns: dict[str, int]
    frames: dict[str, int]
    polls: dict[str, int]
    full_polls: dict[str, int]
    polls_after_full: dict[str, int]
    post_ns: dict[str, int]
    switches: int

    @classmethod
    def decode(cls, raw: bytes) -> CpuSample:
        values = _LAYOUT.unpack_from(raw)
        fields = {}
        for position, name in enumerate(_FIELDS):
            start = 2 + position * ROLE_SLOTS
            fields[name] = {role: values[start + index] for index, role in enumerate(ROLES)}
        return cls(fields["ns"], fields["frames"], fields["polls"], fields["full_polls"],
                   fields["polls_after_full"], fields["post_ns"], values[-1])

    def __sub__(self, earlier: CpuSample) -> CpuSample:
        def minus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
            return {key: a[key] - b[key] for key in a}

        return CpuSample(minus(self.ns, earlier.ns), minus(self.frames, earlier.frames),
                         minus(self.polls, earlier.polls), minus(self.full_polls, earlier.full_polls),
                         minus(self.polls_after_full, earlier.polls_after_full),
                         minus(self.post_ns, earlier.post_ns), self.switches - earlier.switches)

    @property
    def total_ns(self) -> int:
        return sum(self.ns.values())

    @property
    def busy_fraction(self) -> float:
        total = self.total_ns
        return 1.0 - self.ns["idle"] / total if total else 0.0


class CpuAccounting:
    """Attached for its lifetime; `sample(cpu)` reads one CPU's counters."""

    def __init__(self, dut_ifname: str, sink_ifname: str) -> None:
        self._obj = programs.load("accounting")
        roles = self._obj.map("acct_roles")
        for ifname, role in ((dut_ifname, 0), (sink_ifname, 1)):
            roles.update(ifname.encode().ljust(16, b"\0"), role.to_bytes(4, "little"))
        roles.close()
        self._state = self._obj.map("acct_state")
        self._links: list[OwnedFd] = []
        try:
            for prog_name, tracepoint in _TRACEPOINTS.items():
                prog = self._obj.program(prog_name)
                self._links.append(dp.attach_raw_tracepoint(prog.fd, tracepoint))
                prog.close()
        except BaseException:
            self.close()
            raise

    def sample(self, cpu: int) -> CpuSample:
        values = self._state.lookup_percpu(b"\0\0\0\0")
        if values is None:
            raise RuntimeError("accounting map has no entry")
        return CpuSample.decode(values[cpu])

    def close(self) -> None:
        for link in self._links:
            link.close()
        self._links = []
        self._state.close()
        self._obj.close()
