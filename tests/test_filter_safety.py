"""Safety under change: iptables rulesets replaced in a loop while traffic
flows through the DUT. Every ruleset in the loop drops one flow; whatever
the moment a frame of it arrives — during a restore, while the controller
re-reads, while tables are rewritten, while the namespace goes back to the
kernel path and returns — no frame of it may be forwarded. A flow every
ruleset accepts keeps flowing, and the fast path did take part."""
from __future__ import annotations

import random
import threading
import time

import pytest

from controller.launcher import ControllerProcess, linuxfp_stats
from linuxfp.lab.frames import udp_frame
from linuxfp.lab.packet_io import Capture, inject, settle

pytestmark = pytest.mark.netns

HEAD = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:BLOCK - [0:0]\n"
RULESETS = (
    # A: the blocked prefix first
    HEAD + "-A FORWARD -d 198.19.1.0/24 -j DROP\n"
           "-A FORWARD -p udp -m udp --dport 53 -j BLOCK\n"
           "-A BLOCK -s 198.18.64.0/24 -j DROP\nCOMMIT\n",
    # B: the same verdict for both flows through a user chain and RETURN
    HEAD + "-A FORWARD -p udp -m udp --dport 7 -j ACCEPT\n"
           "-A FORWARD -d 198.19.0.0/22 -j BLOCK\n"
           "-A BLOCK -d 198.19.1.0/24 -j DROP\n"
           "-A BLOCK -d 198.19.2.0/24 -p udp -j DROP\n"
           "-A BLOCK -j RETURN\nCOMMIT\n",
    # C: stateful (only established connections are classified; these new
    # flows go to the kernel), blocked too
    HEAD + "-A FORWARD -m conntrack --ctstate INVALID -j DROP\n"
           "-A FORWARD -d 198.19.1.0/24 -j DROP\nCOMMIT\n",
)
BLOCKED, ALLOWED = "198.19.1.9", "198.19.3.9"


@pytest.mark.parametrize("restore", ["iptables-restore", "iptables-legacy-restore"])
def test_no_frame_linux_drops_is_forwarded_while_rules_change(router_topology, restore):
    r = router_topology
    src, dut_mac = r.src_if, r.dut_left.mac
    frames = []
    for n in range(20):
        frames.append(udp_frame(src.mac, dut_mac, str(src.ip), BLOCKED, sport=2000 + n, dport=9))
        frames.append(udp_frame(src.mac, dut_mac, str(src.ip), ALLOWED, sport=2000 + n, dport=9))
    stop = threading.Event()
    sent = []

    def traffic() -> None:
        while not stop.is_set():
            sent.append(inject(r.src, src.name, frames))
            time.sleep(0.002)

    rng = random.Random(7)
    r.dut.run([restore], input=RULESETS[0])
    with ControllerProcess(r.dut.name, hook="xdp") as c, Capture(r.sink, "to-dut") as sink:
        c.settled()
        sender = threading.Thread(target=traffic, daemon=True)
        sender.start()
        try:
            for step in range(24):
                r.dut.run([restore], input=RULESETS[rng.choice((0, 1, 1, 0, 2)) if step % 6 else step % 2])
                time.sleep(rng.uniform(0, 0.05))
        finally:
            stop.set()
            sender.join()
        # Back to a ruleset the fast path evaluates, to see it at work.
        r.dut.run([restore], input=RULESETS[1])
        c.settled()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            sent.append(inject(r.src, src.name, frames))
            stats = linuxfp_stats(r.dut.name)
            nodes = {i["ifname"]: i for i in stats["interfaces"]}.get("to-src", {}).get("nodes", {})
            if nodes and nodes["filter"]["drops"].get("filter_dropped", 0) and nodes["transmit"]["fast_path"]:
                break
            time.sleep(0.1)
        settle([sink], quiet=0.3)
        got = [f.data for f in sink.stop()]
    leaked = [f for f in got if f[30:34] == bytes(int(x) for x in BLOCKED.split("."))]
    passed = [f for f in got if f[30:34] == bytes(int(x) for x in ALLOWED.split("."))]
    assert leaked == [], f"{len(leaked)} frames of a flow every ruleset drops were forwarded"
    assert len(passed) > sum(sent) // 4, (len(passed), sum(sent))
    assert nodes["transmit"]["fast_path"] > 0 and nodes["filter"]["drops"].get("filter_dropped", 0) > 0, nodes
