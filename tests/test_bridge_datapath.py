"""The bridge node frame by frame through BPF_PROG_TEST_RUN, at XDP and TC:
a table of {frame in, verdict, counter} on a bridge whose FDB and port
settings come from the kernel (snapshot -> graph -> maps, as the controller
writes them). The whole is compared with Linux in test_differential_bridge.py."""
from __future__ import annotations

import struct
import time
from dataclasses import replace

import pytest
from pipeline_loader import LoadedPipeline

from linuxfp.graph.interfaces import pack_iface, unpack_iface
from linuxfp.lab.frames import (NEXTHDR_DEST, NEXTHDR_FRAGMENT, NEXTHDR_NONE, NEXTHDR_ROUTING, ethernet, ipv4,
                                ipv6_extension, ipv6_fragment_header, ipv6_frame, padded, udp, udp6, udp_frame,
                                with_bad_ip_checksum)
from linuxfp.lab.netns import Lab

pytestmark = pytest.mark.netns

A, B, C, D = "02:00:00:00:0a:01", "02:00:00:00:0b:01", "02:00:00:00:0c:01", "02:00:00:00:0d:01"
U = "02:00:00:00:0e:01"           # the uplink's next hop
SETUP = [
    "ip link add br0 type bridge", "ip link set br0 up",
    *(f"ip link add p{n} type veth peer name p{n}x" for n in "abcd"),
    *(f"ip link set p{n} master br0" for n in "abcd"),
    *(f"ip link set p{n} up" for n in "abcd"), *(f"ip link set p{n}x up" for n in "abcd"),
    *(f"ethtool -K p{n}x gro on" for n in "abcd"),
    "ip link set pc mtu 1400",
    f"bridge fdb add {A} dev pa master static", f"bridge fdb add {B} dev pb master static",
    f"bridge fdb add {C} dev pc master static", f"bridge fdb add {D} dev pd master static",
    "bridge link set dev pd state 0",
    # the bridge routes too: its address, an uplink pu, hosts behind ports
    # (permanent neighbours), one whose MAC no port has shown
    "ip link add pu type veth peer name pux", "ip link set pu up", "ip link set pux up", "ethtool -K pux gro on",
    "sysctl -qw net.ipv4.ip_forward=1",
    "ip addr add 198.18.10.254/24 dev br0", "ip addr add 198.18.11.254/24 dev pu",
    f"ip neigh replace 198.18.11.1 lladdr {U} dev pu nud permanent", "ip route add 198.18.12.0/24 via 198.18.11.1",
    f"ip neigh replace 198.18.10.1 lladdr {A} dev br0 nud permanent",
    f"ip neigh replace 198.18.10.4 lladdr {D} dev br0 nud permanent",
    "ip neigh replace 198.18.10.9 lladdr 02:00:00:00:ee:09 dev br0 nud permanent",
]
XDP_PASS, XDP_REDIRECT, TC_ACT_UNSPEC, TC_ACT_REDIRECT = 2, 4, 0xFFFFFFFF, 7
FWD, PASS = "forward", "pass"
VERDICTS = {"xdp": {FWD: XDP_REDIRECT, PASS: XDP_PASS}, "tc": {FWD: TC_ACT_REDIRECT, PASS: TC_ACT_UNSPEC}}


def _udp(src, dst, size=None, sport=40000):
    return udp_frame(src, dst, "198.18.10.1", "198.18.10.2", sport=sport, size=size)


def _ipv6(next_header: int, payload: bytes) -> bytes:
    return ipv6_frame(A, B, "2001:db8::1", "2001:db8::2", next_header, payload)


# (name, frame, outcome, counter); the ingress is pa, once every entry has
# been used once and settled
CASES = [
    ("known unicast", _udp(A, B), FWD, "forwarded"),
    ("to the MTU-1400 port, fits", _udp(A, C, size=1414), FWD, "forwarded"),
    ("to the MTU-1400 port, too long", _udp(A, C, size=1415), PASS, "br_too_long"),
    ("broadcast", _udp(A, "ff:ff:ff:ff:ff:ff"), PASS, "br_group_dest"),
    ("multicast", _udp(A, "01:00:5e:00:00:01"), PASS, "br_group_dest"),
    ("link-local", ethernet("01:80:c2:00:00:00", A, 0x0026, bytes(46)), PASS, "br_group_dest"),
    ("group source", _udp("03:00:00:00:00:01", B), PASS, "br_bad_source"),
    ("zero source", _udp("00:00:00:00:00:00", B), PASS, "br_bad_source"),
    ("unknown source", _udp("02:00:00:00:ee:01", B), PASS, "br_source_unknown"),
    ("unknown destination", _udp(A, "02:00:00:00:ee:02"), PASS, "br_dest_unknown"),
    ("back to the ingress port", _udp(A, A), PASS, "br_same_port"),
    ("to a disabled port", _udp(A, D), PASS, "br_egress_blocked"),
    ("bad IPv4 checksum", with_bad_ip_checksum(_udp(A, B)), PASS, "br_nf_invalid"),
    ("padded IPv4", padded(ethernet(B, A, 0x0800, ipv4("198.18.10.1", "198.18.10.2", 17,
                                                       udp("198.18.10.1", "198.18.10.2", 1, 9, b"x"))), 12),
     PASS, "br_nf_invalid"),
    ("IPv4 options", ethernet(B, A, 0x0800, ipv4("198.18.10.1", "198.18.10.2", 17,
                                                 udp("198.18.10.1", "198.18.10.2", 1, 9, b"o"),
                                                 options=b"\x01\x01\x01\x00")), PASS, "br_nf_invalid"),
    ("IPv6", ipv6_frame(A, B, "2001:db8::1", "2001:db8::2", 17, udp6("2001:db8::1", "2001:db8::2", 1, 9, b"6")),
     FWD, "forwarded"),
    # what IPv6 defrag would hold at PREROUTING if anything turned it on: a
    # fragment, or headers a fragment header may follow
    ("IPv6 fragment", _ipv6(NEXTHDR_FRAGMENT, ipv6_fragment_header(17, more=True, ident=7) + bytes(16)),
     PASS, "br_nf_fragment"),
    ("IPv6 destination options", _ipv6(NEXTHDR_DEST, ipv6_extension(17) + bytes(16)), PASS, "br_nf_fragment"),
    ("IPv6 routing header", _ipv6(NEXTHDR_ROUTING, ipv6_extension(17, bytes([0, 0])) + bytes(16)),
     PASS, "br_nf_fragment"),
    ("IPv6 authentication header", _ipv6(51, bytes([17, 1]) + bytes(10) + bytes(16)), PASS, "br_nf_fragment"),
    # the defrag hook stops looking at these: no fragment can follow
    ("IPv6 ESP", _ipv6(50, bytes(24)), FWD, "forwarded"),
    ("IPv6 no next header", _ipv6(NEXTHDR_NONE, bytes(8)), FWD, "forwarded"),
    ("not IP", ethernet(B, A, 0x88B5, bytes(46)), FWD, "forwarded"),
    ("source behind another port", _udp(D, C), PASS, "br_source_moved"),      # last: D is forgotten
]


@pytest.fixture(scope="module")
def bridge_ns():
    with Lab(prefix="lfp-bd") as lab:
        ns = lab.namespace("dp")
        for cmd in SETUP:
            ns.run(cmd.split())
        yield ns


def LoadedBridge(hook: str, ns) -> LoadedPipeline:
    return LoadedPipeline(ns, "pa", hook, ("bridge", "router", "bridge_tx", "transmit"), f"test_br_{hook}")


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_bridge_node_cases(bridge_ns, hook):
    loaded = LoadedBridge(hook, bridge_ns)
    try:
        # The first frame of a source goes to the kernel, which refreshes its
        # entry; so does the first frame to each destination the controller
        # wrote, and every frame to or from them for a few ms after (none may
        # overtake one the kernel holds). Then the interval's frames are
        # bridged here.
        first = loaded.run(_udp(A, B, sport=1))
        assert (first.retval, loaded.counter("br_ageing_refresh")) == (VERDICTS[hook][PASS], 1)
        time.sleep(0.02)
        for dst in (C, D, B):
            stamped = time.monotonic()
            assert loaded.run(_udp(A, dst, sport=2)).retval == VERDICTS[hook][PASS]
        # within 8 ms of B's stamp its frames still go to the kernel (told
        # only where this machine is quick enough: a test run may not be)
        again = loaded.run(_udp(A, B, sport=1))
        within = time.monotonic() - stamped < 0.008
        assert again.retval == VERDICTS[hook][PASS] or not within
        assert loaded.counter("br_settling") == 3 + (again.retval == VERDICTS[hook][PASS])
        time.sleep(0.02)
        for name, frame, outcome, counter in CASES:
            before = loaded.counter(counter)
            result = loaded.run(frame)
            assert (result.retval, loaded.counter(counter) - before) == (VERDICTS[hook][outcome], 1), name
            assert result.data_out[:len(frame)] == frame, name        # never rewritten
        assert loaded.counter("br_ageing_refresh") == 1
    finally:
        loaded.obj.close()


def test_a_moving_source_is_forgotten_at_once(bridge_ns):
    """A known source arriving on another (learning) port: the kernel will
    move it, so the node deletes the mirror's entry before handing the frame
    over; frames to that MAC then go to the kernel too."""
    loaded = LoadedBridge("xdp", bridge_ns)
    try:
        loaded.run(_udp(A, B, sport=1))          # A's refresh
        time.sleep(0.02)
        loaded.run(_udp(A, C, sport=1))          # C's first use
        time.sleep(0.02)
        assert loaded.run(_udp(A, C)).retval == XDP_REDIRECT
        before = loaded.counter("br_source_moved")
        assert loaded.run(_udp(C, B)).retval == XDP_PASS             # C's MAC, arriving on pa
        assert loaded.counter("br_source_moved") == before + 1
        before = loaded.counter("br_dest_unknown")
        assert loaded.run(_udp(A, C)).retval == XDP_PASS
        assert loaded.counter("br_dest_unknown") == before + 1
    finally:
        loaded.obj.close()


def _mac(ns, ifname: str) -> str:
    return ns.run(["cat", f"/sys/class/net/{ifname}/address"]).stdout.strip()


def _ifindex(ns, ifname: str) -> int:
    return int(ns.run(["cat", f"/sys/class/net/{ifname}/ifindex"]).stdout)


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_bridge_and_router_cases(bridge_ns, hook):
    """Into the bridge's IP from a port, and routed out of the bridge to the
    port its FDB names: forwarded rewritten (TTL - 1, the next hop's MAC),
    or handed to the kernel unchanged with the reason."""
    bridge_mac, uplink_mac = _mac(bridge_ns, "br0"), _mac(bridge_ns, "pu")
    up = LoadedBridge(hook, bridge_ns)
    out = LoadedPipeline(bridge_ns, "pu", hook, ("router", "bridge_tx", "transmit"), f"test_brr_{hook}")
    try:
        up.run(_udp(A, B, sport=1))                     # A's refresh (and settling after it)
        time.sleep(0.02)
        up.run(udp_frame(A, bridge_mac, "198.18.10.1", "198.18.12.1"))      # first use of the bridge's entry
        for target in ("198.18.10.1", "198.18.10.4"):   # first uses of A's and D's entries
            out.run(udp_frame(U, uplink_mac, "198.18.11.1", target))
        time.sleep(0.02)
        cases = [
            (up, "routed from a port", udp_frame(A, bridge_mac, "198.18.10.1", "198.18.12.1"), U, "forwarded"),
            (up, "to the bridge's address", udp_frame(A, bridge_mac, "198.18.10.1", "198.18.10.254"), None,
             "fib_not_forwarded"),
            (up, "back out of the bridge", udp_frame(A, bridge_mac, "198.18.10.1", "198.18.10.9"), None, "hairpin"),
            (out, "routed into the bridge", udp_frame(U, uplink_mac, "198.18.11.1", "198.18.10.1"), A, "forwarded"),
            (out, "to a disabled port", udp_frame(U, uplink_mac, "198.18.11.1", "198.18.10.4"), None,
             "brtx_port_blocked"),
            (out, "to a MAC the bridge floods", udp_frame(U, uplink_mac, "198.18.11.1", "198.18.10.9"), None,
             "brtx_dest_unknown"),
        ]
        for loaded, name, frame, next_hop, counter in cases:
            before = loaded.counter(counter)
            result = loaded.run(frame)
            outcome = FWD if next_hop else PASS
            assert (result.retval, loaded.counter(counter) - before) == (VERDICTS[hook][outcome], 1), name
            sent = result.data_out[:len(frame)]
            if next_hop:
                assert sent[:6] == bytes.fromhex(next_hop.replace(":", "")), name
                assert sent[22] == frame[22] - 1, name                # TTL
            else:
                assert sent == frame, name                            # never rewritten
        # A VXLAN port's cap (the controller's tx_len_cap) holds for packets
        # routed into the bridge too: the bridge keeps their route for the
        # port, whose encapsulation would lower its path MTU. (No XDP
        # egress carries a cap: the XDP build has no check.)
        ifaces = out.obj.map("lfp_ifaces")
        key = struct.pack("<I", _ifindex(bridge_ns, "pa"))
        original = ifaces.lookup(key)
        ifaces.update(key, pack_iface(replace(unpack_iface(0, original), tx_len_cap=300)))
        try:
            long = udp_frame(U, uplink_mac, "198.18.11.1", "198.18.10.1", size=400)
            before = out.counter("tx_too_long")
            result = out.run(long)
            capped = hook == "tc"
            assert result.retval == VERDICTS[hook][PASS if capped else FWD]
            assert out.counter("tx_too_long") - before == int(capped)
        finally:
            ifaces.update(key, original)
    finally:
        up.close()
        out.close()


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_a_tcx_program_of_another_tool_on_the_bridge_keeps_frames_to_it_off_the_fast_path(bridge_ns, hook,
                                                                                            tmp_path):
    """br_pass_frame_up() runs the bridge device's own tcx programs before IP
    sees a frame to the bridge's address; a tcx attachment sends no event,
    so the bridge node must see it itself, from the first frame on."""
    import subprocess
    from pathlib import Path

    from linuxfp import datapath as dp
    from linuxfp.lab.netns import entered

    source = Path(__file__).parent / "bpf" / "foreign_tc_drop.c"
    obj_path = tmp_path / "foreign_drop.o"
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c", str(source),
                    "-o", str(obj_path)], check=True)
    bridge_mac = _mac(bridge_ns, "br0")
    up = LoadedBridge(hook, bridge_ns)
    frame = udp_frame(A, bridge_mac, "198.18.10.1", "198.18.12.1")      # routed from a port
    try:
        up.run(_udp(A, B, sport=1))                     # A's refresh (and settling after it)
        time.sleep(0.02)
        up.run(frame)                                   # first use of the bridge's entry
        time.sleep(0.02)
        assert up.run(frame).retval == VERDICTS[hook][FWD]
        with entered(bridge_ns), dp.BpfObject.open(str(obj_path)) as foreign:
            foreign.load()
            link = dp.attach_tc(foreign.program("foreign_drop"), _ifindex(bridge_ns, "br0"), direction="ingress",
                                method="tcx")
        try:
            before = up.counter("tcx_others")
            result = up.run(frame)
            assert (result.retval, up.counter("tcx_others") - before) == (VERDICTS[hook][PASS], 1)
            assert result.data_out[:len(frame)] == frame
        finally:
            link.close()
        assert up.run(frame).retval == VERDICTS[hook][FWD]
    finally:
        up.obj.close()
