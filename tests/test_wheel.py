"""The wheel installs and runs outside the checkout: built from a copy of
the tree (with the precompiled shapes `make shapes` wrote), installed into
a fresh virtual environment (its dependencies from the package index), and
`linuxfp run` from there accelerates a lab router with the objects the
wheel ships."""
from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from linuxfp.lab import Lab, RouterTopology

pytestmark = pytest.mark.netns

REPO = Path(__file__).resolve().parents[1]


def test_every_python_package_of_the_tree_is_in_the_wheel():
    declared = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(REPO).parts)
             for top in ("linuxfp", "controller") for init in (REPO / top).rglob("__init__.py")}
    assert found <= declared, found - declared


def test_the_wheel_runs_from_a_fresh_virtual_environment(require_root, tmp_path):
    source, dist, venv = tmp_path / "source", tmp_path / "dist", tmp_path / "venv"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                                ".pytest_cache", "results"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(source)],
                   check=True, cwd=tmp_path, capture_output=True, timeout=300)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    wheel = next(dist.glob("linuxfp-*.whl"))
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, capture_output=True,
                   timeout=300, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    # nothing of the checkout on the path: the installed package alone
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import linuxfp; print(linuxfp.__file__)"],
                           check=True, capture_output=True, text=True, cwd=tmp_path, env=env).stdout
    assert where.startswith(str(venv)), where
    linuxfp = str(venv / "bin" / "linuxfp")
    with Lab("lfp-whl") as lab:
        router = RouterTopology(prefixes=2)(lab)
        dut = router.dut
        run = subprocess.Popen(dut.exec_argv([linuxfp, "run", "--hook", "xdp"]), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env, start_new_session=True)
        try:
            waiting = selectors.DefaultSelector()
            waiting.register(run.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + 60
            line = ""
            while line != "ready" and run.poll() is None and time.monotonic() < deadline:
                if waiting.select(timeout=max(0.0, deadline - time.monotonic())):
                    line = run.stdout.readline().strip()
            assert line == "ready", run.stderr.read() if run.poll() is not None else "no ready in 60 s"
            status = json.loads(subprocess.run(dut.exec_argv([linuxfp, "-j", "status"]), check=True,
                                               capture_output=True, text=True, cwd=tmp_path, env=env).stdout)
            attached = {entry["ifname"]: entry for entry in status["interfaces"]}
            assert set(attached) == {"to-src", "to-sink"}, status
            assert all(entry["state"] == "active" for entry in attached.values()), status
            assert all(entry["origin"] == "precompiled" for entry in attached.values()), (
                "the wheel ships no current precompiled objects: `make shapes` before building it", status)
        finally:
            run.terminate()
            try:
                run.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(run.pid, 9)
                run.wait()
