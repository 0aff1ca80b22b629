"""Run `linuxfp run` inside a named network namespace, as a child process:
used by the tests, the differential harness, the demo and the benchmarks."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time


class ControllerFailed(RuntimeError):
    pass


class ControllerProcess:
    """Context manager: start the controller in `netns`, wait for `ready`,
    stop it with SIGTERM on exit (the controller then detaches cleanly)."""

    def __init__(self, netns: str, hook: str = "auto",
                 keep: bool = False, extra_args: tuple[str, ...] = (), ready_timeout: float = 30.0,
                 env: dict[str, str] | None = None, verbose: bool = False):
        self.netns = netns
        # the controller's own command line, and how it enters the namespace
        # (a test may enter it otherwise: argv is what runs); `verbose`: its
        # debug log too (stderr)
        self.command = [sys.executable, "-m", "controller.cli", *(("-v",) if verbose else ()), "run", "--hook", hook,
                        *(("--keep",) if keep else ()), *extra_args]
        self.argv = ["ip", "netns", "exec", netns, *self.command]
        self.ready_timeout = ready_timeout
        self.extra_env = env or {}
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.stderr_path = None

    def __enter__(self) -> "ControllerProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        import tempfile

        self._stderr = tempfile.TemporaryFile(mode="w+")
        env = {**_env(), **self.extra_env}
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     env=env, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + self.ready_timeout
        with self._changed:
            while "ready" not in self.lines:
                if self.proc.poll() is not None:
                    raise ControllerFailed(f"controller exited with {self.proc.returncode}: {self.stderr()}")
                if time.monotonic() > deadline:
                    self.stop()
                    raise ControllerFailed(f"controller not ready after {self.ready_timeout}s: {self.stderr()}")
                self._changed.wait(0.05)

    def _read(self) -> None:
        assert self.proc and self.proc.stdout
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.strip())
                self._changed.notify_all()

    @property
    def applied(self) -> int:
        """Number of event batches the controller has absorbed."""
        with self._changed:
            return sum(1 for line in self.lines if line.startswith("applied"))

    def wait_applied(self, since: int, timeout: float = 5.0) -> None:
        """Wait until the controller has absorbed a batch after the `since`-th:
        a change just made has reached it, however late its notification
        (settled() alone can return before a slow one arrives)."""
        deadline = time.monotonic() + timeout
        while self.applied <= since and time.monotonic() < deadline:
            time.sleep(0.005)

    def settled(self, quiet: float = 0.15, timeout: float = 10.0) -> None:
        """Wait until the controller has absorbed pending changes: it says
        its datapath is current and nothing new came for `quiet` seconds
        (bounded by `timeout`)."""
        deadline = time.monotonic() + timeout
        last, since = len(self.lines), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.02)
            with self._changed:
                now = len(self.lines)
                state = next((line for line in reversed(self.lines) if line in ("current", "busy")), None)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet and state == "current":
                return

    def stderr(self) -> str:
        if not hasattr(self, "_stderr"):
            return ""
        self._stderr.seek(0)
        return self._stderr.read()

    @contextlib.contextmanager
    def paused(self):
        """Stop the controller (SIGSTOP) for the body and resume it after:
        whatever the kernel sends meanwhile waits in its sockets, as behind a
        controller too slow to read them."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGCONT)    # a paused one too must see the signal
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return self.proc.returncode


def _env() -> dict[str, str]:
    """This checkout first on the path, so the code under test is what runs."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def linuxfp_cli(netns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a one-shot `linuxfp` command inside `netns`."""
    return subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-m", "controller.cli", *args],
                          capture_output=True, text=True, check=check, env=_env())


def layout_of(netns: str):
    from linuxfp.datapath import bpffs_root
    from linuxfp.lab.netns import Namespace, entered
    from linuxfp.state.netlink import netns_cookie

    from .namespace import NamespaceLayout

    with entered(Namespace(netns)):
        return NamespaceLayout(bpffs_root(), netns_cookie())


def linuxfp_stats(netns: str) -> dict:
    """What `linuxfp -j stats` prints inside `netns`, read by this process
    with the command's own function: labs and tests read stats after every
    step, and a Python start per reading cost them more than the steps."""
    import json

    from linuxfp.lab.netns import Namespace, entered

    from .views import stats

    with entered(Namespace(netns)):      # where the command runs: its interfaces are read there
        return json.loads(json.dumps(stats(layout_of(netns))))


def wait_lease_current(netns: str, timeout: float = 5.0) -> bool:
    """Wait until the controller in `netns` holds the lease and has re-read
    every watched change (what `linuxfp -j status` shows as lease
    watched_changes == acknowledged): e.g. after a conntrack dump, which the
    filter node's watch counts while rules match ipsets. False on timeout."""
    from linuxfp.lab.netns import Namespace, entered

    from .views import lease_acts, lease_state

    layout = layout_of(netns)
    deadline = time.monotonic() + timeout
    while True:
        with entered(Namespace(netns)):      # the address generation is the namespace's
            state = lease_state(layout)
        if lease_acts(state):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def accelerator(hook: str = "auto"):
    """An `accelerate(topology)` factory for the differential harness: the
    controller running in the topology's DUT."""
    @contextlib.contextmanager
    def accelerate(topology):
        with ControllerProcess(topology.dut.name, hook=hook) as controller:
            yield controller

    return accelerate
