"""Frame builders are byte-exact; injection and capture see what the wire carries."""

from __future__ import annotations

import struct

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether

from linuxfp.lab import frames as F
from linuxfp.lab.frames import Capture, inject, settle
from linuxfp.lab.topology import Router

SRC_MAC, DST_MAC = "02:00:00:00:01:01", "02:00:00:00:01:02"


def _checksums_verified_by_scapy(frame: bytes) -> bool:
    packet = Ether(frame)
    rebuilt = Ether(frame)
    for layer in (IP, UDP, ICMP):
        if layer in rebuilt:
            del rebuilt[layer].chksum
    return bytes(Ether(bytes(rebuilt))) == bytes(packet)


def test_udp_frame_fields_and_checksums() -> None:
    frame = F.udp_frame(SRC_MAC, DST_MAC, "198.18.64.1", "198.19.0.1", sport=1234, dport=9, ttl=7, ident=42, df=True)
    packet = Ether(frame)
    assert packet.src == SRC_MAC and packet.dst == DST_MAC
    assert (packet[IP].ttl, packet[IP].id, packet[IP].flags.DF) == (7, 42, True)
    assert (packet[UDP].sport, packet[UDP].dport) == (1234, 9)
    assert _checksums_verified_by_scapy(frame)


def test_sizes_options_fragments_and_vlan() -> None:
    assert len(F.udp_frame(SRC_MAC, DST_MAC, "198.18.64.1", "198.19.0.1", size=1400)) == 1400
    with_rr = Ether(F.udp_frame(SRC_MAC, DST_MAC, "198.18.64.1", "198.19.0.1", options=F.OPT_RECORD_ROUTE))
    assert with_rr[IP].ihl == 5 + len(F.OPT_RECORD_ROUTE) // 4
    fragment = Ether(F.udp_frame(SRC_MAC, DST_MAC, "198.18.64.1", "198.19.0.1", mf=True, frag_offset=3))
    assert fragment[IP].flags.MF and fragment[IP].frag == 3
    tagged = Ether(F.udp_frame(SRC_MAC, DST_MAC, "198.18.64.1", "198.19.0.1", vlan=100, size=100))
    assert tagged[Dot1Q].vlan == 100 and len(tagged) == 100
    echo = Ether(F.icmp_echo_frame(SRC_MAC, DST_MAC, "198.18.64.1", "198.19.0.1", ident=5, seq=6, ip_ident=77))
    assert (echo[ICMP].type, echo[ICMP].id, echo[ICMP].seq, echo[IP].id) == (8, 5, 6, 77)
    arp = Ether(F.arp_frame(SRC_MAC, "198.18.1.77", "198.18.1.254"))
    assert (arp.dst, arp[ARP].op, arp[ARP].pdst) == (F.BROADCAST_MAC, 1, "198.18.1.254")


def test_mutators_break_exactly_one_thing() -> None:
    good = F.udp_frame(SRC_MAC, DST_MAC, "198.18.64.1", "198.19.0.1", size=200)
    assert F.internet_checksum(good[14:34]) == 0
    assert F.internet_checksum(F.with_bad_ip_checksum(good)[14:34]) != 0
    short_ihl = F.with_ihl(good, 4)
    assert short_ihl[14] == 0x44 and F.internet_checksum(short_ihl[14:34]) == 0
    assert len(F.truncated(good, 100)) == 100
    assert F.padded(good, 20)[:200] == good and len(F.padded(good, 20)) == 220
    (total_length,) = struct.unpack_from("!H", F.truncated(good, 100), 16)
    assert total_length == 186


def test_injected_frame_is_forwarded_with_ttl_decremented(router_topology: Router) -> None:
    r = router_topology
    sent = F.udp_frame(r.src_if.mac, r.dut_left.mac, "198.18.1.1", str(r.prefixes[0][1]), ttl=64, ident=99)
    with Capture(r.sink, "to-dut") as at_sink, Capture(r.src, "to-dut") as at_src:
        assert inject(r.src, "to-dut", [sent]) == 1
        settle([at_sink, at_src], quiet=0.1)
        received = at_sink.stop()
        returned = at_src.stop()
    # The injected frame left src, so src's capture (incoming only) saw nothing.
    assert returned == ()
    assert len(received) == 1
    forwarded = Ether(received[0].data)
    assert (forwarded.src, forwarded.dst) == (r.dut_right.mac, r.sink_if.mac)
    assert forwarded[IP].ttl == 63 and forwarded[IP].id == 99
    assert bytes(forwarded[IP].payload) == bytes(Ether(sent)[IP].payload)
    assert F.internet_checksum(received[0].data[14:34]) == 0


def test_capture_keeps_vlan_tags_that_veth_strips(router_topology: Router) -> None:
    r = router_topology
    tagged = F.udp_frame(r.src_if.mac, r.dut_left.mac, "198.18.1.1", "198.19.0.1", vlan=100, size=120)
    with Capture(r.dut, "to-src") as at_dut:
        inject(r.src, "to-dut", [tagged])
        settle([at_dut], quiet=0.1)
        assert [f.data for f in at_dut.stop()] == [tagged]
