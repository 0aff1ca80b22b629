"""The kernel's connection tracking table of a namespace, as
/proc/net/nf_conntrack shows it (tests and benches check what the fast path
left of the entries it refreshed), and its flush."""
from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterable

from linuxfp.state import netlink as nl

from .netns import Namespace, entered

Flow = tuple[str, str, int, int]     # source, destination, source port, destination port


def parse_conntrack(text: str) -> dict[Flow, dict]:
    """The UDP entries of /proc/net/nf_conntrack (IPv4 and IPv6) by original
    tuple, addresses in their short form: the seconds left and the flags
    ([ASSURED], [UNREPLIED], ...)."""
    entries = {}
    for row in text.splitlines():
        tokens = row.split()
        if len(tokens) < 5 or tokens[2] != "udp":
            continue
        original: dict[str, str] = {}
        for token in tokens[5:]:
            key, sep, value = token.partition("=")
            if sep and key in ("src", "dst", "sport", "dport"):
                original.setdefault(key, value)
        if len(original) < 4:
            continue
        flow = (ipaddress.ip_address(original["src"]).compressed, ipaddress.ip_address(original["dst"]).compressed,
                int(original["sport"]), int(original["dport"]))
        entries[flow] = {"timeout_s": int(tokens[4]),
                         "flags": [t[1:-1] for t in tokens[5:] if t.startswith("[") and t.endswith("]")]}
    return entries


def udp_entries(ns: Namespace) -> dict[Flow, dict]:
    return parse_conntrack(ns.read_proc_net("nf_conntrack"))


def timeouts_to(ns: Namespace, destinations: Iterable[str]) -> dict[str, int]:
    """Seconds left of the UDP entries to each of `destinations`."""
    wanted = set(destinations)
    return {dst: entry["timeout_s"] for (_, dst, _, _), entry in udp_entries(ns).items() if dst in wanted}


def malformed_udp(frame: bytes) -> list[bytes]:
    """An established connection's datagram (an untagged frame, IPv4 with a
    20-byte header or IPv6 without extension headers) as conntrack's
    udp_error() judges it: a bad checksum (invalid), none (valid — for IPv6
    too), a UDP length past the end and one too short (invalid)."""
    udp = 14 + (40 if frame[12:14] == b"\x86\xdd" else 20)

    def corrupt(offset: int, value: bytes) -> bytes:
        return frame[:offset] + value + frame[offset + len(value):]

    return [corrupt(udp + 6, struct.pack("!H", frame[udp + 6] << 8 ^ 0x5a5a)), corrupt(udp + 6, b"\0\0"),
            corrupt(udp + 4, struct.pack("!H", 999)), corrupt(udp + 4, struct.pack("!H", 7))]


def flush(ns: Namespace) -> None:
    """Forget every IPv4 connection `ns`'s conntrack tracks (what
    `conntrack -F` does: a ctnetlink delete without a tuple)."""
    with entered(ns), nl.query_socket(nl.NETLINK_NETFILTER) as sock:
        # NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_DELETE; nfgenmsg: family,
        # version 1 (NFNETLINK_V1: version 0 flushes every family), res_id 0
        sock.request((1 << 8) | 2, struct.pack("=BBH", socket.AF_INET, 1, 0), dump=False)
