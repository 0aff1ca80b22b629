"""Reading BTF: the variables of an object's DATASEC, the C types of a map's
key and value, the size of a kernel struct."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from .libbpf import (BTF_KIND_CONST, BTF_KIND_DATASEC, BTF_KIND_RESTRICT, BTF_KIND_STRUCT, BTF_KIND_UNION,
                     BTF_KIND_VOLATILE, BtfMember, BtfType, BtfVarSecinfo, lib)


@dataclass(frozen=True)
class SectionVariable:
    name: str
    offset: int
    size: int


def datasec_variables(btf: int, section: str) -> dict[str, SectionVariable]:
    """name -> (offset, size) of each variable in DATASEC ``section``; {} if absent.

    libbpf fixes DATASEC offsets and sizes while opening the object, so this
    is valid between open and load.
    """
    library = lib()
    type_id = library.btf__find_by_name_kind(btf, section.encode(), BTF_KIND_DATASEC)
    if type_id <= 0:
        return {}
    datasec = library.btf__type_by_id(btf, type_id)
    if not datasec:
        return {}
    vlen = datasec.contents.info & 0xFFFF
    # struct btf_var_secinfo entries follow struct btf_type directly.
    first = ctypes.addressof(datasec.contents) + ctypes.sizeof(BtfType)
    secinfos = (BtfVarSecinfo * vlen).from_address(first)
    variables: dict[str, SectionVariable] = {}
    for secinfo in secinfos:
        var = library.btf__type_by_id(btf, secinfo.type)
        if not var:
            continue
        raw_name = library.btf__name_by_offset(btf, var.contents.name_off) or b""
        name = raw_name.decode("utf-8", errors="replace")
        variables[name] = SectionVariable(name=name, offset=secinfo.offset, size=secinfo.size)
    return variables


@dataclass(frozen=True)
class CTypeShape:
    """A C type as an object's BTF describes it: "struct NAME" with its
    members (name, offset and size in bits: a bitfield's are its own), or a
    scalar's name (the typedef as written, e.g. "__be32") with members None.
    size: bytes."""

    name: str
    size: int
    members: tuple[tuple[str, int, int], ...] | None = None


_QUALIFIERS = (BTF_KIND_VOLATILE, BTF_KIND_CONST, BTF_KIND_RESTRICT)


def type_shape(btf: int, type_id: int) -> CTypeShape | None:
    """The shape of BTF type `type_id` (qualifiers skipped); None for
    type 0 (a map declared by sizes only)."""
    library = lib()
    while type_id:
        found = library.btf__type_by_id(btf, type_id)
        if not found:
            return None
        kind = (found.contents.info >> 24) & 0x1F
        if kind not in _QUALIFIERS:
            break
        type_id = found.contents.size_or_type
    else:
        return None
    info = found.contents.info
    name = (library.btf__name_by_offset(btf, found.contents.name_off) or b"").decode("utf-8", "replace")
    size = int(library.btf__resolve_size(btf, type_id))
    if kind not in (BTF_KIND_STRUCT, BTF_KIND_UNION):
        return CTypeShape(name, size)
    vlen, bitfields = info & 0xFFFF, bool(info >> 31)
    first = ctypes.addressof(found.contents) + ctypes.sizeof(BtfType)
    members = []
    for member in (BtfMember * vlen).from_address(first):
        member_name = (library.btf__name_by_offset(btf, member.name_off) or b"").decode("utf-8", "replace")
        if bitfields and member.offset >> 24:
            members.append((member_name, member.offset & 0xFFFFFF, member.offset >> 24))
        else:
            bits = member.offset & 0xFFFFFF if bitfields else member.offset
            members.append((member_name, bits, 8 * int(library.btf__resolve_size(btf, member.type))))
    return CTypeShape(f"{'struct' if kind == BTF_KIND_STRUCT else 'union'} {name}", size, tuple(members))


@functools.cache
def kernel_struct_size(name: str) -> int | None:
    """sizeof(struct `name`) in the running kernel, from its BTF; None if unknown."""
    library = lib()
    btf = library.btf__load_vmlinux_btf()
    if not btf:
        return None
    try:
        type_id = library.btf__find_by_name_kind(btf, name.encode(), BTF_KIND_STRUCT)
        if type_id <= 0:
            return None
        found = library.btf__type_by_id(btf, type_id)
        return int(found.contents.size_or_type) if found else None
    finally:
        library.btf__free(btf)
