"""The conntrack node (bpf_modules/ct_prerouting.h): what connection
tracking and NAT do at PREROUTING while the kernel tracks connections — TCP
goes to the kernel there (its window tracking stays with it), before the
routing decision, instead of after routing and FORWARD's own checks; IPv4
UDP is looked up once (its refresh left to the filter where a chain
before conntrack may drop the packet), and an established connection with NAT is
translated from the kernel's own entry (its destination here; transmit
writes the source). It owns no tables: it reads the filter node's
generation, whose bits say whether connections are tracked (LFP_FLT_CT)
and whether those with NAT are taken (LFP_FLT_NAT: an IPv4 nat table
registers the kernel's NAT hooks) — and whether a chain before conntrack
may drop a packet (LFP_FLT_CT_LATE: the refresh then waits for the
filter's verdict)."""
from __future__ import annotations

from linuxfp.resources import modules_dir

from . import Node, Stage, register
from .iptables_filter import filter_presence


class Conntrack(Node):
    name = "conntrack"
    stage = Stage.PREROUTING
    header = modules_dir() / "ct_prerouting.h"

    def applies(self, snapshot, link) -> bool:
        # Where the rules make the kernel track connections; the datapath
        # reads the current generation's bits too, so a ruleset without
        # tracking passes TCP on to the nodes after it before the
        # controller has rebuilt anything.
        presence = filter_presence(snapshot)
        return presence.tracking or presence.tracking6

    def needs(self, snapshot, link) -> tuple[str, ...]:
        # Only where FORWARD is evaluated: every exit of the IP path then
        # crosses the filter, which would pass the same packets, and a
        # translated connection's packets meet its verdict as translated.
        return ("filter",)


CONNTRACK = register(Conntrack())
