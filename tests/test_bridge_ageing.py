"""Ageing stays true with the bridge node: frames it bridges are invisible
to the kernel, so it hands one frame per source entry and refresh interval
to the kernel, which refreshes the entry itself. Over three ageing times of
a steady two-way flow nothing floods and no entry is lost; once the hosts
fall silent their entries age out on time, and the mirror follows."""
from __future__ import annotations

import json
import time

import pytest

from controller.launcher import ControllerProcess, linuxfp_cli, linuxfp_stats
from linuxfp.lab import Capture, Lab, inject
from linuxfp.lab.bridged import BridgeTopology, host_ip
from linuxfp.lab.frames import udp_frame

pytestmark = pytest.mark.netns

AGEING_S = 4


def _fdb(topology) -> dict[str, dict]:
    """The kernel's dynamic entries on the hosts' ports, by MAC."""
    entries = json.loads(topology.dut.run(["bridge", "-j", "-s", "fdb", "show", "br", "br0"]).stdout)
    return {e["mac"]: e for e in entries if "permanent" not in e.get("state", "") and e.get("master") == "br0"}


def _mirrored(topology) -> int:
    graph = json.loads(linuxfp_cli(topology.dut.name, "-j", "graph").stdout)
    lines = graph["notes"]["bridge"]         # "br0: 3 ports, 2 of 5 FDB entries mirrored; ..."
    return int(lines[0].split(", ")[1].split(" of ")[0])


def test_steady_flow_keeps_its_entries_and_silence_ages_them_out(require_root):
    with Lab("lfp-bra") as lab:
        topology = BridgeTopology(ageing=AGEING_S)(lab)
        a, b = topology.mac("a"), topology.mac("b")
        with ControllerProcess(topology.dut.name, hook="xdp") as controller:
            controller.settled()
            flooded = Capture(topology.ns("c"), "to-dut")
            try:
                deadline = time.monotonic() + 3 * AGEING_S
                n = 0
                while time.monotonic() < deadline:
                    n += 1
                    payload = n.to_bytes(4, "big") * 8
                    inject(topology.ns("a"), "to-dut", [udp_frame(a, b, host_ip("a"), "198.18.10.102",
                                                                  sport=49000, payload=payload)])
                    inject(topology.ns("b"), "to-dut", [udp_frame(b, a, host_ip("b"), "198.18.10.101",
                                                                  sport=49001, payload=payload)])
                    time.sleep(0.02)
                    if n % 50 == 0:
                        fdb = _fdb(topology)
                        assert a in fdb and b in fdb, (n, fdb)        # never lost
                flow_frames = [f for f in flooded.stop() if f.data[12:14] == b"\x08\x00"
                               and f.data[34:36] in (b"\xbf\x68", b"\xbf\x69")]
            finally:
                flooded.close()
            assert n > 100
            assert flow_frames == []                                  # nothing flooded
            stats = linuxfp_stats(topology.dut.name)
            fast = sum(i["fast_path"] for i in stats["interfaces"])
            assert fast > n, stats               # most of both directions took the fast path
            # Silence: the kernel ages the entries out (ageing time, plus its
            # collection interval), and the mirror follows.
            silent_since = time.monotonic()
            while a in _fdb(topology) or b in _fdb(topology):
                assert time.monotonic() - silent_since < AGEING_S + 6, _fdb(topology)
                time.sleep(0.2)
            assert time.monotonic() - silent_since >= AGEING_S - 1
            controller.settled()
            assert _mirrored(topology) == len(_fdb(topology))
