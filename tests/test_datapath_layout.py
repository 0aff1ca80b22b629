"""The ctypes mirrors of libbpf structs match the installed headers; pure helpers."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bpf"))
from datapath_support import BPF_DIR, REPO_ROOT  # noqa: E402

from linuxfp.datapath import info, libbpf  # noqa: E402
from linuxfp.datapath.errors import verifier_log_tail  # noqa: E402


@pytest.fixture(scope="module")
def header_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    binary = tmp_path_factory.mktemp("layout") / "layout"
    subprocess.run(["clang", "-O0", "-o", str(binary), str(BPF_DIR / "layout.c")], check=True)
    output = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    layout = {}
    for line in output.splitlines():
        key, value = line.rsplit(" ", 1)
        layout[key] = int(value)
    return layout


MIRRORS = {
    "bpf_object_open_opts": libbpf.BpfObjectOpenOpts,
    "bpf_test_run_opts": libbpf.BpfTestRunOpts,
    "bpf_link_create_opts": libbpf.BpfLinkCreateOpts,
    "bpf_link_update_opts": libbpf.BpfLinkUpdateOpts,
    "bpf_map_batch_opts": libbpf.BpfMapBatchOpts,
    "bpf_xdp_query_opts": libbpf.BpfXdpQueryOpts,
    "bpf_tc_hook": libbpf.BpfTcHook,
    "bpf_tc_opts": libbpf.BpfTcOpts,
    "btf_type": libbpf.BtfType,
    "btf_var_secinfo": libbpf.BtfVarSecinfo,
}


@pytest.mark.parametrize("c_name", sorted(MIRRORS))
def test_struct_mirror_matches_header(header_layout: dict[str, int], c_name: str) -> None:
    mirror = MIRRORS[c_name]
    assert ctypes.sizeof(mirror) == header_layout[f"{c_name} sizeof"]
    for key, offset in header_layout.items():
        struct_name, _, field = key.partition(".")
        if struct_name == c_name and field and hasattr(mirror, field):
            assert getattr(mirror, field).offset == offset, key


def test_info_offsets_match_uapi(header_layout: dict[str, int]) -> None:
    expected = {
        "bpf_prog_info.type": info.PROG_INFO_TYPE,
        "bpf_prog_info.id": info.PROG_INFO_ID,
        "bpf_prog_info.tag": info.PROG_INFO_TAG,
        "bpf_prog_info.name": info.PROG_INFO_NAME,
        "bpf_prog_info.ifindex": info.PROG_INFO_IFINDEX,
        "bpf_prog_info.xlated_prog_len": info.PROG_INFO_XLATED_LEN,
        "bpf_prog_info.nr_map_ids": info.PROG_INFO_NR_MAP_IDS,
        "bpf_prog_info.map_ids": info.PROG_INFO_MAP_IDS,
        "bpf_map_info.type": info.MAP_INFO_TYPE,
        "bpf_map_info.id": info.MAP_INFO_ID,
        "bpf_map_info.key_size": info.MAP_INFO_KEY_SIZE,
        "bpf_map_info.value_size": info.MAP_INFO_VALUE_SIZE,
        "bpf_map_info.max_entries": info.MAP_INFO_MAX_ENTRIES,
        "bpf_map_info.map_flags": info.MAP_INFO_MAP_FLAGS,
        "bpf_map_info.name": info.MAP_INFO_NAME,
        "bpf_link_info.type": info.LINK_INFO_TYPE,
        "bpf_link_info.id": info.LINK_INFO_ID,
        "bpf_link_info.prog_id": info.LINK_INFO_PROG_ID,
        "bpf_link_info.xdp.ifindex": info.LINK_INFO_UNION,
    }
    for key, offset in expected.items():
        assert header_layout[key] == offset, key


def test_missing_libbpf_names_the_debian_package() -> None:
    script = (
        "import linuxfp.datapath.libbpf as l\n"
        "l.LIBBPF_SONAME = 'libbpf.so.404'\n"
        "try:\n"
        "    l.lib()\n"
        "except l.DependencyError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert "libbpf1" in result.stdout
    assert "apt-get install" in result.stdout


VERIFIER_LOG = """\
0: R1=ctx() R10=fp0
; unsigned char *data = (void *)(long)ctx->data; @ bad.c:11
0: (61) r1 = *(u32 *)(r1 +0)          ; R1=pkt(r=0)
; return data[12] == 0x08 ? XDP_PASS : XDP_DROP; @ bad.c:13
1: (71) r1 = *(u8 *)(r1 +12)
invalid access to packet, off=12 size=1, R1(id=0,off=12,r=0)
R1 offset is outside of the packet
processed 2 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0
"""


def test_verifier_tail_keeps_source_line_and_error_drops_summary() -> None:
    tail = verifier_log_tail(VERIFIER_LOG)
    assert "; return data[12] == 0x08" in tail
    assert tail.rstrip().endswith("R1 offset is outside of the packet")
    assert "processed 2 insns" not in tail


def test_verifier_tail_elides_long_gap_after_source_line() -> None:
    log = "; int x = f(); @ a.c:3\n" + "".join(f"{i}: (b7) r0 = {i}\n" for i in range(100)) + "R0 !read_ok\n"
    tail = verifier_log_tail(log).splitlines()
    assert tail[0] == "; int x = f(); @ a.c:3"
    assert tail[1] == "..."
    assert tail[-1] == "R0 !read_ok"
    assert len(tail) < 20


def test_verifier_tail_of_empty_log() -> None:
    assert "no log" in verifier_log_tail("")
