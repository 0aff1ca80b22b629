"""Response-time samples of applied changes, summarised as percentiles, and
a cumulative histogram of every batch since the start (for the metrics)."""
from __future__ import annotations

import bisect
import time
from collections import deque
from dataclasses import dataclass, field

# Upper bounds (ms) of the histogram's buckets, the last one +Inf: a plain
# change takes ~0.1-1 ms, a program swap ~10-100 ms, a BGP full table seconds.
BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
              1000.0, 2500.0, 5000.0, 10000.0)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (q in 0..100)."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, int(round(q / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[rank]


@dataclass
class ResponseTimes:
    """Bounded record of (kinds, milliseconds, datapath_work) per applied
    batch; the histogram, counts and times below cover every batch."""

    limit: int = 10000
    samples: deque = field(default_factory=deque)
    total: int = 0
    # per bucket of BUCKETS_MS (+Inf last), not cumulative; read by the
    # metrics thread, so only ever replaced element by element
    buckets: list = field(default_factory=lambda: [0] * (len(BUCKETS_MS) + 1))
    sum_ms: float = 0.0
    updated: int = 0                 # batches that changed the datapath
    resyncs: int = 0                 # batches that were a full re-read (events lost)
    last_applied: float | None = None   # wall clock (s) of the last batch applied
    last_resync: float | None = None

    def record(self, kinds: frozenset[str] | set[str], ms: float, worked: bool, resync: bool = False) -> None:
        self.samples.append((tuple(sorted(kinds)), ms, worked))
        self.total += 1
        while len(self.samples) > self.limit:
            self.samples.popleft()
        self.buckets[bisect.bisect_left(BUCKETS_MS, ms)] += 1
        self.sum_ms += ms
        self.updated += bool(worked)
        now = time.time()
        self.last_applied = now
        if resync:
            self.resyncs += 1
            self.last_resync = now

    def histogram(self) -> dict:
        """Every batch since the start, without the bounded samples (safe to
        call from another thread while the event loop records)."""
        return {"le_ms": list(BUCKETS_MS), "counts": list(self.buckets), "sum_ms": round(self.sum_ms, 4),
                "total_batches": self.total, "updated_batches": self.updated,
                "resyncs": self.resyncs, "last_applied_unix": self.last_applied,
                "last_resync_unix": self.last_resync}

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
            "histogram": self.histogram(),
        }
