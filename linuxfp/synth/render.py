"""Pipeline shape → C source, from templates/ and the registered nodes'
headers. Pure."""
from __future__ import annotations

from functools import cache

import jinja2

from linuxfp.graph.nodes import node_named
from linuxfp.graph.shape import Shape
from linuxfp.resources import modules_dir, templates_dir

from .counters import counters


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


def render(shape: Shape) -> str:
    """C source of the program for `shape`."""
    nodes = [node_named(n) for n in shape.nodes]
    template = _environment().get_template("pipeline.c.j2")
    return template.render(
        shape=str(shape), hook=shape.hook, section=shape.section, entry=shape.entry,
        vlan_kfunc=shape.device_bound, counters=counters(),
        nodes=[{"name": n.name, "include": _include(n)} for n in nodes],
    )
