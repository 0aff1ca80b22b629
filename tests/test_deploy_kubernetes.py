"""Kubernetes deployment (issue 12): the DaemonSet manifest validates
offline against the Kubernetes schemas, and the image built from Debian
packages and the wheel (deploy/image/build-image) runs the controller with
exactly the privileges the manifest grants — not privileged — against a lab
namespace, from its precompiled pipelines."""
from __future__ import annotations

import json
import selectors
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from linuxfp.datapath.cgroups import mounted_cgroup2
from linuxfp.lab import Lab, RouterTopology

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "deploy" / "kubernetes" / "linuxfp.yaml"
TAG = "localhost/linuxfp:ci"


def _container(manifest: dict) -> dict:
    return manifest["spec"]["template"]["spec"]["containers"][0]


def test_the_daemonset_manifest_validates_offline():
    import kubernetes_validate

    documents = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    for document in documents:
        kubernetes_validate.validate(document, "1.30", strict=True)
    daemonset = next(d for d in documents if d["kind"] == "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    container = _container(daemonset)
    assert pod["hostNetwork"] is True
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "--keep" in container["args"]
    assert container["readinessProbe"]["exec"]["command"] == ["linuxfp", "status", "--check"]
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/sys/fs/bpf", "/run/linuxfp"}


@pytest.mark.netns
def test_the_image_runs_the_controller_with_the_manifests_privileges(require_root):
    built = subprocess.run([str(REPO / "deploy" / "image" / "build-image"), TAG], capture_output=True, text=True,
                           timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    try:
        _run_image_in_a_lab()
    finally:
        # each build is a new 210 MB layer: leave none behind
        subprocess.run(["podman", "rmi", "-f", TAG], capture_output=True, timeout=120)


def _run_image_in_a_lab() -> None:
    container = _container(yaml.safe_load(MANIFEST.read_text()))
    security = container["securityContext"]
    privileges = ["--cap-drop=all"] + [f"--cap-add={cap}" for cap in security["capabilities"]["add"]]
    if security["seccompProfile"]["type"] == "Unconfined":
        privileges += ["--security-opt", "seccomp=unconfined"]
    if not security["allowPrivilegeEscalation"]:
        privileges += ["--security-opt", "no-new-privileges"]
    if security["readOnlyRootFilesystem"]:
        privileges += ["--read-only", "--tmpfs", "/tmp"]
    cgroup2 = mounted_cgroup2()
    assert cgroup2 is not None
    probe = container["readinessProbe"]["exec"]["command"]
    with Lab("lfp-img") as lab, tempfile.TemporaryFile("w+") as log:
        router = RouterTopology(prefixes=2)(lab)
        name = f"lfp-img-{router.dut.name}"
        # runc and cgroupfs: this machine's cgroups are hybrid (crun refuses
        # them), and its hard limits lie below podman's default ulimits. A
        # cgroup namespace of its own, as Kubernetes gives on cgroup v2: the
        # watches reach the hierarchy's root through the host's mount.
        command = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "run", "--rm", "--name", name,
                   "--network", f"ns:/run/netns/{router.dut.name}", "--cgroupns=private",
                   "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000",
                   "-v", "/sys/fs/bpf:/sys/fs/bpf", "-v", "/run/linuxfp:/run/linuxfp", "-v", f"{cgroup2}:{cgroup2}",
                   *privileges, TAG, "run", "--hook", "xdp"]
        Path("/run/linuxfp").mkdir(exist_ok=True)
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            waiting = selectors.DefaultSelector()
            waiting.register(run.stdout, selectors.EVENT_READ)
            deadline, line = time.monotonic() + 90, ""
            while line != "ready" and run.poll() is None and time.monotonic() < deadline:
                if waiting.select(timeout=1):
                    line = run.stdout.readline().strip()
            assert line == "ready", _text(log)
            # the manifest's probe, run inside the container as the kubelet would
            deadline = time.monotonic() + 10
            check = subprocess.run(["podman", "exec", name, *probe], capture_output=True, text=True, timeout=30)
            while check.returncode != 0 and time.monotonic() < deadline:
                time.sleep(0.2)
                check = subprocess.run(["podman", "exec", name, *probe], capture_output=True, text=True, timeout=30)
            assert check.returncode == 0, check.stdout + check.stderr
            status = json.loads(subprocess.run(["podman", "exec", name, "linuxfp", "-j", "status"],
                                               capture_output=True, text=True, check=True, timeout=30).stdout)
            by_name = {i["ifname"]: i for i in status["interfaces"]}
            assert by_name["to-src"]["hook"] == "xdp" and by_name["to-src"]["origin"] == "precompiled", by_name
            # its watches see the host's processes: no poll's window
            assert status["windows"]["legacy iptables, ip6tables, arptables"].startswith("none"), status["windows"]
        finally:
            subprocess.run(["podman", "stop", "-t", "10", name], capture_output=True, timeout=60)
            try:
                run.wait(timeout=60)
            finally:
                subprocess.run(["podman", "rm", "-f", name], capture_output=True, timeout=60)
                if run.poll() is None:
                    run.kill()
        stderr = _text(log)
        assert "datapath removed" in stderr, stderr[-2000:]
        assert "watch unavailable" not in stderr and "not attached" not in stderr, stderr[-2000:]


def _text(log) -> str:
    log.seek(0)
    return log.read()[-4000:]
