"""Writing a run's results: JSON (stable format), a markdown table, a PNG plot."""
from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable
from pathlib import Path

DEFAULT_OUT_DIR = Path("bench/results")


def timestamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def _pyplot():
    """matplotlib's pyplot on a file-only backend, or None (with a warning) if not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench: matplotlib is not installed: no plot written "
              "(pip install matplotlib, or the [bench] extra)", file=sys.stderr)
        return None
    return plt


def write(result: dict, out_dir: Path, markdown: str,
          plot: Callable[[dict, Path, object], None] | None) -> dict[str, str]:
    """Write <scenario>-<timestamp>.{json,md,png}; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{result['scenario']}-{result['timestamp']}"
    written = {"json": str(stem.with_suffix(".json")), "markdown": str(stem.with_suffix(".md"))}
    if plot is not None:
        plt = _pyplot()
        if plt is not None:
            png = stem.with_suffix(".png")
            try:
                plot(result, png, plt)
                written["plot"] = str(png)
            finally:
                plt.close("all")
    result["files"] = {key: Path(path).name for key, path in written.items()}
    Path(written["json"]).write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")
    Path(written["markdown"]).write_text(markdown)
    return written


def fmt_mpps(pps: float) -> str:
    return f"{pps / 1e6:.2f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def systems_table(systems: dict) -> str:
    """One row per system: median rate, spread, ns/packet, valid windows."""
    rows = [[name, fmt_mpps(s["pps_median"]), f"{fmt_mpps(s['pps_min'])}–{fmt_mpps(s['pps_max'])}",
             f"{s['ns_per_packet_median']:.0f}", f"{s['valid_measurements']}/{s['measurements']}"]
            for name, s in systems.items()]
    return table(["system", "Mpps (median)", "min–max", "ns/packet", "valid"], rows)


def ratios_table(ratio_spread: dict, targets: dict[str, float]) -> str:
    """One row per same-run ratio, with its target's verdict where it has one."""
    rows = []
    for key, v in ratio_spread.items():
        target = targets.get(key)
        verdict = f"≥ {target:g}: {'met' if v['median'] >= target else 'missed'}" if target else ""
        rows.append([key, f"{v['median']:.2f}", f"{v['min']:.2f}–{v['max']:.2f}", str(v["n"]), verdict])
    return table(["ratio", "median", "min–max", "repetitions", "target"], rows)


def ratios_line(label: str, result: dict) -> str:
    """`label` with LinuxFP's same-run ratios to Linux, and any errors."""
    ratios = result["ratios"]
    shown = ", ".join(f"{k} {ratios[k]:.2f}" for k in ("linuxfp-xdp/linux", "linuxfp-tc/linux") if k in ratios)
    errors = f"; errors: {', '.join(result['errors'])}" if result["errors"] else ""
    return f"{label} {shown or 'no valid ratios'}{errors}"
