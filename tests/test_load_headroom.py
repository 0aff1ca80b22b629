"""Device-bound XDP programs are never moved by the verifier.

A moved device-bound program leaves the kernel a dangling pointer that
oopses when its device is deleted (linuxfp/datapath/hazards.py). The
pipelines carry dead-code headroom so the first allocation fits; these tests
load every XDP shape bound to a real veth and check the kernel's own figure.
"""
from __future__ import annotations

import pytest

from linuxfp import datapath as dp
from linuxfp.datapath import hazards
from linuxfp.lab.netns import entered
from linuxfp.graph import Shape
from linuxfp.synth import build


def test_first_allocation_is_whole_pages_of_header_and_instructions():
    one = hazards.first_allocation(1)
    assert one % hazards.PAGE_SIZE == 0 and one >= hazards.PAGE_SIZE
    assert hazards.first_allocation(4000) > hazards.first_allocation(100)


@pytest.mark.parametrize("nodes", [("router", "transmit"), ("router", "filter", "transmit"),
                                   ("bridge", "router", "filter", "bridge_tx", "transmit")])
def test_device_bound_pipeline_is_not_moved_by_the_verifier(lab, nodes):
    ns = lab.namespace("hz")
    ns.run(["ip", "link", "add", "a0", "type", "veth", "peer", "name", "b0"])
    ns.run(["ip", "link", "set", "a0", "up"])
    shape = Shape("xdp", nodes)
    assert shape.device_bound
    with entered(ns):
        ifindex = int(ns.run(["cat", "/sys/class/net/a0/ifindex"]).stdout)
        with dp.BpfObject.open(build(shape).data, name="headroom") as obj:
            obj.bind_to_device(shape.entry, ifindex)
            obj.load()       # raises KernelHazard if the program was moved
            submitted = obj.insn_count(shape.entry)
            fd = obj.program(shape.entry).fd
            assert hazards.memlock(fd) == hazards.first_allocation(submitted)
            # The headroom really is dead code, and the rewrites still leave
            # room to spare: growth eating into it shows here before it is a
            # hazard (raise the share in linuxfp/synth/headroom.py then).
            verified = dp.prog_info(fd)["xlated_len"] // 8
            assert verified < submitted - 128, (verified, submitted)
