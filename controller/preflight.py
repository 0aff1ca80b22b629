"""Checks that turn a missing privilege or dependency into one actionable line."""
from __future__ import annotations

import os
import shutil


class PreflightError(Exception):
    """Something outside LinuxFP must be fixed first; the message says what."""


def check_runtime(need_compiler: bool = True) -> None:
    if os.geteuid() != 0:
        raise PreflightError("must run as root (needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN)")
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        raise PreflightError(
            "the kernel has no BTF (/sys/kernel/btf/vmlinux missing): use a kernel built with CONFIG_DEBUG_INFO_BTF=y")
    try:
        from linuxfp.datapath import libbpf
        libbpf.lib()
    except Exception as e:   # DependencyError names the package
        raise PreflightError(str(e)) from e
    if need_compiler:
        if not any(shutil.which(c) for c in ("clang", "clang-14", "clang-15", "clang-16")):
            raise PreflightError("clang not found: install the Debian package 'clang' (scripts/install-deps.sh)")
        if not os.path.exists("/usr/include/bpf/bpf_helpers.h"):
            raise PreflightError("libbpf headers not found: install the Debian package 'libbpf-dev'")
        if not os.path.exists("/usr/include/linux/bpf.h"):
            raise PreflightError("kernel uapi headers not found: install the Debian package 'linux-libc-dev'")
