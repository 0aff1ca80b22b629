"""A kernel hazard of device-bound XDP programs, detected right after load.

The kernel keeps `offload->prog`, a pointer to a device-bound program's first
allocation, taken before verification. When the verifier's rewrites make the
program outgrow the pages it was given, bpf_prog_realloc() moves it and frees
the old copy without updating that pointer; unregistering the device while
the program lives (`ip link del`, deleting its namespace) then dereferences
freed memory and oopses with RTNL held, which wedges every netlink user of
the machine. The pipelines carry dead-code headroom (templates/pipeline.c.j2)
so the first allocation is already large enough; this check proves it for
every load, and a program that was moved anyway is closed at once (freeing
it goes through the live pointer, which is safe) instead of being attached.
"""
from __future__ import annotations

import os

from .btf import kernel_struct_size

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
INSN_SIZE = 8
# sizeof(struct bpf_prog) on 6.x x86_64, used when the kernel has no BTF.
_FALLBACK_PROG_HEADER = 96


def first_allocation(submitted_insns: int) -> int:
    """Bytes bpf_prog_load() allocates for a program of that many instructions
    (bpf_prog_size(), rounded to pages)."""
    header = kernel_struct_size("bpf_prog") or _FALLBACK_PROG_HEADER
    size = header + submitted_insns * INSN_SIZE
    return -(-size // PAGE_SIZE) * PAGE_SIZE


def memlock(prog_fd: int) -> int:
    """The program's allocation now, as the kernel reports it (fdinfo)."""
    with open(f"/proc/self/fdinfo/{prog_fd}") as f:
        for line in f:
            if line.startswith("memlock:"):
                return int(line.split()[1])
    raise OSError(f"no memlock in fdinfo of fd {prog_fd}")


def reallocated(prog_fd: int, submitted_insns: int) -> bool:
    """Whether the verifier moved the program out of its first allocation."""
    return memlock(prog_fd) != first_allocation(submitted_insns)
