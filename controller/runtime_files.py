"""The controller's files under /run: installed state, response times, the
interfaces left on the kernel path, pid."""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time

from .namespace import NamespaceLayout
from .reconcile import InstalledState


def write_atomic(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def load_installed(layout: NamespaceLayout) -> InstalledState | None:
    try:
        with open(layout.state_file) as f:
            return InstalledState.from_json(f.read())
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError):
        return InstalledState()


def save_installed(layout: NamespaceLayout, state: InstalledState) -> None:
    write_atomic(layout.state_file, state.to_json())


def load_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


class AlreadyRunning(Exception):
    def __init__(self, pid: int | None):
        self.pid = pid
        super().__init__(f"another `linuxfp run` (pid {pid if pid and pid > 0 else '?'}) already accelerates this "
                         "namespace; stop it first (or `linuxfp detach`)")


class ControllerLock:
    """The pid file, held with flock for the controller's lifetime: the lock,
    not the pid (which a crashed controller's successor may reuse), says
    whether a controller runs."""

    def __init__(self, layout: NamespaceLayout) -> None:
        self.path = layout.pid_file
        # Another process may hold the lock for an instant (a status probe, a
        # reclaim looking at this namespace): only a lock held for long is a
        # running controller.
        fd = lock_pid_file(layout, wait=1.0)
        if fd is None:
            raise AlreadyRunning(_read_pid(self.path))
        self.fd = fd
        os.ftruncate(self.fd, 0)
        # with the pid namespace that numbers it: a controller in a container
        # of its own may be pid 1 there, which is another process here
        os.write(self.fd, f"{os.getpid()} {_pid_namespace('self')}\n".encode())

    def release(self, remove: bool = True) -> None:
        """Drop the lock; `remove` also deletes the pid file (and the run
        directory if nothing else is in it)."""
        if self.fd < 0:
            return
        if remove:
            # Only the file this lock holds: once it is unlinked (stopping
            # removes the run files first) a waiting controller may already
            # hold the next one at this path.
            try:
                held, current = os.fstat(self.fd), os.stat(self.path)
                if (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino):
                    os.unlink(self.path)
            except FileNotFoundError:
                pass
        os.close(self.fd)     # drops the lock
        self.fd = -1
        if remove:
            try:
                os.rmdir(os.path.dirname(self.path))
            except OSError:
                pass          # other runtime files (a kept datapath) remain


def _pid_namespace(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def _read_pid(path: str) -> int | None:
    """The controller's pid as this process's pid namespace numbers it
    (None: none recorded; -1: one this namespace cannot name)."""
    try:
        with open(path) as f:
            fields = f.read().split()
        pid = int(fields[0])
        namespace = int(fields[1]) if len(fields) > 1 else None    # (older versions wrote the pid alone)
    except (FileNotFoundError, ValueError, IndexError):
        return None
    if namespace is None or namespace == _pid_namespace("self"):
        return pid
    return _named_here(pid, namespace)


def _named_here(pid: int, namespace: int) -> int:
    """The process numbered `pid` in pid namespace `namespace`, by this
    namespace's number (NSpid's last is the number in its own); -1 when no
    process in view is it (an outer or a sibling namespace's)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or _pid_namespace(entry.name) != namespace:
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                numbers = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
        except OSError:
            continue
        if numbers and int(numbers[-1]) == pid:
            return int(entry.name)
    return -1


def lock_held(layout: NamespaceLayout) -> bool:
    """Whether a controller (or a reclaim, for an instant) holds the lock."""
    try:
        fd = os.open(layout.pid_file, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def running_controller(layout: NamespaceLayout) -> int | None:
    """Pid of the live controller of this namespace, if one holds the lock,
    as this process numbers it (-1: one it cannot name)."""
    if not lock_held(layout):
        return None
    return _read_pid(layout.pid_file) or -1


def remove_run_dir(layout: NamespaceLayout) -> None:
    for path in (layout.state_file, layout.response_file, layout.windows_file, layout.kernel_path_file,
                 layout.hooks_file, layout.origins_file, layout.upkeep_file, layout.published_file,
                 layout.pid_file):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    try:
        os.rmdir(layout.run_dir)
    except OSError:
        pass


def lock_pid_file(layout: NamespaceLayout, wait: float = 0.0) -> int | None:
    """The namespace's pid file, open and exclusively locked; None if another
    process held the lock for `wait` seconds. Whoever holds it may unlink
    the file before letting go (a controller stopping, a reclaim, `linuxfp
    detach`): a lock won on the unlinked file locks nothing anyone sees, so
    it is taken again on the file now at that path."""
    deadline = time.monotonic() + wait
    while True:
        os.makedirs(layout.run_dir, exist_ok=True)
        try:
            fd = os.open(layout.pid_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:      # the run directory went meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            return None
        try:
            current = os.stat(layout.pid_file)
        except FileNotFoundError:
            current = None
        held = os.fstat(fd)
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)


class ReclaimLock:
    """The pid file of a namespace held by someone reclaiming its pins, so
    that no controller can start there meanwhile; None if one runs."""

    @staticmethod
    def take(layout: NamespaceLayout, wait: float = 0.0) -> int | None:
        """`wait` seconds for another holder to let go (a status probe, a
        reclaim: they hold it for an instant)."""
        return lock_pid_file(layout, wait)


