"""The precompiled objects shipped inside the package (linuxfp/shapes/):
where they live, the manifest that names each one by its source key, and
reading one back. `linuxfp shapes build` (precompile.py) writes them.

A manifest entry is used only when its key is the key of the current
sources and its file still hashes to its digest: an object built from other
sources, or a file replaced while a build was writing, is never loaded (the
lookup falls through to the cache and clang)."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

# What an entry is the final object of: a pipeline shape (build(), after
# the headroom pass) or a C program compiled as it is (compile_source()).
SHAPE, PROGRAM = "shape", "program"
# Changes when the manifest or the key's make-up changes: older directories
# then hold no valid key.
FORMAT = 1
MANIFEST = "manifest.json"
DIR_ENV = "LINUXFP_SHAPES_DIR"


@dataclass(frozen=True)
class ShippedObject:
    kind: str         # SHAPE or PROGRAM
    name: str         # the shape ("xdp:router+transmit") or the program's file ("controller.c")
    hook: str         # the shape's hook; "" for a program
    key: str          # source key (compile.source_key) it was built from
    digest: str       # sha256 of the file's bytes
    size: int
    file: str         # beside the manifest


@dataclass(frozen=True)
class Manifest:
    objects: tuple[ShippedObject, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    def entry(self, kind: str, key: str) -> ShippedObject | None:
        return next((o for o in self.objects if o.kind == kind and o.key == key), None)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "objects": [asdict(o) for o in self.objects]}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        if data.get("format") != FORMAT:
            return cls()
        return cls(tuple(ShippedObject(**o) for o in data.get("objects", ())))


def shipped_dir() -> Path:
    """linuxfp/shapes/ in the package (or $LINUXFP_SHAPES_DIR)."""
    override = os.environ.get(DIR_ENV)
    return Path(override) if override else Path(__file__).resolve().parents[1] / "shapes"


def read_manifest(directory: Path | None = None) -> Manifest:
    """The directory's manifest; empty when there is none (nothing shipped)
    or it is unreadable."""
    try:
        return Manifest.from_json((directory or shipped_dir()).joinpath(MANIFEST).read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError, TypeError, KeyError):
        return Manifest()


def object_bytes(entry: ShippedObject, directory: Path | None = None) -> bytes | None:
    """The entry's object, or None when its file is missing or is not the
    one the manifest names."""
    try:
        data = (directory or shipped_dir()).joinpath(entry.file).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return data if hashlib.sha256(data).hexdigest() == entry.digest else None


def find(kind: str, key: str, directory: Path | None = None) -> bytes | None:
    """The shipped object of `kind` built from the sources named by `key`."""
    directory = directory or shipped_dir()
    entry = read_manifest(directory).entry(kind, key)
    return object_bytes(entry, directory) if entry is not None else None


def describe(kind: str, name: str, hook: str, key: str, data: bytes, file: str) -> ShippedObject:
    return ShippedObject(kind, name, hook, key, hashlib.sha256(data).hexdigest(), len(data), file)


def write_file(directory: Path, name: str, data: bytes) -> None:
    """Atomically, so a reader sees the old file or the new one."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)      # readable by whoever runs the controller
    os.replace(tmp, directory / name)
