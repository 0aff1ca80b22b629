"""The bridge node (bpf_modules/bridge.h): known unicast between the ports
of a Linux bridge, decided from a mirror of the kernel's FDB; it owns the
mirror (lfp_fdb) and the ports' settings (lfp_br_ports)."""
from __future__ import annotations


from linuxfp.resources import modules_dir

from linuxfp.state.model import IFF_PROMISC, NTF_EXT_LEARNED, NTF_STICKY

from ..filtering.scope import bridge_chains, evaluated_scope6, filter_scope, ingress_chain, netfilter_reason
from ..interfaces import ARPHRD_ETHER, PLAIN_KINDS, bridge_sendable
from ..remember import link_at, remembered
from ..tables import ARRAY, HASH, U32, CType, Table, u32
from . import Node, Stage, register

PORTS, FDB = "lfp_br_ports", "lfp_fdb"
FDB_CAPACITY = 131072            # max_entries of lfp_fdb (bridge.h)

# struct lfp_br_port.flags (LFP_BRP_* in bridge.h)
BRP_FORWARDING = 1 << 0
BRP_ISOLATED = 1 << 1
BRP_NF_IPV4 = 1 << 2
BRP_NF_IPV4_RULES = 1 << 3
BRP_NF_IPV6 = 1 << 4
BRP_NF_IPV6_RULES = 1 << 5
BRP_NF_ARP_RULES = 1 << 6
BRP_LEARNING = 1 << 7
BRP_NF_ARP = 1 << 8
BRP_HAND_UP = 1 << 9
BRP_NF_IPV6_KERNEL = 1 << 10
FDB_STICKY = 1 << 0              # struct lfp_fdb_entry.flags (bridge_fdb.h)
FDB_NO_AGEING = 1 << 1
FDB_HAND_UP = 1 << 2

PORT = CType("struct lfp_br_port", (("bridge", "I"), ("flags", "I"), ("mtu", "I"), ("refresh_ms", "I")))
FDB_KEY = CType("struct lfp_fdb_key", (("bridge", "I"), ("vlan", "H"), ("mac", "6s")))      # bridge_fdb.h
FDB_ENTRY = CType("struct lfp_fdb_entry", (("port", "I"), ("flags", "I"), ("refreshed_ns", "Q")))

# The kernel refreshes an entry's age from the frames it sees; the fast path
# lets one frame per source entry through this often (at most), and at least
# ten times per ageing time.
MAX_REFRESH_MS = 1000
MIN_AGEING_CS = 100              # shorter ageing: the bridge stays on the kernel path

# Port settings that change what Linux does with a unicast frame in ways this
# node does not reproduce (ARP/ND handling, 802.1X, tunnels, ring protocols).
_PORT_FEATURES = (
    ("locked", "locked port (802.1X)"),
    ("mab", "MAC authentication bypass"),
    ("vlan_tunnel", "VLAN tunnel mapping"),
    ("mrp", "MRP ring port"),
)


class Bridge(Node):
    name = "bridge"
    stage = Stage.BRIDGE
    header = modules_dir() / "bridge.h"
    decides = True
    # iptables FORWARD rules see bridged IPv4 (ip6tables' IPv6) only through
    # br_netfilter; the node leaves such frames (LFP_BRP_NF_IPV4_RULES,
    # _IPV6_RULES) to the bridge filter where the pipeline has one, and to
    # the kernel where not.
    covers = frozenset({"iptables_filter"})
    # Forgets a mirrored entry synchronously as the kernel changes it.
    watch = modules_dir() / "bridge_watch.c"

    def applies(self, snapshot, link) -> bool:
        return link.bridge_port is not None and self.blocker(snapshot, link) is None

    def blocker(self, snapshot, link) -> str | None:
        if link.bridge_port is None:
            return None                     # not a port: the router says why
        master = link_at(snapshot, link.master) if link.master else None
        if master is None or master.kind != "bridge":
            return "bridge port without its bridge"
        why = bridge_blocker(snapshot, master)
        if why:
            return f"port of {master.name}: {why}"
        if link.link_type != ARPHRD_ETHER:
            return f"port of {master.name}: not an Ethernet interface"
        if link.kind not in PLAIN_KINDS:
            return f"port of {master.name}: {link.kind} ports are not supported yet"
        features = [text for attr, text in _PORT_FEATURES if getattr(link.bridge_port, attr)]
        if features:
            return f"port of {master.name}: {', '.join(features)} not reproduced"
        return None

    def prefers_tc(self, snapshot, link) -> str | None:
        if link.kind == "veth":
            return ("a veth port (a container's, typically): XDP on it would turn off GSO/TSO on its peer "
                    "and cap the peer's MTU")
        return None

    def tables(self, snapshot) -> tuple[Table, ...]:
        return (
            Table(PORTS, self.name, U32, PORT, port_entries(snapshot), kind=ARRAY, by_ifindex=True,
                  describe="bridge ports: bridge, state and flags, MTU, ageing refresh"),
            Table(FDB, self.name, FDB_KEY, FDB_ENTRY, fdb_entries(snapshot), kind=HASH,
                  describe="FDB mirror: (bridge, VLAN, MAC) -> port"),
        )

    def refreshed(self, table: str, messages) -> frozenset[bytes]:
        # The watch deleted the entry when the kernel changed it; the
        # announcement may carry the very entry the mirror last held.
        from linuxfp.state import FdbUpdate

        if table != FDB:
            return frozenset()
        return frozenset(fdb_key(m.entry.master, m.entry.vlan, m.entry.mac) for m in messages
                         if isinstance(m, FdbUpdate) and (_mirrored(m.entry) or _own_address(m.entry)))

    def notes(self, snapshot) -> tuple[str, ...]:
        lines = []
        for bridge in (link for link in snapshot.links if link.kind == "bridge"):
            ports = snapshot.ports_of(bridge.index)
            fdb = snapshot.fdb_of(bridge.index)
            mirrored = sum(1 for e in fdb if _mirrored(e))
            why = bridge_blocker(snapshot, bridge)
            state = f"on the kernel path: {why}" if why else f"refresh every {refresh_ms(bridge)} ms"
            lines.append(f"{bridge.name}: {len(ports)} ports, {mirrored} of {len(fdb)} FDB entries mirrored; {state}")
        return tuple(lines)


BRIDGE = register(Bridge())


# Port settings with which the bridge answers or suppresses ARP/ND frames
# arriving on *any* port (by the target's port): the whole bridge stays on
# the kernel path.
_NEIGH_HANDLING = (("neigh_suppress", "neigh_suppress"), ("proxyarp", "proxy ARP"),
                   ("proxyarp_wifi", "proxy ARP (Wi-Fi)"))

def bridge_blocker(snapshot, bridge) -> str | None:
    """Why a whole bridge stays on the kernel path (None: it need not).
    Every port asks, and the answer reads all the bridge's ports: remembered
    per bridge (a Link of the snapshot's links, named by its index), by answer."""
    return remembered("bridge.blocker", snapshot, _bridge_blocker, bridge.index, by_answer=True)


def _bridge_blocker(snapshot, index: int) -> str | None:
    bridge = snapshot.link(index)
    options = bridge.bridge
    if options is None:
        return "bridge options unknown"
    if bridge.flags & IFF_PROMISC:
        # br_handle_frame_finish then also delivers every frame up the bridge
        return "the bridge device is promiscuous (it receives a copy of every frame)"
    for port in snapshot.ports_of(bridge.index):
        for attr, text in _NEIGH_HANDLING:
            if getattr(port.bridge_port, attr):
                return f"{text} on port {port.name} (the bridge answers ARP/ND for it)"
    if options.vlan_filtering:
        return "VLAN filtering is not reproduced yet"
    if options.stp_state:
        return "STP is on (topology changes shorten ageing)"
    if options.ageing_time_cs < MIN_AGEING_CS:
        return f"ageing time {options.ageing_time_cs / 100:g} s is too short to refresh exactly"
    # (every frame of a port meets them, bridged, handed up or sent by the
    # host: its ingress and what is routed into the bridge go to the kernel)
    chains = bridge_chains(snapshot.netfilter)
    return netfilter_reason(chains) if chains else None


# Upper devices whose rx_handler on the bridge would see frames handed up to
# it before IP does.
_RX_HANDLER_UPPERS = frozenset({"macvlan", "macvtap", "ipvlan", "ipvtap"})


def hands_up(snapshot, bridge) -> bool:
    """Whether a frame to the bridge's MAC reaches IP on the bridge device
    as the nodes after the bridge reproduce it: nothing runs on the bridge's
    receive path in between (tc ingress filters or tcx programs of other
    tools, a generic XDP program, an nf_tables chain on its ingress, an
    upper device's rx_handler, the bridge being a port itself)."""
    if bridge.tc_ingress or bridge.tcx_others_ingress or bridge.xdp_prog_id or bridge.master:
        return False
    if ingress_chain(snapshot, bridge.name) is not None:
        return False
    return not any(link.peer == bridge.index and link.kind in _RX_HANDLER_UPPERS for link in snapshot.links)


def refresh_ms(bridge) -> int:
    """A tenth of the ageing time (centiseconds * 10 ms / 10), at most 1 s."""
    return max(1, min(MAX_REFRESH_MS, bridge.bridge.ageing_time_cs))


def _br_nf_calls(snapshot, family: int, option: bool) -> bool:
    """A bridge-nf-call-* switch (`family`: IPTABLES, IP6TABLES, ARPTABLES):
    the namespace's sysctl, or the bridge's own option while br_netfilter
    (which alone reads it) is loaded."""
    switches = remembered("bridge.nf_switches", snapshot, _nf_switches, by_answer=True)
    return switches[family] or (option and switches[BR_NETFILTER])


IPTABLES, IP6TABLES, ARPTABLES, BR_NETFILTER = range(4)


def _nf_switches(snapshot) -> tuple[bool, bool, bool, bool]:
    """The namespace's bridge-nf-call-iptables, -ip6tables and -arptables,
    and whether br_netfilter is loaded (every port asks: by answer, so that
    a new device's sysctls redo no port's decision)."""
    sysctls = snapshot.sysctls
    return (bool(sysctls.bridge_nf_call_iptables), bool(sysctls.bridge_nf_call_ip6tables),
            bool(sysctls.bridge_nf_call_arptables), bool(sysctls.br_netfilter))


def calls_iptables(snapshot, bridge) -> bool:
    """Whether br_netfilter shows this bridge's IPv4 frames to iptables."""
    options = bridge.bridge
    return _br_nf_calls(snapshot, IPTABLES, options is not None and options.nf_call_iptables)


def calls_ip6tables(snapshot, bridge) -> bool:
    """Whether br_netfilter shows this bridge's IPv6 frames to ip6tables."""
    options = bridge.bridge
    return _br_nf_calls(snapshot, IP6TABLES, options is not None and options.nf_call_ip6tables)


def _netfilter_flags(snapshot, bridge) -> int:
    """What br_netfilter does to this bridge's frames."""
    nf, options = snapshot.netfilter, bridge.bridge
    flags = 0
    if calls_iptables(snapshot, bridge):
        flags |= BRP_NF_IPV4
        if nf.active and _iptables_see_forwarded(nf):
            flags |= BRP_NF_IPV4_RULES
    if calls_ip6tables(snapshot, bridge):
        flags |= BRP_NF_IPV6
        # (INPUT/OUTPUT alone leave bridged IPv6 alone)
        scope6 = evaluated_scope6(nf)
        if scope6 is None:
            flags |= BRP_NF_IPV6_KERNEL
        elif scope6.filters_forward:
            flags |= BRP_NF_IPV6_RULES
    if _br_nf_calls(snapshot, ARPTABLES, options.nf_call_arptables):
        flags |= BRP_NF_ARP
        if nf.legacy_arp_tables or any(t.startswith("nft:arp ") for t in nf.tables):
            flags |= BRP_NF_ARP_RULES
    return flags


def _iptables_see_forwarded(netfilter) -> bool:
    """Whether iptables could do anything to a forwarded IPv4 packet: FORWARD
    rules, connection tracking, or what the filter scope cannot tell (tables
    that hold only INPUT or OUTPUT rules leave it alone)."""
    scope = filter_scope(netfilter)
    return scope.filters_forward or bool(scope.uncovered)


def port_entries(snapshot) -> frozenset[tuple[bytes, bytes]]:
    out = set()
    by_bridge: dict[int, int] = {}      # what every port of a bridge shares
    for link in snapshot.links:
        port = link.bridge_port
        if port is None or not link.master:
            continue
        bridge = snapshot.link(link.master)
        if bridge is None or bridge.kind != "bridge" or bridge_blocker(snapshot, bridge):
            continue
        if link.master not in by_bridge:
            by_bridge[link.master] = _netfilter_flags(snapshot, bridge) | (BRP_HAND_UP if hands_up(snapshot, bridge) else 0)
        flags = by_bridge[link.master]
        if bridge_sendable(link, snapshot):
            flags |= BRP_FORWARDING
        if port.isolated:
            flags |= BRP_ISOLATED
        if port.learning:
            flags |= BRP_LEARNING
        out.add((u32(link.index), PORT.pack(link.master, flags, link.mtu, refresh_ms(bridge))))
    return frozenset(out)


def _mirrored(entry) -> bool:
    """Entries the fast path may forward to: the bridge's own addresses
    (local delivery) and locked entries (802.1X) stay with the kernel."""
    return not entry.local and not entry.locked and entry.port != entry.master


def _own_address(entry) -> bool:
    """A local entry: the bridge's own (`dev br0`) or a port's address,
    which carries the bridge's MAC when the bridge took its port's.
    Mirrored as LFP_FDB_HAND_UP when it is the device's MAC (fdb_entries)."""
    return entry.local and entry.vlan == 0


def fdb_key(bridge: int, vlan: int, mac: str) -> bytes:
    return FDB_KEY.pack(bridge, vlan, bytes(int(part, 16) for part in mac.split(":")))


def fdb_entries(snapshot) -> frozenset[tuple[bytes, bytes]]:
    """lfp_fdb: every mirrored entry, up to the map's capacity (the rest's
    traffic goes to the kernel as unknown)."""
    out = []
    for entry in snapshot.fdb:
        if _own_address(entry):
            bridge = snapshot.link(entry.master)
            # Only the device's MAC is PACKET_HOST for br_handle_frame(); a
            # frame to another local address is dropped by ip_rcv().
            if bridge is not None and bridge.mac == entry.mac:
                out.append((fdb_key(entry.master, 0, entry.mac),
                            FDB_ENTRY.pack(entry.master, FDB_HAND_UP | FDB_STICKY | FDB_NO_AGEING, 0)))
        elif _mirrored(entry):
            flags = FDB_STICKY if entry.flags & NTF_STICKY else 0
            if entry.static or entry.flags & NTF_EXT_LEARNED:
                flags |= FDB_NO_AGEING          # the kernel never ages these: no refresh frames
            out.append((fdb_key(entry.master, entry.vlan, entry.mac), FDB_ENTRY.pack(entry.port, flags, 0)))
            if len(out) == FDB_CAPACITY:
                break
    return frozenset(out)
