"""The bridge-filter node (bpf_modules/bridge_filter.h): iptables FORWARD for
bridged IPv4 frames, as br_netfilter shows them to iptables (the bridge as
-i and -o), with the filter node's classifier and tables. It applies to the
ports of bridges that call iptables (bridge-nf-call-iptables or the
bridge's nf_call_iptables) wherever the filter node can evaluate the rules;
elsewhere the bridge node hands such frames to the kernel."""
from __future__ import annotations

from linuxfp.resources import modules_dir

from . import Node, Stage, register
from .bridge import calls_iptables
from .iptables_filter import FILTER, OBSTACLE, filter_plan


class BridgeFilter(Node):
    name = "bridge_filter"
    stage = Stage.BRIDGE_FILTER
    header = modules_dir() / "bridge_filter.h"
    covers = frozenset({OBSTACLE})
    inputs = ("netfilter", "links", "sysctls")

    def applies(self, snapshot, link) -> bool:
        bridge = snapshot.link(link.master) if link.bridge_port is not None and link.master else None
        return (bridge is not None and bridge.kind == "bridge" and calls_iptables(snapshot, bridge)
                and filter_plan(snapshot).classifier is not None)

    def needs(self, snapshot, link) -> tuple[str, ...]:
        return ("bridge",)          # only what the bridge node bridges

    def blocker(self, snapshot, link) -> str | None:
        return filter_plan(snapshot).problem

    def hook_blocker(self, snapshot, link, hook: str) -> str | None:
        return FILTER.hook_blocker(snapshot, link, hook)    # the same rules, the same limits

    def notes(self, snapshot) -> tuple[str, ...]:
        if filter_plan(snapshot).classifier is None:
            return ()
        bridges = [link.name for link in snapshot.links if link.kind == "bridge" and calls_iptables(snapshot, link)]
        if not bridges:
            return ()
        return (f"bridged IPv4 on {', '.join(bridges)}: FORWARD evaluated with the bridge as -i and -o "
                "(br_netfilter); physdev matches go to the kernel",)


BRIDGE_FILTER = register(BridgeFilter())
