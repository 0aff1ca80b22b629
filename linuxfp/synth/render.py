"""Pipeline shape → C source, from templates/ and the registered nodes'
headers. Pure."""
from __future__ import annotations

from functools import cache

import jinja2

from linuxfp.graph.nodes import Stage, node_named, registered
from linuxfp.graph.shape import Shape
from linuxfp.resources import modules_dir, templates_dir

from .counters import counters
from .headroom import MINIMUM


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def _include(node) -> str:
    """How the generated source names a node's header: by name for the
    built-in modules (on the include path), by absolute path otherwise."""
    header = node.header.resolve()
    return header.name if header.parent == modules_dir().resolve() else str(header)


def counters_define() -> str:
    """`#define LFP_COUNTERS(X)`: every registered node's counters, in the
    order that gives them the same ids in every program (counters.py)."""
    rows = "".join(f'\tX({c.c_name}, {c.node}, {c.kind}, "{c.description}") \\\n' for c in counters())
    return f"#define LFP_COUNTERS(X) \\\n{rows}"


def render(shape: Shape, headroom: int = MINIMUM) -> str:
    """C source of the program for `shape`; a device-bound one carries
    `headroom` instructions of dead code (headroom.py)."""
    nodes = [node_named(n) for n in shape.nodes]
    # Behind a bridging node, the IP stages see only what it hands up.
    bridging = any(n.stage < Stage.PREROUTING for n in nodes)
    template = _environment().get_template("pipeline.c.j2")
    return template.render(
        shape=str(shape), hook=shape.hook, section=shape.section, entry=shape.entry,
        vlan_kfunc=shape.device_bound, headroom=headroom, counters_define=counters_define(),
        stages=[(stage.name, int(any(n.stage is stage for n in nodes))) for stage in Stage],
        present=[(node.name.upper(), int(node in nodes)) for node in registered()],
        nodes=[{"name": n.name, "include": _include(n), "ip_only": bridging and n.stage.is_ip}
               for n in nodes],
    )
