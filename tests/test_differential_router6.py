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
