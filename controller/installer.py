"""Carries out a reconcile Plan with the datapath binding: loads programs,
keeps the shared maps, attaches and atomically replaces, detaches.

All bpf syscalls of the controller happen here; everything it decides was
decided by linuxfp.graph and controller.reconcile."""
from __future__ import annotations

import errno
import json
import logging
import os
import socket
from dataclasses import replace

from linuxfp import datapath as dp
from linuxfp.graph import Graph, Pipeline
from linuxfp.graph import Shape
from linuxfp.synth import CompiledObject
from linuxfp.synth.debuginfo import describe_rejection

from . import runtime_files
from .namespace import NamespaceLayout
from .lease import LEASE_MAP, revoke_pinned
from .reconcile import InstalledPipeline, InstalledState, Plan
from .shared_maps import IF_COUNTERS_MAP, SharedMaps

# uapi/linux/bpf.h: a map programs can only read (libbpf's .rodata)
BPF_F_RDONLY_PROG = 1 << 7

log = logging.getLogger("linuxfp.installer")

# Fault injection, for tests only (tests/test_faults.py): a comma-separated
# list of IFNAME or IFNAME:NODE. Loading a program for such an interface (whose
# shape includes NODE) fails as a verifier rejection does (EACCES), so the
# handling of a failed load can be tested on a real datapath. Read once, when
# the controller starts; never set it outside tests.
FAULT_LOAD_ENV = "LINUXFP_FAULT_LOAD"

def origins_path(layout: NamespaceLayout) -> str:
    """Beside the installed state: per ifindex, the digest of the object
    installed there and where it came from (CompiledObject.origin) — for
    `status`, which shows it while the digest is still the installed one."""
    return layout.origins_file


def load_faults() -> tuple[tuple[str, str], ...]:
    faults = []
    for item in filter(None, (part.strip() for part in os.environ.get(FAULT_LOAD_ENV, "").split(","))):
        ifname, _, node = item.partition(":")
        faults.append((ifname, node))
    return tuple(faults)


class Installer:
    """Owns this namespace's datapath: links, pinned counters and shared maps."""

    def __init__(self, layout: NamespaceLayout, pin_links: bool = True) -> None:
        self.layout = layout
        # Unpinned, a link lives as long as this process's fd: a controller
        # that dies takes its programs with it (the kernel detaches them). Only
        # a datapath meant to outlive the controller (--keep) is pinned.
        self.pin_links = pin_links
        self.links: dict[int, object] = {}
        self.maps = SharedMaps(layout)
        # maps another version pinned with other layouts, which adopted
        # programs still read until they are replaced
        self._foreign_maps: list[str] = []
        self._desired = None      # the graph being applied: fills maps a load creates
        self._origins: dict[str, dict] = {}      # where this plan's objects came from, by ifindex
        self._recorded_origins: dict[str, str] | None = None    # the file's entries as text, once read
        # digest -> the program every interface of that shape shares (_program)
        self._programs: dict[str, dp.Program] = {}
        # (digest, ifindex, hook) -> the program an interface ran until its
        # shape last changed (_keep_warm): undoing that change (the first rule
        # added, then removed) attaches it again instead of loading anew
        self._warm: dict[tuple[str, int, str], dp.Program] = {}
        # interfaces taken off the fast path while their device stays: their
        # counters and warm program wait for them (until the device goes)
        self._resting: set[int] = set()
        self._current_ids: set[int] | None = None      # the namespace's map ids, once per apply
        self._faults = load_faults()

    def read_back(self) -> InstalledState:
        """Map contents as currently pinned (used when adopting a datapath)."""
        return InstalledState(tables=self.maps.read_back())

    # -- programs ----------------------------------------------------------

    def _program(self, pipeline: Pipeline, compiled: CompiledObject):
        """The program to serve `pipeline` with, and whether it is kept for the
        next interface of its shape (else the caller closes it once attached):
        for a shared shape (Shape.shared) a new interface costs an attach,
        not a load."""
        faulted = any(ifname == pipeline.ifname and (not node or node in pipeline.shape.nodes)
                      for ifname, node in self._faults)
        shared = pipeline.shape.shared
        if shared and compiled.digest in self._programs and not faulted:
            return self._programs[compiled.digest], True
        warm = self._warm.pop((compiled.digest, pipeline.ifindex, pipeline.hook), None)
        if warm is not None:
            try:
                current = not faulted and self._reads_current_maps(warm)
            except (dp.BpfError, OSError) as e:
                log.debug("if%d: its kept program cannot be checked: %s", pipeline.ifindex, e)
                current = False
            if current:
                if shared:
                    self._programs[compiled.digest] = warm
                return warm, shared
            warm.close()
        obj = dp.BpfObject.open(compiled.data, name=f"lfp_{pipeline.hook}" if shared else f"lfp_if{pipeline.ifindex}")
        try:
            if pipeline.shape.device_bound:
                obj.bind_to_device(pipeline.shape.entry, pipeline.ifindex)
            # the namespace it serves: a device moved elsewhere keeps its programs
            obj.set_rodata({"lfp_netns_cookie": self.layout.cookie})
            if not shared:
                # one program per device: its ingress and its counters are its own
                obj.set_rodata({"lfp_ingress_ifindex": pipeline.ifindex})
                with self.maps.counter_array(pipeline.ifindex) as array:
                    obj.reuse_map(IF_COUNTERS_MAP, array)
            fresh = self.maps.prepare(obj, self._desired)
            if faulted:         # as the verifier would refuse it
                raise dp.BpfError(f"load {pipeline.shape} on {pipeline.ifname} (fault injected by "
                                  f"{FAULT_LOAD_ENV})", errno.EACCES)
            obj.load()
            dp.makedirs(self.layout.maps_dir)
            self.maps.adopt(obj, fresh, self._desired)
            prog = obj.program(pipeline.shape.entry)
        finally:
            obj.close()     # the program keeps its own fd, the pins the maps
        if shared:
            self._programs[compiled.digest] = prog
        return prog, shared

    def _close_programs(self, keep: set[str] = frozenset()) -> None:
        """Let go of shared programs (links keep what they serve running)."""
        for digest in [d for d in self._programs if d not in keep]:
            self._programs.pop(digest).close()

    def _keep_warm(self, old: InstalledPipeline | None) -> None:
        """Keep the program `old` ran loaded (one per interface and hook): the
        verifier takes ~0.1 s per load, and a change is often undone."""
        if old is None or not old.active or not old.prog_id:
            return
        for key in [k for k in self._warm if k[1:] == (old.ifindex, old.hook)]:
            self._warm.pop(key).close()
        try:
            self._warm[(old.digest, old.ifindex, old.hook)] = dp.Program.from_id(old.prog_id)
        except dp.BpfError as e:
            log.debug("if%d: its program is gone already: %s", old.ifindex, e)

    def _forget_warm(self, ifindex: int | None = None) -> None:
        """Close the kept programs of `ifindex` (None: all of them)."""
        for key in [k for k in self._warm if ifindex is None or k[1] == ifindex]:
            self._warm.pop(key).close()

    def _reads_current_maps(self, prog) -> bool:
        """Whether every map `prog` reads is still one this namespace's
        programs share (pinned in its maps directory: the tables, the
        interfaces' counter arrays) or its own constants (libbpf's .rodata,
        read-only to programs). A program reading a map that was replaced
        since (a larger facts array, another build's layout, counters made
        anew) must not run again: that map no longer changes with the state."""
        if self._current_ids is None:       # (once per apply: pins made within one are new to every kept program)
            self._current_ids = set()
            names = os.listdir(self.layout.maps_dir) if os.path.isdir(self.layout.maps_dir) else []
            for name in names:
                try:
                    with dp.Map.from_pinned(os.path.join(self.layout.maps_dir, name)) as m:
                        self._current_ids.add(m.id)
                except (dp.BpfError, OSError):
                    continue
        for map_id in dp.prog_map_ids(prog.fd):
            if map_id in self._current_ids:
                continue
            try:
                with dp.Map.from_id(map_id) as m:
                    if not dp.map_info(m.fd)["map_flags"] & BPF_F_RDONLY_PROG:
                        return False
            except dp.BpfError:
                return False
        return True

    def _attach(self, pipeline: Pipeline, prog):
        if pipeline.hook == "xdp":
            # Device-bound programs attach natively only (see Shape.device_bound).
            link = dp.attach_xdp(prog.fd, pipeline.ifindex, mode="native")
        else:
            # tcx: a pinnable link (the cls_bpf fallback cannot be pinned or adopted)
            link = dp.attach_tc(prog.fd, pipeline.ifindex, direction="ingress", method="tcx")
        if self.pin_links:
            dp.makedirs(self.layout.iface_dir(pipeline.ifindex))
            link.pin(self.layout.link_pin(pipeline.ifindex, pipeline.hook))
        return link

    def _install(self, pipeline: Pipeline, compiled: CompiledObject, how: str,
                 old: InstalledPipeline | None) -> InstalledPipeline:
        warm = (compiled.digest, pipeline.ifindex, pipeline.hook) in self._warm
        try:
            return self._install_program(pipeline, compiled, how, old)
        except (dp.BpfError, OSError) as e:
            if not warm:
                raise
            # A kept program a device refuses (an XDP program is bound to the
            # device it was loaded for: another given its ifindex meanwhile
            # refuses it) is loaded afresh, once.
            log.info("%s on %s: its kept program refused (%s), loading it again", pipeline.shape, pipeline.ifname, e)
            self._forget_warm(pipeline.ifindex)
            shared = self._programs.pop(compiled.digest, None)
            if shared is not None:
                shared.close()      # (links keep what they serve running)
            return self._install_program(pipeline, compiled, how, old)

    def _install_program(self, pipeline: Pipeline, compiled: CompiledObject, how: str,
                         old: InstalledPipeline | None) -> InstalledPipeline:
        prog, kept = self._program(pipeline, compiled)
        try:
            if pipeline.shape.shared:
                self.maps.register_counters((pipeline.ifindex,), self._desired)   # (done by apply, usually)
            if how == "replace":
                link = self._link(pipeline.ifindex, pipeline.hook)
                self._keep_warm(old)
                link.update(prog.fd)
            else:
                link = self._attach(pipeline, prog)
                if how == "rehook" and old is not None:
                    self._detach_link(old.ifindex, old.hook)
                self.links[pipeline.ifindex] = link
            self._origins[str(pipeline.ifindex)] = {"digest": compiled.digest, "origin": compiled.origin}
            return InstalledPipeline(
                ifindex=pipeline.ifindex, ifname=pipeline.ifname, hook=pipeline.hook,
                shape=str(pipeline.shape), digest=compiled.digest, mode=getattr(link, "mode", ""),
                prog_id=prog.id, link_id=getattr(link, "id", 0))
        finally:
            if not kept:
                prog.close()    # the link holds the program

    def _record_origins(self, installed: set[int]) -> None:
        """Once per plan (a file rewritten per interface costs O(n²) for n),
        for the interfaces with a pipeline (`installed`). The file is read
        once: while a controller runs, it alone writes it (the namespace's
        ControllerLock)."""
        if self._recorded_origins is None:
            self._recorded_origins = {ifindex: _origin_text(ifindex, origin) for ifindex, origin in
                                      (runtime_files.load_json(origins_path(self.layout)) or {}).items()}
        gone = [ifindex for ifindex in self._recorded_origins if int(ifindex) not in installed]
        if not self._origins and not gone:
            return
        for ifindex in gone:
            del self._recorded_origins[ifindex]
        # (as json.dumps of the whole: each interface's text made once)
        self._recorded_origins.update((ifindex, _origin_text(ifindex, origin))
                                      for ifindex, origin in self._origins.items())
        self._origins = {}
        try:
            runtime_files.write_atomic(origins_path(self.layout),
                                       "{" + ", ".join(self._recorded_origins.values()) + "}")
        except OSError as e:     # (only `status` reads it: the plan carries on)
            log.warning("cannot write %s: %s", origins_path(self.layout), e)

    def _drop_origins(self) -> None:
        """No pipeline left: no origins, on disk or here."""
        self._recorded_origins = None
        self._origins = {}
        try:
            os.unlink(origins_path(self.layout))
        except FileNotFoundError:
            pass

    def _link(self, ifindex: int, hook: str):
        link = self.links.get(ifindex)
        if link is None:
            link = dp.Link.from_pinned(self.layout.link_pin(ifindex, hook))
            self.links[ifindex] = link
        return link

    def _detach_link(self, ifindex: int, hook: str) -> None:
        link = self.links.pop(ifindex, None)
        path = self.layout.link_pin(ifindex, hook)
        if link is None and os.path.exists(path):
            link = dp.Link.from_pinned(path)
        if link is not None:
            try:
                link.detach()
            except dp.BpfError as e:     # interface already gone: the kernel detached it
                log.debug("detach if%d: %s", ifindex, e)
        dp.unpin(path, missing_ok=True)

    # -- plan --------------------------------------------------------------

    def apply(self, plan: Plan, installed: InstalledState, desired: Graph,
              compiled: dict[Shape, CompiledObject]) -> InstalledState:
        """Apply `plan`; returns the new installed state. Per-interface failures
        are recorded in that state, never raised: the interface stays on the
        kernel path and the others carry on."""
        self._desired = desired
        self.maps.full.clear()      # recorded afresh by this plan's writes
        growing = not self.maps.fits(desired)
        if growing:
            # A new interface's ifindex is beyond the facts array: every program
            # moves to a larger one (each by an atomic update; until then the old
            # array keeps serving it).
            log.info("interface facts array too small: reloading every pipeline with a larger one")
            self.maps.drop_ifindex_arrays(desired)
        # Either way the running programs read maps nobody will write again.
        reloading = growing or bool(self._foreign_maps)
        if reloading:
            self._close_programs()      # they read the maps being left behind
            self._forget_warm()
            plan = _with_everything_reloaded(plan, installed, desired)
        # Before any program changes: summaries widened to cover old and new,
        # then the new entries (so a new program never reads a missing one).
        for write in plan.tables:
            self.maps.write(write.table, write.widen if write.table.summary else write.set)
        try:
            self.maps.register_counters((p.ifindex for p in plan.attach + plan.replace + plan.rehook
                                         if p.shape.shared), desired)
        except (dp.BpfError, OSError) as e:
            log.debug("counters registered one interface at a time: %s", e)   # and its error recorded there
        state = installed
        self._current_ids = None
        for how, pipelines in (("attach", plan.attach), ("replace", plan.replace), ("rehook", plan.rehook)):
            for p in pipelines:
                old = state.pipeline(p.ifindex)
                state = state.with_pipeline(self._install_or_record(p, how, old, compiled))
        self._current_ids = None
        self._resting.difference_update(p.ifindex for p in state.pipelines if p.active)
        if reloading:
            self._forget_warm()     # what every interface ran read the maps left behind
        present = {p.ifindex for p in desired.pipelines} | {s.ifindex for s in desired.skipped}
        for old in plan.detach:
            # (not while reloading: what it ran reads the maps left behind)
            self.detach_pipeline(old, device_stays=old.ifindex in present and not reloading)
            state = state.without_pipeline(old.ifindex)
        self._record_origins({p.ifindex for p in state.pipelines if p.active})
        for ifindex in self._resting - present:      # its device is gone now
            self._unpin_interface(ifindex)
        # After: what is gone, then summaries narrowed to exactly the new contents.
        for write in plan.tables:
            self.maps.erase(write.table, write.erase)
        for table in desired.tables:
            if table.name in self.maps.full:     # the erasures may have made room
                self.maps.write_missing(table)
        for write in plan.tables:
            if write.table.summary:
                self.maps.write(write.table, write.set)
        for path in self._foreign_maps:      # no program of ours reads them now
            lease_pin = os.path.join(path, LEASE_MAP) if os.path.isdir(path) else path
            if os.path.basename(lease_pin) == LEASE_MAP:
                revoke_pinned(lease_pin)   # in case one failed to be replaced and still reads it
            dp.remove_tree(path)
        self._foreign_maps = []
        self._close_programs(keep={p.digest for p in state.pipelines if p.active})
        # Maps not created yet are filled from the desired graph when they are;
        # a full one holds what it holds, and the next plan writes the rest again.
        tables = {t.name: t.entries for t in desired.tables}
        for name in self.maps.full:
            tables[name] = self.maps.contents(name)
        return replace(state, tables=tables)

    def _install_or_record(self, p: Pipeline, how: str, old: InstalledPipeline | None,
                           compiled: dict[Shape, CompiledObject]) -> InstalledPipeline:
        if how == "attach" and old is not None and old.error:
            old = None
        try:
            new = self._install(p, compiled[p.shape], how, old)
            log.info("%s %s on %s (prog %d, %s, %s)", how, p.shape, p.ifname, new.prog_id, new.mode,
                     compiled[p.shape].origin)
            return new
        except (dp.BpfError, OSError) as e:
            message = str(e)
            if isinstance(e, dp.VerifierError):
                message = describe_rejection(message, e.log, compiled[p.shape].data, p.shape.entry)
            log.error("cannot install %s on %s: %s", p.shape, p.ifname, message)
            if how in ("replace", "rehook") and old is not None and old.active:
                # The old program must not stay: it was built for what the
                # configuration was (a node has joined or left since, e.g. the
                # filter for a new iptables rule; or it sits at a hook the graph
                # no longer wants; or it reads arrays nobody writes any more),
                # so it would act where Linux now acts otherwise. Back to Linux.
                self.detach_pipeline(old)
                message = f"detached: {message}"
            elif how == "attach":
                # nothing of ours runs there: no counters (`stats` would list
                # them), whether the load or the attach failed
                self.maps.forget_counters(p.ifindex)
                self._resting.discard(p.ifindex)
            return InstalledPipeline(p.ifindex, p.ifname, p.hook, str(p.shape),
                                     compiled[p.shape].digest, error=message)

    def forget_removed(self, ifindexes) -> None:
        """Devices removed (or moved away): what waited for them, off the
        fast path, goes (a new device given the ifindex is not the one a kept
        program was bound to, nor are its counters)."""
        for ifindex in self._resting.intersection(ifindexes):
            self._unpin_interface(ifindex)

    def forget_resting(self) -> None:
        """What every interface off the fast path kept (events were lost, or
        the controller leaves a --keep datapath whose saved state lists only
        the interfaces it serves)."""
        self.forget_removed(set(self._resting))

    def forget_defunct(self, installed: InstalledState, ifindexes=None) -> InstalledState:
        """Drop pipelines whose link the kernel detached (the interface went
        away, maybe to come back with the same ifindex), so they are planned
        again as new attachments. `ifindexes`: only those interfaces' (the
        ones a batch announced); None: every one's."""
        state = installed
        wanted = None if ifindexes is None else set(ifindexes)
        for p in installed.pipelines:
            if not p.active or (wanted is not None and p.ifindex not in wanted):
                continue
            link = self.links.get(p.ifindex)
            try:
                alive = link is not None and dp.link_info(link.fd).get("ifindex") == p.ifindex
            except dp.BpfError:
                alive = False
            if not alive:
                log.info("%s on %s was detached by the kernel", p.shape, p.ifname)
                self.links.pop(p.ifindex, None)
                self._unpin_interface(p.ifindex)
                state = state.without_pipeline(p.ifindex)
        return state

    def detach_pipeline(self, old: InstalledPipeline, device_stays: bool = False) -> None:
        """`device_stays`: the interface only leaves the fast path (an
        obstacle, e.g. a netfilter rule no node reproduces): its program is
        kept loaded and its counters kept, so that its return attaches
        instead of loading (the verifier's ~0.1 s per program)."""
        if old.active:
            if device_stays:
                self._keep_warm(old)
            self._detach_link(old.ifindex, old.hook)
        if device_stays and old.active:
            self._resting.add(old.ifindex)
            dp.remove_tree(self.layout.iface_dir(old.ifindex))
        else:
            self._unpin_interface(old.ifindex)
        log.info("detached %s from %s", old.shape, old.ifname)

    def _unpin_interface(self, ifindex: int) -> None:
        self._resting.discard(ifindex)
        self._forget_warm(ifindex)
        dp.remove_tree(self.layout.iface_dir(ifindex))
        self.maps.forget_counters(ifindex)

    def adopt(self, saved: InstalledState) -> InstalledState:
        """Take over the datapath a previous controller left (`--keep`, or a
        crash): keep each recorded pipeline whose pinned link still serves its
        interface, without re-attaching; detach every other link found under
        this namespace's pins, so nothing runs that nobody tracks."""
        kept = []
        for p in saved.pipelines:
            if p.error:
                self._forget_if_gone(p.ifindex)
                continue
            path = self.layout.link_pin(p.ifindex, p.hook)
            try:
                link = dp.Link.from_pinned(path)
                if not link_runs_here(link, p):
                    link.detach()
                    link = None
            except (dp.BpfError, FileNotFoundError, OSError):
                link = None
            if link is None:
                self._forget_if_gone(p.ifindex)
                continue
            self.links[p.ifindex] = link
            if not self.pin_links:
                # adopted without --keep: from now on it lives as long as we do
                dp.unpin(path, missing_ok=True)
            kept.append(p)
        kept_paths = {self.layout.link_pin(p.ifindex, p.hook) for p in kept}
        for dirpath, _dirs, files in os.walk(self.layout.pin_dir) if os.path.isdir(self.layout.pin_dir) else ():
            for name in files:
                path = os.path.join(dirpath, name)
                if name.startswith("link_") and path not in kept_paths:
                    log.info("detaching an untracked link %s", path)
                    try:
                        dp.Link.from_pinned(path).detach()
                    except dp.BpfError:
                        dp.unpin(path, missing_ok=True)
        self._foreign_maps = self.layout.foreign_maps()
        if self._foreign_maps:
            log.info("maps pinned with other layouts (%s): every adopted pipeline is replaced, "
                     "atomically, by one using maps of this version's layout",
                     ", ".join(os.path.basename(d) for d in self._foreign_maps))
        # What the maps hold now: the first plan writes only the difference.
        return replace(self.read_back(), pipelines=tuple(kept))

    def _forget_if_gone(self, ifindex: int) -> None:
        """An interface a saved pipeline served is not adopted (gone, or its
        link was not pinned): if the device is gone, so are its pins, and a
        new one given its ifindex starts with counters of its own; if not,
        its counters carry on when it is attached again."""
        try:
            socket.if_indextoname(ifindex)
        except OSError:
            self._unpin_interface(ifindex)

    def remove_all(self, installed: InstalledState) -> int:
        """Detach every link and remove every pin of this namespace."""
        count = 0
        for p in installed.pipelines:
            if p.active:
                self._detach_link(p.ifindex, p.hook)
                count += 1
        for ifindex, link in list(self.links.items()):
            try:
                link.detach()
                count += 1
            except dp.BpfError:
                pass
        self.links.clear()
        self._close_programs()
        self._forget_warm()
        self.maps.close()
        count += _detach_pinned_links(self.layout.pin_dir)
        dp.remove_tree(self.layout.pin_dir)
        self._drop_origins()
        parent = os.path.dirname(self.layout.pin_dir)
        try:
            os.rmdir(parent)     # the top "linuxfp" directory, once no namespace uses it
        except OSError:
            pass
        return count


def _detach_pinned_links(root: str) -> int:
    """Links pinned by a controller whose state file is gone (e.g. crashed)."""
    count = 0
    if not os.path.isdir(root):
        return 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith("link_"):
                try:
                    dp.Link.from_pinned(os.path.join(dirpath, name)).detach()
                    count += 1
                except dp.BpfError:
                    pass
    return count


def _with_everything_reloaded(plan: Plan, installed: InstalledState, desired: Graph) -> Plan:
    """`plan`, plus a replace of every running pipeline it does not touch."""
    touched = {p.ifindex for p in plan.attach + plan.replace + plan.rehook}
    running = {p.ifindex for p in installed.pipelines if p.active}
    extra = tuple(p for p in desired.pipelines if p.ifindex in running and p.ifindex not in touched)
    return replace(plan, replace=plan.replace + extra)


def link_runs_here(link, p: InstalledPipeline) -> bool:
    """Whether a pinned link still runs its program on the interface it was
    recorded for, in this namespace: a device moved to another namespace
    while no controller watched keeps its link, and there may even keep its
    ifindex (its packets are safe, the pipeline checks the namespace, but
    adopting the link would leave a device here that takes the ifindex
    without a program while status calls it active)."""
    info = dp.link_info(link.fd)
    if info.get("ifindex") != p.ifindex:
        return False
    try:
        if p.hook == "xdp":
            attached = dp.xdp_attached(p.ifindex)
            return info["prog_id"] in (attached.native_prog_id, attached.generic_prog_id)
        return info["prog_id"] in dp.tcx_attached(p.ifindex, "ingress")
    except dp.BpfError:
        return False       # no such device here


def _origin_text(ifindex, origin) -> str:
    """One interface's member of the origins file, as json.dumps writes it
    in the whole object (the file is joined from these)."""
    return json.dumps({ifindex: origin})[1:-1]
