"""Coalesced stream of kernel configuration changes for the current netns.

Usage (the order matters: subscribe first, then read, so no change is lost):

    with EventStream() as stream:
        snapshot = read_snapshot()
        while True:
            batch = stream.read_batch(timeout=1.0)
            if batch is None:
                snapshot = refresh_polled(snapshot)   # changes without events
                continue
            if batch.resync:
                snapshot = read_snapshot()
            else:
                snapshot = apply_messages(snapshot, batch.messages)

Replaying events that are older than a snapshot is harmless: every message
carries the full new value (or a deletion) of one object, so applying an
ordered tail of them to a newer state converges to the newest state.

The kernel changes some state without any notification. The stream notices
the events that imply such changes and appends freshly read state to the
batch, so `apply_messages` stays pure and the snapshot never drifts:

* A link going admin down, being deleted, or an IPv4 address being
  deleted: IPv4 flushes dependent routes silently -> `RoutesMayBeFlushed`;
  `advance()` re-reads the routes (one dump) only when the snapshot keeps a
  route that could be among them. The nexthop flags it flips meanwhile
  (dead/linkdown, also on carrier changes and coming up) are not kept.
* A link appearing, vanishing or being renamed: rule iif/oif "detached"
  flags change silently -> `RulesReplaced`; the new device is re-read (a
  veth's first end learns its peer ifindex silently) with its sysctls and
  XDP features -> `LinkUpdate`, `SysctlsPatched` (that device's sysctls
  only), `XdpFeaturesUpdate`.
* A qdisc added or removed: the root qdisc name and the presence of an
  ingress/clsact qdisc -> `LinkUpdate`, `TcIngressUpdate`.
* A nexthop object changed: routes using it are not re-announced
  -> `RoutesReplaced`.
* An IPv6 address given a finite lifetime: its prefix route is set to
  expire in place, unannounced -> `Routes6MayExpire`; `advance()` reads the
  IPv6 routes again (`Routes6Replaced`).
* RTM_NEWNETCONF (forwarding / rp_filter changes) -> `SysctlsPatched` for
  the device it names, `SysctlsReplaced` (every device) for all/default.
  A device's RTM_DELNETCONF -> `NetconfRemoved`, applied as it is; read
  again (`SysctlsPatched`) only for a device renamed or still up.
* Any nf_tables message -> `NetfilterReplaced`.
* Any xfrm policy message (XFRMNLGRP_POLICY: policies and their defaults)
  -> `XfrmReplaced`.

Never announced at all, hence `refresh_polled()`: accept_local,
send_redirects and route_localnet sysctls, legacy iptables rules, and XDP
programs attached or detached through a BPF link (no RTM_NEWLINK then).
tcx programs of other tools (BPF-link TC attach, no qdisc, no event) are
read for each new device (`TcxUpdate`) and polled. Not tracked at all:
neighbour REACHABLE->DELAY->PROBE transitions (the state field is the last
announced one; the link-layer address is always current).
"""

from __future__ import annotations

import errno
import select
import time
from dataclasses import dataclass
from typing import Callable, Self

from . import decode
from . import netlink as nl
from .changes import (
    AddressRemoved,
    BridgePortChanged,
    LinkRemoved,
    LinkUpdate,
    Message,
    NetconfChanged,
    NetconfRemoved,
    NetfilterReplaced,
    NexthopChanged,
    NftablesChanged,
    PeerLinkRemoved,
    PeerLinkUpdate,
    QdiscChanged,
    ResyncRequired,
    Routes6MayExpire,
    Routes6Replaced,
    RoutesMayBeFlushed,
    RoutesReplaced,
    RulesReplaced,
    SysctlsPatched,
    SysctlsReplaced,
    TcIngressUpdate,
    TcxUpdate,
    XdpFeaturesUpdate,
    XfrmChanged,
    XfrmReplaced,
    apply_messages,
    routes_may_be_flushed,
)
from .genl import NETDEV_MGMT_GROUP, NetdevFamily
from .model import AF_INET, AF_INET6, IFF_LOWER_UP, IFF_UP, DeviceConf, Snapshot, has_far_end
from .netfilter import generation_announced, read_netfilter
from .read import (
    dump_device_confs,
    dump_links,
    get_device_confs,
    get_links,
    get_links_and_confs,
    dump_routes,
    dump_rules,
    dump_tc_ingress,
    follow_br_netfilter,
    netns_inode,
    read_peers,
    read_routes,
    read_routes6,
    read_snapshot,
)
from .sysctl import read_sysctls
from .tcx import others_attached
from .xfrm import NETLINK_XFRM, read_xfrm

XFRMNLGRP_POLICY = 4     # enum xfrm_nlgroups: policy and default-policy changes

# rtnetlink multicast groups (enum rtnetlink_groups)
RTNLGRP_LINK = 1
RTNLGRP_NEIGH = 3
RTNLGRP_IPV4_IFADDR = 5
RTNLGRP_IPV4_ROUTE = 7
RTNLGRP_IPV4_RULE = 8
RTNLGRP_IPV6_IFADDR = 9
RTNLGRP_TC = 4
RTNLGRP_IPV6_ROUTE = 11
RTNLGRP_IPV6_RULE = 19
RTNLGRP_IPV4_NETCONF = 24
RTNLGRP_IPV6_NETCONF = 25
RTNLGRP_NEXTHOP = 32
NFNLGRP_NFTABLES = 7

_RTNL_GROUPS = (RTNLGRP_LINK, RTNLGRP_NEIGH, RTNLGRP_TC, RTNLGRP_IPV4_IFADDR,
                RTNLGRP_IPV6_IFADDR, RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE, RTNLGRP_IPV4_RULE, RTNLGRP_IPV6_RULE, RTNLGRP_IPV4_NETCONF,
                RTNLGRP_IPV6_NETCONF, RTNLGRP_NEXTHOP)
_LINK_STATE_FLAGS = IFF_UP | IFF_LOWER_UP


@dataclass(frozen=True)
class EventBatch:
    """Changes read in one burst, ready for `apply_messages`."""

    messages: tuple[Message, ...]
    kinds: frozenset[str]
    first_arrival: int  # time.monotonic_ns() when the first message was read
    last_arrival: int
    raw_count: int  # netlink messages received, including ignored ones
    # A socket overflowed (ENOBUFS) and events were lost: the caller must
    # call read_snapshot(); `messages` is then incomplete.
    resync: bool = False
    # Every socket epoll reported readable was read empty at the end (the
    # others had nothing queued when polled): nothing queued before the
    # batch began is left behind (False when max_messages cut it short).
    drained: bool = True
    # The nf_tables generation sampled (EventReader.sample_nft) right before
    # the batch read netfilter again, None where it did not: the read holds
    # every commit up to it, the batch's own included.
    nft_seq: int | None = None

    def link_indexes(self) -> frozenset[int]:
        """The devices the batch announces (anew, changed or gone)."""
        return frozenset(m.index if isinstance(m, LinkRemoved) else m.link.index
                         for m in self.messages if isinstance(m, (LinkRemoved, LinkUpdate)))


@dataclass
class _Source:
    name: str
    sock: nl.NetlinkSocket
    decoder: object
    # Events of other namespaces too: each message is decoded with the id of
    # the namespace it comes from (None for ours).
    tagged: bool = False


class EventStream:
    """Netlink subscriptions for links, IPv4 addresses/routes/rules/netconf,
    neighbours, nf_tables and netdev XDP features of the current netns."""

    def __init__(
        self,
        *,
        rcvbuf: int = nl.DEFAULT_RCVBUF,
        quiet_ns: int = 2_000_000,
        max_batch_ns: int = 50_000_000,
        max_messages: int = 10_000,
        sample_nft: Callable[[], int | None] | None = None,
    ):
        """`sample_nft`: the kernel's nf_tables generation now (the
        controller's lease reads it), asked right before a batch reads
        netfilter again (EventBatch.nft_seq)."""
        self.quiet_ns = quiet_ns
        self.max_batch_ns = max_batch_ns
        self.max_messages = max_messages
        self.netns_inode = netns_inode()
        self._sources: list[_Source] = []
        self._epoll = select.epoll()
        self._wakeups: dict[int, Callable[[], object]] = {}   # fd -> its drain
        self._closed = False
        self.sample_nft = sample_nft
        try:
            self._open(rcvbuf)
        except BaseException:
            self.close()
            raise

    # -- setup ---------------------------------------------------------------

    def _add_source(self, name: str, sock: nl.NetlinkSocket, decoder, tagged: bool = False) -> None:
        sock.sock.setblocking(False)
        self._sources.append(_Source(name, sock, decoder, tagged))
        self._epoll.register(sock.fileno(), select.EPOLLIN)

    def _open(self, rcvbuf: int) -> None:
        self._add_source("rtnl", nl.NetlinkSocket(nl.NETLINK_ROUTE, rcvbuf=rcvbuf, groups=_RTNL_GROUPS),
                         decode.decode_rtnl_event)
        try:
            nft = nl.NetlinkSocket(nl.NETLINK_NETFILTER, rcvbuf=rcvbuf, groups=(NFNLGRP_NFTABLES,))
        except OSError:
            nft = None  # kernel without nfnetlink: nothing to watch
        if nft is not None:
            self._add_source("nft", nft, decode.decode_nft_event)
        try:
            xfrm = nl.NetlinkSocket(NETLINK_XFRM, rcvbuf=rcvbuf, groups=(XFRMNLGRP_POLICY,))
        except OSError:
            xfrm = None  # kernel without xfrm: no policy can exist
        if xfrm is not None:
            self._add_source("xfrm", xfrm, decode.decode_xfrm_event)
        # The far ends of our veths live in other namespaces (containers):
        # their link events, on a socket of their own so that the busy main
        # one never carries other namespaces' traffic.
        peers = nl.NetlinkSocket(nl.NETLINK_ROUTE, rcvbuf=rcvbuf, groups=(RTNLGRP_LINK,))
        try:
            peers.listen_all_nsid()
        except OSError:
            peers.close()    # kernel < 4.6: veth peers never get facts (no delivery into them)
        else:
            self._add_source("peers", peers, decode.decode_peer_event, tagged=True)
        # Request sockets for the state the kernel changes silently.
        self._rtnl = nl.NetlinkSocket(nl.NETLINK_ROUTE)
        self._netdev = NetdevFamily()
        family = self._netdev.family
        if family is not None and NETDEV_MGMT_GROUP in family.groups:
            genl = nl.NetlinkSocket(nl.NETLINK_GENERIC, rcvbuf=rcvbuf,
                                    groups=(family.groups[NETDEV_MGMT_GROUP],))
            self._add_source("netdev", genl, decode.decode_genl_netdev_event)
        self._seed_links()

    def _seed_links(self) -> None:
        """Remember every link's name and up/carrier state, to recognise the
        events that imply silent kernel changes. Runs after subscribing."""
        links = dump_links(self._rtnl)
        self._links = {link.index: (link.name, link.flags & _LINK_STATE_FLAGS) for link in links}
        # (device, family) renamed, its RTM_NEWNETCONF still to come
        self._renamed: set[tuple[int, int]] = set()
        # Where each veth's far end is: it changes silently when that end
        # moves to another namespace or comes into ours.
        self._veth_ends = {link.index: (link.peer, link.peer_netnsid) for link in links if link.peer}

    # -- public API ------------------------------------------------------------

    def fileno(self) -> int:
        """One descriptor (epoll) that is readable when any socket is."""
        return self._epoll.fileno()

    def filenos(self) -> tuple[int, ...]:
        return tuple(s.sock.fileno() for s in self._sources)

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(s.name for s in self._sources)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for source in self._sources:
            source.sock.close()
        for attr in ("_rtnl", "_netdev"):
            obj = getattr(self, attr, None)
            if obj is not None:
                obj.close()
        self._epoll.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_wakeup(self, fd: int, drain: Callable[[], object]) -> None:
        """Also end read_batch's wait when `fd` turns readable (a watch that
        has something for the caller to look at), calling `drain` so it
        does not stay so."""
        self._wakeups[fd] = drain
        self._epoll.register(fd, select.EPOLLIN)

    def read_batch(self, timeout: float | None = None) -> EventBatch | None:
        """Wait up to `timeout` seconds (None: forever) for a change, then keep
        draining until the sockets stay quiet for `quiet_ns` or the batch hits
        `max_batch_ns` / `max_messages`. None when nothing arrived — also
        when only a wakeup (add_wakeup) ended the wait."""
        ready = self._epoll.poll(-1 if timeout is None else timeout)
        if not ready:
            return None
        woken = [fd for fd, _ in ready if fd in self._wakeups]
        for fd in woken:
            self._wakeups[fd]()
        if len(woken) == len(ready):
            return None
        first = time.monotonic_ns()
        deadline = first + self.max_batch_ns
        raw: list[tuple[_Source, nl.RawMessage, int | None]] = []
        overrun = False
        last = first
        while True:
            got, lost = self._drain(raw, {fd for fd, _ in ready})
            overrun |= lost
            now = time.monotonic_ns()
            if got:
                last = now
            if len(raw) >= self.max_messages or now >= deadline:
                break
            wait_ns = min(last + self.quiet_ns, deadline) - now
            if wait_ns <= 0:
                break
            ready = self._epoll.poll(wait_ns / 1e9)
            if not ready:
                break
            for fd in (fd for fd, _ in ready if fd in self._wakeups):
                self._wakeups[fd]()     # the caller looks once the batch is in
        return self._build_batch(raw, overrun, first, last)

    # -- internals ---------------------------------------------------------------

    def _drain(self, out: list[tuple[_Source, nl.RawMessage, int | None]], ready: set[int]) -> tuple[int, bool]:
        """Read the sockets epoll said are `ready` (fds) until each is empty,
        in subscription order. Only those: each read of an empty socket is a
        system call in the response time (~25 us each, right after a wake-up,
        measured), and a socket that turns readable meanwhile keeps epoll
        ready for the next batch."""
        got = 0
        lost = False
        for source in self._sources:
            if source.sock.fileno() not in ready:
                continue
            while len(out) < self.max_messages:
                try:
                    if source.tagged:
                        data, nsid = source.sock.receive_tagged()
                        if nsid is None:
                            continue     # our own namespace's: the main socket has it
                    else:
                        data, nsid = source.sock.receive(), None
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno == errno.ENOBUFS:
                        lost = True  # the kernel dropped messages for us
                        continue
                    raise
                for msg in nl.split_messages(data):
                    if msg.type == nl.NLMSG_OVERRUN:
                        lost = True
                        continue
                    out.append((source, msg, nsid))
                    got += 1
        return got, lost

    def _build_batch(self, raw: list[tuple[_Source, nl.RawMessage, int | None]], overrun: bool,
                     first: int, last: int) -> EventBatch:
        messages: list[Message] = []
        nft_seq = None
        for source, msg, nsid in raw:
            change = source.decoder(msg, nsid) if source.tagged else source.decoder(msg)  # type: ignore[operator]
            if change is not None:
                messages.append(change)
        if overrun:
            # Our view of link states is stale as well; the caller re-reads.
            self._seed_links()
        else:
            extra, nft_seq = self._silent_changes(messages)
            messages.extend(extra)
        return EventBatch(
            messages=tuple(messages),
            kinds=frozenset(m.kind for m in messages),
            first_arrival=first,
            last_arrival=last,
            raw_count=len(raw),
            resync=overrun,
            drained=len(raw) < self.max_messages,
            nft_seq=nft_seq,
        )

    def _silent_changes(self, messages: list[Message]) -> tuple[list[Message], int | None]:
        """Freshly read state for the kernel changes that come without
        events; and the nf_tables generation sampled before netfilter was
        read again (None: it was not)."""
        need_routes = need_rules = need_sysctls = need_netfilter = need_xfrm = False
        # interfaces whose sysctls to read again (need_sysctls: every one's)
        sysctl_links: set[int] = set()
        extra_flushes: list[Message] = []
        new_links: list[int] = []
        reread_links: set[int] = set()
        for msg in messages:
            if isinstance(msg, LinkUpdate):
                link = msg.link
                before = self._links.get(link.index)
                state = (link.name, link.flags & _LINK_STATE_FLAGS)
                if before is None:
                    new_links.append(link.index)
                    need_rules = True
                    sysctl_links.add(link.index)
                elif before[0] != link.name:
                    need_rules = True           # (sysctls go by ifindex: a name changes none)
                    # ... but its sysctl directories are registered again:
                    # RTM_DELNETCONF, then RTM_NEWNETCONF, per family,
                    # announced after this message (a family the device has
                    # no configuration of keeps its mark until the device
                    # goes: at most one read more, later)
                    self._renamed.update(((link.index, AF_INET), (link.index, AF_INET6)))
                if before is not None and before[1] & IFF_UP and not state[1] & IFF_UP:
                    # Going down flushes the routes through the link without
                    # a word. Coming up, or carrier changes, only flip nexthop
                    # flags the snapshot does not keep (RTNH_F_KERNEL_STATE).
                    extra_flushes.append(RoutesMayBeFlushed(link.index))
                self._links[link.index] = state
                if link.peer:
                    self._veth_ends[link.index] = (link.peer, link.peer_netnsid)
            elif isinstance(msg, LinkRemoved):
                self._veth_ends.pop(msg.index, None)
                # A veth end leaving our namespace is deleted here; its peer
                # now reaches into another namespace without a word.
                reread_links.update(index for index, end in self._veth_ends.items()
                                    if end == (msg.index, None))
                self._renamed.difference_update(((msg.index, AF_INET), (msg.index, AF_INET6)))
                if self._links.pop(msg.index, None) is not None:
                    need_rules = True    # (its sysctls go with it: apply_messages)
                    extra_flushes.append(RoutesMayBeFlushed(msg.index))
            elif isinstance(msg, PeerLinkRemoved):
                # our veth's far end left its namespace (for another one, or ours)
                reread_links.update(index for index, end in self._veth_ends.items()
                                    if end == (msg.index, msg.nsid))
            elif isinstance(msg, AddressRemoved):
                extra_flushes.append(RoutesMayBeFlushed(msg.address.index, msg.address.host_address))
            elif isinstance(msg, (QdiscChanged, BridgePortChanged)):
                reread_links.add(msg.ifindex)
            elif isinstance(msg, NexthopChanged):
                need_routes = True
            elif isinstance(msg, NetconfChanged):
                # all/default change every interface's effective values
                if msg.ifindex < 0:
                    need_sysctls = True
                else:
                    sysctl_links.add(msg.ifindex)
                    self._renamed.discard((msg.ifindex, msg.family))
            elif isinstance(msg, NetconfRemoved):
                # Applied as it stands (its family's sysctls go). An
                # unregistering device was closed first, its down state
                # announced before: asking about it would wait out the RTNL
                # the kernel holds (~17 ms) to hear ENODEV. A renamed one
                # keeps its configuration (its RTM_NEWNETCONF follows,
                # perhaps in another batch): read. One still up is under the
                # family's minimum MTU, where a read finds what the message
                # says; it is read anyway, a rare event, so that a cause not
                # known here of a device keeping its configuration is one
                # read, not a snapshot that lacks it.
                known = self._links.get(msg.ifindex)
                if (known is not None and known[1] & IFF_UP) or (msg.ifindex, msg.family) in self._renamed:
                    sysctl_links.add(msg.ifindex)
            elif isinstance(msg, NftablesChanged):
                need_netfilter = True
            elif isinstance(msg, XfrmChanged):
                need_xfrm = True
        # A veth's far end may have been announced before our end, moved to
        # another namespace, or be new: read it as our end says it is now.
        with_peers = [msg.link for msg in messages if isinstance(msg, LinkUpdate) and has_far_end(msg.link)]
        if not (need_routes or need_rules or need_sysctls or sysctl_links or need_netfilter
                or need_xfrm or new_links or reread_links or with_peers):
            return extra_flushes, None
        if netns_inode() != self.netns_inode and (need_sysctls or sysctl_links or need_netfilter or need_xfrm
                                                  or new_links or reread_links):   # (tcx: by ifindex here)
            raise RuntimeError("EventStream.read_batch must run in the network namespace "
                               "the stream was opened in (/proc/sys follows the thread)")
        for msg in messages:
            if isinstance(msg, NftablesChanged) and msg.generation is not None:
                generation_announced(msg.generation)     # (its commit is over: the read below is settled)
        extra: list[Message] = list(extra_flushes)
        nft_seq = None
        if need_routes:
            extra.append(RoutesReplaced(dump_routes(self._rtnl)))
        if need_rules:
            extra.append(RulesReplaced(dump_rules(self._rtnl)))
        wanted = set(new_links) | reread_links
        confs: dict[int, DeviceConf] = {}
        if wanted:
            # A veth's first end is announced before its peer exists, so its
            # IFLA_LINK is filled in later without a new RTM_NEWLINK; a root
            # qdisc change (IFLA_QDISC) is never re-announced either, nor a
            # bridge port's state in the AF_UNSPEC family.
            # A veth end arriving may be the far end of one of ours coming
            # home: those whose far end moved are re-announced too.
            # Read one by one, not by dumping every link (hundreds on a
            # container host, for each new pod's veth).
            read = get_links_and_confs(self._rtnl, sorted(wanted))
            reread = [link for link, _conf in read]
            confs.update((link.index, conf) for link, conf in read)
            homecoming = {link.peer for link in reread if link.index in new_links and link.kind == "veth"
                          and link.peer_netnsid is None and link.peer in self._veth_ends
                          and self._veth_ends[link.peer] != (link.index, None)} - wanted
            reread += get_links(self._rtnl, sorted(homecoming))
            for link in reread:
                if link.peer:
                    self._veth_ends[link.index] = (link.peer, link.peer_netnsid)
            extra.extend(LinkUpdate(link) for link in reread)
            with_peers.extend(link for link in reread if has_far_end(link))
            # A device enters a namespace without qdiscs (made bare, or moved
            # in: the move shuts its qdiscs down), so only one read again
            # needs the dump of every device's (no dump filters by device):
            # an ingress qdisc added to a new one is its own event.
            ingress = dump_tc_ingress(self._rtnl) if reread_links else frozenset()
            extra.extend(TcIngressUpdate(index, index in ingress) for index in sorted(wanted))
            extra.extend(TcxUpdate(index, *others_attached(index)) for index in sorted(wanted))
        for index in new_links:
            # The genl add notification may race with RTM_NEWLINK; ask directly.
            features = self._netdev.xdp_features(index)
            if features is not None:
                extra.append(XdpFeaturesUpdate(index, *features))
        if need_sysctls:
            extra.append(SysctlsReplaced(read_sysctls(dump_device_confs(self._rtnl, self._links))))
        elif sysctl_links:
            # (a new device's came with its link, read above)
            ours = sorted(index for index in sysctl_links if index in self._links)
            confs.update((conf.index, conf) for conf in get_device_confs(
                self._rtnl, (index for index in ours if index not in confs)))
            patched = read_sysctls((confs[index] for index in ours if index in confs), every_device=False)
            extra.append(SysctlsPatched(patched, removed=frozenset(sysctl_links)))   # (a device read again may be gone)
        if need_netfilter:
            # (sampled before the read: a commit moves the generation before
            # its rules take effect)
            nft_seq = self.sample_nft() if self.sample_nft is not None else None
            extra.append(NetfilterReplaced(read_netfilter()))
        if need_xfrm:
            extra.append(XfrmReplaced(read_xfrm()))
        extra.extend(PeerLinkUpdate(peer) for peer in read_peers(self._rtnl, with_peers))
        return extra, nft_seq


def advance(snapshot: Snapshot, batch: EventBatch) -> Snapshot:
    """The one call per batch: apply it, or re-read everything when the batch
    lost events (`resync`) or a message cannot be applied exactly; re-read
    the routes when the kernel may have flushed one the snapshot keeps, and
    the bridge-nf-call switches when netfilter was read again (a rule's
    physdev match may have loaded br_netfilter, which nothing announces)."""
    if batch.resync:
        return read_snapshot()
    try:
        applied = apply_messages(snapshot, batch.messages)
    except ResyncRequired:
        return read_snapshot()
    if any(isinstance(m, RoutesMayBeFlushed) and routes_may_be_flushed(applied, m) for m in batch.messages):
        # Read after every message of the batch: events that arrive meanwhile
        # are replayed by the next batch, which is harmless.
        applied = apply_messages(applied, [RoutesReplaced(read_routes())])
    if any(type(m) is Routes6MayExpire for m in batch.messages):
        applied = apply_messages(applied, [Routes6Replaced(*read_routes6())])
    if any(isinstance(m, NetfilterReplaced) for m in batch.messages):
        applied = follow_br_netfilter(applied)
    return applied
