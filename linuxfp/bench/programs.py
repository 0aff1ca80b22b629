"""The benchmark's own BPF programs: compiled like LinuxFP's (same clang
flags and on-disk cache, through linuxfp.synth.compile_source) and loaded
with the project's libbpf binding."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from linuxfp.datapath import BpfObject
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
