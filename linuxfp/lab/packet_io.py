"""Putting frames on a wire and recording what arrives, inside a namespace.

Both use AF_PACKET sockets opened in-process (via `entered`), so there are
no helper processes and no tcpdump.  Captures record only frames *received*
by an interface: PACKET_IGNORE_OUTGOING, plus a pkttype check for safety.

Two details make captures byte-exact: veth strips 802.1Q tags into packet
metadata on receive (rx-vlan-offload), so the tag is put back from
PACKET_AUXDATA; and socket drops are checked, so a full receive buffer is an
error rather than a silently missing frame.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Self

from .netns import LabError, Namespace, entered

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_AUXDATA = 8
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
_AUXDATA = struct.Struct("=IIIHHHH")
_RECV_BUFFER = 256 * 1024  # large enough for a GRO super-frame
_SOCKET_BUFFER = 8 * 1024 * 1024
SO_RCVBUFFORCE = 33  # not exported by the socket module


@dataclass(frozen=True)
class CapturedFrame:
    data: bytes
    pkttype: int  # PACKET_HOST, PACKET_BROADCAST, PACKET_MULTICAST, PACKET_OTHERHOST


@contextlib.contextmanager
def _on_one_cpu() -> Iterator[None]:
    # A packet socket picks its TX queue from the current CPU and netif_rx
    # queues to the current CPU's backlog; a thread migrating mid-burst could
    # therefore reorder frames of one flow.  Pinning the sender removes that.
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(previous)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


def inject(ns: Namespace, ifname: str, frames: Iterable[bytes]) -> int:
    """Transmit raw frames out of `ifname` in `ns`, in order; returns how many were sent."""
    with entered(ns):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: never receives
    sent = 0
    with sock, _on_one_cpu():
        sock.bind((ifname, 0))
        for frame in frames:
            try:
                sock.send(frame)
            except OSError as exc:
                raise LabError(f"cannot send a {len(frame)}-byte frame on {ns.name}:{ifname}: {exc}") from exc
            sent += 1
    return sent


class Capture:
    """Records every frame received by `ifname` in `ns` from construction until `stop`."""

    def __init__(self, ns: Namespace, ifname: str, label: str | None = None) -> None:
        self.ns = ns
        self.ifname = ifname
        self.label = label or f"{ns.name}:{ifname}"
        self._frames: list[CapturedFrame] = []
        with entered(ns):
            # Protocol 0 at creation, ETH_P_ALL at bind: no frame from another
            # interface can slip in between the two calls.
            self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            self._sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            self._sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
            self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, _SOCKET_BUFFER)
            self._sock.bind((ifname, ETH_P_ALL))
            self._sock.setblocking(False)
            self._read_statistics()  # reading resets the kernel's counters
        except BaseException:
            self._sock.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def fileno(self) -> int:
        return self._sock.fileno()

    @property
    def frames(self) -> tuple[CapturedFrame, ...]:
        return tuple(self._frames)

    def poll(self) -> int:
        """Move frames already queued on the socket into the record; returns how many."""
        before = len(self._frames)
        while True:
            try:
                data, ancillary, flags, address = self._sock.recvmsg(
                    _RECV_BUFFER, socket.CMSG_SPACE(_AUXDATA.size)
                )
            except BlockingIOError:
                break
            if flags & socket.MSG_TRUNC:
                raise LabError(f"{self.label}: a frame larger than {_RECV_BUFFER} bytes was truncated")
            pkttype = address[2]
            if pkttype == PACKET_OUTGOING:
                continue
            self._frames.append(CapturedFrame(_restore_vlan_tag(data, ancillary), pkttype))
        return len(self._frames) - before

    def stop(self) -> tuple[CapturedFrame, ...]:
        """Drain, check nothing was dropped, close; returns every frame recorded."""
        self.poll()
        _, drops = self._read_statistics()
        self.close()
        if drops:
            raise LabError(f"{self.label}: the kernel dropped {drops} frames (receive buffer full)")
        return self.frames

    def close(self) -> None:
        self._sock.close()

    def _read_statistics(self) -> tuple[int, int]:
        raw = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        return struct.unpack("=II", raw)


def _restore_vlan_tag(data: bytes, ancillary: list[tuple[int, int, bytes]]) -> bytes:
    for level, kind, payload in ancillary:
        if level != SOL_PACKET or kind != PACKET_AUXDATA or len(payload) < _AUXDATA.size:
            continue
        status, _len, _snaplen, _mac, _net, tci, tpid = _AUXDATA.unpack_from(payload)
        if status & TP_STATUS_VLAN_VALID:
            tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100
            return data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
    return data


def settle(captures: Sequence[Capture], quiet: float = 0.1, timeout: float = 5.0) -> None:
    """Wait until no capture has received anything for `quiet` seconds.

    Forwarding, ICMP generation and ARP resolution all complete in softirq
    context within microseconds, so a quiet period is a robust end-of-burst
    signal; the timeout only bounds a pathological stream.
    """
    deadline = time.monotonic() + timeout
    last_arrival = time.monotonic()
    while True:
        now = time.monotonic()
        remaining_quiet = quiet - (now - last_arrival)
        if remaining_quiet <= 0 or now >= deadline:
            return
        ready, _, _ = select.select(captures, [], [], min(remaining_quiet, deadline - now))
        if sum(capture.poll() for capture in ready):
            last_arrival = time.monotonic()
