"""Desired graph vs installed datapath → the smallest set of actions. Pure
(but for the installed state's JSON text, kept per pipeline)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Mapping

from linuxfp.graph import Graph, Pipeline, Shape, Table
from linuxfp.graph.tables import widened


@dataclass(frozen=True)
class InstalledPipeline:
    ifindex: int
    ifname: str
    hook: str
    shape: str
    digest: str
    mode: str = ""          # XDP attach mode actually used: native / generic; "tcx" / "cls_bpf" for TC
    prog_id: int = 0
    link_id: int = 0
    error: str = ""         # last install failure: the interface stays on the kernel path

    @property
    def active(self) -> bool:
        return not self.error


Entries = frozenset[tuple[bytes, bytes]]


@dataclass(frozen=True)
class InstalledState:
    pipelines: tuple[InstalledPipeline, ...] = ()
    # what each shared map holds, by map name (the graph's tables once written)
    tables: Mapping[str, Entries] = field(default_factory=dict)

    def pipeline(self, ifindex: int) -> InstalledPipeline | None:
        return self._by_ifindex.get(ifindex)

    @cached_property
    def _by_ifindex(self) -> dict[int, InstalledPipeline]:
        # (asked for every pipeline of a plan: hundreds of interfaces)
        return {p.ifindex: p for p in reversed(self.pipelines)}     # (the first, were one named twice)

    def with_pipeline(self, p: InstalledPipeline) -> "InstalledState":
        rest = tuple(x for x in self.pipelines if x.ifindex != p.ifindex)
        return replace(self, pipelines=tuple(sorted(rest + (p,), key=lambda x: x.ifindex)))

    def without_pipeline(self, ifindex: int) -> "InstalledState":
        return replace(self, pipelines=tuple(x for x in self.pipelines if x.ifindex != ifindex))

    def to_json(self) -> str:
        # written after every change that touches a program: flat fields, no
        # asdict() deep copies, no indentation, each pipeline's text made
        # once (hundreds of interfaces, one of them new)
        parts = []
        for p in self.pipelines:
            text = _pipeline_json.get(p)
            if text is None:
                text = _pipeline_json[p] = json.dumps({n: getattr(p, n) for n in _PIPELINE_FIELDS})
            parts.append(text)
        if len(_pipeline_json) > 2 * len(parts) + 64:       # (pipelines long replaced)
            current = set(self.pipelines)
            for p in [p for p in list(_pipeline_json) if p not in current]:
                _pipeline_json.pop(p, None)
        return '{"pipelines": [' + ", ".join(parts) + "]}"

    @classmethod
    def from_json(cls, text: str) -> "InstalledState":
        data = json.loads(text)
        return cls(pipelines=tuple(InstalledPipeline(**p) for p in data.get("pipelines", ())))


_PIPELINE_FIELDS = tuple(f.name for f in fields(InstalledPipeline))
# Each pipeline's JSON text, by the pipeline: equal pipelines print the same
# (their fields are ints and strings, never 1 beside True or 1.0).
_pipeline_json: dict[InstalledPipeline, str] = {}


@dataclass(frozen=True)
class TableWrite:
    """What one table's map needs: entries to set, keys to erase, and for a
    summary the widened values to write first."""

    table: Table
    set: tuple[tuple[bytes, bytes], ...] = ()
    erase: tuple[bytes, ...] = ()
    widen: tuple[tuple[bytes, bytes], ...] = ()


@dataclass(frozen=True)
class Plan:
    attach: tuple[Pipeline, ...] = ()       # nothing installed on this interface yet
    replace: tuple[Pipeline, ...] = ()      # same hook, new program: atomic link update
    rehook: tuple[Pipeline, ...] = ()       # hook changes: attach the new one, then detach the old
    detach: tuple[InstalledPipeline, ...] = ()
    tables: tuple[TableWrite, ...] = ()

    @property
    def touches_programs(self) -> bool:
        return bool(self.attach or self.replace or self.rehook or self.detach)

    @property
    def empty(self) -> bool:
        return not (self.touches_programs or self.tables)

    def writes(self, name: str) -> TableWrite | None:
        return next((w for w in self.tables if w.table.name == name), None)


def plan(desired: Graph, digests: Mapping[Shape, str], installed: InstalledState,
         refresh: Mapping[str, frozenset[bytes]] = {}) -> Plan:
    """What to change so that `installed` becomes `desired`.

    An interface whose last install failed is retried only when its program
    would differ, so a verifier rejection is not repeated on every event.
    `refresh`: per table, keys a netlink message just announced; they are
    rewritten even when unchanged, because the datapath writes those entries
    too (a node's `refreshed`)."""
    attach, replace_, rehook, detach = [], [], [], []
    wanted = {p.ifindex: p for p in desired.pipelines}
    for p in desired.pipelines:
        have = installed.pipeline(p.ifindex)
        digest = digests[p.shape]
        if have is None:
            attach.append(p)
        elif have.shape == str(p.shape) and have.digest == digest:
            continue
        elif have.error:
            attach.append(p)
        elif have.hook == p.hook:
            replace_.append(p)
        else:
            rehook.append(p)
    for have in installed.pipelines:
        if have.ifindex not in wanted:
            detach.append(have)
    writes = []
    for table in desired.tables:
        write = table_write(table, installed.tables.get(table.name, frozenset()), refresh.get(table.name, frozenset()))
        if write is not None:
            writes.append(write)
    return Plan(attach=tuple(attach), replace=tuple(replace_), rehook=tuple(rehook), detach=tuple(detach),
                tables=tuple(writes))


def table_write(table: Table, installed: Entries, refresh: frozenset[bytes] = frozenset()) -> TableWrite | None:
    """The difference between a table's desired and installed entries, or
    None when there is none. Unchanged tables are the same object (the graph
    reuses them), so most events compare nothing."""
    if table.entries is installed and not refresh:
        return None
    new = set(table.entries - installed)
    if refresh:
        desired = table.as_dict
        new.update((k, desired[k]) for k in refresh if k in desired)
    # (a key whose value changed is in both differences: written, not erased;
    # set operations, not a dict of every entry: a 100 000-entry table whose
    # one entry changed costs little)
    gone = {k for k, _ in installed - table.entries} - {k for k, _ in new}
    if not new and not gone:
        return None
    ordered = tuple(sorted(new))
    widen = ()
    if table.summary:
        have = dict(installed)
        widen = tuple((k, widened(have.get(k, table.empty_value), v)) for k, v in ordered)
    return TableWrite(table, ordered, tuple(sorted(gone)), widen)
