"""Faults, injected on the router line with traffic (issue 7, item 6): a map
that fills, a program load that fails at start and one the verifier refuses
mid-run, interfaces renamed / deleted / re-created (also with an ifindex
beyond the facts array), and the controller SIGKILLed again and again. In
each, nothing Linux would drop is forwarded and nothing Linux would deliver
is lost: the differential harness byte-compares every frame with Linux alone,
the streams compare with what Linux forwards; where a fault sends traffic to
the kernel, the reason counter says so."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import threading
import time
from dataclasses import replace
from ipaddress import IPv4Address

import pytest

from controller import lease
from controller.installer import FAULT_LOAD_ENV
from controller.launcher import ControllerProcess, layout_of, linuxfp_cli, linuxfp_stats
from controller_counting import Counting, reasons
from linuxfp import datapath as dp
from linuxfp.lab import Capture, RouterTopology, entered, inject, run_differential, standard_frames
from linuxfp.lab.differential import Step
from linuxfp.lab.frames import udp_frame
from linuxfp.lab.probe import ping
from linuxfp.lab.standard import ORDINARY
from linuxfp.lab.topology import LAB_INTERFACE_SYSCTLS, wait_links_settled

pytestmark = pytest.mark.netns


# -- helpers -----------------------------------------------------------------

class Ledger(Counting):
    """Counting, plus the stats as each step begins (before its change) and
    at the end: step k's frames are what happened between stats[k + 1]
    (settled after its change) and marks[k + 1], per interface, so counters
    of an interface a step deletes are not lost."""

    quiet = 0.15

    def __init__(self, controller, dut) -> None:
        super().__init__(controller, dut)
        self.marks: list[dict] = []

    def settled(self) -> None:
        self.controller.settled(quiet=self.quiet, timeout=30)
        self.stats.append(self.read())

    def read(self) -> dict:
        return linuxfp_stats(self.dut)

    def per_step(self) -> list[dict[str, int]]:
        """Per step: fast path and every pass reason its frames caused."""
        return [_difference(before, after) for before, after in zip(self.stats[1:], self.marks[1:])]


def _difference(before: dict, after: dict) -> dict[str, int]:
    total: dict[str, int] = {}
    was = {i["ifindex"]: i for i in before["interfaces"]}
    for entry in after["interfaces"]:
        old = was.get(entry["ifindex"], {"fast_path": 0, "nodes": {}})
        for key, value in {"fast_path": entry["fast_path"], **reasons({"interfaces": [entry]})}.items():
            start = old["fast_path"] if key == "fast_path" else reasons({"interfaces": [old]}).get(key, 0)
            total[key] = total.get(key, 0) + value - start
    return total


def watched(seen: list[Ledger], hook: str = "xdp", env: dict[str, str] | None = None, handle=Ledger):
    """An `accelerate` for run_differential: the controller (with `env`)
    and its ledger."""
    handle_type = handle

    @contextlib.contextmanager
    def accelerate(topology):
        with ControllerProcess(topology.dut.name, hook=hook, env=env) as controller:
            handle = handle_type(controller, topology.dut.name)
            seen.append(handle)
            try:
                yield handle
                handle.marks.append(handle.read())
                handle.final = _look(topology)
            finally:
                handle.stderr = controller.stderr()
    return accelerate


def marked(seen: list[Ledger], name: str, change) -> Step:
    """A step that first records the stats (with a controller only)."""
    def apply(r):
        if seen:
            seen[-1].marks.append(seen[-1].read())
        change(r)
    return Step(name, apply)


def looking(checks: list[dict]):
    """A step that records status and attached programs (with a controller only)."""
    def look(r):
        shown = _status(r)
        if shown["controller_pid"]:
            checks.append(_look(r, shown))
    return look


def _look(r, shown: dict | None = None) -> dict:
    shown = shown or _status(r)
    counted = json.loads(linuxfp_cli(r.dut.name, "-j", "stats").stdout)["interfaces"]
    return {"status": {i["ifname"]: i for i in shown["interfaces"]}, "programs": _programs(r),
            "kernel_path": {s["ifname"]: s for s in shown["kernel_path"]},
            "counted": {i["ifname"] for i in counted},
            "counters_outer": os.path.exists(layout_of(r.dut.name).shared_map_pin("lfp_counters"))}


def _status(router) -> dict:
    return json.loads(linuxfp_cli(router.dut.name, "-j", "status").stdout)


def _programs(router) -> dict[str, int]:
    """ifname -> XDP program attached to it (0: none), and tcx ones."""
    found = {}
    with entered(router.dut):
        for row in json.loads(router.dut.run(["ip", "-j", "link", "show"]).stdout):
            found[row["ifname"]] = dp.xdp_attached(row["ifindex"]).prog_id or \
                next(iter(dp.tcx_attached(row["ifindex"], "ingress")), 0)
    return found


class Stream:
    """One flow src -> DUT -> sink, sent from a thread in bursts of 5 every
    6 ms until stopped (~800 frames/s), each frame numbered (IP ID and
    source port) and its send time kept; the sink's capture drained as it
    goes (`recapture` once the sink's interface was made again)."""

    def __init__(self, r) -> None:
        self.r = r
        self.dst = str(r.prefixes[ORDINARY][9])
        self.sent: list[float] = []          # send time of frame i
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._captures = [Capture(r.sink, r.sink_if.name, "sink")]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def frame(self, i: int, forwarded: bool = False) -> bytes:
        """Frame i as sent, or as Linux forwards it (egress MACs, TTL - 1)."""
        r = self.r
        macs = (r.dut_right.mac, r.sink_if.mac) if forwarded else (r.src_if.mac, r.dut_left.mac)
        return udp_frame(*macs, str(r.src_if.ip), self.dst, sport=5000 + (i >> 16), size=64,
                         ident=i & 0xFFFF, ttl=63 if forwarded else 64)

    def __enter__(self) -> "Stream":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for capture in self._captures:
            capture.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                start = len(self.sent)
                burst = [self.frame(i) for i in range(start, start + 5)]
                now = time.monotonic()
                inject(self.r.src, self.r.src_if.name, burst)
                self.sent += [now] * len(burst)
                with self._lock:
                    _drain(self._captures[-1])
                time.sleep(0.006)
        except BaseException as e:       # noqa: BLE001 (reported by received())
            self.error = e

    def recapture(self) -> None:
        """The sink's interface is a new one: capture there from now on."""
        with self._lock:
            _drain(self._captures[-1])
            self._captures.append(Capture(self.r.sink, self.r.sink_if.name, "sink"))

    def received(self) -> list[int]:
        """Stop; the numbers of the frames the sink got, in arrival order,
        each checked to be exactly what Linux forwards for it."""
        self._stop.set()
        self._thread.join()
        assert self.error is None, f"the sender failed: {self.error!r}"
        time.sleep(0.2)
        numbers = []
        for capture in self._captures:
            _drain(capture)
            for captured in capture.frames:
                data = captured.data
                if data[12:14] != b"\x08\x00":
                    continue          # the DUT's ARP
                i = ((int.from_bytes(data[34:36], "big") - 5000) << 16) | int.from_bytes(data[18:20], "big")
                assert 0 <= i < len(self.sent) and data == self.frame(i, forwarded=True), \
                    f"frame unlike anything Linux forwards: {data.hex()}"
                numbers.append(i)
        return numbers


def _drain(capture: Capture) -> None:
    """capture.poll(), also once its interface is gone (the socket reports
    ENETDOWN once, then hands over what it had queued)."""
    for _ in range(2):
        try:
            capture.poll()
            return
        except OSError as e:
            if e.errno != errno.ENETDOWN:
                raise


# -- a. a map that fills ----------------------------------------------------

# lfp_local_src (bpf_modules/router.h) holds 65536 local addresses; local /32
# routes in the local table count as local sources too (Linux refuses them as
# a forwarded packet's source) and are quick to add: this many overflow it.
LOCAL_ROUTES = 66_000
_LOCAL_BLOCKS = ((IPv4Address("198.18.128.0"), 32768), (IPv4Address("198.19.64.0"), 49152))


def _local_route(i: int) -> str:
    for start, size in _LOCAL_BLOCKS:
        if i < size:
            return str(start + i)
        i -= size
    raise ValueError("beyond the blocks")


def _local_routes(r, verb: str, indices=range(LOCAL_ROUTES)) -> None:
    r.dut.run(["ip", "-batch", "-"], input="".join(
        f"route {verb} local {_local_route(i)}/32 dev lo table local\n" for i in indices))


def _full_router(lab):
    """The router line with the local routes in place before any controller
    starts, frames entering at the sink."""
    r = RouterTopology(prefixes=8)(lab)
    _local_routes(r, "add")
    return replace(r, spec=replace(r.spec, inject=("sink", "to-dut")))


# Deleted by the "fits" step: then every local source fits in the map (those
# that did not fit sort last and still have to be written).
DRAINED = range(1000)


def _local_source_frames(r, step: int) -> list[bytes]:
    """From the sink towards src's source pool: sources spread over the local
    routes (among them those the "fits" step deletes, and the last ones, which
    sort last and did not fit), which Linux refuses as martians unless
    deleted; and ordinary ones, which it forwards."""
    sink, dut = r.sink_if, r.dut_right
    samples = sorted({*range(0, LOCAL_ROUTES, LOCAL_ROUTES // 50), *DRAINED[:10], *DRAINED[-5:],
                      *range(LOCAL_ROUTES - 20, LOCAL_ROUTES)})
    frames = [udp_frame(sink.mac, dut.mac, _local_route(i), f"198.18.{64 + step}.{1 + n % 250}",
                        sport=2000 + n, ident=n + 1)
              for n, i in enumerate(samples)]
    frames += [udp_frame(sink.mac, dut.mac, str(sink.ip), f"198.18.{64 + step}.{1 + n}", sport=3000 + n,
                         ident=n + 1) for n in range(20)]
    return frames


class Patient(Ledger):
    """Waits for a long quiet time: thousands of route events come in
    batches whose decoding alone outlasts the default one."""

    quiet = 0.5


def test_a_full_local_address_map_never_forwards_what_linux_refuses(require_root):
    """More local sources than lfp_local_src holds (65536), there before the
    controller starts: the sources that did not fit are martians to Linux,
    so while the map cannot hold them the datapath hands everything to the
    kernel (the lease is withheld: lease_expired). 1000 deleted: the rest
    fits, is written, and the fast path resumes (frames from the deleted
    sources are forwarded, the others still refused). Added back mid-run:
    full again, everything to the kernel again."""
    seen: list[Ledger] = []
    steps = (
        marked(seen, "full-at-start", lambda r: None),
        marked(seen, "fits", lambda r: _local_routes(r, "del", DRAINED)),
        marked(seen, "full-mid-run", lambda r: _local_routes(r, "add", DRAINED)),
    )
    report = run_differential(_full_router, steps, watched(seen, handle=Patient), frames=_local_source_frames,
                              prefix="lfp-t")
    assert report.ok, report.render()
    sent = len(report.accelerated[0].injected)
    steps_seen = seen[0].per_step()
    full, fits, refilled = steps_seen
    for name, delta in (("full-at-start", full), ("full-mid-run", refilled)):
        assert delta["fast_path"] == 0 and delta["lease_expired"] >= sent, (name, steps_seen)
    # the ordinary frames and those from the deleted sources; the rest refused
    assert fits["fast_path"] >= 20 + 10 and fits["lease_expired"] == 0 and fits["local_source"] > 0, steps_seen
    assert seen[0].stderr.count("lfp_local_src is full") == 2, seen[0].stderr
    assert seen[0].stderr.count("the datapath may act again") == 1, seen[0].stderr


# -- b. a load that fails --------------------------------------------------

@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_a_load_failing_at_start_leaves_that_interface_alone_on_the_kernel_path(require_root, hook):
    """to-sink's program cannot be loaded (injected as a verifier rejection):
    to-sink stays on the kernel path, with the reason in status; to-src is
    fast-pathed as ever; every frame is Linux's. At TC the two share one
    loaded program of their shape: the faulted interface must not take the
    one loaded for the other."""
    seen: list[Ledger] = []
    checks: list[dict] = []
    steps = (
        marked(seen, "initial", looking(checks)),
        marked(seen, "route-blackhole", lambda r: r.dut.run(f"ip route replace blackhole {r.prefixes[1]}")),
    )
    report = run_differential(RouterTopology(prefixes=8), steps,
                              watched(seen, hook=hook, env={FAULT_LOAD_ENV: "to-sink"}),
                              frames=standard_frames, prefix="lfp-t")
    assert report.ok, report.render()
    shown = checks[0]["status"]
    assert shown["to-sink"]["state"] == "error" and "fault injected" in shown["to-sink"]["error"], shown
    assert shown["to-src"]["state"] == "active", shown
    assert checks[0]["programs"]["to-sink"] == 0 and checks[0]["programs"]["to-src"] != 0, checks[0]
    # no counters for a program that never ran; an XDP-only namespace has no lfp_counters
    assert checks[0]["counted"] == {"to-src"} and checks[0]["counters_outer"] == (hook == "tc"), checks[0]
    fast = [step["fast_path"] for step in seen[0].per_step()]
    assert all(fast), f"to-src unaffected, fast path per step: {fast}"


def test_a_verifier_rejection_mid_run_puts_that_interface_back_on_the_kernel_path(require_root):
    """An iptables rule makes both interfaces need the filter node; to-src's
    new program is refused (injected). Its old program, which knows nothing
    of the rule, must not stay: to-src goes to the kernel path, to-sink runs
    the new program, and the dropped flow is dropped. Once the ruleset is
    gone, to-src's program would change again: it is attached again."""
    seen: list[Ledger] = []
    checks: list[dict] = []
    look = looking(checks)
    steps = (
        marked(seen, "initial", look),
        marked(seen, "iptables-drop", lambda r: r.dut.run(f"iptables -A FORWARD -d {r.prefixes[ORDINARY]} -j DROP")),
        marked(seen, "ruleset-gone", lambda r: (look(r), r.dut.run("nft flush ruleset"))),
    )
    report = run_differential(RouterTopology(prefixes=8), steps,
                              watched(seen, env={FAULT_LOAD_ENV: "to-src:filter"}),
                              frames=standard_frames, prefix="lfp-t")
    assert report.ok, report.render()
    (before, rejected), again = checks, seen[0].final
    assert before["status"]["to-src"]["state"] == before["status"]["to-sink"]["state"] == "active", before
    assert before["programs"]["to-src"] and before["programs"]["to-sink"], before
    shown = rejected["status"]
    assert shown["to-src"]["state"] == "error" and "fault injected" in shown["to-src"]["error"], shown
    assert shown["to-sink"]["state"] == "active" and "filter" in shown["to-sink"]["shape"], shown
    assert not rejected["programs"]["to-src"] and rejected["programs"]["to-sink"], rejected
    assert again["status"]["to-src"]["state"] == "active" and again["programs"]["to-src"], again
    fast = [step["fast_path"] for step in seen[0].per_step()]
    assert fast[0] and not fast[1] and fast[2], f"fast path per step: {fast}"


# -- c. interfaces renamed, deleted and re-created ---------------------------

def _recreate(r, side: str, old_name: str, index: int | None = None) -> None:
    """Delete the DUT's `side` ("src" or "sink") veth (now called
    `old_name`) and make it again as the lab did: same names, MACs,
    addresses, routes and warm-up, a new ifindex (`index` if given)."""
    dut = r.dut
    if side == "sink":
        ifname, peer_ns, mine, theirs = "to-sink", r.sink, r.dut_right, r.sink_if
        dut_lines = [f"address add {RouterTopology.DUT_RIGHT_IP}/24 dev to-sink"]
        dut_lines += [f"route add {p} via {RouterTopology.SINK_IP}" for p in r.prefixes]
        dut_lines += [f"route add {RouterTopology.LAZY_PREFIX} via {RouterTopology.LAZY_GATEWAY}"]
        peer_lines = [f"address add {RouterTopology.SINK_IP}/24 dev to-dut",
                      f"address add {RouterTopology.LAZY_GATEWAY}/24 dev to-dut",
                      f"route add default via {RouterTopology.DUT_RIGHT_IP}"]
    else:
        ifname, peer_ns, mine, theirs = "to-src", r.src, r.dut_left, r.src_if
        dut_lines = [f"address add {RouterTopology.DUT_LEFT_IP}/24 dev to-src",
                     f"route add {RouterTopology.SOURCE_POOL} via {RouterTopology.SRC_IP}"]
        peer_lines = [f"address add {RouterTopology.SRC_IP}/24 dev to-dut",
                      f"route add default via {RouterTopology.DUT_LEFT_IP}"]
    dut.run(["ip", "link", "del", old_name])
    dut.run(["ip", "link", "add", "name", ifname, *(("index", str(index)) if index else ()),
             "address", mine.mac, "type", "veth", "peer", "name", "to-dut", "address", theirs.mac,
             "netns", peer_ns.name])
    for ns, name in ((dut, ifname), (peer_ns, "to-dut")):
        for key, value in LAB_INTERFACE_SYSCTLS:
            ns.sysctl(key.format(ifname=name), value)
        ns.run(["ip", "link", "set", "dev", name, "up"])
    peer_ns.run(["ethtool", "-K", "to-dut", "gro", "on"])     # a redirect target, as the lab makes it
    # the peer first: the DUT's routes make traffic ask for it at once
    peer_ns.run(["ip", "-batch", "-"], input="\n".join(peer_lines) + "\n")
    dut.run(["ip", "-batch", "-"], input="\n".join(dut_lines) + "\n")
    wait_links_settled([dut, peer_ns])
    for ns, destination in ((dut, RouterTopology.SRC_IP), (dut, RouterTopology.SINK_IP),
                            (r.src, RouterTopology.SINK_IP)):
        assert ping(ns, destination), f"warm-up: {ns.name} -> {destination}"


def test_interfaces_renamed_deleted_and_recreated_are_followed(require_root):
    """Renamed while up (egress, then ingress), deleted and made again with
    the same name and a new ifindex, then with ifindexes beyond the facts
    array (70000 as egress, 70001 as ingress): every frame is Linux's. An
    egress beyond the array is not a redirect target (egress_unsupported);
    an interface beyond it gets no program (status says why), so an ingress
    beyond it leaves its packets to the kernel."""
    seen: list[Ledger] = []
    checks: list[dict] = []
    steps = (
        marked(seen, "rename", lambda r: r.dut.run(["ip", "-batch", "-"],
                                                   input="link set dev to-sink name sink-b\n"
                                                         "link set dev to-src name src-b\n")),
        marked(seen, "recreate-egress", lambda r: (looking(checks)(r), _recreate(r, "sink", "sink-b"))),
        marked(seen, "recreate-ingress", lambda r: _recreate(r, "src", "src-b")),
        marked(seen, "recreate-egress-70000", lambda r: _recreate(r, "sink", "to-sink", index=70000)),
        marked(seen, "recreate-ingress-70001", lambda r: _recreate(r, "src", "to-src", index=70001)),
    )
    report = run_differential(RouterTopology(prefixes=8), steps, watched(seen), frames=standard_frames,
                              prefix="lfp-t")
    assert report.ok, report.render()
    (renamed,), recreated = checks, seen[0].final
    # status names the interfaces as they are called now
    assert sorted(renamed["status"]) == ["sink-b", "src-b"], renamed["status"]
    assert renamed["programs"]["sink-b"] and renamed["programs"]["src-b"], renamed
    beyond = {name: i for name, i in recreated["kernel_path"].items() if name.startswith("to-")}
    assert {name: i["ifindex"] for name, i in beyond.items()} == {"to-sink": 70000, "to-src": 70001}, recreated
    assert all("beyond the fast path's interface arrays" in i["reason"] for i in beyond.values()), recreated
    assert not recreated["status"] and not recreated["programs"]["to-src"] and not recreated["programs"]["to-sink"]
    per_step = dict(zip((s.name for s in steps), seen[0].per_step()))
    for name in ("rename", "recreate-egress", "recreate-ingress"):
        assert per_step[name]["fast_path"] > 0, (name, per_step)
    name = "recreate-egress-70000"
    assert per_step[name]["fast_path"] == 0 and per_step[name]["egress_unsupported"] > 0, (name, per_step)
    name = "recreate-ingress-70001"
    assert per_step[name].get("fast_path", 0) == 0, (name, per_step)


def test_interfaces_renamed_deleted_and_recreated_under_traffic(router_topology):
    """A flow crosses the DUT while its egress is renamed, deleted and made
    again, then made again with ifindex 70000, and its ingress renamed:
    every frame the sink gets is exactly what Linux forwards, once, in order;
    every frame sent while the path stood (all but those sent while the
    egress was missing, and 50 ms before) arrives."""
    r = router_topology
    flux: list[tuple[float, float]] = []      # while Linux itself has no path

    @contextlib.contextmanager
    def missing_path():
        start = time.monotonic()
        yield
        flux.append((start - 0.05, time.monotonic()))

    with ControllerProcess(r.dut.name, hook="xdp") as controller, Stream(r) as stream:
        pause = 0.4
        time.sleep(pause)
        r.dut.run("ip link set dev to-sink name sink-b")
        time.sleep(pause)
        r.dut.run("ip link set dev to-src name src-b")
        time.sleep(pause)
        with missing_path():
            _recreate(r, "sink", "sink-b")
            stream.recapture()
        time.sleep(pause)
        with missing_path():
            _recreate(r, "sink", "to-sink", index=70000)
            stream.recapture()
        time.sleep(pause)
        received = stream.received()
        stats = linuxfp_stats(r.dut.name)
        assert controller.proc.poll() is None, controller.stderr()
    assert received == sorted(set(received)), "duplicated or reordered"
    expected = [i for i, at in enumerate(stream.sent) if not any(a <= at <= b for a, b in flux)]
    lost = sorted(set(expected) - set(received))
    assert not lost, f"{len(lost)} of {len(expected)} frames lost: {lost[:20]} (flux {flux})"
    totals = reasons(stats)
    assert totals.get("egress_unsupported", 0) > 0, totals           # to ifindex 70000: the kernel's
    assert sum(i["fast_path"] for i in stats["interfaces"]) > 0, stats


# -- d. the controller SIGKILLed again and again ------------------------------

KILLS = 20
LAPSE_EVERY = 10     # then the restart comes after the lease lapsed: kernel path, then adoption


def test_twenty_sigkills_in_a_row_under_traffic_lose_nothing(router_topology):
    """systemd-style: `run --keep`, SIGKILL once it is ready, start again,
    20 times in a row, while a flow runs: the sink gets every frame, once,
    in order, exactly as Linux forwards it — fast path, orphan (its lease
    still held, or lapsed: every 10th restart comes after more than a term)
    and adoption alike. (tests/test_never_stale.py's kill-and-restart test
    is the short version.)"""
    r = router_topology
    adopted = 0
    try:
        with Stream(r) as stream:
            for kill in range(1, KILLS + 1):
                controller = ControllerProcess(r.dut.name, hook="xdp", keep=True)
                controller.start()
                adopted += "adopted" in controller.stderr()
                time.sleep(0.1)
                os.killpg(controller.proc.pid, signal.SIGKILL)
                controller.proc.wait(10)
                if kill % LAPSE_EVERY == 0:
                    time.sleep(lease.TERM_NS / 1e9 + 0.1)
            received = stream.received()
        stats = linuxfp_stats(r.dut.name)
    finally:
        linuxfp_cli(r.dut.name, "detach", check=False)
    lost = sorted(set(range(len(stream.sent))) - set(received))
    assert not lost, f"{len(lost)} of {len(stream.sent)} frames lost: {lost[:20]}"
    assert received == list(range(len(stream.sent))), "duplicated or reordered"
    fast = sum(i["fast_path"] for i in stats["interfaces"])
    lapsed = reasons(stats).get("lease_expired", 0)
    assert adopted == KILLS - 1 and fast > 0 and lapsed > 0, (adopted, fast, lapsed)
