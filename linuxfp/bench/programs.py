"""The benchmark's own programs: BPF ones compiled like LinuxFP's (same clang
flags and on-disk cache, through linuxfp.synth.compile_source) and loaded
with the project's libbpf binding, and small C tools (tools/*.c) built with
the host's clang."""
from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from pathlib import Path

from linuxfp.datapath import BpfObject
from linuxfp.synth import compile_source
from linuxfp.synth.compile import ToolMissing, default_cache_dir, find_clang

BPF_DIR = Path(__file__).resolve().parent / "bpf"
TOOLS_DIR = Path(__file__).resolve().parent / "tools"
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


def build_c_tool(name: str, what: str) -> Path:
    """Compile tools/<name>.c once per source version; cached next to the BPF
    objects. `what` names the tool in errors."""
    source_path = TOOLS_DIR / f"{name}.c"
    clang = find_clang()
    digest = hashlib.sha256(source_path.read_bytes() + clang.encode()).hexdigest()[:16]
    binary = default_cache_dir() / f"{name}-{digest}"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".tmp")
    done = subprocess.run([clang, "-O2", "-Wall", "-o", str(partial), str(source_path), "-lm"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        if "stdio.h" in done.stderr or "No such file" in done.stderr:
            raise ToolMissing(f"cannot build {what}: install the Debian package 'libc6-dev'")
        raise RuntimeError(f"cannot build {what}:\n{done.stderr.strip()}")
    partial.replace(binary)
    return binary
