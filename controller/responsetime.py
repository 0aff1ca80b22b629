"""Response-time samples of applied changes, summarised as percentiles."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (q in 0..100)."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, int(round(q / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[rank]


@dataclass
class ResponseTimes:
    """Bounded record of (kinds, milliseconds, datapath_work) per applied batch."""

    limit: int = 10000
    samples: deque = field(default_factory=deque)
    total: int = 0

    def record(self, kinds: frozenset[str] | set[str], ms: float, worked: bool) -> None:
        self.samples.append((tuple(sorted(kinds)), ms, worked))
        self.total += 1
        while len(self.samples) > self.limit:
            self.samples.popleft()

    def summary(self) -> dict:
        def stats(values: list[float]) -> dict:
            values = sorted(values)
            return {
                "n": len(values),
                "p50_ms": round(percentile(values, 50), 4),
                "p90_ms": round(percentile(values, 90), 4),
                "p99_ms": round(percentile(values, 99), 4),
                "max_ms": round(values[-1], 4) if values else 0.0,
            }

        by_kind: dict[str, list[float]] = {}
        for kinds, ms, _ in self.samples:
            for kind in kinds:
                by_kind.setdefault(kind, []).append(ms)
        return {
            "all": stats([ms for _, ms, _ in self.samples]),
            "with_datapath_work": stats([ms for _, ms, worked in self.samples if worked]),
            "by_event": {kind: stats(v) for kind, v in sorted(by_kind.items())},
            "total_batches": self.total,
        }
