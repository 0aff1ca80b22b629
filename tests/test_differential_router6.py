"""Differential proof for IPv6 forwarding: the DUT emits the same bytes with
and without LinuxFP, for the IPv6 frames (hop limit, extension headers,
special addresses, too big, no neighbour, multipath ...), across IPv6
configuration changes, at XDP and at TC."""
import pytest

from controller.launcher import accelerator
from linuxfp.lab import RouterTopology, run_differential, standard6_frames, standard6_steps

pytestmark = pytest.mark.netns


@pytest.mark.parametrize("hook,pods", [("xdp", False), ("tc", False), ("tc", True)])
def test_router6_is_byte_identical_to_linux(require_root, hook, pods):
    report = run_differential(RouterTopology(prefixes=8, ipv6=True, containers=pods), standard6_steps(),
                              accelerator(hook=hook), frames=standard6_frames, prefix="lfp-t6")
    assert report.ok, report.render()
    # Not trivially equal: the fast path carried what the kernel forwarded alone.
    kernel = sum(o.forwarded_by_kernel for o in report.kernel)
    accelerated = sum(o.forwarded_by_kernel for o in report.accelerated)
    assert accelerated < kernel, report.render()


@pytest.mark.parametrize("backend", ["nft", "legacy"])
def test_an_ip6tables_rule_takes_ipv6_back_to_the_kernel(require_root, backend):
    """The filter node evaluates IPv4 tables only: an ip6tables rule (either
    backend) must leave IPv6 to the kernel, which drops what it says."""
    from linuxfp.lab import Step
    from linuxfp.lab.standard6 import ORDINARY, mtu_routes

    def drop(r):
        r.dut.run(f"ip6tables-{backend} -A FORWARD -d {r.prefixes6[ORDINARY]} -j DROP")

    steps = (Step("initial", mtu_routes), Step(f"ip6tables-{backend}-drop", drop))
    report = run_differential(RouterTopology(prefixes=8, ipv6=True), steps, accelerator(hook="xdp"),
                              frames=standard6_frames, prefix="lfp-t6f")
    assert report.ok, report.render()
    # (equal to Linux: nothing to the dropped prefix reached the sink)
    dropped = report.accelerated[-1]
    prefix = RouterTopology(prefixes=8, ipv6=True).routed_prefixes6()[ORDINARY].network_address.packed[:8]
    assert not any(f[38:46] == prefix for f in dropped.at("sink:to-dut")), report.render()
    assert dropped.forwarded_by_kernel > 0
