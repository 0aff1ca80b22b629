"""Desired graph vs installed datapath → the smallest set of actions. Pure."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Mapping

from linuxfp.graph import Graph, IfaceFacts, NeighbourFacts, Pipeline
from linuxfp.synth import Shape


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


@dataclass(frozen=True)
class InstalledState:
    pipelines: tuple[InstalledPipeline, ...] = ()
    ifaces: tuple[IfaceFacts, ...] = ()
    local_addrs: frozenset[str] = field(default_factory=frozenset)
    neighbours: frozenset[NeighbourFacts] = field(default_factory=frozenset)

    def pipeline(self, ifindex: int) -> InstalledPipeline | None:
        for p in self.pipelines:
            if p.ifindex == ifindex:
                return p
        return None

    def with_pipeline(self, p: InstalledPipeline) -> "InstalledState":
        rest = tuple(x for x in self.pipelines if x.ifindex != p.ifindex)
        return replace(self, pipelines=tuple(sorted(rest + (p,), key=lambda x: x.ifindex)))

    def without_pipeline(self, ifindex: int) -> "InstalledState":
        return replace(self, pipelines=tuple(x for x in self.pipelines if x.ifindex != ifindex))

    def to_json(self) -> str:
        return json.dumps({"pipelines": [asdict(p) for p in self.pipelines]}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "InstalledState":
        data = json.loads(text)
        return cls(pipelines=tuple(InstalledPipeline(**p) for p in data.get("pipelines", ())))


@dataclass(frozen=True)
class Plan:
    attach: tuple[Pipeline, ...] = ()       # nothing installed on this interface yet
    replace: tuple[Pipeline, ...] = ()      # same hook, new program: atomic link update
    rehook: tuple[Pipeline, ...] = ()       # hook changes: attach the new one, then detach the old
    detach: tuple[InstalledPipeline, ...] = ()
    iface_set: tuple[IfaceFacts, ...] = ()
    iface_delete: tuple[int, ...] = ()
    local_add: frozenset[str] = frozenset()
    local_delete: frozenset[str] = frozenset()
    neigh_set: frozenset[NeighbourFacts] = frozenset()
    neigh_delete: frozenset[tuple[int, str]] = frozenset()     # keys

    @property
    def touches_programs(self) -> bool:
        return bool(self.attach or self.replace or self.rehook or self.detach)

    @property
    def empty(self) -> bool:
        return not (self.touches_programs or self.iface_set or self.iface_delete
                    or self.local_add or self.local_delete or self.neigh_set or self.neigh_delete)


def plan(desired: Graph, digests: Mapping[Shape, str], installed: InstalledState,
         refresh_neighbours: frozenset[tuple[int, str]] = frozenset()) -> Plan:
    """What to change so that `installed` becomes `desired`.

    An interface whose last install failed is retried only when its program
    would differ, so a verifier rejection is not repeated on every event.
    `refresh_neighbours`: neighbour keys the kernel just announced; they are
    rewritten even when unchanged, because the datapath itself advances a
    STALE entry to PROBING and a new STALE must reset it."""
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

    have_facts = {f.ifindex: f for f in installed.ifaces}
    want_facts = {f.ifindex: f for f in desired.ifaces}
    iface_set = tuple(f for i, f in sorted(want_facts.items()) if have_facts.get(i) != f)
    iface_delete = tuple(sorted(set(have_facts) - set(want_facts)))
    return Plan(
        attach=tuple(attach), replace=tuple(replace_), rehook=tuple(rehook), detach=tuple(detach),
        iface_set=iface_set, iface_delete=iface_delete,
        local_add=frozenset(desired.local_addrs - installed.local_addrs),
        local_delete=frozenset(installed.local_addrs - desired.local_addrs),
        neigh_set=frozenset(n for n in desired.neighbours
                            if n not in installed.neighbours or n.key in refresh_neighbours),
        neigh_delete=frozenset({n.key for n in installed.neighbours} - {n.key for n in desired.neighbours}),
    )
