"""`linuxfp bench scale`: the controller with large configurations.

- start-up: time from `linuxfp run` to `ready` and the controller's memory
  (VmRSS, VmHWM) with 1 k / 10 k / 100 k / 800 k routes (a BGP full table),
  and with 10 k bridge FDB entries;
- churn under the full table: 10 k route replaces in one `ip -batch` while
  a neighbour and an address change: how long each of those waited to be
  applied behind the burst;
- burst: 10 k route additions in one `ip -batch`, with the controller
  running: how many batches it coalesced them into, each batch's response
  time, and how long until it had absorbed the whole burst;
- interfaces: a namespace with 400 container-like veths (their peers in
  another namespace) at TC: time to `ready`, and the controller's work to
  accelerate one more veth (its response time for the new link's events);
- restarts under traffic: probes through the DUT while the controller is
  restarted with `--keep` (SIGTERM, then a new run adopts the datapath) and
  killed (SIGKILL without `--keep`, restarted as systemd would): probes
  lost, and the time the traffic spent on the kernel path per restart."""
from __future__ import annotations

import ipaddress
import signal
import statistics
import subprocess
import time
from pathlib import Path

from controller.launcher import ControllerProcess
from linuxfp.lab.counters import ip_forw_datagrams
from linuxfp.lab.netns import Lab

from .machine import machine
from .options import Options
from .probes import ProbeStream
from .response import _APPLIED
from .results import table, timestamp
from .sink import Sink
from .stats import percentile
from .throughput import exclusive_machine, progress
from .topology import SINK_IP, Line, build_line

FULL_ROUTE_COUNTS = (1_000, 10_000, 100_000, 800_000)
QUICK_ROUTE_COUNTS = (1_000,)
FDB_ENTRIES = 10_000
BURST = 10_000
QUICK_BURST = 1_000
# Route i is a /32 counted up from here, inside 198.18.0.0/15 and clear of the
# line's own /30s; past the end of the range the same /32s come again with the
# next metric (distinct routes: 800 000 fit).
FIRST_SCALE_ROUTE = ipaddress.ip_address("198.18.8.0")
SCALE_SPAN = int(ipaddress.ip_address("198.19.255.255")) - int(FIRST_SCALE_ROUTE) + 1
READY_TIMEOUT_S = 600.0
BURST_OFFSET = 110_000   # burst routes follow the 100 k start-up set
CHURN_PROTOCOL = 12      # replaces flip the routes' protocol: a change the kernel announces
NEIGH_PROBE, ADDR_PROBE = "198.18.3.1", "198.18.3.2"
CHURN_PROBES = 5     # neighbour and address changes made one after the other during the burst
APPLIED_TIMEOUT_S = 60.0
RESTARTS, QUICK_RESTARTS = 10, 2
RUNNING_AFTER_RESTART_S = 0.3   # traffic on the new controller's datapath before the next restart
INTERFACES, QUICK_INTERFACES = 400, 20
ADDED, QUICK_ADDED = 30, 3       # veths added one at a time to a running controller


def _routes(line: Line, start: int, count: int, verb: str = "add", extra: str = "") -> str:
    first = int(FIRST_SCALE_ROUTE)
    return "".join(f"route {verb} {ipaddress.ip_address(first + i % SCALE_SPAN)}/32 via {SINK_IP} "
                   f"dev {line.dut_out.ifname} metric {i // SCALE_SPAN}{extra}\n"
                   for i in range(start, start + count))


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


def start_up(line: Line, hook: str = "xdp") -> dict:
    started = time.monotonic()
    controller = ControllerProcess(line.dut.name, hook=hook, ready_timeout=READY_TIMEOUT_S)
    try:
        controller.start()
        ready_s = time.monotonic() - started
        assert controller.proc is not None  # start() returned, so it is running
        memory = _memory_kib(controller.proc.pid)
    finally:
        controller.stop()
    return {"ready_s": round(ready_s, 3), "rss_kib": memory.get("VmRSS"), "hwm_kib": memory.get("VmHWM")}


def _veths(pods, start: int, count: int) -> str:
    """`ip -batch` lines for veths vs<i> in the DUT whose peers are in `pods`,
    as a container runtime makes them."""
    return "".join(f"link add vs{i} type veth peer name vp{i} netns {pods.name}\nlink set vs{i} up\n"
                   for i in range(start, start + count))


def interfaces(line: Line, pods, count: int, added: int, repetitions: int) -> dict:
    """`count` container veths at TC: ready time, and the controller's
    response to each of `added` more veths made one at a time (`ip link add`
    and `set up`: the sum of its `applied` batches for them)."""
    _batch(line, "ip", _veths(pods, 0, count))
    runs = [start_up(line, hook="tc") for _ in range(repetitions)]
    responses = []
    with ControllerProcess(line.dut.name, hook="tc", ready_timeout=READY_TIMEOUT_S) as controller:
        controller.settled()
        for i in range(count, count + added):
            mark = len(controller.lines)
            _batch(line, "ip", _veths(pods, i, 1))
            controller.settled(quiet=0.05)
            applied = [m for m in map(_APPLIED.match, controller.lines[mark:]) if m]
            responses.append(sum(float(m.group(2)) for m in applied))
    _batch(line, "ip", "".join(f"link del vs{i}\n" for i in range(count + added)))
    return {"interfaces": count, "ready": _summarize_startup(count, "tc interfaces", runs),
            "added": added, "added_p50_ms": round(percentile(responses, 50), 3),
            "added_p99_ms": round(percentile(responses, 99), 3), "added_ms": [round(r, 3) for r in responses]}


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


def _applied_after(controller: ControllerProcess, mark: int, kind: str, since: float) -> float | None:
    """Seconds from `since` until the controller printed an `applied` line
    with `kind` among its kinds (after line `mark`); None on timeout."""
    while time.monotonic() - since < APPLIED_TIMEOUT_S:
        for line in controller.lines[mark:]:
            m = _APPLIED.match(line)
            if m and kind in m.group(1).split(","):
                return time.monotonic() - since
        time.sleep(0.0005)
    return None


def _worst_ms(samples: list[float | None]) -> float | None:
    """The slowest sample in ms (None when one was never applied)."""
    return None if not samples or None in samples else round(max(samples) * 1e3, 2)  # type: ignore[type-var]


def churn(line: Line, present: int, size: int) -> dict:
    """`size` replaces of the routes present, and meanwhile a neighbour and
    an address change: each must be applied within its own response time,
    not after the burst (issue 7: ≤ 20 ms at 800 k routes)."""
    out = line.dut_out.ifname
    with ControllerProcess(line.dut.name, hook="xdp", ready_timeout=READY_TIMEOUT_S) as controller:
        controller.settled(timeout=READY_TIMEOUT_S)
        first = len(controller.lines)
        commands = _routes(line, 0, min(size, present), verb="replace", extra=f" proto {CHURN_PROTOCOL}")
        started = time.monotonic()
        batch = subprocess.Popen(line.dut.exec_argv(["ip", "-batch", "-"]), stdin=subprocess.PIPE, text=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert batch.stdin is not None
        batch.stdin.write(commands)
        batch.stdin.close()
        time.sleep(0.02)   # the burst is under way
        neigh_ms, addr_ms = [], []
        for i in range(CHURN_PROBES):
            # From the moment the kernel has the change (the command has
            # returned) to the controller's `applied` line naming its kind.
            mark = len(controller.lines)
            line.dut.run(["ip", "neigh", "replace", NEIGH_PROBE, "lladdr", f"02:5c:00:00:00:{i + 1:02x}", "dev", out,
                          "nud", "permanent"])
            neigh_ms.append(_applied_after(controller, mark, "neigh", time.monotonic()))
            mark = len(controller.lines)
            verb = "add" if i % 2 == 0 else "del"
            line.dut.run(["ip", "addr", verb, f"{ADDR_PROBE}/32", "dev", out])
            addr_ms.append(_applied_after(controller, mark, "addr", time.monotonic()))
        burst_running = batch.poll() is None
        if batch.wait(timeout=READY_TIMEOUT_S) != 0:
            raise RuntimeError(f"ip -batch failed: {batch.stderr.read().strip()[:500] if batch.stderr else ''}")
        command_s = time.monotonic() - started
        controller.settled(timeout=READY_TIMEOUT_S)
        absorbed_s = time.monotonic() - started
        batches = [float(m.group(2)) for m in map(_APPLIED.match, controller.lines[first:]) if m]
    line.dut.run(["ip", "neigh", "del", NEIGH_PROBE, "dev", out])
    if CHURN_PROBES % 2:
        line.dut.run(["ip", "addr", "del", f"{ADDR_PROBE}/32", "dev", out])
    return {
        "routes": present,
        "replaces": min(size, present),
        "neigh_applied_ms": _worst_ms(neigh_ms),
        "addr_applied_ms": _worst_ms(addr_ms),
        "neigh_applied_ms_all": [None if v is None else round(v * 1e3, 2) for v in neigh_ms],
        "addr_applied_ms_all": [None if v is None else round(v * 1e3, 2) for v in addr_ms],
        "burst_still_running": burst_running,
        "command_s": round(command_s, 3),
        "absorbed_after_s": round(absorbed_s, 3),
        "batches": len(batches),
        "batch_max_ms": round(max(batches), 3) if batches else None,
    }


def restarts(line: Line, how: str, count: int) -> dict:
    """Probes (one every ~0.1 ms) to a routed destination while the
    controller is restarted `count` times, `how` = "keep" or "kill". Lost =
    probes sent − probes the sink saw; kernel path = probes the DUT's kernel
    forwarded (ForwDatagrams), as time at the measured probe rate."""
    keep = how == "keep"
    daddr, dmac = line.prefix_address(0), line.snk.mac
    sink = Sink(line)
    probes = ProbeStream(line)
    controller = ControllerProcess(line.dut.name, hook="xdp", keep=keep)
    try:
        controller.start()
        controller.settled()
        # Sent and seen counted from before the first probe to after the
        # last one has arrived, with none in flight at either end: sampled
        # while probes ran, the baselines read a few ms apart counted the
        # probes sent in between, seen before the sink's baseline, as lost
        # (3-4 per run at 4 400 probes/s). (The kernel's count, a counter
        # of its own, is taken once the traffic runs on the fast path.)
        sent0 = probes.sent
        seen0 = _probes_seen(sink, daddr, dmac)
        started = time.monotonic()
        probes.aim(daddr)
        time.sleep(RUNNING_AFTER_RESTART_S)
        forwarded0 = ip_forw_datagrams(line.dut)
        for _ in range(count):
            controller.stop(signal.SIGTERM if keep else signal.SIGKILL)
            controller = ControllerProcess(line.dut.name, hook="xdp", keep=keep)
            controller.start()
            controller.settled()
            time.sleep(RUNNING_AFTER_RESTART_S)
        probes.aim(None)
        elapsed = time.monotonic() - started
        time.sleep(0.2)   # the last probes are sent and arrive
        sent = probes.sent - sent0
        seen = _probes_seen(sink, daddr, dmac) - seen0
        kernel = ip_forw_datagrams(line.dut) - forwarded0
    finally:
        probes.close()
        controller.stop()
        if keep:
            # Adopted without --keep, the kept datapath leaves with this run.
            with ControllerProcess(line.dut.name, hook="xdp"):
                pass
        sink.close()
    rate = sent / elapsed if elapsed > 0 else 0.0
    return {
        "how": how,
        "restarts": count,
        "probes_sent": sent,
        "probes_lost": sent - seen,
        "kernel_forwarded": kernel,
        "probe_rate_pps": round(rate),
        "kernel_path_ms_per_restart": round(kernel / rate / count * 1e3, 2) if rate and count else None,
    }


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


def _probes_seen(sink: Sink, daddr: str, dmac: str) -> int:
    seen = sink.probe_seen(daddr, dmac)
    return seen.count if seen is not None else 0


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
        churned = churn(line, present, burst_size)
        progress(f"scale: {churned['replaces']} replaces over {present} routes: neighbour applied after "
                 f"{churned['neigh_applied_ms']} ms, address after {churned['addr_applied_ms']} ms, "
                 f"burst absorbed after {churned['absorbed_after_s']} s")
        _batch(line, "ip", _routes(line, counts[0], present - counts[0], verb="del"))
        bursts = burst(line, burst_size)
        progress(f"scale: burst of {burst_size} route changes absorbed after {bursts['absorbed_after_s']} s "
                 f"in {bursts['batches']} batch(es)")
        restart_count = QUICK_RESTARTS if options.quick else RESTARTS
        restarted = [restarts(line, how, restart_count) for how in ("keep", "kill")]
        for r in restarted:
            progress(f"scale: {r['restarts']} restarts ({r['how']}) under {r['probe_rate_pps']} probes/s: "
                     f"{r['probes_lost']} lost, {r['kernel_path_ms_per_restart']} ms on the kernel path each")
        veths = QUICK_INTERFACES if options.quick else INTERFACES
        ifaces = interfaces(line, lab.namespace("bpods"), veths, QUICK_ADDED if options.quick else ADDED,
                            repetitions)
        progress(f"scale: {veths} TC interfaces: ready after {ifaces['ready']['ready_s_median']} s; one more "
                 f"accelerated in p50 {ifaces['added_p50_ms']} ms of controller work")
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
            "interfaces": "veths whose peers are in another namespace, `linuxfp run --hook tc`; added_ms = the "
                          "sum of the controller's `applied` batches after `ip link add` + `set up` of one more",
            "repetitions": repetitions,
            "burst": f"{burst_size} route additions in one ip -batch with the controller running",
            "churn": f"{burst_size} route replaces (protocol flipped) over the largest table; from 20 ms into "
                     f"the burst, {CHURN_PROBES} × (`ip neigh replace`, `ip addr add|del`) one after the other; "
                     "applied_ms = the slowest of command returned → the controller's `applied` line naming "
                     "that kind",
        },
        "startup": startup,
        "churn": churned,
        "burst": bursts,
        "restarts": restarted,
        "interfaces": ifaces,
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
    for r in result.get("restarts", ()):
        parts.append(f"{r['restarts']} restarts ({r['how']}): {r['probes_lost']} probes lost, "
                     f"{r['kernel_path_ms_per_restart']} ms on the kernel path each")
    if i := result.get("interfaces"):
        parts.append(f"{i['interfaces']} TC interfaces: ready {i['ready']['ready_s_median']} s, one more "
                     f"accelerated in p50 {i['added_p50_ms']} ms")
    if c := result.get("churn"):
        parts.append(f"{c['replaces']} replaces over {c['routes']} routes: neighbour applied after "
                     f"{c['neigh_applied_ms']} ms, address after {c['addr_applied_ms']} ms")
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
              f"{b['absorbed_after_s']} s after the burst started.\n"
            + _churn_markdown(result.get("churn")) + _restarts_markdown(result.get("restarts", ()))
            + _interfaces_markdown(result.get("interfaces")))


def _interfaces_markdown(i: dict | None) -> str:
    if not i:
        return ""
    return (f"\n{i['interfaces']} container veths at TC: ready after {i['ready']['ready_s_median']} s (median); "
            f"each of {i['added']} more veths accelerated in p50 {i['added_p50_ms']} ms, p99 {i['added_p99_ms']} ms "
            f"of controller work (target 0.3 ms p50 per interface, 1 s ready for 400).\n")


def _restarts_markdown(rows) -> str:
    if not rows:
        return ""
    return ("\nRestarts under traffic (probes every ~0.1 ms to a routed destination):\n\n"
            + table(["restart", "times", "probes sent", "lost", "kernel-forwarded", "kernel path per restart (ms)"],
                    [[{"keep": "SIGTERM + run --keep (adopt)", "kill": "SIGKILL + run (no --keep)"}[r["how"]],
                      str(r["restarts"]), str(r["probes_sent"]), str(r["probes_lost"]),
                      str(r["kernel_forwarded"]), str(r["kernel_path_ms_per_restart"])] for r in rows]))


def _churn_markdown(c: dict | None) -> str:
    if not c:
        return ""
    return (f"\nChurn over {c['routes']} routes: {c['replaces']} route replaces in one `ip -batch` "
            f"({c['command_s']} s; still running when both probes were applied: {c['burst_still_running']}); "
            f"{CHURN_PROBES} neighbour changes were applied at worst {c['neigh_applied_ms']} ms and "
            f"{CHURN_PROBES} address changes at worst {c['addr_applied_ms']} ms after their commands returned; the burst was absorbed {c['absorbed_after_s']} s "
            f"after it started ({c['batches']} batches, longest {c['batch_max_ms']} ms).\n")


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
