"""`linuxfp demo router|gateway|bridge --quick` end to end: it measures both systems, shows
LinuxFP at work and leaves nothing behind."""
import json
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
