"""The controller's lease on its namespace's datapath (struct lfp_lease in
bpf_modules/lease.h): renewed from the event loop through the companion's
lfp_lease_renew, whose kernel timer ends it one term after the last renewal.
So a controller that died, was stopped or whose loop is stuck stops renewing
and the datapath hands every packet to the kernel within one term. The
lease also carries the count of watched-table changes (controller/watch.py)
the controller has re-read the tables after."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from linuxfp import datapath as dp
from linuxfp.graph.tables import U32, U64, CType

log = logging.getLogger("linuxfp.lease")

LEASE_MAP = "lfp_lease"
# Netfilter netlink messages sent in the namespace (the filter node's watch,
# bpf_modules/filter_watch.c): one __u64 the datapath adds to changes_started.
SENT_MAP = "lfp_nfnl_sent"
# Rung by the kernel-side watches as they count a change (bpf_modules/
# doorbell.h); the event loop polls it (controller/watch.py).
DOORBELL_MAP = "lfp_watch_doorbell"
# Maps every object of the namespace shares, whatever its nodes.
NAMESPACE_MAPS = (LEASE_MAP, SENT_MAP, DOORBELL_MAP)
TERM_NS = 1_000_000_000      # how long a renewal keeps the fast path on
RENEW_NS = 200_000_000       # how often the loop renews: a term spans several renewals
# lease.h's and controller.c's layouts (shared_maps.py checks the maps'
# against every object's BTF as it loads)
LEASE = CType("struct lfp_lease", (("changes_started", "Q"), ("changes_done", "Q"), ("watch_acked", "Q"),
                                   ("sysctl_writes", "Q"), ("held", "I"), ("changer_tgid", "I"),
                                   ("addr_genid", "I"), ("addr_guarded", "I"), ("nft_seq", "I"),
                                   ("nft_guarded", "I"),
                                   ("lapse", "16s")))     # struct bpf_timer: the kernel's
# controller.c's test-run contexts (checked against its BTF as it loads)
RENEWAL = CType("struct lfp_renewal", (("watch_acked", "Q"), ("term_ns", "Q"), ("addr_genid", "I"),
                                       ("addr_guarded", "I"), ("nft_seq", "I"), ("nft_guarded", "I")))
GENERATIONS = CType("struct lfp_generations", (("addr_genid", "I"), ("nft_seq", "I"), ("nft_known", "I")))
CONTEXT_TYPES = (RENEWAL, GENERATIONS)
NAMESPACE_TYPES = {LEASE_MAP: (U32, LEASE), SENT_MAP: (U32, U64)}
_RENEWAL = RENEWAL.packer
# offsetof(struct lfp_lease, held) by the value's size, in every layout
# pinned so far (lease.h's history): 72 (this one), 64 (before nft_seq) and
# 56 (before addr_genid), 48 (three counters, then held), 32 (before the watch)
_HELD_AT = {72: 32, 64: 32, 56: 32, 48: 24, 32: 8}
_KEY = U32.pack(0)


@dataclass(frozen=True)
class LeaseState:
    held: bool
    watch_acked: int
    changes_started: int    # the watch's counters (controller/watch.py)
    changes_done: int
    changer_tgid: int
    sysctl_writes: int      # net/ sysctl writes begun (the sysctl watch)
    addr_genid: int | None  # the address generation acknowledged; None: unguarded
    nft_seq: int | None = None   # the nf_tables generation acknowledged; None: unguarded


def read(lease_map) -> LeaseState:
    """The lease as the datapath sees it."""
    raw = lease_map.lookup(_KEY)
    started, done, acked, sysctls, held, changer, genid, guarded, nft_seq, nft_guarded, _ = \
        LEASE.unpack(raw[: LEASE.size]) if raw else (0,) * 11
    return LeaseState(bool(held), acked, started, done, changer, sysctls, genid if guarded else None,
                      nft_seq if nft_guarded else None)


_SENT_KEY, _ARMED_KEY = U32.pack(0), U32.pack(1)


def read_sent(sent_map) -> int:
    """Netfilter netlink messages counted so far (0 without the map)."""
    if sent_map is None:
        return 0
    raw = sent_map.lookup(_SENT_KEY)
    return U64.unpack(raw[: U64.size])[0] if raw else 0


def arm_sent(sent_map, armed: bool) -> None:
    """Whether the filter node's watch counts netfilter netlink messages."""
    sent_map.update(_ARMED_KEY, U64.pack(int(armed)))


def revoke_pinned(path: str) -> None:
    """Clear `held` in a pinned lease about to be unpinned: once its last
    reference from user space goes, the kernel cancels its timer and nothing
    would ever clear it for programs still reading it."""
    try:
        lease_map = dp.Map.from_pinned(path)
    except (dp.BpfError, OSError):
        return
    try:
        raw = bytearray(lease_map.lookup(_KEY) or b"")
        # by offset, not through LEASE: a lease another version laid out
        held_at = _HELD_AT.get(len(raw))
        if held_at is None:
            log.warning("%s: a lease of %d bytes, a layout this version does not know: not revoked",
                        path, len(raw))
            return
        raw[held_at:held_at + 4] = bytes(4)
        lease_map.update(_KEY, bytes(raw))
    except dp.BpfError:
        pass
    finally:
        lease_map.close()


def grant(lease_map, held: bool = True, watch_acked: int = 0, changes_started: int = 0,
          addr_genid: int | None = None, nft_seq: int | None = None) -> None:
    """Set the lease directly, with no timer to end it: for tests that load a
    pipeline without a controller (addr_genid None: addresses unguarded;
    nft_seq None: nf_tables unguarded)."""
    lease_map.update(_KEY, LEASE.pack(changes_started, 0, watch_acked, 0, int(held), 0, addr_genid or 0,
                                      int(addr_genid is not None), nft_seq or 0, int(nft_seq is not None),
                                      bytes(16)))


class GenerationsUnknown(Exception):
    """lfp_read_generations could not read the namespace's generations."""


@dataclass(frozen=True)
class Generations:
    addr_genid: int         # net->ipv4.dev_addr_genid
    nft_seq: int | None     # net->nft.base_seq; None: a kernel without nf_tables


def read_generations(program) -> Generations:
    """The kernel's IPv4 address generation and nf_tables generation in the
    calling thread's namespace, through the companion's lfp_read_generations."""
    run = dp.test_run(program.fd, b"", ctx_in=GENERATIONS.pack(0, 0, 0))
    if run.retval != 0 or run.ctx_out is None:
        raise GenerationsUnknown(f"lfp_read_generations returned {run.retval}: not the watched namespace")
    genid, nft_seq, nft_known = GENERATIONS.unpack(run.ctx_out[: GENERATIONS.size])
    return Generations(genid, nft_seq if nft_known else None)


# watch_acked while a change the controller has not re-read yet is known to
# have been made (changes_started never reaches it): every packet goes to
# the kernel, counted as watched_table_changed.
UNSURE = (1 << 64) - 1


class Lease:
    """Renews the lease at most every RENEW_NS through `renew_program`.

    `mark_unsure` (called from a watch's thread the moment the kernel
    announces a change) hands every packet to the kernel until the event
    loop has re-read the changed state and calls `settle_unsure` with the
    count it read before: a change announced in between keeps it unsure.
    Or until `settle_covered` finds that every change announced so far is
    an nf_tables commit the netfilter taken in already holds."""

    def __init__(self) -> None:
        self.renew_program = None    # set once the companion has loaded
        self.generations_program = None   # lfp_read_generations, likewise
        self.watch_acked = 0
        # The IPv4 address generation the controller last took the addresses
        # in under (sample_addresses, then addresses_taken_in); None: unguarded.
        self.addr_genid: int | None = None
        # The nf_tables generation the controller last read netfilter under
        # (sample_nft, then nft_taken_in); None: unguarded. nft_present: the
        # kernel has nf_tables, so no lease until it is guarded.
        self.nft_seq: int | None = None
        self.nft_present = False
        self._generation_failed = False
        self._renewed = 0
        self._lock = threading.Lock()
        self.unsure_seq = 0          # changes announced so far
        self._settled_seq = 0        # of which the loop has re-read
        # The latest nf_tables generation a commit announced (NFT_MSG_NEWGEN)
        # with a mark, whether a mark came since without one, and whether
        # one stands for what only a re-read settles (messages lost, or a
        # change no nf_tables announcement vouches for).
        self._announced_nft: int | None = None
        self._unannounced = False
        self._needs_read = False
        self.blocked: str | None = None   # why changes cannot be seen at all
        self.withheld: str | None = None  # why the datapath may not act at all (withhold)

    @property
    def last_renewal_ns(self) -> int:
        """time.monotonic_ns() of the last renewal, 0 if none since the last
        revocation (for the metrics: a stuck loop shows as an old renewal)."""
        return self._renewed

    @property
    def unsure(self) -> bool:
        return self.unsure_seq != self._settled_seq or self.blocked is not None

    def block(self, reason: str) -> None:
        """Changes can no longer be seen (a watch failed): unsure until
        `unblock`, whatever the loop re-reads."""
        with self._lock:
            self.blocked = reason
        self.mark_unsure(lost=True)

    def unblock(self) -> None:
        """Seen again; the caller marks the lease unsure for what it missed."""
        with self._lock:
            self.blocked = None

    def withhold(self, reason: str | None) -> None:
        """While `reason` is set, the controller could not install what the
        configuration calls for (e.g. a map is full): the lease ends now and
        every renewal revokes it instead, so every packet goes to the kernel,
        counted as lease_expired. None grants it again from the next renewal."""
        with self._lock:
            was, self.withheld = self.withheld, reason
        if (was is None) == (reason is None):
            return
        if reason is not None:
            log.error("%s: every packet goes to the kernel until it is resolved", reason)
            self.revoke()
        else:
            log.info("the datapath may act again")

    @property
    def _term(self) -> int:
        # no lease before the addresses are guarded: an unguarded lease would
        # let the datapath act on addresses nobody vouches for
        unguarded = self.generations_program is not None and (
            self.addr_genid is None or (self.nft_present and self.nft_seq is None))
        return 0 if self.withheld is not None or unguarded else TERM_NS

    def _acked(self) -> int:
        return UNSURE if self.unsure else self.watch_acked

    def _renewal(self, acked: int, term_ns: int) -> bytes:
        genid, nft_seq = self.addr_genid, self.nft_seq
        return _RENEWAL.pack(acked, term_ns, genid or 0, int(genid is not None), nft_seq or 0,
                             int(nft_seq is not None))

    def _generations(self) -> Generations | None:
        if self.generations_program is None:
            return None
        try:
            generations = read_generations(self.generations_program)
        except (GenerationsUnknown, dp.BpfError) as e:
            # Never expected (the loop runs in its namespace); the datapath
            # then keeps passing on address and nf_tables grounds (no lease
            # at all before the first generations: _term), as it should.
            if not self._generation_failed:
                log.error("cannot read the kernel's generations (%s): the datapath leaves packets to the kernel", e)
            self._generation_failed = True
            return None
        if self._generation_failed:
            log.info("the kernel's generations read again")
            self._generation_failed = False
        self.nft_present = generations.nft_seq is not None
        return generations

    def sample(self) -> Generations | None:
        """The kernel's generations now (sample_addresses, sample_nft): one read."""
        return self._generations()

    def sample_addresses(self) -> int | None:
        """The kernel's IPv4 address generation now: read it *before* taking
        the addresses in (a dump, or draining the events queued so far — the
        kernel queues an address's message before it moves the generation),
        then hand it to addresses_taken_in. None before the companion loads."""
        generations = self._generations()
        return None if generations is None else generations.addr_genid

    def sample_nft(self) -> int | None:
        """The kernel's nf_tables generation now: read it *before* reading
        netfilter (a commit moves it before its rules take effect), then hand
        it to nft_taken_in once what was read is applied. None before the
        companion loads, or without nf_tables."""
        generations = self._generations()
        return None if generations is None else generations.nft_seq

    def nft_behind(self, seq: int | None) -> bool:
        """The kernel's nf_tables generation `seq` (sample_nft) is past the
        one netfilter was last read under (the datapath passes meanwhile)."""
        return seq is not None and seq != self.nft_seq

    def nft_taken_in(self, seq: int | None) -> None:
        """What the datapath holds reflects every nf_tables commit up to
        `seq` (sampled before netfilter was read): from now on it acts while
        the kernel's generation still reads `seq`."""
        if seq is None or seq == self.nft_seq:
            return
        with self._lock:
            self.nft_seq = seq
            self._renew_locked(force=True)

    def addresses_taken_in(self, genid: int | None) -> None:
        """What the datapath holds reflects every address change up to
        `genid` (sampled before they were taken in): from now on it acts
        while the kernel's generation still reads `genid`."""
        if genid is None or genid == self.addr_genid:
            return
        with self._lock:
            self.addr_genid = genid
            self._renew_locked(force=True)

    def addresses_behind(self) -> bool:
        """The kernel's addresses changed after the last addresses_taken_in
        (the datapath has been passing since)."""
        genid = self.sample_addresses()
        return genid is not None and genid != self.addr_genid

    def mark_unsure(self, nft_generation: int | None = None, lost: bool = False,
                    nftables: bool = False) -> None:
        """`nftables`: the mark is an nf_tables announcement — with
        `nft_generation`, the generation of the commit it ends (its
        NFT_MSG_NEWGEN); without one (a commit's changes announced ahead of
        it) it waits for a later announcement, since commits are announced
        in their order. Any other mark is settled only by a re-read
        (settle_unsure), and so is one with `lost`: messages were lost or
        not listened for (ENOBUFS, a socket reopened), and what the kernel
        still had queued when it reported the loss is older than what it
        dropped, so a later announcement vouches for nothing."""
        nftables = nftables or nft_generation is not None
        with self._lock:
            self.unsure_seq += 1
            self._needs_read |= lost or not nftables
            if nft_generation is None:
                self._unannounced = True
            else:
                self._announced_nft, self._unannounced = nft_generation, False
            if self.renew_program is not None:
                # Keeps the timer as it is where possible: a term from now, as
                # any renewal; harmless, since nothing is fast-pathed until
                # the loop settles it.
                dp.test_run(self.renew_program.fd, b"", ctx_in=self._renewal(UNSURE, self._term))

    def settle_unsure(self, seq: int) -> bool:
        """The changes announced up to `seq` have been re-read and applied."""
        with self._lock:
            if seq != self.unsure_seq or self.blocked is not None:
                return False
            self._settle_locked()
            return True

    def settle_covered(self) -> bool:
        """Settles every mark so far when each announced an nf_tables commit
        no later than the generation netfilter was last taken in under
        (nft_taken_in): the read that was applied holds them (a batch that
        read netfilter for the same announcement, say). False, changing
        nothing, otherwise: the loop reads again."""
        with self._lock:
            announced, taken = self._announced_nft, self.nft_seq
            if (not self.unsure or self.blocked is not None or self._needs_read or self._unannounced or announced is None
                    or taken is None or (taken - announced) & 0xFFFFFFFF >= 1 << 31):
                return False
            self._settle_locked()
            return True

    def _settle_locked(self) -> None:
        self._settled_seq = self.unsure_seq
        self._unannounced = self._needs_read = False
        self._renew_locked(force=True)

    def revoke(self) -> None:
        """End the lease now: the controller knows its view may be stale
        (events were lost) until it has re-read everything."""
        if self.renew_program is not None:
            with self._lock:
                dp.test_run(self.renew_program.fd, b"", ctx_in=self._renewal(self._acked(), 0))
            self._renewed = 0

    def acknowledge(self, changes_started: int) -> None:
        """The watched tables were re-read after this many changes began."""
        self.watch_acked = changes_started
        self.renew(force=True)

    def renew(self, force: bool = False) -> None:
        with self._lock:
            self._renew_locked(force)

    def _renew_locked(self, force: bool) -> None:
        now = time.monotonic_ns()
        if self.renew_program is None or (not force and now - self._renewed < RENEW_NS):
            return
        run = dp.test_run(self.renew_program.fd, b"", ctx_in=self._renewal(self._acked(), self._term))
        if run.retval != 0:
            log.error("lease renewal refused (%d): the datapath leaves packets to the kernel", run.retval)
        self._renewed = now


def windows(watch_attached: bool, keep: bool, nft_watched: bool = False,
            node_watches: tuple[str, ...] = (), sysctls_watched: bool = False,
            nft_guarded: bool = True) -> dict[str, str]:
    """Each source of truth the fast path depends on, and how stale the fast
    path can be about it (docs/datapath.md explains each)."""
    term = f"{TERM_NS / 1e9:g} s"
    return {
        "controller gone": f"<= {term} (lease; --keep pins the datapath)" if keep
        else "none (its programs die with it)",
        "controller stopped or stuck": f"<= {term} (lease)",
        "routes, rules, next hops": "none (the FIB is read per packet; a cached answer only while the "
                                    "kernel's rt_genid and fib_seq are unchanged)",
        "neighbours, for cached FIB answers": "none (raw tracepoints bump the neighbour generation as the "
                                              "kernel changes an entry)" + (
                                                  f"; <= {term} after a SIGKILL with --keep" if keep else "")
        if "router" in node_watches else "none (not cached: the router's watch is not attached)",
        "nexthop objects, ignore_routes_with_linkdown (FIB answers not cached while in use)":
            "the response time (until the cache is off)",
        "IPv6 forwarding switches (disable_ipv6, forwarding, proxy_ndp)": "none (read from the kernel per packet)",
        "IPv6 route MTU metrics, redirects accepted, ip6/inet tables":
            "the response time (sysctls: " + ("none, the sysctl watch" if sysctls_watched else "<= 1 s, polled")
            + "; legacy ip6tables: the watch)",
        "IPv4 multipath hash policy 1 or 2/3 set while multipath routes exist (XDP given up, the namespace "
        "left to the kernel)": ("none (the sysctl watch" if sysctls_watched else "<= 1 s (polled")
        + "; TC reads policy 1 and the skb's L4 hash live)",
        "facts derived from routes (local sources, route MTUs, multipath)":
            "the response time (a fresh read where a route's group is unknown)",
        "IPv4 addresses (local sources, addrtype)":
            "microseconds, in the changing system call (the kernel's address generation is read per packet: "
            "once it moves, every packet goes to the kernel until the controller has read the change; the "
            "kernel moves it just after the address takes effect)",
        "IPv6 addresses, neighbours, links, sysctls with events, xfrm policies":
            "the response time (linuxfp stats; a link renamed into a name-bound nf_tables egress chain too; "
            "into an ingress chain: none, the datapath reads the device's hooks)",
        "nf_tables (iptables-nft, nft)":
            ("none for rules, sets and policies (the kernel's nf_tables generation is read per packet: a commit "
             "moves it inside the committing system call, before its rules take effect, and every packet goes "
             "to the kernel until the controller has read the change, " + (
                 "which its notification announces); the rest of the committing call for a table woken from "
                 "dormant" if nft_watched else "polled within 1 s)")) if nft_guarded
            else ("its notification's delivery (a watch thread then hands every packet to the kernel until the "
                  "change is applied; this kernel's struct net holds no nf_tables generation)" if nft_watched
                  else "the response time (linuxfp stats)"),
        "legacy iptables, ip6tables, arptables": "none (cgroup setsockopt watch; the 1 s poll behind it)"
        if watch_attached else "<= 1 s (polled)",
        "bridge FDB": "none (raw tracepoints forget a mirrored entry as the kernel changes it)"
        if "bridge" in node_watches else "the response time (linuxfp stats)",
        "ipsets matched by iptables rules": "the rest of the changing system call (the filter watch counts "
                                            "every netfilter netlink message as it returns; the sets are read "
                                            "again before the datapath acts)"
        if "filter" in node_watches else "<= 1 s (polled)",
        "bridge port states and flags, bridge options": "the response time (linuxfp stats)",
        "VXLAN devices' remotes (a long packet's outer route is checked against its MAC's; the fast path "
        "encapsulates to it)":
            "the response time (linuxfp stats; a packet the fast path encapsulates goes to the remote it knew, "
            "one the device encapsulates to the current remote)",
        "a device moved to another namespace with its programs": "none (each packet's device is checked "
                                                                  "against this namespace's cookie)",
        "accept_redirects, bridge-nf-call-* and other sysctls without events":
            "none (cgroup sysctl watch: the datapath passes from the write on until the controller has re-read "
            "them after the writer left the write; the 1 s poll behind it)" if sysctls_watched
        else "<= 1 s (polled)",
        "tcx programs of other tools on an ingress, or on a bridge frames are handed up to":
            "none (the pipeline reads the device's tcx programs per packet; the poll then leaves that path "
            "to the kernel)",
        "tcx programs of other tools on an egress (until seen, XDP redirects and redirect_peer skip them)":
            "<= 1 s (polled: no event)",
    }


def namespace_lease_ids(layout) -> frozenset[int]:
    """The ids of the lease maps pinned for the namespace of `layout`: this
    version's and other versions' (their maps-* directories, or the top of
    the pin directory before those). Every program of LinuxFP's in the
    namespace uses one; an id outlives no map, so none is another's. Empty
    (ownership then goes by name) when a pin is there but cannot be read: a
    set without the lease our own programs use would call them foreign."""
    import os

    from .namespace import MAPS_DIR_PREFIX

    try:
        names = os.listdir(layout.pin_dir)
    except FileNotFoundError:
        return frozenset()
    paths = [os.path.join(layout.pin_dir, name, LEASE_MAP) for name in names if name.startswith(MAPS_DIR_PREFIX)]
    paths.append(os.path.join(layout.pin_dir, LEASE_MAP))
    ids = set()
    for path in paths:
        if not os.path.lexists(path):
            continue
        try:
            pinned = dp.Map.from_pinned(path)
        except (dp.BpfError, OSError):
            return frozenset()
        try:
            ids.add(dp.map_info(pinned.fd)["id"])
        finally:
            pinned.close()
    return frozenset(ids)
