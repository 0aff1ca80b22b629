"""The router program, frame by frame, through BPF_PROG_TEST_RUN.

A namespace provides real interfaces, routes and neighbours, because
bpf_fib_lookup consults the kernel FIB of the ingress device's namespace. The
maps are filled the way the controller fills them: snapshot → graph."""
from __future__ import annotations

import contextlib
import socket
import struct
import time

import pytest
from scapy.layers.l2 import Ether

from controller import lease
from linuxfp import datapath as dp
from linuxfp.graph import build_graph
from linuxfp.graph.interfaces import pack_iface
from linuxfp.graph.nodes.transmit import neigh_key
from linuxfp.lab.netns import Lab, entered
from linuxfp.state import read_snapshot
from linuxfp.synth import counters

from pipeline_loader import LoadedPipeline
from fixtures.router_cases import CASES, FORWARD, IN_MAC, LOCAL, OUT_MAC, NEXT_HOP_MAC, HAIRPIN_MAC, STALE_MAC, udp

XDP_PASS, XDP_REDIRECT = 2, 4
TC_ACT_UNSPEC, TC_ACT_REDIRECT = 0xFFFFFFFF, 7      # (-1: tcx's "next program", read as a u32)
VERDICTS = {"xdp": {FORWARD: XDP_REDIRECT, "pass": XDP_PASS}, "tc": {FORWARD: TC_ACT_REDIRECT, "pass": TC_ACT_UNSPEC}}

SETUP = [
    "ip link add in0 address {in_mac} type veth peer name in0p",
    "ip link add out0 address {out_mac} type veth peer name out0p",
    "ip link set in0p up", "ip link set out0p up", "ip link set in0 up", "ip link set out0 up",
    "ethtool -K out0p gro on",
    "ip addr add 198.18.1.254/24 dev in0",
    "ip addr add 198.18.2.254/24 dev out0",
    "ip neigh replace 198.18.2.1 lladdr {nh_mac} dev out0 nud permanent",
    "ip neigh replace 198.18.1.7 lladdr {hp_mac} dev in0 nud permanent",
    "ip route add 198.19.0.0/24 via 198.18.2.1",
    "ip route add 198.51.100.0/25 via 198.18.2.2",
    "ip neigh replace 198.18.2.5 lladdr {stale_mac} dev out0 nud stale",
    "ip route add 198.51.100.128/25 via 198.18.2.5",
    "ip link add small0 address {out_mac2} mtu 1200 type veth peer name small0p",
    "ip link set small0p up", "ip link set small0 up", "ethtool -K small0p gro on",
    "ip addr add 198.18.3.254/24 dev small0",
    "ip neigh replace 198.18.3.1 lladdr {nh_mac} dev small0 nud permanent",
    "ip route add 192.0.2.0/24 via 198.18.3.1",
    "ip route add blackhole 203.0.113.0/26",
    "ip route add unreachable 203.0.113.64/26",
    "ip route add prohibit 203.0.113.128/26",
    "sysctl -qw net.ipv4.ip_forward=1",
]


def configure_router_ns(ns) -> None:
    """SETUP in `ns`: the interfaces, routes and neighbours the router cases
    (fixtures/router_cases.py) refer to."""
    for cmd in SETUP:
        ns.run(cmd.format(in_mac=IN_MAC, out_mac=OUT_MAC, nh_mac=NEXT_HOP_MAC, hp_mac=HAIRPIN_MAC, out_mac2=OUT_MAC,
                          stale_mac=STALE_MAC).split())


@pytest.fixture(scope="module")
def router_ns():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("dp")
        configure_router_ns(ns)
        yield ns


def LoadedRouter(hook: str, ns) -> LoadedPipeline:
    """BPF_PROG_TEST_RUN refuses device-bound programs: the XDP build here
    lacks only the offloaded-VLAN kfunc, covered by the namespace tests."""
    return LoadedPipeline(ns, "in0", hook, ("router", "transmit"), f"test_{hook}")


@pytest.fixture(scope="module", params=["xdp", "tc"])
def router(request, router_ns):
    loaded = LoadedRouter(request.param, router_ns)
    yield loaded
    loaded.obj.close()


@pytest.mark.parametrize("case", CASES, ids=[c.description for c in CASES])
def test_router_case(router, case):
    frame = case.frame()
    before = router.counter(case.counter)
    result = router.run(frame)
    assert result.retval == VERDICTS[router.hook][case.verdict], case.description
    assert router.counter(case.counter) == before + 1, f"counter {case.counter}"
    if case.verdict == FORWARD:
        assert result.data_out == case.expect(frame)
        out = Ether(result.data_out)
        assert out.src == OUT_MAC        # the egress's MAC is the source
        resum = Ether(bytes(out))
        del resum["IP"].chksum
        assert Ether(bytes(resum))["IP"].chksum == out["IP"].chksum   # checksum valid
    else:
        assert result.data_out == frame, "a passed frame must reach the kernel unchanged"


@contextlib.contextmanager
def configured(router, ns, change, undo):
    """Apply a configuration change in the namespace and write the ingress's
    facts as the controller would (snapshot -> graph -> map); restore both."""
    ifaces = router.obj.map("lfp_ifaces")
    key = struct.pack("<I", router.ifindex)
    original = ifaces.lookup(key)
    change()
    try:
        with entered(ns):
            facts = next(f for f in build_graph(read_snapshot(), router.hook).ifaces if f.ifindex == router.ifindex)
        ifaces.update(key, pack_iface(facts))
        yield facts
    finally:
        undo()
        ifaces.update(key, original)


def assert_passed(router, frame, counter):
    before = router.counter(counter)
    assert router.run(frame).retval == VERDICTS[router.hook]["pass"]
    assert router.counter(counter) == before + 1


def test_a_local_destination_is_passed_before_any_fib_lookup(router):
    """Addressed to the host itself (a node's own traffic, VXLAN's outer
    packets): passed before the lookup, which would only say so — none of
    the cache's counters moves, whatever the TTL."""
    looked_up = ("fib_cache_hit", "fib_cache_miss", "fib_cache_off", "fib_cache_storm")
    for frame in (udp(dst=LOCAL), udp(dst=LOCAL, ttl=1), udp(dst="198.18.1.255")):   # an address, a broadcast /32
        before = {name: router.counter(name) for name in looked_up}
        assert_passed(router, bytes(frame), "fib_not_forwarded")
        assert {name: router.counter(name) for name in looked_up} == before, frame.summary()


def test_ingress_forwarding_off_is_a_map_update_away(router, router_ns):
    """The facts map is read per packet: no reload is needed for a sysctl."""
    frame = CASES[0].frame()
    with configured(router, router_ns, lambda: router_ns.sysctl("net.ipv4.conf.in0.forwarding", 0),
                    lambda: router_ns.sysctl("net.ipv4.conf.in0.forwarding", 1)):
        assert_passed(router, frame, "ingress_fwd_disabled")
    assert router.run(frame).retval == VERDICTS[router.hook][FORWARD]


def test_rp_filter_passes(router, router_ns):
    with configured(router, router_ns, lambda: router_ns.sysctl("net.ipv4.conf.all.rp_filter", 1),
                    lambda: router_ns.sysctl("net.ipv4.conf.all.rp_filter", 0)):
        assert_passed(router, CASES[0].frame(), "rp_filter")


def test_route_mtu_metric_caps_the_fast_path(router, router_ns):
    """ip_forward() honours a route's mtu metric; bpf_fib_lookup() does not
    unless it is locked, so longer packets must go to the kernel."""
    from fixtures.router_cases import udp, routed
    route = ["198.19.1.0/24", "via", "198.18.2.1", "mtu", "1000"]
    with configured(router, router_ns, lambda: router_ns.run(["ip", "route", "add", *route]),
                    lambda: router_ns.run(["ip", "route", "del", "198.19.1.0/24"])) as facts:
        assert facts.fwd_len_cap == 1000
        assert_passed(router, bytes(udp(dst="198.19.1.9", size=1100, flags="DF")), "route_mtu")
        small = bytes(udp(dst="198.19.1.9", size=900))
        result = router.run(small)
        assert result.retval == VERDICTS[router.hook][FORWARD] and result.data_out == routed(small)


def test_an_egress_length_cap_passes_longer_packets_at_tc(router, router_ns):
    """What the controller writes for a VXLAN egress (tx_len_cap: no path
    MTU its encapsulation could meet is exceeded) sends longer packets to
    the kernel. Only TC egresses carry a cap: the XDP build has no check."""
    from dataclasses import replace

    from fixtures.router_cases import routed, udp
    from linuxfp.graph.interfaces import unpack_iface
    ifaces = router.obj.map("lfp_ifaces")
    with entered(router_ns):
        out = socket.if_nametoindex("out0")
    key = struct.pack("<I", out)
    original = ifaces.lookup(key)
    ifaces.update(key, pack_iface(replace(unpack_iface(out, original), tx_len_cap=500)))
    try:
        long, short = bytes(udp(size=600)), bytes(udp(size=400))
        if router.hook == "tc":
            assert_passed(router, long, "tx_too_long")
        else:
            assert router.run(long).retval == VERDICTS["xdp"][FORWARD]
        result = router.run(short)
        assert result.retval == VERDICTS[router.hook][FORWARD] and result.data_out == routed(short)
    finally:
        ifaces.update(key, original)


def test_a_longer_packet_into_a_vxlan_egress_is_sent_when_its_remote_s_outer_route_has_room(router, router_ns):
    """Past an egress's tx_len_cap, the packet's remote VTEP (lfp_vteps, by
    egress and destination MAC) decides: its outer route, asked as the
    device's transmit asks it — out of the entry's own underlay, or, as
    for Flannel's entries, out of whichever the routes choose — must hold
    the packet plus the encapsulation (an MTU the lookup honours: a locked
    metric or a smaller device here, a learned path MTU on a Flannel node:
    test_lab_flannel.py). No entry, an entry's own limit (the route MTU
    metrics) or no room: the kernel's, as with the cap alone. (XDP
    egresses carry no cap.)"""
    from dataclasses import replace

    from fixtures.router_cases import routed, udp
    from linuxfp.graph.interfaces import unpack_iface
    from linuxfp.graph.nodes.transmit import VTEP, VTEP_KEY
    ifaces, vteps = router.obj.map("lfp_ifaces"), router.obj.map("lfp_vteps")
    with entered(router_ns):
        out, small = socket.if_nametoindex("out0"), socket.if_nametoindex("small0")
    key = struct.pack("<I", out)
    original = ifaces.lookup(key)
    ifaces.update(key, pack_iface(replace(unpack_iface(out, original), tx_len_cap=500)))
    vtep = VTEP_KEY.pack(out, bytes.fromhex(NEXT_HOP_MAC.replace(":", "")), 0)
    long = bytes(udp(size=600))
    inner = len(long) - 14
    try:
        def verdict(entry=None, remote="198.18.2.9", oif=0, frame=long, flags=0):  # (flags: no encapsulation)
            if entry is None:
                vteps.delete(vtep)
            else:
                vteps.update(vtep, VTEP.pack(socket.inet_aton(remote), socket.inet_aton("198.18.2.254"), oif, 50,
                                             entry, (1 << 8).to_bytes(4, "big"), 32768, 60999,
                                             (8472).to_bytes(2, "big"), 64, flags))
            before = router.counter("tx_too_long")
            result = router.run(frame)
            if result.retval == VERDICTS[router.hook][FORWARD]:
                assert result.data_out == routed(frame)
            return result.retval == VERDICTS[router.hook][FORWARD], router.counter("tx_too_long") - before

        if router.hook == "xdp":
            assert verdict(0xFFFF - 50) == (True, 0)
            return
        assert verdict() == (False, 1)
        assert verdict(0xFFFF - 50) == (True, 0)
        assert verdict(0xFFFF - 50, oif=out) == (True, 0)       # the entry's own underlay
        assert verdict(0xFFFF - 50, oif=small) == (False, 1)    # ... which has no route to the remote
        assert verdict(inner - 1) == (False, 1)                 # the entry's limit: one byte short
        assert verdict(inner) == (True, 0)
        # the remote's route leaves through small0 (MTU 1200), not the egress's underlay
        assert verdict(0xFFFF - 50, remote="192.0.2.9") == (True, 0)
        longer = bytes(udp(size=1200 - 50 + 14 + 1))
        assert verdict(0xFFFF - 50, remote="192.0.2.9", frame=longer) == (False, 1)
        assert verdict(0xFFFF - 50, frame=longer) == (True, 0)
        router_ns.run(["ip", "route", "add", "198.18.2.9/32", "dev", "out0", "mtu", "lock", str(inner + 49)])
        try:
            assert verdict(0xFFFF - 50) == (False, 1)          # the outer route: one byte short
            router_ns.run(["ip", "route", "change", "198.18.2.9/32", "dev", "out0", "mtu", "lock", str(inner + 50)])
            assert verdict(0xFFFF - 50) == (True, 0)
        finally:
            router_ns.run(["ip", "route", "del", "198.18.2.9/32"])
    finally:
        ifaces.update(key, original)
        with contextlib.suppress(Exception):
            vteps.delete(vtep)


def test_truncated_ipv4_header_passes(router_ns):
    """XDP only: BPF_PROG_TEST_RUN refuses to build an skb from a frame whose
    IPv4 header is cut short, so TC cannot be fed this one."""
    from fixtures.router_cases import truncated
    loaded = LoadedRouter("xdp", router_ns)
    try:
        frame = truncated()
        before = loaded.counter("parse_short")
        result = loaded.run(frame)
        assert result.retval == XDP_PASS and result.data_out == frame
        assert loaded.counter("parse_short") == before + 1
    finally:
        loaded.obj.close()


def assert_lease_decides(router, frame, held: bool) -> None:
    before = router.counter("lease_expired")
    result = router.run(frame)
    if held:
        assert result.retval != VERDICTS[router.hook]["pass"]
        assert router.counter("lease_expired") == before
    else:
        assert result.retval == VERDICTS[router.hook]["pass"] and result.data_out == frame
        assert router.counter("lease_expired") == before + 1


def test_without_a_lease_every_packet_goes_to_the_kernel(router):
    """A datapath nobody renews the lease of forwards nothing itself."""
    lease_map = router.obj.map(lease.LEASE_MAP)
    frame = next(c for c in CASES if c.verdict == FORWARD).frame()
    assert_lease_decides(router, frame, held=True)
    lease.grant(lease_map, held=False)
    try:
        assert_lease_decides(router, frame, held=False)
    finally:
        lease.grant(lease_map)
    assert_lease_decides(router, frame, held=True)


def test_the_lease_lapses_one_term_after_the_last_renewal(router):
    """The controller's lfp_lease_renew arms a kernel timer that ends the lease."""
    from linuxfp.synth import build_controller_programs

    frame = next(c for c in CASES if c.verdict == FORWARD).frame()
    companion = dp.BpfObject.open(build_controller_programs().data, name="test_companion")
    try:
        companion.reuse_map(lease.LEASE_MAP, router.obj.map(lease.LEASE_MAP))
        companion.load()
        renewal = lease.RENEWAL.pack(0, 300_000_000, 0, 0, 0, 0)   # acknowledged 0, a term of 0.3 s
        assert dp.test_run(companion.program("lfp_lease_renew").fd, b"", ctx_in=renewal).retval == 0
        assert_lease_decides(router, frame, held=True)
        time.sleep(0.15)
        assert dp.test_run(companion.program("lfp_lease_renew").fd, b"", ctx_in=renewal).retval == 0
        time.sleep(0.2)                                    # 0.35 s after the first renewal
        assert_lease_decides(router, frame, held=True)
        time.sleep(0.2)                                    # 0.4 s after the last one
        assert_lease_decides(router, frame, held=False)
        assert dp.test_run(companion.program("lfp_lease_renew").fd, b"", ctx_in=renewal).retval == 0
        assert_lease_decides(router, frame, held=True)
        revoke = lease.RENEWAL.pack(0, 0, 0, 0, 0, 0)            # a term of 0: lost events, stop now
        assert dp.test_run(companion.program("lfp_lease_renew").fd, b"", ctx_in=revoke).retval == 0
        assert_lease_decides(router, frame, held=False)
    finally:
        companion.close()
        lease.grant(router.obj.map(lease.LEASE_MAP))


def test_a_watched_table_change_not_yet_reread_sends_packets_to_the_kernel(router):
    """lfp_lease.changes_started moves as legacy iptables starts replacing a
    table; until the controller acknowledges it in the lease, Linux decides."""
    lease_map = router.obj.map(lease.LEASE_MAP)
    frame = next(c for c in CASES if c.verdict == FORWARD).frame()
    lease.grant(lease_map, changes_started=1)              # one change begun, none acknowledged
    try:
        before = router.counter("watched_table_changed")
        result = router.run(frame)
        assert result.retval == VERDICTS[router.hook]["pass"] and result.data_out == frame
        assert router.counter("watched_table_changed") == before + 1
        lease.grant(lease_map, changes_started=1, watch_acked=1)   # re-read after it
        assert router.run(frame).retval != VERDICTS[router.hook]["pass"]
    finally:
        lease.grant(lease_map)


# A change the kernel versions with a generation of its own: made, undone,
# the counter the datapath passes under meanwhile, the generation it moves
GENERATION_CHANGES = {
    "address": ("ip address add 203.0.113.250/32 dev out0", "ip address del 203.0.113.250/32 dev out0",
                "addresses_changed", "addr_genid"),
    "nf_tables": ("nft add table inet lfpgen", "nft delete table inet lfpgen", "nft_changed", "nft_seq"),
}


@pytest.mark.parametrize("change", GENERATION_CHANGES)
def test_a_change_not_yet_taken_in_sends_packets_to_the_kernel(router, change):
    """Every IPv4 address added or removed moves the kernel's address
    generation, every nf_tables commit its nf_tables generation (before the
    commit's rules take effect); while either differs from the one the
    controller read under (the lease's), Linux decides every packet."""
    make, undo, counter, moves = GENERATION_CHANGES[change]
    lease_map = router.obj.map(lease.LEASE_MAP)
    frame = next(c for c in CASES if c.verdict == FORWARD).frame()
    with _generations_reader(router) as read:
        with pytest.raises(lease.GenerationsUnknown):
            lease.read_generations(read)             # this thread is not in the watched namespace
        with entered(router.ns):
            taken_in = lease.read_generations(read)
        if taken_in.nft_seq is None and change == "nf_tables":
            pytest.skip("this kernel's struct net holds no nft.base_seq (no nf_tables, or before 6.17)")
        lease.grant(lease_map, addr_genid=taken_in.addr_genid, nft_seq=taken_in.nft_seq)
        assert router.run(frame).retval != VERDICTS[router.hook]["pass"]
        router.ns.run(make)
        try:
            before = router.counter(counter)
            result = router.run(frame)
            assert result.retval == VERDICTS[router.hook]["pass"] and result.data_out == frame
            assert router.counter(counter) == before + 1
            with entered(router.ns):
                moved = lease.read_generations(read)
            assert getattr(moved, moves) != getattr(taken_in, moves)
            lease.grant(lease_map, addr_genid=moved.addr_genid, nft_seq=moved.nft_seq)     # taken in
            assert router.run(frame).retval != VERDICTS[router.hook]["pass"]
        finally:
            router.ns.run(undo)


@contextlib.contextmanager
def _generations_reader(router):
    """The controller's lfp_read_generations, loaded against the pipeline's
    lease map for the router's namespace; the lease granted unguarded again
    after."""
    from linuxfp.state.netlink import netns_cookie
    from linuxfp.synth import build_controller_programs

    companion = dp.BpfObject.open(build_controller_programs().data, name="test_companion")
    try:
        with entered(router.ns):
            companion.set_rodata({"lfp_netns_cookie": netns_cookie()})
        companion.reuse_map(lease.LEASE_MAP, router.obj.map(lease.LEASE_MAP))
        companion.load()
        yield companion.program("lfp_read_generations")
    finally:
        companion.close()
        lease.grant(router.obj.map(lease.LEASE_MAP))


def test_a_stale_neighbour_passes_the_first_packet_then_forwards(router):
    """Linux starts probing a STALE neighbour with the first packet it sends
    there: that one goes to the kernel, the next ones take the fast path."""
    from fixtures.router_cases import STALE_NEIGH, routed, udp
    from linuxfp.graph.model import NEIGH_STALE

    with entered(router.ns):
        out0 = read_snapshot().link_by_name("out0").index
    neigh = router.obj.map("lfp_neigh")
    key = neigh_key(out0, "198.18.2.5")
    assert neigh.lookup(key) is not None
    neigh.update(key, bytes([NEIGH_STALE]))
    frame = bytes(udp(dst=STALE_NEIGH))
    assert_passed(router, frame, "neigh_stale")
    before = router.counter("forwarded")
    result = router.run(frame)
    assert result.retval == VERDICTS[router.hook][FORWARD]
    assert result.data_out == routed(frame, next_hop_mac=STALE_MAC)
    assert router.counter("forwarded") == before + 1


def _ifindex(ns, ifname: str) -> int:
    return int(ns.run(["cat", f"/sys/class/net/{ifname}/ifindex"]).stdout)


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_a_device_moved_to_another_namespace_takes_no_fast_path_there(hook):
    """A device keeps its programs when it moves to another namespace. Here
    that namespace is built to be as tempting as it gets: the same routes
    and neighbours, and the moved device keeps its ifindex, so every lookup
    the pipeline makes there finds an answer its tables of the first
    namespace accept (an XDP redirect would even leave through a device of
    the first one). The pipeline must see it is not home and leave each
    packet to that namespace's kernel, uncounted."""
    with Lab(prefix="lfp-t") as lab:
        home, away = lab.namespace("home"), lab.namespace("away")
        configure_router_ns(home)
        # away: the same setup, its first veth a stand-in deleted again so
        # that the ifindex in0 has at home is free there
        for cmd in SETUP:
            away.run(cmd.replace("in0", "x0").format(in_mac=IN_MAC, out_mac=OUT_MAC, nh_mac=NEXT_HOP_MAC,
                                                     hp_mac=HAIRPIN_MAC, out_mac2=OUT_MAC,
                                                     stale_mac=STALE_MAC).split())
        away.run(["ip", "link", "del", "x0"])
        router = LoadedRouter(hook, home)
        try:
            case = CASES[0]
            assert case.verdict == FORWARD
            frame = case.frame()
            assert router.run(frame).retval == VERDICTS[hook][FORWARD]
            home.run(["ip", "link", "set", "in0", "netns", away.name])
            assert _ifindex(away, "in0") == router.ifindex
            assert _ifindex(away, "out0") == _ifindex(home, "out0")
            away.run(["ip", "link", "set", "in0", "up"])
            away.run(["ip", "addr", "add", "198.18.1.254/24", "dev", "in0"])
            before = {c.name: router.counter(c.name) for c in counters()}
            router.ns = away                       # test runs on the device where it now is
            result = router.run(frame)
            assert result.retval == VERDICTS[hook]["pass"]
            assert result.data_out == frame
            assert {c.name: router.counter(c.name) for c in counters()} == before
        finally:
            router.close()


@pytest.mark.parametrize("hook,theirs_first", [("xdp", False), ("tc", False), ("tc", True)],
                         ids=["xdp", "tc", "tc-theirs-first"])
def test_a_tcx_program_of_another_tool_on_the_ingress_sends_every_packet_to_the_kernel_at_once(
        hook, theirs_first, router_ns, tmp_path):
    """A tcx attachment sends no event, so the controller finds another
    tool's program only by polling; the pipeline itself must not go around
    it meanwhile (at XDP any tcx ingress program runs after it; at TC the
    controller's is attached alone: one found ahead of it, as a tool that
    was there first, counts too — a redirect of ours would skip what tcx
    runs after us)."""
    import subprocess
    from pathlib import Path

    source = Path(__file__).parent / "bpf" / "foreign_tc_drop.c"
    obj_path = tmp_path / "foreign_drop.o"
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c", str(source),
                    "-o", str(obj_path)], check=True)
    router = LoadedRouter(hook, router_ns)
    frame = CASES[0].frame()
    links = []
    try:
        with entered(router_ns), dp.BpfObject.open(str(obj_path)) as foreign:
            foreign.load()

            def attach_ours() -> None:
                if hook == "tc":
                    links.append(dp.attach_tc(router.prog, router.ifindex, direction="ingress", method="tcx"))

            if not theirs_first:       # ours first, as the controller attaches it
                attach_ours()
            theirs = dp.attach_tc(foreign.program("foreign_drop"), router.ifindex, direction="ingress",
                                  method="tcx")
            links.append(theirs)
            if theirs_first:
                attach_ours()
            assert_passed(router, frame, "tcx_others")
            theirs.detach()
            assert router.run(frame).retval == VERDICTS[hook][FORWARD]   # ours alone again
    finally:
        with entered(router_ns):
            for link in links:
                link.close()
        router.close()
