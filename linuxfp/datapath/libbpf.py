"""ctypes declarations for libbpf.so.1 (Debian libbpf1 1.1.2) and the libc calls we need.

This is the only file that knows C signatures and struct layouts; every other
module calls ``lib()`` / ``libc()`` and gets typed functions. Layouts follow
/usr/include/bpf/{libbpf,bpf}.h of libbpf 1.1.2 on LP64 and are checked by
tests/test_datapath_layout.py against the real headers.

libbpf runs in "1.0 mode": functions return ``-errno`` (and set errno) on
failure, pointer-returning functions return NULL and set errno.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import threading
from collections.abc import Iterator
from typing import TypeVar
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_int,
    c_long,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_ulong,
    c_void_p,
)

from .errors import DependencyError

logger = logging.getLogger("linuxfp.datapath.libbpf")

LIBBPF_SONAME = "libbpf.so.1"

# enum libbpf_print_level
LIBBPF_WARN = 0
LIBBPF_INFO = 1
LIBBPF_DEBUG = 2

# enum bpf_attach_type (uapi); the TCX values postdate the 6.1 uapi headers.
BPF_XDP = 37
BPF_TCX_INGRESS = 46
BPF_TCX_EGRESS = 47

# enum bpf_link_type
BPF_LINK_TYPE_XDP = 6
BPF_LINK_TYPE_TCX = 11

# XDP attach flags (uapi if_link.h)
XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
XDP_FLAGS_HW_MODE = 1 << 3

# enum xdp_attached (IFLA_XDP_ATTACHED)
XDP_ATTACHED_NONE = 0
XDP_ATTACHED_DRV = 1
XDP_ATTACHED_SKB = 2
XDP_ATTACHED_HW = 3
XDP_ATTACHED_MULTI = 4

# BPF_MAP_UPDATE_ELEM flags
BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2

# BPF_PROG_TEST_RUN flags
BPF_F_TEST_RUN_ON_CPU = 1 << 0
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1
# Program load flag (uapi bpf.h; newer than libbpf 1.1's headers): the XDP
# program is bound to one device and may call its rx-metadata kfuncs.
BPF_F_XDP_DEV_BOUND_ONLY = 1 << 6

# enum bpf_tc_attach_point / bpf_tc_flags
BPF_TC_INGRESS = 1 << 0
BPF_TC_EGRESS = 1 << 1
BPF_TC_F_REPLACE = 1 << 0

# BTF kinds (uapi btf.h)
BTF_KIND_INT = 1
BTF_KIND_ARRAY = 3
BTF_KIND_STRUCT = 4
BTF_KIND_UNION = 5
BTF_KIND_TYPEDEF = 8
BTF_KIND_VOLATILE = 9
BTF_KIND_CONST = 10
BTF_KIND_RESTRICT = 11
BTF_KIND_VAR = 14
BTF_KIND_DATASEC = 15

# The kernel returns ENOTSUPP (not in userspace errno.h) for unsupported map ops.
ENOTSUPP = 524

BPF_FS_MAGIC = 0xCAFE4A11


class BpfObjectOpenOpts(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("object_name", c_char_p),
        ("relaxed_maps", c_bool),
        ("pin_root_path", c_char_p),
        ("_removed_attach_prog_fd", c_uint32),
        ("kconfig", c_char_p),
        ("btf_custom_path", c_char_p),
        ("kernel_log_buf", c_void_p),
        ("kernel_log_size", c_size_t),
        ("kernel_log_level", c_uint32),
    ]


class BpfTestRunOpts(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("data_in", c_void_p),
        ("data_out", c_void_p),
        ("data_size_in", c_uint32),
        ("data_size_out", c_uint32),
        ("ctx_in", c_void_p),
        ("ctx_out", c_void_p),
        ("ctx_size_in", c_uint32),
        ("ctx_size_out", c_uint32),
        ("retval", c_uint32),
        ("repeat", c_int),
        ("duration", c_uint32),
        ("flags", c_uint32),
        ("cpu", c_uint32),
        ("batch_size", c_uint32),
    ]


class BpfLinkCreateOpts(Structure):
    # Only the leading fields we set; the trailing union is left zero by
    # declaring it as opaque words so sizeof matches the header.
    _fields_ = [
        ("sz", c_size_t),
        ("flags", c_uint32),
        ("iter_info", c_void_p),
        ("iter_info_len", c_uint32),
        ("target_btf_id", c_uint32),
        ("_union", c_uint64 * 4),
    ]


class BpfLinkUpdateOpts(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("flags", c_uint32),
        ("old_prog_fd", c_uint32),
    ]


class BpfMapCreateOpts(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("btf_fd", c_uint32),
        ("btf_key_type_id", c_uint32),
        ("btf_value_type_id", c_uint32),
        ("btf_vmlinux_value_type_id", c_uint32),
        ("inner_map_fd", c_uint32),
        ("map_flags", c_uint32),
        ("map_extra", c_uint64),
        ("numa_node", c_uint32),
        ("map_ifindex", c_uint32),
    ]


class BpfMapBatchOpts(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("elem_flags", c_uint64),
        ("flags", c_uint64),
    ]


class BpfXdpQueryOpts(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("prog_id", c_uint32),
        ("drv_prog_id", c_uint32),
        ("hw_prog_id", c_uint32),
        ("skb_prog_id", c_uint32),
        ("attach_mode", c_uint8),
    ]


class BpfTcHook(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("ifindex", c_int),
        ("attach_point", c_int),
        ("parent", c_uint32),
    ]


class BpfTcOpts(Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("prog_fd", c_int),
        ("flags", c_uint32),
        ("prog_id", c_uint32),
        ("handle", c_uint32),
        ("priority", c_uint32),
    ]


class BtfType(Structure):
    """struct btf_type: name_off, info (vlen | kind << 24 | kflag << 31), size/type."""

    _fields_ = [
        ("name_off", c_uint32),
        ("info", c_uint32),
        ("size_or_type", c_uint32),
    ]


class BtfMember(Structure):
    """struct btf_member: follows a struct's btf_type, vlen of them."""

    _fields_ = [
        ("name_off", c_uint32),
        ("type", c_uint32),
        ("offset", c_uint32),    # bits; with kflag: bitfield size << 24 | bit offset
    ]


class BtfVarSecinfo(Structure):
    _fields_ = [
        ("type", c_uint32),
        ("offset", c_uint32),
        ("size", c_uint32),
    ]


_Opts = TypeVar("_Opts", bound=Structure)


def new_opts(struct_type: type[_Opts], **fields: object) -> _Opts:
    """A zeroed libbpf opts struct with ``sz`` filled, as LIBBPF_OPTS() does."""
    opts = struct_type()
    opts.sz = ctypes.sizeof(struct_type)
    for name, value in fields.items():
        setattr(opts, name, value)
    return opts


# int (*libbpf_print_fn_t)(enum libbpf_print_level, const char *, va_list);
# On x86-64 and arm64-Linux a va_list argument travels as a pointer.
PRINT_FN = CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)

_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    # print / misc
    "libbpf_set_print": (c_void_p, [PRINT_FN]),
    "libbpf_num_possible_cpus": (c_int, []),
    # objects
    "bpf_object__open_mem": (c_void_p, [c_void_p, c_size_t, POINTER(BpfObjectOpenOpts)]),
    "bpf_object__open_file": (c_void_p, [c_char_p, POINTER(BpfObjectOpenOpts)]),
    "bpf_object__load": (c_int, [c_void_p]),
    "bpf_object__close": (None, [c_void_p]),
    "bpf_object__name": (c_char_p, [c_void_p]),
    "bpf_object__btf": (c_void_p, [c_void_p]),
    "bpf_object__find_program_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_object__next_program": (c_void_p, [c_void_p, c_void_p]),
    "bpf_object__find_map_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_object__next_map": (c_void_p, [c_void_p, c_void_p]),
    # programs
    "bpf_program__name": (c_char_p, [c_void_p]),
    "bpf_program__section_name": (c_char_p, [c_void_p]),
    "bpf_program__set_ifindex": (None, [c_void_p, c_uint32]),
    "bpf_prog_query": (c_int, [c_int, c_int, c_uint32, POINTER(c_uint32), POINTER(c_uint32), POINTER(c_uint32)]),
    "bpf_program__flags": (c_uint32, [c_void_p]),
    "bpf_program__set_flags": (c_int, [c_void_p, c_uint32]),
    "bpf_program__set_autoload": (c_int, [c_void_p, c_bool]),
    # ring buffers (linuxfp/datapath/ringbuf.py)
    "ring_buffer__new": (c_void_p, [c_int, c_void_p, c_void_p, c_void_p]),
    "ring_buffer__consume": (c_int, [c_void_p]),
    "ring_buffer__free": (None, [c_void_p]),
    "bpf_program__fd": (c_int, [c_void_p]),
    "bpf_program__insn_cnt": (c_size_t, [c_void_p]),
    "bpf_program__type": (c_int, [c_void_p]),
    # maps (object side)
    "bpf_map__name": (c_char_p, [c_void_p]),
    "bpf_map__fd": (c_int, [c_void_p]),
    "bpf_map__type": (c_int, [c_void_p]),
    "bpf_map__is_internal": (c_bool, [c_void_p]),
    "bpf_map__initial_value": (c_void_p, [c_void_p, POINTER(c_size_t)]),
    "bpf_map__set_initial_value": (c_int, [c_void_p, c_void_p, c_size_t]),
    "bpf_map__reuse_fd": (c_int, [c_void_p, c_int]),
    "bpf_map__set_max_entries": (c_int, [c_void_p, c_uint32]),
    "bpf_map__key_size": (c_uint32, [c_void_p]),
    "bpf_map__value_size": (c_uint32, [c_void_p]),
    "bpf_map__btf_key_type_id": (c_uint32, [c_void_p]),
    "bpf_map__btf_value_type_id": (c_uint32, [c_void_p]),
    # BTF
    "btf__find_by_name_kind": (c_int, [c_void_p, c_char_p, c_uint32]),
    "btf__type_by_id": (POINTER(BtfType), [c_void_p, c_uint32]),
    "btf__name_by_offset": (c_char_p, [c_void_p, c_uint32]),
    "btf__resolve_size": (ctypes.c_int64, [c_void_p, c_uint32]),
    "btf__load_vmlinux_btf": (c_void_p, []),
    "btf__free": (None, [c_void_p]),
    # low-level map syscalls
    "bpf_map_create": (c_int, [c_int, c_char_p, c_uint32, c_uint32, c_uint32, c_void_p]),
    "bpf_map_lookup_elem": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_update_elem": (c_int, [c_int, c_void_p, c_void_p, c_uint64]),
    "bpf_map_delete_elem": (c_int, [c_int, c_void_p]),
    "bpf_map_get_next_key": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_lookup_batch": (
        c_int,
        [c_int, c_void_p, c_void_p, c_void_p, c_void_p, POINTER(c_uint32), POINTER(BpfMapBatchOpts)],
    ),
    "bpf_map_update_batch": (c_int, [c_int, c_void_p, c_void_p, POINTER(c_uint32), POINTER(BpfMapBatchOpts)]),
    "bpf_map_delete_batch": (c_int, [c_int, c_void_p, POINTER(c_uint32), POINTER(BpfMapBatchOpts)]),
    # object files, ids, info
    "bpf_obj_pin": (c_int, [c_int, c_char_p]),
    "bpf_obj_get": (c_int, [c_char_p]),
    "bpf_obj_get_info_by_fd": (c_int, [c_int, c_void_p, POINTER(c_uint32)]),
    "bpf_prog_bind_map": (c_int, [c_int, c_int, c_void_p]),
    "bpf_map_get_fd_by_id": (c_int, [c_uint32]),
    "bpf_prog_get_fd_by_id": (c_int, [c_uint32]),
    "bpf_link_get_fd_by_id": (c_int, [c_uint32]),
    # links
    "bpf_link_create": (c_int, [c_int, c_int, c_int, POINTER(BpfLinkCreateOpts)]),
    "bpf_link_update": (c_int, [c_int, c_int, POINTER(BpfLinkUpdateOpts)]),
    "bpf_link_detach": (c_int, [c_int]),
    # test run
    "bpf_prog_test_run_opts": (c_int, [c_int, POINTER(BpfTestRunOpts)]),
    # netlink helpers inside libbpf
    "bpf_xdp_query": (c_int, [c_int, c_int, POINTER(BpfXdpQueryOpts)]),
    "bpf_tc_hook_create": (c_int, [POINTER(BpfTcHook)]),
    "bpf_tc_hook_destroy": (c_int, [POINTER(BpfTcHook)]),
    "bpf_tc_attach": (c_int, [POINTER(BpfTcHook), POINTER(BpfTcOpts)]),
    "bpf_tc_detach": (c_int, [POINTER(BpfTcHook), POINTER(BpfTcOpts)]),
    "bpf_tc_query": (c_int, [POINTER(BpfTcHook), POINTER(BpfTcOpts)]),
}

_LIBC_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "vsnprintf": (c_int, [c_char_p, c_size_t, c_char_p, c_void_p]),
    "statfs": (c_int, [c_char_p, c_void_p]),
    "mount": (c_int, [c_char_p, c_char_p, c_char_p, c_ulong, c_char_p]),
    "umount2": (c_int, [c_char_p, c_int]),
}


def _declare(library: ctypes.CDLL, signatures: dict[str, tuple[object, list[object]]]) -> None:
    for name, (restype, argtypes) in signatures.items():
        function = getattr(library, name)
        function.restype = restype
        function.argtypes = argtypes


@functools.cache
def libc() -> ctypes.CDLL:
    library = ctypes.CDLL("libc.so.6", use_errno=True)
    _declare(library, _LIBC_SIGNATURES)
    return library


@functools.cache
def lib() -> ctypes.CDLL:
    """libbpf.so.1 with every function we use declared; installs the print hook once."""
    try:
        library = ctypes.CDLL(LIBBPF_SONAME, use_errno=True)
    except OSError as error:
        raise DependencyError(
            f"cannot load {LIBBPF_SONAME} ({error}); install the Debian package "
            "libbpf1 (apt-get install libbpf1)"
        ) from error
    try:
        _declare(library, _SIGNATURES)
    except AttributeError as error:
        raise DependencyError(
            f"{LIBBPF_SONAME} lacks a function LinuxFP needs ({error}); "
            "install libbpf1 >= 1.1 (Debian 12's libbpf1 1.1.2 works)"
        ) from error
    library.libbpf_set_print(_print_callback)
    return library


# --- libbpf's print output -------------------------------------------------
#
# libbpf reports why an open/load failed only through its print callback. We
# format each message with libc's vsnprintf and append it to the calling
# thread's capture list (if one is active) and to Python logging.

_PRINT_BUFFER_SIZE = 64 * 1024
_captures = threading.local()


def _format(fmt: bytes, va_list: int | None) -> str:
    buffer = ctypes.create_string_buffer(_PRINT_BUFFER_SIZE)
    libc().vsnprintf(buffer, _PRINT_BUFFER_SIZE, fmt, va_list)
    return buffer.value.decode("utf-8", errors="replace")


def _on_print(level: int, fmt: bytes, va_list: int | None) -> int:
    lines: list[str] | None = getattr(_captures, "lines", None)
    wanted = (lines is not None and level <= LIBBPF_INFO) or logger.isEnabledFor(
        logging.WARNING if level == LIBBPF_WARN else logging.DEBUG
    )
    if not wanted:
        return 0
    try:
        text = _format(fmt, va_list).rstrip("\n")
    except Exception:  # never let an exception unwind into C
        return 0
    if lines is not None and level <= LIBBPF_INFO:
        lines.append(text)
        # The caller turns captured warnings into its exception's text.
        logger.debug("%s", text)
    else:
        logger.log(logging.WARNING if level == LIBBPF_WARN else logging.DEBUG, "%s", text)
    return 0


_print_callback = PRINT_FN(_on_print)


@contextlib.contextmanager
def capture_libbpf_output() -> Iterator[list[str]]:
    """Collect libbpf's warn/info messages printed by this thread inside the block."""
    previous = getattr(_captures, "lines", None)
    lines: list[str] = []
    _captures.lines = lines
    try:
        yield lines
    finally:
        _captures.lines = previous


def errno_of(result: int) -> int:
    """The positive errno of a failed libbpf call (its return value or errno)."""
    if result < 0:
        return -result
    return ctypes.get_errno() or 1


def bytes_at(address: int, size: int) -> bytes:
    return ctypes.string_at(address, size)


def statfs_magic(path: str) -> int:
    """f_type of statfs(2) for path; raises OSError."""
    # struct statfs is 120 bytes on x86-64/arm64; f_type is its first word.
    buffer = ctypes.create_string_buffer(256)
    if libc().statfs(path.encode(), buffer) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"statfs {path}", path)
    return c_long.from_buffer(buffer).value & 0xFFFFFFFF
