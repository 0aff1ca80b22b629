"""`linuxfp demo router|gateway|bridge|flannel --quick` end to end: it measures both systems, shows
LinuxFP at work and leaves nothing behind."""
import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.netns


def _demo(scenario: str, timeout: int) -> tuple[subprocess.CompletedProcess, set[str]]:
    """`linuxfp -j demo SCENARIO --quick` and the namespaces it left. Other
    tests' namespaces come and go meanwhile (the suite runs two at a time):
    the demo's are named after its process (lab prefix-role-pid-…) or, for
    Flannel, after the demo's lab prefix."""
    before = _namespaces()
    argv = [sys.executable, "-m", "controller.cli", "-j", "demo", scenario, "--quick"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()      # the demo's own guard removes its lab
            proc.communicate(timeout=60)
            raise
    left = {n for n in _namespaces() - before if f"-{proc.pid}-" in n or n.startswith("lfpfl-lfpdemo")}
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr), left


def _namespaces() -> set[str]:
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())


@pytest.mark.parametrize("scenario", ["router", "gateway", "bridge"])
def test_demo_quick(require_root, scenario):
    out, left_behind = _demo(scenario, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result["summary"]["systems"]) == {"linux", "linuxfp"}
    assert result["summary"]["systems"]["linuxfp"]["pps_median"] > 0
    fast = sum(i["fast_path"] for i in result["stats"]["interfaces"])
    assert fast > 0, "the demo's traffic must have gone through the fast path"
    if scenario == "gateway":
        assert "-> filter ->" in result["graph"] and "100 rules reached from the forward hooks" in result["graph"]
    if scenario == "bridge":
        assert "parse -> bridge -> " in result["graph"] and "FDB entries mirrored" in result["graph"]
    assert not left_behind, f"namespaces left behind: {left_behind}"


def test_flannel_demo_quick(require_root):
    """Two real Flannel nodes: round trips and TCP bulk for both systems,
    node 1's graph with its pods' veths and flannel.1 on the fast path."""
    out, left_behind = _demo("flannel", timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["errors"] == {}
    for placement in ("intra-node", "inter-node"):
        assert set(result["latency"][placement]["1"]) == {"linux", "linuxfp"}
        assert all(e["gbit_s"] > 0 for e in result["tcp_bulk"][placement]["1"].values())
    graph = result["graph"]
    # (kube-proxy's rules track connections: TCP goes to the kernel before routing)
    assert re.search(r"flannel\.1 \(ifindex \d+\) \[tc\]: parse -> conntrack -> router -> ", graph), graph
    assert re.search(r"veth\w+ \(ifindex \d+\) \[tc\]: parse -> bridge -> bridge_filter -> ", graph), graph
    assert sum(i["fast_path"] for i in result["stats"]["interfaces"]) > 0, result["stats"]
    assert not left_behind, f"namespaces left behind: {left_behind}"
