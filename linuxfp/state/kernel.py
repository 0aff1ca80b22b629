"""The running kernel's release, for behaviour that changed at a known
version and cannot be asked of the kernel itself."""
from __future__ import annotations

import os
import re


def release_at_least(major: int, minor: int) -> bool:
    """Whether the running kernel's release is major.minor or later (False
    when it does not start so: the older behaviour is assumed)."""
    found = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return found is not None and (int(found[1]), int(found[2])) >= (major, minor)
