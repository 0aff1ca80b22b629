"""Pipeline shape → C source (jinja2) → BPF object (clang, cached)."""
from linuxfp.graph.nodes import registered
from linuxfp.graph.shape import HOOKS, Shape
from linuxfp.resources import modules_dir

from .compile import CompileError, CompiledObject, ToolMissing, compile_source, default_cache_dir
from .counters import Counter, counter_named, counters
from .headroom import MINIMUM, headroom_for, section_insns
from .render import render


def build(shape: Shape, cache_dir=None) -> CompiledObject:
    """Render and compile the program for `shape` (cache hits skip clang). A
    device-bound program larger than the minimum headroom covers is rendered
    again with headroom for its size."""
    headers = tuple(n.header for n in registered())
    compiled = compile_source(render(shape), cache_dir, headers=headers)
    if shape.device_bound:
        # the entry's section and the global functions libbpf appends to it
        code = section_insns(compiled.data, shape.section) - MINIMUM + section_insns(compiled.data, ".text")
        needed = headroom_for(code)
        if needed > MINIMUM:
            compiled = compile_source(render(shape, headroom=needed), cache_dir, headers=headers)
    return compiled


def build_controller_programs(cache_dir=None) -> CompiledObject:
    """The programs the controller runs itself: lease renewal, table watch (controller.c)."""
    return compile_source((modules_dir() / "controller.c").read_text(), cache_dir)


__all__ = [
    "HOOKS", "Shape", "render", "build", "build_controller_programs", "compile_source", "CompiledObject",
    "CompileError", "ToolMissing", "default_cache_dir", "Counter", "counters", "counter_named",
]
