"""Exceptions raised by the datapath binding.

Every error names the operation that failed so a log line is actionable on
its own; errors the user fixes outside LinuxFP name the package or setting.
"""

from __future__ import annotations

import errno as errno_module
import os


class BpfError(Exception):
    """A bpf syscall or libbpf call failed; ``errno`` is the positive errno."""

    def __init__(self, operation: str, errno: int, detail: str = "") -> None:
        self.operation = operation
        self.errno = errno
        self.detail = detail
        name = errno_module.errorcode.get(errno, str(errno))
        message = f"{operation}: {os.strerror(errno)} ({name})"
        if detail:
            message = f"{message}\n{detail}"
        super().__init__(message)


class VerifierError(BpfError):
    """The kernel verifier rejected a program; ``log`` is the whole verifier log."""

    def __init__(self, operation: str, errno: int, log: str, program: str | None) -> None:
        self.log = log
        self.program = program
        super().__init__(operation, errno, verifier_log_tail(log))


class KernelHazard(BpfError):
    """A program was loaded but must not be used: keeping it could crash the
    kernel (see linuxfp/datapath/hazards.py). It has been closed already."""

    def __init__(self, message: str, errno: int) -> None:
        super().__init__(message, errno)


class TestRunInterrupted(BpfError):
    """BPF_PROG_TEST_RUN stopped early because a signal reached the calling thread.

    The kernel reports no retval, output or duration for an interrupted run.
    """

    __test__ = False  # not a pytest test class despite the name


class DependencyError(Exception):
    """The host lacks something the binding needs (package, privilege, kernel setting)."""


_SUMMARY_PREFIXES = (
    "processed ",
    "verification time",
    "stack depth",
    "max_states_per_insn",
    "peak_states",
    "mark_read",
)
_TAIL_LINES = 16


def verifier_log_tail(log: str) -> str:
    """The verifier's last meaningful lines, starting at the last C source annotation.

    The verifier prints ``; <C source>`` lines when the object carries BTF line
    info; the last one before the error is the line a developer needs to see.
    """
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    while lines and lines[-1].startswith(_SUMMARY_PREFIXES):
        lines.pop()
    if not lines:
        return "(the verifier printed no log)"
    source_indexes = [i for i, line in enumerate(lines) if line.startswith(";")]
    tail_start = max(0, len(lines) - _TAIL_LINES)
    if not source_indexes:
        return "\n".join(lines[tail_start:])
    last_source = source_indexes[-1]
    if last_source >= tail_start:
        return "\n".join(lines[min(last_source, max(0, len(lines) - 6)):])
    # The annotation is far above the error: keep it, elide what lies between.
    return "\n".join([lines[last_source], "..."] + lines[tail_start:])
