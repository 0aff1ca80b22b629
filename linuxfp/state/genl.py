"""Device XDP capabilities from the "netdev" generic-netlink family.

NETDEV_CMD_DEV_GET reports NETDEV_A_DEV_XDP_FEATURES per device (kernel 6.3+).
Older kernels lack the family: every device then reads as 0 (unknown), which
the graph must treat as "cannot be an XDP redirect target".
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass
from typing import Self

from . import netlink as nl
from .decode import NETDEV_A_DEV_IFINDEX, NETDEV_CMD_DEV_GET, decode_netdev_dev

GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
CTRL_ATTR_MCAST_GROUPS = 7
CTRL_ATTR_MCAST_GRP_NAME = 1
CTRL_ATTR_MCAST_GRP_ID = 2

NETDEV_FAMILY_NAME = "netdev"
NETDEV_GENL_VERSION = 1
NETDEV_MGMT_GROUP = "mgmt"

_GENLMSGHDR = struct.Struct("=BBH")


@dataclass(frozen=True)
class GenlFamily:
    id: int
    groups: dict[str, int]


def genl_header(cmd: int, version: int) -> bytes:
    return _GENLMSGHDR.pack(cmd, version, 0)


def resolve_family(sock: nl.NetlinkSocket, name: str) -> GenlFamily | None:
    """Family id and multicast groups of a genl family; None when absent."""
    payload = genl_header(CTRL_CMD_GETFAMILY, 1) + nl.attr(
        CTRL_ATTR_FAMILY_NAME, name.encode() + b"\0")
    try:
        replies = sock.request(GENL_ID_CTRL, payload, dump=False)
    except nl.NetlinkError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    for reply in replies:
        a = nl.parse_attrs(reply.payload, _GENLMSGHDR.size)
        if CTRL_ATTR_FAMILY_ID not in a:
            continue
        groups: dict[str, int] = {}
        for _index, nest in nl.parse_attr_list(a.get(CTRL_ATTR_MCAST_GROUPS, b"")):
            g = nl.parse_attrs(nest)
            if CTRL_ATTR_MCAST_GRP_NAME in g and CTRL_ATTR_MCAST_GRP_ID in g:
                groups[nl.cstr(g[CTRL_ATTR_MCAST_GRP_NAME])] = nl.u32(g[CTRL_ATTR_MCAST_GRP_ID])
        return GenlFamily(nl.u16(a[CTRL_ATTR_FAMILY_ID]), groups)
    return None


class NetdevFamily:
    """A genl request socket for the netdev family (resolved once)."""

    def __init__(self) -> None:
        self.sock = nl.NetlinkSocket(nl.NETLINK_GENERIC)
        try:
            self.family = resolve_family(self.sock, NETDEV_FAMILY_NAME)
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def available(self) -> bool:
        return self.family is not None

    def dump_xdp_features(self) -> dict[int, tuple[int, int]]:
        """ifindex -> (NETDEV_XDP_ACT_* bits, NETDEV_XDP_RX_METADATA_* bits)
        for every device of this netns."""
        if self.family is None:
            return {}
        replies = self.sock.dump(self.family.id, genl_header(NETDEV_CMD_DEV_GET, NETDEV_GENL_VERSION))
        out: dict[int, tuple[int, int]] = {}
        for reply in replies:
            decoded = decode_netdev_dev(reply.payload)
            if decoded is not None:
                out[decoded[1]] = (decoded[2], decoded[3])
        return out

    def xdp_features(self, ifindex: int) -> tuple[int, int] | None:
        """One device's (XDP feature bits, rx-metadata bits); None when the
        device is gone or unknown."""
        if self.family is None:
            return None
        payload = genl_header(NETDEV_CMD_DEV_GET, NETDEV_GENL_VERSION) + nl.attr(
            NETDEV_A_DEV_IFINDEX, struct.pack("=I", ifindex))
        try:
            replies = self.sock.request(self.family.id, payload, dump=False)
        except nl.NetlinkError as exc:
            if exc.errno in (errno.ENODEV, errno.ENOENT, errno.EINVAL):
                return None
            raise
        for reply in replies:
            decoded = decode_netdev_dev(reply.payload)
            if decoded is not None and decoded[1] == ifindex:
                return decoded[2], decoded[3]
        return None
