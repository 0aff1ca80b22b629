"""Kernel configuration of the current network namespace, as immutable data.

`read_snapshot()` dumps everything once; `EventStream` delivers coalesced
changes that `apply_messages()` folds into a new snapshot without touching
the kernel; `refresh_polled()` re-reads what the kernel never announces.
"""

from .changes import (
    AddressRemoved, AddressUpdate, LinkRemoved, LinkUpdate, Message, NeighbourRemoved,
    NeighbourUpdate, NetconfChanged, NetfilterReplaced, NftablesChanged, ResyncRequired,
    RouteRemoved, RoutesReplaced, RouteUpdate, RuleRemoved, RulesReplaced, RuleUpdate,
    SysctlsReplaced, XdpFeaturesUpdate, apply_messages, TcIngressUpdate, QdiscChanged,
    NexthopChanged,
)
from .events import EventBatch, EventStream, advance
from .model import (
    AF_INET, AF_INET6, ARPHRD_ETHER, ARPHRD_LOOPBACK, NETDEV_XDP_ACT_BASIC,
    NETDEV_XDP_ACT_NDO_XMIT, NETDEV_XDP_ACT_NDO_XMIT_SG, NETDEV_XDP_ACT_REDIRECT,
    NETDEV_XDP_ACT_RX_SG, NETDEV_XDP_ACT_XSK_ZEROCOPY, NETDEV_XDP_ACT_HW_OFFLOAD,
    RT_TABLE_DEFAULT, RT_TABLE_LOCAL, RT_TABLE_MAIN, RTNH_F_DEAD, RTNH_F_LINKDOWN,
    RTNH_F_ONLINK, Address, InterfaceSysctls, Link, Neighbour, NetfilterState, NextHop,
    Route, Rule, Snapshot, Sysctls, rules_are_default,
)
from .netfilter import read_netfilter
from .read import netns_inode, read_snapshot, refresh_polled
from .sysctl import read_sysctls

__all__ = [
    "AF_INET", "AF_INET6", "ARPHRD_ETHER", "ARPHRD_LOOPBACK", "NETDEV_XDP_ACT_BASIC",
    "NETDEV_XDP_ACT_NDO_XMIT", "NETDEV_XDP_ACT_NDO_XMIT_SG", "NETDEV_XDP_ACT_REDIRECT",
    "NETDEV_XDP_ACT_RX_SG", "NETDEV_XDP_ACT_XSK_ZEROCOPY", "NETDEV_XDP_ACT_HW_OFFLOAD",
    "RT_TABLE_DEFAULT", "RT_TABLE_LOCAL", "RT_TABLE_MAIN", "RTNH_F_DEAD", "RTNH_F_LINKDOWN",
    "RTNH_F_ONLINK",
    "Address", "InterfaceSysctls", "Link", "Neighbour", "NetfilterState", "NextHop", "Route",
    "Rule", "Snapshot", "Sysctls", "rules_are_default",
    "AddressRemoved", "AddressUpdate", "LinkRemoved", "LinkUpdate", "Message",
    "NeighbourRemoved", "NeighbourUpdate", "NetconfChanged", "NetfilterReplaced",
    "NftablesChanged", "ResyncRequired", "RouteRemoved", "RoutesReplaced", "RouteUpdate",
    "RuleRemoved", "RulesReplaced", "RuleUpdate", "SysctlsReplaced", "XdpFeaturesUpdate",
    "TcIngressUpdate", "QdiscChanged", "NexthopChanged", "apply_messages",
    "EventBatch", "EventStream", "advance",
    "read_netfilter", "read_snapshot", "refresh_polled", "netns_inode", "read_sysctls",
]
