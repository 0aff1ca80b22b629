"""bpf_obj_get_info_by_fd for programs, maps and links, as plain dicts.

The uapi info structs keep growing; we hand the kernel a zeroed buffer larger
than any field we read and decode only the stable leading fields at their
uapi offsets (checked against the headers by tests/test_datapath_layout.py).
"""

from __future__ import annotations

import ctypes
import errno
import struct
from typing import Any

from .errors import BpfError
from .libbpf import BPF_LINK_TYPE_TCX, BPF_LINK_TYPE_XDP, BPF_XDP, errno_of, lib

_INFO_BUFFER_SIZE = 512

# struct bpf_prog_info
PROG_INFO_TYPE = 0
PROG_INFO_ID = 4
PROG_INFO_TAG = 8
PROG_INFO_XLATED_LEN = 20
PROG_INFO_NR_MAP_IDS = 52
PROG_INFO_MAP_IDS = 56
PROG_INFO_NAME = 64
PROG_INFO_IFINDEX = 80

# struct bpf_map_info
MAP_INFO_TYPE = 0
MAP_INFO_ID = 4
MAP_INFO_KEY_SIZE = 8
MAP_INFO_VALUE_SIZE = 12
MAP_INFO_MAX_ENTRIES = 16
MAP_INFO_MAP_FLAGS = 20
MAP_INFO_NAME = 24

# struct bpf_link_info: the per-type union starts at 16 (it holds __u64s)
LINK_INFO_TYPE = 0
LINK_INFO_ID = 4
LINK_INFO_PROG_ID = 8
LINK_INFO_UNION = 16


def _info(fd: int, what: str) -> bytes:
    buffer = ctypes.create_string_buffer(_INFO_BUFFER_SIZE)
    length = ctypes.c_uint32(_INFO_BUFFER_SIZE)
    result = lib().bpf_obj_get_info_by_fd(fd, buffer, ctypes.byref(length))
    if result != 0:
        raise BpfError(f"bpf_obj_get_info_by_fd({what} fd {fd})", errno_of(result))
    return buffer.raw


def _u32(raw: bytes, offset: int) -> int:
    return int(struct.unpack_from("<I", raw, offset)[0])


def _name(raw: bytes, offset: int) -> str:
    return raw[offset : offset + 16].split(b"\0", 1)[0].decode("utf-8", errors="replace")


def prog_info(fd: int) -> dict[str, Any]:
    """{'id', 'type', 'tag' (hex), 'name', 'ifindex', 'xlated_len'} of a program fd.
    xlated_len: bytes of the program as verified (after the verifier's
    rewrites and dead-code removal)."""
    raw = _info(fd, "prog")
    return {
        "id": _u32(raw, PROG_INFO_ID),
        "type": _u32(raw, PROG_INFO_TYPE),
        "tag": raw[PROG_INFO_TAG : PROG_INFO_TAG + 8].hex(),
        "name": _name(raw, PROG_INFO_NAME),
        "ifindex": _u32(raw, PROG_INFO_IFINDEX),
        "xlated_len": _u32(raw, PROG_INFO_XLATED_LEN),
    }


def prog_map_ids(fd: int, most: int = 64) -> tuple[int, ...]:
    """The ids of the maps a program uses (bpf_prog_info.map_ids); a
    BpfError (E2BIG) when it uses more than `most`."""
    ids = (ctypes.c_uint32 * most)()
    buffer = ctypes.create_string_buffer(_INFO_BUFFER_SIZE)
    struct.pack_into("<I", buffer, PROG_INFO_NR_MAP_IDS, most)
    struct.pack_into("<Q", buffer, PROG_INFO_MAP_IDS, ctypes.addressof(ids))
    length = ctypes.c_uint32(_INFO_BUFFER_SIZE)
    result = lib().bpf_obj_get_info_by_fd(fd, buffer, ctypes.byref(length))
    if result != 0:
        raise BpfError(f"bpf_obj_get_info_by_fd(prog fd {fd})", errno_of(result))
    count = _u32(buffer.raw, PROG_INFO_NR_MAP_IDS)
    if count > most:
        raise BpfError(f"prog fd {fd} uses {count} maps, more than the {most} asked for", errno.E2BIG)
    return tuple(ids[:count])


def bind_map(prog_fd: int, map_fd: int) -> None:
    """Make a program use a map it does not reference (BPF_PROG_BIND_MAP):
    the map lives as long as the program and is among its map_ids."""
    result = lib().bpf_prog_bind_map(prog_fd, map_fd, None)
    if result != 0:
        raise BpfError(f"bpf_prog_bind_map(prog fd {prog_fd}, map fd {map_fd})", errno_of(result))


def map_info(fd: int) -> dict[str, Any]:
    """{'id', 'type', 'name', 'key_size', 'value_size', 'max_entries', 'map_flags'} of a map fd."""
    raw = _info(fd, "map")
    return {
        "id": _u32(raw, MAP_INFO_ID),
        "type": _u32(raw, MAP_INFO_TYPE),
        "name": _name(raw, MAP_INFO_NAME),
        "key_size": _u32(raw, MAP_INFO_KEY_SIZE),
        "value_size": _u32(raw, MAP_INFO_VALUE_SIZE),
        "max_entries": _u32(raw, MAP_INFO_MAX_ENTRIES),
        "map_flags": _u32(raw, MAP_INFO_MAP_FLAGS),
    }


def link_info(fd: int) -> dict[str, int]:
    """{'id', 'type', 'prog_id', 'ifindex', 'attach_type'} of a link fd.

    ifindex/attach_type are filled for XDP and tcx links and 0 otherwise.
    """
    raw = _info(fd, "link")
    link_type = _u32(raw, LINK_INFO_TYPE)
    ifindex = 0
    attach_type = 0
    if link_type == BPF_LINK_TYPE_XDP:
        ifindex = _u32(raw, LINK_INFO_UNION)
        attach_type = BPF_XDP
    elif link_type == BPF_LINK_TYPE_TCX:
        ifindex = _u32(raw, LINK_INFO_UNION)
        attach_type = _u32(raw, LINK_INFO_UNION + 4)
    return {
        "id": _u32(raw, LINK_INFO_ID),
        "type": link_type,
        "prog_id": _u32(raw, LINK_INFO_PROG_ID),
        "ifindex": ifindex,
        "attach_type": attach_type,
    }
