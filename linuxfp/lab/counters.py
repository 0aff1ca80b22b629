"""Kernel counters of a namespace, read from its /proc/net/snmp (and an
interface's own, from `ip -s link`).

``Ip: ForwDatagrams`` (and snmp6's ``Ip6OutForwDatagrams``) counts packets
the *kernel* forwarded; packets an XDP
or TC fast path redirects never reach ip_forward(), so a counter that does
not grow while traffic flows is the proof that the fast path carried it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType

from .netns import Namespace


def parse_snmp(text: str) -> Mapping[str, Mapping[str, int]]:
    """``{"Ip": {"ForwDatagrams": n, ...}, "Icmp": {...}, ...}`` from /proc/net/snmp text."""
    tables: dict[str, Mapping[str, int]] = {}
    lines = text.splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        table, _, header = names.partition(":")
        _, _, numbers = values.partition(":")
        tables[table] = MappingProxyType(dict(zip(header.split(), (int(v) for v in numbers.split()))))
    return MappingProxyType(tables)


def snmp(ns: Namespace) -> Mapping[str, Mapping[str, int]]:
    return parse_snmp(ns.read_proc_net("snmp"))


def ip_forw_datagrams(ns: Namespace) -> int:
    """How many IPv4 packets the kernel of `ns` has forwarded."""
    return snmp(ns)["Ip"]["ForwDatagrams"]


def ip6_forw_datagrams(ns: Namespace) -> int:
    """How many IPv6 packets the kernel of `ns` has forwarded (0 without IPv6)."""
    try:
        text = ns.read_proc_net("snmp6")
    except FileNotFoundError:
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "Ip6OutForwDatagrams":
            return int(value)
    return 0


def tx_packets(ns: Namespace, ifname: str) -> int:
    """Packets the kernel transmitted on `ifname` of `ns` (a frame the fast
    path hands straight to a veth's peer skips this count)."""
    shown = json.loads(ns.run(["ip", "-s", "-j", "link", "show", "dev", ifname]).stdout)
    return shown[0]["stats64"]["tx"]["packets"]
