"""Rendering and the compile cache."""
import os
import subprocess

import pytest

from linuxfp import synth
from linuxfp.synth import Shape, compile_source, counters, render


ROUTER = ("router", "transmit")


def test_shapes_parse_and_validate():
    s = Shape("tc", ROUTER)
    assert str(s) == "tc:router+transmit" and Shape.parse("tc:router+transmit") == s
    with pytest.raises(ValueError):
        Shape("egress", ())
    with pytest.raises(ValueError):
        Shape("xdp", ("nat",))


def test_render_chains_nodes_inline_per_hook():
    src = render(Shape("xdp", ROUTER))
    assert "#define LFP_HOOK_XDP 1" in src and '#include "router.h"' in src and '#include "transmit.h"' in src
    assert src.index("rc = router_node(&pkt);") < src.index("rc = transmit_node(&pkt);")
    assert "bpf_tail_call" not in src
    assert 'SEC("tc")' in render(Shape("tc", ROUTER))
    assert "LFP_XDP_VLAN_KFUNC" in src and Shape("xdp", ROUTER).device_bound
    testable = Shape("xdp", ROUTER, testable=True)
    assert "LFP_XDP_VLAN_KFUNC" not in render(testable) and not testable.device_bound
    assert Shape.parse(str(testable)) == testable


def test_counter_table_is_parsed_from_the_c_headers():
    names = [c.name for c in counters()]
    # the pipeline's own first, then each registered node's, in order
    assert names[0] == "pipeline_end" and names.index("fib_no_neigh") < names.index("forwarded")
    assert {c.node for c in counters() if c.name in ("forwarded", "neigh_stale")} == {"transmit"}
    # every shape defines every counter, so ids never depend on the shape
    assert all(f"X({c.c_name}," in render(Shape("tc", ROUTER)) for c in counters())
    assert len(names) == len(set(names))
    assert {c.kind for c in counters()} <= {"fast", "pass", "drop", "event"}


def test_cache_hit_never_runs_clang(tmp_path, monkeypatch):
    src = render(Shape("xdp", ROUTER))
    first = compile_source(src, tmp_path)
    assert not first.cached and first.data.startswith(b"\x7fELF")

    def no_compiler(*a, **k):
        raise AssertionError("clang invoked on a cache hit")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    monkeypatch.setattr(subprocess, "Popen", no_compiler)
    second = compile_source(src, tmp_path)
    assert second.cached and second.digest == first.digest and second.data == first.data


def test_different_source_different_object(tmp_path):
    a = compile_source(render(Shape("xdp", ROUTER)), tmp_path)
    b = compile_source(render(Shape("tc", ROUTER)), tmp_path)
    assert a.digest != b.digest
    assert len(os.listdir(tmp_path)) == 2


def test_compile_error_carries_clang_diagnostics(tmp_path):
    with pytest.raises(synth.CompileError) as e:
        compile_source("int broken( {", tmp_path)
    assert "error" in str(e.value)
