"""`linuxfp shapes build`: compiles every shape of the catalog
(linuxfp.graph.catalog) and the controller's own programs into the shipped
directory, so that a node without clang never needs it. Idempotent: an
object whose source key is unchanged is kept; stale ones are replaced, and
files no entry names are removed. Compiling goes through the on-disk cache,
so the cache holds the same objects afterwards."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from linuxfp.graph.catalog import builtin_nodes, possible_shapes
from linuxfp.graph.nodes import registered
from linuxfp.graph.shape import Shape

from . import compile_shape, controller_source, shape_key, shipped
from .compile import compile_cached, source_key


@dataclass(frozen=True)
class Wanted:
    """One object the shipped set must hold, and how to build it."""

    kind: str
    name: str
    hook: str
    key: str
    file: str
    shape: Shape | None = None     # a pipeline shape; else `source` is compiled as it is
    source: str = ""


@dataclass(frozen=True)
class BuildResult:
    manifest: shipped.Manifest
    built: tuple[str, ...]          # names compiled (or taken from the cache) now
    kept: tuple[str, ...]           # names already up to date
    removed: tuple[str, ...]        # files no entry names any more
    seconds: float


class ExternalNodes(Exception):
    """Nodes from LINUXFP_NODES are registered: their counters would be in
    every shipped object, which then matches no run without them."""


def wanted() -> tuple[Wanted, ...]:
    """Every object to ship: one per catalog shape, controller.c, and each
    built-in node's kernel-side watch."""
    if len(registered()) != len(builtin_nodes()):
        raise ExternalNodes("unset LINUXFP_NODES: the shipped objects are built for the built-in nodes only")
    out = [Wanted(shipped.SHAPE, str(s), s.hook, shape_key(s), f"{s.hook}-{'+'.join(s.nodes)}.o", shape=s)
           for s in possible_shapes()]
    programs = [("controller.c", "controller.o", controller_source())]
    programs += [(n.watch.name, f"watch-{n.name}.o", n.watch.read_text()) for n in builtin_nodes() if n.watch]
    out += [Wanted(shipped.PROGRAM, name, "", source_key(source), file, source=source)
            for name, file, source in programs]
    return tuple(out)


def build_shipped(directory: Path | None = None, cache_dir: Path | None = None) -> BuildResult:
    """Bring `directory` (default: the package's) up to date with the
    current sources."""
    started = time.monotonic()
    directory = directory or shipped.shipped_dir()
    current = shipped.read_manifest(directory)
    entries, built, kept = [], [], []
    for item in wanted():
        entry = current.entry(item.kind, item.key)
        if entry is not None and entry.file == item.file and shipped.object_bytes(entry, directory) is not None:
            entries.append(entry)
            kept.append(item.name)
            continue
        data = (compile_shape(item.shape, cache_dir) if item.shape is not None
                else compile_cached(item.source, cache_dir)).data
        shipped.write_file(directory, item.file, data)
        entries.append(shipped.describe(item.kind, item.name, item.hook, item.key, data, item.file))
        built.append(item.name)
    manifest = shipped.Manifest(tuple(entries))
    if built or manifest != current:
        shipped.write_file(directory, shipped.MANIFEST, manifest.to_json().encode())
    named = {e.file for e in entries} | {shipped.MANIFEST}
    removed = tuple(sorted(p.name for p in directory.iterdir() if p.is_file() and p.name not in named
                           and (p.suffix == ".o" or p.name.endswith(".tmp"))))
    for name in removed:
        (directory / name).unlink(missing_ok=True)
    return BuildResult(manifest, tuple(built), tuple(kept), removed, time.monotonic() - started)


@dataclass(frozen=True)
class Listed:
    """One object the shipped set should hold, and whether it does."""

    kind: str
    name: str
    hook: str
    state: str       # "current", "stale" (built from other sources) or "missing"
    size: int        # bytes of the shipped file (0 when missing)


def inventory(directory: Path | None = None) -> tuple[Listed, ...]:
    """What `linuxfp shapes list` shows: every wanted object against the
    directory's manifest."""
    directory = directory or shipped.shipped_dir()
    manifest = shipped.read_manifest(directory)
    out = []
    for item in wanted():
        entry = manifest.entry(item.kind, item.key)
        if entry is not None and shipped.object_bytes(entry, directory) is not None:
            out.append(Listed(item.kind, item.name, item.hook, "current", entry.size))
            continue
        old = next((o for o in manifest.objects if o.kind == item.kind and o.name == item.name), None)
        out.append(Listed(item.kind, item.name, item.hook, "stale" if old else "missing", old.size if old else 0))
    return tuple(out)


def shipped_set_current() -> bool:
    """Whether every object the built-in nodes can need is shipped from the
    current sources: then `linuxfp run` needs no compiler (one may still be
    needed for nodes LINUXFP_NODES adds)."""
    try:
        return all(o.state == "current" for o in inventory())
    except ExternalNodes:
        return False
