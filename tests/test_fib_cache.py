"""The router's FIB-answer cache (bpf_modules/fib_cache.h), through
BPF_PROG_TEST_RUN in a namespace with real routes and neighbours, and the
router's real watch (bpf_modules/router_watch.c) attached.

Two proofs: every router fixture case gives the same verdict and bytes when
its answer comes from the cache; and every kind of change that can alter a
FIB answer makes the next packet look the FIB up again (never a hit on the
old answer), while a change that alters no answer leaves the bytes right."""
from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from linuxfp import datapath as dp
from linuxfp.lab.netns import Lab, entered
from linuxfp.lab.topology import wait_links_settled
from linuxfp.resources import modules_dir
from linuxfp.state.netlink import netns_cookie
from linuxfp.synth import compile_source

from pipeline_loader import LoadedPipeline
from fixtures.router_cases import CASES, FORWARD, NEXT_HOP_MAC, OUT_MAC, ROUTED, STALE_MAC, udp
from test_router_datapath import VERDICTS, LoadedRouter, configure_router_ns

HIT, MISS, OFF, STORM = "fib_cache_hit", "fib_cache_miss", "fib_cache_off", "fib_cache_storm"
KEY0 = struct.pack("<I", 0)


@pytest.fixture(scope="module")
def cache_ns():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("fc")
        configure_router_ns(ns)
        yield ns


@contextlib.contextmanager
def router_watch(ns, neigh_watch: dp.Map) -> Iterator[None]:
    """The router node's watch, attached as the controller attaches it
    (controller/companion.py), against the pipeline's lfp_neigh_watch."""
    obj = dp.BpfObject.open(compile_source((modules_dir() / "router_watch.c").read_text()).data, name="t_rwatch")
    links = []
    try:
        with entered(ns):
            cookie = netns_cookie()
        obj.set_rodata({"lfp_netns_cookie": cookie})
        obj.reuse_map("lfp_neigh_watch", neigh_watch)
        obj.load()
        for program, section in obj.program_sections().items():
            if section.startswith("raw_tp/"):
                links.append(dp.attach_raw_tracepoint(obj.program(program).fd, section.partition("/")[2]))
        dp.test_run(obj.program("lfp_watch_start").fd, b"")
        yield
        dp.test_run(obj.program("lfp_watch_stop").fd, b"")
    finally:
        for fd in links:
            fd.close()
        obj.close()


@contextlib.contextmanager
def armed(ns, loaded) -> Iterator[object]:
    """A loaded pipeline with the router's watch attached, the test runs on
    one CPU (the cache's slots are per CPU); closed afterwards."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        with router_watch(ns, loaded.obj.map("lfp_neigh_watch")):
            yield loaded
    finally:
        os.sched_setaffinity(0, cpus)
        loaded.obj.close()


@pytest.fixture(scope="module", params=["xdp", "tc"])
def router(request, cache_ns):
    with armed(cache_ns, LoadedRouter(request.param, cache_ns)) as loaded:
        yield loaded


def counted(router, frame: bytes) -> tuple[object, dict]:
    before = {name: router.counter(name) for name in (HIT, MISS, OFF, STORM)}
    result = router.run(frame)
    return result, {name: router.counter(name) - before[name] for name in before}


@pytest.mark.parametrize("case", CASES, ids=[c.description for c in CASES])
def test_a_cached_answer_is_the_lookups_answer(router, case):
    """Each case twice: the second time a forwarded frame's answer comes
    from the cache, with the same verdict and bytes."""
    frame = case.frame()
    for attempt in ("first", "again"):
        before = router.counter(case.counter)
        result, seen = counted(router, frame)
        assert result.retval == VERDICTS[router.hook][case.verdict], (case.description, attempt)
        assert router.counter(case.counter) == before + 1, (case.description, attempt)
        if case.verdict == FORWARD:
            assert result.data_out == case.expect(frame), (case.description, attempt)
            if attempt == "again":
                assert seen[HIT] == 1, seen
        else:
            assert result.data_out == frame


def _forwarded_via(router, frame: bytes) -> tuple[str, str, dict]:
    result, seen = counted(router, frame)
    if result.retval != VERDICTS[router.hook][FORWARD]:
        return "passed", "", seen
    out = Ether(result.data_out)
    return out.src, out.dst, seen


def _cached_again(router, frame: bytes, via: tuple[str, str]) -> None:
    """After an undo, every packet goes `via` and the answer is cached again:
    a packet after the one that looked it up is a hit. (Up to three tries: a
    generation the kernel moves on its own a moment after the undo — a
    timer's neighbour update, a deferred clean-up — makes the next packet
    look up once more, as it must; the full suite's load made it happen.)"""
    tries = []
    for _ in range(3):
        tries += [_forwarded_via(router, frame), _forwarded_via(router, frame)]
        assert all(t[:2] == via for t in tries), tries
        if tries[-1][2][HIT] == 1:
            return
    raise AssertionError(f"not cached again: {tries}")


# out0 as SETUP leaves it: a link going down takes its routes and neighbours,
# a new MAC its neighbours
OUT0_BACK = ("ip link set out0 up; ip route replace 198.19.0.0/24 via 198.18.2.1; "
             f"ip neigh replace 198.18.2.1 lladdr {NEXT_HOP_MAC} dev out0 nud permanent; "
             "ip route replace 198.51.100.0/25 via 198.18.2.2; "
             f"ip neigh replace 198.18.2.5 lladdr {STALE_MAC} dev out0 nud stale; "
             "ip route replace 198.51.100.128/25 via 198.18.2.5")

# (what changes, the command, how it is undone). Each must leave no answer
# cached from before it: the kernel bumps rt_genid or fib_seq, the watch the
# neighbour generation, or the answer depends on a sysctl read per packet.
CHANGES = [
    ("route replaced", "ip route replace 198.19.0.0/24 via 198.18.3.1", "ip route replace 198.19.0.0/24 via 198.18.2.1"),
    ("route deleted", "ip route del 198.19.0.0/24", "ip route add 198.19.0.0/24 via 198.18.2.1"),
    ("more specific route", "ip route add 198.19.0.0/28 via 198.18.3.1", "ip route del 198.19.0.0/28"),
    ("TOS route beside it", "ip route add 198.19.0.0/24 tos 0x10 via 198.18.3.1",
     "ip route del 198.19.0.0/24 tos 0x10"),
    ("policy rule", "ip rule add from 198.18.1.0/24 lookup 100 pref 100", "ip rule del pref 100"),
    ("destination made local", "ip addr add 198.19.0.9/32 dev small0", "ip addr del 198.19.0.9/32 dev small0"),
    ("ingress forwarding off", "sysctl -qw net.ipv4.conf.in0.forwarding=0",
     "sysctl -qw net.ipv4.conf.in0.forwarding=1"),
    ("egress MTU", "ip link set out0 mtu 1300", "ip link set out0 mtu 1500"),
    ("egress MAC", "ip link set out0 address 02:00:00:00:02:fd", f"ip link set out0 address {OUT_MAC}; {OUT0_BACK}"),
    ("egress down", "ip link set out0 down", OUT0_BACK),
    ("neighbour MAC", "ip neigh replace 198.18.2.1 lladdr 02:00:00:00:02:99 dev out0 nud permanent",
     f"ip neigh replace 198.18.2.1 lladdr {NEXT_HOP_MAC} dev out0 nud permanent"),
    ("neighbour deleted", "ip neigh del 198.18.2.1 dev out0",
     f"ip neigh replace 198.18.2.1 lladdr {NEXT_HOP_MAC} dev out0 nud permanent"),
    ("multipath hash policy", "sysctl -qw net.ipv4.fib_multipath_hash_policy=1",
     "sysctl -qw net.ipv4.fib_multipath_hash_policy=0"),
    ("multipath hash seed", "sysctl -qw net.ipv4.fib_multipath_hash_seed=1234",
     "sysctl -qw net.ipv4.fib_multipath_hash_seed=0"),
    ("ip_forward_use_pmtu", "sysctl -qw net.ipv4.ip_forward_use_pmtu=1", "sysctl -qw net.ipv4.ip_forward_use_pmtu=0"),
]


def sh(ns, command: str) -> None:
    ns.run(["sh", "-c", command])


@pytest.mark.parametrize("change,command,undo", CHANGES, ids=[c[0] for c in CHANGES])
def test_every_change_that_can_alter_an_answer_invalidates_it(router, cache_ns, change, command, undo):
    frame = bytes(udp(dst=ROUTED))
    _forwarded_via(router, frame)
    *_, seen = _forwarded_via(router, frame)
    assert seen[HIT] == 1, f"not cached before the change: {seen}"
    sh(cache_ns, command)
    try:
        *_, seen = _forwarded_via(router, frame)
        assert seen[HIT] == 0, f"{change}: served from the cache after it"
        assert seen[MISS] + seen[OFF] == 1, seen
    finally:
        sh(cache_ns, undo)
    # back as before (looked up again, unless the change was only a sysctl
    # the datapath reads per packet), then cached again
    _cached_again(router, frame, (OUT_MAC, NEXT_HOP_MAC))


def test_a_route_change_is_followed_by_the_next_packet(router, cache_ns):
    """No window: the next hop a packet gets changes with the kernel's FIB,
    whatever was cached (no controller runs here)."""
    frame = bytes(udp(dst=ROUTED))
    other = "02:00:00:00:03:02"
    sh(cache_ns, f"ip neigh replace 198.18.3.2 lladdr {other} dev small0 nud permanent")
    assert _forwarded_via(router, frame)[:2] == (OUT_MAC, NEXT_HOP_MAC)
    assert _forwarded_via(router, frame)[2][HIT] == 1
    sh(cache_ns, "ip route replace 198.19.0.0/24 via 198.18.3.2")
    try:
        assert _forwarded_via(router, frame)[:2] == (OUT_MAC, other)
        assert _forwarded_via(router, frame)[:2] == (OUT_MAC, other)
    finally:
        sh(cache_ns, "ip route replace 198.19.0.0/24 via 198.18.2.1; ip neigh del 198.18.3.2 dev small0")


def test_longer_packets_are_looked_up_until_their_length_is_proven(router):
    """An entry serves packets up to the longest length the kernel answered
    success for: a longer one is looked up (the MTU check is the kernel's)."""
    short, long = bytes(udp(dst=ROUTED, size=10)), bytes(udp(dst=ROUTED, size=1000))
    _forwarded_via(router, short)
    assert _forwarded_via(router, short)[2][HIT] == 1
    assert _forwarded_via(router, long)[2][MISS] == 1
    assert _forwarded_via(router, long)[2][HIT] == 1
    assert _forwarded_via(router, short)[2][HIT] == 1


def test_a_fresh_epoch_record_matches_no_entry_stored_before(router):
    """lfp_fib_epochs recreated or zeroed under a kept cache: its first
    epoch comes from the boot clock, past every epoch issued before."""
    frame = bytes(udp(dst=ROUTED))
    _forwarded_via(router, frame)
    assert _forwarded_via(router, frame)[2][HIT] == 1
    epochs = router.obj.map("lfp_fib_epochs")
    for family in (0, 1):
        epochs.update_percpu(struct.pack("<I", family), bytes(epochs.value_size))
    assert _forwarded_via(router, frame)[2][MISS] == 1
    assert _forwarded_via(router, frame)[2][HIT] == 1


# The storm's numbers (fib_cache.h): misses in a row that start one, and
# its draws, an LCG from the record's zeroed state whose top 5 bits pick
# (when 0) the packets that probe.
STORM_MISSES = 64


def storm_draws(count: int, state: int = 0) -> tuple[list[int], int]:
    """Which of the next `count` packets of a storm probe (1-based), and the
    state after them."""
    probing = []
    for number in range(1, count + 1):
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        if state >> 27 == 0:
            probing.append(number)
    return probing, state


def storm_then_calm(router, family: int, new_flow, steady: bytes, via: tuple[str, str]) -> None:
    """From a zeroed record of `family`: STORM_MISSES frames of new keys
    miss; during the next 64 only those the draws pick probe (and miss);
    then one flow repeated ends the storm — the first probe of it keeps the
    answer, a later one hits (the next drawn, unless a generation the
    kernel moves on its own came between) — and no packet after skips the
    probe. Every frame forwarded `via`, as the lookup says."""
    epochs = router.obj.map("lfp_fib_epochs")
    epochs.update_percpu(struct.pack("<I", family), bytes(epochs.value_size))
    seen = []
    for number in range(STORM_MISSES + 64):
        out_src, out_dst, counts = _forwarded_via(router, new_flow(number))
        assert (out_src, out_dst) == via, (number, out_src, out_dst)
        seen.append(counts)
    assert all(c[MISS] == 1 for c in seen[:STORM_MISSES]), seen[:STORM_MISSES]
    storm = seen[STORM_MISSES:]
    expected, state = storm_draws(len(storm))
    assert expected, "the draws pick no packet of the storm: a longer one is needed"
    probed = [n for n, c in enumerate(storm, 1) if c[MISS] == 1]
    assert probed == expected, (probed, expected)
    assert sum(c[STORM] for c in storm) == len(storm) - len(expected) and not any(c[HIT] or c[OFF] for c in storm)
    drawn, _ = storm_draws(400, state)
    calm = [_forwarded_via(router, steady) for _ in range(drawn[5] + 8)]
    assert all(v[:2] == via for v in calm), calm
    first_hit = next((n for n, v in enumerate(calm, 1) if v[2][HIT]), None)
    assert first_hit in drawn[1:6], (first_hit, drawn[:6], [v[2] for v in calm])
    after = [v[2] for v in calm[first_hit:]]
    assert not any(c[STORM] for c in after) and sum(c[HIT] for c in after) >= len(after) - 2, after


def test_a_storm_of_misses_skips_the_probe_until_a_hit(router):
    """Every frame a new (source, destination), as in a scan or the bench's
    all-new traffic: after 64 misses in a row only one packet in 32 probes
    the cache (the rest are looked up, as the probe's slot would only have
    cost a cache miss); a flow that hits again ends the storm."""
    def new_flow(number: int) -> bytes:
        return bytes(udp(dst=f"198.19.0.{1 + number % 250}", src=f"198.18.1.{10 + number // 250}"))

    storm_then_calm(router, 0, new_flow, bytes(udp(dst=ROUTED)), (OUT_MAC, NEXT_HOP_MAC))


def test_packets_too_long_for_a_kept_answer_start_no_storm(router):
    """A flow whose answer is kept for short packets, then only packets the
    egress MTU refuses (looked up each time: the kernel's FRAG_NEEDED): each
    finds its flow's answer in the slot, so no storm starts, and the flow's
    short packets are still served from the cache."""
    from fixtures.router_cases import SMALL_MTU
    epochs = router.obj.map("lfp_fib_epochs")
    epochs.update_percpu(struct.pack("<I", 0), bytes(epochs.value_size))
    short, long = bytes(udp(dst=SMALL_MTU, size=100)), bytes(udp(dst=SMALL_MTU, size=1300, flags="DF"))
    _forwarded_via(router, short)
    assert _forwarded_via(router, short)[2][HIT] == 1
    seen = [_forwarded_via(router, long) for _ in range(STORM_MISSES + 40)]
    assert all(v[0] == "passed" and v[2][MISS] == 1 for v in seen), [v[2] for v in seen]
    assert _forwarded_via(router, short)[2][HIT] == 1


def test_nothing_is_cached_without_the_neighbour_watch(router):
    watch = router.obj.map("lfp_neigh_watch")
    saved = watch.lookup(KEY0)
    generation = struct.unpack("<QQ", saved)[0]
    watch.update(KEY0, struct.pack("<QQ", generation + 1, 0))
    try:
        frame = bytes(udp(dst=ROUTED))
        for _ in range(2):
            via = _forwarded_via(router, frame)
            assert via[:2] == (OUT_MAC, NEXT_HOP_MAC) and via[2][OFF] == 1 and via[2][HIT] == 0, via
    finally:
        watch.update(KEY0, struct.pack("<QQ", generation + 2, 1))


# -- cached and live answers under seeded churn -----------------------------

CHURN_SETUP = [
    "ip link add in0 address 02:00:00:00:01:fe type veth peer name in0p",
    "ip link add out0 address 02:00:00:00:02:fe type veth peer name out0p",
    "ip link add out1 address 02:00:00:00:03:fe type veth peer name out1p",
    "ip link set in0p up", "ip link set out0p up", "ip link set out1p up",
    "ip link set in0 up", "ip link set out0 up", "ip link set out1 up",
    "ethtool -K out0p gro on", "ethtool -K out1p gro on",
    "ip addr add 198.18.1.254/24 dev in0",
    "ip addr add 198.18.2.254/24 dev out0",
    "ip addr add 198.18.3.254/24 dev out1",
    "ip neigh replace 198.18.2.1 lladdr 02:00:00:00:02:01 dev out0 nud permanent",
    "ip neigh replace 198.18.3.1 lladdr 02:00:00:00:03:01 dev out1 nud permanent",
    "ip route add 198.19.100.0/24 via 198.18.3.1 table 200",
    "sysctl -qw net.ipv4.ip_forward=1",
] + [f"ip route add 198.19.{i}.0/24 via 198.18.{2 + i % 2}.1" for i in range(6)]
GATEWAYS = {"A": ("198.18.2.1", "out0"), "B": ("198.18.3.1", "out1")}
NEIGH_MACS = ("02:00:00:00:0a:01", "02:00:00:00:0a:02", "02:00:00:00:0b:01")


def _churn_step(rng) -> str:
    """One random configuration change, as an operator's command."""
    i = rng.randrange(6)
    gw, dev = GATEWAYS[rng.choice("AB")]
    return rng.choice([
        f"ip route replace 198.19.{i}.0/24 via {gw}",
        f"ip route del 198.19.{i}.0/24",
        f"ip route replace 198.19.{i}.0/28 via {gw}",
        f"ip route replace 198.19.{i}.0/24 tos 0x10 via {gw}",
        f"ip neigh replace {gw} lladdr {rng.choice(NEIGH_MACS)} dev {dev} nud permanent",
        f"ip neigh del {gw} dev {dev}",
        f"ip neigh replace {gw} lladdr {rng.choice(NEIGH_MACS)} dev {dev} nud reachable",
        f"ip link set {dev} mtu {rng.choice((1500, 900))}",
        f"ip addr replace 198.19.{i}.9/32 dev {dev}",
        f"ip addr del 198.19.{i}.9/32 dev {dev}",
        f"ip rule add to 198.19.{i}.0/24 lookup 200 pref {100 + i}",
        f"ip rule del pref {100 + i}",
        f"ip route replace 198.19.{i}.0/24 table 200 via {gw}",
        f"sysctl -qw net.ipv4.fib_multipath_hash_policy={rng.choice((0, 1))}",
        f"ip route replace 198.19.{i}.0/24 nexthop via 198.18.2.1 nexthop via 198.18.3.1",
        f"sysctl -qw net.ipv4.conf.in0.forwarding={rng.choice((0, 1, 1))}",
        f"ip link set {dev} down; ip link set {dev} up; "
        f"ip neigh replace {gw} lladdr 02:00:00:00:0b:01 dev {dev} nud permanent",
    ])


def _churn_frames() -> list[bytes]:
    frames = []
    for i in range(6):
        for src in ("198.18.1.1", "198.18.1.2"):
            for size, sport in ((0, 4000), (900, 4001)):
                frames.append(bytes(Ether(src="02:00:00:00:01:01", dst="02:00:00:00:01:fe")
                                    / IP(src=src, dst=f"198.19.{i}.9", ttl=64) / UDP(sport=sport, dport=5000)
                                    / (b"x" * size)))
    return frames


def churn_compare(hook: str, seed: int, setup: list[str], step, frames: list[bytes], steps: int = 120,
                  counted: dict | None = None) -> tuple[list, int, int, int]:
    """A seeded random loop of configuration changes (`step(rng)`: one
    command) in a fresh namespace; after each, the same frames through the
    program with the cache armed (twice: filled, then served) and through
    the same program with it off (every answer looked up live). Returns the
    differences, the hits of each, and the frames the cached one forwarded."""
    import random

    rng = random.Random(seed)
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("fcc")
        for cmd in setup:
            sh(ns, cmd)
        cached = LoadedPipeline(ns, "in0", hook, ("router", "transmit"), f"t_cached_{hook}")
        live = LoadedPipeline(ns, "in0", hook, ("router", "transmit"), f"t_live_{hook}")
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cpus)})
        differences, hits, forwarded = [], 0, 0
        try:
            with router_watch(ns, cached.obj.map("lfp_neigh_watch")):
                for number in range(steps):
                    command = step(rng)
                    ns.run(["sh", "-c", command], check=False)
                    # After a link comes up, its carrier follows through
                    # linkwatch, later (and with it the next hops' link-down
                    # flags, which move the kernel's generations): waited
                    # for, so the kernel's answer cannot change between the
                    # cached run and the live one it is compared with (a
                    # clean-clone run once saw the IPv6 loop's first frames
                    # after a flap differ so, the second pass agreeing).
                    wait_links_settled([ns])
                    for attempt in range(2):
                        before = cached.counter(HIT)
                        for frame in frames:
                            a, b = cached.run(frame), live.run(frame)
                            forwarded += a.retval == VERDICTS[hook][FORWARD]
                            if (a.retval, a.data_out) != (b.retval, b.data_out):
                                differences.append((number, command, attempt, len(frame), a.retval, b.retval))
                        hits += cached.counter(HIT) - before
                live_hits = live.counter(HIT)
                for name in counted or {}:
                    counted[name] = cached.counter(name)
        finally:
            os.sched_setaffinity(0, cpus)
            cached.close()
            live.close()
    return differences, hits, live_hits, forwarded


def _storm_churn_step(rng) -> str:
    """_churn_step, then the prefixes' own routes put back and the ingress's
    forwarding left on: a link flap deletes its routes and a step may turn
    forwarding off, and the storms to be crossed need answers to serve."""
    while "forwarding" in (command := _churn_step(rng)):
        pass
    return "; ".join([command] + [f"ip route replace 198.19.{i}.0/24 via 198.18.{2 + i % 2}.1" for i in range(6)])


def _storm_frames() -> list[bytes]:
    """The churn's prefixes from 16 sources each, 96 keys (to .20: no step
    makes it a local address): after every change more than 64 keys miss in
    a row, and a storm starts."""
    return [bytes(Ether(src="02:00:00:00:01:01", dst="02:00:00:00:01:fe")
                  / IP(src=f"198.18.1.{10 + n}", dst=f"198.19.{i}.20", ttl=64) / UDP(sport=4000, dport=5000))
            for i in range(6) for n in range(16)]


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_cached_and_live_answers_agree_through_storms_of_misses(hook):
    """The same churn with more keys than a run of misses allows: storms
    start and end (probes skipped, answers served again), and every frame is
    the live lookup's."""
    counted = {STORM: 0}
    differences, hits, live_hits, forwarded = churn_compare(hook, 1101, CHURN_SETUP, _storm_churn_step,
                                                            _storm_frames(), steps=24, counted=counted)
    assert not differences, differences[:10]
    assert counted[STORM] > 0 and hits > 0 and live_hits == 0 and forwarded > 0, (counted, hits, live_hits,
                                                                                   forwarded)


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_cached_and_live_answers_agree_under_seeded_churn(hook):
    """Routes, TOS routes, more specific routes, multipath, policy rules,
    neighbours, addresses, MTUs, link flaps, sysctls (churn_compare): the
    same verdict and bytes, and the cache served answers."""
    differences, hits, live_hits, forwarded = churn_compare(hook, 1100, CHURN_SETUP, _churn_step, _churn_frames())
    assert not differences, differences[:10]
    assert hits > 0 and live_hits == 0 and forwarded > 0, (hits, live_hits, forwarded)


def test_a_group_members_replacement_is_followed(router, cache_ns):
    """A nexthop object that routes reach only through a group: replacing it
    flushes nothing (rt_genid, fib_seq stay), nexthop.seq moves."""
    frame = bytes(udp(dst=ROUTED))
    other = "02:00:00:00:02:09"
    sh(cache_ns, f"ip neigh replace 198.18.2.9 lladdr {other} dev out0 nud permanent; "
                 "ip nexthop add id 11 via 198.18.2.1 dev out0; ip nexthop add id 12 group 11; "
                 "ip route replace 198.19.0.0/24 nhid 12")
    try:
        assert _forwarded_via(router, frame)[:2] == (OUT_MAC, NEXT_HOP_MAC)
        assert _forwarded_via(router, frame)[2][HIT] == 1
        sh(cache_ns, "ip nexthop replace id 11 via 198.18.2.9 dev out0")
        via = _forwarded_via(router, frame)
        assert via[:2] == (OUT_MAC, other) and via[2][HIT] == 0, via
    finally:
        sh(cache_ns, "ip route replace 198.19.0.0/24 via 198.18.2.1; ip nexthop del id 12; ip nexthop del id 11; "
                     "ip neigh del 198.18.2.9 dev out0")


@pytest.mark.parametrize("setup,undo", [
    ("ip nexthop add id 21 via 198.18.2.1 dev out0; ip route add 198.19.7.0/24 nhid 21",
     "ip route del 198.19.7.0/24; ip nexthop del id 21"),
    ("sysctl -qw net.ipv4.conf.small0.ignore_routes_with_linkdown=1",
     "sysctl -qw net.ipv4.conf.small0.ignore_routes_with_linkdown=0"),
], ids=["nexthop objects", "ignore_routes_with_linkdown"])
def test_the_controller_turns_the_cache_off_for_what_no_generation_covers(router, cache_ns, setup, undo):
    """The router's lfp_fib_policy table, as the graph derives it: off, with
    the reason in `linuxfp graph`; every packet then looked up."""
    with policy_from_graph(router, cache_ns, setup, undo, bits=1, note="FIB answers not cached"):
        frame = bytes(udp(dst=ROUTED))
        for _ in range(2):
            via = _forwarded_via(router, frame)
            assert via[:2] == (OUT_MAC, NEXT_HOP_MAC) and via[2][OFF] == 1, via


@contextlib.contextmanager
def policy_from_graph(router, ns, setup: str, undo: str, *, bits: int, note: str) -> Iterator[None]:
    """After `setup`, the graph's lfp_fib_policy holds `bits` and `linuxfp
    graph` shows `note`; the table written into the loaded pipeline as the
    controller writes it; cleared and `undo` run afterwards."""
    from linuxfp.graph import build_graph, to_text
    from linuxfp.state import read_snapshot

    policy = router.obj.map("lfp_fib_policy")
    sh(ns, setup)
    try:
        with entered(ns):
            graph = build_graph(read_snapshot(), router.hook)
        table = next(t for t in graph.tables if t.name == "lfp_fib_policy")
        assert table.entries == frozenset({(KEY0, struct.pack("<I", bits))}), table
        assert note in to_text(graph)
        for key, value in table.entries:
            policy.update(key, value)
        yield
    finally:
        policy.update(KEY0, bytes(4))
        sh(ns, undo)


# -- IPv6 -------------------------------------------------------------------

SETUP6 = [
    "sysctl -qw net.ipv6.conf.default.disable_ipv6=0",
    # before the links exist (a device copies the default when it is made):
    # a link-local address's duplicate detection would otherwise finish
    # a second or two after every `ip link set ... up` and add its routes
    # then, moving fib6_sernum under a later test's cached answer
    "sysctl -qw net.ipv6.conf.default.accept_dad=0",
    "ip link add in0 address 02:00:00:00:01:fe type veth peer name in0p",
    "ip link add out0 address 02:00:00:00:02:fe type veth peer name out0p",
    "ip link add out1 address 02:00:00:00:03:fe type veth peer name out1p",
    "sysctl -qw net.ipv6.conf.all.keep_addr_on_down=1",
    "ip link set in0p up", "ip link set out0p up", "ip link set out1p up",
    "ip link set in0 up", "ip link set out0 up", "ip link set out1 up",
    "ethtool -K out0p gro on", "ethtool -K out1p gro on",
    "ip -6 addr add 2001:db8:1::fe/64 dev in0 nodad",
    "ip -6 addr add 2001:db8:2::fe/64 dev out0 nodad",
    "ip -6 addr add 2001:db8:3::fe/64 dev out1 nodad",
    "ip -6 neigh replace 2001:db8:2::1 lladdr 02:00:00:00:02:01 dev out0 nud permanent",
    "ip -6 neigh replace 2001:db8:3::1 lladdr 02:00:00:00:03:01 dev out1 nud permanent",
    "ip -6 route add 2001:db8:10::/48 via 2001:db8:3::1 table 200",
    "ip -6 route add 2001:db8:10::/48 via 2001:db8:3::1",
    "sysctl -qw net.ipv6.conf.all.forwarding=1",
    "sysctl -qw net.ipv4.ip_forward=1",     # (XDP egresses are IPv4-forwarding ones: interfaces.py)
] + [f"ip -6 route add 2001:db8:10:{i}::/64 via 2001:db8:{2 + i % 2}::1" for i in range(6)]
GATEWAYS6 = {"A": ("2001:db8:2::1", "out0"), "B": ("2001:db8:3::1", "out1")}
OUT0_MAC6, GW0_MAC6 = "02:00:00:00:02:fe", "02:00:00:00:02:01"


def udp6(dst: str, *, src: str = "2001:db8:1::1", size: int = 0, label: int = 0, sport: int = 4000) -> bytes:
    from scapy.layers.inet6 import IPv6
    return bytes(Ether(src="02:00:00:00:01:01", dst="02:00:00:00:01:fe")
                 / IPv6(src=src, dst=dst, hlim=64, fl=label) / UDP(sport=sport, dport=5000) / (b"x" * size))


@pytest.fixture(scope="module")
def cache6_ns():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("fc6")
        for cmd in SETUP6:
            sh(ns, cmd)
        yield ns


@pytest.fixture(scope="module", params=["xdp", "tc"])
def router6(request, cache6_ns):
    hook = request.param
    with armed(cache6_ns, LoadedPipeline(cache6_ns, "in0", hook, ("router", "transmit"), f"t_c6_{hook}")) as loaded:
        yield loaded


ROUTED6 = "2001:db8:10:0::9"     # via 2001:db8:2::1 on out0
# out0 as SETUP6 leaves it: a link going down takes its routes and
# neighbours, a new MAC its neighbours
OUT0_BACK6 = ("ip link set out0 up; ip -6 route replace 2001:db8:10:0::/64 via 2001:db8:2::1; "
              f"ip -6 route replace 2001:db8:10:2::/64 via 2001:db8:2::1; "
              f"ip -6 route replace 2001:db8:10:4::/64 via 2001:db8:2::1; "
              f"ip -6 neigh replace 2001:db8:2::1 lladdr {GW0_MAC6} dev out0 nud permanent")

# (what changes, the command, how it is undone): each must leave no IPv6
# answer cached from before it.
CHANGES6 = [
    ("route replaced", "ip -6 route replace 2001:db8:10:0::/64 via 2001:db8:3::1",
     "ip -6 route replace 2001:db8:10:0::/64 via 2001:db8:2::1"),
    ("route deleted (a shorter prefix answers)", "ip -6 route del 2001:db8:10:0::/64",
     "ip -6 route add 2001:db8:10:0::/64 via 2001:db8:2::1"),
    ("more specific route", "ip -6 route add 2001:db8:10:0::/96 via 2001:db8:3::1",
     "ip -6 route del 2001:db8:10:0::/96"),
    ("policy rule", "ip -6 rule add to 2001:db8:10::/48 lookup 200 pref 100", "ip -6 rule del pref 100"),
    ("destination made local", "ip -6 addr add 2001:db8:10:0::9/128 dev out1 nodad",
     "ip -6 addr del 2001:db8:10:0::9/128 dev out1"),
    ("ingress forwarding off", "sysctl -qw net.ipv6.conf.in0.forwarding=0",
     "sysctl -qw net.ipv6.conf.in0.forwarding=1"),
    ("egress MAC", "ip link set out0 address 02:00:00:00:02:fd", f"ip link set out0 address {OUT0_MAC6}; {OUT0_BACK6}"),
    ("egress down", "ip link set out0 down", OUT0_BACK6),
    ("neighbour MAC", "ip -6 neigh replace 2001:db8:2::1 lladdr 02:00:00:00:02:99 dev out0 nud permanent",
     f"ip -6 neigh replace 2001:db8:2::1 lladdr {GW0_MAC6} dev out0 nud permanent"),
    ("neighbour deleted", "ip -6 neigh del 2001:db8:2::1 dev out0",
     f"ip -6 neigh replace 2001:db8:2::1 lladdr {GW0_MAC6} dev out0 nud permanent"),
    ("multipath hash seed", "sysctl -qw net.ipv4.fib_multipath_hash_seed=1234",
     "sysctl -qw net.ipv4.fib_multipath_hash_seed=0"),
    ("multipath hash policy", "sysctl -qw net.ipv6.fib_multipath_hash_policy=2",
     "sysctl -qw net.ipv6.fib_multipath_hash_policy=0"),
]


def _forwarded6(router, frame: bytes) -> tuple[str, str, dict]:
    return _forwarded_via(router, frame)


def test_an_ipv6_route_deletion_is_followed_by_the_next_packet(router6, cache6_ns):
    """A deletion moves no fib6_sernum: the count of deleted routes must
    make the next packet take the shorter prefix (via out1)."""
    frame = udp6(ROUTED6)
    _forwarded6(router6, frame)
    assert _forwarded6(router6, frame)[:2] == (OUT0_MAC6, GW0_MAC6)
    sh(cache6_ns, "ip -6 route del 2001:db8:10:0::/64")
    try:
        for _ in range(2):
            assert _forwarded6(router6, frame)[:2] == ("02:00:00:00:03:fe", "02:00:00:00:03:01")
    finally:
        sh(cache6_ns, "ip -6 route add 2001:db8:10:0::/64 via 2001:db8:2::1")


@pytest.mark.parametrize("change,command,undo", CHANGES6, ids=[c[0] for c in CHANGES6])
def test_every_change_that_can_alter_an_ipv6_answer_invalidates_it(router6, cache6_ns, change, command, undo):
    frame = udp6(ROUTED6)
    _forwarded6(router6, frame)
    via = _forwarded6(router6, frame)
    assert via[:2] == (OUT0_MAC6, GW0_MAC6) and via[2][HIT] == 1, f"not cached before the change: {via}"
    sh(cache6_ns, command)
    try:
        *_, seen = _forwarded6(router6, frame)
        assert seen[HIT] == 0, f"{change}: served from the cache after it"
    finally:
        sh(cache6_ns, undo)
    _cached_again(router6, frame, (OUT0_MAC6, GW0_MAC6))


def test_a_storm_of_ipv6_misses_skips_the_probe_until_a_hit(router6):
    """The same storm for IPv6's answers (their own record)."""
    def new_flow(number: int) -> bytes:
        return udp6(f"2001:db8:10:0::{number + 0x100:x}")

    storm_then_calm(router6, 1, new_flow, udp6(ROUTED6), (OUT0_MAC6, GW0_MAC6))


def test_an_ipv6_flow_past_1280_bytes_starts_no_storm(router6):
    """Its packets are always looked up (longer than an entry may serve),
    but each finds its flow's answer in the slot: no storm of misses, and
    the flow's shorter packets are served from the cache throughout."""
    epochs = router6.obj.map("lfp_fib_epochs")
    epochs.update_percpu(struct.pack("<I", 1), bytes(epochs.value_size))
    big, small = udp6(ROUTED6, size=1300), udp6(ROUTED6, size=100)
    seen = [_forwarded6(router6, big) for _ in range(STORM_MISSES + 40)]
    assert all(v[:2] == (OUT0_MAC6, GW0_MAC6) and v[2][MISS] == 1 for v in seen), [v[2] for v in seen]
    assert _forwarded6(router6, small)[2][HIT] == 1


def test_ipv6_answers_are_cached_per_flow_label_and_up_to_1280_bytes(router6):
    """The flow label is in the key (the multipath hash reads it); a packet
    past 1280 bytes is always looked up (a learned path MTU may shrink in
    place, never below 1280)."""
    frame = udp6(ROUTED6)
    _forwarded6(router6, frame)
    assert _forwarded6(router6, frame)[2][HIT] == 1
    assert _forwarded6(router6, udp6(ROUTED6, label=0x12345))[2][MISS] == 1
    big = udp6(ROUTED6, size=1300)
    for _ in range(3):
        via = _forwarded6(router6, big)
        assert via[:2] == (OUT0_MAC6, GW0_MAC6) and via[2][MISS] == 1, via
    assert _forwarded6(router6, udp6(ROUTED6, size=1200))[2][HIT] == 1


@pytest.mark.parametrize("setup,undo,why", [
    ("ip -6 route add 2001:db8:77::/64 via 2001:db8:2::1 expires 300", "ip -6 route del 2001:db8:77::/64",
     "routes expire"),
    ("ip nexthop add id 61 via 2001:db8:2::1 dev out0; ip -6 route add 2001:db8:78::/64 nhid 61",
     "ip -6 route del 2001:db8:78::/64; ip nexthop del id 61", "routes use nexthop objects"),
    ("ip -6 route add 2001:db8:79::/64 nexthop via 2001:db8:2::1 dev out0 nexthop via 2001:db8:3::1 dev out1",
     "ip -6 route del 2001:db8:79::/64", "multipath routes"),
    ("sysctl -qw net.ipv6.conf.out1.ignore_routes_with_linkdown=1",
     "sysctl -qw net.ipv6.conf.out1.ignore_routes_with_linkdown=0", "ignore_routes_with_linkdown"),
    ("sysctl -qw net.ipv6.conf.out1.accept_ra=2", "sysctl -qw net.ipv6.conf.out1.accept_ra=1",
     "an interface accepts router advertisements"),
], ids=["routes that expire", "nexthop objects", "multipath", "ignore_routes_with_linkdown", "accept_ra"])
def test_the_controller_turns_the_ipv6_cache_off_for_what_no_generation_covers(router6, cache6_ns, setup, undo,
                                                                              why):
    """IPv6's own bit of lfp_fib_policy, with the reason in `linuxfp graph`."""
    with policy_from_graph(router6, cache6_ns, setup, undo, bits=2, note=f"IPv6 FIB answers not cached: {why}"):
        for _ in range(2):
            via = _forwarded6(router6, udp6(ROUTED6))
            assert via[:2] == (OUT0_MAC6, GW0_MAC6) and via[2][OFF] == 1 and via[2][HIT] == 0, via


def _churn6_step(rng) -> str:
    i = rng.randrange(6)
    gw, dev = GATEWAYS6[rng.choice("AB")]
    prefix = f"2001:db8:10:{i}::"
    return rng.choice([
        f"ip -6 route replace {prefix}/64 via {gw}",
        f"ip -6 route del {prefix}/64",
        f"ip -6 route replace {prefix}/96 via {gw}",
        f"ip -6 route del {prefix}/96",
        f"ip -6 route replace {prefix}/64 from 2001:db8:1::2/128 via {gw}",
        f"ip -6 neigh replace {gw} lladdr {rng.choice(NEIGH_MACS)} dev {dev} nud permanent",
        f"ip -6 neigh del {gw} dev {dev}",
        f"ip -6 neigh replace {gw} lladdr {rng.choice(NEIGH_MACS)} dev {dev} nud reachable",
        f"ip link set {dev} mtu {rng.choice((1500, 1280))}",
        f"ip -6 addr replace {prefix}9/128 dev {dev} nodad",
        f"ip -6 addr del {prefix}9/128 dev {dev}",
        f"ip -6 rule add to {prefix}/64 lookup 200 pref {100 + i}",
        f"ip -6 rule del pref {100 + i}",
        f"ip -6 route replace {prefix}/64 table 200 via {gw}",
        f"ip -6 route replace {prefix}/64 nexthop via 2001:db8:2::1 dev out0 nexthop via 2001:db8:3::1 dev out1",
        f"sysctl -qw net.ipv4.fib_multipath_hash_seed={rng.choice((0, 7))}",
        f"sysctl -qw net.ipv6.conf.in0.forwarding={rng.choice((0, 1, 1))}",
        f"ip link set {dev} address {rng.choice(('02:00:00:00:0c:01', '02:00:00:00:0c:02'))}",
        f"ip link set {dev} down; ip link set {dev} up; "
        f"ip -6 neigh replace {gw} lladdr 02:00:00:00:0b:01 dev {dev} nud permanent",
    ])


def _churn6_frames() -> list[bytes]:
    return [udp6(f"2001:db8:10:{i}::9", src=src, size=size, label=label)
            for i in range(6) for src in ("2001:db8:1::1", "2001:db8:1::2")
            for size, label in ((0, 0), (900, 0x11), (1240, 0))]


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_cached_and_live_ipv6_answers_agree_under_seeded_churn(hook):
    """As the IPv4 churn test, for IPv6: routes, more specific and
    source-specific routes, multipath, rules, neighbours, addresses, MTUs,
    MACs, link flaps, forwarding and the seed."""
    differences, hits, live_hits, forwarded = churn_compare(hook, 1106, SETUP6, _churn6_step, _churn6_frames())
    assert not differences, differences[:10]
    assert hits > 0 and live_hits == 0 and forwarded > 0, (hits, live_hits, forwarded)
