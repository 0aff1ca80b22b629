"""Netfilter reads through kept sockets (linuxfp/state/netlink.py
query_socket): closing a NETLINK_NETFILTER socket waits for nf_tables to
free what its last commit replaced, so the controller keeps its query
sockets open — one per thread and namespace, never one a failed request
may have left answers on, and none at all unless asked."""
from __future__ import annotations

import pytest

from linuxfp.lab.netns import Lab, entered
from linuxfp.state import netlink as nl
from linuxfp.state.ipset import read_ipsets
from linuxfp.state.netfilter import nft_generation, nft_tables

pytestmark = pytest.mark.netns


@pytest.fixture
def two_namespaces():
    with Lab(prefix="lfp-t") as lab:
        a, b = lab.namespace("qa"), lab.namespace("qb")
        a.run(["nft", "add", "table", "ip", "only_in_a"])
        b.run(["nft", "add", "table", "inet", "only_in_b"])
        yield a, b


@pytest.fixture
def keeping():
    nl.keep_query_sockets(True)
    try:
        yield
    finally:
        nl.keep_query_sockets(False)
        nl.close_query_sockets()


def _socket_used(ns) -> nl.NetlinkSocket:
    with entered(ns), nl.query_socket(nl.NETLINK_NETFILTER) as sock:
        return sock


def test_a_kept_socket_serves_its_own_namespace_only(two_namespaces, keeping):
    a, b = two_namespaces
    for _ in range(2):       # the second reads go through the kept sockets
        with entered(a):
            assert nft_tables() == ("ip only_in_a",)
            assert nft_generation() is not None
        with entered(b):
            assert nft_tables() == ("inet only_in_b",)
    assert _socket_used(a) is _socket_used(a)
    assert _socket_used(a) is not _socket_used(b)


def test_a_request_cut_short_drops_its_socket(two_namespaces, keeping):
    a, _ = two_namespaces
    before = _socket_used(a)
    with pytest.raises(RuntimeError), entered(a), nl.query_socket(nl.NETLINK_NETFILTER) as sock:
        assert sock is before
        raise RuntimeError("a request interrupted")
    assert before.sock.fileno() == -1         # closed, not kept
    assert _socket_used(a) is not before
    with entered(a):
        assert nft_tables() == ("ip only_in_a",)


def test_an_answered_error_keeps_the_socket_usable(two_namespaces, keeping):
    """read_ipsets takes a set that does not exist as an answer (the kernel
    said so, completely) and keeps reading through the same socket."""
    a, _ = two_namespaces
    a.run(["ipset", "create", "lfp_known", "hash:ip"])
    a.run(["ipset", "add", "lfp_known", "198.18.0.9"])
    before = _socket_used(a)
    with entered(a):
        sets = {s.name: s for s in read_ipsets(["lfp_missing", "lfp_known"])}
        assert sets["lfp_missing"].unsupported and not sets["lfp_known"].unsupported
        assert sets["lfp_known"].prefixes
        assert nft_tables() == ("ip only_in_a",)
    assert _socket_used(a) is before


def test_nothing_is_kept_unless_asked(two_namespaces):
    a, _ = two_namespaces
    first = _socket_used(a)
    assert first.sock.fileno() == -1
    assert _socket_used(a) is not first
