"""Facts of our veths' far ends in other namespaces (containers): read with
IFLA_TARGET_NETNSID, kept current by that namespace's own link events, and
forgotten when the veth goes."""

from __future__ import annotations

import os
import subprocess

import pytest
from test_state_events import WAIT, assert_converges, drain
from test_state_support import sh, throwaway_netns

from linuxfp.state import EventStream, PeerLinkUpdate, advance, read_snapshot

pytestmark = pytest.mark.netns


@pytest.fixture
def netns():
    with throwaway_netns() as name:
        yield name


@pytest.fixture
def pod():
    """A second namespace, standing for a container."""
    name = f"lfp-t-{os.getpid()}-pod"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def in_pod(pod: str, command: str) -> None:
    sh(f"ip netns exec {pod} {command}")


def settle(stream, snapshot):
    for batch in drain(stream, 0.3):
        assert not batch.resync
        snapshot = advance(snapshot, batch)
    return snapshot


def test_peer_facts_follow_the_other_namespace(netns, pod):
    sh("ip link add h0 type veth peer name eth0",
       f"ip link set eth0 netns {pod}",
       "ip link set h0 up")
    in_pod(pod, "ip link set eth0 address 02:00:00:00:0a:01")
    in_pod(pod, "ip link set eth0 up")

    snapshot = read_snapshot()
    h0 = snapshot.link_by_name("h0")
    assert h0.peer_netnsid is not None
    peer = snapshot.peer_of(h0)
    assert peer is not None and peer.mac == "02:00:00:00:0a:01" and peer.up and peer.mtu == 1500

    with EventStream() as stream:
        snapshot = read_snapshot()
        # The pod changes its own address: announced in its namespace only.
        in_pod(pod, "ip link set eth0 address 02:00:00:00:0a:02")
        batch = stream.read_batch(WAIT)
        assert batch is not None and "peer" in batch.kinds
        snapshot = settle(stream, advance(snapshot, batch))
        assert snapshot.peer_of(snapshot.link_by_name("h0")).mac == "02:00:00:00:0a:02"
        in_pod(pod, "ip link set eth0 mtu 1400")
        in_pod(pod, "ip link set eth0 down")
        snapshot = settle(stream, snapshot)
        peer = snapshot.peer_of(snapshot.link_by_name("h0"))
        assert (peer.mtu, peer.up) == (1400, False)
        # Other links of the pod are not kept.
        in_pod(pod, "ip link add x7 type veth peer name x8")
        snapshot = settle(stream, snapshot)
        assert len(snapshot.peers) == 1
        snapshot = assert_converges(stream, snapshot)

        # A new pod veth: our end is announced before (or after) its far end
        # moves; either way the far end's facts are read.
        sh("ip link add h1 type veth peer name eth1", f"ip link set eth1 netns {pod}")
        in_pod(pod, "ip link set eth1 address 02:00:00:00:0b:01")
        snapshot = settle(stream, snapshot)
        assert snapshot.peer_of(snapshot.link_by_name("h1")).mac == "02:00:00:00:0b:01"

        # A far end comes home: our end's peer is in our namespace now, unannounced
        # (read again because the arriving end names it).
        in_pod(pod, f"ip link set eth1 netns {netns}")
        snapshot = assert_converges(stream, settle(stream, snapshot))
        assert snapshot.link_by_name("h1").peer_netnsid is None

        # Our end goes: its far end is forgotten.
        sh("ip link del h0")
        snapshot = settle(stream, snapshot)
        assert snapshot.peers == ()
        snapshot = assert_converges(stream, snapshot)


def test_peer_events_decode_with_the_namespace_id(netns, pod):
    sh("ip link add h0 type veth peer name eth0", f"ip link set eth0 netns {pod}")
    with EventStream() as stream:
        snapshot = read_snapshot()
        in_pod(pod, "ip link set eth0 address 02:00:00:00:0c:01")
        batch = stream.read_batch(WAIT)
        assert batch is not None
        updates = [m for m in batch.messages if isinstance(m, PeerLinkUpdate)]
        assert updates and updates[-1].peer.nsid == snapshot.link_by_name("h0").peer_netnsid
