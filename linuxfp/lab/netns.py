"""Throw-away network namespaces and the Lab that guarantees their removal.

A `Namespace` is a named netns (``ip netns add``), so operators can poke at a
lab with the usual tools while it runs.  Commands run through
``ip netns exec`` exactly as an operator would type them; in-process work
(AF_PACKET sockets, pyroute2, /proc/sys) uses `entered`, which moves only the
calling thread into the namespace with setns(2) and back.

A `Lab` owns every namespace and process it created and removes all of them
when it is closed: on normal exit, on exceptions, on SIGINT/SIGTERM and at
interpreter exit, so a failing test or an interrupted demo leaves nothing
behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import secrets
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)

Command = str | Sequence[str]


class LabError(RuntimeError):
    """A lab command failed; the message carries the command and its stderr."""


def _argv(cmd: Command) -> list[str]:
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd]


def _sysctl_path(key: str) -> Path:
    # sysctl(8) convention: in the dotted form a '/' stands for a '.' inside a
    # component (interface names such as eth0.100), so the slashed form is
    # taken literally and the dotted one is converted.
    if "/" in key:
        return Path("/proc/sys") / key.strip("/")
    return Path("/proc/sys", *key.split("."))


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET) failed: {os.strerror(err)}")


@dataclass(frozen=True)
class Namespace:
    """A named network namespace; a value object, the Lab does the bookkeeping."""

    name: str

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    @classmethod
    def create(cls, name: str) -> Namespace:
        """Create the namespace with lo up and IPv6 disabled.

        IPv6 is off so that no spontaneous ND/MLD/RS traffic appears in
        captures; interfaces created later inherit ``default.disable_ipv6``,
        and `disable_ipv6` covers interfaces that already exist.
        """
        _run(["ip", "netns", "add", name], check=True)
        ns = cls(name)
        try:
            ns.sysctl("net.ipv6.conf.all.disable_ipv6", 1)
            ns.sysctl("net.ipv6.conf.default.disable_ipv6", 1)
            ns.run(["ip", "link", "set", "dev", "lo", "up"])
        except BaseException:
            ns.delete()
            raise
        return ns

    def delete(self) -> None:
        """Remove the namespace; a missing one is not an error."""
        if self.path.exists():
            _run(["ip", "netns", "delete", self.name], check=False)

    def exists(self) -> bool:
        return self.path.exists()

    def exec_argv(self, cmd: Command) -> list[str]:
        return ["ip", "netns", "exec", self.name, *_argv(cmd)]

    def run(self, cmd: Command, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command inside the namespace and return its completed process."""
        return _run(self.exec_argv(cmd), check=check, input=input)

    def popen(self, cmd: Command, **kwargs) -> subprocess.Popen:
        """Start a long-running command inside the namespace (own process group)."""
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(self.exec_argv(cmd), **kwargs)

    def sysctl(self, key: str, value: object) -> None:
        """Write a sysctl of this namespace (dotted or slashed key)."""
        with entered(self):
            _sysctl_path(key).write_text(f"{value}\n")

    def read_sysctl(self, key: str) -> str:
        with entered(self):
            return _sysctl_path(key).read_text().strip()

    def read_proc_net(self, name: str) -> str:
        """A /proc/net file of this namespace (e.g. ``snmp``).

        /proc/net follows the thread-group leader, so the per-thread view is
        read instead: it follows the namespace `entered` switched to.
        """
        with entered(self):
            return Path("/proc/thread-self/net", name).read_text()

    def disable_ipv6(self, ifname: str) -> None:
        """Disable IPv6 on an interface created before the namespace default applied."""
        self.sysctl(f"net/ipv6/conf/{ifname}/disable_ipv6", 1)


def _run(argv: list[str], check: bool, input: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(argv, input=input, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise LabError(f"{argv[0]} not found: install iproute2 (apt-get install iproute2)") from exc
    if check and done.returncode != 0:
        raise LabError(
            f"command failed (exit {done.returncode}): {shlex.join(argv)}\n{done.stderr.strip()}"
        )
    return done


@contextlib.contextmanager
def entered(ns: Namespace) -> Iterator[Namespace]:
    """Move the current thread into `ns` for the duration of the block.

    Sockets opened inside stay bound to `ns` after the block ends, which is
    how captures and injectors work without helper processes.  Only the
    calling thread moves; threads it starts inherit the namespace.
    """
    with open("/proc/thread-self/ns/net", "rb") as home, open(ns.path, "rb") as target:
        _setns(target.fileno())
        try:
            yield ns
        finally:
            _setns(home.fileno())


class Lab:
    """Owns namespaces and processes; `close` removes every one of them.

    Use as a context manager.  Live labs are also closed on SIGINT/SIGTERM
    (before the previous handler runs) and at interpreter exit.
    """

    def __init__(self, prefix: str = "lfp") -> None:
        self.prefix = prefix
        self._namespaces: list[Namespace] = []
        self._processes: list[subprocess.Popen] = []
        self._on_close: list[Callable[[], object]] = []
        # Re-entrant: the SIGINT/SIGTERM handler closes labs on the main
        # thread, possibly while that thread is inside namespace() or popen().
        self._lock = threading.RLock()
        self._closed = False
        _register(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def namespaces(self) -> tuple[Namespace, ...]:
        return tuple(self._namespaces)

    def unique_name(self, role: str) -> str:
        return f"{self.prefix}-{role}-{os.getpid()}-{secrets.token_hex(3)}"

    def namespace(self, role: str) -> Namespace:
        """Create and adopt a namespace named ``<prefix>-<role>-<pid>-<rand>``."""
        if self._closed:
            raise LabError("lab is closed")
        name = self.unique_name(role)
        with self._lock:
            # Adopt before creating so a signal arriving mid-create still cleans up.
            ns = Namespace(name)
            self._namespaces.append(ns)
        Namespace.create(name)
        return ns

    def popen(self, ns: Namespace, cmd: Command, **kwargs) -> subprocess.Popen:
        """Start a long-running process in `ns`; it is killed when the lab closes."""
        proc = ns.popen(cmd, **kwargs)
        with self._lock:
            self._processes.append(proc)
        return proc

    def on_close(self, callback: Callable[[], object]) -> None:
        """Run `callback` when the lab closes, after its processes are stopped
        (e.g. to remove a daemon's scratch directory); errors are ignored."""
        with self._lock:
            self._on_close.append(callback)

    def close(self) -> None:
        """Kill owned processes, run the on_close callbacks, then delete owned namespaces. Idempotent."""
        with self._lock:
            processes, self._processes = self._processes, []
            namespaces, self._namespaces = self._namespaces, []
            callbacks, self._on_close = self._on_close, []
            self._closed = True
        for proc in processes:
            _stop(proc)
        for callback in reversed(callbacks):
            with contextlib.suppress(Exception):
                callback()
        for ns in reversed(namespaces):
            ns.delete()
        _unregister(self)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# --- process-wide safety net -------------------------------------------------

_live: dict[int, Lab] = {}
_live_lock = threading.RLock()  # re-entrant for the signal handler
_atexit_registered = False
_signals_installed = False


def _register(lab: Lab) -> None:
    with _live_lock:
        _live[id(lab)] = lab
    _install_handlers()


def _unregister(lab: Lab) -> None:
    with _live_lock:
        _live.pop(id(lab), None)


def close_all_labs() -> None:
    """Close every lab still alive in this process."""
    with _live_lock:
        labs = list(_live.values())
    for lab in labs:
        lab.close()


def _install_handlers() -> None:
    global _atexit_registered, _signals_installed
    if not _atexit_registered:
        atexit.register(close_all_labs)
        _atexit_registered = True
    # Signal handlers can only be set from the main thread; atexit still covers the rest.
    if not _signals_installed and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _chained_handler(signal.getsignal(signum)))
        _signals_installed = True


def _chained_handler(previous):
    def handler(signum, frame):
        close_all_labs()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            # Default disposition: die of the same signal, as the caller expects.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    return handler
