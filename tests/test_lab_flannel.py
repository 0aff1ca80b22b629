"""The Flannel lab: real etcd, flanneld and CNI plugins in namespaces.

One lab (two nodes, two pods each) serves the whole module.  The first run
on a fresh machine builds flanneld and the flannel CNI plugin (a few
minutes, progress on the terminal); later runs reuse the cached binaries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from linuxfp.lab.flannel import SERVICE_IP, VXLAN_DEVICE, FlannelLab, FlannelLabSpec
from linuxfp.lab.flannel_state import run_file
from linuxfp.lab.counters import tx_packets
from linuxfp.lab.netns import Namespace

pytestmark = pytest.mark.netns

REPO = Path(__file__).resolve().parents[1]

# A TCP and UDP echo server that answers with the peer address it saw, so
# the client can tell whether its source address was kept (no masquerade).
ECHO_SERVER = """
import socket, threading
def tcp():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 8080)); s.listen()
    while True:
        c, a = s.accept(); c.sendall(c.recv(100) + b" " + a[0].encode()); c.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 8080))
    while True:
        d, a = s.recvfrom(100); s.sendto(d + b" " + a[0].encode(), a)
threading.Thread(target=udp, daemon=True).start()
tcp()
"""

ECHO_CLIENT = """
import socket, sys, time
proto, ip = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 10
while True:
    try:
        if proto == "tcp":
            c = socket.create_connection((ip, 80), timeout=2); c.sendall(b"hello"); print(c.recv(100).decode())
        else:
            c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.settimeout(1)
            c.sendto(b"hello", (ip, 80)); print(c.recv(100).decode())
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
"""


def _progress(message: str) -> None:
    # Straight to the terminal: the cold build takes minutes and CI should show why.
    print(f"flannel lab: {message}", file=sys.__stderr__, flush=True)


@pytest.fixture(scope="module")
def flannel(require_root: None) -> Iterator[FlannelLab]:
    with FlannelLab.up(FlannelLabSpec(nodes=2, pods_per_node=2), progress=_progress) as lab:
        yield lab


def _ping(lab: FlannelLab, source: str, destination_ip: str, count: int = 1) -> None:
    done = lab.namespace(source).run(["ping", "-c", str(count), "-i", "0.2", "-W", "2", destination_ip],
                                     check=False)
    assert done.returncode == 0, f"{source} -> {destination_ip}:\n{done.stdout}{done.stderr}"


def _link_stats(namespace: Namespace, device: str) -> dict[str, int]:
    stats = Path("/sys/class/net", device, "statistics")
    done = namespace.run(["sh", "-c", f"cd {stats} && grep . tx_packets rx_packets"])
    return {line.split(":")[0]: int(line.split(":")[1]) for line in done.stdout.split()}


def test_flanneld_programmed_vxlan_as_on_a_real_node(flannel: FlannelLab) -> None:
    node1, node2 = flannel.state.nodes
    ns = flannel.namespace("node1")
    details = ns.run(["ip", "-d", "link", "show", VXLAN_DEVICE]).stdout
    assert "vxlan id 1 " in details and "dstport 8472" in details and "nolearning" in details
    assert f"local {node1.underlay_ip} dev eth0" in details
    assert f"dst {node2.underlay_ip}" in ns.run(["bridge", "fdb", "show", "dev", VXLAN_DEVICE]).stdout
    remote = node2.subnet.rsplit(".", 1)[0] + ".0"
    assert f"{remote}/24 via {remote} dev {VXLAN_DEVICE} onlink" in ns.run(["ip", "route"]).stdout
    rules = ns.run(["iptables-save"]).stdout
    for chain in ("FLANNEL-FWD", "FLANNEL-POSTRTG", "KUBE-SERVICES", "KUBE-FORWARD", "KUBE-MARK-MASQ",
                  "KUBE-POSTROUTING", "KUBE-IPTABLES-HINT"):
        assert f":{chain} " in rules, chain
    assert ns.read_sysctl("net.bridge.bridge-nf-call-iptables") == "1"
    for pod in flannel.state.pods:
        assert pod.ip and pod.host_veth, pod


def test_intra_node_pod_to_pod(flannel: FlannelLab) -> None:
    first, second = flannel.pods_on("node1")
    _ping(flannel, first.name, second.ip)


def test_inter_node_pod_to_pod_through_vxlan(flannel: FlannelLab) -> None:
    source, destination = flannel.pods_on("node1")[0], flannel.pods_on("node2")[1]
    sent_before = _link_stats(flannel.namespace("node1"), VXLAN_DEVICE)["tx_packets"]
    received_before = _link_stats(flannel.namespace("node2"), VXLAN_DEVICE)["rx_packets"]
    _ping(flannel, source.name, destination.ip, count=3)
    assert _link_stats(flannel.namespace("node1"), VXLAN_DEVICE)["tx_packets"] >= sent_before + 3
    assert _link_stats(flannel.namespace("node2"), VXLAN_DEVICE)["rx_packets"] >= received_before + 3


def test_pod_reaches_the_cluster_ip_service(flannel: FlannelLab) -> None:
    service = flannel.state.service
    assert service is not None and service.cluster_ip == SERVICE_IP
    client = flannel.pods_on("node1")[0]
    server = flannel.namespace(service.endpoint_pod).popen(["python3", "-c", ECHO_SERVER],
                                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for protocol in ("tcp", "udp"):
            done = flannel.namespace(client.name).run(["python3", "-c", ECHO_CLIENT, protocol, SERVICE_IP],
                                                      check=False)
            assert done.returncode == 0, done.stderr
            # DNAT'd to the endpoint on the other node, the pod's own address kept.
            assert done.stdout.strip() == f"hello {client.ip}", (protocol, done.stdout)
    finally:
        os.killpg(server.pid, 15)
        server.wait()


# A UDP request/response pair: the client opens the connection, waits for
# conntrack's stream mark (2 s: the entry becomes ASSURED), then sends
# `count` requests, each answered, and prints how many answers came back.
# Paced (1 ms apart): the bridge node hands a flow's frames to the kernel
# for 8 ms after each refresh of an FDB entry (once a second), which an
# unpaced burst of a few ms could fall into whole.
UDP_ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 8081))
while True:
    d, a = s.recvfrom(2000); s.sendto(d, a)
"""
UDP_PINGER = """
import socket, sys, time
ip, count = sys.argv[1], int(sys.argv[2])
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.settimeout(1)
def ask(n):
    for _ in range(5):
        try:
            c.sendto(n.to_bytes(4, "big") * 16, (ip, 8081))
            while c.recv(2000)[:4] != n.to_bytes(4, "big"):
                pass
            return 1
        except socket.timeout:
            continue
    return 0
def paced(n):
    time.sleep(0.001)
    return ask(n)
ask(0); time.sleep(2.2); ask(1)
print(sum(paced(n) for n in range(2, count + 2)))
"""


def test_intra_node_udp_is_bridged_in_the_fast_path(flannel: FlannelLab) -> None:
    """With a controller in the node (TC, as for container veths), an
    established UDP exchange between two pods on cni0 — br_netfilter on,
    flanneld's and kube-proxy's rules, connection tracking — is bridged by
    the fast path after iptables' verdict and delivered straight into the
    pods: the kernel's transmit counters of their host-side veths, which
    every frame Linux bridges to them passes, stay (almost) still."""
    from controller.launcher import ControllerProcess, linuxfp_cli
    from controller_counting import reasons

    client, server = flannel.pods_on("node1")
    node = flannel.namespace("node1")
    count = 400
    echo = flannel.namespace(server.name).popen(["python3", "-c", UDP_ECHO],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with ControllerProcess(node.name, hook="tc") as controller:
            controller.settled()
            status = json.loads(linuxfp_cli(node.name, "-j", "status").stdout)
            shapes = {entry["ifname"]: entry["shape"] for entry in status["interfaces"]}
            assert "bridge_filter" in shapes.get(server.host_veth, ""), status
            sent_before = {pod.name: tx_packets(node, pod.host_veth) for pod in (client, server)}
            done = flannel.namespace(client.name).run(["python3", "-c", UDP_PINGER, server.ip, str(count)])
            sent = {pod.name: tx_packets(node, pod.host_veth) - sent_before[pod.name] for pod in (client, server)}
            stats = json.loads(linuxfp_cli(node.name, "-j", "stats").stdout)
    finally:
        os.killpg(echo.pid, 15)
        echo.wait()
    assert int(done.stdout) == count, done.stdout
    fast = sum(entry["nodes"].get("transmit", {}).get("fast", {}).get("into_peer", 0) for entry in stats["interfaces"])
    # both directions of the exchange, less the frames of the connection's
    # first 2 s and those the FDB's refreshes hand to the kernel
    assert fast >= 2 * count * 0.9, (fast, reasons(stats), sent)
    assert all(n <= 0.1 * count for n in sent.values()), (sent, stats)


def test_pod_churn_leaves_nothing_and_add_works_again(flannel: FlannelLab) -> None:
    pod = flannel.pods_on("node1")[1]
    node = flannel.namespace("node1")
    ipam_leases = Path(flannel.state.node("node1").ipam_data_dir)
    flannel.delete_pod(pod.name)
    assert not Namespace(pod.namespace).exists()
    assert node.run(["ip", "link", "show", "dev", pod.host_veth], check=False).returncode != 0
    assert pod.ip not in [p.name for p in ipam_leases.rglob("*")]
    assert pod.name not in [p.name for p in flannel.state.pods]
    again = flannel.add_pod("node1", pod.name)
    assert again.host_veth and node.run(["ip", "link", "show", "dev", again.host_veth]).returncode == 0
    _ping(flannel, flannel.pods_on("node2")[0].name, again.ip)


def test_cli_up_then_down_from_another_process_leaves_nothing(require_root: None) -> None:
    name = f"t{os.getpid() % 100000}"
    cli = [sys.executable, "-m", "controller.cli"]
    up = subprocess.run([*cli, "-j", "lab", "flannel", "up", "--name", name, "--pods-per-node", "1"],
                        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stderr
    data = json.loads(up.stdout)
    pids = [data["etcd"]["pid"], *(node["flanneld"]["pid"] for node in data["nodes"])]
    assert len(data["pods"]) == 2 and all(Namespace(ns).exists() for ns in data["namespaces"])
    down = subprocess.run([*cli, "lab", "flannel", "down", "--name", name], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not any(Namespace(ns).exists() for ns in data["namespaces"])
    assert not run_file(name).exists() and not Path(data["directory"]).exists()
    deadline = time.monotonic() + 5     # orphans are reaped by init, not by us
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
