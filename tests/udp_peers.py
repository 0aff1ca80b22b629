"""Real UDP sockets on both sides of the router line (src, sink), for tests
whose datagrams must leave a socket as a container's do (the checksum left
to be filled: CHECKSUM_PARTIAL across veths), and the exchange that makes
conntrack call their connection established and ASSURED."""
from __future__ import annotations

import contextlib
import socket
import time

from linuxfp.lab import RouterTopology, entered

SRC_PORT, SINK_PORT = 40123, 5001


@contextlib.contextmanager
def udp_peers(router):
    """(a, b): a socket bound to src's SRC_IP:SRC_PORT and one to sink's
    SINK_IP:SINK_PORT, each made in its host's namespace, 2 s timeouts."""
    with entered(router.src):
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with entered(router.sink):
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with a, b:
        a.bind((RouterTopology.SRC_IP, SRC_PORT))
        b.bind((RouterTopology.SINK_IP, SINK_PORT))
        a.settimeout(2)
        b.settimeout(2)
        yield a, b


def assured(a, b) -> tuple[str, int]:
    """A datagram a -> b, the reply, and one more past conntrack's 2 s
    stream mark: the connection ASSURED. Returns where b saw a's datagrams
    come from (a's address, or what NAT made of it)."""
    sink = (RouterTopology.SINK_IP, SINK_PORT)
    a.sendto(b"open", sink)
    _, peer = b.recvfrom(2048)
    b.sendto(b"reply", peer)
    assert a.recvfrom(2048) == (b"reply", sink)
    time.sleep(2.3)
    a.sendto(b"assure", sink)
    b.recvfrom(2048)
    return peer
