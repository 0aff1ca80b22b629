"""The systems under test, each installed on the DUT for one measurement and
removed after it, on the same unchanged Linux configuration.

- linux: the kernel alone (what a user has today);
- linuxfp-xdp / linuxfp-tc: the LinuxFP controller running in the DUT;
- upper-bound: a minimal XDP program that only rewrites MACs and redirects;
- reference: the plain bpf_fib_lookup XDP forwarder every tutorial writes.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass

from controller.launcher import ControllerProcess
from linuxfp.datapath import Map, attach_xdp
from linuxfp.lab.netns import entered

from . import programs
from .topology import Line


@dataclass(frozen=True)
class System:
    name: str
    description: str
    expect: str            # the sink counter every forwarded frame lands in
    install: Callable[[Line], ContextManager[None]]


def _devmap_set(devmap: Map, line: Line, key: int, ifindex: int) -> None:
    # A devmap resolves the ifindex in the calling thread's network namespace.
    with entered(line.dut):
        devmap.update(key.to_bytes(4, "little"), ifindex.to_bytes(4, "little"))


@contextlib.contextmanager
def on_dut_ingress(line: Line, prog) -> Iterator[None]:
    """`prog` attached natively at the DUT's ingress for the duration."""
    with entered(line.dut):  # the ifindex resolves in the caller's namespace
        link = attach_xdp(prog.fd, line.dut_in.ifindex, mode="native")
    try:
        yield
    finally:
        link.detach()


@contextlib.contextmanager
def _attached_xdp(line: Line, name: str, entry: str, rodata: dict | None, devmap: str,
                  devmap_key: Callable[[Line], int]) -> Iterator[None]:
    obj = programs.load(name, rodata=rodata)
    try:
        egress = obj.map(devmap)
        _devmap_set(egress, line, devmap_key(line), line.dut_out.ifindex)
        prog = obj.program(entry)
        try:
            with on_dut_ingress(line, prog):
                yield
        finally:
            prog.close()
            egress.close()
    finally:
        obj.close()


@contextlib.contextmanager
def linux(line: Line) -> Iterator[None]:
    yield


def upper_bound(line: Line) -> ContextManager[None]:
    return _attached_xdp(line, "upper_bound", "bench_upper_bound", {
        "ub_dst_mac": programs.mac_bytes(line.snk.mac),
        "ub_src_mac": programs.mac_bytes(line.dut_out.mac),
    }, "ub_egress", lambda _: 0)


def reference(line: Line) -> ContextManager[None]:
    return _attached_xdp(line, "reference", "bench_reference", None, "ref_egress",
                         lambda line: line.dut_out.ifindex)


def linuxfp(hook: str) -> Callable[[Line], ContextManager[None]]:
    @contextlib.contextmanager
    def install(line: Line) -> Iterator[None]:
        with ControllerProcess(line.dut.name, hook=hook):
            yield

    return install


SYSTEMS: dict[str, System] = {
    system.name: system
    for system in (
        System("linux", "Linux alone", "good", linux),
        System("linuxfp-xdp", "LinuxFP controller, XDP hook", "good", linuxfp("xdp")),
        System("linuxfp-tc", "LinuxFP controller, TC hook", "good", linuxfp("tc")),
        System("upper-bound", "minimal XDP: rewrite MACs + devmap redirect", "ttl_unchanged", upper_bound),
        System("reference", "plain bpf_fib_lookup XDP forwarder", "good", reference),
    )
}
