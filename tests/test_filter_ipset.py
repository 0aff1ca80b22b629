"""ipsets in the filter node (`-m set --match-set`): random rulesets matching
real sets (hash:net, hash:ip, hash:ip with a netmask, address-and-port and
address-and-interface sets, a bitmap:ip, a list:set of address sets; src and
dst; negated)
byte-compared with Linux alone at XDP and TC; and a set changed under
traffic: a member added by `ipset add` or brought in by `ipset swap` is
dropped from the first frame sent after the command returned."""
from __future__ import annotations

import json

import pytest

from controller.launcher import ControllerProcess, linuxfp_cli, linuxfp_stats, wait_lease_current
from controller_counting import Counting, counting
from controller_counting import reasons as count_reasons
from linuxfp.lab import RouterTopology, run_differential
from linuxfp.lab.differential import Step
from linuxfp.lab.frames import udp_frame
from linuxfp.lab.packet_io import Capture, inject, settle
from linuxfp.lab.rulesets import (ROUTER_POOL, ROUTER_POOL6, Coverage, probe_frames, probe_frames6, random_ipsets,
                                  random_ruleset)

pytestmark = pytest.mark.netns

IFNAMES = ("to-src", "to-sink")
FRAMES = 200


def _load(backend: str, sets: str, rules: str, tool: str = "iptables"):
    command = f"{tool}-restore" if backend == "nft" else f"{tool}-legacy-restore"

    def apply(router):
        router.dut.run(["ipset", "restore"], input=sets)
        router.dut.run([command], input=rules)
    return apply


@pytest.mark.parametrize("hook,backend,seeds", [
    ("xdp", "nft", range(500, 505)),
    ("tc", "legacy", range(600, 603)),
], ids=["xdp-nft", "tc-legacy"])
def test_ipset_verdicts_are_linux_verdicts(require_root, hook, backend, seeds):
    # the kinds of set the rules match were mirrored in some step, lists and
    # bitmaps too (the random interface sets nest members the kernel reads
    # apart: test_filter_rules covers those)
    _ipset_differential(hook, backend, seeds, ipv6=False,
                        kinds=("hash:net", "hash:ip", "hash:ip,port", "bitmap:ip", "list:set"))


@pytest.mark.parametrize("hook,backend,seeds", [
    ("xdp", "nft", range(700, 704)),
    ("tc", "legacy", range(800, 803)),
], ids=["xdp-nft", "tc-legacy"])
def test_ipv6_ipset_verdicts_are_linux_verdicts(require_root, hook, backend, seeds):
    """The same for ip6tables' rules and IPv6 sets (family inet6): hash:net,
    hash:ip (with a netmask), hash:ip,port / hash:net,port (ICMPv6 members
    too), hash:net,iface, and a list of address sets."""
    _ipset_differential(hook, backend, seeds, ipv6=True, kinds=("hash:net", "hash:ip", "hash:ip,port", "list:set"))


def _ipset_differential(hook: str, backend: str, seeds, ipv6: bool, kinds: tuple[str, ...]) -> None:
    """Random sets and rules matching them, restored with the real tools;
    the same frames through Linux alone and Linux + LinuxFP."""
    coverage = Coverage()
    pool = ROUTER_POOL6 if ipv6 else ROUTER_POOL
    steps = [Step(f"{backend}-{seed}", _load(backend, random_ipsets(seed, pool, ipv6=ipv6),
                                              random_ruleset(seed, 30, IFNAMES, coverage, pool=pool, ipsets=True,
                                                             ipv6=ipv6), "ip6tables" if ipv6 else "iptables"))
             for seed in seeds]
    seen: list[Counting] = []
    graphs: list[str] = []

    def look(router) -> None:
        # which sets the filter compiled in (reading them is netfilter netlink
        # traffic: the watch passes until the controller has read them again)
        graphs.append(linuxfp_cli(router.dut.name, "graph").stdout)
        assert wait_lease_current(router.dut.name)

    probe = probe_frames6 if ipv6 else probe_frames
    report = run_differential(RouterTopology(prefixes=8, ipv6=ipv6), steps, counting(seen, hook, look),
                              lambda router, index: probe(router, index, FRAMES), prefix="lfp-s6" if ipv6 else "lfp-s")
    assert report.ok, report.render() + "\n" + coverage.summary()
    compiled = "\n".join(line for graph in graphs for line in graph.splitlines() if "ipsets compiled in" in line)
    for kind in kinds:
        assert f"({kind}, " in compiled, (kind, compiled)
    assert any(k.startswith("set ") for k in coverage.matches), coverage.summary()
    assert any(k.startswith("! set ") for k in coverage.matches), coverage.summary()
    kernel = sum(o.forwarded_by_kernel for o in report.kernel)
    accelerated = sum(o.forwarded_by_kernel for o in report.accelerated)
    assert accelerated < kernel, report.render()
    reasons = count_reasons(seen[0].stats[-1])
    assert reasons.get("filter_dropped", 0) > 0, reasons


BLOCKLIST = ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
             "-A FORWARD -m set --match-set lfp-block dst -j DROP\nCOMMIT\n")
ALLOWED = "198.19.3.9"


def _frames(r, dst: str, count: int = 8) -> list[bytes]:
    return [udp_frame(r.src_if.mac, r.dut_left.mac, str(r.src_if.ip), dst, sport=3000 + n, dport=9)
            for n in range(count)]


def test_set_changes_reach_the_fast_path_before_the_command_returns(router_topology):
    """Each address is blocked by an `ipset add` (or arrives with an `ipset
    swap`) and probed right after the command returned; meanwhile an allowed
    flow keeps being fast-pathed. Not one probe may get through."""
    r = router_topology
    r.dut.run(["ipset", "create", "lfp-block", "hash:net"])
    r.dut.run(["ipset", "create", "lfp-next", "hash:net"])
    r.dut.run(["ipset", "add", "lfp-block", "198.19.1.0/24"])
    r.dut.run(["iptables-restore"], input=BLOCKLIST)
    probed = []
    with ControllerProcess(r.dut.name, hook="xdp") as c, Capture(r.sink, "to-dut") as sink:
        c.settled()
        inject(r.src, r.src_if.name, _frames(r, ALLOWED))
        for n in range(12):
            address = f"198.19.2.{10 + n}"
            if n % 3 == 2:
                # swap in a copy of the set that also holds the address
                r.dut.run(["ipset", "flush", "lfp-next"])
                for line in r.dut.run(["ipset", "list", "lfp-block"]).stdout.split("Members:\n")[1].split():
                    r.dut.run(["ipset", "add", "lfp-next", line])
                r.dut.run(["ipset", "add", "lfp-next", address])
                r.dut.run(["ipset", "swap", "lfp-block", "lfp-next"])
            else:
                r.dut.run(["ipset", "add", "lfp-block", address])
            inject(r.src, r.src_if.name, _frames(r, address))
            inject(r.src, r.src_if.name, _frames(r, ALLOWED))
            probed.append(address)
        c.settled()
        assert wait_lease_current(r.dut.name)
        before = _nodes(r)
        # once the changes are applied, the fast path forwards and drops again
        inject(r.src, r.src_if.name, _frames(r, ALLOWED) + _frames(r, probed[0]))
        settle([sink], quiet=0.3)
        got = [f.data for f in sink.stop()]
        after = _nodes(r)
    blocked = {bytes(int(x) for x in a.split(".")) for a in probed}
    leaked = [f for f in got if f[30:34] in blocked]
    assert leaked == [], f"{len(leaked)} frames to blocked addresses were forwarded"
    allowed = bytes(int(x) for x in ALLOWED.split("."))
    assert len([f for f in got if f[30:34] == allowed]) == 8 * 14
    assert after["transmit"]["fast_path"] - before["transmit"]["fast_path"] == 8, (before, after)
    assert (after["filter"]["drops"].get("filter_dropped", 0)
            - before["filter"]["drops"].get("filter_dropped", 0)) == 8, (before, after)


def _filter_cfg(r) -> tuple[int, int]:
    """IPv4's (generation, epoch) as the datapath reads lfp_flt_cfg."""
    from controller.launcher import layout_of
    from linuxfp import datapath as dp
    from linuxfp.graph.nodes.iptables_filter import CFG, CFG_VALUE

    with dp.Map.from_pinned(layout_of(r.dut.name).shared_map_pin(CFG)) as cfg:
        return CFG_VALUE.unpack(dict(cfg.items())[bytes(4)])


def test_a_verdict_cached_before_a_member_is_patched_in_is_not_used_after(router_topology):
    """A flow the fast path accepted (its verdict cached per CPU) whose
    destination is then added to the blocking set: the member is patched
    into the classifier (same generation, new epoch, one LPM entry), and
    the cached verdict, of the epoch before, is not used — the flow's next
    frames are dropped in the fast path, as Linux drops them; removed again,
    they are forwarded again."""
    r = router_topology
    r.dut.run(["ipset", "create", "lfp-block", "hash:net"])
    r.dut.run(["ipset", "add", "lfp-block", "198.19.1.0/24"])
    r.dut.run(["iptables-restore"], input=BLOCKLIST)
    with ControllerProcess(r.dut.name, hook="xdp") as c, Capture(r.sink, "to-dut") as sink:
        c.settled()
        generation, epoch = _filter_cfg(r)
        inject(r.src, r.src_if.name, _frames(r, ALLOWED))
        settle([sink], quiet=0.3)
        assert len(sink.stop()) == 8
        states = []
        for command in ("add", "del"):
            r.dut.run(["ipset", command, "lfp-block", ALLOWED])
            c.settled()
            assert wait_lease_current(r.dut.name)
            states.append(_filter_cfg(r))
            before = _nodes(r)
            with Capture(r.sink, "to-dut") as after_change:
                inject(r.src, r.src_if.name, _frames(r, ALLOWED))
                settle([after_change], quiet=0.3)
                got = after_change.stop()
            after = _nodes(r)
            dropped = (after["filter"]["drops"].get("filter_dropped", 0)
                       - before["filter"]["drops"].get("filter_dropped", 0))
            forwarded = after["transmit"]["fast_path"] - before["transmit"]["fast_path"]
            assert (len(got), dropped, forwarded) == ((0, 8, 0) if command == "add" else (8, 0, 8)), \
                (command, before, after)
    # patched both times: the generation stayed, each change drew a fresh epoch
    assert states[0][0] == states[1][0] == generation, (generation, states)
    assert len({epoch, states[0][1], states[1][1]}) == 3, (epoch, states)


def _patched_steps():
    """Sets and rules, then members added and removed one step at a time:
    a blocking set (dst) and an allow list (`! --match-set`: udp/7 only to
    its members)."""
    rules = ("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
             "-A FORWARD -m set --match-set lfp-block dst -j DROP\n"
             "-A FORWARD -p udp --dport 7 -m set ! --match-set lfp-allow dst -j DROP\nCOMMIT\n")

    def setup(r):
        r.dut.run(["ipset", "create", "lfp-block", "hash:net"])
        r.dut.run(["ipset", "add", "lfp-block", str(r.prefixes[7])])
        r.dut.run(["ipset", "create", "lfp-allow", "hash:ip"])
        r.dut.run(["ipset", "add", "lfp-allow", _dst(r, 6)])
        r.dut.run(["iptables-restore"], input=rules)

    def ipset(*commands):
        def run(r):
            for command, name, index in commands:
                r.dut.run(["ipset", command, name, _dst(r, index)])
        return run

    return (Step("sets", setup),
            Step("block 2", ipset(("add", "lfp-block", 2))),
            Step("block 3, unblock 2", ipset(("add", "lfp-block", 3), ("del", "lfp-block", 2))),
            Step("allow 4", ipset(("add", "lfp-allow", 4))),
            Step("unblock 3, disallow 4, allow 5", ipset(("del", "lfp-block", 3), ("del", "lfp-allow", 4),
                                                         ("add", "lfp-allow", 5))))


def _dst(r, index: int) -> str:
    return str(r.prefixes[index].network_address + 9)


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_members_patched_in_step_by_step_forward_as_linux(require_root, hook):
    """The same flows after every step (their verdicts cached by the fast
    path the step before): each member change is patched into the
    classifier — the generation stays, the epoch moves — and every frame is
    Linux's, byte for byte; the fast path forwards and drops throughout."""
    seen: list[Counting] = []
    cfgs: list = []

    def look(router) -> None:
        from linuxfp.datapath import BpfError

        try:
            cfgs.append(_filter_cfg(router))
        except (BpfError, OSError, KeyError):
            cfgs.append(None)       # no filter yet

    def frames(router, index):
        return [udp_frame(router.src_if.mac, router.dut_left.mac, str(router.src_if.ip), _dst(router, i),
                          sport=3000 + n, dport=port)
                for i in (2, 3, 4, 5, 6, 7) for port in (7, 9) for n in range(3)]

    report = run_differential(RouterTopology(prefixes=8), _patched_steps(), counting(seen, hook, look), frames,
                              prefix="lfp-sp")
    assert report.ok, report.render()
    # steps 1-4 each patched the generation step 0 built
    generations = {cfg[0] for cfg in cfgs[-4:]}
    assert len(generations) == 1 and cfgs[-5][0] in generations, cfgs
    assert len({cfg[1] for cfg in cfgs[-5:]}) == 5, cfgs
    fast = count_reasons(seen[0].stats[-1], ("fast",))
    dropped = count_reasons(seen[0].stats[-1]).get("filter_dropped", 0)
    assert sum(fast.values()) > 0 and dropped > 0, (fast, dropped)
    # every step's frames, not only the first's (each read is taken once the
    # next step is applied: the growth from the read after the sets on)
    sent = [sum(count_reasons(stats, ("fast",)).values()) for stats in seen[0].stats]
    assert all(later > earlier for earlier, later in zip(sent[1:], sent[2:])), sent


def _nodes(r) -> dict:
    stats = linuxfp_stats(r.dut.name)
    return {i["ifname"]: i for i in stats["interfaces"]}["to-src"]["nodes"]


def _watched(r) -> int:
    return json.loads(linuxfp_cli(r.dut.name, "-j", "status").stdout)["lease"]["watched_changes"]


def test_the_set_watch_counts_only_while_rules_match_sets(router_topology):
    """Netfilter netlink traffic costs nothing while no rule matches a set;
    a rule that starts matching one arms the watch, and the set's changes
    reach the fast path from then on."""
    r = router_topology
    r.dut.run(["iptables", "-A", "FORWARD", "-d", "198.19.4.0/24", "-j", "DROP"])
    with ControllerProcess(r.dut.name, hook="xdp") as c, Capture(r.sink, "to-dut") as sink:
        c.settled()
        unarmed = _watched(r)
        r.dut.run(["ipset", "create", "lfp-late", "hash:ip"])
        r.dut.run(["ipset", "add", "lfp-late", "198.19.2.77"])
        r.dut.run(["nft", "list", "ruleset"])
        assert _watched(r) == unarmed
        r.dut.run(["iptables", "-A", "FORWARD", "-m", "set", "--match-set", "lfp-late", "dst", "-j", "DROP"])
        c.settled()
        r.dut.run(["ipset", "add", "lfp-late", "198.19.2.78"])
        assert _watched(r) > unarmed
        inject(r.src, r.src_if.name, _frames(r, "198.19.2.77") + _frames(r, "198.19.2.78"))
        c.settled()
        assert "ipsets compiled in: lfp-late (hash:ip, 2 members)" in linuxfp_cli(r.dut.name, "graph").stdout
        # `linuxfp graph` read the sets over netfilter netlink: the watch counted it
        assert wait_lease_current(r.dut.name)
        watched = _watched(r)
        before = _nodes(r)
        # `linuxfp stats` reads what the controller published, no ipset: the watch counts nothing
        assert _watched(r) == watched
        inject(r.src, r.src_if.name, _frames(r, "198.19.2.78") + _frames(r, ALLOWED))
        settle([sink], quiet=0.3)
        got = [f.data for f in sink.stop()]
        after = _nodes(r)
    assert [f[30:34] for f in got] == [bytes((198, 19, 3, 9))] * 8
    def flat(nodes):
        return {f"{node}.{kind}.{reason}": value for node, detail in nodes.items()
                for kind in ("passed", "drops", "fast") for reason, value in detail.get(kind, {}).items()}
    # (on failure: what else the frames met, e.g. a watched change not yet re-read)
    delta = {k: v - flat(before).get(k, 0) for k, v in flat(after).items() if v != flat(before).get(k, 0)}
    assert (after["filter"]["drops"].get("filter_dropped", 0)
            - before["filter"]["drops"].get("filter_dropped", 0)) == 8, delta
