"""The watches of the netfilter tables the filter node mirrors, which make the
datapath fail-safe the moment they change, long before the controller has
re-read and applied them.

Legacy iptables (TableWatch): the kernel-side watch (bpf_modules/
controller.c), a cgroup setsockopt program, counts the table replacements
made in this namespace as they are requested, so the datapath stops acting
on a table that is being changed before the change is made, instead of up to
a poll interval after. This module attaches it and tells the controller when
a re-read is due.

nf_tables (NftablesWatch): a commit is announced on NFNLGRP_NFTABLES once it
is in force; a thread of its own waits for that and marks the lease unsure at
once (controller/lease.py), whatever the event loop is busy with. The window
left is the announcement's delivery."""
from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time

from linuxfp import datapath as dp

from linuxfp.state import netlink as nl
from linuxfp.state.events import NFNLGRP_NFTABLES

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
        # each message the filter node's watch counted is a change begun and done
        sent = lease.read_sent(self.maps.get(lease.SENT_MAP))
        return state.changes_started + sent, state.changes_done + sent, state.changer_tgid

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


class NftablesWatch:
    """Calls `lease.mark_unsure` from its own thread for every nf_tables
    announcement (and for lost ones), in the namespace it was started in. If
    its socket fails, the lease stays unsure (`block`) until a new socket
    listens again."""

    RETRY_S = 0.5

    def __init__(self, lease_) -> None:
        self.lease = lease_
        self._sock: nl.NetlinkSocket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.error: str | None = None

    @property
    def attached(self) -> bool:
        return self._thread is not None

    def start(self) -> bool:
        try:
            self._sock = self._open()
        except OSError as e:
            self.error = str(e)     # no nfnetlink: no nf_tables either
            return False
        self._thread = threading.Thread(target=self._run, name="nftables-watch", daemon=True)
        self._thread.start()
        return True

    @staticmethod
    def _open() -> nl.NetlinkSocket:
        sock = nl.NetlinkSocket(nl.NETLINK_NETFILTER, groups=(NFNLGRP_NFTABLES,))
        sock.sock.settimeout(0.2)   # to notice close()
        return sock

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sock.sock.recv(nl.RECV_BUFSIZE)
            except socket.timeout:
                continue
            except OSError as e:
                if e.errno != errno.ENOBUFS:     # ENOBUFS: some were lost, a commit happened
                    self._reopen(e)
                    continue
            self.lease.mark_unsure()

    def _reopen(self, failure: OSError) -> None:
        """Unsure until a new socket listens (the sockets were opened in the
        controller's namespace; the thread has not left it)."""
        log.error("nf_tables watch failed (%s): every packet goes to the kernel until it listens again", failure)
        self.lease.block(f"nf_tables watch failed: {failure}")
        self._sock.close()
        while not self._stop.wait(self.RETRY_S):
            try:
                self._sock = self._open()
            except OSError:
                continue
            self.lease.unblock()
            self.lease.mark_unsure()     # what happened meanwhile is re-read
            log.info("nf_tables watch listening again")
            return

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
