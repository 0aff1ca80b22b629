"""The controller's own BPF objects, loaded once per `linuxfp run` against
the namespace's shared maps (creating and pinning them when they come
first): bpf_modules/controller.c (the lease renewal and the watches of
legacy iptables and of sysctls) and every node's kernel-side watch (`Node.watch`: raw tracepoints,
attached for the controller's lifetime)."""
from __future__ import annotations

import logging
import os

from linuxfp import datapath as dp
from linuxfp.graph import registered
from linuxfp.synth import CompileError, ToolMissing, build_controller_programs, compile_source

from .installer import FAULT_LOAD_ENV, load_faults
from .lease import CONTEXT_TYPES
from .shared_maps import LayoutMismatch

log = logging.getLogger("linuxfp.companion")

RENEW_PROGRAM = "lfp_lease_renew"
GENERATIONS_PROGRAM = "lfp_read_generations"
WATCH_PROGRAM = "lfp_watch_setsockopt"
SYSCTL_PROGRAM = "lfp_watch_sysctl"
SYSCTL_WRITERS_MAP = "lfp_sysctl_writers"
# A watch's optional SEC("syscall") programs: run once every tracepoint is
# attached, and before they are detached (e.g. to tell the datapath whether
# what the watch maintains can be trusted).
WATCH_START, WATCH_STOP = "lfp_watch_start", "lfp_watch_stop"
# What the lease can do without: a program the kernel refuses here is left
# out of the load, and the controller polls what it would have watched.
OPTIONAL_PROGRAMS = (SYSCTL_PROGRAM,)


def _run_if_present(obj, program: str) -> None:
    if program in obj.program_sections():
        dp.test_run(obj.program(program).fd, b"")


def _injected_fault(obj, skipped) -> None:
    """LINUXFP_FAULT_LOAD naming a program of the controller's own object
    (e.g. lfp_watch_sysctl) fails its load as a verifier rejection would,
    while that program is in it: a fault injection for tests, never for
    production."""
    for name, _ in load_faults():
        if name in obj.program_sections() and name not in skipped:
            raise dp.VerifierError(f"load BPF object '{obj.name}': program '{name}' rejected by the verifier "
                                   f"(fault injected by {FAULT_LOAD_ENV})", 13, "", name)


def check_contexts(obj) -> None:
    """Refuse an object whose test-run contexts (struct lfp_renewal, ...)
    its BTF lays out otherwise than controller/lease.py packs them."""
    for ctype in CONTEXT_TYPES:
        compiled = obj.struct_type(ctype.name.removeprefix("struct "))
        problem = "not in its BTF" if compiled is None else ctype.mismatch(compiled)
        if problem:
            raise LayoutMismatch(f"{obj.name}: the context {ctype.name}: {problem}", 22)


def _set_identity(obj, netns_cookie: int) -> None:
    """The constants a kernel-side program needs to tell what is the
    controller's: its namespace (netns.h) and its process, as its own pid
    namespace numbers it (pidns.h: what the controller does is not a change
    to announce; a writer is named so the controller can find it)."""
    rodata = obj.rodata_variables()
    if "lfp_netns_cookie" in rodata:
        obj.set_rodata({"lfp_netns_cookie": netns_cookie})
    if "lfp_pidns_ino" in rodata:
        pidns = os.stat("/proc/self/ns/pid")
        obj.set_rodata({"lfp_controller_tgid": os.getpid(), "lfp_pidns_dev": pidns.st_dev,
                        "lfp_pidns_ino": pidns.st_ino})


class Companion:
    def __init__(self, maps, netns_cookie: int) -> None:
        self.maps = maps
        self.cookie = netns_cookie
        self.obj = None
        self.error: str | None = None
        self.skipped: dict[str, str] = {}        # program -> why it was left out of the load
        self._watches: list = []                 # (object, [tracepoint fds]) per node
        self.watch_errors: dict[str, str] = {}   # node -> why its watch is not attached
        self._state_maps: dict[str, tuple[str, ...]] = {}   # watch object -> its node's state maps

    def load(self) -> bool:
        """False (with `error`) where it cannot load: then nothing renews the
        lease, and the datapath leaves every packet to the kernel. A program
        the lease can do without (OPTIONAL_PROGRAMS) that the kernel refuses
        is left out instead (`skipped`, with why): what it watches is polled."""
        try:
            compiled = build_controller_programs().data
        except (CompileError, ToolMissing) as e:
            self.error = str(e)
            return False
        while True:
            try:
                obj = dp.BpfObject.open(compiled, name="lfp_controller")
            except dp.BpfError as e:
                self.error = str(e)
                return False
            try:
                for program in self.skipped:
                    obj.skip(program)
                check_contexts(obj)
                _set_identity(obj, self.cookie)
                fresh = self.maps.prepare(obj, None)
                _injected_fault(obj, self.skipped)
                obj.load()
                self.maps.pin_fresh(obj, fresh)
            except (dp.BpfError, OSError) as e:
                obj.close()
                optional = [p for p in OPTIONAL_PROGRAMS if p not in self.skipped
                            and getattr(e, "program", p) in OPTIONAL_PROGRAMS]
                # (a layout mismatch is no program's refusal: nothing to leave out)
                if optional and isinstance(e, dp.BpfError) and not isinstance(e, LayoutMismatch):
                    why = str(e).splitlines()[0]
                    log.warning("%s left out (%s): the controller polls what it would watch", optional, why)
                    self.skipped.update((p, why) for p in optional)
                    continue
                self.error = str(e)
                return False
            self.obj = obj
            return True

    def load_watches(self) -> tuple[str, ...]:
        """Attach every registered node's kernel-side watch; the names of
        the nodes whose watch is attached (the others are in watch_errors:
        their tables then lag the kernel by the response time)."""
        attached = []
        for node in registered():
            if node.watch is None:
                continue
            try:
                self._watches.append(self._load_watch(node))
                attached.append(node.name)
            except (CompileError, ToolMissing, dp.BpfError, OSError, ValueError) as e:
                # what a watch keeps means nothing without it, whoever armed it
                self.maps.reset_state(node.state_maps)
                self.watch_errors[node.name] = str(e).splitlines()[0] if str(e) else type(e).__name__
                log.warning("node %s: its kernel watch is not attached (%s); its tables follow netlink only",
                            node.name, self.watch_errors[node.name])
        return tuple(attached)

    def _load_watch(self, node):
        obj = dp.BpfObject.open(compile_source(node.watch.read_text()).data, name=f"lfp_watch_{node.name}")
        self._state_maps[obj.name] = node.state_maps
        links = []
        try:
            _set_identity(obj, self.cookie)
            fresh = self.maps.prepare(obj, None, share_all=True)
            obj.load()
            self.maps.pin_fresh(obj, fresh)
            for program, section in obj.program_sections().items():
                kind, _, tracepoint = section.partition("/")
                if section == "syscall" and program in (WATCH_START, WATCH_STOP):
                    continue
                if kind not in ("raw_tp", "raw_tracepoint") or not tracepoint:
                    raise ValueError(f"{node.watch.name}: program {program} is in section {section!r}; "
                                     "a watch holds raw tracepoints (SEC(\"raw_tp/NAME\")) and its "
                                     f"{WATCH_START}/{WATCH_STOP} (SEC(\"syscall\")) only")
                links.append(dp.attach_raw_tracepoint(obj.program(program).fd, tracepoint))
            _run_if_present(obj, WATCH_START)
        except BaseException:
            for fd in links:
                fd.close()
            obj.close()
            raise
        return obj, links

    def program(self, name: str):
        return self.obj.program(name) if self.obj is not None and name not in self.skipped else None

    def pin(self, program: str, path: str) -> None:
        """Pin one of its programs at `path`, replacing what an earlier run
        left there; a failure is only logged (readers then say "unknown")."""
        try:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            self.obj.program(program).pin(path)
        except (dp.BpfError, OSError, KeyError) as e:
            log.warning("cannot pin %s at %s (%s): status cannot tell whether addresses are current",
                        program, path, e)

    def close(self) -> None:
        for obj, links in self._watches:
            try:
                _run_if_present(obj, WATCH_STOP)
            except dp.BpfError as e:
                log.warning("%s: %s did not run (%s); resetting its state", obj.name, WATCH_STOP, e)
                self.maps.reset_state(self._state_maps.get(obj.name, ()))
            for fd in links:
                fd.close()
            obj.close()
        self._watches = []
        if self.obj is not None:
            self.obj.close()
            self.obj = None
