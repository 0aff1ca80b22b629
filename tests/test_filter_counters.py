"""iptables' rule counters under LinuxFP: a packet the fast path decides
never reaches the kernel's counters, so `linuxfp stats` gives each rule and
chain policy what Linux would have added to it. The kernel's counters plus
the fast path's equal Linux alone's, rule by rule, packets and bytes — the
rules a packet passes on its way (a jump, a rule without a target, a
RETURN) as well as the one that decides — and the fast path took part."""
from __future__ import annotations

import re
import subprocess
import time

import pytest

from prometheus_client.parser import text_string_to_metric_families

from controller.launcher import ControllerProcess, linuxfp_cli, linuxfp_stats
from controller.views import stats_text
from linuxfp.lab.frames import udp_frame
from linuxfp.lab.packet_io import inject

pytestmark = pytest.mark.netns

RULESET = ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:COUNT - [0:0]\n"
           "-A FORWARD -p udp -j COUNT\n"
           "-A FORWARD -d 198.19.1.0/24 -j DROP\n"
           "-A FORWARD -p udp -m udp --dport 7 -j ACCEPT\n"
           "-A COUNT -s 198.18.0.0/15\n"
           "-A COUNT -d 198.19.3.0/24 -j RETURN\n"
           "COMMIT\n"
           # raw's PREROUTING, one more hook before FORWARD: a rule without a
           # target every datagram passes, and one that drops before FORWARD
           "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
           "-A PREROUTING -p udp\n"
           "-A PREROUTING -d 198.19.2.0/24 -j DROP\n"
           "COMMIT\n")
BLOCKED, ALLOWED, RAW_BLOCKED = "198.19.1.9", "198.19.3.9", "198.19.2.9"
SAVE = {"iptables-restore": "iptables-save", "iptables-legacy-restore": "iptables-legacy-save"}
BACKEND = {"iptables-restore": "nft", "iptables-legacy-restore": "legacy"}


def _frames(r, rounds: int) -> list[bytes]:
    src, dut_mac = r.src_if, r.dut_left.mac
    frames = []
    for n in range(rounds):
        for dst, dport, size in ((BLOCKED, 9, 18), (ALLOWED, 7, 40), (ALLOWED, 9, 100), (RAW_BLOCKED, 9, 60)):
            # every flow decided by another rule: DROP, ACCEPT, the policy, raw's DROP
            frames.append(udp_frame(src.mac, dut_mac, str(src.ip), dst, sport=3000 + n, dport=dport,
                                    payload=bytes(size)))
    return frames


def _kernel_counters(r, save: str, table: str = "filter") -> dict[tuple[str, str], tuple[int, int]]:
    """(chain, "#position" or "policy") -> (packets, bytes) of `table`, from `iptables-save -c`."""
    out = r.dut.run([save, "-c", "-t", table]).stdout
    counters, positions = {}, {}
    for line in out.splitlines():
        if m := re.match(r"^:(\S+) (ACCEPT|DROP) \[(\d+):(\d+)\]", line):
            counters[(m[1], "policy")] = (int(m[3]), int(m[4]))
        elif m := re.match(r"^\[(\d+):(\d+)\] -A (\S+) ", line):
            positions[m[3]] = positions.get(m[3], 0) + 1
            counters[(m[3], f"#{positions[m[3]]}")] = (int(m[1]), int(m[2]))
    return counters


def _both_tables(r, save: str) -> dict[tuple[str, str], tuple[int, int]]:
    """_kernel_counters of the filter table and of raw's (chains "raw PREROUTING", ...)."""
    raw = {(f"raw {chain}", rule): value for (chain, rule), value in _kernel_counters(r, save, "raw").items()}
    return {**_kernel_counters(r, save), **raw}


def _linux_alone(r, restore: str, frames, bursts: int = 1) -> list[dict]:
    """The kernel's counters (both tables) after each of `bursts` bursts
    with Linux alone; then the rules restored again, their counters from zero."""
    r.dut.run([restore], input=RULESET)
    counted = []
    for _ in range(bursts):
        _send(r, frames)
        counted.append(_both_tables(r, SAVE[restore]))
    r.dut.run([restore], input=RULESET)
    return counted


def _send(r, frames) -> None:
    for _ in range(3):       # a few bursts: the fast path's share grows once neighbours are confirmed
        inject(r.src, r.src_if.name, frames)
        time.sleep(0.2)


@pytest.mark.parametrize("restore", ["iptables-restore", "iptables-legacy-restore"])
def test_kernel_and_fast_path_counters_add_up_to_linux_alones(router_topology, restore):
    """iptables-nft: the kernel's counters plus the fast path's are Linux
    alone's. iptables-legacy: the controller adds the fast path's to the
    kernel's (every few seconds and as it stops), so they are Linux alone's
    by themselves — raw's PREROUTING's as well as FORWARD's."""
    r = router_topology
    frames = _frames(r, 20)
    r.dut.run([restore], input=RULESET)
    _send(r, frames)
    linux, linux_raw = _kernel_counters(r, SAVE[restore]), _kernel_counters(r, SAVE[restore], "raw")
    assert linux[("FORWARD", "#2")][0] == 60 and linux[("FORWARD", "policy")][0] == 60, linux
    assert linux_raw[("PREROUTING", "#1")][0] == 240 and linux_raw[("PREROUTING", "#2")][0] == 60, linux_raw

    r.dut.run([restore], input=RULESET)       # counters from zero again
    with ControllerProcess(r.dut.name, hook="xdp") as controller:
        controller.settled()
        _send(r, frames)
        stats = linuxfp_stats(r.dut.name)
        prometheus = linuxfp_cli(r.dut.name, "stats", "--prometheus").stdout
    kernel, kernel_raw = _kernel_counters(r, SAVE[restore]), _kernel_counters(r, SAVE[restore], "raw")
    rows = stats["nodes"]["filter"]["rules"]

    def fast_of(backend: str) -> dict[tuple[str, str], tuple[int, int]]:
        return {(row["chain"], f"#{row['position']}" if "position" in row else "policy"): (row["packets"], row["bytes"])
                for row in rows if row["backend"] == backend}

    fast, fast_raw = fast_of(BACKEND[restore]), fast_of(f"{BACKEND[restore]} raw")
    assert fast.get(("FORWARD", "#2"), (0, 0))[0] > 0, (fast, stats["interfaces"])   # the fast path took part
    assert fast_raw.get(("PREROUTING", "#2"), (0, 0))[0] > 0, fast_raw                # ... in raw's too
    for linux_table, kernel_table, fast_table in ((linux, kernel, fast), (linux_raw, kernel_raw, fast_raw)):
        if BACKEND[restore] == "legacy":
            assert kernel_table == linux_table, {"linux": linux_table, "kernel": kernel_table, "fast path": fast_table}
        else:
            together = {key: tuple(a + b for a, b in zip(value, fast_table.get(key, (0, 0))))
                        for key, value in kernel_table.items()}
            assert together == linux_table, {"linux": linux_table, "kernel": kernel_table, "fast path": fast_table}
        assert set(fast_table) <= set(linux_table)
    assert stats["nodes"]["filter"]["earlier_rulesets"]["packets"] == 0
    text = stats_text(stats)
    drop = fast[("FORWARD", "#2")]
    assert re.search(rf"iptables-{BACKEND[restore]} FORWARD #2 +{drop[0]} +{drop[1]}  -A FORWARD -d 198.19.1.0/24 -j DROP",
                     text), text
    assert f"iptables-{BACKEND[restore]} FORWARD policy ACCEPT" in text, text
    # the same counts as Prometheus series, one per rule, with its text
    series = {(sample.labels["table"], sample.labels["chain"], sample.labels["rule"]):
              (sample.labels["spec"], sample.value)
              for family in text_string_to_metric_families(prometheus) for sample in family.samples
              if sample.name == "linuxfp_iptables_fast_path_packets_total"
              and sample.labels["backend"] == BACKEND[restore]}
    assert series[("filter", "FORWARD", "2")] == ("-A FORWARD -d 198.19.1.0/24 -j DROP", drop[0]), series
    assert series[("filter", "FORWARD", "policy")] == ("-P FORWARD ACCEPT", fast[("FORWARD", "policy")][0]), series
    assert series[("raw", "PREROUTING", "2")] == ("-A PREROUTING -d 198.19.2.0/24 -j DROP",
                                                  fast_raw[("PREROUTING", "#2")][0]), series
    for table, counted in (("filter", fast), ("raw", fast_raw)):
        assert {(chain, f"#{rule}" if rule != "policy" else rule) for t, chain, rule in series if t == table} \
            == set(counted), table
    lint = subprocess.run(["promtool", "check", "metrics"], input=prometheus, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_legacy_counters_get_each_fast_path_count_once_across_a_kept_restart(router_topology):
    """A controller stopped with --keep gives iptables-legacy what the fast
    path counted and remembers it with the kept datapath; the next one, which
    adopts that datapath and its counts, gives only what came after."""
    r = router_topology
    restore = "iptables-legacy-restore"
    frames = _frames(r, 20)
    linux_once, linux_twice = _linux_alone(r, restore, frames, bursts=2)
    with ControllerProcess(r.dut.name, hook="xdp", keep=True) as controller:
        controller.settled()
        _send(r, frames)
        fast = linuxfp_stats(r.dut.name)["nodes"]["filter"]["rules"]
    assert any(row["packets"] for row in fast), fast
    assert _both_tables(r, SAVE[restore]) == linux_once
    with ControllerProcess(r.dut.name, hook="xdp") as controller:
        controller.settled()
        _send(r, frames)
    assert _both_tables(r, SAVE[restore]) == linux_twice


def _lease(netns: str):
    """The DUT's lease as its datapath sees it (changes_started / _done: the
    kernel-side watch's counts of legacy table replaces and counter adds)."""
    from controller import lease
    from controller.launcher import layout_of
    from linuxfp import datapath as dp

    with dp.Map.from_pinned(layout_of(netns).shared_map_pin(lease.LEASE_MAP)) as lease_map:
        return lease.read(lease_map)


def test_legacy_give_back_is_periodic_unseen_by_the_watch_and_once_per_count(router_topology):
    """While the controller runs, every few seconds: iptables-legacy's
    counters reach Linux alone's without a stop. The controller's own
    counters call is not counted by the watch of legacy tables (which takes
    iptables-legacy's as the end of its replace: counted, the controller's
    would make a replace in flight look done). And rules that change and
    come back (the same generation) get nothing given twice: after the
    restore zeroed them, they stay at zero."""
    from controller.daemon import UPKEEP_INTERVAL_S

    r = router_topology
    restore = "iptables-legacy-restore"
    frames = _frames(r, 20)
    (linux,) = _linux_alone(r, restore, frames)
    zero = {key: (0, 0) for key in linux}
    with ControllerProcess(r.dut.name, hook="xdp") as controller:
        controller.settled()
        _send(r, frames)
        before = _lease(r.dut.name)
        time.sleep(UPKEEP_INTERVAL_S + 1)
        assert _both_tables(r, SAVE[restore]) == linux
        after = _lease(r.dut.name)
        assert (after.changes_started, after.changes_done) == (before.changes_started, before.changes_done)
        # another ruleset, then this one again: its counts were given
        r.dut.run([restore], input=RULESET.replace("--dport 7", "--dport 8"))
        controller.settled()
        time.sleep(UPKEEP_INTERVAL_S + 1)       # a give-back under the other rules
        r.dut.run([restore], input=RULESET)
        controller.settled()
        time.sleep(UPKEEP_INTERVAL_S + 1)
        assert _both_tables(r, SAVE[restore]) == zero


RULESET6 = ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:COUNT - [0:0]\n"
            "-A FORWARD -p udp -j COUNT\n"
            "-A FORWARD -d 2001:db8:100:1::/64 -j DROP\n"
            "-A FORWARD -p udp -m udp --dport 7 -j ACCEPT\n"
            "-A COUNT -s 2001:db8::/32\n"
            "-A COUNT -d 2001:db8:100:3::/64 -j RETURN\n"
            "COMMIT\n")


def _forwarded(counters: dict) -> dict:
    """The counters of the chains forwarded packets cross: an IPv6 host
    sends packets of its own (MLD reports, neighbour solicitations) when its
    timers say, which OUTPUT counts in one run and not in the other."""
    return {key: value for key, value in counters.items() if key[0] not in ("INPUT", "OUTPUT")}


@pytest.mark.parametrize("backend", ["nft", "legacy"])
def test_ip6tables_counters_add_up_to_linux_alones(lab, backend):
    """The same for ip6tables' rules and routed IPv6: ip6tables-nft's
    counters plus `linuxfp stats`' are Linux alone's; ip6tables-legacy's
    get the fast path's added, so they are Linux alone's by themselves."""
    from linuxfp.lab import RouterTopology
    from linuxfp.lab.frames import ipv6_udp_frame

    r = RouterTopology(prefixes=8, ipv6=True)(lab)
    restore, save = (f"ip6tables{'-legacy' if backend == 'legacy' else ''}-{verb}" for verb in ("restore", "save"))
    src = str(RouterTopology.SRC_IP6)
    frames = [ipv6_udp_frame(r.src_if.mac, r.dut_left.mac, src, dst, sport=3000 + n, dport=dport, size=size)
              for n in range(20)
              for dst, dport, size in (("2001:db8:100:1::9", 9, 80), ("2001:db8:100:3::9", 7, 100),
                                       ("2001:db8:100:3::9", 9, 160))]
    r.dut.run([restore], input=RULESET6)
    _send(r, frames)
    linux = _forwarded(_kernel_counters(r, save))
    assert linux[("FORWARD", "#2")][0] == 60 and linux[("FORWARD", "policy")][0] == 60, linux

    r.dut.run([restore], input=RULESET6)       # counters from zero again
    with ControllerProcess(r.dut.name, hook="xdp") as controller:
        controller.settled()
        _send(r, frames)
        stats = linuxfp_stats(r.dut.name)
    kernel = _forwarded(_kernel_counters(r, save))
    fast = {(row["chain"], f"#{row['position']}" if "position" in row else "policy"): (row["packets"], row["bytes"])
            for row in stats["nodes"]["filter"]["rules"] if row["family"] == "ip6" and row["backend"] == backend}
    assert fast.get(("FORWARD", "#2"), (0, 0))[0] > 0, (fast, stats["interfaces"])   # the fast path took part
    if backend == "legacy":
        assert kernel == linux, {"linux": linux, "kernel": kernel, "fast path": fast}
    else:
        together = {key: tuple(a + b for a, b in zip(value, fast.get(key, (0, 0)))) for key, value in kernel.items()}
        assert together == linux, {"linux": linux, "kernel": kernel, "fast path": fast}
    text = stats_text(stats)
    drop = fast[("FORWARD", "#2")]
    assert re.search(rf"ip6tables-{backend} FORWARD #2 +{drop[0]} +{drop[1]}  -A FORWARD -d 2001:db8:100:1::/64 "
                     "-j DROP", text), text
