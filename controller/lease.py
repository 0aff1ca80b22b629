"""The controller's lease on its namespace's datapath (struct lfp_lease in
bpf_modules/lease.h): renewed from the event loop, so a controller that
died, was stopped or whose loop is stuck stops renewing and the datapath hands
every packet to the kernel within one term. The lease also carries the
count of watched-table changes (controller/watch.py) the controller has
re-read the tables after."""
from __future__ import annotations

import struct
import time

LEASE_MAP = "lfp_lease"
TERM_NS = 1_000_000_000      # how long a renewal keeps the fast path on
RENEW_NS = 200_000_000       # how often the loop renews: a term spans several renewals
CLOCK_MONOTONIC_COARSE = 6   # <linux/time.h>; Python's time module does not name it
_VALUE = struct.Struct("<QQ")  # struct lfp_lease { __u64 expires_ns; __u64 watch_acked; }
_KEY = struct.pack("<I", 0)


def now_ns() -> int:
    """The datapath's clock (bpf_ktime_get_coarse_ns)."""
    return time.clock_gettime_ns(CLOCK_MONOTONIC_COARSE)


def read(lease_map) -> tuple[int, int]:
    """(expires_ns, watch_acked) as pinned; expires_ns 0 if never granted."""
    raw = lease_map.lookup(_KEY)
    return _VALUE.unpack(raw[: _VALUE.size]) if raw else (0, 0)


def grant(lease_map, until_ns: int, watch_acked: int = 0) -> None:
    lease_map.update(_KEY, _VALUE.pack(until_ns, watch_acked))


class Lease:
    """Renews the lease in `maps` (a SharedMaps) at most every RENEW_NS."""

    def __init__(self, maps) -> None:
        self.maps = maps
        self.watch_acked = 0
        self._renewed = 0

    def acknowledge(self, changes_started: int) -> None:
        """The watched tables were re-read after this many changes began."""
        self.watch_acked = changes_started
        self.renew(force=True)

    def renew(self, force: bool = False) -> None:
        now = now_ns()
        if not force and now - self._renewed < RENEW_NS:
            return
        lease_map = self.maps.get(LEASE_MAP)
        if lease_map is not None:          # no pipeline loaded yet: nothing to keep on
            grant(lease_map, now + TERM_NS, self.watch_acked)
            self._renewed = now


def windows(watch_attached: bool) -> dict[str, str]:
    """Each source of truth the fast path depends on, and how stale the fast
    path can be about it (docs/datapath.md explains each)."""
    term = f"{TERM_NS / 1e9:g} s"
    return {
        "controller gone, stopped or stuck": f"<= {term} (lease)",
        "routes, rules, next hops": "none (the FIB is read per packet)",
        "addresses, neighbours, links, sysctls with events, nf_tables": "the response time (linuxfp stats)",
        "legacy iptables": "none (cgroup setsockopt watch)" if watch_attached else "<= 1 s (polled)",
        "xfrm, accept_local/send_redirects/route_localnet": "<= 1 s (polled)",
    }
