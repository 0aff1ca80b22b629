"""Pipeline shape → C source, from templates/ and the node modules."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import jinja2

from .resources import templates_dir

HOOKS = ("xdp", "tc")
NODES = ("router",)


@dataclass(frozen=True, order=True)
class Shape:
    """What a pipeline does, independent of which interface it serves.

    Interfaces with equal shapes share one compiled object; per-interface values
    go in at load time (.rodata) or through maps."""

    hook: str
    nodes: tuple[str, ...]
    # Render without device-bound features so BPF_PROG_TEST_RUN accepts the
    # program; such an XDP build cannot see offloaded VLAN tags and is never
    # installed by the controller.
    testable: bool = False

    def __post_init__(self) -> None:
        if self.hook not in HOOKS:
            raise ValueError(f"unknown hook {self.hook!r} (expected one of {', '.join(HOOKS)})")
        for node in self.nodes:
            if node not in NODES:
                raise ValueError(f"unknown node {node!r}")

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
    def entry(self) -> str:
        """Name of the program's entry function in the object."""
        return f"lfp_{self.hook}"

    @property
    def section(self) -> str:
        return "xdp" if self.hook == "xdp" else "tc"


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def render(shape: Shape) -> str:
    """C source of the program for `shape`. Pure."""
    template = _environment().get_template("pipeline.c.j2")
    return template.render(
        shape=str(shape), hook=shape.hook, nodes=shape.nodes, section=shape.section, entry=shape.entry,
        vlan_kfunc=shape.device_bound,
    )
