"""What the figures were measured on."""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def _cpu_model() -> str:
    try:
        for row in Path("/proc/cpuinfo").read_text().splitlines():
            if row.startswith("model name"):
                return row.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _hypervisor() -> str | None:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    if " hypervisor" not in flags:
        return None
    try:
        out = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True, check=False, timeout=5).stdout.strip()
        return out or "yes"
    except (OSError, subprocess.TimeoutExpired):
        return "yes"


def _clang_version() -> str | None:
    try:
        out = subprocess.run(["clang", "--version"], capture_output=True, text=True, check=False, timeout=10).stdout
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.TimeoutExpired):
        return None


_CHECKOUT = Path(__file__).resolve().parents[2]


def code_version() -> dict:
    """The commit under test, and whether the datapath/controller sources differ from it."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(_CHECKOUT), *args], capture_output=True, text=True, check=False, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        # e.g. a `git archive` export benchmarked on its own: the caller says what it is
        return {"commit": os.environ.get("LINUXFP_BENCH_COMMIT"), "export": True}
    changed = git("status", "--porcelain", "--", "bpf_modules", "templates", "linuxfp", "controller")
    return {"commit": commit, "uncommitted_changes": bool(changed)}


def machine() -> dict:
    uname = os.uname()
    return {
        "kernel": uname.release,
        "arch": uname.machine,
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "hypervisor": _hypervisor(),
        "memory_mb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20),
        "python": platform.python_version(),
        "clang": _clang_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "code": code_version(),
    }
