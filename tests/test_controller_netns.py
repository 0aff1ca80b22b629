"""The controller running in a DUT namespace: fast path proven by counters,
lifecycle (stop, --keep adoption, detach), status and failure isolation."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller import lease
from controller.launcher import ControllerProcess, _env, layout_of, linuxfp_cli
from controller.shared_maps import SPARE_COUNTERS
from linuxfp.lab import Capture, RouterTopology, inject, ping, settle
from linuxfp.lab.frames import udp_frame

pytestmark = pytest.mark.netns


def udp_burst(router, count=200, dst="198.19.3.7"):
    src = router.src_if
    frame = udp_frame(src.mac, router.dut_left.mac, str(src.ip), dst, size=64)
    inject(router.src, src.name, [frame] * count)


def stats(router) -> dict:
    return json.loads(linuxfp_cli(router.dut.name, "-j", "stats").stdout)


def status(router) -> dict:
    return json.loads(linuxfp_cli(router.dut.name, "-j", "status").stdout)


def attached_programs(router) -> dict[str, list[int]]:
    """Per DUT interface, the XDP and tcx programs the kernel has attached
    (bpftool 7.1 does not list tcx yet, so ask the kernel directly)."""
    from linuxfp import datapath as dp
    from linuxfp.lab import entered

    out = {}
    with entered(router.dut):
        for link in json.loads(router.dut.run(["ip", "-j", "link", "show"]).stdout):
            ifindex = link["ifindex"]
            progs = dp.tcx_attached(ifindex, "ingress")
            xdp = dp.xdp_attached(ifindex).prog_id
            if xdp:
                progs.append(xdp)
            if progs:
                out[link["ifname"]] = progs
    return out


def pipeline_passes(router, reason: str, ifname="to-src") -> int:
    for entry in stats(router)["interfaces"]:
        if entry["ifname"] == ifname:
            return entry["nodes"].get("pipeline", {}).get("passed", {}).get(reason, 0)
    return 0


def status_programs(router) -> dict[str, int]:
    """The id of the program each interface runs, by name, as the controller's status says."""
    return {i["ifname"]: i["prog_id"] for i in status(router)["interfaces"]}


def fast_path_count(router, ifname="to-src") -> int:
    for entry in stats(router)["interfaces"]:
        if entry["ifname"] == ifname:
            return entry["fast_path"]
    return 0


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_traffic_takes_the_fast_path(router_topology, ip_forw_datagrams, hook):
    r = router_topology
    with ControllerProcess(r.dut.name, hook=hook):
        before = ip_forw_datagrams(r.dut)
        udp_burst(r, 200)
        assert ping(r.src, RouterTopology.SINK_IP, count=3) == 3
        # the kernel did not forward the burst; the fast path did
        assert ip_forw_datagrams(r.dut) - before < 10
        assert fast_path_count(r) >= 200
        entry = {i["ifname"]: i for i in status(r)["interfaces"]}["to-src"]
        assert entry["hook"] == hook and entry["state"] == "active" and entry["prog_id"] > 0
        assert entry["shape"] == f"{hook}:router+transmit"
        # status -s: each interface's counts beside it, like ip -s; -s -s: with the reasons
        counted = {i["ifname"]: i for i in json.loads(linuxfp_cli(r.dut.name, "-j", "status", "-s").stdout)
                   ["interfaces"]}["to-src"]["stats"]
        assert counted["fast_path"] >= 200 and "nodes" not in counted
        detailed = {i["ifname"]: i for i in json.loads(linuxfp_cli(r.dut.name, "-j", "status", "-s", "-s").stdout)
                    ["interfaces"]}["to-src"]["stats"]
        assert detailed["nodes"]["transmit"]["fast"]["forwarded"] >= 200
        assert "fast path" in linuxfp_cli(r.dut.name, "status", "-s").stdout
    # stopped: the kernel path carries on, nothing is left attached
    assert ping(r.src, RouterTopology.SINK_IP, count=2) == 2
    before = ip_forw_datagrams(r.dut)
    udp_burst(r, 50)
    assert ip_forw_datagrams(r.dut) - before >= 50
    assert attached_programs(r) == {}
    assert status(r)["interfaces"] == []


def test_config_change_is_absorbed_without_restart(router_topology, ip_forw_datagrams):
    r = router_topology
    with ControllerProcess(r.dut.name, hook="xdp") as c:
        r.dut.run(["ip", "route", "replace", "blackhole", "198.19.3.0/24"])
        c.settled()
        before_fwd, before_fast = ip_forw_datagrams(r.dut), fast_path_count(r)
        udp_burst(r, 20)
        assert fast_path_count(r) == before_fast      # blackholed: nothing forwarded fast
        assert ip_forw_datagrams(r.dut) == before_fwd   # and Linux drops it too
        passed = {i["ifname"]: i for i in stats(r)["interfaces"]}["to-src"]["nodes"]["router"]["passed"]
        assert passed.get("fib_blackhole", 0) >= 20
        r.dut.run(["ip", "route", "replace", "198.19.3.0/24", "via", RouterTopology.SINK_IP])
        c.settled()
        udp_burst(r, 20)
        assert fast_path_count(r) >= before_fast + 20
        assert stats(r)["response_time"]["all"]["n"] >= 2


def test_the_loop_tidies_once_idle(router_topology):
    """build_graph's tidy step (forget_stale) is left out of the response
    time: the loop runs it once it idles after a change
    (test_reconcile.py checks _tidy itself and the bound of a burst that
    never idles)."""
    r = router_topology
    with ControllerProcess(r.dut.name, hook="xdp", verbose=True) as c:
        c.settled()
        # (the start's own tidy, once it has idled: counted before the change)
        tidied = -1
        while tidied != (tidied := c.stderr().count("remembered answers tidied")):
            time.sleep(0.5)
        applied = c.applied
        r.dut.run(["ip", "route", "replace", "198.19.3.0/24", "via", RouterTopology.SINK_IP, "mtu", "1400"])
        c.wait_applied(applied)
        deadline = time.monotonic() + 5
        while c.stderr().count("remembered answers tidied") == tidied and time.monotonic() < deadline:
            time.sleep(0.05)
        log = c.stderr()
    assert log.count("remembered answers tidied") > tidied, log[-2000:]


def test_keep_then_adopt_without_reattaching(router_topology, ip_forw_datagrams):
    r = router_topology
    with ControllerProcess(r.dut.name, hook="xdp", keep=True):
        first = {i["ifname"]: i for i in status(r)["interfaces"]}
    kept = {i["ifname"]: i for i in status(r)["interfaces"]}
    assert kept["to-src"]["state"] == "active" and kept["to-src"]["prog_id"] == first["to-src"]["prog_id"]
    assert status(r)["controller_pid"] is None
    time.sleep(lease.TERM_NS / 1e9 + 0.05)
    # Nobody renews the lease: the kept datapath hands everything to Linux.
    before = ip_forw_datagrams(r.dut)
    udp_burst(r, 30)
    assert ip_forw_datagrams(r.dut) - before >= 30
    assert pipeline_passes(r, "lease_expired") >= 30
    with ControllerProcess(r.dut.name, hook="xdp") as c:
        adopted = {i["ifname"]: i for i in status(r)["interfaces"]}
        assert adopted["to-src"]["prog_id"] == first["to-src"]["prog_id"]
        assert adopted["to-src"]["link_id"] == first["to-src"]["link_id"]
        assert "adopted" in c.stderr()
        fast = fast_path_count(r)
        udp_burst(r, 30)   # adopted and renewed: the same program forwards again
        assert fast_path_count(r) - fast >= 30
    assert status(r)["interfaces"] == []


def test_detach_removes_everything_and_is_idempotent(router_topology):
    r = router_topology
    with ControllerProcess(r.dut.name, hook="tc", keep=True):
        pass
    assert len(status(r)["interfaces"]) == 2
    out = linuxfp_cli(r.dut.name, "detach")
    assert out.returncode == 0 and "detached" in out.stdout
    assert status(r)["interfaces"] == [] and attached_programs(r) == {}
    again = linuxfp_cli(r.dut.name, "detach")
    assert again.returncode == 0 and "nothing attached" in again.stdout


def test_an_interface_that_fails_stays_on_the_kernel_path(router_topology, tmp_path):
    """Someone else's XDP program on one interface makes our attach fail there;
    that interface keeps the kernel path, the other one is accelerated."""
    from linuxfp import datapath as dp
    from linuxfp.lab import entered

    r = router_topology
    obj_path = str(tmp_path / "foreign.o")
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c",
                    os.path.join(os.path.dirname(__file__), "bpf", "foreign_xdp_pass.c"), "-o", obj_path], check=True)
    with entered(r.dut), dp.BpfObject.open(obj_path) as obj:
        obj.load()
        foreign = dp.attach_xdp(obj.program("foreign_pass"), r.dut_right.ifindex, mode="native")
    try:
        with ControllerProcess(r.dut.name, hook="xdp"):
            entries = {i["ifname"]: i for i in status(r)["interfaces"]}
            assert entries["to-sink"]["state"] == "error" and entries["to-sink"]["error"]
            assert entries["to-src"]["state"] == "active"
            assert "error" in linuxfp_cli(r.dut.name, "status").stdout
            assert ping(r.src, RouterTopology.SINK_IP, count=2) == 2
    finally:
        with entered(r.dut):
            foreign.detach()


@pytest.mark.parametrize("hook,where,program", [(hook, where, "foreign_drop") for hook in ("xdp", "tc")
                                                for where in ("ingress", "egress")]
                         + [("xdp", "egress", "lfp_impostor")])
def test_tcx_programs_of_another_tool_are_never_bypassed(router_topology, tmp_path, hook, where, program):
    """Another tool attaches a tcx program that drops everything to the
    DUT's ingress (to-src) or egress (to-sink) while the controller runs:
    Linux then forwards nothing. No event announces it; within the poll the
    fast path must stop going around it (an XDP redirect skips tcx egress;
    our XDP, or our tcx program ahead of theirs, skips their tcx ingress
    program), and take over again once it is gone. Named lfp_* as ours
    are, it is still theirs: ours use the namespace's lease map."""
    from linuxfp import datapath as dp
    from linuxfp.lab import Capture, entered, settle

    r = router_topology
    obj_path = str(tmp_path / "foreign_drop.o")
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c",
                    os.path.join(os.path.dirname(__file__), "bpf", "foreign_tc_drop.c"), "-o", obj_path], check=True)
    ifindex = (r.dut_left if where == "ingress" else r.dut_right).ifindex
    with ControllerProcess(r.dut.name, hook=hook):
        with entered(r.dut), dp.BpfObject.open(obj_path) as obj:
            obj.load()
            link = dp.attach_tc(obj.program(program), ifindex, direction=where, method="tcx")
        try:
            # at the ingress the pipeline passes from the first packet on; at
            # the egress the poll (every second) must notice it
            deadline = time.monotonic() + (0 if where == "ingress" else 2.5)
            while True:
                with Capture(r.sink, "to-dut") as sink:
                    udp_burst(r, 20)
                    settle([sink], quiet=0.2)
                    arrived = [f for f in sink.stop() if len(f.data) >= 64]
                if not arrived or time.monotonic() > deadline:
                    break
            assert arrived == [], "a frame went around their program"
        finally:
            with entered(r.dut):
                link.detach()
        deadline = time.monotonic() + 3
        while True:          # the poll sees it gone, and the fast path takes over again
            before = fast_path_count(r)
            udp_burst(r, 20)
            if fast_path_count(r) >= before + 20 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert fast_path_count(r) >= before + 20


def test_cli_usage_errors_and_unprivileged_user():
    cli = [sys.executable, "-m", "controller.cli"]
    bad = subprocess.run(cli + ["run", "--hook", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    assert subprocess.run(cli + ["frobnicate"], capture_output=True, text=True).returncode == 2
    nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cli, "status"],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert nobody.returncode == 1 and "root" in nobody.stderr
    assert nobody.stderr.count("\n") <= 2   # one clear line, no traceback


def test_graph_command(router_topology, tmp_path):
    out = linuxfp_cli(router_topology.dut.name, "-j", "graph")
    graph = json.loads(out.stdout)
    assert {p["ifname"] for p in graph["pipelines"]} == {"to-src", "to-sink"}
    dot = linuxfp_cli(router_topology.dut.name, "graph", "--dot").stdout
    assert dot.startswith("digraph")
    drawn = json.loads(linuxfp_cli(router_topology.dut.name, "-j", "graph", "--png", str(tmp_path / "g.png")).stdout)
    assert Path(drawn["png"]).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_json_logs_say_which_path_each_interface_takes(router_topology):
    """--log-format json: one JSON object per line on stderr; the
    controller says which path each interface takes, and why."""
    r = router_topology
    with ControllerProcess(r.dut.name, hook="auto", extra_args=("--log-format", "json")) as c:
        c.settled()
        r.dut.run(["ip", "link", "add", "lfp-vx0", "type", "vxlan", "external", "dstport", "4789"])
        c.settled()
        stderr = c.stderr()
    records = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    paths = {(e["ifname"], e["path"]): e for e in records if e.get("event") == "interface"}
    assert paths[("to-src", "fast")]["nodes"][-1] == "transmit" and paths[("to-src", "fast")]["hook"] in ("xdp", "tc")
    assert "external" in paths[("lfp-vx0", "kernel")]["reason"], paths
    assert all({"time", "level", "message"} <= set(e) for e in records)


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_offloaded_vlan_tag_is_never_routed_as_untagged(router_topology, ip_forw_datagrams, hook, tmp_path):
    """Frames from src carry VLAN 5 in skb metadata (what tx-vlan offload of a
    VLAN device does; this kernel has no 8021q, so a tc program pushes it).
    The DUT has no VLAN device: Linux drops them, and the fast path must see
    the tag and leave them to the kernel rather than route them untagged."""
    from linuxfp import datapath as dp
    from linuxfp.lab import Capture, entered, settle

    r = router_topology
    obj_path = str(tmp_path / "vlan_push.o")
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c",
                    os.path.join(os.path.dirname(__file__), "bpf", "vlan_push_egress.c"), "-o", obj_path], check=True)
    with ControllerProcess(r.dut.name, hook=hook):
        with entered(r.src), dp.BpfObject.open(obj_path) as obj:
            obj.load()
            link = dp.attach_tc(obj.program("push_vlan5"), r.src_if.ifindex, direction="egress")
        try:
            before = ip_forw_datagrams(r.dut)
            with Capture(r.sink, "to-dut") as sink:
                udp_burst(r, 20)
                settle([sink], quiet=0.2)
                arrived = sink.stop()
            assert [f for f in arrived if len(f.data) >= 64] == []
            assert ip_forw_datagrams(r.dut) == before
        finally:
            with entered(r.src):
                link.detach()
        passed = {i["ifname"]: i for i in stats(r)["interfaces"]}["to-src"]["nodes"]
        assert passed["pipeline"]["passed"].get("vlan_tagged", 0) >= 20
        udp_burst(r, 20)      # untagged again: fast path
        assert fast_path_count(r) >= 20


@pytest.mark.parametrize("command, undo", [
    # rules in the mangle table are beyond the filter node (iptables-nft
    # leaves its empty table behind after the flush: nothing to do then)
    (["iptables", "-t", "mangle", "-A", "FORWARD", "-d", "198.19.3.0/24", "-j", "DROP"],
     ["iptables", "-t", "mangle", "-F", "FORWARD"]),
    # a native nft base chain in iptables' own table: iptables-nft-save
    # leaves it out of its listing, so nothing of that table is trusted
    (["sh", "-c", "nft add table ip filter && nft add chain ip filter lfpfwd "
                  "'{ type filter hook forward priority 0; policy drop; }'"],
     ["nft", "delete", "chain", "ip", "filter", "lfpfwd"]),
    (["ip", "xfrm", "policy", "add", "dir", "fwd", "src", "198.18.1.0/24", "dst", "198.19.3.0/24", "action", "block"],
     ["ip", "xfrm", "policy", "flush"]),
], ids=["mangle", "native-nft-chain", "xfrm"])
def test_rules_the_router_cannot_honour_return_the_namespace_to_linux(router_topology, ip_forw_datagrams,
                                                                       command, undo):
    """A mangle rule, a native nft chain or an IPsec policy makes the
    controller detach: Linux then applies it; removing it brings the fast
    path back."""
    import time

    r = router_topology
    with ControllerProcess(r.dut.name, hook="xdp") as c:
        r.dut.run(command)
        deadline = time.monotonic() + 5        # xfrm and legacy iptables are polled (1 s)
        while status(r)["interfaces"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status(r)["interfaces"] == []
        with Capture(r.sink, "to-dut") as sink:
            udp_burst(r, 20)
            settle([sink], quiet=0.2)
            assert [f for f in sink.stop() if len(f.data) >= 64] == []    # dropped, as Linux does
        if undo is None:
            return
        r.dut.run(undo)
        deadline = time.monotonic() + 5
        while not status(r)["interfaces"] and time.monotonic() < deadline:
            time.sleep(0.1)
        c.settled()
        before = fast_path_count(r)
        udp_burst(r, 20)
        assert fast_path_count(r) >= before + 20


def _shapes_once(router, controller, done, timeout: float = 5.0) -> dict:
    """Each interface's shape, once `done(shapes)` holds (or at `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        controller.settled()
        shapes = {i["ifname"]: i["shape"] for i in status(router)["interfaces"]}
        if done(shapes) or time.monotonic() > deadline:
            return shapes
        time.sleep(0.2)


@pytest.mark.parametrize("save", ["iptables", "iptables-legacy"])
def test_an_iptables_forward_rule_is_applied_in_the_fast_path(router_topology, ip_forw_datagrams, save):
    """A stateless FORWARD rule keeps the namespace accelerated: the filter
    node drops what the rule drops and forwards the rest, Linux untouched;
    `graph` names the filter in the shape; flushing takes it out again."""
    r = router_topology
    with ControllerProcess(r.dut.name, hook="xdp") as c:
        r.dut.run([save, "-A", "FORWARD", "-d", "198.19.3.0/24", "-p", "udp", "-j", "DROP"])
        # legacy tables have no events: the controller reads them on its
        # poll (≤ 1 s; the watch keeps packets on the kernel path meanwhile),
        # which settled() can return before
        shapes = _shapes_once(r, c, lambda shapes: "filter" in shapes["to-src"])
        assert "filter" in shapes["to-src"], shapes
        before = ip_forw_datagrams(r.dut)
        with Capture(r.sink, "to-dut") as sink:
            udp_burst(r, 20)                       # dropped
            udp_burst(r, 20, dst="198.19.4.7")     # forwarded
            settle([sink], quiet=0.2)
            got = [f for f in sink.stop() if len(f.data) >= 64]
        assert len(got) == 20 and ip_forw_datagrams(r.dut) == before
        nodes = {i["ifname"]: i for i in stats(r)["interfaces"]}["to-src"]["nodes"]
        assert nodes["filter"]["drops"]["filter_dropped"] == 20
        r.dut.run([save, "-F", "FORWARD"])
        shapes = _shapes_once(r, c, lambda shapes: "filter" not in shapes["to-src"])
        assert "filter" not in shapes["to-src"], shapes


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_a_shape_change_undone_attaches_the_program_it_replaced(router_topology, ip_forw_datagrams, hook):
    """A change undone (the first FORWARD rule added, then its table
    deleted) puts back the program each interface ran before: loaded once
    (the verifier takes ~0.1 s a load), attached again. And it reads the
    maps as they are now: the rules of today decide, not those it last saw."""
    r = router_topology

    with ControllerProcess(r.dut.name, hook=hook) as c:
        plain = status_programs(r)
        r.dut.run(["iptables", "-A", "FORWARD", "-d", "198.19.3.0/24", "-p", "udp", "-j", "DROP"])
        assert "filter" in _shapes_once(r, c, lambda shapes: "filter" in shapes["to-src"])["to-src"]
        filtering = status_programs(r)
        assert filtering["to-src"] != plain["to-src"]
        r.dut.run(["nft", "delete", "table", "ip", "filter"])
        assert "filter" not in _shapes_once(r, c, lambda shapes: "filter" not in shapes["to-src"])["to-src"]
        assert status_programs(r) == plain
        r.dut.run(["iptables", "-A", "FORWARD", "-d", "198.19.4.0/24", "-p", "udp", "-j", "DROP"])
        assert "filter" in _shapes_once(r, c, lambda shapes: "filter" in shapes["to-src"])["to-src"]
        assert status_programs(r) == filtering
        before = ip_forw_datagrams(r.dut)
        with Capture(r.sink, "to-dut") as sink:
            udp_burst(r, 20)                       # 198.19.3.7: forwarded now
            udp_burst(r, 20, dst="198.19.4.7")     # dropped now
            settle([sink], quiet=0.2)
            got = [f.data for f in sink.stop() if len(f.data) >= 64]
        assert len(got) == 20 and all(d[30:34] == bytes([198, 19, 3, 7]) for d in got)
        assert ip_forw_datagrams(r.dut) == before


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_netfilter_hooks_on_an_ingress_hand_its_packets_to_the_kernel(router_topology, ip_forw_datagrams, hook):
    """A netdev chain bound to the ingress, even one that does nothing (the
    controller keeps such an ingress accelerated), makes the datapath pass
    every packet there: the kernel runs the hooks, and no change of names
    can go around them meanwhile. Gone, the fast path is back."""
    r = router_topology
    with ControllerProcess(r.dut.name, hook=hook) as c:
        c.settled()
        r.dut.run(["nft", "-f", "-"], input='table netdev lfpe {\n chain lfpin { type filter hook ingress '
                                            'device "to-src" priority 0; }\n}\n')
        c.settled()
        assert "to-src" in {i["ifname"] for i in status(r)["interfaces"]}
        before, fast = ip_forw_datagrams(r.dut), fast_path_count(r)
        udp_burst(r, 20)
        assert ip_forw_datagrams(r.dut) - before >= 20 and fast_path_count(r) == fast
        assert pipeline_passes(r, "nf_ingress") >= 20
        r.dut.run(["nft", "delete", "table", "netdev", "lfpe"])
        c.settled()
        before = ip_forw_datagrams(r.dut)
        udp_burst(r, 20)
        assert ip_forw_datagrams(r.dut) == before and fast_path_count(r) >= fast + 20


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_a_namespace_back_from_the_kernel_path_attaches_the_programs_it_ran(router_topology, ip_forw_datagrams,
                                                                           hook):
    """A rule no node reproduces (in a native nft postrouting chain) takes
    every interface off the fast path; flushing it brings them back with the
    programs they ran, kept loaded meanwhile (no verifier run), reading the
    maps as they are now — and their counters carry on."""
    r = router_topology

    r.dut.run(["nft", "-f", "-"], input="table inet lfpt {\n chain lfpfwd { type filter hook postrouting priority 0; }\n}\n")
    with ControllerProcess(r.dut.name, hook=hook) as c:
        c.settled()
        plain = status_programs(r)
        assert set(plain) == {"to-src", "to-sink"}          # the empty chain does nothing
        udp_burst(r, 20)
        counted = fast_path_count(r)
        assert counted >= 20
        r.dut.run(["nft", "add", "rule", "inet", "lfpt", "lfpfwd", "ip", "daddr", "198.19.4.0/24", "drop"])
        deadline = time.monotonic() + 5
        while status(r)["interfaces"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status(r)["interfaces"] == []
        with Capture(r.sink, "to-dut") as sink:         # meanwhile Linux drops what the rule drops
            udp_burst(r, 10, dst="198.19.4.7")
            settle([sink], quiet=0.2)
            assert [f for f in sink.stop() if len(f.data) >= 64] == []
        r.dut.run(["nft", "flush", "chain", "inet", "lfpt", "lfpfwd"])
        deadline = time.monotonic() + 5
        while status_programs(r) != plain and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status_programs(r) == plain
        c.settled()
        before = ip_forw_datagrams(r.dut)
        udp_burst(r, 20)
        assert ip_forw_datagrams(r.dut) == before           # forwarded by the fast path again
        assert fast_path_count(r) >= counted + 20           # on top of what it counted before
    r.dut.run(["nft", "delete", "table", "inet", "lfpt"])


def test_a_program_the_verifier_rejects_leaves_the_kernel_path_working(router_topology, tmp_path):
    """A router module with an unchecked packet access: the verifier refuses
    it, status shows the verifier's words and the source line, and traffic
    keeps flowing through Linux."""
    import shutil

    from linuxfp.resources import modules_dir

    broken = tmp_path / "modules"
    shutil.copytree(modules_dir(), broken)
    router_h = broken / "router.h"
    text = router_h.read_text()
    marker = "	refusal = lfp_l3_ingress_refusal(pkt, eth, &in);"
    assert marker in text
    router_h.write_text(text.replace(marker, marker + "\n\tif (((__u8 *)pkt->data)[200] == 7)   /* no bounds check */\n"
                                             "\t\treturn LFP_DROP;", 1))
    r = router_topology
    env = {"LINUXFP_MODULES_DIR": str(broken), "LINUXFP_CACHE_DIR": str(tmp_path / "cache")}
    with ControllerProcess(r.dut.name, hook="tc", env=env):
        entries = {i["ifname"]: i for i in status(r)["interfaces"]}
        error = entries["to-src"]["error"]
        assert entries["to-src"]["state"] == "error"
        assert "invalid access to packet" in error
        assert "router.h" in error and "[200] == 7" in error    # the C source line it stopped at
        assert ping(r.src, RouterTopology.SINK_IP, count=2) == 2


def test_tc_interfaces_of_one_shape_share_one_program(router_topology):
    """At TC one loaded program serves every interface of its shape (a new
    one costs an attach, not a load) and still counts per interface; XDP
    programs are device-bound, one per interface."""
    r = router_topology
    with ControllerProcess(r.dut.name, hook="xdp"):
        xdp = {i["ifname"]: i for i in status(r)["interfaces"]}
        assert xdp["to-src"]["prog_id"] != xdp["to-sink"]["prog_id"], xdp
    with ControllerProcess(r.dut.name, hook="tc") as c:
        tc = {i["ifname"]: i for i in status(r)["interfaces"]}
        assert tc["to-src"]["shape"] == tc["to-sink"]["shape"], tc
        assert tc["to-src"]["prog_id"] == tc["to-sink"]["prog_id"], tc
        r.dut.run(["ip", "link", "add", "sh0", "type", "veth", "peer", "name", "sh0p"])
        r.dut.run(["ip", "link", "set", "sh0", "up"])
        r.dut.run(["ip", "link", "set", "sh0p", "up"])
        c.settled()
        added = {i["ifname"]: i for i in status(r)["interfaces"]}
        assert added["sh0"]["state"] == "active" and added["sh0"]["shape"] == tc["to-src"]["shape"], added
        assert added["sh0"]["prog_id"] == tc["to-src"]["prog_id"], added      # attached, not loaded
        before = {i["ifname"]: i["fast_path"] for i in stats(r)["interfaces"]}
        udp_burst(r, 100)
        after = {i["ifname"]: i["fast_path"] for i in stats(r)["interfaces"]}
        assert after["to-src"] - before["to-src"] >= 100, (before, after)
        assert after["sh0"] == before["sh0"] == 0 and after["to-sink"] == before["to-sink"], (before, after)
        gone = added["sh0"]["ifindex"]
        r.dut.run(["ip", "link", "del", "sh0"])
        c.settled()
        udp_burst(r, 30)     # the shared program serves on
        assert fast_path_count(r) >= after["to-src"] + 30
        # counter arrays: one per interface served, a few ready for the next, none for sh0
        layout = layout_of(r.dut.name)
        pinned = [n for n in os.listdir(layout.maps_dir) if n.startswith("if") and n.endswith("_counters")]
        assert f"if{gone}_counters" not in pinned, pinned
        assert len(pinned) <= len(status(r)["interfaces"]) + SPARE_COUNTERS, pinned


@pytest.mark.serial    # killed without --keep, its namespace is stale until the next start: another run's reclaim
def test_counters_carry_on_after_a_crash(router_topology):
    """A controller killed without --keep takes its programs with it; the
    next one attaches again and the interfaces' counters carry on."""
    r = router_topology
    c = ControllerProcess(r.dut.name, hook="tc")
    c.start()
    udp_burst(r, 50)
    counted = fast_path_count(r)
    assert counted >= 50
    c.stop(signal.SIGKILL)
    with ControllerProcess(r.dut.name, hook="tc"):
        assert fast_path_count(r) >= counted


@pytest.mark.parametrize("hook", ["xdp", "tc"])
def test_an_ifindex_beyond_the_facts_array_grows_it(router_topology, hook):
    """Interface facts live in an array indexed by ifindex; a new interface
    past its end moves every pipeline to a larger array, atomically."""
    r = router_topology
    with ControllerProcess(r.dut.name, hook=hook) as c:
        before = {i["ifname"]: i["prog_id"] for i in status(r)["interfaces"]}
        r.dut.run(["ip", "link", "add", "big0", "index", "700", "type", "veth", "peer", "name", "big0p"])
        r.dut.run(["ip", "link", "set", "big0", "up"])
        c.settled()
        after = {i["ifname"]: i for i in status(r)["interfaces"]}
        assert after["big0"]["state"] == "active"
        assert after["to-src"]["prog_id"] != before["to-src"]      # reloaded against the new array
        assert "too small" in c.stderr()
        fast = fast_path_count(r)
        udp_burst(r, 30)
        assert fast_path_count(r) >= fast + 30


def test_a_shared_map_found_unpinned_is_not_looked_for_again_until_pinned(monkeypatch):
    """SharedMaps.get stats the bpffs for a name once: a table no program
    has pinned (a bridge's at XDP) stays unpinned until this object pins it
    (the namespace's lock: nothing else does), so each plan does not look
    again; once pinned it is found, and after close() looked for anew."""
    from controller import shared_maps
    from controller.namespace import NamespaceLayout
    from linuxfp import datapath as dp
    from linuxfp.datapath.maps import BPF_MAP_TYPE_HASH

    layout = NamespaceLayout(bpffs=dp.bpffs_root(), cookie=-os.getpid())    # (no namespace's cookie)
    looked = []
    real_exists = os.path.exists

    def exists(path):       # (os.path.exists of the whole process: only the maps directory counts)
        if path.startswith(layout.maps_dir):
            looked.append(path)
        return real_exists(path)
    monkeypatch.setattr(shared_maps.os.path, "exists", exists)
    maps = shared_maps.SharedMaps(layout)
    try:
        assert maps.get("lfp_t_unpinned") is None and maps.get("lfp_t_unpinned") is None
        assert looked == [layout.shared_map_pin("lfp_t_unpinned")]

        class Obj:          # as a loaded object hands its fresh maps to pin_fresh
            made = dp.Map.create(BPF_MAP_TYPE_HASH, 4, 4, 8, name="lfp_t_unpinned")

            def map(self, _name):
                return self.made
        with Obj.made:
            maps.pin_fresh(Obj(), ["lfp_t_unpinned"])
        found = maps.get("lfp_t_unpinned")
        assert found is not None and found.max_entries == 8
        maps.close()
        dp.unpin(layout.shared_map_pin("lfp_t_unpinned"))
        assert maps.get("lfp_t_unpinned") is None and len(looked) == 3
        maps.close()        # (found unpinned again: close() forgets that too)
        assert maps.get("lfp_t_unpinned") is None and len(looked) == 4
    finally:
        maps.close()
        dp.remove_tree(layout.pin_dir)


def test_iface_slots():
    from controller.shared_maps import iface_slots
    assert iface_slots([]) == 256
    assert iface_slots([255]) == 256
    assert iface_slots([256]) == 512
    assert iface_slots([700]) == 1024


def tcp_bulk_transfer(r, address: str, size: int = 4 << 20) -> None:
    """`size` bytes over one TCP connection from src to a server in sink at
    `address` (IPv4 or IPv6), all of which must arrive. The veths' TSO hands
    the DUT GSO super-packets."""
    import socket as pysocket
    import threading

    from linuxfp.lab import entered

    family = pysocket.AF_INET6 if ":" in address else pysocket.AF_INET
    with entered(r.sink):
        server = pysocket.create_server((address, 5001), family=family)
    received = []

    def serve():
        conn, _ = server.accept()
        with conn:
            total = 0
            while chunk := conn.recv(1 << 16):
                total += len(chunk)
            received.append(total)

    with server:
        thread = threading.Thread(target=serve)
        thread.start()
        with entered(r.src):
            client = pysocket.create_connection((address, 5001))
        with client:
            client.sendall(b"x" * size)
        thread.join(30)
    assert received == [size]


@pytest.mark.parametrize("egress_mtu", [1500, 1280])
def test_tcp_bulk_transfer_through_tc_takes_the_fast_path(router_topology, ip_forw_datagrams, egress_mtu):
    """A veth peer with TSO hands the DUT 64 KB GSO super-packets; Linux
    forwards them when every segment fits the egress MTU, and so must TC.
    With a smaller egress MTU the first segments are too big: the kernel
    answers with "fragmentation needed", the sender lowers its MSS, and the
    rest is fast-pathed."""
    r = router_topology
    r.dut.run(["ip", "link", "set", "to-sink", "mtu", str(egress_mtu)])
    with ControllerProcess(r.dut.name, hook="tc"):
        before = ip_forw_datagrams(r.dut)
        tcp_bulk_transfer(r, RouterTopology.SINK_IP)
        fast = fast_path_count(r)
        kernel = ip_forw_datagrams(r.dut) - before
        assert fast > 0 and fast > kernel, (fast, kernel)
        passed = {i["ifname"]: i for i in stats(r)["interfaces"]}["to-src"]["nodes"]["router"]["passed"]
        assert (passed.get("fib_frag_needed", 0) > 0) == (egress_mtu < 1500)


@pytest.mark.parametrize("smaller", [None, "link", "mtu6"])
def test_ipv6_tcp_bulk_transfer_through_tc_takes_the_fast_path(lab, smaller):
    """IPv6 over TC: the sender's GSO super-packets are forwarded when every
    segment fits what ip6_forward() checks — the egress's IPv6 MTU, which
    `net.ipv6.conf.DEV.mtu` may set below the link's — and otherwise left to
    the kernel, which answers "packet too big"; the sender lowers its MSS and
    the rest is fast-pathed."""
    from linuxfp.lab.counters import ip6_forw_datagrams

    r = RouterTopology(prefixes=8, ipv6=True)(lab)
    if smaller == "link":
        r.dut.run(["ip", "link", "set", "to-sink", "mtu", "1280"])
    elif smaller == "mtu6":
        r.dut.sysctl("net/ipv6/conf/to-sink/mtu", 1280)
    with ControllerProcess(r.dut.name, hook="tc"):
        before = ip6_forw_datagrams(r.dut)
        tcp_bulk_transfer(r, RouterTopology.SINK_IP6)
        fast = fast_path_count(r)
        kernel = ip6_forw_datagrams(r.dut) - before
        assert fast > 0 and fast > kernel, (fast, kernel)
        passed = {i["ifname"]: i for i in stats(r)["interfaces"]}["to-src"]["nodes"]["router"]["passed"]
        assert (passed.get("fib_frag_needed", 0) > 0) == (smaller is not None), passed


def test_one_controller_per_namespace(router_topology):
    r = router_topology
    with ControllerProcess(r.dut.name, hook="xdp") as first:
        second = subprocess.run(["ip", "netns", "exec", r.dut.name, sys.executable, "-m", "controller.cli", "run"],
                                capture_output=True, text=True, timeout=30, env=_env())
        assert second.returncode == 1 and "already accelerates" in second.stderr
        assert f"pid {first.proc.pid}" in second.stderr
        assert len(status(r)["interfaces"]) == 2 and status(r)["controller_pid"] == first.proc.pid


def test_detach_never_signals_a_stranger(router_topology):
    """A pid file left by a crashed controller may name a reused pid: only the
    lock a live controller holds counts."""
    r = router_topology
    with ControllerProcess(r.dut.name, hook="tc", keep=True):
        pass
    pid_file = json.loads(linuxfp_cli(r.dut.name, "-j", "status").stdout)["namespace"]
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        run_dir = os.path.join("/run/linuxfp", pid_file)
        with open(os.path.join(run_dir, "controller.pid"), "w") as f:
            f.write(f"{stranger.pid}\n")
        out = linuxfp_cli(r.dut.name, "detach")
        assert out.returncode == 0 and "detached" in out.stdout
        assert stranger.poll() is None, "detach signalled a process that is not a controller"
        assert attached_programs(r) == {}
    finally:
        stranger.kill()
        stranger.wait()


def test_a_shape_that_does_not_compile_is_shown_and_not_retried(router_topology, tmp_path):
    import shutil

    from linuxfp.resources import modules_dir

    broken = tmp_path / "modules"
    shutil.copytree(modules_dir(), broken)
    (broken / "router.h").write_text((broken / "router.h").read_text() + "\nthis is not C;\n")
    r = router_topology
    env = {"LINUXFP_MODULES_DIR": str(broken), "LINUXFP_CACHE_DIR": str(tmp_path / "cache")}
    with ControllerProcess(r.dut.name, hook="tc", env=env) as c:
        entries = {i["ifname"]: i for i in status(r)["interfaces"]}
        assert entries["to-src"]["state"] == "error" and "compile" in entries["to-src"]["error"]
        for i in range(3):
            r.dut.run(["ip", "route", "add", f"198.19.{200 + i}.0/24", "via", RouterTopology.SINK_IP])
        c.settled()
        assert c.stderr().count("cannot compile") == 1
        assert [line for line in c.lines if line.startswith("applied")][-1].endswith("datapath unchanged")
        assert ping(r.src, RouterTopology.SINK_IP, count=2) == 2


def test_an_interface_recreated_with_the_same_ifindex_is_attached_again(router_topology):
    """Deleted and re-created within one batch (the controller paused): the
    kernel detached our program with the old device; it must come back."""
    import signal as sig

    r = router_topology
    r.dut.run(["ip", "link", "add", "x0", "index", "300", "type", "veth", "peer", "name", "x0p"])
    r.dut.run(["ip", "link", "set", "x0", "up"])
    with ControllerProcess(r.dut.name, hook="tc") as c:
        first = {i["ifname"]: i for i in status(r)["interfaces"]}["x0"]
        c.proc.send_signal(sig.SIGSTOP)
        try:
            r.dut.run(["ip", "link", "del", "x0"])
            r.dut.run(["ip", "link", "add", "x0", "index", "300", "type", "veth", "peer", "name", "x0p"])
            r.dut.run(["ip", "link", "set", "x0", "up"])
        finally:
            c.proc.send_signal(sig.SIGCONT)
        c.settled()
        again = {i["ifname"]: i for i in status(r)["interfaces"]}["x0"]
        assert again["state"] == "active" and again["link_id"] != first["link_id"]
        assert attached_programs(r).get("x0") == [again["prog_id"]], "x0 must have our program again"
