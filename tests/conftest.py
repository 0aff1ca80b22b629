"""Shared fixtures for tests that build network namespaces.

Namespaces are named ``lfp-t-<role>-<pid>-<rand>`` and removed after every
test, even when it fails.  Tests that need the network must run as root:
that is checked once per session and fails loudly instead of skipping, so a
CI run without privileges cannot pass by testing nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from linuxfp.lab.counters import ip_forw_datagrams as read_ip_forw_datagrams
from linuxfp.lab.netns import Lab, Namespace
from linuxfp.lab.topology import Router, RouterTopology

TEST_PREFIX = "lfp-t"

# iptables-legacy takes a host-wide lock (/run/xtables.lock) and, without
# -w, fails at once when another process holds it. Each worker of a parallel
# run (make test: pytest-xdist) changes only its own namespaces' tables, so
# each takes a lock of its own; the programs it starts inherit it.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("XTABLES_LOCKFILE", f"/run/xtables-linuxfp-{os.environ['PYTEST_XDIST_WORKER']}.lock")

ROOT_REQUIRED = (
    "network-namespace tests must run as root (they create namespaces, veths and "
    "AF_PACKET sockets): run `sudo python3 -m pytest`"
)


@pytest.fixture(autouse=True)
def _graph_remembers_nothing_from_another_test() -> Iterator[None]:
    """Each test's graphs start from nothing remembered (remember.forget,
    which empties the memos kept by hand too: the rules' meanings, the
    filter's plan): a test that patches a node's limits must not meet an
    answer computed under another's."""
    from linuxfp.graph.remember import forget

    forget()
    yield


def _fail_unless_root() -> None:
    if os.geteuid() != 0:
        pytest.fail(ROOT_REQUIRED, pytrace=False)


@pytest.fixture(scope="session")
def require_root() -> None:
    _fail_unless_root()


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Tests marked `netns` get the same loud check even without using `lab`.
    if item.get_closest_marker("netns") is not None:
        _fail_unless_root()


@pytest.fixture
def lab(require_root: None) -> Iterator[Lab]:
    """A Lab whose namespaces and processes are removed after the test."""
    owned = Lab(prefix=TEST_PREFIX)
    try:
        yield owned
    finally:
        owned.close()


@pytest.fixture
def router_topology(lab: Lab) -> Router:
    """The paper's ``src — dut — sink`` line, 50 prefixes, neighbours resolved."""
    return RouterTopology(prefixes=50)(lab)


@pytest.fixture
def ip_forw_datagrams() -> Callable[[Namespace], int]:
    """``ip_forw_datagrams(ns)``: the kernel's Ip ForwDatagrams counter in `ns`.

    It counts packets the kernel forwarded; a fast path that redirects in XDP
    or TC leaves it unchanged, which is how integration tests prove it ran.
    """
    return read_ip_forw_datagrams
