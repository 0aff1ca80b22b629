"""`linuxfp run`: keep this namespace's datapath equal to what its Linux
configuration calls for, one coalesced batch of netlink events at a time."""
from __future__ import annotations

import hashlib
import json
import logging
import signal
import sys
import time
from dataclasses import dataclass, replace

from linuxfp import state as kstate
from linuxfp.datapath import bpffs_root
from linuxfp.graph import Graph, Shape, build_graph, forget_stale, refreshed
from linuxfp.synth import CompileError, ToolMissing
from linuxfp.synth import build as build_shape

from . import lease as lease_mod
from . import runtime_files
from .companion import GENERATIONS_PROGRAM, RENEW_PROGRAM, Companion
from .installer import Installer
from .lease import Lease
from .lease import windows as lease_windows
from .namespace import NamespaceLayout, netns_cookie
from .reclaim import reclaim_stale
from .reconcile import InstalledPipeline, InstalledState, plan
from .responsetime import ResponseTimes
from .sdnotify import Notifier
from .watch import NftablesWatch, TableWatch

log = logging.getLogger("linuxfp.controller")

POLL_INTERVAL_S = 1.0   # for configuration that changes without a netlink event
# Nodes' periodic work (Node.upkeep), run while no change waits — giving
# iptables-legacy its counts reads every flow cache slot (tens of ms) — and
# never while a watched change is in flight; once overdue, it runs between
# batches too, so steady netlink churn cannot starve it.
UPKEEP_INTERVAL_S = 5.0
UPKEEP_OVERDUE_S = 30.0
# Graphs built without forget_stale (in the response time) before one is
# run anyway: what they made stale is bounded when the loop never idles.
UNTIDY_BUILDS_MAX = 256
# No extra wait for the rest of a burst: a command's notifications are queued
# together, and whatever arrives while we reconcile is drained as the next
# batch, so bursts coalesce by themselves. (epoll cannot wait less than 1 ms,
# which would dominate the response time.)
COALESCE_QUIET_NS = 0
# A batch stops draining after this long or this many messages: a change
# that arrives in the middle of a burst (a neighbour amid 10 000 BGP route
# replaces) then waits for one short batch, not for the whole burst.
BATCH_MAX_NS = 5_000_000
BATCH_MAX_MESSAGES = 500
# How long the loop waits for events when nothing is pending
IDLE_WAIT_S = 0.2
# A netfilter read nf_tables would not settle is tried again after the first
# of these, then after twice as long each time, up to the second
UNSETTLED_WAIT_S = (0.01, IDLE_WAIT_S)
UNSETTLED_LOG_S = 60.0


@dataclass(frozen=True)
class RunOptions:
    hook: str = "auto"
    keep: bool = False
    netlink_rcvbuf: int | None = None    # None: the state layer's default
    metrics: tuple[str, int] | None = None   # serve /metrics on (address, port)


def current_layout() -> NamespaceLayout:
    return NamespaceLayout(bpffs_root(), netns_cookie())


class Controller:
    def __init__(self, options: RunOptions, layout: NamespaceLayout | None = None) -> None:
        self.options = options
        self.layout = layout or current_layout()
        self.installer = Installer(self.layout, pin_links=options.keep)
        self.companion = Companion(self.installer.maps, self.layout.cookie)
        self.lease = Lease()
        # A map that cannot hold what the graph wants: no fast path from this
        # moment (reconcile() withholds the lease if it stays full).
        self.installer.maps.on_full = lambda reason: self.lease.revoke()
        self.watch = TableWatch(self.installer.maps)
        self.sets_watched = False   # the filter node's watch is attached (start)
        self._sets_armed = False    # ... and counts netfilter netlink messages
        self._lease_known = None    # (the installer's lease map, its id)
        self.nft_watch = NftablesWatch(self.lease)
        self._unsettled: str | None = None   # why the last netfilter read was not taken in
        self._unsettled_wait = 0.0           # before the next read, while reads stay unsettled
        self._unsettled_logged_at = 0.0           # when that was last logged
        self.installed = InstalledState()
        self.response = ResponseTimes()
        self._compiled: dict[Shape, object] = {}   # per process: a cache hit still costs hashing
        # What the last reconcile() brought the datapath in line with: a batch
        # that left the snapshot as it was (a plain route, a re-announcement)
        # then costs nothing but the node refreshes it asks for.
        self._reconciled: tuple = (None, None, None)   # snapshot, its graph, the installed state after
        # The interfaces the graph leaves on the kernel path (for stats and
        # the metrics), written to /run once events pause, like response times.
        self._skipped: tuple = ()
        self._skipped_saved: tuple | None = None
        self._hook_notes: dict[str, str] = {}
        self._hook_notes_saved: dict[str, str] | None = None
        self._logged_paths: dict[int, tuple] = {}
        self.metrics_server = None
        self._stop = False
        self._snapshot = None               # the last one reconciled: the final upkeep's
        self._untidy = 0                    # graphs built since forget_stale last ran (_tidy)
        self._upkeep_memory: dict = {}      # per node (Node.upkeep), saved in the run dir
        self._upkeep_said: dict[str, str] = {}
        self._last_upkeep = 0.0
        # per node, what it published for `linuxfp stats` (Node.publish),
        # as last written to the run dir
        self.published: dict[str, dict] = {}
        self._unpublished = None     # the snapshot reconciled but not yet published

    # -- one reconcile step ------------------------------------------------

    def _compile(self, graph: Graph) -> tuple[dict, dict[Shape, str]]:
        """Objects for the graph's shapes, and why the others could not be
        built. Both are remembered for the process: a failure is not retried
        on every netlink event."""
        compiled, failed = {}, {}
        for shape in graph.shapes():
            if shape not in self._compiled:
                try:
                    self._compiled[shape] = build_shape(shape)
                except (CompileError, ToolMissing) as e:
                    log.error("cannot compile %s: %s", shape, e)
                    self._compiled[shape] = e
            outcome = self._compiled[shape]
            if isinstance(outcome, Exception):
                failed[shape] = f"compile: {outcome}"
            else:
                compiled[shape] = outcome
        return compiled, failed

    def _arm_set_watch(self, armed: bool) -> bool:
        """Arm or disarm the filter node's watch of netfilter netlink
        messages (lease.h); whether it now counts them."""
        sent_map = self.installer.maps.get(lease_mod.SENT_MAP) if self.sets_watched else None
        if sent_map is None:
            # no watch to arm: ipsets are polled (the loop's fresh reads)
            self.sets_watched = self._sets_armed = False
            return False
        if armed != self._sets_armed:
            lease_mod.arm_sent(sent_map, armed)
            self._sets_armed = armed
        return armed

    def _follow_sets(self, snapshot):
        """Called once a re-read of netfilter is applied, before the datapath
        may act on it: when rules have just begun to match ipsets, arm the
        watch of their changes, then — the datapath passing meanwhile — read
        the sets again, so none changed unseen between the first read and
        the arming; when no rule matches one any more, disarm it."""
        wanted = bool(snapshot.netfilter.ipsets)
        if wanted == self._sets_armed:
            return snapshot
        if not wanted or not self._arm_set_watch(True):
            self._arm_set_watch(False)
            return snapshot
        self.lease.mark_unsure()
        seq = self.lease.unsure_seq
        fresh = kstate.refresh_polled(snapshot, sets=True)
        if fresh != snapshot:
            snapshot = fresh
            self.reconcile(snapshot)
        self.lease.settle_unsure(seq)
        return snapshot

    def _upkeep(self, snapshot) -> None:
        """Every node's periodic work (Node.upkeep); what they remember is
        saved with the run files, so a --keep restart goes on from it."""
        from linuxfp.graph.nodes import registered

        self._last_upkeep = time.monotonic()
        if snapshot is None:
            return
        changed = False
        for node in registered():
            memory = self._upkeep_memory.setdefault(node.name, {})
            before = _json(memory)
            try:
                node.upkeep(self.installer.maps.get, snapshot, memory)
            except Exception as exc:      # counts, never the datapath: say it once, go on
                said = f"{type(exc).__name__}: {exc}"
                if self._upkeep_said.get(node.name) != said:
                    log.warning("%s: periodic work failed: %s", node.name, said)
                self._upkeep_said[node.name] = said
                continue
            self._upkeep_said.pop(node.name, None)
            changed |= _json(memory) != before
        if changed:
            try:
                runtime_files.write_atomic(self.layout.upkeep_file, _json(self._upkeep_memory))
            except OSError as exc:       # a --keep restart may then give some counts again
                log.warning("cannot save what the nodes' periodic work remembers: %s", exc)

    def reconcile(self, snapshot, messages=()) -> bool:
        """Bring the datapath in line with `snapshot` (`messages`: the batch
        that led to it); True if anything changed."""
        self._snapshot = snapshot
        done_snapshot, done_graph, done_installed = self._reconciled
        if snapshot is done_snapshot:
            graph = done_graph
        else:
            self._untidy += 1       # (before: a build that raises has remembered some already)
            graph = build_graph(snapshot, self.options.hook, tidy=False)
            if self._untidy >= UNTIDY_BUILDS_MAX:
                self._tidy()        # a burst that never lets the loop idle keeps no more
        self._skipped = graph.skipped
        self._hook_notes = {str(p.ifindex): p.hook_note for p in graph.pipelines if p.hook_note}
        if graph is not done_graph:
            self._log_paths(graph)
        again = refreshed(graph, messages)      # (once: the shortcut and the plan both need it)
        if graph is done_graph and self.installed is done_installed and not self.installer.maps.full and not again:
            return False
        worked = self._reconcile(snapshot, graph, again)
        self._reconciled = (snapshot, graph, self.installed)
        # written once the lease lets the datapath act on the change
        # (publish_pending): names for the counts are not part of the response
        self._unpublished = snapshot
        return worked

    def _tidy(self) -> None:
        """What the last snapshot made stale, forgotten (build_graph's tidy
        step, taken out of the response time): once the loop is idle and
        current (its wait timed out, nothing in flight, behind or unsure),
        and every UNTIDY_BUILDS_MAX builds of a burst that never idles.
        Stale answers are never served meanwhile (each is checked on use);
        they only keep old fields alive."""
        if self._untidy and self._snapshot is not None:
            forget_stale(self._snapshot)
            log.debug("remembered answers tidied after %d builds", self._untidy)
            self._untidy = 0

    def publish_pending(self) -> None:
        """Publish what the last reconcile left to publish, if anything."""
        snapshot, self._unpublished = self._unpublished, None
        if snapshot is not None:
            self._publish(snapshot)

    def _publish(self, snapshot) -> None:
        """Each node's Node.publish, written to the run dir when one changed
        (a node returns the same object while nothing did)."""
        from linuxfp.graph.nodes import registered

        fresh = {}
        for node in registered():
            try:
                data = node.publish(snapshot)
            except Exception as exc:      # the counts lose their names, never the datapath
                log.warning("%s: cannot publish what its counts mean: %s", node.name, exc)
                continue
            if data is not None:
                fresh[node.name] = data
        if fresh.keys() == self.published.keys() and all(fresh[k] is self.published[k] for k in fresh):
            return
        try:
            # compact: a large ruleset's is megabytes indented, and this is in the response time
            runtime_files.write_atomic(self.layout.published_file, json.dumps(fresh, separators=(",", ":")))
        except (OSError, TypeError, ValueError) as exc:     # tried again with the next change
            log.warning("cannot write %s: %s", self.layout.published_file, exc)
            return
        self.published = fresh

    def _reconcile(self, snapshot, graph: Graph, again: dict[str, frozenset[bytes]]) -> bool:
        """Plan and apply `graph` (`again`: per table, the keys to rewrite
        even if unchanged: refreshed())."""
        compiled, failed = self._compile(graph)
        digests = {shape: obj.digest for shape, obj in compiled.items()}
        for shape, message in failed.items():
            # An interface whose program cannot be built stays on the kernel
            # path, recorded as such (and so not planned again).
            digests[shape] = "error:" + hashlib.sha1(message.encode()).hexdigest()
            for p in graph.pipelines:
                if p.shape == shape and (self.installed.pipeline(p.ifindex) is None
                                         or self.installed.pipeline(p.ifindex).digest != digests[shape]):
                    self._drop_running(p.ifindex)
                    self.installed = self.installed.with_pipeline(
                        InstalledPipeline(p.ifindex, p.ifname, p.hook, str(p.shape), digests[shape], error=message))
        todo = plan(graph, digests, self.installed, again)
        named = _current_names(self.installed, graph)
        renamed = named is not self.installed    # status and stats say what it is called now
        self.installed = named
        if todo.empty:
            if renamed:
                runtime_files.save_installed(self.layout, self.installed)
            return False
        self.installed = self.installer.apply(todo, self.installed, graph, compiled)
        self.lease.withhold("; ".join(self.installer.maps.full.values()) or None)
        self._claim_own_programs(only_if_new=True)   # a lease first pinned by an install (no companion)
        if todo.touches_programs or failed or renamed:   # the file records pipelines; map contents live in the maps
            self._save_hook_notes()
            runtime_files.save_installed(self.layout, self.installed)
        return True

    def _claim_own_programs(self, only_if_new: bool = False) -> None:
        """A tcx program is ours when it uses one of the namespace's lease
        maps (not when it is merely named like ours): tell the state layer
        their ids, which the tcx poll and the next dump ask. `only_if_new`:
        only when the lease our programs now use is not among them."""
        current = self.installer.maps.get(lease_mod.LEASE_MAP)
        current_id = self._lease_id(current) if current is not None else None
        if only_if_new and (current_id is None or current_id in kstate.tcx.own_lease_ids()):
            return
        ids = lease_mod.namespace_lease_ids(self.layout)
        kstate.tcx.own_lease_maps(ids | {current_id} if ids and current_id is not None else ids)

    def _lease_id(self, lease_map) -> int:
        """The id of the lease map the installer holds, asked of the kernel
        once per map object (not once per batch)."""
        known = self._lease_known
        if known is None or known[0] is not lease_map:
            from linuxfp.datapath import map_info

            known = self._lease_known = (lease_map, map_info(lease_map.fd)["id"])
        return known[1]

    def _log_paths(self, graph: Graph) -> None:
        """One log line per interface whose path changed: the fast path (hook,
        nodes, why TC) or the kernel path and why; and the ones gone."""
        paths = {p.ifindex: (p.ifname, "fast", p.hook, p.nodes, p.hook_note) for p in graph.pipelines}
        paths.update((s.ifindex, (s.ifname, "kernel", "", (), s.reason)) for s in graph.skipped)
        for ifindex, path in paths.items():
            if self._logged_paths.get(ifindex) == path:
                continue
            ifname, where, hook, nodes, why = path
            fields = {"event": "interface", "ifname": ifname, "ifindex": ifindex, "path": where}
            if where == "fast":
                log.info("%s: fast path at %s: %s%s", ifname, hook, " -> ".join(nodes),
                         f" (tc rather than xdp: {why})" if why else "",
                         extra={**fields, "hook": hook, "nodes": list(nodes), "reason": why or None})
            else:
                log.info("%s: kernel path — %s", ifname, why, extra={**fields, "reason": why})
        for ifindex in self._logged_paths.keys() - paths.keys():
            log.info("%s: gone", self._logged_paths[ifindex][0],
                     extra={"event": "interface", "ifname": self._logged_paths[ifindex][0], "ifindex": ifindex,
                            "path": "gone"})
        self._logged_paths = paths

    def _netfilter_applied(self, snapshot, seq: int | None):
        """After a read of netfilter (the nf_tables generation `seq`
        sampled right before it) is reconciled: rules that begin to match
        sets arm the set watch before the datapath acts on what they match,
        then the generation is taken in (whether the read settled is judged
        by the last read: _follow_sets' where it armed, newer and applied).
        Returns the snapshot, which the sets' re-read may have moved on."""
        snapshot = self._follow_sets(snapshot)
        self._nft_taken_in(seq)
        return snapshot

    def _nft_taken_in(self, seq: int | None) -> None:
        """Netfilter was read (after `seq` was sampled) and applied: the lease
        holds it from generation `seq` on — unless nf_tables would not settle
        that read (refused the barrier, or commits kept coming): a read in the
        middle of a commit holds its rules but not what the commit applies
        after moving the generation, so the datapath keeps passing while the
        generation is past the one last taken in, and the loop reads again."""
        unsettled = kstate.unsettled_reason()
        now = time.monotonic()
        if unsettled and (not self._unsettled or now - self._unsettled_logged_at >= UNSETTLED_LOG_S):
            log.warning("netfilter read not taken in (the datapath passes meanwhile): %s", unsettled)
            self._unsettled_logged_at = now
        elif not unsettled and self._unsettled:
            log.info("netfilter read settled again")
        self._unsettled = unsettled
        # (each read that fails to settle waits twice as long for the next, up
        # to the loop's longest wait: a barrier refused for good costs five
        # reads a second, not a hundred)
        self._unsettled_wait = min(max(2 * self._unsettled_wait, UNSETTLED_WAIT_S[0]), UNSETTLED_WAIT_S[1]) \
            if unsettled else 0.0
        if not unsettled:
            self.lease.nft_taken_in(seq)

    def _save_skipped(self) -> None:
        if self._skipped is not self._skipped_saved and self._skipped != self._skipped_saved:
            runtime_files.write_atomic(self.layout.kernel_path_file, _json([s.to_dict() for s in self._skipped]))
            self._skipped_saved = self._skipped

    def _save_hook_notes(self) -> None:
        """Why the attached interfaces have the hook they have, for status:
        written with the pipelines they describe."""
        if self._hook_notes != self._hook_notes_saved:
            runtime_files.write_atomic(self.layout.hooks_file, _json(self._hook_notes))
            self._hook_notes_saved = self._hook_notes

    def _drop_running(self, ifindex: int) -> None:
        """Detach a running program whose replacement cannot be built."""
        have = self.installed.pipeline(ifindex)
        if have is not None and have.active:
            self.installer.detach_pipeline(have)

    # -- lifecycle ---------------------------------------------------------

    def _request_stop(self, signum, _frame) -> None:
        log.info("signal %d: stopping", signum)
        self._stop = True

    def start(self) -> None:
        self._lock = runtime_files.ControllerLock(self.layout)   # raises AlreadyRunning
        # One namespace for the process's life: its netfilter reads keep their
        # sockets (closing one waits for nf_tables' last commit to be freed).
        kstate.keep_query_sockets()
        for gone in reclaim_stale(self.layout.bpffs):
            log.info("reclaimed the pins of %s (%d link(s), none serving; no controller)", gone.namespace, gone.links)
        saved = runtime_files.load_installed(self.layout) or InstalledState()
        self.installed = self.installer.adopt(saved)
        if self.installed.pipelines:
            log.info("adopted %d pipeline(s) left by a previous controller", len(self.installed.pipelines))
        if self.companion.load():
            self.lease.renew_program = self.companion.program(RENEW_PROGRAM)
            self.lease.generations_program = self.companion.program(GENERATIONS_PROGRAM)
            self.companion.pin(GENERATIONS_PROGRAM, self.layout.generations_pin)
        else:
            log.error("cannot load the controller's own programs (%s): nothing can renew the lease, "
                      "so the datapath leaves every packet to the kernel", self.companion.error)
        self._claim_own_programs()      # before the first dump reads tcx attachments
        self.watch.start(self.companion)
        # Before the first dump (run): no change falls between the two.
        node_watches = self.companion.load_watches()
        # ipsets are read again on the filter watch's count, polled without it
        self.sets_watched = "filter" in node_watches
        self.nft_watch.start()
        runtime_files.write_atomic(self.layout.windows_file,
                                   _json(lease_windows(self.watch.attached and self.watch.covers_host,
                                                       self.options.keep, self.nft_watch.attached, node_watches,
                                                       self.watch.sysctls_attached and self.watch.covers_host,
                                                       nft_guarded=self.lease.sample_nft() is not None)))

    def stop(self) -> None:
        if self.metrics_server is not None:
            # First: no scrape reads a datapath being taken apart.
            self.metrics_server.close()
            self.metrics_server = None
        try:
            # First: from here on nothing watches or renews, so nothing may
            # keep the fast path on (a kept datapath waits for the next run).
            self.nft_watch.close()     # so no announcement re-arms the lease revoked below
            self.lease.revoke()
            self.watch.close()
            self.companion.close()
            # What the fast path counted since the last upkeep, before its maps go.
            self._upkeep(self._snapshot)
            if self.options.keep:
                self.installer.forget_resting()
                runtime_files.save_installed(self.layout, self.installed)
                log.info("datapath kept in place (--keep); the next `linuxfp run` adopts it")
                return
            self.installer.remove_all(self.installed)
            self.installed = InstalledState()
            runtime_files.remove_run_dir(self.layout)
            log.info("datapath removed; the kernel path carries on")
        finally:
            self._lock.release()

    def run(self, ready_out=sys.stdout) -> int:
        # SIGHUP too: a closed terminal must not leave an unattended datapath.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._request_stop)
        notifier = Notifier()      # systemd (Type=notify), when it started us
        self.start()
        # (a node finds out whether it still applies: e.g. the counts map it names)
        self._upkeep_memory = runtime_files.load_json(self.layout.upkeep_file) or {}
        try:
            if self.options.metrics is not None:
                from .metrics_server import MetricsServer

                # Before the first dump: a port in use fails the start, not later.
                self.metrics_server = MetricsServer.start(self, *self.options.metrics)
                log.info("metrics on %s", self.metrics_server.url)
            # Subscribe before the first dump so no change falls in between.
            stream_options = {"rcvbuf": self.options.netlink_rcvbuf} if self.options.netlink_rcvbuf else {}
            with kstate.EventStream(quiet_ns=COALESCE_QUIET_NS, max_batch_ns=BATCH_MAX_NS,
                                    max_messages=BATCH_MAX_MESSAGES, sample_nft=self.lease.sample_nft,
                                    **stream_options) as events:
                if self.watch.doorbell is not None:
                    # a watched change is looked at as it is counted, not at the next timeout
                    events.add_wakeup(self.watch.doorbell.fileno(), self.watch.doorbell.drain)
                # Changes settled before this read are in the dump below;
                # ipset changes are counted from here on (disarmed below if
                # no rule matches a set).
                self._arm_set_watch(True)
                watched = self.watch.settled()
                sampled = self.lease.sample()
                snapshot = kstate.read_snapshot()
                self.reconcile(snapshot)
                self.lease.addresses_taken_in(sampled and sampled.addr_genid)
                self._nft_taken_in(sampled and sampled.nft_seq)
                self._arm_set_watch(bool(snapshot.netfilter.ipsets))
                if watched is not None:
                    self.lease.acknowledge(watched)
                else:
                    self.lease.renew(force=True)
                self._save_skipped()
                self.publish_pending()
                _say(ready_out, "ready")
                notifier.ready("current")
                said = ""
                last_poll = time.monotonic()
                response_dirty = in_flight = addresses_behind = nft_behind = False
                while not self._stop:
                    # Before the events are drained: every address change this
                    # generation counts has its message queued by now; and
                    # before netfilter is read below: every commit the
                    # nf_tables generation counts is in what it reads.
                    sampled = self.lease.sample()
                    addresses, nft_seq = (sampled.addr_genid, sampled.nft_seq) if sampled else (None, None)
                    # Response times reach /run only once events pause, so the
                    # file write never delays the next change.
                    # (a change in flight is looked at again soon: a sysctl write lasts
                    # microseconds, a table replace milliseconds and rings when done;
                    # addresses moved on after their messages were read: at once)
                    # (a read nf_tables would not settle is tried again soon, not at once)
                    wait = 0.002 if "sysctl" in self.watch.in_flight else \
                        0.01 if in_flight else 0.05 if response_dirty else IDLE_WAIT_S
                    batch = events.read_batch(timeout=0 if addresses_behind or nft_behind and not self._unsettled
                                              else min(self._unsettled_wait, wait) if nft_behind else wait)
                    if batch is None:
                        if response_dirty:
                            runtime_files.write_atomic(self.layout.response_file, _json(self.response.summary()))
                            response_dirty = False
                        self._save_skipped()
                        self._save_hook_notes()   # a reason may change with no program touched
                    if batch is not None:
                        said = _say_state("busy", said, ready_out, notifier)
                        if batch.resync:
                            # Events were lost: until the re-read below is
                            # applied, the datapath must not act on what it has.
                            self.lease.revoke()
                            self.installer.forget_resting()   # (which devices went is not known)
                            log.warning("netlink overrun: full resync")
                        # a batch that lost events or cannot be applied exactly is
                        # a full re-read, never silent drift
                        snapshot = kstate.advance(snapshot, batch)
                        if "link" in batch.kinds or batch.resync:
                            # a link deleted and re-created with the same ifindex
                            # within one batch took our program with it
                            self.installer.forget_removed(m.index for m in batch.messages
                                                          if isinstance(m, kstate.LinkRemoved))
                            # (only a device announced gone or anew can have
                            # lost our link with it; after a resync, whose
                            # messages may not name them, every one is checked)
                            self.installed = self.installer.forget_defunct(
                                self.installed, None if batch.resync else batch.link_indexes())
                        worked = self.reconcile(snapshot, batch.messages)
                        if batch.resync or "netfilter" in batch.kinds:
                            # (read with the batch, after its own sample — or,
                            # resynced, after the loop's)
                            # (test_an_nftables_change_is_read_once counts this line)
                            log.debug("netfilter read with its batch")
                            snapshot = self._netfilter_applied(
                                snapshot, batch.nft_seq if batch.nft_seq is not None else nft_seq)
                        elapsed_ms = (time.monotonic_ns() - batch.first_arrival) / 1e6
                        self.response.record(frozenset(batch.kinds), elapsed_ms, worked, resync=batch.resync)
                        # One line per applied batch: what `ip monitor` users expect,
                        # and how launchers know a change has been absorbed.
                        _say(ready_out, f"applied {','.join(sorted(batch.kinds))} {elapsed_ms:.3f} ms "
                                        f"{'datapath updated' if worked else 'datapath unchanged'}")
                        response_dirty = True
                    if batch is None or batch.drained:
                        self.lease.addresses_taken_in(addresses)
                    addresses_behind = self.lease.addresses_behind()
                    # A watched table changed (the datapath has been passing
                    # since the change began): re-read once no change is in flight.
                    watched = self.watch.settled()
                    in_flight = watched is None
                    changed = not in_flight and watched != self.lease.watch_acked
                    if changed or time.monotonic() - last_poll >= POLL_INTERVAL_S:
                        last_poll = time.monotonic()
                        # (sampled right before this read: the loop's sample may
                        # be older than what a batch above took in)
                        nft_polled = self.lease.sample_nft()
                        polled = kstate.refresh_polled(snapshot, sets=changed or not self.sets_watched)
                        if polled != snapshot:
                            snapshot = polled
                            self.reconcile(snapshot)
                        snapshot = self._netfilter_applied(snapshot, nft_polled)
                        if changed:
                            self.lease.acknowledge(watched)
                    # nf_tables announced a commit, or its generation moved past
                    # the one netfilter was last read under (the datapath has
                    # been passing since): the re-read below sees every commit
                    # counted in seq, and every one the generation counts.
                    nft_now = self.lease.sample_nft()
                    # (a commit the batch above read for its own announcement
                    # is read once: the read it took in settles the mark)
                    self.lease.settle_covered()
                    if self.lease.unsure or self.lease.nft_behind(nft_now):
                        log.debug("netfilter read again: %s", "a change announced" if self.lease.unsure
                                  else "the nf_tables generation moved")
                        seq = self.lease.unsure_seq
                        fresh = kstate.refresh_netfilter(snapshot)
                        if fresh is not snapshot:
                            snapshot = fresh
                            self.reconcile(snapshot)
                        snapshot = self._netfilter_applied(snapshot, nft_now)
                        self.lease.settle_unsure(seq)
                    since_upkeep = time.monotonic() - self._last_upkeep
                    if (since_upkeep >= UPKEEP_OVERDUE_S or (batch is None and since_upkeep >= UPKEEP_INTERVAL_S)) \
                            and not (in_flight or self.lease.unsure or watched != self.lease.watch_acked):
                        # Everything known is applied here, as at the renewal
                        # below: renewed first, so a long periodic pass (a
                        # large ruleset's counts) does not let the term lapse.
                        if not self._stop:
                            self.lease.renew(force=True)
                        self._upkeep(snapshot)
                    # Renewed only by the loop itself (here and above), once what
                    # arrived has been applied: a stuck loop or a stopped process
                    # lets it lapse.
                    if not self._stop:
                        self.lease.renew(force=batch is not None)
                        self.publish_pending()
                        # For launchers: "current" once everything known is applied
                        # and the datapath acts on it, "busy" until then.
                        # (no generations read at all: nothing vouches for the datapath)
                        sampled = self.lease.sample()
                        nft_behind = sampled is not None and self.lease.nft_behind(sampled.nft_seq)
                        current = not self.lease.unsure and not in_flight and watched == self.lease.watch_acked \
                            and not addresses_behind and not nft_behind \
                            and (sampled is not None or self.lease.generations_program is None)
                        said = _say_state("current" if current else "busy", said, ready_out, notifier)
                        if batch is None and current:
                            self._tidy()      # (idle: nothing in flight, behind or unsure)
        finally:
            notifier.stopping()
            notifier.close()
            self.stop()
        return 0


def _current_names(installed: InstalledState, graph: Graph) -> InstalledState:
    """`installed` with each pipeline under its interface's current name (a
    rename changes no program, so no plan would touch it)."""
    names = {p.ifindex: p.ifname for p in graph.pipelines}
    stale = [p for p in installed.pipelines if names.get(p.ifindex, p.ifname) != p.ifname]
    for p in stale:
        installed = installed.with_pipeline(replace(p, ifname=names[p.ifindex]))
    return installed


def _say_state(state: str, said: str, out, notifier: Notifier) -> str:
    """Print `state` ("current" or "busy") when it changed, and tell systemd."""
    if state != said:
        _say(out, state)
        notifier.status(state)
    return state


def _say(out, line: str) -> None:
    """`line` to the launchers' stream as one write: print() writes the
    line and its end apart, two system calls where the stream is unbuffered
    (PYTHONUNBUFFERED) — and "busy" is said inside the response time."""
    if out is None:         # (started with no stdout: print() said nothing either)
        return
    out.write(line + "\n")
    out.flush()


def _json(data) -> str:
    return json.dumps(data, indent=1)
