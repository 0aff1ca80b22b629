"""The bridge transmit node (bpf_modules/bridge_tx.h): a routed packet whose
egress is a Linux bridge leaves through the port the bridge's FDB names; it
owns the bridge devices' table (lfp_br_devs) and reads the bridge node's
FDB mirror and ports."""
from __future__ import annotations

from linuxfp.resources import modules_dir

from ..interfaces import ARPHRD_ETHER, NO_QDISC, transmit_skips
from ..remember import remembered
from ..tables import ARRAY, U32, CType, Table, u32
from . import Node, Stage, register
from .bridge import bridge_blocker

DEVS = "lfp_br_devs"
BRD_BRIDGE = 1 << 0              # struct lfp_br_dev.flags (LFP_BRD_* in bridge_tx.h)
BRD_SENDS = 1 << 1
DEV = CType("struct lfp_br_dev", (("flags", "I"),))

class BridgeTx(Node):
    name = "bridge_tx"
    stage = Stage.BRIDGE_TX
    header = modules_dir() / "bridge_tx.h"

    def applies(self, snapshot, link) -> bool:
        return any(flags & BRD_SENDS for flags in bridge_devices(snapshot).values())

    def needs(self, snapshot, link) -> tuple[str, ...]:
        return ("router",)              # only routed packets have a bridge egress

    def tables(self, snapshot) -> tuple[Table, ...]:
        return (Table(DEVS, self.name, U32, DEV,
                      frozenset((u32(index), DEV.pack(flags)) for index, flags in bridge_devices(snapshot).items()),
                      kind=ARRAY, by_ifindex=True, describe="bridge devices: whether routed packets may leave through them"),)

    def notes(self, snapshot) -> tuple[str, ...]:
        return tuple(f"{link.name}: routed packets {'sent to the FDB port' if flags & BRD_SENDS else 'left to the kernel'}"
                     for index, flags in bridge_devices(snapshot).items() if (link := snapshot.link(index)))


BRIDGE_TX = register(BridgeTx())

def bridge_devices(snapshot) -> dict[int, int]:
    """Per bridge device, its LFP_BRD_* flags (every ingress asks:
    remembered)."""
    return remembered("bridge_tx.devices", snapshot, _bridge_devices, by_answer=True)


def _bridge_devices(snapshot) -> dict[int, int]:
    return {link.index: BRD_BRIDGE | (BRD_SENDS if _sends(snapshot, link) else 0)
            for link in snapshot.links if link.kind == "bridge"}


def _sends(snapshot, bridge) -> bool:
    """Whether br_dev_xmit() would send a routed packet to its FDB port as
    the node does: the bridge is up and reproduced by the bridge node,
    nothing runs on its transmit path (a queue, tc egress filters, tcx
    programs of other tools, an nf_tables egress chain), and no
    accepted redirect can reroute what is sent through it."""
    conf = snapshot.sysctls.for_ifindex(bridge.index)
    # accepted ICMP redirects make next-hop exceptions bpf_fib_lookup ignores
    redirects = conf is not None and conf.accept_redirects
    return (bridge.up and bridge.oper_up and bridge.link_type == ARPHRD_ETHER and not redirects
            and transmit_skips(bridge, snapshot, NO_QDISC) is None and bridge_blocker(snapshot, bridge) is None)
