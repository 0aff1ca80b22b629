"""Pipeline shape → C source (jinja2) → BPF object: shipped precompiled,
else from the cache, else clang."""
from linuxfp.graph.nodes import registered
from linuxfp.graph.shape import HOOKS, Shape
from linuxfp.resources import modules_dir

from . import shipped
from .compile import (CACHE, COMPILED, PRECOMPILED, CompileError, CompiledObject, ToolMissing, compile_cached,
                      compile_source, default_cache_dir, source_key)
from .counters import Counter, counter_named, counters
from .headroom import MINIMUM, headroom_for, section_insns
from .render import render


def build(shape: Shape, cache_dir=None) -> CompiledObject:
    """The program for `shape`: the shipped object built from exactly these
    sources, else compiled (cache hits skip clang)."""
    source, headers = render(shape), _node_headers()
    key = shape_key(shape, source, headers)
    data = shipped.find(shipped.SHAPE, key)
    if data is not None:
        return CompiledObject(key, data, PRECOMPILED)
    return compile_shape(shape, cache_dir)


def shape_key(shape: Shape, source: str | None = None, headers: tuple | None = None) -> str:
    """The source key of `shape`'s shipped object: its first render, the
    headers and the flags (the headroom pass follows from them)."""
    return source_key(render(shape) if source is None else source,
                      _node_headers() if headers is None else headers, purpose=shipped.SHAPE)


def _node_headers() -> tuple:
    return tuple(n.header for n in registered())


def compile_shape(shape: Shape, cache_dir=None) -> CompiledObject:
    """The program for `shape` from the cache or clang, never the shipped
    set. A device-bound program larger than the minimum headroom covers is
    rendered again with headroom for its size."""
    headers = _node_headers()
    compiled = compile_cached(render(shape), cache_dir, headers=headers)
    if shape.device_bound:
        # the entry's section and the global functions libbpf appends to it
        code = section_insns(compiled.data, shape.section) - MINIMUM + section_insns(compiled.data, ".text")
        needed = headroom_for(code)
        if needed > MINIMUM:
            again = compile_cached(render(shape, headroom=needed), cache_dir, headers=headers)
            # fresh if either pass ran clang
            compiled = again if compiled.origin == CACHE else CompiledObject(again.digest, again.data, COMPILED)
    return compiled


def controller_source() -> str:
    """The programs the controller runs itself: lease renewal, table watch (controller.c)."""
    return (modules_dir() / "controller.c").read_text()


def build_controller_programs(cache_dir=None) -> CompiledObject:
    return compile_source(controller_source(), cache_dir)


__all__ = [
    "HOOKS", "Shape", "render", "build", "compile_shape", "shape_key", "build_controller_programs", "controller_source",
    "compile_source", "CompiledObject", "PRECOMPILED", "CACHE", "COMPILED",
    "CompileError", "ToolMissing", "default_cache_dir", "Counter", "counters", "counter_named",
]
