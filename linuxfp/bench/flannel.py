"""`linuxfp bench flannel`: pod-to-pod request/response on Kubernetes-style
nodes running the real Flannel (linuxfp/lab/flannel.py: etcd, flanneld with
its VXLAN backend, the CNI plugins, kube-proxy's rules, br_netfilter on),
Linux alone against Linux with a LinuxFP controller in every node, in the
same run.

Client: the latency client (tools/rr.c: connected UDP sockets, one request
in flight per session) in a pod of node 1; server: tools/udp_echo.c in
another pod of node 1 (intra-node: across cni0) and in a pod of node 2
(inter-node: across cni0, flannel.1 and the underlay, both ways). Each run
opens new flows, so each warms up for longer than connection tracking
takes to call a UDP flow a stream (2 s): until then the filter node leaves
it to the kernel. Everything shares the machine's CPUs, so a round trip's
time is the CPU path of both directions through both nodes.

TCP bulk: iperf3 (Debian's) from the same client pod to a server in each
of those pods, 1 and 4 parallel streams; Gbit/s received, and the IPv4
packets the nodes' kernels forwarded meanwhile (a GSO packet counts once),
which says how much of the bulk took the kernel's path.

64 B UDP: iperf3 -u at full speed with 18-byte payloads (64-byte frames)
from the client pod to each server pod, its first seconds omitted (the
connection's reply and conntrack's stream mark come first); the datagrams
the server received per second, and per CPU-second of the whole machine
(every CPU's busy time from /proc/stat over the measured seconds: sender,
receiver and both nodes share the 2 vCPUs, so this is what one packet costs
end to end)."""
from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import threading
import time
from types import SimpleNamespace
from pathlib import Path

from .latency import (PAYLOAD, TABLE_HEADERS, avg_p99_text, client_round_trips, in_turn, summarize_runs,
                      table_cells)
from .machine import machine
from .options import Options
from .programs import build_c_tool
from .results import table, timestamp
from .throughput import exclusive_machine, progress

SYSTEM_NAMES = ("linux", "linuxfp")
PLACEMENTS = ("intra-node", "inter-node")
ECHO_PORT = 7007
IPERF_PORT = 5201
WARMUP_MS = 2600      # > conntrack's 2 s stream mark, so the measured part can be fast-pathed
UDP_PAYLOAD = 18      # 64-byte frames: 14 Ethernet + 20 IPv4 + 8 UDP + 18 (+ 4 FCS on a wire)
# 1 228-byte inner packets: past what a VXLAN egress sends without asking its
# remote's outer route (502 by default), under flannel.1's MTU (1 450)
UDP_LARGE_PAYLOAD = 1200
QUICK_WARMUP_MS = 300  # --quick proves the harness only: its flows stay with the kernel


def run(options: Options, look=None) -> dict:
    """Measure; `look(lab)`, if given, runs in each LinuxFP measurement once
    its traffic has gone through (the demo shows the nodes' graphs and
    counters with it)."""
    from linuxfp.lab.counters import ip_forw_datagrams
    from linuxfp.lab.flannel import FlannelLab, FlannelLabSpec, check_dependencies

    started = timestamp()
    repetitions = options.reps(full=3)
    sessions_list = (1,) if options.quick else (1, 16)
    streams_list = (1,) if options.quick else (1, 4)
    duration_ms = 500 if options.quick else 3000
    bulk_seconds = 1 if options.quick else 5
    # (the demo looks inside: its quick run warms up fully, so there is a fast path to show)
    warmup_ms = QUICK_WARMUP_MS if options.quick and look is None else WARMUP_MS
    check_dependencies()
    client_tool = build_c_tool("rr", "the latency client")
    echo_tool = build_c_tool("udp_echo", "the pods' echo server")
    rng = random.Random()
    raw: list[dict] = []
    bulk_raw: list[dict] = []
    udp_raw: list[dict] = []
    udp_large_raw: list[dict] = []
    udp_seconds = 1 if options.quick else 3
    udp_omit = (warmup_ms + 999) // 1000
    errors: dict[str, str] = {}
    progress("flannel: bringing the lab up (the first run builds flanneld: a few minutes)")
    with exclusive_machine(), FlannelLab.up(FlannelLabSpec(nodes=2, pods_per_node=2,
                                                           name=f"{options.lab_prefix}{rng.randrange(1 << 20):x}"),
                                            progress=lambda message: progress(f"flannel lab: {message}")) as lab:
        client, local_server = lab.pods_on("node1")
        remote_server = lab.pods_on("node2")[0]
        servers = {"intra-node": local_server, "inter-node": remote_server}
        nodes = [lab.namespace("node1"), lab.namespace("node2")]
        echoes: list[subprocess.Popen] = []

        def measure(index: int, name: str) -> None:
            with _system(name, nodes, (lambda: look(lab)) if look else None):
                for placement in PLACEMENTS:
                    for sessions in sessions_list:
                        before = [ip_forw_datagrams(node) for node in nodes]
                        result = client_round_trips(lab.namespace(client.name).exec_argv, client_tool,
                                                    servers[placement].ip, ECHO_PORT, sessions, duration_ms, warmup_ms)
                        forwarded = sum(ip_forw_datagrams(node) - b for node, b in zip(nodes, before))
                        raw.append({"repetition": index, "system": name, "placement": placement,
                                    "sessions": sessions, "kernel_forwarded": forwarded, **result})
                        progress(f"flannel [{index + 1}/{repetitions}] {name}, {placement}, {sessions} session(s): "
                                 f"avg {result.get('avg_us', 0):.1f} µs, p99 {result.get('p99_us', 0):.1f} µs")
                for placement in PLACEMENTS:
                    for streams in streams_list:
                        before = [ip_forw_datagrams(node) for node in nodes]
                        result = _tcp_bulk(lab.namespace(client.name), servers[placement].ip, streams, bulk_seconds)
                        forwarded = sum(ip_forw_datagrams(node) - b for node, b in zip(nodes, before))
                        bulk_raw.append({"repetition": index, "system": name, "placement": placement,
                                         "streams": streams, "kernel_forwarded": forwarded, **result})
                        progress(f"flannel [{index + 1}/{repetitions}] {name}, {placement}, TCP bulk, "
                                 f"{streams} stream(s): {result['gbit_s']:.2f} Gbit/s, "
                                 f"{forwarded} packets forwarded by the kernels")
                for placement in PLACEMENTS:
                    server = servers[placement]
                    result = _udp_flood(lab.namespace(client.name), SimpleNamespace(
                        ip=server.ip, namespace=lab.namespace(server.name)), udp_seconds, udp_omit)
                    udp_raw.append({"repetition": index, "system": name, "placement": placement, **result})
                    progress(f"flannel [{index + 1}/{repetitions}] {name}, {placement}, 64 B UDP: "
                             f"{result['pps'] / 1e3:.0f} kpps received, "
                             f"{result['per_cpu_second'] / 1e3:.0f} k per CPU-second")
                # long datagrams cross flannel.1 inter-node only (a bridge has no cap)
                before = [ip_forw_datagrams(node) for node in nodes]
                result = _udp_flood(lab.namespace(client.name), SimpleNamespace(
                    ip=remote_server.ip, namespace=lab.namespace(remote_server.name)), udp_seconds, udp_omit,
                    UDP_LARGE_PAYLOAD)
                forwarded = sum(ip_forw_datagrams(node) - b for node, b in zip(nodes, before))
                udp_large_raw.append({"repetition": index, "system": name, "placement": "inter-node",
                                      "kernel_forwarded": forwarded, **result})
                progress(f"flannel [{index + 1}/{repetitions}] {name}, inter-node, {UDP_LARGE_PAYLOAD} B UDP: "
                         f"{result['pps'] / 1e3:.0f} kpps received, "
                         f"{result['per_cpu_second'] / 1e3:.0f} k per CPU-second, "
                         f"{forwarded} packets forwarded by the kernels")

        try:
            for pod in servers.values():
                echoes.append(_start_echo(lab.namespace(pod.name), echo_tool))
                echoes.append(_start_iperf_server(lab.namespace(pod.name)))
            in_turn(SYSTEM_NAMES, repetitions, measure, errors, "flannel")
        finally:
            for echo in echoes:
                echo.kill()
                echo.wait()
    latency: dict[str, dict] = {}
    reductions: dict[str, float] = {}
    for placement in PLACEMENTS:
        latency[placement] = {}
        for sessions in sessions_list:
            entry = {}
            for name in SYSTEM_NAMES:
                runs = [r for r in raw if r["system"] == name and r["placement"] == placement
                        and r["sessions"] == sessions and r.get("count")]
                if runs:
                    entry[name] = summarize_runs(runs)
            latency[placement][str(sessions)] = entry
            if {"linux", "linuxfp"} <= set(entry):
                reductions[f"{placement}, {sessions} session(s)"] = round(
                    1 - entry["linuxfp"]["avg_us"] / entry["linux"]["avg_us"], 3)
    bulk: dict[str, dict] = {}
    gains: dict[str, float] = {}
    for placement in PLACEMENTS:
        bulk[placement] = {}
        for streams in streams_list:
            entry = {}
            for name in SYSTEM_NAMES:
                runs = [r for r in bulk_raw if r["system"] == name and r["placement"] == placement
                        and r["streams"] == streams]
                if runs:
                    entry[name] = {"gbit_s": round(statistics.median(r["gbit_s"] for r in runs), 3),
                                   "kernel_forwarded": int(statistics.median(r["kernel_forwarded"] for r in runs)),
                                   "retransmits": sum(r["retransmits"] for r in runs), "repetitions": len(runs)}
            bulk[placement][str(streams)] = entry
            if {"linux", "linuxfp"} <= set(entry) and entry["linux"]["gbit_s"]:
                gains[f"{placement}, {streams} stream(s)"] = round(
                    entry["linuxfp"]["gbit_s"] / entry["linux"]["gbit_s"] - 1, 3)
    udp, udp_gains = _udp_summary(udp_raw, PLACEMENTS)
    udp_large, udp_large_gains = _udp_summary(udp_large_raw, ("inter-node",))
    return {
        "scenario": "flannel",
        "supported": True,
        "quick": options.quick,
        "timestamp": started,
        "machine": machine(),
        "method": {
            "lab": "2 Flannel nodes (flanneld v0.28.4, VXLAN VNI 1), 2 pods each, kube-proxy-like rules, "
                   "br_netfilter on",
            "client": "tools/rr.c in node 1's first pod: connected UDP sockets, one request in flight per session",
            "server": "tools/udp_echo.c in node 1's second pod (intra-node) and node 2's first pod (inter-node)",
            "linuxfp": "a controller in each node namespace (hook auto: TC on pod veths and flannel.1)",
            "payload_bytes": PAYLOAD,
            "sessions": list(sessions_list),
            "tcp_bulk": f"iperf3 -c SERVER -t {bulk_seconds} -P STREAMS from the client pod to an iperf3 -s in each "
                        "server pod; Gbit/s received (median over repetitions); kernel_forwarded: IPv4 packets "
                        "the nodes' kernels forwarded during the run (a GSO packet counts once)",
            "streams": list(streams_list),
            "udp64": f"iperf3 -c SERVER -u -b 0 -l {UDP_PAYLOAD} -t {udp_seconds} -O {udp_omit} from the client pod; "
                     "pps: datagrams the server pod's sockets received (UDP InDatagrams) per second of the "
                     "measured window; per_cpu_second: those per second of the machine's busy CPU time "
                     "(/proc/stat user+nice+system+irq+softirq, every CPU) over the same window; sent_pps: "
                     "iperf3's own count; medians over repetitions",
            "udp_large": f"the same with -l {UDP_LARGE_PAYLOAD} (1 228-byte inner packets, past a VXLAN egress's "
                         "cap: each asks its remote's outer route), inter-node only; kernel_forwarded: IPv4 "
                         "packets the nodes' kernels forwarded during the run",
            "warmup_ms": warmup_ms,
            "duration_ms": duration_ms,
            "repetitions": repetitions,
            "aggregation": "median over repetitions of each run's avg / p50 / p99 / std; kernel_forwarded: "
                           "IPv4 packets the nodes' kernels forwarded during a run, warm-up included",
        },
        "latency": latency,
        "reductions": reductions,
        "tcp_bulk": bulk,
        "tcp_bulk_gains": gains,
        "systems": {},
        "ratios": {},
        "errors": errors,
        "runs": raw,
        "tcp_bulk_runs": bulk_raw,
        "udp64": udp,
        "udp64_gains": udp_gains,
        "udp64_runs": udp_raw,
        "udp_large": udp_large,
        "udp_large_gains": udp_large_gains,
        "udp_large_runs": udp_large_raw,
    }


def _udp_summary(runs_raw: list[dict], placements) -> tuple[dict, dict]:
    """Per placement and system, the medians of the UDP runs; LinuxFP's gain
    per CPU-second over Linux's."""
    summary: dict[str, dict] = {}
    gains: dict[str, float] = {}
    for placement in placements:
        entry = {}
        for name in SYSTEM_NAMES:
            runs = [r for r in runs_raw if r["system"] == name and r["placement"] == placement]
            if runs:
                entry[name] = {key: round(statistics.median(r[key] for r in runs), 1)
                               for key in ("pps", "per_cpu_second", "cpu_seconds", "sent_pps")}
                if all("kernel_forwarded" in r for r in runs):
                    entry[name]["kernel_forwarded"] = int(statistics.median(r["kernel_forwarded"] for r in runs))
                entry[name]["repetitions"] = len(runs)
        summary[placement] = entry
        if {"linux", "linuxfp"} <= set(entry) and entry["linux"]["per_cpu_second"]:
            gains[placement] = round(entry["linuxfp"]["per_cpu_second"] / entry["linux"]["per_cpu_second"] - 1, 3)
    return summary, gains


def _start_iperf_server(pod) -> subprocess.Popen:
    """iperf3's server in `pod`, one test at a time, until killed."""
    proc = subprocess.Popen(pod.exec_argv(["iperf3", "-s", "-p", str(IPERF_PORT), "--forceflush"]), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    if proc.stdout is None or "Server listening" not in proc.stdout.readline() + proc.stdout.readline():
        proc.kill()
        raise RuntimeError(f"iperf3's server in {pod.name} did not start")
    # read what it prints after each test, or a full pipe would stop it mid-test
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc


def _tcp_bulk(pod, address: str, streams: int, seconds: int) -> dict:
    """One iperf3 TCP run from `pod` to `address`: Gbit/s received and the
    sender's retransmissions."""
    argv = ["iperf3", "-c", address, "-p", str(IPERF_PORT), "-t", str(seconds), "-P", str(streams), "-J"]
    done = subprocess.run(pod.exec_argv(argv), capture_output=True, text=True, check=False, timeout=seconds + 30)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = {"error": done.stderr.strip() or done.stdout.strip()[:200]}
    if done.returncode != 0 or "error" in report:
        raise RuntimeError(f"iperf3 to {address} failed: {report.get('error', done.returncode)}")
    end = report["end"]
    return {"gbit_s": round(end["sum_received"]["bits_per_second"] / 1e9, 3),
            "retransmits": end["sum_sent"].get("retransmits", 0)}


def _udp_flood(pod, server, seconds: int, omit: int, payload: int = UDP_PAYLOAD) -> dict:
    """iperf3 -u at full speed with `payload`-byte datagrams (18: 64-byte frames) from `pod` to the
    `server` pod: what the server's sockets received per second over the
    measured seconds, and per second of the machine's busy CPU time over the
    same window. Both counted on the receiving side (UDP InDatagrams in the
    server's namespace) at the same moments as the CPU time: Debian's iperf3
    (3.12) reports a loss that includes the omitted seconds."""
    from linuxfp.lab.counters import snmp

    argv = ["iperf3", "-c", server.ip, "-p", str(IPERF_PORT), "-u", "-b", "0", "-l", str(payload),
            "-t", str(seconds), "-O", str(omit), "-J"]
    proc = subprocess.Popen(pod.exec_argv(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(omit)            # (the omitted seconds are not measured)
    start = (time.monotonic(), _busy_cpu_seconds(), snmp(server.namespace)["Udp"]["InDatagrams"])
    time.sleep(seconds)
    end = (time.monotonic(), _busy_cpu_seconds(), snmp(server.namespace)["Udp"]["InDatagrams"])
    try:
        out, err = proc.communicate(timeout=omit + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"iperf3 -u to {server.ip} did not finish") from None
    try:
        report = json.loads(out)
    except json.JSONDecodeError:
        report = {"error": err.strip() or out.strip()[:200]}
    if proc.returncode != 0 or "error" in report:
        raise RuntimeError(f"iperf3 -u to {server.ip} failed: {report.get('error', proc.returncode)}")
    wall, busy, received = (b - a for a, b in zip(start, end))
    if wall <= 0 or busy <= 0:
        raise RuntimeError(f"{payload} B UDP: no time measured")
    return {"pps": received / wall, "per_cpu_second": received / busy, "cpu_seconds": busy,
            "sent_pps": report["end"]["sum"]["packets"] / max(report["end"]["sum"]["seconds"], 1e-9),
            "iperf3": report.get("start", {}).get("version", "")}


def _busy_cpu_seconds() -> float:
    """Every CPU's time running anything (user, nice, system, irq, softirq:
    not idle, I/O wait, nor the time the hypervisor stole) since boot."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _start_echo(pod, tool: Path) -> subprocess.Popen:
    proc = subprocess.Popen(pod.exec_argv([str(tool), str(ECHO_PORT)]), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    if proc.stdout is None or proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError(f"the echo server in {pod.name} did not start")
    return proc


def _system(name: str, nodes, look=None):
    import contextlib

    from controller.launcher import ControllerProcess

    @contextlib.contextmanager
    def linuxfp():
        with contextlib.ExitStack() as stack:
            controllers = [stack.enter_context(ControllerProcess(node.name, hook="auto")) for node in nodes]
            for controller in controllers:
                controller.settled()
            yield
            if look is not None:
                look()

    return linuxfp() if name == "linuxfp" else contextlib.nullcontext()


def summary_line(result: dict) -> str:
    parts = []
    for placement, by_sessions in result["latency"].items():
        for sessions, entry in by_sessions.items():
            parts.append(f"{placement} {sessions} session(s): {avg_p99_text(entry)}")
    text = "flannel pod-to-pod round trip avg/p99 µs: " + " | ".join(parts)
    bulk = [f"{placement} {streams} stream(s): " + " / ".join(f"{name} {e['gbit_s']:.2f}" for name, e in entry.items())
            for placement, by_streams in result.get("tcp_bulk", {}).items() for streams, entry in by_streams.items()]
    udp = [f"{placement}: " + " / ".join(f"{name} {e['per_cpu_second'] / 1e3:.0f}" for name, e in entry.items())
           for placement, entry in result.get("udp64", {}).items()]
    large = [f"{placement}: " + " / ".join(f"{name} {e['per_cpu_second'] / 1e3:.0f}" for name, e in entry.items())
             for placement, entry in result.get("udp_large", {}).items()]
    return (text + ("; TCP bulk Gbit/s: " + " | ".join(bulk) if bulk else "")
            + ("; 64 B UDP k per CPU-second: " + " | ".join(udp) if udp else "")
            + (f"; {UDP_LARGE_PAYLOAD} B UDP k per CPU-second: " + " | ".join(large) if large else ""))


def markdown(result: dict) -> str:
    rows = []
    for placement, by_sessions in result["latency"].items():
        for sessions, entry in by_sessions.items():
            for name, e in entry.items():
                rows.append([placement, sessions, name, *table_cells(e)])
    lines = [f"# flannel benchmark, {result['timestamp']}\n\n",
             "Pod-to-pod UDP round trips on two Flannel nodes (VXLAN), Linux alone vs LinuxFP in every node"
             f"{' (quick run)' if result['quick'] else ''}.\n\n",
             table(["placement", "sessions", "system", *TABLE_HEADERS], rows)]
    if result["reductions"]:
        lines.append("\nAverage round trip, LinuxFP vs Linux: " + ", ".join(
            f"{key} {abs(value):.0%} {'shorter' if value >= 0 else 'longer'}"
            for key, value in result["reductions"].items()) + "\n")
    lines += _section(
        "TCP bulk (iperf3), pod to pod", "TCP bulk",
        ["placement", "streams", "system", "Gbit/s", "kernel-forwarded packets", "retransmits"],
        [[placement, streams, name, f"{e['gbit_s']:.2f}", str(e["kernel_forwarded"]), str(e["retransmits"])]
         for placement, by_streams in result.get("tcp_bulk", {}).items()
         for streams, entry in by_streams.items() for name, e in entry.items()],
        result.get("tcp_bulk_gains"))
    lines += _section(
        "64 B UDP (iperf3 -u at full speed), pod to pod", "64 B UDP per CPU-second",
        ["placement", "system", "kpps received", "k per CPU-second", "busy CPU-s", "kpps sent"],
        [[placement, name, f"{e['pps'] / 1e3:.0f}", f"{e['per_cpu_second'] / 1e3:.0f}", f"{e['cpu_seconds']:.2f}",
          f"{e['sent_pps'] / 1e3:.0f}"]
         for placement, entry in result.get("udp64", {}).items() for name, e in entry.items()],
        result.get("udp64_gains"))
    lines += _section(
        f"{UDP_LARGE_PAYLOAD} B UDP (iperf3 -u -l {UDP_LARGE_PAYLOAD} at full speed), pod to pod across flannel.1",
        f"{UDP_LARGE_PAYLOAD} B UDP per CPU-second",
        ["placement", "system", "kpps received", "k per CPU-second", "busy CPU-s", "kpps sent",
         "kernel-forwarded packets"],
        [[placement, name, f"{e['pps'] / 1e3:.0f}", f"{e['per_cpu_second'] / 1e3:.0f}", f"{e['cpu_seconds']:.2f}",
          f"{e['sent_pps'] / 1e3:.0f}", str(e.get("kernel_forwarded", ""))]
         for placement, entry in result.get("udp_large", {}).items() for name, e in entry.items()],
        result.get("udp_large_gains"))
    return "".join(lines)


def _section(title: str, measure: str, headers: list[str], rows: list[list[str]], gains: dict | None) -> list[str]:
    """A table of runs under `title`, then LinuxFP's gain over Linux per row group."""
    if not rows:
        return []
    out = [f"\n{title}:\n\n", table(headers, rows)]
    if gains:
        out.append(f"\n{measure}, LinuxFP vs Linux: "
                   + ", ".join(f"{key} {value:+.0%}" for key, value in gains.items()) + "\n")
    return out
