"""A pipeline's shape: its hook and the nodes it chains, independent of the
interface it serves (interfaces with equal shapes share one compiled object)."""
from __future__ import annotations

from dataclasses import dataclass

HOOKS = ("xdp", "tc")


@dataclass(frozen=True, order=True)
class Shape:
    """What a pipeline does. Per-interface values go in at load time (.rodata)
    or through maps, never into the shape."""

    hook: str
    nodes: tuple[str, ...]          # in stage order
    # Render without device-bound features so BPF_PROG_TEST_RUN accepts the
    # program; such an XDP build cannot see offloaded VLAN tags and is never
    # installed by the controller.
    testable: bool = False

    def __post_init__(self) -> None:
        from .nodes import node_named     # the registry knows every node

        if self.hook not in HOOKS:
            raise ValueError(f"unknown hook {self.hook!r} (expected one of {', '.join(HOOKS)})")
        for node in self.nodes:
            node_named(node)              # raises ValueError for an unknown node

    def __str__(self) -> str:
        return f"{self.hook}:{'+'.join(self.nodes) or 'empty'}{' (testable)' if self.testable else ''}"

    @classmethod
    def parse(cls, text: str) -> "Shape":
        testable = text.endswith(" (testable)")
        hook, _, nodes = text.removesuffix(" (testable)").partition(":")
        return cls(hook, tuple(n for n in nodes.split("+") if n and n != "empty"), testable)

    @property
    def device_bound(self) -> bool:
        """Loaded bound to its ingress device: XDP reads the offloaded VLAN
        tag through the driver's rx-metadata kfunc."""
        return self.hook == "xdp" and not self.testable

    @property
    def shared(self) -> bool:
        """One loaded program serves every interface of this shape: it reads
        the ingress from the context and its counters by ifindex (TC). An XDP
        program is bound to its device, so it is loaded per interface with
        its ingress and counters fixed at load (bpf_modules/common.h)."""
        return self.hook == "tc"

    @property
    def entry(self) -> str:
        """Name of the program's entry function in the object."""
        return f"lfp_{self.hook}"

    @property
    def section(self) -> str:
        return "xdp" if self.hook == "xdp" else "tc"
