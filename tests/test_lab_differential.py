"""The differential harness is deterministic (Linux vs Linux shows nothing)
and sensitive (an accelerator that drops or rewrites is caught)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from ipaddress import IPv4Address

import pytest

from linuxfp.lab import frames as F
from linuxfp.lab.differential import (
    InterfaceFrames,
    Step,
    StepObservation,
    compare,
    no_accelerator,
    run_differential,
)
from linuxfp.lab.dissect import flow_key, normalise_ip_id
from linuxfp.lab.standard import standard_frames, standard_steps
from linuxfp.lab.topology import Router, RouterTopology, Topology

FACTORY = RouterTopology(prefixes=8)


def _udp(src: str, dst: str, ident: int, ttl: int = 64) -> bytes:
    return F.udp_frame("02:00:00:00:02:01", "02:00:00:00:02:02", src, dst, sport=1000, ident=ident, ttl=ttl)


def _observation(*frames: bytes, interface: str = "sink:to-dut") -> StepObservation:
    return StepObservation("s", (), (InterfaceFrames(interface, frames),), 0, 0)


# --- pure comparison -----------------------------------------------------------


def test_reordering_across_flows_is_not_a_difference() -> None:
    a1, a2 = _udp("198.18.64.1", "198.19.0.1", 1), _udp("198.18.64.1", "198.19.0.1", 2)
    b1 = _udp("198.18.64.2", "198.19.0.1", 3)
    assert compare([_observation(a1, a2, b1)], [_observation(b1, a1, a2)]) == ()


def test_reordering_within_a_flow_missing_extra_and_changed_frames_are() -> None:
    a1, a2 = _udp("198.18.64.1", "198.19.0.1", 1), _udp("198.18.64.1", "198.19.0.1", 2)
    (difference,) = compare([_observation(a1)], [_observation(_udp("198.18.64.1", "198.19.0.1", 1, ttl=9))])
    assert difference.kind == "changed"
    assert "[" in difference.describe()  # differing bytes are highlighted in the hex dump
    kinds = {d.kind for d in compare([_observation(a1, a2)], [_observation(a2, a1)])}
    assert kinds and kinds <= {"missing", "extra", "changed"}
    assert [d.kind for d in compare([_observation(a1)], [_observation()])] == ["missing"]
    assert [d.kind for d in compare([_observation()], [_observation(a1)])] == ["extra"]


def test_icmp_errors_belong_to_the_flow_they_quote() -> None:
    offending = _udp("198.18.64.9", "198.19.0.1", 5)
    error = F.ethernet(
        "02:00:00:00:01:01", "02:00:00:00:01:02", F.ETH_P_IP,
        F.ipv4("198.18.1.254", "198.18.64.9", F.IPPROTO_ICMP, bytes([11, 0, 0, 0, 0, 0, 0, 0]) + offending[14:42]),
    )
    key = flow_key(error)
    assert key[4] == "error" and key[-1] == flow_key(offending)


def test_normalisation_touches_only_dut_sourced_ip_id_and_checksum() -> None:
    dut = {IPv4Address("198.18.1.254")}
    from_dut = F.udp_frame("02:00:00:00:01:02", "02:00:00:00:01:01", "198.18.1.254", "198.18.64.1", ident=0x1234)
    normalised, changed = normalise_ip_id(from_dut, dut)
    assert changed
    assert [i for i in range(len(from_dut)) if normalised[i] != from_dut[i]] == [18, 19, 24, 25]
    forwarded = _udp("198.18.64.1", "198.19.0.1", 0x1234)
    assert normalise_ip_id(forwarded, dut) == (forwarded, False)
    # A wrong checksum on a DUT packet stays visible.
    broken, _ = normalise_ip_id(F.with_bad_ip_checksum(from_dut), dut)
    assert broken[24:26] != b"\0\0"


# --- with namespaces ------------------------------------------------------------


def test_linux_against_linux_shows_no_difference_over_all_standard_steps(require_root: None) -> None:
    report = run_differential(FACTORY, standard_steps(), no_accelerator, prefix="lfp-t")
    assert report.ok, report.render()
    first = report.kernel[0]
    # The harness is not comparing silence with silence.
    assert first.forwarded_by_kernel > 10
    assert len(first.at("sink:to-dut")) > 10 and len(first.at("src:to-dut")) > 3
    assert sum(o.normalised for o in report.kernel) > 0
    assert "no difference" not in report.render() and "0 differences" in report.render()


def test_standard_frames_change_sources_per_round(lab) -> None:
    router = FACTORY(lab)
    assert standard_frames(router, 0) != standard_frames(router, 1)
    assert standard_frames(router, 3) == standard_frames(router, 3)


@contextlib.contextmanager
def _drops_forwarded_traffic(topology: Topology) -> Iterator[None]:
    topology.dut.run("iptables -A FORWARD -j DROP")
    yield


@contextlib.contextmanager
def _rewrites_ttl(topology: Topology) -> Iterator[None]:
    topology.dut.run("iptables -t mangle -A FORWARD -j TTL --ttl-set 9")
    yield


QUICK_STEPS: tuple[Step[Router], ...] = (Step("initial", lambda r: None), Step("mtu-lower", lambda r: r.dut.run("ip link set dev to-sink mtu 1280")))


def test_an_accelerator_that_drops_is_detected(require_root: None) -> None:
    report = run_differential(FACTORY, QUICK_STEPS, _drops_forwarded_traffic, step_wait=0.01, prefix="lfp-t")
    assert not report.ok
    missing = [d for d in report.differences if d.kind == "missing"]
    assert {d.interface for d in missing} == {"sink:to-dut"}
    assert report.accelerated[0].at("sink:to-dut") == ()
    assert {d.step for d in report.differences} == {"initial", "mtu-lower"}


def test_an_accelerator_that_rewrites_is_detected_byte_for_byte(require_root: None) -> None:
    report = run_differential(FACTORY, QUICK_STEPS[:1], _rewrites_ttl, step_wait=0.01, prefix="lfp-t")
    changed = [d for d in report.differences if d.kind == "changed"]
    assert changed, report.render()
    offsets = {
        i
        for d in changed
        if d.kernel is not None and d.accelerated is not None
        for i in range(len(d.kernel))
        if d.kernel[i] != d.accelerated[i]
    }
    assert offsets <= {22, 24, 25}  # TTL and the header checksum that covers it
    text = report.render()
    assert "changed" in text and "kernel:" in text and "accelerated:" in text


def test_settled_hook_is_called_after_attach_and_every_step(require_root: None) -> None:
    calls: list[str] = []

    class Handle:
        def settled(self) -> None:
            calls.append("settled")

    @contextlib.contextmanager
    def accelerate(topology: Topology) -> Iterator[Handle]:
        yield Handle()

    steps: list[Step[Topology]] = [Step("one", lambda r: None), Step("two", lambda r: None)]
    report = run_differential(FACTORY, steps, accelerate, frames=[], prefix="lfp-t")
    assert report.ok and calls == ["settled"] * 3


def test_step_names_must_be_unique() -> None:
    with pytest.raises(ValueError):
        run_differential(FACTORY, [Step("x", print), Step("x", print)], no_accelerator)


def test_plain_callables_are_steps(require_root: None) -> None:
    def lower_mtu(router: Router) -> None:
        router.dut.run("ip link set dev to-sink mtu 1280")

    report = run_differential(FACTORY, [lower_mtu], no_accelerator, prefix="lfp-t")
    assert report.ok and report.kernel[0].step == "lower_mtu"
