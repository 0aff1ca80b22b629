"""systemd: the units verify (`systemd-analyze verify` works on unit files
without systemd as PID 1), `linuxfp systemd install` is idempotent, the
sd_notify client speaks the protocol, and a real controller sends READY=1
once its datapath is attached — also with only the unit's capabilities."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from controller.launcher import ControllerProcess, _env, linuxfp_cli
from controller.sdnotify import Notifier
from linuxfp.lab import inject
from linuxfp.lab.frames import udp_frame
from linuxfp.resources import systemd_units_dir

UNITS = ("linuxfp.service", "linuxfp@.service")


def install(prefix) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.cli", "systemd", "install", "--prefix", str(prefix)],
                          capture_output=True, text=True, env=_env())


def unit_settings(path) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in open(path).read().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, val = line.partition("=")
            settings.setdefault(key, []).append(val)
    return settings


def test_units_install_idempotently_and_verify(tmp_path):
    done = install(tmp_path)
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()[:2]] == ["wrote", "wrote"]
    assert "systemctl daemon-reload && systemctl enable --now linuxfp.service" in done.stdout
    again = install(tmp_path)
    assert [line.split()[0] for line in again.stdout.splitlines()[:2]] == ["unchanged", "unchanged"]
    (tmp_path / "linuxfp.service").write_text("[Service]\nExecStart=/bin/true\n")
    assert install(tmp_path).stdout.splitlines()[0] == f"updated {tmp_path / 'linuxfp.service'}"

    for name in UNITS:
        s = unit_settings(tmp_path / name)
        exec_start = s["ExecStart"][0].split()
        # the installed command, not the shipped placeholder
        assert os.path.isabs(exec_start[0]) and os.access(exec_start[0], os.X_OK)
        assert exec_start[1:] == ["run", "--keep", "$LINUXFP_OPTIONS"]
        assert s["Type"] == ["notify"] and s["Restart"] == ["always"]
        assert oct(os.stat(tmp_path / name).st_mode & 0o777) == "0o644"
    assert unit_settings(tmp_path / "linuxfp@.service")["NetworkNamespacePath"] == ["/run/netns/%i"]

    # A template verifies as an instance; any warning (an unknown key, a
    # missing binary) fails the test, not only errors.
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "linuxfp.service"),
                             str(tmp_path / "linuxfp@lfp-t-ns.service")], capture_output=True, text=True)
    assert verify.returncode == 0 and not verify.stdout.strip() and not verify.stderr.strip(), verify


def test_verify_catches_a_broken_unit(tmp_path):
    """The check above can fail: systemd-analyze does read these files."""
    broken = tmp_path / "linuxfp.service"
    broken.write_text((systemd_units_dir() / "linuxfp.service").read_text()
                      .replace("ProtectSystem=strict", "ProtectSytem=strict"))
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", str(broken)], capture_output=True, text=True)
    assert "Unknown key 'ProtectSytem'" in verify.stderr or verify.returncode != 0


def test_install_says_what_to_do_when_it_cannot_write(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = install(blocker / "units")        # a directory under a regular file
    assert done.returncode == 1 and "cannot write" in done.stderr and "--prefix" in done.stderr


# -- sd_notify ---------------------------------------------------------------

def _receiver(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(5)
    return sock


@pytest.mark.parametrize("abstract", [False, True])
def test_notifier_sends_datagrams(tmp_path, abstract):
    name = f"@lfp-t-notify-{os.getpid()}" if abstract else str(tmp_path / "notify")
    receiver = _receiver("\0" + name[1:] if abstract else name)
    environ = {"NOTIFY_SOCKET": name}
    notifier = Notifier(environ)
    try:
        assert "NOTIFY_SOCKET" not in environ          # children do not inherit it
        assert notifier.ready("current")
        assert receiver.recv(4096) == b"READY=1\nSTATUS=current"
        assert notifier.status("busy")
        assert receiver.recv(4096) == b"STATUS=busy"
        assert notifier.stopping()
        assert receiver.recv(4096) == b"STOPPING=1\nSTATUS=stopping"
    finally:
        notifier.close()
        receiver.close()


def test_notifier_without_systemd_does_nothing():
    assert not Notifier({}).ready("current")
    assert not Notifier({"NOTIFY_SOCKET": "vsock:2:1234"}).ready("current")
    assert not Notifier({"NOTIFY_SOCKET": "/nonexistent/notify"}).status("busy")


class NotifyListener:
    """systemd's side: records each datagram with whether the DUT's
    to-src had a program attached when it arrived."""

    def __init__(self, path, router) -> None:
        self.sock = _receiver(str(path))
        self.sock.settimeout(0.2)
        self.router = router
        self.messages: list[tuple[str, bool]] = []
        self._done = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _attached(self) -> bool:
        """An XDP program on the DUT's to-src (the tests run --hook xdp)."""
        links = json.loads(self.router.dut.run(["ip", "-j", "link", "show", "to-src"]).stdout)
        return bool(links[0].get("xdp"))

    def _run(self) -> None:
        while not self._done:
            try:
                data = self.sock.recv(4096).decode()
            except socket.timeout:
                continue
            self.messages.append((data, "READY=1" in data.split("\n") and self._attached()))

    def fields(self) -> list[str]:
        return [f for data, _ in self.messages for f in data.split("\n")]

    def wait_for(self, field: str, last: bool = False, timeout: float = 10) -> None:
        """Until `field` has been received (`last`: is the latest one)."""
        def seen() -> bool:
            fields = self.fields()
            return bool(fields) and fields[-1] == field if last else field in fields
        deadline = time.monotonic() + timeout
        while not seen() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert seen(), self.messages

    def close(self) -> None:
        self._done = True
        self.thread.join()
        self.sock.close()


@pytest.mark.netns
def test_ready_is_sent_once_the_datapath_is_attached(router_topology, tmp_path):
    r = router_topology
    listener = NotifyListener(tmp_path / "notify", r)
    try:
        with ControllerProcess(r.dut.name, hook="xdp", env={"NOTIFY_SOCKET": str(tmp_path / "notify")}) as c:
            listener.wait_for("READY=1")
            ready = [attached for data, attached in listener.messages if "READY=1" in data.split("\n")]
            assert ready == [True]        # once, and with the program in place
            assert listener.messages[0][0].startswith("READY=1")   # nothing before it
            r.dut.run(["ip", "address", "add", "198.18.9.1/32", "dev", "lo"])
            c.settled()
            listener.wait_for("STATUS=busy")
            listener.wait_for("STATUS=current", last=True)
        listener.wait_for("STOPPING=1")
    finally:
        listener.close()


@pytest.mark.netns
def test_controller_runs_with_only_the_units_privileges(router_topology, tmp_path, ip_forw_datagrams):
    """As linuxfp.service / linuxfp@.service run it: the namespace joined
    without a private mount namespace (NetworkNamespacePath=, not ip netns
    exec), only CapabilityBoundingSet=, /proc/kallsyms unreadable and /sys,
    /proc/sys read-only (ProtectKernelTunables=; bpffs stays writable as
    ReadWritePaths= leaves it), READY=1 over NOTIFY_SOCKET."""
    r = router_topology
    unit = unit_settings(systemd_units_dir() / "linuxfp@.service")
    caps = unit["CapabilityBoundingSet"][0].split()
    assert caps == unit["AmbientCapabilities"][0].split()
    wanted = ",".join("+" + re.sub("^CAP_", "", cap).lower() for cap in caps)
    hidden = tmp_path / "inaccessible"
    hidden.write_text("")
    hidden.chmod(0)
    sandbox = (f"mount --bind {hidden} /proc/kallsyms && mount --bind /proc/sys /proc/sys && "
               "mount -o remount,bind,ro /proc/sys && mount -o remount,bind,ro /sys && exec \"$@\"")
    listener = NotifyListener(tmp_path / "notify", r)
    c = ControllerProcess(r.dut.name, hook="xdp", keep=True, env={"NOTIFY_SOCKET": str(tmp_path / "notify")})
    # A slave mount namespace: the read-only remounts never reach the host.
    c.argv = ["nsenter", f"--net=/run/netns/{r.dut.name}", "unshare", "--mount", "--propagation", "slave",
              "sh", "-c", sandbox, "sandbox",
              "setpriv", f"--bounding-set=-all,{wanted}", f"--inh-caps=-all,{wanted}", f"--ambient-caps=-all,{wanted}",
              *c.command]
    try:
        with c:
            listener.wait_for("READY=1")
            assert [a for data, a in listener.messages if "READY=1" in data.split("\n")] == [True]
            before = ip_forw_datagrams(r.dut)
            frame = udp_frame(r.src_if.mac, r.dut_left.mac, str(r.src_if.ip), "198.19.3.7", size=64)
            inject(r.src, r.src_if.name, [frame] * 100)
            assert ip_forw_datagrams(r.dut) - before < 5      # the fast path forwarded them
            # its pins are the host's: status from outside the sandbox sees them
            status = json.loads(linuxfp_cli(r.dut.name, "-j", "status").stdout)
            assert {i["ifname"]: i["state"] for i in status["interfaces"]}["to-src"] == "active"
        assert c.proc.returncode == 0, c.stderr()
        assert "PrivateBpffsWarning" not in c.stderr() and "private to this mount namespace" not in c.stderr()
    finally:
        listener.close()
        linuxfp_cli(r.dut.name, "detach", check=False)      # --keep left it attached
