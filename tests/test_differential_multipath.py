"""Multipath: the fast path must pick the same next hop as Linux for every
flow. Two resolved next hops with distinct MACs make the choice visible in
the bytes arriving at the sink."""
from ipaddress import IPv4Address

import pytest

from controller.launcher import accelerator
from linuxfp.lab import RouterTopology, Step, run_differential
from linuxfp.lab.frames import icmp_echo_frame, udp_frame

pytestmark = pytest.mark.netns

SECOND_HOP_MAC = "02:00:00:00:0f:0f"


def multipath_frames(router, round_):
    base = int(router.source_pool.network_address) + 64 * (round_ + 1)
    dst = str(router.prefixes[0].network_address + 7)
    frames = []
    for i in range(48):
        src = str(IPv4Address(base + i))
        frames.append(udp_frame(router.src_if.mac, router.dut_left.mac, src, dst, sport=1000 + i * 7, dport=53))
        frames.append(icmp_echo_frame(router.src_if.mac, router.dut_left.mac, src, dst, ident=i))
    return frames


def _steps(policy):
    sink_ip, lazy = RouterTopology.SINK_IP, RouterTopology.LAZY_GATEWAY

    def setup(r):
        r.dut.run(["sysctl", "-qw", f"net.ipv4.fib_multipath_hash_policy={policy}"])
        r.dut.run(["ip", "neigh", "replace", lazy, "lladdr", SECOND_HOP_MAC, "nud", "permanent", "dev", "to-sink"])
        r.dut.run(["ip", "neigh", "replace", sink_ip, "lladdr", r.sink_if.mac, "nud", "permanent", "dev", "to-sink"])
        r.dut.run(["ip", "route", "replace", str(r.prefixes[0]), "nexthop", "via", sink_ip, "nexthop", "via", lazy])

    def weighted(r):
        r.dut.run(["ip", "route", "replace", str(r.prefixes[0]), "nexthop", "via", sink_ip, "weight", "3",
                   "nexthop", "via", lazy, "weight", "1"])

    return (Step(f"multipath-policy{policy}", setup), Step(f"weighted-policy{policy}", weighted))


# Policy 1 hashes an skb's own L4 hash where it has one (the NIC's RSS, a
# socket's txhash): XDP cannot see it, so `auto` takes TC, which passes such
# packets (the lab's injected frames carry none).
@pytest.mark.parametrize("policy,hook", [(0, "xdp"), (1, "auto")])
def test_multipath_next_hop_choice_matches_linux(require_root, policy, hook):
    report = run_differential(RouterTopology(prefixes=8), _steps(policy), accelerator(hook=hook),
                              frames=multipath_frames, prefix="lfp-t")
    assert report.ok, report.render()
    sink_frames = [f for o in report.kernel for f in o.at("sink:to-dut")]
    hops = {f[:6] for f in sink_frames}
    assert len(hops) == 2, "both next hops must carry traffic, else the test proves nothing"
    assert sum(o.forwarded_by_kernel for o in report.accelerated) < sum(o.forwarded_by_kernel for o in report.kernel)
