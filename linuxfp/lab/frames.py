"""Byte-exact Ethernet frame builders for tests, plus injection and capture.

Frames are built with struct rather than scapy so that every byte, including
deliberately wrong ones (checksums, IHL, lengths), is exactly what the caller
asked for; scapy is only used to describe frames in reports.

Builders return `bytes`. Mutators take a frame and return a new one with one
thing wrong, so a test reads as "an ordinary UDP frame, truncated".
"""

from __future__ import annotations

import ipaddress
import struct

from .packet_io import Capture, CapturedFrame, inject, settle  # noqa: F401  (public API)

BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"
ZERO_MAC = "00:00:00:00:00:00"

ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ETH_P_8021Q = 0x8100
ETH_P_IPV6 = 0x86DD

IPPROTO_ICMP = 1
IPPROTO_TCP = 6
IPPROTO_UDP = 17

IP_FLAG_DF = 0x4000
IP_FLAG_MF = 0x2000

# Option bytes ready to pass as ``options=``; lengths are multiples of 4.
OPT_RECORD_ROUTE = bytes([7, 11, 4]) + bytes(8) + bytes([0])  # RR with room for two hops, EOL
OPT_ROUTER_ALERT = bytes([148, 4, 0, 0])
OPT_MALFORMED = bytes([7, 2, 4, 0])  # RR whose length is shorter than its own header


def mac_bytes(mac: str) -> bytes:
    return bytes(int(part, 16) for part in mac.split(":"))


def internet_checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ethernet(dst_mac: str, src_mac: str, ethertype: int, payload: bytes, vlan: int | None = None) -> bytes:
    header = mac_bytes(dst_mac) + mac_bytes(src_mac)
    if vlan is not None:
        header += struct.pack("!HH", ETH_P_8021Q, vlan & 0x0FFF)
    return header + struct.pack("!H", ethertype) + payload


def ipv4(
    src: str,
    dst: str,
    proto: int,
    payload: bytes,
    *,
    ttl: int = 64,
    ident: int = 1,
    tos: int = 0,
    df: bool = False,
    mf: bool = False,
    frag_offset: int = 0,
    options: bytes = b"",
) -> bytes:
    """An IPv4 packet with a correct header checksum; frag_offset is in 8-byte units."""
    if len(options) % 4:
        raise ValueError("IPv4 options must be padded to a multiple of 4 bytes")
    ihl = 5 + len(options) // 4
    flags = (IP_FLAG_DF if df else 0) | (IP_FLAG_MF if mf else 0) | (frag_offset & 0x1FFF)
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x40 | ihl,
        tos,
        ihl * 4 + len(payload),
        ident,
        flags,
        ttl,
        proto,
        0,
        ipaddress.IPv4Address(src).packed,
        ipaddress.IPv4Address(dst).packed,
    ) + options
    checksum = internet_checksum(header)
    return header[:10] + struct.pack("!H", checksum) + header[12:] + payload


def udp(src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    length = 8 + len(payload)
    pseudo = ipaddress.IPv4Address(src).packed + ipaddress.IPv4Address(dst).packed
    pseudo += struct.pack("!BBH", 0, IPPROTO_UDP, length)
    segment = struct.pack("!HHHH", sport, dport, length, 0) + payload
    checksum = internet_checksum(pseudo + segment) or 0xFFFF
    return segment[:6] + struct.pack("!H", checksum) + segment[8:]


def icmp_echo(ident: int, seq: int, payload: bytes, reply: bool = False) -> bytes:
    message = struct.pack("!BBHHH", 0 if reply else 8, 0, 0, ident, seq) + payload
    return message[:2] + struct.pack("!H", internet_checksum(message)) + message[4:]


def _pattern(length: int) -> bytes:
    return bytes(i & 0xFF for i in range(max(length, 0)))


def _payload_for(size: int | None, overhead: int, default: bytes) -> bytes:
    if size is None:
        return default
    if size < overhead:
        raise ValueError(f"frame size {size} is smaller than its headers ({overhead} bytes)")
    return _pattern(size - overhead)


def udp_frame(
    src_mac: str,
    dst_mac: str,
    src_ip: str,
    dst_ip: str,
    *,
    sport: int = 40000,
    dport: int = 9,
    size: int | None = None,
    payload: bytes = b"linuxfp-lab",
    vlan: int | None = None,
    **ip_fields,
) -> bytes:
    """Ethernet/IPv4/UDP; `size` is the whole frame length; ip_fields go to `ipv4`."""
    overhead = 14 + (4 if vlan is not None else 0) + 20 + len(ip_fields.get("options", b"")) + 8
    body = udp(src_ip, dst_ip, sport, dport, _payload_for(size, overhead, payload))
    return ethernet(dst_mac, src_mac, ETH_P_IP, ipv4(src_ip, dst_ip, IPPROTO_UDP, body, **ip_fields), vlan)


def icmp_echo_frame(
    src_mac: str,
    dst_mac: str,
    src_ip: str,
    dst_ip: str,
    *,
    ident: int = 1,
    seq: int = 1,
    size: int | None = None,
    payload: bytes = b"linuxfp-lab-echo",
    vlan: int | None = None,
    **ip_fields,
) -> bytes:
    """Ethernet/IPv4/ICMP echo request; `ident` here is the ICMP id, `ip_ident` goes to IP."""
    overhead = 14 + (4 if vlan is not None else 0) + 20 + len(ip_fields.get("options", b"")) + 8
    body = icmp_echo(ident, seq, _payload_for(size, overhead, payload))
    if "ip_ident" in ip_fields:
        ip_fields["ident"] = ip_fields.pop("ip_ident")
    return ethernet(dst_mac, src_mac, ETH_P_IP, ipv4(src_ip, dst_ip, IPPROTO_ICMP, body, **ip_fields), vlan)


def tcp(src: str, dst: str, sport: int, dport: int, payload: bytes, *, flags: int = 0x10, seq: int = 1,
        ack: int = 1, window: int = 8192) -> bytes:
    """A TCP segment without options (flags: 0x02 SYN, 0x10 ACK, ...)."""
    pseudo = ipaddress.IPv4Address(src).packed + ipaddress.IPv4Address(dst).packed
    pseudo += struct.pack("!BBH", 0, IPPROTO_TCP, 20 + len(payload))
    segment = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, window, 0, 0) + payload
    checksum = internet_checksum(pseudo + segment)
    return segment[:16] + struct.pack("!H", checksum) + segment[18:]


def tcp_frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, *, sport: int = 40000, dport: int = 80,
              flags: int = 0x10, payload: bytes = b"linuxfp-lab-tcp", **ip_fields) -> bytes:
    """Ethernet/IPv4/TCP; ip_fields go to `ipv4`."""
    body = tcp(src_ip, dst_ip, sport, dport, payload, flags=flags)
    return ethernet(dst_mac, src_mac, ETH_P_IP, ipv4(src_ip, dst_ip, IPPROTO_TCP, body, **ip_fields))


def icmp_frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, icmp_type: int, code: int = 0,
               rest: bytes = b"\0\0\0\0linuxfp-lab-icmp", **ip_fields) -> bytes:
    """Ethernet/IPv4/ICMP of any type and code; `rest` follows the checksum."""
    message = struct.pack("!BBH", icmp_type, code, 0) + rest
    message = message[:2] + struct.pack("!H", internet_checksum(message)) + message[4:]
    return ethernet(dst_mac, src_mac, ETH_P_IP, ipv4(src_ip, dst_ip, IPPROTO_ICMP, message, **ip_fields))


# IPv6 next headers the lab builds.
NEXTHDR_HOP, NEXTHDR_ROUTING, NEXTHDR_FRAGMENT, NEXTHDR_ICMPV6, NEXTHDR_NONE, NEXTHDR_DEST = 0, 43, 44, 58, 59, 60


def _sum6(src: str, dst: str, next_header: int, segment: bytes) -> int:
    """The upper-layer checksum over the IPv6 pseudo-header."""
    pseudo = (ipaddress.IPv6Address(src).packed + ipaddress.IPv6Address(dst).packed
              + struct.pack("!I3xB", len(segment), next_header))
    return internet_checksum(pseudo + segment)


def udp6(src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    segment = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    checksum = _sum6(src, dst, IPPROTO_UDP, segment) or 0xFFFF
    return segment[:6] + struct.pack("!H", checksum) + segment[8:]


def tcp6(src: str, dst: str, sport: int, dport: int, payload: bytes = b"", flags: int = 0x02) -> bytes:
    segment = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, flags, 65535, 0, 0) + payload
    return segment[:16] + struct.pack("!H", _sum6(src, dst, IPPROTO_TCP, segment)) + segment[18:]


def icmpv6(src: str, dst: str, icmp_type: int, code: int = 0, rest: bytes = b"") -> bytes:
    message = struct.pack("!BBH", icmp_type, code, 0) + rest
    return message[:2] + struct.pack("!H", _sum6(src, dst, NEXTHDR_ICMPV6, message)) + message[4:]


def ipv6_extension(next_header: int, body: bytes = b"") -> bytes:
    """A hop-by-hop, destination options or routing header: `body` after its
    two-byte head, padded with PadN to a multiple of 8 bytes."""
    raw = bytes([next_header, 0]) + body
    pad = -len(raw) % 8
    if pad == 1:
        raw += b"\0"                       # Pad1
    elif pad:
        raw += bytes([1, pad - 2]) + bytes(pad - 2)
    return raw[:1] + bytes([len(raw) // 8 - 1]) + raw[2:]


def ipv6_fragment_header(next_header: int, offset: int = 0, more: bool = False, ident: int = 1) -> bytes:
    return struct.pack("!BBHI", next_header, 0, (offset << 3) | int(more), ident)


def ipv6_frame(
    src_mac: str,
    dst_mac: str,
    src_ip: str,
    dst_ip: str,
    next_header: int,
    payload: bytes,
    *,
    hop_limit: int = 64,
    tclass: int = 0,
    flow_label: int = 0,
    payload_length: int | None = None,
    version: int = 6,
    vlan: int | None = None,
) -> bytes:
    """Ethernet/IPv6 around `payload` (extension headers and upper layer,
    already summed); `payload_length` overrides the header's length field."""
    first = (version << 28) | (tclass << 20) | flow_label
    length = len(payload) if payload_length is None else payload_length
    header = (struct.pack("!IHBB", first, length, next_header, hop_limit)
              + ipaddress.IPv6Address(src_ip).packed + ipaddress.IPv6Address(dst_ip).packed)
    return ethernet(dst_mac, src_mac, ETH_P_IPV6, header + payload, vlan=vlan)


def ipv6_udp_frame(
    src_mac: str,
    dst_mac: str,
    src_ip: str,
    dst_ip: str,
    *,
    sport: int = 40000,
    dport: int = 9,
    hop_limit: int = 64,
    payload: bytes = b"linuxfp-lab-v6",
    size: int | None = None,
    **ip_fields,
) -> bytes:
    """`size`: the whole frame's length (Ethernet header included)."""
    body = _payload_for(size, 14 + 40 + 8, payload)
    return ipv6_frame(src_mac, dst_mac, src_ip, dst_ip, IPPROTO_UDP, udp6(src_ip, dst_ip, sport, dport, body),
                      hop_limit=hop_limit, **ip_fields)


def arp_frame(
    src_mac: str,
    src_ip: str,
    target_ip: str,
    *,
    op: int = 1,
    dst_mac: str = BROADCAST_MAC,
    target_mac: str = ZERO_MAC,
) -> bytes:
    """ARP over Ethernet; op 1 is a request, 2 a reply."""
    body = struct.pack("!HHBBH", 1, ETH_P_IP, 6, 4, op)
    body += mac_bytes(src_mac) + ipaddress.IPv4Address(src_ip).packed
    body += mac_bytes(target_mac) + ipaddress.IPv4Address(target_ip).packed
    return ethernet(dst_mac, src_mac, ETH_P_ARP, body)


# --- mutators -----------------------------------------------------------------


def l3_offset(frame: bytes) -> int:
    """Offset of the network header, skipping one 802.1Q tag if present."""
    (ethertype,) = struct.unpack_from("!H", frame, 12)
    return 18 if ethertype == ETH_P_8021Q else 14


def with_ip_checksum(frame: bytes, checksum: int) -> bytes:
    at = l3_offset(frame) + 10
    return frame[:at] + struct.pack("!H", checksum) + frame[at + 2 :]


def with_bad_ip_checksum(frame: bytes) -> bytes:
    at = l3_offset(frame) + 10
    (good,) = struct.unpack_from("!H", frame, at)
    return with_ip_checksum(frame, good ^ 0x5A5A)


def with_ihl(frame: bytes, ihl: int) -> bytes:
    """Rewrite the IHL nibble; the checksum is recomputed over the original 20 bytes."""
    at = l3_offset(frame)
    header = bytearray(frame[at : at + 20])
    header[0] = 0x40 | (ihl & 0x0F)
    header[10:12] = b"\0\0"
    header[10:12] = struct.pack("!H", internet_checksum(bytes(header)))
    return frame[:at] + bytes(header) + frame[at + 20 :]


def truncated(frame: bytes, length: int) -> bytes:
    """Cut the frame short, leaving the headers' length fields promising more."""
    return frame[:length]


def padded(frame: bytes, extra: int, fill: int = 0) -> bytes:
    """Trailing bytes after the IP packet, as Ethernet padding would add."""
    return frame + bytes([fill]) * extra
