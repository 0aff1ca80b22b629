"""`linuxfp bench gateway6`: the virtual gateway forwarding IPv6 — the
router6 line (50 prefixes 2001:db8:100:i::/64 via the sink) with 100
ip6tables blacklist rules (FORWARD DROP by source, /128s the generator is
not among), the traffic from a source not on the list, at 78 B (the
smallest IPv6/UDP frame). In the same run, the ipset variant: the same
blacklist as one hash:net set of family inet6, matched by one rule; and
the stateful variant: a real host's ip6tables FORWARD (policy DROP,
`--ctstate RELATED,ESTABLISHED` first, INVALID dropped, the blacklist, the
generator's port accepted) over the generator's flows established in
conntrack first (gateway.py's FlowSetup). Linux alone and LinuxFP (XDP,
TC) in the same repetitions; same-run ratios and the share of the frames
the fast path forwarded itself (its counters)."""
from __future__ import annotations

import ipaddress

from . import gateway, throughput
from .gateway import (RATIO_KEYS, TARGET, FlowSetup, conntrack_after, conntrack_checks, fast_path_shares, observer,
                      share_checks)
from .generator import BENCH_UDP_PORT, FrameSpec
from .machine import machine
from .options import Options
from .results import ratios_line, timestamp
from .router6 import FRAME_SIZES
from .rules import PREFIXES, SYSTEM_NAMES, measure_with_rules, systems_plan

BLACKLIST = 100
FRAME_SIZE = FRAME_SIZES[0]
BLACKLIST_SET = "lfp-blacklist6"
RESTORE = "ip6tables-restore"


def blacklist_sources(count: int = BLACKLIST) -> list[str]:
    """`count` IPv6 source addresses (2001:db8:ffff::/48: documentation, and
    apart from the line's 2001:db8:b::/64 and routed 2001:db8:100::/56)."""
    base = int(ipaddress.IPv6Address("2001:db8:ffff::"))
    return [str(ipaddress.IPv6Address(base + (i << 16) + 1)) for i in range(count)]


def run(options: Options) -> dict:
    started = timestamp()
    plan = systems_plan(options, full_repetitions=10, frame_size=FRAME_SIZE)
    with throughput.rig(PREFIXES, lab_prefix=options.lab_prefix, ipv6=True) as rig:
        throughput.progress(f"gateway6: {BLACKLIST} ip6tables blacklist rules, {len(SYSTEM_NAMES)} systems x "
                            f"{plan.repetitions} repetitions")
        rig.generator.set_new_tuples(False)
        sources = blacklist_sources()
        summary, errors = measure_with_rules(rig, plan, gateway.blacklist_ruleset(sources=sources),
                                             observe=observer(stateful=False), restore=RESTORE)
        throughput.progress(f"gateway6 ipset: the {BLACKLIST} sources as one hash:net inet6 set, one rule; "
                            f"{len(SYSTEM_NAMES)} systems x {plan.repetitions} repetitions")
        rig.line.dut.run(["ipset", "restore"], input=gateway.blacklist_ipset(sources=sources, name=BLACKLIST_SET,
                                                                            family="inet6"))
        by_set, set_errors = measure_with_rules(rig, plan, gateway.ipset_ruleset(BLACKLIST_SET),
                                                observe=observer(stateful=False), restore=RESTORE)
        throughput.progress(f"gateway6 stateful: conntrack, {BLACKLIST} blacklist rules; "
                            f"{len(SYSTEM_NAMES)} systems x {plan.repetitions} repetitions")
        setup = FlowSetup("gateway6 stateful", size=FRAME_SIZE - 4)
        stateful, stateful_errors = measure_with_rules(rig, plan,
                                                       gateway.stateful_ruleset(sources=sources, nat=False),
                                                       prepare=setup, observe=observer(stateful=True),
                                                       restore=RESTORE)
        method = throughput.method(plan, rig.placement, PREFIXES)
        method["sample_frame"] = rig.generator.sample_frame(FrameSpec(FRAME_SIZE)).hex()
    method["rules"] = f"{BLACKLIST} x `-A FORWARD -s <2001:db8:ffff::/48 /128> -j DROP`, ip6tables-nft"
    method["ipset_variant"] = (f"the same {BLACKLIST} sources as one `ipset` hash:net family inet6 set, one "
                               f"rule: `-A FORWARD -m set --match-set {BLACKLIST_SET} src -j DROP`, ip6tables-nft")
    method["stateful_rules"] = (
        "`:FORWARD DROP`, `-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`, `-m conntrack --ctstate "
        f"INVALID -j DROP`, the same {BLACKLIST} blacklist rules, `-p udp -m udp --dport {BENCH_UDP_PORT} -j "
        "ACCEPT`; ip6tables-nft")
    method["stateful_flows"] = ("the generator's IPv6 flows (one per routed prefix) established through the DUT "
                                "before measuring, with no system installed: a datagram, its reply, one more "
                                "datagram past conntrack's stream mark")
    shares, set_shares = fast_path_shares(summary["repetitions"]), fast_path_shares(by_set["repetitions"])
    errors.update(share_checks(shares))
    set_errors.update(share_checks(set_shares))
    stateful_shares = fast_path_shares(stateful["repetitions"])
    stateful_after = conntrack_after(stateful["repetitions"])
    stateful_errors = {**setup.errors, **stateful_errors, **conntrack_checks(setup.established, stateful_after),
                       **share_checks(stateful_shares)}
    return {
        "scenario": "gateway6",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": method,
        "frame_size": FRAME_SIZE,
        "systems": summary["systems"],
        "ratios": summary["ratios"],
        "ratio_spread": summary["ratio_spread"],
        "regime": summary["regime"],
        "repetitions": summary["repetitions"],
        "fast_path": shares,
        "ipset": {key: by_set[key] for key in ("systems", "ratios", "ratio_spread", "regime", "repetitions")}
        | {"fast_path": set_shares, "errors": set_errors},
        "stateful": {key: stateful[key] for key in ("systems", "ratios", "ratio_spread", "regime", "repetitions")}
        | {"fast_path": stateful_shares, "errors": stateful_errors,
           "conntrack": {"established": setup.established, "after_measurement": stateful_after}},
        "targets": {"linuxfp-xdp/linux": TARGET},
        "errors": {**errors, **{f"ipset {k}": v for k, v in set_errors.items()},
                   **{f"stateful {k}": v for k, v in stateful_errors.items()}},
    }


def summary_line(result: dict) -> str:
    line = ratios_line(f"gateway6 ({BLACKLIST} ip6tables rules, {result.get('frame_size', FRAME_SIZE)} B)",
                       {**result, "errors": {}})
    for variant in ("ipset", "stateful"):
        ratios = result.get(variant, {}).get("ratios", {})
        line += f"; {variant} " + (", ".join(f"{k} {ratios[k]:.2f}" for k in RATIO_KEYS if k in ratios)
                                   or "no valid ratios")
    if result["errors"]:
        line += f"; errors: {', '.join(result['errors'])}"
    return line


def markdown(result: dict) -> str:
    return gateway.markdown(result)
