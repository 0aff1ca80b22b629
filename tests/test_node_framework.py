"""A node added from outside the tree (tests/example_node) through the
registry alone: rendered between route and transmit, its counters parsed
from its header, its table synced by the controller from the snapshot, and
its three outcomes — let through, drop, pass to the kernel — seen on real
traffic. The example node is not a Linux behaviour; it exercises the
framework. Everything that registers it runs in a subprocess, so this
process keeps the built-in registry."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.launcher import ControllerProcess, _env
from linuxfp.lab import Capture, inject, settle
from linuxfp.lab.frames import udp_frame

NODE = Path(__file__).parent / "example_node" / "egress_guard.py"
ENV = {"LINUXFP_NODES": str(NODE)}


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**_env(), **ENV}).stdout


def test_example_node_renders_between_route_and_transmit_with_its_counters():
    out = json.loads(_python(
        "import json\n"
        "from linuxfp.graph import Shape, registered\n"
        "from linuxfp.synth import build, counters, render\n"
        "shape = Shape('xdp', ('router', 'egress_guard', 'transmit'))\n"
        "src = render(shape)\n"
        "build(shape)\n"       # compiles: the header is found by path
        "print(json.dumps({'nodes': [n.name for n in registered()], 'src': src,\n"
        "                  'counters': {c.name: [c.node, c.kind] for c in counters()}}))\n"))
    assert out["nodes"] == ["router", "transmit", "filter", "bridge", "bridge_filter", "bridge_tx", "conntrack",
                            "nat_out", "egress_guard"]
    src = out["src"]
    assert src.index("router_node(&pkt)") < src.index("egress_guard_node(&pkt)") < src.index("transmit_node(&pkt)")
    assert out["counters"]["guard_dropped"] == ["egress_guard", "drop"]
    assert out["counters"]["guard_passed"] == ["egress_guard", "pass"]


def _stats(router) -> dict:
    proc = subprocess.run(["ip", "netns", "exec", router.dut.name, sys.executable, "-m", "controller.cli",
                           "-j", "stats"], capture_output=True, text=True, check=True, env={**_env(), **ENV})
    return {i["ifname"]: i for i in json.loads(proc.stdout)["interfaces"]}["to-src"]


def _burst_to_sink(router, count: int) -> int:
    """Frames of a UDP burst routed to the sink that arrive there."""
    src = router.src_if
    frame = udp_frame(src.mac, router.dut_left.mac, str(src.ip), "198.19.3.7", size=64)
    with Capture(router.sink, "to-dut") as sink:
        inject(router.src, src.name, [frame] * count)
        settle([sink], quiet=0.2)
        return len([f for f in sink.stop() if len(f.data) >= 64])


@pytest.mark.netns
def test_counters_are_numbered_alike_whichever_node_a_process_imports_first():
    """A process that imports a node's module before anything asks for the
    registry (a test, a tool) numbers the counters as the controller does:
    otherwise it would read another version of the maps' layout and
    mislabel every counter."""
    def numbering(first: str) -> dict:
        code = (f"import {first}\n" if first else "") + (
            "import json\nfrom linuxfp.graph.nodes import registered\n"
            "from linuxfp.synth import counters\nfrom linuxfp.synth.compile import maps_layout_digest\n"
            "print(json.dumps({'nodes': [n.name for n in registered()], 'digest': maps_layout_digest(),\n"
            "                  'counters': [c.name for c in counters()]}))")
        return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                         env=_env()).stdout)

    canonical = numbering("")
    for first in ("linuxfp.graph.nodes.iptables_filter", "linuxfp.graph.nodes.bridge_tx",
                  "linuxfp.graph.nodes.conntrack"):
        assert numbering(first) == canonical, first


def test_example_node_lets_through_drops_and_passes(router_topology, ip_forw_datagrams):
    r = router_topology
    egress = r.dut_right.name
    with ControllerProcess(r.dut.name, hook="xdp", env=ENV) as c:
        proc = subprocess.run(["ip", "netns", "exec", r.dut.name, sys.executable, "-m", "controller.cli",
                               "-j", "status"], capture_output=True, text=True, check=True, env={**_env(), **ENV})
        shapes = {i["ifname"]: i["shape"] for i in json.loads(proc.stdout)["interfaces"]}
        assert shapes["to-src"] == "xdp:router+egress_guard+transmit"

        # no entry: the node lets the packet through to transmit
        before = _stats(r)
        assert _burst_to_sink(r, 30) == 30
        assert _stats(r)["fast_path"] >= before["fast_path"] + 30

        # its table follows the snapshot: an alias on the egress
        r.dut.run(["ip", "link", "set", egress, "alias", "lfp-guard:drop"])
        c.settled()
        forwarded = ip_forw_datagrams(r.dut)
        assert _burst_to_sink(r, 30) == 0
        assert _stats(r)["nodes"]["egress_guard"]["dropped"] >= 30
        assert ip_forw_datagrams(r.dut) == forwarded

        r.dut.run(["ip", "link", "set", egress, "alias", "lfp-guard:pass"])
        c.settled()
        assert _burst_to_sink(r, 30) == 30          # the kernel forwarded them
        assert ip_forw_datagrams(r.dut) >= forwarded + 30
        assert _stats(r)["nodes"]["egress_guard"]["passed"]["guard_passed"] >= 30
