"""The conntrack-TCP node (bpf_modules/conntrack_tcp.h): while connection
tracking is on, TCP of that family goes to the kernel where Linux's conntrack runs
(PREROUTING), before the routing decision, instead of after routing and
FORWARD's own checks — the filter node's verdict for it, reached cheaply.
It owns no tables: it reads the filter node's generation."""
from __future__ import annotations

from linuxfp.resources import modules_dir

from . import Node, Stage, register
from .iptables_filter import filter_plan


class ConntrackTcp(Node):
    name = "conntrack_tcp"
    stage = Stage.PREROUTING
    header = modules_dir() / "conntrack_tcp.h"

    def applies(self, snapshot, link) -> bool:
        # Where the rules make the kernel track connections; the datapath
        # reads the current generation's bit too, so a ruleset without
        # tracking passes TCP on to the nodes after it before the
        # controller has rebuilt anything.
        plan = filter_plan(snapshot)
        return ((plan.classifier is not None and bool(plan.tracking))
                or (plan.classifier6 is not None and bool(plan.tracking6)))

    def needs(self, snapshot, link) -> tuple[str, ...]:
        # Only where FORWARD is evaluated: every exit of the IP path then
        # crosses the filter, which would pass the same packets.
        return ("filter",)


CONNTRACK_TCP = register(ConntrackTcp())
