"""`linuxfp demo router|gateway|bridge|flannel --quick` end to end: it measures both systems, shows
LinuxFP at work and leaves nothing behind."""
import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.netns


@pytest.mark.parametrize("scenario", ["router", "gateway", "bridge"])
def test_demo_quick(require_root, scenario):
    before = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    out = subprocess.run([sys.executable, "-m", "controller.cli", "-j", "demo", scenario, "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result["summary"]["systems"]) == {"linux", "linuxfp"}
    assert result["summary"]["systems"]["linuxfp"]["pps_median"] > 0
    fast = sum(i["fast_path"] for i in result["stats"]["interfaces"])
    assert fast > 0, "the demo's traffic must have gone through the fast path"
    if scenario == "gateway":
        assert "-> filter ->" in result["graph"] and "100 rules reached from FORWARD" in result["graph"]
    if scenario == "bridge":
        assert "parse -> bridge -> " in result["graph"] and "FDB entries mirrored" in result["graph"]
    after = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    assert after <= before, f"namespaces left behind: {after - before}"


def test_flannel_demo_quick(require_root):
    """Two real Flannel nodes: round trips and TCP bulk for both systems,
    node 1's graph with its pods' veths and flannel.1 on the fast path."""
    before = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    out = subprocess.run([sys.executable, "-m", "controller.cli", "-j", "demo", "flannel", "--quick"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["errors"] == {}
    for placement in ("intra-node", "inter-node"):
        assert set(result["latency"][placement]["1"]) == {"linux", "linuxfp"}
        assert all(e["gbit_s"] > 0 for e in result["tcp_bulk"][placement]["1"].values())
    graph = result["graph"]
    # (kube-proxy's rules track connections: TCP goes to the kernel before routing)
    assert re.search(r"flannel\.1 \(ifindex \d+\) \[tc\]: parse -> conntrack_tcp -> router -> ", graph), graph
    assert re.search(r"veth\w+ \(ifindex \d+\) \[tc\]: parse -> bridge -> bridge_filter -> ", graph), graph
    assert sum(i["fast_path"] for i in result["stats"]["interfaces"]) > 0, result["stats"]
    after = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    assert after <= before, f"namespaces left behind: {after - before}"
