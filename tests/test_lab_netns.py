"""Namespaces, thread-local entry, and the Lab's cleanup guarantees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from linuxfp.lab.netns import Lab, LabError, Namespace, entered

REPO = Path(__file__).resolve().parents[1]


def _netns_inode(path: str) -> int:
    return os.stat(path).st_ino


def test_namespace_is_prepared_lo_up_ipv6_off(lab: Lab) -> None:
    ns = lab.namespace("prep")
    assert ns.name.startswith(f"lfp-t-prep-{os.getpid()}-")
    assert "UP" in ns.run("ip link show dev lo").stdout.split(">")[0]
    assert ns.read_sysctl("net.ipv6.conf.all.disable_ipv6") == "1"
    assert ns.read_sysctl("net.ipv6.conf.default.disable_ipv6") == "1"
    assert ns.read_sysctl("net/ipv6/conf/lo/disable_ipv6") == "1"


def test_sysctl_writes_only_the_namespace(lab: Lab) -> None:
    ns = lab.namespace("sysctl")
    host_value = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
    ns.sysctl("net.ipv4.ip_forward", 1 - int(host_value))
    assert ns.run("cat /proc/sys/net/ipv4/ip_forward").stdout.strip() == str(1 - int(host_value))
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == host_value


def test_entered_moves_only_the_calling_thread(lab: Lab) -> None:
    ns = lab.namespace("enter")
    home = _netns_inode("/proc/thread-self/ns/net")
    seen_by_other_thread: list[int] = []
    with entered(ns):
        assert _netns_inode("/proc/thread-self/ns/net") == _netns_inode(str(ns.path))
        other = threading.Thread(target=lambda: seen_by_other_thread.append(_netns_inode("/proc/thread-self/ns/net")))
        other.start()
        other.join()
    # A thread started inside inherits the namespace of the thread that started it.
    assert seen_by_other_thread == [_netns_inode(str(ns.path))]
    assert _netns_inode("/proc/thread-self/ns/net") == home


def test_entered_restores_after_an_exception(lab: Lab) -> None:
    ns = lab.namespace("enterexc")
    home = _netns_inode("/proc/thread-self/ns/net")
    with pytest.raises(ValueError), entered(ns):
        raise ValueError("boom")
    assert _netns_inode("/proc/thread-self/ns/net") == home


def test_lab_removes_everything_when_the_body_raises(require_root: None) -> None:
    with pytest.raises(RuntimeError), Lab(prefix="lfp-t") as lab:
        namespaces = [lab.namespace("a"), lab.namespace("b")]
        process = lab.popen(namespaces[0], "sleep 60")
        raise RuntimeError("test body failed")
    assert not any(ns.exists() for ns in namespaces)
    assert process.poll() is not None


def test_lab_close_is_idempotent_and_final(require_root: None) -> None:
    lab = Lab(prefix="lfp-t")
    ns = lab.namespace("idem")
    lab.close()
    lab.close()
    assert not ns.exists()
    with pytest.raises(LabError):
        lab.namespace("late")


def test_failed_command_reports_namespace_command_and_stderr(lab: Lab) -> None:
    ns = lab.namespace("err")
    with pytest.raises(Exception) as failure:
        ns.run("ip route add 198.51.100.0/24 via 203.0.113.1")
    message = str(failure.value)
    assert ns.name in message and "ip route add" in message
    assert ns.run("false", check=False).returncode == 1


_CHILD = textwrap.dedent(
    """
    import sys, time
    from linuxfp.lab.netns import Lab
    lab = Lab(prefix="lfp-t")
    ns = lab.namespace("child")
    lab.popen(ns, "sleep 60")
    print(ns.name, flush=True)
    if sys.argv[1] == "exit":
        sys.exit(0)
    time.sleep(60)
    """
)


@pytest.mark.parametrize(
    "how, expected_status",
    [("exit", 0), ("SIGTERM", -signal.SIGTERM), ("SIGINT", -signal.SIGINT)],
)
def test_namespaces_removed_on_exit_and_signals(require_root: None, how: str, expected_status: int) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, how],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        name = child.stdout.readline().strip()
        assert name.startswith("lfp-t-child-"), child.stderr.read()
        if how != "exit":
            child.send_signal(getattr(signal, how))
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    # Both signals still kill the process (SIGINT via an uncaught KeyboardInterrupt).
    assert child.returncode == expected_status
    assert not Namespace(name).exists()
