"""EventStream against real namespaces: every change is seen, coalesced, and
folds into exactly what a fresh read_snapshot() returns."""

from __future__ import annotations

import os
import select
import struct
import subprocess
import time

import pytest
from test_state_support import basic_topology, sh, throwaway_netns

from linuxfp.state import (
    EventStream,
    LinkRemoved,
    ResyncRequired,
    advance,
    apply_messages,
    read_snapshot,
)
from linuxfp.state.decode import RTM_GETLINK, RTM_GETQDISC

pytestmark = pytest.mark.netns

# Generous: the stream answers as soon as the kernel has spoken; the timeout
# only bounds a failing test.
WAIT = 5.0


@pytest.fixture
def netns():
    with throwaway_netns() as name:
        yield name


def drain(stream: EventStream, quiet: float = 0.2) -> list:
    batches = []
    while (batch := stream.read_batch(quiet)) is not None:
        batches.append(batch)
    return batches


def step(stream: EventStream, snapshot, command: str):
    """Run one command, wait for its events and apply them."""
    sh(command)
    first = stream.read_batch(WAIT)
    assert first is not None, f"no event for {command!r}"
    batches = [first] + drain(stream, 0.05)
    assert not any(b.resync for b in batches)
    kinds = frozenset().union(*(b.kinds for b in batches))
    for batch in batches:
        snapshot = advance(snapshot, batch)
    return snapshot, kinds


def differences(incremental, fresh) -> dict:
    return {name: (set(getattr(incremental, name)) ^ set(getattr(fresh, name))
                   if isinstance(getattr(fresh, name), tuple) else
                   (getattr(incremental, name), getattr(fresh, name)))
            for name in incremental.changed_fields(fresh)}


def assert_converges(stream: EventStream, snapshot):
    """The incrementally built snapshot equals a fresh dump, allowing for
    events the kernel sends asynchronously (linkwatch operstate updates may
    trail the command that caused them)."""
    for _ in range(20):
        diff = differences(snapshot, read_snapshot())
        if not diff:
            return snapshot
        batch = stream.read_batch(0.25)
        if batch is not None:
            assert not batch.resync
            snapshot = advance(snapshot, batch)
    assert not diff, diff
    return snapshot


def test_each_change_is_seen_and_applies_exactly(netns):
    basic_topology()
    with EventStream() as stream:
        snap = read_snapshot()
        a0 = snap.link_by_name("a0").index
        expectations = [
            ("ip route add 203.0.113.0/24 nexthop via 198.18.0.2 nexthop via 198.18.1.2 weight 2", "route"),
            ("ip route add blackhole 198.51.100.0/24", "route"),
            ("ip route add 192.0.2.0/24 via 198.18.0.2 table 100 mtu 1400", "route"),
            # IPv4 default routes are kept: several in a table are a choice
            ("ip route add default via 198.18.0.2", "route"),
            ("ip route append default via 198.18.1.2", "route"),
            ("ip route replace default via 198.18.1.3", "route"),
            ("ip route del default via 198.18.1.2", "route"),
            # Plain routes (Route.plain) are left to the live FIB: no message.
            ("ip route add 198.51.100.128/25 via 198.18.0.2", None),
            ("ip route replace 198.51.100.128/25 via 198.18.0.3", "route"),
            ("ip route append 192.0.2.0/24 via 198.18.0.3 table 100", "route"),
            ("ip route del 192.0.2.0/24 via 198.18.0.3 table 100", "route"),
            ("ip route del 198.51.100.128/25", "route"),
            ("ip rule add from 198.18.0.0/24 table 100 pref 100", "rule"),
            ("ip addr add 198.18.2.1/24 dev a0", "addr"),
            ("ip neigh add 198.18.0.9 lladdr 02:00:00:00:00:09 dev a0", "neigh"),
            ("ip neigh change 198.18.0.9 lladdr 02:00:00:00:00:0a dev a0", "neigh"),
            ("sysctl -qw net.ipv4.conf.a0.forwarding=1", "netconf"),
            ("sysctl -qw net.ipv4.ip_forward=1", "netconf"),
            # one device's (that device read again) and all's (every device's)
            ("sysctl -qw net.ipv4.conf.b0.rp_filter=1", "netconf"),
            ("sysctl -qw net.ipv4.conf.all.rp_filter=2", "netconf"),
            ("iptables -A FORWARD -j DROP", "nftables"),
            ("ip route del blackhole 198.51.100.0/24", "route"),
            ("ip route replace 192.0.2.0/24 via 198.18.1.2 table 100", "route"),
            # Silent kernel side effects: routes via b0 are flushed, the
            # multipath nexthop is marked dead, nothing announces it.
            ("ip link set b0 down", "link"),
            ("ip link set b0 up", "link"),
            # Its preferred source goes with the address: flushed silently.
            ("ip route add 203.0.113.128/25 via 198.18.0.2 src 198.18.2.1 mtu 1400", "route"),
            ("ip addr del 198.18.2.1/24 dev a0", "route_flush"),
            ("ip link add c0 type veth peer name c1", "link"),
            ("ip link set c0 name c9", "link"),
            ("ip link del c9", "link"),
            # deleted and made again with its ifindex, in one batch: read afresh
            ("ip link add c5 index 345 type veth peer name c6", "link"),
            ("ip link del c5 && ip link add c5 index 345 type veth peer name c6", "link"),
            ("ip link del c5", "link"),
            ("ip link add br0 type bridge", "link"),
            ("ip link set a1 master br0", "link"),
            ("ip link set br0 up", "link"),
            ("ip link set a1 nomaster", "link"),
            ("ip link add vx0 type vxlan id 42 dstport 4789 local 198.18.0.1", "link"),
            ("ip link set a1 down", "link"),  # a0 loses carrier
            ("ip link set a1 up", "link"),
            ("tc qdisc add dev a0 clsact", "qdisc"),
            ("tc qdisc add dev b0 root pfifo", "qdisc"),
            ("ip nexthop add id 5 via 198.18.0.2 dev a0", "nexthop"),
            ("ip route add 198.51.100.0/26 nhid 5", "route"),
            # Routes using a nexthop object are not re-announced when it changes.
            ("ip nexthop replace id 5 via 198.18.0.3 dev a0", "nexthop"),
            ("ip rule del pref 100", "rule"),
            ("iptables -D FORWARD -j DROP", "nftables"),
        ]
        for command, kind in expectations:
            snap, kinds = step(stream, snap, command)
            assert kind is None and not kinds or kind in kinds, (command, kinds)
            snap = assert_converges(stream, snap)
        assert snap.link(a0).name == "a0"
        assert snap.sysctls.ip_forward and snap.interface_sysctls(a0).forwarding
        assert snap.netfilter.active  # iptables-nft leaves its table behind
        assert snap.neighbours_of(a0)[0].lladdr == "02:00:00:00:00:0a"
        assert snap.link_by_name("br0").kind == "bridge"
        assert snap.link_by_name("vx0").kind == "vxlan"
        assert snap.link(a0).tc_ingress and snap.link_by_name("b0").qdisc == "pfifo"
        nh_route = next(r for r in snap.routes if r.nh_id == 5)
        assert nh_route.nexthops[0].gateway == "198.18.0.3"


def test_bridge_changes_are_seen_and_apply_exactly(netns):
    """Ports, their states and flags (`bridge link` announces them in
    AF_BRIDGE only), bridge options and FDB entries fold into what a fresh
    read returns."""
    basic_topology()
    sh("ip link add br0 type bridge ageing_time 1000")
    sh("ip link set br0 up")
    with EventStream() as stream:
        snap = read_snapshot()
        expectations = [
            ("ip link set a1 master br0", "link"),
            ("ip link set b1 master br0", "link"),
            ("bridge fdb add 02:00:00:00:00:aa dev a1 master static", "fdb"),
            ("bridge fdb replace 02:00:00:00:00:aa dev b1 master static", "fdb"),
            ("bridge link set dev a1 state 2", "bridge_port"),
            ("bridge link set dev a1 isolated on hairpin on", "bridge_port"),
            ("ip link set dev a1 type bridge_slave state 3 learning off", "link"),
            ("ip link set br0 type bridge ageing_time 2000 nf_call_iptables 1", "link"),
            ("bridge fdb del 02:00:00:00:00:aa dev b1 master", "fdb"),
            ("ip link set b1 nomaster", "link"),
        ]
        for command, kind in expectations:
            snap, kinds = step(stream, snap, command)
            assert kind in kinds, (command, kinds)
            snap = assert_converges(stream, snap)
        a1, br0 = snap.link_by_name("a1"), snap.link_by_name("br0")
        assert a1.bridge_port.state == 3 and a1.bridge_port.isolated and a1.bridge_port.hairpin
        assert not a1.bridge_port.learning
        assert br0.bridge.ageing_time_cs == 2000 and br0.bridge.nf_call_iptables
        assert snap.link_by_name("b1").bridge_port is None
        assert all(e.mac != "02:00:00:00:00:aa" for e in snap.fdb)
        assert any(e.local and e.port == a1.index for e in snap.fdb_of(br0.index))


def test_vxlan_remotes_are_seen_and_apply_exactly(netns):
    """A VXLAN device's own FDB (NTF_SELF remotes, which the fast path
    checks long packets' outer routes against): a unicast MAC's remote
    replaced (announced as the new remote alone), the default entry's
    remotes appended one by one, each removal, the device's removal —
    each folds into what a fresh read returns."""
    basic_topology()
    sh("ip link add vx0 type vxlan id 1 local 198.18.1.1 dev a1 dstport 8472 nolearning")
    with EventStream() as stream:
        snap = read_snapshot()
        assert snap.link_by_name("vx0").vxlan.local == "198.18.1.1"
        expectations = [
            "bridge fdb add 02:00:00:00:00:bb dev vx0 dst 198.18.1.2",
            "bridge fdb replace 02:00:00:00:00:bb dev vx0 dst 198.18.1.3",
            "bridge fdb append 00:00:00:00:00:00 dev vx0 dst 198.18.1.4",
            "bridge fdb append 00:00:00:00:00:00 dev vx0 dst 198.18.1.5 port 4789 vni 7",
            # the same address again, another VNI: another remote
            "bridge fdb append 00:00:00:00:00:00 dev vx0 dst 198.18.1.5 port 4789 vni 8",
            "bridge fdb del 00:00:00:00:00:00 dev vx0 dst 198.18.1.5 port 4789 vni 8",
            "bridge fdb del 00:00:00:00:00:00 dev vx0 dst 198.18.1.4",
            "bridge fdb add 02:00:00:00:00:cc dev vx0 dst 198.18.1.6 via b1",
        ]
        for command in expectations:
            snap, kinds = step(stream, snap, command)
            assert "vtep" in kinds, (command, kinds)
            snap = assert_converges(stream, snap)
        vx0 = snap.link_by_name("vx0").index
        remotes = {(r.mac, r.dst, r.port, r.vni, r.via) for r in snap.vteps}
        assert remotes == {("02:00:00:00:00:bb", "198.18.1.3", 0, 0, 0),
                           ("00:00:00:00:00:00", "198.18.1.5", 4789, 7, 0),
                           ("02:00:00:00:00:cc", "198.18.1.6", 0, 0, snap.link_by_name("b1").index)}
        assert {r.device for r in snap.vteps} == {vx0}
        snap, _ = step(stream, snap, "bridge fdb del 02:00:00:00:00:bb dev vx0")
        snap, _ = step(stream, snap, "ip link del vx0")
        snap = assert_converges(stream, snap)
        assert snap.vteps == ()


def test_link_down_is_reported_with_current_routes(netns):
    basic_topology()
    sh("ip route add 192.0.2.0/24 via 198.18.1.2 mtu 1400")
    with EventStream() as stream:
        snap = read_snapshot()
        assert any(r.dst == "192.0.2.0/24" for r in snap.routes)
        snap, kinds = step(stream, snap, "ip link set b0 down")
        assert {"link", "route_flush"} <= kinds
        assert not snap.link_by_name("b0").up
        assert not any(r.dst == "192.0.2.0/24" for r in snap.routes)  # flushed silently by Linux
        assert_converges(stream, snap)


def test_xdp_features_event(netns):
    basic_topology()
    with EventStream() as stream:
        snap = read_snapshot()
        assert not snap.link_by_name("a0").can_receive_xdp_redirect
        snap, kinds = step(stream, snap, "ethtool -K a1 gro on")
        assert "xdp_features" in kinds
        assert snap.link_by_name("a0").can_receive_xdp_redirect
        assert_converges(stream, snap)


def test_fileno_is_pollable(netns):
    with EventStream() as stream:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLIN)
        assert poller.poll(0) == []
        sh("ip link add d0 type veth peer name d1")
        assert poller.poll(int(WAIT * 1000))
        assert stream.read_batch(0) is not None
        assert len(stream.filenos()) == len(stream.sources) >= 1


def test_a_batch_reads_only_the_sockets_with_something_to_read(netns):
    """A route change is read from the routing socket alone: the other
    subscriptions (nf_tables, xfrm, other namespaces' links, netdev) are
    not asked, each read of an empty socket being a system call in the
    response time; and what arrives on one of them later is its own batch."""
    basic_topology()
    with EventStream(quiet_ns=0) as stream:
        # (the topology's own late events: linkwatch announces a carrier
        # change up to a second later)
        drain(stream, 1.1)
        reads: dict[str, int] = {}
        for source in stream._sources:
            for method in ("receive", "receive_tagged"):
                def counted(real=getattr(source.sock, method), name=source.name):
                    reads[name] = reads.get(name, 0) + 1
                    return real()
                setattr(source.sock, method, counted)
        assert {"rtnl", "nft"} <= set(stream.sources)
        sh("ip route add 192.0.2.0/24 via 198.18.1.2 mtu 1400")
        batch = stream.read_batch(WAIT)
        assert batch is not None and batch.kinds == {"route"}, batch and batch.kinds
        assert set(reads) == {"rtnl"}, reads
        sh("nft add table ip lfp_t_reads")
        batch = stream.read_batch(WAIT)
        assert batch is not None and "netfilter" in batch.kinds
        assert set(reads) == {"rtnl", "nft"}, reads


def test_burst_coalesces(netns, tmp_path):
    basic_topology()
    script = tmp_path / "routes.batch"
    script.write_text("".join(f"route add 198.19.{i // 250}.{i % 250}/32 via 198.18.0.2 mtu 1400\n"
                              for i in range(1000)))
    # A quiet window well above scheduling jitter keeps this independent of
    # machine load; the default (2 ms) is tuned for latency instead.
    with EventStream(quiet_ns=20_000_000, max_batch_ns=2_000_000_000) as stream:
        snap = read_snapshot()
        sh(f"ip -batch {script}")
        batches = drain(stream, 0.3)
        routes = sum(1 for b in batches for m in b.messages if m.kind == "route")
        assert routes == 1000
        # One `ip -batch` arrives as a few bursts, not 1000 wakeups.
        assert 1 <= len(batches) <= 50, [len(b.messages) for b in batches]
        assert all(b.first_arrival <= b.last_arrival for b in batches)
        assert not any(b.resync for b in batches)
        for batch in batches:
            snap = apply_messages(snap, batch.messages)
        assert_converges(stream, snap)


def test_overflow_requests_resync(netns, tmp_path):
    basic_topology()
    script = tmp_path / "routes.batch"
    script.write_text("".join(f"route add 198.19.{i // 250}.{i % 250}/32 via 198.18.0.2\n"
                              for i in range(2000)))
    # A receive buffer of a few KiB cannot hold 2000 route events.
    with EventStream(rcvbuf=4096) as stream:
        sh(f"ip -batch {script}")
        batches = drain(stream, 0.3)
        assert any(b.resync for b in batches)
        # After the resync the stream keeps working.
        sh("ip route add 192.0.2.0/24 via 198.18.0.2 mtu 1400")
        batch = stream.read_batch(WAIT)
        assert batch is not None and "route" in batch.kinds


def test_ambiguous_replace_falls_back_to_a_fresh_read(netns):
    basic_topology()
    sh("ip route append 192.0.2.0/24 via 198.18.0.2 mtu 1400",
       "ip route append 192.0.2.0/24 via 198.18.0.3 mtu 1400")
    with EventStream() as stream:
        snap = read_snapshot()
        assert len([r for r in snap.routes if r.dst == "192.0.2.0/24"]) == 2
        # Linux replaces the first of the two in its own list order.
        sh("ip route replace 192.0.2.0/24 via 198.18.1.2")
        batch = stream.read_batch(WAIT)
        with pytest.raises(ResyncRequired):
            apply_messages(snap, batch.messages)
        snap = advance(snap, batch)
        assert_converges(stream, snap)


def test_ipv6_routes_that_stop_cached_answers_are_followed(netns):
    """IPv6 routes that expire or use nexthop objects, which the router's
    FIB-answer cache must not serve (Snapshot.routes6_uncached), from
    events as from a fresh read."""
    basic_topology()
    sh("ip -6 addr add 2001:db8:5::1/64 dev a0 nodad")
    with EventStream() as stream:
        snap = assert_converges(stream, read_snapshot())
        for command in ("ip -6 route add 2001:db8:6::/64 via 2001:db8:5::2 expires 300",
                        "ip nexthop add id 6 via 2001:db8:5::2 dev a0",
                        "ip -6 route add 2001:db8:7::/64 nhid 6",
                        "ip -6 route add 2001:db8:8::/64 via 2001:db8:5::2"):
            snap, _ = step(stream, snap, command)
            snap = assert_converges(stream, snap)
        assert sorted((i[2], why.split(" (")[0]) for i, why in snap.routes6_uncached) == [
            ("2001:db8:6::/64", "routes expire"), ("2001:db8:7::/64", "routes use nexthop objects")]
        snap, _ = step(stream, snap, "ip -6 route del 2001:db8:6::/64")     # (read again)
        snap = assert_converges(stream, snap)
        assert [i[2] for i, _why in snap.routes6_uncached] == ["2001:db8:7::/64"]
        # an address's new lifetime reaches its prefix route with no route event
        snap, kinds = step(stream, snap, "ip -6 addr change 2001:db8:5::1/64 dev a0 valid_lft 600 preferred_lft 600")
        assert "2001:db8:5::/64" in [i[2] for i, _why in snap.routes6_uncached], kinds
        snap = assert_converges(stream, snap)


def test_a_wakeup_ends_the_wait_without_a_batch(netns):
    """A watch's doorbell (add_wakeup) ends read_batch's wait as a netlink
    event would, is drained, and makes no batch; events that come with it
    still make one."""
    import os

    bell = os.eventfd(0, os.EFD_NONBLOCK)
    rung = []

    def drain() -> None:
        rung.append(os.eventfd_read(bell))

    try:
        with EventStream() as stream:
            stream.add_wakeup(bell, drain)
            os.eventfd_write(bell, 1)
            assert stream.read_batch(timeout=None) is None      # would wait for ever without it
            assert rung == [1]
            os.eventfd_write(bell, 1)
            sh("ip link add d0 type veth peer name d1")
            batch = stream.read_batch(timeout=WAIT)
            assert batch is not None and "link" in batch.kinds and len(rung) == 2
    finally:
        os.close(bell)


def test_a_bpf_ring_is_a_doorbell(netns):
    """The BPF side of a doorbell: a ring buffer's fd is readable while
    records wait, and drain() discards them."""
    import select as select_

    from linuxfp import datapath as dp

    ring = dp.Map.create(27, 0, 0, 4096, name="lfp_test_ring")      # BPF_MAP_TYPE_RINGBUF
    bell = dp.Doorbell(ring.fd)
    try:
        poller = select_.poll()
        poller.register(bell.fileno(), select_.POLLIN)
        assert poller.poll(0) == [] and bell.drain() == 0
    finally:
        bell.close()
        ring.close()


def test_a_device_unregistering_is_not_asked_about(netns, monkeypatch):
    """A device's conf is deleted as it unregisters (RTM_DELNETCONF), and its
    RTM_DELLINK follows once the kernel has waited out the device's users,
    holding the RTNL (~17 ms for a bridge here). The stream must not ask
    the kernel about the device meanwhile: the request would wait that out
    inside the response time, only to hear ENODEV. Nor is anything else
    read for its sysctls."""
    # (up: deleting it announces it down first, so the stream knows it
    # closed when its configuration goes)
    sh("ip link add lfpgone type bridge", "ip link set lfpgone up")
    with EventStream(quiet_ns=0) as stream:
        drain(stream, 0.1)
        index = read_snapshot().link_by_name("lfpgone").index
        asked: list[int] = []
        real = stream._rtnl.request

        def counted(kind, payload, *args, **kwargs):
            if kind == RTM_GETLINK:
                asked.append(struct.unpack_from("=i", payload, 4)[0])   # (ifinfomsg.ifi_index)
            return real(kind, payload, *args, **kwargs)
        monkeypatch.setattr(stream._rtnl, "request", counted)
        snap = read_snapshot()
        # Read while the command runs, as the controller does: its first
        # events come before the device is gone.
        deleting = subprocess.Popen(["ip", "link", "del", "lfpgone"])
        batches = []
        try:
            # (until its RTM_DELLINK: ~17 ms after the first events here,
            # longer on a loaded host)
            deadline = time.monotonic() + WAIT
            while not any(isinstance(m, LinkRemoved) and m.index == index for b in batches for m in b.messages):
                assert time.monotonic() < deadline, [b.kinds for b in batches]
                batch = stream.read_batch(0.1)
                if batch is not None:
                    batches.append(batch)
            batches += drain(stream, 0.1)
        finally:
            assert deleting.wait(WAIT) == 0
        assert index not in asked, asked
        # Its sysctls go with its RTM_DELLINK: nothing of the namespace's
        # is read again (~0.5 ms of /proc reads).
        assert not any("sysctls" in b.kinds for b in batches), [b.kinds for b in batches]
        for batch in batches:
            snap = advance(snap, batch)
        assert_converges(stream, snap)


def test_a_new_device_costs_no_dump_of_every_qdisc(netns, monkeypatch):
    """A device enters a namespace with no qdisc: made there bare, or moved
    in (the move shuts its qdiscs down, clsact and filters included). So a
    new device's ingress qdisc is known without dumping every device's
    (no qdisc dump filters by device: O(devices) per new container veth);
    one added right after is its own event, read as before."""
    other = f"lfp-t-{os.getpid()}-from"
    sh(f"ip netns add {other}")
    try:
        sh(f"ip -n {other} link add lfpmoved type ifb", f"ip netns exec {other} tc qdisc add dev lfpmoved clsact")
        with EventStream(quiet_ns=0) as stream:
            snap = read_snapshot()
            dumps: list[int] = []
            real = stream._rtnl.dump

            def counted(kind, *args, **kwargs):
                dumps.append(kind)
                return real(kind, *args, **kwargs)
            monkeypatch.setattr(stream._rtnl, "dump", counted)
            for command in ("ip link add lfpnew type ifb", f"ip -n {other} link set lfpmoved netns {netns}"):
                snap, kinds = step(stream, snap, command)
                assert "link" in kinds, (command, kinds)
                snap = assert_converges(stream, snap)
            assert RTM_GETQDISC not in dumps, dumps
            assert not snap.link_by_name("lfpmoved").tc_ingress and not snap.link_by_name("lfpnew").tc_ingress
            # an ingress qdisc added at once is read (its own event)
            snap, kinds = step(stream, snap, "ip link add lfpquick type ifb && tc qdisc add dev lfpquick clsact")
            snap = assert_converges(stream, snap)
            assert snap.link_by_name("lfpquick").tc_ingress
    finally:
        sh(f"ip netns del {other}")


def test_a_family_torn_down_by_a_small_mtu_leaves_the_snapshot_as_a_read_finds_it(netns):
    """The kernel tears a device's IPv6 configuration down below an MTU of
    1280 and its IPv4 one below 68 (RTM_DELNETCONF, the device staying),
    and makes them again when the MTU allows (RTM_NEWNETCONF). The
    snapshot follows from the messages alone: IPv6 read as off, then no
    IPv4 entry (a device without IPv4 configuration forwards nothing), then
    both back — each step equal to a fresh read."""
    sh("ip link add lfpsmall type ifb", "ip link set lfpsmall up")
    with EventStream() as stream:
        snap = read_snapshot()
        index = snap.link_by_name("lfpsmall").index
        assert snap.sysctls.for_ifindex(index).ipv6
        for command, ipv4, ipv6 in (("ip link set lfpsmall mtu 1000", True, False),
                                    ("ip link set lfpsmall mtu 60", False, False),
                                    ("ip link set lfpsmall mtu 1500", True, True)):
            snap, kinds = step(stream, snap, command)
            assert "netconf" in kinds, (command, kinds)
            snap = assert_converges(stream, snap)
            found = snap.sysctls.for_ifindex(index)
            assert (found is not None) == ipv4 and (found is None or found.ipv6 == ipv6), (command, found)


@pytest.mark.parametrize("up", [False, True], ids=["down", "up"])
def test_a_device_renamed_keeps_its_sysctls_between_its_netconf_messages(netns, up):
    """Renaming a device unregisters its sysctl directories and registers
    them again (RTM_DELNETCONF, then RTM_NEWNETCONF, per family, after the
    rename's RTM_NEWLINK), keeping its configuration; since Linux 6.2 an up
    device can be renamed too. The messages may fall in different batches:
    no snapshot between them may lack what a read finds (a device's missing
    entry is less to check for it, and may turn a namespace-wide check
    off). One message per batch here."""
    sh("ip link add lfpren type ifb", *(["ip link set lfpren up"] if up else []))
    with EventStream(max_messages=1) as stream:
        snap = read_snapshot()
        index = snap.link_by_name("lfpren").index
        before = snap.sysctls.for_ifindex(index)
        assert before is not None and before.ipv6
        sh("ip link set lfpren name lfpren9")
        batches = drain(stream, 0.2)
        assert any("netconf" in b.kinds for b in batches), [b.kinds for b in batches]
        for batch in batches:
            snap = advance(snap, batch)
            assert snap.sysctls.for_ifindex(index) == before, batch.kinds
        assert_converges(stream, snap)
