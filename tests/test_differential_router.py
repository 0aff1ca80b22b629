"""Differential proof: the DUT emits the same bytes with and without LinuxFP,
for the standard frames, across the standard configuration changes."""
import pytest

from controller.launcher import accelerator
from linuxfp.lab import RouterTopology, run_differential, standard_steps

pytestmark = pytest.mark.netns


@pytest.mark.parametrize("hook,pods", [("xdp", False), ("tc", False), ("tc", True)])
def test_router_is_byte_identical_to_linux(require_root, hook, pods):
    """`pods`: src and sink keep veth defaults, so at TC routed packets go
    straight into them (redirect_peer)."""
    report = run_differential(RouterTopology(prefixes=8, containers=pods), standard_steps(), accelerator(hook=hook),
                              prefix="lfp-t")
    assert report.ok, report.render()
    # Not trivially equal: the fast path carried what the kernel forwarded alone.
    kernel = sum(o.forwarded_by_kernel for o in report.kernel)
    accelerated = sum(o.forwarded_by_kernel for o in report.accelerated)
    assert accelerated < kernel, report.render()
