"""LinuxFP's version, for `linuxfp --version`, `status -j` and the metrics."""
from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

# pyproject.toml of a checkout: this file is controller/version.py in it.
_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
UNKNOWN = "0+unknown"


@cache
def version() -> str:
    """The version of the code that is running.

    Run from a checkout, that is its pyproject.toml's: the installed
    distribution's metadata may belong to another copy (the tests put the
    checkout first on PYTHONPATH over whatever is installed) or predate a
    version bump. Installed from a wheel there is no pyproject.toml beside
    the code, and the package metadata says it."""
    try:
        with open(_PYPROJECT, "rb") as f:
            project = tomllib.load(f).get("project", {})
        if project.get("name") == "linuxfp" and project.get("version"):
            return str(project["version"])
    except (OSError, tomllib.TOMLDecodeError):
        pass
    # (imported here: importlib.metadata costs every command ~25 ms to import,
    # and a checkout, where the tests and most runs are, never needs it)
    from importlib import metadata

    try:
        return metadata.version("linuxfp")
    except metadata.PackageNotFoundError:
        return UNKNOWN
