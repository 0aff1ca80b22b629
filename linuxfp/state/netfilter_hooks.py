"""The netfilter hooks a forwarded packet crosses whose filter chains the
fast path evaluates, in the order it crosses them, and the priorities on
them that decide what such a chain sees (linux/netfilter_ipv4.h; IPv6's
are the same numbers)."""
from __future__ import annotations

# prerouting's chains see the packet before routing (no egress device yet)
FORWARD_PATH_HOOKS = ("prerouting", "forward")
NF_IP_PRI_RAW = -300
NF_IP_PRI_CONNTRACK = -200      # below it a chain sees no connection yet
# (hook rank, priority) of conntrack's own hook, as Program.priority() ranks
# a chain: one below it decides before the kernel looks a connection up
CONNTRACK_HOOK = (FORWARD_PATH_HOOKS.index("prerouting"), NF_IP_PRI_CONNTRACK)
NF_IP_PRI_MANGLE = -150
NF_IP_PRI_NAT_DST = -100        # at it or below, a destination not translated yet
# iptables' tables' hooks, but nat's (per chain: nft_rules.py)
TABLE_PRIORITY = {"raw": NF_IP_PRI_RAW, "mangle": NF_IP_PRI_MANGLE, "filter": 0, "security": 150}
