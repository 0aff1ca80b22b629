"""Rendering and the compile cache."""
import os
import subprocess

import pytest

from linuxfp import synth
from linuxfp.synth import Shape, compile_source, counters, render


def test_shapes_parse_and_validate():
    s = Shape("tc", ("router",))
    assert str(s) == "tc:router" and Shape.parse("tc:router") == s
    with pytest.raises(ValueError):
        Shape("egress", ())
    with pytest.raises(ValueError):
        Shape("xdp", ("nat",))


def test_render_chains_nodes_inline_per_hook():
    src = render(Shape("xdp", ("router",)))
    assert "#define LFP_HOOK_XDP 1" in src and '#include "router.h"' in src
    assert "rc = router_node(&pkt);" in src and "bpf_tail_call" not in src
    assert 'SEC("tc")' in render(Shape("tc", ("router",)))
    assert "LFP_XDP_VLAN_KFUNC" in src and Shape("xdp", ("router",)).device_bound
    testable = Shape("xdp", ("router",), testable=True)
    assert "LFP_XDP_VLAN_KFUNC" not in render(testable) and not testable.device_bound
    assert Shape.parse(str(testable)) == testable


def test_counter_table_is_parsed_from_the_c_header():
    names = [c.name for c in counters()]
    assert names[0] == "router_forwarded" and "fib_no_neigh" in names
    assert len(names) == len(set(names))
    assert {c.kind for c in counters()} <= {"fast", "pass", "drop"}


def test_cache_hit_never_runs_clang(tmp_path, monkeypatch):
    src = render(Shape("xdp", ("router",)))
    first = compile_source(src, tmp_path)
    assert not first.cached and first.data.startswith(b"\x7fELF")

    def no_compiler(*a, **k):
        raise AssertionError("clang invoked on a cache hit")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    monkeypatch.setattr(subprocess, "Popen", no_compiler)
    second = compile_source(src, tmp_path)
    assert second.cached and second.digest == first.digest and second.data == first.data


def test_different_source_different_object(tmp_path):
    a = compile_source(render(Shape("xdp", ("router",))), tmp_path)
    b = compile_source(render(Shape("tc", ("router",))), tmp_path)
    assert a.digest != b.digest
    assert len(os.listdir(tmp_path)) == 2


def test_compile_error_carries_clang_diagnostics(tmp_path):
    with pytest.raises(synth.CompileError) as e:
        compile_source("int broken( {", tmp_path)
    assert "error" in str(e.value)
