"""A steady trickle of probe frames from the source towards one destination,
so the sink can time when forwarding starts, stops or changes."""
from __future__ import annotations

import socket
import threading
import time

from linuxfp.lab import frames
from linuxfp.lab.netns import entered

from .sink import PROBE_UDP_PORT
from .topology import Line

PROBE_INTERVAL_S = 0.0001


class ProbeStream:
    """Sends one probe every ~PROBE_INTERVAL_S to `target` (None: pause) until closed."""

    def __init__(self, line: Line, interval_s: float = PROBE_INTERVAL_S) -> None:
        self.line = line
        self.interval_s = interval_s
        self._frame: bytes | None = None
        self._stop = threading.Event()
        with entered(line.src):
            self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: never receives
        self._sock.bind((line.gen.ifname, 0))
        self.sent = 0
        self._thread = threading.Thread(target=self._loop, name="bench-probes", daemon=True)
        self._thread.start()

    def aim(self, daddr: str | None) -> None:
        self._frame = None if daddr is None else frames.udp_frame(
            self.line.gen.mac, self.line.dut_in.mac, self.line.gen.ip, daddr,
            sport=40007, dport=PROBE_UDP_PORT, size=64)

    def _loop(self) -> None:
        while not self._stop.is_set():
            frame = self._frame
            if frame is not None:
                try:
                    self._sock.send(frame)
                    self.sent += 1
                except OSError:
                    pass  # e.g. ENOBUFS for a moment; the next probe follows
            time.sleep(self.interval_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._sock.close()
