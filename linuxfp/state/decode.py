"""Decode rtnetlink / generic-netlink / nfnetlink messages into model objects.

IPv4 addresses and routes are kept; rules and neighbours of IPv4 and IPv6
(IPv6's routes are read live by the datapath); links are family-independent. Every decoder is pure: bytes in, value out.
"""

from __future__ import annotations

import socket
import struct

from . import netlink as nl
from .changes import (
    AddressRemoved,
    AddressUpdate,
    BridgePortChanged,
    FdbRemoved,
    FdbUpdate,
    VtepRemoved,
    VtepUpdate,
    LinkRemoved,
    LinkUpdate,
    Message,
    NeighbourRemoved,
    NeighbourUpdate,
    NetconfChanged,
    NetconfRemoved,
    NexthopChanged,
    NftablesChanged,
    PeerLinkRemoved,
    PeerLinkUpdate,
    PlainRouteRemoved,
    PlainRouteReplaced,
    XfrmChanged,
    QdiscChanged,
    RouteRemoved,
    RouteUpdate,
    RuleRemoved,
    Route6Mtu,
    Routes6MayExpire,
    RuleUpdate,
    XdpFeaturesUpdate,
)
from .model import (
    AF_INET,
    AF_INET6,
    IF_OPER_UNKNOWN,
    IF_OPER_UP,
    IFF_LOWER_UP,
    IFF_UP,
    ROUTE_TYPES,
    RT_TABLE_LOCAL,
    RTNH_F_KERNEL_STATE,
    RULE_ACTIONS,
    XDP_ATTACHED_NONE,
    Address,
    BridgeOptions,
    BridgePort,
    DeviceConf,
    FdbEntry,
    VtepRemote,
    Link,
    Neighbour,
    NextHop,
    Route,
    Rule,
    VethPeer,
    VxlanOptions,
)

# rtnetlink message types (include/uapi/linux/rtnetlink.h)
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTM_NEWNEIGH, RTM_DELNEIGH, RTM_GETNEIGH = 28, 29, 30
RTM_NEWRULE, RTM_DELRULE, RTM_GETRULE = 32, 33, 34
RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWNETCONF, RTM_DELNETCONF = 80, 81
RTM_NEWNEXTHOP, RTM_DELNEXTHOP = 104, 105

AF_UNSPEC = 0

_IFINFOMSG = struct.Struct("=BxHiII")
_IFADDRMSG = struct.Struct("=BBBBi")
_RTMSG = struct.Struct("=BBBBBBBBI")
_RTNEXTHOP = struct.Struct("=HBBi")
_FIB_RULE_HDR = struct.Struct("=BBBBBBBBI")
_NDMSG = struct.Struct("=BxxxiHBB")
_TCMSG = struct.Struct("=BxxxiIII")

# IFLA_*
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_QDISC = 1, 3, 4, 5, 6
IFLA_IFALIAS = 20
IFLA_MASTER, IFLA_OPERSTATE, IFLA_LINKINFO = 10, 16, 18
IFLA_EXT_MASK, IFLA_LINK_NETNSID, IFLA_XDP = 29, 37, 43
IFLA_TARGET_NETNSID = 46     # alias IFLA_IF_NETNSID: act on a link of another namespace
IFLA_AF_SPEC, IFLA_INET_CONF, IFLA_INET6_CONF = 26, 1, 2
IFLA_INFO_KIND, IFLA_INFO_DATA, IFLA_INFO_SLAVE_KIND, IFLA_INFO_SLAVE_DATA = 1, 2, 4, 5
# IFLA_BR_* (bridge options) and IFLA_BRPORT_* (port settings), if_link.h
IFLA_BR_FORWARD_DELAY, IFLA_BR_AGEING_TIME, IFLA_BR_STP_STATE = 1, 4, 5
IFLA_BR_VLAN_FILTERING, IFLA_BR_GROUP_FWD_MASK, IFLA_BR_MCAST_SNOOPING = 7, 9, 23
IFLA_BR_NF_CALL_IPTABLES, IFLA_BR_NF_CALL_IP6TABLES, IFLA_BR_NF_CALL_ARPTABLES = 36, 37, 38
IFLA_BRPORT_STATE, IFLA_BRPORT_MODE, IFLA_BRPORT_LEARNING, IFLA_BRPORT_UNICAST_FLOOD = 1, 4, 8, 9
IFLA_BRPORT_PROXYARP, IFLA_BRPORT_PROXYARP_WIFI, IFLA_BRPORT_VLAN_TUNNEL = 10, 12, 29
IFLA_BRPORT_NEIGH_SUPPRESS, IFLA_BRPORT_ISOLATED, IFLA_BRPORT_BACKUP_PORT = 32, 33, 34
IFLA_BRPORT_MRP_RING_OPEN, IFLA_BRPORT_MRP_IN_OPEN, IFLA_BRPORT_LOCKED, IFLA_BRPORT_MAB = 35, 36, 39, 40
IFLA_XDP_ATTACHED, IFLA_XDP_PROG_ID = 2, 4
IFLA_XDP_DRV_PROG_ID, IFLA_XDP_SKB_PROG_ID, IFLA_XDP_HW_PROG_ID = 5, 6, 7
RTEXT_FILTER_SKIP_STATS = 1 << 3

# IFA_*
IFA_ADDRESS, IFA_LOCAL, IFA_LABEL, IFA_BROADCAST, IFA_CACHEINFO, IFA_FLAGS = 1, 2, 3, 4, 6, 8
INFINITY_LIFE_TIME = 0xFFFFFFFF

# RTA_*
RTA_DST, RTA_SRC, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC = 1, 2, 4, 5, 6, 7
RTA_METRICS, RTA_MULTIPATH, RTA_FLOW, RTA_TABLE, RTA_VIA, RTA_NH_ID = 8, 9, 11, 15, 18, 30
RTA_ENCAP_TYPE, RTA_ENCAP = 21, 22
RTA_CACHEINFO = 12
RTAX_MTU = 2
RTAX_HOPLIMIT = 10
RTM_F_CLONED = 0x200
RTNH_FLAGS_MASK = 0xFF  # rtm_flags low byte mirrors rtnh_flags for one nexthop

# FRA_*
FRA_DST, FRA_SRC, FRA_IIFNAME, FRA_GOTO, FRA_PRIORITY = 1, 2, 3, 4, 6
FRA_FWMARK, FRA_FLOW, FRA_TUN_ID, FRA_SUPPRESS_IFGROUP = 10, 11, 12, 13
FRA_SUPPRESS_PREFIXLEN, FRA_TABLE, FRA_FWMASK, FRA_OIFNAME, FRA_PAD = 14, 15, 16, 17, 18
FRA_L3MDEV, FRA_UID_RANGE, FRA_PROTOCOL, FRA_IP_PROTO = 19, 20, 21, 22
FRA_SPORT_RANGE, FRA_DPORT_RANGE = 23, 24

# NDA_*
NDA_DST, NDA_LLADDR, NDA_VLAN, NDA_MASTER, NDA_FLAGS_EXT = 1, 2, 5, 9, 15
NDA_PORT, NDA_VNI, NDA_IFINDEX = 6, 7, 8
NTF_SELF = 0x02
NTF_PROXY = 0x08
AF_BRIDGE = 7

# genl netdev family (include/uapi/linux/netdev.h)
NETDEV_CMD_DEV_GET, NETDEV_CMD_DEV_ADD_NTF = 1, 2
NETDEV_CMD_DEV_DEL_NTF, NETDEV_CMD_DEV_CHANGE_NTF = 3, 4
NETDEV_A_DEV_IFINDEX, NETDEV_A_DEV_XDP_FEATURES, NETDEV_A_DEV_XDP_RX_METADATA_FEATURES = 1, 3, 5

# netconf
NETCONFA_IFINDEX = 1

NFNL_SUBSYS_NFTABLES = 10


def ip_str(family: int, raw: bytes) -> str:
    return socket.inet_ntop(family, raw)


def mac_str(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


# --- links -------------------------------------------------------------------

def decode_device_conf(payload: bytes) -> DeviceConf | None:
    """RTM_NEWLINK payload -> the device's IPv4 and IPv6 configuration
    arrays (None for per-family link messages, as decode_link)."""
    parsed = _link_attrs(payload)
    return None if parsed is None else _device_conf(*parsed)


def decode_link_and_conf(payload: bytes) -> tuple[Link, DeviceConf] | None:
    """decode_link and decode_device_conf of one message, parsed once; None
    for per-family link messages."""
    parsed = _link_attrs(payload)
    return None if parsed is None else (_link(*parsed), _device_conf(*parsed))


def _link_attrs(payload: bytes) -> tuple[tuple[int, int, int, int, int], dict[int, bytes]] | None:
    """The ifinfomsg header and the attributes of a link message; None for
    per-family link messages (AF_BRIDGE port notifications reuse
    RTM_NEWLINK with partial content)."""
    header = _IFINFOMSG.unpack_from(payload)
    if header[0] != AF_UNSPEC:
        return None
    return header, nl.parse_attrs(payload, _IFINFOMSG.size)


def _device_conf(header: tuple, a: dict[int, bytes]) -> DeviceConf:
    index = header[2]
    ipv4 = ipv6 = None
    if IFLA_AF_SPEC in a:
        families = nl.parse_attrs(a[IFLA_AF_SPEC])
        if AF_INET in families:
            ipv4 = nl.parse_attrs(families[AF_INET]).get(IFLA_INET_CONF)
        if AF_INET6 in families:
            ipv6 = nl.parse_attrs(families[AF_INET6]).get(IFLA_INET6_CONF)
    return DeviceConf(index, ipv4, ipv6)


def decode_link(payload: bytes) -> Link | None:
    """RTM_NEWLINK payload -> Link; None for per-family link messages (see
    _link_attrs)."""
    parsed = _link_attrs(payload)
    return None if parsed is None else _link(*parsed)


def _link(header: tuple, a: dict[int, bytes]) -> Link:
    _family, link_type, index, flags, _change = header
    kind = slave_kind = ""
    bridge = port = vxlan = None
    if IFLA_LINKINFO in a:
        info = nl.parse_attrs(a[IFLA_LINKINFO])
        kind = nl.cstr(info[IFLA_INFO_KIND]) if IFLA_INFO_KIND in info else ""
        slave_kind = nl.cstr(info[IFLA_INFO_SLAVE_KIND]) if IFLA_INFO_SLAVE_KIND in info else ""
        if kind == "bridge" and IFLA_INFO_DATA in info:
            bridge = decode_bridge_options(info[IFLA_INFO_DATA])   # None otherwise: options unknown
        if slave_kind == "bridge":
            port = decode_bridge_port(info.get(IFLA_INFO_SLAVE_DATA, b""))
        if kind == "vxlan" and IFLA_INFO_DATA in info:
            vxlan = decode_vxlan_options(info[IFLA_INFO_DATA])    # None otherwise: options unknown
    xdp_prog_id = 0
    xdp_mode = XDP_ATTACHED_NONE
    if IFLA_XDP in a:
        xdp = nl.parse_attrs(a[IFLA_XDP])
        if IFLA_XDP_ATTACHED in xdp:
            xdp_mode = nl.u8(xdp[IFLA_XDP_ATTACHED])
        for key in (IFLA_XDP_PROG_ID, IFLA_XDP_DRV_PROG_ID, IFLA_XDP_SKB_PROG_ID, IFLA_XDP_HW_PROG_ID):
            if key in xdp:
                xdp_prog_id = nl.u32(xdp[key])
                break
    operstate = nl.u8(a[IFLA_OPERSTATE]) if IFLA_OPERSTATE in a else IF_OPER_UNKNOWN
    master = nl.u32(a[IFLA_MASTER]) if IFLA_MASTER in a else 0
    peer = nl.s32(a[IFLA_LINK]) if IFLA_LINK in a else 0
    oper_up = (
        bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP)
        and operstate in (IF_OPER_UP, IF_OPER_UNKNOWN)
    )
    return Link(
        index=index,
        name=nl.cstr(a.get(IFLA_IFNAME, b"")),
        kind=kind,
        master=master or None,
        mtu=nl.u32(a[IFLA_MTU]) if IFLA_MTU in a else 0,
        up=bool(flags & IFF_UP),
        oper_up=oper_up,
        operstate=operstate,
        mac=mac_str(a[IFLA_ADDRESS]) if IFLA_ADDRESS in a else "",
        link_type=link_type,
        flags=flags,
        qdisc=nl.cstr(a[IFLA_QDISC]) if IFLA_QDISC in a else "",
        xdp_prog_id=xdp_prog_id,
        xdp_mode=xdp_mode,
        xdp_features=0,
        slave_kind=slave_kind,
        # A device's IFLA_LINK naming itself means no lower device; one in
        # another namespace may well have our index there.
        peer=peer if peer and (peer != index or IFLA_LINK_NETNSID in a) else None,
        peer_netnsid=nl.s32(a[IFLA_LINK_NETNSID]) if IFLA_LINK_NETNSID in a else None,
        alias=nl.cstr(a[IFLA_IFALIAS]) if IFLA_IFALIAS in a else "",
        bridge=bridge,
        bridge_port=port,
        vxlan=vxlan,
    )


# enum ifla_vxlan_info (include/uapi/linux/if_link.h)
IFLA_VXLAN_ID, IFLA_VXLAN_GROUP, IFLA_VXLAN_LINK, IFLA_VXLAN_LOCAL, IFLA_VXLAN_TTL, IFLA_VXLAN_TOS = 1, 2, 3, 4, 5, 6
IFLA_VXLAN_PORT_RANGE, IFLA_VXLAN_RSC = 10, 12
IFLA_VXLAN_PORT, IFLA_VXLAN_GROUP6, IFLA_VXLAN_LOCAL6, IFLA_VXLAN_UDP_CSUM = 15, 16, 17, 18
IFLA_VXLAN_REMCSUM_TX, IFLA_VXLAN_GBP = 21, 23
IFLA_VXLAN_COLLECT_METADATA, IFLA_VXLAN_GPE, IFLA_VXLAN_TTL_INHERIT, IFLA_VXLAN_DF = 25, 27, 28, 29
IFLA_VXLAN_VNIFILTER = 30


def decode_vxlan_options(data: bytes) -> VxlanOptions:
    """IFLA_INFO_DATA of a VXLAN device."""
    a = nl.parse_attrs(data)
    return VxlanOptions(
        vni=nl.u32(a[IFLA_VXLAN_ID]) if IFLA_VXLAN_ID in a else 0,
        collect_metadata=bool(nl.u8(a[IFLA_VXLAN_COLLECT_METADATA])) if IFLA_VXLAN_COLLECT_METADATA in a else False,
        vni_filter=bool(nl.u8(a[IFLA_VXLAN_VNIFILTER])) if IFLA_VXLAN_VNIFILTER in a else False,
        lower=nl.u32(a[IFLA_VXLAN_LINK]) if IFLA_VXLAN_LINK in a else 0,
        ipv6=IFLA_VXLAN_LOCAL6 in a or IFLA_VXLAN_GROUP6 in a,
        # network byte order on the wire (nla_put_be16)
        port=struct.unpack("!H", a[IFLA_VXLAN_PORT][:2])[0] if IFLA_VXLAN_PORT in a else 0,
        local=ip_str(AF_INET, a[IFLA_VXLAN_LOCAL]) if len(a.get(IFLA_VXLAN_LOCAL, b"")) == 4 else "",
        tos=nl.u8(a[IFLA_VXLAN_TOS]) if IFLA_VXLAN_TOS in a else 0,
        route_short_circuit=bool(nl.u8(a[IFLA_VXLAN_RSC])) if IFLA_VXLAN_RSC in a else False,
        ttl=nl.u8(a[IFLA_VXLAN_TTL]) if IFLA_VXLAN_TTL in a else 0,
        ttl_inherit=bool(nl.u8(a[IFLA_VXLAN_TTL_INHERIT])) if IFLA_VXLAN_TTL_INHERIT in a else False,
        df=nl.u8(a[IFLA_VXLAN_DF]) if IFLA_VXLAN_DF in a else 0,
        # (every kernel dumps it; absent, the default: summed)
        udp_csum=bool(nl.u8(a[IFLA_VXLAN_UDP_CSUM])) if IFLA_VXLAN_UDP_CSUM in a else True,
        # (struct ifla_vxlan_port_range: two __be16)
        port_range=struct.unpack("!HH", a[IFLA_VXLAN_PORT_RANGE][:4]) if len(a.get(IFLA_VXLAN_PORT_RANGE, b"")) >= 4
        else (0, 0),
        extensions=(IFLA_VXLAN_GBP in a or IFLA_VXLAN_GPE in a      # (flags)
                    or (IFLA_VXLAN_REMCSUM_TX in a and bool(nl.u8(a[IFLA_VXLAN_REMCSUM_TX])))),
    )


def decode_bridge_options(data: bytes) -> BridgeOptions:
    """IFLA_INFO_DATA of a bridge."""
    a = nl.parse_attrs(data)

    def number(key: int, size: int, default: int) -> int:
        if key not in a:
            return default
        return {1: nl.u8, 2: nl.u16, 4: nl.u32, 8: nl.u64}[size](a[key])

    return BridgeOptions(
        ageing_time_cs=number(IFLA_BR_AGEING_TIME, 4, 30000),
        forward_delay_cs=number(IFLA_BR_FORWARD_DELAY, 4, 1500),
        stp_state=number(IFLA_BR_STP_STATE, 4, 0),
        vlan_filtering=bool(number(IFLA_BR_VLAN_FILTERING, 1, 0)),
        nf_call_iptables=bool(number(IFLA_BR_NF_CALL_IPTABLES, 1, 0)),
        nf_call_ip6tables=bool(number(IFLA_BR_NF_CALL_IP6TABLES, 1, 0)),
        nf_call_arptables=bool(number(IFLA_BR_NF_CALL_ARPTABLES, 1, 0)),
        mcast_snooping=bool(number(IFLA_BR_MCAST_SNOOPING, 1, 1)),
        group_fwd_mask=number(IFLA_BR_GROUP_FWD_MASK, 2, 0),
    )


def decode_bridge_port(data: bytes) -> BridgePort:
    """IFLA_INFO_SLAVE_DATA (or IFLA_PROTINFO) of a bridge port."""
    a = nl.parse_attrs(data)

    def flag(key: int, default: bool = False) -> bool:
        return bool(nl.u8(a[key])) if key in a else default

    return BridgePort(
        state=nl.u8(a[IFLA_BRPORT_STATE]) if IFLA_BRPORT_STATE in a else 0,
        hairpin=flag(IFLA_BRPORT_MODE),
        learning=flag(IFLA_BRPORT_LEARNING, True),
        unicast_flood=flag(IFLA_BRPORT_UNICAST_FLOOD, True),
        proxyarp=flag(IFLA_BRPORT_PROXYARP),
        proxyarp_wifi=flag(IFLA_BRPORT_PROXYARP_WIFI),
        isolated=flag(IFLA_BRPORT_ISOLATED),
        neigh_suppress=flag(IFLA_BRPORT_NEIGH_SUPPRESS),
        locked=flag(IFLA_BRPORT_LOCKED),
        mab=flag(IFLA_BRPORT_MAB),
        vlan_tunnel=flag(IFLA_BRPORT_VLAN_TUNNEL),
        backup_port=nl.u32(a[IFLA_BRPORT_BACKUP_PORT]) if IFLA_BRPORT_BACKUP_PORT in a else 0,
        mrp=flag(IFLA_BRPORT_MRP_RING_OPEN) or flag(IFLA_BRPORT_MRP_IN_OPEN),
    )


def link_dump_request() -> bytes:
    return _IFINFOMSG.pack(AF_UNSPEC, 0, 0, 0, 0) + nl.attr(
        IFLA_EXT_MASK, struct.pack("=I", RTEXT_FILTER_SKIP_STATS))


def link_get_request(index: int) -> bytes:
    """RTM_GETLINK of one link of our namespace."""
    return _IFINFOMSG.pack(AF_UNSPEC, 0, index, 0, 0) + nl.attr(
        IFLA_EXT_MASK, struct.pack("=I", RTEXT_FILTER_SKIP_STATS))


def peer_get_request(nsid: int, index: int) -> bytes:
    """RTM_GETLINK of one link in the namespace we know as `nsid`."""
    return _IFINFOMSG.pack(AF_UNSPEC, 0, index, 0, 0) + nl.attr(
        IFLA_EXT_MASK, struct.pack("=I", RTEXT_FILTER_SKIP_STATS)) + nl.attr(
        IFLA_TARGET_NETNSID, struct.pack("=i", nsid))


def decode_peer(payload: bytes, nsid: int) -> VethPeer | None:
    """RTM_NEWLINK of a link in the namespace `nsid` -> its peer facts."""
    link = decode_link(payload)
    if link is None:
        return None
    return VethPeer(nsid, link.index, link.mac, link.mtu, link.up, link.xdp_prog_id)


def decode_peer_event(msg: nl.RawMessage, nsid: int | None) -> Message | None:
    """A link event of another namespace (NETLINK_LISTEN_ALL_NSID): the
    facts of a possible veth peer. Our own namespace's (nsid None) belong to
    the main stream."""
    if nsid is None:
        return None
    if msg.type == RTM_NEWLINK:
        peer = decode_peer(msg.payload, nsid)
        return PeerLinkUpdate(peer) if peer is not None else None
    if msg.type == RTM_DELLINK:
        family, _type, index, _flags, _change = _IFINFOMSG.unpack_from(msg.payload)
        return PeerLinkRemoved(nsid, index) if family == AF_UNSPEC else None
    return None


# --- addresses -----------------------------------------------------------------

def decode_address(payload: bytes) -> Address | None:
    family, prefixlen, flags, scope, index = _IFADDRMSG.unpack_from(payload)
    if family != AF_INET:
        return None
    a = nl.parse_attrs(payload, _IFADDRMSG.size)
    local = ip_str(family, a[IFA_LOCAL]) if IFA_LOCAL in a else None
    address = ip_str(family, a[IFA_ADDRESS]) if IFA_ADDRESS in a else local
    if address is None:
        return None
    return Address(
        index=index,
        family=family,
        address=address,
        prefixlen=prefixlen,
        local=local,
        broadcast=ip_str(family, a[IFA_BROADCAST]) if IFA_BROADCAST in a else None,
        scope=scope,
        flags=nl.u32(a[IFA_FLAGS]) if IFA_FLAGS in a else flags,
        label=nl.cstr(a[IFA_LABEL]) if IFA_LABEL in a else "",
    )


def ipv6_address_expires(payload: bytes) -> bool:
    """Whether an IPv6 address message gives a finite valid lifetime."""
    a = nl.parse_attrs(payload, _IFADDRMSG.size)
    return IFA_CACHEINFO in a and struct.unpack_from("=I", a[IFA_CACHEINFO], 4)[0] != INFINITY_LIFE_TIME


def address_dump_request(family: int = AF_INET) -> bytes:
    return _IFADDRMSG.pack(family, 0, 0, 0, 0)


# --- routes --------------------------------------------------------------------

def _gateway(family: int, a: dict[int, bytes]) -> str | None:
    if RTA_GATEWAY in a:
        return ip_str(family, a[RTA_GATEWAY])
    if RTA_VIA in a:  # IPv4 route via an IPv6 gateway: struct rtvia
        via = a[RTA_VIA]
        via_family = struct.unpack_from("=H", via)[0]
        return ip_str(via_family, via[2:])
    return None


def decode_route(payload: bytes) -> Route | None:
    (family, dst_len, _src_len, tos, table, protocol, scope, rtype,
     flags) = _RTMSG.unpack_from(payload)
    if family != AF_INET or flags & RTM_F_CLONED:
        return None
    a = nl.parse_attrs(payload, _RTMSG.size)
    if RTA_TABLE in a:
        table = nl.u32(a[RTA_TABLE])
    dst = ip_str(family, a[RTA_DST]) if RTA_DST in a else "0.0.0.0"
    nexthops: tuple[NextHop, ...]
    if RTA_MULTIPATH in a:
        nexthops = _decode_multipath(family, a[RTA_MULTIPATH])
    else:
        gateway = _gateway(family, a)
        oif = nl.u32(a[RTA_OIF]) if RTA_OIF in a else None
        if gateway is None and oif is None:
            nexthops = ()
        else:
            nexthops = (NextHop(gateway=gateway, oif=oif, weight=1,
                                flags=flags & RTNH_FLAGS_MASK & ~RTNH_F_KERNEL_STATE),)
    mtu = hoplimit = 0
    if RTA_METRICS in a:
        metrics = nl.parse_attrs(a[RTA_METRICS])
        if RTAX_MTU in metrics:
            mtu = nl.u32(metrics[RTAX_MTU])
        if RTAX_HOPLIMIT in metrics:
            hoplimit = nl.u32(metrics[RTAX_HOPLIMIT])
    return Route(
        family=family,
        table=table,
        dst=f"{dst}/{dst_len}",
        type=ROUTE_TYPES.get(rtype, str(rtype)),
        protocol=protocol,
        scope=scope,
        priority=nl.u32(a[RTA_PRIORITY]) if RTA_PRIORITY in a else 0,
        tos=tos,
        nexthops=nexthops,
        mtu=mtu,
        realm=nl.u32(a[RTA_FLOW]) if RTA_FLOW in a else 0,
        prefsrc=ip_str(family, a[RTA_PREFSRC]) if RTA_PREFSRC in a else None,
        nh_id=nl.u32(a[RTA_NH_ID]) if RTA_NH_ID in a else 0,
        hoplimit=hoplimit,
        metrics=a[RTA_METRICS].hex() if RTA_METRICS in a else "",
        encap=(a.get(RTA_ENCAP_TYPE, b"") + a.get(RTA_ENCAP, b"")).hex(),
    )


def _decode_multipath(family: int, data: bytes) -> tuple[NextHop, ...]:
    hops = []
    offset = 0
    while offset + _RTNEXTHOP.size <= len(data):
        length, flags, weight_minus_one, ifindex = _RTNEXTHOP.unpack_from(data, offset)
        if length < _RTNEXTHOP.size:
            break
        a = nl.parse_attrs(data, offset + _RTNEXTHOP.size, offset + length)
        hops.append(NextHop(
            gateway=_gateway(family, a),
            oif=ifindex or None,
            weight=weight_minus_one + 1,
            flags=flags & ~RTNH_F_KERNEL_STATE,
        ))
        offset += nl.align4(length)
    return tuple(hops)


# --- telling plain routes apart without decoding them ----------------------------
#
# A BGP full table is 800 000 routes, and decoding one into a Route costs
# ~15 us: 12 s. Almost all are `Route.plain`, which the snapshot does not
# keep, so a dump is scanned instead: one header unpack per message, and a
# few bytes.find passes per datagram (in C) for the attributes that make a
# unicast route worth keeping. Only the messages it flags are decoded, and
# decode_route() + Route.plain stay the definition: the scan may flag too
# much (a payload byte pattern that looks like one of those attributes),
# never too little.

_NLMSG_RTMSG = struct.Struct("=IHHII" "BBBBBBBBI")   # nlmsghdr, then struct rtmsg
_RTN_UNICAST = 1
# Attribute headers (u16 length, u16 type) of RTA_NH_ID and of the RTAX_MTU
# and RTAX_HOPLIMIT metrics nested in RTA_METRICS (all u32: length 8), and of
# RTA_MULTIPATH (length >= 12). RTAX_MTU's header equals RTA_SRC's, which
# IPv4 never sends, and RTAX_HOPLIMIT's RTA_PROTOINFO's, which no route has.
# bytes.find (memmem) runs at memory speed where a regular expression here
# does not: the u32 headers of the RTAX_MTU metric and of RTA_NH_ID are found
# directly, RTA_MULTIPATH (any length) by its type among the u16s at offsets
# 2 mod 4, where every aligned attribute keeps its type. Hits off alignment
# are payload bytes and are skipped.
_MTU_METRIC_HEADER = struct.pack("=HH", 8, RTAX_MTU)
_HOPLIMIT_METRIC_HEADER = struct.pack("=HH", 8, RTAX_HOPLIMIT)
_NH_ID_HEADER = struct.pack("=HH", 8, RTA_NH_ID)
_MULTIPATH_TYPE = struct.pack("=H", RTA_MULTIPATH)


def _aligned_hints(data: bytes) -> list[int]:
    """Aligned offsets in a datagram where a kept-route attribute may start."""
    hints = []
    for header in (_MTU_METRIC_HEADER, _HOPLIMIT_METRIC_HEADER, _NH_ID_HEADER):
        at = data.find(header)
        while at >= 0:
            if not at & 3:
                hints.append(at)
            at = data.find(header, at + 1)
    types = memoryview(data)[: len(data) & ~3].cast("H")[1::2].tobytes()
    at = types.find(_MULTIPATH_TYPE)
    while at >= 0:
        if not at & 1:
            hints.append(2 * at)   # the u16 at types[at] sits at byte 4 * (at / 2) + 2
        at = types.find(_MULTIPATH_TYPE, at + 1)
    hints.sort()
    return hints


class IdentityTooLong(RuntimeError):
    """Routes of one identity run past what RouteDumpScan looks back over."""


def _route_walk(payload: bytes) -> tuple[tuple, str | None, int | None, bool]:
    """One attribute walk of a route message: its Route.identity (family,
    table, "dst/len", tos, priority), gateway, oif, and whether it is not
    plain (RTAX_MTU, RTAX_HOPLIMIT, RTA_MULTIPATH, RTA_NH_ID, RTA_VIA, the local table, an
    IPv4 default route)."""
    family, dst_len, _src_len, tos, table = _RTMSG.unpack_from(payload)[:5]
    dst = b"\0\0\0\0"
    priority = 0
    gateway = oif = None
    kept = False
    offset, end = _RTMSG.size, len(payload)
    unpack = nl.NLATTR.unpack_from
    while offset + 4 <= end:
        length, atype = unpack(payload, offset)
        if length < 4 or offset + length > end:
            break
        atype &= nl.NLA_TYPE_MASK
        value = payload[offset + 4 : offset + length]
        if atype == RTA_DST:
            dst = value
        elif atype == RTA_TABLE:
            table = nl.u32(value)
        elif atype == RTA_PRIORITY:
            priority = nl.u32(value)
        elif atype == RTA_OIF:
            oif = nl.u32(value)
        elif atype == RTA_GATEWAY:
            gateway = ip_str(family, value)
        elif atype == RTA_MULTIPATH or atype == RTA_NH_ID or atype == RTA_VIA:
            kept = True
        elif atype == RTA_METRICS and not nl.parse_attrs(value).keys().isdisjoint((RTAX_MTU, RTAX_HOPLIMIT)):
            kept = True
        offset += (length + 3) & ~3
    identity = (family, table, f"{ip_str(family, dst)}/{dst_len}", tos, priority)
    # (IPv4 default routes too: several in one table make output lookups pick
    # among them, fib_select_default(), which bpf_fib_lookup() never does)
    return identity, gateway, oif, kept or table == RT_TABLE_LOCAL or (family == AF_INET and dst_len == 0)


def route_identity(payload: bytes) -> tuple:
    """Route.identity of a route message, without decoding the rest."""
    return _route_walk(payload)[0]


class RouteDumpScan:
    """Feeds on the datagrams of one route dump and collects the payloads of
    routes that may not be plain, each with the whole run of routes of its
    identity (table, prefix, tos, metric): the kernel dumps those next to
    each other, and Snapshot.routes keeps them all (a replace takes the first
    of them, which must be known). Cached exceptions (RTM_F_CLONED) are not
    routes and are skipped."""

    def __init__(self, seq: int):
        self.seq = seq
        self.payloads: list[bytes] = []
        self.done = False
        self.interrupted = False
        self.error = 0
        self._run: tuple | None = None      # identity whose run is being collected
        # The previous datagram and its uncollected route messages' offsets,
        # for runs that began there.
        self._before: tuple[bytes, list[int]] = (b"", [])

    def feed(self, data: bytes) -> None:
        # One pass, the hot loop of a full-table start-up: locals only, one
        # unpack per message, everything unusual on the slow path.
        end = len(data)
        hints = _aligned_hints(data)
        hints.append(end)              # sentinel
        h, next_hint = 0, hints[0]
        unpack = _NLMSG_RTMSG.unpack_from
        want = self.seq
        # Route messages of this datagram in order: the offset of one not
        # collected, ~offset of one collected (a run's boundary for _collect).
        starts: list[int] = []
        offset = 0
        while offset + 28 <= end:
            (length, mtype, flags, seq, _pid, family, dst_len, _src_len, _tos, table, _protocol,
             _scope, rtype, rtm_flags) = unpack(data, offset)
            if mtype != RTM_NEWROUTE or flags != nl.NLM_F_MULTI or seq != want or length < 28:
                break                  # not a plain dump message: the slow path below
            following = offset + ((length + 3) & ~3)
            while next_hint < offset:
                h += 1
                next_hint = hints[h]
            if rtm_flags & RTM_F_CLONED:
                pass                   # a cached exception, not a route
            elif (rtype != _RTN_UNICAST or table == RT_TABLE_LOCAL or family != AF_INET or not dst_len
                    or next_hint < following):
                self._collect(data, offset, starts)
            elif self._run is not None:
                self._extend(data, offset, starts)
            else:
                starts.append(offset)
            offset = following
        if starts:
            # Datagrams of cached exceptions only are passed over: a run may
            # straddle them.
            self._before = (data, starts)
        if offset + 16 <= end:
            self._slow(data, offset)

    def _collect(self, data: bytes, offset: int, starts: list[int]) -> None:
        """A route that may be kept: it, and every route of its identity
        before it that is not collected yet; the ones after follow (_extend)."""
        payload = self._payload(data, offset)
        identity = route_identity(payload)
        if identity != self._run:
            earlier = []
            for where, offsets in ((data, starts), self._before):
                k = len(offsets)
                while k and offsets[k - 1] >= 0 and route_identity(self._payload(where, offsets[k - 1])) == identity:
                    k -= 1
                    earlier.append(self._payload(where, offsets[k]))
                    offsets[k] = ~offsets[k]        # collected now
                if k:
                    break      # a route of another identity, or a collected one, ends the run
                if where is not data and offsets:
                    # The run fills the whole previous datagram: it may go back further.
                    raise IdentityTooLong(f"routes of {identity} span more than two datagrams")
            self.payloads.extend(reversed(earlier))
        self.payloads.append(payload)
        starts.append(~offset)
        self._run = identity

    def _extend(self, data: bytes, offset: int, starts: list[int]) -> None:
        payload = self._payload(data, offset)
        if route_identity(payload) == self._run:
            self.payloads.append(payload)
            starts.append(~offset)
        else:
            self._run = None
            starts.append(offset)

    @staticmethod
    def _payload(data: bytes, offset: int) -> bytes:
        length = nl.NLMSGHDR.unpack_from(data, offset)[0]
        return data[offset + 16 : offset + length]

    def _slow(self, data: bytes, offset: int) -> None:
        """The rest of a datagram from the first message the loop did not
        take: control messages, an interrupted dump, someone else's seq."""
        end = len(data)
        while offset + 16 <= end:
            length, mtype, flags, seq, _pid = nl.NLMSGHDR.unpack_from(data, offset)
            if length < 16 or offset + length > end:
                return
            if seq == self.seq:
                if flags & nl.NLM_F_DUMP_INTR:
                    self.interrupted = True
                if mtype == nl.NLMSG_DONE or mtype == nl.NLMSG_ERROR:
                    # DONE carries an error code too (e.g. -EMSGSIZE): the dump
                    # ended early, and what it holds is not the table.
                    self.error = -nl.s32(data[offset + 16 : offset + 20]) if length >= 20 else 0
                    self.done = True
                    return
                if mtype == RTM_NEWROUTE:
                    # Rare (an interrupted dump is read again anyway): keep
                    # every route; decode_route and routes() decide.
                    self.payloads.append(data[offset + 16 : offset + length])
                    self._run, self._before = None, (b"", [])
            offset += (length + 3) & ~3

    def routes(self) -> list[Route]:
        return kept_routes(filter(None, map(decode_route, self.payloads)))


def kept_routes(routes) -> list[Route]:
    """What Snapshot.routes keeps of `routes`: every one that is not plain,
    and plain ones that share an identity with one of those."""
    routes = list(routes)
    kept = {r.identity for r in routes if not r.plain}
    return [r for r in routes if not r.plain or r.identity in kept]


def plain_route_key(payload: bytes) -> tuple[tuple, tuple] | None:
    """(identity, path) of a plain IPv4 route message, read without building a
    Route; None when the route is not plain (decode it)."""
    family, _dst_len, _src_len, _tos, table, _protocol, _scope, rtype, flags = _RTMSG.unpack_from(payload)
    if rtype != _RTN_UNICAST or table == RT_TABLE_LOCAL or family != AF_INET or flags & RTM_F_CLONED:
        return None
    identity, gateway, oif, kept = _route_walk(payload)
    if kept:
        return None
    hops = ((gateway, oif, 1),) if gateway is not None or oif is not None else ()
    return identity, ("unicast", hops)


def route_dump_request(family: int = AF_INET) -> bytes:
    # rtm_table 0 (RT_TABLE_UNSPEC): every table. The kernel ignores header
    # filters on dumps unless NETLINK_GET_STRICT_CHK is set, which we never do.
    return _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)


# --- rules ---------------------------------------------------------------------

_RULE_MODELLED = {
    FRA_DST, FRA_SRC, FRA_IIFNAME, FRA_GOTO, FRA_PRIORITY, FRA_FWMARK, FRA_SUPPRESS_IFGROUP,
    FRA_SUPPRESS_PREFIXLEN, FRA_TABLE, FRA_FWMASK, FRA_OIFNAME, FRA_PAD, FRA_L3MDEV,
    FRA_UID_RANGE, FRA_PROTOCOL, FRA_IP_PROTO, FRA_SPORT_RANGE, FRA_DPORT_RANGE,
}


def decode_rule(payload: bytes) -> Rule | None:
    (family, dst_len, src_len, tos, table, _res1, _res2, action,
     flags) = _FIB_RULE_HDR.unpack_from(payload)
    if family != AF_INET and family != AF_INET6:
        return None
    a = nl.parse_attrs(payload, _FIB_RULE_HDR.size)
    if FRA_TABLE in a:
        table = nl.u32(a[FRA_TABLE])

    def prefix(key: int, length: int) -> str | None:
        return f"{ip_str(family, a[key])}/{length}" if key in a else None

    def pair(key: int, fmt: str) -> tuple[int, int] | None:
        return struct.unpack_from(fmt, a[key]) if key in a else None  # type: ignore[return-value]

    other = tuple(sorted((k, v.hex()) for k, v in a.items() if k not in _RULE_MODELLED))
    return Rule(
        family=family,
        priority=nl.u32(a[FRA_PRIORITY]) if FRA_PRIORITY in a else 0,
        table=table,
        action=RULE_ACTIONS.get(action, str(action)),
        src=prefix(FRA_SRC, src_len),
        dst=prefix(FRA_DST, dst_len),
        iif=nl.cstr(a[FRA_IIFNAME]) if FRA_IIFNAME in a else None,
        oif=nl.cstr(a[FRA_OIFNAME]) if FRA_OIFNAME in a else None,
        fwmark=nl.u32(a[FRA_FWMARK]) if FRA_FWMARK in a else 0,
        fwmask=nl.u32(a[FRA_FWMASK]) if FRA_FWMASK in a else 0,
        tos=tos,
        flags=flags,
        goto=nl.u32(a[FRA_GOTO]) if FRA_GOTO in a else 0,
        protocol=nl.u8(a[FRA_PROTOCOL]) if FRA_PROTOCOL in a else 0,
        suppress_prefixlen=nl.s32(a[FRA_SUPPRESS_PREFIXLEN]) if FRA_SUPPRESS_PREFIXLEN in a else -1,
        suppress_ifgroup=nl.s32(a[FRA_SUPPRESS_IFGROUP]) if FRA_SUPPRESS_IFGROUP in a else -1,
        l3mdev=nl.u8(a[FRA_L3MDEV]) if FRA_L3MDEV in a else 0,
        uid_range=pair(FRA_UID_RANGE, "=II"),
        ip_proto=nl.u8(a[FRA_IP_PROTO]) if FRA_IP_PROTO in a else 0,
        sport_range=pair(FRA_SPORT_RANGE, "=HH"),
        dport_range=pair(FRA_DPORT_RANGE, "=HH"),
        other=other,
    )


def rule_dump_request(family: int = AF_UNSPEC) -> bytes:
    """Every family's rules by default (the decoder keeps IPv4's and IPv6's)."""
    return _FIB_RULE_HDR.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)


# --- neighbours ----------------------------------------------------------------

def decode_neighbour(payload: bytes) -> Neighbour | None:
    family, ifindex, state, flags, _type = _NDMSG.unpack_from(payload)
    if (family != AF_INET and family != AF_INET6) or flags & NTF_PROXY:
        return None
    a = nl.parse_attrs(payload, _NDMSG.size)
    if NDA_DST not in a:
        return None
    return Neighbour(
        ifindex=ifindex,
        family=family,
        dst=ip_str(family, a[NDA_DST]),
        lladdr=mac_str(a[NDA_LLADDR]) if NDA_LLADDR in a else None,
        state=state,
        flags=flags,
    )


NUD_INCOMPLETE = 0x01
NUD_NOARP = 0x40


def neighbour_is_tracked(n: Neighbour) -> bool:
    """Neighbours the snapshot keeps. Linux creates NOARP entries (multicast,
    broadcast, loopback, IFF_NOARP devices) and INCOMPLETE entries (resolution
    just started) without any notification, and neither carries a resolved
    address, so they are left out; the fast path then defers to the kernel,
    which is what those entries would mean anyway."""
    return n.state not in (0, NUD_INCOMPLETE) and not n.state & NUD_NOARP


def neighbour_dump_request(family: int = AF_UNSPEC) -> bytes:
    """ARP's and NDP's entries by default (AF_BRIDGE asks for the FDB)."""
    return _NDMSG.pack(family, 0, 0, 0, 0)


# --- bridge forwarding database ------------------------------------------------

def decode_fdb(payload: bytes) -> FdbEntry | None:
    """An AF_BRIDGE neighbour message of a bridge's FDB (NDA_MASTER names
    the bridge); None for anything else, e.g. a device's own address lists
    (NTF_SELF) or VXLAN remotes."""
    family, ifindex, state, flags, _type = _NDMSG.unpack_from(payload)
    if family != AF_BRIDGE:
        return None
    a = nl.parse_attrs(payload, _NDMSG.size)
    if NDA_MASTER not in a or NDA_LLADDR not in a or len(a[NDA_LLADDR]) != 6:
        return None
    return FdbEntry(
        master=nl.u32(a[NDA_MASTER]),
        port=ifindex,
        mac=mac_str(a[NDA_LLADDR]),
        vlan=nl.u16(a[NDA_VLAN]) if NDA_VLAN in a else 0,
        state=state,
        flags=flags,
        ext_flags=nl.u32(a[NDA_FLAGS_EXT]) if NDA_FLAGS_EXT in a else 0,
    )


def decode_vtep(payload: bytes) -> VtepRemote | None:
    """An AF_BRIDGE neighbour message of a VXLAN device's own FDB (NTF_SELF,
    a remote address in NDA_DST: vxlan_fdb_info()); None for anything else
    (a bridge's FDB, a device's own address lists, a remote given as a
    nexthop group)."""
    family, ifindex, state, flags, _type = _NDMSG.unpack_from(payload)
    if family != AF_BRIDGE or not flags & NTF_SELF:
        return None
    a = nl.parse_attrs(payload, _NDMSG.size)
    if NDA_MASTER in a or NDA_DST not in a or len(a.get(NDA_LLADDR, b"")) != 6 or len(a[NDA_DST]) not in (4, 16):
        return None
    return VtepRemote(
        device=ifindex,
        mac=mac_str(a[NDA_LLADDR]),
        dst=ip_str(AF_INET if len(a[NDA_DST]) == 4 else AF_INET6, a[NDA_DST]),
        # network byte order on the wire (nla_put_be16)
        port=struct.unpack("!H", a[NDA_PORT][:2])[0] if NDA_PORT in a else 0,
        vni=nl.u32(a[NDA_VNI]) if NDA_VNI in a else 0,
        via=nl.u32(a[NDA_IFINDEX]) if NDA_IFINDEX in a else 0,
        # (NUD_PERMANENT, NUD_NOARP; NTF_EXT_LEARNED)
        ages=not (state & 0xC0 or flags & 0x10),
    )


# --- qdiscs -------------------------------------------------------------------

TCA_KIND = 1
INGRESS_QDISC_KINDS = ("ingress", "clsact")


def decode_qdisc(payload: bytes) -> tuple[int, str]:
    """RTM_NEWQDISC payload -> (ifindex, kind)."""
    _family, ifindex, _handle, _parent, _info = _TCMSG.unpack_from(payload)
    a = nl.parse_attrs(payload, _TCMSG.size)
    return ifindex, nl.cstr(a[TCA_KIND]) if TCA_KIND in a else ""


def qdisc_dump_request() -> bytes:
    return _TCMSG.pack(AF_UNSPEC, 0, 0, 0, 0)


# --- generic netlink: netdev family --------------------------------------------

def decode_netdev_dev(payload: bytes) -> tuple[int, int, int, int] | None:
    """genl netdev message -> (cmd, ifindex, xdp_features, xdp_rx_metadata)."""
    cmd = payload[0]
    a = nl.parse_attrs(payload, 4)
    if NETDEV_A_DEV_IFINDEX not in a:
        return None
    features = nl.u64(a[NETDEV_A_DEV_XDP_FEATURES]) if NETDEV_A_DEV_XDP_FEATURES in a else 0
    rx_meta = nl.u64(a[NETDEV_A_DEV_XDP_RX_METADATA_FEATURES]) if NETDEV_A_DEV_XDP_RX_METADATA_FEATURES in a else 0
    return cmd, nl.u32(a[NETDEV_A_DEV_IFINDEX]), features, rx_meta


# --- event dispatch --------------------------------------------------------------

def route6_mtu(payload: bytes) -> tuple[tuple, int, str] | None:
    """(Route.identity, MTU metric or 0, why its answers may not be cached
    or "") of an IPv6 route message; None for other families and cloned
    routes (exceptions)."""
    family, dst_len, src_len, tos, table, *_rest, flags = _RTMSG.unpack_from(payload)
    if family != AF_INET6 or flags & RTM_F_CLONED:
        return None
    a = nl.parse_attrs(payload, _RTMSG.size)
    mtu = 0
    if RTA_METRICS in a:
        metrics = nl.parse_attrs(a[RTA_METRICS])
        if RTAX_MTU in metrics:
            mtu = nl.u32(metrics[RTAX_MTU])
    # as Route.identity, with the source prefix IPv6 routes may also have
    identity = (family, nl.u32(a[RTA_TABLE]) if RTA_TABLE in a else table,
                f"{ip_str(family, a.get(RTA_DST, bytes(16)))}/{dst_len}", tos,
                nl.u32(a[RTA_PRIORITY]) if RTA_PRIORITY in a else 0,
                f"{ip_str(family, a.get(RTA_SRC, bytes(16)))}/{src_len}")
    uncached = ""
    if RTA_NH_ID in a:
        uncached = "routes use nexthop objects"
    elif RTA_MULTIPATH in a:
        # fib6_del_route() counts a sibling deleted before unlinking it from
        # the others and rebalancing them: a lookup between the two would
        # be cached under the new count
        uncached = "multipath routes (a sibling's deletion is counted before its siblings forget it)"
    elif RTA_CACHEINFO in a and struct.unpack_from("=i", a[RTA_CACHEINFO], 8)[0]:
        # rta_expires: a route that expires (from a router advertisement,
        # or `expires`) stops answering with no generation moving
        uncached = "routes expire (learned from router advertisements, or added with expires)"
    return identity, mtu, uncached


def _route_event(t: int, flags: int, payload: bytes) -> Message | None:
    """A plain route costs one attribute walk: a burst of BGP updates must be
    absorbed at the rate it arrives. Only what could touch a kept route is
    passed on (see changes._apply_plain_*). Of IPv6 routes, their MTU metric."""
    if payload[0] == AF_INET6:
        found = route6_mtu(payload)
        if found is None:
            return None
        return Route6Mtu(found[0], 0, "") if t == RTM_DELROUTE else Route6Mtu(*found)
    plain = plain_route_key(payload)
    if plain is None:
        route = decode_route(payload)
        if route is None:
            return None
        if t == RTM_DELROUTE:
            return RouteRemoved(route)
        return RouteUpdate(route, replace=bool(flags & nl.NLM_F_REPLACE),
                           beside=not flags & (nl.NLM_F_REPLACE | nl.NLM_F_EXCL))
    identity, path = plain
    if t == RTM_DELROUTE:
        return PlainRouteRemoved(identity, path)
    if flags & nl.NLM_F_REPLACE:
        return PlainRouteReplaced(identity)
    if flags & nl.NLM_F_EXCL:
        return None  # created where no route of its identity was: nothing kept is touched
    route = decode_route(payload)
    return None if route is None else RouteUpdate(route, beside=True)


def decode_rtnl_event(msg: nl.RawMessage) -> Message | None:
    """One rtnetlink multicast message -> change message (None: not ours)."""
    t = msg.type
    if t == RTM_NEWROUTE or t == RTM_DELROUTE:
        return _route_event(t, msg.flags, msg.payload)
    if t == RTM_NEWADDR and msg.payload[0] == AF_INET6:
        return Routes6MayExpire() if ipv6_address_expires(msg.payload) else None
    if t == RTM_NEWADDR or t == RTM_DELADDR:
        address = decode_address(msg.payload)
        if address is None:
            return None
        return AddressUpdate(address) if t == RTM_NEWADDR else AddressRemoved(address)
    if t == RTM_NEWLINK:
        link = decode_link(msg.payload)
        if link is None:
            # An AF_BRIDGE notification: a port's STP state or flags changed
            # (`bridge link set`, STP), announced in this family only.
            family, _type, index, _flags, _change = _IFINFOMSG.unpack_from(msg.payload)
            return BridgePortChanged(index) if family == AF_BRIDGE else None
        return LinkUpdate(link)
    if t == RTM_DELLINK:
        family, _type, index, _flags, _change = _IFINFOMSG.unpack_from(msg.payload)
        return LinkRemoved(index) if family == AF_UNSPEC else None
    if (t == RTM_NEWNEIGH or t == RTM_DELNEIGH) and msg.payload[0] == AF_BRIDGE:
        entry = decode_fdb(msg.payload)
        if entry is not None:
            return FdbUpdate(entry) if t == RTM_NEWNEIGH else FdbRemoved(entry)
        remote = decode_vtep(msg.payload)
        if remote is None:
            return None
        return VtepUpdate(remote) if t == RTM_NEWNEIGH else VtepRemoved(remote)
    if t == RTM_NEWNEIGH or t == RTM_DELNEIGH:
        neighbour = decode_neighbour(msg.payload)
        if neighbour is None:
            return None
        if t == RTM_NEWNEIGH and neighbour_is_tracked(neighbour):
            return NeighbourUpdate(neighbour)
        return NeighbourRemoved(neighbour)
    if t == RTM_NEWRULE or t == RTM_DELRULE:
        rule = decode_rule(msg.payload)
        if rule is None:
            return None
        return RuleUpdate(rule) if t == RTM_NEWRULE else RuleRemoved(rule)
    if t == RTM_NEWQDISC or t == RTM_DELQDISC:
        return QdiscChanged(decode_qdisc(msg.payload)[0])
    if t == RTM_NEWNEXTHOP or t == RTM_DELNEXTHOP:
        return NexthopChanged()
    if t == RTM_NEWNETCONF or t == RTM_DELNETCONF:
        if msg.payload[0] != AF_INET and msg.payload[0] != AF_INET6:
            return None
        a = nl.parse_attrs(msg.payload, 4)
        ifindex = nl.s32(a[NETCONFA_IFINDEX]) if NETCONFA_IFINDEX in a else 0
        if t == RTM_DELNETCONF and ifindex > 0:
            return NetconfRemoved(ifindex, msg.payload[0])
        return NetconfChanged(ifindex, msg.payload[0])
    return None


def decode_genl_netdev_event(msg: nl.RawMessage) -> Message | None:
    if msg.type < 0x10:  # control messages (NOOP/ERROR/DONE/OVERRUN)
        return None
    decoded = decode_netdev_dev(msg.payload)
    if decoded is None:
        return None
    cmd, ifindex, features, rx_meta = decoded
    if cmd in (NETDEV_CMD_DEV_ADD_NTF, NETDEV_CMD_DEV_CHANGE_NTF, NETDEV_CMD_DEV_GET):
        return XdpFeaturesUpdate(ifindex, features, rx_meta)
    return None


NFT_MSG_NEWGEN, NFTA_GEN_ID = 15, 1


def decode_nft_event(msg: nl.RawMessage) -> Message | None:
    if (msg.type >> 8) == NFNL_SUBSYS_NFTABLES:
        if msg.type & 0xFF == NFT_MSG_NEWGEN:
            gen = nl.parse_attrs(msg.payload, 4).get(NFTA_GEN_ID)      # (after the nfgenmsg)
            if gen is not None and len(gen) == 4:
                return NftablesChanged(nl.be32(gen))
        return NftablesChanged()
    return None


def decode_xfrm_event(msg: nl.RawMessage) -> Message | None:
    """Any message on the xfrm policy group: policies are re-counted."""
    if msg.type < 0x10:  # control messages (NOOP/ERROR/DONE/OVERRUN)
        return None
    return XfrmChanged()
