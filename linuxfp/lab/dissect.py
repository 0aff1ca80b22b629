"""Reading captured frames: flow keys, the one allowed normalisation, and
human-readable descriptions.

Flows: frames of different flows may legitimately be reordered (veth spreads
flows over queues, the slow path and the fast path finish at different
moments, ARP-queued packets leave later), so the harness compares order only
within a flow.  An ICMP error belongs to the flow of the packet it quotes;
fragments form their own flow per IP ID, because the kernel hashes them on
addresses only.

Normalisation: the IP ID of packets a namespace originates (ICMP errors,
echo replies) comes from a per-namespace random key, so two fresh DUTs
differ there.  `normalise_ip_id` zeroes the ID, and the header checksum that
covers it, for IPv4 packets whose source is one of the DUT's addresses —
nothing else.  A header checksum that was wrong is kept, so it still shows.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Collection

from .frames import ETH_P_8021Q, ETH_P_ARP, ETH_P_IP, ETH_P_IPV6, internet_checksum

FlowKey = tuple


def _ethertype_and_offset(frame: bytes) -> tuple[int, int, int | None]:
    if len(frame) < 14:
        return -1, len(frame), None
    (ethertype,) = struct.unpack_from("!H", frame, 12)
    if ethertype == ETH_P_8021Q and len(frame) >= 18:
        tci, inner = struct.unpack_from("!HH", frame, 14)
        return inner, 18, tci & 0x0FFF
    return ethertype, 14, None


def _ip4(raw: bytes) -> str:
    return str(ipaddress.IPv4Address(raw))


def _ipv4_flow(packet: bytes, depth: int = 0) -> FlowKey:
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return ("ipv4-malformed",)
    ihl = (packet[0] & 0x0F) * 4
    ident, frag = struct.unpack_from("!HH", packet, 4)
    proto = packet[9]
    src, dst = _ip4(packet[12:16]), _ip4(packet[16:20])
    if frag & 0x3FFF:  # MF set or non-zero offset
        return ("ipv4", src, dst, proto, "fragment", ident)
    l4 = packet[ihl:] if ihl >= 20 else b""
    if proto in (6, 17) and len(l4) >= 4:
        return ("ipv4", src, dst, proto, *struct.unpack_from("!HH", l4))
    if proto == 1 and len(l4) >= 8:
        kind, code = l4[0], l4[1]
        if kind in (0, 8):
            return ("ipv4", src, dst, proto, "echo", struct.unpack_from("!H", l4, 4)[0])
        if kind in (3, 4, 5, 11, 12) and depth == 0:
            return ("ipv4", src, dst, proto, "error", kind, code, _ipv4_flow(l4[8:], depth + 1))
        return ("ipv4", src, dst, proto, kind, code)
    return ("ipv4", src, dst, proto)


def flow_key(frame: bytes) -> FlowKey:
    """The flow a frame belongs to; MAC addresses are deliberately not part of it."""
    ethertype, offset, vlan = _ethertype_and_offset(frame)
    payload = frame[offset:]
    if ethertype == ETH_P_IP:
        key = _ipv4_flow(payload)
    elif ethertype == ETH_P_ARP and len(payload) >= 28:
        (op,) = struct.unpack_from("!H", payload, 6)
        key = ("arp", op, _ip4(payload[14:18]), _ip4(payload[24:28]))
    elif ethertype == ETH_P_IPV6 and len(payload) >= 40:
        key = ("ipv6", str(ipaddress.IPv6Address(payload[8:24])), str(ipaddress.IPv6Address(payload[24:40])), payload[6])
    else:
        key = ("ethertype", ethertype)
    return key if vlan is None else ("vlan", vlan, *key)


def describe_flow(key: FlowKey) -> str:
    return " ".join(describe_flow(part) if isinstance(part, tuple) else str(part) for part in key)


MLD_V2_REPORTS = bytes.fromhex("ff020000000000000000000000000016")   # ff02::16
ICMPV6_MLD2_REPORT = 143


def is_mld_report(frame: bytes) -> bool:
    """An MLDv2 report (IPv6 hop-by-hop, then ICMPv6 143, to ff02::16): what a
    host sends on the kernel's timers as it joins and leaves groups, e.g.
    all-routers when IPv6 forwarding is switched."""
    ethertype, offset, _ = _ethertype_and_offset(frame)
    if ethertype != ETH_P_IPV6 or len(frame) < offset + 48:
        return False
    header = frame[offset:]
    if header[24:40] != MLD_V2_REPORTS or header[6] != 0:
        return False
    options_end = 40 + (header[41] + 1) * 8
    return len(header) > options_end and header[40] == 58 and header[options_end] == ICMPV6_MLD2_REPORT


def normalise_ip_id(frame: bytes, dut_addresses: Collection[ipaddress.IPv4Address]) -> tuple[bytes, bool]:
    """Zero IP ID + header checksum of a DUT-originated IPv4 packet; returns (frame, changed)."""
    ethertype, offset, _ = _ethertype_and_offset(frame)
    if ethertype != ETH_P_IP or len(frame) < offset + 20:
        return frame, False
    header_length = (frame[offset] & 0x0F) * 4
    header = frame[offset : offset + header_length]
    if header_length < 20 or len(header) < header_length:
        return frame, False
    if ipaddress.IPv4Address(header[12:16]) not in dut_addresses:
        return frame, False
    checksum_valid = internet_checksum(header) == 0
    cleared = bytearray(frame)
    cleared[offset + 4 : offset + 6] = b"\0\0"
    if checksum_valid:
        cleared[offset + 10 : offset + 12] = b"\0\0"
    return bytes(cleared), True


def summary(frame: bytes) -> str:
    """One line from scapy, if it can decode the frame."""
    try:
        # Imported lazily: scapy is slow to import.  inet/inet6 register the
        # IP layers with Ether, so summaries go beyond "Raw".
        import scapy.layers.inet
        import scapy.layers.inet6  # noqa: F401
        from scapy.layers.l2 import Ether
    except ImportError:  # pragma: no cover - scapy is a test dependency
        return f"{len(frame)} bytes (install scapy for decoding: pip install scapy)"
    try:
        return f"{len(frame)} bytes  {Ether(frame).summary()}"
    except Exception as exc:  # noqa: BLE001 - scapy can choke on deliberately broken frames
        return f"{len(frame)} bytes  (undecodable: {exc})"


def hexdump(frame: bytes, highlight: Collection[int] = ()) -> str:
    """16 bytes a line; bytes at `highlight` offsets are bracketed."""
    lines = []
    for start in range(0, len(frame), 16):
        cells = [
            f"[{b:02x}]" if start + i in highlight else f" {b:02x} "
            for i, b in enumerate(frame[start : start + 16])
        ]
        lines.append(f"    {start:04x} {''.join(cells)}")
    return "\n".join(lines)


def differing_offsets(a: bytes, b: bytes) -> tuple[int, ...]:
    common = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
    return tuple(common + list(range(min(len(a), len(b)), max(len(a), len(b)))))


def _udp_filled(src: bytes, dst: bytes, udp: bytes) -> int:
    """The UDP checksum its sender fills in: over the pseudo-header and the
    datagram, its checksum field zero; a sum of 0 sent as 0xFFFF."""
    datagram = udp[:6] + b"\0\0" + udp[8:]
    return internet_checksum(src + dst + struct.pack("!BBH", 0, 17, len(udp)) + datagram) or 0xFFFF


def vxlan_checksum_holds(frame: bytes) -> bool:
    """Whether the outer UDP checksum of a VXLAN frame (Ethernet, IPv4
    without options, UDP, VXLAN, an inner Ethernet frame carrying IPv4 and
    UDP) is right for the packet as it will read once its inner UDP
    checksum, left to the device (CHECKSUM_PARTIAL: the field holds the
    pseudo-header's sum), is filled in: what a tunnel's transmit sums by
    local checksum offload (lco_csum()). A zero outer checksum (none) holds."""
    ip_end = 14 + 20
    outer = frame[ip_end: 14 + struct.unpack_from("!H", frame, 16)[0]]
    if outer[6:8] == b"\0\0":
        return True
    inner_ip = 8 + 8 + 14
    inner_udp = inner_ip + 20
    if len(outer) < inner_udp + 8 or outer[inner_ip + 9] != 17:
        return False
    segment = outer[inner_udp: inner_udp + struct.unpack_from("!H", outer, inner_udp + 4)[0]]
    filled = internet_checksum(segment) or 0xFFFF
    completed = outer[: inner_udp + 6] + struct.pack("!H", filled) + outer[inner_udp + 8:]
    return struct.unpack_from("!H", outer, 6)[0] == _udp_filled(frame[26:30], frame[30:34], completed)
