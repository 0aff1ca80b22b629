"""Differential proof of the filter node: random iptables and ip6tables
rulesets (nft and legacy backends, user chains, negations, ports, ICMP and
ICMPv6 types, interfaces, LOG and matches the fast path leaves to the
kernel) loaded with the real iptables-restore / ip6tables-restore; the same
frames through Linux alone and Linux + LinuxFP, byte-compared per
interface; and the fast path must have done real work: forwarded and
dropped frames itself."""
from __future__ import annotations

import pytest

from controller_counting import Counting, counting
from controller_counting import reasons as count_reasons
from linuxfp.lab import RouterTopology, run_differential
from linuxfp.lab.differential import Step
from linuxfp.lab.rulesets import (ROUTER_POOL, ROUTER_POOL6, Coverage, native_ruleset, probe_frames, probe_frames6,
                                  random_ruleset)

pytestmark = pytest.mark.netns

IFNAMES = ("to-src", "to-sink")
FRAMES = 250


def _restore(backend: str, text: str, tool: str = "iptables"):
    command = f"{tool}-restore" if backend == "nft" else f"{tool}-legacy-restore"

    def apply(router):
        router.dut.run([command], input=text)
    return apply


def _nft(text: str):
    def apply(router):
        router.dut.run(["nft", "-f", "-"], input=text)
    return apply


@pytest.mark.parametrize("hook,backends,seeds,prerouting", [
    ("xdp", ("nft",), range(100, 107), False),
    ("tc", ("legacy",), range(200, 207), False),
    ("tc", ("nft",), range(300, 305), True),
    ("xdp", ("nft", "legacy"), range(400, 402), False),     # both backends hold rules: both must accept
    ("xdp", ("nft", "legacy"), range(402, 406), True),
], ids=["xdp-nft", "tc-legacy", "tc-nft-raw", "xdp-both", "xdp-both-raw"])
def test_filter_verdicts_are_linux_verdicts(require_root, hook, backends, seeds, prerouting):
    """7 750 frames in all (the seeds in the test's id); in the raw rows,
    random raw and mangle PREROUTING chains too, and every other seed's
    FORWARD accepts established connections first: connections are tracked
    then, and what raw drops is dropped before conntrack."""
    _filter_differential(hook, backends, seeds, ipv6=False, prerouting=prerouting)


@pytest.mark.parametrize("hook,backends,seeds,prerouting", [
    ("xdp", ("nft",), range(500, 505), False),
    ("tc", ("legacy",), range(600, 604), False),
    ("xdp", ("nft", "legacy"), range(710, 712), True),     # both backends hold rules: both must accept
], ids=["xdp-nft", "tc-legacy", "xdp-both-raw"])
def test_ip6tables_verdicts_are_linux_verdicts(require_root, hook, backends, seeds, prerouting):
    """Routed IPv6 under random ip6tables FORWARD rules: the filter node's
    IPv6 classifier decides as Linux does, and forwards and drops itself
    (3 250 frames in all, TCP, UDP, ICMPv6, a protocol and a short header
    the fast path leaves to the kernel); in the last, random raw and mangle
    PREROUTING chains too, and connections tracked every other seed."""
    _filter_differential(hook, backends, seeds, ipv6=True, prerouting=prerouting)


@pytest.mark.parametrize("hook,family,ipv6,seeds,prerouting", [
    ("xdp", "inet", False, range(801, 805), True),
    ("tc", "ip", False, range(810, 813), False),
    ("xdp", "inet", True, range(820, 823), False),
], ids=["xdp-inet-raw", "tc-ip", "xdp-inet6"])
def test_native_forward_verdicts_are_linux_verdicts(require_root, hook, family, ipv6, seeds, prerouting):
    """The nft tool's own forward chains (random rulesets as
    iptables-restore-translate writes them: `ip protocol`, `icmp type`,
    interface wildcards, ranges, jumps, gotos, `log` and `meta length` the
    fast path leaves to the kernel), evaluated in the fast path as Linux
    evaluates them (2 500 frames in all); in the first, prerouting chains
    at raw's and mangle's priorities too (`notrack`, `meta mark set`: the
    kernel's), and every other seed's forward chain accepts established
    connections first."""
    _filter_differential(hook, ("native",), seeds, ipv6, family, prerouting)


def _filter_differential(hook: str, backends, seeds, ipv6: bool, family: str = "", prerouting: bool = False) -> None:
    coverage = Coverage()
    steps = []
    # the steps whose FORWARD accepts established connections first (odd
    # seeds'): connections are tracked then — with two backends, as long as
    # either's rules track them
    tracked_steps = []
    for seed in seeds:
        tracked = prerouting and seed % 2 == 1
        for n, backend in enumerate(backends):
            # (fewer rules where raw and mangle come too: the classes of
            # random chains on five hooks multiply, and with them the
            # controller's work per step)
            text = random_ruleset(seed * 10 + n, 24 if prerouting else 40, IFNAMES, coverage,
                                  pool=ROUTER_POOL6 if ipv6 else ROUTER_POOL,
                                  ipv6=ipv6, prerouting=prerouting, stateful=tracked)
            tracked_steps.append(tracked)
            if backend == "native":
                steps.append(Step(f"{family}-{seed}", _nft(native_ruleset(text, family, ipv6))))
                continue
            steps.append(Step(f"{backend}-{seed}", _restore(backend, text, "ip6tables" if ipv6 else "iptables")))
    seen: list[Counting] = []
    probe = probe_frames6 if ipv6 else probe_frames
    report = run_differential(RouterTopology(prefixes=8, ipv6=ipv6), steps, counting(seen, hook),
                              lambda router, index: probe(router, index, FRAMES), prefix="lfp-f6" if ipv6 else "lfp-f")
    assert report.ok, report.render() + "\n" + coverage.summary()
    # Linux forwarded some frames and dropped others ...
    delivered = sum(o.delivered for o in report.kernel)
    assert 0 < delivered < len(steps) * FRAMES, coverage.summary()
    # ... and the fast path did part of both.
    kernel = sum(o.forwarded_by_kernel for o in report.kernel)
    accelerated = sum(o.forwarded_by_kernel for o in report.accelerated)
    assert accelerated < kernel, report.render()
    stats = seen[0].stats[-1]
    reasons = count_reasons(stats)
    assert sum(i["fast_path"] for i in stats["interfaces"]) > 0, stats
    assert reasons.get("filter_dropped", 0) > 0, reasons
    assert not reasons.get("filter_stale") and not reasons.get("filter_unconfigured"), reasons
    assert not reasons.get("ipv6_off"), reasons
    if any(tracked_steps):
        # Where connections were tracked, the fast path dropped what raw
        # drops (before conntrack: the probes' connections are all new,
        # and what passes raw goes to the kernel, which makes them). (Step
        # k's burst shows in the reading after step k + 1: the last one's
        # in none.)
        delta = {reason: sum(count_reasons(seen[0].stats[k + 2]).get(reason, 0)
                             - count_reasons(seen[0].stats[k + 1]).get(reason, 0)
                             for k in range(len(steps) - 1) if tracked_steps[k])
                 for reason in ("filter_dropped", "filter_ct_new")}
        assert delta["filter_dropped"] > 0 and delta["filter_ct_new"] > 0, (delta, coverage.summary())


def _mostly_fast(steps, hook: str, prefixes: int, seed_of, prefix: str) -> list[Counting]:
    """The steps' frames (probe_frames of seed_of(step index)) through Linux
    alone and Linux + LinuxFP: the same, and at every step Linux forwarded
    some and dropped others while the fast path did most of both. The
    controller's counts as each step settled."""
    seen: list[Counting] = []
    report = run_differential(RouterTopology(prefixes=prefixes), steps, counting(seen, hook),
                              lambda router, index: probe_frames(router, seed_of(index), FRAMES), prefix=prefix)
    assert report.ok, report.render()
    for kernel, accelerated in zip(report.kernel, report.accelerated):
        assert 0 < len(kernel.at("sink:to-dut")) < FRAMES, report.render()
        assert accelerated.forwarded_by_kernel < kernel.forwarded_by_kernel // 2, report.render()
    return seen


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_address_types_are_linux_address_types(require_root, hook):
    """-m addrtype as Linux answers it, in the fast path: forwarded sources
    and destinations are UNICAST (a blackhole route's too: its lookup fails);
    the DUT's own addresses are LOCAL, and what is decided for them is the
    kernel's — an address added on a probed destination, then removed."""
    head = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n"
    rules = head + ("-A FORWARD -m addrtype --src-type LOCAL,BROADCAST,BLACKHOLE -j DROP\n"
                    "-A FORWARD -m addrtype ! --dst-type UNICAST -j DROP\n"
                    "-A FORWARD -m addrtype --src-type UNICAST -d 198.19.0.0/23 -j ACCEPT\n"
                    "-A FORWARD -p udp -m addrtype --dst-type MULTICAST,BROADCAST -j DROP\n"
                    "-A FORWARD -p udp -j ACCEPT\nCOMMIT\n")

    def blackholed(router):
        router.dut.run(["iptables-restore"], input=rules)
        router.dut.run(["ip", "route", "add", "blackhole", "198.18.96.0/19"])

    def address_added(router):      # a probed destination becomes the DUT's own
        router.dut.run(["ip", "addr", "add", "198.19.1.9/32", "dev", "lo"])

    def address_removed(router):
        router.dut.run(["ip", "addr", "del", "198.19.1.9/32", "dev", "lo"])

    steps = [Step("blackholed", blackholed), Step("address added", address_added),
             Step("address removed", address_removed)]
    seen = _mostly_fast(steps, hook, 8, lambda index: 40, "lfp-fat")
    reasons = count_reasons(seen[0].stats[-1])
    assert reasons.get("filter_dropped", 0) > 0 and not reasons.get("filter_stale"), reasons


# The Docker engine's raw rules (a container's address reachable only from
# its bridge), as it writes them since 28.0, alone; a test of the egress
# device before routing (never true there: the kernel's); then legacy raw
# rules beside a FORWARD rule, and a mark in mangle's PREROUTING (the
# kernel's, for what it marks)
DOCKER_RAW = "\n".join([
    "*raw", ":PREROUTING ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", ":CHECK - [0:0]",
    "-A PREROUTING -d 198.19.1.0/24 ! -i to-sink -j DROP",
    "-A PREROUTING -d 198.19.2.0/24 -j CHECK",
    "-A CHECK -d 198.19.2.1/32 -o to-sink -j DROP",     # (iptables refuses -o in PREROUTING itself)
    "COMMIT", ""])
LEGACY_RAW = "\n".join(["*raw", ":PREROUTING ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]",
                        "-A PREROUTING -s 198.18.64.0/24 -d 198.19.3.0/24 -j DROP", "COMMIT",
                        "*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]",
                        "-A FORWARD -d 198.19.2.0/25 -j DROP", "COMMIT", ""])
MANGLE_MARK = "\n".join(["*mangle", ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]",
                         ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]",
                         "-A PREROUTING -d 198.19.0.0/24 -j MARK --set-mark 1", "COMMIT", ""])


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_raw_and_mangle_prerouting_rules_are_linux_verdicts(require_root, hook):
    """iptables' raw and mangle PREROUTING chains, each one more hook
    before FORWARD (iptables-nft and iptables-legacy at once): what they
    drop the fast path drops, a test of the egress device (none before
    routing) and a mark are the kernel's for the packets that reach them,
    the rest forwarded in the fast path — the same frames as Linux alone."""
    steps = [Step("docker raw", _restore("nft", DOCKER_RAW)), Step("legacy raw too", _restore("legacy", LEGACY_RAW)),
             Step("mangle mark", _restore("nft", MANGLE_MARK)), Step("unchanged", lambda router: None)]
    seen = _mostly_fast(steps, hook, 4, lambda index: 70 + index, "lfp-fraw")
    reasons = count_reasons(seen[0].stats[-1])
    assert reasons.get("filter_dropped", 0) > 0 and reasons.get("filter_kernel", 0) > 0, reasons
    # (the counters are read as each step settles: a step's burst shows in
    # the reading after the next) with raw's rules alone, the fast path
    # dropped what they drop, and left the -o test to the kernel
    dropped, kernel = ([count_reasons(s).get(reason, 0) for s in seen[0].stats]
                       for reason in ("filter_dropped", "filter_kernel"))
    assert dropped[2] > dropped[1] and kernel[2] > kernel[1], (dropped, kernel)


def _blocklists(seed: int, blocked_sources: int, blocked_destinations: int):
    """A blocklist of the probes' own sources, then one of their
    destinations in a user chain that RETURNs: most of a blocked source's
    pairs join to its own class (the classifier's default pair, the
    datapath's second lookup)."""
    def apply(router):
        frames = probe_frames(router, seed, FRAMES)
        sources = sorted({".".join(map(str, f[26:30])) for f in frames if f[12:14] == b"\x08\x00"})
        destinations = sorted({".".join(map(str, f[30:34])) for f in frames if f[12:14] == b"\x08\x00"})
        text = ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:BLK - [0:0]\n"
                + "".join(f"-A FORWARD -s {a}/32 -j DROP\n" for a in sources[:blocked_sources])
                + "-A FORWARD -j BLK\n"
                + "".join(f"-A BLK -d {a}/32 -j DROP\n" for a in destinations[::3][:blocked_destinations])
                + "-A BLK -j RETURN\nCOMMIT\n")
        router.dut.run(["iptables-restore"], input=text)
    return apply


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_blocklists_of_sources_and_destinations_are_linux_verdicts(require_root, hook):
    """Blocked sources to every destination, every source to blocked
    destinations: the pairs a blocked source's class joins to are its
    default (one entry, found by a second lookup), the rest stored; the same
    frames as Linux alone, most of them decided in the fast path."""
    steps = [Step("blocklists", _blocklists(90, 12, 12)), Step("longer blocklists", _blocklists(91, 40, 40))]
    seen = _mostly_fast(steps, hook, 8, lambda index: 90 + index, "lfp-fbl")
    reasons = count_reasons(seen[0].stats[-1])
    assert reasons.get("filter_dropped", 0) > 0 and not reasons.get("filter_stale"), reasons
