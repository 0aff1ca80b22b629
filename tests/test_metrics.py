"""Prometheus metrics: `linuxfp stats --prometheus` checked by promtool and
`linuxfp run --metrics` scraped over HTTP, from a real controller in the
router lab; the fast-path counter adds back what the kernel's forwarding
counter no longer sees."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.launcher import ControllerFailed, ControllerProcess, _env, linuxfp_cli
from controller.metrics_server import parse_address
from controller.responsetime import BUCKETS_MS, ResponseTimes
from linuxfp.lab import entered, inject
from linuxfp.lab.frames import udp_frame

PORT = 9469     # each test's DUT is a fresh namespace: nothing else listens there


def udp_burst(router, count: int, dst: str = "198.19.3.7") -> None:
    frame = udp_frame(router.src_if.mac, router.dut_left.mac, str(router.src_if.ip), dst, size=64)
    inject(router.src, router.src_if.name, [frame] * count)


def samples(text: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(text: str, name: str, **labels) -> float | None:
    """The sum of `name`'s samples whose labels include `labels`; None if
    there is none."""
    found = [s.value for s in samples(text) if s.name == name and labels.items() <= s.labels.items()]
    return sum(found) if found else None


def promtool(text: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)


def scrape(router, port: int = PORT) -> str:
    """GET /metrics from inside the DUT (where the controller listens)."""
    with entered(router.dut):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            return response.read().decode()


@pytest.mark.netns
def test_stats_prometheus_passes_promtool_and_adds_back_forwarding(router_topology, ip_forw_datagrams):
    r = router_topology
    with ControllerProcess(r.dut.name, hook="xdp") as c:
        before = linuxfp_cli(r.dut.name, "stats", "--prometheus").stdout
        forw = ip_forw_datagrams(r.dut)
        udp_burst(r, 200)
        r.dut.run(["ip", "route", "replace", "blackhole", "198.19.4.0/24"])
        c.settled()
        udp_burst(r, 30, dst="198.19.4.9")
        text = linuxfp_cli(r.dut.name, "stats", "--prometheus").stdout

        check = promtool(text)
        assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check
        # What a dashboard adds to the kernel's forwarding counter: together
        # they count every forwarded packet, whoever forwarded it.
        fast = (value(text, "linuxfp_packets_total", interface="to-src", verdict="fast")
                - value(before, "linuxfp_packets_total", interface="to-src", verdict="fast"))
        assert fast + (ip_forw_datagrams(r.dut) - forw) == 200
        assert fast >= 190          # a fast path, not the kernel's
        assert value(text, "linuxfp_packets_total", interface="to-src", node="router", verdict="pass",
                     reason="fib_blackhole") >= 30
        # The FIB-answer cache's events, beside the verdicts: the burst's
        # answers came from it (one lookup per CPU at most, then hits).
        assert value(text, "linuxfp_packet_events_total", interface="to-src", event="fib_cache_hit") >= 150
        # Only the counters of the nodes on that ingress: no bridge series here.
        assert value(text, "linuxfp_packets_total", node="bridge") is None

        assert value(text, "linuxfp_controller_up") == 1
        assert value(text, "linuxfp_lease_held") == 1
        for ifname in ("to-src", "to-sink"):
            assert value(text, "linuxfp_interface_accelerated", interface=ifname, hook="xdp",
                         shape="xdp:router+transmit") == 1
        assert value(text, "linuxfp_interface_kernel_path", interface="lo") == 1
        assert value(text, "linuxfp_response_seconds_count") >= 1
        assert value(text, "linuxfp_last_applied_timestamp_seconds") == pytest.approx(time.time(), abs=60)
        netns = {s.labels["netns"] for s in samples(text) if s.name.startswith("linuxfp_")}
        assert len(netns) == 1 and netns.pop().startswith("ns-")
    # No controller: still valid for the textfile collector, and says so.
    text = linuxfp_cli(r.dut.name, "stats", "--prometheus").stdout
    assert promtool(text).returncode == 0
    assert value(text, "linuxfp_controller_up") == 0
    assert value(text, "linuxfp_packets_total") is None


@pytest.mark.netns
def test_run_metrics_serves_counters_that_grow(router_topology):
    r = router_topology
    with ControllerProcess(r.dut.name, hook="tc", extra_args=("--metrics", f"127.0.0.1:{PORT}")) as c:
        first = scrape(r)
        assert promtool(first).returncode == 0, promtool(first)
        fast0 = value(first, "linuxfp_packets_total", interface="to-src", verdict="fast")
        assert fast0 is not None
        udp_burst(r, 150)
        r.dut.run(["ip", "route", "replace", "blackhole", "198.19.4.0/24"])
        c.settled()
        second = scrape(r)
        assert value(second, "linuxfp_packets_total", interface="to-src", verdict="fast") >= fast0 + 140
        assert (value(second, "linuxfp_response_seconds_count")
                > (value(first, "linuxfp_response_seconds_count") or 0))
        # Known only inside the controller: the event loop renews every 0.2 s.
        renewed = value(second, "linuxfp_lease_renewed_timestamp_seconds")
        assert renewed == pytest.approx(time.time(), abs=5)
        assert value(second, "process_start_time_seconds") is not None
        assert value(second, "linuxfp_interface_accelerated", interface="to-src", hook="tc") == 1
    assert c.proc.returncode == 0, c.stderr()
    # Stopped with the controller: the port is closed.
    with entered(r.dut):
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=2)


@pytest.mark.netns
def test_metrics_port_in_use_fails_the_start_cleanly(router_topology):
    r = router_topology
    with entered(r.dut):
        taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        taken.bind(("127.0.0.1", PORT))
        taken.listen()
        with pytest.raises(ControllerFailed, match=f"cannot serve metrics on 127.0.0.1:{PORT}"):
            ControllerProcess(r.dut.name, hook="xdp", extra_args=("--metrics", f"127.0.0.1:{PORT}")).start()
    finally:
        taken.close()
    status = linuxfp_cli(r.dut.name, "-j", "status").stdout
    assert '"interfaces": []' in status and '"controller_pid": null' in status


def test_metrics_address_is_checked_before_anything_runs():
    done = subprocess.run([sys.executable, "-m", "controller.cli", "run", "--metrics", "9469"],
                          capture_output=True, text=True, env=_env())
    assert done.returncode == 2 and "expected ADDR:PORT" in done.stderr
    assert parse_address("127.0.0.1:9469") == ("127.0.0.1", 9469)
    assert parse_address("[::1]:9469") == ("::1", 9469)
    for bad in ("localhost", ":9469", "127.0.0.1:http", "127.0.0.1:70000"):
        with pytest.raises(ValueError):
            parse_address(bad)


def test_response_histogram_counts_every_batch():
    rt = ResponseTimes(limit=2)
    for ms in (0.05, 0.1, 0.3, 20000.0):
        rt.record({"route"}, ms, worked=ms > 1)
    rt.record({"link"}, 3.0, worked=True, resync=True)
    h = rt.histogram()
    assert h["le_ms"] == list(BUCKETS_MS)
    counts = dict(zip(BUCKETS_MS + (float("inf"),), h["counts"]))
    assert counts[0.1] == 2 and counts[0.5] == 1 and counts[5.0] == 1 and counts[float("inf")] == 1
    assert sum(h["counts"]) == h["total_batches"] == 5       # beyond the bounded samples
    assert h["updated_batches"] == 2 and h["resyncs"] == 1
    assert h["last_resync_unix"] == pytest.approx(time.time(), abs=5)
    assert rt.summary()["histogram"]["total_batches"] == 5


def test_a_node_counter_read_lower_for_a_moment_is_not_served_as_a_reset(monkeypatch):
    """The filter's per-rule counts can read lower for a moment (a flow's
    cache slot moved by another CPU between two map reads): served by the
    controller, a counter never goes down while its rules (epoch) stay, and
    starts afresh with new ones; the earlier rulesets' sum is a gauge."""
    from types import SimpleNamespace

    from controller import metrics, views
    from controller.namespace import NamespaceLayout

    readings = iter([(7, "0000000a"), (5, "0000000a"), (9, "0000000a"), (2, "0000000b")])

    def node_stats(layout, published=None):
        assert published == {"filter": "the controller's"}     # never a read of its own
        packets, generation = next(readings)
        row = {"backend": "legacy", "chain": "FORWARD", "position": 1, "rule": "-A FORWARD -j DROP",
               "packets": packets, "bytes": 100 * packets}
        return {"filter": {"generation": generation, "rules": [row],
                           "earlier_rulesets": {"packets": 3, "bytes": 300}}}

    monkeypatch.setattr(views, "node_stats", node_stats)
    collector = metrics.Collector(NamespaceLayout("/nonexistent", 1),
                                  controller=SimpleNamespace(published={"filter": "the controller's"}))
    served = []
    for _ in range(4):
        families = {f.name: f for f in collector._node_series("ns-1")}
        served.append(families["linuxfp_iptables_fast_path_packets"].samples[0].value)
        assert families["linuxfp_iptables_fast_path_earlier_packets"].type == "gauge"
    assert served == [7, 7, 9, 2]
