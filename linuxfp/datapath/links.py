"""Attaching programs to interfaces at XDP and TC, with atomic program replacement.

XDP and TC (tcx) attachments are BPF links: the attachment lives while the
link fd is open or pinned, and ``update`` swaps the program without a window
where no program runs. When tcx is refused (kernels < 6.6) TC falls back to a
clsact qdisc with a direct-action cls_bpf filter, replaced in place on update.
All ifindexes resolve in the calling thread's network namespace.
"""

from __future__ import annotations

import ctypes
import errno
from dataclasses import dataclass
from types import TracebackType

from . import pins
from .errors import BpfError
from .fds import HasFd, OwnedFd, fd_of
from .info import link_info
from .libbpf import (
    BPF_LINK_TYPE_TCX,
    BPF_LINK_TYPE_XDP,
    BPF_TC_EGRESS,
    BPF_TC_F_REPLACE,
    BPF_TC_INGRESS,
    BPF_TCX_EGRESS,
    BPF_TCX_INGRESS,
    BPF_XDP,
    XDP_ATTACHED_DRV,
    XDP_ATTACHED_HW,
    XDP_ATTACHED_MULTI,
    XDP_ATTACHED_NONE,
    XDP_ATTACHED_SKB,
    XDP_FLAGS_DRV_MODE,
    XDP_FLAGS_SKB_MODE,
    BpfLinkCreateOpts,
    BpfTcHook,
    BpfTcOpts,
    BpfXdpQueryOpts,
    errno_of,
    lib,
    new_opts,
)

XDP_MODE_FLAGS = {"native": XDP_FLAGS_DRV_MODE, "generic": XDP_FLAGS_SKB_MODE}
TCX_ATTACH_TYPES = {"ingress": BPF_TCX_INGRESS, "egress": BPF_TCX_EGRESS}
TC_ATTACH_POINTS = {"ingress": BPF_TC_INGRESS, "egress": BPF_TC_EGRESS}
_DIRECTION_OF_TCX = {value: key for key, value in TCX_ATTACH_TYPES.items()}

# Native attach errors after which generic XDP can still work.
_NATIVE_UNAVAILABLE = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ERANGE, errno.ENOTSUP})
# tcx refusals meaning "this kernel has no tcx"; anything else is a real error.
_TCX_UNAVAILABLE = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP})


@dataclass(frozen=True)
class _ClsBpfFilter:
    ifindex: int
    attach_point: int
    handle: int
    priority: int


class Link:
    """One attachment of a program to an interface hook.

    hook is "xdp" or "tc"; mode is "native"/"generic" for XDP and "tcx" or
    "cls_bpf" for TC; direction is "ingress"/"egress" for TC, None for XDP.
    A cls_bpf attachment has no link object: its ``fd`` and ``id`` are None.

    Closing (or garbage-collecting) an unpinned link detaches it; pin it to
    keep the program attached after this process exits.
    """

    def __init__(
        self,
        owned_fd: OwnedFd | None,
        ifindex: int,
        hook: str,
        mode: str,
        direction: str | None = None,
        cls_bpf: _ClsBpfFilter | None = None,
    ) -> None:
        self._owned = owned_fd
        self.ifindex = ifindex
        self.hook = hook
        self.mode = mode
        self.direction = direction
        self._cls_bpf = cls_bpf
        self._cls_bpf_detached = False
        self.pinned_path: str | None = None
        self.id: int | None = link_info(owned_fd.fd)["id"] if owned_fd is not None else None

    @property
    def fd(self) -> int | None:
        """The link fd; None for cls_bpf attachments and once closed or detached."""
        if self._owned is None or self._owned.closed:
            return None
        return self._owned.fd

    @property
    def prog_id(self) -> int:
        """Id of the program currently attached through this link."""
        if self._cls_bpf is not None:
            return _cls_bpf_query(self._cls_bpf)
        return int(link_info(self._require_fd())["prog_id"])

    def info(self) -> dict[str, int]:
        """link_info() of this link: id, type, prog_id, ifindex, attach_type."""
        return link_info(self._require_fd())

    @classmethod
    def from_pinned(cls, path: str) -> Link:
        """Re-open a pinned XDP or tcx link (mode is read back from the kernel)."""
        link = cls._from_owned(pins.open_pinned(path, "link"), path)
        link.pinned_path = path
        return link

    @classmethod
    def from_id(cls, link_id: int) -> Link:
        """Open a live XDP or tcx link by id (root only); BpfError once it is gone."""
        return cls._from_owned(pins.open_by_id("link", link_id), f"link {link_id}")

    @classmethod
    def _from_owned(cls, owned: OwnedFd, origin: str) -> Link:
        info = link_info(owned.fd)
        if info["type"] == BPF_LINK_TYPE_XDP:
            link = cls(owned, info["ifindex"], "xdp", _xdp_mode_of(info["ifindex"], info["prog_id"]))
        elif info["type"] == BPF_LINK_TYPE_TCX:
            direction = _DIRECTION_OF_TCX.get(info["attach_type"], "ingress")
            link = cls(owned, info["ifindex"], "tc", "tcx", direction)
        else:
            owned.close()
            raise BpfError(f"{origin}: link type {info['type']} is neither XDP nor tcx", errno.EINVAL)
        return link

    def update(self, new_prog: int | HasFd) -> None:
        """Atomically replace the attached program (fd or Program); the link and its id stay."""
        new_prog_fd = fd_of(new_prog)
        if self._cls_bpf is not None:
            if self._cls_bpf_detached:
                raise BpfError("update: cls_bpf filter already detached", errno.ENOENT)
            _cls_bpf_attach(self._cls_bpf, new_prog_fd, replace=True)
            return
        result = lib().bpf_link_update(self._require_fd(), new_prog_fd, None)
        if result != 0:
            raise BpfError(f"bpf_link_update({self.hook} link {self.id}, prog fd {new_prog_fd})", errno_of(result))

    def pin(self, path: str) -> None:
        if self._cls_bpf is not None:
            raise BpfError(
                "pin: a cls_bpf (tcx fallback) attachment is not a BPF link and stays attached by itself",
                errno.EOPNOTSUPP,
            )
        pins.pin(self._require_fd(), path)
        self.pinned_path = path

    def detach(self) -> None:
        """Detach from the interface now, close the fd and remove our pin."""
        if self._cls_bpf is not None:
            if not self._cls_bpf_detached:
                _cls_bpf_detach(self._cls_bpf)
                self._cls_bpf_detached = True
            return
        if self._owned is None or self._owned.closed:
            return
        result = lib().bpf_link_detach(self._owned.fd)
        if result != 0:
            raise BpfError(f"bpf_link_detach({self.hook} link {self.id})", errno_of(result))
        self._owned.close()
        if self.pinned_path is not None:
            pins.unpin(self.pinned_path, missing_ok=True)
            self.pinned_path = None

    def close(self) -> None:
        """Drop our fd; the attachment ends unless the link is pinned (cls_bpf: stays)."""
        if self._owned is not None:
            self._owned.close()

    def _require_fd(self) -> int:
        fd = self.fd
        if fd is None:
            raise BpfError(f"{self.hook} link {self.id}: closed or detached", errno.EBADF)
        return fd

    def __enter__(self) -> Link:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.detach()

    def __repr__(self) -> str:
        return f"Link(hook={self.hook!r}, mode={self.mode!r}, ifindex={self.ifindex}, id={self.id})"


# --- XDP --------------------------------------------------------------------


def _link_create(prog_fd: int, target: int, attach_type: int, flags: int) -> int:
    opts = new_opts(BpfLinkCreateOpts, flags=flags)
    return int(lib().bpf_link_create(prog_fd, target, attach_type, ctypes.byref(opts)))


def attach_xdp(prog: int | HasFd, ifindex: int, mode: str = "auto") -> Link:
    """Attach an XDP program (fd or Program) with a BPF link; "auto" tries native, then generic."""
    prog_fd = fd_of(prog)
    if mode not in ("auto", "native", "generic"):
        raise ValueError(f"XDP mode must be auto, native or generic, not {mode!r}")
    tried = ["native", "generic"] if mode == "auto" else [mode]
    failures: list[str] = []
    last_errno = errno.EINVAL
    for candidate in tried:
        fd = _link_create(prog_fd, ifindex, BPF_XDP, XDP_MODE_FLAGS[candidate])
        if fd >= 0:
            return Link(OwnedFd(fd), ifindex, "xdp", candidate)
        last_errno = errno_of(fd)
        failures.append(f"{candidate}: {errno.errorcode.get(last_errno, last_errno)}")
        if last_errno not in _NATIVE_UNAVAILABLE:
            break
    raise BpfError(f"attach XDP program fd {prog_fd} to ifindex {ifindex} ({', '.join(failures)})", last_errno)


@dataclass(frozen=True)
class XdpAttachment:
    """What netlink (IFLA_XDP) reports at an interface's XDP hook."""

    ifindex: int
    mode: str  # "none", "native", "generic", "offload" or "multi"
    prog_id: int  # the single attached program, 0 if none or several
    native_prog_id: int
    generic_prog_id: int
    offload_prog_id: int


_ATTACH_MODE_NAMES = {
    XDP_ATTACHED_NONE: "none",
    XDP_ATTACHED_DRV: "native",
    XDP_ATTACHED_SKB: "generic",
    XDP_ATTACHED_HW: "offload",
    XDP_ATTACHED_MULTI: "multi",
}


def xdp_attached(ifindex: int) -> XdpAttachment:
    """The XDP programs attached to ifindex (any tool's, not only ours)."""
    opts = new_opts(BpfXdpQueryOpts)
    result = lib().bpf_xdp_query(ifindex, 0, ctypes.byref(opts))
    if result != 0:
        raise BpfError(f"bpf_xdp_query(ifindex {ifindex})", errno_of(result))
    return XdpAttachment(
        ifindex=ifindex,
        mode=_ATTACH_MODE_NAMES.get(opts.attach_mode, f"unknown-{opts.attach_mode}"),
        prog_id=opts.prog_id,
        native_prog_id=opts.drv_prog_id,
        generic_prog_id=opts.skb_prog_id,
        offload_prog_id=opts.hw_prog_id,
    )


def _xdp_mode_of(ifindex: int, prog_id: int) -> str:
    try:
        attached = xdp_attached(ifindex)
    except BpfError:
        return "unknown"  # e.g. the link's interface is in another netns
    if attached.native_prog_id == prog_id:
        return "native"
    if attached.generic_prog_id == prog_id:
        return "generic"
    return "unknown"


# --- TC ---------------------------------------------------------------------


def tcx_attached(ifindex: int, direction: str = "ingress") -> list[int]:
    """Program ids attached with tcx at ifindex (any tool's, in order)."""
    ids = (ctypes.c_uint32 * 64)()
    count = ctypes.c_uint32(len(ids))
    flags = ctypes.c_uint32(0)
    result = lib().bpf_prog_query(ifindex, TCX_ATTACH_TYPES[direction], 0, ctypes.byref(flags), ids,
                                  ctypes.byref(count))
    if result != 0:
        raise BpfError(f"bpf_prog_query(ifindex {ifindex}, tcx {direction})", errno_of(result))
    return list(ids[: count.value])


def attach_tc(prog: int | HasFd, ifindex: int, direction: str = "ingress", method: str = "auto") -> Link:
    """Attach a SCHED_CLS program (fd or Program) at TC ingress/egress.

    method "auto" uses a tcx link and falls back to clsact + direct-action
    cls_bpf if the kernel refuses tcx; "tcx" / "cls_bpf" force one.
    """
    if direction not in TCX_ATTACH_TYPES:
        raise ValueError(f"TC direction must be ingress or egress, not {direction!r}")
    if method not in ("auto", "tcx", "cls_bpf"):
        raise ValueError(f"TC method must be auto, tcx or cls_bpf, not {method!r}")
    prog_fd = fd_of(prog)
    if method in ("auto", "tcx"):
        # libbpf 1.1 predates tcx but passes unknown attach types through with
        # target_fd = ifindex, which is what the kernel expects.
        fd = _link_create(prog_fd, ifindex, TCX_ATTACH_TYPES[direction], 0)
        if fd >= 0:
            return Link(OwnedFd(fd), ifindex, "tc", "tcx", direction)
        code = errno_of(fd)
        if method == "tcx" or code not in _TCX_UNAVAILABLE:
            raise BpfError(f"attach tcx {direction} program fd {prog_fd} to ifindex {ifindex}", code)
    target = _ClsBpfFilter(ifindex=ifindex, attach_point=TC_ATTACH_POINTS[direction], handle=0, priority=0)
    _ensure_clsact(ifindex, target.attach_point)
    target = _cls_bpf_attach(target, prog_fd, replace=False)
    return Link(None, ifindex, "tc", "cls_bpf", direction, cls_bpf=target)


def _tc_hook(ifindex: int, attach_point: int) -> BpfTcHook:
    return new_opts(BpfTcHook, ifindex=ifindex, attach_point=attach_point)


def _ensure_clsact(ifindex: int, attach_point: int) -> None:
    hook = _tc_hook(ifindex, attach_point)
    result = lib().bpf_tc_hook_create(ctypes.byref(hook))
    if result != 0 and errno_of(result) != errno.EEXIST:
        raise BpfError(f"create clsact qdisc on ifindex {ifindex}", errno_of(result))


def _cls_bpf_attach(target: _ClsBpfFilter, prog_fd: int, replace: bool) -> _ClsBpfFilter:
    hook = _tc_hook(target.ifindex, target.attach_point)
    opts = new_opts(
        BpfTcOpts,
        prog_fd=prog_fd,
        handle=target.handle,
        priority=target.priority,
        flags=BPF_TC_F_REPLACE if replace else 0,
    )
    result = lib().bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts))
    if result != 0:
        verb = "replace" if replace else "add"
        raise BpfError(f"{verb} cls_bpf filter for prog fd {prog_fd} on ifindex {target.ifindex}", errno_of(result))
    return _ClsBpfFilter(target.ifindex, target.attach_point, opts.handle, opts.priority)


def _cls_bpf_query(target: _ClsBpfFilter) -> int:
    hook = _tc_hook(target.ifindex, target.attach_point)
    opts = new_opts(BpfTcOpts, handle=target.handle, priority=target.priority)
    result = lib().bpf_tc_query(ctypes.byref(hook), ctypes.byref(opts))
    if result != 0:
        raise BpfError(f"query cls_bpf filter on ifindex {target.ifindex}", errno_of(result))
    return int(opts.prog_id)


def _cls_bpf_detach(target: _ClsBpfFilter) -> None:
    hook = _tc_hook(target.ifindex, target.attach_point)
    opts = new_opts(BpfTcOpts, handle=target.handle, priority=target.priority)
    result = lib().bpf_tc_detach(ctypes.byref(hook), ctypes.byref(opts))
    if result != 0 and errno_of(result) != errno.ENOENT:
        raise BpfError(f"delete cls_bpf filter on ifindex {target.ifindex}", errno_of(result))


# libbpf's bpf_raw_tracepoint_open(name, prog_fd). Raw tracepoints load under
# lockdown (kprobes and fentry do not); their attachment is an fd, not a pin.
_raw_tp_open = None


def attach_raw_tracepoint(prog_fd: int, tracepoint: str) -> OwnedFd:
    """Attach a raw tracepoint program; closing the returned fd detaches it."""
    global _raw_tp_open
    if _raw_tp_open is None:
        prototype = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_int, use_errno=True)
        _raw_tp_open = prototype(("bpf_raw_tracepoint_open", lib()))
    fd = _raw_tp_open(tracepoint.encode(), prog_fd)
    if fd < 0:
        code = errno_of(fd) or errno.EINVAL
        raise BpfError(f"attach raw tracepoint {tracepoint}", code)
    return OwnedFd(fd)


BPF_CGROUP_SYSCTL = 18       # enum bpf_attach_type
BPF_CGROUP_SETSOCKOPT = 22


def attach_cgroup(prog: int | HasFd, cgroup_fd: int, attach_type: int = BPF_CGROUP_SETSOCKOPT) -> OwnedFd:
    """Attach a cgroup program with a BPF link (alongside any others: links
    attach as BPF_F_ALLOW_MULTI); closing the returned fd detaches it."""
    prog_fd = fd_of(prog)
    fd = _link_create(prog_fd, cgroup_fd, attach_type, 0)
    if fd < 0:
        raise BpfError(f"attach cgroup program fd {prog_fd} (attach type {attach_type})", errno_of(fd))
    return OwnedFd(fd)
