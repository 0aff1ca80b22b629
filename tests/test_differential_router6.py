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
    # ... and still does as an IPv6-only router (ip_forward=0 from this step on)
    alone = {o.step: o.forwarded_by_kernel for o in report.kernel}
    with_fp = {o.step: o.forwarded_by_kernel for o in report.accelerated}
    assert with_fp["ipv4-forwarding-off"] < alone["ipv4-forwarding-off"], report.render()


@pytest.mark.parametrize("backend", ["nft", "legacy"])
def test_an_ip6tables_forward_rule_drops_in_the_fast_path_what_linux_drops(require_root, backend):
    """An ip6tables FORWARD rule (either backend) is evaluated by the filter
    node's IPv6 classifier: what it drops never reaches the sink, and the
    rest of the standard IPv6 frames stay in the fast path (once the
    controller read the change: until then the legacy tables' watch hands
    every packet to the kernel, hence `counting`, which waits for that)."""
    from controller_counting import counting
    from linuxfp.lab import Step
    from linuxfp.lab.standard6 import ORDINARY, mtu_routes

    def drop(r):
        r.dut.run(f"ip6tables-{backend} -A FORWARD -d {r.prefixes6[ORDINARY]} -j DROP")

    steps = (Step("initial", mtu_routes), Step(f"ip6tables-{backend}-drop", drop))
    report = run_differential(RouterTopology(prefixes=8, ipv6=True), steps, counting([], "xdp"),
                              frames=standard6_frames, prefix="lfp-t6f")
    assert report.ok, report.render()
    # (equal to Linux: nothing to the dropped prefix reached the sink)
    dropped = report.accelerated[-1]
    prefix = RouterTopology(prefixes=8, ipv6=True).routed_prefixes6()[ORDINARY].network_address.packed[:8]
    assert not any(f[38:46] == prefix for f in dropped.at("sink:to-dut")), report.render()
    alone = {o.step: o.forwarded_by_kernel for o in report.kernel}
    assert 0 < dropped.forwarded_by_kernel < alone[dropped.step] // 2, report.render()


@pytest.mark.parametrize("hook,ip_forward", [("xdp", 1), ("xdp", 0), ("tc", 0)])
def test_a_steady_ipv6_flow_is_served_from_the_answer_cache(lab, hook, ip_forward):
    """With the real controller (its watch arms the cache): a repeated IPv6
    flow is forwarded by the fast path, its answers served from the cache —
    so the differential above, which runs the same controller, compares the
    cached path with Linux, not only the live lookup. Also on an IPv6-only
    router (ip_forward=0, which turns IPv4's redirects on): neither IPv4
    switch decides whether routed IPv6 may leave an interface."""
    from controller.launcher import ControllerProcess, linuxfp_stats
    from linuxfp.lab import inject
    from linuxfp.lab.frames import ipv6_frame, udp6
    from linuxfp.lab.standard6 import round_sources6

    r = RouterTopology(prefixes=8, ipv6=True)(lab)
    src, dst = next(round_sources6(r, 0)), str(r.prefixes6[0][1])
    frame = ipv6_frame(r.src_if.mac, r.dut_left.mac, src, dst, 17, udp6(src, dst, 1000, 9, bytes(32)))
    r.dut.run(f"sysctl -qw net.ipv4.ip_forward={ip_forward}")
    with ControllerProcess(r.dut.name, hook=hook):
        inject(r.src, r.src_if.name, [frame] * 200)
        stats = linuxfp_stats(r.dut.name)
    ingress = next(i for i in stats["interfaces"] if i["ifname"] == r.dut_left.name)
    assert ingress["fast_path"] >= 190, stats
    assert ingress["nodes"]["router"]["events"].get("fib_cache_hit", 0) >= 150, stats


@pytest.mark.parametrize("backend", ["nft", "legacy"])
def test_an_ip6tables_firewall_of_the_host_alone_keeps_ipv6_in_the_fast_path(require_root, backend):
    """ip6tables rules for what the host itself receives and sends (INPUT,
    OUTPUT) never see a forwarded IPv6 packet: the fast path keeps carrying
    it, byte for byte as Linux. A rule that tracks connections (IPv6
    conntrack then sees every forwarded packet) makes the filter look each
    one up: these frames belong to no established connection, so all of
    them go to the kernel, which makes their entries."""
    from linuxfp.lab import Step
    from linuxfp.lab.standard6 import mtu_routes

    def host_firewall(r):
        mtu_routes(r)
        r.dut.run(f"ip6tables-{backend} -A INPUT -p tcp --dport 22 -j DROP")
        r.dut.run(f"ip6tables-{backend} -A OUTPUT -p udp --dport 53 -j REJECT")

    def tracking(r):
        r.dut.run(f"ip6tables-{backend} -I INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT")

    steps = (Step("host-firewall", host_firewall), Step("tracking", tracking))
    report = run_differential(RouterTopology(prefixes=8, ipv6=True), steps, accelerator(hook="xdp"),
                              frames=standard6_frames, prefix="lfp-t6h")
    assert report.ok, report.render()
    alone = {o.step: o.forwarded_by_kernel for o in report.kernel}
    with_fp = {o.step: o.forwarded_by_kernel for o in report.accelerated}
    assert with_fp["host-firewall"] < alone["host-firewall"] // 2, report.render()
    assert with_fp["tracking"] == alone["tracking"] > 0, report.render()
