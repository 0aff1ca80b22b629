"""The controller's own BPF object (bpf_modules/controller.c): the lease
renewal and the legacy-iptables watch, loaded once per `linuxfp run` against
the namespace's shared maps (creating and pinning them when it comes first)."""
from __future__ import annotations

import logging

from linuxfp import datapath as dp
from linuxfp.synth import CompileError, ToolMissing, build_controller_programs

log = logging.getLogger("linuxfp.companion")

RENEW_PROGRAM = "lfp_lease_renew"
WATCH_PROGRAM = "lfp_watch_setsockopt"


class Companion:
    def __init__(self, maps, netns_cookie: int) -> None:
        self.maps = maps
        self.cookie = netns_cookie
        self.obj = None
        self.error: str | None = None

    def load(self) -> bool:
        """False (with `error`) where it cannot load: then nothing renews the
        lease, and the datapath leaves every packet to the kernel."""
        try:
            obj = dp.BpfObject.open(build_controller_programs().data, name="lfp_controller")
        except (CompileError, ToolMissing, dp.BpfError) as e:
            self.error = str(e)
            return False
        try:
            obj.set_rodata({"lfp_netns_cookie": self.cookie})
            fresh = self.maps.prepare(obj, None)
            obj.load()
            self.maps.pin_fresh(obj, fresh)
        except (dp.BpfError, OSError) as e:
            obj.close()
            self.error = str(e)
            return False
        self.obj = obj
        return True

    def program(self, name: str):
        return self.obj.program(name) if self.obj is not None else None

    def close(self) -> None:
        if self.obj is not None:
            self.obj.close()
            self.obj = None
