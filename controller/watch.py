"""The watches of the netfilter tables the filter node mirrors, which make the
datapath fail-safe the moment they change, long before the controller has
re-read and applied them.

Legacy iptables (TableWatch): the kernel-side watch (bpf_modules/
controller.c), a cgroup setsockopt program, counts the table replacements
made in this namespace as they are requested, so the datapath stops acting
on a table that is being changed before the change is made, instead of up to
a poll interval after. Sysctls (SysctlWriters): the same object's cgroup
sysctl program counts the writes to this namespace's net/ sysctls before the
kernel stores them, naming each writing thread; the re-read waits until each
has left its write. This module attaches both, opens the namespace's
doorbell (bpf_modules/doorbell.h: every kernel-side watch rings it as it
counts a change, so the event loop looks at once) and tells the controller
when a re-read is due.

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
from linuxfp.state.decode import decode_nft_event
from linuxfp.state.netfilter import generation_announced

from . import lease
from .companion import SYSCTL_PROGRAM, SYSCTL_WRITERS_MAP, WATCH_PROGRAM

IN_FLIGHT_LIMIT_NS = 2_000_000_000

log = logging.getLogger("linuxfp.watch")

class TableWatch:
    """Attached for the controller's lifetime (its links are fds, not pins:
    they end with the process, and the lease then runs out)."""

    def __init__(self, maps) -> None:
        self.maps = maps
        self._link = None
        self._sysctl_link = None
        self._writers: SysctlWriters | None = None
        # rung by every kernel-side watch as it counts a change (for the event
        # loop): these cgroup programs and the nodes' watches (ipsets)
        self.doorbell: dp.Doorbell | None = None
        # replaces that ended without a counters call (failed ones)
        self._unpaired = 0
        self._sysctl_writes = 0      # the lease's sysctl_writes at the last settle
        # since when a replace, a sysctl write, has looked in flight
        self._in_flight_since: dict[str, int] = {}
        self.in_flight: set[str] = set()     # what the last settled() waited for
        self.error: str | None = None
        self.sysctl_error: str | None = None
        # Whether the cgroup programs see every process: attached at the
        # hierarchy's root, not at a cgroup namespace's (a container's, where
        # only its own processes are below; the host's changes are polled).
        self.covers_host = False

    @property
    def attached(self) -> bool:
        return self._link is not None

    @property
    def sysctls_attached(self) -> bool:
        return self._sysctl_link is not None

    def start(self, companion) -> bool:
        """Attach the companion's cgroup programs; False (with `error` set)
        where the kernel cannot attach the legacy-iptables one, which is then
        polled instead (as are sysctls without theirs: `sysctl_error`)."""
        try:
            cgroup, unreachable = dp.open_cgroup2_root(), None
        except (dp.BpfError, OSError) as e:
            cgroup, unreachable = None, str(e)
        else:
            # (one root for both programs: what this says holds for each)
            self.covers_host = dp.is_hierarchy_root(cgroup.fd)
        try:
            self._link, self.error = self._attach(companion.program(WATCH_PROGRAM), cgroup, unreachable,
                                                  dp.BPF_CGROUP_SETSOCKOPT)
            if self.error is not None:
                log.warning("legacy iptables watch unavailable (%s): polling it every second instead", self.error)
            # writes counted before (a kept lease) are not the new map's to name;
            # read before attaching, so that every write counted after is named
            lease_map = self.maps.get(lease.LEASE_MAP)
            self._sysctl_writes = lease.read(lease_map).sysctl_writes if lease_map is not None else 0
            self._sysctl_link, self.sysctl_error = self._attach(companion.program(SYSCTL_PROGRAM), cgroup,
                                                                unreachable, dp.BPF_CGROUP_SYSCTL)
        finally:
            if cgroup is not None:
                cgroup.close()
        if SYSCTL_PROGRAM in companion.skipped:
            self.sysctl_error = f"not loaded: {companion.skipped[SYSCTL_PROGRAM]}"
        if (self._link is not None or self._sysctl_link is not None) and not self.covers_host:
            log.warning("the cgroup v2 hierarchy's root is not in view (a cgroup namespace of its own, and no "
                        "mount of the host's hierarchy): the watches of legacy iptables and sysctls see only "
                        "this namespace's processes, the host's changes are polled every second")
        if self.sysctl_error is not None:
            log.warning("sysctl watch unavailable (%s): polling sysctls every second instead", self.sysctl_error)
        else:
            self._writers = SysctlWriters(companion.obj.map(SYSCTL_WRITERS_MAP))
        self._open_doorbell()      # (the nodes' watches ring it too)
        return self.error is None

    def _open_doorbell(self) -> None:
        doorbell = self.maps.get(lease.DOORBELL_MAP)      # pinned with the lease by the companion
        try:
            if doorbell is None:
                raise dp.BpfError("no pinned doorbell (the controller's programs did not load)", errno.ENOENT)
            self.doorbell = dp.Doorbell(doorbell.fd)
        except dp.BpfError as e:
            log.warning("the watches' doorbell is unavailable (%s): changes are looked at within 200 ms", e)

    @staticmethod
    def _attach(program, cgroup, unreachable: str | None, attach_type: int):
        if program is None:
            return None, "the controller's programs did not load"
        if cgroup is None:
            return None, unreachable
        try:
            return dp.attach_cgroup(program.fd, cgroup.fd, attach_type), None
        except (dp.BpfError, OSError) as e:
            return None, str(e)

    def settled(self) -> int | None:
        """The count of watched changes begun (what the lease acknowledges)
        when none is in flight — a re-read made after this call sees every
        change counted — else None."""
        lease_map = self.maps.get(lease.LEASE_MAP)
        if lease_map is None:
            return 0      # nothing loaded yet
        state = lease.read(lease_map)
        # each message the filter node's watch counted is a change begun and done
        sent = lease.read_sent(self.maps.get(lease.SENT_MAP))
        outstanding = state.changes_started - state.changes_done
        # replaced, counters not added yet: still in the kernel, unless its
        # process is gone (0: one the controller cannot see, another pid
        # namespace's: in flight until its counters, or the limit below)
        replacing = outstanding > self._unpaired and (state.changer_tgid == 0
                                                      or os.path.exists(f"/proc/{state.changer_tgid}"))
        # read after the count: every write counted names its thread by now
        writing = (self._writers is not None and state.sysctl_writes != self._sysctl_writes
                   and self._writers.writing(state.sysctl_writes - self._sysctl_writes))
        # A replace takes milliseconds, a sysctl write microseconds; a live
        # process that never adds counters (its replace failed) or a writer
        # the controller cannot see must not hold the fast path off for good:
        # past IN_FLIGHT_LIMIT_NS the change counts as done (the 1 s poll
        # re-reads the tables again anyway). Each kind has its own clock.
        self.in_flight = {kind for kind, looks in (("replace", replacing), ("sysctl", writing))
                          if self._still_in_flight(kind, looks)}
        if self.in_flight:
            return None
        self._in_flight_since.clear()     # each change gets its own 2 s
        self._unpaired = outstanding
        self._sysctl_writes = state.sysctl_writes
        if self._writers is not None:
            self._writers.settle()
        return state.changes_started + state.sysctl_writes + sent

    def _still_in_flight(self, kind: str, looks_in_flight: bool) -> bool:
        if not looks_in_flight:
            self._in_flight_since.pop(kind, None)
            return False
        now = time.monotonic_ns()
        return now - self._in_flight_since.setdefault(kind, now) < IN_FLIGHT_LIMIT_NS

    def close(self) -> None:
        for link in (self._link, self._sysctl_link):
            if link is not None:
                link.close()
        self._link = self._sysctl_link = None
        self._writers = None
        if self.doorbell is not None:
            self.doorbell.close()
            self.doorbell = None


class SysctlWriters:
    """The threads the sysctl watch saw writing (lfp_sysctl_writers: tid in
    the controller's pid namespace -> writes begun) and whether any may be
    inside its write still. The program runs before the kernel stores the
    value and nothing runs after, so "done" is read from the thread:
    /proc/TID/syscall shows it gone, outside any system call, or in one with
    no net/ sysctl file among its arguments' descriptors. One sampled
    "running" (on a CPU) could be anywhere: still writing, for now."""

    def __init__(self, writers_map) -> None:
        self.map = writers_map
        self._seen: dict[int, int] = {}     # tid -> writes begun, at the last settle
        self._now: dict[int, int] = {}

    def writing(self, writes: int) -> bool:
        """Whether any of the `writes` begun since the last settle may still
        be in progress: its thread may be inside its write (0: a thread the
        controller cannot see), or the threads named account for fewer
        writes than that (an entry evicted or not made: unknown writers)."""
        self._now = {int.from_bytes(k, "little"): int.from_bytes(v, "little") for k, v in self.map.items()}
        named = 0
        for tid, count in self._now.items():
            seen = self._seen.get(tid, 0)
            if count == seen:
                continue
            named += count - seen if count > seen else count     # smaller: evicted, made again
            if tid == 0 or _may_write_sysctl(tid):
                return True
        # fewer: a write not named; more: one named since `writes` was read
        return named != writes

    def settle(self) -> None:
        self._seen = self._now


# Arguments of a system call that may name the descriptor it writes to
# (write/pwrite/writev: the first; splice, copy_file_range: the third).
_FD_ARGUMENTS = 4


def _may_write_sysctl(tid: int) -> bool:
    """Whether thread `tid` may be inside a write to a net/ sysctl now:
    False once it is gone, outside a system call, or in one whose descriptor
    arguments name no such file; True where the controller may not look."""
    try:
        with open(f"/proc/{tid}/syscall") as f:
            fields = f.read().split()
    except (FileNotFoundError, ProcessLookupError):
        return False             # gone (its write ended with it)
    except OSError:
        return True              # not ours to read (ptrace rules): unknown
    if not fields or fields[0] == "running":
        return True
    if int(fields[0]) < 0:
        return False             # blocked outside a system call
    for argument in fields[1: 1 + _FD_ARGUMENTS]:
        fd = int(argument, 16)
        if fd >= 1 << 20:
            continue             # not a descriptor
        try:
            # procfs may be mounted elsewhere than /proc (a node agent's /hostproc)
            if "/sys/net/" in os.readlink(f"/proc/{tid}/fd/{fd}"):
                return True
        except (FileNotFoundError, ProcessLookupError):
            continue             # no such descriptor (or the thread is gone)
        except OSError:
            return True          # not ours to read: unknown
    return False


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
            lost = False
            try:
                datagram = self._sock.sock.recv(nl.RECV_BUFSIZE)
            except socket.timeout:
                continue
            except OSError as e:
                if e.errno != errno.ENOBUFS:     # ENOBUFS: some were lost, a commit happened
                    self._reopen(e)
                    continue
                datagram, lost = b"", True
            announced = None
            for message in nl.split_messages(datagram):
                event = decode_nft_event(message)
                if event is not None and event.generation is not None:
                    generation_announced(event.generation)     # (its commit is over: a read needs no barrier)
                    announced = event.generation
            # (a commit's changes come ahead of its generation, which settles
            # them too; lost ones only a re-read settles)
            self.lease.mark_unsure(announced, lost=lost, nftables=True)

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
            self.lease.mark_unsure(lost=True, nftables=True)     # what happened meanwhile is re-read
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
