"""Throw-away network namespaces for the state tests (this module has no tests).

The test thread itself enters the namespace with setns(2), so in-process
netlink sockets, /proc/sys reads and the commands it spawns (`ip`, `sysctl`,
`iptables`: children inherit the thread's namespace) all see the same netns.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import subprocess
from collections.abc import Iterator

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_names = itertools.count()


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def throwaway_netns() -> Iterator[str]:
    """Create a uniquely named netns, move this thread into it, and always
    move back and delete it."""
    name = f"lfp-t-{os.getpid()}-state{next(_names)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield name
        finally:
            _setns(home)
    finally:
        os.close(home)
        subprocess.run(["ip", "netns", "del", name], check=False)


def sh(*commands: str) -> None:
    """Run shell commands in this thread's netns; fail loudly with stderr."""
    for command in commands:
        proc = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"{command!r} failed ({proc.returncode}): {proc.stderr.strip()}")


def have(tool: str) -> bool:
    return subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, check=False).returncode == 0


def basic_topology() -> None:
    """Two veth pairs, the host ends addressed from the lab ranges."""
    sh("ip link set lo up",
       "ip link add a0 type veth peer name a1",
       "ip link add b0 type veth peer name b1",
       "ip link set a0 up", "ip link set a1 up", "ip link set b0 up", "ip link set b1 up",
       "ip addr add 198.18.0.1/24 dev a0",
       "ip addr add 198.18.1.1/24 dev b0")
