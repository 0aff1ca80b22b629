"""The members of IPv4 hash:ip and hash:net sets that carry nothing but an
address (and a CIDR) are read by regular expressions, not attribute by
attribute (linuxfp/state/ipset.py _plain_ipv4_members): every set the kernel
answers with must decode to exactly what the attribute walk decodes, and a
set with anything more (timeouts, nomatch, another type) must take the walk."""
from __future__ import annotations

import random
import socket

import pytest

from linuxfp.lab.netns import Lab, entered
from linuxfp.state import ipset as ips
from linuxfp.state import netlink as nl

pytestmark = pytest.mark.netns

SETS = {
    # name: (create options, members)
    "nets": ("hash:net", [f"198.18.{i}.0/{random.Random(i).choice((24, 26, 30, 32))}" for i in range(250)]
             + ["198.18.0.0/15", "192.0.2.0/25", "203.0.113.0/24", "203.0.113.7"]),
    # many replies of plain members and one that is not: walked, as a whole
    "late": ("hash:net", [f"198.19.{i >> 8}.{i & 255}" for i in range(3000)] + ["198.19.200.0/24 nomatch"]),
    "ips": ("hash:ip", [f"198.19.{i >> 8}.{i & 255}" for i in range(2000)]),
    "masked": ("hash:ip netmask 24", [f"198.18.{i}.{i % 200 + 1}" for i in range(100)]),
    "bitmap": ("bitmap:ip range 198.18.0.0/24", ["198.18.0.1", "198.18.0.200"]),
    "timed": ("hash:net timeout 600", ["198.18.0.0/24"]),
    "nomatch": ("hash:net", ["198.18.0.0/16", "198.18.1.0/24 nomatch"]),
    "counted": ("hash:ip counters", ["198.18.0.1"]),
    "empty": ("hash:net", []),
}


def _replies(name: str) -> list[bytes]:
    payload = (ips._NFGENMSG.pack(socket.AF_INET, 0, 0)
               + nl.attr(ips.IPSET_ATTR_PROTOCOL, bytes([ips.IPSET_PROTOCOL]))
               + nl.attr(ips.IPSET_ATTR_SETNAME, name.encode() + b"\0"))
    with nl.NetlinkSocket(nl.NETLINK_NETFILTER) as sock:
        return [r.payload for r in sock.dump((ips.NFNL_SUBSYS_IPSET << 8) | ips.IPSET_CMD_LIST, payload)]


def test_plain_members_decode_as_the_attribute_walk_decodes_them(monkeypatch):
    lines = []
    for name, (kind, members) in SETS.items():
        lines.append(f"create {name} {kind}")
        lines += [f"add {name} {m}" for m in members]
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("sets")
        ns.run(["ipset", "restore"], input="\n".join(lines) + "\n")
        with entered(ns):
            replies = {name: _replies(name) for name in SETS}
    fast = {name: ips.decode_set(name, r) for name, r in replies.items()}
    plain_members = ips._plain_ipv4_members
    monkeypatch.setattr(ips, "_plain_ipv4_members", lambda adt: None)
    walked = {name: ips.decode_set(name, r) for name, r in replies.items()}
    assert fast == walked
    # the regular expressions did read the plain ones, and only those
    plain = {name for name, r in replies.items()
             if any(plain_members(nl.parse_attrs(p, ips._NFGENMSG.size).get(ips.IPSET_ATTR_ADT, b""))
                    for p in r)}
    assert {"nets", "ips", "masked"} <= plain and not plain & {"timed", "nomatch", "counted"}
    assert len(fast["ips"].prefixes) == 2000 and fast["masked"].prefixes[0][1] == 24
    assert fast["nomatch"].unsupported and fast["timed"].unsupported and fast["late"].unsupported
    assert len(replies["late"]) > 1
