"""Carries out a reconcile Plan with the datapath binding: loads programs,
keeps the shared maps, attaches and atomically replaces, detaches.

All bpf syscalls of the controller happen here; everything it decides was
decided by linuxfp.graph and controller.reconcile."""
from __future__ import annotations

import logging
import os
import socket
import struct
from dataclasses import replace
from typing import Callable

from linuxfp import datapath as dp
from linuxfp.graph import IfaceFacts, NeighbourFacts, Pipeline
from linuxfp.synth import CompiledObject, Shape
from linuxfp.synth.debuginfo import describe_rejection

from .namespace import NamespaceLayout
from .reconcile import InstalledPipeline, InstalledState, Plan

log = logging.getLogger("linuxfp.installer")

SHARED_MAPS = ("lfp_ifaces", "lfp_local_src", "lfp_neigh")
COUNTERS_MAP = "lfp_counters"
_IFACE_VALUE = struct.Struct("<II6sH")     # struct lfp_iface


def pack_iface(f: IfaceFacts) -> bytes:
    return _IFACE_VALUE.pack(f.flags, f.mtu, f.mac, f.fwd_len_cap)


def unpack_iface(ifindex: int, raw: bytes) -> IfaceFacts:
    flags, mtu, mac, cap = _IFACE_VALUE.unpack(raw[: _IFACE_VALUE.size])
    return IfaceFacts(ifindex, flags, mtu, mac, cap)


def _u32(value: int) -> bytes:
    return struct.pack("<I", value)


def _addr_key(addr: str) -> bytes:
    return socket.inet_aton(addr)


def _neigh_key(key: tuple[int, str]) -> bytes:
    ifindex, addr = key
    return struct.pack("<I", ifindex) + socket.inet_aton(addr)


class Installer:
    """Owns this namespace's pinned datapath: links, counters and shared maps."""

    def __init__(self, layout: NamespaceLayout, xdp_mode: str = "auto",
                 build: Callable[[Shape], CompiledObject] | None = None) -> None:
        from linuxfp.synth import build as default_build

        self.layout = layout
        self.xdp_mode = xdp_mode
        self.build = build or default_build
        self.links: dict[int, object] = {}
        self.maps: dict[str, object] = {}
        self._pending: tuple = ((), frozenset(), frozenset())

    # -- shared maps -------------------------------------------------------

    def _shared_map(self, name: str):
        m = self.maps.get(name)
        if m is None:
            path = self.layout.shared_map_pin(name)
            if os.path.exists(path):
                m = dp.Map.from_pinned(path)
                self.maps[name] = m
        return m

    def read_back(self) -> InstalledState:
        """Map contents as currently pinned (used when adopting a datapath)."""
        ifaces, local, neighbours = (), frozenset(), frozenset()
        m = self._shared_map("lfp_ifaces")
        if m is not None:
            ifaces = tuple(sorted(
                (unpack_iface(struct.unpack("<I", k)[0], v) for k, v in m.items()),
                key=lambda f: f.ifindex))
        m = self._shared_map("lfp_local_src")
        if m is not None:
            local = frozenset(socket.inet_ntoa(k) for k in m.keys())
        m = self._shared_map("lfp_neigh")
        if m is not None:
            # The link-layer address is not in the map: "?" makes every adopted
            # entry differ from the desired one, so all are rewritten once.
            neighbours = frozenset(NeighbourFacts(struct.unpack("<I", k[:4])[0], socket.inet_ntoa(k[4:8]), v[0], "?")
                                   for k, v in m.items())
        return InstalledState(ifaces=ifaces, local_addrs=local, neighbours=neighbours)

    def _write_maps(self, plan: Plan) -> None:
        ifaces = self._shared_map("lfp_ifaces")
        if ifaces is not None:
            for f in plan.iface_set:
                ifaces.update(_u32(f.ifindex), pack_iface(f))
        local = self._shared_map("lfp_local_src")
        if local is not None:
            for addr in plan.local_add:
                local.update(_addr_key(addr), b"\x01")
        neigh = self._shared_map("lfp_neigh")
        if neigh is not None:
            for n in plan.neigh_set:
                neigh.update(_neigh_key(n.key), bytes([n.state]))

    def _fill_maps(self, facts, local, neighbours) -> None:
        ifaces = self._shared_map("lfp_ifaces")
        for f in facts:
            ifaces.update(_u32(f.ifindex), pack_iface(f))
        src = self._shared_map("lfp_local_src")
        for addr in local:
            src.update(_addr_key(addr), b"\x01")
        neigh = self._shared_map("lfp_neigh")
        for n in neighbours:
            neigh.update(_neigh_key(n.key), bytes([n.state]))

    def _delete_from_maps(self, plan: Plan) -> None:
        ifaces = self._shared_map("lfp_ifaces")
        if ifaces is not None:
            for ifindex in plan.iface_delete:
                ifaces.delete(_u32(ifindex))
        local = self._shared_map("lfp_local_src")
        if local is not None:
            for addr in plan.local_delete:
                local.delete(_addr_key(addr))
        neigh = self._shared_map("lfp_neigh")
        if neigh is not None:
            for n in plan.neigh_delete:
                neigh.delete(_neigh_key(n))

    # -- programs ----------------------------------------------------------

    def _load(self, pipeline: Pipeline, compiled: CompiledObject):
        """One instance of the shape's object for one interface."""
        obj = dp.BpfObject.open(compiled.data, name=f"lfp_if{pipeline.ifindex}")
        try:
            obj.set_rodata({"lfp_ingress_ifindex": pipeline.ifindex})
            if pipeline.shape.device_bound:
                obj.bind_to_device(pipeline.shape.entry, pipeline.ifindex)
            fresh = []
            for name in SHARED_MAPS:
                m = self._shared_map(name)
                if m is not None:
                    obj.reuse_map(name, m)
                else:
                    fresh.append(name)
            counters_path = self.layout.counters_pin(pipeline.ifindex)
            counters_pinned = os.path.exists(counters_path)
            if counters_pinned:
                obj.reuse_map(COUNTERS_MAP, dp.Map.from_pinned(counters_path))
            obj.load()
            dp.makedirs(self.layout.iface_dir(pipeline.ifindex))
            for name in fresh:
                obj.map(name).pin(self.layout.shared_map_pin(name))
                self.maps[name] = dp.Map.from_pinned(self.layout.shared_map_pin(name))
            if fresh:
                # New shared maps: fill them before this program is attached.
                self._fill_maps(*self._pending)
            if not counters_pinned:
                obj.map(COUNTERS_MAP).pin(counters_path)
            return obj, obj.program(pipeline.shape.entry)
        except BaseException:
            obj.close()
            raise

    def _attach(self, pipeline: Pipeline, prog):
        if pipeline.hook == "xdp":
            # Device-bound programs attach natively only (see Shape.device_bound).
            link = dp.attach_xdp(prog.fd, pipeline.ifindex, mode="native")
        else:
            link = dp.attach_tc(prog.fd, pipeline.ifindex, direction="ingress")
        link.pin(self.layout.link_pin(pipeline.ifindex, pipeline.hook))
        return link

    def _install(self, pipeline: Pipeline, compiled: CompiledObject, how: str,
                 old: InstalledPipeline | None) -> InstalledPipeline:
        obj, prog = self._load(pipeline, compiled)
        try:
            if how == "replace":
                link = self._link(pipeline.ifindex, pipeline.hook)
                link.update(prog.fd)
            else:
                link = self._attach(pipeline, prog)
                if how == "rehook" and old is not None:
                    self._detach_link(old.ifindex, old.hook)
                self.links[pipeline.ifindex] = link
            return InstalledPipeline(
                ifindex=pipeline.ifindex, ifname=pipeline.ifname, hook=pipeline.hook,
                shape=str(pipeline.shape), digest=compiled.digest, mode=getattr(link, "mode", ""),
                prog_id=prog.id, link_id=getattr(link, "id", 0))
        finally:
            obj.close()   # the link holds the program, the pins hold the maps

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

    def apply(self, plan: Plan, installed: InstalledState, desired,
              compiled: dict[Shape, CompiledObject]) -> InstalledState:
        """Apply `plan`; returns the new installed state. Per-interface failures
        are recorded in that state, never raised: the interface stays on the
        kernel path and the others carry on."""
        self._pending = (desired.ifaces, desired.local_addrs, desired.neighbours)
        self._write_maps(plan)
        state = installed
        for how, pipelines in (("attach", plan.attach), ("replace", plan.replace), ("rehook", plan.rehook)):
            for p in pipelines:
                old = state.pipeline(p.ifindex)
                if how == "attach" and old is not None and old.error:
                    old = None
                try:
                    new = self._install(p, compiled[p.shape], how, old)
                    log.info("%s %s on %s (prog %d, %s)", how, p.shape, p.ifname, new.prog_id, new.mode)
                except (dp.BpfError, OSError) as e:
                    message = str(e)
                    if isinstance(e, dp.VerifierError):
                        message = describe_rejection(message, e.log, compiled[p.shape].data, p.shape.entry)
                    log.error("cannot install %s on %s: %s", p.shape, p.ifname, message)
                    new = InstalledPipeline(p.ifindex, p.ifname, p.hook, str(p.shape),
                                            compiled[p.shape].digest, error=message)
                    if how == "replace" and old is not None:
                        # the old program still runs; keep describing it as installed
                        new = replace(old, error=f"update to {p.shape} failed: {e}")
                state = state.with_pipeline(new)
        for old in plan.detach:
            if old.active:
                self._detach_link(old.ifindex, old.hook)
            dp.remove_tree(self.layout.iface_dir(old.ifindex))
            state = state.without_pipeline(old.ifindex)
            log.info("detached %s from %s", old.shape, old.ifname)
        self._delete_from_maps(plan)
        if self.maps:
            state = replace(state, ifaces=desired.ifaces, local_addrs=desired.local_addrs,
                            neighbours=desired.neighbours)
        return state

    def adopt(self, saved: InstalledState) -> InstalledState:
        """Take over a datapath left in place by `linuxfp run --keep`: keep every
        pipeline whose pinned link still exists, without re-attaching."""
        kept = []
        for p in saved.pipelines:
            if p.error:
                continue
            path = self.layout.link_pin(p.ifindex, p.hook)
            if not os.path.exists(path):
                continue
            try:
                link = dp.Link.from_pinned(path)
            except dp.BpfError:
                continue
            self.links[p.ifindex] = link
            kept.append(p)
        maps = self.read_back()
        return replace(maps, pipelines=tuple(kept))

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
        for m in self.maps.values():
            m.close()
        self.maps.clear()
        count += _detach_pinned_links(self.layout.pin_dir)
        dp.remove_tree(self.layout.pin_dir)
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
