"""A minimal in-process ping, so labs need no iputils and no helper process.

Used to warm up neighbour tables and to check that a topology forwards.  The
echo goes through the namespace's own stack (routing, ARP), exactly like
ping(8) would.
"""

from __future__ import annotations

import ipaddress
import os
import select
import socket
import struct
import time

from .frames import icmp_echo
from .netns import Namespace, entered


ICMPV6_ECHO_REQUEST, ICMPV6_ECHO_REPLY = 128, 129


def ping(ns: Namespace, destination: str, count: int = 1, timeout: float = 2.0) -> int:
    """Send `count` echo requests from `ns` to `destination` (IPv4 or IPv6);
    returns replies received."""
    v6 = ipaddress.ip_address(destination).version == 6  # fails early on a typo
    with entered(ns):
        if v6:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    replies = 0
    with sock:
        for seq in range(1, count + 1):
            if v6:      # the kernel sums ICMPv6 (it covers the pseudo-header)
                echo = struct.pack("!BBHHH", ICMPV6_ECHO_REQUEST, 0, 0, ident, seq) + b"linuxfp-lab-ping"
            else:
                echo = icmp_echo(ident, seq, b"linuxfp-lab-ping")
            sock.sendto(echo, (destination, 0))
            if _await_reply(sock, destination, ident, seq, timeout, v6):
                replies += 1
    return replies


def _await_reply(sock: socket.socket, source: str, ident: int, seq: int, timeout: float, v6: bool) -> bool:
    deadline = time.monotonic() + timeout
    reply = ICMPV6_ECHO_REPLY if v6 else 0
    while (remaining := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], remaining)
        if not ready:
            return False
        packet, address = sock.recvfrom(65535)
        # an ICMPv6 raw socket delivers no IP header
        offset = 0 if v6 else (packet[0] & 0x0F) * 4
        if ipaddress.ip_address(address[0]) != ipaddress.ip_address(source) or len(packet) < offset + 8:
            continue
        kind, _code, _csum, got_ident, got_seq = struct.unpack_from("!BBHHH", packet, offset)
        if kind == reply and got_ident == ident and got_seq == seq:
            return True
    return False
