"""`linuxfp bench watch`: what the watches of legacy iptables and of sysctls
(bpf_modules/controller.c), and the filter node's of netfilter netlink
messages (bpf_modules/filter_watch.c, a raw tracepoint on every sendmsg of
the host), cost the host's processes. The cgroup programs
run on every setsockopt and every /proc/sys access of every process while a
controller runs (a raw tracepoint on every system call, the alternative,
cost +120 ns on each), so the figure is ns per system call with and without
a controller, measured in the controller's own namespace, alternating the
two systems to cancel drift."""
from __future__ import annotations

import statistics

from controller.launcher import ControllerProcess
from linuxfp.lab.netns import Lab
from linuxfp.lab.topology import RouterTopology

from .machine import machine
from .options import Options
from .programs import build_c_tool
from .results import table, timestamp
from .throughput import progress

KINDS = {
    "getppid": "nothing runs (not a setsockopt)",
    "setsockopt": "SO_PRIORITY on a UDP socket: the program runs and lets it pass",
    "sysctl-read": "pread of a net/ sysctl: the sysctl program runs and returns at once",
    "sysctl-write": "pwrite of a net/ sysctl's own value: the sysctl program counts it and the controller "
                    "re-reads (the datapath passes meanwhile)",
    "send": "one byte over an AF_UNIX datagram pair and back: the filter node's raw tracepoint on every "
            "sendmsg runs and returns (not netfilter netlink)",
}
SYSTEMS = ("no controller", "controller")
CALLS = 1_000_000


def _ns_per_call(lab_ns, tool, kind: str, calls: int) -> float:
    out = lab_ns.run([str(tool), kind, str(calls)]).stdout
    return float(out.strip())


def run(options: Options) -> dict:
    started = timestamp()
    tool = build_c_tool("syscalls", "the system call timer")
    repetitions = options.reps(full=7, quick=1)
    calls = CALLS // 10 if options.quick else CALLS
    samples = {system: {kind: [] for kind in KINDS} for system in SYSTEMS}
    with Lab(options.lab_prefix) as lab:
        router = RouterTopology(prefixes=2)(lab)
        for repetition in range(repetitions):
            progress(f"watch: repetition {repetition + 1}/{repetitions}")
            for system in SYSTEMS if repetition % 2 == 0 else reversed(SYSTEMS):
                if system == "controller":
                    with ControllerProcess(router.dut.name) as controller:
                        controller.settled()
                        for kind in KINDS:
                            samples[system][kind].append(_ns_per_call(router.dut, tool, kind, calls))
                        if "watch unavailable" in controller.stderr():
                            raise RuntimeError(f"the watch did not attach:\n{controller.stderr()}")
                else:
                    for kind in KINDS:
                        samples[system][kind].append(_ns_per_call(router.dut, tool, kind, calls))
    medians = {system: {kind: round(statistics.median(v), 1) for kind, v in by_kind.items()}
               for system, by_kind in samples.items()}
    added = {kind: round(medians["controller"][kind] - medians["no controller"][kind], 1) for kind in KINDS}
    return {
        "scenario": "watch",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": {"calls_per_sample": calls, "repetitions": repetitions, "kinds": KINDS,
                   "where": "in the accelerated namespace, the two systems alternated"},
        "ns_per_call": medians,
        "added_ns_per_call": added,
        "samples": samples,
        "errors": [],
    }


def summary_line(result: dict) -> str:
    return "watch: " + ", ".join(
        f"{kind} +{added:.1f} ns/call ({result['ns_per_call']['no controller'][kind]:.1f} → "
        f"{result['ns_per_call']['controller'][kind]:.1f})"
        for kind, added in result["added_ns_per_call"].items())


def markdown(result: dict) -> str:
    rows = [[kind, f"{result['ns_per_call']['no controller'][kind]:.1f}",
             f"{result['ns_per_call']['controller'][kind]:.1f}", f"{added:+.1f}", KINDS[kind]]
            for kind, added in result["added_ns_per_call"].items()]
    return (f"# watch benchmark, {result['timestamp']}\n\n"
            "ns per system call in the accelerated namespace, median of "
            f"{result['method']['repetitions']} samples of {result['method']['calls_per_sample']} calls.\n\n"
            + table(["call", "no controller", "controller", "added", "what the watch does"], rows))
