"""Map a verifier-rejected instruction back to its C source line, from the
object's DWARF line table (llvm-objdump), for when the kernel's log carries no
`; source` annotations."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile

_INSN = re.compile(r"^\s*(\d+):\s")
_LOCATION = re.compile(r"^; (/.*):(\d+)$")
_LOG_INSN = re.compile(r"^(\d+): \(")


def failing_instruction(verifier_log: str) -> int | None:
    """Index of the last instruction the verifier printed before giving up."""
    last = None
    for line in verifier_log.splitlines():
        m = _LOG_INSN.match(line)
        if m:
            last = int(m.group(1))
    return last


def source_line(obj: bytes, function: str, insn: int) -> str | None:
    """`file:line: text` of instruction `insn` of `function`, or None."""
    objdump = shutil.which("llvm-objdump") or shutil.which("llvm-objdump-14")
    if not objdump:
        return None
    with tempfile.NamedTemporaryFile(suffix=".o") as f:
        f.write(obj)
        f.flush()
        proc = subprocess.run([objdump, "-d", "-l", "--no-show-raw-insn", f.name],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    inside, where = False, None
    for line in proc.stdout.splitlines():
        if line.endswith(f"<{function}>:"):
            inside = True
            continue
        if not inside:
            continue
        if line.startswith("Disassembly of section"):
            break    # the next program; branch labels (<LBB...>) stay inside this one
        m = _LOCATION.match(line)
        if m:
            where = (m.group(1), int(m.group(2)))
            continue
        m = _INSN.match(line)
        if m and int(m.group(1)) == insn and where:
            path, number = where
            try:
                with open(path) as src:
                    text = src.read().splitlines()[number - 1].strip()
            except (OSError, IndexError):
                text = ""
            return f"{path}:{number}: {text}"
    return None


def describe_rejection(verifier_message: str, verifier_log: str, obj: bytes, function: str) -> str:
    """The verifier's message plus the C source line it stopped at."""
    insn = failing_instruction(verifier_log)
    where = source_line(obj, function, insn) if insn is not None else None
    return f"{verifier_message}\nC source: {where}" if where else verifier_message
