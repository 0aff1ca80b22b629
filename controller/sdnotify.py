"""systemd's readiness protocol (sd_notify(3)) in a few lines, so a
`Type=notify` unit knows when the datapath is installed, without a new
dependency: one datagram per message to the socket named by NOTIFY_SOCKET."""
from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("linuxfp.sdnotify")


def _address(value: str) -> str | None:
    """NOTIFY_SOCKET as an AF_UNIX address: a path, or '@name' for the
    abstract namespace (a leading NUL byte). Anything else (vsock:...) is
    not a socket this controller can reach."""
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


class Notifier:
    """Sends to systemd when started by it, does nothing otherwise.

    The socket is opened once: the state messages go out on the event
    loop's path, where a socket() per message would show in the response
    time. They are sent without blocking and dropped if systemd's queue is
    full (a later state supersedes them); READY=1 waits, it is sent once."""

    def __init__(self, environ=os.environ) -> None:
        self.sock: socket.socket | None = None
        value = environ.get("NOTIFY_SOCKET", "")
        address = _address(value) if value else None
        if value and address is None:
            log.warning("NOTIFY_SOCKET=%s is not a unix socket: systemd will not hear that we are ready", value)
        if address is None:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            sock.connect(address)
        except OSError as e:
            sock.close()
            log.warning("cannot reach systemd's notify socket %s: %s", value, e)
            return
        self.sock = sock
        # Children (iptables-save, clang) must not talk to systemd for us.
        environ.pop("NOTIFY_SOCKET", None)

    def send(self, *fields: str, block: bool = False) -> bool:
        """Send `fields` ("READY=1", "STATUS=...") as one message; True if sent."""
        if self.sock is None:
            return False
        try:
            self.sock.send("\n".join(fields).encode(), 0 if block else socket.MSG_DONTWAIT)
            return True
        except OSError as e:       # BlockingIOError: queue full; others: systemd went away
            if block:
                log.warning("cannot notify systemd: %s", e)
            return False

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={status}", block=True)

    def status(self, status: str) -> bool:
        return self.send(f"STATUS={status}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1", "STATUS=stopping", block=True)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
