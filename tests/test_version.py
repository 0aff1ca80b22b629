"""`linuxfp --version` and the version in `linuxfp -j status`: the
checkout's pyproject.toml, else the installed package's metadata."""
from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from controller import version as version_module
from controller.launcher import _env, linuxfp_cli

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
DECLARED = tomllib.loads(PYPROJECT.read_text())["project"]["version"]


def test_version_flag_prints_the_declared_version():
    done = subprocess.run([sys.executable, "-m", "controller.cli", "--version"],
                          capture_output=True, text=True, env=_env())
    assert done.returncode == 0 and done.stdout.strip() == f"linuxfp {DECLARED}"


def test_version_without_a_checkout(monkeypatch, tmp_path):
    """Installed from a wheel (no pyproject.toml beside the code): the
    package metadata; neither: a version that says it is unknown."""
    monkeypatch.setattr(version_module, "_PYPROJECT", tmp_path / "pyproject.toml")
    monkeypatch.setattr(metadata, "version", lambda name: "9.8.7")
    version_module.version.cache_clear()
    try:
        assert version_module.version() == "9.8.7"
        version_module.version.cache_clear()

        def missing(name):
            raise metadata.PackageNotFoundError(name)
        monkeypatch.setattr(metadata, "version", missing)
        assert version_module.version() == version_module.UNKNOWN
    finally:
        version_module.version.cache_clear()


@pytest.mark.netns
def test_status_json_has_the_version(lab):
    ns = lab.namespace("ver")
    status = json.loads(linuxfp_cli(ns.name, "-j", "status").stdout)
    assert status["version"] == DECLARED
    assert status["kernel_path"] == [] and status["interfaces"] == []
