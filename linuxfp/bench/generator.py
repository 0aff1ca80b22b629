"""Live-frames traffic generator: BPF_PROG_TEST_RUN with
BPF_F_TEST_XDP_LIVE_FRAMES on the source veth, the program returning XDP_TX.

One long test-run call per measurement, stopped by a signal: every call
creates and tears down a page_pool whose teardown waits for an RCU grace
period (~30 ms here), so short calls would mostly measure that.
"""
from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import threading
import time
from dataclasses import dataclass

from linuxfp.datapath import (
    BPF_F_TEST_XDP_LIVE_FRAMES,
    BpfError,
    TestRunInterrupted,
    test_run,
    xdp_md,
)
from linuxfp.lab.netns import entered

from . import programs
from .topology import GEN_IP6, SOURCE_POOL, Line, routed_prefix6

STOP_SIGNAL = signal.SIGUSR1
SENT_TTL = 64
BENCH_UDP_PORT = 9
# What the generator sends (generator.c, gen_new_tuples): steady flows, one per
# prefix; a new 5-tuple per frame; 200 destinations per prefix (10 000 over
# 50 prefixes); or a new (source, destination) per frame, in a cycle of 4096
# sources x the destinations, which no per-destination cache holds.
TRAFFIC = {"steady": 0, "new-tuples": 1, "destinations": 2, "all-new": 3}
# The kernel's live-frames batch limit; bigger batches amortise the flush.
BATCH_SIZE = 64
_REPEAT_FOREVER = (1 << 32) - 1


@dataclass(frozen=True)
class FrameSpec:
    """RFC 2544 frame size (including the 4-byte FCS a veth does not carry)."""

    frame_size: int

    @property
    def wire_bytes(self) -> int:
        return self.frame_size - 4

    def template(self) -> bytes:
        # Every header byte is rewritten by the program on every run.
        return bytes(self.wire_bytes)


def steady_flows(src_ip: str, dst_first: int, dst_stride: int, count: int,
                 dst_port: int = BENCH_UDP_PORT) -> tuple[tuple[str, str, int, int], ...]:
    """What bench_generator (bpf/generator.c) sends with new tuples off:
    frame n goes to flow n % count, flow i being (src_ip, dst_first + i *
    dst_stride, 1024 + (i & 0x3ff), dst_port)."""
    return tuple((src_ip, str(ipaddress.ip_address(dst_first + index * dst_stride)), 1024 + (index & 0x3FF), dst_port)
                 for index in range(count))


def _install_stop_handler() -> None:
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("the generator must be started from the main thread (signal handler)")
    if signal.getsignal(STOP_SIGNAL) in (signal.SIG_DFL, signal.SIG_IGN, None):
        signal.signal(STOP_SIGNAL, lambda *_: None)


def _ipv6_rodata(line: Line) -> dict:
    """IPv6 frames (generator.c): from the generator's address to host 1 of
    each routed_prefix6."""
    first = ipaddress.ip_network(routed_prefix6(0)).network_address + 1
    return {"gen_ipv6": 1, "gen_src6": ipaddress.IPv6Address(GEN_IP6).packed, "gen_dst6": first.packed}


class Generator:
    """Loads the generator program once; `running()` pushes frames until the block ends."""

    def __init__(self, line: Line, cpu: int) -> None:
        first = ipaddress.ip_address(line.prefix_address(0))
        stride = 256 if len(line.prefixes) > 1 else 0
        self.line = line
        self.cpu = cpu
        self._dst_first, self._dst_stride = int(first), stride
        self._obj = programs.load("generator", rodata={
            "gen_dst_mac": programs.mac_bytes(line.frame_dst_mac),
            "gen_src_mac": programs.mac_bytes(line.gen.mac),
            "gen_src_ip": int(ipaddress.ip_address(line.gen.ip)).to_bytes(4, "big"),
            "gen_dst_first": int(first),
            "gen_dst_stride": stride,
            "gen_dst_count": len(line.prefixes),
            "gen_ttl": SENT_TTL,
            "gen_dst_port": BENCH_UDP_PORT,
            "gen_src_pool": int(SOURCE_POOL.network_address),
            **(_ipv6_rodata(line) if line.ipv6 else {}),
        })
        self._prog = self._obj.program("bench_generator")
        self._sent = self._obj.map("gen_sent")
        self._new_tuples = self._obj.map("gen_new_tuples")

    def set_new_tuples(self, on: bool) -> None:
        """Every frame a new 5-tuple (source port counting), or steady flows."""
        self.set_traffic("new-tuples" if on else "steady")

    def set_traffic(self, name: str) -> None:
        """One of TRAFFIC (generator.c says what each sends)."""
        self._new_tuples.update(b"\0\0\0\0", TRAFFIC[name].to_bytes(4, "little"))

    def flows(self) -> tuple[tuple[str, str, int, int], ...]:
        """The steady flows (new tuples off) as bench_generator writes them:
        (source, destination, source port, destination port), one per routed
        prefix, in the order the frames cycle through them."""
        if self.line.ipv6:       # generator.c: to host 1 of each routed_prefix6, from GEN_IP6
            first = ipaddress.ip_network(routed_prefix6(0)).network_address + 1
            return steady_flows(GEN_IP6, int(first), 1 << 64, len(self.line.prefixes))
        return steady_flows(self.line.gen.ip, self._dst_first, self._dst_stride, len(self.line.prefixes))

    def sent(self) -> int:
        return sum(int.from_bytes(v, "little") for v in self._sent.lookup_percpu(b"\0\0\0\0") or [])

    def sample_frame(self, frame: FrameSpec) -> bytes:
        """One frame as the generator writes it (a plain test run, nothing sent)."""
        with entered(self.line.src):
            run = test_run(self._prog.fd, frame.template(), ctx_in=xdp_md(self.line.gen.ifindex))
        return run.data_out

    @contextlib.contextmanager
    def running(self, frame: FrameSpec):
        """Push frames from a pinned thread for the duration of the block."""
        _install_stop_handler()
        failure: list[BaseException] = []
        started = threading.Event()

        def push() -> None:
            try:
                os.sched_setaffinity(0, {self.cpu})
                with entered(self.line.src):
                    started.set()
                    test_run(self._prog.fd, frame.template(), repeat=_REPEAT_FOREVER,
                             ctx_in=xdp_md(self.line.gen.ifindex),
                             flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=BATCH_SIZE)
            except TestRunInterrupted:
                pass
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, re-raised there
                failure.append(exc)
            finally:
                started.set()

        worker = threading.Thread(target=push, name="bench-generator", daemon=True)
        worker.start()
        started.wait()
        try:
            yield self
        finally:
            while worker.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    signal.pthread_kill(worker.ident or 0, STOP_SIGNAL)
                worker.join(0.05)
            # The page_pool of the stopped run waits for RCU before it is gone.
            time.sleep(0.05)
        if failure:
            exc = failure[0]
            if isinstance(exc, BpfError):
                raise exc
            raise RuntimeError(f"generator failed: {exc}") from exc

    def close(self) -> None:
        self._prog.close()
        self._sent.close()
        self._new_tuples.close()
        self._obj.close()
