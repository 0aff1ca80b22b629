"""Host prerequisites, turned into errors that name the package or setting to fix."""

from __future__ import annotations

import errno
import os

from .errors import DependencyError

VMLINUX_BTF = "/sys/kernel/btf/vmlinux"


CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
CAP_BPF = 39


def effective_capabilities() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def require_root() -> None:
    """Raise unless we hold what loading and attaching need (root has it all)."""
    capabilities = effective_capabilities()
    can_load = capabilities & (1 << CAP_BPF | 1 << CAP_SYS_ADMIN)
    can_attach = capabilities & (1 << CAP_NET_ADMIN)
    if not (can_load and can_attach):
        raise DependencyError(
            "LinuxFP must run as root: loading BPF programs and attaching them to "
            "interfaces needs CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_ADMIN"
        )


def require_vmlinux_btf() -> None:
    if not os.path.exists(VMLINUX_BTF):
        raise DependencyError(
            f"{VMLINUX_BTF} is missing: the kernel must be built with "
            "CONFIG_DEBUG_INFO_BTF=y (Debian's stock kernels are)"
        )


def check_environment() -> None:
    """Fail early, with a fix named, if this host cannot run the datapath."""
    from .libbpf import lib
    from .pins import bpffs_root

    lib()
    require_root()
    require_vmlinux_btf()
    bpffs_root()


def explain_load_failure(code: int, libbpf_text: str) -> None:
    """Raise DependencyError when a failed load is the host's fault, not the program's."""
    if code == errno.EPERM:
        require_root()
    if "vmlinux BTF" in libbpf_text or "kernel BTF" in libbpf_text:
        require_vmlinux_btf()
