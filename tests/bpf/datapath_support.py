"""Helpers shared by tests/test_datapath_*.py: compiling test programs, namespaces.

Imported by the tests after putting tests/bpf on sys.path (tests/ has no
package __init__ of ours to rely on).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

BPF_DIR = Path(__file__).resolve().parent
REPO_ROOT = BPF_DIR.parent.parent
CLANG_FLAGS = ["-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu"]
CLONE_NEWNET = 0x40000000


def compile_bpf(name: str, out_dir: Path) -> Path:
    """clang-compile tests/bpf/<name>.c to <out_dir>/<name>.o."""
    output = out_dir / f"{name}.o"
    subprocess.run(
        ["clang", *CLANG_FLAGS, "-c", str(BPF_DIR / f"{name}.c"), "-o", str(output)],
        check=True,
        capture_output=True,
        text=True,
    )
    return output


def unique_name(tag: str) -> str:
    return f"lfp-t-{os.getpid()}-{tag}"


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), check=True, capture_output=True, text=True)


@contextlib.contextmanager
def netns(tag: str) -> Iterator[str]:
    """A throwaway named network namespace, deleted even if the test fails."""
    name = unique_name(tag)
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    run("ip", "netns", "add", name)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


@contextlib.contextmanager
def veth_netns(tag: str) -> Iterator[str]:
    """A namespace holding an up veth pair lfpa <-> lfpb."""
    with netns(tag) as name:
        run("ip", "-n", name, "link", "add", "lfpa", "type", "veth", "peer", "name", "lfpb")
        run("ip", "-n", name, "link", "set", "lfpa", "up")
        run("ip", "-n", name, "link", "set", "lfpb", "up")
        yield name


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6", use_errno=True)


@contextlib.contextmanager
def inside_netns(name: str) -> Iterator[None]:
    """Move the calling thread into netns ``name`` for the block (ifindexes resolve there)."""
    libc = _libc()
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name}")
        try:
            yield
        finally:
            if libc.setns(original, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the test's netns")
    finally:
        os.close(target)
        os.close(original)


def send_frames(ifname: str, count: int = 3) -> None:
    """Send raw Ethernet frames out of ifname (in the calling thread's netns)."""
    frame = bytes.fromhex("02000000000a" "02000000000b" "88b5") + bytes(50)  # local experimental ethertype
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as raw:
        raw.bind((ifname, 0))
        for _ in range(count):
            raw.send(frame)


def wait_until(condition: Callable[[], bool], what: str, limit_s: float = 10.0) -> None:
    """Poll condition (asynchronous kernel delivery), failing with ``what`` after limit_s."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def python_in_netns(ns: str, script: str) -> subprocess.CompletedProcess[str]:
    """Run a Python snippet under ``ip netns exec`` (its own mount namespace)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-W", "error", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
