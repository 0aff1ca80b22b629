"""Declares the example node egress_guard.h to LinuxFP: loaded with
LINUXFP_NODES=tests/example_node/egress_guard.py, it touches no other node
and no controller code."""
from pathlib import Path

from linuxfp.graph.nodes import Node, Stage, register
from linuxfp.graph.tables import HASH, U8, U32, Table, u32

VERDICTS = {"lfp-guard:drop": 1, "lfp-guard:pass": 2}


class EgressGuard(Node):
    name = "egress_guard"
    stage = Stage.FORWARD            # between route (decides) and transmit (sends)
    header = Path(__file__).with_suffix(".h")

    def tables(self, snapshot):
        return (Table("lfp_guarded", self.name, U32, U8,
                      frozenset((u32(link.index), bytes([VERDICTS[link.alias]]))
                                for link in snapshot.links if link.alias in VERDICTS),
                      kind=HASH, describe="guarded egresses (1 drop, 2 pass)"),)


NODE = register(EgressGuard())
