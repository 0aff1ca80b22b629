"""The maps every pipeline of a namespace shares — every node's tables and
the lease — pinned once, reused by each program instance at load time, and
written the same way whatever node owns them."""
from __future__ import annotations

import errno
import functools
import logging
import os

from linuxfp import datapath as dp
from linuxfp.datapath.maps import BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_ARRAY_OF_MAPS, BPF_MAP_TYPE_PERCPU_ARRAY
from linuxfp.graph import Graph, Table
from linuxfp.graph.interfaces import MAX_IFACE_SLOTS
from linuxfp.graph.nodes import state_maps
from linuxfp.graph.tables import ARRAY, DEVMAP
from linuxfp.state.kernel import release_at_least
from linuxfp.synth import counters

from .lease import NAMESPACE_MAPS, NAMESPACE_TYPES
from .namespace import NamespaceLayout

log = logging.getLogger("linuxfp.maps")

# Each interface's counter array, by ifindex (an array of maps shared like
# the tables; the arrays themselves are pinned per interface).
COUNTERS_MAP = "lfp_counters"
IF_COUNTERS_MAP = "lfp_if_counters"     # an XDP program's own: its interface's array
MIN_IFACE_SLOTS = 256
SPARE_COUNTERS = 16     # counter arrays registered ahead for interfaces yet to come

Entries = frozenset[tuple[bytes, bytes]]


class LayoutMismatch(dp.BpfError):
    """A compiled object declares a map differently from the table the
    graph fills it with: one of the two sources of the layout is stale."""


def check_layout(obj, table) -> None:
    """Refuse `obj` if map `table.name` is not laid out as the table packs
    it: key and value sizes, and where the object's BTF describes them, the
    C types member by member (name, offset, size)."""
    declared = obj.map_layout(table.name)
    if declared != (table.key_size, table.value_size):
        raise LayoutMismatch(
            f"map {table.name} of node {table.owner}: the compiled object declares key/value "
            f"{declared[0]}/{declared[1]} bytes, the table {table.key_size}/{table.value_size}", 22)
    check_types(obj, table.name, f"of node {table.owner}", table.key, table.value)


def check_types(obj, name: str, whose: str, key, value) -> None:
    """Refuse `obj` if its BTF lays map `name`'s key or value out otherwise
    than the CTypes `key` and `value` (member by member)."""
    for part, ctype, compiled in zip(("key", "value"), (key, value), obj.map_types(name)):
        problem = ctype.mismatch(compiled) if compiled is not None else None
        if problem:
            raise LayoutMismatch(f"map {name} {whose}, {part}: {problem}", 22)


@functools.cache
def _batch_waits_once() -> bool:
    """Whether the kernel waits for one grace period per batched update of
    an array of maps (6.8 on: bpf_map_do_batch), not one per entry."""
    return release_at_least(6, 8)


def iface_slots(ifindexes) -> int:
    """Array size covering every ifindex given (a power of two)."""
    highest = max((i for i in ifindexes if i < MAX_IFACE_SLOTS), default=0)
    slots = MIN_IFACE_SLOTS
    while slots <= highest:
        slots *= 2
    return slots


def _ifindexes(desired: Graph) -> list[int]:
    return [f.ifindex for f in desired.ifaces]


class SharedMaps:
    def __init__(self, layout: NamespaceLayout) -> None:
        self.layout = layout
        self._open: dict[str, dp.Map] = {}
        # Hash tables whose map cannot hold every entry the graph wants
        # (E2BIG), with why. A missing entry can mean the fast path acts where
        # Linux would not (lfp_local_src: a missing local address is a source
        # Linux refuses), so while any table is full the controller withholds
        # the lease. `on_full(reason)`, if set, is told at once.
        self.full: dict[str, str] = {}
        self.on_full = None
        # interfaces whose counter array the open lfp_counters holds; of them,
        # the spares (registered ahead); ifindexes whose array is to go
        self._registered: set[int] = set()
        self._spares: set[int] = set()
        self._departed: set[int] = set()
        self._tombstone: dp.Map | None = None
        # Names found not pinned: only this object pins shared maps while
        # the controller holds the namespace's lock (pin_fresh,
        # _counters_outer), so they stay so until it does — not looked for
        # again per plan (a bridge's tables at XDP, lfp_counters: a stat of
        # the bpffs each, in the response time).
        self._unpinned: set[str] = set()

    def get(self, name: str) -> dp.Map | None:
        m = self._open.get(name)
        if m is None and name not in self._unpinned:
            path = self.layout.shared_map_pin(name)
            if os.path.exists(path):
                m = self._open[name] = dp.Map.from_pinned(path)
            else:
                self._unpinned.add(name)
        return m

    def _pin(self, m: dp.Map, name: str) -> None:
        """Pin `m` as the shared map `name` (every shared pin is made here:
        get() then finds it, though it found the name unpinned before)."""
        m.pin(self.layout.shared_map_pin(name))
        self._unpinned.discard(name)

    def _by_ifindex(self, desired: Graph) -> list[str]:
        return [t.name for t in desired.tables if t.by_ifindex] + [COUNTERS_MAP]

    def fits(self, desired: Graph) -> bool:
        """Whether every by-ifindex array holds the namespace's interfaces."""
        for name in self._by_ifindex(desired):
            m = self.get(name)
            if m is not None and any(m.max_entries <= i < MAX_IFACE_SLOTS for i in _ifindexes(desired)):
                return False
        return True

    def drop_ifindex_arrays(self, desired: Graph) -> None:
        """Forget the arrays indexed by ifindex so the next load creates larger
        ones; programs still using the old ones keep them alive until replaced."""
        self._forget_registrations()
        for name in self._by_ifindex(desired):
            m = self._open.pop(name, None)
            if m is not None:
                m.close()
            dp.unpin(self.layout.shared_map_pin(name), missing_ok=True)

    # -- loading -----------------------------------------------------------

    def prepare(self, obj, desired: Graph | None, share_all: bool = False) -> list[str]:
        """Make `obj` reuse the pinned maps; size the ones it will create;
        refuse a map whose layout differs from its table's. Returns the names
        `obj` creates (to be pinned and filled after load). share_all: every
        map `obj` declares is a shared one (a node's kernel-side watch, which
        loads before any graph exists), not only the graph's tables."""
        tables = {t.name: t for t in desired.tables} if desired is not None else {}
        fresh = []
        for name in obj.map_names():
            table = tables.get(name)
            shared = share_all and "." not in name      # not .rodata/.bss
            by_ifindex = (table is not None and table.by_ifindex) or name == COUNTERS_MAP
            if name not in NAMESPACE_MAPS and name not in state_maps() and table is None and not shared \
                    and name != COUNTERS_MAP:
                continue              # the program's own (.rodata)
            if table is not None:
                check_layout(obj, table)
            elif name in NAMESPACE_TYPES:
                check_types(obj, name, "the namespace's (controller/lease.py)", *NAMESPACE_TYPES[name])
            m = self.get(name)
            if m is not None:
                obj.reuse_map(name, m)
            else:
                fresh.append(name)
                if by_ifindex and desired is not None:
                    obj.set_max_entries(name, iface_slots(_ifindexes(desired)))
        return fresh

    def pin_fresh(self, obj, fresh: list[str]) -> None:
        """Pin the maps `obj` created, for every later object to share."""
        if fresh:
            dp.makedirs(self.layout.maps_dir)
        for name in fresh:
            self._pin(obj.map(name), name)

    def adopt(self, obj, fresh: list[str], desired: Graph) -> None:
        """Pin the maps `obj` created and fill them before any program using
        them is attached (summaries last)."""
        self.pin_fresh(obj, fresh)
        created = [t for t in desired.tables if t.name in fresh]
        for table in sorted(created, key=lambda t: t.summary):
            self.write(table, table.entries)

    # -- counters ----------------------------------------------------------

    def _counters_outer(self, desired: Graph | None) -> dp.Map:
        """lfp_counters, made here (not by the first program load) so that
        every interface of a plan is registered before any program runs."""
        outer = self.get(COUNTERS_MAP)
        if outer is None:
            with dp.Map.create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, len(counters()), name="lfp_cnt_inner") as inner:
                outer = dp.Map.create(BPF_MAP_TYPE_ARRAY_OF_MAPS, 4, 4,
                                      iface_slots(_ifindexes(desired) if desired is not None else ()),
                                      name=COUNTERS_MAP, inner=inner)
            try:
                dp.makedirs(self.layout.maps_dir)
                self._pin(outer, COUNTERS_MAP)
            except BaseException:
                outer.close()
                raise
            self._open[COUNTERS_MAP] = outer
            self._forget_registrations()
        return outer

    def _forget_registrations(self) -> None:
        """What is registered in lfp_counters is no longer known (a new one)."""
        self._registered.clear()
        self._spares.clear()
        self._departed.clear()
        if self._tombstone is not None:
            self._tombstone.close()
            self._tombstone = None

    def register_counters(self, ifindexes, desired: Graph | None = None) -> None:
        """Give each interface its counter array in lfp_counters before a
        program serves it: the one pinned for it (kept across program
        replacements and restarts), or a new one. One map update for all:
        the kernel waits for an RCU grace period after each update of an
        array of maps (milliseconds), so a plan pays it once, not per
        interface (since 6.8; before, once per entry). The same update
        lets go of the arrays of interfaces gone since the last one."""
        requested = list(dict.fromkeys(ifindexes))
        if not requested:
            return          # (an XDP-only namespace needs no lfp_counters at all)
        outer = self._counters_outer(desired)
        wanted = [i for i in requested if i not in self._registered]
        beyond = [i for i in wanted if i >= outer.max_entries]
        if beyond:
            # the program would pass every packet uncounted: say so instead
            raise dp.BpfError(f"{COUNTERS_MAP} has no entry for ifindex {beyond[0]} "
                              f"({outer.max_entries} entries)", errno.ERANGE)
        if wanted and desired is not None and _batch_waits_once():
            # The kernel numbers new devices upwards from the highest: arrays
            # for the next few, made now, spare the next interfaces the wait.
            # Spares at or below the highest are for devices that took their
            # numbers without a pipeline: they go.
            in_use = set(requested) | {p.ifindex for p in desired.pipelines}
            self._spares.difference_update(in_use)
            highest = max(i for i in [f.ifindex for f in desired.ifaces] + wanted if i < MAX_IFACE_SLOTS)
            for spare in [i for i in self._spares if i <= highest]:
                self.forget_counters(spare)
            spares = [i for i in range(highest + 1, min(highest + 1 + SPARE_COUNTERS, outer.max_entries))
                      if i not in self._registered]
            self._spares.update(spares)
            wanted += spares
        if not wanted:
            return
        size = len(counters())
        arrays: list[dp.Map] = []
        try:
            for ifindex in wanted:
                arrays.append(self.counter_array(ifindex))
            departed = sorted(self._departed.difference(wanted))
            if departed and self._tombstone is None:
                # where departed interfaces' entries point from now on: no
                # program serves them, and their arrays are freed
                self._tombstone = dp.Map.create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, size, name="lfp_cnt_gone")
            outer.update_many([(i.to_bytes(4, "little"), a.fd.to_bytes(4, "little"))
                               for i, a in zip(wanted, arrays)]
                              + [(i.to_bytes(4, "little"), self._tombstone.fd.to_bytes(4, "little"))
                                 for i in departed])
            self._registered.update(wanted)
            self._departed.clear()
        finally:
            for array in arrays:
                array.close()

    def counter_array(self, ifindex: int) -> dp.Map:
        """The interface's pinned counter array (made if missing, or made
        again if a build with other counters left it); the caller closes it."""
        path = self.layout.counters_pin(ifindex)
        size = len(counters())
        if os.path.exists(path):
            array = dp.Map.from_pinned(path)
            if (array.type, array.max_entries) == (BPF_MAP_TYPE_PERCPU_ARRAY, size):
                return array
            array.close()
            dp.unpin(path, missing_ok=True)
        array = dp.Map.create(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, size, name=f"lfp_cnt_if{ifindex}")
        try:
            dp.makedirs(self.layout.maps_dir)
            array.pin(path)
        except BaseException:
            array.close()
            raise
        return array

    def forget_counters(self, ifindex: int) -> None:
        """The interface's counters are gone (it left the fast path). Its
        entry in lfp_counters lets go of the array at the next registration
        (an update of its own would cost a grace period now): until then no
        program serves the ifindex, and the next interface given it is
        registered afresh."""
        dp.unpin(self.layout.counters_pin(ifindex), missing_ok=True)
        if ifindex in self._registered:      # (an XDP interface never is)
            self._departed.add(ifindex)
        self._registered.discard(ifindex)
        self._spares.discard(ifindex)

    def reset_state(self, names) -> None:
        """Zero a node's pinned state maps (Node.state_maps) that are not per
        CPU: what its watch kept (e.g. a generation and whether it is armed)
        when no watch keeps it. Per-CPU ones (caches) are validated by those
        and stay."""
        for name in names:
            m = self.get(name)
            if m is None or m.is_percpu:
                continue
            if m.type == BPF_MAP_TYPE_ARRAY:
                for index in range(m.max_entries):
                    m.update(index.to_bytes(4, "little"), bytes(m.value_size))
            else:
                m.delete_many(m.keys())

    # -- contents ----------------------------------------------------------

    def write(self, table: Table, entries) -> None:
        m = self.get(table.name)
        if m is None:
            return                   # no program uses it yet: filled when one creates it
        if table.kind != DEVMAP and not table.by_ifindex:
            try:
                m.update_many(list(entries))
            except dp.BpfError as e:
                if e.errno != errno.E2BIG:
                    raise
                reason = (f"map {table.name} is full: {len(table.entries)} entries wanted, "
                          f"{m.max_entries} fit")
                self.full[table.name] = reason
                if self.on_full is not None:
                    self.on_full(reason)
            return
        for key, value in entries:
            if table.by_ifindex and int.from_bytes(key, "little") >= m.max_entries:
                continue             # beyond the array: all-zero facts, the kernel path
            try:
                m.update(key, value)
            except dp.BpfError as e:
                if table.kind != DEVMAP:
                    raise
                # the device went away meanwhile: the kernel path serves it
                log.warning("%s: ifindex %d not usable as XDP egress: %s", table.name,
                            int.from_bytes(key, "little"), e)

    def write_missing(self, table: Table) -> None:
        """Write the entries of a full table that its map lacks (erasures may
        have made room since); it stays in `full` if they still do not fit."""
        self.full.pop(table.name, None)
        m = self.get(table.name)
        if m is not None:
            held = dict(m.items())
            self.write(table, [(k, v) for k, v in table.entries if held.get(k) != v])

    def contents(self, name: str) -> Entries:
        m = self.get(name)
        return frozenset(m.items()) if m is not None else frozenset()

    def erase(self, table: Table, keys) -> None:
        m = self.get(table.name)
        if m is None:
            return
        if table.kind != ARRAY and not table.by_ifindex:
            m.delete_many(list(keys))
            return
        for key in keys:
            if table.by_ifindex and int.from_bytes(key, "little") >= m.max_entries:
                continue
            if table.kind == ARRAY:
                m.update(key, table.empty_value)     # zeros: nothing known, pass
            else:
                m.delete(key)

    def read_back(self) -> dict[str, Entries]:
        """Every pinned table's entries as they are, for adopting a datapath
        (arrays: the rows that are not all zeros)."""
        found: dict[str, Entries] = {}
        if not os.path.isdir(self.layout.maps_dir):
            return found
        for name in os.listdir(self.layout.maps_dir):
            if name in NAMESPACE_MAPS or name in state_maps() or name == COUNTERS_MAP \
                    or (name.startswith("if") and name.endswith("_counters")):
                continue
            m = self.get(name)
            if m is None:
                continue
            items = m.items()
            if m.type == BPF_MAP_TYPE_ARRAY:
                items = [(k, v) for k, v in items if any(v)]
            found[name] = frozenset(items)
        return found

    def close(self) -> None:
        for m in self._open.values():
            m.close()
        self._open.clear()
        self._unpinned.clear()
        self._forget_registrations()


