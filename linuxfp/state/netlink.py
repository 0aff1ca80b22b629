"""Raw netlink transport: sockets, request framing and attribute parsing.

We talk to the kernel over plain `socket.AF_NETLINK` sockets and decode the
few message types we need ourselves. pyroute2 0.9.7 decodes a route message
in ~28 us (asyncio core, generic NLA machinery); the snapshot of a 10k-route
table must stay well below a second and a netlink burst must be drained
faster than the kernel fills the socket, so the hot path is a `struct`-based
decoder here. Constants carry their kernel names so they can be grepped in
include/uapi.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, Self, TypeVar

# --- netlink core (include/uapi/linux/netlink.h) ---------------------------
NETLINK_ROUTE = 0
NETLINK_NETFILTER = 12
NETLINK_GENERIC = 16

NLMSG_NOOP = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSG_OVERRUN = 4

NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
NLM_F_REPLACE = 0x100
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_APPEND = 0x800

SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
NETLINK_NO_ENOBUFS = 5
NETLINK_LISTEN_ALL_NSID = 8
SO_RCVBUFFORCE = 33

NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF

NLMSGHDR = struct.Struct("=IHHII")
_NSID_CMSG_SPACE = socket.CMSG_SPACE(4)
NLATTR = struct.Struct("=HH")

# Large enough for the biggest dump chunk the kernel sends (it sizes dump
# skbs to at most 32 KiB by default, more with big pages).
RECV_BUFSIZE = 1 << 20
# Ask for a big receive queue so a burst of thousands of route events fits;
# SO_RCVBUFFORCE (root) ignores net.core.rmem_max.
DEFAULT_RCVBUF = 32 << 20


class NetlinkError(OSError):
    """The kernel answered a netlink request with an error code."""


class DumpInterrupted(RuntimeError):
    """The kernel flagged NLM_F_DUMP_INTR: the table changed during the dump."""


SO_NETNS_COOKIE = 71


def netns_cookie() -> int:
    """The kernel's never-reused id of the calling thread's network namespace
    (unlike the namespace inode, which is recycled after deletion)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        raw = s.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8)
    return struct.unpack("<Q", raw)[0]

@dataclass(frozen=True, slots=True)
class RawMessage:
    """One netlink message: header fields plus the payload after the header."""

    type: int
    flags: int
    seq: int
    payload: bytes


def align4(n: int) -> int:
    return (n + 3) & ~3


def split_messages(data: bytes | memoryview) -> Iterator[RawMessage]:
    """Yield every netlink message of one datagram."""
    offset = 0
    end = len(data)
    while offset + 16 <= end:
        length, mtype, flags, seq, _pid = NLMSGHDR.unpack_from(data, offset)
        if length < 16 or offset + length > end:
            break
        yield RawMessage(mtype, flags, seq, bytes(data[offset + 16 : offset + length]))
        offset += align4(length)


def parse_attrs(data: bytes, offset: int = 0, end: int | None = None) -> dict[int, bytes]:
    """Parse a flat run of netlink attributes into {type: payload}.

    Later duplicates win, which is what every attribute we read expects
    (the kernel never repeats them)."""
    attrs: dict[int, bytes] = {}
    if end is None:
        end = len(data)
    unpack = NLATTR.unpack_from
    while offset + 4 <= end:
        length, atype = unpack(data, offset)
        if length < 4 or offset + length > end:
            break
        attrs[atype & NLA_TYPE_MASK] = data[offset + 4 : offset + length]
        offset += align4(length)
    return attrs


def parse_attr_list(data: bytes) -> list[tuple[int, bytes]]:
    """Parse attributes keeping order and duplicates (arrays of nests)."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    end = len(data)
    while offset + 4 <= end:
        length, atype = NLATTR.unpack_from(data, offset)
        if length < 4 or offset + length > end:
            break
        out.append((atype & NLA_TYPE_MASK, data[offset + 4 : offset + length]))
        offset += align4(length)
    return out


def attr(atype: int, payload: bytes) -> bytes:
    """Encode one attribute, padded."""
    length = 4 + len(payload)
    return NLATTR.pack(length, atype) + payload + b"\0" * (align4(length) - length)


def u8(b: bytes) -> int:
    return b[0]


def u16(b: bytes) -> int:
    return struct.unpack_from("=H", b)[0]


def u32(b: bytes) -> int:
    return struct.unpack_from("=I", b)[0]


def s32(b: bytes) -> int:
    return struct.unpack_from("=i", b)[0]


def u64(b: bytes) -> int:
    return struct.unpack_from("=Q", b)[0]


def be32(b: bytes) -> int:
    return struct.unpack_from("!I", b)[0]


def cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def strict_name(raw: bytes) -> str:
    """A name (a table's, chain's, device's) up to its NUL, strictly: one
    that is not UTF-8 raises UnicodeDecodeError, as it would meet another
    once its bad bytes were replaced (cstr)."""
    return raw.split(b"\0", 1)[0].decode()


ScannerT = TypeVar("ScannerT", bound="DumpScanner")


# Query sockets kept open, per thread and namespace, once keep_query_sockets()
# says so: closing a NETLINK_NETFILTER socket waits, inside close(), for
# nf_tables to finish freeing what its last commit replaced (the
# NETLINK_URELEASE notifier flushes the transaction destroy work: an RCU grace
# period, 5-13 ms measured right after `iptables -D`), which a re-read right
# after each commit would pay every time.
_kept = threading.local()
_receive_buffers = threading.local()
_keep_query_sockets = False


def keep_query_sockets(keep: bool = True) -> None:
    """Whether query_socket() keeps each socket open for the next query of
    the same thread in the same namespace: for a long-lived process that
    stays in one namespace (the controller). A kept socket holds its
    namespace alive, so short-lived callers that hop between namespaces
    (tests, labs) leave it off."""
    global _keep_query_sockets
    _keep_query_sockets = keep


def close_query_sockets() -> None:
    """Close the calling thread's kept query sockets."""
    for sock in _kept.__dict__.pop("sockets", {}).values():
        sock.close()


@contextlib.contextmanager
def query_socket(protocol: int) -> Iterator[NetlinkSocket]:
    """A socket for requests and dumps of `protocol` in the calling thread's
    namespace: fresh and closed after the block, or kept (keep_query_sockets)
    unless the block raised (a request cut short may leave answers queued)."""
    if not _keep_query_sockets:
        with NetlinkSocket(protocol) as sock:
            yield sock
        return
    kept = _kept.__dict__.setdefault("sockets", {})
    key = (protocol, os.stat("/proc/thread-self/ns/net").st_ino)
    sock = kept.pop(key, None) or NetlinkSocket(protocol)
    try:
        yield sock
    except BaseException:
        sock.close()
        raise
    if kept.setdefault(key, sock) is not sock:       # a nested query kept its own
        sock.close()


class NetlinkSocket:
    """A blocking or non-blocking raw netlink socket of one protocol."""

    def __init__(self, protocol: int, *, rcvbuf: int | None = None, groups: tuple[int, ...] = ()):
        self.protocol = protocol
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, protocol)
        try:
            if rcvbuf is not None:
                set_rcvbuf(self.sock, rcvbuf)
            self.sock.bind((0, 0))
            for group in groups:
                self.sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)
        except BaseException:
            self.sock.close()
            raise
        self._seq = 0

    @property
    def _buffer(self) -> bytearray:
        # One per thread, shared by its sockets (every receive copies its
        # datagram out at once): a megabyte zero-filled per socket was most
        # of a short-lived socket's cost (~0.3 ms), which CLI commands and
        # tests pay for every query.
        buffer = getattr(_receive_buffers, "buffer", None)
        if buffer is None:
            buffer = _receive_buffers.buffer = bytearray(RECV_BUFSIZE)
        return buffer

    def receive(self) -> bytes:
        """One datagram. socket.recv(RECV_BUFSIZE) would allocate (and give
        back) a megabyte per call: ~20 us, for every event of a burst."""
        buffer = self._buffer
        size = self.sock.recv_into(buffer)
        return bytes(memoryview(buffer)[:size])

    def listen_all_nsid(self) -> None:
        """Also receive the subscribed groups' events of every namespace that
        has an id in ours, each datagram tagged with that id."""
        self.sock.setsockopt(SOL_NETLINK, NETLINK_LISTEN_ALL_NSID, 1)

    def receive_tagged(self) -> tuple[bytes, int | None]:
        """One datagram and the id of the namespace it comes from (None: ours)."""
        buffer = self._buffer
        size, ancdata, flags, _addr = self.sock.recvmsg_into([buffer], _NSID_CMSG_SPACE)
        if flags & socket.MSG_CTRUNC:
            # its origin is unknown: as good as lost (the caller re-reads)
            raise OSError(errno.ENOBUFS, "netlink: namespace id of an event truncated")
        nsid = None
        for level, kind, data in ancdata:
            if level == SOL_NETLINK and kind == NETLINK_LISTEN_ALL_NSID and len(data) >= 4:
                nsid = struct.unpack_from("=i", data)[0]
        return bytes(memoryview(buffer)[:size]), nsid

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_membership(self, group: int) -> None:
        self.sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)

    def next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF or 1
        return self._seq

    def send(self, mtype: int, flags: int, payload: bytes) -> int:
        seq = self.next_seq()
        header = NLMSGHDR.pack(16 + len(payload), mtype, flags, seq, 0)
        self.sock.send(header + payload)
        return seq

    def request(self, mtype: int, payload: bytes, *, dump: bool) -> list[RawMessage]:
        """Send one request and collect every answer up to DONE (dump) or the
        ACK (a non-dump request always asks for one, after any reply).

        Multicast messages that arrive on the same socket are not expected
        here: request sockets are never subscribed to groups."""
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
        seq = self.send(mtype, flags, payload)
        out: list[RawMessage] = []
        interrupted = False
        while True:
            data = self.receive()
            for msg in split_messages(data):
                if msg.seq != seq:
                    continue
                if msg.flags & NLM_F_DUMP_INTR:
                    interrupted = True
                if msg.type == NLMSG_DONE:
                    if interrupted:
                        raise DumpInterrupted(f"netlink dump of type {mtype} was interrupted")
                    code = -s32(msg.payload) if len(msg.payload) >= 4 else 0
                    if code:   # the dump ended early (e.g. EMSGSIZE): what came is not the table
                        raise NetlinkError(code, f"netlink dump type {mtype}: {os.strerror(code)}")
                    return out
                if msg.type == NLMSG_ERROR:
                    code = -s32(msg.payload)
                    if code == 0:
                        return out
                    raise NetlinkError(code, f"netlink request type {mtype}: {os.strerror(code)}")
                out.append(msg)

    def dump(self, mtype: int, payload: bytes, *, retries: int = 5) -> list[RawMessage]:
        """Dump a table; restart if the kernel says it changed underneath us."""
        for _ in range(retries):
            try:
                return self.request(mtype, payload, dump=True)
            except DumpInterrupted:
                continue
        return self.request(mtype, payload, dump=True)

    def scan_dump(self, mtype: int, payload: bytes, scanner_for: Callable[[int], ScannerT], *,
                  retries: int = 5) -> ScannerT:
        """Dump a table into a scanner that frames the messages itself, for
        tables too large to make a RawMessage of every message (800 000
        routes); restart when the kernel says the table changed meanwhile."""
        for attempt in range(retries + 1):
            scanner = scanner_for(self.send(mtype, NLM_F_REQUEST | NLM_F_DUMP, payload))
            while not scanner.done:
                scanner.feed(self.receive())
            if scanner.error:
                raise NetlinkError(scanner.error, f"netlink dump type {mtype}: {os.strerror(scanner.error)}")
            if not scanner.interrupted:
                return scanner
        raise DumpInterrupted(f"netlink dump of type {mtype} was interrupted {retries + 1} times")


class DumpScanner(Protocol):
    """Reads a dump's datagrams itself (see NetlinkSocket.scan_dump)."""

    done: bool
    interrupted: bool
    error: int

    def feed(self, data: bytes) -> None: ...


def set_rcvbuf(sock: socket.socket, size: int) -> None:
    """Set the receive buffer, bypassing rmem_max when we are allowed to."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def is_overrun(exc: OSError) -> bool:
    return exc.errno == errno.ENOBUFS
