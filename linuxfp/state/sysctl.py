"""Forwarding sysctls, combined the way the kernel's forwarding path
combines them (IPv4: include/linux/inetdevice.h; of IPv6 only what the
controller decides on — the datapath reads IPv6's forwarding switches live):

    IN_DEV_FORWARD(dev)        = conf/DEV/forwarding
    IN_DEV_RPFILTER(dev)       = max(conf/all/rp_filter, conf/DEV/rp_filter)
    IN_DEV_ACCEPT_LOCAL(dev)   = conf/all/accept_local   || conf/DEV/accept_local
    IN_DEV_TX_REDIRECTS(dev)   = conf/all/send_redirects || conf/DEV/send_redirects
    IN_DEV_ROUTE_LOCALNET(dev) = conf/all/route_localnet || conf/DEV/route_localnet
    IN_DEV_RX_REDIRECTS(dev)   = forwarding ? all && dev : all || dev  (accept_redirects)
    IN_DEV_IGNORE_ROUTES_WITH_LINKDOWN(dev) = all || dev

Each device's own values come with its RTM_NEWLINK (DeviceConf: the arrays
the conf/DEV files show, one link dump for every device instead of a dozen
file reads each); conf/all and the namespace's switches are read from
/proc/sys/net, which belongs to the network namespace of the thread that
opens the file, so these readers must run in the namespace being described.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import replace

from .model import AF_INET, AF_INET6, DeviceConf, InterfaceSysctls, Sysctls

CONF_ROOT = "/proc/sys/net/ipv4/conf"
CONF6_ROOT = "/proc/sys/net/ipv6/conf"
BR_NETFILTER_DIR = "/proc/sys/net/bridge"
IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"
_KEYS = ("forwarding", "rp_filter", "accept_local", "send_redirects", "route_localnet", "accept_redirects",
         "ignore_routes_with_linkdown")
# Where a DeviceConf's arrays keep each value: IFLA_INET_CONF's at
# IPV4_DEVCONF_<KEY> - 1 (include/uapi/linux/ip.h), IFLA_INET6_CONF's at
# DEVCONF_<KEY> (include/uapi/linux/ipv6.h); both are the kernel's ints as
# the files print them, signed (the uapi calls IPv4's u32: a negative
# rp_filter is -1 in its file); tests/test_state_snapshot.py checks them
# against the files.
CONF4_INDEX = {"forwarding": 0, "accept_redirects": 3, "send_redirects": 5, "rp_filter": 7, "accept_local": 22,
               "route_localnet": 25, "ignore_routes_with_linkdown": 28}
CONF6_INDEX = {"forwarding": 0, "accept_ra": 3, "accept_redirects": 4, "disable_ipv6": 26,
               "ignore_routes_with_linkdown": 39}
_NAMESPACE_KEYS = {
    "forward_use_pmtu": ("/proc/sys/net/ipv4/ip_forward_use_pmtu", 0),
    "multipath_hash_policy": ("/proc/sys/net/ipv4/fib_multipath_hash_policy", 0),
    "forward_update_priority": ("/proc/sys/net/ipv4/ip_forward_update_priority", 1),
    "route_min_pmtu": ("/proc/sys/net/ipv4/route/min_pmtu", 552),
    "default_ttl": ("/proc/sys/net/ipv4/ip_default_ttl", 64),
    "ipv6_multipath_hash_policy": ("/proc/sys/net/ipv6/fib_multipath_hash_policy", 0),
    # br_netfilter's switches; the directory exists only with br_netfilter.
    "bridge_nf_call_iptables": ("/proc/sys/net/bridge/bridge-nf-call-iptables", 0),
    "bridge_nf_call_ip6tables": ("/proc/sys/net/bridge/bridge-nf-call-ip6tables", 0),
    "bridge_nf_call_arptables": ("/proc/sys/net/bridge/bridge-nf-call-arptables", 0),
}


def _read_int(path: str) -> int | None:
    try:
        with open(path, "rb", buffering=0) as f:
            return int(f.read().split()[0])
    except (FileNotFoundError, NotADirectoryError, IndexError, ValueError):
        return None


def _read_port_range() -> tuple[int, int]:
    """ip_local_port_range: "low<TAB>high" (the default where unreadable)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", "rb", buffering=0) as f:
            low, high = (int(word) for word in f.read().split()[:2])
        return low, high
    except (FileNotFoundError, ValueError):
        return 32768, 60999


def _read_conf(dev: str) -> dict[str, int] | None:
    values = {}
    for key in _KEYS:
        value = _read_int(f"{CONF_ROOT}/{dev}/{key}")
        if value is None:
            return None  # device vanished (or renamed) while we read it
        values[key] = value
    return values


def _values(raw: bytes, index: dict[str, int]) -> dict[str, int]:
    """The keys' values in a DeviceConf array (every kernel LinuxFP runs on,
    4.1 and later, has them all)."""
    if len(raw) < 4 * (max(index.values()) + 1):
        raise RuntimeError(f"a device configuration of {len(raw) // 4} values, fewer than this kernel "
                           "should send: the sysctls cannot be read")
    return {key: struct.unpack_from("=i", raw, 4 * i)[0] for key, i in index.items()}


def _conf4(conf: DeviceConf) -> dict[str, int] | None:
    """The device's IPv4 values; None where the kernel keeps no IPv4
    configuration for it."""
    return None if conf.ipv4 is None else _values(conf.ipv4, CONF4_INDEX)


def _conf6(conf: DeviceConf, linkdown_all: int) -> tuple[bool, bool, bool, bool]:
    """(IPv6 on, accepts redirects, ignores routes with link down, accepts
    router advertisements) for a device; all False where the kernel keeps
    no IPv6 configuration for it. (fib6_ignore_linkdown(): all || dev;
    ipv6_accept_ra(): forwarding ? accept_ra == 2 : accept_ra.)"""
    dev = None if conf.ipv6 is None else _values(conf.ipv6, CONF6_INDEX)
    if dev is None:
        return False, False, False, False
    forwarding = dev["forwarding"]
    return (not dev["disable_ipv6"], not forwarding and bool(dev["accept_redirects"]),
            bool(dev["ignore_routes_with_linkdown"] or linkdown_all),
            bool(dev["accept_ra"] == 2 if forwarding else dev["accept_ra"]))


# Each device's sysctls by its DeviceConf and the namespace-wide values they
# combine with: the 1 s poll reads every device, and one whose configuration
# did not change is not worked out again. A read of every device replaces
# it (what is gone goes); a read of some (an event's) adds to it.
_per_device: dict[tuple, InterfaceSysctls | None] = {}


def _ipv6_fields(conf: DeviceConf, linkdown6_all: int) -> dict[str, bool]:
    """InterfaceSysctls' IPv6 fields for a device."""
    ipv6, redirects, linkdown, ra = _conf6(conf, linkdown6_all)
    return {"ipv6": ipv6, "ipv6_accept_redirects": redirects, "ipv6_ignore_routes_with_linkdown": linkdown,
            "ipv6_accept_ra": ipv6 and ra}


# A device without IPv6 configuration's IPv6 fields (_conf6: all off).
_IPV6_OFF = _ipv6_fields(DeviceConf(0, ipv4=None, ipv6=None), 0)


def without_family(sysctls: Sysctls, ifindex: int, family: int) -> Sysctls:
    """`sysctls` as a read finds them once the kernel has torn the device's
    configuration of `family` down (RTM_DELNETCONF): no IPv4 configuration,
    no entry (_interface_sysctls); no IPv6 configuration, the IPv6 fields a
    device without one gets."""
    if family == AF_INET:
        return without_interface(sysctls, ifindex)
    found = sysctls.for_ifindex(ifindex)
    if found is None or family != AF_INET6:
        return sysctls
    off = replace(found, **_IPV6_OFF)
    if off == found:
        return sysctls
    return replace(sysctls, interfaces=tuple(off if s.ifindex == ifindex else s for s in sysctls.interfaces))


def without_interface(sysctls: Sysctls, ifindex: int) -> Sysctls:
    """`sysctls` without the device's entry (gone, or without IPv4)."""
    if sysctls.for_ifindex(ifindex) is None:
        return sysctls
    return replace(sysctls, interfaces=tuple(s for s in sysctls.interfaces if s.ifindex != ifindex))


def _interface_sysctls(conf: DeviceConf, every: dict[str, int], linkdown6_all: int) -> InterfaceSysctls | None:
    """A device's effective sysctls; None where the kernel keeps no IPv4
    configuration for it."""
    dev = _conf4(conf)
    if dev is None:
        return None
    return InterfaceSysctls(
        ifindex=conf.index,
        forwarding=bool(dev["forwarding"]),
        rp_filter=max(every["rp_filter"], dev["rp_filter"]),
        accept_local=bool(every["accept_local"] or dev["accept_local"]),
        send_redirects=bool(every["send_redirects"] or dev["send_redirects"]),
        route_localnet=bool(every["route_localnet"] or dev["route_localnet"]),
        accept_redirects=bool(every["accept_redirects"] and dev["accept_redirects"]) if dev["forwarding"]
        else bool(every["accept_redirects"] or dev["accept_redirects"]),
        ignore_routes_with_linkdown=bool(every["ignore_routes_with_linkdown"]
                                         or dev["ignore_routes_with_linkdown"]),
        **_ipv6_fields(conf, linkdown6_all),
    )


def read_sysctls(confs: Iterable[DeviceConf], every_device: bool = True) -> Sysctls:
    """Effective IPv4 forwarding sysctls for these devices (their
    DeviceConf as their RTM_NEWLINK carried it: state/read.py);
    `every_device`: the namespace's every device, not some of them."""
    every = _read_conf("all")
    if every is None:
        raise RuntimeError(
            f"{CONF_ROOT}/all is unreadable: /proc/sys must be mounted "
            "(procfs) and IPv4 enabled in this network namespace")
    ip_forward = _read_int(IP_FORWARD)
    linkdown6_all = _read_int(f"{CONF6_ROOT}/all/ignore_routes_with_linkdown") or 0
    global _per_device
    known, fresh = _per_device, {}
    namespace_wide = (tuple(every.items()), linkdown6_all)
    interfaces = []
    for conf in confs:
        key = (conf, namespace_wide)
        found = fresh[key] = known[key] if key in known else _interface_sysctls(conf, every, linkdown6_all)
        if found is not None:
            interfaces.append(found)
    if every_device:
        _per_device = fresh
    else:
        known.update(fresh)
    interfaces.sort(key=lambda s: s.ifindex)
    namespace = {}
    for field_name, (path, default) in _NAMESPACE_KEYS.items():
        value = _read_int(path)
        namespace[field_name] = default if value is None else value
    return Sysctls(ip_forward=bool(ip_forward), interfaces=tuple(interfaces),
                   forward_use_pmtu=bool(namespace["forward_use_pmtu"]),
                   multipath_hash_policy=namespace["multipath_hash_policy"],
                   forward_update_priority=bool(namespace["forward_update_priority"]),
                   route_min_pmtu=namespace["route_min_pmtu"],
                   default_ttl=namespace["default_ttl"],
                   local_port_range=_read_port_range(),
                   ipv6_multipath_hash_policy=namespace["ipv6_multipath_hash_policy"],
                   bridge_nf_call_iptables=bool(namespace["bridge_nf_call_iptables"]),
                   bridge_nf_call_ip6tables=bool(namespace["bridge_nf_call_ip6tables"]),
                   bridge_nf_call_arptables=bool(namespace["bridge_nf_call_arptables"]),
                   br_netfilter=br_netfilter_loaded())


def br_netfilter_loaded() -> bool:
    """Whether br_netfilter is there (built in, or its module loaded): its
    sysctl directory exists."""
    return os.path.isdir(BR_NETFILTER_DIR)
