"""The typed, immutable picture of one network namespace's configuration.

Every collection is a tuple kept in a canonical order (see the `*_order`
functions) so that two snapshots of the same kernel state compare equal no
matter whether they were read in one dump or built incrementally from events.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .iptables import Ruleset

AF_INET = 2
AF_INET6 = 10

# net/if.h
IFF_UP = 0x1
IFF_BROADCAST = 0x2
IFF_LOOPBACK = 0x8
IFF_POINTOPOINT = 0x10
IFF_RUNNING = 0x40
IFF_NOARP = 0x80
IFF_PROMISC = 0x100
IFF_LOWER_UP = 0x10000

# RFC 2863 operational states (include/uapi/linux/if.h)
IF_OPER_UNKNOWN = 0
IF_OPER_NOTPRESENT = 1
IF_OPER_DOWN = 2
IF_OPER_LOWERLAYERDOWN = 3
IF_OPER_TESTING = 4
IF_OPER_DORMANT = 5
IF_OPER_UP = 6

ARPHRD_ETHER = 1
ARPHRD_LOOPBACK = 772

# include/uapi/linux/netdev.h, enum netdev_xdp_act
NETDEV_XDP_ACT_BASIC = 1 << 0
NETDEV_XDP_ACT_REDIRECT = 1 << 1
NETDEV_XDP_ACT_NDO_XMIT = 1 << 2
NETDEV_XDP_ACT_XSK_ZEROCOPY = 1 << 3
NETDEV_XDP_ACT_HW_OFFLOAD = 1 << 4
NETDEV_XDP_ACT_RX_SG = 1 << 5
NETDEV_XDP_ACT_NDO_XMIT_SG = 1 << 6

# include/uapi/linux/netdev.h, enum netdev_xdp_rx_metadata
NETDEV_XDP_RX_METADATA_TIMESTAMP = 1 << 0
NETDEV_XDP_RX_METADATA_HASH = 1 << 1
NETDEV_XDP_RX_METADATA_VLAN_TAG = 1 << 2

# IFLA_XDP_ATTACHED values
XDP_ATTACHED_NONE = 0
XDP_ATTACHED_DRV = 1
XDP_ATTACHED_SKB = 2
XDP_ATTACHED_HW = 3
XDP_ATTACHED_MULTI = 4

# rtnetlink route tables
RT_TABLE_UNSPEC = 0
RT_TABLE_DEFAULT = 253
RT_TABLE_MAIN = 254
RT_TABLE_LOCAL = 255

ROUTE_TYPES = {
    0: "unspec", 1: "unicast", 2: "local", 3: "broadcast", 4: "anycast",
    5: "multicast", 6: "blackhole", 7: "unreachable", 8: "prohibit",
    9: "throw", 10: "nat", 11: "xresolve",
}
ROUTE_TYPE_NUMBERS = {name: number for number, name in ROUTE_TYPES.items()}

# rtnh_flags (include/uapi/linux/rtnetlink.h)
RTNH_F_DEAD = 1
RTNH_F_PERVASIVE = 2
RTNH_F_ONLINK = 4
RTNH_F_OFFLOAD = 8
RTNH_F_LINKDOWN = 16
RTNH_F_UNRESOLVED = 32
RTNH_F_TRAP = 64
RTNH_F_OFFLOAD_FAILED = 128
# The kernel flips these on a route's nexthops silently (link down/up,
# offload drivers); the snapshot keeps only the flags a user sets.
RTNH_F_KERNEL_STATE = (RTNH_F_DEAD | RTNH_F_OFFLOAD | RTNH_F_LINKDOWN | RTNH_F_UNRESOLVED | RTNH_F_TRAP
                       | RTNH_F_OFFLOAD_FAILED)

# fib rule actions (include/uapi/linux/fib_rules.h)
RULE_ACTIONS = {
    0: "unspec", 1: "to_tbl", 2: "goto", 3: "nop", 6: "blackhole",
    7: "unreachable", 8: "prohibit",
}
FIB_RULE_INVERT = 0x2

# neighbour states (include/uapi/linux/neighbour.h)
NUD_STATES = {
    0x01: "incomplete", 0x02: "reachable", 0x04: "stale", 0x08: "delay",
    0x10: "probe", 0x20: "failed", 0x40: "noarp", 0x80: "permanent",
}
NUD_NONE = 0x00
NUD_VALID = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


class _JsonMixin:
    """`to_dict()` for CLI output: plain dicts/lists/str/int/bool/None."""

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class Link(_JsonMixin):
    """One network device.

    `oper_up` is our definition of "can carry packets": administratively up
    (IFF_UP), lower layer up (IFF_LOWER_UP, i.e. carrier) and an RFC 2863
    operstate of UP, or UNKNOWN for drivers that do not track it (loopback,
    some virtual devices)."""

    index: int
    name: str
    kind: str  # IFLA_INFO_KIND: "veth", "bridge", "vxlan", ...; "" when none
    master: int | None
    mtu: int
    up: bool
    oper_up: bool
    operstate: int
    mac: str  # lowercase, "" when the device has no link-layer address
    link_type: int  # ARPHRD_*
    flags: int  # IFF_*
    qdisc: str
    xdp_prog_id: int  # 0 when no XDP program is attached
    xdp_mode: int  # XDP_ATTACHED_*
    xdp_features: int  # NETDEV_XDP_ACT_* bitmask, 0 when unknown
    slave_kind: str = ""  # IFLA_INFO_SLAVE_KIND, e.g. "bridge" for a port
    peer: int | None = None  # IFLA_LINK: veth peer / lower device ifindex
    peer_netnsid: int | None = None  # IFLA_LINK_NETNSID: peer lives elsewhere
    # An ingress or clsact qdisc exists: tc ingress filters may run on this
    # device, and an XDP program would run before (and around) them.
    alias: str = ""  # IFLA_IFALIAS (`ip link set DEV alias TEXT`)
    tc_ingress: bool = False
    # tcx programs of other tools run here (linuxfp/state/tcx.py): on the
    # ingress path, or on the egress path that an XDP redirect or a
    # bpf_redirect_peer into this device's peer skips. Polled: no event.
    tcx_others_ingress: bool = False
    tcx_others_egress: bool = False
    # NETDEV_XDP_RX_METADATA_* bitmask: which metadata kfuncs the driver
    # implements (VLAN_TAG lets XDP see a tag moved out of the frame).
    xdp_rx_metadata: int = 0
    bridge: "BridgeOptions | None" = None        # kind "bridge": its options
    bridge_port: "BridgePort | None" = None      # slave_kind "bridge": the port's settings
    vxlan: "VxlanOptions | None" = None          # kind "vxlan": its options

    @property
    def xdp_sees_vlan_tags(self) -> bool:
        """XDP can tell an offloaded VLAN tag from an untagged frame here."""
        return bool(self.xdp_rx_metadata & NETDEV_XDP_RX_METADATA_VLAN_TAG)

    @property
    def can_receive_xdp_redirect(self) -> bool:
        """True when another device's XDP program may redirect frames here."""
        return bool(self.xdp_features & NETDEV_XDP_ACT_NDO_XMIT)

    @property
    def carrier(self) -> bool:
        return bool(self.flags & IFF_LOWER_UP)

    def to_dict(self) -> dict[str, Any]:
        out = _jsonable(asdict(self))
        out["can_receive_xdp_redirect"] = self.can_receive_xdp_redirect
        return out


# Bridge port STP states (include/uapi/linux/if_bridge.h, BR_STATE_*)
BR_STATE_NAMES = {0: "disabled", 1: "listening", 2: "learning", 3: "forwarding", 4: "blocking"}
BR_STATE_FORWARDING = 3


@dataclass(frozen=True, slots=True)
class BridgeOptions(_JsonMixin):
    """The options of a bridge device (IFLA_INFO_DATA) that change how it
    forwards unicast frames. Timers and counters are left out: they change
    without any configuration change."""

    ageing_time_cs: int = 30000     # IFLA_BR_AGEING_TIME, centiseconds (clock_t)
    forward_delay_cs: int = 1500
    stp_state: int = 0
    vlan_filtering: bool = False
    nf_call_iptables: bool = False  # per-bridge br_netfilter switches (OR-ed with the sysctls)
    nf_call_ip6tables: bool = False
    nf_call_arptables: bool = False
    mcast_snooping: bool = True
    group_fwd_mask: int = 0


@dataclass(frozen=True, slots=True)
class VxlanOptions(_JsonMixin):
    """The options of a VXLAN device (IFLA_INFO_DATA) the graph reads or
    shows: whether one fixed VNI makes it Ethernet to IP, and how much the
    encapsulation adds. The rest (remote, TTL, TOS, checksums, learning)
    its own transmit and receive functions apply, which run the same
    whoever hands them the frame."""

    vni: int = 0
    collect_metadata: bool = False  # "external": tunnel keys in skb metadata, not a fixed VNI
    vni_filter: bool = False        # several VNIs on one device (requires external)
    lower: int = 0                  # IFLA_VXLAN_LINK: the underlay device (`dev`), 0 when none
    ipv6: bool = False              # local or group address is IPv6: 70 bytes of headers, not 50
    port: int = 0                   # destination UDP port
    local: str = ""                 # IFLA_VXLAN_LOCAL (IPv4): the outer packets' source, "" when none
    tos: int = 0                    # IFLA_VXLAN_TOS: the outer packets' TOS, 1 to inherit the inner's
    route_short_circuit: bool = False  # IFLA_VXLAN_RSC: a router entry's frames re-addressed by the neighbours
    # What its transmit writes into the outer headers, where the fast path
    # encapsulates itself (graph/nodes/transmit.py, encapsulation_blocker):
    ttl: int = 0                    # IFLA_VXLAN_TTL: 0 takes the route's hop limit
    ttl_inherit: bool = False       # IFLA_VXLAN_TTL_INHERIT: the inner packet's TTL
    df: int = 0                     # IFLA_VXLAN_DF: 0 unset, 1 set, 2 inherit
    udp_csum: bool = True           # IFLA_VXLAN_UDP_CSUM: the outer UDP checksum is summed
    port_range: tuple[int, int] = (0, 0)  # IFLA_VXLAN_PORT_RANGE: source ports; (0, 0): ip_local_port_range's
    # options that change the header or what is sent: GBP (the mark as a
    # group policy), GPE, remote checksum offload
    extensions: bool = False

    @property
    def overhead(self) -> int:
        """Bytes the encapsulation adds in front of the frame's IP packet."""
        return (40 if self.ipv6 else 20) + 8 + 8 + 14


@dataclass(frozen=True, slots=True)
class BridgePort(_JsonMixin):
    """A bridge port's settings (IFLA_INFO_SLAVE_DATA)."""

    state: int = 0                  # BR_STATE_*
    hairpin: bool = False
    learning: bool = True
    unicast_flood: bool = True
    proxyarp: bool = False
    proxyarp_wifi: bool = False
    isolated: bool = False
    neigh_suppress: bool = False
    locked: bool = False
    mab: bool = False
    vlan_tunnel: bool = False
    backup_port: int = 0            # ifindex, 0 when none
    mrp: bool = False               # MRP ring/interconnect open flags present and set

    @property
    def state_name(self) -> str:
        return BR_STATE_NAMES.get(self.state, str(self.state))


# ndm_state values the bridge reports for FDB entries (fdb_to_nud)
NUD_PERMANENT = 0x80   # local: one of the bridge's own addresses
NUD_NOARP_STATE = 0x40  # static
NUD_REACHABLE = 0x02   # dynamic, learnt
NUD_STALE_STATE = 0x04  # dynamic, expired but not yet collected
NTF_EXT_LEARNED = 0x10
NTF_OFFLOADED = 0x20
NTF_STICKY = 0x40
NTF_EXT_LOCKED = 0x02  # NDA_FLAGS_EXT


@dataclass(frozen=True, slots=True)
class FdbEntry(_JsonMixin):
    """One entry of a bridge's forwarding database (AF_BRIDGE neighbour
    with NDA_MASTER): frames to `mac` on `vlan` leave through `port`."""

    master: int          # the bridge's ifindex
    port: int            # ndm_ifindex: a port, or the bridge itself for its own addresses
    mac: str             # lowercase
    vlan: int = 0
    state: int = NUD_REACHABLE
    flags: int = 0       # NTF_*
    ext_flags: int = 0   # NTF_EXT_*

    @property
    def local(self) -> bool:
        return bool(self.state & NUD_PERMANENT)

    @property
    def static(self) -> bool:
        return bool(self.state & NUD_NOARP_STATE)

    @property
    def locked(self) -> bool:
        return bool(self.ext_flags & NTF_EXT_LOCKED)


@dataclass(frozen=True, slots=True)
class VtepRemote(_JsonMixin):
    """One remote of a VXLAN device's own forwarding database (an AF_BRIDGE
    neighbour with NTF_SELF and NDA_DST on the device): frames to `mac`
    are encapsulated to `dst`. `port`, `vni` and `via` (NDA_IFINDEX, the
    underlay) are 0 unless the entry overrides the device's own. The
    default entry and a multicast MAC may have several remotes, each of
    which gets a copy (`bridge fdb append`); a unicast MAC has one."""

    device: int          # the VXLAN device's ifindex
    mac: str             # lowercase; all zeros for the default entry
    dst: str             # the remote VTEP's address
    port: int = 0
    vni: int = 0
    via: int = 0
    # neither permanent, noarp nor externally learnt: the device deletes it
    # once its transmit has not used it for the ageing time
    ages: bool = False

    @property
    def several(self) -> bool:
        """The MAC may have several remotes: the default or a multicast one."""
        return self.mac == "00:00:00:00:00:00" or bool(int(self.mac[:2], 16) & 1)


@dataclass(frozen=True, slots=True)
class Address(_JsonMixin):
    """An interface address. `address` is IFA_ADDRESS (the peer on
    point-to-point links), `local` is IFA_LOCAL (this host's address)."""

    index: int
    family: int
    address: str
    prefixlen: int
    local: str | None
    broadcast: str | None
    scope: int
    flags: int = 0  # IFA_F_* (secondary, ...)
    label: str = ""

    @property
    def host_address(self) -> str:
        """The address packets to this host are sent to."""
        return self.local or self.address


@dataclass(frozen=True, slots=True)
class NextHop(_JsonMixin):
    gateway: str | None
    oif: int | None
    weight: int = 1
    flags: int = 0  # RTNH_F_* a user sets (onlink, pervasive); never RTNH_F_KERNEL_STATE


@dataclass(frozen=True, slots=True)
class Route(_JsonMixin):
    family: int
    table: int
    dst: str  # prefix, "0.0.0.0/0" for the default route
    type: str  # unicast, local, broadcast, blackhole, ...
    protocol: int
    scope: int
    priority: int
    tos: int
    nexthops: tuple[NextHop, ...]
    mtu: int = 0  # RTAX_MTU metric, 0 when unset
    realm: int = 0  # RTA_FLOW
    prefsrc: str | None = None
    nh_id: int = 0  # RTA_NH_ID: route uses a nexthop object (not modelled)
    hoplimit: int = 0  # RTAX_HOPLIMIT metric: the TTL of packets the host sends by it, 0 when unset
    # Attributes no node reads, kept so that two routes of one identity that
    # differ only there stay two routes: RTA_METRICS (advmss, lock, ...) and
    # RTA_ENCAP_TYPE + RTA_ENCAP, as hex.
    metrics: str = ""
    encap: str = ""

    @property
    def prefixlen(self) -> int:
        return int(self.dst.rsplit("/", 1)[1])

    @property
    def identity(self) -> tuple[int, int, str, int, int]:
        """What IPv4 FIB uses to find "the same" route (fib_find_alias)."""
        return (self.family, self.table, self.dst, self.tos, self.priority)

    @property
    def plain(self) -> bool:
        """A route only the live FIB needs to know: unicast, outside the local
        table, one nexthop that is not a nexthop object, no MTU or hop-limit
        metric, not
        an IPv4 default route. The datapath asks bpf_fib_lookup() about
        these and no node reads them, so the snapshot does not keep them (a
        BGP full table is 800 000 of them); see Snapshot.routes. (Several
        IPv4 default routes in one table make output lookups pick among
        them, fib_select_default(): the transmit node reads them.)"""
        return (self.type == "unicast" and self.table != RT_TABLE_LOCAL and len(self.nexthops) <= 1
                and not self.nh_id and not self.mtu and not self.hoplimit
                and not (self.family == AF_INET and self.dst == "0.0.0.0/0"))


@dataclass(frozen=True, slots=True)
class Rule(_JsonMixin):
    family: int
    priority: int
    table: int
    action: str  # to_tbl, goto, nop, blackhole, unreachable, prohibit
    src: str | None = None
    dst: str | None = None
    iif: str | None = None
    oif: str | None = None
    fwmark: int = 0
    fwmask: int = 0
    tos: int = 0
    flags: int = 0  # FIB_RULE_* (invert, detached, ...)
    goto: int = 0
    protocol: int = 0  # who installed it; not a selector
    suppress_prefixlen: int = -1
    suppress_ifgroup: int = -1
    l3mdev: int = 0
    uid_range: tuple[int, int] | None = None
    ip_proto: int = 0
    sport_range: tuple[int, int] | None = None
    dport_range: tuple[int, int] | None = None
    other: tuple[tuple[int, str], ...] = ()  # selectors we do not model (type, hex)

    @property
    def has_selectors(self) -> bool:
        """True when the rule matches less than every packet."""
        full_uid = self.uid_range in (None, (0, 0xFFFFFFFF))
        return bool(
            self.src or self.dst or self.iif or self.oif or self.fwmark or self.fwmask
            or self.tos or (self.flags & FIB_RULE_INVERT) or self.l3mdev or not full_uid
            or self.ip_proto or self.sport_range or self.dport_range or self.other
        )


_DEFAULT_RULES = ((0, RT_TABLE_LOCAL), (32766, RT_TABLE_MAIN), (32767, RT_TABLE_DEFAULT))


def rules_are_default(rules: Iterable[Rule], family: int = AF_INET) -> bool:
    """True when `family`'s rule set is exactly the kernel's three defaults.

    Linux short-cuts policy routing while fib4_has_custom_rules is false. That
    kernel flag is sticky (any rule change sets it for good), but a rule set
    equal to the defaults gives the same lookups, which is what the fast path
    needs."""
    own = [r for r in rules if r.family == family]
    if len(own) != len(_DEFAULT_RULES):
        return False
    for rule, (priority, table) in zip(sorted(own, key=lambda r: r.priority), _DEFAULT_RULES):
        if (rule.priority, rule.table, rule.action) != (priority, table, "to_tbl"):
            return False
        if rule.has_selectors or rule.suppress_prefixlen != -1 or rule.suppress_ifgroup != -1 or rule.goto:
            return False
    return True


@dataclass(frozen=True, slots=True)
class Neighbour(_JsonMixin):
    ifindex: int
    family: int
    dst: str
    lladdr: str | None
    state: int  # NUD_* bitmask
    flags: int = 0  # NTF_*

    @property
    def state_name(self) -> str:
        if self.state == NUD_NONE:
            return "none"
        return ",".join(name for bit, name in NUD_STATES.items() if self.state & bit)

    @property
    def valid(self) -> bool:
        """Linux would transmit to this neighbour without resolving it first."""
        return bool(self.state & NUD_VALID) and self.lladdr is not None

    def to_dict(self) -> dict[str, Any]:
        out = _jsonable(asdict(self))
        out["state_name"] = self.state_name
        return out


@dataclass(frozen=True, slots=True)
class DeviceConf:
    """A device's IPv4 and IPv6 configuration as its RTM_NEWLINK carries it
    (IFLA_AF_SPEC: IFLA_INET_CONF, IFLA_INET6_CONF — the values the
    /proc/sys/net/ipv{4,6}/conf/DEV files show), raw; None where the kernel
    keeps none for that family (sysctl.py reads them)."""

    index: int
    ipv4: bytes | None
    ipv6: bytes | None


@dataclass(frozen=True, slots=True)
class InterfaceSysctls(_JsonMixin):
    """The values Linux's IPv4 forwarding path actually applies to a device
    (conf/all and conf/DEV combined the way the kernel macros do)."""

    ifindex: int
    forwarding: bool  # IN_DEV_FORWARD: conf/DEV/forwarding only
    rp_filter: int  # IN_DEV_RPFILTER: max(all, dev)
    accept_local: bool  # IN_DEV_ACCEPT_LOCAL: all || dev
    send_redirects: bool  # IN_DEV_TX_REDIRECTS: all || dev
    route_localnet: bool  # IN_DEV_ROUTE_LOCALNET: all || dev
    # IN_DEV_RX_REDIRECTS: forwarding ? all && dev : all || dev. Accepted ICMP
    # redirects create next-hop exceptions bpf_fib_lookup does not apply.
    accept_redirects: bool = False
    # IN_DEV_IGNORE_ROUTES_WITH_LINKDOWN: all || dev. The FIB reads it live
    # and its change flushes nothing.
    ignore_routes_with_linkdown: bool = False
    # IPv6 (net.ipv6.conf.DEV): IPv6 is on (disable_ipv6=0; False where the
    # kernel has no IPv6 configuration for it), and whether the device
    # accepts redirects (rt6_do_redirect(): forwarding=0 and
    # accept_redirects=1), which create route exceptions with another
    # gateway that bpf_fib_lookup() does not apply.
    ipv6: bool = False
    ipv6_accept_redirects: bool = False
    # net.ipv6.conf.{all,DEV}.ignore_routes_with_linkdown: read by every
    # IPv6 lookup; its change moves no generation.
    ipv6_ignore_routes_with_linkdown: bool = False
    # Router advertisements are processed (ipv6_accept_ra()): they change
    # routes' lifetimes and preferences in place, with no route event.
    ipv6_accept_ra: bool = False


@dataclass(frozen=True, slots=True)
class Sysctls(_JsonMixin):
    ip_forward: bool
    interfaces: tuple[InterfaceSysctls, ...] = ()  # sorted by ifindex
    # Namespace-wide net.ipv4 values the forwarding path reads.
    forward_use_pmtu: bool = False        # ip_forward_use_pmtu
    multipath_hash_policy: int = 0        # fib_multipath_hash_policy
    forward_update_priority: bool = True  # ip_forward_update_priority
    route_min_pmtu: int = 552             # route/min_pmtu: no learned IPv4 path MTU is lower
    default_ttl: int = 64                 # ip_default_ttl: what the host sends with, short of a route's hop limit
    local_port_range: tuple[int, int] = (32768, 60999)   # ip_local_port_range
    ipv6_multipath_hash_policy: int = 0   # net.ipv6.fib_multipath_hash_policy
    # br_netfilter (net.bridge.bridge-nf-call-*): bridged IPv4 / IPv6 / ARP
    # frames pass the iptables / ip6tables / arptables hooks. Absent (False)
    # without br_netfilter.
    bridge_nf_call_iptables: bool = False
    bridge_nf_call_ip6tables: bool = False
    bridge_nf_call_arptables: bool = False
    # br_netfilter is loaded (its sysctls exist): only then does a bridge's
    # own nf_call_* option, which netlink reports regardless, mean anything.
    br_netfilter: bool = False

    def for_ifindex(self, ifindex: int) -> InterfaceSysctls | None:
        i = bisect.bisect_left(self.interfaces, ifindex, key=lambda s: s.ifindex)
        if i < len(self.interfaces) and self.interfaces[i].ifindex == ifindex:
            return self.interfaces[i]
        return None


@dataclass(frozen=True, slots=True)
class NetfilterState(_JsonMixin):
    """The namespace's netfilter rulesets. `active`: whether one could touch
    forwarded IPv4 packets (nf_tables tables, iptables-legacy's; ip6tables-
    legacy's tables alone leave it false: scope.py asks of rulesets6)."""

    active: bool
    tables: tuple[str, ...] = ()  # "nft:inet filter", "legacy:filter", ...
    detail: str = ""
    # The IPv4 iptables rules of each backend holding tables (state/iptables.py),
    # and why a backend's rules could not be read.
    rulesets: tuple["Ruleset", ...] = ()
    errors: tuple[str, ...] = ()
    # The same for ip6tables (both backends; family "ip6").
    rulesets6: tuple["Ruleset", ...] = ()
    errors6: tuple[str, ...] = ()
    # Legacy x_tables of the other families (ip6tables-legacy,
    # arptables-legacy): what bridged IPv6 and ARP frames may meet through
    # br_netfilter.
    legacy_ip6_tables: tuple[str, ...] = ()
    legacy_arp_tables: tuple[str, ...] = ()
    # The ipsets iptables' and ip6tables' rules match (`-m set`), as last read.
    ipsets: tuple[IpSet, ...] = ()
    # Where the native nf_tables tables (the `nft` tool's) hook in
    # (state/nft_native.py), and why they could not be read.
    native: "NftNative" = field(default_factory=lambda: NftNative())
    native_error: str = ""
    # The nf_tables tables flagged dormant ("family name"): none of their
    # chains is hooked in.
    dormant: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NftChain(_JsonMixin):
    """A chain of a native nf_tables table, as far as it tells which packets
    the table can touch."""

    family: str                     # "inet", "ip", "ip6", "netdev", "bridge", "arp"
    table: str
    name: str
    hook: str = ""                  # "prerouting", "ingress", ...; "": a regular chain
    kind: str = ""                  # base chains: "filter", "nat" or "route"
    policy: str = ""                # base chains: "accept" or "drop"
    devices: tuple[str, ...] = ()   # the devices an ingress/egress chain is bound to, by name ...
    device_prefixes: tuple[str, ...] = ()   # ... and by name prefix (`device "eth*"`)
    rules: int = 0
    expressions: tuple[str, ...] = ()   # what its rules use, by name, nested ones too, sorted
    priority: int = 0               # base chains: where on its hook (lower first)

    @property
    def where(self) -> str:
        return f"nf_tables chain {self.family} {self.table} {self.name}"

    def binds(self, ifname: str) -> bool:
        """Whether this device-bound chain hooks the device named `ifname`."""
        return ifname in self.devices or any(ifname.startswith(p) for p in self.device_prefixes)


@dataclass(frozen=True, slots=True)
class NftObject(_JsonMixin):
    """What an nf_tables table holds besides chains and can matter beyond
    them: a stateful object ("ct helper", "connlimit", ...), a "set", a
    "flowtable"."""

    family: str
    table: str
    kind: str

    def __str__(self) -> str:
        return f"nf_tables {self.kind} of {self.family} {self.table}"


@dataclass(frozen=True, slots=True)
class NftNative(_JsonMixin):
    """The native nf_tables tables' chains, and every table's objects (of
    `tables`, the ones read).
    `hooks_by_name`: a device-bound chain hooks whichever device has one of
    its names, now and later (Linux 6.16 on; before, it stays with the
    device it was bound to, renamed or not)."""

    chains: tuple[NftChain, ...] = ()
    objects: tuple[NftObject, ...] = ()
    hooks_by_name: bool = False
    tables: tuple[str, ...] = ()    # "family name" of the tables read (any other is not known here)
    # the forward filter chains' rules, per base chain and packet family, in
    # iptables' model (state/nft_forward.py): the filter node evaluates them
    forward: tuple["Ruleset", ...] = ()


@dataclass(frozen=True, slots=True)
class IpSet(_JsonMixin):
    """An ipset an iptables rule matches against (state/ipset.py)."""

    name: str
    kind: str = ""                                  # "hash:net", ...
    prefixes: tuple[tuple[int, int], ...] = ()      # (network, length) of its family, sorted
    unsupported: str | None = None                  # why the fast path cannot mirror it
    members: tuple[str, ...] = ()                   # a list:set's sets
    # hash:ip,port and hash:net,port: (network, length, protocol, port); an
    # ICMP member's port is type << 8 | code
    ports: tuple[tuple[int, int, int, int], ...] = ()
    # hash:net,iface: (network, length, interface name, name is a wildcard prefix)
    ifaces: tuple[tuple[int, int, str, bool], ...] = ()
    # NFPROTO_IPV4 (2) or NFPROTO_IPV6 (10): whose addresses its members are
    # (a packet of the other family never matches); NFPROTO_UNSPEC (0): an
    # empty list:set, which matches no packet of either (state/ipset.py)
    family: int = 2

    @property
    def dimension(self) -> int:
        return 2 if self.kind.endswith((",port", ",iface")) else 1


@dataclass(frozen=True, slots=True)
class XfrmState(_JsonMixin):
    """IPsec policies of the namespace (ip_forward checks them)."""

    available: bool = True
    policies_in: int = 0
    policies_out: int = 0
    policies_fwd: int = 0
    default_blocks: bool = False   # a default policy (in/fwd/out) is "block"
    unreadable: bool = False       # the kernel has xfrm but did not answer: assume policies

    @property
    def active(self) -> bool:
        return bool(self.policies_in or self.policies_out or self.policies_fwd or self.default_blocks
                    or self.unreadable)


def link_order(link: Link) -> int:
    return link.index


def address_order(a: Address) -> tuple:
    return (a.index, a.family, a.local or "", a.prefixlen, a.address)


def _nexthop_order(nh: NextHop) -> tuple:
    return (nh.gateway or "", nh.oif or 0, nh.weight, nh.flags)


def route_order(r: Route) -> tuple:
    """Identity first; then every attribute, since routes of one identity
    may differ in any of them (each has its own fib_info)."""
    return (r.family, r.table, r.dst, r.tos, r.priority, r.type,
            tuple(_nexthop_order(nh) for nh in r.nexthops), r.mtu, r.protocol, r.scope, r.prefsrc or "",
            r.realm, r.nh_id, r.metrics, r.encap)


def rule_order(r: Rule) -> tuple:
    return (r.family, r.priority, r.table, r.action, r.src or "", r.dst or "",
            r.iif or "", r.oif or "", r.fwmark, r.fwmask, r.tos, r.flags, r.goto, repr(r))


def neighbour_order(n: Neighbour) -> tuple:
    return (n.ifindex, n.family, n.dst)


@dataclass(frozen=True, slots=True)
class VethPeer(_JsonMixin):
    """The far end of one of our veths, living in another network namespace
    (a container's eth0): what decides whether a frame sent into our end
    could be handed straight to it. Read with IFLA_TARGET_NETNSID and kept
    current by that namespace's link events (NETLINK_LISTEN_ALL_NSID)."""

    nsid: int            # our id for its namespace (our veth's IFLA_LINK_NETNSID)
    index: int           # its ifindex there (our veth's IFLA_LINK)
    mac: str             # lowercase
    mtu: int
    up: bool             # IFF_UP
    xdp_prog_id: int     # an XDP program runs on what it receives


def has_far_end(link: Link) -> bool:
    """A veth whose other end lives in another namespace (other kinds may
    name a lower device there: vxlan, macvlan — not a peer)."""
    return link.kind == "veth" and link.peer_netnsid is not None and link.peer is not None


def peer_order(p: VethPeer) -> tuple:
    return (p.nsid, p.index)


def fdb_order(e: FdbEntry) -> tuple:
    """What the bridge keys its FDB by (bridge, VLAN, MAC)."""
    return (e.master, e.vlan, e.mac)


def vtep_order(e: VtepRemote) -> tuple:
    """A VXLAN FDB remote's identity. A unicast MAC has one remote, which a
    replace changes (announced as the new remote alone: vxlan_fdb_replace());
    the default (all zeros) and multicast MACs have a remote per append,
    each announced on its own (vxlan_fdb_append()) and told apart by
    address, port, VNI and underlay (vxlan_fdb_find_rdst())."""
    return (e.device, e.mac) + ((e.dst, e.port, e.vni, e.via) if e.several else ())


@dataclass(frozen=True)
class Snapshot(_JsonMixin):
    """Everything the graph stage needs, read from one network namespace."""

    links: tuple[Link, ...]
    addresses: tuple[Address, ...]
    # The routes a node reads: every route that is not `plain`, plus any plain
    # route with the identity of one of those (so a replace or removal of
    # that identity can be told apart). Plain routes are left to the live FIB.
    routes: tuple[Route, ...]
    rules: tuple[Rule, ...]
    neighbours: tuple[Neighbour, ...]
    sysctls: Sysctls
    netfilter: NetfilterState
    netns_inode: int
    xfrm: XfrmState = XfrmState()
    fdb: tuple[FdbEntry, ...] = ()     # every bridge's FDB, in fdb_order
    peers: tuple[VethPeer, ...] = ()   # far ends of our veths in other namespaces, in peer_order
    # IPv6 routes carrying an MTU metric, as (Route.identity, MTU), sorted:
    # ip6_forward() honours them, bpf_fib_lookup() only when locked. Every
    # other IPv6 route is left to the live FIB.
    route_mtus6: tuple[tuple[tuple, int], ...] = ()
    # IPv6 routes whose answers no generation versions, as (Route.identity,
    # why), sorted: the FIB-answer cache is off for IPv6 while any exists.
    routes6_uncached: tuple[tuple[tuple, str], ...] = ()
    vteps: tuple[VtepRemote, ...] = ()  # every VXLAN device's FDB remotes, in vtep_order
    _field_hashes: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    _FIELDS = ("links", "addresses", "routes", "rules", "neighbours", "sysctls",
               "netfilter", "netns_inode", "xfrm", "fdb", "peers", "route_mtus6",
               "routes6_uncached", "vteps")

    def __hash__(self) -> int:
        # Hashing 10k routes costs milliseconds, so each field's hash is
        # computed once and handed on to snapshots that share the field.
        cache = self._field_hashes
        parts = []
        for name in self._FIELDS:
            h = cache.get(name)
            if h is None:
                h = cache[name] = hash(getattr(self, name))
            parts.append(h)
        return hash(tuple(parts))

    def inherit_hashes(self, older: Snapshot) -> Snapshot:
        """Reuse `older`'s cached field hashes for fields shared by identity."""
        for name, h in older._field_hashes.items():
            if getattr(self, name) is getattr(older, name):
                self._field_hashes.setdefault(name, h)
        return self

    # The architecture doc calls this field `sysctl`.
    @property
    def sysctl(self) -> Sysctls:
        return self.sysctls

    def link(self, index: int) -> Link | None:
        i = bisect.bisect_left(self.links, index, key=link_order)
        if i < len(self.links) and self.links[i].index == index:
            return self.links[i]
        return None

    def peer_of(self, link: Link) -> VethPeer | None:
        """The far end of `link` when it is a veth whose peer lives in another
        namespace we have facts for."""
        if not has_far_end(link):
            return None
        key = (link.peer_netnsid, link.peer)
        i = bisect.bisect_left(self.peers, key, key=peer_order)
        if i < len(self.peers) and peer_order(self.peers[i]) == key:
            return self.peers[i]
        return None

    def link_by_name(self, name: str) -> Link | None:
        for link in self.links:
            if link.name == name:
                return link
        return None

    def addresses_of(self, index: int, family: int | None = None) -> tuple[Address, ...]:
        lo = bisect.bisect_left(self.addresses, index, key=lambda a: a.index)
        hi = bisect.bisect_right(self.addresses, index, key=lambda a: a.index)
        return tuple(a for a in self.addresses[lo:hi] if family is None or a.family == family)

    def routes_in_table(self, table: int) -> tuple[Route, ...]:
        return tuple(r for r in self.routes if r.table == table)

    def neighbours_of(self, ifindex: int) -> tuple[Neighbour, ...]:
        lo = bisect.bisect_left(self.neighbours, ifindex, key=lambda n: n.ifindex)
        hi = bisect.bisect_right(self.neighbours, ifindex, key=lambda n: n.ifindex)
        return self.neighbours[lo:hi]

    def fdb_of(self, bridge: int) -> tuple[FdbEntry, ...]:
        lo = bisect.bisect_left(self.fdb, bridge, key=lambda e: e.master)
        hi = bisect.bisect_right(self.fdb, bridge, key=lambda e: e.master)
        return self.fdb[lo:hi]

    def ports_of(self, bridge: int) -> tuple[Link, ...]:
        return tuple(link for link in self.links if link.master == bridge and link.bridge_port is not None)

    def interface_sysctls(self, ifindex: int) -> InterfaceSysctls | None:
        return self.sysctls.for_ifindex(ifindex)

    @property
    def default_rules(self) -> bool:
        """IPv4 policy routing is the kernel's default three rules."""
        return rules_are_default(self.rules, AF_INET)

    def changed_fields(self, other: Snapshot) -> frozenset[str]:
        """Names of the fields that differ; identical tuples are shared between
        incrementally built snapshots, so unchanged fields cost one `is`."""
        changed = set()
        for name in self._FIELDS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine is not theirs and mine != theirs:
                changed.add(name)
        return frozenset(changed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "netns_inode": self.netns_inode,
            "links": [x.to_dict() for x in self.links],
            "addresses": [x.to_dict() for x in self.addresses],
            "routes": [x.to_dict() for x in self.routes],
            "rules": [x.to_dict() for x in self.rules],
            "neighbours": [x.to_dict() for x in self.neighbours],
            "sysctls": self.sysctls.to_dict(),
            "netfilter": self.netfilter.to_dict(),
            "xfrm": self.xfrm.to_dict(),
            "fdb": [x.to_dict() for x in self.fdb],
            "vteps": [x.to_dict() for x in self.vteps],
            "route_mtus6": [{"table": i[1], "dst": i[2], "from": i[5], "metric": i[4], "mtu": mtu}
                            for i, mtu in self.route_mtus6],
            "routes6_uncached": [{"table": i[1], "dst": i[2], "from": i[5], "metric": i[4], "why": why}
                                 for i, why in self.routes6_uncached],
            "peers": [x.to_dict() for x in self.peers],
            "default_rules": self.default_rules,
        }
