"""`linuxfp systemd install`: the units of deploy/systemd/ written into a
unit directory, their ExecStart pointed at this installation's `linuxfp`
(the shipped files name /usr/local/bin/linuxfp, where pip puts it for root).
Idempotent: an unchanged unit is not rewritten; local changes belong in
drop-ins (systemctl edit), which a re-install leaves alone."""
from __future__ import annotations

import os
import shutil
import sysconfig
import tempfile
from dataclasses import dataclass

from linuxfp.resources import systemd_units_dir

UNITS = ("linuxfp.service", "linuxfp@.service")
DEFAULT_DIR = "/etc/systemd/system"
SHIPPED_EXEC = "/usr/local/bin/linuxfp"


class InstallError(Exception):
    """The units cannot be installed; the message says what to do."""


@dataclass(frozen=True)
class Written:
    path: str
    action: str      # "wrote", "updated" or "unchanged"


def linuxfp_executable() -> str:
    """The installed `linuxfp` command: the console script beside the
    interpreter running now (the code that is running), else the one on
    PATH. Not a checkout: a unit must not depend on a working tree."""
    beside = os.path.join(sysconfig.get_path("scripts"), "linuxfp")
    for candidate in (beside, shutil.which("linuxfp")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise InstallError(
        f"no installed `linuxfp` command (looked for {beside} and on PATH): install the package first "
        "(make deps, or pip install .), then run this again")


def _quote(path: str) -> str:
    """`path` as a unit file's ExecStart needs it: % and $ would be
    specifiers and variables; spaces need quotes."""
    path = path.replace("%", "%%").replace("$", "$$")
    return f'"{path}"' if any(c.isspace() for c in path) else path


def render(name: str, executable: str) -> str:
    text = (systemd_units_dir() / name).read_text()
    if f"ExecStart={SHIPPED_EXEC} " not in text:
        raise InstallError(f"{name}: no ExecStart={SHIPPED_EXEC} line to point at {executable} (a damaged install?)")
    return text.replace(f"ExecStart={SHIPPED_EXEC} ", f"ExecStart={_quote(executable)} ")


def install(directory: str | None = None) -> list[Written]:
    """Write every unit into `directory` (default /etc/systemd/system)."""
    directory = directory or DEFAULT_DIR
    executable = linuxfp_executable()
    written = []
    for name in UNITS:
        path = os.path.join(directory, name)
        text = render(name, executable)
        try:
            with open(path) as f:
                old = f.read()
        except OSError:
            old = None          # absent (or unreadable: the write below says why)
        if old == text:
            written.append(Written(path, "unchanged"))
            continue
        try:
            _write(path, text)
        except OSError as e:
            raise InstallError(f"cannot write {path}: {e.strerror} (run as root, or choose a directory "
                               "with --prefix)") from None
        written.append(Written(path, "wrote" if old is None else "updated"))
    return written


def _write(path: str, text: str) -> None:
    """Atomically, mode 0644 like any unit: systemd never reads half a file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".linuxfp-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def next_steps(directory: str | None = None) -> str:
    enable = ("systemctl daemon-reload && systemctl enable --now linuxfp.service\n"
              "  (or linuxfp@NS.service for the namespace of `ip netns add NS`)")
    if directory and os.path.abspath(directory) != DEFAULT_DIR:
        return (f"next: make {directory} a unit directory systemd reads (or copy the units to "
                f"{DEFAULT_DIR}), then:\n  {enable}")
    return f"next:\n  {enable}"
