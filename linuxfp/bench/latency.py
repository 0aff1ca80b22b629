"""`linuxfp bench latency`: request–response round trips across the DUT
(paper Tables III–V, which used netperf TCP_RR).

Client: our small C tool (tools/rr.c, compiled with the host's clang at run
time) in the source namespace, one request in flight per session, 1 and 128
sessions. Server: the sink's XDP program reflects each request (addresses
and ports swapped), so the round trip crosses the DUT twice and the server
side adds the same few hundred nanoseconds for every system. The DUT's
egress has GRO on in every mode so reflected frames get NAPI there, and the
source's veth too so LinuxFP may redirect the replies into it."""
from __future__ import annotations

import json
import random
import statistics
import subprocess
from pathlib import Path

from linuxfp.lab.netns import Lab

from .machine import machine
from .options import Options
from .programs import build_c_tool
from .results import table, timestamp
from .sink import ECHO_UDP_PORT, Sink
from .systems import SYSTEMS
from .throughput import exclusive_machine, progress
from .topology import Line, build_line

SYSTEM_NAMES = ("linux", "linuxfp-xdp", "linuxfp-tc")
SESSIONS = (1, 128)
PAYLOAD = 18          # UDP payload: 64-byte frames


def _prepare(line: Line) -> None:
    line.dut.run(["ethtool", "-K", line.dut_in.ifname, "gro", "on"])
    line.dut.run(["ethtool", "-K", line.dut_out.ifname, "gro", "on"])
    line.src.run(["ethtool", "-K", line.gen.ifname, "gro", "on"])


def round_trips(line: Line, tool: Path, sessions: int, duration_ms: int, warmup_ms: int) -> dict:
    return client_round_trips(line.src.exec_argv, tool, line.prefix_address(0), ECHO_UDP_PORT, sessions,
                              duration_ms, warmup_ms)


def client_round_trips(exec_argv, tool: Path, address: str, port: int, sessions: int, duration_ms: int,
                       warmup_ms: int) -> dict:
    """Run the latency client (`exec_argv` places it in its namespace) and
    return what it measured."""
    argv = [str(tool), address, str(port), str(sessions), str(duration_ms), str(warmup_ms), str(PAYLOAD)]
    try:
        done = subprocess.run(exec_argv(argv), capture_output=True, text=True, check=False,
                              timeout=(duration_ms + warmup_ms) / 1000 + 30)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError("latency client did not finish in time") from exc
    if done.returncode != 0:
        raise RuntimeError(f"latency client failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def _median_of(runs: list[dict], key: str) -> float | None:
    values = [run[key] for run in runs if key in run]
    return round(statistics.median(values), 3) if values else None


def in_turn(systems, repetitions: int, measure, errors: dict[str, str], what: str) -> None:
    """measure(repetition, system) for each repetition, the systems in a new
    random order each time; a system that fails is recorded in `errors`
    and left out from then on, the others go on."""
    rng = random.Random()
    for index in range(repetitions):
        order = list(systems)
        rng.shuffle(order)
        for name in order:
            if name in errors:
                continue
            try:
                measure(index, name)
            except Exception as exc:  # noqa: BLE001 - reported; the other systems go on
                errors[name] = f"{type(exc).__name__}: {exc}"
                progress(f"{what}: {name}: {errors[name]}")


def summarize_runs(runs: list[dict]) -> dict:
    """One system's runs of the latency client: medians over the runs of
    each run's avg / p50 / p99 / std, and the totals."""
    return {"avg_us": _median_of(runs, "avg_us"), "p50_us": _median_of(runs, "p50_us"),
            "p99_us": _median_of(runs, "p99_us"), "std_us": _median_of(runs, "std_us"),
            "round_trips": sum(r["count"] for r in runs), "lost": sum(r["lost"] for r in runs),
            "repetitions": len(runs)}


def avg_p99_text(entry: dict) -> str:
    """`system avg/p99, ...` for a summary line."""
    return ", ".join(f"{name} {e['avg_us']:.1f}/{e['p99_us']:.1f}" for name, e in entry.items())


def table_cells(e: dict) -> list[str]:
    """avg, p50, p99, std (µs), round trips, lost: a results table's cells."""
    return [f"{e['avg_us']:.2f}", f"{e['p50_us']:.2f}", f"{e['p99_us']:.2f}", f"{e['std_us']:.2f}",
            str(e["round_trips"]), str(e["lost"])]


TABLE_HEADERS = ["avg µs", "p50 µs", "p99 µs", "std µs", "round trips", "lost"]


def run(options: Options) -> dict:
    started = timestamp()
    repetitions = options.reps(full=5)
    duration_ms, warmup_ms = (400, 100) if options.quick else (4000, 500)
    tool = build_c_tool("rr", "the latency client")
    raw: list[dict] = []
    errors: dict[str, str] = {}
    with exclusive_machine(), Lab(options.lab_prefix) as lab:
        line = build_line(lab, 50)
        _prepare(line)
        sink = Sink(line)

        def measure(index: int, name: str) -> None:
            with SYSTEMS[name].install(line):
                for sessions in SESSIONS:
                    result = round_trips(line, tool, sessions, duration_ms, warmup_ms)
                    raw.append({"repetition": index, "system": name, "sessions": sessions, **result})
                    progress(f"latency [{index + 1}/{repetitions}] {name}, {sessions} session(s): "
                             f"avg {result.get('avg_us', 0):.1f} µs, p99 {result.get('p99_us', 0):.1f} µs")

        try:
            in_turn(SYSTEM_NAMES, repetitions, measure, errors, "latency")
        finally:
            sink.close()
    by_sessions: dict[str, dict] = {}
    for sessions in SESSIONS:
        entry = {}
        for name in SYSTEM_NAMES:
            runs = [r for r in raw if r["system"] == name and r["sessions"] == sessions and r.get("count")]
            if runs:
                entry[name] = {**summarize_runs(runs), "sessions": sessions}
        by_sessions[str(sessions)] = entry
    return {
        "scenario": "latency",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": {
            "client": "tools/rr.c: connected UDP sockets, one request in flight per session, CLOCK_MONOTONIC",
            "server": "XDP reflector on the sink (addresses and ports swapped, XDP_TX)",
            "frame_bytes": 64,
            "sessions": list(SESSIONS),
            "duration_ms": duration_ms,
            "warmup_ms": warmup_ms,
            "repetitions": repetitions,
            "aggregation": "median over repetitions of each run's avg / p99 / std",
        },
        "latency": by_sessions[str(SESSIONS[0])],
        "latency_by_sessions": by_sessions,
        "systems": {},
        "ratios": {},
        "errors": errors,
        "runs": raw,
    }


def summary_line(result: dict) -> str:
    parts = []
    for sessions, entry in result["latency_by_sessions"].items():
        parts.append(f"{sessions} session(s): {avg_p99_text(entry)}")
    return "latency avg/p99 µs: " + " | ".join(parts)


def markdown(result: dict) -> str:
    rows = []
    for sessions, entry in result["latency_by_sessions"].items():
        for name, e in entry.items():
            rows.append([sessions, name, *table_cells(e)])
    return (f"# latency benchmark, {result['timestamp']}\n\nRound trips across the DUT (both directions "
            "forwarded), 64-byte UDP frames, XDP reflector as server.\n\n"
            + table(["sessions", "system", *TABLE_HEADERS], rows))


def plot(result: dict, path: Path, plt) -> None:
    groups = list(result["latency_by_sessions"].items())
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), squeeze=False)
    for axis, (sessions, entry) in zip(axes[0], groups):
        names = list(entry)
        xs = range(len(names))
        axis.bar([x - 0.2 for x in xs], [entry[n]["avg_us"] for n in names], width=0.4,
                 yerr=[entry[n]["std_us"] for n in names], capsize=3, label="average ± std")
        axis.bar([x + 0.2 for x in xs], [entry[n]["p99_us"] for n in names], width=0.4, label="p99")
        axis.set_xticks(list(xs))
        axis.set_xticklabels(names)
        axis.set_ylabel("round-trip time (µs)")
        axis.set_title(f"{sessions} session(s)")
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
