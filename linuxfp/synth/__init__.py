"""Pipeline shape → C source (jinja2) → BPF object (clang, cached)."""
from linuxfp.graph.nodes import registered
from linuxfp.graph.shape import HOOKS, Shape
from linuxfp.resources import modules_dir

from .compile import CompileError, CompiledObject, ToolMissing, compile_source, default_cache_dir
from .counters import Counter, counter_named, counters
from .render import render


def build(shape: Shape, cache_dir=None) -> CompiledObject:
    """Render and compile the program for `shape` (cache hits skip clang)."""
    return compile_source(render(shape), cache_dir, headers=tuple(n.header for n in registered()))


def build_controller_programs(cache_dir=None) -> CompiledObject:
    """The programs the controller runs itself: lease renewal, table watch (controller.c)."""
    return compile_source((modules_dir() / "controller.c").read_text(), cache_dir)


__all__ = [
    "HOOKS", "Shape", "render", "build", "build_controller_programs", "compile_source", "CompiledObject",
    "CompileError", "ToolMissing", "default_cache_dir", "Counter", "counters", "counter_named",
]
