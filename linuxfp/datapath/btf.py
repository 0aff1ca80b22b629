"""Reading BTF: the variables of an object's DATASEC, the size of a kernel struct."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from .libbpf import BTF_KIND_DATASEC, BTF_KIND_STRUCT, BtfType, BtfVarSecinfo, lib


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
