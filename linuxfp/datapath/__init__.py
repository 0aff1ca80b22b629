"""LinuxFP datapath: a small ctypes binding over libbpf.so.1 (1.1.2) and the bpf syscalls.

Typical use::

    with BpfObject.open(elf_bytes, name="router") as obj:
        obj.set_rodata({"lfp_netns_cookie": cookie})
        obj.reuse_map("lfp_ifaces", shared_ifaces_map)
        obj.load()
        link = attach_xdp(obj.program("lfp_xdp").fd, 3, mode="native")
    # the link holds the program once the object is closed; an unpinned
    # link detaches when its last fd closes, a pinned one outlives us
    link.pin(f"{bpffs_root()}/linuxfp/ns-<cookie>/if3/link_xdp")

See docs/datapath-binding.md.
"""

from .environment import check_environment
from .errors import BpfError, DependencyError, KernelHazard, TestRunInterrupted, VerifierError
from .info import bind_map, link_info, map_info, prog_info, prog_map_ids
from .libbpf import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_TEST_RUN_ON_CPU,
    BPF_F_TEST_XDP_LIVE_FRAMES,
    BPF_NOEXIST,
    BPF_TCX_EGRESS,
    BPF_TCX_INGRESS,
    BPF_XDP,
)
from .cgroups import is_hierarchy_root, open_cgroup2_root
from .ringbuf import Doorbell
from .links import (
    BPF_CGROUP_SETSOCKOPT,
    BPF_CGROUP_SYSCTL,
    Link,
    XdpAttachment,
    attach_cgroup,
    attach_raw_tracepoint,
    attach_tc,
    attach_xdp,
    tcx_attached,
    xdp_attached,
)
from .maps import Map, possible_cpus
from .objects import BpfObject, Program
from .pins import (
    PrivateBpffsWarning,
    anchor_pid,
    bpffs_root,
    get_pinned,
    is_bpffs,
    makedirs,
    pin,
    remove_tree,
    unpin,
)
from .testrun import TestRun, XdpMd, test_run, xdp_md

__all__ = [
    "BPF_ANY",
    "BPF_EXIST",
    "BPF_F_TEST_RUN_ON_CPU",
    "BPF_F_TEST_XDP_LIVE_FRAMES",
    "BPF_NOEXIST",
    "BPF_TCX_EGRESS",
    "BPF_TCX_INGRESS",
    "BPF_XDP",
    "BpfError",
    "BpfObject",
    "DependencyError",
    "Link",
    "Map",
    "PrivateBpffsWarning",
    "Program",
    "TestRun",
    "TestRunInterrupted",
    "VerifierError",
    "KernelHazard",
    "XdpAttachment",
    "XdpMd",
    "attach_cgroup",
    "Doorbell",
    "is_hierarchy_root",
    "BPF_CGROUP_SETSOCKOPT",
    "BPF_CGROUP_SYSCTL",
    "attach_raw_tracepoint",
    "attach_tc",
    "attach_xdp",
    "anchor_pid",
    "bpffs_root",
    "check_environment",
    "get_pinned",
    "is_bpffs",
    "link_info",
    "makedirs",
    "open_cgroup2_root",
    "map_info",
    "pin",
    "possible_cpus",
    "prog_info",
    "prog_map_ids",
    "bind_map",
    "remove_tree",
    "test_run",
    "unpin",
    "tcx_attached",
    "xdp_attached",
    "xdp_md",
]
