"""The controller's files under /run: installed state, response times, pid."""
from __future__ import annotations

import json
import os
import tempfile

from .namespace import NamespaceLayout
from .reconcile import InstalledState


def write_atomic(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def load_installed(layout: NamespaceLayout) -> InstalledState | None:
    try:
        with open(layout.state_file) as f:
            return InstalledState.from_json(f.read())
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError):
        return InstalledState()


def save_installed(layout: NamespaceLayout, state: InstalledState) -> None:
    write_atomic(layout.state_file, state.to_json())


def load_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def running_controller(layout: NamespaceLayout) -> int | None:
    """Pid of a live controller for this namespace, if any."""
    try:
        with open(layout.pid_file) as f:
            pid = int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def remove_run_dir(layout: NamespaceLayout) -> None:
    for path in (layout.state_file, layout.response_file, layout.pid_file):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    try:
        os.rmdir(layout.run_dir)
    except OSError:
        pass
