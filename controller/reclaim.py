"""Every namespace that has pins under the bpffs `linuxfp/` root, whether it
is still served, and reclaiming the pins nobody can use any more.

A namespace's pins are stale when no controller holds its lock and none of
its pinned links still serves an interface. The kernel detaches a link whose
device went away (with its namespace, or by `ip link del`) and reports it
with ifindex 0, so a deleted namespace shows up as links without a device
— no need to find the namespace itself, whose id (the netns cookie) nothing
can be looked up by."""
from __future__ import annotations

import logging
import os
import re
from dataclasses import asdict, dataclass, replace

from linuxfp import datapath as dp

from . import runtime_files
from .namespace import NamespaceLayout

log = logging.getLogger("linuxfp.reclaim")

_NAMESPACE_DIR = re.compile(r"ns-(\d+)$")


@dataclass(frozen=True)
class PinnedNamespace:
    namespace: str
    cookie: int
    controller_pid: int | None
    links: int            # links pinned
    serving: int          # of which still attached to a device

    @property
    def stale(self) -> bool:
        return not self.controller_pid and self.serving == 0

    def to_dict(self) -> dict:
        return asdict(self) | {"stale": self.stale}


def pinned_namespaces(bpffs: str) -> list[NamespaceLayout]:
    root = os.path.join(bpffs, "linuxfp")
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    return [NamespaceLayout(bpffs, int(m.group(1))) for m in map(_NAMESPACE_DIR.match, names) if m]


def _links(layout: NamespaceLayout) -> tuple[int, int]:
    pinned = serving = 0
    for directory, _dirs, files in os.walk(layout.pin_dir):
        for name in files:
            if not name.startswith("link_"):
                continue
            pinned += 1
            try:
                link = dp.Link.from_pinned(os.path.join(directory, name))
            except (dp.BpfError, OSError):
                continue      # unreadable: counts as not serving
            try:              # (not `with`: leaving a Link's block detaches it)
                serving += dp.link_info(link.fd).get("ifindex", 0) != 0
            except dp.BpfError:
                pass
            finally:
                link.close()
    return pinned, serving


def describe(layout: NamespaceLayout) -> PinnedNamespace:
    pinned, serving = _links(layout)
    return PinnedNamespace(layout.name, layout.cookie, runtime_files.running_controller(layout), pinned, serving)


def reclaim_stale(bpffs: str) -> list[PinnedNamespace]:
    """Remove the pins (and /run files) of every stale namespace; returns them."""
    reclaimed = []
    for layout in pinned_namespaces(bpffs):
        if not describe(layout).stale:
            continue
        try:
            lock = runtime_files.ReclaimLock.take(layout)   # no controller may start there meanwhile
        except OSError as e:
            log.warning("reclaiming the pins of %s failed: %s", layout.name, e)
            continue
        if lock is None:
            continue
        try:
            entry = describe(layout)                     # checked again, under the lock
            if not entry.serving:
                entry = replace(entry, controller_pid=None)
                log.info("reclaiming the pins of %s: no controller, no interface served", layout.name)
                dp.remove_tree(layout.pin_dir)
                runtime_files.remove_run_dir(layout)
                reclaimed.append(entry)
        except (OSError, dp.BpfError) as e:
            # Another namespace's garbage: what is left waits for the next reclaim.
            log.warning("reclaiming the pins of %s failed: %s", layout.name, e)
        finally:
            os.close(lock)
    return reclaimed
