"""BPF_PROG_TEST_RUN: run a loaded program on a given frame, in the kernel.

The call goes through a ctypes CDLL function, which releases the GIL, so a
long run (e.g. BPF_F_TEST_XDP_LIVE_FRAMES with a huge repeat) can sit in a
worker thread while other Python threads keep running.

Stopping a long run: the kernel checks for pending signals between
repetitions and then fails the syscall with EINTR, which ``test_run`` raises
as ``TestRunInterrupted`` (a BpfError with errno EINTR); an interrupted run
reports no retval, output or duration. The signal must reach the *thread*
that is inside ``test_run`` and must have a Python handler installed (so it
does not kill the process), e.g.::

    signal.signal(signal.SIGUSR1, lambda *_: None)
    worker = threading.Thread(target=run)       # run() calls test_run(...)
    worker.start(); ...
    signal.pthread_kill(worker.ident, signal.SIGUSR1)

A process-directed signal (kill, Ctrl-C) is delivered to some thread that
does not block it (usually the main thread) and does not stop the run.
"""

from __future__ import annotations

import ctypes
import errno
import struct
from dataclasses import dataclass

from .errors import BpfError, TestRunInterrupted
from .fds import HasFd, fd_of
from .libbpf import BPF_F_TEST_XDP_LIVE_FRAMES, BpfTestRunOpts, errno_of, lib, new_opts

# Room for programs that grow the frame (bpf_xdp_adjust_head/tail, skb encap).
_DEFAULT_OUTPUT_HEADROOM = 4096

_XDP_MD = struct.Struct("<6I")


@dataclass(frozen=True)
class XdpMd:
    """struct xdp_md as BPF_PROG_TEST_RUN's ctx_in for XDP programs.

    The kernel requires data_end == len(frame) (+ data, the metadata length)
    and data_meta == 0; ``to_bytes`` fills those from the frame length.
    ingress_ifindex / rx_queue_index must name a device (and queue) in the
    calling thread's network namespace; egress_ifindex must be 0.
    """

    __test__ = False

    ingress_ifindex: int = 0
    rx_queue_index: int = 0
    metadata_len: int = 0

    def to_bytes(self, frame_len: int) -> bytes:
        return _XDP_MD.pack(
            self.metadata_len,
            self.metadata_len + frame_len,
            0,
            self.ingress_ifindex,
            self.rx_queue_index,
            0,
        )

    @staticmethod
    def fields(raw: bytes) -> dict[str, int]:
        """Decode a ctx_out of an XDP run."""
        data, data_end, data_meta, ingress, queue, egress = _XDP_MD.unpack_from(raw)
        return {
            "data": data,
            "data_end": data_end,
            "data_meta": data_meta,
            "ingress_ifindex": ingress,
            "rx_queue_index": queue,
            "egress_ifindex": egress,
        }


def xdp_md(ingress_ifindex: int = 0, rx_queue_index: int = 0, metadata_len: int = 0) -> XdpMd:
    return XdpMd(ingress_ifindex, rx_queue_index, metadata_len)


@dataclass(frozen=True)
class TestRun:
    """Result of one BPF_PROG_TEST_RUN: verdict, frame after the program, mean ns per run."""

    __test__ = False

    retval: int
    data_out: bytes
    duration_ns: int
    ctx_out: bytes | None


def test_run(
    prog: int | HasFd,
    data: bytes,
    repeat: int = 1,
    ctx_in: bytes | XdpMd | None = None,
    flags: int = 0,
    batch_size: int = 0,
    data_size_out: int | None = None,
    cpu: int = 0,
) -> TestRun:
    """Run a program (fd or Program) on ``data`` ``repeat`` times via bpf_prog_test_run_opts.

    With flags=BPF_F_TEST_XDP_LIVE_FRAMES the frames really go through the
    XDP verdict path (XDP_TX/REDIRECT transmit, PASS enters the stack) in
    batches of ``batch_size`` (0: kernel default 64); the kernel then returns
    no output frame or context, so data_out is b"" and ctx_out None.
    Raises TestRunInterrupted if a signal stops the run (see module doc).
    """
    prog_fd = fd_of(prog)
    live = bool(flags & BPF_F_TEST_XDP_LIVE_FRAMES)
    # No data at all (a BPF_PROG_TYPE_SYSCALL program, which takes only a
    # context): no data buffers, which such programs refuse.
    data_in = ctypes.create_string_buffer(bytes(data), len(data)) if data else None
    ctx_bytes = ctx_in.to_bytes(len(data)) if isinstance(ctx_in, XdpMd) else ctx_in
    ctx_buffer = ctypes.create_string_buffer(ctx_bytes, len(ctx_bytes)) if ctx_bytes else None
    if live or not data:
        out_size = 0
    else:
        out_size = data_size_out if data_size_out is not None else len(data) + _DEFAULT_OUTPUT_HEADROOM
    data_out = ctypes.create_string_buffer(out_size) if out_size else None
    ctx_out = ctypes.create_string_buffer(len(ctx_bytes)) if ctx_bytes and not live and data else None
    if not data:
        repeat = 0          # syscall programs run once and refuse a repeat count

    opts = new_opts(
        BpfTestRunOpts,
        data_in=ctypes.cast(data_in, ctypes.c_void_p) if data_in is not None else None,
        data_size_in=len(data),
        data_out=ctypes.cast(data_out, ctypes.c_void_p) if data_out is not None else None,
        data_size_out=out_size,
        ctx_in=ctypes.cast(ctx_buffer, ctypes.c_void_p) if ctx_buffer is not None else None,
        ctx_size_in=len(ctx_bytes) if ctx_bytes else 0,
        ctx_out=ctypes.cast(ctx_out, ctypes.c_void_p) if ctx_out is not None else None,
        ctx_size_out=len(ctx_bytes) if ctx_out is not None and ctx_bytes else 0,
        repeat=repeat,
        flags=flags,
        cpu=cpu,
        batch_size=batch_size,
    )
    result = lib().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts))
    if result != 0:
        code = errno_of(result)
        operation = f"bpf_prog_test_run(prog fd {prog_fd}, {len(data)} bytes, repeat {repeat})"
        if code == errno.EINTR:
            raise TestRunInterrupted(operation, code, "stopped by a signal before all repetitions ran")
        detail = ""
        if code == errno.ENOSPC:
            detail = f"the program's output frame exceeds data_size_out={out_size}"
        raise BpfError(operation, code, detail)
    return TestRun(
        retval=opts.retval,
        data_out=data_out.raw[: opts.data_size_out] if data_out is not None else b"",
        duration_ns=opts.duration,
        # a syscall program's context is written back in place
        ctx_out=ctx_out.raw[: opts.ctx_size_out] if ctx_out is not None
        else ctx_buffer.raw[: len(ctx_bytes)] if ctx_buffer is not None and not data else None,
    )


test_run.__test__ = False  # type: ignore[attr-defined]  # keep pytest from collecting it
