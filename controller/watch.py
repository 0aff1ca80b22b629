"""The kernel-side watch of legacy iptables (bpf_modules/watch.c): raw
tracepoints count the table replacements made in this namespace as they
happen, so the datapath stops acting on a table that is being changed
before the change is made, instead of up to a poll interval after it."""
from __future__ import annotations

import logging
import struct

from linuxfp import datapath as dp
from linuxfp.synth import CompileError, ToolMissing, build_watch

log = logging.getLogger("linuxfp.watch")

WATCH_MAP = "lfp_watch"
_VALUE = struct.Struct("<QQ")   # struct lfp_watch { changes_started; changes_done; }
_KEY = struct.pack("<I", 0)
_PROGRAMS = (("lfp_watch_enter", "sys_enter"), ("lfp_watch_exit", "sys_exit"))


class TableWatch:
    """Attached for the controller's lifetime (its links are fds, not pins:
    they end with the process, and the lease then runs out)."""

    def __init__(self, maps, netns_cookie: int) -> None:
        self.maps = maps
        self.cookie = netns_cookie
        self._obj = None
        self._links: list = []
        self.error: str | None = None

    def start(self) -> bool:
        """Attach; False (with `error` set) where the kernel or toolchain
        cannot, and the controller polls instead."""
        try:
            obj = dp.BpfObject.open(build_watch().data, name="lfp_watch")
        except (CompileError, ToolMissing, dp.BpfError) as e:
            return self._unavailable(e)
        try:
            obj.set_rodata({"lfp_netns_cookie": self.cookie})
            fresh = self.maps.prepare(obj, ())
            obj.load()
            self.maps.pin_fresh(obj, fresh)
            for program, tracepoint in _PROGRAMS:
                self._links.append(dp.attach_raw_tracepoint(obj.program(program).fd, tracepoint))
        except (dp.BpfError, OSError) as e:
            self.close()
            obj.close()
            return self._unavailable(e)
        self._obj = obj
        return True

    def _unavailable(self, error: Exception) -> bool:
        self.error = str(error)
        log.warning("legacy iptables watch unavailable (%s): polling it every second instead", error)
        return False

    def read(self) -> tuple[int, int] | None:
        """(changes_started, changes_done) as the datapath sees them, or None
        while no map exists (no watch and no pipeline yet)."""
        watch_map = self.maps.get(WATCH_MAP)
        if watch_map is None:
            return None
        raw = watch_map.lookup(_KEY)
        return _VALUE.unpack(raw[: _VALUE.size]) if raw else (0, 0)

    def close(self) -> None:
        for link in self._links:
            link.close()
        self._links.clear()
        if self._obj is not None:
            self._obj.close()
            self._obj = None
