"""BpfObject: open, .rodata constants, verifier errors, programs, shared maps."""

from __future__ import annotations

import errno
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bpf"))
from datapath_support import REPO_ROOT, compile_bpf  # noqa: E402

from linuxfp.datapath import (  # noqa: E402
    BpfError,
    BpfObject,
    VerifierError,
    check_environment,
    prog_info,
    test_run,
    xdp_md,
)

XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX = 0, 1, 2, 3
BPF_PROG_TYPE_XDP = 6
FRAME = bytes(range(64))


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("bpf")
    return {name: compile_bpf(name, out) for name in ("datapath_test", "verifier_reject")}


def load(path: Path, rodata: dict[str, int | bytes] | None = None, name: str = "dptest") -> BpfObject:
    obj = BpfObject.open(path.read_bytes(), name=name)
    if rodata:
        obj.set_rodata(rodata)
    obj.load()
    return obj


def test_set_rodata_changes_the_verdict(objects: dict[str, Path]) -> None:
    verdicts = {}
    for wanted in (XDP_DROP, XDP_PASS, XDP_TX):
        with load(objects["datapath_test"], {"verdict": wanted}) as obj:
            program = obj.program("xdp_verdict")
            verdicts[wanted] = test_run(program.fd, FRAME).retval
            program.close()
    assert verdicts == {XDP_DROP: XDP_DROP, XDP_PASS: XDP_PASS, XDP_TX: XDP_TX}


def test_default_rodata_is_the_c_initialiser(objects: dict[str, Path]) -> None:
    with load(objects["datapath_test"]) as obj:
        assert test_run(obj.program("xdp_verdict").fd, FRAME).retval == XDP_PASS


def test_set_rodata_bytes_and_narrow_ints(objects: dict[str, Path]) -> None:
    mac = bytes.fromhex("020000c0ffee")
    with load(objects["datapath_test"], {"mark": 0x5A, "mac": mac, "verdict": XDP_TX, "wide": 2**64 - 1}) as obj:
        result = test_run(obj.program("xdp_mark").fd, FRAME)
    assert result.retval == XDP_TX
    assert result.data_out[0] == 0x5A
    assert result.data_out[6:12] == mac
    assert result.data_out[12:] == FRAME[12:]


def test_rodata_variables_come_from_btf_datasec(objects: dict[str, Path]) -> None:
    with BpfObject.open(objects["datapath_test"], name="dptest") as obj:
        variables = obj.rodata_variables()
    assert {name: v.size for name, v in variables.items()} == {"verdict": 4, "mark": 1, "wide": 8, "mac": 6}


def test_set_rodata_rejects_unknown_and_oversized(objects: dict[str, Path]) -> None:
    with BpfObject.open(objects["datapath_test"], name="dptest") as obj:
        with pytest.raises(KeyError, match="no_such_constant"):
            obj.set_rodata({"no_such_constant": 1})
        with pytest.raises(ValueError, match="mark"):
            obj.set_rodata({"mark": 256})
        with pytest.raises(ValueError, match="mac"):
            obj.set_rodata({"mac": bytes(7)})
        obj.set_rodata({"verdict": XDP_DROP})
        obj.load()
        with pytest.raises(BpfError, match="already loaded"):
            obj.set_rodata({"verdict": XDP_PASS})


def test_verifier_rejection_shows_log_and_source_line(objects: dict[str, Path]) -> None:
    with BpfObject.open(objects["verifier_reject"], name="reject") as obj:
        with pytest.raises(VerifierError) as caught:
            obj.load()
    error = caught.value
    message = str(error)
    assert error.errno == errno.EACCES
    assert error.program == "xdp_unchecked"
    assert "xdp_unchecked" in message
    assert "invalid access to packet" in message
    assert "; return data[12] == 0x08" in message  # the C line, from BTF line info
    assert "UNCHECKED-READ" in message
    assert "processed" in error.log and "invalid access to packet" in error.log


def test_program_attributes_survive_object_close(objects: dict[str, Path]) -> None:
    obj = load(objects["datapath_test"])
    program = obj.program("xdp_verdict")
    obj.close()
    try:
        assert program.name == "xdp_verdict"
        assert program.type == BPF_PROG_TYPE_XDP
        assert program.id > 0
        assert len(program.tag) == 16 and int(program.tag, 16) >= 0
        info = prog_info(program.fd)
        assert (info["id"], info["name"], info["tag"]) == (program.id, program.name, program.tag)
        assert test_run(program.fd, FRAME).retval == XDP_PASS
    finally:
        program.close()


def test_missing_program_and_map_raise_key_error(objects: dict[str, Path]) -> None:
    with load(objects["datapath_test"]) as obj:
        with pytest.raises(KeyError, match="nope"):
            obj.program("nope")
        with pytest.raises(KeyError, match="nope"):
            obj.map("nope")


def test_open_rejects_non_elf_bytes() -> None:
    with pytest.raises(BpfError, match="open BPF object"):
        BpfObject.open(b"not an ELF file", name="garbage")


def test_reuse_map_shares_one_map_between_objects(objects: dict[str, Path]) -> None:
    first = load(objects["datapath_test"], {"verdict": XDP_DROP}, name="first")
    shared = first.map("by_ifindex")
    second = BpfObject.open(objects["datapath_test"], name="second")
    try:
        second.reuse_map("by_ifindex", shared)
        second.load()
        assert second.map("by_ifindex").id == shared.id
        assert first.map("counters").id != second.map("counters").id
        test_run(second.program("xdp_mark").fd, FRAME, ctx_in=xdp_md(ingress_ifindex=1))
        assert shared.lookup(struct.pack("<I", 1)) == struct.pack("<Q", 1)
        with pytest.raises(KeyError, match="absent"):
            BpfObject.open(objects["datapath_test"], name="third").reuse_map("absent", shared)
    finally:
        shared.close()
        second.close()
        first.close()


def test_load_without_privileges_names_root(objects: dict[str, Path]) -> None:
    script = (
        "import sys\n"
        "from linuxfp.datapath import BpfObject, DependencyError\n"
        "try:\n"
        "    BpfObject.open(sys.stdin.buffer.read(), name='unpriv').load()\n"
        "except DependencyError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        ["setpriv", "--inh-caps=-all", "--bounding-set=-all", sys.executable, "-c", script],
        input=objects["datapath_test"].read_bytes(),
        capture_output=True,
        cwd=REPO_ROOT,
        check=True,
    )
    assert b"must run as root" in result.stdout, result.stderr


def test_check_environment_passes_as_root() -> None:
    check_environment()
