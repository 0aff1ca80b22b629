"""A real routing daemon churns the DUT's FIB under a steady flow.

BIRD in the sink announces PREFIXES routes over eBGP to BIRD in the DUT,
which installs them in the DUT's kernel (linuxfp.lab.bgp).  While a steady
UDP flow crosses the DUT towards a prefix that never moves, thousands of
others are withdrawn and re-announced, step by step.  The same scenario runs
twice, on fresh labs: Linux alone, then Linux + `linuxfp run`.  With the
controller:

- every frame of the steady flow arrives, in order, byte-identical to what
  Linux forwards (the expected rewrite, which Linux alone is held to too);
- at least 95 % of it is fast-pathed (the controller's own `fast_path`
  counter, and the kernel's ForwDatagrams, each give a lower bound);
- after every step has settled (the DUT's FIB matches what BIRD announces,
  the controller says `current`), probes to flapped prefixes get exactly
  what Linux alone gave them: forwarded while announced, an ICMP error while
  withdrawn — compared frame by frame (IP ID of DUT-sourced errors
  normalised, as in the differential harness);
- the controller keeps up: it is `current` again within a bound after each
  step, and still running at the end.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import IPv4Address

import pytest

from controller.launcher import ControllerProcess, linuxfp_stats
from linuxfp.lab import Capture, Lab, RouterTopology, inject, ip_forw_datagrams
from linuxfp.lab.bgp import BgpFeed, addresses_in
from linuxfp.lab.differential import InterfaceFrames, StepObservation, compare
from linuxfp.lab.dissect import normalise_ip_id
from linuxfp.lab.frames import IPPROTO_ICMP, IPPROTO_UDP, udp_frame
from linuxfp.lab.standard import round_sources

pytestmark = pytest.mark.netns

PREFIXES = 20_000            # announced by BIRD
STABLE = 2_000               # never withdrawn; the steady flow goes to one of them
SLICE = 2_500                # a BIRD static protocol on the peer
FLAPS = (2_500, 5_000, 7_500, 2_500)   # prefixes withdrawn, then re-announced, per flap
PROBES = 24                  # probe destinations per step, spread over the flapped prefixes
STEADY_BATCH, STEADY_GAP = 10, 0.005   # some hundreds of frames/s
MIN_STEADY = 1_000           # the flow runs on after the flaps until it has sent this many
SETTLE_TIMEOUT = 20.0        # the controller must be `current` again within this after a step
MIN_FAST_SHARE = 0.95


@dataclass
class Run:
    """What one system did."""
    steady_sent: list[bytes] = field(default_factory=list)
    steady_received: list[bytes] = field(default_factory=list)
    steps: list[StepObservation] = field(default_factory=list)
    kernel_forwarded: int = 0      # the DUT's ForwDatagrams growth while the flow ran
    fast_path: int = 0             # the controller's fast_path growth on to-src (accelerated run)
    probes_forwarded: int = 0      # probe frames that reached the sink while the flow ran
    settle_times: list[float] = field(default_factory=list)
    egress_macs: tuple[str, str] = ("", "")   # DUT to-sink, sink to-dut
    timings: dict[str, float] = field(default_factory=dict)


def _ipv4(frame: bytes) -> tuple[int, str, str] | None:
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    return frame[23], str(IPv4Address(frame[26:30])), str(IPv4Address(frame[30:34]))


def forwarded_by_linux(frame: bytes, egress_macs: tuple[str, str]) -> bytes:
    """A UDP frame as the DUT sends it to the sink: egress MACs, TTL - 1, checksum updated."""
    fields = _ipv4(frame)
    assert fields and fields[0] == IPPROTO_UDP
    return udp_frame(*egress_macs, fields[1], fields[2], sport=int.from_bytes(frame[34:36], "big"),
                     dport=int.from_bytes(frame[36:38], "big"), size=len(frame),
                     ident=int.from_bytes(frame[18:20], "big"), ttl=frame[22] - 1)


class SteadyFlow:
    """UDP frames from src to one stable destination, in small batches, until stopped."""

    def __init__(self, router, destination: str) -> None:
        self.router, self.destination = router, destination
        self.sent: list[bytes] = []
        self.capture = Capture(router.sink, router.sink_if.name, "sink:steady")
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        src, dut = self.router.src_if, self.router.dut_left
        try:
            while not self._stop.is_set():
                batch = [udp_frame(src.mac, dut.mac, str(src.ip), self.destination, sport=5000, dport=9,
                                   size=64, ident=(len(self.sent) + i) & 0xFFFF or 1)
                         for i in range(STEADY_BATCH)]
                inject(self.router.src, src.name, batch)
                self.sent += batch
                self.capture.poll()
                time.sleep(STEADY_GAP)
        except BaseException as exc:   # reported by stop()
            self._error = exc

    def start(self) -> None:
        self._thread.start()

    def stop(self, at_least: int = 0, timeout: float = 10.0) -> list[bytes]:
        """Stop sending (once `at_least` frames went out, for up to `timeout` seconds);
        returns the flow's frames received at the sink."""
        deadline = time.monotonic() + timeout
        while len(self.sent) < at_least and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        self._thread.join()
        if self._error is not None:
            raise self._error
        deadline = time.monotonic() + 3
        while len(self._received()) < len(self.sent) and time.monotonic() < deadline:
            time.sleep(0.02)
            self.capture.poll()
        time.sleep(0.1)
        frames = [f.data for f in self.capture.stop()]
        src = str(self.router.src_if.ip)
        return [f for f in frames if _ipv4(f) == (IPPROTO_UDP, src, self.destination)]

    def _received(self) -> list[bytes]:
        src = str(self.router.src_if.ip)
        return [f.data for f in self.capture.frames if _ipv4(f.data) == (IPPROTO_UDP, src, self.destination)]

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.capture.close()


def probe(router, name: str, round_: int, targets: list[IPv4Address]) -> StepObservation:
    """UDP frames to `targets` (one fresh source each); records the probes that reach the
    sink and the ICMP errors that come back to src, as a differential StepObservation."""
    src, dut = router.src_if, router.dut_left
    sources = list(round_sources(router, round_))[:len(targets)]
    frames = tuple(udp_frame(src.mac, dut.mac, s, str(t), sport=6000 + i, dport=9, size=80, ident=i + 1)
                   for i, (s, t) in enumerate(zip(sources, targets)))
    probe_sources = set(sources)
    at_src = Capture(router.src, src.name, "src:to-dut")
    at_sink = Capture(router.sink, router.sink_if.name, "sink:to-dut")
    try:
        def arrived() -> tuple[list[bytes], list[bytes]]:
            errors = [f.data for f in at_src.frames if (_ipv4(f.data) or (0,))[0] == IPPROTO_ICMP]
            forwarded = [f.data for f in at_sink.frames
                         if (_ipv4(f.data) or (0, ""))[:2] in {(IPPROTO_UDP, s) for s in probe_sources}]
            return errors, forwarded

        inject(router.src, src.name, frames)
        deadline = time.monotonic() + 3
        while True:
            at_src.poll()
            at_sink.poll()
            errors, forwarded = arrived()
            if len(errors) + len(forwarded) >= len(frames) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        time.sleep(0.1)      # anything beyond one answer per probe would show up here
        at_src.stop()
        at_sink.stop()
        errors, forwarded = arrived()
    finally:
        at_src.close()
        at_sink.close()
    dut_addresses = router.dut_ipv4_addresses()
    normalised = [normalise_ip_id(f, dut_addresses) for f in errors]
    return StepObservation(
        step=name, injected=frames,
        received=(InterfaceFrames("src:to-dut", tuple(f for f, _ in normalised)),
                  InterfaceFrames("sink:to-dut", tuple(forwarded))),
        forwarded_by_kernel=0, normalised=sum(changed for _, changed in normalised))


def _fast_path(dut: str, ifname: str = "to-src") -> int:
    stats = linuxfp_stats(dut)
    return next((i["fast_path"] for i in stats["interfaces"] if i["ifname"] == ifname), 0)


def _state(controller: ControllerProcess) -> str | None:
    """The controller's last word on its datapath: `current` or `busy`."""
    return next((line for line in reversed(list(controller.lines)) if line in ("current", "busy")), None)


def run_scenario(accelerated: bool) -> Run:
    run = Run()
    started = time.monotonic()
    with Lab(prefix="lfp-t") as lab:
        router = RouterTopology(prefixes=1)(lab)
        run.egress_macs = (router.dut_right.mac, router.sink_if.mac)
        controller = ControllerProcess(router.dut.name, hook="xdp") if accelerated else None

        def settled(what: str) -> None:
            """Linux applies routes synchronously; the controller must say `current`."""
            if controller is None:
                return
            begun = time.monotonic()
            controller.settled(timeout=SETTLE_TIMEOUT)
            run.settle_times.append(time.monotonic() - begun)
            assert controller.proc.poll() is None, f"controller exited after {what}:\n{controller.stderr()}"
            assert _state(controller) == "current", (
                f"controller not current {SETTLE_TIMEOUT}s after {what}: {controller.lines[-5:]}\n"
                f"{controller.stderr()[-3000:]}")

        try:
            if controller is not None:
                controller.start()          # before BIRD: the whole table arrives as churn too
            with BgpFeed(lab, router, prefixes=PREFIXES, stable=STABLE, slice_size=SLICE) as bgp:
                run.timings["fib_full"] = bgp.wait_installed()
                settled("the initial table")
                destination = str(bgp.stable[7].network_address)
                flow = SteadyFlow(router, destination)
                try:
                    forwarded_before = ip_forw_datagrams(router.dut)
                    fast_before = _fast_path(router.dut.name) if accelerated else 0
                    flow.start()
                    flap_started = time.monotonic()
                    for number, count in enumerate(FLAPS):
                        gone = bgp.withdraw(count)
                        settled(f"withdrawing {len(gone)} prefixes")
                        targets = addresses_in(gone, PROBES)
                        run.steps.append(probe(router, f"flap{number}-withdrawn", 2 * number, targets))
                        bgp.reannounce(gone)
                        settled(f"re-announcing {len(gone)} prefixes")
                        run.steps.append(probe(router, f"flap{number}-announced", 2 * number + 1, targets))
                    run.timings["flaps"] = time.monotonic() - flap_started
                    run.steady_received = flow.stop(at_least=MIN_STEADY)
                    run.steady_sent = list(flow.sent)
                    run.kernel_forwarded = ip_forw_datagrams(router.dut) - forwarded_before
                    if accelerated:
                        run.fast_path = _fast_path(router.dut.name) - fast_before
                finally:
                    flow.close()
                run.probes_forwarded = sum(len(s.at("sink:to-dut")) for s in run.steps)
            if controller is not None:
                assert controller.proc.poll() is None, f"controller exited:\n{controller.stderr()}"
        finally:
            if controller is not None:
                controller.stop()
    run.timings["total"] = time.monotonic() - started
    return run


def _check_steady(run: Run, rewritten: Callable[[bytes], bytes], label: str) -> None:
    expected = [rewritten(f) for f in run.steady_sent]
    assert len(run.steady_sent) >= MIN_STEADY, f"{label}: the steady flow hardly ran ({len(run.steady_sent)} frames)"
    assert len(run.steady_received) == len(expected), (
        f"{label}: {len(expected) - len(run.steady_received)} of {len(expected)} steady frames lost")
    mismatched = [i for i, (got, want) in enumerate(zip(run.steady_received, expected)) if got != want]
    assert not mismatched, (f"{label}: {len(mismatched)} steady frames differ from Linux's rewrite, "
                            f"first at #{mismatched[0]}:\n{run.steady_received[mismatched[0]].hex()}\n"
                            f"{expected[mismatched[0]].hex()}")


def test_bgp_churn_under_a_steady_flow_matches_linux_and_stays_fast(require_root):
    linux = run_scenario(accelerated=False)
    fast = run_scenario(accelerated=True)

    assert linux.egress_macs == fast.egress_macs     # the router line is rebuilt identically

    def rewritten(frame: bytes) -> bytes:
        return forwarded_by_linux(frame, linux.egress_macs)

    summary = (f"Linux alone: {linux.timings}; with LinuxFP: {fast.timings}, "
               f"controller settle times {[round(t, 2) for t in fast.settle_times]}")

    # Linux alone is what we think it is: the probes see the flaps.
    for step in linux.steps:
        errors, forwarded = step.at("src:to-dut"), step.at("sink:to-dut")
        if step.step.endswith("withdrawn"):
            assert len(errors) == PROBES and not forwarded, (step.step, len(errors), len(forwarded))
        else:
            assert not errors and list(forwarded) == [rewritten(f) for f in step.injected], step.step
    _check_steady(linux, rewritten, "Linux alone")

    # With LinuxFP: the steady flow, every frame, as Linux forwards it ...
    _check_steady(fast, rewritten, "with LinuxFP")
    # ... the probes after each step exactly as under Linux alone ...
    differences = compare(linux.steps, fast.steps)
    assert not differences, "\n".join(d.describe() for d in differences[:10]) + "\n" + summary
    # ... and the steady flow fast-pathed: the frames the kernel forwarded
    # bound the slow path from above, the fast_path counter (minus every probe
    # that was forwarded, fast or not) bounds the fast path from below.
    sent = len(fast.steady_sent)
    by_kernel = (sent - fast.kernel_forwarded) / sent
    by_counter = (fast.fast_path - fast.probes_forwarded) / sent
    assert by_kernel >= MIN_FAST_SHARE and by_counter >= MIN_FAST_SHARE, (
        f"steady flow fast-pathed: >= {by_kernel:.1%} by ForwDatagrams ({fast.kernel_forwarded} forwarded by "
        f"the kernel of {sent}), >= {by_counter:.1%} by the fast_path counter ({fast.fast_path}); " + summary)
    print(summary, f"steady frames {sent}, fast-pathed >= {min(by_kernel, by_counter):.1%}")
