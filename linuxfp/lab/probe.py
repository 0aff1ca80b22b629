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


def ping(ns: Namespace, destination: str, count: int = 1, timeout: float = 2.0) -> int:
    """Send `count` echo requests from `ns` to `destination`; returns replies received."""
    ipaddress.IPv4Address(destination)  # fail early on a typo
    with entered(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    replies = 0
    with sock:
        for seq in range(1, count + 1):
            sock.sendto(icmp_echo(ident, seq, b"linuxfp-lab-ping"), (destination, 0))
            if _await_reply(sock, destination, ident, seq, timeout):
                replies += 1
    return replies


def _await_reply(sock: socket.socket, source: str, ident: int, seq: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], remaining)
        if not ready:
            return False
        packet, (sender, _) = sock.recvfrom(65535)
        ihl = (packet[0] & 0x0F) * 4
        if sender != source or len(packet) < ihl + 8:
            continue
        kind, _code, _csum, got_ident, got_seq = struct.unpack_from("!BBHHH", packet, ihl)
        if kind == 0 and got_ident == ident and got_seq == seq:
            return True
    return False
