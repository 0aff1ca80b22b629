"""The NAT-out node (bpf_modules/nat_out.h): nat POSTROUTING's check on a
connection the conntrack node translated — a MASQUERADEd one leaving by another
device than its own goes to the kernel, which drops it. No tables."""
from __future__ import annotations

from linuxfp.resources import modules_dir

from . import Node, Stage, register


class NatOut(Node):
    name = "nat_out"
    stage = Stage.POSTROUTING
    header = modules_dir() / "nat_out.h"

    def needs(self, snapshot, link) -> tuple[str, ...]:
        return ("conntrack",)


NAT_OUT = register(NatOut())
