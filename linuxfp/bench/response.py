"""`linuxfp bench response`: how fast configuration changes take effect
(paper Table VI, plus route/neighbour changes).

Each command runs as an operator types it (`ip`, `brctl`, `iptables`,
`ipset` inside the DUT's namespace), ≥ 100 times in full runs, undone
between repetitions. Per command:
- the controller's own response time, from its `applied … ms` line (netlink
  message received → datapath updated, or found unchanged);
- the end-to-end time from the command's start until probe traffic obeys the
  new configuration (first arrival at the sink of what must now arrive, or
  the last arrival of what must stop), for Linux alone and with LinuxFP;
- the time the kernel carries the traffic after the command: from its end
  until the lease lets the datapath act again (a watched change — legacy
  iptables, nf_tables, ipsets, sysctls without events — makes every packet
  go to the kernel until the controller has re-read it; 0 where the lease
  never showed a change);
- the command's own run time (process start-up included), for scale.
Commands whose effect the controller does not handle yet say so instead of
reporting a number."""
from __future__ import annotations

import contextlib
import re
import secrets
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from controller.launcher import ControllerProcess, layout_of
from controller.views import lease_acts, lease_state
from linuxfp.lab.netns import Lab, entered

from .machine import machine
from .options import Options
from .probes import PROBE_INTERVAL_S, ProbeStream
from .results import table, timestamp
from .sink import Sink
from .stats import percentile
from .throughput import exclusive_machine, progress
from .topology import SINK_IP, Line, build_line

TARGET_P50_MS = 0.3
TARGET_P99_MS = 2.0
FIRST_RESPONSE_TIMEOUT_S = 1.5     # netfilter changes may only be seen by the 1 s poll
NO_EVENT_TIMEOUT_S = 0.25          # once a command has shown it produces no event
QUIET_S = 0.03                     # no further `applied` line for this long: settled
OBEY_TIMEOUT_S = 1.0
LEASE_TIMEOUT_S = 3.0              # a watched change in flight counts as done after 2 s
STOPPED_AFTER_S = 0.02             # no probe for this long (probes every ~0.1 ms): stopped
_APPLIED = re.compile(r"^applied (\S*) ([0-9.]+) ms datapath (updated|unchanged)")
OTHER_MAC = "02:b0:00:00:00:01"


@dataclass(frozen=True)
class Effect:
    """What probe traffic to `daddr` must do at the sink once the command took effect."""

    kind: str    # "appears" or "disappears"
    daddr: str
    dmac: str    # the destination MAC the sink sees on those probes


@dataclass(frozen=True)
class Step:
    command: str                          # how results name it
    action: tuple[str, ...] | Callable[[], None]   # argv run in the DUT, or an in-process change
    effect: Effect | None
    measured: bool = True


@dataclass(frozen=True)
class Cycle:
    """A change and its undo, repeated; setup/teardown are not measured."""

    name: str
    steps: tuple[Step, ...]
    setup: tuple[tuple[str, ...], ...] = ()
    teardown: tuple[tuple[str, ...], ...] = ()
    note: str = ""


def _delete_nft_table(line: Line, family: int, name: str) -> Callable[[], None]:
    """iptables-nft has no command that removes its table; netlink does."""
    def delete() -> None:
        from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
        from pyroute2.netlink.nfnetlink import nftsocket
        from pyroute2.nftables.main import NFTables

        with entered(line.dut):
            nft = NFTables(nfgen_family=family)
        try:
            msg = nftsocket.nft_table_msg()
            msg["attrs"] = [("NFTA_TABLE_NAME", name)]
            nft.begin()
            nft.request_put(msg, msg_type=nftsocket.NFT_MSG_DELTABLE, msg_flags=NLM_F_REQUEST | NLM_F_ACK)
            nft.commit()
        finally:
            nft.close()

    return delete


# Members of the large set: a blocklist's size in full runs; quick runs (the
# tests') keep its setup short.
LARGE_SET = 100_000
LARGE_SET_QUICK = 10_000


def cycles(line: Line, tag: str, large_set: int = LARGE_SET) -> tuple[Cycle, ...]:
    out, sink_mac = line.dut_out.ifname, line.snk.mac
    new_prefix, new_dst = "198.19.250.0/24", "198.19.250.1"
    neigh_dst, local_dst, filtered_dst, set_member = (line.prefix_address(0), line.prefix_address(1),
                                                      line.prefix_address(2), line.prefix_address(3))
    bridge, port_bridge, port, ipset_name = f"brc{tag}", f"brp{tag}", f"bpa{tag}", f"blk{tag}"
    big_set, big_member = f"big{tag}", line.prefix_address(4)
    nft_table = f"lfpb{tag}"
    return (
        Cycle("route", (
            Step("ip route add", ("ip", "route", "add", new_prefix, "via", SINK_IP, "dev", out),
                 Effect("appears", new_dst, sink_mac)),
            Step("ip route del", ("ip", "route", "del", new_prefix),
                 Effect("disappears", new_dst, sink_mac)),
        )),
        Cycle("neighbour", (
            Step("ip neigh change", ("ip", "neigh", "replace", SINK_IP, "lladdr", OTHER_MAC, "dev", out,
                                     "nud", "permanent"), Effect("appears", neigh_dst, OTHER_MAC)),
            Step("ip neigh change", ("ip", "neigh", "replace", SINK_IP, "lladdr", sink_mac, "dev", out,
                                     "nud", "permanent"), Effect("appears", neigh_dst, sink_mac)),
        )),
        Cycle("address", (
            Step("ip addr add", ("ip", "addr", "add", f"{local_dst}/32", "dev", out),
                 Effect("disappears", local_dst, sink_mac)),
            Step("ip addr del", ("ip", "addr", "del", f"{local_dst}/32", "dev", out),
                 Effect("appears", local_dst, sink_mac)),
        )),
        Cycle("bridge", (
            Step("brctl addbr", ("brctl", "addbr", bridge), None),
            Step("brctl delbr", ("brctl", "delbr", bridge), None),
        ), note="a bridge is the bridge node's: its tables follow it in and out (a removal's batches no longer "
                "wait out the kernel's unregistering: docs/performance.md)"),
        Cycle("bridge port", (
            Step("brctl addif", ("brctl", "addif", port_bridge, port), None),
            Step("brctl delif", ("brctl", "delif", port_bridge, port), None),
        # An ifb port gets a TC program: a veth would get a device-bound XDP
        # program, and this kernel (6.18) has oopsed (a use-after-free in
        # bpf_dev_bound_netdev_unregister) deleting a veth right after such
        # programs were replaced on it again and again.
        ), setup=(("ip", "link", "add", port, "type", "ifb"),
                  ("ip", "link", "set", port, "up"),
                  ("brctl", "addbr", port_bridge)),
           teardown=(("ip", "link", "del", port), ("ip", "link", "del", port_bridge)),
           note="a port joins the bridge node's pipeline, and leaves it"),
        Cycle("iptables", (
            Step("iptables -A FORWARD", ("iptables", "-A", "FORWARD", "-d", f"{filtered_dst}/32", "-j", "DROP"),
                 Effect("disappears", filtered_dst, sink_mac)),
            Step("nft delete table ip filter", _delete_nft_table(line, socket.AF_INET, "filter"),
                 Effect("appears", filtered_dst, sink_mac)),
        ), note="the first rule brings the filter node in (every pipeline reloaded with it), deleting the "
                "table takes it out again; from the commit on (the kernel's nf_tables generation) the datapath "
                "hands packets to the kernel until the change is applied"),
        Cycle("iptables rules", (
            Step("iptables -A (filter present)", ("iptables", "-A", "FORWARD", "-d", f"{filtered_dst}/32", "-j",
                                                  "DROP"), Effect("disappears", filtered_dst, sink_mac)),
            Step("iptables -D (filter present)", ("iptables", "-D", "FORWARD", "-d", f"{filtered_dst}/32", "-j",
                                                  "DROP"), Effect("appears", filtered_dst, sink_mac)),
        ), setup=(("iptables", "-A", "FORWARD", "-d", "203.0.113.250/32", "-j", "DROP"),),
           teardown=(("iptables", "-F", "FORWARD"),),
           note="only rule contents change: no compile, no reload; the controller re-reads the rules "
                "(decoded from nf_tables), rebuilds the classifier and writes the new generation"),
        Cycle("iptables rules, many present", (
            Step(f"iptables -A ({MANY_RULES} rules present)", ("iptables", "-A", "FORWARD", "-d", f"{filtered_dst}/32",
                                                                "-j", "DROP"), Effect("disappears", filtered_dst, sink_mac)),
            Step(f"iptables -D ({MANY_RULES} rules present)", ("iptables", "-D", "FORWARD", "-d", f"{filtered_dst}/32",
                                                                "-j", "DROP"), Effect("appears", filtered_dst, sink_mac)),
        ), setup=(("bash", "-o", "pipefail", "-c",
                   f"{shlex.quote(sys.executable)} -c '{_BIG_SET_MEMBERS}' - {MANY_RULES} | "
                   "awk 'BEGIN { print \"*filter\" } { print \"-A FORWARD -d \" $3 \"/32 -j DROP\" } "
                   "END { print \"COMMIT\" }' | iptables-restore --noflush"),),
           teardown=(("iptables", "-F", "FORWARD"),),
           note=f"a gateway's blocklist of {MANY_RULES} rules (one -d each, the addresses the large set "
                "holds, outside the routed prefixes): the rules are read, compiled and classified again whole at each change, so this grows with "
                "the rule count (docs/performance.md)"),
        Cycle("iptables policy", (
            Step("iptables -P FORWARD DROP", ("iptables", "-P", "FORWARD", "DROP"),
                 Effect("disappears", filtered_dst, sink_mac)),
            Step("iptables -P FORWARD ACCEPT", ("iptables", "-P", "FORWARD", "ACCEPT"),
                 Effect("appears", filtered_dst, sink_mac)),
        ), setup=(("iptables", "-A", "FORWARD", "-d", "203.0.113.250/32", "-j", "DROP"),),
           teardown=(("iptables", "-P", "FORWARD", "ACCEPT"), ("iptables", "-F", "FORWARD")),
           note="a chain's policy: a new classifier generation, as a rule change"),
        Cycle("nft rules", (
            Step("nft add rule", ("nft", "add", "rule", "inet", nft_table, "lfpfwd", "ip", "daddr", filtered_dst,
                                  "drop"), Effect("disappears", filtered_dst, sink_mac)),
            Step("nft flush chain", ("nft", "flush", "chain", "inet", nft_table, "lfpfwd"),
                 Effect("appears", filtered_dst, sink_mac)),
        ), setup=(("nft", "add", "table", "inet", nft_table),
                  ("nft", "add", "chain", "inet", nft_table, "lfpfwd",
                   "{ type filter hook forward priority 0 ; policy accept ; }")),
           teardown=(("nft", "delete", "table", "inet", nft_table),),
           note="a native nftables chain on the forward hook: empty, it does nothing and forwarding stays in "
                "the fast path; its first rule brings the filter node in (every pipeline reloaded with it), "
                "which evaluates the chain, and flushing it takes the node out again (from the commit on, "
                "the datapath hands packets to the kernel until the change is applied)"),
        Cycle("nft rules (filter present)", (
            Step("nft add rule (filter present)", ("nft", "add", "rule", "inet", nft_table, "lfpfwd", "ip", "daddr",
                                                   filtered_dst, "drop"), Effect("disappears", filtered_dst, sink_mac)),
            Step("nft flush chain (filter present)", ("nft", "flush", "chain", "inet", nft_table, "lfpfwd"),
                 Effect("appears", filtered_dst, sink_mac)),
        ), setup=(("nft", "add", "table", "inet", nft_table),
                  ("nft", "add", "chain", "inet", nft_table, "lfpkeep",
                   "{ type filter hook forward priority 0 ; policy accept ; }"),
                  ("nft", "add", "rule", "inet", nft_table, "lfpkeep", "ip", "daddr", "203.0.113.250", "drop"),
                  ("nft", "add", "chain", "inet", nft_table, "lfpfwd",
                   "{ type filter hook forward priority 10 ; policy accept ; }")),
           teardown=(("nft", "delete", "table", "inet", nft_table),),
           note="only a native chain's rules change while another keeps the filter node in: no compile, no "
                "reload; the controller re-reads the native tables, rebuilds the classifier and writes the "
                "new generation"),
        Cycle("nft named set", (
            Step("nft add element", ("nft", "add", "element", "inet", nft_table, "lfpblock", "{", filtered_dst, "}"),
                 Effect("disappears", filtered_dst, sink_mac)),
            Step("nft delete element", ("nft", "delete", "element", "inet", nft_table, "lfpblock",
                                        "{", filtered_dst, "}"), Effect("appears", filtered_dst, sink_mac)),
        ), setup=(("nft", "add", "table", "inet", nft_table),
                  ("nft", "add", "set", "inet", nft_table, "lfpblock", "{ type ipv4_addr ; flags interval ; }"),
                  ("nft", "add", "element", "inet", nft_table, "lfpblock", "{ 203.0.113.250 }"),
                  ("nft", "add", "chain", "inet", nft_table, "lfpfwd",
                   "{ type filter hook forward priority 0 ; policy accept ; }"),
                  ("nft", "add", "rule", "inet", nft_table, "lfpfwd", "ip", "daddr", "@lfpblock", "drop")),
           teardown=(("nft", "delete", "table", "inet", nft_table),),
           note="a named set's element is a commit: the datapath passes from the commit on (the nf_tables "
                "generation) until the controller has re-read the native tables and rebuilt the classifier "
                "with the set's elements"),
        Cycle("legacy iptables rules", (
            Step("iptables-legacy -A", ("iptables-legacy", "-A", "FORWARD", "-d", f"{filtered_dst}/32", "-j", "DROP"),
                 Effect("disappears", filtered_dst, sink_mac)),
            Step("iptables-legacy -D", ("iptables-legacy", "-D", "FORWARD", "-d", f"{filtered_dst}/32", "-j", "DROP"),
                 Effect("appears", filtered_dst, sink_mac)),
        ), setup=(("iptables-legacy", "-A", "FORWARD", "-d", "203.0.113.250/32", "-j", "DROP"),),
           teardown=(("iptables-legacy", "-F", "FORWARD"),),
           note="no event: the cgroup setsockopt watch counts the replace as it is requested and rings the "
                "controller; the datapath passes until the table is re-read"),
        Cycle("sysctl", (
            Step("sysctl -w (no event)", ("sysctl", "-qw", "net.ipv4.conf.all.accept_local=1"), None),
            Step("sysctl -w (no event), undone", ("sysctl", "-qw", "net.ipv4.conf.all.accept_local=0"), None),
        ), note="accept_local sends no event: the cgroup sysctl watch counts the write before the kernel "
                "stores it and rings the controller; the datapath passes until the sysctls are re-read"),
        Cycle("ipset", (
            Step("ipset add", ("ipset", "add", ipset_name, set_member), Effect("disappears", set_member, sink_mac)),
            Step("ipset del", ("ipset", "del", ipset_name, set_member), Effect("appears", set_member, sink_mac)),
        ), setup=(("ipset", "create", ipset_name, "hash:ip"),
                  ("iptables", "-A", "FORWARD", "-m", "set", "--match-set", ipset_name, "dst", "-j", "DROP")),
           teardown=(("iptables", "-F", "FORWARD"), ("ipset", "destroy", ipset_name)),
           note="ipset sends no event: the filter node's watch makes the datapath pass from the end of the "
                "command's sendmsg until the controller has read the sets again and patched the member into "
                "the classifier"),
        Cycle("ipset, large set", (
            Step("ipset add (large set)", ("ipset", "add", big_set, big_member),
                 Effect("disappears", big_member, sink_mac)),
            Step("ipset del (large set)", ("ipset", "del", big_set, big_member),
                 Effect("appears", big_member, sink_mac)),
        ), setup=(("ipset", "create", big_set, "hash:net", "maxelem", "200000", "hashsize", "65536"),
                  ("bash", "-o", "pipefail", "-c",
                   f"{shlex.quote(sys.executable)} -c '{_BIG_SET_MEMBERS}' {big_set} {large_set} | ipset restore"),
                  ("iptables", "-A", "FORWARD", "-m", "set", "--match-set", big_set, "dst", "-j", "DROP")),
           teardown=(("iptables", "-F", "FORWARD"), ("ipset", "destroy", big_set)),
           note=f"a blocklist-sized set ({large_set} /32s outside the routed prefixes): the set is read "
                "again whole, the member patched into the classifier (one entry)"),
    )


# FORWARD's rules in the "many present" cycle: a gateway's blocklist.
MANY_RULES = 1000
# (a DROP rule for each of the addresses _BIG_SET_MEMBERS names)


# Addresses of the benchmark range that no routed prefix, source or lab
# interface holds (198.18.32.0 and up, then 198.19.64.0 and up: 106 496 of
# them), as `ipset restore` lines: the set the first argument names, as many
# as the second says.
_BIG_SET_MEMBERS = ("import sys, ipaddress as a; n, count = sys.argv[1], int(sys.argv[2]); "
                    "s = [a.ip_address(\"198.18.32.0\") + i for i in range(min(count, 57344))]; "
                    "s += [a.ip_address(\"198.19.64.0\") + i for i in range(count - len(s))]; "
                    "print(\"\\n\".join(f\"add {n} {x}\" for x in s))")


@dataclass(frozen=True)
class Sample:
    command: str
    system: str
    command_ms: float
    response_ms: float | None = None    # the controller's own, max over its batches
    batches: int = 0
    datapath_updated: bool = False
    e2e_ms: float | None = None
    kernel_path_ms: float | None = None   # command's end -> lease current again (LinuxFP only)
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _run_action(line: Line, action) -> str | None:
    if callable(action):
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - reported with the sample
            return f"{type(exc).__name__}: {exc}"
        return None
    done = subprocess.run(line.dut.exec_argv(list(action)), capture_output=True, text=True, check=False)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


def _wait_applied(controller: ControllerProcess, mark: int, first_timeout: float) -> list[tuple[str, float, bool]]:
    """The controller's `applied` lines after `mark`, once it has gone quiet."""
    deadline = time.monotonic() + first_timeout
    seen = mark
    quiet_since = None
    while True:
        count = len(controller.lines)
        now = time.monotonic()
        if count != seen:
            seen, quiet_since = count, now
        if quiet_since is not None and now - quiet_since >= QUIET_S:
            break
        if quiet_since is None and now >= deadline:
            break
        time.sleep(0.002)
    batches = []
    for text in controller.lines[mark:seen]:
        match = _APPLIED.match(text)
        if match:
            batches.append((match.group(1), float(match.group(2)), match.group(3) == "updated"))
    return batches


def _wait_obeyed(sink: Sink, effect: Effect, t_start_ns: int) -> float | None:
    deadline = time.monotonic() + OBEY_TIMEOUT_S
    while time.monotonic() < deadline:
        seen = sink.probe_seen(effect.daddr, effect.dmac)
        if effect.kind == "appears":
            if seen and seen.first_ns >= t_start_ns:
                return (seen.first_ns - t_start_ns) / 1e6
        else:
            last = seen.last_ns if seen else 0
            if time.monotonic_ns() - last >= STOPPED_AFTER_S * 1e9:
                return max(0.0, (last - t_start_ns) / 1e6)
        time.sleep(0.001)
    return None


def _wait_lease_current(line: Line) -> float | None:
    """ms from now until the controller's lease lets the datapath act
    (held, every watched change re-read, the addresses current); None if
    it never does."""
    layout, start = layout_of(line.dut.name), time.monotonic_ns()
    while time.monotonic_ns() - start < LEASE_TIMEOUT_S * 1e9:
        with entered(line.dut):          # the address generation is the namespace's
            state = lease_state(layout)
        if lease_acts(state):
            return round((time.monotonic_ns() - start) / 1e6, 3)
        time.sleep(0.0005)
    return None


def _flowing(sink: Sink, effect: Effect) -> bool:
    """Wait until probes arrive as they do before a "disappears" change."""
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        seen = sink.probe_seen(effect.daddr, effect.dmac)
        if seen and time.monotonic_ns() - seen.last_ns < 2e6:
            return True
        time.sleep(0.002)
    return False


def run_step(line: Line, sink: Sink, probes: ProbeStream, step: Step, system: str,
             controller: ControllerProcess | None, response_timeout: float) -> Sample:
    effect = step.effect
    if effect:
        probes.aim(effect.daddr)
        if effect.kind == "appears":
            sink.forget_probes(effect.daddr, effect.dmac)
        elif not _flowing(sink, effect):
            return Sample(step.command, system, 0.0, error="probe traffic was not flowing before the change")
    mark = len(controller.lines) if controller else 0
    t_start = time.monotonic_ns()
    error = _run_action(line, step.action)
    command_ms = round((time.monotonic_ns() - t_start) / 1e6, 3)
    if error:
        return Sample(step.command, system, command_ms, error=error)
    kernel_path_ms = _wait_lease_current(line) if controller is not None else None
    batches = _wait_applied(controller, mark, response_timeout) if controller is not None else []
    e2e_ms = None
    if effect:
        obeyed = _wait_obeyed(sink, effect, t_start)
        if obeyed is None:
            error = f"traffic to {effect.daddr} did not {effect.kind[:-1]} within {OBEY_TIMEOUT_S} s"
        else:
            e2e_ms = round(obeyed, 3)
    return Sample(
        step.command, system, command_ms,
        response_ms=max(ms for _, ms, _ in batches) if batches else None,
        batches=len(batches),
        datapath_updated=any(worked for _, _, worked in batches),
        e2e_ms=e2e_ms,
        kernel_path_ms=kernel_path_ms,
        error=error,
    )


def _run_cycles(line: Line, sink: Sink, probes: ProbeStream, all_cycles, system: str,
                controller: ControllerProcess | None, iterations: int) -> list[Sample]:
    samples: list[Sample] = []
    for cycle in all_cycles:
        for argv in cycle.setup:
            line.dut.run(list(argv))
        if controller is not None:
            _wait_applied(controller, len(controller.lines), 0.3)
            _wait_lease_current(line)      # a watched setup (a table, a filter reload) absorbed
        timeout = FIRST_RESPONSE_TIMEOUT_S
        try:
            for index in range(iterations):
                for step in cycle.steps:
                    sample = run_step(line, sink, probes, step, system, controller, timeout)
                    samples.append(sample)
                    if controller is not None and sample.batches == 0 and index >= 2:
                        timeout = NO_EVENT_TIMEOUT_S   # it has shown it produces no event
            progress(f"response [{system}] {cycle.name}: {iterations} x {len(cycle.steps)} commands")
        finally:
            for argv in cycle.teardown:
                line.dut.run(list(argv), check=False)
            probes.aim(None)
    return samples


def _spread_ms(values: list[float]) -> dict:
    if not values:
        return {"p50_ms": None, "p99_ms": None, "n": 0}
    return {"p50_ms": round(percentile(values, 50), 4), "p99_ms": round(percentile(values, 99), 4),
            "n": len(values)}


def summarize(samples: list[Sample], all_cycles) -> dict:
    notes = {step.command: cycle.note for cycle in all_cycles for step in cycle.steps if cycle.note}
    commands = list(dict.fromkeys(step.command for cycle in all_cycles for step in cycle.steps))
    summary = {}
    for command in commands:
        mine = [s for s in samples if s.command == command]
        fast = [s for s in mine if s.system == "linuxfp-xdp" and not s.error]
        responses = [s.response_ms for s in fast if s.response_ms is not None]
        entry = _spread_ms(responses)
        entry["datapath_updated"] = sum(1 for s in fast if s.datapath_updated)
        entry["no_controller_event"] = sum(1 for s in fast if s.batches == 0)
        entry["end_to_end"] = {system: _spread_ms([s.e2e_ms for s in mine if s.system == system
                                                   and s.e2e_ms is not None])
                               for system in ("linux", "linuxfp-xdp")}
        entry["command"] = {system: _spread_ms([s.command_ms for s in mine if s.system == system and not s.error])
                            for system in ("linux", "linuxfp-xdp")}
        entry["kernel_path"] = _spread_ms([s.kernel_path_ms for s in fast if s.kernel_path_ms is not None])
        errors = [s.error for s in mine if s.error]
        entry["errors"] = len(errors)
        if errors:
            entry["first_error"] = errors[0]
        if command in notes:
            entry["note"] = notes[command]
        if not responses:
            entry["status"] = "no response time: the controller saw no event for this command"
        elif entry["datapath_updated"] == 0:
            entry["status"] = "no datapath work"
        else:
            entry["status"] = "datapath updated"
        entry["meets_target"] = (entry["p50_ms"] is not None and entry["p50_ms"] <= TARGET_P50_MS
                                 and entry["p99_ms"] <= TARGET_P99_MS)
        summary[command] = entry
    return summary


def run(options: Options) -> dict:
    started = timestamp()
    iterations = options.reps(full=100, quick=2)
    tag = secrets.token_hex(2)
    samples: list[Sample] = []
    with exclusive_machine(), Lab(options.lab_prefix) as lab, contextlib.ExitStack() as stack:
        line = build_line(lab, 50, tag=tag)
        sink = Sink(line)
        stack.callback(sink.close)
        probes = ProbeStream(line)
        stack.callback(probes.close)
        all_cycles = cycles(line, tag, LARGE_SET_QUICK if options.quick else LARGE_SET)
        samples += _run_cycles(line, sink, probes, all_cycles, "linux", None, iterations)
        with ControllerProcess(line.dut.name, hook="xdp") as controller:
            samples += _run_cycles(line, sink, probes, all_cycles, "linuxfp-xdp", controller, iterations)
    response = summarize(samples, all_cycles)
    return {
        "scenario": "response",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": {
            "iterations_per_command": iterations,
            "controller": "linuxfp run --hook xdp in the DUT; response = its `applied … ms` line "
                          "(first netlink message of the batch received → last install/update returned)",
            "end_to_end": "from the command's start until the sink sees probe traffic obey "
                          f"(probes every ~{PROBE_INTERVAL_S * 1e3:.1f} ms, timestamped in the sink's XDP program)",
            "commands_run_as": "ip netns exec DUT <command>, process start-up included in command_ms",
            "kernel_path": "from the command's end until the lease lets the datapath act again (held, every "
                           "watched change re-read, the kernel's address generation the one taken in), read "
                           "from the pinned lease every 0.5 ms",
        },
        "targets": {"p50_ms": TARGET_P50_MS, "p99_ms": TARGET_P99_MS},
        "response": response,
        "systems": {},
        "ratios": {},
        "samples": [s.to_dict() for s in samples],
    }


TABLE_VI = ("ip addr add", "brctl addbr", "brctl addif", "iptables -A FORWARD")


def summary_line(result: dict) -> str:
    parts = []
    for command, entry in result["response"].items():
        if entry["p50_ms"] is None:
            parts.append(f"{command}: no event")
        else:
            parts.append(f"{command} {entry['p50_ms']:.2f}/{entry['p99_ms']:.2f}")
    return "response p50/p99 ms: " + ", ".join(parts)


def _fmt(value) -> str:
    return "–" if value is None else f"{value:.3f}"


def markdown(result: dict) -> str:
    rows = []
    for command, e in result["response"].items():
        rows.append([command, _fmt(e["p50_ms"]), _fmt(e["p99_ms"]), str(e["n"]),
                     f"{e['datapath_updated']}/{e['n']}" if e["n"] else "–",
                     _fmt(e["end_to_end"]["linux"]["p50_ms"]), _fmt(e["end_to_end"]["linuxfp-xdp"]["p50_ms"]),
                     _fmt(e["end_to_end"]["linuxfp-xdp"]["p99_ms"]),
                     _fmt(e.get("kernel_path", {}).get("p50_ms")), _fmt(e["command"]["linux"]["p50_ms"]),
                     e["status"] + (f" ({e['note']})" if e.get("note") else "")])
    return (f"# response benchmark, {result['timestamp']}\n\n"
            f"{result['method']['iterations_per_command']} runs per command. Controller response = event "
            f"received → datapath updated (target p50 ≤ {TARGET_P50_MS} ms, p99 ≤ {TARGET_P99_MS} ms). "
            "End-to-end = command start → traffic obeys. Kernel path = command end → the lease lets the "
            "datapath act again (a watched change sends every packet to the kernel until it is re-read).\n\n"
            + table(["command", "response p50 ms", "p99 ms", "n", "datapath updated", "e2e Linux p50",
                     "e2e LinuxFP p50", "e2e LinuxFP p99", "kernel path p50 ms", "command p50 ms", "status"],
                    rows))


def plot(result: dict, path: Path, plt) -> None:
    commands = [c for c, e in result["response"].items() if e["p50_ms"] is not None]
    fig, axis = plt.subplots(figsize=(9, 4.5))
    p50 = [result["response"][c]["p50_ms"] for c in commands]
    p99 = [result["response"][c]["p99_ms"] for c in commands]
    xs = range(len(commands))
    axis.bar([x - 0.2 for x in xs], p50, width=0.4, label="p50")
    axis.bar([x + 0.2 for x in xs], p99, width=0.4, label="p99")
    axis.axhline(TARGET_P50_MS, color="green", linestyle="--", linewidth=1, label="p50 target")
    axis.axhline(TARGET_P99_MS, color="red", linestyle="--", linewidth=1, label="p99 target")
    axis.set_xticks(list(xs))
    axis.set_xticklabels(commands, rotation=30, ha="right")
    axis.set_ylabel("controller response time (ms)")
    axis.set_title("response time per command (LinuxFP XDP)")
    axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
