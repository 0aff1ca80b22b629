"""C source → BPF object bytes: a shipped precompiled object (shipped.py),
else one cached on disk by content hash, else clang.

The cache's hash covers the rendered source, every node module it can
include, the compiler flags and the compiler binary's identity (path, size,
mtime), so a cache hit never runs clang — not even to ask its version. A
shipped object is named by the same inputs without the compiler (its source
key): a node with no compiler can compute it."""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from linuxfp.resources import modules_dir

from . import shipped

CFLAGS = ("-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-Wno-unused-function")
_ARCH_INCLUDE = "/usr/include/x86_64-linux-gnu"


class CompileError(Exception):
    """clang refused the source; the message carries its diagnostics."""


class ToolMissing(Exception):
    """A build tool is not installed; the message names the package."""


PRECOMPILED, CACHE, COMPILED = "precompiled", "cache", "compiled"


@dataclass(frozen=True)
class CompiledObject:
    digest: str       # names the object: its cache key, or for a shipped one its source key
    data: bytes
    origin: str       # PRECOMPILED (shipped in the package), CACHE or COMPILED (clang ran now)

    @property
    def cached(self) -> bool:
        """True when no compiler ran."""
        return self.origin != COMPILED


def default_cache_dir() -> Path:
    env = os.environ.get("LINUXFP_CACHE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/linuxfp")
    return Path.home() / ".cache" / "linuxfp"


def find_clang() -> str:
    for name in ("clang", "clang-14", "clang-15", "clang-16"):
        path = shutil.which(name)
        if path:
            return path
    raise ToolMissing("clang not found: install the Debian package 'clang' (scripts/install-deps.sh)")


def _include_dirs() -> list[str]:
    dirs = [str(modules_dir())]
    if os.path.isdir(_ARCH_INCLUDE):
        dirs.append(_ARCH_INCLUDE)
    return dirs


@functools.cache
def maps_layout_digest() -> str:
    """Names the layout of every map the programs share: the headers that
    declare them. Pins made by code with another digest are never reused (an
    upgrade whose layouts differ makes fresh maps instead of misreading old
    ones); a header changed in a comment only costs a reload on upgrade.
    The counter catalogue counts too: it sizes each interface's counter
    array, which the pinned lfp_counters accepts only in the size it was
    made for (external nodes, LINUXFP_NODES, add counters)."""
    from .render import counters_define

    h = hashlib.sha256()
    for header in sorted(modules_dir().glob("*.h")):
        h.update(header.name.encode())
        h.update(header.read_bytes())
    h.update(counters_define().encode())
    return h.hexdigest()[:12]


def _hash_sources(source: str, headers: tuple[Path, ...]):
    """sha256 over the source and every header it can include: bpf_modules/
    and `headers` (node headers outside it)."""
    h = hashlib.sha256()
    h.update(source.encode())
    for header in sorted(modules_dir().glob("*.h")) + sorted(headers):
        h.update(header.name.encode())
        h.update(header.read_bytes())
    return h


def source_digest(source: str, clang: str, headers: tuple[Path, ...] = ()) -> str:
    """The cache key: the sources, the compiler's identity and the flags."""
    h = _hash_sources(source, headers)
    st = os.stat(clang)
    h.update(f"{os.path.realpath(clang)}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(" ".join(CFLAGS).encode())
    return h.hexdigest()


def source_key(source: str, headers: tuple[Path, ...] = (), purpose: str = shipped.PROGRAM) -> str:
    """The key of a shipped object: the sources and the flags, not the
    compiler (a node without one computes it). `purpose` tells apart objects
    built differently from the same source (a device-bound pipeline's
    final object carries headroom its first render does not)."""
    h = _hash_sources(source, tuple(Path(p) for p in headers))
    h.update(f"\0{' '.join(CFLAGS)}\0{purpose}\0format {shipped.FORMAT}".encode())
    return h.hexdigest()


def compile_source(source: str, cache_dir: Path | None = None, headers: tuple[Path, ...] = ()) -> CompiledObject:
    """The object `source` builds into: shipped, cached or compiled now."""
    key = source_key(source, headers)
    data = shipped.find(shipped.PROGRAM, key)
    if data is not None:
        return CompiledObject(key, data, PRECOMPILED)
    return compile_cached(source, cache_dir, headers)


def compile_cached(source: str, cache_dir: Path | None = None, headers: tuple[Path, ...] = ()) -> CompiledObject:
    """The object `source` builds into, from the on-disk cache or clang."""
    if not os.path.exists("/usr/include/bpf/bpf_helpers.h"):
        raise ToolMissing("bpf/bpf_helpers.h not found: install the Debian package 'libbpf-dev'")
    clang = find_clang()
    digest = source_digest(source, clang, tuple(Path(h) for h in headers))
    cache_dir = cache_dir or default_cache_dir()
    cached_path = cache_dir / f"{digest}.o"
    try:
        return CompiledObject(digest, cached_path.read_bytes(), CACHE)
    except FileNotFoundError:
        pass

    with tempfile.TemporaryDirectory(prefix="linuxfp-cc-") as tmp:
        src = Path(tmp) / "pipeline.c"
        obj = Path(tmp) / "pipeline.o"
        src.write_text(source)
        cmd = [clang, *CFLAGS]
        for inc in _include_dirs():
            cmd += ["-I", inc]
        cmd += ["-c", str(src), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"clang failed ({proc.returncode}):\n{proc.stderr.strip()}")
        data = obj.read_bytes()

    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(dir=cache_dir, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp_path, cached_path)   # atomic: concurrent controllers never read half a file
    return CompiledObject(digest, data, COMPILED)
