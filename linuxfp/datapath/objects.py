"""BPF ELF objects through libbpf: open, set .rodata constants, share maps, load."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import re
from collections.abc import Mapping
from types import TracebackType

from . import pins
from .btf import CTypeShape, SectionVariable, datasec_variables, type_shape
from .environment import explain_load_failure
from .errors import BpfError, VerifierError
from .fds import OwnedFd, fd_kind
from .info import prog_info
from . import hazards
from .errors import KernelHazard
from .libbpf import (BPF_F_XDP_DEV_BOUND_ONLY, BTF_KIND_STRUCT, BpfObjectOpenOpts, capture_libbpf_output, errno_of,
                     lib, new_opts)
from .maps import Map

# With log_level 0 libbpf loads silently and, on failure, reloads the failing
# program with log_level 1 into this buffer. Kernels >= 6.4 keep the log's
# tail when it overflows, which is the part that names the error.
_VERIFIER_LOG_SIZE = 16 * 1024 * 1024


class _LogBuffer:
    """Anonymous mmap for the kernel's verifier log: pages cost nothing until written."""

    def __init__(self, size: int) -> None:
        self._area: mmap.mmap | None = mmap.mmap(-1, size)
        self._anchor: ctypes.c_char | None = ctypes.c_char.from_buffer(self._area)
        self.size = size
        self.address = ctypes.addressof(self._anchor)

    def text(self) -> str:
        if self._area is None:
            return ""
        end = self._area.find(b"\0")
        return self._area[: end if end >= 0 else self.size].decode("utf-8", errors="replace")

    def release(self) -> None:
        self._anchor = None  # drop the buffer export before unmapping
        if self._area is not None:
            self._area.close()
            self._area = None

_FAILED_PROGRAM = re.compile(r"prog '([^']+)': (?:BPF program load failed|failed to load)")


class Program:
    """A loaded program. Owns a duplicate of the object's fd, so it outlives the object."""

    def __init__(self, owned_fd: OwnedFd) -> None:
        self._owned = owned_fd
        info = prog_info(owned_fd.fd)
        self.id: int = info["id"]
        self.name: str = info["name"]
        self.tag: str = info["tag"]
        self.type: int = info["type"]

    @classmethod
    def from_fd(cls, fd: int) -> Program:
        if fd_kind(fd) != "prog":
            raise BpfError(f"fd {fd} is not a BPF program", errno.EINVAL)
        return cls(OwnedFd.dup(fd))

    @classmethod
    def from_pinned(cls, path: str) -> Program:
        return cls(pins.open_pinned(path, "prog"))

    @classmethod
    def from_id(cls, prog_id: int) -> Program:
        return cls(pins.open_by_id("prog", prog_id))

    @property
    def fd(self) -> int:
        return self._owned.fd

    @property
    def closed(self) -> bool:
        return self._owned.closed

    def pin(self, path: str) -> None:
        pins.pin(self.fd, path)

    def close(self) -> None:
        self._owned.close()

    def __repr__(self) -> str:
        return f"Program(name={self.name!r}, id={self.id}, type={self.type}, tag={self.tag})"


class BpfObject:
    """One libbpf ``struct bpf_object``: open → set_rodata/reuse_map → load → program/map.

    Not thread-safe; one object is driven by one thread.
    """

    def __init__(self, handle: int, name: str, keepalive: object, log_buffer: _LogBuffer) -> None:
        self._handle: int | None = handle
        self.name = name
        self._keepalive = keepalive  # the ELF bytes libbpf may still point into
        self._log_buffer: _LogBuffer | None = log_buffer
        self.loaded = False
        # Handing out the same wrapper per name keeps ``obj.program("x").fd``
        # valid while the object lives: a temporary wrapper would close its fd
        # as soon as the expression is evaluated.
        self._programs: dict[str, Program] = {}
        self._maps: dict[str, Map] = {}
        self._device_bound: list[str] = []    # programs set to load bound to a device

    @classmethod
    def open(cls, source: str | os.PathLike[str] | bytes, name: str = "linuxfp") -> BpfObject:
        """Open an ELF object from a path or from bytes (e.g. fresh clang output)."""
        log_buffer = _LogBuffer(_VERIFIER_LOG_SIZE)
        encoded_name = name.encode()
        opts = new_opts(
            BpfObjectOpenOpts,
            object_name=encoded_name,
            kernel_log_buf=log_buffer.address,
            kernel_log_size=log_buffer.size,
            kernel_log_level=0,
        )
        library = lib()
        with capture_libbpf_output() as messages:
            if isinstance(source, (bytes, bytearray, memoryview)):
                data = ctypes.create_string_buffer(bytes(source), len(source))
                handle = library.bpf_object__open_mem(data, len(source), ctypes.byref(opts))
                keepalive: object = data
                what = f"BPF object '{name}' ({len(source)} bytes)"
            else:
                path = os.fspath(source)
                handle = library.bpf_object__open_file(path.encode(), ctypes.byref(opts))
                keepalive = None
                what = f"BPF object {path}"
            code = ctypes.get_errno()
        if not handle:
            log_buffer.release()
            raise BpfError(f"open {what}", code or errno.EINVAL, "\n".join(messages))
        return cls(handle, name, keepalive, log_buffer)

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError(f"BPF object '{self.name}' is closed")
        return self._handle

    # --- before load --------------------------------------------------------

    def _require_unloaded(self, operation: str) -> None:
        if self.loaded:
            raise BpfError(f"{operation} on '{self.name}': object already loaded", errno.EBUSY)

    def _rodata_map(self) -> int | None:
        library = lib()
        current = library.bpf_object__next_map(self.handle, None)
        while current:
            map_name = (library.bpf_map__name(current) or b"").decode()
            if library.bpf_map__is_internal(current) and map_name.endswith(".rodata"):
                return int(current)
            current = library.bpf_object__next_map(self.handle, current)
        return None

    def rodata_variables(self) -> dict[str, SectionVariable]:
        """The ``volatile const`` globals set_rodata can change, by name."""
        btf = lib().bpf_object__btf(self.handle)
        if not btf:
            return {}
        return datasec_variables(btf, ".rodata")

    def set_rodata(self, values: Mapping[str, int | bytes]) -> None:
        """Set ``volatile const`` globals by name before load.

        ints are stored little-endian in the variable's size (negative ones as
        two's complement); bytes must not exceed the variable and are
        zero-padded. Unknown names raise KeyError naming the variable.
        """
        self._require_unloaded("set_rodata")
        variables = self.rodata_variables()
        for variable_name in values:
            if variable_name not in variables:
                known = ", ".join(sorted(variables)) or "none"
                raise KeyError(
                    f"'{variable_name}' is not a volatile const in .rodata of '{self.name}' "
                    f"(known: {known})"
                )
        rodata = self._rodata_map()
        if rodata is None:
            raise KeyError(f"'{next(iter(values))}': object '{self.name}' has no .rodata map")
        library = lib()
        size = ctypes.c_size_t()
        current = library.bpf_map__initial_value(rodata, ctypes.byref(size))
        if not current:
            raise BpfError(f"bpf_map__initial_value(.rodata of '{self.name}')", errno.ENOENT)
        image = bytearray(ctypes.string_at(current, size.value))
        for variable_name, value in values.items():
            variable = variables[variable_name]
            encoded = _encode_constant(variable, value)
            image[variable.offset : variable.offset + variable.size] = encoded
        buffer = ctypes.create_string_buffer(bytes(image), len(image))
        result = library.bpf_map__set_initial_value(rodata, buffer, len(image))
        if result != 0:
            raise BpfError(f"bpf_map__set_initial_value(.rodata of '{self.name}')", errno_of(result))

    def _unloaded_map(self, name: str, operation: str) -> int:
        """libbpf's handle of map `name`, for configuring it before load."""
        self._require_unloaded(operation)
        bpf_map = lib().bpf_object__find_map_by_name(self.handle, name.encode())
        if not bpf_map:
            raise KeyError(f"object '{self.name}' has no map '{name}'")
        return bpf_map

    def map_layout(self, name: str) -> tuple[int, int]:
        """(key size, value size) of map `name` as the object declares it."""
        handle = lib().bpf_object__find_map_by_name(self.handle, name.encode())
        if not handle:
            raise KeyError(f"object '{self.name}' has no map '{name}'")
        return int(lib().bpf_map__key_size(handle)), int(lib().bpf_map__value_size(handle))

    def map_types(self, name: str) -> tuple[CTypeShape | None, CTypeShape | None]:
        """The C types of map `name`'s key and value as the object's BTF
        describes them (None where it declares only a size)."""
        handle = lib().bpf_object__find_map_by_name(self.handle, name.encode())
        if not handle:
            raise KeyError(f"object '{self.name}' has no map '{name}'")
        btf = lib().bpf_object__btf(self.handle)
        if not btf:
            return None, None
        return (type_shape(btf, lib().bpf_map__btf_key_type_id(handle)),
                type_shape(btf, lib().bpf_map__btf_value_type_id(handle)))

    def struct_type(self, name: str) -> CTypeShape | None:
        """`struct name` as the object's BTF describes it (None: not there)."""
        btf = lib().bpf_object__btf(self.handle)
        if not btf:
            return None
        type_id = lib().btf__find_by_name_kind(btf, name.encode(), BTF_KIND_STRUCT)
        return type_shape(btf, type_id) if type_id > 0 else None

    def set_max_entries(self, name: str, max_entries: int) -> None:
        """Size map `name` before load (e.g. an array indexed by ifindex)."""
        result = lib().bpf_map__set_max_entries(self._unloaded_map(name, "set_max_entries"), max_entries)
        if result != 0:
            raise BpfError(f"bpf_map__set_max_entries('{name}' of '{self.name}', {max_entries})", errno_of(result))

    def reuse_map(self, name: str, existing: Map | int) -> None:
        """Make this object use an existing map (by Map or fd) instead of creating ``name``."""
        fd = existing.fd if isinstance(existing, Map) else existing
        result = lib().bpf_map__reuse_fd(self._unloaded_map(name, "reuse_map"), fd)
        if result != 0:
            raise BpfError(f"bpf_map__reuse_fd('{name}' of '{self.name}', fd {fd})", errno_of(result))

    def bind_to_device(self, program: str, ifindex: int) -> None:
        """Load `program` bound to one device (BPF_F_XDP_DEV_BOUND_ONLY), so it
        may call that driver's XDP rx-metadata kfuncs. Such a program attaches
        only to that device, natively, and BPF_PROG_TEST_RUN refuses it."""
        self._require_unloaded("bind_to_device")
        library = lib()
        prog = library.bpf_object__find_program_by_name(self.handle, program.encode())
        if not prog:
            raise KeyError(f"object '{self.name}' has no program '{program}'")
        library.bpf_program__set_ifindex(prog, ifindex)
        result = library.bpf_program__set_flags(prog, library.bpf_program__flags(prog) | BPF_F_XDP_DEV_BOUND_ONLY)
        if result != 0:
            raise BpfError(f"bpf_program__set_flags('{program}' of '{self.name}')", errno_of(result))
        self._device_bound.append(program)

    def skip(self, program: str) -> None:
        """Leave `program` out of the load (libbpf's autoload off): the
        object's other programs load without it."""
        self._require_unloaded("skip")
        prog = lib().bpf_object__find_program_by_name(self.handle, program.encode())
        if not prog:
            raise KeyError(f"object '{self.name}' has no program '{program}'")
        result = lib().bpf_program__set_autoload(prog, False)
        if result != 0:
            raise BpfError(f"bpf_program__set_autoload('{program}' of '{self.name}')", errno_of(result))

    def insn_count(self, program: str) -> int:
        """Instructions of `program` as libbpf submits (or submitted) them."""
        prog = lib().bpf_object__find_program_by_name(self.handle, program.encode())
        if not prog:
            raise KeyError(f"object '{self.name}' has no program '{program}'")
        return int(lib().bpf_program__insn_cnt(prog))

    def _refuse_moved_device_bound(self) -> None:
        """See linuxfp/datapath/hazards.py: a device-bound program the verifier
        moved must never live on (closing it now is the one safe way out)."""
        for program in self._device_bound:
            submitted = self.insn_count(program)
            fd = self.program(program).fd
            if hazards.reallocated(fd, submitted):
                found = hazards.memlock(fd)
                self.close()
                raise KernelHazard(
                    f"'{program}' of '{self.name}' outgrew its first allocation during verification "
                    f"({submitted} instructions submitted, {hazards.first_allocation(submitted)} bytes "
                    f"allocated, {found} after): a device-bound program moved this way oopses the kernel "
                    "when its device is deleted, so it is not attached (more dead-code headroom is needed)",
                    errno.EFBIG)

    # --- load ---------------------------------------------------------------

    def load(self) -> None:
        """Create maps and load every program; VerifierError if a program is rejected."""
        self._require_unloaded("load")
        with capture_libbpf_output() as messages:
            result = lib().bpf_object__load(self.handle)
        self.loaded = True  # libbpf refuses a second load even after a failure
        log_buffer, self._log_buffer = self._log_buffer, None
        log = log_buffer.text() if log_buffer is not None else ""
        if log_buffer is not None:
            log_buffer.release()  # libbpf uses it only during load
        if result == 0:
            self._refuse_moved_device_bound()
            return
        code = errno_of(result)
        libbpf_text = "\n".join(messages)
        explain_load_failure(code, libbpf_text)
        failed = _FAILED_PROGRAM.search(libbpf_text)
        if failed and log.strip():
            raise VerifierError(
                f"load BPF object '{self.name}': program '{failed.group(1)}' rejected by the verifier",
                code,
                log,
                failed.group(1),
            )
        raise BpfError(f"load BPF object '{self.name}'", code, libbpf_text)

    # --- after load ---------------------------------------------------------

    def program_names(self) -> tuple[str, ...]:
        library = lib()
        names = []
        current = library.bpf_object__next_program(self.handle, None)
        while current:
            names.append((library.bpf_program__name(current) or b"").decode())
            current = library.bpf_object__next_program(self.handle, current)
        return tuple(names)

    def program_sections(self) -> dict[str, str]:
        """Each program's C function name -> its ELF section (e.g. "raw_tp/fdb_delete")."""
        library = lib()
        out = {}
        current = library.bpf_object__next_program(self.handle, None)
        while current:
            name = (library.bpf_program__name(current) or b"").decode()
            out[name] = (library.bpf_program__section_name(current) or b"").decode()
            current = library.bpf_object__next_program(self.handle, current)
        return out

    def map_names(self) -> tuple[str, ...]:
        library = lib()
        names = []
        current = library.bpf_object__next_map(self.handle, None)
        while current:
            names.append((library.bpf_map__name(current) or b"").decode())
            current = library.bpf_object__next_map(self.handle, current)
        return tuple(names)

    def program(self, name: str) -> Program:
        """The loaded program whose C function is ``name``.

        The Program owns a duplicate fd: it stays usable after ``close()`` as
        long as the caller keeps a reference to it.
        """
        cached = self._programs.get(name)
        if cached is not None and not cached.closed:
            return cached
        library = lib()
        prog = library.bpf_object__find_program_by_name(self.handle, name.encode())
        if not prog:
            raise KeyError(f"object '{self.name}' has no program '{name}' (has: {', '.join(self.program_names())})")
        fd = library.bpf_program__fd(prog)
        if fd < 0:
            raise BpfError(f"program '{name}' of '{self.name}' is not loaded", errno.ENOENT)
        program = self._programs[name] = Program.from_fd(fd)
        return program

    def map(self, name: str) -> Map:
        """The object's map ``name``; like ``program()``, it owns a duplicate fd."""
        cached = self._maps.get(name)
        if cached is not None and not cached.closed:
            return cached
        library = lib()
        bpf_map = library.bpf_object__find_map_by_name(self.handle, name.encode())
        if not bpf_map:
            raise KeyError(f"object '{self.name}' has no map '{name}' (has: {', '.join(self.map_names())})")
        fd = library.bpf_map__fd(bpf_map)
        if fd < 0:
            raise BpfError(f"map '{name}' of '{self.name}' is not created yet (load first)", errno.ENOENT)
        bpf_map = self._maps[name] = Map.from_fd(fd)
        return bpf_map

    def close(self) -> None:
        """Release libbpf's object; Programs/Maps/Links taken from it stay valid."""
        if self._handle is not None:
            lib().bpf_object__close(self._handle)
            self._handle = None
            self._keepalive = None
            if self._log_buffer is not None:
                self._log_buffer.release()
                self._log_buffer = None
            self._programs = {}
            self._maps = {}

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _encode_constant(variable: SectionVariable, value: int | bytes) -> bytes:
    if not isinstance(value, (int, bytes, bytearray)):
        raise TypeError(f"{variable.name}: set_rodata takes int or bytes, got {type(value).__name__}")
    if isinstance(value, int):
        if not -(1 << (8 * variable.size - 1)) <= value < (1 << (8 * variable.size)):
            raise ValueError(f"{variable.name}: {value} does not fit in {variable.size} bytes")
        return (value % (1 << (8 * variable.size))).to_bytes(variable.size, "little")
    if len(value) > variable.size:
        raise ValueError(f"{variable.name}: {len(value)} bytes do not fit in {variable.size}")
    return bytes(value).ljust(variable.size, b"\0")
