"""The packet-processing graph: what each ingress interface runs, and the
per-interface facts the nodes read from maps."""
from __future__ import annotations

from dataclasses import dataclass, field

from .shape import Shape
from .tables import Table

# Bits of struct lfp_iface.flags (bpf_modules/common.h).
IF_FORWARDING = 1 << 0
IF_RP_FILTER = 1 << 1
IF_XDP_TX = 1 << 2
IF_TC_TX = 1 << 3           # routed IPv4 (sendable, takes no IPv4 redirects) or bridged frames may leave here
IF_ROUTED_TX = 1 << 4       # a routed packet may be redirected here: up, supported, not enslaved (IPv6's need)
# bit 5: free
IF_SRC_FULL_CHECK = 1 << 6
IF_SET_PRIORITY = 1 << 7
IF_BRIDGE_TX = 1 << 8       # a bridge port in forwarding state: bridged frames may leave here
IF_IPV6 = 1 << 9            # IPv6 arriving here may be routed (nothing in the namespace forbids it)
IF_IPV6_TX = 1 << 10        # routed IPv6 may leave here: IPv6 on, takes no redirects
IF_ENCAP_TX = 1 << 11       # a tunnel's outer packet the fast path builds may leave here (vxlan_tx.h)

FLAG_NAMES = {
    IF_FORWARDING: "forwarding",
    IF_RP_FILTER: "rp_filter",
    IF_XDP_TX: "xdp_tx",
    IF_TC_TX: "tc_tx",
    IF_ROUTED_TX: "routed_tx",
    IF_SRC_FULL_CHECK: "src_full_check",
    IF_SET_PRIORITY: "set_priority",
    IF_BRIDGE_TX: "bridge_tx",
    IF_IPV6: "ipv6",
    IF_IPV6_TX: "ipv6_tx",
    IF_ENCAP_TX: "encap_tx",
}


def flag_names(flags: int) -> tuple[str, ...]:
    return tuple(name for bit, name in FLAG_NAMES.items() if flags & bit)


@dataclass(frozen=True)
class IfaceFacts:
    """One lfp_ifaces map entry: what a node may assume about an interface."""

    ifindex: int
    flags: int
    mtu: int
    mac: bytes
    fwd_len_cap: int = 0     # longest IPv4 packet forwarded in the fast path; 0 = no cap
    tx_len_cap: int = 0      # longest IPv4 packet sent out of this egress in the fast path; 0 = no cap
    fwd_len_cap6: int = 0    # longest IPv6 packet forwarded in the fast path; 0 = no cap

    def to_dict(self) -> dict:
        return {
            "ifindex": self.ifindex,
            "flags": list(flag_names(self.flags)),
            "mtu": self.mtu,
            "mac": ":".join(f"{b:02x}" for b in self.mac),
            "fwd_len_cap": self.fwd_len_cap,
            "fwd_len_cap6": self.fwd_len_cap6,
            "tx_len_cap": self.tx_len_cap,
        }


# Values of lfp_neigh (enum lfp_neigh_state in bpf_modules/transmit.h).
NEIGH_CONFIRMED, NEIGH_STALE, NEIGH_PROBING = 1, 2, 3
NEIGH_STATE_NAMES = {NEIGH_CONFIRMED: "confirmed", NEIGH_STALE: "stale", NEIGH_PROBING: "probing"}


@dataclass(frozen=True)
class NeighbourFacts:
    """One lfp_neigh entry. The link-layer address is not written to the map
    but is part of the value compared: a new address on a STALE entry means
    Linux is back to "the next packet starts probing"."""

    ifindex: int
    address: str
    state: int
    lladdr: str

    @property
    def key(self) -> tuple[int, str]:
        return (self.ifindex, self.address)

    def to_dict(self) -> dict:
        return {"ifindex": self.ifindex, "address": self.address,
                "state": NEIGH_STATE_NAMES[self.state], "lladdr": self.lladdr}


@dataclass(frozen=True)
class Pipeline:
    """The nodes a packet arriving on one interface traverses, in order."""

    ifindex: int
    ifname: str
    shape: Shape
    # Why `--hook auto` chose TC: XDP could not be exact, or would change
    # what a user sees ("" otherwise).
    hook_note: str = field(default="", compare=False)

    @property
    def hook(self) -> str:
        return self.shape.hook

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.shape.nodes

    def paths(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The paths through this pipeline's nodes, each with what sends a
        packet there ("" for the only one): nodes/__init__.py's paths_through."""
        from .nodes import node_named, paths_through

        return tuple((via, tuple(n.name for n in nodes))
                     for via, nodes in paths_through(tuple(node_named(n) for n in self.nodes)))

    def to_dict(self) -> dict:
        return {"ifindex": self.ifindex, "ifname": self.ifname, "hook": self.hook,
                "nodes": list(self.nodes), "shape": str(self.shape), "hook_note": self.hook_note,
                "paths": [{"via": via, "nodes": list(nodes)} for via, nodes in self.paths()]}


@dataclass(frozen=True)
class Skipped:
    """An interface left on the kernel path, and why."""

    ifindex: int
    ifname: str
    reason: str

    def to_dict(self) -> dict:
        return {"ifindex": self.ifindex, "ifname": self.ifname, "reason": self.reason}


@dataclass(frozen=True)
class Graph:
    """Per ingress, the pipeline Linux's configuration calls for; per node,
    the tables it owns. Interface facts are the pipeline's own tables."""

    pipelines: tuple[Pipeline, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    ifaces: tuple[IfaceFacts, ...] = ()
    tables: tuple[Table, ...] = ()
    # per node, what it makes of the configuration (`linuxfp graph`)
    notes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def pipeline(self, ifindex: int) -> Pipeline | None:
        for p in self.pipelines:
            if p.ifindex == ifindex:
                return p
        return None

    def table(self, name: str) -> Table | None:
        for t in self.tables:
            if t.name == name:
                return t
        return None

    def shapes(self) -> tuple[Shape, ...]:
        return tuple(sorted({p.shape for p in self.pipelines}))

    def to_dict(self) -> dict:
        return {
            "pipelines": [p.to_dict() for p in self.pipelines],
            "skipped": [s.to_dict() for s in self.skipped],
            "ifaces": [f.to_dict() for f in self.ifaces],
            "tables": [t.to_dict() for t in self.tables],
            "notes": {node: list(lines) for node, lines in self.notes},
        }
