"""The Flannel lab: real etcd, flanneld and CNI plugins in namespaces.

One lab (two nodes, two pods each) serves the whole module.  The first run
on a fresh machine builds flanneld and the flannel CNI plugin (a few
minutes, progress on the terminal); later runs reuse the cached binaries.
"""

from __future__ import annotations

import contextlib
import ipaddress
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
    from controller.launcher import ControllerProcess, linuxfp_cli, linuxfp_stats
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
            stats = linuxfp_stats(node.name)
    finally:
        os.killpg(echo.pid, 15)
        echo.wait()
    assert int(done.stdout) == count, done.stdout
    fast = sum(entry["nodes"].get("transmit", {}).get("fast", {}).get("into_peer", 0) for entry in stats["interfaces"])
    # both directions of the exchange, less the frames of the connection's
    # first 2 s and those the FDB's refreshes hand to the kernel
    assert fast >= 2 * count * 0.9, (fast, reasons(stats), sent)
    assert all(n <= 0.1 * count for n in sent.values()), (sent, stats)


# Datagrams with IP IDs of our own (sent through raw sockets, UDP checksum
# 0): the IDs a pod's kernel draws go on counting between two runs, and the
# outer UDP checksum covers the inner packet.
RAW_UDP = """
import socket, struct
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
def send(src, dst, sport, dport, payload, flags=0x4000):
    ident = 1 + int.from_bytes(payload[:4], "big")
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), ident, flags, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    raw.sendto(ip + udp, (dst, 0))
"""
ECHO_PORT = 8081
# ("socket": answers through the socket, as a pod's application sends:
# its kernel leaves the UDP checksum to fill, CHECKSUM_PARTIAL, and the IP
# ID 0 on an unconnected socket's DF packets)
RAW_ECHO = RAW_UDP + """
import sys
me, listen = sys.argv[1], int(sys.argv[2])
through_socket = len(sys.argv) > 3 and sys.argv[3] == "socket"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", listen))
if through_socket:
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 1)     # ECT(1): the outer packet carries it
while True:
    d, (ip, port) = s.recvfrom(2000)
    if through_socket:
        s.sendto(d, (ip, port))
    else:
        send(me, ip, listen, port, d)
"""
RAW_EXCHANGE = RAW_UDP + """
import sys, time
me, ip, port, count, first = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "first"
flags = int(sys.argv[6]) if len(sys.argv) > 6 else 0x4000   # DF by default
through_socket = len(sys.argv) > 7 and sys.argv[7] == "socket"    # (as RAW_ECHO's)
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.settimeout(2)
c.bind(("0.0.0.0", 40123))    # one flow, the same in every run: its frames compare
if through_socket:
    c.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 3)     # CE: the outer packet carries ECT(0)
def ask(n):
    # every 25th longer than a VXLAN egress's cap (past it, its remote's
    # outer route decides)
    payload = n.to_bytes(4, "big") * (300 if n % 25 == 24 else 16)
    if through_socket:
        c.sendto(payload, (ip, port))
    else:
        send(me, ip, 40123, port, payload, flags)
    while c.recv(2000)[:4] != n.to_bytes(4, "big"):
        pass
if first:
    c.settimeout(0.3)   # the echo server may not listen yet: ask until it answers
    for _ in range(30):
        try:
            ask(0)
            break
        except socket.timeout:
            pass
    c.settimeout(2)
    time.sleep(2.2)     # conntrack marks the connection a stream (ASSURED)
else:
    ask(0)
for n in range(1, count + 2):
    time.sleep(0.001)   # paced: an FDB refresh's settle window holds a few exchanges, not all
    ask(n)
"""


def _exchange_frames(flannel: FlannelLab, client, server, count: int, run: str = "again",
                     destination: tuple[str, int] | None = None, flags: int = 0x4000,
                     mode: str = "raw") -> dict[str, list[bytes]]:
    """The frames of one UDP request/response exchange (`count` + 2 each way)
    as each pod and each node's underlay receive them, sent to
    `destination` (address, port; by default the server's echo port); the outer packets'
    IP ID (and the header checksum over it), which Linux draws per packet
    from a per-namespace random key, zeroed: all other bytes compare."""
    from linuxfp.lab.dissect import normalise_ip_id, vxlan_checksum_holds
    from linuxfp.lab.packet_io import Capture, settle

    underlay = [ipaddress.IPv4Address(node.underlay_ip) for node in flannel.state.nodes]
    vxlan_port = flannel.vxlan_port.to_bytes(2, "big")
    points = {"client": (client.name, "eth0"), "server": (server.name, "eth0"),
              "node1:eth0": ("node1", "eth0"), "node2:eth0": ("node2", "eth0")}
    captures = {label: Capture(flannel.namespace(ns), dev, label) for label, (ns, dev) in points.items()}
    try:
        address, port = destination or (server.ip, ECHO_PORT)
        flannel.namespace(client.name).run(["python3", "-c", RAW_EXCHANGE, client.ip, address, str(port), str(count),
                                            run, str(flags), mode])
        settle(list(captures.values()), quiet=0.2)
        frames = {label: [f.data for f in capture.stop()] for label, capture in captures.items()}
    finally:
        for capture in captures.values():
            capture.close()
    # what belongs to the exchange: IPv4/UDP to or from port 40123 (inner)
    # or to the VXLAN port (outer); neighbour and other traffic left out
    def ours(frame: bytes) -> bool:
        return len(frame) > 37 and frame[12:14] == b"\x08\x00" and frame[23] == 17 and (
            (40123).to_bytes(2, "big") in (frame[34:36], frame[36:38]) or frame[36:38] == vxlan_port)
    def compared(frame: bytes) -> bytes:
        frame = normalise_ip_id(frame, underlay)[0]
        if mode != "socket":
            return frame
        # a pod's kernel draws its IDs (header checksums, and the outer UDP
        # checksum over them, follow) from counters that run on between
        # runs: zeroed, once the outer checksum is found right
        zeroed = bytearray(frame)
        if frame[36:38] == vxlan_port:
            # (the first run's frames, not compared, may carry a pod's
            # ICMP error: the echo server not listening yet)
            if frame[64 + 9] != 17:
                return frame
            assert vxlan_checksum_holds(frame), frame.hex()
            for at in (64 + 4, 64 + 10):            # inner ID, inner header checksum
                zeroed[at:at + 2] = b"\0\0"
            zeroed[40:42] = b"\0\1" if frame[40:42] != b"\0\0" else b"\0\0"   # outer UDP checksum: summed or not
        else:
            for at in (14 + 4, 14 + 10):
                zeroed[at:at + 2] = b"\0\0"
        return bytes(zeroed)
    return {label: [compared(f) for f in got if ours(f)] for label, got in frames.items()}


def test_inter_node_udp_from_pod_sockets_is_encapsulated_in_the_fast_path_as_flannel_1_would(
        flannel: FlannelLab) -> None:
    """Pod to pod across the nodes, each pod sending through its UDP socket
    (as applications do: the checksum left to fill). Each node's fast path
    puts flannel.1's own headers in front of the packets it routes there
    and sends them out of the underlay (VNI, ports — the source port drawn
    from the flow's hash as the device draws it —, TTL, ECN, the outer UDP
    checksum over the inner one): what both pods and both underlay ends
    receive is byte for byte what Linux alone gives them but the outer IP
    ID, and flannel.1's own transmit sends (almost) none of it, while
    kube-proxy's rules sit on the outer packets' way out and the outer
    connections are tracked."""
    from linuxfp.lab.conntrack import udp_entries

    inter_node = _InterNode(flannel, mode="socket")
    underlay = [node.underlay_ip for node in flannel.state.nodes]
    with inter_node.echo():
        linux = inter_node.linux()
        assert all(n >= inter_node.COUNT for n in inter_node.vxlan_sent), inter_node.vxlan_sent
        with inter_node.controllers():
            fast, _ = inter_node.assert_fast_as(linux)
            assert all(f.get("encapsulated", 0) >= 0.9 * inter_node.COUNT for f in fast), fast
            assert all(n <= 0.1 * inter_node.COUNT for n in inter_node.vxlan_sent), inter_node.vxlan_sent
            # The outer connections (they never see a reply) are refreshed
            # by the fast path's packets as by the kernel's: 3 s on, a few
            # exchanges none of which the device's own transmit sent leave
            # them their whole timeout (30 s) again. (The pods' bridge
            # entries made static first: a learnt one hands a frame to the
            # kernel now and then to be refreshed, which would refresh the
            # outer connection too.)
            pods = ((inter_node.nodes[0], inter_node.client), (inter_node.nodes[1], inter_node.server))
            try:
                for node, pod in pods:
                    node.run(["bridge", "fdb", "replace", pod.mac, "dev", pod.host_veth, "master", "static"])
                _exchange_frames(flannel, inter_node.client, inter_node.server, 20, mode="socket")
                # (an attempt counts only if the device sent none of it: a
                # STALE outer neighbour sends one packet through the device)
                for _ in range(3):
                    time.sleep(3)
                    sent = [tx_packets(node, VXLAN_DEVICE) for node in inter_node.nodes]
                    frames = _exchange_frames(flannel, inter_node.client, inter_node.server, 10, mode="socket")
                    if [tx_packets(node, VXLAN_DEVICE) for node in inter_node.nodes] == sent:
                        break
                else:
                    pytest.fail("flannel.1's own transmit sent some of every few exchanges")
            finally:
                for node, pod in pods:      # (learnt again from the next frame)
                    node.run(["bridge", "fdb", "del", pod.mac, "dev", pod.host_veth, "master"], check=False)
            # (each node's outer flow: the source port its frames carry)
            flows = {(str(ipaddress.IPv4Address(f[26:30])), int.from_bytes(f[34:36], "big"))
                     for f in frames["node1:eth0"] + frames["node2:eth0"]
                     if f[36:38] == flannel.vxlan_port.to_bytes(2, "big")}
            outer = [[entry for (src, dst, sport, dport), entry in udp_entries(node).items()
                      if (src, sport) in flows and (dst, dport) == (other, flannel.vxlan_port)]
                     for node, other in zip(inter_node.nodes, underlay[::-1])]
            assert all(entries and all(e["timeout_s"] >= 29 and "UNREPLIED" in e["flags"] for e in entries)
                       for entries in outer), outer


def test_inter_node_udp_crosses_vxlan_in_the_fast_path_as_linux_forwards_it(flannel: FlannelLab) -> None:
    """Pod to pod across the two nodes through flannel.1 (VXLAN): routed
    into flannel.1 — whose own transmit encapsulates, as behind Linux's
    neighbour output — and, decapsulated by the kernel, routed from
    flannel.1 straight into the pod, in the fast path of both nodes. What
    both pods and both underlay ends receive is what Linux alone gives them
    (the same exchange of one connection, run without, then with
    LinuxFP), and the nodes' kernels forward (almost) none of it."""
    from controller.launcher import linuxfp_cli

    inter_node = _InterNode(flannel)
    with inter_node.echo():
        linux = inter_node.linux()
        with inter_node.controllers():
            shapes = {entry["ifname"]: entry["shape"] for entry in
                      json.loads(linuxfp_cli(inter_node.nodes[0].name, "-j", "status").stdout)["interfaces"]}
            assert "router" in shapes.get(VXLAN_DEVICE, ""), shapes
            inter_node.assert_fast_as(linux)


# An ICMP "fragmentation needed" from the other node quoting one of this
# node's outer VXLAN packets (IPv4 header, UDP to the VXLAN port, VNI 1):
# the device's socket takes the error (__udp4_lib_err_encap) and the node
# learns a path MTU to the other node, as from a router on the underlay.
PMTU_ICMP = """
import socket, struct, sys
me, to, port, mtu = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def csum(b):
    total = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 1400, 1, 0, 64, 17, 0, socket.inet_aton(to), socket.inet_aton(me))
ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
quoted = ip + struct.pack("!HHHH", port, port, 1380, 0) + struct.pack("!II", 0x08000000, 1 << 8)
icmp = struct.pack("!BBHHH", 3, 4, 0, 0, mtu) + quoted
icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).sendto(icmp, (to, 0))
"""


def _recreate_routes(namespace: Namespace, device: str, prefix: str | None = None) -> None:
    """Delete and add again `namespace`'s routes through `device` (only
    `prefix` if given): the path MTUs learned on them go with them."""
    for route in json.loads(namespace.run(["ip", "-j", "route", "show", "dev", device]).stdout):
        if prefix is not None and route["dst"] != prefix:
            continue
        spec = [route["dst"]] + (["via", route["gateway"]] if "gateway" in route else [])
        spec += ["dev", device] + (["onlink"] if "onlink" in route.get("flags", []) else [])
        spec += ["proto", route.get("protocol", "boot"), "scope", route.get("scope", "global")]
        spec += ["src", route["prefsrc"]] if "prefsrc" in route else []
        namespace.run(["ip", "route", "del"] + spec)
        namespace.run(["ip", "route", "add"] + spec)


def test_inter_node_packets_past_a_learned_outer_path_mtu_are_linux_s(flannel: FlannelLab) -> None:
    """node1 learns a path MTU of 1 000 bytes to node2 on the underlay (an
    ICMP error, as a router there would send), so its long requests (1 200
    bytes, no DF) no longer fit once encapsulated: Linux sends each whole
    in a fragmented outer packet, and the first lowers the inner route's
    path MTU to the pod as it goes (skb_tunnel_check_pmtu(): 950 bytes,
    which node1's own packets to that pod then keep to; forwarding does
    not). The fast path checks the outer route (lfp_vteps) and leaves the
    first to the kernel — which lowers that path MTU as without LinuxFP
    (the kernel's own evidence: `ip route get` on node1) — and the router
    the later ones (its lookup sees the lowered path MTU). What both pods
    and both underlay ends receive is Linux's; node2's long answers,
    whose outer route has room, are sent in the fast path. (Before each
    compared run the inner route's learned MTU is dropped and the outer
    one learned again, so both runs start alike.)"""
    from controller.launcher import linuxfp_stats
    from controller_counting import reasons

    inter_node = _InterNode(flannel, flags=0)
    node1, node2 = (next(n for n in flannel.state.nodes if n.name == name) for name in ("node1", "node2"))
    ns1, ns2 = inter_node.nodes
    node2_pods = str(ipaddress.IPv4Interface(node2.subnet).network)

    def learn() -> None:
        _recreate_routes(ns1, VXLAN_DEVICE, node2_pods)
        ns2.run(["python3", "-c", PMTU_ICMP, node2.underlay_ip, node1.underlay_ip, str(flannel.vxlan_port),
                 "1000"])
        learned = ns1.run(["ip", "route", "get", node2.underlay_ip]).stdout
        assert "mtu 1000" in learned, learned

    def inner_path_mtu() -> str:
        return ns1.run(["ip", "route", "get", inter_node.server.ip]).stdout.split("mtu ")[-1].strip()

    try:
        with inter_node.echo():
            learn()
            linux, _ = inter_node._run()
            linux_inner = inner_path_mtu()
            with inter_node.controllers():
                inter_node._run()
                learn()
                before = [linuxfp_stats(node.name) for node in inter_node.nodes]
                accelerated, _ = inter_node._run()
                after = [linuxfp_stats(node.name) for node in inter_node.nodes]
                accelerated_inner = inner_path_mtu()
    finally:
        _recreate_routes(ns1, VXLAN_DEVICE, node2_pods)
        _recreate_routes(ns1, "eth0")
    # Linux fragmented the long requests' outer packets (at node2's end)
    # and lowered the inner route's path MTU; so did the kernel under LinuxFP
    assert any(int.from_bytes(f[20:22], "big") & 0x2000 for f in linux["node2:eth0"]), "no fragments"
    assert linux_inner == accelerated_inner == "950", (linux_inner, accelerated_inner)
    for label, frames in linux.items():
        assert accelerated[label] == frames, label
    passed = [{k: v - reasons(old).get(k, 0) for k, v in reasons(new).items()} for old, new in zip(before, after)]
    fast = [{k: v - reasons(old, ("fast",)).get(k, 0) for k, v in reasons(new, ("fast",)).items()}
            for old, new in zip(before, after)]
    assert passed[0].get("tx_too_long", 0) >= 1 and not passed[1].get("tx_too_long", 0), passed
    assert fast[1].get("forwarded", 0) >= 0.9 * inter_node.COUNT, fast


@pytest.mark.parametrize("mode", ["raw", "socket"])
def test_service_udp_is_translated_in_the_fast_path_as_linux_translates_it(flannel: FlannelLab, mode: str) -> None:
    """A pod's UDP exchange with the ClusterIP service, whose endpoint is a
    pod on the other node: node1's fast path translates the established
    connection's requests to the endpoint and its answers back to the
    service's address (from the conntrack entry kube-proxy's DNAT made),
    and both nodes carry it through flannel.1 — what both pods and both
    underlay ends receive is what Linux alone gives them, and the nodes'
    kernels forward (almost) none of it. Through the pods' sockets, node2
    encapsulates the answers itself; node1 hands the translated requests,
    whose skbs carry no flow hash, to flannel.1 (the device draws the
    source port from a hash the fast path does not compute before the
    rewrite, and must not leave computed on the skb)."""
    inter_node = _InterNode(flannel, service=True, mode=mode)
    with inter_node.echo():
        linux = inter_node.linux()
        # (translated: the client's answers come from the service's address)
        answers = [f for f in linux["client"] if f[36:38] == (40123).to_bytes(2, "big")]
        assert len(answers) == _InterNode.COUNT + 2, len(answers)
        assert all(f[26:30] == ipaddress.IPv4Address(SERVICE_IP).packed for f in answers), answers[:1]
        with inter_node.controllers():
            fast, _ = inter_node.assert_fast_as(linux, "service")
            if mode == "socket":
                assert fast[0].get("encapsulated", 0) == 0, fast
                assert fast[1].get("encapsulated", 0) >= 0.9 * _InterNode.COUNT, fast


def test_service_udp_within_a_node_is_linux_s(flannel: FlannelLab) -> None:
    """A pod's UDP exchange with the ClusterIP service whose endpoint is the
    other pod on its own node: Linux hands each request up from cni0, DNATs
    it and routes it back out of cni0, and bridges each answer back, where
    br_netfilter's conntrack gives it the service's address. What both pods
    receive is what Linux alone gives them; the fast path looked at every
    packet and handed it to the kernel (a request's egress is the bridge it
    came in on; an answer's connection carries NAT)."""
    from controller.launcher import ControllerProcess, linuxfp_stats
    from controller_counting import reasons

    node = flannel.namespace("node2")
    server, client = flannel.pods_on("node2")[:2]
    assert flannel.state.service.endpoint_pod == server.name
    udp = next(p for p in flannel.state.service.ports if p.protocol == "udp")
    destination, count = (flannel.state.service.cluster_ip, udp.port), 100

    def exchange(run: str = "again") -> dict[str, list[bytes]]:
        frames = _exchange_frames(flannel, client, server, count, run, destination)
        return {label: frames[label] for label in ("client", "server")}

    echo = flannel.namespace(server.name).popen(["python3", "-c", RAW_ECHO, server.ip, str(udp.target_port)],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        exchange("first")
        linux = exchange()
        answers = [f for f in linux["client"] if f[36:38] == (40123).to_bytes(2, "big")]
        assert len(answers) == count + 2 and all(
            f[26:30] == ipaddress.IPv4Address(SERVICE_IP).packed for f in answers), len(answers)
        with ControllerProcess(node.name, hook="tc") as controller:
            controller.settled()
            exchange()
            before = linuxfp_stats(node.name)
            accelerated = exchange()
            after = linuxfp_stats(node.name)
        assert accelerated == linux
        counted, fast = ({k: v - reasons(before, kinds).get(k, 0) for k, v in reasons(after, kinds).items()}
                         for kinds in (("passed", "drops"), ("fast",)))
        # (each request, each answer: count + 2 of each, the kernel's)
        assert counted.get("hairpin", 0) >= count + 2 and counted.get("filter_ct_state", 0) >= count + 2, counted
        assert not any(fast.values()), fast
    finally:
        os.killpg(echo.pid, 15)
        echo.wait()


def test_pods_stay_connected_as_linux_connects_them_with_etcd_and_flanneld_down(flannel: FlannelLab) -> None:
    """The control plane failing changes nothing that flanneld programmed:
    with etcd down (controllers started then), then every flanneld down too,
    then both back (flanneld re-reads its lease and re-programs the same
    routes, neighbours and FDB entries under the running controllers), the
    inter-node exchange is Linux's, byte for byte, and takes the fast path."""
    inter_node = _InterNode(flannel)
    try:
        with inter_node.echo():
            linux = inter_node.linux()
            flannel.stop_etcd()
            with inter_node.controllers() as (first, second):
                inter_node.assert_fast_as(linux, "etcd down")
                flannel.stop_flanneld()
                inter_node.assert_fast_as(linux, "etcd and flanneld down")
                flannel.start_control_plane()
                first.settled()
                second.settled()
                inter_node.assert_fast_as(linux, "etcd and flanneld back")
    finally:
        flannel.start_control_plane()       # the module's other tests need them


def test_vxlan_options_flannel_can_set_stay_exact_in_the_fast_path(require_root: None) -> None:
    """flanneld's other vxlan options — another UDP port, Group Policy (the
    mark in the header, and set from it on receive), learning on — are the
    device's own transmit and receive, which the fast path hands packets to
    and takes them from: the exchange is Linux's and fast; and with marked
    requests (a Group Policy ID in their header), still Linux's, node 2
    passing the packets its flannel.1 received marked. (What the fast path
    cannot follow — external mode, an underlay in another namespace — keeps
    flannel.1 on the kernel path: tests/test_graph.py.)"""
    from controller.launcher import linuxfp_stats
    from controller_counting import reasons

    spec = FlannelLabSpec(nodes=2, pods_per_node=1, vxlan_port=4789, gbp=True, learning=True)
    with FlannelLab.up(spec, progress=_progress) as lab:
        details = lab.namespace("node1").run(["ip", "-d", "link", "show", VXLAN_DEVICE]).stdout
        assert "dstport 4789" in details and " gbp" in details and "nolearning" not in details, details
        inter_node = _InterNode(lab)
        with inter_node.echo():
            linux = inter_node.linux()
            with inter_node.controllers():
                inter_node.assert_fast_as(linux)
            # node 1 marks the requests (mangle: its fast path leaves them to
            # the kernel), so they leave with a Group Policy ID and node 2's
            # flannel.1 receives them marked: its fast path hands them to
            # the kernel as the mark may steer them, and the pods see Linux's
            inter_node.nodes[0].run(["iptables", "-t", "mangle", "-A", "FORWARD", "-s", inter_node.client.ip,
                                     "-p", "udp", "--sport", "40123", "-j", "MARK", "--set-mark", "0x10"])
            marked, _ = inter_node._run()
            with inter_node.controllers():
                inter_node._run()
                before = reasons(linuxfp_stats(inter_node.nodes[1].name))
                accelerated, _ = inter_node._run()
                after = reasons(linuxfp_stats(inter_node.nodes[1].name))
        for label, frames in marked.items():
            assert len(frames) == _InterNode.COUNT + 2, (label, len(frames))
            assert accelerated[label] == frames, label
        # the requests reached node 2 with the G flag and policy ID 0x10 in their VXLAN header
        # (Ethernet 14 + IPv4 20 + UDP 8: the flags at 42, the ID at 44)
        assert all(f[42] & 0x80 and f[44:46] == b"\x00\x10" for f in marked["node2:eth0"])
        assert after.get("marked", 0) - before.get("marked", 0) >= 0.9 * _InterNode.COUNT, after


class _InterNode:
    """One UDP flow between the first pods of node1 and node2: its frames
    under Linux alone, then with controllers running, compared. `service`:
    addressed to the ClusterIP service, whose endpoint is node2's first pod
    (node1 translates, as kube-proxy's rules say). `mode` "socket": both
    pods send through their UDP sockets (RAW_ECHO)."""

    COUNT = 200

    def __init__(self, flannel: FlannelLab, service: bool = False, flags: int = 0x4000, mode: str = "raw") -> None:
        self.flannel, self.flags, self.mode = flannel, flags, mode
        self.client, self.server = flannel.pods_on("node1")[0], flannel.pods_on("node2")[0]
        self.nodes = [flannel.namespace("node1"), flannel.namespace("node2")]
        self.destination, self.server_port = None, ECHO_PORT
        if service:
            udp = next(p for p in flannel.state.service.ports if p.protocol == "udp")
            assert flannel.state.service.endpoint_pod == self.server.name
            self.destination, self.server_port = (flannel.state.service.cluster_ip, udp.port), udp.target_port

    @contextlib.contextmanager
    def echo(self) -> Iterator[None]:
        echo = self.flannel.namespace(self.server.name).popen(["python3", "-c", RAW_ECHO, self.server.ip,
                                                               str(self.server_port), self.mode],
                                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _exchange_frames(self.flannel, self.client, self.server, self.COUNT, "first", self.destination,
                             self.flags, self.mode)
            yield
        finally:
            os.killpg(echo.pid, 15)
            echo.wait()

    @contextlib.contextmanager
    def controllers(self):
        """A controller in each node (TC), both current."""
        from controller.launcher import ControllerProcess

        with ControllerProcess(self.nodes[0].name, hook="tc") as first, \
                ControllerProcess(self.nodes[1].name, hook="tc") as second:
            first.settled()
            second.settled()
            yield first, second

    def _run(self) -> tuple[dict[str, list[bytes]], list[int]]:
        from linuxfp.lab.counters import ip_forw_datagrams

        before = [ip_forw_datagrams(node) for node in self.nodes]
        self.vxlan_sent = [tx_packets(node, VXLAN_DEVICE) for node in self.nodes]
        frames = _exchange_frames(self.flannel, self.client, self.server, self.COUNT, destination=self.destination,
                                  flags=self.flags, mode=self.mode)
        self.vxlan_sent = [tx_packets(node, VXLAN_DEVICE) - b for node, b in zip(self.nodes, self.vxlan_sent)]
        return frames, [ip_forw_datagrams(node) - b for node, b in zip(self.nodes, before)]

    def linux(self) -> dict[str, list[bytes]]:
        frames, by_linux = self._run()
        assert all(n >= self.COUNT for n in by_linux), by_linux
        for label, got in frames.items():
            # requests and answers (outer at the underlay ends, inner at the pods)
            assert len(got) == self.COUNT + 2, (label, len(got))
        return frames

    def assert_fast_as(self, linux: dict[str, list[bytes]], when: str = "") -> None:
        from controller.launcher import linuxfp_stats
        from controller_counting import reasons

        count = self.COUNT
        # (the bridge mirror's entries, new to the datapath, settle with
        # their first frames: a first run, then the one compared)
        self._run()
        before = [linuxfp_stats(node.name) for node in self.nodes]
        accelerated, by_kernel = self._run()
        after = [linuxfp_stats(node.name) for node in self.nodes]

        def during(kinds: tuple[str, ...] = ("passed", "drops")) -> list[dict[str, int]]:
            """Each node's counts of the compared run alone (a test may run several)."""
            deltas = []
            for old, new in zip(before, after):
                old_counts = reasons(old, kinds)
                deltas.append({k: v - old_counts.get(k, 0) for k, v in reasons(new, kinds).items()})
            return deltas

        for label, frames in linux.items():
            assert accelerated[label] == frames, (when, label)
        fast, passed = during(("fast",)), during()
        # each node routes the requests or answers into flannel.1 and the
        # others from it into its pod, less the FDB refreshes' frames
        assert all(n <= 0.1 * count for n in by_kernel), (when, by_kernel, passed)
        assert all(f.get("forwarded", 0) + f.get("encapsulated", 0) >= 0.9 * count
                   and f.get("into_peer", 0) >= 0.9 * count for f in fast), (when, fast)
        # the long ones (1 200 bytes, each node's into flannel.1), past the
        # cap, were sent too: the outer route to the other node has room
        assert not any(p.get("tx_too_long", 0) for p in passed), (when, passed)
        return fast, passed


def test_a_pod_added_under_a_controller_is_attached_alone_and_leaves_nothing_when_deleted(flannel: FlannelLab) -> None:
    """CNI ADD while a controller runs: the new pod's host veth gets its
    program (a shape already shipped: nothing compiled, no other interface's
    program replaced) and its traffic takes the fast path; CNI DEL: its
    program, link and pins go with it. `--hook auto` puts pod veths and
    flannel.1 at TC and status says why."""
    from controller.launcher import ControllerProcess, linuxfp_cli, linuxfp_stats
    from controller_counting import reasons
    from linuxfp.datapath.pins import bpffs_root

    node = flannel.namespace("node1")
    peer = flannel.pods_on("node1")[0]

    def status() -> dict:
        return json.loads(linuxfp_cli(node.name, "-j", "status").stdout)

    def wait_for(ready, what: str) -> dict:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            state = status()
            if ready({entry["ifname"]: entry for entry in state["interfaces"]}):
                return state
            time.sleep(0.05)
        raise AssertionError(f"{what}: {state}")

    with ControllerProcess(node.name, hook="auto") as controller:
        controller.settled()
        before = {entry["ifname"]: entry["prog_id"] for entry in status()["interfaces"]}
        pod = flannel.add_pod("node1", "churn1")
        try:
            state = wait_for(lambda entries: entries.get(pod.host_veth, {}).get("state") == "active",
                             f"{pod.host_veth} attached")
            entries = {entry["ifname"]: entry for entry in state["interfaces"]}
            assert entries[pod.host_veth]["origin"] in ("precompiled", "cache"), entries[pod.host_veth]
            assert entries[pod.host_veth]["hook"] == "tc" and entries[pod.host_veth]["hook_reason"], entries[pod.host_veth]
            assert "no native XDP" in entries[VXLAN_DEVICE]["hook_reason"], entries[VXLAN_DEVICE]
            assert {name: entries[name]["prog_id"] for name in before} == before
            echo = flannel.namespace(pod.name).popen(["python3", "-c", UDP_ECHO],
                                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                done = flannel.namespace(peer.name).run(["python3", "-c", UDP_PINGER, pod.ip, "100"])
            finally:
                os.killpg(echo.pid, 15)
                echo.wait()
            assert int(done.stdout) == 100
            stats = linuxfp_stats(node.name)
            into = {entry["ifname"]: entry["nodes"].get("transmit", {}).get("fast", {}).get("into_peer", 0)
                    for entry in stats["interfaces"]}
            # the answers, bridged from the new pod's veth into the peer's
            assert into.get(pod.host_veth, 0) >= 80, (into, reasons(stats))
            ifindex = entries[pod.host_veth]["ifindex"]
        finally:
            flannel.delete_pod(pod.name)
        wait_for(lambda entries: pod.host_veth not in entries, f"{pod.host_veth} forgotten")
        pins = Path(bpffs_root(), "linuxfp", status()["namespace"])
        assert pins.is_dir() and not (pins / f"if{ifindex}").exists(), sorted(p.name for p in pins.iterdir())


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
