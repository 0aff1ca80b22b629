"""Summaries of repeated measurements: medians with min–max, and ratios
taken within a repetition (so a slow repetition slows every system alike)."""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence


def spread(values: Sequence[float]) -> dict[str, float | int]:
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def system_summary(measurements: Iterable[Mapping]) -> dict:
    """The issue's per-system record from a system's measurements (dicts of Measurement)."""
    every = list(measurements)
    valid = [m for m in every if m["valid"]]
    used = valid or every
    capacity = [m["capacity_pps"] for m in used]
    return {
        "pps_median": round(statistics.median(capacity)) if capacity else 0,
        "pps_min": round(min(capacity)) if capacity else 0,
        "pps_max": round(max(capacity)) if capacity else 0,
        "offered_pps_median": round(statistics.median(m["offered_pps"] for m in used)) if used else 0,
        "delivered_pps_median": round(statistics.median(m["delivered_pps"] for m in used)) if used else 0,
        "ns_per_packet_median": round(statistics.median(m["ns_per_packet"] for m in used), 1) if used else 0.0,
        "valid": bool(valid),
        "valid_measurements": len(valid),
        "measurements": len(every),
    }


def ratios(
    repetitions: Sequence[Mapping[str, Mapping]],
    pairs: Iterable[tuple[str, str]],
    key: str = "capacity_pps",
) -> tuple[dict[str, float], dict[str, dict]]:
    """Median per-repetition ratio a/b for each pair, from repetitions where both were valid.

    Returns (medians, spreads): `{"a/b": median}` and `{"a/b": {median, min, max, n}}`."""
    medians, spreads = {}, {}
    for a, b in pairs:
        values = []
        for repetition in repetitions:
            first, second = repetition.get(a), repetition.get(b)
            if first and second and first["valid"] and second["valid"] and second[key]:
                values.append(first[key] / second[key])
        if values:
            name = f"{a}/{b}"
            summary = spread(values)
            medians[name] = round(summary["median"], 4)
            spreads[name] = {k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()}
    return medians, spreads
