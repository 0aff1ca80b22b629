"""The running kernel's release, for behaviour that changed at a known
version and cannot be asked of the kernel itself."""
from __future__ import annotations

import os


def release_at_least(major: int, minor: int) -> bool:
    """Whether the running kernel's release is major.minor or later (False
    when it cannot be parsed: the older behaviour is assumed)."""
    parts = os.uname().release.split("-", 1)[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= (major, minor)
    except (IndexError, ValueError):
        return False
