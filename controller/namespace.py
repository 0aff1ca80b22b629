"""Identity of the network namespace being accelerated, and where its pins and
runtime state live."""
from __future__ import annotations

import os
from dataclasses import dataclass

from linuxfp.state.netlink import netns_cookie  # noqa: F401  (re-exported)
from linuxfp.synth.compile import maps_layout_digest

MAPS_DIR_PREFIX = "maps-"
RUN_DIR = os.environ.get("LINUXFP_RUN_DIR", "/run/linuxfp")


@dataclass(frozen=True)
class NamespaceLayout:
    """Paths owned by one accelerated namespace."""

    bpffs: str       # bpffs root usable from this process
    cookie: int

    @property
    def name(self) -> str:
        return f"ns-{self.cookie}"

    @property
    def pin_dir(self) -> str:
        return os.path.join(self.bpffs, "linuxfp", self.name)

    @property
    def maps_dir(self) -> str:
        """The maps, under the digest of their layouts: code with other
        layouts (another version) never opens them, nor they its."""
        return os.path.join(self.pin_dir, f"{MAPS_DIR_PREFIX}{maps_layout_digest()}")

    def shared_map_pin(self, map_name: str) -> str:
        return os.path.join(self.maps_dir, map_name)

    def iface_dir(self, ifindex: int) -> str:
        return os.path.join(self.pin_dir, f"if{ifindex}")

    def link_pin(self, ifindex: int, hook: str) -> str:
        return os.path.join(self.iface_dir(ifindex), f"link_{hook}")

    @property
    def generations_pin(self) -> str:
        """The controller's lfp_read_generations, for readers of the lease
        (status, waits) to tell whether the addresses it holds are current."""
        return os.path.join(self.pin_dir, "read_generations")

    def counters_pin(self, ifindex: int) -> str:
        return os.path.join(self.maps_dir, f"if{ifindex}_counters")

    def foreign_maps(self) -> list[str]:
        """Maps pinned here by code with other layouts: `maps-*` directories
        of other digests, and the maps versions before those directories
        pinned at the top and as if<N>/lfp_counters."""
        try:
            names = sorted(os.listdir(self.pin_dir))
        except FileNotFoundError:
            return []
        ours = os.path.basename(self.maps_dir)
        found = []
        for name in names:
            path = os.path.join(self.pin_dir, name)
            if name.startswith(MAPS_DIR_PREFIX):
                if name != ours:
                    found.append(path)
            elif name.startswith("lfp_"):
                found.append(path)
            elif os.path.lexists(os.path.join(path, "lfp_counters")):
                found.append(os.path.join(path, "lfp_counters"))
        return found

    @property
    def run_dir(self) -> str:
        return os.path.join(RUN_DIR, self.name)

    @property
    def state_file(self) -> str:
        return os.path.join(self.run_dir, "installed.json")

    @property
    def response_file(self) -> str:
        return os.path.join(self.run_dir, "response.json")

    @property
    def windows_file(self) -> str:
        return os.path.join(self.run_dir, "windows.json")

    @property
    def kernel_path_file(self) -> str:
        """The interfaces the graph leaves on the kernel path, and why."""
        return os.path.join(self.run_dir, "kernel_path.json")

    @property
    def hooks_file(self) -> str:
        """Per attached interface: why the hook is TC where XDP was asked
        for or possible (`--hook auto`)."""
        return os.path.join(self.run_dir, "hooks.json")

    @property
    def published_file(self) -> str:
        """What nodes publish for `linuxfp stats` to make sense of their
        counts (Node.publish): e.g. the filter's rules by classifier class."""
        return os.path.join(self.run_dir, "published.json")

    @property
    def upkeep_file(self) -> str:
        """What nodes' periodic work remembers (Node.upkeep), as long as the
        datapath: e.g. the counts already given to iptables-legacy."""
        return os.path.join(self.run_dir, "upkeep.json")

    @property
    def origins_file(self) -> str:
        """Per interface: the installed object's digest and where it came
        from (precompiled, cache, compiled)."""
        return os.path.join(self.run_dir, "origins.json")

    @property
    def pid_file(self) -> str:
        return os.path.join(self.run_dir, "controller.pid")
