"""How much dead-code headroom a device-bound program carries
(lfp_realloc_headroom() in bpf_modules/common.h): enough that the verifier's
rewrites never make it outgrow the kernel's first allocation. Those rewrites
(inlined map lookups, helper and kfunc fixups) grow with the program, so the
headroom does too; it is read from the compiled object's own section."""
from __future__ import annotations

import struct

MINIMUM = 512
STEP = 256
# Rewrites measured here add up to ~27 % of a pipeline's instructions (the
# bridge + router + filter pipeline: ~650 on ~2400); half leaves margin.
SHARE = 0.5
INSN_SIZE = 8


def headroom_for(code_insns: int) -> int:
    """Headroom for a program of `code_insns` instructions besides it."""
    wanted = int(code_insns * SHARE)
    return max(MINIMUM, -(-wanted // STEP) * STEP)


def section_insns(elf: bytes, section: str) -> int:
    """Instructions in the ELF64 (little-endian) object's `section` (0
    when it has none)."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    names_offset = struct.unpack_from("<Q", elf, shoff + shstrndx * shentsize + 0x18)[0]
    for index in range(shnum):
        header = shoff + index * shentsize
        name_at, = struct.unpack_from("<I", elf, header)
        end = elf.index(b"\0", names_offset + name_at)
        if elf[names_offset + name_at:end].decode() == section:
            size, = struct.unpack_from("<Q", elf, header + 0x20)
            return size // INSN_SIZE
    return 0
