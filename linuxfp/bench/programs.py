"""The benchmark's own BPF programs: compiled like LinuxFP's (same clang
flags and on-disk cache, through linuxfp.synth.compile_source) and loaded
with the project's libbpf binding."""
from __future__ import annotations

import ctypes
import errno
from collections.abc import Mapping
from pathlib import Path

from linuxfp.datapath import BpfError, BpfObject
from linuxfp.datapath.fds import OwnedFd
from linuxfp.datapath.libbpf import errno_of, lib
from linuxfp.synth import compile_source

BPF_DIR = Path(__file__).resolve().parent / "bpf"
_COMMON_HEADER = "bench_common.h"


def program_source(name: str, defines: Mapping[str, int] | None = None) -> str:
    """One self-contained C unit: defines, the shared header, then bpf/<name>.c."""
    parts = [f"#define {key} {value}\n" for key, value in sorted((defines or {}).items())]
    parts.append((BPF_DIR / _COMMON_HEADER).read_text())
    parts.append(f'#line 1 "{name}.c"\n')
    parts.append((BPF_DIR / f"{name}.c").read_text())
    return "".join(parts)


def compiled(name: str, defines: Mapping[str, int] | None = None, source: str | None = None) -> bytes:
    return compile_source(source if source is not None else program_source(name, defines)).data


def load(
    name: str,
    rodata: Mapping[str, int | bytes] | None = None,
    defines: Mapping[str, int] | None = None,
    source: str | None = None,
) -> BpfObject:
    """Compile (cached), open, set constants and load; the caller closes the object."""
    obj = BpfObject.open(compiled(name, defines, source), name=f"bench_{name}")
    try:
        if rodata:
            obj.set_rodata(rodata)
        obj.load()
    except BaseException:
        obj.close()
        raise
    return obj


def mac_bytes(mac: str) -> bytes:
    return bytes(int(part, 16) for part in mac.split(":"))


# libbpf's bpf_raw_tracepoint_open(name, prog_fd), declared here rather than in
# the shared binding's table because only the benchmark attaches tracepoints.
_raw_tp_open = None


def attach_raw_tracepoint(prog_fd: int, tracepoint: str) -> OwnedFd:
    """Attach a raw tracepoint program; closing the returned fd detaches it."""
    global _raw_tp_open
    if _raw_tp_open is None:
        prototype = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_int, use_errno=True)
        _raw_tp_open = prototype(("bpf_raw_tracepoint_open", lib()))
    fd = _raw_tp_open(tracepoint.encode(), prog_fd)
    if fd < 0:
        code = errno_of(fd) or errno.EINVAL
        raise BpfError(f"attach raw tracepoint {tracepoint}", code)
    return OwnedFd(fd)
