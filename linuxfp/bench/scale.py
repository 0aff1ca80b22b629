"""`linuxfp bench scale`: the controller with large configurations.

- start-up: time from `linuxfp run` to `ready` and the controller's memory
  (VmRSS, VmHWM) with 1 k / 10 k / 100 k routes, and with 10 k bridge FDB
  entries;
- burst: 10 k route additions in one `ip -batch`, with the controller
  running: how many batches it coalesced them into, each batch's response
  time, and how long until it had absorbed the whole burst."""
from __future__ import annotations

import ipaddress
import statistics
import subprocess
import time
from pathlib import Path

from controller.launcher import ControllerProcess
from linuxfp.lab.netns import Lab

from .machine import machine
from .options import Options
from .response import _APPLIED
from .results import table, timestamp
from .stats import percentile
from .throughput import exclusive_machine, progress
from .topology import SINK_IP, Line, build_line

FULL_ROUTE_COUNTS = (1_000, 10_000, 100_000)
QUICK_ROUTE_COUNTS = (1_000,)
FDB_ENTRIES = 10_000
BURST = 10_000
QUICK_BURST = 1_000
# /32 routes counted up from here stay inside 198.18.0.0/15 even at 100 k + burst.
FIRST_SCALE_ROUTE = ipaddress.ip_address("198.18.8.0")
READY_TIMEOUT_S = 600.0
BURST_OFFSET = 110_000   # burst routes follow the largest start-up set


def _routes(line: Line, start: int, count: int, verb: str = "add") -> str:
    first = int(FIRST_SCALE_ROUTE) + start
    return "".join(f"route {verb} {ipaddress.ip_address(first + i)}/32 via {SINK_IP} dev {line.dut_out.ifname}\n"
                   for i in range(count))


def _batch(line: Line, tool: str, commands: str) -> float:
    started = time.monotonic()
    done = subprocess.run(line.dut.exec_argv([tool, "-batch", "-"]), input=commands, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tool} -batch failed: {done.stderr.strip()[:500]}")
    return time.monotonic() - started


def _memory_kib(pid: int) -> dict[str, int]:
    fields = {}
    try:
        for row in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = row.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
    except OSError:
        pass
    return fields


def start_up(line: Line) -> dict:
    started = time.monotonic()
    controller = ControllerProcess(line.dut.name, hook="xdp", ready_timeout=READY_TIMEOUT_S)
    try:
        controller.start()
        ready_s = time.monotonic() - started
        assert controller.proc is not None  # start() returned, so it is running
        memory = _memory_kib(controller.proc.pid)
    finally:
        controller.stop()
    return {"ready_s": round(ready_s, 3), "rss_kib": memory.get("VmRSS"), "hwm_kib": memory.get("VmHWM")}


def _add_fdb(line: Line, entries: int) -> None:
    bridge, port, peer = "brs0", "bsp0", "bsq0"
    for argv in (("ip", "link", "add", bridge, "type", "bridge"),
                 ("ip", "link", "add", port, "type", "veth", "peer", "name", peer),
                 ("ip", "link", "set", port, "master", bridge),
                 ("ip", "link", "set", port, "up"), ("ip", "link", "set", peer, "up"),
                 ("ip", "link", "set", bridge, "up")):
        line.dut.run(list(argv))
    commands = "".join(f"fdb add 02:5c:{(i >> 16) & 0xff:02x}:{(i >> 8) & 0xff:02x}:{i & 0xff:02x}:01 "
                       f"dev {port} master static\n" for i in range(entries))
    _batch(line, "bridge", commands)


def burst(line: Line, size: int) -> dict:
    """`size` route additions in one batch while the controller runs."""
    with ControllerProcess(line.dut.name, hook="xdp", ready_timeout=READY_TIMEOUT_S) as controller:
        controller.settled()
        mark = len(controller.lines)
        started = time.monotonic()
        command_s = _batch(line, "ip", _routes(line, BURST_OFFSET, size))
        # Settled: no new `applied` line for a while after the burst.
        last_change, seen = time.monotonic(), len(controller.lines)
        while time.monotonic() - last_change < 1.0 and time.monotonic() - started < 120:
            time.sleep(0.01)
            if len(controller.lines) != seen:
                seen, last_change = len(controller.lines), time.monotonic()
        batches = [float(m.group(2)) for m in map(_APPLIED.match, controller.lines[mark:seen]) if m]
        absorbed_s = last_change - started
    _batch(line, "ip", _routes(line, BURST_OFFSET, size, verb="del"))
    return {
        "changes": size,
        "command_s": round(command_s, 3),
        "batches": len(batches),
        "batch_p50_ms": round(percentile(batches, 50), 3) if batches else None,
        "batch_p99_ms": round(percentile(batches, 99), 3) if batches else None,
        "batch_max_ms": round(max(batches), 3) if batches else None,
        "absorbed_after_s": round(absorbed_s, 3),
    }


def run(options: Options) -> dict:
    started = timestamp()
    counts = QUICK_ROUTE_COUNTS if options.quick else FULL_ROUTE_COUNTS
    repetitions = options.reps(full=3)
    burst_size = QUICK_BURST if options.quick else BURST
    startup: dict[str, dict] = {}
    with exclusive_machine(), Lab(options.lab_prefix) as lab:
        line = build_line(lab, 1)
        present = 0
        for count in counts:
            _batch(line, "ip", _routes(line, present, count - present))
            present = count
            runs = [start_up(line) for _ in range(repetitions)]
            startup[f"{count}_routes"] = _summarize_startup(count, "routes", runs)
            progress(f"scale: {count} routes: ready after {startup[f'{count}_routes']['ready_s_median']} s, "
                     f"RSS {startup[f'{count}_routes']['rss_kib_median']} KiB")
        _batch(line, "ip", _routes(line, counts[0], present - counts[0], verb="del"))
        bursts = burst(line, burst_size)
        progress(f"scale: burst of {burst_size} route changes absorbed after {bursts['absorbed_after_s']} s "
                 f"in {bursts['batches']} batch(es)")
        fdb_entries = 1_000 if options.quick else FDB_ENTRIES
        _add_fdb(line, fdb_entries)
        runs = [start_up(line) for _ in range(repetitions)]
        startup[f"{fdb_entries}_fdb"] = _summarize_startup(fdb_entries, "fdb entries", runs)
        progress(f"scale: {fdb_entries} FDB entries (+{counts[0]} routes): ready after "
                 f"{startup[f'{fdb_entries}_fdb']['ready_s_median']} s")
    return {
        "scenario": "scale",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": {
            "controller": "linuxfp run --hook xdp in the DUT; ready_s = spawn → `ready` line",
            "memory": "VmRSS / VmHWM of the controller process right after `ready`",
            "routes": "/32 routes added with ip -batch on top of the router line",
            "repetitions": repetitions,
            "burst": f"{burst_size} route additions in one ip -batch with the controller running",
        },
        "startup": startup,
        "burst": bursts,
        "systems": {},
        "ratios": {},
    }


def _summarize_startup(size: int, what: str, runs: list[dict]) -> dict:
    def median(key: str):
        values = [run[key] for run in runs if run.get(key) is not None]
        return round(statistics.median(values), 3) if values else None

    return {"size": size, "what": what, "ready_s_median": median("ready_s"),
            "rss_kib_median": median("rss_kib"), "hwm_kib_median": median("hwm_kib"), "runs": runs}


def summary_line(result: dict) -> str:
    parts = [f"{key}: ready {entry['ready_s_median']} s, RSS {(entry['rss_kib_median'] or 0) / 1024:.0f} MiB"
             for key, entry in result["startup"].items()]
    b = result["burst"]
    parts.append(f"burst of {b['changes']}: absorbed after {b['absorbed_after_s']} s in {b['batches']} batches")
    return "scale " + "; ".join(parts)


def markdown(result: dict) -> str:
    rows = [[str(e["size"]), e["what"], f"{e['ready_s_median']}", f"{(e['rss_kib_median'] or 0) / 1024:.1f}",
             f"{(e['hwm_kib_median'] or 0) / 1024:.1f}"] for e in result["startup"].values()]
    b = result["burst"]
    return (f"# scale benchmark, {result['timestamp']}\n\n"
            + table(["size", "configuration", "start-up s", "RSS MiB", "peak RSS MiB"], rows)
            + f"\nBurst of {b['changes']} route additions (`ip -batch`, {b['command_s']} s): "
              f"{b['batches']} controller batches, per-batch response p50 {b['batch_p50_ms']} ms, "
              f"p99 {b['batch_p99_ms']} ms, max {b['batch_max_ms']} ms; absorbed "
              f"{b['absorbed_after_s']} s after the burst started.\n")


def plot(result: dict, path: Path, plt) -> None:
    entries = [e for e in result["startup"].values() if e["what"] == "routes"]
    fig, left = plt.subplots(figsize=(6, 4))
    sizes = [e["size"] for e in entries]
    left.plot(sizes, [e["ready_s_median"] for e in entries], marker="o", label="start-up (s)")
    left.set_xscale("log")
    left.set_xlabel("routes")
    left.set_ylabel("start-up time (s)")
    right = left.twinx()
    right.plot(sizes, [(e["rss_kib_median"] or 0) / 1024 for e in entries], marker="s", color="tab:orange",
               label="RSS (MiB)")
    right.set_ylabel("RSS (MiB)")
    left.set_title("controller scale")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
