"""The kernel-side watch of legacy iptables (bpf_modules/controller.c): a cgroup
setsockopt program counts the table replacements made in this namespace as
they are requested, so the datapath stops acting on a table that is being
changed before the change is made, instead of up to a poll interval after.
This module attaches it and tells the controller when a re-read is due."""
from __future__ import annotations

import errno
import logging
import os
import time

from linuxfp import datapath as dp

from . import lease

IN_FLIGHT_LIMIT_NS = 2_000_000_000

log = logging.getLogger("linuxfp.watch")

class TableWatch:
    """Attached for the controller's lifetime (its link is an fd, not a pin:
    it ends with the process, and the lease then runs out)."""

    def __init__(self, maps) -> None:
        self.maps = maps
        self._link = None
        # replaces that ended without a counters call (failed ones)
        self._unpaired = 0
        self._in_flight_since: int | None = None
        self.error: str | None = None

    @property
    def attached(self) -> bool:
        return self._link is not None

    def start(self, program) -> bool:
        """Attach the companion's `program`; False (with `error` set) where
        the kernel cannot, and legacy iptables is polled instead."""
        try:
            if program is None:
                raise dp.BpfError("the controller's programs did not load", errno.ENOENT)
            cgroup = dp.open_cgroup2_root()
            try:
                self._link = dp.attach_cgroup(program.fd, cgroup.fd)
            finally:
                cgroup.close()
        except (dp.BpfError, OSError) as e:
            self.error = str(e)
            log.warning("legacy iptables watch unavailable (%s): polling it every second instead", e)
            return False
        return True

    def read(self) -> tuple[int, int, int] | None:
        """(changes_started, changes_done, changer_tgid) as the datapath sees
        them, or None while no lease map exists (nothing loaded yet)."""
        lease_map = self.maps.get(lease.LEASE_MAP)
        if lease_map is None:
            return None
        state = lease.read(lease_map)
        return state.changes_started, state.changes_done, state.changer_tgid

    def settled(self) -> int | None:
        """changes_started when no change is in flight — a re-read made after
        this call sees every change counted — else None."""
        state = self.read()
        if state is None:
            return 0
        started, done, changer = state
        outstanding = started - done
        if outstanding > self._unpaired and os.path.exists(f"/proc/{changer}"):
            # replaced, counters not added yet: still in the kernel. A replace
            # takes milliseconds; a live process that never adds counters (its
            # replace failed) must not hold the fast path off for good: past
            # IN_FLIGHT_LIMIT_NS the change counts as done (the 1 s poll
            # re-reads the table again anyway).
            now = time.monotonic_ns()
            if self._in_flight_since is None:
                self._in_flight_since = now
            if now - self._in_flight_since < IN_FLIGHT_LIMIT_NS:
                return None
        self._in_flight_since = None
        self._unpaired = outstanding
        return started

    def close(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None
