"""BPF_PROG_TEST_RUN: verdicts, output frames, xdp_md context, live frames, interruption."""

from __future__ import annotations

import signal
import struct
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bpf"))
from datapath_support import compile_bpf  # noqa: E402

from linuxfp.datapath import (  # noqa: E402
    BPF_F_TEST_XDP_LIVE_FRAMES,
    BpfError,
    BpfObject,
    TestRunInterrupted,
    XdpMd,
    test_run,
    xdp_md,
)

XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX = 0, 1, 2, 3
FRAME = bytes.fromhex("02000000000a" "02000000000b" "0800") + bytes(range(50))


@pytest.fixture(scope="module")
def object_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_bpf("datapath_test", tmp_path_factory.mktemp("bpf"))


@pytest.fixture
def dropper(object_path: Path) -> Iterator[BpfObject]:
    with BpfObject.open(object_path, name="testrun") as obj:
        obj.set_rodata({"verdict": XDP_DROP, "mark": 0xEE})
        obj.load()
        yield obj


def runs(obj: BpfObject, slot: int) -> int:
    values = obj.map("counters").lookup_percpu(struct.pack("<I", slot)) or []
    return sum(struct.unpack("<Q", value)[0] for value in values)


def test_verdict_and_output_bytes(dropper: BpfObject) -> None:
    result = test_run(dropper.program("xdp_mark"), FRAME)
    assert result.retval == XDP_DROP
    assert result.data_out == bytes([0xEE]) + FRAME[1:6] + bytes(6) + FRAME[12:]
    assert result.ctx_out is None
    assert result.duration_ns >= 0


def test_repeat_runs_the_program_that_many_times(dropper: BpfObject) -> None:
    before = runs(dropper, 0)
    test_run(dropper.program("xdp_verdict"), FRAME, repeat=25)
    assert runs(dropper, 0) == before + 25


def test_xdp_md_context_reaches_the_program(dropper: BpfObject) -> None:
    result = test_run(dropper.program("xdp_mark"), FRAME, ctx_in=xdp_md(ingress_ifindex=1))
    assert result.ctx_out is not None
    fields = XdpMd.fields(result.ctx_out)
    assert fields["ingress_ifindex"] == 1
    assert fields["data_end"] - fields["data"] == len(FRAME)
    assert dropper.map("by_ifindex").lookup(struct.pack("<I", 1)) == struct.pack("<Q", 1)


def test_raw_ctx_with_wrong_data_end_is_refused(dropper: BpfObject) -> None:
    with pytest.raises(BpfError, match="bpf_prog_test_run") as caught:
        test_run(dropper.program("xdp_mark"), FRAME, ctx_in=xdp_md(ingress_ifindex=1).to_bytes(len(FRAME) + 1))
    assert caught.value.errno == 22


def test_live_frames_run_repeat_times_in_batches(dropper: BpfObject) -> None:
    before = runs(dropper, 0)
    result = test_run(
        dropper.program("xdp_verdict"), FRAME, repeat=1000, flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=16
    )
    assert result.data_out == b"" and result.ctx_out is None
    assert runs(dropper, 0) == before + 1000


def test_signal_to_the_running_thread_interrupts_a_live_run(dropper: BpfObject) -> None:
    program = dropper.program("xdp_verdict")
    outcome: list[BaseException | object] = []

    def run_until_stopped() -> None:
        try:
            outcome.append(
                test_run(program, FRAME, repeat=2**31 - 1, flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=64)
            )
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            outcome.append(error)

    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    worker = threading.Thread(target=run_until_stopped, name="lfp-live-run")
    try:
        worker.start()
        # The GIL is released during the syscall, so this thread keeps running;
        # signal until the worker leaves (a signal sent before the syscall
        # starts is simply consumed by Python's handler).
        for _attempt in range(2000):  # bounded: a stuck run fails the test instead of hanging
            if not worker.is_alive():
                break
            signal.pthread_kill(worker.ident or 0, signal.SIGUSR1)
            worker.join(0.05)
    finally:
        if worker.is_alive() and worker.ident is not None:
            signal.pthread_kill(worker.ident, signal.SIGUSR1)
        worker.join(10)
        signal.signal(signal.SIGUSR1, previous)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], TestRunInterrupted), outcome
    assert outcome[0].errno == 4
    assert runs(dropper, 0) > 0
