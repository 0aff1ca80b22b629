"""The bridge-filter node (bpf_modules/bridge_filter.h): iptables FORWARD for
bridged IPv4 frames and ip6tables FORWARD for bridged IPv6 ones, as
br_netfilter shows them (the bridge as -i and -o), with the filter node's
classifiers and tables. It applies to the ports of bridges that call
iptables or ip6tables (bridge-nf-call-iptables / -ip6tables or the bridge's
nf_call_* options) wherever the filter node can evaluate that family's
rules; elsewhere the bridge node hands such frames to the kernel."""
from __future__ import annotations

from linuxfp.resources import modules_dir

from ..remember import link_at
from . import Node, Stage, register
from .bridge import calls_ip6tables, calls_iptables
from .iptables_filter import FILTER, OBSTACLE, filter_plan, filter_presence


class BridgeFilter(Node):
    name = "bridge_filter"
    stage = Stage.BRIDGE_FILTER
    header = modules_dir() / "bridge_filter.h"
    covers = frozenset({OBSTACLE})

    def applies(self, snapshot, link) -> bool:
        bridge = link_at(snapshot, link.master) if link.bridge_port is not None and link.master else None
        if bridge is None or bridge.kind != "bridge":
            return False
        presence = filter_presence(snapshot)
        return ((presence.filters4 and calls_iptables(snapshot, bridge))
                or (presence.filters6 and calls_ip6tables(snapshot, bridge)))

    def needs(self, snapshot, link) -> tuple[str, ...]:
        return ("bridge",)          # only what the bridge node bridges

    def blocker(self, snapshot, link) -> str | None:
        return filter_presence(snapshot).problem

    def hook_blocker(self, snapshot, link, hook: str) -> str | None:
        return FILTER.hook_blocker(snapshot, link, hook)    # the same rules, the same limits

    def notes(self, snapshot) -> tuple[str, ...]:
        plan = filter_plan(snapshot)
        lines = []
        for family, classifier, calls in (("IPv4", plan.classifier, calls_iptables),
                                          ("IPv6", plan.classifier6, calls_ip6tables)):
            bridges = [link.name for link in snapshot.links if link.kind == "bridge" and calls(snapshot, link)]
            if classifier is not None and bridges:
                lines.append(f"bridged {family} on {', '.join(bridges)}: FORWARD evaluated with the bridge as -i "
                             "and -o (br_netfilter); physdev matches go to the kernel")
        return tuple(lines)


BRIDGE_FILTER = register(BridgeFilter())
