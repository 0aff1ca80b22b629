"""`linuxfp bench gateway`: the paper's virtual gateway — the router's 50
prefixes plus 100 blacklist rules (iptables FORWARD DROP by source), the
traffic from a source not on the list. Linux alone and LinuxFP (XDP, TC) in
the same repetitions; same-run ratios. In the same run, the ipset variant:
the same blacklist as one hash:net set matched by one rule (`-m set
--match-set ... src -j DROP`).

In the same run, the stateful variant: the ruleset of a real host (policy
DROP, `--ctstate RELATED,ESTABLISHED -j ACCEPT` first, `--ctstate INVALID
-j DROP`, the same blacklist, the generator's port accepted, and a nat table
with one MASQUERADE rule for another destination), so the kernel tracks
connections. The generator's flows are established in conntrack before any
system is measured (a datagram, its reply, one more datagram after
conntrack's 2 s stream mark: [ASSURED]), as they would be on a host that
has been forwarding them. For LinuxFP the datapath's own counters
(`linuxfp -j stats`) say which share of the frames it forwarded itself
rather than passing them to the kernel (filter_ct_* reasons): a fast path
that stopped taking established connections shows as a share near 0.

Then the masqueraded variant: the same rules, every flow MASQUERADEd out
of the DUT's egress, conntrack flushed and the flows established again
(their replies to the DUT's address): connections with NAT, which the
conntrack node translates (docs/datapath.md)."""
from __future__ import annotations

import contextlib
import ipaddress
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from controller.launcher import linuxfp_stats, wait_lease_current
from linuxfp.lab.conntrack import Flow, flush, udp_entries
from linuxfp.lab.frames import ipv6_udp_frame, udp_frame
from linuxfp.lab.packet_io import inject

from . import throughput
from .generator import BENCH_UDP_PORT
from .machine import machine
from .options import Options
from .results import fmt_mpps, ratios_line, ratios_table, systems_table, table, timestamp
from .rules import FRAME_SIZE, PREFIXES, SYSTEM_NAMES, measure_with_rules, systems_plan
from .systems import System
from .topology import Line

BLACKLIST = 100
TARGET = 3.0        # the issue's: LinuxFP ≥ 3× Linux with the same rules
# The stateful variant's NAT: MASQUERADE for a destination the traffic never
# goes to (like the ctstate rules, its NAT target keeps connection tracking on).
MASQUERADED = "192.0.2.0/24"
# conntrack's UDP stream mark: a datagram seen more than 2 s after the first
# of a replied connection makes it ASSURED (nf_conntrack_proto_udp.c).
STREAM_MARK_S = 2.0
MIN_FAST_PATH_SHARE = 0.99     # below: LinuxFP is not taking the established flows
RATIO_KEYS = ("linuxfp-xdp/linux", "linuxfp-tc/linux")


def blacklist_sources(count: int = BLACKLIST) -> list[str]:
    """`count` source addresses from the documentation ranges."""
    return [str(a) for net in ("203.0.113.0/24", "198.51.100.0/24", "192.0.2.0/24")
            for a in ipaddress.ip_network(net)][:count]


def _host_prefixes(sources: list[str] | None) -> list[str]:
    """Each source as its host prefix (/32, or /128 for IPv6); the IPv4 blacklist by default."""
    return [f"{s}/{128 if ':' in s else 32}" for s in (blacklist_sources() if sources is None else sources)]


def blacklist_ruleset(count: int = BLACKLIST, sources: list[str] | None = None) -> str:
    """`count` sources (documentation ranges; or `sources`) dropped in FORWARD."""
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
    lines += [f"-A FORWARD -s {prefix} -j DROP" for prefix in _host_prefixes(sources)[:count]]
    return "\n".join(lines + ["COMMIT"]) + "\n"


BLACKLIST_SET = "lfp-blacklist"


def blacklist_ipset(count: int = BLACKLIST, sources: list[str] | None = None, name: str = BLACKLIST_SET,
                    family: str = "inet") -> str:
    """`ipset restore` input: the blacklist's sources as one hash:net set."""
    lines = [f"create {name} hash:net family {family} -exist", f"flush {name}"]
    lines += [f"add {name} {prefix}" for prefix in _host_prefixes(sources)[:count]]
    return "\n".join(lines) + "\n"


def ipset_ruleset(name: str = BLACKLIST_SET) -> str:
    """One FORWARD rule dropping the blacklist set's sources."""
    return ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
            f"-A FORWARD -m set --match-set {name} src -j DROP\nCOMMIT\n")


def stateful_ruleset(count: int = BLACKLIST, port: int = BENCH_UDP_PORT, bridge: str | None = None,
                     sources: list[str] | None = None, nat: bool = True,
                     masquerade: str = f"-d {MASQUERADED}") -> str:
    """A real host's FORWARD: policy DROP, established connections first,
    INVALID dropped, the blacklist, then the one service (the generator's
    UDP port) accepted; a nat table with one MASQUERADE rule (`nat`) of
    `masquerade`'s matches (by default for a destination no traffic goes
    to). `bridge`: the service accepted only between that bridge's ports
    (`-i br -o br`), as Docker accepts traffic within docker0."""
    within = f"-i {bridge} -o {bridge} " if bridge else ""
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]",
             "-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
             "-A FORWARD -m conntrack --ctstate INVALID -j DROP"]
    lines += [f"-A FORWARD -s {prefix} -j DROP" for prefix in _host_prefixes(sources)[:count]]
    lines += [f"-A FORWARD {within}-p udp -m udp --dport {port} -j ACCEPT", "COMMIT"]
    if nat:
        lines += ["*nat", ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]",
                  ":POSTROUTING ACCEPT [0:0]", f"-A POSTROUTING {masquerade} -j MASQUERADE", "COMMIT"]
    return "\n".join(lines) + "\n"


def conntrack_state(line: Line, flows: tuple[Flow, ...]) -> dict:
    """How the generator's flows stand in the DUT's conntrack table."""
    entries = udp_entries(line.dut)
    found = [entries[flow] for flow in flows if flow in entries]
    return {
        "stream_timeout_s": int(line.dut.read_sysctl("net.netfilter.nf_conntrack_udp_timeout_stream")),
        "flows": len(flows),
        "entries": len(found),
        "assured": sum(1 for e in found if "ASSURED" in e["flags"]),
        "unreplied": sum(1 for e in found if "UNREPLIED" in e["flags"]),
        "timeout_min_s": min((e["timeout_s"] for e in found), default=None),
        "timeout_max_s": max((e["timeout_s"] for e in found), default=None),
    }


def establish_flows(line: Line, flows: tuple[Flow, ...], size: int = FRAME_SIZE - 4,
                    reply_to: str | None = None) -> dict:
    """Each flow as a real exchange through the DUT (Linux alone): a
    datagram from the source side, its reply from the sink side, and one
    more datagram past conntrack's stream mark, which makes the entry
    ASSURED. The reply is addressed to the MAC the forwarded datagrams
    reach the sink from: the DUT's egress, or across a bridge the
    generator itself; and to `reply_to` rather than the flow's source where
    the DUT MASQUERADEs (its egress address; the ports stay). IPv6 flows
    (addresses with a colon) as IPv6. Returns conntrack_state afterwards."""
    def frame(src_mac, dst_mac, src, dst, sport, dport) -> bytes:
        make = ipv6_udp_frame if ":" in src else udp_frame
        return make(src_mac, dst_mac, src, dst, sport=sport, dport=dport, size=size)

    originals = [frame(line.gen.mac, line.frame_dst_mac, src, dst, sport, dport) for src, dst, sport, dport in flows]
    replies = [frame(line.snk.mac, line.arrival_src_mac, dst, reply_to or src, dport, sport)
               for src, dst, sport, dport in flows]
    started = time.monotonic()
    inject(line.src, line.gen.ifname, originals)
    time.sleep(0.2)
    inject(line.sink, line.snk.ifname, replies)
    time.sleep(max(0.0, STREAM_MARK_S + 0.3 - (time.monotonic() - started)))
    inject(line.src, line.gen.ifname, originals)
    time.sleep(0.2)
    return conntrack_state(line, flows)


@dataclass
class FlowSetup:
    """measure_with_rules' `prepare` for a stateful ruleset: establishes the
    generator's flows (establish_flows) and keeps how they stood after, or
    why they could not be (the measurements still run: their errors say
    what they lack)."""

    label: str                              # the variant, in the progress lines
    size: int = FRAME_SIZE - 4              # the frames' (the generator's without the FCS)
    masqueraded: bool = False               # the DUT MASQUERADEs them out of its egress
    established: dict | None = None
    errors: dict[str, str] = field(default_factory=dict)

    def __call__(self, rig: throughput.Rig) -> None:
        flows = rig.generator.flows()
        throughput.progress(f"{self.label}: establishing {len(flows)} generator flows in conntrack")
        try:
            if self.masqueraded:
                # (a connection keeps the NAT it started with: earlier variants' go)
                flush(rig.line.dut)
            self.established = establish_flows(rig.line, flows, self.size,
                                               reply_to=rig.line.dut_out.ip if self.masqueraded else None)
        except Exception as exc:  # noqa: BLE001 - the measurements still run; this says what they lack
            self.errors["establish"] = f"{type(exc).__name__}: {exc}"
            return
        state = self.established
        throughput.progress(f"{self.label}: {state['assured']}/{state['flows']} flows ASSURED, "
                            f"{state['timeout_min_s']}-{state['timeout_max_s']} s left")


def datapath_counts(line: Line) -> dict:
    """LinuxFP's counters in the DUT (what `linuxfp -j stats` prints), summed over its
    interfaces: fast path, passed to the kernel, dropped, and the reasons."""
    stats = linuxfp_stats(line.dut.name)
    totals: dict = {"fast_path": 0, "passed_to_kernel": 0, "dropped": 0, "passed": {}, "drops": {},
                    "interfaces": len(stats["interfaces"])}
    for interface in stats["interfaces"]:
        for key in ("fast_path", "passed_to_kernel", "dropped"):
            totals[key] += interface.get(key, 0)
        for node in interface["nodes"].values():
            for kind in ("passed", "drops"):
                for reason, value in node.get(kind, {}).items():
                    totals[kind][reason] = totals[kind].get(reason, 0) + value
    return totals


def _minus(after: dict, before: dict) -> dict:
    """The counts of `after` since `before`; the interfaces listed are `after`'s."""
    out = {key: after[key] - before[key] for key in ("fast_path", "passed_to_kernel", "dropped")}
    out["interfaces"] = after.get("interfaces")
    for kind in ("passed", "drops"):
        out[kind] = {k: v - before[kind].get(k, 0) for k, v in after[kind].items() if v - before[kind].get(k, 0)}
    return out


def _uses_controller(system: System) -> bool:
    return system.name.startswith("linuxfp")


def observer(stateful: bool) -> throughput.Observer:
    """Around each measurement: LinuxFP's counters (the difference over the
    measurement, retries included) and, for the stateful variant, how the
    generator's conntrack entries stand after it (still ASSURED, and
    refreshed: seconds left near the stream timeout)."""
    @contextlib.contextmanager
    def observe(rig: throughput.Rig, system: System) -> Iterator[dict]:
        seen: dict = {}
        before = None
        if _uses_controller(system):
            # the previous measurement's conntrack reading is a netfilter
            # message the filter's watch counts: the controller re-reads
            # the sets before the fast path acts again
            if not wait_lease_current(rig.line.dut.name):
                seen["lease_not_current"] = "the controller had not re-read a watched change after 5 s"
            try:
                before = datapath_counts(rig.line)
            except Exception as exc:  # noqa: BLE001 - the measurement stands without its counters
                seen["datapath_error"] = f"{type(exc).__name__}: {exc}"
        yield seen
        if before is not None:
            try:
                after = datapath_counts(rig.line)
            except Exception as exc:  # noqa: BLE001
                seen["datapath_error"] = f"{type(exc).__name__}: {exc}"
            else:
                seen["datapath"] = _minus(after, before)
                if any(seen["datapath"][key] < 0 for key in ("fast_path", "passed_to_kernel", "dropped")):
                    # the pipelines were replaced meanwhile: what the new ones counted
                    seen["datapath"] = after
                    seen["datapath_error"] = "counters restarted during the measurement (pipelines replaced)"
        if stateful:
            seen["conntrack"] = conntrack_state(rig.line, rig.generator.flows())

    return observe


def fast_path_shares(repetitions: list[dict]) -> dict[str, dict]:
    """Per system, over every measurement of the variant: LinuxFP's own
    counters summed (share = fast path / everything it saw) and, for every
    system, the share of the DUT's frames the kernel forwarded
    (IpForwDatagrams / DUT frames in the measurement windows)."""
    out: dict[str, dict] = {}
    for repetition in repetitions:
        for name, m in repetition["measurements"].items():
            entry = out.setdefault(name, {"dut_frames": 0, "kernel_forwarded": 0})
            entry["dut_frames"] += m.get("dut_frames", 0)
            entry["kernel_forwarded"] += m.get("kernel_forwarded", 0)
            if "datapath_error" in m.get("observed", {}):
                entry["datapath_errors"] = entry.get("datapath_errors", 0) + 1
            counts = m.get("observed", {}).get("datapath")
            if counts is None:
                continue
            datapath = entry.setdefault("datapath", {"fast_path": 0, "passed_to_kernel": 0, "dropped": 0,
                                                     "passed": {}, "drops": {}, "interfaces_min": None})
            for key in ("fast_path", "passed_to_kernel", "dropped"):
                datapath[key] += counts[key]
            listed = counts.get("interfaces")
            if listed is not None:
                worst = datapath["interfaces_min"]
                datapath["interfaces_min"] = listed if worst is None else min(worst, listed)
            for kind in ("passed", "drops"):
                for reason, value in counts[kind].items():
                    datapath[kind][reason] = datapath[kind].get(reason, 0) + value
    out = _in_plan_order(out)
    for entry in out.values():
        entry["kernel_forwarded_share"] = (round(entry["kernel_forwarded"] / entry["dut_frames"], 4)
                                           if entry["dut_frames"] else None)
        datapath = entry.get("datapath")
        if datapath is not None:
            seen = datapath["fast_path"] + datapath["passed_to_kernel"] + datapath["dropped"]
            entry["fast_path_share"] = round(datapath["fast_path"] / seen, 4) if seen else None
    return out


def conntrack_after(repetitions: list[dict]) -> dict[str, dict]:
    """Per system, the worst conntrack state seen after its measurements."""
    out: dict[str, dict] = {}
    for repetition in repetitions:
        for name, m in repetition["measurements"].items():
            state = m.get("observed", {}).get("conntrack")
            if state is None:
                continue
            entry = out.setdefault(name, {"flows": state["flows"], "entries_min": state["entries"],
                                          "assured_min": state["assured"], "timeout_min_s": state["timeout_min_s"]})
            entry["entries_min"] = min(entry["entries_min"], state["entries"])
            entry["assured_min"] = min(entry["assured_min"], state["assured"])
            if state["timeout_min_s"] is None or entry["timeout_min_s"] is None:
                entry["timeout_min_s"] = None
            else:
                entry["timeout_min_s"] = min(entry["timeout_min_s"], state["timeout_min_s"])
    return _in_plan_order(out)


def _in_plan_order(by_system: dict[str, dict]) -> dict[str, dict]:
    order = {name: index for index, name in enumerate(SYSTEM_NAMES)}
    return dict(sorted(by_system.items(), key=lambda item: order.get(item[0], len(order))))


def conntrack_checks(established: dict | None, after: dict) -> dict[str, str]:
    """The stateful variant measures what it claims only if the generator's
    flows were, and stayed, established."""
    errors = {}
    if established is not None and established["assured"] < established["flows"]:
        errors["conntrack"] = (f"{established['assured']} of {established['flows']} generator flows ASSURED "
                               f"before measuring ({established['entries']} entries)")
    for name, state in after.items():
        if state["assured_min"] < state["flows"]:
            errors[f"conntrack after {name}"] = (f"only {state['assured_min']} of {state['flows']} flows ASSURED "
                                                 "after a measurement")
    return errors


def share_checks(shares: dict, minimum: float = MIN_FAST_PATH_SHARE) -> dict[str, str]:
    """LinuxFP's figures are LinuxFP's only if it forwarded the frames
    itself: a share below `minimum` is named, with the reasons."""
    errors = {}
    for name, entry in shares.items():
        if entry.get("datapath_errors"):
            errors[f"{name} counters"] = (f"{entry['datapath_errors']} measurement(s) without LinuxFP's counters "
                                          "(see repetitions[].measurements[].observed.datapath_error)")
        share = entry.get("fast_path_share")
        if "datapath" in entry and (share is None or share < minimum):
            passed = ", ".join(f"{k} {v}" for k, v in sorted(entry["datapath"]["passed"].items(),
                                                             key=lambda kv: -kv[1])[:4])
            kernel = entry.get("kernel_forwarded_share")
            errors[f"{name} fast path"] = (
                (f"{share:.1%}" if share is not None else "none") + " of the frames fast-pathed by LinuxFP's counters "
                f"(passed to the kernel: {passed or 'none'}"
                + (f"; its stats listed {entry['datapath']['interfaces_min']} interface(s) at worst"
                   if not entry["datapath"].get("interfaces_min") else "")
                + (f"; the kernel forwarded {kernel:.1%} of the DUT's frames" if kernel is not None else "") + ")")
    return errors


def run(options: Options) -> dict:
    started = timestamp()
    plan = systems_plan(options, full_repetitions=10)
    setup = FlowSetup("gateway stateful")
    with throughput.rig(PREFIXES, lab_prefix=options.lab_prefix) as rig:
        throughput.progress(f"gateway: {BLACKLIST} blacklist rules, {len(SYSTEM_NAMES)} systems x "
                            f"{plan.repetitions} repetitions")
        rig.generator.set_new_tuples(False)
        summary, errors = measure_with_rules(rig, plan, blacklist_ruleset(), observe=observer(stateful=False))
        throughput.progress(f"gateway ipset: the {BLACKLIST} sources as one hash:net set, one rule; "
                            f"{len(SYSTEM_NAMES)} systems x {plan.repetitions} repetitions")
        rig.line.dut.run(["ipset", "restore"], input=blacklist_ipset())
        by_set, set_errors = measure_with_rules(rig, plan, ipset_ruleset(), observe=observer(stateful=False))
        # After the stateless rules: this restore replaces the filter table
        # and adds the nat table (which no later restore would remove).
        throughput.progress(f"gateway stateful: conntrack, {BLACKLIST} blacklist rules, nat; "
                            f"{len(SYSTEM_NAMES)} systems x {plan.repetitions} repetitions")
        stateful, stateful_errors = measure_with_rules(rig, plan, stateful_ruleset(), prepare=setup,
                                                       observe=observer(stateful=True))
        throughput.progress(f"gateway masqueraded: the same, every flow MASQUERADEd out of "
                            f"{rig.line.dut_out.ifname}; {len(SYSTEM_NAMES)} systems x {plan.repetitions} repetitions")
        masq_setup = FlowSetup("gateway masqueraded", masqueraded=True)
        masqueraded, masq_errors = measure_with_rules(
            rig, plan, stateful_ruleset(masquerade=f"-o {rig.line.dut_out.ifname}"), prepare=masq_setup,
            observe=observer(stateful=True))
        method = throughput.method(plan, rig.placement, PREFIXES)
        method["masqueraded_rules"] = (f"the stateful rules, with nat `-A POSTROUTING -o {rig.line.dut_out.ifname} "
                                       "-j MASQUERADE` (every flow: its source becomes the DUT's egress address); "
                                       "conntrack flushed, the flows established again with replies to that address")
    method["rules"] = f"{BLACKLIST} x `-A FORWARD -s <documentation /32> -j DROP`, iptables-nft"
    method["ipset_variant"] = (f"the same {BLACKLIST} sources as one `ipset` hash:net set, one rule: "
                               f"`-A FORWARD -m set --match-set {BLACKLIST_SET} src -j DROP`, iptables-nft")
    method["stateful_rules"] = (
        "`:FORWARD DROP`, `-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`, `-m conntrack --ctstate "
        f"INVALID -j DROP`, the same {BLACKLIST} blacklist rules, `-p udp -m udp --dport {BENCH_UDP_PORT} -j "
        f"ACCEPT`; nat: `-A POSTROUTING -d {MASQUERADED} -j MASQUERADE` (no traffic goes there); iptables-nft")
    method["stateful_flows"] = (
        "the generator's flows (one per routed prefix) established through the DUT before measuring, with "
        "no system installed: a datagram from the source side, its reply from the sink side, one more "
        f"datagram after {STREAM_MARK_S:g} s (conntrack's UDP stream mark): [ASSURED] in /proc/net/nf_conntrack")
    method["fast_path_share"] = ("LinuxFP's counters (`linuxfp -j stats`) over each measurement, retries and "
                                 "warm-up included: fast path / (fast path + passed to kernel + dropped); "
                                 "kernel_forwarded_share: IpForwDatagrams / DUT frames in the windows")
    stateful_shares = fast_path_shares(stateful["repetitions"])
    stateful_after = conntrack_after(stateful["repetitions"])
    stateless_shares = fast_path_shares(summary["repetitions"])
    errors.update(share_checks(stateless_shares))
    set_shares = fast_path_shares(by_set["repetitions"])
    set_errors.update(share_checks(set_shares))
    established = setup.established
    stateful_errors = {**setup.errors, **stateful_errors, **conntrack_checks(established, stateful_after),
                       **share_checks(stateful_shares)}
    masq_shares = fast_path_shares(masqueraded["repetitions"])
    masq_after = conntrack_after(masqueraded["repetitions"])
    masq_errors = {**masq_setup.errors, **masq_errors, **conntrack_checks(masq_setup.established, masq_after),
                   **share_checks(masq_shares)}
    return {
        "scenario": "gateway",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": method,
        "systems": summary["systems"],
        "ratios": summary["ratios"],
        "ratio_spread": summary["ratio_spread"],
        "regime": summary["regime"],
        "repetitions": summary["repetitions"],
        "fast_path": stateless_shares,
        "ipset": {
            "systems": by_set["systems"],
            "ratios": by_set["ratios"],
            "ratio_spread": by_set["ratio_spread"],
            "regime": by_set["regime"],
            "repetitions": by_set["repetitions"],
            "fast_path": set_shares,
            "errors": set_errors,
        },
        "stateful": {
            "systems": stateful["systems"],
            "ratios": stateful["ratios"],
            "ratio_spread": stateful["ratio_spread"],
            "regime": stateful["regime"],
            "repetitions": stateful["repetitions"],
            "fast_path": stateful_shares,
            "conntrack": {"established": established, "after_measurement": stateful_after},
            "errors": stateful_errors,
        },
        "masqueraded": {
            "systems": masqueraded["systems"],
            "ratios": masqueraded["ratios"],
            "ratio_spread": masqueraded["ratio_spread"],
            "regime": masqueraded["regime"],
            "repetitions": masqueraded["repetitions"],
            "fast_path": masq_shares,
            "conntrack": {"established": masq_setup.established, "after_measurement": masq_after},
            "errors": masq_errors,
        },
        "targets": {"linuxfp-xdp/linux": TARGET},
        "errors": {**errors, **{f"ipset {k}": v for k, v in set_errors.items()},
                   **{f"stateful {k}": v for k, v in stateful_errors.items()},
                   **{f"masqueraded {k}": v for k, v in masq_errors.items()}},
    }


def shares_text(shares: dict) -> str:
    parts = [f"{name.removeprefix('linuxfp-')} {entry['fast_path_share']:.1%}"
             for name, entry in shares.items() if entry.get("fast_path_share") is not None]
    return ", ".join(parts) if parts else "unknown"


def summary_line(result: dict) -> str:
    line = ratios_line(f"gateway ({BLACKLIST} rules)", {**result, "errors": {}})
    by_set = result.get("ipset")
    if by_set:
        ratios = by_set["ratios"]
        line += "; ipset " + (", ".join(f"{k} {ratios[k]:.2f}" for k in RATIO_KEYS if k in ratios)
                              or "no valid ratios")
    for key, title in (("stateful", "stateful (conntrack, nat)"), ("masqueraded", "masqueraded")):
        variant = result.get(key)
        if variant:
            ratios = variant["ratios"]
            shown = ", ".join(f"{k} {ratios[k]:.2f}" for k in RATIO_KEYS if k in ratios) or "no valid ratios"
            line += f"; {title} {shown}, fast-pathed {shares_text(variant['fast_path'])}"
    if result["errors"]:
        line += f"; errors: {', '.join(result['errors'])}"
    return line


def share_rows(shares: dict) -> list[list[str]]:
    rows = []
    for name, entry in shares.items():
        datapath = entry.get("datapath")
        share = entry.get("fast_path_share")
        passed = (", ".join(f"{k} {v}" for k, v in sorted(datapath["passed"].items(), key=lambda kv: -kv[1]))
                  if datapath else "")
        kernel = entry.get("kernel_forwarded_share")
        rows.append([name, f"{share:.2%}" if share is not None else "-",
                     str(datapath["fast_path"]) if datapath else "-",
                     str(datapath["passed_to_kernel"]) if datapath else "-", passed or "-",
                     f"{kernel:.2%}" if kernel is not None else "-"])
    return rows


def established_text(established: dict | None) -> str:
    """How the generator's flows stood before measuring, for markdown."""
    if not established:
        return "Not established (see errors).\n\n"
    return (f"Before measuring: {established['assured']} of {established['flows']} flows ASSURED "
            f"({established['timeout_min_s']}–{established['timeout_max_s']} s left).\n\n")


def conntrack_after_text(after: dict, established: dict | None) -> str:
    """conntrack_after's worst states, for markdown ("" without any)."""
    if not after:
        return ""
    return ("\nConntrack after each measurement (worst seen): " + "; ".join(
        f"{name}: {a['assured_min']}/{a['flows']} ASSURED, ≥ {a['timeout_min_s']} s left"
        for name, a in after.items())
        + (f" (conntrack's stream timeout: {established['stream_timeout_s']} s; an entry the fast path "
           "did not refresh would be below it by the controller's start-up and the measurement, "
           "seconds)" if established else "") + ".\n")


SHARE_HEADER = ["system", "fast-pathed (LinuxFP counters)", "fast path", "passed to kernel", "pass reasons",
                "kernel-forwarded share of DUT frames"]


def markdown(result: dict) -> str:
    """gateway's report, and gateway6's (its scenario, frame size and family)."""
    family = " IPv6" if result.get("scenario") == "gateway6" else ""
    out = [f"# {result.get('scenario', 'gateway')} benchmark, {result['timestamp']}\n\n",
           f"Machine: kernel {result['machine']['kernel']}, {result['machine']['cpus']} CPUs "
           f"({result['machine']['cpu_model']}); {PREFIXES} routed{family} prefixes, "
           f"{result.get('frame_size', FRAME_SIZE)} B frames{' (quick run)' if result['quick'] else ''}.\n\n",
           f"## Stateless: {result['method']['rules']}\n\n",
           systems_table(result["systems"]), "\n",
           ratios_table(result["ratio_spread"], {"linuxfp-xdp/linux": TARGET})]
    if result.get("fast_path"):
        out += ["\n", table(SHARE_HEADER, share_rows(result["fast_path"]))]
    by_set = result.get("ipset")
    if by_set:
        out += [f"\n## ipset: {result['method']['ipset_variant']}\n\n", systems_table(by_set["systems"]), "\n",
                ratios_table(by_set["ratio_spread"], {"linuxfp-xdp/linux": TARGET}), "\n",
                table(SHARE_HEADER, share_rows(by_set["fast_path"]))]
    stateful = result.get("stateful")
    if stateful:
        established = stateful["conntrack"]["established"]
        out += [f"\n## Stateful: {result['method']['stateful_rules']}\n\n",
                f"Flows: {result['method']['stateful_flows']}. " + established_text(established),
                systems_table(stateful["systems"]), "\n",
                ratios_table(stateful["ratio_spread"], {}), "\n",
                table(SHARE_HEADER, share_rows(stateful["fast_path"]))]
        out.append(conntrack_after_text(stateful["conntrack"]["after_measurement"], established))
        rows = [[k, f"{result['ratios'][k]:.2f}" if k in result["ratios"] else "-",
                 f"{stateful['ratios'][k]:.2f}" if k in stateful["ratios"] else "-"] for k in RATIO_KEYS]
        rows += [[f"{name} Mpps", fmt_mpps(result["systems"][name]["pps_median"]) if name in result["systems"] else "-",
                  fmt_mpps(stateful["systems"][name]["pps_median"]) if name in stateful["systems"] else "-"]
                 for name in SYSTEM_NAMES]
        out += ["\n## Stateless and stateful\n\n", table(["", "stateless", "stateful"], rows)]
    masqueraded = result.get("masqueraded")
    if masqueraded:
        established = masqueraded["conntrack"]["established"]
        out += [f"\n## Masqueraded: {result['method']['masqueraded_rules']}\n\n", established_text(established),
                systems_table(masqueraded["systems"]), "\n", ratios_table(masqueraded["ratio_spread"], {}), "\n",
                table(SHARE_HEADER, share_rows(masqueraded["fast_path"]))]
        out.append(conntrack_after_text(masqueraded["conntrack"]["after_measurement"], established))
    if result["errors"]:
        out.append("\n## Errors\n\n" + "".join(f"- {k}: {v}\n" for k, v in result["errors"].items()))
    return "".join(out)
