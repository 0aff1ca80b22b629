"""The counter table, read from bpf_modules/counters.h and every registered
node's header (their single source), in that order: ids do not depend on the
shape."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from linuxfp.graph.nodes import registered
from linuxfp.resources import modules_dir

_ENTRY = re.compile(r'X\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*"([^"]*)"\s*\)')


@dataclass(frozen=True)
class Counter:
    id: int
    name: str         # e.g. "fib_no_neigh"
    node: str         # node that counts it, or "pipeline"
    kind: str         # "fast" (handled in the fast path), "pass" (to kernel), "drop"; "event" (beside them)
    description: str

    @property
    def c_name(self) -> str:
        return self.name.upper()


@cache
def counters() -> tuple[Counter, ...]:
    headers = [modules_dir() / "counters.h"] + [node.header for node in registered()]
    rows = []
    for header in headers:
        rows += _ENTRY.findall(header.read_text())
    names = [name for name, *_ in rows]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"counter ids declared twice: {', '.join(duplicates)}")
    return tuple(Counter(i, name.lower(), node, kind, desc) for i, (name, node, kind, desc) in enumerate(rows))


def counter_named(name: str) -> Counter:
    for counter in counters():
        if counter.name == name:
            return counter
    raise KeyError(name)
