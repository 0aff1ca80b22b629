"""The controller's lease on its namespace's datapath (struct lfp_lease in
bpf_modules/common.h): renewed from the event loop, so a controller that
died, was stopped or whose loop is stuck stops renewing and the datapath hands
every packet to the kernel within one term."""
from __future__ import annotations

import struct
import time

LEASE_MAP = "lfp_lease"
TERM_NS = 1_000_000_000      # how long a renewal keeps the fast path on
RENEW_NS = 200_000_000       # how often the loop renews: a term spans several renewals
_VALUE = struct.Struct("<Q")  # struct lfp_lease { __u64 expires_ns; }
_KEY = struct.pack("<I", 0)
CLOCK_MONOTONIC_COARSE = 6   # <linux/time.h>; Python's time module does not name it


def now_ns() -> int:
    """The datapath's clock (bpf_ktime_get_coarse_ns)."""
    return time.clock_gettime_ns(CLOCK_MONOTONIC_COARSE)


def pack(expires_ns: int) -> bytes:
    return _VALUE.pack(expires_ns)


def expires(lease_map) -> int:
    """The pinned lease's end on the datapath's clock; 0 if never granted."""
    raw = lease_map.lookup(_KEY)
    return _VALUE.unpack(raw[: _VALUE.size])[0] if raw else 0


def grant(lease_map, until_ns: int) -> None:
    lease_map.update(_KEY, pack(until_ns))


class Lease:
    """Renews the lease in `maps` (a SharedMaps) at most every RENEW_NS."""

    def __init__(self, maps) -> None:
        self.maps = maps
        self._renewed = 0

    def renew(self, force: bool = False) -> None:
        now = now_ns()
        if not force and now - self._renewed < RENEW_NS:
            return
        lease_map = self.maps.get(LEASE_MAP)
        if lease_map is not None:          # no pipeline loaded yet: nothing to keep on
            grant(lease_map, now + TERM_NS)
            self._renewed = now
