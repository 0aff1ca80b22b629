"""The counter table, read from bpf_modules/counters.h (its single source)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from .resources import modules_dir

_ENTRY = re.compile(r'X\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*"([^"]*)"\s*\)')


@dataclass(frozen=True)
class Counter:
    id: int
    name: str         # e.g. "fib_no_neigh"
    node: str         # node that counts it, or "pipeline"
    kind: str         # "fast" (handled in the fast path), "pass" (to kernel), "drop"
    description: str


@cache
def counters() -> tuple[Counter, ...]:
    text = (modules_dir() / "counters.h").read_text()
    return tuple(
        Counter(i, name.lower(), node, kind, desc)
        for i, (name, node, kind, desc) in enumerate(_ENTRY.findall(text))
    )


def counter_named(name: str) -> Counter:
    for counter in counters():
        if counter.name == name:
            return counter
    raise KeyError(name)
