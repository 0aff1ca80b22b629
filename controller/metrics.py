"""Prometheus metrics of one namespace's datapath and controller, read at
scrape time from the same pins and /run files as `linuxfp status` and
`linuxfp stats` (controller/views.py), so `linuxfp stats --prometheus` (for
node_exporter's textfile collector) and `linuxfp run --metrics` (served by
the controller, controller/metrics_server.py) export the same series.

Every series has a `netns` label (ns-<netns cookie>): files of several
namespaces can sit side by side in one textfile directory. docs/operations.md
lists the metrics and which kernel counters the fast path bypasses."""
from __future__ import annotations

import importlib
import time

from linuxfp import datapath as dp
from linuxfp.synth import counters

from . import runtime_files, views
from .namespace import NamespaceLayout
from .version import version

INSTALL_HINT = ("needs the Python package prometheus_client: apt-get install python3-prometheus-client "
                "(Debian's python3), or pip install 'linuxfp[metrics]'")
REASON_MAX = 160    # a label value, not a log: the first line of an install error, cut


class MetricsUnavailable(Exception):
    """The metrics cannot be produced or served; the message says what to do."""


def require_client() -> None:
    try:
        importlib.import_module("prometheus_client")
    except ImportError:
        raise MetricsUnavailable(f"metrics {INSTALL_HINT}") from None


def _shape_nodes(shape: str) -> set[str] | None:
    """The nodes of an installed pipeline's shape ('xdp:router+transmit');
    None if the shape names a node no longer registered."""
    from linuxfp.graph import Shape

    try:
        return set(Shape.parse(shape).nodes)
    except ValueError:
        return None


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= REASON_MAX else line[: REASON_MAX - 1] + "…"


class Collector:
    """A prometheus_client collector over `layout`; with `controller` (the
    running Controller, when served by it) it adds what lives only in that
    process: the lease's last renewal and response times not yet in /run."""

    def __init__(self, layout: NamespaceLayout, controller=None) -> None:
        self.layout, self.controller = layout, controller
        # per counter series (and its epoch), the highest value served: a
        # count read lower for a moment is not a reset (Node.stats_series)
        self._served: dict[tuple, float] = {}

    def describe(self):
        # Registering a collector calls describe(); without it the registry
        # would run collect() (and read every map) just to learn the names.
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        ns = self.layout.name
        state = views.status(self.layout)
        running = bool(state["controller_pid"])

        info = InfoMetricFamily("linuxfp_build", "LinuxFP's version", labels=["netns"])
        info.add_metric([ns], {"version": version()})
        yield info
        up = GaugeMetricFamily("linuxfp_controller_up",
                               "1 while a `linuxfp run` holds this namespace's lock, 0 otherwise", labels=["netns"])
        up.add_metric([ns], 1 if running else 0)
        yield up

        yield from self._interfaces(ns, state)
        yield from self._packets(ns, state)
        yield from self._node_series(ns)

        lease = state.get("lease")
        if lease is not None:
            held = GaugeMetricFamily(
                "linuxfp_lease_held", "1 while the datapath may act; 0: every packet goes to the kernel "
                "(counted as lease_expired)", labels=["netns"])
            held.add_metric([ns], 1 if lease["held"] else 0)
            yield held
            watched = CounterMetricFamily(
                "linuxfp_watched_table_changes", "changes to watched tables (legacy iptables, ipsets, sysctls without events) "
                "the kernel announced; the datapath passes packets while one is being applied", labels=["netns"])
            watched.add_metric([ns], lease["watched_changes"])
            yield watched
        renewed = self._lease_renewed()
        if renewed is not None:
            g = GaugeMetricFamily("linuxfp_lease_renewed_timestamp_seconds",
                                  "when the event loop last renewed the lease (Unix time); the lease ends "
                                  "1 s after the last renewal", labels=["netns"])
            g.add_metric([ns], renewed)
            yield g
        if running:
            yield from self._response(ns)

    # -- datapath state ------------------------------------------------------

    def _interfaces(self, ns: str, state: dict):
        from prometheus_client.core import GaugeMetricFamily

        accelerated = GaugeMetricFamily(
            "linuxfp_interface_accelerated",
            "1 for each interface whose ingress a LinuxFP program serves; 0 if its program failed to "
            "install or is gone (then it is on the kernel path)",
            labels=["netns", "interface", "hook", "mode", "shape"])
        kernel = GaugeMetricFamily(
            "linuxfp_interface_kernel_path",
            "1 for each interface left on the kernel path, with the reason", labels=["netns", "interface", "reason"])
        for i in state["interfaces"]:
            active = i["state"] == "active"
            accelerated.add_metric([ns, i["ifname"], i["hook"], i["mode"] or "", i["shape"]], 1 if active else 0)
            if not active:
                reason = _first_line(i.get("error") or "") or f"program {i['state']}"
                kernel.add_metric([ns, i["ifname"], reason], 1)
        for s in state["kernel_path"]:
            kernel.add_metric([ns, s["ifname"], _first_line(s["reason"])], 1)
        yield accelerated
        yield kernel

    def _packets(self, ns: str, state: dict):
        from prometheus_client.core import CounterMetricFamily

        packets = CounterMetricFamily(
            "linuxfp_packets",
            "packets the pipeline of an interface's ingress finished, by verdict: fast (forwarded by the "
            "fast path, never seen by the kernel's forwarding counters), pass (handed to the kernel, "
            "which then counts them as usual) or drop; reason: the counter (docs/datapath.md)",
            labels=["netns", "interface", "hook", "node", "verdict", "reason"])
        events = CounterMetricFamily(
            "linuxfp_packet_events",
            "what happened to packets on their way to a verdict, counted beside it (e.g. the router's "
            "fib_cache_hit / _miss / _off): not packets to sum with linuxfp_packets",
            labels=["netns", "interface", "hook", "node", "event"])
        catalogue = counters()
        for i in state["interfaces"]:
            if i["state"] == "error":
                continue
            try:
                values = views.read_counters(self.layout, i["ifindex"])
            except (dp.BpfError, OSError):
                continue        # removed while we read (a detach)
            if values is None:
                continue
            nodes = _shape_nodes(i["shape"])
            for c in catalogue:
                # Another node's counters on this ingress stay 0: not exported.
                if nodes is None or c.node == "pipeline" or c.node in nodes:
                    if c.kind == "event":
                        events.add_metric([ns, i["ifname"], i["hook"], c.node, c.name], values[c.name])
                    else:
                        packets.add_metric([ns, i["ifname"], i["hook"], c.node, c.kind, c.name], values[c.name])
        yield packets
        yield events

    def _node_series(self, ns: str):
        """What nodes count beyond their reasons (Node.stats_series), e.g.
        the filter's packets per iptables rule."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from linuxfp.graph.nodes import registered

        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        by_name = {node.name: node for node in registered()}
        # served by the controller: what it published (Node.publish) as it is
        published = self.controller.published if self.controller is not None else None
        if published == {}:
            return      # nothing reconciled yet: the counts cannot be named
        served = {}
        for node_name, detail in views.node_stats(self.layout, published).items():
            if "error" in detail:
                continue
            for series in by_name[node_name].stats_series(detail):
                family = families.get(series.name)
                if family is None:
                    kind = CounterMetricFamily if series.kind == "counter" else GaugeMetricFamily
                    family = families[series.name] = kind(
                        f"linuxfp_{series.name}", series.help, labels=["netns", *(k for k, _ in series.labels)])
                value = series.value
                if series.kind == "counter":
                    key = (series.name, series.labels, series.epoch)
                    value = served[key] = max(value, self._served.get(key, value))
                family.add_metric([ns, *(v for _, v in series.labels)], value)
        self._served = served      # (series gone, or of another epoch: forgotten)
        yield from families.values()

    # -- the controller ------------------------------------------------------

    def _lease_renewed(self) -> float | None:
        """Unix time of the last renewal, known only inside the controller."""
        if self.controller is None:
            return None
        renewed_ns = self.controller.lease.last_renewal_ns
        if not renewed_ns:
            return None
        return time.time() - (time.monotonic_ns() - renewed_ns) / 1e9

    def _response(self, ns: str):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        if self.controller is not None:
            h = self.controller.response.histogram()
        else:
            h = (runtime_files.load_json(self.layout.response_file) or {}).get("histogram")
        if not h:
            return
        buckets, total = [], 0
        for le_ms, count in zip(h["le_ms"] + [float("inf")], h["counts"]):
            total += count
            buckets.append((floatToGoString(le_ms / 1000.0), total))
        histogram = HistogramMetricFamily(
            "linuxfp_response_seconds",
            "from the first netlink message of a batch of changes to the datapath in line with it",
            labels=["netns"])
        histogram.add_metric([ns], buckets, h["sum_ms"] / 1000.0)
        yield histogram
        batches = CounterMetricFamily("linuxfp_applied_batches", "batches of changes applied, by whether "
                                      "the datapath had to change", labels=["netns", "datapath"])
        batches.add_metric([ns, "updated"], h["updated_batches"])
        batches.add_metric([ns, "unchanged"], max(0, total - h["updated_batches"]))
        yield batches
        resyncs = CounterMetricFamily("linuxfp_resyncs", "full re-reads after netlink events were lost "
                                      "(the datapath passes everything until it is applied)", labels=["netns"])
        resyncs.add_metric([ns], h["resyncs"])
        yield resyncs
        for key, name, doc in (
                ("last_applied_unix", "linuxfp_last_applied_timestamp_seconds",
                 "when the controller last applied a change (Unix time)"),
                ("last_resync_unix", "linuxfp_last_resync_timestamp_seconds",
                 "when the controller last re-read everything after lost events (Unix time)")):
            if h.get(key) is not None:
                g = GaugeMetricFamily(name, doc, labels=["netns"])
                g.add_metric([ns], h[key])
                yield g


def registry(layout: NamespaceLayout, controller=None):
    """A registry holding only LinuxFP's collector; served by the controller
    with its own process metrics (memory, CPU, open fds, start time)."""
    require_client()
    from prometheus_client import CollectorRegistry, ProcessCollector

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Collector(layout, controller))
    if controller is not None:
        ProcessCollector(registry=reg)
    return reg


def exposition(layout: NamespaceLayout) -> str:
    """The text exposition format, for `linuxfp stats --prometheus`."""
    from prometheus_client import generate_latest

    return generate_latest(registry(layout)).decode()
