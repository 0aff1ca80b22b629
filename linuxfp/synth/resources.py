"""Where the C modules and templates live, installed or in a checkout."""
from __future__ import annotations

import importlib.resources
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _package_dir(package: str, checkout_dir: str) -> Path:
    try:
        path = Path(str(importlib.resources.files(package)))
        if path.is_dir() and any(path.iterdir()):
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    return _REPO_ROOT / checkout_dir


def modules_dir() -> Path:
    """Directory of the header-only node modules (bpf_modules/)."""
    return _package_dir("linuxfp.bpf_modules", "bpf_modules")


def templates_dir() -> Path:
    """Directory of the jinja2 pipeline templates (templates/)."""
    return _package_dir("linuxfp.templates", "templates")
