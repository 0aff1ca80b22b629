"""`linuxfp bench bridge`: port-to-port bridging, the paper's bridge
function. The benchmark line's DUT becomes a Linux bridge (`ip link add br0
type bridge`, both veths its ports, the generator's and the sink's MACs as
static FDB entries so that nothing floods), the generator addresses the
sink's MAC; frames arrive unchanged (same MACs, TTL untouched). Linux alone
and LinuxFP (XDP, TC) in the same repetitions; same-run ratios.

Then routed into a bridge, as a container host's uplink traffic reaches its
containers: the router line's egress becomes the only port of br0, which
takes over its address (so its MAC too); the routes lead via the sink on the
bridge, whose MAC is a static FDB entry. Frames arrive routed (TTL - 1).

Then bridged as a Kubernetes node's cni0 or Docker's docker0 is: the same
bridge with br_netfilter on (bridge-nf-call-iptables=1, checked in the DUT),
so that every bridged IPv4 frame traverses iptables, and the gateway's
stateful ruleset (policy DROP, conntrack states, the blacklist, the
generator's port accepted within br0, a nat table with one MASQUERADE). The
generator's flows are established in conntrack first, the reply a frame
bridged back from the sink to the generator; the datapath's own counters
say which share of the frames LinuxFP bridged itself rather than passing
them to the kernel (reasons br_netfilter, filter_ct_*, ...)."""
from __future__ import annotations

import json

from . import throughput
from .gateway import (
    BLACKLIST,
    MASQUERADED,
    SHARE_HEADER,
    STREAM_MARK_S,
    FlowSetup,
    conntrack_after,
    conntrack_after_text,
    conntrack_checks,
    established_text,
    fast_path_shares,
    observer,
    share_checks,
    share_rows,
    shares_text,
    stateful_ruleset,
)
from .generator import BENCH_UDP_PORT
from .machine import machine
from .options import Options
from .results import ratios_line, ratios_table, systems_table, table, timestamp
from .rules import measure_with_rules
from .systems import System, linux, linuxfp
from .topology import DUT_OUT_IP, LINK_PREFIXLEN, SINK_IP, Line

FRAME_SIZE = 64
PREFIXES = 1
PAIRS = (("linuxfp-xdp", "linux"), ("linuxfp-tc", "linux"), ("linuxfp-tc", "linuxfp-xdp"))
# The targets: XDP ≥ 3× the Linux bridge, TC ≥ 1.5×.
TARGETS = {"linuxfp-xdp/linux": 3.0, "linuxfp-tc/linux": 1.5}

# Bridged frames reach the sink exactly as sent: TTL unchanged.
BRIDGE_SYSTEMS = (
    System("linux", "Linux bridge alone", "ttl_unchanged", linux),
    System("linuxfp-xdp", "LinuxFP controller, XDP hook", "ttl_unchanged", linuxfp("xdp")),
    System("linuxfp-tc", "LinuxFP controller, TC hook", "ttl_unchanged", linuxfp("tc")),
)


# Routed into the bridge: forwarded frames arrive as a router sends them.
ROUTED_SYSTEMS = tuple(System(s.name, s.description, "good", s.install) for s in BRIDGE_SYSTEMS)

# Below the gateway's minimum: the bridge node hands the kernel a flow's
# frames for 8 ms after each refresh of its FDB entries (once a second, and
# once after every install) so that none overtakes the kernel's — up to
# 0.8 % of a steady flow, more in a quick run's short windows.
MIN_BRIDGED_SHARE = 0.97
DUT_BRIDGE = "br0"      # the bridged line's bridge (topology._bridged_line)
BR_NETFILTER = "net.bridge.bridge-nf-call-iptables"


def with_br_netfilter(line: Line) -> None:
    """Bridged IPv4 frames through iptables in the DUT, as on a container
    host. The switch is per namespace and its default is br_netfilter's
    module parameter, so it is set and read back rather than assumed; it
    exists only once br_netfilter is loaded (which is left to the host: it
    changes every namespace's bridges)."""
    try:
        line.dut.sysctl(BR_NETFILTER, 1)
    except FileNotFoundError as exc:
        raise RuntimeError(f"{BR_NETFILTER} does not exist: br_netfilter is not loaded "
                           "(modprobe br_netfilter)") from exc
    if line.dut.read_sysctl(BR_NETFILTER) != "1":
        raise RuntimeError(f"{BR_NETFILTER} stays {line.dut.read_sysctl(BR_NETFILTER)} in the DUT")


def bridged_shares(shares: dict) -> dict:
    """fast_path_shares without the kernel's IpForwDatagrams, which counts
    routed datagrams only: a bridge's frames never reach it, so its share
    would read 0 for every system, Linux included."""
    dropped = ("kernel_forwarded", "kernel_forwarded_share")
    return {name: {k: v for k, v in entry.items() if k not in dropped} for name, entry in shares.items()}


def into_bridge(line: Line) -> None:
    """The router line's egress made the only port of br0, which takes over
    its address (and, as the bridge adopts its only port's MAC, its MAC:
    the sink sees the source it expects)."""
    dut, port = line.dut, line.dut_out.ifname
    dut.run(["ip", "addr", "flush", "dev", port])
    dut.run(["ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"])
    dut.disable_ipv6("br0")
    dut.sysctl("net/ipv4/conf/default/rp_filter", 0)
    dut.run(["ip", "link", "set", port, "master", "br0"])
    dut.run(["ip", "link", "set", "br0", "up"])
    dut.run(["ip", "addr", "add", f"{DUT_OUT_IP}/{LINK_PREFIXLEN}", "dev", "br0"])
    dut.sysctl("net/ipv4/conf/br0/rp_filter", 0)
    batch = "".join(f"route add {prefix} via {SINK_IP} dev br0\n" for prefix in line.prefixes)
    dut.run(["ip", "-batch", "-"], input=batch)
    dut.run(["ip", "neigh", "replace", SINK_IP, "lladdr", line.snk.mac, "dev", "br0", "nud", "permanent"])
    dut.run(["bridge", "fdb", "replace", line.snk.mac, "dev", port, "master", "static"])
    bridge_mac = json.loads(dut.run(["ip", "-j", "link", "show", "dev", "br0"]).stdout)[0]["address"]
    if bridge_mac != line.dut_out.mac:
        raise RuntimeError(f"br0 has MAC {bridge_mac}, not its port's {line.dut_out.mac}")


def _plan(options: Options, systems) -> throughput.Plan:
    return throughput.Plan(
        systems=systems,
        frame_sizes=(FRAME_SIZE,),
        repetitions=options.reps(full=10),
        window=throughput.QUICK_WINDOW if options.quick else throughput.FULL_WINDOW,
        retries=0 if options.quick else 1,
    )


def _measure(options: Options, systems, bridged: bool, configure=None) -> tuple[dict, dict, dict]:
    plan = _plan(options, systems)
    names = tuple(s.name for s in systems)
    with throughput.rig(PREFIXES, configure=configure, lab_prefix=options.lab_prefix, bridged=bridged) as rig:
        what = "bridge" if bridged else "routed into a bridge"
        throughput.progress(f"{what}: {len(names)} systems x {plan.repetitions} repetitions")
        raw = throughput.run(rig, plan)
        summary = throughput.summarize(raw["repetitions"], FRAME_SIZE, names, PAIRS)
        method = throughput.method(plan, rig.placement, PREFIXES)
    return raw, summary, method


def _measure_netfilter(options: Options) -> dict:
    """The bridge line with br_netfilter and the stateful ruleset, its
    flows established first: figures, LinuxFP's fast-path shares, the
    conntrack states, and every check's errors."""
    plan = _plan(options, BRIDGE_SYSTEMS)
    setup = FlowSetup("bridge netfilter")
    with throughput.rig(PREFIXES, configure=with_br_netfilter, lab_prefix=options.lab_prefix, bridged=True) as rig:
        throughput.progress(f"bridge netfilter: br_netfilter, conntrack, {BLACKLIST} blacklist rules, nat; "
                            f"{len(plan.systems)} systems x {plan.repetitions} repetitions")
        measured, errors = measure_with_rules(rig, plan, stateful_ruleset(bridge=DUT_BRIDGE), prepare=setup,
                                              observe=observer(stateful=True))
    shares = bridged_shares(fast_path_shares(measured["repetitions"]))
    after = conntrack_after(measured["repetitions"])
    return {key: measured[key] for key in ("systems", "ratios", "ratio_spread", "regime", "repetitions")} | {
        "fast_path": shares,
        "conntrack": {"established": setup.established, "after_measurement": after},
        "errors": {**setup.errors, **errors, **conntrack_checks(setup.established, after),
                   **share_checks(shares, MIN_BRIDGED_SHARE)},
    }


def run(options: Options) -> dict:
    started = timestamp()
    raw, summary, method = _measure(options, BRIDGE_SYSTEMS, bridged=True)
    routed_raw, routed, _ = _measure(options, ROUTED_SYSTEMS, bridged=False, configure=into_bridge)
    netfilter = _measure_netfilter(options)
    method["bridge"] = ("br0 (ip link, STP off, ageing 300 s, bridge-nf-call-iptables=1 and no rules), "
                        "two veth ports, static FDB entries for the generator's and the sink's MACs")
    method["routed"] = ("the router line with its egress the only port of br0 (which holds the address), "
                        "routes via the sink on br0, the sink's MAC a static FDB entry")
    method["netfilter"] = (
        f"the bridge line with br_netfilter on ({BR_NETFILTER}=1 set and read back in the DUT) and "
        "iptables-nft: "
        "`:FORWARD DROP`, `-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`, `-m conntrack --ctstate "
        f"INVALID -j DROP`, {BLACKLIST} x `-A FORWARD -s <documentation /32> -j DROP`, `-i {DUT_BRIDGE} -o "
        f"{DUT_BRIDGE} -p udp -m udp --dport {BENCH_UDP_PORT} -j ACCEPT`; nat: `-A POSTROUTING -d {MASQUERADED} "
        "-j MASQUERADE` (no traffic goes there). The generator's flow established before measuring with no "
        "system installed: a datagram, its reply bridged from the sink to the generator, one more datagram "
        f"after {STREAM_MARK_S:g} s: [ASSURED]. Fast-pathed: LinuxFP's counters (`linuxfp -j stats`) over each "
        "measurement, fast path / (fast path + passed to kernel + dropped)")
    return {
        "scenario": "bridge",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": method,
        "systems": summary["systems"],
        "ratios": summary["ratios"],
        "ratio_spread": summary["ratio_spread"],
        "regime": summary["regime"],
        "repetitions": raw["repetitions"],
        "targets": TARGETS,
        "errors": raw["errors"],
        "routed": {key: routed[key] for key in ("systems", "ratios", "ratio_spread", "regime")}
        | {"repetitions": routed_raw["repetitions"], "errors": routed_raw["errors"]},
        "netfilter": netfilter,
    }


def summary_line(result: dict) -> str:
    line = ratios_line("bridge", result)
    if "routed" in result:
        line += f"; {ratios_line('routed into it', result['routed'])}"
    if "netfilter" in result:
        netfilter = result["netfilter"]
        label = f"with br_netfilter and stateful rules (fast-pathed {shares_text(netfilter['fast_path'])})"
        line += f"; {ratios_line(label, netfilter)}"
    return line


def _netfilter_markdown(result: dict) -> list[str]:
    netfilter = result["netfilter"]
    established = netfilter["conntrack"]["established"]
    out = [f"\n## Bridged with br_netfilter and a stateful ruleset\n\n{result['method']['netfilter']}. ",
           established_text(established),
           systems_table(netfilter["systems"]), "\n", ratios_table(netfilter["ratio_spread"], {}), "\n",
           table(SHARE_HEADER, share_rows(netfilter["fast_path"])),
           conntrack_after_text(netfilter["conntrack"]["after_measurement"], established)]
    if netfilter["errors"]:
        out.append("\nErrors and checks:\n\n" + "".join(f"- {k}: {v}\n" for k, v in netfilter["errors"].items()))
    return out


def markdown(result: dict) -> str:
    out = [f"# bridge benchmark, {result['timestamp']}\n\n",
           f"Machine: kernel {result['machine']['kernel']}, {result['machine']['cpus']} CPUs "
           f"({result['machine']['cpu_model']}); {result['method']['bridge']}; {FRAME_SIZE} B frames"
           f"{' (quick run)' if result['quick'] else ''}. pps = DUT capacity.\n\n",
           systems_table(result["systems"]), "\n", ratios_table(result["ratio_spread"], TARGETS)]
    if "routed" in result:
        out += [f"\n## Routed into the bridge\n\n{result['method']['routed']}.\n\n",
                systems_table(result["routed"]["systems"]), "\n", ratios_table(result["routed"]["ratio_spread"], {})]
    if "netfilter" in result:
        out += _netfilter_markdown(result)
    if result["errors"]:
        out.append("\n## Errors\n\n" + "".join(f"- {k}: {v}\n" for k, v in result["errors"].items()))
    return "".join(out)
