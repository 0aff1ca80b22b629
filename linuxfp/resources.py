"""Where the C modules, templates and systemd units live, installed or in a checkout.
LINUXFP_MODULES_DIR / LINUXFP_TEMPLATES_DIR point elsewhere (development of
a node without reinstalling; tests that need a deliberately broken module)."""
from __future__ import annotations

import os
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[1]


def _package_dir(package: str, checkout_dir: str) -> Path:
    """An installed package's data directory (linuxfp/<name>: the wheel puts
    it there; it has no __init__.py, so importlib.resources would see a
    namespace package), else the checkout's."""
    installed = Path(__file__).resolve().parent / package.rpartition(".")[2]
    if installed.is_dir() and any(installed.iterdir()):
        return installed
    return _REPO_ROOT / checkout_dir


def modules_dir() -> Path:
    """Directory of the header-only node modules (bpf_modules/)."""
    override = os.environ.get("LINUXFP_MODULES_DIR")
    return Path(override) if override else _package_dir("linuxfp.bpf_modules", "bpf_modules")


def templates_dir() -> Path:
    """Directory of the jinja2 pipeline templates (templates/)."""
    override = os.environ.get("LINUXFP_TEMPLATES_DIR")
    return Path(override) if override else _package_dir("linuxfp.templates", "templates")


def systemd_units_dir() -> Path:
    """Directory of the systemd units `linuxfp systemd install` writes (deploy/systemd/)."""
    return _package_dir("linuxfp.systemd_units", "deploy/systemd")
